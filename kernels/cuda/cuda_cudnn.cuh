/* kernels/cuda/cuda_cudnn.cuh: what cuDNN users among the CUDA kernel files share: the
 * return-code check, the per-device cuDNN state (a handle and the convolution plan cache, kept in
 * vl_ctx()->cudnn_state[dev]) and its teardown.
 *
 * One handle per device serves every stream: each call re-targets it with cudnnSetStream, which
 * is cheap and keeps the handle's internal workspace ordered with our work on that stream. The
 * runtime is single-threaded per process (one process per GPU), so the handle is never used by
 * two threads at once. */
#ifndef VL_CUDA_CUDNN_CUH
#define VL_CUDA_CUDNN_CUH

#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda/cuda_common.cuh"

#define VL_CUDNN_CHECK(call)                                                                 \
  do {                                                                                       \
    cudnnStatus_t vl_cd_ = (call);                                                           \
    if (vl_cd_ != CUDNN_STATUS_SUCCESS)                                                      \
      return vl_fail(VL_ECUDNN, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,           \
                     cudnnGetErrorString(vl_cd_));                                           \
  } while (0)

/* ---- convolution plan cache ----
 * Key: everything that decides which algorithm cuDNN may pick and how much workspace it needs.
 * Keys are built with memset(0) first so that memcmp over the whole struct is a valid equality. */
typedef enum vl_conv_dir { VL_CONV_FWD = 0, VL_CONV_BWD_DATA = 1, VL_CONV_BWD_FILTER = 2 } vl_conv_dir;

struct vl_conv_key {
  int32_t dir;               /* vl_conv_dir */
  int32_t dtype;             /* vl_dtype */
  int32_t nhwc;
  int32_t tf32;
  int32_t benchmark;
  int32_t deterministic;
  int32_t device;
  int64_t n, c, h, w, k, r, s;
  int32_t stride[2], pad[2], dilation[2], groups;
  int32_t pad_;              /* explicit tail padding: keeps the struct free of hidden bytes */
};

struct vl_conv_plan {
  vl_conv_key key;
  int algo;                  /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
  int math;                  /* cudnnMathType_t the algorithm was chosen with */
  size_t ws_bytes;
};

struct vl_cudnn_state {
  int device;
  cudnnHandle_t handle;
  vl_conv_plan *plans;       /* small, linear search: a model has tens of distinct conv shapes */
  int nplans, plans_cap;
};

#ifdef __cplusplus
extern "C" {
#endif

/* The device's cuDNN handle (created on first use, with `dev` made current for the creation),
 * bound to `stream` (a cudaStream_t). */
vl_status vl_cudnn_handle(int dev, void *stream, cudnnHandle_t *out);
/* The device's cuDNN state (handle + plan cache), created on first use. */
vl_status vl_cudnn_state_get(int dev, vl_cudnn_state **out);
/* A cached plan for `key`, or NULL. */
const vl_conv_plan *vl_cudnn_plan_find(const vl_cudnn_state *st, const vl_conv_key *key);
/* Remembers a plan (a copy of `p`). */
vl_status vl_cudnn_plan_put(vl_cudnn_state *st, const vl_conv_plan *p);
/* Destroys every device's handle and plan cache (vl_shutdown, before vl_cuda_teardown). */
void vl_cudnn_teardown(void);

#ifdef __cplusplus
}
#endif
#endif
