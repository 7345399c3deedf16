/* ext/text/wordpiece.c: see wordpiece.h. The vocab is an open-addressing hash table over
 * the token bytes; the text pipeline works on one codepoint array per segment between special
 * tokens, in the order of HF's BertNormalizer, BertPreTokenizer and WordPiece model. */
#define _POSIX_C_SOURCE 200809L
#include "ext/text/wordpiece.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

enum { SP_UNK, SP_CLS, SP_SEP, SP_PAD, SP_MASK, SP_N };
static const char *const special_names[SP_N] = {"[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"};

struct vl_wordpiece {
  vl_wordpiece_opts opts;
  bool strip;
  char **tokens; /* id -> token */
  size_t *token_len;
  int64_t ntokens;
  int64_t *slots; /* hash table of ids, -1 empty */
  size_t nslots;  /* a power of two */
  int64_t special[SP_N]; /* -1 where the vocab has none */
};

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

int64_t vl_wordpiece_token_to_id(const vl_wordpiece *tok, const char *s, size_t len) {
  size_t mask = tok->nslots - 1;
  for (size_t i = hash_bytes(s, len) & mask;; i = (i + 1) & mask) {
    int64_t id = tok->slots[i];
    if (id < 0) return -1;
    if (tok->token_len[id] == len && memcmp(tok->tokens[id], s, len) == 0) return id;
  }
}

/* Inserts id; a token already present takes the new (later) id, as HF's dict does. */
static void insert(vl_wordpiece *tok, int64_t id) {
  size_t mask = tok->nslots - 1, len = tok->token_len[id];
  for (size_t i = hash_bytes(tok->tokens[id], len) & mask;; i = (i + 1) & mask) {
    int64_t o = tok->slots[i];
    if (o < 0 || (tok->token_len[o] == len && memcmp(tok->tokens[o], tok->tokens[id], len) == 0)) {
      tok->slots[i] = id;
      return;
    }
  }
}

vl_wordpiece_opts vl_wordpiece_default_opts(void) {
  vl_wordpiece_opts o = {.lower = true, .strip_accents = -1, .max_chars = 100};
  return o;
}

void vl_wordpiece_free(vl_wordpiece *tok) {
  if (!tok) return;
  for (int64_t i = 0; i < tok->ntokens; i++) free(tok->tokens[i]);
  free(tok->tokens);
  free(tok->token_len);
  free(tok->slots);
  free(tok);
}

int64_t vl_wordpiece_vocab_size(const vl_wordpiece *tok) { return tok->ntokens; }

const char *vl_wordpiece_id_to_token(const vl_wordpiece *tok, int64_t id) {
  return id >= 0 && id < tok->ntokens ? tok->tokens[id] : NULL;
}

