/* runtime/backend/backend.h: one backend per device type, and the one lookup of it.
 *
 * A backend bundles every kernel table of a device type (the base ops of runtime/backend/kernels.h and
 * the layer tables of runtime/backend/nn_kernels.h), its per-device state hooks (asynchronous error
 * check, shutdown) and a capability query. Front ends get it from vl_backend_of and ask
 * `supports` instead of testing the device type themselves, so that what a device can do is
 * written down once, next to its kernels (kernels/cpu/cpu_kernels.c, kernels/cuda/cuda_kernels.cu).
 * Autocast, graph capture and communicators are meant to hang off this same point. The attention
 * table answers its own capability question (head dim, alignment), which a dtype alone cannot. Model: ggml's backend interface with supports_op. */
#ifndef VL_BACKEND_H
#define VL_BACKEND_H

#include <stdbool.h>

#include "runtime/backend/fused_kernels.h"
#include "runtime/backend/kernels.h"
#include "runtime/backend/nn_kernels.h"
#include "runtime/core/device.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The op families a capability query is about: one per kernel entry group whose support can
 * differ between devices by dtype or layout. */
typedef enum vl_op_kind {
  VL_OP_ELEMENTWISE = 0, /* fill, copy, unary, binary, where, masked_fill, arange */
  VL_OP_REDUCE,
  VL_OP_SOFTMAX,
  VL_OP_GEMM,
  VL_OP_INDEX,           /* gather, scatter_add, index_select */
  VL_OP_RAND,
  VL_OP_CONV,
  VL_OP_POOL,
  VL_OP_BATCHNORM,
  VL_OP_LAYERNORM,
  VL_OP_OPTIM,           /* fused steps, l2norms, unscale */
  VL_NOP_KINDS
} vl_op_kind;

/* The memory layout a kernel is asked to run in. CONTIGUOUS is row-major (NCHW for images);
 * NHWC is channels-last (runtime/backend/nn_kernels.h). */
typedef enum vl_layout { VL_LAYOUT_CONTIGUOUS = 0, VL_LAYOUT_NHWC, VL_NLAYOUTS } vl_layout;

typedef struct vl_backend {
  const char *name;           /* "cpu", "cuda" */
  vl_device_type type;
  const vl_kernels *ops;
  const vl_conv_kernels *conv;
  const vl_pooling_kernels *pooling;
  const vl_norm_kernels *norm;
  const vl_optim_kernels *optim;
  const vl_attention_kernels *attention;
  const vl_fused_kernels *fused; /* dropout, softmax cross entropy (runtime/backend/fused_kernels.h) */
  /* Whether the tables run `op` on data of dtype `dt` in `layout`, after the front end's own
   * conversions (integer inputs of transcendental ops are cast first, etc.). Pure: no device
   * needed. */
  bool (*supports)(vl_op_kind op, vl_dtype dt, vl_layout layout);
  /* The stream work on `device` is enqueued on now (vl_exec.stream, vl_exec_of). NULL where
   * there are no streams (CPU: vl_exec.stream stays NULL). */
  vl_status (*current_stream)(int device, void **stream);
  /* After the device was synchronised: report (and clear) errors that kernels could only flag
   * asynchronously (out-of-range indices). NULL where kernels report synchronously (CPU). */
  vl_status (*check_async)(int device);
  /* Frees the per-device state of the kernels (handles, workspaces, plan caches); the pools
   * and streams go afterwards (vl_shutdown). NULL when there is none. */
  void (*shutdown)(void);
} vl_backend;

extern const vl_backend vl_cpu_backend;
#ifdef VL_HAVE_CUDA
extern const vl_backend vl_cuda_backend;
#endif

/* What every backend supports at least and at most: elementwise, index, rand and reduce ops take
 * any dtype, the others float dtypes; layer norm, softmax, GEMM and optimizer steps contiguous data
 * only. A backend's `supports` narrows this down. */
static inline bool vl_supports_base(vl_op_kind op, vl_dtype dt, vl_layout layout) {
  if ((unsigned)dt >= VL_NDTYPES || (unsigned)layout >= VL_NLAYOUTS) return false;
  switch (op) {
    case VL_OP_ELEMENTWISE: case VL_OP_INDEX: case VL_OP_RAND: case VL_OP_REDUCE:
      return true;
    case VL_OP_CONV: case VL_OP_POOL: case VL_OP_BATCHNORM:
      return vl_dtype_is_float(dt);
    case VL_OP_SOFTMAX: case VL_OP_GEMM: case VL_OP_LAYERNORM: case VL_OP_OPTIM:
      return vl_dtype_is_float(dt) && layout == VL_LAYOUT_CONTIGUOUS;
    case VL_NOP_KINDS: break;
  }
  return false;
}

/* The backend of dev's device type: the one place that maps a device to its kernels. NULL when
 * v100lua was built without that device type (no message set: see vl_backend_check). */
const vl_backend *vl_backend_of(vl_device dev);
/* vl_backend_of for front ends: fails with VL_EUNSUPPORTED "<op>: a CUDA tensor but v100lua was
 * built without CUDA" where vl_backend_of gives NULL; *out untouched on failure. */
vl_status vl_backend_check(const char *op, vl_device dev, const vl_backend **out);
/* Calls every built backend's shutdown (vl_shutdown, through the hook installed in backend.c). */
void vl_backend_shutdown_all(void);

const char *vl_op_kind_name(vl_op_kind op); /* "conv", "batchnorm", ...; "?" out of range */
const char *vl_layout_name(vl_layout layout); /* "contiguous", "nhwc"; "?" out of range */

#ifdef __cplusplus
}
#endif
#endif
