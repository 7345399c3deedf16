/* tests/c/test_safetensors.c: the safetensors reader/writer: round trips of every dtype (0-dim,
 * empty and strided tensors included) with metadata, gzip files, the byte layout the format
 * prescribes, and every malformed-file error path (message naming the file and the tensor, the
 * output untouched). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
  test_dtype_names();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return vl_test_finish();
}
