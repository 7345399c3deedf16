/* kernels/cpu/cpu_elementwise.c: unary, binary and binary-with-scalar ops.
 *
 * Each op is written once as an expression in doubles (floats) and once in int64 (integers).
 * The expression is instantiated by macro into typed loops: f32 and f64 operands are read and
 * written in place with their element strides (the fast paths), any other dtype mix goes through
 * blocks of doubles / int64s (cpu_internal.h). Float results are computed in double and rounded
 * once, so add/sub/mul/div/sqrt are correctly rounded as in CUDA's f32 arithmetic. Contiguous f32
 * runs (and f32 runs against a broadcast operand) go through the vector code of cpu_vmath.h:
 * bitwise the same results for the exact ops, within a few ulp for exp, log, tanh, sigmoid,
 * the GELUs and the GELU gradients. Integer
 * +, -, * wrap modulo 2^64 in unsigned arithmetic, and the store wraps to the dtype's width, so
 * i32 and u8 wrap as C's fixed-width arithmetic does. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_vmath.h"

#define VL_SQRT1_2 0.70710678118654752440
#define VL_SQRT_2_OVER_PI 0.79788456080286535588

enum { PATH_F32, PATH_F64, PATH_INT, PATH_BUF };

/* ======================= unary ======================= */

#define VL_UN_LOOP(TO, TI, E)                                  \
  do {                                                         \
    TO *o_ = (TO *)po;                                         \
    const TI *x_ = (const TI *)px;                             \
    for (int64_t i = 0; i < n; i++) {                          \
      double x = (double)x_[i * sx];                           \
      o_[i * so] = (TO)(E);                                    \
    }                                                          \
  } while (0)

/* NaN propagates through every branch below: comparisons with NaN are false, so the NaN input
 * is returned (RELU, CLAMP, SIGN) or the libm function returns NaN. GELU uses erfc, which keeps
 * its relative accuracy for negative x where 1 + erf(x) cancels; tanh-GELU is written as
 * x sigmoid(2u), the same function as 0.5 x (1 + tanh(u)) without 1 + tanh(u) cancelling to 0
 * below x = -5.7. */
#define VL_UN_SWITCH(TO, TI)                                                                \
  switch (op) {                                                                             \
    case VL_UN_NEG: VL_UN_LOOP(TO, TI, -x); break;                                          \
    case VL_UN_ABS: VL_UN_LOOP(TO, TI, fabs(x)); break;                                     \
    case VL_UN_SQUARE: VL_UN_LOOP(TO, TI, x * x); break;                                    \
    case VL_UN_SIGN: VL_UN_LOOP(TO, TI, x > 0 ? 1.0 : x < 0 ? -1.0 : x); break;             \
    case VL_UN_RELU: VL_UN_LOOP(TO, TI, x > 0 || x != x ? x : 0.0); break;                  \
    case VL_UN_CLAMP: VL_UN_LOOP(TO, TI, clamp_f64(x, p0, p1)); break;                      \
    case VL_UN_FLOOR: VL_UN_LOOP(TO, TI, floor(x)); break;                                  \
    case VL_UN_CEIL: VL_UN_LOOP(TO, TI, ceil(x)); break;                                    \
    case VL_UN_ROUND: VL_UN_LOOP(TO, TI, nearbyint(x)); break;                              \
    case VL_UN_EXP: VL_UN_LOOP(TO, TI, exp(x)); break;                                      \
    case VL_UN_LOG: VL_UN_LOOP(TO, TI, log(x)); break;                                      \
    case VL_UN_SQRT: VL_UN_LOOP(TO, TI, sqrt(x)); break;                                    \
    case VL_UN_RSQRT: VL_UN_LOOP(TO, TI, 1.0 / sqrt(x)); break;                             \
    case VL_UN_TANH: VL_UN_LOOP(TO, TI, tanh(x)); break;                                    \
    case VL_UN_SIGMOID: VL_UN_LOOP(TO, TI, 1.0 / (1.0 + exp(-x))); break;                   \
    case VL_UN_GELU: VL_UN_LOOP(TO, TI, 0.5 * x * erfc(-x * VL_SQRT1_2)); break;          \
    case VL_UN_GELU_TANH:                                                                   \
      VL_UN_LOOP(TO, TI, x / (1.0 + exp(-2.0 * VL_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))); \
      break;                                                                                \
    case VL_UN_RECIPROCAL: VL_UN_LOOP(TO, TI, 1.0 / x); break;                              \
    case VL_UN_SIN: VL_UN_LOOP(TO, TI, sin(x)); break;                                      \
    case VL_UN_COS: VL_UN_LOOP(TO, TI, cos(x)); break;                                      \
    case VL_UN_LOGICAL_NOT: VL_UN_LOOP(TO, TI, x == 0); break;                              \
    default: break;                                                                         \
  }

