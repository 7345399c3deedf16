/* ext/text/l_shard.c: BERT pretraining shards (ext/text/shard.h, pretrain.h) in v100.text.
 *   v100.text.ShardSet(path | {paths...}) -> set   (a shard file, a directory of *.shard files, or a list)
 *     set.n, set.seq_len, set.max_predictions, set.vocab_size, set.vocab_crc, set.whole_word_mask,
 *     set.masked_lm_prob, set.short_seq_prob, set.seed, set.dupe_factor, set.closed
 *     set:files() -> {{path =, n =}, ...}
 *     set:gather(idx) -> {input_ids, token_type_ids, attention_mask, labels, next_sentence_label,
 *                         masked_positions, masked_ids, masked_weights}   (CPU tensors; idx a 1-D
 *                         integer tensor or a table of 0-based global sample ids)
 *     set:close() (idempotent; also __gc and __close)
 *   v100.text.ShardWriter(path, {seq_len =, max_predictions =, vocab_size =, vocab_crc = 0, ...}) -> w
 *     w:add{ids = {...}, seg_a =, positions = {...}, masked_ids = {...}, nsp = 0|1}; w.count
 *     w:finish(); w:abort() (also __gc and __close: an unfinished shard leaves nothing behind)
 *   v100.text.make_pretraining_shards{inputs = {...}, vocab =, output =, lower = true, seq_len = 128,
 *     max_predictions = 20, masked_lm_prob = 0.15, short_seq_prob = 0.1, dupe_factor = 5,
 *     seed = 12345, whole_word_mask = false, samples_per_shard = 100000, threads = 0 (the CPUs, at most 16),
 *     piece_bytes = 0 (4 MiB of text per thread and round)}
 *     -> stats table {files, documents, sentences, corpus_tokens, samples, tokens, masked, random_next, shards}
 *   v100.text.crc32c(bytes) -> integer (CRC32C, as vocab_crc)
 * Ids and positions count from 0, as in the files. */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/vl_lua.h"
#include "runtime/io/tfevents.h"
#include "runtime/ops/ops.h"
#include "ext/text/pretrain.h"
#include "ext/text/shard.h"
#include "bindings/l_priv.h"

#define SET_MT "v100.text.ShardSet"
#define WRITER_MT "v100.text.ShardWriter"

typedef struct l_set {
  vl_shard_set *s;
} l_set;

typedef struct l_writer {
  vl_shard_writer *w;
} l_writer;

static vl_shard_set *check_set(lua_State *L) {
  l_set *u = luaL_checkudata(L, 1, SET_MT);
  if (!u->s) luaL_error(L, "ShardSet: used after close");
  return u->s;
}

static const char *check_path(lua_State *L, int idx, const char *fn) {
  size_t len;
  const char *p = lua_tolstring(L, idx, &len);
  if (!p || lua_type(L, idx) != LUA_TSTRING) luaL_error(L, "%s: a path must be a string, not %s", fn, luaL_typename(L, idx));
  if (strlen(p) != len) luaL_error(L, "%s: the path contains a NUL byte", fn);
  return p;
}

static lua_Integer opt_int(lua_State *L, int idx, const char *fn, const char *key, lua_Integer dflt, lua_Integer lo,
                           lua_Integer hi) {
  lua_Integer v = dflt;
  if (lua_getfield(L, idx, key) != LUA_TNIL) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "%s: %s must be an integer, not %s", fn, key, luaL_typename(L, -1));
  }
  if (v < lo || v > hi) luaL_error(L, "%s: %s %I is outside %I..%I", fn, key, v, lo, hi);
  lua_pop(L, 1);
  return v;
}

