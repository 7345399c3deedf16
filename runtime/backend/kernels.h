/* runtime/backend/kernels.h: the op table.
 *
 * One vl_kernels table per device type (kernels/cpu fills vl_cpu_kernels, kernels/cuda fills
 * vl_cuda_kernels), reached through the device's backend (runtime/backend/backend.h: vl_backend_of(dev)->ops),
 * which also holds the per-device state hooks (check_async, shutdown). Tables are written with
 * designated initialisers (`.fill = ...`), so a reordered or extended struct cannot silently
 * shift entries. The runtime front end (runtime/ops/) does every dtype, shape and device
 * check once, allocates outputs, computes broadcast strides, and then calls through the table, so
 * a kernel may assume its arguments are valid: dtypes are ones it was told it supports (see each
 * entry), pointers are on its device, sizes agree. Kernels still return a vl_status for what only
 * they can see (a CUDA launch error, a cuBLAS failure, an out-of-range index on the CPU).
 *
 * Layout convention: row-major, the last dim is the fastest-varying. Strides are in elements.
 * All CUDA work is enqueued on `stream` (a cudaStream_t) with no host synchronisation. */
#ifndef VL_KERNELS_H
#define VL_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/backend/op_list.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where a kernel runs. device/stream are ignored on the CPU. */
typedef struct vl_exec {
  int device;   /* CUDA ordinal */
  void *stream; /* cudaStream_t */
} vl_exec;

/* ---- elementwise iteration ----
 * Up to four operands of the same logical shape, operand 0 is the output. The front end has
 * already broadcast the inputs (stride 0 on broadcast dims) and merged adjacent dims where every
 * operand allows it, so a fully contiguous problem arrives as ndim == 1 with all strides 1
 * (vl_iter_is_flat). ndim == 0 means one element. numel may be 0 (nothing to do). */
#define VL_ITER_MAX 4
typedef struct vl_iter {
  int ndim;
  int64_t size[VL_MAX_DIMS];
  int64_t numel;
  int nops;
  char *data[VL_ITER_MAX];                    /* address of element 0 of each operand */
  int64_t stride[VL_ITER_MAX][VL_MAX_DIMS];   /* element strides per operand and dim */
  vl_dtype dtype[VL_ITER_MAX];
  vl_exec ex;
} vl_iter;

static inline bool vl_iter_is_flat(const vl_iter *it) {
  if (it->ndim == 0) return true;
  if (it->ndim != 1) return false;
  for (int i = 0; i < it->nops; i++)
    if (it->stride[i][0] != 1) return false;
  return true;
}

/* Unary ops (runtime/backend/op_list.h): out = f(in) [operands: out, in]. out and in have the
 * same dtype, except the BOOL-domain op (logical_not) whose out is bool. The front end casts
 * integer inputs to f32 before the FLOAT-domain ops, so those see float dtypes only.
 * CLAMP: p0 = lo, p1 = hi (use -INFINITY / INFINITY for "no bound"). NaN propagates. */
typedef enum vl_unary_op {
#define VL_X(E, ...) VL_UN_##E,
  VL_UNARY_OPS(VL_X)
#undef VL_X
  VL_NUNARY
} vl_unary_op;

/* The domain column of the op list (EXACT, FLOAT, BOOL). */
static inline vl_op_domain vl_unary_domain(vl_unary_op op) {
  static const unsigned char d[] = {
#define VL_X(E, name, node, dom, ...) VL_OPD_##dom,
      VL_UNARY_OPS(VL_X)
#undef VL_X
  };
  return (unsigned)op < VL_NUNARY ? (vl_op_domain)d[op] : VL_OPD_FLOAT;
}

/* Binary ops [operands: out, a, b]: a and b share one dtype (the front end promotes); out has
 * that dtype, or bool for the comparisons and logical ops. ADD and SUB compute a + alpha*b and
 * a - alpha*b (alpha = 1 otherwise ignored). DIV on integer dtypes never reaches a kernel (the
 * front end promotes to f32: true division). POW on integers: integer power, negative exponents
 * are rejected by the front end. MAXIMUM/MINIMUM propagate NaN. */
typedef enum vl_binary_op {
#define VL_X(E, ...) VL_BIN_##E,
  VL_BINARY_OPS(VL_X)
#undef VL_X
  VL_NBINARY
} vl_binary_op;

