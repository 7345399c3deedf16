/* runtime/autograd/layout.h: layout changes that record autograd (runtime/autograd/layout.c). */
#ifndef VL_AG_LAYOUT_H
#define VL_AG_LAYOUT_H

#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* t in channels-last (NHWC-dense) layout: a new tensor, or t itself (a new reference) when it is
 * already channels-last. Same checks and results as vl_to_channels_last (runtime/core/layout.h);
 * when t requires grad (and grad mode is on) the copy is recorded, so gradients flow through it. */
vl_status vl_ag_to_channels_last(vl_tensor *t, vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
