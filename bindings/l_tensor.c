/* bindings/l_tensor.c: the tensor userdata (lifetime, collector accounting, argument helpers),
 * its fields, introspection, views and conversions. Math lives in l_ops.c, printing in
 * l_print.c. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/core/cuda.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

/* Lua's collector only sees the small userdata, not the storage bytes behind it, so a loop that
 * drops big tensors would grow without bound. New storage bytes accumulate here and a collector
 * step runs when they pass the threshold: in the generational mode the host runs (main.c) that
 * is a young collection, whose cost is the young objects', so the tensors a loop drops are
 * freed at a cost that does not grow with the rest of the heap. (It used to be a full
 * collection each time: with a big heap, a script holding WordNet's 117,659 synsets as tables,
 * each took 0.4 s, and a BERT-Base step allocating a few GiB ran ten of them: 4 s, not 17 ms.)
 * A tensor that lived through two young collections is old, and an old one that dies waits for
 * a major collection, which Lua schedules by its own heap's growth, blind to the device bytes:
 * a forward's hidden states and masks live that long, and an H200 filled up with 137 GiB of
 * them in 16 evaluation batches of BERT-Base. So the bytes the userdata own are counted too,
 * with the most that a full collection here ever left (what the script keeps alive at its peak:
 * parameters, optimizer state, a step's activations): when after a young collection they are
 * more than twice that plus a floor (8 thresholds, 2 GiB by default), a full collection
 * follows. Dead tensors then stay below that peak plus the floor, and full collections come at
 * most once per that much of them. (Measuring from the last full collection instead, taken
 * early in a step, ran one in every step of a fine-tuning: BERT-Base's ran at half speed.) The host
 * runs one Lua state, so file-level counters suffice. */
static size_t gc_debt;
static size_t gc_threshold = (size_t)256 << 20;
static size_t gc_owned;       /* storage bytes counted by live userdata */
static size_t gc_owned_peak;  /* the most gc_owned a full collection run here left */
static long long gc_fulls;    /* full collections run here */
static long long live_tensors;

long long l_live_tensors(void) { return live_tensors; }
size_t l_gc_debt(void) { return gc_debt; }
size_t l_gc_owned(void) { return gc_owned; }
size_t l_gc_owned_peak(void) { return gc_owned_peak; }
long long l_gc_fulls(void) { return gc_fulls; }
size_t l_gc_threshold(void) { return gc_threshold; }
void l_set_gc_threshold(size_t bytes) { gc_threshold = bytes; }

static void account(lua_State *L, vl_lua_tensor *ud) {
  vl_tensor *t = ud->t;
  live_tensors++;
  ud->counted = 0;
  /* A storage shared with other tensors was counted when it was created. */
  if (t->storage && t->storage->refcount == 1) {
    size_t n = vl_tensor_storage_nbytes(t);
    ud->counted = n;
    gc_owned += n;
    gc_debt += n;
    if (gc_debt > gc_threshold) {
      gc_debt = 0;
      lua_gc(L, LUA_GCSTEP, 0);
      /* What the young collection could not free is old (or alive): past the bound, a full one. */
      if (gc_owned / 2 > gc_owned_peak + 4 * gc_threshold) {
        lua_gc(L, LUA_GCCOLLECT);
        if (gc_owned > gc_owned_peak) gc_owned_peak = gc_owned;
        gc_fulls++;
      }
    }
  }
}

vl_tensor **l_slot(lua_State *L) {
  vl_lua_tensor *ud = (vl_lua_tensor *)lua_newuserdatauv(L, sizeof *ud, 0);
  ud->t = NULL;
  ud->counted = 0;
  luaL_setmetatable(L, VL_LUA_TENSOR_MT);
  return &ud->t;
}

/* A slot may hold a tensor even when s failed (a second step after the runtime call failed):
 * it is accounted all the same, so that its __gc balances the live count. */
