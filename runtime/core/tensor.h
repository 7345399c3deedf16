/* runtime/core/tensor.h: refcounted storage and strided tensor views (Torch7's model).
 *
 * A vl_storage owns bytes on one device (host memory from the allocator below, or a block of the
 * device's caching pool). A vl_tensor is a view: storage + offset + sizes + strides + dtype.
 * Both are refcounted; a view holds one reference to its storage. All dims here are 0-based and
 * negative dims count from the end (-1 = last); the Lua bindings translate 1-based dims.
 *
 * Ownership: every function returning a vl_tensor** hands the caller one new reference; release
 * it with vl_tensor_release. Functions never steal references to their inputs. */
#ifndef VL_TENSOR_H
#define VL_TENSOR_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VL_MAX_DIMS 8

struct vl_block; /* runtime/core/alloc.h */

typedef struct vl_storage {
  int refcount;
  vl_device device;
  void *data;              /* base address; NULL for a zero-byte storage */
  size_t nbytes;
  struct vl_block *block;  /* the pool block that owns `data`: the device's on CUDA, the pinned host
                            * pool's on the CPU (vl_tensor_empty_pinned); NULL for plain host memory */
  uint32_t version;        /* bumped by every in-place write (autograd checks saved tensors) */
} vl_storage;

typedef struct vl_tensor {
  int refcount;
  vl_storage *storage;
  int64_t offset;                /* in elements from storage->data */
  int ndim;                      /* 0 = a scalar (one element) */
  int64_t size[VL_MAX_DIMS];
  int64_t stride[VL_MAX_DIMS];   /* in elements; 0 for expanded (broadcast) dims */
  vl_dtype dtype;
  void *autograd;                /* vl_autograd_meta (runtime/autograd/autograd.h), NULL until needed;
                                  * core only frees it, through vl_tensor_set_meta_free_hook */
} vl_tensor;

/* ---- shapes ---- */
/* The one shape rule, for creation, views (view, reshape, expand, as_strided) and the file
 * loaders: ndim in 0..VL_MAX_DIMS, sizes >= 0, and the product of the sizes with zero sizes
 * counted as 1 (what contiguous strides need), times the element size of dt, fits in int64; so
 * does then the element count, stored in *numel when numel is not NULL. VL_EINVAL
 * "<op>: shape AxB of f32 is too large (its byte size overflows 64 bits)" otherwise. */
vl_status vl_shape_check(const char *op, int ndim, const int64_t *size, vl_dtype dt, int64_t *numel);

/* ---- storage and lifetime ---- */
/* New uninitialised contiguous tensor. ndim in 0..VL_MAX_DIMS, sizes >= 0. On CUDA the bytes come
 * from the device's caching pool on the device's current stream (VL_EOOM with a message naming
 * requested/free/reserved/allocated bytes when even a GC and retry cannot satisfy it). */
vl_status vl_tensor_empty(int ndim, const int64_t *size, vl_dtype dt, vl_device dev, vl_tensor **out);
/* The same on the CPU in page-locked memory from the pinned host pool (runtime/core/cuda.h), for
 * fast host-to-device copies; the storage's block is the pool's, returned to it on release.
 * Needs CUDA (VL_EUNSUPPORTED / VL_EDEVICE otherwise); like the pool, main thread only. */
vl_status vl_tensor_empty_pinned(int ndim, const int64_t *size, vl_dtype dt, vl_tensor **out);
vl_tensor *vl_tensor_retain(vl_tensor *t);     /* returns t */
void vl_tensor_release(vl_tensor *t);          /* NULL is fine; frees t->autograd through the hook */
/* The function vl_tensor_release frees a dying tensor's autograd state with (vl_tensor.autograd):
 * runtime/autograd installs it before it attaches any, as core calls nothing above it. */
void vl_tensor_set_meta_free_hook(void (*free_meta)(vl_tensor *t));
/* Makes the tensor object t a view of src's data (storage, offset, sizes, strides, dtype),
 * keeping t's identity, and bumps the storage version. t->autograd is left as it is: the bindings
 * call vl_ag_set_ (runtime/autograd/autograd.h), which checks and keeps it consistent. */
