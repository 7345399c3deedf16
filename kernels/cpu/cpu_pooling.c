/* kernels/cpu/cpu_pooling.c: 2-D max / average / adaptive-average pooling on the CPU and their
 * backward. Straightforward loops in double (the reference for the CUDA kernels), layout-generic
 * through element strides, so NCHW and NHWC share one code path.
 *
 * Window rules (PyTorch's):
 *  - max: rows p*sh - ph + i*dh (i < kh), out-of-range positions skipped (as -inf padding); the
 *    first maximum wins, a NaN replaces the maximum (so NaN propagates; the last NaN's index);
 *    the argmax is the chosen cell's window offset i*kw + j (runtime/backend/nn_kernels.h), initially the
 *    window's first in-range cell, none when no cell is in range.
 *  - avg: [p*sh - ph, min(p*sh - ph + kh, H + ph)) clipped to [0, H); divisor = the unclipped
 *    size when count_include_pad, else the clipped size.
 *  - adaptive avg: [floor(p*H/P), ceil((p+1)*H/P)). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "runtime/backend/nn_kernels.h"

typedef struct strides {
  int64_t n, c, h, w;
} strides;

static strides layout(bool nhwc, int64_t c, int64_t h, int64_t w) {
  strides s;
  if (nhwc) {
    s.c = 1;
    s.w = c;
    s.h = w * c;
    s.n = h * w * c;
  } else {
    s.w = 1;
    s.h = w;
    s.c = h * w;
    s.n = c * h * w;
  }
  return s;
}

/* The rows [*lo, *hi) of output position p along one axis, and the avg divisor factor. */
static void window(const vl_pool2d_args *a, int axis, int64_t p, int64_t in, int64_t out, int64_t *lo, int64_t *hi,
                   int64_t *full) {
  if (a->kind == VL_POOL_ADAPTIVE_AVG) {
    *lo = (p * in) / out;
    *hi = ((p + 1) * in + out - 1) / out;
    *full = *hi - *lo;
    return;
  }
  int64_t k = a->kernel[axis], st = a->stride[axis], pad = a->pad[axis];
  int64_t start = p * st - pad, end = start + k;
  if (a->kind == VL_POOL_AVG) {
    if (end > in + pad) end = in + pad;
    *full = end - start;
  } else {
    *full = 0;
  }
  if (start < 0) start = 0;
  if (end > in) end = in;
  *lo = start;
  *hi = end;
}

/* Window offsets: u8 with 255 for none, or i32 with -1 (vl_pool_argmax_dtype). */
static void argmax_store(const vl_pool2d_args *a, int64_t i, int64_t k) {
  if (a->argmax_dtype == VL_U8) ((uint8_t *)a->argmax)[i] = k < 0 ? 255 : (uint8_t)k;
  else ((int32_t *)a->argmax)[i] = (int32_t)k;
}

static int64_t argmax_load(const vl_pool2d_args *a, int64_t i) {
  if (a->argmax_dtype == VL_U8) {
    uint8_t k = ((const uint8_t *)a->argmax)[i];
    return k == 255 ? -1 : k;
  }
  return ((const int32_t *)a->argmax)[i];
}

