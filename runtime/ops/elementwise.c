/* runtime/ops/elementwise.c: unary, binary, scalar, where and masked_fill front ends. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/layout.h"
#include "runtime/ops/ops_internal.h"

/* In-place front ends bump the storage's version once they wrote (autograd's saved-tensor check). */
static vl_status bumped(vl_tensor *t, vl_status s) {
  if (s == VL_OK) t->storage->version++;
  return s;
}

static const char *const unary_names[] = {
#define VL_X(E, name, ...) name,
    VL_UNARY_OPS(VL_X)
#undef VL_X
};
VL_TABLE_SIZE(unary_names, VL_NUNARY);
static const char *const binary_names[] = {
#define VL_X(E, name, ...) name,
    VL_BINARY_OPS(VL_X)
#undef VL_X
};
VL_TABLE_SIZE(binary_names, VL_NBINARY);

static bool binary_is_act_backward(vl_binary_op op) { return vl_binary_kind_of(op) == VL_OPK_ACT; }

/* The activation-backward ops [out, grad, v] take two float tensors (b NULL: a number was given);
 * v is the forward input x (relu, gelu) or the forward output y (tanh, sigmoid). */
static vl_status act_backward_check(const char *name, vl_binary_op op, const vl_tensor *a, const vl_tensor *b) {
  if (!binary_is_act_backward(op)) return VL_OK;
  const char *vn = op == VL_BIN_TANH_BACKWARD || op == VL_BIN_SIGMOID_BACKWARD ? "y" : "x";
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (!b) return vl_fail(VL_EINVAL, "%s: expected two tensors (grad, %s), got a number", name, vn);
  if (!vl_dtype_is_float(a->dtype) || !vl_dtype_is_float(b->dtype))
    return vl_fail(VL_EDTYPE, "%s: expected float tensors (grad %s, %s %s)", name, vl_tensor_desc(a, d1, sizeof d1), vn,
                   vl_tensor_desc(b, d2, sizeof d2));
  return VL_OK;
}

static bool unary_is_float_only(vl_unary_op op) { return vl_unary_domain(op) == VL_OPD_FLOAT; }

static bool binary_is_arith(vl_binary_op op) {
  return op == VL_BIN_ADD || op == VL_BIN_SUB || op == VL_BIN_MUL || op == VL_BIN_DIV || op == VL_BIN_POW ||
         op == VL_BIN_REMAINDER || op == VL_BIN_FLOOR_DIVIDE || op == VL_BIN_FMOD;
}

/* The integer divisions (a zero integer divisor is an error, as PyTorch's ZeroDivisionError). */
static bool binary_is_int_division(vl_binary_op op) {
  return op == VL_BIN_REMAINDER || op == VL_BIN_FLOOR_DIVIDE || op == VL_BIN_FMOD;
}

/* Result dtype of an op whose operands were promoted to `ct`. */
static vl_dtype binary_compute_dtype(vl_binary_op op, vl_dtype ct) {
  if (op == VL_BIN_DIV && vl_dtype_is_int(ct)) return VL_F32; /* true division */
  if (vl_binary_kind_of(op) == VL_OPK_FLOAT && !vl_dtype_is_float(ct)) return VL_F32;
  if (vl_binary_kind_of(op) == VL_OPK_INT) return ct;
  if (ct == VL_BOOL && binary_is_arith(op)) return VL_I64;
  return ct;
}

/* PyTorch's can_cast for in-place results: no float into an integer tensor, no number into bool. */
static bool can_store(vl_dtype result, vl_dtype into) {
  if (vl_dtype_is_float(result) && !vl_dtype_is_float(into)) return false;
  if (into == VL_BOOL && result != VL_BOOL) return false;
  return true;
}

/* The INT ops (bitwise) take integer and bool operands only (the shifts integers only): `ct` is
 * the dtype they would compute in; b NULL: the number s. */
