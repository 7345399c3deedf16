/* tests/c/test_tfevents.c: CRC32C and its TFRecord mask, the protobuf bytes of an Event against
 * bytes worked out by hand from event.proto/summary.proto, a write -> read round trip through
 * the file writer, and the reader's errors on a truncated file and on flipped bytes. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/io/tfevents.h"
#include "tests/c/vl_test.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <stdint.h>
/* XINUSE (xgetbv with ecx = 1): which register states are not in their initial state; bit 2 is
 * the upper halves of ymm0-15, bit 6 those of zmm0-15. -1 when the CPU cannot say. */
static int64_t xinuse(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return -1; /* OSXSAVE */
  if (!__get_cpuid_count(0xD, 1, &a, &b, &c, &d) || !(a & (1u << 2))) return -1;
  unsigned lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(1));
  return (int64_t)(((uint64_t)hi << 32) | lo);
}

/* A regression: ISA-L's AVX-512 CRC left the upper vector state dirty, and libm's exp then ran
 * 30 times slower for the rest of the process (every SSE instruction paid a state merge). */
static void test_crc_vector_state(void) {
  size_t n = (size_t)4 << 20;
  unsigned char *buf = malloc(n);
  if (!buf) return;
  memset(buf, 0x5a, n);
  uint32_t c = vl_crc32c(buf, n);
  int64_t st = xinuse();
  if (st < 0) {
    printf("skip: the CPU does not report XINUSE\n");
  } else {
    CHECK((st & ((1 << 2) | (1 << 6))) == 0, "upper vector state dirty after vl_crc32c (XINUSE 0x%llx, crc 0x%08x)",
          (unsigned long long)st, c);
  }
  free(buf);
}
#else
static void test_crc_vector_state(void) {}
#endif

/* The textbook bitwise CRC32C (reflected polynomial 0x82F63B78), only to cross-check ISA-L. */
static uint32_t crc32c_bitwise(const unsigned char *p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ ((c & 1) ? 0x82F63B78u : 0);
  }
  return ~c;
}

static void test_crc(void) {
  CHECK(vl_crc32c("123456789", 9) == 0xE3069283u, "CRC32C check value: 0x%08x", vl_crc32c("123456789", 9));
  CHECK(vl_crc32c("", 0) == 0);
  /* mask(0xE3069283) = ((c >> 15) | (c << 17)) + 0xa282ead8, worked out by hand (mod 2^32) */
  CHECK(vl_crc32c_mask(0xE3069283u) == 0xC78AB0E5u, "mask 0x%08x", vl_crc32c_mask(0xE3069283u));
  unsigned char buf[1000];
  for (int trial = 0; trial < 20; trial++) {
    size_t n = (size_t)(vl_test_urand() * sizeof buf);
    for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(vl_test_urand() * 256);
    CHECK(vl_crc32c(buf, n) == crc32c_bitwise(buf, n), "random buffer of %zu bytes", n);
  }
}

static void test_protobuf(void) {
  /* Event{wall_time 1.5, step 3, summary{value{tag "a/b", simple_value 0.25}}}:
   *   09 <1.5 as LE double>        field 1, wire type 1 (fixed64)
   *   10 03                        field 2, varint 3
   *   2a 0c                        field 5, 12 bytes: Summary
   *     0a 0a                        field 1, 10 bytes: Value
   *       0a 03 'a' '/' 'b'            field 1, string "a/b"
   *       15 <0.25 as LE float>        field 2, wire type 5 (fixed32) */
  static const unsigned char want[] = {0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x10, 0x03, 0x2a, 0x0c,
                                       0x0a, 0x0a, 0x0a, 0x03, 'a', '/', 'b', 0x15, 0, 0, 0x80, 0x3e};
  vl_pbuf b = {0};
  vl_tfevents_encode_scalar(&b, 1.5, 3, "a/b", 3, 0.25f);
  CHECK(b.n == sizeof want, "%zu bytes", b.n);
  CHECK(b.n == sizeof want && memcmp(b.p, want, sizeof want) == 0);
  /* Its TFRecord: u64 length 25, masked CRCs computed by hand with the bitwise CRC above. */
  vl_pbuf r = {0};
  vl_tfrecord_frame(&r, b.p, b.n);
  CHECK(r.n == 12 + 25 + 4);
  static const unsigned char hdr[12] = {25, 0, 0, 0, 0, 0, 0, 0, 0x8b, 0xf1, 0x08, 0x28}; /* 0x2808f18b */
  CHECK(r.n >= 12 && memcmp(r.p, hdr, 12) == 0);
  static const unsigned char tail[4] = {0x14, 0x40, 0x54, 0x8c}; /* 0x8c544014 */
  CHECK(r.n == 41 && memcmp(r.p + 37, tail, 4) == 0);
  vl_pbuf_free(&r);
  vl_pbuf_free(&b);
  /* Negative int64 steps are ten-byte two's complement varints. */
  vl_pb_int64(&b, 2, -1);
  CHECK(b.n == 11 && b.p[0] == 0x10 && b.p[1] == 0xff && b.p[10] == 0x01);
  vl_pbuf_free(&b);
  /* The file_version Event. */
  vl_tfevents_encode_version(&b, 0.0, "brain.Event:2");
  CHECK(b.n == 9 + 2 + 13 && b.p[9] == 0x1a && b.p[10] == 13 && memcmp(b.p + 11, "brain.Event:2", 13) == 0);
  vl_pbuf_free(&b);
}

