/* kernels/cuda/cuda_fused.cu: the fused layer kernels (runtime/backend/fused_kernels.h) on CUDA.
 *
 * dropout: one read and one write per element, 16-byte vector loads and stores; each thread
 * draws the Philox groups of its vector (runtime/core/philox.h: the groups v100.bernoulli would
 * draw for the same elements) and keeps element i when (word >> 9) < threshold, an integer test
 * equal to bernoulli's double comparison, so the mask equals the CPU's and the composed op's.
 *
 * cross entropy forward, per row: one read of the logits computes the row max and the sum of
 * exponentials online (rescaled when the max grows, as cuda_softmax.cu does) and the sum of the
 * logits (for label smoothing), in f32 (f64 for f64); a block per row with 16-byte loads for long
 * rows (BERT's 30,522-word vocabulary), a warp per row for short ones, a thread per (outer, inner)
 * column when the class dim is not innermost. Ignored rows are skipped (loss 0). A second kernel,
 * one block, sums the row losses in double in a fixed order and counts the rows not ignored.
 * backward: one flat pass over the logits with 16-byte loads and stores, each element's row found
 * by division (32-bit magic numbers when the index fits): d = g (exp(x - lse) - (1 - s)[c == t]
 * - s / C) in f32, written once in the logits' dtype. No probabilities are ever stored.
 * Math follows kernels/cpu/cpu_fused.c; conversions are cuda_common.cuh's (no half arithmetic),
 * so the file builds for sm_70. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ew.cuh"
#include "runtime/backend/fused_kernels.h"
#include "runtime/core/philox.h"

/* Elements of a 16-byte vector. */
template <typename T> struct vl_v16 { static constexpr int n = 16 / (int)sizeof(T); };

/* ======================= dropout ======================= */

/* A unit is what one thread handles per step: whole Philox groups (4 elements) and whole 16-byte
 * vectors: 8 elements (2 groups) for 16-bit types, 4 for f32 (1 vector) and f64 (2 vectors). */
template <typename T>
__global__ void __launch_bounds__(256)
    vl_dropout_kernel(const T *in, T *out, int64_t numel, uint64_t seed, uint64_t offset, const uint64_t *base,
                      uint32_t thr, double scale, bool vec_ok) {
  typedef typename vl_acc<T>::type C;
  constexpr int V = vl_v16<T>::n, U = V >= 4 ? V : 4, NV = U / V, G = U / 4;
  if (base) {
    seed = base[0];
    offset += base[1];
  }
  const C sc = (C)scale;
  const int64_t units = (numel + U - 1) / U, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t u = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; u < units; u += step) {
    const int64_t i0 = u * U;
    C f[U];
#pragma unroll
    for (int k = 0; k < G; k++) {
      vl_philox4 w = vl_philox(seed, offset + (uint64_t)(u * G + k));
#pragma unroll
      for (int j = 0; j < 4; j++) f[4 * k + j] = (w.x[j] >> (32 - VL_PHILOX_BITS)) < thr ? sc : (C)0;
    }
    if (vec_ok && i0 + U <= numel) {
#pragma unroll
      for (int k = 0; k < NV; k++) {
        vl_vec<T, V> x = reinterpret_cast<const vl_vec<T, V> *>(in + i0)[k], y;
#pragma unroll
        for (int j = 0; j < V; j++) y.v[j] = vl_conv<T>::f((C)vl_val(x.v[j]) * f[k * V + j]);
        reinterpret_cast<vl_vec<T, V> *>(out + i0)[k] = y;
      }
    } else {
#pragma unroll
      for (int j = 0; j < U; j++)
        if (i0 + j < numel) out[i0 + j] = vl_conv<T>::f((C)vl_val(in[i0 + j]) * f[j]);
    }
  }
}

