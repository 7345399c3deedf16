/* bindings/l_json.c: the one JSON codec (cJSON) of v100lua, in v100.io; the logger's metrics
 * lines, configs and checkpoints' meta.json (scripts/v100/checkpoint.lua) all use it:
 *   v100.io.json_encode(value[, opts]) -> string   object keys sorted (the same table always
 *        gives the same text); opts: pretty = true (cJSON's indented form, tabs) instead of one
 *        line without spaces; nonfinite = 'null' (default: NaN and +-inf, which have no JSON
 *        form, encode as null, so a NaN loss still gives a valid line) or 'error' (they raise:
 *        a checkpoint must not silently lose a value); int_keys = true (a table that is not an
 *        array 1..n may have integer keys, written as their decimal text; otherwise an error)
 *   v100.io.json_decode(string[, what]) -> value   what (a file name, say) goes into messages
 * Values: nil/null, booleans, numbers, strings, and tables (arrays, objects) nested up to
 * JSON_MAX_DEPTH (1000) levels, the same limit both ways and named in both errors: a table whose
 * keys are exactly 1..n (n >= 1) is an array, one with string keys only an object, an empty one
 * `{}`. Integers and floats stay apart as in Lua: an integer prints as its exact decimal digits
 * (all 64 bits: no {"__int64__": ...} wrapping is needed, since decoding reads the digits back
 * exactly) and a float always with a '.' or an exponent (1.0, not 1), shortest text that reads
 * back to the same double; when decoding, a number is converted exactly as Lua converts a
 * numeral ("3" -> 3, "3.0" -> 3.0, an integer beyond 64 bits -> float). null decodes to nil (an
 * absent member; a hole in an array). An object that is exactly {"__int64__": "<decimal>"}
 * decodes to that integer: checkpoints written before this codec held integers beyond 2^53 so.
 * Strings must be valid UTF-8 without NUL bytes, either way (C strings would cut them): a raw NUL
 * byte in the input is refused as \u0000 is, never read as the end of the string.
 *
 * cJSON keeps numbers as doubles, which loses the integer/float distinction and integers past
 * 2^53; so numbers are printed here (as raw cJSON items), and decoding takes each number's text
 * from a scan of the input: cJSON has already checked the syntax, and its tree holds members
 * and elements in document order, the same order as the scan's tokens. */
#include <cjson/cJSON.h>
#include <lauxlib.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bindings/l_log.h"
#include "bindings/l_priv.h"
#include "runtime/io/file_io.h"

/* One nesting limit for encoding and decoding, so that whatever json_encode writes json_decode
 * reads. It is cJSON's own CJSON_NESTING_LIMIT (1000, which cJSON's parser enforces with a bare
 * failure): check_input below enforces it first, with an error that names it. */
#define JSON_MAX_DEPTH 1000
#define JSON_STR_(x) #x
#define JSON_STR(x) JSON_STR_(x)

/* ---- encoding ---- */

typedef struct enc {
  lua_State *L;
  int nonfinite_error; /* opts.nonfinite == 'error' */
  int int_keys;        /* opts.int_keys */
  char err[512];
  char path[256]; /* where in the value: $, $.a, $.a[3] */
} enc;

static int enc_fail(enc *e, const char *fmt, const char *arg) {
  char what[200];
  snprintf(what, sizeof what, fmt, arg);
  snprintf(e->err, sizeof e->err, "json_encode: %s at %s", what, e->path[0] ? e->path : "$");
  return -1;
}

static void path_push(enc *e, size_t *saved, const char *key, size_t key_len, lua_Integer index) {
  size_t n = strlen(e->path);
  *saved = n;
  if (n == 0) n = (size_t)snprintf(e->path, sizeof e->path, "$");
  if (n + 8 >= sizeof e->path) return;
  char shown[48];
  if (key) snprintf(e->path + n, sizeof e->path - n, ".%s", vl_escape_bytes(key, key_len, shown, sizeof shown));
  else snprintf(e->path + n, sizeof e->path - n, "[%lld]", (long long)index);
}

