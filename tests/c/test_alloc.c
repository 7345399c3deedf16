/* tests/c/test_alloc.c: the caching allocator's bookkeeping, driven through a mock device (fake
 * addresses, a capacity, events whose completion the test controls). No GPU needed. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/alloc.h"
#include "vl_test.h"

#define MiB ((size_t)1 << 20)
#define KiB ((size_t)1024)

/* ---- the mock device ---- */

typedef struct mock_event {
  int done;
  void *stream;
} mock_event;

typedef struct mock {
  uintptr_t next_addr;
  size_t capacity, used;
  int raw_allocs, raw_frees, bad_frees;
  uintptr_t live_addr[256];
  size_t live_size[256];
  int nlive;
  mock_event *events[256];
  int nevents, events_destroyed;
  bool fail_events;
} mock;

static vl_status mock_alloc(void *ud, size_t n, void **ptr) {
  mock *m = ud;
  if (m->used + n > m->capacity || m->nlive == 256) return VL_EOOM;
  /* Gaps between segments make an accidental cross-segment merge visible. */
  uintptr_t a = m->next_addr;
  m->next_addr += n + 4096;
  m->live_addr[m->nlive] = a;
  m->live_size[m->nlive++] = n;
  m->used += n;
  m->raw_allocs++;
  *ptr = (void *)a;
  return VL_OK;
}

static void mock_free(void *ud, void *ptr) {
  mock *m = ud;
  for (int i = 0; i < m->nlive; i++) {
    if (m->live_addr[i] == (uintptr_t)ptr) {
      m->used -= m->live_size[i];
      m->live_addr[i] = m->live_addr[--m->nlive];
      m->live_size[i] = m->live_size[m->nlive];
      m->raw_frees++;
      return;
    }
  }
  m->bad_frees++;
}

static vl_status mock_event_record(void *ud, void *stream, void **event) {
  mock *m = ud;
  if (m->fail_events || m->nevents == 256) return VL_EINTERNAL;
  mock_event *e = calloc(1, sizeof *e);
  if (!e) return VL_EOOM;
  e->stream = stream;
  m->events[m->nevents++] = e;
  *event = e;
  return VL_OK;
}

static int mock_event_query(void *ud, void *event) { return ((mock_event *)event)->done; }

static void mock_event_destroy(void *ud, void *event) {
  mock *m = ud;
  for (int i = 0; i < m->nevents; i++) {
    if (m->events[i] == event) {
      m->events[i] = m->events[--m->nevents];
      break;
    }
  }
  m->events_destroyed++;
  free(event);
}

static vl_status mock_mem_info(void *ud, size_t *free_b, size_t *total_b) {
  mock *m = ud;
  *free_b = m->capacity - m->used;
  *total_b = m->capacity;
  return VL_OK;
}

static void complete_events(mock *m) {
  for (int i = 0; i < m->nevents; i++) m->events[i]->done = 1;
}

static vl_alloc *make_pool(mock *m, size_t capacity) {
  memset(m, 0, sizeof *m);
  m->next_addr = 0x10000000;
  m->capacity = capacity;
  vl_alloc_backend be = {.ud = m, .raw_alloc = mock_alloc, .raw_free = mock_free,
                         .event_record = mock_event_record, .event_query = mock_event_query,
                         .event_destroy = mock_event_destroy, .mem_info = mock_mem_info, .name = "mock:0"};
  vl_alloc *p = NULL;
  if (vl_alloc_create(&be, &p) != VL_OK) {
    fprintf(stderr, "vl_alloc_create failed: %s\n", vl_errmsg());
    exit(1);
  }
  return p;
}

static void *SA = (void *)0x5a, *SB = (void *)0x5b;

static vl_block *xalloc(vl_alloc *p, size_t n, void *stream) {
  vl_block *b = NULL;
  vl_status st = vl_alloc_malloc(p, n, stream, &b);
  if (st != VL_OK) {
    fprintf(stderr, "unexpected alloc failure of %zu bytes: %s\n", n, vl_errmsg());
    vl_test_failed++;
  }
  return b;
}

static uintptr_t addr(const vl_block *b) { return (uintptr_t)vl_block_ptr(b); }

/* Walks a snapshot and checks it against the stats: blocks tile each segment, no two free blocks
 * touch, allocated/requested/reserved/segment/block counts agree. */
