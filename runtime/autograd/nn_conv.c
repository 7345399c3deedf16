/* runtime/autograd/nn_conv.c: autograd-recording conv2d and pool2d (runtime/nn/nn.h).
 *
 * ConvolutionBackward: inputs x, w and (when given) bias; saves x and w; ints hold the
 * parameters. Pool2dBackward: input x; saves x (for its shape and layout) and, for max pooling,
 * the argmax indices of the forward. Backward formulas call the raw front ends, which record
 * nothing. */
#include <string.h>

#include "runtime/autograd/autograd.h"
#include "runtime/nn/nn.h"

/* ---- conv2d ---- */

static void conv_params_get(const vl_node *n, vl_conv2d_params *p) {
  for (int i = 0; i < 2; i++) {
    p->stride[i] = (int)n->ints[i];
    p->pad[i] = (int)n->ints[2 + i];
    p->dilation[i] = (int)n->ints[4 + i];
  }
  p->groups = (int)n->ints[6];
}

static vl_status conv_backward(vl_node *n, vl_tensor *const *grads_out, vl_tensor **grads_in) {
  for (int i = 0; i < n->nin; i++) grads_in[i] = NULL;
  vl_tensor *dy = grads_out[0];
  if (!dy) return VL_OK;
  vl_tensor *x, *w;
  VL_TRY(vl_node_saved(n, 0, &x));
  VL_TRY(vl_node_saved(n, 1, &w));
  vl_conv2d_params p;
  conv_params_get(n, &p);
  bool want_x = n->next[0].node != NULL, want_w = n->next[1].node != NULL;
  bool want_b = n->nin == 3 && n->next[2].node != NULL;
  if (!want_x && !want_w && !want_b) return VL_OK;
  vl_tensor *dx = NULL, *dw = NULL, *db = NULL;
  VL_TRY(vl_conv2d_backward(x, w, dy, &p, want_x ? &dx : NULL, want_w ? &dw : NULL, want_b ? &db : NULL));
  grads_in[0] = dx;
  grads_in[1] = dw;
  if (n->nin == 3) grads_in[2] = db;
  return VL_OK;
}

vl_status vl_ag_conv2d(vl_tensor *x, vl_tensor *w, vl_tensor *bias, const vl_conv2d_params *p, vl_tensor **y) {
  vl_tensor *inputs[3] = {x, w, bias};
  int nin = bias ? 3 : 2;
  if (!vl_ag_needs(nin, inputs)) return vl_conv2d(x, w, bias, p, y);
  vl_tensor *r = NULL;
  VL_TRY(vl_conv2d(x, w, bias, p, &r));
  vl_node *n = NULL;
  vl_status s = vl_node_create("ConvolutionBackward", conv_backward, nin, inputs, 1, &n);
  if (s == VL_OK) {
    for (int i = 0; i < 2; i++) {
      n->ints[i] = p->stride[i];
      n->ints[2 + i] = p->pad[i];
      n->ints[4 + i] = p->dilation[i];
    }
    n->ints[6] = p->groups;
    s = vl_node_save(n, x);
    if (s == VL_OK) s = vl_node_save(n, w);
    if (s == VL_OK) s = vl_node_set_outputs(n, 1, &r);
  }
  if (n) vl_node_release(n);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *y = r;
  return VL_OK;
}

/* ---- pool2d ---- */

static void pool_params_get(const vl_node *n, vl_pool2d_params *p) {
  memset(p, 0, sizeof *p);
  p->kind = (vl_pool_kind)n->ints[0];
  for (int i = 0; i < 2; i++) {
    p->kernel[i] = (int)n->ints[1 + i];
    p->stride[i] = (int)n->ints[3 + i];
    p->pad[i] = (int)n->ints[5 + i];
    p->dilation[i] = (int)n->ints[7 + i];
  }
  p->ceil_mode = n->ints[9] != 0;
  p->count_include_pad = n->ints[10] != 0;
  p->out_h = n->ints[11];
  p->out_w = n->ints[12];
}

static void pool_params_set(vl_node *n, const vl_pool2d_params *p) {
  n->ints[0] = p->kind;
  for (int i = 0; i < 2; i++) {
    n->ints[1 + i] = p->kernel[i];
    n->ints[3 + i] = p->stride[i];
    n->ints[5 + i] = p->pad[i];
    n->ints[7 + i] = p->dilation[i];
  }
  n->ints[9] = p->ceil_mode;
  n->ints[10] = p->count_include_pad;
  n->ints[11] = p->out_h;
  n->ints[12] = p->out_w;
}

static vl_status pool_backward(vl_node *n, vl_tensor *const *grads_out, vl_tensor **grads_in) {
  grads_in[0] = NULL;
  vl_tensor *dy = grads_out[0];
  if (!dy || !n->next[0].node) return VL_OK;
  vl_pool2d_params p;
  pool_params_get(n, &p);
  vl_tensor *x, *idx = NULL;
  VL_TRY(vl_node_saved(n, 0, &x));
  if (p.kind == VL_POOL_MAX) VL_TRY(vl_node_saved(n, 1, &idx));
  return vl_pool2d_backward(x, dy, idx, &p, &grads_in[0]);
}

vl_status vl_ag_pool2d(vl_tensor *x, const vl_pool2d_params *p, vl_tensor **y) {
  if (!vl_ag_needs(1, &x)) return vl_pool2d(x, p, y, NULL);
  vl_tensor *r = NULL, *idx = NULL;
  VL_TRY(vl_pool2d(x, p, &r, p->kind == VL_POOL_MAX ? &idx : NULL));
  const char *name = p->kind == VL_POOL_MAX ? "MaxPool2DBackward"
                     : p->kind == VL_POOL_AVG ? "AvgPool2DBackward"
                                              : "AdaptiveAvgPool2DBackward";
  vl_node *n = NULL;
  vl_status s = vl_node_create(name, pool_backward, 1, &x, 1, &n);
  if (s == VL_OK) {
    pool_params_set(n, p);
    s = vl_node_save(n, x);
    if (s == VL_OK && idx) s = vl_node_save(n, idx);
    if (s == VL_OK) s = vl_node_set_outputs(n, 1, &r);
  }
  if (n) vl_node_release(n);
  vl_tensor_release(idx);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *y = r;
  return VL_OK;
}
