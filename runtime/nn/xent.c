/* runtime/nn/xent.c: the fused softmax cross entropy front ends over class ids (runtime/nn/fused.h).
 *
 * The logits are read as contiguous [outer, C, inner] (N x C x d...: outer N, inner the product of
 * d...), the targets as contiguous [rows]. The forward keeps per row only the log-sum-exp (stat
 * dtype: f32, f64 for f64 logits) for the backward, plus the count of rows not ignored for the
 * mean; the loss is reduced by the same kernel call, on the device, without a host sync. */
#include "runtime/nn/fused.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

static vl_dtype stat_dtype(vl_dtype dt) { return dt == VL_F64 ? VL_F64 : VL_F32; }

static void release_all(vl_tensor **ts, int n) {
  for (int i = 0; i < n; i++) vl_tensor_release(ts[i]);
}

/* The checks both directions share, and the geometry: class dim, outer, C, inner. */
static vl_status check_common(const char *op, vl_tensor *logits, vl_tensor *target, const vl_xent_params *p,
                              vl_xent_args *a) {
  char d[VL_DESC_LEN];
  VL_TRY(vl_class_target_check(op, logits, target, false));
  if (!vl_dtype_is_float(logits->dtype))
    return vl_fail(VL_EDTYPE, "%s: input must be a float tensor (f32, f16, bf16, f64), got %s (input %s)", op,
                   vl_dtype_name(logits->dtype), vl_tensor_desc(logits, d, sizeof d));
  VL_TRY(vl_nn_check_prob(op, "smoothing", p->smoothing));
  if ((unsigned)p->reduction > VL_XENT_MEAN)
    return vl_fail(VL_EINVAL, "%s: unknown reduction %d", op, (int)p->reduction);
  int cd = logits->ndim == 1 ? 0 : 1;
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < cd; i++) outer *= logits->size[i];
  for (int i = cd + 1; i < logits->ndim; i++) inner *= logits->size[i];
  if (logits->size[cd] == 0 && outer * inner > 0)
    return vl_fail(VL_ESHAPE, "%s: input has no classes (input %s)", op, vl_tensor_desc(logits, d, sizeof d));
  *a = (vl_xent_args){.op = "cross_entropy", .class_dim = cd, .dtype = logits->dtype,
                      .stat_dtype = stat_dtype(logits->dtype), .outer = outer, .classes = logits->size[cd],
                      .inner = inner, .target_i32 = target->dtype == VL_I32, .ignore_index = p->ignore_index,
                      .smoothing = p->smoothing, .reduction = p->reduction};
  return VL_OK;
}

/* A stat-dtype tensor handed back by the forward: on the logits' device, stat dtype, n elements. */
static vl_status check_stat(const char *op, const char *name, const vl_tensor *t, const vl_tensor *logits,
                            vl_dtype sdt, int64_t n) {
  char d[VL_DESC_LEN];
  if (!t) return vl_fail(VL_EINVAL, "%s: %s is required", op, name);
  VL_TRY(vl_nn_check_device(op, logits, "input", t, name));
  if (t->dtype != sdt || vl_tensor_numel(t) != n)
    return vl_fail(VL_ESHAPE, "%s: %s must hold %lld %s values, got %s", op, name, (long long)n, vl_dtype_name(sdt),
                   vl_tensor_desc(t, d, sizeof d));
  return VL_OK;
}

