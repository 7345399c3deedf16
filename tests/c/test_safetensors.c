/* tests/c/test_safetensors.c: the safetensors reader/writer: round trips of every dtype (0-dim,
 * empty and strided tensors included) with metadata, gzip files, the byte layout the format
 * prescribes, and every malformed-file error path (message naming the file and the tensor, the
 * output untouched), gzip trailers, junk and concatenated members, allocation bounds for
 * compressed files, bad names, and crash-safe saves (stale temporary files, modes, symlinks). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/ops/ops.h"
#include "runtime/io/safetensors.h"
#include "vl_test.h"

static char dir[256];

static const char *path_of(const char *name) {
  static char buf[4][512];
  static int k = 0;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static void write_bytes(const char *p, const void *bytes, size_t n, int gz) {
  if (gz) {
    gzFile f = gzopen(p, "wb");
    if (!f || (n && gzwrite(f, bytes, (unsigned)n) != (int)n) || gzclose(f) != Z_OK) exit(2);
  } else {
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(bytes, 1, n, f) != n) || fclose(f) != 0) exit(2);
  }
}

/* A file of: 8-byte little-endian length, header (hlen bytes; -1 = strlen), data. */
static const char *write_st(const char *name, const char *header, long hlen, const void *data,
                            size_t ndata, int gz) {
  size_t hl = hlen < 0 ? strlen(header) : (size_t)hlen;
  unsigned char *buf = malloc(8 + hl + ndata + 1);
  for (int i = 0; i < 8; i++) buf[i] = (unsigned char)((uint64_t)hl >> (8 * i));
  memcpy(buf + 8, header, hl);
  if (ndata) memcpy(buf + 8 + hl, data, ndata);
  const char *p = path_of(name);
  write_bytes(p, buf, 8 + hl + ndata, gz);
  free(buf);
  return p;
}

static vl_tensor *from_host(const void *src, int ndim, const int64_t *size, vl_dtype dt) {
  vl_tensor *t = NULL;
  if (vl_from_host(src, ndim, size, dt, vl_cpu_device(), &t) != VL_OK) {
    fprintf(stderr, "from_host: %s\n", vl_errmsg());
    exit(2);
  }
  return t;
}

static int same_bytes(vl_tensor *a, vl_tensor *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int d = 0; d < a->ndim; d++)
    if (a->size[d] != b->size[d]) return 0;
  size_t n = (size_t)vl_tensor_numel(a) * vl_dtype_size(a->dtype);
  if (n == 0) return 1;
  void *x = malloc(n), *y = malloc(n);
  int ok = vl_to_host(a, x) == VL_OK && vl_to_host(b, y) == VL_OK && memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return ok;
}

static vl_tensor *find(const vl_safetensors *st, const char *name) {
  for (int i = 0; i < st->n; i++)
    if (strcmp(st->names[i], name) == 0) return st->tensors[i];
  return NULL;
}

/* ---- round trips ---- */