int l_done(lua_State *L, vl_status s) {
  vl_lua_tensor *ud = (vl_lua_tensor *)lua_touserdata(L, -1);
  if (ud->t) account(L, ud);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

int l_done2(lua_State *L, vl_status s) {
  for (int i = -2; i <= -1; i++) {
    vl_lua_tensor *ud = (vl_lua_tensor *)lua_touserdata(L, i);
    if (ud->t) account(L, ud);
  }
  if (s != VL_OK) return vl_lua_error(L, s);
  return 2;
}

void vl_lua_pushtensor(lua_State *L, vl_tensor *t) {
  vl_tensor **slot = l_slot(L);
  *slot = t;
  l_done(L, VL_OK);
}

int vl_lua_error(lua_State *L, vl_status s) {
  const char *m = vl_errmsg();
  if (!m || !*m) m = vl_status_name(s);
  /* No "file:line:" prefix: the runtime's message names the op; the traceback has the place. */
  lua_pushstring(L, m);
  return lua_error(L);
}

void vl_lua_class(lua_State *L, const char *mt, const luaL_Reg *methods, lua_CFunction index, lua_CFunction gc,
                  lua_CFunction close, lua_CFunction tostring) {
  if (luaL_newmetatable(L, mt)) {
    lua_newtable(L); /* not luaL_newlib: it sizes the table from an array, not a pointer */
    luaL_setfuncs(L, methods, 0);
    if (index) lua_pushcclosure(L, index, 1);
    lua_setfield(L, -2, "__index");
    const char *names[] = {"__gc", "__close", "__tostring"};
    lua_CFunction fns[] = {gc, close, tostring};
    for (int i = 0; i < 3; i++)
      if (fns[i]) {
        lua_pushcfunction(L, fns[i]);
        lua_setfield(L, -2, names[i]);
      }
  }
  lua_pop(L, 1);
}

vl_lua_tensor *l_checkud(lua_State *L, int idx) {
  return (vl_lua_tensor *)luaL_checkudata(L, idx, VL_LUA_TENSOR_MT);
}

vl_tensor *vl_lua_checktensor(lua_State *L, int idx) {
  vl_lua_tensor *ud = (vl_lua_tensor *)luaL_testudata(L, idx, VL_LUA_TENSOR_MT);
  if (!ud) luaL_typeerror(L, idx, VL_LUA_TENSOR_MT);
  if (!ud->t) luaL_error(L, "tensor used after free");
  return ud->t;
}

vl_tensor *vl_lua_testtensor(lua_State *L, int idx) {
  vl_lua_tensor *ud = (vl_lua_tensor *)luaL_testudata(L, idx, VL_LUA_TENSOR_MT);
  return ud ? ud->t : NULL;
}

/* __gc, __close and :free(): idempotent. */
static int t_free(lua_State *L) {
  vl_lua_tensor *ud = l_checkud(L, 1);
  if (ud->t) {
    vl_tensor_release(ud->t);
    ud->t = NULL;
    live_tensors--;
    gc_owned -= ud->counted < gc_owned ? ud->counted : gc_owned;
    ud->counted = 0;
  }
  return 0;
}

/* ---- argument helpers ---- */

static int clamp_dim(lua_Integer d) { return d > 1000 ? 1000 : d < -1000 ? -1000 : (int)d; }

int l_checkdim(lua_State *L, int arg) {
  lua_Integer d = luaL_checkinteger(L, arg);
  if (d == 0) luaL_argerror(L, arg, "dim 0 is invalid (dims are 1-based)");
  return clamp_dim(d > 0 ? d - 1 : d);
}

int l_optdim(lua_State *L, int arg, int def0) {
  return lua_isnoneornil(L, arg) ? def0 : l_checkdim(L, arg);
}

int64_t l_checkpos(lua_State *L, int arg, int64_t n) {
  lua_Integer p = luaL_checkinteger(L, arg);
  if (p == 0) luaL_argerror(L, arg, "position 0 is invalid (positions are 1-based)");
  return p > 0 ? p - 1 : n + p;
}

int l_checksizetable(lua_State *L, int arg, int64_t size[VL_MAX_DIMS]) {
  luaL_checktype(L, arg, LUA_TTABLE);
  lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
  if (n > VL_MAX_DIMS) luaL_argerror(L, arg, "a size has at most 8 dims");
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, arg, i + 1);
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint) luaL_argerror(L, arg, "a size must be a table of integers");
    size[i] = (int64_t)v;
    lua_pop(L, 1);
  }
  return (int)n;
}

