/* runtime/backend/fused_kernels.h: the table of fused layer kernels (one pass where the composed ops
 * took several): dropout with its mask drawn inline, and softmax cross entropy over class ids.
 * Reached through the device's backend (runtime/backend/backend.h: `fused`); the front ends are
 * runtime/nn/dropout.c and runtime/nn/xent.c (runtime/nn/fused.h), which check everything first.
 * CPU: kernels/cpu/cpu_fused.c; CUDA: kernels/cuda/cuda_fused.cu. */
#ifndef VL_FUSED_KERNELS_H
#define VL_FUSED_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- dropout ----
 * out[i] = in[i] * keep_i * scale over numel contiguous elements of a float dtype, where keep_i is
 * exactly v100.bernoulli's draw of element i with probability 1 - p (runtime/core/philox.h: group
 * i / 4 at counter offset + i / 4 under key seed, word i % 4, whatever the dtype) written as the
 * integer test (word >> 9) < threshold (vl_philox_bernoulli_threshold(1 - p)). scale = 1 / (1 - p),
 * applied in f32 (f64 for f64 data). The backward is the same call with dy as `in`: the mask is
 * regenerated, never stored. `base`: as vl_rand_args's (CUDA graph capture: key base[0], first
 * counter base[1] + offset, read when the kernel runs); NULL otherwise. in may equal out. */
typedef struct vl_dropout_args {
  vl_dtype dtype;
  const void *in;
  void *out;
  int64_t numel;
  uint64_t seed, offset;
  const uint64_t *base;
  uint32_t threshold;
  double scale;
  vl_exec ex;
} vl_dropout_args;

/* ---- softmax cross entropy over class ids ----
 * logits: contiguous [outer, classes, inner] of a float dtype (N x C x d... with outer = N and
 * inner = the product of d...; inner = 1 for N x C), rows = outer * inner; target: contiguous
 * [rows] class ids (i64, or i32 when target_i32). "stat" dtype: f32, f64 for f64 logits. Per row
 * r with class t = target[r]: lse = log(sum_c exp(x_c)); loss_r = (1 - s) (lse - x_t) +
 * s (lse - mean_c x_c), s = smoothing; a row whose t == ignore_index has loss 0 and gradient 0.
 * A t outside [0, classes) of a row that is not ignored is an error "<op>: index t is out of
 * bounds for dim <class_dim + 1> with size <classes>" (CUDA: flagged and reported by check_async). */
typedef enum vl_xent_reduction { VL_XENT_NONE = 0, VL_XENT_SUM, VL_XENT_MEAN } vl_xent_reduction;

typedef struct vl_xent_args {
  const char *op;          /* for errors ("cross_entropy") */
  int class_dim;           /* 0-based, for errors */
  vl_dtype dtype;          /* logits and dlogits */
  vl_dtype stat_dtype;     /* lse, row_loss, count, grad */
  int64_t outer, classes, inner;
  const void *logits;
  const void *target;
  bool target_i32;
  int64_t ignore_index;
  double smoothing;
  vl_xent_reduction reduction;
  /* forward: writes lse[rows] and row_loss[rows] (stat); with SUM/MEAN also out[0] (out_dtype:
   * the sum, or the sum over the number of rows not ignored, 0/0 = NaN when all are) and count[0]
   * (stat: that number) */
  void *lse, *row_loss, *out, *count;
  vl_dtype out_dtype;
  /* backward: dlogits[r, c] = g_r (softmax_c - (1 - s) [c == t] - s / classes), 0 on ignored rows,
   * g_r = grad[r] (NONE: grad holds rows values) or grad[0] (SUM), grad[0] / count[0] (MEAN);
   * grad and count stat dtype, lse as the forward wrote it */
  const void *grad;
  void *dlogits;
  vl_exec ex;
} vl_xent_args;

typedef struct vl_fused_kernels {
  vl_status (*dropout)(const vl_dropout_args *a);
  vl_status (*xent_forward)(const vl_xent_args *a);
  vl_status (*xent_backward)(const vl_xent_args *a);
} vl_fused_kernels;

extern const vl_fused_kernels vl_cpu_fused_kernels;
#ifdef VL_HAVE_CUDA
extern const vl_fused_kernels vl_cuda_fused_kernels;
#endif

#ifdef __cplusplus
}
#endif
#endif
