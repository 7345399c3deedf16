/* runtime/autograd/ops_scatter.c: the recorded scatter (assign) and index_put.
 *
 * Both overwrite positions of their input, so its gradient is the output's with those positions
 * zeroed (they no longer depend on it); the written source gets the output's gradient gathered at
 * the positions it went to. With accumulate (index_put), the input passes its gradient whole. */
#include <string.h>

#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops_internal.h"

typedef struct scatter_ctx {
  int dim;
  bool add; /* the positions were added to: self's gradient passes whole */
} scatter_ctx;

/* g with zeros written at index along dim (the positions a scatter overwrote). */
static vl_tensor *zero_at(vl_fs *f, vl_tensor *g, int dim, vl_tensor *index) {
  vl_tensor *r = F_RUN(vl_clone(g, F_OUT));
  vl_tensor *z = F_RUN(vl_scatter_value_src("scatter", r, index, vl_scalar_float(0), F_OUT));
  F_DO(vl_scatter_(r, dim, index, z));
  return r;
}

/* Inputs: 0 self, 1 src. Saved: index. */
static vl_status scatter_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  vl_tensor *index;
  VL_TRY(vl_node_saved(n, 0, &index));
  int dim = VL_AG_CTX(n, scatter_ctx)->dim;
  VL_FS(f);
  vl_tensor *gr[2] = {NULL, NULL};
  if (vl_ag_wants(n, 0)) gr[0] = VL_AG_CTX(n, scatter_ctx)->add ? go[0] : zero_at(f, go[0], dim, index);
  if (vl_ag_wants(n, 1)) {
    vl_tensor *t = F_RUN(vl_gather(go[0], dim, index, F_OUT));
    int nd;
    const int64_t *size = vl_ag_in_shape(n, 1, &nd);
    bool same = t && t->ndim == nd;
    for (int d = 0; same && d < nd; d++) same = t->size[d] == size[d];
    gr[1] = t;
    if (t && !same) { /* index smaller than src: t goes into the leading corner of zeros of src's shape */
      vl_tensor *z = F_RUN(vl_zeros(nd, size, t->dtype, t->storage->device, F_OUT)), *v = z;
      for (int d = 0; d < t->ndim; d++) v = F_RUN(vl_narrow(v, d, 0, t->size[d], F_OUT));
      F_DO(vl_copy_(v, t));
      gr[1] = z;
    }
  }
  return vl_fs_give(f, n, 2, gr, gi);
}

static vl_status rec_scatter(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor *y) {
  vl_tensor *in[2] = {self, src};
  scatter_ctx c = {dim < 0 ? dim + self->ndim : dim, false};
  return VL_AG_RECORD(.name = "ScatterBackward", .backward = scatter_bw, .nin = 2, .in = in, .out = &y,
                      .save = {index}, VL_AG_CTX_OF(c));
}

vl_status vl_ag_scatter(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_scatter(self, dim, index, src, &r));
  return vl_ag_out(rec_scatter(self, dim, index, src, r), r, out);
}

vl_status vl_ag_scatter_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src) {
  vl_tensor *in[2] = {self, src};
  bool rec = vl_dtype_is_float(self->dtype) && vl_ag_needs(2, in);
  VL_TRY(vl_ag_check_inplace("scatter_", self, rec));
  VL_TRY(vl_scatter_(self, dim, index, src));
  return rec ? rec_scatter(self, dim, index, src, self) : VL_OK;
}

/* reduce='multiply': not differentiable (products of repeated positions); refused when it would
 * record, so no gradient is silently wrong. */
