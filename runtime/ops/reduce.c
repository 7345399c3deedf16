/* runtime/ops/reduce.c: reductions, argmax/argmin and softmax front ends. */
#include <math.h>
#include <stdio.h>

#include "runtime/ops/ops_internal.h"

static const char *const red_names[] = {"sum", "prod", "mean", "max", "min", "var", "norm"};
VL_TABLE_SIZE(red_names, VL_NREDUCE);

typedef struct red_plan {
  bool red[VL_MAX_DIMS];
  int nred;
  bool all;
  int64_t len;
} red_plan;

static vl_status plan_dims(const char *name, const vl_tensor *a, int ndims, const int *dims, red_plan *p) {
  char d[VL_DESC_LEN];
  for (int i = 0; i < VL_MAX_DIMS; i++) p->red[i] = false;
  p->nred = 0;
  if (ndims < 0 || ndims > VL_MAX_DIMS)
    return vl_fail(VL_EINVAL, "%s: %d dims given, at most %d allowed", name, ndims, VL_MAX_DIMS);
  for (int i = 0; i < ndims; i++) {
    int w;
    VL_TRY(vl_wrap_dim(name, dims[i], a->ndim, &w));
    if (p->red[w])
      return vl_fail(VL_EINVAL, "%s: dim %d appears more than once (a %s)", name, w + 1, vl_tensor_desc(a, d, sizeof d));
    p->red[w] = true;
    p->nred++;
  }
  if (ndims == 0) {
    for (int i = 0; i < a->ndim; i++) p->red[i] = true;
    p->nred = a->ndim;
  }
  p->all = p->nred == a->ndim;
  p->len = 1;
  for (int i = 0; i < a->ndim; i++)
    if (p->red[i]) p->len *= a->size[i];
  return VL_OK;
}

static vl_status reduce_op(const char *name, vl_reduce_op op, vl_tensor *a, int ndims, const int *dims, bool keepdim,
                           double param, vl_tensor **out, vl_tensor **indices) {
  char d[VL_DESC_LEN];
  red_plan p = {{false}, 0, false, 0};
  VL_TRY(plan_dims(name, a, ndims, dims, &p));
  bool is_float = vl_dtype_is_float(a->dtype);
  if ((op == VL_RED_MEAN || op == VL_RED_VAR || op == VL_RED_NORM) && !is_float)
    return vl_fail(VL_EDTYPE, "%s: expected a float tensor, got %s (a %s)", name, vl_dtype_name(a->dtype),
                   vl_tensor_desc(a, d, sizeof d));
  /* p = 0 counts the non-zeros, as torch.linalg.vector_norm(x, 0); negative p is not offered */
  if (op == VL_RED_NORM && !(param >= 0))
    return vl_fail(VL_EINVAL, "%s: p must be >= 0, got %g", name, param);
  if (op == VL_RED_VAR && !(param >= 0))
    return vl_fail(VL_EINVAL, "%s: correction must be >= 0, got %g", name, param);
  bool minmax = op == VL_RED_MAX || op == VL_RED_MIN;
  if (indices && !minmax) return vl_fail(VL_EINVAL, "%s: only max and min return indices", name);
  if (indices && p.nred != 1 && !p.all)
    return vl_fail(VL_EINVAL, "%s: indices need exactly one dim or all dims, got %d dims (a %s)", name, p.nred,
                   vl_tensor_desc(a, d, sizeof d));
  if (minmax && p.len == 0)
    return vl_fail(VL_EINVAL, "%s: cannot reduce over an empty dim; the operation has no identity (a %s)", name,
                   vl_tensor_desc(a, d, sizeof d));
  /* the inf-norm is a max: PyTorch refuses it over nothing, finite p give 0 */
  if (op == VL_RED_NORM && isinf(param) && p.len == 0)
    return vl_fail(VL_EINVAL, "%s: cannot take the inf-norm over an empty dim; the max has no identity (a %s)", name,
                   vl_tensor_desc(a, d, sizeof d));
  vl_dtype out_dt = (op == VL_RED_SUM || op == VL_RED_PROD) && !is_float ? VL_I64 : a->dtype;

  int ond = 0;
  int64_t osize[VL_MAX_DIMS];
  for (int i = 0; i < a->ndim; i++) {
    if (!p.red[i]) osize[ond++] = a->size[i];
    else if (keepdim) osize[ond++] = 1;
  }

  /* The kernel's [outer, len, inner] form directly when the reduced dims are one block of a
   * contiguous tensor (size-1 kept dims inside the block do not move any element). */
  int lo = -1, hi = -1;
  for (int i = 0; i < a->ndim; i++)
    if (p.red[i]) {
      if (lo < 0) lo = i;
      hi = i;
    }
  bool direct = vl_tensor_is_contiguous(a);
  for (int i = lo; direct && i >= 0 && i <= hi; i++)
    if (!p.red[i] && a->size[i] != 1) direct = false;

  vl_tensor *in = NULL, *r = NULL, *ix = NULL;
  int64_t outer = 1, inner = 1;
  vl_status s = VL_OK;
  if (direct) {
    in = vl_tensor_retain(a);
    for (int i = 0; i < a->ndim; i++) {
      if (lo >= 0 && i < lo) outer *= a->size[i];
      if (lo >= 0 && i > hi) inner *= a->size[i];
      if (lo < 0) outer *= a->size[i]; /* nothing reduced: every dim is kept */
    }
  } else {
    int perm[VL_MAX_DIMS], n = 0;
    for (int i = 0; i < a->ndim; i++)
      if (!p.red[i]) {
        perm[n++] = i;
        outer *= a->size[i];
      }
    for (int i = 0; i < a->ndim; i++)
      if (p.red[i]) perm[n++] = i;
    vl_tensor *pv;
    s = vl_permute(a, a->ndim, perm, &pv);
    if (s == VL_OK) {
      s = vl_contiguous(pv, &in);
      vl_tensor_release(pv);
    }
  }
  if (s == VL_OK) s = vl_tensor_empty(ond, osize, out_dt, a->storage->device, &r);
  if (s == VL_OK && indices) s = vl_tensor_empty(ond, osize, VL_I64, a->storage->device, &ix);
  if (s == VL_OK && outer * inner > 0) {
    vl_reduce_args ra = {op, a->dtype, out_dt, vl_tensor_data(in), vl_tensor_data(r),
                         ix ? (int64_t *)vl_tensor_data(ix) : NULL, outer, p.len, inner, param, {0, NULL}};
    s = vl_exec_of(name, a->storage->device, &ra.ex);
    if (s == VL_OK) s = vl_backend_of(a->storage->device)->ops->reduce(&ra);
  }
  vl_tensor_release(in);
  if (s != VL_OK) {
    vl_tensor_release(r);
    vl_tensor_release(ix);
    return s;
  }
  *out = r;
  if (indices) *indices = ix;
  return VL_OK;
}

