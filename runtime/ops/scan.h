/* runtime/ops/scan.h: front ends of the scans and of the reductions composed from other ops
 * (issue 30): cumsum, cumprod, logsumexp, any, all, count_nonzero (runtime/ops/scan.c).
 * The conventions of runtime/ops/ops.h: 0-based dims (negative from the end), borrowed inputs,
 * new references out, outputs untouched on failure. A 0-dim tensor takes dim 0 / -1 as its one
 * element, as in PyTorch. */
#ifndef VL_OPS_SCAN_H
#define VL_OPS_SCAN_H

#include <stdbool.h>

#include "runtime/ops/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Inclusive cumulative sum (VL_SCAN_SUM) or product along dim, as torch.cumsum / cumprod: the
 * result dtype is dt when dt != VL_NDTYPES (the input converted to it first: f32, f16, bf16, f64,
 * i32 or i64), else the input's for floats and i64 for integer and bool inputs. Integer products
 * wrap as int64. reverse: the suffix scan (x[i] + ... + x[n]), the backward of cumsum. */
vl_status vl_scan(vl_scan_op op, vl_tensor *a, int dim, vl_dtype dt, bool reverse, vl_tensor **out);

/* log(sum(exp(x))) over ndims dims (ndims == 0: all), max-subtracted: rows of -inf give -inf, a
 * +inf gives +inf, NaN propagates, an empty reduction gives -inf. Float inputs keep their dtype
 * (f16/bf16 computed in f32, rounded once); integer and bool inputs give f32. */
vl_status vl_logsumexp(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out);

/* Whether any / every element over the dims is non-zero (NaN counts as non-zero): bool results,
 * any dtype in. ndims == 0: all dims. An empty reduction: any false, all true. */
vl_status vl_any(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out);
vl_status vl_all(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out);
/* The count of non-zero elements over the dims (ndims == 0: all), i64, dims removed. */
vl_status vl_count_nonzero(vl_tensor *a, int ndims, const int *dims, vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