/* The number at idx as JSON text; -1 (e->err set) for a non-finite one under nonfinite='error'. */
static int number_text(enc *e, int idx, char *buf, size_t cap) {
  lua_State *L = e->L;
  if (lua_isinteger(L, idx)) {
    snprintf(buf, cap, "%lld", (long long)lua_tointeger(L, idx));
    return 0;
  }
  double v = lua_tonumber(L, idx);
  if (!isfinite(v)) {
    if (e->nonfinite_error) return enc_fail(e, "%s has no JSON form (nonfinite = 'error')", isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf");
    snprintf(buf, cap, "null");
    return 0;
  }
  for (int prec = 15; prec <= 17; prec++) { /* the shortest of these that reads back exactly */
    snprintf(buf, cap, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".eE")) strncat(buf, ".0", cap - strlen(buf) - 1);
  return 0;
}

static int check_string(enc *e, const char *s, size_t n, const char *what) {
  if (memchr(s, '\0', n)) return enc_fail(e, "%s contains a NUL byte", what);
  if (vl_utf8_valid_prefix((const unsigned char *)s, n) != n) return enc_fail(e, "%s is not valid UTF-8", what);
  return 0;
}

/* An object key: a string of the table (s) or, with int_keys, an integer's decimal text (in
 * num; s stays NULL because qsort moves the struct). */
typedef struct key_ref {
  const char *s;
  size_t n;
  lua_Integer i;
  char num[24];
} key_ref;

static const char *key_str(const key_ref *k) { return k->s ? k->s : k->num; }

static int key_cmp(const void *a, const void *b) {
  const key_ref *x = a, *y = b;
  size_t n = x->n < y->n ? x->n : y->n;
  int c = memcmp(key_str(x), key_str(y), n);
  return c ? c : (x->n > y->n) - (x->n < y->n);
}

static cJSON *encode_value(enc *e, int idx, int depth);

/* The table at idx (absolute) as an array; len > 0 and its keys are exactly 1..len. */
static cJSON *encode_array(enc *e, int idx, lua_Integer len, int depth) {
  lua_State *L = e->L;
  cJSON *arr = cJSON_CreateArray();
  if (!arr) return enc_fail(e, "%s", "out of memory"), NULL;
  for (lua_Integer i = 1; i <= len; i++) {
    size_t saved;
    lua_rawgeti(L, idx, i);
    path_push(e, &saved, NULL, 0, i);
    cJSON *item = encode_value(e, lua_gettop(L), depth + 1);
    e->path[saved] = '\0';
    lua_pop(L, 1);
    if (!item || !cJSON_AddItemToArray(arr, item)) {
      cJSON_Delete(item);
      cJSON_Delete(arr);
      return item ? (enc_fail(e, "%s", "out of memory"), NULL) : NULL;
    }
  }
  return arr;
}

/* The keys of the table at idx, sorted (nkeys of them); NULL (e->err set) on a key JSON cannot
 * hold. The strings stay alive as keys of the table. */
static key_ref *object_keys(enc *e, int idx, size_t nkeys) {
  lua_State *L = e->L;
  key_ref *keys = malloc(nkeys * sizeof *keys);
  if (!keys) return enc_fail(e, "%s", "out of memory"), NULL;
  size_t k = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    lua_pop(L, 1);
    key_ref *r = &keys[k++];
    if (lua_type(L, -1) == LUA_TSTRING) {
      r->s = lua_tolstring(L, -1, &r->n);
    } else if (e->int_keys && lua_isinteger(L, -1)) {
      r->s = NULL;
      r->i = lua_tointeger(L, -1);
      r->n = (size_t)snprintf(r->num, sizeof r->num, "%lld", (long long)r->i);
    } else {
      const char *t = lua_isinteger(L, -1) ? "an integer key that does not make the table an array 1..n"
                                            : luaL_typename(L, -1);
      lua_pop(L, 1);
      free(keys);
      return enc_fail(e, e->int_keys ? "a table key must be a string or an integer (object) or the table an array 1..n; found %s"
                                     : "a table key must be a string (object) or the table an array 1..n; found %s", t), NULL;
    }
  }
  qsort(keys, nkeys, sizeof *keys, key_cmp);
  for (k = 1; k < nkeys; k++)
    if (key_cmp(&keys[k - 1], &keys[k]) == 0) { /* 7 and "7" */
      enc_fail(e, "the integer key %s and the string key of the same text would be the same member", key_str(keys[k].s ? &keys[k - 1] : &keys[k]));
      free(keys);
      return NULL;
    }
  return keys;
}

