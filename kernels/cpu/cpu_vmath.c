/* kernels/cpu/cpu_vmath.c: the instances of cpu_vmath_impl.h and the choice between them.
 *
 * One instance per instruction set, each a table of functions: "avx2" (8 lanes, AVX2 + FMA,
 * x86-64 only, compiled with a target attribute so the binary still runs on any x86-64) and
 * "generic" (4 lanes: SSE2 on x86-64, NEON on aarch64, plain C elsewhere). The table is picked
 * once, from the CPU's features, before the first op uses it; every thread then runs the same
 * code, which keeps results independent of the thread count. (A hand-made dispatch rather than
 * GCC's target_clones: the AVX2 instance must use explicit fused multiply-adds, since the
 * project's ISO C mode turns off the contraction of a * b + c.) */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cpu/cpu_vmath.h"
#include "kernels/ew_formulas.h" /* the scalar formulas, for lanes the vector code leaves */

/* Vectors wider than the baseline ABI's never cross a call: the helpers are always inlined. */
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wpsabi"
#elif defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

typedef struct {
  const char *name;
  bool (*unary)(vl_unary_op op, float *o, const float *x, int64_t n);
  bool (*binary)(vl_binary_op op, float *o, const float *a, const float *b, int64_t b_stride,
                 double bd, double alpha, bool rev, int64_t n);
  void (*softmax_row)(const float *x, float *y, int64_t len, bool log_out);
  void (*softmax_bw_row)(const float *y, const float *g, float *dx, int64_t len, bool log_out);
  void (*sum_lanes)(const float *x, int64_t ld, int64_t len, int64_t w, double *acc);
  double (*sum_row)(const float *x, int64_t n);
  void (*ext_row)(const float *x, int64_t n, bool max, double *val, int64_t *idx);
  void (*ext_lanes)(const float *x, int64_t ld, int64_t len, int64_t w, bool max, double *val, int64_t *idx);
  void (*ln_row)(const float *x, float *y, int64_t n, const double *w, const double *b, double eps, double *mean,
                 double *rstd);
  void (*ln_bw_row)(const float *x, const float *g, float *dx, int64_t n, double mean, double rstd, const double *w,
                    double *dw, double *db);
  void (*philox_f32)(uint64_t seed, uint64_t first, int64_t g0, int64_t n, bool bernoulli, uint32_t thresh,
                     double a, double b, float *out);
} vl_vm_table;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define VL_VM_HAVE_AVX2 1
#include <immintrin.h>
#define VM_SFX avx512
#define VM_NAME "avx512"
#define VW 16
#define VM_ATTR __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,fma")))
#define VM_FMA(a, b, c) \
  ((__typeof__(a))_mm512_fmadd_ps((__m512)(a), (__m512)(b), (__m512)(c)))
#define VM_DHW __m512d
#define VM_DFMA _mm512_fmadd_pd
#define VM_FSQRT(v) ((__typeof__(v))_mm512_sqrt_ps((__m512)(v)))
#define VM_DSQRT_T __m512d
#define VM_DSQRT _mm512_sqrt_pd
#include "kernels/cpu/cpu_vmath_impl.h"
#undef VM_SFX
#undef VM_NAME
#undef VW
#undef VM_ATTR
#undef VM_FMA
#undef VM_DHW
#undef VM_DFMA
#undef VM_FSQRT
#undef VM_DSQRT_T
#undef VM_DSQRT

#define VM_SFX avx2
#define VM_NAME "avx2"
#define VW 8
#define VM_ATTR __attribute__((target("avx2,fma")))
#define VM_FMA(a, b, c) \
  ((__typeof__(a))_mm256_fmadd_ps((__m256)(a), (__m256)(b), (__m256)(c)))
#define VM_DHW __m256d
#define VM_DFMA _mm256_fmadd_pd
#define VM_FSQRT(v) ((__typeof__(v))_mm256_sqrt_ps((__m256)(v)))
#define VM_DSQRT_T __m256d
#define VM_DSQRT _mm256_sqrt_pd
#include "kernels/cpu/cpu_vmath_impl.h"
#undef VM_SFX
#undef VM_NAME
#undef VW
#undef VM_ATTR
#undef VM_FMA
#undef VM_DHW
#undef VM_DFMA
#undef VM_FSQRT
#undef VM_DSQRT_T
#undef VM_DSQRT
#endif

