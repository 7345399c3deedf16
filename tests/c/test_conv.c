/* tests/c/test_conv.c: CPU convolution and pooling against direct loops in double.
 *
 * Kernel level: forward, backward-data and backward-filter of vl_cpu_conv_kernels for several
 * configurations (padding, stride 2, dilation 2, groups 2, depthwise, 1x1 with and without the
 * im2col-free path, non-square), in f64/f32/f16/bf16, NCHW and NHWC; pooling forward/backward
 * (max with padding, dilation, ceil_mode and NaN; avg with and without count_include_pad; adaptive).
 * Front-end level: vl_conv2d/vl_pool2d layouts (channels-last in and out, KCRS weight with NHWC
 * input), bias, gradients of vl_conv2d_backward, and the error messages. Inputs are fresh random
 * numbers (the seed is printed). The last line is "N passed, N failed". */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend/nn_kernels.h"
#include "runtime/autograd/autograd.h"
#include "runtime/core/context.h"
#include "runtime/core/layout.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"
#include "runtime/core/tensor.h"
#include "vl_test.h"

/* Offset of logical element (a, b, i, j) of an A x B x I x J image in NCHW or NHWC memory. */
static int64_t off4(bool nhwc, int64_t B, int64_t I, int64_t J, int64_t a, int64_t b, int64_t i, int64_t j) {
  return nhwc ? ((a * I + i) * J + j) * B + b : ((a * B + b) * I + i) * J + j;
}

static double tol_of(vl_dtype dt) {
  switch (dt) {
    case VL_F64: return 1e-11;
    case VL_F32: return 2e-5;
    case VL_F16: return 3e-3;
    default: return 2e-2;
  }
}

/* A buffer of n random values of dtype dt; *ref receives them as rounded to dt, in double. */
static void *rand_buf(vl_dtype dt, int64_t n, double **ref) {
  size_t es = vl_dtype_size(dt);
  char *b = malloc((size_t)n * es + 1);
  *ref = malloc(sizeof(double) * (size_t)n + 1);
  for (int64_t i = 0; i < n; i++) {
    vl_store_from_f64(b + i * es, dt, 2.0 * vl_test_urand() - 1.0);
    (*ref)[i] = vl_load_as_f64(b + i * es, dt);
  }
  return b;
}

/* Max |got - ref| / (1 + |ref|) over n logical elements (got in dt at layout offsets). */
static double cmp_img(const void *got, vl_dtype dt, bool nhwc, const double *ref, int64_t A, int64_t B, int64_t I,
                      int64_t J) {
  double worst = 0;
  size_t es = vl_dtype_size(dt);
  for (int64_t a = 0; a < A; a++)
    for (int64_t b = 0; b < B; b++)
      for (int64_t i = 0; i < I; i++)
        for (int64_t j = 0; j < J; j++) {
          double r = ref[((a * B + b) * I + i) * J + j];
          double g = vl_load_as_f64((const char *)got + off4(nhwc, B, I, J, a, b, i, j) * es, dt);
          double e = fabs(g - r) / (1 + fabs(r));
          if (!(e <= worst)) worst = e; /* NaN sticks */
        }
  return worst;
}

typedef struct cfg {
  int64_t n, c, h, w, k, r, s;
  int sh, sw, ph, pw, dh, dw, g;
} cfg;

