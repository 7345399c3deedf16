/* bindings/l_nn_conv.c: convolution, pooling and layout helpers in `v100.core._nn`.
 *
 *   conv2d(x, w, b|nil, {stride=1, padding=0, dilation=1, groups=1}) -> y        (records autograd)
 *   max_pool2d(x, k, {stride=k, padding=0, dilation=1, ceil_mode=false}) -> y    (records)
 *   avg_pool2d(x, k, {stride=k, padding=0, ceil_mode=false, count_include_pad=true}) -> y (records)
 *   adaptive_avg_pool2d(x, {h, w} | n) -> y                                       (records)
 *   conv2d_backward(x, w, dy, opts) -> dx, dw, dbias                              (raw, for tests)
 *   to_channels_last(t) -> t (NHWC-dense copy, or t itself; records autograd), is_channels_last(t) -> bool
 *   set_cudnn_benchmark(bool) -> previous setting (algorithms by timing, cached per shape)
 *   pair(op, what, v[, default]) -> {h, w} (the layers' constructors parse their sizes with it)
 * Sizes, strides, paddings and dilations are numbers or {h, w} pairs. */
#include <limits.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/layout.h"
#include "runtime/core/context.h"
#include "runtime/core/layout.h"
#include "runtime/nn/nn.h"

/* opts[key] as a pair, or the defaults when opts or the field is absent. */
static void opt_pair(lua_State *L, int opts, const char *key, const char *op, const int def[2], int out[2]) {
  out[0] = def[0];
  out[1] = def[1];
  if (lua_type(L, opts) != LUA_TTABLE) return;
  lua_getfield(L, opts, key);
  if (!lua_isnil(L, -1)) l_checkpair(L, lua_gettop(L), op, key, out);
  lua_pop(L, 1);
}

static bool opt_bool(lua_State *L, int opts, const char *key, bool def) {
  if (lua_type(L, opts) != LUA_TTABLE) return def;
  lua_getfield(L, opts, key);
  bool v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

static const char *const conv_known[] = {"stride", "padding", "dilation", "groups", NULL};
static const char *const maxpool_known[] = {"stride", "padding", "dilation", "ceil_mode", NULL};
static const char *const avgpool_known[] = {"stride", "padding", "ceil_mode", "count_include_pad", NULL};

static void conv_opts(lua_State *L, int idx, const char *op, vl_conv2d_params *p) {
  static const int one[2] = {1, 1}, zero[2] = {0, 0};
  l_check_opts(L, idx, op, conv_known);
  opt_pair(L, idx, "stride", op, one, p->stride);
  opt_pair(L, idx, "padding", op, zero, p->pad);
  opt_pair(L, idx, "dilation", op, one, p->dilation);
  p->groups = 1;
  if (lua_type(L, idx) == LUA_TTABLE) {
    lua_getfield(L, idx, "groups");
    if (!lua_isnil(L, -1)) {
      int ok = 0;
      lua_Integer g = lua_tointegerx(L, -1, &ok);
      if (!ok || g < INT_MIN || g > INT_MAX) l_nn_error(L, "%s: groups must be an integer, got %s", op, luaL_tolstring(L, -1, NULL));
      p->groups = (int)g;
    }
    lua_pop(L, 1);
  }
}

static vl_tensor *opt_tensor(lua_State *L, int idx) {
  return lua_isnoneornil(L, idx) ? NULL : vl_lua_checktensor(L, idx);
}

static int l_conv2d(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "conv2d", "input"), *w = l_nn_checktensor(L, 2, "conv2d", "weight");
  vl_tensor *b = opt_tensor(L, 3);
  vl_conv2d_params p;
  conv_opts(L, 4, "conv2d", &p);
  lua_settop(L, 4);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_conv2d(x, w, b, &p, slot));
}

