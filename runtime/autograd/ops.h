/* runtime/autograd/ops.h: autograd-recording versions of the differentiable ops of
 * runtime/ops/ops.h and runtime/core/tensor.h. Each vl_ag_X has the raw vl_X's signature and semantics,
 * calls it, and records a node (runtime/autograd/autograd.h) only when grad mode is on and an input
 * requires grad: otherwise the cost is one check. Outputs of non-float dtype never record.
 *
 * In-place versions (trailing _) with grad mode on: on a leaf that requires grad they fail
 * ("a leaf tensor that requires grad is used in an in-place operation (add_)"); on a recorded
 * view of a tensor that requires grad they fail as unsupported; otherwise they write in place
 * and, when recording, rebase the tensor's history onto the new node (as PyTorch does).
 *
 * Files: ops_util.c (helpers, in-place checks), ops_ew.c (elementwise),
 * ops_reduce.c (reductions, softmax), ops_linalg.c (matmul, indexing, joining),
 * ops_view.c (views, copies, conversions), ops_index.c (x[mask], index writes). */
#ifndef VL_AUTOGRAD_OPS_H
#define VL_AUTOGRAD_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/autograd/autograd.h"
#include "runtime/ops/ops.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- elementwise ---- */
vl_status vl_ag_unary(vl_unary_op op, vl_tensor *a, vl_tensor **out);
vl_status vl_ag_unary_(vl_unary_op op, vl_tensor *a);
vl_status vl_ag_clamp(vl_tensor *a, double lo, double hi, vl_tensor **out);
vl_status vl_ag_clamp_(vl_tensor *a, double lo, double hi);
vl_status vl_ag_binary(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha, vl_tensor **out);
vl_status vl_ag_binary_(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha);
vl_status vl_ag_binary_scalar(vl_binary_op op, vl_tensor *a, double s, bool reverse, vl_tensor **out);
vl_status vl_ag_binary_scalar_(vl_binary_op op, vl_tensor *a, double s);
vl_status vl_ag_where(vl_tensor *cond, vl_tensor *a, vl_tensor *b, vl_tensor **out);
vl_status vl_ag_masked_fill(vl_tensor *a, vl_tensor *mask, double value, vl_tensor **out);
vl_status vl_ag_masked_fill_(vl_tensor *a, vl_tensor *mask, double value);
/* Composites of the recorded ops (their gradients follow): lerp a + w (b - a) with w a tensor or
 * (w NULL) the number ws, float tensors only; clamp with one tensor bound (upper: hi), NaN bounds
 * give NaN, the gradient goes to a inside the bounds (included) and to the bound outside;
 * nan_to_num (posinf / neginf NaN: the dtype's largest / lowest finite value). */
vl_status vl_ag_lerp(vl_tensor *a, vl_tensor *b, vl_tensor *w, double ws, vl_tensor **out);
vl_status vl_ag_clamp_bound(vl_tensor *a, vl_tensor *bound, bool upper, vl_tensor **out);
vl_status vl_ag_nan_to_num(vl_tensor *a, double nan, double posinf, double neginf, vl_tensor **out);
/* Fills: the old value of t no longer matters (its history is cut: a zero gradient). */
vl_status vl_ag_fill_(vl_tensor *t, double value);
vl_status vl_ag_fill_scalar_(vl_tensor *t, vl_scalar value);
vl_status vl_ag_uniform_(vl_tensor *t, double lo, double hi);
vl_status vl_ag_normal_(vl_tensor *t, double mean, double std);
vl_status vl_ag_bernoulli_(vl_tensor *t, double p);
vl_status vl_ag_exponential_(vl_tensor *t, double lambd);
vl_status vl_ag_random_(vl_tensor *t, bool all_bounds, int64_t lo, int64_t hi);
/* dst <- src: src's gradient is dst's (summed over broadcast dims, converted back). */
vl_status vl_ag_copy_(vl_tensor *dst, vl_tensor *src);

/* ---- reductions ---- */
vl_status vl_ag_reduce(vl_reduce_op op, vl_tensor *a, int ndims, const int *dims, bool keepdim, double param,
                       vl_tensor **out, vl_tensor **indices);
vl_status vl_ag_softmax(vl_tensor *a, int dim, bool log, vl_tensor **out);

/* ---- linear algebra ---- */
vl_status vl_ag_matmul(vl_tensor *a, vl_tensor *b, vl_tensor **out);
vl_status vl_ag_mm(vl_tensor *a, vl_tensor *b, vl_tensor **out);
vl_status vl_ag_bmm(vl_tensor *a, vl_tensor *b, vl_tensor **out);
vl_status vl_ag_addmm(vl_tensor *bias, vl_tensor *a, vl_tensor *b, double beta, double alpha, vl_tensor **out);
/* einsum over n operands (runtime/ops/einsum.h: the equation's rules; ops_einsum.c: how it is
 * composed from recorded diagonal views, sums, permutes, reshapes and matmul). */
