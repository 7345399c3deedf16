/* tests/c/test_cpu_kernels.c: the CPU op table against direct computations: GEMM, reductions,
 * softmax, the index ops (gather, scatter_add, index_select) and random numbers.
 *
 * Argument structs are built by hand over small host arrays (contiguous, strided, transposed), so
 * these tests need nothing of the runtime but dtype.c and status.c; the elementwise kernels are in
 * test_cpu_elementwise.c. The last line is "N passed, N failed"; the exit status is non-zero on
 * failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/kernels.h"
#include "runtime/core/philox.h"
#include "vl_test.h"

static const vl_kernels *K = &vl_cpu_kernels;
static const vl_dtype ALL[] = {VL_F32, VL_F16, VL_BF16, VL_F64, VL_I32, VL_I64, VL_U8, VL_BOOL};
#define NALL 8

/* ---- GEMM ---- */
static void gemm_case(vl_dtype d, bool ta, bool tb, int64_t batch, int64_t sa, int64_t sb, double beta) {
  enum { M = 3, N = 4, KK = 5, PAD = 2 };
  int64_t ar = ta ? KK : M, ac = ta ? M : KK, br = tb ? N : KK, bc = tb ? KK : N;
  int64_t lda = ac + PAD, ldb = bc + 1, ldc = N + 3;
  int64_t stra = sa ? ar * lda : 0, strb = sb ? br * ldb : 0, strc = M * ldc;
  size_t es = vl_dtype_size(d);
  char *A = calloc((size_t)(ar * lda * batch), es), *B = calloc((size_t)(br * ldb * batch), es);
  char *C = calloc((size_t)(strc * batch), es);
  double *want = calloc((size_t)(strc * batch), sizeof(double));
  for (int64_t i = 0; i < ar * lda * batch; i++) vl_test_st(A, d, i, vl_test_rnd());
  for (int64_t i = 0; i < br * ldb * batch; i++) vl_test_st(B, d, i, vl_test_rnd());
  for (int64_t i = 0; i < strc * batch; i++) vl_test_st(C, d, i, beta == 0 ? NAN : vl_test_rnd());
  double alpha = 1.5;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < KK; k++) {
          double x = vl_test_ld(A, d, b * stra + (ta ? k * lda + i : i * lda + k));
          double y = vl_test_ld(B, d, b * strb + (tb ? j * ldb + k : k * ldb + j));
          s += x * y;
        }
        int64_t ci = b * strc + i * ldc + j;
        want[ci] = alpha * s + (beta == 0 ? 0 : beta * vl_test_ld(C, d, ci));
      }
  vl_gemm_args g = {d, ta, tb, M, N, KK, batch, A, lda, stra, B, ldb, strb, C, ldc, strc, alpha, beta,
                    false, {0, NULL}};
  CHECK(K->gemm(&g) == VL_OK, "gemm status");
  double tol = d == VL_F64 ? 1e-14 : d == VL_F32 ? 1e-6 : d == VL_F16 ? 2e-3 : 1e-2;
  bool ok = true;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        int64_t ci = b * strc + i * ldc + j;
        if (!vl_test_close(vl_test_ld(C, d, ci), want[ci], tol)) {
          ok = false;
          printf("  gemm %s [%lld,%lld,%lld] got %g want %g\n", vl_dtype_name(d), (long long)b,
                 (long long)i, (long long)j, vl_test_ld(C, d, ci), want[ci]);
        }
      }
  CHECK(ok, "gemm %s ta=%d tb=%d batch=%lld sa=%lld sb=%lld beta=%g", vl_dtype_name(d), ta, tb,
        (long long)batch, (long long)sa, (long long)sb, beta);
  free(A); free(B); free(C); free(want);
}

