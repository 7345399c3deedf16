/* runtime/ops/sample.c: randperm and multinomial (host algorithms on the Philox stream) and
 * linspace, logspace and eye (compositions of backend ops).
 *
 * randperm and multinomial are sequential or sort-based per row, so they run on the host from
 * the process generator's stream (runtime/core/philox.h) and the result is moved to the
 * requested device: one seed gives the same permutation or samples on the CPU and on CUDA, and
 * the generator advances by the same number of counters. The cost on CUDA is a copy of probs to
 * the host and of the result back (synchronous), and they are refused under CUDA graph capture.
 * linspace and logspace are PyTorch's symmetric formula in f64 (arange, mul, add, where, pow
 * kernels of the device), rounded once to the dtype; eye fills the diagonal view of a zero
 * matrix. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/graph.h"
#include "runtime/core/philox.h"
#include "runtime/ops/ops_internal.h"

/* ---- the host side of the generator ---- */

/* The stream's key and first counter for a host draw of `groups` counters, advancing the
 * generator (as rand_fill in create.c does for a kernel draw). */
static void host_draw(uint64_t groups, uint64_t *seed, uint64_t *first) {
  vl_context *ctx = vl_ctx();
  *seed = ctx->seed;
  *first = ctx->rng_offset;
  ctx->rng_offset += groups;
}

static vl_status refuse_capture(const char *op, vl_device dev) {
  if (vl_device_is_host(dev)) return VL_OK;
  return vl_graph_refuse(op, "a draw made on the host");
}

/* ---- randperm ---- */

/* The largest n whose values 0..n-1 are all exact in dt. */
static int64_t perm_limit(vl_dtype dt) {
  switch (dt) {
    case VL_F16: return ((int64_t)1 << 11) + 1;
    case VL_BF16: return ((int64_t)1 << 8) + 1;
    case VL_F32: return ((int64_t)1 << 24) + 1;
    case VL_F64: return ((int64_t)1 << 53) + 1;
    case VL_I32: return (int64_t)INT32_MAX + 1;
    case VL_U8: return 256;
    default: return INT64_MAX;
  }
}

vl_status vl_randperm(int64_t n, vl_dtype dt, vl_device dev, vl_tensor **out) {
  if ((unsigned)dt >= VL_NDTYPES || dt == VL_BOOL)
    return vl_fail(VL_EDTYPE, "randperm: dtype %s is not supported", (unsigned)dt < VL_NDTYPES ? vl_dtype_name(dt) : "?");
  if (n < 0) return vl_fail(VL_EINVAL, "randperm: n must not be negative, got %lld", (long long)n);
  if (n > perm_limit(dt))
    return vl_fail(VL_EINVAL, "randperm: n %lld is too large for dtype %s (at most %lld)", (long long)n,
                   vl_dtype_name(dt), (long long)perm_limit(dt));
  VL_TRY(refuse_capture("randperm", dev));
  vl_tensor *h;
  VL_TRY(vl_tensor_empty(1, &n, VL_I64, vl_cpu_device(), &h));
  int64_t *p = vl_tensor_data(h);
  for (int64_t i = 0; i < n; i++) p[i] = i;
  /* Fisher-Yates from the top: draw k = n-1-i picks j in [0, i] with the INT mapping of range
   * i + 1 (philox.h): word k % 4 of counter k / 4, or words (2q, 2q+1) of counter k / 2 when
   * n > 2^32. */
  const int per = (uint64_t)n > ((uint64_t)1 << 32) ? 2 : 4;
  uint64_t seed, first;
  host_draw(n > 1 ? vl_philox_groups(per == 2, n - 1) : 0, &seed, &first);
  vl_philox4 blk = {{0, 0, 0, 0}};
  for (int64_t i = n - 1, k = 0; i >= 1; i--, k++) {
    if (k % per == 0) blk = vl_philox(seed, first + (uint64_t)(k / per));
    const uint64_t range = (uint64_t)i + 1;
    uint64_t j;
    if (per == 4) {
      j = ((uint64_t)blk.x[k % 4] * range) >> 32;
    } else {
      int q = (int)(k % 2);
      j = vl_mulhi64(((uint64_t)blk.x[2 * q] << 32) | blk.x[2 * q + 1], range);
    }
    int64_t a = p[i];
    p[i] = p[j];
    p[j] = a;
  }
  vl_status s = vl_to(h, dt, dev, out);
  vl_tensor_release(h);
  return s;
}