/* ---- convolution kernels vs the 7-loop definition ---- */
static void test_conv_cfg(const cfg *f, vl_dtype dt, bool nhwc) {
  int64_t cg = f->c / f->g, kg = f->k / f->g;
  int64_t P = (f->h + 2 * f->ph - f->dh * (f->r - 1) - 1) / f->sh + 1;
  int64_t Q = (f->w + 2 * f->pw - f->dw * (f->s - 1) - 1) / f->sw + 1;
  int64_t nx = f->n * f->c * f->h * f->w, nw = f->k * cg * f->r * f->s, ny = f->n * f->k * P * Q;
  size_t es = vl_dtype_size(dt);
  double *xr, *wr, *dyr;
  /* Buffers hold the values in their memory layout; refs are logical NCHW / KCRS. */
  void *xl = rand_buf(dt, nx, &xr), *wl = rand_buf(dt, nw, &wr), *dyl = rand_buf(dt, ny, &dyr);
  char *x = malloc(nx * es), *w = malloc(nw * es), *dy = malloc(ny * es);
  for (int64_t a = 0; a < f->n; a++)
    for (int64_t b = 0; b < f->c; b++)
      for (int64_t i = 0; i < f->h; i++)
        for (int64_t j = 0; j < f->w; j++)
          memcpy(x + off4(nhwc, f->c, f->h, f->w, a, b, i, j) * es, (char *)xl + (((a * f->c + b) * f->h + i) * f->w + j) * es, es);
  for (int64_t a = 0; a < f->k; a++)
    for (int64_t b = 0; b < cg; b++)
      for (int64_t i = 0; i < f->r; i++)
        for (int64_t j = 0; j < f->s; j++)
          memcpy(w + off4(nhwc, cg, f->r, f->s, a, b, i, j) * es, (char *)wl + (((a * cg + b) * f->r + i) * f->s + j) * es, es);
  for (int64_t a = 0; a < f->n; a++)
    for (int64_t b = 0; b < f->k; b++)
      for (int64_t i = 0; i < P; i++)
        for (int64_t j = 0; j < Q; j++)
          memcpy(dy + off4(nhwc, f->k, P, Q, a, b, i, j) * es, (char *)dyl + (((a * f->k + b) * P + i) * Q + j) * es, es);
  double *yref = calloc(ny, sizeof(double)), *dxref = calloc(nx, sizeof(double)), *dwref = calloc(nw, sizeof(double));
  for (int64_t n = 0; n < f->n; n++)
    for (int64_t k = 0; k < f->k; k++)
      for (int64_t p = 0; p < P; p++)
        for (int64_t q = 0; q < Q; q++)
          for (int64_t cl = 0; cl < cg; cl++)
            for (int64_t r = 0; r < f->r; r++)
              for (int64_t s = 0; s < f->s; s++) {
                int64_t c = (k / kg) * cg + cl;
                int64_t ih = p * f->sh - f->ph + r * f->dh, iw = q * f->sw - f->pw + s * f->dw;
                if (ih < 0 || ih >= f->h || iw < 0 || iw >= f->w) continue;
                int64_t xi = ((n * f->c + c) * f->h + ih) * f->w + iw, wi = ((k * cg + cl) * f->r + r) * f->s + s;
                int64_t yi = ((n * f->k + k) * P + p) * Q + q;
                yref[yi] += xr[xi] * wr[wi];
                dxref[xi] += dyr[yi] * wr[wi];
                dwref[wi] += dyr[yi] * xr[xi];
              }
  char *y = malloc(ny * es), *dx = malloc(nx * es), *dw = malloc(nw * es);
  memset(dx, 0x7f, nx * es); /* garbage: the kernel must overwrite */
  vl_conv_args a = {.dtype = dt, .nhwc = nhwc, .n = f->n, .c = f->c, .h = f->h, .w = f->w, .k = f->k, .r = f->r,
                    .s = f->s, .p = P, .q = Q, .stride = {f->sh, f->sw}, .pad = {f->ph, f->pw},
                    .dilation = {f->dh, f->dw}, .groups = f->g, .x = x, .wt = w, .dy = dy, .y = y, .dx = dx, .dwt = dw};
  const char *lay = nhwc ? "nhwc" : "nchw";
  double tol = tol_of(dt);
  CHECK_OK(vl_cpu_conv_kernels.forward(&a));
  double e = cmp_img(y, dt, nhwc, yref, f->n, f->k, P, Q);
  CHECK(e <= tol, "conv fwd %s %s n%lld c%lld %lldx%lld k%lld %lldx%lld s%d p%d d%d g%d: err %g", vl_dtype_name(dt), lay,
        (long long)f->n, (long long)f->c, (long long)f->h, (long long)f->w, (long long)f->k, (long long)f->r,
        (long long)f->s, f->sh, f->ph, f->dh, f->g, e);
  CHECK_OK(vl_cpu_conv_kernels.backward_data(&a));
  e = cmp_img(dx, dt, nhwc, dxref, f->n, f->c, f->h, f->w);
  CHECK(e <= tol, "conv bwd data %s %s c%lld k%lld s%d p%d d%d g%d: err %g", vl_dtype_name(dt), lay, (long long)f->c,
        (long long)f->k, f->sh, f->ph, f->dh, f->g, e);
  CHECK_OK(vl_cpu_conv_kernels.backward_filter(&a));
  e = cmp_img(dw, dt, nhwc, dwref, f->k, cg, f->r, f->s);
  CHECK(e <= tol * 2, "conv bwd filter %s %s c%lld k%lld s%d p%d d%d g%d: err %g", vl_dtype_name(dt), lay,
        (long long)f->c, (long long)f->k, f->sh, f->ph, f->dh, f->g, e);
  free(xl); free(wl); free(dyl); free(xr); free(wr); free(dyr); free(x); free(w); free(dy);
  free(yref); free(dxref); free(dwref); free(y); free(dx); free(dw);
}

