/* bindings/l_autograd.c: autograd from Lua: tensor fields (requires_grad, grad, grad_fn,
 * is_leaf), methods (backward, detach, hooks...), grad mode, autograd.grad, and the C side of
 * autograd.Function (scripts/v100/autograd.lua holds the Lua side and gradcheck).
 *
 * Lua functions kept by the runtime (hooks, Function backwards) live in the registry; the
 * runtime calls them through C trampolines run under lua_pcall, so a Lua error inside a hook or
 * a backward never unwinds through the engine: it comes back as a failed vl_status and is
 * raised again when the engine has cleaned up. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/l_priv.h"
#include "runtime/autograd/autograd.h"
#include "runtime/autograd/ops.h"
#include "runtime/ops/ops.h"

/* The Lua thread running the current backward (hooks and Function backwards run on it). The
 * host runs one Lua state, so a file-level variable suffices; nested backwards save/restore it. */
static lua_State *cur_L;

typedef struct lua_ref {
  lua_State *main; /* the main thread: valid for the state's whole life (for luaL_unref) */
  int ref;
} lua_ref;

static lua_State *main_thread(lua_State *L) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, LUA_RIDX_MAINTHREAD);
  lua_State *m = lua_tothread(L, -1);
  lua_pop(L, 1);
  return m;
}

static void ref_free(void *ud) {
  lua_ref *r = (lua_ref *)ud;
  luaL_unref(r->main, LUA_REGISTRYINDEX, r->ref);
  free(r);
}

static lua_State *run_L(lua_State *main) { return cur_L ? cur_L : main; }

/* Turns a caught Lua error (at the top of L) into a runtime failure; the prefix is left out when
 * the message already starts with it (a backward nested in a backward fails through each level). */
static vl_status lua_failure(lua_State *L, const char *prefix) {
  const char *msg = lua_tostring(L, -1);
  if (msg && strncmp(msg, prefix, strlen(prefix)) == 0) prefix = "";
  vl_status s = vl_fail(VL_EINVAL, "%s%s", prefix, msg ? msg : "(error object is not a string)");
  lua_pop(L, 1);
  return s;
}

/* ---- fields ---- */

int l_autograd_field(lua_State *L, vl_tensor *t, const char *k) {
  if (strcmp(k, "requires_grad") == 0) {
    lua_pushboolean(L, vl_requires_grad(t));
  } else if (strcmp(k, "grad") == 0) {
    vl_tensor *g = vl_grad(t);
    if (g) vl_lua_pushtensor(L, vl_tensor_retain(g));
    else lua_pushnil(L);
  } else if (strcmp(k, "grad_fn") == 0) {
    vl_node *n = vl_grad_fn(t);
    if (n) lua_pushstring(L, n->name);
    else lua_pushnil(L);
  } else if (strcmp(k, "is_leaf") == 0) {
    lua_pushboolean(L, vl_is_leaf(t));
  } else {
    return 0;
  }
  return 1;
}