static vl_status int_kind_check(const char *name, vl_binary_op op, vl_dtype ct, const vl_tensor *a,
                                const vl_tensor *b, double s) {
  if (vl_binary_kind_of(op) != VL_OPK_INT) return VL_OK;
  bool shift = op == VL_BIN_BITWISE_LEFT_SHIFT || op == VL_BIN_BITWISE_RIGHT_SHIFT;
  if (!vl_dtype_is_float(ct) && !(shift && ct == VL_BOOL)) return VL_OK;
  const char *want = shift ? "integer tensors" : "integer or bool tensors";
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (b)
    return vl_fail(VL_EDTYPE, "%s: expected %s, got %s (a %s, b %s)", name, want, vl_dtype_name(ct),
                   vl_tensor_desc(a, d1, sizeof d1), vl_tensor_desc(b, d2, sizeof d2));
  return vl_fail(VL_EDTYPE, "%s: expected %s and an integer number, got %s (a %s, number %g)", name, want,
                 vl_dtype_name(ct), vl_tensor_desc(a, d1, sizeof d1), s);
}

/* Integer remainder / floor_divide / fmod with a zero anywhere in the divisor d (a reduction,
 * synchronising on CUDA): an error, as PyTorch's ZeroDivisionError. */
static vl_status check_int_divisor(const char *name, vl_binary_op op, vl_dtype ct, vl_tensor *a, vl_tensor *d) {
  if (!binary_is_int_division(op) || vl_dtype_is_float(ct) || vl_tensor_numel(d) == 0) return VL_OK;
  vl_tensor *z, *m;
  double v;
  VL_TRY(vl_binary_scalar(VL_BIN_EQ, d, 0, false, &z));
  vl_status s = vl_cast(z, VL_I32, &m);
  vl_tensor_release(z);
  VL_TRY(s);
  s = vl_reduce(VL_RED_MAX, m, 0, NULL, false, 0, &z, NULL);
  vl_tensor_release(m);
  VL_TRY(s);
  s = vl_item(z, &v);
  vl_tensor_release(z);
  VL_TRY(s);
  if (v != 0) {
    char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
    return vl_fail(VL_EINVAL, "%s: integer division by zero (a %s, divisor %s)", name,
                   vl_tensor_desc(a, d1, sizeof d1), vl_tensor_desc(d, d2, sizeof d2));
  }
  return VL_OK;
}

static vl_status check_int_divisor_number(const char *name, vl_binary_op op, vl_dtype ct, const vl_tensor *a,
                                          double s) {
  if (!binary_is_int_division(op) || vl_dtype_is_float(ct) || s != 0) return VL_OK;
  char d[VL_DESC_LEN];
  return vl_fail(VL_EINVAL, "%s: integer division by zero (a %s, divisor 0)", name, vl_tensor_desc(a, d, sizeof d));
}

static void op_name(char *buf, size_t n, const char *base, bool inplace) {
  snprintf(buf, n, "%s%s", base, inplace ? "_" : "");
}

/* ---- unary ---- */

static vl_status unary_run(vl_unary_op op, vl_tensor *out, vl_tensor *in, double p0, double p1) {
  if (vl_tensor_numel(out) == 0) return VL_OK;
  vl_tensor *ops[2] = {out, in};
  vl_iter it;
  const vl_kernels *k;
  VL_TRY(vl_iter_make(unary_names[op], &it, 2, ops, out->ndim, out->size, &k));
  return k->unary(op, &it, p0, p1);
}

static vl_status unary_check(const char *name, vl_unary_op op, const vl_tensor *a) {
  char d[VL_DESC_LEN];
  if ((unsigned)op >= VL_NUNARY) return vl_fail(VL_EINVAL, "unary: invalid op %d", (int)op);
  if (op == VL_UN_NEG && a->dtype == VL_BOOL)
    return vl_fail(VL_EDTYPE, "%s: negation of a bool tensor is not supported; use logical_not (a %s)", name,
                   vl_tensor_desc(a, d, sizeof d));
  if (vl_unary_domain(op) == VL_OPD_INT && vl_dtype_is_float(a->dtype))
    return vl_fail(VL_EDTYPE, "%s: expected an integer or bool tensor, got %s (a %s)", name,
                   vl_dtype_name(a->dtype), vl_tensor_desc(a, d, sizeof d));
  return VL_OK;
}