vl_status vl_tensor_set_(vl_tensor *t, vl_tensor *src);
/* Bytes held by the storage (what the bindings report to Lua's collector). */
size_t vl_tensor_storage_nbytes(const vl_tensor *t);

/* ---- properties ---- */
int64_t vl_tensor_numel(const vl_tensor *t);
bool vl_tensor_is_contiguous(const vl_tensor *t);   /* row-major dense (size-1 dims ignored) */
void *vl_tensor_data(const vl_tensor *t);           /* address of element 0 */
/* Normalises a possibly negative dim against ndim (for ops that add a dim, pass ndim+1);
 * VL_EINVAL "<op>: dim D out of range for a tensor of N dims" otherwise. */
vl_status vl_wrap_dim(const char *op, int dim, int ndim, int *out);
/* "2x3" (or "scalar") into buf; returns buf. For error messages. */
const char *vl_shape_str(const vl_tensor *t, char *buf, size_t n);
/* "2x3 f32 cuda:0" into buf; returns buf. */
const char *vl_tensor_desc(const vl_tensor *t, char *buf, size_t n);
void vl_contiguous_strides(int ndim, const int64_t *size, int64_t *stride);

/* ---- views (share storage; no data is copied) ---- */
/* size may hold one -1 (inferred). Fails with VL_ESHAPE if the numel differs or the strides of
 * t cannot express the new shape (then use vl_reshape, runtime/ops/ops.h). */
vl_status vl_view(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
vl_status vl_narrow(vl_tensor *t, int dim, int64_t start, int64_t length, vl_tensor **out);
vl_status vl_select(vl_tensor *t, int dim, int64_t index, vl_tensor **out); /* drops dim */
vl_status vl_transpose(vl_tensor *t, int d0, int d1, vl_tensor **out);
vl_status vl_permute(vl_tensor *t, int ndim, const int *perm, vl_tensor **out);
/* Broadcast to `size` (ndim >= t->ndim; -1 keeps a size); size-1 dims get stride 0. */
vl_status vl_expand(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
vl_status vl_squeeze(vl_tensor *t, int dim, vl_tensor **out);      /* no-op if size(dim) != 1 */
vl_status vl_squeeze_all(vl_tensor *t, vl_tensor **out);
vl_status vl_unsqueeze(vl_tensor *t, int dim, vl_tensor **out);    /* dim in [-ndim-1, ndim] */
vl_status vl_as_strided(vl_tensor *t, int ndim, const int64_t *size, const int64_t *stride,
                        int64_t offset, vl_tensor **out);          /* checked against storage */

/* vl_reshape's first half (vl_reshape itself copies, so it is an op: runtime/ops/ops.h): resolves
 * the -1 of `size` into shape[] and checks the element count, naming "reshape"; then *out is a
 * view of t when its strides can express the shape, else NULL (the caller copies). */
vl_status vl_reshape_view(vl_tensor *t, int ndim, const int64_t *size, int64_t *shape, vl_tensor **out);
/* Copies (vl_contiguous, vl_clone, vl_reshape's copy) run kernels, so they are ops: runtime/ops/ops.h. */

/* ---- helpers for the front ends' checks and messages ---- */
/* Big enough for "2x3x...x8-dims f32 cuda:15". */
#define VL_DESC_LEN 256
/* The Lua bindings pass Lua dims d > 0 as d - 1, so a non-negative dim is printed as dim + 1 to
 * match what the user wrote; negative dims are printed as given. */
static inline int vl_dim_user(int d) { return d >= 0 ? d + 1 : d; }
int64_t vl_shape_numel(int ndim, const int64_t *size);
const char *vl_shape_fmt(int ndim, const int64_t *size, char *buf, size_t n);
/* vl_tensor_empty whose messages name `op` ("clone: out of host memory ..."). */
vl_status vl_tensor_empty_op(const char *op, int ndim, const int64_t *size, vl_dtype dt, vl_device dev,
                             vl_tensor **out);
/* A borrowed, unowned view of host memory as a contiguous CPU tensor (never released): lets
 * vl_to_host reuse vl_copy_ without an extra staging copy. */
void vl_wrap_host(vl_tensor *t, vl_storage *st, void *data, int ndim, const int64_t *size, vl_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
