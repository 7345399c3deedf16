/* kernels/cuda/cuda_reduce.cu: reductions over contiguous [outer, len, inner] (kernels.h).
 *
 * A reducer R (below) says how to fold one element into an accumulator, combine two
 * accumulators, and finalise/store one output. Three kernels drive it:
 *   vl_red_warp   inner == 1, short rows: one warp per row.
 *   vl_red_block  inner == 1, long rows: a block per (row, chunk) with 16-byte vector loads and
 *                 4 independent accumulators per thread; with outer == 1 this is the full-tensor
 *                 path, split into about one wave of chunks.
 *   vl_red_cols   inner > 1: threads over inner (coalesced), rows of the block over len.
 * When a row is split into G > 1 chunks, each chunk writes its accumulator to the stream's
 * workspace and vl_red_finish combines the G partials of each output in a fixed order, so
 * results are deterministic (no atomics). */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"

#define VL_RED_BLOCK 256
#define VL_RED_WARP_MAX_LEN 1024

/* Integers accumulate in int64 with wrapping (defined on uint64). */
VL_DEV float vl_radd(float a, float b) { return a + b; }
VL_DEV double vl_radd(double a, double b) { return a + b; }
VL_DEV int64_t vl_radd(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
VL_DEV float vl_rmul(float a, float b) { return a * b; }
VL_DEV double vl_rmul(double a, double b) { return a * b; }
VL_DEV int64_t vl_rmul(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }

enum { VL_RMODE_SUM = 0, VL_RMODE_MEAN, VL_RMODE_NORM0, VL_RMODE_NORM1, VL_RMODE_NORM2, VL_RMODE_NORMP };

/* SUM / MEAN (IS_NORM false) and the p-norms for finite p (IS_NORM true; p = 0 counts the
 * nonzeros, as torch.norm and the CPU). */
template <typename T, bool IS_NORM>
struct vl_red_sum {
  typedef typename vl_acc<T>::type A;
  typedef A acc_t;
  typedef typename std::conditional<std::is_same<A, int64_t>::value, int64_t, T>::type O;
  int mode;
  A p;
  int64_t len;
  VL_DEV A init() const { return (A)0; }
  VL_DEV A step(A a, T x, int64_t) const {
    A v = vl_val(x);
    if constexpr (IS_NORM) {
      v = v < (A)0 ? -v : v;
      if (mode == VL_RMODE_NORM0) v = v != (A)0 ? (A)1 : (A)0;
      else if (mode == VL_RMODE_NORM2) v = v * v;
      else if (mode == VL_RMODE_NORMP) v = pow(v, p);
    }
    return vl_radd(a, v);
  }
  VL_DEV A combine(A a, A b) const { return vl_radd(a, b); }
  VL_DEV void write(A a, void *out, int64_t *, int64_t o) const {
    if constexpr (IS_NORM) {
      if (mode == VL_RMODE_NORM2) a = sqrt(a);
      else if (mode == VL_RMODE_NORMP) a = pow(a, (A)1 / p);
    } else if constexpr (!std::is_same<A, int64_t>::value) {
      if (mode == VL_RMODE_MEAN) a = a / (A)len; /* len 0: 0/0, NaN */
    }
    ((O *)out)[o] = vl_conv<O>::f(a);
  }
};

template <typename T>
struct vl_red_prod {
  typedef typename vl_acc<T>::type A;
  typedef A acc_t;
  typedef typename std::conditional<std::is_same<A, int64_t>::value, int64_t, T>::type O;
  VL_DEV A init() const { return (A)1; }
  VL_DEV A step(A a, T x, int64_t) const { return vl_rmul(a, vl_val(x)); }
  VL_DEV A combine(A a, A b) const { return vl_rmul(a, b); }
  VL_DEV void write(A a, void *out, int64_t *, int64_t o) const { ((O *)out)[o] = vl_conv<O>::f(a); }
};

template <typename A>
struct vl_mm_acc {
  A v;
  int64_t i;
};

/* MAX / MIN with the first index of the extreme; NaN beats everything and the first NaN wins.
 * `absval` turns MAX into the infinity norm. Ties and NaNs are decided by index, so the result
 * does not depend on the order in which partial results meet. */
template <typename T>
struct vl_red_minmax {
  typedef typename vl_acc<T>::type A;
  typedef vl_mm_acc<A> acc_t;
  bool is_max, absval;
  A start; /* the identity: lowest for MAX, highest for MIN */
  VL_DEV acc_t init() const { return acc_t{start, INT64_MAX}; }
  VL_DEV acc_t combine(acc_t a, acc_t b) const {
    const bool na = vl_isnan(a.v), nb = vl_isnan(b.v);
    if (na || nb) {
      if (na && nb) return a.i <= b.i ? a : b;
      return na ? a : b;
    }
    if (a.v == b.v) return a.i <= b.i ? a : b;
    return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  }
  VL_DEV acc_t step(acc_t a, T x, int64_t idx) const {
    A v = vl_val(x);
    if (absval) v = v < (A)0 ? -v : v;
    return combine(a, acc_t{v, idx});
  }
  VL_DEV void write(acc_t a, void *out, int64_t *ind, int64_t o) const {
    ((T *)out)[o] = vl_conv<T>::f(a.v);
    if (ind && !absval) ind[o] = a.i;
  }
};

template <typename A>
struct vl_var_acc {
  A mean, m2;
  int64_t n;
};

/* Welford per thread, Chan et al.'s pairwise merge across threads and chunks. */
template <typename T>
struct vl_red_var {
  typedef typename vl_acc<T>::type A;
  typedef vl_var_acc<A> acc_t;
  double correction;
  VL_DEV acc_t init() const { return acc_t{(A)0, (A)0, 0}; }
  VL_DEV acc_t step(acc_t a, T x, int64_t) const {
    A v = vl_val(x);
    a.n++;
    A d = v - a.mean;
    a.mean += d / (A)a.n;
    a.m2 += d * (v - a.mean);
    return a;
  }
  VL_DEV acc_t combine(acc_t a, acc_t b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const int64_t n = a.n + b.n;
    const A d = b.mean - a.mean, fb = (A)b.n / (A)n;
    acc_t r;
    r.mean = a.mean + d * fb;
    r.m2 = a.m2 + b.m2 + d * d * (A)a.n * fb;
    r.n = n;
    return r;
  }
  VL_DEV void write(acc_t a, void *out, int64_t *, int64_t o) const {
    double div = (double)a.n - correction;
    if (div < 0) div = 0;
    ((T *)out)[o] = vl_conv<T>::f(a.m2 / (A)div); /* n <= correction: inf or NaN, as PyTorch */
  }
};

/* Shuffle of a plain struct, 4 bytes at a time. */
template <typename X>
VL_DEV X vl_shfl_down(X x, int o) {
  static_assert(sizeof(X) % 4 == 0, "accumulators are whole words");
  union U {
    X x;
    int w[sizeof(X) / 4];
  } u;
  u.x = x;
#pragma unroll
  for (int k = 0; k < (int)(sizeof(X) / 4); k++) u.w[k] = __shfl_down_sync(0xffffffffu, u.w[k], o);
  return u.x;
}

template <typename R>
VL_DEV typename R::acc_t vl_warp_combine(const R &r, typename R::acc_t a) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) a = r.combine(a, vl_shfl_down(a, o));
  return a;
}

