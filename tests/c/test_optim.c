/* tests/c/test_optim.c: the fused optimizer step (vl_optim_step over the CPU kernels), vl_l2norms
 * and vl_unscale_ against direct per-element formulas computed here in double, over several steps
 * with fresh random gradients, several tensors of odd sizes per group, f32 / f64 / f16 and bf16
 * parameters with f32 state; the AMP found_inf skip and inv_scale; the front end's checks.
 * Inputs are random from a seed printed at the start (V100_TEST_SEED replays one).
 * The last line is "N passed, N failed"; the exit status is non-zero on failure. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/context.h"
#include "runtime/core/dtype.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"
#include "runtime/core/tensor.h"
#include "vl_test.h"

/* ---- tensors ---- */
static vl_tensor *mk(int64_t n, vl_dtype dt, const double *vals) {
  vl_tensor *t = NULL;
  if (vl_tensor_empty(1, &n, dt, vl_cpu_device(), &t) != VL_OK) {
    printf("empty failed: %s\n", vl_errmsg());
    exit(2);
  }
  char *p = vl_tensor_data(t);
  for (int64_t i = 0; i < n; i++) vl_store_from_f64(p + i * (int64_t)vl_dtype_size(dt), dt, vals ? vals[i] : 0.0);
  return t;
}
static double get(const vl_tensor *t, int64_t i) {
  return vl_load_as_f64((const char *)vl_tensor_data(t) + i * (int64_t)vl_dtype_size(t->dtype), t->dtype);
}
/* x rounded to dt (the reference keeps what memory would hold). */
static double rnd(double x, vl_dtype dt) {
  char b[8];
  vl_store_from_f64(b, dt, x);
  return vl_load_as_f64(b, dt);
}

/* Element i of the reference must match t within atol + rtol * |ref|. */
static bool close_all(const vl_tensor *t, const double *ref, int64_t n, double rtol, double atol, const char *what) {
  for (int64_t i = 0; i < n; i++) {
    double v = get(t, i);
    if (!(fabs(v - ref[i]) <= atol + rtol * fabs(ref[i]))) {
      printf("  %s: element %lld is %.10g, expected %.10g\n", what, (long long)i, v, ref[i]);
      return false;
    }
  }
  return true;
}

#define NT 4
static const int64_t SIZES[NT] = {1, 7, 301, 1031};

typedef struct group {
  vl_dtype pdt, sdt;
  vl_tensor *p[NT], *g[NT], *s1[NT], *s2[NT];
  double *rp[NT], *rm[NT], *rv[NT]; /* reference params and moments */
} group;

static void group_init(group *G, vl_dtype pdt, vl_dtype sdt) {
  memset(G, 0, sizeof *G);
  G->pdt = pdt;
  G->sdt = sdt;
  for (int i = 0; i < NT; i++) {
    int64_t n = SIZES[i];
    G->rp[i] = malloc(sizeof(double) * n);
    G->rm[i] = calloc((size_t)n, sizeof(double));
    G->rv[i] = calloc((size_t)n, sizeof(double));
    for (int64_t k = 0; k < n; k++) G->rp[i][k] = rnd(vl_test_nrand(), pdt);
    G->p[i] = mk(n, pdt, G->rp[i]);
    G->g[i] = mk(n, pdt, NULL);
    G->s1[i] = mk(n, sdt, NULL);
    G->s2[i] = mk(n, sdt, NULL);
  }
}
static void group_free(group *G) {
  for (int i = 0; i < NT; i++) {
    vl_tensor_release(G->p[i]);
    vl_tensor_release(G->g[i]);
    vl_tensor_release(G->s1[i]);
    vl_tensor_release(G->s2[i]);
    free(G->rp[i]);
    free(G->rm[i]);
    free(G->rv[i]);
  }
}
/* Fresh gradients (times `mult`, as a loss scale would); returns them unscaled in gr[i]. */
/* Gradients ~ N(0, 1), away from 0 when the state is 16-bit: there (1 - beta2) g^2 of a |g| below
 * ~0.01 lands among f16's subnormals, where the kernel's f32 arithmetic and the reference's
 * double can round v to neighbouring subnormals, and 1/sqrt(v) makes that a difference of orders
 * of magnitude in the update (seed 1796395260: 61.25 against 60.66). That is f16 state's own
 * limit, not a kernel error; the comparison is of the rest. */