static void test_round_trip(int gz) {
  float f32[6] = {1.5f, -2.25f, 0.0f, 3e-8f, -1e30f, 7.0f};
  uint16_t f16[3] = {vl_f32_to_f16(1.0f), vl_f32_to_f16(-0.5f), vl_f32_to_f16(65504.0f)};
  uint16_t bf16[2] = {vl_f32_to_bf16(3.0f), vl_f32_to_bf16(-1e20f)};
  double f64 = 3.141592653589793;
  int64_t i64[4] = {INT64_MIN, -1, 0, INT64_MAX};
  int32_t i32[3] = {INT32_MIN, 5, INT32_MAX};
  uint8_t u8[5] = {0, 1, 127, 128, 255};
  uint8_t bl[3] = {1, 0, 1};
  int64_t s23[2] = {2, 3}, s3[1] = {3}, s2[1] = {2}, s22[2] = {2, 2}, s5[1] = {5}, s0[2] = {0, 4};
  vl_tensor *ts[9];
  const char *names[9] = {"w.f32", "a.f16", "b.bf16", "scalar.f64", "i64", "i32", "u8", "mask", "empty"};
  ts[0] = from_host(f32, 2, s23, VL_F32);
  ts[1] = from_host(f16, 1, s3, VL_F16);
  ts[2] = from_host(bf16, 1, s2, VL_BF16);
  ts[3] = from_host(&f64, 0, NULL, VL_F64);
  ts[4] = from_host(i64, 2, s22, VL_I64);
  ts[5] = from_host(i32, 1, s3, VL_I32);
  ts[6] = from_host(u8, 1, s5, VL_U8);
  ts[7] = from_host(bl, 1, s3, VL_BOOL);
  ts[8] = from_host(NULL, 2, s0, VL_F32);
  const char *mk[2] = {"format", "note"}, *mv[2] = {"pt", "round trip"};
  const char *p = path_of(gz ? "rt.safetensors.gz" : "rt.safetensors");
  CHECK(vl_safetensors_write(p, 9, names, ts, 2, mk, mv) == VL_OK);

  vl_safetensors st;
  memset(&st, 0, sizeof st);
  CHECK(vl_safetensors_read(p, &st) == VL_OK);
  CHECK(st.n == 9);
  for (int i = 1; i < st.n; i++) CHECK(strcmp(st.names[i - 1], st.names[i]) < 0); /* name order */
  for (int i = 0; i < 9; i++) {
    vl_tensor *t = find(&st, names[i]);
    CHECK(t != NULL);
    if (t) {
      CHECK(same_bytes(t, ts[i]));
      CHECK(vl_tensor_is_contiguous(t));
      CHECK(t->storage->device.type == VL_CPU);
    }
  }
  vl_tensor *sc = find(&st, "scalar.f64");
  CHECK(sc && sc->ndim == 0 && *(double *)vl_tensor_data(sc) == 3.141592653589793);
  vl_tensor *em = find(&st, "empty");
  CHECK(em && em->ndim == 2 && em->size[0] == 0 && em->size[1] == 4);
  CHECK(st.nmeta == 2 && strcmp(st.meta_keys[0], "format") == 0 && strcmp(st.meta_values[1], "round trip") == 0);
  vl_safetensors_free(&st);
  CHECK(st.n == 0 && st.names == NULL);
  vl_safetensors_free(&st); /* idempotent */
  for (int i = 0; i < 9; i++) vl_tensor_release(ts[i]);
}

/* A transposed (non-contiguous) tensor is written in its logical row-major order. */
static void test_strided(void) {
  float v[6] = {1, 2, 3, 4, 5, 6};
  int64_t s23[2] = {2, 3};
  vl_tensor *a = from_host(v, 2, s23, VL_F32), *t = NULL;
  CHECK(vl_transpose(a, 0, 1, &t) == VL_OK);
  const char *name = "t";
  const char *p = path_of("strided.safetensors");
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  vl_safetensors st;
  CHECK(vl_safetensors_read(p, &st) == VL_OK);
  float want[6] = {1, 4, 2, 5, 3, 6};
  CHECK(st.n == 1 && st.tensors[0]->size[0] == 3 && memcmp(vl_tensor_data(st.tensors[0]), want, sizeof want) == 0);
  CHECK(st.nmeta == 0);
  vl_safetensors_free(&st);
  vl_tensor_release(t);
  vl_tensor_release(a);
}

/* The layout: header length a multiple-of-8 boundary, larger elements first, then by name. */
static void test_layout(void) {
  uint8_t u[3] = {1, 2, 3};
  double d[1] = {2.0};
  float f[1] = {1.0f};
  int64_t s3[1] = {3}, s1[1] = {1};
  vl_tensor *ts[3] = {from_host(u, 1, s3, VL_U8), from_host(f, 1, s1, VL_F32), from_host(d, 1, s1, VL_F64)};
  const char *names[3] = {"a_u8", "b_f32", "c_f64"};
  const char *p = path_of("layout.safetensors");
  CHECK(vl_safetensors_write(p, 3, names, ts, 0, NULL, NULL) == VL_OK);
  FILE *fp = fopen(p, "rb");
  unsigned char buf[512];
  size_t n = fread(buf, 1, sizeof buf, fp);
  fclose(fp);
  uint64_t hl = 0;
  for (int i = 7; i >= 0; i--) hl = (hl << 8) | buf[i];
  CHECK((8 + hl) % 8 == 0);
  CHECK(n == 8 + hl + 8 + 4 + 3);
  char *hdr = strndup((char *)buf + 8, hl);
  const char *pd = strstr(hdr, "\"c_f64\""), *pf = strstr(hdr, "\"b_f32\""), *pu = strstr(hdr, "\"a_u8\"");
  CHECK(pd && pf && pu && pd < pf && pf < pu);
  CHECK(strstr(hdr, "\"data_offsets\":[0,8]") && strstr(hdr, "\"data_offsets\":[8,12]") &&
        strstr(hdr, "\"data_offsets\":[12,15]"));
  free(hdr);
  double back;
  memcpy(&back, buf + 8 + hl, 8);
  CHECK(back == 2.0);
  for (int i = 0; i < 3; i++) vl_tensor_release(ts[i]);
}

