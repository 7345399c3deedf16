/* kernels/cpu/cpu_threads.c: the CPU backend's worker threads.
 *
 * One pool for the process, started on first use with vl_num_threads() - 1 workers (the caller
 * is the last one). A job is a range [0, n) cut into chunks of at least `grain` items; the
 * caller and the workers take chunks from one atomic counter until none is left, so an uneven
 * chunk does not hold the others up. Idle workers sleep on a condition variable rather than
 * spin: a laptop's other work and OpenBLAS's own threads keep the cores (OpenBLAS spinning was
 * half the CPU time of a CPU BERT run). One job at a time: a call while a job runs (from another
 * thread, e.g. a data-loader worker, or from inside a job) runs on the calling thread alone,
 * which is correct, only not parallel. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "kernels/cpu/cpu_internal.h"
#include "runtime/core/context.h"

#define VL_CPU_MAX_THREADS 256

typedef struct {
  pthread_mutex_t mu;
  pthread_cond_t work, done;
  int started;          /* workers created */
  int ready;            /* workers waiting for jobs: a job counts only these */
  uint64_t generation;  /* bumped per job: a worker joins each job once */
  vl_cpu_range_fn fn;
  void *ctx;
  int64_t n, chunk;
  atomic_int_fast64_t next; /* the next chunk's first item */
  int active;               /* workers still inside the current job */
  int wanted;               /* workers (by index) that join the current job */
  atomic_flag busy;         /* a job runs */
} vl_cpu_pool;

static vl_cpu_pool pool = {
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .work = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .busy = ATOMIC_FLAG_INIT,
};

static void run_chunks(vl_cpu_range_fn fn, void *ctx, int64_t n, int64_t chunk) {
  for (;;) {
    int64_t lo = atomic_fetch_add(&pool.next, chunk);
    if (lo >= n) return;
    fn(ctx, lo, lo + chunk < n ? lo + chunk : n);
  }
}

static void *worker(void *arg) {
  int me = (int)(intptr_t)arg;
  pthread_mutex_lock(&pool.mu);
  /* Workers become ready in index order (see grow): a job's `wanted` indices are all ready. */
  uint64_t seen = pool.generation;
  pool.ready++;
  for (;;) {
    while (pool.generation == seen || me >= pool.wanted) {
      seen = pool.generation; /* a job this worker is not part of */
      pthread_cond_wait(&pool.work, &pool.mu);
    }
    seen = pool.generation;
    vl_cpu_range_fn fn = pool.fn;
    void *ctx = pool.ctx;
    int64_t n = pool.n, chunk = pool.chunk;
    pthread_mutex_unlock(&pool.mu);
    run_chunks(fn, ctx, n, chunk);
    pthread_mutex_lock(&pool.mu);
    if (--pool.active == 0) pthread_cond_signal(&pool.done);
  }
  return NULL;
}

/* A forked child has none of the parent's workers (only the forking thread survives a fork):
 * it starts with an empty pool of its own. */
static void forget_pool(void) {
  pthread_mutex_init(&pool.mu, NULL);
  pthread_cond_init(&pool.work, NULL);
  pthread_cond_init(&pool.done, NULL);
  pool.started = pool.ready = pool.active = pool.wanted = 0;
  atomic_flag_clear(&pool.busy);
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void) { pthread_atfork(NULL, NULL, forget_pool); }

/* Starts workers up to `want` (called between jobs, under `busy`). */
static void grow(int want) {
  pthread_once(&atfork_once, register_atfork);
  if (want > VL_CPU_MAX_THREADS - 1) want = VL_CPU_MAX_THREADS - 1;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, (size_t)1 << 20);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&pool.mu);
  while (pool.started < want) {
    pthread_t tid;
    if (pthread_create(&tid, &attr, worker, (void *)(intptr_t)pool.started) != 0) break;
    pool.started++;
  }
  pthread_mutex_unlock(&pool.mu);
  pthread_attr_destroy(&attr);
}

int vl_cpu_threads(void) {
  int t = vl_num_threads();
  return t < VL_CPU_MAX_THREADS ? t : VL_CPU_MAX_THREADS;
}

void vl_cpu_parallel_for(int64_t n, int64_t grain, vl_cpu_range_fn fn, void *ctx) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int t = n >= 2 * grain ? vl_cpu_threads() : 1;
  if (t <= 1 || atomic_flag_test_and_set(&pool.busy)) {
    fn(ctx, 0, n);
    return;
  }
  if (pool.started < t - 1) grow(t - 1);
  pthread_mutex_lock(&pool.mu);
  /* Workers still starting are left out of this job: the ready ones are indices 0..ready-1
   * only if they started in order, which a slow start may break, so count conservatively. */
  int avail = pool.ready == pool.started ? pool.ready : 0;
  int64_t parts = n / grain;
  if (parts > t) parts = t;
  if (parts > avail + 1) parts = avail + 1;
  if (parts <= 1) {
    pthread_mutex_unlock(&pool.mu);
    fn(ctx, 0, n);
    atomic_flag_clear(&pool.busy);
    return;
  }
  /* about four chunks per thread: the slowest chunk bounds the job */
  int64_t nchunks = n / grain < parts * 4 ? n / grain : parts * 4;
  int64_t chunk = (n + nchunks - 1) / nchunks;
  pool.fn = fn;
  pool.ctx = ctx;
  pool.n = n;
  pool.chunk = chunk;
  atomic_store(&pool.next, 0);
  pool.wanted = (int)parts - 1;
  pool.active = pool.wanted;
  pool.generation++;
  pthread_cond_broadcast(&pool.work);
  pthread_mutex_unlock(&pool.mu);
  run_chunks(fn, ctx, n, chunk);
  pthread_mutex_lock(&pool.mu);
  while (pool.active > 0) pthread_cond_wait(&pool.done, &pool.mu);
  pthread_mutex_unlock(&pool.mu);
  atomic_flag_clear(&pool.busy);
}
