/* kernels/cpu/cpu_norm.c: batch norm, layer norm and softmax backward on the CPU (the reference).
 *
 * Everything is computed in double: values are loaded in blocks (cpu_internal.h), statistics are
 * two-pass (mean, then the sum of squared deviations), and results are rounded once to the
 * output dtype. Parameters (weight, bias, running stats, saved statistics) are of the "param"
 * dtype (f32 or f64) and are read into double arrays first. */
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_vmath.h"
#include "runtime/backend/nn_kernels.h"

#define B VL_CPU_BLOCK

static double *alloc_doubles(int64_t n) { return malloc(sizeof(double) * (size_t)(n > 0 ? n : 1)); }

/* n param-dtype values at p (NULL: `def` everywhere) into dst. */
static void load_params(double *dst, const void *p, vl_dtype dt, int64_t n, double def) {
  if (!p) {
    for (int64_t i = 0; i < n; i++) dst[i] = def;
    return;
  }
  vl_cpu_load_f64(dst, (const char *)p, (int64_t)vl_dtype_size(dt), dt, n);
}

static void store_params(void *p, vl_dtype dt, const double *src, int64_t n) {
  if (p) vl_cpu_store_f64((char *)p, (int64_t)vl_dtype_size(dt), dt, src, n);
}

/* ======================= batch norm =======================
 * The data is viewed as [outer, c, inner]: NCHW is [n, c, hw], NHWC is [n*hw, c, 1]. Each
 * outer index owns a contiguous slab of c*inner elements that is walked in blocks, with the
 * channel of each element tracked incrementally (no division per element).
 *
 * Fused forms (runtime/backend/nn_kernels.h): the forward adds the residual and applies the ReLU before
 * the one rounding to the dtype. The backward masks dy first: from y when given (the masked dy is
 * written to dr by the sums pass and read back by the dx pass), else recomputed from x as the
 * forward's value rounded to the dtype > 0. The training forward normalises with the statistics
 * as stored (rounded to the param dtype), so that the recomputed mask is the forward's y > 0
 * exactly. */
typedef enum { BN_SUM, BN_SQDEV, BN_NORM, BN_BW_SUMS, BN_BW_DX } bn_pass_kind;
typedef enum { BN_MASK_NONE, BN_MASK_X, BN_MASK_Y } bn_mask;

typedef struct {
  const vl_batchnorm_args *a;
  int64_t outer, inner;
  const double *mean, *scale, *shift; /* per channel */
  double *acc0, *acc1;                /* per channel accumulators */
  bn_mask mask;
  const double *fscale, *fshift;      /* BN_MASK_X: the forward's scale and shift */
} bn_ctx;

/* The forward's values of block [off, off + m) of a slab, rounded to the dtype (the output's
 * values before the ReLU): tb is scratch of m elements. */
static void bn_fwd_values(const bn_ctx *c, const double *x, int64_t off, int64_t m, double *v, char *tb) {
  const vl_batchnorm_args *a = c->a;
  int64_t ci = off / c->inner, r = off % c->inner, es = (int64_t)vl_dtype_size(a->dtype);
  for (int64_t k = 0; k < m; k++) {
    v[k] = (x[k] - c->mean[ci]) * c->fscale[ci] + c->fshift[ci];
    if (++r == c->inner) {
      r = 0;
      ci++;
    }
  }
  if (a->dtype == VL_F64) return;
  vl_cpu_store_f64(tb, es, a->dtype, v, m);
  vl_cpu_load_f64(v, tb, es, a->dtype, m);
}

