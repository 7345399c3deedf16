/* bindings/l_nn_fused.c: the fused layer ops in `v100.core._nn` (scripts/v100/nn/functional.lua
 * wraps them as F.dropout and F.cross_entropy):
 *   dropout(x, p, training=true) -> y                      (recorded)
 *   dropout_apply(x, p, seed, offset) -> y                 (raw: the mask of the draw at (seed,
 *       offset) applied to x, as DropoutBackward applies it to dy; for tests)
 *   cross_entropy(logits, target, ignore_index=-100, smoothing=0, reduction='mean', dtype=nil) -> loss
 *       (recorded; class-id targets; dtype: the loss's, nil for the default rule of
 *       runtime/nn/fused.h)
 * Only Lua types are checked here; the runtime checks values, shapes, dtypes and devices. */
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/nn/fused.h"

static double check_number(lua_State *L, int idx, const char *op, const char *what) {
  if (lua_type(L, idx) != LUA_TNUMBER) l_nn_error(L, "%s: %s must be a number, got %s", op, what, luaL_typename(L, idx));
  return lua_tonumber(L, idx);
}

static int l_dropout(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "dropout", "input");
  double p = check_number(L, 2, "dropout", "p");
  bool training = lua_isnoneornil(L, 3) || lua_toboolean(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_dropout(x, p, training, slot));
}

static int l_dropout_apply(lua_State *L) {
  vl_tensor *x = l_nn_checktensor(L, 1, "dropout_apply", "input");
  double p = check_number(L, 2, "dropout_apply", "p");
  vl_dropout_rng rng = {.seed = (uint64_t)luaL_checkinteger(L, 3), .offset = (uint64_t)luaL_checkinteger(L, 4),
                        .base = NULL};
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_dropout_apply(x, p, &rng, slot));
}

static int l_cross_entropy(lua_State *L) {
  const char *op = "cross_entropy";
  vl_tensor *x = l_nn_checktensor(L, 1, op, "input"), *t = l_nn_checktensor(L, 2, op, "target");
  lua_Integer ignore = -100;
  if (!lua_isnoneornil(L, 3)) {
    int ok = 0;
    ignore = lua_tointegerx(L, 3, &ok);
    if (!ok) return l_nn_error(L, "%s: ignore_index must be an integer, got %s", op, luaL_tolstring(L, 3, NULL));
  }
  double smoothing = lua_isnoneornil(L, 4) ? 0 : check_number(L, 4, op, "smoothing");
  vl_xent_reduction red = VL_XENT_MEAN;
  if (!lua_isnoneornil(L, 5)) {
    const char *r = lua_type(L, 5) == LUA_TSTRING ? lua_tostring(L, 5) : NULL;
    if (r && strcmp(r, "sum") == 0) red = VL_XENT_SUM;
    else if (r && strcmp(r, "none") == 0) red = VL_XENT_NONE;
    else if (!r || strcmp(r, "mean") != 0)
      return l_nn_error(L, "%s: reduction must be 'mean', 'sum' or 'none', got %s", op, luaL_tolstring(L, 5, NULL));
  }
  vl_xent_params p = {.ignore_index = (int64_t)ignore, .smoothing = smoothing, .reduction = red,
                      .out_dtype = lua_isnoneornil(L, 6) ? VL_NDTYPES : l_checkdtype(L, 6)};
  lua_settop(L, 6);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_cross_entropy(x, t, &p, slot));
}

const luaL_Reg l_fused_funcs[] = {
    {"dropout", l_dropout},
    {"dropout_apply", l_dropout_apply},
    {"cross_entropy", l_cross_entropy},
    {NULL, NULL},
};
