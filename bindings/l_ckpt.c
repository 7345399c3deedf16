/* bindings/l_ckpt.c: v100._ckpt, the primitives of scripts/v100/checkpoint.lua.
 *   mkdir(path), fsync_dir(path), list_dir(path) -> {names, sorted}, remove_tree(path),
 *   rename(from, to[, exchange]), write_atomic(path, string), pid() -> this process's id,
 *   pid_alive(pid) -> boolean, is_dir(path) -> boolean        (runtime/io/fsutil.h)
 *   json_encode(value[, pretty]) -> string, json_decode(string[, what]) -> value   (cJSON)
 * JSON: a table whose keys are exactly 1..n is an array, any other table an object (integer keys
 * written as their decimal text, other key types are errors); an empty table is {}. Numbers keep
 * their exact value (cJSON writes the shortest text that reads back as the same double); an
 * integer beyond 2^53, which a double cannot hold, is written as {"__int64__": "<decimal>"} and
 * read back as that integer (RNG seeds and offsets are 64-bit). On reading, a number that is a
 * whole value within 2^53 becomes a Lua integer, any other a float; null becomes nil. NaN, inf,
 * functions, userdata, strings with a NUL and cycles are errors naming the key path. */
#define _POSIX_C_SOURCE 200809L
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bindings/l_priv.h"
#include "runtime/io/fsutil.h"

#define JSON_MAX_DEPTH 64
#define EXACT_INT ((lua_Integer)1 << 53)

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

static int c_mkdir(lua_State *L) { return status_or_true(L, vl_fs_mkdir(check_path(L, 1, "mkdir"))); }
static int c_fsync_dir(lua_State *L) { return status_or_true(L, vl_fs_fsync_dir(check_path(L, 1, "fsync_dir"))); }
static int c_remove_tree(lua_State *L) { return status_or_true(L, vl_fs_remove_tree(check_path(L, 1, "remove_tree"))); }

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

/* ---- JSON ---- */

/* The JSON being built lives in a userdata so that a Lua error (a bad value) cannot leak it. */
typedef struct { cJSON *root; } json_box;
static int box_gc(lua_State *L) {
  json_box *b = (json_box *)lua_touserdata(L, 1);
  if (b->root) cJSON_Delete(b->root);
  b->root = NULL;
  return 0;
}

/* The key path of the value being encoded, for messages ("state.args.lr"). */
typedef struct { const char *keys[JSON_MAX_DEPTH + 1]; int depth; } key_path;
static const char *path_str(lua_State *L, const key_path *kp) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  if (kp->depth == 0) luaL_addstring(&b, "(top level)");
  for (int i = 0; i < kp->depth; i++) {
    if (i) luaL_addchar(&b, '.');
    luaL_addstring(&b, kp->keys[i]);
  }
  luaL_pushresult(&b);
  return lua_tostring(L, -1);
}

static cJSON *encode(lua_State *L, int idx, key_path *kp);

/* Adds an item and raises (after freeing it) when cJSON cannot. */
static void add_or_fail(lua_State *L, cJSON *parent, const char *key, cJSON *item) {
  int ok = key ? cJSON_AddItemToObject(parent, key, item) : cJSON_AddItemToArray(parent, item);
  if (!ok) {
    cJSON_Delete(item);
    luaL_error(L, "json_encode: out of memory");
  }
}

