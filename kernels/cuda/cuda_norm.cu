/* kernels/cuda/cuda_norm.cu: batch norm, layer norm and softmax backward on CUDA.
 *
 * Batch norm goes through cuDNN (CUDNN_BATCHNORM_SPATIAL) for NCHW f32/f16/bf16 with int-sized
 * shapes. Channels-last (NHWC), f64 (gradient checks), shapes beyond int, and any configuration
 * cuDNN reports as unsupported use our own kernels with the same semantics. (cuDNN's NHWC batch
 * norm, SPATIAL or SPATIAL_PERSISTENT, measured 5.4x slower than its NCHW one on the H200:
 * 2.71 vs 0.50 ms forward + backward for 256x64x28x28 f32, which made a channels-last ResNet-18
 * step 2.1x slower than the NCHW one although every NHWC convolution was faster; PyTorch runs
 * its own kernels for channels-last too.) Our kernels: per-channel sums over [outer, c, inner] (NCHW: [n, c, hw]; NHWC: [n*hw, c, 1])
 * split over blocks into partials that a second kernel combines in a fixed order, so results are
 * deterministic. Statistics use sums shifted by a sample of the channel (x at (0, ci, 0)), which
 * keeps the one-pass variance free of catastrophic cancellation.
 *
 * Layer norm: one block per row (vectorised 16-byte loads when the row allows), f32 math (f64
 * for f64); dweight/dbias by a two-stage column reduction (partials per row chunk, then a fixed
 * order sum). Softmax backward: a block per row when inner == 1, else a thread per column.
 * Parameters and statistics are of the param type A (float, or double for f64). */
#include <limits.h>
#include <math.h>

#include "kernels/cuda/cuda_cudnn.cuh"
#include "kernels/nn_kernels.h"

#define VL_NORM_BLOCK 256
#define VL_NORM_MAX_GRID ((int64_t)1 << 20)

struct vl_norm_add {
  template <typename A>
  VL_DEV A operator()(A a, A b) const { return a + b; }
};

VL_DEV float vl_norm_rsqrt(float v) { return rsqrtf(v); }
VL_DEV double vl_norm_rsqrt(double v) { return 1.0 / sqrt(v); }
__host__ __device__ __forceinline__ int64_t vl_norm_min(int64_t a, int64_t b) { return a < b ? a : b; }

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
static bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Threads per row: a power of two covering `items` per-thread steps, 32..512. */
static int row_threads(int64_t items) {
  int t = 32;
  while (t < items && t < 512) t *= 2;
  return t;
}

template <typename A>
__global__ void vl_norm_fill(A *p, int64_t n, A v) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) p[i] = v;
}

/* ======================= batch norm: own kernels ======================= */

/* Per-channel partial sums of one split of the reduction. Forward (BW false): v1 = x - K,
 * v2 = (x - K)^2 with K = x at (0, ci, 0). Backward: v1 = dy, v2 = dy * (x - mean). */
template <typename T, typename A, bool BW>
VL_DEV void bn_terms(const T *x, const T *dy, int64_t idx, A K, A &s1, A &s2) {
  A d = vl_val(x[idx]) - K;
  if (BW) {
    A g = vl_val(dy[idx]);
    s1 += g;
    s2 += g * d;
  } else {
    s1 += d;
    s2 += d * d;
  }
}