vl_status vl_wordpiece_load(const char *vocab_path, const vl_wordpiece_opts *opts, vl_wordpiece **out) {
  vl_wordpiece_opts o = opts ? *opts : vl_wordpiece_default_opts();
  if (o.max_chars < 1 || o.strip_accents < -1 || o.strip_accents > 1)
    return vl_fail(VL_EINVAL, "WordPiece: max_chars %d must be >= 1 and strip_accents %d one of -1, 0, 1",
                   o.max_chars, o.strip_accents);
  FILE *f = fopen(vocab_path, "rb");
  if (!f) return vl_fail(VL_EIO, "WordPiece: cannot open the vocab '%s': %s", vocab_path, strerror(errno));
  vl_wordpiece *tok = calloc(1, sizeof *tok);
  if (!tok) {
    fclose(f);
    return vl_fail(VL_EOOM, "WordPiece: out of memory");
  }
  tok->opts = o;
  tok->strip = o.strip_accents < 0 ? o.lower : o.strip_accents == 1;
  size_t cap = 0;
  char *line = NULL;
  size_t linecap = 0;
  ssize_t got;
  vl_status s = VL_OK;
  while ((got = getline(&line, &linecap, f)) >= 0) {
    size_t n = (size_t)got;
    /* HF strips the line end only ("\n"; "\r\n" from files written on Windows as well). */
    if (n && line[n - 1] == '\n') n--;
    if (n && line[n - 1] == '\r') n--;
    if ((size_t)tok->ntokens == cap) {
      cap = cap ? 2 * cap : 1024;
      char **t = realloc(tok->tokens, cap * sizeof *t);
      if (t) tok->tokens = t;
      size_t *l = realloc(tok->token_len, cap * sizeof *l);
      if (l) tok->token_len = l;
      if (!t || !l) {
        s = vl_fail(VL_EOOM, "WordPiece: out of memory reading '%s'", vocab_path);
        break;
      }
    }
    char *copy = malloc(n + 1);
    if (!copy) {
      s = vl_fail(VL_EOOM, "WordPiece: out of memory reading '%s'", vocab_path);
      break;
    }
    memcpy(copy, line, n);
    copy[n] = 0;
    tok->tokens[tok->ntokens] = copy;
    tok->token_len[tok->ntokens++] = n;
  }
  if (s == VL_OK && ferror(f)) s = vl_fail(VL_EIO, "WordPiece: error reading the vocab '%s'", vocab_path);
  free(line);
  fclose(f);
  if (s == VL_OK && tok->ntokens == 0) s = vl_fail(VL_EINVAL, "WordPiece: the vocab '%s' is empty", vocab_path);
  if (s == VL_OK) {
    tok->nslots = 16;
    while (tok->nslots < 2 * (size_t)tok->ntokens) tok->nslots *= 2;
    tok->slots = malloc(tok->nslots * sizeof *tok->slots);
    if (!tok->slots) s = vl_fail(VL_EOOM, "WordPiece: out of memory");
  }
  if (s == VL_OK) {
    memset(tok->slots, 0xff, tok->nslots * sizeof *tok->slots); /* all -1 */
    for (int64_t i = 0; i < tok->ntokens; i++) insert(tok, i);
    for (int k = 0; k < SP_N; k++)
      tok->special[k] = vl_wordpiece_token_to_id(tok, special_names[k], strlen(special_names[k]));
    if (tok->special[SP_UNK] < 0)
      s = vl_fail(VL_EINVAL, "WordPiece: the vocab '%s' has no [UNK] token", vocab_path);
  }
  if (s != VL_OK) {
    vl_wordpiece_free(tok);
    return s;
  }
  *out = tok;
  return VL_OK;
}

/* ---- growable buffers ---- */

typedef struct ibuf {
  int64_t *v;
  size_t n, cap;
} ibuf;

static bool ipush(ibuf *b, int64_t x) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 64;
    int64_t *v = realloc(b->v, cap * sizeof *v);
    if (!v) return false;
    b->v = v;
    b->cap = cap;
  }
  b->v[b->n++] = x;
  return true;
}

typedef struct cbuf {
  int32_t *v;
  size_t n, cap;
} cbuf;

static bool cpush(cbuf *b, int32_t c) {
  if (b->n == b->cap) {
    size_t cap = b->cap ? 2 * b->cap : 256;
    int32_t *v = realloc(b->v, cap * sizeof *v);
    if (!v) return false;
    b->v = v;
    b->cap = cap;
  }
  b->v[b->n++] = c;
  return true;
}

/* ---- character classes, as the tokenizers crate defines them ---- */

