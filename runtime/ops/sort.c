/* runtime/ops/sort.c: sorting and selection: sort, topk, kthvalue, median, unique, searchsorted.
 *
 * One kernel does the sorting (vl_kernels.sort: a stable sort of every row along a dim, NaN the
 * largest value, -0.0 tied with +0.0, the same order on every backend); topk, kthvalue and median
 * select from its result and unique composes it with comparisons and a scatter. Selecting from a
 * full sort costs O(n log n) where a radix select would be O(n): that dedicated kernel is a later
 * optimisation, the results would not change. searchsorted is its own kernel (a binary search). */
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/ops/ops_internal.h"

/* The dim of a sort-family op: a 0-dim tensor takes dim 0 or -1 (one element), as in PyTorch. */
static vl_status sort_dim(const char *op, const vl_tensor *x, int dim, int *d) {
  if (x->ndim == 0) {
    if (dim != 0 && dim != -1)
      return vl_fail(VL_EINVAL, "%s: dim %d out of range for a 0-dim tensor (1 or -1)", op, vl_dim_user(dim));
    *d = 0;
    return VL_OK;
  }
  return vl_wrap_dim(op, dim, x->ndim, d);
}

/* A 0-dim tensor as the 1-element 1-D tensor the ops work on; others retained as they are. */
static vl_status as_1d(vl_tensor *x, vl_tensor **out) {
  int64_t one = 1;
  if (x->ndim == 0) return vl_reshape(x, 1, &one, out);
  *out = vl_tensor_retain(x);
  return VL_OK;
}

/* r (one element when the input was 0-dim) back to 0-dim: replaces *t. */
static vl_status back_to_0d(vl_tensor **t) {
  if ((*t)->ndim == 0 || vl_tensor_numel(*t) != 1) return VL_OK;
  vl_tensor *r;
  int64_t none = 1;
  VL_TRY(vl_reshape(*t, 0, &none, &r));
  vl_tensor_release(*t);
  *t = r;
  return VL_OK;
}

/* The sort of x (at least 1-D) along dim d: contiguous values and i64 indices of x's shape. */
static vl_status sort_raw(const char *op, vl_tensor *x, int d, bool descending, vl_tensor **values,
                          vl_tensor **indices) {
  vl_device dev = x->storage->device;
  vl_tensor *xc = NULL, *v = NULL, *ix = NULL;
  vl_status s = vl_contiguous(x, &xc);
  if (s == VL_OK) s = vl_tensor_empty_op(op, x->ndim, x->size, x->dtype, dev, &v);
  if (s == VL_OK) s = vl_tensor_empty_op(op, x->ndim, x->size, VL_I64, dev, &ix);
  if (s == VL_OK && vl_tensor_numel(x) > 0) {
    vl_sort_args a = {.dtype = x->dtype, .in = vl_tensor_data(xc), .values = vl_tensor_data(v),
                      .indices = (int64_t *)vl_tensor_data(ix), .outer = 1, .len = x->size[d], .inner = 1,
                      .descending = descending};
    for (int i = 0; i < d; i++) a.outer *= x->size[i];
    for (int i = d + 1; i < x->ndim; i++) a.inner *= x->size[i];
    s = vl_exec_of(op, dev, &a.ex);
    if (s == VL_OK) s = vl_backend_of(dev)->ops->sort(&a);
  }
  vl_tensor_release(xc);
  if (s != VL_OK) {
    vl_tensor_release(v);
    vl_tensor_release(ix);
    return s;
  }
  *values = v;
  *indices = ix;
  return VL_OK;
}

/* v and i narrowed to [start, start + len) along d (contiguous copies); with squeeze, d removed. */
static vl_status pick(vl_tensor *v, vl_tensor *i, int d, int64_t start, int64_t len, bool squeeze, vl_tensor **vo,
                      vl_tensor **io) {
  vl_tensor *t[2] = {v, i}, *r[2] = {NULL, NULL};
  vl_status s = VL_OK;
  for (int k = 0; k < 2 && s == VL_OK; k++) {
    vl_tensor *n = NULL, *q = NULL;
    s = vl_narrow(t[k], d, start, len, &n);
    if (s == VL_OK && squeeze) s = vl_squeeze(n, d, &q);
    if (s == VL_OK) s = vl_contiguous(q ? q : n, &r[k]);
    vl_tensor_release(n);
    vl_tensor_release(q);
  }
  if (s != VL_OK) {
    vl_tensor_release(r[0]);
    vl_tensor_release(r[1]);
    return s;
  }
  *vo = r[0];
  *io = r[1];
  return VL_OK;
}

