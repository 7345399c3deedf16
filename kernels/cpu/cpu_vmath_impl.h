/* kernels/cpu/cpu_vmath_impl.h: the vector math of cpu_vmath.h, written once over GCC vector
 * extensions and included by cpu_vmath.c once per instruction set. No include guard: each
 * inclusion defines one instance. The includer defines
 *   VM_SFX       the instance's name suffix (avx512, avx2, gen)
 *   VM_NAME      its name for vl_vm_isa ("avx512", "avx2", "generic")
 *   VW           lanes per float vector (16, 8, 4)
 *   VM_ATTR      attributes of every function (the target, or nothing)
 *   VM_FMA(a,b,c) a * b + c on float vectors (fused where the instance has it)
 *   VM_DHW, VM_DFMA (optional) the hardware double vector and its fused multiply-add, for
 *                the double polynomials (VM(fmad): the ISO C mode never contracts a * b + c)
 *
 * Double lanes (VD: twice the float vector's bytes) take only arithmetic, bit operations and
 * conversions: GCC splits those into hardware vectors, but lowers a comparison of a vector wider
 * than the hardware's into scalar code (it did, 10x slower).
 *
 * The approximations (coefficients fitted with mpmath by Chebyshev interpolation; the fit's
 * error is far below float's 2^-24 in each):
 *  - exp(x + xl): n = round(x / ln2), r = x - n ln2 (Cody-Waite: the high part of ln2 has 9
 *    bits, so n * hi and x - n * hi are exact) + xl, exp(r) = 1 + r + r^2 P(r) of degree 6,
 *    scaled by 2^n in two steps so that subnormal results round once and overflow gives inf.
 *    The low part xl carries the rounding error of an argument formed in double (GELU's -x^2/2).
 *  - log: x = 2^k m, m in [sqrt(1/2), sqrt(2)), s = (m - 1) / (m + 1), log m = 2s + s^3 P(s^2).
 *  - tanh: x + x^3 P(x^2) below 0.625, else (1 - e) / (1 + e) with e = exp(-2|x|) (no overflow,
 *    no cancellation: e <= 0.29 there), the sign copied.
 *  - sigmoid: e = exp(-|x|), 1 / (1 + e) or e / (1 + e): relative accuracy on both tails.
 *  - erfc(t), t = |x| / sqrt(2) >= 0: u exp(-t^2 + Q(u)) with u = 1 / (1 + 0.4 t) and Q of
 *    degree 10 on the u of t in [0, 11.5] (erfc underflows beyond): relative accuracy for every
 *    t, so GELU's Phi(x) = erfc / 2 keeps it for negative x, where 1 + erf(x) would cancel.
 *    u, Q(u) and -t^2 + Q are formed in double: t^2 of a float is exact there (its float
 *    rounding would cost t^2 2^-24 of relative error, 100 ulp at t = 9), and Q's terms reach 3.
 *  - tanh-GELU as x sigmoid(w), w = 2 sqrt(2/pi) (x + 0.044715 x^3) formed in double: the same
 *    function as 0.5 x (1 + tanh(w / 2)) without 1 + tanh cancelling for negative x; the
 *    sigmoid's quotient and the products after exp in double too. */

#define VM_CAT2(a, b) a##_##b
#define VM_CAT(a, b) VM_CAT2(a, b)
#define VM(n) VM_CAT(n, VM_SFX)
#define VF VM(vf)
#define VI VM(vi)
#define VD VM(vd)
#define VL VM(vl)
#define VU VM(vu)
#define VQ VM(vq)
#define VM_INL static inline __attribute__((always_inline)) VM_ATTR

typedef float VF __attribute__((vector_size(VW * 4)));
typedef int32_t VI __attribute__((vector_size(VW * 4)));
typedef double VD __attribute__((vector_size(VW * 8)));
typedef int64_t VL __attribute__((vector_size(VW * 8)));
typedef uint32_t VU __attribute__((vector_size(VW * 4)));
typedef uint64_t VQ __attribute__((vector_size(VW * 8)));

