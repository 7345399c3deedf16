/* runtime/backend/nn_kernels.h: kernel tables of the neural-network layers, one table per concern and
 * device (the concern's CPU file defines vl_cpu_<x>_kernels, its CUDA file vl_cuda_<x>_kernels),
 * reached through the device's backend (runtime/backend/backend.h), never named by front ends.
 * The front ends (runtime/nn/nn.h) check everything first, as for runtime/backend/kernels.h.
 *
 * Images are logically N x C x H x W. Physically either NCHW-contiguous or NHWC-contiguous
 * ("channels last": stride(C) = 1, stride(W) = C, stride(H) = W*C, stride(N) = H*W*C), told by
 * `nhwc`. Conv weights K x C/g x R x S are KCRS-contiguous with NCHW
 * and KRSC-contiguous ("channels last") with NHWC. "param" dtype: f32 for f32/f16/bf16 data, f64
 * for f64 data (gradient checks). Accumulation in f32 (f64 for f64). */
#ifndef VL_NN_KERNELS_H
#define VL_NN_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- convolution ---- */
typedef struct vl_conv_args {
  vl_dtype dtype;                 /* x, w, y and their gradients */
  bool nhwc;
  int64_t n, c, h, w;             /* input */
  int64_t k, r, s;                /* output channels, kernel height, kernel width */
  int64_t p, q;                   /* output height, width */
  int stride[2], pad[2], dilation[2], groups;
  const void *x, *wt, *dy;        /* inputs as the entry needs them */
  void *y, *dx, *dwt;             /* outputs: forward y; backward_data dx; backward_filter dwt */
  bool allow_tf32;
  bool benchmark;                 /* choose algorithms by timing (cached per shape) */
  bool deterministic;             /* only algorithms cuDNN reports as deterministic */
  vl_exec ex;
} vl_conv_args;

typedef struct vl_conv_kernels {
  vl_status (*forward)(const vl_conv_args *a);          /* y = conv(x, wt) (no bias) */
  vl_status (*backward_data)(const vl_conv_args *a);    /* dx = conv_transpose(dy, wt) */
  vl_status (*backward_filter)(const vl_conv_args *a);  /* dwt = corr(x, dy) */
} vl_conv_kernels;

/* ---- 2-D pooling ---- */
typedef enum vl_pool_kind { VL_POOL_MAX = 0, VL_POOL_AVG, VL_POOL_ADAPTIVE_AVG, VL_NPOOL_KINDS } vl_pool_kind;
typedef struct vl_pool2d_args {
  vl_pool_kind kind;
  vl_dtype dtype;
  bool nhwc;
  int64_t n, c, h, w, p, q;       /* input and output sizes */
  int kernel[2], stride[2], pad[2], dilation[2]; /* unused for ADAPTIVE_AVG (windows from sizes) */
  bool count_include_pad;         /* AVG */
  const void *x, *dy;
  void *y, *dx;
  /* MAX: forward writes, backward reads the argmax of each output as its offset in the window,
   * i * kernel[1] + j for kernel row i and column j (the window's first in-range cell when every
   * cell is -inf), or none (255 / -1) when no cell of the window lies inside the input: u8 when
   * kernel[0] * kernel[1] < 255 (1 byte per output instead of an int64 position), else i32. */
  void *argmax;
  vl_dtype argmax_dtype;          /* VL_U8 or VL_I32 (vl_pool_argmax_dtype) */
  vl_exec ex;
} vl_pool2d_args;

/* The dtype of max pooling's window offsets for a kh x kw kernel. */
static inline vl_dtype vl_pool_argmax_dtype(int kh, int kw) {
  return (int64_t)kh * kw < 255 ? VL_U8 : VL_I32;
}

typedef struct vl_pooling_kernels {
  vl_status (*forward)(const vl_pool2d_args *a);
  vl_status (*backward)(const vl_pool2d_args *a);       /* dx is zeroed by the kernel first */
} vl_pooling_kernels;

