/* bindings/l_nn.c: the internal table `v100.core._nn` of layer ops (conv, pooling, norms,
 * optimizer steps) and layer argument checks, which scripts/v100/nn/functional.lua and
 * scripts/v100/optim.lua wrap. Each concern's bindings file exports a luaL_Reg array (declared in
 * l_priv.h) and is listed here. Also the translation helpers the nn bindings share: the one
 * {h, w} pair parser and tensor arguments named by op and operand. The bindings only translate
 * Lua values; every shape, dtype, device and range check is the runtime's (runtime/nn). */
#include <limits.h>
#include <stdarg.h>

#include "bindings/l_priv.h"

int l_nn_error(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return lua_error(L);
}

/* One integer (a lua_Integer or an integral float) in int range into *out. */
static bool int_of(lua_State *L, int idx, int *out) {
  int ok = 0;
  lua_Integer v = lua_tointegerx(L, idx, &ok);
  if (!ok || v < INT_MIN || v > INT_MAX) return false;
  *out = (int)v;
  return true;
}

void l_checkpair(lua_State *L, int idx, const char *op, const char *what, int out[2]) {
  if (lua_type(L, idx) == LUA_TNUMBER) {
    if (!int_of(L, idx, &out[0]))
      l_nn_error(L, "%s: %s must be an integer or a pair {h, w} of integers, got %s", op, what,
                 lua_tostring(L, idx));
    out[1] = out[0];
    return;
  }
  if (lua_type(L, idx) != LUA_TTABLE)
    l_nn_error(L, "%s: %s must be an integer or a pair {h, w} of integers, got %s", op, what, luaL_typename(L, idx));
  lua_Integer n = luaL_len(L, idx);
  if (n != 2)
    l_nn_error(L, "%s: %s must be an integer or a pair {h, w} of integers, got a table of %d", op, what, (int)n);
  for (int i = 0; i < 2; i++) {
    lua_geti(L, idx, i + 1);
    bool ok = int_of(L, -1, &out[i]);
    lua_pop(L, 1);
    if (!ok) l_nn_error(L, "%s: %s must be an integer or a pair {h, w} of integers (element %d is not)", op, what, i + 1);
  }
}

vl_tensor *l_nn_checktensor(lua_State *L, int idx, const char *op, const char *what) {
  /* A freed tensor gets the usual "tensor used after free" from vl_lua_checktensor. */
  if (lua_type(L, idx) != LUA_TUSERDATA)
    l_nn_error(L, "%s: %s must be a tensor, got %s", op, what, luaL_typename(L, idx));
  return vl_lua_checktensor(L, idx);
}


static const luaL_Reg *const l_nn_parts[] = {
    l_norm_funcs,
    l_optim_funcs,
    l_conv_funcs,
    l_check_funcs,
    l_attention_funcs,
    l_fused_funcs,
    NULL, /* keep last */
};

int luaopen_v100_nn_ops(lua_State *L) {
  lua_newtable(L);
  for (int i = 0; l_nn_parts[i]; i++) luaL_setfuncs(L, l_nn_parts[i], 0);
  return 1;
}
