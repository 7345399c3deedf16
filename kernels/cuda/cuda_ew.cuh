/* kernels/cuda/cuda_ew.cuh: the elementwise engine shared by fill/copy/unary/binary/where.
 *
 * An op is a functor F with
 *   static constexpr int NIN;              0..3 inputs
 *   typedef out_t, in0_t, in1_t, in2_t;    storage types (vl_none for absent inputs)
 *   static constexpr int UNROLL;           vectors per thread in flight (flat path)
 *   static constexpr bool FLAT_ONLY;       optional: no strided kernel is ever instantiated
 *   static constexpr bool NO_STRIDED64;    optional: strided only below 2^31 elements
 *   VL_DEV out_t operator()(in0_t, in1_t, in2_t) const;
 * vl_ew_launch(it, f) runs it over a vl_iter: operand 0 is the output, operands 1..NIN the inputs.
 *
 * Flat problems (all operands contiguous) whose pointers are aligned for 16-byte vectors take
 * vl_ew_flat: vector loads/stores, UNROLL vectors per thread in flight, a grid-stride loop sized
 * from the SM count. Only op-specialised functors unroll (UNROLL > 1): unrolling a runtime op
 * switch multiplies code size and compile time for no bandwidth gain. Everything else (including
 * rare misaligned flat views) takes vl_ew_strided: the N-d index of each element is recovered
 * from the sizes (32-bit magic-number division when the problem fits in 2^31, 64-bit otherwise)
 * and byte offsets are accumulated in 64 bits. */
#ifndef VL_CUDA_EW_CUH
#define VL_CUDA_EW_CUH

#include <string.h>

#include "kernels/cuda/cuda_common.cuh"

#define VL_EW_BLOCK 256

/* n / d and n % d for n < 2^31 by multiply-high (Granlund-Montgomery, as in PyTorch). */
struct vl_divmod32 {
  uint32_t d, m, s;
  VL_DEV uint32_t div(uint32_t n) const { return (__umulhi(n, m) + n) >> s; }
};

static inline vl_divmod32 vl_divmod32_make(uint32_t d) {
  vl_divmod32 r;
  uint32_t s = 0;
  while (s < 32 && (1ull << s) < d) s++;
  r.d = d;
  r.s = s;
  r.m = (uint32_t)(((1ull << 32) * ((1ull << s) - d)) / d + 1);
  return r;
}

template <int NOPS>
struct vl_ptrs {
  char *p[NOPS];
};

/* Dims are stored fastest-first (reverse of the iterator's order). */
template <int NOPS>
struct vl_offcalc {
  int ndim;
  vl_divmod32 div[VL_MAX_DIMS];
  int64_t size[VL_MAX_DIMS];
  int64_t stride[VL_MAX_DIMS][NOPS]; /* bytes */

  VL_DEV void get32(uint32_t i, int64_t *off) const {
#pragma unroll
    for (int k = 0; k < NOPS; k++) off[k] = 0;
#pragma unroll
    for (int j = 0; j < VL_MAX_DIMS; j++) {
      if (j == ndim) break;
      uint32_t q = div[j].div(i);
      int64_t c = (int64_t)(i - q * div[j].d);
#pragma unroll
      for (int k = 0; k < NOPS; k++) off[k] += c * stride[j][k];
      i = q;
    }
  }
  VL_DEV void get64(int64_t i, int64_t *off) const {
#pragma unroll
    for (int k = 0; k < NOPS; k++) off[k] = 0;
#pragma unroll
    for (int j = 0; j < VL_MAX_DIMS; j++) {
      if (j == ndim) break;
      int64_t q = i / size[j];
      int64_t c = i - q * size[j];
#pragma unroll
      for (int k = 0; k < NOPS; k++) off[k] += c * stride[j][k];
      i = q;
    }
  }
};

template <typename F, int K> struct vl_in_type;
template <typename F> struct vl_in_type<F, 0> { typedef typename F::in0_t type; };
template <typename F> struct vl_in_type<F, 1> { typedef typename F::in1_t type; };
template <typename F> struct vl_in_type<F, 2> { typedef typename F::in2_t type; };

template <typename T>
VL_DEV T vl_ld(const char *p) {
  return *reinterpret_cast<const T *>(p);
}

template <typename F, int K>
VL_DEV typename vl_in_type<F, K>::type vl_ld_in(const vl_ptrs<F::NIN + 1> &p, int64_t byte_off) {
  typedef typename vl_in_type<F, K>::type T;
  if constexpr (K < F::NIN) return vl_ld<T>(p.p[K + 1] + byte_off);
  else return T();
}

