/* kernels/cpu/cpu_optim.c: the fused optimizer steps, per-tensor L2 norms and the AMP unscale on
 * the CPU (the reference for kernels/cuda/cuda_optim.cu).
 *
 * Arithmetic is done in the compute type of the parameters, float for f32/f16/bf16 and double for
 * f64, in the same operation order as the CUDA kernels, so that the two agree to a few ulps. The
 * update rules (PyTorch's torch.optim; LAMB as apex FusedLAMB; LARS as apex LARC over SGD):
 *
 *   every kind:  g = grad * inv_scale (inv_scale[0], or 1 when absent); nothing at all is written
 *                when found_inf[0] != 0.
 *   SGD:    g += wd * p; with momentum: buf = first_step ? g : momentum * buf + (1 - dampening) * g,
 *           g = nesterov ? g + momentum * buf : buf; p -= lr * g.
 *   ADAMW:  p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *           p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps), bc_k = 1 - b_k^step.
 *   LAMB:   m, v as ADAMW; u = (m / bc1) / (sqrt(v / bc2) + eps) + wd * p;
 *           r = ||p|| / ||u|| per tensor (1 when either is 0); p -= lr * r * u.
 *   LARS:   r = trust_coef ||p|| / (||g|| + wd ||p|| + eps) per tensor (1 when ||p|| or ||g|| is 0);
 *           d = r * (g + wd * p); then SGD's momentum rule on d (no further decay).
 *
 * Moment buffers of a dtype narrower than the compute type are rounded when stored and the
 * rounded values are used afterwards, as separate PyTorch ops would. LAMB computes u twice (once
 * for its norm, once to apply it) from the stored moments, so no temporary buffer is needed.
 * f16/bf16 parameters are stored by stochastic rounding when a->sround (runtime/core/sround.h),
 * else rounded to nearest even. */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "runtime/backend/nn_kernels.h"
#include "runtime/core/sround.h"

#define OB VL_CPU_BLOCK

/* ---- loads and stores of the float dtypes into float / double blocks ---- */
static void ld_float(float *d, const char *s, vl_dtype dt, int64_t n) {
  switch (dt) {
    case VL_F32: memcpy(d, s, (size_t)n * sizeof(float)); break;
    case VL_F16:
      for (int64_t k = 0; k < n; k++) d[k] = (float)vl_cpu_f16_to_f64(((const uint16_t *)s)[k]);
      break;
    case VL_BF16:
      for (int64_t k = 0; k < n; k++) d[k] = (float)vl_cpu_bf16_to_f64(((const uint16_t *)s)[k]);
      break;
    default:
      for (int64_t k = 0; k < n; k++) d[k] = (float)vl_cpu_ld_f64(s + k * (int64_t)vl_dtype_size(dt), dt);
      break;
  }
}
static void st_float(char *d, vl_dtype dt, const float *s, int64_t n) {
  switch (dt) {
    case VL_F32: memcpy(d, s, (size_t)n * sizeof(float)); break;
    /* float -> double is exact, so this is float's round-to-nearest-even, as __float2half_rn. */
    case VL_F16:
      for (int64_t k = 0; k < n; k++) ((uint16_t *)d)[k] = vl_cpu_f64_to_f16(s[k]);
      break;
    case VL_BF16:
      for (int64_t k = 0; k < n; k++) ((uint16_t *)d)[k] = vl_cpu_f64_to_bf16(s[k]);
      break;
    default:
      for (int64_t k = 0; k < n; k++) vl_cpu_st_f64(d + k * (int64_t)vl_dtype_size(dt), dt, s[k]);
      break;
  }
}
static void ld_double(double *d, const char *s, vl_dtype dt, int64_t n) {
  if (dt == VL_F64) memcpy(d, s, (size_t)n * sizeof(double));
  else vl_cpu_load_f64(d, s, (int64_t)vl_dtype_size(dt), dt, n);
}
static void st_double(char *d, vl_dtype dt, const double *s, int64_t n) {
  if (dt == VL_F64) memcpy(d, s, (size_t)n * sizeof(double));
  else vl_cpu_store_f64(d, (int64_t)vl_dtype_size(dt), dt, s, n);
}

/* Stores a block of state and, when the state dtype is narrower than T, reads the rounded values
 * back so the computation continues with what memory holds. */
