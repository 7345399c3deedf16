/* kernels/cpu/cpu_index.c: gather, scatter_add, scatter (assign) and index_select over strided operands.
 *
 * Every index is validated before the first write, so a bad index leaves `out` untouched (also
 * for scatter_add, which updates out in place). Negative indices are errors, not wrapped. The
 * error names the dim as the Lua user sees it: 1-based (dim + 1), as in docs/LUA_API.md, while
 * the index value itself is shown 0-based as stored in the index tensor. */
#include "kernels/cpu/cpu_internal.h"

static inline int64_t load_index(const char *p, vl_dtype dt) {
  return dt == VL_I32 ? (int64_t)*(const int32_t *)p : *(const int64_t *)p;
}

static vl_status bad_index(const vl_index_args *a, int64_t idx, int64_t size) {
  /* The dim is 1-based like every Lua dim; index values are 0-based, as stored in data files and
   * as PyTorch has them: the message says so, since a Lua user counts from 1. */
  return vl_fail(VL_EINVAL, "%s: index %lld is out of bounds for dim %d with size %lld (index values are 0-based: 0 to %lld)",
                 a->op ? a->op : "index", (long long)idx, a->dim + 1, (long long)size, (long long)size - 1);
}

/* A 0-dim operand behaves as one element along "dim 0". */
static int64_t dim_size(const vl_strided *t, int dim) { return t->ndim > 0 ? t->size[dim] : 1; }

static int64_t numel_of(const vl_strided *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->size[d];
  return n;
}

/* Advances the position `pos` over `shape` (row-major odometer) and keeps the element offsets
 * of up to three operands, each with its own strides, in step. */
static inline void advance(int ndim, const int64_t *shape, int64_t *pos, int nops,
                           const int64_t *const *strides, int64_t *off) {
  for (int d = ndim - 1; d >= 0; d--) {
    if (++pos[d] < shape[d]) {
      for (int k = 0; k < nops; k++) off[k] += strides[k][d];
      return;
    }
    for (int k = 0; k < nops; k++) off[k] -= strides[k][d] * (shape[d] - 1);
    pos[d] = 0;
  }
}

/* Checks every index of `idx` (walked over its own shape) against [0, size). */
static vl_status check_indices(const vl_index_args *a, const vl_strided *idx, int64_t size) {
  int64_t n = numel_of(idx);
  int64_t pos[VL_MAX_DIMS] = {0}, off = 0;
  const int64_t *strides[1] = {idx->stride};
  size_t ei = vl_dtype_size(idx->dtype);
  for (int64_t i = 0; i < n; i++) {
    int64_t v = load_index(idx->data + off * (int64_t)ei, idx->dtype);
    if (v < 0 || v >= size) return bad_index(a, v, size);
    advance(idx->ndim, idx->size, pos, 1, strides, &off);
  }
  return VL_OK;
}

static inline void copy_elem(char *dst, const char *src, size_t size) {
  switch (size) {
    case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
    case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
    case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
    case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
    default: memcpy(dst, src, size); break;
  }
}

vl_status vl_cpu_gather(const vl_index_args *a) {
  int dim = a->dim;
  VL_TRY(check_indices(a, &a->index, dim_size(&a->src, dim)));
  /* Walk index's shape; out shares it, src uses the same position except along dim. */
  const vl_strided *ix = &a->index;
  int64_t n = numel_of(ix);
  int64_t src_stride[VL_MAX_DIMS];
  for (int d = 0; d < ix->ndim; d++) src_stride[d] = d == dim ? 0 : a->src.stride[d];
  const int64_t *strides[3] = {ix->stride, a->out.stride, src_stride};
  int64_t pos[VL_MAX_DIMS] = {0}, off[3] = {0, 0, 0};
  size_t es = vl_dtype_size(a->out.dtype), ei = vl_dtype_size(ix->dtype);
  int64_t sd = a->src.ndim > 0 ? a->src.stride[dim] : 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = load_index(ix->data + off[0] * (int64_t)ei, ix->dtype);
    copy_elem(a->out.data + off[1] * (int64_t)es, a->src.data + (off[2] + j * sd) * (int64_t)es, es);
    advance(ix->ndim, ix->size, pos, 3, strides, off);
  }
  return VL_OK;
}

/* out[p with p_dim := index[p]] += src[p] (mul: *=), in the out dtype (floats through double,
 * rounded once per update; integers wrap; bool is a logical or, for mul an and). */
