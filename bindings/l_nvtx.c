/* bindings/l_nvtx.c: v100.core._nvtx, the primitives of v100.nvtx (scripts/v100/obs/nvtx.lua;
 * runtime/trace/nvtx.c):
 *   enable(on), enabled(), available(), push(msg), pop(), mark(msg), scope_enter(label) -> token,
 *   scope_leave(token), stats() -> {pushes, pops, depth, scopes}
 * Opening the module reads V100LUA_NVTX (vl_nvtx_enable_from_env). */
#include <lauxlib.h>

#include "runtime/trace/nvtx.h"

static int n_enable(lua_State *L) {
  vl_nvtx_enable(lua_toboolean(L, 1));
  return 0;
}
static int n_enabled(lua_State *L) { return lua_pushboolean(L, vl_nvtx_enabled()), 1; }
static int n_available(lua_State *L) { return lua_pushboolean(L, vl_nvtx_available()), 1; }
static int n_push(lua_State *L) {
  vl_nvtx_push(luaL_checkstring(L, 1));
  return 0;
}
static int n_pop(lua_State *L) {
  vl_nvtx_pop();
  return 0;
}
static int n_mark(lua_State *L) {
  vl_nvtx_mark(luaL_checkstring(L, 1));
  return 0;
}
static int n_scope_enter(lua_State *L) {
  lua_pushinteger(L, vl_nvtx_scope_enter(luaL_checkstring(L, 1)));
  return 1;
}
static int n_scope_leave(lua_State *L) {
  vl_nvtx_scope_leave((int)luaL_checkinteger(L, 1));
  return 0;
}
static int n_stats(lua_State *L) {
  vl_nvtx_stats st;
  vl_nvtx_get_stats(&st);
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, (lua_Integer)st.pushes), lua_setfield(L, -2, "pushes");
  lua_pushinteger(L, (lua_Integer)st.pops), lua_setfield(L, -2, "pops");
  lua_pushinteger(L, st.depth), lua_setfield(L, -2, "depth");
  lua_pushinteger(L, st.scopes), lua_setfield(L, -2, "scopes");
  return 1;
}

static const luaL_Reg nvtx_funcs[] = {
    {"enable", n_enable}, {"enabled", n_enabled}, {"available", n_available},         {"push", n_push},
    {"pop", n_pop},       {"mark", n_mark},       {"scope_enter", n_scope_enter},     {"scope_leave", n_scope_leave},
    {"stats", n_stats},   {NULL, NULL},
};

int luaopen_v100_nvtx(lua_State *L) {
  vl_nvtx_enable_from_env();
  luaL_newlib(L, nvtx_funcs);
  return 1;
}
