/* runtime/dist/mpi.c: the MPI backend of runtime/dist (internal.h): CPU tensors through MPI's
 * nonblocking collectives (MPI-3), on a duplicate of MPI_COMM_WORLD whose errors return codes
 * (MPI_ERRORS_RETURN) so that they become vl_status messages instead of ending the process.
 * Blocking calls are the nonblocking ones followed by a wait: one code path. Compiled always;
 * without VL_HAVE_MPI there is no backend and the start fails. */
#include <stdlib.h>

#include "runtime/dist/internal.h"

#ifdef VL_HAVE_MPI
#include <mpi.h>

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

static MPI_Comm comm_of(vl_comm *c) { return *(MPI_Comm *)c->impl[VL_CPU]; }

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

static vl_status m_check(vl_comm *c, const int64_t *sig, int64_t *lo, int64_t *hi) {
  int64_t v[2 * VL_DIST_SIG], r[2 * VL_DIST_SIG];
  for (int i = 0; i < VL_DIST_SIG; i++) v[i] = sig[i], v[VL_DIST_SIG + i] = -sig[i];
  MPI_TRY("dist check", MPI_Allreduce(v, r, 2 * VL_DIST_SIG, MPI_INT64_T, MPI_MAX, comm_of(c)));
  for (int i = 0; i < VL_DIST_SIG; i++) hi[i] = r[i], lo[i] = -r[VL_DIST_SIG + i];
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
  int rc = MPI_Wait((MPI_Request *)w->impl, &st);
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
  free(w->impl);
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
  MPI_Comm *world = (MPI_Comm *)malloc(sizeof *world);
  if (!world) return vl_fail(VL_EOOM, "%s: out of host memory", what);
  MPI_Comm node = MPI_COMM_NULL;
  int r = 0, n = 1, lr = 0, ln = 1, rc;
  /* Our own communicator: a script's or library's MPI traffic on COMM_WORLD cannot match ours. */
  if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, world)) != MPI_SUCCESS) {
    free(world);
    return mpi_fail(rc, what, "MPI_Comm_dup", __FILE__, __LINE__);
  }
  MPI_Comm_set_errhandler(*world, MPI_ERRORS_RETURN);
  if ((rc = MPI_Comm_rank(*world, &r)) != MPI_SUCCESS || (rc = MPI_Comm_size(*world, &n)) != MPI_SUCCESS ||
      (rc = MPI_Comm_split_type(*world, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &node)) != MPI_SUCCESS ||
      (rc = MPI_Comm_rank(node, &lr)) != MPI_SUCCESS || (rc = MPI_Comm_size(node, &ln)) != MPI_SUCCESS) {
    if (node != MPI_COMM_NULL) MPI_Comm_free(&node);
    MPI_Comm_free(world);
    free(world);
    return mpi_fail(rc, what, "querying the world and node communicators", __FILE__, __LINE__);
  }
  MPI_Comm_free(&node);
  *rank = r, *size = n, *local_rank = lr, *local_size = ln, *thread_level = provided;
  *impl = world;
  *owns = !inited;
  return VL_OK;
}

vl_status vl_dist_mpi_stop(void *impl, bool owns) {
  if (vl_dist_mpi_finalized()) {
    free(impl);
    return VL_OK;
  }
  if (impl) MPI_Comm_free((MPI_Comm *)impl);
  free(impl);
  if (owns) MPI_TRY("dist.finalize", MPI_Finalize());
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
void vl_dist_mpi_abort(int code) { (void)code; }

#endif
