/* runtime/io/tfevents.c: TensorBoard event files (see tfevents.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <isa-l/crc.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime/io/file_io.h"
#include "runtime/io/fsutil.h"

/* ---- CRC32C ---- */

uint32_t vl_crc32c(const void *buf, size_t n) {
  /* ISA-L takes an int length and a non-const buffer (it only reads it); long inputs go in
   * pieces, chaining the uninverted state. */
  const unsigned char *p = buf;
  unsigned int state = 0xFFFFFFFFu;
  while (n > 0) {
    size_t k = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
    state = crc32_iscsi((unsigned char *)p, (int)k, state);
    p += k;
    n -= k;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  /* ISA-L's AVX-512 path (inputs of a few KiB and more) returns with the upper halves of the
   * vector registers dirty. Every SSE instruction after that pays a state-merge penalty: libm's
   * exp ran 30 times slower for the rest of the process once a shard's checksum had been read
   * (tests/c/test_tfevents.c checks the state). vzeroupper clears the state; it is a no-op cost when clean. The
   * CPUs without AVX take the cpuid check (ISA-L's own dispatch already requires AVX for it). */
  if (__builtin_cpu_supports("avx")) __asm__ volatile("vzeroupper" ::: "memory");
#endif
  return ~(uint32_t)state;
}

uint32_t vl_crc32c_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

/* ---- buffer and protobuf ---- */

static void pb_append(vl_pbuf *b, const void *data, size_t n) {
  if (b->oom) return;
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n) cap *= 2;
    unsigned char *p = realloc(b->p, cap);
    if (!p) {
      b->oom = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
  if (n) memcpy(b->p + b->n, data, n);
  b->n += n;
}

void vl_pb_varint(vl_pbuf *b, uint64_t v) {
  unsigned char tmp[10];
  int k = 0;
  do {
    unsigned char byte = v & 0x7f;
    v >>= 7;
    tmp[k++] = byte | (v ? 0x80 : 0);
  } while (v);
  pb_append(b, tmp, (size_t)k);
}

void vl_pb_key(vl_pbuf *b, int field, int wire_type) { vl_pb_varint(b, ((uint64_t)field << 3) | (uint64_t)wire_type); }

static void put_le(unsigned char *dst, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) dst[i] = (unsigned char)(v >> (8 * i));
}

/* A fixed-width field: wire type 1 (8 bytes) or 5 (4 bytes), little-endian. */
static void pb_fixed(vl_pbuf *b, int field, int wire, uint64_t u, int bytes) {
  unsigned char tmp[8];
  put_le(tmp, u, bytes);
  vl_pb_key(b, field, wire);
  pb_append(b, tmp, (size_t)bytes);
}

void vl_pb_double(vl_pbuf *b, int field, double v) {
  uint64_t u;
  memcpy(&u, &v, 8);
  pb_fixed(b, field, 1, u, 8);
}

void vl_pb_float(vl_pbuf *b, int field, float v) {
  uint32_t u;
  memcpy(&u, &v, 4);
  pb_fixed(b, field, 5, u, 4);
}

void vl_pb_int64(vl_pbuf *b, int field, int64_t v) {
  vl_pb_key(b, field, 0);
  vl_pb_varint(b, (uint64_t)v);
}

void vl_pb_bytes(vl_pbuf *b, int field, const void *data, size_t n) {
  vl_pb_key(b, field, 2);
  vl_pb_varint(b, (uint64_t)n);
  pb_append(b, data, n);
}

vl_status vl_pbuf_status(const vl_pbuf *b, const char *what) {
  return b->oom ? vl_fail(VL_EOOM, "%s: out of memory", what) : VL_OK;
}

void vl_pbuf_free(vl_pbuf *b) {
  free(b->p);
  memset(b, 0, sizeof *b);
}

void vl_tfevents_encode_scalar(vl_pbuf *b, double wall_time, int64_t step, const char *tag, size_t tag_len,
                               float value) {
  /* Nested messages are length-prefixed, so the inner ones are built first. */
  vl_pbuf val = {0}, sum = {0};
  vl_pb_bytes(&val, 1, tag, tag_len);
  vl_pb_float(&val, 2, value);
  vl_pb_bytes(&sum, 1, val.p, val.n);
  vl_pb_double(b, 1, wall_time);
  vl_pb_int64(b, 2, step);
  vl_pb_bytes(b, 5, sum.p, sum.n);
  if (val.oom || sum.oom) b->oom = 1;
  vl_pbuf_free(&val);
  vl_pbuf_free(&sum);
}

