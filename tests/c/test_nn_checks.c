/* tests/c/test_nn_checks.c: the layer argument checks of runtime/nn/checks.c (the layers that Lua
 * composes from tensor ops), the named index ops, the layer-norm shape check and the cuDNN
 * benchmark setter: each error names the layer and the operands, and valid arguments pass. */
#include <math.h>
#include <string.h>

#include "runtime/autograd/layout.h"
#include "runtime/core/context.h"
#include "runtime/core/layout.h"
#include "runtime/autograd/ops.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"
#include "vl_test.h"

#define REL(t) vl_tensor_release(t)

static vl_tensor *zeros(int ndim, const int64_t *size, vl_dtype dt) {
  vl_tensor *t = NULL;
  if (vl_full(ndim, size, 0.0, dt, vl_cpu_device(), &t) != VL_OK) return NULL;
  return t;
}

static vl_tensor *ids(int n, const double *v, vl_dtype dt) {
  int64_t size[1] = {n};
  return vl_test_tensor(1, size, dt, v);
}

static void test_prob_and_ndim(void) {
  CHECK_OK(vl_nn_check_prob("dropout", "p", 0.0));
  CHECK_OK(vl_nn_check_prob("dropout", "p", 1.0));
  /* NaN compares false with everything: it must not slip through as in [0, 1] */
  CHECK_ERR(vl_nn_check_prob("dropout", "p", NAN), VL_EINVAL, "dropout: p must be in [0, 1], got nan");
  CHECK_ERR(vl_nn_check_prob("dropout", "p", -0.5), VL_EINVAL, "dropout: p must be in [0, 1], got -0.5");
  CHECK_ERR(vl_nn_check_prob("cross_entropy", "smoothing", 1.5), VL_EINVAL, "cross_entropy: smoothing must be in");
  int64_t s2[2] = {2, 3}, s4[4] = {1, 2, 3, 3};
  vl_tensor *a = zeros(2, s2, VL_F32), *b = zeros(4, s4, VL_F32);
  CHECK_OK(vl_nn_check_ndim("BatchNorm2d", b, 1u << 4));
  CHECK_ERR(vl_nn_check_ndim("BatchNorm2d", a, 1u << 4), VL_ESHAPE,
            "BatchNorm2d: expected a 4-D input, got 2x3 f32 cpu");
  CHECK_ERR(vl_nn_check_ndim("BatchNorm1d", b, (1u << 2) | (1u << 3)), VL_ESHAPE,
            "BatchNorm1d: expected a 2-D or 3-D input, got 1x2x3x3 f32 cpu");
  int lo = -1, hi = -1;
  CHECK_OK(vl_flatten_dims("Flatten", b, 1, -1, &lo, &hi));
  CHECK(lo == 1 && hi == 3);
  CHECK_ERR(vl_flatten_dims("Flatten", a, 2, -1, &lo, &hi), VL_ESHAPE, "Flatten: dims 3..-1 out of range for 2x3");
  CHECK(lo == 1 && hi == 3, "outputs untouched on failure");
  REL(a);
  REL(b);
}

static void test_linear(void) {
  int64_t sx[2] = {2, 3}, sw[2] = {4, 3}, sb[1] = {4}, sbad[1] = {3}, sw3[3] = {4, 3, 1};
  vl_tensor *x = zeros(2, sx, VL_F32), *w = zeros(2, sw, VL_F32), *b = zeros(1, sb, VL_F32);
  vl_tensor *bad = zeros(1, sbad, VL_F32), *w3 = zeros(3, sw3, VL_F32), *wt = NULL;
  vl_tensor *xi = zeros(2, sx, VL_I32);
  CHECK_OK(vl_linear_check(x, w, b));
  CHECK_OK(vl_linear_check(x, w, NULL));
  CHECK_ERR(vl_linear_check(x, w3, NULL), VL_ESHAPE, "linear: weight must be 2-D (out x in), got 4x3x1 f32 cpu");
  CHECK_ERR(vl_linear_check(x, w, bad), VL_ESHAPE, "linear: bias must have 4 elements (weight 4x3 f32 cpu), got 3");
  CHECK_OK(vl_transpose(w, 0, 1, &wt));
  CHECK_ERR(vl_linear_check(x, wt, NULL), VL_ESHAPE,
            "linear: input has 3 features but weight expects 4 (input 2x3 f32 cpu, weight 3x4 f32 cpu)");
  CHECK_ERR(vl_linear_check(xi, w, NULL), VL_EDTYPE, "linear: input, weight and bias must be float tensors");
  REL(x);
  REL(w);
  REL(b);
  REL(bad);
  REL(w3);
  REL(wt);
  REL(xi);
}

