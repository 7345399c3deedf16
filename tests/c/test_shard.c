/* tests/c/test_shard.c: the BERT shard format (ext/text/shard.h): write -> read round trips
 * (2- and 4-byte ids), the writer's atomicity and checks, and every refusal of the reader (empty,
 * short, wrong magic, unknown version, flipped header and payload bits, truncated and overlong
 * files, header fields out of range, and ids / positions out of range under a correct checksum),
 * each with its message; sets of files: global indices, directories, disagreeing files. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/tfevents.h"
#include "ext/text/shard.h"
#include "tests/c/vl_test.h"

static char root[] = "/tmp/vl_shard_XXXXXX";

static void path_of(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", root, name); }

static unsigned char *slurp(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *b = malloc((size_t)len + 1);
  *n = fread(b, 1, (size_t)len, f);
  fclose(f);
  return b;
}

static void spit(const char *path, const unsigned char *b, size_t n) {
  FILE *f = fopen(path, "wb");
  if (n) fwrite(b, 1, n, f);
  fclose(f);
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Recomputes both checksums of a shard image (for files with bad content and good checksums). */
static void fix_crcs(unsigned char *b, size_t n) {
  put32(b + 56, vl_crc32c(b + 128, n - 128));
  put32(b + 124, vl_crc32c(b, 124));
}

/* A random sample that satisfies every record rule, in caller arrays of capacity L. */
typedef struct sample {
  uint32_t ids[64], pos[64], mids[64];
  vl_shard_sample s;
} sample;

static void make_sample(sample *x, uint32_t L, uint32_t P, uint32_t V) {
  uint32_t len = 3 + (uint32_t)(vl_test_urand() * (L - 2));
  if (len > L) len = L;
  uint32_t seg_a = 2 + (uint32_t)(vl_test_urand() * (len - 2));
  for (uint32_t i = 0; i < len; i++) x->ids[i] = (uint32_t)(vl_test_urand() * V);
  uint32_t nm = 0;
  for (uint32_t i = 0; i < len && nm < P; i++)
    if (vl_test_urand() < 0.3) {
      x->pos[nm] = i;
      x->mids[nm++] = (uint32_t)(vl_test_urand() * V);
    }
  x->s = (vl_shard_sample){.length = len, .seg_a = seg_a, .n_masked = nm, .nsp = vl_test_urand() < 0.5,
                           .ids = x->ids, .positions = x->pos, .masked_ids = x->mids};
}

static vl_shard_info params(uint32_t L, uint32_t P, uint32_t V) {
  return (vl_shard_info){.seq_len = L, .max_predictions = P, .vocab_size = V, .vocab_crc = 0xABCDEF01u,
                         .masked_lm_prob = 0.15, .short_seq_prob = 0.1, .seed = 7, .dupe_factor = 2};
}