static void test_conv_kernels(void) {
  static const cfg cfgs[] = {
      {2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},   /* padding */
      {2, 4, 9, 8, 6, 3, 2, 2, 2, 1, 0, 1, 1, 2},   /* stride 2, groups 2, non-square kernel */
      {1, 3, 10, 9, 5, 3, 3, 1, 1, 2, 2, 2, 2, 1},  /* dilation 2 */
      {2, 4, 6, 7, 8, 3, 3, 1, 1, 1, 1, 1, 1, 4},   /* depthwise, multiplier 2 */
      {2, 5, 4, 5, 3, 1, 1, 1, 1, 0, 0, 1, 1, 1},   /* 1x1: no im2col */
      {2, 6, 5, 5, 4, 1, 1, 2, 2, 0, 0, 1, 1, 2},   /* 1x1 stride 2, groups 2 */
      {1, 2, 5, 6, 2, 5, 5, 3, 2, 2, 2, 1, 1, 1},   /* kernel larger than the stride, uneven */
      {3, 8, 12, 12, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1} /* a small CNN layer */
  };
  static const vl_dtype dts[] = {VL_F64, VL_F32, VL_F16, VL_BF16};
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
    for (int d = 0; d < 4; d++)
      for (int l = 0; l < 2; l++) test_conv_cfg(&cfgs[i], dts[d], l == 1);
}

/* ---- pooling kernels vs direct loops ---- */
typedef struct pcfg {
  vl_pool_kind kind;
  int64_t n, c, h, w;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil, cip;
  int64_t oh, ow; /* adaptive */
} pcfg;

static int64_t pout(int64_t in, int k, int pad, int st, int dil, bool ceil_mode) {
  int64_t num = in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? st - 1 : 0);
  int64_t o = num / st + 1;
  if (ceil_mode && (o - 1) * st >= in + pad) o--;
  return o;
}

