/* runtime/nn/norm.c: batch norm, layer norm and softmax backward front ends (runtime/nn/nn.h).
 *
 * Every check runs before any allocation or write. The kernels (runtime/backend/nn_kernels.h) want
 * contiguous data in one of two layouts and contiguous parameters of the "param" dtype (f32 for
 * f32/f16/bf16 data, f64 for f64), so parameters of another float dtype or with strides are
 * converted here; running statistics are then updated through a converted copy that is copied
 * back, so the caller's tensors keep their dtype. */
#include <math.h>
#include <stdio.h>

#include "runtime/core/layout.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

/* The device's norm table; the callers ran vl_exec_of first, which fails for a device type
 * v100lua was built without, so the backend exists. */
static const vl_norm_kernels *norm_kernels(vl_device d) { return vl_backend_of(d)->norm; }

static vl_dtype param_dtype(vl_dtype dt) { return dt == VL_F64 ? VL_F64 : VL_F32; }

static void release_all(vl_tensor **ts, int n) {
  for (int i = 0; i < n; i++) vl_tensor_release(ts[i]);
}

/* The end of a backward: on success hands out the gradients asked for (t[5..7] = dx, dweight,
 * dbias) and releases the rest of the 8 working tensors; on failure releases all, outputs untouched. */
static vl_status hand_out(vl_status s, vl_tensor **t, vl_tensor **dx, vl_tensor **dweight, vl_tensor **dbias) {
  if (s == VL_OK) {
    if (dx) *dx = t[5], t[5] = NULL;
    if (dweight) *dweight = t[6], t[6] = NULL;
    if (dbias) *dbias = t[7], t[7] = NULL;
  }
  release_all(t, 8);
  return s;
}

/* A new uninitialised tensor of x's shape in NCHW-contiguous or channels-last layout. */
static vl_status empty_layout(const vl_tensor *x, bool nhwc, vl_dtype dt, vl_tensor **out) {
  if (!nhwc) return vl_tensor_empty(x->ndim, x->size, dt, x->storage->device, out);
  return vl_empty_family(x->size, true, dt, x->storage->device, out);
}

static vl_status check_float(const char *op, const char *name, const vl_tensor *t) {
  if (vl_dtype_is_float(t->dtype)) return VL_OK;
  char d[VL_DESC_LEN];
  return vl_fail(VL_EDTYPE, "%s: %s must be a float tensor, got %s (%s %s)", op, name, vl_dtype_name(t->dtype), name,
                 vl_tensor_desc(t, d, sizeof d));
}

/* A per-channel (or per-feature) parameter: on x's device, float, of shape (ndim, size). */
static vl_status check_param(const char *op, const char *name, const vl_tensor *p, const vl_tensor *x, int ndim,
                             const int64_t *size, const char *what) {
  if (!p) return VL_OK;
  VL_TRY(vl_nn_check_device(op, x, "input", p, name));
  VL_TRY(check_float(op, name, p));
  bool same = p->ndim == ndim;
  for (int i = 0; same && i < ndim; i++) same = p->size[i] == size[i];
  if (!same) {
    char d1[VL_DESC_LEN], d2[VL_DESC_LEN], s1[VL_DESC_LEN], s2[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "%s: %s has shape %s but %s %s (x %s, %s %s)", op, name, vl_shape_str(p, s1, sizeof s1),
                   what, vl_shape_fmt(ndim, size, s2, sizeof s2), vl_tensor_desc(x, d1, sizeof d1), name,
                   vl_tensor_desc(p, d2, sizeof d2));
  }
  return VL_OK;
}

/* p as a contiguous tensor of dtype dt (a new reference; NULL stays NULL). */
static vl_status param_as(vl_tensor *p, vl_dtype dt, vl_tensor **out) {
  *out = NULL;
  if (!p) return VL_OK;
  vl_tensor *c;
  VL_TRY(vl_cast(p, dt, &c));
  vl_status s = vl_contiguous(c, out);
  vl_tensor_release(c);
  return s;
}

static vl_status check_eps(const char *op, double eps) {
  if (!(eps >= 0) || isinf(eps)) return vl_fail(VL_EINVAL, "%s: eps must be a finite number >= 0, got %g", op, eps);
  return VL_OK;
}

/* ======================= batch norm ======================= */

typedef struct {
  bool nhwc;
  int64_t n, c, hw;
} bn_geom;

