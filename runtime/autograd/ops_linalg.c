/* runtime/autograd/ops_linalg.c: recorded matmul / bmm / addmm, gather / scatter_add /
 * index_select, cat / stack / split / chunk. */
#include <stdlib.h>
#include <string.h>

#include "runtime/autograd/ops.h"
#include "runtime/ops/ops_internal.h"

static vl_status done(vl_status s, vl_tensor *r, vl_tensor **out) {
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

/* Saves the listed tensors and finishes n with output y (releasing n on failure). */
static vl_status save_finish(vl_node *n, int nsave, vl_tensor *const *save, vl_tensor *y) {
  vl_status s = VL_OK;
  for (int i = 0; i < nsave && s == VL_OK; i++) s = vl_node_save(n, save[i]);
  if (s != VL_OK) {
    vl_node_release(n);
    return s;
  }
  return vl_ag_finish(n, 1, &y);
}

static bool same_dims(const vl_tensor *t, int ndim, const int64_t *size) {
  if (t->ndim != ndim) return false;
  for (int i = 0; i < ndim; i++)
    if (t->size[i] != size[i]) return false;
  return true;
}

static vl_status tr(vl_tensor *t, vl_tensor **o) { return vl_transpose(t, -1, -2, o); }

/* ---- matmul ---- */

/* ga = g @ b^T, gb = a^T @ g for a [..., m, k], b [..., k, n] (batch dims broadcast), then each
 * summed to its operand's shape by vl_ag_give. Scaled by alpha when alpha != 1. */
static vl_status mm_grads(vl_node *n, int ja, int jb, vl_tensor *g, vl_tensor *a, vl_tensor *b, double alpha,
                          vl_tensor **ga, vl_tensor **gb) {
  vl_tensor *t = NULL, *r = NULL;
  vl_status s = VL_OK;
  if (vl_ag_wants(n, ja)) {
    s = tr(b, &t);
    if (s == VL_OK) s = vl_matmul(g, t, &r);
    vl_tensor_release(t);
    t = NULL;
    if (s == VL_OK && alpha != 1.0) {
      s = vl_binary_scalar(VL_BIN_MUL, r, alpha, false, &t);
      vl_tensor_release(r);
      r = t;
      t = NULL;
    }
    if (s != VL_OK) return done(s, r, ga);
    *ga = r;
    r = NULL;
  }
  if (vl_ag_wants(n, jb)) {
    s = tr(a, &t);
    if (s == VL_OK) s = vl_matmul(t, g, &r);
    vl_tensor_release(t);
    t = NULL;
    if (s == VL_OK && alpha != 1.0) {
      s = vl_binary_scalar(VL_BIN_MUL, r, alpha, false, &t);
      vl_tensor_release(r);
      r = t;
    }
    if (s != VL_OK) return done(s, r, gb);
    *gb = r;
  }
  return VL_OK;
}

/* Gives g (2-D or batched, shape [..., rows, cols] of the promoted operand) to input j after
 * removing the dim a 1-D operand was given (squeeze_dim, or -99 for none). */
static vl_status give_mm(vl_node *n, int j, vl_tensor *g, int squeeze_dim, vl_tensor **gi) {
  if (!g) return VL_OK;
  const vl_node *to = n->next[j].node;
  int nr = n->next[j].input_nr;
  vl_tensor *r = g;
  if (squeeze_dim != -99) {
    /* Sum the batch dims first (to the 2-D promoted shape), then drop the added dim. */
    int64_t sz[2];
    int64_t k = to->out_size[nr][0];
    sz[0] = squeeze_dim == -2 ? 1 : k;
    sz[1] = squeeze_dim == -2 ? k : 1;
    vl_tensor *t;
    vl_status s = vl_sum_to_size(g, 2, sz, &t);
    vl_tensor_release(g);
    if (s != VL_OK) return s;
    s = vl_reshape(t, 1, &k, &r);
    vl_tensor_release(t);
    if (s != VL_OK) return s;
  }
  return vl_ag_give(n, j, r, gi);
}

static vl_status matmul_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *a, *b, *g = go[0];
  VL_TRY(vl_node_saved(n, 0, &a));
  VL_TRY(vl_node_saved(n, 1, &b));
  vl_tensor *a2 = NULL, *b2 = NULL, *g2 = NULL, *t = NULL, *ga = NULL, *gb = NULL;
  vl_status s = VL_OK;
  if (a->ndim == 1 && b->ndim == 1) { /* dot: g is 0-dim */
    if (vl_ag_wants(n, 0)) s = vl_binary(VL_BIN_MUL, b, g, 1.0, &ga);
    if (s == VL_OK && vl_ag_wants(n, 1)) s = vl_binary(VL_BIN_MUL, a, g, 1.0, &gb);
  } else {
    /* 1-D operands as 1 x k / k x 1 matrices; g gets the removed dims back. */
    s = a->ndim == 1 ? vl_unsqueeze(a, 0, &a2) : (a2 = vl_tensor_retain(a), VL_OK);
    if (s == VL_OK) s = b->ndim == 1 ? vl_unsqueeze(b, 1, &b2) : (b2 = vl_tensor_retain(b), VL_OK);
    if (s == VL_OK) s = a->ndim == 1 ? vl_unsqueeze(g, g->ndim - (b->ndim == 1 ? 0 : 1), &t) : (t = vl_tensor_retain(g), VL_OK);
    if (s == VL_OK) s = b->ndim == 1 ? vl_unsqueeze(t, t->ndim, &g2) : (g2 = vl_tensor_retain(t), VL_OK);
    if (s == VL_OK) s = mm_grads(n, 0, 1, g2, a2, b2, 1.0, &ga, &gb);
  }
  vl_tensor_release(a2);
  vl_tensor_release(b2);
  vl_tensor_release(g2);
  vl_tensor_release(t);
  bool promote = !(a->ndim == 1 && b->ndim == 1);
  if (s == VL_OK) s = give_mm(n, 0, ga, promote && a->ndim == 1 ? -2 : -99, gi);
  else vl_tensor_release(ga);
  if (s == VL_OK) return give_mm(n, 1, gb, promote && b->ndim == 1 ? -1 : -99, gi);
  vl_tensor_release(gb);
  return s;
}

