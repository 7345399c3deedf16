/* runtime/ops/ops.h: the op front end. Each function checks dtypes, shapes and devices once, names
 * the op and the operands in its error message (e.g. "add: shapes 2x3 and 4x3 cannot be
 * broadcast (a 2x3 f32 cpu, b 4x3 f32 cpu)"), allocates the output, and dispatches through the
 * op table (runtime/backend/kernels.h) of the operands' device. On failure the outputs are untouched and
 * in-place targets unmodified (all checks happen before any write).
 *
 * Dims are 0-based, negative from the end. Tensors passed in are borrowed; tensors returned
 * through vl_tensor** are new references. All inputs of one op must be on one device
 * (VL_EDEVICE otherwise, naming both). */
#ifndef VL_OPS_H
#define VL_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/kernels.h"
#include "runtime/core/scalar.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- creation ---- */
vl_status vl_full(int ndim, const int64_t *size, double value, vl_dtype dt, vl_device dev, vl_tensor **out);
vl_status vl_zeros(int ndim, const int64_t *size, vl_dtype dt, vl_device dev, vl_tensor **out);
vl_status vl_ones(int ndim, const int64_t *size, vl_dtype dt, vl_device dev, vl_tensor **out);
/* [start, end) by step (step != 0); numel = ceil((end - start) / step). */
vl_status vl_arange(double start, double end, double step, vl_dtype dt, vl_device dev, vl_tensor **out);
/* Values pass the conversion rule of runtime/core/scalar.h (VL_EINVAL "full: value 1e+10 cannot
 * be converted to i32 without overflow"); integer scalars reach i64 tensors exactly. The double
 * forms above are these with vl_scalar_float. arange's integer form counts in exact integers. */
vl_status vl_full_scalar(int ndim, const int64_t *size, vl_scalar value, vl_dtype dt, vl_device dev,
                         vl_tensor **out);
vl_status vl_arange_scalar(vl_scalar start, vl_scalar end, vl_scalar step, vl_dtype dt, vl_device dev,
                           vl_tensor **out);
/* Copies numel(size) host elements of dtype `dt` (contiguous) into a new tensor on dev. */
vl_status vl_from_host(const void *host, int ndim, const int64_t *size, vl_dtype dt, vl_device dev,
                       vl_tensor **out);
/* Philox draws from the process generator (see vl_manual_seed). */
vl_status vl_rand(int ndim, const int64_t *size, double lo, double hi, vl_dtype dt, vl_device dev, vl_tensor **out);
vl_status vl_randn(int ndim, const int64_t *size, double mean, double std, vl_dtype dt, vl_device dev, vl_tensor **out);
vl_status vl_bernoulli(int ndim, const int64_t *size, double p, vl_dtype dt, vl_device dev, vl_tensor **out);
/* In-place fills of an existing tensor (any strides). */
vl_status vl_uniform_(vl_tensor *t, double lo, double hi);
vl_status vl_normal_(vl_tensor *t, double mean, double std);
vl_status vl_bernoulli_(vl_tensor *t, double p);
/* Integers in [lo, hi) of dtype dt (any but bool; hi - 1 representable), exact in int64. */
vl_status vl_randint(int ndim, const int64_t *size, int64_t lo, int64_t hi, vl_dtype dt, vl_device dev,
                     vl_tensor **out);
vl_status vl_random_(vl_tensor *t, int64_t lo, int64_t hi);
vl_status vl_random_default_(vl_tensor *t); /* [0, 2^mantissa] (floats), [0, max] (integers) */
vl_status vl_exponential_(vl_tensor *t, double lambd); /* -log(u) / lambd, float dtypes */
/* runtime/ops/sample.c: host algorithms on the Philox stream, the result moved to `dev`, so both
 * devices give the same values for one seed (not under CUDA graph capture). */
vl_status vl_randperm(int64_t n, vl_dtype dt, vl_device dev, vl_tensor **out);
/* probs: 1-D or 2-D float weights (>= 0, finite, a positive sum per row); i64 0-based indices of
 * shape (num_samples) or (rows, num_samples) on probs' device. */
