/* runtime/ops/create.c: creation, random numbers, conversions and copies. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/cuda.h"
#include "runtime/core/graph.h"
#include "runtime/core/layout.h"
#include "runtime/ops/ops_internal.h"
#include "runtime/core/philox.h"

/* In-place front ends bump the storage's version once they wrote (autograd's saved-tensor check). */
static vl_status bumped(vl_tensor *t, vl_status s) {
  if (s == VL_OK) t->storage->version++;
  return s;
}

/* ---- creation ---- */

/* Every value passes the one conversion rule (runtime/core/scalar.h), empty tensors included.
 * The kernels take the value as a double; an i64 integer that a double cannot hold exactly is
 * written through a one-element tensor broadcast by the copy kernel instead (exact, any device). */
static vl_status fill_tensor(const char *op, vl_tensor *t, vl_scalar v) {
  unsigned char elem[8];
  VL_TRY(vl_scalar_to(op, v, t->dtype, elem));
  if (vl_tensor_numel(t) == 0) return VL_OK;
  if (!vl_scalar_exact_f64(v) && t->dtype == VL_I64) {
    vl_tensor *one;
    VL_TRY(vl_from_host(elem, 0, NULL, VL_I64, t->storage->device, &one));
    vl_status s = vl_copy_same_device(t, one);
    vl_tensor_release(one);
    return s;
  }
  vl_iter it;
  const vl_kernels *k;
  VL_TRY(vl_iter_make(op, &it, 1, &t, t->ndim, t->size, &k));
  return k->fill(&it, v.is_int ? (double)v.i : v.f);
}

vl_status vl_full_scalar(int ndim, const int64_t *size, vl_scalar value, vl_dtype dt, vl_device dev,
                         vl_tensor **out) {
  /* Checked before allocating: a refused value costs nothing. */
  VL_TRY(vl_scalar_to("full", value, dt, NULL));
  vl_tensor *t;
  VL_TRY(vl_tensor_empty(ndim, size, dt, dev, &t));
  vl_status s = fill_tensor("full", t, value);
  if (s != VL_OK) {
    vl_tensor_release(t);
    return s;
  }
  *out = t;
  return VL_OK;
}

vl_status vl_full(int ndim, const int64_t *size, double value, vl_dtype dt, vl_device dev, vl_tensor **out) {
  return vl_full_scalar(ndim, size, vl_scalar_float(value), dt, dev, out);
}

vl_status vl_zeros(int ndim, const int64_t *size, vl_dtype dt, vl_device dev, vl_tensor **out) {
  return vl_full(ndim, size, 0.0, dt, dev, out);
}

vl_status vl_ones(int ndim, const int64_t *size, vl_dtype dt, vl_device dev, vl_tensor **out) {
  return vl_full(ndim, size, 1.0, dt, dev, out);
}

/* numel values start + i * step, computed by the device's kernel in doubles. */
static vl_status arange_run(int64_t numel, double start, double step, vl_dtype dt, vl_device dev, vl_tensor **out) {
  vl_tensor *t;
  VL_TRY(vl_tensor_empty(1, &numel, dt, dev, &t));
  vl_status s = VL_OK;
  vl_exec ex;
  if (numel > 0) {
    s = vl_exec_of("arange", dev, &ex);
    if (s == VL_OK) s = vl_backend_of(dev)->ops->arange(vl_tensor_data(t), dt, numel, start, step, ex);
  }
  if (s != VL_OK) {
    vl_tensor_release(t);
    return s;
  }
  *out = t;
  return VL_OK;
}

/* Integer arange: the count from exact 128-bit arithmetic, and when a value is beyond 2^52 in
 * magnitude (where start + i * step in doubles stops being exact) the values are made on the
 * host in int64 and moved to the device. */