vl_status vl_cross_entropy(vl_tensor *logits, vl_tensor *target, const vl_xent_params *p, vl_tensor **loss,
                           vl_tensor **lse, vl_tensor **count) {
  const char *op = "cross_entropy";
  vl_xent_args a;
  VL_TRY(check_common(op, logits, target, p, &a));
  vl_dtype odt = p->out_dtype == VL_NDTYPES ? logits->dtype : p->out_dtype;
  if ((unsigned)odt >= VL_NDTYPES || !vl_dtype_is_float(odt))
    return vl_fail(VL_EDTYPE, "%s: the loss dtype must be a float dtype, got %s", op, vl_dtype_name(odt));
  VL_TRY(vl_exec_of(op, logits->storage->device, &a.ex));
  vl_device dev = logits->storage->device;
  const int64_t rows = a.outer * a.inner;
  const bool reduce = p->reduction != VL_XENT_NONE;
  /* 0 logits, 1 target, 2 lse, 3 row losses (NONE: the loss itself when no cast follows),
   * 4 reduced loss, 5 count, 6 the cast NONE loss */
  vl_tensor *t[7] = {0};
  vl_status s = vl_contiguous(logits, &t[0]);
  if (s == VL_OK) s = vl_contiguous(target, &t[1]);
  if (s == VL_OK) s = vl_tensor_empty(1, &rows, a.stat_dtype, dev, &t[2]);
  if (s == VL_OK) {
    if (reduce) s = vl_tensor_empty(1, &rows, a.stat_dtype, dev, &t[3]);
    else s = vl_tensor_empty(target->ndim, target->size, a.stat_dtype, dev, &t[3]);
  }
  if (s == VL_OK && reduce) s = vl_tensor_empty(0, NULL, odt, dev, &t[4]);
  if (s == VL_OK && reduce) s = vl_tensor_empty(0, NULL, a.stat_dtype, dev, &t[5]);
  if (s == VL_OK) {
    a.logits = vl_tensor_data(t[0]);
    a.target = vl_tensor_data(t[1]);
    a.lse = vl_tensor_data(t[2]);
    a.row_loss = vl_tensor_data(t[3]);
    a.out = reduce ? vl_tensor_data(t[4]) : NULL;
    a.count = reduce ? vl_tensor_data(t[5]) : NULL;
    a.out_dtype = odt;
    s = vl_backend_of(dev)->fused->xent_forward(&a);
  }
  if (s == VL_OK && !reduce && odt != a.stat_dtype) s = vl_to(t[3], odt, dev, &t[6]);
  if (s != VL_OK) {
    release_all(t, 7);
    return s;
  }
  int k = reduce ? 4 : odt != a.stat_dtype ? 6 : 3;
  *loss = t[k], t[k] = NULL;
  if (lse) *lse = t[2], t[2] = NULL;
  if (count) *count = t[5], t[5] = NULL;
  release_all(t, 7);
  return VL_OK;
}

vl_status vl_cross_entropy_backward(vl_tensor *logits, vl_tensor *target, vl_tensor *lse, vl_tensor *count,
                                    vl_tensor *grad, const vl_xent_params *p, vl_tensor **dlogits) {
  const char *op = "cross_entropy_backward";
  char d[VL_DESC_LEN];
  vl_xent_args a;
  VL_TRY(check_common(op, logits, target, p, &a));
  const int64_t rows = a.outer * a.inner;
  VL_TRY(check_stat(op, "lse", lse, logits, a.stat_dtype, rows));
  if (p->reduction == VL_XENT_MEAN) VL_TRY(check_stat(op, "count", count, logits, a.stat_dtype, 1));
  if (!grad) return vl_fail(VL_EINVAL, "%s: grad is required", op);
  VL_TRY(vl_nn_check_device(op, logits, "input", grad, "grad"));
  int64_t want = p->reduction == VL_XENT_NONE ? rows : 1;
  if (!vl_dtype_is_float(grad->dtype) || vl_tensor_numel(grad) != want)
    return vl_fail(VL_ESHAPE, "%s: grad must hold %lld float values (the loss's shape), got %s", op, (long long)want,
                   vl_tensor_desc(grad, d, sizeof d));
  VL_TRY(vl_exec_of(op, logits->storage->device, &a.ex));
  vl_device dev = logits->storage->device;
  /* 0 logits, 1 target, 2 lse, 3 count, 4 grad (stat dtype), 5 grad contiguous, 6 dlogits */
  vl_tensor *t[7] = {0};
  vl_status s = vl_contiguous(logits, &t[0]);
  if (s == VL_OK) s = vl_contiguous(target, &t[1]);
  if (s == VL_OK) s = vl_contiguous(lse, &t[2]);
  if (s == VL_OK && count) s = vl_contiguous(count, &t[3]);
  if (s == VL_OK) s = vl_cast(grad, a.stat_dtype, &t[4]);
  if (s == VL_OK) s = vl_contiguous(t[4], &t[5]);
  if (s == VL_OK) s = vl_tensor_empty(logits->ndim, logits->size, logits->dtype, dev, &t[6]);
  if (s == VL_OK && vl_tensor_numel(logits) > 0) {
    a.logits = vl_tensor_data(t[0]);
    a.target = vl_tensor_data(t[1]);
    a.lse = vl_tensor_data(t[2]);
    a.count = t[3] ? vl_tensor_data(t[3]) : NULL;
    a.grad = vl_tensor_data(t[5]);
    a.dlogits = vl_tensor_data(t[6]);
    s = vl_backend_of(dev)->fused->xent_backward(&a);
  }
  if (s == VL_OK) *dlogits = t[6], t[6] = NULL;
  release_all(t, 7);
  return s;
}
