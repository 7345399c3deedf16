/* bindings/l_einsum.c: v100.einsum(equation, a, b, ...) and v100.einsum(equation, {a, b, ...}):
 * the operands gathered into an array, everything else (the equation's parsing and checks, the
 * contraction, autograd) in runtime/ops/einsum.c and runtime/autograd/ops_einsum.c. */
#include "bindings/l_priv.h"
#include "runtime/autograd/ops.h"

/* Raises the message without a "file:line:" prefix, as the runtime's errors are raised. */
static int operand_error(lua_State *L, int k, int idx) {
  if (luaL_testudata(L, idx, VL_LUA_TENSOR_MT)) return luaL_error(L, "tensor used after free");
  lua_pushfstring(L, "einsum: operand %d is a %s, not a tensor", k, luaL_typename(L, idx));
  return lua_error(L);
}

static int m_einsum(lua_State *L) {
  const char *eq = luaL_checkstring(L, 1);
  bool list = lua_type(L, 2) == LUA_TTABLE && !vl_lua_testtensor(L, 2);
  int n = list ? (int)lua_rawlen(L, 2) : lua_gettop(L) - 1;
  if (n < 1) {
    lua_pushfstring(L, "einsum '%s': no operands (einsum(equation, a, b, ...) or einsum(equation, {a, b, ...}))", eq);
    return lua_error(L);
  }
  if (list) lua_settop(L, 2);
  /* the pointer array is a userdata so that a type error midway leaks nothing */
  vl_tensor **ts = (vl_tensor **)lua_newuserdatauv(L, sizeof(vl_tensor *) * (size_t)n, 0);
  for (int k = 0; k < n; k++) {
    int idx = k + 2;
    if (list) {
      lua_rawgeti(L, 2, k + 1);
      idx = lua_gettop(L);
    }
    ts[k] = vl_lua_testtensor(L, idx);
    if (!ts[k]) return operand_error(L, k + 1, idx);
    if (list) lua_pop(L, 1);
  }
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_einsum(eq, n, ts, slot));
}

void l_register_einsum(lua_State *L) {
  lua_pushcfunction(L, m_einsum);
  lua_setfield(L, -2, "einsum");
}
