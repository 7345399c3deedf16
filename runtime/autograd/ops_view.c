/* runtime/autograd/ops_view.c: recorded views (view, reshape, narrow, select, transpose, permute,
 * expand, squeeze, unsqueeze), copies (contiguous, clone) and conversions (to). Outputs of view
 * ops that share the input's storage are marked as views: in-place ops on them are refused while
 * they require grad. */
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops_internal.h"

/* Records r = a view-like op of t with context c (c_size bytes) and ends the op. */
static vl_status rec(const char *name, vl_backward_fn fn, vl_tensor *t, vl_tensor *r, const void *c, size_t c_size,
                     vl_tensor **out) {
  return vl_ag_out(VL_AG_RECORD(.name = name, .backward = fn, .nin = 1, .in = &t, .out = &r, .ctx = c,
                                .ctx_size = c_size, .view = true),
                   r, out);
}

/* ---- backward formulas ---- */

static vl_status identity_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  /* vl_ag_give sums over expanded dims and converts dtype/device back (expand, clone, to). */
  return vl_ag_give(n, 0, vl_tensor_retain(go[0]), gi);
}

static vl_status reshape_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  int nd;
  const int64_t *size = vl_ag_in_shape(n, 0, &nd);
  vl_tensor *r;
  VL_TRY(vl_reshape(go[0], nd, size, &r));
  return vl_ag_give(n, 0, r, gi);
}

typedef struct narrow_ctx {
  int dim;
  int64_t start; /* narrow: the start; select: the index */
  bool select;
} narrow_ctx;

static vl_status narrow_select_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const narrow_ctx *c = VL_AG_CTX(n, narrow_ctx);
  VL_FS(f);
  vl_tensor *z = F_RUN(vl_ag_zeros_in(n, 0, F_OUT));
  vl_tensor *v = c->select ? F_RUN(vl_select(z, c->dim, c->start, F_OUT))
                           : F_RUN(vl_narrow(z, c->dim, c->start, go[0]->size[c->dim], F_OUT));
  F_DO(vl_copy_(v, go[0])); /* g into its place in zeros of the input's shape */
  return vl_fs_give(f, n, 1, &z, gi);
}

typedef struct transpose_ctx {
  int d0, d1;
} transpose_ctx;

static vl_status transpose_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const transpose_ctx *c = VL_AG_CTX(n, transpose_ctx);
  vl_tensor *r;
  VL_TRY(vl_transpose(go[0], c->d0, c->d1, &r));
  return vl_ag_give(n, 0, r, gi);
}

typedef struct permute_ctx {
  int perm[VL_MAX_DIMS]; /* non-negative */
} permute_ctx;

static vl_status permute_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const permute_ctx *c = VL_AG_CTX(n, permute_ctx);
  int nd = go[0]->ndim, inv[VL_MAX_DIMS];
  for (int i = 0; i < nd; i++) inv[c->perm[i]] = i;
  vl_tensor *r;
  VL_TRY(vl_permute(go[0], nd, inv, &r));
  return vl_ag_give(n, 0, r, gi);
}

/* ---- ops ---- */

vl_status vl_ag_view(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_view(t, ndim, size, &r));
  return rec("ViewBackward", reshape_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_reshape(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_reshape(t, ndim, size, &r));
  return rec("ReshapeBackward", reshape_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_squeeze(vl_tensor *t, int dim, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_squeeze(t, dim, &r));
  return rec("SqueezeBackward", reshape_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_squeeze_all(vl_tensor *t, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_squeeze_all(t, &r));
  return rec("SqueezeBackward", reshape_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_unsqueeze(vl_tensor *t, int dim, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_unsqueeze(t, dim, &r));
  return rec("UnsqueezeBackward", reshape_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_narrow(vl_tensor *t, int dim, int64_t start, int64_t length, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_narrow(t, dim, start, length, &r));
  narrow_ctx c = {dim < 0 ? dim + t->ndim : dim, start, false};
  return rec("NarrowBackward", narrow_select_bw, t, r, &c, sizeof c, out);
}

vl_status vl_ag_select(vl_tensor *t, int dim, int64_t index, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_select(t, dim, index, &r));
  int d = dim < 0 ? dim + t->ndim : dim;
  narrow_ctx c = {d, index < 0 ? index + t->size[d] : index, true};
  return rec("SelectBackward", narrow_select_bw, t, r, &c, sizeof c, out);
}

vl_status vl_ag_transpose(vl_tensor *t, int d0, int d1, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_transpose(t, d0, d1, &r));
  transpose_ctx c = {d0, d1};
  return rec("TransposeBackward", transpose_bw, t, r, &c, sizeof c, out);
}

vl_status vl_ag_permute(vl_tensor *t, int ndim, const int *perm, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_permute(t, ndim, perm, &r));
  permute_ctx c = {{0}};
  for (int i = 0; i < ndim; i++) c.perm[i] = perm[i] < 0 ? perm[i] + ndim : perm[i];
  return rec("PermuteBackward", permute_bw, t, r, &c, sizeof c, out);
}

vl_status vl_ag_expand(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_expand(t, ndim, size, &r));
  return rec("ExpandBackward", identity_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_contiguous(vl_tensor *t, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_contiguous(t, &r));
  if (r == t) return vl_ag_out(VL_OK, r, out); /* already contiguous: t itself, same history */
  return rec("CloneBackward", identity_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_clone(vl_tensor *t, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_clone(t, &r));
  return rec("CloneBackward", identity_bw, t, r, NULL, 0, out);
}

vl_status vl_ag_to(vl_tensor *t, vl_dtype dt, vl_device dev, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_to(t, dt, dev, &r));
  if (r == t) return vl_ag_out(VL_OK, r, out);
  return rec("ToCopyBackward", identity_bw, t, r, NULL, 0, out);
}
