/* kernels/cuda/cuda_pooling.cu: 2-D max / avg / adaptive-avg pooling and their backward on CUDA,
 * NCHW and NHWC, f32/f16/bf16 (f32 accumulation) and f64.
 *
 * One thread per output element (forward) or per input element (backward), enumerated in memory
 * order so that neighbouring threads touch neighbouring addresses in either layout. The backward
 * is a gather: each input element sums, in a fixed order, the gradients of the outputs whose window
 * covers it (max: whose recorded argmax is this element), so there are no atomics and the result is
 * deterministic. Window rules are those of kernels/cpu/cpu_pooling.c (PyTorch's). */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/nn_kernels.h"

struct pool_geo {
  int64_t n, c, h, w, p, q;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int kind; /* vl_pool_kind */
  bool nhwc, cip;
};

VL_DEV int64_t floordiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
VL_DEV int64_t ceildiv(int64_t a, int64_t b) { return -floordiv(-a, b); }

/* Window [*lo, *hi) along one axis for output position o, and the unclipped avg extent. */
VL_DEV void window(const pool_geo &g, int axis, int64_t o, int64_t in, int64_t out, int64_t *lo, int64_t *hi,
                   int64_t *full) {
  if (g.kind == VL_POOL_ADAPTIVE_AVG) {
    *lo = (o * in) / out;
    *hi = ((o + 1) * in + out - 1) / out;
    *full = *hi - *lo;
    return;
  }
  int64_t k = axis ? g.kw : g.kh, st = axis ? g.sw : g.sh, pad = axis ? g.pw : g.ph;
  int64_t start = o * st - pad, end = start + k;
  if (end > in + pad) end = in + pad;
  *full = end - start;
  if (start < 0) start = 0;
  if (end > in) end = in;
  *lo = start;
  *hi = end;
}

/* Splits a memory-order index of an N x C x A x B image into (n, c, a, b). */
VL_DEV void split(int64_t i, bool nhwc, int64_t C, int64_t A, int64_t B, int64_t *n, int64_t *c, int64_t *a,
                  int64_t *b) {
  if (nhwc) {
    *c = i % C;
    i /= C;
    *b = i % B;
    i /= B;
    *a = i % A;
    *n = i / A;
  } else {
    *b = i % B;
    i /= B;
    *a = i % A;
    i /= A;
    *c = i % C;
    *n = i / C;
  }
}

template <typename T>
__global__ void pool_fwd(pool_geo g, const T *__restrict__ x, T *__restrict__ y, int64_t *__restrict__ ind) {
  typedef typename vl_acc<T>::type A;
  const int64_t total = g.n * g.c * g.p * g.q;
  const int64_t sxh = g.nhwc ? g.w * g.c : g.w, sxw = g.nhwc ? g.c : 1;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t n, c, p, q;
    split(i, g.nhwc, g.c, g.p, g.q, &n, &c, &p, &q);
    const T *xp = x + (g.nhwc ? n * g.h * g.w * g.c + c : (n * g.c + c) * g.h * g.w);
    A v;
    if (g.kind == VL_POOL_MAX) {
      A best = (A)-INFINITY;
      int64_t bi = -1;
      for (int a = 0; a < g.kh; a++) {
        int64_t ih = p * g.sh - g.ph + (int64_t)a * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int b = 0; b < g.kw; b++) {
          int64_t iw = q * g.sw - g.pw + (int64_t)b * g.dw;
          if (iw < 0 || iw >= g.w) continue;
          A e = vl_val(xp[ih * sxh + iw * sxw]);
          if (bi < 0) bi = ih * g.w + iw; /* the window's first in-range cell */
          if (e > best || e != e) {       /* first maximum wins; NaN propagates */
            best = e;
            bi = ih * g.w + iw;
          }
        }
      }
      v = best;
      ind[i] = bi;
    } else {
      int64_t h0, h1, w0, w1, fh, fw;
      window(g, 0, p, g.h, g.p, &h0, &h1, &fh);
      window(g, 1, q, g.w, g.q, &w0, &w1, &fw);
      A sum = 0;
      for (int64_t ih = h0; ih < h1; ih++)
        for (int64_t iw = w0; iw < w1; iw++) sum += vl_val(xp[ih * sxh + iw * sxw]);
      int64_t div = (g.kind == VL_POOL_ADAPTIVE_AVG || g.cip) ? fh * fw : (h1 - h0) * (w1 - w0);
      v = sum / (A)div;
    }
    y[i] = vl_conv<T>::f(v);
  }
}

