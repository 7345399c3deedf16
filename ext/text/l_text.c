/* ext/text/l_text.c: v100.text, the WordPiece tokenizer (ext/text/wordpiece.h) for Lua.
 *   v100.text.WordPiece(vocab_path[, {lower = true, strip_accents = nil (follows lower), max_chars = 100}]) -> tok
 *   tok:tokenize(text) -> {tokens}
 *   tok:encode(text[, pair][, {max_length =, truncation = true, padding = 'max_length' | false,
 *              add_special = true, as = 'tensor' | 'table'}]) -> {ids, token_type_ids, attention_mask}
 *              (1-D i64 CPU tensors by default, Lua tables of integers with as = 'table')
 *   tok:decode(ids[, {skip_special = false}]) -> string (ids: a table or a 1-D integer tensor)
 *   tok:token_to_id(s) -> id or nil, tok:id_to_token(id) -> string or nil, tok.vocab_size
 *   v100.text.train_vocab(files[, {vocab_size = 30522, min_frequency = 2, limit_alphabet = 1000, lower = true,
 *              strip_accents = nil, special = {'[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'},
 *              continuation_order = nil}]) -> {tokens in id order} (ext/text/vocab_train.h)
 *   v100.text.save_vocab(tokens, path)  (vocab.txt, replaced atomically)
 * Ids count from 0, as in vocab.txt and Hugging Face. */
#include <lauxlib.h>
#include <lua.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/vl_lua.h"
#include "ext/text/vocab_train.h"
#include "ext/text/wordpiece.h"
#include "bindings/l_priv.h"

#define WORDPIECE_MT "v100.text.WordPiece"

typedef struct l_wordpiece {
  vl_wordpiece *tok;
} l_wordpiece;

static vl_wordpiece *check_tok(lua_State *L) {
  l_wordpiece *w = luaL_checkudata(L, 1, WORDPIECE_MT);
  if (!w->tok) luaL_error(L, "WordPiece: the tokenizer was closed");
  return w->tok;
}

static int opt_bool(lua_State *L, int idx, const char *fn, const char *key, int dflt) {
  int t = lua_getfield(L, idx, key);
  int v = dflt;
  if (t == LUA_TBOOLEAN) v = lua_toboolean(L, -1);
  else if (t != LUA_TNIL) luaL_error(L, "%s: option %s must be a boolean, not %s", fn, key, luaL_typename(L, -1));
  lua_pop(L, 1);
  return v;
}

static lua_Integer opt_int(lua_State *L, int idx, const char *fn, const char *key, lua_Integer dflt) {
  int t = lua_getfield(L, idx, key);
  lua_Integer v = dflt;
  if (t != LUA_TNIL) {
    int ok;
    v = lua_tointegerx(L, -1, &ok);
    if (!ok) luaL_error(L, "%s: option %s must be an integer, not %s", fn, key, luaL_typename(L, -1));
  }
  lua_pop(L, 1);
  return v;
}

static int l_wordpiece_new(lua_State *L) {
  size_t plen;
  const char *path = luaL_checklstring(L, 1, &plen);
  if (strlen(path) != plen) return luaL_error(L, "WordPiece: the vocab path contains a NUL byte");
  vl_wordpiece_opts o = vl_wordpiece_default_opts();
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const names[] = {"lower", "strip_accents", "max_chars", NULL};
    l_check_opts(L, 2, "WordPiece", names);
    o.lower = opt_bool(L, 2, "WordPiece", "lower", 1);
    o.strip_accents = opt_bool(L, 2, "WordPiece", "strip_accents", -1);
    lua_Integer mc = opt_int(L, 2, "WordPiece", "max_chars", 100);
    if (mc < 1 || mc > 1000000) return luaL_error(L, "WordPiece: max_chars %d must be in 1..1000000", (int)mc);
    o.max_chars = (int)mc;
  }
  l_wordpiece *w = lua_newuserdatauv(L, sizeof *w, 0);
  w->tok = NULL;
  luaL_setmetatable(L, WORDPIECE_MT);
  vl_status s = vl_wordpiece_load(path, &o, &w->tok);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 1;
}

