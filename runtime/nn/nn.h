/* runtime/nn/nn.h: raw front ends of the neural-network layer ops (no autograd recording; the
 * vl_ag_* wrappers in runtime/autograd/ops.h record). Same rules as runtime/ops/ops.h: every check
 * first, errors name the op and operands, outputs untouched on failure. Images are N x C x H x W
 * tensors, NCHW-contiguous or channels-last (NHWC-contiguous); outputs keep the input's layout.
 * Other layouts are made contiguous (NCHW) first. */
#ifndef VL_NN_H
#define VL_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/nn_kernels.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif


typedef struct vl_conv2d_params {
  int stride[2], pad[2], dilation[2], groups;
} vl_conv2d_params;

/* y = conv2d(x, w) + bias (bias [K] or NULL). w is K x C/groups x R x S in the same layout family
 * as x (converted if not). Errors name the channel mismatch, e.g. "conv2d: input has 3 channels
 * but weight expects 64 (input 8x3x224x224 f16, weight 64x64x3x3 f16)". */
vl_status vl_conv2d(vl_tensor *x, vl_tensor *w, vl_tensor *bias, const vl_conv2d_params *p, vl_tensor **y);
/* Gradients; any of dx/dw/dbias may be NULL (not wanted). */
vl_status vl_conv2d_backward(vl_tensor *x, vl_tensor *w, vl_tensor *dy, const vl_conv2d_params *p, vl_tensor **dx,
                             vl_tensor **dw, vl_tensor **dbias);

typedef struct vl_pool2d_params {
  vl_pool_kind kind;
  int kernel[2], stride[2], pad[2], dilation[2];
  bool ceil_mode, count_include_pad;
  int64_t out_h, out_w;        /* ADAPTIVE_AVG only */
} vl_pool2d_params;
/* argmax (MAX only, may be NULL; none for other kinds): each output's window offset for the
 * backward, u8 or i32 (vl_pool2d_args.argmax, runtime/backend/nn_kernels.h). */
vl_status vl_pool2d(vl_tensor *x, const vl_pool2d_params *p, vl_tensor **y, vl_tensor **argmax);
vl_status vl_pool2d_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *argmax, const vl_pool2d_params *p,
                             vl_tensor **dx);
/* What the backward needs of the forward's input: its geometry only (autograd keeps this, not x). */
typedef struct vl_pool2d_input {
  int64_t size[4];
  vl_dtype dtype;
  vl_device device;
  bool nhwc;                   /* channels-last (else NCHW-contiguous) */
} vl_pool2d_input;
vl_pool2d_input vl_pool2d_input_of(const vl_tensor *x);
vl_status vl_pool2d_backward_in(const vl_pool2d_input *in, vl_tensor *dy, vl_tensor *argmax,
                                const vl_pool2d_params *p, vl_tensor **dx);

/* Batch norm over dim 2 (channels) of a 2-D (N x C), 3-D (N x C x L) or 4-D input. In training,
 * save_mean/save_invstd (new tensors [C], param dtype) are returned for the backward and the
 * running stats (may be NULL) updated in place. */
vl_status vl_batch_norm(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                        vl_tensor *running_var, bool training, double momentum, double eps, vl_tensor **y,
                        vl_tensor **save_mean, vl_tensor **save_invstd);
vl_status vl_batch_norm_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *weight, vl_tensor *save_mean,
                                 vl_tensor *save_invstd, double eps, vl_tensor **dx, vl_tensor **dweight,
                                 vl_tensor **dbias);
/* Batch norm fused with its activation and a residual: y = act(bn(x) + residual), in one pass
 * over x (runtime/backend/nn_kernels.h). residual (NULL: none) has x's shape and dtype, on its device;
 * f NULL is plain batch norm. vl_batch_norm and vl_batch_norm_backward are these with f NULL. */
typedef struct vl_bn_fusion {
  vl_bn_act act;
  vl_tensor *residual;
} vl_bn_fusion;
vl_status vl_batch_norm_fused(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                              vl_tensor *running_var, bool training, double momentum, double eps,
                              const vl_bn_fusion *f, vl_tensor **y, vl_tensor **save_mean, vl_tensor **save_invstd);
/* The backward of the training-mode fused forms. With act = RELU the ReLU's mask comes from y, the
 * forward's output, when it is given (required with a residual), else it is recomputed from x
 * with bias (the forward's bias, NULL when there was none). dr (may be NULL; set only when
 * `residual`): the residual's gradient, the masked dy (dy itself without an activation). */