int l_checksize(lua_State *L, int arg, int64_t size[VL_MAX_DIMS]) {
  if (lua_istable(L, arg)) return l_checksizetable(L, arg, size);
  int n = lua_gettop(L) - arg + 1;
  if (n < 0) n = 0;
  if (n > VL_MAX_DIMS) luaL_argerror(L, arg, "a size has at most 8 dims");
  for (int i = 0; i < n; i++) size[i] = (int64_t)luaL_checkinteger(L, arg + i);
  return n;
}

int l_checkdimlist(lua_State *L, int arg, int dims[VL_MAX_DIMS], bool varargs) {
  if (lua_istable(L, arg)) {
    lua_Integer n = (lua_Integer)lua_rawlen(L, arg);
    if (n > VL_MAX_DIMS) luaL_argerror(L, arg, "at most 8 dims");
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, arg, i + 1);
      int isint;
      lua_Integer d = lua_tointegerx(L, -1, &isint);
      if (!isint) luaL_argerror(L, arg, "dims must be integers");
      if (d == 0) luaL_argerror(L, arg, "dim 0 is invalid (dims are 1-based)");
      dims[i] = clamp_dim(d > 0 ? d - 1 : d);
      lua_pop(L, 1);
    }
    return (int)n;
  }
  int n = varargs ? lua_gettop(L) - arg + 1 : 1;
  if (n > VL_MAX_DIMS) luaL_argerror(L, arg, "at most 8 dims");
  for (int i = 0; i < n; i++) dims[i] = l_checkdim(L, arg + i);
  return n;
}

vl_dtype l_checkdtype(lua_State *L, int arg) {
  vl_dtype dt;
  vl_status s = vl_dtype_parse(luaL_checkstring(L, arg), &dt);
  if (s != VL_OK) vl_lua_error(L, s);
  return dt;
}

vl_device l_parsedevice(lua_State *L, const char *str) {
  vl_device d;
  vl_status s = vl_device_parse(str, &d);
  if (s != VL_OK) vl_lua_error(L, s);
  return d;
}

void l_check_opts(lua_State *L, int idx, const char *fn, const char *const known[]) {
  if (lua_isnoneornil(L, idx)) return;
  idx = lua_absindex(L, idx);
  if (!lua_istable(L, idx)) luaL_error(L, "%s: options must be a table, got %s", fn, luaL_typename(L, idx));
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    bool ok = false;
    if (lua_type(L, -1) == LUA_TSTRING) {
      const char *k = lua_tostring(L, -1);
      for (int i = 0; known[i] && !ok; i++) ok = strcmp(k, known[i]) == 0;
    }
    if (!ok) {
      luaL_Buffer b;
      luaL_buffinit(L, &b);
      for (int i = 0; known[i]; i++) {
        if (i) luaL_addstring(&b, ", ");
        luaL_addstring(&b, known[i]);
      }
      if (!known[0]) {
        luaL_addstring(&b, fn);
        luaL_addstring(&b, " takes no options");
      }
      luaL_pushresult(&b);
      if (lua_type(L, -2) == LUA_TSTRING)
        luaL_error(L, "%s: unknown option '%s' (%s)", fn, lua_tostring(L, -2), lua_tostring(L, -1));
      luaL_error(L, "%s: option names must be strings, got a %s key (%s)", fn, luaL_typename(L, -2), lua_tostring(L, -1));
    }
  }
}

void l_opts(lua_State *L, int idx, const char *fn, bool requires_grad, vl_dtype *dt, vl_device *dev) {
  static const char *const known_rg[] = {"dtype", "device", "requires_grad", NULL};
  static const char *const known[] = {"dtype", "device", NULL};
  if (lua_isnoneornil(L, idx)) return;
  if (lua_type(L, idx) == LUA_TSTRING) { /* a bare dtype or device string */
    const char *s = lua_tostring(L, idx);
    if (vl_dtype_parse(s, dt) != VL_OK) *dev = l_parsedevice(L, s);
    return;
  }
  luaL_checktype(L, idx, LUA_TTABLE);
  l_check_opts(L, idx, fn, requires_grad ? known_rg : known);
  if (lua_getfield(L, idx, "dtype") != LUA_TNIL) *dt = l_checkdtype(L, lua_gettop(L));
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "device") != LUA_TNIL)
    *dev = l_parsedevice(L, luaL_checkstring(L, lua_gettop(L)));
  lua_pop(L, 1);
}

