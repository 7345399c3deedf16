/* runtime/io/file_io.c: plain and gzip reading on zlib's inflate (see file_io.h). */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/file_io.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Compressed input is read in blocks of this size. */
#define IN_BUF ((size_t)256 << 10)

static vl_status fail_errno(const vl_reader *r, const char *doing) {
  return vl_fail(VL_EIO, "%s: %s: %s%s", r->what, r->path, doing, strerror(errno));
}

vl_status vl_reader_open(vl_reader *r, const char *what, const char *path) {
  memset(r, 0, sizeof *r);
  r->what = what;
  r->path = path;
  errno = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return vl_fail(VL_EIO, "%s: %s: %s", what, path, errno ? strerror(errno) : "cannot open");
  struct stat st;
  if (fstat(fileno(f), &st) != 0) {
    vl_status s = vl_fail(VL_EIO, "%s: %s: %s", what, path, strerror(errno));
    fclose(f);
    return s;
  }
  if (S_ISDIR(st.st_mode)) {
    fclose(f);
    return vl_fail(VL_EIO, "%s: %s: is a directory", what, path);
  }
  r->f = f;
  r->file_size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : UINT64_MAX;
  r->in = malloc(IN_BUF);
  if (!r->in) {
    vl_reader_close(r);
    return vl_fail(VL_EOOM, "%s: %s: out of host memory for a read buffer", what, path);
  }
  /* The first bytes decide: gzip magic or a plain file (which then starts with these bytes). */
  size_t got = fread(r->in, 1, IN_BUF, f);
  if (got < IN_BUF && ferror(f)) {
    vl_status s = fail_errno(r, "");
    vl_reader_close(r);
    return s;
  }
  r->zs.next_in = r->in;
  r->zs.avail_in = (uInt)got;
  r->gzip = got >= 2 && r->in[0] == 0x1F && r->in[1] == 0x8B;
  return VL_OK;
}

void vl_reader_close(vl_reader *r) {
  if (r->zinit) inflateEnd(&r->zs);
  if (r->f) fclose(r->f);
  free(r->in);
  memset(r, 0, sizeof *r);
}

uint64_t vl_reader_bound(const vl_reader *r) {
  if (r->file_size == UINT64_MAX) return UINT64_MAX;
  if (!r->gzip) return r->file_size;
  return r->file_size > UINT64_MAX / VL_GZ_MAX_RATIO ? UINT64_MAX : r->file_size * VL_GZ_MAX_RATIO;
}

/* Moves unread input to the front and reads more after it; -1 on an I/O error. */
static int refill(vl_reader *r) {
  if (r->zs.avail_in > 0 && r->zs.next_in != r->in) memmove(r->in, r->zs.next_in, r->zs.avail_in);
  r->zs.next_in = r->in;
  size_t got = fread(r->in + r->zs.avail_in, 1, IN_BUF - r->zs.avail_in, r->f);
  if (got == 0 && ferror(r->f)) {
    fail_errno(r, "read failed: ");
    return -1;
  }
  r->zs.avail_in += (uInt)got;
  return 0;
}

static int64_t read_plain(vl_reader *r, unsigned char *buf, size_t n) {
  size_t got = 0;
  if (r->zs.avail_in > 0) { /* the bytes read to look for the magic */
    got = n < r->zs.avail_in ? n : r->zs.avail_in;
    memcpy(buf, r->zs.next_in, got);
    r->zs.next_in += got;
    r->zs.avail_in -= (uInt)got;
  }
  if (got < n) {
    got += fread(buf + got, 1, n - got, r->f);
    if (got < n && ferror(r->f)) {
      fail_errno(r, "read failed: ");
      return -1;
    }
  }
  return (int64_t)got;
}

/* Between members: ends the data at end of file, starts the next member at a gzip magic, and
 * rejects anything else. Returns 1 (a member started), 0 (clean end) or -1. */
static int next_member(vl_reader *r) {
  if (r->zs.avail_in < 2 && refill(r) < 0) return -1;
  if (r->zs.avail_in == 0) return 0;
  if (r->zs.avail_in < 2 || r->zs.next_in[0] != 0x1F || r->zs.next_in[1] != 0x8B) {
    long pos = ftell(r->f);
    if (pos >= 0 && r->file_size != UINT64_MAX) {
      uint64_t at = (uint64_t)pos - r->zs.avail_in;
      uint64_t junk = r->file_size - at;
      vl_fail(VL_EIO, "%s: %s: %llu byte%s of junk after the gzip data (at byte %llu of %llu; "
              "not another gzip member)", r->what, r->path, (unsigned long long)junk,
              junk == 1 ? "" : "s", (unsigned long long)at, (unsigned long long)r->file_size);
    } else {
      vl_fail(VL_EIO, "%s: %s: junk after the gzip data (not another gzip member)", r->what, r->path);
    }
    return -1;
  }
  int zr = r->zinit ? inflateReset(&r->zs) : inflateInit2(&r->zs, 16 + MAX_WBITS);
  if (zr != Z_OK) {
    vl_fail(zr == Z_MEM_ERROR ? VL_EOOM : VL_EIO, "%s: %s: cannot start inflating (zlib error %d)",
            r->what, r->path, zr);
    return -1;
  }
  r->zinit = 1;
  r->in_member = 1;
  return 1;
}

