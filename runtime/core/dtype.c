/* runtime/core/dtype.c: dtype table, promotion, and host conversions for f16/bf16. */
#include "runtime/core/dtype.h"

#include <math.h>
#include <string.h>

static const struct {
  const char *name;
  size_t size;
} vl_dtypes[] = {
    [VL_F32] = {"f32", 4}, [VL_F16] = {"f16", 2}, [VL_BF16] = {"bf16", 2}, [VL_F64] = {"f64", 8},
    [VL_I32] = {"i32", 4}, [VL_I64] = {"i64", 8}, [VL_U8] = {"u8", 1},     [VL_BOOL] = {"bool", 1},
};
VL_TABLE_SIZE(vl_dtypes, VL_NDTYPES);

/* The one alias table: the tensor bindings parse through vl_dtype_parse and the Lua library
 * (v100.dtypes, nn.Module:to) reads it through vl_dtype_name_at, so the two cannot drift. */
static const struct {
  const char *alias;
  vl_dtype dt;
} vl_dtype_aliases[] = {
    {"float32", VL_F32},   {"float", VL_F32},   {"float16", VL_F16}, {"half", VL_F16},
    {"bfloat16", VL_BF16}, {"float64", VL_F64}, {"double", VL_F64},  {"int32", VL_I32},
    {"int", VL_I32},       {"int64", VL_I64},   {"long", VL_I64},    {"uint8", VL_U8},
    {"byte", VL_U8},
};
#define VL_NALIASES ((int)VL_COUNTOF(vl_dtype_aliases))

size_t vl_dtype_size(vl_dtype dt) { return (unsigned)dt < VL_NDTYPES ? vl_dtypes[dt].size : 0; }

const char *vl_dtype_name(vl_dtype dt) {
  return (unsigned)dt < VL_NDTYPES ? vl_dtypes[dt].name : "?";
}

bool vl_dtype_name_at(int i, const char **name, vl_dtype *dt) {
  if (i < 0 || i >= VL_NDTYPES + VL_NALIASES) return false;
  if (i < VL_NDTYPES) {
    *name = vl_dtypes[i].name;
    *dt = (vl_dtype)i;
  } else {
    *name = vl_dtype_aliases[i - VL_NDTYPES].alias;
    *dt = vl_dtype_aliases[i - VL_NDTYPES].dt;
  }
  return true;
}

vl_status vl_dtype_parse(const char *name, vl_dtype *out) {
  const char *n;
  vl_dtype dt;
  for (int i = 0; name && vl_dtype_name_at(i, &n, &dt); i++)
    if (strcmp(name, n) == 0) {
      *out = dt;
      return VL_OK;
    }
  return vl_fail(VL_EDTYPE, "unknown dtype '%s' (expected f32, f16, bf16, f64, i32, i64, u8 or bool)",
                 name ? name : "(null)");
}

bool vl_dtype_is_float(vl_dtype dt) {
  return dt == VL_F32 || dt == VL_F16 || dt == VL_BF16 || dt == VL_F64;
}

bool vl_dtype_is_int(vl_dtype dt) {
  return dt == VL_I32 || dt == VL_I64 || dt == VL_U8 || dt == VL_BOOL;
}

/* Rank within a category; higher wins. */
static int float_rank(vl_dtype d) { return d == VL_F64 ? 3 : d == VL_F32 ? 2 : 1; }
static int int_rank(vl_dtype d) { return d == VL_I64 ? 3 : d == VL_I32 ? 2 : d == VL_U8 ? 1 : 0; }

vl_dtype vl_dtype_promote(vl_dtype a, vl_dtype b) {
  if (a == b) return a;
  bool fa = vl_dtype_is_float(a), fb = vl_dtype_is_float(b);
  if (fa && !fb) return a;
  if (fb && !fa) return b;
  if (fa && fb) {
    /* f16 with bf16: neither holds the other, so f32 as PyTorch does. */
    if ((a == VL_F16 && b == VL_BF16) || (a == VL_BF16 && b == VL_F16)) return VL_F32;
    return float_rank(a) >= float_rank(b) ? a : b;
  }
  return int_rank(a) >= int_rank(b) ? a : b;
}

uint16_t vl_f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u); /* overflow -> inf */
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign; /* underflow -> signed zero */
    man |= 0x800000u;                   /* subnormal: shift in the hidden bit */
    int shift = 14 - e;
    uint32_t half = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) half++;
    return (uint16_t)(sign | half);
  }
  uint32_t half = sign | ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1))) half++; /* may carry into exp: correct */
  return (uint16_t)half;
}

float vl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (man == 0) {
      x = sign;
    } else { /* subnormal: normalise */
      int e = -1;
      do { man <<= 1; e++; } while (!(man & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (man << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

uint16_t vl_f32_to_bf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1u);                                           /* nearest even */
  return (uint16_t)(x >> 16);
}

float vl_bf16_to_f32(uint16_t h) {
  uint32_t x = (uint32_t)h << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

double vl_load_as_f64(const void *p, vl_dtype dt) {
  switch (dt) {
    case VL_F32: return *(const float *)p;
    case VL_F16: return vl_f16_to_f32(*(const uint16_t *)p);
    case VL_BF16: return vl_bf16_to_f32(*(const uint16_t *)p);
    case VL_F64: return *(const double *)p;
    case VL_I32: return *(const int32_t *)p;
    case VL_I64: return (double)*(const int64_t *)p;
    case VL_U8: return *(const uint8_t *)p;
    case VL_BOOL: return *(const uint8_t *)p ? 1.0 : 0.0;
    default: return NAN;
  }
}

static int64_t f64_to_i64_sat(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

void vl_store_from_f64(void *p, vl_dtype dt, double v) {
  switch (dt) {
    case VL_F32: *(float *)p = (float)v; break;
    case VL_F16: *(uint16_t *)p = vl_f64_to_half_bits(v, 10, 15); break; /* one rounding */
    case VL_BF16: *(uint16_t *)p = vl_f64_to_half_bits(v, 7, 127); break;
    case VL_F64: *(double *)p = v; break;
    /* As the CPU copy kernels (kernels/cpu/cpu_internal.h): truncate and saturate, NaN -> 0; a
     * raw cast of an out-of-range double is undefined (UBSan's float-cast-overflow). */
    case VL_I32: {
      int64_t x = f64_to_i64_sat(v);
      *(int32_t *)p = x > INT32_MAX ? INT32_MAX : x < INT32_MIN ? INT32_MIN : (int32_t)x;
      break;
    }
    case VL_I64: *(int64_t *)p = f64_to_i64_sat(v); break;
    case VL_U8: *(uint8_t *)p = (uint8_t)(uint64_t)f64_to_i64_sat(v); break;
    case VL_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: break;
  }
}