/* The table at idx (absolute). */
static cJSON *encode_table(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  if (depth > JSON_MAX_DEPTH)
    return enc_fail(e, "tables nested deeper than %s levels, the JSON nesting limit (a cycle?)", JSON_STR(JSON_MAX_DEPTH)), NULL;
  if (!lua_checkstack(L, 6)) return enc_fail(e, "%s", "out of Lua stack"), NULL;
  lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
  size_t nkeys = 0, nstr = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    nkeys++;
    if (lua_type(L, -2) == LUA_TSTRING) nstr++;
    lua_pop(L, 1);
  }
  if (len > 0 && nkeys == (size_t)len && nstr == 0) return encode_array(e, idx, len, depth); /* only 1..len */
  cJSON *obj = cJSON_CreateObject();
  if (!obj) return enc_fail(e, "%s", "out of memory"), NULL;
  if (nkeys == 0) return obj;
  key_ref *keys = object_keys(e, idx, nkeys);
  if (!keys) {
    cJSON_Delete(obj);
    return NULL;
  }
  size_t k;
  for (k = 0; k < nkeys; k++) {
    size_t saved;
    const char *ks = key_str(&keys[k]);
    path_push(e, &saved, ks, keys[k].n, 0);
    if (keys[k].s && check_string(e, ks, keys[k].n, "the key") != 0) break;
    if (keys[k].s) lua_pushlstring(L, ks, keys[k].n);
    else lua_pushinteger(L, keys[k].i);
    lua_rawget(L, idx);
    cJSON *item = encode_value(e, lua_gettop(L), depth + 1);
    lua_pop(L, 1);
    if (!item) break;
    e->path[saved] = '\0';
    if (!cJSON_AddItemToObject(obj, ks, item)) {
      cJSON_Delete(item);
      enc_fail(e, "%s", "out of memory");
      break;
    }
  }
  int ok = k == nkeys;
  free(keys);
  if (!ok) {
    cJSON_Delete(obj);
    return NULL;
  }
  return obj;
}

static cJSON *encode_value(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  cJSON *item = NULL;
  switch (lua_type(L, idx)) {
  case LUA_TNIL: item = cJSON_CreateNull(); break;
  case LUA_TBOOLEAN: item = cJSON_CreateBool(lua_toboolean(L, idx)); break;
  case LUA_TNUMBER: {
    char buf[64];
    if (number_text(e, idx, buf, sizeof buf) != 0) return NULL;
    item = cJSON_CreateRaw(buf);
    break;
  }
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    if (check_string(e, s, n, "a string") != 0) return NULL;
    item = cJSON_CreateString(s);
    break;
  }
  case LUA_TTABLE: return encode_table(e, idx, depth);
  default: return enc_fail(e, "a %s has no JSON form", luaL_typename(L, idx)), NULL;
  }
  if (!item) enc_fail(e, "%s", "out of memory");
  return item;
}

/* opts at 2 (nil or a table) into e and *pretty; raises on an unknown or ill-typed option. */
static void encode_opts(lua_State *L, enc *e, int *pretty) {
  *pretty = 0;
  if (lua_isnoneornil(L, 2)) return;
  if (!lua_istable(L, 2)) luaL_error(L, "json_encode: opts must be a table, got %s", luaL_typename(L, 2));
  static const char *const known[] = {"pretty", "nonfinite", "int_keys", NULL};
  l_check_opts(L, 2, "json_encode", known);
  lua_pushnil(L);
  while (lua_next(L, 2)) {
    const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
    if (strcmp(k, "pretty") == 0 || strcmp(k, "int_keys") == 0) {
      if (!lua_isboolean(L, -1)) luaL_error(L, "json_encode: opts.%s must be a boolean, got %s", k, luaL_typename(L, -1));
      *(k[0] == 'p' ? pretty : &e->int_keys) = lua_toboolean(L, -1);
    } else if (strcmp(k, "nonfinite") == 0) {
      const char *v = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
      if (strcmp(v, "null") != 0 && strcmp(v, "error") != 0)
        luaL_error(L, "json_encode: opts.nonfinite must be 'null' or 'error', got %s", luaL_tolstring(L, -1, NULL));
      e->nonfinite_error = v[0] == 'e';
    }
    lua_pop(L, 1);
  }
}

