/* kernels/cuda/cuda_rand.cu: Philox random fills with exactly runtime/core/philox.h's mapping.
 *
 * Each thread draws whole groups (one Philox block: 4 values, or 2 for f64 uniform/normal) and
 * writes the elements the header assigns to them, so the numbers equal the CPU's for one seed
 * and offset. The final scaling uses explicitly rounded double operations (__dmul_rn,
 * __dadd_rn): nvcc would otherwise contract a + (b - a) * u into an FMA and uniforms would stop
 * being bit-identical to the CPU's. Integers (randint) are drawn and converted in int64, exactly the
 * CPU's values. */
#include "kernels/cuda/cuda_common.cuh"
#include "runtime/core/philox.h"

/* PER: elements per group (2 for f64 uniform/normal, 4 otherwise). */
template <typename T, int PER>
__global__ void __launch_bounds__(256)
    vl_rand_kernel(T *out, int64_t numel, uint64_t seed, uint64_t offset, const uint64_t *base, int kind,
                   double a, double b, int bits, bool vec_ok) {
  if (base) {
    seed = base[0];
    offset += base[1];
  }
  const int64_t groups = (numel + PER - 1) / PER;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  const double span = __dsub_rn(b, a);
  for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += step) {
    double v[4];
    if (kind == VL_RAND_NORMAL) vl_philox_group_normal(seed, offset + (uint64_t)g, PER == 2, v);
    else if (kind == VL_RAND_EXPONENTIAL) vl_philox_group_exponential(seed, offset + (uint64_t)g, PER == 2, v);
    else vl_philox_group_uniform(seed, offset + (uint64_t)g, PER == 2, bits, v);
    vl_vec<T, PER> r;
#pragma unroll
    for (int j = 0; j < PER; j++) {
      double x;
      if (kind == VL_RAND_UNIFORM) x = __dadd_rn(a, __dmul_rn(span, v[j]));
      else if (kind == VL_RAND_NORMAL) x = __dadd_rn(a, __dmul_rn(b, v[j]));
      else if (kind == VL_RAND_EXPONENTIAL) x = __ddiv_rn(v[j], a);
      else x = v[j] < a ? 1.0 : 0.0;
      r.v[j] = vl_conv<T>::f(x);
    }
    const int64_t i0 = g * PER;
    if (vec_ok && i0 + PER <= numel) {
      reinterpret_cast<vl_vec<T, PER> *>(out)[g] = r;
    } else {
#pragma unroll
      for (int j = 0; j < PER; j++)
        if (i0 + j < numel) out[i0 + j] = r.v[j];
    }
  }
}

/* INT (randint, random_): each thread draws whole groups of per (4 or 2) integers, exact in
 * int64 and converted once to T (vl_conv's int64 rules, as the CPU's store). One kernel per
 * dtype with per a run-time value: the group loop is the same for both. */
template <typename T>
__global__ void __launch_bounds__(256)
    vl_randint_kernel(T *out, int64_t numel, uint64_t seed, uint64_t offset, const uint64_t *base, int64_t lo,
                      uint64_t range, int per) {
  if (base) {
    seed = base[0];
    offset += base[1];
  }
  const int64_t groups = (numel + per - 1) / per;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups; g += step) {
    int64_t v[4];
    vl_philox_group_int(seed, offset + (uint64_t)g, lo, range, v);
    for (int j = 0; j < per; j++)
      if (g * per + j < numel) out[g * per + j] = vl_conv<T>::f(v[j]);
  }
}

template <typename T>
static vl_status vl_randint_launch(const vl_rand_args *a, const vl_cuda_state *st) {
  const int per = vl_rand_per_group(a->dtype, a->kind, a->range);
  const unsigned g = vl_grid((a->numel + per - 1) / per, 256, st, 2);
  vl_randint_kernel<T><<<g, 256, 0, (cudaStream_t)a->ex.stream>>>((T *)a->out, a->numel, a->seed, a->offset, a->base,
                                                                   a->lo, a->range, per);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

template <typename T, int PER>
static vl_status vl_rand_launch(const vl_rand_args *a, const vl_cuda_state *st) {
  const int64_t groups = (a->numel + PER - 1) / PER;
  const unsigned g = vl_grid(groups, 256, st, 2);
  const bool vec_ok = (uintptr_t)a->out % sizeof(vl_vec<T, PER>) == 0;
  vl_rand_kernel<T, PER><<<g, 256, 0, (cudaStream_t)a->ex.stream>>>(
      (T *)a->out, a->numel, a->seed, a->offset, a->base, (int)a->kind, a->a, a->b, vl_rand_uniform_bits(a->dtype, a->kind), vec_ok);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

vl_status vl_cuda_rand(const vl_rand_args *a) {
  if (a->numel <= 0) return VL_OK;
  if (a->kind != VL_RAND_UNIFORM && a->kind != VL_RAND_NORMAL && a->kind != VL_RAND_BERNOULLI &&
      a->kind != VL_RAND_EXPONENTIAL && a->kind != VL_RAND_INT)
    return vl_fail(VL_EINVAL, "rand: unknown kind %d", (int)a->kind);
  VL_CUDA_ENTER(guard, st, a->ex);
  if (a->kind == VL_RAND_INT) {
    VL_DISPATCH_ALL(a->dtype, T, "randint", return vl_randint_launch<T>(a, st));
    return VL_OK;
  }
  if (a->kind == VL_RAND_BERNOULLI) {
    VL_DISPATCH_ALL(a->dtype, T, "bernoulli", return vl_rand_launch<T, 4>(a, st));
    return VL_OK;
  }
  if (a->dtype == VL_F64) return vl_rand_launch<double, 2>(a, st);
  VL_DISPATCH_FLOAT(a->dtype, T, a->kind == VL_RAND_NORMAL ? "randn" : a->kind == VL_RAND_EXPONENTIAL ? "exponential_" : "rand",
                    return vl_rand_launch<T, 4>(a, st));
  return VL_OK;
}
