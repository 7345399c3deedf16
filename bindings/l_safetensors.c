/* bindings/l_safetensors.c: checkpoints in the safetensors format (runtime/io/safetensors.h).
 *   v100.load_safetensors(path[, opts]) -> {name = tensor, ...}, {metadata key = value, ...}
 *     opts: {device=, dtype=} (or a bare device/dtype string): the tensors are read into host
 *     memory and then converted; without opts they stay f32/... CPU tensors as stored.
 *   v100.save_safetensors(path, {name = tensor, ...}[, {key = value, ...}])
 *     any device, dtype or strides; metadata values are strings (numbers and booleans are
 *     written as their text). A path ending in .gz is compressed. Names, metadata and paths
 *     with a NUL byte are errors (C would see them cut at the NUL); the save is atomic and
 *     durable (runtime/io/replace.h).
 * Registered on the core module through l_safetensors_funcs (bindings/l_core.c).
 *
 * v100.core._serial: the two primitives v100.serial (scripts/v100/serial.lua) needs to save
 * storages once and views as views:
 *   _serial.storage(t) -> id, numel   the identity of t's storage (an integer, equal for views of
 *     one storage while they live) and its length in elements of t's dtype
 *   _serial.as_strided(t, size, stride, offset) -> a view of t's storage (vl_as_strided: checked
 *     against the storage's bytes, strides >= 0); not recorded by autograd (a loaded tensor is a
 *     leaf), so not a Tensor method. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/ops/ops.h"
#include "runtime/io/safetensors.h"

#define ST_HOLDER_MT "v100.safetensors_holder"

/* The string at idx as a C string; a Lua string with an embedded NUL would reach the C side cut
 * at the NUL ("a\0evil" saved as "a"), so it is an error naming the string with escapes. */
static const char *check_cstring(lua_State *L, int idx, const char *op, const char *path, const char *kind) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (strlen(s) == len) return s;
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  for (size_t i = 0; i < len && i < 200; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c == 0) luaL_addstring(&b, "\\0");
    else if (c < 0x20 || c >= 0x7F) {
      char hex[8];
      snprintf(hex, sizeof hex, "\\x%02X", c);
      luaL_addstring(&b, hex);
    } else {
      luaL_addchar(&b, (char)c);
    }
  }
  luaL_pushresult(&b);
  if (path) luaL_error(L, "%s: %s: %s \"%s\" contains a NUL byte", op, path, kind, lua_tostring(L, -1));
  else luaL_error(L, "%s: %s \"%s\" contains a NUL byte", op, kind, lua_tostring(L, -1));
  return NULL; /* not reached: luaL_error raises */
}

/* A loaded file lives in a userdata until its tensors have moved into Lua, so that a Lua error
 * in between (an out-of-memory while building the table) cannot leak it. */
static int holder_gc(lua_State *L) {
  vl_safetensors_free((vl_safetensors *)luaL_checkudata(L, 1, ST_HOLDER_MT));
  return 0;
}

