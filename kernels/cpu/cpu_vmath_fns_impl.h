/* kernels/cpu/cpu_vmath_fns_impl.h: part of cpu_vmath_impl.h (included by it, once per
 * instance, with its macros and helpers in scope; no include guard): the f32 erf, expm1, log1p,
 * remainder, atan2, sin and cos of the elementwise fast paths. */

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

/* Python's a % b of floats (the divisor's sign), bitwise the scalar formula (vl_f_remainder:
 * fmod, then + b where the signs differ). Where |a| < 2^23 |b| (b finite, nonzero), the quotient
 * q = trunc(a / b) of the double division is the exact one (a / b is at least 2^-24 of b away
 * from an integer unless it is one, far more than the division's rounding), q b is exact in
 * double (24 + 24 bits) and so is a - q b, the float fmod; adding b where the signs differ is
 * exact too (a multiple of b's ulp below |b|). Other lanes (NaN, inf, 0, huge quotients) take
 * the scalar formula. 47 ms -> ~2 ms for 2M floats. */
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
    VF r = VM(rem1)(a, b);
    if (!all) /* lane by lane, so that an element's result never depends on its neighbours */
      for (int j = 0; j < VW; j++)
        if (!ok[j]) r[j] = (float)vl_f_remainder(a[j], b[j]);
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
  /* sums of floats: exact; a double division (drecip's float reciprocal overflows for
   * subnormal operands) */
  VD t = VM(dsel)(big, lod - hid, lod) / VM(dsel)(big, lod + hid, hid);
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
    VF r = VM(atan2_1)(a, b);
    if (!all) /* zeros, infinities, NaNs: libm's special cases, lane by lane (as remainder) */
      for (int j = 0; j < VW; j++)
        if (!ok[j]) r[j] = (float)vl_f_atan2(a[j], b[j]);
    if (m == VW) VM(st)(o + i, r);
    else VM(stn)(o + i, r, m);
  }
}

/* sin and cos of floats: n = round(x 2/pi) and r = x - n pi/2 in double (pi/2 in three parts:
 * |r| <= pi/4 to ~1e-16), the Taylor series of sin r to r^15 and of cos r to r^16 (the
 * first terms left out are below 1e-13), the quadrant's choice and sign, one rounding. Lanes
 * with |x| >= 2^16 (Cody-Waite's reduction would lose bits), infinities and NaNs take the scalar
 * formula (libm), lane by lane. */
VM_INL VF VM(vsincos)(VF x, bool cosine) {
  VD xd = VM(widen)(x);
  VD k = VM_FMAD(xd, VM(splatd)(0.63661977236758134), 6755399441055744.0); /* 1.5 2^52: rounds */
  VL q = (VL)k + (cosine ? 1 : 0);                                      /* n (+1 for cos) mod 4 */
  VD n = k - 6755399441055744.0;
  /* pi/2 = P1 + P2 + P3, P1 and P2 of 33 bits: n P1 and n P2 are exact for |n| < 2^20, with or
   * without fused multiply-adds (the generic instance has none) */
  VD r = (xd - n * 1.5707963267341256) - n * 6.077100506303966e-11;
  r = VM(fmad)(n, VM(splatd)(-2.0222662487959506e-21), r);
  VD z = r * r;
  VD ps = VM_FMAD(z, VM(splatd)(-7.647163731819816e-13), 1.6059043836821613e-10);
  ps = VM_FMAD(ps, z, -2.505210838544172e-08);
  ps = VM_FMAD(ps, z, 2.7557319223985893e-06);
  ps = VM_FMAD(ps, z, -0.0001984126984126984);
  ps = VM_FMAD(ps, z, 0.008333333333333333);
  ps = VM_FMAD(ps, z, -0.16666666666666666);
  VD sn = VM(fmad)(r * z, ps, r);
  VD pc = VM_FMAD(z, VM(splatd)(4.779477332387385e-14), -1.1470745597729725e-11);
  pc = VM_FMAD(pc, z, 2.08767569878681e-09);
  pc = VM_FMAD(pc, z, -2.755731922398589e-07);
  pc = VM_FMAD(pc, z, 2.48015873015873e-05);
  pc = VM_FMAD(pc, z, -0.001388888888888889);
  pc = VM_FMAD(pc, z, 0.041666666666666664);
  VD cs = VM(fmad)(z * z, pc, 1.0 - z * 0.5); /* 1 - z/2 rounds once: below 2^-54 of cos r >= 0.7 */
  VL odd = -(q & 1);
  VD res = (VD)(((VL)cs & odd) | ((VL)sn & ~odd));
  res = (VD)((VL)res ^ ((q & 2) << 62)); /* quadrants 2 and 3: negated */
  VF out = VM(narrow)(res);
  return cosine ? out : VM(sel)(x == 0.0f, x, out); /* sin(-0) = -0 */
}

static VM_ATTR void VM(sincos_map)(float *o, const float *x, int64_t n, bool cosine) {
  for (int64_t i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VF v = m == VW ? VM(ld)(x + i) : VM(ldn)(x + i, m, 0.0f);
    VF r = VM(vsincos)(VM(sel)(VM(vabs)(v) < 65536.0f, v, VM(splat)(0.0f)), cosine);
    VI far = ~(VM(vabs)(v) < 65536.0f); /* and NaN */
    bool any = false;
    for (int j = 0; j < VW; j++) any = any || far[j];
    if (any)
      for (int j = 0; j < VW; j++)
        if (far[j]) r[j] = (float)(cosine ? cos((double)v[j]) : sin((double)v[j]));
    if (m == VW) VM(st)(o + i, r);
    else VM(stn)(o + i, r, m);
  }
}
