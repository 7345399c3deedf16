/* runtime/nn/optim.c: front ends of the fused optimizer step, the per-tensor L2 norms and the
 * AMP unscale (runtime/nn/nn.h). Everything is checked before any kernel runs; then the tensors'
 * data pointers and sizes are gathered into host arrays and handed to the device's kernel table
 * once for the whole group (the CUDA kernels pack them into launch parameters in chunks, so there
 * is no per-parameter launch and no host synchronisation). */
#include <stdio.h>
#include <stdlib.h>

#include "runtime/backend/nn_kernels.h"
#include "runtime/core/layout.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

static const char *const kind_names[] = {
    [VL_OPTIM_SGD] = "sgd", [VL_OPTIM_ADAMW] = "adamw", [VL_OPTIM_LAMB] = "lamb", [VL_OPTIM_LARS] = "lars"};
VL_TABLE_SIZE(kind_names, VL_NOPTIM_KINDS);

/* The device's optimizer table, or the "built without CUDA" failure naming op. */
static vl_status optim_kernels_of(const char *op, vl_device dev, const vl_optim_kernels **out) {
  const vl_backend *be;
  VL_TRY(vl_backend_check(op, dev, &be));
  *out = be->optim;
  return VL_OK;
}

/* A 1-element f32 tensor on dev (found_inf / inv_scale). */
static vl_status check_scalar(const char *op, const char *what, const vl_tensor *t, vl_device dev) {
  char d[VL_DESC_LEN], ds[64];
  if (t->dtype != VL_F32 || vl_tensor_numel(t) != 1)
    return vl_fail(VL_EINVAL, "%s: %s must be a 1-element f32 tensor (got %s)", op, what,
                   vl_tensor_desc(t, d, sizeof d));
  if (!vl_device_eq(t->storage->device, dev))
    return vl_fail(VL_EDEVICE, "%s: %s is on %s but the tensors are on %s", op, what,
                   vl_tensor_desc(t, d, sizeof d), vl_device_str(dev, ds, sizeof ds));
  return VL_OK;
}

/* The {lr, step} tensor of a capturable step: 2 contiguous f64 on dev. */
static vl_status check_dyn(const char *op, const vl_tensor *t, vl_device dev) {
  char d[VL_DESC_LEN], ds[64];
  if (t->dtype != VL_F64 || vl_tensor_numel(t) != 2 || !vl_tensor_is_contiguous(t))
    return vl_fail(VL_EINVAL, "%s: dyn must be a contiguous 2-element f64 tensor {lr, step} (got %s)", op,
                   vl_tensor_desc(t, d, sizeof d));
  if (!vl_device_eq(t->storage->device, dev))
    return vl_fail(VL_EDEVICE, "%s: dyn is on %s but the tensors are on %s", op, vl_tensor_desc(t, d, sizeof d),
                   vl_device_str(dev, ds, sizeof ds));
  return VL_OK;
}

/* Role `role` tensor i of a group: on dev, dense, of dtype dt, with `numel` elements. */
static vl_status check_member(const char *op, const char *role, int i, const vl_tensor *t, vl_device dev,
                              vl_dtype dt, int64_t numel) {
  char d[VL_DESC_LEN], ds[64];
  if (!t) return vl_fail(VL_EINVAL, "%s: %s[%d] is missing", op, role, i + 1);
  if (!vl_device_eq(t->storage->device, dev))
    return vl_fail(VL_EDEVICE, "%s: %s[%d] is on another device than params[1] (%s; expected %s)", op, role, i + 1,
                   vl_tensor_desc(t, d, sizeof d), vl_device_str(dev, ds, sizeof ds));
  if (t->dtype != dt)
    return vl_fail(VL_EDTYPE, "%s: %s[%d] has dtype %s, expected %s like the rest of its group (%s)", op, role, i + 1,
                   vl_dtype_name(t->dtype), vl_dtype_name(dt), vl_tensor_desc(t, d, sizeof d));
  /* Dense in any dim order (channels-last weights too): the kernels walk [data, data + numel). */
  if (!vl_tensor_is_dense(t))
    return vl_fail(VL_EINVAL, "%s: %s[%d] is not dense (%s)", op, role, i + 1, vl_tensor_desc(t, d, sizeof d));
  if (numel >= 0 && vl_tensor_numel(t) != numel)
    return vl_fail(VL_ESHAPE, "%s: %s[%d] has %lld elements but params[%d] has %lld (%s)", op, role, i + 1,
                   (long long)vl_tensor_numel(t), i + 1, (long long)numel, vl_tensor_desc(t, d, sizeof d));
  return VL_OK;
}

/* Host arrays of n pointers (4 roles) and n sizes, in one allocation. */
typedef struct ptr_arrays {
  void *block;
  void **p[4];
  int64_t *numel;
} ptr_arrays;

