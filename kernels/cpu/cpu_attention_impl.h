/* kernels/cpu/cpu_attention_impl.h: the body of kernels/cpu/cpu_attention.c for one compute type,
 * included there twice (REAL float with SFX _f, REAL double with SFX _d). Not a public header. */
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define FN(name) CAT(name, SFX)

static void FN(load_row)(REAL *dst, const char *src, vl_dtype dt, int64_t n) {
  if (dt == VL_F32) {
    for (int64_t i = 0; i < n; i++) dst[i] = (REAL)((const float *)src)[i];
  } else {
    for (int64_t i = 0; i < n; i++) dst[i] = (REAL)vl_cpu_ld_f64(src + i * (int64_t)vl_dtype_size(dt), dt);
  }
}

static void FN(store_row)(char *dst, vl_dtype dt, const REAL *src, int64_t n) {
  int64_t es = (int64_t)vl_dtype_size(dt);
  for (int64_t i = 0; i < n; i++) vl_cpu_st_f64(dst + i * es, dt, (double)src[i]);
}

/* The scaled, masked scores of query i against every key into z[0..S): z = scale q.k + mask,
 * -inf where causal drops the key. kt is K transposed (E x S), q the query row. Returns the max. */
static REAL FN(scores)(const vl_attention_args *a, int64_t bh, int64_t i, const REAL *restrict q,
                       const REAL *restrict kt, REAL *restrict z) {
  const int64_t S = a->s, E = a->e;
  for (int64_t j = 0; j < S; j++) z[j] = 0;
  for (int64_t e = 0; e < E; e++) {
    const REAL qe = q[e], *kr = kt + e * S;
    for (int64_t j = 0; j < S; j++) z[j] += qe * kr[j];
  }
  REAL m = -INFINITY;
  for (int64_t j = 0; j < S; j++) {
    REAL v = a->causal && j > i ? (REAL)-INFINITY : z[j] * (REAL)a->scale + (REAL)mask_at(a, bh, i, j);
    z[j] = v;
    if (v > m) m = v;
  }
  return m;
}

static void FN(transpose)(const REAL *src, int64_t rows, int64_t cols, REAL *dst) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

/* Head bh's K and V as dense S x E rows, and K transposed (E x S) into kt. Q, O and dO rows are
 * read one at a time by the callers. */
static void FN(load_kv)(const vl_attention_args *a, int64_t bh, REAL *k, REAL *v, REAL *kt) {
  const int64_t S = a->s, E = a->e, es = (int64_t)vl_dtype_size(a->dtype);
  for (int64_t j = 0; j < S; j++) {
    FN(load_row)(k + j * E, row_of(a->k, a->k_st, a->h, bh, j, es), a->dtype, E);
    FN(load_row)(v + j * E, row_of(a->v, a->v_st, a->h, bh, j, es), a->dtype, E);
  }
  FN(transpose)(k, S, E, kt);
}

VL_ATTN_CLONES static void FN(attn_fw_range)(void *vj, int64_t lo, int64_t hi) {
  attn_job *job = vj;
  const vl_attention_args *a = job->a;
  const int64_t L = a->l, S = a->s, E = a->e, H = a->h, es = (int64_t)vl_dtype_size(a->dtype);
  const int64_t S8 = (S + 7) / 8;
  REAL *mem = malloc(sizeof(REAL) * (size_t)(3 * S * E + S + 2 * E));
  if (!mem) {
    job->failed = 1;
    return;
  }
  REAL *restrict k = mem, *restrict v = k + S * E, *restrict kt = v + S * E, *restrict z = kt + S * E,
                *restrict q = z + S, *restrict o = q + E;
  const REAL inv_keep = a->p > 0 ? (REAL)(1.0 / (1.0 - a->p)) : (REAL)1;
  keep_cache kc = {.seed = a->seed, .offset = a->offset};
  for (int64_t bh = lo; bh < hi; bh++) {
    FN(load_kv)(a, bh, k, v, kt);
    for (int64_t i = 0; i < L; i++) {
      FN(load_row)(q, row_of(a->q, a->q_st, H, bh, i, es), a->dtype, E);
      REAL m = FN(scores)(a, bh, i, q, kt, z);
      REAL l = 0;
      if (m != (REAL)-INFINITY) {
        for (int64_t j = 0; j < S; j++) {
          z[j] = (REAL)exp((double)(z[j] - m));
          l += z[j];
        }
      }
      const int64_t row = bh * L + i;
      ((REAL *)a->lse)[row] = l > 0 ? (REAL)((double)m + log((double)l)) : (REAL)INFINITY;
      const REAL norm = l > 0 ? (REAL)1 / l : (REAL)0;
      for (int64_t e = 0; e < E; e++) o[e] = 0;
      uint8_t *bits = a->keep ? a->keep + row * S8 : NULL;
      if (bits)
        for (int64_t b = 0; b < S8; b++) bits[b] = 0;
      for (int64_t j = 0; j < S; j++) {
        REAL pj = l > 0 ? z[j] * norm : (REAL)0;
        if (bits) {
          bool keep = keep_of(&kc, (uint64_t)(row * S + j), a->keep_below);
          if (keep) bits[j / 8] |= (uint8_t)(1u << (j % 8));
          pj = keep ? pj * inv_keep : (REAL)0;
        }
        if (pj != 0) {
          const REAL *vr = v + j * E;
          for (int64_t e = 0; e < E; e++) o[e] += pj * vr[e];
        }
      }
      FN(store_row)((char *)row_of(a->o, a->o_st, H, bh, i, es), a->dtype, o, E);
    }
  }
  free(mem);
}