/* The result of an elementwise op: laid out like the first input that has the result's shape and
 * a dense layout other than contiguous (a channels-last activation stays channels-last, a
 * transposed matrix stays transposed, as PyTorch's elementwise ops keep the memory format), else
 * contiguous. Broadcast inputs do not count: their layout is not the result's. */
static vl_status empty_result(int n, vl_tensor *const *ins, int nd, const int64_t *size, vl_dtype dt,
                              vl_tensor **out) {
  for (int i = 0; i < n; i++) {
    vl_tensor *t = ins[i];
    if (t->ndim == nd && memcmp(t->size, size, sizeof(int64_t) * (size_t)nd) == 0 &&
        ((!vl_tensor_is_contiguous(t) && vl_tensor_is_dense(t)) || vl_is_channels_last(t)))
      return vl_empty_like(t, dt, t->storage->device, out);
  }
  return vl_tensor_empty(nd, size, dt, ins[0]->storage->device, out);
}

static vl_status unary_out(vl_unary_op op, vl_tensor *a, double p0, double p1, vl_tensor **out) {
  VL_TRY(unary_check(unary_names[op], op, a));
  if (op == VL_UN_BITWISE_NOT && a->dtype == VL_BOOL) op = VL_UN_LOGICAL_NOT; /* ~ of a bool: not */
  vl_dtype in_dt = unary_is_float_only(op) && !vl_dtype_is_float(a->dtype) ? VL_F32 : a->dtype;
  vl_dtype out_dt = vl_unary_domain(op) == VL_OPD_BOOL ? VL_BOOL : in_dt;
  vl_tensor *in, *r = NULL;
  VL_TRY(vl_cast(a, in_dt, &in));
  vl_status s = empty_result(1, &a, a->ndim, a->size, out_dt, &r);
  if (s == VL_OK) s = unary_run(op, r, in, p0, p1);
  vl_tensor_release(in);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

static vl_status unary_inplace(vl_unary_op op, vl_tensor *a, double p0, double p1) {
  char name[64], d[VL_DESC_LEN];
  op_name(name, sizeof name, (unsigned)op < VL_NUNARY ? unary_names[op] : "unary", true);
  VL_TRY(unary_check(name, op, a));
  if (unary_is_float_only(op) && !vl_dtype_is_float(a->dtype))
    return vl_fail(VL_EDTYPE, "%s: result dtype f32 cannot be stored in an %s tensor (a %s)", name,
                   vl_dtype_name(a->dtype), vl_tensor_desc(a, d, sizeof d));
  VL_TRY(vl_check_writable(name, a));
  if (op == VL_UN_BITWISE_NOT && a->dtype == VL_BOOL) op = VL_UN_LOGICAL_NOT;
  if (vl_unary_domain(op) == VL_OPD_BOOL && a->dtype != VL_BOOL) {
    /* The kernel writes bool; PyTorch's logical_not_ keeps a's dtype, storing 0/1. */
    vl_tensor *tmp;
    VL_TRY(unary_out(op, a, p0, p1, &tmp));
    vl_status s = vl_copy_same_device(a, tmp);
    vl_tensor_release(tmp);
    return s;
  }
  return unary_run(op, a, a, p0, p1);
}

vl_status vl_unary(vl_unary_op op, vl_tensor *a, vl_tensor **out) { return unary_out(op, a, 0, 0, out); }
vl_status vl_unary_(vl_unary_op op, vl_tensor *a) { return bumped(a, unary_inplace(op, a, 0, 0)); }

static vl_status clamp_check(const char *op, double lo, double hi) {
  if (isnan(lo) || isnan(hi) || lo > hi)
    return vl_fail(VL_EINVAL, "%s: expected lo <= hi, got lo %g, hi %g", op, lo, hi);
  return VL_OK;
}

vl_status vl_clamp(vl_tensor *a, double lo, double hi, vl_tensor **out) {
  VL_TRY(clamp_check("clamp", lo, hi));
  return unary_out(VL_UN_CLAMP, a, lo, hi, out);
}

vl_status vl_clamp_(vl_tensor *a, double lo, double hi) {
  VL_TRY(clamp_check("clamp_", lo, hi));
  return bumped(a, unary_inplace(VL_UN_CLAMP, a, lo, hi));
}

/* ---- binary ---- */

/* Integer POW with a negative exponent anywhere in `e` (a reduction, synchronising on CUDA). */
static vl_status check_int_exponent(const char *name, vl_tensor *base, vl_tensor *e) {
  if (vl_tensor_numel(e) == 0 || e->dtype == VL_U8 || e->dtype == VL_BOOL) return VL_OK;
  vl_tensor *m;
  double v;
  VL_TRY(vl_reduce(VL_RED_MIN, e, 0, NULL, false, 0, &m, NULL));
  vl_status s = vl_item(m, &v);
  vl_tensor_release(m);
  VL_TRY(s);
  if (v < 0) {
    char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
    return vl_fail(VL_EINVAL, "%s: integers to negative integer powers are not allowed (a %s, exponent %s)", name,
                   vl_tensor_desc(base, d1, sizeof d1), vl_tensor_desc(e, d2, sizeof d2));
  }
  return VL_OK;
}

static vl_status binary_run(vl_binary_op op, vl_tensor *out, vl_tensor *a, vl_tensor *b, double alpha) {
  if (vl_tensor_numel(out) == 0) return VL_OK;
  vl_tensor *ops[3] = {out, a, b};
  vl_iter it;
  const vl_kernels *k;
  VL_TRY(vl_iter_make(binary_names[op], &it, 3, ops, out->ndim, out->size, &k));
  return k->binary(op, &it, alpha);
}

vl_status vl_binary(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha, vl_tensor **out) {
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary: invalid op %d", (int)op);
  const char *name = binary_names[op];
  VL_TRY(vl_check_same_device(name, a, "a", b, "b"));
  VL_TRY(act_backward_check(name, op, a, b));
  vl_tensor *ts[2] = {a, b};
  const char *names[2] = {"a", "b"};
  int nd;
  int64_t size[VL_MAX_DIMS];
  VL_TRY(vl_broadcast_shapes(name, 2, ts, names, &nd, size));
  vl_dtype ct = binary_compute_dtype(op, vl_dtype_promote(a->dtype, b->dtype));
  vl_dtype out_dt = vl_binary_is_predicate(op) ? VL_BOOL : ct;
  VL_TRY(int_kind_check(name, op, ct, a, b, 0));
  VL_TRY(check_int_divisor(name, op, ct, a, b));
  if (op == VL_BIN_POW && !vl_dtype_is_float(ct)) VL_TRY(check_int_exponent(name, a, b));
  vl_tensor *ca = NULL, *cb = NULL, *r = NULL;
  vl_status s = vl_cast(a, ct, &ca);
  if (s == VL_OK) s = vl_cast(b, ct, &cb);
  if (s == VL_OK) s = empty_result(2, ts, nd, size, out_dt, &r);
  if (s == VL_OK) s = binary_run(op, r, ca, cb, alpha);
  vl_tensor_release(ca);
  vl_tensor_release(cb);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

/* Shape and dtype checks of an in-place op writing into a from an operand broadcast to a. */
static vl_status inplace_check(const char *name, vl_binary_op op, vl_tensor *a, const vl_tensor *b, vl_dtype rt) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN], s1[VL_DESC_LEN], s2[VL_DESC_LEN];
  if (b && !vl_broadcasts_to(b, a->ndim, a->size))
    return vl_fail(VL_ESHAPE, "%s: b of shape %s cannot be broadcast to a's shape %s (a %s, b %s)", name,
                   vl_shape_str(b, s1, sizeof s1), vl_shape_str(a, s2, sizeof s2), vl_tensor_desc(a, d1, sizeof d1),
                   vl_tensor_desc(b, d2, sizeof d2));
  if (!vl_binary_is_predicate(op) && !can_store(rt, a->dtype)) {
    if (b)
      return vl_fail(VL_EDTYPE, "%s: result dtype %s cannot be stored in an %s tensor (a %s, b %s)", name,
                     vl_dtype_name(rt), vl_dtype_name(a->dtype), vl_tensor_desc(a, d1, sizeof d1),
                     vl_tensor_desc(b, d2, sizeof d2));
    return vl_fail(VL_EDTYPE, "%s: result dtype %s cannot be stored in an %s tensor (a %s)", name, vl_dtype_name(rt),
                   vl_dtype_name(a->dtype), vl_tensor_desc(a, d1, sizeof d1));
  }
  return vl_check_writable(name, a);
}