static void bn_pass(const bn_ctx *c, bn_pass_kind kind) {
  const vl_batchnorm_args *a = c->a;
  int64_t es = (int64_t)vl_dtype_size(a->dtype), slab = a->c * c->inner;
  double xb[B], gb[B], ob[B], rb[B], mb[B];
  char tb[B * sizeof(double)];
  const bool bw = kind == BN_BW_SUMS || kind == BN_BW_DX, relu = a->act == VL_BN_ACT_RELU;
  for (int64_t o = 0; o < c->outer; o++) {
    for (int64_t off = 0; off < slab; off += B) {
      int64_t m = slab - off < B ? slab - off : B, base = (o * slab + off) * es;
      const double *x = vl_cpu_src_f64(xb, (const char *)a->x + base, es, a->dtype, m);
      const double *g = NULL, *rv = NULL;
      if (bw && c->mask == BN_MASK_Y && kind == BN_BW_DX) {
        g = vl_cpu_src_f64(gb, (const char *)a->dr + base, es, a->dtype, m); /* masked by the sums pass */
      } else if (bw) {
        g = vl_cpu_src_f64(gb, (const char *)a->dy + base, es, a->dtype, m);
        if (c->mask != BN_MASK_NONE) {
          if (c->mask == BN_MASK_Y) vl_cpu_load_f64(mb, (const char *)a->y + base, es, a->dtype, m);
          else bn_fwd_values(c, x, off, m, mb, tb);
          for (int64_t k = 0; k < m; k++) mb[k] = mb[k] > 0 ? g[k] : 0.0;
          if (c->mask == BN_MASK_Y) vl_cpu_store_f64((char *)a->dr + base, es, a->dtype, mb, m);
          g = mb;
        }
      }
      if (kind == BN_NORM && a->r) rv = vl_cpu_src_f64(rb, (const char *)a->r + base, es, a->dtype, m);
      int64_t ci = off / c->inner, r = off % c->inner;
      for (int64_t k = 0; k < m; k++) {
        double d = x[k] - c->mean[ci];
        switch (kind) {
          case BN_SUM: c->acc0[ci] += x[k]; break;
          case BN_SQDEV: c->acc0[ci] += d * d; break;
          case BN_NORM: {
            double v = d * c->scale[ci] + c->shift[ci];
            if (rv) v += rv[k];
            ob[k] = relu && !(v > 0 || v != v) ? 0.0 : v; /* the relu op's NaN rule */
            break;
          }
          case BN_BW_SUMS:
            c->acc0[ci] += g[k];
            c->acc1[ci] += g[k] * d;
            break;
          case BN_BW_DX:
            /* scale = w * invstd, shift = invstd^2 * sum(dy * (x - mean)) / m, acc0 = mean(dy):
             * dx = w * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)). */
            ob[k] = c->scale[ci] * (g[k] - c->acc0[ci] - d * c->shift[ci]);
            break;
        }
        if (++r == c->inner) {
          r = 0;
          ci++;
        }
      }
      if (kind == BN_NORM) vl_cpu_store_f64((char *)a->y + base, es, a->dtype, ob, m);
      if (kind == BN_BW_DX) vl_cpu_store_f64((char *)a->dx + base, es, a->dtype, ob, m);
    }
  }
}

static void bn_shape(const vl_batchnorm_args *a, int64_t *outer, int64_t *inner) {
  *outer = a->nhwc ? a->n * a->hw : a->n;
  *inner = a->nhwc ? 1 : a->hw;
}

/* Values rounded to the param dtype, as they are stored. */
static void round_params(double *v, vl_dtype pdt, int64_t n) {
  if (pdt != VL_F32) return;
  for (int64_t i = 0; i < n; i++) v[i] = (double)(float)v[i];
}