/* Writes n random samples to name (kept in xs) and checks the file reads back exactly. */
static void roundtrip(const char *name, uint32_t L, uint32_t P, uint32_t V, int n, sample *xs) {
  char path[512];
  path_of(path, sizeof path, name);
  vl_shard_info p = params(L, P, V);
  vl_shard_writer *w = NULL;
  CHECK_OK(vl_shard_writer_open(path, &p, &w));
  if (!w) return;
  for (int i = 0; i < n; i++) {
    make_sample(&xs[i], L, P, V);
    CHECK_OK(vl_shard_writer_add(w, &xs[i].s));
  }
  CHECK(access(path, F_OK) != 0, "nothing under the final name before finish");
  CHECK_OK(vl_shard_writer_finish(w));
  struct stat st;
  uint32_t idb = V <= 65536 ? 2 : 4;
  CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == 128 + (uint64_t)n * vl_shard_record_size(L, P, idb));
  vl_shard_set *s = NULL;
  CHECK_OK(vl_shard_set_open(&(const char *){path}, 1, &s));
  if (!s) return;
  const vl_shard_info *h = vl_shard_set_info(s);
  CHECK(h->n_samples == (uint64_t)n && h->seq_len == L && h->max_predictions == P && h->vocab_size == V);
  CHECK(h->id_bytes == idb && h->vocab_crc == 0xABCDEF01u && h->seed == 7 && h->dupe_factor == 2);
  CHECK(h->masked_lm_prob == 0.15 && h->short_seq_prob == 0.1);
  int64_t idx[64];
  for (int i = 0; i < n; i++) idx[i] = n - 1 - i; /* reversed: any order */
  int64_t *ids = malloc(sizeof(int64_t) * n * L), *tt = malloc(sizeof(int64_t) * n * L);
  int64_t *am = malloc(sizeof(int64_t) * n * L), *lab = malloc(sizeof(int64_t) * n * L), nsp[64];
  int64_t *mp = malloc(sizeof(int64_t) * n * P + 8), *mi = malloc(sizeof(int64_t) * n * P + 8);
  float *mw = malloc(sizeof(float) * n * P + 8);
  vl_shard_batch b = {ids, tt, am, lab, nsp, mp, mi, mw};
  CHECK_OK(vl_shard_set_gather(s, idx, (size_t)n, &b));
  int bad = 0;
  for (int j = 0; j < n; j++) {
    const vl_shard_sample *x = &xs[n - 1 - j].s;
    for (uint32_t i = 0; i < L; i++) {
      int in = i < x->length;
      int64_t want_lab = -100;
      for (uint32_t k = 0; k < x->n_masked; k++)
        if (x->positions[k] == i) want_lab = x->masked_ids[k];
      bad += ids[j * L + i] != (in ? x->ids[i] : 0);
      bad += tt[j * L + i] != (in && i >= x->seg_a);
      bad += am[j * L + i] != in;
      bad += lab[j * L + i] != want_lab;
    }
    bad += nsp[j] != x->nsp;
    for (uint32_t k = 0; k < P; k++) {
      int real = k < x->n_masked;
      bad += mp[j * P + k] != (real ? x->positions[k] : 0);
      bad += mi[j * P + k] != (real ? x->masked_ids[k] : 0);
      bad += mw[j * P + k] != (real ? 1.0f : 0.0f);
    }
  }
  CHECK(bad == 0, "%s: %d fields differ after the round trip", name, bad);
  /* NULL buffers are skipped */
  vl_shard_batch only = {.next_sentence_label = nsp};
  CHECK_OK(vl_shard_set_gather(s, idx, 1, &only));
  idx[0] = n;
  CHECK_ERR(vl_shard_set_gather(s, idx, 1, &b), VL_EINVAL, "is outside 0..");
  vl_shard_set_close(s);
  free(ids), free(tt), free(am), free(lab), free(mp), free(mi), free(mw);
}

