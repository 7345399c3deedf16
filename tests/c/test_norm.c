/* tests/c/test_norm.c: batch norm, layer norm, softmax backward and the activation-backward ops on
 * the CPU, against direct computations in double and finite differences of the forward ops. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/autograd/autograd.h"
#include "runtime/core/context.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"
#include "runtime/core/tensor.h"
#include "vl_test.h"

#define CPU vl_cpu_device()
#define REL(t) vl_tensor_release(t)

static void fill_rand(double *v, int64_t n, double lo, double hi) {
  for (int64_t i = 0; i < n; i++) v[i] = lo + (hi - lo) * vl_test_urand();
}

/* max |a - ref| / (atol + rtol |ref|) <= 1 */
static bool close_to(const double *a, const double *ref, int64_t n, double rtol, double atol) {
  for (int64_t i = 0; i < n; i++)
    if (!(fabs(a[i] - ref[i]) <= atol + rtol * fabs(ref[i]))) {
      printf("  mismatch at %lld: %.17g vs ref %.17g\n", (long long)i, a[i], ref[i]);
      return false;
    }
  return true;
}
static bool tensor_close(vl_tensor *t, const double *ref, double rtol, double atol) {
  double *v = vl_test_values(t);
  bool ok = close_to(v, ref, vl_tensor_numel(t), rtol, atol);
  free(v);
  return ok;
}

/* ---- batch norm reference: x logical [n, c, hw] ---- */
static void bn_ref(const double *x, int64_t n, int64_t c, int64_t hw, const double *w, const double *b,
                   bool training, double *rm, double *rv, double momentum, double eps, double *y, double *mean,
                   double *invstd) {
  int64_t m = n * hw;
  for (int64_t ci = 0; ci < c; ci++) {
    double mu, var;
    if (training) {
      double s = 0, q = 0;
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < hw; j++) s += x[(i * c + ci) * hw + j];
      mu = s / m;
      for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < hw; j++) q += pow(x[(i * c + ci) * hw + j] - mu, 2);
      var = q / m;
      if (rm) {
        rm[ci] = (1 - momentum) * rm[ci] + momentum * mu;
        rv[ci] = (1 - momentum) * rv[ci] + momentum * q / (m - 1);
      }
    } else {
      mu = rm[ci];
      var = rv[ci];
    }
    double is = 1 / sqrt(var + eps);
    if (mean) mean[ci] = mu, invstd[ci] = is;
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < hw; j++) {
        int64_t k = (i * c + ci) * hw + j;
        y[k] = (x[k] - mu) * is * (w ? w[ci] : 1) + (b ? b[ci] : 0);
      }
  }
}

/* A channels-last copy of an NCHW-contiguous x (logically the same tensor). */
static vl_tensor *nhwc_of(vl_tensor *x) {
  int64_t sz[4] = {x->size[0], x->size[2], x->size[3], x->size[1]};
  vl_tensor *base = NULL, *v = NULL;
  vl_tensor_empty(4, sz, x->dtype, CPU, &base);
  int perm[4] = {0, 3, 1, 2};
  vl_permute(base, 4, perm, &v);
  REL(base);
  vl_copy_(v, x);
  return v;
}

