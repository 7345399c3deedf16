/* tests/c/test_autograd.c: the recording API (vl_ag_record, runtime/autograd/autograd.h) from C:
 * a custom op with a typed context, who owns the context, saved-tensor slots and versions, view
 * marking, history rebased by an in-place op, multi-output nodes, and the nesting limit of a
 * backward run from a hook. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "runtime/autograd/autograd.h"
#include "runtime/autograd/ops.h"
#include "runtime/core/context.h"
#include "runtime/core/tensor.h"
#include "runtime/ops/ops.h"
#include "vl_test.h"

#define CPU vl_cpu_device()
#define REL(t) vl_tensor_release(t)

/* ---- a custom op: y = k x, with k in a typed context ---- */

typedef struct scale_ctx {
  double k;
  int *frees; /* counts ctx_free calls */
} scale_ctx;

static void scale_ctx_free(void *ud) { (*((scale_ctx *)ud)->frees)++; }

static vl_status scale_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *r;
  VL_TRY(vl_binary_scalar(VL_BIN_MUL, go[0], VL_AG_CTX(n, scale_ctx)->k, false, &r));
  return vl_ag_give(n, 0, r, gi);
}

static vl_status scale(vl_tensor *x, double k, int *frees, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_binary_scalar(VL_BIN_MUL, x, k, false, &r));
  scale_ctx c = {k, frees};
  return vl_ag_out(VL_AG_RECORD(.name = "ScaleBackward", .backward = scale_bw, .nin = 1, .in = &x, .out = &r,
                                .save = {x}, VL_AG_CTX_OF(c), .ctx_free = scale_ctx_free),
                   r, out);
}

static vl_tensor *leaf3(const double *v) {
  int64_t n = 3;
  vl_tensor *x = vl_test_tensor(1, &n, VL_F64, v);
  if (x) vl_set_requires_grad(x, true);
  return x;
}

static bool values_are(vl_tensor *t, const double *ref, int64_t n) {
  if (!t || vl_tensor_numel(t) != n) return false;
  double *v = vl_test_values(t);
  bool ok = true;
  for (int64_t i = 0; i < n; i++) ok = ok && fabs(v[i] - ref[i]) < 1e-12;
  free(v);
  return ok;
}

static void test_typed_ctx(void) {
  int64_t live = vl_autograd_live_nodes();
  const double xv[3] = {1, -2, 3}, want[3] = {2.5, 2.5, 2.5};
  vl_tensor *x = leaf3(xv), *y = NULL, *s = NULL;
  int frees = 0;
  CHECK_OK(scale(x, 2.5, &frees, &y));
  CHECK(y && vl_grad_fn(y) && strcmp(vl_grad_fn(y)->name, "ScaleBackward") == 0);
  CHECK(VL_AG_CTX(vl_grad_fn(y), scale_ctx)->k == 2.5, "the context is copied into the node");
  CHECK(frees == 0);
  CHECK_OK(vl_ag_reduce(VL_RED_SUM, y, 0, NULL, false, 0, &s, NULL));
  CHECK_OK(vl_backward(1, &s, NULL, false));
  CHECK(values_are(vl_grad(x), want, 3), "d(sum 2.5 x)/dx = 2.5");
  REL(s);
  REL(y);
  CHECK(frees == 1, "ctx_free runs once, when the node dies (%d)", frees);
  CHECK(vl_autograd_live_nodes() == live, "no node outlives its outputs");
  REL(x);
}

static void test_not_recorded(void) {
  const double xv[3] = {1, 2, 3};
  int64_t n = 3;
  vl_tensor *x = leaf3(xv), *c = vl_test_tensor(1, &n, VL_F64, xv), *y = NULL;
  int frees = 0;
  vl_set_grad_enabled(false);
  CHECK_OK(scale(x, 2, &frees, &y));
  vl_set_grad_enabled(true);
  CHECK(y && !vl_grad_fn(y) && !vl_requires_grad(y), "grad mode off: nothing recorded");
  CHECK(frees == 1, "the context's resources are released when nothing is recorded (%d)", frees);
  REL(y);
  y = NULL;
  CHECK_OK(scale(c, 2, &frees, &y));
  CHECK(y && !vl_grad_fn(y), "no input requires grad: nothing recorded");
  CHECK(frees == 2);
  REL(y);
  /* Only floating-point outputs join the graph: one node, two outputs, the i64 one left out. */
  vl_tensor *f = NULL, *i = NULL;
  CHECK_OK(vl_clone(x, &f));
  CHECK_OK(vl_to(x, VL_I64, CPU, &i));
  vl_tensor *outs[2] = {f, i};
  CHECK_OK(VL_AG_RECORD(.name = "TwoBackward", .nin = 1, .in = &x, .nout = 2, .out = outs));
  CHECK(vl_grad_fn(f) && strcmp(vl_grad_fn(f)->name, "TwoBackward") == 0 && vl_grad_fn(f)->nout == 2);
  CHECK(!vl_grad_fn(i) && !vl_requires_grad(i), "an integer output stays out of the graph");
  REL(f);
  REL(i);
  REL(c);
  REL(x);
}

