/* bindings/l_graph.c: v100.core._graph, the C side of v100.graph (scripts/v100/graph.lua) over
 * runtime/core/graph.h:
 *   _graph.new(device) -> g                 a graph (side stream, private pool), not captured
 *   g:enter(), g:leave()                    run on / leave its side stream (warm-up)
 *   g:capture_begin()
 *   g:capture_end(ok) -> true | false, msg  ok = whether the step succeeded; returns the verdict
 *                                           instead of raising, so the caller keeps the step's
 *                                           own error when it failed
 *   g:replay(), g:close() (also __gc and __close), g:info() -> {device, captured, nodes, rng_groups}
 *   _graph.capturing() -> bool
 * A Graph userdata is born closed (NULL) and filled once created, as liolib's files are. */
#include "bindings/l_priv.h"
#include "runtime/core/graph.h"

#define GRAPH_MT "v100.Graph"

typedef struct l_graph {
  vl_graph *g;
} l_graph;

static l_graph *check_graph(lua_State *L, int idx) {
  l_graph *lg = (l_graph *)luaL_checkudata(L, idx, GRAPH_MT);
  if (!lg->g) luaL_error(L, "graph: used after close()");
  return lg;
}

static int g_new(lua_State *L) {
  int dev = (int)luaL_checkinteger(L, 1);
  l_graph *lg = (l_graph *)lua_newuserdatauv(L, sizeof *lg, 0);
  lg->g = NULL;
  luaL_setmetatable(L, GRAPH_MT);
  vl_status s = vl_graph_create(dev, &lg->g);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

static int g_call(lua_State *L, vl_status s) {
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int g_enter(lua_State *L) { return g_call(L, vl_graph_enter(check_graph(L, 1)->g)); }
static int g_leave(lua_State *L) { return g_call(L, vl_graph_leave(check_graph(L, 1)->g)); }
static int g_capture_begin(lua_State *L) { return g_call(L, vl_graph_capture_begin(check_graph(L, 1)->g)); }
static int g_replay(lua_State *L) { return g_call(L, vl_graph_replay(check_graph(L, 1)->g)); }

static int g_capture_end(lua_State *L) {
  l_graph *lg = check_graph(L, 1);
  vl_status s = vl_graph_capture_end(lg->g, lua_toboolean(L, 2));
  lua_pushboolean(L, s == VL_OK);
  if (s == VL_OK) return 1;
  lua_pushstring(L, vl_errmsg());
  return 2;
}

static int g_info(lua_State *L) {
  vl_graph *g = check_graph(L, 1)->g;
  lua_createtable(L, 0, 4);
  lua_pushinteger(L, vl_graph_device(g));
  lua_setfield(L, -2, "device");
  lua_pushboolean(L, vl_graph_captured(g));
  lua_setfield(L, -2, "captured");
  lua_pushinteger(L, (lua_Integer)vl_graph_num_nodes(g));
  lua_setfield(L, -2, "nodes");
  lua_pushinteger(L, (lua_Integer)vl_graph_rng_groups(g));
  lua_setfield(L, -2, "rng_groups");
  return 1;
}

/* __gc, __close and close(): idempotent. */
static int g_close(lua_State *L) {
  l_graph *lg = (l_graph *)luaL_checkudata(L, 1, GRAPH_MT);
  if (lg->g) {
    vl_graph_destroy(lg->g);
    lg->g = NULL;
  }
  return 0;
}

static int g_capturing(lua_State *L) {
  lua_pushboolean(L, vl_graph_capturing() != NULL);
  return 1;
}

static const luaL_Reg graph_methods[] = {
    {"enter", g_enter},   {"leave", g_leave},   {"capture_begin", g_capture_begin}, {"capture_end", g_capture_end},
    {"replay", g_replay}, {"close", g_close},   {"info", g_info},                   {NULL, NULL},
};

static const luaL_Reg graph_funcs[] = {
    {"new", g_new},
    {"capturing", g_capturing},
    {NULL, NULL},
};

int luaopen_v100_graph(lua_State *L) {
  luaL_newmetatable(L, GRAPH_MT);
  luaL_newlib(L, graph_methods);
  lua_setfield(L, -2, "__index");
  lua_pushcfunction(L, g_close);
  lua_setfield(L, -2, "__gc");
  lua_pushcfunction(L, g_close);
  lua_setfield(L, -2, "__close");
  lua_pop(L, 1);
  luaL_newlib(L, graph_funcs);
  return 1;
}
