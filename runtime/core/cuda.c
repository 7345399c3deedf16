/* runtime/core/cuda.c: the CUDA runtime glue (runtime/core/cuda.h): devices, streams, events, the pool
 * backends, copies, versions. Without VL_HAVE_CUDA everything links and reports "no CUDA". */
#define _POSIX_C_SOURCE 200809L
#include "runtime/core/cuda.h"

#include <stdio.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/graph.h"

#ifdef VL_HAVE_MPI
#include <mpi.h>
#endif

static void mpi_version(char *buf, size_t n) {
  buf[0] = '\0';
#ifdef VL_HAVE_MPI
  /* MPI_Get_library_version may be called before MPI_Init (MPI-3). */
  char lib[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(lib, &len) != MPI_SUCCESS) return;
  if (len < 0) len = 0;
  if (len >= (int)sizeof lib) len = (int)sizeof lib - 1;
  lib[len] = '\0';
  size_t first = strcspn(lib, "\r\n");
  if (first >= n) first = n - 1;
  memcpy(buf, lib, first);
  buf[first] = '\0';
#else
  (void)n;
#endif
}

#ifdef VL_HAVE_CUDA

#include <cublasLt.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include "runtime/core/cuda_check.h"

/* Immutable per-device data the backends point at (the pool keeps `ud` and `name`). */
static const int vl_dev_ids[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static const char *const vl_dev_names[] = {
    "cuda:0", "cuda:1", "cuda:2",  "cuda:3",  "cuda:4",  "cuda:5",  "cuda:6",  "cuda:7",
    "cuda:8", "cuda:9", "cuda:10", "cuda:11", "cuda:12", "cuda:13", "cuda:14", "cuda:15"};
VL_TABLE_SIZE(vl_dev_ids, VL_MAX_DEVICES);
VL_TABLE_SIZE(vl_dev_names, VL_MAX_DEVICES);

bool vl_have_cuda(void) { return true; }

int vl_cuda_device_count(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    /* No driver or no GPU (CI): not an error for counting; clear it so later calls start clean. */
    (void)cudaGetLastError();
    return 0;
  }
  return n < 0 ? 0 : (n > VL_MAX_DEVICES ? VL_MAX_DEVICES : n);
}

static vl_status check_dev(const char *fn, int dev) {
  if (dev < 0 || dev >= VL_MAX_DEVICES)
    return vl_fail(VL_EDEVICE, "%s: no device cuda:%d", fn, dev);
  int n = vl_cuda_device_count();
  if (dev >= n)
    return vl_fail(VL_EDEVICE, "%s: no device cuda:%d (%d CUDA device%s present)", fn, dev, n,
                   n == 1 ? "" : "s");
  return VL_OK;
}

static vl_status set_device(int dev) {
  int cur = -1;
  VL_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != dev) VL_CUDA_CHECK(cudaSetDevice(dev));
  return VL_OK;
}

vl_status vl_cuda_device_enter(int dev, int *prev) {
  int cur = -1;
  *prev = -1;
  VL_CUDA_CHECK(cudaGetDevice(&cur));
  if (cur != dev) {
    VL_CUDA_CHECK(cudaSetDevice(dev));
    *prev = cur;
  }
  return VL_OK;
}

void vl_cuda_device_leave(int prev) {
  if (prev >= 0) VL_CUDA_NOTE(cudaSetDevice(prev));
}

vl_status vl_cuda_device_info(int dev, vl_device_info *info) {
  if (!info) return vl_fail(VL_EINVAL, "vl_cuda_device_info: NULL output");
  VL_TRY(check_dev("vl_cuda_device_info", dev));
  struct cudaDeviceProp prop;
  VL_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  vl_device_info d;
  memset(&d, 0, sizeof d);
  snprintf(d.name, sizeof d.name, "%s", prop.name);
  d.total_memory = prop.totalGlobalMem;
  d.major = prop.major;
  d.minor = prop.minor;
  d.sm_count = prop.multiProcessorCount;
  d.l2_bytes = prop.l2CacheSize > 0 ? (size_t)prop.l2CacheSize : 0;
  *info = d;
  return VL_OK;
}

