/* runtime/dist/comm.c: the front end of runtime/dist/comm.h: bootstrap (launcher environment,
 * MPI or the local world, this rank's device, the NCCL communicator at the first CUDA collective),
 * validation, staging, handles and groups. The backends are behind runtime/dist/internal.h. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/core/context.h"
#include "runtime/core/cuda.h"
#include "runtime/dist/internal.h"
#include "runtime/ops/ops_internal.h"
#include "runtime/trace/nvtx.h"

typedef struct vl_dist {
  vl_comm world;
  bool owns_mpi;
  int local_rank, local_size, thread_level;
  int device; /* this rank's CUDA device, -1 without one */
  const char *launcher;
  char host[64];
} vl_dist;

static vl_dist *dist_state(void) { return vl_ctx()->dist; }

/* The NCCL communicator is made, freed and aborted by the main thread and read by the watchdog
 * thread (vl_dist_watch): this lock orders them. */
static pthread_mutex_t g_cuda_lock = PTHREAD_MUTEX_INITIALIZER;

/* Local rank mod the visible devices: oversubscribed ranks share GPUs round-robin (NCCL then
 * refuses two ranks on one GPU at the first CUDA collective). */
static int device_of_local_rank(int local_rank) {
  int n = vl_cuda_device_count();
  return n > 0 ? (local_rank < 0 ? 0 : local_rank) % n : -1;
}

int vl_dist_device(void) {
  vl_dist *d = dist_state();
  if (d) return d->device;
  vl_dist_info di;
  vl_dist_get_info(&di);
  return di.device;
}

/* ---- ops ---- */

static const char *const op_names[] = {"sum", "avg", "max", "min", "prod"};
VL_TABLE_SIZE(op_names, VL_DIST_NOPS);

const char *vl_dist_op_name(vl_dist_op op) { return (unsigned)op < VL_DIST_NOPS ? op_names[op] : "?"; }

vl_status vl_dist_op_parse(const char *op_name, const char *name, vl_dist_op *out) {
  for (int i = 0; i < VL_DIST_NOPS; i++)
    if (strcmp(name, op_names[i]) == 0) return *out = (vl_dist_op)i, VL_OK;
  if (strcmp(name, "mean") == 0) return *out = VL_DIST_AVG, VL_OK;
  return vl_fail(VL_EINVAL, "%s: unknown op '%s' (sum, avg, max, min or prod)", op_name, name);
}

/* ---- the launcher's environment ---- */

typedef struct launcher {
  const char *name, *rank, *size, *local; /* variables; size and local may be absent */
} launcher;

/* In order of precedence: mpirun inside a Slurm allocation also leaves SLURM_PROCID of the batch
 * step in every rank's environment, so Open MPI's own variables win over Slurm's. */
static const launcher launchers[] = {
    {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
};

static const char *env_of(const char *var) {
  const char *v = getenv(var);
  return v && *v ? v : NULL;
}

static const launcher *find_launcher(void) {
  for (size_t i = 0; i < VL_COUNTOF(launchers); i++) {
    const launcher *l = &launchers[i];
    /* RANK alone is too common a name: torchrun sets WORLD_SIZE with it. */
    if (env_of(l->rank) && (l != &launchers[3] || env_of(l->size))) return l;
  }
  return NULL;
}

/* The integer value of var: 1 when set, 0 when unset, VL_EINVAL for anything else. */
static vl_status env_int(const char *var, int *out, int *set) {
  const char *v = env_of(var);
  *set = 0;
  if (!v) return VL_OK;
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno || *end || x < 0 || x > 1 << 30)
    return vl_fail(VL_EINVAL, "dist.init: %s='%s' is not a rank or size", var, v);
  *out = (int)x;
  *set = 1;
  return VL_OK;
}

static vl_status check_env(const launcher *l, const char *var, const char *what, int mpi_value) {
  int v, set;
  VL_TRY(env_int(var, &v, &set));
  if (set && v != mpi_value)
    return vl_fail(VL_EINVAL, "dist.init: the launcher (%s) says %s=%d but MPI says %s %d; %s", l->name, var, v, what,
                   mpi_value, strcmp(l->name, "torchrun") == 0 ? "torchrun starts no MPI job: launch with mpirun or srun"
                   : "was the job started by another MPI's launcher than the one v100lua links?");
  return VL_OK;
}