static void test_gemm(void) {
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int di = 0; di < 4; di++)
    for (int t = 0; t < 4; t++) {
      gemm_case(fl[di], t & 1, t & 2, 1, 1, 1, 0.0);
      gemm_case(fl[di], t & 1, t & 2, 3, 1, 0, 0.5);
      gemm_case(fl[di], t & 1, t & 2, 2, 0, 1, 0.0);
    }
  /* k == 0: C = beta * C, and beta == 0 does not read C (NaN becomes 0). */
  float c[4] = {NAN, NAN, 2, 4};
  vl_gemm_args g = {VL_F32, false, false, 1, 2, 0, 2, NULL, 0, 0, NULL, 2, 0, c, 2, 2, 1.0, 0.0,
                    false, {0, NULL}};
  K->gemm(&g);
  CHECK(c[0] == 0 && c[1] == 0 && c[2] == 0, "gemm k=0 beta=0");
  c[2] = 2;
  c[3] = 4;
  g.beta = 0.5;
  g.batch = 1;
  g.c = c + 2;
  K->gemm(&g);
  CHECK(c[2] == 1 && c[3] == 2, "gemm k=0 beta=0.5");
  /* A single-row A with an unusable lda (0) is still multiplied. */
  float a1[3] = {1, 2, 3}, b1[6] = {1, 0, 0, 1, 1, 1}, c1[2];
  vl_gemm_args g1 = {VL_F32, false, false, 1, 2, 3, 1, a1, 0, 0, b1, 2, 0, c1, 0, 0, 1.0, 0.0,
                     false, {0, NULL}};
  CHECK(K->gemm(&g1) == VL_OK && c1[0] == 4 && c1[1] == 5, "gemm single row lda=0");
}

/* ---- reductions ---- */
static void reduce_case(vl_reduce_op op, vl_dtype d, int64_t outer, int64_t len, int64_t inner,
                        double param) {
  int64_t n = outer * len * inner, nout = outer * inner;
  bool isint = vl_dtype_is_int(d);
  vl_dtype dout = isint && (op == VL_RED_SUM || op == VL_RED_PROD) ? VL_I64 : d;
  char *in = malloc((size_t)n * vl_dtype_size(d)), *out = malloc((size_t)nout * 8);
  int64_t *idx = malloc((size_t)nout * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++)
    vl_test_st(in, d, i,
               isint ? (double)((i * 7919) % 11 - 5) : op == VL_RED_PROD ? 1 + vl_test_rnd() / 8 : vl_test_rnd());
  vl_reduce_args ra = {op, d, dout, in, out, idx, outer, len, inner, param, {0, NULL}};
  CHECK(K->reduce(&ra) == VL_OK, "reduce status");
  bool ok = true;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      double acc = op == VL_RED_PROD ? 1 : 0, best = NAN, mean = 0;
      int64_t bi = -1;
      for (int64_t l = 0; l < len; l++) mean += vl_test_ld(in, d, (o * len + l) * inner + j);
      mean /= (double)len;
      for (int64_t l = 0; l < len; l++) {
        double x = vl_test_ld(in, d, (o * len + l) * inner + j);
        switch (op) {
          case VL_RED_PROD: acc *= x; break;
          case VL_RED_VAR: acc += (x - mean) * (x - mean); break;
          case VL_RED_NORM:
            acc = param == INFINITY ? fmax(acc, fabs(x)) : acc + pow(fabs(x), param); break;
          case VL_RED_MAX: if (bi < 0 || x > best) { best = x; bi = l; } break;
          case VL_RED_MIN: if (bi < 0 || x < best) { best = x; bi = l; } break;
          default: acc += x; break;
        }
      }
      double want = op == VL_RED_MEAN ? acc / (double)len
                  : op == VL_RED_VAR ? acc / ((double)len - param)
                  : op == VL_RED_NORM && param != INFINITY ? pow(acc, 1 / param)
                  : op == VL_RED_MAX || op == VL_RED_MIN ? best : acc;
      double tol = d == VL_F64 || isint ? 1e-12 : d == VL_F32 ? 1e-6 : d == VL_F16 ? 1e-3 : 8e-3;
      double got = vl_test_ld(out, dout, o * inner + j);
      bool good = vl_test_close(got, dout == VL_F64 || isint ? want : vl_test_conv(want, dout), tol);
      if ((op == VL_RED_MAX || op == VL_RED_MIN) && idx[o * inner + j] != bi) good = false;
      if (!good) printf("  reduce op %d [%lld,%lld] got %.17g want %.17g\n", (int)op, (long long)o,
                        (long long)j, got, want);
      ok &= good;
    }
  CHECK(ok, "reduce op %d %s [%lld,%lld,%lld] p=%g", (int)op, vl_dtype_name(d), (long long)outer,
        (long long)len, (long long)inner, param);
  free(in); free(out); free(idx);
}

