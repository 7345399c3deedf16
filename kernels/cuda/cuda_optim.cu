/* kernels/cuda/cuda_optim.cu: fused multi-tensor optimizer steps, per-tensor L2 norms and the AMP
 * unscale on CUDA. The update rules are those of kernels/cpu/cpu_optim.c (read its header).
 *
 * Multi-tensor launches (apex's multi_tensor_apply): the tensors of a group are cut into chunks
 * of VL_MT_CHUNK elements; up to VL_MT_MAX_T tensors' pointers, sizes and chunk offsets travel in
 * a struct passed by value as the kernel parameter (under the classic 4 KiB limit), one block per
 * chunk. A group of many tensors takes ceil(n / VL_MT_MAX_T) launches per stage, never one per
 * tensor, and nothing here synchronises with the host.
 *
 * LAMB and LARS need per-tensor norms first: a stage-1 kernel writes one partial sum of squares
 * per chunk (and for LAMB also updates the moments), a per-tensor kernel combines the partials of
 * each tensor in a fixed order (deterministic) into its trust ratio, and the update kernel reads
 * it. Partials and ratios live in the stream's workspace (kernels on one stream are ordered).
 *
 * The elementwise arithmetic uses the explicitly rounded intrinsics (no FMA contraction), in the
 * CPU reference's order, so the two give identical bits for SGD/AdamW (the norms of LAMB/LARS
 * are summed in a different order, a few ulps apart). found_inf != 0 makes every kernel return
 * before writing anything. Half parameters with a->sround are stored by stochastic rounding
 * (runtime/core/sround.h), bit for bit as on the CPU. */
#include <math.h>

#include "kernels/cuda/cuda_common.cuh"
#include "runtime/backend/nn_kernels.h"
#include "runtime/core/sround.h"

/* Measured on an H200 (25.6M f32 parameters in 161 tensors): 4096-element chunks with 256
 * threads beat 16K-64K chunks or 512 threads by 10-40% (more, shorter blocks balance the SMs);
 * AdamW then moves ~3.4 TB/s, SGD ~3.5 TB/s, LARS ~3.2 TB/s, LAMB ~2.5 TB/s. */
#ifndef VL_MT_CHUNK
#define VL_MT_CHUNK 4096       /* elements per block */
#endif
#define VL_MT_MAX_T 80         /* tensors per launch: keeps vl_mt_meta under 4 KiB */
#ifndef VL_MT_THREADS
#define VL_MT_THREADS 256
#endif
#define VL_MT_ILP 4
#define VL_MT_MAX_CHUNKS (1 << 20) /* per launch: bounds the partials in the workspace */
#define VL_MT_FIN_THREADS 256
#define VL_MT_RATIO_BYTES 1024 /* workspace head: VL_MT_MAX_T ratios of at most 8 bytes */

struct vl_mt_meta {
  void *p[VL_MT_MAX_T];
  void *g[VL_MT_MAX_T];
  void *s1[VL_MT_MAX_T];
  void *s2[VL_MT_MAX_T];
  int64_t numel[VL_MT_MAX_T];
  int chunk_start[VL_MT_MAX_T + 1]; /* prefix sums of the tensors' chunk counts */
  int nt;
  int t0; /* the call's index of this launch's first tensor (stochastic rounding's counter) */
};
static_assert(sizeof(vl_mt_meta) <= 3800, "multi-tensor metadata must fit the 4 KiB parameter limit");
static_assert(VL_MT_MAX_T * 8 <= VL_MT_RATIO_BYTES, "ratio area");
static_assert(VL_MT_RATIO_BYTES + (size_t)2 * VL_MT_MAX_CHUNKS * 8 <= VL_CUDA_WORKSPACE_BYTES, "workspace");

/* Hyper-parameters in the compute type, each converted from double once on the host exactly as
 * the CPU reference converts them. */
template <typename A>
struct vl_mt_hp {
  A lr, mom, omd, wd, decay, b1, b2, omb1, omb2, eps, step_size, bc2s, bc1, bc2, trust;
  bool nesterov, first, has_m;
  /* Device {lr, step} (capturable steps, nn_kernels.h) and the doubles its terms derive from. */
  const double *dyn;
  double beta1, beta2, weight_decay;
  /* Stochastic rounding of half parameters (runtime/core/sround.h): key and step count. */
  bool sround;
  uint64_t sround_seed, step;
};

