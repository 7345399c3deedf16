/* bindings/l_log.c: TensorBoard event files and small host helpers for logging, in v100.io:
 *   v100.io.EventWriter(dir) -> w    creates dir and events.out.tfevents.<secs>.<host>.<pid>.v100lua in it
 *     w:scalar(tag, value, step[, wall_time])   one scalar Event (wall_time: Unix seconds, default now)
 *     w:flush(), w:close() (also __gc and __close; idempotent), w.path
 *   v100.io.read_events(path) -> {file_version = 'brain.Event:2' | nil, records = n,
 *                                 {wall_time =, step =, tag =, value =}, ...,
 *                                 torn = 'record 4 (byte 120): truncated: ...' | nil, torn_at = byte | nil}
 *   v100.io.check_event_tag(tag)      raises what w:scalar would raise for that tag (empty, NUL, not UTF-8)
 *   v100.io.isatty(fd) -> bool        for the progress bar (0 stdin, 1 stdout, 2 stderr)
 *   v100.io.unix_time() -> seconds    since the epoch (float), the wall time of log records
 *   v100.io.makedirs(path)            mkdir -p
 * The formats are in runtime/io/tfevents.h. */
#define _POSIX_C_SOURCE 200809L
#include "bindings/l_log.h"

#include <lauxlib.h>
#include <string.h>
#include <unistd.h>

#include "bindings/vl_lua.h"
#include "runtime/io/fsutil.h"
#include "runtime/io/tfevents.h"

#define EVENT_WRITER_MT "v100.io.EventWriter"

typedef struct l_writer {
  vl_tfevents *w; /* NULL once closed */
} l_writer;

static const char *check_path(lua_State *L, int idx, const char *fname) {
  size_t len;
  const char *p = luaL_checklstring(L, idx, &len);
  if (strlen(p) != len) luaL_error(L, "%s: the path \"%s...\" contains a NUL byte", fname, p);
  if (len == 0) luaL_error(L, "%s: the path is empty", fname);
  return p;
}

static int l_event_writer(lua_State *L) {
  const char *dir = check_path(L, 1, "EventWriter");
  l_writer *ud = lua_newuserdatauv(L, sizeof *ud, 1);
  ud->w = NULL;
  luaL_setmetatable(L, EVENT_WRITER_MT);
  vl_tfevents *w = NULL;
  vl_status s = vl_tfevents_open(dir, &w);
  if (s != VL_OK) return vl_lua_error(L, s);
  ud->w = w;
  lua_pushstring(L, vl_tfevents_path(w)); /* kept for w.path after close */
  lua_setiuservalue(L, -2, 1);
  return 1;
}

static l_writer *check_writer(lua_State *L) { return luaL_checkudata(L, 1, EVENT_WRITER_MT); }

static vl_tfevents *open_writer(lua_State *L, const char *fname) {
  l_writer *ud = check_writer(L);
  if (!ud->w) {
    lua_getiuservalue(L, 1, 1);
    luaL_error(L, "EventWriter:%s: the writer of %s is closed", fname, lua_tostring(L, -1));
  }
  return ud->w;
}