vl_status vl_reduce(vl_reduce_op op, vl_tensor *a, int ndims, const int *dims, bool keepdim, double param,
                    vl_tensor **out, vl_tensor **indices) {
  if ((unsigned)op >= VL_NREDUCE) return vl_fail(VL_EINVAL, "reduce: invalid op %d", (int)op);
  return reduce_op(red_names[op], op, a, ndims, dims, keepdim, param, out, indices);
}

static vl_status arg_reduce(const char *name, vl_reduce_op op, vl_tensor *a, int dim, bool keepdim, vl_tensor **out) {
  vl_tensor *vals, *idx;
  if (dim == VL_DIM_ALL) VL_TRY(reduce_op(name, op, a, 0, NULL, keepdim, 0, &vals, &idx));
  else VL_TRY(reduce_op(name, op, a, 1, &dim, keepdim, 0, &vals, &idx));
  vl_tensor_release(vals);
  *out = idx;
  return VL_OK;
}

vl_status vl_argmax(vl_tensor *a, int dim, bool keepdim, vl_tensor **out) {
  return arg_reduce("argmax", VL_RED_MAX, a, dim, keepdim, out);
}

vl_status vl_argmin(vl_tensor *a, int dim, bool keepdim, vl_tensor **out) {
  return arg_reduce("argmin", VL_RED_MIN, a, dim, keepdim, out);
}

vl_status vl_softmax(vl_tensor *a, int dim, bool log, vl_tensor **out) {
  const char *name = log ? "log_softmax" : "softmax";
  char d[VL_DESC_LEN];
  if (!vl_dtype_is_float(a->dtype))
    return vl_fail(VL_EDTYPE, "%s: expected a float tensor, got %s (a %s)", name, vl_dtype_name(a->dtype),
                   vl_tensor_desc(a, d, sizeof d));
  int w = 0;
  /* A 0-dim tensor behaves as one element along dim 0 / -1, as in PyTorch. */
  if (a->ndim == 0 && (dim == 0 || dim == -1)) w = 0;
  else VL_TRY(vl_wrap_dim(name, dim, a->ndim, &w));
  int64_t outer = 1, len = 1, inner = 1;
  for (int i = 0; i < a->ndim; i++) {
    if (i < w) outer *= a->size[i];
    else if (i == w) len = a->size[i];
    else inner *= a->size[i];
  }
  vl_tensor *in = NULL, *r = NULL;
  vl_status s = vl_contiguous(a, &in);
  if (s == VL_OK) s = vl_tensor_empty(a->ndim, a->size, a->dtype, a->storage->device, &r);
  if (s == VL_OK && vl_tensor_numel(a) > 0) {
    vl_softmax_args sa = {a->dtype, vl_tensor_data(in), vl_tensor_data(r), outer, len, inner, log, {0, NULL}};
    s = vl_exec_of(name, a->storage->device, &sa.ex);
    if (s == VL_OK) s = vl_backend_of(a->storage->device)->ops->softmax(&sa);
  }
  vl_tensor_release(in);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}
