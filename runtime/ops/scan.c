/* runtime/ops/scan.c: the scans (cumsum, cumprod: the backend's scan kernel) and the reductions
 * composed from existing ops in this front end, so both devices follow: logsumexp (max, sub,
 * exp, sum, log), any / all / count_nonzero (ne or eq, then an i64 sum). */
#include <math.h>

#include "runtime/ops/ops_internal.h"
#include "runtime/ops/scan.h"

static const char *scan_name(vl_scan_op op) { return op == VL_SCAN_PROD ? "cumprod" : "cumsum"; }

vl_status vl_scan(vl_scan_op op, vl_tensor *a, int dim, vl_dtype dt, bool reverse, vl_tensor **out) {
  if ((unsigned)op >= VL_NSCAN) return vl_fail(VL_EINVAL, "scan: invalid op %d", (int)op);
  const char *name = scan_name(op);
  char d[VL_DESC_LEN];
  int w = -1; /* -1: a 0-dim tensor, one element */
  if (!(a->ndim == 0 && (dim == 0 || dim == -1))) VL_TRY(vl_wrap_dim(name, dim, a->ndim, &w));
  vl_dtype odt = dt;
  if (dt == VL_NDTYPES) {
    odt = vl_dtype_is_float(a->dtype) ? a->dtype : VL_I64; /* integers and bool give i64, as PyTorch */
  } else if ((unsigned)dt > VL_NDTYPES || dt == VL_U8 || dt == VL_BOOL) {
    return vl_fail(VL_EDTYPE, "%s: dtype %s is not a result dtype (f32, f16, bf16, f64, i32 or i64) (a %s)", name,
                   (unsigned)dt < VL_NDTYPES ? vl_dtype_name(dt) : "?", vl_tensor_desc(a, d, sizeof d));
  }
  int64_t outer = 1, len = 1, inner = 1;
  for (int i = 0; i < a->ndim; i++) {
    if (i < w) outer *= a->size[i];
    else if (i == w) len = a->size[i];
    else inner *= a->size[i];
  }
  vl_tensor *c = NULL, *in = NULL, *r = NULL;
  vl_status s = vl_cast(a, odt, &c); /* the input in the result dtype, as torch's dtype= */
  if (s == VL_OK) s = vl_contiguous(c, &in);
  if (s == VL_OK) s = vl_tensor_empty(a->ndim, a->size, odt, a->storage->device, &r);
  if (s == VL_OK && outer * len * inner > 0) {
    vl_scan_args sa = {op, odt, vl_tensor_data(in), vl_tensor_data(r), outer, len, inner, reverse, {0, NULL}};
    s = vl_exec_of(name, a->storage->device, &sa.ex);
    if (s == VL_OK) s = vl_backend_of(a->storage->device)->ops->scan(&sa);
  }
  vl_tensor_release(c);
  vl_tensor_release(in);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

/* The dims of a composed reduction checked once, naming `name`: each in range and listed once.
 * Writes the 0-based list to dims0 (ndims0 of them; 0 = every dim) and the size of the reduced
 * part to *len. A 0-dim tensor takes dim 0 / -1 as "everything". */
static vl_status check_dims(const char *name, const vl_tensor *a, int ndims, const int *dims, int *dims0, int *ndims0,
                            int64_t *len) {
  char d[VL_DESC_LEN];
  bool red[VL_MAX_DIMS] = {false};
  if (ndims < 0 || ndims > VL_MAX_DIMS)
    return vl_fail(VL_EINVAL, "%s: %d dims given, at most %d allowed", name, ndims, VL_MAX_DIMS);
  *ndims0 = 0;
  for (int i = 0; i < ndims; i++) {
    if (a->ndim == 0 && (dims[i] == 0 || dims[i] == -1)) continue;
    int w;
    VL_TRY(vl_wrap_dim(name, dims[i], a->ndim, &w));
    if (red[w])
      return vl_fail(VL_EINVAL, "%s: dim %d appears more than once (a %s)", name, w + 1, vl_tensor_desc(a, d, sizeof d));
    red[w] = true;
    dims0[(*ndims0)++] = w;
  }
  *len = 1;
  for (int i = 0; i < a->ndim; i++)
    if (*ndims0 == 0 || red[i]) *len *= a->size[i];
  return VL_OK;
}

vl_status vl_logsumexp(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out) {
  int d0[VL_MAX_DIMS], n0 = 0;
  int64_t len = 0;
  VL_TRY(check_dims("logsumexp", a, ndims, dims, d0, &n0, &len));
  /* Integers and bool give f32 (as PyTorch); f16/bf16 are computed in f32 and rounded once. */
  vl_dtype rdt = vl_dtype_is_float(a->dtype) ? a->dtype : VL_F32;
  vl_dtype cdt = rdt == VL_F64 ? VL_F64 : VL_F32;
  vl_tensor *x = NULL, *m = NULL, *ms = NULL, *inf = NULL, *e = NULL, *sm = NULL, *y = NULL, *r = NULL;
  vl_status s = vl_cast(a, cdt, &x);
  if (s == VL_OK && len == 0) {
    /* log of an empty sum: -inf (max has no identity, so it is not asked) */
    s = vl_reduce(VL_RED_SUM, x, n0, d0, keepdim, 0, &y, NULL);
    if (s == VL_OK) s = vl_fill_(y, -INFINITY);
  } else if (s == VL_OK) {
    /* y = log(sum(exp(x - m))) + m with m the max, taken as 0 where it is infinite: a row of
     * -inf then gives log(0) = -inf and a +inf gives log(inf) = inf instead of inf - inf = NaN. */
    s = vl_reduce(VL_RED_MAX, x, n0, d0, true, 0, &m, NULL);
    if (s == VL_OK) s = vl_unary(VL_UN_ISINF, m, &inf);
    if (s == VL_OK) s = vl_masked_fill(m, inf, 0.0, &ms);
    if (s == VL_OK) s = vl_binary(VL_BIN_SUB, x, ms, 1.0, &e);
    if (s == VL_OK) s = vl_unary_(VL_UN_EXP, e);
    if (s == VL_OK) s = vl_reduce(VL_RED_SUM, e, n0, d0, keepdim, 0, &sm, NULL);
    if (s == VL_OK) s = vl_unary_(VL_UN_LOG, sm);
    if (s == VL_OK && !keepdim) {
      /* ms without the reduced dims, to add to the sum that has none */
      vl_tensor *k = NULL;
      s = vl_reshape(ms, sm->ndim, sm->size, &k);
      vl_tensor_release(ms);
      ms = k;
    }
    if (s == VL_OK) s = vl_binary(VL_BIN_ADD, sm, ms, 1.0, &y);
  }
  if (s == VL_OK) s = vl_cast(y, rdt, &r);
  vl_tensor *tmp[] = {x, m, ms, inf, e, sm, y};
  for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) vl_tensor_release(tmp[i]);
  if (s != VL_OK) return s;
  *out = r;
  return VL_OK;
}

