/* runtime/autograd/ops_linalg.c: recorded matmul / bmm / addmm, gather / scatter_add /
 * index_select, cat / stack / split / chunk. */
#include <stdlib.h>
#include <string.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/autograd/ops_shape.h"
#include "runtime/ops/ops_internal.h"
#include "runtime/ops/shape.h"

static bool same_dims(const vl_tensor *t, int ndim, const int64_t *size) {
  if (t->ndim != ndim) return false;
  for (int i = 0; i < ndim; i++)
    if (t->size[i] != size[i]) return false;
  return true;
}

static vl_tensor *tr(vl_fs *f, vl_tensor *t) { return F_RUN(vl_transpose(t, -1, -2, F_OUT)); }
static vl_tensor *mm(vl_fs *f, vl_tensor *a, vl_tensor *b) { return F_RUN(vl_matmul(a, b, F_OUT)); }

/* ---- matmul ---- */

/* Whether the last two dims of t are column-major (a transposed row-major matrix: x:t(), w:t()). */
static bool col_major(const vl_tensor *t) {
  int d = t->ndim;
  return d >= 2 && t->size[d - 1] > 1 && t->size[d - 2] > 1 && t->stride[d - 2] == 1 && t->stride[d - 1] != 1;
}

/* One operand's gradient of a [..., m, k] @ b [..., k, n]: g @ b^T (left) or a^T @ g, times alpha.
 * When the operand itself is a transposed matrix (F.linear's w:t()), the gradient is computed in
 * that layout, (b g^T)^T or (g^T a)^T: the transpose's backward then hands the weight a contiguous
 * gradient instead of a transposed view that the accumulation copies (six strided copies per
 * BERT layer, 3 ms a BERT-Large step). */
static vl_tensor *mm_grad(vl_fs *f, bool left, vl_tensor *g, vl_tensor *other, const vl_tensor *self, double alpha) {
  vl_tensor *r;
  if (col_major(self)) {
    vl_tensor *gt = tr(f, g);
    vl_tensor *rt = left ? mm(f, other, gt) : mm(f, gt, other);
    r = tr(f, rt);
  } else {
    vl_tensor *ot = tr(f, other);
    r = left ? mm(f, g, ot) : mm(f, ot, g);
  }
  return alpha != 1.0 ? F_MULS(r, alpha) : r;
}

/* ga = g @ b^T, gb = a^T @ g for inputs ja, jb (batch dims broadcast: vl_ag_give sums them). */
static void mm_grads(vl_fs *f, vl_node *n, int ja, int jb, vl_tensor *g, vl_tensor *a, vl_tensor *b, double alpha,
                     vl_tensor **ga, vl_tensor **gb) {
  if (vl_ag_wants(n, ja)) *ga = mm_grad(f, true, g, b, a, alpha);
  if (vl_ag_wants(n, jb)) *gb = mm_grad(f, false, g, a, b, alpha);
}

/* g (shape [..., rows, cols] of the 2-D promoted operand; NULL: none) back to the shape of the
 * 1-D input j: the batch dims summed first, then the added dim (-2: a row, -1: a column) dropped. */
static vl_tensor *unpromote(vl_fs *f, vl_node *n, int j, int added_dim, vl_tensor *g) {
  if (!g) return NULL;
  int nd;
  int64_t k = vl_ag_in_shape(n, j, &nd)[0];
  int64_t sz[2] = {added_dim == -2 ? 1 : k, added_dim == -2 ? k : 1};
  vl_tensor *t = F_RUN(vl_sum_to_size(g, 2, sz, F_OUT));
  return F_RUN(vl_reshape(t, 1, &k, F_OUT));
}

static vl_tensor *unsqueeze(vl_fs *f, vl_tensor *t, int dim) { return F_RUN(vl_unsqueeze(t, dim, F_OUT)); }

/* Saved: a, b (also for mm, which shares this formula). */
static vl_status matmul_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *sv[2], *g = go[0], *gr[2] = {0};
  VL_TRY(vl_node_saved_n(n, 2, sv));
  vl_tensor *a = sv[0], *b = sv[1];
  VL_FS(f);
  if (a->ndim == 1 && b->ndim == 1) { /* dot: g is 0-dim */
    if (vl_ag_wants(n, 0)) gr[0] = F_MUL(b, g);
    if (vl_ag_wants(n, 1)) gr[1] = F_MUL(a, g);
    return vl_fs_give(f, n, 2, gr, gi);
  }
  /* 1-D operands as 1 x k / k x 1 matrices; g gets the removed dims back. */
  vl_tensor *a2 = a->ndim == 1 ? unsqueeze(f, a, 0) : a;
  vl_tensor *b2 = b->ndim == 1 ? unsqueeze(f, b, 1) : b;
  vl_tensor *g1 = a->ndim == 1 ? unsqueeze(f, g, g->ndim - (b->ndim == 1 ? 0 : 1)) : g;
  vl_tensor *g2 = b->ndim == 1 ? unsqueeze(f, g1, g->ndim + (a->ndim == 1)) : g1; /* at g1's end */
  mm_grads(f, n, 0, 1, g2, a2, b2, 1.0, &gr[0], &gr[1]);
  if (a->ndim == 1) gr[0] = unpromote(f, n, 0, -2, gr[0]);
  if (b->ndim == 1) gr[1] = unpromote(f, n, 1, -1, gr[1]);
  return vl_fs_give(f, n, 2, gr, gi);
}

