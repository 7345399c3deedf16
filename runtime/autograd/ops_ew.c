/* runtime/autograd/ops_ew.c: recorded elementwise ops (unary, clamp, binary, scalar, where,
 * masked_fill, fills and copy_) and their backward formulas, written with raw ops so that they
 * run on every device and record nothing. */
#include <math.h>
#include <stdio.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops_internal.h"

/* The names and nodes of the op list (runtime/backend/op_list.h); in-place messages name the
 * method a user called: the tanh GELU is gelu_{approximate = 'tanh'}. */
static const char *const un_names[] = {
#define VL_X(E, name, ...) VL_UN_##E == VL_UN_GELU_TANH ? "gelu" : name,
    VL_UNARY_OPS(VL_X)
#undef VL_X
};
VL_TABLE_SIZE(un_names, VL_NUNARY);
static const char *const un_nodes[] = {
#define VL_X(E, name, node, ...) node,
    VL_UNARY_OPS(VL_X)
#undef VL_X
};
VL_TABLE_SIZE(un_nodes, VL_NUNARY);
static const char *const bin_names[] = {
#define VL_X(E, name, ...) name,
    VL_BINARY_OPS(VL_X)
#undef VL_X
};
VL_TABLE_SIZE(bin_names, VL_NBINARY);
static const char *const bin_nodes[] = {
#define VL_X(E, name, node, ...) node,
    VL_BINARY_OPS(VL_X)
#undef VL_X
};
VL_TABLE_SIZE(bin_nodes, VL_NBINARY);

/* What a unary backward needs: the saves column of the op list. */
static vl_op_saves unary_saves(vl_unary_op op) {
  static const unsigned char sv[] = {
#define VL_X(E, name, node, dom, saves, ...) VL_OPS_##saves,
      VL_UNARY_OPS(VL_X)
#undef VL_X
  };
  return (unsigned)op < VL_NUNARY ? (vl_op_saves)sv[op] : VL_OPS_NONE;
}


/* ---- unary ---- */

/* The BOOL ops (logical_not, isnan, ...) and the INT ops (bitwise_not) record no node. */
static bool unary_differentiable(vl_unary_op op) {
  vl_op_domain d = vl_unary_domain(op);
  return d != VL_OPD_BOOL && d != VL_OPD_INT;
}

typedef struct unary_ctx {
  vl_unary_op op;
  double lo, hi; /* clamp's bounds */
} unary_ctx;

/* v: the saved input x or output y (the op list's saves column). */
static vl_status unary_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const unary_ctx *c = VL_AG_CTX(n, unary_ctx);
  vl_tensor *g = go[0], *v, *r = NULL;
  VL_TRY(vl_node_saved(n, 0, &v));
  VL_FS(f);
  switch (c->op) {
    case VL_UN_NEG: r = F_NEG(g); break;
    case VL_UN_ABS: r = F_MUL(g, F_UN(SIGN, v)); break;
    case VL_UN_SQUARE: r = F_MULS(F_MUL(g, v), 2.0); break;
    case VL_UN_RELU: r = F_BIN(RELU_BACKWARD, g, v); break; /* y > 0 iff x > 0 */
    case VL_UN_CLAMP: /* pass-through inside [lo, hi], bounds included (as PyTorch) */
      r = F_MASKED_FILL(g, F_BIN(LOGICAL_OR, F_SCALAR(LT, v, c->lo), F_SCALAR(GT, v, c->hi)), 0.0);
      break;
    case VL_UN_EXP: r = F_MUL(g, v); break;
    case VL_UN_LOG: r = F_DIV(g, v); break;
    case VL_UN_SQRT: r = F_MULS(F_DIV(g, v), 0.5); break;
    case VL_UN_RSQRT: r = F_MULS(F_MUL(g, F_MUL(F_MUL(v, v), v)), -0.5); break; /* d x^-1/2 = -1/2 y^3 */
    case VL_UN_TANH: r = F_BIN(TANH_BACKWARD, g, v); break;
    case VL_UN_SIGMOID: r = F_BIN(SIGMOID_BACKWARD, g, v); break;
    case VL_UN_GELU: r = F_BIN(GELU_BACKWARD, g, v); break;
    case VL_UN_GELU_TANH: r = F_BIN(GELU_TANH_BACKWARD, g, v); break;
    case VL_UN_RECIPROCAL: r = F_MULS(F_MUL(g, F_MUL(v, v)), -1.0); break; /* -y^2 */
    case VL_UN_SIN: r = F_MUL(g, F_UN(COS, v)); break;
    case VL_UN_COS: r = F_MULS(F_MUL(g, F_UN(SIN, v)), -1.0); break;
    case VL_UN_LOG1P: r = F_DIV(g, F_ADDS(v, 1.0)); break;                                   /* g / (1 + x) */
    case VL_UN_ERF: r = F_MUL(g, F_MULS(F_UN(EXP, F_MULS(F_MUL(v, v), -1.0)), 1.12837916709551257390)); break; /* 2/sqrt(pi) e^-x^2 */
    case VL_UN_EXPM1: r = F_MUL(g, F_ADDS(v, 1.0)); break;                                   /* e^x = y + 1 */
    case VL_UN_ERFINV: r = F_MUL(g, F_MULS(F_UN(EXP, F_MUL(v, v)), 0.88622692545275801365)); break; /* sqrt(pi)/2 e^y^2 */
    default: r = F_ZEROS_LIKE(g); break; /* sign, floor, ceil, round, trunc: zero almost everywhere */
  }
  return vl_fs_give(f, n, 1, &r, gi);
}

