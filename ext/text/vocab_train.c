/* ext/text/vocab_train.c: see vocab_train.h. The structure is HF's BpeTrainer::do_train:
 * words as arrays of symbol ids, pair counts in a hash map, a max-heap of (count, pair, the words
 * that hold it) whose entries are re-pushed with the current count when they come up stale, and
 * per merge the count changes of the touched words, after which every pair that gained
 * occurrences is pushed again with those words. */
#define _POSIX_C_SOURCE 200809L
#include "ext/text/vocab_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "runtime/io/fsutil.h"
#include "ext/text/wordpiece.h"

#define OOM() vl_fail(VL_EOOM, "train_vocab: out of memory")

static const char *const default_special[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};

vl_vocab_train_opts vl_vocab_train_default_opts(void) {
  vl_vocab_train_opts o = {.vocab_size = 30522, .min_frequency = 2, .limit_alphabet = 1000, .lower = true,
                           .strip_accents = -1, .special = NULL, .nspecial = 0, .continuation_order = NULL};
  return o;
}

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
  return h;
}

static uint64_t hash_u64(uint64_t x) { /* SplitMix64's finalizer */
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* ---- a table of strings with ids (words, tokens) ---- */

typedef struct strtab {
  char **s;
  size_t *len, n, cap;
  int64_t *slots; /* ids, -1 empty */
  size_t nslots;  /* a power of two */
} strtab;

static void strtab_free(strtab *t) {
  for (size_t i = 0; i < t->n; i++) free(t->s[i]);
  free(t->s);
  free(t->len);
  free(t->slots);
  memset(t, 0, sizeof *t);
}

static int64_t strtab_find(const strtab *t, const char *s, size_t n) {
  if (!t->nslots) return -1;
  size_t mask = t->nslots - 1;
  for (size_t i = hash_bytes(s, n) & mask;; i = (i + 1) & mask) {
    int64_t id = t->slots[i];
    if (id < 0) return -1;
    if (t->len[id] == n && memcmp(t->s[id], s, n) == 0) return id;
  }
}

static bool strtab_rehash(strtab *t, size_t nslots) {
  int64_t *sl = malloc(nslots * sizeof *sl);
  if (!sl) return false;
  memset(sl, 0xff, nslots * sizeof *sl);
  for (size_t id = 0; id < t->n; id++) {
    size_t i = hash_bytes(t->s[id], t->len[id]) & (nslots - 1);
    while (sl[i] >= 0) i = (i + 1) & (nslots - 1);
    sl[i] = (int64_t)id;
  }
  free(t->slots);
  t->slots = sl;
  t->nslots = nslots;
  return true;
}

/* The id of s, added when new (*added says which). */
static vl_status strtab_add(strtab *t, const char *s, size_t n, int64_t *id, bool *added) {
  int64_t f = strtab_find(t, s, n);
  if (added) *added = f < 0;
  if (f >= 0) {
    *id = f;
    return VL_OK;
  }
  if (2 * (t->n + 1) > t->nslots && !strtab_rehash(t, t->nslots ? 2 * t->nslots : 1024)) return OOM();
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 1024;
    char **ns = realloc(t->s, cap * sizeof *ns);
    if (ns) t->s = ns;
    size_t *nl = realloc(t->len, cap * sizeof *nl);
    if (nl) t->len = nl;
    if (!ns || !nl) return OOM();
    t->cap = cap;
  }
  char *c = malloc(n + 1);
  if (!c) return OOM();
  memcpy(c, s, n);
  c[n] = 0;
  t->s[t->n] = c;
  t->len[t->n] = n;
  size_t i = hash_bytes(s, n) & (t->nslots - 1);
  while (t->slots[i] >= 0) i = (i + 1) & (t->nslots - 1);
  t->slots[i] = (int64_t)t->n;
  *id = (int64_t)t->n++;
  return VL_OK;
}

/* ---- a map from u64 keys (pairs a << 32 | b, codepoints) to int64 values ---- */

#define EMPTY_KEY UINT64_MAX

typedef struct u64map {
  uint64_t *keys;
  int64_t *vals;
  size_t n, nslots;
  size_t first; /* slots of the first allocation, a power of two (0: 4096) */
} u64map;

