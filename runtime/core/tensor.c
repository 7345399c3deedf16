/* runtime/core/tensor.c: refcounted storage and strided views. */
#include "runtime/core/graph.h"
#include "runtime/core/tensor.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/cuda.h"
#include "runtime/core/alloc.h"

/* ---- storage ---- */

static vl_status storage_new(const char *op, size_t nbytes, vl_device dev, vl_storage **out) {
  vl_storage *st = calloc(1, sizeof *st);
  if (!st) return vl_fail(VL_EOOM, "%s: out of host memory", op);
  st->refcount = 1;
  st->device = dev;
  st->nbytes = nbytes;
  if (dev.type == VL_CPU) {
    if (nbytes > 0) {
      size_t rounded = (nbytes + 63) & ~(size_t)63;
      st->data = aligned_alloc(64, rounded);
      if (!st->data) {
        free(st);
        return vl_fail(VL_EOOM, "%s: out of host memory allocating %zu bytes", op, nbytes);
      }
    }
  } else {
    vl_alloc *pool;
    void *stream;
    vl_block *block;
    vl_status s = vl_cuda_alloc(dev.index, &pool);
    if (s == VL_OK) s = vl_cuda_current_stream(dev.index, &stream);
    if (s == VL_OK && vl_graph_capturing()) s = vl_graph_check_alloc(dev.index, stream, nbytes);
    if (s == VL_OK) s = vl_alloc_malloc(pool, nbytes, stream, &block);
    if (s != VL_OK) {
      free(st);
      return vl_fail_prefix(s, "%s: ", op);
    }
    st->block = block;
    st->data = vl_block_ptr(block);
  }
  *out = st;
  return VL_OK;
}

static void storage_release(vl_storage *st) {
  if (!st || --st->refcount > 0) return;
  if (st->device.type == VL_CPU) {
    if (!st->block) free(st->data);
    else if (vl_ctx()->host_pool) vl_alloc_free(vl_ctx()->host_pool, st->block); /* pinned */
  } else if (st->block) {
    /* After vl_shutdown the pool (and every block in it) is gone: nothing left to return. */
    vl_alloc *pool = vl_ctx()->pool[st->device.index];
    if (pool) vl_alloc_free(pool, st->block);
  }
  free(st);
}

vl_status vl_shape_check(const char *op, int ndim, const int64_t *size, vl_dtype dt, int64_t *numel) {
  if (ndim < 0 || ndim > VL_MAX_DIMS)
    return vl_fail(VL_EINVAL, "%s: %d dims requested, at most %d are supported", op, ndim, VL_MAX_DIMS);
  /* `extent` is the product with zero sizes counted as 1: what contiguous strides multiply up to,
   * so a zero-size tensor cannot carry dims whose strides overflow (and a permutation of a shape
   * is accepted exactly when the shape is). Times the element size it bounds every byte count and
   * byte stride, which the kernels compute in int64. */
  int64_t n = 1, extent = (int64_t)vl_dtype_size(dt);
  bool overflow = false;
  for (int i = 0; i < ndim; i++) {
    if (size[i] < 0)
      return vl_fail(VL_EINVAL, "%s: negative size %lld in dim %d", op, (long long)size[i], i + 1);
    if (!overflow) overflow = __builtin_mul_overflow(extent, size[i] > 1 ? size[i] : 1, &extent);
    if (!overflow) n *= size[i]; /* n <= extent / element size */
  }
  if (overflow) {
    char sh[VL_DESC_LEN];
    return vl_fail(VL_EINVAL, "%s: shape %s of %s is too large (its byte size overflows 64 bits)", op,
                   vl_shape_fmt(ndim, size, sh, sizeof sh), vl_dtype_name(dt));
  }
  if (numel) *numel = n;
  return VL_OK;
}

static vl_status check_device(const char *op, vl_device dev) {
  if (dev.type == VL_CPU) return VL_OK;
  if (!vl_have_cuda())
    return vl_fail(VL_EUNSUPPORTED, "%s: device cuda:%d requested but v100lua was built without CUDA", op,
                   dev.index);
  VL_TRY(vl_init());
  int n = vl_ctx()->ndevices;
  if (dev.index < 0 || dev.index >= n)
    return vl_fail(VL_EDEVICE, "%s: no CUDA device %d (%d present)", op, dev.index, n);
  return VL_OK;
}

