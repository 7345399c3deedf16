/* runtime/autograd/ops_shape.h: the recorded shape ops, with the raw ops' signatures and semantics
 * (runtime/ops/shape.h). Views (flatten, unflatten, movedim, diagonal, split by sizes) are marked as
 * views; the copies' gradients come from the recorded ops they are composed of. */
#ifndef VL_AUTOGRAD_OPS_SHAPE_H
#define VL_AUTOGRAD_OPS_SHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/ops/shape.h"

#ifdef __cplusplus
extern "C" {
#endif

vl_status vl_ag_flatten(vl_tensor *t, int start, int end, vl_tensor **out);
vl_status vl_ag_unflatten(vl_tensor *t, int dim, int n, const int64_t *sizes, vl_tensor **out);
vl_status vl_ag_movedim(vl_tensor *t, int n, const int *src, const int *dst, vl_tensor **out);
vl_status vl_ag_diagonal(vl_tensor *t, int64_t offset, int d1, int d2, vl_tensor **out);
vl_status vl_ag_split_sizes(vl_tensor *t, int n, const int64_t *sizes, int dim, vl_tensor ***outs);
vl_status vl_ag_flip(vl_tensor *t, int n, const int *dims, vl_tensor **out);
vl_status vl_ag_roll(vl_tensor *t, int nshifts, const int64_t *shifts, int ndims, const int *dims, vl_tensor **out);
vl_status vl_ag_tri(vl_tensor *t, int64_t k, bool upper, vl_tensor **out);
vl_status vl_ag_repeat(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out);
vl_status vl_ag_tile(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out);
vl_status vl_ag_repeat_interleave(vl_tensor *t, int64_t r, vl_tensor *repeats, bool has_dim, int dim,
                                  vl_tensor **out);
vl_status vl_ag_pad(vl_tensor *t, int npads, const int64_t *pads, vl_pad_mode mode, double value, vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