/* Fixed-order block combine; the result is valid in thread 0. */
template <typename R>
VL_DEV typename R::acc_t vl_block_combine(const R &r, typename R::acc_t a) {
  typedef typename R::acc_t A;
  __shared__ __align__(16) unsigned char raw[32 * sizeof(A)];
  A *sh = reinterpret_cast<A *>(raw);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  a = vl_warp_combine(r, a);
  __syncthreads(); /* the previous use of `sh` (grid-stride loop) is complete */
  if (lane == 0) sh[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < nw ? sh[lane] : r.init();
    a = vl_warp_combine(r, a);
  }
  return a;
}

template <typename R, typename T>
__global__ void __launch_bounds__(VL_RED_BLOCK)
    vl_red_warp(R r, const T *in, void *out, int64_t *ind, int64_t rows, int64_t len) {
  typedef typename R::acc_t A;
  const int lane = threadIdx.x & 31;
  const int64_t wstep = (int64_t)gridDim.x * (VL_RED_BLOCK / 32);
  for (int64_t row = (int64_t)blockIdx.x * (VL_RED_BLOCK / 32) + (threadIdx.x >> 5); row < rows;
       row += wstep) {
    const T *p = in + row * len;
    A a0 = r.init(), a1 = r.init();
    int64_t l = lane;
    for (; l + 32 < len; l += 64) {
      T x0 = p[l], x1 = p[l + 32];
      a0 = r.step(a0, x0, l);
      a1 = r.step(a1, x1, l + 32);
    }
    if (l < len) a0 = r.step(a0, p[l], l);
    A a = vl_warp_combine(r, r.combine(a0, a1));
    if (lane == 0) r.write(a, out, ind, row);
  }
}

