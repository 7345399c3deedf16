/* runtime/autograd/ops_reduce.c: recorded reductions (sum, mean, prod, max/min, var, norm) and
 * softmax / log_softmax. The node keeps the input's shape and which dims were reduced (ints),
 * so the gradient can be reshaped to the keepdim shape and expanded back. */
#include <math.h>

#include "runtime/autograd/ops.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

static const char *const red_nodes[] = {"SumBackward", "ProdBackward", "MeanBackward", "MaxBackward",
                                                  "MinBackward", "VarBackward",  "NormBackward"};
VL_TABLE_SIZE(red_nodes, VL_NREDUCE);

/* ints: 0 op, 1 keepdim, 2 bit mask of reduced dims, 3 input ndim, 4.. input sizes;
 * 12 whether indices were saved. scalars: 0 param. */
typedef struct red_info {
  int ndim, nred, dims[VL_MAX_DIMS];
  int64_t size[VL_MAX_DIMS], ksize[VL_MAX_DIMS], len;
} red_info;

static void info_of(const vl_node *n, red_info *r) {
  r->ndim = (int)n->ints[3];
  r->nred = 0;
  r->len = 1;
  for (int i = 0; i < r->ndim; i++) {
    r->size[i] = n->ints[4 + i];
    bool red = (n->ints[2] >> i) & 1;
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

static vl_status reduce_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_reduce_op op = (vl_reduce_op)n->ints[0];
  double param = n->scalars[0];
  red_info r;
  info_of(n, &r);
  vl_tensor *g = go[0], *x = NULL, *y = NULL, *t[5] = {0}, *res = NULL;
  if (n->nsaved > 0) VL_TRY(vl_node_saved(n, 0, &x));
  if (n->nsaved > 1) VL_TRY(vl_node_saved(n, 1, &y));
  vl_status s = VL_OK;
  switch (op) {
    case VL_RED_SUM: s = expand_back(g, &r, &res); break;
    case VL_RED_MEAN:
      s = vl_binary_scalar(VL_BIN_DIV, g, (double)r.len, false, &t[0]);
      if (s == VL_OK) s = expand_back(t[0], &r, &res);
      break;
    case VL_RED_PROD: s = prod_grad(x, g, &r, &res); break;
    case VL_RED_MAX:
    case VL_RED_MIN:
      if (n->ints[12]) { /* with a dim: into the positions the indices name */
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
    default: s = vl_fail(VL_EINTERNAL, "%s: unknown reduction %d", n->name, (int)op); break;
  }
  for (int i = 0; i < 5; i++) vl_tensor_release(t[i]);
  if (s != VL_OK) {
    vl_tensor_release(res);
    return s;
  }
  return vl_ag_give(n, 0, res, gi);
}

vl_status vl_ag_reduce(vl_reduce_op op, vl_tensor *a, int ndims, const int *dims, bool keepdim, double param,
                       vl_tensor **out, vl_tensor **indices) {
  vl_tensor *r, *ix = NULL;
  VL_TRY(vl_reduce(op, a, ndims, dims, keepdim, param, &r, indices ? &ix : NULL));
  vl_status s = VL_OK;
  if (vl_dtype_is_float(r->dtype) && (unsigned)op < VL_NREDUCE && vl_ag_needs(1, &a)) {
    vl_node *n;
    s = vl_node_create(red_nodes[op], reduce_bw, 1, &a, 1, &n);
    if (s == VL_OK) {
      int64_t mask = 0;
      for (int i = 0; i < ndims; i++) mask |= (int64_t)1 << (dims[i] < 0 ? dims[i] + a->ndim : dims[i]);
      if (ndims == 0) mask = ((int64_t)1 << a->ndim) - 1;
      bool all = mask == ((int64_t)1 << a->ndim) - 1;
      n->ints[0] = op;
      n->ints[1] = keepdim;
      n->ints[2] = mask;
      n->ints[3] = a->ndim;
      for (int i = 0; i < a->ndim; i++) n->ints[4 + i] = a->size[i];
      n->scalars[0] = param;
      bool minmax = op == VL_RED_MAX || op == VL_RED_MIN;
      n->ints[12] = minmax && ix && !all;
      if (n->ints[12]) { /* slot 0 unused, slot 1 the indices */
        s = vl_node_save(n, NULL);
        if (s == VL_OK) s = vl_node_save(n, ix);
      } else if (op == VL_RED_PROD) {
        s = vl_node_save(n, a);
      } else if (minmax || op == VL_RED_NORM) {
        s = vl_node_save(n, a);
        if (s == VL_OK) s = vl_node_save(n, r);
      } else if (op == VL_RED_VAR) {
        s = vl_node_save(n, a);
      }
      s = s == VL_OK ? vl_ag_finish(n, 1, &r) : (vl_node_release(n), s);
    }
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

static vl_status softmax_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *y, *dx = NULL;
  VL_TRY(vl_node_saved(n, 0, &y));
  VL_TRY(vl_softmax_backward(y, go[0], (int)n->ints[0], n->ints[1] != 0, &dx));
  return vl_ag_give(n, 0, dx, gi);
}

vl_status vl_ag_softmax(vl_tensor *a, int dim, bool log, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_softmax(a, dim, log, &r));
  vl_status s = VL_OK;
  if (vl_ag_needs(1, &a)) {
    vl_node *n;
    s = vl_node_create(log ? "LogSoftmaxBackward" : "SoftmaxBackward", softmax_bw, 1, &a, 1, &n);
    if (s == VL_OK) {
      n->ints[0] = dim;
      n->ints[1] = log;
      s = vl_node_save(n, r);
      s = s == VL_OK ? vl_ag_finish(n, 1, &r) : (vl_node_release(n), s);
    }
  }
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}
