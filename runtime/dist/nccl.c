/* runtime/dist/nccl.c: the NCCL backend of runtime/dist (internal.h): collectives on CUDA
 * tensors, one communicator per process on this rank's device, made by runtime/dist/comm.c from
 * an ncclUniqueId that rank 0 broadcasts over MPI.
 *
 * Streams: every operation runs on the communicator's own stream, after an event that orders it
 * behind the work already enqueued on the caller's current stream (the kernels that produced the
 * data); it records a `done` event there. wait() makes the then-current stream wait for `done`
 * (no host synchronisation, PyTorch's Work.wait() on NCCL), so a DataParallel bucket's all-reduce
 * overlaps the rest of backward. test() queries the event. A buffer stays alive until the work
 * is finished (the front end holds it), and the caching allocator reuses a freed block only for
 * later work of the stream that freed it, which then runs after `done`.
 *
 * Groups: between group_start and group_end the operations are only queued by NCCL
 * (ncclGroupStart/End) and launched at the end, so their `done` events are recorded at
 * group_end, not when issued.
 *
 * Types: NCCL reduces f16 and bf16 itself (native_half) and averages (ncclAvg, native_avg);
 * bool travels as bytes, sum and max as "any" (ncclMax), min and prod as "all" (ncclMin), as on
 * MPI. Tags of send/recv have no NCCL equivalent: between two ranks, messages match in issue
 * order. Every NCCL and CUDA call is checked, with ncclGetLastError's detail.
 *
 * The watchdog (vl_nccl_watch) reads the issue time and `done` event of every operation in flight
 * from a list under a mutex, and ncclCommGetAsyncError: the host's thread (bindings) asks it.
 *
 * Plain C over the CUDA runtime and NCCL host APIs (no kernel of ours): it sits with the other
 * communicator backends, not in kernels/cuda, and compiles to nothing without CUDA. */
#ifdef VL_HAVE_CUDA
#define _POSIX_C_SOURCE 200809L
#include <assert.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/cuda.h"
#include "runtime/core/cuda_check.h"
#include "runtime/dist/internal.h"

