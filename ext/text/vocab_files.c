/* ext/text/vocab_files.c: the WordPiece trainer's file side (see vocab_train.h): feeding it
 * files in blocks of whole lines, training on a list of files, and writing vocab.txt. Apart from
 * vocab_train.c, which holds the algorithm, and using only the trainer's public functions. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "runtime/io/fsutil.h"
#include "ext/text/vocab_train.h"

#define OOM() vl_fail(VL_EOOM, "train_vocab: out of memory")

static bool valid_utf8(const char *s, size_t n) {
  return utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, NULL, 0, 0) >= 0;
}

vl_status vl_vocab_trainer_feed_file(vl_vocab_trainer *tr, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return vl_fail(VL_EIO, "train_vocab: cannot open '%s': %s", path, strerror(errno));
  /* In blocks of whole lines (a block grows until it holds a line break, or the file ends), so
   * that no word or character is cut and offsets in errors are the file's. */
  size_t cap = (size_t)1 << 22, have = 0, base = 0;
  char *buf = malloc(cap);
  vl_status s = buf ? VL_OK : OOM();
  bool eof = false;
  while (s == VL_OK && !(eof && have == 0)) {
    if (!eof) {
      if (have == cap) {
        char *nb = realloc(buf, 2 * cap);
        if (!nb) {
          s = OOM();
          break;
        }
        buf = nb;
        cap *= 2;
      }
      size_t got = fread(buf + have, 1, cap - have, f);
      have += got;
      eof = got == 0;
    }
    size_t cut = have;
    if (!eof) {
      while (cut > 0 && buf[cut - 1] != '\n') cut--;
      if (cut == 0) continue; /* no line break yet: read more */
    }
    s = vl_vocab_trainer_feed(tr, buf, cut, path, base);
    memmove(buf, buf + cut, have - cut);
    have -= cut;
    base += cut;
  }
  if (s == VL_OK && ferror(f)) s = vl_fail(VL_EIO, "train_vocab: error reading '%s'", path);
  free(buf);
  fclose(f);
  return s;
}

vl_status vl_vocab_train_files(const char *const *files, size_t nfiles, const vl_vocab_train_opts *opts,
                               char ***tokens, size_t *n) {
  if (nfiles == 0) return vl_fail(VL_EINVAL, "train_vocab: no input files");
  vl_vocab_trainer *tr;
  VL_TRY(vl_vocab_trainer_new(opts, &tr));
  vl_status s = VL_OK;
  for (size_t i = 0; i < nfiles && s == VL_OK; i++) s = vl_vocab_trainer_feed_file(tr, files[i]);
  if (s == VL_OK) s = vl_vocab_trainer_train(tr, tokens, n);
  vl_vocab_trainer_free(tr);
  return s;
}

vl_status vl_vocab_save(const char *const *tokens, size_t n, const char *path) {
  if (n == 0) return vl_fail(VL_EINVAL, "save_vocab: no tokens for '%s'", path);
  size_t len = 0;
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(tokens[i]);
    if (l == 0 || strpbrk(tokens[i], "\r\n") || !valid_utf8(tokens[i], l))
      return vl_fail(VL_EINVAL, "save_vocab: token %zu (id %zu) is empty, holds a line break or is not valid UTF-8",
                     i + 1, i);
    len += l + 1;
  }
  char *buf = malloc(len), *p = buf;
  if (!buf) return vl_fail(VL_EOOM, "save_vocab: out of memory");
  for (size_t i = 0; i < n; i++) {
    size_t l = strlen(tokens[i]);
    memcpy(p, tokens[i], l);
    p[l] = '\n';
    p += l + 1;
  }
  vl_status s = vl_fs_write_atomic(path, buf, len);
  free(buf);
  return s;
}
