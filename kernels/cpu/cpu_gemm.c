/* kernels/cpu/cpu_gemm.c: batched row-major GEMM through OpenBLAS.
 *
 * f32 and f64 call cblas_sgemm / cblas_dgemm on the operands in place, as blocks of C on the
 * backend's threads (native_gemm), OpenBLAS single-threaded in each. f16 and bf16 are packed
 * into dense f32 matrices, multiplied with sgemm (f32 accumulation, as the contract says) and
 * rounded back once. An operand whose row stride BLAS would reject (ld below the row length,
 * which only a front end bug or a single-row matrix can produce) is packed densely as well, so
 * OpenBLAS never reaches its error handler, which would print. */
#define _POSIX_C_SOURCE 200809L /* setenv, unsetenv */
#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_vmath.h"

/* Copies a rows x cols matrix (row stride ld, any float dtype) into a dense f32 or f64 one. */
static void pack(const char *src, vl_dtype dt, int64_t rows, int64_t cols, int64_t ld, void *dst,
                 vl_dtype dst_dt) {
  int64_t es = (int64_t)vl_dtype_size(dt), eo = (int64_t)vl_dtype_size(dst_dt);
  double buf[VL_CPU_BLOCK];
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c0 = 0; c0 < cols; c0 += VL_CPU_BLOCK) {
      int64_t m = cols - c0 < VL_CPU_BLOCK ? cols - c0 : VL_CPU_BLOCK;
      vl_cpu_load_f64(buf, src + (r * ld + c0) * es, es, dt, m);
      vl_cpu_store_f64((char *)dst + (r * cols + c0) * eo, eo, dst_dt, buf, m);
    }
  }
}

/* The inverse of pack: dense f32/f64 back into a matrix of dtype dt with row stride ld. */
static void unpack(const void *src, vl_dtype src_dt, int64_t rows, int64_t cols, char *dst,
                   vl_dtype dt, int64_t ld) {
  int64_t es = (int64_t)vl_dtype_size(dt), ei = (int64_t)vl_dtype_size(src_dt);
  double buf[VL_CPU_BLOCK];
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c0 = 0; c0 < cols; c0 += VL_CPU_BLOCK) {
      int64_t m = cols - c0 < VL_CPU_BLOCK ? cols - c0 : VL_CPU_BLOCK;
      vl_cpu_load_f64(buf, (const char *)src + (r * cols + c0) * ei, ei, src_dt, m);
      vl_cpu_store_f64(dst + (r * ld + c0) * es, es, dt, buf, m);
    }
  }
}

/* One batch of C (rows x cols of dtype dt, row stride ld) := beta * C + bias (bias NULL: none,
 * else cols elements of dtype bdt added to every row), never reading C when beta == 0. With a
 * bias this runs before a beta = 1 GEMM, so the product lands on beta * C + bias. */
static void prefill_c(char *c, vl_dtype dt, int64_t rows, int64_t cols, int64_t ld, double beta,
                      const char *bias, vl_dtype bdt) {
  int64_t es = (int64_t)vl_dtype_size(dt), eb = (int64_t)vl_dtype_size(bdt);
  if (beta == 0.0 && dt == bdt && (dt == VL_F32 || dt == VL_F64)) {
    /* The bias rows themselves (the double round trip below is the identity): the prefill of
     * every f32 Linear, 7% of a CPU BERT step when it went through doubles. */
    for (int64_t r = 0; r < rows; r++) {
      if (bias) memcpy(c + r * ld * es, bias, (size_t)(cols * es));
      else memset(c + r * ld * es, 0, (size_t)(cols * es));
    }
    return;
  }
  double buf[VL_CPU_BLOCK], bb[VL_CPU_BLOCK];
  for (int64_t r = 0; r < rows; r++) {
    for (int64_t c0 = 0; c0 < cols; c0 += VL_CPU_BLOCK) {
      int64_t m = cols - c0 < VL_CPU_BLOCK ? cols - c0 : VL_CPU_BLOCK;
      char *p = c + (r * ld + c0) * es;
      if (beta == 0.0) {
        for (int64_t i = 0; i < m; i++) buf[i] = 0.0;
      } else {
        vl_cpu_load_f64(buf, p, es, dt, m);
        for (int64_t i = 0; i < m; i++) buf[i] *= beta;
      }
      if (bias) {
        vl_cpu_load_f64(bb, bias + c0 * eb, eb, bdt, m);
        for (int64_t i = 0; i < m; i++) buf[i] += bb[i];
      }
      vl_cpu_store_f64(p, es, dt, buf, m);
    }
  }
}

