/* kernels/cpu/cpu_reduce.c: reductions and softmax over contiguous [outer, len, inner].
 *
 * Two shapes of loop cover every case without strided element-by-element reads:
 *  - inner == 1 ("row"): each output reduces a contiguous row; the row is read in blocks and
 *    each block is summed on its own before joining the row total (a two-level sum, so error
 *    grows with len/BLOCK + BLOCK rather than len).
 *  - inner > 1 ("lanes"): up to BLOCK adjacent outputs are reduced together, reading one
 *    contiguous stretch of `inner` per step along len into per-lane accumulators.
 * Floats accumulate in double, integers in int64 (wrapping). VAR is two-pass (mean, then the sum
 * of squared deviations). MAX/MIN keep the first extremum and the first NaN, with its index. */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_vmath.h"

#define B VL_CPU_BLOCK

/* What each element contributes to a sum: x itself, |x|, x^2, |x|^p, x != 0, (x - mean)^2. */
enum { TF_ID, TF_ABS, TF_SQ, TF_POW, TF_NZ, TF_DEV2 };
/* How contributions combine. */
enum { CB_SUM, CB_PROD, CB_MAX, CB_MIN };

typedef struct {
  int tf, cb;
  double p;            /* TF_POW exponent */
} red_plan;

static void transform(int tf, double *x, int64_t m, const double *mean, int64_t mean_stride,
                      double p) {
  switch (tf) {
    case TF_ABS: for (int64_t i = 0; i < m; i++) x[i] = fabs(x[i]); break;
    case TF_SQ: for (int64_t i = 0; i < m; i++) x[i] = x[i] * x[i]; break;
    case TF_POW: for (int64_t i = 0; i < m; i++) x[i] = pow(fabs(x[i]), p); break;
    case TF_NZ: for (int64_t i = 0; i < m; i++) x[i] = x[i] != 0; break;
    case TF_DEV2:
      for (int64_t i = 0; i < m; i++) {
        double d = x[i] - mean[i * mean_stride];
        x[i] = d * d;
      }
      break;
    default: break;
  }
}

/* One extremum step: NaN sticks (first NaN wins), otherwise strictly better replaces, so the
 * first of equal extrema keeps its index. */
#define VL_EXT_STEP(ACC, IDX, X, L, BETTER)                    \
  do {                                                         \
    if ((ACC) == (ACC)) {                                      \
      if ((X) != (X) || (X) BETTER (ACC)) { (ACC) = (X); (IDX) = (L); } \
    }                                                          \
  } while (0)

static double init_f64(int cb) {
  return cb == CB_PROD ? 1.0 : cb == CB_MAX ? -INFINITY : cb == CB_MIN ? INFINITY : 0.0;
}

/* Reduces [outer, len, inner] of float input into acc[outer*inner] (and idx for MAX/MIN).
 * mean (per output) is read for TF_DEV2. */
