/* bindings/l_core.c: the `v100.core` module: tensor creation, the RNG, devices, versions,
 * debug counters, and the assembly of the module table (with cuda, memory and io). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/core/cuda.h"
#include "runtime/core/layout.h"
#include "runtime/dist/comm.h"
#include "runtime/ops/ops.h"

#ifndef VL_VERSION_STRING
#define VL_VERSION_STRING "0.0.0"
#endif

/* A size: a table {2, 3} or a single integer (1-D). Negative sizes are reported here, under the
 * name of the function the user called (the runtime would name its own `empty`). */
static int check_size(lua_State *L, int arg, int64_t size[VL_MAX_DIMS], const char *fname) {
  int n;
  if (lua_type(L, arg) == LUA_TNUMBER) {
    size[0] = (int64_t)luaL_checkinteger(L, arg);
    n = 1;
  } else {
    n = l_checksizetable(L, arg, size);
  }
  for (int i = 0; i < n; i++)
    if (size[i] < 0) return luaL_error(L, "%s: negative size %I in dim %d", fname, (lua_Integer)size[i], i + 1);
  return n;
}

/* ---- v100.tensor(tbl, opts) ---- */

typedef struct scan {
  int ndim;
  int64_t size[VL_MAX_DIMS];
  bool has_bool, has_float, has_int;
} scan;

static void scan_table(lua_State *L, int idx, int d, scan *s) {
  luaL_checkstack(L, 2, "tensor: table too deep");
  int64_t n = (int64_t)lua_rawlen(L, idx);
  if (n != s->size[d])
    luaL_error(L, "tensor: the table is not rectangular (dim %d has sizes %I and %I)", d + 1,
               (lua_Integer)s->size[d], (lua_Integer)n);
  for (int64_t i = 1; i <= n; i++) {
    int ty = lua_rawgeti(L, idx, (lua_Integer)i);
    if (d < s->ndim - 1) {
      if (ty != LUA_TTABLE) luaL_error(L, "tensor: expected a table at dim %d, got a %s", d + 2, lua_typename(L, ty));
      scan_table(L, lua_gettop(L), d + 1, s);
    } else if (ty == LUA_TBOOLEAN) {
      s->has_bool = true;
    } else if (ty == LUA_TNUMBER) {
      if (lua_isinteger(L, -1)) s->has_int = true;
      else s->has_float = true;
    } else {
      luaL_error(L, "tensor: expected numbers or booleans, got a %s", lua_typename(L, ty));
    }
    lua_pop(L, 1);
  }
}

/* The conversion rule of runtime/core/scalar.h: out-of-range and NaN/inf into integer dtypes raise. */
static void store_value(lua_State *L, int idx, char *p, vl_dtype dt) {
  vl_status s = vl_scalar_to("tensor", l_toscalarv(L, idx), dt, p);
  if (s != VL_OK) vl_lua_error(L, s);
}

static void fill_table(lua_State *L, int idx, int d, const scan *s, char *buf, vl_dtype dt, size_t *pos) {
  size_t esz = vl_dtype_size(dt);
  for (int64_t i = 1; i <= s->size[d]; i++) {
    lua_rawgeti(L, idx, (lua_Integer)i);
    if (d < s->ndim - 1) {
      fill_table(L, lua_gettop(L), d + 1, s, buf, dt, pos);
    } else {
      store_value(L, -1, buf + *pos * esz, dt);
      (*pos)++;
    }
    lua_pop(L, 1);
  }
}