vl_status vl_ag_matmul(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_matmul(a, b, &r));
  vl_tensor *in[2] = {a, b};
  if (!vl_ag_needs(2, in)) return done(VL_OK, r, out);
  vl_node *n;
  vl_status s = vl_node_create("MatmulBackward", matmul_bw, 2, in, 1, &n);
  if (s == VL_OK) s = save_finish(n, 2, in, r);
  return done(s, r, out);
}

vl_status vl_ag_mm(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_mm(a, b, &r));
  vl_tensor *in[2] = {a, b};
  if (!vl_ag_needs(2, in)) return done(VL_OK, r, out);
  vl_node *n;
  vl_status s = vl_node_create("MmBackward", matmul_bw, 2, in, 1, &n);
  if (s == VL_OK) s = save_finish(n, 2, in, r);
  return done(s, r, out);
}

static vl_status bmm_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *a, *b, *ga = NULL, *gb = NULL;
  VL_TRY(vl_node_saved(n, 0, &a));
  VL_TRY(vl_node_saved(n, 1, &b));
  vl_status s = mm_grads(n, 0, 1, go[0], a, b, 1.0, &ga, &gb);
  if (s == VL_OK) s = vl_ag_give(n, 0, ga, gi);
  else vl_tensor_release(ga);
  if (s == VL_OK) return vl_ag_give(n, 1, gb, gi);
  vl_tensor_release(gb);
  return s;
}

vl_status vl_ag_bmm(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_bmm(a, b, &r));
  vl_tensor *in[2] = {a, b};
  if (!vl_ag_needs(2, in)) return done(VL_OK, r, out);
  vl_node *n;
  vl_status s = vl_node_create("BmmBackward", bmm_bw, 2, in, 1, &n);
  if (s == VL_OK) s = save_finish(n, 2, in, r);
  return done(s, r, out);
}

