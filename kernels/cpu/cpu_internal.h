/* kernels/cpu/cpu_internal.h: shared pieces of the CPU kernels (private to kernels/cpu).
 *
 * The CPU kernels are the reference implementation. They are dtype-generic: every operand is
 * loaded into a block of doubles (floats) or int64s (integers), the op runs on those blocks, and
 * the result is rounded once to the output dtype. The common dtypes (f32, f64, i64) get direct
 * typed loops or zero-copy blocks so that contiguous work runs near memory speed.
 *
 * Conversion rules (the same on every path):
 *  - double -> f32 is C's cast (round to nearest even); double -> f16/bf16 is correctly rounded
 *    in one step (no double rounding through f32), as CUDA's __double2half does.
 *  - float -> i32/i64 truncates toward zero and saturates at the type's range; NaN gives 0
 *    (C leaves these undefined; this is what CUDA's cvt.rzi gives).
 *  - float -> u8 truncates to int64 then wraps mod 256 (as vl_store_from_f64 does).
 *  - int64 -> i32 wraps mod 2^32 (GCC/Clang define the narrowing conversion as modular);
 *    -> u8 wraps mod 256; -> bool is v != 0 (also for floats: NaN -> true). */
#ifndef VL_CPU_INTERNAL_H
#define VL_CPU_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime/backend/kernels.h"

/* Elements per block of the buffered paths: small enough for a few blocks to stay in L1. */
#define VL_CPU_BLOCK 256

/* ---- scalar conversions ---- */
int64_t vl_cpu_f64_to_i64(double v); /* trunc, saturating, NaN -> 0 (cpu_convert.c) */

/* runtime/core/dtype.h's one-step rounding (no double rounding through f32), inline. */
static inline uint16_t vl_cpu_f64_to_f16(double v) { return vl_f64_to_half_bits(v, 10, 15); }
static inline uint16_t vl_cpu_f64_to_bf16(double v) { return vl_f64_to_half_bits(v, 7, 127); }

