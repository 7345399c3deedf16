/* tests/c/test_cpu_vmath.c: the vectorised f32 math of kernels/cpu/cpu_vmath.h against the
 * double-precision formulas (libm), for every instruction-set instance this CPU can run.
 *
 * Accuracy is measured in float ulps of the exact (double) result over: special values (+-0,
 * +-inf, NaN, the smallest subnormal, FLT_MAX, the approximations' breakpoints), every 4099th
 * float bit pattern (both signs, all magnitudes: about a million inputs per function) and a fine
 * linear sweep of [-20, 20]. The GELU gradients cross zero, so their error is measured in ulps
 * of the larger of their two terms. The ops the scalar path computes exactly (+ - * /, max/min,
 * the tanh/sigmoid/relu backward formulas) must match it bitwise, and every element's result must
 * not depend on where a run starts or ends (the thread-count invariance of the CPU kernels).
 * V100_VMATH_STEP=1 makes the bit-pattern sweep exhaustive (minutes). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_vmath.h"
#include "runtime/core/philox.h"
#include "vl_test.h"

#define SQRT1_2 0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794
#define K_TANH 0.79788456080286535588

/* ---- references: the exact value, and the magnitude its error is measured against ---- */
static double sigm(double w) { return w >= 0 ? 1.0 / (1.0 + exp(-w)) : exp(w) / (1.0 + exp(w)); }
static double r_exp(double x, double *m) { return *m = exp(x); }
static double r_log(double x, double *m) { return *m = log(x); }
static double r_tanh(double x, double *m) { return *m = tanh(x); }
static double r_erf(double x, double *m) { return *m = erf(x); }
static double r_sin(double x, double *m) { return *m = sin(x); }
static double r_cos(double x, double *m) { return *m = cos(x); }
static double r_expm1(double x, double *m) { return *m = expm1(x); }
static double r_log1p(double x, double *m) { return *m = log1p(x); }
static double r_sigmoid(double x, double *m) { return *m = sigm(x); }
static double r_gelu(double x, double *m) { return *m = 0.5 * x * erfc(-x * SQRT1_2); }
/* x sigmoid(2u) is 0.5 x (1 + tanh(u)) without its cancellation for negative x. */
static double r_gelu_tanh(double x, double *m) {
  return *m = x * sigm(2.0 * K_TANH * (x + 0.044715 * x * x * x));
}
static double r_gelu_grad(double x, double *m) {
  double p = 0.5 * erfc(-x * SQRT1_2), q = isinf(x) ? NAN : x * exp(-0.5 * x * x) * INV_SQRT_2PI;
  *m = fmax(fabs(p), fabs(q));
  return p + q;
}
static double r_gelu_tanh_grad(double x, double *m) {
  double w = 2.0 * K_TANH * (x + 0.044715 * x * x * x);
  double s = sigm(w), s1 = sigm(-w);
  double q = isinf(x) ? NAN : x * s * s1 * 2.0 * K_TANH * (1.0 + 3.0 * 0.044715 * x * x);
  *m = fmax(fabs(s), fabs(q));
  return s + q;
}

typedef struct {
  const char *name;
  int un;      /* vl_unary_op, or -1 for a binary backward op */
  int bin;     /* vl_binary_op when un < 0 */
  double (*ref)(double, double *);
  double max_ulp;
} fn_case;

static const fn_case CASES[] = {
    {"exp", VL_UN_EXP, 0, r_exp, 1.5},
    {"log", VL_UN_LOG, 0, r_log, 2},
    {"tanh", VL_UN_TANH, 0, r_tanh, 2},
    {"sigmoid", VL_UN_SIGMOID, 0, r_sigmoid, 2.5},
    {"gelu", VL_UN_GELU, 0, r_gelu, 3.5},
    {"gelu_tanh", VL_UN_GELU_TANH, 0, r_gelu_tanh, 2.5},
    {"gelu_backward", -1, VL_BIN_GELU_BACKWARD, r_gelu_grad, 4},
    {"gelu_tanh_backward", -1, VL_BIN_GELU_TANH_BACKWARD, r_gelu_tanh_grad, 2.5},
    {"erf", VL_UN_ERF, 0, r_erf, 1},
    {"expm1", VL_UN_EXPM1, 0, r_expm1, 1},
    {"log1p", VL_UN_LOG1P, 0, r_log1p, 1},
    {"sin", VL_UN_SIN, 0, r_sin, 1},
    {"cos", VL_UN_COS, 0, r_cos, 1},
};
#define NCASES (int)(sizeof CASES / sizeof *CASES)