int l_optcudadev(lua_State *L, int arg, const char *fname) {
  int n = vl_cuda_device_count();
  if (n == 0) return luaL_error(L, "%s: no CUDA device", fname);
  if (lua_isnoneornil(L, arg)) return l_parsedevice(L, "cuda").index;
  if (lua_type(L, arg) == LUA_TNUMBER) {
    lua_Integer d = luaL_checkinteger(L, arg);
    if (d < 0 || d >= n)
      return luaL_error(L, "%s: no CUDA device %d (%d present)", fname, (int)d, n);
    return (int)d;
  }
  vl_device d = l_parsedevice(L, luaL_checkstring(L, arg));
  if (d.type != VL_CUDA) return luaL_error(L, "%s: expected a CUDA device, got '%s'", fname, lua_tostring(L, arg));
  return d.index;
}

bool l_isscalar(lua_State *L, int idx) {
  int ty = lua_type(L, idx);
  return ty == LUA_TNUMBER || ty == LUA_TBOOLEAN;
}

double l_toscalar(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) return lua_toboolean(L, idx) ? 1.0 : 0.0;
  return (double)luaL_checknumber(L, idx);
}

vl_scalar l_toscalarv(lua_State *L, int idx) {
  if (lua_type(L, idx) == LUA_TBOOLEAN) return vl_scalar_int(lua_toboolean(L, idx));
  if (lua_isinteger(L, idx)) return vl_scalar_int((int64_t)lua_tointeger(L, idx));
  return vl_scalar_float((double)luaL_checknumber(L, idx));
}

static vl_device tdev(const vl_tensor *t) { return t->storage->device; }

/* ---- fields and introspection ---- */

static void push_sizes(lua_State *L, int n, const int64_t *v) {
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_pushinteger(L, (lua_Integer)v[i]);
    lua_rawseti(L, -2, i + 1);
  }
}

static int wrapdim(lua_State *L, const char *op, int d, int ndim) {
  int w;
  vl_status s = vl_wrap_dim(op, d, ndim, &w);
  if (s != VL_OK) vl_lua_error(L, s);
  return w;
}

static int t_index(lua_State *L) {
  lua_pushvalue(L, 2);
  if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL) return 1;
  vl_tensor *t = vl_lua_checktensor(L, 1);
  if (lua_type(L, 2) != LUA_TSTRING) return l_tensor_index(L, t); /* x[i], x[{...}], x[mask], x[idx] */
  const char *k = lua_tostring(L, 2);
  char buf[32];
  if (strcmp(k, "shape") == 0) push_sizes(L, t->ndim, t->size);
  else if (strcmp(k, "dtype") == 0) lua_pushstring(L, vl_dtype_name(t->dtype));
  else if (strcmp(k, "device") == 0) lua_pushstring(L, vl_device_str(tdev(t), buf, sizeof buf));
  else if (strcmp(k, "ndim") == 0) lua_pushinteger(L, t->ndim);
  else if (!l_autograd_field(L, t, k)) lua_pushnil(L);
  return 1;
}

static int t_len(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  if (t->ndim == 0) return luaL_error(L, "#: a 0-dim tensor has no length");
  lua_pushinteger(L, (lua_Integer)t->size[0]);
  return 1;
}

static int size_or_stride(lua_State *L, bool stride) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  const int64_t *v = stride ? t->stride : t->size;
  if (lua_isnoneornil(L, 2)) {
    push_sizes(L, t->ndim, v);
    return 1;
  }
  int d = wrapdim(L, stride ? "stride" : "size", l_checkdim(L, 2), t->ndim);
  lua_pushinteger(L, (lua_Integer)v[d]);
  return 1;
}
static int t_size(lua_State *L) { return size_or_stride(L, false); }
static int t_stride(lua_State *L) { return size_or_stride(L, true); }

static int t_numel(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)vl_tensor_numel(vl_lua_checktensor(L, 1)));
  return 1;
}
static int t_dim(lua_State *L) {
  lua_pushinteger(L, vl_lua_checktensor(L, 1)->ndim);
  return 1;
}
static int t_is_contiguous(lua_State *L) {
  lua_pushboolean(L, vl_tensor_is_contiguous(vl_lua_checktensor(L, 1)));
  return 1;
}
static int t_element_size(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)vl_dtype_size(vl_lua_checktensor(L, 1)->dtype));
  return 1;
}
static int t_storage_offset(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)vl_lua_checktensor(L, 1)->offset);
  return 1;
}
static int t_data_ptr(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)(uintptr_t)vl_tensor_data(vl_lua_checktensor(L, 1)));
  return 1;
}

