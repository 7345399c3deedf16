/* runtime/nn/conv.c: the 2-D convolution front end (checks, layouts, bias).
 *
 * Layout (PyTorch's rule): the convolution runs in the NHWC family when the input or the weight
 * is channels-last (NHWC-dense, and not also plain contiguous), else NCHW-contiguous. Deciding by
 * the input alone would leave a channels-last model fed a 1-channel image (N x 1 x H x W is both
 * layouts at once, so it counts as NCHW) running NCHW from its first layer on, converting every
 * weight on every call. The other operand is converted to the chosen family when it differs.
 * Outputs and input gradients are in the family the convolution ran in, except that a
 * channels-last input always gets channels-last results (a backend may not run a dtype NHWC, see
 * run_nhwc);
 * weight gradients come back in the weight's own layout (what autograd and optimizers expect). */
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/layout.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

/* The layout the kernel runs in: NHWC when the input or the weight is channels-last and the
 * backend runs NHWC convolutions of that dtype (CUDA's f64 does not: cuDNN's double support is
 * NCHW only), else NCHW. */
static bool run_nhwc(const vl_backend *be, const vl_tensor *x, const vl_tensor *w) {
  return (vl_is_channels_last(x) || vl_is_channels_last(w)) && be->supports(VL_OP_CONV, x->dtype, VL_LAYOUT_NHWC);
}

/* A result computed in NCHW for a channels-last input goes back to channels-last. */
static vl_status to_input_layout(const vl_tensor *x, bool nhwc, vl_tensor **t) {
  if (nhwc || !vl_is_channels_last(x) || *t == NULL) return VL_OK;
  vl_tensor *r = NULL;
  VL_TRY(vl_to_channels_last(*t, &r));
  vl_tensor_release(*t);
  *t = r;
  return VL_OK;
}

static vl_status check_params(const char *op, const vl_conv2d_params *p) {
  if (p->groups < 1) return vl_fail(VL_EINVAL, "%s: groups must be >= 1 (got %d)", op, p->groups);
  if (p->stride[0] < 1 || p->stride[1] < 1)
    return vl_fail(VL_EINVAL, "%s: stride must be >= 1 (got %dx%d)", op, p->stride[0], p->stride[1]);
  if (p->pad[0] < 0 || p->pad[1] < 0)
    return vl_fail(VL_EINVAL, "%s: padding must be >= 0 (got %dx%d)", op, p->pad[0], p->pad[1]);
  if (p->dilation[0] < 1 || p->dilation[1] < 1)
    return vl_fail(VL_EINVAL, "%s: dilation must be >= 1 (got %dx%d)", op, p->dilation[0], p->dilation[1]);
  return VL_OK;
}

static int64_t floordiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

