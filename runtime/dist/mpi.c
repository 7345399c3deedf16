/* runtime/dist/mpi.c: the MPI backend of runtime/dist (internal.h): CPU tensors through MPI's
 * nonblocking collectives (MPI-3), on a duplicate of MPI_COMM_WORLD whose errors return codes
 * (MPI_ERRORS_RETURN) so that they become vl_status messages instead of ending the process.
 * Blocking calls are the nonblocking ones followed by a wait: one code path. Compiled always;
 * without VL_HAVE_MPI there is no backend and the start fails.
 *
 * Waits never block inside MPI (issue 27: a job whose ranks disagree never ended). A wait polls
 * MPI_Test and, every few milliseconds, a second duplicate of the world kept for control
 * messages: a rank that exits normally says "bye" there with the number of collectives it started
 * (vl_dist_mpi_leave), so a rank waiting in a collective that the leaver never joined fails at
 * once, naming the rank and the collective, and sends the leaver a notice naming its own
 * collective, so both sides say what happened. A wait longer than V100LUA_DIST_TIMEOUT fails too.
 * A failed wait leaves the communicator broken (the request is abandoned in flight). */
#define _POSIX_C_SOURCE 200809L
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/dist/internal.h"

#ifdef VL_HAVE_MPI
#include <mpi.h>

typedef struct mpi_world {
  MPI_Comm comm;     /* collectives and point to point: a duplicate of MPI_COMM_WORLD */
  MPI_Comm ctl;      /* control messages only (another duplicate: they can never match data) */
  int size;
  int64_t *left;     /* per rank: its collective count when it said bye; -1 while it runs */
  double *left_at;   /* when that bye arrived */
  int notice_from;   /* a rank that answered our bye: it waits in a collective (-1: none) */
  int64_t notice[3]; /* its collective number, the op (op_code), the peer for send/recv */
} mpi_world;

enum { TAG_BYE = 1, TAG_NOTICE = 2 };
#define P2P_GRACE_S 1.0 /* a message a leaving peer sent just before its bye may still be on the way */

static const char *const op_codes[] = {"?", "all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter",
                                       "barrier", "send", "recv"};