static vl_status rec_mm(const char *name, vl_backward_fn fn, vl_tensor *a, vl_tensor *b, vl_tensor *r, vl_tensor **out) {
  vl_tensor *in[2] = {a, b};
  return vl_ag_out(VL_AG_RECORD(.name = name, .backward = fn, .nin = 2, .in = in, .out = &r, .save = {a, b}), r, out);
}

vl_status vl_ag_matmul(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  VL_AUTOCAST(VL_AC_MATMUL, vl_ag_matmul(vl_ac[0], vl_ac[1], out), a, b);
  vl_tensor *r;
  VL_TRY(vl_matmul(a, b, &r));
  return rec_mm("MatmulBackward", matmul_bw, a, b, r, out);
}

vl_status vl_ag_mm(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  VL_AUTOCAST(VL_AC_MM, vl_ag_mm(vl_ac[0], vl_ac[1], out), a, b);
  vl_tensor *r;
  VL_TRY(vl_mm(a, b, &r));
  return rec_mm("MmBackward", matmul_bw, a, b, r, out);
}

static vl_status bmm_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *sv[2], *gr[2] = {0};
  VL_TRY(vl_node_saved_n(n, 2, sv));
  VL_FS(f);
  mm_grads(f, n, 0, 1, go[0], sv[0], sv[1], 1.0, &gr[0], &gr[1]);
  return vl_fs_give(f, n, 2, gr, gi);
}

vl_status vl_ag_bmm(vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  VL_AUTOCAST(VL_AC_BMM, vl_ag_bmm(vl_ac[0], vl_ac[1], out), a, b);
  vl_tensor *r;
  VL_TRY(vl_bmm(a, b, &r));
  return rec_mm("BmmBackward", bmm_bw, a, b, r, out);
}

typedef struct addmm_ctx {
  double beta, alpha; /* beta bias + alpha a @ b */
} addmm_ctx;

/* Inputs: 0 bias, 1 a, 2 b. Saved: a, b. */
static vl_status addmm_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const addmm_ctx *c = VL_AG_CTX(n, addmm_ctx);
  vl_tensor *sv[2], *gr[3] = {0};
  VL_TRY(vl_node_saved_n(n, 2, sv));
  VL_FS(f);
  if (vl_ag_wants(n, 0)) gr[0] = c->beta == 1.0 ? go[0] : F_MULS(go[0], c->beta);
  mm_grads(f, n, 1, 2, go[0], sv[0], sv[1], c->alpha, &gr[1], &gr[2]);
  return vl_fs_give(f, n, 3, gr, gi);
}

vl_status vl_ag_addmm(vl_tensor *bias, vl_tensor *a, vl_tensor *b, double beta, double alpha, vl_tensor **out) {
  VL_AUTOCAST(VL_AC_ADDMM, vl_ag_addmm(vl_ac[0], vl_ac[1], vl_ac[2], beta, alpha, out), bias, a, b);
  vl_tensor *r, *in[3] = {bias, a, b};
  VL_TRY(vl_addmm(bias, a, b, beta, alpha, &r));
  addmm_ctx c = {beta, alpha};
  return vl_ag_out(VL_AG_RECORD(.name = "AddmmBackward", .backward = addmm_bw, .nin = 3, .in = in, .out = &r,
                                .save = {a, b}, VL_AG_CTX_OF(c)),
                   r, out);
}

/* ---- gather / scatter_add / index_select ---- */

typedef struct dim_ctx {
  int dim;
} dim_ctx;

/* zeros of input j's shape with g scattered (added) at index along dim. */
static vl_tensor *scatter_into_zeros(vl_fs *f, vl_node *n, int j, int dim, vl_tensor *index, vl_tensor *g) {
  int nd;
  const int64_t *size = vl_ag_in_shape(n, j, &nd);
  vl_tensor *z = F_RUN(vl_zeros(nd, size, g->dtype, g->storage->device, F_OUT));
  F_DO(vl_scatter_add_(z, dim, index, g));
  return z;
}