static void reduce_f64(const red_plan *pl, const char *in, vl_dtype dt, int64_t outer, int64_t len,
                       int64_t inner, const double *mean, double *acc, int64_t *idx) {
  int64_t es = (int64_t)vl_dtype_size(dt);
  double buf[B];
  int64_t scratch_idx[B]; /* lane indices when the caller wants none */
  for (int64_t o = 0; o < outer; o++) {
    const char *base = in + o * len * inner * es;
    if (inner == 1 && dt == VL_F32 && pl->tf == TF_ID && len < INT32_MAX &&
        (pl->cb == CB_SUM || pl->cb == CB_MAX || pl->cb == CB_MIN)) {
      /* A contiguous f32 row: the vector code (cpu_vmath.h), several accumulators (the loop
       * below is one dependent chain of double adds) and no conversion pass. */
      if (pl->cb == CB_SUM) {
        acc[o] = vl_vm_sum_row_f32((const float *)base, len);
      } else {
        int64_t ai;
        vl_vm_ext_row_f32((const float *)base, len, pl->cb == CB_MAX, &acc[o], &ai);
        if (idx) idx[o] = ai;
      }
      continue;
    }
    if (inner == 1) {
      double a = init_f64(pl->cb);
      int64_t ai = 0;
      for (int64_t l0 = 0; l0 < len; l0 += B) {
        int64_t m = len - l0 < B ? len - l0 : B;
        vl_cpu_load_f64(buf, base + l0 * es, es, dt, m);
        transform(pl->tf, buf, m, mean ? mean + o : NULL, 0, pl->p);
        if (pl->cb == CB_SUM) {
          double s = 0;
          for (int64_t i = 0; i < m; i++) s += buf[i];
          a += s;
        } else if (pl->cb == CB_PROD) {
          for (int64_t i = 0; i < m; i++) a *= buf[i];
        } else if (pl->cb == CB_MAX) {
          for (int64_t i = 0; i < m; i++) VL_EXT_STEP(a, ai, buf[i], l0 + i, >);
        } else {
          for (int64_t i = 0; i < m; i++) VL_EXT_STEP(a, ai, buf[i], l0 + i, <);
        }
      }
      acc[o] = a;
      if (idx) idx[o] = ai;
      continue;
    }
    for (int64_t j0 = 0; j0 < inner; j0 += B) {
      int64_t w = inner - j0 < B ? inner - j0 : B;
      double *a = acc + o * inner + j0;
      int64_t *ai = idx ? idx + o * inner + j0 : scratch_idx;
      if (dt == VL_F32 && pl->tf == TF_ID && (pl->cb == CB_MAX || pl->cb == CB_MIN) && len < INT32_MAX) {
        /* f32 extrema over a middle dim: float lanes across the inner dim, the same rule */
        vl_vm_ext_lanes_f32((const float *)base + j0, inner, len, w, pl->cb == CB_MAX, a, ai);
        continue;
      }
      for (int64_t j = 0; j < w; j++) {
        a[j] = init_f64(pl->cb);
        ai[j] = 0;
      }
      for (int64_t l = 0; l < len; l++) {
        vl_cpu_load_f64(buf, base + (l * inner + j0) * es, es, dt, w);
        transform(pl->tf, buf, w, mean ? mean + o * inner + j0 : NULL, 1, pl->p);
        switch (pl->cb) {
          case CB_SUM: for (int64_t j = 0; j < w; j++) a[j] += buf[j]; break;
          case CB_PROD: for (int64_t j = 0; j < w; j++) a[j] *= buf[j]; break;
          case CB_MAX: for (int64_t j = 0; j < w; j++) VL_EXT_STEP(a[j], ai[j], buf[j], l, >); break;
          default: for (int64_t j = 0; j < w; j++) VL_EXT_STEP(a[j], ai[j], buf[j], l, <); break;
        }
      }
    }
  }
}

/* Integer SUM/PROD (wrapping) and MAX/MIN, same loop shapes. */
static void reduce_i64(int cb, const char *in, vl_dtype dt, int64_t outer, int64_t len,
                       int64_t inner, int64_t *acc, int64_t *idx) {
  int64_t es = (int64_t)vl_dtype_size(dt);
  int64_t buf[B];
  int64_t init = cb == CB_PROD ? 1 : cb == CB_MAX ? INT64_MIN : cb == CB_MIN ? INT64_MAX : 0;
  for (int64_t o = 0; o < outer; o++) {
    const char *base = in + o * len * inner * es;
    for (int64_t j0 = 0; j0 < inner; j0 += (inner == 1 ? 1 : B)) {
      int64_t w = inner == 1 ? 1 : (inner - j0 < B ? inner - j0 : B);
      int64_t *a = acc + o * inner + j0;
      int64_t *ai = idx ? idx + o * inner + j0 : NULL;
      for (int64_t j = 0; j < w; j++) {
        a[j] = init;
        if (ai) ai[j] = 0;
      }
      /* With inner == 1 a step reads a block of the row into lane 0; otherwise one element per
       * lane. `k` walks the elements of the step, `j` the lane, `l` the position along len. */
      int64_t step = inner == 1 ? B : 1;
      for (int64_t l0 = 0; l0 < len; l0 += step) {
        int64_t m = inner == 1 ? (len - l0 < B ? len - l0 : B) : w;
        vl_cpu_load_i64(buf, base + (l0 * inner + j0) * es, es, dt, m);
        for (int64_t k = 0; k < m; k++) {
          int64_t j = inner == 1 ? 0 : k, l = inner == 1 ? l0 + k : l0, x = buf[k];
          switch (cb) {
            case CB_SUM: a[j] = (int64_t)((uint64_t)a[j] + (uint64_t)x); break;
            case CB_PROD: a[j] = (int64_t)((uint64_t)a[j] * (uint64_t)x); break;
            case CB_MAX: if (x > a[j]) { a[j] = x; if (ai) ai[j] = l; } break;
            default: if (x < a[j]) { a[j] = x; if (ai) ai[j] = l; } break;
          }
        }
      }
    }
  }
}

