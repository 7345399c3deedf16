/* ext/telemetry/l_telemetry.c: v100.core._telemetry, the primitives of v100.telemetry and
 * v100.prometheus (ext/telemetry/lua/v100/obs/telemetry.lua, prometheus.lua; the C of ext/telemetry/),
 * compiled into the host; the NVTX primitives, v100.core._nvtx, are bindings/l_nvtx.c:
 *
 *   open{source = 'nvml' | 'fake', devices = {nvml indices}, cuda = {cuda indices},
 *        fake = {ndevices =, dt =, base_w =, step_w =, energy0_j =, period =, energy_counter =}}
 *     -> sampler, or nil and the reason when the source is unavailable (no driver, no device)
 *   s:start(interval_s), s:stop(), s:sample(), s:close() (also __gc, __close)
 *   s:ndevices(), s:info(i), s:latest(i), s:totals(i), s:window(i[, reset]), s:errors() -> n, msg
 *   s.source, s.running, s.interval
 *   fields -> {'power_w', 'energy_j', ...} (the field names, in the runtime's order)
 *   serve(addr, port, path, content_type) -> server; srv.port, srv:set(body), srv:requests(),
 *         srv:close() (also __gc, __close)
 * i is the sampler's device, 1-based. A sample is a table with t and the fields that were read; a
 * stats table is {samples, t_first, t_last, throttle_any, integral = {..}, covered = {..},
 * min = {..}, max = {..}} keyed by field name, each only for the fields seen. */
#include <lauxlib.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "bindings/vl_lua.h"
#include "ext/telemetry/http.h"
#include "ext/telemetry/telemetry.h"

#define SAMPLER_MT "v100.telemetry.Sampler"
#define SERVER_MT "v100.prometheus.Server"

typedef struct l_sampler {
  vl_telemetry *tm; /* NULL once closed */
} l_sampler;

static double opt_number(lua_State *L, int t, const char *k, double def) {
  lua_getfield(L, t, k);
  double v = lua_isnil(L, -1) ? def : luaL_checknumber(L, -1);
  lua_pop(L, 1);
  return v;
}

/* A list of integers at field k of the table at t into ids (at most max); -1 when absent. */
static int opt_int_list(lua_State *L, int t, const char *k, int *ids, int max) {
  lua_getfield(L, t, k);
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return -1;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "telemetry.open: %s must be a list of device indices", k);
  int n = (int)luaL_len(L, -1);
  if (n > max) luaL_error(L, "telemetry.open: %s lists %d devices, at most %d", k, n, max);
  for (int i = 0; i < n; i++) {
    lua_geti(L, -1, i + 1);
    int isint;
    lua_Integer v = lua_tointegerx(L, -1, &isint);
    if (!isint || v < 0 || v > 1 << 20) luaL_error(L, "telemetry.open: %s[%d] must be a device index (0, 1, ...)", k, i + 1);
    ids[i] = (int)v;
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return n;
}