#define DEF_ST_STATE(T)                                                          \
  static void st_state_##T(char *d, vl_dtype dt, T *s, int64_t n) {              \
    st_##T(d, dt, s, n);                                                         \
    if (vl_dtype_size(dt) < sizeof(T)) ld_##T(s, d, dt, n);                      \
  }
DEF_ST_STATE(float)
DEF_ST_STATE(double)

static float sqrt_float(float x) { return sqrtf(x); }
static double sqrt_double(double x) { return sqrt(x); }

/* The address of element `off` of tensor i in one of the pointer arrays. */
static char *at(void *const *arr, int i, vl_dtype dt, int64_t off) {
  return (char *)arr[i] + off * (int64_t)vl_dtype_size(dt);
}

/* Parameters: elements o..o+n-1 of tensor i, by stochastic rounding when asked (runtime/core/sround.h). */
static void st_param_float(const vl_optim_args *a, int i, int64_t o, const float *p, int64_t n) {
  char *d = at(a->params, i, a->param_dtype, o);
  if (!a->sround || (a->param_dtype != VL_F16 && a->param_dtype != VL_BF16)) {
    st_float(d, a->param_dtype, p, n);
    return;
  }
  const int bf16 = a->param_dtype == VL_BF16;
  const uint64_t step = a->dyn ? (uint64_t)a->dyn[1] : (uint64_t)a->step;
  vl_philox4 blk = {{0}};
  for (int64_t k = 0; k < n; k++) {
    const uint64_t e = (uint64_t)(o + k);
    /* one Philox block per 4 elements: vl_sround_random's words, computed once */
    if (k == 0 || (e & 3) == 0) blk = vl_philox_ctr(a->sround_seed, e >> 2, (uint32_t)step, (uint32_t)i);
    const uint16_t rne = bf16 ? vl_cpu_f64_to_bf16(p[k]) : vl_cpu_f64_to_f16(p[k]);
    ((uint16_t *)d)[k] = vl_sround_bits(p[k], rne, bf16, blk.x[e & 3] >> 8);
  }
}
static void st_param_double(const vl_optim_args *a, int i, int64_t o, const double *p, int64_t n) {
  st_double(at(a->params, i, a->param_dtype, o), a->param_dtype, p, n);
}