template <typename T>
static vl_status vl_dropout_launch(const vl_dropout_args *a, const vl_cuda_state *st) {
  constexpr int V = vl_v16<T>::n, U = V >= 4 ? V : 4;
  const int64_t units = (a->numel + U - 1) / U;
  const bool vec_ok = (uintptr_t)a->in % 16 == 0 && (uintptr_t)a->out % 16 == 0;
  vl_dropout_kernel<T><<<vl_grid(units, 256, st, 4), 256, 0, (cudaStream_t)a->ex.stream>>>(
      (const T *)a->in, (T *)a->out, a->numel, a->seed, a->offset, a->base, a->threshold, a->scale, vec_ok);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

static vl_status vl_cuda_dropout(const vl_dropout_args *a) {
  if (a->numel <= 0) return VL_OK;
  VL_CUDA_ENTER(guard, st, a->ex);
  VL_DISPATCH_FLOAT(a->dtype, T, "dropout", return vl_dropout_launch<T>(a, st));
  return VL_OK;
}

/* ======================= cross entropy: forward ======================= */

/* Running state of a row: max m, sum of exp(x - m) s, sum of x. */
template <typename C>
struct vl_xe_state {
  C m, s, sx;
};

template <typename C>
VL_DEV void vl_xe_fold(vl_xe_state<C> &st, C x) {
  /* NaN never becomes the max, but exp(NaN - m) makes s NaN: the row's result is NaN */
  if (x > st.m) {
    st.s = st.m == (C)-INFINITY ? st.s : st.s * exp(st.m - x);
    st.m = x;
  }
  st.s += x == (C)-INFINITY ? (C)0 : exp(x - st.m);
  st.sx += x;
}

template <typename C>
VL_DEV vl_xe_state<C> vl_xe_merge(vl_xe_state<C> a, vl_xe_state<C> b) {
  vl_xe_state<C> r;
  r.m = a.m > b.m ? a.m : b.m;
  r.s = (a.m == (C)-INFINITY ? a.s : a.s * exp(a.m - r.m)) + (b.m == (C)-INFINITY ? b.s : b.s * exp(b.m - r.m));
  r.sx = a.sx + b.sx;
  return r;
}

template <typename C>
VL_DEV vl_xe_state<C> vl_xe_warp_merge(vl_xe_state<C> st) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    vl_xe_state<C> other;
    other.m = __shfl_xor_sync(0xffffffffu, st.m, o);
    other.s = __shfl_xor_sync(0xffffffffu, st.s, o);
    other.sx = __shfl_xor_sync(0xffffffffu, st.sx, o);
    st = vl_xe_merge(st, other);
  }
  return st;
}

/* What every forward kernel needs besides the logits. */
struct vl_xe_fw {
  const void *target;
  bool target_i32;
  int64_t ignore, classes, inner, rows;
  double smoothing;
  void *lse, *loss;
  vl_cuda_errflag *flag;
  int op, dim;
};

VL_DEV int64_t vl_xe_target(const vl_xe_fw &p, int64_t r) {
  return p.target_i32 ? (int64_t)((const int32_t *)p.target)[r] : ((const int64_t *)p.target)[r];
}

/* A class id outside [0, C): recorded in the device's error flag (the first one wins), as the
 * index kernels do; check_async reports "<op>: index t is out of bounds for dim d with size C". */
VL_DEV void vl_xe_flag(const vl_xe_fw &p, int64_t t) {
  vl_cuda_errflag *f = p.flag;
  if (*(volatile int *)&f->set == 0 && atomicCAS(&f->set, 0, 1) == 0) {
    f->op = p.op;
    f->dim = p.dim;
    f->index = t;
    f->size = p.classes;
  }
}