/* Every check of x, w (and bias when not NULL); the output size into *P, *Q. */
static vl_status conv_check(const char *op, vl_tensor *x, vl_tensor *w, vl_tensor *bias, const vl_conv2d_params *p,
                            int64_t *P, int64_t *Q) {
  char dx[VL_DESC_LEN], dw[VL_DESC_LEN], db[VL_DESC_LEN];
  if (x->ndim != 4)
    return vl_fail(VL_ESHAPE, "%s: input must be 4-D N x C x H x W (input %s)", op, vl_tensor_desc(x, dx, sizeof dx));
  if (w->ndim != 4)
    return vl_fail(VL_ESHAPE, "%s: weight must be 4-D K x C/groups x R x S (weight %s)", op,
                   vl_tensor_desc(w, dw, sizeof dw));
  VL_TRY(vl_nn_check_device(op, x, "input", w, "weight"));
  if (!vl_dtype_is_float(x->dtype) || x->dtype != w->dtype)
    return vl_fail(VL_EDTYPE, "%s: input and weight must be float tensors of one dtype (input %s, weight %s)", op,
                   vl_tensor_desc(x, dx, sizeof dx), vl_tensor_desc(w, dw, sizeof dw));
  VL_TRY(check_params(op, p));
  int64_t c = x->size[1], k = w->size[0], r = w->size[2], s = w->size[3];
  if (w->size[1] * p->groups != c)
    return vl_fail(VL_ESHAPE, "%s: input has %lld channels but weight expects %lld (input %s, weight %s%s)", op,
                   (long long)c, (long long)(w->size[1] * p->groups), vl_tensor_desc(x, dx, sizeof dx),
                   vl_tensor_desc(w, dw, sizeof dw), p->groups > 1 ? ", groups > 1" : "");
  if (k == 0 || r == 0 || s == 0 || c == 0)
    return vl_fail(VL_ESHAPE, "%s: empty weight or input channels (input %s, weight %s)", op,
                   vl_tensor_desc(x, dx, sizeof dx), vl_tensor_desc(w, dw, sizeof dw));
  if (k % p->groups != 0)
    return vl_fail(VL_ESHAPE, "%s: weight has %lld output channels, not divisible by groups %d (weight %s)", op,
                   (long long)k, p->groups, vl_tensor_desc(w, dw, sizeof dw));
  int64_t nh = x->size[2] + 2 * (int64_t)p->pad[0] - (int64_t)p->dilation[0] * (r - 1) - 1;
  int64_t nw = x->size[3] + 2 * (int64_t)p->pad[1] - (int64_t)p->dilation[1] * (s - 1) - 1;
  int64_t ph = floordiv(nh, p->stride[0]) + 1, pw = floordiv(nw, p->stride[1]) + 1;
  if (ph <= 0 || pw <= 0 || x->size[2] == 0 || x->size[3] == 0)
    return vl_fail(VL_ESHAPE,
                   "%s: output size %lldx%lld is not positive (input %s, kernel %lldx%lld, padding %dx%d, "
                   "stride %dx%d, dilation %dx%d)",
                   op, (long long)ph, (long long)pw, vl_tensor_desc(x, dx, sizeof dx), (long long)r, (long long)s,
                   p->pad[0], p->pad[1], p->stride[0], p->stride[1], p->dilation[0], p->dilation[1]);
  if (bias) {
    VL_TRY(vl_nn_check_device(op, x, "input", bias, "bias"));
    if (bias->ndim != 1 || bias->size[0] != k)
      return vl_fail(VL_ESHAPE, "%s: bias must have shape [%lld] (the weight's output channels) (bias %s, weight %s)",
                     op, (long long)k, vl_tensor_desc(bias, db, sizeof db), vl_tensor_desc(w, dw, sizeof dw));
    if (bias->dtype != x->dtype)
      return vl_fail(VL_EDTYPE, "%s: bias dtype differs from the input's (bias %s, input %s)", op,
                     vl_tensor_desc(bias, db, sizeof db), vl_tensor_desc(x, dx, sizeof dx));
  }
  *P = ph;
  *Q = pw;
  return VL_OK;
}

static void fill_args(vl_conv_args *a, const vl_tensor *x, const vl_tensor *w, const vl_conv2d_params *p, bool nhwc,
                      int64_t P, int64_t Q) {
  memset(a, 0, sizeof *a);
  a->dtype = x->dtype;
  a->nhwc = nhwc;
  a->n = x->size[0];
  a->c = x->size[1];
  a->h = x->size[2];
  a->w = x->size[3];
  a->k = w->size[0];
  a->r = w->size[2];
  a->s = w->size[3];
  a->p = P;
  a->q = Q;
  for (int i = 0; i < 2; i++) {
    a->stride[i] = p->stride[i];
    a->pad[i] = p->pad[i];
    a->dilation[i] = p->dilation[i];
  }
  a->groups = p->groups;
  a->allow_tf32 = vl_ctx()->allow_tf32;
  a->benchmark = vl_cudnn_benchmark();
  a->deterministic = vl_deterministic();
}

vl_status vl_conv2d(vl_tensor *x, vl_tensor *w, vl_tensor *bias, const vl_conv2d_params *p, vl_tensor **y) {
  const char *op = "conv2d";
  int64_t P, Q;
  VL_TRY(conv_check(op, x, w, bias, p, &P, &Q));
  vl_device dev = x->storage->device;
  vl_conv_args a;
  VL_TRY(vl_exec_of(op, dev, &a.ex));
  vl_exec ex = a.ex;
  const vl_backend *be = vl_backend_of(dev);
  bool nhwc = run_nhwc(be, x, w);
  vl_tensor *xin = NULL, *win = NULL, *out = NULL, *bv = NULL;
  vl_status s = vl_in_family(x, nhwc, &xin);
  if (s == VL_OK) s = vl_in_family(w, nhwc, &win);
  int64_t ysize[4] = {x->size[0], w->size[0], P, Q};
  if (s == VL_OK) s = vl_empty_family(ysize, nhwc, x->dtype, dev, &out);
  if (s == VL_OK && x->size[0] > 0) {
    fill_args(&a, x, w, p, nhwc, P, Q);
    a.ex = ex;
    a.x = vl_tensor_data(xin);
    a.wt = vl_tensor_data(win);
    a.y = vl_tensor_data(out);
    s = be->conv->forward(&a);
    if (s != VL_OK) s = vl_fail_prefix(s, "%s: ", op);
  }
  if (s == VL_OK && bias) {
    int64_t bsize[4] = {1, w->size[0], 1, 1};
    s = vl_reshape(bias, 4, bsize, &bv);
    if (s == VL_OK) s = vl_binary_(VL_BIN_ADD, out, bv, 1.0);
  }
  if (s == VL_OK) s = to_input_layout(x, nhwc, &out);
  vl_tensor_release(xin);
  vl_tensor_release(win);
  vl_tensor_release(bv);
  if (s != VL_OK) {
    vl_tensor_release(out);
    return s;
  }
  *y = out;
  return VL_OK;
}

