/* kernels/cuda/cuda_gemm.cu: batched GEMM through cuBLASLt.
 *
 * cuBLASLt is column-major. A row-major m x n matrix with row stride ld is, read column-major, its
 * n x m transpose with leading dimension ld, so row-major C = op(A) @ op(B) is computed as the
 * column-major C^T = op(B)^T @ op(A)^T: the operands swap places and keep their transpose flags.
 *
 * A plan (descriptors + heuristic candidates + the algorithm that first ran) is cached per
 * problem key: dtype, transposes, sizes, leading dimensions, batch strides, TF32 and the pointer
 * alignments (algorithms may require aligned operands, so a plan found for aligned pointers is
 * not reused for misaligned ones). Each stream has its own 32 MiB workspace.
 *
 * A bias (Linear's b in y = x W^T + b) is added by cuBLASLt's BIAS epilogue: our row-major C's
 * columns are cuBLASLt's rows, and that epilogue adds a vector along D's rows, which is exactly a
 * per-output-feature bias. Where the epilogue cannot be used (f64, batches, a bias pointer not
 * 16-byte aligned, or no algorithm offered), C is prefilled with beta * C + bias by a small
 * kernel and the GEMM runs with beta = 1: the same result with one more pass over C. */
#include <cublasLt.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

#define VL_GEMM_SLOTS 256
#define VL_GEMM_PROBE 8
#define VL_GEMM_CANDIDATES 8

struct vl_gemm_key {
  int64_t m, n, k, batch, lda, ldb, ldc, sa, sb, sc;
  int32_t dtype, ta, tb, tf32;
  uint32_t align_a, align_b, align_c, epilogue_bias;
};

struct vl_gemm_plan {
  bool used;
  vl_gemm_key key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our B), B (our A), C */
  cublasLtMatmulHeuristicResult_t cand[VL_GEMM_CANDIDATES];
  int ncand;
  int chosen; /* index into cand of the algorithm that ran, -1 before the first run */
};

struct vl_gemm_cache {
  vl_gemm_plan slot[VL_GEMM_SLOTS];
};

static void vl_gemm_plan_release(vl_gemm_plan *p) {
  if (!p->used) return;
  if (p->la) (void)cublasLtMatrixLayoutDestroy(p->la);
  if (p->lb) (void)cublasLtMatrixLayoutDestroy(p->lb);
  if (p->lc) (void)cublasLtMatrixLayoutDestroy(p->lc);
  if (p->desc) (void)cublasLtMatmulDescDestroy(p->desc);
  memset(p, 0, sizeof *p);
}

void vl_cuda_gemm_cache_free(vl_cuda_state *st) {
  if (!st->gemm) return;
  for (int i = 0; i < VL_GEMM_SLOTS; i++) vl_gemm_plan_release(&st->gemm->slot[i]);
  free(st->gemm);
  st->gemm = NULL;
}

static uint64_t vl_gemm_hash(const vl_gemm_key *k) {
  const unsigned char *b = (const unsigned char *)k;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < sizeof *k; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* Largest power of two <= 256 dividing the address of every batch's matrix. */
static uint32_t vl_gemm_align(const void *p, int64_t stride, size_t es, int64_t batch) {
  uintptr_t a = (uintptr_t)p;
  if (batch > 1) a |= (uintptr_t)(stride * (int64_t)es);
  uint32_t al = 256;
  while (al > 1 && (a % al) != 0) al >>= 1;
  return al;
}

static vl_status vl_gemm_layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows,
                                int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  /* With one column the leading dimension is never stepped; cuBLASLt still wants ld >= rows. */
  if (cols <= 1 && ld < rows) ld = rows;
  if (ld < 1) ld = 1;
  VL_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
  if (batch > 1) {
    int32_t bc = (int32_t)batch;
    VL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc));
    VL_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                     &stride, sizeof stride));
  }
  return VL_OK;
}