/* 0: compute the row; 1: ignored (loss 0); 2: bad class id (flagged, NaN written). */
template <typename C>
VL_DEV int vl_xe_classify(const vl_xe_fw &p, int64_t r, int64_t t, bool writer) {
  if (t == p.ignore) {
    if (writer) ((C *)p.lse)[r] = (C)0, ((C *)p.loss)[r] = (C)0;
    return 1;
  }
  if (t < 0 || t >= p.classes) {
    if (writer) {
      vl_xe_flag(p, t);
      ((C *)p.lse)[r] = (C)NAN, ((C *)p.loss)[r] = (C)NAN;
    }
    return 2;
  }
  return 0;
}

/* The row's results from its merged state and its target logit. */
template <typename C>
VL_DEV void vl_xe_finish(const vl_xe_fw &p, int64_t r, vl_xe_state<C> st, C xt) {
  /* a row of -inf: NaN, as the composed log_softmax gives */
  const C lse = st.m == (C)-INFINITY ? (C)NAN : st.m + log(st.s);
  const C nll = lse - xt, s = (C)p.smoothing;
  ((C *)p.lse)[r] = lse;
  ((C *)p.loss)[r] = p.smoothing > 0 ? nll * ((C)1 - s) + (lse - st.sx / (C)p.classes) * s : nll;
}

/* Long contiguous rows: a block per row; a scalar head up to 16-byte alignment, 16-byte vectors,
 * a scalar tail. */
#define VL_XE_BLOCK 256
template <typename T>
__global__ void __launch_bounds__(VL_XE_BLOCK) vl_xe_fw_block(const T *logits, vl_xe_fw p) {
  typedef typename vl_acc<T>::type C;
  constexpr int V = vl_v16<T>::n;
  __shared__ vl_xe_state<C> sh[VL_XE_BLOCK / 32];
  const int64_t C_ = p.classes;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const int64_t t = vl_xe_target(p, r);
    if (vl_xe_classify<C>(p, r, t, threadIdx.x == 0)) continue; /* uniform over the block */
    const T *row = logits + r * C_;
    const int mis = (int)(((uintptr_t)row % 16) / sizeof(T));
    const int64_t head = mis ? ((V - mis) < C_ ? (V - mis) : C_) : 0;
    const int64_t nvec = (C_ - head) / V, body_end = head + nvec * V;
    vl_xe_state<C> st = {(C)-INFINITY, (C)0, (C)0};
    if (threadIdx.x < head) vl_xe_fold(st, (C)vl_val(row[threadIdx.x]));
    const vl_vec<T, V> *vp = reinterpret_cast<const vl_vec<T, V> *>(row + head);
    for (int64_t k = threadIdx.x; k < nvec; k += VL_XE_BLOCK) {
      vl_vec<T, V> x = vp[k];
      C m = st.m;
#pragma unroll
      for (int j = 0; j < V; j++) {
        C v = (C)vl_val(x.v[j]);
        m = v > m ? v : m;
      }
      /* one rescale per vector, then independent exps */
      C s = st.m == (C)-INFINITY ? st.s : st.s * exp(st.m - m), sx = st.sx;
#pragma unroll
      for (int j = 0; j < V; j++) {
        C v = (C)vl_val(x.v[j]);
        s += v == (C)-INFINITY ? (C)0 : exp(v - m);
        sx += v;
      }
      st.m = m, st.s = s, st.sx = sx;
    }
    for (int64_t l = body_end + threadIdx.x; l < C_; l += VL_XE_BLOCK) vl_xe_fold(st, (C)vl_val(row[l]));
    st = vl_xe_warp_merge(st);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads(); /* sh may still be read for the previous row */
    if (lane == 0) sh[warp] = st;
    __syncthreads();
    if (threadIdx.x == 0) {
      vl_xe_state<C> all = sh[0];
      for (int w = 1; w < VL_XE_BLOCK / 32; w++) all = vl_xe_merge(all, sh[w]);
      vl_xe_finish(p, r, all, (C)vl_val(row[t]));
    }
  }
}

