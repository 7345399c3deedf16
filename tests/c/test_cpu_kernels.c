/* tests/c/test_cpu_kernels.c: the CPU op table against direct computations.
 *
 * Iterators and argument structs are built by hand over small host arrays (contiguous, strided,
 * broadcast with stride 0, 3-D), so these tests need nothing of the runtime but dtype.c and
 * status.c. The last line is "N passed, N failed"; the exit status is non-zero on failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "runtime/philox.h"
#include "vl_test.h"

static const vl_kernels *K = &vl_cpu_kernels;
static const vl_dtype ALL[] = {VL_F32, VL_F16, VL_BF16, VL_F64, VL_I32, VL_I64, VL_U8, VL_BOOL};
#define NALL 8

/* ---- helpers ---- */
static void iter_init(vl_iter *it, int ndim, const int64_t *size, int nops) {
  memset(it, 0, sizeof *it);
  it->ndim = ndim;
  it->nops = nops;
  it->numel = 1;
  for (int d = 0; d < ndim; d++) {
    it->size[d] = size[d];
    it->numel *= size[d];
  }
}

/* strides NULL: contiguous over the iterator's shape. */
static void iter_op(vl_iter *it, int k, void *data, vl_dtype dt, const int64_t *strides) {
  it->data[k] = data;
  it->dtype[k] = dt;
  int64_t s = 1;
  for (int d = it->ndim - 1; d >= 0; d--) {
    it->stride[k][d] = strides ? strides[d] : s;
    s *= it->size[d];
  }
}

static double ld(const void *p, vl_dtype dt, int64_t i) {
  return vl_load_as_f64((const char *)p + i * (int64_t)vl_dtype_size(dt), dt);
}
static void st(void *p, vl_dtype dt, int64_t i, double v) {
  vl_store_from_f64((char *)p + i * (int64_t)vl_dtype_size(dt), dt, v);
}
static bool same(double a, double b) { return (isnan(a) && isnan(b)) || a == b; }
static bool close_to(double a, double b, double tol) {
  return same(a, b) || fabs(a - b) <= tol * (1.0 + fabs(b));
}

/* The test's own rounding of an exactly-representable-in-f32 double to dtype dt. Float to
 * integer: truncation, saturation for i32/i64, NaN -> 0, u8 wraps the (saturated) int64, bool is
 * != 0. */
static double sat_i64(double v) {
  return isnan(v) ? 0 : v >= 0x1p63 ? 0x1p63 : v < -0x1p63 ? -0x1p63 : trunc(v);
}
static double expect_conv(double v, vl_dtype dt) {
  switch (dt) {
    case VL_F32: return (float)v;
    case VL_F16: return vl_f16_to_f32(vl_f32_to_f16((float)v));
    case VL_BF16: return vl_bf16_to_f32(vl_f32_to_bf16((float)v));
    case VL_F64: return v;
    case VL_I32: return isnan(v) ? 0 : v >= 2147483647.0 ? 2147483647.0 : v <= -2147483648.0 ? -2147483648.0 : trunc(v);
    case VL_I64: return sat_i64(v);
    case VL_U8: return (double)(uint8_t)(v >= 0x1p63 ? 255 : (int64_t)sat_i64(v));
    case VL_BOOL: return v != 0;
    default: return NAN;
  }
}

static uint64_t g_lcg = 12345;
static double rnd(void) { /* uniform in [-1, 1), multiples of 2^-10: exact in every float dtype */
  g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
  return (double)((int64_t)(g_lcg >> 53) - 1024) / 1024.0;
}

/* ---- copy / fill ---- */
static void test_copy_all_pairs(void) {
  const double vals[] = {0, 1, -2, 3.5, 100, -0.75, 255, 7, 1e10, -1e10};
  enum { N = 10 };
  for (int si = 0; si < NALL; si++)
    for (int di = 0; di < NALL; di++) {
      vl_dtype s = ALL[si], d = ALL[di];
      unsigned char src[2 * N * 8], dst[N * 8];
      memset(dst, 0xAB, sizeof dst);
      for (int i = 0; i < N; i++) st(src, s, 2 * i, vals[i]); /* strided source: every other */
      vl_iter it;
      int64_t size[1] = {N}, sstr[1] = {2};
      iter_init(&it, 1, size, 2);
      iter_op(&it, 0, dst, d, NULL);
      iter_op(&it, 1, src, s, sstr);
      CHECK(K->copy(&it) == VL_OK, "copy");
      bool ok = true;
      for (int i = 0; i < N; i++) {
        double v = ld(src, s, 2 * i);
        /* Integer to integer wraps to the destination's width. */
        double want = vl_dtype_is_int(s) && d == VL_I32 ? (double)(int32_t)(uint32_t)(int64_t)v
                                                        : expect_conv(v, d);
        if (!same(ld(dst, d, i), want)) {
          ok = false;
          printf("  copy %s->%s [%d]: got %g want %g\n", vl_dtype_name(s), vl_dtype_name(d), i,
                 ld(dst, d, i), want);
        }
      }
      CHECK(ok, "copy %s -> %s", vl_dtype_name(s), vl_dtype_name(d));
    }
}

static void copy1(void *dst, vl_dtype d, const void *src, vl_dtype s, int64_t n) {
  vl_iter it;
  iter_init(&it, 1, &n, 2);
  iter_op(&it, 0, dst, d, NULL);
  iter_op(&it, 1, (void *)src, s, NULL);
  K->copy(&it);
}

static void test_copy_rounding(void) {
  /* f64 -> f16/bf16 is rounded once: just above a tie must round up, which a detour through
   * f32 (that lands exactly on the tie, then ties to even) gets wrong. */
  double d[4] = {1 + 0x1p-11 + 0x1p-40, 1 + 0x1p-8 + 0x1p-40, -(1 + 0x1p-11 + 0x1p-40), 65519.99};
  uint16_t h[4], b[4];
  copy1(h, VL_F16, d, VL_F64, 4);
  copy1(b, VL_BF16, d, VL_F64, 4);
  CHECK(h[0] == 0x3C01 && h[2] == 0xBC01, "f64->f16 above tie: %04x %04x", h[0], h[2]);
  CHECK(h[3] == 0x7BFF, "f64->f16 65519.99 -> 65504: %04x", h[3]);
  CHECK(b[1] == 0x3F81, "f64->bf16 above tie: %04x", b[1]);
  /* f32 -> f16/bf16 ties to even, overflow to inf, NaN stays NaN. */
  float f[6] = {1 + 0x1p-11f, 1 + 3 * 0x1p-11f, 65520.0f, NAN, 1 + 0x1p-8f, 1 + 3 * 0x1p-8f};
  copy1(h, VL_F16, f, VL_F32, 4);
  CHECK(h[0] == 0x3C00 && h[1] == 0x3C02 && h[2] == 0x7C00, "f32->f16 ties/overflow %04x %04x %04x",
        h[0], h[1], h[2]);
  CHECK((h[3] & 0x7C00) == 0x7C00 && (h[3] & 0x3FF), "f32->f16 NaN %04x", h[3]);
  uint16_t b2[6];
  copy1(b2, VL_BF16, f, VL_F32, 6);
  CHECK(b2[4] == 0x3F80 && b2[5] == 0x3F82 && isnan(vl_bf16_to_f32(b2[3])), "f32->bf16 ties %04x %04x",
        b2[4], b2[5]);
  /* Integer paths keep all 64 bits; narrowing wraps; NaN -> 0 for ints, true for bool. */
  int64_t big[3] = {(1ll << 62) + 1, 0x100000005ll, -1};
  int64_t big2[3];
  int32_t w[3];
  copy1(big2, VL_I64, big, VL_I64, 3);
  copy1(w, VL_I32, big, VL_I64, 3);
  CHECK(big2[0] == (1ll << 62) + 1 && w[1] == 5 && w[2] == -1, "i64 copies %d %d", w[1], w[2]);
  int32_t i257[2] = {257, -1};
  uint8_t u[2];
  copy1(u, VL_U8, i257, VL_I32, 2);
  CHECK(u[0] == 1 && u[1] == 255, "i32->u8 wrap %d %d", u[0], u[1]);
  int64_t p24 = (1 << 24) + 1;
  float fo;
  copy1(&fo, VL_F32, &p24, VL_I64, 1);
  CHECK(fo == 16777216.0f, "i64->f32 rounding %g", fo);
  float nan_in = NAN;
  int32_t ni;
  uint8_t nb;
  copy1(&ni, VL_I32, &nan_in, VL_F32, 1);
  copy1(&nb, VL_BOOL, &nan_in, VL_F32, 1);
  CHECK(ni == 0 && nb == 1, "NaN -> i32 %d, bool %d", ni, nb);
}