static void u64map_free(u64map *m) {
  free(m->keys);
  free(m->vals);
  memset(m, 0, sizeof *m);
}

static bool u64map_grow(u64map *m) {
  size_t ns = m->nslots ? 2 * m->nslots : m->first ? m->first : 4096;
  uint64_t *k = malloc(ns * sizeof *k);
  int64_t *v = malloc(ns * sizeof *v);
  if (!k || !v) {
    free(k);
    free(v);
    return false;
  }
  memset(k, 0xff, ns * sizeof *k);
  for (size_t i = 0; i < m->nslots; i++) {
    if (m->keys[i] == EMPTY_KEY) continue;
    size_t j = hash_u64(m->keys[i]) & (ns - 1);
    while (k[j] != EMPTY_KEY) j = (j + 1) & (ns - 1);
    k[j] = m->keys[i];
    v[j] = m->vals[i];
  }
  free(m->keys);
  free(m->vals);
  m->keys = k;
  m->vals = v;
  m->nslots = ns;
  return true;
}

/* The value slot of key (0 when new), or NULL when out of memory. */
static int64_t *u64map_at(u64map *m, uint64_t key) {
  if (2 * (m->n + 1) > m->nslots && !u64map_grow(m)) return NULL;
  size_t mask = m->nslots - 1, i = hash_u64(key) & mask;
  while (m->keys[i] != EMPTY_KEY && m->keys[i] != key) i = (i + 1) & mask;
  if (m->keys[i] == EMPTY_KEY) {
    m->keys[i] = key;
    m->vals[i] = 0;
    m->n++;
  }
  return &m->vals[i];
}

static int64_t u64map_get(const u64map *m, uint64_t key) {
  if (!m->nslots) return 0;
  size_t mask = m->nslots - 1, i = hash_u64(key) & mask;
  while (m->keys[i] != EMPTY_KEY && m->keys[i] != key) i = (i + 1) & mask;
  return m->keys[i] == key ? m->vals[i] : 0;
}

/* ---- the words of one merge round that gained a pair (HF's where_to_update) ---- */

typedef struct posset {
  uint64_t pair;
  uint32_t *w;
  size_t n, cap;
} posset;

typedef struct rounds {
  u64map index; /* pair -> position in sets + 1 (0: none this round) */
  posset *sets;
  size_t n, cap;
} rounds;

static bool posset_add(posset *p, uint32_t w) {
  if (p->n && p->w[p->n - 1] == w) return true; /* a word's changes come together */
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 4;
    uint32_t *nw = realloc(p->w, cap * sizeof *nw);
    if (!nw) return false;
    p->w = nw;
    p->cap = cap;
  }
  p->w[p->n++] = w;
  return true;
}

static bool rounds_add(rounds *r, uint64_t pair, uint32_t w) {
  int64_t *slot = u64map_at(&r->index, pair);
  if (!slot) return false;
  if (*slot == 0) {
    if (r->n == r->cap) {
      size_t cap = r->cap ? 2 * r->cap : 1024;
      posset *ns = realloc(r->sets, cap * sizeof *ns);
      if (!ns) return false;
      r->sets = ns;
      r->cap = cap;
    }
    r->sets[r->n] = (posset){pair, NULL, 0, 0};
    *slot = (int64_t)++r->n;
  }
  return posset_add(&r->sets[*slot - 1], w);
}

/* Empties the round (the sets' arrays are handed to the heap or freed by the caller). */
static void rounds_reset(rounds *r) {
  for (size_t i = 0; i < r->n; i++) {
    uint64_t key = r->sets[i].pair;
    size_t mask = r->index.nslots - 1, j = hash_u64(key) & mask;
    while (r->index.keys[j] != key) j = (j + 1) & mask;
    r->index.vals[j] = 0; /* the key stays, marked unused: no deletion in open addressing */
  }
  r->n = 0;
}

/* ---- the queue ---- */

typedef struct merge {
  uint64_t count;
  uint32_t a, b;
  uint32_t *pos;
  size_t npos;
} merge;

