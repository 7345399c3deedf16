/* tests/c/test_idx.c: the IDX reader on small files written here (plain and gzip), every error
 * path (gzip trailers, junk after the stream, concatenated members, headers that promise more than
 * a compressed file can hold), and, when the dataset package is installed, the real Fashion-MNIST
 * test labels. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "runtime/io/idx.h"
#include "vl_test.h"

static char dir[256];

static const char *path_of(const char *name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

/* Writes bytes to dir/name, gzip-compressed when gz. Returns the full path (static buffer). */
static const char *write_file(const char *name, const unsigned char *bytes, size_t n, int gz) {
  const char *p = path_of(name);
  if (gz) {
    gzFile f = gzopen(p, "wb");
    if (!f || (n && gzwrite(f, bytes, (unsigned)n) != (int)n) || gzclose(f) != Z_OK) {
      fprintf(stderr, "cannot write %s\n", p);
      exit(2);
    }
  } else {
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
      fprintf(stderr, "cannot write %s\n", p);
      exit(2);
    }
  }
  return p;
}

/* Builds header + payload into buf; returns the length. */
static size_t make_idx(unsigned char *buf, int code, int ndim, const uint32_t *dims,
                       const unsigned char *payload, size_t npayload) {
  size_t n = 0;
  buf[n++] = 0; buf[n++] = 0; buf[n++] = (unsigned char)code; buf[n++] = (unsigned char)ndim;
  for (int d = 0; d < ndim; d++) {
    buf[n++] = (unsigned char)(dims[d] >> 24); buf[n++] = (unsigned char)(dims[d] >> 16);
    buf[n++] = (unsigned char)(dims[d] >> 8); buf[n++] = (unsigned char)dims[d];
  }
  if (npayload) memcpy(buf + n, payload, npayload);
  return n + npayload;
}

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static void test_u8_both_encodings(void) {
  unsigned char payload[24], buf[64];
  for (int i = 0; i < 24; i++) payload[i] = (unsigned char)(i * 10 + 3);
  uint32_t dims[3] = {2, 3, 4};
  size_t n = make_idx(buf, 0x08, 3, dims, payload, 24);
  for (int gz = 0; gz < 2; gz++) {
    vl_tensor *t = NULL;
    const char *p = write_file(gz ? "u8.idx.gz" : "u8.idx", buf, n, gz);
    CHECK(vl_idx_read(p, &t) == VL_OK);
    if (!t) continue;
    CHECK(t->dtype == VL_U8 && t->ndim == 3);
    CHECK(t->size[0] == 2 && t->size[1] == 3 && t->size[2] == 4);
    CHECK(t->storage->device.type == VL_CPU && vl_tensor_is_contiguous(t));
    CHECK(memcmp(vl_tensor_data(t), payload, 24) == 0);
    vl_tensor_release(t);
  }
}

