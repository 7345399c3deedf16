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

void vl_cpu_for_each(const vl_iter *it, vl_cpu_loop_fn fn, void *ctx) {
  char *ptr[VL_ITER_MAX] = {0};
  int64_t bs[VL_ITER_MAX] = {0}, es[VL_ITER_MAX] = {0};
  int nops = it->nops;
  for (int k = 0; k < nops; k++) {
    ptr[k] = it->data[k];
    es[k] = (int64_t)vl_dtype_size(it->dtype[k]);
  }
  if (it->ndim == 0) {
    fn(ctx, ptr, bs, 1);
    return;
  }
  int64_t total = 1;
  for (int d = 0; d < it->ndim; d++) total *= it->size[d];
  if (total <= 0) return;
  int inner = it->ndim - 1;
  int64_t n = it->size[inner];
  for (int k = 0; k < nops; k++) bs[k] = it->stride[k][inner] * es[k];
  int64_t idx[VL_MAX_DIMS] = {0};
  for (int64_t r = 0, runs = total / n; r < runs; r++) {
    fn(ctx, ptr, bs, n);
    /* Odometer over the outer dims, moving the pointers incrementally. */
    for (int d = inner - 1; d >= 0; d--) {
      if (++idx[d] < it->size[d]) {
        for (int k = 0; k < nops; k++) ptr[k] += it->stride[k][d] * es[k];
        break;
      }
      for (int k = 0; k < nops; k++) ptr[k] -= it->stride[k][d] * es[k] * (it->size[d] - 1);
      idx[d] = 0;
    }
  }
}