/* max then min, as torch.clamp: lo > hi gives hi. */
static inline double clamp_f64(double x, double lo, double hi) {
  double y = x < lo ? lo : x;
  return y > hi ? hi : y;
}

#define VL_UN_ARGS                                                                   \
  vl_unary_op op, char *po, int64_t so, const char *px, int64_t sx, int64_t n, double p0, \
      double p1

static void un_f32(VL_UN_ARGS) { VL_UN_SWITCH(float, float) }
static void un_f64(VL_UN_ARGS) { VL_UN_SWITCH(double, double) }

static void un_i64(vl_unary_op op, int64_t *o, const int64_t *x, int64_t n, int64_t lo,
                   int64_t hi) {
  for (int64_t i = 0; i < n; i++) {
    int64_t v = x[i];
    uint64_t u = (uint64_t)v;
    switch (op) {
      case VL_UN_NEG: v = (int64_t)(0u - u); break;
      case VL_UN_ABS: v = v < 0 ? (int64_t)(0u - u) : v; break;
      case VL_UN_SQUARE: v = (int64_t)(u * u); break;
      case VL_UN_SIGN: v = (v > 0) - (v < 0); break;
      case VL_UN_RELU: v = v > 0 ? v : 0; break;
      case VL_UN_CLAMP: v = v < lo ? lo : v; v = v > hi ? hi : v; break;
      case VL_UN_LOGICAL_NOT: v = v == 0; break;
      default: break; /* FLOOR, CEIL, ROUND: the identity on integers */
    }
    o[i] = v;
  }
}

static bool un_is_int_op(vl_unary_op op) {
  return op <= VL_UN_ROUND || op == VL_UN_LOGICAL_NOT;
}

/* Contiguous f32 sqrt: IEEE sqrt is correctly rounded and double carries more than 2 * 24 + 2
 * bits, so float sqrt equals the double-then-round result. The other contiguous f32 ops the
 * vector code takes (vl_vm_unary_f32). */
static bool un_f32_contig(vl_unary_op op, float *o, const float *x, int64_t n) {
  if (op != VL_UN_SQRT) return false;
  for (int64_t i = 0; i < n; i++) o[i] = sqrtf(x[i]);
  return true;
}

typedef struct {
  vl_unary_op op;
  int path;
  vl_dtype dto, dti;
  double p0, p1;
  int64_t lo, hi;
} un_ctx;