static void test_pool_cfg(const pcfg *f, vl_dtype dt, bool nhwc, bool with_nan) {
  int64_t P, Q;
  if (f->kind == VL_POOL_ADAPTIVE_AVG) P = f->oh, Q = f->ow;
  else P = pout(f->h, f->kh, f->ph, f->sh, f->dh, f->ceil), Q = pout(f->w, f->kw, f->pw, f->sw, f->dw, f->ceil);
  int64_t nx = f->n * f->c * f->h * f->w, ny = f->n * f->c * P * Q;
  size_t es = vl_dtype_size(dt);
  double *xr, *dyr;
  void *xl = rand_buf(dt, nx, &xr), *dyl = rand_buf(dt, ny, &dyr);
  if (with_nan) { /* one NaN in the first plane */
    xr[f->w + 1] = NAN;
    vl_store_from_f64((char *)xl + (f->w + 1) * es, dt, NAN);
  }
  char *x = malloc(nx * es), *dy = malloc(ny * es), *y = malloc(ny * es), *dx = malloc(nx * es);
  void *idx = malloc(ny * sizeof(int32_t)); /* u8 or i32 window offsets */
  for (int64_t a = 0; a < f->n; a++)
    for (int64_t b = 0; b < f->c; b++) {
      for (int64_t i = 0; i < f->h; i++)
        for (int64_t j = 0; j < f->w; j++)
          memcpy(x + off4(nhwc, f->c, f->h, f->w, a, b, i, j) * es, (char *)xl + (((a * f->c + b) * f->h + i) * f->w + j) * es, es);
      for (int64_t i = 0; i < P; i++)
        for (int64_t j = 0; j < Q; j++)
          memcpy(dy + off4(nhwc, f->c, P, Q, a, b, i, j) * es, (char *)dyl + (((a * f->c + b) * P + i) * Q + j) * es, es);
    }
  double *yref = calloc(ny, sizeof(double)), *dxref = calloc(nx, sizeof(double));
  for (int64_t pl = 0; pl < f->n * f->c; pl++)
    for (int64_t p = 0; p < P; p++)
      for (int64_t q = 0; q < Q; q++) {
        const double *xp = xr + pl * f->h * f->w;
        double *dxp = dxref + pl * f->h * f->w, g = dyr[(pl * P + p) * Q + q], v = 0;
        if (f->kind == VL_POOL_MAX) {
          double best = -INFINITY;
          int64_t bi = -1;
          for (int i = 0; i < f->kh; i++)
            for (int j = 0; j < f->kw; j++) {
              int64_t ih = p * f->sh - f->ph + i * f->dh, iw = q * f->sw - f->pw + j * f->dw;
              if (ih < 0 || ih >= f->h || iw < 0 || iw >= f->w) continue;
              double e = xp[ih * f->w + iw];
              if (bi < 0) bi = ih * f->w + iw; /* the window's first in-range cell */
              if (e > best || isnan(e)) best = e, bi = ih * f->w + iw;
            }
          v = best;
          if (bi >= 0) dxp[bi] += g; /* a window with no cell inside the input gives -inf */
        } else {
          int64_t h0, h1, w0, w1, cnt = 0, cells = 0;
          double sum = 0;
          if (f->kind == VL_POOL_ADAPTIVE_AVG) {
            h0 = (int64_t)floor((double)p * f->h / P), h1 = (int64_t)ceil((double)(p + 1) * f->h / P);
            w0 = (int64_t)floor((double)q * f->w / Q), w1 = (int64_t)ceil((double)(q + 1) * f->w / Q);
          } else {
            h0 = p * f->sh - f->ph, h1 = h0 + f->kh, w0 = q * f->sw - f->pw, w1 = w0 + f->kw;
          }
          for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++) {
              bool in_pad = ih < f->h + f->ph && iw < f->w + f->pw; /* the padded image */
              bool inside = ih >= 0 && ih < f->h && iw >= 0 && iw < f->w;
              if (in_pad) cells++;
              if (inside) cnt++, sum += xp[ih * f->w + iw];
            }
          int64_t div = (f->kind == VL_POOL_AVG && f->cip) ? cells : cnt;
          v = sum / (double)div;
          for (int64_t ih = h0; ih < h1; ih++)
            for (int64_t iw = w0; iw < w1; iw++)
              if (ih >= 0 && ih < f->h && iw >= 0 && iw < f->w) dxp[ih * f->w + iw] += g / (double)div;
        }
        yref[(pl * P + p) * Q + q] = v;
      }
  vl_pool2d_args a = {.kind = f->kind, .dtype = dt, .nhwc = nhwc, .n = f->n, .c = f->c, .h = f->h, .w = f->w,
                      .p = P, .q = Q, .kernel = {f->kh, f->kw}, .stride = {f->sh, f->sw}, .pad = {f->ph, f->pw},
                      .dilation = {f->dh, f->dw}, .count_include_pad = f->cip, .x = x, .dy = dy, .y = y, .dx = dx,
                      .argmax = f->kind == VL_POOL_MAX ? idx : NULL,
                      .argmax_dtype = vl_pool_argmax_dtype(f->kh, f->kw)};
  double tol = tol_of(dt);
  CHECK_OK(vl_cpu_pooling_kernels.forward(&a));
  /* NaN must propagate: compare NaN positions separately. */
  int nan_ok = 1;
  double worst = 0;
  for (int64_t pl = 0; pl < f->n * f->c; pl++)
    for (int64_t p = 0; p < P; p++)
      for (int64_t q = 0; q < Q; q++) {
        double r = yref[(pl * P + p) * Q + q];
        double g = vl_load_as_f64(y + off4(nhwc, f->c, P, Q, pl / f->c, pl % f->c, p, q) * es, dt);
        if (isnan(r) || isnan(g)) nan_ok &= isnan(r) && isnan(g);
        else if (fabs(g - r) / (1 + fabs(r)) > worst) worst = fabs(g - r) / (1 + fabs(r));
      }
  CHECK(nan_ok && worst <= tol, "pool %d fwd %s %s %lldx%lld k%dx%d s%d p%d d%d ceil%d cip%d nan%d: err %g nan_ok %d",
        f->kind, vl_dtype_name(dt), nhwc ? "nhwc" : "nchw", (long long)f->h, (long long)f->w, f->kh, f->kw, f->sh,
        f->ph, f->dh, f->ceil, f->cip, with_nan, worst, nan_ok);
  if (!with_nan) {
    CHECK_OK(vl_cpu_pooling_kernels.backward(&a));
    double e = cmp_img(dx, dt, nhwc, dxref, f->n, f->c, f->h, f->w);
    CHECK(e <= tol, "pool %d bwd %s %s k%dx%d s%d p%d ceil%d: err %g", f->kind, vl_dtype_name(dt),
          nhwc ? "nhwc" : "nchw", f->kh, f->kw, f->sh, f->ph, f->ceil, e);
  }
  free(xl); free(dyl); free(xr); free(dyr); free(x); free(dy); free(y); free(dx); free(idx); free(yref); free(dxref);
}