static int m_tensor(lua_State *L) {
  vl_device dev = vl_cpu_device();
  scan s;
  memset(&s, 0, sizeof s);
  lua_settop(L, 2); /* the options (or nil) at 2, below what the scan pushes */
  int ty = lua_type(L, 1);
  if (ty == LUA_TTABLE) {
    /* Shape from the first element of each level; scan_table checks the rest. */
    lua_pushvalue(L, 1);
    for (;;) {
      if (s.ndim == VL_MAX_DIMS) return luaL_error(L, "tensor: more than %d dims", VL_MAX_DIMS);
      s.size[s.ndim++] = (int64_t)lua_rawlen(L, -1);
      if (s.size[s.ndim - 1] == 0 || lua_rawgeti(L, -1, 1) != LUA_TTABLE) break;
    }
    lua_settop(L, 2);
    scan_table(L, 1, 0, &s);
  } else if (ty == LUA_TBOOLEAN) {
    s.has_bool = true;
  } else if (ty == LUA_TNUMBER) {
    if (lua_isinteger(L, 1)) s.has_int = true;
    else s.has_float = true;
  } else {
    return luaL_typeerror(L, 1, "table, number or boolean");
  }
  if (s.has_bool && (s.has_int || s.has_float)) return luaL_error(L, "tensor: mixed booleans and numbers");
  vl_dtype dt = s.has_bool ? VL_BOOL : (s.has_int && !s.has_float) ? VL_I64 : VL_F32;
  l_opts(L, 2, "tensor", true, &dt, &dev);
  int64_t numel = 1;
  for (int d = 0; d < s.ndim; d++) numel *= s.size[d];
  char *buf = (char *)lua_newuserdatauv(L, (size_t)numel * vl_dtype_size(dt) + 8, 0);
  if (ty == LUA_TTABLE) {
    size_t pos = 0;
    fill_table(L, 1, 0, &s, buf, dt, &pos);
  } else {
    store_value(L, 1, buf, dt);
  }
  vl_tensor **slot = l_slot(L);
  l_done(L, vl_from_host(buf, s.ndim, s.size, dt, dev, slot));
  l_opt_requires_grad(L, 2, lua_gettop(L));
  return 1;
}

/* ---- sized creation ---- */