vl_status vl_ag_einsum(const char *eq, int n, vl_tensor *const *ops, vl_tensor **out);

/* ---- indexing and joining ---- */
vl_status vl_ag_gather(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
/* gather / index_select whose errors (an index out of range, also when CUDA reports it
 * asynchronously) name `op`, the layer that gathers: cross_entropy's class ids, embedding's ids. */
vl_status vl_ag_gather_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
vl_status vl_ag_index_select_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
vl_status vl_ag_scatter_add(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out);
vl_status vl_ag_scatter_add_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src);
vl_status vl_ag_index_select(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
/* ops_index.c, Lua's x[...] forms that are no single op: x[mask] (the selected elements, 1-D, in
 * row-major order); x[mask] = v and x[idx] = v (rows along dim 1, 0-based, negative from the end;
 * v broadcast to the selected elements / rows, or one value per element in row-major order), the
 * recorded index_put_ on x of any strides. */
vl_status vl_ag_masked_select(vl_tensor *x, vl_tensor *mask, vl_tensor **out);
/* Sorting and selection (runtime/autograd/ops_sort.c, the raw ops in runtime/ops/ops.h): the
 * values' gradient is scattered back through the indices; indices may be NULL (not wanted). */
vl_status vl_ag_sort(vl_tensor *x, int dim, bool descending, vl_tensor **values, vl_tensor **indices);
vl_status vl_ag_topk(vl_tensor *x, int64_t k, int dim, bool largest, vl_tensor **values, vl_tensor **indices);
vl_status vl_ag_kthvalue(vl_tensor *x, int64_t k, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices);
vl_status vl_ag_median(vl_tensor *x, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices);
vl_status vl_ag_median_all(vl_tensor *x, vl_tensor **out);
vl_status vl_ag_masked_put_(vl_tensor *x, vl_tensor *mask, vl_tensor *src);
vl_status vl_ag_rows_put_(vl_tensor *x, vl_tensor *idx, vl_tensor *src);
/* x[i] = v and x[{...}] = v: the slice as the steps that make its view from x, in order (a select
 * drops its dim; each step's dim counts in the view made so far); src a tensor (broadcast and
 * converted as copy_) or, when NULL, the number `value`. Recorded on x (CopySlices) when x or src
 * requires grad; a leaf that requires grad refuses it, as every in-place op. */
typedef struct vl_slice_step {
  int dim;
  bool select;      /* select(dim, start), else narrow(dim, start, len) */
  int64_t start, len;
} vl_slice_step;
typedef struct vl_slice {
  int n;
  vl_slice_step step[VL_MAX_DIMS];
} vl_slice;
vl_status vl_ag_slice_write_(vl_tensor *x, const vl_slice *sl, vl_tensor *src, vl_scalar value);
/* ops_scatter.c: scatter (assign; value form: src from vl_scatter_value_src) and index_put
 * (runtime/ops/ops.h), recorded: the overwritten positions of self / x get a zero gradient (all of
 * x's passes with accumulate), src / values get the gradient at the positions they were written to. */
vl_status vl_ag_scatter(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out);
vl_status vl_ag_scatter_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src);
/* reduce='multiply' (in place, or *out a new tensor): no gradient, refused when it would record. */
vl_status vl_ag_scatter_mul(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, bool inplace, vl_tensor **out);
vl_status vl_ag_index_put(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate,
                          vl_tensor **out);
vl_status vl_ag_index_put_(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate);
/* index_add / index_copy / index_fill (PyTorch's, no alpha): along dim, the 1-D index's i-th
 * value (0-based, not wrapped) names where slice i of src goes (added, copied) or where `value`
 * goes (fill: src NULL). src has self's shape with the index's length in dim. A scatter of the
 * index expanded over src, recorded as one: add passes self's gradient whole, copy and fill zero
 * it at the written positions; src gets the gradient gathered there. inplace: self is written
 * (out unused), else *out is a new tensor. */
typedef enum vl_index_write { VL_INDEX_ADD = 0, VL_INDEX_COPY, VL_INDEX_FILL } vl_index_write;
vl_status vl_ag_index_write(vl_index_write kind, vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src,
                            vl_scalar value, bool inplace, vl_tensor **out);
/* index_put_ whose messages name `op` (x[mask] = value, x[index] = value). */
vl_status vl_ag_index_put_as_(const char *op, vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values,
                              bool accumulate);
