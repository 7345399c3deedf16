/* runtime/ops/scatter.c: index_put (PyTorch's advanced-index write on the first dims) and one_hot,
 * both compositions of the scatter kernels (runtime/ops/index.c), so CPU and CUDA follow.
 *
 * index_put turns its n index tensors into one linear position per indexed element over x's first
 * n dims, so x viewed [P, R] (P the product of those dims, R of the rest) takes a scatter along dim
 * 0 of the values viewed [M, R]. The indices are read on the host once: that is where each value is
 * checked against its own dim (a linear position in range can hide a bad coordinate) and negative
 * values are wrapped, as PyTorch's indexing does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/ops/ops_internal.h"

/* *out = r on success, else r released (out untouched). */
static vl_status out_or_release(vl_status s, vl_tensor *r, vl_tensor **out) {
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

static bool is_index_dtype(vl_dtype d) { return d == VL_I64 || d == VL_I32; }

/* t's elements as host int64 (any device, strides, i64 or i32); buf holds numel of them. */
static vl_status read_i64(const char *op, vl_tensor *t, int64_t *buf) {
  vl_tensor *c = NULL;
  VL_TRY(vl_to(t, VL_I64, t->storage->device, &c));
  vl_status s = vl_read_host(op, c, buf);
  vl_tensor_release(c);
  return s;
}

vl_status vl_index_put_plan(const char *op, vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values,
                            int *vnd, int64_t *vsize, vl_tensor **lin) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (n < 1 || n > x->ndim)
    return vl_fail(VL_EINVAL, "%s: %d index tensors for a %d-dim tensor (self %s): give 1 to %d", op, n, x->ndim,
                   vl_tensor_desc(x, d1, sizeof d1), x->ndim);
  char names[VL_MAX_DIMS][24];
  const char *nm[VL_MAX_DIMS];
  for (int k = 0; k < n; k++) {
    snprintf(names[k], sizeof names[k], "index %d", k + 1);
    nm[k] = names[k];
    VL_TRY(vl_check_same_device(op, x, "self", indices[k], nm[k]));
    if (!is_index_dtype(indices[k]->dtype))
      return vl_fail(VL_EDTYPE, "%s: index %d must be an i64 or i32 tensor (or bool), got %s (self %s, index %s)%s", op, k + 1,
                     vl_dtype_name(indices[k]->dtype), vl_tensor_desc(x, d1, sizeof d1),
                     vl_tensor_desc(indices[k], d2, sizeof d2),
                     "");
  }
  VL_TRY(vl_check_same_device(op, x, "self", values, "values"));
  if (values->dtype != x->dtype)
    return vl_fail(VL_EDTYPE, "%s: values dtype %s differs from self dtype %s (self %s, values %s)", op,
                   vl_dtype_name(values->dtype), vl_dtype_name(x->dtype), vl_tensor_desc(x, d1, sizeof d1),
                   vl_tensor_desc(values, d2, sizeof d2));
  int bnd;
  int64_t bsize[VL_MAX_DIMS];
  VL_TRY(vl_broadcast_shapes(op, n, indices, nm, &bnd, bsize));
  int nd = bnd + x->ndim - n;
  if (nd > VL_MAX_DIMS)
    return vl_fail(VL_ESHAPE, "%s: the indexed shape would have %d dims (at most %d)", op, nd, VL_MAX_DIMS);
  int64_t size[VL_MAX_DIMS], m = 1;
  for (int d = 0; d < bnd; d++) size[d] = bsize[d], m *= bsize[d];
  for (int d = n; d < x->ndim; d++) size[bnd + d - n] = x->size[d];
  if (!vl_broadcasts_to(values, nd, size)) {
    vl_tensor shape_only; /* only its shape is printed */
    memset(&shape_only, 0, sizeof shape_only);
    shape_only.ndim = nd;
    memcpy(shape_only.size, size, sizeof(int64_t) * (size_t)nd);
    char d3[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "%s: values of shape %s do not broadcast to the indexed shape %s (self %s)", op,
                   vl_shape_str(values, d2, sizeof d2), vl_shape_str(&shape_only, d3, sizeof d3),
                   vl_tensor_desc(x, d1, sizeof d1));
  }
  int64_t *pos = calloc((size_t)(m > 0 ? m : 1), sizeof *pos), *iv = malloc(sizeof(int64_t) * (size_t)(m > 0 ? m : 1));
  vl_status s = (!pos || !iv) ? vl_fail(VL_EOOM, "%s: out of host memory (%lld positions)", op, (long long)m) : VL_OK;
  int64_t stride = 1; /* row-major stride of dim k over the first n dims, walked from the last */
  for (int k = n - 1; k >= 0 && s == VL_OK && m > 0; k--) {
    vl_tensor *e = NULL;
    s = vl_expand(indices[k], bnd, bsize, &e);
    if (s == VL_OK) s = read_i64(op, e, iv);
    vl_tensor_release(e);
    int64_t size_k = x->size[k];
    for (int64_t i = 0; s == VL_OK && i < m; i++) {
      int64_t v = iv[i], w = v < 0 ? v + size_k : v;
      if (w < 0 || w >= size_k)
        s = vl_fail(VL_EINVAL, "%s: index %lld is out of bounds for dim %d with size %lld (index values are 0-based: "
                    "0 to %lld, or -%lld to -1 from the end)", op, (long long)v, k + 1, (long long)size_k,
                    (long long)size_k - 1, (long long)size_k);
      else
        pos[i] += w * stride;
    }
    stride *= size_k;
  }
  vl_tensor *r = NULL;
  if (s == VL_OK) s = vl_from_host(pos, 1, &m, VL_I64, x->storage->device, &r);
  free(pos);
  free(iv);
  VL_TRY(s);
  *vnd = nd;
  memcpy(vsize, size, sizeof(int64_t) * (size_t)nd);
  *lin = r;
  return VL_OK;
}

