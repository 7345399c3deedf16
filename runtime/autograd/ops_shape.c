/* runtime/autograd/ops_shape.c: the recorded shape ops (runtime/ops/shape.h). The compositions of
 * runtime/ops/shape.c run over the recorded primitives, so their gradients are those of their
 * parts; diagonal (a strided view no primitive makes) and split by sizes (one node for all the
 * pieces, as split) record a node of their own. */
#include <stdlib.h>

#include "runtime/autograd/formula.h"
#include "runtime/autograd/ops.h"
#include "runtime/autograd/ops_shape.h"

static const vl_shape_prims ag_prims = {
    .reshape = vl_ag_reshape,
    .expand = vl_ag_expand,
    .permute = vl_ag_permute,
    .narrow = vl_ag_narrow,
    .index_select = vl_ag_index_select,
    .cat = vl_ag_cat,
    .masked_fill = vl_ag_masked_fill,
    .clone = vl_ag_clone,
};

vl_status vl_ag_flatten(vl_tensor *t, int start, int end, vl_tensor **out) {
  return vl_flatten_with(&ag_prims, t, start, end, out);
}
vl_status vl_ag_unflatten(vl_tensor *t, int dim, int n, const int64_t *sizes, vl_tensor **out) {
  return vl_unflatten_with(&ag_prims, t, dim, n, sizes, out);
}
vl_status vl_ag_movedim(vl_tensor *t, int n, const int *src, const int *dst, vl_tensor **out) {
  return vl_movedim_with(&ag_prims, t, n, src, dst, out);
}
vl_status vl_ag_flip(vl_tensor *t, int n, const int *dims, vl_tensor **out) {
  return vl_flip_with(&ag_prims, t, n, dims, out);
}
vl_status vl_ag_roll(vl_tensor *t, int nshifts, const int64_t *shifts, int ndims, const int *dims, vl_tensor **out) {
  return vl_roll_with(&ag_prims, t, nshifts, shifts, ndims, dims, out);
}
vl_status vl_ag_tri(vl_tensor *t, int64_t k, bool upper, vl_tensor **out) {
  return vl_tri_with(&ag_prims, t, k, upper, out);
}
vl_status vl_ag_repeat(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out) {
  return vl_repeat_with(&ag_prims, t, n, reps, out);
}
vl_status vl_ag_tile(vl_tensor *t, int n, const int64_t *reps, vl_tensor **out) {
  return vl_tile_with(&ag_prims, t, n, reps, out);
}
vl_status vl_ag_repeat_interleave(vl_tensor *t, int64_t r, vl_tensor *repeats, bool has_dim, int dim,
                                  vl_tensor **out) {
  return vl_repeat_interleave_with(&ag_prims, t, r, repeats, has_dim, dim, out);
}
vl_status vl_ag_pad(vl_tensor *t, int npads, const int64_t *pads, vl_pad_mode mode, double value, vl_tensor **out) {
  return vl_pad_with(&ag_prims, t, npads, pads, mode, value, out);
}

/* ---- diagonal: g into the diagonal of zeros of the input's shape ---- */

typedef struct diagonal_ctx {
  int64_t offset;
  int d1, d2;
} diagonal_ctx;

static vl_status diagonal_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const diagonal_ctx *c = VL_AG_CTX(n, diagonal_ctx);
  VL_FS(f);
  vl_tensor *z = F_RUN(vl_ag_zeros_in(n, 0, F_OUT));
  vl_tensor *v = F_RUN(vl_diagonal(z, c->offset, c->d1, c->d2, F_OUT));
  F_DO(vl_copy_(v, go[0]));
  return vl_fs_give(f, n, 1, &z, gi);
}

vl_status vl_ag_diagonal(vl_tensor *t, int64_t offset, int d1, int d2, vl_tensor **out) {
  vl_tensor *r;
  VL_TRY(vl_diagonal(t, offset, d1, d2, &r));
  diagonal_ctx c = {offset, d1, d2};
  return vl_ag_out(VL_AG_RECORD(.name = "DiagonalBackward", .backward = diagonal_bw, .nin = 1, .in = &t, .out = &r,
                                .view = true, VL_AG_CTX_OF(c)),
                   r, out);
}

/* split by sizes: vl_ag_split_sizes, beside split and chunk in ops_linalg.c (one backward) */