template <typename F, int VEC>
__global__ void __launch_bounds__(VL_EW_BLOCK)
    vl_ew_flat(F f, vl_ptrs<F::NIN + 1> p, int64_t n) {
  typedef typename F::out_t O;
  typedef typename F::in0_t I0;
  typedef typename F::in1_t I1;
  typedef typename F::in2_t I2;
  constexpr int U = F::UNROLL;
  const int64_t nvec = n / VEC;
  const int64_t step = (int64_t)gridDim.x * VL_EW_BLOCK;
  int64_t v = (int64_t)blockIdx.x * VL_EW_BLOCK + threadIdx.x;
  vl_vec<O, VEC> *out = reinterpret_cast<vl_vec<O, VEC> *>(p.p[0]);
  /* All U vectors of an iteration are loaded before any is computed, so U * NIN 16-byte loads
   * are in flight per thread. */
  for (; v + (U - 1) * step < nvec; v += U * step) {
    vl_vec<I0, VEC> a[U];
    vl_vec<I1, VEC> b[U];
    vl_vec<I2, VEC> c[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      if constexpr (F::NIN >= 1) a[u] = reinterpret_cast<const vl_vec<I0, VEC> *>(p.p[1])[v + u * step];
      if constexpr (F::NIN >= 2) b[u] = reinterpret_cast<const vl_vec<I1, VEC> *>(p.p[2])[v + u * step];
      if constexpr (F::NIN >= 3) c[u] = reinterpret_cast<const vl_vec<I2, VEC> *>(p.p[3])[v + u * step];
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      vl_vec<O, VEC> o;
#pragma unroll
      for (int e = 0; e < VEC; e++) o.v[e] = f(a[u].v[e], b[u].v[e], c[u].v[e]);
      out[v + u * step] = o;
    }
  }
  for (; v < nvec; v += step) {
    vl_vec<I0, VEC> a;
    vl_vec<I1, VEC> b;
    vl_vec<I2, VEC> c;
    if constexpr (F::NIN >= 1) a = reinterpret_cast<const vl_vec<I0, VEC> *>(p.p[1])[v];
    if constexpr (F::NIN >= 2) b = reinterpret_cast<const vl_vec<I1, VEC> *>(p.p[2])[v];
    if constexpr (F::NIN >= 3) c = reinterpret_cast<const vl_vec<I2, VEC> *>(p.p[3])[v];
    vl_vec<O, VEC> o;
#pragma unroll
    for (int e = 0; e < VEC; e++) o.v[e] = f(a.v[e], b.v[e], c.v[e]);
    out[v] = o;
  }
  if constexpr (VEC > 1) {
    /* Fewer than VEC elements remain; the grid always has more than VEC threads. */
    int64_t t = nvec * VEC + (int64_t)blockIdx.x * VL_EW_BLOCK + threadIdx.x;
    if (t < n)
      reinterpret_cast<O *>(p.p[0])[t] =
          f(vl_ld_in<F, 0>(p, t * (int64_t)sizeof(I0)), vl_ld_in<F, 1>(p, t * (int64_t)sizeof(I1)),
            vl_ld_in<F, 2>(p, t * (int64_t)sizeof(I2)));
  }
}

/* UNROLL elements per thread and iteration, all offsets and loads issued before any compute:
 * gathers (transposes, broadcasts) are latency-bound and need the loads in flight. */
