/* runtime/autograd/ops_scan.c: recorded cumsum, cumprod and logsumexp (runtime/ops/scan.c).
 *  cumsum:    dx = the reverse cumsum of g along dim (the scan kernel's reverse flag, no flip).
 *  cumprod:   dx_i = sum_{k >= i} g_k prod_{j <= k, j != i} x_j, without dividing by a zero
 *             (below).
 *  logsumexp: dx = g exp(x - y) (g times the softmax), 0 where x = -inf (a row of -inf has
 *             y = -inf, and -inf - -inf would be NaN). */
#include <math.h>

#include "runtime/amp/autocast.h"
#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops_scan.h"
#include "runtime/ops/ops_internal.h"

typedef struct scan_ctx {
  vl_scan_op op;
  int dim;
} scan_ctx;

static vl_tensor *scan(vl_fs *f, vl_scan_op op, vl_tensor *t, int dim, bool reverse) {
  return F_RUN(vl_scan(op, t, dim, VL_NDTYPES, reverse, F_OUT));
}

/* cumprod's gradient along a row with z the position of its first zero (if any):
 *  - i < z (or no zero): every y_k with k >= z is 0, so dx_i = sum_{k >= i} g_k y_k / x_i, the
 *    reverse cumsum of g y divided by x_i (x_i != 0 there);
 *  - i = z: dx_z = sum_{k >= z} g_k prod_{j <= k, j != z} x_j: the reverse cumsum of g times the
 *    cumprod of x with x_z replaced by 1 (later zeros stay, and zero their terms);
 *  - i > z: every product of dy_k/dx_i holds x_z = 0, so dx_i = 0.
 * Saved: x, y. */
static vl_tensor *cumprod_grad(vl_fs *f, vl_tensor *x, vl_tensor *y, vl_tensor *g, int dim) {
  vl_tensor *zero = F_SCALAR(EQ, x, 0.0);
  vl_tensor *zc = scan(f, VL_SCAN_SUM, zero, dim, false); /* zeros up to here (i64) */
  vl_tensor *before = F_SCALAR(EQ, zc, 0.0);
  vl_tensor *first = F_BIN(LOGICAL_AND, zero, F_SCALAR(EQ, zc, 1.0));
  vl_tensor *not_before = F_UN(LOGICAL_NOT, before), *not_first = F_UN(LOGICAL_NOT, first);
  vl_tensor *gy = F_MUL(g, y);
  vl_tensor *rs = scan(f, VL_SCAN_SUM, gy, dim, true);
  vl_tensor *ga = F_MASKED_FILL(F_DIV(rs, F_MASKED_FILL(x, not_before, 1.0)), not_before, 0.0);
  vl_tensor *cp = scan(f, VL_SCAN_PROD, F_MASKED_FILL(x, first, 1.0), dim, false);
  vl_tensor *gcp = F_MUL(g, cp);
  vl_tensor *gb = F_MASKED_FILL(scan(f, VL_SCAN_SUM, gcp, dim, true), not_first, 0.0);
  return F_ADD(ga, gb);
}

static vl_status scan_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const scan_ctx *c = VL_AG_CTX(n, scan_ctx);
  vl_tensor *sv[2];
  VL_TRY(vl_node_saved_n(n, 2, sv));
  VL_FS(f);
  vl_tensor *res = c->op == VL_SCAN_SUM ? scan(f, VL_SCAN_SUM, go[0], c->dim, true)
                                        : cumprod_grad(f, sv[0], sv[1], go[0], c->dim);
  return vl_fs_give(f, n, 1, &res, gi);
}

vl_status vl_ag_scan(vl_scan_op op, vl_tensor *a, int dim, vl_dtype dt, vl_tensor **out) {
  VL_AUTOCAST(op == VL_SCAN_PROD ? VL_AC_CUMPROD : VL_AC_CUMSUM, vl_ag_scan(op, vl_ac[0], dim, dt, out), a);
  vl_tensor *r;
  VL_TRY(vl_scan(op, a, dim, dt, false, &r));
  scan_ctx c = {op, dim};
  bool prod = op == VL_SCAN_PROD;
  return vl_ag_out(VL_AG_RECORD(.name = prod ? "CumprodBackward" : "CumsumBackward", .backward = scan_bw, .nin = 1,
                                .in = &a, .out = &r, .save = {prod ? a : NULL, prod ? r : NULL}, VL_AG_CTX_OF(c)),
                   r, out);
}

/* The input's shape with the reduced dims kept as size 1 (y reshaped to broadcast against x). */
typedef struct lse_ctx {
  int ndim;
  int64_t ksize[VL_MAX_DIMS];
} lse_ctx;

/* Saved: x, y. */
static vl_status lse_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const lse_ctx *c = VL_AG_CTX(n, lse_ctx);
  vl_tensor *sv[2];
  VL_TRY(vl_node_saved_n(n, 2, sv));
  vl_tensor *x = sv[0], *y = sv[1], *g = go[0];
  VL_FS(f);
  vl_tensor *yk = F_RUN(vl_reshape(y, c->ndim, c->ksize, F_OUT));
  vl_tensor *gk = F_RUN(vl_reshape(g, c->ndim, c->ksize, F_OUT));
  vl_tensor *p = F_MASKED_FILL(F_UN(EXP, F_SUB(x, yk)), F_SCALAR(EQ, x, -INFINITY), 0.0);
  vl_tensor *res = F_MUL(p, gk);
  return vl_fs_give(f, n, 1, &res, gi);
}

vl_status vl_ag_logsumexp(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_logsumexp(a, ndims, dims, keepdim, &r));
  if (!vl_ag_needs(1, &a)) {
    *out = r;
    return VL_OK;
  }
  /* vl_logsumexp checked the dims: here they only mark which sizes become 1 */
  lse_ctx c = {.ndim = a->ndim};
  bool red[VL_MAX_DIMS] = {false};
  for (int i = 0; i < ndims && a->ndim > 0; i++) red[dims[i] < 0 ? dims[i] + a->ndim : dims[i]] = true;
  for (int i = 0; i < a->ndim; i++) c.ksize[i] = (ndims == 0 || red[i]) ? 1 : a->size[i];
  return vl_ag_out(VL_AG_RECORD(.name = "LogsumexpBackward", .backward = lse_bw, .nin = 1, .in = &a, .out = &r,
                                .save = {a, r}, VL_AG_CTX_OF(c)),
                   r, out);
}
