/* kernels/cpu/cpu_convert.c: dtype conversions of blocks and the strided iterator. */
#include "kernels/cpu/cpu_internal.h"

int64_t vl_cpu_f64_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

/* One typed loop per source dtype; the contiguous case is separate so it vectorises. */
#define VL_LOAD_LOOP(T, CONV)                                           \
  do {                                                                  \
    if (bs == (int64_t)sizeof(T)) {                                     \
      const T *s_ = (const T *)src;                                     \
      for (int64_t i = 0; i < n; i++) dst[i] = CONV(s_[i]);             \
    } else {                                                            \
      for (int64_t i = 0; i < n; i++) dst[i] = CONV(*(const T *)(src + i * bs)); \
    }                                                                   \
  } while (0)

#define VL_ID(x) (x)
#define VL_F16L(x) vl_cpu_f16_to_f64(x)
#define VL_BF16L(x) vl_cpu_bf16_to_f64(x)
#define VL_BOOLL(x) ((x) != 0)
#define VL_F2I(x) vl_cpu_f64_to_i64((double)(x))
#define VL_F16I(x) vl_cpu_f64_to_i64(vl_cpu_f16_to_f64(x))
#define VL_BF16I(x) vl_cpu_f64_to_i64(vl_cpu_bf16_to_f64(x))

void vl_cpu_load_f64(double *dst, const char *src, int64_t bs, vl_dtype dt, int64_t n) {
  switch (dt) {
    case VL_F32: VL_LOAD_LOOP(float, (double)VL_ID); break;
    case VL_F16: VL_LOAD_LOOP(uint16_t, VL_F16L); break;
    case VL_BF16: VL_LOAD_LOOP(uint16_t, VL_BF16L); break;
    case VL_F64: VL_LOAD_LOOP(double, VL_ID); break;
    case VL_I32: VL_LOAD_LOOP(int32_t, (double)VL_ID); break;
    case VL_I64: VL_LOAD_LOOP(int64_t, (double)VL_ID); break;
    case VL_U8: VL_LOAD_LOOP(uint8_t, (double)VL_ID); break;
    case VL_BOOL: VL_LOAD_LOOP(uint8_t, (double)VL_BOOLL); break;
    default: for (int64_t i = 0; i < n; i++) dst[i] = NAN; break;
  }
}

void vl_cpu_load_i64(int64_t *dst, const char *src, int64_t bs, vl_dtype dt, int64_t n) {
  switch (dt) {
    case VL_F32: VL_LOAD_LOOP(float, VL_F2I); break;
    case VL_F16: VL_LOAD_LOOP(uint16_t, VL_F16I); break;
    case VL_BF16: VL_LOAD_LOOP(uint16_t, VL_BF16I); break;
    case VL_F64: VL_LOAD_LOOP(double, VL_F2I); break;
    case VL_I32: VL_LOAD_LOOP(int32_t, (int64_t)VL_ID); break;
    case VL_I64: VL_LOAD_LOOP(int64_t, VL_ID); break;
    case VL_U8: VL_LOAD_LOOP(uint8_t, (int64_t)VL_ID); break;
    case VL_BOOL: VL_LOAD_LOOP(uint8_t, (int64_t)VL_BOOLL); break;
    default: for (int64_t i = 0; i < n; i++) dst[i] = 0; break;
  }
}

#define VL_STORE_LOOP(T, CONV)                                         \
  do {                                                                 \
    if (bs == (int64_t)sizeof(T)) {                                    \
      T *d_ = (T *)dst;                                                \
      for (int64_t i = 0; i < n; i++) d_[i] = CONV(src[i]);            \
    } else {                                                           \
      for (int64_t i = 0; i < n; i++) *(T *)(dst + i * bs) = CONV(src[i]); \
    }                                                                  \
  } while (0)

#define VL_TO_F32(x) ((float)(x))
#define VL_TO_BOOL(x) ((uint8_t)((x) != 0))
#define VL_F2U8(x) ((uint8_t)(uint64_t)vl_cpu_f64_to_i64(x))
#define VL_I2U8(x) ((uint8_t)(uint64_t)(x))
#define VL_I2F64(x) ((double)(x))
#define VL_I2F16(x) vl_cpu_f64_to_f16((double)(x))
#define VL_I2BF16(x) vl_cpu_f64_to_bf16((double)(x))

void vl_cpu_store_f64(char *dst, int64_t bs, vl_dtype dt, const double *src, int64_t n) {
  switch (dt) {
    case VL_F32: VL_STORE_LOOP(float, VL_TO_F32); break;
    case VL_F16: VL_STORE_LOOP(uint16_t, vl_cpu_f64_to_f16); break;
    case VL_BF16: VL_STORE_LOOP(uint16_t, vl_cpu_f64_to_bf16); break;
    case VL_F64: VL_STORE_LOOP(double, VL_ID); break;
    case VL_I32: VL_STORE_LOOP(int32_t, vl_cpu_sat_i32); break;
    case VL_I64: VL_STORE_LOOP(int64_t, vl_cpu_f64_to_i64); break;
    case VL_U8: VL_STORE_LOOP(uint8_t, VL_F2U8); break;
    case VL_BOOL: VL_STORE_LOOP(uint8_t, VL_TO_BOOL); break;
    default: break;
  }
}

