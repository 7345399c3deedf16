/* bindings/l_ops.c: elementwise math, operators, reductions, linear algebra and indexing.
 * Every op is a thin translation to runtime/ops/ops.h: 1-based dims to 0-based, numbers to the
 * scalar variants, and outputs into closed userdata pushed before the runtime call. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/core/context.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

static int self_or_error(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_settop(L, 1);
  return 1;
}

/* ---- binary ---- */

/* The Lua methods of the op list (runtime/backend/op_list.h, the lua column). */
static const struct {
  const char *name;
  vl_binary_op op;
  bool lua;
} binops[] = {
#define VL_X(E, name, node, kind, ac, lua, ...) {name, VL_BIN_##E, lua},
    VL_BINARY_OPS(VL_X)
#undef VL_X
};

static bool has_alpha(vl_binary_op op) { return op == VL_BIN_ADD || op == VL_BIN_SUB; }

static int b_binary(lua_State *L) {
  vl_binary_op op = (vl_binary_op)lua_tointeger(L, lua_upvalueindex(1));
  vl_tensor *a = vl_lua_checktensor(L, 1);
  double alpha = has_alpha(op) ? luaL_optnumber(L, 3, 1.0) : 1.0;
  if (l_isscalar(L, 2)) {
    double s = l_toscalar(L, 2) * alpha;
    vl_tensor **slot = l_slot(L);
    return l_done(L, vl_ag_binary_scalar(op, a, s, false, slot));
  }
  vl_tensor *b = vl_lua_checktensor(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_binary(op, a, b, alpha, slot));
}

static int b_binary_(lua_State *L) {
  vl_binary_op op = (vl_binary_op)lua_tointeger(L, lua_upvalueindex(1));
  vl_tensor *a = vl_lua_checktensor(L, 1);
  double alpha = has_alpha(op) ? luaL_optnumber(L, 3, 1.0) : 1.0;
  if (l_isscalar(L, 2)) return self_or_error(L, vl_ag_binary_scalar_(op, a, l_toscalar(L, 2) * alpha));
  return self_or_error(L, vl_ag_binary_(op, a, vl_lua_checktensor(L, 2), alpha));
}

/* Operators: a number may stand on either side. */
static int b_operator(lua_State *L) {
  vl_binary_op op = (vl_binary_op)lua_tointeger(L, lua_upvalueindex(1));
  if (l_isscalar(L, 1)) {
    vl_tensor *b = vl_lua_checktensor(L, 2);
    double s = l_toscalar(L, 1);
    vl_tensor **slot = l_slot(L);
    return l_done(L, vl_ag_binary_scalar(op, b, s, true, slot));
  }
  vl_tensor *a = vl_lua_checktensor(L, 1);
  if (l_isscalar(L, 2)) {
    double s = l_toscalar(L, 2);
    vl_tensor **slot = l_slot(L);
    return l_done(L, vl_ag_binary_scalar(op, a, s, false, slot));
  }
  vl_tensor *b = vl_lua_checktensor(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_binary(op, a, b, 1.0, slot));
}

/* ---- unary ---- */

static const struct {
  const char *name;
  vl_unary_op op;
  bool lua;
} unops[] = {
#define VL_X(E, name, node, dom, saves, ac, lua, ...) {name, VL_UN_##E, lua},
    VL_UNARY_OPS(VL_X)
#undef VL_X
};

static int u_unary(lua_State *L) {
  vl_unary_op op = (vl_unary_op)lua_tointeger(L, lua_upvalueindex(1));
  vl_tensor *a = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_unary(op, a, slot));
}

static int u_unary_(lua_State *L) {
  vl_unary_op op = (vl_unary_op)lua_tointeger(L, lua_upvalueindex(1));
  vl_tensor *a = vl_lua_checktensor(L, 1);
  return self_or_error(L, vl_ag_unary_(op, a));
}

static int u_unm(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_unary(VL_UN_NEG, a, slot));
}

static vl_unary_op gelu_op(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return VL_UN_GELU;
  luaL_checktype(L, idx, LUA_TTABLE);
  static const char *const known[] = {"approximate", NULL};
  l_check_opts(L, idx, "gelu", known);
  lua_getfield(L, idx, "approximate");
  const char *a = luaL_optstring(L, -1, "none");
  lua_pop(L, 1);
  if (strcmp(a, "tanh") == 0) return VL_UN_GELU_TANH;
  if (strcmp(a, "none") == 0) return VL_UN_GELU;
  return (vl_unary_op)luaL_error(L, "gelu: approximate must be 'none' or 'tanh', got '%s'", a);
}