/* ---- lanes ---- */
VM_INL VF VM(splat)(float c) {
  VF v = {0};
  return v + c;
}
VM_INL VD VM(splatd)(double c) {
  VD v = {0};
  return v + c;
}
VM_INL VF VM(ld)(const float *p) {
  VF v;
  memcpy(&v, p, sizeof v);
  return v;
}
VM_INL void VM(st)(float *p, VF v) { memcpy(p, &v, sizeof v); }
/* The first n (< VW) lanes from p, the others `fill`: a run's tail goes through the same code. */
VM_INL VF VM(ldn)(const float *p, int64_t n, float fill) {
  VF v = VM(splat)(fill);
  memcpy(&v, p, (size_t)n * sizeof(float));
  return v;
}
VM_INL void VM(stn)(float *p, VF v, int64_t n) { memcpy(p, &v, (size_t)n * sizeof(float)); }
VM_INL VF VM(sel)(VI m, VF a, VF b) { return (VF)(((VI)a & m) | ((VI)b & ~m)); }
VM_INL VF VM(vabs)(VF x) { return (VF)((VI)x & 0x7fffffff); }
VM_INL VI VM(vsignbit)(VF x) { return (VI)x & INT32_MIN; }
VM_INL VD VM(widen)(VF x) { return __builtin_convertvector(x, VD); }
VM_INL VF VM(narrow)(VD x) { return __builtin_convertvector(x, VF); }
/* min(x, c) / max(x, c) that keep a NaN x. */
VM_INL VF VM(minc)(VF x, float c) { return VM(sel)(x > c, VM(splat)(c), x); }
VM_INL VF VM(maxc)(VF x, float c) { return VM(sel)(x < c, VM(splat)(c), x); }

/* a * b + c on double lanes: fused, per hardware vector, where the instance has it (the GELU
 * polynomials in double were two thirds of GELU's time as separate multiplies and adds). */
VM_INL VD VM(fmad)(VD a, VD b, VD c) {
#ifdef VM_DHW
  enum { NP = sizeof(VD) / sizeof(VM_DHW) };
  VM_DHW pa[NP], pb[NP], pc[NP];
  memcpy(pa, &a, sizeof a);
  memcpy(pb, &b, sizeof b);
  memcpy(pc, &c, sizeof c);
  for (int k = 0; k < NP; k++) pa[k] = VM_DFMA(pa[k], pb[k], pc[k]);
  memcpy(&a, pa, sizeof a);
  return a;
#else
  return a * b + c;
#endif
}
#define VM_FMAD(a, b, c) VM(fmad)((a), (b), VM(splatd)(c))

/* IEEE square roots (correctly rounded, so the float one equals the double one rounded): the
 * instance's instructions (VM_FSQRT, VM_DSQRT on VM_DSQRT_T parts), else libm per lane. */
VM_INL VF VM(vsqrt)(VF x) {
#ifdef VM_FSQRT
  return VM_FSQRT(x);
#else
  for (int j = 0; j < VW; j++) x[j] = sqrtf(x[j]);
  return x;
#endif
}
VM_INL VD VM(vsqrtd)(VD x) {
#ifdef VM_DSQRT
  enum { NP = sizeof(VD) / sizeof(VM_DSQRT_T) };
  VM_DSQRT_T p[NP];
  memcpy(p, &x, sizeof x);
  for (int k = 0; k < NP; k++) p[k] = VM_DSQRT(p[k]);
  memcpy(&x, p, sizeof x);
#else
  for (int j = 0; j < VW; j++) x[j] = sqrt(x[j]);
#endif
  return x;
}

/* ---- exp ---- */
VM_INL VF VM(vexp2)(VF x, VF xl) {
  const float magic = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  x = VM(maxc)(VM(minc)(x, 89.0f), -104.0f);
  VF kf = VM_FMA(x, VM(splat)(1.442695022e+00f), VM(splat)(magic));
  VI ki = (VI)kf - (VI)VM(splat)(magic);
  VF n = kf - magic;
  VF r = VM_FMA(n, VM(splat)(-0.693359375f), x);
  r = VM_FMA(n, VM(splat)(2.121944417e-04f), r) + xl;
  VF p = VM_FMA(VM(splat)(1.392912585e-03f), r, VM(splat)(8.365534246e-03f));
  p = VM_FMA(p, r, VM(splat)(4.166653752e-02f));
  p = VM_FMA(p, r, VM(splat)(1.666656286e-01f));
  p = VM_FMA(p, r, VM(splat)(0.5f));
  VF e = VM_FMA(p, r * r, r) + 1.0f;
  VI n1 = ki >> 1, n2 = ki - n1; /* unsigned shifts: a NaN's n is garbage (the result stays NaN) */
  return e * (VF)((VU)(n1 + 127) << 23) * (VF)((VU)(n2 + 127) << 23);
}
VM_INL VF VM(vexp)(VF x) { return VM(vexp2)(x, VM(splat)(0.0f)); }

/* exp of a double argument: its float rounding and the remainder as the low part (0 where the
 * result is 0 anyway: a = -inf would give a NaN remainder). */
VM_INL VF VM(vexpd)(VD a) {
  VF hi = VM(narrow)(a);
  VF lo = VM(narrow)(a - VM(widen)(hi));
  return VM(vexp2)(hi, VM(sel)(hi < -104.0f, VM(splat)(0.0f), lo));
}

