/* kernels/cpu/cpu_vmath.h: vectorised f32 math for the CPU kernels' contiguous fast paths.
 *
 * exp, log, tanh, sigmoid, both GELUs and the activation backward formulas, erf, expm1, log1p,
 * sin, cos, remainder and atan2 (cpu_vmath_fns_impl.h), row reductions and layer norm rows
 * (cpu_vmath_rows_impl.h) as polynomial approximations and loops over GCC vector extensions
 * (cpu_vmath_impl.h and the two files it includes), compiled once per instruction
 * set: AVX-512 (16 lanes), AVX2 + FMA (8 lanes), both with fused multiply-adds, and a portable
 * one (4 lanes: SSE2 on x86-64, NEON on aarch64), picked once per process by the CPU's features
 * (cpu_vmath.c). Every element
 * goes through the same vector code, a run's tail too (padded into a vector), so a result does
 * not depend on where the elementwise iterator cuts a run: the same for any thread count.
 *
 * Accuracy against the double-precision formula evaluated at the same float input, the worst
 * case over every 61st float (tests/c/test_cpu_vmath.c; its default sweep takes every 4099th,
 * plus +-0, +-inf, NaN, subnormals and the breakpoints): exp 1.07 ulp, log 1.88, tanh 1.52,
 * sigmoid 2.30, GELU 3.05, tanh-GELU 1.79 (arguments of exp formed in double, so large negative
 * inputs keep their relative accuracy down to the subnormals), the GELU gradient 3.74 and the
 * tanh-GELU gradient 1.82 ulp of the larger of its two terms (they cancel where it crosses 0);
 * erf 0.83, expm1 0.50, log1p 0.50, sin 0.50, cos 0.50 and atan2 0.48 ulp (double lanes, one
 * rounding: these agree with the scalar path's double libm rounded to float but for near-ties);
 * remainder bitwise.
 * Infinities and NaNs come out as the double formula gives them. The instances may differ from
 * each other in the last bits (lane counts, fused or separate multiply-adds).
 *
 * Ops these functions do not take return false, and the caller uses its scalar path. */
#ifndef VL_CPU_VMATH_H
#define VL_CPU_VMATH_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/kernels.h"

/* o[i] = op(x[i]) for VL_UN_EXP, LOG, TANH, SIGMOID, GELU, GELU_TANH, ERF, EXPM1, LOG1P, SIN, COS,
 * and, bitwise the scalar path's: NEG, ABS, SQUARE, RELU, SIGN, RECIPROCAL, SQRT, RSQRT, ROUND,
 * FLOOR, CEIL, TRUNC. */
bool vl_vm_unary_f32(vl_unary_op op, float *o, const float *x, int64_t n);

/* o[i] = a[i] op b[i] (b_stride 1) or a[i] op b[0] (b_stride 0), for ADD, SUB (a + alpha b,
 * a - alpha b), MUL, DIV, MAXIMUM, MINIMUM, REMAINDER, ATAN2 and the activation backward ops (a
 * the gradient, b the saved input or output). `rev` computes b op a (binary_scalar's reversed
 * form). ADD, SUB, MUL, DIV, MAXIMUM, MINIMUM, REMAINDER, RELU/TANH/SIGMOID_BACKWARD give bitwise
 * the scalar path's result:
 * float arithmetic where that equals the double-then-round one (alpha 1, b a float), double
 * lanes otherwise. `bd` is b[0] as a double for b_stride 0 (a scalar never rounded to float). */
bool vl_vm_binary_f32(vl_binary_op op, float *o, const float *a, const float *b, int64_t b_stride,
                      double bd, double alpha, bool rev, int64_t n);

/* One contiguous f32 row of (log-)softmax: max, exp(x - max) once per element, the sum in
 * double (in a fixed order that depends on len only), a NaN anywhere makes the row NaN. */
void vl_vm_softmax_row_f32(const float *x, float *y, int64_t len, bool log_out);

/* One contiguous f32 row of the softmax backward from the output y and its gradient g:
 * dx = y (g - sum(g y)), or for log-softmax dx = g - exp(y) sum(g); sums in double. */
void vl_vm_softmax_bw_row_f32(const float *y, const float *g, float *dx, int64_t len, bool log_out);

/* acc[j] += sum over l < len of x[l * ld + j], j < w, in double, l in order (the "lanes" shape
 * of a reduction over a middle dim: a bias gradient). */
void vl_vm_sum_lanes_f32(const float *x, int64_t ld, int64_t len, int64_t w, double *acc);

/* The sum of a contiguous f32 row in double: four vector accumulators in a fixed order that
 * depends on n only (a row is never split between threads). */
double vl_vm_sum_row_f32(const float *x, int64_t n);

/* The first maximum (max) or minimum of a contiguous f32 row, or its first NaN, and its position
 * (0 for an empty row, whose value is -inf / +inf): the scalar scan's answer. n < 2^31. */
void vl_vm_ext_row_f32(const float *x, int64_t n, bool max, double *val, int64_t *idx);

/* The same over a middle dim: val[j], idx[j] of x[l * ld + j] over l < len, j < w; len < 2^31. */
void vl_vm_ext_lanes_f32(const float *x, int64_t ld, int64_t len, int64_t w, bool max, double *val, int64_t *idx);

/* One f32 layer norm row (n > 0): y = ((x - mean) rstd) w + b in double, rounded once; mean and
 * rstd = 1 / sqrt(var + eps) (biased variance, two passes) returned in double. */
void vl_vm_layernorm_row_f32(const float *x, float *y, int64_t n, const double *w, const double *b, double eps,
                             double *mean, double *rstd);

/* One f32 layer norm backward row: dx from dy (g), x and the saved mean / rstd; dw += dy xhat,
 * db += dy (double, per column). */
void vl_vm_layernorm_bw_row_f32(const float *x, const float *g, float *dx, int64_t n, double mean, double rstd,
                                const double *w, double *dw, double *db);

/* Elements [4 g0, 4 g0 + n) of an f32 uniform (a + (b - a) u) or bernoulli (u < a) draw from the
 * Philox stream of runtime/core/philox.h (key seed, group g at counter first + g, 23-bit
 * uniforms), into out[0..n): bit for bit the scalar mapping, VW groups at a time. */
void vl_vm_philox_f32(uint64_t seed, uint64_t first, int64_t g0, int64_t n, vl_rand_kind kind, double a, double b,
                      float *out);

/* The instance in use ("avx512", "avx2" or "generic"). For tests and benchmarks: use the named
 * instance (NULL: the best this CPU runs); false if this CPU cannot run it. Not to be called
 * while ops run. */
const char *vl_vm_isa(void);
bool vl_vm_select(const char *name);

#endif
