/* tests/c/test_wordpiece.c: the WordPiece core (ext/text/wordpiece.h) on a hand-written vocab:
 * greedy longest match with "##", [UNK] words, normalisation (cleanup, case, accents, CJK,
 * punctuation), special tokens in text, the longest_first truncation arithmetic of the tokenizers
 * crate, padding, decode with its cleanup, and the errors (outputs untouched). The exhaustive
 * comparison with Hugging Face is tests/lua/test_wordpiece.lua. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <utf8proc.h>

#include "ext/text/wordpiece.h"
#include "vl_test.h"

static char dir[256];

/* Writes a vocab file (lines joined by '\n') and returns its path (a static buffer per slot). */
static const char *write_vocab(const char *name, const char *const *lines, size_t n) {
  static char paths[4][300];
  static int slot;
  char *p = paths[slot++ % 4];
  snprintf(p, 300, "%s/%s", dir, name);
  FILE *f = fopen(p, "wb");
  for (size_t i = 0; f && i < n; i++) fprintf(f, "%s\n", lines[i]);
  if (f) fclose(f);
  return p;
}

static const char *const VOCAB[] = {
    "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",          /* 0-4 */
    "un", "##aff", "##able", "##a", "##ff",                 /* 5-9 */
    "hello", "world", ",", "!", ".", "cafe", "café", "东", "京", /* 10-18 */
    "a", "b", "c", "##b", "##c", "'", "s", "i", "##\xcc\x87", /* 19-27: ## + U+0307 at 27 */
    "dup", "x", "dup",                                       /* 28-30: dup twice, the later wins */
};
#define NV (sizeof VOCAB / sizeof VOCAB[0])

/* The ids of text under tok, as a string "5 6 7" for compact checks. */
static const char *ids_of(vl_wordpiece *tok, const char *text) {
  static char buf[512];
  int64_t *ids = NULL;
  size_t n = 0;
  if (vl_wordpiece_tokenize(tok, text, strlen(text), &ids, &n) != VL_OK) {
    snprintf(buf, sizeof buf, "error: %s", vl_errmsg());
    return buf;
  }
  buf[0] = 0;
  for (size_t i = 0; i < n; i++)
    snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%lld", i ? " " : "", (long long)ids[i]);
  free(ids);
  return buf;
}