/* ---- normalisation ---- */
/* The activation fused into batch norm (vl_batchnorm_args.act). */
typedef enum vl_bn_act { VL_BN_ACT_NONE = 0, VL_BN_ACT_RELU, VL_NBN_ACTS } vl_bn_act;

/* Batch norm over x viewed as [n, c, hw] (NCHW) or [n*hw, c] (NHWC); weight/bias/running stats
 * /save_* are contiguous [c] of param dtype; weight/bias NULL = affine off (1 and 0). Training:
 * batch statistics, save_mean/save_invstd written, running stats (when not NULL) updated with
 * momentum using the unbiased variance. Eval: running stats used. Backward (training
 * statistics): dx and, when not NULL, dweight/dbias (overwritten, not accumulated).
 *
 * Fused forms: forward y = act(bn(x) + r), r (x's dtype and layout) or NULL; ReLU keeps NaN as
 * the relu op does. Backward with act = RELU: the gradient is masked first, g = dy where the
 * forward's y > 0, else 0. When `y` (the forward's output) is given, the mask is read from it and
 * g is written to `dr` (the residual's gradient) before dx, dweight and dbias are computed from
 * g; when `y` is NULL the mask is recomputed from x (bn(x) rounded to the dtype > 0, from
 * save_mean, save_invstd, weight and bias: the forward's y > 0 exactly, with nothing saved). */
typedef struct vl_batchnorm_args {
  vl_dtype dtype, param_dtype;
  bool nhwc, training;
  int64_t n, c, hw;
  const void *x, *dy;
  void *y, *dx;
  const void *weight, *bias;
  void *running_mean, *running_var;
  void *save_mean, *save_invstd;
  void *dweight, *dbias;
  double momentum, eps;
  vl_bn_act act;                  /* fused forms (above) */
  const void *r;                  /* forward: the residual, or NULL */
  void *dr;                       /* backward with y given: the masked gradient g */
  vl_exec ex;
} vl_batchnorm_args;

/* Layer norm over the last `cols` elements of contiguous x [rows, cols]; weight/bias [cols] of
 * param dtype or NULL; mean/rstd [rows] param dtype written by forward, read by backward;
 * backward writes dx and (when not NULL) dweight/dbias (overwritten). */
typedef struct vl_layernorm_args {
  vl_dtype dtype, param_dtype;
  int64_t rows, cols;
  const void *x, *dy;
  void *y, *dx;
  const void *weight, *bias;
  void *mean, *rstd;
  void *dweight, *dbias;
  double eps;
  vl_exec ex;
} vl_layernorm_args;

/* Softmax backward over [outer, len, inner] contiguous: given y = softmax(x) (or log_softmax)
 * and dy, dx = y * (dy - sum(dy * y)) (log: dx = dy - exp(y) * sum(dy)). */
typedef struct vl_softmax_bw_args {
  vl_dtype dtype;
  const void *y, *dy;
  void *dx;
  int64_t outer, len, inner;
  bool log;
  vl_exec ex;
} vl_softmax_bw_args;

typedef struct vl_norm_kernels {
  vl_status (*batchnorm_forward)(const vl_batchnorm_args *a);
  vl_status (*batchnorm_backward)(const vl_batchnorm_args *a);
  vl_status (*layernorm_forward)(const vl_layernorm_args *a);
  vl_status (*layernorm_backward)(const vl_layernorm_args *a);
  vl_status (*softmax_backward)(const vl_softmax_bw_args *a);
} vl_norm_kernels;

/* ---- fused multi-tensor optimizer steps ----
 * One launch (or a few) for a whole dtype group of parameters, not one per parameter. Tensors
 * are contiguous; params/grads/state share a dtype per group (state may be f32 with f16/bf16
 * params). Hyper-parameters are per call. `found_inf` (device f32, may be NULL): when it holds a
 * non-zero value the step is skipped on the device (AMP), with no host synchronisation;
 * `inv_scale` (device f32, may be NULL) multiplies grads first. */