static void hostname(char *buf, size_t n) {
  if (gethostname(buf, n) != 0) snprintf(buf, n, "?");
  buf[n - 1] = '\0';
}

void vl_dist_get_info(vl_dist_info *out) {
  memset(out, 0, sizeof *out);
  vl_dist *d = dist_state();
  if (d) {
    out->initialized = true;
    out->rank = d->world.rank, out->size = d->world.size;
    out->local_rank = d->local_rank, out->local_size = d->local_size;
    out->backend = d->world.backend[VL_CPU]->name;
    out->cuda_backend = d->world.backend[VL_CUDA] ? d->world.backend[VL_CUDA]->name : "none";
    out->device = d->device;
    out->launcher = d->launcher;
    out->thread_level = d->thread_level;
    snprintf(out->host, sizeof out->host, "%s", d->host);
    return;
  }
  const launcher *l = find_launcher();
  out->size = out->local_size = 1;
  out->backend = out->cuda_backend = "none";
  out->device = -1;
  out->launcher = l ? l->name : "none";
  out->thread_level = -1;
  hostname(out->host, sizeof out->host);
  if (!l) return;
  int v, set;
  if (env_int(l->rank, &v, &set) == VL_OK && set) out->rank = v;
  if (l->size && env_int(l->size, &v, &set) == VL_OK && set) out->size = v;
  if (l->local && env_int(l->local, &v, &set) == VL_OK && set) out->local_rank = v;
  vl_errclear();
  out->device = device_of_local_rank(out->local_rank);
}

bool vl_dist_initialized(void) { return dist_state() != NULL; }

vl_status vl_dist_init(void) {
  if (dist_state()) return VL_OK;
  if (vl_dist_mpi_finalized())
    return vl_fail(VL_EMPI, "dist.init: MPI was finalized in this process and cannot start again");
  const launcher *l = find_launcher();
  int env_size = 1, set = 0;
  if (l) VL_TRY(env_int(l->size, &env_size, &set));
  const vl_comm_backend *mpi = vl_dist_mpi_backend();
  if (l && !mpi && env_size > 1)
    return vl_fail(VL_EUNSUPPORTED, "dist.init: the launcher (%s) starts %d ranks (%s=%d) but v100lua was built without "
                   "MPI (install libopenmpi-dev and rebuild)", l->name, env_size, l->size, env_size);
  vl_dist *d = (vl_dist *)calloc(1, sizeof *d);
  if (!d) return vl_fail(VL_EOOM, "dist.init: out of host memory");
  d->launcher = l ? l->name : "none";
  d->thread_level = -1;
  hostname(d->host, sizeof d->host);
  d->world.rank = 0, d->world.size = 1, d->local_size = 1;
  if (l && mpi) {
    void *impl = NULL;
    bool owns = false;
    vl_status s = vl_dist_mpi_start(&d->world.rank, &d->world.size, &d->local_rank, &d->local_size, &d->thread_level,
                                     &impl, &owns);
    if (s == VL_OK) s = check_env(l, l->rank, "rank", d->world.rank);
    if (s == VL_OK) s = check_env(l, l->size, "world size", d->world.size);
    if (s == VL_OK) s = check_env(l, l->local, "local rank", d->local_rank);
    if (s != VL_OK) {
      if (impl) vl_dist_mpi_stop(impl, owns);
      free(d);
      return s;
    }
    d->owns_mpi = owns;
    if (s == VL_OK) s = vl_dist_read_env(&d->world);
    if (s != VL_OK) {
      vl_dist_mpi_stop(impl, owns);
      free(d);
      return s;
    }
    d->world.backend[VL_CPU] = mpi;
    d->world.impl[VL_CPU] = impl;
  } else {
    d->world.backend[VL_CPU] = &vl_dist_local_backend;
    /* one rank: every CUDA collective is the identity too, no communicator needed */
    d->world.backend[VL_CUDA] = &vl_dist_local_backend;
  }
  /* This rank's device becomes what 'cuda' means, before the script allocates anything there. */
  d->device = device_of_local_rank(d->local_rank);
  if (d->device >= 0) {
    vl_status s = vl_set_cuda_device(d->device);
    if (s != VL_OK) {
      if (d->world.impl[VL_CPU]) vl_dist_mpi_stop(d->world.impl[VL_CPU], d->owns_mpi);
      free(d);
      return s;
    }
  }
  vl_ctx()->dist = d;
  return VL_OK;
}

