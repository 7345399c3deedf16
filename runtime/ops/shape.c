/* runtime/ops/shape.c: the shape ops' checks and their compositions (runtime/ops/shape.h says why
 * they are compositions and how the same code serves the raw and the recorded ops).
 *
 * The copies that move elements along a dim (flip, roll, the reflect/replicate/circular pads,
 * repeat_interleave) are one index_select each, with an index as long as the dim computed on the
 * tensor's device from an arange by elementwise ops (no host upload, no synchronisation): the
 * index is small beside the tensor, and index_select is already a strided gather kernel on every
 * device, so a dedicated kernel would save little. Only
 * repeat_interleave with a tensor of counts reads them on the host (as PyTorch does: the result's
 * size depends on them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ops/ops_internal.h"
#include "runtime/ops/shape.h"

const vl_shape_prims vl_shape_raw = {
    .reshape = vl_reshape,
    .expand = vl_expand,
    .permute = vl_permute,
    .narrow = vl_narrow,
    .index_select = vl_index_select,
    .cat = vl_cat,
    .masked_fill = vl_masked_fill,
    .clone = vl_clone,
};

/* Replaces *x (owned) by the result *r of an op on it (read after the op ran: r is passed by
 * address because C leaves the order of argument evaluation open). */
static vl_status step(vl_tensor **x, vl_status s, vl_tensor **r) {
  if (s != VL_OK) return s;
  vl_tensor_release(*x);
  *x = *r;
  return VL_OK;
}

/* x gathered along d by the i64 index *idx (consumed: released either way). */
static vl_status select_by(const vl_shape_prims *p, vl_tensor **x, int d, vl_tensor *idx) {
  vl_tensor *r = NULL;
  vl_status s = p->index_select(*x, d, idx, &r);
  vl_tensor_release(idx);
  return step(x, s, &r);
}

/* The index positions 0..len-1 (i64) on x's device. */
static vl_status iota(const vl_tensor *x, int64_t len, vl_tensor **out) {
  return vl_arange(0, (double)len, 1, VL_I64, x->storage->device, out);
}

/* *i = *i op s (s op *i when reverse), in place of the owned index (exact: i64 and integral s). */
static vl_status idx_op(vl_tensor **i, vl_binary_op op, int64_t v, bool reverse) {
  vl_tensor *r = NULL;
  return step(i, vl_binary_scalar(op, *i, (double)v, reverse, &r), &r);
}

static int64_t *index_buf(const char *op, int64_t len) {
  int64_t *b = malloc(sizeof(int64_t) * (size_t)(len > 0 ? len : 1));
  if (!b) vl_fail(VL_EOOM, "%s: out of host memory for an index of %lld elements", op, (long long)len);
  return b;
}

/* A copy of t (a new tensor, as PyTorch's copies always are) when a composition did nothing. */
static vl_status copy_if_same(const vl_shape_prims *p, vl_tensor *t, vl_tensor **x) {
  if ((*x)->storage != t->storage) return VL_OK;
  vl_tensor *r;
  return step(x, p->clone(*x, &r), &r);
}

/* ---- views ---- */

vl_status vl_flatten_with(const vl_shape_prims *p, vl_tensor *t, int start, int end, vl_tensor **out) {
  int nd = t->ndim ? t->ndim : 1, s, e;
  VL_TRY(vl_wrap_dim("flatten", start, nd, &s));
  VL_TRY(vl_wrap_dim("flatten", end, nd, &e));
  if (s > e)
    return vl_fail(VL_EINVAL, "flatten: start_dim %d comes after end_dim %d (a tensor of %d dims)", vl_dim_user(start),
                   vl_dim_user(end), t->ndim);
  if (t->ndim == 0) return p->reshape(t, 1, (int64_t[]){1}, out);
  int64_t size[VL_MAX_DIMS], m = 1;
  int k = 0;
  for (int i = 0; i < s; i++) size[k++] = t->size[i];
  for (int i = s; i <= e; i++) m *= t->size[i]; /* a part of numel: cannot overflow */
  size[k++] = m;
  for (int i = e + 1; i < t->ndim; i++) size[k++] = t->size[i];
  return p->reshape(t, k, size, out);
}