/* The kind column of the op list (ARITH, CMP, LOGIC, ACT). */
static inline vl_binary_kind vl_binary_kind_of(vl_binary_op op) {
  static const unsigned char k[] = {
#define VL_X(E, name, node, kind, ...) VL_OPK_##kind,
      VL_BINARY_OPS(VL_X)
#undef VL_X
  };
  return (unsigned)op < VL_NBINARY ? (vl_binary_kind)k[op] : VL_OPK_ARITH;
}

static inline bool vl_binary_is_predicate(vl_binary_op op) {
  vl_binary_kind k = vl_binary_kind_of(op);
  return k == VL_OPK_CMP || k == VL_OPK_LOGIC;
}

/* ---- reductions ----
 * `in` is contiguous and viewed as [outer, len, inner]; the reduction runs over `len` and writes
 * contiguous [outer, inner] to `out`. Accumulation is in f32 for f16/bf16/f32 (f64 allowed on
 * the CPU), f64 for f64, i64 for integers. out_dtype: SUM/PROD of integer/bool inputs -> i64;
 * otherwise the input dtype. MEAN/VAR/NORM take float inputs only. len == 0: SUM 0, PROD 1, MEAN
 * NaN, MAX/MIN are rejected by the front end. MAX/MIN propagate NaN and, when `indices` is not
 * NULL, write there (contiguous [outer, inner], i64) the position along len of the first
 * maximum/minimum (the first NaN, if any). VAR: param = correction (0 population, 1 sample),
 * computed with a numerically stable method (Welford or two-pass). NORM: param = p (1, 2, or
 * INFINITY; other p > 0 as (sum |x|^p)^(1/p)). */
typedef enum vl_reduce_op {
  VL_RED_SUM = 0,
  VL_RED_PROD,
  VL_RED_MEAN,
  VL_RED_MAX,
  VL_RED_MIN,
  VL_RED_VAR,
  VL_RED_NORM,
  VL_NREDUCE
} vl_reduce_op;

typedef struct vl_reduce_args {
  vl_reduce_op op;
  vl_dtype in_dtype, out_dtype;
  const void *in;
  void *out;
  int64_t *indices;
  int64_t outer, len, inner;
  double param;
  vl_exec ex;
} vl_reduce_args;

/* ---- scans (issue 30: cumsum, cumprod) ----
 * `in` and `out` are contiguous [outer, len, inner] of one dtype (the front end casts the input
 * to the result dtype first): out[o, l, i] = in[o, 0, i] op ... op in[o, l, i], or with `reverse`
 * the suffix form in[o, l, i] op ... op in[o, len - 1, i] (cumsum's backward, without a flip).
 * Floats accumulate in f64 on the CPU; on CUDA in f32 for f16/bf16/f32 and f64 for f64, each
 * output rounded once. Integers accumulate in int64 and wrap (as PyTorch's i64 cumprod). dtype:
 * f32, f16, bf16, f64, i32, i64. len may be 0. */
typedef enum vl_scan_op { VL_SCAN_SUM = 0, VL_SCAN_PROD, VL_NSCAN } vl_scan_op;
typedef struct vl_scan_args {
  vl_scan_op op;
  vl_dtype dtype;
  const void *in;
  void *out;
  int64_t outer, len, inner;
  bool reverse;
  vl_exec ex;
} vl_scan_args;

/* Softmax / log-softmax over `len` of contiguous [outer, len, inner]; out same layout and dtype
 * (f32, f16, bf16, f64); computed in f32 (f64 for f64), max-subtracted. */
typedef struct vl_softmax_args {
  vl_dtype dtype;
  const void *in;
  void *out;
  int64_t outer, len, inner;
  bool log;
  vl_exec ex;
} vl_softmax_args;

/* Batched GEMM, row-major: for b in [0, batch):
 *   C_b = alpha * op(A_b) @ op(B_b) + beta * C_b,  op(A_b) is m x k, op(B_b) is k x n, C_b m x n.
 * A_b = a + b*stride_a (elements); A is stored m x k with row stride lda (k x m when trans_a).
 * Likewise B (k x n, or n x k when trans_b) and C (m x n, row stride ldc). stride_* may be 0
 * (a broadcast operand). dtype f32, f16, bf16, f64; accumulation in f32 (f64 for f64). When
 * beta == 0, C is not read (may hold NaN). allow_tf32 lets f32 use TF32 tensor cores (CUDA).
 * bias, when not NULL, is a dense vector of n elements of C's dtype added to every row of C after
 * the product (C_b = alpha * op(A_b) @ op(B_b) + beta * C_b + bias), unscaled: this is Linear's
 * y = x W^T + b. CUDA adds it in cuBLASLt's epilogue (one pass over C instead of a copy before the
 * GEMM) when it can, and says which way it went in *bias_path when that is not NULL. */