typedef struct heap {
  merge *v;
  size_t n, cap;
} heap;

/* HF's Merge order: the larger count, then the smaller pair (a, then b). */
static bool above(const merge *x, const merge *y) {
  if (x->count != y->count) return x->count > y->count;
  if (x->a != y->a) return x->a < y->a;
  return x->b < y->b;
}

static bool heap_push(heap *h, merge m) {
  if (h->n == h->cap) {
    size_t cap = h->cap ? 2 * h->cap : 4096;
    merge *nv = realloc(h->v, cap * sizeof *nv);
    if (!nv) return false;
    h->v = nv;
    h->cap = cap;
  }
  size_t i = h->n++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!above(&m, &h->v[p])) break;
    h->v[i] = h->v[p];
    i = p;
  }
  h->v[i] = m;
  return true;
}

static merge heap_pop(heap *h) {
  merge top = h->v[0], last = h->v[--h->n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= h->n) break;
    if (c + 1 < h->n && above(&h->v[c + 1], &h->v[c])) c++;
    if (!above(&h->v[c], &last)) break;
    h->v[i] = h->v[c];
    i = c;
  }
  if (h->n) h->v[i] = last;
  return top;
}

/* ---- the trainer ---- */

struct vl_vocab_trainer {
  vl_vocab_train_opts opts;
  char **special; /* copies */
  char *order;
  strtab words;
  uint64_t *counts; /* per word */
  size_t counts_cap;
  size_t long_word; /* words of more symbols are merged through linked symbols (see merge_long) */
  bool trained;
};

void vl_vocab_trainer_free(vl_vocab_trainer *tr) {
  if (!tr) return;
  for (size_t i = 0; i < tr->opts.nspecial; i++) free(tr->special[i]);
  free(tr->special);
  free(tr->order);
  strtab_free(&tr->words);
  free(tr->counts);
  free(tr);
}