/* k == 0: there is no product, C = beta * C (+ bias). */
static void scale_c(const vl_gemm_args *g) {
  int64_t es = (int64_t)vl_dtype_size(g->dtype);
  for (int64_t b = 0; b < g->batch; b++)
    prefill_c((char *)g->c + b * g->stride_c * es, g->dtype, g->m, g->n, g->ldc, g->beta, g->bias, g->dtype);
}

/* One operand as BLAS will see it: in place, or packed into `pk` (dense, ld = cols). */
typedef struct {
  int64_t rows, cols, ld, stride;
  const char *base;
  bool packed;
  void *pk;
  const char *packed_from; /* the source currently in pk (skips repacking stride-0 operands) */
} operand;

static bool need_pack(const operand *op, bool compute_dtype_matches) {
  if (!compute_dtype_matches) return true;
  int64_t need = op->cols > 1 ? op->cols : 1;
  /* A single-row matrix never uses its row stride, so any ld is fine for it. */
  return op->rows > 1 && op->ld < need;
}

static const void *operand_at(operand *op, int64_t b, vl_dtype dt, vl_dtype ct, int64_t es,
                              int64_t *ld) {
  const char *src = op->base + b * op->stride * es;
  if (!op->packed) {
    *ld = op->rows > 1 ? op->ld : (op->ld > op->cols ? op->ld : (op->cols > 1 ? op->cols : 1));
    return src;
  }
  if (op->packed_from != src) {
    pack(src, dt, op->rows, op->cols, op->ld, op->pk, ct);
    op->packed_from = src;
  }
  *ld = op->cols > 1 ? op->cols : 1;
  return op->pk;
}

/* OpenBLAS's kernel set. A DYNAMIC_ARCH build (Debian's, linked statically into the binary that
 * goes to the GPU machines) picks its kernels by CPU model number, and a model newer than the
 * library falls back to Prescott's SSE3 kernels: OpenBLAS 0.3.21 on a Xeon of model 207
 * (Emerald Rapids) ran sgemm at a third of its Haswell speed and a fifth of SkylakeX's, half of a
 * CPU BERT step. So, at load time, when the user did not name a core (OPENBLAS_CORETYPE) and the
 * library chose one below what the CPU's features allow, the best core for those features is
 * forced through OpenBLAS's own switch (the environment variable read by its dynamic init; it is
 * set only around that call). Builds without the dynamic-arch entry points (weak, NULL then) are
 * left alone. OPENBLAS_VERBOSE=2 prints the kernels chosen, and cpu_vmath.h's instance. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
extern void gotoblas_dynamic_init(void) __attribute__((weak));
extern void gotoblas_dynamic_quit(void) __attribute__((weak));

/* 2: AVX-512 kernels, 1: AVX2 + FMA kernels, 0: anything older or unknown. */
static int blas_core_tier(const char *name) {
  static const char *const avx512[] = {"SkylakeX", "Cooperlake", "SapphireRapids"};
  static const char *const avx2[] = {"Haswell", "Zen", "Excavator"};
  for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
    if (strcmp(name, avx512[i]) == 0) return 2;
  for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++)
    if (strcmp(name, avx2[i]) == 0) return 1;
  return 0;
}