template <typename T>
__global__ void pool_bwd(pool_geo g, const T *__restrict__ dy, const int64_t *__restrict__ ind, T *__restrict__ dx) {
  typedef typename vl_acc<T>::type A;
  const int64_t total = g.n * g.c * g.h * g.w;
  const int64_t syh = g.nhwc ? g.q * g.c : g.q, syw = g.nhwc ? g.c : 1;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t n, c, h, w;
    split(i, g.nhwc, g.c, g.h, g.w, &n, &c, &h, &w);
    const int64_t base = g.nhwc ? n * g.p * g.q * g.c + c : (n * g.c + c) * g.p * g.q;
    /* Candidate outputs: those whose window span can reach (h, w); each is then checked exactly. */
    int64_t p0, p1, q0, q1; /* inclusive */
    if (g.kind == VL_POOL_ADAPTIVE_AVG) {
      p0 = (h * g.p) / g.h - 1;
      p1 = ((h + 1) * g.p + g.h - 1) / g.h;
      q0 = (w * g.q) / g.w - 1;
      q1 = ((w + 1) * g.q + g.w - 1) / g.w;
    } else {
      const int64_t eh = (int64_t)(g.kh - 1) * g.dh, ew = (int64_t)(g.kw - 1) * g.dw;
      p0 = ceildiv(h + g.ph - eh, g.sh);
      p1 = floordiv(h + g.ph, g.sh);
      q0 = ceildiv(w + g.pw - ew, g.sw);
      q1 = floordiv(w + g.pw, g.sw);
    }
    if (p0 < 0) p0 = 0;
    if (q0 < 0) q0 = 0;
    if (p1 > g.p - 1) p1 = g.p - 1;
    if (q1 > g.q - 1) q1 = g.q - 1;
    A acc = 0;
    const int64_t me = h * g.w + w;
    for (int64_t p = p0; p <= p1; p++)
      for (int64_t q = q0; q <= q1; q++) {
        const int64_t o = base + p * syh + q * syw;
        if (g.kind == VL_POOL_MAX) {
          if (ind[o] == me) acc += vl_val(dy[o]);
          continue;
        }
        int64_t h0, h1, w0, w1, fh, fw;
        window(g, 0, p, g.h, g.p, &h0, &h1, &fh);
        window(g, 1, q, g.w, g.q, &w0, &w1, &fw);
        if (h < h0 || h >= h1 || w < w0 || w >= w1) continue;
        int64_t div = (g.kind == VL_POOL_ADAPTIVE_AVG || g.cip) ? fh * fw : (h1 - h0) * (w1 - w0);
        acc += vl_val(dy[o]) / (A)div;
      }
    dx[i] = vl_conv<T>::f(acc);
  }
}

static pool_geo geo_of(const vl_pool2d_args *a) {
  pool_geo g;
  g.n = a->n;
  g.c = a->c;
  g.h = a->h;
  g.w = a->w;
  g.p = a->p;
  g.q = a->q;
  g.kh = a->kernel[0];
  g.kw = a->kernel[1];
  g.sh = a->stride[0];
  g.sw = a->stride[1];
  g.ph = a->pad[0];
  g.pw = a->pad[1];
  g.dh = a->dilation[0];
  g.dw = a->dilation[1];
  g.kind = (int)a->kind;
  g.nhwc = a->nhwc;
  g.cip = a->count_include_pad;
  if (g.kind == VL_POOL_ADAPTIVE_AVG) { /* unused by the adaptive windows; keep the bounds math sane */
    g.kh = g.kw = g.sh = g.sw = g.dh = g.dw = 1;
    g.ph = g.pw = 0;
  }
  return g;
}

static const char *pool_name(vl_pool_kind k) {
  return k == VL_POOL_MAX ? "max_pool2d" : k == VL_POOL_AVG ? "avg_pool2d" : "adaptive_avg_pool2d";
}

static vl_status pool_forward(const vl_pool2d_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  pool_geo g = geo_of(a);
  int64_t total = a->n * a->c * a->p * a->q;
  if (total == 0) return VL_OK;
  const int block = 256;
  unsigned grid = vl_grid(total, block, st, 4);
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  VL_DISPATCH_FLOAT(a->dtype, T, pool_name(a->kind),
                    pool_fwd<T><<<grid, block, 0, s>>>(g, (const T *)a->x, (T *)a->y, a->indices));
  VL_LAUNCH_CHECK();
  return VL_OK;
}

static vl_status pool_backward(const vl_pool2d_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  pool_geo g = geo_of(a);
  int64_t total = a->n * a->c * a->h * a->w;
  if (total == 0) return VL_OK;
  const int block = 256;
  unsigned grid = vl_grid(total, block, st, 4);
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  VL_DISPATCH_FLOAT(a->dtype, T, pool_name(a->kind),
                    pool_bwd<T><<<grid, block, 0, s>>>(g, (const T *)a->dy, a->indices, (T *)a->dx));
  VL_LAUNCH_CHECK();
  return VL_OK;
}

extern "C" const vl_pooling_kernels vl_cuda_pooling_kernels = {
    .forward = pool_forward,
    .backward = pool_backward,
};
