/* kernels/cpu/cpu_rand.c: Philox random fills, element for element the stream that
 * runtime/core/philox.h defines (and the CUDA kernels draw), so one seed gives the same tensor on
 * both devices. Values are computed in double and rounded once to the output dtype.
 *
 * The stream is counter-based, so blocks of elements are independent: they are filled on the
 * backend's threads, each element the same whatever thread draws it. (Single-threaded, the
 * dropout masks of a CPU BERT step were 7% of its time, and would have been most of it on 16
 * threads.) f32 uniforms and bernoulli draws take the vector Philox of cpu_vmath.h, several
 * groups at a time; other f32 fills are written directly, without the double buffer. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_vmath.h"
#include "runtime/core/philox.h"

typedef struct {
  const vl_rand_args *a;
  uint64_t seed, first;
  int is_f64, per, bits;
} rand_job;

/* Elements [off, off + m) of the output, off a multiple of 4 (a group boundary). */
static void rand_block(const rand_job *j, int64_t off, int64_t m) {
  const vl_rand_args *a = j->a;
  /* One block buffer: doubles for the float kinds, exact int64 for INT (randint's bounds may be
   * beyond 2^53); converted to the dtype once by the store. */
  union { double d[VL_CPU_BLOCK]; int64_t i[VL_CPU_BLOCK]; } ub;
  double *buf = ub.d;
  float *of = a->dtype == VL_F32 ? (float *)a->out + off : NULL;
  if (a->kind == VL_RAND_INT) {
    for (int64_t i = 0; i < m; i += j->per) {
      int64_t v[4];
      vl_philox_group_int(j->seed, j->first + (uint64_t)((off + i) / j->per), a->lo, a->range, v);
      for (int k = 0; k < j->per && i + k < m; k++) ub.i[i + k] = v[k];
    }
    int64_t es = (int64_t)vl_dtype_size(a->dtype);
    vl_cpu_store_i64((char *)a->out + off * es, es, a->dtype, ub.i, m);
    return;
  }
  for (int64_t i = 0; i < m; i += j->per) {
    uint64_t g = (uint64_t)((off + i) / j->per);
    double v[4];
    if (a->kind == VL_RAND_NORMAL) vl_philox_group_normal(j->seed, j->first + g, j->is_f64, v);
    else if (a->kind == VL_RAND_EXPONENTIAL) vl_philox_group_exponential(j->seed, j->first + g, j->is_f64, v);
    else vl_philox_group_uniform(j->seed, j->first + g, j->is_f64, j->bits, v);
    for (int k = 0; k < j->per && i + k < m; k++) {
      double u = v[k];
      double x = a->kind == VL_RAND_UNIFORM ? a->a + (a->b - a->a) * u
               : a->kind == VL_RAND_NORMAL ? a->a + a->b * u
               : a->kind == VL_RAND_EXPONENTIAL ? u / a->a
               : (double)(u < a->a);
      if (of) of[i + k] = (float)x;
      else buf[i + k] = x;
    }
  }
  if (!of) {
    int64_t es = (int64_t)vl_dtype_size(a->dtype);
    vl_cpu_store_f64((char *)a->out + off * es, es, a->dtype, buf, m);
  }
}

static void rand_range(void *vj, int64_t lo, int64_t hi) {
  const rand_job *j = vj;
  const vl_rand_args *a = j->a;
  /* f32 uniforms and bernoulli draws: the vector Philox (cpu_vmath.h), the same values. */
  bool vec = a->dtype == VL_F32 && (a->kind == VL_RAND_BERNOULLI || a->kind == VL_RAND_UNIFORM);
  for (int64_t b = lo; b < hi; b++) {
    /* VL_CPU_BLOCK is a multiple of 4, so a block starts at a group boundary. */
    int64_t off = b * VL_CPU_BLOCK, m = a->numel - off < VL_CPU_BLOCK ? a->numel - off : VL_CPU_BLOCK;
    if (vec) vl_vm_philox_f32(j->seed, j->first, off / 4, m, a->kind, a->a, a->b, (float *)a->out + off);
    else rand_block(j, off, m);
  }
}

vl_status vl_cpu_rand(const vl_rand_args *a) {
  if (a->kind != VL_RAND_UNIFORM && a->kind != VL_RAND_NORMAL && a->kind != VL_RAND_BERNOULLI &&
      a->kind != VL_RAND_EXPONENTIAL && a->kind != VL_RAND_INT)
    return vl_fail(VL_EINVAL, "rand (cpu): unknown kind %d", (int)a->kind);
  rand_job j = {.a = a};
  /* BERNOULLI uses the 4-words-per-group f32 mapping whatever the output dtype; INT's grouping
   * follows its range (kernels.h vl_rand_per_group). */
  j.per = vl_rand_per_group(a->dtype, a->kind, a->range);
  j.is_f64 = a->kind != VL_RAND_INT && j.per == 2;
  j.bits = vl_rand_uniform_bits(a->dtype, a->kind);
  /* The same contract as the CUDA kernel's (kernels.h): a base overrides key and first counter. */
  j.seed = a->base ? a->base[0] : a->seed;
  j.first = a->base ? a->base[1] + a->offset : a->offset;
  int64_t blocks = (a->numel + VL_CPU_BLOCK - 1) / VL_CPU_BLOCK;
  vl_cpu_parallel_for(blocks, 16, rand_range, &j); /* 4096 elements: a Philox block per 4 */
  return VL_OK;
}