/* The CUDA slot at the first CUDA collective (every rank gets here at the same collective): rank
 * 0's ncclUniqueId goes to everyone over the CPU backend, with a flag byte so that a failure on
 * rank 0 fails the others instead of leaving them in ncclCommInitRank. */
static vl_status ensure_cuda(const char *op, vl_comm *c) {
#ifdef VL_HAVE_CUDA
  vl_dist *d = dist_state();
  if (!d || c != &d->world) return vl_fail(VL_EINTERNAL, "%s: no world communicator", op);
  if (d->device < 0) return vl_fail(VL_EDEVICE, "%s: a CUDA tensor but no visible CUDA device for this rank", op);
  vl_tensor *t = NULL;
  int64_t n = VL_NCCL_ID_BYTES + 1;
  VL_TRY(vl_tensor_empty(1, &n, VL_U8, vl_cpu_device(), &t));
  uint8_t *b = (uint8_t *)vl_tensor_data(t);
  memset(b, 0, (size_t)n);
  char why[256] = "";
  if (c->rank == 0) {
    if (vl_nccl_unique_id(b) == VL_OK) b[VL_NCCL_ID_BYTES] = 1;
    else snprintf(why, sizeof why, "%s", vl_errmsg());
  }
  /* Completed now, also when the first CUDA collective is inside a group (a grouped broadcast
   * would only be queued until the group ends). */
  int depth = c->group_depth;
  c->group_depth = 0;
  vl_status s = vl_dist_broadcast(c, t, 0, NULL);
  c->group_depth = depth;
  uint8_t id[VL_NCCL_ID_BYTES];
  bool ok = s == VL_OK && b[VL_NCCL_ID_BYTES] == 1;
  memcpy(id, b, sizeof id);
  vl_tensor_release(t);
  if (s != VL_OK) return vl_fail_prefix(s, "%s: sending the NCCL id: ", op);
  if (!ok)
    return vl_fail(VL_ENCCL, "%s: rank 0 could not make the NCCL id%s%s", op, *why ? ": " : "", why);
  void *impl = NULL;
  VL_TRY(vl_nccl_create(c->rank, c->size, id, d->device, &impl));
  pthread_mutex_lock(&g_cuda_lock);
  c->impl[VL_CUDA] = impl;
  c->backend[VL_CUDA] = vl_dist_nccl_backend();
  pthread_mutex_unlock(&g_cuda_lock);
  /* made inside a group: it joins the group */
  for (int i = 0; i < c->group_depth; i++) VL_TRY(c->backend[VL_CUDA]->group_start(c));
  return VL_OK;
#else
  (void)c;
  return vl_fail(VL_EUNSUPPORTED, "%s: v100lua was built without CUDA", op);
#endif
}

/* Frees (or aborts) the NCCL communicator, if there is one. */
static vl_status drop_cuda(vl_comm *c, bool abort) {
  vl_status s = VL_OK;
#ifdef VL_HAVE_CUDA
  pthread_mutex_lock(&g_cuda_lock);
  void *impl = c->impl[VL_CUDA];
  bool nccl = c->backend[VL_CUDA] == vl_dist_nccl_backend();
  c->impl[VL_CUDA] = NULL;
  c->backend[VL_CUDA] = NULL;
  pthread_mutex_unlock(&g_cuda_lock);
  if (nccl && impl) s = vl_nccl_destroy(impl, abort);
#else
  (void)c;
  (void)abort;
#endif
  return s;
}

bool vl_dist_watch(double timeout_s, char *msg, size_t msg_size) {
  bool bad = false;
#ifdef VL_HAVE_CUDA
  pthread_mutex_lock(&g_cuda_lock);
  vl_dist *d = dist_state();
  if (d && d->world.impl[VL_CUDA] && d->world.backend[VL_CUDA] == vl_dist_nccl_backend())
    bad = vl_nccl_watch(d->world.impl[VL_CUDA], timeout_s, msg, msg_size);
  pthread_mutex_unlock(&g_cuda_lock);
#else
  (void)timeout_s;
  (void)msg;
  (void)msg_size;
#endif
  return bad;
}

/* ---- handles ---- */

static void unlink_live(vl_dist_work *w) {
  vl_comm *c = w->comm;
  if (!c) return;
  if (w->live_prev) w->live_prev->live_next = w->live_next;
  else c->live = w->live_next;
  if (w->live_next) w->live_next->live_prev = w->live_prev;
  w->live_prev = w->live_next = NULL;
}

