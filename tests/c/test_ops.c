/* tests/c/test_ops.c: the op front end on the CPU, checked against direct loops in double. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/layout.h"
#include "runtime/ops/ops_internal.h"
#include "runtime/ops/ops.h"
#include "runtime/core/tensor.h"
#include "vl_test.h"

#define CPU vl_cpu_device()
#define REL(t) vl_tensor_release(t)

static vl_tensor *sentinel(void) { return (vl_tensor *)(uintptr_t)0x1234; }

/* Deterministic pseudo-random doubles in [-2, 2). */
static void fill_vals(double *v, int64_t n, unsigned seed) {
  uint64_t x = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (int64_t i = 0; i < n; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v[i] = (double)(x % 4000) / 1000.0 - 2.0;
  }
}

static bool close_to(vl_tensor *t, const double *ref, int64_t n, double tol) {
  if (vl_tensor_numel(t) != n) return false;
  double *v = vl_test_values(t);
  bool ok = true;
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(v[i] - ref[i]) <= tol * (1 + fabs(ref[i])))) {
      if (ok) printf("  mismatch at %lld: %.9g vs %.9g\n", (long long)i, v[i], ref[i]);
      ok = false;
    }
  free(v);
  return ok;
}

static bool shape_is(const vl_tensor *t, int ndim, const int64_t *size) {
  if (t->ndim != ndim) return false;
  for (int i = 0; i < ndim; i++)
    if (t->size[i] != size[i]) return false;
  return true;
}

/* ---- the iteration the kernels see ---- */

static void test_iter(void) {
  int64_t s[3] = {2, 3, 4}, s34[2] = {3, 4}, s4[1] = {4};
  vl_tensor *a = NULL, *b = NULL, *c = NULL, *at = NULL, *bt = NULL, *v = NULL;
  CHECK_OK(vl_zeros(3, s, VL_F32, CPU, &a));
  CHECK_OK(vl_zeros(3, s, VL_F32, CPU, &b));
  vl_tensor *ops[2] = {a, b};
  vl_iter it;
  const vl_kernels *k = NULL;
  CHECK_OK(vl_iter_make("test", &it, 2, ops, 3, s, &k));
  CHECK(k == &vl_cpu_kernels);
  CHECK(it.ndim == 1 && it.size[0] == 24 && vl_iter_is_flat(&it) && it.numel == 24);
  /* both operands permuted alike still collapse to one flat dim */
  int perm[3] = {2, 0, 1};
  CHECK_OK(vl_permute(a, 3, perm, &at));
  CHECK_OK(vl_permute(b, 3, perm, &bt));
  vl_tensor *ops2[2] = {at, bt};
  CHECK_OK(vl_iter_make("test", &it, 2, ops2, 3, at->size, &k));
  CHECK(vl_iter_is_flat(&it) && it.size[0] == 24);
  /* a broadcast operand keeps stride 0 on its broadcast dims; the rest merge */
  CHECK_OK(vl_zeros(1, s4, VL_F32, CPU, &c));
  vl_tensor *ops3[2] = {a, c};
  CHECK_OK(vl_iter_make("test", &it, 2, ops3, 3, s, &k));
  CHECK(it.ndim == 2 && it.size[0] == 6 && it.size[1] == 4 && it.stride[0][0] == 4 && it.stride[1][0] == 0 &&
        it.stride[1][1] == 1);
  /* a column slice cannot merge its rows */
  CHECK_OK(vl_narrow(a, 2, 1, 2, &v));
  vl_tensor *ops4[1] = {v};
  CHECK_OK(vl_iter_make("test", &it, 1, ops4, 3, v->size, &k));
  CHECK(it.ndim == 2 && it.size[0] == 6 && it.size[1] == 2 && it.stride[0][0] == 4);
  int64_t s0[2] = {0, 4};
  vl_tensor *e = NULL;
  CHECK_OK(vl_zeros(2, s0, VL_F32, CPU, &e));
  CHECK_OK(vl_iter_make("test", &it, 1, &e, 2, s0, &k));
  CHECK(it.numel == 0);
  (void)s34;
  REL(e); REL(v); REL(c); REL(at); REL(bt); REL(a); REL(b);
}

/* ---- elementwise ---- */

