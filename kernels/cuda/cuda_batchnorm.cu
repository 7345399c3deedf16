/* kernels/cuda/cuda_batchnorm.cu: batch norm on CUDA, plain and fused with ReLU and a residual
 * (y = act(bn(x) + r), runtime/backend/nn_kernels.h), forward and backward.
 *
 * Plain batch norm goes through cuDNN (CUDNN_BATCHNORM_SPATIAL) for NCHW f32/f16/bf16 with
 * int-sized shapes. Channels-last (NHWC), f64 (gradient checks), shapes beyond int, the fused
 * forms, and any configuration cuDNN reports as unsupported use our own kernels with the same
 * semantics. (cuDNN's NHWC batch norm, SPATIAL or SPATIAL_PERSISTENT, measured 5.4x slower than
 * its NCHW one on the H200: 2.71 vs 0.50 ms forward + backward for 256x64x28x28 f32, which made a
 * channels-last ResNet-18 step 2.1x slower than the NCHW one although every NHWC convolution was
 * faster; PyTorch runs its own kernels for channels-last too.) Our kernels: per-channel sums over
 * [outer, c, inner] (NCHW: [n, c, hw]; NHWC: [n*hw, c, 1]) split over blocks into partials that a
 * second kernel combines in a fixed order, so results are deterministic. Statistics use sums
 * shifted by a sample of the channel (x at (0, ci, 0)), which keeps the one-pass variance free of
 * catastrophic cancellation. Then one elementwise pass (apply, or dx).
 *
 * The fused forms fold the ReLU and the residual add into those passes. Passes over the
 * activation (R read, W written; the composed ops for comparison):
 *   relu(bn(x))       forward 2R + 1W (composed 3R + 2W), backward 4R + 1W (composed 6R + 2W):
 *                     the backward recomputes the ReLU's mask from x in both of its passes;
 *   relu(bn(x) + r)   forward 3R + 1W (composed 5R + 3W), backward 5R + 2W (composed 6R + 2W):
 *                     the sums pass reads dy, y and x and writes dr = the masked dy, which the dx
 *                     pass reads in place of dy.
 * The recomputed mask is the forward's y > 0 only if the forward computed y with the same
 * arithmetic: bn_value rounds every operation as written (no FMA contraction, which the compiler
 * could choose differently in different kernels), and the fused forms never take cuDNN's
 * forward. Parameters and statistics are of the param type A (float, or double for f64). */
#include <limits.h>
#include <math.h>

#include "kernels/cuda/cuda_cudnn.cuh"
#include "kernels/cuda/cuda_norm_common.cuh"
#include "runtime/backend/nn_kernels.h"

template <typename A>
__global__ void vl_norm_fill(A *p, int64_t n, A v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}

/* ======================= batch norm: own kernels ======================= */

VL_DEV float bn_mul(float a, float b) { return __fmul_rn(a, b); }
VL_DEV double bn_mul(double a, double b) { return __dmul_rn(a, b); }
VL_DEV float bn_add(float a, float b) { return __fadd_rn(a, b); }
VL_DEV double bn_add(double a, double b) { return __dadd_rn(a, b); }
VL_DEV float bn_sub(float a, float b) { return __fsub_rn(a, b); }
VL_DEV double bn_sub(double a, double b) { return __dsub_rn(a, b); }

/* The forward's value before residual and activation, ((x - mu) is) w + b, each step rounded. */
template <typename A>
VL_DEV A bn_value(A x, A mu, A is, A w, A b) { return bn_add(bn_mul(bn_mul(bn_sub(x, mu), is), w), b); }

/* The fused ReLU, with the relu op's NaN rule (NaN stays NaN). */
template <typename A>
VL_DEV A bn_act(A v, bool relu) { return relu && !(v > (A)0 || v != v) ? (A)0 : v; }

/* Whether the ReLU passes the gradient of a forward value v: its output in T is > 0. */
template <typename T, typename A>
VL_DEV bool bn_keep(A v) { return vl_val(vl_conv<T>::f(v)) > (A)0; }

/* How the backward masks dy: not at all, by the recomputed forward value (x, the saved mean and
 * invstd, w and b: NULL is 1 and 0), or by y (the forward's output; the masked dy is then
 * written to dr by the sums kernels). */