/* Work item w = row * G + g covers elements [g*chunk, min(len, (g+1)*chunk)) of the row. */
template <typename R, typename T>
__global__ void __launch_bounds__(VL_RED_BLOCK)
    vl_red_block(R r, const T *in, void *out, int64_t *ind, typename R::acc_t *part, int64_t rows,
                 int64_t len, int G, int64_t chunk) {
  typedef typename R::acc_t A;
  constexpr int VEC = 16 / sizeof(T) > 8 ? 8 : 16 / sizeof(T);
  constexpr int U = 4;
  constexpr int B = VL_RED_BLOCK;
  typedef vl_vec<T, VEC> V;
  const int tid = threadIdx.x;
  for (int64_t w = blockIdx.x; w < rows * G; w += gridDim.x) {
    const int64_t row = w / G;
    const int64_t beg = (w - row * G) * chunk;
    const int64_t end = beg + chunk < len ? beg + chunk : len;
    const T *p = in + row * len;
    A acc[U];
#pragma unroll
    for (int u = 0; u < U; u++) acc[u] = r.init();
    if (beg < end) {
      /* Scalar head up to 16-byte alignment (fewer than VEC elements), vector body, tail. */
      const int64_t mis = (int64_t)(((uintptr_t)(p + beg)) & 15) / (int64_t)sizeof(T);
      int64_t head = mis ? (int64_t)(16 / sizeof(T)) - mis : 0;
      if (head > end - beg) head = end - beg;
      if (tid < head) acc[1] = r.step(acc[1], p[beg + tid], beg + tid);
      const int64_t vb = beg + head;
      const int64_t nv = (end - vb) / VEC;
      const V *pv = reinterpret_cast<const V *>(p + vb);
      int64_t v = tid;
      for (; v + (U - 1) * B < nv; v += U * B) {
        V x[U];
#pragma unroll
        for (int u = 0; u < U; u++) x[u] = pv[v + u * B];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
          for (int e = 0; e < VEC; e++) acc[u] = r.step(acc[u], x[u].v[e], vb + (v + u * B) * VEC + e);
      }
      for (; v < nv; v += B) {
        V x = pv[v];
#pragma unroll
        for (int e = 0; e < VEC; e++) acc[0] = r.step(acc[0], x.v[e], vb + v * VEC + e);
      }
      const int64_t t = vb + nv * VEC + tid;
      if (t < end) acc[2] = r.step(acc[2], p[t], t);
    }
    A a = vl_block_combine(r, r.combine(r.combine(acc[0], acc[1]), r.combine(acc[2], acc[3])));
    if (tid == 0) {
      if (G == 1) r.write(a, out, ind, row);
      else part[w] = a;
    }
  }
}