static void new_grads(group *G, double **gr, double mult) {
  const bool half_state = vl_dtype_size(G->sdt) == 2;
  for (int i = 0; i < NT; i++)
    for (int64_t k = 0; k < SIZES[i]; k++) {
      double r = vl_test_nrand();
      if (half_state && fabs(r) < 0.05) r = r < 0 ? r - 0.05 : r + 0.05;
      double g = rnd(r * mult, G->pdt);
      vl_store_from_f64((char *)vl_tensor_data(G->g[i]) + k * (int64_t)vl_dtype_size(G->pdt), G->pdt, g);
      gr[i][k] = g / mult;
    }
}

static double norm2(const double *x, int64_t n) {
  double s = 0;
  for (int64_t k = 0; k < n; k++) s += x[k] * x[k];
  return sqrt(s);
}

/* The reference step of tensor i (formulas of torch.optim / apex, in double). */
static void ref_step(vl_optim_kind kind, group *G, int i, const double *g, const vl_optim_hparams *h) {
  int64_t n = SIZES[i];
  double *p = G->rp[i], *m = G->rm[i], *v = G->rv[i];
  double *d = malloc(sizeof(double) * n);
  if (kind == VL_OPTIM_SGD || kind == VL_OPTIM_LARS) {
    double local = 1;
    if (kind == VL_OPTIM_LARS) {
      double pn = norm2(p, n), gn = norm2(g, n);
      if (pn > 0 && gn > 0) local = h->trust_coef * pn / (gn + h->weight_decay * pn + h->eps);
    }
    for (int64_t k = 0; k < n; k++) {
      d[k] = local * (g[k] + h->weight_decay * p[k]);
      if (h->momentum != 0) {
        m[k] = h->first_step ? d[k] : h->momentum * m[k] + (1 - h->dampening) * d[k];
        m[k] = rnd(m[k], G->sdt);
        d[k] = h->nesterov ? d[k] + h->momentum * m[k] : m[k];
      }
      p[k] = p[k] - h->lr * d[k];
    }
  } else {
    double bc1 = 1 - pow(h->beta1, (double)h->step), bc2 = 1 - pow(h->beta2, (double)h->step);
    for (int64_t k = 0; k < n; k++) {
      m[k] = rnd(h->beta1 * m[k] + (1 - h->beta1) * g[k], G->sdt);
      v[k] = rnd(h->beta2 * v[k] + (1 - h->beta2) * g[k] * g[k], G->sdt);
      d[k] = (m[k] / bc1) / (sqrt(v[k] / bc2) + h->eps);
    }
    if (kind == VL_OPTIM_ADAMW) {
      for (int64_t k = 0; k < n; k++) p[k] = p[k] * (1 - h->lr * h->weight_decay) - h->lr * d[k];
    } else {
      for (int64_t k = 0; k < n; k++) d[k] += h->weight_decay * p[k];
      double pn = norm2(p, n), un = norm2(d, n);
      double r = pn > 0 && un > 0 ? pn / un : 1;
      for (int64_t k = 0; k < n; k++) p[k] -= h->lr * r * d[k];
    }
  }
  for (int64_t k = 0; k < n; k++) p[k] = rnd(p[k], G->pdt);
  free(d);
}

static const char *kname(vl_optim_kind k) {
  static const char *const n[] = {"sgd", "adamw", "lamb", "lars"};
  return n[k];
}

