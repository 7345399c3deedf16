/* ext/text/shard.c: BERT pretraining shards, the writer and the mmap reader (see shard.h). */
#define _POSIX_C_SOURCE 200809L
#include "ext/text/shard.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <isa-l/crc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/io/fsutil.h"
#include "runtime/io/replace.h"
#include "runtime/io/tfevents.h"

/* ---- little-endian fields (memcpy-free byte assembly: the format is LE on any host) ---- */

static uint64_t get_le(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static void put_le(unsigned char *p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static double get_f64(const unsigned char *p) {
  uint64_t u = get_le(p, 8);
  double d;
  memcpy(&d, &u, 8);
  return d;
}

static void put_f64(unsigned char *p, double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  put_le(p, u, 8);
}

/* Chained CRC32C state (vl_crc32c is the one-shot form: ~crc32_iscsi(buf, n, ~0)). */
static uint32_t crc_update(uint32_t state, const unsigned char *p, size_t n) {
  while (n > 0) {
    size_t k = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
    state = crc32_iscsi((unsigned char *)p, (int)k, state);
    p += k;
    n -= k;
  }
  return state;
}

uint32_t vl_shard_record_size(uint32_t seq_len, uint32_t max_predictions, uint32_t id_bytes) {
  uint64_t r = 8 + (uint64_t)seq_len * id_bytes + 2ull * max_predictions + (uint64_t)max_predictions * id_bytes;
  return (uint32_t)((r + 7) / 8 * 8);
}

static uint32_t id_bytes_for(uint32_t vocab_size) { return vocab_size <= 65536u ? 2u : 4u; }

/* The field checks shared by the reader's header and the writer's parameters. */
static vl_status check_fields(const char *path, const vl_shard_info *h) {
  if (h->seq_len < 3 || h->seq_len > VL_SHARD_MAX_SEQ_LEN)
    return vl_fail(VL_EIO, "shard %s: seq_len %" PRIu32 " is not in 3..%u", path, h->seq_len, VL_SHARD_MAX_SEQ_LEN);
  if (h->max_predictions > h->seq_len)
    return vl_fail(VL_EIO, "shard %s: max_predictions %" PRIu32 " is larger than seq_len %" PRIu32, path,
                   h->max_predictions, h->seq_len);
  if (h->vocab_size < 5)
    return vl_fail(VL_EIO, "shard %s: vocab_size %" PRIu32 " is smaller than the 5 special tokens", path, h->vocab_size);
  if (h->flags & ~VL_SHARD_FLAG_WHOLE_WORD)
    return vl_fail(VL_EIO, "shard %s: unknown flags 0x%" PRIx32, path, h->flags);
  return VL_OK;
}

static void encode_header(const vl_shard_info *h, uint32_t payload_crc, unsigned char b[VL_SHARD_HEADER_SIZE]) {
  memset(b, 0, VL_SHARD_HEADER_SIZE);
  memcpy(b, VL_SHARD_MAGIC, 8);
  put_le(b + 8, VL_SHARD_VERSION, 4);
  put_le(b + 12, VL_SHARD_HEADER_SIZE, 4);
  put_le(b + 16, h->n_samples, 8);
  put_le(b + 24, h->seq_len, 4);
  put_le(b + 28, h->max_predictions, 4);
  put_le(b + 32, h->vocab_size, 4);
  put_le(b + 36, h->id_bytes, 4);
  put_le(b + 40, h->record_size, 4);
  put_le(b + 44, h->vocab_crc, 4);
  put_le(b + 48, h->n_samples * h->record_size, 8);
  put_le(b + 56, payload_crc, 4);
  put_le(b + 60, h->flags, 4);
  put_f64(b + 64, h->masked_lm_prob);
  put_f64(b + 72, h->short_seq_prob);
  put_le(b + 80, h->seed, 8);
  put_le(b + 88, h->dupe_factor, 4);
  put_le(b + 124, vl_crc32c(b, 124), 4);
}

/* ---- one record ---- */

typedef struct rec_view {
  uint32_t length, seg_a, n_masked, nsp;
  const unsigned char *ids, *pos, *mids;
} rec_view;

static void view_record(const vl_shard_info *h, const unsigned char *r, rec_view *v) {
  v->length = (uint32_t)get_le(r, 2);
  v->seg_a = (uint32_t)get_le(r + 2, 2);
  v->n_masked = (uint32_t)get_le(r + 4, 2);
  v->nsp = r[6];
  v->ids = r + 8;
  v->pos = v->ids + (size_t)h->seq_len * h->id_bytes;
  v->mids = v->pos + 2 * (size_t)h->max_predictions;
}

/* The record checks, on values (so the writer checks its input the same way). what names the
 * sample in messages. */
static vl_status check_sample(const char *what, const vl_shard_info *h, uint32_t length, uint32_t seg_a,
                              uint32_t n_masked, uint32_t nsp, const void *ids, const void *pos,
                              const void *mids, int packed) {
  uint32_t w = h->id_bytes;
#define ID_AT(base, i) (packed ? (uint32_t)get_le((const unsigned char *)(base) + (size_t)(i) * w, (int)w) \
                               : ((const uint32_t *)(base))[i])
#define POS_AT(i) (packed ? (uint32_t)get_le((const unsigned char *)pos + 2 * (size_t)(i), 2) : ((const uint32_t *)pos)[i])
  if (length > h->seq_len || seg_a > length)
    return vl_fail(VL_EIO, "%s: length %" PRIu32 " and segment A %" PRIu32 " do not fit seq_len %" PRIu32, what,
                   length, seg_a, h->seq_len);
  if (n_masked > h->max_predictions)
    return vl_fail(VL_EIO, "%s: %" PRIu32 " masked positions, more than max_predictions %" PRIu32, what, n_masked,
                   h->max_predictions);
  if (nsp > 1) return vl_fail(VL_EIO, "%s: next-sentence label %" PRIu32 " is not 0 or 1", what, nsp);
  for (uint32_t i = 0; i < length; i++) {
    uint32_t id = ID_AT(ids, i);
    if (id >= h->vocab_size)
      return vl_fail(VL_EIO, "%s: token %" PRIu32 " has id %" PRIu32 ", outside the vocab of %" PRIu32, what, i, id,
                     h->vocab_size);
  }
  for (uint32_t k = 0; k < n_masked; k++) {
    uint32_t p = POS_AT(k), id = ID_AT(mids, k);
    if (p >= length)
      return vl_fail(VL_EIO, "%s: masked position %" PRIu32 " is outside the sample's %" PRIu32 " tokens", what, p,
                     length);
    if (k > 0 && p <= POS_AT(k - 1))
      return vl_fail(VL_EIO, "%s: masked positions are not ascending (%" PRIu32 " after %" PRIu32 ")", what, p,
                     POS_AT(k - 1));
    if (id >= h->vocab_size)
      return vl_fail(VL_EIO, "%s: masked position %" PRIu32 " has original id %" PRIu32 ", outside the vocab of %" PRIu32,
                     what, p, id, h->vocab_size);
  }
#undef ID_AT
#undef POS_AT
  return VL_OK;
}

/* ---- writer ---- */

struct vl_shard_writer {
  char *path;
  vl_shard_info h;
  vl_replace rp;
  unsigned char *buf; /* records not yet written */
  size_t used, cap;
  uint32_t crc; /* chained state over the records */
};

static vl_status flush_buf(vl_shard_writer *w) {
  size_t off = 0;
  while (off < w->used) {
    ssize_t k = write(w->rp.fd, w->buf + off, w->used - off);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return vl_fail(VL_EIO, "shard %s: write failed: %s", w->path, k < 0 ? strerror(errno) : "no progress");
    off += (size_t)k;
  }
  w->used = 0;
  return VL_OK;
}

vl_status vl_shard_writer_open(const char *path, const vl_shard_info *p, vl_shard_writer **out) {
  vl_shard_info h = *p;
  h.n_samples = 0;
  h.id_bytes = id_bytes_for(h.vocab_size);
  if (check_fields(path, &h) != VL_OK) return VL_EINVAL; /* the message says what; a bad argument here */
  h.record_size = vl_shard_record_size(h.seq_len, h.max_predictions, h.id_bytes);
  vl_shard_writer *w = calloc(1, sizeof *w);
  if (!w || !(w->path = strdup(path))) {
    free(w);
    return vl_fail(VL_EOOM, "shard %s: out of memory", path);
  }
  w->h = h;
  w->cap = (size_t)h.record_size * (((size_t)1 << 20) / h.record_size + 1);
  w->buf = malloc(w->cap);
  w->crc = 0xFFFFFFFFu;
  vl_status s = w->buf ? vl_replace_begin(&w->rp, "shard", path) : vl_fail(VL_EOOM, "shard %s: out of memory", path);
  if (s == VL_OK) {
    unsigned char zero[VL_SHARD_HEADER_SIZE] = {0}; /* the header's place, written at finish */
    memcpy(w->buf, zero, sizeof zero);
    w->used = sizeof zero;
    s = flush_buf(w);
    if (s != VL_OK) vl_replace_abort(&w->rp);
  }
  if (s != VL_OK) {
    free(w->buf);
    free(w->path);
    free(w);
    return s;
  }
  *out = w;
  return VL_OK;
}

uint64_t vl_shard_writer_count(const vl_shard_writer *w) { return w->h.n_samples; }

vl_status vl_shard_writer_add(vl_shard_writer *w, const vl_shard_sample *s) {
  const vl_shard_info *h = &w->h;
  char what[64];
  snprintf(what, sizeof what, "shard writer: sample %" PRIu64, h->n_samples);
  if (s->nsp != 0 && s->nsp != 1) return vl_fail(VL_EINVAL, "%s: next-sentence label %d is not 0 or 1", what, s->nsp);
  if (check_sample(what, h, s->length, s->seg_a, s->n_masked, (uint32_t)s->nsp, s->ids, s->positions, s->masked_ids, 0) !=
      VL_OK)
    return VL_EINVAL;
  if (h->n_samples >= (UINT64_MAX / h->record_size) - 1)
    return vl_fail(VL_EINVAL, "%s: too many samples for one shard", what);
  if (w->used + h->record_size > w->cap) VL_TRY(flush_buf(w));
  unsigned char *r = w->buf + w->used;
  memset(r, 0, h->record_size);
  put_le(r, s->length, 2);
  put_le(r + 2, s->seg_a, 2);
  put_le(r + 4, s->n_masked, 2);
  r[6] = (unsigned char)s->nsp;
  rec_view v;
  view_record(h, r, &v);
  int ib = (int)h->id_bytes;
  for (uint32_t i = 0; i < s->length; i++) put_le((unsigned char *)v.ids + (size_t)i * ib, s->ids[i], ib);
  for (uint32_t k = 0; k < s->n_masked; k++) {
    put_le((unsigned char *)v.pos + 2 * (size_t)k, s->positions[k], 2);
    put_le((unsigned char *)v.mids + (size_t)k * ib, s->masked_ids[k], ib);
  }
  w->crc = crc_update(w->crc, r, h->record_size);
  w->used += h->record_size;
  w->h.n_samples++;
  return VL_OK;
}

static void writer_free(vl_shard_writer *w) {
  free(w->buf);
  free(w->path);
  free(w);
}

vl_status vl_shard_writer_finish(vl_shard_writer *w) {
  vl_status s = flush_buf(w);
  if (s == VL_OK) {
    unsigned char hb[VL_SHARD_HEADER_SIZE];
    encode_header(&w->h, ~w->crc, hb);
    ssize_t k = pwrite(w->rp.fd, hb, sizeof hb, 0);
    if (k != (ssize_t)sizeof hb)
      s = vl_fail(VL_EIO, "shard %s: writing the header failed: %s", w->path, k < 0 ? strerror(errno) : "short write");
  }
  if (s == VL_OK) s = vl_replace_commit(&w->rp);
  vl_replace_abort(&w->rp); /* a no-op once committed */
  writer_free(w);
  return s;
}

void vl_shard_writer_abort(vl_shard_writer *w) {
  if (!w) return;
  vl_replace_abort(&w->rp);
  writer_free(w);
}

/* ---- reader ---- */

typedef struct shard_file {
  char *path;
  const unsigned char *map;
  size_t size;
  vl_shard_info h;
} shard_file;

struct vl_shard_set {
  shard_file *f;
  size_t n;
  uint64_t *start; /* start[i]: the global index of file i's first sample; start[n] = total */
  vl_shard_info info;
};

static void file_close(shard_file *f) {
  if (f->map && f->size) munmap((void *)f->map, f->size);
  free(f->path);
  memset(f, 0, sizeof *f);
}

/* Maps and validates one file into f (left zeroed on failure). */
static vl_status file_open(const char *path, shard_file *f) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return vl_fail(VL_EIO, "shard %s: cannot open: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return vl_fail(VL_EIO, "shard %s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return vl_fail(VL_EIO, "shard %s: not a regular file", path);
  }
  uint64_t size = (uint64_t)st.st_size;
  if (size == 0) {
    close(fd);
    return vl_fail(VL_EIO, "shard %s: empty file (0 bytes), not a shard", path);
  }
  void *m = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd); /* the mapping keeps the file */
  if (m == MAP_FAILED) return vl_fail(VL_EIO, "shard %s: cannot mmap %" PRIu64 " bytes: %s", path, size, strerror(e));
  const unsigned char *b = m;
  vl_status s = VL_OK;
  vl_shard_info h = {0};
  if (size < 8 || memcmp(b, VL_SHARD_MAGIC, 8) != 0) {
    char got[8 * 4 + 1] = "";
    size_t g = 0;
    for (uint64_t i = 0; i < 8 && i < size; i++)
      g += (size_t)snprintf(got + g, sizeof got - g, (b[i] >= 32 && b[i] < 127 && b[i] != '\\' && b[i] != '"') ? "%c" : "\\x%02x", b[i]);
    s = vl_fail(VL_EIO, "shard %s: not a BERT shard (magic \"%s\", expected \"%s\")", path, got, VL_SHARD_MAGIC);
    goto done;
  }
  uint32_t version = size >= 12 ? (uint32_t)get_le(b + 8, 4) : VL_SHARD_VERSION;
  if (version != VL_SHARD_VERSION) {
    s = vl_fail(VL_EIO, "shard %s: format version %" PRIu32 " is not supported (this reader reads version %u)", path,
                version, VL_SHARD_VERSION);
    goto done;
  }
  if (size < VL_SHARD_HEADER_SIZE) {
    s = vl_fail(VL_EIO, "shard %s: truncated: %" PRIu64 " bytes, shorter than the %u-byte header", path, size,
                VL_SHARD_HEADER_SIZE);
    goto done;
  }
  uint32_t stored = (uint32_t)get_le(b + 124, 4), computed = vl_crc32c(b, 124);
  if (stored != computed) {
    s = vl_fail(VL_EIO, "shard %s: header checksum mismatch (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")", path,
                stored, computed);
    goto done;
  }
  uint32_t hsize = (uint32_t)get_le(b + 12, 4);
  h.n_samples = get_le(b + 16, 8);
  h.seq_len = (uint32_t)get_le(b + 24, 4);
  h.max_predictions = (uint32_t)get_le(b + 28, 4);
  h.vocab_size = (uint32_t)get_le(b + 32, 4);
  h.id_bytes = (uint32_t)get_le(b + 36, 4);
  h.record_size = (uint32_t)get_le(b + 40, 4);
  h.vocab_crc = (uint32_t)get_le(b + 44, 4);
  uint64_t payload = get_le(b + 48, 8);
  uint32_t payload_crc = (uint32_t)get_le(b + 56, 4);
  h.flags = (uint32_t)get_le(b + 60, 4);
  h.masked_lm_prob = get_f64(b + 64);
  h.short_seq_prob = get_f64(b + 72);
  h.seed = get_le(b + 80, 8);
  h.dupe_factor = (uint32_t)get_le(b + 88, 4);
  if (hsize != VL_SHARD_HEADER_SIZE) {
    s = vl_fail(VL_EIO, "shard %s: header_size %" PRIu32 " (version 1 has %u)", path, hsize, VL_SHARD_HEADER_SIZE);
    goto done;
  }
  if ((s = check_fields(path, &h)) != VL_OK) goto done;
  if (h.id_bytes != id_bytes_for(h.vocab_size)) {
    s = vl_fail(VL_EIO, "shard %s: id_bytes %" PRIu32 " for vocab_size %" PRIu32 " (expected %" PRIu32 ")", path,
                h.id_bytes, h.vocab_size, id_bytes_for(h.vocab_size));
    goto done;
  }
  uint32_t rs = vl_shard_record_size(h.seq_len, h.max_predictions, h.id_bytes);
  if (h.record_size != rs) {
    s = vl_fail(VL_EIO, "shard %s: record_size %" PRIu32 " (seq_len %" PRIu32 ", max_predictions %" PRIu32
                " and %" PRIu32 "-byte ids make %" PRIu32 ")", path, h.record_size, h.seq_len, h.max_predictions,
                h.id_bytes, rs);
    goto done;
  }
  if (h.n_samples > (UINT64_MAX - VL_SHARD_HEADER_SIZE) / rs || payload != h.n_samples * rs) {
    s = vl_fail(VL_EIO, "shard %s: payload_bytes %" PRIu64 " is not n_samples %" PRIu64 " x record_size %" PRIu32, path,
                payload, h.n_samples, rs);
    goto done;
  }
  uint64_t want = VL_SHARD_HEADER_SIZE + payload;
  if (size < want) {
    s = vl_fail(VL_EIO, "shard %s: truncated: header says %" PRIu64 " bytes, file has %" PRIu64, path, want, size);
    goto done;
  }
  if (size > want) {
    s = vl_fail(VL_EIO, "shard %s: %" PRIu64 " bytes after the end: header says %" PRIu64 " bytes, file has %" PRIu64,
                path, size - want, want, size);
    goto done;
  }
  computed = vl_crc32c(b + VL_SHARD_HEADER_SIZE, (size_t)payload);
  if (computed != payload_crc) {
    s = vl_fail(VL_EIO, "shard %s: checksum mismatch (stored 0x%08" PRIx32 ", computed 0x%08" PRIx32 ")", path,
                payload_crc, computed);
    goto done;
  }
  if (!(f->path = strdup(path))) s = vl_fail(VL_EOOM, "shard %s: out of memory", path);
