/* bindings/l_nn_norm.c: batch norm, layer norm and softmax backward in `v100.core._nn`.
 *
 *   batch_norm(x, running_mean, running_var, weight, bias, training, momentum=0.1, eps=1e-5,
 *              {activation='relu'|'none', residual=r}) -> y        (y = act(bn(x) + r), fused)
 *   layer_norm(x, normalized_shape, weight, bias, eps=1e-5) -> y
 * record autograd nodes (scripts/v100/nn/functional.lua wraps them). The raw entry points, for
 * tests and Lua-defined Functions, record nothing:
 *   batch_norm_forward(x, rm, rv, w, b, training, momentum, eps, {activation, residual})
 *     -> y, save_mean, save_invstd
 *   batch_norm_backward(x, dy, w, save_mean, save_invstd, eps,
 *                       {activation, residual=bool, bias=b, y=y}) -> dx, dweight, dbias[, dresidual]
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

/* n result slots were pushed before the runtime call: account each, or raise. */
static int done_n(lua_State *L, vl_status s, int n) {
  if (s != VL_OK) return vl_lua_error(L, s);
  int top = lua_gettop(L);
  for (int i = top - n + 1; i <= top; i++) {
    lua_pushvalue(L, i);
    l_done(L, VL_OK);
    lua_pop(L, 1);
  }
  return n;
}

static int done3(lua_State *L, vl_status s) { return done_n(L, s, 3); }

/* Field `key` of the options table at idx: a tensor or nil. */
static vl_tensor *opt_field_tensor(lua_State *L, int idx, const char *key, const char *fname) {
  if (lua_isnoneornil(L, idx)) return NULL;
  lua_getfield(L, idx, key);
  vl_tensor *t = NULL;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TUSERDATA)
      l_nn_error(L, "%s: %s must be a tensor, got %s", fname, key, luaL_typename(L, -1));
    t = vl_lua_checktensor(L, -1);
  }
  lua_pop(L, 1); /* the options table still holds the tensor */
  return t;
}

/* opts.activation: 'relu' or 'none' (the default). */
static vl_bn_act opt_act(lua_State *L, int idx, const char *fname) {
  if (lua_isnoneornil(L, idx)) return VL_BN_ACT_NONE;
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_getfield(L, idx, "activation");
  vl_bn_act act = VL_BN_ACT_NONE;
  if (!lua_isnil(L, -1)) {
    const char *a = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
    if (a && strcmp(a, "relu") == 0) act = VL_BN_ACT_RELU;
    else if (!a || strcmp(a, "none") != 0)
      l_nn_error(L, "%s: activation must be 'relu' or 'none', got %s", fname,
                 a ? a : luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  return act;
}

static const char *const bn_known[] = {"activation", "residual", NULL};

static int l_batch_norm(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "batch_norm", "input");
  vl_tensor *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4), *b = opt_tensor(L, 5);
  bool training = lua_toboolean(L, 6);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  l_check_opts(L, 9, "batch_norm", bn_known);
  vl_bn_fusion f = {opt_act(L, 9, "batch_norm"), opt_field_tensor(L, 9, "residual", "batch_norm")};
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_batch_norm_fused(x, w, b, rm, rv, training, momentum, eps, &f, slot));
}

static int l_batch_norm_forward(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1);
  vl_tensor *rm = opt_tensor(L, 2), *rv = opt_tensor(L, 3), *w = opt_tensor(L, 4), *b = opt_tensor(L, 5);
  bool training = lua_toboolean(L, 6);
  double momentum = luaL_optnumber(L, 7, 0.1), eps = luaL_optnumber(L, 8, 1e-5);
  l_check_opts(L, 9, "batch_norm", bn_known);
  vl_bn_fusion f = {opt_act(L, 9, "batch_norm"), opt_field_tensor(L, 9, "residual", "batch_norm")};
  lua_settop(L, 9);
  vl_tensor **y = l_slot(L), **sm = l_slot(L), **si = l_slot(L);
  return done3(L, vl_batch_norm_fused(x, w, b, rm, rv, training, momentum, eps, &f, y, sm, si));
}

static int l_batch_norm_backward(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1), *dy = vl_lua_checktensor(L, 2);
  vl_tensor *w = opt_tensor(L, 3), *sm = vl_lua_checktensor(L, 4), *si = vl_lua_checktensor(L, 5);
  double eps = luaL_optnumber(L, 6, 1e-5);
  const char *fn = "batch_norm_backward";
  static const char *const known[] = {"activation", "bias", "y", "residual", NULL};
  l_check_opts(L, 7, fn, known);
  vl_bn_act act = opt_act(L, 7, fn);
  vl_tensor *b = opt_field_tensor(L, 7, "bias", fn), *y = opt_field_tensor(L, 7, "y", fn);
  bool residual = false;
  if (!lua_isnoneornil(L, 7)) {
    lua_getfield(L, 7, "residual");
    residual = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  lua_settop(L, 7);
  vl_tensor **dx = l_slot(L), **dw = l_slot(L), **db = l_slot(L), **dr = residual ? l_slot(L) : NULL;
  return done_n(L, vl_batch_norm_fused_backward(x, dy, w, b, sm, si, eps, act, residual, y, dx, dw, db, dr),
                residual ? 4 : 3);
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
  /* The ACT ops of the op list (runtime/backend/op_list.h). */
  static const struct {
    const char *name;
    vl_binary_op op;
    bool act;
  } ops[] = {
#define VL_X(E, name, node, kind, ...) {name, VL_BIN_##E, VL_OPK_##kind == VL_OPK_ACT},
      VL_BINARY_OPS(VL_X)
#undef VL_X
  };
  const char *name = luaL_checkstring(L, 1);
  int k = -1;
  for (int i = 0; i < (int)(sizeof ops / sizeof ops[0]); i++)
    if (ops[i].act && strcmp(name, ops[i].name) == 0) k = i;
  if (k < 0) {
    char known[256] = "";
    for (int i = 0; i < (int)(sizeof ops / sizeof ops[0]); i++)
      if (ops[i].act) snprintf(known + strlen(known), sizeof known - strlen(known), "%s%s", known[0] ? ", " : "", ops[i].name);
    return l_nn_error(L, "activation_backward: unknown op '%s' (%s)", name, known);
  }
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
