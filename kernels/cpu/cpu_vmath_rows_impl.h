/* kernels/cpu/cpu_vmath_rows_impl.h: part of cpu_vmath_impl.h (included by it, once per
 * instance, with its macros and helpers in scope; no include guard): contiguous f32 row
 * reductions (sum, first max / min with its position), column extrema, and layer norm rows. */

/* ---- row reductions and layer norm rows ---- */
/* Four double accumulators of VW lanes each (independent add chains: a single one was bound by
 * the add latency, 10x slower than PyTorch's sum over the last dim), the tail padded with
 * zeros, then joined in a fixed order: the result depends on n and the instance only. */
VM_INL double VM(sum_row_d)(const float *x, int64_t n) {
  VD a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
  int64_t i = 0;
  for (; i + 4 * VW <= n; i += 4 * VW) {
    a0 += VM(widen)(VM(ld)(x + i));
    a1 += VM(widen)(VM(ld)(x + i + VW));
    a2 += VM(widen)(VM(ld)(x + i + 2 * VW));
    a3 += VM(widen)(VM(ld)(x + i + 3 * VW));
  }
  for (; i + VW <= n; i += VW) a0 += VM(widen)(VM(ld)(x + i));
  if (i < n) a1 += VM(widen)(VM(ldn)(x + i, n - i, 0.0f));
  return VM(hsum)((a0 + a1) + (a2 + a3));
}

static VM_ATTR double VM(sum_row)(const float *x, int64_t n) { return VM(sum_row_d)(x, n); }

/* The first maximum (or minimum) of a row and its position; the first NaN wins over any number.
 * Each lane keeps its own first extremum (strictly better replaces; a NaN sticks) with its
 * position; the row's answer is then the smallest position among the lanes holding a NaN, or
 * else among those equal to the best value: the first one in row order, as the scalar scan.
 * Positions are int32 lanes: the caller keeps rows of 2^31 elements and more on its scalar
 * path. */
static VM_ATTR void VM(ext_row)(const float *x, int64_t n, bool max, double *val, int64_t *idx) {
  const float init = max ? -__builtin_inff() : __builtin_inff();
  VF acc = VM(splat)(init);
  VI pos = {0}, best = {0};
  for (int j = 0; j < VW; j++) pos[j] = j;
  int64_t i = 0;
  for (; i < n; i += VW) {
    VF v = i + VW <= n ? VM(ld)(x + i) : VM(ldn)(x + i, n - i, init); /* padding never wins */
    VI up = (acc == acc) & ((v != v) | (max ? v > acc : v < acc));
    acc = VM(sel)(up, v, acc);
    best = (up & pos) | (~up & best);
    pos += VW;
  }
  int nan = 0;
  for (int j = 0; j < VW; j++) nan |= acc[j] != acc[j];
  float b = init;
  if (!nan)
    for (int j = 0; j < VW; j++) b = max ? (acc[j] > b ? acc[j] : b) : (acc[j] < b ? acc[j] : b);
  int64_t bi = INT64_MAX;
  float bv = init;
  for (int j = 0; j < VW; j++) {
    bool hit = nan ? acc[j] != acc[j] : acc[j] == b;
    if (hit && best[j] < bi) bi = best[j], bv = acc[j];
  }
  *val = bv;
  *idx = bi == INT64_MAX ? 0 : bi;
}

/* Column extrema over a middle dim: val[j] / idx[j] for j < w take the first extremum (first
 * NaN) of x[l * ld + j] over l < len, float lanes across j, positions as int32 (len < 2^31).
 * Row by row (each row's w lanes against the running state, kept for up to VL_VM_EXT_W lanes
 * at a time), as the column sums: reading down a column defeats the prefetchers. */
#ifndef VL_VM_EXT_W
#define VL_VM_EXT_W 256
#endif
static VM_ATTR void VM(ext_lanes)(const float *x, int64_t ld, int64_t len, int64_t w, bool max, double *val,
                                  int64_t *idx) {
  const float init = max ? -__builtin_inff() : __builtin_inff();
  enum { NB = VL_VM_EXT_W / VW };
  VF acc[NB];
  VI best[NB];
  for (int64_t j00 = 0; j00 < w; j00 += VL_VM_EXT_W) {
    int64_t ww = w - j00 < VL_VM_EXT_W ? w - j00 : VL_VM_EXT_W, nb = (ww + VW - 1) / VW;
    for (int64_t b = 0; b < nb; b++) {
      acc[b] = VM(splat)(init);
      best[b] = (VI){0};
    }
    for (int64_t l = 0; l < len; l++) {
      const float *row = x + l * ld + j00;
      VI pos = (VI){0} + (int32_t)l;
      for (int64_t b = 0; b < nb; b++) {
        int64_t m = ww - b * VW < VW ? ww - b * VW : VW;
        VF v = m == VW ? VM(ld)(row + b * VW) : VM(ldn)(row + b * VW, m, init);
        VI up = (acc[b] == acc[b]) & ((v != v) | (max ? v > acc[b] : v < acc[b]));
        acc[b] = VM(sel)(up, v, acc[b]);
        best[b] = (up & pos) | (~up & best[b]);
      }
    }
    for (int64_t j = 0; j < ww; j++) {
      val[j00 + j] = acc[j / VW][j % VW];
      idx[j00 + j] = best[j / VW][j % VW];
    }
  }
}

