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

/* ---- erf, expm1, log1p ----
 * Each in double lanes where float would lose bits to cancellation, rounded once at the end
 * (the scalar path is the double libm function rounded to float: this stays within ~1 ulp of
 * it; libm per element cost 12 ns, 25x exp's vector code). */

/* 1 / d for d in double lanes: the float quotient refined by one Newton step (~2^-48). */
VM_INL VD VM(drecip)(VD d) {
  VD q = VM(widen)(1.0f / VM(narrow)(d));
  return q * (2.0 - d * q);
}

/* erf(x): for |x| < 1 its Taylor series x P(x^2) to x^23 in double (the first term left out is
 * below 1e-10 of the result), else 1 - erfc(|x|) from GELU's erfc (relative accuracy; erfc <=
 * 0.16 there, so the subtraction adds at most a fraction of an ulp), the sign copied. */
VM_INL VF VM(verf)(VF x) {
  VF t = VM(minc)(VM(vabs)(x), 10.0f); /* erf is 1 in float beyond 4 */
  VD td = VM(widen)(t), z = td * td;
  /* 2 / sqrt(pi) (-1)^k / (k! (2k + 1)), k = 11..0, as literals: a constant from an array
   * became a splat built through the stack (a store-forwarding stall per lane, 30x slower) */
  VD q = VM_FMAD(z, VM(splatd)(-1.2290555301717926e-09), 1.4807192815879218e-08);
  q = VM_FMAD(q, z, -1.6365844691234924e-07);
  q = VM_FMAD(q, z, 1.6462114365889246e-06);
  q = VM_FMAD(q, z, -1.492565035840625e-05);
  q = VM_FMAD(q, z, 0.00012055332981789664);
  q = VM_FMAD(q, z, -0.0008548327023450852);
  q = VM_FMAD(q, z, 0.005223977625442188);
  q = VM_FMAD(q, z, -0.026866170645131252);
  q = VM_FMAD(q, z, 0.11283791670955126);
  q = VM_FMAD(q, z, -0.37612638903183754);
  q = VM_FMAD(q, z, 1.1283791670955126);
  VF small = VM(narrow)(td * q);
  /* erfc(t) = GELU's erfc(|y| / sqrt 2) at y = t sqrt 2, times 2^32 */
  VF big = 1.0f - VM(verfc_d)(td * 1.4142135623730951) * 0x1p-32f;
  VF r = VM(sel)(t < 1.0f, small, big);
  return (VF)((VI)r | VM(vsignbit)(x));
}

/* expm1(x) = 2^n (expm1(r) + 1) - 1 = 2^n expm1(r) + (2^n - 1), n = round(x / ln 2), r = x - n ln 2
 * (|r| <= 0.35, its Taylor series to r^13 in double), all in double: no cancellation, one
 * rounding. -0 stays -0. */
VM_INL VF VM(vexpm1)(VF x) {
  const float magic = 12582912.0f;
  VF xc = VM(maxc)(VM(minc)(x, 89.0f), -30.0f); /* expm1 is -1 / inf in float beyond */
  VF kf = VM_FMA(xc, VM(splat)(1.442695041e+00f), VM(splat)(magic));
  VI ki = (VI)kf - (VI)VM(splat)(magic);
  VD xd = VM(widen)(xc), nd = VM(widen)(kf - magic);
  VD r = VM(fmad)(nd, VM(splatd)(-0.69314718055994529), xd); /* ln 2 in two parts */
  r = VM(fmad)(nd, VM(splatd)(-2.3190468138462996e-17), r);
  VD q = VM_FMAD(r, VM(splatd)(1.0 / 6227020800.0), 1.0 / 479001600.0); /* 1/13!, 1/12!, ..., 1/2 */
  q = VM_FMAD(q, r, 1.0 / 39916800.0);
  q = VM_FMAD(q, r, 1.0 / 3628800.0);
  q = VM_FMAD(q, r, 1.0 / 362880.0);
  q = VM_FMAD(q, r, 1.0 / 40320.0);
  q = VM_FMAD(q, r, 1.0 / 5040.0);
  q = VM_FMAD(q, r, 1.0 / 720.0);
  q = VM_FMAD(q, r, 1.0 / 120.0);
  q = VM_FMAD(q, r, 1.0 / 24.0);
  q = VM_FMAD(q, r, 1.0 / 6.0);
  q = VM_FMAD(q, r, 1.0 / 2.0);
  VD em = VM(fmad)(q, r * r, r); /* expm1(r) = r + r^2 (1/2 + r/6 + ...) */
  VL kl = __builtin_convertvector(ki, VL);
  VD sc = (VD)((kl + 1023) << 52); /* 2^n, n in [-44, 129]: a normal double */
  VF res = VM(narrow)(VM(fmad)(sc, em, sc - 1.0));
  return VM(sel)(x == 0.0f, x, VM(sel)(x != x, x, res));
}

