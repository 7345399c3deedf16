/* kernels/cpu/cpu_scan.c: inclusive scans (cumsum, cumprod) over contiguous [outer, len, inner],
 * forward or reverse (runtime/backend/kernels.h, vl_scan_args).
 *
 * The loop shapes of cpu_reduce.c, so no element is read with a stride:
 *  - inner == 1: each row is contiguous; it is walked in blocks of B, each block loaded into
 *    doubles (int64s), scanned with the running value carried from the previous block, stored.
 *  - inner > 1: up to B adjacent columns are scanned together, one contiguous stretch of `inner`
 *    read and written per step along len, with a running value per lane.
 * Tasks (a row, or a block of lanes of one outer index) are independent, split over the CPU
 * threads; each is computed exactly as alone, so the result does not depend on the thread count.
 * Floats accumulate in double and each output is rounded once; integers in int64, wrapping. */
#include "kernels/cpu/cpu_internal.h"

#define B VL_CPU_BLOCK

typedef struct {
  const vl_scan_args *a;
  int64_t nblk; /* tasks per outer index: 1 for rows, blocks of B lanes otherwise */
} scan_job;

/* One step of the running value: a op x, in double or wrapping int64. */
static inline double step_f64(bool prod, double acc, double x) { return prod ? acc * x : acc + x; }
static inline int64_t step_i64(bool prod, int64_t acc, int64_t x) {
  return prod ? (int64_t)((uint64_t)acc * (uint64_t)x) : (int64_t)((uint64_t)acc + (uint64_t)x);
}

/* f32 and f64 (the common dtypes) read and write their memory directly, the running value in
 * double: the same values as the buffered path, without the block conversions. */
#define VL_SCAN_ROW_TYPED(TY)                                                        \
  do {                                                                              \
    const TY *x = (const TY *)a->in + o * len;                                      \
    TY *y = (TY *)a->out + o * len;                                                 \
    double acc = prod ? 1.0 : 0.0;                                                  \
    if (a->reverse)                                                                 \
      for (int64_t i = len - 1; i >= 0; i--) y[i] = (TY)(acc = step_f64(prod, acc, x[i])); \
    else                                                                            \
      for (int64_t i = 0; i < len; i++) y[i] = (TY)(acc = step_f64(prod, acc, x[i]));      \
  } while (0)

/* Rows of length len (inner == 1), outer indices [lo, hi). */
static void scan_rows(const vl_scan_args *a, int64_t lo, int64_t hi) {
  const bool prod = a->op == VL_SCAN_PROD, isf = vl_dtype_is_float(a->dtype);
  const int64_t es = (int64_t)vl_dtype_size(a->dtype), len = a->len;
  double fb[B];
  int64_t ib[B];
  if (a->dtype == VL_F32 || a->dtype == VL_F64) {
    for (int64_t o = lo; o < hi; o++) {
      if (a->dtype == VL_F32) VL_SCAN_ROW_TYPED(float);
      else VL_SCAN_ROW_TYPED(double);
    }
    return;
  }
  for (int64_t o = lo; o < hi; o++) {
    const char *in = (const char *)a->in + o * len * es;
    char *out = (char *)a->out + o * len * es;
    double fa = prod ? 1.0 : 0.0;
    int64_t ia = prod ? 1 : 0;
    for (int64_t k0 = 0; k0 < len; k0 += B) {
      int64_t m = len - k0 < B ? len - k0 : B;
      /* the block [l0, l0 + m) of the row: the first one walked in reverse is the last */
      int64_t l0 = a->reverse ? len - k0 - m : k0;
      if (isf) {
        vl_cpu_load_f64(fb, in + l0 * es, es, a->dtype, m);
        if (a->reverse)
          for (int64_t i = m - 1; i >= 0; i--) fb[i] = fa = step_f64(prod, fa, fb[i]);
        else
          for (int64_t i = 0; i < m; i++) fb[i] = fa = step_f64(prod, fa, fb[i]);
        vl_cpu_store_f64(out + l0 * es, es, a->dtype, fb, m);
      } else {
        vl_cpu_load_i64(ib, in + l0 * es, es, a->dtype, m);
        if (a->reverse)
          for (int64_t i = m - 1; i >= 0; i--) ib[i] = ia = step_i64(prod, ia, ib[i]);
        else
          for (int64_t i = 0; i < m; i++) ib[i] = ia = step_i64(prod, ia, ib[i]);
        vl_cpu_store_i64(out + l0 * es, es, a->dtype, ib, m);
      }
    }
  }
}