/* Rust's char::is_whitespace: the White_Space property. */
static bool is_ws(int32_t c) {
  return (c >= 0x09 && c <= 0x0d) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

/* The categories Cc, Cf, Co and Cs, which cleanup drops (the tokenizers crate's is_other; not
 * Cn: an unassigned codepoint or noncharacter stays and makes its word [UNK]); tab, LF and CR
 * count as white space instead. */
static bool is_control(int32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (utf8proc_category(c)) {
  case UTF8PROC_CATEGORY_CC:
  case UTF8PROC_CATEGORY_CF:
  case UTF8PROC_CATEGORY_CO:
  case UTF8PROC_CATEGORY_CS: return true;
  default: return false;
  }
}

static bool is_punct(int32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (utf8proc_category(c)) {
  case UTF8PROC_CATEGORY_PC:
  case UTF8PROC_CATEGORY_PD:
  case UTF8PROC_CATEGORY_PS:
  case UTF8PROC_CATEGORY_PE:
  case UTF8PROC_CATEGORY_PI:
  case UTF8PROC_CATEGORY_PF:
  case UTF8PROC_CATEGORY_PO: return true;
  default: return false;
  }
}

/* The CJK Unified Ideographs blocks of BERT's _is_chinese_char (not Hangul or kana). */
static bool is_cjk(int32_t c) {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x20000 && c <= 0x2a6df) ||
         (c >= 0x2a700 && c <= 0x2b73f) || (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b820 && c <= 0x2ceaf) ||
         (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

/* ---- the pipeline ---- */

/* Normalizes the codepoints of one segment into out (BertNormalizer). */
static bool normalize(bool lower, bool strip, const int32_t *cp, size_t n, cbuf *out) {
  for (size_t i = 0; i < n; i++) {
    int32_t c = cp[i];
    if (c == 0 || c == 0xfffd || is_control(c)) continue;
    if (is_ws(c)) c = ' ';
    int32_t dec[32];
    utf8proc_ssize_t nd = 1;
    dec[0] = c;
    if (strip) {
      int last = 0;
      nd = utf8proc_decompose_char(c, dec, 32, UTF8PROC_DECOMPOSE, &last);
      if (nd < 0 || nd > 32) {
        dec[0] = c;
        nd = 1;
      }
    }
    bool cjk = is_cjk(c);
    if (cjk && !cpush(out, ' ')) return false;
    for (utf8proc_ssize_t k = 0; k < nd; k++) {
      int32_t d = dec[k];
      if (strip && utf8proc_category(d) == UTF8PROC_CATEGORY_MN) continue;
      if (lower) {
        if (d == 0x130) { /* the one unconditional multi-character lower case: i + combining dot */
          if (!cpush(out, 'i') || !cpush(out, 0x307)) return false;
          continue;
        }
        d = utf8proc_tolower(d);
      }
      if (!cpush(out, d)) return false;
    }
    if (cjk && !cpush(out, ' ')) return false;
  }
  return true;
}

/* Greedy longest-match-first pieces of one word (codepoints w[0..n)). */
static bool word_pieces(const vl_wordpiece *tok, const int32_t *w, size_t n, ibuf *ids) {
  if (n > (size_t)tok->opts.max_chars) return ipush(ids, tok->special[SP_UNK]);
  /* The word's UTF-8 and each character's byte offset in it; a continuation is looked up as
   * "##" + its bytes, copied into piece. */
  size_t *off = malloc((n + 1) * sizeof *off);
  unsigned char *buf = malloc(4 * n), *piece = malloc(2 + 4 * n);
  if (!off || !buf || !piece) {
    free(off);
    free(buf);
    free(piece);
    return false;
  }
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    off[i] = len;
    len += (size_t)utf8proc_encode_char(w[i], buf + len);
  }
  off[n] = len;
  piece[0] = piece[1] = '#';
  size_t first = ids->n, start = 0;
  bool ok = true, bad = false;
  while (start < n) {
    int64_t found = -1;
    size_t end = n;
    for (; end > start; end--) {
      size_t l = off[end] - off[start];
      if (start == 0) {
        found = vl_wordpiece_token_to_id(tok, (const char *)buf, l);
      } else {
        memcpy(piece + 2, buf + off[start], l);
        found = vl_wordpiece_token_to_id(tok, (const char *)piece, l + 2);
      }
      if (found >= 0) break;
    }
    if (found < 0) {
      bad = true;
      break;
    }
    if (!ipush(ids, found)) {
      ok = false;
      break;
    }
    start = end;
  }
  free(off);
  free(buf);
  free(piece);
  if (!ok) return false;
  if (bad) {
    ids->n = first;
    return ipush(ids, tok->special[SP_UNK]);
  }
  return true;
}

/* Splits normalized text on white space and around punctuation (BertPreTokenizer), then pieces. */
static bool pretokenize(const vl_wordpiece *tok, const cbuf *t, ibuf *ids) {
  size_t i = 0;
  while (i < t->n) {
    if (is_ws(t->v[i])) {
      i++;
      continue;
    }
    if (is_punct(t->v[i])) {
      if (!word_pieces(tok, t->v + i, 1, ids)) return false;
      i++;
      continue;
    }
    size_t j = i;
    while (j < t->n && !is_ws(t->v[j]) && !is_punct(t->v[j])) j++;
    if (!word_pieces(tok, t->v + i, j - i, ids)) return false;
    i = j;
  }
  return true;
}

/* The special token of the vocab that text[at..] starts with, or -1. */
static int special_at(const vl_wordpiece *tok, const char *text, size_t len, size_t at, size_t *slen) {
  if (text[at] != '[') return -1;
  for (int k = 0; k < SP_N; k++) {
    size_t l = strlen(special_names[k]);
    if (tok->special[k] >= 0 && l <= len - at && memcmp(text + at, special_names[k], l) == 0) {
      *slen = l;
      return k;
    }
  }
  return -1;
}

static vl_status tokenize_into(const vl_wordpiece *tok, const char *text, size_t len, ibuf *ids) {
  cbuf cp = {0}, norm = {0};
  vl_status s = VL_OK;
  size_t at = 0;
  while (at <= len && s == VL_OK) {
    /* One segment: up to the next special token or the end. */
    size_t slen = 0;
    int sp = -1;
    cp.n = 0;
    while (at < len) {
      if ((sp = special_at(tok, text, len, at, &slen)) >= 0) break;
      int32_t c;
      utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + at, (utf8proc_ssize_t)(len - at), &c);
      if (k < 0) {
        s = vl_fail(VL_EINVAL, "WordPiece: the text is not valid UTF-8 (byte %zu, 0x%02x)", at,
                    (unsigned char)text[at]);
        break;
      }
      if (!cpush(&cp, c)) {
        s = vl_fail(VL_EOOM, "WordPiece: out of memory");
        break;
      }
      at += (size_t)k;
    }
    if (s != VL_OK) break;
    norm.n = 0;
    if (!normalize(tok->opts.lower, tok->strip, cp.v, cp.n, &norm) || !pretokenize(tok, &norm, ids)) {
      s = vl_fail(VL_EOOM, "WordPiece: out of memory");
      break;
    }
    if (sp < 0) break;
    if (!ipush(ids, tok->special[sp])) s = vl_fail(VL_EOOM, "WordPiece: out of memory");
    at += slen;
  }
  free(cp.v);
  free(norm.v);
  return s;
}