static int l_json_encode(lua_State *L) {
  enc e;
  memset(&e, 0, sizeof e);
  e.L = L;
  int pretty;
  encode_opts(L, &e, &pretty);
  lua_settop(L, 1);
  cJSON *root = encode_value(&e, 1, 1);
  if (!root) return luaL_error(L, "%s", e.err);
  char *text = pretty ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
  cJSON_Delete(root);
  if (!text) return luaL_error(L, "json_encode: out of memory");
  lua_pushstring(L, text);
  cJSON_free(text);
  return 1;
}

/* ---- decoding ---- */

typedef struct tok {
  size_t start, len;
  char kind; /* 's' string (len unused), 'n' number */
  char nul;  /* a string with a \u0000 escape */
} tok;

typedef struct dec_box {
  cJSON *root;
  tok *toks;
  size_t ntok, next;
  const char *pre; /* "json_decode: " or "json_decode: <what>: " (anchored on the stack) */
} dec_box;

#define DEC_BOX_MT "v100.io.json_box"

static int dec_box_gc(lua_State *L) {
  dec_box *b = luaL_checkudata(L, 1, DEC_BOX_MT);
  cJSON_Delete(b->root);
  free(b->toks);
  b->root = NULL;
  b->toks = NULL;
  return 0;
}

/* The number and string tokens of already-validated JSON, in document order. */
static int scan_tokens(const char *s, size_t n, dec_box *b) {
  size_t cap = 0;
  for (size_t i = 0; i < n;) {
    char c = s[i];
    tok t = {i, 0, 0, 0};
    if (c == '"') {
      for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\') {
          if (i + 5 < n && memcmp(s + i + 1, "u0000", 5) == 0) t.nul = 1;
          i++;
        }
      i++;
      t.kind = 's';
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      while (i < n && strchr("+-0123456789.eE", s[i]) && s[i]) i++;
      t.kind = 'n';
      t.len = i - t.start;
    } else {
      i++;
      continue;
    }
    if (b->ntok == cap) {
      cap = cap ? 2 * cap : 64;
      tok *nt = realloc(b->toks, cap * sizeof *nt);
      if (!nt) return 0;
      b->toks = nt;
    }
    b->toks[b->ntok++] = t;
  }
  return 1;
}

static const tok *next_tok(lua_State *L, dec_box *b, char kind) {
  if (b->next >= b->ntok || b->toks[b->next].kind != kind)
    luaL_error(L, "json_decode: internal error: the token scan and cJSON's tree disagree");
  return &b->toks[b->next++];
}

static void push_string_tok(lua_State *L, dec_box *b, const char *value) {
  const tok *t = next_tok(L, b, 's');
  if (t->nul) luaL_error(L, "%sthe string at byte %d contains \\u0000 (NUL bytes are not supported)", b->pre, (int)t->start + 1);
  lua_pushstring(L, value);
}