/* ---- multinomial ---- */

typedef struct {
  double key;
  int64_t idx;
} keyed;

/* Smaller key first; equal keys by index, so the order is defined (exactly reproducible). */
static int keyed_cmp(const void *pa, const void *pb) {
  const keyed *a = pa, *b = pb;
  if (a->key != b->key) return a->key < b->key ? -1 : 1;
  return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Restores the max-heap kb[0..k) (the root the largest key) below position j. */
static void sift_down(keyed *kb, int64_t k, int64_t j) {
  for (;;) {
    int64_t c = 2 * j + 1;
    if (c >= k) return;
    if (c + 1 < k && keyed_cmp(&kb[c + 1], &kb[c]) > 0) c++;
    if (keyed_cmp(&kb[c], &kb[j]) <= 0) return;
    keyed t = kb[c];
    kb[c] = kb[j];
    kb[j] = t;
    j = c;
  }
}

/* The k smallest of the m keyed items of kb (k <= m) into kb[0..k), in increasing order: a max-heap
 * of the k best so far (O(m log k): rows are often long and k small), then sorted. */
static void smallest_k(keyed *kb, int64_t m, int64_t k) {
  if (k * 4 >= m) { /* most of the row anyway: one sort */
    qsort(kb, (size_t)m, sizeof *kb, keyed_cmp);
    return;
  }
  for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(kb, k, i);
  for (int64_t i = k; i < m; i++) {
    if (keyed_cmp(&kb[i], &kb[0]) >= 0) continue;
    kb[0] = kb[i];
    sift_down(kb, k, 0);
  }
  qsort(kb, (size_t)k, sizeof *kb, keyed_cmp);
}

/* The f64 uniform of element e of a draw from (seed, first): counter first + e / 2, words
 * (2j, 2j + 1) with j = e % 2 (philox.h's f64 mapping). */
static double u52_at(uint64_t seed, uint64_t first, int64_t e) {
  vl_philox4 b = vl_philox(seed, first + (uint64_t)(e / 2));
  int j = (int)(e % 2);
  return vl_u52(b.x[2 * j], b.x[2 * j + 1]);
}

/* Every row valid (weights finite and >= 0, a positive sum, enough non-zero weights without
 * replacement) before anything is drawn. */
static vl_status check_rows(const double *w, int64_t rows, int64_t n, int64_t k, bool replacement, const char *desc) {
  for (int64_t r = 0; r < rows; r++) {
    const double *row = w + r * n;
    double sum = 0;
    int64_t nz = 0;
    for (int64_t i = 0; i < n; i++) {
      if (!(row[i] >= 0) || isinf(row[i]))
        return vl_fail(VL_EINVAL, "multinomial: weights must be finite and non-negative, got %g at row %lld, position %lld (%s)",
                       row[i], (long long)r + 1, (long long)i + 1, desc);
      sum += row[i];
      nz += row[i] > 0;
    }
    if (!(sum > 0)) return vl_fail(VL_EINVAL, "multinomial: row %lld of the weights sums to 0 (%s)", (long long)r + 1, desc);
    if (!replacement && nz < k)
      return vl_fail(VL_EINVAL,
                     "multinomial: cannot draw %lld samples without replacement from %lld non-zero weights (row %lld, %s)",
                     (long long)k, (long long)nz, (long long)r + 1, desc);
  }
  return VL_OK;
}

/* With replacement: sample s of row r takes u of element r * k + s; the category is the first
 * whose running sum exceeds u * sum (a zero weight never is). */
static vl_status draw_replacement(const double *w, int64_t rows, int64_t n, int64_t k, int64_t *res) {
  double *cum = malloc((size_t)n * sizeof *cum);
  if (!cum) return vl_fail(VL_EOOM, "multinomial: out of host memory for %lld weights", (long long)n);
  uint64_t seed, first;
  host_draw(vl_philox_groups(1, rows * k), &seed, &first);
  for (int64_t r = 0; r < rows; r++) {
    double acc = 0;
    int64_t last = 0;
    for (int64_t i = 0; i < n; i++) {
      acc += w[r * n + i];
      cum[i] = acc;
      if (w[r * n + i] > 0) last = i;
    }
    for (int64_t s = 0; s < k; s++) {
      double target = u52_at(seed, first, r * k + s) * acc;
      int64_t lo = 0, hi = n; /* the first i in [lo, hi) with cum[i] > target */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cum[mid] > target) hi = mid;
        else lo = mid + 1;
      }
      res[r * k + s] = lo < n ? lo : last; /* u * sum rounded up to sum: the last positive weight */
    }
  }
  free(cum);
  return VL_OK;
}

