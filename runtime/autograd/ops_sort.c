/* runtime/autograd/ops_sort.c: recorded sort, topk, kthvalue and median. Their values are elements
 * of the input picked by the indices, so the gradient goes back to the picked positions: a scatter
 * of the incoming gradient through the saved indices into zeros of the input's shape (positions
 * not picked get 0). The indices themselves carry no gradient (i64); unique and searchsorted are
 * not differentiable and have no recorded form. */
#include <math.h>

#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops_internal.h"

typedef struct pick_ctx {
  int dim;    /* 0-based, wrapped */
  bool keep;  /* the values keep dim (sort, topk, keepdim): else it is unsqueezed back first */
  int ndim;   /* the input's */
  int64_t size[VL_MAX_DIMS];
} pick_ctx;

/* Saved: the indices (the values' shape). */
static vl_status pick_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const pick_ctx *c = VL_AG_CTX(n, pick_ctx);
  vl_tensor *ix, *g = go[0], *res = NULL;
  VL_TRY(vl_node_saved(n, 0, &ix));
  VL_FS(f);
  if (c->ndim == 0) { /* a 0-dim input: its one element was picked, or nothing (topk k = 0) */
    res = vl_tensor_numel(g) == 1 ? F_RUN(vl_reshape(g, 0, c->size, F_OUT))
                                   : F_RUN(vl_zeros(0, c->size, g->dtype, g->storage->device, F_OUT));
  } else {
    vl_tensor *gk = c->keep ? g : F_RUN(vl_unsqueeze(g, c->dim, F_OUT));
    vl_tensor *ik = c->keep ? ix : F_RUN(vl_unsqueeze(ix, c->dim, F_OUT));
    res = F_RUN(vl_zeros(c->ndim, c->size, g->dtype, g->storage->device, F_OUT));
    F_DO(vl_scatter_add_(res, c->dim, ik, gk));
  }
  return vl_fs_give(f, n, 1, &res, gi);
}

/* Records node `name` for values v picked from x by indices i along dim (keep: v keeps dim). */
static vl_status record_pick(const char *name, vl_tensor *x, int dim, bool keep, vl_tensor *v, vl_tensor *i) {
  if (!vl_ag_needs(1, &x)) return VL_OK;
  pick_ctx c = {.dim = 0, .keep = keep, .ndim = x->ndim};
  for (int k = 0; k < x->ndim; k++) c.size[k] = x->size[k];
  if (x->ndim > 0) VL_TRY(vl_wrap_dim(name, dim, x->ndim, &c.dim));
  return VL_AG_RECORD(.name = name, .backward = pick_bw, .nin = 1, .in = &x, .out = &v, .save = {i},
                      VL_AG_CTX_OF(c));
}

/* The end of a recorded pick: both results handed out, or both released on failure. */
static vl_status pick_out(vl_status s, vl_tensor *v, vl_tensor *i, vl_tensor **values, vl_tensor **indices) {
  if (s != VL_OK) {
    vl_tensor_release(v);
    vl_tensor_release(i);
    return s;
  }
  *values = v;
  if (indices) *indices = i;
  else vl_tensor_release(i);
  return VL_OK;
}

vl_status vl_ag_sort(vl_tensor *x, int dim, bool descending, vl_tensor **values, vl_tensor **indices) {
  vl_tensor *v, *i;
  VL_TRY(vl_sort(x, dim, descending, &v, &i));
  return pick_out(record_pick("SortBackward", x, dim, true, v, i), v, i, values, indices);
}

vl_status vl_ag_topk(vl_tensor *x, int64_t k, int dim, bool largest, vl_tensor **values, vl_tensor **indices) {
  vl_tensor *v, *i;
  VL_TRY(vl_topk(x, k, dim, largest, &v, &i));
  return pick_out(record_pick("TopkBackward", x, dim, true, v, i), v, i, values, indices);
}

vl_status vl_ag_kthvalue(vl_tensor *x, int64_t k, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices) {
  vl_tensor *v, *i;
  VL_TRY(vl_kthvalue(x, k, dim, keepdim, &v, &i));
  return pick_out(record_pick("KthvalueBackward", x, dim, keepdim, v, i), v, i, values, indices);
}

vl_status vl_ag_median(vl_tensor *x, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices) {
  vl_tensor *v, *i;
  VL_TRY(vl_median(x, dim, keepdim, &v, &i));
  return pick_out(record_pick("MedianBackward", x, dim, keepdim, v, i), v, i, values, indices);
}

/* torch.median(x): the lower median of all elements as a 0-dim tensor, through the flattened x
 * (recorded, so the gradient reaches x's shape); an empty float tensor gives NaN, as PyTorch. */
vl_status vl_ag_median_all(vl_tensor *x, vl_tensor **out) {
  char d[VL_DESC_LEN];
  if (vl_tensor_numel(x) == 0) {
    if (!vl_dtype_is_float(x->dtype))
      return vl_fail(VL_EINVAL, "median: an empty %s tensor has no median (self %s)", vl_dtype_name(x->dtype),
                     vl_tensor_desc(x, d, sizeof d));
    return vl_full(0, NULL, NAN, x->dtype, x->storage->device, out);
  }
  int64_t flat = -1;
  vl_tensor *xf, *v;
  VL_TRY(vl_ag_reshape(x, 1, &flat, &xf));
  vl_status s = vl_ag_median(xf, 0, false, &v, NULL);
  vl_tensor_release(xf);
  if (s == VL_OK) *out = v;
  return s;
}