/* ---- log ---- */
VM_INL VF VM(vlog)(VF x) {
  VI sub = x < 0x1p-126f; /* subnormal (or <= 0: replaced below) */
  VF xs = VM(sel)(sub, x * 0x1p23f, x);
  /* bits of sqrt(1/2) off: m lands in [sqrt(1/2), sqrt(2)); unsigned, as a negative x's bits
   * would overflow (the result is replaced below) */
  VI t = (VI)((VU)xs - 0x3f3504f3u);
  VI k = (t >> 23) + (sub & -23);
  VF m = (VF)((t & 0x007fffff) + 0x3f3504f3);
  VF f = m - 1.0f;
  VF s = f / (f + 2.0f);
  VF z = s * s;
  VF p = VM_FMA(VM(splat)(2.334194332e-01f), z, VM(splat)(2.855039835e-01f));
  p = VM_FMA(p, z, VM(splat)(4.000012577e-01f));
  p = VM_FMA(p, z, VM(splat)(6.666666865e-01f));
  VF lm = VM_FMA(s * z, p, s + s);
  VF kf = __builtin_convertvector(k, VF);
  VF r = VM_FMA(kf, VM(splat)(0.693359375f), VM_FMA(kf, VM(splat)(-2.121944417e-04f), lm));
  r = VM(sel)(x == __builtin_inff(), x, r);
  r = VM(sel)(x == 0.0f, VM(splat)(-__builtin_inff()), r);
  r = VM(sel)(x < 0.0f, VM(splat)(__builtin_nanf("")), r);
  return VM(sel)(x != x, x, r);
}

/* ---- tanh, sigmoid ---- */
VM_INL VF VM(vtanh)(VF x) {
  VF ax = VM(vabs)(x), z = x * x;
  VF p = VM_FMA(VM(splat)(2.277154941e-03f), z, VM(splat)(-8.330076933e-03f));
  p = VM_FMA(p, z, VM(splat)(2.176464908e-02f));
  p = VM_FMA(p, z, VM(splat)(-5.395872891e-02f));
  p = VM_FMA(p, z, VM(splat)(1.333330125e-01f));
  p = VM_FMA(p, z, VM(splat)(-3.333333433e-01f));
  VF small = VM_FMA(x * z, p, x);
  VF e = VM(vexp)(ax * -2.0f);
  VF big = (VF)((VI)((1.0f - e) / (1.0f + e)) | VM(vsignbit)(x));
  return VM(sel)(ax < 0.625f, small, big);
}

VM_INL VF VM(vsigmoid)(VF x) {
  VF e = VM(vexp)(-VM(vabs)(x));
  return VM(sel)(x >= 0.0f, VM(splat)(1.0f), e) / (e + 1.0f);
}

/* ---- GELU (erf form) ---- */
/* The exps below return their value times 2^32 (the exponent gets 32 ln 2 added in double):
 * for large negative x the results are subnormal, and an intermediate that is subnormal before
 * the last multiplication would lose bits (12 ulp at x = -13). The caller's last operation
 * scales back, rounding once. */
#define VM_LN_2P32 22.180709777918249 /* 32 ln 2 */

/* erfc(|x| / sqrt 2) 2^32, and when e0 is given exp(-x^2 / 2) 2^32. u and Q(u) are computed in
 * double: Q's terms reach 3 and u's rounding is amplified by 1 + u Q'(u) (2.8 at u = 1), which
 * in float cost up to 8 ulp near x = 0; the float part is then exp and three products. */
VM_INL VF VM(verfc_sd)(VD xd, VF *e0) {
  /* u = 1 / (1 + 0.4 t): the float quotient and one Newton step in double (error ~2^-48; a
   * double division costs twice the rest of this function on AVX-512) */
  VD dn = VM_FMAD(xd, VM(splatd)(0.28284271247461901), 1.0);
  VD u = VM(widen)(1.0f / VM(narrow)(dn));
  u = u * (2.0 - dn * u);
  VD q = VM_FMAD(u, VM(splatd)(0.20795864878568927), -1.1791201506253059);
  q = VM_FMAD(q, u, 2.7023276773352966);
  q = VM_FMAD(q, u, -3.1756393114571131);
  q = VM_FMAD(q, u, 2.1516579898952469);
  q = VM_FMAD(q, u, -1.1131570782972478);
  q = VM_FMAD(q, u, 0.36474132414961043);
  q = VM_FMAD(q, u, 0.10065712136354861);
  q = VM_FMAD(q, u, 0.42999779422322533);
  q = VM_FMAD(q, u, 0.99920380380557513);
  q = VM_FMAD(q, u, -1.4886278122070156);
  VD h = VM_FMAD(xd * xd, VM(splatd)(-0.5), VM_LN_2P32); /* x^2 is exact in double */
  if (e0) *e0 = VM(vexpd)(h);
  return VM(narrow)(u) * VM(vexpd)(h + q);
}
VM_INL VF VM(verfc_s)(VF x, VF *e0) {
  VF xa = VM(minc)(VM(vabs)(x), 16.0f); /* erfc and exp(-x^2/2) are 0 in float beyond */
  return VM(verfc_sd)(VM(widen)(xa), e0);
}
/* The same at a double argument xd in [0, 16]. */
VM_INL VF VM(verfc_d)(VD xd) { return VM(verfc_sd)(xd, NULL); }