/* Four steps of `kind` with hyper-parameters h0 on (pdt, sdt), against the reference. */
static void run_kind(vl_optim_kind kind, vl_dtype pdt, vl_dtype sdt, vl_optim_hparams h0, bool use_scale) {
  group G;
  group_init(&G, pdt, sdt);
  double *gr[NT];
  for (int i = 0; i < NT; i++) gr[i] = malloc(sizeof(double) * SIZES[i]);
  bool stateful = kind == VL_OPTIM_ADAMW || kind == VL_OPTIM_LAMB || h0.momentum != 0;
  bool two = kind == VL_OPTIM_ADAMW || kind == VL_OPTIM_LAMB;
  double rtol = pdt == VL_F64 ? 1e-12 : pdt == VL_F32 ? 2e-5 : pdt == VL_F16 ? 2e-3 : 1.6e-2;
  double atol = pdt == VL_F64 ? 1e-13 : pdt == VL_F32 ? 2e-6 : pdt == VL_F16 ? 2e-3 : 1.6e-2;
  const double mult = use_scale ? 1024.0 : 1.0;
  vl_tensor *inv = NULL, *finf = NULL;
  if (use_scale) {
    double one = 1.0 / mult, zero = 0.0;
    inv = mk(1, VL_F32, &one);
    finf = mk(1, VL_F32, &zero);
  }
  bool ok = true;
  for (int step = 1; step <= 4 && ok; step++) {
    vl_optim_hparams h = h0;
    h.step = step;
    h.first_step = step == 1;
    new_grads(&G, gr, mult);
    vl_status s = vl_optim_step(kind, NT, G.p, G.g, stateful ? G.s1 : NULL, two ? G.s2 : NULL, &h, finf, inv);
    CHECK(s == VL_OK, "%s step: %s", kname(kind), vl_errmsg());
    for (int i = 0; i < NT; i++) {
      ref_step(kind, &G, i, gr[i], &h);
      char what[96];
      snprintf(what, sizeof what, "%s %s/%s step %d tensor %d params", kname(kind), vl_dtype_name(pdt),
               vl_dtype_name(sdt), step, i + 1);
      ok = ok && close_all(G.p[i], G.rp[i], SIZES[i], rtol, atol, what);
      if (stateful) ok = ok && close_all(G.s1[i], G.rm[i], SIZES[i], rtol, atol, "state1");
      if (two) ok = ok && close_all(G.s2[i], G.rv[i], SIZES[i], rtol, atol, "state2");
    }
  }
  CHECK(ok, "%s on %s params with %s state%s matches the reference", kname(kind), vl_dtype_name(pdt),
        vl_dtype_name(sdt), use_scale ? " (inv_scale)" : "");
  for (int i = 0; i < NT; i++) free(gr[i]);
  vl_tensor_release(inv);
  vl_tensor_release(finf);
  group_free(&G);
}

static vl_optim_hparams hp_sgd(double mom, double damp, bool nest, double wd) {
  vl_optim_hparams h = {0};
  h.lr = 0.05;
  h.momentum = mom;
  h.dampening = damp;
  h.nesterov = nest;
  h.weight_decay = wd;
  return h;
}
static vl_optim_hparams hp_adam(double wd, double eps) {
  vl_optim_hparams h = {0};
  h.lr = 1e-2;
  h.beta1 = 0.9;
  h.beta2 = 0.999;
  h.eps = eps;
  h.weight_decay = wd;
  return h;
}

static void test_kinds(void) {
  const vl_dtype cfg[][2] = {{VL_F32, VL_F32}, {VL_F64, VL_F64}, {VL_F16, VL_F32}, {VL_BF16, VL_F32}, {VL_F16, VL_F16}};
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    vl_dtype p = cfg[c][0], s = cfg[c][1];
    run_kind(VL_OPTIM_SGD, p, s, hp_sgd(0, 0, false, 0), false);
    run_kind(VL_OPTIM_SGD, p, s, hp_sgd(0.9, 0.1, false, 1e-2), false);
    run_kind(VL_OPTIM_SGD, p, s, hp_sgd(0.9, 0, true, 1e-3), false);
    run_kind(VL_OPTIM_ADAMW, p, s, hp_adam(1e-2, 1e-8), false);
    run_kind(VL_OPTIM_LAMB, p, s, hp_adam(1e-2, 1e-6), false);
    vl_optim_hparams l = hp_sgd(0.9, 0, false, 5e-4);
    l.trust_coef = 0.001;
    l.eps = 1e-9;
    l.lr = 2.0;
    run_kind(VL_OPTIM_LARS, p, s, l, false);
  }
  /* Grads scaled by 1024 with inv_scale = 1/1024 give the unscaled result. */
  run_kind(VL_OPTIM_SGD, VL_F32, VL_F32, hp_sgd(0.9, 0, true, 1e-2), true);
  run_kind(VL_OPTIM_ADAMW, VL_F32, VL_F32, hp_adam(1e-2, 1e-8), true);
  run_kind(VL_OPTIM_LAMB, VL_F64, VL_F64, hp_adam(1e-2, 1e-6), true);
  vl_optim_hparams l = hp_sgd(0.9, 0, false, 5e-4);
  l.trust_coef = 0.02;
  run_kind(VL_OPTIM_LARS, VL_F16, VL_F32, l, true);
}