static void check_consistent(vl_alloc *p, const mock *m) {
  vl_alloc_segment_info *segs = NULL;
  size_t n = 0;
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(vl_alloc_snapshot(p, &segs, &n) == VL_OK);
  size_t reserved = 0, allocated = 0, requested = 0, live = 0, pending = 0;
  bool tiles = true, merged = true, sorted = true;
  for (size_t i = 0; i < n; i++) {
    reserved += segs[i].size;
    if (i && segs[i].addr <= segs[i - 1].addr) sorted = false;
    uintptr_t a = segs[i].addr;
    for (size_t j = 0; j < segs[i].nblocks; j++) {
      const vl_alloc_block_info *b = &segs[i].blocks[j];
      if (b->addr != a || b->size == 0 || b->size % 512) tiles = false;
      a += b->size;
      if (b->allocated) {
        allocated += b->size;
        requested += b->requested;
        live++;
      }
      if (b->pending) pending++;
      bool is_free = !b->allocated && !b->pending;
      if (j && is_free && !segs[i].blocks[j - 1].allocated && !segs[i].blocks[j - 1].pending)
        merged = false;
    }
    if (a != segs[i].addr + segs[i].size) tiles = false;
  }
  CHECK(tiles);
  CHECK(merged);
  CHECK(sorted);
  CHECK(reserved == st.reserved);
  CHECK(allocated == st.allocated);
  CHECK(requested == st.requested);
  CHECK(n == st.segments);
  CHECK(pending == st.pending_free);
  CHECK(live <= st.active_blocks); /* zero-byte blocks are live but hold no memory */
  if (m) {
    CHECK(m->used == st.reserved);
    CHECK((uint64_t)m->raw_allocs == st.raw_allocs);
    CHECK((uint64_t)m->raw_frees == st.raw_frees);
    CHECK(m->bad_frees == 0);
  }
  vl_alloc_snapshot_free(segs, n);
}

/* ---- tests ---- */

static void test_rounding(void) {
  CHECK(vl_alloc_round_size(0) == 0);
  CHECK(vl_alloc_round_size(1) == 512);
  CHECK(vl_alloc_round_size(512) == 512);
  CHECK(vl_alloc_round_size(513) == 1024);
  CHECK(vl_alloc_round_size(MiB + 1) == MiB + 512);
  CHECK(vl_alloc_segment_size(512) == 2 * MiB);
  CHECK(vl_alloc_segment_size(MiB) == 2 * MiB);
  CHECK(vl_alloc_segment_size(MiB + 512) == 20 * MiB);
  CHECK(vl_alloc_segment_size(10 * MiB - 512) == 20 * MiB);
  CHECK(vl_alloc_segment_size(10 * MiB) == 10 * MiB);
  CHECK(vl_alloc_segment_size(10 * MiB + 512) == 12 * MiB);
  CHECK(vl_alloc_segment_size(21 * MiB) == 22 * MiB);
}

static void test_small_large(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *a = xalloc(p, 1000, SA), *b = xalloc(p, MiB, SA);
  vl_block *d = xalloc(p, 11 * MiB + 3, SA);
  vl_block *c = xalloc(p, 2 * MiB, SA);
  CHECK(vl_block_size(a) == 1024);
  CHECK(vl_block_size(b) == MiB);
  CHECK(vl_block_size(c) == 2 * MiB);
  /* 12 MiB segment; the 1 MiB - 512 left is not worth a large-pool block. */
  CHECK(vl_block_size(d) == 12 * MiB);
  CHECK(vl_block_stream(a) == SA);
  /* a and b share a 2 MiB small segment, d has its own 12 MiB one, c a 20 MiB one. */
  CHECK(m.raw_allocs == 3);
  vl_alloc_segment_info *segs;
  size_t n;
  CHECK(vl_alloc_snapshot(p, &segs, &n) == VL_OK);
  CHECK(n == 3);
  int small = 0, large20 = 0, large12 = 0;
  for (size_t i = 0; i < n; i++) {
    if (segs[i].small && segs[i].size == 2 * MiB) small++;
    if (!segs[i].small && segs[i].size == 20 * MiB) large20++;
    if (!segs[i].small && segs[i].size == 12 * MiB) large12++;
    CHECK(segs[i].stream == SA && segs[i].private_id == 0);
  }
  CHECK(small == 1 && large20 == 1 && large12 == 1);
  vl_alloc_snapshot_free(segs, n);
  CHECK(addr(b) == addr(a) + 1024);
  check_consistent(p, &m);
  vl_alloc_free(p, a);
  vl_alloc_free(p, b);
  vl_alloc_free(p, c);
  vl_alloc_free(p, d);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
  CHECK(m.used == 0 && m.bad_frees == 0);
}