static void test_batch_norm_forward(void) {
  const vl_dtype dts[2] = {VL_F64, VL_F32};
  for (int di = 0; di < 2; di++) {
    vl_dtype dt = dts[di];
    double tol = dt == VL_F64 ? 1e-12 : 2e-6;
    int64_t N = 3, C = 4, H = 5, W = 2, hw = H * W, numel = N * C * hw;
    int64_t xs[4] = {N, C, H, W}, cs[1] = {C};
    double *x = malloc(sizeof(double) * numel), *y = malloc(sizeof(double) * numel);
    double w[4], b[4], rm[4], rv[4], mean[4], invstd[4];
    fill_rand(x, numel, -3, 5);
    fill_rand(w, C, 0.5, 1.5);
    fill_rand(b, C, -1, 1);
    fill_rand(rm, C, -0.5, 0.5);
    fill_rand(rv, C, 0.5, 2);
    vl_tensor *tx = vl_test_tensor(4, xs, dt, x), *tw = vl_test_tensor(1, cs, VL_F32, w), *tb = vl_test_tensor(1, cs, VL_F32, b);
    vl_tensor *trm = vl_test_tensor(1, cs, VL_F32, rm), *trv = vl_test_tensor(1, cs, VL_F32, rv);
    /* The reference sees the f32-rounded parameters, as the kernel does. */
    double *wv = vl_test_values(tw), *bv = vl_test_values(tb), *rmv = vl_test_values(trm), *rvv = vl_test_values(trv), *xv = vl_test_values(tx);
    memcpy(w, wv, sizeof w), memcpy(b, bv, sizeof b), memcpy(rm, rmv, sizeof rm), memcpy(rv, rvv, sizeof rv);
    free(wv), free(bv), free(rmv), free(rvv);
    vl_tensor *ty = NULL, *tm = NULL, *ti = NULL;
    /* training with running stats (f32 params with f64 data are converted and copied back) */
    CHECK_OK(vl_batch_norm(tx, tw, tb, trm, trv, true, 0.1, 1e-5, &ty, &tm, &ti));
    bn_ref(xv, N, C, hw, w, b, true, rm, rv, 0.1, 1e-5, y, mean, invstd);
    CHECK(ty && ty->dtype == dt && tensor_close(ty, y, tol, tol));
    CHECK(tm && tm->dtype == (dt == VL_F64 ? VL_F64 : VL_F32) && tensor_close(tm, mean, 1e-6, 1e-6));
    CHECK(ti && tensor_close(ti, invstd, 1e-6, 1e-6));
    CHECK(tensor_close(trm, rm, 1e-6, 1e-7) && tensor_close(trv, rv, 1e-6, 1e-7));
    CHECK(trm->dtype == VL_F32);
    REL(ty), REL(tm), REL(ti);
    /* eval uses the (updated) running stats; save_* give them back */
    double *rm2 = vl_test_values(trm), *rv2 = vl_test_values(trv);
    CHECK_OK(vl_batch_norm(tx, tw, tb, trm, trv, false, 0.1, 1e-3, &ty, &tm, &ti));
    bn_ref(xv, N, C, hw, w, b, false, rm2, rv2, 0.1, 1e-3, y, mean, invstd);
    CHECK(tensor_close(ty, y, tol, tol) && tensor_close(ti, invstd, 1e-6, 1e-6));
    CHECK(tensor_close(trm, rm2, 0, 0)); /* untouched in eval */
    free(rm2), free(rv2); /* LeakSanitizer (tools/test-sanitize.sh) */
    REL(ty), REL(tm), REL(ti);
    /* affine off, no running stats */
    CHECK_OK(vl_batch_norm(tx, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &ty, NULL, NULL));
    bn_ref(xv, N, C, hw, NULL, NULL, true, NULL, NULL, 0, 1e-5, y, NULL, NULL);
    CHECK(tensor_close(ty, y, tol, tol));
    REL(ty);
    /* NHWC input: same values, channels-last output */
    vl_tensor *tx2 = nhwc_of(tx), *ty2 = NULL;
    CHECK_OK(vl_batch_norm(tx, tw, tb, NULL, NULL, true, 0.1, 1e-5, &ty, NULL, NULL));
    CHECK_OK(vl_batch_norm(tx2, tw, tb, NULL, NULL, true, 0.1, 1e-5, &ty2, NULL, NULL));
    CHECK(ty2 && ty2->stride[1] == 1 && ty2->stride[3] == C && !vl_tensor_is_contiguous(ty2));
    double *a1 = vl_test_values(ty);
    CHECK(tensor_close(ty2, a1, tol, tol));
    free(a1);
    REL(ty), REL(ty2), REL(tx2);
    /* 2-D and 3-D inputs */
    int64_t s2[2] = {N * hw, C};
    vl_tensor *t2 = vl_test_tensor(2, s2, dt, x);
    double *x2 = vl_test_values(t2), *y2 = malloc(sizeof(double) * numel);
    CHECK_OK(vl_batch_norm(t2, tw, tb, NULL, NULL, true, 0.1, 1e-5, &ty, NULL, NULL));
    bn_ref(x2, N * hw, C, 1, w, b, true, NULL, NULL, 0, 1e-5, y2, NULL, NULL);
    CHECK(tensor_close(ty, y2, tol, tol));
    REL(ty), REL(t2), free(x2), free(y2);
    REL(tx), REL(tw), REL(tb), REL(trm), REL(trv);
    free(x), free(y), free(xv);
  }
}

