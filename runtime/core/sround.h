/* runtime/core/sround.h: stochastic rounding of an f32 value to f16 or bf16, the exact rule shared
 * by the CPU (kernels/cpu/cpu_optim.c) and CUDA (kernels/cuda/cuda_optim.cu) optimizer steps.
 * Header-only, compiled by the C compiler and by nvcc, so both give the same bits.
 *
 * Why: a half weight updated by round-to-nearest loses every update smaller than half its ulp
 * (bf16 keeps 8 significant bits: an SGD step under 1/512 of the weight rounds away, every
 * step), so pure-half training (AMP O3) stalls where f32 would still learn. Rounding up with
 * probability equal to the fraction of the ulp makes the stored weight right in expectation, and
 * small updates accumulate as they do in f32 (Gupta et al. 2015; Zamirai et al. 2020).
 *
 * The rule: let t and a be the half values next to x toward and away from zero (t = x when x is
 * representable); x rounds to a when u < (|x| - |t|) / (|a| - |t|), else to t, with u = r * 2^-24
 * from 24 random bits r. Every operation in that test is exact in f32 (|x| - |t| by Sterbenz,
 * |a| - |t| is a power of two), so the CPU and CUDA agree bit for bit. Non-finite x keeps its
 * round-to-nearest result; a finite x beyond the largest half saturates to the largest half or
 * infinity by the same test (|a| = inf gives probability 0).
 *
 * The random bits come from Philox (runtime/core/philox.h) at key `seed`, counter (element
 * index / 4, step, tensor index): word (element index mod 4), top 24 bits. So each step, tensor
 * and element draws its own number, the same on both devices and in a replayed CUDA graph (whose
 * step count is read on the device). */
#ifndef VL_SROUND_H
#define VL_SROUND_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "runtime/core/philox.h"

/* The value of a non-negative 16-bit float magnitude (sign bit clear): f16 or bf16. Exact. */
VL_HD float vl_half_mag_value(uint32_t mag, int bf16) {
  if (bf16) {
    uint32_t b = mag << 16;
    float f;
    memcpy(&f, &b, 4);
    return f;
  }
  const uint32_t e = mag >> 10, m = mag & 0x3ffu;
  if (e == 31) return m ? NAN : INFINITY;
  if (e == 0) return ldexpf((float)m, -24);
  return ldexpf((float)(m | 0x400u), (int)e - 25);
}

/* Stochastic rounding of x given rne, the round-to-nearest-even bits of x in the format (the
 * caller's own conversion: __float2half_rn on the GPU, vl_f64_to_half_bits on the host), and 24
 * random bits r. Returns the format's bits. */
VL_HD uint16_t vl_sround_bits(float x, uint16_t rne, int bf16, uint32_t r) {
  const float ax = fabsf(x);
  if (!(ax <= 3.402823466e+38f)) return rne; /* inf, NaN */
  const uint32_t sign = rne & 0x8000u, mag = rne & 0x7fffu;
  const float hv = vl_half_mag_value(mag, bf16);
  if (hv == ax) return rne;
  uint32_t tmag, amag;
  if (hv > ax) {
    amag = mag;
    tmag = mag - 1; /* mag > 0: hv > ax >= 0 */
  } else {
    tmag = mag;
    amag = mag + 1; /* the next magnitude up (the largest finite + 1 is infinity) */
  }
  const float tv = vl_half_mag_value(tmag, bf16), av = vl_half_mag_value(amag, bf16);
  const float frac = (ax - tv) / (av - tv);
  const float u = (float)(r & 0xffffffu) * 5.9604644775390625e-8f; /* 2^-24 */
  return (uint16_t)(sign | (u < frac ? amag : tmag));
}

/* The 24 random bits of element `e` of tensor `tensor` at step `step` under key `seed`. */
VL_HD uint32_t vl_sround_random(uint64_t seed, uint64_t step, uint32_t tensor, uint64_t e) {
  vl_philox4 b = vl_philox_ctr(seed, e >> 2, (uint32_t)step, tensor);
  return b.x[e & 3] >> 8;
}

#endif