/* Short contiguous rows: a warp per row, coalesced scalar loads, 4 in flight per lane. */
#define VL_XE_WARP_BLOCK 256
template <typename T>
__global__ void __launch_bounds__(VL_XE_WARP_BLOCK) vl_xe_fw_warp(const T *logits, vl_xe_fw p) {
  typedef typename vl_acc<T>::type C;
  const int lane = threadIdx.x & 31;
  const int64_t wstep = (int64_t)gridDim.x * (VL_XE_WARP_BLOCK / 32);
  for (int64_t r = (int64_t)blockIdx.x * (VL_XE_WARP_BLOCK / 32) + (threadIdx.x >> 5); r < p.rows; r += wstep) {
    const int64_t t = vl_xe_target(p, r);
    if (vl_xe_classify<C>(p, r, t, lane == 0)) continue; /* uniform over the warp */
    const T *row = logits + r * p.classes;
    vl_xe_state<C> st = {(C)-INFINITY, (C)0, (C)0};
    for (int64_t l0 = 0; l0 < p.classes; l0 += 4 * 32) {
      C x[4];
#pragma unroll
      for (int j = 0; j < 4; j++) {
        const int64_t l = l0 + j * 32 + lane;
        x[j] = l < p.classes ? (C)vl_val(row[l]) : (C)-INFINITY;
      }
#pragma unroll
      for (int j = 0; j < 4; j++)
        if (l0 + j * 32 + lane < p.classes) vl_xe_fold(st, x[j]);
    }
    st = vl_xe_warp_merge(st);
    if (lane == 0) vl_xe_finish(p, r, st, (C)vl_val(row[t]));
  }
}

/* The class dim not innermost (N x C x d...): a thread per row (o, i), coalesced over i. */
template <typename T>
__global__ void __launch_bounds__(256) vl_xe_fw_cols(const T *logits, vl_xe_fw p) {
  typedef typename vl_acc<T>::type C;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < p.rows; r += step) {
    const int64_t t = vl_xe_target(p, r);
    if (vl_xe_classify<C>(p, r, t, true)) continue;
    const int64_t o = r / p.inner, i = r - o * p.inner;
    const T *col = logits + o * p.classes * p.inner + i;
    vl_xe_state<C> st = {(C)-INFINITY, (C)0, (C)0};
    for (int64_t c = 0; c < p.classes; c++) vl_xe_fold(st, (C)vl_val(col[c * p.inner]));
    vl_xe_finish(p, r, st, (C)vl_val(col[t * p.inner]));
  }
}

/* One block: the sum of the row losses in double (a fixed order: per-thread strides, then the
 * block's tree) and the count of rows not ignored; writes out[0] and count[0]. */
template <typename S, typename O>
__global__ void __launch_bounds__(1024) vl_xe_reduce(const S *loss, vl_xe_fw p, bool mean, O *out, S *count) {
  __shared__ double sh[32];
  double sum = 0, cnt = 0;
  for (int64_t r = threadIdx.x; r < p.rows; r += blockDim.x) {
    sum += (double)loss[r];
    cnt += vl_xe_target(p, r) != p.ignore ? 1.0 : 0.0;
  }
  auto add = [](double a, double b) { return a + b; };
  sum = vl_block_reduce(sum, add, sh);
  cnt = vl_block_reduce(cnt, add, sh);
  if (threadIdx.x == 0) {
    /* through the stat dtype, so a half loss is the f32 loss rounded (as for NONE) */
    out[0] = vl_conv<O>::f((S)(mean ? sum / cnt : sum));
    count[0] = (S)cnt;
  }
}

