/* runtime/autograd/formula.c: the formula scope of backward rules (formula.h). */
#include "runtime/autograd/formula.h"

/* Whether the next op may run: no earlier failure, its inputs there (a NULL input after a
 * success would be a bug in the rule, reported rather than dereferenced). */
static bool ready(vl_fs *f, vl_tensor *a, vl_tensor *b, bool need_b) {
  if (f->s != VL_OK) return false;
  if (f->busy) f->nested = true; /* inside an F_RUN / F_DO call: reported when it ends */
  if (!a || (need_b && !b)) {
    f->s = vl_fail(VL_EINTERNAL, "backward formula: an operand is missing");
    return false;
  }
  return true;
}

/* Takes the result of one op, read through `out` once the op has run (C leaves the order of a
 * call's arguments open, so the result cannot be an argument beside the op's call): owned by the
 * scope, or the failure that sticks. */
static vl_tensor *keep(vl_fs *f, vl_status s, vl_tensor **out) {
  vl_tensor *t = *out;
  if (s != VL_OK) {
    if (f->s == VL_OK) f->s = s; /* the first failure sticks */
    return NULL;
  }
  if (f->s != VL_OK) { /* failed meanwhile (a nested op): this result is not wanted */
    vl_tensor_release(t);
    return NULL;
  }
  if (f->n == VL_FS_MAX) {
    vl_tensor_release(t);
    f->s = vl_fail(VL_EINTERNAL, "backward formula: more than %d temporaries", VL_FS_MAX);
    return NULL;
  }
  f->t[f->n++] = t;
  return t;
}

vl_tensor *vl_fs_unary(vl_fs *f, vl_unary_op op, vl_tensor *a) {
  vl_tensor *r = NULL;
  return ready(f, a, NULL, false) ? keep(f, vl_unary(op, a, &r), &r) : NULL;
}

vl_tensor *vl_fs_binary(vl_fs *f, vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha) {
  vl_tensor *r = NULL;
  return ready(f, a, b, true) ? keep(f, vl_binary(op, a, b, alpha, &r), &r) : NULL;
}

vl_tensor *vl_fs_scalar(vl_fs *f, vl_binary_op op, vl_tensor *a, double s) {
  vl_tensor *r = NULL;
  return ready(f, a, NULL, false) ? keep(f, vl_binary_scalar(op, a, s, false, &r), &r) : NULL;
}

vl_tensor *vl_fs_masked_fill(vl_fs *f, vl_tensor *a, vl_tensor *mask, double value) {
  vl_tensor *r = NULL;
  return ready(f, a, mask, true) ? keep(f, vl_masked_fill(a, mask, value, &r), &r) : NULL;
}

vl_tensor *vl_fs_to(vl_fs *f, vl_tensor *a, vl_dtype dt) {
  vl_tensor *r = NULL;
  return ready(f, a, NULL, false) ? keep(f, vl_to(a, dt, a->storage->device, &r), &r) : NULL;
}

vl_tensor *vl_fs_zeros_like(vl_fs *f, vl_tensor *a) {
  vl_tensor *r = NULL;
  return ready(f, a, NULL, false) ? keep(f, vl_zeros(a->ndim, a->size, a->dtype, a->storage->device, &r), &r) : NULL;
}

bool vl_fs_begin(vl_fs *f) {
  if (f->s != VL_OK) return false;
  if (f->busy) f->nested = true;
  f->busy++;
  f->out = NULL; /* the op leaves it untouched when it fails */
  return true;
}

/* The end of an F_RUN / F_DO call: nesting (an F_ op run while evaluating the call's arguments)
 * fails the scope even when everything worked, so that it never passes a test unnoticed. */
static vl_status end_call(vl_fs *f, vl_status s) {
  if (--f->busy == 0 && f->nested && s == VL_OK && f->s == VL_OK)
    s = vl_fail(VL_EINTERNAL, "backward formula: an F_ op inside an F_RUN / F_DO call (name its result first)");
  return s;
}

vl_tensor *vl_fs_adopt(vl_fs *f, vl_status s) {
  vl_tensor *t = f->out;
  f->out = NULL;
  s = end_call(f, s);
  if (s != VL_OK && t) { /* an op that worked, refused for nesting */
    vl_tensor_release(t);
    t = NULL;
  }
  return keep(f, s, &t);
}

bool vl_fs_done(vl_fs *f, vl_status s) {
  s = end_call(f, s);
  if (s != VL_OK && f->s == VL_OK) f->s = s;
  return f->s == VL_OK;
}

vl_tensor *vl_fs_keep(vl_fs *f, vl_tensor *t) {
  if (f->s != VL_OK || !t) return NULL;
  for (int i = f->n - 1; i >= 0; i--)
    if (f->t[i] == t) { /* the last temporary takes its place */
      f->t[i] = f->t[--f->n];
      f->t[f->n] = NULL;
      return t;
    }
  f->s = vl_fail(VL_EINTERNAL, "backward formula: vl_fs_keep of a tensor the scope does not own");
  return NULL;
}

static void release_all(vl_fs *f) {
  for (int i = 0; i < f->n; i++) vl_tensor_release(f->t[i]);
  f->n = 0;
}

vl_status vl_fs_close(vl_fs *f) {
  release_all(f);
  return f->s;
}

vl_status vl_fs_end(vl_fs *f, vl_tensor *r, vl_tensor **out) {
  if (f->s == VL_OK && !r) f->s = vl_fail(VL_EINTERNAL, "backward formula: no result to hand out");
  if (f->s == VL_OK) *out = vl_tensor_retain(r);
  release_all(f);
  return f->s;
}

vl_status vl_fs_give(vl_fs *f, vl_node *n, int k, vl_tensor **r, vl_tensor **grads_in) {
  vl_tensor *g[8] = {0};
  if (k > 8 && f->s == VL_OK) f->s = vl_fail(VL_EINTERNAL, "backward formula: %d gradients", k);
  /* vl_ag_give_n consumes one reference of each: the scope's own are released below */
  for (int i = 0; i < k && i < 8 && f->s == VL_OK; i++) g[i] = r[i] ? vl_tensor_retain(r[i]) : NULL;
  vl_status s = vl_ag_give_n(n, f->s, k < 8 ? k : 8, g, grads_in);
  release_all(f);
  return s;
}