vl_status vl_tensor_empty_op(const char *op, int ndim, const int64_t *size, vl_dtype dt, vl_device dev,
                             vl_tensor **out) {
  if ((unsigned)dt >= VL_NDTYPES) return vl_fail(VL_EDTYPE, "%s: invalid dtype %d", op, (int)dt);
  int64_t numel;
  VL_TRY(vl_shape_check(op, ndim, size, dt, &numel));
  VL_TRY(check_device(op, dev));
  vl_tensor *t = calloc(1, sizeof *t);
  if (!t) return vl_fail(VL_EOOM, "%s: out of host memory", op);
  vl_status s = storage_new(op, (size_t)numel * vl_dtype_size(dt), dev, &t->storage);
  if (s != VL_OK) {
    free(t);
    return s;
  }
  t->refcount = 1;
  t->ndim = ndim;
  t->dtype = dt;
  for (int i = 0; i < ndim; i++) t->size[i] = size[i];
  vl_contiguous_strides(ndim, size, t->stride);
  *out = t;
  return VL_OK;
}

vl_status vl_tensor_empty(int ndim, const int64_t *size, vl_dtype dt, vl_device dev, vl_tensor **out) {
  return vl_tensor_empty_op("empty", ndim, size, dt, dev, out);
}

vl_status vl_tensor_empty_pinned(int ndim, const int64_t *size, vl_dtype dt, vl_tensor **out) {
  vl_tensor *t = NULL;
  VL_TRY(vl_tensor_empty_op("empty_pinned", ndim, size, dt, vl_cpu_device(), &t));
  /* Swap the aligned_alloc bytes for a block of the pinned host pool (same size). */
  vl_storage *st = t->storage;
  vl_alloc *pool;
  vl_block *block = NULL;
  vl_status s = vl_host_alloc(&pool);
  if (s == VL_OK) s = vl_alloc_malloc(pool, st->nbytes, NULL, &block);
  if (s != VL_OK) {
    vl_tensor_release(t);
    return vl_fail_prefix(s, "empty_pinned: ");
  }
  free(st->data);
  st->data = vl_block_ptr(block);
  st->block = block;
  *out = t;
  return VL_OK;
}

vl_tensor *vl_tensor_retain(vl_tensor *t) {
  if (t) t->refcount++;
  return t;
}

void vl_tensor_set_meta_free_hook(void (*free_meta)(vl_tensor *t)) { vl_ctx()->hooks.tensor_meta_free = free_meta; }

void vl_tensor_release(vl_tensor *t) {
  if (!t || --t->refcount > 0) return;
  /* Only autograd attaches state, and it installs the hook before its first (context.h). */
  if (t->autograd) vl_ctx()->hooks.tensor_meta_free(t);
  storage_release(t->storage);
  free(t);
}

vl_status vl_tensor_set_(vl_tensor *t, vl_tensor *src) {
  if (t == src) return VL_OK;
  src->storage->refcount++;
  storage_release(t->storage);
  t->storage = src->storage;
  t->offset = src->offset;
  t->ndim = src->ndim;
  t->dtype = src->dtype;
  memcpy(t->size, src->size, sizeof t->size);
  memcpy(t->stride, src->stride, sizeof t->stride);
  t->storage->version++;
  return VL_OK;
}

size_t vl_tensor_storage_nbytes(const vl_tensor *t) { return t && t->storage ? t->storage->nbytes : 0; }

void vl_wrap_host(vl_tensor *t, vl_storage *st, void *data, int ndim, const int64_t *size, vl_dtype dt) {
  memset(st, 0, sizeof *st);
  memset(t, 0, sizeof *t);
  st->refcount = 1 << 30; /* never reaches zero: the caller owns the memory */
  st->device = vl_cpu_device();
  st->data = data;
  st->nbytes = (size_t)vl_shape_numel(ndim, size) * vl_dtype_size(dt);
  t->refcount = 1 << 30;
  t->storage = st;
  t->ndim = ndim;
  t->dtype = dt;
  for (int i = 0; i < ndim; i++) t->size[i] = size[i];
  vl_contiguous_strides(ndim, size, t->stride);
}

/* ---- properties ---- */

