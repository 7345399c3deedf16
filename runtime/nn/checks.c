/* runtime/nn/checks.c: the argument checks of the layers that scripts/v100/nn/functional.lua
 * composes from tensor ops (linear, embedding, dropout, attention, the losses) and of the layer
 * modules (input ranks). The composition runs in Lua, the checks run here, once, before any
 * work: so that every layer error is phrased in one place, in the layer's words (the op and the
 * operands, as the C layer ops conv2d/batch_norm/... phrase theirs), instead of surfacing from
 * an inner op ("gather: ..." for a class id out of range). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/ops_internal.h"

vl_status vl_nn_check_device(const char *op, const vl_tensor *x, const char *xn, const vl_tensor *p, const char *pn) {
  if (!p || vl_device_eq(x->storage->device, p->storage->device)) return VL_OK;
  /* The most common slip (a batch left on the cpu, a model not moved): say which is where. */
  char dx[VL_DESC_LEN], dp[VL_DESC_LEN], ex[32], ep[32];
  return vl_fail(VL_EDEVICE, "%s: %s is on %s but %s is on %s (%s %s, %s %s)", op, xn,
                 vl_device_str(x->storage->device, ex, sizeof ex), pn, vl_device_str(p->storage->device, ep, sizeof ep),
                 xn, vl_tensor_desc(x, dx, sizeof dx), pn, vl_tensor_desc(p, dp, sizeof dp));
}

vl_status vl_nn_check_prob(const char *op, const char *what, double p) {
  /* Written so that NaN fails too. */
  if (p >= 0 && p <= 1) return VL_OK;
  if (isnan(p)) return vl_fail(VL_EINVAL, "%s: %s must be in [0, 1], got nan", op, what); /* not "-nan" */
  return vl_fail(VL_EINVAL, "%s: %s must be in [0, 1], got %g", op, what, p);
}

vl_status vl_nn_check_ndim(const char *op, const vl_tensor *x, unsigned mask) {
  if (x->ndim < 32 && (mask >> x->ndim) & 1u) return VL_OK;
  char want[128] = "", d[VL_DESC_LEN];
  size_t len = 0;
  for (int i = 0; i < 32 && len < sizeof want - 16; i++)
    if ((mask >> i) & 1u) len += (size_t)snprintf(want + len, sizeof want - len, "%s%d-D", len ? " or " : "", i);
  return vl_fail(VL_ESHAPE, "%s: expected a %s input, got %s", op, want, vl_tensor_desc(x, d, sizeof d));
}

vl_status vl_linear_check(const vl_tensor *x, const vl_tensor *w, const vl_tensor *bias) {
  const char *op = "linear";
  char dx[VL_DESC_LEN], dw[VL_DESC_LEN], db[VL_DESC_LEN];
  VL_TRY(vl_nn_check_device(op, x, "input", w, "weight"));
  VL_TRY(vl_nn_check_device(op, x, "input", bias, "bias"));
  if (w->ndim != 2)
    return vl_fail(VL_ESHAPE, "%s: weight must be 2-D (out x in), got %s", op, vl_tensor_desc(w, dw, sizeof dw));
  if (x->ndim == 0 || x->size[x->ndim - 1] != w->size[1]) {
    char feat[32] = "no";
    if (x->ndim) snprintf(feat, sizeof feat, "%lld", (long long)x->size[x->ndim - 1]);
    return vl_fail(VL_ESHAPE, "%s: input has %s features but weight expects %lld (input %s, weight %s)", op, feat,
                   (long long)w->size[1], vl_tensor_desc(x, dx, sizeof dx), vl_tensor_desc(w, dw, sizeof dw));
  }
  if (bias && (bias->ndim != 1 || bias->size[0] != w->size[0]))
    return vl_fail(VL_ESHAPE, "%s: bias must have %lld elements (weight %s), got %s", op, (long long)w->size[0],
                   vl_tensor_desc(w, dw, sizeof dw), vl_tensor_desc(bias, db, sizeof db));
  if (!vl_dtype_is_float(x->dtype) || w->dtype != x->dtype || (bias && bias->dtype != x->dtype))
    return vl_fail(VL_EDTYPE, "%s: input, weight and bias must be float tensors of one dtype (input %s, weight %s%s%s)",
                   op, vl_tensor_desc(x, dx, sizeof dx), vl_tensor_desc(w, dw, sizeof dw), bias ? ", bias " : "",
                   bias ? vl_tensor_desc(bias, db, sizeof db) : "");
  return VL_OK;
}

/* The ids of t checked against [0, size) along `dim` of a zero-strided stand-in of `shape` by
 * the index kernel itself, with `op` as its name: no host read of the ids (on CUDA the check is
 * asynchronous and reported at the next synchronisation, like any index error). */
vl_status vl_embedding_check(vl_tensor *ids, const vl_tensor *weight) {
  const char *op = "embedding";
  char di[VL_DESC_LEN], dw[VL_DESC_LEN];
  VL_TRY(vl_nn_check_device(op, ids, "ids", weight, "weight"));
  if (ids->dtype != VL_I64 && ids->dtype != VL_I32)
    return vl_fail(VL_EDTYPE, "%s: ids must be i64 or i32, got %s", op, vl_tensor_desc(ids, di, sizeof di));
  if (weight->ndim != 2)
    return vl_fail(VL_ESHAPE, "%s: weight must be 2-D (num x dim), got %s", op, vl_tensor_desc(weight, dw, sizeof dw));
  return VL_OK;
}