static vl_status cpu_bn_forward(const vl_batchnorm_args *a) {
  int64_t C = a->c, m = a->n * a->hw;
  double *mean = alloc_doubles(C), *var = alloc_doubles(C), *w = alloc_doubles(C), *b = alloc_doubles(C);
  double *scale = alloc_doubles(C), *shift = alloc_doubles(C), *tmp = alloc_doubles(C);
  vl_status s = VL_OK;
  if (!mean || !var || !w || !b || !scale || !shift || !tmp) {
    s = vl_fail(VL_EOOM, "batch_norm (cpu): out of host memory for %lld channels", (long long)C);
    goto done;
  }
  bn_ctx c = {.a = a, .mean = mean};
  bn_shape(a, &c.outer, &c.inner);
  if (a->training) {
    for (int64_t i = 0; i < C; i++) mean[i] = var[i] = 0;
    c.acc0 = mean;
    bn_pass(&c, BN_SUM); /* c.mean aliases the accumulator; BN_SUM does not read it */
    for (int64_t i = 0; i < C; i++) mean[i] /= (double)m;
    c.acc0 = var;
    bn_pass(&c, BN_SQDEV);
    for (int64_t i = 0; i < C; i++) var[i] /= (double)m; /* biased: used to normalise */
    for (int64_t i = 0; i < C; i++) tmp[i] = 1.0 / sqrt(var[i] + a->eps);
    store_params(a->save_mean, a->param_dtype, mean, C);
    store_params(a->save_invstd, a->param_dtype, tmp, C);
    if (a->running_mean && a->running_var) {
      /* Unbiased variance for the running estimate, as PyTorch (the front end ensures m > 1). */
      double *rm = scale, *rv = shift;
      load_params(rm, a->running_mean, a->param_dtype, C, 0);
      load_params(rv, a->running_var, a->param_dtype, C, 0);
      for (int64_t i = 0; i < C; i++) {
        rm[i] = (1 - a->momentum) * rm[i] + a->momentum * mean[i];
        rv[i] = (1 - a->momentum) * rv[i] + a->momentum * var[i] * (double)m / (double)(m - 1);
      }
      store_params(a->running_mean, a->param_dtype, rm, C);
      store_params(a->running_var, a->param_dtype, rv, C);
    }
    round_params(mean, a->param_dtype, C);
    round_params(tmp, a->param_dtype, C);
  } else {
    load_params(mean, a->running_mean, a->param_dtype, C, 0);
    load_params(var, a->running_var, a->param_dtype, C, 1);
    for (int64_t i = 0; i < C; i++) tmp[i] = 1.0 / sqrt(var[i] + a->eps);
  }
  load_params(w, a->weight, a->param_dtype, C, 1);
  load_params(b, a->bias, a->param_dtype, C, 0);
  for (int64_t i = 0; i < C; i++) {
    scale[i] = w[i] * tmp[i];
    shift[i] = b[i];
  }
  c.scale = scale;
  c.shift = shift;
  bn_pass(&c, BN_NORM);
done:
  free(mean), free(var), free(w), free(b), free(scale), free(shift), free(tmp);
  return s;
}

static vl_status cpu_bn_backward(const vl_batchnorm_args *a) {
  int64_t C = a->c, m = a->n * a->hw;
  double *mean = alloc_doubles(C), *invstd = alloc_doubles(C), *w = alloc_doubles(C);
  double *sdy = alloc_doubles(C), *sdyx = alloc_doubles(C), *scale = alloc_doubles(C), *shift = alloc_doubles(C);
  double *fscale = alloc_doubles(C), *fshift = alloc_doubles(C);
  vl_status s = VL_OK;
  if (!mean || !invstd || !w || !sdy || !sdyx || !scale || !shift || !fscale || !fshift) {
    s = vl_fail(VL_EOOM, "batch_norm_backward (cpu): out of host memory for %lld channels", (long long)C);
    goto done;
  }
  load_params(mean, a->save_mean, a->param_dtype, C, 0);
  load_params(invstd, a->save_invstd, a->param_dtype, C, 1);
  load_params(w, a->weight, a->param_dtype, C, 1);
  load_params(fshift, a->bias, a->param_dtype, C, 0);
  for (int64_t i = 0; i < C; i++) fscale[i] = w[i] * invstd[i]; /* as the forward's scale */
  for (int64_t i = 0; i < C; i++) sdy[i] = sdyx[i] = 0;
  bn_ctx c = {.a = a, .mean = mean, .acc0 = sdy, .acc1 = sdyx, .fscale = fscale, .fshift = fshift};
  c.mask = a->act != VL_BN_ACT_RELU ? BN_MASK_NONE : a->y ? BN_MASK_Y : BN_MASK_X;
  bn_shape(a, &c.outer, &c.inner);
  bn_pass(&c, BN_BW_SUMS);
  /* dweight = sum(dy * xhat) = invstd * sum(dy * (x - mean)), dbias = sum(dy). */
  for (int64_t i = 0; i < C; i++) scale[i] = sdyx[i] * invstd[i];
  store_params(a->dweight, a->param_dtype, scale, C);
  store_params(a->dbias, a->param_dtype, sdy, C);
  for (int64_t i = 0; i < C; i++) {
    scale[i] = w[i] * invstd[i];
    shift[i] = invstd[i] * invstd[i] * sdyx[i] / (double)m;
    sdy[i] /= (double)m;
  }
  c.scale = scale;
  c.shift = shift;
  bn_pass(&c, BN_BW_DX);
done:
  free(mean), free(invstd), free(w), free(sdy), free(sdyx), free(scale), free(shift), free(fscale), free(fshift);
  return s;
}