void vl_get_versions(vl_versions *v) {
  if (!v) return;
  memset(v, 0, sizeof *v);
  int rt = 0, drv = 0, nccl = 0;
  /* A version that cannot be read stays 0; the error is cleared so it does not leak into the
   * next checked call (cudaDriverGetVersion reports 0 without a driver). */
  if (cudaRuntimeGetVersion(&rt) == cudaSuccess) v->cuda_runtime = rt;
  else (void)cudaGetLastError();
  if (cudaDriverGetVersion(&drv) == cudaSuccess) v->cuda_driver = drv;
  else (void)cudaGetLastError();
  v->cublas = (int)cublasLtGetVersion();
  v->cudnn = cudnnGetVersion();
  v->cudnn_compiled = CUDNN_VERSION;
  if (ncclGetVersion(&nccl) == ncclSuccess) v->nccl = nccl;
  mpi_version(v->mpi, sizeof v->mpi);
}

/* ---- streams ---- */

static vl_status ensure_default_stream(int dev) {
  vl_context *c = vl_ctx();
  if (!c->default_stream[dev]) {
    cudaStream_t s = NULL;
    VL_TRY(set_device(dev));
    /* Non-blocking: our streams must not serialise against the legacy NULL stream that
     * libraries may use behind our back. */
    VL_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    c->default_stream[dev] = s;
  }
  if (!c->current_stream[dev]) c->current_stream[dev] = c->default_stream[dev];
  return VL_OK;
}

vl_status vl_cuda_current_stream(int dev, void **stream) {
  if (!stream) return vl_fail(VL_EINVAL, "vl_cuda_current_stream: NULL output");
  /* Hot path (every kernel launch): no device count, no CUDA call. */
  if (dev >= 0 && dev < VL_MAX_DEVICES && vl_ctx()->current_stream[dev]) {
    *stream = vl_ctx()->current_stream[dev];
    return VL_OK;
  }
  VL_TRY(check_dev("vl_cuda_current_stream", dev));
  VL_TRY(ensure_default_stream(dev));
  *stream = vl_ctx()->current_stream[dev];
  return VL_OK;
}

vl_status vl_cuda_set_current_stream(int dev, void *stream) {
  VL_TRY(check_dev("vl_cuda_set_current_stream", dev));
  VL_TRY(ensure_default_stream(dev));
  vl_context *c = vl_ctx();
  c->current_stream[dev] = stream ? stream : c->default_stream[dev];
  return VL_OK;
}

/* NULL means the device's current stream (the legacy NULL stream is never ours). */
static vl_status resolve_stream(const char *fn, int dev, void **stream) {
  VL_TRY(check_dev(fn, dev));
  if (!*stream) VL_TRY(vl_cuda_current_stream(dev, stream));
  return set_device(dev);
}

vl_status vl_stream_create(int dev, int priority, void **stream) {
  if (!stream) return vl_fail(VL_EINVAL, "vl_stream_create: NULL output");
  VL_TRY(check_dev("vl_stream_create", dev));
  VL_TRY(set_device(dev));
  cudaStream_t s = NULL;
  VL_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
  *stream = s;
  return VL_OK;
}

vl_status vl_stream_destroy(int dev, void *stream) {
  VL_TRY(check_dev("vl_stream_destroy", dev));
  vl_context *c = vl_ctx();
  if (!stream || stream == c->default_stream[dev])
    return vl_fail(VL_EINVAL, "vl_stream_destroy: the default stream of cuda:%d cannot be "
                   "destroyed", dev);
  VL_TRY(set_device(dev));
  /* The pool keys cached blocks by stream handle; a new stream may get this handle back, so
   * work still queued here must finish before the handle can be reused. */
  VL_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
  VL_CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream));
  if (c->current_stream[dev] == stream) c->current_stream[dev] = c->default_stream[dev];
  return VL_OK;
}

vl_status vl_stream_synchronize(int dev, void *stream) {
  VL_TRY(vl_graph_refuse("stream:synchronize", "a wait for a stream"));
  VL_TRY(resolve_stream("vl_stream_synchronize", dev, &stream));
  VL_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
  return VL_OK;
}