/* Inputs: 0 bias, 1 a, 2 b. scalars: 0 beta, 1 alpha. */
static vl_status addmm_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *a, *b, *ga = NULL, *gb = NULL, *gbias = NULL;
  VL_TRY(vl_node_saved(n, 0, &a));
  VL_TRY(vl_node_saved(n, 1, &b));
  double beta = n->scalars[0], alpha = n->scalars[1];
  vl_status s = VL_OK;
  if (vl_ag_wants(n, 0))
    s = beta == 1.0 ? (gbias = vl_tensor_retain(go[0]), VL_OK) : vl_binary_scalar(VL_BIN_MUL, go[0], beta, false, &gbias);
  if (s == VL_OK) s = mm_grads(n, 1, 2, go[0], a, b, alpha, &ga, &gb);
  if (s == VL_OK) s = vl_ag_give(n, 0, gbias, gi);
  else vl_tensor_release(gbias);
  if (s == VL_OK) s = vl_ag_give(n, 1, ga, gi);
  else vl_tensor_release(ga);
  if (s == VL_OK) return vl_ag_give(n, 2, gb, gi);
  vl_tensor_release(gb);
  return s;
}

vl_status vl_ag_addmm(vl_tensor *bias, vl_tensor *a, vl_tensor *b, double beta, double alpha, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_addmm(bias, a, b, beta, alpha, &r));
  vl_tensor *in[3] = {bias, a, b};
  if (!vl_ag_needs(3, in)) return done(VL_OK, r, out);
  vl_node *n;
  vl_status s = vl_node_create("AddmmBackward", addmm_bw, 3, in, 1, &n);
  if (s == VL_OK) {
    n->scalars[0] = beta;
    n->scalars[1] = alpha;
    s = save_finish(n, 2, in + 1, r);
  }
  return done(s, r, out);
}

/* ---- gather / scatter_add / index_select ---- */

/* zeros of input j's shape with g scattered (added) at index along dim. */
static vl_status scatter_into_zeros(vl_node *n, int j, int dim, vl_tensor *index, vl_tensor *g, vl_tensor **out) {
  const vl_node *to = n->next[j].node;
  int nr = n->next[j].input_nr;
  vl_tensor *z;
  VL_TRY(vl_zeros(to->out_ndim[nr], to->out_size[nr], g->dtype, g->storage->device, &z));
  vl_status s = vl_scatter_add_(z, dim, index, g);
  return done(s, z, out);
}

static vl_status gather_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *index, *r = NULL;
  VL_TRY(vl_node_saved(n, 0, &index));
  VL_TRY(scatter_into_zeros(n, 0, (int)n->ints[0], index, go[0], &r));
  return vl_ag_give(n, 0, r, gi);
}

vl_status vl_ag_gather(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_gather(src, dim, index, &r));
  if (!vl_dtype_is_float(r->dtype) || !vl_ag_needs(1, &src)) return done(VL_OK, r, out);
  vl_node *n;
  vl_status s = vl_node_create("GatherBackward", gather_bw, 1, &src, 1, &n);
  if (s == VL_OK) {
    n->ints[0] = dim;
    s = save_finish(n, 1, &index, r);
  }
  return done(s, r, out);
}

/* Inputs: 0 self, 1 src. The gradient of src is g gathered at index, zero where index does not
 * reach (index may be smaller than src). */
static vl_status scatter_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *index, *t = NULL, *z = NULL;
  VL_TRY(vl_node_saved(n, 0, &index));
  if (vl_ag_wants(n, 0)) VL_TRY(vl_ag_give(n, 0, vl_tensor_retain(go[0]), gi));
  if (!vl_ag_wants(n, 1)) return VL_OK;
  VL_TRY(vl_gather(go[0], (int)n->ints[0], index, &t));
  const vl_node *to = n->next[1].node;
  int nr = n->next[1].input_nr;
  if (same_dims(t, to->out_ndim[nr], to->out_size[nr])) return vl_ag_give(n, 1, t, gi);
  vl_status s = vl_zeros(to->out_ndim[nr], to->out_size[nr], t->dtype, t->storage->device, &z);
  vl_tensor *v = s == VL_OK ? vl_tensor_retain(z) : NULL;
  for (int d = 0; d < t->ndim && s == VL_OK; d++) {
    vl_tensor *w;
    s = vl_narrow(v, d, 0, t->size[d], &w);
    vl_tensor_release(v);
    v = s == VL_OK ? w : NULL;
  }
  if (s == VL_OK) s = vl_copy_(v, t);
  vl_tensor_release(v);
  vl_tensor_release(t);
  if (s != VL_OK) {
    vl_tensor_release(z);
    return s;
  }
  return vl_ag_give(n, 1, z, gi);
}

