/* runtime/nn/pooling.c: the 2-D pooling front end (max, avg, adaptive avg): checks, output sizes
 * (PyTorch's formulas, ceil_mode included), layouts. Outputs and max-pool argmaxes keep the input's
 * layout family (channels-last or NCHW-contiguous); an argmax is the offset of the chosen cell in
 * its window (runtime/backend/nn_kernels.h), one byte per output for kernels of fewer than 255 cells.
 * The backward needs only the input's geometry (vl_pool2d_input), not its values, so autograd
 * keeps no reference to the input: ResNet's stem activation dies right after the max pool. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/layout.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

static const char *const pool_names[] = {
    [VL_POOL_MAX] = "max_pool2d",
    [VL_POOL_AVG] = "avg_pool2d",
    [VL_POOL_ADAPTIVE_AVG] = "adaptive_avg_pool2d",
};
VL_TABLE_SIZE(pool_names, VL_NPOOL_KINDS);

static const char *pool_name(vl_pool_kind k) { return (unsigned)k < VL_NPOOL_KINDS ? pool_names[k] : "pool2d"; }

/* The device's pooling table; the callers ran vl_exec_of first (see norm.c). */
static const vl_pooling_kernels *pool_kernels(vl_device d) { return vl_backend_of(d)->pooling; }