static int t_gelu(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  vl_unary_op op = gelu_op(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_unary(op, a, slot));
}
static int t_gelu_(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  return self_or_error(L, vl_ag_unary_(gelu_op(L, 2), a));
}

static double opt_bound(lua_State *L, int idx, double none) {
  return lua_isnoneornil(L, idx) ? none : (double)luaL_checknumber(L, idx);
}
/* clamp(lo, hi): each a number, a tensor or nil (no bound). Numbers only: the unary op; a tensor
 * bound: the composite (runtime/autograd/ops.h vl_ag_clamp_bound), lower bound first. */
static bool clamp_has_tensor(lua_State *L) {
  for (int i = 2; i <= 3; i++)
    if (!lua_isnoneornil(L, i) && !lua_isnumber(L, i)) {
      if (!vl_lua_testtensor(L, i))
        luaL_error(L, "clamp: %s must be a number, a tensor or nil, got a %s", i == 2 ? "lo" : "hi",
                   luaL_typename(L, i));
      return true;
    }
  return false;
}
static int clamp_tensor(lua_State *L, vl_tensor *a) {
  lua_settop(L, 3);
  vl_tensor **mid = l_slot(L); /* 4 */
  vl_status s;
  vl_tensor *lo = vl_lua_testtensor(L, 2);
  if (lo) s = vl_ag_clamp_bound(a, lo, false, mid);
  else s = vl_ag_clamp(a, opt_bound(L, 2, -INFINITY), INFINITY, mid);
  if (s != VL_OK) return vl_lua_error(L, s);
  vl_tensor *hi = vl_lua_testtensor(L, 3);
  vl_tensor **slot = l_slot(L);
  if (hi) s = vl_ag_clamp_bound(*mid, hi, true, slot);
  else s = vl_ag_clamp(*mid, -INFINITY, opt_bound(L, 3, INFINITY), slot);
  return l_done(L, s);
}
static int t_clamp(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  if (clamp_has_tensor(L)) return clamp_tensor(L, a);
  double lo = opt_bound(L, 2, -INFINITY), hi = opt_bound(L, 3, INFINITY);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_clamp(a, lo, hi, slot));
}
static int t_clamp_(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  if (clamp_has_tensor(L)) { /* computed, then copied into a (the copy records the gradient) */
    clamp_tensor(L, a);
    vl_tensor *r = vl_lua_checktensor(L, -1);
    return self_or_error(L, vl_ag_copy_(a, r));
  }
  return self_or_error(L, vl_ag_clamp_(a, opt_bound(L, 2, -INFINITY), opt_bound(L, 3, INFINITY)));
}

/* lerp(b, weight): a + weight (b - a), weight a number or a tensor. */
static int t_lerp(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1), *b = vl_lua_checktensor(L, 2);
  vl_tensor *w = NULL;
  double ws = 0;
  if (l_isscalar(L, 3)) ws = l_toscalar(L, 3);
  else if (!(w = vl_lua_testtensor(L, 3)))
    return luaL_error(L, "lerp: weight must be a number or a tensor, got a %s", luaL_typename(L, 3));
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_lerp(a, b, w, ws, slot));
}

/* nan_to_num([{nan =, posinf =, neginf =}]): defaults 0, the dtype's largest and lowest finite
 * values; other keys are refused. */
static int t_nan_to_num(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  double v[3] = {0, NAN, NAN};
  static const char *const keys[] = {"nan", "posinf", "neginf", NULL};
  l_check_opts(L, 2, "nan_to_num", keys);
  for (int k = 0; k < 3 && lua_istable(L, 2); k++) {
    if (lua_getfield(L, 2, keys[k]) != LUA_TNIL) {
      if (!lua_isnumber(L, -1))
        return luaL_error(L, "nan_to_num: option %s must be a number, got a %s", keys[k], luaL_typename(L, -1));
      v[k] = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
  }
  lua_settop(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_nan_to_num(a, v[0], v[1], v[2], slot));
}

static int t_masked_fill(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1), *mask = vl_lua_checktensor(L, 2);
  double v = l_toscalar(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_masked_fill(a, mask, v, slot));
}
static int t_masked_fill_(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1), *mask = vl_lua_checktensor(L, 2);
  return self_or_error(L, vl_ag_masked_fill_(a, mask, l_toscalar(L, 3)));
}

