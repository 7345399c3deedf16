/* tests/c/test_autocast.c: the autocast API of runtime/amp/autocast.h from C: region enter/exit
 * (bad dtype and unmatched exit refused, state untouched), the per-op table (names, classes,
 * set/reset, the raw-op mappings), vl_autocast_inputs per class, and the weight cache: one cast
 * per region for a parameter, none for a non-leaf, a recast after an in-place write, the cache
 * emptied (and its references dropped) when the outermost region ends. */
#include <string.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd/autograd.h"
#include "runtime/autograd/ops.h"
#include "vl_test.h"

#define CPU vl_cpu_device()
#define REL(t) vl_tensor_release(t)

static vl_tensor *rand_t(int64_t r, int64_t c, vl_dtype dt) {
  int64_t size[2] = {r, c};
  vl_tensor *t = NULL;
  CHECK_OK(vl_tensor_empty(2, size, dt, CPU, &t));
  CHECK_OK(vl_uniform_(t, 0.5, 1.5));
  return t;
}

static void test_regions(void) {
  vl_autocast_prev p0, p1, bad;
  CHECK(!vl_autocast_enabled() && vl_autocast_depth() == 0);
  CHECK_ERR(vl_autocast_enter(true, VL_F32, &bad), VL_EINVAL, "autocast: dtype must be f16 or bf16 (got f32)");
  CHECK(!vl_autocast_enabled() && vl_autocast_depth() == 0, "a refused enter changes nothing");
  CHECK_ERR(vl_autocast_exit(&p0), VL_EINVAL, "exit without a matching enter");
  CHECK_OK(vl_autocast_enter(true, VL_BF16, &p0));
  CHECK(vl_autocast_enabled() && vl_autocast_dtype() == VL_BF16 && vl_autocast_depth() == 1);
  CHECK_OK(vl_autocast_enter(false, VL_F16, &p1));
  CHECK(!vl_autocast_enabled() && vl_autocast_dtype() == VL_F16 && vl_autocast_depth() == 2);
  CHECK_OK(vl_autocast_exit(&p1));
  CHECK(vl_autocast_enabled() && vl_autocast_dtype() == VL_BF16 && vl_autocast_depth() == 1);
  CHECK_OK(vl_autocast_exit(&p0));
  CHECK(!vl_autocast_enabled() && vl_autocast_dtype() == VL_F16 && vl_autocast_depth() == 0);
}

static void test_table(void) {
  vl_autocast_op op;
  CHECK_OK(vl_autocast_op_parse("conv2d", &op));
  CHECK(op == VL_AC_CONV2D && strcmp(vl_autocast_op_name(op), "conv2d") == 0);
  CHECK_ERR(vl_autocast_op_parse("conv3d", &op), VL_EINVAL, "unknown op 'conv3d' (known: matmul, mm,");
  CHECK(vl_autocast_op_name(VL_AC_NOPS) == NULL);
  for (int i = 0; i < VL_AC_NOPS; i++) {
    CHECK(vl_autocast_op_name((vl_autocast_op)i) != NULL, "op %d has a name", i);
    CHECK(vl_autocast_op_parse(vl_autocast_op_name((vl_autocast_op)i), &op) == VL_OK && op == i, "op %d parses", i);
  }
  vl_autocast_class c;
  CHECK_OK(vl_autocast_class_parse("promote", &c));
  CHECK(c == VL_AC_PROMOTE);
  CHECK_ERR(vl_autocast_class_parse("f16", &c), VL_EINVAL, "unknown precision 'f16'");
  CHECK(vl_autocast_op_class(VL_AC_MATMUL) == VL_AC_HALF && vl_autocast_op_class(VL_AC_SOFTMAX) == VL_AC_FP32);
  CHECK(vl_autocast_op_class(VL_AC_ADD) == VL_AC_PROMOTE && vl_autocast_op_class(VL_AC_BATCH_NORM) == VL_AC_KEEP);
  CHECK_OK(vl_autocast_set_op(VL_AC_MATMUL, VL_AC_KEEP));
  CHECK(vl_autocast_op_class(VL_AC_MATMUL) == VL_AC_KEEP && vl_autocast_op_default(VL_AC_MATMUL) == VL_AC_HALF);
  CHECK_ERR(vl_autocast_set_op(VL_AC_NOPS, VL_AC_HALF), VL_EINVAL, "out of range");
  vl_autocast_reset_ops();
  CHECK(vl_autocast_op_class(VL_AC_MATMUL) == VL_AC_HALF);
  CHECK(vl_autocast_op_of_unary(VL_UN_EXP) == VL_AC_EXP && vl_autocast_op_of_unary(VL_UN_RELU) == VL_AC_NONE);
  CHECK(vl_autocast_op_of_binary(VL_BIN_POW) == VL_AC_POW && vl_autocast_op_of_binary(VL_BIN_EQ) == VL_AC_NONE);
  CHECK(vl_autocast_op_of_reduce(VL_RED_MEAN) == VL_AC_MEAN && vl_autocast_op_of_reduce(VL_RED_MAX) == VL_AC_NONE);
}

