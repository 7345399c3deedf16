/* runtime/nn/pooling.c: the 2-D pooling front end (max, avg, adaptive avg): checks, output sizes
 * (PyTorch's formulas, ceil_mode included), layouts. Outputs and max-pool indices keep the input's
 * layout family (channels-last or NCHW-contiguous); the indices are h*W + w within the plane. */
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

static vl_status pool_check(const char *op, vl_tensor *x, const vl_pool2d_params *p, int64_t *P, int64_t *Q) {
  char d[VL_DESC_LEN];
  if (x->ndim != 4)
    return vl_fail(VL_ESHAPE, "%s: input must be 4-D N x C x H x W (input %s)", op, vl_tensor_desc(x, d, sizeof d));
  if (!vl_dtype_is_float(x->dtype))
    return vl_fail(VL_EDTYPE, "%s: input must be a float tensor (input %s)", op, vl_tensor_desc(x, d, sizeof d));
  if (x->size[2] < 1 || x->size[3] < 1)
    return vl_fail(VL_ESHAPE, "%s: input height and width must be >= 1 (input %s)", op,
                   vl_tensor_desc(x, d, sizeof d));
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
  if (p->pad[0] < 0 || p->pad[1] < 0 || p->pad[0] > p->kernel[0] / 2 || p->pad[1] > p->kernel[1] / 2)
    return vl_fail(VL_EINVAL, "%s: padding must be between 0 and half the kernel size (padding %dx%d, kernel %dx%d)",
                   op, p->pad[0], p->pad[1], p->kernel[0], p->kernel[1]);
  int64_t ph = out_size(x->size[2], p->kernel[0], p->pad[0], p->stride[0], p->dilation[0], p->ceil_mode);
  int64_t pw = out_size(x->size[3], p->kernel[1], p->pad[1], p->stride[1], p->dilation[1], p->ceil_mode);
  if (ph < 1 || pw < 1)
    return vl_fail(VL_ESHAPE,
                   "%s: output size %lldx%lld is not positive (input %s, kernel %dx%d, stride %dx%d, padding %dx%d, "
                   "dilation %dx%d)",
                   op, (long long)ph, (long long)pw, vl_tensor_desc(x, d, sizeof d), p->kernel[0], p->kernel[1],
                   p->stride[0], p->stride[1], p->pad[0], p->pad[1], p->dilation[0], p->dilation[1]);
  *P = ph;
  *Q = pw;
  return VL_OK;
}

static void fill_args(vl_pool2d_args *a, const vl_tensor *x, const vl_pool2d_params *p, bool nhwc, int64_t P,
                      int64_t Q, vl_exec ex) {
  memset(a, 0, sizeof *a);
  a->kind = p->kind;
  a->dtype = x->dtype;
  a->nhwc = nhwc;
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
  a->ex = ex;
}

vl_status vl_pool2d(vl_tensor *x, const vl_pool2d_params *p, vl_tensor **y, vl_tensor **indices) {
  const char *op = pool_name(p->kind);
  int64_t P, Q;
  VL_TRY(pool_check(op, x, p, &P, &Q));
  vl_device dev = x->storage->device;
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  bool nhwc = vl_is_channels_last(x);
  int64_t ysize[4] = {x->size[0], x->size[1], P, Q};
  vl_tensor *xin = NULL, *out = NULL, *idx = NULL;
  vl_status s = vl_in_family(x, nhwc, &xin);
  if (s == VL_OK) s = vl_empty_family(ysize, nhwc, x->dtype, dev, &out);
  if (s == VL_OK && p->kind == VL_POOL_MAX) s = vl_empty_family(ysize, nhwc, VL_I64, dev, &idx);
  if (s == VL_OK && vl_tensor_numel(out) > 0) {
    vl_pool2d_args a;
    fill_args(&a, x, p, nhwc, P, Q, ex);
    a.x = vl_tensor_data(xin);
    a.y = vl_tensor_data(out);
    a.indices = idx ? (int64_t *)vl_tensor_data(idx) : NULL;
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
  if (indices) *indices = idx;
  else vl_tensor_release(idx);
  return VL_OK;
}

vl_status vl_pool2d_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *indices, const vl_pool2d_params *p,
                             vl_tensor **dx) {
  char name[64], d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  snprintf(name, sizeof name, "%s_backward", pool_name(p->kind));
  const char *op = name;
  int64_t P, Q;
  VL_TRY(pool_check(op, x, p, &P, &Q));
  VL_TRY(vl_check_same_device(op, x, "input", dy, "grad_output"));
  if (dy->dtype != x->dtype)
    return vl_fail(VL_EDTYPE, "%s: grad_output dtype differs from the input's (grad_output %s, input %s)", op,
                   vl_tensor_desc(dy, d1, sizeof d1), vl_tensor_desc(x, d2, sizeof d2));
  int64_t ysize[4] = {x->size[0], x->size[1], P, Q};
  if (dy->ndim != 4 || memcmp(dy->size, ysize, sizeof ysize) != 0)
    return vl_fail(VL_ESHAPE, "%s: grad_output must have the output's shape %lldx%lldx%lldx%lld (grad_output %s)",
                   op, (long long)ysize[0], (long long)ysize[1], (long long)ysize[2], (long long)ysize[3],
                   vl_tensor_desc(dy, d1, sizeof d1));
  if (p->kind == VL_POOL_MAX) {
    if (!indices) return vl_fail(VL_EINVAL, "%s: the indices of the forward are required", op);
    VL_TRY(vl_check_same_device(op, x, "input", indices, "indices"));
    if (indices->dtype != VL_I64 || indices->ndim != 4 || memcmp(indices->size, ysize, sizeof ysize) != 0)
      return vl_fail(VL_ESHAPE, "%s: indices must be i64 of the output's shape %lldx%lldx%lldx%lld (indices %s)", op,
                     (long long)ysize[0], (long long)ysize[1], (long long)ysize[2], (long long)ysize[3],
                     vl_tensor_desc(indices, d1, sizeof d1));
  }
  vl_device dev = x->storage->device;
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  bool nhwc = vl_is_channels_last(x);
  vl_tensor *dyin = NULL, *idx = NULL, *out = NULL;
  vl_status s = vl_in_family(dy, nhwc, &dyin);
  if (s == VL_OK && p->kind == VL_POOL_MAX) s = vl_in_family(indices, nhwc, &idx);
  if (s == VL_OK) s = vl_empty_family(x->size, nhwc, x->dtype, dev, &out);
  if (s == VL_OK && vl_tensor_numel(out) > 0) {
    if (vl_tensor_numel(dyin) == 0) {
      s = vl_fill_(out, 0.0);
    } else {
      vl_pool2d_args a;
      fill_args(&a, x, p, nhwc, P, Q, ex);
      a.dy = vl_tensor_data(dyin);
      a.dx = vl_tensor_data(out);
      a.indices = idx ? (int64_t *)vl_tensor_data(idx) : NULL;
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