/* Runs the selection `body` on x as 1-D when it is 0-dim, and gives its one-element results back
 * as 0-dim. */
typedef vl_status (*select_fn)(vl_tensor *x, int d, const void *arg, vl_tensor **v, vl_tensor **i);
static vl_status with_0d(const char *op, vl_tensor *x, int dim, select_fn fn, const void *arg, vl_tensor **values,
                         vl_tensor **indices) {
  int d;
  VL_TRY(sort_dim(op, x, dim, &d));
  vl_tensor *x1 = NULL, *v = NULL, *i = NULL;
  VL_TRY(as_1d(x, &x1));
  vl_status s = fn(x1, d, arg, &v, &i);
  if (s == VL_OK && x->ndim == 0) s = back_to_0d(&v);
  if (s == VL_OK && x->ndim == 0) s = back_to_0d(&i);
  vl_tensor_release(x1);
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

static vl_status sort_fn(vl_tensor *x, int d, const void *arg, vl_tensor **v, vl_tensor **i) {
  return sort_raw("sort", x, d, *(const bool *)arg, v, i);
}

vl_status vl_sort(vl_tensor *x, int dim, bool descending, vl_tensor **values, vl_tensor **indices) {
  return with_0d("sort", x, dim, sort_fn, &descending, values, indices);
}

typedef struct topk_arg {
  int64_t k;
  bool largest;
} topk_arg;

static vl_status topk_fn(vl_tensor *x, int d, const void *arg, vl_tensor **v, vl_tensor **i) {
  const topk_arg *t = arg;
  char d1[VL_DESC_LEN];
  if (t->k < 0 || t->k > x->size[d])
    return vl_fail(VL_EINVAL, "topk: k = %lld is out of range for dim %d of size %lld (k must be 0 to %lld; self %s)",
                   (long long)t->k, d + 1, (long long)x->size[d], (long long)x->size[d],
                   vl_tensor_desc(x, d1, sizeof d1));
  /* The largest first (a stable descending sort: ties keep the lower index first), or the
   * smallest first; always sorted (PyTorch's sorted=false leaves the order unspecified). */
  vl_tensor *sv, *si;
  VL_TRY(sort_raw("topk", x, d, t->largest, &sv, &si));
  vl_status s = pick(sv, si, d, 0, t->k, false, v, i);
  vl_tensor_release(sv);
  vl_tensor_release(si);
  return s;
}

vl_status vl_topk(vl_tensor *x, int64_t k, int dim, bool largest, vl_tensor **values, vl_tensor **indices) {
  topk_arg t = {k, largest};
  return with_0d("topk", x, dim, topk_fn, &t, values, indices);
}

typedef struct kth_arg {
  int64_t k; /* 1-based */
  bool keepdim;
} kth_arg;

static vl_status kth_fn(vl_tensor *x, int d, const void *arg, vl_tensor **v, vl_tensor **i) {
  const kth_arg *t = arg;
  char d1[VL_DESC_LEN];
  if (t->k < 1 || t->k > x->size[d])
    return vl_fail(VL_EINVAL, "kthvalue: k = %lld is out of range for dim %d of size %lld (k is 1-based: 1 to %lld; "
                   "self %s)", (long long)t->k, d + 1, (long long)x->size[d], (long long)x->size[d],
                   vl_tensor_desc(x, d1, sizeof d1));
  vl_tensor *sv, *si;
  VL_TRY(sort_raw("kthvalue", x, d, false, &sv, &si));
  vl_status s = pick(sv, si, d, t->k - 1, 1, !t->keepdim, v, i);
  vl_tensor_release(sv);
  vl_tensor_release(si);
  return s;
}

vl_status vl_kthvalue(vl_tensor *x, int64_t k, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices) {
  kth_arg t = {k, keepdim};
  return with_0d("kthvalue", x, dim, kth_fn, &t, values, indices);
}

/* The lower median, position h = (n - 1) / 2 of the ascending sort; a row holding NaN gives its
 * first NaN (torch.median propagates NaN), which the sort put at position n - (NaN count). The
 * position per row is (count > 0 ? n - count : h), made with elementwise ops on the device. */
static vl_status median_fn(vl_tensor *x, int d, const void *arg, vl_tensor **v, vl_tensor **i) {
  bool keepdim = *(const bool *)arg;
  char d1[VL_DESC_LEN];
  int64_t n = x->size[d], h = (n - 1) / 2;
  if (n == 0)
    return vl_fail(VL_EINVAL, "median: dim %d has size 0: an empty dim has no median (self %s)", d + 1,
                   vl_tensor_desc(x, d1, sizeof d1));
  vl_tensor *sv, *si;
  VL_TRY(sort_raw("median", x, d, false, &sv, &si));
  vl_status s;
  if (!vl_dtype_is_float(x->dtype)) {
    s = pick(sv, si, d, h, 1, !keepdim, v, i);
  } else {
    vl_tensor *nan = NULL, *cnt = NULL, *has = NULL, *first = NULL, *hpos = NULL, *pos = NULL;
    vl_tensor *gv = NULL, *gi = NULL;
    s = vl_unary(VL_UN_ISNAN, sv, &nan);
    if (s == VL_OK) s = vl_reduce(VL_RED_SUM, nan, 1, &d, true, 0.0, &cnt, NULL); /* i64 */
    if (s == VL_OK) s = vl_binary_scalar(VL_BIN_GT, cnt, 0.0, false, &has);
    if (s == VL_OK) s = vl_binary_scalar(VL_BIN_SUB, cnt, (double)n, true, &first); /* n - count */
    if (s == VL_OK) s = vl_full(cnt->ndim, cnt->size, (double)h, VL_I64, x->storage->device, &hpos);
    if (s == VL_OK) s = vl_where(has, first, hpos, &pos);
    if (s == VL_OK) s = vl_gather_as("median", sv, d, pos, &gv);
    if (s == VL_OK) s = vl_gather_as("median", si, d, pos, &gi);
    if (s == VL_OK) s = pick(gv, gi, d, 0, 1, !keepdim, v, i);
    vl_tensor *tmp[] = {nan, cnt, has, first, hpos, pos, gv, gi};
    for (size_t k = 0; k < sizeof tmp / sizeof tmp[0]; k++) vl_tensor_release(tmp[k]);
  }
  vl_tensor_release(sv);
  vl_tensor_release(si);
  return s;
}

vl_status vl_median(vl_tensor *x, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices) {
  return with_0d("median", x, dim, median_fn, &keepdim, values, indices);
}

/* ---- unique ---- */

/* The flattened x sorted (stable), then the first element of every run of equal values marked
 * (s[j] != s[j-1]: every NaN is a run of its own, as in PyTorch; -0.0 and +0.0 are one run, whose
 * value is the first of them in x). The marks are read on the host, since the result's size depends
 * on the data (a synchronisation on a GPU, as torch.unique is): run starts, counts and each sorted
 * element's run number are made there, the values are selected on the device and each element's
 * run number is scattered back to its place in x (the inverse). */
vl_status vl_unique(vl_tensor *x, bool want_inverse, bool want_counts, vl_tensor **values, vl_tensor **inverse,
                    vl_tensor **counts) {
  const char *op = "unique";
  vl_device dev = x->storage->device;
  int64_t n = vl_tensor_numel(x), zero = 0;
  vl_tensor *flat = NULL, *sv = NULL, *si = NULL, *a = NULL, *b = NULL, *ne = NULL;
  vl_tensor *st = NULL, *ct = NULL, *gt = NULL, *vals = NULL, *inv = NULL, *cnt = NULL, *invf = NULL;
  uint8_t *marks = NULL;
  int64_t *starts = NULL, *cn = NULL, *gid = NULL, m = 0;
  vl_status s = vl_reshape(x, 1, &n, &flat);
  if (s == VL_OK && n == 0) {
    s = vl_tensor_empty_op(op, 1, &zero, x->dtype, dev, &vals);
    if (s == VL_OK && want_inverse) s = vl_tensor_empty_op(op, x->ndim, x->size, VL_I64, dev, &inv);
    if (s == VL_OK && want_counts) s = vl_tensor_empty_op(op, 1, &zero, VL_I64, dev, &cnt);
    goto done;
  }
  if (s == VL_OK) s = sort_raw(op, flat, 0, false, &sv, &si);
  marks = malloc((size_t)n);
  starts = malloc(sizeof(int64_t) * (size_t)n);
  cn = malloc(sizeof(int64_t) * (size_t)n);
  gid = malloc(sizeof(int64_t) * (size_t)n);
  if (s == VL_OK && (!marks || !starts || !cn || !gid))
    s = vl_fail(VL_EOOM, "unique: out of host memory (%lld elements)", (long long)n);
  if (s == VL_OK) marks[0] = 1;
  if (s == VL_OK && n > 1) {
    s = vl_narrow(sv, 0, 1, n - 1, &a);
    if (s == VL_OK) s = vl_narrow(sv, 0, 0, n - 1, &b);
    if (s == VL_OK) s = vl_binary(VL_BIN_NE, a, b, 1.0, &ne);
    if (s == VL_OK) s = vl_read_host(op, ne, marks + 1);
  }
  for (int64_t j = 0; s == VL_OK && j < n; j++) {
    if (marks[j]) {
      starts[m] = j;
      cn[m++] = 0;
    }
    cn[m - 1]++;
    gid[j] = m - 1;
  }
  if (s == VL_OK) s = vl_from_host(starts, 1, &m, VL_I64, dev, &st);
  if (s == VL_OK) s = vl_index_select_as(op, sv, 0, st, &vals);
  if (s == VL_OK && want_counts) s = vl_from_host(cn, 1, &m, VL_I64, dev, &cnt);
  if (s == VL_OK && want_inverse) {
    s = vl_from_host(gid, 1, &n, VL_I64, dev, &gt);
    if (s == VL_OK) s = vl_zeros(1, &n, VL_I64, dev, &invf);
    if (s == VL_OK) s = vl_scatter_add_(invf, 0, si, gt); /* si is a permutation: one write each */
    if (s == VL_OK) s = vl_reshape(invf, x->ndim, x->size, &inv);
  }
done:
  free(marks), free(starts), free(cn), free(gid);
  {
    vl_tensor *tmp[] = {flat, sv, si, a, b, ne, st, ct, gt, invf};
    for (size_t k = 0; k < sizeof tmp / sizeof tmp[0]; k++) vl_tensor_release(tmp[k]);
  }
  if (s != VL_OK) {
    vl_tensor_release(vals);
    vl_tensor_release(inv);
    vl_tensor_release(cnt);
    return s;
  }
  *values = vals;
  if (want_inverse) *inverse = inv;
  if (want_counts) *counts = cnt;
  return VL_OK;
}

/* ---- searchsorted ---- */

vl_status vl_searchsorted(vl_tensor *seq, vl_tensor *values, bool right, bool out_i32, vl_tensor **out) {
  const char *op = "searchsorted";
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(vl_check_same_device(op, seq, "sorted_sequence", values, "values"));
  if (seq->ndim == 0)
    return vl_fail(VL_ESHAPE, "searchsorted: sorted_sequence must have at least 1 dim, got a 0-dim tensor "
                   "(sorted_sequence %s, values %s)", vl_tensor_desc(seq, d1, sizeof d1), vl_tensor_desc(values, d2, sizeof d2));
  bool same_lead = values->ndim == seq->ndim;
  for (int i = 0; same_lead && i < seq->ndim - 1; i++) same_lead = values->size[i] == seq->size[i];
  if (seq->ndim > 1 && !same_lead)
    return vl_fail(VL_ESHAPE, "searchsorted: a sorted_sequence of %d dims needs values with the same leading dims "
                   "(all but the last), or a 1-D sorted_sequence (sorted_sequence %s, values %s)", seq->ndim,
                   vl_tensor_desc(seq, d1, sizeof d1), vl_tensor_desc(values, d2, sizeof d2));
  vl_device dev = seq->storage->device;
  vl_dtype dt = vl_dtype_promote(seq->dtype, values->dtype); /* compared exactly in the common dtype */
  vl_tensor *sc = NULL, *vc = NULL, *s1 = NULL, *v1 = NULL, *r = NULL;
  vl_status s = vl_cast(seq, dt, &sc);
  if (s == VL_OK) s = vl_cast(values, dt, &vc);
  if (s == VL_OK) s = vl_contiguous(sc, &s1);
  if (s == VL_OK) s = vl_contiguous(vc, &v1);
  if (s == VL_OK) s = vl_tensor_empty_op(op, values->ndim, values->size, out_i32 ? VL_I32 : VL_I64, dev, &r);
  int64_t total = vl_tensor_numel(values), n = seq->size[seq->ndim - 1];
  if (s == VL_OK && total > 0) {
    int64_t rows = 1; /* the leading dims: one row of boundaries each (1 for a 1-D sequence) */
    for (int i = 0; i < seq->ndim - 1; i++) rows *= seq->size[i];
    vl_search_args a = {.dtype = dt, .seq = vl_tensor_data(s1), .values = vl_tensor_data(v1), .out = vl_tensor_data(r),
                        .rows = rows, .seq_rows = seq->ndim == 1 ? 1 : rows, .n = n, .m = total / rows,
                        .right = right, .out_i32 = out_i32};
    s = vl_exec_of(op, dev, &a.ex);
    if (s == VL_OK) s = vl_backend_of(dev)->ops->searchsorted(&a);
  }
  vl_tensor_release(sc);
  vl_tensor_release(vc);
  vl_tensor_release(s1);
  vl_tensor_release(v1);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}