/* log1p(x) = k ln 2 + log(m) + c / u, u = 1 + x in double = 2^k m (m in [sqrt 1/2, sqrt 2)),
 * c = x - (u - 1) the rounding error of u (it matters for tiny x), log m = 2s + s^3 P(s^2) with
 * s = (m - 1) / (m + 1), |s| < 0.172, to s^23 in double. The domain's edges as libm's. */
VM_INL VF VM(vlog1p)(VF x) {
  VF xs = VM(sel)(x > -1.0f, x, VM(splat)(0.0f)); /* the others are replaced below */
  xs = VM(minc)(xs, 0x1.fffffep+127f);             /* +inf: replaced below */
  VD xd = VM(widen)(xs), u = xd + 1.0;
  VD c = xd - (u - 1.0); /* exact: u - 1 is */
  VL t = (VL)u - (VL)VM(splatd)(0.70710678118654752);
  VL k = t >> 52;
  VD m = (VD)((t & 0x000fffffffffffffLL) + (VL)VM(splatd)(0.70710678118654752));
  VD f = m - 1.0;
  VD s = f * VM(drecip)(f + 2.0), z = s * s;
  VD q = VM_FMAD(z, VM(splatd)(2.0 / 23), 2.0 / 21); /* 2 / (2j + 3), j = 10..0 */
  q = VM_FMAD(q, z, 2.0 / 19);
  q = VM_FMAD(q, z, 2.0 / 17);
  q = VM_FMAD(q, z, 2.0 / 15);
  q = VM_FMAD(q, z, 2.0 / 13);
  q = VM_FMAD(q, z, 2.0 / 11);
  q = VM_FMAD(q, z, 2.0 / 9);
  q = VM_FMAD(q, z, 2.0 / 7);
  q = VM_FMAD(q, z, 2.0 / 5);
  q = VM_FMAD(q, z, 2.0 / 3);
  VD lm = VM(fmad)(s * z, q, s + s);
  VD kd = __builtin_convertvector(__builtin_convertvector(k, VI), VD);
  VD r = VM(fmad)(kd, VM(splatd)(2.3190468138462996e-17), lm + c * VM(drecip)(u));
  r = VM(fmad)(kd, VM(splatd)(0.69314718055994529), r);
  VF res = VM(narrow)(r);
  res = VM(sel)(x == __builtin_inff(), x, res);
  res = VM(sel)(x == -1.0f, VM(splat)(-__builtin_inff()), res);
  res = VM(sel)(x < -1.0f, VM(splat)(__builtin_nanf("")), res);
  res = VM(sel)(x == 0.0f, x, res);
  return VM(sel)(x != x, x, res);
}

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

/* Python's a % b of floats (the divisor's sign), bitwise the scalar formula (vl_f_remainder:
 * fmod, then + b where the signs differ). Where |a| < 2^23 |b| (b finite, nonzero), the quotient
 * q = trunc(a / b) of the double division is the exact one (a / b is at least 2^-24 of b away
 * from an integer unless it is one, far more than the division's rounding), q b is exact in
 * double (24 + 24 bits) and so is a - q b, the float fmod; adding b where the signs differ is
 * exact too (a multiple of b's ulp below |b|). A vector with any other lane (NaN, inf, 0, huge
 * quotients) goes through the scalar formula. 47 ms -> ~2 ms for 2M floats. */
VM_INL VF VM(rem1)(VF a, VF b) {
  VD ad = VM(widen)(a), bd = VM(widen)(b);
  VI qi = __builtin_convertvector(ad / bd, VI); /* truncates; |q| < 2^23 */
  VF m = VM(narrow)(ad - __builtin_convertvector(qi, VD) * bd);
  VI fix = (m != 0.0f) & ((b < 0.0f) ^ (m < 0.0f));
  m = VM(sel)(fix, m + b, m);
  return VM(sel)(m == 0.0f, (VF)VM(vsignbit)(a), m); /* fmod's zero has a's sign */
}