vl_status vl_ag_cat(int n, vl_tensor *const *ts, int dim, vl_tensor **out);
vl_status vl_ag_stack(int n, vl_tensor *const *ts, int dim, vl_tensor **out);
vl_status vl_ag_split(vl_tensor *t, int64_t split_size, int dim, vl_tensor ***outs, int *n);
vl_status vl_ag_chunk(vl_tensor *t, int chunks, int dim, vl_tensor ***outs, int *n);

/* ---- views, copies, conversions ---- */
vl_status vl_ag_view(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
vl_status vl_ag_reshape(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
vl_status vl_ag_narrow(vl_tensor *t, int dim, int64_t start, int64_t length, vl_tensor **out);
vl_status vl_ag_select(vl_tensor *t, int dim, int64_t index, vl_tensor **out);
vl_status vl_ag_transpose(vl_tensor *t, int d0, int d1, vl_tensor **out);
vl_status vl_ag_permute(vl_tensor *t, int ndim, const int *perm, vl_tensor **out);
vl_status vl_ag_expand(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
vl_status vl_ag_squeeze(vl_tensor *t, int dim, vl_tensor **out);
vl_status vl_ag_squeeze_all(vl_tensor *t, vl_tensor **out);
vl_status vl_ag_unsqueeze(vl_tensor *t, int dim, vl_tensor **out);
/* Return t itself (a new reference, same history) when nothing changes, as the raw ops do. */
vl_status vl_ag_contiguous(vl_tensor *t, vl_tensor **out);
vl_status vl_ag_to(vl_tensor *t, vl_dtype dt, vl_device dev, vl_tensor **out);
vl_status vl_ag_clone(vl_tensor *t, vl_tensor **out);

/* ---- helpers for writing recorded ops (also used by runtime/autograd/nn_*.c) ----
 * A recorded op is the raw op, one VL_AG_RECORD (runtime/autograd/autograd.h) declaring the
 * node, and vl_ag_out; its backward reads VL_AG_CTX and vl_node_saved and hands each gradient
 * to vl_ag_give / vl_ag_give_n, most simply through the formula scope of
 * runtime/autograd/formula.h (its temporaries released and its first failure kept for it). For
 * example (y = x^k, k a scalar):
 *
 *   typedef struct powk_ctx { double k; } powk_ctx;
 *   static vl_status powk_bw(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
 *     double k = VL_AG_CTX(n, powk_ctx)->k;
 *     vl_tensor *x;
 *     VL_TRY(vl_node_saved(n, 0, &x));
 *     VL_FS(f);
 *     vl_tensor *r = F_MUL(go[0], F_MULS(F_POWS(x, k - 1), k));   // g k x^(k-1)
 *     return vl_fs_give(f, n, 1, &r, gi);
 *   }
 *   vl_status vl_ag_powk(vl_tensor *x, double k, vl_tensor **out) {
 *     vl_tensor *r;
 *     VL_TRY(vl_binary_scalar(VL_BIN_POW, x, k, false, &r));
 *     powk_ctx c = {k};
 *     return vl_ag_out(VL_AG_RECORD(.name = "PowkBackward", .backward = powk_bw, .nin = 1, .in = &x,
 *                                   .out = &r, .save = {x}, VL_AG_CTX_OF(c)), r, out);
 *   }
 */
/* Whether backward must produce a gradient for input j of n. */
static inline bool vl_ag_wants(const vl_node *n, int j) { return n->next[j].node != NULL; }
/* The end of a recorded op: *out = r when s is VL_OK, else r is released (out untouched). */
vl_status vl_ag_out(vl_status s, vl_tensor *r, vl_tensor **out);
/* grads_in[j] = g fitted to input j (summed over broadcast dims, converted to the input's dtype
 * and device); consumes g (NULL is fine: no gradient). */
vl_status vl_ag_give(vl_node *n, int j, vl_tensor *g, vl_tensor **grads_in);
/* The end of a backward formula that computed g[0..k) for inputs 0..k-1 with status s: gives
 * each (vl_ag_give) when s is VL_OK; consumes all of g either way. */
vl_status vl_ag_give_n(vl_node *n, vl_status s, int k, vl_tensor **g, vl_tensor **grads_in);
/* The zero gradient of output i of n (for outputs that received none). */
vl_status vl_ag_zeros_out(const vl_node *n, int i, vl_tensor **out);
/* Zeros with the shape, dtype and device of input j of n (which must want a gradient). */
vl_status vl_ag_zeros_in(const vl_node *n, int j, vl_tensor **out);
/* The shape of input j of n (which must want a gradient), from its producer's metadata. */
const int64_t *vl_ag_in_shape(const vl_node *n, int j, int *ndim);
/* Checks for an in-place op `op` writing into a; `recording` says whether it will record. */
vl_status vl_ag_check_inplace(const char *op, vl_tensor *a, bool recording);

#ifdef __cplusplus
}
#endif
#endif