static void test_reduce(void) {
  const int64_t shapes[][3] = {{2, 5, 3}, {3, 7, 1}, {1, 600, 1}, {2, 3, 300}, {1, 1, 4}};
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int s = 0; s < 5; s++) {
    const int64_t *sh = shapes[s];
    for (int di = 0; di < 4; di++) {
      vl_dtype d = fl[di];
      reduce_case(VL_RED_SUM, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MEAN, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MAX, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MIN, d, sh[0], sh[1], sh[2], 0);
      if (sh[1] > 1) reduce_case(VL_RED_VAR, d, sh[0], sh[1], sh[2], 1);
      reduce_case(VL_RED_VAR, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], 1);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], 2);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], INFINITY);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], 3);
      if (sh[1] < 100) reduce_case(VL_RED_PROD, d, sh[0], sh[1], sh[2], 0);
    }
    for (int di = 4; di < NALL; di++) {
      reduce_case(VL_RED_SUM, ALL[di], sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MAX, ALL[di], sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MIN, ALL[di], sh[0], sh[1], sh[2], 0);
      if (sh[1] < 20) reduce_case(VL_RED_PROD, ALL[di], sh[0], sh[1], sh[2], 0);
    }
  }
  /* NaN: the first NaN wins with its index; ties keep the first index. */
  float x[12] = {1, 5, 5, 2, /**/ 3, NAN, 9, NAN, /**/ 7, 7, 7, 7}, out[3];
  int64_t idx[3];
  vl_reduce_args ra = {VL_RED_MAX, VL_F32, VL_F32, x, out, idx, 3, 4, 1, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(out[0] == 5 && idx[0] == 1 && isnan(out[1]) && idx[1] == 1 && idx[2] == 0, "max NaN/ties");
  ra.op = VL_RED_MIN;
  K->reduce(&ra);
  CHECK(out[0] == 1 && idx[0] == 0 && isnan(out[1]) && idx[1] == 1, "min NaN");
  /* Same with lanes (inner = 3): column 1 holds NaN at position 2. */
  float y[9] = {1, 2, 3, 4, 0, 3, 0, NAN, 3};
  ra = (vl_reduce_args){VL_RED_MAX, VL_F32, VL_F32, y, out, idx, 1, 3, 3, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(out[0] == 4 && idx[0] == 1 && isnan(out[1]) && idx[1] == 2 && out[2] == 3 && idx[2] == 0,
        "max lanes NaN/ties");
  ra.indices = NULL;
  CHECK(K->reduce(&ra) == VL_OK && out[0] == 4, "max without indices");
  /* Integer sums are i64 and do not wrap at the input width; empty reductions. */
  uint8_t u[4] = {255, 255, 255, 255};
  int64_t s;
  ra = (vl_reduce_args){VL_RED_SUM, VL_U8, VL_I64, u, &s, NULL, 1, 4, 1, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(s == 1020, "u8 sum to i64 %lld", (long long)s);
  double e[3];
  ra = (vl_reduce_args){VL_RED_SUM, VL_F64, VL_F64, u, e, NULL, 3, 0, 1, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(e[0] == 0 && e[2] == 0, "empty sum");
  ra.op = VL_RED_PROD;
  K->reduce(&ra);
  CHECK(e[1] == 1, "empty prod");
  ra.op = VL_RED_MEAN;
  K->reduce(&ra);
  CHECK(isnan(e[0]), "empty mean NaN");
  /* VAR is stable for a large offset (naive E[x^2] - E[x]^2 would lose it all). */
  double v[4] = {1e9 + 1, 1e9 + 2, 1e9 + 3, 1e9 + 4}, var;
  ra = (vl_reduce_args){VL_RED_VAR, VL_F64, VL_F64, v, &var, NULL, 1, 4, 1, 1, {0, NULL}};
  K->reduce(&ra);
  CHECK(fabs(var - 5.0 / 3.0) < 1e-9, "var stable %.17g", var);
}

static void softmax_case(vl_dtype d, int64_t outer, int64_t len, int64_t inner, bool log_out) {
  int64_t n = outer * len * inner;
  char *in = malloc((size_t)n * 8), *out = malloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++) vl_test_st(in, d, i, vl_test_rnd() * 20);
  vl_softmax_args sa = {d, in, out, outer, len, inner, log_out, {0, NULL}};
  CHECK(K->softmax(&sa) == VL_OK, "softmax status");
  bool ok = true;
  double tol = d == VL_F64 ? 1e-13 : d == VL_F32 ? 1e-6 : d == VL_F16 ? 1e-3 : 8e-3;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t l = 0; l < len; l++) mx = fmax(mx, vl_test_ld(in, d, (o * len + l) * inner + j));
      for (int64_t l = 0; l < len; l++) sum += exp(vl_test_ld(in, d, (o * len + l) * inner + j) - mx);
      for (int64_t l = 0; l < len; l++) {
        int64_t i = (o * len + l) * inner + j;
        double x = vl_test_ld(in, d, i) - mx;
        double want = log_out ? x - log(sum) : exp(x) / sum;
        ok &= vl_test_close(vl_test_ld(out, d, i), d == VL_F64 ? want : vl_test_conv(want, d), tol);
      }
    }
  CHECK(ok, "softmax %s [%lld,%lld,%lld] log=%d", vl_dtype_name(d), (long long)outer, (long long)len,
        (long long)inner, log_out);
  free(in); free(out);
}