enum { BN_MASK_NONE = 0, BN_MASK_X, BN_MASK_Y };
template <typename T, typename A>
struct bn_mask {
  int mode;
  const A *invstd, *w, *b;
  const T *y;
  T *dr;
};

/* Per-channel partial sums of one split of the reduction. Forward (BW false): v1 = x - K,
 * v2 = (x - K)^2 with K = x at (0, ci, 0). Backward: v1 = g, v2 = g * (x - mean) with g the
 * masked dy; is, w, b are channel ci's for BN_MASK_X. */
template <typename T, typename A, bool BW>
VL_DEV void bn_terms(const T *x, const T *dy, int64_t idx, A K, A &s1, A &s2, const bn_mask<T, A> &mk, A is, A w,
                     A b) {
  const A xv = vl_val(x[idx]), d = xv - K;
  if (BW) {
    A g = vl_val(dy[idx]);
    if (mk.mode == BN_MASK_X) {
      if (!bn_keep<T>(bn_value(xv, K, is, w, b))) g = 0;
    } else if (mk.mode == BN_MASK_Y) {
      if (!(vl_val(mk.y[idx]) > (A)0)) g = 0;
      mk.dr[idx] = vl_conv<T>::f(g);
    }
    s1 += g;
    s2 += g * d;
  } else {
    s1 += d;
    s2 += d * d;
  }
}

/* Channel ci's parameters of the recomputed mask. */
template <typename T, typename A>
VL_DEV void bn_mask_params(const bn_mask<T, A> &mk, int64_t ci, A &is, A &w, A &b) {
  is = 1, w = 1, b = 0;
  if (mk.mode != BN_MASK_X) return;
  is = mk.invstd[ci];
  if (mk.w) w = mk.w[ci];
  if (mk.b) b = mk.b[ci];
}

/* inner > 1: block (channel, split) over the flattened index r = o * inner + i. */
template <typename T, typename A, bool BW>
__global__ void bn_sums_rows(const T *x, const T *dy, const A *mean, int64_t c, int64_t inner, int64_t m,
                             int64_t chunk, A *p1, A *p2, bn_mask<T, A> mk) {
  __shared__ A sh[32];
  const int64_t ci = blockIdx.x, split = blockIdx.y;
  const A K = BW ? mean[ci] : vl_val(x[ci * inner]);
  A is, w, b;
  bn_mask_params(mk, ci, is, w, b);
  const int64_t r1 = vl_norm_min(m, (split + 1) * chunk);
  A s1 = 0, s2 = 0;
  for (int64_t r = split * chunk + threadIdx.x; r < r1; r += blockDim.x) {
    int64_t o = r / inner, i = r - o * inner;
    bn_terms<T, A, BW>(x, dy, (o * c + ci) * inner + i, K, s1, s2, mk, is, w, b);
  }
  s1 = vl_block_reduce(s1, vl_norm_add(), sh);
  s2 = vl_block_reduce(s2, vl_norm_add(), sh);
  if (threadIdx.x == 0) {
    p1[split * c + ci] = s1;
    p2[split * c + ci] = s2;
  }
}

/* inner == 1 (channels last): block (32 channels, 8 row lanes), coalesced along channels. */
template <typename T, typename A, bool BW>
__global__ void bn_sums_cl(const T *x, const T *dy, const A *mean, int64_t c, int64_t rows, int64_t chunk, A *p1,
                           A *p2, bn_mask<T, A> mk) {
  __shared__ A sh1[8][33], sh2[8][33];
  const int64_t ci = blockIdx.x * 32 + threadIdx.x, split = blockIdx.y;
  A s1 = 0, s2 = 0;
  if (ci < c) {
    const A K = BW ? mean[ci] : vl_val(x[ci]);
    A is, w, b;
    bn_mask_params(mk, ci, is, w, b);
    const int64_t r1 = vl_norm_min(rows, (split + 1) * chunk);
    for (int64_t r = split * chunk + threadIdx.y; r < r1; r += blockDim.y)
      bn_terms<T, A, BW>(x, dy, r * c + ci, K, s1, s2, mk, is, w, b);
  }
  sh1[threadIdx.y][threadIdx.x] = s1;
  sh2[threadIdx.y][threadIdx.x] = s2;
  __syncthreads();
  if (threadIdx.y == 0 && ci < c) {
    for (int k = 1; k < (int)blockDim.y; k++) {
      s1 += sh1[k][threadIdx.x];
      s2 += sh2[k][threadIdx.x];
    }
    p1[split * c + ci] = s1;
    p2[split * c + ci] = s2;
  }
}