/* One f32 layer norm row: the mean, then the sum of squared deviations from it (two passes over a
 * cache-resident row, both in double lanes), y = ((x - mean) rstd) w + b in double, rounded once:
 * the scalar path's formula. */
static VM_ATTR void VM(ln_row)(const float *x, float *y, int64_t n, const double *w, const double *b, double eps,
                               double *mean_out, double *rstd_out) {
  double mean = VM(sum_row_d)(x, n) / (double)n;
  VD md = VM(splatd)(mean), v0 = {0}, v1 = {0};
  int64_t i = 0;
  for (; i + 2 * VW <= n; i += 2 * VW) {
    VD d0 = VM(widen)(VM(ld)(x + i)) - md, d1 = VM(widen)(VM(ld)(x + i + VW)) - md;
    v0 += d0 * d0;
    v1 += d1 * d1;
  }
  for (; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VF xf = m == VW ? VM(ld)(x + i) : VM(ldn)(x + i, m, (float)mean);
    VD d = VM(widen)(xf) - md;
    if (m < VW) /* the padding's deviation is mean - (float)mean: drop it */
      for (int64_t j = m; j < VW; j++) d[j] = 0.0;
    v0 += d * d;
  }
  double rstd = 1.0 / sqrt(VM(hsum)(v0 + v1) / (double)n + eps);
  VD rd = VM(splatd)(rstd);
  for (i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VD wd, bd;
    if (m == VW) {
      memcpy(&wd, w + i, sizeof wd);
      memcpy(&bd, b + i, sizeof bd);
      VM(st)(y + i, VM(narrow)(((VM(widen)(VM(ld)(x + i)) - md) * rd) * wd + bd));
    } else {
      wd = bd = VM(splatd)(0.0);
      memcpy(&wd, w + i, (size_t)m * sizeof(double));
      memcpy(&bd, b + i, (size_t)m * sizeof(double));
      VF r = VM(narrow)(((VM(widen)(VM(ldn)(x + i, m, 0.0f)) - md) * rd) * wd + bd);
      VM(stn)(y + i, r, m);
    }
  }
  *mean_out = mean;
  *rstd_out = rstd;
}

/* One f32 layer norm backward row, in double lanes: xh = (x - mean) rstd, gw = dy w;
 * dw += dy xh, db += dy; dx = rstd (gw - mean(gw) - xh mean(gw xh)). xh and gw are recomputed
 * in the second pass rather than stored (the same values: the same operations). */
static VM_ATTR void VM(ln_bw_row)(const float *x, const float *g, float *dx, int64_t n, double mean, double rstd,
                                  const double *w, double *dw, double *db) {
  VD md = VM(splatd)(mean), rd = VM(splatd)(rstd), s1 = {0}, s2 = {0};
  for (int64_t i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VD wd = VM(splatd)(0.0), dwd = wd, dbd = wd;
    memcpy(&wd, w + i, (size_t)m * sizeof(double));
    memcpy(&dwd, dw + i, (size_t)m * sizeof(double));
    memcpy(&dbd, db + i, (size_t)m * sizeof(double));
    VD xh = (VM(widen)(m == VW ? VM(ld)(x + i) : VM(ldn)(x + i, m, 0.0f)) - md) * rd;
    VD gd = VM(widen)(m == VW ? VM(ld)(g + i) : VM(ldn)(g + i, m, 0.0f)); /* 0 in the padding */
    dwd += gd * xh;
    dbd += gd;
    memcpy(dw + i, &dwd, (size_t)m * sizeof(double));
    memcpy(db + i, &dbd, (size_t)m * sizeof(double));
    VD gw = gd * wd;
    s1 += gw;
    s2 += gw * xh;
  }
  double m1 = VM(hsum)(s1) / (double)n, m2 = VM(hsum)(s2) / (double)n;
  VD m1d = VM(splatd)(m1), m2d = VM(splatd)(m2);
  for (int64_t i = 0; i < n; i += VW) {
    int64_t m = n - i < VW ? n - i : VW;
    VD wd = VM(splatd)(0.0);
    memcpy(&wd, w + i, (size_t)m * sizeof(double));
    VD xh = (VM(widen)(m == VW ? VM(ld)(x + i) : VM(ldn)(x + i, m, 0.0f)) - md) * rd;
    VD gw = VM(widen)(m == VW ? VM(ld)(g + i) : VM(ldn)(g + i, m, 0.0f)) * wd;
    VF r = VM(narrow)(rd * ((gw - m1d) - xh * m2d));
    if (m == VW) VM(st)(dx + i, r);
    else VM(stn)(dx + i, r, m);
  }
}
