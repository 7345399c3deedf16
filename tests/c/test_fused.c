/* tests/c/test_fused.c: the pieces of the fused layer ops below the Lua API: the integer form of
 * bernoulli's test (runtime/core/philox.h vl_philox_bernoulli_threshold) against the double
 * comparison for every 23-bit value around the threshold, and the CPU dropout kernel's keep
 * decisions against vl_ubits(philox word) < 1 - p, with the generator's seed/offset and with a
 * `base` buffer (the CUDA graph capture contract, run here on host memory). */
#include "runtime/backend/fused_kernels.h"
#include "runtime/core/philox.h"
#include "tests/c/vl_test.h"

static void test_threshold(void) {
  const double ps[] = {0, 1e-9, 0.1, 0.25, 0.3, 0.5, 0.7, 0.9, 1 - 1e-9, 1, 0.123456789, 1.0 / 3};
  const uint32_t n = 1u << VL_PHILOX_BITS;
  for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
    const double p = ps[i];
    const uint32_t thr = vl_philox_bernoulli_threshold(p);
    bool ok = thr <= n;
    /* every k near the threshold (and the ends) decides as the double comparison does */
    for (int64_t k = (int64_t)thr - 70; k <= (int64_t)thr + 70; k++) {
      if (k < 0 || k >= (int64_t)n) continue;
      uint32_t x = (uint32_t)k << (32 - VL_PHILOX_BITS);
      ok &= ((x >> (32 - VL_PHILOX_BITS)) < thr) == (vl_ubits(x, VL_PHILOX_BITS) < p);
    }
    ok &= (0 < thr) == (vl_ubits(0, VL_PHILOX_BITS) < p);
    ok &= (n - 1 < thr) == (vl_ubits(0xFFFFFFFFu, VL_PHILOX_BITS) < p);
    CHECK(ok, "threshold of p = %.17g: %u", p, thr);
  }
}

static void test_dropout_cpu(void) {
  enum { N = 1001 };
  float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
  for (int i = 0; i < N; i++) x[i] = 1.0f + (float)(i % 7);
  const double p = 0.3;
  vl_dropout_args a = {.dtype = VL_F32, .in = x, .out = y, .numel = N, .seed = 42, .offset = 5,
                       .threshold = vl_philox_bernoulli_threshold(1 - p), .scale = 1 / (1 - p)};
  CHECK_OK(vl_cpu_fused_kernels.dropout(&a));
  bool ok = true;
  int kept = 0;
  for (int i = 0; i < N; i++) {
    bool keep = vl_ubits(vl_philox(42, 5 + (uint64_t)i / 4).x[i % 4], VL_PHILOX_BITS) < 1 - p;
    ok &= y[i] == (keep ? x[i] * (float)(1 / (1 - p)) : 0.0f);
    kept += keep;
  }
  CHECK(ok && kept > 640 && kept < 760, "dropout keeps bernoulli's elements (%d kept)", kept);
  /* base: key base[0], first counter base[1] + offset, as under CUDA graph capture */
  uint64_t base[2] = {42, 3};
  float *z = malloc(N * sizeof *z);
  vl_dropout_args b = a;
  b.out = z;
  b.seed = 7; /* ignored with a base */
  b.offset = 2;
  b.base = base;
  CHECK_OK(vl_cpu_fused_kernels.dropout(&b));
  CHECK(memcmp(y, z, N * sizeof *y) == 0, "base {42, 3} + offset 2 = seed 42, offset 5");
  /* in place, f64, and p = 0 (all kept, scale 1) */
  double *d = malloc(N * sizeof *d);
  for (int i = 0; i < N; i++) d[i] = i - 500.5;
  vl_dropout_args c = {.dtype = VL_F64, .in = d, .out = d, .numel = N, .seed = 1, .offset = 0,
                       .threshold = vl_philox_bernoulli_threshold(1.0), .scale = 1.0};
  CHECK_OK(vl_cpu_fused_kernels.dropout(&c));
  ok = true;
  for (int i = 0; i < N; i++) ok &= d[i] == i - 500.5;
  CHECK(ok, "p = 0 keeps everything");
  free(x), free(y), free(z), free(d);
}

int main(void) {
  test_threshold();
  test_dropout_cpu();
  return vl_test_finish();
}