static void test_wide_types(void) {
  unsigned char payload[64], buf[128];
  uint32_t dims[1] = {3};
  vl_tensor *t = NULL;

  /* i32 big-endian: 1, -2, 0x01020304 */
  put_be32(payload, 1); put_be32(payload + 4, (uint32_t)-2); put_be32(payload + 8, 0x01020304u);
  size_t n = make_idx(buf, 0x0C, 1, dims, payload, 12);
  CHECK(vl_idx_read(write_file("i32.idx.gz", buf, n, 1), &t) == VL_OK);
  if (t) {
    const int32_t *v = vl_tensor_data(t);
    CHECK(t->dtype == VL_I32 && t->size[0] == 3);
    CHECK(v[0] == 1 && v[1] == -2 && v[2] == 0x01020304);
    vl_tensor_release(t); t = NULL;
  }

  /* f32: 1.5, -3.25, 1e-3 */
  float f[3] = {1.5f, -3.25f, 1e-3f};
  for (int i = 0; i < 3; i++) { uint32_t u; memcpy(&u, &f[i], 4); put_be32(payload + 4 * i, u); }
  n = make_idx(buf, 0x0D, 1, dims, payload, 12);
  CHECK(vl_idx_read(write_file("f32.idx", buf, n, 0), &t) == VL_OK);
  if (t) {
    const float *v = vl_tensor_data(t);
    CHECK(t->dtype == VL_F32 && v[0] == 1.5f && v[1] == -3.25f && v[2] == 1e-3f);
    vl_tensor_release(t); t = NULL;
  }

  /* f64: pi, -0.1, 1e300 */
  double d[3] = {3.141592653589793, -0.1, 1e300};
  for (int i = 0; i < 3; i++) {
    uint64_t u; memcpy(&u, &d[i], 8);
    put_be32(payload + 8 * i, (uint32_t)(u >> 32)); put_be32(payload + 8 * i + 4, (uint32_t)u);
  }
  n = make_idx(buf, 0x0E, 1, dims, payload, 24);
  CHECK(vl_idx_read(write_file("f64.idx.gz", buf, n, 1), &t) == VL_OK);
  if (t) {
    const double *v = vl_tensor_data(t);
    CHECK(t->dtype == VL_F64 && v[0] == 3.141592653589793 && v[1] == -0.1 && v[2] == 1e300);
    vl_tensor_release(t); t = NULL;
  }

  /* i8 widened to i32: 127, -128, -1 */
  unsigned char b8[3] = {0x7F, 0x80, 0xFF};
  n = make_idx(buf, 0x09, 1, dims, b8, 3);
  CHECK(vl_idx_read(write_file("i8.idx", buf, n, 0), &t) == VL_OK);
  if (t) {
    const int32_t *v = vl_tensor_data(t);
    CHECK(t->dtype == VL_I32 && v[0] == 127 && v[1] == -128 && v[2] == -1);
    vl_tensor_release(t); t = NULL;
  }

  /* i16 widened to i32: 0x7FFF, -32768, -2 */
  unsigned char b16[6] = {0x7F, 0xFF, 0x80, 0x00, 0xFF, 0xFE};
  n = make_idx(buf, 0x0B, 1, dims, b16, 6);
  CHECK(vl_idx_read(write_file("i16.idx.gz", buf, n, 1), &t) == VL_OK);
  if (t) {
    const int32_t *v = vl_tensor_data(t);
    CHECK(t->dtype == VL_I32 && v[0] == 32767 && v[1] == -32768 && v[2] == -2);
    vl_tensor_release(t); t = NULL;
  }

  /* A zero-sized dim is a valid empty tensor. */
  uint32_t dz[2] = {0, 5};
  n = make_idx(buf, 0x08, 2, dz, NULL, 0);
  CHECK(vl_idx_read(write_file("empty.idx", buf, n, 0), &t) == VL_OK);
  if (t) {
    CHECK(t->ndim == 2 && t->size[0] == 0 && t->size[1] == 5 && vl_tensor_numel(t) == 0);
    vl_tensor_release(t); t = NULL;
  }
}

/* Expects failure with `code`, a message naming the file (when `p` is given) and containing
 * `what`, and *out untouched. */
static void expect_fail(const char *p, const char *what, vl_status code, int line) {
  vl_tensor *sentinel = (vl_tensor *)(uintptr_t)0x1234, *t = sentinel;
  vl_status s = vl_idx_read(p, &t);
  const char *msg = vl_errmsg();
  if (getenv("VL_TEST_VERBOSE")) printf("  %s\n", msg);
  int ok = s == code && t == sentinel && strstr(msg, what) != NULL && (!p || strstr(msg, p));
  if (!ok) {
    fprintf(stderr, "test_idx.c:%d: expected %s containing \"%s\", got %s: %s\n", line,
            vl_status_name(code), what, vl_status_name(s), msg);
    vl_test_failed++;
    if (s == VL_OK && t != sentinel) vl_tensor_release(t);
  } else {
    vl_test_passed++;
  }
}
#define EXPECT_FAIL(p, what) expect_fail((p), (what), VL_EIO, __LINE__)

