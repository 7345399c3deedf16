/* tests/c/test_cpu_threads.c: the CPU backend's thread pool (kernels/cpu/cpu_threads.c): every
 * item of a range is run exactly once whatever the thread count and grain; a call from inside a
 * job, and calls from two threads at once, run correctly (serially where the pool is busy); the
 * thread count follows vl_set_num_threads; a forked child gets a pool of its own. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cpu/cpu_internal.h"
#include "runtime/core/context.h"
#include "vl_test.h"

typedef struct {
  _Atomic int *hits;
  _Atomic int calls;
  _Atomic int64_t min_len;
  int64_t grain, n;
  bool nested;
  _Atomic int nested_ok;
} job;

static void mark(void *vj, int64_t lo, int64_t hi) {
  job *j = vj;
  atomic_fetch_add(&j->calls, 1);
  if (hi < j->n && hi - lo < atomic_load(&j->min_len)) atomic_store(&j->min_len, hi - lo);
  for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&j->hits[i], 1);
  if (j->nested) {
    /* a job inside a job: runs on this thread, over its whole range */
    _Atomic int inner[100];
    for (int i = 0; i < 100; i++) atomic_init(&inner[i], 0);
    job k = {.hits = inner, .n = 100, .grain = 1, .min_len = 1 << 30};
    vl_cpu_parallel_for(100, 1, mark, &k);
    int ok = atomic_load(&k.calls) == 1;
    for (int i = 0; i < 100; i++) ok &= atomic_load(&inner[i]) == 1;
    if (ok) atomic_fetch_add(&j->nested_ok, 1);
  }
}

static bool run(int64_t n, int64_t grain, bool nested, int *calls) {
  _Atomic int *hits = calloc((size_t)(n > 0 ? n : 1), sizeof *hits);
  job j = {.hits = hits, .n = n, .grain = grain, .nested = nested, .min_len = 1 << 30};
  vl_cpu_parallel_for(n, grain, mark, &j);
  bool ok = true;
  for (int64_t i = 0; i < n; i++) ok &= atomic_load(&hits[i]) == 1;
  if (nested) ok &= atomic_load(&j.nested_ok) == atomic_load(&j.calls);
  /* every range but the last is at least `grain` long */
  if (atomic_load(&j.calls) > 1) ok &= atomic_load(&j.min_len) >= grain;
  if (calls) *calls = atomic_load(&j.calls);
  free(hits);
  return ok;
}

static void test_cover(void) {
  const int threads[] = {1, 2, 3, 8};
  const int64_t sizes[] = {0, 1, 7, 100, 1000, 100003};
  const int64_t grains[] = {1, 3, 64, 100000};
  for (int t = 0; t < 4; t++) {
    vl_set_num_threads(threads[t]);
    CHECK(vl_cpu_threads() == threads[t]);
    for (int s = 0; s < 6; s++)
      for (int g = 0; g < 4; g++) {
        int calls = 0;
        CHECK(run(sizes[s], grains[g], false, &calls), "threads %d, n %lld, grain %lld: each item once",
              threads[t], (long long)sizes[s], (long long)grains[g]);
        if (threads[t] == 1 || sizes[s] < 2 * grains[g])
          CHECK(calls <= 1, "one call when the job is small or single-threaded (%d)", calls);
      }
  }
}

static void test_nested(void) {
  vl_set_num_threads(4);
  CHECK(run(4096, 16, true, NULL), "a parallel_for inside a job runs serially and completely");
}

static void *concurrent(void *arg) {
  bool *ok = arg;
  *ok = true;
  for (int r = 0; r < 200; r++) *ok &= run(20000, 100, false, NULL);
  return NULL;
}

static void test_concurrent(void) {
  vl_set_num_threads(4);
  pthread_t a, b;
  bool oka = false, okb = false;
  pthread_create(&a, NULL, concurrent, &oka);
  pthread_create(&b, NULL, concurrent, &okb);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  CHECK(oka && okb, "two threads calling parallel_for at once: every item once in each job");
}

static void test_default(void) {
  vl_set_num_threads(0);
  CHECK(vl_num_threads() >= 1, "the default is at least one thread");
  vl_set_num_threads(5);
  CHECK(vl_num_threads() == 5);
  vl_set_num_threads(-3);
  CHECK(vl_num_threads() >= 1, "n <= 0 restores the default");
}

/* A forked child (only the forking thread survives) gets a pool of its own and finishes. */
static void test_fork(void) {
  vl_set_num_threads(4);
  CHECK(run(100000, 100, false, NULL), "the parent's pool runs");
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    bool ok = run(100000, 100, false, NULL) && run(100000, 100, false, NULL);
    _exit(ok ? 0 : 3);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid, "fork and wait");
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's parallel_for covered its ranges (status %d)", st);
  CHECK(run(100000, 100, false, NULL), "the parent's pool still runs after the fork");
}

int main(void) {
  test_cover();
  test_nested();
  test_concurrent();
  test_fork();
  test_default();
  return vl_test_finish();
}