/* Work item w = tile * G + g: tile = (o, a run of bx columns), g = chunk of len. */
template <typename R, typename T>
__global__ void __launch_bounds__(VL_RED_BLOCK)
    vl_red_cols(R r, const T *in, void *out, int64_t *ind, typename R::acc_t *part, int64_t outer,
                int64_t len, int64_t inner, int bx, int64_t ntiles, int G, int64_t chunk) {
  typedef typename R::acc_t A;
  __shared__ __align__(16) unsigned char raw[VL_RED_BLOCK * sizeof(A)];
  A *sh = reinterpret_cast<A *>(raw);
  const int by = VL_RED_BLOCK / bx, tx = threadIdx.x % bx, ty = threadIdx.x / bx;
  for (int64_t w = blockIdx.x; w < outer * ntiles * G; w += gridDim.x) {
    const int64_t tile = w / G, g = w - tile * G;
    const int64_t beg = g * chunk, end = beg + chunk < len ? beg + chunk : len;
    const int64_t o = tile / ntiles, i = (tile - o * ntiles) * bx + tx;
    A a0 = r.init(), a1 = r.init(), a2 = r.init(), a3 = r.init();
    if (i < inner) {
      /* 8 loads in flight per thread: the column loads are 4 bytes each. */
      const T *p = in + o * len * inner + i;
      int64_t l = beg + ty;
      for (; l + 7 * by < end; l += 8 * by) {
        T x[8];
#pragma unroll
        for (int j = 0; j < 8; j++) x[j] = p[(l + j * by) * inner];
        a0 = r.step(a0, x[0], l);
        a1 = r.step(a1, x[1], l + by);
        a2 = r.step(a2, x[2], l + 2 * by);
        a3 = r.step(a3, x[3], l + 3 * by);
        a0 = r.step(a0, x[4], l + 4 * by);
        a1 = r.step(a1, x[5], l + 5 * by);
        a2 = r.step(a2, x[6], l + 6 * by);
        a3 = r.step(a3, x[7], l + 7 * by);
      }
      for (; l < end; l += by) a0 = r.step(a0, p[l * inner], l);
    }
    __syncthreads(); /* the previous tile's readers of `sh` are done */
    sh[threadIdx.x] = r.combine(r.combine(a0, a1), r.combine(a2, a3));
    __syncthreads();
    for (int s = by / 2; s > 0; s >>= 1) {
      if (ty < s) sh[threadIdx.x] = r.combine(sh[threadIdx.x], sh[threadIdx.x + s * bx]);
      __syncthreads();
    }
    if (ty == 0 && i < inner) {
      const int64_t oi = o * inner + i;
      if (G == 1) r.write(sh[tx], out, ind, oi);
      else part[oi * G + g] = sh[tx];
    }
  }
}

/* One warp per output: the G partials of output `row` combined in index order. */
template <typename R>
__global__ void __launch_bounds__(VL_RED_BLOCK)
    vl_red_finish(R r, const typename R::acc_t *part, void *out, int64_t *ind, int64_t rows, int G) {
  typedef typename R::acc_t A;
  const int lane = threadIdx.x & 31;
  const int64_t wstep = (int64_t)gridDim.x * (VL_RED_BLOCK / 32);
  for (int64_t row = (int64_t)blockIdx.x * (VL_RED_BLOCK / 32) + (threadIdx.x >> 5); row < rows;
       row += wstep) {
    A a = r.init();
    for (int j = lane; j < G; j += 32) a = r.combine(a, part[row * G + j]);
    a = vl_warp_combine(r, a);
    if (lane == 0) r.write(a, out, ind, row);
  }
}

/* Chunks per output, G in [1, most], so that base * G work items come close to filling whole
 * waves of `resident` blocks: 1.4 waves of equal blocks take as long as 2. */
static int vl_pick_split(int64_t base, int resident, int64_t most) {
  if (base >= resident || most <= 1) return 1;
  const int64_t lo = (resident + base - 1) / base;
  if (most < lo) return (int)most;
  int64_t best = lo;
  double best_eff = 0;
  for (int64_t G = lo; G <= 4 * lo && G <= most; G++) {
    const int64_t items = base * G, waves = (items + resident - 1) / resident;
    const double eff = (double)items / (double)(waves * resident);
    if (eff > best_eff + 1e-9) {
      best_eff = eff;
      best = G;
    }
    if (eff >= 0.95) break;
  }
  return (int)best;
}

