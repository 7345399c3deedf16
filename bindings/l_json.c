/* bindings/l_json.c: JSON for logs and configs through cJSON, in v100.io:
 *   v100.io.json_encode(value) -> string   one line, no spaces; object keys sorted (the same
 *                                          table always gives the same text)
 *   v100.io.json_decode(string) -> value
 * Values: nil/null, booleans, numbers, strings, and tables nested up to 200 levels: a table whose
 * keys are exactly 1..n (n >= 1) is an array, one with string keys only an object, an empty one
 * `{}`. Integers and floats stay apart as in Lua: an integer prints as digits and a float always
 * with a '.' or an exponent (1.0, not 1), shortest text that reads back to the same double; when
 * decoding, a number is converted exactly as Lua converts a numeral ("3" -> 3, "3.0" -> 3.0, an
 * integer beyond 64 bits -> float). NaN and +-inf have no JSON form and encode as null (a NaN
 * loss still gives a valid line). null decodes to nil (an absent member; a hole in an array).
 * Strings must be valid UTF-8 without NUL bytes, either way (C strings would cut them).
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
#include "runtime/io/file_io.h"

#define JSON_MAX_DEPTH 200

/* ---- encoding ---- */

typedef struct enc {
  lua_State *L;
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

static void number_text(lua_State *L, int idx, char *buf, size_t cap) {
  if (lua_isinteger(L, idx)) {
    snprintf(buf, cap, "%lld", (long long)lua_tointeger(L, idx));
    return;
  }
  double v = lua_tonumber(L, idx);
  if (!isfinite(v)) {
    snprintf(buf, cap, "null");
    return;
  }
  for (int prec = 15; prec <= 17; prec++) { /* the shortest of these that reads back exactly */
    snprintf(buf, cap, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  if (!strpbrk(buf, ".eE")) strncat(buf, ".0", cap - strlen(buf) - 1);
}

static int check_string(enc *e, const char *s, size_t n, const char *what) {
  if (memchr(s, '\0', n)) return enc_fail(e, "%s contains a NUL byte", what);
  if (vl_utf8_valid_prefix((const unsigned char *)s, n) != n) return enc_fail(e, "%s is not valid UTF-8", what);
  return 0;
}

typedef struct key_ref {
  const char *s;
  size_t n;
} key_ref;

static int key_cmp(const void *a, const void *b) {
  const key_ref *x = a, *y = b;
  size_t n = x->n < y->n ? x->n : y->n;
  int c = memcmp(x->s, y->s, n);
  return c ? c : (x->n > y->n) - (x->n < y->n);
}

static cJSON *encode_value(enc *e, int idx, int depth);

/* The table at idx (absolute). */
static cJSON *encode_table(enc *e, int idx, int depth) {
  lua_State *L = e->L;
  if (depth > JSON_MAX_DEPTH) return enc_fail(e, "tables nested deeper than %s levels (a cycle?)", "200"), NULL;
  if (!lua_checkstack(L, 6)) return enc_fail(e, "%s", "out of Lua stack"), NULL;
  lua_Integer len = (lua_Integer)lua_rawlen(L, idx);
  size_t nkeys = 0, nstr = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    nkeys++;
    if (lua_type(L, -2) == LUA_TSTRING) nstr++;
    lua_pop(L, 1);
  }
  size_t saved;
  if (len > 0 && nkeys == (size_t)len && nstr == 0) { /* only 1..len: an array */
    cJSON *arr = cJSON_CreateArray();
    if (!arr) return enc_fail(e, "%s", "out of memory"), NULL;
    for (lua_Integer i = 1; i <= len; i++) {
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
  if (nstr != nkeys) {
    /* Name the first key that is not a string. */
    lua_pushnil(L);
    while (lua_next(L, idx)) {
      lua_pop(L, 1);
      if (lua_type(L, -1) != LUA_TSTRING) {
        const char *t = lua_isinteger(L, -1) ? "an integer key that does not make the table an array 1..n"
                                              : luaL_typename(L, -1);
        lua_pop(L, 1);
        return enc_fail(e, "a table key must be a string (object) or the table an array 1..n; found %s", t), NULL;
      }
    }
  }
  key_ref *keys = nkeys ? malloc(nkeys * sizeof *keys) : NULL;
  cJSON *obj = cJSON_CreateObject();
  if ((nkeys && !keys) || !obj) {
    free(keys);
    cJSON_Delete(obj);
    return enc_fail(e, "%s", "out of memory"), NULL;
  }
  size_t k = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) { /* the strings stay alive as keys of the table */
    lua_pop(L, 1);
    keys[k].s = lua_tolstring(L, -1, &keys[k].n);
    k++;
  }
  if (nkeys) qsort(keys, nkeys, sizeof *keys, key_cmp); /* qsort(NULL, 0) is undefined */
  for (k = 0; k < nkeys; k++) {
    path_push(e, &saved, keys[k].s, keys[k].n, 0);
    if (check_string(e, keys[k].s, keys[k].n, "the key") != 0) break;
    lua_pushlstring(L, keys[k].s, keys[k].n);
    lua_rawget(L, idx);
    cJSON *item = encode_value(e, lua_gettop(L), depth + 1);
    lua_pop(L, 1);
    if (!item) break;
    e->path[saved] = '\0';
    if (!cJSON_AddItemToObject(obj, keys[k].s, item)) {
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
    number_text(L, idx, buf, sizeof buf);
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

static int l_json_encode(lua_State *L) {
  lua_settop(L, 1);
  enc e;
  e.L = L;
  e.err[0] = e.path[0] = '\0';
  cJSON *root = encode_value(&e, 1, 1);
  if (!root) return luaL_error(L, "%s", e.err);
  char *text = cJSON_PrintUnformatted(root);
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
  if (t->nul) luaL_error(L, "json_decode: the string at byte %d contains \\u0000 (NUL bytes are not supported)", (int)t->start + 1);
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

static int l_json_decode(lua_State *L) {
  if (lua_type(L, 1) != LUA_TSTRING)
    return luaL_error(L, "json_decode: expects a string, got %s", luaL_typename(L, 1));
  size_t n;
  const char *s = lua_tolstring(L, 1, &n);
  size_t valid = vl_utf8_valid_prefix((const unsigned char *)s, n);
  if (valid != n) return luaL_error(L, "json_decode: invalid UTF-8 at byte %d", (int)valid + 1);
  size_t first = 0;
  while (first < n && is_ws(s[first])) first++;
  if (first == n) return luaL_error(L, "json_decode: the input is empty");
  dec_box *b = lua_newuserdatauv(L, sizeof *b, 0);
  memset(b, 0, sizeof *b);
  luaL_setmetatable(L, DEC_BOX_MT);
  const char *end = NULL;
  b->root = cJSON_ParseWithLengthOpts(s, n, &end, 0);
  if (!b->root) {
    size_t at = end && end >= s && end <= s + n ? (size_t)(end - s) : 0;
    char near[40];
    vl_escape_bytes(s + at, n - at > 20 ? 20 : n - at, near, sizeof near);
    return luaL_error(L, "json_decode: invalid JSON at byte %d (near \"%s\")", (int)at + 1, near);
  }
  size_t rest = (size_t)(end - s);
  while (rest < n && is_ws(s[rest])) rest++;
  if (rest < n) return luaL_error(L, "json_decode: unexpected text after the JSON value at byte %d", (int)rest + 1);
  if (!scan_tokens(s, n, b)) return luaL_error(L, "json_decode: out of memory");
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