/* inner > 1: block (channel, split) over the flattened index r = o * inner + i. */
template <typename T, typename A, bool BW>
__global__ void bn_sums_rows(const T *x, const T *dy, const A *mean, int64_t c, int64_t inner, int64_t m,
                             int64_t chunk, A *p1, A *p2) {
  __shared__ A sh[32];
  const int64_t ci = blockIdx.x, split = blockIdx.y;
  const A K = BW ? mean[ci] : vl_val(x[ci * inner]);
  const int64_t r1 = vl_norm_min(m, (split + 1) * chunk);
  A s1 = 0, s2 = 0;
  for (int64_t r = split * chunk + threadIdx.x; r < r1; r += blockDim.x) {
    int64_t o = r / inner, i = r - o * inner;
    bn_terms<T, A, BW>(x, dy, (o * c + ci) * inner + i, K, s1, s2);
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
                           A *p2) {
  __shared__ A sh1[8][33], sh2[8][33];
  const int64_t ci = blockIdx.x * 32 + threadIdx.x, split = blockIdx.y;
  A s1 = 0, s2 = 0;
  if (ci < c) {
    const A K = BW ? mean[ci] : vl_val(x[ci]);
    const int64_t r1 = vl_norm_min(rows, (split + 1) * chunk);
    for (int64_t r = split * chunk + threadIdx.y; r < r1; r += blockDim.y) bn_terms<T, A, BW>(x, dy, r * c + ci, K, s1, s2);
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

/* y = (x - mean) * invstd * w + b; in eval `sc` holds the variance (invstd computed here).
 * I is the index type: uint32_t when numel fits (the channel of element i is (i / inner) % c,
 * and 64-bit division costs several times the 32-bit one on the GPU). */
template <typename T, typename A, typename I>
__global__ void bn_apply(const T *x, T *y, I numel, I c, I inner, const A *mean, const A *sc, bool sc_is_var, A eps,
                         const A *w, const A *b) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < numel; i += (I)gridDim.x * blockDim.x) {
    const I ci = (inner == 1 ? i : i / inner) % c;
    const A is = sc_is_var ? vl_norm_rsqrt(sc[ci] + eps) : sc[ci];
    A v = (vl_val(x[i]) - mean[ci]) * is;
    if (w) v *= w[ci];
    if (b) v += b[ci];
    y[i] = vl_conv<T>::f(v);
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

/* dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)) = k1 (dy - k2 - (x - mean) k3). */
template <typename T, typename A, typename I>
__global__ void bn_bw_dx(const T *x, const T *dy, T *dx, I numel, I c, I inner, const A *mean, const A *k1,
                         const A *k2, const A *k3) {
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < numel; i += (I)gridDim.x * blockDim.x) {
    const I ci = (inner == 1 ? i : i / inner) % c;
    const A d = vl_val(x[i]) - mean[ci];
    dx[i] = vl_conv<T>::f(k1[ci] * (vl_val(dy[i]) - k2[ci] - d * k3[ci]));
  }
}

#include "kernels/cuda/cuda_norm_cl.cuh"

/* Launches the partial sums; returns the number of splits used. Workspace: 2*splits*c partials
 * followed by 3*c per-channel values. */
template <typename T, typename A, bool BW>
static vl_status bn_sums(const vl_batchnorm_args *a, vl_cuda_state *st, const A *mean, A *ws, int *splits_out) {
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
  if (cl && bn_clv_ok<T>(a, BW)) {
    constexpr int V = 16 / (int)sizeof(T);
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
    bn_sums_clv<T, A, BW, V><<<dim3((unsigned)gx, (unsigned)vsplits), dim3(bx, by), shmem, s>>>(
        (const T *)a->x, (const T *)a->dy, mean, c, m, vchunk, q1, q2);
    VL_LAUNCH_CHECK();
    *splits_out = (int)vsplits;
    return VL_OK;
  }
  if (cl) {
    dim3 grid((unsigned)xblocks, (unsigned)splits), block(32, 8);
    bn_sums_cl<T, A, BW><<<grid, block, 0, s>>>((const T *)a->x, (const T *)a->dy, mean, c, m, chunk, p1, p2);
  } else {
    dim3 grid((unsigned)c, (unsigned)splits);
    bn_sums_rows<T, A, BW><<<grid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (const T *)a->dy, mean, c, inner, m, chunk,
                                                          p1, p2);
  }
  VL_LAUNCH_CHECK();
  *splits_out = (int)splits;
  return VL_OK;
}

template <typename T>
static vl_status bn_forward_own(const vl_batchnorm_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const int64_t c = a->c, inner = a->nhwc ? 1 : a->hw, m = a->n * a->hw, numel = m * c;
  const A *mean = (const A *)a->running_mean, *sc = (const A *)a->running_var;
  if (a->training) {
    void *wsv = NULL;
    VL_TRY(vl_cuda_workspace(st, a->ex.stream, &wsv));
    A *ws = (A *)wsv;
    int splits = 1;
    VL_TRY((bn_sums<T, A, false>(a, st, NULL, ws, &splits)));
    A *mo = a->save_mean ? (A *)a->save_mean : ws + 2 * (int64_t)splits * c;
    A *io = a->save_invstd ? (A *)a->save_invstd : ws + (2 * (int64_t)splits + 1) * c;
    bn_stats_final<T, A><<<bn_final_grid(c), VL_NORM_BLOCK, 0, s>>>(
        (const T *)a->x, c, inner, m, splits, ws, ws + (int64_t)splits * c, (A)a->eps, (A)a->momentum, mo, io,
        (A *)a->running_mean, (A *)a->running_var);
    VL_LAUNCH_CHECK();
    mean = mo;
    sc = io;
  }
  if (bn_clv_ok<T>(a, false)) {
    constexpr int V = 16 / (int)sizeof(T);
    const int64_t nvec = numel / V, cv = c / V;
    const unsigned vgrid = vl_grid(nvec, VL_NORM_BLOCK, st, 4);
    if (nvec + (int64_t)vgrid * VL_NORM_BLOCK <= (int64_t)UINT32_MAX)
      bn_apply_clv<T, A, uint32_t, V><<<vgrid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (T *)a->y, (uint32_t)nvec,
                                                                     (uint32_t)cv, mean, sc, !a->training, (A)a->eps,
                                                                     (const A *)a->weight, (const A *)a->bias);
    else
      bn_apply_clv<T, A, int64_t, V><<<vgrid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (T *)a->y, nvec, cv, mean, sc,
                                                                    !a->training, (A)a->eps, (const A *)a->weight,
                                                                    (const A *)a->bias);
    VL_LAUNCH_CHECK();
    return VL_OK;
  }
  /* 32-bit indices while i + the grid stride cannot wrap. */
  const unsigned grid = vl_grid(numel, VL_NORM_BLOCK, st, 4);
  if (numel + (int64_t)grid * VL_NORM_BLOCK <= (int64_t)UINT32_MAX)
    bn_apply<T, A, uint32_t><<<grid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (T *)a->y, (uint32_t)numel, (uint32_t)c,
                                                           (uint32_t)inner, mean, sc, !a->training, (A)a->eps,
                                                           (const A *)a->weight, (const A *)a->bias);
  else
    bn_apply<T, A, int64_t><<<grid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (T *)a->y, numel, c, inner, mean, sc,
                                                          !a->training, (A)a->eps, (const A *)a->weight,
                                                          (const A *)a->bias);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