typedef enum { VL_GEMM_BIAS_NONE = 0, VL_GEMM_BIAS_EPILOGUE = 1, VL_GEMM_BIAS_PREFILL = 2 } vl_gemm_bias_path;
typedef struct vl_gemm_args {
  vl_dtype dtype;
  bool trans_a, trans_b;
  int64_t m, n, k, batch;
  const void *a; int64_t lda, stride_a;
  const void *b; int64_t ldb, stride_b;
  void *c; int64_t ldc, stride_c;
  double alpha, beta;
  bool allow_tf32;
  vl_exec ex;
  const void *bias;
  vl_gemm_bias_path *bias_path;
} vl_gemm_args;

/* A tensor as index kernels see it. */
typedef struct vl_strided {
  char *data; /* element 0 */
  vl_dtype dtype;
  int ndim;
  int64_t size[VL_MAX_DIMS];
  int64_t stride[VL_MAX_DIMS];
} vl_strided;

/* Index ops, PyTorch semantics, `dim` 0-based and already wrapped, index dtype i64 or i32.
 *  gather:       out.shape == index.shape; out[..., j_dim, ...] = src[..., index[...], ...]
 *  scatter_add:  for every position p of index: out[p with p_dim := index[p]] += src[p]
 *                (out is updated in place; CUDA uses atomics, so float sums are not bitwise
 *                reproducible there)
 *  scatter:      for every position p of index: out[p with p_dim := index[p]] = src[p] (assign,
 *                in place; where positions repeat the CPU keeps the last in index's row-major
 *                order, CUDA any one of them, as PyTorch leaves it unspecified)
 *  scatter_mul:  as scatter_add with *= (floats through double on the CPU; integers wrap; bool:
 *                logical and; CUDA uses compare-and-swap loops, so float products are not bitwise
 *                reproducible there unless deterministic)
 *  index_select: index is 1-D; out.size(dim) == index.numel; out[.., i, ..] = src[.., index[i], ..]
 * out and src share a dtype (any). An index outside [0, size) (negatives are NOT wrapped) is an
 * error: the CPU returns VL_EINVAL naming `op`, the index and the size; CUDA records it in the
 * device's asynchronous error flag, reported by check_async at the next synchronisation. */
typedef struct vl_index_args {
  const char *op;
  vl_strided out;
  vl_strided src;
  vl_strided index;
  int dim;
  vl_exec ex;
  bool deterministic; /* scatter_add / scatter_mul: a fixed order, no atomics (vl_set_deterministic) */
} vl_index_args;

/* Counter-based random numbers (runtime/core/philox.h defines the exact stream, shared by CPU and
 * CUDA so one seed gives the same numbers on both). `out` is contiguous with numel elements of
 * dtype (float dtypes for UNIFORM/NORMAL/EXPONENTIAL; any dtype for BERNOULLI, which stores 0/1,
 * and INT). UNIFORM: a + (b - a) * u, u in (0, 1); NORMAL: a + b * z; BERNOULLI: u < a;
 * EXPONENTIAL: -log(u) / a (a = lambda > 0); INT: lo + floor(w * range / 2^k), an integer in
 * [lo, lo + range) from one 32-bit word (k = 32, range <= 2^32) or two (k = 64), exact in int64
 * (randint, random_). */
typedef enum vl_rand_kind {
  VL_RAND_UNIFORM = 0,
  VL_RAND_NORMAL,
  VL_RAND_BERNOULLI,
  VL_RAND_EXPONENTIAL,
  VL_RAND_INT
} vl_rand_kind;
typedef struct vl_rand_args {
  vl_rand_kind kind;
  vl_dtype dtype;
  void *out;
  int64_t numel;
  uint64_t seed, offset; /* Philox key and first counter */
  double a, b;
  vl_exec ex;
  /* Under CUDA graph capture (runtime/core/graph.h): {seed, base} in device memory, read when the
   * kernel runs; the key is then base[0] and the first counter base[1] + offset, so a replay draws
   * from the generator's state at replay time. NULL otherwise. */
  const uint64_t *base;
  /* INT only: the lowest value and the number of values (>= 1); kept in integers because a
   * double cannot hold every int64 bound. */
  int64_t lo;
  uint64_t range;
} vl_rand_args;