static void test_pool_kernels(void) {
  static const pcfg cfgs[] = {
      {VL_POOL_MAX, 2, 3, 8, 8, 2, 2, 2, 2, 0, 0, 1, 1, false, false, 0, 0},
      {VL_POOL_MAX, 2, 3, 7, 9, 3, 3, 2, 2, 1, 1, 1, 1, false, false, 0, 0},
      {VL_POOL_MAX, 1, 2, 9, 8, 3, 2, 2, 1, 1, 1, 2, 2, true, false, 0, 0},
      {VL_POOL_MAX, 2, 2, 5, 5, 2, 2, 2, 2, 0, 0, 1, 1, true, false, 0, 0},
      /* 16x16 = 256 cells: i32 window offsets; a dilated window with no cell inside the input */
      {VL_POOL_MAX, 1, 2, 18, 17, 16, 16, 1, 1, 1, 0, 1, 1, false, false, 0, 0},
      {VL_POOL_MAX, 1, 2, 3, 3, 2, 2, 1, 1, 1, 1, 4, 4, false, false, 0, 0},
      {VL_POOL_AVG, 2, 3, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, false, true, 0, 0},
      {VL_POOL_AVG, 2, 3, 7, 7, 3, 3, 2, 2, 1, 1, 1, 1, false, false, 0, 0},
      {VL_POOL_AVG, 1, 2, 6, 5, 3, 2, 2, 2, 1, 1, 1, 1, true, true, 0, 0},
      {VL_POOL_AVG, 1, 2, 6, 5, 3, 2, 2, 2, 1, 1, 1, 1, true, false, 0, 0},
      {VL_POOL_ADAPTIVE_AVG, 2, 3, 7, 10, 0, 0, 0, 0, 0, 0, 1, 1, false, false, 3, 4},
      {VL_POOL_ADAPTIVE_AVG, 1, 2, 5, 5, 0, 0, 0, 0, 0, 0, 1, 1, false, false, 1, 1},
      {VL_POOL_ADAPTIVE_AVG, 1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 1, 1, false, false, 5, 6},
  };
  static const vl_dtype dts[] = {VL_F64, VL_F32, VL_F16, VL_BF16};
  for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
    for (int d = 0; d < 4; d++)
      for (int l = 0; l < 2; l++) test_pool_cfg(&cfgs[i], dts[d], l == 1, false);
  test_pool_cfg(&cfgs[1], VL_F32, false, true);
  test_pool_cfg(&cfgs[1], VL_F32, true, true);
  test_pool_cfg(&cfgs[6], VL_F64, false, true);
}