static int64_t op_code(const char *op) {
  for (int i = 1; i < (int)VL_COUNTOF(op_codes); i++)
    if (!strcmp(op, op_codes[i])) return i;
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Every MPI call is checked with the file and line, as CUDA calls are. */
static vl_status mpi_fail(int rc, const char *what, const char *call, const char *file, int line) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
  msg[len] = '\0';
  return vl_fail(VL_EMPI, "%s: %s failed: %s (%s:%d)", what, call, len ? msg : "unknown MPI error", file, line);
}
#define MPI_TRY(what, call)                                                 \
  do {                                                                      \
    int mpi_rc_ = (call);                                                   \
    if (mpi_rc_ != MPI_SUCCESS) return mpi_fail(mpi_rc_, what, #call, __FILE__, __LINE__); \
  } while (0)

static mpi_world *world_of(vl_comm *c) { return (mpi_world *)c->impl[VL_CPU]; }
static MPI_Comm comm_of(vl_comm *c) { return world_of(c)->comm; }

/* The wire type of a dtype: f16/bf16 travel as their 16 bits (they are reduced in f32, see the
 * front end), bool as bytes (reduced with logical or / and). */
static MPI_Datatype mpi_type(vl_dtype dt) {
  switch (dt) {
    case VL_F64: return MPI_DOUBLE;
    case VL_F32: return MPI_FLOAT;
    case VL_F16:
    case VL_BF16: return MPI_UINT16_T;
    case VL_I64: return MPI_INT64_T;
    case VL_I32: return MPI_INT32_T;
    case VL_U8:
    case VL_BOOL: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
  }
}

/* bool: sum and max are "any", min and prod "all" (avg is refused by the front end). */
static MPI_Op mpi_op(vl_dist_op op, vl_dtype dt) {
  if (dt == VL_BOOL) return op == VL_DIST_MIN || op == VL_DIST_PROD ? MPI_LAND : MPI_LOR;
  switch (op) {
    case VL_DIST_MAX: return MPI_MAX;
    case VL_DIST_MIN: return MPI_MIN;
    case VL_DIST_PROD: return MPI_PROD;
    default: return MPI_SUM;
  }
}

static vl_status count_of(const char *what, vl_tensor *t, int *count) {
  int64_t n = vl_tensor_numel(t);
  if (n > 2147483647) return vl_fail(VL_EINVAL, "%s: %lld elements are more than MPI's int count holds; split the tensor", what, (long long)n);
  *count = (int)n;
  return VL_OK;
}

static vl_status new_request(vl_dist_work *w, MPI_Request **req) {
  MPI_Request *r = (MPI_Request *)malloc(sizeof *r);
  if (!r) return vl_fail(VL_EOOM, "%s: out of host memory", w->op);
  *r = MPI_REQUEST_NULL;
  w->impl = r;
  *req = r;
  return VL_OK;
}

static vl_status m_all_reduce(vl_comm *c, vl_tensor *buf, vl_dist_op op, vl_dist_work *w) {
  int n = 0;
  MPI_Request *r = NULL;
  VL_TRY(count_of(w->op, buf, &n));
  VL_TRY(new_request(w, &r));
  MPI_TRY(w->op, MPI_Iallreduce(MPI_IN_PLACE, vl_tensor_data(buf), n, mpi_type(buf->dtype), mpi_op(op, buf->dtype),
                                comm_of(c), r));
  return VL_OK;
}

static vl_status m_broadcast(vl_comm *c, vl_tensor *buf, int root, vl_dist_work *w) {
  int n = 0;
  MPI_Request *r = NULL;
  VL_TRY(count_of(w->op, buf, &n));
  VL_TRY(new_request(w, &r));
  MPI_TRY(w->op, MPI_Ibcast(vl_tensor_data(buf), n, mpi_type(buf->dtype), root, comm_of(c), r));
  return VL_OK;
}

static vl_status m_reduce(vl_comm *c, vl_tensor *buf, int root, vl_dist_op op, vl_dist_work *w) {
  int n = 0;
  MPI_Request *r = NULL;
  VL_TRY(count_of(w->op, buf, &n));
  VL_TRY(new_request(w, &r));
  void *p = vl_tensor_data(buf);
  /* In place at the root; elsewhere the buffer is only read (recvbuf is ignored there). */
  MPI_TRY(w->op, MPI_Ireduce(c->rank == root ? MPI_IN_PLACE : p, c->rank == root ? p : NULL, n,
                             mpi_type(buf->dtype), mpi_op(op, buf->dtype), root, comm_of(c), r));
  return VL_OK;
}

static vl_status m_all_gather(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_work *w) {
  int n = 0, total = 0;
  MPI_Request *r = NULL;
  VL_TRY(count_of(w->op, in, &n));
  VL_TRY(count_of(w->op, out, &total));
  VL_TRY(new_request(w, &r));
  MPI_Datatype ty = mpi_type(in->dtype);
  MPI_TRY(w->op, MPI_Iallgather(vl_tensor_data(in), n, ty, vl_tensor_data(out), n, ty, comm_of(c), r));
  return VL_OK;
}

static vl_status m_reduce_scatter(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_op op, vl_dist_work *w) {
  int n = 0, total = 0;
  MPI_Request *r = NULL;
  VL_TRY(count_of(w->op, out, &n));
  VL_TRY(count_of(w->op, in, &total));
  VL_TRY(new_request(w, &r));
  MPI_TRY(w->op, MPI_Ireduce_scatter_block(vl_tensor_data(in), vl_tensor_data(out), n, mpi_type(in->dtype),
                                           mpi_op(op, in->dtype), comm_of(c), r));
  return VL_OK;
}

static vl_status m_send(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w) {
  int n = 0;
  MPI_Request *r = NULL;
  VL_TRY(count_of(w->op, buf, &n));
  VL_TRY(new_request(w, &r));
  MPI_TRY(w->op, MPI_Isend(vl_tensor_data(buf), n, mpi_type(buf->dtype), peer, tag, comm_of(c), r));
  return VL_OK;
}

static vl_status m_recv(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w) {
  int n = 0;
  MPI_Request *r = NULL;
  VL_TRY(count_of(w->op, buf, &n));
  VL_TRY(new_request(w, &r));
  MPI_TRY(w->op, MPI_Irecv(vl_tensor_data(buf), n, mpi_type(buf->dtype), peer, tag, comm_of(c), r));
  return VL_OK;
}

static vl_status m_barrier(vl_comm *c, vl_dist_work *w) {
  MPI_Request *r = NULL;
  VL_TRY(new_request(w, &r));
  MPI_TRY(w->op, MPI_Ibarrier(comm_of(c), r));
  return VL_OK;
}

/* ---- waiting: MPI_Test, the control messages, the clock ---- */

/* Reads every control message that arrived: byes (a rank's exit and its collective count) and
 * notices (the answer to our bye from a rank waiting in a collective). */
static vl_status drain_ctl(vl_comm *c) {
  mpi_world *m = world_of(c);
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_TRY("dist", MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, m->ctl, &flag, &st));
    if (!flag) return VL_OK;
    int64_t msg[3] = {0, 0, -1};
    MPI_TRY("dist", MPI_Recv(msg, 3, MPI_INT64_T, st.MPI_SOURCE, st.MPI_TAG, m->ctl, MPI_STATUS_IGNORE));
    if (st.MPI_TAG == TAG_BYE) {
      m->left[st.MPI_SOURCE] = msg[0];
      m->left_at[st.MPI_SOURCE] = now_s();
    } else if (st.MPI_TAG == TAG_NOTICE && m->notice_from < 0) {
      m->notice_from = st.MPI_SOURCE;
      memcpy(m->notice, msg, sizeof msg);
    }
  }
}

