/* runtime/core/dtype.h: the one dtype enum, sizes, names, promotion and scalar conversions.
 * Kernels are generic over these; there are no per-type copies of ops. */
#ifndef VL_DTYPE_H
#define VL_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vl_dtype {
  VL_F32 = 0,
  VL_F16,
  VL_BF16,
  VL_F64,
  VL_I32,
  VL_I64,
  VL_U8,
  VL_BOOL,
  VL_NDTYPES
} vl_dtype;

size_t vl_dtype_size(vl_dtype dt);            /* bytes per element */
const char *vl_dtype_name(vl_dtype dt);       /* "f32", "f16", "bf16", "f64", "i32", "i64", "u8", "bool" */
/* Accepts the short names above and the aliases float32/float, float16/half, bfloat16,
 * float64/double, int32/int, int64/long, uint8/byte. */
vl_status vl_dtype_parse(const char *name, vl_dtype *out);
/* The i-th name vl_dtype_parse accepts (i = 0, 1, ...: the short names in enum order, then the
 * aliases) and its dtype; false past the last. For exporting the table (v100.dtypes). */
bool vl_dtype_name_at(int i, const char **name, vl_dtype *dt);
bool vl_dtype_is_float(vl_dtype dt);          /* f32, f16, bf16, f64 */
bool vl_dtype_is_int(vl_dtype dt);            /* i32, i64, u8, bool */
/* Result dtype of a binary op between two tensors (PyTorch's rules: floats win over ints,
 * f64 > f32 > {f16, bf16}; f16 with bf16 gives f32; i64 > i32 > u8 > bool). */
vl_dtype vl_dtype_promote(vl_dtype a, vl_dtype b);

/* IEEE half and bfloat16 conversions on the host, round to nearest even; NaN stays NaN. */
uint16_t vl_f32_to_f16(float f);
float vl_f16_to_f32(uint16_t h);
uint16_t vl_f32_to_bf16(float f);
float vl_bf16_to_f32(uint16_t h);

/* One element at `p` of dtype `dt`, as a double / stored from a double (with the dtype's own
 * rounding; bool stores v != 0; integers truncate toward zero and saturate, NaN -> 0, u8 wraps
 * mod 256 after that, as the CPU copy kernels do; runtime/core/scalar.h has the checked
 * conversion for user values). For host memory only; the slow generic path for printing,
 * item() and tests. */
double vl_load_as_f64(const void *p, vl_dtype dt);
/* double -> a 16-bit float with `mb` stored mantissa bits and exponent bias `bias` (f16: 10, 15;
 * bf16: 7, 127), rounded to nearest even straight from the 53-bit significand: going through f32
 * would round twice (a double just beyond an f16 midpoint can round to the midpoint in f32, and
 * then to even). Inline bit work: the CPU kernels' conversion loops call it per element. NaN
 * becomes the quiet NaN of the format. */
static inline uint16_t vl_f64_to_half_bits(double v, int mb, int bias) {
  uint64_t x;
  memcpy(&x, &v, 8);
  uint32_t sign = (uint32_t)(x >> 48) & 0x8000u;
  uint64_t ax = x & 0x7fffffffffffffffull;
  uint32_t inf = (uint32_t)(2 * bias + 1) << mb;
  if (ax > 0x7ff0000000000000ull) return (uint16_t)(sign | inf | (1u << (mb - 1)));
  int e = (int)(ax >> 52) - 1023;
  if (e > bias) return (uint16_t)(sign | inf); /* also infinities */
  int emin = 1 - bias;
  int shift = 52 - mb + (e >= emin ? 0 : emin - e);
  if (shift > 53) return (uint16_t)sign; /* below half the smallest subnormal */
  uint64_t m = (ax & 0xfffffffffffffull) | (1ull << 52);
  uint64_t q = m >> shift, rem = m & ((1ull << shift) - 1), mid = 1ull << (shift - 1);
  uint32_t h = e >= emin ? ((uint32_t)(e + bias) << mb) | ((uint32_t)q & ((1u << mb) - 1)) : (uint32_t)q;
  if (rem > mid || (rem == mid && (h & 1u))) h++; /* a carry into the exponent is correct */
  return (uint16_t)(sign | h);
}

void vl_store_from_f64(void *p, vl_dtype dt, double v);

#ifdef __cplusplus
}
#endif
#endif