/* A hand-written file with whitespace padding, key order unlike ours and an empty tensor in the
 * middle of the offsets, as other writers may produce. */
static void test_foreign_file(void) {
  const char *h = "{\"z\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [4, 12]},\n"
                  " \"e\": {\"data_offsets\": [4, 4], \"shape\": [0], \"dtype\": \"F16\"},\n"
                  " \"y\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}     ";
  unsigned char data[12];
  float y = -3.5f;
  int32_t z[2] = {11, -12};
  memcpy(data, &y, 4);
  memcpy(data + 4, z, 8);
  const char *p = write_st("foreign.safetensors", h, -1, data, sizeof data, 0);
  vl_safetensors st;
  CHECK(vl_safetensors_read(p, &st) == VL_OK);
  CHECK(st.n == 3 && strcmp(st.names[0], "e") == 0 && strcmp(st.names[2], "z") == 0);
  CHECK(*(float *)vl_tensor_data(st.tensors[1]) == -3.5f);
  CHECK(((int32_t *)vl_tensor_data(st.tensors[2]))[1] == -12);
  CHECK(vl_tensor_numel(st.tensors[0]) == 0 && st.tensors[0]->dtype == VL_F16);
  vl_safetensors_free(&st);
  /* the same bytes gzip-compressed by another program */
  p = write_st("foreign.safetensors.gz", h, -1, data, sizeof data, 1);
  CHECK(vl_safetensors_read(p, &st) == VL_OK);
  CHECK(st.n == 3 && ((int32_t *)vl_tensor_data(st.tensors[2]))[0] == 11);
  vl_safetensors_free(&st);
  /* an empty file: no tensors, no data */
  p = write_st("none.safetensors", "{}", -1, NULL, 0, 0);
  CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 0);
  vl_safetensors_free(&st);
}

/* ---- malformed files ---- */

/* Reads p expecting failure `code` with every needle in the message; the output stays as it was. */
static void expect_fail(const char *p, vl_status code, const char *n1, const char *n2) {
  vl_safetensors st;
  memset(&st, 0xAB, sizeof st);
  vl_safetensors before = st;
  vl_status s = vl_safetensors_read(p, &st);
  CHECK(s == code);
  CHECK(memcmp(&st, &before, sizeof st) == 0);
  const char *m = vl_errmsg();
  int ok = strstr(m, p) != NULL && (!n1 || strstr(m, n1)) && (!n2 || strstr(m, n2));
  if (!ok || s != code || getenv("VL_TEST_VERBOSE")) fprintf(stderr, "  message for %s: %s\n", p, m);
  CHECK(ok);
}

static const char *T1 = "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