static bool valid_utf8(const char *s, size_t n) {
  return utf8proc_decompose((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, NULL, 0, 0) >= 0;
}

vl_status vl_vocab_trainer_new(const vl_vocab_train_opts *opts, vl_vocab_trainer **out) {
  vl_vocab_train_opts o = opts ? *opts : vl_vocab_train_default_opts();
  if (!o.special) {
    o.special = default_special;
    o.nspecial = VL_COUNTOF(default_special);
  }
  if (o.vocab_size < 1 || o.min_frequency < 0 || o.limit_alphabet < 0 || o.strip_accents < -1 || o.strip_accents > 1)
    return vl_fail(VL_EINVAL,
                   "train_vocab: vocab_size %lld must be >= 1, min_frequency %lld and limit_alphabet %lld >= 0, "
                   "strip_accents %d one of -1, 0, 1",
                   (long long)o.vocab_size, (long long)o.min_frequency, (long long)o.limit_alphabet, o.strip_accents);
  for (size_t i = 0; i < o.nspecial; i++)
    if (!o.special[i] || !o.special[i][0] || !valid_utf8(o.special[i], strlen(o.special[i])))
      return vl_fail(VL_EINVAL, "train_vocab: special token %zu is empty or not valid UTF-8", i + 1);
  if (o.continuation_order && !valid_utf8(o.continuation_order, strlen(o.continuation_order)))
    return vl_fail(VL_EINVAL, "train_vocab: continuation_order is not valid UTF-8");
  vl_vocab_trainer *tr = calloc(1, sizeof *tr);
  if (!tr) return OOM();
  tr->opts = o;
  tr->long_word = VL_VOCAB_LONG_WORD;
  tr->opts.nspecial = 0;
  tr->special = calloc(o.nspecial ? o.nspecial : 1, sizeof *tr->special);
  bool ok = tr->special != NULL;
  for (size_t i = 0; ok && i < o.nspecial; i++, tr->opts.nspecial++) ok = (tr->special[i] = strdup(o.special[i])) != NULL;
  if (ok && o.continuation_order) ok = (tr->order = strdup(o.continuation_order)) != NULL;
  if (!ok) {
    vl_vocab_trainer_free(tr);
    return OOM();
  }
  tr->opts.special = (const char *const *)tr->special;
  tr->opts.continuation_order = tr->order;
  *out = tr;
  return VL_OK;
}

size_t vl_vocab_trainer_nwords(const vl_vocab_trainer *tr) { return tr->words.n; }

void vl_vocab_trainer_set_long_word(vl_vocab_trainer *tr, size_t symbols) { tr->long_word = symbols; }

static vl_status count_word(void *ctx, const char *w, size_t n) {
  vl_vocab_trainer *tr = ctx;
  int64_t id;
  bool added;
  VL_TRY(strtab_add(&tr->words, w, n, &id, &added));
  if ((size_t)id >= tr->counts_cap) {
    size_t cap = tr->counts_cap ? 2 * tr->counts_cap : 4096;
    uint64_t *c = realloc(tr->counts, cap * sizeof *c);
    if (!c) return OOM();
    tr->counts = c;
    tr->counts_cap = cap;
  }
  if (added) tr->counts[id] = 0;
  tr->counts[id]++;
  return VL_OK;
}

vl_status vl_vocab_trainer_feed(vl_vocab_trainer *tr, const char *text, size_t len, const char *name, size_t base) {
  vl_wordpiece_opts wo = vl_wordpiece_default_opts();
  wo.lower = tr->opts.lower;
  wo.strip_accents = tr->opts.strip_accents;
  /* Line by line: a word never spans a line break (white space), and the buffers stay small. */
  for (size_t at = 0; at < len;) {
    const char *nl = memchr(text + at, '\n', len - at);
    size_t end = nl ? (size_t)(nl - text) + 1 : len, bad = 0;
    vl_status s = vl_wordpiece_basic_words(&wo, text + at, end - at, count_word, tr, &bad);
    if (s == VL_EINVAL)
      return vl_fail(VL_EINVAL, "train_vocab: %s%s%s is not valid UTF-8 at byte %zu (0x%02x)", name ? "'" : "",
                     name ? name : "the text", name ? "'" : "", base + at + bad, (unsigned char)text[at + bad]);
    if (s != VL_OK) return s;
    at = end;
  }
  return VL_OK;
}

/* ---- training ---- */

/* A long word's symbols as a doubly linked list over its slots (a merge keeps the left slot and
 * unlinks the right one) and, per pair, the slots where it starts: a merge touches only the
 * pair's occurrences, not the whole word. Entries go stale as merges change the word (checked
 * when used); every current occurrence of a pair is in its list. */
#define LW_NONE UINT32_MAX /* no neighbour; also the symbol of an unlinked slot */

typedef struct pos_list {
  uint32_t *v;
  size_t n, cap;
} pos_list;

typedef struct longword {
  uint32_t *next, *prev;
  u64map at; /* pair -> its list in lists + 1 */
  pos_list *lists;
  size_t nlists, cap;
} longword;

static void longword_free(longword *lw) {
  if (!lw) return;
  free(lw->next);
  free(lw->prev);
  u64map_free(&lw->at);
  for (size_t i = 0; i < lw->nlists; i++) free(lw->lists[i].v);
  free(lw->lists);
  free(lw);
}

/* Records that pair (x, y) starts at slot. */
static bool lw_add(longword *lw, uint32_t x, uint32_t y, uint32_t slot) {
  int64_t *i = u64map_at(&lw->at, ((uint64_t)x << 32) | y);
  if (!i) return false;
  if (*i == 0) {
    if (lw->nlists == lw->cap) {
      size_t cap = lw->cap ? 2 * lw->cap : 16;
      pos_list *nl = realloc(lw->lists, cap * sizeof *nl);
      if (!nl) return false;
      lw->lists = nl;
      lw->cap = cap;
    }
    lw->lists[lw->nlists] = (pos_list){NULL, 0, 0};
    *i = (int64_t)++lw->nlists;
  }
  pos_list *l = &lw->lists[*i - 1];
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 4;
    uint32_t *nv = realloc(l->v, cap * sizeof *nv);
    if (!nv) return false;
    l->v = nv;
    l->cap = cap;
  }
  l->v[l->n++] = slot;
  return true;
}