/* Records y = op(a) where a_val holds a's values as they were (a itself unless overwritten). */
static vl_status rec_unary(vl_unary_op op, vl_tensor *a, vl_tensor *a_val, vl_tensor *y, double lo, double hi) {
  if (!unary_differentiable(op)) return VL_OK;
  unary_ctx c = {op, lo, hi};
  vl_op_saves sv = unary_saves(op);
  return VL_AG_RECORD(.name = un_nodes[op], .backward = unary_bw, .nin = 1, .in = &a, .out = &y,
                      .save = {sv == VL_OPS_IN ? a_val : sv == VL_OPS_OUT ? y : NULL}, VL_AG_CTX_OF(c));
}

vl_status vl_ag_unary(vl_unary_op op, vl_tensor *a, vl_tensor **out) {
  VL_AUTOCAST(vl_autocast_op_of_unary(op), vl_ag_unary(op, vl_ac[0], out), a);
  vl_tensor *r;
  VL_TRY(vl_unary(op, a, &r));
  return vl_ag_out(rec_unary(op, a, a, r, 0, 0), r, out);
}

vl_status vl_ag_clamp(vl_tensor *a, double lo, double hi, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_clamp(a, lo, hi, &r));
  return vl_ag_out(rec_unary(VL_UN_CLAMP, a, a, r, lo, hi), r, out);
}

/* In place: checks, a snapshot of a when the formula needs its old values, the raw write, then
 * the node with a as its output (rebasing a's history). */
static vl_status unary_inplace(vl_unary_op op, vl_tensor *a, double lo, double hi) {
  char name[48];
  snprintf(name, sizeof name, "%s_", (unsigned)op < VL_NUNARY ? un_names[op] : "unary");
  bool rec = unary_differentiable(op) && vl_ag_needs(1, &a);
  VL_TRY(vl_ag_check_inplace(name, a, rec));
  if (!rec) return op == VL_UN_CLAMP ? vl_clamp_(a, lo, hi) : vl_unary_(op, a);
  vl_tensor *snap = NULL;
  if (unary_saves(op) == VL_OPS_IN) VL_TRY(vl_clone(a, &snap));
  vl_status s = op == VL_UN_CLAMP ? vl_clamp_(a, lo, hi) : vl_unary_(op, a);
  if (s == VL_OK) s = rec_unary(op, a, snap, a, lo, hi);
  vl_tensor_release(snap);
  return s;
}

