/* bindings/l_kernel.c: `v100.core._rtc`, the primitives of `v100.kernel` (scripts/v100/kernel.lua):
 *   signature(what, sig)                      -> {{pointer=, const=, dtype=, text=}, ...}
 *   load(what, source, program, options, dev, cache)  -> Module (cache: nil default dir, false off,
 *                                                 or a directory)
 *   Module:kernel(name[, signature]) -> Kernel;  Module:info() -> {cached=, arch=, ptx=, key=, path=, note=}
 *   Module:close() (also __close and __gc: one idempotent function, like liolib's files)
 *   launch(kernel, grid{3}, block{3}, shared, args, contiguous)
 *   check_args(what, signature|nil, args, contiguous)   the argument checks of launch, for CPU tests
 * The Lua side checks the configuration (grid, block, shared) before these are called; arguments
 * are checked here against the signature before anything touches the device. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/core/cuda.h"
#include "runtime/rtc/rtc.h"

#define MODULE_MT "v100.kernel.Module"
#define KERNEL_MT "v100.kernel.Kernel"
#define MAX_OPTS 64

typedef struct l_module {
  vl_rtc_module *m; /* NULL: closed (before the load succeeded, and after close) */
} l_module;

typedef struct l_kernel {
  void *kernel;                    /* cudaKernel_t, valid while its module (uservalue 1) is open */
  char name[128];
  bool has_sig;
  int nparams;
  vl_rtc_param params[VL_RTC_MAX_PARAMS];
  int nk;                          /* parameters of the compiled kernel; -1: unknown */
  size_t ksizes[VL_RTC_MAX_PARAMS];
} l_kernel;

static int raise(lua_State *L, vl_status s) { return vl_lua_error(L, s); }

/* Raises without a "file:line:" prefix, like the runtime's errors: the message names the kernel
 * and the argument, and the caller is library code (scripts/v100/kernel.lua). */
static int kerr(lua_State *L, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  lua_pushvfstring(L, fmt, ap);
  va_end(ap);
  return lua_error(L);
}

/* ---- signatures ---- */

static int parse_sig(lua_State *L, const char *what, const char *sig, vl_rtc_param *params) {
  int n = 0;
  vl_status s = vl_rtc_parse_signature(what, sig, params, VL_RTC_MAX_PARAMS, &n);
  if (s != VL_OK) raise(L, s);
  return n;
}

