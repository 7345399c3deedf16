/* kernels/cuda/cuda_norm.cu: layer norm and softmax backward on CUDA, and the normalisation
 * table (batch norm is kernels/cuda/cuda_batchnorm.cu).
 *
 * Layer norm: one block per row (vectorised 16-byte loads when the row allows), f32 math (f64
 * for f64); dweight/dbias by a two-stage column reduction (partials per row chunk, then a fixed
 * order sum). Softmax backward: a block per row when inner == 1, else a thread per column.
 * Parameters and statistics are of the param type A (float, or double for f64). */
#include <math.h>

#include "kernels/cuda/cuda_norm_common.cuh"
#include "runtime/backend/nn_kernels.h"

/* kernels/cuda/cuda_batchnorm.cu */
vl_status vl_cuda_bn_forward(const vl_batchnorm_args *a);
vl_status vl_cuda_bn_backward(const vl_batchnorm_args *a);

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

/* A host-side table, left out of Clang's device pass (tools/build-sm70.sh): Clang would emit a
 * const table of host function addresses on the GPU too, which ptxas refuses. nvcc keeps it in
 * both passes, as before, and emits nothing of it on the device. */
#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_norm_kernels vl_cuda_norm_kernels = {
    .batchnorm_forward = vl_cuda_bn_forward,
    .batchnorm_backward = vl_cuda_bn_backward,
    .layernorm_forward = cuda_ln_forward,
    .layernorm_backward = cuda_ln_backward,
    .softmax_backward = cuda_softmax_backward,
};
#endif