/* The lr- and step-dependent terms from the device {lr, step}, by the host's formulas (the
 * explicitly rounded double operations keep them identical to vl_mt_make_hp's). */
template <typename A>
__device__ __forceinline__ vl_mt_hp<A> vl_mt_hp_at_run(const vl_mt_hp<A> &h0) {
  vl_mt_hp<A> h = h0;
  if (!h.dyn) return h;
  const double lr = h.dyn[0], step = h.dyn[1];
  const double bc1 = __dsub_rn(1.0, pow(h.beta1, step)), bc2 = __dsub_rn(1.0, pow(h.beta2, step));
  h.lr = (A)lr;
  h.step = (uint64_t)step;
  h.decay = (A)__dsub_rn(1.0, __dmul_rn(lr, h.weight_decay));
  h.step_size = (A)__ddiv_rn(lr, bc1);
  h.bc2s = (A)__dsqrt_rn(bc2);
  h.bc1 = (A)bc1;
  h.bc2 = (A)bc2;
  return h;
}

/* Capturable steps: the step count advances on the device, unless AMP found inf/NaN. */
__global__ void vl_mt_advance(double *dyn, const float *found_inf) {
  if (!found_inf || *found_inf == 0.0f) dyn[1] = dyn[1] + 1.0;
}

/* ---- explicitly rounded arithmetic (never contracted into FMAs) ---- */
VL_DEV float vadd(float a, float b) { return __fadd_rn(a, b); }
VL_DEV double vadd(double a, double b) { return __dadd_rn(a, b); }
VL_DEV float vsub(float a, float b) { return __fsub_rn(a, b); }
VL_DEV double vsub(double a, double b) { return __dsub_rn(a, b); }
VL_DEV float vmul(float a, float b) { return __fmul_rn(a, b); }
VL_DEV double vmul(double a, double b) { return __dmul_rn(a, b); }
VL_DEV float vdiv(float a, float b) { return __fdiv_rn(a, b); }
VL_DEV double vdiv(double a, double b) { return __ddiv_rn(a, b); }
VL_DEV float vsqrt(float a) { return __fsqrt_rn(a); }
VL_DEV double vsqrt(double a) { return __dsqrt_rn(a); }
VL_DEV bool vfinite(float a) { return isfinite(a); }
VL_DEV bool vfinite(double a) { return isfinite(a); }

/* A value stored as S and read back (state narrower than the compute type is rounded). */
template <typename S, typename A>
VL_DEV A vl_mt_round(A x, S *dst) {
  S s = vl_conv<S>::f(x);
  *dst = s;
  return (A)vl_val(s);
}

/* A parameter stored: round to nearest even, or for half parameters stochastic rounding when
 * asked, with the CPU's random numbers (element e of the call's tensor `tensor`). */
template <typename P, typename A>
struct vl_mt_store {
  static VL_DEV P f(A x, const vl_mt_hp<A> &, uint32_t, int64_t) { return vl_conv<P>::f(x); }
};
VL_DEV uint16_t vl_half_bits(__half h) { return __half_as_ushort(h); }
VL_DEV uint16_t vl_half_bits(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }
VL_DEV void vl_half_from_bits(uint16_t b, __half *h) { *h = __ushort_as_half(b); }
VL_DEV void vl_half_from_bits(uint16_t b, __nv_bfloat16 *h) { *h = __ushort_as_bfloat16(b); }
template <typename H, int BF16>
struct vl_mt_store_half {
  static VL_DEV H f(float x, const vl_mt_hp<float> &h, uint32_t tensor, int64_t e) {
    H r = vl_conv<H>::f(x);
    if (!h.sround) return r;
    const uint32_t u = vl_sround_random(h.sround_seed, h.step, tensor, (uint64_t)e);
    vl_half_from_bits(vl_sround_bits(x, vl_half_bits(r), BF16, u), &r);
    return r;
  }
};
template <>
struct vl_mt_store<__half, float> : vl_mt_store_half<__half, 0> {};
template <>
struct vl_mt_store<__nv_bfloat16, float> : vl_mt_store_half<__nv_bfloat16, 1> {};

struct vl_mt_add {
  template <typename T>
  VL_DEV T operator()(T a, T b) const { return a + b; }
};

/* The tensor of block b: the last t with chunk_start[t] <= b (empty tensors are skipped since the
 * next start equals theirs). */
