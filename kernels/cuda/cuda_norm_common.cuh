/* kernels/cuda/cuda_norm_common.cuh: the small helpers that the normalisation files share
 * (kernels/cuda/cuda_norm.cu: layer norm, softmax backward; cuda_batchnorm.cu: batch norm). */
#ifndef VL_CUDA_NORM_COMMON_CUH
#define VL_CUDA_NORM_COMMON_CUH

#include <math.h>
#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"

#define VL_NORM_BLOCK 256
#define VL_NORM_MAX_GRID ((int64_t)1 << 20)

struct vl_norm_add {
  template <typename A>
  VL_DEV A operator()(A a, A b) const { return a + b; }
};

VL_DEV float vl_norm_rsqrt(float v) { return rsqrtf(v); }
VL_DEV double vl_norm_rsqrt(double v) { return 1.0 / sqrt(v); }
__host__ __device__ __forceinline__ int64_t vl_norm_min(int64_t a, int64_t b) { return a < b ? a : b; }

static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
/* NULL passes: an absent operand needs no alignment. */
static inline bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Threads per row: a power of two covering `items` per-thread steps, 32..512. */
static inline int row_threads(int64_t items) {
  int t = 32;
  while (t < items && t < 512) t *= 2;
  return t;
}

#endif