static vl_status arrays_alloc(const char *op, int n, ptr_arrays *a) {
  size_t bytes = (size_t)n * (4 * sizeof(void *) + sizeof(int64_t));
  a->block = calloc(1, bytes ? bytes : 1);
  if (!a->block) return vl_fail(VL_EOOM, "%s: out of host memory for %d tensor pointers", op, n);
  for (int r = 0; r < 4; r++) a->p[r] = (void **)a->block + (size_t)r * n;
  a->numel = (int64_t *)((void **)a->block + (size_t)4 * n);
  return VL_OK;
}

static void bump(vl_tensor *t) {
  if (t) t->storage->version++;
}

vl_status vl_optim_step(vl_optim_kind kind, int n, vl_tensor *const *params, vl_tensor *const *grads,
                        vl_tensor *const *state1, vl_tensor *const *state2, const vl_optim_hparams *h,
                        vl_tensor *found_inf, vl_tensor *inv_scale) {
  const char *op = "optim_step";
  char d[VL_DESC_LEN];
  if ((int)kind < VL_OPTIM_SGD || kind > VL_OPTIM_LARS)
    return vl_fail(VL_EINVAL, "%s: unknown optimizer kind %d", op, (int)kind);
  if (n < 0) return vl_fail(VL_EINVAL, "%s: negative tensor count %d", op, n);
  if (!h) return vl_fail(VL_EINVAL, "%s: no hyper-parameters", op);
  if (n == 0) return VL_OK;
  if (!params || !grads || !params[0]) return vl_fail(VL_EINVAL, "%s: params and grads are required", op);
  const char *kn = kind_names[kind];
  vl_device dev = params[0]->storage->device;
  vl_dtype pdt = params[0]->dtype;
  if (!vl_dtype_is_float(pdt))
    return vl_fail(VL_EDTYPE, "%s (%s): parameters must be floats, got %s", op, kn, vl_tensor_desc(params[0], d, sizeof d));

  /* Which state the kind reads: SGD/LARS keep a momentum buffer only when momentum != 0. */
  bool need1 = kind == VL_OPTIM_ADAMW || kind == VL_OPTIM_LAMB || h->momentum != 0.0;
  bool need2 = kind == VL_OPTIM_ADAMW || kind == VL_OPTIM_LAMB;
  if (need1 && (!state1 || !state1[0]))
    return vl_fail(VL_EINVAL, "%s (%s): state1 (%s) is required", op, kn,
                   need2 ? "exp_avg" : "the momentum buffer");
  if (need2 && (!state2 || !state2[0])) return vl_fail(VL_EINVAL, "%s (%s): state2 (exp_avg_sq) is required", op, kn);
  vl_dtype sdt = need1 ? state1[0]->dtype : pdt;
  bool half = pdt == VL_F16 || pdt == VL_BF16;
  if (sdt != pdt && !(half && sdt == VL_F32))
    return vl_fail(VL_EDTYPE, "%s (%s): state dtype %s does not fit %s parameters (the state is the parameters' dtype, "
                   "or f32 for f16/bf16 parameters)", op, kn, vl_dtype_name(sdt), vl_dtype_name(pdt));
  if (h->dyn) VL_TRY(check_dyn(op, h->dyn, dev));
  if (kind == VL_OPTIM_ADAMW || kind == VL_OPTIM_LAMB) {
    if (h->step < 1 && !h->dyn) return vl_fail(VL_EINVAL, "%s (%s): step must be >= 1 (1-based), got %lld", op, kn, (long long)h->step);
    if (!(h->beta1 >= 0 && h->beta1 < 1) || !(h->beta2 >= 0 && h->beta2 < 1))
      return vl_fail(VL_EINVAL, "%s (%s): betas must be in [0, 1), got %g and %g", op, kn, h->beta1, h->beta2);
  }
  for (int i = 0; i < n; i++) {
    VL_TRY(check_member(op, "params", i, params[i], dev, pdt, -1));
    int64_t ne = vl_tensor_numel(params[i]);
    VL_TRY(check_member(op, "grads", i, grads[i], dev, pdt, ne));
    if (need1) VL_TRY(check_member(op, "state1", i, state1[i], dev, sdt, ne));
    if (need2) VL_TRY(check_member(op, "state2", i, state2[i], dev, sdt, ne));
    /* Element k of every role must be the same element: the state shares the parameter's layout
     * (it is made with empty_like); a gradient in another layout is re-laid below. */
    if ((need1 && !vl_same_layout(state1[i], params[i])) || (need2 && !vl_same_layout(state2[i], params[i])))
      return vl_fail(VL_EINVAL, "%s (%s): the state of params[%d] is laid out differently from it (%s): make it "
                     "with zeros_like(param)", op, kn, i + 1, vl_tensor_desc(params[i], d, sizeof d));
  }
  if (found_inf) VL_TRY(check_scalar(op, "found_inf", found_inf, dev));
  if (inv_scale) VL_TRY(check_scalar(op, "inv_scale", inv_scale, dev));

  const vl_optim_kernels *K;
  VL_TRY(optim_kernels_of(op, dev, &K));
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  ptr_arrays arr;
  VL_TRY(arrays_alloc(op, n, &arr));
  /* Gradients in another dense layout than their parameter (e.g. a contiguous gradient of a
   * channels-last weight) are copied into the parameter's layout first. */
  vl_tensor **relaid = calloc((size_t)n, sizeof *relaid);
  if (!relaid) {
    free(arr.block);
    return vl_fail(VL_EOOM, "%s: out of host memory", op);
  }
  vl_status s = VL_OK;
  for (int i = 0; s == VL_OK && i < n; i++) {
    if (vl_same_layout(grads[i], params[i])) continue;
    /* Flat views of contiguous tensors pair up element by element whatever their shapes. */
    if (vl_tensor_is_contiguous(grads[i]) && vl_tensor_is_contiguous(params[i])) continue;
    if (!vl_broadcasts_to(grads[i], params[i]->ndim, params[i]->size) || grads[i]->ndim != params[i]->ndim) {
      char d2[VL_DESC_LEN];
      s = vl_fail(VL_ESHAPE, "%s (%s): grads[%d] (%s) does not have the shape of params[%d] (%s)", op, kn, i + 1,
                  vl_tensor_desc(grads[i], d, sizeof d), i + 1, vl_tensor_desc(params[i], d2, sizeof d2));
      break;
    }
    s = vl_empty_like(params[i], pdt, dev, &relaid[i]);
    if (s == VL_OK) s = vl_copy_(relaid[i], grads[i]);
  }
  for (int i = 0; s == VL_OK && i < n; i++) {
    arr.p[0][i] = vl_tensor_data(params[i]);
    arr.p[1][i] = vl_tensor_data(relaid[i] ? relaid[i] : grads[i]);
    arr.p[2][i] = need1 ? vl_tensor_data(state1[i]) : NULL;
    arr.p[3][i] = need2 ? vl_tensor_data(state2[i]) : NULL;
    arr.numel[i] = vl_tensor_numel(params[i]);
  }
  vl_optim_args a = {
      .kind = kind,
      .param_dtype = pdt,
      .grad_dtype = pdt,
      .state_dtype = sdt,
      .n = n,
      .params = arr.p[0],
      .grads = arr.p[1],
      .state1 = need1 ? arr.p[2] : NULL,
      .state2 = need2 ? arr.p[3] : NULL,
      .numel = arr.numel,
      .lr = h->lr,
      .momentum = h->momentum,
      .dampening = h->dampening,
      .weight_decay = h->weight_decay,
      .beta1 = h->beta1,
      .beta2 = h->beta2,
      .eps = h->eps,
      .trust_coef = h->trust_coef,
      .nesterov = h->nesterov,
      .first_step = h->first_step,
      .step = h->step,
      .found_inf = found_inf ? (const float *)vl_tensor_data(found_inf) : NULL,
      .inv_scale = inv_scale ? (const float *)vl_tensor_data(inv_scale) : NULL,
      .dyn = h->dyn ? (const double *)vl_tensor_data(h->dyn) : NULL,
      .sround = h->stochastic_round && half,
      .sround_seed = h->sround_seed,
      .scratch = NULL, /* the CUDA kernels use the stream's workspace for their per-chunk partial norms */
      .scratch_bytes = 0,
      .ex = ex,
  };
  if (s == VL_OK) s = K->step(&a);
  free(arr.block);
  for (int i = 0; i < n; i++) vl_tensor_release(relaid[i]);
  free(relaid);
  /* Written in place (or possibly partly, on a launch failure): saved copies are stale now. */
  for (int i = 0; i < n; i++) {
    bump(params[i]);
    if (need1) bump(state1[i]);
    if (need2) bump(state2[i]);
  }
  if (s != VL_OK) return vl_fail_prefix(s, "%s (%s): ", op, kn);
  return VL_OK;
}