static vl_status bn_input(const char *op, const vl_tensor *x, bn_geom *g) {
  char d[VL_DESC_LEN];
  VL_TRY(check_float(op, "x", x));
  if (x->ndim < 2 || x->ndim > 4)
    return vl_fail(VL_ESHAPE, "%s: expected a 2-D, 3-D or 4-D input (N x C [x L | x H x W]), got x %s", op,
                   vl_tensor_desc(x, d, sizeof d));
  g->nhwc = vl_is_channels_last(x);
  g->n = x->size[0];
  g->c = x->size[1];
  g->hw = 1;
  for (int i = 2; i < x->ndim; i++) g->hw *= x->size[i];
  return VL_OK;
}

static vl_status check_same(const char *op, const vl_tensor *x, const char *xn, const vl_tensor *dy,
                            const char *dyn) {
  VL_TRY(vl_check_same_device(op, x, xn, dy, dyn));
  bool same = x->ndim == dy->ndim && x->dtype == dy->dtype;
  for (int i = 0; same && i < x->ndim; i++) same = x->size[i] == dy->size[i];
  if (!same) {
    char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "%s: %s and %s must have the same shape and dtype (%s %s, %s %s)", op, xn, dyn, xn,
                   vl_tensor_desc(x, d1, sizeof d1), dyn, vl_tensor_desc(dy, d2, sizeof d2));
  }
  return VL_OK;
}

static vl_status check_act(const char *op, vl_bn_act act) {
  if ((unsigned)act < VL_NBN_ACTS) return VL_OK;
  return vl_fail(VL_EINVAL, "%s: unknown activation %d", op, (int)act);
}

vl_status vl_batch_norm(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                        vl_tensor *running_var, bool training, double momentum, double eps, vl_tensor **y,
                        vl_tensor **save_mean, vl_tensor **save_invstd) {
  return vl_batch_norm_fused(x, weight, bias, running_mean, running_var, training, momentum, eps, NULL, y, save_mean,
                             save_invstd);
}

