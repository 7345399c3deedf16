/* runtime/io/idx.c: IDX reader (see idx.h). The shared reader (file_io.h) reads gzip and plain files
 * alike, so there is one code path. A corrupt header cannot make it allocate what the file cannot
 * hold: for a plain file the expected size is checked against the file size, for a gzip file
 * against what its compressed size can inflate to, and large compressed data is read in chunks
 * before the tensor is allocated. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/file_io.h"

/* Chunk for decompression and widening: big enough to amortise read calls, small enough to
 * keep the temporary buffer negligible next to the data. */
#define IDX_CHUNK (1u << 20)

vl_status vl_idx_type_info(int code, vl_dtype *dtype, int *file_elem_size) {
  switch (code) {
    case 0x08: *dtype = VL_U8; *file_elem_size = 1; return VL_OK;
    case 0x09: *dtype = VL_I32; *file_elem_size = 1; return VL_OK;
    case 0x0B: *dtype = VL_I32; *file_elem_size = 2; return VL_OK;
    case 0x0C: *dtype = VL_I32; *file_elem_size = 4; return VL_OK;
    case 0x0D: *dtype = VL_F32; *file_elem_size = 4; return VL_OK;
    case 0x0E: *dtype = VL_F64; *file_elem_size = 8; return VL_OK;
    default:
      return vl_fail(VL_EIO,
                     "unsupported IDX type code 0x%02X (expected 0x08 u8, 0x09 i8, 0x0B i16, "
                     "0x0C i32, 0x0D f32 or 0x0E f64)", (unsigned)code);
  }
}

/* The reader's messages start with "read_idx: <path>: " (file_io.c). */
static int64_t read_some(vl_reader *r, const char *path, void *buf, size_t n) {
  (void)path;
  return vl_reader_read(r, buf, n);
}

