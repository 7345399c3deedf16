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

/* I: the index type of a launch, int32_t when every index fits (the 64-bit divisions and
 * multiplies of the index math made max-pool backward 5 ms of a ResNet-50 fp16 step, 3x
 * PyTorch's, ncu 2026-12-02), else int64_t. */
template <typename I>
struct pool_geo_t {
  I n, c, h, w, p, q;
  int kh, kw, sh, sw, ph, pw, dh, dw;
  int kind; /* vl_pool_kind */
  bool nhwc, cip;
};

template <typename I>
VL_DEV I floordiv(I a, I b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
template <typename I>
VL_DEV I ceildiv(I a, I b) { return -floordiv(-a, b); }

/* Window [*lo, *hi) along one axis for output position o, and the unclipped avg extent. */
template <typename I>
VL_DEV void window(const pool_geo_t<I> &g, int axis, I o, I in, I out, I *lo, I *hi,
                   I *full) {
  if (g.kind == VL_POOL_ADAPTIVE_AVG) {
    *lo = (o * in) / out;
    *hi = ((o + 1) * in + out - 1) / out;
    *full = *hi - *lo;
    return;
  }
  I k = axis ? g.kw : g.kh, st = axis ? g.sw : g.sh, pad = axis ? g.pw : g.ph;
  I start = o * st - pad, end = start + k;
  if (end > in + pad) end = in + pad;
  *full = end - start;
  if (start < 0) start = 0;
  if (end > in) end = in;
  *lo = start;
  *hi = end;
}

/* Splits a memory-order index of an N x C x A x B image into (n, c, a, b). */
template <typename I>
VL_DEV void split(I i, bool nhwc, I C, I A, I B, I *n, I *c, I *a,
                  I *b) {
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

template <typename T, typename I>
__global__ void pool_fwd(pool_geo_t<I> g, const T *__restrict__ x, T *__restrict__ y, int64_t *__restrict__ ind) {
  typedef typename vl_acc<T>::type A;
  const I total = g.n * g.c * g.p * g.q;
  const I sxh = g.nhwc ? g.w * g.c : g.w, sxw = g.nhwc ? g.c : 1;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I n, c, p, q;
    split(i, g.nhwc, g.c, g.p, g.q, &n, &c, &p, &q);
    const T *xp = x + (g.nhwc ? n * g.h * g.w * g.c + c : (n * g.c + c) * g.h * g.w);
    A v;
    if (g.kind == VL_POOL_MAX) {
      A best = (A)-INFINITY;
      I bi = -1;
      for (int a = 0; a < g.kh; a++) {
        I ih = p * g.sh - g.ph + (I)a * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int b = 0; b < g.kw; b++) {
          I iw = q * g.sw - g.pw + (I)b * g.dw;
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
      I h0, h1, w0, w1, fh, fw;
      window(g, 0, p, g.h, g.p, &h0, &h1, &fh);
      window(g, 1, q, g.w, g.q, &w0, &w1, &fw);
      A sum = 0;
      for (I ih = h0; ih < h1; ih++)
        for (I iw = w0; iw < w1; iw++) sum += vl_val(xp[ih * sxh + iw * sxw]);
      I div = (g.kind == VL_POOL_ADAPTIVE_AVG || g.cip) ? fh * fw : (h1 - h0) * (w1 - w0);
      v = sum / (A)div;
    }
    y[i] = vl_conv<T>::f(v);
  }
}

template <typename T, typename I>
__global__ void pool_bwd(pool_geo_t<I> g, const T *__restrict__ dy, const int64_t *__restrict__ ind, T *__restrict__ dx) {
  typedef typename vl_acc<T>::type A;
  const I total = g.n * g.c * g.h * g.w;
  const I syh = g.nhwc ? g.q * g.c : g.q, syw = g.nhwc ? g.c : 1;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
    I n, c, h, w;
    split(i, g.nhwc, g.c, g.h, g.w, &n, &c, &h, &w);
    const I base = g.nhwc ? n * g.p * g.q * g.c + c : (n * g.c + c) * g.p * g.q;
    /* Candidate outputs: those whose window span can reach (h, w); each is then checked exactly. */
    I p0, p1, q0, q1; /* inclusive */
    if (g.kind == VL_POOL_ADAPTIVE_AVG) {
      p0 = (h * g.p) / g.h - 1;
      p1 = ((h + 1) * g.p + g.h - 1) / g.h;
      q0 = (w * g.q) / g.w - 1;
      q1 = ((w + 1) * g.q + g.w - 1) / g.w;
    } else {
      const I eh = (I)(g.kh - 1) * g.dh, ew = (I)(g.kw - 1) * g.dw;
      p0 = ceildiv<I>(h + g.ph - eh, g.sh);
      p1 = floordiv<I>(h + g.ph, g.sh);
      q0 = ceildiv<I>(w + g.pw - ew, g.sw);
      q1 = floordiv<I>(w + g.pw, g.sw);
    }
    if (p0 < 0) p0 = 0;
    if (q0 < 0) q0 = 0;
    if (p1 > g.p - 1) p1 = g.p - 1;
    if (q1 > g.q - 1) q1 = g.q - 1;
    A acc = 0;
    const I me = h * g.w + w;
    for (I p = p0; p <= p1; p++)
      for (I q = q0; q <= q1; q++) {
        const I o = base + p * syh + q * syw;
        if (g.kind == VL_POOL_MAX) {
          if (ind[o] == me) acc += vl_val(dy[o]);
          continue;
        }
        I h0, h1, w0, w1, fh, fw;
        window(g, 0, p, g.h, g.p, &h0, &h1, &fh);
        window(g, 1, q, g.w, g.q, &w0, &w1, &fw);
        if (h < h0 || h >= h1 || w < w0 || w >= w1) continue;
        I div = (g.kind == VL_POOL_ADAPTIVE_AVG || g.cip) ? fh * fw : (h1 - h0) * (w1 - w0);
        acc += vl_val(dy[o]) / (A)div;
      }
    dx[i] = vl_conv<T>::f(acc);
  }
}

typedef pool_geo_t<int64_t> pool_geo;

/* The same geometry in 32-bit indices (the caller has checked that every index fits). */
static pool_geo_t<int32_t> geo32(const pool_geo &g) {
  pool_geo_t<int32_t> r;
  r.n = (int32_t)g.n;
  r.c = (int32_t)g.c;
  r.h = (int32_t)g.h;
  r.w = (int32_t)g.w;
  r.p = (int32_t)g.p;
  r.q = (int32_t)g.q;
  r.kh = g.kh;
  r.kw = g.kw;
  r.sh = g.sh;
  r.sw = g.sw;
  r.ph = g.ph;
  r.pw = g.pw;
  r.dh = g.dh;
  r.dw = g.dw;
  r.kind = g.kind;
  r.nhwc = g.nhwc;
  r.cip = g.cip;
  return r;
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

/* 32-bit indices when the larger of input and output, plus one grid stride, stays below 2^31. */
static bool pool_small(const vl_pool2d_args *a, unsigned grid, int block) {
  const int64_t in = a->n * a->c * a->h * a->w, out = a->n * a->c * a->p * a->q;
  return (in > out ? in : out) + (int64_t)grid * block < ((int64_t)1 << 31);
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
  const bool small = pool_small(a, grid, block);
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  VL_DISPATCH_FLOAT(a->dtype, T, pool_name(a->kind),
                    {
                      if (small) pool_fwd<T, int32_t><<<grid, block, 0, s>>>(geo32(g), (const T *)a->x, (T *)a->y, a->indices);
                      else pool_fwd<T, int64_t><<<grid, block, 0, s>>>(g, (const T *)a->x, (T *)a->y, a->indices);
                    });
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
  const bool small = pool_small(a, grid, block);
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  VL_DISPATCH_FLOAT(a->dtype, T, pool_name(a->kind),
                    {
                      if (small) pool_bwd<T, int32_t><<<grid, block, 0, s>>>(geo32(g), (const T *)a->dy, a->indices, (T *)a->dx);
                      else pool_bwd<T, int64_t><<<grid, block, 0, s>>>(g, (const T *)a->dy, a->indices, (T *)a->dx);
                    });
  VL_LAUNCH_CHECK();
  return VL_OK;
}

extern "C" const vl_pooling_kernels vl_cuda_pooling_kernels = {
    .forward = pool_forward,
    .backward = pool_backward,
};