vl_status vl_batch_norm_fused(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                              vl_tensor *running_var, bool training, double momentum, double eps,
                              const vl_bn_fusion *f, vl_tensor **y, vl_tensor **save_mean, vl_tensor **save_invstd) {
  const char *op = "batch_norm";
  char d[VL_DESC_LEN];
  bn_geom g;
  vl_bn_act act = f ? f->act : VL_BN_ACT_NONE;
  vl_tensor *res = f ? f->residual : NULL;
  VL_TRY(bn_input(op, x, &g));
  VL_TRY(check_act(op, act));
  if (res) VL_TRY(check_same(op, x, "x", res, "residual"));
  int64_t csize[1] = {g.c};
  VL_TRY(check_param(op, "weight", weight, x, 1, csize, "the input's channels are"));
  VL_TRY(check_param(op, "bias", bias, x, 1, csize, "the input's channels are"));
  VL_TRY(check_param(op, "running_mean", running_mean, x, 1, csize, "the input's channels are"));
  VL_TRY(check_param(op, "running_var", running_var, x, 1, csize, "the input's channels are"));
  VL_TRY(check_eps(op, eps));
  if (!running_mean != !running_var)
    return vl_fail(VL_EINVAL, "%s: running_mean and running_var must both be given or both be nil", op);
  if (!training && !running_mean)
    return vl_fail(VL_EINVAL, "%s: running_mean and running_var are required in eval mode (training = false)", op);
  if (training && g.n * g.hw <= 1 && g.c > 0)
    return vl_fail(VL_EINVAL, "%s: expected more than 1 value per channel when training, got x %s", op,
                   vl_tensor_desc(x, d, sizeof d));
  if (training && running_mean && !isfinite(momentum))
    return vl_fail(VL_EINVAL, "%s: momentum must be a finite number, got %g", op, momentum);
  if (running_mean) VL_TRY(vl_check_writable(op, running_mean));
  if (running_var) VL_TRY(vl_check_writable(op, running_var));

  vl_dtype pdt = param_dtype(x->dtype);
  vl_device dev = x->storage->device;
  /* 0 xc, 1 w, 2 b, 3 rm, 4 rv, 5 y, 6 smean, 7 sinvstd, 8 tmp, 9 residual */
  vl_tensor *t[10] = {0};
  vl_status s = vl_in_family(x, g.nhwc, &t[0]);
  if (s == VL_OK && res) s = vl_in_family(res, g.nhwc, &t[9]);
  if (s == VL_OK) s = param_as(weight, pdt, &t[1]);
  if (s == VL_OK) s = param_as(bias, pdt, &t[2]);
  if (s == VL_OK) s = param_as(running_mean, pdt, &t[3]);
  if (s == VL_OK) s = param_as(running_var, pdt, &t[4]);
  if (s == VL_OK) s = empty_layout(x, g.nhwc, x->dtype, &t[5]);
  if (s == VL_OK && training) s = vl_tensor_empty(1, csize, pdt, dev, &t[6]);
  if (s == VL_OK && training) s = vl_tensor_empty(1, csize, pdt, dev, &t[7]);
  if (s == VL_OK && vl_tensor_numel(x) > 0) {
    vl_batchnorm_args a = {.dtype = x->dtype, .param_dtype = pdt, .nhwc = g.nhwc, .training = training,
                           .n = g.n, .c = g.c, .hw = g.hw, .x = vl_tensor_data(t[0]), .y = vl_tensor_data(t[5]),
                           .weight = t[1] ? vl_tensor_data(t[1]) : NULL, .bias = t[2] ? vl_tensor_data(t[2]) : NULL,
                           .running_mean = t[3] ? vl_tensor_data(t[3]) : NULL,
                           .running_var = t[4] ? vl_tensor_data(t[4]) : NULL,
                           .save_mean = t[6] ? vl_tensor_data(t[6]) : NULL,
                           .save_invstd = t[7] ? vl_tensor_data(t[7]) : NULL, .momentum = momentum, .eps = eps,
                           .act = act, .r = t[9] ? vl_tensor_data(t[9]) : NULL};
    s = vl_exec_of(op, dev, &a.ex);
    if (s == VL_OK) s = norm_kernels(dev)->batchnorm_forward(&a);
  }
  if (s == VL_OK && training && running_mean && vl_tensor_numel(x) > 0) {
    /* The kernel updated t[3]/t[4]; copy back when they were converted copies. */
    if (t[3] != running_mean) s = vl_copy_(running_mean, t[3]);
    else running_mean->storage->version++;
    if (s == VL_OK && t[4] != running_var) s = vl_copy_(running_var, t[4]);
    else if (s == VL_OK) running_var->storage->version++;
  }
  if (s == VL_OK && !training && (save_mean || save_invstd)) {
    /* Eval: the statistics used, for the autograd node (the eval-mode backward). */
    s = vl_clone(t[3], &t[6]);
    if (s == VL_OK) s = vl_binary_scalar(VL_BIN_ADD, t[4], eps, false, &t[8]);
    if (s == VL_OK) s = vl_unary(VL_UN_RSQRT, t[8], &t[7]);
  }
  if (s != VL_OK) {
    release_all(t, 10);
    return s;
  }
  *y = t[5];
  t[5] = NULL;
  if (save_mean) *save_mean = t[6], t[6] = NULL;
  if (save_invstd) *save_invstd = t[7], t[7] = NULL;
  release_all(t, 10);
  return VL_OK;
}

vl_status vl_batch_norm_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *weight, vl_tensor *save_mean,
                                 vl_tensor *save_invstd, double eps, vl_tensor **dx, vl_tensor **dweight,
                                 vl_tensor **dbias) {
  return vl_batch_norm_fused_backward(x, dy, weight, NULL, save_mean, save_invstd, eps, VL_BN_ACT_NONE, false, NULL,
                                      dx, dweight, dbias, NULL);
}