/* ---- front ends ---- */
static vl_tensor *rnd(int64_t a, int64_t b, int64_t c, int64_t d, vl_dtype dt) {
  int64_t size[4] = {a, b, c, d};
  vl_tensor *t = NULL;
  if (vl_rand(4, size, -1, 1, dt, vl_cpu_device(), &t) != VL_OK) return NULL;
  return t;
}

static double max_diff(vl_tensor *a, vl_tensor *b) {
  vl_tensor *d = NULL, *m = NULL;
  double v = INFINITY;
  if (vl_binary(VL_BIN_SUB, a, b, 1.0, &d) == VL_OK && vl_unary_(VL_UN_ABS, d) == VL_OK &&
      vl_reduce(VL_RED_MAX, d, 0, NULL, false, 0, &m, NULL) == VL_OK)
    vl_item(m, &v);
  vl_tensor_release(d);
  vl_tensor_release(m);
  return v;
}

static void test_front_ends(void) {
  vl_tensor *x = rnd(2, 6, 9, 8, VL_F32), *w = rnd(4, 3, 3, 3, VL_F32), *y = NULL, *yl = NULL, *xl = NULL, *y2 = NULL;
  int64_t bs[1] = {4};
  vl_tensor *b = NULL;
  CHECK_OK(vl_rand(1, bs, -1, 1, VL_F32, vl_cpu_device(), &b));
  vl_conv2d_params p = {{2, 1}, {1, 2}, {1, 1}, 2};
  CHECK_OK(vl_conv2d(x, w, b, &p, &y));
  CHECK(y && y->size[0] == 2 && y->size[1] == 4 && y->size[2] == 5 && y->size[3] == 10, "conv2d output shape");
  /* Channels-last input with a KCRS weight: same values, channels-last output. */
  CHECK_OK(vl_to_channels_last(x, &xl));
  CHECK(vl_is_channels_last(xl) && !vl_is_channels_last(x), "to_channels_last");
  CHECK_OK(vl_conv2d(xl, w, b, &p, &yl));
  CHECK(yl && vl_is_channels_last(yl), "conv2d keeps channels-last");
  CHECK(max_diff(y, yl) < 1e-5, "conv2d nhwc vs nchw: %g", max_diff(y, yl));
  /* Bias: conv without bias + bias broadcast. */
  CHECK_OK(vl_conv2d(x, w, NULL, &p, &y2));
  {
    vl_tensor *bv = NULL, *sum = NULL;
    int64_t s4[4] = {1, 4, 1, 1};
    CHECK_OK(vl_view(b, 4, s4, &bv));
    CHECK_OK(vl_binary(VL_BIN_ADD, y2, bv, 1.0, &sum));
    CHECK(max_diff(sum, y) < 1e-6, "conv2d bias");
    vl_tensor_release(bv);
    vl_tensor_release(sum);
  }
  /* Backward: dbias is the sum of dy; dx/dw in both layouts agree; dw keeps w's layout. */
  vl_tensor *dy = rnd(2, 4, 5, 10, VL_F32), *dyl = NULL, *gx = NULL, *gw = NULL, *gb = NULL, *gxl = NULL, *gwl = NULL;
  CHECK_OK(vl_to_channels_last(dy, &dyl));
  CHECK_OK(vl_conv2d_backward(x, w, dy, &p, &gx, &gw, &gb));
  CHECK_OK(vl_conv2d_backward(xl, w, dyl, &p, &gxl, &gwl, NULL));
  CHECK(gx && gxl && vl_is_channels_last(gxl) && max_diff(gx, gxl) < 1e-5, "conv2d_backward dx layouts");
  CHECK(gw && gwl && vl_tensor_is_contiguous(gwl) && max_diff(gw, gwl) < 1e-4, "conv2d_backward dw layouts");
  {
    const int dims[3] = {0, 2, 3};
    vl_tensor *ref = NULL;
    CHECK_OK(vl_reduce(VL_RED_SUM, dy, 3, dims, false, 0, &ref, NULL));
    CHECK(gb && gb->ndim == 1 && gb->size[0] == 4 && max_diff(gb, ref) < 1e-5, "conv2d_backward dbias");
    vl_tensor_release(ref);
  }
  /* Errors. */
  vl_tensor *w64 = rnd(64, 64, 3, 3, VL_F16), *x3 = rnd(8, 3, 16, 16, VL_F16), *out = NULL;
  vl_conv2d_params p1 = {{1, 1}, {0, 0}, {1, 1}, 1};
  CHECK_ERR(vl_conv2d(x3, w64, NULL, &p1, &out), VL_ESHAPE,
            "conv2d: input has 3 channels but weight expects 64 (input 8x3x16x16 f16");
  CHECK_ERR(vl_conv2d(x, w, NULL, &p1, &out), VL_ESHAPE, "input has 6 channels but weight expects 3");
  vl_conv2d_params bad = {{0, 1}, {0, 0}, {1, 1}, 2};
  CHECK_ERR(vl_conv2d(x, w, NULL, &bad, &out), VL_EINVAL, "conv2d: stride must be >= 1");
  vl_conv2d_params big = {{1, 1}, {0, 0}, {5, 5}, 2};
  CHECK_ERR(vl_conv2d(x, w, NULL, &big, &out), VL_ESHAPE, "conv2d: output size");
  CHECK_ERR(vl_conv2d(x, w, w, &p, &out), VL_ESHAPE, "conv2d: bias must have shape [4]");
  CHECK_ERR(vl_conv2d(x3, w, NULL, &p, &out), VL_EDTYPE, "conv2d: input and weight must be float tensors of one dtype");
  CHECK(out == NULL, "outputs untouched on failure");
  /* Pooling front end: layouts, indices, errors. */
  vl_pool2d_params mp = {VL_POOL_MAX, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false, 0, 0};
  vl_tensor *py = NULL, *pyl = NULL, *pi = NULL, *pd = NULL, *pdl = NULL, *pil = NULL;
  CHECK_OK(vl_pool2d(x, &mp, &py, &pi));
  CHECK_OK(vl_pool2d(xl, &mp, &pyl, &pil));
  CHECK(py && py->size[2] == 5 && py->size[3] == 5 && vl_is_channels_last(pyl) && max_diff(py, pyl) == 0,
        "max_pool2d layouts");
  vl_tensor *pdy = rnd(2, 6, 5, 5, VL_F32);
  CHECK_OK(vl_pool2d_backward(x, pdy, pi, &mp, &pd));
  CHECK_OK(vl_pool2d_backward(xl, pdy, pil, &mp, &pdl));
  CHECK(pd && pdl && vl_is_channels_last(pdl) && max_diff(pd, pdl) == 0, "max_pool2d backward layouts");
  vl_pool2d_params badp = {VL_POOL_MAX, {3, 3}, {1, 1}, {2, 2}, {1, 1}, false, false, 0, 0};
  CHECK_ERR(vl_pool2d(x, &badp, &out, NULL), VL_EINVAL, "max_pool2d: padding must be between 0 and half");
  vl_pool2d_params bigk = {VL_POOL_AVG, {12, 3}, {1, 1}, {0, 0}, {1, 1}, false, true, 0, 0};
  CHECK_ERR(vl_pool2d(x, &bigk, &out, NULL), VL_ESHAPE, "avg_pool2d: output size -2x6 is not positive");
  vl_pool2d_params ad = {VL_POOL_ADAPTIVE_AVG, {0, 0}, {0, 0}, {0, 0}, {1, 1}, false, false, 0, 3};
  CHECK_ERR(vl_pool2d(x, &ad, &out, NULL), VL_EINVAL, "adaptive_avg_pool2d: output size must be >= 1");
  CHECK_ERR(vl_pool2d_backward(x, pdy, NULL, &mp, &out), VL_EINVAL, "argmax of the forward is required");
  CHECK(pi && pi->dtype == VL_U8, "max_pool2d argmax: one byte per output for a 3x3 window");
  CHECK_ERR(vl_pool2d_backward(x, pdy, pdy, &mp, &out), VL_ESHAPE, "argmax must be the forward's u8 window offsets");
  CHECK(out == NULL, "pool outputs untouched on failure");
  vl_tensor *ts[] = {x, w, y, yl, xl, y2, b, dy, dyl, gx, gw, gb, gxl, gwl, w64, x3, py, pyl, pi, pd, pdl, pil, pdy};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vl_tensor_release(ts[i]);
}