__attribute__((constructor)) static void blas_pick_core(void) {
  if (!gotoblas_dynamic_init || !gotoblas_dynamic_quit || getenv("OPENBLAS_CORETYPE")) return;
  __builtin_cpu_init();
  int want = 0;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    want = 2;
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    want = 1;
  gotoblas_dynamic_init(); /* the library's own choice (a no-op when its constructor ran first) */
  const char *have = openblas_get_corename();
  char was[32];
  snprintf(was, sizeof was, "%s", have ? have : "?");
  if (want > 0 && have && blas_core_tier(have) < want &&
      setenv("OPENBLAS_CORETYPE", want == 2 ? "SkylakeX" : "Haswell", 0) == 0) {
    gotoblas_dynamic_quit();
    gotoblas_dynamic_init();
    unsetenv("OPENBLAS_CORETYPE");
  }
  /* In a static binary this runs before OpenBLAS reads OPENBLAS_VERBOSE, so its own "Core:" line
   * never comes: the choice is told here under the same variable. */
  const char *verbose = getenv("OPENBLAS_VERBOSE");
  if (verbose && atoi(verbose) >= 2)
    fprintf(stderr, "v100lua: OpenBLAS kernels %s (the library's own choice: %s), vector math %s\n",
            openblas_get_corename(), was, vl_vm_isa());
}
#endif

/* OpenBLAS's thread count, set only when it changes (0: not set yet, the library's default of
 * all cores). Its pthread build keeps its threads spinning on sched_yield for a while after each
 * call: between GEMMs they took the cores from everything else (a quarter of a CPU BERT step's
 * time was sched_yield). So f32/f64 GEMMs run on the backend's own sleeping pool, cut into
 * blocks, with OpenBLAS single-threaded inside. The count also decides how OpenBLAS splits a
 * product, and with it the bits of the result (Haswell/Zen kernels): every cblas_* call of the
 * backend (cpu_conv.c's too) sets it first, so that a result never depends on which calls came
 * earlier in the process (cpu_internal.h). */
void vl_cpu_blas_threads(int t) {
  static _Atomic int current;
  if (t != current) {
    openblas_set_num_threads(t);
    current = t;
  }
}

/* One task: rows [r0, r1) and columns [c0, c1) of batch b's C. */
typedef struct {
  const vl_gemm_args *g;
  int64_t mblocks, nblocks, mb, nb; /* blocks per batch along m and n, and their sizes */
} gemm_job;

static void gemm_range(void *vj, int64_t lo, int64_t hi) {
  const gemm_job *j = vj;
  const vl_gemm_args *g = j->g;
  int64_t es = (int64_t)vl_dtype_size(g->dtype);
  double beta = g->bias ? 1.0 : g->beta;
  enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  for (int64_t t = lo; t < hi; t++) {
    int64_t per = j->mblocks * j->nblocks, b = t / per, rest = t % per;
    int64_t r0 = (rest / j->nblocks) * j->mb, c0 = (rest % j->nblocks) * j->nb;
    int64_t r1 = r0 + j->mb < g->m ? r0 + j->mb : g->m, c1 = c0 + j->nb < g->n ? c0 + j->nb : g->n;
    int64_t rows = r1 - r0, cols = c1 - c0;
    /* op(A) rows r0.. are A's rows (no transpose) or its columns; op(B) columns likewise. */
    const char *pa = (const char *)g->a + (b * g->stride_a + (g->trans_a ? r0 : r0 * g->lda)) * es;
    const char *pb = (const char *)g->b + (b * g->stride_b + (g->trans_b ? c0 * g->ldb : c0)) * es;
    char *pc = (char *)g->c + (b * g->stride_c + r0 * g->ldc + c0) * es;
    int64_t arows = g->trans_a ? g->k : rows, brows = g->trans_b ? cols : g->k;
    int64_t lda = arows > 1 ? g->lda : (g->trans_a ? rows : g->k), ldb = brows > 1 ? g->ldb : (g->trans_b ? g->k : cols);
    int64_t ldc = rows > 1 ? g->ldc : cols;
    if (lda < 1) lda = 1;
    if (ldb < 1) ldb = 1;
    if (ldc < 1) ldc = 1;
    if (g->bias) prefill_c(pc, g->dtype, rows, cols, g->ldc, g->beta, (const char *)g->bias + c0 * es, g->dtype);
    if (g->dtype == VL_F64)
      cblas_dgemm(CblasRowMajor, ta, tb, (int)rows, (int)cols, (int)g->k, g->alpha, (const double *)pa, (int)lda,
                  (const double *)pb, (int)ldb, beta, (double *)pc, (int)ldc);
    else
      cblas_sgemm(CblasRowMajor, ta, tb, (int)rows, (int)cols, (int)g->k, (float)g->alpha, (const float *)pa,
                  (int)lda, (const float *)pb, (int)ldb, (float)beta, (float *)pc, (int)ldc);
  }
}