/* ======================= layer norm ======================= */

/* Rows are independent: they are split over the CPU threads. The backward's weight and bias
 * gradients are sums over rows: each chunk of rows (a fixed number of them, not one per thread)
 * sums its own, and the chunks' sums are added in chunk order, so the result does not depend
 * on the thread count or on which thread ran which chunk. */
#define LN_MAX_CHUNKS 64

typedef struct {
  const vl_layernorm_args *a;
  const double *w, *b;
  double *dw, *db;     /* backward: LN_MAX_CHUNKS x cols partial sums */
  int64_t per;         /* rows per chunk */
  _Atomic int oom;
} ln_job;

static void ln_fw_range(void *vj, int64_t lo, int64_t hi) {
  ln_job *j = vj;
  const vl_layernorm_args *a = j->a;
  int64_t N = a->cols, es = (int64_t)vl_dtype_size(a->dtype), ps = (int64_t)vl_dtype_size(a->param_dtype);
  double *x = alloc_doubles(N);
  if (!x) {
    j->oom = 1;
    return;
  }
  for (int64_t r = lo; r < hi; r++) {
    if (a->dtype == VL_F32 && N > 0) {
      /* f32 rows: the vector code (cpu_vmath.h), the same double formula in vector lanes */
      double mean, rstd;
      vl_vm_layernorm_row_f32((const float *)a->x + r * N, (float *)a->y + r * N, N, j->w, j->b, a->eps, &mean,
                              &rstd);
      if (a->mean) vl_cpu_st_f64((char *)a->mean + r * ps, a->param_dtype, mean);
      if (a->rstd) vl_cpu_st_f64((char *)a->rstd + r * ps, a->param_dtype, rstd);
      continue;
    }
    vl_cpu_load_f64(x, (const char *)a->x + r * N * es, es, a->dtype, N);
    double mean = 0, var = 0;
    for (int64_t k = 0; k < N; k++) mean += x[k];
    mean /= (double)N;
    for (int64_t k = 0; k < N; k++) var += (x[k] - mean) * (x[k] - mean);
    double rstd = 1.0 / sqrt(var / (double)N + a->eps);
    for (int64_t k = 0; k < N; k++) x[k] = (x[k] - mean) * rstd * j->w[k] + j->b[k];
    vl_cpu_store_f64((char *)a->y + r * N * es, es, a->dtype, x, N);
    if (a->mean) vl_cpu_st_f64((char *)a->mean + r * ps, a->param_dtype, mean);
    if (a->rstd) vl_cpu_st_f64((char *)a->rstd + r * ps, a->param_dtype, rstd);
  }
  free(x);
}