/* The outer index's reductions are independent: split over the CPU threads, each range of outer
 * indices reduced exactly as alone (the same sums in the same order for any thread count). A
 * reduction with one outer index (a whole-tensor sum) stays on one thread. */
typedef struct {
  const red_plan *pl;
  int cb;
  const char *in;
  vl_dtype dt;
  int64_t len, inner;
  const double *mean;
  double *acc;
  int64_t *iacc, *idx;
} red_job;

static void red_range(void *vj, int64_t lo, int64_t hi) {
  const red_job *j = vj;
  int64_t es = (int64_t)vl_dtype_size(j->dt), off = lo * j->inner;
  const char *in = j->in + lo * j->len * j->inner * es;
  int64_t *idx = j->idx ? j->idx + off : NULL;
  if (j->iacc) reduce_i64(j->cb, in, j->dt, hi - lo, j->len, j->inner, j->iacc + off, idx);
  else reduce_f64(j->pl, in, j->dt, hi - lo, j->len, j->inner, j->mean ? j->mean + off : NULL, j->acc + off, idx);
}

static void reduce_par(red_job *j, int64_t outer) {
  int64_t per = j->len * j->inner; /* elements read per outer index */
  vl_cpu_parallel_for(outer, per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1), red_range, j);
}

/* f32 sums over a middle dim (inner > 1): a bias gradient, the backward of a broadcast. The len
 * rows are cut into fixed chunks of LANES_ROWS (never by thread count), each chunk's lanes summed
 * in double in row order by the vector code, the chunks' partial sums then added in chunk order:
 * the same result for any thread count, and parallel even with one outer index (a [4096, 128]
 * bias gradient was one thread's sequential walk). Up to LANES_ROWS rows this is the plain row
 * order of reduce_f64. */
#define LANES_ROWS 256
/* Lanes per task: rows are read in stretches of LANES_W floats (8 KiB, two pages: 256 lanes were
 * one 1 KiB piece per 4 KiB row, a stride the prefetchers follow poorly) into an L1-resident
 * row of double accumulators. */
#define LANES_W 2048
typedef struct {
  const float *in;
  int64_t len, inner, nch, nlb;
  double *part; /* [outer][nch][inner] */
} lanes_job;

static void lanes_range(void *vj, int64_t lo, int64_t hi) {
  const lanes_job *j = vj;
  int64_t per = j->nch * j->nlb;
  for (int64_t t = lo; t < hi; t++) {
    int64_t o = t / per, c = (t % per) / j->nlb, j0 = (t % j->nlb) * LANES_W;
    int64_t l0 = c * LANES_ROWS, rows = j->len - l0 < LANES_ROWS ? j->len - l0 : LANES_ROWS;
    int64_t w = j->inner - j0 < LANES_W ? j->inner - j0 : LANES_W;
    double *p = j->part + (o * j->nch + c) * j->inner + j0;
    for (int64_t k = 0; k < w; k++) p[k] = 0.0;
    vl_vm_sum_lanes_f32(j->in + (o * j->len + l0) * j->inner + j0, j->inner, rows, w, p);
  }
}