template <typename T>
static vl_status bn_backward_own(const vl_batchnorm_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const int64_t c = a->c, inner = a->nhwc ? 1 : a->hw, m = a->n * a->hw, numel = m * c;
  void *wsv = NULL;
  VL_TRY(vl_cuda_workspace(st, a->ex.stream, &wsv));
  A *ws = (A *)wsv;
  const A *mean = (const A *)a->save_mean;
  int splits = 1;
  VL_TRY((bn_sums<T, A, true>(a, st, mean, ws, &splits)));
  A *k = ws + 2 * (int64_t)splits * c;
  bn_bw_final<A><<<bn_final_grid(c), VL_NORM_BLOCK, 0, s>>>(
      c, m, splits, ws, ws + (int64_t)splits * c, (const A *)a->save_invstd, (const A *)a->weight, (A *)a->dweight,
      (A *)a->dbias, k, k + c, k + 2 * c);
  VL_LAUNCH_CHECK();
  if (!a->dx) return VL_OK;
  if (bn_clv_ok<T>(a, true)) {
    constexpr int V = 16 / (int)sizeof(T);
    const int64_t nvec = numel / V, cv = c / V;
    const unsigned vgrid = vl_grid(nvec, VL_NORM_BLOCK, st, 4);
    if (nvec + (int64_t)vgrid * VL_NORM_BLOCK <= (int64_t)UINT32_MAX)
      bn_bw_dx_clv<T, A, uint32_t, V><<<vgrid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (const T *)a->dy, (T *)a->dx,
                                                                     (uint32_t)nvec, (uint32_t)cv, mean, k, k + c,
                                                                     k + 2 * c);
    else
      bn_bw_dx_clv<T, A, int64_t, V><<<vgrid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (const T *)a->dy, (T *)a->dx,
                                                                    nvec, cv, mean, k, k + c, k + 2 * c);
    VL_LAUNCH_CHECK();
    return VL_OK;
  }
  const unsigned grid = vl_grid(numel, VL_NORM_BLOCK, st, 4);
  if (numel + (int64_t)grid * VL_NORM_BLOCK <= (int64_t)UINT32_MAX)
    bn_bw_dx<T, A, uint32_t><<<grid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (const T *)a->dy, (T *)a->dx,
                                                           (uint32_t)numel, (uint32_t)c, (uint32_t)inner, mean, k,
                                                           k + c, k + 2 * c);
  else
    bn_bw_dx<T, A, int64_t><<<grid, VL_NORM_BLOCK, 0, s>>>((const T *)a->x, (const T *)a->dy, (T *)a->dx, numel, c,
                                                          inner, mean, k, k + c, k + 2 * c);
  VL_LAUNCH_CHECK();
  return VL_OK;
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