static vl_status cpu_ln_forward(const vl_layernorm_args *a) {
  int64_t N = a->cols;
  double *w = alloc_doubles(N), *b = alloc_doubles(N);
  vl_status s = VL_OK;
  if (!w || !b) {
    s = vl_fail(VL_EOOM, "layer_norm (cpu): out of host memory for rows of %lld", (long long)N);
    goto done;
  }
  load_params(w, a->weight, a->param_dtype, N, 1);
  load_params(b, a->bias, a->param_dtype, N, 0);
  ln_job j = {.a = a, .w = w, .b = b};
  vl_cpu_parallel_for(a->rows, N >= 8192 ? 1 : 8192 / (N > 0 ? N : 1), ln_fw_range, &j);
  if (j.oom) s = vl_fail(VL_EOOM, "layer_norm (cpu): out of host memory for rows of %lld", (long long)N);
done:
  free(w), free(b);
  return s;
}

static void ln_bw_range(void *vj, int64_t lo, int64_t hi) {
  ln_job *j = vj;
  const vl_layernorm_args *a = j->a;
  int64_t N = a->cols, es = (int64_t)vl_dtype_size(a->dtype), ps = (int64_t)vl_dtype_size(a->param_dtype);
  double *x = alloc_doubles(N), *g = alloc_doubles(N);
  if (!x || !g) {
    j->oom = 1;
    free(x), free(g);
    return;
  }
  for (int64_t c = lo; c < hi; c++) {
    double *dw = j->dw + c * N, *db = j->db + c * N;
    for (int64_t k = 0; k < N; k++) dw[k] = db[k] = 0;
    int64_t r1 = (c + 1) * j->per < a->rows ? (c + 1) * j->per : a->rows;
    for (int64_t r = c * j->per; r < r1; r++) {
      if (a->dtype == VL_F32) {
        double mean = vl_cpu_ld_f64((const char *)a->mean + r * ps, a->param_dtype);
        double rstd = vl_cpu_ld_f64((const char *)a->rstd + r * ps, a->param_dtype);
        vl_vm_layernorm_bw_row_f32((const float *)a->x + r * N, (const float *)a->dy + r * N, (float *)a->dx + r * N,
                                   N, mean, rstd, j->w, dw, db);
        continue;
      }
      vl_cpu_load_f64(x, (const char *)a->x + r * N * es, es, a->dtype, N);
      vl_cpu_load_f64(g, (const char *)a->dy + r * N * es, es, a->dtype, N);
      double mean = vl_cpu_ld_f64((const char *)a->mean + r * ps, a->param_dtype);
      double rstd = vl_cpu_ld_f64((const char *)a->rstd + r * ps, a->param_dtype);
      double s1 = 0, s2 = 0;
      for (int64_t k = 0; k < N; k++) {
        double xh = (x[k] - mean) * rstd;
        dw[k] += g[k] * xh;
        db[k] += g[k];
        x[k] = xh;
        g[k] *= j->w[k];
        s1 += g[k];
        s2 += g[k] * xh;
      }
      s1 /= (double)N;
      s2 /= (double)N;
      /* dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w. */
      for (int64_t k = 0; k < N; k++) g[k] = rstd * (g[k] - s1 - x[k] * s2);
      vl_cpu_store_f64((char *)a->dx + r * N * es, es, a->dtype, g, N);
    }
  }
  free(x), free(g);
}

static vl_status cpu_ln_backward(const vl_layernorm_args *a) {
  int64_t N = a->cols;
  int64_t nchunks = a->rows < LN_MAX_CHUNKS ? a->rows : LN_MAX_CHUNKS;
  if (nchunks < 1) nchunks = 1;
  double *w = alloc_doubles(N), *dw = alloc_doubles(N * nchunks), *db = alloc_doubles(N * nchunks);
  vl_status s = VL_OK;
  if (!w || !dw || !db) {
    s = vl_fail(VL_EOOM, "layer_norm_backward (cpu): out of host memory for rows of %lld", (long long)N);
    goto done;
  }
  load_params(w, a->weight, a->param_dtype, N, 1);
  ln_job j = {.a = a, .w = w, .dw = dw, .db = db, .per = (a->rows + nchunks - 1) / nchunks};
  nchunks = j.per > 0 ? (a->rows + j.per - 1) / j.per : 1;
  if (a->rows == 0) {
    for (int64_t k = 0; k < N; k++) dw[k] = db[k] = 0;
  } else {
    vl_cpu_parallel_for(nchunks, 1, ln_bw_range, &j);
  }
  if (j.oom) {
    s = vl_fail(VL_EOOM, "layer_norm_backward (cpu): out of host memory for rows of %lld", (long long)N);
    goto done;
  }
  for (int64_t c = 1; c < nchunks; c++)
    for (int64_t k = 0; k < N; k++) dw[k] += dw[c * N + k], db[k] += db[c * N + k];
  store_params(a->dweight, a->param_dtype, dw, N);
  store_params(a->dbias, a->param_dtype, db, N);
done:
  free(w), free(dw), free(db);
  return s;
}

