/* tests/c/test_dist.c: the front end of runtime/dist (comm.c) against a fake backend that plays a
 * world of 3 ranks in which the other two ranks hold what this one holds (sum = 3x, max = x).
 * What the fake receives is recorded, so the staging contract of internal.h is checked: f16/bf16
 * reductions arrive as contiguous f32, avg arrives as sum and is divided after, strided tensors
 * arrive contiguous and get the result written back, async results appear only at wait, groups
 * complete at group_end, failures leave nothing behind (LSan in the sanitizer run). Also the
 * world-size-1 world of vl_dist_init without a launcher, and finalize with a handle in flight. */
#include <string.h>

#include "runtime/dist/internal.h"
#include "vl_test.h"

/* ---- the fake backend ---- */

typedef struct fake_req {
  vl_tensor *buf, *in;
  vl_dist_op op;
  int kind; /* 0 all_reduce, 1 all_gather, 2 broadcast, 3 barrier */
} fake_req;

static struct {
  int calls;
  vl_dtype dtype;     /* of the last buffer received */
  bool contiguous;
  vl_dist_op op;
  bool fail_start, fail_wait;
} fk;

static vl_status fake_start(vl_dist_work *w, int kind, vl_tensor *buf, vl_tensor *in, vl_dist_op op) {
  fk.calls++;
  fk.dtype = buf ? buf->dtype : VL_F32;
  fk.contiguous = buf ? vl_tensor_is_contiguous(buf) : true;
  fk.op = op;
  if (fk.fail_start) return vl_fail(VL_EMPI, "%s: fake start failure", w->op);
  fake_req *r = calloc(1, sizeof *r);
  r->buf = buf ? vl_tensor_retain(buf) : NULL;
  r->in = in ? vl_tensor_retain(in) : NULL;
  r->op = op;
  r->kind = kind;
  w->impl = r;
  return VL_OK;
}

static vl_status f_all_reduce(vl_comm *c, vl_tensor *buf, vl_dist_op op, vl_dist_work *w) {
  return fake_start(w, 0, buf, NULL, op);
}
static vl_status f_broadcast(vl_comm *c, vl_tensor *buf, int root, vl_dist_work *w) {
  return fake_start(w, 2, buf, NULL, VL_DIST_SUM);
}
static vl_status f_reduce(vl_comm *c, vl_tensor *buf, int root, vl_dist_op op, vl_dist_work *w) {
  return fake_start(w, c->rank == root ? 0 : 2, buf, NULL, op);
}
static vl_status f_all_gather(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_work *w) {
  return fake_start(w, 1, out, in, VL_DIST_SUM);
}
static vl_status f_reduce_scatter(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_op op, vl_dist_work *w) {
  return vl_fail(VL_EINTERNAL, "not faked");
}
static vl_status f_p2p(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w) {
  return fake_start(w, 2, buf, NULL, VL_DIST_SUM);
}
static vl_status f_barrier(vl_comm *c, vl_dist_work *w) { return fake_start(w, 3, NULL, NULL, VL_DIST_SUM); }

/* The work happens at wait, so that a result seen before it would be a front-end bug. */
static vl_status f_wait(vl_dist_work *w) {
  fake_req *r = (fake_req *)w->impl;
  if (fk.fail_wait) return vl_fail(VL_EMPI, "%s: fake wait failure", w->op);
  if (r->kind == 0 && r->op == VL_DIST_SUM) {
    vl_status s = vl_binary_scalar_(VL_BIN_MUL, r->buf, 3.0);
    if (s != VL_OK) return s;
  } else if (r->kind == 1) {
    size_t n = (size_t)vl_tensor_numel(r->in) * vl_dtype_size(r->in->dtype);
    for (int k = 0; k < 3; k++) memcpy((char *)vl_tensor_data(r->buf) + k * n, vl_tensor_data(r->in), n);
  }
  return VL_OK;
}
static vl_status f_test(vl_dist_work *w, bool *done) {
  *done = false;
  return VL_OK;
}
static void f_release(vl_dist_work *w) {
  fake_req *r = (fake_req *)w->impl;
  if (!r) return;
  vl_tensor_release(r->buf);
  vl_tensor_release(r->in);
  free(r);
  w->impl = NULL;
}

static const vl_comm_backend fake = {
    .name = "fake",
    .all_reduce = f_all_reduce,
    .broadcast = f_broadcast,
    .reduce = f_reduce,
    .all_gather = f_all_gather,
    .reduce_scatter = f_reduce_scatter,
    .send = f_p2p,
    .recv = f_p2p,
    .barrier = f_barrier,
    .wait = f_wait,
    .test = f_test,
    .release = f_release,
};

static vl_comm fake_world(void) {
  vl_comm c;
  memset(&c, 0, sizeof c);
  c.rank = 1;
  c.size = 3;
  c.backend[VL_CPU] = &fake;
  return c;
}

static bool values_are(vl_tensor *t, const double *want) {
  double *v = vl_test_values(t);
  bool ok = true;
  for (int64_t i = 0; i < vl_tensor_numel(t); i++) ok = ok && v[i] == want[i];
  free(v);
  return ok;
}