typedef struct train_state {
  strtab tok;
  u64map pairs; /* (a << 32 | b) -> count, HF's pair_counts */
  rounds round;
  heap q;
  uint32_t *syms; /* every word's symbols, word i at syms[off[i] .. off[i] + len[i]) */
  size_t *off;
  uint32_t *len;  /* a long word's live symbols, its slots spanning more */
  longword **lw;  /* per word: NULL, or the long word's lists */
  size_t nwords;
} train_state;

static void state_free(train_state *st) {
  for (size_t w = 0; st->lw && w < st->nwords; w++) longword_free(st->lw[w]);
  free(st->lw);
  strtab_free(&st->tok);
  u64map_free(&st->pairs);
  for (size_t i = 0; i < st->round.n; i++) free(st->round.sets[i].w);
  u64map_free(&st->round.index);
  free(st->round.sets);
  for (size_t i = 0; i < st->q.n; i++) free(st->q.v[i].pos);
  free(st->q.v);
  free(st->syms);
  free(st->off);
  free(st->len);
}

#define KEY(a, b) (((uint64_t)(a) << 32) | (uint64_t)(b))

static bool add_change(train_state *st, uint32_t a, uint32_t b, int d, uint64_t count, uint32_t w) {
  int64_t *c = u64map_at(&st->pairs, KEY(a, b));
  if (!c) return false;
  *c += d * (int64_t)count;
  return d < 0 || rounds_add(&st->round, KEY(a, b), w);
}

static int by_u32(const void *x, const void *y) {
  uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
  return (a > b) - (a < b);
}

/* merge_word on a long word: the pair's slots, in word order, each checked against the word as
 * it is when the merge reaches it. That is what the left-to-right scan of merge_word checks at
 * each position, in the same order with the same count changes, so the vocab is the same; the
 * cost is the pair's occurrences (times a log), not the word's length: one 1M-character word
 * took ~30 s of scans and memmoves over 30k merges, ~1 s so. */
static bool merge_long(train_state *st, uint32_t w, uint32_t a, uint32_t b, uint32_t r, uint64_t count) {
  longword *lw = st->lw[w];
  uint32_t *s = st->syms + st->off[w];
  int64_t li = u64map_get(&lw->at, KEY(a, b));
  if (li == 0) return true;
  pos_list c = lw->lists[li - 1]; /* taken: occurrences this merge makes go to a new list */
  lw->lists[li - 1] = (pos_list){NULL, 0, 0};
  qsort(c.v, c.n, sizeof *c.v, by_u32);
  bool ok = true;
  for (size_t j = 0; ok && j < c.n; j++) {
    uint32_t p = c.v[j], q = lw->next[p];
    if ((j > 0 && c.v[j - 1] == p) || s[p] != a || q == LW_NONE || s[q] != b) continue; /* stale */
    uint32_t before = lw->prev[p];
    if (before != LW_NONE)
      ok = add_change(st, s[before], a, -1, count, w) && add_change(st, s[before], r, 1, count, w) &&
           lw_add(lw, s[before], r, before);
    s[p] = r;
    s[q] = LW_NONE;
    uint32_t after = lw->next[q];
    lw->next[p] = after;
    if (after != LW_NONE) lw->prev[after] = p;
    st->len[w]--;
    if (ok && after != LW_NONE)
      ok = add_change(st, b, s[after], -1, count, w) && add_change(st, r, s[after], 1, count, w) &&
           lw_add(lw, r, s[after], p);
  }
  free(c.v);
  return ok;
}

/* HF's Word::merge: left to right, each (a, b) becomes r, the neighbours' pairs change. */
static bool merge_word(train_state *st, uint32_t w, uint32_t a, uint32_t b, uint32_t r, uint64_t count) {
  if (st->lw[w]) return merge_long(st, w, a, b, r, count);
  uint32_t *s = st->syms + st->off[w];
  size_t n = st->len[w];
  for (size_t k = 0; k < n; k++) {
    if (s[k] != a || k + 1 >= n || s[k + 1] != b) continue;
    if (k > 0 && !(add_change(st, s[k - 1], a, -1, count, w) && add_change(st, s[k - 1], r, 1, count, w)))
      return false;
    s[k] = r;
    memmove(s + k + 1, s + k + 2, (n - k - 2) * sizeof *s);
    n--;
    if (k + 1 < n && !(add_change(st, b, s[k + 1], -1, count, w) && add_change(st, r, s[k + 1], 1, count, w)))
      return false;
  }
  st->len[w] = (uint32_t)n;
  return true;
}

