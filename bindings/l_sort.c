/* bindings/l_sort.c: sorting and selection (docs/LUA_API.md, "Sorting and selection"):
 *   t:sort([dim[, {descending=, stable=}]]) -> values, indices    t:argsort(...) -> indices
 *   t:topk(k[, dim[, {largest=, sorted=}]]) -> values, indices
 *   t:kthvalue(k[, dim[, keepdim]]) -> values, indices
 *   t:median() -> 0-dim     t:median(dim[, keepdim]) -> values, indices
 *   t:unique([{sorted=, return_inverse=, return_counts=}]) -> values[, inverse][, counts]
 *   v100.searchsorted(sorted_sequence, values[, {right=, out_int32=}]) -> insertion points
 * Dims 1-based (default -1, the last); indices are 0-based values (i64), as PyTorch. Only
 * translation here: the checks are the runtime's (runtime/ops/sort.c). */
#include <lauxlib.h>
#include <lua.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

/* A boolean option of the table at idx (already checked by l_check_opts), def when absent. */
static bool opt_bool(lua_State *L, int idx, const char *fn, const char *key, bool def) {
  if (lua_isnoneornil(L, idx)) return def;
  lua_getfield(L, idx, key);
  int t = lua_type(L, -1);
  if (t != LUA_TNIL && t != LUA_TBOOLEAN)
    luaL_error(L, "%s: option '%s' must be a boolean, got %s", fn, key, luaL_typename(L, -1));
  bool v = t == LUA_TNIL ? def : lua_toboolean(L, -1);
  lua_pop(L, 1);
  return v;
}

/* sort(dim, opts), or the options table alone in place of dim (argsort alike). */
static int t_sort(lua_State *L) {
  static const char *const known[] = {"descending", "stable", NULL};
  vl_tensor *x = vl_lua_checktensor(L, 1);
  int oi = lua_istable(L, 2) ? 2 : 3;
  l_check_opts(L, oi, "sort", known);
  int dim = oi == 2 ? -1 : l_optdim(L, 2, -1);
  bool desc = opt_bool(L, oi, "sort", "descending", false);
  (void)opt_bool(L, oi, "sort", "stable", true); /* every sort here is stable: both values give that */
  lua_settop(L, 1);
  vl_tensor **v = l_slot(L);
  vl_tensor **i = l_slot(L);
  return l_done2(L, vl_ag_sort(x, dim, desc, v, i));
}

static int t_argsort(lua_State *L) {
  static const char *const known[] = {"descending", "stable", NULL};
  vl_tensor *x = vl_lua_checktensor(L, 1);
  int oi = lua_istable(L, 2) ? 2 : 3;
  l_check_opts(L, oi, "argsort", known);
  int dim = oi == 2 ? -1 : l_optdim(L, 2, -1);
  bool desc = opt_bool(L, oi, "argsort", "descending", false);
  (void)opt_bool(L, oi, "argsort", "stable", true);
  lua_settop(L, 1);
  /* the values are made and dropped: argsort is the sort's second result */
  vl_tensor **v = l_slot(L);
  vl_tensor **i = l_slot(L);
  l_done2(L, vl_sort(x, dim, desc, v, i));
  return 1;
}

static int t_topk(lua_State *L) {
  static const char *const known[] = {"largest", "sorted", NULL};
  vl_tensor *x = vl_lua_checktensor(L, 1);
  lua_Integer k = luaL_checkinteger(L, 2);
  int oi = lua_istable(L, 3) ? 3 : 4;
  l_check_opts(L, oi, "topk", known);
  int dim = oi == 3 ? -1 : l_optdim(L, 3, -1);
  bool largest = opt_bool(L, oi, "topk", "largest", true);
  (void)opt_bool(L, oi, "topk", "sorted", true); /* results always come sorted */
  lua_settop(L, 1);
  vl_tensor **v = l_slot(L);
  vl_tensor **i = l_slot(L);
  return l_done2(L, vl_ag_topk(x, (int64_t)k, dim, largest, v, i));
}