static void test_errors(void) {
  unsigned char payload[64], buf[256];
  memset(payload, 7, sizeof payload);
  uint32_t dims[2] = {4, 4};

  EXPECT_FAIL(path_of("no-such-file.gz"), "No such file");

  size_t n = make_idx(buf, 0x08, 2, dims, payload, 16);
  buf[0] = 0x1F; /* first byte of the magic must be 0 */
  EXPECT_FAIL(write_file("badmagic.idx", buf, n, 0), "bad magic");
  EXPECT_FAIL(write_file("badmagic.idx.gz", buf, n, 1), "bad magic");

  n = make_idx(buf, 0x0A, 2, dims, payload, 16);
  EXPECT_FAIL(write_file("badtype.idx.gz", buf, n, 1), "unsupported IDX type code 0x0A");

  n = make_idx(buf, 0x08, 0, dims, payload, 16);
  EXPECT_FAIL(write_file("ndim0.idx", buf, n, 0), "0 dimensions");
  uint32_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  n = make_idx(buf, 0x08, 9, nine, payload, 1);
  EXPECT_FAIL(write_file("ndim9.idx", buf, n, 0), "9 dimensions");

  uint32_t huge[3] = {0xFFFFFFFFu, 0xFFFFFFFFu, 2};
  n = make_idx(buf, 0x0C, 3, huge, payload, 16);
  EXPECT_FAIL(write_file("huge.idx.gz", buf, n, 1), "absurd dims 4294967295x4294967295x2");
  /* Below the cap, but far beyond the plain file's size: rejected before allocating. */
  uint32_t big[2] = {1u << 20, 1u << 16};
  n = make_idx(buf, 0x08, 2, big, payload, 16);
  EXPECT_FAIL(write_file("big.idx", buf, n, 0), "truncated data");

  n = make_idx(buf, 0x08, 2, dims, payload, 10); /* 16 announced, 10 present */
  EXPECT_FAIL(write_file("short.idx", buf, n, 0), "only 10 bytes follow");
  EXPECT_FAIL(write_file("short.idx.gz", buf, n, 1), "only 10 bytes follow");

  n = make_idx(buf, 0x0C, 2, dims, payload, 0);
  EXPECT_FAIL(write_file("hdr.idx", buf, n - 2, 0), "truncated header");
  EXPECT_FAIL(write_file("magic.idx", buf, 3, 0), "shorter than the 4-byte IDX magic");
  EXPECT_FAIL(write_file("zero.idx.gz", buf, 0, 1), "shorter than the 4-byte IDX magic");

  n = make_idx(buf, 0x08, 2, dims, payload, 20); /* 4 bytes too many */
  EXPECT_FAIL(write_file("long.idx.gz", buf, n, 1), "extra bytes after the data");

  /* A gzip stream cut in the middle (the file itself is truncated). */
  unsigned char big_payload[4096];
  for (size_t i = 0; i < sizeof big_payload; i++) big_payload[i] = (unsigned char)(i * 2654435761u >> 13);
  uint32_t d1[1] = {4096};
  static unsigned char whole[8192];
  n = make_idx(whole, 0x08, 1, d1, big_payload, sizeof big_payload);
  const char *gzp = write_file("cut.idx.gz", whole, n, 1);
  FILE *f = fopen(gzp, "rb");
  static unsigned char gzbytes[16384];
  size_t gzn = f ? fread(gzbytes, 1, sizeof gzbytes, f) : 0;
  if (f) fclose(f);
  CHECK(gzn > 100);
  EXPECT_FAIL(write_file("cut2.idx.gz", gzbytes, gzn / 2, 0), "truncated");

  expect_fail(NULL, "path is NULL", VL_EINVAL, __LINE__);

  vl_dtype dt;
  int esz;
  CHECK(vl_idx_type_info(0x0D, &dt, &esz) == VL_OK && dt == VL_F32 && esz == 4);
  CHECK(vl_idx_type_info(0x07, &dt, &esz) == VL_EIO);
}


static void test_gzip_integrity(void) {
  unsigned char payload[300], buf[400];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (unsigned char)(i * 7);
  uint32_t dims[2] = {30, 10};
  size_t n = make_idx(buf, 0x08, 2, dims, payload, sizeof payload);
  char whole[600];
  snprintf(whole, sizeof whole, "%s", write_file("whole.idx.gz", buf, n, 1));
  size_t gzn;
  unsigned char *gz = vl_test_slurp(whole, &gzn);
  vl_tensor *t = NULL;
  CHECK(vl_idx_read(whole, &t) == VL_OK);
  vl_tensor_release(t);
  /* a missing or partial CRC32/ISIZE trailer: the data is all there, the check is not */
  for (size_t cut = 1; cut <= 8; cut++)
    EXPECT_FAIL(write_file("cut_trailer.idx.gz", gz, gzn - cut, 0), "CRC32/ISIZE trailer");
  unsigned char *bad = malloc(gzn + 8);
  memcpy(bad, gz, gzn);
  bad[gzn - 6] ^= 0x40; /* in the CRC32 */
  EXPECT_FAIL(write_file("crc.idx.gz", bad, gzn, 0), "CRC32 mismatch");
  /* the path appears once (zlib's own message would repeat it) */
  const char *m = vl_errmsg(), *p = path_of("crc.idx.gz");
  const char *first = strstr(m, p);
  CHECK(first && !strstr(first + 1, p));
  /* junk after the stream */
  memcpy(bad, gz, gzn);
  memcpy(bad + gzn, "\0\0\0\0", 4);
  EXPECT_FAIL(write_file("junk.idx.gz", bad, gzn + 4, 0), "4 bytes of junk after the gzip data");
  /* two members, as `gzip -c a b` makes: their concatenation */
  size_t half = n / 3, n1, n2;
  unsigned char *a, *b;
  write_file("m1.gz", buf, half, 1);
  a = vl_test_slurp(path_of("m1.gz"), &n1);
  write_file("m2.gz", buf + half, n - half, 1);
  b = vl_test_slurp(path_of("m2.gz"), &n2);
  unsigned char *ab = malloc(n1 + n2);
  memcpy(ab, a, n1);
  memcpy(ab + n1, b, n2);
  t = NULL;
  CHECK(vl_idx_read(write_file("members.idx.gz", ab, n1 + n2, 0), &t) == VL_OK);
  if (t) CHECK(t->ndim == 2 && t->size[0] == 30 && memcmp(vl_tensor_data(t), payload, sizeof payload) == 0);
  vl_tensor_release(t);
  free(a);
  free(b);
  free(ab);
  free(bad);
  free(gz);
}

