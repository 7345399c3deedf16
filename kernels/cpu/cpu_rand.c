/* kernels/cpu/cpu_rand.c: Philox random fills, element for element the stream that
 * runtime/core/philox.h defines (and the CUDA kernels draw), so one seed gives the same tensor on
 * both devices. Values are computed in double and rounded once to the output dtype. */
#include "kernels/cpu/cpu_internal.h"
#include "runtime/core/philox.h"

vl_status vl_cpu_rand(const vl_rand_args *a) {
  if (a->kind != VL_RAND_UNIFORM && a->kind != VL_RAND_NORMAL && a->kind != VL_RAND_BERNOULLI)
    return vl_fail(VL_EINVAL, "rand (cpu): unknown kind %d", (int)a->kind);
  /* BERNOULLI uses the 4-words-per-group f32 mapping whatever the output dtype. */
  int is_f64 = a->dtype == VL_F64 && a->kind != VL_RAND_BERNOULLI;
  int per = is_f64 ? 2 : 4;
  int bits = vl_rand_uniform_bits(a->dtype, a->kind);
  int64_t es = (int64_t)vl_dtype_size(a->dtype);
  /* The same contract as the CUDA kernel's (kernels.h): a base overrides key and first counter. */
  const uint64_t seed = a->base ? a->base[0] : a->seed, first = a->base ? a->base[1] + a->offset : a->offset;
  double buf[VL_CPU_BLOCK];
  for (int64_t off = 0; off < a->numel; off += VL_CPU_BLOCK) {
    /* VL_CPU_BLOCK is a multiple of 4, so a block starts at a group boundary. */
    int64_t m = a->numel - off < VL_CPU_BLOCK ? a->numel - off : VL_CPU_BLOCK;
    for (int64_t i = 0; i < m; i += per) {
      uint64_t g = (uint64_t)((off + i) / per);
      double v[4];
      if (a->kind == VL_RAND_NORMAL) vl_philox_group_normal(seed, first + g, is_f64, v);
      else vl_philox_group_uniform(seed, first + g, is_f64, bits, v);
      for (int j = 0; j < per && i + j < m; j++) {
        double u = v[j];
        buf[i + j] = a->kind == VL_RAND_UNIFORM ? a->a + (a->b - a->a) * u
                   : a->kind == VL_RAND_NORMAL ? a->a + a->b * u
                   : (double)(u < a->a);
      }
    }
    vl_cpu_store_f64((char *)a->out + off * es, es, a->dtype, buf, m);
  }
  return VL_OK;
}