static vl_status rec_scatter(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor *y) {
  vl_tensor *in[2] = {self, src};
  if (!vl_dtype_is_float(y->dtype) || !vl_ag_needs(2, in)) return VL_OK;
  vl_node *n;
  VL_TRY(vl_node_create("ScatterAddBackward", scatter_bw, 2, in, 1, &n));
  n->ints[0] = dim;
  return save_finish(n, 1, &index, y);
}

vl_status vl_ag_scatter_add(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_scatter_add(self, dim, index, src, &r));
  return done(rec_scatter(self, dim, index, src, r), r, out);
}

vl_status vl_ag_scatter_add_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src) {
  vl_tensor *in[2] = {self, src};
  bool rec = vl_dtype_is_float(self->dtype) && vl_ag_needs(2, in);
  VL_TRY(vl_ag_check_inplace("scatter_add_", self, rec));
  VL_TRY(vl_scatter_add_(self, dim, index, src));
  return rec ? rec_scatter(self, dim, index, src, self) : VL_OK;
}

/* index_add into zeros: the 1-D index viewed along dim and expanded over g's shape. */
static vl_status index_select_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *index, *g = go[0], *v = NULL, *e = NULL, *r = NULL;
  VL_TRY(vl_node_saved(n, 0, &index));
  int dim = (int)n->ints[0];
  int64_t shape[VL_MAX_DIMS];
  for (int i = 0; i < g->ndim; i++) shape[i] = i == dim ? g->size[i] : 1;
  vl_status s = vl_reshape(index, g->ndim, shape, &v);
  if (s == VL_OK) s = vl_expand(v, g->ndim, g->size, &e);
  if (s == VL_OK) s = scatter_into_zeros(n, 0, dim, e, g, &r);
  vl_tensor_release(v);
  vl_tensor_release(e);
  if (s != VL_OK) return s;
  return vl_ag_give(n, 0, r, gi);
}

vl_status vl_ag_index_select(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_index_select(src, dim, index, &r));
  if (!vl_dtype_is_float(r->dtype) || !vl_ag_needs(1, &src)) return done(VL_OK, r, out);
  vl_node *n;
  vl_status s = vl_node_create("IndexSelectBackward", index_select_bw, 1, &src, 1, &n);
  if (s == VL_OK) {
    n->ints[0] = dim < 0 ? dim + src->ndim : dim;
    s = save_finish(n, 1, &index, r);
  }
  return done(s, r, out);
}

/* ---- cat / stack ---- */

/* ctx: int64 offsets along dim per input (n + 1 of them). ints: 0 dim, 1 stack. */
static void free_ctx(vl_node *n) { free(n->ctx); }

static vl_status cat_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const int64_t *off = (const int64_t *)n->ctx;
  int dim = (int)n->ints[0];
  bool stack = n->ints[1] != 0;
  for (int j = 0; j < n->nin; j++) {
    if (!vl_ag_wants(n, j)) continue;
    vl_tensor *piece;
    if (stack) VL_TRY(vl_select(go[0], dim, j, &piece));
    else if (off[j + 1] - off[j] == 0 && n->next[j].node->out_ndim[n->next[j].input_nr] == 1) continue; /* skipped */
    else VL_TRY(vl_narrow(go[0], dim, off[j], off[j + 1] - off[j], &piece));
    VL_TRY(vl_ag_give(n, j, piece, gi));
  }
  return VL_OK;
}

