/* bindings/l_create.c: creation and random sampling beyond bindings/l_core.c's (docs/LUA_API.md,
 * "Creation and random sampling"): v100.randint, randint_like, randperm, linspace, logspace, eye,
 * multinomial, and the methods t:multinomial, t:exponential_, t:random_. Translation only: the
 * checks and messages are the runtime's (runtime/ops/create.c, runtime/ops/sample.c), except the
 * Lua argument forms and options checked here. */
#include <lauxlib.h>
#include <lua.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

static const char *const CREATE_KEYS[] = {"dtype", "device", "requires_grad", NULL};

/* A shape: a table ({2, 3}) or one integer (a 1-D size). */
static int check_shape(lua_State *L, int arg, int64_t size[VL_MAX_DIMS], const char *fn) {
  int n = 1;
  if (lua_type(L, arg) == LUA_TNUMBER) size[0] = (int64_t)luaL_checkinteger(L, arg);
  else if (lua_istable(L, arg)) n = l_checksizetable(L, arg, size);
  else return luaL_error(L, "%s: expected a shape (a table of sizes) at argument %d, got %s", fn, arg, luaL_typename(L, arg));
  for (int i = 0; i < n; i++)
    if (size[i] < 0) return luaL_error(L, "%s: negative size %I in dim %d", fn, (lua_Integer)size[i], i + 1);
  return n;
}

/* An integer argument (an integral float such as 3.0 passes), named in the error. */
static int64_t check_int(lua_State *L, int arg, const char *fn, const char *what) {
  if (lua_type(L, arg) != LUA_TNUMBER)
    return luaL_error(L, "%s: %s must be an integer, got %s", fn, what, luaL_typename(L, arg));
  int exact;
  lua_Integer v = lua_tointegerx(L, arg, &exact); /* a float converts only when integral and in range */
  if (!exact) return luaL_error(L, "%s: %s must be an integer, got %f", fn, what, lua_tonumber(L, arg));
  return (int64_t)v;
}

static double check_num(lua_State *L, int arg, const char *fn, const char *what) {
  if (lua_type(L, arg) != LUA_TNUMBER)
    return luaL_error(L, "%s: %s must be a number, got %s", fn, what, luaL_typename(L, arg));
  return lua_tonumber(L, arg);
}

/* The creation result at the top: requires_grad from opts, then returned. */
static int created(lua_State *L, vl_status s, int opts) {
  l_done(L, s);
  l_opt_requires_grad(L, opts, lua_gettop(L));
  return 1;
}

