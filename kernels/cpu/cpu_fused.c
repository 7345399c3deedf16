/* kernels/cpu/cpu_fused.c: the CPU reference of the fused layer kernels (kernels/fused_kernels.h):
 * dropout with its mask drawn inline from Philox, and softmax cross entropy over class ids.
 *
 * Precision, chosen so that the CUDA kernels can match and autocast stays exact:
 *  - dropout: in * scale in f32 (f64 for f64), rounded once to the dtype;
 *  - cross entropy forward: each row's max, sum of exponentials and sum of logits in double, the
 *    per-row loss and log-sum-exp stored in the stat dtype; the reduction over rows in double, in
 *    row order (the same result for any thread count);
 *  - cross entropy backward: each element in f32 (f64 for f64) from the stored f32 log-sum-exp,
 *    rounded once to the logits' dtype. So f16 logits give bit for bit the gradient that f32
 *    copies of them give after the f32 gradient is cast back (autocast's cast and the fused op's
 *    direct half input agree exactly). */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/fused_kernels.h"
#include "runtime/core/philox.h"

/* Element i of a float array of dtype dt. */
static inline double ld(const void *p, int64_t i, vl_dtype dt) {
  switch (dt) {
    case VL_F32: return ((const float *)p)[i];
    case VL_F64: return ((const double *)p)[i];
    case VL_F16: return vl_cpu_f16_to_f64(((const uint16_t *)p)[i]);
    case VL_BF16: return vl_cpu_bf16_to_f64(((const uint16_t *)p)[i]);
    default: return NAN;
  }
}

static inline void st(void *p, int64_t i, vl_dtype dt, double v) {
  switch (dt) {
    case VL_F32: ((float *)p)[i] = (float)v; break;
    case VL_F64: ((double *)p)[i] = v; break;
    case VL_F16: ((uint16_t *)p)[i] = vl_cpu_f64_to_f16(v); break;
    case VL_BF16: ((uint16_t *)p)[i] = vl_cpu_f64_to_bf16(v); break;
    default: break;
  }
}

/* ======================= dropout ======================= */

static void dropout_range(void *ctx, int64_t g0, int64_t g1) {
  const vl_dropout_args *a = ctx;
  const uint64_t seed = a->base ? a->base[0] : a->seed, first = a->base ? a->base[1] + a->offset : a->offset;
  const bool f64 = a->dtype == VL_F64;
  const float sf = (float)a->scale;
  for (int64_t g = g0; g < g1; g++) {
    vl_philox4 w = vl_philox(seed, first + (uint64_t)g);
    for (int j = 0; j < 4; j++) {
      int64_t i = 4 * g + j;
      if (i >= a->numel) break;
      bool keep = (w.x[j] >> (32 - VL_PHILOX_BITS)) < a->threshold;
      double x = ld(a->in, i, a->dtype);
      /* x * 0 keeps NaN and inf -> NaN, as the composed x * mask did */
      double y = f64 ? x * (keep ? a->scale : 0.0) : (double)((float)x * (keep ? sf : 0.0f));
      st(a->out, i, a->dtype, y);
    }
  }
}

static vl_status cpu_dropout(const vl_dropout_args *a) {
  if (a->numel <= 0) return VL_OK;
  int64_t groups = (a->numel + 3) / 4;
  vl_cpu_parallel_for(groups, 4096, dropout_range, (void *)a);
  return VL_OK;
}

/* ======================= cross entropy ======================= */

static inline int64_t target_of(const vl_xent_args *a, int64_t r) {
  return a->target_i32 ? (int64_t)((const int32_t *)a->target)[r] : ((const int64_t *)a->target)[r];
}

typedef struct xent_job {
  const vl_xent_args *a;
  int64_t *bad_row; /* per range: the first row with a class id out of range, or -1 */
  int64_t grain;
} xent_job;

static void xent_fw_range(void *ctx, int64_t r0, int64_t r1) {
  xent_job *j = ctx;
  const vl_xent_args *a = j->a;
  const int64_t C = a->classes, inner = a->inner;
  const double s = a->smoothing;
  int64_t bad = -1;
  for (int64_t r = r0; r < r1; r++) {
    int64_t t = target_of(a, r);
    if (t == a->ignore_index) {
      /* ignored rows cost nothing: their loss and gradient are 0 whatever the logits hold */
      st(a->lse, r, a->stat_dtype, 0);
      st(a->row_loss, r, a->stat_dtype, 0);
      continue;
    }
    if (t < 0 || t >= C) {
      if (bad < 0) bad = r;
      st(a->lse, r, a->stat_dtype, NAN);
      st(a->row_loss, r, a->stat_dtype, NAN);
      continue;
    }
    const int64_t o = r / inner, i = r - o * inner, base = o * C * inner + i;
    double m = -INFINITY;
    for (int64_t c = 0; c < C; c++) {
      double x = ld(a->logits, base + c * inner, a->dtype);
      if (x > m || x != x) m = x; /* a NaN wins: the row's result is NaN */
    }
    double sum = 0, sumx = 0;
    for (int64_t c = 0; c < C; c++) {
      double x = ld(a->logits, base + c * inner, a->dtype);
      sum += exp(x - m);
      sumx += x;
    }
    double lse = m + log(sum);
    /* the log-sum-exp the backward reads, rounded as the backward will see it */
    st(a->lse, r, a->stat_dtype, lse);
    double nll = lse - ld(a->logits, base + t * inner, a->dtype);
    /* as the composed formula: the smoothing term only when s > 0 (0 * inf would be NaN) */
    double loss = s > 0 ? nll * (1 - s) + (lse - sumx / (double)C) * s : nll;
    st(a->row_loss, r, a->stat_dtype, loss);
  }
  j->bad_row[r0 / j->grain] = bad;
}