static void test_broadcast_promotion(void) {
  int64_t sa[3] = {2, 1, 3}, sb[2] = {4, 1};
  double va[6], vb[4];
  fill_vals(va, 6, 1);
  fill_vals(vb, 4, 2);
  vl_tensor *a = vl_test_tensor(3, sa, VL_F32, va), *b = vl_test_tensor(2, sb, VL_F32, vb), *r = NULL, *o = sentinel();
  CHECK_OK(vl_binary(VL_BIN_SUB, a, b, 2.0, &r));
  int64_t sr[3] = {2, 4, 3};
  CHECK(shape_is(r, 3, sr) && r->dtype == VL_F32);
  double ref[24];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++)
      for (int k = 0; k < 3; k++) ref[(i * 4 + j) * 3 + k] = (float)va[i * 3 + k] - 2.0 * (float)vb[j];
  CHECK(close_to(r, ref, 24, 1e-6));
  REL(r);

  int64_t s23[2] = {2, 3}, s43[2] = {4, 3};
  double z[12] = {0};
  vl_tensor *x = vl_test_tensor(2, s23, VL_F32, z), *y = vl_test_tensor(2, s43, VL_F32, z);
  CHECK_ERR(vl_binary(VL_BIN_ADD, x, y, 1, &o), VL_ESHAPE,
            "add: shapes 2x3 and 4x3 cannot be broadcast (a 2x3 f32 cpu, b 4x3 f32 cpu)");
  CHECK(o == sentinel());

  /* dtype promotion */
  double iv[6] = {1, 2, 3, 4, 5, 7}, jv[6] = {2, 2, 2, 2, 2, 2};
  vl_tensor *i32 = vl_test_tensor(2, s23, VL_I32, iv), *i64 = vl_test_tensor(2, s23, VL_I64, jv), *f32 = vl_test_tensor(2, s23, VL_F32, jv);
  vl_tensor *bo = vl_test_tensor(2, s23, VL_BOOL, iv), *u8 = vl_test_tensor(2, s23, VL_U8, iv), *f16 = vl_test_tensor(2, s23, VL_F16, jv);
  CHECK_OK(vl_binary(VL_BIN_ADD, i32, f32, 1, &r));
  CHECK(r->dtype == VL_F32);
  REL(r);
  CHECK_OK(vl_binary(VL_BIN_MUL, i32, i64, 1, &r));
  CHECK(r->dtype == VL_I64);
  REL(r);
  CHECK_OK(vl_binary(VL_BIN_DIV, i32, i64, 1, &r));
  double dref[6] = {0.5, 1, 1.5, 2, 2.5, 3.5};
  CHECK(r->dtype == VL_F32 && close_to(r, dref, 6, 1e-7));
  REL(r);
  CHECK_OK(vl_binary(VL_BIN_ADD, bo, bo, 1, &r));
  CHECK(r->dtype == VL_I64);
  REL(r);
  CHECK_OK(vl_binary(VL_BIN_ADD, u8, f16, 1, &r));
  CHECK(r->dtype == VL_F16);
  REL(r);
  CHECK_OK(vl_binary(VL_BIN_LT, i32, f32, 1, &r));
  double ltref[6] = {1, 0, 0, 0, 0, 0};
  CHECK(r->dtype == VL_BOOL && close_to(r, ltref, 6, 0));
  REL(r);
  CHECK_OK(vl_binary_scalar(VL_BIN_MUL, i32, 2.0, false, &r));
  CHECK(r->dtype == VL_I32);
  REL(r);
  CHECK_OK(vl_binary_scalar(VL_BIN_MUL, i32, 2.5, false, &r));
  double mref[6] = {2.5, 5, 7.5, 10, 12.5, 17.5};
  CHECK(r->dtype == VL_F32 && close_to(r, mref, 6, 1e-7));
  REL(r);
  CHECK_OK(vl_binary_scalar(VL_BIN_ADD, bo, 1, false, &r));
  CHECK(r->dtype == VL_I64);
  REL(r);
  CHECK_OK(vl_binary_scalar(VL_BIN_SUB, i32, 10, true, &r)); /* 10 - a */
  double rsref[6] = {9, 8, 7, 6, 5, 3};
  CHECK(r->dtype == VL_I32 && close_to(r, rsref, 6, 0));
  REL(r);
  CHECK_OK(vl_unary(VL_UN_EXP, i64, &r));
  double *ev = vl_test_values(r);
  CHECK(r->dtype == VL_F32 && fabs(ev[0] - exp(2.0)) < 1e-5);
  free(ev);
  REL(r);
  CHECK_OK(vl_binary_scalar(VL_BIN_POW, i32, 2, false, &r));
  double pref[6] = {1, 4, 9, 16, 25, 49};
  CHECK(r->dtype == VL_I32 && close_to(r, pref, 6, 0));
  REL(r);
  CHECK_ERR(vl_binary_scalar(VL_BIN_POW, i32, -1, false, &o), VL_EINVAL, "negative integer powers");
  vl_tensor *neg = NULL;
  CHECK_OK(vl_binary_scalar(VL_BIN_SUB, i64, 3, false, &neg));
  CHECK_ERR(vl_binary(VL_BIN_POW, i32, neg, 1, &o), VL_EINVAL, "negative integer powers");
  CHECK_ERR(vl_unary(VL_UN_NEG, bo, &o), VL_EDTYPE, "neg");
  CHECK(o == sentinel());
  REL(neg);

  /* in place: dtype legality, shapes, and failing ops leave the target unmodified */
  double before[6];
  double *p = vl_test_values(i32);
  memcpy(before, p, sizeof before);
  free(p);
  CHECK_ERR(vl_binary_(VL_BIN_ADD, i32, f32, 1), VL_EDTYPE, "add_: result dtype f32 cannot be stored in an i32 tensor");
  CHECK_ERR(vl_binary_(VL_BIN_DIV, i32, i64, 1), VL_EDTYPE, "div_");
  CHECK_ERR(vl_binary_scalar_(VL_BIN_MUL, i32, 0.5), VL_EDTYPE, "mul_");
  CHECK_ERR(vl_binary_(VL_BIN_ADD, i32, y, 1), VL_ESHAPE, "add_: b of shape 4x3 cannot be broadcast to a's shape 2x3");
  CHECK_ERR(vl_unary_(VL_UN_SQRT, i32), VL_EDTYPE, "sqrt_");
  CHECK(close_to(i32, before, 6, 0));
  CHECK_OK(vl_binary_(VL_BIN_ADD, i32, i64, 1)); /* i64 result castable to i32 */
  double addref[6] = {3, 4, 5, 6, 7, 9};
  CHECK(i32->dtype == VL_I32 && close_to(i32, addref, 6, 0));
  CHECK_OK(vl_binary_(VL_BIN_GT, i32, i64, 1)); /* predicates in place store 0/1 */
  double gtref[6] = {1, 1, 1, 1, 1, 1};
  CHECK(close_to(i32, gtref, 6, 0));
  CHECK_OK(vl_binary_scalar_(VL_BIN_MUL, f32, 3));
  double f6[6] = {6, 6, 6, 6, 6, 6};
  CHECK(close_to(f32, f6, 6, 0));
  int64_t one3[1] = {3};
  vl_tensor *row = NULL, *ex = NULL;
  CHECK_OK(vl_ones(1, one3, VL_F32, CPU, &row));
  CHECK_OK(vl_expand(row, 2, s23, &ex));
  CHECK_ERR(vl_binary_(VL_BIN_ADD, ex, f32, 1), VL_EINVAL, "add_: cannot write into an expanded tensor");
  CHECK_OK(vl_binary_(VL_BIN_ADD, f32, ex, 1));
  double f7[6] = {7, 7, 7, 7, 7, 7};
  CHECK(close_to(f32, f7, 6, 0));
  CHECK_ERR(vl_binary(VL_BIN_ADD, f32, y, 1, &o), VL_ESHAPE, "add");
  CHECK(o == sentinel());
  REL(row); REL(ex);
  REL(a); REL(b); REL(x); REL(y); REL(i32); REL(i64); REL(f32); REL(bo); REL(u8); REL(f16);
}