/* ---- views ---- */

static int t_view(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t size[VL_MAX_DIMS];
  int n = l_checksize(L, 2, size);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_view(t, n, size, slot));
}

static int t_reshape(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t size[VL_MAX_DIMS];
  int n = l_checksize(L, 2, size);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_reshape(t, n, size, slot));
}

static int t_narrow(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int d = wrapdim(L, "narrow", l_checkdim(L, 2), t->ndim);
  int64_t start = l_checkpos(L, 3, t->size[d]);
  int64_t len = (int64_t)luaL_checkinteger(L, 4);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_narrow(t, d, start, len, slot));
}

static int t_select(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int d = wrapdim(L, "select", l_checkdim(L, 2), t->ndim);
  int64_t idx = l_checkpos(L, 3, t->size[d]);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_select(t, d, idx, slot));
}

static int t_transpose(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int d0 = l_checkdim(L, 2), d1 = l_checkdim(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_transpose(t, d0, d1, slot));
}

static int t_t(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  if (t->ndim > 2) {
    char buf[128];
    return luaL_error(L, "t: expected a tensor of at most 2 dims, got %s", vl_tensor_desc(t, buf, sizeof buf));
  }
  vl_tensor **slot = l_slot(L);
  if (t->ndim < 2) {
    *slot = vl_tensor_retain(t);
    return l_done(L, VL_OK);
  }
  return l_done(L, vl_ag_transpose(t, 0, 1, slot));
}

static int t_permute(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int perm[VL_MAX_DIMS];
  int n = l_checkdimlist(L, 2, perm, true);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_permute(t, n, perm, slot));
}

static int t_expand(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t size[VL_MAX_DIMS];
  int n = l_checksize(L, 2, size);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_expand(t, n, size, slot));
}

static int t_expand_as(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor *u = vl_lua_checktensor(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_expand(t, u->ndim, u->size, slot));
}

static int t_squeeze(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  bool all = lua_isnoneornil(L, 2);
  int d = all ? 0 : l_checkdim(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, all ? vl_ag_squeeze_all(t, slot) : vl_ag_squeeze(t, d, slot));
}

static int t_unsqueeze(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int d = l_checkdim(L, 2);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_unsqueeze(t, d, slot));
}

static int t_contiguous(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_contiguous(t, slot));
}

/* t:set_(src): t becomes a view of src's data, keeping its identity (Module:to()). */
static int t_set_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1), *src = vl_lua_checktensor(L, 2);
  vl_status s = vl_ag_set_(t, src);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_settop(L, 1);
  return 1;
}

static int t_clone(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_clone(t, slot));
}

/* The malloc'd array from vl_split/vl_chunk lives in a userdata while its tensors are moved into
 * Lua one by one, so a memory error midway releases the rest instead of leaking them. */
#define PENDING_MT "v100.pending_list"
typedef struct pending_list {
  vl_tensor **v;
  int n, i;
} pending_list;

static int pending_gc(lua_State *L) {
  pending_list *p = (pending_list *)lua_touserdata(L, 1);
  for (; p->i < p->n; p->i++) vl_tensor_release(p->v[p->i]);
  free(p->v);
  p->v = NULL;
  p->n = 0;
  return 0;
}

static int split_or_chunk(lua_State *L, bool chunk) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  if (!chunk && lua_istable(L, 2)) return l_split_sizes(L); /* sizes of the pieces */
  lua_Integer k = luaL_checkinteger(L, 2);
  int d = l_optdim(L, 3, 0);
  pending_list *p = (pending_list *)lua_newuserdatauv(L, sizeof *p, 0);
  p->v = NULL;
  p->n = p->i = 0;
  luaL_setmetatable(L, PENDING_MT);
  /* chunk counts are ints: clamp both ways (a count below INT_MIN must stay negative, and be refused). */
  vl_status s = chunk ? vl_ag_chunk(t, (int)(k > INT_MAX ? INT_MAX : k < INT_MIN ? INT_MIN : k), d, &p->v, &p->n)
                      : vl_ag_split(t, (int64_t)k, d, &p->v, &p->n);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_createtable(L, p->n, 0);
  while (p->i < p->n) {
    vl_tensor **slot = l_slot(L);
    *slot = p->v[p->i++];
    l_done(L, VL_OK);
    lua_rawseti(L, -2, p->i);
  }
  free(p->v);
  p->v = NULL;
  p->n = p->i = 0;
  return 1;
}
static int t_split(lua_State *L) { return split_or_chunk(L, false); }
static int t_chunk(lua_State *L) { return split_or_chunk(L, true); }