/* ======================= softmax backward =======================
 * Lanes of one outer index: with inner == 1 one lane (the row) walked in blocks; otherwise up to
 * B lanes side by side, one contiguous block per step along len. */
/* A contiguous f32 row: the vector math's (kernels/cpu/cpu_vmath.h: the dot product summed in
 * fixed lanes, exp vectorised for log-softmax). */
static void softmax_bw_row_f32(const float *y, const float *g, float *dx, int64_t len, bool log_out) {
  vl_vm_softmax_bw_row_f32(y, g, dx, len, log_out);
}

static void softmax_bw_range(void *vj, int64_t lo, int64_t hi) {
  const vl_softmax_bw_args *a = vj;
  int64_t es = (int64_t)vl_dtype_size(a->dtype), len = a->len, inner = a->inner;
  double yb[B], gb[B], ob[B], sum[B];
  bool row = inner == 1;
  if (a->dtype == VL_F32 && row) {
    for (int64_t o = lo; o < hi; o++)
      softmax_bw_row_f32((const float *)a->y + o * len, (const float *)a->dy + o * len, (float *)a->dx + o * len, len,
                         a->log);
    return;
  }
  int64_t nblk = (inner + B - 1) / B;
  for (int64_t t = lo; t < hi; t++) {
    int64_t o = t / nblk, j0 = (t % nblk) * B;
    int64_t w = row ? 1 : (inner - j0 < B ? inner - j0 : B);
    int64_t step = row ? B : 1;
    for (int64_t j = 0; j < w; j++) sum[j] = 0;
    for (int pass = 0; pass < 2; pass++) {
      for (int64_t l0 = 0; l0 < len; l0 += step) {
        int64_t m = row ? (len - l0 < B ? len - l0 : B) : w;
        int64_t off = ((o * len + l0) * inner + j0) * es;
        const double *y = vl_cpu_src_f64(yb, (const char *)a->y + off, es, a->dtype, m);
        const double *g = vl_cpu_src_f64(gb, (const char *)a->dy + off, es, a->dtype, m);
        for (int64_t k = 0; k < m; k++) {
          int64_t j = row ? 0 : k;
          if (pass == 0) sum[j] += a->log ? g[k] : g[k] * y[k];
          else ob[k] = a->log ? g[k] - exp(y[k]) * sum[j] : y[k] * (g[k] - sum[j]);
        }
        if (pass == 1) vl_cpu_store_f64((char *)a->dx + off, es, a->dtype, ob, m);
      }
    }
  }
}

/* Blocks of lanes are independent: split over the CPU threads, as the forward's. */
static vl_status cpu_softmax_backward(const vl_softmax_bw_args *a) {
  int64_t tasks = a->outer * ((a->inner + B - 1) / B);
  int64_t per = a->len * (a->inner < B ? a->inner : B);
  vl_cpu_parallel_for(tasks, per >= 16384 ? 1 : 16384 / (per > 0 ? per : 1), softmax_bw_range, (void *)a);
  return VL_OK;
}

const vl_norm_kernels vl_cpu_norm_kernels = {
    .batchnorm_forward = cpu_bn_forward,
    .batchnorm_backward = cpu_bn_backward,
    .layernorm_forward = cpu_ln_forward,
    .layernorm_backward = cpu_ln_backward,
    .softmax_backward = cpu_softmax_backward,
};
