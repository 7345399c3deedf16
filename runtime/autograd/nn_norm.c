/* runtime/autograd/nn_norm.c: autograd-recording batch norm and layer norm (runtime/nn/nn.h).
 *
 * The nodes' inputs are x, then weight and bias when given (absent ones get no edge; ints[0]
 * and ints[1] say which are present). Saved: x, weight (when given), then the statistics the
 * raw forward returned. Backward formulas call the raw ops only, so they record nothing. */
#include <stdlib.h>

#include "runtime/autograd/autograd.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"

/* Gradient g for an input of dtype `dt`: g itself or a converted copy; consumes g. */
static vl_status grad_as(vl_tensor **g, vl_dtype dt) {
  if (!*g || (*g)->dtype == dt) return VL_OK;
  vl_tensor *c = NULL;
  vl_status s = vl_to(*g, dt, (*g)->storage->device, &c);
  vl_tensor_release(*g);
  *g = s == VL_OK ? c : NULL;
  return s;
}

/* ======================= batch norm ======================= */

/* Eval mode: the statistics are constants, so y = x * scale + shift per channel:
 * dx = dy * w * invstd, dweight = sum(dy * (x - mean) * invstd), dbias = sum(dy). */
static vl_status bn_eval_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *w, vl_tensor *mean, vl_tensor *invstd,
                                  vl_tensor **dx, vl_tensor **dw, vl_tensor **db) {
  int nd = x->ndim, dims[VL_MAX_DIMS], nred = 0;
  int64_t bshape[VL_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    bshape[i] = i == 1 ? x->size[1] : 1;
    if (i != 1) dims[nred++] = i;
  }
  vl_dtype pdt = invstd->dtype;
  /* 0 mean_b, 1 invstd_b, 2 dy_p, 3 scale, 4 scale_b, 5 t, 6 t2 */
  vl_tensor *t[7] = {0};
  vl_status s = vl_view(mean, nd, bshape, &t[0]);
  if (s == VL_OK) s = vl_view(invstd, nd, bshape, &t[1]);
  if (s == VL_OK) s = vl_to(dy, pdt, dy->storage->device, &t[2]);
  if (s == VL_OK && dx) {
    if (w) s = vl_binary(VL_BIN_MUL, w, invstd, 1.0, &t[3]);
    else t[3] = vl_tensor_retain(invstd);
    if (s == VL_OK) s = vl_view(t[3], nd, bshape, &t[4]);
    if (s == VL_OK) s = vl_binary(VL_BIN_MUL, t[2], t[4], 1.0, &t[5]);
    if (s == VL_OK) s = vl_to(t[5], x->dtype, x->storage->device, dx);
  }
  if (s == VL_OK && db) s = vl_reduce(VL_RED_SUM, t[2], nred, dims, false, 0, db, NULL);
  if (s == VL_OK && dw) {
    vl_tensor_release(t[5]);
    t[5] = NULL;
    s = vl_binary(VL_BIN_SUB, x, t[0], 1.0, &t[5]);
    if (s == VL_OK) s = vl_binary(VL_BIN_MUL, t[5], t[1], 1.0, &t[6]);
    if (s == VL_OK) {
      vl_tensor_release(t[5]);
      t[5] = NULL;
      s = vl_binary(VL_BIN_MUL, t[6], t[2], 1.0, &t[5]);
    }
    if (s == VL_OK) s = vl_reduce(VL_RED_SUM, t[5], nred, dims, false, 0, dw, NULL);
  }
  for (int i = 0; i < 7; i++) vl_tensor_release(t[i]);
  return s;
}

static vl_status bn_backward(vl_node *n, vl_tensor *const *grads_out, vl_tensor **grads_in) {
  bool has_w = n->ints[0] != 0, has_b = n->ints[1] != 0, training = n->ints[2] != 0;
  int iw = has_w ? 1 : -1, ib = has_b ? 1 + has_w : -1;
  for (int i = 0; i < n->nin; i++) grads_in[i] = NULL;
  vl_tensor *dy = grads_out[0];
  if (!dy) return VL_OK;
  vl_tensor *x, *w = NULL, *mean, *invstd;
  int k = 0;
  VL_TRY(vl_node_saved(n, k++, &x));
  if (has_w) VL_TRY(vl_node_saved(n, k++, &w));
  VL_TRY(vl_node_saved(n, k++, &mean));
  VL_TRY(vl_node_saved(n, k++, &invstd));
  bool want_x = n->next[0].node != NULL;
  bool want_w = has_w && n->next[iw].node != NULL, want_b = has_b && n->next[ib].node != NULL;
  vl_tensor *dx = NULL, *dw = NULL, *db = NULL;
  vl_status s;
  if (training)
    s = vl_batch_norm_backward(x, dy, w, mean, invstd, n->scalars[0], want_x ? &dx : NULL, want_w ? &dw : NULL,
                               want_b ? &db : NULL);
  else
    s = bn_eval_backward(x, dy, w, mean, invstd, want_x ? &dx : NULL, want_w ? &dw : NULL, want_b ? &db : NULL);
  if (s == VL_OK && want_w) s = grad_as(&dw, w->dtype);
  if (s == VL_OK && want_b) s = grad_as(&db, (vl_dtype)n->ints[3]);
  if (s != VL_OK) {
    vl_tensor_release(dx), vl_tensor_release(dw), vl_tensor_release(db);
    return s;
  }
  grads_in[0] = dx;
  if (has_w) grads_in[iw] = dw;
  if (has_b) grads_in[ib] = db;
  return VL_OK;
}