static VM_ATTR void VM(remainder)(float *o, const float *pa, const float *pb, VF bs, bool rev, int64_t n) {
  for (int64_t i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VF a = m == VW ? VM(ld)(pa + i) : VM(ldn)(pa + i, m, 1.0f);
    VF b = pb ? (m == VW ? VM(ld)(pb + i) : VM(ldn)(pb + i, m, 1.0f)) : bs;
    if (rev) {
      VF t = a;
      a = b;
      b = t;
    }
    VF ab = VM(vabs)(b);
    VI ok = (VM(vabs)(a) < ab * 0x1p23f) & (ab <= 0x1.fffffep+127f) & (ab > 0.0f);
    bool all = true;
    for (int j = 0; j < VW; j++) all = all && ok[j];
    VF r;
    if (all) {
      r = VM(rem1)(a, b);
    } else {
      for (int j = 0; j < VW; j++) r[j] = (float)vl_f_remainder(a[j], b[j]);
    }
    if (m == VW) VM(st)(o + i, r);
    else VM(stn)(o + i, r, m);
  }
}

/* atan2(y, x) for finite nonzero y and x, in double lanes: t = min(|y|, |x|) / max(|y|, |x|) in
 * [0, 1], reduced to [-tan(pi/8), tan(pi/8)] by (t - 1) / (t + 1) + pi/4 above (one division: the
 * numerator and denominator are chosen first), atan's Taylor series to t^25 (the first term
 * left out is below 5e-12), then the octant: pi/2 - r where |y| > |x|, pi - r where x < 0, y's
 * sign. One rounding to float at the end (<= 0.5 ulp of the double result). */
VM_INL VD VM(dsel)(VI m, VD a, VD b) {
  VL ml = __builtin_convertvector(m, VL); /* 0 or -1 per lane */
  return (VD)(((VL)a & ml) | ((VL)b & ~ml));
}

VM_INL VF VM(atan2_1)(VF y, VF x) {
  VF ay = VM(vabs)(y), ax = VM(vabs)(x);
  VI swap = ay > ax;
  VF lo = VM(sel)(swap, ax, ay), hi = VM(sel)(swap, ay, ax);
  VI big = lo > hi * 0.41421356f;
  VD lod = VM(widen)(lo), hid = VM(widen)(hi);
  /* sums of floats: exact; the reciprocal to ~2^-48 (a double division cost a third of the time) */
  VD t = VM(dsel)(big, lod - hid, lod) * VM(drecip)(VM(dsel)(big, lod + hid, hid));
  VD z = t * t;
  VD q = VM_FMAD(z, VM(splatd)(1.0 / 25), -1.0 / 23); /* (-1)^k / (2k + 1), k = 12..0 */
  q = VM_FMAD(q, z, 1.0 / 21);
  q = VM_FMAD(q, z, -1.0 / 19);
  q = VM_FMAD(q, z, 1.0 / 17);
  q = VM_FMAD(q, z, -1.0 / 15);
  q = VM_FMAD(q, z, 1.0 / 13);
  q = VM_FMAD(q, z, -1.0 / 11);
  q = VM_FMAD(q, z, 1.0 / 9);
  q = VM_FMAD(q, z, -1.0 / 7);
  q = VM_FMAD(q, z, 1.0 / 5);
  q = VM_FMAD(q, z, -1.0 / 3);
  VD r = VM(fmad)(t * z, q, t);
  r = VM(dsel)(big, r + 0.78539816339744831, r);
  r = VM(dsel)(swap, 1.5707963267948966 - r, r);
  r = VM(dsel)(x < 0.0f, 3.1415926535897931 - r, r);
  return (VF)((VI)VM(narrow)(r) | VM(vsignbit)(y));
}

static VM_ATTR void VM(atan2v)(float *o, const float *pa, const float *pb, VF bs, bool rev, int64_t n) {
  for (int64_t i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VF a = m == VW ? VM(ld)(pa + i) : VM(ldn)(pa + i, m, 1.0f);
    VF b = pb ? (m == VW ? VM(ld)(pb + i) : VM(ldn)(pb + i, m, 1.0f)) : bs;
    if (rev) {
      VF t = a;
      a = b;
      b = t;
    }
    VF aa = VM(vabs)(a), ab = VM(vabs)(b);
    VI ok = (aa > 0.0f) & (aa <= 0x1.fffffep+127f) & (ab > 0.0f) & (ab <= 0x1.fffffep+127f);
    bool all = true;
    for (int j = 0; j < VW; j++) all = all && ok[j];
    VF r;
    if (all) {
      r = VM(atan2_1)(a, b);
    } else { /* zeros, infinities, NaNs: libm's special cases */
      for (int j = 0; j < VW; j++) r[j] = (float)vl_f_atan2(a[j], b[j]);
    }
    if (m == VW) VM(st)(o + i, r);
    else VM(stn)(o + i, r, m);
  }
}

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