vl_status vl_ag_unary_(vl_unary_op op, vl_tensor *a) { return unary_inplace(op, a, 0, 0); }
vl_status vl_ag_clamp_(vl_tensor *a, double lo, double hi) { return unary_inplace(VL_UN_CLAMP, a, lo, hi); }

/* ---- binary ---- */

static bool bin_differentiable(vl_binary_op op) { return (unsigned)op < VL_NBINARY && bin_nodes[op][0] != '\0'; }
/* Whether the formula reads the operands (ADD/SUB do not). */
static bool bin_saves(vl_binary_op op) {
  return (op >= VL_BIN_MUL && op <= VL_BIN_MINIMUM) || op == VL_BIN_REMAINDER || op == VL_BIN_FMOD ||
         op == VL_BIN_ATAN2 || op == VL_BIN_HYPOT;
}
/* Whether the backward reads the output y (pow, hypot). */
static bool bin_saves_y(vl_binary_op op) { return op == VL_BIN_POW || op == VL_BIN_HYPOT; }

/* Weight of a in d maximum(a, b) / d a: 1 where a wins, 1/2 on ties (as PyTorch), else 0 (b NULL:
 * the number s). */
static vl_tensor *minmax_weight(vl_fs *f, vl_binary_op op, vl_tensor *a, vl_tensor *b, double s, vl_dtype dt) {
  vl_binary_op cmp = op == VL_BIN_MAXIMUM ? VL_BIN_GT : VL_BIN_LT;
  vl_tensor *win = b ? vl_fs_binary(f, cmp, a, b, 1.0) : vl_fs_scalar(f, cmp, a, s);
  vl_tensor *tie = b ? F_BIN(EQ, a, b) : F_SCALAR(EQ, a, s);
  vl_tensor *w = vl_fs_binary(f, VL_BIN_ADD, F_TO(win, dt), F_TO(tie, dt), 0.5);
  return w;
}

typedef struct binary_ctx {
  vl_binary_op op;
  double alpha; /* add/sub: a + alpha b */
} binary_ctx;

/* Saved: a, b (for mul each only when the other one's gradient needs it), y (pow). */
static vl_status binary_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_binary_op op = VL_AG_CTX(n, binary_ctx)->op;
  double alpha = VL_AG_CTX(n, binary_ctx)->alpha;
  vl_tensor *g = go[0], *sv[3], *gr[2] = {0};
  VL_TRY(vl_node_saved_n(n, 3, sv));
  vl_tensor *a = sv[0], *b = sv[1], *y = sv[2];
  bool wa = vl_ag_wants(n, 0), wb = vl_ag_wants(n, 1);
  VL_FS(f);
  switch (op) {
    case VL_BIN_ADD:
    case VL_BIN_SUB: {
      double k = op == VL_BIN_ADD ? alpha : -alpha;
      gr[0] = wa ? g : NULL;
      gr[1] = wb ? (k == 1.0 ? g : F_MULS(g, k)) : NULL;
      break;
    }
    case VL_BIN_MUL:
      gr[0] = wa ? F_MUL(g, b) : NULL;
      gr[1] = wb ? F_MUL(g, a) : NULL;
      break;
    case VL_BIN_DIV: /* d/da = 1/b, d/db = -a/b^2 = -(g/b)(a/b) */
      gr[0] = F_DIV(g, b);
      gr[1] = wb ? F_MULS(F_MUL(gr[0], F_DIV(a, b)), -1.0) : NULL;
      break;
    case VL_BIN_POW: /* d/da = b a^(b-1) (0 where b == 0), d/db = y log(a) (0 where a == 0) */
      if (wa) gr[0] = F_MASKED_FILL(F_MUL(g, F_MUL(F_POW(a, F_SUBS(b, 1.0)), b)), F_SCALAR(EQ, b, 0.0), 0.0);
      if (wb) gr[1] = F_MASKED_FILL(F_MUL(g, F_MUL(y, F_UN(LOG, a))), F_SCALAR(EQ, a, 0.0), 0.0);
      break;
    case VL_BIN_MAXIMUM:
    case VL_BIN_MINIMUM:
      gr[0] = F_MUL(g, minmax_weight(f, op, a, b, 0, g->dtype));
      gr[1] = wb ? F_SUB(g, gr[0]) : NULL;
      break;
    case VL_BIN_REMAINDER: /* a - b floor(a/b): d/da = 1, d/db = -floor(a/b) */
    case VL_BIN_FMOD:      /* a - b trunc(a/b): d/da = 1, d/db = -trunc(a/b) */
      gr[0] = wa ? g : NULL;
      if (wb) gr[1] = F_MUL(g, F_MULS(op == VL_BIN_FMOD ? F_UN(TRUNC, F_DIV(a, b)) : F_UN(FLOOR, F_DIV(a, b)), -1.0));
      break;
    case VL_BIN_ATAN2: { /* atan2(a, b): d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2) */
      vl_tensor *gq = F_DIV(g, F_ADD(F_MUL(a, a), F_MUL(b, b)));
      if (wa) gr[0] = F_MUL(gq, b);
      if (wb) gr[1] = F_MULS(F_MUL(gq, a), -1.0);
      break;
    }
    case VL_BIN_HYPOT: { /* d/da = a / y, d/db = b / y */
      vl_tensor *gy = F_DIV(g, y);
      if (wa) gr[0] = F_MUL(gy, a);
      if (wb) gr[1] = F_MUL(gy, b);
      break;
    }
    default:
      f->s = vl_fail(VL_EINTERNAL, "%s: op %d is not differentiable", n->name, (int)op);
      break;
  }
  if (!wa) gr[0] = NULL; /* div and min/max compute it for gb */
  return vl_fs_give(f, n, 2, gr, gi);
}