void vl_cpu_store_i64(char *dst, int64_t bs, vl_dtype dt, const int64_t *src, int64_t n) {
  switch (dt) {
    case VL_F32: VL_STORE_LOOP(float, VL_TO_F32); break;
    case VL_F16: VL_STORE_LOOP(uint16_t, VL_I2F16); break;
    case VL_BF16: VL_STORE_LOOP(uint16_t, VL_I2BF16); break;
    case VL_F64: VL_STORE_LOOP(double, VL_I2F64); break;
    case VL_I32: VL_STORE_LOOP(int32_t, vl_cpu_wrap_i32); break;
    case VL_I64: VL_STORE_LOOP(int64_t, VL_ID); break;
    case VL_U8: VL_STORE_LOOP(uint8_t, VL_I2U8); break;
    case VL_BOOL: VL_STORE_LOOP(uint8_t, VL_TO_BOOL); break;
    default: break;
  }
}

/* Elements per parallel chunk: a thread's wake-up costs about what 16k additions do. */
#define VL_CPU_GRAIN 16384

typedef struct {
  const vl_iter *it;
  vl_cpu_loop_fn fn;
  void *ctx;
  int64_t es[VL_ITER_MAX], bs[VL_ITER_MAX];
  int64_t n; /* the inner run's length */
  bool split_inner;
} each_job;

/* Runs [lo, hi) of the iterator (or elements [lo, hi) of its one run when split_inner). */
static void each_range(void *vj, int64_t lo, int64_t hi) {
  const each_job *j = vj;
  const vl_iter *it = j->it;
  int nops = it->nops, inner = it->ndim - 1;
  char *ptr[VL_ITER_MAX] = {0};
  if (j->split_inner) {
    for (int k = 0; k < nops; k++) ptr[k] = (char *)it->data[k] + lo * j->bs[k];
    j->fn(j->ctx, ptr, j->bs, hi - lo);
    return;
  }
  /* The odometer at run lo: its outer index, from the last outer dim up. */
  int64_t idx[VL_MAX_DIMS] = {0};
  for (int k = 0; k < nops; k++) ptr[k] = it->data[k];
  int64_t r = lo;
  for (int d = inner - 1; d >= 0 && r > 0; d--) {
    idx[d] = r % it->size[d];
    r /= it->size[d];
    for (int k = 0; k < nops; k++) ptr[k] += idx[d] * it->stride[k][d] * j->es[k];
  }
  for (int64_t run = lo; run < hi; run++) {
    j->fn(j->ctx, ptr, j->bs, j->n);
    /* Odometer over the outer dims, moving the pointers incrementally. */
    for (int d = inner - 1; d >= 0; d--) {
      if (++idx[d] < it->size[d]) {
        for (int k = 0; k < nops; k++) ptr[k] += it->stride[k][d] * j->es[k];
        break;
      }
      for (int k = 0; k < nops; k++) ptr[k] -= it->stride[k][d] * j->es[k] * (it->size[d] - 1);
      idx[d] = 0;
    }
  }
}

/* Elementwise work is split over the CPU threads: by runs when there are several, within the
 * run when there is one (a contiguous tensor). Every fn call writes only its own elements of
 * operand 0, so the split changes no result. */
void vl_cpu_for_each(const vl_iter *it, vl_cpu_loop_fn fn, void *ctx) {
  each_job j = {.it = it, .fn = fn, .ctx = ctx};
  int nops = it->nops;
  for (int k = 0; k < nops; k++) j.es[k] = (int64_t)vl_dtype_size(it->dtype[k]);
  if (it->ndim == 0) {
    char *ptr[VL_ITER_MAX] = {0};
    for (int k = 0; k < nops; k++) ptr[k] = it->data[k];
    fn(ctx, ptr, j.bs, 1);
    return;
  }
  int64_t total = 1;
  for (int d = 0; d < it->ndim; d++) total *= it->size[d];
  if (total <= 0) return;
  int inner = it->ndim - 1;
  j.n = it->size[inner];
  for (int k = 0; k < nops; k++) j.bs[k] = it->stride[k][inner] * j.es[k];
  int64_t runs = total / j.n;
  if (runs == 1) {
    j.split_inner = true;
    vl_cpu_parallel_for(j.n, VL_CPU_GRAIN, each_range, &j);
  } else {
    vl_cpu_parallel_for(runs, (VL_CPU_GRAIN + j.n - 1) / j.n, each_range, &j);
  }
}
