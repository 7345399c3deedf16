/* runtime/autograd/ops_reduce.c: recorded reductions (sum, mean, prod, max/min, var, norm) and
 * softmax / log_softmax. */
#include <math.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

static const char *const red_nodes[] = {"SumBackward", "ProdBackward", "MeanBackward", "MaxBackward",
                                                  "MinBackward", "VarBackward",  "NormBackward"};
VL_TABLE_SIZE(red_nodes, VL_NREDUCE);

/* The input's shape and which of its dims were reduced (so the gradient can be reshaped to the
 * keepdim shape and expanded back). */
typedef struct red_info {
  int ndim, nred, dims[VL_MAX_DIMS];
  int64_t size[VL_MAX_DIMS], ksize[VL_MAX_DIMS], len;
} red_info;

typedef struct reduce_ctx {
  vl_reduce_op op;
  bool by_index; /* max/min over some dims: the gradient goes where the saved indices say */
  double param;  /* var: correction, norm: p */
  red_info r;
} reduce_ctx;

static void info_of(const vl_tensor *a, int ndims, const int *dims, red_info *r) {
  uint32_t mask = 0;
  for (int i = 0; i < ndims; i++) mask |= 1u << (dims[i] < 0 ? dims[i] + a->ndim : dims[i]);
  if (ndims == 0) mask = (1u << a->ndim) - 1;
  r->ndim = a->ndim;
  r->nred = 0;
  r->len = 1;
  for (int i = 0; i < r->ndim; i++) {
    r->size[i] = a->size[i];
    bool red = (mask >> i) & 1;
    r->ksize[i] = red ? 1 : r->size[i];
    if (red) {
      r->dims[r->nred++] = i;
      r->len *= r->size[i];
    }
  }
}

/* A reduced-shape tensor (keepdim or not) viewed with the reduced dims kept as size 1. */
static vl_tensor *keep_dims(vl_fs *f, vl_tensor *t, const red_info *r) {
  return F_RUN(vl_reshape(t, r->ndim, r->ksize, F_OUT));
}

/* ... and expanded back over the input's shape. */
static vl_tensor *expand_back(vl_fs *f, vl_tensor *t, const red_info *r) {
  vl_tensor *k = keep_dims(f, t, r);
  return F_RUN(vl_expand(k, r->ndim, r->size, F_OUT));
}

/* t reduced (op) over the reduced dims, kept as size 1. */
static vl_tensor *reduce_kept(vl_fs *f, vl_reduce_op op, vl_tensor *t, const red_info *r) {
  return F_RUN(vl_reduce(op, t, r->nred, r->dims, true, 0, F_OUT, NULL));
}

static vl_tensor *cast(vl_fs *f, vl_tensor *t, vl_dtype dt) { return F_RUN(vl_cast(t, dt, F_OUT)); }

/* Gradient spread evenly over the positions where `val` (|x| for the inf-norm, x otherwise)
 * equals the result y: ties share it, as PyTorch does for max/min without a dim. */
static vl_tensor *even_ties(vl_fs *f, vl_tensor *val, vl_tensor *y, vl_tensor *g, const red_info *r) {
  vl_tensor *hit = F_TO(F_BIN(EQ, val, expand_back(f, y, r)), g->dtype);
  vl_tensor *count = reduce_kept(f, VL_RED_SUM, hit, r);
  return F_MUL(hit, F_DIV(keep_dims(f, g, r), count));
}

static vl_tensor *norm_grad(vl_fs *f, double p, vl_tensor *x, vl_tensor *y, vl_tensor *g, const red_info *r) {
  if (p == 0) return F_ZEROS_LIKE(x); /* a count of non-zeros is piecewise constant (PyTorch: 0) */
  if (p == 1) return F_MUL(F_UN(SIGN, x), expand_back(f, g, r));
  if (isinf(p)) return F_MUL(even_ties(f, F_UN(ABS, x), y, g, r), F_UN(SIGN, x));
  /* d ||x||_p / dx = sign(x) |x|^(p-1) / y^(p-1); zero where y == 0. */
  vl_tensor *gy = expand_back(f, F_MASKED_FILL(F_DIV(g, F_POWS(y, p - 1)), F_SCALAR(EQ, y, 0.0), 0.0), r);
  if (p == 2) return F_MUL(x, gy);
  return F_MUL(F_MUL(F_POWS(F_UN(ABS, x), p - 1), F_UN(SIGN, x)), gy);
}

/* d prod / dx_i = prod_{j != i} x_j, without dividing by x (which fails at zeros): with x' = x
 * where x != 0 and 1 where x == 0, P' = prod x' and nz the count of zeros in the reduced slice,
 * the gradient is g P' / x' when nz == 0, g P' at the zero when nz == 1, and 0 when nz >= 2. */
