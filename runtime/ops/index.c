/* runtime/ops/index.c: gather / scatter_add / scatter (assign) / index_select, nonzero, and cat / stack / split / chunk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/ops/ops_internal.h"

/* In-place front ends bump the storage's version once they wrote (autograd's saved-tensor check). */
static vl_status bumped(vl_tensor *t, vl_status s) {
  if (s == VL_OK) t->storage->version++;
  return s;
}

static void strided_of(const vl_tensor *t, vl_strided *s) {
  s->data = vl_tensor_data(t);
  s->dtype = t->dtype;
  s->ndim = t->ndim;
  for (int i = 0; i < t->ndim; i++) {
    s->size[i] = t->size[i];
    s->stride[i] = t->stride[i];
  }
}

static vl_status check_index(const char *op, const vl_tensor *src, const vl_tensor *index) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  VL_TRY(vl_check_same_device(op, src, "self", index, "index"));
  if (index->dtype != VL_I64 && index->dtype != VL_I32)
    return vl_fail(VL_EDTYPE, "%s: index must be i64 or i32, got %s (self %s, index %s)", op,
                   vl_dtype_name(index->dtype), vl_tensor_desc(src, d1, sizeof d1), vl_tensor_desc(index, d2, sizeof d2));
  return VL_OK;
}

static vl_status run_index(const char *op, vl_status (*fn)(const vl_index_args *), vl_tensor *out, vl_tensor *src,
                           vl_tensor *index, int dim) {
  if (vl_tensor_numel(index) == 0) return VL_OK;
  vl_index_args ia;
  memset(&ia, 0, sizeof ia);
  ia.op = op;
  strided_of(out, &ia.out);
  strided_of(src, &ia.src);
  strided_of(index, &ia.index);
  ia.dim = dim;
  ia.deterministic = vl_deterministic();
  VL_TRY(vl_exec_of(op, out->storage->device, &ia.ex));
  return fn(&ia);
}

/* The index ops' checks and kernel errors (an index out of bounds, also the one CUDA reports
 * asynchronously) name `op`: a layer built on them (cross_entropy, embedding) passes its own name. */
vl_status vl_gather_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  int d;
  VL_TRY(check_index(op, src, index));
  VL_TRY(vl_wrap_dim(op, dim, src->ndim, &d));
  if (index->ndim != src->ndim)
    return vl_fail(VL_ESHAPE, "%s: index has %d dims but self has %d (self %s, index %s)", op, index->ndim, src->ndim,
                   vl_tensor_desc(src, d1, sizeof d1), vl_tensor_desc(index, d2, sizeof d2));
  for (int i = 0; i < src->ndim; i++)
    if (i != d && index->size[i] > src->size[i])
      return vl_fail(VL_ESHAPE, "%s: index size %lld exceeds self size %lld in dim %d (self %s, index %s)",
                     op, (long long)index->size[i], (long long)src->size[i], i + 1, vl_tensor_desc(src, d1, sizeof d1),
                     vl_tensor_desc(index, d2, sizeof d2));
  vl_tensor *r;
  VL_TRY(vl_tensor_empty(index->ndim, index->size, src->dtype, src->storage->device, &r));
  vl_status s = run_index(op, vl_backend_of(src->storage->device)->ops->gather, r, src, index, d);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_gather(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  return vl_gather_as("gather", src, dim, index, out);
}

static vl_status scatter_check(const char *op, vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, int *d) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN], d3[VL_DESC_LEN];
  VL_TRY(check_index(op, self, index));
  VL_TRY(vl_check_same_device(op, self, "self", src, "src"));
  VL_TRY(vl_wrap_dim(op, dim, self->ndim, d));
  if (src->dtype != self->dtype)
    return vl_fail(VL_EDTYPE, "%s: src dtype %s differs from self dtype %s (self %s, src %s)", op,
                   vl_dtype_name(src->dtype), vl_dtype_name(self->dtype), vl_tensor_desc(self, d1, sizeof d1),
                   vl_tensor_desc(src, d3, sizeof d3));
  if (index->ndim != self->ndim || src->ndim != self->ndim)
    return vl_fail(VL_ESHAPE, "%s: self, index and src need the same number of dims (self %s, index %s, src %s)", op,
                   vl_tensor_desc(self, d1, sizeof d1), vl_tensor_desc(index, d2, sizeof d2),
                   vl_tensor_desc(src, d3, sizeof d3));
  for (int i = 0; i < self->ndim; i++) {
    if (index->size[i] > src->size[i] || (i != *d && index->size[i] > self->size[i]))
      return vl_fail(VL_ESHAPE,
                     "%s: index size %lld in dim %d exceeds src size %lld or self size %lld (self %s, index %s, src %s)",
                     op, (long long)index->size[i], i + 1, (long long)src->size[i], (long long)self->size[i],
                     vl_tensor_desc(self, d1, sizeof d1), vl_tensor_desc(index, d2, sizeof d2),
                     vl_tensor_desc(src, d3, sizeof d3));
  }
  return VL_OK;
}

