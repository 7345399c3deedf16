/* runtime/nn/fused.h: front ends of the fused layer ops (runtime/backend/fused_kernels.h) and their
 * recorded versions. Same rules as runtime/nn/nn.h: every check first, errors name the op and the
 * operands, outputs untouched on failure.
 *
 * dropout (runtime/nn/dropout.c): one pass, the keep mask drawn inline from the shared Philox
 * generator exactly as v100.bernoulli(x.shape, 1 - p) would draw it (same elements, same counters
 * consumed), so the composed x * bernoulli / (1 - p) and this op agree, nn.Checkpoint's replay of
 * the RNG state recomputes the same masks, and a CUDA graph replay draws fresh ones. The backward
 * saves (seed, offset, base) only and regenerates the mask.
 *
 * cross entropy over class ids (runtime/nn/xent.c): one pass per row for the loss (f32 statistics
 * from logits of any float dtype; no probabilities are stored), one pass for dlogits, written in
 * the logits' dtype. */
#ifndef VL_NN_FUSED_H
#define VL_NN_FUSED_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/fused_kernels.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dropout ---- */
/* Where a draw's counters came from: the generator's key and first counter, or under CUDA graph
 * capture the device buffer {key, first counter} of the replay and the offset relative to it
 * (runtime/core/graph.h vl_graph_rng_draw). */
typedef struct vl_dropout_rng {
  uint64_t seed, offset;
  const uint64_t *base;
} vl_dropout_rng;

/* y = x * keep / (1 - p), keep ~ Bernoulli(1 - p) per element of x in row-major order; x of a
 * float dtype, any strides (a non-contiguous x is read through a contiguous copy; y is
 * contiguous); 0 <= p <= 1. Draws from the generator (advancing it as v100.bernoulli of x's shape
 * would) and returns the draw in *rng (may be NULL). */
vl_status vl_dropout(vl_tensor *x, double p, vl_tensor **y, vl_dropout_rng *rng);
/* The same mask as the draw `rng` made, applied to x (of the drawn shape): the backward,
 * dx = dy * keep / (1 - p). Draws nothing. */
vl_status vl_dropout_apply(vl_tensor *x, double p, const vl_dropout_rng *rng, vl_tensor **y);
/* Recorded (runtime/autograd/nn_fused.c), with nn.functional.dropout's special cases: x itself
 * when !training or p == 0, x * 0 when p == 1 (neither draws). p is checked in every case. */
vl_status vl_ag_dropout(vl_tensor *x, double p, bool training, vl_tensor **y);

/* ---- softmax cross entropy over class ids ---- */
typedef struct vl_xent_params {
  int64_t ignore_index;        /* PyTorch's default: -100 */
  double smoothing;            /* label smoothing in [0, 1] */
  vl_xent_reduction reduction;
  vl_dtype out_dtype;          /* the loss's dtype (a float dtype); VL_NDTYPES: the logits' */
} vl_xent_params;

/* logits N x C [x d...] (or C: one sample), target N [x d...] (or a scalar) of class ids (i64 or
 * i32), on one device. loss: target's shape (NONE) or a scalar. lse, count: what the backward
 * needs (new tensors of the stat dtype: rows of log-sum-exp, and the number of rows not ignored;
 * either may be NULL when not wanted). Semantics as PyTorch's F.cross_entropy: ignored rows count
 * in neither the sum nor the mean's denominator; with smoothing s, loss = (1 - s) nll + s mean_c
 * (-log softmax). A class id outside [0, C) fails (on CUDA asynchronously, as gather's). */
vl_status vl_cross_entropy(vl_tensor *logits, vl_tensor *target, const vl_xent_params *p, vl_tensor **loss,
                           vl_tensor **lse, vl_tensor **count);
/* dlogits (logits' shape and dtype) for the loss gradient `grad` (the loss's shape). */
vl_status vl_cross_entropy_backward(vl_tensor *logits, vl_tensor *target, vl_tensor *lse, vl_tensor *count,
                                    vl_tensor *grad, const vl_xent_params *p, vl_tensor **dlogits);
/* Recorded. p->out_dtype VL_NDTYPES: the logits' dtype, except f32 for f16/bf16 logits under
 * autocast (cross entropy is an fp32 op there, as in PyTorch; the kernels read the half logits
 * directly and compute in f32, so no f32 copy of the logits is made). A float dtype given is
 * taken as it is (F.cross_entropy's `dtype` option: an f32 loss from half logits without
 * autocast, AMP O2/O3). */
vl_status vl_ag_cross_entropy(vl_tensor *logits, vl_tensor *target, const vl_xent_params *p, vl_tensor **loss);

#ifdef __cplusplus
}
#endif
#endif