vl_status vl_wordpiece_basic_words(const vl_wordpiece_opts *opts, const char *text, size_t len,
                                   vl_wordpiece_word_fn fn, void *ctx, size_t *bad_offset) {
  vl_wordpiece_opts o = opts ? *opts : vl_wordpiece_default_opts();
  bool strip = o.strip_accents < 0 ? o.lower : o.strip_accents == 1;
  cbuf cp = {0}, norm = {0};
  unsigned char *w = NULL;
  size_t wcap = 0;
  vl_status s = VL_OK;
  for (size_t at = 0; at < len;) {
    int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + at, (utf8proc_ssize_t)(len - at), &c);
    if (k < 0) {
      if (bad_offset) *bad_offset = at;
      s = vl_fail(VL_EINVAL, "WordPiece: the text is not valid UTF-8 (byte %zu, 0x%02x)", at, (unsigned char)text[at]);
      goto done;
    }
    if (!cpush(&cp, c)) goto oom;
    at += (size_t)k;
  }
  if (!normalize(o.lower, strip, cp.v, cp.n, &norm)) goto oom;
  /* The words of pretokenize(): runs of non-space, non-punctuation characters, and each
   * punctuation character alone. */
  for (size_t i = 0; i < norm.n;) {
    if (is_ws(norm.v[i])) {
      i++;
      continue;
    }
    size_t j = i + 1;
    if (!is_punct(norm.v[i]))
      while (j < norm.n && !is_ws(norm.v[j]) && !is_punct(norm.v[j])) j++;
    if (4 * (j - i) > wcap) {
      size_t cap = 4 * (j - i) + 64;
      unsigned char *nw = realloc(w, cap);
      if (!nw) goto oom;
      w = nw;
      wcap = cap;
    }
    size_t n = 0;
    for (size_t q = i; q < j; q++) n += (size_t)utf8proc_encode_char(norm.v[q], w + n);
    if ((s = fn(ctx, (const char *)w, n)) != VL_OK) goto done;
    i = j;
  }
  goto done;
