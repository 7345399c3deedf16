/* bindings/l_ckpt.c: v100._ckpt, the primitives of scripts/v100/checkpoint.lua.
 *   fsync_dir(path), list_dir(path) -> {names, sorted}, remove_tree(path),
 *   rename(from, to[, exchange]), write_atomic(path, string), pid() -> this process's id,
 *   pid_alive(pid) -> boolean, is_dir(path) -> boolean, truncate(path, size)
 *                                                             (runtime/io/fsutil.h)
 *   open_append(path) -> a Lua file (io library) open for appending, opened under replace.h's
 *   symlink rule (Lua's io.open would follow any link another user planted)
 * Directories are made with v100.io.makedirs and JSON is v100.io.json_encode/json_decode
 * (bindings/l_log.c, bindings/l_json.c): one of each for the logger and the checkpoints. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "bindings/l_priv.h"
#include "runtime/io/fsutil.h"
#include "runtime/io/replace.h"

static const char *check_path(lua_State *L, int idx, const char *op) {
  size_t len;
  const char *p = luaL_checklstring(L, idx, &len);
  if (strlen(p) != len) luaL_error(L, "%s: the path \"%s...\" contains a NUL byte", op, p);
  return p;
}

static int status_or_true(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_pushboolean(L, 1);
  return 1;
}

static int c_fsync_dir(lua_State *L) { return status_or_true(L, vl_fs_fsync_dir(check_path(L, 1, "fsync_dir"))); }
static int c_remove_tree(lua_State *L) { return status_or_true(L, vl_fs_remove_tree(check_path(L, 1, "remove_tree"))); }

static int c_truncate(lua_State *L) {
  const char *path = check_path(L, 1, "truncate");
  lua_Integer n = luaL_checkinteger(L, 2);
  luaL_argcheck(L, n >= 0, 2, "size must not be negative");
  return status_or_true(L, vl_fs_truncate(path, (uint64_t)n));
}

static int c_rename(lua_State *L) {
  const char *from = check_path(L, 1, "rename"), *to = check_path(L, 2, "rename");
  return status_or_true(L, vl_fs_rename(from, to, lua_toboolean(L, 3)));
}

static int c_list_dir(lua_State *L) {
  char **names = NULL;
  int n = 0;
  vl_status s = vl_fs_list_dir(check_path(L, 1, "list_dir"), &names, &n);
  if (s != VL_OK) return vl_lua_error(L, s);
  /* the strings move into Lua before anything can raise (lua_createtable may: then they leak
   * only on out-of-memory, which ends the state anyway) */
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushstring(L, names[i]);
    lua_rawseti(L, -2, i + 1);
  }
  vl_fs_free_list(names, n);
  return 1;
}

static int c_write_atomic(lua_State *L) {
  const char *path = check_path(L, 1, "write_atomic");
  size_t n;
  const char *bytes = luaL_checklstring(L, 2, &n);
  return status_or_true(L, vl_fs_write_atomic(path, bytes, n));
}

/* The io library's close function for a luaL_Stream (lauxlib.h documents the layout). */
static int stream_close(lua_State *L) {
  luaL_Stream *p = (luaL_Stream *)luaL_checkudata(L, 1, LUA_FILEHANDLE);
  int ok = fclose(p->f) == 0;
  return luaL_fileresult(L, ok, NULL);
}

static int c_open_append(lua_State *L) {
  const char *path = check_path(L, 1, "open_append");
  luaL_Stream *p = (luaL_Stream *)lua_newuserdatauv(L, sizeof(luaL_Stream), 0);
  p->closef = NULL; /* a closed file until it is open: collectable at any point */
  luaL_setmetatable(L, LUA_FILEHANDLE);
  int fd = -1;
  vl_status s = vl_replace_open_append("open_append", path, &fd);
  if (s != VL_OK) return vl_lua_error(L, s);
  p->f = fdopen(fd, "a");
  if (!p->f) {
    int e = errno;
    close(fd);
    return luaL_error(L, "open_append: %s: %s", path, strerror(e));
  }
  p->closef = stream_close;
  return 1;
}

static int c_pid(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)getpid());
  return 1;
}

static int c_pid_alive(lua_State *L) {
  lua_pushboolean(L, vl_fs_pid_alive((long)luaL_checkinteger(L, 1)));
  return 1;
}

static int c_is_dir(lua_State *L) {
  lua_pushboolean(L, vl_fs_is_dir(check_path(L, 1, "is_dir")));
  return 1;
}

static const luaL_Reg ckpt_funcs[] = {
    {"fsync_dir", c_fsync_dir}, {"list_dir", c_list_dir},   {"remove_tree", c_remove_tree},
    {"rename", c_rename},       {"write_atomic", c_write_atomic}, {"pid", c_pid},
    {"pid_alive", c_pid_alive}, {"is_dir", c_is_dir},         {"truncate", c_truncate},
    {"open_append", c_open_append}, {NULL, NULL},
};

int luaopen_v100_ckpt(lua_State *L) {
  luaL_newlib(L, ckpt_funcs);
  return 1;
}