VL_DEV int vl_mt_find(const vl_mt_meta &m, int b) {
  int lo = 0, hi = m.nt - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) >> 1;
    if (m.chunk_start[mid] <= b) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

enum { VL_K_SGD = VL_OPTIM_SGD, VL_K_ADAMW = VL_OPTIM_ADAMW, VL_K_LAMB = VL_OPTIM_LAMB, VL_K_LARS = VL_OPTIM_LARS };

/* LAMB's update direction from the (stored) moments. */
template <typename A>
VL_DEV A vl_lamb_u(const vl_mt_hp<A> &h, A p, A m, A v) {
  return vadd(vdiv(vdiv(m, h.bc1), vadd(vsqrt(vdiv(v, h.bc2)), h.eps)), vmul(h.wd, p));
}

/* The update stage of every kind. `ratio` (workspace) holds LARS's local lr / LAMB's trust ratio
 * per tensor of this launch. */
template <int KIND, typename P, typename S, typename A>
__global__ void __launch_bounds__(VL_MT_THREADS)
    vl_mt_update(const __grid_constant__ vl_mt_meta m, const vl_mt_hp<A> h0, const float *found_inf,
                 const float *inv_scale, const A *ratio) {
  if (found_inf && *found_inf != 0.0f) return;
  const vl_mt_hp<A> h = vl_mt_hp_at_run(h0);
  const int b = blockIdx.x, t = vl_mt_find(m, b);
  const int64_t start = (int64_t)(b - m.chunk_start[t]) * VL_MT_CHUNK;
  const int64_t end = start + VL_MT_CHUNK < m.numel[t] ? start + VL_MT_CHUNK : m.numel[t];
  P *__restrict__ pp = (P *)m.p[t];
  const P *__restrict__ gp = (const P *)m.g[t];
  S *__restrict__ s1 = (S *)m.s1[t];
  S *__restrict__ s2 = (S *)m.s2[t];
  const A scale = inv_scale ? (A)*inv_scale : (A)1;
  const A local = KIND == VL_K_LARS ? ratio[t] : (A)1;
  const A wd = h.wd;
  const A lr_r = KIND == VL_K_LAMB ? vmul(h.lr, ratio[t]) : h.lr;
  const bool read_m = KIND == VL_K_ADAMW || KIND == VL_K_LAMB || (h.has_m && !h.first);
  const bool read_g = KIND != VL_K_LAMB;
  const bool read_v = KIND == VL_K_ADAMW || KIND == VL_K_LAMB;
  for (int64_t base = start + threadIdx.x; base < end; base += (int64_t)VL_MT_ILP * blockDim.x) {
    A p[VL_MT_ILP], g[VL_MT_ILP], mm[VL_MT_ILP], vv[VL_MT_ILP];
#pragma unroll
    for (int j = 0; j < VL_MT_ILP; j++) {
      const int64_t i = base + (int64_t)j * blockDim.x;
      p[j] = g[j] = mm[j] = vv[j] = (A)0;
      if (i < end) {
        p[j] = (A)vl_val(pp[i]);
        if (read_g) g[j] = (A)vl_val(gp[i]);
        if (read_m) mm[j] = (A)vl_val(s1[i]);
        if (read_v) vv[j] = (A)vl_val(s2[i]);
      }
    }
#pragma unroll
    for (int j = 0; j < VL_MT_ILP; j++) {
      const int64_t i = base + (int64_t)j * blockDim.x;
      if (i >= end) continue;
      A x = p[j];
      if (KIND == VL_K_SGD || KIND == VL_K_LARS) {
        A d = vmul(g[j], scale);
        if (wd != (A)0) d = vadd(d, vmul(wd, x));
        d = vmul(d, local);
        if (h.has_m) {
          A mv = h.first ? d : vadd(vmul(h.mom, mm[j]), vmul(h.omd, d));
          mv = vl_mt_round<S, A>(mv, &s1[i]);
          d = h.nesterov ? vadd(d, vmul(h.mom, mv)) : mv;
        }
        x = vsub(x, vmul(h.lr, d));
      } else if (KIND == VL_K_ADAMW) {
        A gs = vmul(g[j], scale);
        x = vmul(x, h.decay);
        A mv = vl_mt_round<S, A>(vadd(vmul(h.b1, mm[j]), vmul(h.omb1, gs)), &s1[i]);
        A vv2 = vl_mt_round<S, A>(vadd(vmul(h.b2, vv[j]), vmul(h.omb2, vmul(gs, gs))), &s2[i]);
        A denom = vadd(vdiv(vsqrt(vv2), h.bc2s), h.eps);
        x = vsub(x, vmul(h.step_size, vdiv(mv, denom)));
      } else { /* LAMB stage 2: the moments were updated by stage 1 */
        x = vsub(x, vmul(lr_r, vl_lamb_u(h, x, mm[j], vv[j])));
      }
      pp[i] = vl_mt_store<P, A>::f(x, h, (uint32_t)(m.t0 + t), i);
    }
  }
}