vl_status vl_multinomial(vl_tensor *probs, int64_t num_samples, bool replacement, vl_tensor **out);
/* runtime/ops/sample.c: compositions of backend ops, on any device. */
vl_status vl_linspace(double start, double end, int64_t steps, vl_dtype dt, vl_device dev, vl_tensor **out);
vl_status vl_logspace(double start, double end, int64_t steps, double base, vl_dtype dt, vl_device dev,
                      vl_tensor **out);
vl_status vl_eye(int64_t n, int64_t m, vl_dtype dt, vl_device dev, vl_tensor **out);
void vl_manual_seed(uint64_t seed); /* also resets the offset */
void vl_rng_get_state(uint64_t *seed, uint64_t *offset);
void vl_rng_set_state(uint64_t seed, uint64_t offset);

/* ---- conversion and copies ---- */
/* The copies of runtime/core/tensor.h's views (runtime/ops/copy.c): */
vl_status vl_contiguous(vl_tensor *t, vl_tensor **out); /* retains t when already contiguous */
vl_status vl_clone(vl_tensor *t, vl_tensor **out);      /* always a new contiguous tensor */
/* A view when possible (vl_reshape_view), otherwise a contiguous copy. */
vl_status vl_reshape(vl_tensor *t, int ndim, const int64_t *size, vl_tensor **out);
/* The layouts of runtime/core/layout.h: t in a layout family: NHWC-dense when nhwc (t itself
 * when it already is), else NCHW-contiguous; a new reference. */
vl_status vl_in_family(vl_tensor *t, bool nhwc, vl_tensor **out);
/* A channels-last copy (or a new reference when already so). */
vl_status vl_to_channels_last(vl_tensor *t, vl_tensor **out);
/* dtype and/or device change; returns a new reference to t itself when nothing changes. */
vl_status vl_to(vl_tensor *t, vl_dtype dt, vl_device dev, vl_tensor **out);
/* dst[...] = src broadcast to dst's shape, converting dtype and crossing devices as needed. */
vl_status vl_copy_(vl_tensor *dst, vl_tensor *src);
vl_status vl_fill_(vl_tensor *t, double value);
vl_status vl_fill_scalar_(vl_tensor *t, vl_scalar value); /* the rule of runtime/core/scalar.h */
/* The single element of a numel-1 tensor as a double (synchronises a CUDA tensor's stream). */
vl_status vl_item(vl_tensor *t, double *out);
/* Copies t (any device/strides) to host memory as contiguous elements of t's dtype.
 * buf must hold numel * dtype size bytes. Synchronises. */
vl_status vl_to_host(vl_tensor *t, void *buf);
/* vl_to_host for the operation `op` (named in errors, e.g. when a CUDA graph capture refuses it). */
vl_status vl_read_host(const char *op, vl_tensor *t, void *buf);

/* ---- elementwise ---- */
vl_status vl_unary(vl_unary_op op, vl_tensor *a, vl_tensor **out);
vl_status vl_unary_(vl_unary_op op, vl_tensor *a);                     /* in place */
vl_status vl_clamp(vl_tensor *a, double lo, double hi, vl_tensor **out); /* +-INFINITY = none */
vl_status vl_clamp_(vl_tensor *a, double lo, double hi);
/* a op alpha*b for ADD/SUB (alpha ignored otherwise), broadcasting, dtype promotion. */
vl_status vl_binary(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha, vl_tensor **out);
/* In place into a: b is broadcast to a's shape; the result dtype must be a's (VL_EDTYPE
 * otherwise, e.g. f32 into an i32 tensor). Predicates in place store 0/1 in a's dtype. */
vl_status vl_binary_(vl_binary_op op, vl_tensor *a, vl_tensor *b, double alpha);
/* a op s (s op a when reverse). An integer tensor with a non-integral s gives f32. */
vl_status vl_binary_scalar(vl_binary_op op, vl_tensor *a, double s, bool reverse, vl_tensor **out);
vl_status vl_binary_scalar_(vl_binary_op op, vl_tensor *a, double s);
/* cond (bool) ? a : b with broadcasting of all three. */
vl_status vl_where(vl_tensor *cond, vl_tensor *a, vl_tensor *b, vl_tensor **out);
vl_status vl_masked_fill(vl_tensor *a, vl_tensor *mask, double value, vl_tensor **out);
vl_status vl_masked_fill_(vl_tensor *a, vl_tensor *mask, double value);

