/* bindings/l_amp.c: v100.core._amp, the C side of autocast (runtime/amp/autocast.h) for
 * scripts/v100/amp.lua:
 *   _amp.enter(enabled, dtype) -> prev_enabled, prev_dtype   (opens a region)
 *   _amp.exit(prev_enabled, prev_dtype)                      (closes it, restoring those)
 *   _amp.is_enabled(), _amp.dtype() ('f16'/'bf16'), _amp.depth()
 *   _amp.ops() -> {matmul = 'half', softmax = 'fp32', add = 'promote', ...}
 *   _amp.defaults() -> the same table with the built-in classes
 *   _amp.set_op(name, 'half'|'fp32'|'promote'|'none'), _amp.reset_ops()
 *   _amp.cast(op, v) -> v cast as op's class says (through the weight cache) when it is a tensor to
 *                       cast; v itself otherwise (nil, a number, a tensor that stays)
 *   _amp.stats() -> {casts =, cache_hits =, cached =}, _amp.reset_stats() */
#include <lauxlib.h>
#include <lua.h>

#include "bindings/l_priv.h"
#include "runtime/amp/autocast.h"

static vl_dtype check_half(lua_State *L, int arg) {
  vl_dtype dt = l_checkdtype(L, arg);
  if (dt != VL_F16 && dt != VL_BF16)
    return (vl_dtype)luaL_error(L, "autocast: dtype must be 'fp16' or 'bf16' (got '%s')", lua_tostring(L, arg));
  return dt;
}

static int a_enter(lua_State *L) {
  bool enabled = lua_toboolean(L, 1);
  vl_dtype dt = check_half(L, 2);
  vl_autocast_prev prev;
  vl_status s = vl_autocast_enter(enabled, dt, &prev);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_pushboolean(L, prev.enabled);
  lua_pushstring(L, vl_dtype_name(prev.dtype));
  return 2;
}

static int a_exit(lua_State *L) {
  vl_autocast_prev prev = {lua_toboolean(L, 1), check_half(L, 2)};
  vl_status s = vl_autocast_exit(&prev);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int a_is_enabled(lua_State *L) {
  lua_pushboolean(L, vl_autocast_enabled());
  return 1;
}

static int a_dtype(lua_State *L) {
  lua_pushstring(L, vl_dtype_name(vl_autocast_dtype()));
  return 1;
}

static int a_depth(lua_State *L) {
  lua_pushinteger(L, vl_autocast_depth());
  return 1;
}

static int push_table(lua_State *L, bool defaults) {
  lua_createtable(L, 0, VL_AC_NOPS);
  for (int i = 0; i < VL_AC_NOPS; i++) {
    vl_autocast_op op = (vl_autocast_op)i;
    lua_pushstring(L, vl_autocast_class_name(defaults ? vl_autocast_op_default(op) : vl_autocast_op_class(op)));
    lua_setfield(L, -2, vl_autocast_op_name(op));
  }
  return 1;
}

static int a_ops(lua_State *L) { return push_table(L, false); }
static int a_defaults(lua_State *L) { return push_table(L, true); }

static vl_autocast_op check_op(lua_State *L, int arg) {
  vl_autocast_op op;
  vl_status s = vl_autocast_op_parse(luaL_checkstring(L, arg), &op);
  if (s != VL_OK) vl_lua_error(L, s);
  return op;
}

static int a_set_op(lua_State *L) {
  vl_autocast_op op = check_op(L, 1);
  vl_autocast_class c;
  vl_status s = vl_autocast_class_parse(luaL_checkstring(L, 2), &c);
  if (s == VL_OK) s = vl_autocast_set_op(op, c);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int a_reset_ops(lua_State *L) {
  vl_autocast_reset_ops();
  return 0;
}

static int a_cast(lua_State *L) {
  vl_autocast_op op = check_op(L, 1);
  /* Anything but a live tensor comes back as it is: the caller's own checks report it. */
  vl_tensor *t = vl_lua_testtensor(L, 2);
  if (!t || !vl_autocast_wants(op, 1, &t)) {
    lua_settop(L, 2);
    return 1; /* the same value: nothing to cast */
  }
  vl_tensor **slot = l_slot(L);
  vl_status s = vl_autocast_inputs(op, 1, &t, slot);
  l_done(L, s);
  return 1;
}

static int a_stats(lua_State *L) {
  vl_autocast_stats st;
  vl_autocast_get_stats(&st);
  lua_createtable(L, 0, 3);
  lua_pushinteger(L, (lua_Integer)st.casts);
  lua_setfield(L, -2, "casts");
  lua_pushinteger(L, (lua_Integer)st.cache_hits);
  lua_setfield(L, -2, "cache_hits");
  lua_pushinteger(L, st.cached);
  lua_setfield(L, -2, "cached");
  return 1;
}

static int a_reset_stats(lua_State *L) {
  vl_autocast_reset_stats();
  return 0;
}

static const luaL_Reg amp_funcs[] = {
    {"enter", a_enter},         {"exit", a_exit},   {"is_enabled", a_is_enabled}, {"dtype", a_dtype},
    {"depth", a_depth},         {"ops", a_ops},     {"defaults", a_defaults},     {"set_op", a_set_op},
    {"reset_ops", a_reset_ops}, {"cast", a_cast},   {"stats", a_stats},           {"reset_stats", a_reset_stats},
    {NULL, NULL},
};

int luaopen_v100_amp(lua_State *L) {
  luaL_newlib(L, amp_funcs);
  return 1;
}