static vl_status nccl_fail(ncclResult_t r, const char *what, const char *call, const char *file, int line) {
  const char *last = ncclGetLastError(NULL);
  return vl_fail(VL_ENCCL, "%s: %s failed: %s%s%s (%s:%d)", what, call, ncclGetErrorString(r),
                 last && *last ? ": " : "", last ? last : "", file, line);
}
#define NCCL_TRY(what, call)                                                           \
  do {                                                                                 \
    ncclResult_t nccl_rc_ = (call);                                                    \
    if (nccl_rc_ != ncclSuccess) return nccl_fail(nccl_rc_, what, #call, __FILE__, __LINE__); \
  } while (0)

/* Runs `call` (a vl_status expression) with `dev` as the current device and returns its status,
 * the previous device restored on every path: C's scoped device guard. */
#define ON_DEVICE(dev, call)                           \
  do {                                                 \
    int on_prev_;                                      \
    VL_TRY(vl_cuda_device_enter((dev), &on_prev_));    \
    vl_status on_s_ = (call);                          \
    vl_cuda_device_leave(on_prev_);                    \
    return on_s_;                                      \
  } while (0)

#define VL_NCCL_MAX_GROUP 256 /* operations of one group whose done events wait for group_end */

typedef struct nccl_req nccl_req;

typedef struct vl_nccl {
  ncclComm_t comm;
  int device, rank, size;
  cudaStream_t stream; /* the communicator's stream */
  cudaEvent_t ready;   /* recorded on the caller's stream, waited on by `stream` */
  int group_depth;
  nccl_req *grouped[VL_NCCL_MAX_GROUP];
  int ngrouped;
  pthread_mutex_t lock; /* the in-flight list, read by the watchdog thread */
  nccl_req *inflight;
  bool aborted;
  bool reported; /* the watchdog reported this communicator (once) */
} vl_nccl;

struct nccl_req {
  vl_nccl *n;
  cudaEvent_t done;
  bool recorded; /* `done` was recorded (at issue, or at group_end) */
  const char *op;
  double t_issue;
  nccl_req *prev, *next; /* the in-flight list */
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static vl_nccl *nc_of(vl_comm *c) { return (vl_nccl *)c->impl[VL_CUDA]; }

static vl_status nccl_type(const char *what, vl_dtype dt, ncclDataType_t *out) {
  switch (dt) {
    case VL_F64: *out = ncclFloat64; return VL_OK;
    case VL_F32: *out = ncclFloat32; return VL_OK;
    case VL_F16: *out = ncclFloat16; return VL_OK;
    case VL_BF16: *out = ncclBfloat16; return VL_OK;
    case VL_I64: *out = ncclInt64; return VL_OK;
    case VL_I32: *out = ncclInt32; return VL_OK;
    case VL_U8:
    case VL_BOOL: *out = ncclUint8; return VL_OK;
    default: return vl_fail(VL_EDTYPE, "%s: dtype %s has no NCCL type", what, vl_dtype_name(dt));
  }
}

static ncclRedOp_t nccl_op(vl_dist_op op, vl_dtype dt) {
  if (dt == VL_BOOL) return op == VL_DIST_MIN || op == VL_DIST_PROD ? ncclMin : ncclMax;
  switch (op) {
    case VL_DIST_AVG: return ncclAvg;
    case VL_DIST_MAX: return ncclMax;
    case VL_DIST_MIN: return ncclMin;
    case VL_DIST_PROD: return ncclProd;
    default: return ncclSum;
  }
}

/* Before an operation on t with data of dtype dt: its NCCL type; t is on the communicator's
 * device; the communicator's stream waits for the caller's current stream; the request exists
 * and is in the in-flight list. */
typedef struct nccl_call {
  vl_nccl *n;
  nccl_req *r;
  ncclDataType_t ty;
} nccl_call;

/* begin's part on the communicator's device. */
static vl_status enqueue(vl_nccl *n, vl_dist_work *w, nccl_call *k) {
  void *cur = NULL;
  VL_TRY(vl_cuda_current_stream(n->device, &cur));
  VL_CUDA_CHECK(cudaEventRecord(n->ready, (cudaStream_t)cur));
  VL_CUDA_CHECK(cudaStreamWaitEvent(n->stream, n->ready, 0));
  nccl_req *r = (nccl_req *)calloc(1, sizeof *r);
  if (!r) return vl_fail(VL_EOOM, "%s: out of host memory", w->op);
  cudaError_t ce = cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming);
  if (ce != cudaSuccess) {
    free(r);
    return vl_fail(VL_ECUDA, "%s: cudaEventCreateWithFlags failed: %s", w->op, cudaGetErrorString(ce));
  }
  r->n = n;
  r->op = w->op;
  r->t_issue = now_s();
  pthread_mutex_lock(&n->lock);
  r->next = n->inflight;
  if (n->inflight) n->inflight->prev = r;
  n->inflight = r;
  pthread_mutex_unlock(&n->lock);
  w->impl = r;
  k->n = n;
  k->r = r;
  return VL_OK;
}

static vl_status begin(vl_comm *c, vl_tensor *t, vl_dtype dt, vl_dist_work *w, nccl_call *k) {
  VL_TRY(nccl_type(w->op, dt, &k->ty));
  vl_nccl *n = nc_of(c);
  if (n->aborted) return vl_fail(VL_ENCCL, "%s: the NCCL communicator was aborted", w->op);
  if (t && t->storage->device.index != n->device) {
    char d[256];
    return vl_fail(VL_EDEVICE, "%s: %s is not on this rank's device cuda:%d (its NCCL communicator's; v100.device() "
                   "names it)", w->op, vl_tensor_desc(t, d, sizeof d), n->device);
  }
  ON_DEVICE(n->device, enqueue(n, w, k));
}

static vl_status record_done(nccl_req *r) {
  VL_CUDA_CHECK(cudaEventRecord(r->done, r->n->stream));
  r->recorded = true;
  return VL_OK;
}

/* After the NCCL call: `done` is recorded now, or at group_end inside a group. */
static vl_status end(const nccl_call *k, vl_dist_work *w) {
  vl_nccl *n = k->n;
  nccl_req *r = k->r;
  if (n->group_depth > 0) {
    if (n->ngrouped == VL_NCCL_MAX_GROUP)
      return vl_fail(VL_EINVAL, "%s: more than %d operations in one group", w->op, VL_NCCL_MAX_GROUP);
    n->grouped[n->ngrouped++] = r;
    return VL_OK;
  }
  ON_DEVICE(n->device, record_done(r));
}

static vl_status n_all_reduce(vl_comm *c, vl_tensor *buf, vl_dist_op op, vl_dist_work *w) {
  nccl_call k;
  VL_TRY(begin(c, buf, buf->dtype, w, &k));
  void *p = vl_tensor_data(buf);
  NCCL_TRY(w->op, ncclAllReduce(p, p, (size_t)vl_tensor_numel(buf), k.ty, nccl_op(op, buf->dtype), k.n->comm, k.n->stream));
  return end(&k, w);
}

static vl_status n_broadcast(vl_comm *c, vl_tensor *buf, int root, vl_dist_work *w) {
  nccl_call k;
  VL_TRY(begin(c, buf, buf->dtype, w, &k));
  void *p = vl_tensor_data(buf);
  NCCL_TRY(w->op, ncclBroadcast(p, p, (size_t)vl_tensor_numel(buf), k.ty, root, k.n->comm, k.n->stream));
  return end(&k, w);
}

static vl_status n_reduce(vl_comm *c, vl_tensor *buf, int root, vl_dist_op op, vl_dist_work *w) {
  nccl_call k;
  VL_TRY(begin(c, buf, buf->dtype, w, &k));
  void *p = vl_tensor_data(buf);
  /* recvbuff is significant at the root only: in place there, and never written elsewhere. */
  NCCL_TRY(w->op, ncclReduce(p, p, (size_t)vl_tensor_numel(buf), k.ty, nccl_op(op, buf->dtype), root, k.n->comm, k.n->stream));
  return end(&k, w);
}

static vl_status n_all_gather(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_work *w) {
  nccl_call k;
  VL_TRY(begin(c, out, in->dtype, w, &k));
  NCCL_TRY(w->op, ncclAllGather(vl_tensor_data(in), vl_tensor_data(out), (size_t)vl_tensor_numel(in), k.ty, k.n->comm,
                                k.n->stream));
  return end(&k, w);
}

static vl_status n_reduce_scatter(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_op op, vl_dist_work *w) {
  nccl_call k;
  VL_TRY(begin(c, out, in->dtype, w, &k));
  NCCL_TRY(w->op, ncclReduceScatter(vl_tensor_data(in), vl_tensor_data(out), (size_t)vl_tensor_numel(out), k.ty,
                                    nccl_op(op, in->dtype), k.n->comm, k.n->stream));
  return end(&k, w);
}

static vl_status n_send(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w) {
  (void)tag;
  nccl_call k;
  VL_TRY(begin(c, buf, buf->dtype, w, &k));
  NCCL_TRY(w->op, ncclSend(vl_tensor_data(buf), (size_t)vl_tensor_numel(buf), k.ty, peer, k.n->comm, k.n->stream));
  return end(&k, w);
}

static vl_status n_recv(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w) {
  (void)tag;
  nccl_call k;
  VL_TRY(begin(c, buf, buf->dtype, w, &k));
  NCCL_TRY(w->op, ncclRecv(vl_tensor_data(buf), (size_t)vl_tensor_numel(buf), k.ty, peer, k.n->comm, k.n->stream));
  return end(&k, w);
}

/* The front end runs barriers on the CPU backend; this one is only reached through that slot. */
static vl_status n_barrier(vl_comm *c, vl_dist_work *w) {
  (void)c;
  return vl_fail(VL_EINTERNAL, "%s: the NCCL backend has no barrier (the front end uses MPI's)", w->op);
}

/* V100LUA_DIST_CHECK through the CPU backend (MPI), which every NCCL world has. */
static vl_status n_check(vl_comm *c, const int64_t *sig, int64_t *lo, int64_t *hi) {
  const vl_comm_backend *cpu = c->backend[VL_CPU];
  if (!cpu || !cpu->check) {
    for (int i = 0; i < VL_DIST_SIG; i++) lo[i] = hi[i] = sig[i];
    return VL_OK;
  }
  return cpu->check(c, sig, lo, hi);
}

static vl_status wait_done(nccl_req *r) {
  void *cur = NULL;
  VL_TRY(vl_cuda_current_stream(r->n->device, &cur));
  VL_CUDA_CHECK(cudaStreamWaitEvent((cudaStream_t)cur, r->done, 0));
  return VL_OK;
}

static vl_status n_wait(vl_dist_work *w) {
  nccl_req *r = (nccl_req *)w->impl;
  if (!r) return VL_OK;
  if (!r->recorded) return vl_fail(VL_EINVAL, "%s: waited on inside its group (wait after the group ends)", w->op);
  ON_DEVICE(r->n->device, wait_done(r));
}

static vl_status n_test(vl_dist_work *w, bool *done) {
  nccl_req *r = (nccl_req *)w->impl;
  *done = true;
  if (!r) return VL_OK;
  if (!r->recorded) return *done = false, VL_OK;
  int prev;
  VL_TRY(vl_cuda_device_enter(r->n->device, &prev));
  cudaError_t e = cudaEventQuery(r->done);
  vl_cuda_device_leave(prev);
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError(); /* not an error: clear it */
    *done = false;
    return VL_OK;
  }
  if (e != cudaSuccess) return vl_fail(VL_ECUDA, "%s: cudaEventQuery failed: %s", w->op, cudaGetErrorString(e));
  /* test() completes the work, and the caller may then read the result on any stream */
  return n_wait(w);
}

