/* runtime/autograd/nn_norm.c: autograd-recording batch norm (plain and fused with ReLU and a
 * residual) and layer norm (runtime/nn/nn.h).
 *
 * The nodes' inputs are x, weight, bias (and batch norm's residual; absent ones NULL: no edge).
 * Saved: x, weight (when given), then the statistics the raw forward returned. Backward formulas
 * call the raw ops only, so they record nothing. */
#include "runtime/amp/autocast.h"
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"

/* ======================= batch norm ======================= */

/* Eval mode: the statistics are constants, so y = x * scale + shift per channel:
 * dx = dy * w * invstd, dweight = sum(dy * (x - mean) * invstd), dbias = sum(dy); g[i] is set
 * when want[i] (dx, dweight, dbias). */
static void bn_eval_backward(vl_fs *f, vl_tensor *x, vl_tensor *dy, vl_tensor *w, vl_tensor *mean, vl_tensor *invstd,
                             const bool *want, vl_tensor **g) {
  int nd = x->ndim, dims[VL_MAX_DIMS], nred = 0;
  int64_t bshape[VL_MAX_DIMS];
  for (int i = 0; i < nd; i++) {
    bshape[i] = i == 1 ? x->size[1] : 1;
    if (i != 1) dims[nred++] = i;
  }
  vl_tensor *mean_b = F_RUN(vl_view(mean, nd, bshape, F_OUT));
  vl_tensor *invstd_b = F_RUN(vl_view(invstd, nd, bshape, F_OUT));
  vl_tensor *dyp = F_TO(dy, invstd->dtype); /* in the statistics' dtype */
  if (want[0]) {
    vl_tensor *scale = w ? F_MUL(w, invstd) : invstd;
    vl_tensor *scale_b = F_RUN(vl_view(scale, nd, bshape, F_OUT));
    vl_tensor *dxp = F_MUL(dyp, scale_b);
    g[0] = F_RUN(vl_to(dxp, x->dtype, x->storage->device, F_OUT));
  }
  if (want[2]) g[2] = F_RUN(vl_reduce(VL_RED_SUM, dyp, nred, dims, false, 0, F_OUT, NULL));
  if (want[1]) {
    vl_tensor *p = F_MUL(F_MUL(F_SUB(x, mean_b), invstd_b), dyp);
    g[1] = F_RUN(vl_reduce(VL_RED_SUM, p, nred, dims, false, 0, F_OUT, NULL));
  }
}

typedef struct bn_ctx {
  bool training;
  double eps;
  vl_bn_act act;
  bool residual;
} bn_ctx;

/* Inputs x, weight, bias, residual. Saved: x, weight, mean, invstd, then what the ReLU's mask
 * needs: the bias in training without a residual (the mask is recomputed from x, so no
 * activation-sized tensor is kept for it), else the output y (read as y > 0). */
static vl_status bn_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const bn_ctx *c = VL_AG_CTX(n, bn_ctx);
  vl_tensor *sv[6], *g[4] = {0}, *dy = go[0];
  VL_TRY(vl_node_saved_n(n, 6, sv)); /* x, weight, mean, invstd, bias, y */
  bool want[4] = {vl_ag_wants(n, 0), vl_ag_wants(n, 1), vl_ag_wants(n, 2), c->residual && vl_ag_wants(n, 3)};
  if (c->training) { /* one raw op writes all four */
    vl_status s = vl_batch_norm_fused_backward(sv[0], dy, sv[1], sv[4], sv[2], sv[3], c->eps, c->act, c->residual,
                                               sv[5], want[0] ? &g[0] : NULL, want[1] ? &g[1] : NULL,
                                               want[2] ? &g[2] : NULL, want[3] ? &g[3] : NULL);
    return vl_ag_give_n(n, s, 4, g, gi); /* converts dweight/dbias to the parameters' dtypes */
  }
  /* Eval: the mask from the saved output, then the affine map's backward. */
  VL_FS(f);
  vl_tensor *m = c->act == VL_BN_ACT_RELU ? F_BIN(RELU_BACKWARD, dy, sv[5]) : dy;
  bn_eval_backward(f, sv[0], m, sv[1], sv[2], sv[3], want, g);
  if (want[3]) g[3] = m;
  return vl_fs_give(f, n, 4, g, gi); /* converts dweight/dbias to the parameters' dtypes */
}