static void drop_tensors(vl_dist_work *w) {
  vl_tensor_release(w->dst);
  vl_tensor_release(w->stage);
  vl_tensor_release(w->keep[0]);
  vl_tensor_release(w->keep[1]);
  w->dst = w->stage = w->keep[0] = w->keep[1] = NULL;
}

/* After the backend completed: the average's division, the staged result into the caller's
 * tensor (converting f32 back to f16/bf16, or into its strides), the version bump. */
static vl_status finish(vl_dist_work *w, vl_status s) {
  if (s == VL_OK && w->dst) {
    vl_tensor *res = w->stage ? w->stage : w->dst;
    if (w->divide > 1) s = vl_binary_scalar_(VL_BIN_DIV, res, (double)w->divide);
    if (s == VL_OK && w->stage) s = vl_copy_(w->dst, w->stage);
    else if (s == VL_OK && w->divide <= 1) w->dst->storage->version++;
    if (s != VL_OK) s = vl_fail_prefix(s, "%s: ", w->op);
  }
  if (w->backend && w->backend->release) w->backend->release(w);
  unlink_live(w);
  if (!w->abandon) drop_tensors(w); /* an abandoned op's buffers may still be written by MPI: kept */
  w->comm = NULL;
  w->done = true;
  return s;
}

vl_status vl_dist_wait(vl_dist_work *w) {
  if (!w || w->done) return VL_OK;
  return finish(w, w->backend->wait(w));
}

vl_status vl_dist_test(vl_dist_work *w, bool *done) {
  if (!w || w->done) return *done = true, VL_OK;
  bool d = false;
  vl_status s = w->backend->test(w, &d);
  if (s != VL_OK || d) s = finish(w, s);
  *done = w->done;
  return s;
}

void vl_dist_work_free(vl_dist_work *w) {
  if (!w) return;
  if (!w->done) {
    if (vl_dist_wait(w) != VL_OK) vl_errclear(); /* a collected handle has nobody to report to */
  }
  free(w);
}

const char *vl_dist_work_op(const vl_dist_work *w) { return w ? w->op : ""; }

vl_status vl_dist_finalize(void) {
  vl_dist *d = dist_state();
  if (!d) return VL_OK;
  /* Handles still in flight are completed (MPI must not finalize under them); their Lua objects
   * stay valid as completed handles. */
  while (d->world.live && !d->world.broken) {
    vl_dist_work *w = d->world.live;
    if (vl_dist_wait(w) != VL_OK) vl_errclear();
  }
  /* A broken job cannot finalize (MPI_Finalize would wait for ranks that never come): the caller
   * reports this and aborts. The state stays, so a second call says the same. */
  if (d->world.broken) return vl_fail(VL_EMPI, "%s", d->world.broken_msg);
  for (vl_dist_work *w = d->world.pending, *next; w; w = next) {
    next = w->pending_next;
    free(w);
  }
  d->world.pending = d->world.pending_tail = NULL;
  /* Every rank says it leaves before MPI_Finalize, which would otherwise wait forever for a rank
   * still inside a collective that this one never joined (runtime/dist/mpi.c). */
  if (d->world.backend[VL_CPU] != &vl_dist_local_backend) VL_TRY(vl_dist_mpi_leave(&d->world));
  vl_status s = drop_cuda(&d->world, false);
  if (d->world.backend[VL_CPU] != &vl_dist_local_backend) {
    vl_status m = vl_dist_mpi_stop(d->world.impl[VL_CPU], d->owns_mpi);
    if (s == VL_OK) s = m;
  }
  pthread_mutex_lock(&g_cuda_lock);
  vl_ctx()->dist = NULL;
  pthread_mutex_unlock(&g_cuda_lock);
  free(d);
  return s;
}

void vl_dist_abort(int code) {
  vl_dist *d = dist_state();
  /* When every rank learnt of the failure (a mismatch all saw, a rank that left and the ones
   * waiting for it), each prints its side; MPI_Abort kills the others at once, so give their
   * messages a moment to get out first. */
  if (d && d->world.failure_shared && d->world.size > 1) {
    struct timespec ts = {1, 0};
    nanosleep(&ts, NULL);
  }
  if (d && drop_cuda(&d->world, true) != VL_OK) vl_errclear();
  vl_dist_mpi_abort(code);
}