/* The partials of channel ci summed by one warp: lane l takes splits l, l + 32, ..., then a fixed
 * butterfly: the same order on every run. (One thread per channel summing hundreds of partials
 * in a row took 2 ms of a ResNet-50 step once the vectorised sums used more splits.) Every lane
 * returns the totals. */
template <typename A>
VL_DEV void bn_warp_sums(int64_t c, int64_t ci, int splits, const A *p1, const A *p2, A &s1, A &s2) {
  const int lane = threadIdx.x & 31;
  s1 = 0;
  s2 = 0;
  for (int s = lane; s < splits; s += 32) {
    s1 += p1[s * c + ci];
    s2 += p2[s * c + ci];
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    s1 += __shfl_xor_sync(0xffffffffu, s1, o);
    s2 += __shfl_xor_sync(0xffffffffu, s2, o);
  }
}

/* Launch geometry of the finals: a warp per channel. */
static unsigned bn_final_grid(int64_t c) { return (unsigned)cdiv(c * 32, VL_NORM_BLOCK); }

template <typename T, typename A>
__global__ void bn_stats_final(const T *x, int64_t c, int64_t inner, int64_t m, int splits, const A *p1, const A *p2,
                               A eps, A momentum, A *mean, A *invstd, A *rm, A *rv) {
  const int64_t ci = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  if (ci >= c) return; /* whole warps: blockDim is a multiple of 32 */
  A s1, s2;
  bn_warp_sums(c, ci, splits, p1, p2, s1, s2);
  if ((threadIdx.x & 31) != 0) return;
  const A mk = s1 / (A)m;
  A var = s2 / (A)m - mk * mk;
  if (var < 0) var = 0;
  const A mu = vl_val(x[ci * inner]) + mk;
  mean[ci] = mu;
  invstd[ci] = vl_norm_rsqrt(var + eps);
  if (rm) {
    rm[ci] = ((A)1 - momentum) * rm[ci] + momentum * mu;
    rv[ci] = ((A)1 - momentum) * rv[ci] + momentum * var * (A)m / (A)(m - 1);
  }
}

/* y = act(bn(x) + r); in eval `sc` holds the variance (invstd computed here).
 * I is the index type: uint32_t when numel fits (the channel of element i is (i / inner) % c,
 * and 64-bit division costs several times the 32-bit one on the GPU). */
template <typename T, typename A, typename I>
__global__ void bn_apply(const T *x, T *y, I numel, I c, I inner, const A *mean, const A *sc, bool sc_is_var, A eps,
                         const A *w, const A *b, const T *r, bool relu) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < numel; i += (I)gridDim.x * blockDim.x) {
    const I ci = (inner == 1 ? i : i / inner) % c;
    const A is = sc_is_var ? vl_norm_rsqrt(sc[ci] + eps) : sc[ci];
    A v = bn_value(vl_val(x[i]), mean[ci], is, w ? w[ci] : (A)1, b ? b[ci] : (A)0);
    if (r) v += vl_val(r[i]);
    y[i] = vl_conv<T>::f(bn_act(v, relu));
  }
}

/* dweight = invstd * sum(dy (x - mean)), dbias = sum(dy); coefficients of dx. */
template <typename A>
__global__ void bn_bw_final(int64_t c, int64_t m, int splits, const A *p1, const A *p2, const A *invstd, const A *w,
                            A *dw, A *db, A *k1, A *k2, A *k3) {
  const int64_t ci = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5;
  if (ci >= c) return;
  A sdy, sdyx;
  bn_warp_sums(c, ci, splits, p1, p2, sdy, sdyx);
  if ((threadIdx.x & 31) != 0) return;
  const A is = invstd[ci];
  if (dw) dw[ci] = sdyx * is;
  if (db) db[ci] = sdy;
  k1[ci] = (w ? w[ci] : (A)1) * is;
  k2[ci] = sdy / (A)m;
  k3[ci] = is * is * sdyx / (A)m;
}

