/* runtime/io/safetensors.c: safetensors reader and writer (see safetensors.h).
 *
 * Reading goes through the shared reader (file_io.h), which reads gzip and plain files alike and
 * verifies gzip trailers. For a plain file every size is checked against the file size before
 * anything is allocated; for a gzip stream the uncompressed size is unknown up front, so sizes
 * are checked against what the compressed size can inflate to, large tensors are read in chunks
 * before they are allocated, and truncation is found when the stream ends early. Tensors are
 * read in offset order straight into their storage (compressed ones through one chunk at a
 * time), so a checkpoint never needs twice its size in memory. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/io/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/io/file_io.h"
#include "runtime/io/replace.h"
#include "runtime/ops/ops.h"

static const struct {
  const char *name;
  vl_dtype dt;
} ST_DTYPES[] = {
    {"F32", VL_F32}, {"F16", VL_F16}, {"BF16", VL_BF16}, {"F64", VL_F64},
    {"I64", VL_I64}, {"I32", VL_I32}, {"U8", VL_U8},     {"BOOL", VL_BOOL},
};
#define ST_NDTYPES ((int)(sizeof ST_DTYPES / sizeof ST_DTYPES[0]))
VL_TABLE_SIZE(ST_DTYPES, VL_NDTYPES); /* every dtype can be saved */

const char *vl_st_dtype_name(vl_dtype dt) {
  for (int i = 0; i < ST_NDTYPES; i++)
    if (ST_DTYPES[i].dt == dt) return ST_DTYPES[i].name;
  return "?";
}

vl_status vl_st_dtype_parse(const char *s, vl_dtype *out) {
  for (int i = 0; i < ST_NDTYPES; i++)
    if (strcmp(ST_DTYPES[i].name, s) == 0) {
      *out = ST_DTYPES[i].dt;
      return VL_OK;
    }
  return vl_fail(VL_EIO, "unknown dtype \"%s\" (supported: F32 F16 BF16 F64 I64 I32 U8 BOOL)", s);
}

/* The format is little-endian; on a big-endian host the bytes would need swapping. */
static int host_is_little_endian(void) {
  const uint16_t one = 1;
  return *(const unsigned char *)&one == 1;
}

static void shape_str(int ndim, const int64_t *size, char *buf, size_t n) {
  size_t off = 0;
  buf[0] = '\0';
  if (ndim == 0) snprintf(buf, n, "scalar");
  for (int d = 0; d < ndim && off + 24 < n; d++)
    off += (size_t)snprintf(buf + off, n - off, d ? "x%lld" : "%lld", (long long)size[d]);
}

/* ------------------------------------------------------------------------------------------- */
/* Reading */

/* The reader's messages start with "load_safetensors: <path>: " (file_io.c). */
static int64_t read_some(vl_reader *r, const char *path, void *buf, size_t n) {
  (void)path;
  return vl_reader_read(r, buf, n);
}

typedef struct st_entry {
  const char *name; /* owned by the parsed JSON */
  vl_dtype dt;
  int ndim;
  int64_t size[VL_MAX_DIMS];
  uint64_t begin, end;
  vl_tensor *t;
} st_entry;