static int m_empty(lua_State *L) {
  int64_t size[VL_MAX_DIMS];
  int n = check_size(L, 1, size, "empty");
  vl_dtype dt = VL_F32;
  vl_device dev = vl_cpu_device();
  l_opts(L, 2, "empty", true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  l_done(L, vl_tensor_empty(n, size, dt, dev, slot));
  l_opt_requires_grad(L, 2, lua_gettop(L));
  return 1;
}

static int full_at(lua_State *L, const char *fname, vl_scalar value, int opts) {
  int64_t size[VL_MAX_DIMS];
  int n = check_size(L, 1, size, fname);
  vl_dtype dt = VL_F32;
  vl_device dev = vl_cpu_device();
  l_opts(L, opts, fname, true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  l_done(L, vl_full_scalar(n, size, value, dt, dev, slot));
  l_opt_requires_grad(L, opts, lua_gettop(L));
  return 1;
}
static int m_zeros(lua_State *L) { return full_at(L, "zeros", vl_scalar_int(0), 2); }
static int m_ones(lua_State *L) { return full_at(L, "ones", vl_scalar_int(1), 2); }
static int m_full(lua_State *L) { return full_at(L, "full", l_toscalarv(L, 2), 3); }

static int m_arange(lua_State *L) {
  int nnum = 0;
  while (nnum < 3 && lua_type(L, nnum + 1) == LUA_TNUMBER) nnum++;
  if (nnum == 0) return luaL_argerror(L, 1, "number expected");
  bool integral = true;
  for (int i = 1; i <= nnum; i++) integral = integral && lua_isinteger(L, i);
  vl_scalar start = vl_scalar_int(0), stop, step = vl_scalar_int(1);
  if (nnum == 1) stop = l_toscalarv(L, 1);
  else {
    start = l_toscalarv(L, 1);
    stop = l_toscalarv(L, 2);
    if (nnum == 3) step = l_toscalarv(L, 3);
  }
  vl_dtype dt = integral ? VL_I64 : VL_F32;
  vl_device dev = vl_cpu_device();
  l_opts(L, nnum + 1, "arange", true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  l_done(L, vl_arange_scalar(start, stop, step, dt, dev, slot));
  l_opt_requires_grad(L, nnum + 1, lua_gettop(L));
  return 1;
}

static int random_sized(lua_State *L, int kind) {
  static const char *const names[] = {"rand", "randn", "bernoulli"};
  int64_t size[VL_MAX_DIMS];
  int n = check_size(L, 1, size, names[kind]);
  double p = 0.5;
  int opts = 2;
  if (kind == 2) {
    p = luaL_checknumber(L, 2);
    opts = 3;
  }
  vl_dtype dt = VL_F32;
  vl_device dev = vl_cpu_device();
  l_opts(L, opts, names[kind], true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  vl_status s = kind == 0 ? vl_rand(n, size, 0.0, 1.0, dt, dev, slot)
              : kind == 1 ? vl_randn(n, size, 0.0, 1.0, dt, dev, slot)
                          : vl_bernoulli(n, size, p, dt, dev, slot);
  l_done(L, s);
  l_opt_requires_grad(L, opts, lua_gettop(L));
  return 1;
}
static int m_rand(lua_State *L) { return random_sized(L, 0); }
static int m_randn(lua_State *L) { return random_sized(L, 1); }
static int m_bernoulli(lua_State *L) { return random_sized(L, 2); }

/* *_like(t[, value], opts): 0 empty, 1 zeros, 2 ones, 3 full, 4 rand, 5 randn */
static int like(lua_State *L, int kind) {
  static const char *const like_names[] = {"empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like"};
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_dtype dt = t->dtype;
  vl_device dev = t->storage->device;
  vl_scalar v = vl_scalar_int(kind == 2);
  if (kind == 3) v = l_toscalarv(L, 2);
  l_opts(L, kind == 3 ? 3 : 2, like_names[kind], true, &dt, &dev);
  vl_tensor **slot = l_slot(L);
  vl_status s;
  /* empty/zeros/ones/full keep a dense tensor's dim order (channels-last stays channels-last),
   * so state made like a parameter (optimizers) has the parameter's layout. */
  switch (kind) {
    case 0: s = vl_empty_like(t, dt, dev, slot); break;
    case 4: s = vl_rand(t->ndim, t->size, 0.0, 1.0, dt, dev, slot); break;
    case 5: s = vl_randn(t->ndim, t->size, 0.0, 1.0, dt, dev, slot); break;
    default:
      s = vl_empty_like(t, dt, dev, slot);
      if (s == VL_OK) s = vl_fill_scalar_(*slot, v);
      break;
  }
  l_done(L, s);
  l_opt_requires_grad(L, kind == 3 ? 3 : 2, lua_gettop(L));
  return 1;
}
static int m_empty_like(lua_State *L) { return like(L, 0); }
static int m_zeros_like(lua_State *L) { return like(L, 1); }
static int m_ones_like(lua_State *L) { return like(L, 2); }
static int m_full_like(lua_State *L) { return like(L, 3); }
static int m_rand_like(lua_State *L) { return like(L, 4); }
static int m_randn_like(lua_State *L) { return like(L, 5); }

/* ---- RNG ---- */

static int m_manual_seed(lua_State *L) {
  vl_manual_seed((uint64_t)luaL_checkinteger(L, 1));
  return 0;
}
static int m_rng_state(lua_State *L) {
  uint64_t seed, off;
  vl_rng_get_state(&seed, &off);
  lua_pushinteger(L, (lua_Integer)seed);
  lua_pushinteger(L, (lua_Integer)off);
  return 2;
}
static int m_set_rng_state(lua_State *L) {
  vl_rng_set_state((uint64_t)luaL_checkinteger(L, 1), (uint64_t)luaL_checkinteger(L, 2));
  return 0;
}

/* ---- devices, versions, debug ---- */

static int m_device(lua_State *L) {
  int n = vl_cuda_device_count();
  if (n == 0) {
    lua_pushliteral(L, "cpu");
    return 1;
  }
  vl_dist_info di; /* the launcher's local rank before dist.init, MPI's after */
  vl_dist_get_info(&di);
  int r = di.local_rank;
  /* More local ranks than GPUs (oversubscription) share devices round-robin. */
  lua_pushfstring(L, "cuda:%d", (r < 0 ? 0 : r) % n);
  return 1;
}

static int m_versions(lua_State *L) {
  vl_versions v;
  memset(&v, 0, sizeof v);
  vl_get_versions(&v);
  lua_createtable(L, 0, 10);
  lua_pushliteral(L, VL_VERSION_STRING);
  lua_setfield(L, -2, "v100lua");
  lua_pushliteral(L, LUA_RELEASE);
  lua_setfield(L, -2, "lua");
  lua_pushinteger(L, v.cuda_runtime);
  lua_setfield(L, -2, "cuda_runtime");
  lua_pushinteger(L, v.cuda_driver);
  lua_setfield(L, -2, "cuda_driver");
  lua_pushinteger(L, v.cublas);
  lua_setfield(L, -2, "cublas");
  lua_pushinteger(L, (lua_Integer)v.cudnn);
  lua_setfield(L, -2, "cudnn");
  lua_pushinteger(L, (lua_Integer)v.cudnn_compiled);
  lua_setfield(L, -2, "cudnn_compiled");
  lua_pushinteger(L, v.nccl);
  lua_setfield(L, -2, "nccl");
  lua_pushstring(L, v.mpi);
  lua_setfield(L, -2, "mpi");
  lua_pushboolean(L, vl_have_cuda());
  lua_setfield(L, -2, "built_with_cuda");
  return 1;
}

/* A tensor userdata, freed or not. */
static int m_is_tensor(lua_State *L) {
  lua_pushboolean(L, luaL_testudata(L, 1, VL_LUA_TENSOR_MT) != NULL);
  return 1;
}

static int d_live_tensors(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)l_live_tensors());
  return 1;
}
static int d_gc_debt(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)l_gc_debt());
  return 1;
}
/* gc_owned() -> storage bytes owned by live tensor userdata, the most a full collection of the
 * accounting left, and how many it ran (l_tensor.c's full-collection rule). */
