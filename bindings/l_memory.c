/* bindings/l_memory.c: `v100.memory`: the caching allocator of a CUDA device, seen from Lua.
 * The device argument is optional everywhere (the current device), an ordinal or "cuda[:N]". */
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/core/cuda.h"
#include "runtime/core/alloc.h"

static vl_alloc *check_pool(lua_State *L, int arg, const char *fname, int *devout) {
  int dev = l_optcudadev(L, arg, fname);
  vl_alloc *p = NULL;
  vl_status s = vl_cuda_alloc(dev, &p);
  if (s != VL_OK) vl_lua_error(L, s);
  if (devout) *devout = dev;
  return p;
}

static void set_int(lua_State *L, const char *k, lua_Integer v) {
  lua_pushinteger(L, v);
  lua_setfield(L, -2, k);
}

static int m_stats(lua_State *L) {
  vl_alloc *p = check_pool(L, 1, "memory.stats", NULL);
  vl_alloc_stats st;
  memset(&st, 0, sizeof st);
  vl_alloc_get_stats(p, &st);
  lua_createtable(L, 0, 16);
  set_int(L, "allocated", (lua_Integer)st.allocated);
  set_int(L, "requested", (lua_Integer)st.requested);
  set_int(L, "reserved", (lua_Integer)st.reserved);
  set_int(L, "peak_allocated", (lua_Integer)st.peak_allocated);
  set_int(L, "peak_reserved", (lua_Integer)st.peak_reserved);
  set_int(L, "limit", (lua_Integer)st.limit);
  set_int(L, "alloc_count", (lua_Integer)st.alloc_count);
  set_int(L, "free_count", (lua_Integer)st.free_count);
  set_int(L, "cache_hits", (lua_Integer)st.cache_hits);
  set_int(L, "raw_allocs", (lua_Integer)st.raw_allocs);
  set_int(L, "raw_frees", (lua_Integer)st.raw_frees);
  set_int(L, "oom_count", (lua_Integer)st.oom_count);
  set_int(L, "segments", (lua_Integer)st.segments);
  set_int(L, "active_blocks", (lua_Integer)st.active_blocks);
  set_int(L, "pending_free", (lua_Integer)st.pending_free);
  return 1;
}

static int m_empty_cache(lua_State *L) {
  vl_alloc_empty_cache(check_pool(L, 1, "memory.empty_cache", NULL));
  return 0;
}

static int m_reset_peak(lua_State *L) {
  vl_alloc_reset_peak(check_pool(L, 1, "memory.reset_peak", NULL));
  return 0;
}

/* set_limit(bytes_or_fraction[, dev]): a number <= 1 is a fraction of the device's memory;
 * 0 removes the cap. Returns the limit in bytes. */
static int m_set_limit(lua_State *L) {
  double x = luaL_checknumber(L, 1);
  luaL_argcheck(L, x >= 0, 1, "the limit must not be negative");
  int dev = 0;
  vl_alloc *p = check_pool(L, 2, "memory.set_limit", &dev);
  size_t bytes = (size_t)x;
  if (x <= 1) {
    vl_device_info info;
    memset(&info, 0, sizeof info);
    vl_status s = vl_cuda_device_info(dev, &info);
    if (s != VL_OK) return vl_lua_error(L, s);
    bytes = (size_t)(x * (double)info.total_memory);
  }
  vl_alloc_set_limit(p, bytes);
  lua_pushinteger(L, (lua_Integer)bytes);
  return 1;
}

/* The snapshot lives in a userdata while the tables are built, so a memory error frees it. */
#define SNAP_MT "v100.memory.snapshot"
typedef struct snap {
  vl_alloc_segment_info *segs;
  size_t n;
} snap;

static int snap_gc(lua_State *L) {
  snap *h = (snap *)lua_touserdata(L, 1);
  if (h->segs) vl_alloc_snapshot_free(h->segs, h->n);
  h->segs = NULL;
  h->n = 0;
  return 0;
}

static int m_snapshot(lua_State *L) {
  vl_alloc *p = check_pool(L, 1, "memory.snapshot", NULL);
  snap *h = (snap *)lua_newuserdatauv(L, sizeof *h, 0);
  h->segs = NULL;
  h->n = 0;
  luaL_setmetatable(L, SNAP_MT);
  vl_status s = vl_alloc_snapshot(p, &h->segs, &h->n);
  if (s != VL_OK) return vl_lua_error(L, s);
  vl_alloc_segment_info *segs = h->segs;
  size_t n = h->n;
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    const vl_alloc_segment_info *g = &segs[i];
    lua_createtable(L, 0, 7);
    set_int(L, "addr", (lua_Integer)g->addr);
    set_int(L, "size", (lua_Integer)g->size);
    lua_pushfstring(L, "%p", g->stream);
    lua_setfield(L, -2, "stream");
    lua_pushboolean(L, g->small);
    lua_setfield(L, -2, "small");
    set_int(L, "private_id", g->private_id);
    lua_createtable(L, (int)g->nblocks, 0);
    for (size_t j = 0; j < g->nblocks; j++) {
      const vl_alloc_block_info *b = &g->blocks[j];
      lua_createtable(L, 0, 5);
      set_int(L, "addr", (lua_Integer)b->addr);
      set_int(L, "size", (lua_Integer)b->size);
      lua_pushboolean(L, b->allocated);
      lua_setfield(L, -2, "allocated");
      set_int(L, "requested", (lua_Integer)b->requested);
      lua_pushboolean(L, b->pending);
      lua_setfield(L, -2, "pending");
      lua_rawseti(L, -2, (lua_Integer)j + 1);
    }
    lua_setfield(L, -2, "blocks");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  vl_alloc_snapshot_free(h->segs, h->n);
  h->segs = NULL;
  h->n = 0;
  lua_remove(L, -2);
  return 1;
}

static const luaL_Reg memory_funcs[] = {
    {"stats", m_stats},
    {"empty_cache", m_empty_cache},
    {"reset_peak", m_reset_peak},
    {"set_limit", m_set_limit},
    {"snapshot", m_snapshot},
    {NULL, NULL},
};

int luaopen_v100_memory(lua_State *L) {
  luaL_newmetatable(L, SNAP_MT);
  lua_pushcfunction(L, snap_gc);
  lua_setfield(L, -2, "__gc");
  lua_pop(L, 1);
  luaL_newlib(L, memory_funcs);
  return 1;
}