static vl_status bad_index(const vl_xent_args *a, int64_t r) {
  return vl_fail(VL_EINVAL, "%s: index %lld is out of bounds for dim %d with size %lld", a->op,
                 (long long)target_of(a, r), a->class_dim + 1, (long long)a->classes);
}

static int64_t rows_of(const vl_xent_args *a) { return a->outer * a->inner; }

/* Row ranges of at least `grain` rows, so that ranges map to slots of bad_row. */
static int64_t xent_grain(const vl_xent_args *a) {
  int64_t work = a->classes * 4;
  return work >= 16384 ? 1 : 16384 / (work > 0 ? work : 1);
}

static vl_status cpu_xent_forward(const vl_xent_args *a) {
  const int64_t rows = rows_of(a);
  if (rows > 0) {
    xent_job j = {.a = a, .grain = xent_grain(a)};
    int64_t nslots = (rows + j.grain - 1) / j.grain;
    j.bad_row = malloc((size_t)nslots * sizeof *j.bad_row);
    if (!j.bad_row) return vl_fail(VL_EOOM, "%s (cpu): out of host memory", a->op);
    for (int64_t k = 0; k < nslots; k++) j.bad_row[k] = -1;
    vl_cpu_parallel_for(rows, j.grain, xent_fw_range, &j);
    int64_t bad = -1;
    for (int64_t k = 0; k < nslots && bad < 0; k++) bad = j.bad_row[k];
    free(j.bad_row);
    if (bad >= 0) return bad_index(a, bad);
  }
  if (a->reduction == VL_XENT_NONE) return VL_OK;
  double sum = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < rows; r++) {
    sum += ld(a->row_loss, r, a->stat_dtype);
    count += target_of(a, r) != a->ignore_index;
  }
  st(a->count, 0, a->stat_dtype, (double)count);
  /* rounded to the stat dtype first, so a half loss is the f32 loss rounded (as for NONE) */
  double v = a->reduction == VL_XENT_MEAN ? sum / (double)count : sum;
  st(a->out, 0, a->out_dtype, a->stat_dtype == VL_F32 ? (double)(float)v : v);
  return VL_OK;
}

/* One row's gradient in the compute type T (float, or double for f64 logits). */
#define XENT_BW_ROW(T, EXP)                                                                   \
  do {                                                                                        \
    const T lse = (T)ld(a->lse, r, a->stat_dtype), k = (T)(s / (double)C);                   \
    const T hit = ((T)1 - (T)s) + k; /* as the CUDA kernel rounds it */                       \
    for (int64_t c = 0; c < C; c++) {                                                         \
      T x = (T)ld(a->logits, base + c * inner, a->dtype);                                     \
      T d = g * (EXP(x - lse) - (c == t ? hit : k));                                          \
      st(a->dlogits, base + c * inner, a->dtype, (double)d);                                  \
    }                                                                                         \
  } while (0)

static void xent_bw_range(void *ctx, int64_t r0, int64_t r1) {
  const vl_xent_args *a = ctx;
  const int64_t C = a->classes, inner = a->inner;
  const double s = a->smoothing;
  const bool f64 = a->dtype == VL_F64;
  double g0 = a->reduction == VL_XENT_NONE ? 0 : ld(a->grad, 0, a->stat_dtype);
  if (a->reduction == VL_XENT_MEAN) {
    /* the division in the stat dtype, as the CUDA kernel does it */
    double cnt = ld(a->count, 0, a->stat_dtype);
    g0 = f64 ? g0 / cnt : (double)((float)g0 / (float)cnt);
  }
  for (int64_t r = r0; r < r1; r++) {
    const int64_t o = r / inner, i = r - o * inner, base = o * C * inner + i;
    const int64_t t = target_of(a, r);
    if (t == a->ignore_index || t < 0 || t >= C) {
      for (int64_t c = 0; c < C; c++) st(a->dlogits, base + c * inner, a->dtype, 0);
      continue;
    }
    double gr = a->reduction == VL_XENT_NONE ? ld(a->grad, r, a->stat_dtype) : g0;
    if (f64) {
      const double g = gr;
      XENT_BW_ROW(double, exp);
    } else {
      const float g = (float)gr;
      XENT_BW_ROW(float, expf);
    }
  }
}

static vl_status cpu_xent_backward(const vl_xent_args *a) {
  const int64_t rows = rows_of(a);
  if (rows > 0) vl_cpu_parallel_for(rows, xent_grain(a), xent_bw_range, (void *)a);
  return VL_OK;
}

const vl_fused_kernels vl_cpu_fused_kernels = {
    .dropout = cpu_dropout,
    .xent_forward = cpu_xent_forward,
    .xent_backward = cpu_xent_backward,
};