vl_status vl_index_put_lin_(const char *op, vl_tensor *x, int n, vl_tensor *lin, vl_tensor *values, int vnd,
                            const int64_t *vsize, bool accumulate) {
  VL_TRY(vl_check_writable(op, x));
  int64_t m = vl_tensor_numel(lin), p = 1, r = 1;
  for (int d = 0; d < x->ndim; d++) *(d < n ? &p : &r) *= x->size[d];
  if (m == 0 || r == 0) return VL_OK;
  /* A strided x is written through a contiguous copy and copied back (one more pass over x). */
  bool direct = vl_tensor_is_contiguous(x);
  vl_tensor *c = NULL, *cv = NULL, *ve = NULL, *vc = NULL, *vv = NULL, *l2 = NULL, *ix = NULL;
  int64_t pr[2] = {p, r}, mr[2] = {m, r}, m1[2] = {m, 1};
  vl_status s = direct ? (c = vl_tensor_retain(x), VL_OK) : vl_clone(x, &c);
  if (s == VL_OK) s = vl_view(c, 2, pr, &cv);
  if (s == VL_OK) s = vl_expand(values, vnd, vsize, &ve);
  if (s == VL_OK) s = vl_contiguous(ve, &vc);
  if (s == VL_OK) s = vl_view(vc, 2, mr, &vv);
  if (s == VL_OK) s = vl_view(lin, 2, m1, &l2);
  if (s == VL_OK) s = vl_expand(l2, 2, mr, &ix);
  if (s == VL_OK) s = accumulate ? vl_scatter_add_(cv, 0, ix, vv) : vl_scatter_(cv, 0, ix, vv);
  if (s == VL_OK && !direct) s = vl_copy_(x, c);
  vl_tensor_release(ix), vl_tensor_release(l2), vl_tensor_release(vv), vl_tensor_release(vc);
  vl_tensor_release(ve), vl_tensor_release(cv), vl_tensor_release(c);
  return s;
}