/* Resolution of the uniforms a call draws (runtime/core/philox.h): f16 and bf16 uniforms use as many
 * bits as the dtype holds below 1, so no draw rounds up to 1; everything else uses 23. */
static inline int vl_rand_uniform_bits(vl_dtype dt, vl_rand_kind kind) {
  if (kind != VL_RAND_UNIFORM) return 23;
  return dt == VL_F16 ? 10 : dt == VL_BF16 ? 7 : 23;
}

/* Elements per Philox group (counter) of a call: 2 when each element takes two words (f64
 * uniform, normal and exponential; INT with a range above 2^32), else 4. */
static inline int vl_rand_per_group(vl_dtype dt, vl_rand_kind kind, uint64_t range) {
  if (kind == VL_RAND_INT) return range > ((uint64_t)1 << 32) ? 2 : 4;
  return dt == VL_F64 && kind != VL_RAND_BERNOULLI ? 2 : 4;
}

/* Sorting (runtime/ops/sort.c): `in` is contiguous and viewed as [outer, len, inner]; each of the
 * outer * inner rows (len elements at stride inner) is sorted stably: equal keys keep their input
 * order, in either direction. `values` (in's dtype) and `indices` (i64, the 0-based position along
 * len of each value) are contiguous in the same layout. The order is total and the same on every
 * backend: NaN (any payload) is the largest value, -0.0 and +0.0 are equal (a tie), so CUDA's
 * result equals the CPU's bit for bit. Any dtype. len >= 1, outer * inner >= 1. */
typedef struct vl_sort_args {
  vl_dtype dtype;
  const void *in;
  void *values;
  int64_t *indices;
  int64_t outer, len, inner;
  bool descending;
  vl_exec ex;
} vl_sort_args;

/* searchsorted: for each of the `rows` rows, the m values of row r (contiguous, values + r*m) are
 * looked up in the n sorted boundaries of row r (seq + r*n; seq_rows == 1: one row for all). out
 * (contiguous rows x m, i64, or i32 when out_i32) gets the insertion point in [0, n]: the first
 * position whose boundary is >= value (> value when right), with PyTorch's exact comparisons
 * (a NaN value goes to n). seq and values share one dtype (any). */
typedef struct vl_search_args {
  vl_dtype dtype;
  const void *seq;
  const void *values;
  void *out;
  int64_t rows, seq_rows, n, m;
  bool right, out_i32;
  vl_exec ex;
} vl_search_args;

typedef struct vl_kernels {
  const char *name;                                     /* "cpu" or "cuda" */
  /* [out] = value, any dtype */
  vl_status (*fill)(const vl_iter *it, double value);
  /* [out, in] = in converted to out's dtype (any pair), any strides */
  vl_status (*copy)(const vl_iter *it);
  vl_status (*unary)(vl_unary_op op, const vl_iter *it, double p0, double p1);
  vl_status (*binary)(vl_binary_op op, const vl_iter *it, double alpha);
  /* [out, a]: out = a op s, or s op a when reverse */
  vl_status (*binary_scalar)(vl_binary_op op, const vl_iter *it, double s, bool reverse);
  /* [out, cond(bool), a, b]: out = cond ? a : b; a, b, out share a dtype */
  vl_status (*where)(const vl_iter *it);
  /* [out, in, mask(bool)]: out = mask ? value : in */
  vl_status (*masked_fill)(const vl_iter *it, double value);
  /* contiguous out[i] = start + i * step, numel elements of dtype */
  vl_status (*arange)(void *out, vl_dtype dt, int64_t numel, double start, double step, vl_exec ex);
  vl_status (*reduce)(const vl_reduce_args *a);
  vl_status (*softmax)(const vl_softmax_args *a);
  vl_status (*gemm)(const vl_gemm_args *a);
  vl_status (*gather)(const vl_index_args *a);
  vl_status (*scatter_add)(const vl_index_args *a);
  vl_status (*scatter)(const vl_index_args *a);
  vl_status (*scatter_mul)(const vl_index_args *a);
  vl_status (*index_select)(const vl_index_args *a);
  vl_status (*rand)(const vl_rand_args *a);
  vl_status (*scan)(const vl_scan_args *a);
  vl_status (*sort)(const vl_sort_args *a);
  vl_status (*searchsorted)(const vl_search_args *a);
} vl_kernels;

extern const vl_kernels vl_cpu_kernels;
#ifdef VL_HAVE_CUDA
extern const vl_kernels vl_cuda_kernels;
#endif

#ifdef __cplusplus
}
#endif
#endif
