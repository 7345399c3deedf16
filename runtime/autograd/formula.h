/* runtime/autograd/formula.h: a formula scope for backward rules, so that a rule reads like its
 * formula and keeps the error behaviour of the step-by-step form:
 *
 *   VL_FS(f);                                           // the scope f (a vl_fs *)
 *   vl_tensor *r = F_DIV(g, F_ADDS(x, 1.0));            // d log1p(x) = g / (1 + x)
 *   return vl_fs_give(f, n, 1, &r, gi);
 *
 * Every F_ op runs a raw op (runtime/ops: nothing is recorded) and returns a new tensor owned by
 * the scope, or NULL: after the first failure the status sticks and every later op returns NULL
 * without running, so a chain needs no status checks. vl_fs_give hands the chosen results to
 * vl_ag_give_n (a result may also be an input such as the incoming gradient) and releases every
 * temporary of the scope, on failure too. The F_ macros use the scope named `f`; a helper of a
 * rule takes the rule's scope as its parameter `vl_fs *f`.
 *
 * Any other raw op (runtime/ops, runtime/core, runtime/nn: vl_status vl_xxx(..., vl_tensor **out))
 * runs through F_RUN, its output parameter written F_OUT; an op without a result (in-place) runs
 * through F_DO:
 *
 *   vl_tensor *k = F_RUN(vl_reshape(g, r->ndim, r->ksize, F_OUT));  // owned by the scope
 *   F_DO(vl_scatter_add_(z, dim, idx, k));                          // true when it ran and worked
 *
 * After a failure the call is not made (nor its arguments evaluated), so its tensor arguments
 * must be in hand before it: inputs or named results of earlier F_ ops, never an F_ op written
 * inside the call (C evaluates that after the check, and a failure would hand the op a NULL).
 * Such nesting fails every time with VL_EINTERNAL, so the first test of the rule catches it.
 *
 * A helper that makes one tensor with a scope of its own ends it with vl_fs_end, which hands the
 * result out; vl_fs_keep takes one temporary out of a scope early. More temporaries than
 * VL_FS_MAX fail the rule with VL_EINTERNAL ("backward formula: more than N temporaries"), the
 * extra result released: never an overflow. */
#ifndef VL_AUTOGRAD_FORMULA_H
#define VL_AUTOGRAD_FORMULA_H

#include <stdbool.h>

#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VL_FS_MAX 24 /* temporaries of one scope: the longest rule (prod) needs 15 */
typedef struct vl_fs {
  vl_status s;
  int n;
  int busy;       /* F_RUN / F_DO calls under way: an F_ op meanwhile is nested */
  bool nested;    /* an F_ op ran inside an F_RUN / F_DO call (a bug of the rule: see above) */
  vl_tensor *out; /* the result of the F_RUN op under way, written through F_OUT */
  vl_tensor *t[VL_FS_MAX];
} vl_fs;
#define VL_FS_INIT {VL_OK, 0, 0, false, NULL, {0}}
/* Declares the scope `name` (a vl_fs *) of a rule. */
#define VL_FS(name) \
  vl_fs name##_scope = VL_FS_INIT; \
  vl_fs *const name = &name##_scope

vl_tensor *vl_fs_unary(vl_fs *f, vl_unary_op op, vl_tensor *a);
vl_tensor *vl_fs_binary(vl_fs *f, vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha);
vl_tensor *vl_fs_scalar(vl_fs *f, vl_binary_op op, vl_tensor *a, double s); /* a op s */
vl_tensor *vl_fs_masked_fill(vl_fs *f, vl_tensor *a, vl_tensor *mask, double value);
vl_tensor *vl_fs_to(vl_fs *f, vl_tensor *a, vl_dtype dt);
vl_tensor *vl_fs_zeros_like(vl_fs *f, vl_tensor *a);
/* The end of a rule: gives r[0..k) (NULL: no gradient) for inputs 0..k-1 when every op worked
 * (vl_ag_give_n), releases the scope, returns the first failure or the give's status. */
vl_status vl_fs_give(vl_fs *f, vl_node *n, int k, vl_tensor **r, vl_tensor **grads_in);
/* The end of a scope that makes one tensor: *out = r (a new reference; r may be a temporary or
 * an input) when every op worked, else out untouched; releases the scope, returns its status. */
vl_status vl_fs_end(vl_fs *f, vl_tensor *r, vl_tensor **out);
/* The end of a scope that hands nothing out (in-place work): releases it, returns its status. */
vl_status vl_fs_close(vl_fs *f);
/* Takes temporary t out of the scope: the caller owns it (NULL when the scope failed). */
vl_tensor *vl_fs_keep(vl_fs *f, vl_tensor *t);

/* F_RUN / F_DO's halves: whether the call may run (no failure yet), and what it returned. The raw
 * op is the second operand of ?:, so it runs only when vl_fs_begin allows it, and its result is
 * read (by vl_fs_adopt, through f->out) only after it has run. */
bool vl_fs_begin(vl_fs *f);
vl_tensor *vl_fs_adopt(vl_fs *f, vl_status s);
bool vl_fs_done(vl_fs *f, vl_status s);
#define F_RUN(call) (vl_fs_begin(f) ? vl_fs_adopt(f, (call)) : NULL)
#define F_DO(call) (vl_fs_begin(f) ? vl_fs_done(f, (call)) : false)
#define F_OUT (&f->out)

#define F_UN(OP, a) vl_fs_unary(f, VL_UN_##OP, a)
#define F_NEG(a) F_UN(NEG, a)
#define F_ADD(a, b) vl_fs_binary(f, VL_BIN_ADD, a, b, 1.0)
#define F_SUB(a, b) vl_fs_binary(f, VL_BIN_SUB, a, b, 1.0)
#define F_MUL(a, b) vl_fs_binary(f, VL_BIN_MUL, a, b, 1.0)
#define F_DIV(a, b) vl_fs_binary(f, VL_BIN_DIV, a, b, 1.0)
#define F_POW(a, b) vl_fs_binary(f, VL_BIN_POW, a, b, 1.0)
#define F_BIN(OP, a, b) vl_fs_binary(f, VL_BIN_##OP, a, b, 1.0)
#define F_ADDS(a, s) vl_fs_scalar(f, VL_BIN_ADD, a, s)
#define F_SUBS(a, s) vl_fs_scalar(f, VL_BIN_SUB, a, s)
#define F_MULS(a, s) vl_fs_scalar(f, VL_BIN_MUL, a, s)
#define F_DIVS(a, s) vl_fs_scalar(f, VL_BIN_DIV, a, s)
#define F_POWS(a, s) vl_fs_scalar(f, VL_BIN_POW, a, s)
#define F_SCALAR(OP, a, s) vl_fs_scalar(f, VL_BIN_##OP, a, s)
#define F_MASKED_FILL(a, m, v) vl_fs_masked_fill(f, a, m, v)
#define F_TO(a, dt) vl_fs_to(f, a, dt)
#define F_ZEROS_LIKE(a) vl_fs_zeros_like(f, a)

#ifdef __cplusplus
}
#endif
#endif