static vl_status give_up(vl_comm *c, bool shared, vl_status code, const char *msg) {
  c->broken = true;
  c->failure_shared = c->failure_shared || shared;
  snprintf(c->broken_msg, sizeof c->broken_msg, "%s", msg);
  return vl_fail(code, "%s", msg);
}

/* Whether this wait can never finish because a rank has left: a collective it never started (its
 * count is below ours), or a send/recv whose peer left a moment ago. Then the leaver gets a notice
 * naming what this rank waits in, and the wait fails. */
static vl_status check_left(vl_comm *c, const char *op, int64_t seq, int peer) {
  mpi_world *m = world_of(c);
  double now = now_s();
  for (int r = 0; r < m->size; r++) {
    if (m->left[r] < 0 || r == c->rank) continue;
    bool stuck = seq > 0 ? m->left[r] < seq : (r == peer && now - m->left_at[r] > P2P_GRACE_S);
    if (!stuck) continue;
    /* To every other rank, not only r: the others that left too (3 ranks: two leavers) wait for a
     * bye from this one and report the notice instead. On the heap and never freed: MPI reads it
     * after MPI_Request_free, and the job is ending. */
    int64_t *note = (int64_t *)malloc(3 * sizeof *note);
    if (note) {
      note[0] = seq, note[1] = op_code(op), note[2] = peer;
      for (int o = 0; o < m->size; o++) {
        MPI_Request q;
        if (o != c->rank && MPI_Isend(note, 3, MPI_INT64_T, o, TAG_NOTICE, m->ctl, &q) == MPI_SUCCESS) MPI_Request_free(&q);
      }
    }
    char msg[512];
    if (seq > 0)
      snprintf(msg, sizeof msg, "%s: rank %d left the job (its script ended or it called os.exit(0)) after %lld "
               "collectives, while this rank (%d) waits in %s, its collective #%lld: the ranks ran different numbers "
               "of collectives (one rank with more batches, a collective under `if rank == ...`); ending the job",
               op, r, (long long)m->left[r], c->rank, op, (long long)seq);
    else
      snprintf(msg, sizeof msg, "%s: rank %d left the job (its script ended or it called os.exit(0)) while this rank "
               "(%d) waits in %s %s rank %d; ending the job", op, r, c->rank, op, strcmp(op, "recv") ? "to" : "from", r);
    return give_up(c, true, VL_EMPI, msg);
  }
  return VL_OK;
}

/* Completes *req (MPI_Test's code in *rc, as MPI_Wait's would be) or fails as above, or after
 * V100LUA_DIST_TIMEOUT seconds. seq: the collective's number (0 for send/recv, with its peer). */
static vl_status wait_req(vl_comm *c, MPI_Request *req, MPI_Status *st, const char *op, int64_t seq, int peer, int *rc) {
  double t0 = now_s(), probed = t0; /* the first look at the control messages 2 ms in: a fast wait never pays for it */
  for (long it = 0;; it++) {
    int flag = 0;
    *rc = MPI_Test(req, &flag, st);
    if (flag || *rc != MPI_SUCCESS) return VL_OK;
    if ((it & 63) == 0) {
      double t = now_s();
      if (t - probed >= 0.002) { /* the control messages every 2 ms: a few microseconds each */
        probed = t;
        VL_TRY(drain_ctl(c));
        VL_TRY(check_left(c, op, seq, peer));
      }
      if (c->timeout_s > 0 && t - t0 > c->timeout_s) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s: not finished after %.0f s (V100LUA_DIST_TIMEOUT=%g; this rank's %s #%lld): "
                 "another rank is in a different collective, still computing, or stuck; ending the job", op, t - t0,
                 c->timeout_s, seq > 0 ? "collective" : "op", (long long)(seq > 0 ? seq : 0));
        return give_up(c, false, VL_EMPI, msg);
      }
    }
    /* Past a short spin, let other processes run: ranks often outnumber cores (--oversubscribe),
     * and the rank this one waits for may need this core. */
    if (it > 2000) sched_yield();
  }
}