/* ---- tests ---- */

static void test_half_strided_sum(void) {
  vl_comm c = fake_world();
  int64_t sz[2] = {2, 3};
  double vals[6] = {1, 2, 3, 4, 5, 683}; /* 3 * 683 = 2049: not an f16, rounds once to 2048 */
  vl_tensor *t = vl_test_tensor(2, sz, VL_F16, vals), *tt = NULL;
  CHECK_OK(vl_transpose(t, 0, 1, &tt)); /* 3x2, strided */
  uint32_t v0 = t->storage->version;
  CHECK_OK(vl_dist_all_reduce(&c, tt, VL_DIST_SUM, NULL));
  CHECK(fk.dtype == VL_F32 && fk.contiguous, "an f16 reduction arrives as contiguous f32 (got %s)", vl_dtype_name(fk.dtype));
  double want[6] = {3, 6, 9, 12, 15, 2048};
  CHECK(values_are(t, want), "3x, written back through the view, rounded once");
  CHECK(t->storage->version != v0, "an in-place write bumps the version");
  /* broadcast of a half is not a reduction: its 16 bits travel as they are */
  CHECK_OK(vl_dist_broadcast(&c, t, 0, NULL));
  CHECK(fk.dtype == VL_F16, "broadcast keeps f16 (got %s)", vl_dtype_name(fk.dtype));
  vl_tensor_release(tt);
  vl_tensor_release(t);
}

static void test_avg_and_ops(void) {
  vl_comm c = fake_world();
  int64_t sz[1] = {3};
  double vals[3] = {2, 4, 7};
  vl_tensor *t = vl_test_tensor(1, sz, VL_BF16, vals);
  CHECK_OK(vl_dist_all_reduce(&c, t, VL_DIST_AVG, NULL));
  CHECK(fk.op == VL_DIST_SUM, "avg arrives as sum when the backend has no average");
  CHECK(values_are(t, vals), "sum / size: the average of 3 equal contributions");
  vl_tensor *i = vl_test_tensor(1, sz, VL_I32, vals);
  CHECK_ERR(vl_dist_all_reduce(&c, i, VL_DIST_AVG, NULL), VL_EDTYPE, "all_reduce: op 'avg' needs a floating dtype (got i32");
  CHECK_OK(vl_dist_all_reduce(&c, i, VL_DIST_MAX, NULL));
  CHECK(fk.op == VL_DIST_MAX && fk.dtype == VL_I32);
  CHECK(values_are(i, vals), "max of equal contributions");
  vl_dist_op op;
  CHECK_OK(vl_dist_op_parse("x", "mean", &op));
  CHECK(op == VL_DIST_AVG);
  CHECK_ERR(vl_dist_op_parse("reduce", "median", &op), VL_EINVAL, "reduce: unknown op 'median' (sum, avg, max, min or prod)");
  CHECK(strcmp(vl_dist_op_name(VL_DIST_PROD), "prod") == 0);
  vl_tensor_release(t);
  vl_tensor_release(i);
}

static void test_async_and_group(void) {
  vl_comm c = fake_world();
  int64_t sz[1] = {2};
  double vals[2] = {1, 5}, x3[2] = {3, 15}, x9[2] = {9, 45};
  vl_tensor *t = vl_test_tensor(1, sz, VL_F32, vals);
  vl_dist_work *w = NULL;
  CHECK_OK(vl_dist_all_reduce(&c, t, VL_DIST_SUM, &w));
  CHECK(w && strcmp(vl_dist_work_op(w), "all_reduce") == 0);
  CHECK(c.live == w, "a started op is live");
  bool done = true;
  CHECK_OK(vl_dist_test(w, &done));
  CHECK(!done);
  CHECK(values_are(t, vals), "the fake works at wait: nothing before");
  CHECK_OK(vl_dist_wait(w));
  CHECK(values_are(t, x3), "the result after wait");
  CHECK(c.live == NULL, "a completed op is not live");
  CHECK_OK(vl_dist_wait(w));
  CHECK(values_are(t, x3), "a second wait does nothing");
  vl_dist_work_free(w);

  CHECK_OK(vl_dist_group_start(&c));
  CHECK_OK(vl_dist_all_reduce(&c, t, VL_DIST_SUM, NULL));
  CHECK_OK(vl_dist_barrier(&c, NULL));
  CHECK(values_are(t, x3), "inside a group an op is started, not completed");
  CHECK(c.pending && c.pending->pending_next && !c.pending->pending_next->pending_next, "two ops queued in order");
  CHECK_OK(vl_dist_group_end(&c));
  CHECK(values_are(t, x9), "completed by group_end");
  CHECK(!c.pending && !c.live);
  CHECK_ERR(vl_dist_group_end(&c), VL_EINVAL, "group: group_end without group_start");

  /* a wait failure inside a group is reported after every op was waited for */
  CHECK_OK(vl_dist_group_start(&c));
  CHECK_OK(vl_dist_barrier(&c, NULL));
  CHECK_OK(vl_dist_barrier(&c, NULL));
  fk.fail_wait = true;
  CHECK_ERR(vl_dist_group_end(&c), VL_EMPI, "barrier: fake wait failure");
  fk.fail_wait = false;
  CHECK(!c.pending && !c.live, "failed ops are completed and freed");
  vl_tensor_release(t);
}