static void decode_push(lua_State *L, dec_box *b, const char *text, const cJSON *item) {
  luaL_checkstack(L, 4, "json_decode: nested too deeply");
  if (cJSON_IsNull(item)) lua_pushnil(L);
  else if (cJSON_IsBool(item)) lua_pushboolean(L, cJSON_IsTrue(item));
  else if (cJSON_IsNumber(item)) {
    const tok *t = next_tok(L, b, 'n');
    char small[64];
    char *buf = t->len < sizeof small ? small : malloc(t->len + 1);
    if (!buf) luaL_error(L, "json_decode: out of memory");
    memcpy(buf, text + t->start, t->len);
    buf[t->len] = '\0';
    size_t used = lua_stringtonumber(L, buf); /* Lua's own numeral rules: integer or float */
    if (buf != small) free(buf);
    if (used != t->len + 1) luaL_error(L, "json_decode: internal error: number at byte %d", (int)t->start + 1);
  } else if (cJSON_IsString(item)) push_string_tok(L, b, item->valuestring);
  else if (cJSON_IsArray(item)) {
    lua_createtable(L, cJSON_GetArraySize(item), 0);
    lua_Integer i = 1;
    for (const cJSON *c = item->child; c; c = c->next, i++) {
      decode_push(L, b, text, c);
      lua_rawseti(L, -2, i);
    }
  } else if (cJSON_IsObject(item)) {
    const cJSON *c = item->child;
    if (c && !c->next && cJSON_IsString(c) && strcmp(c->string, "__int64__") == 0) { /* the old checkpoint form */
      next_tok(L, b, 's');
      next_tok(L, b, 's');
      if (lua_stringtonumber(L, c->valuestring) == 0 || !lua_isinteger(L, -1))
        luaL_error(L, "%s{\"__int64__\": \"%s\"} is not a 64-bit integer", b->pre, c->valuestring);
      return;
    }
    lua_newtable(L);
    for (const cJSON *c = item->child; c; c = c->next) {
      push_string_tok(L, b, c->string);
      decode_push(L, b, text, c);
      lua_rawset(L, -3);
    }
  } else
    luaL_error(L, "json_decode: internal error: unexpected cJSON item type %d", item->type);
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Before cJSON parses: a raw NUL byte (cJSON would end the string there and return what came
 * before) and nesting past JSON_MAX_DEPTH (cJSON fails without saying why) are refused here,
 * naming the byte. Brackets inside strings do not count. Raises, or returns. */
static void check_input(lua_State *L, const char *pre, const char *s, size_t n) {
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c == '\0')
      luaL_error(L, "%sa NUL byte at byte %d (NUL bytes are not supported, raw or as \\u0000)", pre, (int)i + 1);
    if (in_str) {
      if (c == '\\') {
        if (i + 1 < n && s[i + 1] == '\0') continue; /* the NUL is reported on the next round */
        i++;
      } else if (c == '"') {
        in_str = 0;
      }
    } else if (c == '"') {
      in_str = 1;
    } else if (c == '[' || c == '{') {
      if (++depth > JSON_MAX_DEPTH)
        luaL_error(L, "%snested deeper than %d levels, the JSON nesting limit, at byte %d", pre, JSON_MAX_DEPTH,
                   (int)i + 1);
    } else if ((c == ']' || c == '}') && depth > 0) {
      depth--;
    }
  }
}

static int l_json_decode(lua_State *L) {
  const char *what = luaL_optstring(L, 2, NULL);
  lua_settop(L, 1);
  const char *pre = what ? lua_pushfstring(L, "json_decode: %s: ", what) : "json_decode: ";
  if (lua_type(L, 1) != LUA_TSTRING) return luaL_error(L, "%sexpects a string, got %s", pre, luaL_typename(L, 1));
  size_t n;
  const char *s = lua_tolstring(L, 1, &n);
  size_t valid = vl_utf8_valid_prefix((const unsigned char *)s, n);
  if (valid != n) return luaL_error(L, "%sinvalid UTF-8 at byte %d", pre, (int)valid + 1);
  size_t first = 0;
  while (first < n && is_ws(s[first])) first++;
  if (first == n) return luaL_error(L, "%sthe input is empty", pre);
  check_input(L, pre, s, n);
  dec_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  memset(b, 0, sizeof *b);
  b->pre = pre;
  luaL_setmetatable(L, DEC_BOX_MT);
  const char *end = NULL;
  b->root = cJSON_ParseWithLengthOpts(s, n, &end, 0);
  if (!b->root) {
    size_t at = end && end >= s && end <= s + n ? (size_t)(end - s) : 0;
    char near[40];
    vl_escape_bytes(s + at, n - at > 20 ? 20 : n - at, near, sizeof near);
    return luaL_error(L, "%sinvalid JSON at byte %d (near \"%s\")", pre, (int)at + 1, near);
  }
  size_t rest = (size_t)(end - s);
  while (rest < n && is_ws(s[rest])) rest++;
  if (rest < n) return luaL_error(L, "%sunexpected text after the JSON value at byte %d", pre, (int)rest + 1);
  if (!scan_tokens(s, n, b)) return luaL_error(L, "%sout of memory", pre);
  decode_push(L, b, s, b->root);
  cJSON_Delete(b->root);
  free(b->toks);
  b->root = NULL;
  b->toks = NULL;
  return 1;
}

static const luaL_Reg json_funcs[] = {
    {"json_encode", l_json_encode},
    {"json_decode", l_json_decode},
    {NULL, NULL},
};

void l_io_register_json(lua_State *L) {
  if (luaL_newmetatable(L, DEC_BOX_MT)) {
    lua_pushcfunction(L, dec_box_gc);
    lua_setfield(L, -2, "__gc");
  }
  lua_pop(L, 1);
  luaL_setfuncs(L, json_funcs, 0);
}