/* Every f16 / bf16 bit pattern: loads agree with runtime/dtype.c, and stores from double round
 * to nearest even at every midpoint between neighbouring values (subnormals included), while
 * anything off the midpoint goes to the nearer neighbour. */
static void test_half_exhaustive(void) {
  enum { H = 65536 };
  uint16_t *bits = malloc(H * sizeof *bits), *back = malloc(3 * H * sizeof *back);
  double *wide = malloc(3 * H * sizeof *wide);
  for (int t = 0; t < 2; t++) {
    vl_dtype d = t ? VL_BF16 : VL_F16;
    float (*to32)(uint16_t) = t ? vl_bf16_to_f32 : vl_f16_to_f32;
    for (int i = 0; i < H; i++) bits[i] = (uint16_t)i;
    copy1(wide, VL_F64, bits, d, H);
    bool ok = true;
    for (int i = 0; i < H; i++) ok &= same(wide[i], to32((uint16_t)i));
    CHECK(ok, "%s -> f64 all patterns", vl_dtype_name(d));
    /* Positive finite values h and h+1: midpoint and its two neighbours in double. */
    int n = 0;
    uint16_t lo_bits[H];
    for (int i = 0; i < 0x7fff; i++) {
      double a = to32((uint16_t)i), b = to32((uint16_t)(i + 1));
      if (!isfinite(a) || !isfinite(b)) continue;
      double mid = (a + b) / 2;
      lo_bits[n / 3] = (uint16_t)i;
      wide[n++] = mid;
      wide[n++] = nextafter(mid, 0);
      wide[n++] = -nextafter(mid, INFINITY); /* negative side too */
    }
    copy1(back, d, wide, VL_F64, n);
    ok = true;
    for (int k = 0; k < n / 3; k++) {
      uint16_t lo = lo_bits[k], even = (lo & 1) ? (uint16_t)(lo + 1) : lo;
      if (back[3 * k] != even || back[3 * k + 1] != lo || back[3 * k + 2] != (uint16_t)(0x8000 | (lo + 1))) {
        ok = false;
        printf("  %s rounding near %04x: %04x %04x %04x\n", vl_dtype_name(d), lo, back[3 * k],
               back[3 * k + 1], back[3 * k + 2]);
        break;
      }
    }
    CHECK(ok, "f64 -> %s round to nearest even at all midpoints", vl_dtype_name(d));
  }
  double edge[4] = {65520.0, nextafter(65520.0, 0), 1e300, 0x1p-25};
  copy1(back, VL_F16, edge, VL_F64, 4);
  CHECK(back[0] == 0x7C00 && back[1] == 0x7BFF && back[2] == 0x7C00 && back[3] == 0,
        "f16 overflow/underflow edges");
  free(bits); free(back); free(wide);
}

static void test_copy_3d(void) {
  /* out [2,3,4] contiguous f32 <- in: a transposed f64 [4,3,2] buffer (strides 1, 2, 6). */
  double in[24];
  float out[24];
  for (int i = 0; i < 24; i++) in[i] = i * 0.5;
  vl_iter it;
  int64_t size[3] = {2, 3, 4}, istr[3] = {1, 2, 6};
  iter_init(&it, 3, size, 2);
  iter_op(&it, 0, out, VL_F32, NULL);
  iter_op(&it, 1, in, VL_F64, istr);
  K->copy(&it);
  bool ok = true;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 3; b++)
      for (int c = 0; c < 4; c++) ok &= out[a * 12 + b * 4 + c] == (float)in[a + 2 * b + 6 * c];
  CHECK(ok, "copy 3-d transposed");
}

static void test_fill(void) {
  for (int di = 0; di < NALL; di++) {
    vl_dtype d = ALL[di];
    unsigned char buf[16 * 8];
    memset(buf, 0, sizeof buf);
    vl_iter it;
    int64_t n = 8, s2 = 2;
    iter_init(&it, 1, &n, 1);
    iter_op(&it, 0, buf, d, &s2);
    K->fill(&it, 2.5);
    bool ok = true;
    for (int i = 0; i < 16; i++) ok &= same(ld(buf, d, i), i % 2 ? 0 : expect_conv(2.5, d));
    CHECK(ok, "fill %s strided", vl_dtype_name(d));
  }
  float z[5] = {1, 1, 1, 1, 1};
  vl_iter it;
  iter_init(&it, 0, NULL, 1);
  iter_op(&it, 0, z + 2, VL_F32, NULL);
  K->fill(&it, -3);
  CHECK(z[2] == -3 && z[1] == 1 && z[3] == 1, "fill 0-dim");
}

/* ---- elementwise ---- */
static double ref_bin(vl_binary_op op, double a, double b, double alpha) {
  switch (op) {
    case VL_BIN_ADD: return a + alpha * b;
    case VL_BIN_SUB: return a - alpha * b;
    case VL_BIN_MUL: return a * b;
    case VL_BIN_DIV: return a / b;
    case VL_BIN_POW: return pow(a, b);
    case VL_BIN_MAXIMUM: return isnan(a) || isnan(b) ? NAN : fmax(a, b);
    case VL_BIN_MINIMUM: return isnan(a) || isnan(b) ? NAN : fmin(a, b);
    case VL_BIN_EQ: return a == b;
    case VL_BIN_NE: return a != b;
    case VL_BIN_LT: return a < b;
    case VL_BIN_LE: return a <= b;
    case VL_BIN_GT: return a > b;
    case VL_BIN_GE: return a >= b;
    case VL_BIN_LOGICAL_AND: return a != 0 && b != 0;
    default: return a != 0 || b != 0;
  }
}