static void test_split_rules(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  /* Large: 3 MiB from a 20 MiB segment leaves a 17 MiB remainder (> 1 MiB: kept). */
  vl_block *a = xalloc(p, 3 * MiB, SA);
  CHECK(vl_block_size(a) == 3 * MiB);
  /* 16.5 MiB from the 17 MiB remainder leaves 0.5 MiB (<= 1 MiB): not split. */
  vl_block *b = xalloc(p, 16 * MiB + 512 * KiB, SA);
  CHECK(m.raw_allocs == 1);
  CHECK(addr(b) == addr(a) + 3 * MiB);
  CHECK(vl_block_size(b) == 17 * MiB);
  vl_alloc_free(p, b);
  /* Exactly 1 MiB left over: not split either. */
  vl_block *c = xalloc(p, 16 * MiB, SA);
  CHECK(vl_block_size(c) == 17 * MiB);
  vl_alloc_free(p, c);
  /* 1 MiB + 512 left over: split, and the remainder is reused. */
  vl_block *d = xalloc(p, 16 * MiB - 512, SA);
  CHECK(vl_block_size(d) == 16 * MiB - 512);
  vl_block *e = xalloc(p, MiB + 512, SA);
  CHECK(addr(e) == addr(d) + 16 * MiB - 512);
  CHECK(m.raw_allocs == 1);
  /* Small: a 512-byte remainder is kept. */
  vl_block *f = xalloc(p, MiB, SA);  /* small segment 2 MiB: remainder 1 MiB */
  vl_block *g = xalloc(p, MiB - 512, SA);
  vl_block *h = xalloc(p, 100, SA);  /* the last 512 bytes */
  CHECK(addr(g) == addr(f) + MiB);
  CHECK(addr(h) == addr(g) + MiB - 512);
  CHECK(vl_block_size(h) == 512);
  CHECK(m.raw_allocs == 2);
  check_consistent(p, &m);
  vl_alloc_free(p, a);
  vl_alloc_free(p, d);
  vl_alloc_free(p, e);
  vl_alloc_free(p, f);
  vl_alloc_free(p, g);
  vl_alloc_free(p, h);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
}

static void test_best_fit_and_merge(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *a = xalloc(p, 4096, SA), *x1 = xalloc(p, 512, SA);
  vl_block *b = xalloc(p, 2048, SA), *x2 = xalloc(p, 512, SA);
  vl_block *c = xalloc(p, 8192, SA), *x3 = xalloc(p, 512, SA);
  uintptr_t aa = addr(a), ba = addr(b), ca = addr(c);
  vl_alloc_free(p, a);
  vl_alloc_free(p, b);
  vl_alloc_free(p, c);
  /* Free: 4096, 2048, 8192 and the tail. */
  vl_block *r1 = xalloc(p, 2000, SA);
  CHECK(addr(r1) == ba);
  vl_block *r2 = xalloc(p, 3000, SA);
  CHECK(addr(r2) == aa);
  CHECK(vl_block_size(r2) == 3072);
  vl_block *r3 = xalloc(p, 5000, SA);
  CHECK(addr(r3) == ca);
  vl_block *r4 = xalloc(p, 1024, SA); /* the 1024 left after r2 */
  CHECK(addr(r4) == aa + 3072);
  CHECK(m.raw_allocs == 1);
  check_consistent(p, &m);
  vl_block *all[] = {x2, r1, x1, r3, r4, x3, r2};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    vl_alloc_free(p, all[i]);
    check_consistent(p, &m);
  }
  vl_alloc_segment_info *segs;
  size_t n;
  CHECK(vl_alloc_snapshot(p, &segs, &n) == VL_OK);
  CHECK(n == 1);
  CHECK(n == 1 && segs[0].nblocks == 1 && segs[0].blocks[0].size == 2 * MiB &&
        !segs[0].blocks[0].allocated);
  vl_alloc_snapshot_free(segs, n);
  vl_alloc_destroy(p);
}