static vl_status binary_inplace(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha) {
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary_: invalid op %d", (int)op);
  char name[64];
  op_name(name, sizeof name, binary_names[op], true);
  VL_TRY(vl_check_same_device(name, a, "a", b, "b"));
  VL_TRY(act_backward_check(name, op, a, b));
  vl_dtype pt = vl_dtype_promote(a->dtype, b->dtype);
  VL_TRY(inplace_check(name, op, a, b, binary_compute_dtype(op, pt)));
  bool pred = vl_binary_is_predicate(op);
  /* Arithmetic runs in a's dtype (the result is castable to it); predicates in the promoted one. */
  vl_dtype ct = pred ? pt : a->dtype;
  VL_TRY(int_kind_check(name, op, binary_compute_dtype(op, pt), a, b, 0));
  VL_TRY(check_int_divisor(name, op, ct, a, b));
  if (op == VL_BIN_POW && !vl_dtype_is_float(ct)) VL_TRY(check_int_exponent(name, a, b));
  vl_tensor *ca = NULL, *cb = NULL, *ub = NULL, *tmp = NULL;
  vl_status s = vl_unalias(a, b, &ub);
  if (s == VL_OK) s = vl_cast(ub, ct, &cb);
  if (pred) {
    if (s == VL_OK) s = vl_cast(a, ct, &ca);
    if (s == VL_OK) s = vl_tensor_empty(a->ndim, a->size, VL_BOOL, a->storage->device, &tmp);
    if (s == VL_OK) s = binary_run(op, tmp, ca, cb, alpha);
    if (s == VL_OK) s = vl_copy_same_device(a, tmp);
  } else if (s == VL_OK) {
    s = binary_run(op, a, a, cb, alpha);
  }
  vl_tensor_release(tmp);
  vl_tensor_release(ca);
  vl_tensor_release(cb);
  vl_tensor_release(ub);
  return s;
}