/* The spacing of floats at magnitude v (subnormal spacing below FLT_MIN). */
static double ulp_at(double v) {
  v = fabs(v);
  if (v < FLT_MIN) return 0x1p-149;
  if (v >= FLT_MAX) v = FLT_MAX;
  int e;
  frexp(v, &e);
  return ldexp(1.0, e - 24);
}

static void run_case(const fn_case *c, float *o, const float *x, const float *ones, int64_t n) {
  if (c->un >= 0) CHECK(vl_vm_unary_f32((vl_unary_op)c->un, o, x, n), "%s: not handled", c->name);
  else CHECK(vl_vm_binary_f32((vl_binary_op)c->bin, o, ones, x, 1, 0, 1, false, n), "%s: not handled", c->name);
}

/* The worst error (ulps) over x[0..n); prints the worst input. Exact infinities and NaNs must
 * match the reference's. */
typedef struct {
  double worst;
  float at;
  int64_t bad_special;
} acc_stat;

static void measure(const fn_case *c, const float *x, const float *o, int64_t n, acc_stat *st) {
  for (int64_t i = 0; i < n; i++) {
    double m, r = c->ref((double)x[i], &m);
    float rf = (float)r, got = o[i];
    if (isnan(r) || isinf(rf)) {
      if (!(isnan(r) ? isnan(got) : got == rf)) {
        if (st->bad_special++ < 5)
          printf("  %s(%a): got %a, want %a\n", c->name, (double)x[i], (double)got, r);
      }
      continue;
    }
    if (isnan(got) || isinf(got)) {
      if (st->bad_special++ < 5) printf("  %s(%a): got %a, want %a\n", c->name, (double)x[i], (double)got, r);
      continue;
    }
    double e = fabs((double)got - r) / ulp_at(m);
    if (e > st->worst) {
      st->worst = e;
      st->at = x[i];
    }
  }
}

enum { CHUNK = 1 << 16 };

static void test_accuracy(void) {
  static float x[CHUNK], o[CHUNK], ones[CHUNK];
  for (int i = 0; i < CHUNK; i++) ones[i] = 1.0f;
  const char *env = getenv("V100_VMATH_STEP");
  uint64_t step = env ? strtoull(env, NULL, 10) : 4099;
  if (step == 0) step = 1;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 0x1p-149f, -0x1p-149f, FLT_MIN,
                            -FLT_MIN, FLT_MAX, -FLT_MAX, 1.0f, -1.0f, 0.625f, -0.625f, 0.62499994f,
                            88.72283f, 88.72284f, 89.0f, -87.33655f, -103.97208f, -104.0f, 16.0f, -16.0f,
                            15.999999f, -14.5f, -9.0f, -13.0f, 1e4f, -1e4f, 1e13f, -1e13f, 0.75179f,
                            -0.75179f, 0x1.fffffep-127f, 0.70710677f, 1.4142135f, 0.5f, 2.0f};
  for (int ci = 0; ci < NCASES; ci++) {
    const fn_case *c = &CASES[ci];
    acc_stat st = {0, 0, 0};
    int ns = (int)(sizeof specials / sizeof *specials);
    memcpy(x, specials, sizeof specials);
    run_case(c, o, x, ones, ns);
    measure(c, x, o, ns, &st);
    /* every step-th bit pattern */
    int64_t k = 0;
    for (uint64_t b = 0; b < (1ull << 32); b += step) {
      uint32_t bits = (uint32_t)b;
      memcpy(&x[k++], &bits, 4);
      if (k == CHUNK || b + step >= (1ull << 32)) {
        run_case(c, o, x, ones, k);
        measure(c, x, o, k, &st);
        k = 0;
      }
    }
    /* [-20, 20] in steps of 2^-12 */
    k = 0;
    for (int64_t i = -20 * 4096; i <= 20 * 4096; i++) {
      x[k++] = (float)i * 0x1p-12f;
      if (k == CHUNK || i == 20 * 4096) {
        run_case(c, o, x, ones, k);
        measure(c, x, o, k, &st);
        k = 0;
      }
    }
    printf("  %-9s %-18s max %.2f ulp at %a\n", vl_vm_isa(), c->name, st.worst, (double)st.at);
    CHECK(st.bad_special == 0, "%s %s: %lld wrong infinities/NaNs", vl_vm_isa(), c->name, (long long)st.bad_special);
    CHECK(st.worst <= c->max_ulp, "%s %s: %.2f ulp at %a (limit %.0f)", vl_vm_isa(), c->name, st.worst,
          (double)st.at, c->max_ulp);
  }
}

