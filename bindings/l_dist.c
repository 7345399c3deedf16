/* bindings/l_dist.c: v100.core._dist, the C side of v100.dist (scripts/v100/dist.lua) over
 * runtime/dist/comm.h. Ranks are 0-based, as in MPI.
 *   _dist.init() -> info          also wraps os.exit (below)
 *   _dist.info() -> {initialized, rank, size, local_rank, local_size, backend, cuda_backend, device
 *                    ('cuda:N', absent without a GPU), launcher, host, thread_level}
 *   _dist.finalize(), _dist.abort(code)
 *   _dist.all_reduce(t, op, async)          -> handle when async, else nothing
 *   _dist.broadcast(t, root, async), _dist.reduce(t, root, op, async)
 *   _dist.all_gather(out, in, async), _dist.reduce_scatter(out, in, op, async)
 *   _dist.send(t, peer, tag, async), _dist.recv(t, peer, tag, async), _dist.barrier(async)
 *   _dist.group_start(), _dist.group_end()
 *   h:wait(), h:is_completed() -> bool, h:close() (also __gc and __close: completes, then frees)
 *   _dist.permutation(n, seed) -> i64 CPU tensor; _dist.sampler_indices(order or nil, n, rank, size,
 *     num_samples) -> i64 CPU tensor (runtime/dist/sampler.h: the loaders' epoch orders)
 * A Work userdata is born closed (NULL) and filled once the op started, as liolib's files are.
 *
 * The NCCL watchdog is a host thread started by the first init on a machine with a GPU: every
 * second it asks runtime/dist whether a CUDA collective has been in flight longer than
 * V100LUA_NCCL_TIMEOUT seconds (else V100LUA_DIST_TIMEOUT's, the CPU collectives' limit too; default
 * 600; 0 turns the watchdog off) or NCCL failed
 * asynchronously; then it prints the rank, host and operation, and ends the whole job at once
 * (MPI_Abort; ending a process ends its kernels, so no rank stays in a kernel). */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bindings/l_priv.h"
#include "runtime/core/cuda.h"
#include "runtime/dist/comm.h"
#include "runtime/dist/sampler.h"

#define WORK_MT "v100.dist.Work"

typedef struct l_work {
  vl_dist_work *w;
} l_work;