/* out [2,3,4] = a (permuted [4,3,2] storage) op b (a [1,3,1] buffer broadcast with stride 0),
 * for float dtypes and ops whose exact results fit f32 (so expect_conv rounds correctly). */
static void test_binary_3d_broadcast(void) {
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16, VL_I32, VL_I64};
  const vl_binary_op ops[] = {VL_BIN_ADD, VL_BIN_SUB, VL_BIN_MUL, VL_BIN_MAXIMUM, VL_BIN_MINIMUM,
                              VL_BIN_EQ, VL_BIN_LT, VL_BIN_GE, VL_BIN_LOGICAL_AND};
  for (size_t di = 0; di < sizeof fl / sizeof fl[0]; di++)
    for (size_t oi = 0; oi < sizeof ops / sizeof ops[0]; oi++) {
      vl_dtype d = fl[di];
      vl_binary_op op = ops[oi];
      vl_dtype dout = vl_binary_is_predicate(op) ? VL_BOOL : d;
      bool isint = vl_dtype_is_int(d);
      unsigned char a[24 * 8], b[3 * 8], out[24 * 8];
      for (int i = 0; i < 24; i++) st(a, d, i, isint ? (double)(i % 7 - 3) : rnd() * 4);
      for (int i = 0; i < 3; i++) st(b, d, i, isint ? (double)(i - 1) : rnd() * 4);
      st(b, d, 1, ld(a, d, 0)); /* an equal pair for EQ */
      double alpha = op == VL_BIN_ADD || op == VL_BIN_SUB ? 2.0 : 1.0;
      vl_iter it;
      int64_t size[3] = {2, 3, 4}, astr[3] = {1, 2, 6}, bstr[3] = {0, 1, 0};
      iter_init(&it, 3, size, 3);
      iter_op(&it, 0, out, dout, NULL);
      iter_op(&it, 1, a, d, astr);
      iter_op(&it, 2, b, d, bstr);
      CHECK(K->binary(op, &it, alpha) == VL_OK, "binary");
      bool ok = true;
      for (int x = 0; x < 2; x++)
        for (int y = 0; y < 3; y++)
          for (int z = 0; z < 4; z++) {
            double want = expect_conv(ref_bin(op, ld(a, d, x + 2 * y + 6 * z), ld(b, d, y), alpha), dout);
            ok &= same(ld(out, dout, x * 12 + y * 4 + z), want);
          }
      CHECK(ok, "binary op %d %s 3-d broadcast", (int)op, vl_dtype_name(d));
    }
}

static void bin1(vl_binary_op op, vl_dtype dout, void *out, vl_dtype d, const void *a, const void *b,
                 int64_t n, double alpha) {
  vl_iter it;
  iter_init(&it, 1, &n, 3);
  iter_op(&it, 0, out, dout, NULL);
  iter_op(&it, 1, (void *)a, d, NULL);
  iter_op(&it, 2, (void *)b, d, NULL);
  K->binary(op, &it, alpha);
}

static void test_binary_special(void) {
  /* Correct rounding of f32 division and of a + alpha*b computed once in double. */
  float a[3] = {1, 2, 1e-8f}, b[3] = {3, 7, 1}, o[3];
  bin1(VL_BIN_DIV, VL_F32, o, VL_F32, a, b, 3, 1);
  CHECK(o[0] == 1.0f / 3.0f && o[1] == 2.0f / 7.0f, "f32 div");
  bin1(VL_BIN_ADD, VL_F32, o, VL_F32, a, b, 3, 0.1);
  CHECK(o[0] == (float)(1.0 + 0.1 * 3.0) && o[2] == (float)(1e-8f + 0.1), "f32 add alpha");
  /* NaN: maximum/minimum propagate; comparisons false except ne. */
  float na[2] = {NAN, 1}, nb[2] = {1, NAN};
  bin1(VL_BIN_MAXIMUM, VL_F32, o, VL_F32, na, nb, 2, 1);
  CHECK(isnan(o[0]) && isnan(o[1]), "maximum NaN");
  bin1(VL_BIN_MINIMUM, VL_F32, o, VL_F32, na, nb, 2, 1);
  CHECK(isnan(o[0]) && isnan(o[1]), "minimum NaN");
  uint8_t pb[2];
  bin1(VL_BIN_EQ, VL_BOOL, pb, VL_F32, na, na, 2, 1);
  CHECK(pb[0] == 0 && pb[1] == 1, "eq NaN");
  bin1(VL_BIN_NE, VL_BOOL, pb, VL_F32, na, na, 2, 1);
  CHECK(pb[0] == 1 && pb[1] == 0, "ne NaN");
  /* Integer wrap-around. */
  int32_t ia[3] = {INT32_MAX, 65536, -7}, ib[3] = {1, 65536, 2}, io[3];
  bin1(VL_BIN_ADD, VL_I32, io, VL_I32, ia, ib, 3, 1);
  CHECK(io[0] == INT32_MIN && io[2] == -5, "i32 add wrap %d", io[0]);
  bin1(VL_BIN_MUL, VL_I32, io, VL_I32, ia, ib, 3, 1);
  CHECK(io[1] == 0 && io[2] == -14, "i32 mul wrap %d", io[1]);
  int64_t la[2] = {INT64_MAX, 3}, lb[2] = {1, 40}, lo[2];
  bin1(VL_BIN_ADD, VL_I64, lo, VL_I64, la, lb, 2, 1);
  CHECK(lo[0] == INT64_MIN, "i64 add wrap");
  bin1(VL_BIN_POW, VL_I64, lo, VL_I64, la, lb, 2, 1);
  uint64_t p = 1;
  for (int i = 0; i < 40; i++) p *= 3;
  CHECK(lo[0] == INT64_MAX && lo[1] == (int64_t)p, "i64 pow wrap");
  uint8_t ua[2] = {200, 3}, ub[2] = {100, 5}, uo[2];
  bin1(VL_BIN_ADD, VL_U8, uo, VL_U8, ua, ub, 2, 1);
  CHECK(uo[0] == 44, "u8 add wrap %d", uo[0]);
  bin1(VL_BIN_SUB, VL_U8, uo, VL_U8, ua, ub, 2, 1);
  CHECK(uo[1] == 254, "u8 sub wrap %d", uo[1]);
  uint8_t ba[2] = {1, 0}, bb[2] = {1, 0}, bo[2];
  bin1(VL_BIN_ADD, VL_BOOL, bo, VL_BOOL, ba, bb, 2, 1);
  CHECK(bo[0] == 1 && bo[1] == 0, "bool add is or");
  /* A predicate stored in place into an f32 tensor: 0/1 in f32. */
  float fa[2] = {1, 2}, fb[2] = {1, 3};
  bin1(VL_BIN_EQ, VL_F32, fa, VL_F32, fa, fb, 2, 1);
  CHECK(fa[0] == 1.0f && fa[1] == 0.0f, "eq into f32");
}