/* sum(y * r) as a function of one element of x (f64), for finite differences. */
static double bn_loss(vl_tensor *x, vl_tensor *w, vl_tensor *b, const double *r) {
  vl_tensor *y = NULL;
  if (vl_batch_norm(x, w, b, NULL, NULL, true, 0.1, 1e-5, &y, NULL, NULL) != VL_OK) return NAN;
  double *v = vl_test_values(y), s = 0;
  for (int64_t i = 0; i < vl_tensor_numel(y); i++) s += v[i] * r[i];
  free(v);
  REL(y);
  return s;
}

static void fd_check(const char *what, vl_tensor *param, vl_tensor *grad, double (*loss)(void *), void *ud) {
  double *g = vl_test_values(grad);
  double *p = vl_tensor_data(param);
  int bad = 0;
  for (int64_t i = 0; i < vl_tensor_numel(param); i++) {
    double keep = p[i], h = 1e-6;
    p[i] = keep + h;
    double lp = loss(ud);
    p[i] = keep - h;
    double lm = loss(ud);
    p[i] = keep;
    double fd = (lp - lm) / (2 * h);
    if (fabs(fd - g[i]) > 1e-6 + 1e-5 * fabs(fd)) {
      if (!bad) printf("  %s: element %lld analytic %.12g, finite difference %.12g\n", what, (long long)i, g[i], fd);
      bad++;
    }
  }
  CHECK(bad == 0);
  free(g);
}

typedef struct {
  vl_tensor *x, *w, *b;
  const double *r;
  int nnorm;
} loss_ud;
static double bn_loss_cb(void *u) {
  loss_ud *l = u;
  return bn_loss(l->x, l->w, l->b, l->r);
}

static void test_batch_norm_backward(void) {
  int64_t N = 2, C = 3, H = 3, W = 2, hw = H * W, numel = N * C * hw;
  int64_t xs[4] = {N, C, H, W}, cs[1] = {C};
  double x[36], r[36], w[3], b[3];
  fill_rand(x, numel, -2, 3);
  fill_rand(r, numel, -1, 1);
  fill_rand(w, C, 0.5, 1.5);
  fill_rand(b, C, -1, 1);
  vl_tensor *tx = vl_test_tensor(4, xs, VL_F64, x), *tr = vl_test_tensor(4, xs, VL_F64, r), *tw = vl_test_tensor(1, cs, VL_F64, w), *tb = vl_test_tensor(1, cs, VL_F64, b);
  vl_tensor *y = NULL, *sm = NULL, *si = NULL, *dx = NULL, *dw = NULL, *db = NULL;
  CHECK_OK(vl_batch_norm(tx, tw, tb, NULL, NULL, true, 0.1, 1e-5, &y, &sm, &si));
  CHECK_OK(vl_batch_norm_backward(tx, tr, tw, sm, si, 1e-5, &dx, &dw, &db));
  loss_ud u = {tx, tw, tb, r, 0};
  fd_check("batch_norm dx", tx, dx, bn_loss_cb, &u);
  fd_check("batch_norm dweight", tw, dw, bn_loss_cb, &u);
  fd_check("batch_norm dbias", tb, db, bn_loss_cb, &u);
  /* NHWC x and an NCHW dy give the same gradients */
  vl_tensor *tx2 = nhwc_of(tx), *dx2 = NULL, *dw2 = NULL;
  CHECK_OK(vl_batch_norm_backward(tx2, tr, tw, sm, si, 1e-5, &dx2, &dw2, NULL));
  double *a = vl_test_values(dx), *a2 = vl_test_values(dw);
  CHECK(dx2 && dx2->stride[1] == 1 && tensor_close(dx2, a, 1e-12, 1e-12) && tensor_close(dw2, a2, 1e-12, 1e-12));
  free(a), free(a2);
  REL(tx2), REL(dx2), REL(dw2);
  /* f32 data: close to the f64 result */
  vl_tensor *fx = NULL, *fr = NULL, *fy = NULL, *fsm = NULL, *fsi = NULL, *fdx = NULL, *fdw = NULL;
  vl_to(tx, VL_F32, CPU, &fx);
  vl_to(tr, VL_F32, CPU, &fr);
  CHECK_OK(vl_batch_norm(fx, tw, tb, NULL, NULL, true, 0.1, 1e-5, &fy, &fsm, &fsi));
  CHECK_OK(vl_batch_norm_backward(fx, fr, tw, fsm, fsi, 1e-5, &fdx, &fdw, NULL));
  a = vl_test_values(dx);
  a2 = vl_test_values(dw);
  CHECK(fdx && fdx->dtype == VL_F32 && fdw->dtype == VL_F32 && tensor_close(fdx, a, 1e-4, 1e-5) &&
        tensor_close(fdw, a2, 1e-4, 1e-5));
  free(a), free(a2);
  REL(fx), REL(fr), REL(fy), REL(fsm), REL(fsi), REL(fdx), REL(fdw);
  REL(y), REL(sm), REL(si), REL(dx), REL(dw), REL(db), REL(tx), REL(tr), REL(tw), REL(tb);
}