static int cmp_item(const void *a, const void *b) {
  return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* Puts an object's members in key order, so that the same table always gives the same text
 * (Lua's iteration order varies between runs). */
static void sort_members(lua_State *L, cJSON *obj) {
  int n = cJSON_GetArraySize(obj);
  if (n < 2) return;
  cJSON **v = (cJSON **)lua_newuserdatauv(L, sizeof *v * (size_t)n, 0);
  int i = 0;
  for (cJSON *c = obj->child; c; c = c->next) v[i++] = c;
  qsort(v, (size_t)n, sizeof *v, cmp_item);
  for (i = 0; i < n; i++) {
    v[i]->prev = i ? v[i - 1] : v[n - 1]; /* cJSON: the first's prev is the last */
    v[i]->next = i + 1 < n ? v[i + 1] : NULL;
  }
  obj->child = v[0];
  lua_pop(L, 1);
}

/* Encodes the table at idx into parent (already anchored in the box). */
static void encode_table(lua_State *L, int idx, cJSON *parent, int is_array, lua_Integer n, key_path *kp) {
  char num[32];
  if (is_array) {
    for (lua_Integer i = 1; i <= n; i++) {
      lua_rawgeti(L, idx, i);
      snprintf(num, sizeof num, "%lld", (long long)i);
      kp->keys[kp->depth++] = num;
      cJSON *item = encode(L, lua_gettop(L), kp);
      kp->depth--;
      lua_pop(L, 1);
      add_or_fail(L, parent, NULL, item);
    }
    return;
  }
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    const char *key;
    if (lua_type(L, -2) == LUA_TSTRING) {
      size_t len;
      key = lua_tolstring(L, -2, &len);
      if (strlen(key) != len) luaL_error(L, "json_encode: %s: a key contains a NUL byte", path_str(L, kp));
    } else if (lua_isinteger(L, -2)) {
      snprintf(num, sizeof num, "%lld", (long long)lua_tointeger(L, -2));
      key = num;
    } else {
      return (void)luaL_error(L, "json_encode: %s: keys must be strings or integers, got a %s key", path_str(L, kp),
                              luaL_typename(L, -2));
    }
    /* key must outlive the recursion's messages: a string key is held by the table */
    kp->keys[kp->depth++] = key;
    cJSON *item = encode(L, lua_gettop(L), kp);
    kp->depth--;
    add_or_fail(L, parent, key, item);
    lua_pop(L, 1);
  }
  sort_members(L, parent);
}

/* The Lua value at idx as a new cJSON item (the caller anchors it); raises on what JSON cannot hold. */
static cJSON *encode(lua_State *L, int idx, key_path *kp) {
  if (kp->depth >= JSON_MAX_DEPTH) luaL_error(L, "json_encode: %s: nested deeper than %d (a cycle?)", path_str(L, kp), JSON_MAX_DEPTH);
  luaL_checkstack(L, 8, "json_encode");
  cJSON *item = NULL;
  switch (lua_type(L, idx)) {
  case LUA_TNIL: item = cJSON_CreateNull(); break;
  case LUA_TBOOLEAN: item = cJSON_CreateBool(lua_toboolean(L, idx)); break;
  case LUA_TNUMBER:
    if (lua_isinteger(L, idx)) {
      lua_Integer v = lua_tointeger(L, idx);
      if (v >= -EXACT_INT && v <= EXACT_INT) {
        item = cJSON_CreateNumber((double)v);
      } else {
        char num[32];
        snprintf(num, sizeof num, "%lld", (long long)v);
        item = cJSON_CreateObject();
        if (item && !cJSON_AddStringToObject(item, "__int64__", num)) cJSON_Delete(item), item = NULL;
      }
    } else {
      double d = lua_tonumber(L, idx);
      if (!isfinite(d)) luaL_error(L, "json_encode: %s: %f cannot be written as JSON", path_str(L, kp), d);
      item = cJSON_CreateNumber(d);
    }
    break;
  case LUA_TSTRING: {
    size_t len;
    const char *s = lua_tolstring(L, idx, &len);
    if (strlen(s) != len) luaL_error(L, "json_encode: %s: the string contains a NUL byte", path_str(L, kp));
    item = cJSON_CreateString(s);
    break;
  }
  case LUA_TTABLE: {
    lua_Integer n = (lua_Integer)lua_rawlen(L, idx), count = 0;
    int all_seq = 1;
    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
      count++;
      if (!lua_isinteger(L, -2) || lua_tointeger(L, -2) < 1 || lua_tointeger(L, -2) > n) all_seq = 0;
      lua_pop(L, 1);
    }
    int is_array = count > 0 && all_seq && count == n;
    item = is_array ? cJSON_CreateArray() : cJSON_CreateObject();
    if (!item) break;
    /* anchored in a box while the children are made (they may raise) */
    json_box *b = (json_box *)lua_newuserdatauv(L, sizeof *b, 0);
    b->root = item;
    lua_newtable(L);
    lua_pushcfunction(L, box_gc);
    lua_setfield(L, -2, "__gc");
    lua_setmetatable(L, -2);
    encode_table(L, idx, item, is_array, n, kp);
    b->root = NULL; /* handed to the caller */
    lua_pop(L, 1);
    break;
  }
  default:
    luaL_error(L, "json_encode: %s: a %s cannot be written as JSON", path_str(L, kp), luaL_typename(L, idx));
  }
  if (!item) luaL_error(L, "json_encode: out of memory");
  return item;
}