/* ---- conversion and copies ---- */

static int t_to(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_dtype dt = t->dtype;
  vl_device dev = tdev(t);
  if (lua_type(L, 2) == LUA_TSTRING) {
    /* t:to(dtype), t:to(device), t:to(device, dtype) as nn.Module:to takes them; a third
     * argument is not silently dropped. */
    int last = lua_isnoneornil(L, 3) ? 2 : 3;
    for (int i = 2; i <= last; i++) {
      const char *s = luaL_checkstring(L, i);
      if (vl_dtype_parse(s, &dt) != VL_OK && vl_device_parse(s, &dev) != VL_OK)
        return luaL_error(L, "to: '%s' is neither a dtype nor a device (%s)", s, vl_errmsg());
    }
  } else {
    luaL_checktype(L, 2, LUA_TTABLE);
    l_opts(L, 2, "to", false, &dt, &dev);
  }
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_to(t, dt, dev, slot));
}

static int to_dtype(lua_State *L, vl_dtype dt) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_to(t, dt, tdev(t), slot));
}
static int t_float(lua_State *L) { return to_dtype(L, VL_F32); }
static int t_half(lua_State *L) { return to_dtype(L, VL_F16); }
static int t_bfloat16(lua_State *L) { return to_dtype(L, VL_BF16); }
static int t_double(lua_State *L) { return to_dtype(L, VL_F64); }
static int t_int(lua_State *L) { return to_dtype(L, VL_I32); }
static int t_long(lua_State *L) { return to_dtype(L, VL_I64); }
static int t_byte(lua_State *L) { return to_dtype(L, VL_U8); }
static int t_bool(lua_State *L) { return to_dtype(L, VL_BOOL); }

static int t_cuda(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_device dev = vl_cuda_device(l_optcudadev(L, 2, "cuda"));
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_to(t, t->dtype, dev, slot));
}

static int t_cpu(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_ag_to(t, t->dtype, vl_cpu_device(), slot));
}

static int self_or_error(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_settop(L, 1);
  return 1;
}

static int t_copy_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  return self_or_error(L, vl_ag_copy_(t, vl_lua_checktensor(L, 2)));
}
static int t_fill_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  return self_or_error(L, vl_ag_fill_scalar_(t, l_toscalarv(L, 2)));
}
static int t_zero_(lua_State *L) { return self_or_error(L, vl_ag_fill_(vl_lua_checktensor(L, 1), 0.0)); }
static int t_uniform_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  return self_or_error(L, vl_ag_uniform_(t, luaL_optnumber(L, 2, 0.0), luaL_optnumber(L, 3, 1.0)));
}
static int t_normal_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  return self_or_error(L, vl_ag_normal_(t, luaL_optnumber(L, 2, 0.0), luaL_optnumber(L, 3, 1.0)));
}
static int t_bernoulli_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  return self_or_error(L, vl_ag_bernoulli_(t, luaL_optnumber(L, 2, 0.5)));
}

/* One host element as Lua sees it: integers exactly (i64 beyond 2^53 too), bool as boolean. */
static void push_elem(lua_State *L, const void *p, vl_dtype dt) {
  switch (dt) {
    case VL_I64: lua_pushinteger(L, (lua_Integer)*(const int64_t *)p); break;
    case VL_I32: lua_pushinteger(L, (lua_Integer)*(const int32_t *)p); break;
    case VL_U8: lua_pushinteger(L, (lua_Integer)*(const uint8_t *)p); break;
    case VL_BOOL: lua_pushboolean(L, *(const uint8_t *)p != 0); break;
    default: lua_pushnumber(L, (lua_Number)vl_load_as_f64(p, dt)); break;
  }
}

