/* runtime/ops/copy.c: the copies of core's views and layouts (clone, contiguous, reshape's copy,
 * channels-last conversion). They run the copy kernel, so they live here rather than in
 * runtime/core/, which calls nothing above it (tools/check-layers.sh); core keeps the views and
 * the layout predicates they build on. */
#include "runtime/core/layout.h"
#include "runtime/ops/ops_internal.h"

vl_status vl_clone(vl_tensor *t, vl_tensor **out) {
  vl_tensor *c;
  VL_TRY(vl_tensor_empty_op("clone", t->ndim, t->size, t->dtype, t->storage->device, &c));
  vl_status s = vl_copy_same_device(c, t);
  if (s != VL_OK) {
    vl_tensor_release(c);
    return s;
  }
  *out = c;
  return VL_OK;
}

vl_status vl_contiguous(vl_tensor *t, vl_tensor **out) {
  if (vl_tensor_is_contiguous(t)) {
    *out = vl_tensor_retain(t);
    return VL_OK;
  }
  return vl_clone(t, out);
}

vl_status vl_reshape(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  int64_t shape[VL_MAX_DIMS];
  vl_tensor *c, *v = NULL;
  VL_TRY(vl_reshape_view(t, ndim, size, shape, &v));
  if (v) {
    *out = v;
    return VL_OK;
  }
  VL_TRY(vl_clone(t, &c));
  vl_status s = vl_view(c, ndim, shape, &v);
  vl_tensor_release(c);
  if (s == VL_OK) *out = v;
  return s;
}

vl_status vl_to_channels_last(vl_tensor *t, vl_tensor **out) {
  if (vl_is_channels_last(t)) {
    *out = vl_tensor_retain(t);
    return VL_OK;
  }
  if (t->ndim != 4) {
    char d[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "to_channels_last: expected a 4-D N x C x H x W tensor (got %s)",
                   vl_tensor_desc(t, d, sizeof d));
  }
  vl_tensor *r = NULL;
  VL_TRY(vl_empty_family(t->size, true, t->dtype, t->storage->device, &r));
  vl_status s = vl_copy_(r, t);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_in_family(vl_tensor *t, bool nhwc, vl_tensor **out) {
  if (!nhwc) return vl_contiguous(t, out);
  if (vl_is_nhwc_dense(t)) {
    *out = vl_tensor_retain(t);
    return VL_OK;
  }
  return vl_to_channels_last(t, out);
}