/* x[i, ids[i]] through the loss's gather (functional.lua's nll_terms), its result dropped. */
static vl_status gather_ids(const char *op, vl_tensor *x, vl_tensor *ids) {
  vl_tensor *col = NULL, *r = NULL;
  vl_status s = vl_unsqueeze(ids, 1, &col);
  if (s == VL_OK) s = vl_ag_gather_as(op, x, 1, col, &r);
  vl_tensor_release(col);
  vl_tensor_release(r);
  return s;
}

static void test_class_ids(void) {
  int64_t sx[2] = {2, 3};
  vl_tensor *x = zeros(2, sx, VL_F32);
  const double good[2] = {0, 2}, over[2] = {0, 3}, neg[2] = {-1, 1};
  vl_tensor *tg = ids(2, good, VL_I64), *to = ids(2, over, VL_I64), *tn = ids(2, neg, VL_I32);
  vl_tensor *tf = ids(2, good, VL_F32), *t3 = ids(3, (const double[3]){0, 1, 2}, VL_I64);
  CHECK_OK(vl_class_target_check("cross_entropy", x, tg, false));
  /* The loss's own gather checks the ids, under the loss's name (not "gather: ..."). */
  CHECK_OK(gather_ids("cross_entropy", x, tg));
  CHECK_ERR(gather_ids("cross_entropy", x, to), VL_EINVAL,
            "cross_entropy: index 3 is out of bounds for dim 2 with size 3");
  CHECK_ERR(gather_ids("nll_loss", x, tn), VL_EINVAL, "nll_loss: index -1 is out of bounds");
  CHECK_ERR(vl_class_target_check("nll_loss", x, tf, false), VL_EDTYPE,
            "nll_loss: target must hold class ids (i64 or i32) (input 2x3 f32 cpu, target 2 f32 cpu)");
  CHECK_ERR(vl_class_target_check("cross_entropy", x, tf, true), VL_ESHAPE,
            "cross_entropy: probability targets must have the input shape");
  CHECK_OK(vl_class_target_check("cross_entropy", x, x, true));
  CHECK_ERR(vl_class_target_check("cross_entropy", x, t3, true), VL_ESHAPE,
            "cross_entropy: target shape does not match the input without its class dim (input 2x3 f32 cpu, "
            "target 3 i64 cpu)");
  CHECK_ERR(vl_same_shape_check("mse_loss", x, tf), VL_ESHAPE,
            "mse_loss: input and target shapes differ (input 2x3 f32 cpu, target 2 f32 cpu)");
  /* the plain index ops keep their own names */
  vl_tensor *r = NULL, *col = NULL;
  int64_t sc[2] = {2, 1};
  CHECK_OK(vl_reshape(to, 2, sc, &col));
  CHECK_ERR(vl_gather(x, 1, col, &r), VL_EINVAL, "gather: index 3 is out of bounds for dim 2 with size 3");
  CHECK_ERR(vl_gather_as("my_loss", x, 1, col, &r), VL_EINVAL, "my_loss: index 3 is out of bounds");
  CHECK_ERR(vl_index_select_as("my_layer", x, 1, to, &r), VL_EINVAL, "my_layer: index 3 is out of bounds");
  CHECK(r == NULL, "output untouched on failure");
  REL(x);
  REL(tg);
  REL(to);
  REL(tn);
  REL(tf);
  REL(t3);
  REL(col);
}

static void test_embedding(void) {
  int64_t sw[2] = {5, 2};
  vl_tensor *w = zeros(2, sw, VL_F32);
  const double good[3] = {0, 4, 2}, over[3] = {0, 5, 1};
  vl_tensor *tg = ids(3, good, VL_I32), *to = ids(3, over, VL_I64), *tf = ids(3, good, VL_F32);
  CHECK_OK(vl_embedding_check(tg, w));
  CHECK_OK(vl_embedding_check(to, w)); /* the ids' range is the gather's to check, below */
  vl_tensor *r = NULL;
  CHECK_OK(vl_ag_index_select_as("embedding", w, 0, tg, &r));
  REL(r);
  r = NULL;
  CHECK_ERR(vl_ag_index_select_as("embedding", w, 0, to, &r), VL_EINVAL,
            "embedding: index 5 is out of bounds for dim 1 with size 5");
  CHECK(r == NULL, "no result on failure");
  CHECK_ERR(vl_embedding_check(tf, w), VL_EDTYPE, "embedding: ids must be i64 or i32, got 3 f32 cpu");
  CHECK_ERR(vl_embedding_check(tg, tg), VL_ESHAPE, "embedding: weight must be 2-D (num x dim)");
  int64_t pad = -7;
  CHECK_OK(vl_embedding_padding_idx("Embedding", 5, -1, &pad));
  CHECK(pad == 4, "negative from the end");
  CHECK_ERR(vl_embedding_padding_idx("Embedding", 5, 5, &pad), VL_EINVAL, "Embedding: padding_idx 5 out of range for 5 rows");
  CHECK(pad == 4, "untouched on failure");
  REL(w);
  REL(tg);
  REL(to);
  REL(tf);
}