static void n_release(vl_dist_work *w) {
  nccl_req *r = (nccl_req *)w->impl;
  if (!r) return;
  vl_nccl *n = r->n;
  pthread_mutex_lock(&n->lock);
  if (r->prev) r->prev->next = r->next;
  else n->inflight = r->next;
  if (r->next) r->next->prev = r->prev;
  pthread_mutex_unlock(&n->lock);
  for (int i = 0; i < n->ngrouped; i++)
    if (n->grouped[i] == r) n->grouped[i] = NULL;
  /* The event may still be pending on the device: destroying it then is allowed (CUDA releases
   * it when it completes). */
  int prev;
  if (vl_cuda_device_enter(n->device, &prev) == VL_OK) {
    (void)cudaEventDestroy(r->done);
    vl_cuda_device_leave(prev);
  } else {
    vl_errclear();
  }
  free(r);
  w->impl = NULL;
}

static vl_status n_group_start(vl_comm *c) {
  vl_nccl *n = nc_of(c);
  NCCL_TRY("group", ncclGroupStart());
  n->group_depth++;
  return VL_OK;
}

/* group_end's part on the device: every queued operation's `done`, recorded now. */
static vl_status record_group(vl_nccl *n) {
  vl_status s = VL_OK;
  for (int i = 0; i < n->ngrouped; i++) {
    nccl_req *r = n->grouped[i];
    if (!r) continue;
    cudaError_t e = cudaEventRecord(r->done, n->stream);
    if (e == cudaSuccess) r->recorded = true;
    else if (s == VL_OK) s = vl_fail(VL_ECUDA, "group: cudaEventRecord failed: %s", cudaGetErrorString(e));
  }
  n->ngrouped = 0;
  return s;
}