static void test_streams(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *a = xalloc(p, 1000, SA);
  uintptr_t aa = addr(a);
  vl_alloc_free(p, a);
  vl_block *b = xalloc(p, 1000, SB);
  CHECK(addr(b) != aa);
  CHECK(m.raw_allocs == 2);
  CHECK(vl_block_stream(b) == SB);
  vl_block *c = xalloc(p, 1000, SA);
  CHECK(addr(c) == aa);
  check_consistent(p, &m);
  vl_alloc_free(p, b);
  vl_alloc_free(p, c);
  vl_alloc_destroy(p);
}

static void test_record_stream(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *x = xalloc(p, 1000, SA);
  uintptr_t xa = addr(x);
  CHECK(vl_alloc_record_stream(p, x, SA) == VL_OK); /* own stream: no-op */
  CHECK(vl_alloc_record_stream(p, x, SB) == VL_OK);
  CHECK(vl_alloc_record_stream(p, x, SB) == VL_OK); /* once per stream */
  vl_alloc_free(p, x);
  CHECK(m.nevents == 1);
  CHECK(m.nevents == 1 && m.events[0]->stream == SB);
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.pending_free == 1);
  CHECK(st.allocated == 0);
  check_consistent(p, &m);
  vl_block *y = xalloc(p, 1000, SA);
  CHECK(addr(y) != xa);
  CHECK(addr(y) == xa + 1024);
  /* Still pending: empty_cache must keep the segment. */
  vl_alloc_empty_cache(p);
  CHECK(m.raw_frees == 0);
  complete_events(&m);
  vl_block *z = xalloc(p, 1000, SA);
  CHECK(addr(z) == xa);
  CHECK(m.events_destroyed == 1 && m.nevents == 0);
  vl_alloc_get_stats(p, &st);
  CHECK(st.pending_free == 0);
  /* The allocation stream alone: freed at once. */
  CHECK(vl_alloc_record_stream(p, z, SA) == VL_OK);
  vl_alloc_free(p, z);
  CHECK(m.nevents == 0);
  vl_block *w = xalloc(p, 1000, SA);
  CHECK(addr(w) == xa);
  /* Two other streams: reusable only when both events completed. */
  CHECK(vl_alloc_record_stream(p, w, SB) == VL_OK);
  CHECK(vl_alloc_record_stream(p, w, (void *)0x5c) == VL_OK);
  vl_alloc_free(p, w);
  CHECK(m.nevents == 2);
  m.events[0]->done = 1;
  vl_block *v = xalloc(p, 1000, SA);
  CHECK(addr(v) != xa);
  complete_events(&m);
  vl_block *u = xalloc(p, 1000, SA);
  CHECK(addr(u) == xa);
  check_consistent(p, &m);
  vl_alloc_free(p, y);
  vl_alloc_free(p, v);
  vl_alloc_free(p, u);
  check_consistent(p, &m);
  /* Destroy with an event outstanding releases it. */
  vl_block *t = xalloc(p, 1000, SA);
  CHECK(vl_alloc_record_stream(p, t, SB) == VL_OK);
  vl_alloc_free(p, t);
  int destroyed = m.events_destroyed;
  vl_alloc_destroy(p);
  CHECK(m.events_destroyed == destroyed + 1);
  CHECK(m.used == 0);
}

static void test_event_failure(void) {
  /* An event that cannot be recorded: the block must never be reused (the other stream may still
   * use it); destroy still returns everything. */
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *a = xalloc(p, 1000, SA);
  uintptr_t aa = addr(a);
  CHECK(vl_alloc_record_stream(p, a, SB) == VL_OK);
  m.fail_events = true;
  vl_alloc_free(p, a);
  m.fail_events = false;
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.pending_free == 1 && st.allocated == 0);
  for (int i = 0; i < 8; i++) {
    vl_block *b = xalloc(p, 1000, SA);
    CHECK(addr(b) != aa);
    vl_alloc_free(p, b);
  }
  vl_alloc_empty_cache(p);
  CHECK(m.raw_frees == 0);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
  CHECK(m.used == 0 && m.bad_frees == 0);
}