/* Stage 1 of LAMB (moments updated, sums of p^2 and u^2) and LARS (sums of p^2 and (g*scale)^2),
 * and (KIND < 0) the plain sum of squares of l2norms: one pair of partials per block. */
template <int KIND, typename P, typename S, typename A>
__global__ void __launch_bounds__(VL_MT_THREADS)
    vl_mt_stage1(const __grid_constant__ vl_mt_meta m, const vl_mt_hp<A> h0, const float *found_inf,
                 const float *inv_scale, A *partials) {
  __shared__ A sh[32];
  if (found_inf && *found_inf != 0.0f) return;
  const vl_mt_hp<A> h = vl_mt_hp_at_run(h0);
  const int b = blockIdx.x, t = vl_mt_find(m, b);
  const int64_t start = (int64_t)(b - m.chunk_start[t]) * VL_MT_CHUNK;
  const int64_t end = start + VL_MT_CHUNK < m.numel[t] ? start + VL_MT_CHUNK : m.numel[t];
  const P *__restrict__ pp = (const P *)m.p[t];
  const P *__restrict__ gp = (const P *)m.g[t];
  S *__restrict__ s1 = (S *)m.s1[t];
  S *__restrict__ s2 = (S *)m.s2[t];
  const A scale = inv_scale ? (A)*inv_scale : (A)1;
  A sa = 0, sb = 0;
  for (int64_t base = start + threadIdx.x; base < end; base += (int64_t)VL_MT_ILP * blockDim.x) {
    A p[VL_MT_ILP], g[VL_MT_ILP], mm[VL_MT_ILP], vv[VL_MT_ILP];
#pragma unroll
    for (int j = 0; j < VL_MT_ILP; j++) {
      const int64_t i = base + (int64_t)j * blockDim.x;
      p[j] = g[j] = mm[j] = vv[j] = (A)0;
      if (i < end) {
        p[j] = (A)vl_val(pp[i]);
        if (KIND >= 0) g[j] = (A)vl_val(gp[i]);
        if (KIND == VL_K_LAMB) {
          mm[j] = (A)vl_val(s1[i]);
          vv[j] = (A)vl_val(s2[i]);
        }
      }
    }
#pragma unroll
    for (int j = 0; j < VL_MT_ILP; j++) {
      const int64_t i = base + (int64_t)j * blockDim.x;
      if (i >= end) continue;
      sa = vadd(sa, vmul(p[j], p[j]));
      if (KIND == VL_K_LARS) {
        A gs = vmul(g[j], scale);
        sb = vadd(sb, vmul(gs, gs));
      } else if (KIND == VL_K_LAMB) {
        A gs = vmul(g[j], scale);
        A mv = vl_mt_round<S, A>(vadd(vmul(h.b1, mm[j]), vmul(h.omb1, gs)), &s1[i]);
        A vv2 = vl_mt_round<S, A>(vadd(vmul(h.b2, vv[j]), vmul(h.omb2, vmul(gs, gs))), &s2[i]);
        A u = vl_lamb_u(h, p[j], mv, vv2);
        sb = vadd(sb, vmul(u, u));
      }
    }
  }
  sa = vl_block_reduce(sa, vl_mt_add(), sh);
  sb = vl_block_reduce(sb, vl_mt_add(), sh);
  if (threadIdx.x == 0) {
    partials[2 * (int64_t)b] = sa;
    partials[2 * (int64_t)b + 1] = sb;
  }
}

/* One block per tensor of the launch: combines its chunks' partials in a fixed order, then
 * LAMB: ratio = ||p|| / ||u||; LARS: local lr; KIND < 0: norms_out[t] = ||x||. Either is 1 when a
 * norm is 0. */