static void test_gzip_bounds(void) {
  /* 15 GB announced by a gzip file of a few dozen bytes: refused before allocating */
  unsigned char buf[64], payload[16] = {0};
  uint32_t dims[3] = {15000u, 1000u, 1000u};
  size_t n = make_idx(buf, 0x08, 3, dims, payload, sizeof payload);
  EXPECT_FAIL(write_file("huge15.idx.gz", buf, n, 1), "inflates to at most");
  /* within the ratio bound but short: read in chunks, fails on the truncation */
  size_t nd = 256 << 10;
  unsigned char *big = malloc(nd + 64);
  uint32_t d1[1] = {40000000u};
  n = make_idx(big, 0x08, 1, d1, NULL, 0);
  uint64_t x = 88172645463325252ull;
  for (size_t i = 0; i < nd; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    big[n + i] = (unsigned char)x;
  }
  EXPECT_FAIL(write_file("short40m.idx.gz", big, n + nd, 1), "only 262144 bytes follow");
  free(big);
  /* a compressed file larger than one read chunk, widened: i16 -> i32 across chunk borders */
  size_t ne = (size_t)9 << 20; /* 18 MiB of i16 */
  unsigned char *w = malloc(ne * 2 + 16);
  uint32_t dn[1] = {(uint32_t)ne};
  n = make_idx(w, 0x0B, 1, dn, NULL, 0);
  for (size_t i = 0; i < ne; i++) {
    int16_t v = (int16_t)(i * 37 - 30000);
    w[n + 2 * i] = (unsigned char)((uint16_t)v >> 8);
    w[n + 2 * i + 1] = (unsigned char)v;
  }
  vl_tensor *t = NULL;
  CHECK(vl_idx_read(write_file("wide.idx.gz", w, n + ne * 2, 1), &t) == VL_OK);
  if (t) {
    const int32_t *v = vl_tensor_data(t);
    size_t bad = 0;
    for (size_t i = 0; i < ne; i++) bad += v[i] != (int16_t)(i * 37 - 30000);
    CHECK(t->dtype == VL_I32 && t->size[0] == (int64_t)ne && bad == 0);
  }
  vl_tensor_release(t);
  free(w);
}

/* The real data set, when installed: Fashion-MNIST t10k labels are 10000 u8 values 0..9, 1000
 * of each class, and the first two are 9 (ankle boot) and 2 (pullover). */
static void test_fashion_mnist(void) {
  const char *p = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";
  if (access(p, R_OK) != 0) {
    printf("skipping the Fashion-MNIST check: %s not installed\n", p);
    return;
  }
  vl_tensor *t = NULL;
  CHECK(vl_idx_read(p, &t) == VL_OK);
  if (!t) return;
  CHECK(t->dtype == VL_U8 && t->ndim == 1 && t->size[0] == 10000);
  const unsigned char *v = vl_tensor_data(t);
  int count[10] = {0}, bad = 0;
  for (int i = 0; i < 10000; i++) {
    if (v[i] > 9) bad++;
    else count[v[i]]++;
  }
  CHECK(bad == 0);
  for (int c = 0; c < 10; c++) CHECK(count[c] == 1000);
  CHECK(v[0] == 9 && v[1] == 2);
  vl_tensor_release(t);
}

int main(void) {
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/test_idx.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_u8_both_encodings();
  test_wide_types();
  test_errors();
  test_gzip_integrity();
  test_gzip_bounds();
  test_fashion_mnist();

  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
  return vl_test_finish();
}
