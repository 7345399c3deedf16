/* bench/bench_alloc.c: allocate/free pairs per second through the caching pool (vl_alloc, the
 * allocator behind every CUDA tensor) versus cudaMalloc/cudaFree, for 512 B, 64 KiB, 4 MiB and
 * 64 MiB. Compare with bench/bench_alloc.py (PyTorch's caching allocator, same sizes, same names).
 *
 * Output: one line per measurement, `BENCH <name> <value> <unit>`, higher is better.
 * Method: one warm-up pair (so the pool holds a segment and the driver has its context), then
 * batches of pairs until at least `seconds` of wall time (default 0.5) have passed; the value is
 * the number of pairs over the elapsed time, median of 5 such runs.
 *
 * usage: bench_alloc [seconds] [device] */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "runtime/core/context.h"
#include "runtime/core/cuda.h"
#include "runtime/core/alloc.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

typedef int (*pair_fn)(void *ud, size_t nbytes); /* one alloc + free; 0 on success */

typedef struct pool_ud {
  vl_alloc *pool;
  void *stream;
} pool_ud;

static int pool_pair(void *ud, size_t nbytes) {
  pool_ud *p = ud;
  vl_block *b = NULL;
  if (vl_alloc_malloc(p->pool, nbytes, p->stream, &b) != VL_OK) return 1;
  vl_alloc_free(p->pool, b);
  return 0;
}

static int cuda_pair(void *ud, size_t nbytes) {
  (void)ud;
  void *ptr = NULL;
  if (cudaMalloc(&ptr, nbytes) != cudaSuccess) return 1;
  return cudaFree(ptr) != cudaSuccess;
}

/* Pairs per second, median of 5 timed runs of at least `seconds` each; negative on failure. */
static double measure(pair_fn fn, void *ud, size_t nbytes, double seconds) {
  double rates[5];
  if (fn(ud, nbytes)) return -1; /* warm-up */
  for (int r = 0; r < 5; r++) {
    long pairs = 0, batch = 1;
    double t0 = now_s(), t1 = t0;
    while (t1 - t0 < seconds) {
      for (long i = 0; i < batch; i++)
        if (fn(ud, nbytes)) return -1;
      pairs += batch;
      if (batch < (1L << 16)) batch *= 2; /* few clock reads for the fast paths */
      t1 = now_s();
    }
    rates[r] = (double)pairs / (t1 - t0);
  }
  qsort(rates, 5, sizeof rates[0], cmp_double);
  return rates[2];
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 0.5;
  int dev = argc > 2 ? atoi(argv[2]) : 0;
  if (seconds <= 0) seconds = 0.5;
  if (vl_init() != VL_OK) {
    fprintf(stderr, "bench_alloc: %s\n", vl_errmsg());
    return 1;
  }
  if (vl_cuda_device_count() <= dev) {
    fprintf(stderr, "bench_alloc: no CUDA device %d (found %d)\n", dev, vl_cuda_device_count());
    return 1;
  }
  if (cudaSetDevice(dev) != cudaSuccess) {
    fprintf(stderr, "bench_alloc: cudaSetDevice(%d) failed\n", dev);
    return 1;
  }
  pool_ud pu;
  if (vl_cuda_alloc(dev, &pu.pool) != VL_OK || vl_cuda_current_stream(dev, &pu.stream) != VL_OK) {
    fprintf(stderr, "bench_alloc: %s\n", vl_errmsg());
    return 1;
  }

  static const size_t sizes[] = {512, 64u << 10, 4u << 20, 64u << 20};
  static const char *const names[] = {"512B", "64KiB", "4MiB", "64MiB"};
  int rc = 0;
  for (int i = 0; i < 4; i++) {
    double pool_rate = measure(pool_pair, &pu, sizes[i], seconds);
    double cuda_rate = measure(cuda_pair, NULL, sizes[i], seconds);
    if (pool_rate < 0 || cuda_rate < 0) {
      fprintf(stderr, "bench_alloc: allocation of %zu bytes failed: %s\n", sizes[i],
              pool_rate < 0 ? vl_errmsg() : cudaGetErrorString(cudaGetLastError()));
      rc = 1;
      continue;
    }
    printf("BENCH pool_pairs_%s %.6g pairs/s\n", names[i], pool_rate);
    printf("BENCH cudamalloc_pairs_%s %.6g pairs/s\n", names[i], cuda_rate);
    fflush(stdout);
  }
  vl_alloc_stats st;
  vl_alloc_get_stats(pu.pool, &st);
  printf("# pool: %llu allocations, %llu cache hits, %llu segments obtained from cudaMalloc\n",
         (unsigned long long)st.alloc_count, (unsigned long long)st.cache_hits,
         (unsigned long long)st.raw_allocs);
  vl_shutdown();
  return rc;
}