static void test_binary_scalar(void) {
  float a[5] = {1, -2, 0.5f, 3, NAN}, o[5];
  int64_t n = 5;
  vl_iter it;
  iter_init(&it, 1, &n, 2);
  iter_op(&it, 0, o, VL_F32, NULL);
  iter_op(&it, 1, a, VL_F32, NULL);
  K->binary_scalar(VL_BIN_SUB, &it, 10, true);
  CHECK(o[0] == 9 && o[1] == 12 && o[2] == 9.5f && isnan(o[4]), "rsub scalar");
  K->binary_scalar(VL_BIN_MUL, &it, 0.1, false);
  CHECK(o[0] == (float)(1 * 0.1) && o[3] == (float)(3 * 0.1), "mul by double scalar");
  K->binary_scalar(VL_BIN_DIV, &it, 1, true);
  CHECK(o[0] == 1 && o[1] == -0.5f && o[2] == 2, "reciprocal via rdiv");
  uint8_t pb[5];
  it.dtype[0] = VL_BOOL;
  it.data[0] = (char *)pb;
  K->binary_scalar(VL_BIN_GT, &it, 0.75, false);
  CHECK(pb[0] == 1 && pb[1] == 0 && pb[2] == 0 && pb[3] == 1 && pb[4] == 0, "gt scalar");
  int32_t ia[3] = {2, 3, -3}, io[3];
  uint8_t ib[3];
  n = 3;
  iter_init(&it, 1, &n, 2);
  iter_op(&it, 0, ib, VL_BOOL, NULL);
  iter_op(&it, 1, ia, VL_I32, NULL);
  K->binary_scalar(VL_BIN_LT, &it, 2.5, false);
  CHECK(ib[0] == 1 && ib[1] == 0 && ib[2] == 1, "i32 lt 2.5");
  iter_op(&it, 0, io, VL_I32, NULL);
  K->binary_scalar(VL_BIN_POW, &it, 2, true); /* 2^a */
  CHECK(io[0] == 4 && io[1] == 8, "i32 rpow %d %d", io[0], io[1]);
  K->binary_scalar(VL_BIN_SUB, &it, 5, true);
  CHECK(io[0] == 3 && io[2] == 8, "i32 rsub");
}

static double ref_un(vl_unary_op op, double x, double lo, double hi) {
  switch (op) {
    case VL_UN_NEG: return -x;
    case VL_UN_ABS: return fabs(x);
    case VL_UN_SQUARE: return x * x;
    case VL_UN_SIGN: return x > 0 ? 1 : x < 0 ? -1 : x;
    case VL_UN_RELU: return isnan(x) ? x : x > 0 ? x : 0;
    case VL_UN_CLAMP: return isnan(x) ? x : fmin(fmax(x, lo), hi);
    case VL_UN_FLOOR: return floor(x);
    case VL_UN_CEIL: return ceil(x);
    case VL_UN_ROUND: return nearbyint(x);
    case VL_UN_EXP: return exp(x);
    case VL_UN_LOG: return log(x);
    case VL_UN_SQRT: return sqrt(x);
    case VL_UN_RSQRT: return 1 / sqrt(x);
    case VL_UN_TANH: return tanh(x);
    case VL_UN_SIGMOID: return 1 / (1 + exp(-x));
    case VL_UN_GELU: return x * 0.5 * erfc(-x / sqrt(2.0));
    case VL_UN_GELU_TANH: return 0.5 * x * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
    case VL_UN_RECIPROCAL: return 1 / x;
    case VL_UN_SIN: return sin(x);
    case VL_UN_COS: return cos(x);
    default: return x == 0;
  }
}

static void test_unary(void) {
  const double xs[] = {-2.5, -1, -0.5, 0, 0.5, 1.5, 2.5, 3, NAN, 7.25};
  enum { N = 10 };
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int op = 0; op < VL_NUNARY; op++)
    for (int di = 0; di < 4; di++) {
      vl_dtype d = fl[di], dout = op == VL_UN_LOGICAL_NOT ? VL_BOOL : d;
      unsigned char in[2 * N * 8], out[N * 8];
      for (int i = 0; i < N; i++) st(in, d, 2 * i, xs[i]);
      vl_iter it;
      int64_t n = N, s2 = 2;
      iter_init(&it, 1, &n, 2);
      iter_op(&it, 0, out, dout, NULL);
      iter_op(&it, 1, in, d, &s2);
      K->unary((vl_unary_op)op, &it, -1, 2);
      bool ok = true;
      for (int i = 0; i < N; i++) {
        double want = ref_un((vl_unary_op)op, xs[i], -1, 2), got = ld(out, dout, i);
        /* f32/f64 exact for the exactly-rounded ops; transcendental ops within an ulp or two
         * of libm's double result rounded to the dtype. */
        double tol = d == VL_F64 ? 1e-15 : d == VL_F32 ? 1e-7 : d == VL_F16 ? 1e-3 : 8e-3;
        ok &= close_to(got, dout == VL_F64 ? want : expect_conv(want, dout), tol);
      }
      CHECK(ok, "unary op %d %s", op, vl_dtype_name(d));
    }
  /* Integer unary ops, wrapping neg/abs of the minimum, clamp with float bounds. */
  int32_t ia[5] = {INT32_MIN, -3, 0, 4, 9}, io[5];
  int64_t n = 5;
  vl_iter it;
  iter_init(&it, 1, &n, 2);
  iter_op(&it, 0, io, VL_I32, NULL);
  iter_op(&it, 1, ia, VL_I32, NULL);
  K->unary(VL_UN_NEG, &it, 0, 0);
  CHECK(io[0] == INT32_MIN && io[1] == 3, "i32 neg wrap");
  K->unary(VL_UN_SIGN, &it, 0, 0);
  CHECK(io[0] == -1 && io[2] == 0 && io[4] == 1, "i32 sign");
  K->unary(VL_UN_CLAMP, &it, -2.5, 4.5);
  CHECK(io[0] == -2 && io[1] == -2 && io[3] == 4 && io[4] == 4, "i32 clamp");
  K->unary(VL_UN_CLAMP, &it, -INFINITY, 0);
  CHECK(io[0] == INT32_MIN && io[4] == 0, "i32 clamp max only");
  uint8_t nb[5];
  iter_op(&it, 0, nb, VL_BOOL, NULL);
  K->unary(VL_UN_LOGICAL_NOT, &it, 0, 0);
  CHECK(nb[2] == 1 && nb[0] == 0 && nb[4] == 0, "i32 logical_not");
  /* clamp with lo > hi gives hi, as torch.clamp. */
  float f = 5, g;
  n = 1;
  iter_init(&it, 1, &n, 2);
  iter_op(&it, 0, &g, VL_F32, NULL);
  iter_op(&it, 1, &f, VL_F32, NULL);
  K->unary(VL_UN_CLAMP, &it, 3, 1);
  CHECK(g == 1, "clamp lo > hi");
}

