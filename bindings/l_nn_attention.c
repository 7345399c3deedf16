/* bindings/l_nn_attention.c: fused attention in `v100.core._nn` (scripts/v100/nn/functional.lua's
 * scaled_dot_product_attention calls these):
 *   attention(q, k, v, mask|nil, scale, dropout, causal) -> out           (records autograd)
 *   attention_supported(q, k, v, mask|nil, scale, dropout, causal) -> bool
 * and the raw entry points for tests, which record nothing:
 *   attention_forward(q, k, v, mask|nil, scale, dropout, causal) -> out, lse, keep|nil
 *   attention_backward(q, k, v, mask|nil, out, dout, lse, keep|nil, scale, dropout, causal) -> dq, dk, dv
 * Translation only: runtime/nn/attention.c checks everything. */
#include "bindings/l_priv.h"
#include "runtime/nn/nn.h"

static vl_tensor *opt_tensor(lua_State *L, int idx) {
  return lua_isnoneornil(L, idx) ? NULL : vl_lua_checktensor(L, idx);
}

static vl_attention_params params_at(lua_State *L, int idx) {
  vl_attention_params p = {.scale = luaL_checknumber(L, idx), .dropout = luaL_optnumber(L, idx + 1, 0.0),
                           .causal = lua_toboolean(L, idx + 2)};
  return p;
}

/* n result slots were pushed last: account each filled one, leave nil for an empty one. */
static int done_n(lua_State *L, vl_status s, int n) {
  if (s != VL_OK) return vl_lua_error(L, s);
  int top = lua_gettop(L);
  for (int i = top - n + 1; i <= top; i++) {
    if (l_checkud(L, i)->t == NULL) {
      lua_pushnil(L);
      lua_replace(L, i);
      continue;
    }
    lua_pushvalue(L, i);
    l_done(L, VL_OK);
    lua_pop(L, 1);
  }
  return n;
}

static int l_attention(lua_State *L) {
  const char *op = "scaled_dot_product_attention";
  vl_tensor *q = l_nn_checktensor(L, 1, op, "q"), *k = l_nn_checktensor(L, 2, op, "k"),
            *v = l_nn_checktensor(L, 3, op, "v"), *mask = opt_tensor(L, 4);
  vl_attention_params p = params_at(L, 5);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_attention(q, k, v, mask, &p, slot));
}

static int l_attention_supported(lua_State *L) {
  vl_tensor *q = vl_lua_checktensor(L, 1), *k = vl_lua_checktensor(L, 2), *v = vl_lua_checktensor(L, 3),
            *mask = opt_tensor(L, 4);
  vl_attention_params p = params_at(L, 5);
  lua_pushboolean(L, vl_attention_supported(q, k, v, mask, &p));
  return 1;
}

static int l_attention_forward(lua_State *L) {
  vl_tensor *q = vl_lua_checktensor(L, 1), *k = vl_lua_checktensor(L, 2), *v = vl_lua_checktensor(L, 3),
            *mask = opt_tensor(L, 4);
  vl_attention_params p = params_at(L, 5);
  lua_settop(L, 7);
  vl_tensor **o = l_slot(L), **lse = l_slot(L), **keep = l_slot(L);
  return done_n(L, vl_attention(q, k, v, mask, &p, o, lse, keep), 3);
}

static int l_attention_backward(lua_State *L) {
  vl_tensor *q = vl_lua_checktensor(L, 1), *k = vl_lua_checktensor(L, 2), *v = vl_lua_checktensor(L, 3),
            *mask = opt_tensor(L, 4), *o = vl_lua_checktensor(L, 5), *dout = vl_lua_checktensor(L, 6),
            *lse = vl_lua_checktensor(L, 7), *keep = opt_tensor(L, 8);
  vl_attention_params p = params_at(L, 9);
  lua_settop(L, 11);
  vl_tensor **dq = l_slot(L), **dk = l_slot(L), **dv = l_slot(L);
  return done_n(L, vl_attention_backward(q, k, v, mask, o, dout, lse, keep, &p, dq, dk, dv), 3);
}

const luaL_Reg l_attention_funcs[] = {
    {"attention", l_attention},
    {"attention_supported", l_attention_supported},
    {"attention_forward", l_attention_forward},
    {"attention_backward", l_attention_backward},
    {NULL, NULL},
};