static int t_kthvalue(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1);
  lua_Integer k = luaL_checkinteger(L, 2);
  int dim = l_optdim(L, 3, -1);
  bool keep = lua_toboolean(L, 4);
  lua_settop(L, 1);
  vl_tensor **v = l_slot(L);
  vl_tensor **i = l_slot(L);
  return l_done2(L, vl_ag_kthvalue(x, (int64_t)k, dim, keep, v, i));
}

static int t_median(lua_State *L) {
  vl_tensor *x = vl_lua_checktensor(L, 1);
  if (lua_isnoneornil(L, 2)) {
    lua_settop(L, 1);
    vl_tensor **v = l_slot(L);
    return l_done(L, vl_ag_median_all(x, v));
  }
  int dim = l_checkdim(L, 2);
  bool keep = lua_toboolean(L, 3);
  lua_settop(L, 1);
  vl_tensor **v = l_slot(L);
  vl_tensor **i = l_slot(L);
  return l_done2(L, vl_ag_median(x, dim, keep, v, i));
}

static int t_unique(lua_State *L) {
  static const char *const known[] = {"sorted", "return_inverse", "return_counts", NULL};
  vl_tensor *x = vl_lua_checktensor(L, 1);
  l_check_opts(L, 2, "unique", known);
  (void)opt_bool(L, 2, "unique", "sorted", true); /* the values always come sorted */
  bool inv = opt_bool(L, 2, "unique", "return_inverse", false);
  bool cnt = opt_bool(L, 2, "unique", "return_counts", false);
  lua_settop(L, 1);
  vl_tensor *unused = NULL;
  int base = lua_gettop(L) + 1;
  vl_tensor **v = l_slot(L);
  vl_tensor **i = inv ? l_slot(L) : &unused;
  vl_tensor **c = cnt ? l_slot(L) : &unused;
  vl_status s = vl_unique(x, inv, cnt, v, i, c);
  if (s != VL_OK) return vl_lua_error(L, s);
  int nres = lua_gettop(L) - base + 1;
  for (int k = 0; k < nres; k++) { /* account each new tensor (l_done looks at the top) */
    lua_pushvalue(L, base + k);
    l_done(L, VL_OK);
    lua_pop(L, 1);
  }
  return nres;
}

/* searchsorted(sorted_sequence, values[, opts]): a number as values is a 0-dim tensor on the
 * sequence's device (i64 for a Lua integer, else f64: compared exactly, not rounded to the
 * sequence's dtype first). */
static int m_searchsorted(lua_State *L) {
  static const char *const known[] = {"right", "out_int32", NULL};
  vl_tensor *seq = vl_lua_checktensor(L, 1);
  l_check_opts(L, 3, "searchsorted", known);
  bool right = opt_bool(L, 3, "searchsorted", "right", false);
  bool i32 = opt_bool(L, 3, "searchsorted", "out_int32", false);
  vl_tensor *vals;
  if (l_isscalar(L, 2)) {
    vl_dtype dt = lua_isinteger(L, 2) ? VL_I64 : VL_F64;
    vl_scalar sv = l_toscalarv(L, 2);
    lua_settop(L, 3);
    vl_tensor **slot = l_slot(L);
    l_done(L, vl_full_scalar(0, NULL, sv, dt, seq->storage->device, slot));
    vals = *slot;
  } else {
    vals = vl_lua_checktensor(L, 2);
  }
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_searchsorted(seq, vals, right, i32, slot));
}

static const luaL_Reg sort_methods[] = {
    {"sort", t_sort},         {"argsort", t_argsort}, {"topk", t_topk}, {"kthvalue", t_kthvalue},
    {"median", t_median},     {"unique", t_unique},   {NULL, NULL},
};

static const luaL_Reg sort_module[] = {
    {"searchsorted", m_searchsorted},
    {NULL, NULL},
};

void l_register_sort(lua_State *L) {
  lua_pushvalue(L, -2); /* the methods table, below the module table */
  luaL_setfuncs(L, sort_methods, 0);
  lua_pop(L, 1);
  luaL_setfuncs(L, sort_module, 0);
}