/* x Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2: erfc / 2 for negative x, 1 - erfc / 2 otherwise. */
VM_INL VF VM(vgelu)(VF x) {
  VF hs = VM(verfc_s)(x, NULL) * 0.5f;
  return VM(sel)(x < 0.0f, (x * hs) * 0x1p-32f, x * (1.0f - hs * 0x1p-32f));
}

/* d/dx x Phi(x) = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). */
VM_INL VF VM(vgelu_grad)(VF x) {
  VF e0;
  VF hs = VM(verfc_s)(x, &e0) * 0.5f;
  VF xp = x * (e0 * 3.989422917e-01f); /* x phi(x) 2^32 */
  return VM(sel)(x < 0.0f, (hs + xp) * 0x1p-32f, (1.0f - hs * 0x1p-32f) + xp * 0x1p-32f);
}

/* ---- GELU (tanh form) ---- */
/* For w = 2 sqrt(2/pi) (x + 0.044715 x^3) (of x's sign) and e = exp(-|w|), in double:
 * *r = 1 / (1 + e) and the return value e / (1 + e); sigmoid(w) and 1 - sigmoid(w) are these
 * two in the order of w's sign. *xdw = x w'(x) when asked. Only exp runs in float (its result
 * scaled by 2^32 so that it stays normal); 1 / (1 + e) is a float quotient refined by a Newton
 * step in double, so the products below round once, at the end (the float version of this
 * cost up to 5 ulp where the gradient's two terms cancel). */
VM_INL VD VM(vgelu_tanh_parts)(VF x, VD *r, VD *xdw) {
  VD xd = VM(widen)(x);
  VD w = xd * VM_FMAD(xd * xd, VM(splatd)(0.071354816272138578), 1.5957691216057308);
  if (xdw) { /* x w'(x), 0 beyond |x| = 1e4 where the term it scales is 0 anyway (x * 0 there:
               * NaN for +-inf, as the double formula gives) */
    VD xc = VM(widen)(VM(sel)(x * x > 1e8f, x * 0.0f, x));
    *xdw = xc * VM_FMAD(xc * xc, VM(splatd)(0.21406444881641573), 1.5957691216057308);
  }
  VD nw = (VD)((VL)w | INT64_MIN); /* -|w|; a NaN stays */
  VD e = VM(widen)(VM(vexpd)(nw + VM_LN_2P32)) * 0x1p-32;
  VD d = e + 1.0;
  VD q = VM(widen)(1.0f / VM(narrow)(d));
  q = q * (2.0 - d * q);
  *r = q;
  return e * q;
}

VM_INL VF VM(vgelu_tanh)(VF x) {
  VD r, s1 = VM(vgelu_tanh_parts)(x, &r, NULL), xd = VM(widen)(x);
  return VM(sel)(x < 0.0f, VM(narrow)(xd * s1), VM(narrow)(xd * r));
}

/* d/dx x sigmoid(w) = s + x w' s (1 - s) = s (1 + x w' (1 - s)). */
VM_INL VF VM(vgelu_tanh_grad)(VF x) {
  VD r, xdw, s1 = VM(vgelu_tanh_parts)(x, &r, &xdw);
  return VM(sel)(x < 0.0f, VM(narrow)(s1 * (xdw * r + 1.0)), VM(narrow)(r * (xdw * s1 + 1.0)));
}

#include "kernels/cpu/cpu_vmath_fns_impl.h" /* erf, expm1, log1p, remainder, atan2 */

/* ---- loops ---- */
/* o[i] = F(x[i]): full vectors, then the tail padded with `fill`. */
#define VM_MAP1(F, FILL)                                                              \
  do {                                                                                \
    int64_t i_ = 0;                                                                   \
    for (; i_ + VW <= n; i_ += VW) VM(st)(o + i_, F(VM(ld)(x + i_)));                 \
    if (i_ < n) VM(stn)(o + i_, F(VM(ldn)(x + i_, n - i_, FILL)), n - i_);            \
  } while (0)