static vl_safetensors *new_holder(lua_State *L) {
  vl_safetensors *st = (vl_safetensors *)lua_newuserdatauv(L, sizeof *st, 0);
  memset(st, 0, sizeof *st);
  if (luaL_newmetatable(L, ST_HOLDER_MT)) {
    lua_pushcfunction(L, holder_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_setmetatable(L, -2);
  return st;
}

static int l_load_safetensors(lua_State *L) {
  luaL_checkstring(L, 1);
  const char *path = check_cstring(L, 1, "load_safetensors", NULL, "path");
  vl_dtype dt = VL_NDTYPES; /* VL_NDTYPES: keep the stored dtype */
  vl_device dev = vl_cpu_device();
  l_opts(L, 2, "load_safetensors", false, &dt, &dev);
  vl_safetensors *st = new_holder(L);
  vl_status s = vl_safetensors_read(path, st);
  if (s != VL_OK) return vl_lua_error(L, s);
  /* Conversions first, so that a failure (device OOM) names the tensor before any is pushed. */
  for (int i = 0; i < st->n; i++) {
    vl_tensor *t = st->tensors[i];
    vl_dtype want = dt == VL_NDTYPES ? t->dtype : dt;
    if (want == t->dtype && vl_device_eq(dev, t->storage->device)) continue;
    vl_tensor *u = NULL;
    s = vl_to(t, want, dev, &u);
    if (s != VL_OK) {
      vl_fail_prefix(s, "load_safetensors: %s: tensor \"%s\": ", path, st->names[i]);
      return vl_lua_error(L, s);
    }
    vl_tensor_release(t);
    st->tensors[i] = u;
  }
  int holder = lua_gettop(L);
  lua_createtable(L, 0, st->n);
  for (int i = 0; i < st->n; i++) {
    vl_tensor *t = st->tensors[i];
    st->tensors[i] = NULL; /* the userdata takes the reference */
    vl_lua_pushtensor(L, t);
    lua_setfield(L, -2, st->names[i]);
  }
  lua_createtable(L, 0, st->nmeta);
  for (int i = 0; i < st->nmeta; i++) {
    lua_pushstring(L, st->meta_values[i]);
    lua_setfield(L, -2, st->meta_keys[i]);
  }
  vl_safetensors_free(st);
  lua_remove(L, holder);
  return 2;
}

/* Counts the entries of the table at idx. */
static int table_count(lua_State *L, int idx) {
  int n = 0;
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    n++;
    lua_pop(L, 1);
  }
  return n;
}

static int l_save_safetensors(lua_State *L) {
  luaL_checkstring(L, 1);
  const char *path = check_cstring(L, 1, "save_safetensors", NULL, "path");
  luaL_checktype(L, 2, LUA_TTABLE);
  int has_meta = !lua_isnoneornil(L, 3);
  if (has_meta) luaL_checktype(L, 3, LUA_TTABLE);
  lua_settop(L, 3);

  int n = table_count(L, 2);
  /* Arrays in userdata: collected even when an argument error below unwinds. */
  const char **names = (const char **)lua_newuserdatauv(L, sizeof *names * (size_t)(n + 1), 0);
  vl_tensor **tensors = (vl_tensor **)lua_newuserdatauv(L, sizeof *tensors * (size_t)(n + 1), 0);
  int i = 0;
  lua_pushnil(L);
  while (lua_next(L, 2) != 0) {
    if (lua_type(L, -2) != LUA_TSTRING)
      return luaL_error(L, "save_safetensors: %s: names must be strings, got a %s key", path,
                        luaL_typename(L, -2));
    const char *name = check_cstring(L, -2, "save_safetensors", path, "tensor name"); /* kept alive by the table at 2 */
    vl_tensor *t = vl_lua_testtensor(L, -1);
    if (!t) {
      if (luaL_testudata(L, -1, VL_LUA_TENSOR_MT)) vl_lua_checktensor(L, -1); /* "used after free" */
      return luaL_error(L, "save_safetensors: %s: \"%s\" is a %s, not a tensor", path, name,
                        luaL_typename(L, -1));
    }
    names[i] = name;
    tensors[i] = t;
    i++;
    lua_pop(L, 1);
  }

  int nmeta = has_meta ? table_count(L, 3) : 0;
  const char **mk = (const char **)lua_newuserdatauv(L, sizeof *mk * (size_t)(nmeta + 1), 0);
  const char **mv = (const char **)lua_newuserdatauv(L, sizeof *mv * (size_t)(nmeta + 1), 0);
  /* The text of number/boolean values lives in this table while the file is written. */
  lua_newtable(L);
  int texts = lua_gettop(L);
  int j = 0;
  if (has_meta) {
    lua_pushnil(L);
    while (lua_next(L, 3) != 0) {
      int vt = lua_type(L, -1);
      if (lua_type(L, -2) != LUA_TSTRING || (vt != LUA_TSTRING && vt != LUA_TNUMBER && vt != LUA_TBOOLEAN))
        return luaL_error(L, "save_safetensors: %s: metadata must map strings to strings, got %s -> %s",
                          path, luaL_typename(L, -2), luaL_typename(L, -1));
      mk[j] = check_cstring(L, -2, "save_safetensors", path, "metadata key");
      luaL_tolstring(L, -1, NULL); /* the value as text (a copy for numbers: keys stay intact) */
      mv[j] = check_cstring(L, -1, "save_safetensors", path, "metadata value");
      lua_rawseti(L, texts, j + 1);
      j++;
      lua_pop(L, 1);
    }
  }
  vl_status s = vl_safetensors_write(path, n, names, tensors, nmeta, mk, mv);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int l_serial_storage(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  lua_pushinteger(L, (lua_Integer)(uintptr_t)t->storage);
  lua_pushinteger(L, (lua_Integer)(vl_tensor_storage_nbytes(t) / vl_dtype_size(t->dtype)));
  return 2;
}

static int l_serial_as_strided(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t size[VL_MAX_DIMS], stride[VL_MAX_DIMS];
  int n = l_checksizetable(L, 2, size);
  int m = l_checksizetable(L, 3, stride);
  if (m != n) return luaL_error(L, "as_strided: %d sizes but %d strides", n, m);
  int64_t offset = (int64_t)luaL_checkinteger(L, 4);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_as_strided(t, n, size, stride, offset, slot));
}

static const luaL_Reg serial_funcs[] = {
    {"storage", l_serial_storage},
    {"as_strided", l_serial_as_strided},
    {NULL, NULL},
};

int luaopen_v100_serial(lua_State *L) {
  luaL_newlib(L, serial_funcs);
  return 1;
}

const luaL_Reg l_safetensors_funcs[] = {
    {"load_safetensors", l_load_safetensors},
    {"save_safetensors", l_save_safetensors},
    {NULL, NULL},
};
