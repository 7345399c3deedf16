/* bindings/l_nn_optim.c: the optimizer entries of `v100.core._nn` (wrapped by
 * scripts/v100/optim.lua):
 *   optim_step(kind, params, grads, state1, state2, hparams[, found_inf, inv_scale])
 *       kind 'sgd' | 'adamw' | 'lamb' | 'lars'; params/grads lists of tensors of one device and
 *       dtype; state1/state2 lists or nil; hparams {lr=, momentum=, dampening=, weight_decay=,
 *       beta1=, beta2=, eps=, trust_coef=, nesterov=, first_step=, step=} (absent fields are 0 /
 *       false, dyn = nil | a {lr, step} f64 tensor for capturable steps, stochastic_round =
 *       bool and sround_seed = integer for half parameters). Updates in place;
 *       returns nothing.
 *   optim_advance(dyn[, found_inf]): dyn[2] += 1 on the device unless found_inf is non-zero.
 *   l2norms(list) -> f32 tensor [#list] of per-tensor L2 norms on the tensors' device.
 *   unscale_(list, inv_scale, found_inf): every tensor *= inv_scale, found_inf = 1 on inf/NaN. */
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/nn/nn.h"

/* The tensors of the list at idx as an array owned by a userdata pushed on the stack (collected
 * with it, so a Lua error cannot leak it). nil/false gives NULL with *n unchanged when
 * allow_nil; otherwise its length must be `want` when want >= 0. */
static vl_tensor **check_list(lua_State *L, int idx, const char *what, int want, bool allow_nil, int *n) {
  if (allow_nil && (lua_isnoneornil(L, idx) || (lua_isboolean(L, idx) && !lua_toboolean(L, idx)))) {
    lua_pushnil(L); /* keeps the stack layout of the other branch */
    return NULL;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  lua_Integer len = luaL_len(L, idx);
  if (want >= 0 && len != want)
    luaL_error(L, "optim_step: %s has %d tensors but params has %d", what, (int)len, want);
  if (len > 0x7fffffff) luaL_error(L, "%s: too many tensors", what);
  vl_tensor **ts = (vl_tensor **)lua_newuserdatauv(L, sizeof(vl_tensor *) * (size_t)(len ? len : 1), 0);
  for (lua_Integer i = 1; i <= len; i++) {
    lua_geti(L, idx, i);
    ts[i - 1] = vl_lua_testtensor(L, -1);
    if (!ts[i - 1]) luaL_error(L, "%s[%d] is not a tensor (a %s)", what, (int)i, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  *n = (int)len;
  return ts;
}

static double num_field(lua_State *L, int idx, const char *k, double def) {
  lua_getfield(L, idx, k);
  double v = lua_isnil(L, -1) ? def : luaL_checknumber(L, -1);
  lua_pop(L, 1);
  return v;
}

static bool bool_field(lua_State *L, int idx, const char *k) {
  lua_getfield(L, idx, k);
  bool v = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

static vl_tensor *opt_tensor(lua_State *L, int idx) {
  if (lua_isnoneornil(L, idx)) return NULL;
  return vl_lua_checktensor(L, idx);
}

static int o_optim_step(lua_State *L) {
  static const char *const kinds[] = {"sgd", "adamw", "lamb", "lars", NULL}; /* vl_optim_kind order */
  VL_TABLE_SIZE(kinds, VL_NOPTIM_KINDS + 1);
  vl_optim_kind kind = (vl_optim_kind)luaL_checkoption(L, 1, NULL, kinds);
  luaL_checktype(L, 6, LUA_TTABLE);
  static const char *const known[] = {"lr", "momentum", "dampening", "weight_decay", "beta1", "beta2", "eps",
                                      "trust_coef", "nesterov", "first_step", "step", "dyn", "stochastic_round",
                                      "sround_seed", NULL};
  l_check_opts(L, 6, "optim_step: hparams", known);
  vl_tensor *found_inf = opt_tensor(L, 7), *inv_scale = opt_tensor(L, 8);
  int n = 0, n2 = 0;
  vl_tensor **params = check_list(L, 2, "params", -1, false, &n);
  vl_tensor **grads = check_list(L, 3, "grads", n, false, &n2);
  vl_tensor **s1 = check_list(L, 4, "state1", n, true, &n2);
  vl_tensor **s2 = check_list(L, 5, "state2", n, true, &n2);
  vl_optim_hparams h;
  memset(&h, 0, sizeof h);
  h.lr = num_field(L, 6, "lr", 0);
  h.momentum = num_field(L, 6, "momentum", 0);
  h.dampening = num_field(L, 6, "dampening", 0);
  h.weight_decay = num_field(L, 6, "weight_decay", 0);
  h.beta1 = num_field(L, 6, "beta1", 0);
  h.beta2 = num_field(L, 6, "beta2", 0);
  h.eps = num_field(L, 6, "eps", 0);
  h.trust_coef = num_field(L, 6, "trust_coef", 0);
  h.nesterov = bool_field(L, 6, "nesterov");
  h.first_step = bool_field(L, 6, "first_step");
  h.step = (int64_t)num_field(L, 6, "step", 0);
  lua_getfield(L, 6, "dyn");
  h.dyn = lua_isnil(L, -1) ? NULL : vl_lua_checktensor(L, -1);
  lua_pop(L, 1); /* the hparams table keeps dyn alive */
  h.stochastic_round = bool_field(L, 6, "stochastic_round");
  lua_getfield(L, 6, "sround_seed");
  if (!lua_isnil(L, -1) && !lua_isinteger(L, -1))
    return luaL_error(L, "optim_step: hparams.sround_seed must be an integer, got %s", luaL_typename(L, -1));
  h.sround_seed = (uint64_t)lua_tointeger(L, -1);
  lua_pop(L, 1);
  vl_status s = vl_optim_step(kind, n, params, grads, s1, s2, &h, found_inf, inv_scale);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int o_optim_advance(lua_State *L) {
  vl_tensor *dyn = vl_lua_checktensor(L, 1), *found_inf = opt_tensor(L, 2);
  vl_status s = vl_optim_advance(dyn, found_inf);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int o_l2norms(lua_State *L) {
  int n = 0;
  vl_tensor **ts = check_list(L, 1, "l2norms: tensor", -1, false, &n);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_l2norms(n, ts, slot));
}

static int o_unscale_(lua_State *L) {
  vl_tensor *inv_scale = vl_lua_checktensor(L, 2), *found_inf = vl_lua_checktensor(L, 3);
  int n = 0;
  vl_tensor **ts = check_list(L, 1, "unscale_: tensor", -1, false, &n);
  vl_status s = vl_unscale_(n, ts, inv_scale, found_inf);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

const luaL_Reg l_optim_funcs[] = {
    {"optim_step", o_optim_step},
    {"optim_advance", o_optim_advance},
    {"l2norms", o_l2norms},
    {"unscale_", o_unscale_},
    {NULL, NULL},
};
