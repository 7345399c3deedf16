/* runtime/core/cuda_check.h: file:line checks of CUDA runtime calls for the runtime's C files
 * (runtime/core/cuda.c, graph.c, rtc_nvrtc.c); the kernels have theirs in kernels/cuda/cuda_common.cuh.
 * Include only under VL_HAVE_CUDA, after cuda_runtime.h. */
#ifndef VL_CUDA_CHECK_H
#define VL_CUDA_CHECK_H

#include "runtime/core/status.h"

#define VL_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    cudaError_t vl_ce_ = (call);                                                             \
    if (vl_ce_ != cudaSuccess)                                                               \
      return vl_fail(VL_ECUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                   \
                     cudaGetErrorString(vl_ce_));                                            \
  } while (0)

/* For calls in functions that cannot return a status (frees, teardown): the failure still lands
 * in the error message, and a sticky error resurfaces at the next checked call. */
#define VL_CUDA_NOTE(call)                                                                   \
  do {                                                                                       \
    cudaError_t vl_ce_ = (call);                                                             \
    if (vl_ce_ != cudaSuccess)                                                               \
      (void)vl_fail(VL_ECUDA, "%s:%d: %s: %s", __FILE__, __LINE__, #call,                    \
                    cudaGetErrorString(vl_ce_));                                             \
  } while (0)

#endif