/* ---- reductions ---- */
/* Reduce over `ndims` dims listed in `dims` (ndims == 0: every dim, giving a 0-dim tensor unless
 * keepdim). MAX/MIN: `indices` (may be NULL) receives the i64 positions; they need exactly one
 * dim unless both reduce everything (then the flat index). VAR param = correction, NORM param = p. */
vl_status vl_reduce(vl_reduce_op op, vl_tensor *a, int ndims, const int *dims, bool keepdim,
                    double param, vl_tensor **out, vl_tensor **indices);
/* Pass as the dim of argmax/argmin to reduce over every element (the flat index). */
#define VL_DIM_ALL INT32_MIN
vl_status vl_argmax(vl_tensor *a, int dim, bool keepdim, vl_tensor **out); /* dim ignored if all */
vl_status vl_argmin(vl_tensor *a, int dim, bool keepdim, vl_tensor **out);
vl_status vl_softmax(vl_tensor *a, int dim, bool log, vl_tensor **out);

/* ---- linear algebra (float dtypes; a and b share a dtype) ---- */
/* torch.matmul semantics: 1-D x 1-D dot, 2-D x 2-D, 1-D promoted and removed, batch dims
 * broadcast. */
vl_status vl_matmul(vl_tensor *a, vl_tensor *b, vl_tensor **out);
vl_status vl_mm(vl_tensor *a, vl_tensor *b, vl_tensor **out);                 /* 2-D only */
vl_status vl_bmm(vl_tensor *a, vl_tensor *b, vl_tensor **out);                /* 3-D only */
/* beta * bias + alpha * (a @ b); a, b 2-D; bias broadcastable to the result. */
/* How many addmm biases were added inside the GEMM (cuBLASLt's epilogue) and how many were written
 * into the result before it (CPU, f64, unaligned bias), since the process started. */
void vl_gemm_bias_stats(uint64_t *epilogue, uint64_t *prefill);
vl_status vl_addmm(vl_tensor *bias, vl_tensor *a, vl_tensor *b, double beta, double alpha, vl_tensor **out);
void vl_set_allow_tf32(bool on);
bool vl_get_allow_tf32(void);