static vl_status n_group_end(vl_comm *c) {
  vl_nccl *n = nc_of(c);
  if (n->group_depth <= 0) return vl_fail(VL_EINTERNAL, "group: NCCL group_end without group_start");
  n->group_depth--;
  NCCL_TRY("group", ncclGroupEnd());
  if (n->group_depth > 0) return VL_OK;
  ON_DEVICE(n->device, record_group(n));
}

static const vl_comm_backend nccl_backend = {
    .name = "nccl",
    .native_half = true,
    .native_avg = true,
    .all_reduce = n_all_reduce,
    .broadcast = n_broadcast,
    .reduce = n_reduce,
    .all_gather = n_all_gather,
    .reduce_scatter = n_reduce_scatter,
    .send = n_send,
    .recv = n_recv,
    .barrier = n_barrier,
    .check = n_check,
    .wait = n_wait,
    .test = n_test,
    .release = n_release,
    .group_start = n_group_start,
    .group_end = n_group_end,
};

const vl_comm_backend *vl_dist_nccl_backend(void) { return &nccl_backend; }

vl_status vl_nccl_unique_id(uint8_t id[VL_NCCL_ID_BYTES]) {
  static_assert(sizeof(ncclUniqueId) == VL_NCCL_ID_BYTES, "ncclUniqueId size");
  ncclUniqueId u;
  NCCL_TRY("dist.init", ncclGetUniqueId(&u));
  memcpy(id, &u, sizeof u);
  return VL_OK;
}