static int check(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static vl_dist_op check_op(lua_State *L, int arg, const char *op) {
  vl_dist_op o;
  check(L, vl_dist_op_parse(op, luaL_optstring(L, arg, "sum"), &o));
  return o;
}

static int check_int(lua_State *L, int arg) { return (int)luaL_checkinteger(L, arg); }

/* Pushes a closed handle when async (its slot returned), else nothing (NULL: run to completion). */
static vl_dist_work **work_slot(lua_State *L, int arg) {
  if (!lua_toboolean(L, arg)) return NULL;
  l_work *h = (l_work *)lua_newuserdatauv(L, sizeof *h, 0);
  h->w = NULL;
  luaL_setmetatable(L, WORK_MT);
  return &h->w;
}

static int done(lua_State *L, vl_status s, vl_dist_work **slot) {
  check(L, s);
  return slot ? 1 : 0;
}

static int d_all_reduce(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_dist_op op = check_op(L, 2, "all_reduce");
  vl_dist_work **slot = work_slot(L, 3);
  return done(L, vl_dist_all_reduce(NULL, t, op, slot), slot);
}

static int d_broadcast(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int root = check_int(L, 2);
  vl_dist_work **slot = work_slot(L, 3);
  return done(L, vl_dist_broadcast(NULL, t, root, slot), slot);
}

static int d_reduce(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int root = check_int(L, 2);
  vl_dist_op op = check_op(L, 3, "reduce");
  vl_dist_work **slot = work_slot(L, 4);
  return done(L, vl_dist_reduce(NULL, t, root, op, slot), slot);
}

static int d_all_gather(lua_State *L) {
  vl_tensor *out = vl_lua_checktensor(L, 1), *in = vl_lua_checktensor(L, 2);
  vl_dist_work **slot = work_slot(L, 3);
  return done(L, vl_dist_all_gather(NULL, out, in, slot), slot);
}

static int d_reduce_scatter(lua_State *L) {
  vl_tensor *out = vl_lua_checktensor(L, 1), *in = vl_lua_checktensor(L, 2);
  vl_dist_op op = check_op(L, 3, "reduce_scatter");
  vl_dist_work **slot = work_slot(L, 4);
  return done(L, vl_dist_reduce_scatter(NULL, out, in, op, slot), slot);
}

static int d_send(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int peer = check_int(L, 2), tag = (int)luaL_optinteger(L, 3, 0);
  vl_dist_work **slot = work_slot(L, 4);
  return done(L, vl_dist_send(NULL, t, peer, tag, slot), slot);
}

static int d_recv(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  int peer = check_int(L, 2), tag = (int)luaL_optinteger(L, 3, 0);
  vl_dist_work **slot = work_slot(L, 4);
  return done(L, vl_dist_recv(NULL, t, peer, tag, slot), slot);
}

static int d_barrier(lua_State *L) {
  vl_dist_work **slot = work_slot(L, 1);
  return done(L, vl_dist_barrier(NULL, slot), slot);
}

static int d_group_start(lua_State *L) { return check(L, vl_dist_group_start(NULL)); }
static int d_group_end(lua_State *L) { return check(L, vl_dist_group_end(NULL)); }

static void push_info(lua_State *L) {
  vl_dist_info i;
  vl_dist_get_info(&i);
  lua_createtable(L, 0, 9);
  lua_pushboolean(L, i.initialized);
  lua_setfield(L, -2, "initialized");
  lua_pushinteger(L, i.rank);
  lua_setfield(L, -2, "rank");
  lua_pushinteger(L, i.size);
  lua_setfield(L, -2, "size");
  lua_pushinteger(L, i.local_rank);
  lua_setfield(L, -2, "local_rank");
  lua_pushinteger(L, i.local_size);
  lua_setfield(L, -2, "local_size");
  lua_pushstring(L, i.backend);
  lua_setfield(L, -2, "backend");
  lua_pushstring(L, i.cuda_backend);
  lua_setfield(L, -2, "cuda_backend");
  if (i.device >= 0) {
    lua_pushfstring(L, "cuda:%d", i.device);
    lua_setfield(L, -2, "device");
  }
  lua_pushstring(L, i.launcher);
  lua_setfield(L, -2, "launcher");
  lua_pushstring(L, i.host);
  lua_setfield(L, -2, "host");
  lua_pushinteger(L, i.thread_level);
  lua_setfield(L, -2, "thread_level");
}

static int d_info(lua_State *L) {
  push_info(L);
  return 1;
}

/* os.exit after init: MPI must hear of the exit. A success finalizes (every rank reaching its
 * end), a failure at world size > 1 aborts the job (the other ranks may be waiting in a
 * collective for this one); then Lua's own os.exit runs (upvalue 1). */
static int d_exit(lua_State *L) {
  int code = lua_isboolean(L, 1) ? (lua_toboolean(L, 1) ? EXIT_SUCCESS : EXIT_FAILURE)
                                 : (int)luaL_optinteger(L, 1, EXIT_SUCCESS);
  if (vl_dist_initialized()) {
    vl_dist_info i;
    vl_dist_get_info(&i);
    if (code != EXIT_SUCCESS && i.size > 1) vl_dist_abort(code);
    /* os.exit(0) while another rank waits in a collective this one skipped: the finalize says so;
     * raised, it is reported with the rank prefix and ends the job (bindings/main.c). */
    vl_status s = vl_dist_finalize();
    if (s != VL_OK) return vl_lua_error(L, s);
  }
  lua_pushvalue(L, lua_upvalueindex(1));
  lua_insert(L, 1);
  lua_call(L, lua_gettop(L) - 1, 0);
  return 0;
}

static double g_watch_timeout = 600;

static void *watchdog(void *arg) {
  (void)arg;
  for (;;) {
    struct timespec ts = {1, 0};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    char msg[512];
    if (!vl_dist_watch(g_watch_timeout, msg, sizeof msg)) continue;
    vl_dist_info i;
    vl_dist_get_info(&i);
    fprintf(stderr, "[rank %d %s] v100lua: NCCL watchdog: %s; ending the job\n", i.rank, i.host, msg);
    fflush(stderr);
    vl_dist_kill(EXIT_FAILURE); /* MPI_Abort: every rank; no teardown that could wait on the GPU */
  }
  return NULL;
}

/* V100LUA_NCCL_TIMEOUT, else V100LUA_DIST_TIMEOUT (the one limit of CPU and CUDA collectives):
 * seconds (> 0), or 0 for no watchdog; anything else is an error. */
static void start_watchdog(lua_State *L) {
  static bool started = false;
  if (started || vl_cuda_device_count() == 0) return;
  const char *var = "V100LUA_NCCL_TIMEOUT", *v = getenv(var);
  if (!v || !*v) var = "V100LUA_DIST_TIMEOUT", v = getenv(var);
  if (v && *v) {
    char *end;
    errno = 0;
    double t = strtod(v, &end);
    if (errno || *end || !(t >= 0))
      luaL_error(L, "dist.init: %s='%s' is not a number of seconds (0 turns the watchdog off)", var, v);
    g_watch_timeout = t;
  }
  started = true;
  if (g_watch_timeout == 0) return;
  pthread_t th;
  if (pthread_create(&th, NULL, watchdog, NULL) != 0) luaL_error(L, "dist.init: cannot start the NCCL watchdog thread");
  pthread_detach(th);
}

static int d_init(lua_State *L) {
  bool was = vl_dist_initialized();
  check(L, vl_dist_init());
  start_watchdog(L);
  if (!was && lua_getglobal(L, "os") == LUA_TTABLE) {
    lua_getfield(L, -1, "exit");
    if (lua_iscfunction(L, -1) && lua_tocfunction(L, -1) != d_exit) {
      lua_pushcclosure(L, d_exit, 1);
      lua_setfield(L, -2, "exit");
    } else {
      lua_pop(L, 1);
    }
  }
  lua_settop(L, 0);
  push_info(L);
  return 1;
}

static int d_finalize(lua_State *L) { return check(L, vl_dist_finalize()); }

static int d_abort(lua_State *L) {
  int code = (int)luaL_optinteger(L, 1, EXIT_FAILURE);
  vl_dist_abort(code);
  lua_pushboolean(L, 0); /* without MPI nothing was aborted: the caller exits on its own */
  return 1;
}

/* ---- handles ---- */

static l_work *check_work(lua_State *L, int idx) { return (l_work *)luaL_checkudata(L, idx, WORK_MT); }

static int w_wait(lua_State *L) {
  l_work *h = check_work(L, 1);
  if (!h->w) return luaL_error(L, "dist: handle used after close()");
  return check(L, vl_dist_wait(h->w));
}

static int w_is_completed(lua_State *L) {
  l_work *h = check_work(L, 1);
  if (!h->w) return luaL_error(L, "dist: handle used after close()");
  bool d = false;
  check(L, vl_dist_test(h->w, &d));
  lua_pushboolean(L, d);
  return 1;
}

/* __gc, __close and close(): idempotent; an op still in flight is completed first. */
static int w_close(lua_State *L) {
  l_work *h = check_work(L, 1);
  if (h->w) {
    vl_dist_work *w = h->w;
    h->w = NULL;
    vl_dist_work_free(w);
  }
  return 0;
}

static int w_tostring(lua_State *L) {
  l_work *h = check_work(L, 1);
  lua_pushfstring(L, "v100.dist.Work(%s)", h->w ? vl_dist_work_op(h->w) : "closed");
  return 1;
}

static const luaL_Reg work_methods[] = {
    {"wait", w_wait}, {"is_completed", w_is_completed}, {"close", w_close}, {NULL, NULL},
};

static int d_permutation(lua_State *L) {
  lua_Integer n = luaL_checkinteger(L, 1), seed = luaL_checkinteger(L, 2);
  vl_tensor *t = NULL;
  vl_status s = vl_permutation(n, seed, &t);
  if (s != VL_OK) return vl_lua_error(L, s);
  vl_lua_pushtensor(L, t);
  return 1;
}

static int d_sampler_indices(lua_State *L) {
  vl_tensor *order = lua_isnil(L, 1) ? NULL : vl_lua_checktensor(L, 1);
  lua_Integer n = luaL_checkinteger(L, 2), rank = luaL_checkinteger(L, 3), size = luaL_checkinteger(L, 4);
  lua_Integer num = luaL_checkinteger(L, 5);
  vl_tensor *t = NULL;
  vl_status s = vl_sampler_indices(order, n, rank, size, num, &t);
  if (s != VL_OK) return vl_lua_error(L, s);
  vl_lua_pushtensor(L, t);
  return 1;
}

static const luaL_Reg dist_funcs[] = {
    {"init", d_init},
    {"info", d_info},
    {"finalize", d_finalize},
    {"abort", d_abort},
    {"all_reduce", d_all_reduce},
    {"broadcast", d_broadcast},
    {"reduce", d_reduce},
    {"all_gather", d_all_gather},
    {"reduce_scatter", d_reduce_scatter},
    {"send", d_send},
    {"recv", d_recv},
    {"barrier", d_barrier},
    {"group_start", d_group_start},
    {"group_end", d_group_end},
    {"permutation", d_permutation},
    {"sampler_indices", d_sampler_indices},
    {NULL, NULL},
};

int luaopen_v100_dist(lua_State *L) {
  vl_lua_class(L, WORK_MT, work_methods, NULL, w_close, w_close, w_tostring);
  luaL_newlib(L, dist_funcs);
  return 1;
}