/* ---- reductions ---- */

static int opt_dims(lua_State *L, int arg, int dims[VL_MAX_DIMS]) {
  return lua_isnoneornil(L, arg) ? 0 : l_checkdimlist(L, arg, dims, false);
}

static int reduce_simple(lua_State *L, vl_reduce_op op) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int dims[VL_MAX_DIMS];
  int n = opt_dims(L, 2, dims);
  bool keep = lua_toboolean(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_reduce(op, a, n, dims, keep, 0.0, slot, NULL));
}
static int t_sum(lua_State *L) { return reduce_simple(L, VL_RED_SUM); }
static int t_prod(lua_State *L) { return reduce_simple(L, VL_RED_PROD); }
static int t_mean(lua_State *L) { return reduce_simple(L, VL_RED_MEAN); }

/* var/std([dims[, keepdim]], {correction=}): the options table is the last argument when it is
 * not a list of dims. */
static int var_std(lua_State *L, bool std) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int top = lua_gettop(L);
  double correction = 1.0;
  if (top >= 2 && lua_istable(L, top) && lua_rawlen(L, top) == 0) {
    static const char *const known[] = {"correction", NULL};
    l_check_opts(L, top, std ? "std" : "var", known);
    lua_getfield(L, top, "correction");
    correction = luaL_optnumber(L, -1, 1.0);
    lua_pop(L, 1);
    lua_settop(L, --top);
  }
  int dims[VL_MAX_DIMS];
  int n = opt_dims(L, 2, dims);
  bool keep = lua_toboolean(L, 3);
  lua_settop(L, 1);
  vl_tensor **slot = l_slot(L);
  vl_status s = vl_ag_reduce(VL_RED_VAR, a, n, dims, keep, correction, slot, NULL);
  if (s == VL_OK && std) s = vl_ag_unary_(VL_UN_SQRT, *slot);
  return l_done(L, s);
}
static int t_var(lua_State *L) { return var_std(L, false); }
static int t_std(lua_State *L) { return var_std(L, true); }

static int t_norm(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  double p = luaL_optnumber(L, 2, 2.0);
  int dims[VL_MAX_DIMS];
  int n = opt_dims(L, 3, dims);
  bool keep = lua_toboolean(L, 4);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_reduce(VL_RED_NORM, a, n, dims, keep, p, slot, NULL));
}

/* max/min without dim: a 0-dim tensor; with dim: values and 0-based i64 indices. */
static int max_min(lua_State *L, vl_reduce_op op) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  if (lua_isnoneornil(L, 2)) {
    vl_tensor **slot = l_slot(L);
    return l_done(L, vl_ag_reduce(op, a, 0, NULL, false, 0.0, slot, NULL));
  }
  int d = l_checkdim(L, 2);
  bool keep = lua_toboolean(L, 3);
  vl_tensor **vals = l_slot(L);
  vl_tensor **idx = l_slot(L);
  return l_done2(L, vl_ag_reduce(op, a, 1, &d, keep, 0.0, vals, idx));
}
static int t_max(lua_State *L) { return max_min(L, VL_RED_MAX); }
static int t_min(lua_State *L) { return max_min(L, VL_RED_MIN); }

static int arg_max_min(lua_State *L, bool max) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = lua_isnoneornil(L, 2) ? VL_DIM_ALL : l_checkdim(L, 2);
  bool keep = lua_toboolean(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, max ? vl_argmax(a, d, keep, slot) : vl_argmin(a, d, keep, slot));
}
static int t_argmax(lua_State *L) { return arg_max_min(L, true); }
static int t_argmin(lua_State *L) { return arg_max_min(L, false); }

static int softmax(lua_State *L, bool log) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_softmax(a, d, log, slot));
}
static int t_softmax(lua_State *L) { return softmax(L, false); }
static int t_log_softmax(lua_State *L) { return softmax(L, true); }

/* ---- linear algebra ---- */

static int t_matmul(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1), *b = vl_lua_checktensor(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_matmul(a, b, slot));
}