static void test_errors(void) {
  unsigned char data[64] = {0};
  expect_fail(path_of("missing.safetensors"), VL_EIO, "No such file", NULL);
  /* shorter than the 8-byte length */
  const char *p = path_of("tiny.safetensors");
  write_bytes(p, "\x05\x00\x00", 3, 0);
  expect_fail(p, VL_EIO, "truncated", "8-byte");
  /* header length past the end of the file */
  p = write_st("hlen.safetensors", T1, -1, data, 8, 0);
  {
    FILE *f = fopen(p, "r+b");
    unsigned char big[8] = {0xF0, 0, 0, 0, 0, 0, 0, 0};
    fwrite(big, 1, 8, f);
    fclose(f);
  }
  expect_fail(p, VL_EIO, "truncated", "header length 240");
  /* absurd header length */
  {
    unsigned char b[16] = {0, 0, 0, 0, 0, 0, 0, 0x40, '{', '}'};
    p = path_of("absurd.safetensors");
    write_bytes(p, b, 10, 0);
    expect_fail(p, VL_EIO, "absurd header length", NULL);
    p = path_of("absurd.safetensors.gz");
    write_bytes(p, b, 10, 1);
    expect_fail(p, VL_EIO, "absurd header length", NULL);
  }
  /* bad JSON, JSON that is no object, garbage after the JSON, wrong entry types */
  expect_fail(write_st("badjson.safetensors", "{\"t\":{\"dtype\":\"F32\",", -1, NULL, 0, 0), VL_EIO,
              "not valid JSON", NULL);
  expect_fail(write_st("array.safetensors", "[1, 2]", -1, NULL, 0, 0), VL_EIO, "not an object", NULL);
  expect_fail(write_st("garbage.safetensors", "{}  x", -1, NULL, 0, 0), VL_EIO, "after the JSON", NULL);
  expect_fail(write_st("entry.safetensors", "{\"t\": 3}", -1, NULL, 0, 0), VL_EIO, "\"t\"", "not a JSON object");
  expect_fail(write_st("fields.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2]}}", -1, data, 8, 0), VL_EIO,
              "\"t\"", "data_offsets");
  /* unknown dtype, bad shapes */
  expect_fail(write_st("dtype.safetensors", "{\"t\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}",
                       -1, data, 2, 0), VL_EIO, "\"t\"", "unknown dtype \"F8_E4M3\"");
  expect_fail(write_st("negshape.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}",
                       -1, data, 8, 0), VL_EIO, "\"t\"", "shape entry 1");
  expect_fail(write_st("fracshape.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}",
                       -1, data, 8, 0), VL_EIO, "\"t\"", "shape entry 1");
  expect_fail(write_st("ndim.safetensors",
                       "{\"t\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", -1, data, 1,
                       0), VL_EIO, "\"t\"", "9 dims");
  expect_fail(write_st("huge.safetensors",
                       "{\"t\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,8]}}", -1,
                       data, 8, 0), VL_EIO, "\"t\"", "absurd shape");
  /* byte length that does not match the shape */
  expect_fail(write_st("nbytes.safetensors", "{\"t\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,12]}}",
                       -1, data, 12, 0), VL_EIO, "\"t\"", "needs 24");
  expect_fail(write_st("backwards.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,2]}}",
                       -1, data, 4, 0), VL_EIO, "\"t\"", "end before");
  expect_fail(write_st("offs.safetensors", "{\"t\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0]}}", -1,
                       data, 1, 0), VL_EIO, "\"t\"", "two non-negative");
  /* overlapping, holes, out of range, trailing bytes */
  expect_fail(write_st("overlap.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", -1, data, 12, 0),
              VL_EIO, "\"a\"", "\"b\" [4, 12] overlap");
  expect_fail(write_st("hole.safetensors",
                       "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", -1, data, 12, 0),
              VL_EIO, "bytes [4, 8)", "\"b\"");
  expect_fail(write_st("range.safetensors", T1, -1, data, 6, 0), VL_EIO, "truncated", "\"t\"");
  expect_fail(write_st("range.safetensors.gz", T1, -1, data, 6, 1), VL_EIO, "truncated", "\"t\"");
  expect_fail(write_st("emptyrange.safetensors",
                       "{\"t\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"e\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[16,16]}}", -1, data, 8, 0),
              VL_EIO, "\"e\"", "beyond the data section");
  expect_fail(write_st("trailing.safetensors", T1, -1, data, 10, 0), VL_EIO, "2 bytes after the last tensor", NULL);
  expect_fail(write_st("trailing.safetensors.gz", T1, -1, data, 10, 1), VL_EIO, "after the last tensor", NULL);
  /* duplicates, metadata */
  expect_fail(write_st("dup.safetensors",
                       "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                       "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", -1, data, 2, 0),
              VL_EIO, "duplicate tensor name \"a\"", NULL);
  expect_fail(write_st("meta.safetensors", "{\"__metadata__\":{\"k\":1}}", -1, NULL, 0, 0), VL_EIO,
              "__metadata__", "\"k\"");
  expect_fail(write_st("meta2.safetensors", "{\"__metadata__\":{},\"__metadata__\":{}}", -1, NULL, 0, 0), VL_EIO,
              "duplicate __metadata__", NULL);
  /* BOOL bytes other than 0/1 */
  unsigned char bools[2] = {1, 7};
  expect_fail(write_st("bool.safetensors", "{\"m\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[0,2]}}", -1,
                       bools, 2, 0), VL_EIO, "\"m\"", "0x07");
  /* a gzip stream cut in the middle */
  {
    float big[4096];
    for (int i = 0; i < 4096; i++) big[i] = (float)sin(i);
    const char *h = "{\"t\":{\"dtype\":\"F32\",\"shape\":[4096],\"data_offsets\":[0,16384]}}";
    p = write_st("cut.safetensors.gz", h, -1, big, sizeof big, 1);
    FILE *f = fopen(p, "rb");
    unsigned char *buf = malloc(1 << 16);
    size_t n = fread(buf, 1, 1 << 16, f);
    fclose(f);
    write_bytes(p, buf, n / 2, 0); /* the first half of the compressed bytes */
    free(buf);
    expect_fail(p, VL_EIO, "truncated", NULL);
  }
  /* a directory */
  expect_fail(dir, VL_EIO, "directory", NULL);
}