static vl_status scatter_reduce(const vl_index_args *a, bool mul) {
  int dim = a->dim;
  VL_TRY(check_indices(a, &a->index, dim_size(&a->out, dim)));
  const vl_strided *ix = &a->index;
  int64_t n = numel_of(ix);
  int64_t out_stride[VL_MAX_DIMS];
  for (int d = 0; d < ix->ndim; d++) out_stride[d] = d == dim ? 0 : a->out.stride[d];
  const int64_t *strides[3] = {ix->stride, out_stride, a->src.stride};
  int64_t pos[VL_MAX_DIMS] = {0}, off[3] = {0, 0, 0};
  vl_dtype dt = a->out.dtype, dts = a->src.dtype;
  size_t eo = vl_dtype_size(dt), es = vl_dtype_size(dts), ei = vl_dtype_size(ix->dtype);
  int64_t od = a->out.ndim > 0 ? a->out.stride[dim] : 0;
  bool is_int = vl_dtype_is_int(dt);
  for (int64_t i = 0; i < n; i++) {
    int64_t j = load_index(ix->data + off[0] * (int64_t)ei, ix->dtype);
    char *o = a->out.data + (off[1] + j * od) * (int64_t)eo;
    const char *s = a->src.data + off[2] * (int64_t)es;
    if (is_int) {
      uint64_t x = (uint64_t)vl_cpu_ld_i64(o, dt), y = (uint64_t)vl_cpu_ld_i64(s, dts);
      vl_cpu_st_i64(o, dt, (int64_t)(mul ? x * y : x + y));
    } else {
      double x = vl_cpu_ld_f64(o, dt), y = vl_cpu_ld_f64(s, dts);
      vl_cpu_st_f64(o, dt, mul ? x * y : x + y);
    }
    advance(ix->ndim, ix->size, pos, 3, strides, off);
  }
  return VL_OK;
}

vl_status vl_cpu_scatter_add(const vl_index_args *a) { return scatter_reduce(a, false); }
vl_status vl_cpu_scatter_mul(const vl_index_args *a) { return scatter_reduce(a, true); }

/* out[p with p_dim := index[p]] = src[p]: serial in index's row-major order, so of repeated
 * positions the last one stays (documented; CUDA keeps any one). */
vl_status vl_cpu_scatter(const vl_index_args *a) {
  int dim = a->dim;
  VL_TRY(check_indices(a, &a->index, dim_size(&a->out, dim)));
  const vl_strided *ix = &a->index;
  int64_t n = numel_of(ix);
  int64_t out_stride[VL_MAX_DIMS];
  for (int d = 0; d < ix->ndim; d++) out_stride[d] = d == dim ? 0 : a->out.stride[d];
  const int64_t *strides[3] = {ix->stride, out_stride, a->src.stride};
  int64_t pos[VL_MAX_DIMS] = {0}, off[3] = {0, 0, 0};
  size_t es = vl_dtype_size(a->out.dtype), ei = vl_dtype_size(ix->dtype);
  int64_t od = a->out.ndim > 0 ? a->out.stride[dim] : 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t j = load_index(ix->data + off[0] * (int64_t)ei, ix->dtype);
    copy_elem(a->out.data + (off[1] + j * od) * (int64_t)es, a->src.data + off[2] * (int64_t)es, es);
    advance(ix->ndim, ix->size, pos, 3, strides, off);
  }
  return VL_OK;
}

vl_status vl_cpu_index_select(const vl_index_args *a) {
  int dim = a->dim;
  const vl_strided *ix = &a->index;
  VL_TRY(check_indices(a, ix, dim_size(&a->src, dim)));
  /* Walk out's shape; along dim, out position i reads src row index[i]. */
  const vl_strided *out = &a->out;
  int64_t n = numel_of(out);
  if (n == 0) return VL_OK;
  int64_t src_stride[VL_MAX_DIMS];
  for (int d = 0; d < out->ndim; d++) src_stride[d] = d == dim ? 0 : a->src.stride[d];
  const int64_t *strides[2] = {out->stride, src_stride};
  int64_t pos[VL_MAX_DIMS] = {0}, off[2] = {0, 0};
  size_t es = vl_dtype_size(out->dtype), ei = vl_dtype_size(ix->dtype);
  int64_t istride = ix->ndim > 0 ? ix->stride[0] : 0;
  int64_t sd = a->src.ndim > 0 ? a->src.stride[dim] : 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t k = out->ndim > 0 ? pos[dim] : 0;
    int64_t j = load_index(ix->data + k * istride * (int64_t)ei, ix->dtype);
    copy_elem(out->data + off[0] * (int64_t)es, a->src.data + (off[1] + j * sd) * (int64_t)es, es);
    advance(out->ndim, out->size, pos, 2, strides, off);
  }
  return VL_OK;
}