static void test_softmax(void) {
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int di = 0; di < 4; di++)
    for (int lg = 0; lg < 2; lg++) {
      softmax_case(fl[di], 2, 4, 3, lg);
      softmax_case(fl[di], 3, 5, 1, lg);
      softmax_case(fl[di], 1, 700, 1, lg);
      softmax_case(fl[di], 2, 3, 260, lg);
    }
  float x[4] = {1, NAN, 2, 3}, o[4];
  vl_softmax_args sa = {VL_F32, x, o, 1, 4, 1, false, {0, NULL}};
  K->softmax(&sa);
  CHECK(isnan(o[0]) && isnan(o[3]), "softmax NaN row");
  float big[2] = {1000, 1000};
  sa.in = big;
  sa.len = 2;
  K->softmax(&sa);
  CHECK(o[0] == 0.5f && o[1] == 0.5f, "softmax large inputs");
}

/* ---- index ops ---- */
static vl_strided strided(void *data, vl_dtype dt, int ndim, const int64_t *size, const int64_t *stride) {
  vl_strided s;
  memset(&s, 0, sizeof s);
  s.data = data;
  s.dtype = dt;
  s.ndim = ndim;
  int64_t c = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    s.size[d] = size[d];
    s.stride[d] = stride ? stride[d] : c;
    c *= size[d];
  }
  return s;
}