/* Saved: index. */
static vl_status gather_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *index;
  VL_TRY(vl_node_saved(n, 0, &index));
  VL_FS(f);
  vl_tensor *r = scatter_into_zeros(f, n, 0, VL_AG_CTX(n, dim_ctx)->dim, index, go[0]);
  return vl_fs_give(f, n, 1, &r, gi);
}

vl_status vl_ag_gather(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  return vl_ag_gather_as("gather", src, dim, index, out);
}

vl_status vl_ag_gather_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_gather_as(op, src, dim, index, &r));
  dim_ctx c = {dim};
  return vl_ag_out(VL_AG_RECORD(.name = "GatherBackward", .backward = gather_bw, .nin = 1, .in = &src, .out = &r,
                                .save = {index}, VL_AG_CTX_OF(c)),
                   r, out);
}

/* Inputs: 0 self, 1 src. Saved: index. The gradient of src is g gathered at index, zero where
 * index does not reach (index may be smaller than src). */
static vl_status scatter_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *index;
  VL_TRY(vl_node_saved(n, 0, &index));
  if (vl_ag_wants(n, 0)) VL_TRY(vl_ag_give(n, 0, vl_tensor_retain(go[0]), gi));
  if (!vl_ag_wants(n, 1)) return VL_OK;
  VL_FS(f);
  vl_tensor *t = F_RUN(vl_gather(go[0], VL_AG_CTX(n, dim_ctx)->dim, index, F_OUT)), *gr[2] = {NULL, t};
  int nd;
  const int64_t *size = vl_ag_in_shape(n, 1, &nd);
  if (t && !same_dims(t, nd, size)) { /* t copied into the leading corner of zeros of src's shape */
    vl_tensor *z = F_RUN(vl_zeros(nd, size, t->dtype, t->storage->device, F_OUT)), *v = z;
    for (int d = 0; d < t->ndim; d++) v = F_RUN(vl_narrow(v, d, 0, t->size[d], F_OUT));
    F_DO(vl_copy_(v, t));
    gr[1] = z;
  }
  return vl_fs_give(f, n, 2, gr, gi); /* input 0 had its gradient above */
}

static vl_status rec_scatter(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor *y) {
  vl_tensor *in[2] = {self, src};
  dim_ctx c = {dim};
  return VL_AG_RECORD(.name = "ScatterAddBackward", .backward = scatter_bw, .nin = 2, .in = in, .out = &y,
                      .save = {index}, VL_AG_CTX_OF(c));
}

vl_status vl_ag_scatter_add(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_scatter_add(self, dim, index, src, &r));
  return vl_ag_out(rec_scatter(self, dim, index, src, r), r, out);
}

vl_status vl_ag_scatter_add_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src) {
  vl_tensor *in[2] = {self, src};
  bool rec = vl_dtype_is_float(self->dtype) && vl_ag_needs(2, in);
  VL_TRY(vl_ag_check_inplace("scatter_add_", self, rec));
  VL_TRY(vl_scatter_add_(self, dim, index, src));
  return rec ? rec_scatter(self, dim, index, src, self) : VL_OK;
}

/* Saved: index. index_add into zeros: the 1-D index viewed along dim and expanded over g. */
static vl_status index_select_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *index, *g = go[0];
  VL_TRY(vl_node_saved(n, 0, &index));
  int dim = VL_AG_CTX(n, dim_ctx)->dim;
  int64_t shape[VL_MAX_DIMS];
  for (int i = 0; i < g->ndim; i++) shape[i] = i == dim ? g->size[i] : 1;
  VL_FS(f);
  vl_tensor *iv = F_RUN(vl_reshape(index, g->ndim, shape, F_OUT));
  vl_tensor *ix = F_RUN(vl_expand(iv, g->ndim, g->size, F_OUT));
  vl_tensor *r = scatter_into_zeros(f, n, 0, dim, ix, g);
  return vl_fs_give(f, n, 1, &r, gi);
}

vl_status vl_ag_index_select(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  return vl_ag_index_select_as("index_select", src, dim, index, out);
}

vl_status vl_ag_index_select_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_index_select_as(op, src, dim, index, &r));
  dim_ctx c = {dim < 0 ? dim + src->ndim : dim};
  return vl_ag_out(VL_AG_RECORD(.name = "IndexSelectBackward", .backward = index_select_bw, .nin = 1, .in = &src,
                                .out = &r, .save = {index}, VL_AG_CTX_OF(c)),
                   r, out);
}

/* ---- cat / stack ---- */

