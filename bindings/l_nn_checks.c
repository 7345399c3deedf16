/* bindings/l_nn_checks.c: the argument checks (runtime/nn/checks.c) of the layers that
 * scripts/v100/nn/functional.lua composes from tensor ops, in `v100.core._nn`. Each returns
 * nothing and raises the runtime's message; these bindings only translate Lua values:
 *   check_linear(x, w, b|nil)              check_embedding(ids, w)
 *   check_class_target(op, input, target, probs_ok) (class ids, or probabilities of the input's shape)
 *   gather_as(op, src, dim, index) -> t    index_select_as(op, src, dim, index) -> t
 *       (src:gather / src:index_select, recorded, whose index errors name op: the range check of
 *       class ids and embedding ids is the gather itself, not a second kernel)
 *   check_same_shape(op, input, target)    check_sdpa(q, k, v, mask|nil)
 *   check_prob(op, what, p)                (0 <= p <= 1; NaN fails)
 *   check_ndim(op, x, {ranks...})          (e.g. BatchNorm2d: {4})
 *   flatten_dims(op, x, start, end) -> a, b (1-based dims, negative from the end, wrapped)
 *   padding_idx(op, num, idx) -> idx wrapped into [0, num) (negative from the end)
 *   check_reduction(op, r) -> r ('mean' when nil; else 'mean', 'sum' or 'none': a translation) */
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/ops.h"
#include "runtime/nn/nn.h"

static int check_done(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static vl_tensor *opt_tensor(lua_State *L, int idx, const char *op, const char *what) {
  return lua_isnoneornil(L, idx) ? NULL : l_nn_checktensor(L, idx, op, what);
}

static int c_linear(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "linear", "input"), *w = l_nn_checktensor(L, 2, "linear", "weight");
  return check_done(L, vl_linear_check(x, w, opt_tensor(L, 3, "linear", "bias")));
}

static int c_embedding(lua_State *L) {
  vl_tensor *ids = l_nn_checktensor(L, 1, "embedding", "ids"), *w = l_nn_checktensor(L, 2, "embedding", "weight");
  return check_done(L, vl_embedding_check(ids, w));
}

static int c_class_target(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  vl_tensor *x = l_nn_checktensor(L, 2, op, "input"), *t = l_nn_checktensor(L, 3, op, "target");
  return check_done(L, vl_class_target_check(op, x, t, lua_toboolean(L, 4)));
}

/* gather_as / index_select_as: (op, src, dim, index) -> the recorded op, its errors naming op. */
static int gather_like(lua_State *L, bool select) {
  const char *op = luaL_checkstring(L, 1);
  vl_tensor *src = l_nn_checktensor(L, 2, op, select ? "weight" : "input");
  int d = l_checkdim(L, 3);
  vl_tensor *index = l_nn_checktensor(L, 4, op, select ? "ids" : "index");
  vl_tensor **slot = l_slot(L);
  return l_done(L, select ? vl_ag_index_select_as(op, src, d, index, slot) : vl_ag_gather_as(op, src, d, index, slot));
}
static int c_gather_as(lua_State *L) { return gather_like(L, false); }
static int c_index_select_as(lua_State *L) { return gather_like(L, true); }

static int c_same_shape(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  vl_tensor *x = l_nn_checktensor(L, 2, op, "input"), *t = l_nn_checktensor(L, 3, op, "target");
  return check_done(L, vl_same_shape_check(op, x, t));
}

static int c_sdpa(lua_State *L) {
  const char *op = "scaled_dot_product_attention";
  vl_tensor *q = l_nn_checktensor(L, 1, op, "q"), *k = l_nn_checktensor(L, 2, op, "k");
  vl_tensor *v = l_nn_checktensor(L, 3, op, "v");
  return check_done(L, vl_sdpa_check(q, k, v, opt_tensor(L, 4, op, "mask")));
}

static int c_prob(lua_State *L) {
  const char *op = luaL_checkstring(L, 1), *what = luaL_checkstring(L, 2);
  if (lua_type(L, 3) != LUA_TNUMBER)
    return l_nn_error(L, "%s: %s must be a number, got %s", op, what, luaL_typename(L, 3));
  return check_done(L, vl_nn_check_prob(op, what, lua_tonumber(L, 3)));
}

static int c_ndim(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  vl_tensor *x = l_nn_checktensor(L, 2, op, "input");
  luaL_checktype(L, 3, LUA_TTABLE);
  unsigned mask = 0;
  lua_Integer n = luaL_len(L, 3);
  for (lua_Integer i = 1; i <= n; i++) {
    lua_geti(L, 3, i);
    lua_Integer d = luaL_checkinteger(L, -1);
    lua_pop(L, 1);
    if (d < 0 || d > VL_MAX_DIMS) return l_nn_error(L, "check_ndim: rank %d out of range", (int)d);
    mask |= 1u << d;
  }
  return check_done(L, vl_nn_check_ndim(op, x, mask));
}

static int c_flatten_dims(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  vl_tensor *x = l_nn_checktensor(L, 2, op, "input");
  /* 1-based (negative from the end) to the runtime's 0-based, which keeps negatives as they are. */
  lua_Integer s = luaL_checkinteger(L, 3), e = luaL_checkinteger(L, 4);
  if (s == 0 || e == 0) return l_nn_error(L, "%s: dim 0 is invalid (dims are 1-based)", op);
  int a, b;
  vl_status st = vl_flatten_dims(op, x, s > 0 ? (int)s - 1 : (int)s, e > 0 ? (int)e - 1 : (int)e, &a, &b);
  if (st != VL_OK) return vl_lua_error(L, st);
  lua_pushinteger(L, a + 1);
  lua_pushinteger(L, b + 1);
  return 2;
}

static int c_padding_idx(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  lua_Integer num = luaL_checkinteger(L, 2);
  int ok = 0;
  lua_Integer pad = lua_tointegerx(L, 3, &ok);
  if (!ok) return l_nn_error(L, "%s: padding_idx must be an integer, got %s", op, luaL_tolstring(L, 3, NULL));
  int64_t w = 0;
  vl_status s = vl_embedding_padding_idx(op, (int64_t)num, (int64_t)pad, &w);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_pushinteger(L, (lua_Integer)w);
  return 1;
}

static int c_reduction(lua_State *L) {
  const char *op = luaL_checkstring(L, 1);
  if (lua_isnoneornil(L, 2)) {
    lua_pushliteral(L, "mean");
    return 1;
  }
  const char *r = lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : NULL;
  if (!r || (strcmp(r, "mean") != 0 && strcmp(r, "sum") != 0 && strcmp(r, "none") != 0))
    return l_nn_error(L, "%s: reduction must be 'mean', 'sum' or 'none', got %s", op, luaL_tolstring(L, 2, NULL));
  lua_settop(L, 2);
  return 1;
}

const luaL_Reg l_check_funcs[] = {
    {"check_reduction", c_reduction},
    {"padding_idx", c_padding_idx},
    {"check_linear", c_linear},
    {"check_embedding", c_embedding},
    {"check_class_target", c_class_target},
    {"gather_as", c_gather_as},
    {"index_select_as", c_index_select_as},
    {"check_same_shape", c_same_shape},
    {"check_sdpa", c_sdpa},
    {"check_prob", c_prob},
    {"check_ndim", c_ndim},
    {"flatten_dims", c_flatten_dims},
    {NULL, NULL},
};