int64_t vl_shape_numel(int ndim, const int64_t *size) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= size[i];
  return n;
}

int64_t vl_tensor_numel(const vl_tensor *t) { return vl_shape_numel(t->ndim, t->size); }

bool vl_tensor_is_contiguous(const vl_tensor *t) {
  int64_t expected = 1;
  if (vl_tensor_numel(t) == 0) return true;
  for (int i = t->ndim - 1; i >= 0; i--) {
    if (t->size[i] == 1) continue;
    if (t->stride[i] != expected) return false;
    expected *= t->size[i];
  }
  return true;
}

void *vl_tensor_data(const vl_tensor *t) {
  if (!t->storage->data) return NULL;
  return (char *)t->storage->data + t->offset * (int64_t)vl_dtype_size(t->dtype);
}

vl_status vl_wrap_dim(const char *op, int dim, int ndim, int *out) {
  if (ndim <= 0 || dim < -ndim || dim >= ndim)
    return vl_fail(VL_EINVAL, "%s: dim %d out of range for a tensor of %d dims", op, vl_dim_user(dim), ndim);
  *out = dim < 0 ? dim + ndim : dim;
  return VL_OK;
}

const char *vl_shape_fmt(int ndim, const int64_t *size, char *buf, size_t n) {
  if (ndim == 0) {
    snprintf(buf, n, "scalar");
    return buf;
  }
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < ndim && used < n; i++) {
    int w = snprintf(buf + used, n - used, i ? "x%lld" : "%lld", (long long)size[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
  return buf;
}

const char *vl_shape_str(const vl_tensor *t, char *buf, size_t n) {
  return vl_shape_fmt(t->ndim, t->size, buf, n);
}

const char *vl_tensor_desc(const vl_tensor *t, char *buf, size_t n) {
  char shape[VL_DESC_LEN], dev[32];
  vl_shape_str(t, shape, sizeof shape);
  snprintf(buf, n, "%s %s %s", shape, vl_dtype_name(t->dtype), vl_device_str(t->storage->device, dev, sizeof dev));
  return buf;
}

void vl_contiguous_strides(int ndim, const int64_t *size, int64_t *stride) {
  int64_t s = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    stride[i] = s;
    s *= size[i] > 1 ? size[i] : 1;
  }
}

/* ---- views ---- */

static vl_status view_of(const char *op, vl_tensor *t, vl_tensor **out) {
  vl_tensor *v = malloc(sizeof *v);
  if (!v) return vl_fail(VL_EOOM, "%s: out of host memory", op);
  *v = *t;
  v->refcount = 1;
  v->autograd = NULL;
  v->storage->refcount++;
  *out = v;
  return VL_OK;
}

/* Resolves one -1 and checks the element count. */
static vl_status infer_shape(const char *op, const vl_tensor *t, int ndim, const int64_t *size, int64_t *res) {
  char d[VL_DESC_LEN], s[VL_DESC_LEN];
  if (ndim < 0 || ndim > VL_MAX_DIMS)
    return vl_fail(VL_EINVAL, "%s: %d dims requested, at most %d are supported", op, ndim, VL_MAX_DIMS);
  int infer = -1;
  int64_t known = 1;
  bool zero = false, overflow = false;
  for (int i = 0; i < ndim; i++) {
    if (size[i] == -1) {
      if (infer >= 0) return vl_fail(VL_EINVAL, "%s: only one dim can be -1 (tensor %s)", op, vl_tensor_desc(t, d, sizeof d));
      infer = i;
    } else if (size[i] < 0) {
      return vl_fail(VL_EINVAL, "%s: invalid size %lld in dim %d (tensor %s)", op, (long long)size[i], i + 1,
                     vl_tensor_desc(t, d, sizeof d));
    } else {
      zero |= size[i] == 0;
      if (!overflow) overflow = __builtin_mul_overflow(known, size[i], &known);
    }
    res[i] = size[i];
  }
  /* 2^32 x 2^32 must not wrap to 0 and match an empty tensor (with a 0 size the count is 0, and
   * vl_shape_check below judges the other dims). */
  if (zero) known = 0;
  else if (overflow)
    return vl_fail(VL_ESHAPE, "%s: shape %s is too large (its element count overflows 64 bits; %s)", op,
                   vl_shape_fmt(ndim, size, s, sizeof s), vl_tensor_desc(t, d, sizeof d));
  int64_t numel = vl_tensor_numel(t);
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      return vl_fail(VL_ESHAPE, "%s: shape %s is invalid for a tensor of %lld elements (%s)", op,
                     vl_shape_fmt(ndim, size, s, sizeof s), (long long)numel, vl_tensor_desc(t, d, sizeof d));
    res[infer] = numel / known;
  } else if (known != numel) {
    return vl_fail(VL_ESHAPE, "%s: shape %s is invalid for a tensor of %lld elements (%s)", op,
                   vl_shape_fmt(ndim, size, s, sizeof s), (long long)numel, vl_tensor_desc(t, d, sizeof d));
  }
  /* An empty result may still have dims whose strides overflow ({0} viewed as 0x2^40x2^40). */
  return vl_shape_check(op, ndim, res, t->dtype, NULL);
}