template <typename T>
static vl_status vl_xe_fw_launch(const vl_xent_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<T>::type S;
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  vl_xe_fw p = {a->target, a->target_i32, a->ignore_index, a->classes, a->inner, a->outer * a->inner,
                a->smoothing, a->lse, a->row_loss, st->flag, vl_cuda_op_id(st, a->op), a->class_dim};
  st->flag_armed = true;
  const T *x = (const T *)a->logits;
  if (p.rows > 0) {
    if (a->inner > 1) {
      vl_xe_fw_cols<T><<<vl_grid(p.rows, 256, st, 4), 256, 0, stream>>>(x, p);
    } else if (a->classes > 1024) {
      const int64_t cap = (int64_t)st->sm_count * (st->max_threads_per_sm / VL_XE_BLOCK) * 4;
      vl_xe_fw_block<T><<<(unsigned)(p.rows < cap ? p.rows : cap), VL_XE_BLOCK, 0, stream>>>(x, p);
    } else {
      vl_xe_fw_warp<T><<<vl_grid(p.rows * 32, VL_XE_WARP_BLOCK, st, 4), VL_XE_WARP_BLOCK, 0, stream>>>(x, p);
    }
    VL_LAUNCH_CHECK();
  }
  if (a->reduction == VL_XENT_NONE) return VL_OK;
  const bool mean = a->reduction == VL_XENT_MEAN;
  VL_DISPATCH_FLOAT(a->out_dtype, O, "cross_entropy",
                    vl_xe_reduce<S, O><<<1, 1024, 0, stream>>>((const S *)a->row_loss, p, mean, (O *)a->out,
                                                              (S *)a->count));
  VL_LAUNCH_CHECK();
  return VL_OK;
}

static vl_status vl_cuda_xent_forward(const vl_xent_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  VL_DISPATCH_FLOAT(a->dtype, T, "cross_entropy", return vl_xe_fw_launch<T>(a, st));
  return VL_OK;
}

/* ======================= cross entropy: backward ======================= */

struct vl_xe_bw {
  const void *target;
  bool target_i32;
  int64_t ignore, classes, inner, numel, rows;
  double smoothing;
  const void *lse, *grad, *count;
  bool per_row;            /* NONE: grad holds a value per row */
  vl_divmod32 div_c, div_i;
};

/* Element e -> (o, c, i); row = o * inner + i. */
template <bool I32>
VL_DEV void vl_xe_pos(const vl_xe_bw &p, int64_t e, int64_t &o, int64_t &c, int64_t &i) {
  if (I32) {
    uint32_t q = p.inner == 1 ? (uint32_t)e : p.div_i.div((uint32_t)e);
    i = (int64_t)((uint32_t)e - q * (uint32_t)p.inner);
    uint32_t oo = p.div_c.div(q);
    c = (int64_t)(q - oo * (uint32_t)p.classes);
    o = oo;
  } else {
    int64_t q = e / p.inner;
    i = e - q * p.inner;
    o = q / p.classes;
    c = q - o * p.classes;
  }
}