/* randint(low, high, shape[, opts]) or randint(high, shape[, opts]): i64 by default. */
static int m_randint(lua_State *L) {
  int64_t lo = 0, hi, size[VL_MAX_DIMS];
  int at = 2; /* the shape's argument */
  if (lua_type(L, 2) == LUA_TNUMBER) {
    lo = check_int(L, 1, "randint", "low");
    hi = check_int(L, 2, "randint", "high");
    at = 3;
  } else {
    hi = check_int(L, 1, "randint", "high");
  }
  int n = check_shape(L, at, size, "randint");
  vl_dtype dt = VL_I64;
  vl_device dev = vl_cpu_device();
  l_opts(L, at + 1, "randint", true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  return created(L, vl_randint(n, size, lo, hi, dt, dev, slot), at + 1);
}

/* randint_like(t, [low,] high[, opts]): t's shape, dtype and device unless opts say otherwise. */
static int m_randint_like(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int64_t lo = 0, hi;
  int opts = 3;
  if (lua_type(L, 3) == LUA_TNUMBER) {
    lo = check_int(L, 2, "randint_like", "low");
    hi = check_int(L, 3, "randint_like", "high");
    opts = 4;
  } else {
    hi = check_int(L, 2, "randint_like", "high");
  }
  vl_dtype dt = t->dtype;
  vl_device dev = t->storage->device;
  l_opts(L, opts, "randint_like", true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  return created(L, vl_randint(t->ndim, t->size, lo, hi, dt, dev, slot), opts);
}

static int m_randperm(lua_State *L) {
  int64_t n = check_int(L, 1, "randperm", "n");
  vl_dtype dt = VL_I64;
  vl_device dev = vl_cpu_device();
  l_opts(L, 2, "randperm", true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  return created(L, vl_randperm(n, dt, dev, slot), 2);
}

/* opts at idx for a creation function with extra keys (logspace's base): every key checked
 * against `known`, dtype and device read here. */
static void opts_with(lua_State *L, int idx, const char *fn, const char *const known[], vl_dtype *dt, vl_device *dev) {
  if (lua_isnoneornil(L, idx) || lua_type(L, idx) == LUA_TSTRING) {
    l_opts(L, idx, fn, true, dt, dev);
    return;
  }
  l_check_opts(L, idx, fn, known);
  if (lua_getfield(L, idx, "dtype") != LUA_TNIL) *dt = l_checkdtype(L, lua_gettop(L));
  lua_pop(L, 1);
  if (lua_getfield(L, idx, "device") != LUA_TNIL) *dev = l_parsedevice(L, luaL_checkstring(L, lua_gettop(L)));
  lua_pop(L, 1);
}

/* linspace(start, end, steps[, opts]) and logspace(start, end, steps[, {base = 10, ...}]): f32 by
 * default. */
static int space(lua_State *L, bool log) {
  static const char *const log_keys[] = {"dtype", "device", "requires_grad", "base", NULL};
  const char *fn = log ? "logspace" : "linspace";
  double start = check_num(L, 1, fn, "start"), end = check_num(L, 2, fn, "end");
  int64_t steps = check_int(L, 3, fn, "steps");
  vl_dtype dt = VL_F32;
  vl_device dev = vl_cpu_device();
  double base = 10;
  if (log) {
    opts_with(L, 4, fn, log_keys, &dt, &dev);
    if (lua_istable(L, 4) && lua_getfield(L, 4, "base") != LUA_TNIL) {
      if (lua_type(L, -1) != LUA_TNUMBER) return luaL_error(L, "logspace: base must be a number, got %s", luaL_typename(L, -1));
      base = lua_tonumber(L, -1);
    }
    lua_settop(L, 4);
  } else {
    opts_with(L, 4, fn, CREATE_KEYS, &dt, &dev);
  }
  vl_tensor **slot = l_slot(L);
  vl_status s = log ? vl_logspace(start, end, steps, base, dt, dev, slot) : vl_linspace(start, end, steps, dt, dev, slot);
  return created(L, s, 4);
}
static int m_linspace(lua_State *L) { return space(L, false); }
static int m_logspace(lua_State *L) { return space(L, true); }

/* eye(n[, m][, opts]): f32 by default. */
static int m_eye(lua_State *L) {
  int64_t n = check_int(L, 1, "eye", "n"), m = n;
  int opts = 2;
  if (lua_type(L, 2) == LUA_TNUMBER) {
    m = check_int(L, 2, "eye", "m");
    opts = 3;
  }
  vl_dtype dt = VL_F32;
  vl_device dev = vl_cpu_device();
  l_opts(L, opts, "eye", true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  return created(L, vl_eye(n, m, dt, dev, slot), opts);
}

/* multinomial(probs, num_samples[, {replacement = false}]), also probs:multinomial(...). */
static int m_multinomial(lua_State *L) {
  static const char *const keys[] = {"replacement", NULL};
  vl_tensor *p = vl_lua_checktensor(L, 1);
  int64_t k = check_int(L, 2, "multinomial", "num_samples");
  l_check_opts(L, 3, "multinomial", keys);
  bool replacement = false;
  if (lua_istable(L, 3) && lua_getfield(L, 3, "replacement") != LUA_TNIL) {
    if (!lua_isboolean(L, -1))
      return luaL_error(L, "multinomial: replacement must be a boolean, got %s", luaL_typename(L, -1));
    replacement = lua_toboolean(L, -1);
  }
  lua_settop(L, 3);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_multinomial(p, k, replacement, slot));
}

static int self_or_error(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_settop(L, 1);
  return 1;
}

/* t:exponential_([lambd = 1]) */
static int t_exponential_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  double lambd = lua_isnoneornil(L, 2) ? 1.0 : check_num(L, 2, "exponential_", "lambd");
  return self_or_error(L, vl_ag_exponential_(t, lambd));
}

/* t:random_() (PyTorch's default range), t:random_(to) ([0, to)), t:random_(from, to). */
static int t_random_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  if (lua_isnoneornil(L, 2)) return self_or_error(L, vl_ag_random_(t, false, 0, 0));
  int64_t lo = 0, hi;
  if (lua_isnoneornil(L, 3)) {
    hi = check_int(L, 2, "random_", "to");
  } else {
    lo = check_int(L, 2, "random_", "from");
    hi = check_int(L, 3, "random_", "to");
  }
  return self_or_error(L, vl_ag_random_(t, true, lo, hi));
}

static const luaL_Reg create_funcs[] = {
    {"randint", m_randint},   {"randint_like", m_randint_like}, {"randperm", m_randperm},
    {"linspace", m_linspace}, {"logspace", m_logspace},         {"eye", m_eye},
    {"multinomial", m_multinomial}, {NULL, NULL},
};

static const luaL_Reg create_methods[] = {
    {"multinomial", m_multinomial},
    {"exponential_", t_exponential_},
    {"random_", t_random_},
    {NULL, NULL},
};

void l_register_create(lua_State *L) {
  luaL_setfuncs(L, create_funcs, 0);
  lua_pushvalue(L, -2);
  luaL_setfuncs(L, create_methods, 0);
  lua_pop(L, 1);
}