#define CHECK_IDS(tok, text, want) \
  do { const char *got_ = ids_of(tok, text); CHECK(strcmp(got_, want) == 0, "%s: got '%s', want '%s'", #text, got_, want); } while (0)

static void test_pieces(void) {
  vl_wordpiece *tok = NULL;
  CHECK_OK(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), NULL, &tok));
  if (!tok) return;
  CHECK(vl_wordpiece_vocab_size(tok) == (int64_t)NV);
  CHECK(vl_wordpiece_token_to_id(tok, "dup", 3) == 30);
  CHECK(strcmp(vl_wordpiece_id_to_token(tok, 28), "dup") == 0);
  CHECK(vl_wordpiece_id_to_token(tok, (int64_t)NV) == NULL && vl_wordpiece_token_to_id(tok, "zz", 2) == -1);
  CHECK_IDS(tok, "unaffable", "5 6 7");   /* longest first: ##aff before ##a */
  CHECK_IDS(tok, "unaffa", "5 6 8");
  CHECK_IDS(tok, "unaffx", "1");          /* no split for the tail: the whole word is [UNK] */
  CHECK_IDS(tok, "abc a", "19 22 23 19");
  CHECK_IDS(tok, "Hello, WORLD!", "10 12 11 13");
  CHECK_IDS(tok, "hello\tworld\r\n\xc2\xa0.", "10 11 14"); /* tab, CRLF, no-break space are spaces */
  CHECK_IDS(tok, "hel\x01lo\xe2\x80\x8bworld", "1"); /* U+200B (Cf) dropped: "helloworld", no split */
  CHECK_IDS(tok, "hel\x01lo", "10");      /* a control character vanishes inside the word */
  CHECK_IDS(tok, "caf\xc3\xa9 CAF\xc3\x89", "15 15"); /* accents stripped when lower-casing */
  CHECK_IDS(tok, "东京", "17 18");        /* CJK ideographs are words of their own */
  CHECK_IDS(tok, "a[MASK]b [SEP]", "19 4 20 3");
  CHECK_IDS(tok, "[mask]", "1 1 1");      /* lower-case is not the special token: [ mask ] */
  CHECK_IDS(tok, "", "");
  CHECK_IDS(tok, "a's", "19 24 25");
  CHECK_IDS(tok, "\xc4\xb0", "26");       /* İ: NFD I + dot, the dot stripped, then i */
  /* Invalid UTF-8: an error naming the byte, outputs untouched. */
  int64_t *ids = (int64_t *)&ids;
  size_t n = 12345;
  CHECK_ERR(vl_wordpiece_tokenize(tok, "ab \xff", 4, &ids, &n), VL_EINVAL, "not valid UTF-8 (byte 3, 0xff)");
  CHECK(ids == (int64_t *)&ids && n == 12345);
  /* A NUL inside the length is dropped as cleanup does; it does not end the text: "ab". */
  CHECK(vl_wordpiece_tokenize(tok, "a\0b", 3, &ids, &n) == VL_OK && n == 2 && ids[0] == 19 && ids[1] == 22);
  if (n == 2) free(ids);
  vl_wordpiece_free(tok);

  vl_wordpiece_opts o = vl_wordpiece_default_opts();
  o.lower = false;
  CHECK_OK(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), &o, &tok));
  CHECK_IDS(tok, "Hello caf\xc3\xa9 cafe", "1 16 15"); /* cased: accents kept, Hello unknown */
  vl_wordpiece_free(tok);
  o.lower = true;
  o.strip_accents = 0;
  CHECK_OK(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), &o, &tok));
  CHECK_IDS(tok, "CAF\xc3\x89", "16");
  CHECK_IDS(tok, "\xc4\xb0", "26 27"); /* full lower case of İ: i + U+0307, which stays */
  vl_wordpiece_free(tok);
  o = vl_wordpiece_default_opts();
  o.max_chars = 5;
  CHECK_OK(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), &o, &tok));
  CHECK_IDS(tok, "hello", "10");
  CHECK_IDS(tok, "unaffa", "1");
  vl_wordpiece_free(tok);
}

static void check_encoding(vl_wordpiece_encoding *e, const int64_t *ids, const int64_t *types, const int64_t *mask,
                           size_t n, const char *what) {
  bool ok = e->n == n;
  for (size_t i = 0; ok && i < n; i++) ok = e->ids[i] == ids[i] && e->type_ids[i] == types[i] && e->mask[i] == mask[i];
  CHECK(ok, "%s: %zu tokens", what, e->n);
  vl_wordpiece_encoding_free(e);
}