void vl_dist_kill(int code) {
  vl_dist_mpi_abort(code);
  _exit(code);
}

/* ---- validation and staging ---- */

static vl_status world_of(const char *op, vl_comm **c) {
  if (*c) return (*c)->broken ? vl_fail(VL_EMPI, "%s: an earlier collective failed: %s", op, (*c)->broken_msg) : VL_OK;
  vl_dist *d = dist_state();
  if (!d) return vl_fail(VL_EINVAL, "%s: dist.init() has not been called", op);
  *c = &d->world;
  if ((*c)->broken) return vl_fail(VL_EMPI, "%s: an earlier collective failed, the job cannot go on: %s", op, (*c)->broken_msg);
  return VL_OK;
}

static vl_status check_tensor(const char *op, const char *what, vl_comm *c, vl_tensor *t, const vl_comm_backend **be) {
  if (!t || !t->storage) return vl_fail(VL_EINVAL, "%s: %s is not a tensor", op, what);
  vl_device dev = t->storage->device;
  if (!c->backend[dev.type]) VL_TRY(ensure_cuda(op, c));
  const vl_comm_backend *b = c->backend[dev.type];
  if (*be && *be != b) return vl_fail(VL_EDEVICE, "%s: the tensors are on different devices", op);
  *be = b;
  return VL_OK;
}

static vl_status check_rank(const char *op, const char *what, vl_comm *c, int r) {
  if (r < 0 || r >= c->size)
    return vl_fail(VL_EINVAL, "%s: %s %d is not a rank (world size %d: ranks 0..%d)", op, what, r, c->size, c->size - 1);
  return VL_OK;
}

static vl_status check_op(const char *op, vl_dist_op rop, vl_dtype dt) {
  if ((unsigned)rop >= VL_DIST_NOPS) return vl_fail(VL_EINVAL, "%s: unknown reduction op %d", op, (int)rop);
  if (rop == VL_DIST_AVG && !vl_dtype_is_float(dt))
    return vl_fail(VL_EDTYPE, "%s: op 'avg' needs a floating dtype (got %s; use 'sum')", op, vl_dtype_name(dt));
  return VL_OK;
}

static bool is_half(vl_dtype dt) { return dt == VL_F16 || dt == VL_BF16; }

/* The buffer the backend works on: t itself when contiguous (and, for a reduction of a half
 * dtype, when the backend reduces halves), else a contiguous copy (f32 for such a reduction),
 * filled from t when copy_in. */
static vl_status stage(vl_tensor *t, bool reduction, const vl_comm_backend *be, bool copy_in, bool force, vl_tensor **buf) {
  bool widen = reduction && is_half(t->dtype) && !be->native_half;
  if (!widen && !force && vl_tensor_is_contiguous(t)) {
    *buf = vl_tensor_retain(t);
    return VL_OK;
  }
  vl_tensor *b;
  VL_TRY(vl_tensor_empty(t->ndim, t->size, widen ? VL_F32 : t->dtype, t->storage->device, &b));
  if (copy_in) {
    vl_status s = vl_copy_(b, t);
    if (s != VL_OK) {
      vl_tensor_release(b);
      return s;
    }
  }
  *buf = b;
  return VL_OK;
}

static vl_status new_work(const char *op, vl_comm *c, const vl_comm_backend *be, vl_dist_work **out) {
  vl_dist_work *w = (vl_dist_work *)calloc(1, sizeof *w);
  if (!w) return vl_fail(VL_EOOM, "%s: out of host memory", op);
  w->op = op;
  w->comm = c;
  w->backend = be;
  w->expect = -1;
  w->seq = c->seq_next; /* set by vl_dist_agree for a collective; 0 for send/recv */
  c->seq_next = 0;
  /* NVTX (runtime/trace/nvtx.h): the collective's start, and its completion when blocking. */
  w->nvtx = vl_nvtx_enabled();
  if (w->nvtx) vl_nvtx_push(op);
  *out = w;
  return VL_OK;
}

/* The result buffer buf for the caller's tensor dst: written back at completion when they differ. */
static void set_result(vl_dist_work *w, vl_tensor *dst, vl_tensor *buf) {
  w->dst = vl_tensor_retain(dst);
  if (buf != dst) w->stage = vl_tensor_retain(buf);
}

/* After the backend's start: on failure the work is dropped; else it is live, and either
 * handed out, queued in the group, or completed now. */