static unsigned char *slurp(const char *p, size_t *n) { return vl_test_slurp(p, n); }

static void spit(const char *p, const unsigned char *b, size_t n) {
  FILE *f = fopen(p, "wb");
  if (!f || fwrite(b, 1, n, f) != n) exit(2);
  fclose(f);
}

static void test_round_trip(const char *root) {
  char dir[512];
  snprintf(dir, sizeof dir, "%s/run/a", root); /* parents are created */
  vl_tfevents *w = NULL;
  CHECK(vl_tfevents_open(dir, &w) == VL_OK, "%s", vl_errmsg());
  if (!w) return;
  const char *path = vl_tfevents_path(w);
  CHECK(strstr(path, "/events.out.tfevents.") != NULL && strstr(path, ".v100lua") != NULL, "%s", path);
  char *copy = strdup(path);
  CHECK(vl_tfevents_scalar(w, "train/loss", 10, 2.5, 0, 100.25) == VL_OK);
  CHECK(vl_tfevents_scalar(w, "train/loss", 10, 1.25, 1, 101.5) == VL_OK);
  CHECK(vl_tfevents_scalar(w, "val/top1", 8, 0.875, 7, 102.0) == VL_OK);
  CHECK(vl_tfevents_scalar(w, "big", 3, 1e300, -5, 103.0) == VL_OK); /* beyond float: inf */
  CHECK(vl_tfevents_scalar(w, "", 0, 1, 0, 0) == VL_EINVAL);
  CHECK(strstr(vl_errmsg(), "tag is empty") != NULL, "%s", vl_errmsg());
  CHECK(vl_tfevents_scalar(w, "a\0b", 3, 1, 0, 0) == VL_EINVAL);
  CHECK(vl_tfevents_scalar(w, "\xff", 1, 1, 0, 0) == VL_EINVAL);
  CHECK(strstr(vl_errmsg(), "not valid UTF-8") != NULL, "%s", vl_errmsg());
  /* The version record is on disk before any flush: TensorBoard sees the run at once. */
  vl_tfevents_data d = {0};
  CHECK(vl_tfevents_read(copy, &d) == VL_OK, "%s", vl_errmsg());
  CHECK(d.records == 1 && d.n == 0 && d.file_version && strcmp(d.file_version, "brain.Event:2") == 0);
  vl_tfevents_data_free(&d);
  CHECK(vl_tfevents_close(w) == VL_OK);

  CHECK(vl_tfevents_read(copy, &d) == VL_OK, "%s", vl_errmsg());
  CHECK(d.records == 5, "%zu records", d.records);
  CHECK(d.n == 4, "%zu scalars", d.n);
  if (d.n == 4) {
    CHECK(strcmp(d.ev[0].tag, "train/loss") == 0 && d.ev[0].step == 0 && d.ev[0].value == 2.5f &&
          d.ev[0].wall_time == 100.25);
    CHECK(d.ev[1].step == 1 && d.ev[1].value == 1.25f && d.ev[1].wall_time == 101.5);
    CHECK(strcmp(d.ev[2].tag, "val/top1") == 0 && d.ev[2].step == 7 && d.ev[2].value == 0.875f);
    CHECK(d.ev[3].step == -5 && isinf(d.ev[3].value) && d.ev[3].value > 0);
  }
  vl_tfevents_data_free(&d);

  /* A second writer in the same second gets its own file. */
  vl_tfevents *w1 = NULL, *w2 = NULL;
  CHECK(vl_tfevents_open(dir, &w1) == VL_OK && vl_tfevents_open(dir, &w2) == VL_OK);
  if (w1 && w2) CHECK(strcmp(vl_tfevents_path(w1), vl_tfevents_path(w2)) != 0);
  vl_tfevents_close(w1);
  vl_tfevents_close(w2);

  /* Corruptions of the first file. Record 2 starts at byte 12 + 24 + 4 = 40 (the version
   * Event is 24 bytes: wall_time 9, file_version 2 + 13). */
  size_t n;
  unsigned char *b = slurp(copy, &n);
  char bad[600];
  snprintf(bad, sizeof bad, "%s/bad.tfevents", root);

  /* A file that ends inside a record (a write cut short) is read up to it and the tear
   * reported, as TensorBoard reads it; it used to be refused whole. */
  spit(bad, b, n - 3); /* cut inside the last record's data CRC */
  CHECK(vl_tfevents_read(bad, &d) == VL_OK);
  CHECK(d.records == 4 && d.n == 3 && d.torn && strstr(d.torn_what, "record 5 (byte ") &&
            strstr(d.torn_what, "truncated: "),
        "%zu records, %zu scalars, torn %d: %s", d.records, d.n, (int)d.torn, d.torn_what);
  size_t torn_at = d.torn_at;
  vl_tfevents_data_free(&d);
  spit(bad, b, torn_at); /* the whole records alone: no tear */
  CHECK(vl_tfevents_read(bad, &d) == VL_OK && d.records == 4 && d.n == 3 && !d.torn && d.torn_at == 0);
  vl_tfevents_data_free(&d);

  spit(bad, b, 40 + 5); /* cut inside record 2's header */
  CHECK(vl_tfevents_read(bad, &d) == VL_OK);
  CHECK(d.records == 1 && d.n == 0 && d.torn && d.torn_at == 40 &&
            strcmp(d.torn_what, "record 2 (byte 40): truncated header: 5 of 12 bytes") == 0,
        "%s", d.torn_what);
  CHECK(d.file_version && strcmp(d.file_version, VL_TFEVENTS_VERSION) == 0);
  vl_tfevents_data_free(&d);

  b[40 + 12 + 3] ^= 0x10; /* a data byte of record 2 */
  spit(bad, b, n);
  CHECK(vl_tfevents_read(bad, &d) == VL_EIO);
  CHECK(strstr(vl_errmsg(), "record 2 (byte 40): data CRC mismatch"), "%s", vl_errmsg());
  b[40 + 12 + 3] ^= 0x10;

  b[40] ^= 0x01; /* record 2's length */
  spit(bad, b, n);
  CHECK(vl_tfevents_read(bad, &d) == VL_EIO);
  CHECK(strstr(vl_errmsg(), "record 2 (byte 40): length CRC mismatch"), "%s", vl_errmsg());
  b[40] ^= 0x01;

  spit(bad, b, n); /* restored: reads again; out was untouched by the failures */
  CHECK(d.n == 0 && d.ev == NULL);
  CHECK(vl_tfevents_read(bad, &d) == VL_OK && d.n == 4);
  vl_tfevents_data_free(&d);

  CHECK(vl_tfevents_read("/nonexistent/x.tfevents", &d) == VL_EIO);
  CHECK(strstr(vl_errmsg(), "read_events: /nonexistent/x.tfevents: No such file"), "%s", vl_errmsg());

  /* A file where the directory should be. */
  CHECK(vl_tfevents_open(bad, &w) == VL_EIO);
  CHECK(strstr(vl_errmsg(), "not a directory") != NULL, "%s", vl_errmsg());
  free(b);
  free(copy);
}

int main(void) {
  vl_test_seed();
  test_crc();
  test_crc_vector_state();
  test_protobuf();
  char root[] = "/tmp/vl_tfevents_XXXXXX";
  if (!mkdtemp(root)) return 2;
  test_round_trip(root);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
  if (system(cmd) != 0) return 2;
  return vl_test_finish();
}