static void test_overlap_inplace(void) {
  int64_t s[2] = {3, 3};
  double v[9];
  fill_vals(v, 9, 3);
  vl_tensor *a = vl_test_tensor(2, s, VL_F64, v), *at = NULL;
  CHECK_OK(vl_transpose(a, 0, 1, &at));
  CHECK_OK(vl_binary_(VL_BIN_ADD, a, at, 1)); /* a += a^T must read the original a^T */
  double ref[9];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) ref[i * 3 + j] = v[i * 3 + j] + v[j * 3 + i];
  CHECK(close_to(a, ref, 9, 1e-12));
  /* a += a[0] broadcast over rows: row 0 is overwritten first, so it must be copied */
  vl_tensor *r0 = NULL;
  CHECK_OK(vl_select(a, 0, 0, &r0));
  double ref2[9];
  for (int i = 0; i < 9; i++) ref2[i] = ref[i] + ref[i % 3];
  CHECK_OK(vl_binary_(VL_BIN_ADD, a, r0, 1));
  CHECK(close_to(a, ref2, 9, 1e-12));
  /* copy_ between overlapping views */
  vl_tensor *a2 = NULL;
  CHECK_OK(vl_transpose(a, 0, 1, &a2));
  CHECK_OK(vl_copy_(a, a2));
  double ref3[9];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) ref3[i * 3 + j] = ref2[j * 3 + i];
  CHECK(close_to(a, ref3, 9, 1e-12));
  REL(a2); REL(r0); REL(at); REL(a);
}

static void test_where_masked_unary(void) {
  int64_t s[2] = {2, 3}, s1[1] = {3};
  double cv[3] = {1, 0, 1}, av[6] = {1, -2, 3, -4, 5, -6}, bv[1] = {9};
  vl_tensor *c = vl_test_tensor(1, s1, VL_BOOL, cv), *a = vl_test_tensor(2, s, VL_F32, av), *b = vl_test_tensor(0, NULL, VL_I32, bv), *r = NULL;
  vl_tensor *o = sentinel();
  CHECK_OK(vl_where(c, a, b, &r));
  double wref[6] = {1, 9, 3, -4, 9, -6};
  CHECK(r->dtype == VL_F32 && shape_is(r, 2, s) && close_to(r, wref, 6, 0));
  REL(r);
  CHECK_ERR(vl_where(a, a, b, &o), VL_EDTYPE, "where: cond must be a bool tensor");
  CHECK_OK(vl_masked_fill(a, c, 0.5, &r));
  double mref[6] = {0.5, -2, 0.5, 0.5, 5, 0.5};
  CHECK(close_to(r, mref, 6, 0));
  REL(r);
  CHECK_OK(vl_unary(VL_UN_RELU, a, &r));
  double rref[6] = {1, 0, 3, 0, 5, 0};
  CHECK(close_to(r, rref, 6, 0));
  REL(r);
  CHECK_OK(vl_clamp(a, -3, INFINITY, &r));
  double cref[6] = {1, -2, 3, -3, 5, -3};
  CHECK(close_to(r, cref, 6, 0));
  REL(r);
  CHECK_ERR(vl_clamp(a, 2, 1, &o), VL_EINVAL, "clamp");
  CHECK_OK(vl_unary(VL_UN_LOGICAL_NOT, c, &r));
  double nref[3] = {0, 1, 0};
  CHECK(r->dtype == VL_BOOL && close_to(r, nref, 3, 0));
  REL(r);
  CHECK_OK(vl_masked_fill_(a, c, -1));
  double m2[6] = {-1, -2, -1, -1, 5, -1};
  CHECK(close_to(a, m2, 6, 0));
  CHECK_OK(vl_unary_(VL_UN_ABS, a));
  double m3[6] = {1, 2, 1, 1, 5, 1};
  CHECK(close_to(a, m3, 6, 0));
  CHECK(o == sentinel());
  REL(a); REL(b); REL(c);
}

/* ---- reductions ---- */

/* Reference reduction over the dims flagged in red[] of a row-major 3-D array. */
static void ref_reduce(vl_reduce_op op, const double *x, const int64_t *sz, const bool *red, double param, double *out,
                       int64_t *idx) {
  int64_t osz[3], on = 1;
  for (int d = 0; d < 3; d++) {
    osz[d] = red[d] ? 1 : sz[d];
    on *= osz[d];
  }
  for (int64_t o = 0; o < on; o++) {
    int64_t oi[3] = {o / (osz[1] * osz[2]), (o / osz[2]) % osz[1], o % osz[2]};
    double acc = op == VL_RED_PROD ? 1 : op == VL_RED_MAX ? -INFINITY : op == VL_RED_MIN ? INFINITY : 0;
    double sum = 0, sq = 0;
    int64_t cnt = 0, best = 0, pos = 0;
    for (int64_t i = 0; i < sz[0]; i++)
      for (int64_t j = 0; j < sz[1]; j++)
        for (int64_t k = 0; k < sz[2]; k++) {
          int64_t ii[3] = {i, j, k};
          bool match = true;
          for (int d = 0; d < 3; d++)
            if (!red[d] && ii[d] != oi[d]) match = false;
          if (!match) continue;
          double v = x[(i * sz[1] + j) * sz[2] + k];
          sum += v;
          sq += v * v;
          cnt++;
          if (op == VL_RED_PROD) acc *= v;
          if (op == VL_RED_MAX && v > acc) { acc = v; best = pos; }
          if (op == VL_RED_MIN && v < acc) { acc = v; best = pos; }
          pos++;
        }
    double mean = sum / (double)cnt;
    switch (op) {
      case VL_RED_SUM: out[o] = sum; break;
      case VL_RED_MEAN: out[o] = mean; break;
      case VL_RED_VAR: out[o] = (sq - (double)cnt * mean * mean) / ((double)cnt - param); break;
      case VL_RED_NORM: out[o] = sqrt(sq); break;
      default: out[o] = acc; break;
    }
    if (idx) idx[o] = best;
  }
}

