/* kernels/cpu/cpu_sort.c: the stable row sort and searchsorted (runtime/backend/kernels.h).
 *
 * Each element becomes an unsigned 64-bit key whose unsigned order is the order the op promises
 * (kernels/cuda/cuda_sort.cu builds the same keys for CUB's radix sort, so both backends agree bit
 * for bit): floats flip their sign bit (negatives all their bits), -0.0 is first made +0.0 (a tie
 * with +0.0) and every NaN the all-ones key (the largest); signed integers flip the sign bit.
 * Descending sorts the complemented key ascending, which keeps ties in input order as PyTorch's
 * stable sort does. The row's (key, position) pairs go through a stable merge sort, then the
 * values are copied as bits from the input (so -0.0 and NaN payloads come out as they went in). */
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"

typedef struct sort_item {
  uint64_t k;
  int64_t i;
} sort_item;

static inline uint64_t key_f32(uint32_t b) {
  if ((b & 0x7fffffffu) > 0x7f800000u) return UINT64_MAX; /* NaN */
  if ((b & 0x7fffffffu) == 0) b = 0;                      /* -0.0 ties with +0.0 */
  return (b & 0x80000000u) ? (uint64_t)(~b) : (uint64_t)(b | 0x80000000u);
}
static inline uint64_t key_f64(uint64_t b) {
  if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return UINT64_MAX;
  if ((b & 0x7fffffffffffffffull) == 0) b = 0;
  return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}
/* f16 (inf 0x7c00) and bf16 (inf 0x7f80) */
static inline uint64_t key_h16(uint16_t h, uint16_t inf) {
  if ((h & 0x7fffu) > inf) return UINT64_MAX;
  if ((h & 0x7fffu) == 0) h = 0;
  return (h & 0x8000u) ? (uint64_t)(uint16_t)~h : (uint64_t)(h | 0x8000u);
}

static uint64_t key_of(const char *p, vl_dtype dt) {
  switch (dt) {
    case VL_F32: { uint32_t b; memcpy(&b, p, 4); return key_f32(b); }
    case VL_F64: { uint64_t b; memcpy(&b, p, 8); return key_f64(b); }
    case VL_F16: return key_h16(*(const uint16_t *)p, 0x7c00u);
    case VL_BF16: return key_h16(*(const uint16_t *)p, 0x7f80u);
    case VL_I32: return (uint64_t)(uint32_t)(*(const int32_t *)p) ^ 0x80000000u;
    case VL_I64: return (uint64_t)(*(const int64_t *)p) ^ 0x8000000000000000ull;
    case VL_U8: return *(const uint8_t *)p;
    case VL_BOOL: return *(const uint8_t *)p != 0;
    default: return 0;
  }
}

/* Stable merge sort of a[0, n) by key, tmp of n items as scratch; short runs by insertion. */
static void merge_sort(sort_item *a, sort_item *tmp, int64_t n) {
  if (n <= 24) {
    for (int64_t i = 1; i < n; i++) {
      sort_item x = a[i];
      int64_t j = i;
      while (j > 0 && a[j - 1].k > x.k) { /* strict: equal keys stay behind, stable */
        a[j] = a[j - 1];
        j--;
      }
      a[j] = x;
    }
    return;
  }
  int64_t h = n / 2;
  merge_sort(a, tmp, h);
  merge_sort(a + h, tmp + h, n - h);
  if (a[h - 1].k <= a[h].k) return; /* already in order (sorted or all-equal rows) */
  memcpy(tmp, a, sizeof *a * (size_t)n);
  int64_t i = 0, j = h, o = 0;
  while (i < h && j < n) a[o++] = tmp[j].k < tmp[i].k ? tmp[j++] : tmp[i++]; /* ties from the left */
  while (i < h) a[o++] = tmp[i++];
  while (j < n) a[o++] = tmp[j++];
}

typedef struct sort_job {
  const vl_sort_args *a;
  size_t esz;
  atomic_int oom;
} sort_job;

