/* tests/c/vl_test.h: the harness every C unit test (tests/c/test_*.c) shares.
 *
 * Checks count into one pass/fail pair and print a "FAIL file:line: ..." line on failure, so a
 * failing run shows every broken check rather than stopping at the first; vl_test_finish()
 * prints the "N passed, N failed" line that ends each test's output and gives the exit status.
 * Random inputs come from one xorshift generator seeded by vl_test_seed(), so that a failure can
 * be replayed with V100_TEST_SEED. Everything is static (one copy per test executable): the
 * tests are separate programs and link nothing of each other. */
#ifndef VL_TEST_H
#define VL_TEST_H

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/context.h"
#include "runtime/ops/ops.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

static int vl_test_passed, vl_test_failed;

#if defined(__GNUC__)
#define VL_TEST_PRINTF_(f, a) __attribute__((format(printf, f, a)))
#else
#define VL_TEST_PRINTF_(f, a)
#endif

/* Counts one check; on failure prints "FAIL file:line: " and the text of the condition. */
static inline void vl_test_check_(bool ok, const char *file, int line, const char *cond) {
  if (ok) {
    vl_test_passed++;
    return;
  }
  vl_test_failed++;
  printf("FAIL %s:%d: %s\n", file, line, cond);
}

/* The same with a printf-style message in place of the condition's text. */
static inline VL_TEST_PRINTF_(4, 5) void vl_test_checkf_(bool ok, const char *file, int line, const char *fmt, ...) {
  if (ok) {
    vl_test_passed++;
    return;
  }
  vl_test_failed++;
  printf("FAIL %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  putchar('\n');
}

/* CHECK(cond) or CHECK(cond, fmt, ...). Plain C11 macros cannot make an argument optional, so the
 * number of arguments (up to 32) picks VL_TEST_CHECK_1 or VL_TEST_CHECK_M; both keep printf
 * format checking of the message. The condition's text is taken before macro expansion. */
/* The whole file p (malloc'ed, *n bytes); a test that cannot read its own fixture exits 2. */
static inline unsigned char *vl_test_slurp(const char *p, size_t *n) {
  FILE *f = fopen(p, "rb");
  if (!f) exit(2);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  if (!b || fread(b, 1, (size_t)len, f) != (size_t)len) exit(2);
  fclose(f);
  *n = (size_t)len;
  return b;
}

#define VL_TEST_CAT2_(a, b) a##b
#define VL_TEST_CAT_(a, b) VL_TEST_CAT2_(a, b)
#define VL_TEST_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17, _18, _19, _20, \
                      _21, _22, _23, _24, _25, _26, _27, _28, _29, _30, _31, _32, which, ...)                    \
  which
#define VL_TEST_ARITY_(...)                                                                                   \
  VL_TEST_PICK_(__VA_ARGS__, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, \
                M, M, M, 1, 0)
#define VL_TEST_CHECK_1(text, cond) vl_test_check_((cond) ? true : false, __FILE__, __LINE__, text)
#define VL_TEST_CHECK_M(text, cond, ...) vl_test_checkf_((cond) ? true : false, __FILE__, __LINE__, __VA_ARGS__)
#define CHECK(...) VL_TEST_CAT_(VL_TEST_CHECK_, VL_TEST_ARITY_(__VA_ARGS__))(#__VA_ARGS__, __VA_ARGS__)

static inline void vl_test_check_ok_(vl_status s, const char *file, int line, const char *expr) {
  if (s == VL_OK) {
    vl_test_passed++;
    return;
  }
  vl_test_failed++;
  printf("FAIL %s:%d: %s -> %s: %s\n", file, line, expr, vl_status_name(s), vl_errmsg());
}

static inline void vl_test_check_err_(vl_status s, vl_status code, const char *sub, const char *file, int line,
                                      const char *expr) {
  if (s == code && strstr(vl_errmsg(), sub)) {
    vl_test_passed++;
    return;
  }
  vl_test_failed++;
  printf("FAIL %s:%d: %s -> %s: '%s' (wanted %s with '%s')\n", file, line, expr, vl_status_name(s), vl_errmsg(),
         vl_status_name(code), sub);
}

/* The call returns VL_OK. */
#define CHECK_OK(expr) vl_test_check_ok_((expr), __FILE__, __LINE__, #expr)
/* The call fails with `code` and a message containing `sub`. */
#define CHECK_ERR(expr, code, sub) vl_test_check_err_((expr), (code), (sub), __FILE__, __LINE__, #expr)

/* Prints the last line of every test's output and returns the exit status (non-zero on failure). */
static inline int vl_test_finish(void) {
  printf("%d passed, %d failed\n", vl_test_passed, vl_test_failed);
  return vl_test_failed ? 1 : 0;
}