vl_status vl_batch_norm_fused_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *weight, vl_tensor *bias,
                                       vl_tensor *save_mean, vl_tensor *save_invstd, double eps, vl_bn_act act,
                                       bool residual, vl_tensor *y, vl_tensor **dx, vl_tensor **dweight,
                                       vl_tensor **dbias, vl_tensor **dr) {
  const char *op = "batch_norm_backward";
  bn_geom g;
  VL_TRY(bn_input(op, x, &g));
  VL_TRY(check_same(op, x, "x", dy, "dy"));
  VL_TRY(check_act(op, act));
  int64_t csize[1] = {g.c};
  VL_TRY(check_param(op, "weight", weight, x, 1, csize, "the input's channels are"));
  VL_TRY(check_param(op, "bias", bias, x, 1, csize, "the input's channels are"));
  if (!save_mean || !save_invstd) return vl_fail(VL_EINVAL, "%s: save_mean and save_invstd are required", op);
  VL_TRY(check_param(op, "save_mean", save_mean, x, 1, csize, "the input's channels are"));
  VL_TRY(check_param(op, "save_invstd", save_invstd, x, 1, csize, "the input's channels are"));
  VL_TRY(check_eps(op, eps));
  /* With a residual the ReLU's mask is read from the forward's output (its inputs are not all here). */
  bool use_y = act == VL_BN_ACT_RELU && (residual || y);
  if (act == VL_BN_ACT_RELU && residual && !y)
    return vl_fail(VL_EINVAL, "%s: the forward's output y is required for relu(bn(x) + residual)", op);
  if (use_y) VL_TRY(check_same(op, x, "x", y, "y"));
  vl_dtype pdt = param_dtype(x->dtype);
  vl_device dev = x->storage->device;
  /* 0 xc, 1 dyc, 2 w, 3 mean, 4 invstd, 5 dx, 6 dweight, 7 dbias, 8 b, 9 yc, 10 dr */
  vl_tensor *t[11] = {0};
  vl_status s = vl_in_family(x, g.nhwc, &t[0]);
  if (s == VL_OK) s = vl_in_family(dy, g.nhwc, &t[1]);
  if (s == VL_OK) s = param_as(weight, pdt, &t[2]);
  if (s == VL_OK) s = param_as(save_mean, pdt, &t[3]);
  if (s == VL_OK) s = param_as(save_invstd, pdt, &t[4]);
  if (s == VL_OK) s = empty_layout(x, g.nhwc, x->dtype, &t[5]);
  if (s == VL_OK && dweight) s = vl_tensor_empty(1, csize, pdt, dev, &t[6]);
  if (s == VL_OK && dbias) s = vl_tensor_empty(1, csize, pdt, dev, &t[7]);
  if (s == VL_OK && act == VL_BN_ACT_RELU && !use_y) s = param_as(bias, pdt, &t[8]);
  if (s == VL_OK && use_y) s = vl_in_family(y, g.nhwc, &t[9]);
  if (s == VL_OK && use_y) s = empty_layout(x, g.nhwc, x->dtype, &t[10]);
  if (s == VL_OK && g.c > 0 && g.n * g.hw == 0) {
    /* No elements: the sums are empty. */
    if (t[6]) s = vl_fill_(t[6], 0);
    if (s == VL_OK && t[7]) s = vl_fill_(t[7], 0);
  } else if (s == VL_OK && vl_tensor_numel(x) > 0) {
    vl_batchnorm_args a = {.dtype = x->dtype, .param_dtype = pdt, .nhwc = g.nhwc, .training = true,
                           .n = g.n, .c = g.c, .hw = g.hw, .x = vl_tensor_data(t[0]), .dy = vl_tensor_data(t[1]),
                           .dx = vl_tensor_data(t[5]), .weight = t[2] ? vl_tensor_data(t[2]) : NULL,
                           .bias = t[8] ? vl_tensor_data(t[8]) : NULL,
                           .save_mean = vl_tensor_data(t[3]), .save_invstd = vl_tensor_data(t[4]),
                           .dweight = t[6] ? vl_tensor_data(t[6]) : NULL,
                           .dbias = t[7] ? vl_tensor_data(t[7]) : NULL, .eps = eps, .act = act,
                           .y = t[9] ? vl_tensor_data(t[9]) : NULL, .dr = t[10] ? vl_tensor_data(t[10]) : NULL};
    s = vl_exec_of(op, dev, &a.ex);
    if (s == VL_OK) s = norm_kernels(dev)->batchnorm_backward(&a);
  }
  if (s == VL_OK && residual && dr) {
    /* The residual's gradient: the masked dy, or dy itself without an activation. */
    if (t[10]) *dr = t[10], t[10] = NULL;
    else *dr = vl_tensor_retain(dy);
  }
  release_all(t + 8, 3);
  return hand_out(s, t, dx, dweight, dbias);
}

/* ======================= layer norm ======================= */

vl_status vl_layer_norm_shape_check(const char *op, const vl_tensor *x, int n, const int64_t *size) {
  bool ok = n >= 1 && n <= x->ndim;
  for (int i = 0; ok && i < n; i++) ok = x->size[x->ndim - n + i] == size[i];
  if (ok) return VL_OK;
  char d[VL_DESC_LEN], s[VL_DESC_LEN];
  return vl_fail(VL_ESHAPE, "%s: normalized_shape %s does not match the last dims of x (x %s)", op,
                 n ? vl_shape_fmt(n, size, s, sizeof s) : "{}", vl_tensor_desc(x, d, sizeof d));
}