static const char *bn_node_name(vl_bn_act act, bool residual) {
  if (act == VL_BN_ACT_RELU) return residual ? "BatchNormAddReluBackward" : "BatchNormReluBackward";
  return residual ? "BatchNormAddBackward" : "BatchNormBackward";
}

/* The fused op again with autocast's inputs (the residual is cast as x is). */
static vl_status bn_fused_cast(vl_tensor *const *ac, vl_tensor *running_mean, vl_tensor *running_var, bool training,
                               double momentum, double eps, vl_bn_act act, vl_tensor **y) {
  vl_bn_fusion f = {act, ac[3]};
  return vl_ag_batch_norm_fused(ac[0], ac[1], ac[2], running_mean, running_var, training, momentum, eps, &f, y);
}

vl_status vl_ag_batch_norm_fused(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                                 vl_tensor *running_var, bool training, double momentum, double eps,
                                 const vl_bn_fusion *f, vl_tensor **y) {
  vl_bn_act act = f ? f->act : VL_BN_ACT_NONE;
  vl_tensor *res = f ? f->residual : NULL;
  VL_AUTOCAST(VL_AC_BATCH_NORM, bn_fused_cast(vl_ac, running_mean, running_var, training, momentum, eps, act, y), x,
              weight, bias, res);
  vl_tensor *in[4] = {x, weight, bias, res};
  if (!vl_ag_needs(4, in))
    return vl_batch_norm_fused(x, weight, bias, running_mean, running_var, training, momentum, eps, f, y, NULL, NULL);
  vl_tensor *r = NULL, *mean = NULL, *invstd = NULL;
  VL_TRY(vl_batch_norm_fused(x, weight, bias, running_mean, running_var, training, momentum, eps, f, &r, &mean,
                             &invstd));
  bool relu = act == VL_BN_ACT_RELU;
  bn_ctx c = {training, eps, act, res != NULL};
  vl_status s = VL_AG_RECORD(.name = bn_node_name(act, res != NULL), .backward = bn_backward, .nin = 4, .in = in,
                             .out = &r,
                             .save = {x, weight, mean, invstd, relu && training && !res ? bias : NULL,
                                      relu && (res || !training) ? r : NULL},
                             VL_AG_CTX_OF(c));
  vl_tensor_release(mean);
  vl_tensor_release(invstd);
  return vl_ag_out(s, r, y);
}

vl_status vl_ag_batch_norm(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                           vl_tensor *running_var, bool training, double momentum, double eps, vl_tensor **y) {
  return vl_ag_batch_norm_fused(x, weight, bias, running_mean, running_var, training, momentum, eps, NULL, y);
}

/* ======================= layer norm ======================= */

typedef struct ln_ctx {
  int nnorm;
} ln_ctx;

static vl_status ln_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *sv[4], *g[3] = {0};
  VL_TRY(vl_node_saved_n(n, 4, sv)); /* x, weight, mean, rstd */
  vl_status s = vl_layer_norm_backward(sv[0], go[0], VL_AG_CTX(n, ln_ctx)->nnorm, sv[1], sv[2], sv[3],
                                       vl_ag_wants(n, 0) ? &g[0] : NULL, vl_ag_wants(n, 1) ? &g[1] : NULL,
                                       vl_ag_wants(n, 2) ? &g[2] : NULL);
  return vl_ag_give_n(n, s, 3, g, gi);
}

vl_status vl_ag_layer_norm(vl_tensor *x, int nnorm, vl_tensor *weight, vl_tensor *bias, double eps, vl_tensor **y) {
  VL_AUTOCAST(VL_AC_LAYER_NORM, vl_ag_layer_norm(vl_ac[0], nnorm, vl_ac[1], vl_ac[2], eps, y), x, weight, bias);
  vl_tensor *in[3] = {x, weight, bias};
  if (!vl_ag_needs(3, in)) return vl_layer_norm(x, nnorm, weight, bias, eps, y, NULL, NULL);
  vl_tensor *r = NULL, *mean = NULL, *rstd = NULL;
  VL_TRY(vl_layer_norm(x, nnorm, weight, bias, eps, &r, &mean, &rstd));
  ln_ctx c = {nnorm};
  vl_status s = VL_AG_RECORD(.name = "LayerNormBackward", .backward = ln_backward, .nin = 3, .in = in, .out = &r,
                             .save = {x, weight, mean, rstd}, VL_AG_CTX_OF(c));
  vl_tensor_release(mean);
  vl_tensor_release(rstd);
  return vl_ag_out(s, r, y);
}
