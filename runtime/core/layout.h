/* runtime/core/layout.h: memory layouts of dense tensors: channels-last (NHWC) versus
 * NCHW-contiguous, layout-preserving allocation, and converting between the two.
 *
 * Used by every layer that has an NHWC path (conv, pooling, batch norm), by the elementwise
 * front ends (outputs keep a dense input's layout) and by the optimizers (state is made in the
 * parameter's layout). Channels-last follows PyTorch: N x C x H x W logically, with the strides of
 * a contiguous N x H x W x C tensor. */
#ifndef VL_LAYOUT_H
#define VL_LAYOUT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A new uninitialised tensor of t's shape that keeps t's dim order when t is dense (PyTorch's
 * preserve_format: channels-last stays channels-last), contiguous otherwise. */
vl_status vl_empty_like(vl_tensor *t, vl_dtype dt, vl_device dev, vl_tensor **out);
/* Dense in some dim order (e.g. channels-last): the elements fill [data, data + numel) exactly,
 * with positive strides, so flat element-wise work over that range is valid. */
bool vl_tensor_is_dense(const vl_tensor *t);
/* An uninitialised N x C x H x W tensor (sizes nchw), with canonical channels-last strides (an
 * N x H x W x C tensor viewed as N x C x H x W) when nhwc, else contiguous. */
vl_status vl_empty_family(const int64_t *nchw, bool nhwc, vl_dtype dt, vl_device dev, vl_tensor **out);
/* 4-D N x C x H x W with the strides of a contiguous N x H x W x C tensor on every dim of size > 1. */
bool vl_is_nhwc_dense(const vl_tensor *t);
/* NHWC-dense and channels-last by its strides: where a tensor is both NCHW-contiguous and
 * NHWC-dense (C == 1, or H == W == 1), the strides of its size-1 dims decide, as in PyTorch
 * (N x 1 x H x W made channels-last has stride(C) = 1; made NCHW, stride(C) = H*W). */
bool vl_is_channels_last(const vl_tensor *t);
/* Same sizes and the same strides on every dim of size > 1. */
bool vl_same_layout(const vl_tensor *a, const vl_tensor *b);

/* Converting between the layouts copies, so it is an op: vl_in_family, vl_to_channels_last
 * (runtime/ops/ops.h). */

#ifdef __cplusplus
}
#endif
#endif