/* An element's result must not depend on the run it is part of: runs of every length 1..40 at
 * every offset give what the whole array gives. */
static void test_runs(void) {
  enum { N = 64 };
  float x[N], ones[N], whole[N], part[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)(vl_test_nrand() * 4.0);
    ones[i] = 1.0f;
  }
  for (int ci = 0; ci < NCASES; ci++) {
    const fn_case *c = &CASES[ci];
    run_case(c, whole, x, ones, N);
    bool ok = true;
    for (int off = 0; off < 9; off++)
      for (int len = 1; len <= 40 && off + len <= N; len++) {
        run_case(c, part + off, x + off, ones + off, len);
        if (memcmp(part + off, whole + off, (size_t)len * 4) != 0) ok = false;
      }
    CHECK(ok, "%s %s: a run's tail gives other bits than the whole array", vl_vm_isa(), c->name);
  }
}

/* ---- ops that must equal the scalar path bitwise ---- */
static double scalar_bin(vl_binary_op op, double a, double b, double alpha, bool rev) {
  if (rev) {
    double t = a;
    a = b;
    b = t;
  }
  switch (op) {
    case VL_BIN_ADD: return a + alpha * b;
    case VL_BIN_SUB: return a - alpha * b;
    case VL_BIN_MUL: return a * b;
    case VL_BIN_DIV: return a / b;
    case VL_BIN_MAXIMUM: return a != a ? a : b != b ? b : a > b ? a : b;
    case VL_BIN_MINIMUM: return a != a ? a : b != b ? b : a < b ? a : b;
    case VL_BIN_RELU_BACKWARD: return b > 0 ? a : 0.0;
    case VL_BIN_TANH_BACKWARD: return a * (1.0 - b * b);
    case VL_BIN_SIGMOID_BACKWARD: return a * (b * (1.0 - b));
    case VL_BIN_REMAINDER: { /* kernels/ew_formulas.h's vl_f_remainder */
      double m = fmod(a, b);
      if (m != 0 && ((b < 0) != (m < 0))) m += b;
      return m;
    }
    default: return NAN;
  }
}