static int t_open(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const known[] = {"source", "devices", "cuda", "fake", NULL};
  l_check_opts(L, 1, "telemetry.open", known);
  lua_getfield(L, 1, "source");
  const char *src_name = luaL_optstring(L, -1, "nvml");
  int fake = !strcmp(src_name, "fake");
  if (!fake && strcmp(src_name, "nvml")) return luaL_error(L, "telemetry.open: source must be 'nvml' or 'fake', got '%s'", src_name);
  lua_pop(L, 1);
  int devs[64], cuda[64];
  int ndev = opt_int_list(L, 1, "devices", devs, 64);
  int ncuda = opt_int_list(L, 1, "cuda", cuda, 64);
  if (ndev >= 0 && ncuda >= 0) return luaL_error(L, "telemetry.open: give devices (NVML indices) or cuda, not both");
  l_sampler *ud = lua_newuserdatauv(L, sizeof *ud, 0);
  ud->tm = NULL;
  luaL_setmetatable(L, SAMPLER_MT);
  vl_tm_source src;
  vl_status s;
  if (fake) {
    vl_tm_fake_config cfg = {.ndevices = 1, .dt = 0.1, .base_w = 300, .step_w = 5, .energy0_j = 1e6, .period = 10,
                             .energy_counter = true};
    lua_getfield(L, 1, "fake");
    if (lua_istable(L, -1)) {
      int t = lua_gettop(L);
      static const char *const fake_known[] = {"ndevices", "dt", "base_w", "step_w", "energy0_j", "period",
                                               "energy_counter", NULL};
      l_check_opts(L, t, "telemetry.open: fake", fake_known);
      cfg.ndevices = (int)opt_number(L, t, "ndevices", cfg.ndevices);
      cfg.dt = opt_number(L, t, "dt", cfg.dt);
      cfg.base_w = opt_number(L, t, "base_w", cfg.base_w);
      cfg.step_w = opt_number(L, t, "step_w", cfg.step_w);
      cfg.energy0_j = opt_number(L, t, "energy0_j", cfg.energy0_j);
      cfg.period = (int)opt_number(L, t, "period", cfg.period);
      lua_getfield(L, t, "energy_counter");
      if (!lua_isnil(L, -1)) cfg.energy_counter = lua_toboolean(L, -1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
    s = vl_tm_fake_open(&cfg, &src);
  } else {
    s = vl_tm_nvml_open(&src);
  }
  if (s == VL_EUNSUPPORTED) {
    lua_pushnil(L);
    lua_pushstring(L, vl_errmsg());
    return 2;
  }
  if (s != VL_OK) return vl_lua_error(L, s);
  if (ncuda >= 0) {
    if (fake) {
      for (int i = 0; i < ncuda; i++) devs[i] = cuda[i]; /* the fake's devices stand for cuda:0, 1, ... */
    } else {
      for (int i = 0; i < ncuda && s == VL_OK; i++) s = vl_tm_nvml_index_of_cuda(&src, cuda[i], &devs[i]);
      if (s != VL_OK) {
        src.close(src.ud);
        if (s == VL_EUNSUPPORTED || s == VL_EDEVICE) {
          lua_pushnil(L);
          lua_pushstring(L, vl_errmsg());
          return 2;
        }
        return vl_lua_error(L, s);
      }
    }
    ndev = ncuda;
  }
  vl_telemetry *tm = NULL;
  s = vl_telemetry_new(&src, ndev >= 0 ? devs : NULL, ndev, &tm); /* closes src on failure */
  if (s != VL_OK) return vl_lua_error(L, s);
  ud->tm = tm;
  return 1;
}

static vl_telemetry *check_open(lua_State *L, const char *fname) {
  l_sampler *ud = luaL_checkudata(L, 1, SAMPLER_MT);
  if (!ud->tm) luaL_error(L, "telemetry: %s on a closed sampler", fname);
  return ud->tm;
}

static int dev_arg(lua_State *L, vl_telemetry *tm, int arg) {
  lua_Integer i = luaL_checkinteger(L, arg);
  int n = vl_telemetry_ndevices(tm);
  if (i < 1 || i > n) luaL_error(L, "telemetry: device %d out of range (the sampler has %d: 1..%d)", (int)i, n, n);
  return (int)i - 1;
}

static int s_start(lua_State *L) {
  vl_telemetry *tm = check_open(L, "start");
  vl_status s = vl_telemetry_start(tm, luaL_checknumber(L, 2));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int s_stop(lua_State *L) {
  vl_telemetry_stop(check_open(L, "stop"));
  return 0;
}

static int s_sample(lua_State *L) {
  vl_status s = vl_telemetry_sample(check_open(L, "sample"));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int s_ndevices(lua_State *L) {
  lua_pushinteger(L, vl_telemetry_ndevices(check_open(L, "ndevices")));
  return 1;
}

static int s_info(lua_State *L) {
  vl_telemetry *tm = check_open(L, "info");
  vl_tm_device_info in;
  vl_status s = vl_telemetry_info(tm, dev_arg(L, tm, 2), &in);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_createtable(L, 0, 10);
  lua_pushinteger(L, in.index), lua_setfield(L, -2, "index");
  lua_pushstring(L, in.name), lua_setfield(L, -2, "name");
  lua_pushstring(L, in.uuid), lua_setfield(L, -2, "uuid");
  lua_pushstring(L, in.pci_bus_id), lua_setfield(L, -2, "pci_bus_id");
  lua_pushnumber(L, in.power_limit_w), lua_setfield(L, -2, "power_limit_w");
  lua_pushnumber(L, in.app_sm_clock_mhz), lua_setfield(L, -2, "app_sm_clock_mhz");
  lua_pushnumber(L, in.app_mem_clock_mhz), lua_setfield(L, -2, "app_mem_clock_mhz");
  lua_pushnumber(L, in.mem_total_bytes), lua_setfield(L, -2, "mem_total_bytes");
  lua_pushstring(L, in.power_source ? in.power_source : ""), lua_setfield(L, -2, "power_source");
  lua_pushboolean(L, in.energy_counter), lua_setfield(L, -2, "energy_counter");
  return 1;
}

static void push_fields(lua_State *L, const double *v, uint32_t mask) {
  lua_createtable(L, 0, VL_TM_NFIELDS);
  for (int f = 0; f < VL_TM_NFIELDS; f++) {
    if (!(mask >> f & 1)) continue;
    lua_pushnumber(L, v[f]);
    lua_setfield(L, -2, vl_tm_field_name(f));
  }
}

static int s_latest(lua_State *L) {
  vl_telemetry *tm = check_open(L, "latest");
  vl_tm_sample smp;
  vl_status s = vl_telemetry_latest(tm, dev_arg(L, tm, 2), &smp);
  if (s == VL_EINVAL) {
    lua_pushnil(L);
    return 1;
  }
  if (s != VL_OK) return vl_lua_error(L, s);
  push_fields(L, smp.v, smp.valid);
  lua_pushnumber(L, smp.t);
  lua_setfield(L, -2, "t");
  return 1;
}

static void push_stats(lua_State *L, const vl_tm_stats *st) {
  lua_createtable(L, 0, 8);
  lua_pushinteger(L, (lua_Integer)st->samples), lua_setfield(L, -2, "samples");
  lua_pushnumber(L, st->t_first), lua_setfield(L, -2, "t_first");
  lua_pushnumber(L, st->t_last), lua_setfield(L, -2, "t_last");
  lua_pushinteger(L, (lua_Integer)st->throttle_any), lua_setfield(L, -2, "throttle_any");
  uint32_t integrated = 0;
  for (int f = 0; f < VL_TM_NFIELDS; f++)
    if (st->covered[f] > 0) integrated |= 1u << f;
  push_fields(L, st->integral, integrated), lua_setfield(L, -2, "integral");
  push_fields(L, st->covered, integrated), lua_setfield(L, -2, "covered");
  push_fields(L, st->min, st->seen), lua_setfield(L, -2, "min");
  push_fields(L, st->max, st->seen), lua_setfield(L, -2, "max");
}

static int s_totals(lua_State *L) {
  vl_telemetry *tm = check_open(L, "totals");
  vl_tm_stats st;
  vl_status s = vl_telemetry_totals(tm, dev_arg(L, tm, 2), &st);
  if (s != VL_OK) return vl_lua_error(L, s);
  push_stats(L, &st);
  return 1;
}

static int s_window(lua_State *L) {
  vl_telemetry *tm = check_open(L, "window");
  int i = dev_arg(L, tm, 2);
  vl_tm_stats st;
  vl_status s = vl_telemetry_window(tm, i, lua_toboolean(L, 3), &st);
  if (s != VL_OK) return vl_lua_error(L, s);
  push_stats(L, &st);
  return 1;
}

static int s_errors(lua_State *L) {
  char msg[256];
  uint64_t n = vl_telemetry_errors(check_open(L, "errors"), msg, sizeof msg);
  lua_pushinteger(L, (lua_Integer)n);
  lua_pushstring(L, msg);
  return 2;
}

static int s_close(lua_State *L) {
  l_sampler *ud = luaL_checkudata(L, 1, SAMPLER_MT);
  vl_telemetry_free(ud->tm);
  ud->tm = NULL;
  return 0;
}

static int s_index(lua_State *L) {
  l_sampler *ud = luaL_checkudata(L, 1, SAMPLER_MT);
  const char *k = luaL_checkstring(L, 2);
  if (!strcmp(k, "source")) {
    lua_pushstring(L, ud->tm ? vl_telemetry_source_name(ud->tm) : "closed");
  } else if (!strcmp(k, "running")) {
    lua_pushboolean(L, ud->tm && vl_telemetry_running(ud->tm));
  } else if (!strcmp(k, "interval")) {
    lua_pushnumber(L, ud->tm ? vl_telemetry_interval(ud->tm) : 0);
  } else {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
  }
  return 1;
}

static int s_tostring(lua_State *L) {
  l_sampler *ud = luaL_checkudata(L, 1, SAMPLER_MT);
  if (!ud->tm) lua_pushliteral(L, "v100.telemetry.Sampler (closed)");
  else lua_pushfstring(L, "v100.telemetry.Sampler (%s, %d device%s%s)", vl_telemetry_source_name(ud->tm),
                       vl_telemetry_ndevices(ud->tm), vl_telemetry_ndevices(ud->tm) == 1 ? "" : "s",
                       vl_telemetry_running(ud->tm) ? ", running" : "");
  return 1;
}

/* ---- the HTTP endpoint ---- */

typedef struct l_server {
  vl_http_server *srv; /* NULL once closed */
} l_server;

static int h_serve(lua_State *L) {
  const char *addr = luaL_checkstring(L, 1);
  lua_Integer port = luaL_checkinteger(L, 2);
  const char *path = luaL_checkstring(L, 3);
  const char *ctype = luaL_checkstring(L, 4);
  l_server *ud = lua_newuserdatauv(L, sizeof *ud, 0);
  ud->srv = NULL;
  luaL_setmetatable(L, SERVER_MT);
  if (port < 0 || port > 65535) return luaL_error(L, "prometheus: port %d is not in 0..65535", (int)port);
  vl_status s = vl_http_serve(addr, (int)port, path, ctype, &ud->srv);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

static vl_http_server *check_server(lua_State *L) {
  l_server *ud = luaL_checkudata(L, 1, SERVER_MT);
  if (!ud->srv) luaL_error(L, "prometheus: the server is closed");
  return ud->srv;
}

static int h_set(lua_State *L) {
  vl_http_server *srv = check_server(L);
  size_t len;
  const char *body = luaL_checklstring(L, 2, &len);
  vl_status s = vl_http_set_body(srv, body, len);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int h_requests(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)vl_http_requests(check_server(L)));
  return 1;
}

static int h_close(lua_State *L) {
  l_server *ud = luaL_checkudata(L, 1, SERVER_MT);
  vl_http_close(ud->srv);
  ud->srv = NULL;
  return 0;
}

static int h_index(lua_State *L) {
  l_server *ud = luaL_checkudata(L, 1, SERVER_MT);
  const char *k = luaL_checkstring(L, 2);
  if (!strcmp(k, "port")) {
    if (ud->srv) lua_pushinteger(L, vl_http_port(ud->srv));
    else lua_pushnil(L);
  } else if (!strcmp(k, "addr")) { /* the bound address, numeric: "0" reads back as "0.0.0.0" */
    if (ud->srv) lua_pushstring(L, vl_http_addr(ud->srv));
    else lua_pushnil(L);
  } else if (!strcmp(k, "loopback")) {
    if (ud->srv) lua_pushboolean(L, vl_http_loopback(ud->srv));
    else lua_pushnil(L);
  } else {
    lua_pushvalue(L, 2);
    lua_rawget(L, lua_upvalueindex(1));
  }
  return 1;
}

static const luaL_Reg sampler_methods[] = {
    {"start", s_start},   {"stop", s_stop},     {"sample", s_sample}, {"ndevices", s_ndevices},
    {"info", s_info},     {"latest", s_latest}, {"totals", s_totals}, {"window", s_window},
    {"errors", s_errors}, {"close", s_close},   {NULL, NULL},
};

static const luaL_Reg server_methods[] = {
    {"set", h_set}, {"requests", h_requests}, {"close", h_close}, {NULL, NULL},
};

int luaopen_v100_telemetry(lua_State *L) {
  vl_lua_class(L, SAMPLER_MT, sampler_methods, s_index, s_close, s_close, s_tostring);
  vl_lua_class(L, SERVER_MT, server_methods, h_index, h_close, h_close, NULL);
  lua_createtable(L, 0, 3);
  lua_pushcfunction(L, t_open);
  lua_setfield(L, -2, "open");
  lua_pushcfunction(L, h_serve);
  lua_setfield(L, -2, "serve");
  lua_createtable(L, VL_TM_NFIELDS, 0);
  for (int f = 0; f < VL_TM_NFIELDS; f++) {
    lua_pushstring(L, vl_tm_field_name(f));
    lua_rawseti(L, -2, f + 1);
  }
  lua_setfield(L, -2, "fields");
  return 1;
}
