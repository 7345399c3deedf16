/* bindings/l_index.c: Torch7's indexing on tensors, read and write (docs/LUA_API.md, "Indexing"):
 *   x[i]                 select along dim 1 (1-based position, negative from the end)
 *   x[{i, {a, b}, {}}]   per dim: an integer selects (the dim goes), {a, b} the inclusive range
 *                        a..b (1-based, negative from the end), {a} the range a..a (the dim stays),
 *                        {} all of it; dims not named are taken whole
 *   x[mask]              a bool tensor: masked_select, the selected elements as a 1-D tensor
 *   x[idx]               an i64/i32 tensor: index_select along dim 1 (0-based values, as PyTorch)
 * and the same forms on the left of `=`, with a number or a tensor on the right (copied with
 * broadcasting into a view; for mask and idx written at the positions they select). Reads go
 * through recorded ops, so they differentiate; so do writes into a non-leaf or of a value that
 * requires grad (recorded on x: runtime/autograd/ops_index.c), while a leaf that requires grad
 * refuses them as every in-place op. A string key is a field or a method (l_tensor.c,
 * l_autograd.c), never an index. */
#include <string.h>

#include <lauxlib.h>
#include <lua.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

/* A 1-based position (negative from the end) along a dim of size n, checked, to 0-based. */
static int64_t position(lua_State *L, lua_Integer p, int64_t n, int dim, const char *what) {
  int64_t q = p > 0 ? p - 1 : n + p;
  if (p == 0 || q < 0 || q >= n)
    luaL_error(L, "%s: position %I is out of range for dim %d of size %I (positions are 1-based: 1 to %I, or -%I to -1 "
               "from the end)", what, (lua_Integer)p, dim + 1, (lua_Integer)n, (lua_Integer)n, (lua_Integer)n);
  return q;
}

/* The slice an integer key or an index table at `key` names in t, as the steps that make its view
 * (runtime/autograd/ops.h vl_slice). Positions are checked against the sizes of the view so far.
 * Raises on a bad key. */
static void parse_slice(lua_State *L, vl_tensor *t, int key, vl_slice *sl) {
  const char *what = "index";
  memset(sl, 0, sizeof *sl);
  if (lua_isinteger(L, key)) {
    if (t->ndim == 0) luaL_error(L, "index: a 0-dim tensor cannot be indexed (use :item())");
    sl->n = 1;
    sl->step[0].select = true;
    sl->step[0].start = position(L, lua_tointeger(L, key), t->size[0], 0, what);
    return;
  }
  lua_Integer n = (lua_Integer)lua_rawlen(L, key);
  if (n > t->ndim) luaL_error(L, "index: %d entries for a %d-dim tensor", (int)n, t->ndim);
  int64_t size[VL_MAX_DIMS];
  memcpy(size, t->size, sizeof(int64_t) * (size_t)t->ndim);
  int nd = t->ndim, d = 0; /* the view's dims so far; the dim of it the next entry applies to */
  for (lua_Integer i = 1; i <= n; i++) {
    int ty = lua_rawgeti(L, key, i);
    vl_slice_step *st = &sl->step[sl->n];
    if (ty == LUA_TNUMBER && lua_isinteger(L, -1)) {
      st->select = true;
      st->dim = d;
      st->start = position(L, lua_tointeger(L, -1), size[d], (int)(i - 1), what);
      lua_pop(L, 1);
      memmove(size + d, size + d + 1, sizeof(int64_t) * (size_t)(nd - d - 1));
      nd--;
      sl->n++;
      continue;
    }
    if (ty != LUA_TTABLE)
      luaL_error(L, "index: entry %d is a %s (an integer, {}, {a} or {a, b} with 1-based inclusive a and b)", (int)i,
                 luaL_typename(L, -1));
    lua_Integer m = (lua_Integer)lua_rawlen(L, -1);
    if (m > 2) luaL_error(L, "index: entry %d has %d numbers ({}, {a} or {a, b})", (int)i, (int)m);
    int64_t lo = 0, hi = size[d] - 1;
    for (lua_Integer j = 1; j <= m; j++) {
      lua_rawgeti(L, -1, j);
      if (!lua_isinteger(L, -1)) luaL_error(L, "index: entry %d's bounds must be integers", (int)i);
      int64_t q = position(L, lua_tointeger(L, -1), size[d], (int)(i - 1), what);
      lua_pop(L, 1);
      if (j == 1) lo = hi = q;
      else hi = q;
    }
    lua_pop(L, 1);
    if (hi < lo)
      luaL_error(L, "index: entry %d is the empty range %I..%I of dim %d", (int)i, (lua_Integer)lo + 1,
                 (lua_Integer)hi + 1, (int)i);
    if (m > 0) {
      st->dim = d;
      st->start = lo;
      st->len = hi - lo + 1;
      size[d] = st->len;
      sl->n++;
    }
    d++;
  }
}