vl_status vl_ag_scatter_mul(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, bool inplace, vl_tensor **out) {
  const char *op = inplace ? "scatter_" : "scatter";
  char d1[VL_DESC_LEN];
  vl_tensor *in[2] = {self, src};
  if (vl_dtype_is_float(self->dtype) && vl_ag_needs(2, in))
    return vl_fail(VL_EUNSUPPORTED, "%s: reduce='multiply' has no gradient (%s requires grad): run it under "
                   "v100.no_grad or on detached tensors", op, vl_tensor_desc(vl_requires_grad(self) ? self : src, d1, sizeof d1));
  if (inplace) return vl_scatter_into_(op, self, dim, index, src, VL_SCATTER_MUL);
  vl_tensor *r;
  VL_TRY(vl_clone(self, &r));
  return vl_ag_out(vl_scatter_into_(op, r, dim, index, src, VL_SCATTER_MUL), r, out);
}

/* ---- index_put ---- */

typedef struct index_put_ctx {
  int n;        /* indexed leading dims of x */
  bool accumulate;
  int vnd;      /* the indexed shape (B then x's trailing dims) */
  int64_t vsize[VL_MAX_DIMS];
} index_put_ctx;

/* Inputs: 0 x, 1 values. Saved: lin, the [M] row-major positions over x's first n dims. x's
 * gradient is g with the written positions zeroed (accumulate: g); values' is g at those positions
 * in the indexed shape (vl_ag_give sums it over values' broadcast dims). */
static vl_status index_put_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const index_put_ctx *c = VL_AG_CTX(n, index_put_ctx);
  vl_tensor *lin, *g = go[0];
  VL_TRY(vl_node_saved(n, 0, &lin));
  int64_t p = 1, r = 1, m = vl_tensor_numel(lin);
  for (int d = 0; d < g->ndim; d++) *(d < c->n ? &p : &r) *= g->size[d];
  int64_t pr[2] = {p, r};
  VL_FS(f);
  vl_tensor *gr[2] = {NULL, NULL};
  vl_tensor *gc = F_RUN(vl_contiguous(g, F_OUT));
  vl_tensor *g2 = F_RUN(vl_view(gc, 2, pr, F_OUT));
  if (vl_ag_wants(n, 0)) {
    if (c->accumulate || m == 0 || r == 0) {
      gr[0] = g;
    } else {
      vl_tensor *x = F_RUN(vl_clone(g, F_OUT));
      vl_tensor *x2 = F_RUN(vl_view(x, 2, pr, F_OUT));
      int64_t m1[2] = {m, 1}, mr[2] = {m, r};
      vl_tensor *l2 = F_RUN(vl_view(lin, 2, m1, F_OUT));
      vl_tensor *ix = F_RUN(vl_expand(l2, 2, mr, F_OUT));
      vl_tensor *z = F_RUN(vl_scatter_value_src("index_put", x2, ix, vl_scalar_float(0), F_OUT));
      F_DO(vl_scatter_(x2, 0, ix, z));
      gr[0] = x;
    }
  }
  if (vl_ag_wants(n, 1)) {
    vl_tensor *sel = F_RUN(vl_index_select(g2, 0, lin, F_OUT));
    vl_tensor *v = F_RUN(vl_reshape(sel, c->vnd, c->vsize, F_OUT));
    gr[1] = v;
  }
  return vl_fs_give(f, n, 2, gr, gi);
}

static vl_status rec_index_put(vl_tensor *x, vl_tensor *values, vl_tensor *lin, const index_put_ctx *c, vl_tensor *y) {
  vl_tensor *in[2] = {x, values};
  return VL_AG_RECORD(.name = "IndexPutBackward", .backward = index_put_bw, .nin = 2, .in = in, .out = &y,
                      .save = {lin}, .ctx = c, .ctx_size = sizeof *c);
}

/* PyTorch's rule for a bool mask among the indices: a k-dim mask stands for k index tensors, the
 * coordinates of its true elements over the k dims of x it covers (its shape must be theirs).
 * Fills idx[0..*m) with the index tensors (the masks' columns owned by the scope f). */
