/* runtime/autograd/ops_ew.c: recorded elementwise ops (unary, clamp, binary, scalar, where,
 * masked_fill, fills and copy_) and their backward formulas, written with raw ops so that they
 * run on every device and record nothing. */
#include <math.h>
#include <stdio.h>

#include "runtime/amp/autocast.h"
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

static vl_status mul(vl_tensor *a, vl_tensor *b, vl_tensor **o) { return vl_binary(VL_BIN_MUL, a, b, 1.0, o); }
static vl_status muls(vl_tensor *a, double s, vl_tensor **o) { return vl_binary_scalar(VL_BIN_MUL, a, s, false, o); }
static vl_status zeros_like(vl_tensor *t, vl_tensor **o) {
  return vl_zeros(t->ndim, t->size, t->dtype, t->storage->device, o);
}

/* ---- unary ---- */

typedef struct unary_ctx {
  vl_unary_op op;
  double lo, hi; /* clamp's bounds */
} unary_ctx;

static vl_status unary_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const unary_ctx *c = VL_AG_CTX(n, unary_ctx);
  vl_tensor *g = go[0], *v, *t[3] = {0}, *r = NULL;
  VL_TRY(vl_node_saved(n, 0, &v));
  vl_status s = VL_OK;
  switch (c->op) {
    case VL_UN_NEG: s = vl_unary(VL_UN_NEG, g, &r); break;
    case VL_UN_ABS:
      s = vl_unary(VL_UN_SIGN, v, &t[0]);
      if (s == VL_OK) s = mul(g, t[0], &r);
      break;
    case VL_UN_SQUARE:
      s = mul(g, v, &t[0]);
      if (s == VL_OK) s = muls(t[0], 2.0, &r);
      break;
    case VL_UN_RELU: s = vl_binary(VL_BIN_RELU_BACKWARD, g, v, 1.0, &r); break; /* y > 0 iff x > 0 */
    case VL_UN_CLAMP: /* pass-through inside [lo, hi], bounds included (as PyTorch) */
      s = vl_binary_scalar(VL_BIN_LT, v, c->lo, false, &t[0]);
      if (s == VL_OK) s = vl_binary_scalar(VL_BIN_GT, v, c->hi, false, &t[1]);
      if (s == VL_OK) s = vl_binary(VL_BIN_LOGICAL_OR, t[0], t[1], 1.0, &t[2]);
      if (s == VL_OK) s = vl_masked_fill(g, t[2], 0.0, &r);
      break;
    case VL_UN_EXP: s = mul(g, v, &r); break;
    case VL_UN_LOG: s = vl_binary(VL_BIN_DIV, g, v, 1.0, &r); break;
    case VL_UN_SQRT:
      s = vl_binary(VL_BIN_DIV, g, v, 1.0, &t[0]);
      if (s == VL_OK) s = muls(t[0], 0.5, &r);
      break;
    case VL_UN_RSQRT: /* d x^-1/2 = -1/2 y^3 */
      s = mul(v, v, &t[0]);
      if (s == VL_OK) s = mul(t[0], v, &t[1]);
      if (s == VL_OK) s = mul(g, t[1], &t[2]);
      if (s == VL_OK) s = muls(t[2], -0.5, &r);
      break;
    case VL_UN_TANH: s = vl_binary(VL_BIN_TANH_BACKWARD, g, v, 1.0, &r); break;
    case VL_UN_SIGMOID: s = vl_binary(VL_BIN_SIGMOID_BACKWARD, g, v, 1.0, &r); break;
    case VL_UN_GELU: s = vl_binary(VL_BIN_GELU_BACKWARD, g, v, 1.0, &r); break;
    case VL_UN_GELU_TANH: s = vl_binary(VL_BIN_GELU_TANH_BACKWARD, g, v, 1.0, &r); break;
    case VL_UN_RECIPROCAL: /* -y^2 */
      s = mul(v, v, &t[0]);
      if (s == VL_OK) s = mul(g, t[0], &t[1]);
      if (s == VL_OK) s = muls(t[1], -1.0, &r);
      break;
    case VL_UN_SIN:
      s = vl_unary(VL_UN_COS, v, &t[0]);
      if (s == VL_OK) s = mul(g, t[0], &r);
      break;
    case VL_UN_COS:
      s = vl_unary(VL_UN_SIN, v, &t[0]);
      if (s == VL_OK) s = mul(g, t[0], &t[1]);
      if (s == VL_OK) s = muls(t[1], -1.0, &r);
      break;
    case VL_UN_LOG1P: /* g / (1 + x) */
      s = vl_binary_scalar(VL_BIN_ADD, v, 1.0, false, &t[0]);
      if (s == VL_OK) s = vl_binary(VL_BIN_DIV, g, t[0], 1.0, &r);
      break;
    case VL_UN_ERF: /* g 2/sqrt(pi) exp(-x^2) */
      s = mul(v, v, &t[0]);
      if (s == VL_OK) s = muls(t[0], -1.0, &t[1]);
      if (s == VL_OK) s = vl_unary_(VL_UN_EXP, t[1]);
      if (s == VL_OK) s = muls(t[1], 1.12837916709551257390, &t[2]);
      if (s == VL_OK) s = mul(g, t[2], &r);
      break;
    default: s = zeros_like(g, &r); break; /* sign, floor, ceil, round: zero almost everywhere */
  }
  vl_ag_drop(3, t);
  return vl_ag_give_n(n, s, 1, &r, gi);
}