vl_status vl_binary_(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha) {
  return bumped(a, binary_inplace(op, a, b, alpha));
}

/* ---- tensor with scalar ---- */

static vl_dtype scalar_compute_dtype(vl_binary_op op, vl_dtype t, double s) {
  vl_dtype ct = t;
  if (!vl_dtype_is_float(t) && (s != floor(s) || !isfinite(s))) ct = VL_F32;
  return binary_compute_dtype(op, ct);
}

static vl_status scalar_pow_check(const char *name, vl_tensor *a, double s, bool reverse, vl_dtype ct) {
  if (vl_dtype_is_float(ct)) return VL_OK;
  if (!reverse && s < 0) {
    char d[VL_DESC_LEN];
    return vl_fail(VL_EINVAL, "%s: integers to negative integer powers are not allowed (a %s, exponent %g)", name,
                   vl_tensor_desc(a, d, sizeof d), s);
  }
  if (reverse) return check_int_exponent(name, a, a);
  return VL_OK;
}

static vl_status scalar_run(vl_binary_op op, vl_tensor *out, vl_tensor *a, double s, bool reverse) {
  if (vl_tensor_numel(out) == 0) return VL_OK;
  vl_tensor *ops[2] = {out, a};
  vl_iter it;
  const vl_kernels *k;
  VL_TRY(vl_iter_make(binary_names[op], &it, 2, ops, out->ndim, out->size, &k));
  return k->binary_scalar(op, &it, s, reverse);
}

