/* runtime/io/idx.c: IDX reader (see idx.h). zlib's gz* functions read gzip and plain files alike, so
 * there is one code path; for plain files the expected size is checked against the file size
 * before anything is allocated, so a corrupt header cannot ask for a huge buffer. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/idx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "runtime/io/file_io.h"

/* Chunk for decompression and widening: big enough to amortise gzread calls, small enough to
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

/* The bounded gzread loop and its messages are shared with the other readers (file_io.c). */
static int64_t read_some(gzFile gz, const char *path, void *buf, size_t n) {
  return vl_gz_read(gz, "read_idx", path, buf, n);
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

static vl_status read_header(gzFile gz, const char *path, idx_header *h) {
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

static vl_status read_data(gzFile gz, const char *path, const idx_header *h, void *dst) {
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
      return vl_fail(VL_EIO, "read_idx: %s: truncated data: the header announces %lld elements "
                     "(%lld bytes) but only %lld bytes follow it", path, (long long)h->numel,
                     (long long)(h->numel * h->file_elem), (long long)have);
    }
    convert(h->code, buf, (char *)dst + (size_t)done * esz, n);
    done += (int64_t)n;
  }
  free(buf);
  return VL_OK;
}

vl_status vl_idx_read(const char *path, vl_tensor **out) {
  if (!path) return vl_fail(VL_EINVAL, "read_idx: path is NULL");
  errno = 0;
  gzFile gz = gzopen(path, "rb");
  if (!gz)
    return vl_fail(VL_EIO, "read_idx: cannot open %s: %s", path,
                   errno ? strerror(errno) : "out of memory in zlib");
  gzbuffer(gz, 256u << 10);
  idx_header h;
  vl_status s = read_header(gz, path, &h);
  if (s != VL_OK) { gzclose(gz); return s; }

  /* A plain file has a known size: reject a short one before allocating what its header says. */
  struct stat st;
  if (gzdirect(gz) && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
    int64_t expect = 4 + 4 * (int64_t)h.ndim + h.numel * h.file_elem;
    if ((int64_t)st.st_size < expect) {
      gzclose(gz);
      return vl_fail(VL_EIO, "read_idx: %s: truncated data: the header announces %lld elements "
                     "(%lld bytes) but only %lld bytes follow it", path, (long long)h.numel,
                     (long long)(h.numel * h.file_elem),
                     (long long)(st.st_size - 4 - 4 * (int64_t)h.ndim));
    }
  }

  vl_tensor *t = NULL;
  s = vl_tensor_empty(h.ndim, h.size, h.dtype, vl_cpu_device(), &t);
  if (s != VL_OK) { gzclose(gz); return vl_fail_prefix(s, "read_idx: %s: ", path); }
  if (h.numel > 0) s = read_data(gz, path, &h, vl_tensor_data(t));
  if (s == VL_OK) {
    unsigned char extra[64];
    int64_t got = read_some(gz, path, extra, sizeof extra);
    if (got < 0) s = VL_EIO;
    else if (got > 0)
      s = vl_fail(VL_EIO, "read_idx: %s: %s bytes after the data announced by the header "
                  "(not an IDX file, or wrong dims)", path, got < (int64_t)sizeof extra ? "extra" : "many extra");
  }
  gzclose(gz);
  if (s != VL_OK) { vl_tensor_release(t); return s; }
  *out = t;
  return VL_OK;
}
