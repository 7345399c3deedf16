/* runtime/amp/autocast.h: autocast (AMP policy O1), decided at the op dispatch.
 *
 * While autocast is enabled (vl_autocast_enter), every recorded op (runtime/autograd vl_ag_*)
 * casts its float inputs by the class of the op before running:
 *   HALF     to the half dtype (f16 or bf16): matmul, mm, bmm, addmm, linear, conv2d,
 *            scaled_dot_product_attention (q, k, v; its mask is read as f32);
 *   FP32     f16/bf16 inputs to f32: softmax, log_softmax, layer_norm, the reductions sum,
 *            prod, mean, var, norm, and exp, log, rsqrt, reciprocal, pow;
 *   PROMOTE  mixed float inputs to the widest of them (add, sub, mul, div, maximum, minimum,
 *            where), as PyTorch;
 *   KEEP     as given: batch_norm (its kernels keep the statistics in f32 for half inputs, as
 *            cuDNN's), and what set_op(name, 'none') makes of an op.
 * f64 and integer inputs are never cast by HALF or FP32 (PyTorch leaves f64 alone too). Ops not
 * in the table (views, relu, gather, ...) run in whatever dtype they receive. The casts are the
 * recorded vl_ag_to, so gradients flow back to the inputs in their own dtypes. The raw ops
 * (runtime/ops, runtime/nn) know nothing of this.
 *
 * The weight cache: inside a region, a leaf that requires grad (a parameter) is cast once per
 * target dtype and the cast reused by later ops (recast when its storage or storage version
 * changes: an in-place update), while grad mode is on; the cache is dropped when the outermost
 * region is left. The state (vl_autocast below) is reached from the context (vl_ctx()->autocast). */
#ifndef VL_AMP_AUTOCAST_H
#define VL_AMP_AUTOCAST_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/context.h"
#include "runtime/core/tensor.h"
#include "runtime/backend/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vl_autocast_class {
  VL_AC_KEEP = 0,
  VL_AC_HALF,
  VL_AC_FP32,
  VL_AC_PROMOTE,
  VL_AC_NCLASSES
} vl_autocast_class;

/* The ops autocast knows (the names of vl_autocast_op_name). VL_AC_NONE: not autocast. */
typedef enum vl_autocast_op {
  VL_AC_NONE = -1,
  VL_AC_MATMUL = 0,
  VL_AC_MM,
  VL_AC_BMM,
  VL_AC_ADDMM,
  VL_AC_LINEAR,
  VL_AC_CONV2D,
  VL_AC_SOFTMAX,
  VL_AC_LOG_SOFTMAX,
  VL_AC_LAYER_NORM,
  VL_AC_BATCH_NORM,
  VL_AC_SUM,
  VL_AC_PROD,
  VL_AC_MEAN,
  VL_AC_VAR,
  VL_AC_NORM,
  VL_AC_EXP,
  VL_AC_LOG,
  VL_AC_RSQRT,
  VL_AC_RECIPROCAL,
  VL_AC_POW,
  VL_AC_ADD,
  VL_AC_SUB,
  VL_AC_MUL,
  VL_AC_DIV,
  VL_AC_MAXIMUM,
  VL_AC_MINIMUM,
  VL_AC_WHERE,
  VL_AC_ATTENTION,
  VL_AC_EXPM1,
  VL_AC_ERFINV,
  VL_AC_ATAN2,
  VL_AC_CUMSUM,
  VL_AC_CUMPROD,
  VL_AC_NOPS
} vl_autocast_op;

/* The O1 state. The context holds it by pointer (vl_ctx()->autocast), as core knows no
 * concern's layout; only autocast.c writes it (one static instance, F16 by default, that the
 * context points at from the first call that needs it). Before that the pointer is NULL, which
 * every reader takes as "off". */
#define VL_AUTOCAST_MAX_OPS 48
typedef struct vl_autocast {
  bool enabled;                              /* ops cast their inputs per their class */
  vl_dtype dtype;                            /* the half dtype: VL_F16 (default) or VL_BF16 */
  int depth;                                 /* regions entered (enabled or not) and not yet left */
  uint8_t op_class[VL_AUTOCAST_MAX_OPS];     /* 0: the op's default class, else class + 1 (set_op) */
  void *cache;                               /* the weight cast cache, owned by autocast.c */
  int cache_n, cache_cap;
  uint64_t casts, cache_hits;                /* casts made by autocast, casts reused from the cache */
} vl_autocast;

