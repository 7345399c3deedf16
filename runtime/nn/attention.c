/* runtime/nn/attention.c: the front end of fused scaled-dot-product attention (runtime/nn/nn.h).
 *
 * One op for softmax(q k^T * scale + mask) v with causal masking and attention dropout, whose
 * kernels (runtime/backend/nn_kernels.h: vl_attention_kernels) never write the L x S scores: the forward
 * keeps the rows' log-sum-exp and the dropout decisions as bits, and the backward recomputes the
 * probabilities from them (FlashAttention's scheme). Every check happens here, once.
 *
 * Layouts: q, k, v may be any strided B x H x N x E views whose last dim is contiguous (the heads
 * of a B x N x (H*E) projection, transposed, are); others are copied first. The output and the
 * gradients are allocated B x N x H x E-contiguous and returned as B x H x N x E views, so that
 * merging the heads back (transpose + reshape) is free. */
#include <math.h>

#include "runtime/backend/backend.h"
#include "runtime/core/context.h"
#include "runtime/core/graph.h"
#include "runtime/core/philox.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/ops_internal.h"

static const char *OP = "scaled_dot_product_attention";

static void release_all(vl_tensor **ts, int n) {
  for (int i = 0; i < n; i++) vl_tensor_release(ts[i]);
}

/* The operand with a unit stride on its last dim: itself (retained) or a contiguous copy. */
static vl_status unit_last(vl_tensor *t, vl_tensor **out) {
  if (t->size[t->ndim - 1] <= 1 || t->stride[t->ndim - 1] == 1) {
    *out = vl_tensor_retain(t);
    return VL_OK;
  }
  return vl_contiguous(t, out);
}

/* Shapes, dtypes and devices of q, k, v and mask; the sizes into *a. */
static vl_status check(const char *op, vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask,
                       const vl_attention_params *p, vl_attention_args *a) {
  char dq[VL_DESC_LEN], dk[VL_DESC_LEN], dv[VL_DESC_LEN];
  VL_TRY(vl_nn_check_device(op, q, "q", k, "k"));
  VL_TRY(vl_nn_check_device(op, q, "q", v, "v"));
  VL_TRY(vl_nn_check_device(op, q, "q", mask, "mask"));
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->size[0] != q->size[0] || v->size[0] != q->size[0] ||
      k->size[1] != q->size[1] || v->size[1] != q->size[1] || k->size[3] != q->size[3] ||
      v->size[3] != q->size[3] || v->size[2] != k->size[2])
    return vl_fail(VL_ESHAPE,
                   "%s: the fused kernels take q B x H x L x E, k and v B x H x S x E (q %s, k %s, v %s)", op,
                   vl_tensor_desc(q, dq, sizeof dq), vl_tensor_desc(k, dk, sizeof dk), vl_tensor_desc(v, dv, sizeof dv));
  if (!vl_dtype_is_float(q->dtype) || k->dtype != q->dtype || v->dtype != q->dtype)
    return vl_fail(VL_EDTYPE, "%s: q, k and v must share one float dtype (q %s, k %s, v %s)", op,
                   vl_tensor_desc(q, dq, sizeof dq), vl_tensor_desc(k, dk, sizeof dk), vl_tensor_desc(v, dv, sizeof dv));
  if (q->size[3] == 0)
    return vl_fail(VL_ESHAPE, "%s: the head dim is 0 (q %s)", op, vl_tensor_desc(q, dq, sizeof dq));
  if (mask) {
    bool ok = vl_dtype_is_float(mask->dtype) && mask->ndim <= 4;
    for (int i = 0; ok && i < mask->ndim; i++) {
      int64_t want = i + 4 - mask->ndim == 3 ? k->size[2] : q->size[i + 4 - mask->ndim];
      ok = mask->size[i] == 1 || mask->size[i] == want;
    }
    if (!ok)
      return vl_fail(VL_ESHAPE, "%s: mask must be a float tensor broadcastable to B x H x L x S = %lldx%lldx%lldx%lld "
                     "(mask %s)", op, (long long)q->size[0], (long long)q->size[1], (long long)q->size[2],
                     (long long)k->size[2], vl_tensor_desc(mask, dq, sizeof dq));
  }
  if (!(p->dropout >= 0 && p->dropout < 1))
    return vl_fail(VL_EINVAL, "%s: dropout must be in [0, 1), got %g", op, p->dropout);
  if (!isfinite(p->scale))
    return vl_fail(VL_EINVAL, "%s: scale must be finite, got %g", op, p->scale);
  *a = (vl_attention_args){.dtype = q->dtype, .b = q->size[0], .h = q->size[1], .l = q->size[2], .s = k->size[2],
                           .e = q->size[3], .scale = p->scale, .p = p->dropout, .causal = p->causal};
  return VL_OK;
}