/* dx = w invstd (g - mean(g) - xhat mean(g xhat)) = k1 (g - k2 - (x - mean) k3), g = dy masked
 * by the recomputed forward value for BN_MASK_X (BN_MASK_Y hands in dr as dy). */
template <typename T, typename A, typename I>
__global__ void bn_bw_dx(const T *x, const T *dy, T *dx, I numel, I c, I inner, const A *mean, const A *k1,
                         const A *k2, const A *k3, bn_mask<T, A> mk) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < numel; i += (I)gridDim.x * blockDim.x) {
    const I ci = (inner == 1 ? i : i / inner) % c;
    const A xv = vl_val(x[i]);
    A g = vl_val(dy[i]);
    if (mk.mode == BN_MASK_X && !bn_keep<T>(bn_value(xv, mean[ci], mk.invstd[ci], mk.w ? mk.w[ci] : (A)1,
                                                      mk.b ? mk.b[ci] : (A)0)))
      g = 0;
    dx[i] = vl_conv<T>::f(k1[ci] * (g - k2[ci] - (xv - mean[ci]) * k3[ci]));
  }
}

#include "kernels/cuda/cuda_norm_cl.cuh"

/* Launches the partial sums; returns the number of splits used. Workspace: 2*splits*c partials
 * followed by 3*c per-channel values. */
template <typename T, typename A, bool BW>
static vl_status bn_sums(const vl_batchnorm_args *a, vl_cuda_state *st, const A *mean, A *ws, int *splits_out,
                        const bn_mask<T, A> &mk) {
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const bool cl = a->nhwc;
  const int64_t inner = cl ? 1 : a->hw, m = a->n * a->hw, c = a->c;
  const int64_t xblocks = cl ? cdiv(c, 32) : c;
  const int64_t units = m; /* per channel: rows (channels last) or flattened (o, i) positions */
  int64_t splits = cdiv(4 * (int64_t)st->sm_count, xblocks);
  const int64_t by_work = cdiv(units, cl ? 64 : 2048);
  if (splits > by_work) splits = by_work;
  const int64_t by_ws = ((int64_t)(VL_CUDA_WORKSPACE_BYTES / sizeof(A)) / c - 3) / 2;
  if (by_ws < 1)
    return vl_fail(VL_EINVAL, "batch_norm (cuda): %lld channels exceed the kernel workspace", (long long)c);
  if (splits > by_ws) splits = by_ws;
  if (splits > 65535) splits = 65535;
  if (splits < 1) splits = 1;
  const int64_t chunk = cdiv(units, splits);
  A *p1 = ws, *p2 = ws + splits * c;
  constexpr int V = 16 / (int)sizeof(T);
  if (!cl && bn_vec_ok<T>(a, BW)) {
    /* NCHW: the same splits over each channel's vectors. */
    const int64_t iv = inner / V, units_v = m / V, vchunk = cdiv(units_v, splits);
    bn_sums_rowsv<T, A, BW, V><<<dim3((unsigned)c, (unsigned)splits), VL_NORM_BLOCK, 0, s>>>(
        (const T *)a->x, (const T *)a->dy, mean, c, iv, units_v, vchunk, p1, p2, mk);
    VL_LAUNCH_CHECK();
    *splits_out = (int)splits;
    return VL_OK;
  }
  if (cl && bn_vec_ok<T>(a, BW)) {
    const int64_t cv = c / V;
    const unsigned bx = (unsigned)vl_norm_min(cv, 256), by = 256 / bx;
    const int64_t gx = cdiv(cv, bx);
    int64_t vsplits = cdiv(4 * (int64_t)st->sm_count, gx);
    if (vsplits > cdiv(units, 4 * (int64_t)by)) vsplits = cdiv(units, 4 * (int64_t)by);
    if (vsplits > by_ws) vsplits = by_ws;
    if (vsplits > 65535) vsplits = 65535;
    if (vsplits < 1) vsplits = 1;
    const int64_t vchunk = cdiv(units, vsplits);
    A *q1 = ws, *q2 = ws + vsplits * c;
    const size_t shmem = 2 * (size_t)by * bx * V * sizeof(A);
    const dim3 grid((unsigned)gx, (unsigned)vsplits), block(bx, by);
    const T *x = (const T *)a->x, *dy = (const T *)a->dy;
    if constexpr (BW) {
      if (mk.mode == BN_MASK_X)
        bn_sums_clv<T, A, BW, V, BN_MASK_X><<<grid, block, shmem, s>>>(x, dy, mean, c, m, vchunk, q1, q2, mk);
      else if (mk.mode == BN_MASK_Y)
        bn_sums_clv<T, A, BW, V, BN_MASK_Y><<<grid, block, shmem, s>>>(x, dy, mean, c, m, vchunk, q1, q2, mk);
      else
        bn_sums_clv<T, A, BW, V, BN_MASK_NONE><<<grid, block, shmem, s>>>(x, dy, mean, c, m, vchunk, q1, q2, mk);
    } else {
      bn_sums_clv<T, A, BW, V, BN_MASK_NONE><<<grid, block, shmem, s>>>(x, dy, mean, c, m, vchunk, q1, q2, mk);
    }
    VL_LAUNCH_CHECK();
    *splits_out = (int)vsplits;
    return VL_OK;
  }
  if (cl) {
    dim3 grid((unsigned)xblocks, (unsigned)splits), block(32, 8);
    bn_sums_cl<T, A, BW><<<grid, block, 0, s>>>((const T *)a->x, (const T *)a->dy, mean, c, m, chunk, p1, p2, mk);
  } else {
    dim3 grid((unsigned)c, (unsigned)splits);
    bn_sums_rows<T, A, BW><<<grid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (const T *)a->dy, mean, c, inner, m, chunk,
                                                          p1, p2, mk);
  }
  VL_LAUNCH_CHECK();
  *splits_out = (int)splits;
  return VL_OK;
}