static vl_status cuda_bn_forward(const vl_batchnorm_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  bool done = false;
  VL_TRY(bn_cudnn(a, st, true, &done));
  if (done) return VL_OK;
  VL_DISPATCH_FLOAT(a->dtype, T, "batch_norm", return bn_forward_own<T>(a, st));
  return VL_OK;
}

static vl_status cuda_bn_backward(const vl_batchnorm_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  bool done = false;
  VL_TRY(bn_cudnn(a, st, false, &done));
  if (done) return VL_OK;
  VL_DISPATCH_FLOAT(a->dtype, T, "batch_norm_backward", return bn_backward_own<T>(a, st));
  return VL_OK;
}

/* ======================= layer norm ======================= */

template <typename T, int V, typename A>
VL_DEV void ln_load(const T *p, A (&v)[V]) {
  if (V == 1) {
    v[0] = vl_val(p[0]);
  } else {
    const vl_vec<T, V> t = *reinterpret_cast<const vl_vec<T, V> *>(p);
#pragma unroll
    for (int k = 0; k < V; k++) v[k] = vl_val(t.v[k]);
  }
}

template <typename T, int V, typename A>
VL_DEV void ln_store(T *p, const A (&v)[V]) {
  if (V == 1) {
    p[0] = vl_conv<T>::f(v[0]);
  } else {
    vl_vec<T, V> t;
#pragma unroll
    for (int k = 0; k < V; k++) t.v[k] = vl_conv<T>::f(v[k]);
    *reinterpret_cast<vl_vec<T, V> *>(p) = t;
  }
}

/* One block per row: mean, then the centred sum of squares (the row is re-read from L1/L2),
 * then y. `bc` broadcasts thread 0's results; each vl_block_reduce starts with a barrier, so a
 * new row never overwrites `bc` before every thread has read the previous value. */
template <typename T, typename A, int V>
__global__ void ln_fwd(const T *x, T *y, const A *w, const A *b, A *mean, A *rstd, int64_t rows, int64_t cols, A eps) {
  __shared__ A sh[32];
  __shared__ A bc[2];
  const int64_t step = (int64_t)blockDim.x * V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols;
    A s = 0;
    for (int64_t j = (int64_t)threadIdx.x * V; j < cols; j += step) {
      A v[V];
      ln_load<T, V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; k++) s += v[k];
    }
    s = vl_block_reduce(s, vl_norm_add(), sh);
    if (threadIdx.x == 0) bc[0] = s / (A)cols;
    __syncthreads();
    const A mu = bc[0];
    A q = 0;
    for (int64_t j = (int64_t)threadIdx.x * V; j < cols; j += step) {
      A v[V];
      ln_load<T, V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; k++) q += (v[k] - mu) * (v[k] - mu);
    }
    q = vl_block_reduce(q, vl_norm_add(), sh);
    if (threadIdx.x == 0) {
      const A rs = vl_norm_rsqrt(q / (A)cols + eps);
      bc[1] = rs;
      mean[r] = mu;
      rstd[r] = rs;
    }
    __syncthreads();
    const A rs = bc[1];
    for (int64_t j = (int64_t)threadIdx.x * V; j < cols; j += step) {
      A v[V];
      ln_load<T, V>(xr + j, v);
#pragma unroll
      for (int k = 0; k < V; k++) v[k] = (v[k] - mu) * rs * (w ? w[j + k] : (A)1) + (b ? b[j + k] : (A)0);
      ln_store<T, V>(y + r * cols + j, v);
    }
  }
}

/* dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * w, per row. */
template <typename T, typename A, int V>
__global__ void ln_bwd_dx(const T *x, const T *dy, T *dx, const A *w, const A *mean, const A *rstd, int64_t rows,
                          int64_t cols) {
  __shared__ A sh[32];
  __shared__ A bc[2];
  const int64_t step = (int64_t)blockDim.x * V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols, *gr = dy + r * cols;
    const A mu = mean[r], rs = rstd[r];
    A s1 = 0, s2 = 0;
    for (int64_t j = (int64_t)threadIdx.x * V; j < cols; j += step) {
      A v[V], g[V];
      ln_load<T, V>(xr + j, v);
      ln_load<T, V>(gr + j, g);
#pragma unroll
      for (int k = 0; k < V; k++) {
        const A gw = g[k] * (w ? w[j + k] : (A)1);
        s1 += gw;
        s2 += gw * (v[k] - mu) * rs;
      }
    }
    s1 = vl_block_reduce(s1, vl_norm_add(), sh);
    s2 = vl_block_reduce(s2, vl_norm_add(), sh);
    if (threadIdx.x == 0) {
      bc[0] = s1 / (A)cols;
      bc[1] = s2 / (A)cols;
    }
    __syncthreads();
    const A m1 = bc[0], m2 = bc[1];
    for (int64_t j = (int64_t)threadIdx.x * V; j < cols; j += step) {
      A v[V], g[V];
      ln_load<T, V>(xr + j, v);
      ln_load<T, V>(gr + j, g);
#pragma unroll
      for (int k = 0; k < V; k++) v[k] = rs * (g[k] * (w ? w[j + k] : (A)1) - m1 - (v[k] - mu) * rs * m2);
      ln_store<T, V>(dx + r * cols + j, v);
    }
  }
}

/* Stage 1 of dweight/dbias: block (32 columns, 8 row lanes) sums one chunk of rows. */
template <typename T, typename A>
__global__ void ln_bwd_cols(const T *x, const T *dy, const A *mean, const A *rstd, int64_t rows, int64_t cols,
                            int64_t chunk, A *pw, A *pb) {
  __shared__ A shw[8][33], shb[8][33];
  const int64_t col = blockIdx.x * 32 + threadIdx.x, ch = blockIdx.y;
  A sw = 0, sb = 0;
  if (col < cols) {
    const int64_t r1 = vl_norm_min(rows, (ch + 1) * chunk);
    for (int64_t r = ch * chunk + threadIdx.y; r < r1; r += blockDim.y) {
      const A g = vl_val(dy[r * cols + col]);
      sw += g * (vl_val(x[r * cols + col]) - mean[r]) * rstd[r];
      sb += g;
    }
  }
  shw[threadIdx.y][threadIdx.x] = sw;
  shb[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    for (int k = 1; k < (int)blockDim.y; k++) {
      sw += shw[k][threadIdx.x];
      sb += shb[k][threadIdx.x];
    }
    if (pw) pw[ch * cols + col] = sw;
    if (pb) pb[ch * cols + col] = sb;
  }
}