/* Buffers the runtime malloc's for us are held by a userdata whose __gc frees them, made before
 * the call: a Lua error while the results are copied out (out of memory) cannot leak them. */
#define BUFS_MT "v100.text.buffers"
typedef struct l_bufs {
  int64_t *p[3];
} l_bufs;

static int bufs_gc(lua_State *L) {
  l_bufs *b = luaL_checkudata(L, 1, BUFS_MT);
  for (int i = 0; i < 3; i++) {
    free(b->p[i]);
    b->p[i] = NULL;
  }
  return 0;
}

static l_bufs *push_bufs(lua_State *L) {
  l_bufs *b = lua_newuserdatauv(L, sizeof *b, 0);
  memset(b, 0, sizeof *b);
  luaL_setmetatable(L, BUFS_MT);
  return b;
}

static int t_tokenize(lua_State *L) {
  vl_wordpiece *tok = check_tok(L);
  size_t len;
  const char *text = luaL_checklstring(L, 2, &len);
  l_bufs *b = push_bufs(L);
  size_t n;
  vl_status s = vl_wordpiece_tokenize(tok, text, len, &b->p[0], &n);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_createtable(L, (int)n, 0);
  for (size_t i = 0; i < n; i++) {
    lua_pushstring(L, vl_wordpiece_id_to_token(tok, b->p[0][i]));
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

/* A 1-D i64 CPU tensor (as_table false) or a table of integers with v[0..n). */
static void push_ids(lua_State *L, const int64_t *v, size_t n, bool as_table) {
  if (as_table) {
    lua_createtable(L, (int)n, 0);
    for (size_t i = 0; i < n; i++) {
      lua_pushinteger(L, (lua_Integer)v[i]);
      lua_rawseti(L, -2, (lua_Integer)i + 1);
    }
    return;
  }
  int64_t size = (int64_t)n;
  vl_tensor *t = NULL;
  vl_status s = vl_tensor_empty(1, &size, VL_I64, vl_cpu_device(), &t);
  if (s != VL_OK) vl_lua_error(L, s);
  if (n) memcpy(vl_tensor_data(t), v, n * sizeof *v);
  vl_lua_pushtensor(L, t);
}

static int t_encode(lua_State *L) {
  vl_wordpiece *tok = check_tok(L);
  size_t alen, blen = 0;
  const char *a = luaL_checklstring(L, 2, &alen), *b = NULL;
  int oi = 3;
  if (lua_type(L, 3) == LUA_TSTRING) {
    b = lua_tolstring(L, 3, &blen);
    oi = 4;
  } else if (lua_isnil(L, 3) && lua_gettop(L) >= 4) {
    oi = 4; /* encode(text, nil, opts) */
  }
  vl_wordpiece_encode_opts o = {.max_length = 0, .truncation = true, .pad = false, .add_special = true};
  bool as_table = false;
  if (!lua_isnoneornil(L, oi)) {
    if (!lua_istable(L, oi))
      return luaL_error(L, "WordPiece.encode: argument %d must be the pair's text or the options table, not %s",
                        oi - 1, luaL_typename(L, oi));
    static const char *const names[] = {"max_length", "truncation", "padding", "add_special", "as", NULL};
    l_check_opts(L, oi, "WordPiece.encode", names);
    lua_Integer ml = opt_int(L, oi, "WordPiece.encode", "max_length", 0);
    if (ml < 1 && ml != 0) return luaL_error(L, "WordPiece.encode: max_length %d must be >= 1", (int)ml);
    o.max_length = ml;
    o.truncation = opt_bool(L, oi, "WordPiece.encode", "truncation", 1);
    o.add_special = opt_bool(L, oi, "WordPiece.encode", "add_special", 1);
    int t = lua_getfield(L, oi, "padding");
    if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "max_length") == 0) o.pad = true;
    else if (!(t == LUA_TNIL || (t == LUA_TBOOLEAN && !lua_toboolean(L, -1))))
      return luaL_error(L, "WordPiece.encode: padding must be 'max_length' or false, not %s",
                        t == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1));
    lua_pop(L, 1);
    t = lua_getfield(L, oi, "as");
    if (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "table") == 0) as_table = true;
    else if (!(t == LUA_TNIL || (t == LUA_TSTRING && strcmp(lua_tostring(L, -1), "tensor") == 0)))
      return luaL_error(L, "WordPiece.encode: as must be 'tensor' or 'table', not %s",
                        t == LUA_TSTRING ? lua_tostring(L, -1) : luaL_typename(L, -1));
    lua_pop(L, 1);
  }
  l_bufs *bufs = push_bufs(L);
  vl_wordpiece_encoding e;
  vl_status s = vl_wordpiece_encode(tok, a, alen, b, blen, &o, &e);
  if (s != VL_OK) return vl_lua_error(L, s);
  bufs->p[0] = e.ids;
  bufs->p[1] = e.type_ids;
  bufs->p[2] = e.mask;
  lua_createtable(L, 0, 3);
  push_ids(L, e.ids, e.n, as_table);
  lua_setfield(L, -2, "ids");
  push_ids(L, e.type_ids, e.n, as_table);
  lua_setfield(L, -2, "token_type_ids");
  push_ids(L, e.mask, e.n, as_table);
  lua_setfield(L, -2, "attention_mask");
  return 1;
}