static void unmask(vl_fs *f, const char *op, vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor **idx, int *m) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  int k = 0;
  for (int i = 0; i < n && f->s == VL_OK; i++) {
    vl_tensor *t = indices[i];
    if (t->dtype != VL_BOOL) {
      if (k >= VL_MAX_DIMS) break;
      idx[k++] = t;
      continue;
    }
    bool fits = t->ndim >= 1 && k + t->ndim <= x->ndim;
    for (int d = 0; fits && d < t->ndim; d++) fits = t->size[d] == x->size[k + d];
    if (!fits) {
      f->s = vl_fail(VL_ESHAPE, "%s: the bool mask at index %d (%s) does not match the %d dims of self it covers from "
                     "dim %d (self %s)", op, i + 1, vl_shape_str(t, d2, sizeof d2), t->ndim, k + 1,
                     vl_tensor_desc(x, d1, sizeof d1));
      return;
    }
    vl_tensor *nz = F_RUN(vl_nonzero(t, false, F_OUT)); /* [count, ndim] coordinates */
    for (int d = 0; d < t->ndim; d++) idx[k++] = F_RUN(vl_select(nz, 1, d, F_OUT));
  }
  if (f->s == VL_OK && k > x->ndim)
    f->s = vl_fail(VL_EINVAL, "%s: the indices cover %d dims but self has %d (self %s)", op, k, x->ndim,
                   vl_tensor_desc(x, d1, sizeof d1));
  *m = k;
}

static vl_status index_put_any(const char *op, vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values,
                               bool accumulate, vl_tensor **out) {
  bool masks = false;
  for (int i = 0; i < n; i++) masks |= indices[i]->dtype == VL_BOOL;
  if (masks) { /* the same call with each mask replaced by its coordinates */
    vl_tensor *idx[VL_MAX_DIMS];
    int m = 0;
    VL_FS(f);
    for (int i = 0; i < n && f->s == VL_OK; i++) F_DO(vl_check_same_device(op, x, "self", indices[i], "index"));
    unmask(f, op, x, n, indices, idx, &m);
    vl_tensor *r = NULL;
    F_DO(index_put_any(op, x, m, idx, values, accumulate, out ? &r : NULL));
    if (!out) return vl_fs_close(f);
    vl_status s = vl_fs_close(f);
    return vl_ag_out(s, r, out);
  }
  vl_tensor *in[2] = {x, values};
  bool rec = vl_dtype_is_float(x->dtype) && vl_ag_needs(2, in);
  if (!out) {
    VL_TRY(vl_ag_check_inplace(op, x, rec));
    VL_TRY(vl_check_writable(op, x));
  }
  index_put_ctx c;
  memset(&c, 0, sizeof c);
  c.n = n;
  c.accumulate = accumulate;
  vl_tensor *lin = NULL, *y = NULL;
  VL_TRY(vl_index_put_plan(op, x, n, indices, values, &c.vnd, c.vsize, &lin));
  vl_status s = out ? vl_clone(x, &y) : (y = vl_tensor_retain(x), VL_OK);
  if (s == VL_OK) s = vl_index_put_lin_(op, y, n, lin, values, c.vnd, c.vsize, accumulate);
  if (s == VL_OK && rec) s = rec_index_put(x, values, lin, &c, y);
  vl_tensor_release(lin);
  if (!out) {
    vl_tensor_release(y);
    return s;
  }
  return vl_ag_out(s, y, out);
}

vl_status vl_ag_index_put(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate,
                          vl_tensor **out) {
  return index_put_any("index_put", x, n, indices, values, accumulate, out);
}

vl_status vl_ag_index_put_(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate) {
  return index_put_any("index_put_", x, n, indices, values, accumulate, NULL);
}

vl_status vl_ag_index_put_as_(const char *op, vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values,
                              bool accumulate) {
  return index_put_any(op, x, n, indices, values, accumulate, NULL);
}

/* ---- index_add / index_copy / index_fill: scatters along dim of a 1-D index ---- */

