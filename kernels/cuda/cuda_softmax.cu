/* kernels/cuda/cuda_softmax.cu: softmax / log-softmax over contiguous [outer, len, inner].
 *
 * One read pass computes the row maximum m and s = sum exp(x - m) online, chunk by chunk
 * (rescaling s when m grows), a second pass writes; each thread loads a chunk of elements before
 * using any, so enough loads are in flight to stream at memory speed. Math in float (double for f64). The special values follow the
 * CPU's two-pass formula exactly: a NaN anywhere in a row, a row of -inf, or a row whose maximum
 * is +inf all give NaN (exp(inf - inf) contributes NaN; -inf elements contribute 0 unless the
 * whole row is -inf). Rows: a warp each when short, a block each when long; inner > 1: a thread
 * per (outer, inner) column, coalesced over inner. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"

#define VL_SM_WARP_BLOCK 256
#define VL_SM_ROW_BLOCK 512
#define VL_SM_WARP_MAX_LEN (128 * VL_SM_CHUNK) /* 4 chunks a lane */
#define VL_SM_CHUNK 8 /* elements each thread loads before using any: loads in flight */

template <typename C>
struct vl_sm_state {
  C m, s;
};

/* Folds a chunk of values (absent ones are -inf) into the state: the chunk's maximum first, then
 * independent exps, so a chunk costs one rescale rather than a dependent chain per element. */
template <typename C>
VL_DEV void vl_sm_fold(vl_sm_state<C> &st, const C (&x)[VL_SM_CHUNK]) {
  C m = st.m;
#pragma unroll
  for (int j = 0; j < VL_SM_CHUNK; j++) m = x[j] > m ? x[j] : m; /* NaN never wins */
  C s = st.m == (C)-INFINITY ? st.s : st.s * exp(st.m - m);
#pragma unroll
  for (int j = 0; j < VL_SM_CHUNK; j++) s += x[j] == (C)-INFINITY ? (C)0 : exp(x[j] - m);
  st.m = m;
  st.s = s;
}

template <typename C>
VL_DEV vl_sm_state<C> vl_sm_merge(vl_sm_state<C> a, vl_sm_state<C> b) {
  vl_sm_state<C> r;
  r.m = a.m > b.m ? a.m : b.m;
  r.s = (a.m == (C)-INFINITY ? a.s : a.s * exp(a.m - r.m)) +
        (b.m == (C)-INFINITY ? b.s : b.s * exp(b.m - r.m));
  return r;
}

template <typename C>
VL_DEV C vl_sm_out(C x, vl_sm_state<C> st, bool log_) {
  if (st.m == (C)-INFINITY) return (C)NAN; /* a row of -inf (or NaN) */
  return log_ ? x - st.m - log(st.s) : exp(x - st.m) / st.s;
}

/* Butterfly: every lane ends with the same state (the merge is symmetric bit for bit). */
template <typename C>
VL_DEV vl_sm_state<C> vl_sm_warp_merge(vl_sm_state<C> st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    vl_sm_state<C> other;
    other.m = __shfl_xor_sync(0xffffffffu, st.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, st.s, o);
    st = vl_sm_merge(st, other);
  }
  return st;
}

/* One row (or column: step `inner`) of `len` elements, traversed by `nthr` threads of which this
 * is thread `t`: element l of a chunk is l0 + j * nthr + t. */
template <typename T, typename C>
VL_DEV vl_sm_state<C> vl_sm_scan(const T *p, int64_t len, int64_t inner, int t, int nthr) {
  vl_sm_state<C> st = {(C)-INFINITY, (C)0};
  for (int64_t l0 = 0; l0 < len; l0 += (int64_t)nthr * VL_SM_CHUNK) {
    C x[VL_SM_CHUNK];
#pragma unroll
    for (int j = 0; j < VL_SM_CHUNK; j++) {
      const int64_t l = l0 + (int64_t)j * nthr + t;
      x[j] = l < len ? (C)vl_val(p[l * inner]) : (C)-INFINITY;
    }
    vl_sm_fold(st, x);
  }
  return st;
}

template <typename T, typename C>
VL_DEV void vl_sm_write(const T *p, T *q, int64_t len, int64_t inner, int t, int nthr,
                        vl_sm_state<C> st, bool log_) {
  for (int64_t l0 = 0; l0 < len; l0 += (int64_t)nthr * VL_SM_CHUNK) {
    C x[VL_SM_CHUNK];
#pragma unroll
    for (int j = 0; j < VL_SM_CHUNK; j++) {
      const int64_t l = l0 + (int64_t)j * nthr + t;
      x[j] = l < len ? (C)vl_val(p[l * inner]) : (C)0;
    }
#pragma unroll
    for (int j = 0; j < VL_SM_CHUNK; j++) {
      const int64_t l = l0 + (int64_t)j * nthr + t;
      if (l < len) q[l * inner] = vl_conv<T>::f(vl_sm_out(x[j], st, log_));
    }
  }
}

/* Short rows (len <= NCH * 32 * VL_SM_CHUNK): a warp per row, the row held in registers between
 * the two passes, so it is read from memory once. */
/* At most 64 registers for 4 chunks of floats (unbounded, ptxas takes 118 and occupancy halves);
 * doubles need the registers. */