/* Blocks of `func` (VL_RED_BLOCK threads) that run at once on the whole device; the occupancy
 * query is cached per kernel because it is a driver call on every reduction otherwise. */
static int vl_resident_blocks(const void *func, vl_cuda_state *st) {
  for (int i = 0; i < st->nocc; i++)
    if (st->occ[i].fn == func) return st->occ[i].per_sm * st->sm_count;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, func, VL_RED_BLOCK, 0) != cudaSuccess ||
      per_sm < 1) {
    (void)cudaGetLastError(); /* not sticky; fall back to the thread limit */
    per_sm = st->max_threads_per_sm / VL_RED_BLOCK;
    if (per_sm < 1) per_sm = 1;
  }
  if (st->nocc < VL_CUDA_MAX_OCC) {
    st->occ[st->nocc].fn = func;
    st->occ[st->nocc].per_sm = per_sm;
    st->nocc++;
  }
  return per_sm * st->sm_count;
}

template <typename R, typename T>
static vl_status vl_red_run(const R &r, const vl_reduce_args *a, vl_cuda_state *st) {
  typedef typename R::acc_t A;
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  const T *in = (const T *)a->in;
  const int64_t outer = a->outer, len = a->len, inner = a->inner, nout = outer * inner;
  const size_t max_part = VL_CUDA_WORKSPACE_BYTES / sizeof(A);
  A *part = NULL;

  if (inner == 1 && len <= VL_RED_WARP_MAX_LEN) {
    unsigned g = vl_grid(outer * 32, VL_RED_BLOCK, st, 4);
    vl_red_warp<R, T><<<g, VL_RED_BLOCK, 0, stream>>>(r, in, a->out, a->indices, outer, len);
    VL_LAUNCH_CHECK();
    return VL_OK;
  }

  int G = 1;
  if (inner == 1) {
    const int resident = vl_resident_blocks((const void *)vl_red_block<R, T>, st);
    const int64_t min_chunk = (int64_t)VL_RED_BLOCK * 16 * 4; /* elements worth a block */
    G = vl_pick_split(outer, resident, (len + min_chunk - 1) / min_chunk);
    while (G > 1 && (size_t)(outer * G) > max_part) G /= 2;
    int64_t chunk = (len + G - 1) / G;
    chunk = (chunk + 15) / 16 * 16; /* keeps chunk starts as aligned as the row start */
    G = (int)((len + chunk - 1) / chunk);
    if (G < 1) G = 1;
    if (G > 1) VL_TRY(vl_cuda_workspace(st, a->ex.stream, (void **)&part));
    const int64_t items = outer * G;
    const unsigned g = (unsigned)(items < resident ? items : resident);
    vl_red_block<R, T><<<g, VL_RED_BLOCK, 0, stream>>>(r, in, a->out, a->indices, part, outer, len,
                                                       G, chunk);
    VL_LAUNCH_CHECK();
  } else {
    int bx = 1;
    while (bx < 32 && bx < inner) bx *= 2;
    const int by = VL_RED_BLOCK / bx;
    const int64_t ntiles = (inner + bx - 1) / bx, tiles = outer * ntiles;
    const int resident = vl_resident_blocks((const void *)vl_red_cols<R, T>, st);
    G = vl_pick_split(tiles, resident, (len + 32 * by - 1) / (32 * by));
    while (G > 1 && (size_t)(nout * G) > max_part) G /= 2;
    const int64_t chunk = len > 0 ? (len + G - 1) / G : 0;
    G = chunk > 0 ? (int)((len + chunk - 1) / chunk) : 1;
    if (G > 1) VL_TRY(vl_cuda_workspace(st, a->ex.stream, (void **)&part));
    const int64_t items = tiles * G;
    const unsigned g = (unsigned)(items < resident ? items : resident);
    vl_red_cols<R, T><<<g, VL_RED_BLOCK, 0, stream>>>(r, in, a->out, a->indices, part, outer, len,
                                                      inner, bx, ntiles, G, chunk);
    VL_LAUNCH_CHECK();
  }
  if (G > 1) {
    unsigned g = vl_grid(nout * 32, VL_RED_BLOCK, st, 4);
    vl_red_finish<R><<<g, VL_RED_BLOCK, 0, stream>>>(r, part, a->out, a->indices, nout, G);
    VL_LAUNCH_CHECK();
  }
  return VL_OK;
}

