/* kernels/cuda/cuda_state.cu: per-device kernel state (created lazily in
 * vl_ctx()->kernel_state[dev]), per-stream workspaces, the asynchronous index-error flag, and
 * shutdown. */
#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

static vl_status vl_cuda_state_create(int dev, vl_cuda_state **out) {
  vl_cuda_state *st = (vl_cuda_state *)calloc(1, sizeof *st);
  if (!st) return vl_fail(VL_EOOM, "cuda:%d: out of host memory for the kernel state", dev);
  st->device = dev;
  vl_status s = VL_OK;
  cudaError_t e = cudaDeviceGetAttribute(&st->sm_count, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&st->cc_major, cudaDevAttrComputeCapabilityMajor, dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&st->cc_minor, cudaDevAttrComputeCapabilityMinor, dev);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&st->max_threads_per_sm, cudaDevAttrMaxThreadsPerMultiProcessor, dev);
  if (e == cudaSuccess) e = cudaMalloc((void **)&st->flag, sizeof(vl_cuda_errflag));
  if (e == cudaSuccess) e = cudaMemset(st->flag, 0, sizeof(vl_cuda_errflag));
  if (e != cudaSuccess) {
    s = vl_fail(e == cudaErrorMemoryAllocation ? VL_EOOM : VL_ECUDA,
                "%s:%d: creating the kernel state of cuda:%d failed: %s", __FILE__, __LINE__, dev,
                cudaGetErrorString(e));
    if (st->flag) (void)cudaFree(st->flag);
    free(st);
    return s;
  }
  *out = st;
  return VL_OK;
}

vl_status vl_cuda_state_get(int dev, vl_cuda_state **out) {
  if (dev < 0 || dev >= VL_MAX_DEVICES) return vl_fail(VL_EDEVICE, "cuda:%d: no such device", dev);
  vl_context *ctx = vl_ctx();
  if (!ctx->kernel_state[dev]) {
    vl_cuda_state *st = NULL;
    VL_TRY(vl_cuda_state_create(dev, &st));
    ctx->kernel_state[dev] = st;
  }
  *out = (vl_cuda_state *)ctx->kernel_state[dev];
  return VL_OK;
}

vl_status vl_cuda_workspace(vl_cuda_state *st, void *stream, void **ptr) {
  for (int i = 0; i < st->nws; i++)
    if (st->ws[i].stream == stream) {
      *ptr = st->ws[i].ptr;
      return VL_OK;
    }
  if (st->nws == st->ws_cap) {
    int cap = st->ws_cap ? 2 * st->ws_cap : 4;
    vl_cuda_ws *n = (vl_cuda_ws *)realloc(st->ws, (size_t)cap * sizeof *n);
    if (!n) return vl_fail(VL_EOOM, "cuda:%d: out of host memory for workspaces", st->device);
    st->ws = n;
    st->ws_cap = cap;
  }
  void *p = NULL;
  cudaError_t e = cudaMalloc(&p, VL_CUDA_WORKSPACE_BYTES);
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* an allocation failure is not sticky: clear it */
    return vl_fail(e == cudaErrorMemoryAllocation ? VL_EOOM : VL_ECUDA,
                   "%s:%d: cudaMalloc of the %zu-byte kernel workspace on cuda:%d failed: %s",
                   __FILE__, __LINE__, VL_CUDA_WORKSPACE_BYTES, st->device, cudaGetErrorString(e));
  }
  st->ws[st->nws].stream = stream;
  st->ws[st->nws].ptr = p;
  st->nws++;
  *ptr = p;
  return VL_OK;
}

int vl_cuda_op_id(vl_cuda_state *st, const char *name) {
  if (!name) name = "index";
  for (int i = 0; i < st->nopnames; i++)
    if (strncmp(st->opnames[i], name, sizeof st->opnames[i] - 1) == 0) return i;
  if (st->nopnames == VL_CUDA_MAX_OPNAMES) return -1;
  snprintf(st->opnames[st->nopnames], sizeof st->opnames[0], "%s", name);
  return st->nopnames++;
}

vl_status vl_cuda_check_async(int dev) {
  if (dev < 0 || dev >= VL_MAX_DEVICES) return vl_fail(VL_EDEVICE, "cuda:%d: no such device", dev);
  vl_cuda_state *st = (vl_cuda_state *)vl_ctx()->kernel_state[dev];
  /* Only index kernels write the flag: skip the copy until one has run. */
  if (!st || !st->flag_armed) return VL_OK;
  vl_device_guard guard;
  VL_TRY(guard.set(dev));
  vl_cuda_errflag f;
  VL_CUDA_CHECK(cudaMemcpy(&f, st->flag, sizeof f, cudaMemcpyDeviceToHost));
  /* The device was synchronised, so every index kernel launched so far has finished. */
  st->flag_armed = false;
  if (!f.set) return VL_OK;
  VL_CUDA_CHECK(cudaMemset(st->flag, 0, sizeof f));
  const char *op = (f.op >= 0 && f.op < st->nopnames) ? st->opnames[f.op] : "index";
  return vl_fail(VL_EINVAL,
                 "%s: index %lld is out of bounds for dim %d with size %lld (index values are 0-based: 0 "
                 "to %lld; detected asynchronously on cuda:%d)",
                 op, f.index, f.dim + 1, f.size, f.size - 1, dev);
}

void vl_cuda_shutdown(void) {
  vl_context *ctx = vl_ctx();
  int prev = -1;
  bool have_prev = cudaGetDevice(&prev) == cudaSuccess;
  for (int dev = 0; dev < VL_MAX_DEVICES; dev++) {
    vl_cuda_state *st = (vl_cuda_state *)ctx->kernel_state[dev];
    if (!st) continue;
    /* Teardown cannot report failures; each release is attempted regardless. */
    (void)cudaSetDevice(dev);
    vl_cuda_gemm_cache_free(st);
    if (st->lt) (void)cublasLtDestroy((cublasLtHandle_t)st->lt);
    for (int i = 0; i < st->nws; i++) (void)cudaFree(st->ws[i].ptr);
    free(st->ws);
    if (st->flag) (void)cudaFree(st->flag);
    free(st);
    ctx->kernel_state[dev] = NULL;
  }
  if (have_prev) (void)cudaSetDevice(prev);
}