static void test_where_masked_fill(void) {
  /* out [2,3] = cond [2,1] (broadcast) ? a [2,3] : b [3] (broadcast) */
  uint8_t cond[2] = {1, 0}, mask[6] = {0, 1, 0, 1, 1, 0};
  double a[6] = {1, 2, 3, 4, 5, 6}, b[3] = {-1, -2, -3}, o[6];
  vl_iter it;
  int64_t size[2] = {2, 3}, cstr[2] = {1, 0}, bstr[2] = {0, 1};
  iter_init(&it, 2, size, 4);
  iter_op(&it, 0, o, VL_F64, NULL);
  iter_op(&it, 1, cond, VL_BOOL, cstr);
  iter_op(&it, 2, a, VL_F64, NULL);
  iter_op(&it, 3, b, VL_F64, bstr);
  K->where(&it);
  CHECK(o[0] == 1 && o[2] == 3 && o[3] == -1 && o[5] == -3, "where broadcast");
  iter_init(&it, 2, size, 3);
  iter_op(&it, 0, o, VL_F64, NULL);
  iter_op(&it, 1, a, VL_F64, NULL);
  iter_op(&it, 2, mask, VL_BOOL, NULL);
  K->masked_fill(&it, 9.5);
  CHECK(o[0] == 1 && o[1] == 9.5 && o[3] == 9.5 && o[4] == 9.5 && o[5] == 6, "masked_fill");
}

static void test_arange(void) {
  float f[5];
  int64_t l[4];
  uint16_t h[3];
  K->arange(f, VL_F32, 5, 0.5, 0.1, (vl_exec){0, NULL});
  CHECK(f[0] == 0.5f && f[3] == (float)(0.5 + 3 * 0.1), "arange f32");
  K->arange(l, VL_I64, 4, 3, -2, (vl_exec){0, NULL});
  CHECK(l[0] == 3 && l[3] == -3, "arange i64");
  K->arange(h, VL_F16, 3, 1000, 0.3, (vl_exec){0, NULL});
  CHECK(h[2] == vl_f32_to_f16(1000.6f), "arange f16");
}

/* ---- GEMM ---- */
static void gemm_case(vl_dtype d, bool ta, bool tb, int64_t batch, int64_t sa, int64_t sb, double beta) {
  enum { M = 3, N = 4, KK = 5, PAD = 2 };
  int64_t ar = ta ? KK : M, ac = ta ? M : KK, br = tb ? N : KK, bc = tb ? KK : N;
  int64_t lda = ac + PAD, ldb = bc + 1, ldc = N + 3;
  int64_t stra = sa ? ar * lda : 0, strb = sb ? br * ldb : 0, strc = M * ldc;
  size_t es = vl_dtype_size(d);
  char *A = calloc((size_t)(ar * lda * batch), es), *B = calloc((size_t)(br * ldb * batch), es);
  char *C = calloc((size_t)(strc * batch), es);
  double *want = calloc((size_t)(strc * batch), sizeof(double));
  for (int64_t i = 0; i < ar * lda * batch; i++) st(A, d, i, rnd());
  for (int64_t i = 0; i < br * ldb * batch; i++) st(B, d, i, rnd());
  for (int64_t i = 0; i < strc * batch; i++) st(C, d, i, beta == 0 ? NAN : rnd());
  double alpha = 1.5;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        double s = 0;
        for (int64_t k = 0; k < KK; k++) {
          double x = ld(A, d, b * stra + (ta ? k * lda + i : i * lda + k));
          double y = ld(B, d, b * strb + (tb ? j * ldb + k : k * ldb + j));
          s += x * y;
        }
        int64_t ci = b * strc + i * ldc + j;
        want[ci] = alpha * s + (beta == 0 ? 0 : beta * ld(C, d, ci));
      }
  vl_gemm_args g = {d, ta, tb, M, N, KK, batch, A, lda, stra, B, ldb, strb, C, ldc, strc, alpha, beta,
                    false, {0, NULL}};
  CHECK(K->gemm(&g) == VL_OK, "gemm status");
  double tol = d == VL_F64 ? 1e-14 : d == VL_F32 ? 1e-6 : d == VL_F16 ? 2e-3 : 1e-2;
  bool ok = true;
  for (int64_t b = 0; b < batch; b++)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) {
        int64_t ci = b * strc + i * ldc + j;
        if (!close_to(ld(C, d, ci), want[ci], tol)) {
          ok = false;
          printf("  gemm %s [%lld,%lld,%lld] got %g want %g\n", vl_dtype_name(d), (long long)b,
                 (long long)i, (long long)j, ld(C, d, ci), want[ci]);
        }
      }
  CHECK(ok, "gemm %s ta=%d tb=%d batch=%lld sa=%lld sb=%lld beta=%g", vl_dtype_name(d), ta, tb,
        (long long)batch, (long long)sa, (long long)sb, beta);
  free(A); free(B); free(C); free(want);
}

static void test_gemm(void) {
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int di = 0; di < 4; di++)
    for (int t = 0; t < 4; t++) {
      gemm_case(fl[di], t & 1, t & 2, 1, 1, 1, 0.0);
      gemm_case(fl[di], t & 1, t & 2, 3, 1, 0, 0.5);
      gemm_case(fl[di], t & 1, t & 2, 2, 0, 1, 0.0);
    }
  /* k == 0: C = beta * C, and beta == 0 does not read C (NaN becomes 0). */
  float c[4] = {NAN, NAN, 2, 4};
  vl_gemm_args g = {VL_F32, false, false, 1, 2, 0, 2, NULL, 0, 0, NULL, 2, 0, c, 2, 2, 1.0, 0.0,
                    false, {0, NULL}};
  K->gemm(&g);
  CHECK(c[0] == 0 && c[1] == 0 && c[2] == 0, "gemm k=0 beta=0");
  c[2] = 2;
  c[3] = 4;
  g.beta = 0.5;
  g.batch = 1;
  g.c = c + 2;
  K->gemm(&g);
  CHECK(c[2] == 1 && c[3] == 2, "gemm k=0 beta=0.5");
  /* A single-row A with an unusable lda (0) is still multiplied. */
  float a1[3] = {1, 2, 3}, b1[6] = {1, 0, 0, 1, 1, 1}, c1[2];
  vl_gemm_args g1 = {VL_F32, false, false, 1, 2, 3, 1, a1, 0, 0, b1, 2, 0, c1, 0, 0, 1.0, 0.0,
                     false, {0, NULL}};
  CHECK(K->gemm(&g1) == VL_OK && c1[0] == 4 && c1[1] == 5, "gemm single row lda=0");
}