static void test_write_errors(void) {
  float v[2] = {1, 2};
  int64_t s2[1] = {2};
  vl_tensor *a = from_host(v, 1, s2, VL_F32);
  vl_tensor *ts[2] = {a, a};
  const char *dup[2] = {"x", "x"};
  const char *p = path_of("dup_out.safetensors");
  CHECK(vl_safetensors_write(p, 2, dup, ts, 0, NULL, NULL) == VL_EINVAL);
  CHECK(strstr(vl_errmsg(), "duplicate tensor name \"x\"") != NULL);
  CHECK(access(p, F_OK) != 0);
  const char *reserved = "__metadata__";
  CHECK(vl_safetensors_write(p, 1, &reserved, ts, 0, NULL, NULL) == VL_EINVAL);
  const char *empty = "";
  CHECK(vl_safetensors_write(p, 1, &empty, ts, 0, NULL, NULL) == VL_EINVAL);
  const char *name = "x";
  CHECK(vl_safetensors_write(path_of("no/such/dir/f.safetensors"), 1, &name, ts, 0, NULL, NULL) == VL_EIO);
  CHECK(strstr(vl_errmsg(), "no/such/dir") != NULL);
  /* a failed save leaves the previous file intact */
  p = path_of("keep.safetensors");
  CHECK(vl_safetensors_write(p, 1, &name, ts, 0, NULL, NULL) == VL_OK);
  CHECK(vl_safetensors_write(p, 2, dup, ts, 0, NULL, NULL) == VL_EINVAL);
  vl_safetensors st;
  CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 1);
  vl_safetensors_free(&st);
  vl_tensor_release(a);
}


/* ---- gzip integrity, bounds and names ---- */

static int count_of(const char *hay, const char *needle) {
  int k = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) k++;
  return k;
}

static void test_gzip_integrity(void) {
  float v[64];
  for (int i = 0; i < 64; i++) v[i] = (float)cos(i);
  const char *h = "{\"t\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,256]}}";
  const char *p = write_st("whole.safetensors.gz", h, -1, v, sizeof v, 1);
  size_t n;
  unsigned char *gz = vl_test_slurp(p, &n);
  vl_safetensors st;
  CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 1);
  vl_safetensors_free(&st);
  /* Each cut of 1 to 8 bytes removes part of the CRC32/ISIZE trailer: all data is there, the
   * check is not. Before the fix these loaded. */
  for (size_t cut = 1; cut <= 8; cut++) {
    p = path_of("cut_trailer.safetensors.gz");
    write_bytes(p, gz, n - cut, 0);
    expect_fail(p, VL_EIO, "truncated gzip data", "CRC32/ISIZE trailer");
  }
  /* a bit flip in the compressed data plus a cut trailer: still an error, never wrong values */
  unsigned char *bad = malloc(n);
  memcpy(bad, gz, n);
  bad[n / 2] ^= 0x10;
  p = path_of("flip_cut.safetensors.gz");
  write_bytes(p, bad, n - 4, 0);
  expect_fail(p, VL_EIO, NULL, NULL);
  /* a flipped CRC32 with everything else intact */
  memcpy(bad, gz, n);
  bad[n - 8] ^= 0x01;
  p = path_of("crc.safetensors.gz");
  write_bytes(p, bad, n, 0);
  expect_fail(p, VL_EIO, "corrupt gzip data", "CRC32 mismatch");
  /* the path appears once in a gzip error (zlib's own message repeats it) */
  CHECK(count_of(vl_errmsg(), p) == 1);
  /* a wrong ISIZE */
  memcpy(bad, gz, n);
  bad[n - 1] ^= 0x01;
  p = path_of("isize.safetensors.gz");
  write_bytes(p, bad, n, 0);
  expect_fail(p, VL_EIO, "corrupt gzip data", "ISIZE mismatch");
  /* junk after the stream (plain files reject trailing bytes; so do gzip ones now) */
  unsigned char *junk = malloc(n + 5);
  memcpy(junk, gz, n);
  memcpy(junk + n, "JUNK!", 5);
  p = path_of("junk.safetensors.gz");
  write_bytes(p, junk, n + 5, 0);
  expect_fail(p, VL_EIO, "5 bytes of junk after the gzip data", "not another gzip member");
  write_bytes(p, junk, n + 1, 0);
  expect_fail(p, VL_EIO, "1 byte of junk", NULL);
  free(junk);
  /* concatenated members (`gzip -c a b`) read as the concatenation, as gunzip does */
  {
    unsigned char raw[8 + 256 + 256];
    size_t hl = strlen(h);
    for (int i = 0; i < 8; i++) raw[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(raw + 8, h, hl);
    memcpy(raw + 8 + hl, v, sizeof v);
    size_t total = 8 + hl + sizeof v, half = total / 2;
    write_bytes(path_of("m1.gz"), raw, half, 1);
    write_bytes(path_of("m2.gz"), raw + half, total - half, 1);
    size_t n1, n2;
    unsigned char *a = vl_test_slurp(path_of("m1.gz"), &n1), *b = vl_test_slurp(path_of("m2.gz"), &n2);
    unsigned char *ab = malloc(n1 + n2);
    memcpy(ab, a, n1);
    memcpy(ab + n1, b, n2);
    p = path_of("members.safetensors.gz");
    write_bytes(p, ab, n1 + n2, 0);
    CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 1);
    if (st.n == 1) {
      int64_t s1[1] = {64};
      vl_tensor *want = from_host(v, 1, s1, VL_F32);
      CHECK(same_bytes(st.tensors[0], want));
      vl_tensor_release(want);
    }
    vl_safetensors_free(&st);
    /* the second member cut short is still a truncation */
    write_bytes(p, ab, n1 + n2 - 3, 0);
    expect_fail(p, VL_EIO, "truncated gzip data", NULL);
    free(a);
    free(b);
    free(ab);
  }
  free(bad);
  free(gz);
}

