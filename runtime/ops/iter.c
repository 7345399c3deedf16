/* runtime/ops/iter.c: dispatch, broadcasting and the elementwise iteration the kernels consume. */
#include <stdio.h>
#include <string.h>

#include "runtime/core/graph.h"
#include "runtime/core/layout.h"
#include "runtime/ops/ops_internal.h"

vl_status vl_exec_of(const char *op, vl_device dev, vl_exec *ex) {
  const vl_backend *be;
  VL_TRY(vl_backend_check(op, dev, &be));
  if (vl_graph_capturing()) VL_TRY(vl_graph_check_device(op, dev.type, dev.index));
  vl_exec e = {.device = dev.index, .stream = NULL};
  if (be->current_stream) {
    vl_status s = be->current_stream(dev.index, &e.stream);
    if (s != VL_OK) return vl_fail_prefix(s, "%s: ", op);
  }
  *ex = e;
  return VL_OK;
}

vl_status vl_check_same_device(const char *op, const vl_tensor *a, const char *an, const vl_tensor *b,
                               const char *bn) {
  if (vl_device_eq(a->storage->device, b->storage->device)) return VL_OK;
  char da[VL_DESC_LEN], db[VL_DESC_LEN];
  return vl_fail(VL_EDEVICE, "%s: tensors on different devices (%s %s, %s %s)", op, an,
                 vl_tensor_desc(a, da, sizeof da), bn, vl_tensor_desc(b, db, sizeof db));
}

vl_status vl_check_writable(const char *op, const vl_tensor *t) {
  for (int i = 0; i < t->ndim; i++) {
    if (t->stride[i] == 0 && t->size[i] > 1) {
      char d[VL_DESC_LEN];
      return vl_fail(VL_EINVAL,
                     "%s: cannot write into an expanded tensor (dim %d of size %lld has stride 0; %s); "
                     "clone it first",
                     op, i + 1, (long long)t->size[i], vl_tensor_desc(t, d, sizeof d));
    }
  }
  return VL_OK;
}

vl_status vl_broadcast_shapes(const char *op, int n, vl_tensor *const *ts, const char *const *names, int *ndim,
                              int64_t *size) {
  int nd = 0;
  for (int i = 0; i < n; i++)
    if (ts[i]->ndim > nd) nd = ts[i]->ndim;
  int64_t out[VL_MAX_DIMS];
  bool ok = true;
  for (int k = 0; k < nd && ok; k++) {
    int64_t s = 1;
    for (int i = 0; i < n; i++) {
      int j = ts[i]->ndim - nd + k;
      if (j < 0) continue;
      int64_t v = ts[i]->size[j];
      if (v == 1) continue;
      if (s == 1) s = v;
      else if (s != v) ok = false;
    }
    out[k] = s;
  }
  if (!ok) {
    char shapes[4 * VL_DESC_LEN], descs[4 * VL_DESC_LEN + 64];
    size_t u1 = 0, u2 = 0;
    shapes[0] = descs[0] = 0;
    for (int i = 0; i < n; i++) {
      char s[VL_DESC_LEN], d[VL_DESC_LEN];
      const char *sep = i == 0 ? "" : i == n - 1 ? " and " : ", ";
      u1 += (size_t)snprintf(shapes + u1, sizeof shapes - u1, "%s%s", sep, vl_shape_str(ts[i], s, sizeof s));
      u2 += (size_t)snprintf(descs + u2, sizeof descs - u2, "%s%s %s", i ? ", " : "", names[i],
                             vl_tensor_desc(ts[i], d, sizeof d));
      if (u1 >= sizeof shapes || u2 >= sizeof descs) break;
    }
    return vl_fail(VL_ESHAPE, "%s: shapes %s cannot be broadcast (%s)", op, shapes, descs);
  }
  *ndim = nd;
  memcpy(size, out, sizeof(int64_t) * (size_t)nd);
  return VL_OK;
}

bool vl_broadcasts_to(const vl_tensor *t, int ndim, const int64_t *size) {
  if (t->ndim > ndim) return false;
  for (int i = 0; i < t->ndim; i++) {
    int64_t v = t->size[t->ndim - 1 - i], w = size[ndim - 1 - i];
    if (v != w && v != 1) return false;
  }
  return true;
}

/* Strides of t broadcast to `size` (right-aligned; missing and size-1 dims get 0). */
static void broadcast_strides(const vl_tensor *t, int ndim, const int64_t *size, int64_t *stride) {
  for (int i = 0; i < ndim; i++) {
    int j = t->ndim - ndim + i;
    stride[i] = (j < 0 || (t->size[j] == 1 && size[i] != 1)) ? 0 : t->stride[j];
  }
}

/* >0 when dim a (currently outer) should move inside dim b: the first operand with non-zero
 * strides on both decides (PyTorch's TensorIterator ordering). */
static int should_swap(const vl_iter *it, int a, int b) {
  for (int op = 0; op < it->nops; op++) {
    int64_t sa = it->stride[op][a], sb = it->stride[op][b];
    if (sa == 0 || sb == 0) continue;
    if (sa < sb) return 1;
    if (sa > sb) return -1;
    if (it->size[a] > it->size[b]) return 1; /* equal strides: put the longer dim inside */
    return -1;
  }
  return 0;
}