VL_ATTN_CLONES static void FN(attn_bw_range)(void *vj, int64_t lo, int64_t hi) {
  attn_job *job = vj;
  const vl_attention_args *a = job->a;
  const int64_t L = a->l, S = a->s, E = a->e, H = a->h, es = (int64_t)vl_dtype_size(a->dtype);
  const int64_t S8 = (S + 7) / 8;
  REAL *mem = malloc(sizeof(REAL) * (size_t)(6 * S * E + 2 * S + 4 * E));
  if (!mem) {
    job->failed = 1;
    return;
  }
  REAL *restrict k = mem, *restrict v = k + S * E, *restrict kt = v + S * E, *restrict vt = kt + S * E,
                *restrict dk = vt + S * E, *restrict dv = dk + S * E;
  REAL *restrict z = dv + S * E, *restrict dp = z + S, *restrict q = dp + S,
                *restrict go = q + E, *restrict ob = go + E, *restrict dq = ob + E;
  const REAL inv_keep = a->p > 0 ? (REAL)(1.0 / (1.0 - a->p)) : (REAL)1;
  const REAL scale = (REAL)a->scale;
  for (int64_t bh = lo; bh < hi; bh++) {
    FN(load_kv)(a, bh, k, v, kt);
    FN(transpose)(v, S, E, vt);
    for (int64_t x = 0; x < S * E; x++) dk[x] = dv[x] = 0;
    for (int64_t i = 0; i < L; i++) {
      const int64_t row = bh * L + i;
      FN(load_row)(q, row_of(a->q, a->q_st, H, bh, i, es), a->dtype, E);
      FN(load_row)(go, row_of(a->dout, a->do_st, H, bh, i, es), a->dtype, E);
      FN(load_row)(ob, row_of(a->o, a->o_st, H, bh, i, es), a->dtype, E);
      REAL delta = 0; /* dO . O: the row's sum of P * dP, from the stored (rounded) output */
      for (int64_t e = 0; e < E; e++) delta += go[e] * ob[e];
      (void)FN(scores)(a, bh, i, q, kt, z);
      const REAL lse = ((const REAL *)a->lse)[row];
      /* dP (w.r.t. the dropped-out probabilities) = dO . V_j for every key */
      for (int64_t j = 0; j < S; j++) dp[j] = 0;
      for (int64_t e = 0; e < E; e++) {
        const REAL ge = go[e], *vr = vt + e * S;
        for (int64_t j = 0; j < S; j++) dp[j] += ge * vr[j];
      }
      const uint8_t *bits = a->keep ? a->keep + row * S8 : NULL;
      for (int64_t e = 0; e < E; e++) dq[e] = 0;
      for (int64_t j = 0; j < S; j++) {
        REAL pj = lse == (REAL)INFINITY ? (REAL)0 : (REAL)exp((double)(z[j] - lse));
        bool keep = !bits || (bits[j / 8] >> (j % 8)) & 1u;
        REAL pd = keep ? pj * inv_keep : (REAL)0;
        /* dV_j += P~_ij dO_i; dS_ij = P_ij (dP_ij - delta_i) with dP through the dropout */
        REAL dsj = pj * ((keep ? dp[j] * inv_keep : (REAL)0) - delta) * scale;
        REAL *dvr = dv + j * E, *dkr = dk + j * E;
        const REAL *kr = k + j * E;
        if (pd != 0)
          for (int64_t e = 0; e < E; e++) dvr[e] += pd * go[e];
        if (dsj != 0) {
          for (int64_t e = 0; e < E; e++) dkr[e] += dsj * q[e];
          for (int64_t e = 0; e < E; e++) dq[e] += dsj * kr[e];
        }
      }
      FN(store_row)((char *)row_of(a->dq, a->dq_st, H, bh, i, es), a->dtype, dq, E);
    }
    for (int64_t j = 0; j < S; j++) {
      FN(store_row)((char *)row_of(a->dk, a->dk_st, H, bh, j, es), a->dtype, dk + j * E, E);
      FN(store_row)((char *)row_of(a->dv, a->dv_st, H, bh, j, es), a->dtype, dv + j * E, E);
    }
  }
  free(mem);
}

#undef FN
#undef CAT
#undef CAT_