void vl_tfevents_encode_version(vl_pbuf *b, double wall_time, const char *version) {
  vl_pb_double(b, 1, wall_time);
  vl_pb_bytes(b, 3, version, strlen(version));
}

void vl_tfrecord_frame(vl_pbuf *b, const void *data, size_t n) {
  unsigned char hdr[12], tail[4];
  put_le(hdr, (uint64_t)n, 8);
  put_le(hdr + 8, vl_crc32c_mask(vl_crc32c(hdr, 8)), 4);
  put_le(tail, vl_crc32c_mask(vl_crc32c(data, n)), 4);
  pb_append(b, hdr, 12);
  pb_append(b, data, n);
  pb_append(b, tail, 4);
}

/* ---- time ---- */

double vl_unix_time(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the writer ---- */

struct vl_tfevents {
  FILE *f;
  char *path;
  int failed;     /* a write failed: the file was cut back to `whole`, and takes no more records */
  off_t whole;    /* bytes of whole records known to be in the file (after the last good flush) */
  off_t pending;  /* bytes handed to stdio since */
};

/* After a failed write or flush (a full disk): the file is cut back to its whole records, so
 * that it ends at a record boundary as if the failed records had never been written (readers
 * would otherwise meet half a record). Best effort: the write's error is what is reported. */
static void cut_back(vl_tfevents *w) {
  w->failed = 1;
  if (ftruncate(fileno(w->f), w->whole) != 0) { /* the reader still stops at the tear */
  }
}

/* The host name as it may stand in a file name: anything but [A-Za-z0-9._-] becomes '_'. */
static void host_part(char *out, size_t cap) {
  char h[256] = {0};
  if (gethostname(h, sizeof h - 1) != 0 || h[0] == '\0') snprintf(h, sizeof h, "localhost");
  size_t k = 0;
  for (size_t i = 0; h[i] && k + 1 < cap; i++) {
    char c = h[i];
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' ||
             c == '_';
    out[k++] = ok ? c : '_';
  }
  out[k] = '\0';
}

static vl_status write_bytes(vl_tfevents *w, const void *p, size_t n) {
  if (fwrite(p, 1, n, w->f) != n) {
    int e = errno;
    cut_back(w);
    return vl_fail(VL_EIO, "EventWriter: %s: write failed: %s", w->path, strerror(e));
  }
  w->pending += (off_t)n;
  return VL_OK;
}

vl_status vl_tfevents_open(const char *dir, vl_tfevents **out) {
  VL_TRY(vl_fs_mkdir("EventWriter", dir));
  char host[128];
  host_part(host, sizeof host);
  double now = vl_unix_time();
  size_t cap = strlen(dir) + 256;
  char *path = malloc(cap);
  vl_tfevents *w = calloc(1, sizeof *w);
  if (!path || !w) {
    free(path);
    free(w);
    return vl_fail(VL_EOOM, "EventWriter: out of memory");
  }
  /* O_EXCL: a second writer in the same second and process (or a resumed run) gets its own
   * file instead of interleaving records with the first. */
  int fd = -1;
  for (int k = 0; k < 1000 && fd < 0; k++) {
    if (k == 0)
      snprintf(path, cap, "%s/events.out.tfevents.%lld.%s.%ld.v100lua", dir, (long long)now, host, (long)getpid());
    else
      snprintf(path, cap, "%s/events.out.tfevents.%lld.%s.%ld.%d.v100lua", dir, (long long)now, host,
               (long)getpid(), k);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_APPEND | O_CLOEXEC, 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    vl_status s = vl_fail(VL_EIO, "EventWriter: %s: cannot create: %s", path, strerror(errno));
    free(path);
    free(w);
    return s;
  }
  /* Plain buffered appends, not the temp-file-and-rename of checkpoints (replace.h): TensorBoard
   * reads event files while they grow and picks up new records from the offset it reached, so
   * the file must stay in place and only ever gain whole records at its end. A crash can at
   * worst leave a torn last record, which readers (this one included) report or stop at. */
  w->f = fdopen(fd, "ab");
  if (!w->f) {
    vl_status s = vl_fail(VL_EIO, "EventWriter: %s: %s", path, strerror(errno));
    close(fd);
    unlink(path);
    free(path);
    free(w);
    return s;
  }
  w->path = path;
  vl_pbuf ev = {0}, rec = {0};
  vl_tfevents_encode_version(&ev, now, VL_TFEVENTS_VERSION);
  vl_tfrecord_frame(&rec, ev.p, ev.n);
  vl_status s = vl_pbuf_status(&ev, "EventWriter");
  if (s == VL_OK) s = vl_pbuf_status(&rec, "EventWriter");
  if (s == VL_OK) s = write_bytes(w, rec.p, rec.n);
  if (s == VL_OK) s = vl_tfevents_flush(w);
  vl_pbuf_free(&ev);
  vl_pbuf_free(&rec);
  if (s != VL_OK) {
    fclose(w->f);
    unlink(path);
    free(path);
    free(w);
    return s;
  }
  *out = w;
  return VL_OK;
}

const char *vl_tfevents_path(const vl_tfevents *w) { return w->path; }

vl_status vl_tfevents_check_tag(const char *tag, size_t tag_len) {
  if (tag_len == 0) return vl_fail(VL_EINVAL, "EventWriter: the tag is empty");
  if (memchr(tag, '\0', tag_len)) return vl_fail(VL_EINVAL, "EventWriter: the tag contains a NUL byte");
  if (vl_utf8_valid_prefix((const unsigned char *)tag, tag_len) != tag_len) {
    char shown[96];
    return vl_fail(VL_EINVAL, "EventWriter: the tag \"%s\" is not valid UTF-8",
                   vl_escape_bytes(tag, tag_len, shown, sizeof shown));
  }
  return VL_OK;
}

vl_status vl_tfevents_scalar(vl_tfevents *w, const char *tag, size_t tag_len, double value, int64_t step,
                             double wall_time) {
  if (w->failed) return vl_fail(VL_EIO, "EventWriter: %s: an earlier write failed; the file is closed to records", w->path);
  VL_TRY(vl_tfevents_check_tag(tag, tag_len));
  float v;
  if (isfinite(value) && fabs(value) > FLT_MAX) v = value > 0 ? INFINITY : -INFINITY;
  else v = (float)value;
  vl_pbuf ev = {0}, rec = {0};
  vl_tfevents_encode_scalar(&ev, wall_time, step, tag, tag_len, v);
  vl_tfrecord_frame(&rec, ev.p, ev.n);
  vl_status s = vl_pbuf_status(&ev, "EventWriter");
  if (s == VL_OK) s = vl_pbuf_status(&rec, "EventWriter");
  if (s == VL_OK) s = write_bytes(w, rec.p, rec.n);
  vl_pbuf_free(&ev);
  vl_pbuf_free(&rec);
  return s;
}

vl_status vl_tfevents_flush(vl_tfevents *w) {
  /* After a failure stdio may still hold part of a record: flushing it would tear the file again. */
  if (w->failed) return vl_fail(VL_EIO, "EventWriter: %s: an earlier write failed; the file is closed to records", w->path);
  if (fflush(w->f) != 0) {
    int e = errno;
    cut_back(w);
    return vl_fail(VL_EIO, "EventWriter: %s: flush failed: %s", w->path, strerror(e));
  }
  w->whole += w->pending;
  w->pending = 0;
  return VL_OK;
}

vl_status vl_tfevents_close(vl_tfevents *w) {
  if (!w) return VL_OK;
  vl_status s = VL_OK;
  if (w->failed) {
    /* fclose flushes what stdio still holds (part of a failed record); cut it off again through
     * a second descriptor of the same file. The write's error was reported already. */
    int fd = dup(fileno(w->f));
    fclose(w->f);
    if (fd >= 0) {
      if (ftruncate(fd, w->whole) != 0) { /* best effort, as in cut_back */
      }
      close(fd);
    }
  } else {
    if (fflush(w->f) != 0) s = vl_fail(VL_EIO, "EventWriter: %s: flush failed: %s", w->path, strerror(errno));
    if (fclose(w->f) != 0 && s == VL_OK) s = vl_fail(VL_EIO, "EventWriter: %s: close failed: %s", w->path, strerror(errno));
  }
  free(w->path);
  free(w);
  return s;
}

/* ---- the reader ---- */

typedef struct pb_in {
  const unsigned char *p, *end;
} pb_in;

static int rd_varint(pb_in *in, uint64_t *v) {
  uint64_t r = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (in->p >= in->end) return 0;
    unsigned char c = *in->p++;
    r |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) {
      *v = r;
      return 1;
    }
  }
  return 0;
}