/* ---- layer norm ---- */
static double ln_loss_cb(void *u) {
  loss_ud *l = u;
  vl_tensor *y = NULL;
  if (vl_layer_norm(l->x, l->nnorm, l->w, l->b, 1e-5, &y, NULL, NULL) != VL_OK) return NAN;
  double *v = vl_test_values(y), s = 0;
  for (int64_t i = 0; i < vl_tensor_numel(y); i++) s += v[i] * l->r[i];
  free(v);
  REL(y);
  return s;
}

static void test_layer_norm(void) {
  int64_t xs[3] = {3, 4, 5}, ns[2] = {4, 5};
  int64_t numel = 60, rows = 3, cols = 20;
  double x[60], r[60], w[20], b[20], y[60], mean[3], rstd[3];
  fill_rand(x, numel, -2, 4);
  fill_rand(r, numel, -1, 1);
  fill_rand(w, cols, 0.5, 1.5);
  fill_rand(b, cols, -1, 1);
  for (int64_t i = 0; i < rows; i++) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < cols; j++) mu += x[i * cols + j];
    mu /= cols;
    for (int64_t j = 0; j < cols; j++) var += pow(x[i * cols + j] - mu, 2);
    double rs = 1 / sqrt(var / cols + 1e-5);
    mean[i] = mu, rstd[i] = rs;
    for (int64_t j = 0; j < cols; j++) y[i * cols + j] = (x[i * cols + j] - mu) * rs * w[j] + b[j];
  }
  vl_tensor *tx = vl_test_tensor(3, xs, VL_F64, x), *tr = vl_test_tensor(3, xs, VL_F64, r), *tw = vl_test_tensor(2, ns, VL_F64, w), *tb = vl_test_tensor(2, ns, VL_F64, b);
  vl_tensor *ty = NULL, *tm = NULL, *ts = NULL, *dx = NULL, *dw = NULL, *db = NULL;
  CHECK_OK(vl_layer_norm(tx, 2, tw, tb, 1e-5, &ty, &tm, &ts));
  CHECK(ty && tensor_close(ty, y, 1e-12, 1e-12) && tensor_close(tm, mean, 1e-12, 1e-12) &&
        tensor_close(ts, rstd, 1e-12, 1e-12));
  CHECK(tm && tm->ndim == 1 && tm->size[0] == 3);
  CHECK_OK(vl_layer_norm_backward(tx, tr, 2, tw, tm, ts, &dx, &dw, &db));
  loss_ud u = {tx, tw, tb, r, 2};
  fd_check("layer_norm dx", tx, dx, ln_loss_cb, &u);
  fd_check("layer_norm dweight", tw, dw, ln_loss_cb, &u);
  fd_check("layer_norm dbias", tb, db, ln_loss_cb, &u);
  /* no affine: x-gradient still right */
  vl_tensor *dx2 = NULL;
  loss_ud u2 = {tx, NULL, NULL, r, 1};
  REL(ty), REL(tm), REL(ts);
  CHECK_OK(vl_layer_norm(tx, 1, NULL, NULL, 1e-5, &ty, &tm, &ts));
  CHECK_OK(vl_layer_norm_backward(tx, tr, 1, NULL, tm, ts, &dx2, NULL, NULL));
  fd_check("layer_norm dx (no affine)", tx, dx2, ln_loss_cb, &u2);
  /* f16 data, f32 params: close to f64 */
  vl_tensor *hx = NULL, *hy = NULL, *fw = NULL;
  vl_to(tx, VL_F16, CPU, &hx);
  vl_to(tw, VL_F32, CPU, &fw);
  CHECK_OK(vl_layer_norm(hx, 2, fw, tb, 1e-5, &hy, NULL, NULL));
  CHECK(hy && hy->dtype == VL_F16 && tensor_close(hy, y, 1e-2, 1e-2));
  REL(hx), REL(hy), REL(fw), REL(dx2);
  REL(ty), REL(tm), REL(ts), REL(dx), REL(dw), REL(db), REL(tx), REL(tr), REL(tw), REL(tb);
}