/* ---- reductions ---- */
static void reduce_case(vl_reduce_op op, vl_dtype d, int64_t outer, int64_t len, int64_t inner,
                        double param) {
  int64_t n = outer * len * inner, nout = outer * inner;
  bool isint = vl_dtype_is_int(d);
  vl_dtype dout = isint && (op == VL_RED_SUM || op == VL_RED_PROD) ? VL_I64 : d;
  char *in = malloc((size_t)n * vl_dtype_size(d)), *out = malloc((size_t)nout * 8);
  int64_t *idx = malloc((size_t)nout * sizeof(int64_t));
  for (int64_t i = 0; i < n; i++)
    st(in, d, i, isint ? (double)((i * 7919) % 11 - 5) : op == VL_RED_PROD ? 1 + rnd() / 8 : rnd());
  vl_reduce_args ra = {op, d, dout, in, out, idx, outer, len, inner, param, {0, NULL}};
  CHECK(K->reduce(&ra) == VL_OK, "reduce status");
  bool ok = true;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      double acc = op == VL_RED_PROD ? 1 : 0, best = NAN, mean = 0;
      int64_t bi = -1;
      for (int64_t l = 0; l < len; l++) mean += ld(in, d, (o * len + l) * inner + j);
      mean /= (double)len;
      for (int64_t l = 0; l < len; l++) {
        double x = ld(in, d, (o * len + l) * inner + j);
        switch (op) {
          case VL_RED_PROD: acc *= x; break;
          case VL_RED_VAR: acc += (x - mean) * (x - mean); break;
          case VL_RED_NORM:
            acc = param == INFINITY ? fmax(acc, fabs(x)) : acc + pow(fabs(x), param); break;
          case VL_RED_MAX: if (bi < 0 || x > best) { best = x; bi = l; } break;
          case VL_RED_MIN: if (bi < 0 || x < best) { best = x; bi = l; } break;
          default: acc += x; break;
        }
      }
      double want = op == VL_RED_MEAN ? acc / (double)len
                  : op == VL_RED_VAR ? acc / ((double)len - param)
                  : op == VL_RED_NORM && param != INFINITY ? pow(acc, 1 / param)
                  : op == VL_RED_MAX || op == VL_RED_MIN ? best : acc;
      double tol = d == VL_F64 || isint ? 1e-12 : d == VL_F32 ? 1e-6 : d == VL_F16 ? 1e-3 : 8e-3;
      double got = ld(out, dout, o * inner + j);
      bool good = close_to(got, dout == VL_F64 || isint ? want : expect_conv(want, dout), tol);
      if ((op == VL_RED_MAX || op == VL_RED_MIN) && idx[o * inner + j] != bi) good = false;
      if (!good) printf("  reduce op %d [%lld,%lld] got %.17g want %.17g\n", (int)op, (long long)o,
                        (long long)j, got, want);
      ok &= good;
    }
  CHECK(ok, "reduce op %d %s [%lld,%lld,%lld] p=%g", (int)op, vl_dtype_name(d), (long long)outer,
        (long long)len, (long long)inner, param);
  free(in); free(out); free(idx);
}

static void test_reduce(void) {
  const int64_t shapes[][3] = {{2, 5, 3}, {3, 7, 1}, {1, 600, 1}, {2, 3, 300}, {1, 1, 4}};
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int s = 0; s < 5; s++) {
    const int64_t *sh = shapes[s];
    for (int di = 0; di < 4; di++) {
      vl_dtype d = fl[di];
      reduce_case(VL_RED_SUM, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MEAN, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MAX, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MIN, d, sh[0], sh[1], sh[2], 0);
      if (sh[1] > 1) reduce_case(VL_RED_VAR, d, sh[0], sh[1], sh[2], 1);
      reduce_case(VL_RED_VAR, d, sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], 1);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], 2);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], INFINITY);
      reduce_case(VL_RED_NORM, d, sh[0], sh[1], sh[2], 3);
      if (sh[1] < 100) reduce_case(VL_RED_PROD, d, sh[0], sh[1], sh[2], 0);
    }
    for (int di = 4; di < NALL; di++) {
      reduce_case(VL_RED_SUM, ALL[di], sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MAX, ALL[di], sh[0], sh[1], sh[2], 0);
      reduce_case(VL_RED_MIN, ALL[di], sh[0], sh[1], sh[2], 0);
      if (sh[1] < 20) reduce_case(VL_RED_PROD, ALL[di], sh[0], sh[1], sh[2], 0);
    }
  }
  /* NaN: the first NaN wins with its index; ties keep the first index. */
  float x[12] = {1, 5, 5, 2, /**/ 3, NAN, 9, NAN, /**/ 7, 7, 7, 7}, out[3];
  int64_t idx[3];
  vl_reduce_args ra = {VL_RED_MAX, VL_F32, VL_F32, x, out, idx, 3, 4, 1, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(out[0] == 5 && idx[0] == 1 && isnan(out[1]) && idx[1] == 1 && idx[2] == 0, "max NaN/ties");
  ra.op = VL_RED_MIN;
  K->reduce(&ra);
  CHECK(out[0] == 1 && idx[0] == 0 && isnan(out[1]) && idx[1] == 1, "min NaN");
  /* Same with lanes (inner = 3): column 1 holds NaN at position 2. */
  float y[9] = {1, 2, 3, 4, 0, 3, 0, NAN, 3};
  ra = (vl_reduce_args){VL_RED_MAX, VL_F32, VL_F32, y, out, idx, 1, 3, 3, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(out[0] == 4 && idx[0] == 1 && isnan(out[1]) && idx[1] == 2 && out[2] == 3 && idx[2] == 0,
        "max lanes NaN/ties");
  ra.indices = NULL;
  CHECK(K->reduce(&ra) == VL_OK && out[0] == 4, "max without indices");
  /* Integer sums are i64 and do not wrap at the input width; empty reductions. */
  uint8_t u[4] = {255, 255, 255, 255};
  int64_t s;
  ra = (vl_reduce_args){VL_RED_SUM, VL_U8, VL_I64, u, &s, NULL, 1, 4, 1, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(s == 1020, "u8 sum to i64 %lld", (long long)s);
  double e[3];
  ra = (vl_reduce_args){VL_RED_SUM, VL_F64, VL_F64, u, e, NULL, 3, 0, 1, 0, {0, NULL}};
  K->reduce(&ra);
  CHECK(e[0] == 0 && e[2] == 0, "empty sum");
  ra.op = VL_RED_PROD;
  K->reduce(&ra);
  CHECK(e[1] == 1, "empty prod");
  ra.op = VL_RED_MEAN;
  K->reduce(&ra);
  CHECK(isnan(e[0]), "empty mean NaN");
  /* VAR is stable for a large offset (naive E[x^2] - E[x]^2 would lose it all). */
  double v[4] = {1e9 + 1, 1e9 + 2, 1e9 + 3, 1e9 + 4}, var;
  ra = (vl_reduce_args){VL_RED_VAR, VL_F64, VL_F64, v, &var, NULL, 1, 4, 1, 1, {0, NULL}};
  K->reduce(&ra);
  CHECK(fabs(var - 5.0 / 3.0) < 1e-9, "var stable %.17g", var);
}

static void softmax_case(vl_dtype d, int64_t outer, int64_t len, int64_t inner, bool log_out) {
  int64_t n = outer * len * inner;
  char *in = malloc((size_t)n * 8), *out = malloc((size_t)n * 8);
  for (int64_t i = 0; i < n; i++) st(in, d, i, rnd() * 20);
  vl_softmax_args sa = {d, in, out, outer, len, inner, log_out, {0, NULL}};
  CHECK(K->softmax(&sa) == VL_OK, "softmax status");
  bool ok = true;
  double tol = d == VL_F64 ? 1e-13 : d == VL_F32 ? 1e-6 : d == VL_F16 ? 1e-3 : 8e-3;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < inner; j++) {
      double mx = -INFINITY, sum = 0;
      for (int64_t l = 0; l < len; l++) mx = fmax(mx, ld(in, d, (o * len + l) * inner + j));
      for (int64_t l = 0; l < len; l++) sum += exp(ld(in, d, (o * len + l) * inner + j) - mx);
      for (int64_t l = 0; l < len; l++) {
        int64_t i = (o * len + l) * inner + j;
        double x = ld(in, d, i) - mx;
        double want = log_out ? x - log(sum) : exp(x) / sum;
        ok &= close_to(ld(out, d, i), d == VL_F64 ? want : expect_conv(want, d), tol);
      }
    }
  CHECK(ok, "softmax %s [%lld,%lld,%lld] log=%d", vl_dtype_name(d), (long long)outer, (long long)len,
        (long long)inner, log_out);
  free(in); free(out);
}

static void test_softmax(void) {
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int di = 0; di < 4; di++)
    for (int lg = 0; lg < 2; lg++) {
      softmax_case(fl[di], 2, 4, 3, lg);
      softmax_case(fl[di], 3, 5, 1, lg);
      softmax_case(fl[di], 1, 700, 1, lg);
      softmax_case(fl[di], 2, 3, 260, lg);
    }
  float x[4] = {1, NAN, 2, 3}, o[4];
  vl_softmax_args sa = {VL_F32, x, o, 1, 4, 1, false, {0, NULL}};
  K->softmax(&sa);
  CHECK(isnan(o[0]) && isnan(o[3]), "softmax NaN row");
  float big[2] = {1000, 1000};
  sa.in = big;
  sa.len = 2;
  K->softmax(&sa);
  CHECK(o[0] == 0.5f && o[1] == 0.5f, "softmax large inputs");
}