static int cmp_name(const void *a, const void *b) {
  return strcmp(((const st_entry *)a)->name, ((const st_entry *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
  const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

/* A JSON number that is a non-negative integer exactly representable as a double. */
static int json_uint(const cJSON *x, uint64_t *out) {
  if (!cJSON_IsNumber(x)) return 0;
  double d = x->valuedouble;
  if (!(d >= 0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return 0;
  *out = (uint64_t)d;
  return 1;
}

/* Validates one tensor entry of the header into e. */
static vl_status parse_entry(const char *path, const cJSON *item, st_entry *e) {
  const char *name = item->string;
  e->name = name;
  if (!cJSON_IsObject(item))
    return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": header entry is not a JSON object",
                   path, name);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offs = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dtype) || !cJSON_IsArray(shape) || !cJSON_IsArray(offs))
    return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": needs a string \"dtype\", an array "
                   "\"shape\" and an array \"data_offsets\"", path, name);
  if (vl_st_dtype_parse(dtype->valuestring, &e->dt) != VL_OK)
    return vl_fail_prefix(VL_EIO, "load_safetensors: %s: tensor \"%s\": ", path, name);
  int ndim = cJSON_GetArraySize(shape);
  if (ndim > VL_MAX_DIMS)
    return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": %d dims (at most %d supported)", path,
                   name, ndim, VL_MAX_DIMS);
  e->ndim = ndim;
  uint64_t esz = vl_dtype_size(e->dt), numel = 1;
  int d = 0, overflow = 0, empty = 0;
  const cJSON *s;
  cJSON_ArrayForEach(s, shape) {
    uint64_t v;
    if (!json_uint(s, &v))
      return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": shape entry %d is not a "
                     "non-negative integer", path, name, d + 1);
    e->size[d++] = (int64_t)v;
    if (v == 0) empty = 1;
    else if (numel > VL_ST_MAX_BYTES / esz / v) overflow = 1;
    else numel *= v;
  }
  if (empty) overflow = 0, numel = 0; /* an empty tensor is never too big */
  char sh[160];
  shape_str(ndim, e->size, sh, sizeof sh);
  if (overflow)
    return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": absurd shape %s (more than %" PRIu64
                   " bytes)", path, name, sh, VL_ST_MAX_BYTES);
  /* The runtime's shape rule (tensor.h), which also bounds the zero-size shapes passed above. */
  char where[512];
  snprintf(where, sizeof where, "load_safetensors: %s: tensor \"%s\"", path, name);
  if (vl_shape_check(where, ndim, e->size, e->dt, NULL) != VL_OK) return VL_EIO;
  uint64_t b, en;
  if (cJSON_GetArraySize(offs) != 2 || !json_uint(cJSON_GetArrayItem(offs, 0), &b) ||
      !json_uint(cJSON_GetArrayItem(offs, 1), &en))
    return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": data_offsets must be two "
                   "non-negative integers [begin, end]", path, name);
  if (en < b)
    return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                   "] end before they begin", path, name, b, en);
  if (en - b != numel * esz)
    return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                   "] hold %" PRIu64 " bytes but %s %s needs %" PRIu64, path, name, b, en, en - b,
                   vl_st_dtype_name(e->dt), sh, numel * esz);
  e->begin = b;
  e->end = en;
  return VL_OK;
}

/* Checks the __metadata__ object: string values only. */
static vl_status check_metadata(const char *path, const cJSON *meta) {
  if (!cJSON_IsObject(meta))
    return vl_fail(VL_EIO, "load_safetensors: %s: __metadata__ is not a JSON object", path);
  const cJSON *m;
  cJSON_ArrayForEach(m, meta) {
    if (!cJSON_IsString(m))
      return vl_fail(VL_EIO, "load_safetensors: %s: __metadata__ value of \"%s\" is not a string", path,
                     m->string);
  }
  return VL_OK;
}

/* Offsets in ascending order must tile [0, total) exactly: no overlap, no hole. Empty tensors
 * occupy no bytes and only need to lie within the data section (checked by the caller). */
static vl_status check_layout(const char *path, st_entry **by_off, int n, uint64_t *total) {
  uint64_t pos = 0;
  const st_entry *prev = NULL;
  for (int i = 0; i < n; i++) {
    const st_entry *e = by_off[i];
    if (e->begin == e->end) continue;
    if (e->begin < pos)
      return vl_fail(VL_EIO, "load_safetensors: %s: tensors \"%s\" [%" PRIu64 ", %" PRIu64 "] and \"%s\" "
                     "[%" PRIu64 ", %" PRIu64 "] overlap", path, prev->name, prev->begin, prev->end,
                     e->name, e->begin, e->end);
    if (e->begin > pos)
      return vl_fail(VL_EIO, "load_safetensors: %s: bytes [%" PRIu64 ", %" PRIu64 ") of the data section "
                     "belong to no tensor (before \"%s\")", path, pos, e->begin, e->name);
    pos = e->end;
    prev = e;
  }
  *total = pos;
  return VL_OK;
}