static void test_writer_checks(void) {
  char path[512];
  path_of(path, sizeof path, "w.shard");
  vl_shard_info p = params(16, 4, 100);
  vl_shard_writer *w = NULL;
  p.seq_len = 5000;
  CHECK_ERR(vl_shard_writer_open(path, &p, &w), VL_EINVAL, "seq_len 5000 is not in 3..4096");
  p = params(16, 17, 100);
  CHECK_ERR(vl_shard_writer_open(path, &p, &w), VL_EINVAL, "max_predictions 17 is larger than seq_len 16");
  CHECK(w == NULL);
  p = params(16, 4, 100);
  CHECK_OK(vl_shard_writer_open(path, &p, &w));
  uint32_t ids[4] = {2, 50, 100, 3}, pos[2] = {2, 1}, mids[2] = {7, 8};
  vl_shard_sample s = {.length = 4, .seg_a = 2, .n_masked = 0, .nsp = 0, .ids = ids, .positions = pos, .masked_ids = mids};
  CHECK_ERR(vl_shard_writer_add(w, &s), VL_EINVAL, "sample 0: token 2 has id 100, outside the vocab of 100");
  ids[2] = 99;
  s.n_masked = 2;
  CHECK_ERR(vl_shard_writer_add(w, &s), VL_EINVAL, "masked positions are not ascending (1 after 2)");
  pos[0] = 1, pos[1] = 4;
  CHECK_ERR(vl_shard_writer_add(w, &s), VL_EINVAL, "masked position 4 is outside the sample's 4 tokens");
  pos[1] = 3;
  s.nsp = 2;
  CHECK_ERR(vl_shard_writer_add(w, &s), VL_EINVAL, "next-sentence label 2 is not 0 or 1");
  s.nsp = 1;
  s.seg_a = 5;
  CHECK_ERR(vl_shard_writer_add(w, &s), VL_EINVAL, "length 4 and segment A 5 do not fit seq_len 16");
  s.seg_a = 2;
  CHECK_OK(vl_shard_writer_add(w, &s));
  CHECK(vl_shard_writer_count(w) == 1);
  vl_shard_writer_abort(w);
  /* an aborted shard leaves nothing: not the file, not the temporary */
  DIR *d = opendir(root);
  int left = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (strncmp(e->d_name, ".w.shard", 8) == 0 || strcmp(e->d_name, "w.shard") == 0) left++;
  closedir(d);
  CHECK(left == 0, "%d files left by an aborted writer", left);
}

/* Writes a small valid shard and returns its bytes. */
static unsigned char *valid_image(size_t *n) {
  char path[512];
  path_of(path, sizeof path, "base.shard");
  vl_shard_info p = params(16, 4, 100);
  vl_shard_writer *w = NULL;
  CHECK_OK(vl_shard_writer_open(path, &p, &w));
  for (int i = 0; i < 5; i++) {
    uint32_t ids[8] = {2, 10, 11, 3, 20 + i, 21, 22, 3}, pos[2] = {1, 5}, mids[2] = {40, 41};
    vl_shard_sample s = {.length = 8, .seg_a = 4, .n_masked = 2, .nsp = i & 1, .ids = ids, .positions = pos,
                         .masked_ids = mids};
    CHECK_OK(vl_shard_writer_add(w, &s));
  }
  CHECK_OK(vl_shard_writer_finish(w));
  return slurp(path, n);
}

/* Writes b[0..n) as name and expects opening it to fail with VL_EIO and a message holding sub. */
static void expect_reject(const char *name, const unsigned char *b, size_t n, const char *sub) {
  char path[512];
  path_of(path, sizeof path, name);
  spit(path, b, n);
  vl_shard_set *s = NULL;
  CHECK_ERR(vl_shard_set_open(&(const char *){path}, 1, &s), VL_EIO, sub);
  CHECK(s == NULL);
  if (!strstr(vl_errmsg(), path)) CHECK(0, "the message names the file: %s", vl_errmsg());
}