static vl_status sum_lanes_f32(const vl_reduce_args *a, double *acc) {
  lanes_job j = {.in = a->in, .len = a->len, .inner = a->inner, .nch = (a->len + LANES_ROWS - 1) / LANES_ROWS,
                 .nlb = (a->inner + LANES_W - 1) / LANES_W};
  if (j.nch < 1) j.nch = 1;
  j.part = malloc((size_t)(a->outer * j.nch * a->inner) * sizeof *j.part);
  if (!j.part) return vl_fail(VL_EOOM, "sum (cpu): cannot allocate %lld partial sums", (long long)(a->outer * j.nch * a->inner));
  if (a->len == 0) {
    for (int64_t i = 0; i < a->outer * a->inner; i++) j.part[i] = 0.0;
  } else {
    int64_t tasks = a->outer * j.nch * j.nlb, task_elems = LANES_ROWS * (a->inner < LANES_W ? a->inner : LANES_W);
    vl_cpu_parallel_for(tasks, task_elems >= 16384 ? 1 : 16384 / task_elems, lanes_range, &j);
  }
  for (int64_t o = 0; o < a->outer; o++)
    for (int64_t k = 0; k < a->inner; k++) {
      const double *p = j.part + o * j.nch * a->inner + k;
      double s = p[0];
      for (int64_t c = 1; c < j.nch; c++) s += p[c * a->inner];
      acc[o * a->inner + k] = s;
    }
  free(j.part);
  return VL_OK;
}

/* Long contiguous f32 rows (a whole-tensor sum, max or min; a few long rows): cut into fixed
 * chunks of ROW_CHUNK elements (never by thread count), each chunk reduced by the vector code
 * on some thread, then the chunks joined in order: sums added chunk by chunk, extrema by the
 * first-extremum / first-NaN rule (each chunk gives its own first one, positions offset). The
 * same result for any thread count; before, a whole-tensor reduction ran on one thread. */
#define ROW_CHUNK 65536
typedef struct {
  const float *in;
  int64_t len, nch;
  int cb;
  double *pv;
  int64_t *pi;
} rowchunk_job;

static void rowchunk_range(void *vj, int64_t lo, int64_t hi) {
  const rowchunk_job *j = vj;
  for (int64_t t = lo; t < hi; t++) {
    int64_t o = t / j->nch, c = t % j->nch, l0 = c * ROW_CHUNK;
    int64_t n = j->len - l0 < ROW_CHUNK ? j->len - l0 : ROW_CHUNK;
    const float *p = j->in + o * j->len + l0;
    if (j->cb == CB_SUM) {
      j->pv[t] = vl_vm_sum_row_f32(p, n);
    } else {
      vl_vm_ext_row_f32(p, n, j->cb == CB_MAX, &j->pv[t], &j->pi[t]);
      j->pi[t] += l0;
    }
  }
}

static vl_status reduce_long_rows_f32(const vl_reduce_args *a, int cb, double *acc, int64_t *idx) {
  rowchunk_job j = {.in = a->in, .len = a->len, .nch = (a->len + ROW_CHUNK - 1) / ROW_CHUNK, .cb = cb};
  int64_t tasks = a->outer * j.nch;
  j.pv = malloc((size_t)tasks * sizeof *j.pv);
  j.pi = malloc((size_t)tasks * sizeof *j.pi);
  if (!j.pv || !j.pi) {
    free(j.pv);
    free(j.pi);
    return vl_fail(VL_EOOM, "reduce (cpu): cannot allocate %lld partial results", (long long)tasks);
  }
  vl_cpu_parallel_for(tasks, 1, rowchunk_range, &j);
  for (int64_t o = 0; o < a->outer; o++) {
    const double *v = j.pv + o * j.nch;
    const int64_t *pi = j.pi + o * j.nch;
    double r = v[0];
    int64_t ri = pi[0];
    for (int64_t c = 1; c < j.nch; c++) {
      if (cb == CB_SUM) r += v[c];
      else if (cb == CB_MAX) VL_EXT_STEP(r, ri, v[c], pi[c], >);
      else VL_EXT_STEP(r, ri, v[c], pi[c], <);
    }
    acc[o] = r;
    if (idx) idx[o] = ri;
  }
  free(j.pv);
  free(j.pi);
  return VL_OK;
}

static const char *red_name(vl_reduce_op op) {
  static const char *const names[] = {"sum", "prod", "mean", "max", "min", "var", "norm"};
  VL_TABLE_SIZE(names, VL_NREDUCE);
  return (unsigned)op < VL_NREDUCE ? names[op] : "reduce";
}