static void test_saved_slots(void) {
  const double xv[3] = {1, 2, 3};
  vl_tensor *x = leaf3(xv), *y = NULL, *t = (vl_tensor *)(uintptr_t)1;
  CHECK_OK(vl_clone(x, &y));
  CHECK_OK(VL_AG_RECORD(.name = "SlotsBackward", .nin = 1, .in = &x, .out = &y, .save = {NULL, x, NULL, y}));
  vl_node *n = vl_grad_fn(y);
  CHECK(n && n->nsaved == 4, "slots up to the last tensor given");
  CHECK_OK(vl_node_saved(n, 0, &t));
  CHECK(t == NULL, "an empty slot reads as NULL");
  CHECK_OK(vl_node_saved(n, 1, &t));
  CHECK(t && t != x && t->storage == x->storage && !t->autograd, "a saved tensor is an alias without history");
  CHECK_OK(vl_node_saved(n, 6, &t));
  CHECK(t == NULL, "a slot past the last one given is empty too");
  CHECK_ERR(vl_node_saved(n, VL_NODE_MAX_SAVED, &t), VL_EINTERNAL, "no saved tensor");
  vl_tensor *sv[4];
  CHECK_OK(vl_node_saved_n(n, 4, sv));
  CHECK(sv[0] == NULL && sv[1] && sv[2] == NULL && sv[3] && sv[3]->storage == y->storage);
  /* A raw in-place write bumps the version: reading the slot names the node and both versions. */
  CHECK_OK(vl_fill_(x, 7));
  CHECK_ERR(vl_node_saved(n, 1, &t), VL_EINVAL, "SlotsBackward: a tensor saved for backward was modified in place");
  CHECK_ERR(vl_node_saved_n(n, 4, sv), VL_EINVAL, "modified in place");
  REL(y);
  REL(x);
}

static void test_view_flag(void) {
  const double xv[3] = {1, 2, 3};
  int64_t n = 3;
  vl_tensor *x = leaf3(xv), *v = NULL, *c = NULL;
  CHECK_OK(vl_view(x, 1, &n, &v));
  CHECK_OK(VL_AG_RECORD(.name = "MyViewBackward", .nin = 1, .in = &x, .out = &v, .view = true));
  CHECK_ERR(vl_ag_check_inplace("add_", v, true), VL_EUNSUPPORTED, "add_: in-place operations on a view");
  CHECK_OK(vl_clone(x, &c));
  CHECK_OK(VL_AG_RECORD(.name = "MyCloneBackward", .nin = 1, .in = &x, .out = &c, .view = true));
  CHECK_OK(vl_ag_check_inplace("add_", c, true)); /* own storage: not a view */
  REL(c);
  REL(v);
  REL(x);
}

/* An in-place op records onto its operand: the history is rebased and a retained grad moves with it. */
static void test_rebase(void) {
  const double xv[3] = {1, 2, 3}, ones[3] = {1, 1, 1}, minus[3] = {-1, -1, -1};
  vl_tensor *x = leaf3(xv), *a = NULL, *s = NULL;
  CHECK_OK(vl_ag_binary_scalar(VL_BIN_MUL, x, 1.0, false, &a));
  CHECK_OK(vl_retain_grad(a));
  vl_node *before = vl_grad_fn(a);
  CHECK_OK(vl_ag_unary_(VL_UN_NEG, a));
  CHECK(vl_grad_fn(a) && vl_grad_fn(a) != before && strcmp(vl_grad_fn(a)->name, "NegBackward") == 0);
  CHECK_OK(vl_ag_reduce(VL_RED_SUM, a, 0, NULL, false, 0, &s, NULL));
  CHECK_OK(vl_backward(1, &s, NULL, false));
  CHECK(values_are(vl_grad(a), ones, 3), "the retained grad is the gradient w.r.t. the new value");
  CHECK(values_are(vl_grad(x), minus, 3));
  REL(s);
  REL(a);
  REL(x);
}

/* ---- backward inside backward ---- */

static int hook_calls;

static vl_status reenter_hook(void *ud, vl_tensor *grad, vl_tensor **replace) {
  (void)grad;
  (void)replace;
  hook_calls++;
  vl_tensor *root = (vl_tensor *)ud;
  return vl_backward(1, &root, NULL, true);
}

static int count(const char *s, const char *sub) {
  int k = 0;
  for (const char *p = strstr(s, sub); p; p = strstr(p + 1, sub)) k++;
  return k;
}

static void test_nested_backward(void) {
  const double xv[3] = {1, 2, 3}, want[3] = {2, 4, 6};
  vl_tensor *x = leaf3(xv), *sq = NULL, *s = NULL;
  CHECK_OK(vl_ag_binary(VL_BIN_MUL, x, x, 1.0, &sq));
  CHECK_OK(vl_ag_reduce(VL_RED_SUM, sq, 0, NULL, false, 0, &s, NULL));
  int id = 0;
  CHECK_OK(vl_register_hook(x, reenter_hook, s, NULL, &id));
  CHECK_ERR(vl_backward(1, &s, NULL, true), VL_EINVAL, "backward: nested 32 levels deep in backward");
  CHECK(hook_calls == 32, "the hook ran once per level (%d)", hook_calls);
  CHECK(count(vl_errmsg(), "AccumulateGrad hook: ") == 1, "the prefix appears once: %s", vl_errmsg());
  CHECK(strncmp(vl_errmsg(), "AccumulateGrad hook: backward: nested", 37) == 0, "%s", vl_errmsg());
  /* The depth is back to 0: an ordinary backward works afterwards. */
  CHECK(vl_ctx()->autograd->backward_depth == 0);
  CHECK_OK(vl_remove_hook(x, id));
  CHECK_OK(vl_set_grad(x, NULL));
  CHECK_OK(vl_backward(1, &s, NULL, false));
  CHECK(values_are(vl_grad(x), want, 3));
  REL(s);
  REL(sq);
  REL(x);
}

int main(void) {
  if (!vl_test_init()) return 1;
  int64_t live = vl_autograd_live_nodes();
  test_typed_ctx();
  test_not_recorded();
  test_saved_slots();
  test_view_flag();
  test_rebase();
  test_nested_backward();
  CHECK(vl_autograd_live_nodes() == live, "every graph was freed (%lld left)",
        (long long)(vl_autograd_live_nodes() - live));
  vl_shutdown();
  return vl_test_finish();
}