static void test_reductions(void) {
  int64_t sz[3] = {3, 4, 5};
  double x[60];
  fill_vals(x, 60, 4);
  vl_tensor *a = vl_test_tensor(3, sz, VL_F64, x);
  const int sets[7][3] = {{0}, {1}, {2}, {0, 2}, {0, 1}, {1, 2}, {0, 1, 2}};
  const int nsets[7] = {1, 1, 1, 2, 2, 2, 0};
  const vl_reduce_op ops[5] = {VL_RED_SUM, VL_RED_MEAN, VL_RED_VAR, VL_RED_NORM, VL_RED_MAX};
  for (int oi = 0; oi < 5; oi++)
    for (int si = 0; si < 7; si++)
      for (int keep = 0; keep < 2; keep++) {
        bool red[3] = {nsets[si] == 0, nsets[si] == 0, nsets[si] == 0};
        for (int k = 0; k < nsets[si]; k++) red[sets[si][k]] = true;
        double ref[60];
        ref_reduce(ops[oi], x, sz, red, 1.0, ref, NULL);
        vl_tensor *r = NULL;
        CHECK_OK(vl_reduce(ops[oi], a, nsets[si], sets[si], keep, ops[oi] == VL_RED_NORM ? 2.0 : 1.0, &r, NULL));
        if (!r) continue;
        int64_t want[3];
        int wn = 0;
        for (int d = 0; d < 3; d++)
          if (!red[d]) want[wn++] = sz[d];
          else if (keep) want[wn++] = 1;
        bool ok = shape_is(r, wn, want) && close_to(r, ref, vl_tensor_numel(r), 1e-10);
        if (!ok) printf("  op %d set %d keep %d\n", ops[oi], si, keep);
        CHECK(ok);
        REL(r);
      }
  /* A non-contiguous input (permuted) reduced over non-adjacent dims takes the copy path. */
  int perm[3] = {2, 0, 1};
  vl_tensor *p = NULL, *r = NULL, *ix = NULL;
  CHECK_OK(vl_permute(a, 3, perm, &p)); /* [5, 3, 4]: p[k][i][j] = x[i][j][k] */
  int d02[2] = {0, 2};
  CHECK_OK(vl_reduce(VL_RED_SUM, p, 2, d02, false, 0, &r, NULL));
  bool red1[3] = {false, true, true};
  double ref[60];
  ref_reduce(VL_RED_SUM, x, sz, red1, 0, ref, NULL); /* sum over j, k leaves i */
  CHECK(r->ndim == 1 && r->size[0] == 3 && close_to(r, ref, 3, 1e-12));
  REL(r);
  /* max with indices along one dim, and argmax/argmin */
  int d1 = 1;
  CHECK_OK(vl_reduce(VL_RED_MAX, a, 1, &d1, true, 0, &r, &ix));
  int64_t idx[60];
  bool redj[3] = {false, true, false};
  ref_reduce(VL_RED_MAX, x, sz, redj, 0, ref, idx);
  double idxd[60];
  for (int i = 0; i < 15; i++) idxd[i] = (double)idx[i];
  CHECK(ix->dtype == VL_I64 && ix->ndim == 3 && close_to(r, ref, 15, 0) && close_to(ix, idxd, 15, 0));
  REL(r); REL(ix);
  CHECK_OK(vl_argmin(a, -1, false, &r));
  bool redk[3] = {false, false, true};
  ref_reduce(VL_RED_MIN, x, sz, redk, 0, ref, idx);
  for (int i = 0; i < 12; i++) idxd[i] = (double)idx[i];
  CHECK(r->dtype == VL_I64 && r->ndim == 2 && close_to(r, idxd, 12, 0));
  REL(r);
  CHECK_OK(vl_argmax(a, VL_DIM_ALL, false, &r));
  bool all[3] = {true, true, true};
  ref_reduce(VL_RED_MAX, x, sz, all, 0, ref, idx);
  CHECK(r->ndim == 0 && close_to(r, (double[]){(double)idx[0]}, 1, 0));
  REL(r);
  /* integer sums give i64; prod */
  int64_t s4[1] = {4};
  double iv[4] = {1, 2, 3, 4};
  vl_tensor *iv32 = vl_test_tensor(1, s4, VL_I32, iv);
  CHECK_OK(vl_reduce(VL_RED_SUM, iv32, 0, NULL, false, 0, &r, NULL));
  CHECK(r->dtype == VL_I64 && r->ndim == 0 && close_to(r, (double[]){10}, 1, 0));
  REL(r);
  CHECK_OK(vl_reduce(VL_RED_PROD, iv32, 0, NULL, true, 0, &r, NULL));
  CHECK(r->ndim == 1 && r->size[0] == 1 && close_to(r, (double[]){24}, 1, 0));
  REL(r);
  /* errors, with the output untouched */
  vl_tensor *o = sentinel();
  int bad[1] = {3};
  CHECK_ERR(vl_reduce(VL_RED_SUM, a, 1, bad, false, 0, &o, NULL), VL_EINVAL,
            "sum: dim 4 out of range for a tensor of 3 dims");
  int dup[2] = {1, -2};
  CHECK_ERR(vl_reduce(VL_RED_SUM, a, 2, dup, false, 0, &o, NULL), VL_EINVAL, "sum: dim 2 appears more than once");
  CHECK_ERR(vl_reduce(VL_RED_MEAN, iv32, 0, NULL, false, 0, &o, NULL), VL_EDTYPE, "mean: expected a float tensor");
  vl_tensor *oi = sentinel();
  CHECK_ERR(vl_reduce(VL_RED_MAX, a, 2, d02, false, 0, &o, &oi), VL_EINVAL, "indices need exactly one dim");
  int64_t e0[2] = {0, 3};
  vl_tensor *empty = NULL;
  CHECK_OK(vl_zeros(2, e0, VL_F32, CPU, &empty));
  int zero = 0;
  CHECK_ERR(vl_reduce(VL_RED_MAX, empty, 1, &zero, false, 0, &o, NULL), VL_EINVAL, "max: cannot reduce over an empty dim");
  CHECK(o == sentinel() && oi == sentinel());
  CHECK_OK(vl_reduce(VL_RED_SUM, empty, 1, &zero, false, 0, &r, NULL)); /* empty sum is 0 */
  CHECK(r->ndim == 1 && r->size[0] == 3 && close_to(r, (double[]){0, 0, 0}, 3, 0));
  REL(r);
  /* softmax along a middle dim */
  CHECK_OK(vl_softmax(a, 1, false, &r));
  double *sv = vl_test_values(r);
  bool sm_ok = true;
  for (int i = 0; i < 3; i++)
    for (int k = 0; k < 5; k++) {
      double den = 0;
      for (int j = 0; j < 4; j++) den += exp(x[(i * 4 + j) * 5 + k]);
      for (int j = 0; j < 4; j++) {
        double want = exp(x[(i * 4 + j) * 5 + k]) / den;
        if (fabs(sv[(i * 4 + j) * 5 + k] - want) > 1e-12) sm_ok = false;
      }
    }
  CHECK(sm_ok);
  free(sv);
  REL(r);
  CHECK_OK(vl_softmax(p, -1, true, &r)); /* non-contiguous input */
  sv = vl_test_values(r);
  double den = 0;
  for (int j = 0; j < 4; j++) den += exp(x[j * 5 + 0]);
  CHECK(fabs(sv[0] - (x[0] - log(den))) < 1e-12);
  free(sv);
  REL(r);
  CHECK_ERR(vl_softmax(iv32, 0, false, &o), VL_EDTYPE, "softmax: expected a float tensor");
  REL(empty); REL(iv32); REL(p); REL(a);
}