static int d_gc_owned(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)l_gc_owned());
  lua_pushinteger(L, (lua_Integer)l_gc_owned_peak());
  lua_pushinteger(L, (lua_Integer)l_gc_fulls());
  return 3;
}
/* gc_threshold([bytes]) -> the previous threshold */
static int d_gc_threshold(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)l_gc_threshold());
  if (!lua_isnoneornil(L, 1)) {
    lua_Integer b = luaL_checkinteger(L, 1);
    luaL_argcheck(L, b > 0, 1, "threshold must be positive");
    l_set_gc_threshold((size_t)b);
  }
  return 1;
}

/* dtype_of(name) -> the short name ('float64' -> 'f64'), or nil and the message for a name that
 * is not a dtype (so that callers can tell a dtype from a device string). */
static int m_dtype_of(lua_State *L) {
  vl_dtype dt;
  if (vl_dtype_parse(luaL_checkstring(L, 1), &dt) != VL_OK) {
    luaL_pushfail(L);
    lua_pushstring(L, vl_errmsg());
    return 2;
  }
  lua_pushstring(L, vl_dtype_name(dt));
  return 1;
}

/* dtype_is_float(name) -> whether the dtype is f32, f16, bf16 or f64; raises for unknown names. */
static int m_dtype_is_float(lua_State *L) {
  lua_pushboolean(L, vl_dtype_is_float(l_checkdtype(L, 1)));
  return 1;
}

/* v100.dtypes: every accepted dtype name (short names and aliases) -> its short name, from the
 * one table in runtime/core/dtype.c. */
static void push_dtype_table(lua_State *L) {
  lua_newtable(L);
  const char *name;
  vl_dtype dt;
  for (int i = 0; vl_dtype_name_at(i, &name, &dt); i++) {
    lua_pushstring(L, vl_dtype_name(dt));
    lua_setfield(L, -2, name);
  }
}

static const luaL_Reg module_funcs[] = {
    {"tensor", m_tensor},
    {"empty", m_empty},
    {"zeros", m_zeros},
    {"ones", m_ones},
    {"full", m_full},
    {"arange", m_arange},
    {"rand", m_rand},
    {"randn", m_randn},
    {"bernoulli", m_bernoulli},
    {"empty_like", m_empty_like},
    {"zeros_like", m_zeros_like},
    {"ones_like", m_ones_like},
    {"full_like", m_full_like},
    {"rand_like", m_rand_like},
    {"randn_like", m_randn_like},
    {"manual_seed", m_manual_seed},
    {"rng_state", m_rng_state},
    {"set_rng_state", m_set_rng_state},
    {"device", m_device},
    {"versions", m_versions},
    {"is_tensor", m_is_tensor},
    {"dtype_of", m_dtype_of},
    {"dtype_is_float", m_dtype_is_float},
    {NULL, NULL},
};