static void strides3(const vl_tensor *t, int64_t st[3]) {
  for (int i = 0; i < 3; i++) st[i] = t->size[i] == 1 ? 0 : t->stride[i];
}

/* The mask in the kernels' dtype (f64 for f64 data, else f32) and its four broadcast strides (0
 * where the mask has size 1 or lacks the dim). */
static vl_status mask_arg(vl_tensor *mask, vl_attention_args *a, vl_tensor **m32) {
  if (!mask) return VL_OK;
  vl_dtype mdt = a->dtype == VL_F64 ? VL_F64 : VL_F32;
  if (mask->dtype == mdt) *m32 = vl_tensor_retain(mask);
  else VL_TRY(vl_to(mask, mdt, mask->storage->device, m32));
  const vl_tensor *m = *m32;
  for (int i = 0; i < 4; i++) {
    int d = i - (4 - m->ndim);
    a->mask_st[i] = d < 0 || m->size[d] == 1 ? 0 : m->stride[d];
  }
  a->mask = vl_tensor_data(m);
  return VL_OK;
}

/* A B x N x H x E-contiguous tensor seen as B x H x N x E, like `t`. */
static vl_status empty_heads(const vl_tensor *t, vl_tensor **out) {
  int64_t size[4] = {t->size[0], t->size[2], t->size[1], t->size[3]};
  vl_tensor *raw = NULL;
  VL_TRY(vl_tensor_empty(4, size, t->dtype, t->storage->device, &raw));
  int perm[4] = {0, 2, 1, 3};
  vl_status s = vl_permute(raw, 4, perm, out);
  vl_tensor_release(raw);
  return s;
}

/* Under capture the dropout counters are relative to the replay's base (runtime/core/graph.h). */
static void rng_arg(vl_attention_args *a, vl_device dev) {
  const uint64_t groups = vl_philox_groups(0, a->b * a->h * a->l * a->s);
  vl_context *ctx = vl_ctx();
  uint64_t rel = 0;
  const uint64_t *base = vl_graph_capturing() ? vl_graph_rng_draw(dev.index, groups, &rel) : NULL;
  a->seed = ctx->seed;
  a->offset = base ? rel : ctx->rng_offset;
  a->base = base;
  if (!base) ctx->rng_offset += groups;
}

uint32_t vl_attention_keep_below(double p) {
  /* the count of 23-bit values k with (k + 0.5) * 2^-23 < 1 - p, the test v100.bernoulli makes */
  const double keep = 1.0 - p, inv = 1.0 / 8388608.0;
  double guess = floor(keep * 8388608.0 - 0.5);
  int64_t k = guess < 0 ? 0 : (int64_t)guess;
  while (k > 0 && !(((double)(k - 1) + 0.5) * inv < keep)) k--;
  while (k < 8388608 && ((double)k + 0.5) * inv < keep) k++;
  return (uint32_t)k;
}

static vl_status prepare(const char *op, vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask,
                         const vl_attention_params *p, vl_attention_args *a, vl_tensor **t /* q k v m32 */) {
  VL_TRY(check(op, q, k, v, mask, p, a));
  vl_status s = unit_last(q, &t[0]);
  if (s == VL_OK) s = unit_last(k, &t[1]);
  if (s == VL_OK) s = unit_last(v, &t[2]);
  if (s == VL_OK) s = mask_arg(mask, a, &t[3]);
  if (s != VL_OK) return s;
  a->q = vl_tensor_data(t[0]);
  a->k = vl_tensor_data(t[1]);
  a->v = vl_tensor_data(t[2]);
  strides3(t[0], a->q_st);
  strides3(t[1], a->k_st);
  strides3(t[2], a->v_st);
  a->keep_below = vl_attention_keep_below(p->dropout);
  a->ex.device = q->storage->device.index; /* what `supports` asks about; vl_exec_of fills the rest */
  return VL_OK;
}