/* ---- indexing and joining ---- */
vl_status vl_gather(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
vl_status vl_scatter_add(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out);
vl_status vl_scatter_add_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src);
vl_status vl_index_select(vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
/* scatter (assign): self with self[p with p_dim := index[p]] = src[p] for every position p of
 * index (checks as scatter_add). Repeated positions: the last in index's row-major order on the
 * CPU, any one on CUDA (PyTorch leaves it unspecified). */
vl_status vl_scatter(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src, vl_tensor **out);
vl_status vl_scatter_(vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src);
/* scatter_ in place: assign, add (scatter_add_) or multiply (reduce='multiply'), its messages
 * naming op (index_add_, index_copy_, ...). */
typedef enum vl_scatter_mode { VL_SCATTER_SET = 0, VL_SCATTER_ADD, VL_SCATTER_MUL } vl_scatter_mode;
vl_status vl_scatter_into_(const char *op, vl_tensor *self, int dim, vl_tensor *index, vl_tensor *src,
                          vl_scatter_mode mode);
/* The src of scatter's value form: `value` in self's dtype (checked, errors naming op) expanded to
 * index's shape (stride 0: no memory per element). */
vl_status vl_scatter_value_src(const char *op, vl_tensor *self, vl_tensor *index, vl_scalar value, vl_tensor **out);
/* index_put (runtime/ops/scatter.c): x[indices[0], ..., indices[n-1]] = values, PyTorch's
 * advanced indexing on the first n dims: the n integer index tensors (i64/i32, negative values
 * from the end) broadcast together to B; the indexed shape is B followed by x's dims after the
 * n-th; values (x's dtype and device) broadcast to it. accumulate sums over repeated positions;
 * without it one of them stays (the last on the CPU). vl_index_put_plan checks all that and
 * reads the indices on the host (a synchronisation on a GPU, as the error names the bad value):
 * it gives the indexed shape and lin, the i64 row-major positions over x's first n dims (on x's
 * device, [numel(B)]); vl_index_put_lin_ writes with a plan. */
vl_status vl_index_put_plan(const char *op, vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values,
                            int *vnd, int64_t *vsize, vl_tensor **lin);
vl_status vl_index_put_lin_(const char *op, vl_tensor *x, int n, vl_tensor *lin, vl_tensor *values, int vnd,
                            const int64_t *vsize, bool accumulate);
vl_status vl_index_put(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate,
                       vl_tensor **out);
vl_status vl_index_put_(vl_tensor *x, int n, vl_tensor *const *indices, vl_tensor *values, bool accumulate);
/* one_hot (runtime/ops/scatter.c): i64 [..., num_classes] with a 1 at each value of t (i64 or
 * i32, 0-based); num_classes -1 takes max(t) + 1. A value outside [0, num_classes) is an error
 * naming it (values are read on the host: a synchronisation on a GPU, as PyTorch's). */
vl_status vl_one_hot(vl_tensor *t, int64_t num_classes, vl_tensor **out);
/* The positions of mask's non-zero elements in row-major order, i64 on mask's device (0-based):
 * [n, ndim] coordinates, or with flat [n] offsets into a contiguous tensor of mask's shape. */
vl_status vl_nonzero(vl_tensor *mask, bool flat, vl_tensor **out);
/* The same, with every message (an out-of-bounds index included) naming `op`. */
vl_status vl_gather_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
vl_status vl_index_select_as(const char *op, vl_tensor *src, int dim, vl_tensor *index, vl_tensor **out);
vl_status vl_cat(int n, vl_tensor *const *ts, int dim, vl_tensor **out);
vl_status vl_stack(int n, vl_tensor *const *ts, int dim, vl_tensor **out);
/* Views of consecutive pieces of `split_size` along dim (last may be shorter); *outs is a
 * malloc'd array of *n new references (free the array with free()). */
vl_status vl_split(vl_tensor *t, int64_t split_size, int dim, vl_tensor ***outs, int *n);
vl_status vl_chunk(vl_tensor *t, int chunks, int dim, vl_tensor ***outs, int *n);

/* ---- sorting and selection (runtime/ops/sort.c) ----
 * The order of all of them is one stable ascending (or descending) sort along dim: NaN is the
 * largest value, -0.0 ties with +0.0, ties keep their input order (so topk's and kthvalue's ties
 * give the lower index first). Indices are i64, 0-based positions along dim. A 0-dim input takes
 * dim 0 or -1 and gives 0-dim results. Values and indices are contiguous. */
vl_status vl_sort(vl_tensor *x, int dim, bool descending, vl_tensor **values, vl_tensor **indices);
/* The k largest (or smallest) along dim, sorted; 0 <= k <= size(dim). */
vl_status vl_topk(vl_tensor *x, int64_t k, int dim, bool largest, vl_tensor **values, vl_tensor **indices);
/* The k-th smallest (k 1-based, 1 <= k <= size(dim)), dim kept as size 1 with keepdim. */
vl_status vl_kthvalue(vl_tensor *x, int64_t k, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices);
/* The lower median along dim (size(dim) >= 1); a row with NaN gives its first NaN. */
vl_status vl_median(vl_tensor *x, int dim, bool keepdim, vl_tensor **values, vl_tensor **indices);
/* The distinct values of the flattened x, ascending (every NaN distinct); with want_inverse the
 * i64 position in *values of each element of x (x's shape), with want_counts each value's count.
 * Reads on the host (a synchronisation on a GPU): the result's size depends on the data. */
vl_status vl_unique(vl_tensor *x, bool want_inverse, bool want_counts, vl_tensor **values, vl_tensor **inverse,
                    vl_tensor **counts);
/* Insertion points (0-based, i64 or i32) of values in the sorted last dim of seq: 1-D seq for all
 * values, or the same leading dims as values; both compared in their promoted dtype. */
vl_status vl_searchsorted(vl_tensor *seq, vl_tensor *values, bool right, bool out_i32, vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