/* ---- linear algebra ---- */

/* a [batch.., m, k] @ b [batch.., k, n] with explicit element accessors, in double. */
static void naive_mm(const double *a, const double *b, double *c, int64_t m, int64_t k, int64_t n, int64_t ars,
                     int64_t acs, int64_t brs, int64_t bcs) {
  for (int64_t i = 0; i < m; i++)
    for (int64_t j = 0; j < n; j++) {
      double s = 0;
      for (int64_t l = 0; l < k; l++) s += a[i * ars + l * acs] * b[l * brs + j * bcs];
      c[i * n + j] = s;
    }
}

static void test_matmul(void) {
  double av[120], bv[120], ref[240];
  fill_vals(av, 120, 5);
  fill_vals(bv, 120, 6);
  int64_t s34[2] = {3, 4}, s45[2] = {4, 5}, s43[2] = {4, 3}, s54[2] = {5, 4};
  vl_tensor *a = vl_test_tensor(2, s34, VL_F64, av), *b = vl_test_tensor(2, s45, VL_F64, bv), *r = NULL, *o = sentinel();
  CHECK_OK(vl_matmul(a, b, &r));
  naive_mm(av, bv, ref, 3, 4, 5, 4, 1, 5, 1);
  CHECK(r->ndim == 2 && r->size[0] == 3 && r->size[1] == 5 && close_to(r, ref, 15, 1e-12));
  REL(r);
  /* transposed operands: stored 4x3 and 5x4, used through t() */
  vl_tensor *at_store = vl_test_tensor(2, s43, VL_F64, av), *bt_store = vl_test_tensor(2, s54, VL_F64, bv), *at = NULL, *bt = NULL;
  CHECK_OK(vl_transpose(at_store, 0, 1, &at));
  CHECK_OK(vl_transpose(bt_store, 0, 1, &bt));
  CHECK_OK(vl_matmul(at, bt, &r));
  naive_mm(av, bv, ref, 3, 4, 5, 1, 3, 1, 4);
  CHECK(close_to(r, ref, 15, 1e-12));
  REL(r);
  CHECK_OK(vl_matmul(a, bt, &r));
  naive_mm(av, bv, ref, 3, 4, 5, 4, 1, 1, 4);
  CHECK(close_to(r, ref, 15, 1e-12));
  REL(r);
  /* f32 batched with a broadcast 2-D b */
  int64_t s234[3] = {2, 3, 4};
  vl_tensor *ab = vl_test_tensor(3, s234, VL_F32, av), *bf = vl_test_tensor(2, s45, VL_F32, bv);
  CHECK_OK(vl_matmul(ab, bf, &r));
  double fa[120], fb[120];
  for (int i = 0; i < 120; i++) {
    fa[i] = (float)av[i];
    fb[i] = (float)bv[i];
  }
  for (int bi = 0; bi < 2; bi++) naive_mm(fa + bi * 12, fb, ref + bi * 15, 3, 4, 5, 4, 1, 5, 1);
  CHECK(r->ndim == 3 && r->size[0] == 2 && r->dtype == VL_F32 && close_to(r, ref, 30, 1e-5));
  REL(r);
  /* broadcast batch dims: [2,1,3,4] @ [5,4,2] -> [2,5,3,2] */
  int64_t s2134[4] = {2, 1, 3, 4}, s542[3] = {5, 4, 2};
  vl_tensor *a4 = vl_test_tensor(4, s2134, VL_F64, av), *b3 = vl_test_tensor(3, s542, VL_F64, bv);
  CHECK_OK(vl_matmul(a4, b3, &r));
  int64_t want[4] = {2, 5, 3, 2};
  CHECK(shape_is(r, 4, want));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 5; j++) naive_mm(av + i * 12, bv + j * 8, ref + (i * 5 + j) * 6, 3, 4, 2, 4, 1, 2, 1);
  CHECK(close_to(r, ref, 60, 1e-12));
  REL(r);
  /* 1-D operands */
  int64_t s4[1] = {4};
  vl_tensor *v4 = vl_test_tensor(1, s4, VL_F64, bv);
  CHECK_OK(vl_matmul(a, v4, &r));
  naive_mm(av, bv, ref, 3, 4, 1, 4, 1, 1, 1);
  CHECK(r->ndim == 1 && r->size[0] == 3 && close_to(r, ref, 3, 1e-12));
  REL(r);
  CHECK_OK(vl_matmul(v4, b, &r));
  naive_mm(bv, bv, ref, 1, 4, 5, 4, 1, 5, 1);
  CHECK(r->ndim == 1 && r->size[0] == 5 && close_to(r, ref, 5, 1e-12));
  REL(r);
  CHECK_OK(vl_matmul(v4, v4, &r));
  naive_mm(bv, bv, ref, 1, 4, 1, 4, 1, 1, 1);
  CHECK(r->ndim == 0 && close_to(r, ref, 1, 1e-12));
  REL(r);
  /* an operand without a gemm layout (expanded rows) is copied */
  int64_t s14[2] = {1, 4};
  vl_tensor *row = vl_test_tensor(2, s14, VL_F64, av), *rowx = NULL;
  CHECK_OK(vl_expand(row, 2, s34, &rowx));
  CHECK_OK(vl_matmul(rowx, b, &r));
  naive_mm(av, bv, ref, 3, 4, 5, 0, 1, 5, 1);
  CHECK(close_to(r, ref, 15, 1e-12));
  REL(r);
  /* bmm and addmm */
  int64_t s245[3] = {2, 4, 5};
  vl_tensor *bb = vl_test_tensor(3, s245, VL_F64, bv), *ab64 = vl_test_tensor(3, s234, VL_F64, av);
  CHECK_OK(vl_bmm(ab64, bb, &r));
  for (int bi = 0; bi < 2; bi++) naive_mm(av + bi * 12, bv + bi * 20, ref + bi * 15, 3, 4, 5, 4, 1, 5, 1);
  CHECK(close_to(r, ref, 30, 1e-12));
  REL(r);
  int64_t s5[1] = {5};
  double biasv[5] = {1, 2, 3, 4, 5};
  vl_tensor *bias = vl_test_tensor(1, s5, VL_F64, biasv);
  CHECK_OK(vl_addmm(bias, a, b, 0.5, 2.0, &r));
  naive_mm(av, bv, ref, 3, 4, 5, 4, 1, 5, 1);
  for (int i = 0; i < 15; i++) ref[i] = 0.5 * biasv[i % 5] + 2.0 * ref[i];
  CHECK(close_to(r, ref, 15, 1e-12));
  REL(r);
  double nanv[5] = {NAN, NAN, NAN, NAN, NAN};
  vl_tensor *nanb = vl_test_tensor(1, s5, VL_F64, nanv);
  CHECK_OK(vl_addmm(nanb, a, b, 0.0, 1.0, &r)); /* beta == 0: bias never read */
  naive_mm(av, bv, ref, 3, 4, 5, 4, 1, 5, 1);
  CHECK(close_to(r, ref, 15, 1e-12));
  REL(r);
  /* errors */
  int64_t s23[2] = {2, 3};
  vl_tensor *e1 = vl_test_tensor(2, s23, VL_F32, av), *e2 = vl_test_tensor(2, s45, VL_F32, bv), *e3 = vl_test_tensor(2, s45, VL_I32, bv);
  CHECK_ERR(vl_matmul(e1, e2, &o), VL_ESHAPE,
            "matmul: a 2x3 and b 4x5 cannot be multiplied (inner dims 3 and 4; a 2x3 f32 cpu, b 4x5 f32 cpu)");
  CHECK_ERR(vl_matmul(e2, e3, &o), VL_EDTYPE, "matmul: expected float tensors of one dtype");
  CHECK_ERR(vl_matmul(ab, a, &o), VL_EDTYPE, "matmul");
  int64_t s334[3] = {3, 3, 4}, s245b[3] = {2, 4, 5};
  vl_tensor *q1 = vl_test_tensor(3, s334, VL_F64, av), *q2 = vl_test_tensor(3, s245b, VL_F64, bv);
  CHECK_ERR(vl_matmul(q1, q2, &o), VL_ESHAPE, "matmul: batch dims of a 3x3x4 and b 2x4x5 cannot be broadcast");
  CHECK_ERR(vl_bmm(a, b, &o), VL_ESHAPE, "bmm: expected 3-D tensors");
  CHECK_ERR(vl_addmm(e1, a, b, 1, 1, &o), VL_EDTYPE, "addmm");
  CHECK(o == sentinel());
  CHECK(!vl_get_allow_tf32());
  vl_set_allow_tf32(true);
  CHECK(vl_get_allow_tf32());
  vl_set_allow_tf32(false);
  REL(q1); REL(q2); REL(e1); REL(e2); REL(e3); REL(nanb); REL(bias); REL(bb); REL(ab64); REL(row); REL(rowx);
  REL(v4); REL(a4); REL(b3); REL(ab); REL(bf); REL(at); REL(bt); REL(at_store); REL(bt_store); REL(a); REL(b);
}

