/* runtime/backend/backend.c: the one lookup from a device to its backend (runtime/backend/backend.h).
 *
 * Every front end reaches kernels through here, so that this table (and the device code in
 * runtime/core/device.h, cuda.c, tensor.c's storage and the allocator, runtime/core/alloc.c) is the only place that
 * tells device types apart. */
#include "runtime/backend/backend.h"

#include <stddef.h>

#include "runtime/core/context.h"

/* NULL where v100lua was built without the device type. */
static const vl_backend *const backends[] = {
    [VL_CPU] = &vl_cpu_backend,
#ifdef VL_HAVE_CUDA
    [VL_CUDA] = &vl_cuda_backend,
#else
    [VL_CUDA] = NULL,
#endif
};
VL_TABLE_SIZE(backends, VL_NDEVICE_TYPES);

/* For "built without ..." messages. */
static const char *const type_names[] = {[VL_CPU] = "CPU", [VL_CUDA] = "CUDA"};
VL_TABLE_SIZE(type_names, VL_NDEVICE_TYPES);

#ifdef VL_HAVE_CUDA
static vl_status cuda_check_async(int device) {
  return vl_cuda_backend.check_async ? vl_cuda_backend.check_async(device) : VL_OK;
}
#endif

/* Core calls nothing above it, so what it needs of the backends (vl_shutdown frees their state,
 * vl_cuda_synchronize reports their asynchronous errors) are hooks on the context, installed
 * here at the first lookup: every kernel is reached through one, so no kernel state exists, and
 * no kernel error is pending, before. Lookups happen on the main thread (as the pools' use). */
static bool hooks_installed;
static void install_hooks(void) {
#ifdef VL_HAVE_CUDA
  vl_set_backend_hooks(vl_backend_shutdown_all, cuda_check_async);
#else
  vl_set_backend_hooks(vl_backend_shutdown_all, NULL);
#endif
  hooks_installed = true;
}

const vl_backend *vl_backend_of(vl_device dev) {
  if (!hooks_installed) install_hooks();
  return (unsigned)dev.type < VL_NDEVICE_TYPES ? backends[dev.type] : NULL;
}

vl_status vl_backend_check(const char *op, vl_device dev, const vl_backend **out) {
  const vl_backend *be = vl_backend_of(dev);
  if (!be) {
    if ((unsigned)dev.type >= VL_NDEVICE_TYPES)
      return vl_fail(VL_EINTERNAL, "%s: invalid device type %d", op, (int)dev.type);
    return vl_fail(VL_EUNSUPPORTED, "%s: a %s tensor but v100lua was built without %s", op, type_names[dev.type],
                   type_names[dev.type]);
  }
  *out = be;
  return VL_OK;
}

void vl_backend_shutdown_all(void) {
  for (size_t i = 0; i < VL_COUNTOF(backends); i++)
    if (backends[i] && backends[i]->shutdown) backends[i]->shutdown();
}

static const char *const op_kind_names[] = {
    [VL_OP_ELEMENTWISE] = "elementwise", [VL_OP_REDUCE] = "reduce",       [VL_OP_SOFTMAX] = "softmax",
    [VL_OP_GEMM] = "gemm",               [VL_OP_INDEX] = "index",         [VL_OP_RAND] = "rand",
    [VL_OP_CONV] = "conv",               [VL_OP_POOL] = "pool",           [VL_OP_BATCHNORM] = "batchnorm",
    [VL_OP_LAYERNORM] = "layernorm",     [VL_OP_OPTIM] = "optim",
};
VL_TABLE_SIZE(op_kind_names, VL_NOP_KINDS);

static const char *const layout_names[] = {[VL_LAYOUT_CONTIGUOUS] = "contiguous", [VL_LAYOUT_NHWC] = "nhwc"};
VL_TABLE_SIZE(layout_names, VL_NLAYOUTS);

const char *vl_op_kind_name(vl_op_kind op) { return (unsigned)op < VL_NOP_KINDS ? op_kind_names[op] : "?"; }

const char *vl_layout_name(vl_layout layout) {
  return (unsigned)layout < VL_NLAYOUTS ? layout_names[layout] : "?";
}