vl_status vl_stream_query(int dev, void *stream, bool *done) {
  if (!done) return vl_fail(VL_EINVAL, "vl_stream_query: NULL output");
  VL_TRY(resolve_stream("vl_stream_query", dev, &stream));
  cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *done = false;
    return VL_OK;
  }
  VL_CUDA_CHECK(e);
  *done = true;
  return VL_OK;
}

vl_status vl_stream_wait_event(int dev, void *stream, void *event) {
  if (!event) return vl_fail(VL_EINVAL, "vl_stream_wait_event: NULL event (cuda:%d)", dev);
  VL_TRY(resolve_stream("vl_stream_wait_event", dev, &stream));
  VL_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
  return VL_OK;
}

/* ---- events ---- */

vl_status vl_event_create(int dev, bool timing, void **event) {
  if (!event) return vl_fail(VL_EINVAL, "vl_event_create: NULL output");
  VL_TRY(check_dev("vl_event_create", dev));
  VL_TRY(set_device(dev));
  cudaEvent_t e = NULL;
  VL_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  *event = e;
  return VL_OK;
}

vl_status vl_event_destroy(int dev, void *event) {
  if (!event) return VL_OK;
  VL_TRY(check_dev("vl_event_destroy", dev));
  VL_TRY(set_device(dev));
  VL_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event));
  return VL_OK;
}

vl_status vl_event_record(int dev, void *event, void *stream) {
  if (!event) return vl_fail(VL_EINVAL, "vl_event_record: NULL event (cuda:%d)", dev);
  VL_TRY(resolve_stream("vl_event_record", dev, &stream));
  VL_CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
  return VL_OK;
}

vl_status vl_event_synchronize(int dev, void *event) {
  if (!event) return vl_fail(VL_EINVAL, "vl_event_synchronize: NULL event (cuda:%d)", dev);
  VL_TRY(vl_graph_refuse("event:synchronize", "a wait for an event"));
  VL_TRY(check_dev("vl_event_synchronize", dev));
  VL_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event));
  return VL_OK;
}

vl_status vl_event_query(int dev, void *event, bool *done) {
  if (!event || !done) return vl_fail(VL_EINVAL, "vl_event_query: NULL event or output");
  VL_TRY(check_dev("vl_event_query", dev));
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    *done = false;
    return VL_OK;
  }
  VL_CUDA_CHECK(e);
  *done = true;
  return VL_OK;
}

vl_status vl_event_elapsed_ms(void *start, void *end, float *ms) {
  if (!start || !end || !ms) return vl_fail(VL_EINVAL, "vl_event_elapsed_ms: NULL argument");
  float t = 0.0f;
  VL_CUDA_CHECK(cudaEventElapsedTime(&t, (cudaEvent_t)start, (cudaEvent_t)end));
  *ms = t;
  return VL_OK;
}

vl_status vl_cuda_synchronize(int dev) {
  VL_TRY(vl_graph_refuse("synchronize", "a wait for the device"));
  VL_TRY(check_dev("vl_cuda_synchronize", dev));
  VL_TRY(set_device(dev));
  VL_CUDA_CHECK(cudaDeviceSynchronize());
  vl_status (*check_async)(int) = vl_ctx()->hooks.cuda_check_async; /* the backend's (context.h) */
  if (check_async) return check_async(dev);
  return VL_OK;
}

vl_status vl_cuda_profiler(int dev, bool on) {
  VL_TRY(check_dev("vl_cuda_profiler", dev));
  VL_TRY(set_device(dev));
  VL_CUDA_CHECK(on ? cudaProfilerStart() : cudaProfilerStop());
  return VL_OK;
}

/* ---- copies ---- */