static int64_t floordiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* PyTorch's pooling_output_shape. */
static int64_t out_size(int64_t in, int k, int pad, int stride, int dil, bool ceil_mode) {
  int64_t o = floordiv(in + 2 * (int64_t)pad - (int64_t)dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  /* The last window must start inside the input or the left padding. */
  if (ceil_mode && (o - 1) * stride >= in + pad) o--;
  return o;
}

vl_pool2d_input vl_pool2d_input_of(const vl_tensor *x) {
  vl_pool2d_input in = {.dtype = x->dtype, .device = x->storage->device, .nhwc = vl_is_channels_last(x)};
  for (int i = 0; i < 4; i++) in.size[i] = i < x->ndim ? x->size[i] : 1;
  return in;
}

/* "2x3x8x8 f32 cpu": the input as vl_tensor_desc would name it. */
static const char *input_desc(const vl_pool2d_input *in, char *buf, size_t n) {
  char shape[VL_DESC_LEN], dev[32];
  snprintf(buf, n, "%s %s %s", vl_shape_fmt(4, in->size, shape, sizeof shape), vl_dtype_name(in->dtype),
           vl_device_str(in->device, dev, sizeof dev));
  return buf;
}

static vl_status pool_check_in(const char *op, const vl_pool2d_input *x, const vl_pool2d_params *p, int64_t *P,
                               int64_t *Q) {
  char d[VL_DESC_LEN];
  if (!vl_dtype_is_float(x->dtype))
    return vl_fail(VL_EDTYPE, "%s: input must be a float tensor (input %s)", op, input_desc(x, d, sizeof d));
  if (x->size[2] < 1 || x->size[3] < 1)
    return vl_fail(VL_ESHAPE, "%s: input height and width must be >= 1 (input %s)", op, input_desc(x, d, sizeof d));
  if (p->kind == VL_POOL_ADAPTIVE_AVG) {
    if (p->out_h < 1 || p->out_w < 1)
      return vl_fail(VL_EINVAL, "%s: output size must be >= 1 (got %lldx%lld)", op, (long long)p->out_h,
                     (long long)p->out_w);
    *P = p->out_h;
    *Q = p->out_w;
    return VL_OK;
  }
  if (p->kind != VL_POOL_MAX && p->kind != VL_POOL_AVG)
    return vl_fail(VL_EINVAL, "pool2d: unknown pooling kind %d", (int)p->kind);
  if (p->kernel[0] < 1 || p->kernel[1] < 1)
    return vl_fail(VL_EINVAL, "%s: kernel size must be >= 1 (got %dx%d)", op, p->kernel[0], p->kernel[1]);
  if (p->stride[0] < 1 || p->stride[1] < 1)
    return vl_fail(VL_EINVAL, "%s: stride must be >= 1 (got %dx%d)", op, p->stride[0], p->stride[1]);
  if (p->dilation[0] < 1 || p->dilation[1] < 1)
    return vl_fail(VL_EINVAL, "%s: dilation must be >= 1 (got %dx%d)", op, p->dilation[0], p->dilation[1]);
  if (p->kind == VL_POOL_AVG && (p->dilation[0] != 1 || p->dilation[1] != 1))
    return vl_fail(VL_EINVAL, "%s: dilation is not supported (got %dx%d)", op, p->dilation[0], p->dilation[1]);
  if ((int64_t)p->kernel[0] * p->kernel[1] > INT32_MAX)
    return vl_fail(VL_EINVAL, "%s: kernel %dx%d has too many cells", op, p->kernel[0], p->kernel[1]);
  if (p->pad[0] < 0 || p->pad[1] < 0 || p->pad[0] > p->kernel[0] / 2 || p->pad[1] > p->kernel[1] / 2)
    return vl_fail(VL_EINVAL, "%s: padding must be between 0 and half the kernel size (padding %dx%d, kernel %dx%d)",
                   op, p->pad[0], p->pad[1], p->kernel[0], p->kernel[1]);
  int64_t ph = out_size(x->size[2], p->kernel[0], p->pad[0], p->stride[0], p->dilation[0], p->ceil_mode);
  int64_t pw = out_size(x->size[3], p->kernel[1], p->pad[1], p->stride[1], p->dilation[1], p->ceil_mode);
  if (ph < 1 || pw < 1)
    return vl_fail(VL_ESHAPE,
                   "%s: output size %lldx%lld is not positive (input %s, kernel %dx%d, stride %dx%d, padding %dx%d, "
                   "dilation %dx%d)",
                   op, (long long)ph, (long long)pw, input_desc(x, d, sizeof d), p->kernel[0], p->kernel[1],
                   p->stride[0], p->stride[1], p->pad[0], p->pad[1], p->dilation[0], p->dilation[1]);
  *P = ph;
  *Q = pw;
  return VL_OK;
}

static vl_status pool_check(const char *op, const vl_tensor *x, const vl_pool2d_params *p, int64_t *P, int64_t *Q) {
  char d[VL_DESC_LEN];
  if (x->ndim != 4)
    return vl_fail(VL_ESHAPE, "%s: input must be 4-D N x C x H x W (input %s)", op, vl_tensor_desc(x, d, sizeof d));
  vl_pool2d_input in = vl_pool2d_input_of(x);
  return pool_check_in(op, &in, p, P, Q);
}

static void fill_args(vl_pool2d_args *a, const vl_pool2d_input *x, const vl_pool2d_params *p, int64_t P, int64_t Q,
                      vl_exec ex) {
  memset(a, 0, sizeof *a);
  a->kind = p->kind;
  a->dtype = x->dtype;
  a->nhwc = x->nhwc;
  a->n = x->size[0];
  a->c = x->size[1];
  a->h = x->size[2];
  a->w = x->size[3];
  a->p = P;
  a->q = Q;
  for (int i = 0; i < 2; i++) {
    a->kernel[i] = p->kernel[i];
    a->stride[i] = p->stride[i];
    a->pad[i] = p->pad[i];
    a->dilation[i] = p->kind == VL_POOL_MAX ? p->dilation[i] : 1;
  }
  a->count_include_pad = p->count_include_pad;
  a->argmax_dtype = vl_pool_argmax_dtype(p->kernel[0], p->kernel[1]);
  a->ex = ex;
}

vl_status vl_pool2d(vl_tensor *x, const vl_pool2d_params *p, vl_tensor **y, vl_tensor **argmax) {
  const char *op = pool_name(p->kind);
  int64_t P, Q;
  VL_TRY(pool_check(op, x, p, &P, &Q));
  vl_device dev = x->storage->device;
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  vl_pool2d_input in = vl_pool2d_input_of(x);
  int64_t ysize[4] = {x->size[0], x->size[1], P, Q};
  vl_tensor *xin = NULL, *out = NULL, *idx = NULL;
  vl_status s = vl_in_family(x, in.nhwc, &xin);
  if (s == VL_OK) s = vl_empty_family(ysize, in.nhwc, x->dtype, dev, &out);
  if (s == VL_OK && p->kind == VL_POOL_MAX)
    s = vl_empty_family(ysize, in.nhwc, vl_pool_argmax_dtype(p->kernel[0], p->kernel[1]), dev, &idx);
  if (s == VL_OK && vl_tensor_numel(out) > 0) {
    vl_pool2d_args a;
    fill_args(&a, &in, p, P, Q, ex);
    a.x = vl_tensor_data(xin);
    a.y = vl_tensor_data(out);
    a.argmax = idx ? vl_tensor_data(idx) : NULL;
    s = pool_kernels(dev)->forward(&a);
    if (s != VL_OK) s = vl_fail_prefix(s, "%s: ", op);
  }
  vl_tensor_release(xin);
  if (s != VL_OK) {
    vl_tensor_release(out);
    vl_tensor_release(idx);
    return s;
  }
  *y = out;
  if (argmax) *argmax = idx;
  else vl_tensor_release(idx);
  return VL_OK;
}

vl_status vl_pool2d_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *argmax, const vl_pool2d_params *p,
                             vl_tensor **dx) {
  char name[64];
  snprintf(name, sizeof name, "%s_backward", pool_name(p->kind));
  int64_t P, Q;
  VL_TRY(pool_check(name, x, p, &P, &Q));
  vl_pool2d_input in = vl_pool2d_input_of(x);
  return vl_pool2d_backward_in(&in, dy, argmax, p, dx);
}