/* found_inf = 1: nothing is written, for every kind (state included). */
static void test_found_inf_skip(void) {
  for (int k = VL_OPTIM_SGD; k <= VL_OPTIM_LARS; k++) {
    group G;
    group_init(&G, VL_F32, VL_F32);
    double *gr[NT];
    for (int i = 0; i < NT; i++) {
      gr[i] = malloc(sizeof(double) * SIZES[i]);
      for (int64_t j = 0; j < SIZES[i]; j++) vl_store_from_f64((char *)vl_tensor_data(G.s1[i]) + 4 * j, VL_F32, vl_test_nrand());
    }
    new_grads(&G, gr, 1);
    double one = 1, half = 0.5;
    vl_tensor *finf = mk(1, VL_F32, &one), *inv = mk(1, VL_F32, &half);
    vl_optim_hparams h = hp_adam(0.1, 1e-8);
    h.momentum = 0.9;
    h.trust_coef = 0.01;
    h.step = 3;
    vl_status s = vl_optim_step((vl_optim_kind)k, NT, G.p, G.g, G.s1, G.s2, &h, finf, inv);
    bool same = true;
    for (int i = 0; i < NT; i++)
      for (int64_t j = 0; j < SIZES[i]; j++) same = same && get(G.p[i], j) == G.rp[i][j] && get(G.s2[i], j) == 0.0;
    CHECK(s == VL_OK && same, "%s: found_inf = 1 skips the step", kname((vl_optim_kind)k));
    vl_tensor_release(finf);
    vl_tensor_release(inv);
    for (int i = 0; i < NT; i++) free(gr[i]);
    group_free(&G);
  }
}

static void test_l2norms_unscale(void) {
  const vl_dtype dts[] = {VL_F32, VL_F64, VL_F16, VL_BF16};
  for (int d = 0; d < 4; d++) {
    vl_tensor *ts[NT + 1];
    double *ref[NT + 1];
    int64_t sizes[NT + 1] = {1, 7, 301, 1031, 0};
    for (int i = 0; i <= NT; i++) {
      ref[i] = malloc(sizeof(double) * (size_t)(sizes[i] + 1));
      for (int64_t k = 0; k < sizes[i]; k++) ref[i][k] = rnd(3 * vl_test_nrand(), dts[d]);
      ts[i] = mk(sizes[i], dts[d], ref[i]);
    }
    vl_tensor *norms = NULL;
    vl_status s = vl_l2norms(NT + 1, ts, &norms);
    bool ok = s == VL_OK && norms->dtype == VL_F32 && vl_tensor_numel(norms) == NT + 1;
    for (int i = 0; ok && i <= NT; i++) {
      double r = norm2(ref[i], sizes[i]);
      ok = fabs(get(norms, i) - r) <= 1e-6 * r;
    }
    CHECK(ok, "l2norms %s: %s", vl_dtype_name(dts[d]), s == VL_OK ? "values" : vl_errmsg());
    vl_tensor_release(norms);

    /* unscale_ by 1/8 (exact): values scale, found_inf stays 0; then an inf sets it. */
    double inv8 = 0.125, zero = 0;
    vl_tensor *inv = mk(1, VL_F32, &inv8), *finf = mk(1, VL_F32, &zero);
    s = vl_unscale_(NT + 1, ts, inv, finf);
    ok = s == VL_OK && get(finf, 0) == 0.0;
    for (int i = 0; ok && i <= NT; i++)
      for (int64_t k = 0; k < sizes[i]; k++) ok = ok && get(ts[i], k) == rnd(ref[i][k] * 0.125, dts[d]);
    CHECK(ok, "unscale_ %s scales and leaves found_inf at 0", vl_dtype_name(dts[d]));
    vl_store_from_f64((char *)vl_tensor_data(ts[3]) + 500 * (int64_t)vl_dtype_size(dts[d]), dts[d],
                      d % 2 ? NAN : INFINITY);
    s = vl_unscale_(NT + 1, ts, inv, finf);
    CHECK(s == VL_OK && get(finf, 0) == 1.0, "unscale_ %s: a non-finite value sets found_inf", vl_dtype_name(dts[d]));
    vl_tensor_release(inv);
    vl_tensor_release(finf);
    for (int i = 0; i <= NT; i++) {
      vl_tensor_release(ts[i]);
      free(ref[i]);
    }
  }
}

