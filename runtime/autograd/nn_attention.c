/* runtime/autograd/nn_attention.c: the autograd-recording fused attention (runtime/nn/attention.c).
 *
 * Inputs q, k, v (the mask is a constant: no edge). Saved: q, k, v, the mask, the output, the
 * rows' log-sum-exp and the dropout bits: the backward recomputes the probabilities from them
 * and draws nothing, so it is the same in a CUDA graph's replay and outside one. */
#include "runtime/amp/autocast.h"
#include "runtime/autograd/ops.h"
#include "runtime/nn/nn.h"

static vl_status attn_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const vl_attention_params *p = VL_AG_CTX(n, vl_attention_params);
  vl_tensor *sv[7], *g[3] = {0};
  VL_TRY(vl_node_saved_n(n, 7, sv)); /* q, k, v, mask, out, lse, keep */
  vl_status s = vl_attention_backward(sv[0], sv[1], sv[2], sv[3], sv[4], go[0], sv[5], sv[6], p, &g[0], &g[1], &g[2]);
  return vl_ag_give_n(n, s, 3, g, gi);
}

vl_status vl_ag_attention(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, const vl_attention_params *p,
                          vl_tensor **out) {
  VL_AUTOCAST(VL_AC_ATTENTION, vl_ag_attention(vl_ac[0], vl_ac[1], vl_ac[2], mask, p, out), q, k, v);
  vl_tensor *in[3] = {q, k, v};
  if (!vl_ag_needs(3, in)) return vl_attention(q, k, v, mask, p, out, NULL, NULL);
  vl_tensor *r = NULL, *lse = NULL, *keep = NULL;
  VL_TRY(vl_attention(q, k, v, mask, p, &r, &lse, &keep));
  vl_attention_params c = *p;
  vl_status s = VL_AG_RECORD(.name = "ScaledDotProductAttentionBackward", .backward = attn_backward, .nin = 3,
                             .in = in, .out = &r, .save = {q, k, v, mask, r, lse, keep}, VL_AG_CTX_OF(c));
  vl_tensor_release(lse);
  vl_tensor_release(keep);
  return vl_ag_out(s, r, out);
}