/* Launches an elementwise pass (apply or dx) over numel elements: the vector kernels when they
 * apply, else the scalar ones; 32-bit indices while i + the grid stride cannot wrap. */
template <typename T, typename A>
struct bn_pass_args {
  const T *x, *dy, *r;
  T *out;
  const A *mean, *sc, *w, *b; /* apply: mean, invstd (or var), weight, bias; dx: mean, k1, k2, k3 */
  bool sc_is_var, relu;
  A eps;
  bn_mask<T, A> mk;
};

template <typename T, typename A, typename I, bool DX>
static void bn_pass_scalar(const bn_pass_args<T, A> &p, I numel, I c, I inner, unsigned grid, cudaStream_t s) {
  if (DX)
    bn_bw_dx<T, A, I><<<grid, VL_NORM_BLOCK, 0, s>>>(p.x, p.dy, p.out, numel, c, inner, p.mean, p.sc, p.w, p.b, p.mk);
  else
    bn_apply<T, A, I><<<grid, VL_NORM_BLOCK, 0, s>>>(p.x, p.out, numel, c, inner, p.mean, p.sc, p.sc_is_var, p.eps,
                                                     p.w, p.b, p.r, p.relu);
}

template <typename T, typename A, typename I, bool DX>
static void bn_pass_nchwv(const bn_pass_args<T, A> &p, I nvec, I iv, I c, unsigned grid, cudaStream_t s) {
  constexpr int V = 16 / (int)sizeof(T);
  if (DX)
    bn_bw_dx_v<T, A, I, V><<<grid, VL_NORM_BLOCK, 0, s>>>(p.x, p.dy, p.out, nvec, iv, c, p.mean, p.sc, p.w, p.b, p.mk);
  else
    bn_apply_v<T, A, I, V><<<grid, VL_NORM_BLOCK, 0, s>>>(p.x, p.out, nvec, iv, c, p.mean, p.sc, p.sc_is_var, p.eps,
                                                          p.w, p.b, p.r, p.relu);
}

/* Channels last: blocks of (bx channel vectors, by rows) over splits of the rows, enough blocks
 * for 4 waves of the device. */