template <int KIND, typename A>
__global__ void __launch_bounds__(VL_MT_FIN_THREADS)
    vl_mt_finish(const __grid_constant__ vl_mt_meta m, const vl_mt_hp<A> h0, const float *found_inf,
                 const A *partials, A *ratio, float *norms_out) {
  __shared__ A sh[32];
  if (found_inf && *found_inf != 0.0f) return;
  const vl_mt_hp<A> h = vl_mt_hp_at_run(h0);
  const int t = blockIdx.x;
  A sa = 0, sb = 0;
  for (int c = m.chunk_start[t] + threadIdx.x; c < m.chunk_start[t + 1]; c += blockDim.x) {
    sa = vadd(sa, partials[2 * (int64_t)c]);
    sb = vadd(sb, partials[2 * (int64_t)c + 1]);
  }
  sa = vl_block_reduce(sa, vl_mt_add(), sh);
  sb = vl_block_reduce(sb, vl_mt_add(), sh);
  if (threadIdx.x != 0) return;
  const A pn = vsqrt(sa), on = vsqrt(sb);
  if (KIND == VL_K_LAMB) {
    ratio[t] = pn > (A)0 && on > (A)0 ? vdiv(pn, on) : (A)1;
  } else if (KIND == VL_K_LARS) {
    ratio[t] = pn > (A)0 && on > (A)0 ? vdiv(vmul(h.trust, pn), vadd(vadd(on, vmul(h.wd, pn)), h.eps)) : (A)1;
  } else {
    norms_out[t] = (float)pn;
  }
}

/* AMP: x *= inv_scale; found_inf = 1 when an element was inf/NaN before scaling. Every writer
 * stores the same 1.0f, so the race is benign. */
template <typename P>
__global__ void __launch_bounds__(VL_MT_THREADS)
    vl_mt_unscale(const __grid_constant__ vl_mt_meta m, const float *inv_scale, float *found_inf) {
  typedef typename vl_acc<P>::type A;
  const int b = blockIdx.x, t = vl_mt_find(m, b);
  const int64_t start = (int64_t)(b - m.chunk_start[t]) * VL_MT_CHUNK;
  const int64_t end = start + VL_MT_CHUNK < m.numel[t] ? start + VL_MT_CHUNK : m.numel[t];
  P *__restrict__ pp = (P *)m.p[t];
  const A s = (A)*inv_scale;
  bool bad = false;
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    A x = (A)vl_val(pp[i]);
    if (!vfinite(x)) bad = true;
    pp[i] = vl_conv<P>::f(vmul(x, s));
  }
  if (bad) *found_inf = 1.0f;
}

/* ---- host side ---- */

/* Fills m with tensors [*t, ...) up to the per-launch limits; returns the chunk count. */
static vl_status vl_mt_fill(int n, void *const *p, void *const *g, void *const *s1, void *const *s2,
                            const int64_t *numel, int *t, vl_mt_meta *m, int *chunks) {
  m->nt = 0;
  m->t0 = *t;
  m->chunk_start[0] = 0;
  int total = 0;
  while (*t < n && m->nt < VL_MT_MAX_T) {
    const int i = *t;
    const int64_t c = (numel[i] + VL_MT_CHUNK - 1) / VL_MT_CHUNK;
    if (c > VL_MT_MAX_CHUNKS)
      return vl_fail(VL_EINVAL, "tensor %d has %lld elements, more than one multi-tensor launch takes (%lld)", i + 1,
                     (long long)numel[i], (long long)VL_MT_MAX_CHUNKS * VL_MT_CHUNK);
    if (m->nt > 0 && total + c > VL_MT_MAX_CHUNKS) break;
    m->p[m->nt] = p[i];
    m->g[m->nt] = g ? g[i] : NULL;
    m->s1[m->nt] = s1 ? s1[i] : NULL;
    m->s2[m->nt] = s2 ? s2[i] : NULL;
    m->numel[m->nt] = numel[i];
    total += (int)c;
    m->nt++;
    m->chunk_start[m->nt] = total;
    (*t)++;
  }
  *chunks = total;
  return VL_OK;
}