vl_status vl_unflatten_with(const vl_shape_prims *p, vl_tensor *t, int dim, int n, const int64_t *sizes,
                            vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  int d;
  VL_TRY(vl_wrap_dim("unflatten", dim, t->ndim, &d));
  if (n < 1) return vl_fail(VL_EINVAL, "unflatten: sizes must not be empty");
  if (t->ndim - 1 + n > VL_MAX_DIMS)
    return vl_fail(VL_EINVAL, "unflatten: the result would have %d dims, at most %d are supported", t->ndim - 1 + n,
                   VL_MAX_DIMS);
  int64_t sz[VL_MAX_DIMS], known = 1;
  int infer = -1;
  for (int i = 0; i < n; i++) {
    if (sizes[i] == -1 && infer < 0) {
      infer = i;
      continue;
    }
    if (sizes[i] < 0)
      return vl_fail(VL_EINVAL, "unflatten: invalid size %lld in sizes %s (one -1 is allowed)", (long long)sizes[i],
                     vl_shape_fmt(n, sizes, d1, sizeof d1));
    if (__builtin_mul_overflow(known, sizes[i], &known)) known = -1;
  }
  int64_t len = t->size[d];
  memcpy(sz, sizes, sizeof(int64_t) * (size_t)n);
  if (infer >= 0 && known > 0 && len % known == 0) sz[infer] = len / known;
  else if (infer >= 0 || known != len)
    return vl_fail(VL_ESHAPE, "unflatten: sizes %s do not multiply to the size %lld of dim %d (%s)",
                   vl_shape_fmt(n, sizes, d1, sizeof d1), (long long)len, vl_dim_user(dim),
                   vl_tensor_desc(t, d2, sizeof d2));
  int64_t size[VL_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < d; i++) size[k++] = t->size[i];
  for (int i = 0; i < n; i++) size[k++] = sz[i];
  for (int i = d + 1; i < t->ndim; i++) size[k++] = t->size[i];
  return p->reshape(t, k, size, out);
}

/* The dims of a list, wrapped and checked to appear once (`what` names the list). */
static vl_status dim_list(const char *op, const char *what, const vl_tensor *t, int n, const int *dims, int *w) {
  bool seen[VL_MAX_DIMS] = {false};
  if (n > VL_MAX_DIMS) return vl_fail(VL_EINVAL, "%s: %d %s given for a tensor of %d dims", op, n, what, t->ndim);
  for (int i = 0; i < n; i++) {
    VL_TRY(vl_wrap_dim(op, dims[i], t->ndim, &w[i]));
    if (seen[w[i]])
      return vl_fail(VL_EINVAL, "%s: dim %d appears more than once in %s", op, vl_dim_user(dims[i]), what);
    seen[w[i]] = true;
  }
  return VL_OK;
}

vl_status vl_movedim_with(const vl_shape_prims *p, vl_tensor *t, int n, const int *src, const int *dst,
                          vl_tensor **out) {
  int s[VL_MAX_DIMS], d[VL_MAX_DIMS], perm[VL_MAX_DIMS];
  VL_TRY(dim_list("movedim", "source", t, n, src, s));
  VL_TRY(dim_list("movedim", "destination", t, n, dst, d));
  bool used_src[VL_MAX_DIMS] = {false}, used_dst[VL_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) {
    perm[d[i]] = s[i];
    used_src[s[i]] = used_dst[d[i]] = true;
  }
  /* the other dims fill the free positions in their order */
  int next = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (used_dst[i]) continue;
    while (used_src[next]) next++;
    perm[i] = next++;
  }
  return p->permute(t, t->ndim, perm, out);
}

vl_status vl_diagonal(vl_tensor *t, int64_t offset, int d1, int d2, vl_tensor **out) {
  int a, b;
  VL_TRY(vl_wrap_dim("diagonal", d1, t->ndim, &a));
  VL_TRY(vl_wrap_dim("diagonal", d2, t->ndim, &b));
  if (a == b)
    return vl_fail(VL_EINVAL, "diagonal: dim1 and dim2 must differ, both are dim %d", vl_dim_user(d1));
  int64_t len, at = t->offset;
  if (offset >= 0) {
    len = offset >= t->size[b] ? 0 : t->size[b] - offset;
    if (len > t->size[a]) len = t->size[a];
    if (len > 0) at += offset * t->stride[b];
  } else {
    len = -offset >= t->size[a] ? 0 : t->size[a] + offset;
    if (len > t->size[b]) len = t->size[b];
    if (len > 0) at += -offset * t->stride[a];
  }
  int64_t size[VL_MAX_DIMS], stride[VL_MAX_DIMS];
  int k = 0;
  for (int i = 0; i < t->ndim; i++)
    if (i != a && i != b) {
      size[k] = t->size[i];
      stride[k++] = t->stride[i];
    }
  size[k] = len;
  stride[k++] = t->stride[a] + t->stride[b];
  return vl_as_strided(t, k, size, stride, at, out);
}

