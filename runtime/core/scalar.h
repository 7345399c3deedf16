/* runtime/core/scalar.h: a number on its way into a tensor of some dtype, and the one rule that
 * converts it (tensor-from-table, full/fill, arange, scalar operands of elementwise ops).
 *
 * The rule (PyTorch's checked conversion, made strict for NaN/inf):
 *  - float dtypes (f64, f32, f16, bf16) take every value, rounded to nearest even; a value beyond
 *    the dtype's range becomes +-inf, as an IEEE cast does (so -1e9 masks work in f16);
 *  - integer dtypes (i64, i32, u8) take a finite value whose truncation toward zero lies in the
 *    dtype's range; NaN, +-inf and out-of-range values are VL_EINVAL
 *    "<op>: value 1e+10 cannot be converted to i32 without overflow" (nothing saturates or wraps);
 *  - bool takes every value: v != 0 (NaN is true, as in C and PyTorch);
 *  - an integer scalar (a Lua integer) is kept as int64 end to end, so i64 values above 2^53
 *    arrive exactly; into a float dtype it is rounded once, from the integer. */
#ifndef VL_SCALAR_H
#define VL_SCALAR_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_scalar {
  bool is_int; /* i holds the value exactly; f is (double)i */
  int64_t i;
  double f;
} vl_scalar;

static inline vl_scalar vl_scalar_int(int64_t i) {
  vl_scalar s = {true, i, (double)i};
  return s;
}
static inline vl_scalar vl_scalar_float(double f) {
  vl_scalar s = {false, 0, f};
  return s;
}

/* Whether s survives a double round trip exactly (floats always; integers up to 2^53 in
 * magnitude, and larger ones that happen to be representable are still refused: callers then
 * take their exact integer path, which is always correct). */
static inline bool vl_scalar_exact_f64(vl_scalar s) {
  return !s.is_int || (s.i >= -9007199254740992LL && s.i <= 9007199254740992LL);
}

/* Checks s against dt by the rule above and, when `out` is not NULL, stores it there in dt's
 * representation (vl_dtype_size(dt) bytes, host memory). `out` is untouched on failure. */
vl_status vl_scalar_to(const char *op, vl_scalar s, vl_dtype dt, void *out);

/* "1e+10", "nan", "9007199254740993" into buf (for messages); returns buf. */
const char *vl_scalar_str(vl_scalar s, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