vl_status vl_pool2d_backward_in(const vl_pool2d_input *in, vl_tensor *dy, vl_tensor *argmax,
                                const vl_pool2d_params *p, vl_tensor **dx) {
  char name[64], d1[VL_DESC_LEN], d2[VL_DESC_LEN], dv[32];
  snprintf(name, sizeof name, "%s_backward", pool_name(p->kind));
  const char *op = name;
  int64_t P, Q;
  VL_TRY(pool_check_in(op, in, p, &P, &Q));
  if (!vl_device_eq(dy->storage->device, in->device))
    return vl_fail(VL_EDEVICE, "%s: grad_output is on %s but the input was on %s", op,
                   vl_device_str(dy->storage->device, d1, sizeof d1), vl_device_str(in->device, dv, sizeof dv));
  if (dy->dtype != in->dtype)
    return vl_fail(VL_EDTYPE, "%s: grad_output dtype differs from the input's (grad_output %s, input %s)", op,
                   vl_tensor_desc(dy, d1, sizeof d1), input_desc(in, d2, sizeof d2));
  int64_t ysize[4] = {in->size[0], in->size[1], P, Q};
  if (dy->ndim != 4 || memcmp(dy->size, ysize, sizeof ysize) != 0)
    return vl_fail(VL_ESHAPE, "%s: grad_output must have the output's shape %lldx%lldx%lldx%lld (grad_output %s)",
                   op, (long long)ysize[0], (long long)ysize[1], (long long)ysize[2], (long long)ysize[3],
                   vl_tensor_desc(dy, d1, sizeof d1));
  if (p->kind == VL_POOL_MAX) {
    vl_dtype adt = vl_pool_argmax_dtype(p->kernel[0], p->kernel[1]);
    if (!argmax) return vl_fail(VL_EINVAL, "%s: the argmax of the forward is required", op);
    VL_TRY(vl_check_same_device(op, dy, "grad_output", argmax, "argmax"));
    if (argmax->dtype != adt || argmax->ndim != 4 || memcmp(argmax->size, ysize, sizeof ysize) != 0)
      return vl_fail(VL_ESHAPE, "%s: argmax must be the forward's %s window offsets of the output's shape "
                     "%lldx%lldx%lldx%lld (argmax %s)", op, vl_dtype_name(adt), (long long)ysize[0],
                     (long long)ysize[1], (long long)ysize[2], (long long)ysize[3],
                     vl_tensor_desc(argmax, d1, sizeof d1));
  }
  vl_device dev = in->device;
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  vl_tensor *dyin = NULL, *idx = NULL, *out = NULL;
  vl_status s = vl_in_family(dy, in->nhwc, &dyin);
  if (s == VL_OK && p->kind == VL_POOL_MAX) s = vl_in_family(argmax, in->nhwc, &idx);
  if (s == VL_OK) s = vl_empty_family(in->size, in->nhwc, in->dtype, dev, &out);
  if (s == VL_OK && vl_tensor_numel(out) > 0) {
    if (vl_tensor_numel(dyin) == 0) {
      s = vl_fill_(out, 0.0);
    } else {
      vl_pool2d_args a;
      fill_args(&a, in, p, P, Q, ex);
      a.dy = vl_tensor_data(dyin);
      a.dx = vl_tensor_data(out);
      a.argmax = idx ? vl_tensor_data(idx) : NULL;
      s = pool_kernels(dev)->backward(&a);
      if (s != VL_OK) s = vl_fail_prefix(s, "%s: ", op);
    }
  }
  vl_tensor_release(dyin);
  vl_tensor_release(idx);
  if (s != VL_OK) {
    vl_tensor_release(out);
    return s;
  }
  *dx = out;
  return VL_OK;
}