static void test_empty_cache(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *a = xalloc(p, 1000, SA);
  vl_block *b = xalloc(p, 5 * MiB, SA);
  vl_block *c = xalloc(p, 30 * MiB, SA);
  vl_alloc_free(p, b);
  vl_alloc_free(p, c);
  vl_alloc_empty_cache(p);
  CHECK(m.raw_frees == 2);
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.segments == 1 && st.reserved == 2 * MiB);
  check_consistent(p, &m);
  vl_alloc_free(p, a);
  vl_alloc_empty_cache(p);
  vl_alloc_get_stats(p, &st);
  CHECK(st.segments == 0 && st.reserved == 0 && m.used == 0);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
}

static void test_limit(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_alloc_set_limit(p, 4 * MiB);
  vl_block *a = xalloc(p, MiB, SA);
  vl_block *b = NULL;
  vl_errclear();
  CHECK(vl_alloc_malloc(p, MiB + 512 * KiB, SA, &b) == VL_EOOM);
  CHECK(b == NULL);
  CHECK(strstr(vl_errmsg(), "limit 4.00 MiB") != NULL);
  CHECK(strstr(vl_errmsg(), "mock:0") != NULL);
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.oom_count == 1 && st.reserved == 2 * MiB && st.limit == 4 * MiB);
  CHECK(m.raw_allocs == 1);
  /* A second small segment still fits under the limit. */
  vl_block *c1 = xalloc(p, MiB, SA);
  CHECK(m.raw_allocs == 1);
  vl_block *c = xalloc(p, MiB, SA);
  CHECK(m.raw_allocs == 2);
  /* A limit below reserved only stops growth. */
  vl_alloc_set_limit(p, MiB);
  vl_alloc_get_stats(p, &st);
  CHECK(st.reserved == 4 * MiB);
  vl_block *h = xalloc(p, 512, SA); /* cached memory is still handed out */
  CHECK(m.raw_allocs == 2);
  CHECK(vl_alloc_malloc(p, MiB, SA, &b) == VL_EOOM);
  CHECK(strstr(vl_errmsg(), "limit 1.00 MiB reached") != NULL);
  vl_alloc_free(p, h);
  vl_alloc_set_limit(p, 0);
  b = xalloc(p, MiB + 512 * KiB, SA);
  CHECK(b != NULL);
  check_consistent(p, &m);
  vl_alloc_free(p, a);
  vl_alloc_free(p, b);
  vl_alloc_free(p, c);
  vl_alloc_free(p, c1);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
}

typedef struct reclaim_ctx {
  vl_alloc *p;
  vl_block *victim;
  int calls;
} reclaim_ctx;

static int reclaim_hook(void *ud) {
  reclaim_ctx *r = ud;
  r->calls++;
  if (r->victim) {
    vl_alloc_free(r->p, r->victim); /* re-entrant, as a Lua __gc would */
    r->victim = NULL;
    return 1;
  }
  return 0;
}

static void test_oom_path(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 40 * MiB);
  reclaim_ctx r = {p, NULL, 0};
  vl_alloc_set_reclaim(p, reclaim_hook, &r);
  vl_block *a = xalloc(p, 15 * MiB, SA); /* 16 MiB segment */
  vl_block *b = xalloc(p, 15 * MiB, SA);
  vl_alloc_free(p, b);                    /* cached */
  /* 32 + 20 > 40: the cached segment is released, then it fits. No reclaim needed. */
  vl_block *c = xalloc(p, 20 * MiB, SA);
  CHECK(c != NULL);
  CHECK(m.raw_frees == 1 && r.calls == 0);
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.oom_count == 0);
  /* 36 + 20 > 40, nothing cached: the hook frees a (16 MiB), whose segment is then released. */
  r.victim = a;
  vl_block *d = xalloc(p, 20 * MiB, SA);
  CHECK(d != NULL);
  CHECK(r.calls == 1 && r.victim == NULL);
  CHECK(m.raw_frees == 2);
  check_consistent(p, &m);
  vl_alloc_free(p, c);
  /* The hook's freed block is reused directly when it fits. */
  vl_block *e = xalloc(p, 15 * MiB, SA); /* from the cached 20 MiB of c, 5 MiB split off */
  CHECK(vl_block_size(e) == 15 * MiB);
  uintptr_t ea = addr(e);
  vl_block *f = NULL;
  r.victim = e;
  int raw = m.raw_allocs;
  CHECK(vl_alloc_malloc(p, 15 * MiB, SA, &f) == VL_OK);
  CHECK(r.calls == 2 && m.raw_allocs == raw);
  CHECK(addr(f) == ea && vl_block_size(f) == 15 * MiB);
  check_consistent(p, &m);
  /* A real OOM: everything tried, message names the sizes, pool still usable. */
  vl_block *g = NULL;
  vl_errclear();
  CHECK(vl_alloc_malloc(p, 100 * MiB, SA, &g) == VL_EOOM);
  CHECK(g == NULL);
  CHECK(r.calls == 3);
  const char *msg = vl_errmsg();
  CHECK(strstr(msg, "out of memory on mock:0: tried to allocate 100.00 MiB") != NULL);
  CHECK(strstr(msg, "free of 40.00 MiB") != NULL);
  CHECK(strstr(msg, "40.00 MiB reserved") != NULL);
  CHECK(strstr(msg, "limit none") != NULL);
  vl_alloc_get_stats(p, &st);
  CHECK(st.oom_count == 1);
  check_consistent(p, &m);
  vl_alloc_free(p, f);
  g = xalloc(p, 20 * MiB, SA); /* the whole cached segment again */
  CHECK(g != NULL);
  check_consistent(p, &m);
  vl_alloc_free(p, g);
  vl_alloc_free(p, d);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
  CHECK(m.used == 0 && m.bad_frees == 0);
}

