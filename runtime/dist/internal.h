/* runtime/dist/internal.h: the backend interface behind runtime/dist/comm.h (comm.c is the front
 * end, mpi.c the MPI backend, local.c the world-size-1 one, nccl.c the NCCL one
 * filling the VL_CUDA slot).
 *
 * A backend receives contiguous buffers on its own device, of a dtype it declared it reduces
 * (reductions of f16/bf16 arrive as f32 unless native_half; VL_DIST_AVG arrives as VL_DIST_SUM
 * unless native_avg, and the front end divides). Each op starts the operation and records what
 * it needs in w->impl; wait() completes it; release() frees w->impl (also after a failure). */
#ifndef VL_DIST_INTERNAL_H
#define VL_DIST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/dist/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_comm_backend {
  const char *name;
  bool native_half, native_avg;
  vl_status (*all_reduce)(vl_comm *c, vl_tensor *buf, vl_dist_op op, vl_dist_work *w);
  vl_status (*broadcast)(vl_comm *c, vl_tensor *buf, int root, vl_dist_work *w);
  vl_status (*reduce)(vl_comm *c, vl_tensor *buf, int root, vl_dist_op op, vl_dist_work *w);
  vl_status (*all_gather)(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_work *w);
  vl_status (*reduce_scatter)(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_op op, vl_dist_work *w);
  vl_status (*send)(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w);
  vl_status (*recv)(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w);
  vl_status (*barrier)(vl_comm *c, vl_dist_work *w);
  /* V100LUA_DIST_CHECK=1: every rank's signature of the collective it is about to start
   * (sig[0..VL_DIST_SIG-1]) into lo[] and hi[], the minimum and maximum over the ranks, by a
   * blocking reduction. NULL: no check (world size 1). */
  vl_status (*check)(vl_comm *c, const int64_t *sig, int64_t *lo, int64_t *hi);
  vl_status (*wait)(vl_dist_work *w);
  vl_status (*test)(vl_dist_work *w, bool *done);
  void (*release)(vl_dist_work *w);
  /* Optional (NULL: nothing to do): the front end's outermost group_start / group_end, before
   * the group's operations are issued and before they are waited on (NCCL: ncclGroupStart/End). */
  vl_status (*group_start)(vl_comm *c);
  vl_status (*group_end)(vl_comm *c);
} vl_comm_backend;

#define VL_DIST_SIG 5 /* the collective, element count, dtype, reduction op, root */

/* sig[0]: which collective; vl_dist_kind_name names it ("all_reduce", ...; "?" out of range). */
enum { VL_SIG_ALL_REDUCE = 1, VL_SIG_BROADCAST, VL_SIG_REDUCE, VL_SIG_ALL_GATHER, VL_SIG_REDUCE_SCATTER, VL_SIG_BARRIER };
const char *vl_dist_kind_name(int64_t kind);
/* check.c: V100LUA_DIST_CHECK and V100LUA_DIST_TIMEOUT into c (at init); the collective's number
 * and the ranks' agreement on its signature (every collective, first). */
vl_status vl_dist_read_env(vl_comm *c);
vl_status vl_dist_agree(const char *op, vl_comm *c, const vl_comm_backend *be, int kind, vl_tensor *t, int dop, int root);

struct vl_comm {
  int rank, size;
  bool check;                                       /* CPU collectives' signatures compared (on unless V100LUA_DIST_CHECK=0) */
  bool check_cuda;                                  /* CUDA ones' too (V100LUA_DIST_CHECK=1: a host round trip each) */
  double timeout_s;                                 /* V100LUA_DIST_TIMEOUT: a CPU wait's limit (0: none) */
  int64_t coll_seq;                                 /* collectives this rank started (every rank counts alike) */
  int64_t seq_next;                                 /* the number new_work gives the collective's work (0: p2p) */
  bool broken;                                      /* a wait gave up (timeout, a rank left): every later op fails */
  bool failure_shared;                              /* the other ranks know of this failure and print their side */
  char broken_msg[512];
  const vl_comm_backend *backend[VL_NDEVICE_TYPES]; /* by the tensor's device; NULL: none yet */
  void *impl[VL_NDEVICE_TYPES];                     /* the backend's communicator (MPI_Comm *) */
  int group_depth;
  vl_dist_work *pending, *pending_tail;             /* a group's ops, in issue order */
  vl_dist_work *live;                               /* every work not yet completed */
};

struct vl_dist_work {
  vl_comm *comm;                 /* NULL once completed */
  const vl_comm_backend *backend;
  const char *op;
  bool done;
  void *impl;                    /* the backend's request */
  vl_tensor *dst;                /* the caller's tensor written at completion (retained), or NULL */
  vl_tensor *stage;              /* the buffer the backend wrote, copied into dst (retained), or NULL */
  vl_tensor *keep[2];            /* inputs kept alive while in flight */
  int divide;                    /* avg: the result is divided by this at completion (0: no) */
  int64_t expect;                /* recv: the element count the message must have (-1: none) */
  int peer;
  int64_t seq;                   /* the collective's number on this rank (c->coll_seq), 0 for send/recv */
  bool abandon;                  /* the backend gave up on it: MPI may still write the buffers, keep them */
  bool nvtx;                     /* an NVTX range is open from new_work to the end of launch */
  vl_dist_work *live_prev, *live_next, *pending_next;
};

/* The world size 1 backend (local.c) and the MPI one (mpi.c; NULL in a build without MPI). */
extern const vl_comm_backend vl_dist_local_backend;
const vl_comm_backend *vl_dist_mpi_backend(void);

/* mpi.c: MPI_Init_thread unless MPI is running; rank, size, local rank and size, the thread
 * level; duplicates MPI_COMM_WORLD into *impl. *owns: whether this call started MPI. */
vl_status vl_dist_mpi_start(int *rank, int *size, int *local_rank, int *local_size, int *thread_level,
                            void **impl, bool *owns);
vl_status vl_dist_mpi_stop(void *impl, bool owns);
/* A normal exit's handshake, before vl_dist_mpi_stop: tells every rank this one leaves (with its
 * collective count) and waits until every rank said the same; fails, naming the rank and its
 * collective, when a rank answers that it waits in a collective this one never joined. */
vl_status vl_dist_mpi_leave(vl_comm *c);
bool vl_dist_mpi_finalized(void);
void vl_dist_mpi_abort(int code);

/* nccl.c (builds with CUDA): the backend; the unique id rank 0 makes and MPI
 * broadcasts; the communicator of (rank, size) on `device`; its end (abort: without waiting);
 * the watchdog's check (true: an operation is overdue or NCCL failed asynchronously; msg says
 * which, and the communicator is aborted). */
#define VL_NCCL_ID_BYTES 128
#ifdef VL_HAVE_CUDA
const vl_comm_backend *vl_dist_nccl_backend(void);
vl_status vl_nccl_unique_id(uint8_t id[VL_NCCL_ID_BYTES]);
vl_status vl_nccl_create(int rank, int size, const uint8_t id[VL_NCCL_ID_BYTES], int device, void **impl);
vl_status vl_nccl_destroy(void *impl, bool abort);
bool vl_nccl_watch(void *impl, double timeout_s, char *msg, size_t msg_size);
#endif

#ifdef __cplusplus
}
#endif
#endif
