/* kernels/ew_formulas.h: one formula per elementwise op of the op list
 * (runtime/backend/op_list.h), compiled as C by kernels/cpu (compute type C = double: every f32
 * result rounded once from double) and as CUDA by kernels/cuda (C = float for the 16- and 32-bit
 * float dtypes, double for f64). The kernels generate their op switches from the list, so an op's
 * arithmetic is written here and nowhere else; the CPU's SIMD code (kernels/cpu/cpu_vmath_impl.h)
 * is the one other spelling, of a few hot ops, and tests/c/test_cpu_elementwise.c holds it to
 * these formulas.
 *
 * Unary, float:   VL_UF_<OP>(C, x, lo, hi)   (lo, hi: clamp's bounds; unused elsewhere)
 * Unary, integer: VL_UI_<OP>(x, lo, hi)      on int64_t, for the EXACT and BOOL ops only:
 *                 +, -, * wrap modulo 2^64 (unsigned arithmetic), as C's fixed-width types
 * Binary, float:  VL_BF_<OP>(C, a, b, alpha) (alpha: ADD and SUB's factor of b); the ACT ops
 *                 take [grad a, v b] (v the forward input x, or the output y for TANH, SIGMOID)
 * Binary, integer: VL_BI_<OP>(a, b, alpha)   on int64_t, every op but DIV and the ACT ones
 *
 * NaN propagates: comparisons with NaN are false, so SIGN, RELU, CLAMP return the NaN input and
 * MAXIMUM/MINIMUM test for it first. GELU uses erfc, which keeps its relative accuracy for x << 0
 * where 1 + erf(x) cancels; the tanh GELU is x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3), the
 * same function as 0.5 x (1 + tanh u) without 1 + tanh u cancelling to 0 below x = -5.7, on both
 * devices and in both precisions; its derivative is written with s = sigmoid(2u) and 1 - s, each
 * without cancellation. */
#ifndef VL_EW_FORMULAS_H
#define VL_EW_FORMULAS_H

#include <math.h>
#include <stdint.h>

#ifdef __CUDACC__
#define VL_FN static __host__ __device__ __forceinline__
/* Products feeding an addition rounded on their own (no FMA contraction): as the CPU's double
 * arithmetic, which rounds the product before the sum. */
#define VL_MUL_RN(a, b) vl_mul_rn(a, b)
static __device__ __forceinline__ float vl_mul_rn(float a, float b) { return __fmul_rn(a, b); }
static __device__ __forceinline__ double vl_mul_rn(double a, double b) { return __dmul_rn(a, b); }
#else
#define VL_FN static inline
#define VL_MUL_RN(a, b) ((a) * (b))
#endif

#define VL_K_SQRT1_2 0.70710678118654752440   /* 1 / sqrt(2) */
#define VL_K_INV_SQRT_2PI 0.39894228040143267794 /* 1 / sqrt(2 pi) */
#define VL_K_SQRT_2_OVER_PI 0.79788456080286535588
#define VL_K_GELU_CUBIC 0.044715

/* A function of one compute type, defined once: a template under CUDA, the double version in C. */
#ifdef __CUDACC__
#define VL_DEF_FN1(name, body) \
  template <typename C>        \
  VL_FN C name(C x) body
#else
#define VL_DEF_FN1(name, body) VL_FN double name(double x) body
#define C double
#endif

/* d/dx of x Phi(x): Phi(x) + x phi(x). */
VL_DEF_FN1(vl_f_gelu_grad, {
  return (C)0.5 * erfc(-x * (C)VL_K_SQRT1_2) + x * exp((C)-0.5 * x * x) * (C)VL_K_INV_SQRT_2PI;
})
/* d/dx of x s, s = sigmoid(2u): s + 2 x s (1 - s) du/dx. */
VL_DEF_FN1(vl_f_gelu_tanh_grad, {
  const C w = (C)2 * (C)VL_K_SQRT_2_OVER_PI * (x + (C)VL_K_GELU_CUBIC * x * x * x);
  const C s = (C)1 / ((C)1 + exp(-w));
  const C s1 = (C)1 / ((C)1 + exp(w)); /* 1 - s (no comma above: this body is a macro argument) */
  return s + x * s * s1 * (C)2 * (C)VL_K_SQRT_2_OVER_PI * ((C)1 + (C)3 * (C)VL_K_GELU_CUBIC * x * x);
})
#ifndef __CUDACC__
#undef C
#endif