typedef enum vl_optim_kind {
  VL_OPTIM_SGD = 0,   /* momentum, dampening, nesterov, weight_decay (coupled, L2) */
  VL_OPTIM_ADAMW,     /* beta1, beta2, eps, weight_decay (decoupled), step for bias correction */
  VL_OPTIM_LAMB,      /* AdamW's update then a per-tensor trust ratio ||p|| / ||u|| */
  VL_OPTIM_LARS,      /* SGD-momentum with per-tensor lr scaled by eta*||p|| / (||g|| + wd*||p||) */
  VL_NOPTIM_KINDS
} vl_optim_kind;

typedef struct vl_optim_args {
  vl_optim_kind kind;
  vl_dtype param_dtype, grad_dtype, state_dtype;
  int n;                          /* tensors in this group */
  void **params;                  /* n device (or host) pointers each */
  void **grads;
  void **state1;                  /* momentum buffer / exp_avg (NULL entries: state not kept) */
  void **state2;                  /* exp_avg_sq */
  const int64_t *numel;           /* host array of n */
  double lr, momentum, dampening, weight_decay, beta1, beta2, eps, trust_coef;
  bool nesterov, first_step;      /* SGD: first step initialises the momentum buffer with grad */
  int64_t step;                   /* 1-based step count for bias correction */
  const float *found_inf, *inv_scale;
  /* Capturable steps (CUDA graphs): {lr, step} as two f64 in the tensors' memory, read when the
   * kernel runs instead of `lr` and `step`, so a replayed step uses the current values. NULL:
   * the host values above. */
  const double *dyn;
  /* f16/bf16 parameters: stored by stochastic rounding (runtime/core/sround.h) with Philox key
   * sround_seed, counter (element / 4, step, tensor index in this call); f32/f64 ignore it. */
  bool sround;
  uint64_t sround_seed;
  void *scratch;                  /* device scratch of scratch_bytes for per-tensor norms */
  int64_t scratch_bytes;
  vl_exec ex;
} vl_optim_args;

typedef struct vl_optim_kernels {
  vl_status (*step)(const vl_optim_args *a);
  /* Capturable steps: dyn[1] += 1 (the step count) unless found_inf (may be NULL) is non-zero;
   * runs before the step's kernels, which then read the advanced count. */
  vl_status (*advance)(double *dyn, const float *found_inf, vl_exec ex);
  /* Per-tensor L2 norms of n tensors into out[n] (f32, device), for clipping and LAMB/LARS. */
  vl_status (*l2norms)(vl_dtype dt, int n, void *const *ptrs, const int64_t *numel, float *out, vl_exec ex);
  /* For AMP: found_inf[0] = 1 if any element of the n tensors is inf/NaN, after scaling them in
   * place by inv_scale[0]. */
  vl_status (*unscale)(vl_dtype dt, int n, void *const *ptrs, const int64_t *numel, const float *inv_scale,
                       float *found_inf, vl_exec ex);
} vl_optim_kernels;