/* ---- softmax backward ---- */
typedef struct {
  vl_tensor *x;
  const double *r;
  int dim;
  bool log;
} sm_ud;
static double sm_loss_cb(void *u) {
  sm_ud *l = u;
  vl_tensor *y = NULL;
  if (vl_softmax(l->x, l->dim, l->log, &y) != VL_OK) return NAN;
  double *v = vl_test_values(y), s = 0;
  for (int64_t i = 0; i < vl_tensor_numel(y); i++) s += v[i] * l->r[i];
  free(v);
  REL(y);
  return s;
}

static void test_softmax_backward(void) {
  int64_t xs[3] = {3, 5, 4};
  double x[60], r[60];
  for (int dim = 0; dim < 3; dim++) {
    for (int lg = 0; lg < 2; lg++) {
      fill_rand(x, 60, -3, 3);
      fill_rand(r, 60, -1, 1);
      vl_tensor *tx = vl_test_tensor(3, xs, VL_F64, x), *tr = vl_test_tensor(3, xs, VL_F64, r), *y = NULL, *dx = NULL;
      CHECK_OK(vl_softmax(tx, dim, lg, &y));
      CHECK_OK(vl_softmax_backward(y, tr, dim, lg, &dx));
      sm_ud u = {tx, r, dim, lg};
      fd_check(lg ? "log_softmax backward" : "softmax backward", tx, dx, sm_loss_cb, &u);
      /* f32 agrees with f64 */
      vl_tensor *fy = NULL, *fr = NULL, *fdx = NULL;
      vl_to(y, VL_F32, CPU, &fy);
      vl_to(tr, VL_F32, CPU, &fr);
      CHECK_OK(vl_softmax_backward(fy, fr, dim - 3, lg, &fdx));
      double *a = vl_test_values(dx);
      CHECK(fdx && tensor_close(fdx, a, 1e-5, 1e-6));
      free(a);
      REL(fy), REL(fr), REL(fdx), REL(tx), REL(tr), REL(y), REL(dx);
    }
  }
}

