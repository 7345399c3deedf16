/* runtime/core/alloc.h: the caching allocator (one per CUDA device, one for pinned host memory).
 *
 * PyTorch's CUDACachingAllocator design, in C: requests are rounded up to 512 bytes; requests
 * <= 1 MiB come from the small pool (2 MiB segments), larger ones from the large pool (20 MiB
 * segments for requests < 10 MiB, otherwise the request rounded up to 2 MiB). A request takes the
 * best-fitting free block of its pool that was last used on the same stream, splitting off the
 * rest when the remainder is worth keeping; a freed block merges with free neighbours of its
 * segment. A block used on other streams (vl_alloc_record_stream) returns to the free lists only
 * after events recorded on those streams at free time have completed: that is the only way a
 * block crosses streams. Private pools give a graph capture its own segments.
 *
 * Out of memory: free the cached (unused) segments and retry; then ask the host to collect
 * garbage (the reclaim hook, e.g. a full Lua GC) and retry; then fail with VL_EOOM and a message
 * naming requested, device free, reserved and allocated bytes. The pool stays usable.
 *
 * The device allocator is a table of functions so the bookkeeping can be tested in CI against a
 * mock (tests/c/test_alloc.c); runtime/core/cuda.c supplies the CUDA one (cudaMalloc, events) and the
 * pinned-host one (cudaHostAlloc). Not thread-safe: one pool is used by one thread at a time.
 *
 * Part of core (it was runtime/alloc/): the context owns the pools, cuda.c supplies their device
 * functions and tensor.c's storage takes its bytes from them, and it needs nothing but status.h.
 * A folder of its own would have needed hooks for core to reach a concern above it, for no gain;
 * its bookkeeping stays separate by file (alloc_internal.h is private to alloc*.c). */
#ifndef VL_ALLOC_H
#define VL_ALLOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_alloc vl_alloc;
typedef struct vl_block vl_block;

typedef struct vl_alloc_backend {
  void *ud;
  /* Returns VL_EOOM (without setting a message) when the device has no room. */
  vl_status (*raw_alloc)(void *ud, size_t nbytes, void **ptr);
  void (*raw_free)(void *ud, void *ptr);
  /* Create and record an event on `stream`; query returns 1 when complete, 0 when pending,
   * negative on error. May be NULL for a backend without streams (host, single stream). */
  vl_status (*event_record)(void *ud, void *stream, void **event);
  int (*event_query)(void *ud, void *event);
  void (*event_destroy)(void *ud, void *event);
  /* Device free/total bytes for OOM messages and fractional limits; may be NULL. */
  vl_status (*mem_info)(void *ud, size_t *free_bytes, size_t *total_bytes);
  /* Names the memory in messages ("cuda:0", "pinned host"); may be NULL. */
  const char *name;
} vl_alloc_backend;

typedef struct vl_alloc_stats {
  size_t allocated;        /* bytes in live blocks (rounded sizes) */
  size_t requested;        /* bytes asked for by live blocks */
  size_t reserved;         /* bytes in segments obtained from the device */
  size_t peak_allocated;
  size_t peak_reserved;
  size_t limit;            /* 0 = none */
  uint64_t alloc_count;    /* vl_alloc_malloc calls that succeeded */
  uint64_t free_count;
  uint64_t cache_hits;     /* allocations served without a raw_alloc */
  uint64_t raw_allocs;     /* segments obtained from the device */
  uint64_t raw_frees;
  uint64_t oom_count;      /* allocations that failed with VL_EOOM */
  uint64_t segments;       /* segments currently held */
  uint64_t active_blocks;  /* live blocks */
  uint64_t pending_free;   /* freed blocks waiting for events */
} vl_alloc_stats;

typedef struct vl_alloc_block_info {
  uintptr_t addr;
  size_t size;
  size_t requested;    /* 0 when free */
  bool allocated;
  bool pending;        /* freed, waiting for cross-stream events */
} vl_alloc_block_info;

typedef struct vl_alloc_segment_info {
  uintptr_t addr;
  size_t size;
  void *stream;
  int private_id;      /* 0 = the default pool */
  bool small;          /* small pool segment */
  size_t nblocks;
  vl_alloc_block_info *blocks;
} vl_alloc_segment_info;

vl_status vl_alloc_create(const vl_alloc_backend *be, vl_alloc **out);
/* Frees every segment (live blocks included: the caller guarantees none is in use). */
void vl_alloc_destroy(vl_alloc *p);

/* nbytes == 0 gives a block whose pointer is NULL; vl_alloc_free accepts it. */
vl_status vl_alloc_malloc(vl_alloc *p, size_t nbytes, void *stream, vl_block **out);
void vl_alloc_free(vl_alloc *p, vl_block *b);
void *vl_block_ptr(const vl_block *b);
size_t vl_block_size(const vl_block *b);
void *vl_block_stream(const vl_block *b);
/* The block is (also) used on `stream`: at free time an event is recorded there, and the block
 * becomes reusable only when it has completed. Recording the allocation stream is a no-op. */
vl_status vl_alloc_record_stream(vl_alloc *p, vl_block *b, void *stream);

/* Returns unused cached segments to the device (segments of live or pending blocks stay). */
void vl_alloc_empty_cache(vl_alloc *p);
/* Caps reserved bytes; 0 removes the cap. A limit below what is reserved now only stops growth. */
void vl_alloc_set_limit(vl_alloc *p, size_t bytes);
void vl_alloc_set_reclaim(vl_alloc *p, int (*reclaim)(void *ud), void *ud);
void vl_alloc_get_stats(const vl_alloc *p, vl_alloc_stats *s);
void vl_alloc_reset_peak(vl_alloc *p);
/* malloc'd array of segments (and each one's malloc'd block array); free with
 * vl_alloc_snapshot_free. */
vl_status vl_alloc_snapshot(vl_alloc *p, vl_alloc_segment_info **segs, size_t *nsegs);
void vl_alloc_snapshot_free(vl_alloc_segment_info *segs, size_t nsegs);

/* Private pools (for CUDA graph capture): while a private pool is active on a stream, every
 * allocation on that stream comes from segments that belong to that pool alone, and freed blocks
 * go back to it; other streams never see them. While any private pool is active, blocks of the
 * default pool that are freed are held by it (a graph captured meanwhile may still use them on
 * replay) and return to the default pool when it is released, and cached segments are not
 * returned to the device (that would synchronise). Releasing a private pool returns its segments
 * to the device once all its blocks are freed (later frees finish the job). */
vl_status vl_alloc_private_create(vl_alloc *p, int *id);
vl_status vl_alloc_private_begin(vl_alloc *p, int id, void *stream);
void vl_alloc_private_end(vl_alloc *p, void *stream);
vl_status vl_alloc_private_release(vl_alloc *p, int id);

/* Size rounding, exposed for tests. */
size_t vl_alloc_round_size(size_t nbytes);
size_t vl_alloc_segment_size(size_t rounded);

#ifdef __cplusplus
}
#endif
#endif