VM_INL VF VM(vneg)(VF x) { return -x; }
VM_INL VF VM(vabs1)(VF x) { return VM(vabs)(x); }
VM_INL VF VM(vsquare)(VF x) { return x * x; }
/* The exact ones: bitwise the scalar path's (one IEEE operation, or none). */
VM_INL VF VM(vsign)(VF x) {
  return VM(sel)(x > 0.0f, VM(splat)(1.0f), VM(sel)(x < 0.0f, VM(splat)(-1.0f), x));
}
VM_INL VF VM(vrecip)(VF x) { return 1.0f / x; }
VM_INL VF VM(vrsqrt)(VF x) { return VM(narrow)(1.0 / VM(vsqrtd)(VM(widen)(x))); } /* as (float)(1 / sqrt(double)) */
/* Rounding to integers, exact: below 2^23 in magnitude, |x| + 2^23 - 2^23 is |x| rounded to
 * the nearest integer, ties to even (the default rounding mode: rint); floor and ceil step it
 * by 1 where it went the wrong way; the result takes x's sign (floor(0.3) = +0, ceil(-0.7) = -0,
 * as libm's). From 2^23 up, infinities and NaNs: x itself. */
VM_INL VF VM(vrint_abs)(VF ax) { return (ax + 0x1p23f) - 0x1p23f; }
VM_INL VF VM(vround_to)(VF x, int mode) { /* 0 rint, 1 floor, 2 ceil, 3 trunc */
  VF ax = VM(vabs)(x);
  VF t = (VF)((VI)VM(vrint_abs)(ax) | VM(vsignbit)(x)); /* rint(x) */
  if (mode == 1) t = VM(sel)(t > x, t - 1.0f, t);
  if (mode == 2) t = VM(sel)(t < x, t + 1.0f, t);
  if (mode == 3) {
    VF f = VM(vrint_abs)(ax);
    t = VM(sel)(f > ax, f - 1.0f, f);
  }
  t = (VF)((VI)VM(vabs)(t) | VM(vsignbit)(x));
  return VM(sel)(ax < 0x1p23f, t, x);
}
VM_INL VF VM(vrint)(VF x) { return VM(vround_to)(x, 0); }
VM_INL VF VM(vfloor)(VF x) { return VM(vround_to)(x, 1); }
VM_INL VF VM(vceil)(VF x) { return VM(vround_to)(x, 2); }
VM_INL VF VM(vtrunc)(VF x) { return VM(vround_to)(x, 3); }
VM_INL VF VM(vrelu)(VF x) { return VM(sel)((x > 0.0f) | (x != x), x, VM(splat)(0.0f)); }

static VM_ATTR bool VM(unary)(vl_unary_op op, float *o, const float *x, int64_t n) {
  switch (op) {
    case VL_UN_EXP: VM_MAP1(VM(vexp), 0.0f); return true;
    case VL_UN_LOG: VM_MAP1(VM(vlog), 1.0f); return true;
    case VL_UN_TANH: VM_MAP1(VM(vtanh), 0.0f); return true;
    case VL_UN_SIGMOID: VM_MAP1(VM(vsigmoid), 0.0f); return true;
    case VL_UN_GELU: VM_MAP1(VM(vgelu), 0.0f); return true;
    case VL_UN_GELU_TANH: VM_MAP1(VM(vgelu_tanh), 0.0f); return true;
    case VL_UN_ERF: VM_MAP1(VM(verf), 0.0f); return true;
    case VL_UN_EXPM1: VM_MAP1(VM(vexpm1), 0.0f); return true;
    case VL_UN_LOG1P: VM_MAP1(VM(vlog1p), 0.0f); return true;
    case VL_UN_SIN: VM(sincos_map)(o, x, n, false); return true;
    case VL_UN_COS: VM(sincos_map)(o, x, n, true); return true;
    case VL_UN_SIGN: VM_MAP1(VM(vsign), 0.0f); return true;
    case VL_UN_ROUND: VM_MAP1(VM(vrint), 0.0f); return true;
    case VL_UN_FLOOR: VM_MAP1(VM(vfloor), 0.0f); return true;
    case VL_UN_CEIL: VM_MAP1(VM(vceil), 0.0f); return true;
    case VL_UN_TRUNC: VM_MAP1(VM(vtrunc), 0.0f); return true;
    case VL_UN_RECIPROCAL: VM_MAP1(VM(vrecip), 1.0f); return true;
    case VL_UN_SQRT: VM_MAP1(VM(vsqrt), 1.0f); return true;
    case VL_UN_RSQRT: VM_MAP1(VM(vrsqrt), 1.0f); return true;
    case VL_UN_NEG: VM_MAP1(VM(vneg), 0.0f); return true;
    case VL_UN_ABS: VM_MAP1(VM(vabs1), 0.0f); return true;
    case VL_UN_SQUARE: VM_MAP1(VM(vsquare), 0.0f); return true;
    case VL_UN_RELU: VM_MAP1(VM(vrelu), 0.0f); return true;
    default: return false;
  }
}

