/* bindings/l_nn_norm.c: batch norm, layer norm and softmax backward in `v100.core._nn`.
 *
 *   batch_norm(x, running_mean, running_var, weight, bias, training, momentum=0.1, eps=1e-5) -> y
 *   layer_norm(x, normalized_shape, weight, bias, eps=1e-5) -> y
 * record autograd nodes (scripts/v100/nn/functional.lua wraps them). The raw entry points, for
 * tests and Lua-defined Functions, record nothing:
 *   batch_norm_forward(x, rm, rv, w, b, training, momentum, eps) -> y, save_mean, save_invstd
 *   batch_norm_backward(x, dy, w, save_mean, save_invstd, eps) -> dx, dweight, dbias
 *   layer_norm_forward(x, normalized_shape, w, b, eps) -> y, mean, rstd
 *   layer_norm_backward(x, dy, normalized_shape, w, mean, rstd) -> dx, dweight, dbias
 *   softmax_backward(y, dy, dim, log=false) -> dx       (dim 1-based, y the forward's output)
 *   activation_backward(name, grad, v) -> dx   name: relu_backward, gelu_backward,
 *     gelu_tanh_backward (v = the forward input x), tanh_backward, sigmoid_backward (v = y) */
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/nn/nn.h"
#include "runtime/ops/ops.h"

/* A tensor or nil at idx. */
static vl_tensor *opt_tensor(lua_State *L, int idx) {
  return lua_isnoneornil(L, idx) ? NULL : vl_lua_checktensor(L, idx);
}

/* Three result slots were pushed before the runtime call: account each, or raise. */
static int done3(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  int top = lua_gettop(L);
  for (int i = top - 2; i <= top; i++) {
    lua_pushvalue(L, i);
    l_done(L, VL_OK);
    lua_pop(L, 1);
  }
  return 3;
}

static int l_batch_norm(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "batch_norm", "input");
  vl_tensor *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4), *b = opt_tensor(L, 5);
  bool training = lua_toboolean(L, 6);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_batch_norm(x, w, b, rm, rv, training, momentum, eps, slot));
}

static int l_batch_norm_forward(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1);
  vl_tensor *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4), *b = opt_tensor(L, 5);
  bool training = lua_toboolean(L, 6);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  lua_settop(L, 8);
  vl_tensor **y = l_slot(L), **sm = l_slot(L), **si = l_slot(L);
  return done3(L, vl_batch_norm(x, w, b, rm, rv, training, momentum, eps, y, sm, si));
}

static int l_batch_norm_backward(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1), *dy = vl_lua_checktensor(L, 2);
  vl_tensor *w = opt_tensor(L, 3), *sm = vl_lua_checktensor(L, 4), *si = vl_lua_checktensor(L, 5);
  double eps = luaL_optnumber(L, 6, 1e-5);
  lua_settop(L, 6);
  vl_tensor **dx = l_slot(L), **dw = l_slot(L), **db = l_slot(L);
  return done3(L, vl_batch_norm_backward(x, dy, w, sm, si, eps, dx, dw, db));
}

/* normalized_shape (a size or a table of sizes) as sizes; the runtime checks that they are x's
 * trailing sizes. Returns their count (layer norm's nnorm). */
static int check_normalized_shape(lua_State *L, int idx, const vl_tensor *x, const char *fname) {
  int64_t size[VL_MAX_DIMS];
  int n;
  if (lua_isinteger(L, idx)) {
    size[0] = lua_tointeger(L, idx);
    n = 1;
  } else if (lua_type(L, idx) == LUA_TTABLE) {
    n = l_checksizetable(L, idx, size);
  } else {
    return l_nn_error(L, "%s: normalized_shape must be an integer or a table of sizes, got %s", fname,
                      luaL_typename(L, idx));
  }
  vl_status s = vl_layer_norm_shape_check(fname, x, n, size);
  if (s != VL_OK) return vl_lua_error(L, s);
  return n;
}

static int l_layer_norm(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "layer_norm", "input");
  int nnorm = check_normalized_shape(L, 2, x, "layer_norm");
  vl_tensor *w = opt_tensor(L, 3), *b = opt_tensor(L, 4);
  double eps = luaL_optnumber(L, 5, 1e-5);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_layer_norm(x, nnorm, w, b, eps, slot));
}

static int l_layer_norm_forward(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1);
  int nnorm = check_normalized_shape(L, 2, x, "layer_norm");
  vl_tensor *w = opt_tensor(L, 3), *b = opt_tensor(L, 4);
  double eps = luaL_optnumber(L, 5, 1e-5);
  lua_settop(L, 5);
  vl_tensor **y = l_slot(L), **mean = l_slot(L), **rstd = l_slot(L);
  return done3(L, vl_layer_norm(x, nnorm, w, b, eps, y, mean, rstd));
}

static int l_layer_norm_backward(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1), *dy = vl_lua_checktensor(L, 2);
  int nnorm = check_normalized_shape(L, 3, x, "layer_norm_backward");
  vl_tensor *w = opt_tensor(L, 4), *mean = vl_lua_checktensor(L, 5), *rstd = vl_lua_checktensor(L, 6);
  lua_settop(L, 6);
  vl_tensor **dx = l_slot(L), **dw = l_slot(L), **db = l_slot(L);
  return done3(L, vl_layer_norm_backward(x, dy, nnorm, w, mean, rstd, dx, dw, db));
}

static int l_softmax_backward(lua_State *L) {
  vl_tensor *y = vl_lua_checktensor(L, 1), *dy = vl_lua_checktensor(L, 2);
  int dim = l_checkdim(L, 3);
  bool log = lua_toboolean(L, 4);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_softmax_backward(y, dy, dim, log, slot));
}

static int l_activation_backward(lua_State *L) {
  static const struct {
    const char *name;
    vl_binary_op op;
  } ops[] = {{"relu_backward", VL_BIN_RELU_BACKWARD},
             {"gelu_backward", VL_BIN_GELU_BACKWARD},
             {"gelu_tanh_backward", VL_BIN_GELU_TANH_BACKWARD},
             {"tanh_backward", VL_BIN_TANH_BACKWARD},
             {"sigmoid_backward", VL_BIN_SIGMOID_BACKWARD}};
  const char *name = luaL_checkstring(L, 1);
  int k = -1;
  for (int i = 0; i < (int)(sizeof ops / sizeof ops[0]); i++)
    if (strcmp(name, ops[i].name) == 0) k = i;
  if (k < 0)
    return l_nn_error(L, "activation_backward: unknown op '%s' (relu_backward, gelu_backward, gelu_tanh_backward, "
                         "tanh_backward, sigmoid_backward)", name);
  vl_tensor *g = vl_lua_checktensor(L, 2), *v = vl_lua_checktensor(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_binary(ops[k].op, g, v, 1.0, slot));
}

const luaL_Reg l_norm_funcs[] = {
    {"batch_norm", l_batch_norm},
    {"batch_norm_forward", l_batch_norm_forward},
    {"batch_norm_backward", l_batch_norm_backward},
    {"layer_norm", l_layer_norm},
    {"layer_norm_forward", l_layer_norm_forward},
    {"layer_norm_backward", l_layer_norm_backward},
    {"softmax_backward", l_softmax_backward},
    {"activation_backward", l_activation_backward},
    {NULL, NULL},
};
