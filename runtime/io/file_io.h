/* runtime/io/file_io.h: reading plain and gzip files, shared by the file readers (idx.c,
 * safetensors.c), plus the string checks and escaping their messages need.
 *
 * A file starting with the gzip magic (1F 8B) is inflated, anything else is read as it is, so
 * compression is a property of the bytes, not of the name. The reader is built on zlib's
 * inflate rather than gzread because gzread hides what a loader must reject: a stream that ends
 * without its CRC32/ISIZE trailer reads as a clean end of file, and bytes after the stream are
 * silently ignored; its messages also repeat the path.
 *
 * gzip rules: every member must end with its trailer, which zlib verifies (CRC32 and length);
 * members may follow one another (`gzip -c a b > ab.gz` is legal gzip and reads as the
 * concatenation, as gunzip does); anything after a member that is not another member is an
 * error. Errors are VL_EIO with messages "<what>: <path>: <reason>". Internal to the runtime. */
#ifndef VL_FILE_IO_H
#define VL_FILE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <zlib.h>

#include "runtime/core/status.h"

/* deflate's best case is 1032 output bytes per input byte (zlib FAQ), so a compressed file of
 * C bytes holds at most VL_GZ_MAX_RATIO * C bytes: what lets a loader reject a header that
 * promises more before allocating it. */
#define VL_GZ_MAX_RATIO 1032u
/* Compressed inputs: tensors above this size are read in chunks of this size and allocated
 * once their bytes have arrived, so an allocation is never more than one chunk ahead of the
 * data the stream has delivered. */
#define VL_IO_CHUNK ((size_t)16 << 20)

typedef struct vl_reader {
  FILE *f;
  const char *what, *path;  /* for messages; not owned */
  int gzip;                 /* inflating */
  int in_member;            /* inside a gzip member (inflate initialised and not at its end) */
  int zinit;
  z_stream zs;
  unsigned char *in;        /* compressed input buffer (gzip only) */
  uint64_t file_size;       /* of a regular file; UINT64_MAX when unknown (a pipe) */
  uint64_t delivered;       /* bytes handed to the caller so far */
  int members;
} vl_reader;

/* Opens path for reading ("<what>: <path>: <strerror>" on failure; a directory is refused). */
vl_status vl_reader_open(vl_reader *r, const char *what, const char *path);
void vl_reader_close(vl_reader *r); /* a zeroed or closed reader is fine */

/* Reads up to n bytes into buf; returns how many were read, or -1 with the message set (I/O
 * errors, corrupt deflate data, a CRC32 or length mismatch, a stream cut before its trailer,
 * junk after a member). A short count means the data ended cleanly: the caller words that
 * truncation with what it expected. */
int64_t vl_reader_read(vl_reader *r, void *buf, size_t n);

/* The most bytes the file can deliver in all: exact for a plain regular file, VL_GZ_MAX_RATIO
 * times the compressed size for gzip, UINT64_MAX when the size is unknown. */
uint64_t vl_reader_bound(const vl_reader *r);

/* Reads nbytes into a new buffer that grows as data arrives (chunks of VL_IO_CHUNK), for
 * compressed inputs whose sizes cannot be checked up front. *got says how many arrived (short:
 * the data ended); on -1 the message is set. Release with vl_chunks_free. */
typedef struct vl_chunks {
  int n;
  unsigned char **chunk; /* n chunks, each VL_IO_CHUNK bytes but the last */
  uint64_t bytes;
} vl_chunks;
vl_status vl_reader_read_chunks(vl_reader *r, uint64_t nbytes, vl_chunks *out);
/* Copies the chunks to dst in order and frees each as soon as it is copied (so the peak is the
 * destination plus one chunk of resident memory); leaves c empty. */
void vl_chunks_drain(vl_chunks *c, void *dst);
void vl_chunks_free(vl_chunks *c);

/* Length of the longest valid UTF-8 prefix of s[0..n) (strict: no overlong forms, surrogates or
 * code points above U+10FFFF); n when all of it is valid. */
size_t vl_utf8_valid_prefix(const unsigned char *s, size_t n);

/* Writes s[0..n) into out (cap bytes, NUL-terminated, cut with "..." when long) with the bytes
 * outside printable ASCII escaped (\0, \xNN), for messages that must show a name that is not a
 * clean string. Backslashes stay as they are, so a JSON string shows as written in the file
 * ("a\u0000evil"). Returns out. */
char *vl_escape_bytes(const char *s, size_t n, char *out, size_t cap);

#endif