static void test_gather(void) {
  /* src [3,4] stored transposed (storage [4,3], strides 1, 3): src[i][j] = 10 i + j. */
  float store[12];
  int64_t ss[2] = {3, 4}, sst[2] = {1, 3};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) store[i + 3 * j] = (float)(10 * i + j);
  /* dim 1 (0-based), i64 index [3,2]. */
  int64_t ix[6] = {3, 0, 1, 1, 2, 3}, is[2] = {3, 2};
  float out[6];
  vl_index_args a = {"gather", strided(out, VL_F32, 2, is, NULL), strided(store, VL_F32, 2, ss, sst),
                     strided(ix, VL_I64, 2, is, NULL), 1, {0, NULL}};
  CHECK(K->gather(&a) == VL_OK, "gather status");
  bool ok = true;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) ok &= out[i * 2 + j] == (float)(10 * i + ix[i * 2 + j]);
  CHECK(ok, "gather dim 1 i64");
  /* dim 0, i32 index [2,4]. */
  int32_t jx[8] = {2, 0, 1, 2, 0, 0, 2, 1};
  int64_t js[2] = {2, 4};
  float out2[8];
  a.out = strided(out2, VL_F32, 2, js, NULL);
  a.index = strided(jx, VL_I32, 2, js, NULL);
  a.dim = 0;
  K->gather(&a);
  ok = true;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) ok &= out2[i * 4 + j] == (float)(10 * jx[i * 4 + j] + j);
  CHECK(ok, "gather dim 0 i32");
  /* Out of range: error naming the 1-based dim, output untouched. */
  for (int i = 0; i < 8; i++) out2[i] = -1;
  jx[7] = 3;
  vl_status s = K->gather(&a);
  bool untouched = true;
  for (int i = 0; i < 8; i++) untouched &= out2[i] == -1;
  CHECK(s == VL_EINVAL && untouched, "gather out of range: status %d", (int)s);
  CHECK(strcmp(vl_errmsg(), "gather: index 3 is out of bounds for dim 1 with size 3 (index values are 0-based: 0 to 2)") == 0,
        "gather message: %s", vl_errmsg());
}

static void test_scatter_add(void) {
  /* out [3,4] f64 of ones; dim 0; index [2,4] with duplicates; src [3,4] (only [2,4] used). */
  double out[12], src[12];
  for (int i = 0; i < 12; i++) { out[i] = 1; src[i] = i + 1; }
  int64_t ix[8] = {0, 2, 2, 1, 0, 2, 0, 1}, os[2] = {3, 4}, is[2] = {2, 4};
  double want[12];
  memcpy(want, out, sizeof want);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) want[ix[i * 4 + j] * 4 + j] += src[i * 4 + j];
  vl_index_args a = {"scatter_add", strided(out, VL_F64, 2, os, NULL), strided(src, VL_F64, 2, os, NULL),
                     strided(ix, VL_I64, 2, is, NULL), 0, {0, NULL}};
  CHECK(K->scatter_add(&a) == VL_OK && memcmp(out, want, sizeof out) == 0, "scatter_add f64 dim 0");
  /* Integer wrap in i32, dim 1. */
  int32_t io[2] = {INT32_MAX, 0}, isrc[3] = {1, 5, 7};
  int32_t ii[3] = {0, 1, 1};
  int64_t s1[2] = {1, 2}, s3[2] = {1, 3};
  a = (vl_index_args){"scatter_add", strided(io, VL_I32, 2, s1, NULL), strided(isrc, VL_I32, 2, s3, NULL),
                      strided(ii, VL_I32, 2, s3, NULL), 1, {0, NULL}};
  K->scatter_add(&a);
  CHECK(io[0] == INT32_MIN && io[1] == 12, "scatter_add i32 wrap");
  /* A bad index after good ones: nothing is written. */
  ix[7] = -1;
  memcpy(want, out, sizeof want);
  a = (vl_index_args){"scatter_add", strided(out, VL_F64, 2, os, NULL), strided(src, VL_F64, 2, os, NULL),
                      strided(ix, VL_I64, 2, is, NULL), 0, {0, NULL}};
  vl_status s = K->scatter_add(&a);
  CHECK(s == VL_EINVAL && memcmp(out, want, sizeof out) == 0, "scatter_add bad index untouched");
  CHECK(strcmp(vl_errmsg(), "scatter_add: index -1 is out of bounds for dim 1 with size 3 (index values are 0-based: 0 to 2)") == 0,
        "scatter_add message: %s", vl_errmsg());
}