vl_status vl_batch_norm_fused_backward(vl_tensor *x, vl_tensor *dy, vl_tensor *weight, vl_tensor *bias,
                                       vl_tensor *save_mean, vl_tensor *save_invstd, double eps, vl_bn_act act,
                                       bool residual, vl_tensor *y, vl_tensor **dx, vl_tensor **dweight,
                                       vl_tensor **dbias, vl_tensor **dr);
/* Layer norm over the last `nnorm` dims; weight/bias of that shape or NULL. */
vl_status vl_layer_norm(vl_tensor *x, int nnorm, vl_tensor *weight, vl_tensor *bias, double eps, vl_tensor **y,
                        vl_tensor **mean, vl_tensor **rstd);
vl_status vl_layer_norm_backward(vl_tensor *x, vl_tensor *dy, int nnorm, vl_tensor *weight, vl_tensor *mean,
                                 vl_tensor *rstd, vl_tensor **dx, vl_tensor **dweight, vl_tensor **dbias);
/* y is the softmax (log_softmax when log) output of the forward. */
vl_status vl_softmax_backward(vl_tensor *y, vl_tensor *dy, int dim, bool log, vl_tensor **dx);

/* Fused optimizer step over n parameters of one dtype group on one device (see vl_optim_args).
 * state1/state2 arrays may be NULL when the kind keeps no such state. */
typedef struct vl_optim_hparams {
  double lr, momentum, dampening, weight_decay, beta1, beta2, eps, trust_coef;
  bool nesterov, first_step;
  int64_t step;
  /* Capturable steps: a 2-element f64 tensor {lr, step} on the parameters' device that the kernels
   * read instead of lr and step (advanced by vl_optim_advance), or NULL. */
  vl_tensor *dyn;
  /* Stochastic rounding of f16/bf16 parameters (runtime/core/sround.h; AMP O3), key sround_seed.
   * Ignored for f32/f64 parameters (an O2 master is f32: its half copy is a plain cast). */
  bool stochastic_round;
  uint64_t sround_seed;
} vl_optim_hparams;
vl_status vl_optim_step(vl_optim_kind kind, int n, vl_tensor *const *params, vl_tensor *const *grads,
                        vl_tensor *const *state1, vl_tensor *const *state2, const vl_optim_hparams *h,
                        vl_tensor *found_inf, vl_tensor *inv_scale);
/* dyn[1] += 1 on dyn's device unless found_inf (1-element f32 there, or NULL) is non-zero. */
vl_status vl_optim_advance(vl_tensor *dyn, vl_tensor *found_inf);
/* Per-tensor L2 norms as a new f32 tensor [n] on the tensors' device (no host sync). */
vl_status vl_l2norms(int n, vl_tensor *const *ts, vl_tensor **out);
/* AMP: multiply every tensor by inv_scale[0] in place and set found_inf[0] = 1 on inf/NaN. */
vl_status vl_unscale_(int n, vl_tensor *const *ts, vl_tensor *inv_scale, vl_tensor *found_inf);

/* ---- fused attention (runtime/nn/attention.c; runtime/backend/nn_kernels.h has the contract) ---- */
typedef struct vl_attention_params {
  double scale;    /* multiplies q.k (1/sqrt(E) is the usual choice) */
  double dropout;  /* attention dropout probability in [0, 1) */
  bool causal;     /* key j dropped for query i when j > i */
} vl_attention_params;
/* Whether the fused kernels of q's device take this problem: q B x H x L x E, k and v
 * B x H x S x E of one float dtype, mask NULL or float broadcastable to B x H x L x S, and what
 * the backend needs beyond that (head dim, alignment). Sets no error. */
bool vl_attention_supported(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, const vl_attention_params *p);
/* out (B x H x L x E, stored B x L x H x E), lse (B x H x L, f64 for f64 data, else f32) and, with dropout, keep (u8
 * B x H x L x ceil(S/8): the dropout bits; NULL otherwise). lse/keep may be NULL (not wanted). */
vl_status vl_attention(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, const vl_attention_params *p,
                       vl_tensor **out, vl_tensor **lse, vl_tensor **keep);
vl_status vl_attention_backward(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, vl_tensor *out,
                                vl_tensor *dout, vl_tensor *lse, vl_tensor *keep, const vl_attention_params *p,
                                vl_tensor **dq, vl_tensor **dk, vl_tensor **dv);