/* f32/f64 operands in place: blocks of C over the pool, each a single-threaded OpenBLAS call.
 * Blocks are at least 64 rows (or columns) and 2^21 multiply-adds, so each call stays efficient;
 * the split is along the longer of m and n. */
static vl_status native_gemm(const vl_gemm_args *g) {
  vl_cpu_blas_threads(1);
  int t = vl_cpu_threads();
  gemm_job j = {.g = g, .mb = g->m, .nb = g->n};
  double macs = (double)g->m * (double)g->n * (double)g->k;
  int64_t want = t > 1 ? (int64_t)(macs / (double)(1 << 21)) : 1; /* blocks per batch worth a call */
  if (want > 4 * (int64_t)t) want = 4 * (int64_t)t;
  if (g->batch < (int64_t)t && want > 1) {
    bool along_m = g->m >= g->n;
    int64_t len = along_m ? g->m : g->n;
    int64_t pieces = len / 64 < want ? len / 64 : want;
    if (pieces > 1) {
      int64_t sz = (len + pieces - 1) / pieces;
      if (along_m) j.mb = sz;
      else j.nb = sz;
    }
  }
  j.mblocks = (g->m + j.mb - 1) / j.mb;
  j.nblocks = (g->n + j.nb - 1) / j.nb;
  int64_t tasks = g->batch * j.mblocks * j.nblocks;
  /* small products: enough of them per range to be worth a thread */
  double task_macs = (double)j.mb * (double)j.nb * (double)g->k;
  int64_t grain = task_macs >= (double)(1 << 21) ? 1 : (int64_t)((double)(1 << 21) / (task_macs > 1 ? task_macs : 1));
  vl_cpu_parallel_for(tasks, grain, gemm_range, &j);
  return VL_OK;
}