oom:
  s = vl_fail(VL_EOOM, "WordPiece: out of memory");
done:
  free(cp.v);
  free(norm.v);
  free(w);
  return s;
}

vl_status vl_wordpiece_tokenize(const vl_wordpiece *tok, const char *text, size_t len, int64_t **ids, size_t *n) {
  ibuf b = {0};
  vl_status s = tokenize_into(tok, text, len, &b);
  if (s != VL_OK) {
    free(b.v);
    return s;
  }
  if (!b.v && !(b.v = malloc(sizeof *b.v))) return vl_fail(VL_EOOM, "WordPiece: out of memory");
  *ids = b.v;
  *n = b.n;
  return VL_OK;
}

void vl_wordpiece_encoding_free(vl_wordpiece_encoding *e) {
  if (!e) return;
  free(e->ids);
  free(e->type_ids);
  free(e->mask);
  e->ids = e->type_ids = e->mask = NULL;
  e->n = 0;
}

static vl_status need_special(const vl_wordpiece *tok, int k, const char *why) {
  if (tok->special[k] < 0)
    return vl_fail(VL_EINVAL, "WordPiece.encode: %s needs %s, which the vocab does not have", why, special_names[k]);
  return VL_OK;
}

vl_status vl_wordpiece_encode(const vl_wordpiece *tok, const char *a, size_t alen, const char *b, size_t blen,
                              const vl_wordpiece_encode_opts *opts, vl_wordpiece_encoding *out) {
  bool pair = b != NULL;
  int64_t max = opts->max_length;
  if (max < 0) return vl_fail(VL_EINVAL, "WordPiece.encode: max_length %lld must be >= 0", (long long)max);
  if (opts->pad && max == 0) return vl_fail(VL_EINVAL, "WordPiece.encode: padding to max_length needs a max_length");
  if (opts->add_special) {
    VL_TRY(need_special(tok, SP_CLS, "add_special"));
    VL_TRY(need_special(tok, SP_SEP, "add_special"));
  }
  if (opts->pad) VL_TRY(need_special(tok, SP_PAD, "padding"));
  int64_t added = opts->add_special ? (pair ? 3 : 2) : 0;
  if (opts->truncation && max > 0 && max < added)
    return vl_fail(VL_EINVAL, "WordPiece.encode: max_length %lld leaves no room for the %lld special tokens",
                   (long long)max, (long long)added);
  ibuf ta = {0}, tb = {0};
  vl_status s = tokenize_into(tok, a, alen, &ta);
  if (s == VL_OK && pair) s = tokenize_into(tok, b, blen, &tb);
  if (s != VL_OK) goto done;
  if (opts->truncation && max > 0) {
    size_t target = (size_t)(max - added), n1 = ta.n, n2 = tb.n;
    if (!pair) {
      if (n1 > target) n1 = target;
    } else if (n1 + n2 > target) {
      /* The tokenizers crate's longest_first: the shorter one is kept whole when the longer can
       * take the rest; otherwise the first gets half and the second the other half (and the odd one). */
      bool swap = n1 > n2;
      size_t s1 = swap ? n2 : n1, s2;
      if (s1 > target) s2 = s1;
      else s2 = s1 > target - s1 ? s1 : target - s1;
      if (s1 + s2 > target) {
        s1 = target / 2;
        s2 = s1 + target % 2;
      }
      if (swap) {
        size_t t = s1;
        s1 = s2;
        s2 = t;
      }
      if (n1 > s1) n1 = s1;
      if (n2 > s2) n2 = s2;
    }
    ta.n = n1;
    tb.n = n2;
  }
  size_t n = ta.n + tb.n + (size_t)added;
  size_t total = opts->pad && (size_t)max > n ? (size_t)max : n;
  vl_wordpiece_encoding e = {malloc((total ? total : 1) * sizeof(int64_t)), malloc((total ? total : 1) * sizeof(int64_t)),
                             malloc((total ? total : 1) * sizeof(int64_t)), total};
  if (!e.ids || !e.type_ids || !e.mask) {
    vl_wordpiece_encoding_free(&e);
    s = vl_fail(VL_EOOM, "WordPiece.encode: out of memory");
    goto done;
  }
  size_t k = 0;
#define PUT(id, type)        \
  do {                       \
    e.ids[k] = (id);         \
    e.type_ids[k] = (type);  \
    e.mask[k++] = 1;         \
  } while (0)
  if (opts->add_special) PUT(tok->special[SP_CLS], 0);
  for (size_t i = 0; i < ta.n; i++) PUT(ta.v[i], 0);
  if (opts->add_special) PUT(tok->special[SP_SEP], 0);
  for (size_t i = 0; i < tb.n; i++) PUT(tb.v[i], 1);
  if (opts->add_special && pair) PUT(tok->special[SP_SEP], 1);
#undef PUT
  for (; k < total; k++) {
    e.ids[k] = tok->special[SP_PAD];
    e.type_ids[k] = 0;
    e.mask[k] = 0;
  }
  *out = e;
done:
  free(ta.v);
  free(tb.v);
  return s;
}

