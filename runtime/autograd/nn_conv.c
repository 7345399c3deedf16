/* runtime/autograd/nn_conv.c: autograd-recording conv2d and pool2d (runtime/nn/nn.h). The nodes'
 * contexts are the layers' own parameter structs. Backward formulas call the raw front ends,
 * which record nothing. */
#include "runtime/amp/autocast.h"
#include "runtime/autograd/ops.h"
#include "runtime/nn/nn.h"

/* ---- conv2d ---- */

/* Inputs: x, w, bias (NULL when absent: no edge). Saved: x, w. Context: vl_conv2d_params. */
static vl_status conv_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *sv[2], *g[3] = {0};
  VL_TRY(vl_node_saved_n(n, 2, sv));
  vl_status s = vl_conv2d_backward(sv[0], sv[1], go[0], VL_AG_CTX(n, vl_conv2d_params),
                                   vl_ag_wants(n, 0) ? &g[0] : NULL, vl_ag_wants(n, 1) ? &g[1] : NULL,
                                   vl_ag_wants(n, 2) ? &g[2] : NULL);
  return vl_ag_give_n(n, s, 3, g, gi);
}

vl_status vl_ag_conv2d(vl_tensor *x, vl_tensor *w, vl_tensor *bias, const vl_conv2d_params *p, vl_tensor **y) {
  VL_AUTOCAST(VL_AC_CONV2D, vl_ag_conv2d(vl_ac[0], vl_ac[1], vl_ac[2], p, y), x, w, bias);
  vl_tensor *r, *in[3] = {x, w, bias};
  VL_TRY(vl_conv2d(x, w, bias, p, &r));
  return vl_ag_out(VL_AG_RECORD(.name = "ConvolutionBackward", .backward = conv_backward, .nin = 3, .in = in,
                                .out = &r, .save = {x, w}, VL_AG_CTX_OF(*p)),
                   r, y);
}

/* ---- pool2d ---- */

/* Saved: the argmax window offsets of max pooling (nothing for the average pools). Context: the
 * parameters and the input's geometry: the input itself is not kept, so its memory goes as soon
 * as nothing else holds it (ResNet's stem activation, whose BN + ReLU backward recomputes its
 * mask from the BN input, would otherwise live until the backward only for its shape). */
typedef struct pool_ctx {
  vl_pool2d_params p;
  vl_pool2d_input in;
} pool_ctx;

static vl_status pool_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const pool_ctx *c = VL_AG_CTX(n, pool_ctx);
  vl_tensor *idx = NULL, *dx = NULL;
  if (c->p.kind == VL_POOL_MAX) VL_TRY(vl_node_saved(n, 0, &idx));
  return vl_ag_give_n(n, vl_pool2d_backward_in(&c->in, go[0], idx, &c->p, &dx), 1, &dx, gi);
}

vl_status vl_ag_pool2d(vl_tensor *x, const vl_pool2d_params *p, vl_tensor **y) {
  if (!vl_ag_needs(1, &x)) return vl_pool2d(x, p, y, NULL);
  vl_tensor *r = NULL, *idx = NULL;
  VL_TRY(vl_pool2d(x, p, &r, p->kind == VL_POOL_MAX ? &idx : NULL));
  const char *name = p->kind == VL_POOL_MAX   ? "MaxPool2DBackward"
                     : p->kind == VL_POOL_AVG ? "AvgPool2DBackward"
                                              : "AdaptiveAvgPool2DBackward";
  pool_ctx c = {*p, vl_pool2d_input_of(x)};
  vl_status s = VL_AG_RECORD(.name = name, .backward = pool_backward, .nin = 1, .in = &x, .out = &r, .save = {idx},
                             VL_AG_CTX_OF(c));
  vl_tensor_release(idx);
  return vl_ag_out(s, r, y);
}
