/* bindings/l_io.c: v100.io, the host side of scripts: files that become tensors, and a clock.
 *   v100.io.read_idx(path) -> tensor (CPU; u8, i32, f32 or f64 as runtime/io/idx.h maps the type)
 *   v100.io.time() -> seconds (float) of a monotonic wall clock, for timing loops: Lua's own
 *                     os.time() counts whole seconds and os.clock() counts CPU time of all
 *                     threads (BLAS threads included), neither of which is elapsed time.
 * Logging adds EventWriter, read_events, isatty, unix_time and makedirs (bindings/l_log.c) and
 * json_encode/json_decode (bindings/l_json.c) to the same table.
 * The core module stores this table as v100.io (luaopen_v100_io). */
#define _POSIX_C_SOURCE 200809L
#include <lauxlib.h>
#include <lua.h>
#include <string.h>
#include <time.h>

#include "bindings/l_log.h"
#include "bindings/vl_lua.h"
#include "runtime/io/idx.h"

static int l_read_idx(lua_State *L) {
  size_t len;
  const char *path = luaL_checklstring(L, 1, &len);
  /* The C side would open the path cut at the NUL: a different file. */
  if (strlen(path) != len) return luaL_error(L, "read_idx: the path \"%s...\" contains a NUL byte", path);
  vl_tensor *t = NULL;
  vl_status s = vl_idx_read(path, &t);
  if (s != VL_OK) return vl_lua_error(L, s);
  vl_lua_pushtensor(L, t); /* takes our reference */
  return 1;
}

static int l_time(lua_State *L) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  lua_pushnumber(L, (lua_Number)ts.tv_sec + 1e-9 * (lua_Number)ts.tv_nsec);
  return 1;
}

static const luaL_Reg io_funcs[] = {
    {"read_idx", l_read_idx},
    {"time", l_time},
    {NULL, NULL},
};

int luaopen_v100_io(lua_State *L) {
  luaL_newlib(L, io_funcs);
  l_io_register_log(L);
  l_io_register_json(L);
  return 1;
}