/* o[i] = E(a, b) over float lanes (a from `a`, b from `b` or the scalar `bs`). */
#define VM_MAP2(E)                                                                    \
  do {                                                                                \
    int64_t i_ = 0;                                                                   \
    for (; i_ + VW <= n; i_ += VW) {                                                  \
      VF a = VM(ld)(pa + i_), b = pb ? VM(ld)(pb + i_) : bs;                          \
      VM(st)(o + i_, (E));                                                            \
    }                                                                                 \
    if (i_ < n) {                                                                     \
      VF a = VM(ldn)(pa + i_, n - i_, 1.0f), b = pb ? VM(ldn)(pb + i_, n - i_, 1.0f) : bs; \
      VM(stn)(o + i_, (E), n - i_);                                                   \
    }                                                                                 \
  } while (0)

/* The same over double lanes, rounded once to float: the scalar path's exact arithmetic. */
#define VM_MAP2D(E)                                                                   \
  do {                                                                                \
    int64_t i_ = 0;                                                                   \
    for (; i_ < n; i_ += VW) {                                                        \
      int64_t m_ = n - i_ < VW ? n - i_ : VW;                                         \
      VF af = m_ == VW ? VM(ld)(pa + i_) : VM(ldn)(pa + i_, m_, 1.0f);                \
      VD a = VM(widen)(af), b = bsd;                                                  \
      if (pb) b = VM(widen)(m_ == VW ? VM(ld)(pb + i_) : VM(ldn)(pb + i_, m_, 1.0f)); \
      VF r_ = VM(narrow)(E);                                                          \
      if (m_ == VW) VM(st)(o + i_, r_);                                               \
      else VM(stn)(o + i_, r_, m_);                                                   \
    }                                                                                 \
  } while (0)

static VM_ATTR bool VM(binary)(vl_binary_op op, float *o, const float *a_in, const float *b_in,
                               int64_t b_stride, double bd, double alpha, bool rev, int64_t n) {
  bool scalar = b_stride == 0;
  const float *pa = a_in, *pb = scalar ? NULL : b_in;
  float bf = (float)bd;
  VF bs = VM(splat)(bf);
  VD bsd = VM(splatd)(bd);
  /* Float arithmetic equals double-then-round for one IEEE op on floats (double holds more than
   * 2 * 24 + 2 bits): alpha 1 and b a float. */
  bool exact = alpha == 1.0 && (!scalar || (double)bf == bd);
  switch (op) {
    case VL_BIN_ADD:
      if (exact) VM_MAP2(a + b);
      else if (rev) VM_MAP2D(b + alpha * a);
      else VM_MAP2D(a + alpha * b);
      return true;
    case VL_BIN_SUB:
      if (exact && rev) VM_MAP2(b - a);
      else if (exact) VM_MAP2(a - b);
      else if (rev) VM_MAP2D(b - alpha * a);
      else VM_MAP2D(a - alpha * b);
      return true;
    case VL_BIN_MUL:
      if (exact) VM_MAP2(a * b);
      else VM_MAP2D(a * b);
      return true;
    case VL_BIN_DIV:
      if (exact && rev) VM_MAP2(b / a);
      else if (exact) VM_MAP2(a / b);
      else if (rev) VM_MAP2D(b / a);
      else VM_MAP2D(a / b);
      return true;
    case VL_BIN_ATAN2:
      if (!exact) return false;
      VM(atan2v)(o, pa, pb, bs, rev, n);
      return true;
    case VL_BIN_REMAINDER:
      if (!exact) return false;
      VM(remainder)(o, pa, pb, bs, rev, n);
      return true;
    case VL_BIN_MAXIMUM:
    case VL_BIN_MINIMUM:
      if (!exact) return false;
      if (rev) { /* b op a: the first operand's NaN wins */
        if (op == VL_BIN_MAXIMUM) VM_MAP2(VM(sel)(b != b, b, VM(sel)(a != a, a, VM(sel)(b > a, b, a))));
        else VM_MAP2(VM(sel)(b != b, b, VM(sel)(a != a, a, VM(sel)(b < a, b, a))));
      } else {
        if (op == VL_BIN_MAXIMUM) VM_MAP2(VM(sel)(a != a, a, VM(sel)(b != b, b, VM(sel)(a > b, a, b))));
        else VM_MAP2(VM(sel)(a != a, a, VM(sel)(b != b, b, VM(sel)(a < b, a, b))));
      }
      return true;
    default: break;
  }
  /* The activation backward ops: a the incoming gradient, b the saved tensor. */
  if (scalar || rev) return false;
  switch (op) {
    case VL_BIN_RELU_BACKWARD: VM_MAP2(VM(sel)(b > 0.0f, a, VM(splat)(0.0f))); return true;
    case VL_BIN_TANH_BACKWARD: VM_MAP2D(a * (1.0 - b * b)); return true;
    case VL_BIN_SIGMOID_BACKWARD: VM_MAP2D(a * (b * (1.0 - b))); return true;
    case VL_BIN_GELU_BACKWARD: VM_MAP2(a * VM(vgelu_grad)(b)); return true;
    case VL_BIN_GELU_TANH_BACKWARD: VM_MAP2(a * VM(vgelu_tanh_grad)(b)); return true;
    default: return false;
  }
}