/* Records y = op(a) where a_val holds a's values as they were (a itself unless overwritten). */
static vl_status rec_unary(vl_unary_op op, vl_tensor *a, vl_tensor *a_val, vl_tensor *y, double lo, double hi) {
  if (op == VL_UN_LOGICAL_NOT) return VL_OK;
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
  bool rec = op != VL_UN_LOGICAL_NOT && vl_ag_needs(1, &a);
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
static bool bin_saves(vl_binary_op op) { return op >= VL_BIN_MUL && op <= VL_BIN_MINIMUM; }

/* Weight of a in d maximum(a, b) / d a: 1 where a wins, 1/2 on ties (as PyTorch), else 0. */
static vl_status minmax_weight(vl_binary_op op, vl_tensor *a, vl_tensor *b, double s, vl_dtype dt, vl_tensor **w) {
  vl_binary_op cmp = op == VL_BIN_MAXIMUM ? VL_BIN_GT : VL_BIN_LT;
  vl_tensor *t[4] = {0};
  vl_status st = b ? vl_binary(cmp, a, b, 1.0, &t[0]) : vl_binary_scalar(cmp, a, s, false, &t[0]);
  if (st == VL_OK) st = b ? vl_binary(VL_BIN_EQ, a, b, 1.0, &t[1]) : vl_binary_scalar(VL_BIN_EQ, a, s, false, &t[1]);
  if (st == VL_OK) st = vl_to(t[0], dt, t[0]->storage->device, &t[2]);
  if (st == VL_OK) st = vl_to(t[1], dt, t[1]->storage->device, &t[3]);
  if (st == VL_OK) st = vl_binary(VL_BIN_ADD, t[2], t[3], 0.5, w);
  for (int i = 0; i < 4; i++) vl_tensor_release(t[i]);
  return st;
}

typedef struct binary_ctx {
  vl_binary_op op;
  double alpha; /* add/sub: a + alpha b */
} binary_ctx;

/* Saved: a, b (for mul each only when the other one's gradient needs it), y (pow). */
static vl_status binary_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_binary_op op = VL_AG_CTX(n, binary_ctx)->op;
  double alpha = VL_AG_CTX(n, binary_ctx)->alpha;
  vl_tensor *g = go[0], *sv[3], *t[6] = {0}, *gr[2] = {0};
  VL_TRY(vl_node_saved_n(n, 3, sv));
  vl_tensor *a = sv[0], *b = sv[1], *y = sv[2], **ga = &gr[0], **gb = &gr[1];
  bool wa = vl_ag_wants(n, 0), wb = vl_ag_wants(n, 1);
  vl_status s = VL_OK;
  switch (op) {
    case VL_BIN_ADD:
    case VL_BIN_SUB: {
      double k = op == VL_BIN_ADD ? alpha : -alpha;
      if (wa) *ga = vl_tensor_retain(g);
      if (wb) s = k == 1.0 ? (*gb = vl_tensor_retain(g), VL_OK) : muls(g, k, gb);
      break;
    }
    case VL_BIN_MUL:
      if (wa) s = mul(g, b, ga);
      if (s == VL_OK && wb) s = mul(g, a, gb);
      break;
    case VL_BIN_DIV: /* d/da = 1/b, d/db = -a/b^2 = -(g/b)(a/b) */
      s = vl_binary(VL_BIN_DIV, g, b, 1.0, ga);
      if (s == VL_OK && wb) s = vl_binary(VL_BIN_DIV, a, b, 1.0, &t[0]);
      if (s == VL_OK && wb) s = mul(*ga, t[0], &t[1]);
      if (s == VL_OK && wb) s = muls(t[1], -1.0, gb);
      break;
    case VL_BIN_POW: /* d/da = b a^(b-1) (0 where b == 0), d/db = y log(a) (0 where a == 0) */
      if (wa) {
        s = vl_binary_scalar(VL_BIN_SUB, b, 1.0, false, &t[0]);
        if (s == VL_OK) s = vl_binary(VL_BIN_POW, a, t[0], 1.0, &t[1]);
        if (s == VL_OK) s = mul(t[1], b, &t[2]);
        if (s == VL_OK) s = vl_binary_scalar(VL_BIN_EQ, b, 0.0, false, &t[3]);
        if (s == VL_OK) s = mul(g, t[2], &t[4]);
        if (s == VL_OK) s = vl_masked_fill(t[4], t[3], 0.0, ga);
        vl_ag_drop(5, t);
      }
      if (s == VL_OK && wb) {
        s = vl_unary(VL_UN_LOG, a, &t[0]);
        if (s == VL_OK) s = mul(y, t[0], &t[1]);
        if (s == VL_OK) s = mul(g, t[1], &t[2]);
        if (s == VL_OK) s = vl_binary_scalar(VL_BIN_EQ, a, 0.0, false, &t[3]);
        if (s == VL_OK) s = vl_masked_fill(t[2], t[3], 0.0, gb);
      }
      break;
    case VL_BIN_MAXIMUM:
    case VL_BIN_MINIMUM:
      s = minmax_weight(op, a, b, 0, g->dtype, &t[0]);
      if (s == VL_OK) s = mul(g, t[0], ga);
      if (s == VL_OK && wb) s = vl_binary(VL_BIN_SUB, g, *ga, 1.0, gb);
      break;
    default: s = vl_fail(VL_EINTERNAL, "%s: op %d is not differentiable", n->name, (int)op); break;
  }
  if (!wa) vl_ag_drop(1, ga); /* div and min/max compute it for gb */
  vl_ag_drop(6, t);
  return vl_ag_give_n(n, s, 2, gr, gi);
}