/* Integer power by squaring, wrapping; negative exponents (rejected by the front end) follow
 * PyTorch: 1 for base 1, +-1 for base -1, 0 otherwise. */
VL_FN int64_t vl_f_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  for (uint64_t e = (uint64_t)b; e; e >>= 1) {
    if (e & 1) r *= x;
    x *= x;
  }
  return (int64_t)r;
}

/* erfinv: on CUDA the library's erfinvf / erfinv; in C (double), Giles' single-precision
 * approximation ("Approximating the erfinv function", GPU Computing Gems, 2010) refined by two
 * Newton steps on erf(x) - y (each squares the relative error: 1e-7 -> 1e-14 -> rounding), so the
 * CPU result is accurate to a few ulp of double over (-1, 1); +-1 give +-inf, |y| > 1 NaN. */
#ifdef __CUDACC__
static __device__ __forceinline__ float vl_f_erfinv(float y) { return erfinvf(y); }
static __device__ __forceinline__ double vl_f_erfinv(double y) { return erfinv(y); }
#else
VL_FN double vl_f_erfinv(double y) {
  if (!(fabs(y) < 1)) return y == 1 ? INFINITY : y == -1 ? -INFINITY : NAN;
  if (y == 0) return y;
  double w = -log((1 - y) * (1 + y)), p;
  if (w < 5) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int i = 0; i < 2; i++) x -= (erf(x) - y) / (1.12837916709551257390 * exp(-x * x));
  return x;
}
#endif

/* Python's floor division and remainder of floats, as PyTorch's div_floor / remainder: the
 * remainder has the divisor's sign; the quotient is (a - fmod(a, b)) / b rounded to the nearest
 * integer, corrected by one where fmod's sign differs from b's (exact where floor(a / b) would
 * round a / b first); a zero divisor gives a / b (inf, nan). On CUDA these and the other
 * library-heavy binary formulas (fmod, atan2, hypot) are out of line, as pow: inlined into every
 * kernel instantiation they would dominate code size and compile time. */
#ifdef __CUDACC__
#define VL_DEF_FN2(name, body) \
  template <typename C>        \
  static __device__ __noinline__ C name(C a, C b) body
#else
#define VL_DEF_FN2(name, body) VL_FN double name(double a, double b) body
#define C double
#endif
VL_DEF_FN2(vl_f_fmod, { return fmod(a, b); })
VL_DEF_FN2(vl_f_atan2, { return atan2(a, b); })
VL_DEF_FN2(vl_f_hypot, { return hypot(a, b); })
VL_DEF_FN2(vl_f_remainder, {
  C m = fmod(a, b);
  if (m != (C)0 && ((b < (C)0) != (m < (C)0))) m += b;
  return m;
})
VL_DEF_FN2(vl_f_floor_divide, {
  if (b == (C)0) return a / b;
  C m = fmod(a, b);
  C d = (a - m) / b;
  if (m != (C)0 && ((b < (C)0) != (m < (C)0))) d -= (C)1;
  if (d == (C)0) return copysign((C)0, a / b);
  C fd = floor(d);
  if (d - fd > (C)0.5) fd += (C)1;
  return fd;
})
#ifndef __CUDACC__
#undef C
#endif

/* Integer floor division, remainder and fmod (C's truncation): exact, INT64_MIN / -1 wraps; a
 * zero divisor (refused by the front end, never reached) gives 0. On CUDA out of line: a 64-bit
 * division is a long software routine, and inlined into every integer kernel it took the compile
 * of cuda_binary.cu from about 2 minutes to over 20. */