static void test_index_select(void) {
  uint8_t src[12], out[9];
  for (int i = 0; i < 12; i++) src[i] = (uint8_t)(i * 3);
  int32_t ix[3] = {3, 0, 3};
  int64_t ss[2] = {3, 4}, os[2] = {3, 3}, is[1] = {3};
  vl_index_args a = {"index_select", strided(out, VL_U8, 2, os, NULL), strided(src, VL_U8, 2, ss, NULL),
                     strided(ix, VL_I32, 1, is, NULL), 1, {0, NULL}};
  CHECK(K->index_select(&a) == VL_OK, "index_select status");
  bool ok = true;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) ok &= out[i * 3 + j] == src[i * 4 + ix[j]];
  CHECK(ok, "index_select dim 1");
  /* dim 0 with a strided i64 index (every other element) into a [2,4] output. */
  int64_t lx[4] = {2, 99, 1, 99}, lstr[1] = {2}, ls[1] = {2}, o2s[2] = {2, 4};
  uint8_t out2[8];
  a.out = strided(out2, VL_U8, 2, o2s, NULL);
  a.index = strided(lx, VL_I64, 1, ls, lstr);
  a.dim = 0;
  K->index_select(&a);
  ok = true;
  for (int j = 0; j < 4; j++) ok &= out2[j] == src[8 + j] && out2[4 + j] == src[4 + j];
  CHECK(ok, "index_select dim 0 strided index");
  lx[2] = 3;
  memset(out2, 7, sizeof out2);
  vl_status s = K->index_select(&a);
  CHECK(s == VL_EINVAL && out2[0] == 7 && out2[7] == 7, "index_select bad index untouched");
  CHECK(strstr(vl_errmsg(), "index 3 is out of bounds for dim 1 with size 3") != NULL, "msg %s", vl_errmsg());
}

/* ---- random ---- */
static vl_rand_args rargs(vl_rand_kind k, vl_dtype d, void *out, int64_t n, uint64_t off, double a, double b) {
  vl_rand_args r = {k, d, out, n, 42, off, a, b, {0, NULL}};
  return r;
}

/* Graph capture's contract (kernels.h): a base {seed, first} in memory overrides the key and adds
 * to the counter, so a draw with base {42, 5} and offset 3 is the draw of seed 42 at offset 8. */
static void test_rand_base(void) {
  float want[12], got[12];
  vl_rand_args r = rargs(VL_RAND_NORMAL, VL_F32, want, 12, 8, 0, 1);
  K->rand(&r);
  const uint64_t base[2] = {42, 5};
  r = rargs(VL_RAND_NORMAL, VL_F32, got, 12, 3, 0, 1);
  r.seed = 7; /* ignored: the base holds the key */
  r.base = base;
  K->rand(&r);
  CHECK(memcmp(want, got, sizeof want) == 0, "rand with a base = rand at seed base[0], offset base[1] + offset");
}

/* INT (randint) and EXPONENTIAL against runtime/core/philox.h's mapping computed here, the wide
 * mapping's 64x64 high product against __int128. */
