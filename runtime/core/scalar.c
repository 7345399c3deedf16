/* runtime/core/scalar.c: the one scalar-to-dtype conversion rule (see scalar.h). */
#include "runtime/core/scalar.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

const char *vl_scalar_str(vl_scalar s, char *buf, size_t n) {
  if (s.is_int) snprintf(buf, n, "%lld", (long long)s.i);
  else snprintf(buf, n, "%.17g", s.f);
  return buf;
}

/* Integer range of an integer dtype, as exact int64 bounds. */
static void int_range(vl_dtype dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
    case VL_I32: *lo = INT32_MIN; *hi = INT32_MAX; break;
    case VL_U8: *lo = 0; *hi = UINT8_MAX; break;
    default: *lo = INT64_MIN; *hi = INT64_MAX; break;
  }
}

vl_status vl_scalar_to(const char *op, vl_scalar s, vl_dtype dt, void *out) {
  if ((unsigned)dt >= VL_NDTYPES) return vl_fail(VL_EDTYPE, "%s: invalid dtype %d", op, (int)dt);
  unsigned char elem[8];
  if (vl_dtype_is_float(dt)) {
    /* (double)i rounds once, correctly. f16/bf16/f32 from an integer go through that double:
     * exact up to 2^53; above, a rare tie can round one unit of the narrow type differently
     * from a direct rounding (what the kernels' double path does too). */
    vl_store_from_f64(elem, dt, s.is_int ? (double)s.i : s.f);
  } else if (dt == VL_BOOL) {
    elem[0] = s.is_int ? s.i != 0 : s.f != 0.0;
  } else {
    int64_t lo, hi, v;
    int_range(dt, &lo, &hi);
    bool ok;
    if (s.is_int) {
      v = s.i;
      ok = v >= lo && v <= hi;
    } else {
      double t = trunc(s.f);
      /* [-2^63, 2^63) is exactly the doubles whose cast to int64 is defined. */
      ok = isfinite(t) && t >= -9223372036854775808.0 && t < 9223372036854775808.0;
      v = ok ? (int64_t)t : 0;
      ok = ok && v >= lo && v <= hi;
    }
    if (!ok) {
      char b[40];
      return vl_fail(VL_EINVAL, "%s: value %s cannot be converted to %s without overflow", op,
                     vl_scalar_str(s, b, sizeof b), vl_dtype_name(dt));
    }
    switch (dt) {
      case VL_I32: { int32_t x = (int32_t)v; memcpy(elem, &x, 4); break; }
      case VL_U8: elem[0] = (uint8_t)v; break;
      default: memcpy(elem, &v, 8); break;
    }
  }
  if (out) memcpy(out, elem, vl_dtype_size(dt));
  return VL_OK;
}