/* Pushes every pair the round gave words to, with its current count (if positive). */
static bool push_round(train_state *st) {
  bool ok = true;
  for (size_t i = 0; i < st->round.n; i++) {
    posset *p = &st->round.sets[i];
    int64_t c = u64map_get(&st->pairs, p->pair);
    if (ok && c > 0 &&
        heap_push(&st->q, (merge){(uint64_t)c, (uint32_t)(p->pair >> 32), (uint32_t)p->pair, p->w, p->n})) {
      p->w = NULL;
      continue;
    }
    if (c > 0) ok = false;
    free(p->w);
    p->w = NULL;
  }
  rounds_reset(&st->round);
  return ok;
}

typedef struct cpcount {
  int32_t cp;
  uint64_t count;
} cpcount;

static int by_count_then_cp(const void *x, const void *y) {
  const cpcount *a = x, *b = y;
  if (a->count != b->count) return a->count > b->count ? -1 : 1;
  return (a->cp > b->cp) - (a->cp < b->cp);
}

static int by_cp(const void *x, const void *y) {
  const cpcount *a = x, *b = y;
  return (a->cp > b->cp) - (a->cp < b->cp);
}

/* The token id of character c, with the "##" prefix when cont; -1 when the vocab has none. */
static int64_t char_id(const strtab *tok, int32_t c, bool cont) {
  char b[8] = "##";
  size_t n = (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)b + 2);
  return cont ? strtab_find(tok, b, n + 2) : strtab_find(tok, b + 2, n);
}

static vl_status add_char(strtab *tok, int32_t c, bool cont) {
  char b[8] = "##";
  size_t n = (size_t)utf8proc_encode_char(c, (utf8proc_uint8_t *)b + 2);
  int64_t id;
  return cont ? strtab_add(tok, b, n + 2, &id, NULL) : strtab_add(tok, b + 2, n, &id, NULL);
}