static void test_exact_binary(void) {
  enum { N = 37 };
  float a[N], b[N], o[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)(vl_test_nrand() * 3.0);
    b[i] = (float)(vl_test_nrand() * 3.0);
  }
  a[3] = NAN, b[5] = NAN, a[7] = INFINITY, b[7] = -INFINITY, b[9] = 0.0f, a[11] = -0.0f, b[11] = 0.0f;
  /* remainder: lanes its vector code leaves to the scalar formula (an infinite divisor, a huge
   * quotient) in the first vector, exact zeros of both signs and ties in the later ones */
  a[12] = -5.0f, b[12] = INFINITY, a[15] = 1e30f, b[15] = 3.0f;
  a[20] = -4.0f, b[20] = 2.0f, a[21] = 4.0f, b[21] = -2.0f, a[22] = -0.0f, b[22] = 1.5f, a[23] = 7.5f, b[23] = -2.5f;
  const vl_binary_op ops[] = {VL_BIN_ADD, VL_BIN_SUB, VL_BIN_MUL, VL_BIN_DIV, VL_BIN_MAXIMUM,
                              VL_BIN_MINIMUM, VL_BIN_REMAINDER, VL_BIN_RELU_BACKWARD, VL_BIN_TANH_BACKWARD,
                              VL_BIN_SIGMOID_BACKWARD};
  const double scalars[] = {0.5, 1.0 / 3.0, -2.0, 1e40};
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    vl_binary_op op = ops[k];
    bool act = op >= VL_BIN_RELU_BACKWARD;
    /* tensor-tensor, alpha 1 and (add/sub) 0.3 */
    for (int al = 0; al < (op <= VL_BIN_SUB ? 2 : 1); al++) {
      double alpha = al ? 0.3 : 1.0;
      CHECK(vl_vm_binary_f32(op, o, a, b, 1, 0, alpha, false, N));
      bool ok = true;
      for (int i = 0; i < N; i++)
        if (!vl_test_same(o[i], (float)scalar_bin(op, a[i], b[i], alpha, false)) ||
            (o[i] == o[i] && !signbit(o[i]) != !signbit((float)scalar_bin(op, a[i], b[i], alpha, false))))
          ok = false;
      CHECK(ok, "%s binary op %d alpha %g: differs from the scalar path", vl_vm_isa(), (int)op, alpha);
    }
    if (act) {
      CHECK(!vl_vm_binary_f32(op, o, a, b, 0, 1.0, 1.0, false, N), "op %d with a scalar must be refused", (int)op);
      continue;
    }
    /* tensor-scalar, both orders; 1/3 is not a float, 1e40 is beyond float */
    for (size_t si = 0; si < sizeof scalars / sizeof *scalars; si++)
      for (int rev = 0; rev < 2; rev++) {
        double s = scalars[si];
        float sf = (float)s;
        bool handled = vl_vm_binary_f32(op, o, a, &sf, 0, s, 1.0, rev, N);
        if (!handled) {
          CHECK(op == VL_BIN_MAXIMUM || op == VL_BIN_MINIMUM || op == VL_BIN_REMAINDER, "op %d scalar %g refused",
                (int)op, s);
          continue;
        }
        bool ok = true;
        for (int i = 0; i < N; i++)
          if (!vl_test_same(o[i], (float)scalar_bin(op, a[i], s, 1.0, rev))) ok = false;
        CHECK(ok, "%s op %d scalar %g rev %d: differs from the scalar path", vl_vm_isa(), (int)op, s, rev);
      }
  }
  /* the exact unary ops */
  const vl_unary_op uops[] = {VL_UN_NEG,  VL_UN_ABS,        VL_UN_SQUARE, VL_UN_RELU,  VL_UN_SIGN,
                              VL_UN_RECIPROCAL, VL_UN_SQRT, VL_UN_RSQRT, VL_UN_ROUND, VL_UN_FLOOR,
                              VL_UN_CEIL, VL_UN_TRUNC};
  a[13] = 0x1p-149f, a[14] = -INFINITY, a[16] = 0.0f; /* a subnormal, -inf, +0 (a[11] is -0) */
  /* halves (ties to even), just below / above integers, near and beyond 2^23 */
  const float edge[] = {0.5f, -0.5f, 1.5f, -2.5f, 2.5f, -0.7f, 0.3f, 0x1.fffffep-1f, -0x1.fffffep-1f, 8388607.5f,
                        -8388607.5f, 8388608.0f, 16777215.0f, -1e30f, 3.0f, -3.0f};
  for (int i = 0; i < 16; i++) a[17 + i] = edge[i];
  for (size_t k = 0; k < sizeof uops / sizeof *uops; k++) {
    CHECK(vl_vm_unary_f32(uops[k], o, a, N));
    bool ok = true;
    for (int i = 0; i < N; i++) {
      double v = a[i], w;
      switch (uops[k]) {
        case VL_UN_NEG: w = -v; break;
        case VL_UN_ABS: w = fabs(v); break;
        case VL_UN_SQUARE: w = v * v; break;
        case VL_UN_SIGN: w = v > 0 ? 1.0 : v < 0 ? -1.0 : v; break;
        case VL_UN_RECIPROCAL: w = 1.0 / v; break;
        case VL_UN_SQRT: w = sqrt(v); break;
        case VL_UN_RSQRT: w = 1.0 / sqrt(v); break;
        case VL_UN_ROUND: w = rint(v); break;
        case VL_UN_FLOOR: w = floor(v); break;
        case VL_UN_CEIL: w = ceil(v); break;
        case VL_UN_TRUNC: w = trunc(v); break;
        default: w = v > 0 || v != v ? v : 0.0; break;
      }
      /* signbit's nonzero value is not normalised: compared as booleans */
      if (!vl_test_same(o[i], (float)w) || (o[i] == o[i] && !signbit(o[i]) != !signbit((float)w))) ok = false;
    }
    CHECK(ok, "%s unary op %d differs from the scalar path", vl_vm_isa(), (int)uops[k]);
  }
}