/* The i64 count over the dims of the elements where x op 0 holds (NE: non-zero, NaN included). */
static vl_status count_where(const char *name, vl_binary_op op, vl_tensor *a, int ndims, const int *dims, bool keepdim,
                             vl_tensor **out) {
  int d0[VL_MAX_DIMS], n0 = 0;
  int64_t len = 0;
  VL_TRY(check_dims(name, a, ndims, dims, d0, &n0, &len));
  vl_tensor *hit = NULL;
  VL_TRY(vl_binary_scalar(op, a, 0.0, false, &hit));
  vl_status s = vl_reduce(VL_RED_SUM, hit, n0, d0, keepdim, 0, out, NULL); /* a bool sum is i64 */
  vl_tensor_release(hit);
  return s;
}

/* count (i64) op k as a bool tensor */
static vl_status compare(vl_tensor *count, vl_binary_op op, vl_status s, vl_tensor **out) {
  if (s != VL_OK) return s;
  s = vl_binary_scalar(op, count, 0.0, false, out);
  vl_tensor_release(count);
  return s;
}

vl_status vl_any(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out) {
  vl_tensor *c = NULL;
  vl_status s = count_where("any", VL_BIN_NE, a, ndims, dims, keepdim, &c);
  return compare(c, VL_BIN_GT, s, out); /* some element is non-zero */
}

vl_status vl_all(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out) {
  vl_tensor *c = NULL;
  vl_status s = count_where("all", VL_BIN_EQ, a, ndims, dims, keepdim, &c);
  return compare(c, VL_BIN_EQ, s, out); /* no element is zero */
}

vl_status vl_count_nonzero(vl_tensor *a, int ndims, const int *dims, vl_tensor **out) {
  return count_where("count_nonzero", VL_BIN_NE, a, ndims, dims, false, out);
}