static void sort_rows(void *ctx, int64_t lo, int64_t hi) {
  sort_job *job = ctx;
  const vl_sort_args *a = job->a;
  int64_t len = a->len, inner = a->inner;
  size_t esz = job->esz;
  sort_item *buf = malloc(sizeof *buf * 2 * (size_t)len);
  if (!buf) {
    atomic_store(&job->oom, 1);
    return;
  }
  uint64_t flip = a->descending ? UINT64_MAX : 0;
  for (int64_t r = lo; r < hi; r++) {
    int64_t o = r / inner, in = r % inner;
    int64_t base = o * len * inner + in; /* element j of the row at base + j * inner */
    const char *src = (const char *)a->in + (size_t)base * esz;
    for (int64_t j = 0; j < len; j++) {
      buf[j].k = key_of(src + (size_t)(j * inner) * esz, a->dtype) ^ flip;
      buf[j].i = j;
    }
    merge_sort(buf, buf + len, len);
    char *dst = (char *)a->values + (size_t)base * esz;
    int64_t *ix = a->indices + base;
    for (int64_t j = 0; j < len; j++) {
      memcpy(dst + (size_t)(j * inner) * esz, src + (size_t)(buf[j].i * inner) * esz, esz);
      ix[j * inner] = buf[j].i;
    }
  }
  free(buf);
}

vl_status vl_cpu_sort(const vl_sort_args *a) {
  sort_job job = {.a = a, .esz = vl_dtype_size(a->dtype)};
  atomic_init(&job.oom, 0);
  int64_t rows = a->outer * a->inner;
  int64_t grain = a->len >= 4096 ? 1 : 4096 / a->len; /* a few thousand elements per task */
  vl_cpu_parallel_for(rows, grain, sort_rows, &job);
  if (atomic_load(&job.oom))
    return vl_fail(VL_EOOM, "sort: out of host memory for a row of %lld elements", (long long)a->len);
  return VL_OK;
}

/* ---- searchsorted: PyTorch's lower / upper bound, with its exact comparisons ---- */

typedef struct search_job {
  const vl_search_args *a;
  size_t esz;
  bool is_int;
} search_job;

#define VL_BOUND(T, LOAD)                                                               \
  do {                                                                                  \
    T v = LOAD(vp);                                                                     \
    while (lo < hi) {                                                                   \
      int64_t mid = lo + ((hi - lo) >> 1);                                              \
      T b = LOAD(row + (size_t)mid * esz);                                              \
      /* !(b >= v), not b < v: a NaN value moves right to n, as in PyTorch */             \
      if (a->right ? !(b > v) : !(b >= v)) lo = mid + 1;                                \
      else hi = mid;                                                                    \
    }                                                                                   \
  } while (0)

static void search_range(void *ctx, int64_t from, int64_t to) {
  const search_job *job = ctx;
  const vl_search_args *a = job->a;
  size_t esz = job->esz;
  vl_dtype dt = a->dtype;
#define LD_I(p) vl_cpu_ld_i64((p), dt)
#define LD_F(p) vl_cpu_ld_f64((p), dt)
  for (int64_t e = from; e < to; e++) {
    int64_t r = e / a->m;
    const char *row = (const char *)a->seq + (size_t)((a->seq_rows == 1 ? 0 : r) * a->n) * esz;
    const char *vp = (const char *)a->values + (size_t)e * esz;
    int64_t lo = 0, hi = a->n;
    if (job->is_int) VL_BOUND(int64_t, LD_I); /* integers compared exactly in int64 */
    else VL_BOUND(double, LD_F);              /* every float dtype is exact in double */
    if (a->out_i32) ((int32_t *)a->out)[e] = (int32_t)lo;
    else ((int64_t *)a->out)[e] = lo;
  }
#undef LD_I
#undef LD_F
}

vl_status vl_cpu_searchsorted(const vl_search_args *a) {
  search_job job = {.a = a, .esz = vl_dtype_size(a->dtype), .is_int = !vl_dtype_is_float(a->dtype)};
  vl_cpu_parallel_for(a->rows * a->m, 2048, search_range, &job);
  return VL_OK;
}