static vl_status join(int n, vl_tensor *const *ts, int dim, bool stack, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(stack ? vl_stack(n, ts, dim, &r) : vl_cat(n, ts, dim, &r));
  if (!vl_dtype_is_float(r->dtype) || !vl_ag_needs(n, ts)) return done(VL_OK, r, out);
  int d = dim < 0 ? dim + r->ndim : dim;
  int64_t *off = malloc(sizeof(int64_t) * ((size_t)n + 1));
  if (!off) return done(vl_fail(VL_EOOM, "%s: out of host memory", stack ? "stack" : "cat"), r, out);
  off[0] = 0;
  for (int i = 0; i < n; i++) {
    bool skipped = !stack && ts[i]->ndim == 1 && ts[i]->size[0] == 0 && r->ndim != 1;
    off[i + 1] = off[i] + (stack || skipped ? 0 : ts[i]->size[d]);
  }
  vl_node *nd;
  vl_status s = vl_node_create(stack ? "StackBackward" : "CatBackward", cat_bw, n, ts, 1, &nd);
  if (s != VL_OK) {
    free(off);
    return done(s, r, out);
  }
  nd->ctx = off;
  nd->ctx_free = free_ctx;
  nd->ints[0] = d;
  nd->ints[1] = stack;
  return done(vl_ag_finish(nd, 1, &r), r, out);
}

vl_status vl_ag_cat(int n, vl_tensor *const *ts, int dim, vl_tensor **out) { return join(n, ts, dim, false, out); }
vl_status vl_ag_stack(int n, vl_tensor *const *ts, int dim, vl_tensor **out) { return join(n, ts, dim, true, out); }

/* ---- split / chunk: one node, one output per piece ---- */

static vl_status split_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  int dim = (int)n->ints[0];
  vl_tensor *z;
  VL_TRY(vl_ag_zeros_in(n, 0, &z));
  int64_t at = 0;
  vl_status s = VL_OK;
  for (int i = 0; i < n->nout && s == VL_OK; i++) {
    int64_t len = n->out_size[i][dim];
    if (go[i] && len > 0) {
      vl_tensor *v;
      s = vl_narrow(z, dim, at, len, &v);
      if (s == VL_OK) s = vl_copy_(v, go[i]);
      vl_tensor_release(v);
    }
    at += len;
  }
  if (s != VL_OK) {
    vl_tensor_release(z);
    return s;
  }
  return vl_ag_give(n, 0, z, gi);
}

static vl_status rec_split(vl_tensor *t, int dim, vl_tensor **outs, int count) {
  if (!vl_dtype_is_float(t->dtype) || !vl_ag_needs(1, &t)) return VL_OK;
  vl_node *n;
  VL_TRY(vl_node_create("SplitBackward", split_bw, 1, &t, count, &n));
  n->ints[0] = dim < 0 ? dim + t->ndim : dim;
  VL_TRY(vl_ag_finish(n, count, outs));
  for (int i = 0; i < count; i++) vl_ag_mark_view(outs[i]);
  return VL_OK;
}

static vl_status split_done(vl_status s, vl_tensor **arr, int count, vl_tensor ***outs, int *n) {
  if (s != VL_OK) {
    for (int i = 0; i < count; i++) vl_tensor_release(arr[i]);
    free(arr);
    return s;
  }
  *outs = arr;
  *n = count;
  return VL_OK;
}

vl_status vl_ag_split(vl_tensor *t, int64_t split_size, int dim, vl_tensor ***outs, int *n) {
  vl_tensor **arr;
  int count;
  VL_TRY(vl_split(t, split_size, dim, &arr, &count));
  return split_done(rec_split(t, dim, arr, count), arr, count, outs, n);
}

vl_status vl_ag_chunk(vl_tensor *t, int chunks, int dim, vl_tensor ***outs, int *n) {
  vl_tensor **arr;
  int count;
  VL_TRY(vl_chunk(t, chunks, dim, &arr, &count));
  return split_done(rec_split(t, dim, arr, count), arr, count, outs, n);
}
