/* runtime/autograd/ops_index.c: the indexing forms Lua's x[...] reaches that are no single op,
 * composed of recorded ones (so they differentiate through them): masked_select (x[mask]) and
 * the writes x[mask] = v and x[idx] = v along dim 1. Positions that depend on the data (how many
 * a mask selects) are found by vl_nonzero, which reads the mask on the host: a synchronisation on
 * a GPU, as PyTorch's masked_select and index_put_ with a bool mask are. */
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

/* x viewed flat for a write: only a contiguous x shares its storage with a flat view. */
static vl_tensor *flat_view(vl_fs *f, const char *op, vl_tensor *x) {
  char d[VL_DESC_LEN];
  if (f->s == VL_OK && !vl_tensor_is_contiguous(x))
    f->s = vl_fail(VL_EUNSUPPORTED, "%s: the tensor written through an index must be contiguous (%s): write into "
                   "x:contiguous() or use masked_fill_ / index ops", op, vl_tensor_desc(x, d, sizeof d));
  int64_t flat = -1;
  return F_RUN(vl_ag_view(x, 1, &flat, F_OUT));
}

/* Writes src (one element, broadcast, or exactly one per position) at the flat positions pos of
 * a contiguous x, the other elements untouched: the positions are zeroed, then src is added there
 * (positions are distinct: both callers make them so). */
static void write_at(vl_fs *f, const char *op, vl_tensor *x, vl_tensor *pos, vl_tensor *zero_mask, vl_tensor *src) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  vl_tensor *xf = flat_view(f, op, x);
  if (f->s != VL_OK) return;
  int64_t n = vl_tensor_numel(pos), m = vl_tensor_numel(src);
  if (m != n && m != 1) {
    f->s = vl_fail(VL_ESHAPE, "%s: the index selects %lld element%s but the value has %lld (self %s, value %s)", op,
                   (long long)n, n == 1 ? "" : "s", (long long)m, vl_tensor_desc(x, d1, sizeof d1),
                   vl_tensor_desc(src, d2, sizeof d2));
    return;
  }
  vl_tensor *sv = F_RUN(vl_ag_to(src, x->dtype, x->storage->device, F_OUT));
  int64_t flat = -1;
  vl_tensor *sf = F_RUN(vl_ag_reshape(sv, 1, &flat, F_OUT));
  vl_tensor *se = m == n ? sf : F_RUN(vl_ag_expand(sf, 1, &n, F_OUT));
  F_DO(vl_ag_masked_fill_(x, zero_mask, 0.0));
  if (n > 0) F_DO(vl_ag_scatter_add_(xf, 0, pos, se));
}

vl_status vl_ag_masked_put_(vl_tensor *x, vl_tensor *mask, vl_tensor *src) {
  const char *op = "x[mask] = value";
  VL_TRY(check_mask(op, x, mask));
  VL_TRY(vl_check_same_device(op, x, "self", src, "value"));
  VL_FS(f);
  vl_tensor *me = mask_like(f, op, x, mask);
  vl_tensor *pos = F_RUN(vl_nonzero(me, true, F_OUT));
  write_at(f, op, x, pos, me, src);
  return vl_fs_close(f);
}

/* The rows idx (0-based values along dim 1, negative not allowed) of x: distinct row numbers, a
 * bool mask of x's shape that marks them, and the flat positions of their elements in order
 * (idx order, then row-major within a row), made on the host from idx. */