/* Stage 2: chunk partials summed in order. */
template <typename A>
__global__ void ln_bwd_cols_final(int64_t cols, int64_t chunks, const A *pw, const A *pb, A *dw, A *db) {
  const int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (col >= cols) return;
  A sw = 0, sb = 0;
  for (int64_t k = 0; k < chunks; k++) {
    sw += pw[k * cols + col];
    sb += pb[k * cols + col];
  }
  if (dw) dw[col] = sw;
  if (db) db[col] = sb;
}

template <typename T>
static bool ln_vec_ok(const vl_layernorm_args *a, const void *p0, const void *p1, const void *p2) {
  return a->cols % (int64_t)(16 / sizeof(T)) == 0 && aligned16(p0) && aligned16(p1) && (!p2 || aligned16(p2));
}

template <typename T>
static vl_status ln_forward_t(const vl_layernorm_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  constexpr int V = 16 / sizeof(T);
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const bool vec = ln_vec_ok<T>(a, a->x, a->y, NULL);
  const int threads = row_threads(cdiv(a->cols, vec ? V : 1));
  const unsigned grid = (unsigned)vl_norm_min(a->rows, VL_NORM_MAX_GRID);
  const T *x = (const T *)a->x;
  T *y = (T *)a->y;
  const A *w = (const A *)a->weight, *b = (const A *)a->bias;
  if (vec) ln_fwd<T, A, V><<<grid, threads, 0, s>>>(x, y, w, b, (A *)a->mean, (A *)a->rstd, a->rows, a->cols, (A)a->eps);
  else ln_fwd<T, A, 1><<<grid, threads, 0, s>>>(x, y, w, b, (A *)a->mean, (A *)a->rstd, a->rows, a->cols, (A)a->eps);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

template <typename T>
static vl_status ln_backward_t(const vl_layernorm_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  constexpr int V = 16 / sizeof(T);
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const T *x = (const T *)a->x, *dy = (const T *)a->dy;
  const A *w = (const A *)a->weight, *mean = (const A *)a->mean, *rstd = (const A *)a->rstd;
  const bool vec = ln_vec_ok<T>(a, a->x, a->dy, a->dx);
  const int threads = row_threads(cdiv(a->cols, vec ? V : 1));
  const unsigned grid = (unsigned)vl_norm_min(a->rows, VL_NORM_MAX_GRID);
  if (vec) ln_bwd_dx<T, A, V><<<grid, threads, 0, s>>>(x, dy, (T *)a->dx, w, mean, rstd, a->rows, a->cols);
  else ln_bwd_dx<T, A, 1><<<grid, threads, 0, s>>>(x, dy, (T *)a->dx, w, mean, rstd, a->rows, a->cols);
  VL_LAUNCH_CHECK();
  if (!a->dweight && !a->dbias) return VL_OK;
  const int64_t ctiles = cdiv(a->cols, 32);
  int64_t chunks = cdiv(4 * (int64_t)st->sm_count, ctiles);
  const int64_t by_rows = cdiv(a->rows, 32), by_ws = (int64_t)(VL_CUDA_WORKSPACE_BYTES / sizeof(A)) / (2 * a->cols);
  if (chunks > by_rows) chunks = by_rows;
  if (chunks > by_ws) chunks = by_ws;
  if (chunks > 65535) chunks = 65535;
  if (chunks < 1) chunks = 1;
  const int64_t chunk = cdiv(a->rows, chunks);
  dim3 cgrid((unsigned)ctiles, (unsigned)chunks), cblock(32, 8);
  if (chunks == 1) {
    /* One chunk: the partials are the results (A is the param type). */
    ln_bwd_cols<T, A><<<cgrid, cblock, 0, s>>>(x, dy, mean, rstd, a->rows, a->cols, chunk, (A *)a->dweight,
                                               (A *)a->dbias);
    VL_LAUNCH_CHECK();
    return VL_OK;
  }
  void *wsv = NULL;
  VL_TRY(vl_cuda_workspace(st, a->ex.stream, &wsv));
  A *pw = (A *)wsv, *pb = pw + chunks * a->cols;
  ln_bwd_cols<T, A><<<cgrid, cblock, 0, s>>>(x, dy, mean, rstd, a->rows, a->cols, chunk, pw, pb);
  VL_LAUNCH_CHECK();
  ln_bwd_cols_final<A><<<(unsigned)cdiv(a->cols, VL_NORM_BLOCK), VL_NORM_BLOCK, 0, s>>>(
      a->cols, chunks, pw, pb, (A *)a->dweight, (A *)a->dbias);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

static vl_status cuda_ln_forward(const vl_layernorm_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  VL_DISPATCH_FLOAT(a->dtype, T, "layer_norm", return ln_forward_t<T>(a, st));
  return VL_OK;
}

static vl_status cuda_ln_backward(const vl_layernorm_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  VL_DISPATCH_FLOAT(a->dtype, T, "layer_norm_backward", return ln_backward_t<T>(a, st));
  return VL_OK;
}

/* ======================= softmax backward ======================= */

/* inner == 1: a block per row. softmax: dx = y (dy - sum(dy y)); log: dx = dy - exp(y) sum(dy). */
template <typename T, typename A>
__global__ void smb_rows(const T *y, const T *dy, T *dx, int64_t rows, int64_t len, bool log_) {
  __shared__ A sh[32];
  __shared__ A bc;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *yr = y + r * len, *gr = dy + r * len;
    A s = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const A g = vl_val(gr[j]);
      s += log_ ? g : g * vl_val(yr[j]);
    }
    s = vl_block_reduce(s, vl_norm_add(), sh);
    if (threadIdx.x == 0) bc = s;
    __syncthreads();
    s = bc;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
      const A g = vl_val(gr[j]), v = vl_val(yr[j]);
      dx[r * len + j] = vl_conv<T>::f(log_ ? g - exp(v) * s : v * (g - s));
    }
  }
}

