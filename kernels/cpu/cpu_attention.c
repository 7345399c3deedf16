/* kernels/cpu/cpu_attention.c: fused scaled-dot-product attention on the CPU, the reference the
 * CUDA kernels (kernels/cuda/cuda_attention.cu) are tested against. The contract (strides, the
 * additive mask, causal, lse, the dropout bits and their Philox stream) is runtime/backend/nn_kernels.h's.
 *
 * One task per (batch, head) on the backend's threads. The head's K and V are converted once
 * into dense rows of the compute type (double for f64, float otherwise) and transposed, so that
 * every inner loop is an axpy over a contiguous row (it vectorises without reassociating sums:
 * the result does not depend on the thread count). The L x S scores exist one row at a time. */
#include <math.h>
#include <stdlib.h>

/* The inner loops are axpys over contiguous rows: -O3 vectorises them (the default -O2 does only
 * loops that need no aliasing checks), and on x86-64 the range functions are also built for
 * Haswell and newer (AVX2 + FMA), picked at load time; the sums keep their order either way. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(VL_NO_TARGET_CLONES)
#define VL_ATTN_CLONES __attribute__((target_clones("arch=haswell", "default")))
#else
#define VL_ATTN_CLONES
#endif

#include "kernels/cpu/cpu_internal.h"
#include "runtime/backend/nn_kernels.h"
#include "runtime/core/philox.h"

/* The dropout decision of element e (the row-major index into B x H x L x S), as v100.bernoulli
 * draws it: counter offset + e / 4, word e % 4, its top 23 bits against keep_below. Consecutive
 * elements share one Philox block, which `cache` keeps. */
typedef struct {
  uint64_t seed, offset, group;
  vl_philox4 block;
  bool valid;
} keep_cache;

static bool keep_of(keep_cache *c, uint64_t e, uint32_t keep_below) {
  uint64_t g = e / 4;
  if (!c->valid || g != c->group) {
    c->block = vl_philox(c->seed, c->offset + g);
    c->group = g;
    c->valid = true;
  }
  return (c->block.x[e % 4] >> 9) < keep_below;
}

/* Strided row r of a B x H x N x E operand of head bh. */
static const char *row_of(const void *base, const int64_t st[3], int64_t H, int64_t bh, int64_t r, int64_t es) {
  return (const char *)base + ((bh / H) * st[0] + (bh % H) * st[1] + r * st[2]) * es;
}

static double mask_at(const vl_attention_args *a, int64_t bh, int64_t i, int64_t j) {
  if (!a->mask) return 0.0;
  int64_t at = (bh / a->h) * a->mask_st[0] + (bh % a->h) * a->mask_st[1] + i * a->mask_st[2] + j * a->mask_st[3];
  return a->dtype == VL_F64 ? ((const double *)a->mask)[at] : (double)((const float *)a->mask)[at];
}

typedef struct {
  const vl_attention_args *a;
  _Atomic int failed; /* a task could not allocate its buffers */
} attn_job;

/* The body once per compute type: REAL float (f32, f16, bf16) or double (f64). */
#define REAL float
#define SFX _f
#include "kernels/cpu/cpu_attention_impl.h"
#undef REAL
#undef SFX
#define REAL double
#define SFX _d
#include "kernels/cpu/cpu_attention_impl.h"
#undef REAL
#undef SFX

static bool cpu_attn_supports(const vl_attention_args *a) { return vl_dtype_is_float(a->dtype); }

static vl_status run(const vl_attention_args *a, bool backward) {
  if (a->b * a->h == 0 || a->l == 0) return VL_OK;
  attn_job j = {.a = a, .failed = 0};
  vl_cpu_range_fn fn = a->dtype == VL_F64 ? (backward ? attn_bw_range_d : attn_fw_range_d)
                                          : (backward ? attn_bw_range_f : attn_fw_range_f);
  vl_cpu_parallel_for(a->b * a->h, 1, fn, &j);
  if (j.failed)
    return vl_fail(VL_EOOM, "attention%s (cpu): cannot allocate the buffers of one head (L %lld, S %lld, E %lld)",
                   backward ? "_backward" : "", (long long)a->l, (long long)a->s, (long long)a->e);
  return VL_OK;
}

static vl_status cpu_attn_forward(const vl_attention_args *a) { return run(a, false); }
static vl_status cpu_attn_backward(const vl_attention_args *a) { return run(a, true); }

const vl_attention_kernels vl_cpu_attention_kernels = {
    .supports = cpu_attn_supports,
    .forward = cpu_attn_forward,
    .backward = cpu_attn_backward,
};