/* t.grad = g | nil, t.requires_grad = bool */
int l_autograd_newindex(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  if (lua_type(L, 2) != LUA_TSTRING) return l_tensor_newindex(L, t); /* x[...] = v (l_index.c) */
  const char *k = lua_tostring(L, 2);
  vl_status s;
  if (strcmp(k, "grad") == 0) {
    s = vl_set_grad(t, lua_isnil(L, 3) ? NULL : vl_lua_checktensor(L, 3));
  } else if (strcmp(k, "requires_grad") == 0) {
    s = vl_set_requires_grad(t, lua_toboolean(L, 3));
  } else {
    return luaL_error(L, "cannot set field '%s' of a tensor (only grad and requires_grad are assignable)", k);
  }
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

void l_opt_requires_grad(lua_State *L, int opts, int tidx) {
  if (!lua_istable(L, opts)) return;
  lua_getfield(L, opts, "requires_grad");
  bool on = lua_toboolean(L, -1);
  lua_pop(L, 1);
  if (!on) return;
  vl_status s = vl_set_requires_grad(vl_lua_checktensor(L, tidx), true);
  if (s != VL_OK) vl_lua_error(L, s);
}

/* ---- methods ---- */

static int t_requires_grad_(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  bool on = lua_isnone(L, 2) ? true : lua_toboolean(L, 2);
  vl_status s = vl_set_requires_grad(t, on);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_settop(L, 1);
  return 1;
}

static int t_retain_grad(lua_State *L) {
  vl_status s = vl_retain_grad(vl_lua_checktensor(L, 1));
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int t_detach(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor **slot = l_slot(L);
  return l_done(L, vl_detach(t, slot));
}

static int t_detach_(lua_State *L) {
  vl_status s = vl_detach_(vl_lua_checktensor(L, 1));
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_settop(L, 1);
  return 1;
}

/* {retain_graph =, create_graph =}: checked keys; create_graph = true (a differentiable backward,
 * for double backward) is refused by name rather than ignored: the backward rules run raw ops,
 * which record nothing. */
static bool opt_retain(lua_State *L, int idx, const char *fn) {
  static const char *const known[] = {"retain_graph", "create_graph", NULL};
  l_check_opts(L, idx, fn, known);
  if (!lua_istable(L, idx)) return false;
  if (lua_getfield(L, idx, "create_graph") != LUA_TNIL && lua_toboolean(L, -1))
    luaL_error(L, "%s: create_graph = true (double backward) is not supported: backward rules build no graph; "
               "compute higher derivatives with finite differences (v100.autograd.gradcheck's way) instead", fn);
  lua_pop(L, 1);
  lua_getfield(L, idx, "retain_graph");
  bool r = lua_toboolean(L, -1);
  lua_pop(L, 1);
  return r;
}

/* t:backward([grad[, {retain_graph=, create_graph=}]]), also t:backward({retain_graph=}) */
static int t_backward(lua_State *L) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  vl_tensor *g = NULL;
  int opts = 3;
  if (lua_istable(L, 2) && !vl_lua_testtensor(L, 2)) opts = 2;
  else if (!lua_isnoneornil(L, 2)) g = vl_lua_checktensor(L, 2);
  bool retain = opt_retain(L, opts, "backward");
  lua_State *prev = cur_L;
  cur_L = L;
  vl_status s = vl_backward(1, &t, &g, retain);
  cur_L = prev;
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

/* ---- hooks ---- */

static int hook_tramp(lua_State *L) {
  vl_tensor *arg = (vl_tensor *)lua_touserdata(L, 2);
  lua_settop(L, 1);
  vl_lua_pushtensor(L, vl_tensor_retain(arg));
  lua_call(L, 1, 1);
  return 1;
}

static vl_status call_lua(lua_ref *r, vl_tensor *arg, int nres, vl_tensor **replace, const char *what) {
  lua_State *L = run_L(r->main);
  if (!lua_checkstack(L, 4)) return vl_fail(VL_EOOM, "%s: Lua stack overflow", what);
  lua_pushcfunction(L, hook_tramp);
  lua_rawgeti(L, LUA_REGISTRYINDEX, r->ref);
  lua_pushlightuserdata(L, arg);
  if (lua_pcall(L, 2, nres, 0) != LUA_OK) return lua_failure(L, "");
  if (nres == 0) return VL_OK;
  vl_status s = VL_OK;
  if (!lua_isnil(L, -1)) {
    vl_tensor *t = vl_lua_testtensor(L, -1);
    if (t) *replace = vl_tensor_retain(t);
    else s = vl_fail(VL_EINVAL, "%s: the hook returned a %s (expected a tensor or nil)", what, luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  return s;
}

static vl_status grad_hook(void *ud, vl_tensor *grad, vl_tensor **replace) {
  return call_lua((lua_ref *)ud, grad, 1, replace, "register_hook");
}

static vl_status post_hook(void *ud, vl_tensor *leaf) {
  return call_lua((lua_ref *)ud, leaf, 0, NULL, "register_post_accumulate_grad_hook");
}

static int register_any(lua_State *L, bool post) {
  vl_tensor *t = vl_lua_checktensor(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  lua_ref *r = (lua_ref *)malloc(sizeof *r);
  if (!r) return luaL_error(L, "register_hook: out of host memory");
  r->main = main_thread(L);
  lua_pushvalue(L, 2);
  r->ref = luaL_ref(L, LUA_REGISTRYINDEX);
  int id = 0;
  vl_status s = post ? vl_register_post_accumulate_hook(t, post_hook, r, ref_free, &id)
                     : vl_register_hook(t, grad_hook, r, ref_free, &id);
  if (s != VL_OK) {
    ref_free(r);
    return vl_lua_error(L, s);
  }
  lua_pushinteger(L, id);
  return 1;
}
static int a_register_hook(lua_State *L) { return register_any(L, false); }
static int a_register_post_hook(lua_State *L) { return register_any(L, true); }

static int a_remove_hook(lua_State *L) {
  vl_tensor *t = vl_lua_testtensor(L, 1); /* a freed tensor took its hooks with it */
  if (t) vl_remove_hook(t, (int)luaL_checkinteger(L, 2));
  return 0;
}

/* ---- grad mode ---- */

static int a_set_grad_enabled(lua_State *L) {
  luaL_checkany(L, 1);
  vl_set_grad_enabled(lua_toboolean(L, 1));
  return 0;
}

static int a_is_grad_enabled(lua_State *L) {
  lua_pushboolean(L, vl_grad_enabled());
  return 1;
}

static int a_live_nodes(lua_State *L) {
  lua_pushinteger(L, (lua_Integer)vl_autograd_live_nodes());
  return 1;
}

/* ---- autograd.grad(outputs, inputs[, grad_outputs[, {retain_graph=, create_graph=}]]) ---- */

/* A tensor or a list of tensors at idx into a userdata array (pushed); returns the count. */
static int tensor_list(lua_State *L, int idx, vl_tensor ***arr, const char *what, bool allow_nil) {
  vl_tensor *one = vl_lua_testtensor(L, idx);
  int n = one ? 1 : lua_istable(L, idx) ? (int)lua_rawlen(L, idx) : 0;
  if (!one && !lua_istable(L, idx)) luaL_error(L, "autograd.grad: %s must be a tensor or a list of tensors", what);
  vl_tensor **a = (vl_tensor **)lua_newuserdatauv(L, sizeof(vl_tensor *) * (size_t)(n ? n : 1), 0);
  for (int i = 0; i < n; i++) {
    if (one) {
      a[i] = one;
      continue;
    }
    lua_rawgeti(L, idx, i + 1);
    a[i] = vl_lua_testtensor(L, -1);
    if (!a[i] && !(allow_nil && lua_isnil(L, -1)))
      luaL_error(L, "autograd.grad: element %d of %s is a %s, not a tensor", i + 1, what, luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  *arr = a;
  return n;
}

static int a_grad(lua_State *L) {
  vl_tensor **outs, **ins, **gos = NULL;
  lua_settop(L, 4); /* the arrays below are pushed after the arguments */
  int no = tensor_list(L, 1, &outs, "outputs", false);
  int ni = tensor_list(L, 2, &ins, "inputs", false);
  if (!lua_isnoneornil(L, 3)) {
    int ng = tensor_list(L, 3, &gos, "grad_outputs", true);
    if (ng != no && !vl_lua_testtensor(L, 3))
      return luaL_error(L, "autograd.grad: %d grad_outputs for %d outputs", ng, no);
  }
  bool retain = opt_retain(L, 4, "autograd.grad");
  vl_tensor **res = (vl_tensor **)lua_newuserdatauv(L, sizeof(vl_tensor *) * (size_t)(ni ? ni : 1), 0);
  memset(res, 0, sizeof(vl_tensor *) * (size_t)(ni ? ni : 1));
  lua_State *prev = cur_L;
  cur_L = L;
  vl_status s = vl_autograd_grad(no, outs, gos, ni, ins, retain, res);
  cur_L = prev;
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_createtable(L, ni, 0);
  for (int i = 0; i < ni; i++) { /* move every result into Lua before anything can raise */
    if (!res[i]) continue;
    vl_lua_pushtensor(L, res[i]);
    res[i] = NULL;
    lua_rawseti(L, -2, i + 1);
  }
  return 1;
}

/* ---- autograd.Function: the C side ---- */

/* The context of a Lua Function's node (copied into the node by vl_ag_record). */
typedef struct fn_ctx {
  lua_ref backward; /* the Lua backward function */
  int ctx_ref;      /* the ctx table */
  char *name;       /* the node's name */
} fn_ctx;

static void fn_ctx_free(void *ud) {
  fn_ctx *c = (fn_ctx *)ud;
  luaL_unref(c->backward.main, LUA_REGISTRYINDEX, c->backward.ref);
  luaL_unref(c->backward.main, LUA_REGISTRYINDEX, c->ctx_ref);
  free(c->name);
}

static vl_status raise_status(lua_State *L, vl_status s) { return (vl_status)vl_lua_error(L, s); }

/* Runs under lua_pcall: args are lightuserdata node, grads_out, grads_in. */
static int fn_backward_tramp(lua_State *L) {
  vl_node *n = (vl_node *)lua_touserdata(L, 1);
  vl_tensor *const *go = (vl_tensor *const *)lua_touserdata(L, 2);
  vl_tensor **gi = (vl_tensor **)lua_touserdata(L, 3);
  const fn_ctx *c = VL_AG_CTX(n, fn_ctx);
  lua_settop(L, 0);
  luaL_checkstack(L, n->nout + n->nin + 8, "autograd.Function: too many values");
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->backward.ref);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->ctx_ref);
  lua_createtable(L, n->nsaved, 0);
  for (int i = 0; i < n->nsaved; i++) {
    vl_tensor *t;
    vl_status s = vl_node_saved(n, i, &t);
    if (s != VL_OK) raise_status(L, s);
    if (t) vl_lua_pushtensor(L, vl_tensor_retain(t));
    else lua_pushnil(L);
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, 2, "saved_tensors");
  for (int o = 0; o < n->nout; o++) {
    if (go[o]) {
      vl_lua_pushtensor(L, vl_tensor_retain(go[o]));
    } else if (n->out_ndim[o] >= 0) { /* an output that got no gradient: zeros, as PyTorch */
      vl_tensor **slot = l_slot(L);
      l_done(L, vl_ag_zeros_out(n, o, slot));
    } else {
      lua_pushnil(L);
    }
  }
  int base = lua_gettop(L) - (2 + n->nout); /* below the function and its arguments */
  lua_call(L, 1 + n->nout, LUA_MULTRET);
  int got = lua_gettop(L) - base;
  /* One gradient per argument of forward (nil for one that has none), as PyTorch asks: a count
   * that differs is a mistake in the Function, never padded or cut silently. */
  if (got != n->nin)
    return luaL_error(L, "returned %d gradient%s, expected %d (one per argument of forward, nil where there is none)",
                      got, got == 1 ? "" : "s", n->nin);
  for (int j = 0; j < n->nin; j++) {
    int idx = j + 1;
    if (lua_isnil(L, idx)) continue;
    vl_tensor *g = vl_lua_testtensor(L, idx);
    if (!g) return luaL_error(L, "gradient %d is a %s, not a tensor or nil", j + 1, luaL_typename(L, idx));
    vl_status s = vl_ag_give(n, j, vl_tensor_retain(g), gi);
    if (s != VL_OK) return luaL_error(L, "gradient %d: %s", j + 1, vl_errmsg());
  }
  return 0;
}

static vl_status fn_backward(vl_node *n, vl_tensor *const *go, vl_tensor **gi) {
  const fn_ctx *c = VL_AG_CTX(n, fn_ctx);
  lua_State *L = run_L(c->backward.main);
  if (!lua_checkstack(L, 5)) return vl_fail(VL_EOOM, "%s.backward: Lua stack overflow", c->name);
  lua_pushcfunction(L, fn_backward_tramp);
  lua_pushlightuserdata(L, n);
  lua_pushlightuserdata(L, (void *)go);
  lua_pushlightuserdata(L, gi);
  if (lua_pcall(L, 3, 0, 0) != LUA_OK) {
    char prefix[256];
    snprintf(prefix, sizeof prefix, "%s.backward: ", c->name);
    return lua_failure(L, prefix);
  }
  return VL_OK;
}

/* _function_record(name, backward, ctx, args, nargs, outs, saved): makes the tensors of `outs`
 * (a packed table, modified in place) outputs of a node whose backward calls `backward`. */
static int a_function_record(lua_State *L) {
  const char *name = luaL_checkstring(L, 1);
  luaL_checktype(L, 2, LUA_TFUNCTION);
  luaL_checktype(L, 3, LUA_TTABLE);
  luaL_checktype(L, 4, LUA_TTABLE);
  int nargs = (int)luaL_checkinteger(L, 5);
  luaL_checktype(L, 6, LUA_TTABLE);
  luaL_checktype(L, 7, LUA_TTABLE);
  lua_getfield(L, 6, "n");
  int nout = (int)luaL_optinteger(L, -1, (lua_Integer)lua_rawlen(L, 6));
  lua_pop(L, 1);
  vl_tensor **in = (vl_tensor **)lua_newuserdatauv(L, sizeof(vl_tensor *) * (size_t)(nargs + nout + 1), 0);
  vl_tensor **out = in + nargs;
  for (int i = 0; i < nargs; i++) {
    lua_rawgeti(L, 4, i + 1);
    in[i] = vl_lua_testtensor(L, -1);
    lua_pop(L, 1);
  }
  if (!vl_ag_needs(nargs, in)) return 0;
  /* Outputs must be fresh tensors: an input returned as is (or any tensor with history) is
   * replaced by a detached alias, which becomes the node's output. */
  for (int o = 0; o < nout; o++) {
    lua_rawgeti(L, 6, o + 1);
    vl_tensor *t = vl_lua_testtensor(L, -1);
    lua_pop(L, 1);
    out[o] = NULL;
    if (!t) continue;
    bool fresh = !t->autograd || (!vl_requires_grad(t) && vl_is_leaf(t));
    for (int k = 0; k < o && fresh; k++) fresh = out[k] != t;
    if (!fresh) {
      vl_tensor **slot = l_slot(L);
      l_done(L, vl_detach(t, slot));
      t = *slot;
      lua_rawseti(L, 6, o + 1);
    }
    out[o] = t;
  }
  /* The saved tensors first: a bad one raises before anything is owned by the recording. */
  vl_ag_rec rec = {.backward = fn_backward, .nin = nargs, .in = in, .nout = nout, .out = out};
  int nsave = (int)lua_rawlen(L, 7);
  if (nsave > VL_NODE_MAX_SAVED)
    return luaL_error(L, "%s: save_for_backward: at most %d tensors can be saved (got %d)", name, VL_NODE_MAX_SAVED,
                      nsave);
  for (int i = 0; i < nsave; i++) {
    lua_rawgeti(L, 7, i + 1);
    rec.save[i] = vl_lua_testtensor(L, -1);
    if (!rec.save[i] && luaL_testudata(L, -1, VL_LUA_TENSOR_MT))
      return luaL_error(L, "%s: save_for_backward: argument %d: tensor used after free", name, i + 1);
    if (!rec.save[i])
      return luaL_error(L, "%s: save_for_backward: argument %d is a %s, not a tensor", name, i + 1,
                        luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  if (nout == 0) return 0; /* no outputs: nothing to attach a node to */
  fn_ctx c = {{main_thread(L), LUA_NOREF}, LUA_NOREF, NULL};
  size_t len = strlen(name) + 1;
  c.name = (char *)malloc(len);
  if (!c.name) return luaL_error(L, "%s: out of host memory", name);
  memcpy(c.name, name, len);
  lua_pushvalue(L, 2);
  c.backward.ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_pushvalue(L, 3);
  c.ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  rec.name = c.name;
  rec.ctx = &c;
  rec.ctx_size = sizeof c;
  rec.ctx_free = fn_ctx_free; /* from here on the references belong to the recording */
  vl_status s = vl_ag_record(&rec);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

/* ---- registration ---- */

static const luaL_Reg autograd_methods[] = {
    {"requires_grad_", t_requires_grad_},
    {"retain_grad", t_retain_grad},
    {"detach", t_detach},
    {"detach_", t_detach_},
    {"backward", t_backward},
    {NULL, NULL},
};

static const luaL_Reg autograd_funcs[] = {
    {"grad", a_grad},
    {"_register_hook", a_register_hook},
    {"_register_post_hook", a_register_post_hook},
    {"_remove_hook", a_remove_hook},
    {"_function_record", a_function_record},
    {"_live_nodes", a_live_nodes},
    {NULL, NULL},
};

static const luaL_Reg mode_funcs[] = {
    {"set_grad_enabled", a_set_grad_enabled},
    {"is_grad_enabled", a_is_grad_enabled},
    {NULL, NULL},
};

void l_register_autograd_methods(lua_State *L) { luaL_setfuncs(L, autograd_methods, 0); }

void l_register_autograd_module(lua_State *L) {
  luaL_setfuncs(L, mode_funcs, 0);
  luaL_newlib(L, autograd_funcs);
  lua_setfield(L, -2, "autograd");
}