static vl_status initial_vocab(vl_vocab_trainer *tr, train_state *st, size_t *nalpha, size_t *ncont) {
  const strtab *W = &tr->words;
  int64_t id;
  for (size_t i = 0; i < tr->opts.nspecial; i++)
    VL_TRY(strtab_add(&st->tok, tr->special[i], strlen(tr->special[i]), &id, NULL));
  /* The alphabet: characters weighted by word counts. */
  u64map chars = {0};
  vl_status s = VL_OK;
  for (size_t w = 0; w < W->n && s == VL_OK; w++) {
    int32_t c;
    for (size_t at = 0; at < W->len[w];) {
      at += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)W->s[w] + at, (utf8proc_ssize_t)(W->len[w] - at), &c);
      int64_t *v = u64map_at(&chars, (uint64_t)c);
      if (!v) {
        s = OOM();
        break;
      }
      *v += (int64_t)tr->counts[w];
    }
  }
  cpcount *cs = s == VL_OK ? malloc((chars.n ? chars.n : 1) * sizeof *cs) : NULL;
  if (s == VL_OK && !cs) s = OOM();
  size_t n = 0;
  for (size_t i = 0; s == VL_OK && i < chars.nslots; i++)
    if (chars.keys[i] != EMPTY_KEY) cs[n++] = (cpcount){(int32_t)chars.keys[i], (uint64_t)chars.vals[i]};
  u64map_free(&chars);
  if (s == VL_OK) {
    if (tr->opts.limit_alphabet > 0 && n > (size_t)tr->opts.limit_alphabet) {
      qsort(cs, n, sizeof *cs, by_count_then_cp);
      n = (size_t)tr->opts.limit_alphabet;
    }
    qsort(cs, n, sizeof *cs, by_cp);
    size_t before = st->tok.n;
    for (size_t i = 0; i < n && s == VL_OK; i++) s = add_char(&st->tok, cs[i].cp, false);
    *nalpha = st->tok.n - before;
  }
  free(cs);
  if (s != VL_OK) return s;
  /* The continuations: characters of the vocab seen after a word's first character. */
  u64map inner = {0};
  for (size_t w = 0; w < W->n && s == VL_OK; w++) {
    int32_t c;
    size_t at = (size_t)utf8proc_iterate((const utf8proc_uint8_t *)W->s[w], (utf8proc_ssize_t)W->len[w], &c);
    while (at < W->len[w]) {
      at += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)W->s[w] + at, (utf8proc_ssize_t)(W->len[w] - at), &c);
      if (char_id(&st->tok, c, false) < 0) continue;
      int64_t *v = u64map_at(&inner, (uint64_t)c);
      if (!v) {
        s = OOM();
        break;
      }
      *v = 1;
    }
  }
  size_t before = st->tok.n;
  const char *o = tr->order;
  for (size_t at = 0; s == VL_OK && o && o[at];) {
    int32_t c;
    at += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)o + at, -1, &c);
    if (u64map_get(&inner, (uint64_t)c)) s = add_char(&st->tok, c, true);
  }
  cs = s == VL_OK ? malloc((inner.n ? inner.n : 1) * sizeof *cs) : NULL;
  if (s == VL_OK && !cs) s = OOM();
  n = 0;
  for (size_t i = 0; s == VL_OK && i < inner.nslots; i++)
    if (inner.keys[i] != EMPTY_KEY) cs[n++] = (cpcount){(int32_t)inner.keys[i], 0};
  u64map_free(&inner);
  if (s == VL_OK) {
    qsort(cs, n, sizeof *cs, by_cp);
    for (size_t i = 0; i < n && s == VL_OK; i++) s = add_char(&st->tok, cs[i].cp, true);
  }
  free(cs);
  *ncont = st->tok.n - before;
  return s;
}

/* The words as symbol ids (characters outside the vocab dropped, as HF does) and the first
 * pair counts and queue. */
static vl_status initial_words(vl_vocab_trainer *tr, train_state *st) {
  const strtab *W = &tr->words;
  size_t total = 0;
  for (size_t w = 0; w < W->n; w++) total += W->len[w]; /* bytes >= characters */
  st->syms = malloc((total ? total : 1) * sizeof *st->syms);
  st->off = malloc(W->n * sizeof *st->off);
  st->len = malloc(W->n * sizeof *st->len);
  st->lw = calloc(W->n, sizeof *st->lw);
  st->nwords = W->n;
  if (!st->syms || !st->off || !st->len || !st->lw) return OOM();
  size_t k = 0;
  for (size_t w = 0; w < W->n; w++) {
    st->off[w] = k;
    bool first = true;
    for (size_t at = 0; at < W->len[w];) {
      int32_t c;
      at += (size_t)utf8proc_iterate((const utf8proc_uint8_t *)W->s[w] + at, (utf8proc_ssize_t)(W->len[w] - at), &c);
      if (char_id(&st->tok, c, false) >= 0) st->syms[k++] = (uint32_t)char_id(&st->tok, c, !first);
      first = false;
    }
    st->len[w] = (uint32_t)(k - st->off[w]);
    for (size_t i = st->off[w] + 1; i < k; i++)
      if (!add_change(st, st->syms[i - 1], st->syms[i], 1, tr->counts[w], (uint32_t)w)) return OOM();
    if (st->len[w] > tr->long_word) {
      uint32_t n = st->len[w], *s = st->syms + st->off[w];
      longword *lw = st->lw[w] = calloc(1, sizeof *lw);
      if (!lw || !(lw->next = malloc(n * sizeof *lw->next)) || !(lw->prev = malloc(n * sizeof *lw->prev))) return OOM();
      /* The pair map sized to the word (it has fewer than n distinct pairs to start), not the
       * 4096 slots of the big maps: many distinct long words must not cost 64 KiB each. */
      for (lw->at.first = 16; lw->at.first < 2 * (size_t)n && lw->at.first < 4096;) lw->at.first *= 2;
      for (uint32_t i = 0; i < n; i++) {
        lw->prev[i] = i ? i - 1 : LW_NONE;
        lw->next[i] = i + 1 < n ? i + 1 : LW_NONE;
        if (i + 1 < n && !lw_add(lw, s[i], s[i + 1], i)) return OOM();
      }
    }
  }
  if (!push_round(st)) return OOM();
  return VL_OK;
}