static void test_inputs(void) {
  vl_tensor *f32 = rand_t(2, 3, VL_F32), *f16 = rand_t(2, 3, VL_F16), *f64 = rand_t(2, 3, VL_F64), *c[3];
  vl_tensor *in[3] = {f32, f16, f64};
  /* off: nothing wanted, inputs come back retained */
  CHECK(!vl_autocast_wants(VL_AC_MATMUL, 3, in));
  CHECK_OK(vl_autocast_inputs(VL_AC_MATMUL, 3, in, c));
  CHECK(c[0] == f32 && c[1] == f16 && c[2] == f64);
  vl_autocast_done(3, c, VL_OK);
  vl_autocast_prev p;
  CHECK_OK(vl_autocast_enter(true, VL_BF16, &p));
  CHECK(vl_autocast_wants(VL_AC_MATMUL, 3, in));
  CHECK_OK(vl_autocast_inputs(VL_AC_MATMUL, 3, in, c));
  CHECK(c[0]->dtype == VL_BF16 && c[1]->dtype == VL_BF16 && c[2] == f64, "half: f32/f16 to bf16, f64 alone");
  vl_autocast_done(3, c, VL_OK);
  CHECK_OK(vl_autocast_inputs(VL_AC_SOFTMAX, 3, in, c));
  CHECK(c[0] == f32 && c[1]->dtype == VL_F32 && c[2] == f64, "fp32: f16 to f32");
  vl_autocast_done(3, c, VL_OK);
  CHECK_OK(vl_autocast_inputs(VL_AC_ADD, 3, in, c));
  CHECK(c[0]->dtype == VL_F64 && c[1]->dtype == VL_F64 && c[2] == f64, "promote: to the widest (f64)");
  vl_autocast_done(3, c, VL_OK);
  vl_tensor *two[2] = {f32, NULL};
  CHECK(!vl_autocast_wants(VL_AC_SOFTMAX, 2, two), "f32 and a NULL: nothing for fp32 to do");
  CHECK_OK(vl_autocast_exit(&p));
  REL(f32);
  REL(f16);
  REL(f64);
}

static void test_cache(void) {
  vl_tensor *w = rand_t(3, 3, VL_F32), *x = rand_t(2, 3, VL_F32), *c1 = NULL, *c2 = NULL, *y = NULL, *c[2];
  CHECK_OK(vl_set_requires_grad(w, true));
  CHECK_OK(vl_ag_binary_scalar(VL_BIN_MUL, w, 2.0, false, &y)); /* a non-leaf that requires grad */
  vl_autocast_reset_stats();
  vl_autocast_prev p, q;
  CHECK_OK(vl_autocast_enter(true, VL_F16, &p));
  CHECK_OK(vl_autocast_inputs(VL_AC_MM, 1, &w, &c1));
  CHECK_OK(vl_autocast_enter(true, VL_F16, &q)); /* a nested region shares the cache */
  CHECK_OK(vl_autocast_inputs(VL_AC_MM, 1, &w, &c2));
  CHECK(c1 == c2, "the second use gets the cached cast");
  CHECK_OK(vl_autocast_exit(&q));
  vl_autocast_stats st;
  vl_autocast_get_stats(&st);
  CHECK(st.casts == 1 && st.cache_hits == 1 && st.cached == 1, "casts %llu hits %llu cached %d",
        (unsigned long long)st.casts, (unsigned long long)st.cache_hits, st.cached);
  REL(c2);
  c2 = NULL;
  /* x does not require grad, y is not a leaf: neither is cached */
  for (int k = 0; k < 2; k++) {
    CHECK_OK(vl_autocast_inputs(VL_AC_MM, 1, &x, &c2));
    REL(c2);
    CHECK_OK(vl_autocast_inputs(VL_AC_MM, 1, &y, &c2));
    REL(c2);
  }
  vl_autocast_get_stats(&st);
  CHECK(st.casts == 5 && st.cached == 1, "casts %llu cached %d", (unsigned long long)st.casts, st.cached);
  /* an in-place write (a version bump) makes the next use cast anew, into the same entry */
  w->storage->version++;
  CHECK_OK(vl_autocast_inputs(VL_AC_MM, 1, &w, &c2));
  CHECK(c2 != c1, "recast after an in-place write");
  vl_autocast_get_stats(&st);
  CHECK(st.casts == 6 && st.cached == 1);
  REL(c2);
  /* the same weight cast to another dtype is another entry */
  vl_tensor *in2[2] = {w, NULL};
  CHECK_OK(vl_autocast_inputs(VL_AC_SOFTMAX, 2, in2, c)); /* f32 already: no entry, no cast */
  CHECK(c[0] == w && c[1] == NULL);
  vl_autocast_done(2, c, VL_OK);
  CHECK_OK(vl_autocast_enter(true, VL_BF16, &q));
  CHECK_OK(vl_autocast_inputs(VL_AC_MM, 1, &w, &c2));
  CHECK(c2->dtype == VL_BF16);
  REL(c2);
  vl_autocast_get_stats(&st);
  CHECK(st.cached == 2 && st.casts == 7, "cached %d casts %llu", st.cached, (unsigned long long)st.casts);
  CHECK_OK(vl_autocast_exit(&q));
  CHECK_OK(vl_autocast_exit(&p));
  vl_autocast_get_stats(&st);
  CHECK(st.cached == 0, "the outermost exit emptied the cache");
  CHECK(c1->refcount == 1, "and dropped its reference (refcount %d)", c1->refcount);
  REL(c1);
  REL(y);
  REL(x);
  REL(w);
}

int main(void) {
  if (!vl_test_init()) return 1;
  int64_t live = vl_autograd_live_nodes();
  test_regions();
  test_table();
  test_inputs();
  test_cache();
  CHECK(vl_autograd_live_nodes() == live, "every graph was freed (%lld left)",
        (long long)(vl_autograd_live_nodes() - live));
  return vl_test_finish();
}