static int t_decode(lua_State *L) {
  vl_wordpiece *tok = check_tok(L);
  if (vl_lua_testtensor(L, 2)) { /* a tensor: its totable(), checked like a table below */
    lua_getfield(L, 2, "totable");
    lua_pushvalue(L, 2);
    lua_call(L, 1, 1);
    lua_replace(L, 2);
  }
  if (!lua_istable(L, 2))
    return luaL_error(L, "WordPiece.decode: ids must be a table or a 1-D tensor of integers, not %s",
                      luaL_typename(L, 2));
  bool skip = false;
  if (!lua_isnoneornil(L, 3)) {
    luaL_checktype(L, 3, LUA_TTABLE);
    static const char *const names[] = {"skip_special", NULL};
    l_check_opts(L, 3, "WordPiece.decode", names);
    skip = opt_bool(L, 3, "WordPiece.decode", "skip_special", 0);
  }
  size_t n = (size_t)lua_rawlen(L, 2);
  l_bufs *bufs = push_bufs(L);
  bufs->p[0] = malloc((n ? n : 1) * sizeof(int64_t));
  if (!bufs->p[0]) return luaL_error(L, "WordPiece.decode: out of memory");
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(L, 2, (lua_Integer)i + 1);
    int ok;
    lua_Integer id = lua_tointegerx(L, -1, &ok);
    if (!ok || lua_type(L, -1) != LUA_TNUMBER)
      return luaL_error(L, "WordPiece.decode: ids[%d] must be an integer, not %s", (int)i + 1,
                        lua_type(L, -1) == LUA_TNUMBER ? "a fraction" : luaL_typename(L, -1));
    lua_pop(L, 1);
    bufs->p[0][i] = (int64_t)id;
  }
  char *text;
  vl_status s = vl_wordpiece_decode(tok, bufs->p[0], n, skip, &text);
  if (s != VL_OK) return vl_lua_error(L, s);
  bufs->p[1] = (int64_t *)(void *)text; /* freed by the box as well */
  lua_pushstring(L, text);
  return 1;
}

static int t_token_to_id(lua_State *L) {
  vl_wordpiece *tok = check_tok(L);
  size_t len;
  const char *s = luaL_checklstring(L, 2, &len);
  int64_t id = vl_wordpiece_token_to_id(tok, s, len);
  if (id < 0) lua_pushnil(L);
  else lua_pushinteger(L, (lua_Integer)id);
  return 1;
}