static vl_status arange_int(int64_t start, int64_t end, int64_t step, vl_dtype dt, vl_device dev,
                            vl_tensor **out) {
  __int128 span = (__int128)end - start, n = 0;
  if ((span > 0 && step > 0) || (span < 0 && step < 0)) n = (span + step - (step > 0 ? 1 : -1)) / step;
  if (n > (__int128)9000000000000000LL)
    return vl_fail(VL_EINVAL, "arange: %.3g elements are too many", (double)n);
  int64_t numel = (int64_t)n;
  int64_t last = numel > 0 ? (int64_t)(start + (__int128)(numel - 1) * step) : start;
  VL_TRY(vl_scalar_to("arange", vl_scalar_int(start), dt, NULL));
  VL_TRY(vl_scalar_to("arange", vl_scalar_int(last), dt, NULL));
  const int64_t lim = (int64_t)1 << 52;
  if (!(dt == VL_I64 && (start > lim || start < -lim || last > lim || last < -lim)))
    return arange_run(numel, (double)start, (double)step, dt, dev, out);
  vl_tensor *h;
  VL_TRY(vl_tensor_empty(1, &numel, VL_I64, vl_cpu_device(), &h));
  int64_t *p = vl_tensor_data(h);
  for (int64_t i = 0; i < numel; i++) p[i] = (int64_t)(start + (__int128)i * step);
  vl_status s = vl_to(h, VL_I64, dev, out);
  vl_tensor_release(h);
  return s;
}

vl_status vl_arange_scalar(vl_scalar start, vl_scalar end, vl_scalar step, vl_dtype dt, vl_device dev,
                           vl_tensor **out) {
  if (start.is_int && end.is_int && step.is_int && step.i != 0 && dt != VL_BOOL && (unsigned)dt < VL_NDTYPES)
    return arange_int(start.i, end.i, step.i, dt, dev, out);
  return vl_arange(start.is_int ? (double)start.i : start.f, end.is_int ? (double)end.i : end.f,
                   step.is_int ? (double)step.i : step.f, dt, dev, out);
}

vl_status vl_arange(double start, double end, double step, vl_dtype dt, vl_device dev, vl_tensor **out) {
  if (step == 0 || !isfinite(start) || !isfinite(end) || !isfinite(step))
    return vl_fail(VL_EINVAL, "arange: start %g, end %g and step %g must be finite with step != 0", start, end, step);
  if (dt == VL_BOOL) return vl_fail(VL_EDTYPE, "arange: dtype bool is not supported");
  double n = ceil((end - start) / step);
  if (n < 0) n = 0;
  if (n > 9.0e15) return vl_fail(VL_EINVAL, "arange: %g elements are too many", n);
  int64_t numel = (int64_t)n;
  /* Values are monotonic: the first and the last bound them all (for integer dtypes). */
  VL_TRY(vl_scalar_to("arange", vl_scalar_float(start), dt, NULL));
  if (numel > 1) VL_TRY(vl_scalar_to("arange", vl_scalar_float(start + (double)(numel - 1) * step), dt, NULL));
  return arange_run(numel, start, step, dt, dev, out);
}

vl_status vl_from_host(const void *host, int ndim, const int64_t *size, vl_dtype dt, vl_device dev,
                       vl_tensor **out) {
  vl_tensor *t;
  VL_TRY(vl_tensor_empty(ndim, size, dt, dev, &t));
  size_t nbytes = (size_t)vl_tensor_numel(t) * vl_dtype_size(dt);
  vl_status s = VL_OK;
  if (nbytes > 0) {
    if (vl_device_is_host(dev)) {
      memcpy(vl_tensor_data(t), host, nbytes);
    } else {
      vl_exec ex;
      s = vl_exec_of("from_host", dev, &ex);
      /* Pageable host memory: the copy must finish before the caller may reuse it. */
      if (s == VL_OK) s = vl_memcpy(vl_tensor_data(t), dev, host, vl_cpu_device(), nbytes, ex.stream, true);
      if (s != VL_OK) s = vl_fail_prefix(s, "from_host: ");
    }
  }
  if (s != VL_OK) {
    vl_tensor_release(t);
    return s;
  }
  *out = t;
  return VL_OK;
}

/* ---- random numbers ---- */