static void test_gzip_bounds(void) {
  /* A tiny gzip file whose header declares 15 GB: rejected before anything is allocated. */
  const char *h = "{\"t\":{\"dtype\":\"U8\",\"shape\":[15000000000],\"data_offsets\":[0,15000000000]}}";
  const char *p = write_st("huge.safetensors.gz", h, -1, "abc", 3, 1);
  expect_fail(p, VL_EIO, "announces 15000000000 data bytes", "inflates to at most");
  /* A header length no compressed size of this file can hold */
  {
    unsigned char b[10] = {0, 0, 0x10, 0, 0, 0, 0, 0, '{', '}'}; /* 1 MiB of header */
    p = path_of("hlen.safetensors.gz");
    write_bytes(p, b, 10, 1);
    expect_fail(p, VL_EIO, "header length 1048576", "inflates to at most");
  }
  /* Within the ratio bound but cut short: 40 MB declared, the stream holds 256 KB of
   * incompressible bytes. The tensor is read in chunks as they arrive, so this fails on the
   * truncation, having allocated only what arrived. */
  {
    size_t nd = 256 << 10;
    unsigned char *d = malloc(nd);
    uint64_t x = 88172645463325252ull;
    for (size_t i = 0; i < nd; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      d[i] = (unsigned char)x;
    }
    const char *h2 = "{\"t\":{\"dtype\":\"U8\",\"shape\":[40000000],\"data_offsets\":[0,40000000]}}";
    p = write_st("short.safetensors.gz", h2, -1, d, nd, 1);
    expect_fail(p, VL_EIO, "truncated: tensor \"t\" has 262144 of its 40000000 bytes", NULL);
    free(d);
  }
  /* 4 GB announced and 4 MB of incompressible data present (within the ratio bound): in a child
   * whose address space is capped at 1 GB above what it uses, the load fails on the truncation,
   * not on allocating the 4 GB the header asks for. */
  {
    size_t nd = 4 << 20;
    unsigned char *d = malloc(nd);
    uint64_t x = 2463534242ull;
    for (size_t i = 0; i < nd; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      d[i] = (unsigned char)x;
    }
    const char *h3 = "{\"t\":{\"dtype\":\"U8\",\"shape\":[4000000000],\"data_offsets\":[0,4000000000]}}";
    p = write_st("big4g.safetensors.gz", h3, -1, d, nd, 1);
    free(d);
    long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f && fscanf(f, "%ld", &pages) != 1) pages = 0;
    if (f) fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
      struct rlimit rl;
      rl.rlim_cur = rl.rlim_max = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
      if (pages <= 0 || setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
      vl_safetensors st;
      vl_status s = vl_safetensors_read(p, &st);
      if (s != VL_EIO || !strstr(vl_errmsg(), "truncated: tensor \"t\" has 4194304 of")) {
        fprintf(stderr, "  capped load: %s\n", vl_errmsg());
        _exit(1);
      }
      _exit(0);
    }
    int status = -1;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  /* A compressed tensor larger than one read chunk round-trips through the chunked path. */
  {
    int64_t n = 5 << 20; /* 20 MiB of f32: two chunks and a part */
    int64_t sz[1] = {n};
    float *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(i % 1000) * 0.5f;
    vl_tensor *t = from_host(v, 1, sz, VL_F32);
    const char *name = "big";
    p = path_of("big.safetensors.gz");
    CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
    vl_safetensors st;
    CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 1);
    if (st.n == 1) CHECK(same_bytes(st.tensors[0], t));
    vl_safetensors_free(&st);
    vl_tensor_release(t);
    free(v);
  }
}