vl_status vl_iter_make(const char *op_name, vl_iter *it, int nops, vl_tensor *const *ops, int ndim,
                       const int64_t *size, const vl_kernels **k) {
  vl_exec ex;
  VL_TRY(vl_exec_of(op_name, ops[0]->storage->device, &ex));
  *k = vl_backend_of(ops[0]->storage->device)->ops;
  memset(it, 0, sizeof *it);
  it->ex = ex;
  it->nops = nops;
  it->numel = vl_shape_numel(ndim, size);
  for (int op = 0; op < nops; op++) {
    it->data[op] = vl_tensor_data(ops[op]);
    it->dtype[op] = ops[op]->dtype;
  }
  if (it->numel == 0) {
    it->ndim = 1;
    it->size[0] = 0;
    for (int op = 0; op < nops; op++) it->stride[op][0] = 1;
    return VL_OK;
  }
  /* Drop size-1 dims; they contribute nothing to addressing. */
  int64_t st[VL_ITER_MAX][VL_MAX_DIMS];
  for (int op = 0; op < nops; op++) broadcast_strides(ops[op], ndim, size, st[op]);
  int nd = 0;
  for (int i = 0; i < ndim; i++) {
    if (size[i] == 1) continue;
    it->size[nd] = size[i];
    for (int op = 0; op < nops; op++) it->stride[op][nd] = st[op][i];
    nd++;
  }
  it->ndim = nd;
  if (nd == 0) return VL_OK;
  /* Insertion sort, outermost first: dims with smaller strides move inward. */
  for (int i = 1; i < nd; i++) {
    for (int j = i; j > 0; j--) {
      int c = should_swap(it, j - 1, j);
      if (c <= 0) break;
      int64_t t = it->size[j - 1];
      it->size[j - 1] = it->size[j];
      it->size[j] = t;
      for (int op = 0; op < nops; op++) {
        t = it->stride[op][j - 1];
        it->stride[op][j - 1] = it->stride[op][j];
        it->stride[op][j] = t;
      }
    }
  }
  /* Merge dim i into i+1 when every operand steps through them as one dim. */
  int out = nd - 1;
  for (int i = nd - 2; i >= 0; i--) {
    bool can = true;
    for (int op = 0; op < nops && can; op++)
      can = it->stride[op][i] == it->stride[op][out] * it->size[out];
    if (can) {
      it->size[out] *= it->size[i];
    } else {
      out--;
      it->size[out] = it->size[i];
      for (int op = 0; op < nops; op++) it->stride[op][out] = it->stride[op][i];
    }
  }
  int shift = out;
  it->ndim = nd - shift;
  for (int i = 0; i < it->ndim; i++) {
    it->size[i] = it->size[i + shift];
    for (int op = 0; op < nops; op++) it->stride[op][i] = it->stride[op][i + shift];
  }
  return VL_OK;
}

/* [lo, hi) in bytes of the memory a view can touch. */
static void byte_range(const vl_tensor *t, uintptr_t *lo, uintptr_t *hi) {
  int64_t es = (int64_t)vl_dtype_size(t->dtype), last = 0;
  for (int i = 0; i < t->ndim; i++) last += (t->size[i] - 1) * t->stride[i];
  *lo = (uintptr_t)t->offset * (uintptr_t)es;
  *hi = (uintptr_t)((t->offset + last + 1) * es);
}

vl_status vl_unalias(const vl_tensor *out, vl_tensor *in, vl_tensor **res) {
  bool safe = in->storage != out->storage || vl_tensor_numel(in) == 0 || vl_tensor_numel(out) == 0;
  if (!safe) {
    /* Identical layout (elementwise read-before-write of the same element) is fine. */
    int64_t st[VL_MAX_DIMS];
    broadcast_strides(in, out->ndim, out->size, st);
    bool same = in->offset == out->offset && in->dtype == out->dtype;
    for (int i = 0; i < out->ndim && same; i++)
      if (out->size[i] != 1 && st[i] != out->stride[i]) same = false;
    uintptr_t lo1, hi1, lo2, hi2;
    byte_range(in, &lo1, &hi1);
    byte_range(out, &lo2, &hi2);
    safe = same || hi1 <= lo2 || hi2 <= lo1;
  }
  if (safe) {
    *res = vl_tensor_retain(in);
    return VL_OK;
  }
  return vl_clone(in, res);
}

vl_status vl_cast(vl_tensor *t, vl_dtype dt, vl_tensor **out) {
  if (t->dtype == dt) {
    *out = vl_tensor_retain(t);
    return VL_OK;
  }
  /* Same layout as t when t is dense (a channels-last activation cast to f16 stays channels-last). */
  vl_tensor *c;
  VL_TRY(vl_empty_like(t, dt, t->storage->device, &c));
  vl_status s = vl_copy_same_device(c, t);
  if (s != VL_OK) {
    vl_tensor_release(c);
    return s;
  }
  *out = c;
  return VL_OK;
}

vl_status vl_copy_same_device(vl_tensor *dst, vl_tensor *src) {
  if (vl_tensor_numel(dst) == 0) return VL_OK;
  vl_tensor *ops[2] = {dst, src};
  vl_iter it;
  const vl_kernels *k;
  VL_TRY(vl_iter_make("copy_", &it, 2, ops, dst->ndim, dst->size, &k));
  return k->copy(&it);
}
