/* kernels/cuda/cuda_pooling.cu: 2-D max / avg / adaptive-avg pooling and their backward on CUDA,
 * NCHW and NHWC, f32/f16/bf16 (f32 accumulation) and f64.
 *
 * One thread per output element (forward) or per input element (backward), enumerated in memory
 * order so that neighbouring threads touch neighbouring addresses in either layout. The backward
 * is a gather: each input element sums, in a fixed order, the gradients of the outputs whose window
 * covers it (max: whose recorded argmax is this element), so there are no atomics and the result is
 * deterministic. Window rules are those of kernels/cpu/cpu_pooling.c (PyTorch's).
 *
 * Max pooling records each output's argmax as its offset in the window (u8 for windows of fewer
 * than 255 cells, else i32; runtime/backend/nn_kernels.h): 1 byte per output instead of an int64 (411 MB
 * for ResNet-50's max pool at batch 256, which made its backward read 4x the bytes of dy). Channels
 * last with 16-byte aligned rows of channels (ResNet's stem) takes the vectorised kernels below:
 * a thread per 16 bytes of channels of one pixel, its window positions and offsets computed once
 * for V channels. */
#include "kernels/cuda/cuda_common.cuh"
#include "runtime/backend/nn_kernels.h"

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

/* The "no cell of the window is inside the input" offset of each argmax type. */
template <typename IX> struct pool_none;
template <> struct pool_none<uint8_t> { static constexpr int v = 255; };
template <> struct pool_none<int32_t> { static constexpr int v = -1; };