vl_status vl_binary_scalar(vl_binary_op op, vl_tensor *a, double s, bool reverse, vl_tensor **out) {
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary: invalid op %d", (int)op);
  const char *name = binary_names[op];
  VL_TRY(act_backward_check(name, op, a, NULL));
  vl_dtype ct = scalar_compute_dtype(op, a->dtype, s);
  /* Predicates compare in the promoted dtype without bool -> i64. */
  if (vl_binary_is_predicate(op))
    ct = !vl_dtype_is_float(a->dtype) && (s != floor(s) || !isfinite(s)) ? VL_F32 : a->dtype;
  /* The scalar conversion rule (runtime/core/scalar.h): arithmetic in an integer dtype refuses a
   * scalar beyond its range; a comparison with one is made exactly, in f64. */
  if (!vl_dtype_is_float(ct) && vl_scalar_to(name, vl_scalar_float(s), ct, NULL) != VL_OK) {
    if (!vl_binary_is_predicate(op)) return VL_EINVAL;
    ct = VL_F64;
  }
  if (op == VL_BIN_POW) VL_TRY(scalar_pow_check(name, a, s, reverse, ct));
  VL_TRY(int_kind_check(name, op, ct, a, NULL, s));
  if (reverse) VL_TRY(check_int_divisor(name, op, ct, a, a));
  else VL_TRY(check_int_divisor_number(name, op, ct, a, s));
  vl_dtype out_dt = vl_binary_is_predicate(op) ? VL_BOOL : ct;
  vl_tensor *ca = NULL, *r = NULL;
  vl_status st = vl_cast(a, ct, &ca);
  if (st == VL_OK) st = empty_result(1, &a, a->ndim, a->size, out_dt, &r);
  if (st == VL_OK) st = scalar_run(op, r, ca, s, reverse);
  vl_tensor_release(ca);
  if (st != VL_OK) {
    vl_tensor_release(r);
    return st;
  }
  *out = r;
  return VL_OK;
}

static vl_status scalar_inplace(vl_binary_op op, vl_tensor *a, double s) {
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary_: invalid op %d", (int)op);
  char name[64];
  op_name(name, sizeof name, binary_names[op], true);
  VL_TRY(act_backward_check(name, op, a, NULL));
  VL_TRY(int_kind_check(name, op, scalar_compute_dtype(op, a->dtype, s), a, NULL, s));
  VL_TRY(inplace_check(name, op, a, NULL, scalar_compute_dtype(op, a->dtype, s)));
  VL_TRY(check_int_divisor_number(name, op, a->dtype, a, s));
  if (!vl_binary_is_predicate(op) && !vl_dtype_is_float(a->dtype)) VL_TRY(vl_scalar_to(name, vl_scalar_float(s), a->dtype, NULL));
  if (op == VL_BIN_POW) VL_TRY(scalar_pow_check(name, a, s, false, a->dtype));
  if (!vl_binary_is_predicate(op)) return scalar_run(op, a, a, s, false);
  vl_tensor *tmp;
  VL_TRY(vl_binary_scalar(op, a, s, false, &tmp));
  vl_status st = vl_copy_same_device(a, tmp);
  vl_tensor_release(tmp);
  return st;
}

vl_status vl_binary_scalar_(vl_binary_op op, vl_tensor *a, double s) { return bumped(a, scalar_inplace(op, a, s)); }

/* ---- where / masked_fill ---- */

static vl_status check_bool(const char *op, const char *what, const vl_tensor *t) {
  if (t->dtype == VL_BOOL) return VL_OK;
  char d[VL_DESC_LEN];
  return vl_fail(VL_EDTYPE, "%s: %s must be a bool tensor (%s %s)", op, what, what, vl_tensor_desc(t, d, sizeof d));
}