vl_status vl_memcpy(void *dst, vl_device dst_dev, const void *src, vl_device src_dev, size_t nbytes,
                    void *stream, bool sync) {
  if (nbytes == 0) return VL_OK;
  if (!dst || !src) return vl_fail(VL_EINVAL, "vl_memcpy: NULL pointer for %zu bytes", nbytes);
  if (dst_dev.type == VL_CPU && src_dev.type == VL_CPU) {
    memmove(dst, src, nbytes);
    return VL_OK;
  }
  if (vl_graph_capturing()) {
    if (dst_dev.type != VL_CUDA || src_dev.type != VL_CUDA)
      VL_TRY(vl_graph_refuse("copy", dst_dev.type == VL_CUDA ? "a copy from host memory" : "a copy to host memory"));
    VL_TRY(vl_graph_check_device("copy", VL_CUDA, dst_dev.index));
    VL_TRY(vl_graph_check_device("copy", VL_CUDA, src_dev.index));
  }
  /* The copy runs on the CUDA side's stream: the destination's for device-to-device. */
  int dev = dst_dev.type == VL_CUDA ? dst_dev.index : src_dev.index;
  if (src_dev.type == VL_CUDA) VL_TRY(check_dev("vl_memcpy", src_dev.index));
  VL_TRY(resolve_stream("vl_memcpy", dev, &stream));
  /* cudaMemcpyDefault: unified addressing tells host, device and peer apart. */
  VL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, (cudaStream_t)stream));
  if (sync) VL_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
  return VL_OK;
}

/* ---- pool backends ---- */

static vl_status dev_raw_alloc(void *ud, size_t nbytes, void **ptr) {
  int dev = *(const int *)ud;
  VL_TRY(set_device(dev));
  void *p = NULL;
  /* A new segment of a graph's private pool is obtained during capture; cudaMalloc is not a
   * stream operation, and relaxed mode lets it through (the capture never records it). */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  VL_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  cudaError_t e = cudaMalloc(&p, nbytes);
  VL_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError(); /* not sticky: the pool frees its cache and retries */
    return VL_EOOM;
  }
  if (e != cudaSuccess)
    return vl_fail(VL_ECUDA, "%s:%d: cudaMalloc(%zu bytes) on cuda:%d: %s", __FILE__, __LINE__,
                   nbytes, dev, cudaGetErrorString(e));
  *ptr = p;
  return VL_OK;
}

static void dev_raw_free(void *ud, void *ptr) {
  if (set_device(*(const int *)ud) != VL_OK) return;
  VL_CUDA_NOTE(cudaFree(ptr));
}

static vl_status record_new_event(void *stream, void **event) {
  cudaEvent_t e = NULL;
  VL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  cudaError_t r = cudaEventRecord(e, (cudaStream_t)stream);
  if (r != cudaSuccess) {
    VL_CUDA_NOTE(cudaEventDestroy(e));
    return vl_fail(VL_ECUDA, "%s:%d: cudaEventRecord: %s", __FILE__, __LINE__,
                   cudaGetErrorString(r));
  }
  *event = e;
  return VL_OK;
}

static vl_status dev_event_record(void *ud, void *stream, void **event) {
  VL_TRY(set_device(*(const int *)ud));
  return record_new_event(stream, event);
}

static int any_event_query(void *ud, void *event) {
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  if (e == cudaSuccess) return 1;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  (void)vl_fail(VL_ECUDA, "%s:%d: cudaEventQuery: %s", __FILE__, __LINE__, cudaGetErrorString(e));
  return -1;
}

static void any_event_destroy(void *ud, void *event) {
  VL_CUDA_NOTE(cudaEventDestroy((cudaEvent_t)event));
}

static vl_status dev_mem_info(void *ud, size_t *free_bytes, size_t *total_bytes) {
  VL_TRY(set_device(*(const int *)ud));
  size_t f = 0, t = 0;
  VL_CUDA_CHECK(cudaMemGetInfo(&f, &t));
  *free_bytes = f;
  *total_bytes = t;
  return VL_OK;
}

vl_status vl_cuda_alloc_backend(int dev, vl_alloc_backend *be) {
  if (!be) return vl_fail(VL_EINVAL, "vl_cuda_alloc_backend: NULL output");
  VL_TRY(check_dev("vl_cuda_alloc_backend", dev));
  vl_alloc_backend b = {.ud = (void *)&vl_dev_ids[dev],
                       .raw_alloc = dev_raw_alloc,
                       .raw_free = dev_raw_free,
                       .event_record = dev_event_record,
                       .event_query = any_event_query,
                       .event_destroy = any_event_destroy,
                       .mem_info = dev_mem_info,
                       .name = vl_dev_names[dev]};
  *be = b;
  return VL_OK;
}