static int k_signature(lua_State *L) {
  const char *what = luaL_checkstring(L, 1);
  const char *sig = luaL_checkstring(L, 2);
  vl_rtc_param p[VL_RTC_MAX_PARAMS];
  int n = parse_sig(L, what, sig, p);
  lua_createtable(L, n, 0);
  for (int i = 0; i < n; i++) {
    lua_createtable(L, 0, 4);
    lua_pushboolean(L, p[i].pointer);
    lua_setfield(L, -2, "pointer");
    lua_pushboolean(L, p[i].is_const);
    lua_setfield(L, -2, "const");
    lua_pushstring(L, vl_rtc_param_dtype(&p[i]));
    lua_setfield(L, -2, "dtype");
    lua_pushstring(L, p[i].text);
    lua_setfield(L, -2, "text");
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* ---- argument packing ---- */

typedef union arg_slot {
  void *p;
  float f32;
  double f64;
  int32_t i32;
  int64_t i64;
} arg_slot;

/* A Lua integer, or a float with an integral value, within [lo, hi]. */
static int64_t check_int_arg(lua_State *L, int idx, const char *what, int i, const char *text, int64_t lo,
                             int64_t hi) {
  lua_Integer v = 0;
  if (lua_isinteger(L, idx)) v = lua_tointeger(L, idx);
  else if (lua_type(L, idx) != LUA_TNUMBER || !lua_numbertointeger(lua_tonumber(L, idx), &v) ||
           (lua_Number)v != lua_tonumber(L, idx))
    kerr(L, "%s: argument %d (%s) must be an integer, got %s", what, i, text,
               lua_type(L, idx) == LUA_TNUMBER ? lua_tostring(L, idx) : luaL_typename(L, idx));
  if (v < lo || v > hi)
    kerr(L, "%s: argument %d (%s) = %I is out of its type's range", what, i, text, (lua_Integer)v);
  return (int64_t)v;
}

static void pack_scalar(lua_State *L, int idx, const char *what, int i, const vl_rtc_param *p, arg_slot *slot) {
  if (lua_type(L, idx) != LUA_TNUMBER)
    kerr(L, "%s: argument %d (%s) must be a number, got %s", what, i, p->text, luaL_typename(L, idx));
  bool unsig = p->is_unsigned;
  switch (p->dtype) {
    case VL_F32: slot->f32 = (float)lua_tonumber(L, idx); break;
    case VL_F64: slot->f64 = (double)lua_tonumber(L, idx); break;
    case VL_I32:
      slot->i32 = (int32_t)(uint32_t)check_int_arg(L, idx, what, i, p->text, unsig ? 0 : INT32_MIN,
                                                   unsig ? (int64_t)UINT32_MAX : INT32_MAX);
      break;
    case VL_I64: slot->i64 = check_int_arg(L, idx, what, i, p->text, unsig ? 0 : INT64_MIN, INT64_MAX); break;
    default: kerr(L, "%s: argument %d (%s): unsupported scalar type", what, i, p->text);
  }
}

static void pack_tensor(lua_State *L, int idx, const char *what, int i, const vl_rtc_param *p, int dev,
                        bool contiguous, arg_slot *slot) {
  vl_lua_tensor *ud = (vl_lua_tensor *)luaL_testudata(L, idx, VL_LUA_TENSOR_MT);
  if (!ud) kerr(L, "%s: argument %d (%s) must be a tensor, got %s", what, i, p->text, luaL_typename(L, idx));
  if (!ud->t) kerr(L, "%s: argument %d (%s): tensor used after free", what, i, p->text);
  vl_tensor *t = ud->t;
  char desc[128];
  vl_tensor_desc(t, desc, sizeof desc);
  if (t->storage->device.type != VL_CUDA)
    kerr(L, "%s: argument %d (%s) is a tensor on the CPU (%s); kernels take CUDA tensors", what, i,
               p->text, desc);
  if (dev >= 0 && t->storage->device.index != dev)
    kerr(L, "%s: argument %d (%s) is on cuda:%d but the kernel was built for cuda:%d (%s)", what, i,
               p->text, t->storage->device.index, dev, desc);
  if (!p->any_dtype && t->dtype != p->dtype)
    kerr(L, "%s: argument %d (%s) must have dtype %s, got %s", what, i, p->text, vl_dtype_name(p->dtype),
               desc);
  if (contiguous && !vl_tensor_is_contiguous(t))
    kerr(L, "%s: argument %d (%s) is not contiguous (%s): pass t:contiguous()", what, i, p->text, desc);
  slot->p = vl_tensor_data(t);
}

/* Without a signature: tensors pass their pointer (any dtype), scalars come typed: {'i64', n}. */
static void untyped_param(lua_State *L, int idx, const char *what, int i, vl_rtc_param *p) {
  memset(p, 0, sizeof *p);
  if (luaL_testudata(L, idx, VL_LUA_TENSOR_MT)) {
    p->pointer = true;
    p->any_dtype = true;
    p->size = sizeof(void *);
    snprintf(p->text, sizeof p->text, "void*");
    return;
  }
  if (lua_type(L, idx) != LUA_TTABLE || lua_rawlen(L, idx) != 2)
    kerr(L, "%s: argument %d is a %s: without a signature, scalars need their type, e.g. {'i64', n} or "
               "{'f32', x} (or give the kernel a signature)", what, i, luaL_typename(L, idx));
  lua_rawgeti(L, idx, 1);
  const char *ty = lua_tostring(L, -1);
  if (!ty) kerr(L, "%s: argument %d: a typed scalar is {type, value} with a type name first", what, i);
  vl_rtc_param q[1];
  char lbl[48];
  snprintf(lbl, sizeof lbl, "%s: argument %d", what, i);
  int n = 0;
  vl_status s = vl_rtc_parse_signature(lbl, ty, q, 1, &n);
  if (s != VL_OK) raise(L, s);
  if (n != 1 || q[0].pointer)
    kerr(L, "%s: argument %d: '%s' is not a scalar type (tensors are passed as they are)", what, i, ty);
  lua_pop(L, 1);
  *p = q[0];
}

/* Checks and packs args (the table at `tidx`) into slots/argv; returns the count. */
static int pack_args(lua_State *L, const char *what, bool has_sig, const vl_rtc_param *params, int nparams,
                     int tidx, int dev, bool contiguous, arg_slot *slots, void **argv, bool *writes,
                     vl_rtc_param *used) {
  luaL_checktype(L, tidx, LUA_TTABLE);
  lua_getfield(L, tidx, "n");
  int n = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : (int)lua_rawlen(L, tidx);
  lua_pop(L, 1);
  if (has_sig && n != nparams)
    kerr(L, "%s: %d argument%s given, the signature has %d", what, n, n == 1 ? "" : "s", nparams);
  if (n > VL_RTC_MAX_PARAMS) kerr(L, "%s: %d arguments (at most %d)", what, n, VL_RTC_MAX_PARAMS);
  for (int i = 0; i < n; i++) {
    lua_rawgeti(L, tidx, i + 1);
    int idx = lua_gettop(L);
    vl_rtc_param up;
    const vl_rtc_param *p = params + i;
    if (!has_sig) {
      untyped_param(L, idx, what, i + 1, &up);
      p = &up;
      if (!p->pointer) lua_rawgeti(L, idx, 2); /* the value of {type, value} */
    }
    if (p->pointer) {
      pack_tensor(L, lua_gettop(L), what, i + 1, p, dev, contiguous, &slots[i]);
    } else {
      pack_scalar(L, lua_gettop(L), what, i + 1, p, &slots[i]);
      if (!has_sig) lua_pop(L, 1);
    }
    writes[i] = p->pointer && !p->is_const;
    if (used) used[i] = *p;
    argv[i] = &slots[i];
    lua_pop(L, 1);
  }
  return n;
}

static int k_check_args(lua_State *L) {
  const char *what = luaL_checkstring(L, 1);
  vl_rtc_param params[VL_RTC_MAX_PARAMS];
  bool has_sig = !lua_isnil(L, 2);
  int np = has_sig ? parse_sig(L, what, luaL_checkstring(L, 2), params) : 0;
  arg_slot slots[VL_RTC_MAX_PARAMS];
  void *argv[VL_RTC_MAX_PARAMS];
  bool writes[VL_RTC_MAX_PARAMS];
  int n = pack_args(L, what, has_sig, params, np, 3, -1, lua_toboolean(L, 4), slots, argv, writes, NULL);
  lua_pushinteger(L, n);
  return 1;
}

/* ---- modules and kernels ---- */

static l_module *check_module(lua_State *L, int idx) { return (l_module *)luaL_checkudata(L, idx, MODULE_MT); }

static vl_rtc_module *open_module(lua_State *L, int idx) {
  l_module *m = check_module(L, idx);
  if (!m->m) kerr(L, "v100.kernel: kernel used after close");
  return m->m;
}

static int k_load(lua_State *L) {
  const char *what = luaL_checkstring(L, 1);
  vl_rtc_source src = {.source = luaL_checkstring(L, 2), .program = luaL_checkstring(L, 3)};
  const char *opts[MAX_OPTS];
  if (!lua_isnoneornil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    int n = (int)lua_rawlen(L, 4);
    if (n > MAX_OPTS) return kerr(L, "%s: %d options (at most %d)", what, n, MAX_OPTS);
    for (int i = 0; i < n; i++) {
      lua_rawgeti(L, 4, i + 1);
      opts[i] = lua_tostring(L, -1); /* the table keeps the strings alive */
      if (lua_type(L, -1) != LUA_TSTRING) return kerr(L, "%s: options[%d] must be a string", what, i + 1);
      lua_pop(L, 1);
    }
    src.nopts = n;
    src.opts = opts;
  }
  int dev = l_optcudadev(L, 5, what);
  const char *cache = NULL;
  if (lua_type(L, 6) == LUA_TSTRING) cache = lua_tostring(L, 6);
  else if (lua_isboolean(L, 6) && !lua_toboolean(L, 6)) cache = "";
  l_module *m = (l_module *)lua_newuserdatauv(L, sizeof *m, 0);
  m->m = NULL;
  luaL_setmetatable(L, MODULE_MT);
  vl_status s = vl_rtc_module_load(&src, dev, cache, &m->m);
  if (s != VL_OK) {
    vl_fail_prefix(s, "%s: ", what);
    return raise(L, s);
  }
  return 1;
}

static int m_close(lua_State *L) {
  l_module *m = check_module(L, 1);
  if (m->m) {
    vl_rtc_module_free(m->m);
    m->m = NULL;
  }
  return 0;
}

static int m_info(lua_State *L) {
  vl_rtc_module *m = open_module(L, 1);
  lua_createtable(L, 0, 7);
  lua_pushboolean(L, m->cached);
  lua_setfield(L, -2, "cached");
  lua_pushstring(L, m->arch);
  lua_setfield(L, -2, "arch");
  lua_pushboolean(L, m->ptx);
  lua_setfield(L, -2, "ptx");
  char key[24];
  snprintf(key, sizeof key, "%016llx", (unsigned long long)m->key);
  lua_pushstring(L, key);
  lua_setfield(L, -2, "key");
  lua_pushstring(L, m->path);
  lua_setfield(L, -2, "path");
  lua_pushstring(L, m->note);
  lua_setfield(L, -2, "note");
  lua_pushinteger(L, m->dev);
  lua_setfield(L, -2, "device");
  return 1;
}

static int m_kernel(lua_State *L) {
  vl_rtc_module *m = open_module(L, 1);
  const char *name = luaL_checkstring(L, 2);
  l_kernel *k = (l_kernel *)lua_newuserdatauv(L, sizeof *k, 1);
  memset(k, 0, sizeof *k);
  luaL_setmetatable(L, KERNEL_MT);
  if (strlen(name) >= sizeof k->name) return kerr(L, "v100.kernel: kernel name '%s' is too long", name);
  snprintf(k->name, sizeof k->name, "%s", name);
  char what[160];
  snprintf(what, sizeof what, "v100.kernel '%s'", name);
  if (!lua_isnoneornil(L, 3)) {
    k->nparams = parse_sig(L, what, luaL_checkstring(L, 3), k->params);
    k->has_sig = true;
  }
  void *kern = NULL;
  vl_status s = vl_rtc_module_kernel(m, name, &kern);
  if (s == VL_OK) s = vl_rtc_kernel_params(m, kern, k->ksizes, VL_RTC_MAX_PARAMS, &k->nk);
  if (s == VL_OK && k->has_sig) s = vl_rtc_check_params(what, k->params, k->nparams, k->ksizes, k->nk, false);
  if (s != VL_OK) return raise(L, s);
  k->kernel = kern;
  lua_pushvalue(L, 1);
  lua_setiuservalue(L, -2, 1); /* the module outlives its kernels' userdata */
  return 1;
}

static void check_dims(lua_State *L, int idx, const char *what, const char *field, unsigned out[3]) {
  luaL_checktype(L, idx, LUA_TTABLE);
  for (int d = 0; d < 3; d++) {
    lua_rawgeti(L, idx, d + 1);
    lua_Integer v = lua_isinteger(L, -1) ? lua_tointeger(L, -1) : 1;
    if (!lua_isinteger(L, -1) && !lua_isnil(L, -1))
      kerr(L, "%s: %s[%d] must be an integer", what, field, d + 1);
    if (v < 1 || v > (lua_Integer)UINT32_MAX) kerr(L, "%s: %s[%d] = %I is out of range", what, field, d + 1, v);
    out[d] = (unsigned)v;
    lua_pop(L, 1);
  }
}

static int k_launch(lua_State *L) {
  l_kernel *k = (l_kernel *)luaL_checkudata(L, 1, KERNEL_MT);
  lua_getiuservalue(L, 1, 1);
  vl_rtc_module *m = open_module(L, lua_gettop(L));
  lua_pop(L, 1);
  char what[160];
  snprintf(what, sizeof what, "v100.kernel '%s'", k->name);
  unsigned grid[3], block[3];
  check_dims(L, 2, what, "grid", grid);
  check_dims(L, 3, what, "block", block);
  lua_Integer shared = luaL_checkinteger(L, 4);
  if (shared < 0) return kerr(L, "%s: shared must be >= 0 bytes, got %I", what, shared);
  arg_slot slots[VL_RTC_MAX_PARAMS];
  void *argv[VL_RTC_MAX_PARAMS];
  bool writes[VL_RTC_MAX_PARAMS];
  vl_rtc_param used[VL_RTC_MAX_PARAMS];
  int n = pack_args(L, what, k->has_sig, k->params, k->nparams, 5, m->dev, lua_toboolean(L, 6), slots, argv,
                    writes, used);
  /* With a signature that was checked when the kernel was made; without one, check these. */
  vl_status s = k->has_sig ? VL_OK : vl_rtc_check_params(what, used, n, k->ksizes, k->nk, true);
  if (s == VL_OK) s = vl_rtc_launch(m, k->kernel, k->name, grid, block, (size_t)shared, argv);
  if (s != VL_OK) return raise(L, s);
  /* What the kernel may write counts as an in-place write, so that autograd notices a saved
   * tensor that a kernel changed. */
  for (int i = 0; i < n; i++) {
    if (!writes[i]) continue;
    lua_rawgeti(L, 5, i + 1);
    vl_tensor *t = vl_lua_testtensor(L, -1);
    if (t) t->storage->version++;
    lua_pop(L, 1);
  }
  return 0;
}

static int kk_tostring(lua_State *L) {
  l_kernel *k = (l_kernel *)luaL_checkudata(L, 1, KERNEL_MT);
  lua_pushfstring(L, "v100.kernel.Kernel(%s)", k->name);
  return 1;
}

static const luaL_Reg module_methods[] = {
    {"kernel", m_kernel},
    {"info", m_info},
    {"close", m_close},
    {NULL, NULL},
};

static const luaL_Reg rtc_funcs[] = {
    {"signature", k_signature},
    {"load", k_load},
    {"launch", k_launch},
    {"check_args", k_check_args},
    {NULL, NULL},
};

int luaopen_v100_rtc(lua_State *L) {
  luaL_newmetatable(L, MODULE_MT);
  luaL_newlib(L, module_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, m_close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, m_close);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
  luaL_newmetatable(L, KERNEL_MT);
  lua_pushcfunction(L, kk_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  luaL_newlib(L, rtc_funcs);
  lua_pushboolean(L, vl_have_cuda());
  lua_setfield(L, -2, "have_nvrtc");
  return 1;
}