static void test_checks(void) {
  double vals[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  vl_tensor *p = mk(8, VL_F32, vals), *g = mk(8, VL_F32, vals), *g7 = mk(7, VL_F32, vals);
  vl_tensor *gd = mk(8, VL_F64, vals), *m = mk(8, VL_F32, NULL), *mh = mk(8, VL_F16, NULL);
  vl_optim_hparams h = hp_adam(0, 1e-8);
  h.step = 1;
  vl_status s = vl_optim_step(VL_OPTIM_ADAMW, 1, &p, &g7, &m, &m, &h, NULL, NULL);
  CHECK(s == VL_ESHAPE && strstr(vl_errmsg(), "grads[1] has 7 elements"), "shape mismatch: %s", vl_errmsg());
  s = vl_optim_step(VL_OPTIM_ADAMW, 1, &p, &g, &m, NULL, &h, NULL, NULL);
  CHECK(s == VL_EINVAL && strstr(vl_errmsg(), "state2"), "missing state: %s", vl_errmsg());
  s = vl_optim_step(VL_OPTIM_ADAMW, 1, &p, &gd, &m, &m, &h, NULL, NULL);
  CHECK(s == VL_EDTYPE && strstr(vl_errmsg(), "grads[1] has dtype f64"), "grad dtype: %s", vl_errmsg());
  s = vl_optim_step(VL_OPTIM_ADAMW, 1, &p, &g, &mh, &mh, &h, NULL, NULL);
  CHECK(s == VL_EDTYPE && strstr(vl_errmsg(), "state dtype f16"), "state dtype: %s", vl_errmsg());
  h.step = 0;
  s = vl_optim_step(VL_OPTIM_ADAMW, 1, &p, &g, &m, &m, &h, NULL, NULL);
  CHECK(s == VL_EINVAL && strstr(vl_errmsg(), "step must be >= 1"), "step 0: %s", vl_errmsg());
  h.step = 1;
  s = vl_optim_step(VL_OPTIM_ADAMW, 1, &p, &g, &m, &m, &h, g7, NULL);
  CHECK(s == VL_EINVAL && strstr(vl_errmsg(), "found_inf"), "found_inf shape: %s", vl_errmsg());
  bool untouched = true;
  for (int k = 0; k < 8; k++) untouched = untouched && get(p, k) == vals[k] && get(m, k) == 0;
  CHECK(untouched, "failed steps leave params and state untouched");
  /* A transposed (dense, not contiguous) parameter needs a gradient of its shape; a parameter
   * that does not fill its memory (a narrowed view) is refused. */
  int64_t sz[2] = {2, 4};
  vl_tensor *p2 = NULL, *pt = NULL, *pn = NULL, *gn = NULL;
  vl_view(p, 2, sz, &p2);
  vl_transpose(p2, 0, 1, &pt);
  s = vl_optim_step(VL_OPTIM_SGD, 1, &pt, &g, NULL, NULL, &h, NULL, NULL);
  CHECK(s == VL_ESHAPE && strstr(vl_errmsg(), "does not have the shape"), "transposed param: %s", vl_errmsg());
  vl_narrow(p2, 1, 0, 2, &pn);
  vl_narrow(p2, 1, 0, 2, &gn);
  s = vl_optim_step(VL_OPTIM_SGD, 1, &pn, &gn, NULL, NULL, &h, NULL, NULL);
  CHECK(s == VL_EINVAL && strstr(vl_errmsg(), "not dense"), "narrowed param: %s", vl_errmsg());
  vl_tensor_release(pn);
  vl_tensor_release(gn);
  /* SGD without momentum keeps no state; n == 0 is a no-op. */
  vl_optim_hparams hs = hp_sgd(0, 0, false, 0);
  s = vl_optim_step(VL_OPTIM_SGD, 1, &p, &g, NULL, NULL, &hs, NULL, NULL);
  CHECK(s == VL_OK && fabs(get(p, 2) - (3 - 0.05 * 3)) < 1e-6, "plain SGD: %s", vl_errmsg());
  CHECK(vl_optim_step(VL_OPTIM_SGD, 0, NULL, NULL, NULL, NULL, &hs, NULL, NULL) == VL_OK, "empty group");
  /* l2norms of mixed dtypes is refused. */
  vl_tensor *mix[2] = {p, gd}, *out = NULL;
  s = vl_l2norms(2, mix, &out);
  CHECK(s == VL_EINVAL && out == NULL && strstr(vl_errmsg(), "group by both"), "l2norms mixed: %s", vl_errmsg());
  vl_tensor *all[7] = {p, g, g7, gd, m, mh, p2};
  for (int i = 0; i < 7; i++) vl_tensor_release(all[i]);
  vl_tensor_release(pt);
}

int main(void) {
  if (!vl_test_init()) return 1;
  uint64_t seed = vl_test_seed();
  printf("seed %llu\n", (unsigned long long)seed);
  test_kinds();
  test_found_inf_skip();
  test_l2norms_unscale();
  test_checks();
  vl_shutdown();
  return vl_test_finish();
}