template <typename T, bool I32>
__global__ void __launch_bounds__(256) vl_xe_bw_kernel(const T *logits, T *dx, vl_xe_bw p, bool vec_ok) {
  typedef typename vl_acc<T>::type C;
  constexpr int V = vl_v16<T>::n;
  const C s = (C)p.smoothing, k = (C)(p.smoothing / (double)p.classes), hit = ((C)1 - s) + k;
  C g0 = (C)0;
  if (!p.per_row) {
    g0 = ((const C *)p.grad)[0];
    if (p.count) g0 = g0 / ((const C *)p.count)[0];
  }
  const int64_t nvec = (p.numel + V - 1) / V, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < nvec; v += step) {
    const int64_t e0 = v * V;
    const bool full = vec_ok && e0 + V <= p.numel;
    int64_t o, c, i;
    vl_xe_pos<I32>(p, e0, o, c, i);
    vl_vec<T, V> x, y;
    if (full && p.inner == 1 && c + V <= p.classes) {
      /* a vector inside one row: an ignored row (most rows of a full MLM head) is zeros, with no
       * read of its logits */
      const int64_t t0 = p.target_i32 ? (int64_t)((const int32_t *)p.target)[o] : ((const int64_t *)p.target)[o];
      if (t0 == p.ignore || t0 < 0 || t0 >= p.classes) {
#pragma unroll
        for (int j = 0; j < V; j++) y.v[j] = vl_conv<T>::f((C)0);
        reinterpret_cast<vl_vec<T, V> *>(dx)[v] = y;
        continue;
      }
    }
    if (full) {
      x = reinterpret_cast<const vl_vec<T, V> *>(logits)[v];
    } else {
#pragma unroll
      for (int j = 0; j < V; j++) x.v[j] = e0 + j < p.numel ? logits[e0 + j] : logits[0];
    }
    int64_t row = -1, t = 0;
    C lse = 0, g = 0;
#pragma unroll
    for (int j = 0; j < V; j++) {
      const int64_t r = o * p.inner + i;
      if (r != row) { /* a new row: its target, log-sum-exp and gradient */
        row = r;
        if (r < p.rows) { /* (the padding of a last partial vector may step past) */
          t = p.target_i32 ? (int64_t)((const int32_t *)p.target)[r] : ((const int64_t *)p.target)[r];
          lse = ((const C *)p.lse)[r];
          g = p.per_row ? ((const C *)p.grad)[r] : g0;
        }
      }
      const bool live = t != p.ignore && t >= 0 && t < p.classes;
      const C d = live ? g * (exp((C)vl_val(x.v[j]) - lse) - (c == t ? hit : k)) : (C)0;
      y.v[j] = vl_conv<T>::f(d);
      /* the next element's position */
      if (++i == p.inner) {
        i = 0;
        if (++c == p.classes) c = 0, o++;
      }
    }
    if (full) {
      reinterpret_cast<vl_vec<T, V> *>(dx)[v] = y;
    } else {
#pragma unroll
      for (int j = 0; j < V; j++)
        if (e0 + j < p.numel) dx[e0 + j] = y.v[j];
    }
  }
}

template <typename T>
static vl_status vl_xe_bw_launch(const vl_xent_args *a, const vl_cuda_state *st) {
  constexpr int V = vl_v16<T>::n;
  vl_xe_bw p = {a->target, a->target_i32, a->ignore_index, a->classes, a->inner,
                a->outer * a->classes * a->inner, a->outer * a->inner, a->smoothing, a->lse, a->grad,
                a->reduction == VL_XENT_MEAN ? a->count : NULL, a->reduction == VL_XENT_NONE, {}, {}};
  if (p.numel <= 0) return VL_OK;
  const bool i32 = p.numel + V < ((int64_t)1 << 31);
  if (i32) {
    p.div_c = vl_divmod32_make((uint32_t)p.classes);
    p.div_i = vl_divmod32_make((uint32_t)p.inner);
  }
  const bool vec_ok = (uintptr_t)a->logits % 16 == 0 && (uintptr_t)a->dlogits % 16 == 0;
  const unsigned grid = vl_grid((p.numel + V - 1) / V, 256, st, 4);
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  if (i32) vl_xe_bw_kernel<T, true><<<grid, 256, 0, stream>>>((const T *)a->logits, (T *)a->dlogits, p, vec_ok);
  else vl_xe_bw_kernel<T, false><<<grid, 256, 0, stream>>>((const T *)a->logits, (T *)a->dlogits, p, vec_ok);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

static vl_status vl_cuda_xent_backward(const vl_xent_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  VL_DISPATCH_FLOAT(a->dtype, T, "cross_entropy_backward", return vl_xe_bw_launch<T>(a, st));
  return VL_OK;
}

/* A host-side table, left out of Clang's device pass (tools/build-sm70.sh): Clang would emit a
 * const table of host function addresses on the GPU too, which ptxas refuses. nvcc keeps it in
 * both passes, as before, and emits nothing of it on the device. */
#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_fused_kernels vl_cuda_fused_kernels = {
    .dropout = vl_cuda_dropout,
    .xent_forward = vl_cuda_xent_forward,
    .xent_backward = vl_cuda_xent_backward,
};
#endif