/* Pushes the view the slice names: recorded views (they differentiate), each a userdata, so an
 * error midway leaves nothing to release by hand. */
static void push_view(lua_State *L, const vl_slice *sl) {
  lua_pushvalue(L, 1);
  for (int i = 0; i < sl->n; i++) {
    const vl_slice_step *st = &sl->step[i];
    vl_tensor *cur = vl_lua_checktensor(L, -1);
    vl_tensor **slot = l_slot(L);
    l_done(L, st->select ? vl_ag_select(cur, st->dim, st->start, slot)
                         : vl_ag_narrow(cur, st->dim, st->start, st->len, slot));
    lua_replace(L, -2);
  }
}

/* __index for a non-string key at 2 (l_tensor.c's t_index passes it here): pushes the result. */
int l_tensor_index(lua_State *L, vl_tensor *t) {
  vl_tensor *k = vl_lua_testtensor(L, 2);
  if (k) {
    vl_tensor **slot = l_slot(L);
    if (k->dtype == VL_BOOL) return l_done(L, vl_ag_masked_select(t, k, slot));
    return l_done(L, vl_ag_index_select_as("index", t, 0, k, slot));
  }
  if (!lua_isinteger(L, 2) && !lua_istable(L, 2))
    return luaL_error(L, "index: a tensor is indexed by an integer, a table of ranges, a bool mask or an index tensor, "
                      "not a %s", luaL_typename(L, 2));
  vl_slice sl;
  parse_slice(L, t, 2, &sl);
  push_view(L, &sl);
  return 1;
}

/* __newindex for a non-string key: t[key] = value (a number or a tensor). */
int l_tensor_newindex(lua_State *L, vl_tensor *t) {
  vl_tensor *k = vl_lua_testtensor(L, 2);
  vl_tensor *src = vl_lua_testtensor(L, 3);
  if (!src && !l_isscalar(L, 3))
    return luaL_error(L, "index: the value assigned must be a number or a tensor, not a %s", luaL_typename(L, 3));
  vl_status s;
  if (k) {
    if (k->dtype == VL_BOOL && !src) {
      s = vl_ag_masked_fill_(t, k, l_toscalar(L, 3));
    } else {
      vl_tensor *tmp = NULL;
      s = src ? VL_OK : vl_full_scalar(0, NULL, l_toscalarv(L, 3), t->dtype, t->storage->device, &tmp);
      if (s == VL_OK)
        s = k->dtype == VL_BOOL ? vl_ag_masked_put_(t, k, src ? src : tmp) : vl_ag_rows_put_(t, k, src ? src : tmp);
      vl_tensor_release(tmp);
    }
  } else if (lua_isinteger(L, 2) || lua_istable(L, 2)) {
    vl_slice sl;
    parse_slice(L, t, 2, &sl);
    s = vl_ag_slice_write_(t, &sl, src, src ? vl_scalar_int(0) : l_toscalarv(L, 3));
  } else {
    return luaL_error(L, "index: a tensor is indexed by an integer, a table of ranges, a bool mask or an index tensor, "
                      "not a %s", luaL_typename(L, 2));
  }
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

/* t:nonzero() -> i64 [n, ndim] (0-based coordinates, row-major order); t:masked_select(mask). */
static int t_nonzero(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_nonzero(t, false, slot));
}

static int t_masked_select(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor *mask = vl_lua_checktensor(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_masked_select(t, mask, slot));
}

const luaL_Reg l_index_methods[] = {
    {"nonzero", t_nonzero},
    {"masked_select", t_masked_select},
    {NULL, NULL},
};