/* ---- index ops ---- */
static vl_strided strided(void *data, vl_dtype dt, int ndim, const int64_t *size, const int64_t *stride) {
  vl_strided s;
  memset(&s, 0, sizeof s);
  s.data = data;
  s.dtype = dt;
  s.ndim = ndim;
  int64_t c = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    s.size[d] = size[d];
    s.stride[d] = stride ? stride[d] : c;
    c *= size[d];
  }
  return s;
}

static void test_gather(void) {
  /* src [3,4] stored transposed (storage [4,3], strides 1, 3): src[i][j] = 10 i + j. */
  float store[12];
  int64_t ss[2] = {3, 4}, sst[2] = {1, 3};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 4; j++) store[i + 3 * j] = (float)(10 * i + j);
  /* dim 1 (0-based), i64 index [3,2]. */
  int64_t ix[6] = {3, 0, 1, 1, 2, 3}, is[2] = {3, 2};
  float out[6];
  vl_index_args a = {"gather", strided(out, VL_F32, 2, is, NULL), strided(store, VL_F32, 2, ss, sst),
                     strided(ix, VL_I64, 2, is, NULL), 1, {0, NULL}};
  CHECK(K->gather(&a) == VL_OK, "gather status");
  bool ok = true;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 2; j++) ok &= out[i * 2 + j] == (float)(10 * i + ix[i * 2 + j]);
  CHECK(ok, "gather dim 1 i64");
  /* dim 0, i32 index [2,4]. */
  int32_t jx[8] = {2, 0, 1, 2, 0, 0, 2, 1};
  int64_t js[2] = {2, 4};
  float out2[8];
  a.out = strided(out2, VL_F32, 2, js, NULL);
  a.index = strided(jx, VL_I32, 2, js, NULL);
  a.dim = 0;
  K->gather(&a);
  ok = true;
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) ok &= out2[i * 4 + j] == (float)(10 * jx[i * 4 + j] + j);
  CHECK(ok, "gather dim 0 i32");
  /* Out of range: error naming the 1-based dim, output untouched. */
  for (int i = 0; i < 8; i++) out2[i] = -1;
  jx[7] = 3;
  vl_status s = K->gather(&a);
  bool untouched = true;
  for (int i = 0; i < 8; i++) untouched &= out2[i] == -1;
  CHECK(s == VL_EINVAL && untouched, "gather out of range: status %d", (int)s);
  CHECK(strcmp(vl_errmsg(), "gather: index 3 is out of bounds for dim 1 with size 3") == 0,
        "gather message: %s", vl_errmsg());
}

static void test_scatter_add(void) {
  /* out [3,4] f64 of ones; dim 0; index [2,4] with duplicates; src [3,4] (only [2,4] used). */
  double out[12], src[12];
  for (int i = 0; i < 12; i++) { out[i] = 1; src[i] = i + 1; }
  int64_t ix[8] = {0, 2, 2, 1, 0, 2, 0, 1}, os[2] = {3, 4}, is[2] = {2, 4};
  double want[12];
  memcpy(want, out, sizeof want);
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) want[ix[i * 4 + j] * 4 + j] += src[i * 4 + j];
  vl_index_args a = {"scatter_add", strided(out, VL_F64, 2, os, NULL), strided(src, VL_F64, 2, os, NULL),
                     strided(ix, VL_I64, 2, is, NULL), 0, {0, NULL}};
  CHECK(K->scatter_add(&a) == VL_OK && memcmp(out, want, sizeof out) == 0, "scatter_add f64 dim 0");
  /* Integer wrap in i32, dim 1. */
  int32_t io[2] = {INT32_MAX, 0}, isrc[3] = {1, 5, 7};
  int32_t ii[3] = {0, 1, 1};
  int64_t s1[2] = {1, 2}, s3[2] = {1, 3};
  a = (vl_index_args){"scatter_add", strided(io, VL_I32, 2, s1, NULL), strided(isrc, VL_I32, 2, s3, NULL),
                      strided(ii, VL_I32, 2, s3, NULL), 1, {0, NULL}};
  K->scatter_add(&a);
  CHECK(io[0] == INT32_MIN && io[1] == 12, "scatter_add i32 wrap");
  /* A bad index after good ones: nothing is written. */
  ix[7] = -1;
  memcpy(want, out, sizeof want);
  a = (vl_index_args){"scatter_add", strided(out, VL_F64, 2, os, NULL), strided(src, VL_F64, 2, os, NULL),
                      strided(ix, VL_I64, 2, is, NULL), 0, {0, NULL}};
  vl_status s = K->scatter_add(&a);
  CHECK(s == VL_EINVAL && memcmp(out, want, sizeof out) == 0, "scatter_add bad index untouched");
  CHECK(strcmp(vl_errmsg(), "scatter_add: index -1 is out of bounds for dim 1 with size 3") == 0,
        "scatter_add message: %s", vl_errmsg());
}