static vl_status pool_forward(const vl_pool2d_args *a) {
  const size_t es = vl_dtype_size(a->dtype);
  strides sx = layout(a->nhwc, a->c, a->h, a->w), sy = layout(a->nhwc, a->c, a->p, a->q);
  const char *x = (const char *)a->x;
  char *y = (char *)a->y;
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t c = 0; c < a->c; c++) {
      const char *xp = x + (size_t)(n * sx.n + c * sx.c) * es;
      for (int64_t p = 0; p < a->p; p++)
        for (int64_t q = 0; q < a->q; q++) {
          int64_t yo = n * sy.n + c * sy.c + p * sy.h + q * sy.w;
          double v;
          if (a->kind == VL_POOL_MAX) {
            int64_t kh = a->kernel[0], kw = a->kernel[1], best_i = -1;
            double best = -INFINITY;
            for (int64_t i = 0; i < kh; i++) {
              int64_t ih = p * a->stride[0] - a->pad[0] + i * a->dilation[0];
              if (ih < 0 || ih >= a->h) continue;
              for (int64_t j = 0; j < kw; j++) {
                int64_t iw = q * a->stride[1] - a->pad[1] + j * a->dilation[1];
                if (iw < 0 || iw >= a->w) continue;
                double e = vl_cpu_ld_f64(xp + (size_t)(ih * sx.h + iw * sx.w) * es, a->dtype);
                if (best_i < 0) best_i = i * kw + j;
                if (e > best || isnan(e)) {
                  best = e;
                  best_i = i * kw + j;
                }
              }
            }
            v = best;
            if (a->argmax) argmax_store(a, yo, best_i);
          } else {
            int64_t h0, h1, w0, w1, fh, fw;
            window(a, 0, p, a->h, a->p, &h0, &h1, &fh);
            window(a, 1, q, a->w, a->q, &w0, &w1, &fw);
            double sum = 0.0;
            for (int64_t ih = h0; ih < h1; ih++)
              for (int64_t iw = w0; iw < w1; iw++)
                sum += vl_cpu_ld_f64(xp + (size_t)(ih * sx.h + iw * sx.w) * es, a->dtype);
            int64_t div = (a->kind == VL_POOL_ADAPTIVE_AVG || a->count_include_pad) ? fh * fw : (h1 - h0) * (w1 - w0);
            v = div > 0 ? sum / (double)div : NAN;
          }
          vl_cpu_st_f64(y + (size_t)yo * es, a->dtype, v);
        }
    }
  return VL_OK;
}

/* Scatter formulation: the CPU runs it serially, so accumulating into dx is deterministic. The
 * sums run in double in a scratch plane per (n, c) and are rounded once. */
static vl_status pool_backward(const vl_pool2d_args *a) {
  const size_t es = vl_dtype_size(a->dtype);
  strides sx = layout(a->nhwc, a->c, a->h, a->w), sy = layout(a->nhwc, a->c, a->p, a->q);
  int64_t hw = a->h * a->w;
  double *acc = (double *)malloc((size_t)(hw > 0 ? hw : 1) * sizeof(double));
  if (!acc)
    return vl_fail(VL_EOOM, "pool2d backward (cpu): out of host memory for a %lldx%lld scratch plane",
                   (long long)a->h, (long long)a->w);
  const char *dy = (const char *)a->dy;
  char *dx = (char *)a->dx;
  for (int64_t n = 0; n < a->n; n++)
    for (int64_t c = 0; c < a->c; c++) {
      memset(acc, 0, (size_t)hw * sizeof(double));
      for (int64_t p = 0; p < a->p; p++)
        for (int64_t q = 0; q < a->q; q++) {
          int64_t yo = n * sy.n + c * sy.c + p * sy.h + q * sy.w;
          double g = vl_cpu_ld_f64(dy + (size_t)yo * es, a->dtype);
          if (a->kind == VL_POOL_MAX) {
            int64_t k = argmax_load(a, yo);
            if (k < 0) continue;
            int64_t ih = p * a->stride[0] - a->pad[0] + (k / a->kernel[1]) * a->dilation[0];
            int64_t iw = q * a->stride[1] - a->pad[1] + (k % a->kernel[1]) * a->dilation[1];
            if (ih >= 0 && ih < a->h && iw >= 0 && iw < a->w) acc[ih * a->w + iw] += g;
            continue;
          }
          int64_t h0, h1, w0, w1, fh, fw;
          window(a, 0, p, a->h, a->p, &h0, &h1, &fh);
          window(a, 1, q, a->w, a->q, &w0, &w1, &fw);
          int64_t div = (a->kind == VL_POOL_ADAPTIVE_AVG || a->count_include_pad) ? fh * fw : (h1 - h0) * (w1 - w0);
          if (div <= 0) continue;
          double share = g / (double)div;
          for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) acc[ih * a->w + iw] += share;
        }
      char *dxp = dx + (size_t)(n * sx.n + c * sx.c) * es;
      for (int64_t ih = 0; ih < a->h; ih++)
        for (int64_t iw = 0; iw < a->w; iw++)
          vl_cpu_st_f64(dxp + (size_t)(ih * sx.h + iw * sx.w) * es, a->dtype, acc[ih * a->w + iw]);
    }
  free(acc);
  return VL_OK;
}

const vl_pooling_kernels vl_cpu_pooling_kernels = {
    .forward = pool_forward,
    .backward = pool_backward,
};