static vl_status launch_work(vl_comm *c, vl_dist_work *w, vl_status started, vl_dist_work **work) {
  if (started != VL_OK) {
    if (w->backend->release) w->backend->release(w);
    drop_tensors(w);
    free(w);
    return started;
  }
  w->live_next = c->live;
  if (c->live) c->live->live_prev = w;
  c->live = w;
  if (work) {
    *work = w;
    return VL_OK;
  }
  if (c->group_depth > 0) {
    if (c->pending_tail) c->pending_tail->pending_next = w;
    else c->pending = w;
    c->pending_tail = w;
    return VL_OK;
  }
  vl_status s = vl_dist_wait(w);
  free(w);
  return s;
}

static vl_status launch(vl_comm *c, vl_dist_work *w, vl_status started, vl_dist_work **work) {
  bool nvtx = w->nvtx;
  vl_status s = launch_work(c, w, started, work);
  if (nvtx) vl_nvtx_pop();
  return s;
}

/* ---- collectives ---- */

static int divisor(vl_comm *c, const vl_comm_backend *be, vl_dist_op op) {
  return op == VL_DIST_AVG && !be->native_avg ? c->size : 0;
}
static vl_dist_op wire_op(const vl_comm_backend *be, vl_dist_op op) {
  return op == VL_DIST_AVG && !be->native_avg ? VL_DIST_SUM : op;
}

vl_status vl_dist_all_reduce(vl_comm *c, vl_tensor *t, vl_dist_op op, vl_dist_work **work) {
  const char *name = "all_reduce";
  const vl_comm_backend *be = NULL;
  VL_TRY(world_of(name, &c));
  VL_TRY(check_tensor(name, "the tensor", c, t, &be));
  VL_TRY(check_op(name, op, t->dtype));
  VL_TRY(vl_check_writable(name, t));
  VL_TRY(vl_dist_agree(name, c, be, VL_SIG_ALL_REDUCE, t, op, -1));
  vl_tensor *buf;
  VL_TRY(stage(t, true, be, true, false, &buf));
  vl_dist_work *w = NULL;
  vl_status s = new_work(name, c, be, &w);
  if (s != VL_OK) return vl_tensor_release(buf), s;
  set_result(w, t, buf);
  w->divide = divisor(c, be, op);
  s = be->all_reduce(c, buf, wire_op(be, op), w);
  vl_tensor_release(buf);
  return launch(c, w, s, work);
}

vl_status vl_dist_broadcast(vl_comm *c, vl_tensor *t, int root, vl_dist_work **work) {
  const char *name = "broadcast";
  const vl_comm_backend *be = NULL;
  VL_TRY(world_of(name, &c));
  VL_TRY(check_tensor(name, "the tensor", c, t, &be));
  VL_TRY(check_rank(name, "root", c, root));
  VL_TRY(vl_check_writable(name, t));
  VL_TRY(vl_dist_agree(name, c, be, VL_SIG_BROADCAST, t, -1, root));
  vl_tensor *buf;
  VL_TRY(stage(t, false, be, c->rank == root, false, &buf));
  vl_dist_work *w = NULL;
  vl_status s = new_work(name, c, be, &w);
  if (s != VL_OK) return vl_tensor_release(buf), s;
  if (c->rank != root) set_result(w, t, buf);
  else w->keep[0] = vl_tensor_retain(buf);
  s = be->broadcast(c, buf, root, w);
  vl_tensor_release(buf);
  return launch(c, w, s, work);
}

vl_status vl_dist_reduce(vl_comm *c, vl_tensor *t, int root, vl_dist_op op, vl_dist_work **work) {
  const char *name = "reduce";
  const vl_comm_backend *be = NULL;
  VL_TRY(world_of(name, &c));
  VL_TRY(check_tensor(name, "the tensor", c, t, &be));
  VL_TRY(check_rank(name, "root", c, root));
  VL_TRY(check_op(name, op, t->dtype));
  if (c->rank == root) VL_TRY(vl_check_writable(name, t));
  VL_TRY(vl_dist_agree(name, c, be, VL_SIG_REDUCE, t, op, root));
  vl_tensor *buf;
  VL_TRY(stage(t, true, be, true, false, &buf));
  vl_dist_work *w = NULL;
  vl_status s = new_work(name, c, be, &w);
  if (s != VL_OK) return vl_tensor_release(buf), s;
  if (c->rank == root) {
    set_result(w, t, buf);
    w->divide = divisor(c, be, op);
  } else {
    /* MPI's non-root buffers are only read, but a buffer that is t itself must stay t. */
    w->keep[0] = vl_tensor_retain(buf);
  }
  s = be->reduce(c, buf, root, wire_op(be, op), w);
  vl_tensor_release(buf);
  return launch(c, w, s, work);
}