static void test_private(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  int id = 0, id2 = 0;
  CHECK(vl_alloc_private_create(p, &id) == VL_OK && id > 0);
  CHECK(vl_alloc_private_create(p, &id2) == VL_OK && id2 != id);
  vl_block *d0 = xalloc(p, 1000, SA); /* default pool, small segment on SA */
  uintptr_t d0a = addr(d0);
  vl_alloc_free(p, d0);
  CHECK(vl_alloc_private_begin(p, id, SA) == VL_OK);
  CHECK(vl_alloc_private_begin(p, id2, SA) == VL_EINVAL);
  vl_block *a = xalloc(p, 1000, SA);  /* not from the cached default segment */
  CHECK(m.raw_allocs == 2);
  vl_block *t = xalloc(p, 1000, SB);  /* other stream: default pool */
  CHECK(m.raw_allocs == 3);
  vl_alloc_segment_info *segs;
  size_t n;
  CHECK(vl_alloc_snapshot(p, &segs, &n) == VL_OK);
  int priv_segs = 0;
  for (size_t i = 0; i < n; i++) {
    if (segs[i].private_id == id) {
      priv_segs++;
      CHECK(segs[i].addr == addr(a));
    }
  }
  CHECK(priv_segs == 1);
  vl_alloc_snapshot_free(segs, n);
  vl_block *a2 = xalloc(p, 1000, SA); /* same private segment */
  CHECK(addr(a2) == addr(a) + 1024);
  CHECK(vl_alloc_private_release(p, id) == VL_EINVAL); /* still active on SA */
  vl_alloc_private_end(p, SA);
  vl_alloc_free(p, a);
  /* Default pool on SA again: never the private segment. */
  vl_block *b = xalloc(p, 1000, SA);
  CHECK(addr(b) == d0a);
  CHECK(m.raw_allocs == 3);
  /* empty_cache leaves the (unreleased) private pool alone. */
  vl_alloc_free(p, a2);
  vl_alloc_empty_cache(p);
  CHECK(m.raw_frees == 0); /* the default segments hold b and t */
  int frees_before = m.raw_frees;
  CHECK(vl_alloc_snapshot(p, &segs, &n) == VL_OK);
  priv_segs = 0;
  for (size_t i = 0; i < n; i++) priv_segs += segs[i].private_id == id;
  CHECK(priv_segs == 1);
  vl_alloc_snapshot_free(segs, n);
  /* Release: its unused segment goes back at once. */
  CHECK(vl_alloc_private_release(p, id) == VL_OK);
  CHECK(m.raw_frees == frees_before + 1);
  CHECK(vl_alloc_private_begin(p, id, SA) == VL_EINVAL);
  CHECK(vl_alloc_private_release(p, id) == VL_EINVAL);
  /* Release with a live block: the segment goes when the block is freed. */
  CHECK(vl_alloc_private_begin(p, id2, SB) == VL_OK);
  vl_block *c = xalloc(p, 3 * MiB, SB);
  vl_alloc_private_end(p, SB);
  CHECK(vl_alloc_private_release(p, id2) == VL_OK);
  int frees = m.raw_frees;
  check_consistent(p, &m);
  vl_alloc_free(p, c);
  CHECK(m.raw_frees == frees + 1);
  check_consistent(p, &m);
  vl_alloc_free(p, b);
  vl_alloc_free(p, t);
  vl_alloc_destroy(p);
  CHECK(m.used == 0);
}