static const luaL_Reg debug_funcs[] = {
    {"live_tensors", d_live_tensors},
    {"gc_debt", d_gc_debt},
    {"gc_owned", d_gc_owned},
    {"gc_threshold", d_gc_threshold},
    {NULL, NULL},
};

int luaopen_v100_amp(lua_State *L); /* bindings/l_amp.c */
int luaopen_v100_graph(lua_State *L); /* bindings/l_graph.c */
int luaopen_v100_rtc(lua_State *L); /* bindings/l_kernel.c */
int luaopen_v100_dist(lua_State *L); /* bindings/l_dist.c */
int luaopen_v100_ckpt(lua_State *L); /* bindings/l_ckpt.c */
int luaopen_v100_serial(lua_State *L); /* bindings/l_safetensors.c */
int luaopen_v100_onnx(lua_State *L); /* ext/onnx/l_onnx.c */
int luaopen_v100_telemetry(lua_State *L); /* ext/telemetry/l_telemetry.c */
int luaopen_v100_nvtx(lua_State *L); /* bindings/l_nvtx.c */

static void set_submodule(lua_State *L, lua_CFunction open, const char *name) {
  lua_pushcfunction(L, open);
  lua_call(L, 0, 1);
  lua_setfield(L, -2, name);
}

int luaopen_v100_core(lua_State *L) {
  lua_newtable(L); /* the methods table, shared by __index and exposed as Tensor */
  l_register_tensor_methods(L);
  luaL_setfuncs(L, l_scatter_methods, 0); /* bindings/l_scatter.c */
  l_register_ops(L);
  l_register_scan_methods(L); /* bindings/l_scan.c */
  l_register_autograd_methods(L);
  l_tensor_metatable(L);
  luaL_newlib(L, module_funcs);
  l_register_ops_module(L);
  l_register_einsum(L);
  l_register_sort(L);
  l_register_autograd_module(L);
  l_register_shape(L); /* bindings/l_shape.c: methods into the table at -2, v100.pad */
  l_register_create(L); /* bindings/l_create.c: into the module (top) and the methods table (-2) */
  luaL_setfuncs(L, l_safetensors_funcs, 0);
  lua_pushvalue(L, -2);
  lua_setfield(L, -2, "Tensor");
  lua_remove(L, -2);
  lua_pushliteral(L, VL_VERSION_STRING);
  lua_setfield(L, -2, "version");
  push_dtype_table(L);
  lua_setfield(L, -2, "dtypes");
  luaL_newlib(L, debug_funcs);
  lua_setfield(L, -2, "debug");
  set_submodule(L, luaopen_v100_cuda, "cuda");
  set_submodule(L, luaopen_v100_memory, "memory");
  set_submodule(L, luaopen_v100_io, "io");
  set_submodule(L, luaopen_v100_text, "text"); /* ext/text/l_text.c: the WordPiece tokenizer */
  set_submodule(L, luaopen_v100_nn_ops, "_nn");
  set_submodule(L, luaopen_v100_amp, "_amp"); /* bindings/l_amp.c */
  set_submodule(L, luaopen_v100_graph, "_graph"); /* bindings/l_graph.c */
  set_submodule(L, luaopen_v100_rtc, "_rtc"); /* bindings/l_kernel.c: v100.kernel's primitives */
  set_submodule(L, luaopen_v100_dist, "_dist"); /* bindings/l_dist.c: v100.dist's primitives */
  set_submodule(L, luaopen_v100_ckpt, "_ckpt"); /* bindings/l_ckpt.c: v100.checkpoint's primitives */
  set_submodule(L, luaopen_v100_serial, "_serial"); /* bindings/l_safetensors.c: v100.serial's primitives */
  set_submodule(L, luaopen_v100_data, "_data"); /* ext/data/l_data.c: v100.data's image pipeline */
  set_submodule(L, luaopen_v100_onnx, "_onnx"); /* ext/onnx/l_onnx.c: v100.onnx's model writer */
  set_submodule(L, luaopen_v100_telemetry, "_telemetry"); /* ext/telemetry/l_telemetry.c: samplers, HTTP */
  set_submodule(L, luaopen_v100_nvtx, "_nvtx"); /* bindings/l_nvtx.c: v100.nvtx's primitives */
  return 1;
}