vl_status vl_index_put_(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate) {
  const char *op = "index_put_";
  int vnd;
  int64_t vsize[VL_MAX_DIMS];
  vl_tensor *lin;
  VL_TRY(vl_check_writable(op, x));
  VL_TRY(vl_index_put_plan(op, x, n, indices, values, &vnd, vsize, &lin));
  vl_status s = vl_index_put_lin_(op, x, n, lin, values, vnd, vsize, accumulate);
  vl_tensor_release(lin);
  return s;
}

vl_status vl_index_put(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate,
                       vl_tensor **out) {
  const char *op = "index_put";
  int vnd;
  int64_t vsize[VL_MAX_DIMS];
  vl_tensor *lin, *r = NULL;
  VL_TRY(vl_index_put_plan(op, x, n, indices, values, &vnd, vsize, &lin));
  vl_status s = vl_clone(x, &r);
  if (s == VL_OK) s = vl_index_put_lin_(op, r, n, lin, values, vnd, vsize, accumulate);
  vl_tensor_release(lin);
  return out_or_release(s, r, out);
}

vl_status vl_one_hot(vl_tensor *t, int64_t num_classes, vl_tensor **out) {
  const char *op = "one_hot";
  char d1[VL_DESC_LEN];
  if (!is_index_dtype(t->dtype))
    return vl_fail(VL_EDTYPE, "one_hot: the class values must be an i64 or i32 tensor, got %s (%s)",
                   vl_dtype_name(t->dtype), vl_tensor_desc(t, d1, sizeof d1));
  if (num_classes < -1)
    return vl_fail(VL_EINVAL, "one_hot: num_classes must be -1 (from the values) or at least 0, got %lld",
                   (long long)num_classes);
  if (t->ndim + 1 > VL_MAX_DIMS) return vl_fail(VL_ESHAPE, "one_hot: the result would have more than %d dims", VL_MAX_DIMS);
  int64_t n = vl_tensor_numel(t);
  if (n == 0 && num_classes == -1)
    return vl_fail(VL_EINVAL, "one_hot: cannot infer the number of classes from an empty tensor: give num_classes");
  int64_t *v = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  if (!v) return vl_fail(VL_EOOM, "one_hot: out of host memory (%lld values)", (long long)n);
  vl_status s = n > 0 ? read_i64(op, t, v) : VL_OK;
  int64_t classes = num_classes, mx = -1;
  for (int64_t i = 0; s == VL_OK && i < n; i++) {
    if (v[i] < 0) s = vl_fail(VL_EINVAL, "one_hot: class value %lld is negative (values are 0-based classes)", (long long)v[i]);
    else if (num_classes >= 0 && v[i] >= num_classes)
      s = vl_fail(VL_EINVAL, "one_hot: class value %lld is out of range for %lld classes (values are 0-based: 0 to %lld)",
                  (long long)v[i], (long long)num_classes, (long long)num_classes - 1);
    else if (v[i] > mx) mx = v[i];
  }
  free(v);
  VL_TRY(s);
  if (classes < 0) classes = mx + 1;
  int64_t size[VL_MAX_DIMS];
  memcpy(size, t->size, sizeof(int64_t) * (size_t)t->ndim);
  size[t->ndim] = classes;
  vl_tensor *r = NULL, *ix = NULL, *src = NULL;
  s = vl_zeros(t->ndim + 1, size, VL_I64, t->storage->device, &r);
  if (s == VL_OK && n > 0 && classes > 0) {
    s = vl_unsqueeze(t, t->ndim, &ix);
    if (s == VL_OK) s = vl_scatter_value_src(op, r, ix, vl_scalar_int(1), &src);
    if (s == VL_OK) s = vl_scatter_(r, t->ndim, ix, src);
  }
  vl_tensor_release(ix);
  vl_tensor_release(src);
  return out_or_release(s, r, out);
}