/* The signature's maximum and minus its minimum in one MPI_MAX reduction of 2 x 5 int64: one small
 * round trip per collective (docs/DISTRIBUTED.md has its measured cost). */
static vl_status m_check(vl_comm *c, const int64_t *sig, int64_t *lo, int64_t *hi) {
  const char *op = vl_dist_kind_name(sig[0]);
  /* On the heap: a wait that gives up leaves the reduction in flight, writing into r. */
  int64_t *v = (int64_t *)malloc(4 * VL_DIST_SIG * sizeof *v), *r = v + 2 * VL_DIST_SIG;
  if (!v) return vl_fail(VL_EOOM, "%s: out of host memory", op);
  for (int i = 0; i < VL_DIST_SIG; i++) v[i] = sig[i], v[VL_DIST_SIG + i] = -sig[i];
  MPI_Request q;
  MPI_Status st;
  int rc = MPI_Iallreduce(v, r, 2 * VL_DIST_SIG, MPI_INT64_T, MPI_MAX, comm_of(c), &q);
  if (rc != MPI_SUCCESS) return free(v), mpi_fail(rc, op, "MPI_Iallreduce (the ranks' agreement check)", __FILE__, __LINE__);
  vl_status s = wait_req(c, &q, &st, op, c->coll_seq, -1, &rc);
  if (s != VL_OK) return s; /* abandoned: v stays allocated, the job is ending */
  if (rc != MPI_SUCCESS) return free(v), mpi_fail(rc, op, "MPI_Iallreduce (the ranks' agreement check)", __FILE__, __LINE__);
  for (int i = 0; i < VL_DIST_SIG; i++) hi[i] = r[i], lo[i] = -r[VL_DIST_SIG + i];
  free(v);
  return VL_OK;
}

/* A recv's message must hold exactly the tensor's element count: MPI reports a longer one as a
 * truncation and accepts a shorter one silently. */
static vl_status check_status(vl_dist_work *w, MPI_Status *st) {
  if (w->expect < 0 || !w->dst) return VL_OK;
  int got = 0;
  vl_tensor *buf = w->stage ? w->stage : w->dst;
  MPI_TRY(w->op, MPI_Get_count(st, mpi_type(buf->dtype), &got));
  if (got != w->expect)
    return vl_fail(VL_ESHAPE, "%s: the message from rank %d has %d elements but the tensor has %lld (%s)", w->op, w->peer,
                   got, (long long)w->expect, vl_dtype_name(buf->dtype));
  return VL_OK;
}

static vl_status m_wait(vl_dist_work *w) {
  MPI_Status st;
  int rc = MPI_SUCCESS;
  vl_status s = wait_req(w->comm, (MPI_Request *)w->impl, &st, w->op, w->seq, w->peer, &rc);
  if (s != VL_OK) {
    w->abandon = true; /* MPI still owns the request and may write its buffers */
    return s;
  }
  if (rc == MPI_ERR_IN_STATUS) rc = st.MPI_ERROR;
  if (rc != MPI_SUCCESS) {
    /* A truncated recv: the message was longer than the tensor. */
    if (w->expect >= 0) {
      int cls = 0;
      MPI_Error_class(rc, &cls);
      if (cls == MPI_ERR_TRUNCATE)
        return vl_fail(VL_ESHAPE, "%s: the message from rank %d is longer than the tensor's %lld %s elements (the sender "
                       "sent more elements, or another dtype)", w->op, w->peer, (long long)w->expect,
                       vl_dtype_name((w->stage ? w->stage : w->dst)->dtype));
    }
    return mpi_fail(rc, w->op, "MPI_Wait", __FILE__, __LINE__);
  }
  return check_status(w, &st);
}