/* Lanes [j0, j0 + w) of outer index o (inner > 1): the running values are per lane, and each
 * step along len reads and writes one contiguous stretch. The lane loops vectorise. */
static void scan_lanes(const vl_scan_args *a, int64_t o, int64_t j0, int64_t w) {
  const bool prod = a->op == VL_SCAN_PROD, isf = vl_dtype_is_float(a->dtype);
  const int64_t es = (int64_t)vl_dtype_size(a->dtype), len = a->len, inner = a->inner;
  const char *in = (const char *)a->in + (o * len * inner + j0) * es;
  char *out = (char *)a->out + (o * len * inner + j0) * es;
  double fa[B], fb[B];
  int64_t ia[B], ib[B];
  for (int64_t j = 0; j < w; j++) {
    fa[j] = prod ? 1.0 : 0.0;
    ia[j] = prod ? 1 : 0;
  }
  for (int64_t k = 0; k < len; k++) {
    int64_t l = a->reverse ? len - 1 - k : k;
    if (a->dtype == VL_F32) { /* direct, as the rows' typed path; the lane loops vectorise */
      const float *x = (const float *)in + l * inner;
      float *y = (float *)out + l * inner;
      if (prod) for (int64_t j = 0; j < w; j++) y[j] = (float)(fa[j] *= x[j]);
      else for (int64_t j = 0; j < w; j++) y[j] = (float)(fa[j] += x[j]);
    } else if (isf) {
      vl_cpu_load_f64(fb, in + l * inner * es, es, a->dtype, w);
      if (prod) for (int64_t j = 0; j < w; j++) fa[j] *= fb[j];
      else for (int64_t j = 0; j < w; j++) fa[j] += fb[j];
      vl_cpu_store_f64(out + l * inner * es, es, a->dtype, fa, w);
    } else {
      vl_cpu_load_i64(ib, in + l * inner * es, es, a->dtype, w);
      for (int64_t j = 0; j < w; j++) ia[j] = step_i64(prod, ia[j], ib[j]);
      vl_cpu_store_i64(out + l * inner * es, es, a->dtype, ia, w);
    }
  }
}

static void scan_range(void *vj, int64_t lo, int64_t hi) {
  const scan_job *j = vj;
  const vl_scan_args *a = j->a;
  if (a->inner == 1) {
    scan_rows(a, lo, hi);
    return;
  }
  for (int64_t t = lo; t < hi; t++) {
    int64_t o = t / j->nblk, j0 = (t % j->nblk) * B;
    scan_lanes(a, o, j0, a->inner - j0 < B ? a->inner - j0 : B);
  }
}

vl_status vl_cpu_scan(const vl_scan_args *a) {
  if ((unsigned)a->op >= VL_NSCAN) return vl_fail(VL_EINVAL, "scan (cpu): unknown op %d", (int)a->op);
  if (a->outer * a->inner * a->len <= 0) return VL_OK;
  scan_job j = {.a = a, .nblk = a->inner == 1 ? 1 : (a->inner + B - 1) / B};
  int64_t tasks = a->outer * j.nblk;
  int64_t per = a->len * (a->inner < B ? a->inner : B); /* elements of one task */
  vl_cpu_parallel_for(tasks, per >= 16384 ? 1 : 16384 / per, scan_range, &j);
  return VL_OK;
}