vl_status vl_optim_advance(vl_tensor *dyn, vl_tensor *found_inf) {
  const char *op = "optim_advance";
  if (!dyn) return vl_fail(VL_EINVAL, "%s: dyn is required", op);
  vl_device dev = dyn->storage->device;
  VL_TRY(check_dyn(op, dyn, dev));
  if (found_inf) VL_TRY(check_scalar(op, "found_inf", found_inf, dev));
  const vl_optim_kernels *K;
  VL_TRY(optim_kernels_of(op, dev, &K));
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  VL_TRY(K->advance((double *)vl_tensor_data(dyn), found_inf ? (const float *)vl_tensor_data(found_inf) : NULL, ex));
  bump(dyn);
  return VL_OK;
}

/* Common checks of l2norms / unscale_: one device, one float dtype. */
static vl_status check_list(const char *op, int n, vl_tensor *const *ts, bool need_contig) {
  char d[VL_DESC_LEN];
  if (n < 0) return vl_fail(VL_EINVAL, "%s: negative tensor count %d", op, n);
  if (n == 0) return VL_OK;
  if (!ts || !ts[0]) return vl_fail(VL_EINVAL, "%s: tensor 1 is missing", op);
  if (!vl_dtype_is_float(ts[0]->dtype))
    return vl_fail(VL_EDTYPE, "%s: expected float tensors, got %s (tensor 1)", op, vl_tensor_desc(ts[0], d, sizeof d));
  for (int i = 0; i < n; i++) {
    if (!ts[i]) return vl_fail(VL_EINVAL, "%s: tensor %d is missing", op, i + 1);
    if (!vl_device_eq(ts[i]->storage->device, ts[0]->storage->device) || ts[i]->dtype != ts[0]->dtype)
      return vl_fail(VL_EINVAL, "%s: tensor %d (%s) differs in device or dtype from tensor 1 (%s); group by both first",
                     op, i + 1, vl_tensor_desc(ts[i], d, sizeof d), vl_dtype_name(ts[0]->dtype));
    if (need_contig && !vl_tensor_is_contiguous(ts[i]))
      return vl_fail(VL_EINVAL, "%s: tensor %d is not contiguous (%s)", op, i + 1, vl_tensor_desc(ts[i], d, sizeof d));
  }
  return VL_OK;
}

