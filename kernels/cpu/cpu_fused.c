/* kernels/cpu/cpu_fused.c: the CPU reference of the fused layer kernels (runtime/backend/fused_kernels.h):
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
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "runtime/backend/fused_kernels.h"
#include "runtime/core/philox.h"

/* Element i of a float array of dtype dt (the few scalars: targets' rows, statistics). */
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

/* Philox groups per block: VL_CPU_BLOCK elements, 4 a group. */
#define DROP_GROUPS (VL_CPU_BLOCK / 4)

/* The words of groups first .. first + DROP_GROUPS - 1, w[j][g] = word j of group g: the rounds of
 * runtime/core/philox.h's vl_philox_ctr (c2 = c3 = 0), run over the groups side by side so that
 * the compiler can vectorise the 32-bit multiplies. */
static void philox_block(uint64_t seed, uint64_t first, uint32_t w[4][DROP_GROUPS]) {
  uint32_t c0[DROP_GROUPS], c1[DROP_GROUPS], c2[DROP_GROUPS], c3[DROP_GROUPS];
  for (int g = 0; g < DROP_GROUPS; g++) {
    uint64_t ctr = first + (uint64_t)g;
    c0[g] = (uint32_t)ctr, c1[g] = (uint32_t)(ctr >> 32), c2[g] = 0, c3[g] = 0;
  }
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    for (int g = 0; g < DROP_GROUPS; g++) {
      uint64_t p0 = (uint64_t)0xD2511F53u * c0[g], p1 = (uint64_t)0xCD9E8D57u * c2[g];
      uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[g] ^ k0, n2 = (uint32_t)(p0 >> 32) ^ c3[g] ^ k1;
      c1[g] = (uint32_t)p1, c3[g] = (uint32_t)p0, c0[g] = n0, c2[g] = n2;
    }
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  memcpy(w[0], c0, sizeof c0), memcpy(w[1], c1, sizeof c1), memcpy(w[2], c2, sizeof c2), memcpy(w[3], c3, sizeof c3);
}

static void dropout_range(void *ctx, int64_t b0, int64_t b1) {
  const vl_dropout_args *a = ctx;
  const uint64_t seed = a->base ? a->base[0] : a->seed, first = a->base ? a->base[1] + a->offset : a->offset;
  const int64_t es = (int64_t)vl_dtype_size(a->dtype);
  const float sf = (float)a->scale;
  double buf[VL_CPU_BLOCK];
  uint32_t w[4][DROP_GROUPS];
  for (int64_t b = b0; b < b1; b++) {
    const int64_t off = b * VL_CPU_BLOCK, m = a->numel - off < VL_CPU_BLOCK ? a->numel - off : VL_CPU_BLOCK;
    philox_block(seed, first + (uint64_t)(off / 4), w);
    vl_cpu_load_f64(buf, (const char *)a->in + off * es, es, a->dtype, m);
    /* x * 0 keeps NaN and inf -> NaN, as the composed x * mask did */
    if (a->dtype == VL_F64) {
      for (int64_t i = 0; i < m; i++) buf[i] *= (w[i & 3][i >> 2] >> (32 - VL_PHILOX_BITS)) < a->threshold ? a->scale : 0.0;
    } else {
      for (int64_t i = 0; i < m; i++)
        buf[i] = (double)((float)buf[i] * ((w[i & 3][i >> 2] >> (32 - VL_PHILOX_BITS)) < a->threshold ? sf : 0.0f));
    }
    vl_cpu_store_f64((char *)a->out + off * es, es, a->dtype, buf, m);
  }
}

static vl_status cpu_dropout(const vl_dropout_args *a) {
  if (a->numel <= 0) return VL_OK;
  vl_cpu_parallel_for((a->numel + VL_CPU_BLOCK - 1) / VL_CPU_BLOCK, 16, dropout_range, (void *)a);
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
  int oom;
} xent_job;

/* Row r's classes start at logits element row_base, `inner` apart. */
static inline int64_t row_base(const vl_xent_args *a, int64_t r) {
  const int64_t o = r / a->inner, i = r - o * a->inner;
  return o * a->classes * a->inner + i;
}