vl_status vl_conv2d_backward(vl_tensor *x, vl_tensor *w, vl_tensor *dy, const vl_conv2d_params *p, vl_tensor **dx,
                             vl_tensor **dw, vl_tensor **dbias) {
  const char *op = "conv2d_backward";
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  int64_t P, Q;
  VL_TRY(conv_check(op, x, w, NULL, p, &P, &Q));
  VL_TRY(vl_check_same_device(op, x, "input", dy, "grad_output"));
  if (dy->dtype != x->dtype)
    return vl_fail(VL_EDTYPE, "%s: grad_output dtype differs from the input's (grad_output %s, input %s)", op,
                   vl_tensor_desc(dy, d1, sizeof d1), vl_tensor_desc(x, d2, sizeof d2));
  int64_t ysize[4] = {x->size[0], w->size[0], P, Q};
  if (dy->ndim != 4 || memcmp(dy->size, ysize, sizeof ysize) != 0)
    return vl_fail(VL_ESHAPE, "%s: grad_output must have the output's shape %lldx%lldx%lldx%lld (grad_output %s)",
                   op, (long long)ysize[0], (long long)ysize[1], (long long)ysize[2], (long long)ysize[3],
                   vl_tensor_desc(dy, d1, sizeof d1));
  vl_device dev = x->storage->device;
  vl_exec ex;
  VL_TRY(vl_exec_of(op, dev, &ex));
  const vl_backend *be = vl_backend_of(dev);
  bool nhwc = run_nhwc(be, x, w);
  const vl_conv_kernels *kern = be->conv;
  vl_tensor *xin = NULL, *win = NULL, *dyin = NULL, *gx = NULL, *gw = NULL, *gw2 = NULL, *gb = NULL;
  vl_status s = vl_in_family(dy, nhwc, &dyin);
  if (s == VL_OK && dx) s = vl_in_family(w, nhwc, &win);
  if (s == VL_OK && dw) s = vl_in_family(x, nhwc, &xin);
  vl_conv_args a;
  fill_args(&a, x, w, p, nhwc, P, Q);
  a.ex = ex;
  if (s == VL_OK && dx) {
    s = vl_empty_family(x->size, nhwc, x->dtype, dev, &gx);
    if (s == VL_OK && x->size[0] > 0) {
      a.wt = vl_tensor_data(win);
      a.dy = vl_tensor_data(dyin);
      a.dx = vl_tensor_data(gx);
      s = kern->backward_data(&a);
      if (s != VL_OK) s = vl_fail_prefix(s, "%s: ", op);
    }
  }
  if (s == VL_OK && dw) {
    s = vl_empty_family(w->size, nhwc, w->dtype, dev, &gw);
    if (s == VL_OK && x->size[0] == 0) s = vl_fill_(gw, 0.0); /* an empty batch: a zero gradient */
    else if (s == VL_OK) {
      a.x = vl_tensor_data(xin);
      a.dy = vl_tensor_data(dyin);
      a.dwt = vl_tensor_data(gw);
      s = kern->backward_filter(&a);
      if (s != VL_OK) s = vl_fail_prefix(s, "%s: ", op);
    }
    /* Back to the weight's own layout. */
    if (s == VL_OK) s = vl_is_channels_last(w) ? vl_to_channels_last(gw, &gw2) : vl_contiguous(gw, &gw2);
  }
  if (s == VL_OK) s = to_input_layout(x, nhwc, &gx);
  if (s == VL_OK && dbias) {
    const int dims[3] = {0, 2, 3};
    s = vl_reduce(VL_RED_SUM, dyin, 3, dims, false, 0.0, &gb, NULL);
  }
  vl_tensor_release(xin);
  vl_tensor_release(win);
  vl_tensor_release(dyin);
  vl_tensor_release(gw);
  if (s != VL_OK) {
    vl_tensor_release(gx);
    vl_tensor_release(gw2);
    vl_tensor_release(gb);
    return s;
  }
  if (dx) *dx = gx;
  if (dw) *dw = gw2;
  if (dbias) *dbias = gb;
  return VL_OK;
}