static vl_status host_raw_alloc(void *ud, size_t nbytes, void **ptr) {
  void *p = NULL;
  /* Portable: any device may copy from or to it. */
  cudaError_t e = cudaHostAlloc(&p, nbytes, cudaHostAllocPortable);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return VL_EOOM;
  }
  if (e != cudaSuccess)
    return vl_fail(VL_ECUDA, "%s:%d: cudaHostAlloc(%zu bytes): %s", __FILE__, __LINE__, nbytes,
                   cudaGetErrorString(e));
  *ptr = p;
  return VL_OK;
}

static void host_raw_free(void *ud, void *ptr) { VL_CUDA_NOTE(cudaFreeHost(ptr)); }

static vl_status host_event_record(void *ud, void *stream, void **event) {
  /* The event must live on the stream's device. */
  if (stream) {
    int dev = 0;
    VL_CUDA_CHECK(cudaStreamGetDevice((cudaStream_t)stream, &dev));
    VL_TRY(set_device(dev));
  }
  return record_new_event(stream, event);
}

vl_status vl_cuda_host_alloc_backend(vl_alloc_backend *be) {
  if (!be) return vl_fail(VL_EINVAL, "vl_cuda_host_alloc_backend: NULL output");
  vl_alloc_backend b = {.ud = NULL,
                       .raw_alloc = host_raw_alloc,
                       .raw_free = host_raw_free,
                       .event_record = host_event_record,
                       .event_query = any_event_query,
                       .event_destroy = any_event_destroy,
                       .mem_info = NULL,
                       .name = "pinned host"};
  *be = b;
  return VL_OK;
}

vl_status vl_cuda_alloc(int dev, vl_alloc **out) {
  if (!out) return vl_fail(VL_EINVAL, "vl_cuda_alloc: NULL output");
  vl_context *c = vl_ctx();
  if (dev >= 0 && dev < VL_MAX_DEVICES && c->pool[dev]) {
    *out = c->pool[dev];
    return VL_OK;
  }
  vl_alloc_backend be;
  VL_TRY(vl_cuda_alloc_backend(dev, &be));
  vl_alloc *p = NULL;
  VL_TRY(vl_alloc_create(&be, &p));
  vl_alloc_set_reclaim(p, c->reclaim, c->reclaim_ud);
  c->pool[dev] = p;
  *out = p;
  return VL_OK;
}

vl_status vl_host_alloc(vl_alloc **out) {
  if (!out) return vl_fail(VL_EINVAL, "vl_host_alloc: NULL output");
  vl_context *c = vl_ctx();
  if (!c->host_pool) {
    if (vl_cuda_device_count() == 0)
      return vl_fail(VL_EDEVICE, "vl_host_alloc: pinned host memory needs a CUDA device (none "
                     "present)");
    vl_alloc_backend be;
    VL_TRY(vl_cuda_host_alloc_backend(&be));
    vl_alloc *p = NULL;
    VL_TRY(vl_alloc_create(&be, &p));
    vl_alloc_set_reclaim(p, c->reclaim, c->reclaim_ud);
    c->host_pool = p;
  }
  *out = c->host_pool;
  return VL_OK;
}

void vl_cuda_teardown(void) {
  vl_context *c = vl_ctx();
  for (int d = 0; d < VL_MAX_DEVICES; d++) {
    if (c->pool[d]) {
      (void)set_device(d);
      vl_alloc_destroy(c->pool[d]);
      c->pool[d] = NULL;
    }
  }
  if (c->host_pool) {
    vl_alloc_destroy(c->host_pool);
    c->host_pool = NULL;
  }
  for (int d = 0; d < VL_MAX_DEVICES; d++) {
    if (c->default_stream[d]) {
      if (set_device(d) == VL_OK) VL_CUDA_NOTE(cudaStreamDestroy((cudaStream_t)c->default_stream[d]));
      c->default_stream[d] = NULL;
    }
    c->current_stream[d] = NULL;
  }
}