#ifdef __CUDACC__
#define VL_FN_OUTLINE static __host__ __device__ __noinline__ __attribute__((unused))
#else
#define VL_FN_OUTLINE static inline
#endif
VL_FN_OUTLINE int64_t vl_f_ifloordiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return (int64_t)(0u - (uint64_t)a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) q--;
  return q;
}
VL_FN_OUTLINE int64_t vl_f_iremainder(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
VL_FN_OUTLINE int64_t vl_f_ifmod(int64_t a, int64_t b) { return b == 0 || b == -1 ? 0 : a % b; }
/* Shifts as PyTorch: a shift by a negative count or by 64 or more gives 0 (left) or the sign
 * (right); the store wraps a left shift to the dtype's width (an i32 shifted by 32..63 is 0). */
VL_FN int64_t vl_f_ishl(int64_t a, int64_t b) { return b < 0 || b >= 64 ? 0 : (int64_t)((uint64_t)a << b); }
VL_FN int64_t vl_f_ishr(int64_t a, int64_t b) { return b < 0 || b >= 64 ? (a < 0 ? -1 : 0) : a >> b; }

/* ---- unary, float ---- */
#define VL_UF_NEG(C, x, lo, hi) (-(x))
#define VL_UF_ABS(C, x, lo, hi) fabs(x)
#define VL_UF_SQUARE(C, x, lo, hi) ((x) * (x))
#define VL_UF_SIGN(C, x, lo, hi) ((x) > (C)0 ? (C)1 : (x) < (C)0 ? (C)-1 : (x))
#define VL_UF_RELU(C, x, lo, hi) ((x) > (C)0 || (x) != (x) ? (x) : (C)0)
/* max then min, as torch.clamp: lo > hi gives hi */
#define VL_UF_CLAMP(C, x, lo, hi) (((x) < (lo) ? (lo) : (x)) > (hi) ? (hi) : ((x) < (lo) ? (lo) : (x)))
#define VL_UF_FLOOR(C, x, lo, hi) floor(x)
#define VL_UF_CEIL(C, x, lo, hi) ceil(x)
#define VL_UF_ROUND(C, x, lo, hi) rint(x) /* half to even */
#define VL_UF_EXP(C, x, lo, hi) exp(x)
#define VL_UF_LOG(C, x, lo, hi) log(x)
#define VL_UF_SQRT(C, x, lo, hi) sqrt(x)
#define VL_UF_RSQRT(C, x, lo, hi) ((C)1 / sqrt(x))
#define VL_UF_TANH(C, x, lo, hi) tanh(x)
#define VL_UF_SIGMOID(C, x, lo, hi) ((C)1 / ((C)1 + exp(-(x))))
#define VL_UF_GELU(C, x, lo, hi) ((C)0.5 * (x) * erfc(-(x) * (C)VL_K_SQRT1_2))
#define VL_UF_GELU_TANH(C, x, lo, hi) \
  ((x) / ((C)1 + exp((C)-2 * (C)VL_K_SQRT_2_OVER_PI * ((x) + (C)VL_K_GELU_CUBIC * (x) * (x) * (x)))))
#define VL_UF_RECIPROCAL(C, x, lo, hi) ((C)1 / (x))
#define VL_UF_SIN(C, x, lo, hi) sin(x)
#define VL_UF_COS(C, x, lo, hi) cos(x)
#define VL_UF_LOGICAL_NOT(C, x, lo, hi) ((C)((x) == (C)0))
#define VL_UF_LOG1P(C, x, lo, hi) log1p(x)
#define VL_UF_ERF(C, x, lo, hi) erf(x)
#define VL_UF_EXPM1(C, x, lo, hi) expm1(x)
#define VL_UF_ERFINV(C, x, lo, hi) vl_f_erfinv(x)
#define VL_UF_TRUNC(C, x, lo, hi) trunc(x)
#define VL_UF_ISNAN(C, x, lo, hi) ((C)((x) != (x)))
#define VL_UF_ISINF(C, x, lo, hi) ((C)((x) == (C)INFINITY || (x) == (C)-INFINITY))
#define VL_UF_ISFINITE(C, x, lo, hi) ((C)((x) - (x) == (C)0))
#define VL_UF_BITWISE_NOT(C, x, lo, hi) (x) /* INT domain: floats are refused, never reached */

/* ---- unary, integer (EXACT and BOOL ops; FLOOR, CEIL, ROUND are the identity) ---- */
#define VL_UI_NEG(x, lo, hi) ((int64_t)(0u - (uint64_t)(x)))
#define VL_UI_ABS(x, lo, hi) ((x) < 0 ? (int64_t)(0u - (uint64_t)(x)) : (x))
#define VL_UI_SQUARE(x, lo, hi) ((int64_t)((uint64_t)(x) * (uint64_t)(x)))
#define VL_UI_SIGN(x, lo, hi) ((int64_t)(((x) > 0) - ((x) < 0)))
#define VL_UI_RELU(x, lo, hi) ((x) > 0 ? (x) : (int64_t)0)
#define VL_UI_CLAMP(x, lo, hi) (((x) < (lo) ? (lo) : (x)) > (hi) ? (hi) : ((x) < (lo) ? (lo) : (x)))
#define VL_UI_FLOOR(x, lo, hi) (x)
#define VL_UI_CEIL(x, lo, hi) (x)
#define VL_UI_ROUND(x, lo, hi) (x)
#define VL_UI_LOGICAL_NOT(x, lo, hi) ((int64_t)((x) == 0))
#define VL_UI_TRUNC(x, lo, hi) (x)
#define VL_UI_ISNAN(x, lo, hi) ((int64_t)0)
#define VL_UI_ISINF(x, lo, hi) ((int64_t)0)
#define VL_UI_ISFINITE(x, lo, hi) ((int64_t)1)
#define VL_UI_BITWISE_NOT(x, lo, hi) (~(x)) /* bool inputs go to logical_not (front end) */

/* ---- binary, float ---- */
#define VL_BF_ADD(C, a, b, alpha) ((a) + VL_MUL_RN(alpha, b))
#define VL_BF_SUB(C, a, b, alpha) ((a) - VL_MUL_RN(alpha, b))
#define VL_BF_MUL(C, a, b, alpha) ((a) * (b))
#define VL_BF_DIV(C, a, b, alpha) ((a) / (b))
#define VL_BF_POW(C, a, b, alpha) VL_POW(a, b) /* the kernel's pow: out of line on CUDA */
#define VL_BF_MAXIMUM(C, a, b, alpha) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) > (b) ? (a) : (b))
#define VL_BF_MINIMUM(C, a, b, alpha) ((a) != (a) ? (a) : (b) != (b) ? (b) : (a) < (b) ? (a) : (b))
#define VL_BF_EQ(C, a, b, alpha) ((C)((a) == (b)))
#define VL_BF_NE(C, a, b, alpha) ((C)((a) != (b)))
#define VL_BF_LT(C, a, b, alpha) ((C)((a) < (b)))
#define VL_BF_LE(C, a, b, alpha) ((C)((a) <= (b)))
#define VL_BF_GT(C, a, b, alpha) ((C)((a) > (b)))
#define VL_BF_GE(C, a, b, alpha) ((C)((a) >= (b)))
#define VL_BF_LOGICAL_AND(C, a, b, alpha) ((C)((a) != (C)0 && (b) != (C)0))
#define VL_BF_LOGICAL_OR(C, a, b, alpha) ((C)((a) != (C)0 || (b) != (C)0))
#define VL_BF_REMAINDER(C, a, b, alpha) vl_f_remainder(a, b)
#define VL_BF_FLOOR_DIVIDE(C, a, b, alpha) vl_f_floor_divide(a, b)
#define VL_BF_FMOD(C, a, b, alpha) vl_f_fmod(a, b)
#define VL_BF_ATAN2(C, a, b, alpha) vl_f_atan2(a, b)
#define VL_BF_HYPOT(C, a, b, alpha) vl_f_hypot(a, b)
/* the INT ops: floats are refused by the front end, never reached */
#define VL_BF_BITWISE_AND(C, a, b, alpha) (a)
#define VL_BF_BITWISE_OR(C, a, b, alpha) (a)
#define VL_BF_BITWISE_XOR(C, a, b, alpha) (a)
#define VL_BF_BITWISE_LEFT_SHIFT(C, a, b, alpha) (a)
#define VL_BF_BITWISE_RIGHT_SHIFT(C, a, b, alpha) (a)
#define VL_BF_RELU_BACKWARD(C, a, b, alpha) ((b) > (C)0 ? (a) : (C)0)
#define VL_BF_GELU_BACKWARD(C, a, b, alpha) ((a) * vl_f_gelu_grad(b))
#define VL_BF_GELU_TANH_BACKWARD(C, a, b, alpha) ((a) * vl_f_gelu_tanh_grad(b))
#define VL_BF_TANH_BACKWARD(C, a, b, alpha) ((a) * ((C)1 - (b) * (b)))
#define VL_BF_SIGMOID_BACKWARD(C, a, b, alpha) ((a) * ((b) * ((C)1 - (b))))

/* ---- binary, integer (ua, ub: the operands as uint64_t, where overflow wraps) ---- */
#define VL_BI_ADD(a, b, alpha) ((int64_t)((uint64_t)(a) + (uint64_t)(alpha) * (uint64_t)(b)))
#define VL_BI_SUB(a, b, alpha) ((int64_t)((uint64_t)(a) - (uint64_t)(alpha) * (uint64_t)(b)))
#define VL_BI_MUL(a, b, alpha) ((int64_t)((uint64_t)(a) * (uint64_t)(b)))
/* never reached (the front end promotes integer division to f32); defined for every input */
#define VL_BI_DIV(a, b, alpha) ((b) == 0 ? (int64_t)0 : (b) == -1 ? (int64_t)(0u - (uint64_t)(a)) : (a) / (b))
#define VL_BI_POW(a, b, alpha) vl_f_ipow(a, b)
#define VL_BI_MAXIMUM(a, b, alpha) ((a) > (b) ? (a) : (b))
#define VL_BI_MINIMUM(a, b, alpha) ((a) < (b) ? (a) : (b))
#define VL_BI_EQ(a, b, alpha) ((int64_t)((a) == (b)))
#define VL_BI_NE(a, b, alpha) ((int64_t)((a) != (b)))
#define VL_BI_LT(a, b, alpha) ((int64_t)((a) < (b)))
#define VL_BI_LE(a, b, alpha) ((int64_t)((a) <= (b)))
#define VL_BI_GT(a, b, alpha) ((int64_t)((a) > (b)))
#define VL_BI_GE(a, b, alpha) ((int64_t)((a) >= (b)))
#define VL_BI_LOGICAL_AND(a, b, alpha) ((int64_t)((a) != 0 && (b) != 0))
#define VL_BI_LOGICAL_OR(a, b, alpha) ((int64_t)((a) != 0 || (b) != 0))
#define VL_BI_REMAINDER(a, b, alpha) vl_f_iremainder(a, b)
#define VL_BI_FLOOR_DIVIDE(a, b, alpha) vl_f_ifloordiv(a, b)
#define VL_BI_FMOD(a, b, alpha) vl_f_ifmod(a, b)
#define VL_BI_ATAN2(a, b, alpha) ((int64_t)0) /* FLOAT kind: integers computed in f32 */
#define VL_BI_HYPOT(a, b, alpha) ((int64_t)0)
#define VL_BI_BITWISE_AND(a, b, alpha) ((a) & (b))
#define VL_BI_BITWISE_OR(a, b, alpha) ((a) | (b))
#define VL_BI_BITWISE_XOR(a, b, alpha) ((a) ^ (b))
#define VL_BI_BITWISE_LEFT_SHIFT(a, b, alpha) vl_f_ishl(a, b)
#define VL_BI_BITWISE_RIGHT_SHIFT(a, b, alpha) vl_f_ishr(a, b)
#define VL_BI_RELU_BACKWARD(a, b, alpha) ((int64_t)0) /* the ACT ops: float only */
#define VL_BI_GELU_BACKWARD(a, b, alpha) ((int64_t)0)
#define VL_BI_GELU_TANH_BACKWARD(a, b, alpha) ((int64_t)0)
#define VL_BI_TANH_BACKWARD(a, b, alpha) ((int64_t)0)
#define VL_BI_SIGMOID_BACKWARD(a, b, alpha) ((int64_t)0)

/* The integer unary formula of an op that has one (EXACT, BOOL), else the identity: for the
 * generated switches (FLOAT ops never reach an integer path). */
#define VL_UI_OR_ID_EXACT(E, x, lo, hi) VL_UI_##E(x, lo, hi)
#define VL_UI_OR_ID_BOOL(E, x, lo, hi) VL_UI_##E(x, lo, hi)
#define VL_UI_OR_ID_INT(E, x, lo, hi) VL_UI_##E(x, lo, hi)
#define VL_UI_OR_ID_FLOAT(E, x, lo, hi) (x)

#endif