/* Without replacement: category i of row r gets the key E / w with E = -log(u) of element
 * r * n + i (an exponential race); the k smallest keys in increasing order are the samples, which
 * is the distribution of drawing one at a time and removing it (Efraimidis and Spirakis). */
static vl_status draw_no_replacement(const double *w, int64_t rows, int64_t n, int64_t k, int64_t *res) {
  keyed *kb = malloc((size_t)n * sizeof *kb);
  if (!kb) return vl_fail(VL_EOOM, "multinomial: out of host memory for %lld weights", (long long)n);
  uint64_t seed, first;
  host_draw(vl_philox_groups(1, rows * n), &seed, &first);
  for (int64_t r = 0; r < rows; r++) {
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++) {
      double wi = w[r * n + i];
      double e = -log(u52_at(seed, first, r * n + i));
      if (wi > 0) kb[m++] = (keyed){e / wi, i};
    }
    smallest_k(kb, m, k);
    for (int64_t s = 0; s < k; s++) res[r * k + s] = kb[s].idx;
  }
  free(kb);
  return VL_OK;
}

vl_status vl_multinomial(vl_tensor *probs, int64_t k, bool replacement, vl_tensor **out) {
  char d[VL_DESC_LEN];
  vl_tensor_desc(probs, d, sizeof d);
  if (!vl_dtype_is_float(probs->dtype))
    return vl_fail(VL_EDTYPE, "multinomial: expected float weights (f32, f16, bf16, f64), got %s", d);
  if (probs->ndim != 1 && probs->ndim != 2)
    return vl_fail(VL_ESHAPE, "multinomial: expected 1-D or 2-D weights, got %s", d);
  const int64_t n = probs->size[probs->ndim - 1], rows = probs->ndim == 2 ? probs->size[0] : 1;
  if (n == 0) return vl_fail(VL_ESHAPE, "multinomial: the weights have no categories (%s)", d);
  if (k <= 0) return vl_fail(VL_EINVAL, "multinomial: num_samples must be positive, got %lld", (long long)k);
  if (!replacement && k > n)
    return vl_fail(VL_EINVAL, "multinomial: cannot draw %lld samples without replacement from %lld categories (%s)",
                   (long long)k, (long long)n, d);
  vl_device dev = probs->storage->device;
  VL_TRY(refuse_capture("multinomial", dev));
  vl_tensor *w64 = NULL, *w = NULL, *h = NULL;
  int64_t size[2] = {rows, k};
  vl_status s = vl_to(probs, VL_F64, vl_cpu_device(), &w64);
  if (s == VL_OK) s = vl_contiguous(w64, &w);
  if (s == VL_OK) s = check_rows(vl_tensor_data(w), rows, n, k, replacement, d);
  if (s == VL_OK) s = vl_tensor_empty(probs->ndim, probs->ndim == 2 ? size : size + 1, VL_I64, vl_cpu_device(), &h);
  if (s == VL_OK && rows > 0) {
    if (replacement) s = draw_replacement(vl_tensor_data(w), rows, n, k, vl_tensor_data(h));
    else s = draw_no_replacement(vl_tensor_data(w), rows, n, k, vl_tensor_data(h));
  }
  if (s == VL_OK) s = vl_to(h, VL_I64, dev, out);
  vl_tensor_release(h);
  vl_tensor_release(w);
  vl_tensor_release(w64);
  return s;
}

/* ---- linspace, logspace, eye ---- */

static vl_status check_space(const char *op, double start, double end, int64_t steps, vl_dtype dt) {
  if ((unsigned)dt >= VL_NDTYPES || dt == VL_BOOL)
    return vl_fail(VL_EDTYPE, "%s: dtype %s is not supported", op, (unsigned)dt < VL_NDTYPES ? vl_dtype_name(dt) : "?");
  if (steps < 0) return vl_fail(VL_EINVAL, "%s: steps must not be negative, got %lld", op, (long long)steps);
  if (!isfinite(start) || !isfinite(end))
    return vl_fail(VL_EINVAL, "%s: start %g and end %g must be finite", op, start, end);
  return VL_OK;
}