static void test_encode(void) {
  vl_wordpiece *tok = NULL;
  CHECK_OK(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), NULL, &tok));
  if (!tok) return;
  vl_wordpiece_encoding e;
  vl_wordpiece_encode_opts o = {.max_length = 0, .truncation = true, .pad = false, .add_special = true};
  CHECK_OK(vl_wordpiece_encode(tok, "hello", 5, "world !", 7, &o, &e));
  check_encoding(&e, (int64_t[]){2, 10, 3, 11, 13, 3}, (int64_t[]){0, 0, 0, 1, 1, 1}, (int64_t[]){1, 1, 1, 1, 1, 1}, 6,
                 "pair");
  /* longest_first, both long: 10 + 10 into 8 - 3 = 5 gives the first 2 and the second 3. */
  const char *ten = "a a a a a a a a a a", *tenb = "b b b b b b b b b b";
  o.max_length = 8;
  CHECK_OK(vl_wordpiece_encode(tok, ten, strlen(ten), tenb, strlen(tenb), &o, &e));
  check_encoding(&e, (int64_t[]){2, 19, 19, 3, 20, 20, 20, 3}, (int64_t[]){0, 0, 0, 0, 1, 1, 1, 1},
                 (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1}, 8, "halves");
  /* The short one (1) is kept whole and the long one takes the rest (4). */
  CHECK_OK(vl_wordpiece_encode(tok, ten, strlen(ten), "c", 1, &o, &e));
  check_encoding(&e, (int64_t[]){2, 19, 19, 19, 19, 3, 21, 3}, (int64_t[]){0, 0, 0, 0, 0, 0, 1, 1},
                 (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1}, 8, "short kept");
  /* Single text, truncated then padded. */
  o.max_length = 4;
  o.pad = true;
  CHECK_OK(vl_wordpiece_encode(tok, ten, strlen(ten), NULL, 0, &o, &e));
  check_encoding(&e, (int64_t[]){2, 19, 19, 3}, (int64_t[]){0, 0, 0, 0}, (int64_t[]){1, 1, 1, 1}, 4, "single");
  o.max_length = 5;
  CHECK_OK(vl_wordpiece_encode(tok, "a", 1, NULL, 0, &o, &e));
  check_encoding(&e, (int64_t[]){2, 19, 3, 0, 0}, (int64_t[]){0, 0, 0, 0, 0}, (int64_t[]){1, 1, 1, 0, 0}, 5, "padded");
  o.add_special = false;
  o.truncation = false;
  o.max_length = 2;
  CHECK_OK(vl_wordpiece_encode(tok, "a b c", 5, NULL, 0, &o, &e));
  check_encoding(&e, (int64_t[]){19, 20, 21}, (int64_t[]){0, 0, 0}, (int64_t[]){1, 1, 1}, 3, "no truncation");
  /* Errors leave the output untouched. */
  vl_wordpiece_encoding keep = {NULL, NULL, NULL, 777};
  e = keep;
  o = (vl_wordpiece_encode_opts){.max_length = 2, .truncation = true, .pad = false, .add_special = true};
  CHECK_ERR(vl_wordpiece_encode(tok, "a", 1, "b", 1, &o, &e), VL_EINVAL, "leaves no room for the 3 special tokens");
  o = (vl_wordpiece_encode_opts){.max_length = 0, .truncation = true, .pad = true, .add_special = true};
  CHECK_ERR(vl_wordpiece_encode(tok, "a", 1, NULL, 0, &o, &e), VL_EINVAL, "needs a max_length");
  o.max_length = 4;
  CHECK_ERR(vl_wordpiece_encode(tok, "\xc3", 1, NULL, 0, &o, &e), VL_EINVAL, "not valid UTF-8");
  CHECK(e.n == 777 && e.ids == NULL);
  vl_wordpiece_free(tok);

  /* A vocab with [UNK] only: encode needs [CLS]/[SEP] for special tokens and [PAD] for padding. */
  static const char *const bare[] = {"[UNK]", "a"};
  CHECK_OK(vl_wordpiece_load(write_vocab("bare.txt", bare, 2), NULL, &tok));
  if (!tok) return;
  o = (vl_wordpiece_encode_opts){.max_length = 0, .truncation = true, .pad = false, .add_special = true};
  CHECK_ERR(vl_wordpiece_encode(tok, "a", 1, NULL, 0, &o, &e), VL_EINVAL, "add_special needs [CLS]");
  o = (vl_wordpiece_encode_opts){.max_length = 3, .truncation = true, .pad = true, .add_special = false};
  CHECK_ERR(vl_wordpiece_encode(tok, "a", 1, NULL, 0, &o, &e), VL_EINVAL, "padding needs [PAD]");
  CHECK_IDS(tok, "a [MASK]", "1 0 0 0"); /* no [MASK] in this vocab: [ mask ] are three [UNK] */
  vl_wordpiece_free(tok);
}

static void test_decode(void) {
  vl_wordpiece *tok = NULL;
  CHECK_OK(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), NULL, &tok));
  if (!tok) return;
  char *text = NULL;
  CHECK_OK(vl_wordpiece_decode(tok, (int64_t[]){2, 5, 6, 7, 12, 10, 14, 3}, 8, false, &text));
  CHECK(text && strcmp(text, "[CLS] unaffable, hello. [SEP]") == 0, "got '%s'", text ? text : "");
  free(text);
  CHECK_OK(vl_wordpiece_decode(tok, (int64_t[]){2, 6, 1, 19, 3, 0}, 6, true, &text));
  CHECK(text && strcmp(text, "##aff a") == 0, "got '%s'", text ? text : ""); /* [UNK] skipped too */
  free(text);
  text = (char *)&text;
  CHECK_ERR(vl_wordpiece_decode(tok, (int64_t[]){1, -1}, 2, false, &text), VL_EINVAL, "id -1 (at 1)");
  CHECK(text == (char *)&text);
  vl_wordpiece_free(tok);
}

