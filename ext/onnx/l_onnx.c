/* ext/onnx/l_onnx.c: v100.core._onnx, the ONNX model writer (ext/onnx/onnx.h) for
 * ext/onnx/lua/v100/export/onnx.lua, which walks models and says what the graph holds.
 *   _onnx.new(graph_name, opset, producer_version) -> w
 *   w:input(name, dtype, dims)        dims: a list of sizes (integers) and symbolic names (strings)
 *   w:output(name, dtype, dims)
 *   w:initializer(name, tensor[, dtype])
 *   w:node(op_type, inputs, outputs[, attrs[, name]])
 *       inputs/outputs: lists of names ('' = an omitted optional input); attrs: {name = value}
 *       with value an integer (INT), a float (FLOAT), a string (STRING), or a list of integers
 *       (INTS) or of numbers with a float among them (FLOATS); attributes are written in name
 *       order, so that the same graph gives the same bytes.
 *   w:metadata(key, value), w:doc(text), w:save(path), w:close()
 * Temporary arrays live in Lua userdata, so that a Lua error while translating leaks nothing. */
#include <stdlib.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "ext/onnx/onnx.h"
#include "runtime/ops/ops.h"

#define ONNX_MT "v100.onnx_writer"

typedef struct onnx_ud {
  vl_onnx *m;
} onnx_ud;

static vl_onnx *check_writer(lua_State *L) {
  onnx_ud *u = (onnx_ud *)luaL_checkudata(L, 1, ONNX_MT);
  if (!u->m) luaL_error(L, "onnx writer used after close");
  return u->m;
}

/* A string argument without embedded NUL bytes (C would see it cut). */
static const char *check_str(lua_State *L, int idx, const char *what) {
  size_t len;
  const char *s = luaL_checklstring(L, idx, &len);
  if (strlen(s) != len) luaL_error(L, "onnx: %s \"%s...\" contains a NUL byte", what, s);
  return s;
}

static const char *str_at(lua_State *L, int idx, const char *what) {
  size_t len;
  const char *s = lua_tolstring(L, idx, &len);
  if (!s) luaL_error(L, "onnx: %s must be a string, got %s", what, luaL_typename(L, idx));
  if (strlen(s) != len) luaL_error(L, "onnx: %s \"%s...\" contains a NUL byte", what, s);
  return s;
}

static void *scratch(lua_State *L, size_t n) { return lua_newuserdatauv(L, n ? n : 1, 0); }

static int o_gc(lua_State *L) {
  onnx_ud *u = (onnx_ud *)luaL_checkudata(L, 1, ONNX_MT);
  vl_onnx_free(u->m);
  u->m = NULL;
  return 0;
}

