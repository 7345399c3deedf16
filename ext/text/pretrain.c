/* ext/text/pretrain.c: text -> tokenized documents -> NSP pairs with masked tokens -> shards
 * (see pretrain.h for the algorithm and its random numbers). */
#define _POSIX_C_SOURCE 200809L
#include "ext/text/pretrain.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/fsutil.h"
#include "runtime/io/tfevents.h"
#include "ext/text/shard.h"
#include "ext/text/wordpiece.h"

/* ---- the random numbers (documented in pretrain.h) ---- */

typedef struct prng {
  uint64_t s[4];
} prng;

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void prng_seed(prng *r, uint64_t seed) {
  for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t prng_next(prng *r) { /* xoshiro256** */
  uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
  s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
  return out;
}

static double prng_unif(prng *r) { return (double)(prng_next(r) >> 11) * 0x1.0p-53; }

/* Uniform in [0, n), n >= 1: Lemire's multiply-shift, rejecting the biased low products. */
static uint64_t prng_below(prng *r, uint64_t n) {
  unsigned __int128 m = (unsigned __int128)prng_next(r) * n;
  uint64_t lo = (uint64_t)m;
  if (lo < n) {
    uint64_t t = (0 - n) % n;
    while (lo < t) {
      m = (unsigned __int128)prng_next(r) * n;
      lo = (uint64_t)m;
    }
  }
  return (uint64_t)(m >> 64);
}

/* Uniform in [a, b] (Python's randint), a <= b. */
static int64_t prng_int(prng *r, int64_t a, int64_t b) { return a + (int64_t)prng_below(r, (uint64_t)(b - a) + 1); }

/* ---- the tokenized corpus ---- */

typedef struct u32v { uint32_t *p; size_t n, cap; } u32v;
typedef struct u64v { uint64_t *p; size_t n, cap; } u64v;

static int u32v_push(u32v *v, uint32_t x) {
  if (v->n == v->cap) {
    size_t c = v->cap ? v->cap * 2 : 1 << 16;
    uint32_t *q = realloc(v->p, c * sizeof *q);
    if (!q) return 0;
    v->p = q, v->cap = c;
  }
  v->p[v->n++] = x;
  return 1;
}

static int u64v_push(u64v *v, uint64_t x) {
  if (v->n == v->cap) {
    size_t c = v->cap ? v->cap * 2 : 1 << 12;
    uint64_t *q = realloc(v->p, c * sizeof *q);
    if (!q) return 0;
    v->p = q, v->cap = c;
  }
  v->p[v->n++] = x;
  return 1;
}

typedef struct corpus {
  u32v tok;  /* every token id, sentence after sentence */
  u64v sent; /* sent.p[i]: first token of sentence i; one more entry at the end */
  u64v doc;  /* doc.p[d]: first sentence of document d; one more entry at the end */
  uint64_t files;
} corpus;

static void corpus_free(corpus *c) {
  free(c->tok.p);
  free(c->sent.p);
  free(c->doc.p);
}

static vl_status oom(void) { return vl_fail(VL_EOOM, "make_bert_shards: out of memory"); }

/* Tokenizing is most of the time, so a file is read in rounds of up to `threads` pieces of about
 * opts.piece_bytes, cut at line ends, tokenized by one thread each and merged in
 * file order (the result does not depend on the number of threads or the piece size). */
#define BLANK UINT64_MAX

typedef struct piece {
  const vl_wordpiece *tok;
  const char *path, *text;
  size_t len;
  uint64_t first_line;
  u32v ids;
  u64v lines; /* per line: its token count, or BLANK for a blank line */
  vl_status s;
  char err[1024];
} piece;

static void *tokenize_piece(void *arg) {
  piece *p = arg;
  const char *t = p->text, *end = t + p->len;
  uint64_t line = p->first_line;
  p->s = VL_OK;
  while (t < end && p->s == VL_OK) {
    const char *nl = memchr(t, '\n', (size_t)(end - t));
    const char *le = nl ? nl : end;
    size_t a = 0, b = (size_t)(le - t);
    while (a < b && strchr(" \t\r\v\f", t[a]) && t[a]) a++;
    while (b > a && strchr(" \t\r\v\f", t[b - 1]) && t[b - 1]) b--;
    if (a == b) {
      if (!u64v_push(&p->lines, BLANK)) p->s = VL_EOOM;
    } else {
      int64_t *ids;
      size_t n;
      if (vl_wordpiece_tokenize(p->tok, t + a, b - a, &ids, &n) != VL_OK) {
        p->s = VL_EIO;
        snprintf(p->err, sizeof p->err, "make_bert_shards: %s:%" PRIu64 ": %s", p->path, line, vl_errmsg());
        break;
      }
      if (!u64v_push(&p->lines, n)) p->s = VL_EOOM;
      for (size_t i = 0; i < n && p->s == VL_OK; i++)
        if (!u32v_push(&p->ids, (uint32_t)ids[i])) p->s = VL_EOOM;
      free(ids);
    }
    line++;
    t = le + 1;
  }
  return NULL;
}

/* Appends a tokenized piece to the corpus, in order; *in_doc: the current document has a sentence. */
static vl_status merge_piece(corpus *c, const piece *p, int *in_doc) {
  const uint32_t *ids = p->ids.p;
  for (size_t i = 0; i < p->lines.n; i++) {
    uint64_t n = p->lines.p[i];
    if (n == BLANK) { /* a blank line ends the document */
      *in_doc = 0;
      continue;
    }
    if (n == 0) continue; /* a line without tokens is dropped */
    if (!*in_doc && !u64v_push(&c->doc, c->sent.n)) return oom();
    *in_doc = 1;
    if (!u64v_push(&c->sent, c->tok.n)) return oom();
    for (uint64_t k = 0; k < n; k++)
      if (!u32v_push(&c->tok, ids[k])) return oom();
    ids += n;
  }
  return VL_OK;
}

static vl_status read_file(corpus *c, const vl_wordpiece *tok, const char *path, int threads, size_t piece_bytes) {
  FILE *f = fopen(path, "rb");
  if (!f) return vl_fail(VL_EIO, "make_bert_shards: cannot open %s: %s", path, strerror(errno));
  size_t cap = (size_t)threads * piece_bytes, have = 0;
  char *buf = malloc(cap);
  piece *ps = calloc((size_t)threads, sizeof *ps);
  pthread_t *tid = calloc((size_t)threads, sizeof *tid);
  vl_status s = buf && ps && tid ? VL_OK : oom();
  int eof = 0, in_doc = 0;
  uint64_t line = 1;
  while (s == VL_OK && (!eof || have > 0)) {
    while (!eof && have < cap) {
      size_t k = fread(buf + have, 1, cap - have, f);
      have += k;
      if (k == 0) {
        if (ferror(f)) s = vl_fail(VL_EIO, "make_bert_shards: reading %s failed: %s", path, strerror(errno));
        eof = 1;
      }
    }
    if (s != VL_OK) break;
    size_t use = have;
    if (!eof) { /* whole lines only; a line longer than the buffer grows it */
      while (use > 0 && buf[use - 1] != '\n') use--;
      if (use == 0) {
        char *nb = realloc(buf, 2 * cap);
        if (!nb) {
          s = oom();
          break;
        }
        buf = nb, cap *= 2;
        continue;
      }
    }
    int np = 0;
    size_t at = 0;
    uint64_t l = line;
    while (at < use && np < threads) {
      size_t e = np == threads - 1 || use - at <= piece_bytes ? use : at + piece_bytes;
      while (e < use && buf[e - 1] != '\n') e++;
      ps[np] = (piece){.tok = tok, .path = path, .text = buf + at, .len = e - at, .first_line = l};
      for (size_t i = at; i < e; i++) l += buf[i] == '\n';
      at = e;
      np++;
    }
    int started = 0;
    for (int i = 1; i < np; i++) {
      if (pthread_create(&tid[i], NULL, tokenize_piece, &ps[i]) != 0) break;
      started = i;
    }
    tokenize_piece(&ps[0]);
    for (int i = started + 1; i < np; i++) tokenize_piece(&ps[i]); /* those no thread took */
    for (int i = 1; i <= started; i++) pthread_join(tid[i], NULL);
    for (int i = 0; i < np; i++) {
      if (s == VL_OK && ps[i].s == VL_EIO) s = vl_fail(VL_EIO, "%s", ps[i].err);
      else if (s == VL_OK && ps[i].s != VL_OK) s = oom();
      if (s == VL_OK) s = merge_piece(c, &ps[i], &in_doc);
      free(ps[i].ids.p);
      free(ps[i].lines.p);
    }
    line = l;
    memmove(buf, buf + use, have - use);
    have -= use;
  }
  free(buf);
  free(ps);
  free(tid);
  fclose(f);
  c->files++;
  return s;
}

/* Reads path: a file, or every regular file below a directory (entries sorted by name). */
static vl_status read_input(corpus *c, const vl_wordpiece *tok, const char *path, int depth, int threads,
                            size_t piece_bytes) {
  struct stat st;
  if (stat(path, &st) != 0) return vl_fail(VL_EIO, "make_bert_shards: input %s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return S_ISREG(st.st_mode) || depth == 0 ? read_file(c, tok, path, threads, piece_bytes) : VL_OK;
  if (depth > 64) return vl_fail(VL_EIO, "make_bert_shards: input %s: directories nested too deep", path);
  char **names;
  int n;
  VL_TRY(vl_fs_list_dir(path, &names, &n));
  vl_status s = VL_OK;
  for (int i = 0; i < n && s == VL_OK; i++) {
    size_t len = strlen(path) + strlen(names[i]) + 2;
    char *p = malloc(len);
    if (!p) {
      s = oom();
      break;
    }
    snprintf(p, len, "%s/%s", path, names[i]);
    s = read_input(c, tok, p, depth + 1, threads, piece_bytes);
    free(p);
  }
  vl_fs_free_list(names, n);
  return s;
}

/* ---- samples ---- */

typedef struct gen {
  const vl_pretrain_opts *o;
  const corpus *c;
  prng rng;
  uint32_t vocab_size, cls, sep, mask, pad;
  const unsigned char *is_cont; /* is_cont[id]: the token starts with "##" */
  /* scratch of one sample */
  uint32_t *ids, *orig, *cand_start, *cand_len, *pos, *mids;
  uint32_t *pair; /* (position, original id) pairs while sorting */
  /* output */
  char *dir;
  vl_shard_info info;
  vl_shard_writer *w;
  uint64_t shard_no;
  vl_pretrain_stats st;
} gen;

static uint64_t sent_len(const corpus *c, uint64_t i) { return c->sent.p[i + 1] - c->sent.p[i]; }

static vl_status next_writer(gen *g) {
  char path[4096];
  snprintf(path, sizeof path, "%s/part-%05" PRIu64 ".shard", g->dir, g->shard_no);
  VL_TRY(vl_shard_writer_open(path, &g->info, &g->w));
  g->shard_no++;
  return VL_OK;
}

static int cmp_pair(const void *a, const void *b) {
  uint32_t x = ((const uint32_t *)a)[0], y = ((const uint32_t *)b)[0];
  return (x > y) - (x < y);
}

/* Python 3's round() of a non-negative value: half to even. */
static uint64_t round_half_even(double x) {
  double f = floor(x), d = x - f;
  uint64_t r = (uint64_t)f;
  if (d > 0.5 || (d == 0.5 && (r & 1))) r++;
  return r;
}

/* Masks ids[0..len) in place (Google's create_masked_lm_predictions) and writes the sample. */
static vl_status emit(gen *g, uint32_t len, uint32_t seg_a, int nsp) {
  const vl_pretrain_opts *o = g->o;
  memcpy(g->orig, g->ids, len * sizeof *g->ids);
  uint32_t ncand = 0;
  for (uint32_t i = 0; i < len; i++) {
    uint32_t id = g->ids[i];
    if (i == 0 || i == seg_a - 1 || i == len - 1 || id == g->cls || id == g->sep || id == g->pad || id == g->mask)
      continue;
    if (o->whole_word_mask && ncand > 0 && g->is_cont[id] && g->cand_start[ncand - 1] + g->cand_len[ncand - 1] == i) {
      g->cand_len[ncand - 1]++;
      continue;
    }
    g->cand_start[ncand] = i;
    g->cand_len[ncand++] = 1;
  }
  for (uint32_t i = ncand; i > 1; i--) { /* Python's shuffle: j uniform in 0..i-1 for i = n..2 */
    uint32_t j = (uint32_t)prng_below(&g->rng, i);
    uint32_t a = g->cand_start[i - 1], b = g->cand_len[i - 1];
    g->cand_start[i - 1] = g->cand_start[j], g->cand_len[i - 1] = g->cand_len[j];
    g->cand_start[j] = a, g->cand_len[j] = b;
  }
  uint64_t want = round_half_even((double)len * o->masked_lm_prob);
  if (want < 1) want = 1;
  if (want > o->max_predictions) want = o->max_predictions;
  uint32_t nm = 0;
  for (uint32_t k = 0; k < ncand && nm < want; k++) {
    if (nm + g->cand_len[k] > want) continue;
    for (uint32_t q = 0; q < g->cand_len[k]; q++) {
      uint32_t i = g->cand_start[k] + q, id;
      if (prng_unif(&g->rng) < 0.8) id = g->mask;
      else if (prng_unif(&g->rng) < 0.5) id = g->orig[i];
      else id = (uint32_t)prng_below(&g->rng, g->vocab_size);
      g->ids[i] = id;
      g->pair[2 * nm] = i;
      g->pair[2 * nm + 1] = g->orig[i];
      nm++;
    }
  }
  qsort(g->pair, nm, 2 * sizeof *g->pair, cmp_pair);
  for (uint32_t k = 0; k < nm; k++) g->pos[k] = g->pair[2 * k], g->mids[k] = g->pair[2 * k + 1];
  if (!g->w) VL_TRY(next_writer(g));
  vl_shard_sample smp = {.length = len, .seg_a = seg_a, .n_masked = nm, .nsp = nsp, .ids = g->ids,
                         .positions = g->pos, .masked_ids = g->mids};
  VL_TRY(vl_shard_writer_add(g->w, &smp));
  g->st.samples++;
  g->st.tokens += len;
  g->st.masked += nm;
  g->st.random_next += (uint64_t)nsp;
  if (vl_shard_writer_count(g->w) >= o->samples_per_shard) {
    vl_shard_writer *w = g->w;
    g->w = NULL;
    VL_TRY(vl_shard_writer_finish(w));
  }
  return VL_OK;
}

/* Google's create_instances_from_document for document d. */
static vl_status from_document(gen *g, uint64_t d) {
  const corpus *c = g->c;
  uint64_t ndocs = c->doc.n - 1, first = c->doc.p[d], end = c->doc.p[d + 1];
  int64_t max_tokens = (int64_t)g->o->seq_len - 3, target = max_tokens;
  if (prng_unif(&g->rng) < g->o->short_seq_prob) target = prng_int(&g->rng, 2, max_tokens);
  uint64_t chunk_first = first, chunk_n = 0;
  int64_t cur = 0;
  for (uint64_t i = first; i < end; i++) {
    if (chunk_n == 0) chunk_first = i;
    chunk_n++;
    cur += (int64_t)sent_len(c, i);
    if (!(i == end - 1 || cur >= target)) continue;
    uint64_t a_end = chunk_n >= 2 ? (uint64_t)prng_int(&g->rng, 1, (int64_t)chunk_n - 1) : 1;
    /* A and B are runs of consecutive sentences, so runs of the token array: [a0, a1), [b0, b1). */
    uint64_t a0 = c->sent.p[chunk_first], a1 = c->sent.p[chunk_first + a_end], b0, b1;
    int nsp;
    if (chunk_n == 1 || prng_unif(&g->rng) < 0.5) {
      nsp = 1;
      int64_t target_b = target - (int64_t)(a1 - a0);
      uint64_t rd = d;
      for (int t = 0; t < 10; t++) {
        rd = (uint64_t)prng_int(&g->rng, 0, (int64_t)ndocs - 1);
        if (rd != d) break;
      }
      uint64_t rf = c->doc.p[rd], re = c->doc.p[rd + 1];
      uint64_t rs = rf + (uint64_t)prng_int(&g->rng, 0, (int64_t)(re - rf) - 1), j = rs;
      b0 = c->sent.p[rs];
      do j++; while (j < re && (int64_t)(c->sent.p[j] - b0) < target_b);
      b1 = c->sent.p[j];
      i -= chunk_n - a_end; /* the unused sentences go back */
    } else {
      nsp = 0;
      b0 = a1;
      b1 = c->sent.p[chunk_first + chunk_n];
    }
    while ((int64_t)((a1 - a0) + (b1 - b0)) > max_tokens) { /* truncate_seq_pair */
      int cut_a = (a1 - a0) > (b1 - b0);
      int front = prng_unif(&g->rng) < 0.5;
      if (cut_a) front ? a0++ : a1--;
      else front ? b0++ : b1--;
    }
    uint32_t la = (uint32_t)(a1 - a0), lb = (uint32_t)(b1 - b0), n = 0;
    g->ids[n++] = g->cls;
    memcpy(g->ids + n, c->tok.p + a0, la * sizeof *g->ids);
    n += la;
    g->ids[n++] = g->sep;
    memcpy(g->ids + n, c->tok.p + b0, lb * sizeof *g->ids);
    n += lb;
    g->ids[n++] = g->sep;
    VL_TRY(emit(g, n, la + 2, nsp));
    chunk_n = 0;
    cur = 0;
  }
  return VL_OK;
}

static vl_status check_opts(const vl_pretrain_opts *o) {
  const char *F = "make_bert_shards";
  if (!o->inputs || o->n_inputs == 0) return vl_fail(VL_EINVAL, "%s: no input files", F);
  if (!o->vocab_path || !o->output_dir) return vl_fail(VL_EINVAL, "%s: needs a vocab and an output directory", F);
  if (o->seq_len < 5 || o->seq_len > VL_SHARD_MAX_SEQ_LEN)
    return vl_fail(VL_EINVAL, "%s: seq_len %" PRIu32 " is not in 5..%u", F, o->seq_len, VL_SHARD_MAX_SEQ_LEN);
  if (o->max_predictions > o->seq_len)
    return vl_fail(VL_EINVAL, "%s: max_predictions %" PRIu32 " is larger than seq_len %" PRIu32, F, o->max_predictions,
                   o->seq_len);
  if (!(o->masked_lm_prob >= 0 && o->masked_lm_prob <= 1) || !(o->short_seq_prob >= 0 && o->short_seq_prob <= 1))
    return vl_fail(VL_EINVAL, "%s: masked_lm_prob %g and short_seq_prob %g must be in [0, 1]", F, o->masked_lm_prob,
                   o->short_seq_prob);
  if (o->dupe_factor < 1) return vl_fail(VL_EINVAL, "%s: dupe_factor must be >= 1", F);
  if (o->samples_per_shard < 1) return vl_fail(VL_EINVAL, "%s: samples_per_shard must be >= 1", F);
  if (o->threads < 0 || o->threads > 256) return vl_fail(VL_EINVAL, "%s: threads %d is not in 0..256", F, o->threads);
  return VL_OK;
}

static vl_status vocab_crc(const char *path, uint32_t *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return vl_fail(VL_EIO, "make_bert_shards: cannot open the vocab %s: %s", path, strerror(errno));
  unsigned char *buf = NULL;
  size_t n = 0, cap = 0;
  vl_status s = VL_OK;
  for (;;) {
    if (n == cap) {
      cap = cap ? 2 * cap : 1 << 20;
      unsigned char *q = realloc(buf, cap);
      if (!q) {
        s = oom();
        break;
      }
      buf = q;
    }
    size_t k = fread(buf + n, 1, cap - n, f);
    n += k;
    if (k == 0) break;
  }
  if (s == VL_OK && ferror(f)) s = vl_fail(VL_EIO, "make_bert_shards: reading the vocab %s failed", path);
  fclose(f);
  if (s == VL_OK) *out = vl_crc32c(buf, n);
  free(buf);
  return s;
}

/* Removes the part-NNNNN.shard files with NNNNN >= keep (those of an earlier run). */
static void remove_stale(const char *dir, uint64_t keep) {
  char **names;
  int n;
  if (vl_fs_list_dir(dir, &names, &n) != VL_OK) return;
  for (int i = 0; i < n; i++) {
    unsigned long long k;
    char tail[8];
    if (sscanf(names[i], "part-%5llu.%6s", &k, tail) == 2 && strcmp(tail, "shard") == 0 &&
        strlen(names[i]) == strlen("part-00000.shard") && k >= keep) {
      char p[4096];
      snprintf(p, sizeof p, "%s/%s", dir, names[i]);
      unlink(p);
    }
  }
  vl_fs_free_list(names, n);
}

vl_status vl_pretrain_make_shards(const vl_pretrain_opts *o, vl_pretrain_stats *st) {
  VL_TRY(check_opts(o));
  int threads = o->threads;
  if (threads <= 0) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    threads = ncpu < 1 ? 1 : ncpu > 16 ? 16 : (int)ncpu;
  }
  vl_wordpiece_opts wo = vl_wordpiece_default_opts();
  wo.lower = o->lower;
  vl_wordpiece *tok = NULL;
  VL_TRY(vl_wordpiece_load(o->vocab_path, &wo, &tok));
  gen g = {.o = o};
  corpus c = {0};
  unsigned char *is_cont = NULL;
  vl_status s = VL_OK;
  const char *special[] = {"[CLS]", "[SEP]", "[MASK]", "[PAD]", "[UNK]"};
  int64_t sid[5];
  for (int i = 0; i < 5 && s == VL_OK; i++) {
    sid[i] = vl_wordpiece_token_to_id(tok, special[i], strlen(special[i]));
    if (sid[i] < 0) s = vl_fail(VL_EINVAL, "make_bert_shards: the vocab %s has no %s token", o->vocab_path, special[i]);
  }
  int64_t V = vl_wordpiece_vocab_size(tok);
  if (s == VL_OK && V > (int64_t)UINT32_MAX) s = vl_fail(VL_EINVAL, "make_bert_shards: vocab of %" PRId64 " tokens", V);
  if (s == VL_OK) s = vocab_crc(o->vocab_path, &g.info.vocab_crc);
  size_t piece_bytes = o->piece_bytes ? o->piece_bytes : (size_t)4 << 20;
  for (size_t i = 0; i < o->n_inputs && s == VL_OK; i++) s = read_input(&c, tok, o->inputs[i], 0, threads, piece_bytes);
  if (s == VL_OK && (!u64v_push(&c.doc, c.sent.n) || !u64v_push(&c.sent, c.tok.n))) s = oom();
  if (s == VL_OK && c.doc.n < 2)
    s = vl_fail(VL_EINVAL, "make_bert_shards: the input (%" PRIu64 " file%s) holds no text", c.files,
                c.files == 1 ? "" : "s");
  if (s == VL_OK && !(is_cont = calloc((size_t)V, 1))) s = oom();
  for (int64_t id = 0; s == VL_OK && id < V; id++) is_cont[id] = strncmp(vl_wordpiece_id_to_token(tok, id), "##", 2) == 0;
  if (s == VL_OK) {
    g.c = &c;
    g.vocab_size = (uint32_t)V;
    g.cls = (uint32_t)sid[0], g.sep = (uint32_t)sid[1], g.mask = (uint32_t)sid[2], g.pad = (uint32_t)sid[3];
    g.is_cont = is_cont;
    size_t L = o->seq_len;
    g.ids = malloc(L * sizeof *g.ids), g.orig = malloc(L * sizeof *g.ids);
    g.cand_start = malloc(L * sizeof *g.ids), g.cand_len = malloc(L * sizeof *g.ids);
    g.pos = malloc(L * sizeof *g.ids), g.mids = malloc(L * sizeof *g.ids), g.pair = malloc(2 * L * sizeof *g.ids);
    if (!g.ids || !g.orig || !g.cand_start || !g.cand_len || !g.pos || !g.mids || !g.pair) s = oom();
    g.dir = (char *)o->output_dir;
    g.info = (vl_shard_info){.seq_len = o->seq_len, .max_predictions = o->max_predictions, .vocab_size = (uint32_t)V,
                             .vocab_crc = g.info.vocab_crc, .flags = o->whole_word_mask ? VL_SHARD_FLAG_WHOLE_WORD : 0,
                             .masked_lm_prob = o->masked_lm_prob, .short_seq_prob = o->short_seq_prob,
                             .seed = o->seed, .dupe_factor = o->dupe_factor};
    prng_seed(&g.rng, o->seed);
  }
  if (s == VL_OK) s = vl_fs_mkdir("make_bert_shards", o->output_dir);
  if (s == VL_OK) remove_stale(o->output_dir, 0);
  uint64_t ndocs = c.doc.n - 1;
  for (uint32_t pass = 0; s == VL_OK && pass < o->dupe_factor; pass++)
    for (uint64_t d = 0; d < ndocs && s == VL_OK; d++) s = from_document(&g, d);
  if (g.w) {
    vl_shard_writer *w = g.w;
    g.w = NULL;
    if (s == VL_OK) s = vl_shard_writer_finish(w);
    else vl_shard_writer_abort(w);
  }
  if (s == VL_OK) {
    g.st.files = c.files;
    g.st.documents = ndocs;
    g.st.sentences = c.sent.n - 1;
    g.st.corpus_tokens = c.tok.n;
    g.st.shards = g.shard_no;
    *st = g.st;
  }
  free(g.ids), free(g.orig), free(g.cand_start), free(g.cand_len), free(g.pos), free(g.mids), free(g.pair);
  free(is_cont);
  corpus_free(&c);
  vl_wordpiece_free(tok);
  return s;
}
