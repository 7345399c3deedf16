/* runtime/core/cuda.h: the CUDA runtime glue the rest of the runtime uses: devices, streams, events,
 * memory (through the pools), copies, versions. Plain C over cuda_runtime.h (runtime/core/cuda.c, always
 * compiled; the CUDA calls only with VL_HAVE_CUDA). Without CUDA every function still links: the counting
 * functions report 0 devices and the rest fail with VL_EUNSUPPORTED ("built without CUDA").
 *
 * Streams and events are opaque handles (cudaStream_t / cudaEvent_t as void*). */
#ifndef VL_CUDA_H
#define VL_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/core/alloc.h"
#include "runtime/core/device.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_device_info {
  char name[256];
  size_t total_memory;
  int major, minor;          /* compute capability */
  int sm_count;
  size_t l2_bytes;
} vl_device_info;

typedef struct vl_versions {
  int cuda_runtime;          /* e.g. 13000; 0 if not built with CUDA */
  int cuda_driver;
  int cublas;                /* cublasLtGetVersion() */
  size_t cudnn;              /* cudnnGetVersion(), 0 if not linked */
  size_t cudnn_compiled;     /* CUDNN_VERSION */
  int nccl;                  /* ncclGetVersion() */
  char mpi[256];             /* MPI_Get_library_version, first line; "" if not linked */
} vl_versions;

bool vl_have_cuda(void);                         /* built with CUDA */
int vl_cuda_device_count(void);                  /* 0 when none or not built with CUDA */
vl_status vl_cuda_device_info(int dev, vl_device_info *info);
void vl_get_versions(vl_versions *v);

/* The pool of a device, created on first use (with the context's limit and reclaim hook). */
vl_status vl_cuda_alloc(int dev, vl_alloc **out);
/* The pinned host pool, created on first use. */
vl_status vl_host_alloc(vl_alloc **out);

/* Makes `dev` the calling thread's current device for a while: *prev is what to give back to
 * vl_cuda_device_leave (-1 when `dev` was current already, so the leave does nothing). C's form
 * of a scoped device guard, for the runtime's C files that call the CUDA runtime (dist/nccl.c). */
vl_status vl_cuda_device_enter(int dev, int *prev);
void vl_cuda_device_leave(int prev);

/* Current stream of a device (its default stream until set). */
vl_status vl_cuda_current_stream(int dev, void **stream);
vl_status vl_cuda_set_current_stream(int dev, void *stream); /* NULL restores the default */
vl_status vl_stream_create(int dev, int priority, void **stream);
vl_status vl_stream_destroy(int dev, void *stream);
vl_status vl_stream_synchronize(int dev, void *stream);
vl_status vl_stream_query(int dev, void *stream, bool *done);
vl_status vl_stream_wait_event(int dev, void *stream, void *event);
vl_status vl_event_create(int dev, bool timing, void **event);
vl_status vl_event_destroy(int dev, void *event);
vl_status vl_event_record(int dev, void *event, void *stream);
vl_status vl_event_synchronize(int dev, void *event);
vl_status vl_event_query(int dev, void *event, bool *done);
vl_status vl_event_elapsed_ms(void *start, void *end, float *ms);
/* Waits for all work on the device, then reports errors kernels flagged asynchronously. */
vl_status vl_cuda_synchronize(int dev);
/* cudaProfilerStart/Stop: the region a profiler started with `--profile-from-start off` (ncu)
 * records, e.g. one training step of bench/train_step.lua. */
vl_status vl_cuda_profiler(int dev, bool on);

/* Copies nbytes between devices (host<->device, device<->device incl. peer). Enqueued on `stream`
 * of the CUDA side (the destination's for D2D). When `sync` is true, returns after the copy has
 * completed (needed when host memory is pageable or about to be read). */
vl_status vl_memcpy(void *dst, vl_device dst_dev, const void *src, vl_device src_dev, size_t nbytes,
                    void *stream, bool sync);

/* Backends for vl_alloc: CUDA device memory of `dev` / pinned host memory. */
vl_status vl_cuda_alloc_backend(int dev, vl_alloc_backend *be);
vl_status vl_cuda_host_alloc_backend(vl_alloc_backend *be);

/* For vl_shutdown: destroys every pool (device and pinned host) and default stream, and resets
 * the current streams. Call after the kernels' shutdown (their workspaces may be pool blocks). */
void vl_cuda_teardown(void);

#ifdef __cplusplus
}
#endif
#endif
