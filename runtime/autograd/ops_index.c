/* runtime/autograd/ops_index.c: the indexing forms Lua's x[...] reaches that are no single op,
 * composed of recorded ones (so they differentiate through them): masked_select (x[mask]) and
 * the writes x[mask] = v and x[idx] = v (the recorded index_put_ of ops_scatter.c: any strides),
 * and the write into a slice, x[i] = v / x[{...}] = v, recorded on x itself (PyTorch's CopySlices:
 * x's gradient is zero in the slice, v's is the gradient there). Positions that depend on the data
 * (how many a mask selects) are found by vl_nonzero, which reads the mask on the host: a
 * synchronisation on a GPU, as PyTorch's masked_select and index_put_ with a bool mask are. */
#include <stdlib.h>
#include <string.h>

#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops_internal.h"

static vl_status check_mask(const char *op, vl_tensor *x, vl_tensor *mask) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(vl_check_same_device(op, x, "self", mask, "mask"));
  if (mask->dtype != VL_BOOL)
    return vl_fail(VL_EDTYPE, "%s: the mask must be a bool tensor, got %s (self %s, mask %s); an integer tensor "
                   "indexes positions along dim 1 instead", op, vl_dtype_name(mask->dtype),
                   vl_tensor_desc(x, d1, sizeof d1), vl_tensor_desc(mask, d2, sizeof d2));
  return VL_OK;
}

/* The mask expanded to x's shape (x's shape must take the mask by broadcasting, as PyTorch asks). */
static vl_tensor *mask_like(vl_fs *f, const char *op, vl_tensor *x, vl_tensor *mask) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (f->s == VL_OK && !vl_broadcasts_to(mask, x->ndim, x->size))
    f->s = vl_fail(VL_ESHAPE, "%s: the mask's shape does not broadcast to the tensor's (self %s, mask %s)", op,
                   vl_tensor_desc(x, d1, sizeof d1), vl_tensor_desc(mask, d2, sizeof d2));
  return F_RUN(vl_expand(mask, x->ndim, x->size, F_OUT));
}

vl_status vl_ag_masked_select(vl_tensor *x, vl_tensor *mask, vl_tensor **out) {
  const char *op = "masked_select";
  VL_TRY(check_mask(op, x, mask));
  /* The result has the broadcast shape of both: a mask may also be larger than x. */
  int nd;
  int64_t size[VL_MAX_DIMS];
  vl_tensor *both[2] = {x, mask};
  const char *names[2] = {"self", "mask"};
  VL_TRY(vl_broadcast_shapes(op, 2, both, names, &nd, size));
  VL_FS(f);
  vl_tensor *xe = F_RUN(vl_ag_expand(x, nd, size, F_OUT));
  vl_tensor *me = F_RUN(vl_expand(mask, nd, size, F_OUT));
  int64_t flat = -1;
  vl_tensor *xf = F_RUN(vl_ag_reshape(xe, 1, &flat, F_OUT));
  vl_tensor *idx = F_RUN(vl_nonzero(me, true, F_OUT));
  vl_tensor *r = F_RUN(vl_ag_index_select_as(op, xf, 0, idx, F_OUT));
  return vl_fs_end(f, r, out);
}

/* values for the indexed shape of index_put: as they are when they broadcast to it, else (one
 * value, or one per indexed element in row-major order, whatever its shape) reshaped to it. */
static vl_tensor *values_for(vl_fs *f, const char *op, vl_tensor *x, vl_tensor *src, int nd, const int64_t *size) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  int64_t m = 1;
  for (int d = 0; d < nd; d++) m *= size[d];
  vl_tensor *v = F_RUN(vl_ag_to(src, x->dtype, x->storage->device, F_OUT));
  if (!v || vl_broadcasts_to(v, nd, size)) return v;
  if (vl_tensor_numel(v) == 1) return F_RUN(vl_ag_reshape(v, 0, NULL, F_OUT)); /* one value of any shape */
  if (vl_tensor_numel(v) == m) return F_RUN(vl_ag_reshape(v, nd, size, F_OUT));
  if (f->s == VL_OK)
    f->s = vl_fail(VL_ESHAPE, "%s: the index selects %lld element%s but the value has %lld and does not broadcast to "
                   "them (self %s, value %s)", op, (long long)m, m == 1 ? "" : "s", (long long)vl_tensor_numel(src),
                   vl_tensor_desc(x, d1, sizeof d1), vl_tensor_desc(src, d2, sizeof d2));
  return NULL;
}

