/* bindings/l_shape.c: the shape ops (runtime/ops/shape.h, recorded by runtime/autograd/ops_shape.h)
 * as tensor methods, and v100.pad. Dims are 1-based (negative from the end), translated here.
 *
 *   t:flatten([start_dim=1[, end_dim=-1]])    t:unflatten(dim, sizes)
 *   t:flip(dims)                              t:roll(shifts[, dims])
 *   t:tril([k=0]) t:triu([k=0])               t:movedim(src, dst)
 *   t:repeat(sizes) (also t:repeatTensor)     t:tile(sizes)
 *   t:repeat_interleave(repeats[, dim])       t:diagonal([offset=0[, dim1=1[, dim2=2]]])
 *   t:split({sizes...}, dim) (l_split_sizes)  v100.pad(t, pads[, {mode=, value=}]) */
#include <stdlib.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/ops_shape.h"

/* Integers from a table at arg, or one integer: at most max, into v; returns the count. */
static int int_list(lua_State *L, int arg, const char *op, const char *what, int64_t *v, int max) {
  if (lua_type(L, arg) == LUA_TNUMBER) {
    int isint;
    v[0] = (int64_t)lua_tointegerx(L, arg, &isint);
    if (!isint) return luaL_error(L, "%s: %s must be integers, got %s", op, what, lua_tostring(L, arg));
    return 1;
  }
  if (!lua_istable(L, arg))
    return luaL_error(L, "%s: %s must be an integer or a table of integers, got %s", op, what, luaL_typename(L, arg));
  lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
  if (n > max) return luaL_error(L, "%s: %s has %d numbers, at most %d are supported", op, what, (int)n, max);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, arg, i + 1);
    int isint;
    v[i] = (int64_t)lua_tointegerx(L, -1, &isint);
    if (!isint) return luaL_error(L, "%s: %s must hold integers (element %d is not)", op, what, i + 1);
    lua_pop(L, 1);
  }
  return (int)n;
}

static int s_flatten(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int s = l_optdim(L, 2, 0), e = l_optdim(L, 3, -1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_flatten(t, s, e, slot));
}

static int s_unflatten(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  int64_t sizes[VL_MAX_DIMS];
  int n = int_list(L, 3, "unflatten", "sizes", sizes, VL_MAX_DIMS);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_unflatten(t, d, n, sizes, slot));
}

static int s_flip(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  luaL_checkany(L, 2);
  int dims[VL_MAX_DIMS];
  int n = l_checkdimlist(L, 2, dims, true);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_flip(t, n, dims, slot));
}

static int s_roll(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t shifts[VL_MAX_DIMS];
  int ns = int_list(L, 2, "roll", "shifts", shifts, VL_MAX_DIMS);
  int dims[VL_MAX_DIMS], nd = 0;
  if (!lua_isnoneornil(L, 3)) nd = l_checkdimlist(L, 3, dims, false);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_roll(t, ns, shifts, nd, dims, slot));
}

static int tri(lua_State *L, bool upper) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t k = (int64_t)luaL_optinteger(L, 2, 0);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_tri(t, k, upper, slot));
}
static int s_tril(lua_State *L) { return tri(L, false); }
static int s_triu(lua_State *L) { return tri(L, true); }

static int repeat_or_tile(lua_State *L, bool tile) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t reps[VL_MAX_DIMS];
  int n = l_checksize(L, 2, reps);
  vl_tensor **slot = l_slot(L);
  return l_done(L, tile ? vl_ag_tile(t, n, reps, slot) : vl_ag_repeat(t, n, reps, slot));
}
static int s_repeat(lua_State *L) { return repeat_or_tile(L, false); }
static int s_tile(lua_State *L) { return repeat_or_tile(L, true); }

static int s_repeat_interleave(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor *reps = vl_lua_testtensor(L, 2);
  int64_t r = reps ? 0 : (int64_t)luaL_checkinteger(L, 2);
  bool has_dim = !lua_isnoneornil(L, 3);
  int d = has_dim ? l_checkdim(L, 3) : 0;
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_repeat_interleave(t, r, reps, has_dim, d, slot));
}

static int s_movedim(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int src[VL_MAX_DIMS], dst[VL_MAX_DIMS];
  int ns = l_checkdimlist(L, 2, src, false);
  int nd = l_checkdimlist(L, 3, dst, false);
  if (ns != nd) return luaL_error(L, "movedim: %d source dims but %d destination dims", ns, nd);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_movedim(t, ns, src, dst, slot));
}

