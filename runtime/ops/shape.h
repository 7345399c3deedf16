/* runtime/ops/shape.h: the shape ops (issue 30): flatten, unflatten, movedim, diagonal (views);
 * flip, roll, tril/triu, repeat/tile, repeat_interleave, pad (copies); split by a list of sizes.
 *
 * Dims are 0-based here (negative from the end), as everywhere in runtime/; messages print them
 * 1-based as the Lua API takes them (vl_dim_user). Every check happens in runtime/ops/shape.c,
 * once, before anything is allocated.
 *
 * The copies are compositions of existing backend ops (views, reshape, expand, index_select with a
 * generated index, cat, masked_fill with an arange mask), so every device with those ops runs them
 * and no new kernel is needed. Each composition is written once, over a table of primitive ops
 * (vl_shape_prims): runtime/ops/shape.c passes the raw ops (vl_shape_raw), and
 * runtime/autograd/ops_shape.c passes their recorded versions, so the gradient of every copy follows
 * from the gradients of its parts (flip, roll and the reflect/replicate/circular pads: index_select's
 * scatter-add; repeat and tile: expand's sum over the repeats; constant pad: cat's and narrow's
 * narrows; tril/triu: masked_fill's). */
#ifndef VL_OPS_SHAPE_H
#define VL_OPS_SHAPE_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The primitive ops a composition is written over; every entry has the raw op's signature. */
typedef struct vl_shape_prims {
  vl_status (*reshape)(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
  vl_status (*expand)(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
  vl_status (*permute)(vl_tensor *t, int ndim, const int *perm, vl_tensor **out);
  vl_status (*narrow)(vl_tensor *t, int dim, int64_t start, int64_t length, vl_tensor **out);
  vl_status (*index_select)(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
  vl_status (*cat)(int n, vl_tensor *const *ts, int dim, vl_tensor **out);
  vl_status (*masked_fill)(vl_tensor *a, vl_tensor *mask, double value, vl_tensor **out);
  vl_status (*clone)(vl_tensor *t, vl_tensor **out);
} vl_shape_prims;
extern const vl_shape_prims vl_shape_raw; /* runtime/ops, nothing recorded */

/* The pad modes of vl_pad (PyTorch's F.pad modes). */
typedef enum vl_pad_mode { VL_PAD_CONSTANT = 0, VL_PAD_REFLECT, VL_PAD_REPLICATE, VL_PAD_CIRCULAR } vl_pad_mode;

/* dims start..end merged into one (a view when the strides allow, else a copy); a 0-dim tensor
 * becomes 1-D. VL_EINVAL when start comes after end. */
vl_status vl_flatten_with(const vl_shape_prims *p, vl_tensor *t, int start, int end, vl_tensor **out);
/* dim split into n sizes (one may be -1, inferred); their product must be the dim's size. */
vl_status vl_unflatten_with(const vl_shape_prims *p, vl_tensor *t, int dim, int n, const int64_t *sizes,
                            vl_tensor **out);
/* Source dims src[i] moved to positions dst[i], the other dims keeping their order (a view). */
vl_status vl_movedim_with(const vl_shape_prims *p, vl_tensor *t, int n, const int *src, const int *dst,
                          vl_tensor **out);
/* The elements reversed along each of the n dims (a copy; a dim may not repeat). */
vl_status vl_flip_with(const vl_shape_prims *p, vl_tensor *t, int n, const int *dims, vl_tensor **out);
/* Elements shifted by shifts[i] along dims[i], wrapping around (a copy); ndims == 0: over the
 * flattened tensor with one shift, the shape kept. */
vl_status vl_roll_with(const vl_shape_prims *p, vl_tensor *t, int nshifts, const int64_t *shifts, int ndims,
                       const int *dims, vl_tensor **out);
/* The lower (upper == false: keeps column - row <= k) or upper (column - row >= k) triangle of
 * the last two dims, the rest zero; batched over the leading dims. */
vl_status vl_tri_with(const vl_shape_prims *p, vl_tensor *t, int64_t k, bool upper, vl_tensor **out);
/* torch.Tensor.repeat: n >= t->ndim repeats, the extra ones adding leading dims (a copy). */
vl_status vl_repeat_with(const vl_shape_prims *p, vl_tensor *t, int n, const int64_t *reps, vl_tensor **out);
/* torch.tile: as repeat, fewer repeats than dims padded with leading ones. */
vl_status vl_tile_with(const vl_shape_prims *p, vl_tensor *t, int n, const int64_t *reps, vl_tensor **out);
/* Each element along dim repeated `r` times, or (repeats not NULL: an i64/i32 tensor of one
 * count per element, or of one count) repeats[i] times; has_dim false: over the flattened tensor. */
vl_status vl_repeat_interleave_with(const vl_shape_prims *p, vl_tensor *t, int64_t r, vl_tensor *repeats,
                                    bool has_dim, int dim, vl_tensor **out);
/* F.pad: npads (even) amounts, the last dim's first: {left, right, top, bottom, ...}. Constant
 * pads may be negative (they crop); the other modes index the input (reflect: pads below the
 * dim's size; replicate: a non-empty dim; circular: pads at most the dim's size). */
vl_status vl_pad_with(const vl_shape_prims *p, vl_tensor *t, int npads, const int64_t *pads, vl_pad_mode mode,
                      double value, vl_tensor **out);
/* Parses "constant", "reflect", "replicate", "circular" (VL_EINVAL naming `op` otherwise). */
vl_status vl_pad_mode_parse(const char *op, const char *s, vl_pad_mode *mode);

/* The raw ops: the compositions over vl_shape_raw. */
vl_status vl_flatten(vl_tensor *t, int start, int end, vl_tensor **out);
vl_status vl_unflatten(vl_tensor *t, int dim, int n, const int64_t *sizes, vl_tensor **out);
vl_status vl_movedim(vl_tensor *t, int n, const int *src, const int *dst, vl_tensor **out);
vl_status vl_flip(vl_tensor *t, int n, const int *dims, vl_tensor **out);
vl_status vl_roll(vl_tensor *t, int nshifts, const int64_t *shifts, int ndims, const int *dims, vl_tensor **out);
vl_status vl_tri(vl_tensor *t, int64_t k, bool upper, vl_tensor **out);
vl_status vl_repeat(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out);
vl_status vl_tile(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out);
vl_status vl_repeat_interleave(vl_tensor *t, int64_t r, vl_tensor *repeats, bool has_dim, int dim, vl_tensor **out);
vl_status vl_pad(vl_tensor *t, int npads, const int64_t *pads, vl_pad_mode mode, double value, vl_tensor **out);

/* A view: the diagonal of dims d1 and d2 (offset > 0 above the main diagonal, < 0 below) as the
 * last dim, the other dims kept in order (torch.diagonal). */
vl_status vl_diagonal(vl_tensor *t, int64_t offset, int d1, int d2, vl_tensor **out);
/* Views of consecutive pieces of sizes[0..n) along dim (they must add up to the dim's size);
 * *outs a malloc'd array of n new references (free it with free()). */
vl_status vl_split_sizes(vl_tensor *t, int n, const int64_t *sizes, int dim, vl_tensor ***outs);

#ifdef __cplusplus
}
#endif
#endif