static double opt_num(lua_State *L, int idx, const char *fn, const char *key, double dflt) {
  double v = dflt;
  if (lua_getfield(L, idx, key) != LUA_TNIL) {
    if (lua_type(L, -1) != LUA_TNUMBER) luaL_error(L, "%s: %s must be a number, not %s", fn, key, luaL_typename(L, -1));
    v = lua_tonumber(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

static int opt_bool(lua_State *L, int idx, const char *fn, const char *key, int dflt) {
  int t = lua_getfield(L, idx, key), v = dflt;
  if (t == LUA_TBOOLEAN) v = lua_toboolean(L, -1);
  else if (t != LUA_TNIL) luaL_error(L, "%s: %s must be a boolean, not %s", fn, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

/* ---- ShardSet ---- */

static int l_set_new(lua_State *L) {
  const char *F = "ShardSet";
  int list = lua_istable(L, 1);
  size_t n = list ? (size_t)lua_rawlen(L, 1) : 1;
  if (list && n == 0) return luaL_error(L, "ShardSet: the list of paths is empty");
  const char **paths = lua_newuserdatauv(L, n * sizeof *paths, 0); /* freed by the collector */
  for (size_t i = 0; i < n; i++) {
    if (list) lua_rawgeti(L, 1, (lua_Integer)i + 1);
    else lua_pushvalue(L, 1);
    paths[i] = check_path(L, -1, F); /* the string stays referenced by the table or argument 1 */
    lua_pop(L, 1);
  }
  l_set *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->s = NULL;
  luaL_setmetatable(L, SET_MT);
  vl_status s = list ? vl_shard_set_open(paths, n, &u->s) : vl_shard_set_open_path(paths[0], &u->s);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

static int set_close(lua_State *L) {
  l_set *u = luaL_checkudata(L, 1, SET_MT);
  vl_shard_set_close(u->s);
  u->s = NULL;
  return 0;
}

static int set_files(lua_State *L) {
  vl_shard_set *s = check_set(L);
  size_t n = vl_shard_set_files(s);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_createtable(L, 0, 2);
    lua_pushstring(L, vl_shard_set_path(s, i));
    lua_setfield(L, -2, "path");
    lua_pushinteger(L, (lua_Integer)vl_shard_set_file_samples(s, i));
    lua_setfield(L, -2, "n");
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* A new CPU tensor of the given shape pushed (owned by Lua before anything can fail), its data. */
static void *push_tensor(lua_State *L, int ndim, int64_t d0, int64_t d1, vl_dtype dt) {
  int64_t size[2] = {d0, d1};
  vl_tensor *t = NULL;
  vl_status s = vl_tensor_empty(ndim, size, dt, vl_cpu_device(), &t);
  if (s != VL_OK) vl_lua_error(L, s);
  vl_lua_pushtensor(L, t);
  return vl_tensor_data(t);
}

static int set_gather(lua_State *L) {
  vl_shard_set *s = check_set(L);
  const vl_shard_info *h = vl_shard_set_info(s);
  int64_t *idx;
  size_t b;
  vl_tensor *t = vl_lua_testtensor(L, 2), *c = NULL;
  if (t) {
    if (t->ndim != 1 || (t->dtype != VL_I64 && t->dtype != VL_I32))
      return luaL_error(L, "ShardSet.gather: indices must be a 1-D i64 or i32 tensor or a table of integers");
    vl_tensor *cpu = NULL;
    vl_status st = vl_to(t, VL_I64, vl_cpu_device(), &cpu);
    if (st == VL_OK) st = vl_contiguous(cpu, &c);
    vl_tensor_release(cpu);
    if (st != VL_OK) return vl_lua_error(L, st);
    vl_lua_pushtensor(L, c); /* owned by Lua from here */
    idx = vl_tensor_data(c);
    b = (size_t)c->size[0];
  } else if (lua_istable(L, 2)) {
    b = (size_t)lua_rawlen(L, 2);
    idx = lua_newuserdatauv(L, (b ? b : 1) * sizeof *idx, 0);
    for (size_t i = 0; i < b; i++) {
      lua_rawgeti(L, 2, (lua_Integer)i + 1);
      int ok;
      lua_Integer v = lua_tointegerx(L, -1, &ok);
      if (!ok || lua_type(L, -1) != LUA_TNUMBER)
        return luaL_error(L, "ShardSet.gather: indices[%d] must be an integer, not %s", (int)i + 1, luaL_typename(L, -1));
      idx[i] = (int64_t)v;
      lua_pop(L, 1);
    }
  } else {
    return luaL_error(L, "ShardSet.gather: indices must be a 1-D integer tensor or a table, not %s", luaL_typename(L, 2));
  }
  int64_t B = (int64_t)b, Lq = h->seq_len, P = h->max_predictions;
  static const char *const names[] = {"input_ids", "token_type_ids", "attention_mask", "labels",
                                      "next_sentence_label", "masked_positions", "masked_ids", "masked_weights"};
  lua_createtable(L, 0, 8);
  int tab = lua_gettop(L);
  vl_shard_batch o;
  o.input_ids = push_tensor(L, 2, B, Lq, VL_I64);
  o.token_type_ids = push_tensor(L, 2, B, Lq, VL_I64);
  o.attention_mask = push_tensor(L, 2, B, Lq, VL_I64);
  o.labels = push_tensor(L, 2, B, Lq, VL_I64);
  o.next_sentence_label = push_tensor(L, 1, B, 0, VL_I64);
  o.masked_positions = push_tensor(L, 2, B, P, VL_I64);
  o.masked_ids = push_tensor(L, 2, B, P, VL_I64);
  o.masked_weights = push_tensor(L, 2, B, P, VL_F32);
  for (int i = 7; i >= 0; i--) lua_setfield(L, tab, names[i]);
  vl_status st = vl_shard_set_gather(s, idx, b, &o);
  if (st != VL_OK) return vl_lua_error(L, st);
  return 1;
}

static int set_index(lua_State *L) {
  l_set *u = luaL_checkudata(L, 1, SET_MT);
  const char *k = lua_tostring(L, 2);
  if (k && strcmp(k, "closed") == 0) {
    lua_pushboolean(L, u->s == NULL);
    return 1;
  }
  if (k && u->s) {
    const vl_shard_info *h = vl_shard_set_info(u->s);
    if (strcmp(k, "n") == 0) return lua_pushinteger(L, (lua_Integer)h->n_samples), 1;
    if (strcmp(k, "seq_len") == 0) return lua_pushinteger(L, h->seq_len), 1;
    if (strcmp(k, "max_predictions") == 0) return lua_pushinteger(L, h->max_predictions), 1;
    if (strcmp(k, "vocab_size") == 0) return lua_pushinteger(L, h->vocab_size), 1;
    if (strcmp(k, "vocab_crc") == 0) return lua_pushinteger(L, h->vocab_crc), 1;
    if (strcmp(k, "whole_word_mask") == 0) return lua_pushboolean(L, h->flags & VL_SHARD_FLAG_WHOLE_WORD), 1;
    if (strcmp(k, "masked_lm_prob") == 0) return lua_pushnumber(L, h->masked_lm_prob), 1;
    if (strcmp(k, "short_seq_prob") == 0) return lua_pushnumber(L, h->short_seq_prob), 1;
    if (strcmp(k, "seed") == 0) return lua_pushinteger(L, (lua_Integer)h->seed), 1;
    if (strcmp(k, "dupe_factor") == 0) return lua_pushinteger(L, h->dupe_factor), 1;
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

static int set_tostring(lua_State *L) {
  l_set *u = luaL_checkudata(L, 1, SET_MT);
  if (!u->s) lua_pushliteral(L, "ShardSet(closed)");
  else {
    const vl_shard_info *h = vl_shard_set_info(u->s);
    lua_pushfstring(L, "ShardSet(%I samples of %d tokens, %d files)", (lua_Integer)h->n_samples, (int)h->seq_len,
                    (int)vl_shard_set_files(u->s));
  }
  return 1;
}

/* ---- ShardWriter (tests and other tools) ---- */

static vl_shard_writer *check_writer(lua_State *L) {
  l_writer *u = luaL_checkudata(L, 1, WRITER_MT);
  if (!u->w) luaL_error(L, "ShardWriter: used after finish or abort");
  return u->w;
}

static int l_writer_new(lua_State *L) {
  const char *F = "ShardWriter", *path = check_path(L, 1, F);
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const names[] = {"seq_len", "max_predictions", "vocab_size", "vocab_crc", "whole_word_mask",
                                      "masked_lm_prob", "short_seq_prob", "seed", "dupe_factor", NULL};
  l_check_opts(L, 2, F, names);
  vl_shard_info p = {0};
  p.seq_len = (uint32_t)opt_int(L, 2, F, "seq_len", 128, 0, 0xFFFFFFFF);
  p.max_predictions = (uint32_t)opt_int(L, 2, F, "max_predictions", 20, 0, 0xFFFFFFFF);
  p.vocab_size = (uint32_t)opt_int(L, 2, F, "vocab_size", 0, 0, 0xFFFFFFFF);
  p.vocab_crc = (uint32_t)opt_int(L, 2, F, "vocab_crc", 0, 0, 0xFFFFFFFF);
  p.flags = opt_bool(L, 2, F, "whole_word_mask", 0) ? VL_SHARD_FLAG_WHOLE_WORD : 0;
  p.masked_lm_prob = opt_num(L, 2, F, "masked_lm_prob", 0.15);
  p.short_seq_prob = opt_num(L, 2, F, "short_seq_prob", 0.1);
  p.seed = (uint64_t)opt_int(L, 2, F, "seed", 0, LUA_MININTEGER, LUA_MAXINTEGER);
  p.dupe_factor = (uint32_t)opt_int(L, 2, F, "dupe_factor", 1, 0, 0xFFFFFFFF);
  l_writer *u = lua_newuserdatauv(L, sizeof *u, 0);
  u->w = NULL;
  luaL_setmetatable(L, WRITER_MT);
  vl_status s = vl_shard_writer_open(path, &p, &u->w);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

/* t[key] as a freshly made array of n uint32 (n = #t[key]), checked to be integers in 0..2^32-1. */
static uint32_t *u32_array(lua_State *L, int idx, const char *key, uint32_t *n) {
  if (lua_getfield(L, idx, key) != LUA_TTABLE) {
    if (lua_isnil(L, -1)) {
      lua_pop(L, 1);
      *n = 0;
      return lua_newuserdatauv(L, 4, 0);
    }
    luaL_error(L, "ShardWriter.add: %s must be a table of integers, not %s", key, luaL_typename(L, -1));
  }
  size_t m = (size_t)lua_rawlen(L, -1);
  if (m > 65535) luaL_error(L, "ShardWriter.add: %s has %d entries (at most 65535)", key, (int)m);
  uint32_t *v = lua_newuserdatauv(L, (m ? m : 1) * sizeof *v, 0);
  for (size_t i = 0; i < m; i++) {
    lua_rawgeti(L, -2, (lua_Integer)i + 1);
    int ok;
    lua_Integer x = lua_tointegerx(L, -1, &ok);
    if (!ok || x < 0 || x > 0xFFFFFFFF)
      luaL_error(L, "ShardWriter.add: %s[%d] must be an integer in 0..2^32-1", key, (int)i + 1);
    v[i] = (uint32_t)x;
    lua_pop(L, 1);
  }
  lua_remove(L, -2); /* the table; the buffer stays on the stack */
  *n = (uint32_t)m;
  return v;
}

static int writer_add(lua_State *L) {
  vl_shard_writer *w = check_writer(L);
  luaL_checktype(L, 2, LUA_TTABLE);
  static const char *const names[] = {"ids", "seg_a", "positions", "masked_ids", "nsp", NULL};
  l_check_opts(L, 2, "ShardWriter.add", names);
  vl_shard_sample smp;
  uint32_t np, nm;
  smp.ids = u32_array(L, 2, "ids", &smp.length);
  smp.positions = u32_array(L, 2, "positions", &np);
  smp.masked_ids = u32_array(L, 2, "masked_ids", &nm);
  if (np != nm) return luaL_error(L, "ShardWriter.add: %d positions but %d masked_ids", (int)np, (int)nm);
  smp.n_masked = np;
  smp.seg_a = (uint32_t)opt_int(L, 2, "ShardWriter.add", "seg_a", 0, 0, 0xFFFFFFFF);
  smp.nsp = (int)opt_int(L, 2, "ShardWriter.add", "nsp", 0, -1000, 1000);
  vl_status s = vl_shard_writer_add(w, &smp);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int writer_finish(lua_State *L) {
  vl_shard_writer *w = check_writer(L);
  l_writer *u = lua_touserdata(L, 1);
  u->w = NULL; /* finish frees it whatever the outcome */
  vl_status s = vl_shard_writer_finish(w);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static int writer_abort(lua_State *L) {
  l_writer *u = luaL_checkudata(L, 1, WRITER_MT);
  vl_shard_writer_abort(u->w);
  u->w = NULL;
  return 0;
}

static int writer_index(lua_State *L) {
  l_writer *u = luaL_checkudata(L, 1, WRITER_MT);
  const char *k = lua_tostring(L, 2);
  if (k && strcmp(k, "count") == 0 && u->w) return lua_pushinteger(L, (lua_Integer)vl_shard_writer_count(u->w)), 1;
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

/* ---- make_pretraining_shards ---- */

static int l_make(lua_State *L) {
  const char *F = "make_pretraining_shards";
  luaL_checktype(L, 1, LUA_TTABLE);
  static const char *const names[] = {"inputs", "vocab", "output", "lower", "seq_len", "max_predictions",
                                      "masked_lm_prob", "short_seq_prob", "dupe_factor", "seed", "whole_word_mask",
                                      "samples_per_shard", "threads", "piece_bytes", NULL};
  l_check_opts(L, 1, F, names);
  vl_pretrain_opts o = {0};
  if (lua_getfield(L, 1, "inputs") != LUA_TTABLE) return luaL_error(L, "%s: inputs must be a table of paths", F);
  o.n_inputs = (size_t)lua_rawlen(L, -1);
  const char **in = lua_newuserdatauv(L, (o.n_inputs ? o.n_inputs : 1) * sizeof *in, 0);
  for (size_t i = 0; i < o.n_inputs; i++) {
    lua_rawgeti(L, -2, (lua_Integer)i + 1);
    in[i] = check_path(L, -1, F); /* referenced by the inputs table */
    lua_pop(L, 1);
  }
  o.inputs = in;
  lua_getfield(L, 1, "vocab");
  o.vocab_path = check_path(L, -1, F);
  lua_getfield(L, 1, "output");
  o.output_dir = check_path(L, -1, F);
  o.lower = opt_bool(L, 1, F, "lower", 1);
  o.seq_len = (uint32_t)opt_int(L, 1, F, "seq_len", 128, 0, 4096);
  o.max_predictions = (uint32_t)opt_int(L, 1, F, "max_predictions", 20, 0, 4096);
  o.masked_lm_prob = opt_num(L, 1, F, "masked_lm_prob", 0.15);
  o.short_seq_prob = opt_num(L, 1, F, "short_seq_prob", 0.1);
  o.dupe_factor = (uint32_t)opt_int(L, 1, F, "dupe_factor", 5, 1, 1000000);
  o.seed = (uint64_t)opt_int(L, 1, F, "seed", 12345, LUA_MININTEGER, LUA_MAXINTEGER);
  o.whole_word_mask = opt_bool(L, 1, F, "whole_word_mask", 0);
  o.samples_per_shard = (uint64_t)opt_int(L, 1, F, "samples_per_shard", 100000, 1, LUA_MAXINTEGER);
  o.threads = (int)opt_int(L, 1, F, "threads", 0, 0, 256);
  o.piece_bytes = (size_t)opt_int(L, 1, F, "piece_bytes", 0, 0, (lua_Integer)1 << 40);
  vl_pretrain_stats st;
  vl_status s = vl_pretrain_make_shards(&o, &st);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_createtable(L, 0, 9);
#define FIELD(name) (lua_pushinteger(L, (lua_Integer)st.name), lua_setfield(L, -2, #name))
  FIELD(files), FIELD(documents), FIELD(sentences), FIELD(corpus_tokens), FIELD(samples), FIELD(tokens),
      FIELD(masked), FIELD(random_next), FIELD(shards);
#undef FIELD
  return 1;
}

/* crc32c(bytes) -> the CRC32C of a string (what a shard's vocab_crc holds of vocab.txt). */
static int l_crc32c(lua_State *L) {
  size_t n;
  const char *b = luaL_checklstring(L, 1, &n);
  lua_pushinteger(L, (lua_Integer)vl_crc32c(b, n));
  return 1;
}

static const luaL_Reg set_methods[] = {{"gather", set_gather}, {"files", set_files}, {"close", set_close}, {NULL, NULL}};
static const luaL_Reg writer_methods[] = {{"add", writer_add}, {"finish", writer_finish}, {"abort", writer_abort},
                                          {NULL, NULL}};
static const luaL_Reg shard_funcs[] = {{"ShardSet", l_set_new}, {"ShardWriter", l_writer_new},
                                       {"make_pretraining_shards", l_make}, {"crc32c", l_crc32c},
                                       {NULL, NULL}};

/* Adds the functions to the v100.text table at the top of the stack (called by luaopen_v100_text). */
void vl_lua_open_shard(lua_State *L) {
  vl_lua_class(L, SET_MT, set_methods, set_index, set_close, set_close, set_tostring);
  vl_lua_class(L, WRITER_MT, writer_methods, writer_index, writer_abort, writer_abort, NULL);
  luaL_setfuncs(L, shard_funcs, 0);
}