static void test_bad_names(void) {
  unsigned char data[8] = {0};
  /* "a\u0000evil" used to load as "a" */
  expect_fail(write_st("nul.safetensors",
                       "{\"a\\u0000evil\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", -1, data,
                       1, 0), VL_EIO, "tensor name \"a\\u0000evil\"", "NUL character");
  expect_fail(write_st("nulmeta.safetensors", "{\"__metadata__\":{\"k\":\"v\\u0000w\"}}", -1, NULL, 0, 0),
              VL_EIO, "\"v\\u0000w\"", "NUL character");
  /* an escaped backslash before "u0000" is a plain string */
  vl_safetensors st;
  const char *p = write_st("bs.safetensors",
                           "{\"a\\\\u0000b\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", -1, data, 1, 0);
  CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 1 && strcmp(st.names[0], "a\\u0000b") == 0);
  vl_safetensors_free(&st);
  /* invalid UTF-8: a lone continuation byte, an overlong '/', an encoded surrogate */
  const char *bad[3] = {"{\"x\x80y\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                        "{\"x\xC0\xAF\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                        "{\"x\xED\xA0\x80\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}"};
  const char *shown[3] = {"\"x\\x80y\"", "\"x\\xC0\\xAF\"", "\"x\\xED\\xA0\\x80\""};
  for (int i = 0; i < 3; i++)
    expect_fail(write_st("utf8.safetensors", bad[i], -1, data, 1, 0), VL_EIO, shown[i], "not valid UTF-8");
  /* valid multi-byte names load */
  p = write_st("utf8ok.safetensors", "{\"caf\xC3\xA9\xF0\x9F\x98\x80\":{\"dtype\":\"U8\",\"shape\":[1],"
               "\"data_offsets\":[0,1]}}", -1, data, 1, 0);
  CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 1);
  vl_safetensors_free(&st);
  /* and saving refuses invalid UTF-8 names and metadata */
  int64_t s1[1] = {1};
  vl_tensor *t = from_host(data, 1, s1, VL_U8);
  const char *name = "x\xFFy", *ok = "ok", *k = "k", *v = "\xC3";
  p = path_of("badname_out.safetensors");
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_EINVAL);
  CHECK(strstr(vl_errmsg(), "tensor name \"x\\xFFy\" is not valid UTF-8") && strstr(vl_errmsg(), p));
  CHECK(vl_safetensors_write(p, 1, &ok, &t, 1, &k, &v) == VL_EINVAL);
  CHECK(strstr(vl_errmsg(), "metadata value") != NULL);
  CHECK(access(p, F_OK) != 0);
  vl_tensor_release(t);
}

/* ---- crash-safe saves ---- */

/* Names in dir that start with prefix. */
static int count_prefixed(const char *prefix) {
  DIR *d = opendir(dir);
  int k = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) k += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
  if (d) closedir(d);
  return k;
}

/* Temporary files of saves in dir. */
static int count_temps(void) {
  DIR *d = opendir(dir);
  int k = 0;
  struct dirent *e;
  while (d && (e = readdir(d)) != NULL) k += strstr(e->d_name, ".v100tmp-") != NULL;
  if (d) closedir(d);
  return k;
}

static pid_t dead_pid(void) {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, NULL, 0);
  return pid;
}