static vl_status ln_input(const char *op, const vl_tensor *x, int nnorm, int64_t *rows, int64_t *cols) {
  char d[VL_DESC_LEN];
  VL_TRY(check_float(op, "x", x));
  if (nnorm < 1 || nnorm > x->ndim)
    return vl_fail(VL_ESHAPE, "%s: normalized_shape has %d dims but x has %d (x %s)", op, nnorm, x->ndim,
                   vl_tensor_desc(x, d, sizeof d));
  *rows = 1;
  *cols = 1;
  for (int i = 0; i < x->ndim; i++) {
    if (i < x->ndim - nnorm) *rows *= x->size[i];
    else *cols *= x->size[i];
  }
  if (*cols == 0)
    return vl_fail(VL_ESHAPE, "%s: the normalized dims of x have no elements (x %s)", op, vl_tensor_desc(x, d, sizeof d));
  return VL_OK;
}

vl_status vl_layer_norm(vl_tensor *x, int nnorm, vl_tensor *weight, vl_tensor *bias, double eps, vl_tensor **y,
                        vl_tensor **mean, vl_tensor **rstd) {
  const char *op = "layer_norm";
  int64_t rows, cols;
  VL_TRY(ln_input(op, x, nnorm, &rows, &cols));
  const int64_t *nsize = x->size + (x->ndim - nnorm);
  VL_TRY(check_param(op, "weight", weight, x, nnorm, nsize, "normalized_shape is"));
  VL_TRY(check_param(op, "bias", bias, x, nnorm, nsize, "normalized_shape is"));
  VL_TRY(check_eps(op, eps));
  vl_dtype pdt = param_dtype(x->dtype);
  vl_device dev = x->storage->device;
  /* 0 xc, 1 w, 2 b, 3 y, 4 mean, 5 rstd */
  vl_tensor *t[6] = {0};
  vl_status s = vl_contiguous(x, &t[0]);
  if (s == VL_OK) s = param_as(weight, pdt, &t[1]);
  if (s == VL_OK) s = param_as(bias, pdt, &t[2]);
  if (s == VL_OK) s = vl_tensor_empty(x->ndim, x->size, x->dtype, dev, &t[3]);
  if (s == VL_OK) s = vl_tensor_empty(x->ndim - nnorm, x->size, pdt, dev, &t[4]);
  if (s == VL_OK) s = vl_tensor_empty(x->ndim - nnorm, x->size, pdt, dev, &t[5]);
  if (s == VL_OK && rows > 0) {
    vl_layernorm_args a = {.dtype = x->dtype, .param_dtype = pdt, .rows = rows, .cols = cols,
                           .x = vl_tensor_data(t[0]), .y = vl_tensor_data(t[3]),
                           .weight = t[1] ? vl_tensor_data(t[1]) : NULL, .bias = t[2] ? vl_tensor_data(t[2]) : NULL,
                           .mean = vl_tensor_data(t[4]), .rstd = vl_tensor_data(t[5]), .eps = eps};
    s = vl_exec_of(op, dev, &a.ex);
    if (s == VL_OK) s = norm_kernels(dev)->layernorm_forward(&a);
  }
  if (s != VL_OK) {
    release_all(t, 6);
    return s;
  }
  *y = t[3], t[3] = NULL;
  if (mean) *mean = t[4], t[4] = NULL;
  if (rstd) *rstd = t[5], t[5] = NULL;
  release_all(t, 6);
  return VL_OK;
}

