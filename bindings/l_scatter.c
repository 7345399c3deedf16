/* bindings/l_scatter.c: the index writes of docs/LUA_API.md "Scatter, index_put and one_hot":
 *   t:scatter(dim, index, src_or_value[, {reduce = nil | 'add' | 'multiply'}]), t:scatter_(...)
 *   t:index_put(indices, values[, {accumulate = false}]), t:index_put_(...)
 *   t:index_add(dim, index, src), t:index_copy(dim, index, src), t:index_fill(dim, index, value)
 *   and their in-place forms with a trailing _
 *   t:one_hot([num_classes = -1])
 * Dims 1-based (negative from the end); index values 0-based, as PyTorch. Only translation here:
 * every check is in runtime/ops/index.c and runtime/ops/scatter.c. */
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

static int self_or_error(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_settop(L, 1);
  return 1;
}

/* reduce = nil (assign), 'add' or 'multiply'; raises on anything else, naming fn. */
static vl_scatter_mode opt_reduce(lua_State *L, int opts, const char *fn) {
  static const char *const known[] = {"reduce", NULL};
  l_check_opts(L, opts, fn, known);
  if (lua_isnoneornil(L, opts)) return VL_SCATTER_SET;
  lua_getfield(L, opts, "reduce");
  vl_scatter_mode m = VL_SCATTER_SET;
  if (!lua_isnil(L, -1)) {
    if (lua_type(L, -1) != LUA_TSTRING)
      luaL_error(L, "%s: reduce must be nil, 'add' or 'multiply', got a %s", fn, luaL_typename(L, -1));
    const char *r = lua_tostring(L, -1);
    if (strcmp(r, "add") == 0) m = VL_SCATTER_ADD;
    else if (strcmp(r, "multiply") == 0) m = VL_SCATTER_MUL;
    else luaL_error(L, "%s: reduce must be nil, 'add' or 'multiply', got '%s'", fn, r);
  }
  lua_pop(L, 1);
  return m;
}

/* (self, dim, index, src_or_value[, opts]): src at 4 is a tensor, or a number made into a tensor
 * of self's dtype expanded over index (a new userdata left on the stack). */
static vl_tensor *scatter_src(lua_State *L, const char *fn, vl_tensor *self, vl_tensor *index) {
  vl_tensor *src = vl_lua_testtensor(L, 4);
  if (src) return src;
  if (!l_isscalar(L, 4))
    luaL_error(L, "%s: src must be a tensor or a number, not a %s", fn, luaL_typename(L, 4));
  vl_tensor **slot = l_slot(L);
  l_done(L, vl_scatter_value_src(fn, self, index, l_toscalarv(L, 4), slot));
  return *slot;
}

static int t_scatter(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor *index = vl_lua_checktensor(L, 3);
  vl_scatter_mode m = opt_reduce(L, 5, "scatter");
  vl_tensor *src = scatter_src(L, "scatter", a, index);
  vl_tensor **slot = l_slot(L);
  if (m == VL_SCATTER_MUL) return l_done(L, vl_ag_scatter_mul(a, d, index, src, false, slot));
  return l_done(L, m == VL_SCATTER_ADD ? vl_ag_scatter_add(a, d, index, src, slot) : vl_ag_scatter(a, d, index, src, slot));
}

static int t_scatter_(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor *index = vl_lua_checktensor(L, 3);
  vl_scatter_mode m = opt_reduce(L, 5, "scatter_");
  vl_tensor *src = scatter_src(L, "scatter_", a, index);
  if (m == VL_SCATTER_MUL) return self_or_error(L, vl_ag_scatter_mul(a, d, index, src, true, NULL));
  return self_or_error(L, m == VL_SCATTER_ADD ? vl_ag_scatter_add_(a, d, index, src) : vl_ag_scatter_(a, d, index, src));
}

/* (self, indices, values[, {accumulate}]): indices a tensor or a list of tensors (borrowed: the
 * list at 2 keeps them alive); values a tensor or a number (a 0-dim tensor of self's dtype). */