static int w_scalar(lua_State *L) {
  vl_tfevents *w = open_writer(L, "scalar");
  if (lua_type(L, 2) != LUA_TSTRING)
    return luaL_error(L, "EventWriter:scalar: the tag must be a string, got %s", luaL_typename(L, 2));
  size_t tag_len;
  const char *tag = lua_tolstring(L, 2, &tag_len);
  if (lua_type(L, 3) != LUA_TNUMBER)
    return luaL_error(L, "EventWriter:scalar: the value of \"%s\" must be a number, got %s", tag, luaL_typename(L, 3));
  double value = lua_tonumber(L, 3);
  int isint;
  lua_Integer step = lua_tointegerx(L, 4, &isint);
  if (!isint)
    return luaL_error(L, "EventWriter:scalar: the step of \"%s\" must be an integer, got %s", tag,
                      lua_type(L, 4) == LUA_TNUMBER ? lua_tostring(L, 4) : luaL_typename(L, 4));
  double wall = lua_isnoneornil(L, 5) ? vl_unix_time() : luaL_checknumber(L, 5);
  vl_status s = vl_tfevents_scalar(w, tag, tag_len, value, (int64_t)step, wall);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int w_flush(lua_State *L) {
  vl_status s = vl_tfevents_flush(open_writer(L, "flush"));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

/* close(), __gc and __close: the first closes (a failure is an error from close() and __close;
 * from __gc, which must not raise, it is dropped), later calls do nothing. */
static int w_close(lua_State *L) {
  l_writer *ud = check_writer(L);
  vl_tfevents *w = ud->w;
  ud->w = NULL;
  vl_status s = vl_tfevents_close(w);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int w_gc(lua_State *L) {
  l_writer *ud = check_writer(L);
  vl_tfevents *w = ud->w;
  ud->w = NULL;
  vl_tfevents_close(w);
  return 0;
}

static int w_index(lua_State *L) {
  const char *k = lua_tostring(L, 2);
  if (k && strcmp(k, "path") == 0) {
    lua_getiuservalue(L, 1, 1);
    return 1;
  }
  if (k && strcmp(k, "closed") == 0) {
    lua_pushboolean(L, check_writer(L)->w == NULL);
    return 1;
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

static int w_tostring(lua_State *L) {
  l_writer *ud = check_writer(L);
  lua_getiuservalue(L, 1, 1);
  lua_pushfstring(L, "[v100.io.EventWriter %s%s]", lua_tostring(L, -1), ud->w ? "" : " (closed)");
  return 1;
}

#define EVENTS_BOX_MT "v100.io.events_box"

/* The decoded file lives in a userdata until the Lua table is built, so that a memory error
 * raised while building it cannot leak the C copy. */
static int box_gc(lua_State *L) {
  vl_tfevents_data_free(luaL_checkudata(L, 1, EVENTS_BOX_MT));
  return 0;
}

static int l_read_events(lua_State *L) {
  const char *path = check_path(L, 1, "read_events");
  vl_tfevents_data *d = lua_newuserdatauv(L, sizeof *d, 0);
  memset(d, 0, sizeof *d);
  luaL_setmetatable(L, EVENTS_BOX_MT);
  vl_status s = vl_tfevents_read(path, d);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_createtable(L, d->n > (size_t)0x7fffffff ? 0 : (int)d->n, 2);
  for (size_t i = 0; i < d->n; i++) {
    lua_createtable(L, 0, 4);
    lua_pushnumber(L, d->ev[i].wall_time);
    lua_setfield(L, -2, "wall_time");
    lua_pushinteger(L, (lua_Integer)d->ev[i].step);
    lua_setfield(L, -2, "step");
    lua_pushlstring(L, d->ev[i].tag, d->ev[i].tag_len);
    lua_setfield(L, -2, "tag");
    lua_pushnumber(L, (lua_Number)d->ev[i].value);
    lua_setfield(L, -2, "value");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  if (d->file_version) {
    lua_pushstring(L, d->file_version);
    lua_setfield(L, -2, "file_version");
  }
  lua_pushinteger(L, (lua_Integer)d->records);
  lua_setfield(L, -2, "records");
  if (d->torn) { /* the whole records before the tear were read (runtime/io/tfevents.h) */
    lua_pushstring(L, d->torn_what);
    lua_setfield(L, -2, "torn");
    lua_pushinteger(L, (lua_Integer)d->torn_at);
    lua_setfield(L, -2, "torn_at");
  }
  vl_tfevents_data_free(d); /* now rather than at the box's collection */
  return 1;
}

static int l_check_event_tag(lua_State *L) {
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "EventWriter:scalar: the tag must be a string, got %s", luaL_typename(L, 1));
  size_t n;
  const char *tag = lua_tolstring(L, 1, &n);
  vl_status s = vl_tfevents_check_tag(tag, n);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_pushboolean(L, 1);
  return 1;
}

static int l_isatty(lua_State *L) {
  int isint;
  lua_Integer fd = lua_tointegerx(L, 1, &isint);
  if (!isint || fd < 0 || fd > 0x7fffffff)
    return luaL_error(L, "isatty: the file descriptor must be a non-negative integer (0 stdin, 1 stdout, 2 stderr), got %s",
                      lua_type(L, 1) == LUA_TNUMBER ? lua_tostring(L, 1) : luaL_typename(L, 1));
  lua_pushboolean(L, isatty((int)fd) == 1);
  return 1;
}

static int l_unix_time(lua_State *L) {
  lua_pushnumber(L, vl_unix_time());
  return 1;
}

static int l_makedirs(lua_State *L) {
  vl_status s = vl_fs_mkdir("makedirs", check_path(L, 1, "makedirs"));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static const luaL_Reg writer_methods[] = {
    {"scalar", w_scalar},
    {"flush", w_flush},
    {"close", w_close},
    {NULL, NULL},
};

static const luaL_Reg log_funcs[] = {
    {"EventWriter", l_event_writer},
    {"read_events", l_read_events},
    {"check_event_tag", l_check_event_tag},
    {"isatty", l_isatty},
    {"unix_time", l_unix_time},
    {"makedirs", l_makedirs},
    {NULL, NULL},
};

void l_io_register_log(lua_State *L) {
  vl_lua_class(L, EVENT_WRITER_MT, writer_methods, w_index, w_gc, w_close, w_tostring);
  if (luaL_newmetatable(L, EVENTS_BOX_MT)) {
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, log_funcs, 0);
}