#define VM_SFX gen
#define VM_NAME "generic"
#define VW 4
#define VM_ATTR
#define VM_FMA(a, b, c) ((a) * (b) + (c))
#ifdef VL_VM_HAVE_AVX2 /* x86-64: SSE2's square roots (elsewhere the impl's per-lane libm calls) */
#define VM_FSQRT(v) ((__typeof__(v))_mm_sqrt_ps((__m128)(v)))
#define VM_DSQRT_T __m128d
#define VM_DSQRT _mm_sqrt_pd
#endif
#include "kernels/cpu/cpu_vmath_impl.h"
#undef VM_SFX
#undef VM_NAME
#undef VW
#undef VM_ATTR
#undef VM_FMA
#undef VM_DHW
#undef VM_DFMA
#undef VM_FSQRT
#undef VM_DSQRT_T
#undef VM_DSQRT

/* The instances this CPU can run, best first; the last is always the generic one. */
static int vm_available(const vl_vm_table **out) {
  int n = 0;
#ifdef VL_VM_HAVE_AVX2
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    out[n++] = &table_avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) out[n++] = &table_avx2;
#endif
  out[n++] = &table_gen;
  return n;
}

static const vl_vm_table *vm_current;
static pthread_once_t vm_once = PTHREAD_ONCE_INIT;
static void vm_init(void) {
  const vl_vm_table *t[3];
  vm_available(t);
  vm_current = t[0];
}

static const vl_vm_table *vm(void) {
  pthread_once(&vm_once, vm_init);
  return vm_current;
}

const char *vl_vm_isa(void) { return vm()->name; }

bool vl_vm_select(const char *name) {
  const vl_vm_table *t[3];
  int n = vm_available(t);
  vm();
  for (int i = 0; i < n; i++)
    if (!name || strcmp(name, t[i]->name) == 0) {
      vm_current = t[i];
      return true;
    }
  return false;
}

bool vl_vm_unary_f32(vl_unary_op op, float *o, const float *x, int64_t n) {
  return vm()->unary(op, o, x, n);
}

bool vl_vm_binary_f32(vl_binary_op op, float *o, const float *a, const float *b, int64_t b_stride,
                      double bd, double alpha, bool rev, int64_t n) {
  return vm()->binary(op, o, a, b, b_stride, bd, alpha, rev, n);
}

void vl_vm_softmax_row_f32(const float *x, float *y, int64_t len, bool log_out) {
  vm()->softmax_row(x, y, len, log_out);
}

void vl_vm_softmax_bw_row_f32(const float *y, const float *g, float *dx, int64_t len, bool log_out) {
  vm()->softmax_bw_row(y, g, dx, len, log_out);
}

void vl_vm_sum_lanes_f32(const float *x, int64_t ld, int64_t len, int64_t w, double *acc) {
  vm()->sum_lanes(x, ld, len, w, acc);
}

double vl_vm_sum_row_f32(const float *x, int64_t n) { return vm()->sum_row(x, n); }

void vl_vm_ext_row_f32(const float *x, int64_t n, bool max, double *val, int64_t *idx) {
  vm()->ext_row(x, n, max, val, idx);
}

void vl_vm_ext_lanes_f32(const float *x, int64_t ld, int64_t len, int64_t w, bool max, double *val, int64_t *idx) {
  vm()->ext_lanes(x, ld, len, w, max, val, idx);
}

void vl_vm_layernorm_row_f32(const float *x, float *y, int64_t n, const double *w, const double *b, double eps,
                             double *mean, double *rstd) {
  vm()->ln_row(x, y, n, w, b, eps, mean, rstd);
}

void vl_vm_layernorm_bw_row_f32(const float *x, const float *g, float *dx, int64_t n, double mean, double rstd,
                                const double *w, double *dw, double *db) {
  vm()->ln_bw_row(x, g, dx, n, mean, rstd, w, dw, db);
}

void vl_vm_philox_f32(uint64_t seed, uint64_t first, int64_t g0, int64_t n, vl_rand_kind kind, double a, double b,
                      float *out) {
  /* u < p for u = (m + 0.5) 2^-23 (m an integer below 2^23) is m < p 2^23 - 0.5, i.e. m below
   * its ceiling (exact in double): one integer compare per element. */
  uint32_t thresh = 0;
  if (kind == VL_RAND_BERNOULLI) {
    double t = ceil(a * 8388608.0 - 0.5);
    thresh = !(t > 0) ? 0 : t > 8388608.0 ? 8388608u : (uint32_t)t; /* NaN p: never */
  }
  vm()->philox_f32(seed, first, g0, n, kind == VL_RAND_BERNOULLI, thresh, a, b, out);
}