/* Header -> validated entries (n of them, into a malloc'd array) and metadata object. */
static vl_status parse_header(const char *path, cJSON *root, st_entry **out, int *nout,
                              const cJSON **meta_out) {
  if (!cJSON_IsObject(root))
    return vl_fail(VL_EIO, "load_safetensors: %s: the header is JSON but not an object", path);
  int count = cJSON_GetArraySize(root), n = 0;
  st_entry *es = calloc((size_t)(count ? count : 1), sizeof *es);
  if (!es) return vl_fail(VL_EOOM, "load_safetensors: %s: out of host memory for the header", path);
  const cJSON *meta = NULL, *item;
  cJSON_ArrayForEach(item, root) {
    vl_status s = VL_OK;
    if (strcmp(item->string, "__metadata__") == 0) {
      if (meta) s = vl_fail(VL_EIO, "load_safetensors: %s: duplicate __metadata__", path);
      else s = check_metadata(path, item);
      meta = item;
    } else {
      s = parse_entry(path, item, &es[n++]);
    }
    if (s != VL_OK) {
      free(es);
      return s;
    }
  }
  qsort(es, (size_t)n, sizeof *es, cmp_name);
  for (int i = 1; i < n; i++)
    if (strcmp(es[i - 1].name, es[i].name) == 0) {
      vl_status s = vl_fail(VL_EIO, "load_safetensors: %s: duplicate tensor name \"%s\"", path, es[i].name);
      free(es);
      return s;
    }
  *out = es;
  *nout = n;
  *meta_out = meta;
  return VL_OK;
}

/* Reads the data section into new tensors, in offset order. A compressed tensor above one chunk
 * is allocated only after its bytes have arrived (file_io.h: VL_IO_CHUNK). */
static vl_status read_tensors(vl_reader *r, const char *path, st_entry **by_off, int n) {
  for (int i = 0; i < n; i++) {
    st_entry *e = by_off[i];
    uint64_t nbytes = e->end - e->begin, got = 0;
    if (r->gzip && nbytes > VL_IO_CHUNK) {
      vl_chunks c;
      VL_TRY(vl_reader_read_chunks(r, nbytes, &c));
      got = c.bytes;
      if (got == nbytes) {
        vl_status s = vl_tensor_empty(e->ndim, e->size, e->dt, vl_cpu_device(), &e->t);
        if (s != VL_OK) {
          vl_chunks_free(&c);
          return vl_fail_prefix(s, "load_safetensors: %s: tensor \"%s\": ", path, e->name);
        }
        vl_chunks_drain(&c, vl_tensor_data(e->t));
      }
      vl_chunks_free(&c);
    } else {
      vl_status s = vl_tensor_empty(e->ndim, e->size, e->dt, vl_cpu_device(), &e->t);
      if (s != VL_OK) return vl_fail_prefix(s, "load_safetensors: %s: tensor \"%s\": ", path, e->name);
      if (nbytes == 0) continue;
      int64_t k = read_some(r, path, vl_tensor_data(e->t), (size_t)nbytes);
      if (k < 0) return VL_EIO;
      got = (uint64_t)k;
    }
    if (got < nbytes)
      return vl_fail(VL_EIO, "load_safetensors: %s: truncated: tensor \"%s\" has %" PRIu64 " of its %"
                     PRIu64 " bytes", path, e->name, got, nbytes);
    if (e->dt == VL_BOOL) {
      const unsigned char *p = vl_tensor_data(e->t);
      for (uint64_t k = 0; k < nbytes; k++)
        if (p[k] > 1)
          return vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": BOOL element %" PRIu64
                         " is byte 0x%02X (expected 0 or 1)", path, e->name, k, p[k]);
    }
  }
  return VL_OK;
}