done:
  if (s != VL_OK) {
    munmap(m, (size_t)size);
    return s;
  }
  f->map = b;
  f->size = (size_t)size;
  f->h = h;
  return VL_OK;
}

vl_status vl_shard_set_open(const char *const *paths, size_t n, vl_shard_set **out) {
  if (n == 0) return vl_fail(VL_EINVAL, "shard set: no files");
  vl_shard_set *s = calloc(1, sizeof *s);
  if (!s || !(s->f = calloc(n, sizeof *s->f)) || !(s->start = calloc(n + 1, sizeof *s->start))) {
    if (s) free(s->f);
    free(s);
    return vl_fail(VL_EOOM, "shard set: out of memory");
  }
  vl_status st = VL_OK;
  for (size_t i = 0; i < n && st == VL_OK; i++) {
    st = file_open(paths[i], &s->f[i]);
    if (st != VL_OK) break;
    s->n = i + 1;
    const vl_shard_info *a = &s->f[0].h, *b = &s->f[i].h;
    if (a->seq_len != b->seq_len || a->max_predictions != b->max_predictions || a->vocab_size != b->vocab_size ||
        a->vocab_crc != b->vocab_crc)
      st = vl_fail(VL_EIO, "shard %s: seq_len %" PRIu32 ", max_predictions %" PRIu32 ", vocab %" PRIu32 " (crc 0x%08" PRIx32
                   ") differ from %s's %" PRIu32 ", %" PRIu32 ", %" PRIu32 " (crc 0x%08" PRIx32 ")", paths[i], b->seq_len,
                   b->max_predictions, b->vocab_size, b->vocab_crc, paths[0], a->seq_len, a->max_predictions,
                   a->vocab_size, a->vocab_crc);
    else s->start[i + 1] = s->start[i] + b->n_samples;
  }
  if (st != VL_OK) {
    vl_shard_set_close(s);
    return st;
  }
  s->info = s->f[0].h;
  s->info.n_samples = s->start[n];
  *out = s;
  return VL_OK;
}