/* inner > 1: a thread per (outer, inner) column, coalesced over inner. */
template <typename T, typename A>
__global__ void smb_cols(const T *y, const T *dy, T *dx, int64_t outer, int64_t len, int64_t inner, bool log_) {
  const int64_t n = outer * inner;
  for (int64_t idx = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; idx < n; idx += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = idx / inner, i = idx - o * inner, base = o * len * inner + i;
    A s = 0;
    for (int64_t l = 0; l < len; l++) {
      const A g = vl_val(dy[base + l * inner]);
      s += log_ ? g : g * vl_val(y[base + l * inner]);
    }
    for (int64_t l = 0; l < len; l++) {
      const int64_t k = base + l * inner;
      const A g = vl_val(dy[k]), v = vl_val(y[k]);
      dx[k] = vl_conv<T>::f(log_ ? g - exp(v) * s : v * (g - s));
    }
  }
}

template <typename T>
static vl_status smb_t(const vl_softmax_bw_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  cudaStream_t s = (cudaStream_t)a->ex.stream;
  const T *y = (const T *)a->y, *dy = (const T *)a->dy;
  if (a->inner == 1) {
    const unsigned grid = (unsigned)vl_norm_min(a->outer, VL_NORM_MAX_GRID);
    smb_rows<T, A><<<grid, row_threads(a->len), 0, s>>>(y, dy, (T *)a->dx, a->outer, a->len, a->log);
  } else {
    smb_cols<T, A><<<vl_grid(a->outer * a->inner, VL_NORM_BLOCK, st, 4), VL_NORM_BLOCK, 0, s>>>(
        y, dy, (T *)a->dx, a->outer, a->len, a->inner, a->log);
  }
  VL_LAUNCH_CHECK();
  return VL_OK;
}

static vl_status cuda_softmax_backward(const vl_softmax_bw_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  VL_DISPATCH_FLOAT(a->dtype, T, "softmax_backward", return smb_t<T>(a, st));
  return VL_OK;
}

extern "C" const vl_norm_kernels vl_cuda_norm_kernels = {
    .batchnorm_forward = cuda_bn_forward,
    .batchnorm_backward = cuda_bn_backward,
    .layernorm_forward = cuda_ln_forward,
    .layernorm_backward = cuda_ln_backward,
    .softmax_backward = cuda_softmax_backward,
};