bool vl_attention_supported(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, const vl_attention_params *p) {
  vl_attention_args a;
  vl_status s = check(OP, q, k, v, mask, p, &a);
  vl_errclear();
  if (s != VL_OK) return false;
  const vl_backend *be = vl_backend_of(q->storage->device);
  if (!be) return false;
  /* the pointers and strides as the kernels would see them (a copy keeps them aligned) */
  a.q = q->stride[3] == 1 ? vl_tensor_data(q) : NULL;
  a.k = k->stride[3] == 1 ? vl_tensor_data(k) : NULL;
  a.v = v->stride[3] == 1 ? vl_tensor_data(v) : NULL;
  strides3(q, a.q_st);
  strides3(k, a.k_st);
  strides3(v, a.v_st);
  a.ex.device = q->storage->device.index;
  return be->attention->supports(&a);
}

vl_status vl_attention(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, const vl_attention_params *p,
                       vl_tensor **out, vl_tensor **lse, vl_tensor **keep) {
  vl_attention_args a;
  /* 0 q, 1 k, 2 v, 3 mask f32, 4 o, 5 lse, 6 keep */
  vl_tensor *t[7] = {0};
  vl_status s = prepare(OP, q, k, v, mask, p, &a, t);
  vl_device dev = q->storage->device;
  const vl_backend *be = vl_backend_of(dev);
  if (s == VL_OK && !be->attention->supports(&a))
    s = vl_fail(VL_EUNSUPPORTED, "%s: the %s kernels do not take this problem (%s, head dim %lld)", OP, be->name,
                vl_dtype_name(a.dtype), (long long)a.e);
  if (s == VL_OK) s = empty_heads(q, &t[4]);
  int64_t rows[3] = {a.b, a.h, a.l};
  vl_dtype ldt = a.dtype == VL_F64 ? VL_F64 : VL_F32; /* the rows' log-sum-exp */
  if (s == VL_OK) s = vl_tensor_empty(3, rows, ldt, dev, &t[5]);
  if (s == VL_OK && a.p > 0) {
    int64_t ks[4] = {a.b, a.h, a.l, (a.s + 7) / 8};
    s = vl_tensor_empty(4, ks, VL_U8, dev, &t[6]);
  }
  if (s == VL_OK) {
    a.o = vl_tensor_data(t[4]);
    strides3(t[4], a.o_st);
    a.lse = vl_tensor_data(t[5]);
    a.keep = t[6] ? vl_tensor_data(t[6]) : NULL;
    s = vl_exec_of(OP, dev, &a.ex);
  }
  if (s == VL_OK && a.p > 0) rng_arg(&a, dev);
  if (s == VL_OK) s = be->attention->forward(&a);
  if (s != VL_OK) {
    release_all(t, 7);
    return s;
  }
  *out = t[4], t[4] = NULL;
  if (lse) *lse = t[5], t[5] = NULL;
  if (keep) *keep = t[6], t[6] = NULL;
  release_all(t, 7);
  return VL_OK;
}

