/* runtime/nn/dropout.c: the fused dropout front ends (runtime/nn/fused.h).
 *
 * The mask is v100.bernoulli(x.shape, 1 - p)'s, element for element: the draw reserves the same
 * number of Philox counters from the same generator state as runtime/ops/create.c's rand_fill
 * (4 elements per counter whatever the dtype), including the CUDA graph capture path where the
 * counters are relative to the buffer the replay writes. Only (seed, offset, base) is kept for the
 * backward, which applies the same mask to dy. */
#include <math.h>

#include "runtime/core/context.h"
#include "runtime/core/graph.h"
#include "runtime/core/philox.h"
#include "runtime/nn/fused.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops_internal.h"

static vl_status check_dropout(const char *op, const vl_tensor *x, double p) {
  VL_TRY(vl_nn_check_prob(op, "p", p));
  if (vl_dtype_is_float(x->dtype)) return VL_OK;
  char d[VL_DESC_LEN];
  return vl_fail(VL_EDTYPE, "%s: input must be a float tensor (f32, f16, bf16, f64), got %s (input %s)", op,
                 vl_dtype_name(x->dtype), vl_tensor_desc(x, d, sizeof d));
}

/* y = contiguous(x) * keep * scale with the counters of `rng`. */
static vl_status run(const char *op, vl_tensor *x, double p, const vl_dropout_rng *rng, const vl_exec *ex,
                     vl_tensor **y) {
  vl_device dev = x->storage->device;
  vl_tensor *xc = NULL, *r = NULL;
  VL_TRY(vl_contiguous(x, &xc));
  vl_status s = vl_tensor_empty(x->ndim, x->size, x->dtype, dev, &r);
  int64_t numel = vl_tensor_numel(x);
  if (s == VL_OK && numel > 0) {
    vl_dropout_args a = {.dtype = x->dtype, .in = vl_tensor_data(xc), .out = vl_tensor_data(r), .numel = numel,
                         .seed = rng->seed, .offset = rng->offset, .base = rng->base,
                         /* keep = bernoulli(1 - p)'s draw, 1 - p as the composed Lua wrote it */
                         .threshold = vl_philox_bernoulli_threshold(1.0 - p), .scale = 1.0 / (1.0 - p), .ex = *ex};
    s = vl_backend_of(dev)->fused->dropout(&a);
  }
  vl_tensor_release(xc);
  if (s != VL_OK) {
    vl_tensor_release(r);
    return s;
  }
  *y = r;
  return VL_OK;
}

vl_status vl_dropout(vl_tensor *x, double p, vl_tensor **y, vl_dropout_rng *rng) {
  const char *op = "dropout";
  VL_TRY(check_dropout(op, x, p));
  vl_exec ex;
  VL_TRY(vl_exec_of(op, x->storage->device, &ex));
  int64_t numel = vl_tensor_numel(x);
  vl_context *ctx = vl_ctx();
  /* As rand_fill: an empty draw reserves nothing; under capture the counters are relative to the
   * replay's base and the generator advances at each replay, not now. */
  uint64_t groups = numel > 0 ? vl_philox_groups(0, numel) : 0, rel = 0;
  const uint64_t *base =
      groups > 0 && vl_graph_capturing() ? vl_graph_rng_draw(x->storage->device.index, groups, &rel) : NULL;
  vl_dropout_rng d = {.seed = ctx->seed, .offset = base ? rel : ctx->rng_offset, .base = base};
  VL_TRY(run(op, x, p, &d, &ex, y));
  if (!base) ctx->rng_offset += groups;
  if (rng) *rng = d;
  return VL_OK;
}

vl_status vl_dropout_apply(vl_tensor *x, double p, const vl_dropout_rng *rng, vl_tensor **y) {
  const char *op = "dropout_backward";
  VL_TRY(check_dropout(op, x, p));
  if (!rng) return vl_fail(VL_EINVAL, "%s: the forward's draw is required", op);
  vl_exec ex;
  VL_TRY(vl_exec_of(op, x->storage->device, &ex));
  return run(op, x, p, rng, &ex, y);
}