vl_status vl_split_sizes(vl_tensor *t, int n, const int64_t *sizes, int dim, vl_tensor ***outs) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  int d;
  VL_TRY(vl_wrap_dim("split", dim, t->ndim, &d));
  if (n < 1) return vl_fail(VL_EINVAL, "split: the list of sizes must not be empty");
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (sizes[i] < 0) return vl_fail(VL_EINVAL, "split: size %d of the list is negative (%lld)", i + 1, (long long)sizes[i]);
    if (__builtin_add_overflow(sum, sizes[i], &sum)) sum = -1;
  }
  if (sum != t->size[d])
    return vl_fail(VL_ESHAPE, "split: sizes %s add up to %lld but dim %d has size %lld (%s)",
                   vl_shape_fmt(n, sizes, d1, sizeof d1), (long long)sum, vl_dim_user(dim), (long long)t->size[d],
                   vl_tensor_desc(t, d2, sizeof d2));
  vl_tensor **arr = calloc((size_t)n, sizeof *arr);
  if (!arr) return vl_fail(VL_EOOM, "split: out of host memory");
  vl_status s = VL_OK;
  int64_t at = 0;
  for (int i = 0; i < n && s == VL_OK; i++) {
    s = vl_narrow(t, d, at, sizes[i], &arr[i]);
    at += sizes[i];
  }
  if (s != VL_OK) {
    for (int i = 0; i < n; i++) vl_tensor_release(arr[i]);
    free(arr);
    return s;
  }
  *outs = arr;
  return VL_OK;
}

/* ---- copies along a dim ---- */

vl_status vl_flip_with(const vl_shape_prims *p, vl_tensor *t, int n, const int *dims, vl_tensor **out) {
  int w[VL_MAX_DIMS];
  VL_TRY(dim_list("flip", "dims", t, n, dims, w));
  vl_tensor *x = vl_tensor_retain(t);
  vl_status s = VL_OK;
  for (int i = 0; i < n && s == VL_OK; i++) {
    int64_t len = t->size[w[i]];
    if (len <= 1) continue; /* nothing to reverse */
    vl_tensor *idx = NULL;
    s = iota(t, len, &idx);
    if (s == VL_OK) s = idx_op(&idx, VL_BIN_SUB, len - 1, true); /* len - 1 - i */
    if (s == VL_OK) s = select_by(p, &x, w[i], idx);
    else vl_tensor_release(idx);
  }
  if (s == VL_OK) s = copy_if_same(p, t, &x);
  if (s != VL_OK) {
    vl_tensor_release(x);
    return s;
  }
  *out = x;
  return VL_OK;
}

/* out[i] = x[(i - shift) mod len] along d. */
static vl_status roll_dim(const vl_shape_prims *p, vl_tensor **x, int d, int64_t shift) {
  int64_t len = (*x)->size[d];
  if (len == 0) return VL_OK;
  int64_t sh = shift % len;
  if (sh < 0) sh += len;
  if (sh == 0) return VL_OK;
  vl_tensor *idx = NULL;
  vl_status s = iota(*x, len, &idx);
  if (s == VL_OK) s = idx_op(&idx, VL_BIN_ADD, len - sh, false);
  if (s == VL_OK) s = idx_op(&idx, VL_BIN_REMAINDER, len, false); /* (i - sh) mod len */
  if (s != VL_OK) {
    vl_tensor_release(idx);
    return s;
  }
  return select_by(p, x, d, idx);
}