/* ---- rows ---- */
VM_INL double VM(hsum)(VD v) {
  double s = 0;
  for (int j = 0; j < VW; j++) s += v[j];
  return s;
}

static VM_ATTR void VM(softmax_row)(const float *x, float *y, int64_t len, bool log_out) {
  const float ninf = -__builtin_inff();
  VF mv = VM(splat)(ninf);
  VI nan = {0};
  int64_t i = 0;
  for (; i + VW <= len; i += VW) {
    VF v = VM(ld)(x + i);
    nan |= v != v;
    mv = VM(sel)(v > mv, v, mv);
  }
  if (i < len) {
    VF v = VM(ldn)(x + i, len - i, ninf);
    nan |= v != v;
    mv = VM(sel)(v > mv, v, mv);
  }
  float m = ninf;
  int any_nan = 0;
  for (int j = 0; j < VW; j++) {
    m = mv[j] > m ? mv[j] : m;
    any_nan |= nan[j];
  }
  if (any_nan) {
    for (int64_t k = 0; k < len; k++) y[k] = __builtin_nanf("");
    return;
  }
  VD acc = {0};
  for (i = 0; i + VW <= len; i += VW) {
    VF e = VM(vexp)(VM(ld)(x + i) - m);
    if (!log_out) VM(st)(y + i, e);
    acc += VM(widen)(e);
  }
  if (i < len) {
    VF e = VM(vexp)(VM(ldn)(x + i, len - i, ninf) - m); /* the padding gives exp(-inf) = 0 */
    if (!log_out) VM(stn)(y + i, e, len - i);
    acc += VM(widen)(e);
  }
  double s = VM(hsum)(acc);
  if (log_out) {
    float ls = (float)log(s);
    for (i = 0; i + VW <= len; i += VW) VM(st)(y + i, (VM(ld)(x + i) - m) - ls);
    for (; i < len; i++) y[i] = (x[i] - m) - ls;
  } else {
    float inv = (float)(1.0 / s);
    for (i = 0; i + VW <= len; i += VW) VM(st)(y + i, VM(ld)(y + i) * inv);
    for (; i < len; i++) y[i] *= inv;
  }
}

static VM_ATTR void VM(softmax_bw_row)(const float *y, const float *g, float *dx, int64_t len,
                                       bool log_out) {
  VD acc = {0};
  int64_t i = 0;
  for (; i + VW <= len; i += VW) {
    VD gd = VM(widen)(VM(ld)(g + i));
    acc += log_out ? gd : gd * VM(widen)(VM(ld)(y + i)); /* a product of floats is exact */
  }
  if (i < len) {
    VD gd = VM(widen)(VM(ldn)(g + i, len - i, 0.0f));
    acc += log_out ? gd : gd * VM(widen)(VM(ldn)(y + i, len - i, 0.0f));
  }
  float sf = (float)VM(hsum)(acc);
  if (log_out) {
    for (i = 0; i + VW <= len; i += VW)
      VM(st)(dx + i, VM(ld)(g + i) - VM(vexp)(VM(ld)(y + i)) * sf);
    if (i < len) {
      VF v = VM(ldn)(g + i, len - i, 0.0f) - VM(vexp)(VM(ldn)(y + i, len - i, 0.0f)) * sf;
      VM(stn)(dx + i, v, len - i);
    }
  } else {
    for (i = 0; i + VW <= len; i += VW) VM(st)(dx + i, VM(ld)(y + i) * (VM(ld)(g + i) - sf));
    for (; i < len; i++) dx[i] = y[i] * (g[i] - sf);
  }
}