static int t_id_to_token(lua_State *L) {
  vl_wordpiece *tok = check_tok(L);
  const char *s = vl_wordpiece_id_to_token(tok, (int64_t)luaL_checkinteger(L, 2));
  if (s) lua_pushstring(L, s);
  else lua_pushnil(L);
  return 1;
}

static int t_gc(lua_State *L) {
  l_wordpiece *w = luaL_checkudata(L, 1, WORDPIECE_MT);
  vl_wordpiece_free(w->tok);
  w->tok = NULL;
  return 0;
}

static int t_index(lua_State *L) {
  const char *k = lua_tostring(L, 2);
  if (k && strcmp(k, "vocab_size") == 0) {
    lua_pushinteger(L, (lua_Integer)vl_wordpiece_vocab_size(check_tok(L)));
    return 1;
  }
  lua_pushvalue(L, 2);
  lua_rawget(L, lua_upvalueindex(1));
  return 1;
}

static int t_tostring(lua_State *L) {
  l_wordpiece *w = luaL_checkudata(L, 1, WORDPIECE_MT);
  if (w->tok) lua_pushfstring(L, "WordPiece(%d tokens)", (int)vl_wordpiece_vocab_size(w->tok));
  else lua_pushliteral(L, "WordPiece(closed)");
  return 1;
}


/* The trained tokens are held by a userdata whose __gc frees them while they are copied out. */
#define TOKENS_MT "v100.text.tokens"
typedef struct l_tokens {
  char **t;
  size_t n;
} l_tokens;

static int tokens_gc(lua_State *L) {
  l_tokens *b = luaL_checkudata(L, 1, TOKENS_MT);
  vl_vocab_tokens_free(b->t, b->n);
  b->t = NULL;
  b->n = 0;
  return 0;
}

static int l_train_vocab(lua_State *L) {
  static const char *const fn = "train_vocab";
  int nf;
  if (lua_type(L, 1) == LUA_TSTRING) {
    nf = 1;
  } else if (lua_istable(L, 1)) {
    nf = (int)lua_rawlen(L, 1);
  } else {
    return luaL_error(L, "train_vocab: files must be a path or a table of paths, not %s", luaL_typename(L, 1));
  }
  vl_vocab_train_opts o = vl_vocab_train_default_opts();
  const char **special = NULL;
  if (!lua_isnoneornil(L, 2)) {
    luaL_checktype(L, 2, LUA_TTABLE);
    static const char *const names[] = {"vocab_size", "min_frequency", "limit_alphabet", "lower", "strip_accents",
                                        "special", "continuation_order", NULL};
    l_check_opts(L, 2, fn, names);
    o.vocab_size = opt_int(L, 2, fn, "vocab_size", o.vocab_size);
    o.min_frequency = opt_int(L, 2, fn, "min_frequency", o.min_frequency);
    o.limit_alphabet = opt_int(L, 2, fn, "limit_alphabet", o.limit_alphabet);
    o.lower = opt_bool(L, 2, fn, "lower", 1);
    o.strip_accents = opt_bool(L, 2, fn, "strip_accents", -1);
    int t = lua_getfield(L, 2, "continuation_order");
    if (t == LUA_TSTRING) o.continuation_order = lua_tostring(L, -1); /* stays on the stack */
    else if (t != LUA_TNIL)
      return luaL_error(L, "train_vocab: option continuation_order must be a string, not %s", luaL_typename(L, -1));
    t = lua_getfield(L, 2, "special");
    if (t == LUA_TTABLE) {
      int ns = (int)lua_rawlen(L, -1);
      special = lua_newuserdatauv(L, (size_t)(ns ? ns : 1) * sizeof *special, 0); /* collected with the call */
      for (int i = 0; i < ns; i++) {
        if (lua_rawgeti(L, -2, i + 1) != LUA_TSTRING)
          return luaL_error(L, "train_vocab: special[%d] must be a string, not %s", i + 1, luaL_typename(L, -1));
        special[i] = lua_tostring(L, -1);
        lua_pop(L, 1); /* the string stays alive in the table */
      }
      o.special = special;
      o.nspecial = (size_t)ns;
    } else if (t != LUA_TNIL) {
      return luaL_error(L, "train_vocab: option special must be a table of strings, not %s", luaL_typename(L, -1));
    }
  }
  const char **files = lua_newuserdatauv(L, (size_t)(nf ? nf : 1) * sizeof *files, 0);
  for (int i = 0; i < nf; i++) {
    if (lua_type(L, 1) == LUA_TSTRING) {
      files[i] = lua_tostring(L, 1);
      continue;
    }
    if (lua_rawgeti(L, 1, i + 1) != LUA_TSTRING)
      return luaL_error(L, "train_vocab: files[%d] must be a string, not %s", i + 1, luaL_typename(L, -1));
    files[i] = lua_tostring(L, -1);
    lua_pop(L, 1);
  }
  l_tokens *box = lua_newuserdatauv(L, sizeof *box, 0);
  box->t = NULL;
  box->n = 0;
  luaL_setmetatable(L, TOKENS_MT);
  vl_status s = vl_vocab_train_files(files, (size_t)nf, &o, &box->t, &box->n);
  if (s != VL_OK) return vl_lua_error(L, s);
  lua_createtable(L, (int)box->n, 0);
  for (size_t i = 0; i < box->n; i++) {
    lua_pushstring(L, box->t[i]);
    lua_rawseti(L, -2, (lua_Integer)i + 1);
  }
  return 1;
}