vl_status vl_roll_with(const vl_shape_prims *p, vl_tensor *t, int nshifts, const int64_t *shifts, int ndims,
                       const int *dims, vl_tensor **out) {
  if (ndims == 0 && nshifts != 1)
    return vl_fail(VL_EINVAL, "roll: without dims, shifts must be one number (got %d shifts)", nshifts);
  if (ndims > 0 && nshifts != ndims)
    return vl_fail(VL_EINVAL, "roll: %d shifts but %d dims: they must pair up", nshifts, ndims);
  int w[VL_MAX_DIMS];
  if (ndims > VL_MAX_DIMS) return vl_fail(VL_EINVAL, "roll: %d dims given for a tensor of %d dims", ndims, t->ndim);
  for (int i = 0; i < ndims; i++) VL_TRY(vl_wrap_dim("roll", dims[i], t->ndim, &w[i])); /* repeats allowed */
  vl_tensor *x = vl_tensor_retain(t), *r = NULL;
  vl_status s = VL_OK;
  if (ndims == 0) {
    int64_t numel = vl_tensor_numel(t);
    s = step(&x, p->reshape(x, 1, &numel, &r), &r);
    if (s == VL_OK) s = roll_dim(p, &x, 0, shifts[0]);
    if (s == VL_OK) s = copy_if_same(p, t, &x);
    if (s == VL_OK) s = step(&x, p->reshape(x, t->ndim, t->size, &r), &r);
  } else {
    for (int i = 0; i < ndims && s == VL_OK; i++) s = roll_dim(p, &x, w[i], shifts[i]);
    if (s == VL_OK) s = copy_if_same(p, t, &x);
  }
  if (s != VL_OK) {
    vl_tensor_release(x);
    return s;
  }
  *out = x;
  return VL_OK;
}

/* ---- triangles: masked_fill with a mask from two aranges ---- */

vl_status vl_tri_with(const vl_shape_prims *p, vl_tensor *t, int64_t k, bool upper, vl_tensor **out) {
  char d1[VL_DESC_LEN];
  const char *op = upper ? "triu" : "tril";
  if (t->ndim < 2)
    return vl_fail(VL_ESHAPE, "%s: the input must have at least 2 dims, got %s", op, vl_tensor_desc(t, d1, sizeof d1));
  int64_t rows = t->size[t->ndim - 2], cols = t->size[t->ndim - 1];
  /* |k| beyond rows + cols changes nothing: clamped so the comparison in doubles is exact */
  int64_t lim = rows + cols + 1;
  if (k > lim) k = lim;
  if (k < -lim) k = -lim;
  vl_device dev = t->storage->device;
  vl_tensor *r = NULL, *c = NULL, *rv = NULL, *cv = NULL, *diff = NULL, *mask = NULL;
  vl_status s = vl_arange(0, (double)rows, 1, VL_I64, dev, &r);
  if (s == VL_OK) s = vl_arange(0, (double)cols, 1, VL_I64, dev, &c);
  if (s == VL_OK) s = vl_view(r, 2, (int64_t[]){rows, 1}, &rv);
  if (s == VL_OK) s = vl_view(c, 2, (int64_t[]){1, cols}, &cv);
  if (s == VL_OK) s = vl_binary(VL_BIN_SUB, cv, rv, 1.0, &diff); /* column - row */
  /* the mask of the elements zeroed: outside the kept triangle */
  if (s == VL_OK) s = vl_binary_scalar(upper ? VL_BIN_LT : VL_BIN_GT, diff, (double)k, false, &mask);
  if (s == VL_OK) s = p->masked_fill(t, mask, 0.0, out);
  vl_tensor_release(r);
  vl_tensor_release(c);
  vl_tensor_release(rv);
  vl_tensor_release(cv);
  vl_tensor_release(diff);
  vl_tensor_release(mask);
  return s;
}

/* ---- repeats ---- */

