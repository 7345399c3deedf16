/* runtime/autograd/ops_scan.h: the recorded scans and composed reductions of runtime/ops/scan.h
 * (runtime/autograd/ops_scan.c): the raw ops' signatures and semantics, recording a node when
 * grad mode is on and the input requires grad. any / all / count_nonzero are not differentiable
 * (bool / i64 results) and are called raw. */
#ifndef VL_AUTOGRAD_OPS_SCAN_H
#define VL_AUTOGRAD_OPS_SCAN_H

#include "runtime/autograd/ops.h"
#include "runtime/ops/scan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* cumsum / cumprod (reverse is not offered: it is the backward's) */
vl_status vl_ag_scan(vl_scan_op op, vl_tensor *a, int dim, vl_dtype dt, vl_tensor **out);
vl_status vl_ag_logsumexp(vl_tensor *a, int ndims, const int *dims, bool keepdim, vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