/* Every string of the header, read from the raw JSON text: cJSON decodes "\u0000" into a C
 * string that ends there (so "a\u0000evil" would load as "a") and passes invalid UTF-8 through.
 * Both are rejected, with the string shown as it is in the file. The text is valid JSON here. */
static vl_status check_strings(const char *path, const char *text, const char *end) {
  int depth = 0;
  for (const char *p = text; p < end; p++) {
    if (*p == '{' || *p == '[') depth++;
    else if (*p == '}' || *p == ']') depth--;
    if (*p != '"') continue;
    const char *start = ++p;
    int nul = 0;
    while (p < end && *p != '"') {
      if (*p == '\\' && p + 1 < end) {
        if (p[1] == 'u' && end - p >= 6 && memcmp(p + 2, "0000", 4) == 0) nul = 1;
        p += p[1] == 'u' ? 6 : 2;
      } else {
        p++;
      }
    }
    if (p > end) p = end;
    size_t len = (size_t)(p - start);
    size_t valid = vl_utf8_valid_prefix((const unsigned char *)start, len);
    if (!nul && valid == len) continue;
    const char *q = p + 1;
    while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')) q++;
    const char *kind = q < end && *q == ':' ? (depth == 1 ? "tensor name" : "key") : "string value";
    char shown[200];
    vl_escape_bytes(start, len, shown, sizeof shown);
    if (nul)
      return vl_fail(VL_EIO, "load_safetensors: %s: %s \"%s\" contains a NUL character (\\u0000)",
                     path, kind, shown);
    return vl_fail(VL_EIO, "load_safetensors: %s: %s \"%s\" is not valid UTF-8 (byte 0x%02X at "
                   "offset %zu)", path, kind, shown, (unsigned char)start[valid], valid);
  }
  return VL_OK;
}