static vl_status repeat_impl(const char *op, const vl_shape_prims *p, vl_tensor *t, int n, const int64_t *reps,
                             vl_tensor **out) {
  char d1[VL_DESC_LEN];
  if (n < t->ndim)
    return vl_fail(VL_EINVAL, "%s: %d repeats given for a tensor of %d dims (at least one per dim)", op, n, t->ndim);
  if (n > VL_MAX_DIMS) return vl_fail(VL_EINVAL, "%s: %d repeats, at most %d dims are supported", op, n, VL_MAX_DIMS);
  int lead = n - t->ndim;
  int64_t src[VL_MAX_DIMS] = {0}, fin[VL_MAX_DIMS] = {0};
  for (int i = 0; i < n; i++) {
    if (reps[i] < 0) return vl_fail(VL_EINVAL, "%s: repeats must not be negative, got %lld for dim %d", op, (long long)reps[i], i + 1);
    src[i] = i < lead ? 1 : t->size[i - lead];
    if (__builtin_mul_overflow(src[i], reps[i], &fin[i]))
      return vl_fail(VL_EINVAL, "%s: the result of repeating %s is too large", op, vl_tensor_desc(t, d1, sizeof d1));
  }
  VL_TRY(vl_shape_check(op, n, fin, t->dtype, NULL));
  /* One copy: t seen as [1, s1, 1, s2, ...] (a view), expanded to [r1, s1, r2, s2, ...] and
   * reshaped to [r1 s1, r2 s2, ...]. A dim whose size or repeat is 1 needs no extra dim (a size-1
   * dim expands to its repeat directly); dims beyond VL_MAX_DIMS are gathered by index_select. */
  int64_t vs[VL_MAX_DIMS], es[VL_MAX_DIMS];
  int k = 0, extra = 0;
  bool later[VL_MAX_DIMS] = {false};
  for (int i = 0; i < n; i++) {
    bool split = reps[i] != 1 && src[i] != 1;
    if (split && n + extra + 1 <= VL_MAX_DIMS) {
      extra++;
      vs[k] = 1;
      es[k++] = reps[i];
      vs[k] = src[i];
      es[k++] = src[i];
    } else {
      later[i] = split;
      vs[k] = src[i];
      es[k++] = split ? src[i] : fin[i];
    }
  }
  vl_tensor *x = vl_tensor_retain(t), *r = NULL;
  vl_status s = step(&x, p->reshape(x, k, vs, &r), &r);
  if (s == VL_OK) s = step(&x, p->expand(x, k, es, &r), &r);
  int64_t mid[VL_MAX_DIMS];
  for (int i = 0; i < n; i++) mid[i] = later[i] ? src[i] : fin[i];
  if (s == VL_OK) s = step(&x, p->reshape(x, n, mid, &r), &r);
  for (int i = 0; i < n && s == VL_OK; i++) {
    if (!later[i]) continue;
    vl_tensor *idx = NULL;
    s = iota(t, fin[i], &idx);
    if (s == VL_OK) s = idx_op(&idx, VL_BIN_REMAINDER, src[i], false); /* j mod s */
    if (s == VL_OK) s = select_by(p, &x, i, idx);
    else vl_tensor_release(idx);
  }
  if (s == VL_OK) s = copy_if_same(p, t, &x);
  if (s != VL_OK) {
    vl_tensor_release(x);
    return s;
  }
  *out = x;
  return VL_OK;
}

vl_status vl_repeat_with(const vl_shape_prims *p, vl_tensor *t, int n, const int64_t *reps, vl_tensor **out) {
  return repeat_impl("repeat", p, t, n, reps, out);
}

vl_status vl_tile_with(const vl_shape_prims *p, vl_tensor *t, int n, const int64_t *reps, vl_tensor **out) {
  if (n > VL_MAX_DIMS) return vl_fail(VL_EINVAL, "tile: %d repeats, at most %d dims are supported", n, VL_MAX_DIMS);
  int64_t r[VL_MAX_DIMS];
  int m = n < t->ndim ? t->ndim : n;
  for (int i = 0; i < m; i++) r[i] = i < m - n ? 1 : reps[i - (m - n)];
  return repeat_impl("tile", p, t, m, r, out);
}