static void test_rand_int_exp(void) {
  bool ok = true;
  const uint64_t xs[] = {0, 1, 0xFFFFFFFFu, 0x100000000ull, 0xDEADBEEFCAFEF00Dull, UINT64_MAX};
  for (int i = 0; i < 6; i++)
    for (int j = 0; j < 6; j++) ok &= vl_mulhi64(xs[i], xs[j]) == (uint64_t)(((unsigned __int128)xs[i] * xs[j]) >> 64);
  CHECK(ok, "vl_mulhi64 = the high half of the 128-bit product");
  int64_t v[9];
  vl_rand_args r = rargs(VL_RAND_INT, VL_I64, v, 9, 3, 0, 0);
  r.lo = -5;
  r.range = 12;
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 9; i++) ok &= v[i] == -5 + (int64_t)(((uint64_t)vl_philox(42, 3 + (uint64_t)i / 4).x[i % 4] * 12) >> 32);
  CHECK(ok, "randint [-5, 7) narrow mapping");
  int32_t w[5];
  r = rargs(VL_RAND_INT, VL_I32, w, 5, 0, 0, 0);
  r.lo = 1000;
  r.range = ((uint64_t)1 << 40) + 7; /* two words a value */
  int64_t wide[5];
  vl_rand_args r64 = r;
  r64.dtype = VL_I64;
  r64.out = wide;
  K->rand(&r64);
  ok = true;
  for (int i = 0; i < 5; i++) {
    vl_philox4 p = vl_philox(42, (uint64_t)i / 2);
    uint64_t x = ((uint64_t)p.x[2 * (i % 2)] << 32) | p.x[2 * (i % 2) + 1];
    ok &= wide[i] == 1000 + (int64_t)(((unsigned __int128)x * r.range) >> 64);
  }
  CHECK(ok, "randint wide mapping (2 elements a counter)");
  r.range = 100;
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 5; i++) ok &= w[i] >= 1000 && w[i] < 1100;
  CHECK(ok, "randint into i32");
  float e[6];
  r = rargs(VL_RAND_EXPONENTIAL, VL_F32, e, 6, 0, 2.0, 0);
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 6; i++) ok &= e[i] == (float)(-log(vl_ubits(vl_philox(42, (uint64_t)i / 4).x[i % 4], 23)) / 2.0);
  CHECK(ok, "exponential f32 mapping");
}