/* One set of per-tensor routines per compute type T. `scale` is inv_scale (1 when absent). */
#define DEF_OPTIM(T)                                                                              \
  /* SGD and LARS: d = local * (g * scale + wd * p), then the momentum rule. */                   \
  static void sgd_like_##T(const vl_optim_args *a, int i, T scale, T local, T wd, int64_t o0, int64_t o1) { \
    T p[OB], d[OB], m[OB];                                                                        \
    const bool has_m = a->state1 && a->state1[i] && a->momentum != 0.0;                           \
    const T lr = (T)a->lr, mom = (T)a->momentum, omd = (T)(1.0 - a->dampening);                   \
    for (int64_t o = o0; o < o1; o += OB) {                                                       \
      int64_t n = o1 - o < OB ? o1 - o : OB;                                                      \
      ld_##T(p, at(a->params, i, a->param_dtype, o), a->param_dtype, n);                          \
      ld_##T(d, at(a->grads, i, a->grad_dtype, o), a->grad_dtype, n);                             \
      if (has_m && !a->first_step) ld_##T(m, at(a->state1, i, a->state_dtype, o), a->state_dtype, n); \
      for (int64_t k = 0; k < n; k++) {                                                           \
        d[k] = d[k] * scale;                                                                      \
        if (wd != 0) d[k] = d[k] + wd * p[k];                                                     \
        d[k] = d[k] * local;                                                                      \
      }                                                                                           \
      if (has_m) {                                                                                \
        for (int64_t k = 0; k < n; k++) m[k] = a->first_step ? d[k] : mom * m[k] + omd * d[k];    \
        st_state_##T(at(a->state1, i, a->state_dtype, o), a->state_dtype, m, n);                  \
        for (int64_t k = 0; k < n; k++) d[k] = a->nesterov ? d[k] + mom * m[k] : m[k];            \
      }                                                                                           \
      for (int64_t k = 0; k < n; k++) p[k] = p[k] - lr * d[k];                                    \
      st_param_##T(a, i, o, p, n);                                                                \
    }                                                                                             \
  }                                                                                               \
  static void adamw_##T(const vl_optim_args *a, int i, T scale, int64_t o0, int64_t o1) {         \
    T p[OB], g[OB], m[OB], v[OB];                                                                 \
    const T decay = (T)(1.0 - a->lr * a->weight_decay), b1 = (T)a->beta1, b2 = (T)a->beta2;      \
    const T omb1 = (T)(1.0 - a->beta1), omb2 = (T)(1.0 - a->beta2), eps = (T)a->eps;              \
    const T step_size = (T)(a->lr / (1.0 - pow(a->beta1, (double)a->step)));                     \
    const T bc2s = (T)sqrt(1.0 - pow(a->beta2, (double)a->step));                                 \
    for (int64_t o = o0; o < o1; o += OB) {                                                       \
      int64_t n = o1 - o < OB ? o1 - o : OB;                                                      \
      ld_##T(p, at(a->params, i, a->param_dtype, o), a->param_dtype, n);                          \
      ld_##T(g, at(a->grads, i, a->grad_dtype, o), a->grad_dtype, n);                             \
      ld_##T(m, at(a->state1, i, a->state_dtype, o), a->state_dtype, n);                          \
      ld_##T(v, at(a->state2, i, a->state_dtype, o), a->state_dtype, n);                          \
      for (int64_t k = 0; k < n; k++) {                                                           \
        T x = g[k] * scale;                                                                       \
        p[k] = p[k] * decay;                                                                      \
        m[k] = b1 * m[k] + omb1 * x;                                                              \
        v[k] = b2 * v[k] + omb2 * (x * x);                                                        \
      }                                                                                           \
      st_state_##T(at(a->state1, i, a->state_dtype, o), a->state_dtype, m, n);                   \
      st_state_##T(at(a->state2, i, a->state_dtype, o), a->state_dtype, v, n);                    \
      for (int64_t k = 0; k < n; k++) {                                                           \
        T denom = sqrt_##T(v[k]) / bc2s + eps;                                                    \
        p[k] = p[k] - step_size * (m[k] / denom);                                                 \
      }                                                                                           \
      st_param_##T(a, i, o, p, n);                                                                \
    }                                                                                             \
  }                                                                                               \
  /* LAMB in two passes: moments + norms, then the trust-ratio-scaled update. */                  \
  static void lamb_##T(const vl_optim_args *a, int i, T scale) {                                  \
    T p[OB], g[OB], m[OB], v[OB];                                                                 \
    const T b1 = (T)a->beta1, b2 = (T)a->beta2, omb1 = (T)(1.0 - a->beta1);                       \
    const T omb2 = (T)(1.0 - a->beta2), eps = (T)a->eps, wd = (T)a->weight_decay;                 \
    const T bc1 = (T)(1.0 - pow(a->beta1, (double)a->step));                                      \
    const T bc2 = (T)(1.0 - pow(a->beta2, (double)a->step));                                      \
    double pn2 = 0, un2 = 0;                                                                      \
    for (int64_t o = 0; o < a->numel[i]; o += OB) {                                               \
      int64_t n = a->numel[i] - o < OB ? a->numel[i] - o : OB;                                    \
      ld_##T(p, at(a->params, i, a->param_dtype, o), a->param_dtype, n);                          \
      ld_##T(g, at(a->grads, i, a->grad_dtype, o), a->grad_dtype, n);                             \
      ld_##T(m, at(a->state1, i, a->state_dtype, o), a->state_dtype, n);                          \
      ld_##T(v, at(a->state2, i, a->state_dtype, o), a->state_dtype, n);                          \
      for (int64_t k = 0; k < n; k++) {                                                           \
        T x = g[k] * scale;                                                                       \
        m[k] = b1 * m[k] + omb1 * x;                                                              \
        v[k] = b2 * v[k] + omb2 * (x * x);                                                        \
      }                                                                                           \
      st_state_##T(at(a->state1, i, a->state_dtype, o), a->state_dtype, m, n);                   \
      st_state_##T(at(a->state2, i, a->state_dtype, o), a->state_dtype, v, n);                    \
      for (int64_t k = 0; k < n; k++) {                                                           \
        T u = (m[k] / bc1) / (sqrt_##T(v[k] / bc2) + eps) + wd * p[k];                            \
        pn2 += (double)p[k] * p[k];                                                               \
        un2 += (double)u * u;                                                                     \
      }                                                                                           \
    }                                                                                             \
    T pn = (T)sqrt(pn2), un = (T)sqrt(un2);                                                       \
    T ratio = pn > 0 && un > 0 ? pn / un : (T)1;                                                  \
    const T lr_r = (T)a->lr * ratio;                                                              \
    for (int64_t o = 0; o < a->numel[i]; o += OB) {                                               \
      int64_t n = a->numel[i] - o < OB ? a->numel[i] - o : OB;                                    \
      ld_##T(p, at(a->params, i, a->param_dtype, o), a->param_dtype, n);                          \
      ld_##T(m, at(a->state1, i, a->state_dtype, o), a->state_dtype, n);                          \
      ld_##T(v, at(a->state2, i, a->state_dtype, o), a->state_dtype, n);                          \
      for (int64_t k = 0; k < n; k++) {                                                           \
        T u = (m[k] / bc1) / (sqrt_##T(v[k] / bc2) + eps) + wd * p[k];                            \
        p[k] = p[k] - lr_r * u;                                                                   \
      }                                                                                           \
      st_param_##T(a, i, o, p, n);                                                                \
    }                                                                                             \
  }                                                                                               \
  /* LARS: the norms of p and of the scaled grad give the local lr of the SGD pass. */            \
  static void lars_##T(const vl_optim_args *a, int i, T scale) {                                  \
    T p[OB], g[OB];                                                                               \
    double pn2 = 0, gn2 = 0;                                                                      \
    for (int64_t o = 0; o < a->numel[i]; o += OB) {                                               \
      int64_t n = a->numel[i] - o < OB ? a->numel[i] - o : OB;                                    \
      ld_##T(p, at(a->params, i, a->param_dtype, o), a->param_dtype, n);                          \
      ld_##T(g, at(a->grads, i, a->grad_dtype, o), a->grad_dtype, n);                             \
      for (int64_t k = 0; k < n; k++) {                                                           \
        T x = g[k] * scale;                                                                       \
        pn2 += (double)p[k] * p[k];                                                               \
        gn2 += (double)x * x;                                                                     \
      }                                                                                           \
    }                                                                                             \
    const T wd = (T)a->weight_decay;                                                              \
    T pn = (T)sqrt(pn2), gn = (T)sqrt(gn2);                                                       \
    T local = pn > 0 && gn > 0 ? (T)a->trust_coef * pn / (gn + wd * pn + (T)a->eps) : (T)1;       \
    sgd_like_##T(a, i, scale, local, wd, 0, a->numel[i]);                                         \
  }                                                                                               \
  /* Elements [o0, o1) of tensor i (LAMB and LARS: the whole tensor, for its norms). */           \
  static void step_##T(const vl_optim_args *a, int i, T scale, int64_t o0, int64_t o1) {          \
    switch (a->kind) {                                                                            \
      case VL_OPTIM_SGD: sgd_like_##T(a, i, scale, (T)1, (T)a->weight_decay, o0, o1); break;      \
      case VL_OPTIM_ADAMW: adamw_##T(a, i, scale, o0, o1); break;                                 \
      case VL_OPTIM_LAMB: lamb_##T(a, i, scale); break;                                           \
      case VL_OPTIM_LARS: lars_##T(a, i, scale); break;                                           \
      case VL_NOPTIM_KINDS: break; /* rejected by cpu_optim_step */                               \
    }                                                                                             \
  }