template <typename T>
static vl_status vl_red_dispatch(const vl_reduce_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type A;
  const bool is_float = !std::is_same<A, int64_t>::value;
  switch (a->op) {
    case VL_RED_SUM:
    case VL_RED_MEAN: {
      vl_red_sum<T, false> r;
      r.mode = a->op == VL_RED_MEAN ? VL_RMODE_MEAN : VL_RMODE_SUM;
      r.p = (A)0;
      r.len = a->len;
      return vl_red_run<vl_red_sum<T, false>, T>(r, a, st);
    }
    case VL_RED_PROD: return vl_red_run<vl_red_prod<T>, T>(vl_red_prod<T>(), a, st);
    case VL_RED_MAX:
    case VL_RED_MIN: {
      vl_red_minmax<T> r;
      r.is_max = a->op == VL_RED_MAX;
      r.absval = false;
      if constexpr (std::is_same<A, int64_t>::value) r.start = r.is_max ? INT64_MIN : INT64_MAX;
      else r.start = r.is_max ? (A)-INFINITY : (A)INFINITY;
      return vl_red_run<vl_red_minmax<T>, T>(r, a, st);
    }
    case VL_RED_NORM:
      if constexpr (is_float) {
        if (isinf(a->param)) {
          vl_red_minmax<T> r;
          r.is_max = true;
          r.absval = true;
          r.start = (A)0; /* |x| >= 0; an empty input has norm 0 */
          return vl_red_run<vl_red_minmax<T>, T>(r, a, st);
        }
        vl_red_sum<T, true> r;
        r.mode = a->param == 0.0   ? VL_RMODE_NORM0
                 : a->param == 1.0 ? VL_RMODE_NORM1
                 : a->param == 2.0 ? VL_RMODE_NORM2
                                   : VL_RMODE_NORMP;
        r.p = (A)a->param;
        r.len = a->len;
        return vl_red_run<vl_red_sum<T, true>, T>(r, a, st);
      }
      break;
    case VL_RED_VAR:
      if constexpr (is_float) {
        vl_red_var<T> r;
        r.correction = a->param;
        return vl_red_run<vl_red_var<T>, T>(r, a, st);
      }
      break;
    default: break;
  }
  return vl_fail(VL_EDTYPE, "reduce: op %d does not take %s input on cuda", (int)a->op,
                 vl_dtype_name(a->in_dtype));
}

vl_status vl_cuda_reduce(const vl_reduce_args *a) {
  if ((unsigned)a->op >= VL_NREDUCE) return vl_fail(VL_EINVAL, "reduce: unknown op %d", (int)a->op);
  const bool int_in = !vl_dtype_is_float(a->in_dtype);
  const bool widen = int_in && (a->op == VL_RED_SUM || a->op == VL_RED_PROD);
  const vl_dtype want = widen ? VL_I64 : a->in_dtype;
  if (a->out_dtype != want)
    return vl_fail(VL_EDTYPE, "reduce: cuda writes %s for %s input of op %d, asked for %s",
                   vl_dtype_name(want), vl_dtype_name(a->in_dtype), (int)a->op,
                   vl_dtype_name(a->out_dtype));
  if (a->outer * a->inner <= 0) return VL_OK;
  VL_CUDA_ENTER(guard, st, a->ex);
  VL_DISPATCH_ALL(a->in_dtype, T, "reduce", return vl_red_dispatch<T>(a, st));
  return VL_OK;
}