template <typename F, bool I32>
__global__ void __launch_bounds__(VL_EW_BLOCK)
    vl_ew_strided(F f, vl_ptrs<F::NIN + 1> p, vl_offcalc<F::NIN + 1> oc, int64_t n) {
  constexpr int NOPS = F::NIN + 1, U = F::UNROLL;
  typedef typename F::out_t O;
  typedef typename std::conditional<I32, uint32_t, int64_t>::type I;
  const I step = (I)gridDim.x * VL_EW_BLOCK;
  for (I i0 = (I)blockIdx.x * VL_EW_BLOCK + threadIdx.x; i0 < (I)n; i0 += step * U) {
    int64_t off[U][NOPS];
    typename F::in0_t a[U];
    typename F::in1_t b[U];
    typename F::in2_t c[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const I i = i0 + (I)u * step;
      if (i < (I)n) {
        if constexpr (I32) oc.get32(i, off[u]);
        else oc.get64(i, off[u]);
        a[u] = vl_ld_in<F, 0>(p, off[u][F::NIN >= 1 ? 1 : 0]);
        b[u] = vl_ld_in<F, 1>(p, off[u][F::NIN >= 2 ? 2 : 0]);
        c[u] = vl_ld_in<F, 2>(p, off[u][F::NIN >= 3 ? 3 : 0]);
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++)
      if (i0 + (I)u * step < (I)n) *reinterpret_cast<O *>(p.p[0] + off[u][0]) = f(a[u], b[u], c[u]);
  }
}

template <typename F> constexpr int vl_ew_vec() {
  size_t m = sizeof(typename F::out_t);
  if (F::NIN >= 1 && sizeof(typename F::in0_t) > m) m = sizeof(typename F::in0_t);
  if (F::NIN >= 2 && sizeof(typename F::in1_t) > m) m = sizeof(typename F::in1_t);
  if (F::NIN >= 3 && sizeof(typename F::in2_t) > m) m = sizeof(typename F::in2_t);
  int v = (int)(16 / m);
  return F::UNROLL == 1 && v > 4 ? 4 : v;
}

template <typename F, typename = void> struct vl_flat_only : std::false_type {};
template <typename F>
struct vl_flat_only<F, std::void_t<decltype(F::FLAT_ONLY)>> : std::bool_constant<F::FLAT_ONLY> {};

/* NO_STRIDED64 (optional): the functor's strided kernel exists only for numel < 2^31. */
template <typename F, typename = void> struct vl_no64 : std::false_type {};
template <typename F>
struct vl_no64<F, std::void_t<decltype(F::NO_STRIDED64)>> : std::bool_constant<F::NO_STRIDED64> {};

template <typename F> constexpr size_t vl_ew_elsize(int k) {
  return k == 0 ? sizeof(typename F::out_t)
       : k == 1 ? sizeof(typename F::in0_t)
       : k == 2 ? sizeof(typename F::in1_t)
                : sizeof(typename F::in2_t);
}

/* ALLOW64 false: the caller guarantees numel < 2^31 (no 64-bit instantiation). */
template <typename F, bool ALLOW64 = true>
vl_status vl_ew_launch_strided(const vl_iter *it, const F &f, const vl_cuda_state *st) {
  constexpr int NOPS = F::NIN + 1;
  const int64_t n = it->numel;
  cudaStream_t stream = (cudaStream_t)it->ex.stream;
  vl_ptrs<NOPS> p;
  for (int k = 0; k < NOPS; k++) p.p[k] = it->data[k];
  vl_offcalc<NOPS> oc;
  memset(&oc, 0, sizeof oc);
  oc.ndim = it->ndim;
  for (int j = 0; j < it->ndim; j++) {
    int d = it->ndim - 1 - j;
    int64_t sz = it->size[d]; /* >= 1: numel > 0 */
    oc.size[j] = sz;
    oc.div[j] = vl_divmod32_make((uint32_t)(sz < ((int64_t)1 << 31) ? sz : 1));
    for (int k = 0; k < NOPS; k++) oc.stride[j][k] = it->stride[k][d] * (int64_t)vl_ew_elsize<F>(k);
  }
  unsigned g = vl_grid((n + F::UNROLL - 1) / F::UNROLL, VL_EW_BLOCK, st, 4);
  /* numel < 2^31 bounds every size, so the 32-bit divisions are exact. */
  if (n < ((int64_t)1 << 31)) {
    vl_ew_strided<F, true><<<g, VL_EW_BLOCK, 0, stream>>>(f, p, oc, n);
  } else {
    if constexpr (ALLOW64) vl_ew_strided<F, false><<<g, VL_EW_BLOCK, 0, stream>>>(f, p, oc, n);
    else return vl_fail(VL_EINTERNAL, "elementwise: a 32-bit-only kernel got %lld elements", (long long)n);
  }
  VL_LAUNCH_CHECK();
  return VL_OK;
}

/* The flat path: the caller has checked vl_iter_is_flat(it) and it->numel > 0. Misaligned
 * pointers fall back to the strided kernel (ndim 1), except for FLAT_ONLY functors (the
 * op-specialised ones), which have no strided instantiation: their callers check alignment. */
template <typename F>
bool vl_ew_flat_ok(const vl_iter *it) {
  constexpr int VEC = vl_ew_vec<F>();
  if (VEC <= 1 || !vl_iter_is_flat(it)) return false;
  for (int k = 0; k < F::NIN + 1; k++)
    if ((uintptr_t)it->data[k] % (vl_ew_elsize<F>(k) * VEC) != 0) return false;
  return true;
}

template <typename F>
vl_status vl_ew_launch_flat(const vl_iter *it, const F &f, const vl_cuda_state *st) {
  constexpr int NOPS = F::NIN + 1;
  constexpr int VEC = vl_ew_vec<F>();
  const int64_t n = it->numel;
  cudaStream_t stream = (cudaStream_t)it->ex.stream;
  vl_ptrs<NOPS> p;
  bool aligned = VEC > 1;
  for (int k = 0; k < NOPS; k++) {
    p.p[k] = it->data[k];
    aligned = aligned && ((uintptr_t)p.p[k] % (vl_ew_elsize<F>(k) * VEC)) == 0;
  }
  if (!aligned) {
    if constexpr (vl_flat_only<F>::value)
      return vl_fail(VL_EINTERNAL, "elementwise: misaligned operands reached a flat-only kernel");
    else
      return vl_ew_launch_strided<F, !vl_no64<F>::value>(it, f, st);
  }
  unsigned g = vl_grid((n / VEC + F::UNROLL - 1) / F::UNROLL, VL_EW_BLOCK, st, 2);
  vl_ew_flat<F, VEC><<<g, VL_EW_BLOCK, 0, stream>>>(f, p, n);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

/* Runs f over the iterator (operand count NIN + 1 is the caller's promise). */
template <typename F>
vl_status vl_ew_launch(const vl_iter *it, const F &f) {
  if (it->numel <= 0) return VL_OK;
  VL_CUDA_ENTER(guard, st, it->ex);
  if (vl_iter_is_flat(it)) return vl_ew_launch_flat(it, f, st);
  return vl_ew_launch_strided(it, f, st);
}

#endif