/* ---- autograd wrappers (runtime/autograd/node.c's engine) ---- */
static void test_autograd(void) {
  vl_tensor *x = rnd(2, 4, 7, 6, VL_F64), *w = rnd(6, 2, 3, 3, VL_F64), *b = NULL, *y = NULL, *dy = NULL;
  int64_t bs[1] = {6};
  CHECK_OK(vl_rand(1, bs, -1, 1, VL_F64, vl_cpu_device(), &b));
  CHECK_OK(vl_set_requires_grad(x, true));
  CHECK_OK(vl_set_requires_grad(w, true));
  CHECK_OK(vl_set_requires_grad(b, true));
  vl_conv2d_params p = {{2, 1}, {1, 1}, {1, 2}, 2};
  CHECK_OK(vl_ag_conv2d(x, w, b, &p, &y));
  CHECK(y && vl_grad_fn(y) && strcmp(vl_grad_fn(y)->name, "ConvolutionBackward") == 0, "conv2d records a node");
  if (!y) return;
  dy = rnd(y->size[0], y->size[1], y->size[2], y->size[3], VL_F64);
  CHECK_OK(vl_backward(1, &y, &dy, false));
  vl_tensor *gx = NULL, *gw = NULL, *gb = NULL;
  CHECK_OK(vl_conv2d_backward(x, w, dy, &p, &gx, &gw, &gb));
  CHECK(vl_grad(x) && max_diff(vl_grad(x), gx) < 1e-12, "conv2d x.grad");
  CHECK(vl_grad(w) && max_diff(vl_grad(w), gw) < 1e-12, "conv2d w.grad");
  CHECK(vl_grad(b) && max_diff(vl_grad(b), gb) < 1e-12, "conv2d b.grad");
  /* max pooling: the gradient reaches the argmax; its total is the sum of dy. */
  vl_tensor *x2 = rnd(2, 3, 6, 6, VL_F64), *y2 = NULL, *dy2 = NULL, *tot = NULL, *ref = NULL;
  CHECK_OK(vl_set_requires_grad(x2, true));
  vl_pool2d_params mp = {VL_POOL_MAX, {3, 3}, {2, 2}, {1, 1}, {1, 1}, false, false, 0, 0};
  CHECK_OK(vl_ag_pool2d(x2, &mp, &y2));
  if (y2) {
    dy2 = rnd(2, 3, y2->size[2], y2->size[3], VL_F64);
    CHECK_OK(vl_backward(1, &y2, &dy2, false));
    CHECK_OK(vl_reduce(VL_RED_SUM, vl_grad(x2), 0, NULL, false, 0, &tot, NULL));
    CHECK_OK(vl_reduce(VL_RED_SUM, dy2, 0, NULL, false, 0, &ref, NULL));
    CHECK(tot && ref && max_diff(tot, ref) < 1e-12, "max_pool2d x.grad sums dy");
  }
  vl_tensor *ts[] = {x, w, b, y, dy, gx, gw, gb, x2, y2, dy2, tot, ref};
  for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) vl_tensor_release(ts[i]);
}

int main(void) {
  uint64_t seed = vl_test_seed();
  printf("seed %llu\n", (unsigned long long)seed);
  vl_init();
  vl_manual_seed(seed);
  test_conv_kernels();
  test_pool_kernels();
  test_front_ends();
  test_autograd();
  vl_shutdown();
  return vl_test_finish();
}