vl_status vl_cpu_reduce(const vl_reduce_args *a) {
  if ((unsigned)a->op >= VL_NREDUCE) return vl_fail(VL_EINVAL, "reduce (cpu): unknown op %d", (int)a->op);
  int64_t nout = a->outer * a->inner;
  if (nout <= 0) return VL_OK;
  int64_t eo = (int64_t)vl_dtype_size(a->out_dtype);
  bool want_idx = a->indices && (a->op == VL_RED_MAX || a->op == VL_RED_MIN);
  int cb = a->op == VL_RED_PROD ? CB_PROD : a->op == VL_RED_MAX ? CB_MAX : a->op == VL_RED_MIN ? CB_MIN : CB_SUM;

  if (vl_dtype_is_int(a->in_dtype) && (a->op == VL_RED_SUM || a->op == VL_RED_PROD ||
                                       a->op == VL_RED_MAX || a->op == VL_RED_MIN)) {
    int64_t *acc = malloc((size_t)nout * sizeof *acc);
    if (!acc) return vl_fail(VL_EOOM, "%s (cpu): cannot allocate %lld accumulators", red_name(a->op), (long long)nout);
    red_job j = {.cb = cb, .in = a->in, .dt = a->in_dtype, .len = a->len, .inner = a->inner, .iacc = acc,
                 .idx = want_idx ? a->indices : NULL};
    reduce_par(&j, a->outer);
    vl_cpu_store_i64(a->out, eo, a->out_dtype, acc, nout);
    free(acc);
    return VL_OK;
  }

  double *acc = malloc((size_t)nout * sizeof *acc);
  double *mean = a->op == VL_RED_VAR ? malloc((size_t)nout * sizeof *mean) : NULL;
  if (!acc || (a->op == VL_RED_VAR && !mean)) {
    free(acc);
    free(mean);
    return vl_fail(VL_EOOM, "%s (cpu): cannot allocate %lld accumulators", red_name(a->op), (long long)nout);
  }
  red_plan pl = {TF_ID, cb, 0.0};
  double len = (double)a->len;
  if (a->op == VL_RED_NORM) {
    double p = a->param;
    if (p == INFINITY) pl = (red_plan){TF_ABS, CB_MAX, 0.0};
    else if (p == 1.0) pl.tf = TF_ABS;
    else if (p == 2.0) pl.tf = TF_SQ;
    else if (p == 0.0) pl.tf = TF_NZ; /* the count of nonzeros, as torch.norm(p=0) */
    else pl = (red_plan){TF_POW, CB_SUM, p};
  }
  if (a->op == VL_RED_VAR) {
    red_job jm = {.pl = &pl, .in = a->in, .dt = a->in_dtype, .len = a->len, .inner = a->inner, .acc = mean};
    reduce_par(&jm, a->outer);
    for (int64_t i = 0; i < nout; i++) mean[i] /= len;
    pl.tf = TF_DEV2;
  }
  bool long_rows = a->in_dtype == VL_F32 && a->inner == 1 && a->len > ROW_CHUNK && pl.tf == TF_ID &&
                   (pl.cb == CB_SUM || pl.cb == CB_MAX || pl.cb == CB_MIN);
  if (long_rows || (a->in_dtype == VL_F32 && a->inner > 1 && pl.tf == TF_ID && pl.cb == CB_SUM)) {
    vl_status st = long_rows ? reduce_long_rows_f32(a, pl.cb, acc, want_idx ? a->indices : NULL) : sum_lanes_f32(a, acc);
    if (st != VL_OK) {
      free(acc);
      free(mean);
      return st;
    }
  } else {
    red_job j = {.pl = &pl, .in = a->in, .dt = a->in_dtype, .len = a->len, .inner = a->inner, .mean = mean,
                 .acc = acc, .idx = want_idx ? a->indices : NULL};
    reduce_par(&j, a->outer);
  }
  if (a->op == VL_RED_MEAN) {
    for (int64_t i = 0; i < nout; i++) acc[i] /= len;
  } else if (a->op == VL_RED_VAR) {
    /* len <= correction divides by zero: NaN (or inf), as torch.var. */
    double dof = len - a->param;
    if (dof < 0) dof = 0;
    for (int64_t i = 0; i < nout; i++) acc[i] /= dof;
  } else if (a->op == VL_RED_NORM && pl.tf == TF_SQ) {
    for (int64_t i = 0; i < nout; i++) acc[i] = sqrt(acc[i]);
  } else if (a->op == VL_RED_NORM && pl.tf == TF_POW) {
    for (int64_t i = 0; i < nout; i++) acc[i] = pow(acc[i], 1.0 / pl.p);
  } else if (a->op == VL_RED_NORM && a->len == 0) {
    for (int64_t i = 0; i < nout; i++) acc[i] = 0.0; /* max-norm of nothing (init was -inf) */
  }
  vl_cpu_store_f64(a->out, eo, a->out_dtype, acc, nout);
  free(acc);
  free(mean);
  return VL_OK;
}