static vl_status rec_binary(vl_binary_op op, vl_tensor *a, vl_tensor *av, vl_tensor *b, vl_tensor *bv, vl_tensor *y,
                            double alpha) {
  if (!bin_differentiable(op)) return VL_OK;
  vl_tensor *in[2] = {a, b};
  binary_ctx c = {op, alpha};
  bool is_mul = op == VL_BIN_MUL, saves = bin_saves(op);
  return VL_AG_RECORD(.name = bin_nodes[op], .backward = binary_bw, .nin = 2, .in = in, .out = &y,
                      .save = {saves && (!is_mul || vl_requires_grad(b)) ? av : NULL,
                               saves && (!is_mul || vl_requires_grad(a)) ? bv : NULL, bin_saves_y(op) ? y : NULL},
                      VL_AG_CTX_OF(c));
}

vl_status vl_ag_binary(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha, vl_tensor **out) {
  VL_AUTOCAST(vl_autocast_op_of_binary(op), vl_ag_binary(op, vl_ac[0], vl_ac[1], alpha, out), a, b);
  vl_tensor *r;
  VL_TRY(vl_binary(op, a, b, alpha, &r));
  return vl_ag_out(rec_binary(op, a, a, b, b, r, alpha), r, out);
}

vl_status vl_ag_binary_(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha) {
  char name[48];
  snprintf(name, sizeof name, "%s_", (unsigned)op < VL_NBINARY ? bin_names[op] : "binary");
  vl_tensor *in[2] = {a, b};
  bool rec = bin_differentiable(op) && vl_ag_needs(2, in);
  VL_TRY(vl_ag_check_inplace(name, a, rec));
  if (!rec) return vl_binary_(op, a, b, alpha);
  vl_tensor *sa = NULL, *sb = NULL;
  vl_status s = VL_OK;
  if (bin_saves(op)) {
    s = vl_clone(a, &sa);
    /* b is saved as is unless the write below changes it too (a:mul_(a)). */
    if (s == VL_OK && b->storage == a->storage) s = vl_clone(b, &sb);
  }
  if (s == VL_OK) s = vl_binary_(op, a, b, alpha);
  if (s == VL_OK) s = rec_binary(op, a, sa ? sa : a, b, sb ? sb : b, a, alpha);
  vl_tensor_release(sa);
  vl_tensor_release(sb);
  return s;
}