/* ---- activation backward ops ---- */
static void test_activation_backward(void) {
  const vl_binary_op ops[5] = {VL_BIN_RELU_BACKWARD, VL_BIN_GELU_BACKWARD, VL_BIN_GELU_TANH_BACKWARD,
                               VL_BIN_TANH_BACKWARD, VL_BIN_SIGMOID_BACKWARD};
  const vl_unary_op fwd[5] = {VL_UN_RELU, VL_UN_GELU, VL_UN_GELU_TANH, VL_UN_TANH, VL_UN_SIGMOID};
  const vl_dtype dts[4] = {VL_F64, VL_F32, VL_F16, VL_BF16};
  int64_t n = 64, sz[1] = {64};
  double x[64], g[64], ref[64];
  for (int k = 0; k < 5; k++) {
    fill_rand(x, n, -4, 4);
    fill_rand(g, n, -2, 2);
    for (int i = 0; i < n; i++)
      if (fabs(x[i]) < 1e-3) x[i] = 0.5; /* keep relu's kink out of the finite differences */
    /* finite differences of the forward op give f'(x); v is x or y = f(x) */
    for (int i = 0; i < n; i++) {
      double h = 1e-6, v[2], xx[2] = {x[i] + h, x[i] - h};
      for (int j = 0; j < 2; j++) {
        vl_tensor *t = vl_test_tensor(0, NULL, VL_F64, &xx[j]), *o = NULL;
        vl_unary(fwd[k], t, &o);
        vl_item(o, &v[j]);
        REL(t), REL(o);
      }
      ref[i] = g[i] * (v[0] - v[1]) / (2 * h);
    }
    vl_tensor *tx = vl_test_tensor(1, sz, VL_F64, x), *v = NULL;
    if (k >= 3) vl_unary(fwd[k], tx, &v);
    else v = vl_tensor_retain(tx);
    double *vv = vl_test_values(v);
    for (int d = 0; d < 4; d++) {
      vl_tensor *tg = vl_test_tensor(1, sz, dts[d], g), *tv = NULL, *out = NULL;
      vl_to(v, dts[d], CPU, &tv);
      CHECK_OK(vl_binary(ops[k], tg, tv, 1.0, &out));
      if (d == 0) {
        CHECK(out && tensor_close(out, ref, 1e-6, 1e-8));
        /* and the direct formula in double */
        double direct[64];
        for (int i = 0; i < n; i++) {
          double xi = x[i], vi = vv[i];
          switch (ops[k]) {
            case VL_BIN_RELU_BACKWARD: direct[i] = xi > 0 ? g[i] : 0; break;
            case VL_BIN_GELU_BACKWARD:
              direct[i] = g[i] * (0.5 * erfc(-xi / sqrt(2)) + xi * exp(-xi * xi / 2) / sqrt(2 * 3.14159265358979323846));
              break;
            case VL_BIN_GELU_TANH_BACKWARD: {
              double c = sqrt(2 / 3.14159265358979323846), t = tanh(c * (xi + 0.044715 * xi * xi * xi));
              direct[i] = g[i] * (0.5 * (1 + t) + 0.5 * xi * (1 - t * t) * c * (1 + 3 * 0.044715 * xi * xi));
              break;
            }
            case VL_BIN_TANH_BACKWARD: direct[i] = g[i] * (1 - vi * vi); break;
            default: direct[i] = g[i] * vi * (1 - vi); break;
          }
        }
        CHECK(tensor_close(out, direct, 1e-14, 1e-14));
      } else {
        double tol = dts[d] == VL_F32 ? 1e-5 : dts[d] == VL_F16 ? 5e-3 : 3e-2;
        CHECK(out && out->dtype == dts[d] && tensor_close(out, ref, tol, tol));
      }
      REL(tg), REL(tv), REL(out);
    }
    free(vv);
    REL(tx), REL(v);
  }
  /* errors: integer operands, scalar operand */
  double one = 1;
  vl_tensor *ti = vl_test_tensor(1, sz, VL_I32, x), *tf = vl_test_tensor(1, sz, VL_F32, x), *o = (vl_tensor *)(uintptr_t)0x1234;
  CHECK_ERR(vl_binary(VL_BIN_TANH_BACKWARD, tf, ti, 1.0, &o), VL_EDTYPE, "tanh_backward: expected float tensors");
  CHECK_ERR(vl_binary_scalar(VL_BIN_RELU_BACKWARD, tf, one, false, &o), VL_EINVAL, "relu_backward: expected two tensors");
  CHECK(o == (vl_tensor *)(uintptr_t)0x1234);
  CHECK_OK(vl_binary_(VL_BIN_SIGMOID_BACKWARD, tf, tf, 1.0)); /* in place into grad */
  REL(ti), REL(tf);
}