template <typename A>
static vl_mt_hp<A> vl_mt_make_hp(const vl_optim_args *a) {
  vl_mt_hp<A> h;
  const double bc1 = 1.0 - pow(a->beta1, (double)a->step), bc2 = 1.0 - pow(a->beta2, (double)a->step);
  h.lr = (A)a->lr;
  h.mom = (A)a->momentum;
  h.omd = (A)(1.0 - a->dampening);
  h.wd = (A)a->weight_decay;
  h.decay = (A)(1.0 - a->lr * a->weight_decay);
  h.b1 = (A)a->beta1;
  h.b2 = (A)a->beta2;
  h.omb1 = (A)(1.0 - a->beta1);
  h.omb2 = (A)(1.0 - a->beta2);
  h.eps = (A)a->eps;
  h.step_size = (A)(a->lr / bc1);
  h.bc2s = (A)sqrt(bc2);
  h.bc1 = (A)bc1;
  h.bc2 = (A)bc2;
  h.trust = (A)a->trust_coef;
  h.nesterov = a->nesterov;
  h.first = a->first_step;
  h.has_m = a->state1 != NULL && a->momentum != 0.0;
  h.dyn = a->dyn;
  h.beta1 = a->beta1;
  h.beta2 = a->beta2;
  h.weight_decay = a->weight_decay;
  h.sround = a->sround;
  h.sround_seed = a->sround_seed;
  h.step = (uint64_t)a->step;
  return h;
}

template <int KIND, typename P, typename S>
static vl_status vl_mt_step_typed(const vl_optim_args *a, vl_cuda_state *st) {
  typedef typename vl_acc<P>::type A;
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  const vl_mt_hp<A> h = vl_mt_make_hp<A>(a);
  const bool two_stage = KIND == VL_K_LAMB || KIND == VL_K_LARS;
  A *ratio = NULL, *partials = NULL;
  if (two_stage) {
    void *ws = NULL;
    VL_TRY(vl_cuda_workspace(st, a->ex.stream, &ws));
    ratio = (A *)ws;
    partials = (A *)((char *)ws + VL_MT_RATIO_BYTES);
  }
  vl_mt_meta m;
  int t = 0;
  while (t < a->n) {
    int chunks = 0;
    VL_TRY(vl_mt_fill(a->n, a->params, a->grads, a->state1, a->state2, a->numel, &t, &m, &chunks));
    if (chunks == 0) continue; /* only empty tensors */
    if (two_stage) {
      vl_mt_stage1<KIND, P, S, A><<<chunks, VL_MT_THREADS, 0, stream>>>(m, h, a->found_inf, a->inv_scale, partials);
      VL_LAUNCH_CHECK();
      vl_mt_finish<KIND, A><<<m.nt, VL_MT_FIN_THREADS, 0, stream>>>(m, h, a->found_inf, partials, ratio, NULL);
      VL_LAUNCH_CHECK();
    }
    vl_mt_update<KIND, P, S, A><<<chunks, VL_MT_THREADS, 0, stream>>>(m, h, a->found_inf, a->inv_scale, ratio);
    VL_LAUNCH_CHECK();
  }
  return VL_OK;
}

template <typename P, typename S>
static vl_status vl_mt_step_kind(const vl_optim_args *a, vl_cuda_state *st) {
  switch (a->kind) {
    case VL_OPTIM_SGD: return vl_mt_step_typed<VL_K_SGD, P, S>(a, st);
    case VL_OPTIM_ADAMW: return vl_mt_step_typed<VL_K_ADAMW, P, S>(a, st);
    case VL_OPTIM_LAMB: return vl_mt_step_typed<VL_K_LAMB, P, S>(a, st);
    case VL_OPTIM_LARS: return vl_mt_step_typed<VL_K_LARS, P, S>(a, st);
    case VL_NOPTIM_KINDS: break;
  }
  return vl_fail(VL_EINVAL, "optim_step: unknown optimizer kind %d", (int)a->kind);
}

static vl_status vl_cuda_optim_step(const vl_optim_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  if (a->n <= 0) return VL_OK;
  const vl_dtype p = a->param_dtype, s = a->state1 ? a->state_dtype : a->param_dtype;
  if (a->grad_dtype != p)
    return vl_fail(VL_EDTYPE, "optim_step: grads of dtype %s with %s parameters are not supported on cuda",
                   vl_dtype_name(a->grad_dtype), vl_dtype_name(p));
  /* The state is the parameters' dtype, or f32 for f16/bf16 parameters. */
  if (p == VL_F32 && s == VL_F32) return vl_mt_step_kind<float, float>(a, st);
  if (p == VL_F64 && s == VL_F64) return vl_mt_step_kind<double, double>(a, st);
  if (p == VL_F16 && s == VL_F16) return vl_mt_step_kind<__half, __half>(a, st);
  if (p == VL_F16 && s == VL_F32) return vl_mt_step_kind<__half, float>(a, st);
  if (p == VL_BF16 && s == VL_BF16) return vl_mt_step_kind<__nv_bfloat16, __nv_bfloat16>(a, st);
  if (p == VL_BF16 && s == VL_F32) return vl_mt_step_kind<__nv_bfloat16, float>(a, st);
  return vl_fail(VL_EDTYPE, "optim_step: %s parameters with %s state are not supported on cuda", vl_dtype_name(p),
                 vl_dtype_name(s));
}