/* ---- tensor with scalar ---- */

typedef struct scalar_ctx {
  vl_binary_op op;
  bool rev; /* k op a rather than a op k */
  double k;
} scalar_ctx;

/* Saved: a (when the formula reads it), y (k / a, k ^ a). */
static vl_status scalar_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const scalar_ctx *c = VL_AG_CTX(n, scalar_ctx);
  vl_binary_op op = c->op;
  bool rev = c->rev;
  double k = c->k;
  vl_tensor *g = go[0], *sv[2], *r = NULL;
  VL_TRY(vl_node_saved_n(n, 2, sv));
  vl_tensor *a = sv[0], *y = sv[1];
  VL_FS(f);
  switch (op) {
    case VL_BIN_ADD: r = g; break;
    case VL_BIN_SUB: r = rev ? F_MULS(g, -1.0) : g; break;
    case VL_BIN_MUL: r = F_MULS(g, k); break;
    case VL_BIN_DIV: r = !rev ? F_DIVS(g, k) : F_MULS(F_MUL(g, F_DIV(y, a)), -1.0); break; /* d (k / a) = -y / a */
    case VL_BIN_POW:
      if (k == 0) r = F_ZEROS_LIKE(g);
      else if (!rev) r = F_MUL(g, F_MULS(F_POWS(a, k - 1.0), k)); /* d a^k = k a^(k-1) */
      else r = F_MUL(g, F_MULS(y, log(k)));                        /* d k^a = k^a log k */
      break;
    case VL_BIN_MAXIMUM:
    case VL_BIN_MINIMUM: r = F_MUL(g, minmax_weight(f, op, a, NULL, k, g->dtype)); break;
    case VL_BIN_REMAINDER: /* a % k: 1; k % a: -floor(k / a) */
    case VL_BIN_FMOD:
      if (!rev) r = g;
      else {
        vl_tensor *q = F_RUN(vl_binary_scalar(VL_BIN_DIV, a, k, true, F_OUT));
        r = F_MUL(g, F_MULS(op == VL_BIN_FMOD ? F_UN(TRUNC, q) : F_UN(FLOOR, q), -1.0));
      }
      break;
    case VL_BIN_ATAN2: /* atan2(a, k): k / (a^2 + k^2); atan2(k, a): -k / (a^2 + k^2) */
      r = F_DIV(F_MULS(g, rev ? -k : k), F_ADDS(F_MUL(a, a), k * k));
      break;
    case VL_BIN_HYPOT: r = F_MUL(g, F_DIV(a, y)); break; /* a / y either way */
    default: f->s = vl_fail(VL_EINTERNAL, "%s: op %d is not differentiable", n->name, (int)op); break;
  }
  return vl_fs_give(f, n, 1, &r, gi);
}

static vl_status rec_scalar(vl_binary_op op, vl_tensor *a, vl_tensor *av, double k, bool rev, vl_tensor *y) {
  if (!bin_differentiable(op)) return VL_OK;
  scalar_ctx c = {op, rev, k};
  bool need_a = (op == VL_BIN_DIV && rev) || (op == VL_BIN_POW && !rev) || op == VL_BIN_MAXIMUM ||
                op == VL_BIN_MINIMUM || ((op == VL_BIN_REMAINDER || op == VL_BIN_FMOD) && rev) ||
                op == VL_BIN_ATAN2 || op == VL_BIN_HYPOT;
  bool need_y = ((op == VL_BIN_DIV || op == VL_BIN_POW) && rev) || op == VL_BIN_HYPOT;
  return VL_AG_RECORD(.name = bin_nodes[op], .backward = scalar_bw, .nin = 1, .in = &a, .out = &y,
                      .save = {need_a ? av : NULL, need_y ? y : NULL}, VL_AG_CTX_OF(c));
}