/* ---- autograd nodes: gradients reaching the leaves equal the raw backward / closed forms ---- */
static void test_autograd_nodes(void) {
  int64_t xs[4] = {3, 2, 2, 2}, cs[1] = {2};
  double x[24], r[24], w[2], b[2], rm[2], rv[2];
  fill_rand(x, 24, -2, 2);
  fill_rand(r, 24, -1, 1);
  fill_rand(w, 2, 0.5, 1.5);
  fill_rand(b, 2, -1, 1);
  fill_rand(rm, 2, -0.5, 0.5);
  fill_rand(rv, 2, 0.5, 1.5);
  for (int training = 1; training >= 0; training--) {
    vl_tensor *tx = vl_test_tensor(4, xs, VL_F64, x), *tr = vl_test_tensor(4, xs, VL_F64, r), *tw = vl_test_tensor(1, cs, VL_F64, w), *tb = vl_test_tensor(1, cs, VL_F64, b);
    vl_tensor *trm = vl_test_tensor(1, cs, VL_F64, rm), *trv = vl_test_tensor(1, cs, VL_F64, rv), *y = NULL;
    CHECK_OK(vl_set_requires_grad(tx, true));
    CHECK_OK(vl_set_requires_grad(tw, true));
    CHECK_OK(vl_set_requires_grad(tb, true));
    CHECK_OK(vl_ag_batch_norm(tx, tw, tb, trm, trv, training, 0.1, 1e-5, &y));
    CHECK(y && vl_grad_fn(y) != NULL);
    if (y) CHECK_OK(vl_backward(1, &y, &tr, false));
    if (training) {
      vl_tensor *y2 = NULL, *sm = NULL, *si = NULL, *dx = NULL, *dw = NULL, *db = NULL;
      vl_tensor *rx = vl_test_tensor(4, xs, VL_F64, x), *rw = vl_test_tensor(1, cs, VL_F64, w);
      CHECK_OK(vl_batch_norm(rx, rw, NULL, NULL, NULL, true, 0.1, 1e-5, &y2, &sm, &si));
      CHECK_OK(vl_batch_norm_backward(rx, tr, rw, sm, si, 1e-5, &dx, &dw, &db));
      double *a = vl_test_values(dx), *a2 = vl_test_values(dw), *a3 = vl_test_values(db);
      CHECK(vl_grad(tx) && tensor_close(vl_grad(tx), a, 1e-12, 1e-12));
      CHECK(vl_grad(tw) && tensor_close(vl_grad(tw), a2, 1e-12, 1e-12));
      CHECK(vl_grad(tb) && tensor_close(vl_grad(tb), a3, 1e-12, 1e-12));
      free(a), free(a2), free(a3);
      REL(y2), REL(sm), REL(si), REL(dx), REL(dw), REL(db), REL(rx), REL(rw);
    } else {
      /* eval: y = (x - rm) * is * w + b with constant statistics */
      double gx[24], gw[2] = {0, 0}, gb[2] = {0, 0};
      for (int i = 0; i < 24; i++) {
        int ci = (i / 4) % 2;
        double is = 1 / sqrt(rv[ci] + 1e-5);
        gx[i] = r[i] * w[ci] * is;
        gw[ci] += r[i] * (x[i] - rm[ci]) * is;
        gb[ci] += r[i];
      }
      CHECK(vl_grad(tx) && tensor_close(vl_grad(tx), gx, 1e-12, 1e-12));
      CHECK(vl_grad(tw) && tensor_close(vl_grad(tw), gw, 1e-12, 1e-12));
      CHECK(vl_grad(tb) && tensor_close(vl_grad(tb), gb, 1e-12, 1e-12));
    }
    REL(y), REL(tx), REL(tr), REL(tw), REL(tb), REL(trm), REL(trv);
  }
  /* layer norm */
  int64_t ls[2] = {4, 6}, ws[1] = {6};
  double lx[24], lw[6];
  fill_rand(lx, 24, -2, 2);
  fill_rand(lw, 6, 0.5, 1.5);
  vl_tensor *tx = vl_test_tensor(2, ls, VL_F64, lx), *tr = vl_test_tensor(2, ls, VL_F64, r), *tw = vl_test_tensor(1, ws, VL_F64, lw), *y = NULL;
  CHECK_OK(vl_set_requires_grad(tx, true));
  CHECK_OK(vl_set_requires_grad(tw, true));
  CHECK_OK(vl_ag_layer_norm(tx, 1, tw, NULL, 1e-5, &y));
  if (y) CHECK_OK(vl_backward(1, &y, &tr, false));
  vl_tensor *y2 = NULL, *m = NULL, *rs = NULL, *dx = NULL, *dw = NULL;
  CHECK_OK(vl_layer_norm(tx, 1, tw, NULL, 1e-5, &y2, &m, &rs));
  CHECK_OK(vl_layer_norm_backward(tx, tr, 1, tw, m, rs, &dx, &dw, NULL));
  double *a = vl_test_values(dx), *a2 = vl_test_values(dw);
  CHECK(vl_grad(tx) && tensor_close(vl_grad(tx), a, 1e-12, 1e-12));
  CHECK(vl_grad(tw) && tensor_close(vl_grad(tw), a2, 1e-12, 1e-12));
  free(a), free(a2);
  REL(y), REL(y2), REL(m), REL(rs), REL(dx), REL(dw), REL(tx), REL(tr), REL(tw);
}