/* ---- indexing and joining ---- */

static void test_index_ops(void) {
  int64_t s34[2] = {3, 4};
  double sv[12];
  for (int i = 0; i < 12; i++) sv[i] = i * 10;
  vl_tensor *src = vl_test_tensor(2, s34, VL_F32, sv), *r = NULL, *o = sentinel();
  int64_t s32[2] = {3, 2};
  double iv[6] = {3, 0, 1, 1, 2, 0};
  vl_tensor *idx = vl_test_tensor(2, s32, VL_I64, iv);
  CHECK_OK(vl_gather(src, 1, idx, &r));
  double gref[6];
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) gref[i * 2 + j] = sv[i * 4 + (int)iv[i * 2 + j]];
  CHECK(shape_is(r, 2, s32) && close_to(r, gref, 6, 0));
  REL(r);
  int64_t s2[1] = {2};
  double isv[2] = {2, 0};
  vl_tensor *i32 = vl_test_tensor(1, s2, VL_I32, isv);
  CHECK_OK(vl_index_select(src, 0, i32, &r));
  double isref[8];
  for (int j = 0; j < 4; j++) {
    isref[j] = sv[8 + j];
    isref[4 + j] = sv[j];
  }
  CHECK(r->size[0] == 2 && r->size[1] == 4 && close_to(r, isref, 8, 0));
  REL(r);
  double ones[6] = {1, 2, 3, 4, 5, 6};
  vl_tensor *upd = vl_test_tensor(2, s32, VL_F32, ones), *fidx = vl_test_tensor(2, s32, VL_F32, iv);
  CHECK_OK(vl_scatter_add(src, 1, idx, upd, &r));
  double sref[12];
  memcpy(sref, sv, sizeof sref);
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) sref[i * 4 + (int)iv[i * 2 + j]] += ones[i * 2 + j];
  CHECK(close_to(r, sref, 12, 0) && close_to(src, sv, 12, 0));
  REL(r);
  CHECK_ERR(vl_gather(src, 1, fidx, &o), VL_EDTYPE, "gather: index must be i64 or i32");
  CHECK_ERR(vl_gather(src, 2, idx, &o), VL_EINVAL, "gather: dim 3 out of range");
  CHECK_ERR(vl_index_select(src, 0, idx, &o), VL_ESHAPE, "index_select: index must be 1-D");
  vl_tensor *upd64 = vl_test_tensor(2, s32, VL_F64, ones);
  CHECK_ERR(vl_scatter_add_(src, 1, idx, upd64), VL_EDTYPE, "scatter_add_: src dtype f64 differs");
  CHECK_ERR(vl_scatter_add_(src, 1, i32, upd), VL_ESHAPE, "scatter_add_: self, index and src need the same number");
  CHECK(close_to(src, sv, 12, 0));
  CHECK_OK(vl_scatter_add_(src, 1, idx, upd));
  CHECK(close_to(src, sref, 12, 0));
  double bad[6] = {4, 0, 0, 0, 0, 0};
  vl_tensor *bidx = vl_test_tensor(2, s32, VL_I64, bad);
  CHECK(vl_gather(src, 1, bidx, &o) != VL_OK && o == sentinel());
  REL(bidx); REL(upd64); REL(upd); REL(fidx); REL(i32); REL(idx); REL(src);
}