static bool is_special_id(const vl_wordpiece *tok, int64_t id) {
  for (int k = 0; k < SP_N; k++)
    if (tok->special[k] == id) return true;
  return false;
}

/* The tokenizers crate's WordPiece decoder cleanup (on in BERT's tokenizer.json, and applied by
 * the decoder whatever transformers' clean_up_tokenization_spaces says): these replacements, in
 * this order, on each token together with the space put before it. None lengthens the text. */
static const char *const cleanup_from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " do not", " 's", " 've", " 're"};
static const char *const cleanup_to[] = {".", "?", "!", ",", "'", "n't", "'m", " don't", "'s", "'ve", "'re"};

/* Replaces every `from` in the NUL-terminated s by `to` (not longer), in place. */
static void replace_all(char *s, const char *from, const char *to) {
  size_t fl = strlen(from), tl = strlen(to);
  char *r = s, *w = s;
  while (*r) {
    if (strncmp(r, from, fl) == 0) {
      memmove(w, to, tl);
      w += tl;
      r += fl;
    } else {
      *w++ = *r++;
    }
  }
  *w = 0;
}

vl_status vl_wordpiece_decode(const vl_wordpiece *tok, const int64_t *ids, size_t n, bool skip_special, char **text) {
  size_t len = 1, longest = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= tok->ntokens)
      return vl_fail(VL_EINVAL, "WordPiece.decode: id %lld (at %zu) is not in the vocab of %lld tokens",
                     (long long)ids[i], i, (long long)tok->ntokens);
    len += tok->token_len[ids[i]] + 1;
    if (tok->token_len[ids[i]] > longest) longest = tok->token_len[ids[i]];
  }
  char *t = malloc(len), *piece = malloc(longest + 2), *p = t;
  if (!t || !piece) {
    free(t);
    free(piece);
    return vl_fail(VL_EOOM, "WordPiece.decode: out of memory");
  }
  bool any = false;
  for (size_t i = 0; i < n; i++) {
    if (skip_special && is_special_id(tok, ids[i])) continue;
    const char *s = tok->tokens[ids[i]];
    size_t l = tok->token_len[ids[i]];
    /* "##x" glues to what came before; every other token but the first gets a space before it. */
    char *q = piece;
    if (any && l >= 2 && s[0] == '#' && s[1] == '#') {
      s += 2;
      l -= 2;
    } else if (any) {
      *q++ = ' ';
    }
    memcpy(q, s, l);
    q[l] = 0;
    for (size_t k = 0; k < VL_COUNTOF(cleanup_from); k++) replace_all(piece, cleanup_from[k], cleanup_to[k]);
    size_t pl = strlen(piece);
    memcpy(p, piece, pl);
    p += pl;
    any = true;
  }
  *p = 0;
  free(piece);
  *text = t;
  return VL_OK;
}