/* big = size blocks of small: concatenated along dim 0, or stacked in a new leading dim. */
static vl_status check_blocks(const char *op, const char *bigname, vl_tensor *big, const char *smallname,
                              vl_tensor *small, int size) {
  bool ok = big->dtype == small->dtype;
  if (ok && big->ndim == small->ndim && big->ndim > 0) {
    ok = big->size[0] == small->size[0] * size;
    for (int i = 1; ok && i < big->ndim; i++) ok = big->size[i] == small->size[i];
  } else if (ok && big->ndim == small->ndim + 1) {
    ok = big->size[0] == size;
    for (int i = 0; ok && i < small->ndim; i++) ok = big->size[i + 1] == small->size[i];
  } else {
    ok = false;
  }
  if (!ok) {
    char a[VL_DESC_LEN], b[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "%s: %s %s must be %d blocks of %s %s (along dim 1, or stacked in a new dim 1), of the same dtype",
                   op, bigname, vl_tensor_desc(big, a, sizeof a), size, smallname, vl_tensor_desc(small, b, sizeof b));
  }
  return VL_OK;
}

/* The buffers of a collective with separate input and output: both staged (an input inside the
 * output's storage is copied first, since the collective overwrites it), the work made and tied
 * to out. The work keeps *ib; *ob is the caller's reference, released after the backend call. */
static vl_status stage_in_out(const char *name, vl_comm *c, const vl_comm_backend *be, vl_tensor *out, vl_tensor *in,
                              bool reduction, vl_tensor **ib, vl_tensor **ob, vl_dist_work **w) {
  VL_TRY(stage(in, reduction, be, true, in->storage == out->storage, ib));
  vl_status s = stage(out, reduction, be, false, false, ob);
  if (s == VL_OK) s = new_work(name, c, be, w);
  if (s != VL_OK) {
    vl_tensor_release(*ib);
    vl_tensor_release(*ob);
    *ib = *ob = NULL;
    return s;
  }
  set_result(*w, out, *ob);
  (*w)->keep[0] = *ib;
  return VL_OK;
}

vl_status vl_dist_all_gather(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_work **work) {
  const char *name = "all_gather";
  const vl_comm_backend *be = NULL;
  VL_TRY(world_of(name, &c));
  VL_TRY(check_tensor(name, "the output", c, out, &be));
  VL_TRY(check_tensor(name, "the input", c, in, &be));
  VL_TRY(check_blocks(name, "the output", out, "the input", in, c->size));
  VL_TRY(vl_check_writable(name, out));
  VL_TRY(vl_dist_agree(name, c, be, VL_SIG_ALL_GATHER, in, -1, -1));
  vl_tensor *ib = NULL, *ob = NULL;
  vl_dist_work *w = NULL;
  VL_TRY(stage_in_out(name, c, be, out, in, false, &ib, &ob, &w));
  vl_status s = be->all_gather(c, ob, ib, w);
  vl_tensor_release(ob);
  return launch(c, w, s, work);
}

vl_status vl_dist_reduce_scatter(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_op op, vl_dist_work **work) {
  const char *name = "reduce_scatter";
  const vl_comm_backend *be = NULL;
  VL_TRY(world_of(name, &c));
  VL_TRY(check_tensor(name, "the output", c, out, &be));
  VL_TRY(check_tensor(name, "the input", c, in, &be));
  VL_TRY(check_blocks(name, "the input", in, "the output", out, c->size));
  VL_TRY(check_op(name, op, in->dtype));
  VL_TRY(vl_check_writable(name, out));
  VL_TRY(vl_dist_agree(name, c, be, VL_SIG_REDUCE_SCATTER, out, op, -1));
  vl_tensor *ib = NULL, *ob = NULL;
  vl_dist_work *w = NULL;
  VL_TRY(stage_in_out(name, c, be, out, in, true, &ib, &ob, &w));
  w->divide = divisor(c, be, op);
  vl_status s = be->reduce_scatter(c, ob, ib, wire_op(be, op), w);
  vl_tensor_release(ob);
  return launch(c, w, s, work);
}