static void test_load_errors(void) {
  vl_wordpiece *tok = (vl_wordpiece *)&tok;
  char missing[300];
  snprintf(missing, sizeof missing, "%s/missing.txt", dir);
  CHECK_ERR(vl_wordpiece_load(missing, NULL, &tok), VL_EIO, "cannot open the vocab");
  static const char *const no_unk[] = {"[PAD]", "hello"};
  CHECK_ERR(vl_wordpiece_load(write_vocab("nounk.txt", no_unk, 2), NULL, &tok), VL_EINVAL, "has no [UNK] token");
  CHECK_ERR(vl_wordpiece_load(write_vocab("empty.txt", no_unk, 0), NULL, &tok), VL_EINVAL, "is empty");
  vl_wordpiece_opts o = vl_wordpiece_default_opts();
  o.max_chars = 0;
  CHECK_ERR(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), &o, &tok), VL_EINVAL, "max_chars 0");
  CHECK(tok == (vl_wordpiece *)&tok);
}

/* Random byte strings and random codepoints: tokenize either succeeds with ids in the vocab or
 * fails with VL_EINVAL (invalid UTF-8), and the ids of valid text decode without error. */
static void test_random_input(void) {
  vl_wordpiece *tok = NULL;
  CHECK_OK(vl_wordpiece_load(write_vocab("v.txt", VOCAB, NV), NULL, &tok));
  if (!tok) return;
  uint64_t seed = vl_test_seed();
  int bad = 0, valid = 0;
  char buf[256];
  for (int iter = 0; iter < 2000; iter++) {
    size_t len = 0;
    int n = 1 + (int)(vl_test_urand() * 60);
    for (int k = 0; k < n && len < sizeof buf - 4; k++) {
      if (iter % 2) { /* raw bytes */
        buf[len++] = (char)(int)(vl_test_urand() * 256);
      } else { /* a codepoint from ASCII, Latin, CJK or the whole range (surrogates excluded) */
        double u = vl_test_urand();
        int32_t c = u < 0.4 ? (int32_t)(vl_test_urand() * 128) : u < 0.7 ? 0xc0 + (int32_t)(vl_test_urand() * 0x200)
                    : u < 0.85 ? 0x4e00 + (int32_t)(vl_test_urand() * 0x100) : (int32_t)(vl_test_urand() * 0x110000);
        if (c >= 0xd800 && c < 0xe000) c = 'x';
        len += (size_t)utf8proc_encode_char(c, (unsigned char *)buf + len);
      }
    }
    int64_t *ids = NULL;
    size_t m = 0;
    vl_status st = vl_wordpiece_tokenize(tok, buf, len, &ids, &m);
    if (st == VL_OK) {
      for (size_t i = 0; i < m; i++) bad += ids[i] < 0 || ids[i] >= (int64_t)NV;
      char *text = NULL;
      bad += vl_wordpiece_decode(tok, ids, m, false, &text) != VL_OK;
      free(text);
      free(ids);
      valid++;
    } else {
      bad += st != VL_EINVAL || iter % 2 == 0; /* generated codepoints are always valid UTF-8 */
    }
  }
  CHECK(bad == 0, "seed %llu: %d bad results", (unsigned long long)seed, bad);
  CHECK(valid >= 1000, "seed %llu: only %d valid texts", (unsigned long long)seed, valid);
  vl_wordpiece_free(tok);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/test_wordpiece.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_pieces();
  test_encode();
  test_decode();
  test_load_errors();
  test_random_input();
  const char *names[] = {"v.txt", "bare.txt", "nounk.txt", "empty.txt"};
  char p[300];
  for (size_t i = 0; i < 4; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  rmdir(dir);
  return vl_test_finish();
}