template <typename T, typename A, bool DX>
static void bn_pass_clv(const vl_batchnorm_args *a, vl_cuda_state *st, const bn_pass_args<T, A> &p, cudaStream_t s) {
  constexpr int V = 16 / (int)sizeof(T);
  const int64_t rows = a->n * a->hw, cv = a->c / V;
  const unsigned bx = (unsigned)vl_norm_min(cv, 256), by = VL_NORM_BLOCK / bx;
  const int64_t gx = cdiv(cv, bx), waves = (int64_t)st->sm_count * (st->max_threads_per_sm / VL_NORM_BLOCK) * 4;
  int64_t gy = cdiv(waves, gx);
  if (gy > cdiv(rows, by)) gy = cdiv(rows, by);
  if (gy > 65535) gy = 65535;
  if (gy < 1) gy = 1;
  const int64_t chunk = cdiv(rows, gy);
  const dim3 grid((unsigned)gx, (unsigned)gy), block(bx, by);
  if (DX)
    if (p.mk.mode == BN_MASK_X)
      bn_bw_dx_clv<T, A, V, true><<<grid, block, 0, s>>>(p.x, p.dy, p.out, rows, cv, chunk, p.mean, p.sc, p.w, p.b, p.mk);
    else
      bn_bw_dx_clv<T, A, V, false><<<grid, block, 0, s>>>(p.x, p.dy, p.out, rows, cv, chunk, p.mean, p.sc, p.w, p.b,
                                                          p.mk);
  else
    bn_apply_clv<T, A, V><<<grid, block, 0, s>>>(p.x, p.out, rows, cv, chunk, p.mean, p.sc, p.sc_is_var, p.eps, p.w,
                                                 p.b, p.r, p.relu);
}

template <typename T, typename A, bool DX>
static vl_status bn_pass(const vl_batchnorm_args *a, vl_cuda_state *st, const bn_pass_args<T, A> &p) {
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const int64_t c = a->c, inner = a->nhwc ? 1 : a->hw, numel = a->n * a->hw * c;
  if (bn_vec_ok<T>(a, DX) && a->nhwc) {
    bn_pass_clv<T, A, DX>(a, st, p, s);
  } else if (bn_vec_ok<T>(a, DX)) {
    constexpr int V = 16 / (int)sizeof(T);
    const int64_t nvec = numel / V, iv = inner / V;
    const unsigned grid = vl_grid(nvec, VL_NORM_BLOCK, st, 4);
    if (nvec + (int64_t)grid * VL_NORM_BLOCK <= (int64_t)UINT32_MAX)
      bn_pass_nchwv<T, A, uint32_t, DX>(p, (uint32_t)nvec, (uint32_t)iv, (uint32_t)c, grid, s);
    else
      bn_pass_nchwv<T, A, int64_t, DX>(p, nvec, iv, c, grid, s);
  } else {
    const unsigned grid = vl_grid(numel, VL_NORM_BLOCK, st, 4);
    if (numel + (int64_t)grid * VL_NORM_BLOCK <= (int64_t)UINT32_MAX)
      bn_pass_scalar<T, A, uint32_t, DX>(p, (uint32_t)numel, (uint32_t)c, (uint32_t)inner, grid, s);
    else
      bn_pass_scalar<T, A, int64_t, DX>(p, numel, c, inner, grid, s);
  }
  VL_LAUNCH_CHECK();
  return VL_OK;
}

template <typename T>
static vl_status bn_forward_own(const vl_batchnorm_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const int64_t c = a->c, inner = a->nhwc ? 1 : a->hw, m = a->n * a->hw;
  const A *mean = (const A *)a->running_mean, *sc = (const A *)a->running_var;
  if (a->training) {
    void *wsv = NULL;
    VL_TRY(vl_cuda_workspace(st, a->ex.stream, &wsv));
    A *ws = (A *)wsv;
    int splits = 1;
    const bn_mask<T, A> none = {BN_MASK_NONE, NULL, NULL, NULL, NULL, NULL};
    VL_TRY((bn_sums<T, A, false>(a, st, NULL, ws, &splits, none)));
    A *mo = a->save_mean ? (A *)a->save_mean : ws + 2 * (int64_t)splits * c;
    A *io = a->save_invstd ? (A *)a->save_invstd : ws + (2 * (int64_t)splits + 1) * c;
    bn_stats_final<T, A><<<bn_final_grid(c), VL_NORM_BLOCK, 0, s>>>(
        (const T *)a->x, c, inner, m, splits, ws, ws + (int64_t)splits * c, (A)a->eps, (A)a->momentum, mo, io,
        (A *)a->running_mean, (A *)a->running_var);
    VL_LAUNCH_CHECK();
    mean = mo;
    sc = io;
  }
  bn_pass_args<T, A> p = {};
  p.x = (const T *)a->x;
  p.r = (const T *)a->r;
  p.out = (T *)a->y;
  p.mean = mean;
  p.sc = sc;
  p.w = (const A *)a->weight;
  p.b = (const A *)a->bias;
  p.sc_is_var = !a->training;
  p.relu = a->act == VL_BN_ACT_RELU;
  p.eps = (A)a->eps;
  return bn_pass<T, A, false>(a, st, p);
}

