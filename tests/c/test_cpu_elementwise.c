/* tests/c/test_cpu_elementwise.c: the CPU op table's elementwise kernels against direct
 * computations: copy and fill (every dtype pair, rounding, strided and 3-D), binary ops (3-D
 * broadcast, NaN, integer wrap, scalars), unary ops, where / masked_fill and arange.
 *
 * Iterators are built by hand over small host arrays (contiguous, strided, broadcast with stride
 * 0, 3-D), so these tests need nothing of the runtime but dtype.c and status.c; test_cpu_kernels.c
 * has the rest of the table. The last line is "N passed, N failed"; the exit status is non-zero
 * on failure. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend/kernels.h"
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

/* ---- copy / fill ---- */
static void test_copy_all_pairs(void) {
  const double vals[] = {0, 1, -2, 3.5, 100, -0.75, 255, 7, 1e10, -1e10};
  enum { N = 10 };
  for (int si = 0; si < NALL; si++)
    for (int di = 0; di < NALL; di++) {
      vl_dtype s = ALL[si], d = ALL[di];
      unsigned char src[2 * N * 8], dst[N * 8];
      memset(dst, 0xAB, sizeof dst);
      for (int i = 0; i < N; i++) vl_test_st(src, s, 2 * i, vals[i]); /* strided source: every other */
      vl_iter it;
      int64_t size[1] = {N}, sstr[1] = {2};
      iter_init(&it, 1, size, 2);
      iter_op(&it, 0, dst, d, NULL);
      iter_op(&it, 1, src, s, sstr);
      CHECK(K->copy(&it) == VL_OK, "copy");
      bool ok = true;
      for (int i = 0; i < N; i++) {
        double v = vl_test_ld(src, s, 2 * i);
        /* Integer to integer wraps to the destination's width. */
        double want = vl_dtype_is_int(s) && d == VL_I32 ? (double)(int32_t)(uint32_t)(int64_t)v
                                                        : vl_test_conv(v, d);
        if (!vl_test_same(vl_test_ld(dst, d, i), want)) {
          ok = false;
          printf("  copy %s->%s [%d]: got %g want %g\n", vl_dtype_name(s), vl_dtype_name(d), i,
                 vl_test_ld(dst, d, i), want);
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

/* Every f16 / bf16 bit pattern: loads agree with runtime/core/dtype.c, and stores from double round
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
    for (int i = 0; i < H; i++) ok &= vl_test_same(wide[i], to32((uint16_t)i));
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
    for (int i = 0; i < 16; i++) ok &= vl_test_same(vl_test_ld(buf, d, i), i % 2 ? 0 : vl_test_conv(2.5, d));
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
      for (int i = 0; i < 24; i++) vl_test_st(a, d, i, isint ? (double)(i % 7 - 3) : vl_test_rnd() * 4);
      for (int i = 0; i < 3; i++) vl_test_st(b, d, i, isint ? (double)(i - 1) : vl_test_rnd() * 4);
      vl_test_st(b, d, 1, vl_test_ld(a, d, 0)); /* an equal pair for EQ */
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
            double want =
                vl_test_conv(ref_bin(op, vl_test_ld(a, d, x + 2 * y + 6 * z), vl_test_ld(b, d, y), alpha), dout);
            ok &= vl_test_same(vl_test_ld(out, dout, x * 12 + y * 4 + z), want);
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
    case VL_UN_LOGICAL_NOT: return x == 0;
    default: return NAN; /* ops added since: checked against f64 by tests/lua/test_op_sweep.lua */
  }
}

static void test_unary(void) {
  const double xs[] = {-2.5, -1, -0.5, 0, 0.5, 1.5, 2.5, 3, NAN, 7.25};
  enum { N = 10 };
  const vl_dtype fl[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int op = 0; op < VL_NUNARY; op++)
    for (int di = 0; di < 4 && (op == VL_UN_LOGICAL_NOT || !isnan(ref_un((vl_unary_op)op, 1.0, -1, 2))); di++) {
      vl_dtype d = fl[di], dout = op == VL_UN_LOGICAL_NOT ? VL_BOOL : d;
      unsigned char in[2 * N * 8], out[N * 8];
      for (int i = 0; i < N; i++) vl_test_st(in, d, 2 * i, xs[i]);
      vl_iter it;
      int64_t n = N, s2 = 2;
      iter_init(&it, 1, &n, 2);
      iter_op(&it, 0, out, dout, NULL);
      iter_op(&it, 1, in, d, &s2);
      K->unary((vl_unary_op)op, &it, -1, 2);
      bool ok = true;
      for (int i = 0; i < N; i++) {
        double want = ref_un((vl_unary_op)op, xs[i], -1, 2), got = vl_test_ld(out, dout, i);
        /* f32/f64 exact for the exactly-rounded ops; transcendental ops within an ulp or two
         * of libm's double result rounded to the dtype. */
        double tol = d == VL_F64 ? 1e-15 : d == VL_F32 ? 1e-7 : d == VL_F16 ? 1e-3 : 8e-3;
        ok &= vl_test_close(got, dout == VL_F64 ? want : vl_test_conv(want, dout), tol);
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

/* The f32 vector paths (kernels/cpu/cpu_vmath.h) against the scalar double path: the same op
 * with every operand read through a stride of 2 takes the scalar path. Exact ops must agree
 * bitwise for contiguous operands, broadcast (stride-0) ones on either side and scalars (a float
 * or not, both orders, alpha 1 or not); transcendental ops and the activation gradients within a
 * few ulp. */
enum { VN = 37 };
static void f32_run(vl_binary_op op, bool unary, float *out, const float *a, int64_t sa, const float *b,
                    int64_t sb, double alpha) {
  vl_iter it;
  int64_t n = VN;
  iter_init(&it, 1, &n, unary ? 2 : 3);
  iter_op(&it, 0, out, VL_F32, NULL);
  iter_op(&it, 1, (void *)a, VL_F32, &sa);
  if (unary) K->unary((vl_unary_op)op, &it, -1, 2);
  else {
    iter_op(&it, 2, (void *)b, VL_F32, &sb);
    K->binary(op, &it, alpha);
  }
}

/* Relative, down to the subnormals (where float's spacing is 2^-149). */
static bool rel_close(double a, double b, double rtol) {
  return vl_test_same(a, b) || fabs(a - b) <= rtol * fabs(b) + 0x1p-148;
}

static void test_f32_vector_paths(void) {
  float a[2 * VN], b[2 * VN], vec[VN], ref[VN];
  for (int i = 0; i < 2 * VN; i++) {
    a[i] = (float)(vl_test_nrand() * 3.0);
    b[i] = (float)(vl_test_nrand() * 3.0);
  }
  a[6] = NAN, b[10] = INFINITY, a[14] = -0.0f;
  a[20] = -8.5f, a[21] = -12.25f, a[22] = 30.0f, a[23] = -30.0f; /* GELUs' tails: tiny, not 0 */
  float a2[2 * VN], b2[2 * VN]; /* the same values at stride 2 */
  for (int i = 0; i < VN; i++) a2[2 * i] = a[i], b2[2 * i] = b[i];
  const vl_binary_op exact[] = {VL_BIN_ADD, VL_BIN_SUB, VL_BIN_MUL, VL_BIN_DIV, VL_BIN_MAXIMUM, VL_BIN_MINIMUM,
                                VL_BIN_RELU_BACKWARD, VL_BIN_TANH_BACKWARD, VL_BIN_SIGMOID_BACKWARD};
  for (size_t k = 0; k < sizeof exact / sizeof *exact; k++) {
    vl_binary_op op = exact[k];
    for (int al = 0; al < 2; al++) {
      double alpha = al ? 0.3 : 1.0;
      if (al && op != VL_BIN_ADD && op != VL_BIN_SUB) continue;
      /* contiguous, then b broadcast, then a broadcast */
      const int64_t sas[3] = {1, 1, 0}, sbs[3] = {1, 0, 1};
      for (int m = 0; m < 3; m++) {
        f32_run(op, false, vec, a, sas[m], b, sbs[m], alpha);
        f32_run(op, false, ref, a2, 2 * sas[m], b2, 2 * sbs[m], alpha);
        CHECK(memcmp(vec, ref, sizeof vec) == 0, "f32 binary op %d alpha %g layout %d: vector != scalar path",
              (int)op, alpha, m);
      }
    }
  }
  /* scalars: exactly a float or not, both orders */
  const double ss[] = {0.25, 1.0 / 3.0, -7.0, 1e39};
  const vl_binary_op sops[] = {VL_BIN_ADD, VL_BIN_SUB, VL_BIN_MUL, VL_BIN_DIV, VL_BIN_MAXIMUM};
  for (size_t k = 0; k < sizeof sops / sizeof *sops; k++)
    for (size_t si = 0; si < sizeof ss / sizeof *ss; si++)
      for (int rev = 0; rev < 2; rev++) {
        vl_iter it;
        int64_t n = VN, s1 = 1, s2 = 2;
        iter_init(&it, 1, &n, 2);
        iter_op(&it, 0, vec, VL_F32, NULL);
        iter_op(&it, 1, a, VL_F32, &s1);
        K->binary_scalar(sops[k], &it, ss[si], rev);
        iter_op(&it, 0, ref, VL_F32, NULL);
        iter_op(&it, 1, a2, VL_F32, &s2);
        K->binary_scalar(sops[k], &it, ss[si], rev);
        CHECK(memcmp(vec, ref, sizeof vec) == 0, "f32 scalar op %d s=%g rev %d: vector != scalar path",
              (int)sops[k], ss[si], rev);
      }
  /* transcendental and GELU ops: within a few ulp of the double path */
  const int approx_un[] = {VL_UN_EXP, VL_UN_LOG, VL_UN_TANH, VL_UN_SIGMOID, VL_UN_GELU, VL_UN_GELU_TANH};
  for (size_t k = 0; k < sizeof approx_un / sizeof *approx_un; k++) {
    f32_run((vl_binary_op)approx_un[k], true, vec, a, 1, NULL, 0, 1);
    f32_run((vl_binary_op)approx_un[k], true, ref, a2, 2, NULL, 0, 1);
    bool ok = true;
    for (int i = 0; i < VN; i++) ok &= rel_close(vec[i], ref[i], 5e-7);
    CHECK(ok, "f32 unary op %d: vector path beyond 5e-7 of the double path", approx_un[k]);
  }
  const vl_binary_op approx_bin[] = {VL_BIN_GELU_BACKWARD, VL_BIN_GELU_TANH_BACKWARD};
  for (size_t k = 0; k < 2; k++) {
    f32_run(approx_bin[k], false, vec, b, 1, a, 1, 1);
    f32_run(approx_bin[k], false, ref, b2, 2, a2, 2, 1);
    bool ok = true;
    for (int i = 0; i < VN; i++) ok &= rel_close(vec[i], ref[i], 1e-6) || fabs(vec[i] - ref[i]) < 1e-6;
    CHECK(ok, "f32 %s: vector path beyond 1e-6 of the double path", k ? "gelu_tanh_backward" : "gelu_backward");
  }
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
  test_f32_vector_paths();
  test_where_masked_fill();
  test_arange();
  return vl_test_finish();
}