static int s_diagonal(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t off = (int64_t)luaL_optinteger(L, 2, 0);
  int d1 = l_optdim(L, 3, 0), d2 = l_optdim(L, 4, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_diagonal(t, off, d1, d2, slot));
}

/* The pieces made by the runtime until each sits in a userdata: a __gc releases the rest if a
 * Lua allocation raises midway. */
#define SPLIT_MT "v100.shape_pending"
typedef struct pending {
  vl_tensor **v;
  int64_t *sizes;
  int n, i;
} pending;

static int pending_gc(lua_State *L) {
  pending *p = (pending *)lua_touserdata(L, 1);
  for (; p->v && p->i < p->n; p->i++) vl_tensor_release(p->v[p->i]);
  free(p->v);
  free(p->sizes);
  p->v = NULL;
  p->sizes = NULL;
  return 0;
}

int l_split_sizes(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int d = l_optdim(L, 3, 0);
  lua_Integer n = (lua_Integer)lua_rawlen(L, 2);
  if (n > (1 << 24)) return luaL_error(L, "split: %d sizes are too many", (int)n);
  pending *p = (pending *)lua_newuserdatauv(L, sizeof *p, 0);
  p->v = NULL;
  p->n = p->i = 0;
  p->sizes = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
  luaL_setmetatable(L, SPLIT_MT);
  if (!p->sizes) return luaL_error(L, "split: out of host memory");
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, 2, i + 1);
    int isint;
    p->sizes[i] = (int64_t)lua_tointegerx(L, -1, &isint);
    if (!isint) return luaL_error(L, "split: the sizes must be integers (element %d is not)", i + 1);
    lua_pop(L, 1);
  }
  vl_status s = vl_ag_split_sizes(t, (int)n, p->sizes, d, &p->v);
  if (s != VL_OK) return vl_lua_error(L, s);
  p->n = (int)n;
  lua_createtable(L, p->n, 0);
  while (p->i < p->n) {
    vl_tensor **slot = l_slot(L);
    *slot = p->v[p->i++];
    l_done(L, VL_OK);
    lua_rawseti(L, -2, p->i);
  }
  return 1;
}

/* v100.pad(t, pads[, {mode = 'constant', value = 0}]) */
static int s_pad(lua_State *L) {
  static const char *const known[] = {"mode", "value", NULL};
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t pads[2 * VL_MAX_DIMS];
  luaL_checktype(L, 2, LUA_TTABLE);
  int n = int_list(L, 2, "pad", "pads", pads, 2 * VL_MAX_DIMS);
  l_check_opts(L, 3, "pad", known);
  vl_pad_mode mode = VL_PAD_CONSTANT;
  double value = 0;
  if (lua_istable(L, 3)) {
    lua_getfield(L, 3, "mode");
    if (!lua_isnil(L, -1)) {
      if (lua_type(L, -1) != LUA_TSTRING) return luaL_error(L, "pad: mode must be a string");
      vl_status s = vl_pad_mode_parse("pad", lua_tostring(L, -1), &mode);
      if (s != VL_OK) return vl_lua_error(L, s);
    }
    lua_getfield(L, 3, "value");
    if (!lua_isnil(L, -1)) {
      if (!l_isscalar(L, -1)) return luaL_error(L, "pad: value must be a number");
      value = l_toscalar(L, -1);
    }
    lua_pop(L, 2);
  }
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_pad(t, n, pads, mode, value, slot));
}

static const luaL_Reg shape_methods[] = {
    {"flatten", s_flatten},
    {"unflatten", s_unflatten},
    {"flip", s_flip},
    {"roll", s_roll},
    {"tril", s_tril},
    {"triu", s_triu},
    {"repeat", s_repeat},
    {"repeatTensor", s_repeat},
    {"tile", s_tile},
    {"repeat_interleave", s_repeat_interleave},
    {"movedim", s_movedim},
    {"diagonal", s_diagonal},
    {NULL, NULL},
};

static const luaL_Reg shape_funcs[] = {
    {"pad", s_pad},
    {NULL, NULL},
};

void l_register_shape(lua_State *L) {
  if (luaL_newmetatable(L, SPLIT_MT)) {
    lua_pushcfunction(L, pending_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, shape_funcs, 0);
  lua_pushvalue(L, -2);
  luaL_setfuncs(L, shape_methods, 0);
  lua_pop(L, 1);
}