static int c_json_encode(lua_State *L) {
  luaL_checkany(L, 1);
  int pretty = lua_toboolean(L, 2);
  lua_settop(L, 1);
  key_path kp = {{0}, 0};
  json_box *b = (json_box *)lua_newuserdatauv(L, sizeof *b, 0);
  b->root = NULL;
  lua_newtable(L);
  lua_pushcfunction(L, box_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  b->root = encode(L, 1, &kp);
  char *text = pretty ? cJSON_Print(b->root) : cJSON_PrintUnformatted(b->root);
  if (!text) return luaL_error(L, "json_encode: out of memory");
  lua_pushstring(L, text);
  cJSON_free(text);
  return 1;
}

static void decode(lua_State *L, const cJSON *x, int depth) {
  if (depth > JSON_MAX_DEPTH) luaL_error(L, "json_decode: nested deeper than %d", JSON_MAX_DEPTH);
  luaL_checkstack(L, 8, "json_decode");
  if (cJSON_IsNull(x) || cJSON_IsInvalid(x)) {
    lua_pushnil(L);
  } else if (cJSON_IsBool(x)) {
    lua_pushboolean(L, cJSON_IsTrue(x));
  } else if (cJSON_IsNumber(x)) {
    double d = x->valuedouble;
    if (d == floor(d) && fabs(d) <= (double)EXACT_INT) lua_pushinteger(L, (lua_Integer)d);
    else lua_pushnumber(L, d);
  } else if (cJSON_IsString(x)) {
    lua_pushstring(L, x->valuestring);
  } else if (cJSON_IsArray(x)) {
    lua_createtable(L, cJSON_GetArraySize(x), 0);
    lua_Integer i = 1;
    const cJSON *c;
    cJSON_ArrayForEach(c, x) {
      decode(L, c, depth + 1);
      lua_rawseti(L, -2, i++);
    }
  } else { /* object */
    const cJSON *big = cJSON_GetObjectItemCaseSensitive(x, "__int64__");
    if (cJSON_IsString(big) && cJSON_GetArraySize(x) == 1) {
      char *end = NULL;
      long long v = strtoll(big->valuestring, &end, 10);
      if (end == big->valuestring || *end) luaL_error(L, "json_decode: bad __int64__ \"%s\"", big->valuestring);
      lua_pushinteger(L, (lua_Integer)v);
      return;
    }
    lua_newtable(L);
    const cJSON *c;
    cJSON_ArrayForEach(c, x) {
      decode(L, c, depth + 1);
      lua_setfield(L, -2, c->string);
    }
  }
}

static int c_json_decode(lua_State *L) {
  size_t len;
  const char *text = luaL_checklstring(L, 1, &len);
  const char *what = luaL_optstring(L, 2, "JSON text");
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
  if (!root) {
    size_t at = end && end >= text ? (size_t)(end - text) : 0;
    return luaL_error(L, "json_decode: %s: not valid JSON (at byte %d)", what, (int)at);
  }
  json_box *b = (json_box *)lua_newuserdatauv(L, sizeof *b, 0);
  b->root = root;
  lua_newtable(L);
  lua_pushcfunction(L, box_gc);
  lua_setfield(L, -2, "__gc");
  lua_setmetatable(L, -2);
  decode(L, root, 0);
  cJSON_Delete(root);
  b->root = NULL;
  return 1;
}

static const luaL_Reg ckpt_funcs[] = {
    {"mkdir", c_mkdir},           {"fsync_dir", c_fsync_dir},     {"list_dir", c_list_dir},
    {"remove_tree", c_remove_tree}, {"rename", c_rename},         {"write_atomic", c_write_atomic},
    {"pid", c_pid},               {"pid_alive", c_pid_alive},     {"is_dir", c_is_dir},
    {"json_encode", c_json_encode}, {"json_decode", c_json_decode}, {NULL, NULL},
};

int luaopen_v100_ckpt(lua_State *L) {
  luaL_newlib(L, ckpt_funcs);
  return 1;
}