static void test_save_files(void) {
  float v[4] = {1, 2, 3, 4};
  int64_t s4[1] = {4};
  vl_tensor *t = from_host(v, 1, s4, VL_F32);
  const char *name = "w";
  vl_safetensors st;
  /* a stale temporary file of a dead process is removed by the next save; a live one is kept */
  char stale[600], live[600];
  snprintf(stale, sizeof stale, "%s/.ck.safetensors.v100tmp-%ld-%ld", dir, (long)dead_pid(), 7L);
  snprintf(live, sizeof live, "%s/.ck.safetensors.v100tmp-%ld-%ld", dir, (long)getppid(), 7L);
  write_bytes(stale, "partial", 7, 0);
  write_bytes(live, "partial", 7, 0);
  const char *p = path_of("ck.safetensors");
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  CHECK(access(stale, F_OK) != 0);
  CHECK(access(live, F_OK) == 0);
  unlink(live);
  CHECK(count_prefixed(".ck.safetensors.v100tmp-") == 0);

  /* the mode of an existing file is kept */
  CHECK(chmod(p, 0600) == 0);
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  struct stat sb;
  CHECK(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 0600);
  CHECK(chmod(p, 0640) == 0);
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  CHECK(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 0640);
  /* a new file gets 0666 less the umask */
  mode_t um = umask(022);
  p = path_of("fresh.safetensors");
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  CHECK(stat(p, &sb) == 0 && (sb.st_mode & 07777) == 0644);
  umask(um);

  /* a symlink stays a symlink; its target gets the new contents */
  const char *target = path_of("real.safetensors"), *link = path_of("link.safetensors");
  CHECK(vl_safetensors_write(target, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  CHECK(symlink("real.safetensors", link) == 0);
  const char *other = "renamed";
  CHECK(vl_safetensors_write(link, 1, &other, &t, 0, NULL, NULL) == VL_OK);
  CHECK(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
  CHECK(vl_safetensors_read(target, &st) == VL_OK && st.n == 1 && strcmp(st.names[0], "renamed") == 0);
  vl_safetensors_free(&st);
  /* a dangling symlink is refused, and left as it was */
  const char *dangling = path_of("dangling.safetensors");
  CHECK(symlink("nowhere/x.safetensors", dangling) == 0);
  CHECK(vl_safetensors_write(dangling, 1, &name, &t, 0, NULL, NULL) == VL_EIO);
  CHECK(strstr(vl_errmsg(), "symbolic link") && strstr(vl_errmsg(), dangling));
  CHECK(lstat(dangling, &sb) == 0 && S_ISLNK(sb.st_mode));
  CHECK(count_temps() == 0); /* no temporary file left by any of these */
  vl_tensor_release(t);
}

/* A save killed by SIGKILL part-way leaves its temporary file; the next save removes it and the
 * file at the path is always a complete checkpoint. */
static void test_save_killed(void) {
  int64_t n = 4 << 20;
  int64_t sz[1] = {n};
  float *v = calloc((size_t)n, sizeof *v);
  vl_tensor *t = from_host(v, 1, sz, VL_F32);
  free(v);
  const char *name = "w";
  const char *p = path_of("killed.safetensors");
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  pid_t pid = fork();
  if (pid == 0) {
    for (;;) vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL);
  }
  char tmp[600];
  snprintf(tmp, sizeof tmp, ".killed.safetensors.v100tmp-%ld-", (long)pid);
  int seen = 0;
  for (int i = 0; i < 20000 && !seen; i++) { /* up to ~20 s */
    seen = count_prefixed(tmp) > 0;
    if (!seen) nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  CHECK(seen);
  vl_safetensors st;
  CHECK(vl_safetensors_read(p, &st) == VL_OK && st.n == 1);
  vl_safetensors_free(&st);
  CHECK(vl_safetensors_write(p, 1, &name, &t, 0, NULL, NULL) == VL_OK);
  CHECK(count_prefixed(tmp) == 0);
  vl_tensor_release(t);
}

static void test_dtype_names(void) {
  vl_dtype dt;
  const vl_dtype all[8] = {VL_F32, VL_F16, VL_BF16, VL_F64, VL_I64, VL_I32, VL_U8, VL_BOOL};
  for (int i = 0; i < 8; i++) CHECK(vl_st_dtype_parse(vl_st_dtype_name(all[i]), &dt) == VL_OK && dt == all[i]);
  CHECK(vl_st_dtype_parse("I16", &dt) == VL_EIO && strstr(vl_errmsg(), "I16"));
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/vl_test_safetensors_XXXXXX");
  if (!mkdtemp(dir)) return 2;
  test_round_trip(0);
  test_round_trip(1);
  test_strided();
  test_layout();
  test_foreign_file();
  test_errors();
  test_write_errors();
  test_gzip_integrity();
  test_gzip_bounds();
  test_bad_names();
  test_save_files();
  test_save_killed();
  test_dtype_names();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return vl_test_finish();
}
