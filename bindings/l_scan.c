/* bindings/l_scan.c: the scans and the composed reductions of issue 30 as tensor methods
 * (runtime/ops/scan.h, recorded by runtime/autograd/ops_scan.h): cumsum, cumprod, logsumexp,
 * any, all, count_nonzero. Only translation: 1-based dims to 0-based, the options table. */
#include "bindings/l_priv.h"
#include "runtime/autograd/ops_scan.h"

/* t:cumsum(dim[, {dtype=}]), t:cumprod(dim[, {dtype=}]) */
static int scan(lua_State *L, vl_scan_op op) {
  const char *name = op == VL_SCAN_PROD ? "cumprod" : "cumsum";
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_dtype dt = VL_NDTYPES; /* the default: the runtime picks (i64 for integers) */
  static const char *const known[] = {"dtype", NULL};
  l_check_opts(L, 3, name, known);
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "dtype");
    if (!lua_isnil(L, -1)) dt = l_checkdtype(L, -1);
    lua_pop(L, 1);
  }
  lua_settop(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_scan(op, a, d, dt, slot));
}
static int t_cumsum(lua_State *L) { return scan(L, VL_SCAN_SUM); }
static int t_cumprod(lua_State *L) { return scan(L, VL_SCAN_PROD); }

/* t:logsumexp(dims[, keepdim]): dims a number or a list (required, as in PyTorch) */
static int t_logsumexp(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int dims[VL_MAX_DIMS];
  int n = l_checkdimlist(L, 2, dims, false);
  bool keep = lua_toboolean(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_logsumexp(a, n, dims, keep, slot));
}

/* t:any([dim[, keepdim]]), t:all(...): dim a number or a list; none: every element */
static int any_all(lua_State *L, bool any) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int dims[VL_MAX_DIMS];
  int n = lua_isnoneornil(L, 2) ? 0 : l_checkdimlist(L, 2, dims, false);
  bool keep = lua_toboolean(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, any ? vl_any(a, n, dims, keep, slot) : vl_all(a, n, dims, keep, slot));
}
static int t_any(lua_State *L) { return any_all(L, true); }
static int t_all(lua_State *L) { return any_all(L, false); }

/* t:count_nonzero([dims]) */
static int t_count_nonzero(lua_State *L) {
  vl_tensor *a = vl_lua_checktensor(L, 1);
  int dims[VL_MAX_DIMS];
  int n = lua_isnoneornil(L, 2) ? 0 : l_checkdimlist(L, 2, dims, false);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_count_nonzero(a, n, dims, slot));
}

static const luaL_Reg scan_methods[] = {
    {"cumsum", t_cumsum},
    {"cumprod", t_cumprod},
    {"logsumexp", t_logsumexp},
    {"any", t_any},
    {"all", t_all},
    {"count_nonzero", t_count_nonzero},
    {NULL, NULL},
};

void l_register_scan_methods(lua_State *L) { luaL_setfuncs(L, scan_methods, 0); }