template <typename T>
static vl_status bn_backward_own(const vl_batchnorm_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const int64_t c = a->c, m = a->n * a->hw;
  void *wsv = NULL;
  VL_TRY(vl_cuda_workspace(st, a->ex.stream, &wsv));
  A *ws = (A *)wsv;
  const A *mean = (const A *)a->save_mean;
  bn_mask<T, A> mk = {BN_MASK_NONE, (const A *)a->save_invstd, (const A *)a->weight, (const A *)a->bias,
                      (const T *)a->y, (T *)a->dr};
  if (a->act == VL_BN_ACT_RELU) mk.mode = a->y ? BN_MASK_Y : BN_MASK_X;
  int splits = 1;
  VL_TRY((bn_sums<T, A, true>(a, st, mean, ws, &splits, mk)));
  A *k = ws + 2 * (int64_t)splits * c;
  bn_bw_final<A><<<bn_final_grid(c), VL_NORM_BLOCK, 0, s>>>(
      c, m, splits, ws, ws + (int64_t)splits * c, (const A *)a->save_invstd, (const A *)a->weight, (A *)a->dweight,
      (A *)a->dbias, k, k + c, k + 2 * c);
  VL_LAUNCH_CHECK();
  if (!a->dx) return VL_OK;
  bn_pass_args<T, A> p = {};
  p.x = (const T *)a->x;
  p.dy = mk.mode == BN_MASK_Y ? (const T *)a->dr : (const T *)a->dy; /* dr: the masked dy */
  p.out = (T *)a->dx;
  p.mean = mean;
  p.sc = k;
  p.w = k + c;
  p.b = k + 2 * c;
  p.mk = mk;
  if (mk.mode == BN_MASK_Y) p.mk.mode = BN_MASK_NONE;
  return bn_pass<T, A, true>(a, st, p);
}

/* ======================= batch norm: cuDNN ======================= */

struct vl_bn_desc {
  cudnnTensorDescriptor_t x = nullptr, p = nullptr;
  ~vl_bn_desc() {
    if (x) (void)cudnnDestroyTensorDescriptor(x);
    if (p) (void)cudnnDestroyTensorDescriptor(p);
  }
};

/* Statuses that mean "this configuration is not for cuDNN": use our kernels instead. */
static bool cudnn_declines(cudnnStatus_t s) {
  int cat = CUDNN_STATUS_CATEGORY((int)s);
  return cat == CUDNN_STATUS_NOT_SUPPORTED || cat == CUDNN_STATUS_BAD_PARAM;
}

static bool bn_cudnn_eligible(const vl_batchnorm_args *a) {
  if (a->nhwc) return false; /* see the top of this file */
  if (a->act != VL_BN_ACT_NONE || a->r || a->dr) return false; /* the fused forms: ours */
  if (a->dtype != VL_F32 && a->dtype != VL_F16 && a->dtype != VL_BF16) return false;
  return a->n <= INT_MAX && a->c <= INT_MAX && a->hw <= INT_MAX && a->n * a->c * a->hw <= INT_MAX;
}

static cudnnStatus_t bn_desc_make(const vl_batchnorm_args *a, cudnnBatchNormMode_t mode, vl_bn_desc *d) {
  cudnnDataType_t dt = a->dtype == VL_F16 ? CUDNN_DATA_HALF : a->dtype == VL_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  cudnnStatus_t s = cudnnCreateTensorDescriptor(&d->x);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnCreateTensorDescriptor(&d->p);
  /* [n, c, hw, 1]: the spatial dims only matter as a count. */
  if (s == CUDNN_STATUS_SUCCESS)
    s = cudnnSetTensor4dDescriptor(d->x, CUDNN_TENSOR_NCHW, dt, (int)a->n, (int)a->c, (int)a->hw, 1);
  if (s == CUDNN_STATUS_SUCCESS) s = cudnnDeriveBNTensorDescriptor(d->p, d->x, mode);
  return s;
}