/* atan2 of floats against libm's double atan2 rounded to float (the scalar path): within 1 ulp
 * over magnitudes from subnormal to 1e38 and every octant, bitwise at zeros, infinities and NaNs
 * (their vectors take the scalar formula), in both operand orders. */
static void test_atan2(void) {
  enum { N = 4099 };
  static float y[N], x[N], o[N];
  for (int i = 0; i < N; i++) {
    double sy = pow(10.0, (i % 77) - 38.0), sx = pow(10.0, ((i * 13) % 77) - 38.0);
    y[i] = (float)(vl_test_nrand() * (i % 5 ? 1.0 : sy));
    x[i] = (float)(vl_test_nrand() * (i % 5 ? 1.0 : sx));
    if (i % 11 == 0) x[i] = y[i] * (i % 2 ? -1.0f : 1.0f); /* |y| == |x| */
  }
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.0f, -1.0f, 0x1p-149f};
  for (int i = 0; i < 64; i++) y[4000 + i] = sp[i % 8], x[4000 + i] = sp[i / 8];
  for (int rev = 0; rev < 2; rev++) {
    CHECK(vl_vm_binary_f32(VL_BIN_ATAN2, o, y, x, 1, 0, 1.0, rev, N));
    double worst = 0;
    bool special_ok = true;
    for (int i = 0; i < N; i++) {
      double yy = rev ? x[i] : y[i], xx = rev ? y[i] : x[i];
      float want = (float)atan2(yy, xx);
      if (i >= 4000 && i < 4064) {
        if (!vl_test_same(o[i], want) || (o[i] == o[i] && !signbit(o[i]) != !signbit(want))) special_ok = false;
        continue;
      }
      double e = fabs((double)o[i] - atan2(yy, xx)) / ulp_at(atan2(yy, xx));
      if (e > worst) worst = e;
    }
    printf("  %-9s %-18s max %.2f ulp\n", vl_vm_isa(), rev ? "atan2 (reversed)" : "atan2", worst);
    CHECK(worst <= 1.0, "%s atan2: %.2f ulp (limit 1)", vl_vm_isa(), worst);
    CHECK(special_ok, "%s atan2: zeros, infinities or NaNs differ from libm", vl_vm_isa());
  }
  float s = 0.75f;
  CHECK(vl_vm_binary_f32(VL_BIN_ATAN2, o, y, &s, 0, 0.75, 1.0, false, 100));
  bool ok = true;
  for (int i = 0; i < 100; i++)
    if (fabs((double)o[i] - atan2(y[i], 0.75)) > ulp_at(atan2(y[i], 0.75))) ok = false;
  CHECK(ok, "%s atan2 with a scalar divisor", vl_vm_isa());
  CHECK(!vl_vm_binary_f32(VL_BIN_ATAN2, o, y, &s, 0, 0.1, 1.0, false, 100), "a scalar that is no float is refused");
}