static VM_ATTR void VM(sum_lanes)(const float *x, int64_t ld, int64_t len, int64_t w, double *acc) {
  int64_t j = 0;
  for (; j + VW <= w; j += VW) {
    VD a;
    memcpy(&a, acc + j, sizeof a);
    for (int64_t l = 0; l < len; l++) a += VM(widen)(VM(ld)(x + l * ld + j));
    memcpy(acc + j, &a, sizeof a);
  }
  for (; j < w; j++) {
    double a = acc[j];
    for (int64_t l = 0; l < len; l++) a += x[l * ld + j];
    acc[j] = a;
  }
}

/* ---- row reductions and layer norm rows ---- */
/* Four double accumulators of VW lanes each (independent add chains: a single one was bound by
 * the add latency, 10x slower than PyTorch's sum over the last dim), the tail padded with
 * zeros, then joined in a fixed order: the result depends on n and the instance only. */
VM_INL double VM(sum_row_d)(const float *x, int64_t n) {
  VD a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  int64_t i = 0;
  for (; i + 4 * VW <= n; i += 4 * VW) {
    a0 += VM(widen)(VM(ld)(x + i));
    a1 += VM(widen)(VM(ld)(x + i + VW));
    a2 += VM(widen)(VM(ld)(x + i + 2 * VW));
    a3 += VM(widen)(VM(ld)(x + i + 3 * VW));
  }
  for (; i + VW <= n; i += VW) a0 += VM(widen)(VM(ld)(x + i));
  if (i < n) a1 += VM(widen)(VM(ldn)(x + i, n - i, 0.0f));
  return VM(hsum)((a0 + a1) + (a2 + a3));
}

static VM_ATTR double VM(sum_row)(const float *x, int64_t n) { return VM(sum_row_d)(x, n); }

/* The first maximum (or minimum) of a row and its position; the first NaN wins over any number.
 * Each lane keeps its own first extremum (strictly better replaces; a NaN sticks) with its
 * position; the row's answer is then the smallest position among the lanes holding a NaN, or
 * else among those equal to the best value: the first one in row order, as the scalar scan.
 * Positions are int32 lanes: the caller keeps rows of 2^31 elements and more on its scalar
 * path. */
static VM_ATTR void VM(ext_row)(const float *x, int64_t n, bool max, double *val, int64_t *idx) {
  const float init = max ? -__builtin_inff() : __builtin_inff();
  VF acc = VM(splat)(init);
  VI pos = {0}, best = {0};
  for (int j = 0; j < VW; j++) pos[j] = j;
  int64_t i = 0;
  for (; i < n; i += VW) {
    VF v = i + VW <= n ? VM(ld)(x + i) : VM(ldn)(x + i, n - i, init); /* padding never wins */
    VI up = (acc == acc) & ((v != v) | (max ? v > acc : v < acc));
    acc = VM(sel)(up, v, acc);
    best = (up & pos) | (~up & best);
    pos += VW;
  }
  int nan = 0;
  for (int j = 0; j < VW; j++) nan |= acc[j] != acc[j];
  float b = init;
  if (!nan)
    for (int j = 0; j < VW; j++) b = max ? (acc[j] > b ? acc[j] : b) : (acc[j] < b ? acc[j] : b);
  int64_t bi = INT64_MAX;
  float bv = init;
  for (int j = 0; j < VW; j++) {
    bool hit = nan ? acc[j] != acc[j] : acc[j] == b;
    if (hit && best[j] < bi) bi = best[j], bv = acc[j];
  }
  *val = bv;
  *idx = bi == INT64_MAX ? 0 : bi;
}

/* Column extrema over a middle dim: acc[j] / idx[j] for j < w take the first extremum (first
 * NaN) of x[l * ld + j] over l < len, float lanes across j, positions as int32 (len < 2^31). */
static VM_ATTR void VM(ext_lanes)(const float *x, int64_t ld, int64_t len, int64_t w, bool max, double *val,
                                  int64_t *idx) {
  const float init = max ? -__builtin_inff() : __builtin_inff();
  for (int64_t j0 = 0; j0 < w; j0 += VW) {
    int64_t m = w - j0 < VW ? w - j0 : VW;
    VF acc = VM(splat)(init);
    VI best = {0}, pos = {0};
    for (int64_t l = 0; l < len; l++) {
      const float *p = x + l * ld + j0;
      VF v = m == VW ? VM(ld)(p) : VM(ldn)(p, m, init);
      VI up = (acc == acc) & ((v != v) | (max ? v > acc : v < acc));
      acc = VM(sel)(up, v, acc);
      best = (up & pos) | (~up & best);
      pos += 1;
    }
    for (int64_t j = 0; j < m; j++) {
      val[j0 + j] = acc[j];
      idx[j0 + j] = best[j];
    }
  }
}