static void un_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  const un_ctx *c = vc;
  if (c->path == PATH_F32) {
    if (bs[0] == 4 && bs[1] == 4 && (vl_vm_unary_f32(c->op, (float *)ptr[0], (const float *)ptr[1], n) ||
                                     un_f32_contig(c->op, (float *)ptr[0], (const float *)ptr[1], n)))
      return;
    un_f32(c->op, ptr[0], bs[0] / 4, ptr[1], bs[1] / 4, n, c->p0, c->p1);
    return;
  }
  if (c->path == PATH_F64) {
    un_f64(c->op, ptr[0], bs[0] / 8, ptr[1], bs[1] / 8, n, c->p0, c->p1);
    return;
  }
  for (int64_t off = 0; off < n; off += VL_CPU_BLOCK) {
    int64_t m = n - off < VL_CPU_BLOCK ? n - off : VL_CPU_BLOCK;
    char *o = ptr[0] + off * bs[0];
    const char *s = ptr[1] + off * bs[1];
    if (c->path == PATH_INT) {
      int64_t xb[VL_CPU_BLOCK], yb[VL_CPU_BLOCK];
      un_i64(c->op, yb, vl_cpu_src_i64(xb, s, bs[1], c->dti, m), m, c->lo, c->hi);
      vl_cpu_store_i64(o, bs[0], c->dto, yb, m);
    } else {
      double xb[VL_CPU_BLOCK], yb[VL_CPU_BLOCK];
      const double *x = vl_cpu_src_f64(xb, s, bs[1], c->dti, m);
      un_f64(c->op, (char *)yb, 1, (const char *)x, 1, m, c->p0, c->p1);
      vl_cpu_store_f64(o, bs[0], c->dto, yb, m);
    }
  }
}

vl_status vl_cpu_unary(vl_unary_op op, const vl_iter *it, double p0, double p1) {
  if ((unsigned)op >= VL_NUNARY) return vl_fail(VL_EINVAL, "unary (cpu): unknown op %d", (int)op);
  un_ctx c = {.op = op, .dto = it->dtype[0], .dti = it->dtype[1], .p0 = p0, .p1 = p1};
  if (vl_dtype_is_int(c.dti) && un_is_int_op(op)) {
    c.path = PATH_INT;
    /* Integer clamp bounds: the integers within [lo, hi]; an infinite bound is no bound. */
    c.lo = p0 == -INFINITY ? INT64_MIN : vl_cpu_f64_to_i64(ceil(p0));
    c.hi = p1 == INFINITY ? INT64_MAX : vl_cpu_f64_to_i64(floor(p1));
  } else if (c.dti == VL_F32 && c.dto == VL_F32) {
    c.path = PATH_F32;
  } else if (c.dti == VL_F64 && c.dto == VL_F64) {
    c.path = PATH_F64;
  } else {
    c.path = PATH_BUF;
  }
  vl_cpu_for_each(it, un_loop, &c);
  return VL_OK;
}

/* ======================= binary ======================= */

/* `rev` swaps the operands (s op a for binary_scalar); it is loop-invariant, so the branch is
 * free in practice. */
#define VL_BIN_LOOP(TO, TA, TB, E)                                   \
  do {                                                               \
    TO *o_ = (TO *)po;                                               \
    const TA *a_ = (const TA *)pa;                                   \
    const TB *b_ = (const TB *)pb;                                   \
    for (int64_t i = 0; i < n; i++) {                                \
      double a = (double)a_[i * sa], b = (double)b_[i * sb];         \
      if (rev) { double t_ = a; a = b; b = t_; }                     \
      o_[i * so] = (TO)(E);                                          \
    }                                                                \
  } while (0)