/* PyTorch's computeStride: whether t's memory can be seen with shape `size` without copying,
 * by matching chunks of contiguous old dims to groups of new dims. */
static bool view_strides(const vl_tensor *t, int ndim, const int64_t *size, int64_t *stride) {
  if (vl_tensor_numel(t) == 0) {
    vl_contiguous_strides(ndim, size, stride);
    return true;
  }
  int64_t one_size = 1, one_stride = 1;
  int on = t->ndim ? t->ndim : 1;
  const int64_t *osize = t->ndim ? t->size : &one_size;
  const int64_t *ostride = t->ndim ? t->stride : &one_stride;
  int view_d = ndim - 1;
  int64_t chunk_base = ostride[on - 1], tensor_numel = 1, view_numel = 1;
  for (int td = on - 1; td >= 0; td--) {
    tensor_numel *= osize[td];
    if (td == 0 || (osize[td - 1] != 1 && ostride[td - 1] != tensor_numel * chunk_base)) {
      while (view_d >= 0 && (view_numel < tensor_numel || size[view_d] == 1)) {
        stride[view_d] = view_numel * chunk_base;
        view_numel *= size[view_d];
        view_d--;
      }
      if (view_numel != tensor_numel) return false;
      if (td > 0) {
        chunk_base = ostride[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

vl_status vl_view(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  int64_t shape[VL_MAX_DIMS], stride[VL_MAX_DIMS];
  VL_TRY(infer_shape("view", t, ndim, size, shape));
  if (!view_strides(t, ndim, shape, stride)) {
    char d[VL_DESC_LEN], s[VL_DESC_LEN];
    return vl_fail(VL_ESHAPE,
                   "view: shape %s is not compatible with the strides of the input (%s, not contiguous); "
                   "use reshape",
                   vl_shape_fmt(ndim, shape, s, sizeof s), vl_tensor_desc(t, d, sizeof d));
  }
  vl_tensor *v;
  VL_TRY(view_of("view", t, &v));
  v->ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    v->size[i] = shape[i];
    v->stride[i] = stride[i];
  }
  *out = v;
  return VL_OK;
}

vl_status vl_reshape_view(vl_tensor *t, int ndim, const int64_t *size, int64_t *shape, vl_tensor **out) {
  int64_t stride[VL_MAX_DIMS];
  VL_TRY(infer_shape("reshape", t, ndim, size, shape));
  if (view_strides(t, ndim, shape, stride)) return vl_view(t, ndim, shape, out);
  *out = NULL;
  return VL_OK;
}

vl_status vl_narrow(vl_tensor *t, int dim, int64_t start, int64_t length, vl_tensor **out) {
  int d;
  VL_TRY(vl_wrap_dim("narrow", dim, t->ndim, &d));
  if (start < 0 || length < 0 || start > t->size[d] || length > t->size[d] - start) {
    char desc[VL_DESC_LEN];
    /* start is 1-based in Lua, like dims. */
    return vl_fail(VL_EINVAL, "narrow: start %lld and length %lld out of range for dim %d of size %lld (%s)",
                   (long long)start + 1, (long long)length, d + 1, (long long)t->size[d],
                   vl_tensor_desc(t, desc, sizeof desc));
  }
  vl_tensor *v;
  VL_TRY(view_of("narrow", t, &v));
  v->offset += start * t->stride[d];
  v->size[d] = length;
  *out = v;
  return VL_OK;
}

vl_status vl_select(vl_tensor *t, int dim, int64_t index, vl_tensor **out) {
  int d;
  VL_TRY(vl_wrap_dim("select", dim, t->ndim, &d));
  int64_t n = t->size[d];
  if (index < -n || index >= n) {
    char desc[VL_DESC_LEN];
    return vl_fail(VL_EINVAL, "select: index %lld out of range for dim %d of size %lld (%s)",
                   (long long)(index >= 0 ? index + 1 : index), d + 1, (long long)n,
                   vl_tensor_desc(t, desc, sizeof desc));
  }
  if (index < 0) index += n;
  vl_tensor *v;
  VL_TRY(view_of("select", t, &v));
  v->offset += index * t->stride[d];
  for (int i = d; i < t->ndim - 1; i++) {
    v->size[i] = t->size[i + 1];
    v->stride[i] = t->stride[i + 1];
  }
  v->ndim--;
  *out = v;
  return VL_OK;
}

vl_status vl_transpose(vl_tensor *t, int d0, int d1, vl_tensor **out) {
  int a = 0, b = 0;
  VL_TRY(vl_wrap_dim("transpose", d0, t->ndim, &a));
  VL_TRY(vl_wrap_dim("transpose", d1, t->ndim, &b));
  vl_tensor *v;
  VL_TRY(view_of("transpose", t, &v));
  v->size[a] = t->size[b];
  v->stride[a] = t->stride[b];
  v->size[b] = t->size[a];
  v->stride[b] = t->stride[a];
  *out = v;
  return VL_OK;
}

vl_status vl_permute(vl_tensor *t, int ndim, const int *perm, vl_tensor **out) {
  char desc[VL_DESC_LEN];
  if (ndim != t->ndim)
    return vl_fail(VL_EINVAL, "permute: %d dims given for a tensor of %d dims (%s)", ndim, t->ndim,
                   vl_tensor_desc(t, desc, sizeof desc));
  int p[VL_MAX_DIMS];
  bool seen[VL_MAX_DIMS] = {false};
  for (int i = 0; i < ndim; i++) {
    VL_TRY(vl_wrap_dim("permute", perm[i], ndim, &p[i]));
    if (seen[p[i]])
      return vl_fail(VL_EINVAL, "permute: dim %d appears more than once (%s)", p[i] + 1,
                     vl_tensor_desc(t, desc, sizeof desc));
    seen[p[i]] = true;
  }
  vl_tensor *v;
  VL_TRY(view_of("permute", t, &v));
  for (int i = 0; i < ndim; i++) {
    v->size[i] = t->size[p[i]];
    v->stride[i] = t->stride[p[i]];
  }
  *out = v;
  return VL_OK;
}

vl_status vl_expand(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out) {
  char desc[VL_DESC_LEN], s[VL_DESC_LEN];
  if (ndim < t->ndim || ndim > VL_MAX_DIMS)
    return vl_fail(VL_EINVAL, "expand: %d dims given for a tensor of %d dims (%s)", ndim, t->ndim,
                   vl_tensor_desc(t, desc, sizeof desc));
  int lead = ndim - t->ndim;
  int64_t nsize[VL_MAX_DIMS], nstride[VL_MAX_DIMS];
  for (int i = 0; i < ndim; i++) {
    int j = i - lead;
    int64_t want = size[i];
    if (j < 0) {
      if (want < 0)
        return vl_fail(VL_EINVAL, "expand: size %lld is not allowed for the new leading dim %d (target %s, %s)",
                       (long long)want, i + 1, vl_shape_fmt(ndim, size, s, sizeof s), vl_tensor_desc(t, desc, sizeof desc));
      nsize[i] = want;
      nstride[i] = 0;
    } else if (want == -1 || want == t->size[j]) {
      nsize[i] = t->size[j];
      nstride[i] = t->stride[j];
    } else if (t->size[j] == 1 && want >= 0) {
      nsize[i] = want;
      nstride[i] = 0;
    } else {
      return vl_fail(VL_ESHAPE,
                     "expand: size %lld of dim %d cannot be expanded to %lld (only size-1 dims expand; target %s, %s)",
                     (long long)t->size[j], j + 1, (long long)want, vl_shape_fmt(ndim, size, s, sizeof s),
                     vl_tensor_desc(t, desc, sizeof desc));
    }
  }
  VL_TRY(vl_shape_check("expand", ndim, nsize, t->dtype, NULL));
  vl_tensor *v;
  VL_TRY(view_of("expand", t, &v));
  v->ndim = ndim;
  for (int i = 0; i < ndim; i++) {
    v->size[i] = nsize[i];
    v->stride[i] = nstride[i];
  }
  *out = v;
  return VL_OK;
}

vl_status vl_squeeze(vl_tensor *t, int dim, vl_tensor **out) {
  int d;
  VL_TRY(vl_wrap_dim("squeeze", dim, t->ndim, &d));
  vl_tensor *v;
  VL_TRY(view_of("squeeze", t, &v));
  if (t->size[d] == 1) {
    for (int i = d; i < t->ndim - 1; i++) {
      v->size[i] = t->size[i + 1];
      v->stride[i] = t->stride[i + 1];
    }
    v->ndim--;
  }
  *out = v;
  return VL_OK;
}

vl_status vl_squeeze_all(vl_tensor *t, vl_tensor **out) {
  vl_tensor *v;
  VL_TRY(view_of("squeeze", t, &v));
  int n = 0;
  for (int i = 0; i < t->ndim; i++) {
    if (t->size[i] == 1) continue;
    v->size[n] = t->size[i];
    v->stride[n] = t->stride[i];
    n++;
  }
  v->ndim = n;
  *out = v;
  return VL_OK;
}

vl_status vl_unsqueeze(vl_tensor *t, int dim, vl_tensor **out) {
  int d;
  if (t->ndim >= VL_MAX_DIMS)
    return vl_fail(VL_EINVAL, "unsqueeze: a tensor already has the maximum of %d dims", VL_MAX_DIMS);
  VL_TRY(vl_wrap_dim("unsqueeze", dim, t->ndim + 1, &d));
  vl_tensor *v;
  VL_TRY(view_of("unsqueeze", t, &v));
  for (int i = t->ndim; i > d; i--) {
    v->size[i] = t->size[i - 1];
    v->stride[i] = t->stride[i - 1];
  }
  v->size[d] = 1;
  v->stride[d] = d < t->ndim ? t->size[d] * t->stride[d] : 1;
  v->ndim = t->ndim + 1;
  *out = v;
  return VL_OK;
}

vl_status vl_as_strided(vl_tensor *t, int ndim, const int64_t *size, const int64_t *stride, int64_t offset,
                        vl_tensor **out) {
  char desc[VL_DESC_LEN], s[VL_DESC_LEN];
  VL_TRY(vl_shape_check("as_strided", ndim, size, t->dtype, NULL));
  if (offset < 0) return vl_fail(VL_EINVAL, "as_strided: negative offset %lld", (long long)offset);
  int64_t last = offset, step;
  bool empty = false, overflow = false;
  for (int i = 0; i < ndim; i++) {
    if (stride[i] < 0)
      return vl_fail(VL_EINVAL, "as_strided: negative stride %lld in dim %d", (long long)stride[i], i + 1);
    if (size[i] == 0) empty = true;
    /* A wrapped `last` would pass the storage check below. */
    else if (!overflow)
      overflow = __builtin_mul_overflow(size[i] - 1, stride[i], &step) || __builtin_add_overflow(last, step, &last);
  }
  if (overflow) last = INT64_MAX;
  int64_t cap = (int64_t)(t->storage->nbytes / vl_dtype_size(t->dtype));
  if (!empty && last >= cap)
    return vl_fail(VL_EINVAL,
                   "as_strided: shape %s with offset %lld reaches element %lld, beyond the storage of %lld elements (%s)",
                   vl_shape_fmt(ndim, size, s, sizeof s), (long long)offset, (long long)last, (long long)cap,
                   vl_tensor_desc(t, desc, sizeof desc));
  vl_tensor *v;
  VL_TRY(view_of("as_strided", t, &v));
  v->ndim = ndim;
  v->offset = offset;
  for (int i = 0; i < ndim; i++) {
    v->size[i] = size[i];
    v->stride[i] = stride[i];
  }
  *out = v;
  return VL_OK;
}
