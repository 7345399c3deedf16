/* runtime/io/safetensors.h: the safetensors checkpoint format (Hugging Face, torchvision exports).
 *
 * Layout: an 8-byte little-endian u64 N, then N bytes of UTF-8 JSON (optionally padded with
 * spaces), then the data section. The JSON maps each tensor name to
 *   {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}
 * with byte offsets relative to the start of the data section, plus an optional
 * "__metadata__": {"key": "value", ...} of strings. Tensors are row-major, little-endian.
 *
 * Reading validates everything before a tensor is handed out: N against the file size and a
 * 100 MB cap, the JSON's shape (objects, string dtypes, arrays of non-negative integers), dtypes
 * (F32 F16 BF16 F64 I64 I32 U8 BOOL), numel * element size == end - begin, offsets that are
 * inside the data section, do not overlap and cover it without holes, duplicate names, sizes
 * beyond VL_ST_MAX_BYTES, BOOL bytes other than 0/1. Errors are VL_EIO (VL_EOOM when memory
 * runs out) and name the file and, where one is at fault, the tensor.
 *
 * gzip-compressed files (e.g. tests/data/x.safetensors.gz) are read too: the gzip magic is
 * detected, so compression is a property of the bytes, not of the name (file_io.h has the rules:
 * trailers verified, concatenated members read as one stream, junk after them rejected). The
 * data section is read sequentially in offset order, which is what lets a compressed stream be
 * read without seeking; the sizes a compressed file's header announces are checked against
 * deflate's best ratio, and large tensors are read in chunks before being allocated. Names and
 * metadata with an escaped NUL ("\u0000", which would cut the name) or invalid UTF-8 are
 * rejected.
 *
 * Writing sorts tensors by (element size descending, name) as the reference implementation
 * does, which keeps every tensor naturally aligned without padding between tensors; the header
 * is padded with spaces so that the data section starts at an 8-byte boundary. Device and
 * strided tensors are copied to contiguous host bytes one at a time. The file is written to a
 * temporary name next to `path` (".<name>.v100tmp-<pid>-<tid>"), fsync'd and renamed, and the
 * directory fsync'd, so a failed save or a crash leaves an existing file intact; a later save to
 * the same path removes temporaries whose process is gone. An existing file's mode is kept and a
 * symlink at `path` is followed (its target replaced); a dangling symlink is refused. A path
 * ending in ".gz" is written gzip-compressed. */
#ifndef VL_SAFETENSORS_H
#define VL_SAFETENSORS_H

#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Header bytes above this are taken as corruption (the reference implementation's limit). */
#define VL_ST_MAX_HEADER ((uint64_t)100 << 20)
/* Data bytes above this are taken as corruption rather than an allocation to attempt (1 TiB). */
#define VL_ST_MAX_BYTES ((uint64_t)1 << 40)

/* A loaded file: n tensors in ascending name order (contiguous CPU tensors, one reference each)
 * and nmeta metadata pairs in file order. Everything is owned by the struct. */
typedef struct vl_safetensors {
  int n;
  char **names;
  vl_tensor **tensors;
  int nmeta;
  char **meta_keys;
  char **meta_values;
} vl_safetensors;

/* Reads `path` (plain or gzip). On success *out is filled (release it with
 * vl_safetensors_free); on failure *out is untouched. */
vl_status vl_safetensors_read(const char *path, vl_safetensors *out);
/* Releases every tensor and string and zeroes the struct. NULL and zeroed structs are fine. */
void vl_safetensors_free(vl_safetensors *st);

/* Writes n named tensors (any device, dtype of the list above, any strides) and nmeta metadata
 * pairs (may be 0 with NULL arrays) to `path`. Names must be non-empty, distinct, valid UTF-8
 * and not "__metadata__"; metadata keys and values valid UTF-8 (VL_EINVAL otherwise). On failure no file is left at `path` other than what was there before. */
vl_status vl_safetensors_write(const char *path, int n, const char *const *names,
                               vl_tensor *const *tensors, int nmeta, const char *const *meta_keys,
                               const char *const *meta_values);

/* The safetensors dtype string ("F32", ...) of a dtype, and back (VL_EIO naming `s` otherwise). */
const char *vl_st_dtype_name(vl_dtype dt);
vl_status vl_st_dtype_parse(const char *s, vl_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
