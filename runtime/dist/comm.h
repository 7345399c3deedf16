/* runtime/dist/comm.h: the distributed runtime: bootstrap (one process per rank, launched by
 * mpirun or srun, or alone) and collectives on tensors.
 *
 * Bootstrap: vl_dist_init starts MPI when a launcher's environment is present (Open MPI's
 * OMPI_COMM_WORLD_*, PMI_RANK/PMI_SIZE, Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID, torchrun's
 * RANK/WORLD_SIZE/LOCAL_RANK) and cross-checks what MPI says against it. Without a launcher (or
 * built without MPI) the process is world size 1 and every collective is a local no-op or copy,
 * so a script runs unchanged.
 *
 * Communicator: a vl_comm holds one backend per device type (a table of ops, ggml-style); a
 * collective on a tensor runs on the backend of the tensor's device. The CPU backend is MPI (or
 * the local one at world size 1); the CUDA slot is empty in this phase (VL_EUNSUPPORTED) and is
 * where NCCL goes. The front end (comm.c) validates once, stages what the backend cannot take
 * as it is (non-contiguous tensors; f16/bf16 reductions, done in f32; avg = sum / size where the
 * backend has no average), and hands the backend contiguous buffers.
 *
 * With V100LUA_DIST_CHECK=1 in the environment (read by vl_dist_init), the ranks compare each
 * collective's signature (which collective, element count, dtype, op, root) before starting it,
 * and a disagreement fails on every rank alike instead of hanging.
 *
 * Ranks are 0-based, as in MPI (rank 0 is the main rank). Every collective takes `c` (NULL = the
 * world) and `work`: NULL runs it to completion; otherwise *work receives a handle that
 * vl_dist_wait completes (the tensors stay referenced by it until then, and are written only
 * when it completes). Inside a group (vl_dist_group_start/end), an op called with work == NULL is
 * started and completed by vl_dist_group_end; the MPI backend starts the ops in call order, so a
 * send and its matching recv may be issued in either order on the two ranks. */
#ifndef VL_DIST_COMM_H
#define VL_DIST_COMM_H

#include <stdbool.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vl_dist_op { VL_DIST_SUM = 0, VL_DIST_AVG, VL_DIST_MAX, VL_DIST_MIN, VL_DIST_PROD, VL_DIST_NOPS } vl_dist_op;

/* "sum", "avg" (also "mean"), "max", "min", "prod"; VL_EINVAL naming the string otherwise. */
vl_status vl_dist_op_parse(const char *op_name, const char *name, vl_dist_op *out);
const char *vl_dist_op_name(vl_dist_op op);

typedef struct vl_comm vl_comm;           /* a communicator (the world in this phase) */
typedef struct vl_dist_work vl_dist_work; /* an operation in flight */

typedef struct vl_dist_info {
  bool initialized;
  int rank, size, local_rank, local_size;
  const char *backend;  /* "mpi" or "local" (world size 1 without MPI): the CPU tensors' */
  const char *cuda_backend; /* "nccl" once made, "local" at world size 1 without MPI, else "none" */
  int device;           /* this rank's CUDA device, -1 without one */
  const char *launcher; /* "Open MPI", "PMI", "Slurm", "torchrun" or "none" */
  int thread_level;     /* MPI's `provided` (MPI_THREAD_*), -1 without MPI */
  char host[64];
} vl_dist_info;

/* Idempotent. Fails (VL_EMPI / VL_EINVAL / VL_EUNSUPPORTED) with a message naming both values when
 * MPI and the launcher's environment disagree, when the environment asks for several ranks in a
 * build without MPI, when MPI gives less than MPI_THREAD_FUNNELED, or after vl_dist_finalize
 * under MPI (MPI cannot start twice in a process). */
vl_status vl_dist_init(void);
bool vl_dist_initialized(void);
/* The process's view: after init, MPI's; before it, the launcher's environment (rank 0, size 1,
 * local rank 0 without one), so library code can ask who prints before a script calls init. */