static int l_conv2d_backward(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1), *w = vl_lua_checktensor(L, 2), *dy = vl_lua_checktensor(L, 3);
  vl_conv2d_params p;
  conv_opts(L, 4, "conv2d_backward", &p);
  lua_settop(L, 4);
  vl_tensor **dx = l_slot(L), **dw = l_slot(L), **db = l_slot(L);
  vl_status s = vl_conv2d_backward(x, w, dy, &p, dx, dw, db);
  if (s != VL_OK) return vl_lua_error(L, s);
  for (int i = 5; i <= 7; i++) { /* account each new tensor */
    lua_pushvalue(L, i);
    l_done(L, VL_OK);
    lua_pop(L, 1);
  }
  return 3;
}

static int pool_common(lua_State *L, vl_pool_kind kind, const char *op) {
  vl_tensor *x = l_nn_checktensor(L, 1, op, "input");
  vl_pool2d_params p = {0};
  p.kind = kind;
  static const int one[2] = {1, 1}, zero[2] = {0, 0};
  l_checkpair(L, 2, op, "kernel size", p.kernel);
  l_check_opts(L, 3, op, kind == VL_POOL_MAX ? maxpool_known : avgpool_known);
  opt_pair(L, 3, "stride", op, p.kernel, p.stride);
  opt_pair(L, 3, "padding", op, zero, p.pad);
  if (kind == VL_POOL_MAX) opt_pair(L, 3, "dilation", op, one, p.dilation);
  else p.dilation[0] = p.dilation[1] = 1;
  p.ceil_mode = opt_bool(L, 3, "ceil_mode", false);
  p.count_include_pad = opt_bool(L, 3, "count_include_pad", true);
  lua_settop(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_pool2d(x, &p, slot));
}

static int l_max_pool2d(lua_State *L) { return pool_common(L, VL_POOL_MAX, "max_pool2d"); }
static int l_avg_pool2d(lua_State *L) { return pool_common(L, VL_POOL_AVG, "avg_pool2d"); }

static int l_adaptive_avg_pool2d(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "adaptive_avg_pool2d", "input");
  vl_pool2d_params p = {0};
  p.kind = VL_POOL_ADAPTIVE_AVG;
  int size[2];
  l_checkpair(L, 2, "adaptive_avg_pool2d", "output size", size);
  p.out_h = size[0];
  p.out_w = size[1];
  p.dilation[0] = p.dilation[1] = 1;
  lua_settop(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_pool2d(x, &p, slot));
}

static int l_to_channels_last(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_to_channels_last(t, slot));
}

static int l_is_channels_last(lua_State *L) {
  lua_pushboolean(L, vl_is_channels_last(vl_lua_checktensor(L, 1)));
  return 1;
}

/* pair(op, what, v[, default]) -> {h, w}: the one parser of sizes given as a number or a pair,
 * for the layer constructors that need the values (Conv2d's weight shape, extra_repr). */
static int l_pair(lua_State *L) {
  const char *op = luaL_checkstring(L, 1), *what = luaL_checkstring(L, 2);
  int idx = lua_isnoneornil(L, 3) ? 4 : 3, out[2];
  l_checkpair(L, idx, op, what, out);
  lua_createtable(L, 2, 0);
  for (int i = 0; i < 2; i++) {
    lua_pushinteger(L, out[i]);
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

static int l_set_cudnn_benchmark(lua_State *L) {
  luaL_checkany(L, 1);
  bool prev = vl_cudnn_benchmark();
  vl_set_cudnn_benchmark(lua_toboolean(L, 1));
  lua_pushboolean(L, prev);
  return 1;
}

const luaL_Reg l_conv_funcs[] = {
    {"conv2d", l_conv2d},
    {"conv2d_backward", l_conv2d_backward},
    {"max_pool2d", l_max_pool2d},
    {"avg_pool2d", l_avg_pool2d},
    {"adaptive_avg_pool2d", l_adaptive_avg_pool2d},
    {"to_channels_last", l_to_channels_last},
    {"is_channels_last", l_is_channels_last},
    {"set_cudnn_benchmark", l_set_cudnn_benchmark},
    {"pair", l_pair},
    {NULL, NULL},
};
