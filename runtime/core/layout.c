/* runtime/core/layout.c: channels-last / dense layouts (runtime/core/layout.h); the conversions,
 * which copy, are ops (runtime/ops/copy.c). */
#include "runtime/core/layout.h"

/* Dims of size > 1 ordered from the largest stride to the smallest (ties keep dim order). */
static int dense_order(const vl_tensor *t, int *dims) {
  int n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->size[i] == 1) continue;
    int j = n++;
    while (j > 0 && t->stride[dims[j - 1]] < t->stride[i]) {
      dims[j] = dims[j - 1];
      j--;
    }
    dims[j] = i;
  }
  return n;
}

bool vl_tensor_is_dense(const vl_tensor *t) {
  int dims[VL_MAX_DIMS];
  int n = dense_order(t, dims);
  int64_t expect = 1;
  for (int k = n - 1; k >= 0; k--) {
    if (t->stride[dims[k]] != expect) return false;
    expect *= t->size[dims[k]];
  }
  return true;
}

bool vl_is_nhwc_dense(const vl_tensor *t) {
  if (t->ndim != 4) return false;
  const int order[4] = {1, 3, 2, 0}; /* C, W, H, N: innermost first */
  int64_t expect = 1;
  for (int i = 0; i < 4; i++) {
    int d = order[i];
    if (t->size[d] != 1 && t->stride[d] != expect) return false;
    expect *= t->size[d];
  }
  return true;
}

bool vl_is_channels_last(const vl_tensor *t) {
  if (!vl_is_nhwc_dense(t) || vl_tensor_numel(t) == 0) return false;
  /* Strides non-decreasing in the order C, W, H, N, counting those of size-1 dims; N's stride
   * equal to C's means all of H, W, C are 1 (N x 1 x 1 x 1): NCHW by convention. */
  const int order[4] = {1, 3, 2, 0};
  int64_t min = 0;
  for (int i = 0; i < 4; i++) {
    int d = order[i];
    if (t->stride[d] < min) return false;
    if (d == 0 && min == t->stride[1]) return false;
    min = t->stride[d];
    if (t->size[d] > 1) min *= t->size[d];
  }
  return true;
}

bool vl_same_layout(const vl_tensor *a, const vl_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++) {
    if (a->size[i] != b->size[i]) return false;
    if (a->size[i] > 1 && a->stride[i] != b->stride[i]) return false;
  }
  return true;
}

vl_status vl_empty_family(const int64_t *nchw, bool nhwc, vl_dtype dt, vl_device dev, vl_tensor **out) {
  if (!nhwc) return vl_tensor_empty(4, nchw, dt, dev, out);
  int64_t size[4] = {nchw[0], nchw[2], nchw[3], nchw[1]};
  const int to_nchw[4] = {0, 3, 1, 2};
  vl_tensor *base = NULL;
  VL_TRY(vl_tensor_empty(4, size, dt, dev, &base));
  vl_status s = vl_permute(base, 4, to_nchw, out);
  vl_tensor_release(base);
  return s;
}

vl_status vl_empty_like(vl_tensor *t, vl_dtype dt, vl_device dev, vl_tensor **out) {
  /* Canonical channels-last strides also where C == 1 or H == W == 1 makes t look contiguous too. */
  if (vl_is_channels_last(t)) return vl_empty_family(t->size, true, dt, dev, out);
  if (vl_tensor_numel(t) == 0 || vl_tensor_is_contiguous(t) || !vl_tensor_is_dense(t))
    return vl_tensor_empty(t->ndim, t->size, dt, dev, out);
  /* Allocate contiguous in t's physical dim order, then view it back in the logical order. */
  int dims[VL_MAX_DIMS], perm[VL_MAX_DIMS], inv[VL_MAX_DIMS];
  int n = dense_order(t, dims), k = 0;
  bool used[VL_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) used[dims[i]] = true;
  /* Size-1 dims go first (outermost): their stride is irrelevant. */
  for (int i = 0; i < t->ndim; i++)
    if (!used[i]) perm[k++] = i;
  for (int i = 0; i < n; i++) perm[k++] = dims[i];
  int64_t psize[VL_MAX_DIMS];
  for (int i = 0; i < t->ndim; i++) {
    psize[i] = t->size[perm[i]];
    inv[perm[i]] = i;
  }
  vl_tensor *base;
  VL_TRY(vl_tensor_empty(t->ndim, psize, dt, dev, &base));
  vl_status s = vl_permute(base, t->ndim, inv, out);
  vl_tensor_release(base);
  return s;
}
