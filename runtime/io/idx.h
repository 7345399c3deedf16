/* runtime/io/idx.h: the IDX file format (MNIST, Fashion-MNIST), read into a CPU tensor.
 *
 * Layout: a 4-byte magic {0, 0, type, ndims}, then ndims big-endian u32 sizes, then the elements
 * in row-major order, big-endian. The file may be gzip-compressed or plain (file_io.h reads
 * both: gzip trailers verified, concatenated members read as one stream, junk after them an
 * error).
 *
 * Type codes and the tensor dtype they become:
 *   0x08 unsigned byte -> u8      0x0B i16 -> i32 (widened; there is no i16 dtype)
 *   0x09 signed byte   -> i32     0x0C i32 -> i32
 *   0x0D f32           -> f32     0x0E f64 -> f64
 *
 * Errors (VL_EIO unless noted) name the file and the problem: missing or unreadable file, bad
 * magic, unsupported type code, ndims of 0 or above VL_MAX_DIMS, sizes whose product does not
 * fit (absurd dims), fewer data bytes than the header promises (truncated; checked against the
 * file size, or for gzip against deflate's best ratio, before allocating), bytes left after the
 * data (trailing garbage: most likely not an IDX file), or VL_EOOM when the tensor cannot be
 * allocated. */
#ifndef VL_IDX_H
#define VL_IDX_H

#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Header limits: more than this many data bytes is taken as a corrupt header rather than an
 * allocation to attempt (1 TiB). */
#define VL_IDX_MAX_BYTES ((int64_t)1 << 40)

/* Reads `path` into a new contiguous CPU tensor (one new reference in *out). */
vl_status vl_idx_read(const char *path, vl_tensor **out);

/* The dtype a type code becomes and the bytes per element in the file; VL_EIO for an unknown
 * code (the message names the code but no file). Exposed for tests and tools. */
vl_status vl_idx_type_info(int code, vl_dtype *dtype, int *file_elem_size);

#ifdef __cplusplus
}
#endif
#endif
