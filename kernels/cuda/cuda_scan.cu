/* kernels/cuda/cuda_scan.cu: inclusive scans (cumsum, cumprod) over contiguous [outer, len, inner],
 * forward or reverse (runtime/backend/kernels.h, vl_scan_args).
 *
 * Two kernels:
 *  - lines (a long line along len: a row when inner == 1, or one of few columns): one block per
 *    line, walking it in tiles of blockDim.x elements: each thread loads one element (coalesced
 *    for rows), the block scans the tile (warp shuffles, then the warps' totals in shared memory)
 *    and adds the carry of the tiles before it. A handful of long columns ([100000, 8] along dim
 *    1) would otherwise be a handful of threads walking 100000 steps each.
 *  - columns (otherwise): one thread per (outer, inner) column, walking len sequentially;
 *    adjacent threads read adjacent elements when inner > 1, so the reads coalesce.
 * Accumulation in vl_acc<T> (f32 for f16/bf16/f32, f64 for f64, int64 wrapping for integers),
 * each output rounded once. The tile scan adds in another order than the CPU's sequential walk,
 * so float results agree with the CPU within rounding, integers exactly. */
#include "kernels/cuda/cuda_common.cuh"

#define VL_SCAN_BLOCK 256
#define VL_SCAN_ROW_MIN 256   /* lines at least this long get a block each ... */
#define VL_SCAN_FEW_COLS 8192 /* ... when they are rows, or columns fewer than this */

/* a op b; integers wrap (unsigned arithmetic: a signed overflow is undefined in C++) */
template <typename A>
VL_DEV A vl_scan_combine(bool prod, A a, A b) { return prod ? a * b : a + b; }
template <>
VL_DEV int64_t vl_scan_combine<int64_t>(bool prod, int64_t a, int64_t b) {
  const unsigned long long x = (unsigned long long)a, y = (unsigned long long)b;
  return (int64_t)(prod ? x * y : x + y);
}

template <typename T>
__global__ void vl_scan_cols(const T *__restrict__ in, T *__restrict__ out, int64_t ncols, int64_t len,
                             int64_t inner, bool prod, bool reverse) {
  typedef typename vl_acc<T>::type A;
  for (int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c < ncols;
       c += (int64_t)gridDim.x * blockDim.x) {
    const int64_t o = c / inner, i = c - o * inner;
    const int64_t base = o * len * inner + i;
    A acc = prod ? (A)1 : (A)0;
    for (int64_t k = 0; k < len; k++) {
      const int64_t l = reverse ? len - 1 - k : k;
      acc = vl_scan_combine<A>(prod, acc, (A)vl_val(in[base + l * inner]));
      out[base + l * inner] = vl_conv<T>::f(acc);
    }
  }
}

/* Inclusive scan of one value per thread across the block; `sh` holds 32 A. */
template <typename A>
VL_DEV A vl_block_scan(A v, bool prod, A *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    A u = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v = vl_scan_combine<A>(prod, u, v);
  }
  if (lane == 31) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < nwarps ? sh[lane] : (prod ? (A)1 : (A)0);
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      A u = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w = vl_scan_combine<A>(prod, u, w);
    }
    if (lane < nwarps) sh[lane] = w;
  }
  __syncthreads();
  if (warp > 0) v = vl_scan_combine<A>(prod, sh[warp - 1], v);
  return v;
}

template <typename T>
__global__ void vl_scan_lines(const T *__restrict__ in, T *__restrict__ out, int64_t nlines, int64_t len,
                              int64_t inner, bool prod, bool reverse) {
  typedef typename vl_acc<T>::type A;
  __shared__ A sh[32];
  __shared__ A carry_sh;
  const A ident = prod ? (A)1 : (A)0;
  for (int64_t c = blockIdx.x; c < nlines; c += gridDim.x) {
    const int64_t o = c / inner, i = c - o * inner; /* line c: element l at (o * len + l) * inner + i */
    const T *row = in + o * len * inner + i;
    T *orow = out + o * len * inner + i;
    A carry = ident;
    for (int64_t k0 = 0; k0 < len; k0 += blockDim.x) {
      const int64_t k = k0 + threadIdx.x;
      const int64_t l = reverse ? len - 1 - k : k;
      A v = k < len ? (A)vl_val(row[l * inner]) : ident;
      v = vl_block_scan<A>(v, prod, sh);
      v = vl_scan_combine<A>(prod, carry, v);
      if (k < len) orow[l * inner] = vl_conv<T>::f(v);
      if (threadIdx.x == blockDim.x - 1) carry_sh = v; /* padding lanes hold the tile total */
      __syncthreads();
      carry = carry_sh;
      __syncthreads(); /* carry_sh and sh are rewritten by the next tile */
    }
  }
}

template <typename T>
static vl_status vl_scan_launch(const vl_scan_args *a, vl_cuda_state *st) {
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  const T *in = (const T *)a->in;
  T *out = (T *)a->out;
  const bool prod = a->op == VL_SCAN_PROD;
  const int64_t ncols = a->outer * a->inner;
  if (a->len >= VL_SCAN_ROW_MIN && (a->inner == 1 || ncols < VL_SCAN_FEW_COLS)) {
    const int64_t cap = (int64_t)st->sm_count * 8;
    const unsigned g = (unsigned)(ncols < cap ? ncols : cap);
    vl_scan_lines<T><<<g, VL_SCAN_BLOCK, 0, stream>>>(in, out, ncols, a->len, a->inner, prod, a->reverse);
  } else {
    vl_scan_cols<T><<<vl_grid(ncols, VL_SCAN_BLOCK, st, 4), VL_SCAN_BLOCK, 0, stream>>>(
        in, out, ncols, a->len, a->inner, prod, a->reverse);
  }
  VL_LAUNCH_CHECK();
  return VL_OK;
}

vl_status vl_cuda_scan(const vl_scan_args *a) {
  if ((unsigned)a->op >= VL_NSCAN) return vl_fail(VL_EINVAL, "scan (cuda): unknown op %d", (int)a->op);
  if (a->outer * a->inner * a->len <= 0) return VL_OK;
  VL_CUDA_ENTER(guard, st, a->ex);
  switch (a->dtype) {
    VL_DT_CASE(VL_F32, float, T, return vl_scan_launch<T>(a, st))
    VL_DT_CASE(VL_F16, __half, T, return vl_scan_launch<T>(a, st))
    VL_DT_CASE(VL_BF16, __nv_bfloat16, T, return vl_scan_launch<T>(a, st))
    VL_DT_CASE(VL_F64, double, T, return vl_scan_launch<T>(a, st))
    VL_DT_CASE(VL_I32, int32_t, T, return vl_scan_launch<T>(a, st))
    VL_DT_CASE(VL_I64, int64_t, T, return vl_scan_launch<T>(a, st))
    default: break;
  }
  return vl_fail(VL_EDTYPE, "scan (cuda): dtype %s is not supported", vl_dtype_name(a->dtype));
}