static void test_stats(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *a = xalloc(p, 1000, SA);
  vl_block *b = xalloc(p, 3 * MiB + 1, SA);
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.allocated == 1024 + 3 * MiB + 512);
  CHECK(st.requested == 1000 + 3 * MiB + 1);
  CHECK(st.reserved == 22 * MiB);
  CHECK(st.peak_allocated == st.allocated && st.peak_reserved == 22 * MiB);
  CHECK(st.alloc_count == 2 && st.free_count == 0 && st.cache_hits == 0);
  CHECK(st.raw_allocs == 2 && st.segments == 2 && st.active_blocks == 2);
  vl_alloc_free(p, b);
  vl_block *c = xalloc(p, 2048, SA);
  vl_alloc_get_stats(p, &st);
  CHECK(st.allocated == 1024 + 2048);
  CHECK(st.requested == 1000 + 2048);
  CHECK(st.peak_allocated == 1024 + 3 * MiB + 512);
  CHECK(st.alloc_count == 3 && st.free_count == 1 && st.cache_hits == 1);
  vl_alloc_reset_peak(p);
  vl_alloc_get_stats(p, &st);
  CHECK(st.peak_allocated == 1024 + 2048 && st.peak_reserved == 22 * MiB);
  vl_alloc_empty_cache(p);
  vl_alloc_get_stats(p, &st);
  CHECK(st.reserved == 2 * MiB && st.peak_reserved == 22 * MiB && st.raw_frees == 1);
  vl_alloc_reset_peak(p);
  vl_alloc_get_stats(p, &st);
  CHECK(st.peak_reserved == 2 * MiB);
  vl_alloc_free(p, a);
  vl_alloc_free(p, c);
  vl_alloc_get_stats(p, &st);
  CHECK(st.allocated == 0 && st.requested == 0 && st.active_blocks == 0);
  CHECK(st.alloc_count == 3 && st.free_count == 3);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
}

static void test_zero_bytes(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  vl_block *z = NULL;
  CHECK(vl_alloc_malloc(p, 0, SA, &z) == VL_OK);
  CHECK(z != NULL && vl_block_ptr(z) == NULL && vl_block_size(z) == 0);
  CHECK(vl_block_stream(z) == SA);
  CHECK(vl_alloc_record_stream(p, z, SB) == VL_OK);
  CHECK(m.raw_allocs == 0);
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.active_blocks == 1 && st.allocated == 0 && st.reserved == 0);
  vl_alloc_free(p, z);
  vl_alloc_free(p, NULL);
  vl_alloc_get_stats(p, &st);
  CHECK(st.active_blocks == 0 && st.free_count == 1 && st.pending_free == 0);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
}

static void test_no_events_backend(void) {
  /* A backend without events (host memory): record_stream is accepted and frees are immediate. */
  mock m;
  memset(&m, 0, sizeof m);
  m.next_addr = 0x10000000;
  m.capacity = 64 * MiB;
  vl_alloc_backend be = {.ud = &m, .raw_alloc = mock_alloc, .raw_free = mock_free}; /* no streams */
  vl_alloc *p = NULL;
  CHECK(vl_alloc_create(&be, &p) == VL_OK);
  if (!p) return;
  vl_block *a = xalloc(p, 4096, SA);
  uintptr_t aa = addr(a);
  CHECK(vl_alloc_record_stream(p, a, SB) == VL_OK);
  vl_alloc_free(p, a);
  vl_block *b = xalloc(p, 4096, SA);
  CHECK(addr(b) == aa);
  vl_block *c = NULL;
  CHECK(vl_alloc_malloc(p, 100 * MiB, SA, &c) == VL_EOOM);
  CHECK(strstr(vl_errmsg(), "out of memory on device") != NULL);
  CHECK(strstr(vl_errmsg(), "free memory unknown") != NULL);
  vl_alloc_free(p, b);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
  vl_alloc_backend bad = {.ud = &m, .raw_free = mock_free}; /* raw_alloc missing */
  CHECK(vl_alloc_create(&bad, &p) == VL_EINVAL);
}