/* One f32 layer norm row: the mean, then the sum of squared deviations from it (two passes over a
 * cache-resident row, both in double lanes), y = ((x - mean) rstd) w + b in double, rounded once:
 * the scalar path's formula. */
static VM_ATTR void VM(ln_row)(const float *x, float *y, int64_t n, const double *w, const double *b, double eps,
                               double *mean_out, double *rstd_out) {
  double mean = VM(sum_row_d)(x, n) / (double)n;
  VD md = VM(splatd)(mean), v0 = {0}, v1 = {0};
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    VD d0 = VM(widen)(VM(ld)(x + i)) - md, d1 = VM(widen)(VM(ld)(x + i + VW)) - md;
    v0 += d0 * d0;
    v1 += d1 * d1;
  }
  for (; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VF xf = m == VW ? VM(ld)(x + i) : VM(ldn)(x + i, m, (float)mean);
    VD d = VM(widen)(xf) - md;
    if (m < VW) /* the padding's deviation is mean - (float)mean: drop it */
      for (int64_t j = m; j < VW; j++) d[j] = 0.0;
    v0 += d * d;
  }
  double rstd = 1.0 / sqrt(VM(hsum)(v0 + v1) / (double)n + eps);
  VD rd = VM(splatd)(rstd);
  for (i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VD wd, bd;
    if (m == VW) {
      memcpy(&wd, w + i, sizeof wd);
      memcpy(&bd, b + i, sizeof bd);
      VM(st)(y + i, VM(narrow)(((VM(widen)(VM(ld)(x + i)) - md) * rd) * wd + bd));
    } else {
      wd = bd = VM(splatd)(0.0);
      memcpy(&wd, w + i, (size_t)m * sizeof(double));
      memcpy(&bd, b + i, (size_t)m * sizeof(double));
      VF r = VM(narrow)(((VM(widen)(VM(ldn)(x + i, m, 0.0f)) - md) * rd) * wd + bd);
      VM(stn)(y + i, r, m);
    }
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

/* One f32 layer norm backward row, in double lanes: xh = (x - mean) rstd, gw = dy w;
 * dw += dy xh, db += dy; dx = rstd (gw - mean(gw) - xh mean(gw xh)). xh and gw are recomputed
 * in the second pass rather than stored (the same values: the same operations). */
static VM_ATTR void VM(ln_bw_row)(const float *x, const float *g, float *dx, int64_t n, double mean, double rstd,
                                  const double *w, double *dw, double *db) {
  VD md = VM(splatd)(mean), rd = VM(splatd)(rstd), s1 = {0}, s2 = {0};
  for (int64_t i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VD wd = VM(splatd)(0.0), dwd = wd, dbd = wd;
    memcpy(&wd, w + i, (size_t)m * sizeof(double));
    memcpy(&dwd, dw + i, (size_t)m * sizeof(double));
    memcpy(&dbd, db + i, (size_t)m * sizeof(double));
    VD xh = (VM(widen)(m == VW ? VM(ld)(x + i) : VM(ldn)(x + i, m, 0.0f)) - md) * rd;
    VD gd = VM(widen)(m == VW ? VM(ld)(g + i) : VM(ldn)(g + i, m, 0.0f)); /* 0 in the padding */
    dwd += gd * xh;
    dbd += gd;
    memcpy(dw + i, &dwd, (size_t)m * sizeof(double));
    memcpy(db + i, &dbd, (size_t)m * sizeof(double));
    VD gw = gd * wd;
    s1 += gw;
    s2 += gw * xh;
  }
  double m1 = VM(hsum)(s1) / (double)n, m2 = VM(hsum)(s2) / (double)n;
  VD m1d = VM(splatd)(m1), m2d = VM(splatd)(m2);
  for (int64_t i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VD wd = VM(splatd)(0.0);
    memcpy(&wd, w + i, (size_t)m * sizeof(double));
    VD xh = (VM(widen)(m == VW ? VM(ld)(x + i) : VM(ldn)(x + i, m, 0.0f)) - md) * rd;
    VD gw = VM(widen)(m == VW ? VM(ld)(g + i) : VM(ldn)(g + i, m, 0.0f)) * wd;
    VF r = VM(narrow)(rd * ((gw - m1d) - xh * m2d));
    if (m == VW) VM(st)(dx + i, r);
    else VM(stn)(dx + i, r, m);
  }
}

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
