/* runtime/autograd/nn_fused.c: recorded dropout and softmax cross entropy (runtime/nn/fused.h).
 *
 * DropoutBackward saves no tensor: its context is p and the forward's draw (seed, offset, base),
 * from which the backward regenerates the mask (dx = dy * keep / (1 - p)). Under CUDA graph
 * capture `base` is the graph's RNG buffer, so the captured backward reads the same per-replay
 * counters as the captured forward.
 *
 * CrossEntropyBackward saves the logits (not a copy: the tensor the caller passed), the targets,
 * the per-row log-sum-exp and, for the mean, the count of rows not ignored. */
#include "runtime/amp/autocast.h"
#include "runtime/autograd/ops.h"
#include "runtime/nn/fused.h"
#include "runtime/nn/nn.h"

/* ======================= dropout ======================= */

typedef struct dropout_ctx {
  double p;
  vl_dropout_rng rng;
} dropout_ctx;

static vl_status dropout_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const dropout_ctx *c = VL_AG_CTX(n, dropout_ctx);
  vl_tensor *dx = NULL;
  vl_status s = vl_dropout_apply(go[0], c->p, &c->rng, &dx);
  return vl_ag_give_n(n, s, 1, &dx, gi);
}

vl_status vl_ag_dropout(vl_tensor *x, double p, bool training, vl_tensor **y) {
  VL_TRY(vl_nn_check_prob("dropout", "p", p));
  /* as the composed form did: neither case draws from the generator */
  if (!training || p == 0) {
    *y = vl_tensor_retain(x);
    return VL_OK;
  }
  if (p == 1) return vl_ag_binary_scalar(VL_BIN_MUL, x, 0.0, false, y);
  vl_tensor *in[1] = {x};
  if (!vl_ag_needs(1, in)) return vl_dropout(x, p, y, NULL);
  vl_tensor *r = NULL;
  dropout_ctx c = {.p = p};
  VL_TRY(vl_dropout(x, p, &r, &c.rng));
  return vl_ag_out(VL_AG_RECORD(.name = "DropoutBackward", .backward = dropout_backward, .nin = 1, .in = in,
                                .out = &r, VL_AG_CTX_OF(c)),
                   r, y);
}

/* ======================= cross entropy ======================= */

typedef struct xent_ctx {
  vl_xent_params p;
} xent_ctx;

static vl_status xent_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *sv[4], *g = NULL;
  VL_TRY(vl_node_saved_n(n, 4, sv)); /* logits, target, lse, count */
  vl_status s = vl_cross_entropy_backward(sv[0], sv[1], sv[2], sv[3], go[0], &VL_AG_CTX(n, xent_ctx)->p, &g);
  return vl_ag_give_n(n, s, 1, &g, gi);
}

vl_status vl_ag_cross_entropy(vl_tensor *logits, vl_tensor *target, const vl_xent_params *p, vl_tensor **loss) {
  xent_ctx c = {*p};
  /* PyTorch's autocast runs cross entropy in f32 and returns an f32 loss; the kernels already
   * compute in f32 from half logits, so only the loss's dtype changes (no cast of the logits). */
  if (c.p.out_dtype == VL_NDTYPES && vl_autocast_enabled() && (logits->dtype == VL_F16 || logits->dtype == VL_BF16))
    c.p.out_dtype = VL_F32;
  vl_tensor *in[1] = {logits};
  if (!vl_ag_needs(1, in)) return vl_cross_entropy(logits, target, &c.p, loss, NULL, NULL);
  vl_tensor *r = NULL, *lse = NULL, *count = NULL;
  VL_TRY(vl_cross_entropy(logits, target, &c.p, &r, &lse, c.p.reduction == VL_XENT_MEAN ? &count : NULL));
  vl_status s = VL_AG_RECORD(.name = "CrossEntropyBackward", .backward = xent_backward, .nin = 1, .in = in,
                             .out = &r, .save = {logits, target, lse, count}, VL_AG_CTX_OF(c));
  vl_tensor_release(lse);
  vl_tensor_release(count);
  return vl_ag_out(s, r, loss);
}