/* PyTorch's values in f64: step = (end - start) / (steps - 1); element i is start + step * i in
 * the first half (i < steps / 2) and end - step * (steps - 1 - i) in the second, so both ends
 * are exact. Written here as (i - (steps - 1)) * step + end, the same roundings. */
static vl_status space_f64(double start, double end, int64_t steps, vl_device dev, vl_tensor **out) {
  if (steps <= 1) return vl_full(1, &steps, start, VL_F64, dev, out);
  const double step = (end - start) / (double)(steps - 1);
  vl_tensor *idx = NULL, *a = NULL, *lo = NULL, *b = NULL, *c = NULL, *hi = NULL, *cond = NULL;
  vl_status s = vl_arange(0, (double)steps, 1, VL_F64, dev, &idx);
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_MUL, idx, step, false, &a);
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_ADD, a, start, false, &lo);
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_SUB, idx, (double)(steps - 1), false, &b);
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_MUL, b, step, false, &c);
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_ADD, c, end, false, &hi);
  if (s == VL_OK) s = vl_binary_scalar(VL_BIN_LT, idx, (double)(steps / 2), false, &cond);
  if (s == VL_OK) s = vl_where(cond, lo, hi, out);
  vl_tensor *all[] = {idx, a, lo, b, c, hi, cond};
  for (int i = 0; i < 7; i++) vl_tensor_release(all[i]);
  return s;
}

/* The f64 values rounded once to dt (integers truncated toward zero, as PyTorch). */
static vl_status finish(vl_tensor *v, vl_dtype dt, vl_tensor **out) {
  vl_status s = vl_cast(v, dt, out);
  vl_tensor_release(v);
  return s;
}

vl_status vl_linspace(double start, double end, int64_t steps, vl_dtype dt, vl_device dev, vl_tensor **out) {
  VL_TRY(check_space("linspace", start, end, steps, dt));
  if (!vl_dtype_is_float(dt) && (vl_scalar_to("linspace", vl_scalar_float(trunc(start)), dt, NULL) != VL_OK ||
                                 vl_scalar_to("linspace", vl_scalar_float(trunc(end)), dt, NULL) != VL_OK))
    return VL_EINVAL;
  vl_tensor *v;
  VL_TRY(space_f64(start, end, steps, dev, &v));
  return finish(v, dt, out);
}

vl_status vl_logspace(double start, double end, int64_t steps, double base, vl_dtype dt, vl_device dev,
                      vl_tensor **out) {
  VL_TRY(check_space("logspace", start, end, steps, dt));
  if (!isfinite(base)) return vl_fail(VL_EINVAL, "logspace: base must be finite, got %g", base);
  vl_tensor *v, *p;
  VL_TRY(space_f64(start, end, steps, dev, &v));
  vl_status s = vl_binary_scalar(VL_BIN_POW, v, base, true, &p); /* base ^ v */
  vl_tensor_release(v);
  VL_TRY(s);
  if (!vl_dtype_is_float(dt)) {
    /* An integer result truncates base ^ v, and pow may land an ulp or two below an exact power
     * (CUDA's f64 pow is within 2 ulp: 3 ^ 1 came out 2.9999999999999996 on an H100, truncated to
     * 2 where the CPU gave 3). Widening the magnitude by 8 ulp first gives the exact power on
     * both devices and moves no value that is not within 8 ulp below an integer. */
    vl_tensor *w;
    s = vl_binary_scalar(VL_BIN_MUL, p, 1.0 + 8 * DBL_EPSILON, false, &w);
    vl_tensor_release(p);
    VL_TRY(s);
    p = w;
  }
  return finish(p, dt, out);
}

vl_status vl_eye(int64_t n, int64_t m, vl_dtype dt, vl_device dev, vl_tensor **out) {
  if (n < 0 || m < 0)
    return vl_fail(VL_EINVAL, "eye: sizes must not be negative, got n %lld, m %lld", (long long)n, (long long)m);
  int64_t size[2] = {n, m};
  vl_tensor *t;
  VL_TRY(vl_zeros(2, size, dt, dev, &t));
  int64_t k = n < m ? n : m, stride = m + 1;
  vl_status s = VL_OK;
  if (k > 0) {
    vl_tensor *diag;
    s = vl_as_strided(t, 1, &k, &stride, t->offset, &diag);
    if (s == VL_OK) {
      s = vl_fill_(diag, 1.0);
      vl_tensor_release(diag);
    }
  }
  if (s != VL_OK) {
    vl_tensor_release(t);
    return s;
  }
  *out = t;
  return VL_OK;
}