vl_status vl_cpu_gemm(const vl_gemm_args *g) {
  if (g->m <= 0 || g->n <= 0 || g->batch <= 0) return VL_OK;
  if (g->dtype != VL_F32 && g->dtype != VL_F64 && g->dtype != VL_F16 && g->dtype != VL_BF16)
    return vl_fail(VL_EDTYPE, "gemm (cpu): dtype %s is not supported (f32, f16, bf16, f64)",
                   vl_dtype_name(g->dtype));
  if (g->bias_path) *g->bias_path = g->bias ? VL_GEMM_BIAS_PREFILL : VL_GEMM_BIAS_NONE;
  if (g->k <= 0) {
    scale_c(g);
    return VL_OK;
  }
  if (g->m > INT_MAX || g->n > INT_MAX || g->k > INT_MAX || g->lda > INT_MAX || g->ldb > INT_MAX ||
      g->ldc > INT_MAX)
    return vl_fail(VL_EINVAL, "gemm (cpu): sizes m=%lld n=%lld k=%lld (lda %lld, ldb %lld, ldc %lld) "
                   "exceed the BLAS integer range", (long long)g->m, (long long)g->n,
                   (long long)g->k, (long long)g->lda, (long long)g->ldb, (long long)g->ldc);

  /* The compute dtype: f64 for f64, f32 otherwise. */
  vl_dtype ct = g->dtype == VL_F64 ? VL_F64 : VL_F32;
  bool native = g->dtype == ct;
  int64_t es = (int64_t)vl_dtype_size(g->dtype), ec = (int64_t)vl_dtype_size(ct);
  operand A = {g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, g->lda, g->stride_a, g->a, false, NULL, NULL};
  operand Bm = {g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, g->ldb, g->stride_b, g->b, false, NULL, NULL};
  operand C = {g->m, g->n, g->ldc, g->stride_c, g->c, false, NULL, NULL};
  A.packed = need_pack(&A, native);
  Bm.packed = need_pack(&Bm, native);
  C.packed = need_pack(&C, native);
  if (!A.packed && !Bm.packed && !C.packed) return native_gemm(g);
  /* The packed path (f16/bf16, or an ld BLAS would reject) runs batch after batch on OpenBLAS's
   * own threads. */
  vl_cpu_blas_threads(vl_cpu_threads());
  if (A.packed) A.pk = malloc((size_t)(A.rows * A.cols * ec));
  if (Bm.packed) Bm.pk = malloc((size_t)(Bm.rows * Bm.cols * ec));
  if (C.packed) C.pk = malloc((size_t)(C.rows * C.cols * ec));
  if ((A.packed && !A.pk) || (Bm.packed && !Bm.pk) || (C.packed && !C.pk)) {
    free(A.pk);
    free(Bm.pk);
    free(C.pk);
    return vl_fail(VL_EOOM, "gemm (cpu): cannot allocate packing buffers for %s m=%lld n=%lld k=%lld",
                   vl_dtype_name(g->dtype), (long long)g->m, (long long)g->n, (long long)g->k);
  }

  /* A bias is written into C (with beta * C) before a beta = 1 product: one rounding for f16/bf16,
   * whose C is the f32 packing buffer. */
  double beta = g->bias ? 1.0 : g->beta;
  enum CBLAS_TRANSPOSE ta = g->trans_a ? CblasTrans : CblasNoTrans;
  enum CBLAS_TRANSPOSE tb = g->trans_b ? CblasTrans : CblasNoTrans;
  for (int64_t b = 0; b < g->batch; b++) {
    int64_t lda, ldb, ldc;
    const void *pa = operand_at(&A, b, g->dtype, ct, es, &lda);
    const void *pb = operand_at(&Bm, b, g->dtype, ct, es, &ldb);
    char *c_src = (char *)g->c + b * g->stride_c * es;
    void *pc;
    if (C.packed) {
      /* beta == 0: C is not read (it may hold NaN); BLAS overwrites the buffer. */
      if (g->beta != 0.0) pack(c_src, g->dtype, C.rows, C.cols, C.ld, C.pk, ct);
      pc = C.pk;
      ldc = C.cols > 1 ? C.cols : 1;
      if (g->bias) prefill_c(C.pk, ct, C.rows, C.cols, C.cols, g->beta, g->bias, g->dtype);
    } else {
      pc = c_src;
      ldc = C.rows > 1 ? C.ld : (C.ld > C.cols ? C.ld : C.cols);
      if (g->bias) prefill_c(c_src, g->dtype, C.rows, C.cols, C.ld, g->beta, g->bias, g->dtype);
    }
    if (ct == VL_F64)
      cblas_dgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, g->alpha, pa, (int)lda,
                  pb, (int)ldb, beta, pc, (int)ldc);
    else
      cblas_sgemm(CblasRowMajor, ta, tb, (int)g->m, (int)g->n, (int)g->k, (float)g->alpha, pa,
                  (int)lda, pb, (int)ldb, (float)beta, pc, (int)ldc);
    if (C.packed) unpack(C.pk, ct, C.rows, C.cols, c_src, g->dtype, C.ld);
  }
  free(A.pk);
  free(Bm.pk);
  free(C.pk);
  vl_cpu_blas_threads(1);
  return VL_OK;
}