static void test_rejects(void) {
  size_t n;
  unsigned char *good = valid_image(&n);
  if (!good) return;
  uint32_t rs = vl_shard_record_size(16, 4, 2);
  CHECK(n == 128 + 5 * (size_t)rs);
  unsigned char *b = malloc(n + 16);
  char msg[256];

  expect_reject("empty.shard", good, 0, "empty file (0 bytes), not a shard");
  memcpy(b, good, n);
  memcpy(b, "GARBAGE!", 8);
  expect_reject("magic.shard", b, n, "not a BERT shard (magic \"GARBAGE!\", expected \"VLBERTSH\")");
  memcpy(b, good, n);
  put32(b + 8, 2);
  expect_reject("version.shard", b, n, "format version 2 is not supported (this reader reads version 1)");
  expect_reject("short.shard", good, 100, "truncated: 100 bytes, shorter than the 128-byte header");
  expect_reject("tiny.shard", good, 10, "truncated: 10 bytes, shorter than the 128-byte header");
  expect_reject("stub.shard", (const unsigned char *)"VLB", 3, "not a BERT shard (magic \"VLB\", expected");
  memcpy(b, good, n);
  b[30] ^= 0x10; /* max_predictions */
  expect_reject("hflip.shard", b, n, "header checksum mismatch (stored 0x");
  memcpy(b, good, n);
  b[128 + rs + 9] ^= 0x01; /* an id byte of sample 1 */
  uint32_t stored = (uint32_t)(good[56] | good[57] << 8 | good[58] << 16 | (uint32_t)good[59] << 24);
  snprintf(msg, sizeof msg, "checksum mismatch (stored 0x%08x, computed 0x%08x)", stored, vl_crc32c(b + 128, n - 128));
  expect_reject("pflip.shard", b, n, msg);
  snprintf(msg, sizeof msg, "truncated: header says %zu bytes, file has %zu", n, n - 10);
  expect_reject("trunc.shard", good, n - 10, msg);
  memcpy(b, good, n);
  b[n] = 0;
  snprintf(msg, sizeof msg, "1 bytes after the end: header says %zu bytes, file has %zu", n, n + 1);
  expect_reject("long.shard", b, n + 1, msg);

  /* header fields out of range, with correct checksums */
  memcpy(b, good, n);
  put32(b + 24, 5000);
  fix_crcs(b, n);
  expect_reject("seq.shard", b, n, "seq_len 5000 is not in 3..4096");
  memcpy(b, good, n);
  put32(b + 28, 17);
  fix_crcs(b, n);
  expect_reject("maxp.shard", b, n, "max_predictions 17 is larger than seq_len 16");
  memcpy(b, good, n);
  put32(b + 36, 4);
  fix_crcs(b, n);
  expect_reject("idb.shard", b, n, "id_bytes 4 for vocab_size 100 (expected 2)");
  memcpy(b, good, n);
  put32(b + 40, rs + 8);
  fix_crcs(b, n);
  expect_reject("rs.shard", b, n, "record_size");
  memcpy(b, good, n);
  memset(b + 16, 0xFF, 8); /* n_samples 2^64-1: n * record_size overflows */
  fix_crcs(b, n);
  expect_reject("ovf.shard", b, n, "is not n_samples 18446744073709551615 x record_size");

  /* ids and positions out of range under correct checksums: open succeeds, the gather names the
   * sample and leaves the buffers untouched */
  char path[512];
  path_of(path, sizeof path, "badid.shard");
  memcpy(b, good, n);
  b[128 + 3 * rs + 8 + 2 * 5] = 0xFF; /* sample 3, token 5: id 0xFF15 >= 100 */
  b[128 + 3 * rs + 8 + 2 * 5 + 1] = 0xFF;
  b[128 + 4 * rs + 8 + 16 * 2 + 2] = 9; /* sample 4, second masked position: 9 >= length 8 */
  fix_crcs(b, n);
  spit(path, b, n);
  vl_shard_set *s = NULL;
  CHECK_OK(vl_shard_set_open(&(const char *){path}, 1, &s));
  if (s) {
    int64_t ids[3 * 16], nsp[3];
    for (int i = 0; i < 3 * 16; i++) ids[i] = 777;
    vl_shard_batch bb = {.input_ids = ids, .next_sentence_label = nsp};
    int64_t idx[3] = {0, 3, 1};
    CHECK_ERR(vl_shard_set_gather(s, idx, 3, &bb), VL_EIO, "sample 3 (global 3): token 5 has id 65535, outside the vocab of 100");
    int touched = 0;
    for (int i = 0; i < 3 * 16; i++) touched += ids[i] != 777;
    CHECK(touched == 0, "%d outputs written by a failed gather", touched);
    idx[1] = 4;
    CHECK_ERR(vl_shard_set_gather(s, idx, 3, &bb), VL_EIO, "sample 4 (global 4): masked position 9 is outside the sample's 8 tokens");
    idx[1] = 2;
    CHECK_OK(vl_shard_set_gather(s, idx, 3, &bb));
    CHECK(ids[16] == 2 && ids[16 + 4] == 22 && ids[16 + 8] == 0 && nsp[1] == 0 && nsp[2] == 1);
    vl_shard_set_close(s);
  }
  free(b);
  free(good);
}