static vl_status rand_check(const char *op, vl_rand_kind kind, vl_dtype dt, double a, double b) {
  if ((unsigned)dt >= VL_NDTYPES) return vl_fail(VL_EDTYPE, "%s: invalid dtype %d", op, (int)dt);
  if (kind != VL_RAND_BERNOULLI && !vl_dtype_is_float(dt))
    return vl_fail(VL_EDTYPE, "%s: expected a float dtype (f32, f16, bf16, f64), got %s", op, vl_dtype_name(dt));
  if (kind == VL_RAND_UNIFORM && !(a <= b && isfinite(a) && isfinite(b)))
    return vl_fail(VL_EINVAL, "%s: expected finite lo <= hi, got lo %g, hi %g", op, a, b);
  if (kind == VL_RAND_NORMAL && !(b >= 0 && isfinite(a) && isfinite(b)))
    return vl_fail(VL_EINVAL, "%s: expected a finite mean and std >= 0, got mean %g, std %g", op, a, b);
  if (kind == VL_RAND_BERNOULLI && !(a >= 0 && a <= 1))
    return vl_fail(VL_EINVAL, "%s: expected p in [0, 1], got %g", op, a);
  if (kind == VL_RAND_EXPONENTIAL && !(a > 0 && isfinite(a)))
    return vl_fail(VL_EINVAL, "%s: expected a finite lambd > 0, got %g", op, a);
  return VL_OK;
}

/* Fills contiguous t from the generator and advances the offset by the counters used. */
static vl_status rand_fill_ex(const char *op, vl_rand_kind kind, vl_tensor *t, double a, double b, int64_t lo,
                              uint64_t range) {
  int64_t numel = vl_tensor_numel(t);
  if (numel == 0) return VL_OK;
  vl_context *ctx = vl_ctx();
  vl_rand_args ra = {kind, t->dtype, vl_tensor_data(t), numel, ctx->seed, ctx->rng_offset, a, b, {0, NULL}, NULL, lo, range};
  VL_TRY(vl_exec_of(op, t->storage->device, &ra.ex));
  /* runtime/core/philox.h: f64 UNIFORM/NORMAL/EXPONENTIAL and wide INT take 2 elements per counter. */
  const uint64_t groups = vl_philox_groups(vl_rand_per_group(t->dtype, kind, ra.range) == 2, numel);
  /* Under capture the counters are relative to the base the replay writes; the generator itself
   * advances at each replay (vl_graph_replay), not now. */
  uint64_t rel = 0;
  const uint64_t *base = vl_graph_capturing() ? vl_graph_rng_draw(t->storage->device.index, groups, &rel) : NULL;
  if (base) {
    ra.base = base;
    ra.offset = rel;
  }
  VL_TRY(vl_backend_of(t->storage->device)->ops->rand(&ra));
  if (!base) ctx->rng_offset += groups;
  return VL_OK;
}

static vl_status rand_fill(const char *op, vl_rand_kind kind, vl_tensor *t, double a, double b) {
  return rand_fill_ex(op, kind, t, a, b, 0, 0);
}

static vl_status rand_new(const char *op, vl_rand_kind kind, int ndim, const int64_t *size, double a, double b,
                          vl_dtype dt, vl_device dev, vl_tensor **out) {
  VL_TRY(rand_check(op, kind, dt, a, b));
  vl_tensor *t;
  VL_TRY(vl_tensor_empty(ndim, size, dt, dev, &t));
  vl_status s = rand_fill(op, kind, t, a, b);
  if (s != VL_OK) {
    vl_tensor_release(t);
    return s;
  }
  *out = t;
  return VL_OK;
}

static vl_status rand_inplace(const char *op, vl_rand_kind kind, vl_tensor *t, double a, double b) {
  VL_TRY(rand_check(op, kind, t->dtype, a, b));
  VL_TRY(vl_check_writable(op, t));
  if (vl_tensor_is_contiguous(t)) return rand_fill(op, kind, t, a, b);
  vl_tensor *tmp;
  VL_TRY(vl_tensor_empty(t->ndim, t->size, t->dtype, t->storage->device, &tmp));
  vl_status s = rand_fill(op, kind, tmp, a, b);
  if (s == VL_OK) s = vl_copy_same_device(t, tmp);
  vl_tensor_release(tmp);
  return s;
}

/* ---- integers and exponentials (randint, random_, exponential_) ---- */

/* [lo, hi) as (lo, range), checked against the dtype: hi - 1 must be representable (PyTorch's
 * rule; a float dtype holds any int64 bound, rounded, as PyTorch's). */