static char *dup_str(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

/* Moves the loaded tensors and copies of the names/metadata into st. */
static vl_status fill_result(const char *path, st_entry *es, int n, const cJSON *meta,
                             vl_safetensors *st) {
  memset(st, 0, sizeof *st);
  int nmeta = meta ? cJSON_GetArraySize(meta) : 0;
  st->names = calloc((size_t)n + 1, sizeof *st->names);
  st->tensors = calloc((size_t)n + 1, sizeof *st->tensors);
  st->meta_keys = calloc((size_t)nmeta + 1, sizeof *st->meta_keys);
  st->meta_values = calloc((size_t)nmeta + 1, sizeof *st->meta_values);
  int ok = st->names && st->tensors && st->meta_keys && st->meta_values;
  for (int i = 0; ok && i < n; i++) {
    st->names[i] = dup_str(es[i].name);
    ok = st->names[i] != NULL;
    if (ok) {
      st->tensors[i] = es[i].t; /* the reference moves */
      es[i].t = NULL;
      st->n = i + 1;
    }
  }
  const cJSON *m;
  if (ok && meta) {
    cJSON_ArrayForEach(m, meta) {
      st->meta_keys[st->nmeta] = dup_str(m->string);
      st->meta_values[st->nmeta] = dup_str(m->valuestring);
      if (!st->meta_keys[st->nmeta] || !st->meta_values[st->nmeta]) {
        free(st->meta_keys[st->nmeta]);
        free(st->meta_values[st->nmeta]);
        ok = 0;
        break;
      }
      st->nmeta++;
    }
  }
  if (!ok) {
    vl_safetensors_free(st);
    return vl_fail(VL_EOOM, "load_safetensors: %s: out of host memory for names", path);
  }
  return VL_OK;
}

vl_status vl_safetensors_read(const char *path, vl_safetensors *out) {
  if (!host_is_little_endian())
    return vl_fail(VL_EUNSUPPORTED, "load_safetensors: %s: big-endian hosts are not supported", path);
  vl_reader rd;
  VL_TRY(vl_reader_open(&rd, "load_safetensors", path));

  vl_status s = VL_OK;
  char *hbuf = NULL;
  cJSON *root = NULL;
  st_entry *es = NULL, **by_off = NULL;
  int n = 0;
  unsigned char len8[8];
  int64_t got = read_some(&rd, path, len8, 8);
  if (got < 0) { s = VL_EIO; goto done; }
  if (got < 8) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: truncated: %lld bytes, shorter than the 8-byte header "
                "length", path, (long long)got);
    goto done;
  }
  /* Plain files: the data section's size is known; gzip streams: bounded by what the compressed
   * size can inflate to, the exact size found when the stream ends. */
  int direct = !rd.gzip && rd.file_size != UINT64_MAX;
  uint64_t fsize = rd.file_size, bound = vl_reader_bound(&rd);
  uint64_t hlen = 0;
  for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | len8[i];
  if (hlen > VL_ST_MAX_HEADER) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: absurd header length %" PRIu64 " (more than %" PRIu64
                " bytes; not a safetensors file?)", path, hlen, VL_ST_MAX_HEADER);
    goto done;
  }
  if (direct && hlen > fsize - 8) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: truncated: header length %" PRIu64 " but only %" PRIu64
                " bytes follow", path, hlen, fsize - 8);
    goto done;
  }
  if (rd.gzip && hlen > bound - 8) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: truncated: header length %" PRIu64 " but a gzip file of %"
                PRIu64 " bytes inflates to at most %" PRIu64, path, hlen, fsize, bound);
    goto done;
  }
  hbuf = malloc(hlen + 1);
  if (!hbuf) {
    s = vl_fail(VL_EOOM, "load_safetensors: %s: out of host memory for a %" PRIu64 "-byte header", path, hlen);
    goto done;
  }
  got = read_some(&rd, path, hbuf, hlen);
  if (got < 0) { s = VL_EIO; goto done; }
  if ((uint64_t)got < hlen) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: truncated header: %lld of %" PRIu64 " bytes", path,
                (long long)got, hlen);
    goto done;
  }
  hbuf[hlen] = '\0';
  const char *end = NULL;
  root = cJSON_ParseWithLengthOpts(hbuf, hlen, &end, 0);
  if (!root) {
    long pos = end ? (long)(end - hbuf) : -1;
    s = vl_fail(VL_EIO, "load_safetensors: %s: the header is not valid JSON (error at byte %ld of %" PRIu64
                ")", path, pos, hlen);
    goto done;
  }
  /* Only space padding may follow the JSON object (the writer pads to 8-byte alignment). */
  for (const char *p = end; p < hbuf + hlen; p++)
    if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
      s = vl_fail(VL_EIO, "load_safetensors: %s: bytes after the JSON header at byte %ld of %" PRIu64,
                  path, (long)(p - hbuf), hlen);
      goto done;
    }
  s = check_strings(path, hbuf, end);
  if (s != VL_OK) goto done;

  const cJSON *meta = NULL;
  s = parse_header(path, root, &es, &n, &meta);
  if (s != VL_OK) goto done;
  by_off = malloc(sizeof *by_off * (size_t)(n ? n : 1));
  if (!by_off) { s = vl_fail(VL_EOOM, "load_safetensors: %s: out of host memory", path); goto done; }
  for (int i = 0; i < n; i++) by_off[i] = &es[i];
  qsort(by_off, (size_t)n, sizeof *by_off, cmp_offset);
  uint64_t total = 0;
  s = check_layout(path, by_off, n, &total);
  if (s != VL_OK) goto done;
  /* Empty tensors may sit anywhere up to the end of the data section. */
  for (int i = 0; i < n; i++)
    if (es[i].begin > total && es[i].begin == es[i].end) {
      s = vl_fail(VL_EIO, "load_safetensors: %s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64
                  "] lie beyond the data section of %" PRIu64 " bytes", path, es[i].name, es[i].begin,
                  es[i].end, total);
      goto done;
    }
  if (total > VL_ST_MAX_BYTES) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: absurd data size %" PRIu64 " bytes", path, total);
    goto done;
  }
  if (rd.gzip && total > bound - 8 - hlen) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: truncated: the header announces %" PRIu64 " data bytes "
                "but a gzip file of %" PRIu64 " bytes inflates to at most %" PRIu64, path, total, fsize,
                bound);
    goto done;
  }
  if (direct) {
    uint64_t have = fsize - 8 - hlen;
    if (total > have) {
      const st_entry *last = by_off[0];
      for (int i = 1; i < n; i++)
        if (by_off[i]->end > last->end) last = by_off[i];
      s = vl_fail(VL_EIO, "load_safetensors: %s: truncated: tensor \"%s\" ends at data byte %" PRIu64
                  " but the data section has %" PRIu64 " bytes", path, last->name, last->end, have);
      goto done;
    }
    if (total < have) {
      s = vl_fail(VL_EIO, "load_safetensors: %s: %" PRIu64 " bytes after the last tensor (the tensors "
                  "cover %" PRIu64 " of %" PRIu64 " data bytes)", path, have - total, total, have);
      goto done;
    }
  }
  s = read_tensors(&rd, path, by_off, n);
  if (s != VL_OK) goto done;
  /* Reading on to the end also verifies a gzip trailer and rejects junk after the stream. */
  unsigned char extra;
  got = read_some(&rd, path, &extra, 1);
  if (got < 0) { s = VL_EIO; goto done; }
  if (got > 0) {
    s = vl_fail(VL_EIO, "load_safetensors: %s: bytes after the last tensor (the tensors cover %" PRIu64
                " data bytes)", path, total);
    goto done;
  }
  s = fill_result(path, es, n, meta, out);