static int t_mm(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1), *b = vl_lua_checktensor(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_mm(a, b, slot));
}

static int t_bmm(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1), *b = vl_lua_checktensor(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_bmm(a, b, slot));
}

static int m_addmm(lua_State *L) {
  vl_tensor *bias = vl_lua_checktensor(L, 1);
  vl_tensor *a = vl_lua_checktensor(L, 2), *b = vl_lua_checktensor(L, 3);
  double beta = 1.0, alpha = 1.0;
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    static const char *const known[] = {"beta", "alpha", NULL};
    l_check_opts(L, 4, "addmm", known);
    lua_getfield(L, 4, "beta");
    beta = luaL_optnumber(L, -1, 1.0);
    lua_getfield(L, 4, "alpha");
    alpha = luaL_optnumber(L, -1, 1.0);
    lua_pop(L, 2);
  }
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_addmm(bias, a, b, beta, alpha, slot));
}

static int m_set_allow_tf32(lua_State *L) {
  luaL_checkany(L, 1);
  vl_set_allow_tf32(lua_toboolean(L, 1));
  return 0;
}
static int m_get_allow_tf32(lua_State *L) {
  lua_pushboolean(L, vl_get_allow_tf32());
  return 1;
}
/* set_deterministic(on) -> the previous setting (runtime/core/context.h says what it changes). */
static int m_set_deterministic(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  bool prev = vl_deterministic();
  vl_set_deterministic(lua_toboolean(L, 1));
  lua_pushboolean(L, prev);
  return 1;
}
static int m_get_deterministic(lua_State *L) {
  lua_pushboolean(L, vl_deterministic());
  return 1;
}
/* set_num_threads(n) -> the previous count: the CPU backend's threads (and OpenBLAS's); n <= 0
 * restores the default (runtime/core/context.h). get_num_threads() -> the count in use. */
static int m_set_num_threads(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1);
  luaL_argcheck(L, n <= 4096, 1, "at most 4096 threads");
  int prev = vl_num_threads();
  vl_set_num_threads((int)n);
  lua_pushinteger(L, prev);
  return 1;
}
static int m_get_num_threads(lua_State *L) {
  lua_pushinteger(L, vl_num_threads());
  return 1;
}
/* {bias_epilogue = n, bias_prefill = n}: how addmm biases were added (tests check the fused path). */
static int m_gemm_stats(lua_State *L) {
  uint64_t epi, pre;
  vl_gemm_bias_stats(&epi, &pre);
  lua_createtable(L, 0, 2);
  lua_pushinteger(L, (lua_Integer)epi);
  lua_setfield(L, -2, "bias_epilogue");
  lua_pushinteger(L, (lua_Integer)pre);
  lua_setfield(L, -2, "bias_prefill");
  return 1;
}

/* ---- indexing and joining ---- */

static int t_gather(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor *index = vl_lua_checktensor(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_gather(a, d, index, slot));
}

static int t_scatter_add(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor *index = vl_lua_checktensor(L, 3), *src = vl_lua_checktensor(L, 4);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_scatter_add(a, d, index, src, slot));
}

static int t_scatter_add_(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor *index = vl_lua_checktensor(L, 3), *src = vl_lua_checktensor(L, 4);
  return self_or_error(L, vl_ag_scatter_add_(a, d, index, src));
}

static int t_index_select(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor *index = vl_lua_checktensor(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_index_select(a, d, index, slot));
}