static vl_status int_range(const char *op, int64_t lo, int64_t hi, vl_dtype dt, uint64_t *range) {
  if ((unsigned)dt >= VL_NDTYPES) return vl_fail(VL_EDTYPE, "%s: invalid dtype %d", op, (int)dt);
  if (dt == VL_BOOL) return vl_fail(VL_EDTYPE, "%s: dtype bool is not supported", op);
  if (lo >= hi)
    return vl_fail(VL_EINVAL, "%s: expected low < high, got low %lld, high %lld", op, (long long)lo, (long long)hi);
  if (!vl_dtype_is_float(dt) &&
      (vl_scalar_to(op, vl_scalar_int(lo), dt, NULL) != VL_OK || vl_scalar_to(op, vl_scalar_int(hi - 1), dt, NULL) != VL_OK))
    return vl_fail(VL_EINVAL, "%s: the range [%lld, %lld) is outside dtype %s", op, (long long)lo, (long long)hi,
                   vl_dtype_name(dt));
  *range = (uint64_t)hi - (uint64_t)lo;
  return VL_OK;
}

vl_status vl_randint(int ndim, const int64_t *size, int64_t lo, int64_t hi, vl_dtype dt, vl_device dev,
                     vl_tensor **out) {
  uint64_t range;
  VL_TRY(int_range("randint", lo, hi, dt, &range));
  vl_tensor *t;
  VL_TRY(vl_tensor_empty(ndim, size, dt, dev, &t));
  vl_status s = rand_fill_ex("randint", VL_RAND_INT, t, 0, 0, lo, range);
  if (s != VL_OK) {
    vl_tensor_release(t);
    return s;
  }
  *out = t;
  return VL_OK;
}

/* In place through a contiguous temporary when t is strided, as rand_inplace. */
static vl_status int_inplace(const char *op, vl_tensor *t, int64_t lo, uint64_t range) {
  VL_TRY(vl_check_writable(op, t));
  if (vl_tensor_is_contiguous(t)) return rand_fill_ex(op, VL_RAND_INT, t, 0, 0, lo, range);
  vl_tensor *tmp;
  VL_TRY(vl_tensor_empty(t->ndim, t->size, t->dtype, t->storage->device, &tmp));
  vl_status s = rand_fill_ex(op, VL_RAND_INT, tmp, 0, 0, lo, range);
  if (s == VL_OK) s = vl_copy_same_device(t, tmp);
  vl_tensor_release(tmp);
  return s;
}

vl_status vl_random_(vl_tensor *t, int64_t lo, int64_t hi) {
  uint64_t range;
  VL_TRY(int_range("random_", lo, hi, t->dtype, &range));
  return bumped(t, int_inplace("random_", t, lo, range));
}

/* PyTorch's random_() without bounds: [0, 2^mantissa] for floats (every integer there is exact),
 * [0, max] for integers. */
vl_status vl_random_default_(vl_tensor *t) {
  int64_t hi;
  switch (t->dtype) {
    case VL_F32: hi = ((int64_t)1 << 24) + 1; break;
    case VL_F16: hi = ((int64_t)1 << 11) + 1; break;
    case VL_BF16: hi = ((int64_t)1 << 8) + 1; break;
    case VL_F64: hi = ((int64_t)1 << 53) + 1; break;
    case VL_I32: hi = (int64_t)INT32_MAX + 1; break;
    case VL_U8: hi = 256; break;
    case VL_I64: return bumped(t, int_inplace("random_", t, 0, (uint64_t)1 << 63)); /* hi 2^63: no int64 */
    default: return vl_fail(VL_EDTYPE, "random_: dtype %s is not supported", vl_dtype_name(t->dtype));
  }
  return vl_random_(t, 0, hi);
}

vl_status vl_exponential_(vl_tensor *t, double lambd) {
  return bumped(t, rand_inplace("exponential_", VL_RAND_EXPONENTIAL, t, lambd, 0));
}