static vl_status create_on(int rank, int size, const uint8_t id[VL_NCCL_ID_BYTES], int device, void **impl) {
  vl_nccl *n = (vl_nccl *)calloc(1, sizeof *n);
  if (!n) return vl_fail(VL_EOOM, "dist: out of host memory");
  n->device = device, n->rank = rank, n->size = size;
  pthread_mutex_init(&n->lock, NULL);
  cudaError_t ce = cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking);
  if (ce == cudaSuccess) ce = cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming);
  if (ce != cudaSuccess) {
    if (n->stream) (void)cudaStreamDestroy(n->stream);
    pthread_mutex_destroy(&n->lock);
    free(n);
    return vl_fail(VL_ECUDA, "dist: making the NCCL stream on cuda:%d failed: %s", device, cudaGetErrorString(ce));
  }
  ncclUniqueId u;
  memcpy(&u, id, sizeof u);
  ncclResult_t r = ncclCommInitRank(&n->comm, size, u, rank);
  if (r != ncclSuccess) {
    vl_status s = nccl_fail(r, "dist", "ncclCommInitRank", __FILE__, __LINE__);
    (void)cudaEventDestroy(n->ready);
    (void)cudaStreamDestroy(n->stream);
    pthread_mutex_destroy(&n->lock);
    free(n);
    return vl_fail_prefix(s, "the NCCL communicator of rank %d of %d on cuda:%d: ", rank, size, device);
  }
  *impl = n;
  return VL_OK;
}

vl_status vl_nccl_create(int rank, int size, const uint8_t id[VL_NCCL_ID_BYTES], int device, void **impl) {
  *impl = NULL;
  ON_DEVICE(device, create_on(rank, size, id, device, impl));
}

/* Finishes what is in flight (or aborts it), then frees the communicator. */
vl_status vl_nccl_destroy(void *impl, bool abort) {
  vl_nccl *n = (vl_nccl *)impl;
  if (!n) return VL_OK;
  vl_status s = VL_OK;
  int prev = -1;
  if (vl_cuda_device_enter(n->device, &prev) != VL_OK) vl_errclear();
  if (abort || n->aborted) {
    if (!n->aborted) (void)ncclCommAbort(n->comm);
  } else {
    cudaError_t ce = cudaStreamSynchronize(n->stream);
    if (ce != cudaSuccess) s = vl_fail(VL_ECUDA, "dist.finalize: the NCCL stream failed: %s", cudaGetErrorString(ce));
    ncclResult_t r = ncclCommDestroy(n->comm);
    if (r != ncclSuccess && s == VL_OK) s = nccl_fail(r, "dist.finalize", "ncclCommDestroy", __FILE__, __LINE__);
  }
  (void)cudaEventDestroy(n->ready);
  (void)cudaStreamDestroy(n->stream);
  pthread_mutex_destroy(&n->lock);
  free(n);
  vl_cuda_device_leave(prev);
  return s;
}

/* The watchdog's question, safe from another thread: is an operation older than timeout_s
 * unfinished, or did NCCL report an asynchronous error? Then msg says which and true is returned,
 * once. The communicator is not aborted here: ncclCommAbort frees device memory, which waits for
 * every kernel of the device, and the kernel that is stuck need not be NCCL's (measured on the
 * H200: behind a 6 s compute kernel the report came 6 s late). The caller ends the process, which
 * ends its kernels with it. */
bool vl_nccl_watch(void *impl, double timeout_s, char *msg, size_t msg_size) {
  vl_nccl *n = (vl_nccl *)impl;
  if (!n || n->aborted || n->reported) return false;
  ncclResult_t async = ncclSuccess;
  bool bad = false;
  if (ncclCommGetAsyncError(n->comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
    snprintf(msg, msg_size, "NCCL reported an asynchronous error: %s", ncclGetErrorString(async));
    bad = true;
  }
  if (!bad) {
    double t = now_s();
    pthread_mutex_lock(&n->lock);
    for (nccl_req *r = n->inflight; r; r = r->next) {
      if (!r->recorded || t - r->t_issue < timeout_s) continue;
      int dev = -1;
      (void)cudaGetDevice(&dev);
      if (dev != n->device) (void)cudaSetDevice(n->device);
      cudaError_t e = cudaEventQuery(r->done);
      if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();
        snprintf(msg, msg_size, "%s has not finished after %.0f s (V100LUA_NCCL_TIMEOUT=%.0f)", r->op,
                 t - r->t_issue, timeout_s);
        bad = true;
        break;
      }
    }
    pthread_mutex_unlock(&n->lock);
  }
  if (bad) n->reported = true;
  return bad;
}

#endif /* VL_HAVE_CUDA */