vl_status vl_where(vl_tensor *cond, vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  VL_TRY(check_bool("where", "cond", cond));
  VL_TRY(vl_check_same_device("where", cond, "cond", a, "a"));
  VL_TRY(vl_check_same_device("where", a, "a", b, "b"));
  vl_tensor *ts[3] = {cond, a, b};
  const char *names[3] = {"cond", "a", "b"};
  int nd;
  int64_t size[VL_MAX_DIMS];
  VL_TRY(vl_broadcast_shapes("where", 3, ts, names, &nd, size));
  vl_dtype ct = vl_dtype_promote(a->dtype, b->dtype);
  vl_tensor *ca = NULL, *cb = NULL, *r = NULL;
  vl_status s = vl_cast(a, ct, &ca);
  if (s == VL_OK) s = vl_cast(b, ct, &cb);
  vl_tensor *lay[2] = {a, b};
  if (s == VL_OK) s = empty_result(2, lay, nd, size, ct, &r);
  if (s == VL_OK && vl_tensor_numel(r) > 0) {
    vl_tensor *ops[4] = {r, cond, ca, cb};
    vl_iter it;
    const vl_kernels *k;
    s = vl_iter_make("where", &it, 4, ops, nd, size, &k);
    if (s == VL_OK) s = k->where(&it);
  }
  vl_tensor_release(ca);
  vl_tensor_release(cb);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

static vl_status masked_run(vl_tensor *out, vl_tensor *in, vl_tensor *mask, double value) {
  if (vl_tensor_numel(out) == 0) return VL_OK;
  vl_tensor *ops[3] = {out, in, mask};
  vl_iter it;
  const vl_kernels *k;
  VL_TRY(vl_iter_make("masked_fill", &it, 3, ops, out->ndim, out->size, &k));
  return k->masked_fill(&it, value);
}

vl_status vl_masked_fill(vl_tensor *a, vl_tensor *mask, double value, vl_tensor **out) {
  VL_TRY(check_bool("masked_fill", "mask", mask));
  VL_TRY(vl_scalar_to("masked_fill", vl_scalar_float(value), a->dtype, NULL)); /* runtime/core/scalar.h */
  VL_TRY(vl_check_same_device("masked_fill", a, "a", mask, "mask"));
  vl_tensor *ts[2] = {a, mask};
  const char *names[2] = {"a", "mask"};
  int nd;
  int64_t size[VL_MAX_DIMS];
  VL_TRY(vl_broadcast_shapes("masked_fill", 2, ts, names, &nd, size));
  vl_tensor *r;
  VL_TRY(empty_result(1, &a, nd, size, a->dtype, &r));
  vl_status s = masked_run(r, a, mask, value);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_masked_fill_(vl_tensor *a, vl_tensor *mask, double value) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN], s1[VL_DESC_LEN], s2[VL_DESC_LEN];
  VL_TRY(check_bool("masked_fill_", "mask", mask));
  VL_TRY(vl_scalar_to("masked_fill_", vl_scalar_float(value), a->dtype, NULL)); /* runtime/core/scalar.h */
  VL_TRY(vl_check_same_device("masked_fill_", a, "a", mask, "mask"));
  if (!vl_broadcasts_to(mask, a->ndim, a->size))
    return vl_fail(VL_ESHAPE, "masked_fill_: mask of shape %s cannot be broadcast to a's shape %s (a %s, mask %s)",
                   vl_shape_str(mask, s1, sizeof s1), vl_shape_str(a, s2, sizeof s2),
                   vl_tensor_desc(a, d1, sizeof d1), vl_tensor_desc(mask, d2, sizeof d2));
  VL_TRY(vl_check_writable("masked_fill_", a));
  vl_tensor *m;
  VL_TRY(vl_unalias(a, mask, &m));
  vl_status s = masked_run(a, a, m, value);
  vl_tensor_release(m);
  return bumped(a, s);
}