static void test_sdpa_and_layer_norm(void) {
  int64_t sq[3] = {2, 3, 4}, sk[3] = {2, 5, 4}, sv[3] = {2, 6, 4}, sm[2] = {3, 5};
  vl_tensor *q = zeros(3, sq, VL_F32), *k = zeros(3, sk, VL_F32), *v = zeros(3, sv, VL_F32);
  vl_tensor *mb = zeros(2, sm, VL_BOOL), *mi = zeros(2, sm, VL_I32);
  CHECK_OK(vl_sdpa_check(q, k, k, mb));
  CHECK_OK(vl_sdpa_check(q, k, k, NULL));
  CHECK_ERR(vl_sdpa_check(q, k, v, NULL), VL_ESHAPE,
            "scaled_dot_product_attention: q must be ... x L x E, k ... x S x E and v ... x S x Ev (q 2x3x4 f32 cpu");
  CHECK_ERR(vl_sdpa_check(q, k, k, mi), VL_EDTYPE, "scaled_dot_product_attention: mask must be bool or floating");
  const int64_t ns_ok[1] = {4}, ns_bad[2] = {2, 4};
  CHECK_OK(vl_layer_norm_shape_check("layer_norm", q, 1, ns_ok));
  CHECK_ERR(vl_layer_norm_shape_check("layer_norm", q, 2, ns_bad), VL_ESHAPE,
            "layer_norm: normalized_shape 2x4 does not match the last dims of x (x 2x3x4 f32 cpu)");
  CHECK_ERR(vl_layer_norm_shape_check("layer_norm", q, 0, ns_ok), VL_ESHAPE, "normalized_shape {} does not match");
  REL(q);
  REL(k);
  REL(v);
  REL(mb);
  REL(mi);
}

static void test_settings_and_layout(void) {
  CHECK(!vl_cudnn_benchmark(), "cudnn benchmark defaults to off");
  vl_set_cudnn_benchmark(true);
  CHECK(vl_cudnn_benchmark() && vl_ctx()->cudnn_benchmark);
  vl_set_cudnn_benchmark(false);
  CHECK(!vl_cudnn_benchmark());
  CHECK(!vl_deterministic(), "deterministic mode defaults to off");
  vl_set_deterministic(true);
  CHECK(vl_deterministic() && vl_ctx()->deterministic);
  vl_set_deterministic(false);
  CHECK(!vl_deterministic());
  /* Without grad: the raw conversion (the recorded path is tested in tests/lua/test_nn_conv.lua). */
  int64_t s[4] = {2, 3, 2, 2};
  double vals[24];
  for (int i = 0; i < 24; i++) vals[i] = 0.25 * i - 1;
  vl_tensor *x = vl_test_tensor(4, s, VL_F64, vals), *y = NULL, *y2 = NULL;
  CHECK_OK(vl_ag_to_channels_last(x, &y));
  CHECK(y && vl_is_channels_last(y));
  if (y) {
    double *yv = vl_test_values(y);
    CHECK(memcmp(yv, vals, sizeof vals) == 0, "same values in the logical order");
    free(yv);
    CHECK_OK(vl_ag_to_channels_last(y, &y2));
    CHECK(y2 == y, "already channels-last: the tensor itself");
  }
  int64_t s3[3] = {2, 3, 4};
  vl_tensor *z = zeros(3, s3, VL_F32), *zz = NULL;
  CHECK_ERR(vl_ag_to_channels_last(z, &zz), VL_ESHAPE, "to_channels_last: expected a 4-D");
  CHECK(zz == NULL);
  REL(x);
  REL(y);
  REL(y2);
  REL(z);
}

int main(void) {
  if (!vl_test_init()) return 1;
  test_prob_and_ndim();
  test_linear();
  test_class_ids();
  test_embedding();
  test_sdpa_and_layer_norm();
  test_settings_and_layout();
  vl_shutdown();
  return vl_test_finish();
}