static vl_status check_peer(const char *op, vl_comm *c, int peer, int tag) {
  VL_TRY(check_rank(op, "peer", c, peer));
  if (peer == c->rank) return vl_fail(VL_EINVAL, "%s: peer %d is this rank (send and recv need another rank)", op, peer);
  if (tag < 0 || tag > 32767) return vl_fail(VL_EINVAL, "%s: tag %d is not in 0..32767", op, tag);
  return VL_OK;
}

vl_status vl_dist_send(vl_comm *c, vl_tensor *t, int peer, int tag, vl_dist_work **work) {
  const char *name = "send";
  const vl_comm_backend *be = NULL;
  VL_TRY(world_of(name, &c));
  VL_TRY(check_tensor(name, "the tensor", c, t, &be));
  VL_TRY(check_peer(name, c, peer, tag));
  vl_tensor *buf;
  VL_TRY(stage(t, false, be, true, false, &buf));
  vl_dist_work *w = NULL;
  vl_status s = new_work(name, c, be, &w);
  if (s != VL_OK) return vl_tensor_release(buf), s;
  w->keep[0] = buf;
  w->peer = peer;
  return launch(c, w, be->send(c, buf, peer, tag, w), work);
}

vl_status vl_dist_recv(vl_comm *c, vl_tensor *t, int peer, int tag, vl_dist_work **work) {
  const char *name = "recv";
  const vl_comm_backend *be = NULL;
  VL_TRY(world_of(name, &c));
  VL_TRY(check_tensor(name, "the tensor", c, t, &be));
  VL_TRY(check_peer(name, c, peer, tag));
  VL_TRY(vl_check_writable(name, t));
  vl_tensor *buf;
  VL_TRY(stage(t, false, be, false, false, &buf));
  vl_dist_work *w = NULL;
  vl_status s = new_work(name, c, be, &w);
  if (s != VL_OK) return vl_tensor_release(buf), s;
  set_result(w, t, buf);
  w->peer = peer;
  w->expect = vl_tensor_numel(t);
  s = be->recv(c, buf, peer, tag, w);
  vl_tensor_release(buf);
  return launch(c, w, s, work);
}

vl_status vl_dist_barrier(vl_comm *c, vl_dist_work **work) {
  const char *name = "barrier";
  VL_TRY(world_of(name, &c));
  const vl_comm_backend *be = c->backend[VL_CPU];
  VL_TRY(vl_dist_agree(name, c, be, VL_SIG_BARRIER, NULL, -1, -1));
  vl_dist_work *w = NULL;
  VL_TRY(new_work(name, c, be, &w));
  return launch(c, w, be->barrier(c, w), work);
}

/* ---- groups ---- */

/* The outermost group_start / group_end reach the backends that group their own operations. */
static vl_status backends_group(vl_comm *c, bool start) {
  vl_status first = VL_OK;
  for (int i = 0; i < VL_NDEVICE_TYPES; i++) {
    const vl_comm_backend *b = c->backend[i];
    vl_status (*fn)(vl_comm *) = b ? (start ? b->group_start : b->group_end) : NULL;
    if (!fn) continue;
    vl_status s = fn(c);
    if (s != VL_OK && first == VL_OK) first = s;
  }
  return first;
}

vl_status vl_dist_group_start(vl_comm *c) {
  VL_TRY(world_of("group", &c));
  if (c->group_depth == 0) VL_TRY(backends_group(c, true));
  c->group_depth++;
  return VL_OK;
}

vl_status vl_dist_group_end(vl_comm *c) {
  VL_TRY(world_of("group", &c));
  if (c->group_depth <= 0) return vl_fail(VL_EINVAL, "group: group_end without group_start");
  if (--c->group_depth > 0) return VL_OK;
  vl_status first = backends_group(c, false);
  char msg[512] = "";
  if (first != VL_OK) snprintf(msg, sizeof msg, "%s", vl_errmsg());
  vl_dist_work *w = c->pending;
  c->pending = c->pending_tail = NULL;
  while (w) {
    vl_dist_work *next = w->pending_next;
    vl_status s = vl_dist_wait(w);
    if (s != VL_OK && first == VL_OK) {
      first = s;
      snprintf(msg, sizeof msg, "%s", vl_errmsg());
    }
    free(w);
    w = next;
  }
  if (first != VL_OK) return vl_fail(first, "%s", msg);
  return VL_OK;
}