static void test_cat_stack_split(void) {
  int64_t s23[2] = {2, 3}, s13[2] = {1, 3}, s0[1] = {0};
  double v[6] = {1, 2, 3, 4, 5, 6}, w[3] = {7, 8, 9};
  vl_tensor *a = vl_test_tensor(2, s23, VL_F32, v), *b = vl_test_tensor(2, s13, VL_I32, w), *e = vl_test_tensor(1, s0, VL_F64, v), *r = NULL;
  vl_tensor *o = sentinel();
  vl_tensor *list[3] = {a, e, b};
  CHECK_OK(vl_cat(3, list, 0, &r)); /* the 1-D empty tensor is skipped but promotes the dtype */
  double cref[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  int64_t s33[2] = {3, 3};
  CHECK(r->dtype == VL_F64 && shape_is(r, 2, s33) && close_to(r, cref, 9, 0));
  REL(r);
  vl_tensor *at = NULL;
  CHECK_OK(vl_transpose(a, 0, 1, &at)); /* 3x2 */
  vl_tensor *l2[2] = {at, at};
  CHECK_OK(vl_cat(2, l2, -1, &r));
  double c2[12] = {1, 4, 1, 4, 2, 5, 2, 5, 3, 6, 3, 6};
  CHECK(r->size[0] == 3 && r->size[1] == 4 && close_to(r, c2, 12, 0));
  REL(r);
  vl_tensor *l3[2] = {a, at};
  CHECK_ERR(vl_cat(2, l3, 0, &o), VL_ESHAPE, "cat: sizes must match except in dim 1: tensor 2 is 3x2, tensor 1 is 2x3");
  CHECK_ERR(vl_cat(0, l3, 0, &o), VL_EINVAL, "cat: expected a non-empty list");
  CHECK_ERR(vl_cat(2, l3, 2, &o), VL_EINVAL, "cat: dim 3 out of range");
  vl_tensor *l4[2] = {a, a};
  CHECK_OK(vl_stack(2, l4, 1, &r));
  int64_t s223[3] = {2, 2, 3};
  double sref[12] = {1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6};
  CHECK(shape_is(r, 3, s223) && close_to(r, sref, 12, 0));
  REL(r);
  vl_tensor *l5[2] = {a, b};
  CHECK_ERR(vl_stack(2, l5, 0, &o), VL_ESHAPE, "stack: tensor 2 has shape 1x3 but tensor 1 has shape 2x3");
  CHECK(o == sentinel());
  vl_tensor **parts = NULL;
  int n = 0;
  CHECK_OK(vl_split(a, 2, 1, &parts, &n));
  CHECK(n == 2 && parts[0]->size[1] == 2 && parts[1]->size[1] == 1 && parts[1]->storage == a->storage);
  if (n == 2) CHECK(close_to(parts[1], (double[]){3, 6}, 2, 0));
  for (int i = 0; i < n; i++) REL(parts[i]);
  free(parts);
  CHECK_OK(vl_chunk(a, 2, 1, &parts, &n)); /* 3 into pieces of 2: 2 and 1 */
  CHECK(n == 2 && parts[0]->size[1] == 2 && parts[1]->size[1] == 1);
  for (int i = 0; i < n; i++) REL(parts[i]);
  free(parts);
  CHECK_OK(vl_chunk(a, 5, 0, &parts, &n)); /* fewer chunks than asked when the dim is short */
  CHECK(n == 2 && parts[1]->offset == 3);
  for (int i = 0; i < n; i++) REL(parts[i]);
  free(parts);
  parts = NULL;
  CHECK_ERR(vl_split(a, 0, 0, &parts, &n), VL_EINVAL, "split: split_size must be positive");
  CHECK_ERR(vl_chunk(a, 0, 0, &parts, &n), VL_EINVAL, "chunk");
  CHECK(parts == NULL);
  REL(at); REL(a); REL(b); REL(e);
}

/* ---- copies, creation, RNG ---- */

static void test_copy_create(void) {
  int64_t s23[2] = {2, 3}, s3[1] = {3}, s32[2] = {3, 2};
  double v[3] = {1.7, -2.2, 3.9};
  vl_tensor *src = vl_test_tensor(1, s3, VL_F64, v), *dst = NULL, *o = sentinel();
  CHECK_OK(vl_zeros(2, s23, VL_I32, CPU, &dst));
  CHECK_OK(vl_copy_(dst, src)); /* broadcast and truncating conversion */
  double ref[6] = {1, -2, 3, 1, -2, 3};
  CHECK(close_to(dst, ref, 6, 0));
  vl_tensor *d2 = NULL, *d2t = NULL;
  CHECK_OK(vl_zeros(2, s32, VL_F16, CPU, &d2));
  CHECK_OK(vl_transpose(d2, 0, 1, &d2t)); /* non-contiguous 2x3 destination */
  CHECK_OK(vl_copy_(d2t, dst));
  double tref[6] = {1, 1, -2, -2, 3, 3};
  CHECK(close_to(d2, tref, 6, 0));
  int64_t s4[1] = {4};
  vl_tensor *s4t = vl_test_tensor(1, s4, VL_F32, (double[]){1, 2, 3, 4});
  CHECK_ERR(vl_copy_(dst, s4t), VL_ESHAPE, "copy_: src of shape 4 cannot be broadcast to dst of shape 2x3");
  CHECK(close_to(dst, ref, 6, 0));
  vl_tensor *same = NULL, *conv = NULL;
  CHECK_OK(vl_to(dst, VL_I32, CPU, &same));
  CHECK(same == dst);
  REL(same);
  CHECK_OK(vl_to(d2t, VL_F64, CPU, &conv));
  /* vl_to keeps a dense layout (PyTorch's preserve_format): the transposed view stays transposed. */
  CHECK(conv->dtype == VL_F64 && vl_same_layout(conv, d2t) && !vl_tensor_is_contiguous(conv) && close_to(conv, ref, 6, 0));
  REL(conv);
  double item = 0;
  vl_tensor *el = NULL;
  CHECK_OK(vl_select(d2t, 1, 2, &el)); /* column 2 of the transposed view: {3, 3} */
  vl_tensor *el0 = NULL;
  CHECK_OK(vl_select(el, 0, 1, &el0));
  CHECK_OK(vl_item(el0, &item));
  CHECK(item == 3.0);
  CHECK_ERR(vl_item(dst, &item), VL_EINVAL, "item: expected a tensor with one element, got 6 elements");
  CHECK_OK(vl_fill_(d2t, 0.25));
  CHECK(close_to(d2, (double[]){0.25, 0.25, 0.25, 0.25, 0.25, 0.25}, 6, 0));
  vl_tensor *ar = NULL;
  CHECK_OK(vl_arange(0, 1, 0.3, VL_F64, CPU, &ar));
  CHECK(ar->size[0] == 4 && close_to(ar, (double[]){0, 0.3, 0.6, 0.9}, 4, 1e-12));
  REL(ar);
  CHECK_OK(vl_arange(5, 0, -2, VL_I64, CPU, &ar));
  CHECK(ar->size[0] == 3 && close_to(ar, (double[]){5, 3, 1}, 3, 0));
  REL(ar);
  CHECK_ERR(vl_arange(0, 1, 0, VL_F32, CPU, &o), VL_EINVAL, "arange");
  vl_tensor *fh = NULL;
  int32_t host[6] = {6, 5, 4, 3, 2, 1};
  CHECK_OK(vl_from_host(host, 2, s23, VL_I32, CPU, &fh));
  int32_t back[6];
  CHECK_OK(vl_to_host(fh, back));
  CHECK(memcmp(host, back, sizeof host) == 0);
  CHECK(o == sentinel());
  REL(fh); REL(el); REL(el0); REL(s4t); REL(d2); REL(d2t); REL(dst); REL(src);
}

static void test_rng(void) {
  int64_t s10[1] = {10}, s25[2] = {2, 5};
  vl_tensor *x = NULL, *y = NULL, *z = NULL;
  uint64_t seed, off;
  vl_manual_seed(7);
  CHECK_OK(vl_rand(1, s10, 0, 1, VL_F32, CPU, &x));
  vl_rng_get_state(&seed, &off);
  CHECK(seed == 7 && off == 3); /* 10 f32 draws use ceil(10 / 4) counters */
  CHECK_OK(vl_randn(1, s10, 0, 1, VL_F64, CPU, &z));
  vl_rng_get_state(&seed, &off);
  CHECK(off == 8); /* f64: 2 per counter */
  vl_manual_seed(7);
  CHECK_OK(vl_rand(1, s10, 0, 1, VL_F32, CPU, &y));
  double *xv = vl_test_values(x), *yv = vl_test_values(y);
  bool same = true, in_range = true, distinct = false;
  for (int i = 0; i < 10; i++) {
    same &= xv[i] == yv[i];
    in_range &= xv[i] > 0 && xv[i] < 1;
    distinct |= xv[i] != xv[0];
  }
  CHECK(same && in_range && distinct);
  free(yv);
  REL(y);
  /* a non-contiguous target gets the numbers of a contiguous draw, in its logical order */
  vl_manual_seed(7);
  vl_tensor *st = NULL, *t = NULL;
  int64_t s52[2] = {5, 2};
  CHECK_OK(vl_tensor_empty(2, s52, VL_F32, CPU, &st));
  CHECK_OK(vl_transpose(st, 0, 1, &t));
  CHECK_OK(vl_uniform_(t, 0, 1));
  double *tv = vl_test_values(t);
  bool match = true;
  for (int i = 0; i < 10; i++) match &= tv[i] == xv[i];
  CHECK(match);
  free(tv);
  CHECK_OK(vl_rand(2, s25, -3, -2, VL_F32, CPU, &y));
  double *y2 = vl_test_values(y);
  bool differs = false, range2 = true;
  for (int i = 0; i < 10; i++) {
    differs |= y2[i] + 3 != xv[i];
    range2 &= y2[i] > -3 && y2[i] < -2;
  }
  CHECK(differs && range2); /* the offset advanced: new numbers */
  free(y2);
  vl_tensor *bern = NULL;
  CHECK_OK(vl_bernoulli(1, s10, 0.5, VL_U8, CPU, &bern));
  double *bv = vl_test_values(bern);
  bool binary = true;
  for (int i = 0; i < 10; i++) binary &= bv[i] == 0 || bv[i] == 1;
  CHECK(binary);
  free(bv);
  vl_tensor *o = sentinel();
  CHECK_ERR(vl_rand(1, s10, 0, 1, VL_I32, CPU, &o), VL_EDTYPE, "rand: expected a float dtype");
  CHECK_ERR(vl_bernoulli(1, s10, 1.5, VL_F32, CPU, &o), VL_EINVAL, "bernoulli: expected p in [0, 1]");
  CHECK(o == sentinel());
  free(xv);
  REL(bern); REL(y); REL(t); REL(st); REL(x); REL(z);
}

int main(void) {
  if (!vl_test_init()) return 1;
  test_iter();
  test_broadcast_promotion();
  test_overlap_inplace();
  test_where_masked_unary();
  test_reductions();
  test_matmul();
  test_index_ops();
  test_cat_stack_split();
  test_copy_create();
  test_rng();
  vl_shutdown();
  return vl_test_finish();
}
