/* runtime/core/alloc_internal.h: the allocator's data structures, shared by its files (alloc.c: the
 * blocks, segments, treaps and private pools; alloc_snapshot.c: statistics and snapshots). Private
 * to those two files. */
#ifndef VL_ALLOC_INTERNAL_H
#define VL_ALLOC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/alloc.h"

enum { VL_B_FREE = 0, VL_B_ALLOC, VL_B_PENDING };

typedef struct vl_segment vl_segment;
typedef struct vl_private vl_private;

struct vl_block {
  uintptr_t addr;
  size_t size;
  size_t requested;
  void *stream;
  vl_segment *seg;            /* NULL for zero-byte blocks */
  vl_block *prev, *next;      /* address neighbours; `next` also links the spare list */
  vl_block *left, *right;     /* free treap */
  uint32_t prio;
  int pid;
  uint8_t state;
  bool small;
  bool stuck;                 /* an event could not be recorded: never reused (safe side) */
  int nevents;                /* events still pending for this block */
  int nuses, capuses;
  void **uses;                /* other streams recorded with vl_alloc_record_stream */
};

struct vl_private {
  int id;
  bool released;
  size_t nsegs;
  vl_block **held;            /* default-pool blocks freed while it was active */
  size_t nheld, capheld;
  vl_private *next;
};

struct vl_segment {
  uintptr_t addr;
  size_t size;
  void *stream;
  int pid;
  vl_private *priv;
  bool small;
  vl_block *first;            /* never changes: merging keeps the lower block */
  vl_segment *prev, *next;
};

typedef struct vl_pending {
  void *event;
  vl_block *b;
  struct vl_pending *next;
} vl_pending;

typedef struct vl_active {
  void *stream;
  vl_private *priv;
} vl_active;

#define VL_SLAB_BLOCKS 256
typedef struct vl_slab {
  struct vl_slab *next;
  vl_block blocks[VL_SLAB_BLOCKS];
} vl_slab;

struct vl_alloc {
  vl_alloc_backend be;
  vl_block *tree[2];          /* [0] large pool, [1] small pool */
  vl_segment *segs;
  vl_block *spare;
  vl_slab *slabs;
  vl_pending *pending, *spare_pending;
  vl_private *privs;
  int next_pid;
  vl_active *active;
  size_t nactive, capactive;
  int (*reclaim)(void *ud);
  void *reclaim_ud;
  bool in_reclaim;
  uint32_t rng;
  vl_alloc_stats st;
};

#endif
