/* bindings/l_cuda.c: `v100.cuda`: devices, Stream and Event userdata, t:record_stream(s).
 * Without a CUDA device is_available() is false, device_count() 0, and everything else raises
 * "<fn>: no CUDA device". */
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/core/cuda.h"
#include "runtime/core/alloc.h"

#define STREAM_MT "v100.cuda.Stream"
#define EVENT_MT "v100.cuda.Event"
/* Registry table: device ordinal -> the Stream userdata made current by set_stream, so the
 * collector cannot destroy a stream that kernels are still being enqueued on. */
#define CURRENT_KEY "v100.cuda.current"

typedef struct l_stream {
  void *stream;
  int dev;
  bool owned; /* created by Stream(); current_stream() gives borrowed aliases */
} l_stream;

typedef struct l_event {
  void *event;
  int dev;
} l_event;

static l_stream *check_stream(lua_State *L, int idx) {
  return (l_stream *)luaL_checkudata(L, idx, STREAM_MT);
}
static l_event *check_event(lua_State *L, int idx) {
  l_event *e = (l_event *)luaL_checkudata(L, idx, EVENT_MT);
  if (!e->event) luaL_error(L, "event used after destruction");
  return e;
}

static int check(lua_State *L, vl_status s) {
  if (s != VL_OK) vl_lua_error(L, s);
  return 0;
}

/* opts.device: an ordinal or a device string; nil: the current device. */
static int opts_device(lua_State *L, int idx, const char *fname, const char *const known[]) {
  /* No options: pass a "none" slot (past the top) so the current device is used. */
  if (lua_isnoneornil(L, idx)) return l_optcudadev(L, lua_gettop(L) + 1, fname);
  luaL_checktype(L, idx, LUA_TTABLE);
  l_check_opts(L, idx, fname, known);
  lua_getfield(L, idx, "device");
  int d = l_optcudadev(L, lua_gettop(L), fname);
  lua_pop(L, 1);
  return d;
}

/* ---- module functions ---- */

static int c_is_available(lua_State *L) {
  lua_pushboolean(L, vl_cuda_device_count() > 0);
  return 1;
}
static int c_device_count(lua_State *L) {
  lua_pushinteger(L, vl_cuda_device_count());
  return 1;
}
static int c_synchronize(lua_State *L) {
  return check(L, vl_cuda_synchronize(l_optcudadev(L, 1, "cuda.synchronize")));
}

/* cuda.profiler(on [, device]): cudaProfilerStart / cudaProfilerStop. */
static int c_profiler(lua_State *L) {
  luaL_checktype(L, 1, LUA_TBOOLEAN);
  return check(L, vl_cuda_profiler(l_optcudadev(L, 2, "cuda.profiler"), lua_toboolean(L, 1)));
}

static int c_get_device_properties(lua_State *L) {
  int dev = l_optcudadev(L, 1, "cuda.get_device_properties");
  vl_device_info info;
  memset(&info, 0, sizeof info);
  check(L, vl_cuda_device_info(dev, &info));
  lua_createtable(L, 0, 6);
  lua_pushstring(L, info.name);
  lua_setfield(L, -2, "name");
  lua_pushinteger(L, (lua_Integer)info.total_memory);
  lua_setfield(L, -2, "total_memory");
  lua_pushinteger(L, info.major);
  lua_setfield(L, -2, "major");
  lua_pushinteger(L, info.minor);
  lua_setfield(L, -2, "minor");
  lua_pushinteger(L, info.sm_count);
  lua_setfield(L, -2, "multi_processor_count");
  lua_pushinteger(L, (lua_Integer)info.l2_bytes);
  lua_setfield(L, -2, "l2_cache_size");
  return 1;
}

static l_stream *push_stream(lua_State *L, int dev, void *stream, bool owned) {
  l_stream *s = (l_stream *)lua_newuserdatauv(L, sizeof *s, 0);
  s->stream = stream;
  s->dev = dev;
  s->owned = owned;
  luaL_setmetatable(L, STREAM_MT);
  return s;
}

static int c_Stream(lua_State *L) {
  static const char *const known[] = {"device", "priority", NULL};
  int dev = opts_device(L, 1, "cuda.Stream", known);
  int prio = 0;
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "priority");
    prio = (int)luaL_optinteger(L, -1, 0);
    lua_pop(L, 1);
  }
  l_stream *s = push_stream(L, dev, NULL, false);
  check(L, vl_stream_create(dev, prio, &s->stream));
  s->owned = true;
  return 1;
}

static int c_current_stream(lua_State *L) {
  int dev = l_optcudadev(L, 1, "cuda.current_stream");
  void *st = NULL;
  check(L, vl_cuda_current_stream(dev, &st));
  push_stream(L, dev, st, false);
  return 1;
}

/* set_stream(s) or set_stream(nil[, dev]) */
static int c_set_stream(lua_State *L) {
  int dev;
  void *st = NULL;
  if (lua_isnoneornil(L, 1)) {
    dev = l_optcudadev(L, 2, "cuda.set_stream");
  } else {
    l_stream *s = check_stream(L, 1);
    if (!s->stream) return luaL_error(L, "cuda.set_stream: stream used after destruction");
    dev = s->dev;
    st = s->stream;
  }
  check(L, vl_cuda_set_current_stream(dev, st));
  luaL_getsubtable(L, LUA_REGISTRYINDEX, CURRENT_KEY);
  if (st) lua_pushvalue(L, 1);
  else lua_pushnil(L);
  lua_rawseti(L, -2, dev);
  return 0;
}