vl_status vl_ag_binary_scalar(vl_binary_op op, vl_tensor *a, double s, bool reverse, vl_tensor **out) {
  VL_AUTOCAST(op == VL_BIN_POW ? VL_AC_POW : op == VL_BIN_ATAN2 ? VL_AC_ATAN2 : VL_AC_NONE, vl_ag_binary_scalar(op, vl_ac[0], s, reverse, out), a);
  vl_tensor *r;
  VL_TRY(vl_binary_scalar(op, a, s, reverse, &r));
  return vl_ag_out(rec_scalar(op, a, a, s, reverse, r), r, out);
}

vl_status vl_ag_binary_scalar_(vl_binary_op op, vl_tensor *a, double k) {
  char name[48];
  snprintf(name, sizeof name, "%s_", (unsigned)op < VL_NBINARY ? bin_names[op] : "binary");
  bool rec = bin_differentiable(op) && vl_ag_needs(1, &a);
  VL_TRY(vl_ag_check_inplace(name, a, rec));
  if (!rec) return vl_binary_scalar_(op, a, k);
  vl_tensor *sa = NULL;
  vl_status s = VL_OK;
  if (op == VL_BIN_POW || op == VL_BIN_MAXIMUM || op == VL_BIN_MINIMUM || op == VL_BIN_ATAN2 || op == VL_BIN_HYPOT)
    s = vl_clone(a, &sa);
  if (s == VL_OK) s = vl_binary_scalar_(op, a, k);
  if (s == VL_OK) s = rec_scalar(op, a, sa, k, false, a);
  vl_tensor_release(sa);
  return s;
}

/* ---- where / masked_fill ---- */

/* Saved: cond. */
static vl_status where_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *cond, *gr[2] = {0};
  VL_TRY(vl_node_saved(n, 0, &cond));
  VL_FS(f);
  if (vl_ag_wants(n, 0)) gr[0] = F_MASKED_FILL(go[0], F_UN(LOGICAL_NOT, cond), 0.0);
  if (vl_ag_wants(n, 1)) gr[1] = F_MASKED_FILL(go[0], cond, 0.0);
  return vl_fs_give(f, n, 2, gr, gi);
}

vl_status vl_ag_where(vl_tensor *cond, vl_tensor *a, vl_tensor *b, vl_tensor **out) {
  VL_AUTOCAST(VL_AC_WHERE, vl_ag_where(cond, vl_ac[0], vl_ac[1], out), a, b);
  vl_tensor *r, *in[2] = {a, b};
  VL_TRY(vl_where(cond, a, b, &r));
  return vl_ag_out(VL_AG_RECORD(.name = "WhereBackward", .backward = where_bw, .nin = 2, .in = in, .out = &r,
                                .save = {cond}),
                   r, out);
}

static vl_status masked_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *mask, *r = NULL;
  VL_TRY(vl_node_saved(n, 0, &mask));
  VL_TRY(vl_masked_fill(go[0], mask, 0.0, &r));
  return vl_ag_give(n, 0, r, gi);
}

static vl_status rec_masked(vl_tensor *a, vl_tensor *mask, vl_tensor *y) {
  return VL_AG_RECORD(.name = "MaskedFillBackward", .backward = masked_bw, .nin = 1, .in = &a, .out = &y,
                      .save = {mask});
}

vl_status vl_ag_masked_fill(vl_tensor *a, vl_tensor *mask, double value, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_masked_fill(a, mask, value, &r));
  return vl_ag_out(rec_masked(a, mask, r), r, out);
}

vl_status vl_ag_masked_fill_(vl_tensor *a, vl_tensor *mask, double value) {
  bool rec = vl_ag_needs(1, &a);
  VL_TRY(vl_ag_check_inplace("masked_fill_", a, rec));
  VL_TRY(vl_masked_fill_(a, mask, value));
  return rec ? rec_masked(a, mask, a) : VL_OK;
}

/* ---- fills and copy_ ---- */

/* After an overwrite that does not depend on t's old value: a node with no inputs, so t keeps
 * requiring grad (it is a non-leaf) while no gradient flows to its past. */
static vl_status rec_overwrite(const char *name, vl_tensor *t) {
  return VL_AG_RECORD(.name = name, .out = &t, .always = true);
}