/* ---- softmax ---- */

/* Softmax of `w` lanes of length len with lane stride 1 and step stride `inner` (elements):
 * three passes (max, sum of exp, write), all in double. The max is NaN if any input is. */
static void softmax_block(const char *in, char *out, vl_dtype dt, int64_t len, int64_t inner,
                          int64_t w, bool log_out, double *mx, double *sum) {
  int64_t es = (int64_t)vl_dtype_size(dt);
  double buf[B], lsum[B];
  for (int64_t j = 0; j < w; j++) { mx[j] = -INFINITY; sum[j] = 0; }
  /* With inner == 1 (w == 1) each step takes a block of the row; otherwise one element per lane. */
  bool row = inner == 1;
  int64_t step = row ? B : 1;
  for (int pass = 0; pass < 3; pass++) {
    for (int64_t l0 = 0; l0 < len; l0 += step) {
      int64_t m = row ? (len - l0 < B ? len - l0 : B) : w;
      const char *src = in + l0 * inner * es;
      vl_cpu_load_f64(buf, src, es, dt, m);
      for (int64_t k = 0; k < m; k++) {
        int64_t j = row ? 0 : k;
        double x = buf[k];
        if (pass == 0) {
          if (x > mx[j] || x != x) mx[j] = mx[j] != mx[j] ? mx[j] : x;
        } else if (pass == 1) {
          sum[j] += exp(x - mx[j]);
        } else {
          buf[k] = log_out ? (x - mx[j]) - lsum[j] : exp(x - mx[j]) / sum[j];
        }
      }
      if (pass == 2) vl_cpu_store_f64(out + l0 * inner * es, es, dt, buf, m);
    }
    if (pass == 1 && log_out)
      for (int64_t j = 0; j < w; j++) lsum[j] = log(sum[j]);
  }
}

typedef struct {
  const vl_softmax_args *a;
  int64_t nblk; /* blocks of B lanes per outer index */
} softmax_job;

static void softmax_range(void *vj, int64_t lo, int64_t hi) {
  const softmax_job *j = vj;
  const vl_softmax_args *a = j->a;
  int64_t es = (int64_t)vl_dtype_size(a->dtype);
  double mx[B], sum[B];
  if (a->dtype == VL_F32 && a->inner == 1) {
    /* A contiguous f32 row: the vector code (cpu_vmath.h), one exp per element, the sum in
     * double. Softmax was a third of a CPU BERT step in double, with each exp computed twice. */
    for (int64_t o = lo; o < hi; o++)
      vl_vm_softmax_row_f32((const float *)a->in + o * a->len, (float *)a->out + o * a->len, a->len, a->log);
    return;
  }
  for (int64_t t = lo; t < hi; t++) {
    int64_t o = t / j->nblk, j0 = (t % j->nblk) * B;
    int64_t w = a->inner - j0 < B ? a->inner - j0 : B;
    int64_t off = (o * a->len * a->inner + j0) * es;
    softmax_block((const char *)a->in + off, (char *)a->out + off, a->dtype, a->len, a->inner, w,
                  a->log, mx, sum);
  }
}

/* Rows (blocks of lanes) are independent: they are split over the CPU threads. */
vl_status vl_cpu_softmax(const vl_softmax_args *a) {
  softmax_job j = {.a = a, .nblk = (a->inner + B - 1) / B};
  int64_t tasks = a->outer * j.nblk;
  int64_t per = a->len * (a->inner < B ? a->inner : B); /* elements of one task */
  vl_cpu_parallel_for(tasks, per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1), softmax_range, &j);
  return VL_OK;
}
