/* runtime/amp/autocast.c: the autocast regions, the per-op table, the input casts and the
 * weight cast cache (runtime/amp/autocast.h). */
#include "runtime/amp/autocast.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/autograd/ops.h"

/* Static, so that its defaults hold without any init and nothing can fail; the context points at
 * it from the first use, so that all state stays reachable from vl_ctx(). */
static vl_autocast g_autocast = {.dtype = VL_F16};

static vl_autocast *ac_state(void) {
  vl_context *c = vl_ctx();
  if (!c->autocast) c->autocast = &g_autocast;
  return c->autocast;
}

/* ---- the table ---- */

static const struct {
  const char *name;
  vl_autocast_class cls;
} k_ops[VL_AC_NOPS] = {
    [VL_AC_MATMUL] = {"matmul", VL_AC_HALF},
    [VL_AC_MM] = {"mm", VL_AC_HALF},
    [VL_AC_BMM] = {"bmm", VL_AC_HALF},
    [VL_AC_ADDMM] = {"addmm", VL_AC_HALF},
    [VL_AC_LINEAR] = {"linear", VL_AC_HALF},
    [VL_AC_CONV2D] = {"conv2d", VL_AC_HALF},
    [VL_AC_SOFTMAX] = {"softmax", VL_AC_FP32},
    [VL_AC_LOG_SOFTMAX] = {"log_softmax", VL_AC_FP32},
    [VL_AC_LAYER_NORM] = {"layer_norm", VL_AC_FP32},
    /* As PyTorch's cuDNN batch norm: half activations stay half; the kernels compute the
     * statistics with f32 parameters and running statistics whatever x's dtype (runtime/nn/norm.c),
     * so casting x to f32 would only double the activations of every conv-bn-relu block. */
    [VL_AC_BATCH_NORM] = {"batch_norm", VL_AC_KEEP},
    [VL_AC_SUM] = {"sum", VL_AC_FP32},
    [VL_AC_PROD] = {"prod", VL_AC_FP32},
    [VL_AC_MEAN] = {"mean", VL_AC_FP32},
    [VL_AC_VAR] = {"var", VL_AC_FP32},
    [VL_AC_NORM] = {"norm", VL_AC_FP32},
    [VL_AC_EXP] = {"exp", VL_AC_FP32},
    [VL_AC_LOG] = {"log", VL_AC_FP32},
    [VL_AC_RSQRT] = {"rsqrt", VL_AC_FP32},
    [VL_AC_RECIPROCAL] = {"reciprocal", VL_AC_FP32},
    [VL_AC_POW] = {"pow", VL_AC_FP32},
    [VL_AC_ADD] = {"add", VL_AC_PROMOTE},
    [VL_AC_SUB] = {"sub", VL_AC_PROMOTE},
    [VL_AC_MUL] = {"mul", VL_AC_PROMOTE},
    [VL_AC_DIV] = {"div", VL_AC_PROMOTE},
    [VL_AC_MAXIMUM] = {"maximum", VL_AC_PROMOTE},
    [VL_AC_MINIMUM] = {"minimum", VL_AC_PROMOTE},
    [VL_AC_WHERE] = {"where", VL_AC_PROMOTE},
    [VL_AC_ATTENTION] = {"scaled_dot_product_attention", VL_AC_HALF},
    [VL_AC_EXPM1] = {"expm1", VL_AC_FP32},   /* PyTorch's fp32 list */
    [VL_AC_ERFINV] = {"erfinv", VL_AC_FP32}, /* PyTorch's fp32 list */
    [VL_AC_ATAN2] = {"atan2", VL_AC_PROMOTE}, /* PyTorch's promote list */
    [VL_AC_CUMSUM] = {"cumsum", VL_AC_FP32},   /* PyTorch's fp32 list */
    [VL_AC_CUMPROD] = {"cumprod", VL_AC_FP32}, /* PyTorch's fp32 list */
};
_Static_assert(VL_AC_NOPS <= VL_AUTOCAST_MAX_OPS, "vl_autocast.op_class is too small for the op table");

static const char *const k_classes[VL_AC_NCLASSES] = {"none", "half", "fp32", "promote"};

const char *vl_autocast_op_name(vl_autocast_op op) {
  return op >= 0 && op < VL_AC_NOPS ? k_ops[op].name : NULL;
}

vl_status vl_autocast_op_parse(const char *name, vl_autocast_op *op) {
  for (int i = 0; i < VL_AC_NOPS; i++)
    if (strcmp(k_ops[i].name, name) == 0) {
      *op = (vl_autocast_op)i;
      return VL_OK;
    }
  char known[512];
  size_t len = 0;
  known[0] = 0;
  for (int i = 0; i < VL_AC_NOPS && len < sizeof known; i++)
    len += (size_t)snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", k_ops[i].name);
  return vl_fail(VL_EINVAL, "autocast: unknown op '%s' (known: %s)", name, known);
}

const char *vl_autocast_class_name(vl_autocast_class c) {
  return c >= 0 && c < VL_AC_NCLASSES ? k_classes[c] : NULL;
}