vl_status vl_scatter_add(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out) {
  int d;
  VL_TRY(scatter_check("scatter_add", self, dim, index, src, &d));
  vl_tensor *r;
  VL_TRY(vl_clone(self, &r));
  vl_status s = run_index("scatter_add", vl_backend_of(self->storage->device)->ops->scatter_add, r, src, index, d);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_scatter_into_(const char *op, vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src,
                          vl_scatter_mode mode) {
  int d;
  VL_TRY(scatter_check(op, self, dim, index, src, &d));
  VL_TRY(vl_check_writable(op, self));
  /* Reads of src/index must not see the updates: copy them when they share self's memory. */
  vl_tensor *us = NULL, *ui = NULL;
  const vl_kernels *k = vl_backend_of(self->storage->device)->ops;
  vl_status s = vl_tensor_numel(index) ? vl_unalias(self, src, &us) : VL_OK;
  if (s == VL_OK && us) s = vl_unalias(self, index, &ui);
  vl_status (*fn)(const vl_index_args *) =
      mode == VL_SCATTER_ADD ? k->scatter_add : mode == VL_SCATTER_MUL ? k->scatter_mul : k->scatter;
  if (s == VL_OK && ui) s = run_index(op, fn, self, us, ui, d);
  vl_tensor_release(us);
  vl_tensor_release(ui);
  return bumped(self, s);
}

vl_status vl_scatter_add_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src) {
  return vl_scatter_into_("scatter_add_", self, dim, index, src, VL_SCATTER_ADD);
}

/* scatter (assign): as scatter_add with the kernel that writes instead of adding. */
vl_status vl_scatter(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out) {
  int d;
  VL_TRY(scatter_check("scatter", self, dim, index, src, &d));
  vl_tensor *r;
  VL_TRY(vl_clone(self, &r));
  vl_status s = run_index("scatter", vl_backend_of(self->storage->device)->ops->scatter, r, src, index, d);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_scatter_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src) {
  return vl_scatter_into_("scatter_", self, dim, index, src, VL_SCATTER_SET);
}

vl_status vl_scatter_value_src(const char *op, vl_tensor *self, vl_tensor *index, vl_scalar value, vl_tensor **out) {
  unsigned char probe[16];
  VL_TRY(vl_scalar_to(op, value, self->dtype, probe)); /* the value's error names the op, not "full" */
  vl_tensor *one = NULL;
  VL_TRY(vl_full_scalar(0, NULL, value, self->dtype, self->storage->device, &one));
  vl_status s = vl_expand(one, index->ndim, index->size, out);
  vl_tensor_release(one);
  return s;
}

vl_status vl_index_select_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  int d;
  VL_TRY(check_index(op, src, index));
  VL_TRY(vl_wrap_dim(op, dim, src->ndim, &d));
  if (index->ndim > 1)
    return vl_fail(VL_ESHAPE, "%s: index must be 1-D (self %s, index %s)", op,
                   vl_tensor_desc(src, d1, sizeof d1),
                   vl_tensor_desc(index, d2, sizeof d2));
  int64_t osize[VL_MAX_DIMS];
  memcpy(osize, src->size, sizeof(int64_t) * (size_t)src->ndim);
  osize[d] = vl_tensor_numel(index);
  vl_tensor *idx = NULL, *r = NULL;
  /* The kernel sees a 1-D index; a 0-dim one is a view of one element. */
  int64_t one = 1;
  vl_status s = index->ndim == 0 ? vl_view(index, 1, &one, &idx) : (idx = vl_tensor_retain(index), VL_OK);
  if (s == VL_OK) s = vl_tensor_empty(src->ndim, osize, src->dtype, src->storage->device, &r);
  if (s == VL_OK && vl_tensor_numel(r) > 0)
    s = run_index(op, vl_backend_of(src->storage->device)->ops->index_select, r, src, idx, d);
  vl_tensor_release(idx);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_index_select(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out) {
  return vl_index_select_as("index_select", src, dim, index, out);
}

/* ---- nonzero ---- */

/* The shape of the result depends on the data, so the mask is read on the host (on a GPU that is a
 * synchronisation, as PyTorch's nonzero and masked_select are); the positions are then made on the
 * host and copied to the mask's device. NaN counts as non-zero, as in PyTorch. */