template <typename T, int NCH>
__global__ void __launch_bounds__(VL_SM_WARP_BLOCK, (NCH >= 4 && sizeof(T) <= 4) ? 4 : 1)
    vl_softmax_warp(const T *in, T *out, int64_t rows, int64_t len, bool log_) {
  typedef typename vl_acc<T>::type C;
  const int lane = threadIdx.x & 31;
  const int64_t wstep = (int64_t)gridDim.x * (VL_SM_WARP_BLOCK / 32);
  for (int64_t row = (int64_t)blockIdx.x * (VL_SM_WARP_BLOCK / 32) + (threadIdx.x >> 5); row < rows;
       row += wstep) {
    const T *p = in + row * len;
    T *q = out + row * len;
    C x[NCH][VL_SM_CHUNK];
#pragma unroll
    for (int c = 0; c < NCH; c++)
#pragma unroll
      for (int j = 0; j < VL_SM_CHUNK; j++) {
        const int l = (c * VL_SM_CHUNK + j) * 32 + lane;
        x[c][j] = l < len ? (C)vl_val(p[l]) : (C)-INFINITY;
      }
    vl_sm_state<C> st = {(C)-INFINITY, (C)0};
#pragma unroll
    for (int c = 0; c < NCH; c++) vl_sm_fold(st, x[c]);
    st = vl_sm_warp_merge(st);
#pragma unroll
    for (int c = 0; c < NCH; c++)
#pragma unroll
      for (int j = 0; j < VL_SM_CHUNK; j++) {
        const int l = (c * VL_SM_CHUNK + j) * 32 + lane;
        if (l < len) q[l] = vl_conv<T>::f(vl_sm_out(x[c][j], st, log_));
      }
  }
}

template <typename T>
__global__ void __launch_bounds__(VL_SM_ROW_BLOCK)
    vl_softmax_block(const T *in, T *out, int64_t rows, int64_t len, bool log_) {
  typedef typename vl_acc<T>::type C;
  __shared__ vl_sm_state<C> sh[VL_SM_ROW_BLOCK / 32];
  __shared__ vl_sm_state<C> total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T *p = in + row * len;
    vl_sm_state<C> a = vl_sm_warp_merge(vl_sm_scan<T, C>(p, len, 1, threadIdx.x, VL_SM_ROW_BLOCK));
    if (lane == 0) sh[warp] = a;
    __syncthreads();
    if (warp == 0) {
      vl_sm_state<C> w = lane < VL_SM_ROW_BLOCK / 32 ? sh[lane] : vl_sm_state<C>{(C)-INFINITY, (C)0};
      w = vl_sm_warp_merge(w);
      if (lane == 0) total = w;
    }
    __syncthreads();
    vl_sm_write<T, C>(p, out + row * len, len, 1, threadIdx.x, VL_SM_ROW_BLOCK, total, log_);
    __syncthreads(); /* `total` and `sh` are rewritten by the next row */
  }
}

/* inner > 1: a thread per (outer, inner) column; neighbouring threads read neighbouring columns. */
template <typename T>
__global__ void __launch_bounds__(VL_SM_WARP_BLOCK)
    vl_softmax_cols(const T *in, T *out, int64_t outer, int64_t len, int64_t inner, bool log_) {
  typedef typename vl_acc<T>::type C;
  const int64_t n = outer * inner, step = (int64_t)gridDim.x * VL_SM_WARP_BLOCK;
  for (int64_t c = (int64_t)blockIdx.x * VL_SM_WARP_BLOCK + threadIdx.x; c < n; c += step) {
    const int64_t o = c / inner, i = c - o * inner;
    const T *p = in + o * len * inner + i;
    vl_sm_state<C> st = vl_sm_scan<T, C>(p, len, inner, 0, 1);
    vl_sm_write<T, C>(p, out + o * len * inner + i, len, inner, 0, 1, st, log_);
  }
}

vl_status vl_cuda_softmax(const vl_softmax_args *a) {
  const int64_t rows = a->outer * a->inner;
  if (rows <= 0 || a->len <= 0) return VL_OK;
  VL_CUDA_ENTER(guard, st, a->ex);
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  const char *name = a->log ? "log_softmax" : "softmax";
  VL_DISPATCH_FLOAT(a->dtype, T, name, {
    const T *in = (const T *)a->in;
    T *out = (T *)a->out;
    if (a->inner > 1) {
      unsigned g = vl_grid(rows, VL_SM_WARP_BLOCK, st, 2);
      vl_softmax_cols<T><<<g, VL_SM_WARP_BLOCK, 0, stream>>>(in, out, a->outer, a->len, a->inner, a->log);
    } else if (a->len <= VL_SM_WARP_MAX_LEN) {
      unsigned g = vl_grid(rows * 32, VL_SM_WARP_BLOCK, st, 2);
      if (a->len <= 32 * VL_SM_CHUNK)
        vl_softmax_warp<T, 1><<<g, VL_SM_WARP_BLOCK, 0, stream>>>(in, out, rows, a->len, a->log);
      else if (a->len <= 64 * VL_SM_CHUNK)
        vl_softmax_warp<T, 2><<<g, VL_SM_WARP_BLOCK, 0, stream>>>(in, out, rows, a->len, a->log);
      else
        vl_softmax_warp<T, 4><<<g, VL_SM_WARP_BLOCK, 0, stream>>>(in, out, rows, a->len, a->log);
    } else {
      unsigned g = vl_grid(rows * VL_SM_ROW_BLOCK, VL_SM_ROW_BLOCK, st, 2);
      vl_softmax_block<T><<<g, VL_SM_ROW_BLOCK, 0, stream>>>(in, out, rows, a->len, a->log);
    }
  });
  VL_LAUNCH_CHECK();
  return VL_OK;
}