typedef struct cat_ctx {
  int dim;
  bool stack;
  int64_t off[]; /* nin + 1 offsets along dim */
} cat_ctx;

static vl_status cat_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const cat_ctx *c = VL_AG_CTX(n, cat_ctx);
  for (int j = 0; j < n->nin; j++) {
    if (!vl_ag_wants(n, j)) continue;
    int nd;
    vl_ag_in_shape(n, j, &nd);
    int64_t len = c->off[j + 1] - c->off[j];
    vl_tensor *piece;
    if (c->stack) VL_TRY(vl_select(go[0], c->dim, j, &piece));
    else if (len == 0 && nd == 1) continue; /* an empty 1-D piece, skipped by cat */
    else VL_TRY(vl_narrow(go[0], c->dim, c->off[j], len, &piece));
    VL_TRY(vl_ag_give(n, j, piece, gi));
  }
  return VL_OK;
}

static vl_status join(int n, vl_tensor *const *ts, int dim, bool stack, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(stack ? vl_stack(n, ts, dim, &r) : vl_cat(n, ts, dim, &r));
  if (!vl_ag_needs(n, ts)) return vl_ag_out(VL_OK, r, out);
  size_t size = sizeof(cat_ctx) + sizeof(int64_t) * ((size_t)n + 1);
  cat_ctx *c = malloc(size);
  if (!c) return vl_ag_out(vl_fail(VL_EOOM, "%s: out of host memory", stack ? "stack" : "cat"), r, out);
  c->dim = dim < 0 ? dim + r->ndim : dim;
  c->stack = stack;
  c->off[0] = 0;
  for (int i = 0; i < n; i++) {
    bool skipped = !stack && ts[i]->ndim == 1 && ts[i]->size[0] == 0 && r->ndim != 1;
    c->off[i + 1] = c->off[i] + (stack || skipped ? 0 : ts[i]->size[c->dim]);
  }
  vl_status s = VL_AG_RECORD(.name = stack ? "StackBackward" : "CatBackward", .backward = cat_bw, .nin = n, .in = ts,
                             .out = &r, .ctx = c, .ctx_size = size);
  free(c);
  return vl_ag_out(s, r, out);
}

vl_status vl_ag_cat(int n, vl_tensor *const *ts, int dim, vl_tensor **out) { return join(n, ts, dim, false, out); }
vl_status vl_ag_stack(int n, vl_tensor *const *ts, int dim, vl_tensor **out) { return join(n, ts, dim, true, out); }

/* ---- split / chunk: one node, one output per piece ---- */

/* Each piece's gradient into its place in zeros of the input's shape. Threaded by hand, not in a
 * formula scope: one view per piece, as many as the split made (more than VL_FS_MAX). */
static vl_status split_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  int dim = VL_AG_CTX(n, dim_ctx)->dim;
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
  return vl_ag_give_n(n, s, 1, &z, gi);
}

/* The pieces are views of t (in-place ops on them are refused while they require grad). */
static vl_status split_done(const char *name, vl_tensor *t, int dim, vl_tensor **arr, int count, vl_tensor ***outs,
                            int *n) {
  dim_ctx c = {dim < 0 ? dim + t->ndim : dim};
  vl_status s = VL_OK;
  if (count > 0)
    s = VL_AG_RECORD(.name = name, .backward = split_bw, .nin = 1, .in = &t, .nout = count, .out = arr,
                     .view = true, VL_AG_CTX_OF(c));
  if (s != VL_OK) {
    for (int i = 0; i < count; i++) vl_tensor_release(arr[i]);
    free(arr);
    return s;
  }
  *outs = arr;
  if (n) *n = count;
  return VL_OK;
}

vl_status vl_ag_split(vl_tensor *t, int64_t split_size, int dim, vl_tensor ***outs, int *n) {
  vl_tensor **arr;
  int count;
  VL_TRY(vl_split(t, split_size, dim, &arr, &count));
  return split_done("SplitBackward", t, dim, arr, count, outs, n);
}

vl_status vl_ag_chunk(vl_tensor *t, int chunks, int dim, vl_tensor ***outs, int *n) {
  vl_tensor **arr;
  int count;
  VL_TRY(vl_chunk(t, chunks, dim, &arr, &count));
  return split_done("SplitBackward", t, dim, arr, count, outs, n);
}

/* torch.split with a list of sizes: the same node as split, PyTorch's name */
vl_status vl_ag_split_sizes(vl_tensor *t, int n, const int64_t *sizes, int dim, vl_tensor ***outs) {
  vl_tensor **arr;
  VL_TRY(vl_split_sizes(t, n, sizes, dim, &arr));
  return split_done("SplitWithSizesBackward", t, dim, arr, n, outs, NULL);
}