#define VL_BIN_SWITCH(TO, TA, TB)                                                     \
  switch (op) {                                                                       \
    case VL_BIN_ADD: VL_BIN_LOOP(TO, TA, TB, a + alpha * b); break;                   \
    case VL_BIN_SUB: VL_BIN_LOOP(TO, TA, TB, a - alpha * b); break;                   \
    case VL_BIN_MUL: VL_BIN_LOOP(TO, TA, TB, a * b); break;                           \
    case VL_BIN_DIV: VL_BIN_LOOP(TO, TA, TB, a / b); break;                           \
    case VL_BIN_POW: VL_BIN_LOOP(TO, TA, TB, pow(a, b)); break;                       \
    case VL_BIN_MAXIMUM: VL_BIN_LOOP(TO, TA, TB, a != a ? a : b != b ? b : a > b ? a : b); break; \
    case VL_BIN_MINIMUM: VL_BIN_LOOP(TO, TA, TB, a != a ? a : b != b ? b : a < b ? a : b); break; \
    case VL_BIN_EQ: VL_BIN_LOOP(TO, TA, TB, a == b); break;                           \
    case VL_BIN_NE: VL_BIN_LOOP(TO, TA, TB, a != b); break;                           \
    case VL_BIN_LT: VL_BIN_LOOP(TO, TA, TB, a < b); break;                            \
    case VL_BIN_LE: VL_BIN_LOOP(TO, TA, TB, a <= b); break;                           \
    case VL_BIN_GT: VL_BIN_LOOP(TO, TA, TB, a > b); break;                            \
    case VL_BIN_GE: VL_BIN_LOOP(TO, TA, TB, a >= b); break;                           \
    case VL_BIN_LOGICAL_AND: VL_BIN_LOOP(TO, TA, TB, a != 0 && b != 0); break;        \
    case VL_BIN_LOGICAL_OR: VL_BIN_LOOP(TO, TA, TB, a != 0 || b != 0); break;         \
    case VL_BIN_RELU_BACKWARD: VL_BIN_LOOP(TO, TA, TB, b > 0 ? a : 0.0); break;       \
    case VL_BIN_GELU_BACKWARD: VL_BIN_LOOP(TO, TA, TB, a * gelu_grad(b)); break;      \
    case VL_BIN_GELU_TANH_BACKWARD: VL_BIN_LOOP(TO, TA, TB, a * gelu_tanh_grad(b)); break; \
    case VL_BIN_TANH_BACKWARD: VL_BIN_LOOP(TO, TA, TB, a * (1.0 - b * b)); break;     \
    case VL_BIN_SIGMOID_BACKWARD: VL_BIN_LOOP(TO, TA, TB, a * (b * (1.0 - b))); break; \
    default: break;                                                                   \
  }

/* Derivatives of the two GELU forms (VL_UN_GELU, VL_UN_GELU_TANH) at x, for the activation
 * backward ops: Phi(x) + x phi(x), and d/dx of 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3). */
static inline double gelu_grad(double x) {
  return 0.5 * erfc(-x * VL_SQRT1_2) + x * exp(-0.5 * x * x) * 0.39894228040143267794;
}
static inline double gelu_tanh_grad(double x) {
  /* s = sigmoid(2u) = (1 + tanh(u)) / 2 and 1 - s, each without cancellation: the derivative
   * s + 2 x s (1 - s) du/dx. */
  double w = 2.0 * VL_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x);
  double s = 1.0 / (1.0 + exp(-w)), s1 = 1.0 / (1.0 + exp(w));
  return s + x * s * s1 * 2.0 * VL_SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x);
}

#define VL_BIN_ARGS                                                                  \
  vl_binary_op op, char *po, int64_t so, const char *pa, int64_t sa, const char *pb, \
      int64_t sb, int64_t n, double alpha, bool rev

/* f32 results / f64 results (also the double blocks), and bool results of predicates. The
 * *_s variants take the second operand as a double scalar (stride 0), so a scalar is never
 * rounded to the tensor's dtype before use. */
static void bin_f32(VL_BIN_ARGS) { VL_BIN_SWITCH(float, float, float) }
static void bin_f32_s(VL_BIN_ARGS) { VL_BIN_SWITCH(float, float, double) }
static void bin_f64(VL_BIN_ARGS) { VL_BIN_SWITCH(double, double, double) }
static void pred_f32(VL_BIN_ARGS) { VL_BIN_SWITCH(uint8_t, float, float) }
static void pred_f32_s(VL_BIN_ARGS) { VL_BIN_SWITCH(uint8_t, float, double) }
static void pred_f64(VL_BIN_ARGS) { VL_BIN_SWITCH(uint8_t, double, double) }

/* Integer power by squaring, wrapping. Negative exponents are rejected by the front end; they
 * are given C's integer-division meaning (1/a^|b|) so the result is still defined here. */
static int64_t ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t e = (uint64_t)b; e; e >>= 1) {
    if (e & 1) r *= x;
    x *= x;
  }
  return (int64_t)r;
}