/* ---- rows ---- */
static void test_softmax_rows(void) {
  const int lens[] = {1, 3, 7, 8, 9, 16, 31, 128, 1000};
  float x[1000], y[1000], g[1000], dx[1000];
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
    int n = lens[li];
    for (int i = 0; i < n; i++) {
      x[i] = (float)(vl_test_nrand() * 5.0);
      g[i] = (float)vl_test_nrand();
    }
    if (n > 4) x[2] = -INFINITY; /* a masked position */
    for (int lg = 0; lg < 2; lg++) {
      vl_vm_softmax_row_f32(x, y, n, lg);
      double m = -INFINITY, s = 0;
      for (int i = 0; i < n; i++) m = fmax(m, x[i]);
      for (int i = 0; i < n; i++) s += exp((double)x[i] - m);
      double worst = 0;
      for (int i = 0; i < n; i++) {
        double want = lg ? (x[i] - m) - log(s) : exp((double)x[i] - m) / s;
        double err = isinf(want) ? (y[i] == (float)want ? 0 : INFINITY) : fabs(y[i] - want) / (fabs(want) + 1e-30);
        if (lg && !isinf(want)) err = fabs(y[i] - want) / fmax(fabs(want), 1.0);
        worst = fmax(worst, err);
      }
      CHECK(worst < 1e-6, "%s %ssoftmax len %d: relative error %g", vl_vm_isa(), lg ? "log_" : "", n, worst);
      /* backward against the double formula */
      vl_vm_softmax_bw_row_f32(y, g, dx, n, lg);
      double dot = 0;
      for (int i = 0; i < n; i++) dot += lg ? (double)g[i] : (double)g[i] * y[i];
      worst = 0;
      for (int i = 0; i < n; i++) {
        double want = lg ? g[i] - exp((double)y[i]) * dot : y[i] * (g[i] - dot);
        worst = fmax(worst, fabs(dx[i] - want) / (fabs(g[i]) + fabs(dot) + 1e-30));
      }
      CHECK(worst < 1e-6, "%s %ssoftmax backward len %d: error %g", vl_vm_isa(), lg ? "log_" : "", n, worst);
    }
  }
  /* a NaN makes the row NaN; so does a row of -inf (no finite maximum), as the double path */
  float r[9] = {1, 2, 3, NAN, 5, 6, 7, 8, 9}, out[9];
  vl_vm_softmax_row_f32(r, out, 9, false);
  bool all = true;
  for (int i = 0; i < 9; i++) all &= isnan(out[i]);
  CHECK(all, "%s softmax: a NaN input must make the row NaN", vl_vm_isa());
  /* softmax rows sum to 1 for large lengths */
  float big[1000];
  for (int i = 0; i < 1000; i++) big[i] = (float)(i % 17) * 0.25f;
  vl_vm_softmax_row_f32(big, y, 1000, false);
  double s = 0;
  for (int i = 0; i < 1000; i++) s += y[i];
  CHECK(fabs(s - 1.0) < 1e-5, "%s softmax sums to %.9g", vl_vm_isa(), s);
}

static void test_sum_lanes(void) {
  enum { L = 13, W = 21, LD = 24 };
  float x[L * LD];
  for (int i = 0; i < L * LD; i++) x[i] = (float)vl_test_nrand();
  double acc[W], want[W];
  for (int j = 0; j < W; j++) acc[j] = want[j] = 0.5 * j;
  vl_vm_sum_lanes_f32(x, LD, L, W, acc);
  for (int j = 0; j < W; j++)
    for (int l = 0; l < L; l++) want[j] += x[l * LD + j];
  CHECK(memcmp(acc, want, sizeof acc) == 0, "%s sum_lanes differs from the ordered double sum", vl_vm_isa());
}

/* Row sums against a long-double sum (they differ only in the order of double additions), at
 * lengths around the vector and unroll widths, and the scalar scan's extremum rule: the first
 * maximum / minimum (ties, +-0 compare equal), the first NaN over any number, -inf / +inf and
 * position 0 when nothing beats the start, in rows and in columns. */
static int64_t scan_ext(const float *x, int64_t ld, int64_t n, bool max, double *val) {
  double a = max ? -INFINITY : INFINITY;
  int64_t ai = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = x[i * ld];
    if (a == a && (v != v || (max ? v > a : v < a))) a = v, ai = i;
  }
  *val = a;
  return ai;
}