vl_status vl_rand(int ndim, const int64_t *size, double lo, double hi, vl_dtype dt, vl_device dev, vl_tensor **out) {
  return rand_new("rand", VL_RAND_UNIFORM, ndim, size, lo, hi, dt, dev, out);
}
vl_status vl_randn(int ndim, const int64_t *size, double mean, double std, vl_dtype dt, vl_device dev,
                   vl_tensor **out) {
  return rand_new("randn", VL_RAND_NORMAL, ndim, size, mean, std, dt, dev, out);
}
vl_status vl_bernoulli(int ndim, const int64_t *size, double p, vl_dtype dt, vl_device dev, vl_tensor **out) {
  return rand_new("bernoulli", VL_RAND_BERNOULLI, ndim, size, p, 0, dt, dev, out);
}
vl_status vl_uniform_(vl_tensor *t, double lo, double hi) {
  return bumped(t, rand_inplace("uniform_", VL_RAND_UNIFORM, t, lo, hi));
}
vl_status vl_normal_(vl_tensor *t, double mean, double std) {
  return bumped(t, rand_inplace("normal_", VL_RAND_NORMAL, t, mean, std));
}
vl_status vl_bernoulli_(vl_tensor *t, double p) {
  return bumped(t, rand_inplace("bernoulli_", VL_RAND_BERNOULLI, t, p, 0));
}

void vl_manual_seed(uint64_t seed) {
  vl_ctx()->seed = seed;
  vl_ctx()->rng_offset = 0;
}

void vl_rng_get_state(uint64_t *seed, uint64_t *offset) {
  *seed = vl_ctx()->seed;
  *offset = vl_ctx()->rng_offset;
}

void vl_rng_set_state(uint64_t seed, uint64_t offset) {
  vl_ctx()->seed = seed;
  vl_ctx()->rng_offset = offset;
}

/* ---- conversion and copies ---- */