/* The 23-bit threshold of a keep probability 1 - p that v100.bernoulli's test amounts to. */
uint32_t vl_attention_keep_below(double p);

/* ---- argument checks of the layers composed of tensor ops in Lua (runtime/nn/checks.c) ----
 * Each raises what the layer itself would: the layer's name, the operands and their shapes. */
/* p (may be NULL: no check) on x's device, else "op: input is on cpu but weight is on cuda:0 (...)". */
vl_status vl_nn_check_device(const char *op, const vl_tensor *x, const char *xn, const vl_tensor *p, const char *pn);
/* 0 <= p <= 1 (NaN fails): dropout rates, label smoothing. */
vl_status vl_nn_check_prob(const char *op, const char *what, double p);
/* x->ndim is one of the ranks whose bits are set in mask (1u << 4 for 4-D), e.g. BatchNorm2d. */
vl_status vl_nn_check_ndim(const char *op, const vl_tensor *x, unsigned mask);
/* y = x w^T + b: w out x in, x ... x in, bias [out] or NULL, one device and float dtype. */
vl_status vl_linear_check(const vl_tensor *x, const vl_tensor *w, const vl_tensor *bias);
/* ids (i64/i32, any shape) rows of weight (num x dim), on one device. The range of every id is
 * checked by the gather itself, vl_ag_index_select_as("embedding", ...) (runtime/autograd/ops.h):
 * "embedding: index 7 is out of bounds ..." (asynchronous on CUDA), with no second pass. */
vl_status vl_embedding_check(vl_tensor *ids, const vl_tensor *weight);
/* padding_idx (negative from the end) of a table of num rows, wrapped into *wrapped. */
vl_status vl_embedding_padding_idx(const char *op, int64_t num, int64_t padding_idx, int64_t *wrapped);
/* target of a classification loss for input (N x C [x d...] or C): class ids (i64/i32) of the
 * input's shape without the class dim, or (probs_ok) a float tensor of the input's shape. Whether
 * every id is in [0, C) is checked by the loss's gather, vl_ag_gather_as(op, ...). */
vl_status vl_class_target_check(const char *op, const vl_tensor *input, const vl_tensor *target, bool probs_ok);
/* Elementwise losses: target of input's shape, on its device. */
vl_status vl_same_shape_check(const char *op, const vl_tensor *input, const vl_tensor *target);
/* q ... x L x E, k ... x S x E, v ... x S x Ev; mask NULL, bool or float; one device. */
vl_status vl_sdpa_check(const vl_tensor *q, const vl_tensor *k, const vl_tensor *v, const vl_tensor *mask);
/* 0-based dims start..end of x (negative from the end) as wrapped dims *a <= *b. */
vl_status vl_flatten_dims(const char *op, const vl_tensor *x, int start, int end, int *a, int *b);
/* normalized_shape (n sizes) must be x's trailing sizes: layer norm's nnorm = n. */
vl_status vl_layer_norm_shape_check(const char *op, const vl_tensor *x, int n, const int64_t *size);

/* ---- autograd-recording versions (runtime/autograd/nn_*.c): same arguments, record a node
 * when grad mode is on and an input requires grad (runtime/autograd/autograd.h). ---- */
vl_status vl_ag_conv2d(vl_tensor *x, vl_tensor *w, vl_tensor *bias, const vl_conv2d_params *p, vl_tensor **y);
vl_status vl_ag_pool2d(vl_tensor *x, const vl_pool2d_params *p, vl_tensor **y);
/* Running stats are updated in training mode (never recorded). */
vl_status vl_ag_batch_norm(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                           vl_tensor *running_var, bool training, double momentum, double eps, vl_tensor **y);
/* The fused forms (f may be NULL); gradients flow to x, weight, bias and the residual. */
vl_status vl_ag_batch_norm_fused(vl_tensor *x, vl_tensor *weight, vl_tensor *bias, vl_tensor *running_mean,
                                 vl_tensor *running_var, bool training, double momentum, double eps,
                                 const vl_bn_fusion *f, vl_tensor **y);
vl_status vl_ag_layer_norm(vl_tensor *x, int nnorm, vl_tensor *weight, vl_tensor *bias, double eps, vl_tensor **y);
/* The mask gets no gradient (it is a constant of the op). */
vl_status vl_ag_attention(vl_tensor *q, vl_tensor *k, vl_tensor *v, vl_tensor *mask, const vl_attention_params *p,
                          vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