/* cat/stack(list, dim): the pointer array is a userdata so a type error midway leaks nothing. */
static int join(lua_State *L, bool stack) {
  luaL_checktype(L, 1, LUA_TTABLE);
  int d = l_optdim(L, 2, 0);
  int n = (int)lua_rawlen(L, 1);
  vl_tensor **ts = (vl_tensor **)lua_newuserdatauv(L, sizeof(vl_tensor *) * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 1, i + 1);
    ts[i] = vl_lua_testtensor(L, -1);
    if (!ts[i]) {
      if (luaL_testudata(L, -1, VL_LUA_TENSOR_MT)) return luaL_error(L, "tensor used after free");
      return luaL_error(L, "%s: element %d of the list is a %s, not a tensor", stack ? "stack" : "cat",
                        i + 1, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
  vl_tensor **slot = l_slot(L);
  return l_done(L, stack ? vl_ag_stack(n, ts, d, slot) : vl_ag_cat(n, ts, d, slot));
}
static int m_cat(lua_State *L) { return join(L, false); }
static int m_stack(lua_State *L) { return join(L, true); }

/* where(cond, a, b): a number becomes a 0-dim tensor of the other operand's dtype (f32, or i64
 * when both are Lua integers) on cond's device. */
static vl_tensor *where_operand(lua_State *L, int idx, int other, vl_tensor *cond) {
  if (!l_isscalar(L, idx)) return vl_lua_checktensor(L, idx);
  vl_tensor *o = vl_lua_testtensor(L, other);
  vl_dtype dt = o ? o->dtype
                  : (lua_isinteger(L, idx) && lua_isinteger(L, other)) ? VL_I64 : VL_F32;
  if (lua_type(L, idx) == LUA_TBOOLEAN && !o) dt = VL_BOOL;
  vl_tensor **slot = l_slot(L);
  l_done(L, vl_full(0, NULL, l_toscalar(L, idx), dt, cond->storage->device, slot));
  return *slot;
}

static int m_where(lua_State *L) {
  vl_tensor *cond = vl_lua_checktensor(L, 1);
  lua_settop(L, 3);
  vl_tensor *a = where_operand(L, 2, 3, cond);
  vl_tensor *b = where_operand(L, 3, 2, cond);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_where(cond, a, b, slot));
}

static const luaL_Reg op_methods[] = {
    {"gelu", t_gelu},
    {"gelu_", t_gelu_},
    {"clamp", t_clamp},
    {"clamp_", t_clamp_},
    {"lerp", t_lerp},
    {"nan_to_num", t_nan_to_num},
    {"masked_fill", t_masked_fill},
    {"masked_fill_", t_masked_fill_},
    {"sum", t_sum},
    {"prod", t_prod},
    {"mean", t_mean},
    {"var", t_var},
    {"std", t_std},
    {"norm", t_norm},
    {"max", t_max},
    {"min", t_min},
    {"argmax", t_argmax},
    {"argmin", t_argmin},
    {"softmax", t_softmax},
    {"log_softmax", t_log_softmax},
    {"matmul", t_matmul},
    {"mm", t_mm},
    {"bmm", t_bmm},
    {"gather", t_gather},
    {"scatter_add", t_scatter_add},
    {"scatter_add_", t_scatter_add_},
    {"index_select", t_index_select},
    {NULL, NULL},
};

void l_register_ops(lua_State *L) {
  luaL_setfuncs(L, op_methods, 0);
  char name[40];
  for (size_t i = 0; i < sizeof binops / sizeof binops[0]; i++) {
    if (!binops[i].lua) continue;
    lua_pushinteger(L, binops[i].op);
    lua_pushcclosure(L, b_binary, 1);
    lua_setfield(L, -2, binops[i].name);
    snprintf(name, sizeof name, "%s_", binops[i].name);
    lua_pushinteger(L, binops[i].op);
    lua_pushcclosure(L, b_binary_, 1);
    lua_setfield(L, -2, name);
  }
  for (size_t i = 0; i < sizeof unops / sizeof unops[0]; i++) {
    if (!unops[i].lua) continue;
    lua_pushinteger(L, unops[i].op);
    lua_pushcclosure(L, u_unary, 1);
    lua_setfield(L, -2, unops[i].name);
    snprintf(name, sizeof name, "%s_", unops[i].name);
    lua_pushinteger(L, unops[i].op);
    lua_pushcclosure(L, u_unary_, 1);
    lua_setfield(L, -2, name);
  }
}

/* ops() -> the op list as Lua tables, one per op, in list order: {name =, kind = 'unary'|'binary'|'tensor',
 * class = 'exact'|'float'|'bool'|'int' (unary domain) or 'arith'|'float'|'int'|'cmp'|'logic'|'act'
 * (binary kind) or, for kind 'tensor' (op_list.h's VL_TENSOR_OPS), the family ('reduce', 'sort', 'shape',
 * 'index', 'create', 'linalg'), method = whether t:name() exists, grad = whether it records a backward, lo =,
 * hi = (the inputs' smooth domain)}: what the generated
 * sweeps walk (tests/lua/test_op_sweep.lua, gpu_op_sweep.lua). */
static void push_tensor_op(lua_State *L, const char *name, const char *family, int grad, lua_Integer i) {
  lua_createtable(L, 0, 5);
  lua_pushstring(L, name);
  lua_setfield(L, -2, "name");
  lua_pushliteral(L, "tensor");
  lua_setfield(L, -2, "kind");
  lua_pushstring(L, family);
  lua_setfield(L, -2, "class");
  lua_pushboolean(L, grad);
  lua_setfield(L, -2, "grad");
  lua_rawseti(L, -2, i);
}

static int m_ops(lua_State *L) {
  static const struct {
    const char *name, *cls, *node;
    bool unary, lua;
    double lo, hi;
  } list[] = {
#define VL_CLS_EXACT "exact"
#define VL_CLS_FLOAT "float"
#define VL_CLS_BOOL "bool"
#define VL_CLS_ARITH "arith"
#define VL_CLS_CMP "cmp"
#define VL_CLS_LOGIC "logic"
#define VL_CLS_ACT "act"
#define VL_CLS_INT "int"
#define VL_X(E, name, node, dom, saves, ac, lua, lo, hi) {name, VL_CLS_##dom, node, true, lua, lo, hi},
      VL_UNARY_OPS(VL_X)
#undef VL_X
#define VL_X(E, name, node, kind, ac, lua, lo, hi) {name, VL_CLS_##kind, node, false, lua, lo, hi},
      VL_BINARY_OPS(VL_X)
#undef VL_X
  };
  lua_createtable(L, (int)(sizeof list / sizeof list[0]), 0);
  for (size_t i = 0; i < sizeof list / sizeof list[0]; i++) {
    lua_createtable(L, 0, 6);
    lua_pushstring(L, list[i].name);
    lua_setfield(L, -2, "name");
    lua_pushstring(L, list[i].unary ? "unary" : "binary");
    lua_setfield(L, -2, "kind");
    lua_pushstring(L, list[i].cls);
    lua_setfield(L, -2, "class");
    lua_pushboolean(L, list[i].lua);
    lua_setfield(L, -2, "method");
    lua_pushboolean(L, list[i].node[0] != '\0' && strcmp(list[i].cls, "bool") != 0);
    lua_setfield(L, -2, "grad");
    lua_pushnumber(L, list[i].lo);
    lua_setfield(L, -2, "lo");
    lua_pushnumber(L, list[i].hi);
    lua_setfield(L, -2, "hi");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  /* the tensor ops, family by family: {name =, kind = 'tensor', class = family, grad =} */
  lua_Integer n = (lua_Integer)(sizeof list / sizeof list[0]);
#define VL_X(name, grad) push_tensor_op(L, name, family, grad, ++n);
#define VL_FAM(F, fam) { const char *family = fam; (void)family; VL_TENSOR_OPS_##F(VL_X) }
  VL_TENSOR_FAMILIES(VL_FAM)
#undef VL_FAM
#undef VL_X
  return 1;
}

static const luaL_Reg op_module[] = {
    {"ops", m_ops},
    {"where", m_where},
    {"addmm", m_addmm},
    {"set_allow_tf32", m_set_allow_tf32},
    {"get_allow_tf32", m_get_allow_tf32},
    {"set_deterministic", m_set_deterministic},
    {"get_deterministic", m_get_deterministic},
    {"set_num_threads", m_set_num_threads},
    {"get_num_threads", m_get_num_threads},
    {"gemm_stats", m_gemm_stats},
    {"cat", m_cat},
    {"stack", m_stack},
    {NULL, NULL},
};

void l_register_ops_module(lua_State *L) { luaL_setfuncs(L, op_module, 0); }

void l_register_operators(lua_State *L) {
  static const struct {
    const char *mm;
    vl_binary_op op;
  } ops[] = {{"__add", VL_BIN_ADD}, {"__sub", VL_BIN_SUB}, {"__mul", VL_BIN_MUL},
             {"__div", VL_BIN_DIV}, {"__pow", VL_BIN_POW}, {"__mod", VL_BIN_REMAINDER},
             {"__idiv", VL_BIN_FLOOR_DIVIDE}};
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    lua_pushinteger(L, ops[i].op);
    lua_pushcclosure(L, b_operator, 1);
    lua_setfield(L, -2, ops[i].mm);
  }
  lua_pushcfunction(L, u_unm);
  lua_setfield(L, -2, "__unm");
}