vl_status vl_repeat_interleave_with(const vl_shape_prims *p, vl_tensor *t, int64_t rep, vl_tensor *repeats,
                                    bool has_dim, int dim, vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  const char *op = "repeat_interleave";
  int d = 0;
  if (has_dim) VL_TRY(vl_wrap_dim(op, dim, t->ndim, &d));
  int64_t len = has_dim ? t->size[d] : vl_tensor_numel(t);
  int64_t *counts = NULL, nc = 1;
  if (repeats) {
    if (repeats->dtype != VL_I64 && repeats->dtype != VL_I32)
      return vl_fail(VL_EDTYPE, "%s: repeats must be an i64 or i32 tensor, got %s", op,
                     vl_tensor_desc(repeats, d1, sizeof d1));
    nc = vl_tensor_numel(repeats);
    if (repeats->ndim > 1 || (nc != 1 && nc != len))
      return vl_fail(VL_ESHAPE, "%s: repeats must be one count or one per element (%lld), got %s (self %s)", op,
                     (long long)len, vl_tensor_desc(repeats, d1, sizeof d1), vl_tensor_desc(t, d2, sizeof d2));
    vl_tensor *r64 = NULL;
    VL_TRY(vl_to(repeats, VL_I64, vl_cpu_device(), &r64));
    counts = index_buf(op, nc);
    vl_status s = counts ? vl_read_host(op, r64, counts) : VL_EOOM;
    vl_tensor_release(r64);
    if (s != VL_OK) {
      free(counts);
      return s;
    }
  }
  if (!counts && rep < 0) return vl_fail(VL_EINVAL, "%s: repeats must not be negative, got %lld", op, (long long)rep);
  int64_t total = 0;
  for (int64_t i = 0; counts && i < len; i++) {
    int64_t c = counts[nc == 1 ? 0 : i];
    if (c < 0) {
      free(counts);
      return vl_fail(VL_EINVAL, "%s: repeats must not be negative, got %lld", op, (long long)c);
    }
    if (__builtin_add_overflow(total, c, &total)) total = INT64_MAX;
  }
  if (!counts && __builtin_mul_overflow(len, rep, &total)) total = INT64_MAX;
  int64_t osize[VL_MAX_DIMS];
  memcpy(osize, t->size, sizeof(int64_t) * (size_t)t->ndim);
  osize[d] = total;
  vl_status s = vl_shape_check(op, has_dim ? t->ndim : 1, has_dim ? osize : &total, t->dtype, NULL);
  vl_tensor *idx = NULL;
  if (s == VL_OK && counts) {
    /* element i at positions [sum of the counts before it, + its count): built on the host,
     * where the counts are */
    int64_t *h = index_buf(op, total);
    if (!h) s = VL_EOOM;
    for (int64_t i = 0, at = 0; h && i < len; i++)
      for (int64_t c = counts[nc == 1 ? 0 : i]; c > 0; c--) h[at++] = i;
    if (h) s = vl_from_host(h, 1, &total, VL_I64, t->storage->device, &idx);
    free(h);
  } else if (s == VL_OK) {
    s = iota(t, total, &idx); /* j / rep: each position rep times, on the device */
    if (s == VL_OK && rep > 1) s = idx_op(&idx, VL_BIN_FLOOR_DIVIDE, rep, false);
  }
  free(counts);
  if (s != VL_OK) {
    vl_tensor_release(idx);
    return s;
  }
  vl_tensor *x = vl_tensor_retain(t), *r = NULL;
  if (!has_dim) {
    int64_t numel = len;
    s = step(&x, p->reshape(x, 1, &numel, &r), &r);
  }
  if (s == VL_OK) s = select_by(p, &x, d, idx);
  else vl_tensor_release(idx);
  if (s != VL_OK) {
    vl_tensor_release(x);
    return s;
  }
  *out = x;
  return VL_OK;
}

/* ---- pad ---- */

vl_status vl_pad_mode_parse(const char *op, const char *s, vl_pad_mode *mode) {
  static const char *const names[] = {"constant", "reflect", "replicate", "circular"};
  for (int i = 0; i < 4; i++)
    if (strcmp(s, names[i]) == 0) {
      *mode = (vl_pad_mode)i;
      return VL_OK;
    }
  return vl_fail(VL_EINVAL, "%s: unknown mode '%s' (constant, reflect, replicate, circular)", op, s);
}

/* x padded by l, r along d with the constant v: cat of constant blocks (a narrow first for a
 * negative pad, which crops). */