done:
  for (int i = 0; es && i < n; i++) vl_tensor_release(es[i].t);
  free(by_off);
  free(es);
  cJSON_Delete(root);
  free(hbuf);
  vl_reader_close(&rd);
  return s;
}

void vl_safetensors_free(vl_safetensors *st) {
  if (!st) return;
  for (int i = 0; i < st->n; i++) {
    free(st->names[i]);
    vl_tensor_release(st->tensors[i]);
  }
  for (int i = 0; i < st->nmeta; i++) {
    free(st->meta_keys[i]);
    free(st->meta_values[i]);
  }
  free(st->names);
  free(st->tensors);
  free(st->meta_keys);
  free(st->meta_values);
  memset(st, 0, sizeof *st);
}

/* ------------------------------------------------------------------------------------------- */
/* Writing */

typedef struct st_out {
  const char *name;
  vl_tensor *t;
  size_t esz;
} st_out;

/* Larger elements first, then by name: every tensor starts at a multiple of its element size
 * (all sizes are powers of two), which is the reference implementation's order. */
static int cmp_out(const void *a, const void *b) {
  const st_out *x = a, *y = b;
  if (x->esz != y->esz) return x->esz > y->esz ? -1 : 1;
  return strcmp(x->name, y->name);
}

static int cmp_out_name(const void *a, const void *b) {
  return strcmp(((const st_out *)a)->name, ((const st_out *)b)->name);
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static int put_bytes(gzFile gz, const void *p, uint64_t n) {
  while (n > 0) {
    unsigned chunk = n > (1u << 30) ? (1u << 30) : (unsigned)n;
    if (gzwrite(gz, p, chunk) != (int)chunk) return 0;
    p = (const char *)p + chunk;
    n -= chunk;
  }
  return 1;
}

static cJSON *json_uint_raw(uint64_t v) {
  /* Raw digits: cJSON prints numbers through a double with %g, which turns sizes of 1e15 and
   * above into exponent notation that strict readers reject. */
  char buf[24];
  snprintf(buf, sizeof buf, "%" PRIu64, v);
  return cJSON_CreateRaw(buf);
}

/* The header JSON (NUL-terminated, malloc'd) for the tensors in order. */
static char *build_header(const st_out *ts, int n, int nmeta, const char *const *mk,
                          const char *const *mv) {
  cJSON *root = cJSON_CreateObject();
  int ok = root != NULL;
  if (ok && nmeta > 0) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    ok = meta != NULL;
    for (int i = 0; ok && i < nmeta; i++) ok = cJSON_AddStringToObject(meta, mk[i], mv[i]) != NULL;
  }
  uint64_t pos = 0;
  for (int i = 0; ok && i < n; i++) {
    const vl_tensor *t = ts[i].t;
    cJSON *e = cJSON_AddObjectToObject(root, ts[i].name);
    cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
    cJSON *offs = e ? cJSON_AddArrayToObject(e, "data_offsets") : NULL;
    ok = e && shape && offs && cJSON_AddStringToObject(e, "dtype", vl_st_dtype_name(t->dtype));
    for (int d = 0; ok && d < t->ndim; d++) ok = cJSON_AddItemToArray(shape, json_uint_raw((uint64_t)t->size[d]));
    uint64_t nbytes = (uint64_t)vl_tensor_numel(t) * ts[i].esz;
    ok = ok && cJSON_AddItemToArray(offs, json_uint_raw(pos)) &&
         cJSON_AddItemToArray(offs, json_uint_raw(pos + nbytes));
    pos += nbytes;
  }
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return text;
}

