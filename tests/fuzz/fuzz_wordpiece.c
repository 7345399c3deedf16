/* tests/fuzz/fuzz_wordpiece.c: vocab.txt and the tokenizer's input. The input is split at its
 * first 0xFF byte (never valid UTF-8): before it a vocab.txt, after it text, whose first byte
 * also picks the options; the text is encoded alone and as a pair with truncation and padding,
 * then decoded. Without a 0xFF byte the whole input is text for a small built-in vocabulary. */
#include <string.h>

#include "fuzz_common.h"
#include "ext/text/wordpiece.h"

static const char BUILTIN[] = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n##s\ncat\n##at\na\n##a\n.\n,\n\xe4\xb8\xad\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const uint8_t *cut = memchr(data, 0xFF, size);
  const uint8_t *vocab = cut ? data : (const uint8_t *)BUILTIN;
  size_t vlen = cut ? (size_t)(cut - data) : sizeof BUILTIN - 1;
  const char *text = cut ? (const char *)cut + 1 : (const char *)data;
  size_t tlen = cut ? size - vlen - 1 : size;
  char path[64];
  int fd = vl_fuzz_file(vocab, vlen, path, sizeof path);
  if (fd < 0) return 0;
  vl_wordpiece_opts o = vl_wordpiece_default_opts();
  uint8_t pick = tlen ? (uint8_t)text[0] : 0;
  o.lower = pick & 1;
  o.strip_accents = (int)((pick >> 1) % 3) - 1;
  o.max_chars = 1 + (pick >> 3);
  vl_wordpiece *tok = NULL;
  if (vl_wordpiece_load(path, &o, &tok) == VL_OK) {
    int64_t *ids = NULL;
    size_t n = 0;
    if (vl_wordpiece_tokenize(tok, text, tlen, &ids, &n) == VL_OK) {
      char *back = NULL;
      if (vl_wordpiece_decode(tok, ids, n, pick & 2, &back) == VL_OK) free(back);
      free(ids);
    }
    size_t half = tlen / 2;
    vl_wordpiece_encode_opts eo = {.max_length = 1 + (pick >> 2), .truncation = true, .pad = pick & 4, .add_special = true};
    vl_wordpiece_encoding e = {0};
    if (vl_wordpiece_encode(tok, text, half, text + half, tlen - half, &eo, &e) == VL_OK) vl_wordpiece_encoding_free(&e);
    vl_wordpiece_free(tok);
  }
  close(fd);
  return 0;
}