vl_status vl_autocast_class_parse(const char *name, vl_autocast_class *c) {
  for (int i = 0; i < VL_AC_NCLASSES; i++)
    if (strcmp(k_classes[i], name) == 0) {
      *c = (vl_autocast_class)i;
      return VL_OK;
    }
  return vl_fail(VL_EINVAL, "autocast: unknown precision '%s' (expected 'half', 'fp32', 'promote' or 'none')", name);
}

vl_autocast_class vl_autocast_op_default(vl_autocast_op op) {
  return op >= 0 && op < VL_AC_NOPS ? k_ops[op].cls : VL_AC_KEEP;
}

vl_autocast_class vl_autocast_op_class(vl_autocast_op op) {
  if (op < 0 || op >= VL_AC_NOPS) return VL_AC_KEEP;
  uint8_t v = ac_state()->op_class[op];
  return v ? (vl_autocast_class)(v - 1) : k_ops[op].cls;
}

vl_status vl_autocast_set_op(vl_autocast_op op, vl_autocast_class c) {
  if (op < 0 || op >= VL_AC_NOPS) return vl_fail(VL_EINVAL, "autocast: op index %d out of range", (int)op);
  if (c < 0 || c >= VL_AC_NCLASSES) return vl_fail(VL_EINVAL, "autocast: class %d out of range", (int)c);
  ac_state()->op_class[op] = (uint8_t)(c + 1);
  return VL_OK;
}

void vl_autocast_reset_ops(void) { memset(ac_state()->op_class, 0, sizeof ac_state()->op_class); }

/* The autocast column of the op list (runtime/backend/op_list.h); comparisons give bool: nothing
 * to gain. */
vl_autocast_op vl_autocast_op_of_unary(vl_unary_op op) {
  static const signed char m[] = {
#define VL_X(E, name, node, dom, saves, ac, ...) VL_AC_##ac,
      VL_UNARY_OPS(VL_X)
#undef VL_X
  };
  return (unsigned)op < VL_NUNARY ? (vl_autocast_op)m[op] : VL_AC_NONE;
}

vl_autocast_op vl_autocast_op_of_binary(vl_binary_op op) {
  static const signed char m[] = {
#define VL_X(E, name, node, kind, ac, ...) VL_AC_##ac,
      VL_BINARY_OPS(VL_X)
#undef VL_X
  };
  return (unsigned)op < VL_NBINARY ? (vl_autocast_op)m[op] : VL_AC_NONE;
}

vl_autocast_op vl_autocast_op_of_reduce(vl_reduce_op op) {
  switch (op) {
  case VL_RED_SUM: return VL_AC_SUM;
  case VL_RED_PROD: return VL_AC_PROD;
  case VL_RED_MEAN: return VL_AC_MEAN;
  case VL_RED_VAR: return VL_AC_VAR;
  case VL_RED_NORM: return VL_AC_NORM;
  default: return VL_AC_NONE; /* max/min are exact in any dtype */
  }
}

/* ---- regions ---- */

typedef struct cache_entry {
  vl_tensor *src;          /* the parameter (a reference: its address stays a valid key) */
  vl_dtype dtype;          /* the cast's dtype */
  vl_storage *storage;     /* src's storage and its version at the cast */
  uint32_t version;
  vl_tensor *cast;         /* the recorded cast (a reference) */
} cache_entry;

static void cache_clear(vl_autocast *ac) {
  cache_entry *e = ac->cache;
  for (int i = 0; i < ac->cache_n; i++) {
    vl_tensor_release(e[i].cast);
    vl_tensor_release(e[i].src);
  }
  free(ac->cache);
  ac->cache = NULL;
  ac->cache_n = ac->cache_cap = 0;
}

vl_status vl_autocast_enter(bool enabled, vl_dtype dtype, vl_autocast_prev *prev) {
  if (dtype != VL_F16 && dtype != VL_BF16)
    return vl_fail(VL_EINVAL, "autocast: dtype must be f16 or bf16 (got %s)", vl_dtype_name(dtype));
  vl_autocast *ac = ac_state();
  prev->enabled = ac->enabled;
  prev->dtype = ac->dtype;
  ac->enabled = enabled;
  ac->dtype = dtype;
  ac->depth++;
  return VL_OK;
}

vl_status vl_autocast_exit(const vl_autocast_prev *prev) {
  vl_autocast *ac = ac_state();
  if (ac->depth <= 0) return vl_fail(VL_EINVAL, "autocast: exit without a matching enter");
  ac->enabled = prev->enabled;
  ac->dtype = prev->dtype;
  if (--ac->depth == 0) cache_clear(ac);
  return VL_OK;
}

bool vl_autocast_enabled(void) { return ac_state()->enabled; }
vl_dtype vl_autocast_dtype(void) { return ac_state()->dtype; }
int vl_autocast_depth(void) { return ac_state()->depth; }

void vl_autocast_get_stats(vl_autocast_stats *st) {
  const vl_autocast *ac = ac_state();
  st->casts = ac->casts;
  st->cache_hits = ac->cache_hits;
  st->cached = ac->cache_n;
}