static vl_status merges(vl_vocab_trainer *tr, train_state *st) {
  uint64_t minf = (uint64_t)tr->opts.min_frequency;
  char *buf = NULL;
  size_t bcap = 0;
  vl_status s = VL_OK;
  while (st->tok.n < (size_t)tr->opts.vocab_size && st->q.n) {
    merge top = heap_pop(&st->q);
    uint64_t cur = (uint64_t)u64map_get(&st->pairs, KEY(top.a, top.b));
    if (top.count != cur) { /* stale: back in with the current count */
      top.count = cur;
      if (!heap_push(&st->q, top)) {
        free(top.pos);
        s = OOM();
        break;
      }
      continue;
    }
    if (top.count < 1 || minf > top.count) {
      free(top.pos);
      break;
    }
    const char *a = st->tok.s[top.a], *b = st->tok.s[top.b];
    size_t al = st->tok.len[top.a], bl = st->tok.len[top.b];
    if (bl >= 2 && b[0] == '#' && b[1] == '#') {
      b += 2;
      bl -= 2;
    }
    if (al + bl > bcap) {
      bcap = 2 * (al + bl) + 64;
      char *nb = realloc(buf, bcap);
      if (!nb) {
        free(top.pos);
        s = OOM();
        break;
      }
      buf = nb;
    }
    memcpy(buf, a, al);
    memcpy(buf + al, b, bl);
    int64_t r;
    if ((s = strtab_add(&st->tok, buf, al + bl, &r, NULL)) != VL_OK) {
      free(top.pos);
      break;
    }
    bool ok = true;
    for (size_t i = 0; ok && i < top.npos; i++)
      ok = merge_word(st, top.pos[i], top.a, top.b, (uint32_t)r, tr->counts[top.pos[i]]);
    free(top.pos);
    if (!ok || !push_round(st)) {
      s = OOM();
      break;
    }
  }
  free(buf);
  return s;
}

vl_status vl_vocab_trainer_train(vl_vocab_trainer *tr, char ***tokens, size_t *n) {
  if (tr->trained) return vl_fail(VL_EINVAL, "train_vocab: the trainer has trained already");
  if (tr->words.n == 0) return vl_fail(VL_EINVAL, "train_vocab: the input has no words");
  if (tr->words.n >= UINT32_MAX) return vl_fail(VL_EINVAL, "train_vocab: more than 2^32 distinct words");
  tr->trained = true;
  train_state st = {0};
  size_t nalpha = 0, ncont = 0;
  vl_status s = initial_vocab(tr, &st, &nalpha, &ncont);
  if (s == VL_OK && st.tok.n > (size_t)tr->opts.vocab_size)
    s = vl_fail(VL_EINVAL,
                "train_vocab: vocab_size %lld is smaller than the %zu tokens it starts with (%zu special, %zu "
                "characters, %zu '##' continuations; limit_alphabet lowers the middle one)",
                (long long)tr->opts.vocab_size, st.tok.n, st.tok.n - nalpha - ncont, nalpha, ncont);
  if (s == VL_OK) s = initial_words(tr, &st);
  if (s == VL_OK) s = merges(tr, &st);
  if (s == VL_OK) {
    char **t = realloc(st.tok.s, (st.tok.n ? st.tok.n : 1) * sizeof *t);
    if (t) {
      *tokens = t;
      *n = st.tok.n;
      st.tok.s = NULL;
      st.tok.n = 0;
    } else {
      s = OOM();
    }
  }
  state_free(&st);
  return s;
}

void vl_vocab_tokens_free(char **tokens, size_t n) {
  if (!tokens) return;
  for (size_t i = 0; i < n; i++) free(tokens[i]);
  free(tokens);
}