static vl_status m_test(vl_dist_work *w, bool *done) {
  int flag = 0;
  MPI_Status st;
  MPI_TRY(w->op, MPI_Test((MPI_Request *)w->impl, &flag, &st));
  if (flag) VL_TRY(check_status(w, &st));
  *done = flag != 0;
  return VL_OK;
}

static void m_release(vl_dist_work *w) {
  if (!w->abandon) free(w->impl); /* an abandoned request's handle stays with MPI */
  w->impl = NULL;
}

static const vl_comm_backend mpi_backend = {
    .name = "mpi",
    .native_half = false,
    .native_avg = false,
    .all_reduce = m_all_reduce,
    .broadcast = m_broadcast,
    .reduce = m_reduce,
    .all_gather = m_all_gather,
    .reduce_scatter = m_reduce_scatter,
    .send = m_send,
    .recv = m_recv,
    .barrier = m_barrier,
    .check = m_check,
    .wait = m_wait,
    .test = m_test,
    .release = m_release,
};

const vl_comm_backend *vl_dist_mpi_backend(void) { return &mpi_backend; }

bool vl_dist_mpi_finalized(void) {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

vl_status vl_dist_mpi_start(int *rank, int *size, int *local_rank, int *local_size, int *thread_level,
                            void **impl, bool *owns) {
  const char *what = "dist.init";
  if (vl_dist_mpi_finalized())
    return vl_fail(VL_EMPI, "%s: MPI was finalized in this process and cannot start again", what);
  int inited = 0, provided = MPI_THREAD_SINGLE;
  MPI_TRY(what, MPI_Initialized(&inited));
  if (!inited) {
    /* FUNNELED: only the main thread calls MPI (a later watchdog thread only watches). */
    MPI_TRY(what, MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided));
  } else {
    MPI_TRY(what, MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_FUNNELED) {
    if (!inited) MPI_Finalize();
    return vl_fail(VL_EMPI, "%s: MPI gives thread level %d, below MPI_THREAD_FUNNELED (%d)", what, provided,
                   MPI_THREAD_FUNNELED);
  }
  mpi_world *world = (mpi_world *)calloc(1, sizeof *world);
  if (!world) return vl_fail(VL_EOOM, "%s: out of host memory", what);
  world->comm = world->ctl = MPI_COMM_NULL;
  world->notice_from = -1;
  MPI_Comm node = MPI_COMM_NULL;
  int r = 0, n = 1, lr = 0, ln = 1, rc;
  /* Our own communicators: a script's or library's MPI traffic on COMM_WORLD cannot match ours. */
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &world->comm)) != MPI_SUCCESS ||
      (rc = MPI_Comm_dup(MPI_COMM_WORLD, &world->ctl)) != MPI_SUCCESS) {
    if (world->comm != MPI_COMM_NULL) MPI_Comm_free(&world->comm);
    free(world);
    return mpi_fail(rc, what, "MPI_Comm_dup", __FILE__, __LINE__);
  }
  MPI_Comm_set_errhandler(world->comm, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(world->ctl, MPI_ERRORS_RETURN);
  if ((rc = MPI_Comm_rank(world->comm, &r)) != MPI_SUCCESS || (rc = MPI_Comm_size(world->comm, &n)) != MPI_SUCCESS ||
      (rc = MPI_Comm_split_type(world->comm, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &node)) != MPI_SUCCESS ||
      (rc = MPI_Comm_rank(node, &lr)) != MPI_SUCCESS || (rc = MPI_Comm_size(node, &ln)) != MPI_SUCCESS) {
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    MPI_Comm_free(&world->comm);
    MPI_Comm_free(&world->ctl);
    free(world);
    return mpi_fail(rc, what, "querying the world and node communicators", __FILE__, __LINE__);
  }
  MPI_Comm_free(&node);
  world->size = n;
  world->left = (int64_t *)malloc((size_t)n * sizeof *world->left);
  world->left_at = (double *)calloc((size_t)n, sizeof *world->left_at);
  if (!world->left || !world->left_at) {
    MPI_Comm_free(&world->comm);
    MPI_Comm_free(&world->ctl);
    free(world->left);
    free(world->left_at);
    free(world);
    return vl_fail(VL_EOOM, "%s: out of host memory", what);
  }
  for (int i = 0; i < n; i++) world->left[i] = -1;
  *rank = r, *size = n, *local_rank = lr, *local_size = ln, *thread_level = provided;
  *impl = world;
  *owns = !inited;
  return VL_OK;
}