static int index_put(lua_State *L, bool inplace) {
  const char *fn = inplace ? "index_put_" : "index_put";
  static const char *const known[] = {"accumulate", NULL};
  vl_tensor *x = vl_lua_checktensor(L, 1);
  l_check_opts(L, 4, fn, known);
  bool acc = false;
  if (!lua_isnoneornil(L, 4)) {
    lua_getfield(L, 4, "accumulate");
    if (!lua_isnil(L, -1) && !lua_isboolean(L, -1))
      luaL_error(L, "%s: accumulate must be a boolean, got a %s", fn, luaL_typename(L, -1));
    acc = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  vl_tensor *idx[VL_MAX_DIMS];
  int n = 0;
  vl_tensor *one = vl_lua_testtensor(L, 2);
  if (one) {
    idx[n++] = one;
  } else {
    if (!lua_istable(L, 2))
      luaL_error(L, "%s: indices must be a tensor or a list of tensors, not a %s", fn, luaL_typename(L, 2));
    lua_Integer len = (lua_Integer)lua_rawlen(L, 2);
    if (len < 1 || len > x->ndim)
      luaL_error(L, "%s: %d index tensors for a %d-dim tensor: give 1 to %d", fn, (int)len, x->ndim, x->ndim);
    for (lua_Integer i = 1; i <= len; i++) {
      lua_rawgeti(L, 2, i);
      vl_tensor *t = vl_lua_testtensor(L, -1);
      if (!t) luaL_error(L, "%s: indices[%d] must be a tensor, not a %s", fn, (int)i, luaL_typename(L, -1));
      lua_pop(L, 1); /* still referenced by the list */
      idx[n++] = t;
    }
  }
  vl_tensor *values = vl_lua_testtensor(L, 3);
  if (!values) {
    if (!l_isscalar(L, 3)) luaL_error(L, "%s: values must be a tensor or a number, not a %s", fn, luaL_typename(L, 3));
    vl_tensor **vs = l_slot(L);
    l_done(L, vl_full_scalar(0, NULL, l_toscalarv(L, 3), x->dtype, x->storage->device, vs));
    values = *vs;
  }
  if (inplace) return self_or_error(L, vl_ag_index_put_(x, n, idx, values, acc));
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_index_put(x, n, idx, values, acc, slot));
}

static int t_index_put(lua_State *L) { return index_put(L, false); }
static int t_index_put_(lua_State *L) { return index_put(L, true); }

/* (self, dim, index, src or value): kind's op, in place (returns self) or not. */
static int index_write(lua_State *L, vl_index_write kind, bool inplace) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor *index = vl_lua_checktensor(L, 3);
  vl_tensor *src = NULL;
  vl_scalar value = vl_scalar_int(0);
  if (kind == VL_INDEX_FILL) {
    if (!l_isscalar(L, 4)) luaL_error(L, "index_fill: the value must be a number, not a %s", luaL_typename(L, 4));
    value = l_toscalarv(L, 4);
  } else {
    src = vl_lua_checktensor(L, 4);
  }
  if (inplace) return self_or_error(L, vl_ag_index_write(kind, a, d, index, src, value, true, NULL));
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_index_write(kind, a, d, index, src, value, false, slot));
}

static int t_index_add(lua_State *L) { return index_write(L, VL_INDEX_ADD, false); }
static int t_index_add_(lua_State *L) { return index_write(L, VL_INDEX_ADD, true); }
static int t_index_copy(lua_State *L) { return index_write(L, VL_INDEX_COPY, false); }
static int t_index_copy_(lua_State *L) { return index_write(L, VL_INDEX_COPY, true); }
static int t_index_fill(lua_State *L) { return index_write(L, VL_INDEX_FILL, false); }
static int t_index_fill_(lua_State *L) { return index_write(L, VL_INDEX_FILL, true); }

static int t_one_hot(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  lua_Integer n = luaL_optinteger(L, 2, -1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_one_hot(t, (int64_t)n, slot));
}

const luaL_Reg l_scatter_methods[] = {
    {"scatter", t_scatter},
    {"scatter_", t_scatter_},
    {"index_put", t_index_put},
    {"index_put_", t_index_put_},
    {"index_add", t_index_add},
    {"index_add_", t_index_add_},
    {"index_copy", t_index_copy},
    {"index_copy_", t_index_copy_},
    {"index_fill", t_index_fill},
    {"index_fill_", t_index_fill_},
    {"one_hot", t_one_hot},
    {NULL, NULL},
};