static void test_gather_aliasing_and_errors(void) {
  vl_comm c = fake_world();
  int64_t osz[1] = {6}, bsz[2] = {3, 2}, small[1] = {2};
  double ov[6] = {0, 0, 7, 8, 0, 0};
  vl_tensor *out = vl_test_tensor(1, osz, VL_F64, ov), *mine = NULL;
  CHECK_OK(vl_narrow(out, 0, 2, 2, &mine)); /* this rank's block of out, as PyTorch's in-place gather */
  CHECK_OK(vl_dist_all_gather(&c, out, mine, NULL));
  double want[6] = {7, 8, 7, 8, 7, 8};
  CHECK(values_are(out, want), "an input inside the output is copied before the gather");
  vl_tensor *st = NULL;
  CHECK_OK(vl_tensor_empty(2, bsz, VL_F64, vl_cpu_device(), &st));
  CHECK_OK(vl_dist_all_gather(&c, st, mine, NULL));
  CHECK(values_are(st, want), "stacked output");
  vl_tensor *bad = NULL;
  CHECK_OK(vl_tensor_empty(1, small, VL_F64, vl_cpu_device(), &bad));
  CHECK_ERR(vl_dist_all_gather(&c, bad, mine, NULL), VL_ESHAPE, "all_gather: the output 2 f64 cpu must be 3 blocks of the input 2 f64 cpu");
  CHECK_ERR(vl_dist_broadcast(&c, mine, 3, NULL), VL_EINVAL, "broadcast: root 3 is not a rank (world size 3: ranks 0..2)");
  CHECK_ERR(vl_dist_send(&c, mine, 1, 0, NULL), VL_EINVAL, "send: peer 1 is this rank");
  CHECK_ERR(vl_dist_recv(&c, mine, 0, -1, NULL), VL_EINVAL, "recv: tag -1 is not in 0..32767");
  int64_t ex[2] = {4, 2};
  vl_tensor *e = NULL;
  CHECK_OK(vl_expand(mine, 2, ex, &e));
  CHECK_ERR(vl_dist_all_reduce(&c, e, VL_DIST_SUM, NULL), VL_EINVAL, "all_reduce: cannot write into an expanded tensor");
  int calls = fk.calls;
  fk.fail_start = true;
  vl_dist_work *w = NULL;
  CHECK_ERR(vl_dist_all_reduce(&c, out, VL_DIST_SUM, &w), VL_EMPI, "all_reduce: fake start failure");
  fk.fail_start = false;
  CHECK(w == NULL && c.live == NULL, "a failed start hands out nothing");
  CHECK(fk.calls == calls + 1, "validation failures never reached the backend");
  CHECK(values_are(out, want), "outputs untouched on failure");
  vl_tensor_release(e);
  vl_tensor_release(bad);
  vl_tensor_release(st);
  vl_tensor_release(mine);
  vl_tensor_release(out);
}

/* The process's world without a launcher: size 1, the local backend; finalize completes a handle
 * still in flight, which stays valid to free. */
static void test_local_world(void) {
  bool launched = getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK") || getenv("SLURM_PROCID") ||
                  (getenv("RANK") && getenv("WORLD_SIZE"));
  if (launched) {
    printf("skipped test_local_world: a launcher's variables are set\n");
    return;
  }
  int64_t sz[1] = {2};
  double vals[2] = {1, 2};
  vl_tensor *t = vl_test_tensor(1, sz, VL_F32, vals);
  CHECK_ERR(vl_dist_all_reduce(NULL, t, VL_DIST_SUM, NULL), VL_EINVAL, "all_reduce: dist.init() has not been called");
  CHECK(!vl_dist_initialized());
  CHECK_OK(vl_dist_init());
  CHECK_OK(vl_dist_init());
  vl_dist_info info;
  vl_dist_get_info(&info);
  CHECK(info.initialized && info.size == 1 && info.rank == 0 && strcmp(info.backend, "local") == 0);
  CHECK(strcmp(info.launcher, "none") == 0 && info.thread_level == -1);
  vl_dist_work *w = NULL;
  CHECK_OK(vl_dist_all_reduce(NULL, t, VL_DIST_AVG, &w));
  CHECK_OK(vl_dist_finalize());
  CHECK(!vl_dist_initialized());
  bool done = false;
  CHECK_OK(vl_dist_test(w, &done));
  CHECK(done, "finalize completed the handle");
  vl_dist_work_free(w);
  CHECK(values_are(t, vals), "the identity at world size 1");
  CHECK_OK(vl_dist_finalize());
  vl_tensor_release(t);
}

int main(void) {
  if (!vl_test_init()) return 1;
  test_half_strided_sum();
  test_avg_and_ops();
  test_async_and_group();
  test_gather_aliasing_and_errors();
  test_local_world();
  vl_shutdown();
  return vl_test_finish();
}
