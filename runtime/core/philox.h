/* runtime/core/philox.h: the Philox4x32-10 counter-based generator and the exact mapping from
 * (seed, offset, element index) to a random value. Header-only and compiled by both the C
 * compiler (kernels/cpu) and nvcc (kernels/cuda), so CPU and CUDA draw the same numbers.
 *
 * The stream: group g of a call uses counter = offset + g (c0 = low 32 bits, c1 = high, c2 = c3
 * = 0) and key = seed (k0 low, k1 high); one Philox block gives 4 words x0..x3.
 *   f32/f16/bf16 (and BERNOULLI of any dtype): element i = 4g + j takes word j.
 *     uniform u = ((x >> (32 - b)) + 0.5) * 2^-b with b = 23 (f32, and bernoulli), 10 (f16) or
 *     7 (bf16): u = (2k + 1) * 2^-(b+1) is exactly representable in the output dtype, so the
 *     uniforms stay inside the open (0, 1) after rounding. (With b one larger, the top value
 *     1 - 2^-(b+1) is halfway between the dtype's last number below 1 and 1, and rounds to 1.)
 *     normal: words (x0, x1) give elements 4g, 4g+1 and (x2, x3) give 4g+2, 4g+3 by Box-Muller:
 *       r = sqrt(-2 ln u(x_even)), z_even = r cos(2 pi u(x_odd)), z_odd = r sin(2 pi u(x_odd)),
 *       with b = 23 whatever the dtype.
 *   f64: element i = 2g + j takes words (x_2j, x_2j+1) as 52 bits: u = (v + 0.5) * 2^-52 (exact);
 *     normal: elements 2g, 2g+1 from u1 = u(x0, x1), u2 = u(x2, x3) by Box-Muller as above.
 * Box-Muller is evaluated in double on both devices, then rounded to the output dtype, so CPU
 * and CUDA results agree to the last bit for uniforms and to within an ulp of the transcendental
 * functions for normals. A call consumes vl_philox_groups(dtype, numel) counters.
 *   exponential (exponential_): -log(u), u as the uniform above with b = 23 (4 per group), or
 *     the f64 u52 (2 per group), then divided by lambda; u < 1 so the value is never 0 or inf.
 *   int (randint, random_) of range r values from lo: r <= 2^32: element 4g + j takes word j,
 *     lo + floor(x_j * r / 2^32); r > 2^32: element 2g + j takes w = x_2j * 2^32 + x_2j+1 and
 *     gives lo + floor(w * r / 2^64). Integer arithmetic only, so both devices agree exactly; the
 *     bias (a value is drawn at most 1 + r / 2^32 (2^64) times as often as another) is below
 *     PyTorch's modulo draws'. */
#ifndef VL_PHILOX_H
#define VL_PHILOX_H

#include <math.h>
#include <stdint.h>

#if defined(__CUDACC__)
#define VL_HD __host__ __device__ __forceinline__
#else
#define VL_HD static inline
#endif

typedef struct vl_philox4 { uint32_t x[4]; } vl_philox4;

VL_HD uint32_t vl_mulhilo32(uint32_t a, uint32_t b, uint32_t *hi) {
  uint64_t p = (uint64_t)a * (uint64_t)b;
  *hi = (uint32_t)(p >> 32);
  return (uint32_t)p;
}

/* The block at the 128-bit counter (c01 low and high words, c2, c3); the random-number stream
 * above uses c2 = c3 = 0, runtime/core/sround.h the upper words for its step and tensor. */