vl_status vl_nonzero(vl_tensor *mask, bool flat, vl_tensor **out) {
  int64_t numel = vl_tensor_numel(mask);
  size_t esz = vl_dtype_size(mask->dtype);
  int nd = mask->ndim;
  unsigned char *buf = numel > 0 ? malloc((size_t)numel * esz) : NULL;
  if (numel > 0 && !buf) return vl_fail(VL_EOOM, "nonzero: out of host memory (%lld elements)", (long long)numel);
  vl_status s = vl_read_host("nonzero", mask, buf);
  int64_t n = 0;
  for (int64_t i = 0; s == VL_OK && i < numel; i++) n += vl_load_as_f64(buf + (size_t)i * esz, mask->dtype) != 0;
  int cols = flat ? 1 : nd;
  int64_t *pos = NULL;
  if (s == VL_OK && n * cols > 0) {
    pos = malloc(sizeof(int64_t) * (size_t)(n * cols));
    if (!pos) s = vl_fail(VL_EOOM, "nonzero: out of host memory (%lld positions)", (long long)n);
  }
  for (int64_t i = 0, k = 0; s == VL_OK && pos && i < numel; i++) {
    if (vl_load_as_f64(buf + (size_t)i * esz, mask->dtype) == 0) continue;
    if (flat) {
      pos[k++] = i;
      continue;
    }
    int64_t rest = i; /* row-major coordinates of element i */
    for (int d = nd - 1; d >= 0; d--) {
      pos[k * nd + d] = rest % mask->size[d];
      rest /= mask->size[d];
    }
    k++;
  }
  free(buf);
  if (s == VL_OK) {
    int64_t size[2] = {n, nd};
    vl_tensor *r = NULL;
    s = vl_from_host(pos, flat ? 1 : 2, size, VL_I64, mask->storage->device, &r);
    if (s == VL_OK) *out = r;
  }
  free(pos);
  return s;
}

/* ---- joining and splitting ---- */

/* PyTorch's legacy rule: 1-D empty tensors take no part in the shape checks of cat. */
static bool cat_skipped(const vl_tensor *t) { return t->ndim == 1 && t->size[0] == 0; }

vl_status vl_cat(int n, vl_tensor *const *ts, int dim, vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (n <= 0) return vl_fail(VL_EINVAL, "cat: expected a non-empty list of tensors");
  int ref = -1;
  vl_dtype dt = ts[0]->dtype;
  for (int i = 0; i < n; i++) {
    /* Tensor positions are printed 1-based like the Lua list they came from. */
    char nm[32];
    snprintf(nm, sizeof nm, "tensor %d", i + 1);
    if (i > 0) VL_TRY(vl_check_same_device("cat", ts[0], "tensor 1", ts[i], nm));
    dt = vl_dtype_promote(dt, ts[i]->dtype);
    if (ref < 0 && !cat_skipped(ts[i])) ref = i;
  }
  const vl_tensor *r0 = ref >= 0 ? ts[ref] : ts[0];
  if (r0->ndim == 0) return vl_fail(VL_ESHAPE, "cat: zero-dimensional tensor %d cannot be concatenated", ref + 1);
  int d;
  VL_TRY(vl_wrap_dim("cat", dim, r0->ndim, &d));
  int64_t osize[VL_MAX_DIMS];
  memcpy(osize, r0->size, sizeof(int64_t) * (size_t)r0->ndim);
  osize[d] = 0;
  for (int i = 0; i < n; i++) {
    const vl_tensor *t = ts[i];
    if (ref >= 0 && cat_skipped(t)) continue;
    if (t->ndim != r0->ndim)
      return vl_fail(VL_ESHAPE, "cat: tensor %d has %d dims but tensor %d has %d (%s, %s)", i + 1, t->ndim, ref + 1,
                     r0->ndim, vl_tensor_desc(t, d1, sizeof d1), vl_tensor_desc(r0, d2, sizeof d2));
    for (int j = 0; j < t->ndim; j++)
      if (j != d && t->size[j] != r0->size[j])
        return vl_fail(VL_ESHAPE, "cat: sizes must match except in dim %d: tensor %d is %s, tensor %d is %s", d + 1,
                       i + 1, vl_shape_str(t, d1, sizeof d1), ref + 1, vl_shape_str(r0, d2, sizeof d2));
    osize[d] += t->size[d];
  }
  vl_tensor *r;
  VL_TRY(vl_tensor_empty(r0->ndim, osize, dt, r0->storage->device, &r));
  vl_status s = VL_OK;
  int64_t at = 0;
  for (int i = 0; i < n && s == VL_OK; i++) {
    vl_tensor *t = ts[i];
    if ((ref >= 0 && cat_skipped(t)) || t->size[d] == 0) continue;
    vl_tensor *piece;
    s = vl_narrow(r, d, at, t->size[d], &piece);
    if (s == VL_OK) {
      s = vl_copy_same_device(piece, t);
      vl_tensor_release(piece);
    }
    at += t->size[d];
  }
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *out = r;
  return VL_OK;
}