/* What a region's exit restores. */
typedef struct vl_autocast_prev {
  bool enabled;
  vl_dtype dtype;
} vl_autocast_prev;

/* Enters a region: autocast on (enabled) or off inside it, casting to `dtype` (VL_F16 or
 * VL_BF16; VL_EINVAL otherwise, nothing changed). *prev receives what vl_autocast_exit restores. */
vl_status vl_autocast_enter(bool enabled, vl_dtype dtype, vl_autocast_prev *prev);
/* Leaves the region entered with *prev; leaving the outermost one drops the weight cache.
 * VL_EINVAL when no region is open. */
vl_status vl_autocast_exit(const vl_autocast_prev *prev);
bool vl_autocast_enabled(void);
vl_dtype vl_autocast_dtype(void);
int vl_autocast_depth(void);

/* ---- the per-op table ---- */
const char *vl_autocast_op_name(vl_autocast_op op);             /* "matmul", ...; NULL past the end */
vl_status vl_autocast_op_parse(const char *name, vl_autocast_op *op);  /* VL_EINVAL naming the known ops */
const char *vl_autocast_class_name(vl_autocast_class c);         /* "none", "half", "fp32", "promote" */
vl_status vl_autocast_class_parse(const char *name, vl_autocast_class *c);
vl_autocast_class vl_autocast_op_class(vl_autocast_op op);       /* the current class */
vl_autocast_class vl_autocast_op_default(vl_autocast_op op);     /* the built-in class */
vl_status vl_autocast_set_op(vl_autocast_op op, vl_autocast_class c);
void vl_autocast_reset_ops(void);                                 /* every op back to its default */

/* The table entries of the raw op enums (VL_AC_NONE for ops autocast leaves alone). */
vl_autocast_op vl_autocast_op_of_unary(vl_unary_op op);
vl_autocast_op vl_autocast_op_of_binary(vl_binary_op op);
vl_autocast_op vl_autocast_op_of_reduce(vl_reduce_op op);

/* ---- counters (tests, profiling) ---- */
typedef struct vl_autocast_stats {
  uint64_t casts;      /* casts autocast made (weight casts counted once per region) */
  uint64_t cache_hits; /* casts reused from the weight cache */
  int cached;          /* entries in the cache now */
} vl_autocast_stats;
void vl_autocast_get_stats(vl_autocast_stats *st);
void vl_autocast_reset_stats(void);

/* ---- for recorded ops ---- */
/* Whether op would cast any of in[0..n) now (NULL entries are skipped). */
bool vl_autocast_wants_slow(vl_autocast_op op, int n, vl_tensor *const *in);
static inline bool vl_autocast_wants(vl_autocast_op op, int n, vl_tensor *const *in) {
  const vl_autocast *ac = vl_ctx()->autocast;
  return ac && ac->enabled && op != VL_AC_NONE && vl_autocast_wants_slow(op, n, in);
}
/* casted[i] = in[i] cast as op's class says (a new reference; in[i] itself retained when it
 * stays; NULL for NULL). On failure nothing is left to release. */
vl_status vl_autocast_inputs(vl_autocast_op op, int n, vl_tensor *const *in, vl_tensor **casted);
/* Releases casted[0..n) and returns s: the end of an autocast re-entry. */
vl_status vl_autocast_done(int n, vl_tensor **casted, vl_status s);

/* The one line at the top of a recorded op: when autocast would cast any of the inputs
 * (listed after `call`), runs `call` (normally the op itself, reading vl_ac[i] for input i) with
 * the cast inputs and returns its status. The re-entered op finds its inputs already in their
 * class's dtype, so it runs on. Costs one branch when autocast is off. */
#define VL_AUTOCAST(op, call, ...)                                                  \
  do {                                                                              \
    vl_tensor *const vl_ac_in_[] = {__VA_ARGS__};                                   \
    enum { vl_ac_n_ = (int)(sizeof vl_ac_in_ / sizeof vl_ac_in_[0]) };              \
    if (vl_autocast_wants((op), vl_ac_n_, vl_ac_in_)) {                             \
      vl_tensor *vl_ac[vl_ac_n_];                                                   \
      VL_TRY(vl_autocast_inputs((op), vl_ac_n_, vl_ac_in_, vl_ac));                 \
      return vl_autocast_done(vl_ac_n_, vl_ac, (call));                             \
    }                                                                               \
  } while (0)

#ifdef __cplusplus
}
#endif
#endif