void vl_dist_get_info(vl_dist_info *out);
/* Completes every handle still in flight, frees the world and calls MPI_Finalize (when this
 * process started MPI). A no-op when not initialised. */
vl_status vl_dist_finalize(void);
/* Aborts the NCCL communicator (kernels waiting for another rank return), then
 * MPI_Abort(MPI_COMM_WORLD, code) when MPI is running (every rank of the job ends); returns
 * otherwise, so the caller exits on its own. */
void vl_dist_abort(int code);
/* For the watchdog thread: MPI_Abort(MPI_COMM_WORLD, code) when MPI is running, else _exit(code),
 * with no teardown first. The main thread may be inside the runtime or waiting on a stuck kernel,
 * and freeing anything on the device would wait for that kernel. Does not return. */
void vl_dist_kill(int code);
/* The watchdog's check, callable from another thread: true when a CUDA collective has been in
 * flight longer than timeout_s or NCCL reported an asynchronous error; msg then names the
 * operation and the communicator is aborted (the caller reports and ends the job). False
 * without an NCCL communicator. */
bool vl_dist_watch(double timeout_s, char *msg, size_t msg_size);
/* The device a rank's CUDA collectives run on (its NCCL communicator's): the local rank modulo
 * the visible devices; -1 without CUDA devices. dist.init makes it the 'cuda' default. */
int vl_dist_device(void);

/* Collectives. CPU tensors go through MPI, CUDA tensors through NCCL on this rank's device (the
 * communicator is made at the first CUDA collective, by every rank; world size 1 without a
 * launcher needs none); any dtype; any strides (non-contiguous ones are staged). Shapes that a rank can check alone are checked;
 * what needs the other ranks (every rank passing the same count and dtype) is the caller's
 * contract, as in MPI. */
vl_status vl_dist_all_reduce(vl_comm *c, vl_tensor *t, vl_dist_op op, vl_dist_work **work);
vl_status vl_dist_broadcast(vl_comm *c, vl_tensor *t, int root, vl_dist_work **work);
/* The result lands on root; the other ranks' tensors are left as they were. */
vl_status vl_dist_reduce(vl_comm *c, vl_tensor *t, int root, vl_dist_op op, vl_dist_work **work);
/* out: in's shape with dim 0 size times larger (concatenated), or a new leading dim of `size`
 * (stacked); rank r's `in` lands at block r. */
vl_status vl_dist_all_gather(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_work **work);
/* in: out's shape with dim 0 size times larger (or a leading dim of `size`); out receives block
 * `rank` of the reduction. */
vl_status vl_dist_reduce_scatter(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_op op, vl_dist_work **work);
/* Point to point; peer is another rank, tag in 0..32767. recv checks that the message holds
 * exactly t's number of elements. */
vl_status vl_dist_send(vl_comm *c, vl_tensor *t, int peer, int tag, vl_dist_work **work);
vl_status vl_dist_recv(vl_comm *c, vl_tensor *t, int peer, int tag, vl_dist_work **work);
vl_status vl_dist_barrier(vl_comm *c, vl_dist_work **work);

vl_status vl_dist_group_start(vl_comm *c);
/* Completes the ops started (with work == NULL) since the outermost group_start, in order; the
 * first failure is returned after all of them were waited for. */
vl_status vl_dist_group_end(vl_comm *c);

/* Completes w (copies staged results into the caller's tensors); a second wait returns VL_OK. */
vl_status vl_dist_wait(vl_dist_work *w);
/* Whether w has completed (completing it when the backend says so). */
vl_status vl_dist_test(vl_dist_work *w, bool *done);
/* Completes w when still in flight, then frees it. NULL is fine. */
void vl_dist_work_free(vl_dist_work *w);
const char *vl_dist_work_op(const vl_dist_work *w); /* "all_reduce", ... */

#ifdef __cplusplus
}
#endif
#endif
