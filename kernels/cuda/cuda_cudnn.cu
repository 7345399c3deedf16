/* kernels/cuda/cuda_cudnn.cu: the per-device cuDNN state (handle + convolution plan cache) in
 * vl_ctx()->cudnn_state[dev], created lazily, destroyed by vl_cudnn_teardown. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_cudnn.cuh"

static vl_status cudnn_state_create(int dev, vl_cudnn_state **out) {
  vl_device_guard guard;
  VL_TRY(guard.set(dev)); /* cudnnCreate binds the handle to the current device */
  vl_cudnn_state *st = (vl_cudnn_state *)calloc(1, sizeof *st);
  if (!st) return vl_fail(VL_EOOM, "cuda:%d: out of host memory for the cuDNN state", dev);
  st->device = dev;
  cudnnStatus_t s = cudnnCreate(&st->handle);
  if (s != CUDNN_STATUS_SUCCESS) {
    free(st);
    return vl_fail(s == CUDNN_STATUS_ALLOC_FAILED ? VL_EOOM : VL_ECUDNN,
                   "%s:%d: cudnnCreate on cuda:%d failed: %s", __FILE__, __LINE__, dev,
                   cudnnGetErrorString(s));
  }
  *out = st;
  return VL_OK;
}

extern "C" vl_status vl_cudnn_state_get(int dev, vl_cudnn_state **out) {
  if (dev < 0 || dev >= VL_MAX_DEVICES) return vl_fail(VL_EDEVICE, "cuda:%d: no such device", dev);
  vl_context *ctx = vl_ctx();
  if (!ctx->cudnn_state[dev]) {
    vl_cudnn_state *st = NULL;
    VL_TRY(cudnn_state_create(dev, &st));
    ctx->cudnn_state[dev] = st;
  }
  *out = (vl_cudnn_state *)ctx->cudnn_state[dev];
  return VL_OK;
}

extern "C" vl_status vl_cudnn_handle(int dev, void *stream, cudnnHandle_t *out) {
  vl_cudnn_state *st = NULL;
  VL_TRY(vl_cudnn_state_get(dev, &st));
  VL_CUDNN_CHECK(cudnnSetStream(st->handle, (cudaStream_t)stream));
  *out = st->handle;
  return VL_OK;
}

extern "C" const vl_conv_plan *vl_cudnn_plan_find(const vl_cudnn_state *st, const vl_conv_key *key) {
  for (int i = 0; i < st->nplans; i++)
    if (memcmp(&st->plans[i].key, key, sizeof *key) == 0) return &st->plans[i];
  return NULL;
}

extern "C" vl_status vl_cudnn_plan_put(vl_cudnn_state *st, const vl_conv_plan *p) {
  if (st->nplans == st->plans_cap) {
    int cap = st->plans_cap ? 2 * st->plans_cap : 16;
    vl_conv_plan *n = (vl_conv_plan *)realloc(st->plans, (size_t)cap * sizeof *n);
    if (!n) return vl_fail(VL_EOOM, "cuda:%d: out of host memory for the convolution plan cache", st->device);
    st->plans = n;
    st->plans_cap = cap;
  }
  st->plans[st->nplans++] = *p;
  return VL_OK;
}

extern "C" void vl_cudnn_teardown(void) {
  vl_context *ctx = vl_ctx();
  for (int d = 0; d < VL_MAX_DEVICES; d++) {
    vl_cudnn_state *st = (vl_cudnn_state *)ctx->cudnn_state[d];
    if (!st) continue;
    int prev = -1;
    /* Teardown cannot report errors; a failing set-device still lets us free host memory. */
    if (cudaGetDevice(&prev) == cudaSuccess && prev != d) (void)cudaSetDevice(d);
    (void)cudnnDestroy(st->handle);
    if (prev >= 0 && prev != d) (void)cudaSetDevice(prev);
    free(st->plans);
    free(st);
    ctx->cudnn_state[d] = NULL;
  }
}