static void test_sets(void) {
  static sample a[20], c[7];
  roundtrip("a.shard", 24, 5, 3000, 20, a);
  roundtrip("c.shard", 24, 5, 3000, 7, c);
  char pa[512], pc[512], pd[512];
  path_of(pa, sizeof pa, "a.shard");
  path_of(pc, sizeof pc, "c.shard");
  const char *paths[2] = {pc, pa};
  vl_shard_set *s = NULL;
  CHECK_OK(vl_shard_set_open(paths, 2, &s));
  if (s) {
    CHECK(vl_shard_set_info(s)->n_samples == 27 && vl_shard_set_files(s) == 2);
    CHECK(vl_shard_set_file_samples(s, 0) == 7 && vl_shard_set_file_samples(s, 1) == 20);
    int64_t idx[3] = {6, 7, 26}, ids[3 * 24];
    vl_shard_batch b = {.input_ids = ids};
    CHECK_OK(vl_shard_set_gather(s, idx, 3, &b));
    CHECK(ids[1] == c[6].ids[1] && ids[24 + 1] == a[0].ids[1] && ids[48 + 2] == a[19].ids[2]);
    idx[0] = 27;
    CHECK_ERR(vl_shard_set_gather(s, idx, 1, &b), VL_EINVAL, "sample index 27 (batch row 0) is outside 0..26");
    idx[0] = -1;
    CHECK_ERR(vl_shard_set_gather(s, idx, 1, &b), VL_EINVAL, "sample index -1");
    vl_shard_set_close(s);
  }
  static sample d[3];
  roundtrip("d.shard", 32, 5, 3000, 3, d);
  path_of(pd, sizeof pd, "d.shard");
  const char *mixed[2] = {pa, pd};
  CHECK_ERR(vl_shard_set_open(mixed, 2, &s), VL_EIO, "seq_len 32, max_predictions 5, vocab 3000 (crc 0xabcdef01) differ from");

  /* a directory: its *.shard files by name */
  char dir[512], p1[600], p2[600];
  path_of(dir, sizeof dir, "dir");
  mkdir(dir, 0777);
  CHECK_ERR(vl_shard_set_open_path(dir, &s), VL_EIO, "holds no *.shard files");
  size_t n;
  unsigned char *bytes = slurp(pa, &n);
  snprintf(p1, sizeof p1, "%s/part-00001.shard", dir);
  spit(p1, bytes, n);
  free(bytes);
  bytes = slurp(pc, &n);
  snprintf(p2, sizeof p2, "%s/part-00000.shard", dir);
  spit(p2, bytes, n);
  free(bytes);
  snprintf(p2, sizeof p2, "%s/notes.txt", dir);
  spit(p2, (const unsigned char *)"x", 1);
  CHECK_OK(vl_shard_set_open_path(dir, &s));
  if (s) {
    CHECK(vl_shard_set_files(s) == 2 && vl_shard_set_file_samples(s, 0) == 7 && vl_shard_set_info(s)->n_samples == 27);
    CHECK(strstr(vl_shard_set_path(s, 0), "part-00000.shard") != NULL);
    vl_shard_set_close(s);
  }
  CHECK_OK(vl_shard_set_open_path(pa, &s)); /* a file path */
  vl_shard_set_close(s);
}

int main(void) {
  vl_test_seed();
  if (!mkdtemp(root)) return 2;
  static sample xs[40];
  roundtrip("u16.shard", 32, 6, 3000, 40, xs);
  roundtrip("u32.shard", 40, 8, 70000, 40, xs);
  roundtrip("full.shard", 8, 8, 70000, 10, xs); /* max_predictions = seq_len */
  test_writer_checks();
  test_rejects();
  test_sets();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) printf("could not remove %s\n", root);
  return vl_test_finish();
}