#define AG_FILL(call, opname)                          \
  bool rec = vl_ag_needs(1, &t);                       \
  VL_TRY(vl_ag_check_inplace(opname, t, rec));         \
  VL_TRY(call);                                        \
  return rec ? rec_overwrite("FillBackward", t) : VL_OK;

vl_status vl_ag_fill_(vl_tensor *t, double value) { AG_FILL(vl_fill_(t, value), "fill_") }
vl_status vl_ag_fill_scalar_(vl_tensor *t, vl_scalar value) { AG_FILL(vl_fill_scalar_(t, value), "fill_") }
vl_status vl_ag_uniform_(vl_tensor *t, double lo, double hi) { AG_FILL(vl_uniform_(t, lo, hi), "uniform_") }
vl_status vl_ag_normal_(vl_tensor *t, double mean, double std) { AG_FILL(vl_normal_(t, mean, std), "normal_") }
vl_status vl_ag_bernoulli_(vl_tensor *t, double p) { AG_FILL(vl_bernoulli_(t, p), "bernoulli_") }
vl_status vl_ag_exponential_(vl_tensor *t, double lambd) { AG_FILL(vl_exponential_(t, lambd), "exponential_") }
/* random_: all_bounds false draws PyTorch's default range (vl_random_default_). */
vl_status vl_ag_random_(vl_tensor *t, bool all_bounds, int64_t lo, int64_t hi) {
  AG_FILL(all_bounds ? vl_random_(t, lo, hi) : vl_random_default_(t), "random_")
}

static vl_status copy_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  return vl_ag_give(n, 0, vl_tensor_retain(go[0]), gi);
}

vl_status vl_ag_copy_(vl_tensor *dst, vl_tensor *src) {
  vl_tensor *in[2] = {dst, src};
  bool rec = vl_dtype_is_float(dst->dtype) && vl_ag_needs(2, in);
  VL_TRY(vl_ag_check_inplace("copy_", dst, rec));
  VL_TRY(vl_copy_(dst, src));
  /* dst's old value is gone: the node's one input is src (always: dst alone may need grad). */
  return rec ? VL_AG_RECORD(.name = "CopyBackward", .backward = copy_bw, .nin = 1, .in = &src, .out = &dst,
                            .always = true)
             : VL_OK;
}

/* ---- composites: lerp, clamp with tensor bounds, nan_to_num ----
 * Written with the recorded ops above, so their gradients follow from those ops' rules; the
 * checks come first and name the composite. */

static vl_status need_float(const char *op, const char *what, const vl_tensor *t) {
  if (vl_dtype_is_float(t->dtype)) return VL_OK;
  char d[VL_DESC_LEN];
  return vl_fail(VL_EDTYPE, "%s: expected a float tensor for %s, got %s (%s %s)", op, what, vl_dtype_name(t->dtype),
                 what, vl_tensor_desc(t, d, sizeof d));
}

/* a + w (b - a), w a tensor or (w NULL) the number ws. */
vl_status vl_ag_lerp(vl_tensor *a, vl_tensor *b, vl_tensor *w, double ws, vl_tensor **out) {
  VL_TRY(need_float("lerp", "a", a));
  VL_TRY(need_float("lerp", "b", b));
  VL_TRY(vl_check_same_device("lerp", a, "a", b, "b"));
  vl_tensor *ts[3] = {a, b, w};
  const char *names[3] = {"a", "b", "weight"};
  int nd;
  int64_t size[VL_MAX_DIMS];
  if (w) {
    VL_TRY(need_float("lerp", "weight", w));
    VL_TRY(vl_check_same_device("lerp", a, "a", w, "weight"));
  }
  VL_TRY(vl_broadcast_shapes("lerp", w ? 3 : 2, ts, names, &nd, size));
  vl_tensor *d = NULL, *m = NULL;
  vl_status s = vl_ag_binary(VL_BIN_SUB, b, a, 1.0, &d);
  if (s == VL_OK) s = w ? vl_ag_binary(VL_BIN_MUL, w, d, 1.0, &m) : vl_ag_binary_scalar(VL_BIN_MUL, d, ws, false, &m);
  if (s == VL_OK) s = vl_ag_binary(VL_BIN_ADD, a, m, 1.0, out);
  vl_tensor_release(d);
  vl_tensor_release(m);
  return s;
}