void vl_autocast_reset_stats(void) { ac_state()->casts = ac_state()->cache_hits = 0; }

/* ---- the casts ---- */

static bool is_half(vl_dtype dt) { return dt == VL_F16 || dt == VL_BF16; }

/* The dtype t is cast to under class c (t's own when it stays); `widest` is PROMOTE's target. */
static vl_dtype target_of(const vl_autocast *ac, vl_autocast_class c, vl_dtype widest, const vl_tensor *t) {
  vl_dtype dt = t->dtype;
  switch (c) {
  case VL_AC_HALF: return dt == VL_F32 || is_half(dt) ? ac->dtype : dt;
  case VL_AC_FP32: return is_half(dt) ? VL_F32 : dt;
  case VL_AC_PROMOTE: return vl_dtype_is_float(dt) ? widest : dt;
  default: return dt;
  }
}

/* The widest float dtype among in[0..n) (vl_dtype_promote: f16 with bf16 gives f32). */
static vl_dtype widest_float(int n, vl_tensor *const *in) {
  bool any = false;
  vl_dtype w = VL_F32;
  for (int i = 0; i < n; i++) {
    if (!in[i] || !vl_dtype_is_float(in[i]->dtype)) continue;
    w = any ? vl_dtype_promote(w, in[i]->dtype) : in[i]->dtype;
    any = true;
  }
  return w;
}

bool vl_autocast_wants_slow(vl_autocast_op op, int n, vl_tensor *const *in) {
  const vl_autocast *ac = ac_state();
  vl_autocast_class c = vl_autocast_op_class(op);
  if (c == VL_AC_KEEP) return false;
  vl_dtype widest = c == VL_AC_PROMOTE ? widest_float(n, in) : VL_F32;
  for (int i = 0; i < n; i++)
    if (in[i] && target_of(ac, c, widest, in[i]) != in[i]->dtype) return true;
  return false;
}

/* A parameter's cast: made once per region and target dtype while grad mode is on (a cast made
 * under no_grad records nothing and must not be reused where gradients are wanted). */
static bool cacheable(const vl_autocast *ac, vl_tensor *t) {
  return ac->depth > 0 && vl_grad_enabled() && vl_requires_grad(t) && vl_is_leaf(t);
}

static vl_status cast_one(vl_autocast *ac, vl_tensor *t, vl_dtype dt, vl_tensor **out) {
  cache_entry *slot = NULL;
  bool cache = cacheable(ac, t);
  if (cache) {
    cache_entry *e = ac->cache;
    for (int i = 0; i < ac->cache_n; i++)
      if (e[i].src == t && e[i].dtype == dt) {
        if (e[i].storage == t->storage && e[i].version == t->storage->version) {
          ac->cache_hits++;
          *out = vl_tensor_retain(e[i].cast);
          return VL_OK;
        }
        slot = &e[i]; /* written in place (or set_) since: cast anew into this entry */
        break;
      }
    if (!slot && ac->cache_n == ac->cache_cap) {
      int cap = ac->cache_cap ? 2 * ac->cache_cap : 16;
      cache_entry *grown = realloc(ac->cache, (size_t)cap * sizeof *grown);
      if (!grown) return vl_fail(VL_EOOM, "autocast: out of host memory for the weight cast cache");
      ac->cache = grown;
      ac->cache_cap = cap;
    }
  }
  vl_tensor *r = NULL;
  VL_TRY(vl_ag_to(t, dt, t->storage->device, &r));
  ac->casts++;
  if (cache) {
    if (slot) {
      vl_tensor_release(slot->cast);
    } else {
      slot = &((cache_entry *)ac->cache)[ac->cache_n++];
      slot->src = vl_tensor_retain(t);
      slot->dtype = dt;
    }
    slot->storage = t->storage;
    slot->version = t->storage->version;
    slot->cast = vl_tensor_retain(r);
  }
  *out = r;
  return VL_OK;
}

vl_status vl_autocast_inputs(vl_autocast_op op, int n, vl_tensor *const *in, vl_tensor **casted) {
  vl_autocast *ac = ac_state();
  vl_autocast_class c = ac->enabled ? vl_autocast_op_class(op) : VL_AC_KEEP;
  vl_dtype widest = c == VL_AC_PROMOTE ? widest_float(n, in) : VL_F32;
  for (int i = 0; i < n; i++) {
    casted[i] = NULL;
    if (!in[i]) continue;
    vl_dtype dt = target_of(ac, c, widest, in[i]);
    vl_status s = VL_OK;
    if (dt == in[i]->dtype)
      casted[i] = vl_tensor_retain(in[i]);
    else
      s = cast_one(ac, in[i], dt, &casted[i]);
    if (s != VL_OK) {
      vl_autocast_done(i, casted, s);
      return s;
    }
  }
  return VL_OK;
}

vl_status vl_autocast_done(int n, vl_tensor **casted, vl_status s) {
  for (int i = 0; i < n; i++) {
    vl_tensor_release(casted[i]);
    casted[i] = NULL;
  }
  return s;
}