#else /* !VL_HAVE_CUDA */

#define VL_NO_CUDA(fn) vl_fail(VL_EUNSUPPORTED, "%s: v100lua was built without CUDA", fn)

bool vl_have_cuda(void) { return false; }
int vl_cuda_device_count(void) { return 0; }

vl_status vl_cuda_device_info(int dev, vl_device_info *info) {
  return VL_NO_CUDA("vl_cuda_device_info");
}

void vl_get_versions(vl_versions *v) {
  if (!v) return;
  memset(v, 0, sizeof *v);
  mpi_version(v->mpi, sizeof v->mpi);
}

vl_status vl_cuda_device_enter(int dev, int *prev) {
  *prev = -1;
  return VL_NO_CUDA("vl_cuda_device_enter");
}
void vl_cuda_device_leave(int prev) {}

vl_status vl_cuda_alloc(int dev, vl_alloc **out) { return VL_NO_CUDA("vl_cuda_alloc"); }
vl_status vl_host_alloc(vl_alloc **out) { return VL_NO_CUDA("vl_host_alloc"); }
vl_status vl_cuda_current_stream(int dev, void **stream) {
  return VL_NO_CUDA("vl_cuda_current_stream");
}
vl_status vl_cuda_set_current_stream(int dev, void *stream) {
  return VL_NO_CUDA("vl_cuda_set_current_stream");
}
vl_status vl_stream_create(int dev, int priority, void **stream) {
  return VL_NO_CUDA("vl_stream_create");
}
vl_status vl_stream_destroy(int dev, void *stream) { return VL_NO_CUDA("vl_stream_destroy"); }
vl_status vl_stream_synchronize(int dev, void *stream) {
  return VL_NO_CUDA("vl_stream_synchronize");
}
vl_status vl_stream_query(int dev, void *stream, bool *done) {
  return VL_NO_CUDA("vl_stream_query");
}
vl_status vl_stream_wait_event(int dev, void *stream, void *event) {
  return VL_NO_CUDA("vl_stream_wait_event");
}
vl_status vl_event_create(int dev, bool timing, void **event) {
  return VL_NO_CUDA("vl_event_create");
}
vl_status vl_event_destroy(int dev, void *event) { return VL_NO_CUDA("vl_event_destroy"); }
vl_status vl_event_record(int dev, void *event, void *stream) {
  return VL_NO_CUDA("vl_event_record");
}
vl_status vl_event_synchronize(int dev, void *event) {
  return VL_NO_CUDA("vl_event_synchronize");
}
vl_status vl_event_query(int dev, void *event, bool *done) { return VL_NO_CUDA("vl_event_query"); }
vl_status vl_event_elapsed_ms(void *start, void *end, float *ms) {
  return VL_NO_CUDA("vl_event_elapsed_ms");
}
vl_status vl_cuda_synchronize(int dev) { return VL_NO_CUDA("vl_cuda_synchronize"); }
vl_status vl_cuda_profiler(int dev, bool on) {
  (void)dev;
  (void)on;
  return VL_NO_CUDA("vl_cuda_profiler");
}

vl_status vl_memcpy(void *dst, vl_device dst_dev, const void *src, vl_device src_dev, size_t nbytes,
                    void *stream, bool sync) {
  if (dst_dev.type != VL_CPU || src_dev.type != VL_CPU) return VL_NO_CUDA("vl_memcpy");
  if (nbytes == 0) return VL_OK;
  if (!dst || !src) return vl_fail(VL_EINVAL, "vl_memcpy: NULL pointer for %zu bytes", nbytes);
  memmove(dst, src, nbytes);
  return VL_OK;
}

vl_status vl_cuda_alloc_backend(int dev, vl_alloc_backend *be) {
  return VL_NO_CUDA("vl_cuda_alloc_backend");
}
vl_status vl_cuda_host_alloc_backend(vl_alloc_backend *be) {
  return VL_NO_CUDA("vl_cuda_host_alloc_backend");
}

/* Nothing to free: no pool or stream can exist without CUDA. */
void vl_cuda_teardown(void) {}

#endif