VL_HD vl_philox4 vl_philox_ctr(uint64_t seed, uint64_t c01, uint32_t c2_, uint32_t c3_) {
  uint32_t c0 = (uint32_t)c01, c1 = (uint32_t)(c01 >> 32), c2 = c2_, c3 = c3_;
  uint32_t k0 = (uint32_t)seed, k1 = (uint32_t)(seed >> 32);
  for (int r = 0; r < 10; r++) {
    uint32_t hi0, hi1;
    uint32_t lo0 = vl_mulhilo32(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = vl_mulhilo32(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  vl_philox4 out;
  out.x[0] = c0; out.x[1] = c1; out.x[2] = c2; out.x[3] = c3;
  return out;
}

VL_HD vl_philox4 vl_philox(uint64_t seed, uint64_t counter) { return vl_philox_ctr(seed, counter, 0, 0); }

/* The uniform of one word at b bits of resolution (1 <= b <= 31): in (0, 1), exact in a dtype
 * whose numbers in [0.5, 1) are 2^-(b+1) apart. */
VL_HD double vl_ubits(uint32_t x, int bits) {
  return ((double)(x >> (32 - bits)) + 0.5) * (1.0 / (double)(1u << bits));
}
/* The f64 uniform of two words: 52 bits, exact in double. */
VL_HD double vl_u52(uint32_t hi, uint32_t lo) {
  uint64_t v = (((uint64_t)hi << 32) | lo) >> 12;
  return ((double)v + 0.5) * (1.0 / 4503599627370496.0);
}
#define VL_PHILOX_BITS 23 /* f32 uniforms, bernoulli draws and Box-Muller inputs */

/* Counters (groups) used by a call drawing numel values of a dtype; is_f64 selects the f64
 * mapping (2 elements per group) rather than 4. */
VL_HD uint64_t vl_philox_groups(int is_f64, int64_t numel) {
  int per = is_f64 ? 2 : 4;
  return (uint64_t)((numel + per - 1) / per);
}

/* The 4 (or 2 for f64) values of group g. kind: 0 uniform, 1 normal (Box-Muller), 2 bernoulli
 * uses uniform. Writes u/z as doubles; the caller scales and rounds to the dtype. */
VL_HD void vl_philox_group_uniform(uint64_t seed, uint64_t counter, int is_f64, int bits, double v[4]) {
  vl_philox4 p = vl_philox(seed, counter);
  if (is_f64) {
    v[0] = vl_u52(p.x[0], p.x[1]);
    v[1] = vl_u52(p.x[2], p.x[3]);
  } else {
    for (int j = 0; j < 4; j++) v[j] = vl_ubits(p.x[j], bits);
  }
}

VL_HD void vl_philox_group_normal(uint64_t seed, uint64_t counter, int is_f64, double v[4]) {
  const double two_pi = 6.283185307179586476925286766559;
  vl_philox4 p = vl_philox(seed, counter);
  if (is_f64) {
    double u1 = vl_u52(p.x[0], p.x[1]), u2 = vl_u52(p.x[2], p.x[3]);
    double r = sqrt(-2.0 * log(u1));
    v[0] = r * cos(two_pi * u2);
    v[1] = r * sin(two_pi * u2);
  } else {
    for (int j = 0; j < 4; j += 2) {
      double u1 = vl_ubits(p.x[j], VL_PHILOX_BITS), u2 = vl_ubits(p.x[j + 1], VL_PHILOX_BITS);
      double r = sqrt(-2.0 * log(u1));
      v[j] = r * cos(two_pi * u2);
      v[j + 1] = r * sin(two_pi * u2);
    }
  }
}

/* The 4 (2 when is_f64) exponential draws of rate 1 of group g. */
VL_HD void vl_philox_group_exponential(uint64_t seed, uint64_t counter, int is_f64, double v[4]) {
  vl_philox_group_uniform(seed, counter, is_f64, VL_PHILOX_BITS, v);
  for (int j = 0; j < (is_f64 ? 2 : 4); j++) v[j] = -log(v[j]);
}

/* The high 64 bits of a * b, in 32-bit pieces (no __int128 or __umul64hi: one expression for
 * both compilers). */
VL_HD uint64_t vl_mulhi64(uint64_t a, uint64_t b) {
  uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
}

/* The integers of group g in [lo, lo + range), range >= 1: 4 values (range <= 2^32) or 2. The sum
 * is taken in uint64 so that lo + offset wraps as the exact int64 result does. */
VL_HD void vl_philox_group_int(uint64_t seed, uint64_t counter, int64_t lo, uint64_t range, int64_t v[4]) {
  vl_philox4 p = vl_philox(seed, counter);
  if (range > ((uint64_t)1 << 32)) {
    for (int j = 0; j < 2; j++) {
      uint64_t w = ((uint64_t)p.x[2 * j] << 32) | p.x[2 * j + 1];
      v[j] = (int64_t)((uint64_t)lo + vl_mulhi64(w, range));
    }
  } else {
    for (int j = 0; j < 4; j++) v[j] = (int64_t)((uint64_t)lo + (((uint64_t)p.x[j] * range) >> 32));
  }
}

/* The Bernoulli draw of one word as an integer test: u = vl_ubits(x, VL_PHILOX_BITS) < p exactly
 * when (x >> (32 - VL_PHILOX_BITS)) < the returned threshold (the number of 23-bit values k with
 * (k + 0.5) 2^-23 < p, found with the same double expression as the draw), so fused kernels
 * (dropout) make bernoulli's decision without double arithmetic on the device. */
VL_HD uint32_t vl_philox_bernoulli_threshold(double p) {
  const uint32_t n = 1u << VL_PHILOX_BITS;
  if (!(p > 0)) return 0;
  if (p >= 1) return n;
  double k0 = p * (double)n - 0.5;
  uint32_t k = k0 <= 0 ? 0 : k0 >= (double)n ? n : (uint32_t)k0;
  while (k > 0 && ((double)(k - 1) + 0.5) * (1.0 / (double)n) >= p) k--;
  while (k < n && ((double)k + 0.5) * (1.0 / (double)n) < p) k++;
  return k;
}

#endif