/* Writes one tensor's bytes: contiguous CPU tensors directly, others through a host copy. */
static vl_status write_tensor(gzFile gz, const char *path, const st_out *o) {
  vl_tensor *t = o->t;
  uint64_t nbytes = (uint64_t)vl_tensor_numel(t) * o->esz;
  if (nbytes == 0) return VL_OK;
  if (vl_device_is_host(t->storage->device) && vl_tensor_is_contiguous(t)) {
    if (!put_bytes(gz, vl_tensor_data(t), nbytes))
      return vl_fail(VL_EIO, "save_safetensors: %s: write failed at tensor \"%s\": %s", path, o->name,
                     strerror(errno));
    return VL_OK;
  }
  void *buf = malloc((size_t)nbytes);
  if (!buf)
    return vl_fail(VL_EOOM, "save_safetensors: %s: out of host memory for tensor \"%s\" (%" PRIu64 " bytes)",
                   path, o->name, nbytes);
  vl_status s = vl_read_host("save_safetensors", t, buf);
  if (s != VL_OK) {
    free(buf);
    return vl_fail_prefix(s, "save_safetensors: %s: tensor \"%s\": ", path, o->name);
  }
  int ok = put_bytes(gz, buf, nbytes);
  free(buf);
  if (!ok)
    return vl_fail(VL_EIO, "save_safetensors: %s: write failed at tensor \"%s\": %s", path, o->name,
                   strerror(errno));
  return VL_OK;
}

/* The format's header is UTF-8 JSON: a name that is not UTF-8 would make a file others reject. */
static vl_status check_utf8(const char *path, const char *kind, const char *str) {
  size_t len = strlen(str), valid = vl_utf8_valid_prefix((const unsigned char *)str, len);
  if (valid == len) return VL_OK;
  char shown[200];
  return vl_fail(VL_EINVAL, "save_safetensors: %s: %s \"%s\" is not valid UTF-8 (byte 0x%02X at offset %zu)",
                 path, kind, vl_escape_bytes(str, len, shown, sizeof shown), (unsigned char)str[valid], valid);
}

static vl_status check_write_args(const char *path, int n, const char *const *names,
                                  vl_tensor *const *tensors, int nmeta, const char *const *mk,
                                  const char *const *mv) {
  if (n < 0 || nmeta < 0 || (n > 0 && (!names || !tensors)) || (nmeta > 0 && (!mk || !mv)))
    return vl_fail(VL_EINVAL, "save_safetensors: %s: bad arguments", path);
  for (int i = 0; i < n; i++) {
    if (!names[i] || !names[i][0] || strcmp(names[i], "__metadata__") == 0)
      return vl_fail(VL_EINVAL, "save_safetensors: %s: tensor %d has an empty or reserved name \"%s\"", path,
                     i + 1, names[i] ? names[i] : "");
    if (!tensors[i]) return vl_fail(VL_EINVAL, "save_safetensors: %s: tensor \"%s\" is NULL", path, names[i]);
    VL_TRY(check_utf8(path, "tensor name", names[i]));
  }
  for (int i = 0; i < nmeta; i++) {
    if (!mk[i] || !mv[i]) return vl_fail(VL_EINVAL, "save_safetensors: %s: metadata entry %d is NULL", path, i + 1);
    VL_TRY(check_utf8(path, "metadata key", mk[i]));
    VL_TRY(check_utf8(path, "metadata value", mv[i]));
  }
  return VL_OK;
}