static vl_status vl_gemm_plan_build(vl_cuda_state *st, vl_gemm_plan *p, const vl_gemm_key *key) {
  const vl_gemm_key &k = *key;
  cudaDataType_t t;
  cublasComputeType_t ct;
  cudaDataType_t scale = CUDA_R_32F;
  switch ((vl_dtype)k.dtype) {
    case VL_F32: t = CUDA_R_32F; ct = k.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F; break;
    case VL_F16: t = CUDA_R_16F; ct = CUBLAS_COMPUTE_32F; break;
    case VL_BF16: t = CUDA_R_16BF; ct = CUBLAS_COMPUTE_32F; break;
    case VL_F64: t = CUDA_R_64F; ct = CUBLAS_COMPUTE_64F; scale = CUDA_R_64F; break;
    default: return vl_fail(VL_EDTYPE, "gemm: dtype %s is not supported on cuda", vl_dtype_name((vl_dtype)k.dtype));
  }
  p->used = true;
  p->key = k;
  p->chosen = -1;
  VL_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, ct, scale));
  cublasOperation_t opa = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  VL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  VL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  if (k.epilogue_bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    VL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
    /* The bias has C's dtype (the default for f16/bf16 is C's type too; said for clarity). */
    VL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
  }
  VL_TRY(vl_gemm_layout(&p->la, t, k.tb ? k.k : k.n, k.tb ? k.n : k.k, k.ldb, k.batch, k.sb));
  VL_TRY(vl_gemm_layout(&p->lb, t, k.ta ? k.m : k.k, k.ta ? k.k : k.m, k.lda, k.batch, k.sa));
  VL_TRY(vl_gemm_layout(&p->lc, t, k.n, k.m, k.ldc, k.batch, k.sc));

  cublasLtMatmulPreference_t pref = NULL;
  VL_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  uint64_t ws = VL_CUDA_WORKSPACE_BYTES;
  uint32_t al_a = k.align_b, al_b = k.align_a, al_c = k.align_c;
  cublasStatus_t s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c);
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof al_c);
  int n = 0;
  if (s == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)st->lt, p->desc, p->la, p->lb, p->lc, p->lc,
                                       pref, VL_GEMM_CANDIDATES, p->cand, &n);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || n == 0)
    return vl_fail(VL_ECUBLAS,
                   "%s:%d: gemm: cuBLASLt has no algorithm for %s m=%lld n=%lld k=%lld batch=%lld "
                   "(trans_a=%d trans_b=%d lda=%lld ldb=%lld ldc=%lld): %s",
                   __FILE__, __LINE__, vl_dtype_name((vl_dtype)k.dtype), (long long)k.m,
                   (long long)k.n, (long long)k.k, (long long)k.batch, k.ta, k.tb, (long long)k.lda,
                   (long long)k.ldb, (long long)k.ldc,
                   s != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(s) : "no candidates");
  p->ncand = 0;
  for (int i = 0; i < n; i++)
    if (p->cand[i].state == CUBLAS_STATUS_SUCCESS) p->cand[p->ncand++] = p->cand[i];
  if (p->ncand == 0) return vl_fail(VL_ECUBLAS, "gemm: every cuBLASLt candidate was rejected");
  return VL_OK;
}

/* The cached plan for `key`, built on a miss (evicting a slot of the probe window when full). */
static vl_status vl_gemm_plan_get(vl_cuda_state *st, const vl_gemm_key *key, vl_gemm_plan **out) {
  if (!st->gemm) {
    st->gemm = (vl_gemm_cache *)calloc(1, sizeof(vl_gemm_cache));
    if (!st->gemm) return vl_fail(VL_EOOM, "gemm: out of host memory for the plan cache");
  }
  const uint64_t h = vl_gemm_hash(key);
  vl_gemm_plan *victim = NULL;
  for (int i = 0; i < VL_GEMM_PROBE; i++) {
    vl_gemm_plan *p = &st->gemm->slot[(h + (uint64_t)i) % VL_GEMM_SLOTS];
    if (p->used && memcmp(&p->key, key, sizeof *key) == 0) {
      *out = p;
      return VL_OK;
    }
    if (!p->used && !victim) victim = p;
  }
  if (!victim) victim = &st->gemm->slot[h % VL_GEMM_SLOTS];
  vl_gemm_plan_release(victim);
  vl_status s = vl_gemm_plan_build(st, victim, key);
  if (s != VL_OK) {
    vl_gemm_plan_release(victim);
    return s;
  }
  *out = victim;
  return VL_OK;
}

/* C = beta * C (+ bias[col]) over [batch, m, n]; beta == 0 writes without reading C. Used for
 * k == 0 (no product) and to prefill C with the bias where the epilogue cannot add it. */
template <typename T>
__global__ void vl_gemm_prefill_c(T *c, int64_t m, int64_t n, int64_t ldc, int64_t sc, int64_t batch,
                                  double beta, const T *bias) {
  typedef typename vl_acc<T>::type C;
  const int64_t total = batch * m * n, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t b = i / (m * n), r = (i / n) % m, col = i % n;
    T *p = c + b * sc + r * ldc + col;
    C v = beta == 0.0 ? (C)0 : (C)beta * vl_val(*p);
    if (bias) v += vl_val(bias[col]);
    *p = vl_conv<T>::f(v);
  }
}

static vl_status vl_gemm_prefill(const vl_gemm_args *a, vl_cuda_state *st) {
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  unsigned g = vl_grid(a->batch * a->m * a->n, 256, st, 2);
  VL_DISPATCH_FLOAT(a->dtype, T, "gemm", {
    vl_gemm_prefill_c<T><<<g, 256, 0, stream>>>((T *)a->c, a->m, a->n, a->ldc, a->stride_c, a->batch, a->beta,
                                                (const T *)a->bias);
  });
  VL_LAUNCH_CHECK();
  return VL_OK;
}

/* Runs the cached plan for key: candidates in heuristic order until one accepts the problem
 * (that one is kept). *planned is false when no plan could be made (no algorithm at all). */