vl_status vl_ag_batch_norm(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                           vl_tensor *running_var, bool training, double momentum, double eps, vl_tensor **y) {
  vl_tensor *inputs[3];
  int nin = 0;
  inputs[nin++] = x;
  if (weight) inputs[nin++] = weight;
  if (bias) inputs[nin++] = bias;
  if (!vl_ag_needs(nin, inputs))
    return vl_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, y, NULL, NULL);
  vl_tensor *r = NULL, *mean = NULL, *invstd = NULL;
  VL_TRY(vl_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps, &r, &mean, &invstd));
  vl_node *n = NULL;
  vl_status s = vl_node_create("BatchNormBackward", bn_backward, nin, inputs, 1, &n);
  if (s == VL_OK) {
    n->ints[0] = weight != NULL;
    n->ints[1] = bias != NULL;
    n->ints[2] = training;
    n->ints[3] = bias ? (int64_t)bias->dtype : 0;
    n->scalars[0] = eps;
    s = vl_node_save(n, x);
    if (s == VL_OK && weight) s = vl_node_save(n, weight);
    if (s == VL_OK) s = vl_node_save(n, mean);
    if (s == VL_OK) s = vl_node_save(n, invstd);
    if (s == VL_OK) s = vl_node_set_outputs(n, 1, &r);
  }
  if (n) vl_node_release(n);
  vl_tensor_release(mean);
  vl_tensor_release(invstd);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *y = r;
  return VL_OK;
}

/* ======================= layer norm ======================= */

static vl_status ln_backward(vl_node *n, vl_tensor *const *grads_out, vl_tensor **grads_in) {
  bool has_w = n->ints[0] != 0, has_b = n->ints[1] != 0;
  int nnorm = (int)n->ints[2];
  int iw = has_w ? 1 : -1, ib = has_b ? 1 + has_w : -1;
  for (int i = 0; i < n->nin; i++) grads_in[i] = NULL;
  vl_tensor *dy = grads_out[0];
  if (!dy) return VL_OK;
  vl_tensor *x, *w = NULL, *mean, *rstd;
  int k = 0;
  VL_TRY(vl_node_saved(n, k++, &x));
  if (has_w) VL_TRY(vl_node_saved(n, k++, &w));
  VL_TRY(vl_node_saved(n, k++, &mean));
  VL_TRY(vl_node_saved(n, k++, &rstd));
  bool want_x = n->next[0].node != NULL;
  bool want_w = has_w && n->next[iw].node != NULL, want_b = has_b && n->next[ib].node != NULL;
  vl_tensor *dx = NULL, *dw = NULL, *db = NULL;
  vl_status s = vl_layer_norm_backward(x, dy, nnorm, w, mean, rstd, want_x ? &dx : NULL, want_w ? &dw : NULL,
                                       want_b ? &db : NULL);
  if (s == VL_OK && want_w) s = grad_as(&dw, w->dtype);
  if (s == VL_OK && want_b) s = grad_as(&db, (vl_dtype)n->ints[3]);
  if (s != VL_OK) {
    vl_tensor_release(dx), vl_tensor_release(dw), vl_tensor_release(db);
    return s;
  }
  grads_in[0] = dx;
  if (has_w) grads_in[iw] = dw;
  if (has_b) grads_in[ib] = db;
  return VL_OK;
}

vl_status vl_ag_layer_norm(vl_tensor *x, int nnorm, vl_tensor *weight, vl_tensor *bias, double eps, vl_tensor **y) {
  vl_tensor *inputs[3];
  int nin = 0;
  inputs[nin++] = x;
  if (weight) inputs[nin++] = weight;
  if (bias) inputs[nin++] = bias;
  if (!vl_ag_needs(nin, inputs)) return vl_layer_norm(x, nnorm, weight, bias, eps, y, NULL, NULL);
  vl_tensor *r = NULL, *mean = NULL, *rstd = NULL;
  VL_TRY(vl_layer_norm(x, nnorm, weight, bias, eps, &r, &mean, &rstd));
  vl_node *n = NULL;
  vl_status s = vl_node_create("LayerNormBackward", ln_backward, nin, inputs, 1, &n);
  if (s == VL_OK) {
    n->ints[0] = weight != NULL;
    n->ints[1] = bias != NULL;
    n->ints[2] = nnorm;
    n->ints[3] = bias ? (int64_t)bias->dtype : 0;
    n->scalars[0] = eps;
    s = vl_node_save(n, x);
    if (s == VL_OK && weight) s = vl_node_save(n, weight);
    if (s == VL_OK) s = vl_node_save(n, mean);
    if (s == VL_OK) s = vl_node_save(n, rstd);
    if (s == VL_OK) s = vl_node_set_outputs(n, 1, &r);
  }
  if (n) vl_node_release(n);
  vl_tensor_release(mean);
  vl_tensor_release(rstd);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *y = r;
  return VL_OK;
}