DEF_OPTIM(float)
DEF_OPTIM(double)

/* The step over the CPU threads: task t is a chunk of one tensor; each element is updated by
 * exactly the arithmetic of the serial loop, so the thread count changes no result. */
#define OPTIM_CHUNK 16384
typedef struct {
  const vl_optim_args *a;
  double scale;
  int64_t *first; /* first task of tensor i; first[n] tasks in all */
  int64_t chunk;
  bool whole;
} optim_job;

static void optim_range(void *vj, int64_t lo, int64_t hi) {
  const optim_job *j = vj;
  const vl_optim_args *a = j->a;
  int i = 0;
  while (j->first[i + 1] <= lo) i++;
  for (int64_t t = lo; t < hi; t++) {
    while (j->first[i + 1] <= t) i++;
    int64_t o0 = j->whole ? 0 : (t - j->first[i]) * j->chunk;
    int64_t o1 = j->whole || o0 + j->chunk > a->numel[i] ? a->numel[i] : o0 + j->chunk;
    if (a->param_dtype == VL_F64) step_double(a, i, j->scale, o0, o1);
    else step_float(a, i, (float)j->scale, o0, o1);
  }
}

static vl_status cpu_optim_step(const vl_optim_args *a) {
  if (a->kind < VL_OPTIM_SGD || a->kind > VL_OPTIM_LARS)
    return vl_fail(VL_EINVAL, "optim_step: unknown optimizer kind %d", (int)a->kind);
  if (a->found_inf && *a->found_inf != 0.0f) return VL_OK; /* AMP: the step is skipped */
  vl_optim_args b = *a;
  if (a->dyn) { /* capturable: lr and step from memory, as the CUDA kernels read them */
    b.lr = a->dyn[0];
    b.step = (int64_t)a->dyn[1];
  }
  optim_job j = {.a = &b, .chunk = OPTIM_CHUNK};
  j.scale = b.inv_scale ? (double)*b.inv_scale : 1.0;
  /* SGD and AdamW are elementwise: chunks of a tensor are tasks of their own. LAMB and LARS take
   * norms over each tensor (summed in order): a tensor per task. */
  bool whole = b.kind == VL_OPTIM_LAMB || b.kind == VL_OPTIM_LARS;
  j.first = malloc((size_t)(b.n + 1) * sizeof *j.first);
  if (!j.first) { /* no task table: the tensors one after another on this thread */
    for (int i = 0; i < b.n; i++) {
      if (b.param_dtype == VL_F64) step_double(&b, i, j.scale, 0, b.numel[i]);
      else step_float(&b, i, (float)j.scale, 0, b.numel[i]);
    }
    return VL_OK;
  }
  j.first[0] = 0;
  for (int i = 0; i < b.n; i++) {
    int64_t tasks = whole || b.numel[i] <= j.chunk ? 1 : (b.numel[i] + j.chunk - 1) / j.chunk;
    j.first[i + 1] = j.first[i] + tasks;
  }
  j.whole = whole;
  vl_cpu_parallel_for(j.first[b.n], 1, optim_range, &j);
  free(j.first);
  return VL_OK;
}