vl_status vl_attention_backward(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, vl_tensor *o,
                                vl_tensor *dout, vl_tensor *lse, vl_tensor *keep, const vl_attention_params *p,
                                vl_tensor **dq, vl_tensor **dk, vl_tensor **dv) {
  const char *op = "scaled_dot_product_attention_backward";
  vl_attention_args a;
  /* 0 q, 1 k, 2 v, 3 mask f32, 4 o, 5 dout, 6 delta, 7 dq, 8 dk, 9 dv, 10 dq accumulator */
  vl_tensor *t[11] = {0};
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(prepare(op, q, k, v, mask, p, &a, t));
  vl_status s = VL_OK;
  for (int i = 0; s == VL_OK && i < 2; i++) {
    vl_tensor *x = i == 0 ? o : dout;
    if (x->ndim != 4 || x->dtype != q->dtype || x->size[0] != a.b || x->size[1] != a.h || x->size[2] != a.l ||
        x->size[3] != a.e)
      s = vl_fail(VL_ESHAPE, "%s: %s must match q (%s vs q %s)", op, i == 0 ? "out" : "dout",
                  vl_tensor_desc(x, d1, sizeof d1), vl_tensor_desc(q, d2, sizeof d2));
    else s = vl_nn_check_device(op, q, "q", x, i == 0 ? "out" : "dout");
  }
  vl_dtype ldt = a.dtype == VL_F64 ? VL_F64 : VL_F32;
  if (s == VL_OK && (lse->dtype != ldt || vl_tensor_numel(lse) != a.b * a.h * a.l || !vl_tensor_is_contiguous(lse)))
    s = vl_fail(VL_ESHAPE, "%s: lse must be the forward's contiguous %s B x H x L (lse %s)", op, vl_dtype_name(ldt),
                vl_tensor_desc(lse, d1, sizeof d1));
  if (s == VL_OK && a.p > 0 &&
      (!keep || keep->dtype != VL_U8 || vl_tensor_numel(keep) != a.b * a.h * a.l * ((a.s + 7) / 8) ||
       !vl_tensor_is_contiguous(keep)))
    s = vl_fail(VL_EINVAL, "%s: dropout %g needs the forward's keep bits (B x H x L x ceil(S/8) u8)", op, a.p);
  vl_device dev = q->storage->device;
  const vl_backend *be = vl_backend_of(dev);
  if (s == VL_OK) s = unit_last(o, &t[4]);
  if (s == VL_OK) s = unit_last(dout, &t[5]);
  int64_t rows[3] = {a.b, a.h, a.l};
  if (s == VL_OK) s = vl_tensor_empty(3, rows, VL_F32, dev, &t[6]);
  if (s == VL_OK) s = empty_heads(q, &t[7]);
  if (s == VL_OK) s = empty_heads(k, &t[8]);
  if (s == VL_OK) s = empty_heads(v, &t[9]);
  int64_t acc_size[4] = {a.b, a.h, a.l, a.e};
  if (s == VL_OK) s = vl_tensor_empty(4, acc_size, VL_F32, dev, &t[10]);
  if (s == VL_OK) {
    a.lse = vl_tensor_data(lse);
    a.dq_acc = vl_tensor_data(t[10]);
    a.keep = a.p > 0 ? vl_tensor_data(keep) : NULL;
    a.delta = vl_tensor_data(t[6]);
    a.dq = vl_tensor_data(t[7]);
    a.dk = vl_tensor_data(t[8]);
    a.dv = vl_tensor_data(t[9]);
    strides3(t[7], a.dq_st);
    strides3(t[8], a.dk_st);
    strides3(t[9], a.dv_st);
    /* the incoming gradient may be any view: dense copies of it (and of out) when the kernels
     * need aligned rows */
    for (int pass = 0; pass < 2 && s == VL_OK; pass++) {
      a.o = vl_tensor_data(t[4]);
      strides3(t[4], a.o_st);
      a.dout = vl_tensor_data(t[5]);
      strides3(t[5], a.do_st);
      if (be->attention->supports(&a)) break;
      if (pass == 1) {
        s = vl_fail(VL_EUNSUPPORTED, "%s: the %s kernels do not take this problem (%s, head dim %lld)", op, be->name,
                    vl_dtype_name(a.dtype), (long long)a.e);
        break;
      }
      for (int i = 4; i <= 5 && s == VL_OK; i++) {
        vl_tensor *c = NULL;
        s = vl_clone(t[i], &c);
        vl_tensor_release(t[i]);
        t[i] = c;
      }
    }
  }
  if (s == VL_OK) s = vl_exec_of(op, dev, &a.ex);
  if (s == VL_OK) s = be->attention->backward(&a);
  if (s != VL_OK) {
    release_all(t, 11);
    return s;
  }
  if (dq) *dq = t[7], t[7] = NULL;
  if (dk) *dk = t[8], t[8] = NULL;
  if (dv) *dv = t[9], t[9] = NULL;
  release_all(t, 11);
  return VL_OK;
}