static vl_tensor *prod_grad(vl_fs *f, vl_tensor *x, vl_tensor *g, const red_info *r) {
  vl_tensor *zero = F_SCALAR(EQ, x, 0.0);
  vl_tensor *x1 = F_MASKED_FILL(x, zero, 1.0);         /* x' */
  vl_tensor *p1 = reduce_kept(f, VL_RED_PROD, x1, r);   /* P' */
  vl_tensor *zmask = cast(f, zero, x->dtype);
  vl_tensor *nz = reduce_kept(f, VL_RED_SUM, zmask, r);
  vl_tensor *none = F_DIV(cast(f, F_SCALAR(EQ, nz, 0.0), x->dtype), x1);   /* [nz == 0] / x' */
  vl_tensor *one = F_MUL(zmask, cast(f, F_SCALAR(EQ, nz, 1.0), x->dtype)); /* [nz == 1] at the zero */
  return F_MUL(F_ADD(none, one), F_MUL(keep_dims(f, g, r), p1));
}

/* Saved: x (prod, var, norm, max/min over everything), y (norm, max/min: the result; the
 * indices when by_index). */
static vl_status reduce_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const reduce_ctx *c = VL_AG_CTX(n, reduce_ctx);
  double param = c->param;
  red_info r = c->r;
  vl_tensor *g = go[0], *sv[2], *res = NULL;
  VL_TRY(vl_node_saved_n(n, 2, sv));
  vl_tensor *x = sv[0], *y = sv[1];
  VL_FS(f);
  switch (c->op) {
    case VL_RED_SUM: res = expand_back(f, g, &r); break;
    case VL_RED_MEAN: res = expand_back(f, F_DIVS(g, (double)r.len), &r); break;
    case VL_RED_PROD: res = prod_grad(f, x, g, &r); break;
    case VL_RED_MAX:
    case VL_RED_MIN:
      if (c->by_index) { /* with a dim: into the positions the indices name (y holds them) */
        res = F_RUN(vl_zeros(r.ndim, r.size, g->dtype, g->storage->device, F_OUT));
        vl_tensor *ix = keep_dims(f, y, &r), *gk = keep_dims(f, g, &r);
        F_DO(vl_scatter_add_(res, r.dims[0], ix, gk));
      } else {
        res = even_ties(f, x, y, g, &r);
      }
      break;
    case VL_RED_VAR: /* 2 (x - mean) / (N - correction) */
      res = F_MULS(F_MUL(F_SUB(x, reduce_kept(f, VL_RED_MEAN, x, &r)), keep_dims(f, g, &r)),
                   2.0 / ((double)r.len - param));
      break;
    case VL_RED_NORM: res = norm_grad(f, param, x, y, g, &r); break;
    default: f->s = vl_fail(VL_EINTERNAL, "%s: unknown reduction %d", n->name, (int)c->op); break;
  }
  return vl_fs_give(f, n, 1, &res, gi);
}

vl_status vl_ag_reduce(vl_reduce_op op, vl_tensor *a, int ndims, const int *dims, bool keepdim, double param,
                       vl_tensor **out, vl_tensor **indices) {
  VL_AUTOCAST(vl_autocast_op_of_reduce(op), vl_ag_reduce(op, vl_ac[0], ndims, dims, keepdim, param, out, indices), a);
  vl_tensor *r, *ix = NULL;
  VL_TRY(vl_reduce(op, a, ndims, dims, keepdim, param, &r, indices ? &ix : NULL));
  vl_status s = VL_OK;
  if ((unsigned)op < VL_NREDUCE && vl_ag_needs(1, &a)) {
    reduce_ctx c = {.op = op, .param = param};
    info_of(a, ndims, dims, &c.r);
    bool minmax = op == VL_RED_MAX || op == VL_RED_MIN;
    c.by_index = minmax && ix && c.r.nred < a->ndim;
    bool save_x = !c.by_index && op != VL_RED_SUM && op != VL_RED_MEAN;
    bool save_y = c.by_index || minmax || op == VL_RED_NORM;
    s = VL_AG_RECORD(.name = red_nodes[op], .backward = reduce_bw, .nin = 1, .in = &a, .out = &r,
                     .save = {save_x ? a : NULL, save_y ? (c.by_index ? ix : r) : NULL}, VL_AG_CTX_OF(c));
  }
  if (s != VL_OK) {
    vl_tensor_release(r);
    vl_tensor_release(ix);
    return s;
  }
  *out = r;
  if (indices) *indices = ix;
  return VL_OK;
}

typedef struct softmax_ctx {
  int dim;
  bool log;
} softmax_ctx;

/* Saved: y. */
static vl_status softmax_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const softmax_ctx *c = VL_AG_CTX(n, softmax_ctx);
  vl_tensor *y, *dx = NULL;
  VL_TRY(vl_node_saved(n, 0, &y));
  VL_TRY(vl_softmax_backward(y, go[0], c->dim, c->log, &dx));
  return vl_ag_give(n, 0, dx, gi);
}

vl_status vl_ag_softmax(vl_tensor *a, int dim, bool log, vl_tensor **out) {
  VL_AUTOCAST(log ? VL_AC_LOG_SOFTMAX : VL_AC_SOFTMAX, vl_ag_softmax(vl_ac[0], dim, log, out), a);
  vl_tensor *r;
  VL_TRY(vl_softmax(a, dim, log, &r));
  softmax_ctx c = {dim, log};
  return vl_ag_out(VL_AG_RECORD(.name = log ? "LogSoftmaxBackward" : "SoftmaxBackward", .backward = softmax_bw,
                                .nin = 1, .in = &a, .out = &r, .save = {r}, VL_AG_CTX_OF(c)),
                   r, out);
}
