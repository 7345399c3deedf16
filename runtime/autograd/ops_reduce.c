/* runtime/autograd/ops_reduce.c: recorded reductions (sum, mean, prod, max/min, var, norm) and
 * softmax / log_softmax. */
#include <math.h>

#include "runtime/amp/autocast.h"
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
static vl_status keep(vl_tensor *t, const red_info *r, vl_tensor **out) { return vl_reshape(t, r->ndim, r->ksize, out); }

/* ... and expanded back over the input's shape. */
static vl_status expand_back(vl_tensor *t, const red_info *r, vl_tensor **out) {
  vl_tensor *k;
  VL_TRY(keep(t, r, &k));
  vl_status s = vl_expand(k, r->ndim, r->size, out);
  vl_tensor_release(k);
  return s;
}

static vl_status mul(vl_tensor *a, vl_tensor *b, vl_tensor **o) { return vl_binary(VL_BIN_MUL, a, b, 1.0, o); }

/* Gradient spread evenly over the positions where `val` (|x| for the inf-norm, x otherwise)
 * equals the result y: ties share it, as PyTorch does for max/min without a dim. */
static vl_status even_ties(vl_tensor *val, vl_tensor *y, vl_tensor *g, const red_info *r, vl_tensor **out) {
  vl_tensor *t[6] = {0};
  vl_status s = expand_back(y, r, &t[0]);
  if (s == VL_OK) s = vl_binary(VL_BIN_EQ, val, t[0], 1.0, &t[1]);
  if (s == VL_OK) s = vl_to(t[1], g->dtype, g->storage->device, &t[2]);
  if (s == VL_OK) s = vl_reduce(VL_RED_SUM, t[2], r->nred, r->dims, true, 0, &t[3], NULL);
  if (s == VL_OK) s = keep(g, r, &t[4]);
  if (s == VL_OK) s = vl_binary(VL_BIN_DIV, t[4], t[3], 1.0, &t[5]);
  if (s == VL_OK) s = mul(t[2], t[5], out);
  for (int i = 0; i < 6; i++) vl_tensor_release(t[i]);
  return s;
}

static vl_status norm_grad(double p, vl_tensor *x, vl_tensor *y, vl_tensor *g, const red_info *r, vl_tensor **out) {
  vl_tensor *t[8] = {0};
  vl_status s = VL_OK;
  if (p == 1) {
    s = vl_unary(VL_UN_SIGN, x, &t[0]);
    if (s == VL_OK) s = expand_back(g, r, &t[1]);
    if (s == VL_OK) s = mul(t[0], t[1], out);
  } else if (isinf(p)) {
    s = vl_unary(VL_UN_ABS, x, &t[0]);
    if (s == VL_OK) s = even_ties(t[0], y, g, r, &t[1]);
    if (s == VL_OK) s = vl_unary(VL_UN_SIGN, x, &t[2]);
    if (s == VL_OK) s = mul(t[1], t[2], out);
  } else {
    /* d ||x||_p / dx = sign(x) |x|^(p-1) / y^(p-1); zero where y == 0. */
    s = vl_binary_scalar(VL_BIN_POW, y, p - 1, false, &t[0]);
    if (s == VL_OK) s = vl_binary(VL_BIN_DIV, g, t[0], 1.0, &t[1]);
    if (s == VL_OK) s = vl_binary_scalar(VL_BIN_EQ, y, 0.0, false, &t[2]);
    if (s == VL_OK) s = vl_masked_fill(t[1], t[2], 0.0, &t[3]);
    if (s == VL_OK) s = expand_back(t[3], r, &t[4]);
    if (p == 2) {
      if (s == VL_OK) s = mul(x, t[4], out);
    } else {
      if (s == VL_OK) s = vl_unary(VL_UN_ABS, x, &t[5]);
      if (s == VL_OK) s = vl_binary_scalar(VL_BIN_POW, t[5], p - 1, false, &t[6]);
      if (s == VL_OK) s = vl_unary(VL_UN_SIGN, x, &t[7]);
      vl_tensor_release(t[5]);
      t[5] = NULL;
      if (s == VL_OK) s = mul(t[6], t[7], &t[5]);
      if (s == VL_OK) s = mul(t[5], t[4], out);
    }
  }
  for (int i = 0; i < 8; i++) vl_tensor_release(t[i]);
  return s;
}

/* d prod / dx_i = prod_{j != i} x_j, without dividing by x (which fails at zeros): with x' = x
 * where x != 0 and 1 where x == 0, P' = prod x' and nz the count of zeros in the reduced slice,
 * the gradient is g P' / x' when nz == 0, g P' at the zero when nz == 1, and 0 when nz >= 2. */