static vl_status vl_gemm_run(vl_cuda_state *st, const vl_gemm_args *a, const vl_gemm_key *key, double beta_d,
                             void *ws, bool *planned) {
  vl_gemm_plan *p = NULL;
  *planned = false;
  VL_TRY(vl_gemm_plan_get(st, key, &p));
  *planned = true;
  if (key->epilogue_bias)
    VL_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &a->bias,
                                                   sizeof a->bias));
  float alpha32 = (float)a->alpha, beta32 = (float)beta_d;
  const void *alpha = &alpha32, *beta = &beta32;
  if (a->dtype == VL_F64) alpha = &a->alpha, beta = &beta_d;
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  cublasLtHandle_t h = (cublasLtHandle_t)st->lt;
  int first = p->chosen >= 0 ? p->chosen : 0;
  cublasStatus_t s = CUBLAS_STATUS_NOT_SUPPORTED;
  for (int i = first; i < p->ncand; i++) {
    if (p->cand[i].workspaceSize > VL_CUDA_WORKSPACE_BYTES) continue;
    s = cublasLtMatmul(h, p->desc, alpha, a->b, p->la, a->a, p->lb, beta, a->c, p->lc, a->c, p->lc,
                       &p->cand[i].algo, ws, VL_CUDA_WORKSPACE_BYTES, stream);
    if (s == CUBLAS_STATUS_SUCCESS) {
      p->chosen = i;
      return VL_OK;
    }
    if (p->chosen >= 0 || (s != CUBLAS_STATUS_NOT_SUPPORTED && s != CUBLAS_STATUS_INVALID_VALUE &&
                           s != CUBLAS_STATUS_ARCH_MISMATCH))
      break;
  }
  return vl_fail(VL_ECUBLAS,
                 "%s:%d: cublasLtMatmul failed for %s m=%lld n=%lld k=%lld batch=%lld%s: %s", __FILE__,
                 __LINE__, vl_dtype_name(a->dtype), (long long)a->m, (long long)a->n, (long long)a->k,
                 (long long)a->batch, key->epilogue_bias ? " (bias epilogue)" : "", cublasLtGetStatusString(s));
}

vl_status vl_cuda_gemm(const vl_gemm_args *a) {
  if (a->m <= 0 || a->n <= 0 || a->batch <= 0) return VL_OK;
  if (a->dtype != VL_F32 && a->dtype != VL_F16 && a->dtype != VL_BF16 && a->dtype != VL_F64)
    return vl_fail(VL_EDTYPE, "gemm: dtype %s is not supported on cuda", vl_dtype_name(a->dtype));
  if (a->batch > INT32_MAX)
    return vl_fail(VL_EINVAL, "gemm: batch %lld exceeds cuBLASLt's 32-bit batch count", (long long)a->batch);
  VL_CUDA_ENTER(guard, st, a->ex);
  if (a->bias_path) *a->bias_path = a->bias ? VL_GEMM_BIAS_PREFILL : VL_GEMM_BIAS_NONE;
  if (a->k <= 0) return vl_gemm_prefill(a, st);
  if (!st->lt) {
    cublasLtHandle_t h = NULL;
    VL_CUBLAS_CHECK(cublasLtCreate(&h));
    st->lt = h;
  }
  void *ws = NULL;
  VL_TRY(vl_cuda_workspace(st, a->ex.stream, &ws));

  const size_t es = vl_dtype_size(a->dtype);
  vl_gemm_key key;
  memset(&key, 0, sizeof key); /* padding takes part in hashing and comparison */
  key.m = a->m, key.n = a->n, key.k = a->k, key.batch = a->batch;
  key.lda = a->lda, key.ldb = a->ldb, key.ldc = a->ldc;
  key.sa = a->batch > 1 ? a->stride_a : 0;
  key.sb = a->batch > 1 ? a->stride_b : 0;
  key.sc = a->batch > 1 ? a->stride_c : 0;
  key.dtype = (int32_t)a->dtype, key.ta = a->trans_a, key.tb = a->trans_b;
  key.tf32 = a->dtype == VL_F32 && a->allow_tf32;
  key.align_a = vl_gemm_align(a->a, a->stride_a, es, a->batch);
  key.align_b = vl_gemm_align(a->b, a->stride_b, es, a->batch);
  key.align_c = vl_gemm_align(a->c, a->stride_c, es, a->batch);
  bool planned = false;
  if (a->bias && a->dtype != VL_F64 && a->batch == 1 && a->beta == 0.0 && vl_gemm_align(a->bias, 0, es, 1) >= 16) {
    key.epilogue_bias = 1;
    vl_status s = vl_gemm_run(st, a, &key, 0.0, ws, &planned);
    if (s == VL_OK) {
      if (a->bias_path) *a->bias_path = VL_GEMM_BIAS_EPILOGUE;
      return VL_OK;
    }
    if (planned) return s; /* an algorithm failed at run time: a real error, not a missing feature */
    key.epilogue_bias = 0; /* no algorithm with this epilogue: prefill instead */
  }
  double beta = a->beta;
  if (a->bias) {
    VL_TRY(vl_gemm_prefill(a, st));
    beta = 1.0;
  }
  return vl_gemm_run(st, a, &key, beta, ws, &planned);
}