template <typename P>
static vl_status vl_mt_l2norms_typed(int n, void *const *ptrs, const int64_t *numel, float *out, vl_exec ex,
                                     vl_cuda_state *st) {
  typedef typename vl_acc<P>::type A;
  cudaStream_t stream = (cudaStream_t)ex.stream;
  void *ws = NULL;
  VL_TRY(vl_cuda_workspace(st, ex.stream, &ws));
  A *partials = (A *)((char *)ws + VL_MT_RATIO_BYTES);
  vl_mt_hp<A> h = {};
  vl_mt_meta m;
  int t = 0;
  while (t < n) {
    const int first = t;
    int chunks = 0;
    VL_TRY(vl_mt_fill(n, ptrs, NULL, NULL, NULL, numel, &t, &m, &chunks));
    if (chunks > 0) {
      vl_mt_stage1<-1, P, P, A><<<chunks, VL_MT_THREADS, 0, stream>>>(m, h, NULL, NULL, partials);
      VL_LAUNCH_CHECK();
    }
    /* Also for a launch of empty tensors only: their norms are 0. */
    vl_mt_finish<-1, A><<<m.nt, VL_MT_FIN_THREADS, 0, stream>>>(m, h, NULL, partials, NULL, out + first);
    VL_LAUNCH_CHECK();
  }
  return VL_OK;
}

static vl_status vl_cuda_l2norms(vl_dtype dt, int n, void *const *ptrs, const int64_t *numel, float *out,
                                 vl_exec ex) {
  VL_CUDA_ENTER(guard, st, ex);
  if (n <= 0) return VL_OK;
  VL_DISPATCH_FLOAT(dt, T, "l2norms", return vl_mt_l2norms_typed<T>(n, ptrs, numel, out, ex, st));
  return VL_OK;
}

template <typename P>
static vl_status vl_mt_unscale_typed(int n, void *const *ptrs, const int64_t *numel, const float *inv_scale,
                                     float *found_inf, vl_exec ex) {
  cudaStream_t stream = (cudaStream_t)ex.stream;
  vl_mt_meta m;
  int t = 0;
  while (t < n) {
    int chunks = 0;
    VL_TRY(vl_mt_fill(n, ptrs, NULL, NULL, NULL, numel, &t, &m, &chunks));
    if (chunks == 0) continue;
    vl_mt_unscale<P><<<chunks, VL_MT_THREADS, 0, stream>>>(m, inv_scale, found_inf);
    VL_LAUNCH_CHECK();
  }
  return VL_OK;
}

static vl_status vl_cuda_unscale(vl_dtype dt, int n, void *const *ptrs, const int64_t *numel,
                                 const float *inv_scale, float *found_inf, vl_exec ex) {
  VL_CUDA_ENTER(guard, st, ex);
  (void)st;
  if (n <= 0) return VL_OK;
  VL_DISPATCH_FLOAT(dt, T, "unscale_", return vl_mt_unscale_typed<T>(n, ptrs, numel, inv_scale, found_inf, ex));
  return VL_OK;
}

static vl_status vl_cuda_optim_advance(double *dyn, const float *found_inf, vl_exec ex) {
  VL_CUDA_ENTER(guard, st, ex);
  (void)st;
  vl_mt_advance<<<1, 1, 0, (cudaStream_t)ex.stream>>>(dyn, found_inf);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

/* A host-side table, left out of Clang's device pass (tools/build-sm70.sh): Clang would emit a
 * const table of host function addresses on the GPU too, which ptxas refuses. nvcc keeps it in
 * both passes, as before, and emits nothing of it on the device. */
#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_optim_kernels vl_cuda_optim_kernels = {
    .step = vl_cuda_optim_step,
    .advance = vl_cuda_optim_advance,
    .l2norms = vl_cuda_l2norms,
    .unscale = vl_cuda_unscale,
};
#endif