vl_status vl_layer_norm_backward(vl_tensor *x, vl_tensor *dy, int nnorm, vl_tensor *weight, vl_tensor *mean,
                                 vl_tensor *rstd, vl_tensor **dx, vl_tensor **dweight, vl_tensor **dbias) {
  const char *op = "layer_norm_backward";
  int64_t rows, cols;
  VL_TRY(ln_input(op, x, nnorm, &rows, &cols));
  VL_TRY(check_same(op, x, "x", dy, "dy"));
  const int64_t *nsize = x->size + (x->ndim - nnorm);
  VL_TRY(check_param(op, "weight", weight, x, nnorm, nsize, "normalized_shape is"));
  if (!mean || !rstd) return vl_fail(VL_EINVAL, "%s: mean and rstd are required", op);
  VL_TRY(check_param(op, "mean", mean, x, x->ndim - nnorm, x->size, "x's leading dims are"));
  VL_TRY(check_param(op, "rstd", rstd, x, x->ndim - nnorm, x->size, "x's leading dims are"));
  vl_dtype pdt = param_dtype(x->dtype);
  vl_device dev = x->storage->device;
  /* 0 xc, 1 dyc, 2 w, 3 mean, 4 rstd, 5 dx, 6 dweight, 7 dbias */
  vl_tensor *t[8] = {0};
  vl_status s = vl_contiguous(x, &t[0]);
  if (s == VL_OK) s = vl_contiguous(dy, &t[1]);
  if (s == VL_OK) s = param_as(weight, pdt, &t[2]);
  if (s == VL_OK) s = param_as(mean, pdt, &t[3]);
  if (s == VL_OK) s = param_as(rstd, pdt, &t[4]);
  if (s == VL_OK) s = vl_tensor_empty(x->ndim, x->size, x->dtype, dev, &t[5]);
  if (s == VL_OK && dweight) s = vl_tensor_empty(nnorm, nsize, pdt, dev, &t[6]);
  if (s == VL_OK && dbias) s = vl_tensor_empty(nnorm, nsize, pdt, dev, &t[7]);
  if (s == VL_OK && rows == 0) {
    if (t[6]) s = vl_fill_(t[6], 0);
    if (s == VL_OK && t[7]) s = vl_fill_(t[7], 0);
  } else if (s == VL_OK) {
    vl_layernorm_args a = {.dtype = x->dtype, .param_dtype = pdt, .rows = rows, .cols = cols,
                           .x = vl_tensor_data(t[0]), .dy = vl_tensor_data(t[1]), .dx = vl_tensor_data(t[5]),
                           .weight = t[2] ? vl_tensor_data(t[2]) : NULL, .mean = vl_tensor_data(t[3]),
                           .rstd = vl_tensor_data(t[4]), .dweight = t[6] ? vl_tensor_data(t[6]) : NULL,
                           .dbias = t[7] ? vl_tensor_data(t[7]) : NULL};
    s = vl_exec_of(op, dev, &a.ex);
    if (s == VL_OK) s = norm_kernels(dev)->layernorm_backward(&a);
  }
  return hand_out(s, t, dx, dweight, dbias);
}

/* ======================= softmax backward ======================= */

vl_status vl_softmax_backward(vl_tensor *y, vl_tensor *dy, int dim, bool log, vl_tensor **dx) {
  const char *op = log ? "log_softmax_backward" : "softmax_backward";
  VL_TRY(check_float(op, "y", y));
  VL_TRY(check_same(op, y, "y", dy, "dy"));
  int w = 0;
  if (y->ndim == 0 && (dim == 0 || dim == -1)) w = 0; /* as vl_softmax: one element along dim 0 */
  else VL_TRY(vl_wrap_dim(op, dim, y->ndim, &w));
  int64_t outer = 1, len = 1, inner = 1;
  for (int i = 0; i < y->ndim; i++) {
    if (i < w) outer *= y->size[i];
    else if (i == w) len = y->size[i];
    else inner *= y->size[i];
  }
  vl_tensor *t[3] = {0};
  vl_status s = vl_contiguous(y, &t[0]);
  if (s == VL_OK) s = vl_contiguous(dy, &t[1]);
  if (s == VL_OK) s = vl_tensor_empty(y->ndim, y->size, y->dtype, y->storage->device, &t[2]);
  if (s == VL_OK && vl_tensor_numel(y) > 0) {
    vl_softmax_bw_args a = {.dtype = y->dtype, .y = vl_tensor_data(t[0]), .dy = vl_tensor_data(t[1]),
                            .dx = vl_tensor_data(t[2]), .outer = outer, .len = len, .inner = inner, .log = log};
    s = vl_exec_of(op, y->storage->device, &a.ex);
    if (s == VL_OK) s = norm_kernels(y->storage->device)->softmax_backward(&a);
  }
  if (s != VL_OK) {
    release_all(t, 3);
    return s;
  }
  *dx = t[2], t[2] = NULL;
  release_all(t, 3);
  return VL_OK;
}