template <typename T, typename I, typename IX>
__global__ void pool_fwd(pool_geo_t<I> g, const T *__restrict__ x, T *__restrict__ y, IX *__restrict__ am) {
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
      int bi = -1;
      for (int a = 0; a < g.kh; a++) {
        I ih = p * g.sh - g.ph + (I)a * g.dh;
        if (ih < 0 || ih >= g.h) continue;
        for (int b = 0; b < g.kw; b++) {
          I iw = q * g.sw - g.pw + (I)b * g.dw;
          if (iw < 0 || iw >= g.w) continue;
          A e = vl_val(xp[ih * sxh + iw * sxw]);
          if (bi < 0) bi = a * g.kw + b; /* the window's first in-range cell */
          if (e > best || e != e) {      /* first maximum wins; NaN propagates */
            best = e;
            bi = a * g.kw + b;
          }
        }
      }
      v = best;
      am[i] = (IX)(bi < 0 ? pool_none<IX>::v : bi);
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

/* The offset of input cell (h, w) in the window of output (p, q), or -1 when a dilated window
 * steps over it. The callers' candidate ranges keep the cell within the window's extent. */
template <typename I>
VL_DEV int pool_offset(const pool_geo_t<I> &g, I h, I w, I p, I q) {
  const I dh = h + g.ph - p * g.sh, dw = w + g.pw - q * g.sw;
  if (g.dh != 1 || g.dw != 1) {
    if (dh % g.dh || dw % g.dw) return -1;
    return (int)(dh / g.dh) * g.kw + (int)(dw / g.dw);
  }
  return (int)dh * g.kw + (int)dw;
}

template <typename T, typename I, typename IX>
__global__ void pool_bwd(pool_geo_t<I> g, const T *__restrict__ dy, const IX *__restrict__ am, T *__restrict__ dx) {
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
    for (I p = p0; p <= p1; p++)
      for (I q = q0; q <= q1; q++) {
        const I o = base + p * syh + q * syw;
        if (g.kind == VL_POOL_MAX) {
          const int k = pool_offset(g, h, w, p, q);
          if (k >= 0 && (int)am[o] == k) acc += vl_val(dy[o]);
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

/* ---- max pooling, channels last, vectorised (u8 offsets, 32-bit indices) ----
 * V = 16 / sizeof(T) channels per thread: x, y, dy, dx as 16-byte vectors and V offsets as one
 * V-byte load or store. Same window rules, tie order and accumulation order as the scalar kernels. */
template <typename T, int V>
__global__ void __launch_bounds__(256) maxpool_fwd_clv(pool_geo_t<int32_t> g, const T *__restrict__ x,
                                                       T *__restrict__ y, uint8_t *__restrict__ am) {
  typedef typename vl_acc<T>::type A;
  typedef vl_vec<T, V> VT;
  typedef vl_vec<uint8_t, V> VO;
  const int32_t cv = g.c / V, total = g.n * g.p * g.q * cv;
  const VT *xv = reinterpret_cast<const VT *>(x);
  for (int32_t i = blockIdx.x * (int32_t)blockDim.x + threadIdx.x; i < total; i += (int32_t)gridDim.x * blockDim.x) {
    int32_t t = i / cv;
    const int32_t j = i - t * cv;
    const int32_t q = t % g.q;
    t /= g.q;
    const int32_t p = t % g.p, n = t / g.p;
    const VT *xp = xv + n * g.h * g.w * cv + j;
    A best[V];
    int bi[V];
#pragma unroll
    for (int k = 0; k < V; k++) best[k] = (A)-INFINITY, bi[k] = -1;
    int first = -1; /* the window's first in-range cell */
    for (int a = 0; a < g.kh; a++) {
      const int32_t ih = p * g.sh - g.ph + a * g.dh;
      if (ih < 0 || ih >= g.h) continue;
      for (int b = 0; b < g.kw; b++) {
        const int32_t iw = q * g.sw - g.pw + b * g.dw;
        if (iw < 0 || iw >= g.w) continue;
        const int off = a * g.kw + b;
        if (first < 0) first = off;
        const VT v = xp[(ih * g.w + iw) * cv];
#pragma unroll
        for (int k = 0; k < V; k++) {
          const A e = vl_val(v.v[k]);
          if (e > best[k] || e != e) best[k] = e, bi[k] = off;
        }
      }
    }
    VT yv;
    VO ov;
#pragma unroll
    for (int k = 0; k < V; k++) {
      yv.v[k] = vl_conv<T>::f(best[k]);
      const int o = bi[k] >= 0 ? bi[k] : first;
      ov.v[k] = (uint8_t)(o >= 0 ? o : 255);
    }
    reinterpret_cast<VT *>(y)[i] = yv;
    reinterpret_cast<VO *>(am)[i] = ov;
  }
}

template <typename T, int V>
__global__ void __launch_bounds__(256) maxpool_bwd_clv(pool_geo_t<int32_t> g, const T *__restrict__ dy,
                                                       const uint8_t *__restrict__ am, T *__restrict__ dx) {
  typedef typename vl_acc<T>::type A;
  typedef vl_vec<T, V> VT;
  typedef vl_vec<uint8_t, V> VO;
  const int32_t cv = g.c / V, total = g.n * g.h * g.w * cv;
  const int32_t eh = (g.kh - 1) * g.dh, ew = (g.kw - 1) * g.dw;
  for (int32_t i = blockIdx.x * (int32_t)blockDim.x + threadIdx.x; i < total; i += (int32_t)gridDim.x * blockDim.x) {
    int32_t t = i / cv;
    const int32_t j = i - t * cv;
    const int32_t w = t % g.w;
    t /= g.w;
    const int32_t h = t % g.h, n = t / g.h;
    int32_t p0 = ceildiv<int32_t>(h + g.ph - eh, g.sh), p1 = floordiv<int32_t>(h + g.ph, g.sh);
    int32_t q0 = ceildiv<int32_t>(w + g.pw - ew, g.sw), q1 = floordiv<int32_t>(w + g.pw, g.sw);
    if (p0 < 0) p0 = 0;
    if (q0 < 0) q0 = 0;
    if (p1 > g.p - 1) p1 = g.p - 1;
    if (q1 > g.q - 1) q1 = g.q - 1;
    A acc[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0;
    const int32_t base = n * g.p * g.q * cv + j;
    for (int32_t p = p0; p <= p1; p++)
      for (int32_t q = q0; q <= q1; q++) {
        const int off = pool_offset(g, h, w, p, q);
        if (off < 0) continue;
        const int32_t o = base + (p * g.q + q) * cv;
        const VO ov = reinterpret_cast<const VO *>(am)[o];
        bool any = false;
#pragma unroll
        for (int k = 0; k < V; k++) any |= ov.v[k] == off;
        if (!any) continue; /* most windows chose another cell: skip the gradient's load */
        const VT gv = reinterpret_cast<const VT *>(dy)[o];
#pragma unroll
        for (int k = 0; k < V; k++)
          if (ov.v[k] == off) acc[k] += vl_val(gv.v[k]);
      }
    VT r;
#pragma unroll
    for (int k = 0; k < V; k++) r.v[k] = vl_conv<T>::f(acc[k]);
    reinterpret_cast<VT *>(dx)[i] = r;
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

static bool aligned(const void *p, unsigned bytes) { return ((uintptr_t)p % bytes) == 0; }

/* The vectorised channels-last max pooling applies: u8 offsets, 32-bit indices, V channels per
 * 16 bytes divide C and every pointer is aligned to its vector. */
template <typename T>
static bool maxpool_clv_ok(const vl_pool2d_args *a, bool small) {
  const int V = 16 / (int)sizeof(T);
  if (a->kind != VL_POOL_MAX || !a->nhwc || !small || a->argmax_dtype != VL_U8 || a->c % V) return false;
  if (!aligned(a->argmax, (unsigned)V)) return false;
  return a->x ? aligned(a->x, 16) && aligned(a->y, 16) : aligned(a->dy, 16) && aligned(a->dx, 16);
}

template <typename T>
static void pool_forward_t(const vl_pool2d_args *a, const pool_geo &g, bool small, unsigned grid, int block,
                           cudaStream_t s, vl_cuda_state *st) {
  if (maxpool_clv_ok<T>(a, small)) {
    constexpr int V = 16 / sizeof(T);
    const int64_t total = a->n * a->p * a->q * (a->c / V);
    maxpool_fwd_clv<T, V><<<vl_grid(total, block, st, 4), block, 0, s>>>(geo32(g), (const T *)a->x, (T *)a->y,
                                                                        (uint8_t *)a->argmax);
    return;
  }
  const bool i32 = a->argmax_dtype == VL_I32;
  if (small) {
    if (i32) pool_fwd<T, int32_t, int32_t><<<grid, block, 0, s>>>(geo32(g), (const T *)a->x, (T *)a->y, (int32_t *)a->argmax);
    else pool_fwd<T, int32_t, uint8_t><<<grid, block, 0, s>>>(geo32(g), (const T *)a->x, (T *)a->y, (uint8_t *)a->argmax);
  } else {
    if (i32) pool_fwd<T, int64_t, int32_t><<<grid, block, 0, s>>>(g, (const T *)a->x, (T *)a->y, (int32_t *)a->argmax);
    else pool_fwd<T, int64_t, uint8_t><<<grid, block, 0, s>>>(g, (const T *)a->x, (T *)a->y, (uint8_t *)a->argmax);
  }
}

template <typename T>
static void pool_backward_t(const vl_pool2d_args *a, const pool_geo &g, bool small, unsigned grid, int block,
                            cudaStream_t s, vl_cuda_state *st) {
  if (maxpool_clv_ok<T>(a, small)) {
    constexpr int V = 16 / sizeof(T);
    const int64_t total = a->n * a->h * a->w * (a->c / V);
    maxpool_bwd_clv<T, V><<<vl_grid(total, block, st, 4), block, 0, s>>>(geo32(g), (const T *)a->dy,
                                                                        (const uint8_t *)a->argmax, (T *)a->dx);
    return;
  }
  const bool i32 = a->argmax_dtype == VL_I32;
  if (small) {
    if (i32) pool_bwd<T, int32_t, int32_t><<<grid, block, 0, s>>>(geo32(g), (const T *)a->dy, (const int32_t *)a->argmax, (T *)a->dx);
    else pool_bwd<T, int32_t, uint8_t><<<grid, block, 0, s>>>(geo32(g), (const T *)a->dy, (const uint8_t *)a->argmax, (T *)a->dx);
  } else {
    if (i32) pool_bwd<T, int64_t, int32_t><<<grid, block, 0, s>>>(g, (const T *)a->dy, (const int32_t *)a->argmax, (T *)a->dx);
    else pool_bwd<T, int64_t, uint8_t><<<grid, block, 0, s>>>(g, (const T *)a->dy, (const uint8_t *)a->argmax, (T *)a->dx);
  }
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
  VL_DISPATCH_FLOAT(a->dtype, T, pool_name(a->kind), pool_forward_t<T>(a, g, small, grid, block, s, st));
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
  VL_DISPATCH_FLOAT(a->dtype, T, pool_name(a->kind), pool_backward_t<T>(a, g, small, grid, block, s, st));
  VL_LAUNCH_CHECK();
  return VL_OK;
}

/* A host-side table, left out of Clang's device pass (tools/build-sm70.sh): Clang would emit a
 * const table of host function addresses on the GPU too, which ptxas refuses. nvcc keeps it in
 * both passes, as before, and emits nothing of it on the device. */
#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_pooling_kernels vl_cuda_pooling_kernels = {
    .forward = pool_forward,
    .backward = pool_backward,
};
#endif
