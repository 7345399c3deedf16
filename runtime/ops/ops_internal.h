/* runtime/ops/ops_internal.h: helpers shared by the op front ends (runtime/ops, runtime/nn);
 * VL_DESC_LEN, vl_shape_fmt and the like are core's (runtime/core/tensor.h).
 * Not part of the public contract: the bindings use runtime/ops/ops.h and runtime/core/tensor.h. */
#ifndef VL_OPS_INTERNAL_H
#define VL_OPS_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/backend.h"
#include "runtime/ops/ops.h"
#include "runtime/core/tensor.h"

/* Execution context of a device (its backend's current stream; NULL on the CPU). Fails (naming op)
 * for a device type v100lua was built without, so after it succeeded vl_backend_of(dev) is not
 * NULL: dispatch is `vl_backend_of(dev)->ops->fill(...)` (runtime/backend/backend.h). */
vl_status vl_exec_of(const char *op, vl_device dev, vl_exec *ex);

/* VL_EDEVICE "<op>: tensors on different devices (<an> desc, <bn> desc)" unless equal. */
vl_status vl_check_same_device(const char *op, const vl_tensor *a, const char *an, const vl_tensor *b,
                               const char *bn);
/* VL_EINVAL when t has a dim of stride 0 and size > 1 (writes would alias). */
vl_status vl_check_writable(const char *op, const vl_tensor *t);

/* Broadcast shape of n tensors (PyTorch rules); the message names the shapes and the operands
 * (names[i], described by vl_tensor_desc). */
vl_status vl_broadcast_shapes(const char *op, int n, vl_tensor *const *ts, const char *const *names,
                              int *ndim, int64_t *size);
/* Whether t broadcasts to exactly `size` (used by in-place ops and copy_). */
bool vl_broadcasts_to(const vl_tensor *t, int ndim, const int64_t *size);

/* Builds the kernels' iteration: operand 0 is the output and has exactly `size`; inputs are
 * broadcast (stride 0), dims are ordered by the output's strides and merged where every operand
 * allows, so contiguous problems arrive flat. Resolves the output device's stream once (a failure
 * names `op`) and hands back that device's op table in *k, so a caller is one line from its kernel. */
vl_status vl_iter_make(const char *op, vl_iter *it, int nops, vl_tensor *const *ops, int ndim, const int64_t *size,
                       const vl_kernels **k);

/* `in` as it may be read while `out` is written elementwise: a new reference to `in` itself when
 * they cannot interfere, otherwise a contiguous copy (partial overlap such as a:add_(a:t())). */
vl_status vl_unalias(const vl_tensor *out, vl_tensor *in, vl_tensor **res);

/* A new reference to t when it already has dtype dt, otherwise a converted contiguous copy on
 * the same device. */
vl_status vl_cast(vl_tensor *t, vl_dtype dt, vl_tensor **out);

/* Same-device elementwise copy dst <- src (src already broadcastable, checks done). */
vl_status vl_copy_same_device(vl_tensor *dst, vl_tensor *src);

#endif