static vl_status rows_of(const char *op, vl_tensor *x, vl_tensor *idx, vl_tensor **mask, vl_tensor **pos) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (x->ndim == 0) return vl_fail(VL_ESHAPE, "%s: a 0-dim tensor has no rows to index", op);
  if (idx->dtype != VL_I64 && idx->dtype != VL_I32)
    return vl_fail(VL_EDTYPE, "%s: the index must be an i64 or i32 tensor (or a bool mask), got %s", op,
                   vl_dtype_name(idx->dtype));
  if (idx->ndim > 1)
    return vl_fail(VL_ESHAPE, "%s: the index must be 1-D (self %s, index %s)", op, vl_tensor_desc(x, d1, sizeof d1),
                   vl_tensor_desc(idx, d2, sizeof d2));
  int64_t k = vl_tensor_numel(idx), rows = x->size[0], row = rows ? vl_tensor_numel(x) / rows : 0;
  int64_t *iv = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
  uint8_t *mk = calloc((size_t)(rows ? rows : 1), 1);
  int64_t npos = k * row;
  int64_t *pv = malloc(sizeof(int64_t) * (size_t)(npos > 0 ? npos : 1));
  vl_tensor *i64 = NULL;
  vl_status s = (!iv || !mk || !pv) ? vl_fail(VL_EOOM, "%s: out of host memory", op) : VL_OK;
  if (s == VL_OK) s = vl_to(idx, VL_I64, (vl_device){VL_CPU, 0}, &i64);
  if (s == VL_OK) s = vl_read_host(op, i64, iv);
  for (int64_t i = 0; s == VL_OK && i < k; i++) {
    if (iv[i] < 0 || iv[i] >= rows)
      s = vl_fail(VL_EINVAL, "%s: index %lld is out of bounds for dim 1 with size %lld (index values are 0-based: 0 to "
                  "%lld)", op, (long long)iv[i], (long long)rows, (long long)rows - 1);
    else if (mk[iv[i]])
      s = vl_fail(VL_EINVAL, "%s: row %lld is indexed twice: a write through an index takes each row once", op,
                  (long long)iv[i]);
    else
      mk[iv[i]] = 1;
    for (int64_t j = 0; s == VL_OK && j < row; j++) pv[i * row + j] = iv[i] * row + j;
  }
  vl_tensor_release(i64);
  vl_tensor *m1 = NULL;
  if (s == VL_OK) s = vl_from_host(mk, 1, &rows, VL_BOOL, x->storage->device, &m1);
  if (s == VL_OK) s = vl_from_host(pv, 1, &npos, VL_I64, x->storage->device, pos);
  if (s == VL_OK) { /* the row mask viewed [rows, 1, ...] and expanded over each row */
    int64_t vs[VL_MAX_DIMS];
    vs[0] = rows;
    for (int d = 1; d < x->ndim; d++) vs[d] = 1;
    vl_tensor *v = NULL;
    s = vl_view(m1, x->ndim, vs, &v);
    if (s == VL_OK) s = vl_expand(v, x->ndim, x->size, mask);
    vl_tensor_release(v);
    if (s != VL_OK) vl_tensor_release(*pos);
  }
  vl_tensor_release(m1);
  free(iv), free(mk), free(pv);
  return s;
}

vl_status vl_ag_rows_put_(vl_tensor *x, vl_tensor *idx, vl_tensor *src) {
  const char *op = "x[index] = value";
  VL_TRY(vl_check_same_device(op, x, "self", src, "value"));
  vl_tensor *mask = NULL, *pos = NULL;
  VL_TRY(rows_of(op, x, idx, &mask, &pos));
  VL_FS(f);
  /* a value of one row's shape (or fewer trailing dims) is broadcast over the rows */
  int64_t k = vl_tensor_numel(idx), row = x->size[0] ? vl_tensor_numel(x) / x->size[0] : 0;
  vl_tensor *v = src;
  if (vl_tensor_numel(src) != 1 && vl_tensor_numel(src) != k * row) {
    int64_t size[VL_MAX_DIMS];
    size[0] = k;
    memcpy(size + 1, x->size + 1, sizeof(int64_t) * (size_t)(x->ndim - 1));
    char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
    if (!vl_broadcasts_to(src, x->ndim, size))
      f->s = vl_fail(VL_ESHAPE, "%s: the value's shape does not broadcast to the %lld indexed row%s (self %s, value %s)",
                     op, (long long)k, k == 1 ? "" : "s", vl_tensor_desc(x, d1, sizeof d1),
                     vl_tensor_desc(src, d2, sizeof d2));
    v = F_RUN(vl_ag_expand(src, x->ndim, size, F_OUT));
    v = F_RUN(vl_ag_contiguous(v, F_OUT));
  }
  write_at(f, op, x, pos, mask, v);
  vl_tensor_release(mask);
  vl_tensor_release(pos);
  return vl_fs_close(f);
}