static vl_status cpu_l2norms(vl_dtype dt, int n, void *const *ptrs, const int64_t *numel, float *out, vl_exec ex) {
  (void)ex;
  double buf[OB];
  for (int i = 0; i < n; i++) {
    double s = 0;
    for (int64_t o = 0; o < numel[i]; o += OB) {
      int64_t m = numel[i] - o < OB ? numel[i] - o : OB;
      ld_double(buf, at(ptrs, i, dt, o), dt, m);
      for (int64_t k = 0; k < m; k++) s += buf[k] * buf[k];
    }
    out[i] = (float)sqrt(s);
  }
  return VL_OK;
}

/* The non-finite test looks at the value before scaling, as PyTorch's
 * _amp_foreach_non_finite_check_and_unscale_ does. */
static vl_status cpu_unscale(vl_dtype dt, int n, void *const *ptrs, const int64_t *numel, const float *inv_scale,
                             float *found_inf, vl_exec ex) {
  (void)ex;
  bool bad = false;
  if (dt == VL_F64) {
    const double s = *inv_scale;
    for (int i = 0; i < n; i++) {
      double *p = ptrs[i];
      for (int64_t k = 0; k < numel[i]; k++) {
        if (!isfinite(p[k])) bad = true;
        p[k] = p[k] * s;
      }
    }
  } else {
    const float s = *inv_scale;
    float buf[OB];
    for (int i = 0; i < n; i++)
      for (int64_t o = 0; o < numel[i]; o += OB) {
        int64_t m = numel[i] - o < OB ? numel[i] - o : OB;
        ld_float(buf, at(ptrs, i, dt, o), dt, m);
        for (int64_t k = 0; k < m; k++) {
          if (!isfinite(buf[k])) bad = true;
          buf[k] = buf[k] * s;
        }
        st_float(at(ptrs, i, dt, o), dt, buf, m);
      }
  }
  if (bad) *found_inf = 1.0f;
  return VL_OK;
}

static vl_status cpu_optim_advance(double *dyn, const float *found_inf, vl_exec ex) {
  (void)ex;
  if (!found_inf || *found_inf == 0.0f) dyn[1] += 1.0;
  return VL_OK;
}

const vl_optim_kernels vl_cpu_optim_kernels = {
    .step = cpu_optim_step,
    .advance = cpu_optim_advance,
    .l2norms = cpu_l2norms,
    .unscale = cpu_unscale,
};