static vl_status prod_grad(vl_tensor *x, vl_tensor *g, const red_info *r, vl_tensor **out) {
  vl_tensor *t[14] = {0};
  vl_status s = vl_binary_scalar(VL_BIN_EQ, x, 0.0, false, &t[0]);
  if (s == VL_OK) s = vl_masked_fill(x, t[0], 1.0, &t[1]);                          /* x' */
  if (s == VL_OK) s = vl_reduce(VL_RED_PROD, t[1], r->nred, r->dims, true, 0, &t[2], NULL); /* P' */
  if (s == VL_OK) s = vl_cast(t[0], x->dtype, &t[3]);                                 /* zero mask */
  if (s == VL_OK) s = vl_reduce(VL_RED_SUM, t[3], r->nred, r->dims, true, 0, &t[4], NULL);  /* nz */
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_EQ, t[4], 0.0, false, &t[5]);
  if (s == VL_OK) s = vl_cast(t[5], x->dtype, &t[6]);
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_EQ, t[4], 1.0, false, &t[7]);
  if (s == VL_OK) s = vl_cast(t[7], x->dtype, &t[8]);
  if (s == VL_OK) s = vl_binary(VL_BIN_DIV, t[6], t[1], 1.0, &t[9]);                 /* [nz == 0] / x' */
  if (s == VL_OK) s = mul(t[3], t[8], &t[10]);                                        /* [nz == 1] at the zero */
  if (s == VL_OK) s = vl_binary(VL_BIN_ADD, t[9], t[10], 1.0, &t[11]);
  if (s == VL_OK) s = keep(g, r, &t[12]);
  if (s == VL_OK) s = mul(t[12], t[2], &t[13]);
  if (s == VL_OK) s = mul(t[11], t[13], out);
  for (int i = 0; i < 14; i++) vl_tensor_release(t[i]);
  return s;
}

/* Saved: x (prod, var, norm, max/min over everything), y (norm, max/min: the result; the
 * indices when by_index). */
static vl_status reduce_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const reduce_ctx *c = VL_AG_CTX(n, reduce_ctx);
  double param = c->param;
  red_info r = c->r;
  vl_tensor *g = go[0], *sv[2], *t[5] = {0}, *res = NULL;
  VL_TRY(vl_node_saved_n(n, 2, sv));
  vl_tensor *x = sv[0], *y = sv[1];
  vl_status s = VL_OK;
  switch (c->op) {
    case VL_RED_SUM: s = expand_back(g, &r, &res); break;
    case VL_RED_MEAN:
      s = vl_binary_scalar(VL_BIN_DIV, g, (double)r.len, false, &t[0]);
      if (s == VL_OK) s = expand_back(t[0], &r, &res);
      break;
    case VL_RED_PROD: s = prod_grad(x, g, &r, &res); break;
    case VL_RED_MAX:
    case VL_RED_MIN:
      if (c->by_index) { /* with a dim: into the positions the indices name */
        s = vl_zeros(r.ndim, r.size, g->dtype, g->storage->device, &res);
        if (s == VL_OK) s = keep(y, &r, &t[0]); /* y holds the indices here */
        if (s == VL_OK) s = keep(g, &r, &t[1]);
        if (s == VL_OK) s = vl_scatter_add_(res, r.dims[0], t[0], t[1]);
      } else {
        s = even_ties(x, y, g, &r, &res);
      }
      break;
    case VL_RED_VAR: { /* 2 (x - mean) / (N - correction) */
      s = vl_reduce(VL_RED_MEAN, x, r.nred, r.dims, true, 0, &t[0], NULL);
      if (s == VL_OK) s = vl_binary(VL_BIN_SUB, x, t[0], 1.0, &t[1]);
      if (s == VL_OK) s = keep(g, &r, &t[2]);
      if (s == VL_OK) s = mul(t[1], t[2], &t[3]);
      if (s == VL_OK) s = vl_binary_scalar(VL_BIN_MUL, t[3], 2.0 / ((double)r.len - param), false, &res);
      break;
    }
    case VL_RED_NORM: s = norm_grad(param, x, y, g, &r, &res); break;
    default: s = vl_fail(VL_EINTERNAL, "%s: unknown reduction %d", n->name, (int)c->op); break;
  }
  vl_ag_drop(5, t);
  return vl_ag_give_n(n, s, 1, &res, gi);
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