static inline uint32_t be32(const unsigned char *p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* Converts n big-endian file elements of `code` at src into host elements at dst. */
static void convert(int code, const unsigned char *src, void *dst, size_t n) {
  size_t i;
  switch (code) {
    case 0x08: memcpy(dst, src, n); break;
    case 0x09:
      for (i = 0; i < n; i++) ((int32_t *)dst)[i] = (int8_t)src[i];
      break;
    case 0x0B:
      for (i = 0; i < n; i++)
        ((int32_t *)dst)[i] = (int16_t)(uint16_t)(((unsigned)src[2 * i] << 8) | src[2 * i + 1]);
      break;
    case 0x0C:
    case 0x0D:
      for (i = 0; i < n; i++) {
        uint32_t v = be32(src + 4 * i);
        memcpy((char *)dst + 4 * i, &v, 4);
      }
      break;
    case 0x0E:
      for (i = 0; i < n; i++) {
        uint64_t v = ((uint64_t)be32(src + 8 * i) << 32) | be32(src + 8 * i + 4);
        memcpy((char *)dst + 8 * i, &v, 8);
      }
      break;
    default: break; /* rejected by vl_idx_type_info before we get here */
  }
}

/* Header fields, validated. */
typedef struct idx_header {
  int code, ndim, file_elem;
  vl_dtype dtype;
  int64_t size[VL_MAX_DIMS];
  int64_t numel;
} idx_header;

static vl_status read_header(vl_reader *gz, const char *path, idx_header *h) {
  unsigned char magic[4], dims[4 * 255];
  int64_t got = read_some(gz, path, magic, 4);
  if (got < 0) return VL_EIO;
  if (got < 4)
    return vl_fail(VL_EIO, "read_idx: %s: truncated: %lld bytes, shorter than the 4-byte IDX magic",
                   path, (long long)got);
  if (magic[0] != 0 || magic[1] != 0)
    return vl_fail(VL_EIO, "read_idx: %s: bad magic %02X %02X %02X %02X (an IDX file starts with "
                   "00 00 <type> <ndims>)", path, magic[0], magic[1], magic[2], magic[3]);
  h->code = magic[2];
  h->ndim = magic[3];
  if (vl_idx_type_info(h->code, &h->dtype, &h->file_elem) != VL_OK)
    return vl_fail_prefix(VL_EIO, "read_idx: %s: ", path);
  if (h->ndim == 0 || h->ndim > VL_MAX_DIMS)
    return vl_fail(VL_EIO, "read_idx: %s: absurd dims: %d dimensions (supported: 1 to %d)", path,
                   h->ndim, VL_MAX_DIMS);
  got = read_some(gz, path, dims, 4 * (size_t)h->ndim);
  if (got < 0) return VL_EIO;
  if (got < 4 * h->ndim)
    return vl_fail(VL_EIO, "read_idx: %s: truncated header: %d dimensions announced, %lld of %d "
                   "size bytes present", path, h->ndim, (long long)got, 4 * h->ndim);
  /* An empty tensor is never too big for the byte cap, whatever the position of its 0: starting
   * the count at 0 passes the cap (and the product stays 0); vl_shape_check below bounds the
   * other dims. */
  bool empty = false;
  for (int d = 0; d < h->ndim; d++) empty |= be32(dims + 4 * d) == 0;
  h->numel = empty ? 0 : 1;
  for (int d = 0; d < h->ndim; d++) {
    h->size[d] = be32(dims + 4 * d);
    /* Each size is < 2^32, so the product only overflows after exceeding the byte cap. */
    if (h->size[d] != 0 && h->numel > VL_IDX_MAX_BYTES / h->file_elem / h->size[d]) {
      char shape[160] = "";
      size_t off = 0;
      for (int e = 0; e < h->ndim && off < sizeof shape - 12; e++)
        off += (size_t)snprintf(shape + off, sizeof shape - off, e ? "x%lld" : "%lld",
                                (long long)be32(dims + 4 * e));
      return vl_fail(VL_EIO, "read_idx: %s: absurd dims %s (more than %lld data bytes)", path,
                     shape, (long long)VL_IDX_MAX_BYTES);
    }
    h->numel *= h->size[d];
  }
  /* The runtime's shape rule (tensor.h), which also bounds the zero-size shapes passed above. */
  char where[512];
  snprintf(where, sizeof where, "read_idx: %s", path);
  if (vl_shape_check(where, h->ndim, h->size, h->dtype, NULL) != VL_OK) return VL_EIO;
  return VL_OK;
}

static vl_status truncated_data(const char *path, const idx_header *h, int64_t have) {
  return vl_fail(VL_EIO, "read_idx: %s: truncated data: the header announces %lld elements "
                 "(%lld bytes) but only %lld bytes follow it", path, (long long)h->numel,
                 (long long)(h->numel * h->file_elem), (long long)have);
}

static vl_status read_data(vl_reader *gz, const char *path, const idx_header *h, void *dst) {
  size_t esz = vl_dtype_size(h->dtype);
  size_t per_chunk = IDX_CHUNK / (size_t)h->file_elem;
  unsigned char *buf = malloc(IDX_CHUNK);
  if (!buf) return vl_fail(VL_EOOM, "read_idx: %s: out of host memory for a read buffer", path);
  int64_t done = 0;
  while (done < h->numel) {
    size_t n = (size_t)(h->numel - done) < per_chunk ? (size_t)(h->numel - done) : per_chunk;
    size_t want = n * (size_t)h->file_elem;
    int64_t got = read_some(gz, path, buf, want);
    if (got < 0) { free(buf); return VL_EIO; }
    if ((size_t)got < want) {
      int64_t have = done * h->file_elem + got;
      free(buf);
      return truncated_data(path, h, have);
    }
    convert(h->code, buf, (char *)dst + (size_t)done * esz, n);
    done += (int64_t)n;
  }
  free(buf);
  return VL_OK;
}

/* Compressed data beyond one chunk: the file bytes are read first, in chunks as they arrive,
 * and the tensor is allocated only once they are all there (a header cannot make us allocate
 * more than the stream delivers). Each chunk is converted into the tensor and freed. */
static vl_status read_staged(vl_reader *r, const char *path, const idx_header *h, vl_tensor **out) {
  uint64_t bytes = (uint64_t)h->numel * (uint64_t)h->file_elem;
  vl_chunks c;
  VL_TRY(vl_reader_read_chunks(r, bytes, &c));
  if (c.bytes < bytes) {
    int64_t have = (int64_t)c.bytes;
    vl_chunks_free(&c);
    return truncated_data(path, h, have);
  }
  vl_tensor *t = NULL;
  vl_status s = vl_tensor_empty(h->ndim, h->size, h->dtype, vl_cpu_device(), &t);
  if (s != VL_OK) {
    vl_chunks_free(&c);
    return vl_fail_prefix(s, "read_idx: %s: ", path);
  }
  /* VL_IO_CHUNK is a multiple of every element size, so chunks hold whole elements. */
  size_t esz = vl_dtype_size(h->dtype);
  int64_t done = 0;
  for (int i = 0; i < c.n; i++) {
    size_t nb = bytes - (uint64_t)done * (uint64_t)h->file_elem < VL_IO_CHUNK
                    ? (size_t)(bytes - (uint64_t)done * (uint64_t)h->file_elem) : VL_IO_CHUNK;
    size_t ne = nb / (size_t)h->file_elem;
    convert(h->code, c.chunk[i], (char *)vl_tensor_data(t) + (size_t)done * esz, ne);
    done += (int64_t)ne;
    free(c.chunk[i]);
    c.chunk[i] = NULL;
  }
  vl_chunks_free(&c);
  *out = t;
  return VL_OK;
}

vl_status vl_idx_read(const char *path, vl_tensor **out) {
  if (!path) return vl_fail(VL_EINVAL, "read_idx: path is NULL");
  vl_reader rd;
  VL_TRY(vl_reader_open(&rd, "read_idx", path));
  idx_header h;
  vl_status s = read_header(&rd, path, &h);
  if (s != VL_OK) { vl_reader_close(&rd); return s; }

  /* Reject what the file cannot hold before allocating what its header says: exactly for a plain
   * file, by deflate's best ratio for a gzip one. */
  uint64_t head = 4 + 4 * (uint64_t)h.ndim, bytes = (uint64_t)h.numel * (uint64_t)h.file_elem;
  uint64_t bound = vl_reader_bound(&rd);
  if (!rd.gzip && bound != UINT64_MAX && bound < head + bytes) {
    vl_reader_close(&rd);
    return truncated_data(path, &h, (int64_t)(bound - head));
  }
  if (rd.gzip && bound < head + bytes) {
    s = vl_fail(VL_EIO, "read_idx: %s: truncated data: the header announces %lld elements (%llu bytes) "
                "but a gzip file of %llu bytes inflates to at most %llu", path, (long long)h.numel,
                (unsigned long long)bytes, (unsigned long long)rd.file_size, (unsigned long long)bound);
    vl_reader_close(&rd);
    return s;
  }

  vl_tensor *t = NULL;
  if (rd.gzip && bytes > VL_IO_CHUNK) {
    s = read_staged(&rd, path, &h, &t);
  } else {
    s = vl_tensor_empty(h.ndim, h.size, h.dtype, vl_cpu_device(), &t);
    if (s != VL_OK) s = vl_fail_prefix(s, "read_idx: %s: ", path);
    else if (h.numel > 0) s = read_data(&rd, path, &h, vl_tensor_data(t));
  }
  if (s == VL_OK) {
    /* Reading on to the end also verifies a gzip trailer and rejects junk after the stream. */
    unsigned char extra[64];
    int64_t got = read_some(&rd, path, extra, sizeof extra);
    if (got < 0) s = VL_EIO;
    else if (got > 0)
      s = vl_fail(VL_EIO, "read_idx: %s: %s bytes after the data announced by the header "
                  "(not an IDX file, or wrong dims)", path, got < (int64_t)sizeof extra ? "extra" : "many extra");
  }
  vl_reader_close(&rd);
  if (s != VL_OK) { vl_tensor_release(t); return s; }
  *out = t;
  return VL_OK;
}