vl_status vl_stack(int n, vl_tensor *const *ts, int dim, vl_tensor **out) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  if (n <= 0) return vl_fail(VL_EINVAL, "stack: expected a non-empty list of tensors");
  int d;
  if (ts[0]->ndim >= VL_MAX_DIMS) return vl_fail(VL_EINVAL, "stack: tensors already have %d dims", VL_MAX_DIMS);
  VL_TRY(vl_wrap_dim("stack", dim, ts[0]->ndim + 1, &d));
  for (int i = 1; i < n; i++) {
    bool same = ts[i]->ndim == ts[0]->ndim;
    for (int j = 0; same && j < ts[0]->ndim; j++) same = ts[i]->size[j] == ts[0]->size[j];
    if (!same)
      return vl_fail(VL_ESHAPE, "stack: tensor %d has shape %s but tensor 1 has shape %s", i + 1,
                     vl_shape_str(ts[i], d1, sizeof d1), vl_shape_str(ts[0], d2, sizeof d2));
  }
  vl_tensor **us = calloc((size_t)n, sizeof *us);
  if (!us) return vl_fail(VL_EOOM, "stack: out of host memory");
  vl_status s = VL_OK;
  for (int i = 0; i < n && s == VL_OK; i++) s = vl_unsqueeze(ts[i], d, &us[i]);
  if (s == VL_OK) s = vl_cat(n, us, d, out);
  for (int i = 0; i < n; i++) vl_tensor_release(us[i]);
  free(us);
  return s;
}

static vl_status split_views(const char *op, vl_tensor *t, int64_t piece, int count, int d, vl_tensor ***outs, int *n) {
  vl_tensor **arr = calloc((size_t)(count > 0 ? count : 1), sizeof *arr);
  if (!arr) return vl_fail(VL_EOOM, "%s: out of host memory", op);
  vl_status s = VL_OK;
  int64_t size = t->size[d];
  for (int i = 0; i < count && s == VL_OK; i++) {
    int64_t start = (int64_t)i * piece;
    if (start > size) start = size;
    int64_t len = size - start < piece ? size - start : piece;
    s = vl_narrow(t, d, start, len, &arr[i]);
  }
  if (s != VL_OK) {
    for (int i = 0; i < count; i++) vl_tensor_release(arr[i]);
    free(arr);
    return s;
  }
  *outs = arr;
  *n = count;
  return VL_OK;
}

vl_status vl_split(vl_tensor *t, int64_t split_size, int dim, vl_tensor ***outs, int *n) {
  int d;
  VL_TRY(vl_wrap_dim("split", dim, t->ndim, &d));
  int64_t size = t->size[d];
  if (split_size < 0 || (split_size == 0 && size > 0))
    return vl_fail(VL_EINVAL, "split: split_size must be positive, got %lld", (long long)split_size);
  /* 1 + (size - 1) / split_size, not (size + split_size - 1) / split_size: that sum overflows
   * for a split_size near INT64_MAX (t:split(math.maxinteger)), where PyTorch gives one piece. */
  int64_t count = size == 0 ? 1 : 1 + (size - 1) / split_size;
  if (count > 1 << 24) return vl_fail(VL_EINVAL, "split: %lld pieces are too many", (long long)count);
  return split_views("split", t, split_size, (int)count, d, outs, n);
}

vl_status vl_chunk(vl_tensor *t, int chunks, int dim, vl_tensor ***outs, int *n) {
  int d;
  if (chunks <= 0) return vl_fail(VL_EINVAL, "chunk: the number of chunks must be positive, got %d", chunks);
  VL_TRY(vl_wrap_dim("chunk", dim, t->ndim, &d));
  int64_t size = t->size[d];
  if (size == 0) return split_views("chunk", t, 0, chunks, d, outs, n);
  int64_t piece = 1 + (size - 1) / chunks; /* ceil without the sum that can overflow, as in split */
  int count = (int)(1 + (size - 1) / piece); /* as PyTorch: possibly fewer than `chunks` */
  return split_views("chunk", t, piece, count, d, outs, n);
}