static void test_rand(void) {
  /* The first values for seed 42, computed here from runtime/core/philox.h directly. */
  float f[10];
  K->rand(&(vl_rand_args){VL_RAND_UNIFORM, VL_F32, f, 10, 42, 0, 0, 1, {0, NULL}});
  bool ok = true;
  for (int i = 0; i < 10; i++) ok &= f[i] == (float)vl_ubits(vl_philox(42, (uint64_t)i / 4).x[i % 4], 23);
  CHECK(ok, "uniform f32 seed 42 stream");
  double d[5];
  vl_rand_args r = rargs(VL_RAND_UNIFORM, VL_F64, d, 5, 0, 0, 1);
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 5; i++) {
    vl_philox4 p = vl_philox(42, (uint64_t)i / 2);
    ok &= d[i] == vl_u52(p.x[2 * (i % 2)], p.x[2 * (i % 2) + 1]);
  }
  CHECK(ok, "uniform f64 seed 42 stream");
  float z[6];
  r = rargs(VL_RAND_NORMAL, VL_F32, z, 6, 0, 0.5, 2);
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 6; i++) {
    vl_philox4 p = vl_philox(42, (uint64_t)i / 4);
    int j = i % 4 & ~1;
    double u1 = vl_ubits(p.x[j], 23), u2 = vl_ubits(p.x[j + 1], 23), rr = sqrt(-2 * log(u1));
    double zz = (i % 2 ? sin(6.283185307179586 * u2) : cos(6.283185307179586 * u2)) * rr;
    ok &= fabs(z[i] - (float)(0.5 + 2 * zz)) <= 1e-6f * (1 + fabsf(z[i]));
  }
  CHECK(ok, "normal f32 seed 42 stream");
  /* The offset is a counter: offset 3 continues at element 12. */
  float g[16], h[4];
  r = rargs(VL_RAND_UNIFORM, VL_F32, g, 16, 0, -2, 3);
  K->rand(&r);
  r = rargs(VL_RAND_UNIFORM, VL_F32, h, 4, 3, -2, 3);
  K->rand(&r);
  CHECK(memcmp(g + 12, h, sizeof h) == 0 && g[0] == (float)(-2 + 5 * vl_ubits(vl_philox(42, 0).x[0], 23)),
        "offset and bounds");
  uint16_t hf[8];
  r = rargs(VL_RAND_UNIFORM, VL_F16, hf, 8, 0, 0, 1);
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 8; i++)
    ok &= vl_f16_to_f32(hf[i]) == (float)vl_ubits(vl_philox(42, (uint64_t)i / 4).x[i % 4], 10);
  CHECK(ok, "uniform f16: 10-bit draws, exact in f16");
  /* The largest draw of each resolution stays below 1 after rounding to its dtype (a 24-bit
   * draw for f32 once rounded up to 1.0, and rand's (0, 1) promise broke about once in 2^24). */
  CHECK((float)vl_ubits(0xFFFFFFFFu, 23) < 1.0f && (float)vl_ubits(0u, 23) > 0.0f, "f32 uniform inside (0, 1)");
  CHECK(vl_test_conv(vl_ubits(0xFFFFFFFFu, 10), VL_F16) < 1.0 && vl_test_conv(vl_ubits(0u, 10), VL_F16) > 0.0,
        "f16 uniform inside (0, 1)");
  CHECK(vl_test_conv(vl_ubits(0xFFFFFFFFu, 7), VL_BF16) < 1.0 && vl_test_conv(vl_ubits(0u, 7), VL_BF16) > 0.0,
        "bf16 uniform inside (0, 1)");
  CHECK(vl_u52(0xFFFFFFFFu, 0xFFFFFFFFu) < 1.0 && vl_u52(0u, 0u) > 0.0, "f64 uniform inside (0, 1)");

  /* Distributions over 100k draws. */
  enum { M = 100000 };
  float *uf = malloc(M * sizeof *uf);
  double *ud = malloc(M * sizeof *ud);
  r = rargs(VL_RAND_UNIFORM, VL_F32, uf, M, 7, 0, 1);
  K->rand(&r);
  double lo = 1, hi = 0, s = 0;
  for (int i = 0; i < M; i++) { lo = fmin(lo, uf[i]); hi = fmax(hi, uf[i]); s += uf[i]; }
  CHECK(lo > 0 && hi < 1 && fabs(s / M - 0.5) < 0.01, "uniform f32 in (0,1): %g %g mean %g", lo, hi, s / M);
  r = rargs(VL_RAND_UNIFORM, VL_F64, ud, M, 7, 0, 1);
  K->rand(&r);
  lo = 1, hi = 0;
  for (int i = 0; i < M; i++) { lo = fmin(lo, ud[i]); hi = fmax(hi, ud[i]); }
  CHECK(lo > 0 && hi < 1, "uniform f64 in (0,1)");
  const vl_dtype nd[2] = {VL_F64, VL_F32};
  for (int t = 0; t < 2; t++) {
    r = rargs(VL_RAND_NORMAL, nd[t], nd[t] == VL_F64 ? (void *)ud : (void *)uf, M, 0, 0, 1);
    K->rand(&r);
    double m = 0, v = 0;
    for (int i = 0; i < M; i++) m += nd[t] == VL_F64 ? ud[i] : uf[i];
    m /= M;
    for (int i = 0; i < M; i++) {
      double x = (nd[t] == VL_F64 ? ud[i] : uf[i]) - m;
      v += x * x;
    }
    double sd = sqrt(v / (M - 1));
    CHECK(fabs(m) < 0.02 && fabs(sd - 1) < 0.02, "normal %s mean %g std %g", vl_dtype_name(nd[t]), m, sd);
  }
  /* Bernoulli: u < p with the f32 word mapping for every dtype. */
  uint8_t *bu = malloc(1001);
  r = rargs(VL_RAND_BERNOULLI, VL_U8, bu, 1001, 5, 0.3, 0);
  K->rand(&r);
  r = rargs(VL_RAND_BERNOULLI, VL_F64, ud, 1001, 5, 0.3, 0);
  K->rand(&r);
  ok = true;
  int ones = 0;
  for (int i = 0; i < 1001; i++) {
    int want = vl_ubits(vl_philox(42, 5 + (uint64_t)i / 4).x[i % 4], 23) < 0.3;
    ok &= bu[i] == want && ud[i] == want;
    ones += bu[i];
  }
  CHECK(ok && ones > 240 && ones < 360, "bernoulli u8/f64 (%d ones)", ones);
  free(uf); free(ud); free(bu);
}

int main(void) {
  test_gemm();
  test_reduce();
  test_softmax();
  test_gather();
  test_scatter_add();
  test_index_select();
  test_rand();
  test_rand_base();
  test_rand_int_exp();
  return vl_test_finish();
}