vl_status vl_safetensors_write(const char *path, int n, const char *const *names,
                               vl_tensor *const *tensors, int nmeta, const char *const *meta_keys,
                               const char *const *meta_values) {
  if (!host_is_little_endian())
    return vl_fail(VL_EUNSUPPORTED, "save_safetensors: %s: big-endian hosts are not supported", path);
  VL_TRY(check_write_args(path, n, names, tensors, nmeta, meta_keys, meta_values));
  st_out *ts = malloc(sizeof *ts * (size_t)(n ? n : 1));
  if (!ts) return vl_fail(VL_EOOM, "save_safetensors: %s: out of host memory", path);
  for (int i = 0; i < n; i++) {
    ts[i].name = names[i];
    ts[i].t = tensors[i];
    ts[i].esz = vl_dtype_size(tensors[i]->dtype);
  }
  /* Duplicates are adjacent in name order; then the file order. */
  qsort(ts, (size_t)n, sizeof *ts, cmp_out_name);
  for (int i = 1; i < n; i++)
    if (strcmp(ts[i - 1].name, ts[i].name) == 0) {
      vl_status s = vl_fail(VL_EINVAL, "save_safetensors: %s: duplicate tensor name \"%s\"", path, ts[i].name);
      free(ts);
      return s;
    }
  qsort(ts, (size_t)n, sizeof *ts, cmp_out);

  char *header = build_header(ts, n, nmeta, meta_keys, meta_values);
  if (!header) {
    free(ts);
    return vl_fail(VL_EOOM, "save_safetensors: %s: out of host memory for the header", path);
  }
  uint64_t hlen = strlen(header);
  uint64_t pad = (8 - (8 + hlen) % 8) % 8; /* data section at an 8-byte boundary */
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((hlen + pad) >> (8 * i));

  vl_replace rp;
  gzFile gz = NULL;
  vl_status s = vl_replace_begin(&rp, "save_safetensors", path);
  if (s != VL_OK) goto done;
  /* "T": transparent (uncompressed) writing through the same gz* calls. zlib gets its own
   * descriptor, so that rp.fd stays open for the fsync after gzclose. */
  int zfd = dup(rp.fd);
  gz = zfd < 0 ? NULL : gzdopen(zfd, ends_with(path, ".gz") ? "wb6" : "wbT");
  if (!gz) {
    if (zfd >= 0) close(zfd);
    s = vl_fail(VL_EIO, "save_safetensors: %s: cannot write %s: %s", path, rp.tmp, strerror(errno));
    goto done;
  }
  gzbuffer(gz, 1u << 20);
  static const char spaces[8] = "       ";
  if (!put_bytes(gz, len8, 8) || !put_bytes(gz, header, hlen) || !put_bytes(gz, spaces, pad)) {
    s = vl_fail(VL_EIO, "save_safetensors: %s: write failed: %s", path, strerror(errno));
    goto done;
  }
  for (int i = 0; i < n && s == VL_OK; i++) s = write_tensor(gz, path, &ts[i]);
  if (s != VL_OK) goto done;
  int zr = gzclose(gz);
  gz = NULL;
  if (zr != Z_OK) {
    s = vl_fail(VL_EIO, "save_safetensors: %s: closing failed (%s)", path,
                zr == Z_ERRNO ? strerror(errno) : "zlib error");
    goto done;
  }
  s = vl_replace_commit(&rp);

done:
  if (gz) gzclose(gz);
  vl_replace_abort(&rp); /* removes the temporary file unless committed */
  free(header);
  free(ts);
  return s;
}