static vl_status pad_constant(const vl_shape_prims *p, vl_tensor **x, int d, int64_t l, int64_t r, double v) {
  vl_tensor *y = NULL;
  if (l < 0 || r < 0) {
    int64_t a = l < 0 ? -l : 0, b = r < 0 ? -r : 0;
    VL_TRY(step(x, p->narrow(*x, d, a, (*x)->size[d] - a - b, &y), &y));
  }
  if (l <= 0 && r <= 0) return VL_OK;
  vl_tensor *parts[3] = {NULL, NULL, NULL}, *list[3];
  int np = 0;
  int64_t size[VL_MAX_DIMS];
  memcpy(size, (*x)->size, sizeof(int64_t) * (size_t)(*x)->ndim);
  vl_status s = VL_OK;
  if (l > 0) {
    size[d] = l;
    s = vl_full((*x)->ndim, size, v, (*x)->dtype, (*x)->storage->device, &parts[0]);
    list[np++] = parts[0];
  }
  list[np++] = *x;
  if (s == VL_OK && r > 0) {
    size[d] = r;
    s = vl_full((*x)->ndim, size, v, (*x)->dtype, (*x)->storage->device, &parts[2]);
    list[np++] = parts[2];
  }
  if (s == VL_OK) s = step(x, p->cat(np, list, d, &y), &y);
  vl_tensor_release(parts[0]);
  vl_tensor_release(parts[2]);
  return s;
}

/* x padded by l, r along d, each output position reading input position (i - l) reflected,
 * clamped or wrapped into [0, len). */
static vl_status pad_index(const vl_shape_prims *p, vl_tensor **x, int d, int64_t l, int64_t r, vl_pad_mode mode) {
  int64_t len = (*x)->size[d], n = len + l + r;
  vl_tensor *idx = NULL, *c = NULL;
  vl_status s = iota(*x, n, &idx);
  if (s == VL_OK) s = idx_op(&idx, VL_BIN_SUB, l, false); /* j = i - l, in [-(len-1), 2(len-1)] */
  if (mode == VL_PAD_REFLECT) {
    /* reflect j at 0 and at len - 1: m - |m - |j||, m = len - 1 */
    if (s == VL_OK) s = step(&idx, vl_unary(VL_UN_ABS, idx, &c), &c);
    if (s == VL_OK) s = idx_op(&idx, VL_BIN_SUB, len - 1, true);
    if (s == VL_OK) s = step(&idx, vl_unary(VL_UN_ABS, idx, &c), &c);
    if (s == VL_OK) s = idx_op(&idx, VL_BIN_SUB, len - 1, true);
  } else if (mode == VL_PAD_REPLICATE) {
    if (s == VL_OK) s = step(&idx, vl_clamp(idx, 0, (double)(len - 1), &c), &c);
  } else if (s == VL_OK) {
    s = idx_op(&idx, VL_BIN_REMAINDER, len, false); /* circular: j mod len */
  }
  if (s != VL_OK) {
    vl_tensor_release(idx);
    return s;
  }
  return select_by(p, x, d, idx);
}