static int o_new(lua_State *L) {
  const char *name = check_str(L, 1, "graph name");
  lua_Integer opset = luaL_checkinteger(L, 2);
  const char *pver = lua_isnoneornil(L, 3) ? NULL : check_str(L, 3, "producer version");
  onnx_ud *u = (onnx_ud *)lua_newuserdatauv(L, sizeof *u, 0);
  u->m = NULL;
  luaL_setmetatable(L, ONNX_MT);
  if (opset < -2147483647 || opset > 2147483647) opset = 0; /* out of int: refused below */
  vl_status s = vl_onnx_new(name, (int)opset, pver, &u->m);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

/* dims table at idx -> n dims in scratch (the strings stay referenced by the table). */
static int check_dims(lua_State *L, int idx, vl_onnx_dim **out) {
  luaL_checktype(L, idx, LUA_TTABLE);
  int n = (int)luaL_len(L, idx);
  if (n > VL_MAX_DIMS) luaL_error(L, "onnx: %d dims, at most %d", n, VL_MAX_DIMS);
  vl_onnx_dim *d = (vl_onnx_dim *)scratch(L, sizeof *d * (size_t)n);
  for (int i = 0; i < n; i++) {
    lua_geti(L, idx, i + 1);
    if (lua_isinteger(L, -1)) {
      d[i].size = lua_tointeger(L, -1);
      d[i].param = NULL;
    } else if (lua_type(L, -1) == LUA_TSTRING) {
      d[i].size = -1;
      d[i].param = str_at(L, -1, "dim name");
    } else {
      luaL_error(L, "onnx: dim %d must be an integer or a name, got %s", i + 1, luaL_typename(L, -1));
    }
    lua_pop(L, 1);
  }
  *out = d;
  return n;
}

static int value_info(lua_State *L, bool output) {
  lua_settop(L, 4);
  vl_onnx *m = check_writer(L);
  const char *name = check_str(L, 2, output ? "output name" : "input name");
  vl_dtype dt = l_checkdtype(L, 3);
  vl_onnx_dim *dims = NULL;
  int n = check_dims(L, 4, &dims);
  vl_status s = output ? vl_onnx_add_output(m, name, dt, n, dims) : vl_onnx_add_input(m, name, dt, n, dims);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int o_input(lua_State *L) { return value_info(L, false); }
static int o_output(lua_State *L) { return value_info(L, true); }

static int o_initializer(lua_State *L) {
  vl_onnx *m = check_writer(L);
  const char *name = check_str(L, 2, "initializer name");
  vl_lua_tensor *ut = l_checkud(L, 3);
  if (!ut->t) return luaL_error(L, "onnx: initializer \"%s\": tensor used after free", name);
  vl_dtype as = lua_isnoneornil(L, 4) ? VL_NDTYPES : l_checkdtype(L, 4);
  vl_status s = vl_onnx_add_initializer(m, name, ut->t, as);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

/* A list of names at idx -> scratch array. */
static int check_names(lua_State *L, int idx, const char *what, const char ***out) {
  luaL_checktype(L, idx, LUA_TTABLE);
  int n = (int)luaL_len(L, idx);
  const char **v = (const char **)scratch(L, sizeof *v * (size_t)n);
  for (int i = 0; i < n; i++) {
    lua_geti(L, idx, i + 1);
    v[i] = str_at(L, -1, what);
    lua_pop(L, 1); /* the table keeps the string alive */
  }
  *out = v;
  return n;
}

static int cmp_attr(const void *a, const void *b) {
  return strcmp(((const vl_onnx_attr *)a)->name, ((const vl_onnx_attr *)b)->name);
}

/* The value at the top of the stack into a (name already set); pops nothing. A list's values go
 * to a scratch userdata kept alive in the table at index `hold`. */
static void to_attr(lua_State *L, vl_onnx_attr *a, int hold) {
  int t = lua_type(L, -1);
  if (t == LUA_TNUMBER && lua_isinteger(L, -1)) {
    a->kind = VL_ONNX_ATTR_INT;
    a->i = lua_tointeger(L, -1);
  } else if (t == LUA_TNUMBER) {
    a->kind = VL_ONNX_ATTR_FLOAT;
    a->f = (float)lua_tonumber(L, -1);
  } else if (t == LUA_TSTRING) {
    a->kind = VL_ONNX_ATTR_STRING;
    a->s = str_at(L, -1, "attribute string");
  } else if (t == LUA_TTABLE) {
    int n = (int)luaL_len(L, -1);
    bool ints = true;
    for (int i = 1; i <= n; i++) {
      lua_geti(L, -1, i);
      if (!lua_isnumber(L, -1) || lua_type(L, -1) != LUA_TNUMBER)
        luaL_error(L, "onnx: attribute \"%s\": element %d is a %s, not a number", a->name, i, luaL_typename(L, -1));
      if (!lua_isinteger(L, -1)) ints = false;
      lua_pop(L, 1);
    }
    a->n = n;
    if (ints) {
      int64_t *v = (int64_t *)scratch(L, sizeof *v * (size_t)n);
      lua_rawseti(L, hold, (lua_Integer)luaL_len(L, hold) + 1);
      for (int i = 1; i <= n; i++) lua_geti(L, -1, i), v[i - 1] = lua_tointeger(L, -1), lua_pop(L, 1);
      a->kind = VL_ONNX_ATTR_INTS;
      a->ints = v;
    } else {
      float *v = (float *)scratch(L, sizeof *v * (size_t)n);
      lua_rawseti(L, hold, (lua_Integer)luaL_len(L, hold) + 1);
      for (int i = 1; i <= n; i++) lua_geti(L, -1, i), v[i - 1] = (float)lua_tonumber(L, -1), lua_pop(L, 1);
      a->kind = VL_ONNX_ATTR_FLOATS;
      a->floats = v;
    }
  } else {
    luaL_error(L, "onnx: attribute \"%s\" must be a number, a string or a list of numbers, got %s", a->name,
               luaL_typename(L, -1));
  }
}

static int o_node(lua_State *L) {
  lua_settop(L, 6); /* the scratch buffers go above the arguments */
  vl_onnx *m = check_writer(L);
  const char *op = check_str(L, 2, "op type");
  const char **in = NULL, **out = NULL;
  int nin = check_names(L, 3, "node input", &in);
  int nout = check_names(L, 4, "node output", &out);
  int nattr = 0;
  vl_onnx_attr *attrs = NULL;
  if (!lua_isnoneornil(L, 5)) {
    luaL_checktype(L, 5, LUA_TTABLE);
    lua_newtable(L); /* holds the lists' scratch buffers until the node is added */
    int hold = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, 5)) nattr++, lua_pop(L, 1);
    attrs = (vl_onnx_attr *)scratch(L, sizeof *attrs * (size_t)nattr);
    memset(attrs, 0, sizeof *attrs * (size_t)(nattr ? nattr : 1));
    int i = 0;
    lua_pushnil(L);
    while (lua_next(L, 5)) {
      if (lua_type(L, -2) != LUA_TSTRING) luaL_error(L, "onnx: %s: attribute names must be strings", op);
      attrs[i].name = str_at(L, -2, "attribute name"); /* the key stays in the attrs table */
      to_attr(L, &attrs[i], hold);
      lua_pop(L, 1);
      i++;
    }
    qsort(attrs, (size_t)nattr, sizeof *attrs, cmp_attr);
  }
  const char *name = lua_isnoneornil(L, 6) ? NULL : check_str(L, 6, "node name");
  vl_status s = vl_onnx_add_node(m, op, name, nin, in, nout, out, nattr, attrs);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int o_metadata(lua_State *L) {
  vl_status s = vl_onnx_add_metadata(check_writer(L), check_str(L, 2, "metadata key"), check_str(L, 3, "metadata value"));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int o_doc(lua_State *L) {
  vl_status s = vl_onnx_set_doc(check_writer(L), check_str(L, 2, "doc string"));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int o_save(lua_State *L) {
  vl_status s = vl_onnx_save(check_writer(L), check_str(L, 2, "path"));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int o_elem_type(lua_State *L) {
  lua_pushinteger(L, vl_onnx_elem_type(l_checkdtype(L, 1)));
  return 1;
}

static const luaL_Reg writer_methods[] = {
    {"input", o_input},   {"output", o_output},     {"initializer", o_initializer}, {"node", o_node},
    {"metadata", o_metadata}, {"doc", o_doc},       {"save", o_save},               {"close", o_gc},
    {NULL, NULL},
};

static const luaL_Reg module_funcs[] = {
    {"new", o_new},
    {"elem_type", o_elem_type},
    {NULL, NULL},
};

int luaopen_v100_onnx(lua_State *L) {
  if (luaL_newmetatable(L, ONNX_MT)) {
    luaL_newlib(L, writer_methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, o_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, o_gc);
    lua_setfield(L, -2, "__close");
  }
  lua_pop(L, 1);
  luaL_newlib(L, module_funcs);
  lua_pushinteger(L, VL_ONNX_OPSET_MIN);
  lua_setfield(L, -2, "opset_min");
  lua_pushinteger(L, VL_ONNX_OPSET_MAX);
  lua_setfield(L, -2, "opset_max");
  return 1;
}