vl_status vl_to(vl_tensor *t, vl_dtype dt, vl_device dev, vl_tensor **out) {
  if (t->dtype == dt && vl_device_eq(t->storage->device, dev)) {
    *out = vl_tensor_retain(t);
    return VL_OK;
  }
  /* The layout is kept (PyTorch's preserve_format): a channels-last tensor moved or cast stays so. */
  vl_tensor *r;
  VL_TRY(vl_empty_like(t, dt, dev, &r));
  vl_status s = vl_copy_(r, t);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

/* CUDA side of a cross-device copy: its current stream. */
static vl_status cuda_side_stream(vl_device a, vl_device b, void **stream) {
  vl_device d = vl_device_is_host(a) ? b : a;
  vl_exec ex;
  VL_TRY(vl_exec_of("copy_", d, &ex));
  *stream = ex.stream;
  return VL_OK;
}

/* Both contiguous, same dtype and shape. Synchronous: host memory may be pageable or about to be
 * read, and a source block freed right after must not be reused while a peer copy still reads it. */
static vl_status raw_copy(vl_tensor *dst, vl_tensor *src) {
  size_t nbytes = (size_t)vl_tensor_numel(dst) * vl_dtype_size(dst->dtype);
  vl_device dd = dst->storage->device, sd = src->storage->device;
  void *stream;
  VL_TRY(cuda_side_stream(dd, sd, &stream));
  if (!vl_device_is_host(dd) && !vl_device_is_host(sd) && !vl_device_eq(dd, sd)) {
    /* The source may still be written on its own stream. */
    void *sstream;
    VL_TRY(cuda_side_stream(sd, sd, &sstream));
    vl_status s = vl_stream_synchronize(sd.index, sstream);
    if (s != VL_OK) return vl_fail_prefix(s, "copy_: ");
  }
  vl_status s = vl_memcpy(vl_tensor_data(dst), dd, vl_tensor_data(src), sd, nbytes, stream, true);
  if (s != VL_OK) return vl_fail_prefix(s, "copy_: ");
  /* A copy to the host waited for the source's stream: an out-of-range index an earlier kernel
   * flagged on that device is reported here (t:cpu() after a bad gather), as vl_read_host does,
   * instead of at some later synchronisation. */
  if (vl_device_is_host(dd) && !vl_device_is_host(sd)) {
    const vl_backend *be = vl_backend_of(sd);
    if (be->check_async) VL_TRY(be->check_async(sd.index));
  }
  return VL_OK;
}

static vl_status copy_cross_device(vl_tensor *dst, vl_tensor *src) {
  /* Convert and make contiguous on the source side, move the bytes, then scatter into dst's
   * layout on the destination side when dst is not contiguous. */
  vl_tensor *ex = NULL, *a = NULL, *b = NULL;
  vl_status s = vl_expand(src, dst->ndim, dst->size, &ex);
  if (s != VL_OK) return s;
  if (ex->dtype == dst->dtype && vl_tensor_is_contiguous(ex)) {
    a = vl_tensor_retain(ex);
  } else {
    s = vl_tensor_empty(dst->ndim, dst->size, dst->dtype, src->storage->device, &a);
    if (s == VL_OK) s = vl_copy_same_device(a, ex);
  }
  if (s == VL_OK) {
    if (vl_tensor_is_contiguous(dst)) {
      s = raw_copy(dst, a);
    } else {
      s = vl_tensor_empty(dst->ndim, dst->size, dst->dtype, dst->storage->device, &b);
      if (s == VL_OK) s = raw_copy(b, a);
      if (s == VL_OK) s = vl_copy_same_device(dst, b);
    }
  }
  vl_tensor_release(b);
  vl_tensor_release(a);
  vl_tensor_release(ex);
  return s;
}

vl_status vl_copy_(vl_tensor *dst, vl_tensor *src) {
  VL_TRY(vl_check_writable("copy_", dst));
  if (!vl_broadcasts_to(src, dst->ndim, dst->size)) {
    char a[VL_DESC_LEN], b[VL_DESC_LEN], c[VL_DESC_LEN], d[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE, "copy_: src of shape %s cannot be broadcast to dst of shape %s (dst %s, src %s)",
                   vl_shape_str(src, a, sizeof a), vl_shape_str(dst, b, sizeof b), vl_tensor_desc(dst, c, sizeof c),
                   vl_tensor_desc(src, d, sizeof d));
  }
  if (vl_tensor_numel(dst) == 0) return VL_OK;
  if (!vl_device_eq(dst->storage->device, src->storage->device)) return bumped(dst, copy_cross_device(dst, src));
  vl_tensor *in;
  VL_TRY(vl_unalias(dst, src, &in));
  vl_status s = vl_copy_same_device(dst, in);
  vl_tensor_release(in);
  return bumped(dst, s);
}

vl_status vl_fill_scalar_(vl_tensor *t, vl_scalar value) {
  VL_TRY(vl_check_writable("fill_", t));
  return bumped(t, fill_tensor("fill_", t, value));
}

vl_status vl_fill_(vl_tensor *t, double value) { return vl_fill_scalar_(t, vl_scalar_float(value)); }

vl_status vl_to_host(vl_tensor *t, void *buf) { return vl_read_host("to_host", t, buf); }

vl_status vl_read_host(const char *op, vl_tensor *t, void *buf) {
  int64_t numel = vl_tensor_numel(t);
  if (numel == 0) return VL_OK;
  if (!vl_device_is_host(t->storage->device)) VL_TRY(vl_graph_refuse(op, "a read of device memory on the host"));
  vl_storage hs;
  vl_tensor ht;
  vl_wrap_host(&ht, &hs, buf, t->ndim, t->size, t->dtype);
  VL_TRY(vl_copy_(&ht, t));
  vl_device dev = t->storage->device;
  if (!vl_device_is_host(dev)) {
    vl_exec ex;
    VL_TRY(vl_exec_of("to_host", dev, &ex));
    vl_status s = vl_stream_synchronize(dev.index, ex.stream);
    if (s != VL_OK) return vl_fail_prefix(s, "to_host: ");
    const vl_backend *be = vl_backend_of(dev);
    if (be->check_async) VL_TRY(be->check_async(dev.index));
  }
  return VL_OK;
}

vl_status vl_item(vl_tensor *t, double *out) {
  if (vl_tensor_numel(t) != 1) {
    char d[VL_DESC_LEN];
    return vl_fail(VL_EINVAL, "item: expected a tensor with one element, got %lld elements (%s)",
                   (long long)vl_tensor_numel(t), vl_tensor_desc(t, d, sizeof d));
  }
  if (vl_device_is_host(t->storage->device)) {
    *out = vl_load_as_f64(vl_tensor_data(t), t->dtype);
    return VL_OK;
  }
  unsigned char buf[16];
  VL_TRY(vl_read_host("item", t, buf));
  *out = vl_load_as_f64(buf, t->dtype);
  return VL_OK;
}