/* ---- front-end errors ---- */
static void test_errors(void) {
  int64_t xs[4] = {2, 3, 4, 4}, c4[1] = {4}, c3[1] = {3}, x1[2] = {1, 3};
  double v[96];
  fill_rand(v, 96, -1, 1);
  vl_tensor *x = vl_test_tensor(4, xs, VL_F32, v), *w4 = vl_test_tensor(1, c4, VL_F32, v), *w3 = vl_test_tensor(1, c3, VL_F32, v);
  vl_tensor *xi = vl_test_tensor(4, xs, VL_I32, v), *one = vl_test_tensor(2, x1, VL_F32, v);
  vl_tensor *y = (vl_tensor *)(uintptr_t)0x1234;
  CHECK_ERR(vl_batch_norm(x, w4, NULL, NULL, NULL, true, 0.1, 1e-5, &y, NULL, NULL), VL_ESHAPE,
            "batch_norm: weight has shape 4 but the input's channels are 3");
  CHECK_ERR(vl_batch_norm(x, w3, NULL, NULL, NULL, false, 0.1, 1e-5, &y, NULL, NULL), VL_EINVAL,
            "running_mean and running_var are required in eval mode");
  CHECK_ERR(vl_batch_norm(x, NULL, NULL, w3, NULL, true, 0.1, 1e-5, &y, NULL, NULL), VL_EINVAL, "both be given");
  CHECK_ERR(vl_batch_norm(one, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &y, NULL, NULL), VL_EINVAL,
            "expected more than 1 value per channel when training");
  CHECK_ERR(vl_batch_norm(xi, NULL, NULL, NULL, NULL, true, 0.1, 1e-5, &y, NULL, NULL), VL_EDTYPE,
            "batch_norm: x must be a float tensor");
  CHECK_ERR(vl_batch_norm(x, NULL, NULL, NULL, NULL, true, 0.1, -1, &y, NULL, NULL), VL_EINVAL, "eps");
  CHECK_ERR(vl_layer_norm(x, 1, w3, NULL, 1e-5, &y, NULL, NULL), VL_ESHAPE,
            "layer_norm: weight has shape 3 but normalized_shape is 4");
  CHECK_ERR(vl_layer_norm(x, 5, NULL, NULL, 1e-5, &y, NULL, NULL), VL_ESHAPE, "normalized_shape has 5 dims but x has 4");
  CHECK_ERR(vl_softmax_backward(x, w4, 1, false, &y), VL_ESHAPE, "softmax_backward: y and dy must have the same shape");
  CHECK_ERR(vl_softmax_backward(x, x, 4, false, &y), VL_EINVAL, "dim");
  CHECK(y == (vl_tensor *)(uintptr_t)0x1234);
  REL(x), REL(w4), REL(w3), REL(xi), REL(one);
}

int main(void) {
  if (!vl_test_init()) return 1;
  uint64_t seed = vl_test_seed();
  test_batch_norm_forward();
  test_batch_norm_backward();
  test_layer_norm();
  test_softmax_backward();
  test_activation_backward();
  test_autograd_nodes();
  test_errors();
  vl_shutdown();
  if (vl_test_failed) printf("seed %llu (set V100_TEST_SEED to replay)\n", (unsigned long long)seed);
  return vl_test_finish();
}
