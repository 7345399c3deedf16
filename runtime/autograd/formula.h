/* runtime/autograd/formula.h: a formula scope for backward rules, so that a rule reads like its
 * formula and keeps the error behaviour of the step-by-step form:
 *
 *   vl_fs f = VL_FS_INIT;
 *   vl_tensor *r = F_DIV(g, F_ADDS(x, 1.0));            // d log1p(x) = g / (1 + x)
 *   return vl_fs_give(&f, n, 1, &r, gi);
 *
 * Every F_ op runs a raw op (runtime/ops: nothing is recorded) and returns a new tensor owned by
 * the scope, or NULL: after the first failure the status sticks and every later op returns NULL
 * without running, so a chain needs no status checks. vl_fs_give hands the chosen results to
 * vl_ag_give_n (a result may also be an input such as the incoming gradient) and releases every
 * temporary of the scope, on failure too. The F_ macros use the scope named `f`. */
#ifndef VL_AUTOGRAD_FORMULA_H
#define VL_AUTOGRAD_FORMULA_H

#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VL_FS_MAX 12 /* temporaries of one scope: the longest rule (pow) needs 10 */
typedef struct vl_fs {
  vl_status s;
  int n;
  vl_tensor *t[VL_FS_MAX];
} vl_fs;
#define VL_FS_INIT {VL_OK, 0, {0}}

vl_tensor *vl_fs_unary(vl_fs *f, vl_unary_op op, vl_tensor *a);
vl_tensor *vl_fs_binary(vl_fs *f, vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha);
vl_tensor *vl_fs_scalar(vl_fs *f, vl_binary_op op, vl_tensor *a, double s); /* a op s */
vl_tensor *vl_fs_masked_fill(vl_fs *f, vl_tensor *a, vl_tensor *mask, double value);
vl_tensor *vl_fs_to(vl_fs *f, vl_tensor *a, vl_dtype dt);
vl_tensor *vl_fs_zeros_like(vl_fs *f, vl_tensor *a);
/* The end of a rule: gives r[0..k) (NULL: no gradient) for inputs 0..k-1 when every op worked
 * (vl_ag_give_n), releases the scope, returns the first failure or the give's status. */
vl_status vl_fs_give(vl_fs *f, vl_node *n, int k, vl_tensor **r, vl_tensor **grads_in);

#define F_UN(OP, a) vl_fs_unary(&f, VL_UN_##OP, a)
#define F_NEG(a) F_UN(NEG, a)
#define F_ADD(a, b) vl_fs_binary(&f, VL_BIN_ADD, a, b, 1.0)
#define F_SUB(a, b) vl_fs_binary(&f, VL_BIN_SUB, a, b, 1.0)
#define F_MUL(a, b) vl_fs_binary(&f, VL_BIN_MUL, a, b, 1.0)
#define F_DIV(a, b) vl_fs_binary(&f, VL_BIN_DIV, a, b, 1.0)
#define F_POW(a, b) vl_fs_binary(&f, VL_BIN_POW, a, b, 1.0)
#define F_BIN(OP, a, b) vl_fs_binary(&f, VL_BIN_##OP, a, b, 1.0)
#define F_ADDS(a, s) vl_fs_scalar(&f, VL_BIN_ADD, a, s)
#define F_SUBS(a, s) vl_fs_scalar(&f, VL_BIN_SUB, a, s)
#define F_MULS(a, s) vl_fs_scalar(&f, VL_BIN_MUL, a, s)
#define F_DIVS(a, s) vl_fs_scalar(&f, VL_BIN_DIV, a, s)
#define F_POWS(a, s) vl_fs_scalar(&f, VL_BIN_POW, a, s)
#define F_SCALAR(OP, a, s) vl_fs_scalar(&f, VL_BIN_##OP, a, s)
#define F_MASKED_FILL(a, m, v) vl_fs_masked_fill(&f, a, m, v)
#define F_TO(a, dt) vl_fs_to(&f, a, dt)
#define F_ZEROS_LIKE(a) vl_fs_zeros_like(&f, a)

#ifdef __cplusplus
}
#endif
#endif