static int l_save_vocab(lua_State *L) {
  luaL_checktype(L, 1, LUA_TTABLE);
  const char *path = luaL_checkstring(L, 2);
  int n = (int)lua_rawlen(L, 1);
  const char **t = lua_newuserdatauv(L, (size_t)(n ? n : 1) * sizeof *t, 0);
  for (int i = 0; i < n; i++) {
    if (lua_rawgeti(L, 1, i + 1) != LUA_TSTRING)
      return luaL_error(L, "save_vocab: tokens[%d] must be a string, not %s", i + 1, luaL_typename(L, -1));
    size_t len;
    t[i] = lua_tolstring(L, -1, &len);
    if (strlen(t[i]) != len) return luaL_error(L, "save_vocab: tokens[%d] contains a NUL byte", i + 1);
    lua_pop(L, 1); /* the string stays alive in the table */
  }
  vl_status s = vl_vocab_save(t, (size_t)n, path);
  if (s != VL_OK) return vl_lua_error(L, s);
  return 0;
}

static const luaL_Reg tok_methods[] = {
    {"tokenize", t_tokenize},
    {"encode", t_encode},
    {"decode", t_decode},
    {"token_to_id", t_token_to_id},
    {"id_to_token", t_id_to_token},
    {NULL, NULL},
};

static const luaL_Reg text_funcs[] = {
    {"WordPiece", l_wordpiece_new},
    {"train_vocab", l_train_vocab},
    {"save_vocab", l_save_vocab},
    {NULL, NULL},
};

void vl_lua_open_shard(lua_State *L); /* ext/text/l_shard.c: ShardSet, ShardWriter, make_pretraining_shards */

int luaopen_v100_text(lua_State *L) {
  vl_lua_class(L, WORDPIECE_MT, tok_methods, t_index, t_gc, t_gc, t_tostring);
  if (luaL_newmetatable(L, BUFS_MT)) {
    lua_pushcfunction(L, bufs_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  if (luaL_newmetatable(L, TOKENS_MT)) {
    lua_pushcfunction(L, tokens_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_newlib(L, text_funcs);
  vl_lua_open_shard(L);
  return 1;
}