/* ---- Stream methods ---- */

static l_stream *live_stream(lua_State *L, int idx) {
  l_stream *s = check_stream(L, idx);
  if (!s->stream && s->owned) luaL_error(L, "stream used after destruction");
  return s;
}

static int s_synchronize(lua_State *L) {
  l_stream *s = live_stream(L, 1);
  return check(L, vl_stream_synchronize(s->dev, s->stream));
}
static int s_query(lua_State *L) {
  l_stream *s = live_stream(L, 1);
  bool done = false;
  check(L, vl_stream_query(s->dev, s->stream, &done));
  lua_pushboolean(L, done);
  return 1;
}
static int s_wait_event(lua_State *L) {
  l_stream *s = live_stream(L, 1);
  l_event *e = check_event(L, 2);
  return check(L, vl_stream_wait_event(s->dev, s->stream, e->event));
}
static int s_gc(lua_State *L) {
  l_stream *s = check_stream(L, 1);
  if (s->owned && s->stream) {
    vl_stream_destroy(s->dev, s->stream);
    s->stream = NULL;
  }
  return 0;
}
static int s_eq(lua_State *L) {
  l_stream *a = (l_stream *)luaL_testudata(L, 1, STREAM_MT);
  l_stream *b = (l_stream *)luaL_testudata(L, 2, STREAM_MT);
  lua_pushboolean(L, a && b && a->dev == b->dev && a->stream == b->stream);
  return 1;
}
static int s_tostring(lua_State *L) {
  l_stream *s = check_stream(L, 1);
  lua_pushfstring(L, "v100.cuda.Stream(cuda:%d, %p)", s->dev, s->stream);
  return 1;
}

/* ---- Event ---- */

static int c_Event(lua_State *L) {
  static const char *const known[] = {"device", "timing", NULL};
  int dev = opts_device(L, 1, "cuda.Event", known);
  bool timing = false;
  if (lua_istable(L, 1)) {
    lua_getfield(L, 1, "timing");
    timing = lua_toboolean(L, -1);
    lua_pop(L, 1);
  }
  l_event *e = (l_event *)lua_newuserdatauv(L, sizeof *e, 0);
  e->event = NULL;
  e->dev = dev;
  luaL_setmetatable(L, EVENT_MT);
  check(L, vl_event_create(dev, timing, &e->event));
  return 1;
}

static int e_record(lua_State *L) {
  l_event *e = check_event(L, 1);
  void *st = NULL;
  if (lua_isnoneornil(L, 2)) check(L, vl_cuda_current_stream(e->dev, &st));
  else st = live_stream(L, 2)->stream;
  return check(L, vl_event_record(e->dev, e->event, st));
}
static int e_synchronize(lua_State *L) {
  l_event *e = check_event(L, 1);
  return check(L, vl_event_synchronize(e->dev, e->event));
}
static int e_query(lua_State *L) {
  l_event *e = check_event(L, 1);
  bool done = false;
  check(L, vl_event_query(e->dev, e->event, &done));
  lua_pushboolean(L, done);
  return 1;
}
static int e_elapsed_time(lua_State *L) {
  l_event *a = check_event(L, 1), *b = check_event(L, 2);
  float ms = 0;
  check(L, vl_event_elapsed_ms(a->event, b->event, &ms));
  lua_pushnumber(L, ms);
  return 1;
}
static int e_gc(lua_State *L) {
  l_event *e = (l_event *)luaL_checkudata(L, 1, EVENT_MT);
  if (e->event) {
    vl_event_destroy(e->dev, e->event);
    e->event = NULL;
  }
  return 0;
}

/* ---- t:record_stream(s) ---- */

int l_record_stream(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  l_stream *s = live_stream(L, 2);
  if (t->storage->device.type != VL_CUDA) {
    char buf[128];
    return luaL_error(L, "record_stream: the tensor (%s) is not on a CUDA device", vl_tensor_desc(t, buf, sizeof buf));
  }
  if (!t->storage->block) return 0; /* zero bytes: nothing to protect */
  vl_alloc *pool = NULL;
  check(L, vl_cuda_alloc(t->storage->device.index, &pool));
  return check(L, vl_alloc_record_stream(pool, t->storage->block, s->stream));
}

static const luaL_Reg stream_methods[] = {
    {"synchronize", s_synchronize},
    {"query", s_query},
    {"wait_event", s_wait_event},
    {NULL, NULL},
};
static const luaL_Reg event_methods[] = {
    {"record", e_record},
    {"synchronize", e_synchronize},
    {"query", e_query},
    {"elapsed_time", e_elapsed_time},
    {NULL, NULL},
};
static const luaL_Reg cuda_funcs[] = {
    {"is_available", c_is_available},
    {"device_count", c_device_count},
    {"synchronize", c_synchronize},
    {"profiler", c_profiler},
    {"get_device_properties", c_get_device_properties},
    {"Stream", c_Stream},
    {"current_stream", c_current_stream},
    {"set_stream", c_set_stream},
    {"Event", c_Event},
    {NULL, NULL},
};

int luaopen_v100_cuda(lua_State *L) {
  luaL_newmetatable(L, STREAM_MT);
  luaL_newlib(L, stream_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, s_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, s_eq);
  lua_setfield(L, -2, "__eq");
  lua_pushcfunction(L, s_tostring);
  lua_setfield(L, -2, "__tostring");
  lua_pop(L, 1);
  luaL_newmetatable(L, EVENT_MT);
  luaL_newlib(L, event_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, e_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newlib(L, cuda_funcs);
  return 1;
}