vl_status vl_embedding_padding_idx(const char *op, int64_t num, int64_t padding_idx, int64_t *wrapped) {
  int64_t p = padding_idx < 0 ? padding_idx + num : padding_idx;
  if (p < 0 || p >= num)
    return vl_fail(VL_EINVAL, "%s: padding_idx %lld out of range for %lld rows", op, (long long)padding_idx,
                   (long long)num);
  *wrapped = p;
  return VL_OK;
}

/* The class dim: 1 for an unbatched C vector, else 2 (N x C [x d1 ...]); 0-based here. */
static int class_dim(const vl_tensor *x) { return x->ndim == 1 ? 0 : 1; }

static bool same_shape(const vl_tensor *a, const vl_tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->size[i] != b->size[i]) return false;
  return true;
}

vl_status vl_class_target_check(const char *op, const vl_tensor *input, const vl_tensor *target, bool probs_ok) {
  char dx[VL_DESC_LEN], dt[VL_DESC_LEN];
  if (input->ndim < 1)
    return vl_fail(VL_ESHAPE, "%s: input must have a class dim, got %s", op, vl_tensor_desc(input, dx, sizeof dx));
  VL_TRY(vl_nn_check_device(op, input, "input", target, "target"));
  if (probs_ok && vl_dtype_is_float(target->dtype)) {
    if (!same_shape(input, target))
      return vl_fail(VL_ESHAPE, "%s: probability targets must have the input shape (input %s, target %s)", op,
                     vl_tensor_desc(input, dx, sizeof dx), vl_tensor_desc(target, dt, sizeof dt));
    return VL_OK;
  }
  if (target->dtype != VL_I64 && target->dtype != VL_I32)
    return vl_fail(VL_EDTYPE,
                   "%s: target must hold class ids (i64 or i32)%s (input %s, target %s)", op,
                   probs_ok ? " or probabilities of the input shape" : "", vl_tensor_desc(input, dx, sizeof dx),
                   vl_tensor_desc(target, dt, sizeof dt));
  int cd = class_dim(input);
  bool ok = target->ndim == input->ndim - 1;
  for (int i = 0, j = 0; ok && i < input->ndim; i++)
    if (i != cd) ok = target->size[j++] == input->size[i];
  if (!ok)
    return vl_fail(VL_ESHAPE, "%s: target shape does not match the input without its class dim (input %s, target %s)",
                   op, vl_tensor_desc(input, dx, sizeof dx), vl_tensor_desc(target, dt, sizeof dt));
  return VL_OK;
}

vl_status vl_same_shape_check(const char *op, const vl_tensor *input, const vl_tensor *target) {
  char dx[VL_DESC_LEN], dt[VL_DESC_LEN];
  VL_TRY(vl_nn_check_device(op, input, "input", target, "target"));
  if (!same_shape(input, target))
    return vl_fail(VL_ESHAPE, "%s: input and target shapes differ (input %s, target %s)", op,
                   vl_tensor_desc(input, dx, sizeof dx), vl_tensor_desc(target, dt, sizeof dt));
  return VL_OK;
}

vl_status vl_sdpa_check(const vl_tensor *q, const vl_tensor *k, const vl_tensor *v, const vl_tensor *mask) {
  const char *op = "scaled_dot_product_attention";
  char dq[VL_DESC_LEN], dk[VL_DESC_LEN], dv[VL_DESC_LEN];
  VL_TRY(vl_nn_check_device(op, q, "q", k, "k"));
  VL_TRY(vl_nn_check_device(op, q, "q", v, "v"));
  VL_TRY(vl_nn_check_device(op, q, "q", mask, "mask"));
  if (q->ndim < 2 || k->ndim < 2 || v->ndim < 2 || q->size[q->ndim - 1] != k->size[k->ndim - 1] ||
      k->size[k->ndim - 2] != v->size[v->ndim - 2])
    return vl_fail(VL_ESHAPE, "%s: q must be ... x L x E, k ... x S x E and v ... x S x Ev (q %s, k %s, v %s)", op,
                   vl_tensor_desc(q, dq, sizeof dq), vl_tensor_desc(k, dk, sizeof dk), vl_tensor_desc(v, dv, sizeof dv));
  if (mask && mask->dtype != VL_BOOL && !vl_dtype_is_float(mask->dtype))
    return vl_fail(VL_EDTYPE, "%s: mask must be bool or floating, got %s", op, vl_tensor_desc(mask, dq, sizeof dq));
  return VL_OK;
}

vl_status vl_flatten_dims(const char *op, const vl_tensor *x, int start, int end, int *a, int *b) {
  /* start/end are 0-based here, negative from the end (-1 the last dim). */
  int s = start < 0 ? start + x->ndim : start, e = end < 0 ? end + x->ndim : end;
  if (s < 0 || e >= x->ndim || s > e) {
    char d[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "%s: dims %d..%d out of range for %s", op, start < 0 ? start : start + 1,
                   end < 0 ? end : end + 1, vl_tensor_desc(x, d, sizeof d));
  }
  *a = s;
  *b = e;
  return VL_OK;
}