static void free_world(mpi_world *m, bool comms) {
  if (!m) return;
  if (comms) {
    MPI_Comm_free(&m->comm);
    MPI_Comm_free(&m->ctl);
  }
  free(m->left);
  free(m->left_at);
  free(m);
}

vl_status vl_dist_mpi_stop(void *impl, bool owns) {
  if (vl_dist_mpi_finalized()) {
    free_world((mpi_world *)impl, false);
    return VL_OK;
  }
  free_world((mpi_world *)impl, true);
  if (owns) MPI_TRY("dist.finalize", MPI_Finalize());
  return VL_OK;
}

/* Bye to every rank, then the others' byes. No time limit here: the other ranks may work on for
 * long without a collective (an evaluation on rank 0, a checkpoint); the ones that wait in a
 * collective answer with a notice, and V100LUA_DIST_TIMEOUT bounds their waits. */
vl_status vl_dist_mpi_leave(vl_comm *c) {
  mpi_world *m = world_of(c);
  if (m->size <= 1) return VL_OK;
  /* The requests and the message on the heap, kept (not freed) if this fails: MPI may still send. */
  MPI_Request *q = (MPI_Request *)malloc((size_t)m->size * sizeof *q + 3 * sizeof(int64_t));
  if (!q) return vl_fail(VL_EOOM, "dist.finalize: out of host memory");
  int64_t *bye = (int64_t *)(q + m->size);
  bye[0] = c->coll_seq, bye[1] = 0, bye[2] = -1;
  int nq = 0;
  for (int r = 0; r < m->size; r++) {
    if (r == c->rank) continue;
    int rc = MPI_Isend(bye, 3, MPI_INT64_T, r, TAG_BYE, m->ctl, &q[nq]);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "dist.finalize", "MPI_Isend (bye)", __FILE__, __LINE__);
    nq++;
  }
  for (;;) {
    vl_status s = drain_ctl(c);
    if (s != VL_OK) return s; /* q stays: the sends are MPI's still, and the job is ending */
    if (m->notice_from >= 0) {
      const int64_t *n = m->notice;
      const char *op = op_codes[n[1] >= 0 && n[1] < (int64_t)VL_COUNTOF(op_codes) ? n[1] : 0];
      char msg[512];
      if (n[0] > 0)
        snprintf(msg, sizeof msg, "dist: this rank (%d) left the job (its script ended or it called os.exit(0)) after "
                 "%lld collectives, but rank %d waits in %s, its collective #%lld: the ranks ran different numbers of "
                 "collectives (one rank with more batches, a collective under `if rank == ...`); ending the job",
                 c->rank, (long long)c->coll_seq, m->notice_from, op, (long long)n[0]);
      else
        snprintf(msg, sizeof msg, "dist: this rank (%d) left the job (its script ended or it called os.exit(0)) while "
                 "rank %d waits in %s %s rank %lld; ending the job", c->rank, m->notice_from, op,
                 strcmp(op, "recv") ? "to" : "from", (long long)n[2]);
      return give_up(c, true, VL_EMPI, msg);
    }
    int gone = 0;
    for (int r = 0; r < m->size; r++) gone += r != c->rank && m->left[r] >= 0;
    if (gone == m->size - 1) break;
    struct timespec ts = {0, 1000000}; /* 1 ms: nothing here needs MPI's progress but the messages */
    nanosleep(&ts, NULL);
  }
  int rc = MPI_Waitall(nq, q, MPI_STATUSES_IGNORE); /* matched by now: every rank received its bye */
  free(q);
  if (rc != MPI_SUCCESS) return mpi_fail(rc, "dist.finalize", "MPI_Waitall (bye)", __FILE__, __LINE__);
  return VL_OK;
}

void vl_dist_mpi_abort(int code) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited && !vl_dist_mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, code);
}

#else /* no MPI */

const vl_comm_backend *vl_dist_mpi_backend(void) { return NULL; }
bool vl_dist_mpi_finalized(void) { return false; }
vl_status vl_dist_mpi_start(int *rank, int *size, int *local_rank, int *local_size, int *thread_level,
                            void **impl, bool *owns) {
  return vl_fail(VL_EUNSUPPORTED, "dist.init: built without MPI");
}
vl_status vl_dist_mpi_stop(void *impl, bool owns) { return VL_OK; }
vl_status vl_dist_mpi_leave(vl_comm *c) {
  (void)c;
  return VL_OK;
}
void vl_dist_mpi_abort(int code) { (void)code; }

#endif
