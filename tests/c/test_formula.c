/* tests/c/test_formula.c: the formula scope of backward rules (runtime/autograd/formula.h): F_RUN /
 * F_DO run any raw op and own its result, the first failure sticks and later calls do not run,
 * nesting inside an F_RUN call is refused, more temporaries than VL_FS_MAX fail cleanly, and
 * vl_fs_end / vl_fs_keep hand a result out. References are counted on the input's storage: every
 * view of it holds one, so a leaked temporary shows. */
#include <stdint.h>

#include "runtime/autograd/formula.h"
#include "vl_test.h"

static int calls; /* how many times counted_view ran */

static vl_status counted_view(vl_tensor *t, vl_tensor **out) {
  calls++;
  int64_t n = vl_tensor_numel(t);
  return vl_reshape(t, 1, &n, out);
}

static vl_status failing(vl_tensor *t, vl_tensor **out) {
  (void)t;
  (void)out;
  return vl_fail(VL_ESHAPE, "failing: on purpose");
}

static void test_run_and_stick(vl_tensor *x) {
  int refs = x->storage->refcount;
  VL_FS(f);
  vl_tensor *a = F_RUN(vl_transpose(x, 0, 1, F_OUT));
  vl_tensor *b = F_RUN(counted_view(x, F_OUT));
  CHECK(a && b && a->size[0] == 3 && b->ndim == 1, "F_RUN ran both ops");
  CHECK(x->storage->refcount == refs + 2, "the scope owns its results");
  CHECK(F_DO(vl_fill_(b, 2.0)), "F_DO ran");
  vl_tensor *c = F_RUN(failing(a, F_OUT));
  CHECK(!c && f->s == VL_ESHAPE, "a failure is NULL and sticks");
  calls = 0;
  vl_tensor *d = F_RUN(counted_view(a, F_OUT));
  CHECK(!d && calls == 0, "after a failure the op does not run");
  CHECK(!F_DO(vl_fill_(a, 1.0)) && !F_MUL(a, b), "nor F_DO nor the F_ ops");
  vl_tensor *out = NULL;
  CHECK_ERR(vl_fs_end(f, a, &out), VL_ESHAPE, "failing: on purpose");
  CHECK(!out, "out untouched on failure");
  CHECK(x->storage->refcount == refs, "the scope released its temporaries");
}

static void test_end_and_keep(vl_tensor *x) {
  int refs = x->storage->refcount;
  vl_tensor *out = NULL, *kept;
  {
    VL_FS(f);
    vl_tensor *a = F_RUN(vl_transpose(x, 0, 1, F_OUT));
    kept = vl_fs_keep(f, F_RUN(counted_view(x, F_OUT)));
    CHECK_OK(vl_fs_end(f, a, &out));
  }
  CHECK(out && kept && out->size[0] == 3 && kept->ndim == 1, "vl_fs_end and vl_fs_keep hand results out");
  CHECK(x->storage->refcount == refs + 2, "only the handed-out results remain");
  vl_tensor_release(out);
  vl_tensor_release(kept);
  CHECK(x->storage->refcount == refs, "no leak");
  VL_FS(f);
  CHECK(!vl_fs_keep(f, x), "keep of a tensor the scope does not own fails");
  CHECK_ERR(vl_fs_end(f, x, &out), VL_EINTERNAL, "does not own");
}

static void test_nesting_refused(vl_tensor *x) {
  int refs = x->storage->refcount;
  VL_FS(f);
  /* wrong on purpose: the F_ op inside the call runs after F_RUN's check */
  vl_tensor *r = F_RUN(counted_view(F_MULS(x, 2.0), F_OUT));
  CHECK(!r, "a nested F_ op fails the call even when it worked");
  vl_tensor *out = NULL;
  CHECK_ERR(vl_fs_end(f, r, &out), VL_EINTERNAL, "inside an F_RUN");
  CHECK(x->storage->refcount == refs, "no leak");
}

static void test_too_many(vl_tensor *x) {
  int refs = x->storage->refcount;
  VL_FS(f);
  vl_tensor *last = NULL;
  for (int i = 0; i < VL_FS_MAX + 3; i++) last = F_RUN(vl_transpose(x, 0, 1, F_OUT));
  CHECK(!last, "temporaries beyond VL_FS_MAX fail");
  vl_tensor *out = NULL;
  CHECK_ERR(vl_fs_end(f, last, &out), VL_EINTERNAL, "temporaries");
  CHECK(x->storage->refcount == refs, "the extra result was released too");
}

int main(void) {
  if (!vl_test_init()) return 1;
  int64_t sz[2] = {2, 3};
  vl_tensor *x = NULL;
  CHECK_OK(vl_zeros(2, sz, VL_F32, vl_cpu_device(), &x));
  if (!x) return vl_test_finish();
  test_run_and_stick(x);
  test_end_and_keep(x);
  test_nesting_refused(x);
  test_too_many(x);
  vl_tensor_release(x);
  vl_shutdown();
  return vl_test_finish();
}