/* Ones (scale) and zeros (bias, or unwanted parameter gradients) in the workspace when needed. */
static vl_status bn_param_scratch(const vl_batchnorm_args *a, vl_cuda_state *st, float **ones, float **scratch) {
  void *ws = NULL;
  VL_TRY(vl_cuda_workspace(st, a->ex.stream, &ws));
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  *ones = (float *)ws;
  *scratch = *ones + a->c;
  vl_norm_fill<float><<<vl_grid(a->c, VL_NORM_BLOCK, st, 1), VL_NORM_BLOCK, 0, s>>>(*ones, a->c, 1.0f);
  VL_LAUNCH_CHECK();
  vl_norm_fill<float><<<vl_grid(2 * a->c, VL_NORM_BLOCK, st, 1), VL_NORM_BLOCK, 0, s>>>(*scratch, 2 * a->c, 0.0f);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

/* Runs the forward (fwd) or backward through cuDNN; *done stays false when cuDNN declines. */
static vl_status bn_cudnn(const vl_batchnorm_args *a, vl_cuda_state *st, bool fwd, bool *done) {
  *done = false;
  if (!bn_cudnn_eligible(a)) return VL_OK;
  cudnnHandle_t h;
  VL_TRY(vl_cudnn_handle(a->ex.device, a->ex.stream, &h));
  const void *w = a->weight, *b = a->bias;
  void *dw = a->dweight, *db = a->dbias;
  if (!w || (fwd && !b) || (!fwd && (!dw || !db))) {
    float *ones, *scratch;
    VL_TRY(bn_param_scratch(a, st, &ones, &scratch));
    if (!w) w = ones;
    if (!b) b = scratch;
    if (!dw) dw = scratch;
    if (!db) db = scratch + a->c;
  }
  const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL;
  const float one = 1.0f, zero = 0.0f;
  vl_bn_desc d;
  cudnnStatus_t s = bn_desc_make(a, mode, &d);
  if (s == CUDNN_STATUS_SUCCESS) {
    if (!fwd)
      s = cudnnBatchNormalizationBackward(h, mode, &one, &zero, &one, &zero, d.x, a->x, d.x, a->dy, d.x, a->dx, d.p, w,
                                          dw, db, a->eps, a->save_mean, a->save_invstd);
    else if (a->training)
      s = cudnnBatchNormalizationForwardTraining(h, mode, &one, &zero, d.x, a->x, d.x, a->y, d.p, w, b, a->momentum,
                                                 a->running_mean, a->running_var, a->eps, a->save_mean,
                                                 a->save_invstd);
    else
      s = cudnnBatchNormalizationForwardInference(h, mode, &one, &zero, d.x, a->x, d.x, a->y, d.p, w, b,
                                                  a->running_mean, a->running_var, a->eps);
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    *done = true;
    return VL_OK;
  }
  if (!cudnn_declines(s))
    return vl_fail(VL_ECUDNN, "%s:%d: cuDNN batch norm %s (%s, %lldx%lldx%lld nchw) failed: %s", __FILE__, __LINE__,
                   fwd ? "forward" : "backward", vl_dtype_name(a->dtype), (long long)a->n, (long long)a->c,
                   (long long)a->hw, cudnnGetErrorString(s));
  return VL_OK;
}

vl_status vl_cuda_bn_forward(const vl_batchnorm_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  bool done = false;
  VL_TRY(bn_cudnn(a, st, true, &done));
  if (done) return VL_OK;
  VL_DISPATCH_FLOAT(a->dtype, T, "batch_norm", return bn_forward_own<T>(a, st));
  return VL_OK;
}

vl_status vl_cuda_bn_backward(const vl_batchnorm_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  bool done = false;
  VL_TRY(bn_cudnn(a, st, false, &done));
  if (done) return VL_OK;
  VL_DISPATCH_FLOAT(a->dtype, T, "batch_norm_backward", return bn_backward_own<T>(a, st));
  return VL_OK;
}