/* ---- fused attention ----
 * o = softmax(q k^T * scale + mask [+ causal]) v per (batch, head), with attention dropout, as
 * FlashAttention computes it: the L x S scores never reach memory. q is B x H x L x E, k and v
 * B x H x S x E, o and dout B x H x L x E, each given by element strides of its first three dims
 * (`*_st` = {batch, head, row}; the last dim is contiguous). mask (may be NULL) is an additive mask (f64
 * for f64 data, f32 otherwise) broadcast to B x H x L x S by its four strides (0 on broadcast dims). causal: key j is
 * dropped for query i when j > i.
 * lse [B*H*L] (contiguous, f64 for f64 data, f32 otherwise): forward writes log(sum_j exp(z_ij))
 * of the row's scaled, masked scores z (+inf for a row with no finite score: its output and
 * gradients are 0).
 * Dropout (p > 0): element (b, h, i, j) with linear index e = ((b*H + h)*L + i)*S + j is kept
 * exactly where v100.bernoulli at the same generator state keeps element e (runtime/core/philox.h:
 * counter offset + e/4, word e % 4, its 23-bit value below keep_below); kept probabilities are
 * scaled by 1/(1-p). The forward writes the decisions as bits, `keep` [B*H*L][ceil(S/8)] u8 (bit
 * j%8 of byte j/8 of row (b*H + h)*L + i), and the backward reads them, so it draws nothing.
 * Backward: dq, dk, dv (same shapes and stride conventions) from dout, o and lse; `delta`
 * [B*H*L] and `dq_acc` [B*H*L*E] f32 are scratch the kernels may use (the rows' dout . o; an f32
 * accumulator of dq). */
typedef struct vl_attention_args {
  vl_dtype dtype;                 /* q, k, v, o, dout and the gradients */
  int64_t b, h, l, s, e;
  const void *q, *k, *v;
  int64_t q_st[3], k_st[3], v_st[3];
  const void *mask;
  int64_t mask_st[4];
  void *o;                        /* forward output */
  int64_t o_st[3];
  void *lse;
  uint8_t *keep;                  /* dropout bits (NULL when p == 0) */
  const void *dout;
  int64_t do_st[3];
  void *dq, *dk, *dv;             /* backward outputs */
  int64_t dq_st[3], dk_st[3], dv_st[3];
  float *delta;
  float *dq_acc;
  double scale, p;
  uint32_t keep_below;            /* keep when (word >> 9) < keep_below */
  bool causal;
  uint64_t seed, offset;          /* Philox key and first counter (forward, p > 0) */
  const uint64_t *base;           /* under graph capture: {seed, base} read at run time (vl_rand_args) */
  vl_exec ex;
} vl_attention_args;

/* The rule by which the CUDA fused attention takes a problem, apart from sizes and alignment: f16
 * or bf16, head dim 64, and a device of compute capability 8.0 or newer. Its kernels are built on
 * mma.sync m16n8k16, ldmatrix and cp.async (sm_80); an sm_70 build (the V100, tools/build-sm70.sh)
 * compiles their bodies out, and on such a device `supports` says no, so the caller composes
 * attention from matmul and softmax instead. Here, not in the .cu file, so that a CPU build tests
 * the rule (tests/c/test_attention_caps.c). */
static inline bool vl_attention_fused_eligible(vl_dtype dtype, int64_t head_dim, int cc_major) {
  return (dtype == VL_F16 || dtype == VL_BF16) && head_dim == 64 && cc_major >= 8;
}

typedef struct vl_attention_kernels {
  /* Whether forward/backward take this problem on `device` (dtype, head dim, the alignment of
   * the pointers and strides); the front end falls back to nothing: callers ask first. */
  bool (*supports)(const vl_attention_args *a);
  vl_status (*forward)(const vl_attention_args *a);
  vl_status (*backward)(const vl_attention_args *a);
} vl_attention_kernels;

extern const vl_conv_kernels vl_cpu_conv_kernels;
extern const vl_pooling_kernels vl_cpu_pooling_kernels;
extern const vl_norm_kernels vl_cpu_norm_kernels;
extern const vl_optim_kernels vl_cpu_optim_kernels;
extern const vl_attention_kernels vl_cpu_attention_kernels;
#ifdef VL_HAVE_CUDA
extern const vl_conv_kernels vl_cuda_conv_kernels;
extern const vl_pooling_kernels vl_cuda_pooling_kernels;
extern const vl_norm_kernels vl_cuda_norm_kernels;
extern const vl_optim_kernels vl_cuda_optim_kernels;
extern const vl_attention_kernels vl_cuda_attention_kernels;
#endif

#ifdef __cplusplus
}
#endif
#endif