/* Row by row, each row's w lanes added into acc (in L1): reading down a column, one cache line
 * per 4 KiB page, left the prefetchers idle (sum over the first dim 6x the last dim's time).
 * Each lane still adds its column in row order. */
static VM_ATTR void VM(sum_lanes)(const float *x, int64_t ld, int64_t len, int64_t w, double *acc) {
  for (int64_t l = 0; l < len; l++) {
    const float *row = x + l * ld;
    int64_t j = 0;
    for (; j + VW <= w; j += VW) {
      VD a;
      memcpy(&a, acc + j, sizeof a);
      a += VM(widen)(VM(ld)(row + j));
      memcpy(acc + j, &a, sizeof a);
    }
    for (; j < w; j++) acc[j] += row[j];
  }
}

#include "kernels/cpu/cpu_vmath_rows_impl.h" /* row sums, extrema, layer norm rows */

/* ---- Philox ---- */
/* Philox4x32-10 (runtime/core/philox.h) of the VW counters ctr0 + lane, c2 = c3 = 0: one group per
 * lane, the 32-bit words in 64-bit lanes so that the 32 x 32 -> 64 products are lane products. */
VM_INL void VM(philox)(uint64_t seed, uint64_t ctr0, VQ x[4]) {
  const uint64_t m32 = 0xffffffffu;
  VQ ctr = {0};
  for (int j = 0; j < VW; j++) ctr[j] = ctr0 + (uint64_t)j;
  VQ c0 = ctr & m32, c1 = ctr >> 32, c2 = ctr ^ ctr, c3 = c2;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    VQ p0 = c0 * 0xD2511F53u, p1 = c2 * 0xCD9E8D57u;
    VQ n0 = (p1 >> 32) ^ c1 ^ (uint64_t)k0, n2 = (p0 >> 32) ^ c3 ^ (uint64_t)k1;
    c0 = n0;
    c1 = p1 & m32;
    c2 = n2;
    c3 = p0 & m32;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  x[0] = c0, x[1] = c1, x[2] = c2, x[3] = c3;
}

/* Elements [4 g0, 4 g0 + n) of a call's f32 stream (element 4g + j is word j of group g, counter
 * first + g), written to out[0..n): bernoulli (1 where the word's top 23 bits m < thresh, which
 * is u < p for u = (m + 0.5) 2^-23, thresh = ceil(p 2^23 - 0.5)) or uniform a + (b - a) u in
 * double, rounded once: bit for bit the scalar path's values. */
static VM_ATTR void VM(philox_f32)(uint64_t seed, uint64_t first, int64_t g0, int64_t n, bool bernoulli,
                                   uint32_t thresh, double a, double b, float *out) {
  for (int64_t e = 0; e < n; e += 4 * VW) {
    VQ x[4];
    VM(philox)(seed, first + (uint64_t)g0 + (uint64_t)(e / 4), x);
    float v[4][VW];
    for (int w = 0; w < 4; w++) {
      VI m = __builtin_convertvector(x[w] >> 9, VI); /* below 2^23; compared as 32-bit lanes */
      if (bernoulli) {
        VF r = VM(sel)(m < (int32_t)thresh, VM(splat)(1.0f), VM(splat)(0.0f));
        memcpy(v[w], &r, sizeof r);
      } else {
        VF u = (__builtin_convertvector(m, VF) + 0.5f) * 0x1p-23f; /* exact */
        VF r = VM(narrow)(VM(widen)(u) * (b - a) + a);
        memcpy(v[w], &r, sizeof r);
      }
    }
    int64_t left = n - e < 4 * VW ? n - e : 4 * VW;
    for (int64_t k = 0; k < left; k++) out[e + k] = v[k & 3][k >> 2];
  }
}

static const vl_vm_table VM(table) = {
    .name = VM_NAME,
    .unary = VM(unary),
    .binary = VM(binary),
    .softmax_row = VM(softmax_row),
    .softmax_bw_row = VM(softmax_bw_row),
    .sum_lanes = VM(sum_lanes),
    .sum_row = VM(sum_row),
    .ext_row = VM(ext_row),
    .ext_lanes = VM(ext_lanes),
    .ln_row = VM(ln_row),
    .ln_bw_row = VM(ln_bw_row),
    .philox_f32 = VM(philox_f32),
};

#undef VM_MAP1
#undef VM_MAP2
#undef VM_MAP2D
#undef VM_INL
#undef VM_FMAD
#undef VF
#undef VI
#undef VD
#undef VL
#undef VU
#undef VQ
#undef VM
#undef VM_CAT
#undef VM_CAT2