static vl_status rec_binary(vl_binary_op op, vl_tensor *a, vl_tensor *av, vl_tensor *b, vl_tensor *bv, vl_tensor *y,
                            double alpha) {
  if (!bin_differentiable(op)) return VL_OK;
  vl_tensor *in[2] = {a, b};
  binary_ctx c = {op, alpha};
  bool is_mul = op == VL_BIN_MUL, saves = bin_saves(op);
  return VL_AG_RECORD(.name = bin_nodes[op], .backward = binary_bw, .nin = 2, .in = in, .out = &y,
                      .save = {saves && (!is_mul || vl_requires_grad(b)) ? av : NULL,
                               saves && (!is_mul || vl_requires_grad(a)) ? bv : NULL, op == VL_BIN_POW ? y : NULL},
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
  vl_tensor *g = go[0], *sv[2], *t[3] = {0}, *r = NULL;
  VL_TRY(vl_node_saved_n(n, 2, sv));
  vl_tensor *a = sv[0], *y = sv[1];
  vl_status s = VL_OK;
  switch (op) {
    case VL_BIN_ADD: r = vl_tensor_retain(g); break;
    case VL_BIN_SUB: s = rev ? muls(g, -1.0, &r) : (r = vl_tensor_retain(g), VL_OK); break;
    case VL_BIN_MUL: s = muls(g, k, &r); break;
    case VL_BIN_DIV:
      if (!rev) {
        s = vl_binary_scalar(VL_BIN_DIV, g, k, false, &r);
      } else { /* d (k / a) = -k / a^2 = -y / a */
        s = vl_binary(VL_BIN_DIV, y, a, 1.0, &t[0]);
        if (s == VL_OK) s = mul(g, t[0], &t[1]);
        if (s == VL_OK) s = muls(t[1], -1.0, &r);
      }
      break;
    case VL_BIN_POW:
      if (!rev) { /* d a^k = k a^(k-1) */
        if (k == 0) {
          s = zeros_like(g, &r);
          break;
        }
        s = vl_binary_scalar(VL_BIN_POW, a, k - 1.0, false, &t[0]);
        if (s == VL_OK) s = muls(t[0], k, &t[1]);
        if (s == VL_OK) s = mul(g, t[1], &r);
      } else { /* d k^a = k^a log k */
        if (k == 0) {
          s = zeros_like(g, &r);
          break;
        }
        s = muls(y, log(k), &t[0]);
        if (s == VL_OK) s = mul(g, t[0], &r);
      }
      break;
    case VL_BIN_MAXIMUM:
    case VL_BIN_MINIMUM:
      s = minmax_weight(op, a, NULL, k, g->dtype, &t[0]);
      if (s == VL_OK) s = mul(g, t[0], &r);
      break;
    default: s = vl_fail(VL_EINTERNAL, "%s: op %d is not differentiable", n->name, (int)op); break;
  }
  vl_ag_drop(3, t);
  return vl_ag_give_n(n, s, 1, &r, gi);
}

static vl_status rec_scalar(vl_binary_op op, vl_tensor *a, vl_tensor *av, double k, bool rev, vl_tensor *y) {
  if (!bin_differentiable(op)) return VL_OK;
  scalar_ctx c = {op, rev, k};
  bool need_a = (op == VL_BIN_DIV && rev) || (op == VL_BIN_POW && !rev) || op == VL_BIN_MAXIMUM ||
                op == VL_BIN_MINIMUM;
  bool need_y = (op == VL_BIN_DIV || op == VL_BIN_POW) && rev;
  return VL_AG_RECORD(.name = bin_nodes[op], .backward = scalar_bw, .nin = 1, .in = &a, .out = &y,
                      .save = {need_a ? av : NULL, need_y ? y : NULL}, VL_AG_CTX_OF(c));
}

vl_status vl_ag_binary_scalar(vl_binary_op op, vl_tensor *a, double s, bool reverse, vl_tensor **out) {
  VL_AUTOCAST(op == VL_BIN_POW ? VL_AC_POW : VL_AC_NONE, vl_ag_binary_scalar(op, vl_ac[0], s, reverse, out), a);
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
  if (op == VL_BIN_POW || op == VL_BIN_MAXIMUM || op == VL_BIN_MINIMUM) s = vl_clone(a, &sa);
  if (s == VL_OK) s = vl_binary_scalar_(op, a, k);
  if (s == VL_OK) s = rec_scalar(op, a, sa, k, false, a);
  vl_tensor_release(sa);
  return s;
}

/* ---- where / masked_fill ---- */

/* Saved: cond. */
static vl_status where_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *cond, *nc = NULL, *gr[2] = {0};
  VL_TRY(vl_node_saved(n, 0, &cond));
  vl_status s = VL_OK;
  if (vl_ag_wants(n, 0)) {
    s = vl_unary(VL_UN_LOGICAL_NOT, cond, &nc);
    if (s == VL_OK) s = vl_masked_fill(go[0], nc, 0.0, &gr[0]);
  }
  if (s == VL_OK && vl_ag_wants(n, 1)) s = vl_masked_fill(go[0], cond, 0.0, &gr[1]);
  vl_tensor_release(nc);
  return vl_ag_give_n(n, s, 2, gr, gi);
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