/* vl_init for tests that need the runtime; on failure the output still ends in the counts line. */
static inline bool vl_test_init(void) {
  if (vl_init() == VL_OK) return true;
  printf("vl_init failed: %s\n0 passed, 1 failed\n", vl_errmsg());
  return false;
}

/* ---- random numbers ---- */

static uint64_t vl_test_rng;

/* V100_TEST_SEED when set (to replay a failure), else the clock; seeds the generator. */
static inline uint64_t vl_test_seed(void) {
  const char *env = getenv("V100_TEST_SEED");
  uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL) ^ (uint64_t)clock();
  vl_test_rng = seed * 0x9E3779B97F4A7C15ull + 1;
  return seed;
}

/* Uniform in the open interval (0, 1): never 0, so that log(vl_test_urand()) is finite. */
static inline double vl_test_urand(void) {
  vl_test_rng ^= vl_test_rng << 13;
  vl_test_rng ^= vl_test_rng >> 7;
  vl_test_rng ^= vl_test_rng << 17;
  return ((double)(vl_test_rng >> 11) + 0.5) * 0x1p-53;
}

/* Standard normal (Box-Muller). */
static inline double vl_test_nrand(void) {
  return sqrt(-2.0 * log(vl_test_urand())) * cos(6.283185307179586 * vl_test_urand());
}

/* ---- tensors from and to doubles ---- */

/* A CPU tensor of dtype dt holding vals (row-major, rounded to dt); NULL if it cannot be made. */
static inline vl_tensor *vl_test_tensor(int ndim, const int64_t *size, vl_dtype dt, const double *vals) {
  vl_tensor *t = NULL;
  if (vl_tensor_empty(ndim, size, dt, vl_cpu_device(), &t) != VL_OK) return NULL;
  char *p = vl_tensor_data(t);
  for (int64_t i = 0; i < vl_tensor_numel(t); i++) vl_store_from_f64(p + i * vl_dtype_size(dt), dt, vals[i]);
  return t;
}

/* The values of any tensor, in logical row-major order, as doubles (malloc'd). */
static inline double *vl_test_values(vl_tensor *t) {
  int64_t n = vl_tensor_numel(t);
  size_t es = vl_dtype_size(t->dtype);
  char *buf = malloc((size_t)(n ? n : 1) * es);
  double *out = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (vl_to_host(t, buf) != VL_OK) printf("to_host failed: %s\n", vl_errmsg());
  for (int64_t i = 0; i < n; i++) out[i] = vl_load_as_f64(buf + (size_t)i * es, t->dtype);
  free(buf);
  return out;
}


/* ---- raw host buffers (the kernel tests) ---- */

/* Element i of a dense host buffer of dtype dt, as a double; and the store (rounded to dt). */
static inline double vl_test_ld(const void *p, vl_dtype dt, int64_t i) {
  return vl_load_as_f64((const char *)p + i * (int64_t)vl_dtype_size(dt), dt);
}
static inline void vl_test_st(void *p, vl_dtype dt, int64_t i, double v) {
  vl_store_from_f64((char *)p + i * (int64_t)vl_dtype_size(dt), dt, v);
}
/* Equal, or both NaN; and that or within tol relative to (1 + |b|). */
static inline bool vl_test_same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }
static inline bool vl_test_close(double a, double b, double tol) {
  return vl_test_same(a, b) || fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* The test's own rounding of an exactly-representable-in-f32 double to dtype dt. Float to
 * integer: truncation, saturation for i32/i64, NaN -> 0, u8 wraps the (saturated) int64, bool is
 * != 0. */
static inline double vl_test_sat_i64_(double v) {
  return isnan(v) ? 0 : v >= 0x1p63 ? 0x1p63 : v < -0x1p63 ? -0x1p63 : trunc(v);
}
static inline double vl_test_conv(double v, vl_dtype dt) {
  switch (dt) {
    case VL_F32: return (float)v;
    case VL_F16: return vl_f16_to_f32(vl_f32_to_f16((float)v));
    case VL_BF16: return vl_bf16_to_f32(vl_f32_to_bf16((float)v));
    case VL_F64: return v;
    case VL_I32: return isnan(v) ? 0 : v >= 2147483647.0 ? 2147483647.0 : v <= -2147483648.0 ? -2147483648.0 : trunc(v);
    case VL_I64: return vl_test_sat_i64_(v);
    case VL_U8: return (double)(uint8_t)(v >= 0x1p63 ? 255 : (int64_t)vl_test_sat_i64_(v));
    case VL_BOOL: return v != 0;
    default: return NAN;
  }
}

/* Uniform in [-1, 1) on multiples of 2^-10 (exact in every float dtype), from a fixed seed: the
 * same inputs on every run, unlike vl_test_urand. */
static uint64_t vl_test_lcg = 12345;
static inline double vl_test_rnd(void) {
  vl_test_lcg = vl_test_lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (double)((int64_t)(vl_test_lcg >> 53) - 1024) / 1024.0;
}

#endif
