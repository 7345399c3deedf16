/* runtime/autograd/ops_view.c: recorded views (view, reshape, narrow, select, transpose, permute,
 * expand, squeeze, unsqueeze), copies (contiguous, clone) and conversions (to). Outputs of view
 * ops that share the input's storage are marked as views: in-place ops on them are refused while
 * they require grad. */
#include <stdlib.h>

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

/* The input's shape, from the metadata of the node the gradient goes to. */
static const int64_t *in_shape(const vl_node *n, int *ndim) {
  const vl_node *to = n->next[0].node;
  *ndim = to->out_ndim[n->next[0].input_nr];
  return to->out_size[n->next[0].input_nr];
}

/* Records out = view-like op of t; ints/ints2 are op parameters for the backward. */
static vl_status rec(const char *name, vl_backward_fn fn, vl_tensor *t, vl_tensor *r, const int64_t *ints, int nints) {
  if (!vl_dtype_is_float(r->dtype) || !vl_ag_needs(1, &t)) return VL_OK;
  vl_node *n;
  VL_TRY(vl_node_create(name, fn, 1, &t, 1, &n));
  for (int i = 0; i < nints; i++) n->ints[i] = ints[i];
  VL_TRY(vl_ag_finish(n, 1, &r));
  if (r->storage == t->storage) vl_ag_mark_view(r);
  return VL_OK;
}

/* ---- backward formulas ---- */

static vl_status identity_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  /* vl_ag_give sums over expanded dims and converts dtype/device back (expand, clone, to). */
  return vl_ag_give(n, 0, vl_tensor_retain(go[0]), gi);
}

static vl_status reshape_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  int nd;
  const int64_t *size = in_shape(n, &nd);
  vl_tensor *r;
  VL_TRY(vl_reshape(go[0], nd, size, &r));
  return vl_ag_give(n, 0, r, gi);
}

/* ints: 0 dim, 1 start (narrow) or index (select), 2 select? */
static vl_status narrow_select_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *z, *v = NULL;
  VL_TRY(vl_ag_zeros_in(n, 0, &z));
  int dim = (int)n->ints[0];
  vl_status s = n->ints[2] ? vl_select(z, dim, n->ints[1], &v) : vl_narrow(z, dim, n->ints[1], go[0]->size[dim], &v);
  if (s == VL_OK) s = vl_copy_(v, go[0]);
  vl_tensor_release(v);
  if (s != VL_OK) {
    vl_tensor_release(z);
    return s;
  }
  return vl_ag_give(n, 0, z, gi);
}

static vl_status transpose_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *r;
  VL_TRY(vl_transpose(go[0], (int)n->ints[0], (int)n->ints[1], &r));
  return vl_ag_give(n, 0, r, gi);
}

static vl_status permute_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  int nd = go[0]->ndim, inv[VL_MAX_DIMS];
  for (int i = 0; i < nd; i++) inv[n->ints[i]] = i;
  vl_tensor *r;
  VL_TRY(vl_permute(go[0], nd, inv, &r));
  return vl_ag_give(n, 0, r, gi);
}

/* ---- ops ---- */

vl_status vl_ag_view(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_view(t, ndim, size, &r));
  return done(rec("ViewBackward", reshape_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_reshape(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_reshape(t, ndim, size, &r));
  return done(rec("ReshapeBackward", reshape_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_squeeze(vl_tensor *t, int dim, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_squeeze(t, dim, &r));
  return done(rec("SqueezeBackward", reshape_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_squeeze_all(vl_tensor *t, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_squeeze_all(t, &r));
  return done(rec("SqueezeBackward", reshape_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_unsqueeze(vl_tensor *t, int dim, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_unsqueeze(t, dim, &r));
  return done(rec("UnsqueezeBackward", reshape_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_narrow(vl_tensor *t, int dim, int64_t start, int64_t length, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_narrow(t, dim, start, length, &r));
  int64_t p[3] = {dim < 0 ? dim + t->ndim : dim, start, 0};
  return done(rec("NarrowBackward", narrow_select_bw, t, r, p, 3), r, out);
}

vl_status vl_ag_select(vl_tensor *t, int dim, int64_t index, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_select(t, dim, index, &r));
  int d = dim < 0 ? dim + t->ndim : dim;
  int64_t p[3] = {d, index < 0 ? index + t->size[d] : index, 1};
  return done(rec("SelectBackward", narrow_select_bw, t, r, p, 3), r, out);
}

vl_status vl_ag_transpose(vl_tensor *t, int d0, int d1, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_transpose(t, d0, d1, &r));
  int64_t p[2] = {d0, d1};
  return done(rec("TransposeBackward", transpose_bw, t, r, p, 2), r, out);
}

vl_status vl_ag_permute(vl_tensor *t, int ndim, const int *perm, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_permute(t, ndim, perm, &r));
  int64_t p[VL_MAX_DIMS];
  for (int i = 0; i < ndim; i++) p[i] = perm[i] < 0 ? perm[i] + ndim : perm[i];
  return done(rec("PermuteBackward", permute_bw, t, r, p, ndim), r, out);
}

vl_status vl_ag_expand(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_expand(t, ndim, size, &r));
  return done(rec("ExpandBackward", identity_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_contiguous(vl_tensor *t, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_contiguous(t, &r));
  if (r == t) return done(VL_OK, r, out); /* already contiguous: t itself, same history */
  return done(rec("CloneBackward", identity_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_clone(vl_tensor *t, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_clone(t, &r));
  return done(rec("CloneBackward", identity_bw, t, r, NULL, 0), r, out);
}

vl_status vl_ag_to(vl_tensor *t, vl_dtype dt, vl_device dev, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_to(t, dt, dev, &r));
  if (r == t) return done(VL_OK, r, out);
  return done(rec("ToCopyBackward", identity_bw, t, r, NULL, 0), r, out);
}