static int ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && strcmp(s + a - b, suf) == 0;
}

vl_status vl_shard_set_open_path(const char *path, vl_shard_set **out) {
  if (!vl_fs_is_dir(path)) return vl_shard_set_open(&path, 1, out);
  char **names;
  int n;
  VL_TRY(vl_fs_list_dir(path, &names, &n));
  char **paths = calloc((size_t)n + 1, sizeof *paths);
  size_t k = 0;
  vl_status s = paths ? VL_OK : vl_fail(VL_EOOM, "shard set: out of memory");
  for (int i = 0; i < n && s == VL_OK; i++) {
    if (!ends_with(names[i], ".shard")) continue;
    size_t len = strlen(path) + strlen(names[i]) + 2;
    char *p = malloc(len);
    if (!p) {
      s = vl_fail(VL_EOOM, "shard set: out of memory");
      break;
    }
    snprintf(p, len, "%s/%s", path, names[i]);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) paths[k++] = p;
    else free(p);
  }
  if (s == VL_OK && k == 0) s = vl_fail(VL_EIO, "shard set: %s holds no *.shard files", path);
  if (s == VL_OK) s = vl_shard_set_open((const char *const *)paths, k, out);
  for (size_t i = 0; paths && i < k; i++) free(paths[i]);
  free(paths);
  vl_fs_free_list(names, n);
  return s;
}