static void test_row_reductions(void) {
  enum { NMAX = 300 };
  static float x[NMAX], c[NMAX * 5];
  const int lens[] = {0, 1, 3, 15, 16, 17, 63, 64, 65, 127, 200, 300};
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
    int n = lens[li];
    for (int i = 0; i < n; i++) x[i] = (float)vl_test_nrand() * 100.0f;
    long double want = 0;
    for (int i = 0; i < n; i++) want += x[i];
    double got = vl_vm_sum_row_f32(x, n);
    CHECK(fabs(got - (double)want) <= 1e-12 * (1 + fabsl(want)), "%s sum_row len %d: %.17g, want %.17Lg",
          vl_vm_isa(), n, got, want);
    for (int variant = 0; variant < 5; variant++) {
      /* 0: random; 1: few values (ties); 2: a NaN; 3: two NaNs and ties; 4: all -0/+0 or +-inf */
      for (int i = 0; i < n; i++) {
        if (variant == 1 || variant == 3) x[i] = (float)(i * 7 % 5) - 2.0f;
        if (variant == 4) x[i] = i % 3 == 0 ? -0.0f : i % 3 == 1 ? 0.0f : (i % 2 ? INFINITY : -INFINITY);
      }
      if ((variant == 2 || variant == 3) && n > 2) x[n * 2 / 3] = NAN;
      if (variant == 3 && n > 4) x[n - 1] = NAN;
      for (int mx = 0; mx < 2; mx++) {
        double v, wv;
        int64_t i, wi = scan_ext(x, 1, n, mx, &wv);
        vl_vm_ext_row_f32(x, n, mx, &v, &i);
        CHECK(i == wi && (memcmp(&v, &wv, sizeof v) == 0 || (v != v && wv != wv)),
              "%s %s row len %d variant %d: %g at %lld, want %g at %lld", vl_vm_isa(), mx ? "max" : "min", n,
              variant, v, (long long)i, wv, (long long)wi);
        /* the same values as 5 columns of a [n, 5] block (ld 5), column j shifted by j */
        for (int l = 0; l < n; l++)
          for (int j = 0; j < 5; j++) c[l * 5 + j] = x[(l + j) % n];
        double cv[5];
        int64_t ci[5];
        vl_vm_ext_lanes_f32(c, 5, n, 5, mx, cv, ci);
        for (int j = 0; j < 5; j++) {
          wi = scan_ext(c + j, 5, n, mx, &wv);
          CHECK(ci[j] == wi && (memcmp(&cv[j], &wv, sizeof wv) == 0 || (cv[j] != cv[j] && wv != wv)),
                "%s %s column %d len %d variant %d: %g at %lld, want %g at %lld", vl_vm_isa(), mx ? "max" : "min",
                j, n, variant, cv[j], (long long)ci[j], wv, (long long)wi);
        }
      }
    }
  }
}

/* Column extrema over more lanes than one block of the kernel (300 > 256), with NaNs and ties. */
static void test_wide_columns(void) {
  enum { L = 7, W = 300 };
  static float c[L * W];
  static double v[W];
  static int64_t ix[W];
  for (int i = 0; i < L * W; i++) c[i] = (float)(i * 37 % 11) - 5.0f;
  c[3 * W + 17] = NAN, c[5 * W + 17] = NAN, c[6 * W + 299] = NAN;
  for (int mx = 0; mx < 2; mx++) {
    vl_vm_ext_lanes_f32(c, W, L, W, mx, v, ix);
    bool ok = true;
    for (int j = 0; j < W; j++) {
      double wv;
      int64_t wi = scan_ext(c + j, W, L, mx, &wv);
      if (ix[j] != wi || !vl_test_same(v[j], wv)) ok = false;
    }
    CHECK(ok, "%s %s over %d columns differs from the scalar scan", vl_vm_isa(), mx ? "max" : "min", W);
  }
}

/* Layer norm rows against the double formula of the scalar path (two-pass statistics), forward
 * and backward, at lengths around the vector width. */