vl_status vl_l2norms(int n, vl_tensor *const *ts, vl_tensor **out) {
  const char *op = "l2norms";
  VL_TRY(check_list(op, n, ts, false));
  vl_device dev = n ? ts[0]->storage->device : vl_cpu_device();
  int64_t size = n;
  vl_tensor *res = NULL;
  if (n == 0) return vl_tensor_empty(1, &size, VL_F32, dev, out);
  const vl_optim_kernels *K;
  VL_TRY(optim_kernels_of(op, dev, &K));
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  /* Non-contiguous members are read through contiguous copies (the norm only reads). */
  vl_tensor **c = calloc((size_t)n, sizeof *c);
  ptr_arrays arr = {0};
  vl_status s = c ? VL_OK : vl_fail(VL_EOOM, "%s: out of host memory for %d tensors", op, n);
  for (int i = 0; s == VL_OK && i < n; i++) s = vl_contiguous(ts[i], &c[i]);
  if (s == VL_OK) s = arrays_alloc(op, n, &arr);
  if (s == VL_OK) s = vl_tensor_empty(1, &size, VL_F32, dev, &res);
  if (s == VL_OK) {
    for (int i = 0; i < n; i++) {
      arr.p[0][i] = vl_tensor_data(c[i]);
      arr.numel[i] = vl_tensor_numel(c[i]);
    }
    s = K->l2norms(ts[0]->dtype, n, arr.p[0], arr.numel, (float *)vl_tensor_data(res), ex);
  }
  for (int i = 0; c && i < n; i++) vl_tensor_release(c[i]);
  free(c);
  free(arr.block);
  if (s != VL_OK) {
    vl_tensor_release(res);
    return s;
  }
  *out = res;
  return VL_OK;
}

vl_status vl_unscale_(int n, vl_tensor *const *ts, vl_tensor *inv_scale, vl_tensor *found_inf) {
  const char *op = "unscale_";
  VL_TRY(check_list(op, n, ts, true));
  if (!inv_scale || !found_inf) return vl_fail(VL_EINVAL, "%s: inv_scale and found_inf are required", op);
  if (n == 0) return VL_OK;
  vl_device dev = ts[0]->storage->device;
  VL_TRY(check_scalar(op, "inv_scale", inv_scale, dev));
  VL_TRY(check_scalar(op, "found_inf", found_inf, dev));
  const vl_optim_kernels *K;
  VL_TRY(optim_kernels_of(op, dev, &K));
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  ptr_arrays arr;
  VL_TRY(arrays_alloc(op, n, &arr));
  for (int i = 0; i < n; i++) {
    arr.p[0][i] = vl_tensor_data(ts[i]);
    arr.numel[i] = vl_tensor_numel(ts[i]);
  }
  vl_status s = K->unscale(ts[0]->dtype, n, arr.p[0], arr.numel, (const float *)vl_tensor_data(inv_scale),
                           (float *)vl_tensor_data(found_inf), ex);
  free(arr.block);
  for (int i = 0; i < n; i++) bump(ts[i]);
  bump(found_inf);
  return s;
}