/* Process CPU time: other jobs sharing the CI machine's cores do not count against the pool. */
static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_speed(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 64ull * 1024 * MiB);
  static const size_t sizes[] = {256, 4096, 1000, 65536, 512, 3 * MiB, 8192, 200000,
                                 12 * MiB, 40, 1 << 16, 777777, 5 * MiB + 3, 2048, 100, 1 << 20};
  enum { NS = sizeof sizes / sizeof sizes[0], LIVE = 64, PAIRS = 1000000, TRIALS = 3 };
  vl_block *live[LIVE] = {0};
  uint32_t rng = 12345;
  int failures = 0;
  double best = 1e30;
  /* Best of a few trials: a preempted run says nothing about the allocator. */
  for (int trial = 0; trial < TRIALS; trial++) {
    double t0 = cpu_s();
    for (int i = 0; i < PAIRS; i++) {
      rng = rng * 1664525u + 1013904223u;
      int slot = (int)((rng >> 8) % LIVE);
      vl_alloc_free(p, live[slot]);
      live[slot] = NULL;
      if (vl_alloc_malloc(p, sizes[(rng >> 20) % NS], (rng >> 31) ? SA : SB, &live[slot]) != VL_OK)
        failures++;
    }
    double dt = cpu_s() - t0;
    if (dt < best) best = dt;
    if (PAIRS / best > 2e6) break;
  }
  for (int i = 0; i < LIVE; i++) vl_alloc_free(p, live[i]);
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  double rate = PAIRS / best;
  printf("pool speed: %d alloc/free pairs in %.3f s CPU = %.2e pairs/s (%llu segments obtained, "
         "%llu cache hits)\n", PAIRS, best, rate, (unsigned long long)st.raw_allocs,
         (unsigned long long)st.cache_hits);
  CHECK(failures == 0);
#if defined(__SANITIZE_ADDRESS__)
  (void)rate; /* instrumented builds are several times slower; the rate is still printed */
#else
  CHECK(rate > 1e6);
#endif
  CHECK(st.allocated == 0 && st.active_blocks == 0);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
}

/* A default-pool block freed while a private pool is active (a graph capture) is held until that
 * pool is released: a replay may still use it. Cached segments stay while a pool is active. */
static void test_private_holds_frees(void) {
  mock m;
  vl_alloc *p = make_pool(&m, 1024 * MiB);
  int id = 0;
  CHECK(vl_alloc_private_create(p, &id) == VL_OK);
  vl_block *d = xalloc(p, 1000, SA);
  vl_block *spare = xalloc(p, 5 * MiB, SA);
  const uintptr_t da = addr(d);
  vl_alloc_free(p, spare); /* a cached, unused large segment */
  CHECK(vl_alloc_private_begin(p, id, SA) == VL_OK);
  vl_alloc_free(p, d);
  vl_alloc_empty_cache(p);
  CHECK(m.raw_frees == 0); /* nothing goes back to the device during capture */
  vl_alloc_stats st;
  vl_alloc_get_stats(p, &st);
  CHECK(st.active_blocks == 1); /* d is held, not free */
  vl_alloc_private_end(p, SA);
  vl_block *e = xalloc(p, 1000, SA);
  CHECK(addr(e) != da);
  vl_alloc_free(p, e);
  CHECK(vl_alloc_private_release(p, id) == VL_OK);
  vl_alloc_get_stats(p, &st);
  CHECK(st.active_blocks == 0);
  vl_block *f = xalloc(p, 1000, SA);
  CHECK(addr(f) == da || addr(f) == addr(e)); /* the default pool has d's bytes again */
  vl_alloc_free(p, f);
  check_consistent(p, &m);
  vl_alloc_destroy(p);
  CHECK(m.used == 0 && m.bad_frees == 0);
}

int main(void) {
  test_rounding();
  test_small_large();
  test_split_rules();
  test_best_fit_and_merge();
  test_streams();
  test_record_stream();
  test_event_failure();
  test_empty_cache();
  test_limit();
  test_oom_path();
  test_private();
  test_private_holds_frees();
  test_stats();
  test_zero_bytes();
  test_no_events_backend();
  test_speed();
  return vl_test_finish();
}