static inline double vl_cpu_f16_to_f64(uint16_t h) {
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  double v;
  if (e == 0) v = (double)m * 0x1p-24; /* zero and subnormals, exact */
  else if (e == 31) v = m ? NAN : INFINITY;
  else {
    uint64_t bits = ((uint64_t)(e - 15 + 1023) << 52) | ((uint64_t)m << 42);
    memcpy(&v, &bits, 8);
  }
  return (h & 0x8000u) ? -v : v;
}
static inline double vl_cpu_bf16_to_f64(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static inline double vl_cpu_ld_f64(const char *p, vl_dtype dt) {
  switch (dt) {
    case VL_F32: return *(const float *)p;
    case VL_F16: return vl_cpu_f16_to_f64(*(const uint16_t *)p);
    case VL_BF16: return vl_cpu_bf16_to_f64(*(const uint16_t *)p);
    case VL_F64: return *(const double *)p;
    case VL_I32: return *(const int32_t *)p;
    case VL_I64: return (double)*(const int64_t *)p;
    case VL_U8: return *(const uint8_t *)p;
    case VL_BOOL: return *(const uint8_t *)p != 0;
    default: return NAN;
  }
}

static inline int64_t vl_cpu_ld_i64(const char *p, vl_dtype dt) {
  switch (dt) {
    case VL_I32: return *(const int32_t *)p;
    case VL_I64: return *(const int64_t *)p;
    case VL_U8: return *(const uint8_t *)p;
    case VL_BOOL: return *(const uint8_t *)p != 0;
    default: return vl_cpu_f64_to_i64(vl_cpu_ld_f64(p, dt));
  }
}

static inline int32_t vl_cpu_wrap_i32(int64_t v) { return (int32_t)(uint32_t)(uint64_t)v; }

static inline int32_t vl_cpu_sat_i32(double v) {
  if (v != v) return 0;
  if (v >= 2147483647.0) return INT32_MAX;
  if (v <= -2147483648.0) return INT32_MIN;
  return (int32_t)v;
}

static inline void vl_cpu_st_f64(char *p, vl_dtype dt, double v) {
  switch (dt) {
    case VL_F32: *(float *)p = (float)v; break;
    case VL_F16: *(uint16_t *)p = vl_cpu_f64_to_f16(v); break;
    case VL_BF16: *(uint16_t *)p = vl_cpu_f64_to_bf16(v); break;
    case VL_F64: *(double *)p = v; break;
    case VL_I32: *(int32_t *)p = vl_cpu_sat_i32(v); break;
    case VL_I64: *(int64_t *)p = vl_cpu_f64_to_i64(v); break;
    case VL_U8: *(uint8_t *)p = (uint8_t)(uint64_t)vl_cpu_f64_to_i64(v); break;
    case VL_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: break;
  }
}

static inline void vl_cpu_st_i64(char *p, vl_dtype dt, int64_t v) {
  switch (dt) {
    case VL_F32: *(float *)p = (float)v; break; /* correctly rounded from the integer */
    case VL_F16: *(uint16_t *)p = vl_cpu_f64_to_f16((double)v); break;
    case VL_BF16: *(uint16_t *)p = vl_cpu_f64_to_bf16((double)v); break;
    case VL_F64: *(double *)p = (double)v; break;
    case VL_I32: *(int32_t *)p = vl_cpu_wrap_i32(v); break;
    case VL_I64: *(int64_t *)p = v; break;
    case VL_U8: *(uint8_t *)p = (uint8_t)(uint64_t)v; break;
    case VL_BOOL: *(uint8_t *)p = v != 0; break;
    default: break;
  }
}

/* ---- block conversions: n elements at byte stride bs (cpu_convert.c) ---- */
void vl_cpu_load_f64(double *dst, const char *src, int64_t bs, vl_dtype dt, int64_t n);
void vl_cpu_load_i64(int64_t *dst, const char *src, int64_t bs, vl_dtype dt, int64_t n);
void vl_cpu_store_f64(char *dst, int64_t bs, vl_dtype dt, const double *src, int64_t n);
void vl_cpu_store_i64(char *dst, int64_t bs, vl_dtype dt, const int64_t *src, int64_t n);

/* The operand as a contiguous double block: the memory itself when it already is one (f64,
 * contiguous), otherwise `buf` after loading. Same for int64. */
static inline const double *vl_cpu_src_f64(double *buf, const char *p, int64_t bs, vl_dtype dt,
                                           int64_t n) {
  if (dt == VL_F64 && bs == 8) return (const double *)p;
  vl_cpu_load_f64(buf, p, bs, dt, n);
  return buf;
}
static inline const int64_t *vl_cpu_src_i64(int64_t *buf, const char *p, int64_t bs, vl_dtype dt,
                                            int64_t n) {
  if (dt == VL_I64 && bs == 8) return (const int64_t *)p;
  vl_cpu_load_i64(buf, p, bs, dt, n);
  return buf;
}

/* ---- elementwise iteration (cpu_convert.c) ----
 * Calls fn once per innermost run of the iterator: ptr[k] is the address of the run's first
 * element of operand k, bs[k] its byte stride along the run, n the run length (>= 1). */
typedef void (*vl_cpu_loop_fn)(void *ctx, char *const *ptr, const int64_t *bs, int64_t n);
void vl_cpu_for_each(const vl_iter *it, vl_cpu_loop_fn fn, void *ctx);

/* ---- threads (cpu_threads.c) ----
 * vl_cpu_parallel_for calls fn(ctx, lo, hi) over disjoint ranges covering [0, n), on up to
 * vl_cpu_threads() threads (the caller's among them), each range at least `grain` items
 * (except the last); on the calling thread alone when n < 2 * grain, with one thread, or when a
 * job already runs. fn must only write what its range owns. */
typedef void (*vl_cpu_range_fn)(void *ctx, int64_t lo, int64_t hi);
void vl_cpu_parallel_for(int64_t n, int64_t grain, vl_cpu_range_fn fn, void *ctx);
int vl_cpu_threads(void);

/* ---- the table entries ---- */
vl_status vl_cpu_fill(const vl_iter *it, double value);
vl_status vl_cpu_copy(const vl_iter *it);
vl_status vl_cpu_unary(vl_unary_op op, const vl_iter *it, double p0, double p1);
vl_status vl_cpu_binary(vl_binary_op op, const vl_iter *it, double alpha);
vl_status vl_cpu_binary_scalar(vl_binary_op op, const vl_iter *it, double s, bool reverse);
vl_status vl_cpu_where(const vl_iter *it);
vl_status vl_cpu_masked_fill(const vl_iter *it, double value);
vl_status vl_cpu_arange(void *out, vl_dtype dt, int64_t numel, double start, double step,
                        vl_exec ex);
vl_status vl_cpu_reduce(const vl_reduce_args *a);
vl_status vl_cpu_softmax(const vl_softmax_args *a);
vl_status vl_cpu_gemm(const vl_gemm_args *a);
/* OpenBLAS's thread count (cpu_gemm.c), set only when it changes. Every direct cblas_* call of
 * the backend sets it first (1: the backend's own threads do the parallel part): left alone, a
 * call sees the library's default (all cores) until some GEMM of the process sets it, and OpenBLAS
 * splits a product differently with another thread count, so the bits of a result would depend on
 * what ran before it in the process (a resumed run's first convolutions against the uninterrupted
 * run's). */
void vl_cpu_blas_threads(int t);
vl_status vl_cpu_gather(const vl_index_args *a);
vl_status vl_cpu_scatter_add(const vl_index_args *a);
vl_status vl_cpu_scatter(const vl_index_args *a);
vl_status vl_cpu_scatter_mul(const vl_index_args *a);
vl_status vl_cpu_index_select(const vl_index_args *a);
vl_status vl_cpu_rand(const vl_rand_args *a);
vl_status vl_cpu_scan(const vl_scan_args *a); /* cpu_scan.c */
vl_status vl_cpu_sort(const vl_sort_args *a);             /* cpu_sort.c */
vl_status vl_cpu_searchsorted(const vl_search_args *a);  /* cpu_sort.c */

#endif