static int64_t read_gzip(vl_reader *r, unsigned char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (!r->in_member) {
      int m = next_member(r);
      if (m < 0) return -1;
      if (m == 0) break; /* the data ended cleanly after a complete member */
    }
    if (r->zs.avail_in == 0) {
      if (refill(r) < 0) return -1;
      if (r->zs.avail_in == 0) {
        vl_fail(VL_EIO, "%s: %s: truncated gzip data: the file ends inside a compressed stream "
                "after %llu bytes of data (deflate data or the 8-byte CRC32/ISIZE trailer missing)",
                r->what, r->path, (unsigned long long)(r->delivered + got));
        return -1;
      }
    }
    size_t want = n - got < UINT_MAX ? n - got : UINT_MAX;
    r->zs.next_out = buf + got;
    r->zs.avail_out = (uInt)want;
    int zr = inflate(&r->zs, Z_NO_FLUSH);
    got += want - r->zs.avail_out;
    if (zr == Z_STREAM_END) { /* zlib has checked this member's CRC32 and length */
      r->in_member = 0;
      r->members++;
    } else if (zr == Z_MEM_ERROR) {
      vl_fail(VL_EOOM, "%s: %s: out of host memory while inflating", r->what, r->path);
      return -1;
    } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
      const char *why = r->zs.msg ? r->zs.msg : "invalid data";
      vl_fail(VL_EIO, "%s: %s: corrupt gzip data: %s%s", r->what, r->path, why,
              strcmp(why, "incorrect data check") == 0 ? " (CRC32 mismatch)"
              : strcmp(why, "incorrect length check") == 0 ? " (ISIZE mismatch)" : "");
      return -1;
    }
  }
  return (int64_t)got;
}

int64_t vl_reader_read(vl_reader *r, void *buf, size_t n) {
  if (n == 0) return 0;
  int64_t got = r->gzip ? read_gzip(r, buf, n) : read_plain(r, buf, n);
  if (got > 0) r->delivered += (uint64_t)got;
  return got;
}

vl_status vl_reader_read_chunks(vl_reader *r, uint64_t nbytes, vl_chunks *out) {
  vl_chunks c = {0, NULL, 0};
  int cap = 0;
  while (c.bytes < nbytes) {
    size_t want = nbytes - c.bytes < VL_IO_CHUNK ? (size_t)(nbytes - c.bytes) : VL_IO_CHUNK;
    if (c.n == cap) {
      int ncap = cap ? 2 * cap : 16;
      unsigned char **p = realloc(c.chunk, sizeof *p * (size_t)ncap);
      if (!p) goto oom;
      c.chunk = p;
      cap = ncap;
    }
    unsigned char *b = malloc(want);
    if (!b) goto oom;
    c.chunk[c.n++] = b;
    int64_t got = vl_reader_read(r, b, want);
    if (got < 0) {
      vl_chunks_free(&c);
      return VL_EIO;
    }
    c.bytes += (uint64_t)got;
    if ((size_t)got < want) break;
  }
  *out = c;
  return VL_OK;
oom:
  vl_chunks_free(&c);
  return vl_fail(VL_EOOM, "%s: %s: out of host memory after %llu bytes of data", r->what, r->path,
                 (unsigned long long)r->delivered);
}

void vl_chunks_drain(vl_chunks *c, void *dst) {
  uint64_t off = 0;
  for (int i = 0; i < c->n; i++) {
    size_t len = c->bytes - off < VL_IO_CHUNK ? (size_t)(c->bytes - off) : VL_IO_CHUNK;
    memcpy((char *)dst + off, c->chunk[i], len);
    off += len;
    free(c->chunk[i]);
    c->chunk[i] = NULL;
  }
  vl_chunks_free(c);
}

void vl_chunks_free(vl_chunks *c) {
  for (int i = 0; i < c->n; i++) free(c->chunk[i]);
  free(c->chunk);
  memset(c, 0, sizeof *c);
}

size_t vl_utf8_valid_prefix(const unsigned char *s, size_t n) {
  size_t i = 0;
  while (i < n) {
    unsigned c = s[i];
    size_t len;
    uint32_t cp, min;
    if (c < 0x80) { i++; continue; }
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
    else return i;
    if (n - i < len) return i;
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return n;
}

char *vl_escape_bytes(const char *s, size_t n, char *out, size_t cap) {
  size_t o = 0;
  if (cap < 8) {
    if (cap) out[0] = '\0';
    return out;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    char tmp[8];
    if (c == 0) snprintf(tmp, sizeof tmp, "\\0");
    else if (c < 0x20 || c >= 0x7F) snprintf(tmp, sizeof tmp, "\\x%02X", c);
    else tmp[0] = (char)c, tmp[1] = '\0';
    size_t len = strlen(tmp);
    if (o + len + 4 > cap) {
      memcpy(out + o, "...", 4);
      return out;
    }
    memcpy(out + o, tmp, len);
    o += len;
  }
  out[o] = '\0';
  return out;
}
