/* runtime/io/file_io.h: reading through zlib, shared by the file readers (idx.c, safetensors.c).
 *
 * zlib's gz* functions read gzip and plain files alike, so a reader has one code path for both.
 * The readers stream straight into their destination (a checkpoint never needs twice its size in
 * memory), so what is shared is the bounded read loop and its error reporting, not a
 * whole-file read. Internal to the runtime: not part of the public headers. */
#ifndef VL_FILE_IO_H
#define VL_FILE_IO_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

/* Reads up to n bytes from gz into buf; returns how many were read, or -1 on an I/O or zlib error
 * with the message "<what>: <path>: <reason>" set through vl_fail (VL_EIO). A short count means
 * the stream ended: zlib reports a gzip stream cut short as Z_BUF_ERROR, which is a truncation
 * too, so it is returned as a short count and the caller words the truncation message. */
int64_t vl_gz_read(gzFile gz, const char *what, const char *path, void *buf, size_t n);

#endif