static void xent_fw_range(void *ctx, int64_t r0, int64_t r1) {
  xent_job *j = ctx;
  const vl_xent_args *a = j->a;
  const int64_t C = a->classes, es = (int64_t)vl_dtype_size(a->dtype);
  const double s = a->smoothing;
  const bool f64 = a->dtype == VL_F64;
  int64_t bad = -1;
  double *x = malloc((size_t)(C > 0 ? C : 1) * sizeof *x);
  if (!x) {
    j->oom = 1;
    return;
  }
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
    vl_cpu_load_f64(x, (const char *)a->logits + row_base(a, r) * es, a->inner * es, a->dtype, C);
    double m = -INFINITY;
    for (int64_t c = 0; c < C; c++)
      if (x[c] > m || x[c] != x[c]) m = x[c]; /* a NaN wins: the row's result is NaN */
    double sum = 0, sumx = 0;
    if (f64) {
      for (int64_t c = 0; c < C; c++) sum += exp(x[c] - m), sumx += x[c];
    } else {
      /* f32 exponentials (as the CUDA kernels), summed in double */
      for (int64_t c = 0; c < C; c++) sum += (double)expf((float)(x[c] - m)), sumx += x[c];
    }
    double lse = m + log(sum);
    /* the log-sum-exp the backward reads, rounded as the backward will see it */
    st(a->lse, r, a->stat_dtype, lse);
    double nll = lse - x[t];
    /* as the composed formula: the smoothing term only when s > 0 (0 * inf would be NaN) */
    double loss = s > 0 ? nll * (1 - s) + (lse - sumx / (double)C) * s : nll;
    st(a->row_loss, r, a->stat_dtype, loss);
  }
  free(x);
  j->bad_row[r0 / j->grain] = bad;
}

static vl_status bad_index(const vl_xent_args *a, int64_t r) {
  return vl_fail(VL_EINVAL, "%s: index %lld is out of bounds for dim %d with size %lld (index values are 0-based: 0 to %lld)",
                 a->op, (long long)target_of(a, r), a->class_dim + 1, (long long)a->classes, (long long)a->classes - 1);
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
    if (j.oom) return vl_fail(VL_EOOM, "%s (cpu): out of host memory for rows of %lld", a->op, (long long)a->classes);
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

static void xent_bw_range(void *ctx, int64_t r0, int64_t r1) {
  xent_job *j = ctx;
  const vl_xent_args *a = j->a;
  const int64_t C = a->classes, es = (int64_t)vl_dtype_size(a->dtype);
  const double s = a->smoothing;
  const bool f64 = a->dtype == VL_F64;
  double *x = malloc((size_t)(C > 0 ? C : 1) * sizeof *x);
  if (!x) {
    j->oom = 1;
    return;
  }
  double g0 = a->reduction == VL_XENT_NONE ? 0 : ld(a->grad, 0, a->stat_dtype);
  if (a->reduction == VL_XENT_MEAN) {
    /* the division in the stat dtype, as the CUDA kernel does it */
    double cnt = ld(a->count, 0, a->stat_dtype);
    g0 = f64 ? g0 / cnt : (double)((float)g0 / (float)cnt);
  }
  for (int64_t r = r0; r < r1; r++) {
    char *dst = (char *)a->dlogits + row_base(a, r) * es;
    const int64_t t = target_of(a, r);
    if (t == a->ignore_index || t < 0 || t >= C) {
      memset(x, 0, (size_t)C * sizeof *x);
      vl_cpu_store_f64(dst, a->inner * es, a->dtype, x, C);
      continue;
    }
    vl_cpu_load_f64(x, (const char *)a->logits + row_base(a, r) * es, a->inner * es, a->dtype, C);
    const double gr = a->reduction == VL_XENT_NONE ? ld(a->grad, r, a->stat_dtype) : g0;
    if (f64) {
      const double lse = ld(a->lse, r, a->stat_dtype), k = s / (double)C, hit = (1 - s) + k;
      for (int64_t c = 0; c < C; c++) x[c] = gr * (exp(x[c] - lse) - (c == t ? hit : k));
    } else {
      /* each element in f32, as the CUDA kernel, rounded once to the dtype by the store */
      const float lse = (float)ld(a->lse, r, a->stat_dtype), g = (float)gr, k = (float)(s / (double)C);
      const float hit = (1.0f - (float)s) + k;
      for (int64_t c = 0; c < C; c++) x[c] = (double)(g * (expf((float)x[c] - lse) - (c == t ? hit : k)));
    }
    vl_cpu_store_f64(dst, a->inner * es, a->dtype, x, C);
  }
  free(x);
}

static vl_status cpu_xent_backward(const vl_xent_args *a) {
  const int64_t rows = rows_of(a);
  if (rows <= 0) return VL_OK;
  xent_job j = {.a = a};
  vl_cpu_parallel_for(rows, xent_grain(a), xent_bw_range, &j);
  if (j.oom) return vl_fail(VL_EOOM, "%s (cpu): out of host memory for rows of %lld", a->op, (long long)a->classes);
  return VL_OK;
}

const vl_fused_kernels vl_cpu_fused_kernels = {
    .dropout = cpu_dropout,
    .xent_forward = cpu_xent_forward,
    .xent_backward = cpu_xent_backward,
};