void vl_shard_set_close(vl_shard_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n; i++) file_close(&s->f[i]);
  free(s->f);
  free(s->start);
  free(s);
}

const vl_shard_info *vl_shard_set_info(const vl_shard_set *s) { return &s->info; }
size_t vl_shard_set_files(const vl_shard_set *s) { return s->n; }
const char *vl_shard_set_path(const vl_shard_set *s, size_t i) { return i < s->n ? s->f[i].path : NULL; }
uint64_t vl_shard_set_file_samples(const vl_shard_set *s, size_t i) { return i < s->n ? s->f[i].h.n_samples : 0; }

/* The file holding global sample g (< total), by binary search over start[]. */
static size_t file_of(const vl_shard_set *s, uint64_t g) {
  size_t lo = 0, hi = s->n; /* start[lo] <= g < start[hi] */
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (s->start[mid] <= g) lo = mid;
    else hi = mid;
  }
  return lo;
}

static const unsigned char *record_of(const vl_shard_set *s, uint64_t g, size_t *fi) {
  size_t i = file_of(s, g);
  const shard_file *f = &s->f[i];
  *fi = i;
  return f->map + VL_SHARD_HEADER_SIZE + (g - s->start[i]) * f->h.record_size;
}

vl_status vl_shard_set_gather(const vl_shard_set *s, const int64_t *idx, size_t b, const vl_shard_batch *out) {
  const vl_shard_info *h = &s->info;
  uint64_t total = s->start[s->n];
  for (size_t j = 0; j < b; j++) { /* every check before the first write */
    if (idx[j] < 0 || (uint64_t)idx[j] >= total)
      return vl_fail(VL_EINVAL, "shard set: sample index %" PRId64 " (batch row %zu) is outside 0..%" PRIu64, idx[j], j,
                     total ? total - 1 : 0);
    size_t fi;
    rec_view v;
    view_record(h, record_of(s, (uint64_t)idx[j], &fi), &v);
    char what[1100];
    snprintf(what, sizeof what, "shard %s: sample %" PRIu64 " (global %" PRId64 ")", s->f[fi].path,
             (uint64_t)idx[j] - s->start[fi], idx[j]);
    VL_TRY(check_sample(what, h, v.length, v.seg_a, v.n_masked, v.nsp, v.ids, v.pos, v.mids, 1));
  }
  size_t L = h->seq_len, P = h->max_predictions;
  int w = (int)h->id_bytes;
  for (size_t j = 0; j < b; j++) {
    size_t fi;
    rec_view v;
    view_record(h, record_of(s, (uint64_t)idx[j], &fi), &v);
    int64_t *ids = out->input_ids ? out->input_ids + j * L : NULL;
    for (size_t i = 0; i < L; i++) {
      int in = i < v.length;
      if (ids) ids[i] = in ? (int64_t)get_le(v.ids + i * (size_t)w, w) : 0;
      if (out->token_type_ids) out->token_type_ids[j * L + i] = in && i >= v.seg_a;
      if (out->attention_mask) out->attention_mask[j * L + i] = in;
      if (out->labels) out->labels[j * L + i] = -100;
    }
    if (out->next_sentence_label) out->next_sentence_label[j] = v.nsp;
    for (size_t k = 0; k < P; k++) {
      int real = k < v.n_masked;
      int64_t p = real ? (int64_t)get_le(v.pos + 2 * k, 2) : 0;
      int64_t id = real ? (int64_t)get_le(v.mids + k * (size_t)w, w) : 0;
      if (out->masked_positions) out->masked_positions[j * P + k] = p;
      if (out->masked_ids) out->masked_ids[j * P + k] = id;
      if (out->masked_weights) out->masked_weights[j * P + k] = real ? 1.0f : 0.0f;
      if (real && out->labels) out->labels[j * L + (size_t)p] = id;
    }
  }
  return VL_OK;
}