static void test_index_select(void) {
  uint8_t src[12], out[9];
  for (int i = 0; i < 12; i++) src[i] = (uint8_t)(i * 3);
  int32_t ix[3] = {3, 0, 3};
  int64_t ss[2] = {3, 4}, os[2] = {3, 3}, is[1] = {3};
  vl_index_args a = {"index_select", strided(out, VL_U8, 2, os, NULL), strided(src, VL_U8, 2, ss, NULL),
                     strided(ix, VL_I32, 1, is, NULL), 1, {0, NULL}};
  CHECK(K->index_select(&a) == VL_OK, "index_select status");
  bool ok = true;
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) ok &= out[i * 3 + j] == src[i * 4 + ix[j]];
  CHECK(ok, "index_select dim 1");
  /* dim 0 with a strided i64 index (every other element) into a [2,4] output. */
  int64_t lx[4] = {2, 99, 1, 99}, lstr[1] = {2}, ls[1] = {2}, o2s[2] = {2, 4};
  uint8_t out2[8];
  a.out = strided(out2, VL_U8, 2, o2s, NULL);
  a.index = strided(lx, VL_I64, 1, ls, lstr);
  a.dim = 0;
  K->index_select(&a);
  ok = true;
  for (int j = 0; j < 4; j++) ok &= out2[j] == src[8 + j] && out2[4 + j] == src[4 + j];
  CHECK(ok, "index_select dim 0 strided index");
  lx[2] = 3;
  memset(out2, 7, sizeof out2);
  vl_status s = K->index_select(&a);
  CHECK(s == VL_EINVAL && out2[0] == 7 && out2[7] == 7, "index_select bad index untouched");
  CHECK(strstr(vl_errmsg(), "index 3 is out of bounds for dim 1 with size 3") != NULL, "msg %s", vl_errmsg());
}

/* ---- random ---- */
static vl_rand_args rargs(vl_rand_kind k, vl_dtype d, void *out, int64_t n, uint64_t off, double a, double b) {
  vl_rand_args r = {k, d, out, n, 42, off, a, b, {0, NULL}};
  return r;
}

static void test_rand(void) {
  /* The first values for seed 42, computed here from runtime/philox.h directly. */
  float f[10];
  K->rand(&(vl_rand_args){VL_RAND_UNIFORM, VL_F32, f, 10, 42, 0, 0, 1, {0, NULL}});
  bool ok = true;
  for (int i = 0; i < 10; i++) ok &= f[i] == (float)vl_u24(vl_philox(42, (uint64_t)i / 4).x[i % 4]);
  CHECK(ok, "uniform f32 seed 42 stream");
  double d[5];
  vl_rand_args r = rargs(VL_RAND_UNIFORM, VL_F64, d, 5, 0, 0, 1);
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 5; i++) {
    vl_philox4 p = vl_philox(42, (uint64_t)i / 2);
    ok &= d[i] == vl_u53(p.x[2 * (i % 2)], p.x[2 * (i % 2) + 1]);
  }
  CHECK(ok, "uniform f64 seed 42 stream");
  float z[6];
  r = rargs(VL_RAND_NORMAL, VL_F32, z, 6, 0, 0.5, 2);
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 6; i++) {
    vl_philox4 p = vl_philox(42, (uint64_t)i / 4);
    int j = i % 4 & ~1;
    double u1 = vl_u24(p.x[j]), u2 = vl_u24(p.x[j + 1]), rr = sqrt(-2 * log(u1));
    double zz = (i % 2 ? sin(6.283185307179586 * u2) : cos(6.283185307179586 * u2)) * rr;
    ok &= fabs(z[i] - (float)(0.5 + 2 * zz)) <= 1e-6f * (1 + fabsf(z[i]));
  }
  CHECK(ok, "normal f32 seed 42 stream");
  /* The offset is a counter: offset 3 continues at element 12. */
  float g[16], h[4];
  r = rargs(VL_RAND_UNIFORM, VL_F32, g, 16, 0, -2, 3);
  K->rand(&r);
  r = rargs(VL_RAND_UNIFORM, VL_F32, h, 4, 3, -2, 3);
  K->rand(&r);
  CHECK(memcmp(g + 12, h, sizeof h) == 0 && g[0] == (float)(-2 + 5 * vl_u24(vl_philox(42, 0).x[0])),
        "offset and bounds");
  uint16_t hf[8];
  r = rargs(VL_RAND_UNIFORM, VL_F16, hf, 8, 0, 0, 1);
  K->rand(&r);
  ok = true;
  for (int i = 0; i < 8; i++) ok &= vl_f16_to_f32(hf[i]) == (float)expect_conv(vl_u24(vl_philox(42, (uint64_t)i / 4).x[i % 4]), VL_F16);
  CHECK(ok, "uniform f16 rounding");

  /* Distributions over 100k draws. */
  enum { M = 100000 };
  float *uf = malloc(M * sizeof *uf);
  double *ud = malloc(M * sizeof *ud);
  r = rargs(VL_RAND_UNIFORM, VL_F32, uf, M, 7, 0, 1);
  K->rand(&r);
  double lo = 1, hi = 0, s = 0;
  for (int i = 0; i < M; i++) { lo = fmin(lo, uf[i]); hi = fmax(hi, uf[i]); s += uf[i]; }
  CHECK(lo > 0 && hi < 1 && fabs(s / M - 0.5) < 0.01, "uniform f32 in (0,1): %g %g mean %g", lo, hi, s / M);
  r = rargs(VL_RAND_UNIFORM, VL_F64, ud, M, 7, 0, 1);
  K->rand(&r);
  lo = 1, hi = 0;
  for (int i = 0; i < M; i++) { lo = fmin(lo, ud[i]); hi = fmax(hi, ud[i]); }
  CHECK(lo > 0 && hi < 1, "uniform f64 in (0,1)");
  const vl_dtype nd[2] = {VL_F64, VL_F32};
  for (int t = 0; t < 2; t++) {
    r = rargs(VL_RAND_NORMAL, nd[t], nd[t] == VL_F64 ? (void *)ud : (void *)uf, M, 0, 0, 1);
    K->rand(&r);
    double m = 0, v = 0;
    for (int i = 0; i < M; i++) m += nd[t] == VL_F64 ? ud[i] : uf[i];
    m /= M;
    for (int i = 0; i < M; i++) {
      double x = (nd[t] == VL_F64 ? ud[i] : uf[i]) - m;
      v += x * x;
    }
    double sd = sqrt(v / (M - 1));
    CHECK(fabs(m) < 0.02 && fabs(sd - 1) < 0.02, "normal %s mean %g std %g", vl_dtype_name(nd[t]), m, sd);
  }
  /* Bernoulli: u < p with the f32 word mapping for every dtype. */
  uint8_t *bu = malloc(1001);
  r = rargs(VL_RAND_BERNOULLI, VL_U8, bu, 1001, 5, 0.3, 0);
  K->rand(&r);
  r = rargs(VL_RAND_BERNOULLI, VL_F64, ud, 1001, 5, 0.3, 0);
  K->rand(&r);
  ok = true;
  int ones = 0;
  for (int i = 0; i < 1001; i++) {
    int want = vl_u24(vl_philox(42, 5 + (uint64_t)i / 4).x[i % 4]) < 0.3;
    ok &= bu[i] == want && ud[i] == want;
    ones += bu[i];
  }
  CHECK(ok && ones > 240 && ones < 360, "bernoulli u8/f64 (%d ones)", ones);
  free(uf); free(ud); free(bu);
}

int main(void) {
  test_copy_all_pairs();
  test_copy_rounding();
  test_half_exhaustive();
  test_copy_3d();
  test_fill();
  test_binary_3d_broadcast();
  test_binary_special();
  test_binary_scalar();
  test_unary();
  test_where_masked_fill();
  test_arange();
  test_gemm();
  test_reduce();
  test_softmax();
  test_gather();
  test_scatter_add();
  test_index_select();
  test_rand();
  return vl_test_finish();
}