static void test_layernorm_rows(void) {
  enum { NMAX = 70 };
  static float x[NMAX], g[NMAX], y[NMAX], dx[NMAX];
  static double w[NMAX], b[NMAX], dw[NMAX], db[NMAX];
  const int lens[] = {1, 5, 16, 17, 33, 70};
  for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
    int n = lens[li];
    for (int i = 0; i < n; i++) {
      x[i] = (float)(vl_test_nrand() * 3.0 + 1.0);
      g[i] = (float)vl_test_nrand();
      w[i] = 1.0 + 0.1 * i;
      b[i] = 0.01 * i;
      dw[i] = db[i] = 0.5;
    }
    double mean, rstd, m = 0, v = 0;
    vl_vm_layernorm_row_f32(x, y, n, w, b, 1e-5, &mean, &rstd);
    for (int i = 0; i < n; i++) m += x[i];
    m /= n;
    for (int i = 0; i < n; i++) v += (x[i] - m) * (x[i] - m);
    double r = 1.0 / sqrt(v / n + 1e-5);
    CHECK(fabs(mean - m) <= 1e-12 * (1 + fabs(m)) && fabs(rstd - r) <= 1e-12 * r, "%s layer norm len %d stats",
          vl_vm_isa(), n);
    bool ok = true;
    for (int i = 0; i < n; i++) {
      double want = (x[i] - m) * r * w[i] + b[i];
      if (fabs(y[i] - want) > 2e-7 * (1 + fabs(want))) ok = false;
    }
    CHECK(ok, "%s layer norm len %d: y differs from the double formula", vl_vm_isa(), n);
    vl_vm_layernorm_bw_row_f32(x, g, dx, n, m, r, w, dw, db);
    double s1 = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
      double xh = (x[i] - m) * r;
      s1 += g[i] * w[i];
      s2 += g[i] * w[i] * xh;
      if (fabs(dw[i] - (0.5 + g[i] * xh)) > 1e-12 || fabs(db[i] - (0.5 + g[i])) > 1e-12) ok = false;
    }
    s1 /= n, s2 /= n;
    for (int i = 0; i < n; i++) {
      double xh = (x[i] - m) * r, want = r * (g[i] * w[i] - s1 - xh * s2);
      if (fabs(dx[i] - want) > 1e-6 * (1 + fabs(want))) ok = false;
    }
    CHECK(ok, "%s layer norm backward len %d differs from the double formula", vl_vm_isa(), n);
  }
}

/* The vector Philox against runtime/core/philox.h's scalar mapping, bit for bit: bernoulli at
 * probabilities on, between and beyond the uniforms' grid, and uniforms in [a, b). */
static void test_philox(void) {
  enum { N = 1000 };
  static float out[N];
  const double ps[] = {0.9, 0.5, 0.0, 1.0, 1.5, -0.2, NAN, (1000 + 0.5) * 0x1p-23, 1000 * 0x1p-23, 1e-9};
  const uint64_t seed = 0x123456789abcdefull, first = 77;
  const int64_t starts[] = {0, 1, 13, 250};
  for (size_t k = 0; k < sizeof ps / sizeof *ps + 2; k++) {
    bool bern = k < sizeof ps / sizeof *ps;
    double a = bern ? ps[k] : (k % 2 ? -3.0 : 0.0), b = bern ? 0 : (k % 2 ? 5.5 : 1.0);
    for (size_t si = 0; si < sizeof starts / sizeof *starts; si++) {
      int64_t g0 = starts[si], n = N - 4 * g0 - 3; /* a partial last group */
      vl_vm_philox_f32(seed, first, g0, n, bern ? VL_RAND_BERNOULLI : VL_RAND_UNIFORM, a, b, out);
      bool ok = true;
      for (int64_t i = 0; i < n; i++) {
        double v[4];
        int64_t e = 4 * g0 + i;
        vl_philox_group_uniform(seed, first + (uint64_t)(e / 4), 0, VL_PHILOX_BITS, v);
        double u = v[e % 4];
        float want = bern ? (float)(u < a) : (float)(a + (b - a) * u);
        if (memcmp(&want, &out[i], 4) != 0) ok = false;
      }
      CHECK(ok, "%s philox %s a=%g b=%g from group %lld: differs from the scalar stream", vl_vm_isa(),
            bern ? "bernoulli" : "uniform", a, b, (long long)g0);
    }
  }
}

int main(void) {
  vl_test_init();
  const char *isas[] = {"avx512", "avx2", "generic"};
  int ran = 0;
  for (int k = 0; k < 3; k++) {
    if (!vl_vm_select(isas[k])) {
      printf("instance %s: not on this CPU\n", isas[k]);
      continue;
    }
    ran++;
    printf("instance %s\n", vl_vm_isa());
    test_accuracy();
    test_runs();
    test_exact_binary();
    test_atan2();
    test_softmax_rows();
    test_sum_lanes();
    test_row_reductions();
    test_wide_columns();
    test_layernorm_rows();
    test_philox();
  }
  CHECK(ran >= 1 && vl_vm_select("generic"), "the generic instance always runs");
  CHECK(vl_vm_select(NULL));
  return vl_test_finish();
}