static uint64_t get_le(const unsigned char *p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

/* One field: its number and wire type; a varint or fixed value in num, a length-delimited
 * payload in data/len. Returns 0 on malformed input. */
typedef struct pb_field {
  int number, wire;
  uint64_t num;
  const unsigned char *data;
  size_t len;
} pb_field;

static int rd_field(pb_in *in, pb_field *f) {
  uint64_t key;
  if (!rd_varint(in, &key)) return 0;
  f->number = (int)(key >> 3);
  f->wire = (int)(key & 7);
  if (f->number == 0) return 0;
  switch (f->wire) {
  case 0: return rd_varint(in, &f->num);
  case 1:
    if (in->end - in->p < 8) return 0;
    f->num = get_le(in->p, 8);
    in->p += 8;
    return 1;
  case 5:
    if (in->end - in->p < 4) return 0;
    f->num = get_le(in->p, 4);
    in->p += 4;
    return 1;
  case 2:
    if (!rd_varint(in, &f->num) || f->num > (uint64_t)(in->end - in->p)) return 0;
    f->data = in->p;
    f->len = (size_t)f->num;
    in->p += f->len;
    return 1;
  default: return 0; /* groups (3, 4) are not used by these messages */
  }
}

typedef struct reader_state {
  vl_tfevents_data d;
  size_t cap;
} reader_state;

static int push_event(reader_state *st, double wall, int64_t step, const unsigned char *tag, size_t tag_len,
                      float value) {
  if (st->d.n == st->cap) {
    size_t cap = st->cap ? 2 * st->cap : 64;
    vl_tfevent *e = realloc(st->d.ev, cap * sizeof *e);
    if (!e) return 0;
    st->d.ev = e;
    st->cap = cap;
  }
  char *t = malloc(tag_len + 1);
  if (!t) return 0;
  memcpy(t, tag, tag_len);
  t[tag_len] = '\0';
  st->d.ev[st->d.n++] = (vl_tfevent){wall, step, t, tag_len, value};
  return 1;
}

/* Decodes one Value of a Summary into st (when it has a simple_value). */
static const char *decode_value(reader_state *st, double wall, int64_t step, const unsigned char *p, size_t n,
                                int *oom) {
  pb_in in = {p, p + n};
  pb_field g;
  const unsigned char *tag = (const unsigned char *)"";
  size_t tag_len = 0;
  int has_value = 0;
  float value = 0;
  while (in.p < in.end) {
    if (!rd_field(&in, &g)) return "malformed Summary.Value protobuf";
    if (g.number == 1 && g.wire == 2) tag = g.data, tag_len = g.len;
    else if (g.number == 2 && g.wire == 5) {
      uint32_t u = (uint32_t)g.num;
      memcpy(&value, &u, 4);
      has_value = 1;
    }
  }
  if (has_value && !push_event(st, wall, step, tag, tag_len, value)) return *oom = 1, "out of memory";
  return NULL;
}

/* Decodes one Event. Returns NULL or a description of what is malformed. Two passes: protobuf
 * fields may come in any order, so wall_time and step are known before the summary is read. */
static const char *decode_event(reader_state *st, const unsigned char *p, size_t n, int *oom) {
  double wall = 0;
  int64_t step = 0;
  pb_field f;
  pb_in in = {p, p + n};
  while (in.p < in.end) {
    if (!rd_field(&in, &f)) return "malformed Event protobuf";
    if (f.number == 1 && f.wire == 1) memcpy(&wall, &f.num, 8);
    else if (f.number == 2 && f.wire == 0) step = (int64_t)f.num;
    else if (f.number == 3 && f.wire == 2 && !st->d.file_version) {
      st->d.file_version = malloc(f.len + 1);
      if (!st->d.file_version) return *oom = 1, "out of memory";
      memcpy(st->d.file_version, f.data, f.len);
      st->d.file_version[f.len] = '\0';
    }
  }
  in = (pb_in){p, p + n};
  while (in.p < in.end) {
    rd_field(&in, &f); /* checked by the first pass */
    if (f.number != 5 || f.wire != 2) continue;
    pb_in sin = {f.data, f.data + f.len};
    pb_field v;
    while (sin.p < sin.end) {
      if (!rd_field(&sin, &v)) return "malformed Summary protobuf";
      if (v.number != 1 || v.wire != 2) continue;
      const char *bad = decode_value(st, wall, step, v.data, v.len, oom);
      if (bad) return bad;
    }
  }
  return NULL;
}

void vl_tfevents_data_free(vl_tfevents_data *d) {
  for (size_t i = 0; i < d->n; i++) free(d->ev[i].tag);
  free(d->ev);
  free(d->file_version);
  memset(d, 0, sizeof *d);
}

static vl_status read_all(const char *path, unsigned char **buf, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) return vl_fail(VL_EIO, "read_events: %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, len = 0;
  unsigned char *b = malloc(cap);
  while (b) {
    len += fread(b + len, 1, cap - len, f);
    if (len < cap) break;
    unsigned char *nb = realloc(b, cap * 2);
    if (!nb) {
      free(b);
      b = NULL;
      break;
    }
    b = nb;
    cap *= 2;
  }
  int err = ferror(f);
  int e = errno;
  fclose(f);
  if (!b) return vl_fail(VL_EOOM, "read_events: %s: out of memory", path);
  if (err) {
    free(b);
    return vl_fail(VL_EIO, "read_events: %s: read error: %s", path, strerror(e));
  }
  *buf = b;
  *n = len;
  return VL_OK;
}

vl_status vl_tfevents_read(const char *path, vl_tfevents_data *out) {
  unsigned char *b = NULL;
  size_t n = 0;
  VL_TRY(read_all(path, &b, &n));
  reader_state st = {{0}, 0};
  vl_status s = VL_OK;
  size_t off = 0;
  while (off < n && s == VL_OK) {
    size_t rec = st.d.records + 1, left = n - off;
    /* The file ending inside a record is a write cut short (a full disk, a crash), not damage
     * inside: the whole records before it are read, as TensorBoard reads them, and the tear is
     * reported beside them. A CRC mismatch is damage and fails the read. */
    if (left < 12) {
      st.d.torn = true;
      st.d.torn_at = off;
      snprintf(st.d.torn_what, sizeof st.d.torn_what, "record %zu (byte %zu): truncated header: %zu of 12 bytes",
               rec, off, left);
      break;
    }
    uint64_t len = get_le(b + off, 8);
    uint32_t stored = (uint32_t)get_le(b + off + 8, 4), want = vl_crc32c_mask(vl_crc32c(b + off, 8));
    if (stored != want) {
      s = vl_fail(VL_EIO, "read_events: %s: record %zu (byte %zu): length CRC mismatch (stored 0x%08x, computed 0x%08x)",
                  path, rec, off, stored, want);
      break;
    }
    if (len > left - 12 || left - 12 - len < 4) {
      st.d.torn = true;
      st.d.torn_at = off;
      snprintf(st.d.torn_what, sizeof st.d.torn_what, "record %zu (byte %zu): truncated: %zu of %llu data+CRC bytes",
               rec, off, left - 12, (unsigned long long)len + 4);
      break;
    }
    const unsigned char *data = b + off + 12;
    stored = (uint32_t)get_le(data + len, 4);
    want = vl_crc32c_mask(vl_crc32c(data, (size_t)len));
    if (stored != want) {
      s = vl_fail(VL_EIO, "read_events: %s: record %zu (byte %zu): data CRC mismatch (stored 0x%08x, computed 0x%08x)",
                  path, rec, off, stored, want);
      break;
    }
    int oom = 0;
    const char *bad = decode_event(&st, data, (size_t)len, &oom);
    if (bad) {
      s = vl_fail(oom ? VL_EOOM : VL_EIO, "read_events: %s: record %zu (byte %zu): %s", path, rec, off, bad);
      break;
    }
    st.d.records++;
    off += 12 + (size_t)len + 4;
  }
  free(b);
  if (s != VL_OK) {
    vl_tfevents_data_free(&st.d);
    return s;
  }
  *out = st.d;
  return VL_OK;
}