static const char *const index_names[][2] = {{"index_add", "index_add_"}, {"index_copy", "index_copy_"},
                                             {"index_fill", "index_fill_"}};
static const char *const index_nodes[] = {"IndexAddBackward", "IndexCopyBackward", "IndexFillBackward"};

vl_status vl_ag_index_write(vl_index_write kind, vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src,
                            vl_scalar value, bool inplace, vl_tensor **out) {
  const char *op = index_names[kind][inplace];
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN], d3[VL_DESC_LEN];
  int d;
  if (self->ndim == 0)
    return vl_fail(VL_ESHAPE, "%s: self is 0-dim (%s): view it as a 1-element tensor first", op,
                   vl_tensor_desc(self, d1, sizeof d1));
  VL_TRY(vl_wrap_dim(op, dim, self->ndim, &d));
  VL_TRY(vl_check_same_device(op, self, "self", index, "index"));
  if ((index->dtype != VL_I64 && index->dtype != VL_I32) || index->ndim > 1)
    return vl_fail(index->ndim > 1 ? VL_ESHAPE : VL_EDTYPE, "%s: index must be a 1-D i64 or i32 tensor (self %s, index %s)",
                   op, vl_tensor_desc(self, d1, sizeof d1), vl_tensor_desc(index, d2, sizeof d2));
  int64_t k = vl_tensor_numel(index);
  int nd = self->ndim;
  int64_t shape[VL_MAX_DIMS], ones[VL_MAX_DIMS]; /* src's shape; the index viewed along d */
  for (int i = 0; i < nd; i++) shape[i] = self->size[i], ones[i] = 1;
  shape[d] = ones[d] = k;
  if (src) {
    VL_TRY(vl_check_same_device(op, self, "self", src, "source"));
    bool fits = src->ndim == nd;
    for (int i = 0; fits && i < nd; i++) fits = src->size[i] == shape[i];
    if (!fits)
      return vl_fail(VL_ESHAPE, "%s: source must have self's shape with %lld (the index's length) in dim %d (self %s, "
                     "index %s, source %s)", op, (long long)k, d + 1, vl_tensor_desc(self, d1, sizeof d1),
                     vl_tensor_desc(index, d2, sizeof d2), vl_tensor_desc(src, d3, sizeof d3));
    if (src->dtype != self->dtype)
      return vl_fail(VL_EDTYPE, "%s: source dtype %s differs from self dtype %s (self %s, source %s)", op,
                     vl_dtype_name(src->dtype), vl_dtype_name(self->dtype), vl_tensor_desc(self, d1, sizeof d1),
                     vl_tensor_desc(src, d3, sizeof d3));
  }
  vl_tensor *in[2] = {self, src};
  bool rec = vl_dtype_is_float(self->dtype) && vl_ag_needs(src ? 2 : 1, in);
  if (inplace) VL_TRY(vl_ag_check_inplace(op, self, rec));
  VL_FS(f);
  vl_tensor *iv = F_RUN(vl_view(index, nd, ones, F_OUT)); /* index along d, expanded over src */
  vl_tensor *ix = F_RUN(vl_expand(iv, nd, shape, F_OUT));
  vl_tensor *sv = src ? src : F_RUN(vl_scatter_value_src(op, self, ix, value, F_OUT));
  vl_tensor *y = inplace ? self : F_RUN(vl_clone(self, F_OUT));
  F_DO(vl_scatter_into_(op, y, d, ix, sv, kind == VL_INDEX_ADD ? VL_SCATTER_ADD : VL_SCATTER_SET));
  if (rec && f->s == VL_OK) {
    scatter_ctx c = {d, kind == VL_INDEX_ADD};
    f->s = VL_AG_RECORD(.name = index_nodes[kind], .backward = scatter_bw, .nin = 2, .in = in, .out = &y,
                        .save = {ix}, VL_AG_CTX_OF(c));
  }
  if (inplace) return vl_fs_close(f);
  return vl_fs_end(f, y, out);
}