static void bin_i64(vl_binary_op op, int64_t *o, const int64_t *pa, int64_t sa, const int64_t *pb,
                    int64_t sb, int64_t n, int64_t alpha, bool rev) {
  for (int64_t i = 0; i < n; i++) {
    int64_t a = pa[i * sa], b = pb[i * sb];
    if (rev) { int64_t t = a; a = b; b = t; }
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b;
    int64_t v = 0;
    switch (op) {
      case VL_BIN_ADD: v = (int64_t)(ua + (uint64_t)alpha * ub); break;
      case VL_BIN_SUB: v = (int64_t)(ua - (uint64_t)alpha * ub); break;
      case VL_BIN_MUL: v = (int64_t)(ua * ub); break;
      case VL_BIN_POW: v = ipow(a, b); break;
      case VL_BIN_MAXIMUM: v = a > b ? a : b; break;
      case VL_BIN_MINIMUM: v = a < b ? a : b; break;
      case VL_BIN_EQ: v = a == b; break;
      case VL_BIN_NE: v = a != b; break;
      case VL_BIN_LT: v = a < b; break;
      case VL_BIN_LE: v = a <= b; break;
      case VL_BIN_GT: v = a > b; break;
      case VL_BIN_GE: v = a >= b; break;
      case VL_BIN_LOGICAL_AND: v = a != 0 && b != 0; break;
      case VL_BIN_LOGICAL_OR: v = a != 0 || b != 0; break;
      default: break; /* DIV: never on the integer path */
    }
    o[i] = v;
  }
}

typedef void (*bin_fn)(VL_BIN_ARGS);

typedef struct {
  vl_binary_op op;
  int path;
  bin_fn typed;          /* PATH_F32 / PATH_F64 */
  vl_dtype dto, dta, dtb;
  double alpha;
  int64_t ialpha;
  bool scalar, rev;      /* binary_scalar: operand b is `s` (stride 0) */
  double s;
  int64_t is;
} bin_ctx;

/* f32 results, contiguous output: the vector code, with b contiguous, broadcast (stride 0) or
 * the scalar, or a broadcast and b contiguous (as b op a). Predicates (bool out) are not its. */
static bool bin_f32_vec(const bin_ctx *c, char *const *ptr, const int64_t *bs, int64_t n) {
  if (c->path != PATH_F32 || c->dto != VL_F32 || bs[0] != 4) return false;
  float *o = (float *)ptr[0];
  if (c->scalar)
    return bs[1] == 4 && vl_vm_binary_f32(c->op, o, (const float *)ptr[1], NULL, 0, c->s, c->alpha, c->rev, n);
  const float *a = (const float *)ptr[1], *b = (const float *)ptr[2];
  if (bs[1] == 4 && (bs[2] == 4 || bs[2] == 0))
    return vl_vm_binary_f32(c->op, o, a, b, bs[2] / 4, bs[2] ? 0.0 : (double)*b, c->alpha, false, n);
  if (bs[1] == 0 && bs[2] == 4)
    return vl_vm_binary_f32(c->op, o, b, a, 0, (double)*a, c->alpha, true, n);
  return false;
}