vl_status vl_ag_masked_put_(vl_tensor *x, vl_tensor *mask, vl_tensor *src) {
  const char *op = "x[mask] = value";
  VL_TRY(check_mask(op, x, mask));
  VL_TRY(vl_check_same_device(op, x, "self", src, "value"));
  VL_FS(f);
  vl_tensor *me = mask_like(f, op, x, mask);
  if (x->ndim == 0) { /* a 0-dim x has no dim to index: its one element is copied, or nothing */
    double on = 0;
    F_DO(vl_item(me, &on));
    vl_tensor *v = on != 0 ? values_for(f, op, x, src, 0, NULL) : NULL;
    if (v) F_DO(vl_ag_copy_(x, v));
    return vl_fs_close(f);
  }
  vl_tensor *pos = F_RUN(vl_nonzero(me, false, F_OUT)); /* [k, ndim] coordinates */
  vl_tensor *cols[VL_MAX_DIMS];
  for (int d = 0; d < x->ndim; d++) cols[d] = F_RUN(vl_select(pos, 1, d, F_OUT));
  int64_t k = pos ? pos->size[0] : 0;
  vl_tensor *v = values_for(f, op, x, src, 1, &k);
  F_DO(vl_ag_index_put_as_(op, x, x->ndim, cols, v, false));
  return vl_fs_close(f);
}

vl_status vl_ag_rows_put_(vl_tensor *x, vl_tensor *idx, vl_tensor *src) {
  const char *op = "x[index] = value";
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(vl_check_same_device(op, x, "self", src, "value"));
  if (x->ndim == 0) return vl_fail(VL_ESHAPE, "%s: a 0-dim tensor has no rows to index", op);
  if (idx->ndim > 1)
    return vl_fail(VL_ESHAPE, "%s: the index must be 1-D (self %s, index %s)", op, vl_tensor_desc(x, d1, sizeof d1),
                   vl_tensor_desc(idx, d2, sizeof d2));
  if (idx->dtype != VL_I64 && idx->dtype != VL_I32)
    return vl_fail(VL_EDTYPE, "%s: the index must be an i64 or i32 tensor (or a bool mask), got %s", op,
                   vl_dtype_name(idx->dtype));
  int64_t size[VL_MAX_DIMS];
  size[0] = vl_tensor_numel(idx);
  memcpy(size + 1, x->size + 1, sizeof(int64_t) * (size_t)(x->ndim - 1));
  VL_FS(f);
  vl_tensor *v = values_for(f, op, x, src, x->ndim, size);
  F_DO(vl_ag_index_put_as_(op, x, 1, &idx, v, false));
  return vl_fs_close(f);
}

/* ---- writes into a slice ---- */

/* The view a slice names, step by step (raw views: nothing recorded). */
static vl_tensor *slice_of(vl_fs *f, vl_tensor *t, const vl_slice *sl) {
  vl_tensor *v = t;
  for (int i = 0; i < sl->n; i++) {
    const vl_slice_step *st = &sl->step[i];
    v = st->select ? F_RUN(vl_select(v, st->dim, st->start, F_OUT)) : F_RUN(vl_narrow(v, st->dim, st->start, st->len, F_OUT));
  }
  return v;
}

/* Inputs: 0 x (before the write), 1 the value (absent for a number). */
static vl_status slice_write_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const vl_slice *sl = VL_AG_CTX(n, vl_slice);
  VL_FS(f);
  vl_tensor *gr[2] = {NULL, NULL};
  if (vl_ag_wants(n, 0)) {
    vl_tensor *c = F_RUN(vl_clone(go[0], F_OUT));
    vl_tensor *cv = slice_of(f, c, sl);
    F_DO(vl_fill_(cv, 0.0));
    gr[0] = c;
  }
  if (vl_ag_wants(n, 1)) {
    vl_tensor *gv = slice_of(f, go[0], sl);
    gr[1] = F_RUN(vl_contiguous(gv, F_OUT));
  }
  return vl_fs_give(f, n, 2, gr, gi);
}

vl_status vl_ag_slice_write_(vl_tensor *x, const vl_slice *sl, vl_tensor *src, vl_scalar value) {
  const char *op = "x[...] = value";
  vl_tensor *in[2] = {x, src};
  bool rec = vl_dtype_is_float(x->dtype) && vl_ag_needs(src ? 2 : 1, in);
  VL_TRY(vl_ag_check_inplace(op, x, rec));
  VL_FS(f);
  vl_tensor *v = slice_of(f, x, sl);
  if (src) F_DO(vl_copy_(v, src));
  else F_DO(vl_fill_scalar_(v, value));
  vl_status s = vl_fs_close(f);
  if (s != VL_OK || !rec) return s;
  return VL_AG_RECORD(.name = "CopySlices", .backward = slice_write_bw, .nin = 2, .in = in, .out = &x,
                      .ctx = sl, .ctx_size = sizeof *sl);
}