/* One tensor bound: where(a < lo or lo is NaN, lo, a) (upper: a > hi), so the gradient goes to a
 * inside the bounds (bounds included) and to the bound outside, and a NaN bound gives NaN, as
 * PyTorch's clamp with tensor bounds. */
vl_status vl_ag_clamp_bound(vl_tensor *a, vl_tensor *bound, bool upper, vl_tensor **out) {
  const char *name = "clamp";
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(vl_check_same_device(name, a, "a", bound, upper ? "hi" : "lo"));
  if (a->dtype == VL_BOOL || bound->dtype == VL_BOOL)
    return vl_fail(VL_EDTYPE, "clamp: bool tensors are not supported (a %s, %s %s)", vl_tensor_desc(a, d1, sizeof d1),
                   upper ? "hi" : "lo", vl_tensor_desc(bound, d2, sizeof d2));
  vl_tensor *ts[2] = {a, bound};
  const char *names[2] = {"a", upper ? "hi" : "lo"};
  int nd;
  int64_t size[VL_MAX_DIMS];
  VL_TRY(vl_broadcast_shapes(name, 2, ts, names, &nd, size));
  vl_tensor *c = NULL, *nb = NULL, *m = NULL;
  vl_status s = vl_binary(upper ? VL_BIN_GT : VL_BIN_LT, a, bound, 1.0, &c);
  if (s == VL_OK && vl_dtype_is_float(bound->dtype)) {
    s = vl_unary(VL_UN_ISNAN, bound, &nb);
    if (s == VL_OK) s = vl_binary(VL_BIN_LOGICAL_OR, c, nb, 1.0, &m);
  }
  if (s == VL_OK) s = vl_ag_where(m ? m : c, bound, a, out);
  vl_tensor_release(c);
  vl_tensor_release(nb);
  vl_tensor_release(m);
  return s;
}

/* The largest finite value of a float dtype. */
static double float_max(vl_dtype dt) {
  switch (dt) {
    case VL_F16: return 65504.0;
    case VL_BF16: return 3.38953138925153547590e38;
    case VL_F32: return 3.40282346638528859812e38;
    default: return 1.79769313486231570815e308;
  }
}

/* NaN, +inf, -inf of a float tensor replaced by nan, posinf, neginf (NaN for posinf / neginf: the
 * dtype's largest / lowest finite value, as PyTorch); masked_fill gives no gradient where it
 * replaced. Integer and bool tensors are copied. */
vl_status vl_ag_nan_to_num(vl_tensor *a, double nan, double posinf, double neginf, vl_tensor **out) {
  if (!vl_dtype_is_float(a->dtype)) return vl_clone(a, out);
  if (isnan(posinf)) posinf = float_max(a->dtype);
  if (isnan(neginf)) neginf = -float_max(a->dtype);
  const double vals[3] = {nan, posinf, neginf};
  for (int i = 0; i < 3; i++) VL_TRY(vl_scalar_to("nan_to_num", vl_scalar_float(vals[i]), a->dtype, NULL));
  vl_tensor *r = vl_tensor_retain(a), *m = NULL, *t = NULL;
  vl_status s = VL_OK;
  for (int i = 0; i < 3 && s == VL_OK; i++) {
    s = i == 0 ? vl_unary(VL_UN_ISNAN, r, &m) : vl_binary_scalar(VL_BIN_EQ, r, i == 1 ? INFINITY : -INFINITY, false, &m);
    if (s == VL_OK) s = vl_ag_masked_fill(r, m, vals[i], &t);
    vl_tensor_release(m);
    m = NULL;
    if (s == VL_OK) {
      vl_tensor_release(r);
      r = t;
      t = NULL;
    }
  }
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}