vl_status vl_pad_with(const vl_shape_prims *p, vl_tensor *t, int npads, const int64_t *pads, vl_pad_mode mode,
                      double value, vl_tensor **out) {
  char d1[VL_DESC_LEN];
  static const char *const names[] = {"constant", "reflect", "replicate", "circular"};
  if (npads % 2 != 0 || npads < 0)
    return vl_fail(VL_EINVAL, "pad: the pads must come in pairs (left, right per dim), got %d numbers", npads);
  if (npads / 2 > t->ndim)
    return vl_fail(VL_EINVAL, "pad: %d pads pad %d dims but the input has %d dims (%s)", npads, npads / 2, t->ndim,
                   vl_tensor_desc(t, d1, sizeof d1));
  if (mode != VL_PAD_CONSTANT && value != 0)
    return vl_fail(VL_EINVAL, "pad: a value is only used by mode 'constant', not '%s'", names[mode]);
  int64_t fin[VL_MAX_DIMS];
  memcpy(fin, t->size, sizeof(int64_t) * (size_t)t->ndim);
  for (int j = 0; j < npads / 2; j++) {
    int d = t->ndim - 1 - j;
    int64_t l = pads[2 * j], r = pads[2 * j + 1], len = t->size[d];
    /* bounded so the sums below cannot overflow; such pads exceed any shape check anyway */
    if (l > ((int64_t)1 << 48) || r > ((int64_t)1 << 48) || l < -((int64_t)1 << 48) || r < -((int64_t)1 << 48))
      return vl_fail(VL_EINVAL, "pad: pads (%lld, %lld) of dim %d are too large", (long long)l, (long long)r, d + 1);
    fin[d] = len + l + r;
    if (fin[d] < 0)
      return vl_fail(VL_EINVAL, "pad: pads (%lld, %lld) leave dim %d of size %lld with a negative size %lld", (long long)l,
                     (long long)r, d + 1, (long long)len, (long long)fin[d]);
    if (mode == VL_PAD_REFLECT && (l >= len || r >= len) && (l > 0 || r > 0))
      return vl_fail(VL_EINVAL, "pad: reflect pads (%lld, %lld) must be smaller than the size %lld of dim %d (%s)",
                     (long long)l, (long long)r, (long long)len, d + 1, vl_tensor_desc(t, d1, sizeof d1));
    if (mode == VL_PAD_REPLICATE && len == 0 && fin[d] > 0)
      return vl_fail(VL_EINVAL, "pad: replicate cannot pad dim %d of size 0 (%s)", d + 1, vl_tensor_desc(t, d1, sizeof d1));
    if (mode == VL_PAD_CIRCULAR && (l > len || r > len))
      return vl_fail(VL_EINVAL, "pad: circular pads (%lld, %lld) must be at most the size %lld of dim %d (%s)",
                     (long long)l, (long long)r, (long long)len, d + 1, vl_tensor_desc(t, d1, sizeof d1));
  }
  VL_TRY(vl_shape_check("pad", t->ndim, fin, t->dtype, NULL));
  vl_tensor *x = vl_tensor_retain(t);
  vl_status s = VL_OK;
  for (int j = 0; j < npads / 2 && s == VL_OK; j++) {
    int d = t->ndim - 1 - j;
    int64_t l = pads[2 * j], r = pads[2 * j + 1];
    if (l == 0 && r == 0) continue;
    s = mode == VL_PAD_CONSTANT ? pad_constant(p, &x, d, l, r, value) : pad_index(p, &x, d, l, r, mode);
  }
  if (s == VL_OK) s = copy_if_same(p, t, &x);
  if (s != VL_OK) {
    vl_tensor_release(x);
    return s;
  }
  *out = x;
  return VL_OK;
}

/* ---- the raw ops ---- */

vl_status vl_flatten(vl_tensor *t, int start, int end, vl_tensor **out) {
  return vl_flatten_with(&vl_shape_raw, t, start, end, out);
}
vl_status vl_unflatten(vl_tensor *t, int dim, int n, const int64_t *sizes, vl_tensor **out) {
  return vl_unflatten_with(&vl_shape_raw, t, dim, n, sizes, out);
}
vl_status vl_movedim(vl_tensor *t, int n, const int *src, const int *dst, vl_tensor **out) {
  return vl_movedim_with(&vl_shape_raw, t, n, src, dst, out);
}
vl_status vl_flip(vl_tensor *t, int n, const int *dims, vl_tensor **out) {
  return vl_flip_with(&vl_shape_raw, t, n, dims, out);
}
vl_status vl_roll(vl_tensor *t, int nshifts, const int64_t *shifts, int ndims, const int *dims, vl_tensor **out) {
  return vl_roll_with(&vl_shape_raw, t, nshifts, shifts, ndims, dims, out);
}
vl_status vl_tri(vl_tensor *t, int64_t k, bool upper, vl_tensor **out) {
  return vl_tri_with(&vl_shape_raw, t, k, upper, out);
}
vl_status vl_repeat(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out) {
  return vl_repeat_with(&vl_shape_raw, t, n, reps, out);
}
vl_status vl_tile(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out) {
  return vl_tile_with(&vl_shape_raw, t, n, reps, out);
}
vl_status vl_repeat_interleave(vl_tensor *t, int64_t r, vl_tensor *repeats, bool has_dim, int dim, vl_tensor **out) {
  return vl_repeat_interleave_with(&vl_shape_raw, t, r, repeats, has_dim, dim, out);
}
vl_status vl_pad(vl_tensor *t, int npads, const int64_t *pads, vl_pad_mode mode, double value, vl_tensor **out) {
  return vl_pad_with(&vl_shape_raw, t, npads, pads, mode, value, out);
}