static int t_item(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  if (vl_tensor_numel(t) != 1) {
    char buf[128];
    return luaL_error(L, "item: expected a tensor with one element, got %s", vl_tensor_desc(t, buf, sizeof buf));
  }
  int64_t elem[2] = {0, 0};
  vl_status s = vl_read_host("item", t, elem);
  if (s != VL_OK) return vl_lua_error(L, s);
  push_elem(L, elem, t->dtype);
  return 1;
}

static void build_table(lua_State *L, const char *buf, size_t esz, vl_dtype dt, const vl_tensor *t,
                        int d, size_t *pos) {
  luaL_checkstack(L, 4, "totable: too deep");
  lua_createtable(L, (int)t->size[d], 0);
  for (int64_t i = 0; i < t->size[d]; i++) {
    if (d == t->ndim - 1) {
      push_elem(L, buf + *pos * esz, dt);
      (*pos)++;
    } else {
      build_table(L, buf, esz, dt, t, d + 1, pos);
    }
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
}

static int t_totable(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  size_t esz = vl_dtype_size(t->dtype);
  size_t n = (size_t)vl_tensor_numel(t);
  /* A userdata buffer: freed by the collector even if building the tables raises. */
  char *buf = (char *)lua_newuserdatauv(L, n * esz + 8, 0);
  vl_status s = vl_read_host("totable", t, buf);
  if (s != VL_OK) return vl_lua_error(L, s);
  if (t->ndim == 0) {
    push_elem(L, buf, t->dtype);
    return 1;
  }
  size_t pos = 0;
  build_table(L, buf, esz, t->dtype, t, 0, &pos);
  return 1;
}

static const luaL_Reg tensor_methods[] = {
    {"free", t_free},
    {"size", t_size},
    {"stride", t_stride},
    {"numel", t_numel},
    {"nelement", t_numel},
    {"dim", t_dim},
    {"is_contiguous", t_is_contiguous},
    {"element_size", t_element_size},
    {"storage_offset", t_storage_offset},
    {"data_ptr", t_data_ptr},
    {"view", t_view},
    {"reshape", t_reshape},
    {"narrow", t_narrow},
    {"select", t_select},
    {"transpose", t_transpose},
    {"t", t_t},
    {"permute", t_permute},
    {"expand", t_expand},
    {"expand_as", t_expand_as},
    {"squeeze", t_squeeze},
    {"unsqueeze", t_unsqueeze},
    {"contiguous", t_contiguous},
    {"set_", t_set_},
    {"clone", t_clone},
    {"split", t_split},
    {"chunk", t_chunk},
    {"to", t_to},
    {"float", t_float},
    {"half", t_half},
    {"bfloat16", t_bfloat16},
    {"double", t_double},
    {"int", t_int},
    {"long", t_long},
    {"byte", t_byte},
    {"bool", t_bool},
    {"cuda", t_cuda},
    {"cpu", t_cpu},
    {"copy_", t_copy_},
    {"fill_", t_fill_},
    {"zero_", t_zero_},
    {"uniform_", t_uniform_},
    {"normal_", t_normal_},
    {"bernoulli_", t_bernoulli_},
    {"item", t_item},
    {"totable", t_totable},
    {"record_stream", l_record_stream},
    {NULL, NULL},
};

void l_register_tensor_methods(lua_State *L) {
  luaL_setfuncs(L, tensor_methods, 0);
  luaL_setfuncs(L, l_index_methods, 0);
  if (luaL_newmetatable(L, PENDING_MT)) {
    lua_pushcfunction(L, pending_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
}

/* The metatable: __index looks in `methods` (the table at the top, left there) first. */
void l_tensor_metatable(lua_State *L) {
  int methods = lua_gettop(L);
  luaL_newmetatable(L, VL_LUA_TENSOR_MT);
  lua_pushvalue(L, methods);
  lua_pushcclosure(L, t_index, 1);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, t_free);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, t_free);
  lua_setfield(L, -2, "__close");
  lua_pushcfunction(L, t_len);
  lua_setfield(L, -2, "__len");
  lua_pushcfunction(L, l_autograd_newindex);
  lua_setfield(L, -2, "__newindex");
  lua_pushcfunction(L, l_tensor_tostring);
  lua_setfield(L, -2, "__tostring");
  l_register_operators(L);
  lua_pop(L, 1);
}