static void bin_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  const bin_ctx *c = vc;
  if (bin_f32_vec(c, ptr, bs, n)) return;
  if (c->path == PATH_F32 || c->path == PATH_F64) {
    int64_t eo = (int64_t)vl_dtype_size(c->dto), ei = c->path == PATH_F32 ? 4 : 8;
    const char *pb = c->scalar ? (const char *)&c->s : ptr[2];
    int64_t sb = c->scalar ? 0 : bs[2] / ei;
    c->typed(c->op, ptr[0], bs[0] / eo, ptr[1], bs[1] / ei, pb, sb, n, c->alpha, c->rev);
    return;
  }
  for (int64_t off = 0; off < n; off += VL_CPU_BLOCK) {
    int64_t m = n - off < VL_CPU_BLOCK ? n - off : VL_CPU_BLOCK;
    char *o = ptr[0] + off * bs[0];
    const char *pa = ptr[1] + off * bs[1];
    const char *pb = c->scalar ? NULL : ptr[2] + off * bs[2];
    if (c->path == PATH_INT) {
      int64_t ab[VL_CPU_BLOCK], bb[VL_CPU_BLOCK], ob[VL_CPU_BLOCK];
      const int64_t *a = vl_cpu_src_i64(ab, pa, bs[1], c->dta, m);
      const int64_t *b = c->scalar ? &c->is : vl_cpu_src_i64(bb, pb, bs[2], c->dtb, m);
      bin_i64(c->op, ob, a, 1, b, c->scalar ? 0 : 1, m, c->ialpha, c->rev);
      vl_cpu_store_i64(o, bs[0], c->dto, ob, m);
    } else {
      double ab[VL_CPU_BLOCK], bb[VL_CPU_BLOCK], ob[VL_CPU_BLOCK];
      const double *a = vl_cpu_src_f64(ab, pa, bs[1], c->dta, m);
      const double *b = c->scalar ? &c->s : vl_cpu_src_f64(bb, pb, bs[2], c->dtb, m);
      bin_f64(c->op, (char *)ob, 1, (const char *)a, 1, (const char *)b, c->scalar ? 0 : 1, m,
              c->alpha, c->rev);
      vl_cpu_store_f64(o, bs[0], c->dto, ob, m);
    }
  }
}

static bool is_int64_value(double v) {
  return v == trunc(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
}

/* Picks the loop once per call: the dtypes are fixed for the whole iterator. */
static void bin_choose(bin_ctx *c) {
  bool pred = vl_binary_is_predicate(c->op);
  bool ints = vl_dtype_is_int(c->dta) && vl_dtype_is_int(c->dtb);
  if (ints && c->op != VL_BIN_DIV && is_int64_value(c->alpha) &&
      (!c->scalar || is_int64_value(c->s))) {
    /* Exact integer arithmetic; a non-integral scalar (e.g. x:lt(2.5)) compares in double. */
    c->path = PATH_INT;
    c->ialpha = (int64_t)c->alpha;
    c->is = c->scalar ? (int64_t)c->s : 0;
    return;
  }
  bool same_in = c->scalar || c->dta == c->dtb;
  if (same_in && c->dta == VL_F32 && c->dto == (pred ? VL_BOOL : VL_F32)) {
    c->path = PATH_F32;
    c->typed = pred ? (c->scalar ? pred_f32_s : pred_f32) : (c->scalar ? bin_f32_s : bin_f32);
  } else if (same_in && c->dta == VL_F64 && c->dto == (pred ? VL_BOOL : VL_F64)) {
    c->path = PATH_F64;
    c->typed = pred ? pred_f64 : bin_f64;
  } else {
    c->path = PATH_BUF;
  }
}

vl_status vl_cpu_binary(vl_binary_op op, const vl_iter *it, double alpha) {
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary (cpu): unknown op %d", (int)op);
  bin_ctx c = {.op = op, .dto = it->dtype[0], .dta = it->dtype[1], .dtb = it->dtype[2]};
  c.alpha = (op == VL_BIN_ADD || op == VL_BIN_SUB) ? alpha : 1.0;
  bin_choose(&c);
  vl_cpu_for_each(it, bin_loop, &c);
  return VL_OK;
}

vl_status vl_cpu_binary_scalar(vl_binary_op op, const vl_iter *it, double s, bool reverse) {
  if ((unsigned)op >= VL_NBINARY)
    return vl_fail(VL_EINVAL, "binary_scalar (cpu): unknown op %d", (int)op);
  bin_ctx c = {.op = op, .dto = it->dtype[0], .dta = it->dtype[1], .dtb = it->dtype[1]};
  c.alpha = 1.0;
  c.scalar = true;
  c.rev = reverse;
  c.s = s;
  bin_choose(&c);
  vl_cpu_for_each(it, bin_loop, &c);
  return VL_OK;
}
