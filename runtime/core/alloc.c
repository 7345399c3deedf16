/* runtime/core/alloc.c: the caching allocator (design in runtime/core/alloc.h).
 *
 * Every byte of a segment belongs to exactly one block; the blocks of a segment form an
 * address-ordered doubly linked list. A block is ALLOC (handed out), PENDING (freed, waiting for
 * cross-stream events) or FREE. FREE blocks, and only those, sit in one of two treaps (small and
 * large pool) ordered by (private id, stream, size, address), so the best fit for a request is a
 * lower bound on (private id, stream, size, 0) in O(log n). Block structs come from slabs and are
 * recycled through a free list, so the cache-hit path never calls malloc. */
#include "runtime/core/alloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/alloc_internal.h"

#define VL_MIN_BLOCK ((size_t)512)
#define VL_SMALL_SIZE ((size_t)1 << 20)        /* largest request served by the small pool */
#define VL_SMALL_SEGMENT ((size_t)2 << 20)
#define VL_LARGE_SEGMENT ((size_t)20 << 20)
#define VL_MIN_LARGE_ALLOC ((size_t)10 << 20)  /* requests from here get their own segment */
#define VL_ROUND_LARGE ((size_t)2 << 20)
/* Larger requests cannot be rounded without overflow; no device has that much memory anyway. */
#define VL_MAX_REQUEST (SIZE_MAX / 2)

/* ---- sizes ---- */

size_t vl_alloc_round_size(size_t nbytes) {
  if (nbytes == 0) return 0;
  if (nbytes < VL_MIN_BLOCK) return VL_MIN_BLOCK;
  if (nbytes > SIZE_MAX - VL_MIN_BLOCK) return SIZE_MAX - (VL_MIN_BLOCK - 1);
  return (nbytes + VL_MIN_BLOCK - 1) & ~(VL_MIN_BLOCK - 1);
}

size_t vl_alloc_segment_size(size_t rounded) {
  if (rounded <= VL_SMALL_SIZE) return VL_SMALL_SEGMENT;
  if (rounded < VL_MIN_LARGE_ALLOC) return VL_LARGE_SEGMENT;
  if (rounded > SIZE_MAX - VL_ROUND_LARGE) return SIZE_MAX - (VL_ROUND_LARGE - 1);
  return (rounded + VL_ROUND_LARGE - 1) & ~(VL_ROUND_LARGE - 1);
}

static void fmt_bytes(size_t n, char *buf, size_t len) {
  const double d = (double)n;
  if (n >= ((size_t)1 << 30)) snprintf(buf, len, "%.2f GiB", d / (double)((size_t)1 << 30));
  else if (n >= ((size_t)1 << 20)) snprintf(buf, len, "%.2f MiB", d / (double)((size_t)1 << 20));
  else if (n >= 1024) snprintf(buf, len, "%.2f KiB", d / 1024.0);
  else snprintf(buf, len, "%zu bytes", n);
}

static const char *pool_name(const vl_alloc *p) { return p->be.name ? p->be.name : "device"; }

/* ---- block structs ---- */

static vl_block *get_block(vl_alloc *p) {
  if (!p->spare) {
    vl_slab *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->next = p->slabs;
    p->slabs = s;
    for (int i = VL_SLAB_BLOCKS - 1; i >= 0; i--) {
      s->blocks[i].next = p->spare;
      p->spare = &s->blocks[i];
    }
  }
  vl_block *b = p->spare;
  p->spare = b->next;
  /* The uses array survives recycling so record_stream rarely mallocs. */
  void **uses = b->uses;
  int cap = b->capuses;
  memset(b, 0, sizeof *b);
  b->uses = uses;
  b->capuses = cap;
  return b;
}

static void put_block(vl_alloc *p, vl_block *b) {
  b->state = VL_B_FREE; /* a stale handle freed again is then ignored */
  b->next = p->spare;
  p->spare = b;
}

/* ---- the free treaps ---- */

typedef struct vl_key {
  int pid;
  uintptr_t stream;
  size_t size;
  uintptr_t addr;
} vl_key;

static inline vl_key key_of(const vl_block *b) {
  vl_key k = {b->pid, (uintptr_t)b->stream, b->size, b->addr};
  return k;
}

static inline int key_cmp(const vl_key *k, const vl_block *b) {
  if (k->pid != b->pid) return k->pid < b->pid ? -1 : 1;
  if (k->stream != (uintptr_t)b->stream) return k->stream < (uintptr_t)b->stream ? -1 : 1;
  if (k->size != b->size) return k->size < b->size ? -1 : 1;
  if (k->addr != b->addr) return k->addr < b->addr ? -1 : 1;
  return 0;
}

/* Splits t into keys < k (l) and keys >= k (r). */
static void t_split(vl_block *t, const vl_key *k, vl_block **l, vl_block **r) {
  if (!t) {
    *l = *r = NULL;
  } else if (key_cmp(k, t) > 0) {
    t_split(t->right, k, &t->right, r);
    *l = t;
  } else {
    t_split(t->left, k, l, &t->left);
    *r = t;
  }
}

static vl_block *t_merge(vl_block *a, vl_block *b) {
  if (!a) return b;
  if (!b) return a;
  if (a->prio > b->prio) {
    a->right = t_merge(a->right, b);
    return a;
  }
  b->left = t_merge(a, b->left);
  return b;
}

static vl_block *t_insert(vl_block *t, vl_block *n, const vl_key *k) {
  if (!t) return n;
  if (n->prio > t->prio) {
    t_split(t, k, &n->left, &n->right);
    return n;
  }
  if (key_cmp(k, t) < 0) t->left = t_insert(t->left, n, k);
  else t->right = t_insert(t->right, n, k);
  return t;
}

static vl_block *t_erase(vl_block *t, const vl_block *n, const vl_key *k) {
  if (t == n) return t_merge(t->left, t->right);
  if (!t) return NULL; /* not reached: callers erase only blocks in the tree */
  if (key_cmp(k, t) < 0) t->left = t_erase(t->left, n, k);
  else t->right = t_erase(t->right, n, k);
  return t;
}

static void tree_insert(vl_alloc *p, vl_block *b) {
  p->rng ^= p->rng << 13;
  p->rng ^= p->rng >> 17;
  p->rng ^= p->rng << 5;
  b->prio = p->rng;
  b->left = b->right = NULL;
  vl_key k = key_of(b);
  p->tree[b->small] = t_insert(p->tree[b->small], b, &k);
}

static void tree_erase(vl_alloc *p, vl_block *b) {
  vl_key k = key_of(b);
  p->tree[b->small] = t_erase(p->tree[b->small], b, &k);
  b->left = b->right = NULL;
}

/* Best fit: the smallest free block of this pool, private pool and stream that is >= size. */
static vl_block *find_free(vl_alloc *p, bool small, int pid, void *stream, size_t size) {
  vl_key k = {pid, (uintptr_t)stream, size, 0};
  vl_block *t = p->tree[small], *best = NULL;
  while (t) {
    if (key_cmp(&k, t) <= 0) {
      best = t;
      t = t->left;
    } else {
      t = t->right;
    }
  }
  if (!best || best->pid != pid || best->stream != stream) return NULL;
  tree_erase(p, best);
  return best;
}

/* ---- segments and private pools ---- */

static void remove_private(vl_alloc *p, vl_private *priv) {
  for (vl_private **pp = &p->privs; *pp; pp = &(*pp)->next) {
    if (*pp == priv) {
      *pp = priv->next;
      free(priv->held);
      free(priv);
      return;
    }
  }
}

static vl_private *find_private(vl_alloc *p, int id) {
  for (vl_private *q = p->privs; q; q = q->next)
    if (q->id == id) return q;
  return NULL;
}

/* The segment's single block must be FREE and out of the tree. */
static void release_segment(vl_alloc *p, vl_segment *s) {
  p->be.raw_free(p->be.ud, (void *)s->addr);
  p->st.reserved -= s->size;
  p->st.segments--;
  p->st.raw_frees++;
  if (s->prev) s->prev->next = s->next;
  else p->segs = s->next;
  if (s->next) s->next->prev = s->prev;
  put_block(p, s->first);
  vl_private *priv = s->priv;
  free(s);
  if (priv && --priv->nsegs == 0 && priv->released) remove_private(p, priv);
}

static bool segment_unused(const vl_segment *s) {
  const vl_block *b = s->first;
  return b->state == VL_B_FREE && !b->next;
}

/* Releases cached segments of the default pool and of released private pools. Segments of a
 * live private pool stay: a captured graph still refers to their addresses. */
static void release_cached(vl_alloc *p) {
  /* While a private pool is active a graph is being captured: freeing device memory then would
   * synchronise (not capturable), so the cache is kept until the capture ends. */
  if (p->nactive) return;
  vl_segment *s = p->segs;
  while (s) {
    vl_segment *next = s->next;
    if (segment_unused(s) && (!s->priv || s->priv->released)) {
      tree_erase(p, s->first);
      release_segment(p, s);
    }
    s = next;
  }
}

/* b (out of the tree, not ALLOC) becomes FREE, merged with its free neighbours. */
static void free_block(vl_alloc *p, vl_block *b) {
  b->state = VL_B_FREE;
  b->requested = 0;
  b->nuses = 0;
  vl_block *pr = b->prev, *nx = b->next;
  if (pr && pr->state == VL_B_FREE) {
    tree_erase(p, pr);
    pr->size += b->size;
    pr->next = nx;
    if (nx) nx->prev = pr;
    put_block(p, b);
    b = pr;
  }
  if (nx && nx->state == VL_B_FREE) {
    tree_erase(p, nx);
    b->size += nx->size;
    b->next = nx->next;
    if (nx->next) nx->next->prev = b;
    put_block(p, nx);
  }
  vl_segment *s = b->seg;
  if (!b->prev && !b->next && s->priv && s->priv->released) {
    release_segment(p, s);
    return;
  }
  tree_insert(p, b);
}

static void process_pending(vl_alloc *p) {
  vl_pending **pp = &p->pending;
  while (*pp) {
    vl_pending *e = *pp;
    /* A query error keeps the block pending: reusing memory a stream may still touch is worse
     * than leaking it until the pool is destroyed; the error resurfaces at the next CUDA call. */
    if (p->be.event_query(p->be.ud, e->event) != 1) {
      pp = &e->next;
      continue;
    }
    p->be.event_destroy(p->be.ud, e->event);
    *pp = e->next;
    e->next = p->spare_pending;
    p->spare_pending = e;
    vl_block *b = e->b;
    if (--b->nevents == 0 && !b->stuck) {
      p->st.pending_free--;
      free_block(p, b);
    }
  }
}

static vl_private *active_private(const vl_alloc *p, void *stream) {
  for (size_t i = 0; i < p->nactive; i++)
    if (p->active[i].stream == stream) return p->active[i].priv;
  return NULL;
}

/* Obtains a new segment; *device_oom tells a full device (or the limit, *limited) apart from
 * other failures, which carry their own message. */
static vl_status grow(vl_alloc *p, bool small, vl_private *priv, void *stream, size_t size,
                      vl_block **out, bool *device_oom, bool *limited) {
  size_t segsz = vl_alloc_segment_size(size);
  *device_oom = false;
  if (p->st.limit && (p->st.reserved > p->st.limit || segsz > p->st.limit - p->st.reserved)) {
    *device_oom = true;
    *limited = true;
    return VL_EOOM;
  }
  vl_segment *s = malloc(sizeof *s);
  vl_block *b = get_block(p);
  if (!s || !b) {
    free(s);
    if (b) put_block(p, b);
    return vl_fail(VL_EOOM, "pool %s: out of host memory for the allocator's bookkeeping",
                   pool_name(p));
  }
  void *ptr = NULL;
  vl_status st = p->be.raw_alloc(p->be.ud, segsz, &ptr);
  if (st != VL_OK) {
    free(s);
    put_block(p, b);
    *device_oom = st == VL_EOOM;
    *limited = false;
    return st;
  }
  s->addr = (uintptr_t)ptr;
  s->size = segsz;
  s->stream = stream;
  s->priv = priv;
  s->pid = priv ? priv->id : 0;
  s->small = small;
  s->first = b;
  s->prev = NULL;
  s->next = p->segs;
  if (p->segs) p->segs->prev = s;
  p->segs = s;
  if (priv) priv->nsegs++;
  b->addr = s->addr;
  b->size = segsz;
  b->stream = stream;
  b->seg = s;
  b->pid = s->pid;
  b->small = small;
  b->state = VL_B_FREE;
  p->st.reserved += segsz;
  if (p->st.reserved > p->st.peak_reserved) p->st.peak_reserved = p->st.reserved;
  p->st.segments++;
  p->st.raw_allocs++;
  *out = b;
  return VL_OK;
}

/* Hands out a FREE block (out of the tree), splitting off a remainder worth keeping. */
static void take(vl_alloc *p, vl_block *b, size_t size, size_t nbytes) {
  size_t rest = b->size - size;
  if (b->small ? rest >= VL_MIN_BLOCK : rest > VL_SMALL_SIZE) {
    vl_block *r = get_block(p);
    /* Without a struct for the remainder the whole block is handed out: still correct. */
    if (r) {
      r->addr = b->addr + size;
      r->size = rest;
      r->stream = b->stream;
      r->seg = b->seg;
      r->pid = b->pid;
      r->small = b->small;
      r->state = VL_B_FREE;
      r->prev = b;
      r->next = b->next;
      if (b->next) b->next->prev = r;
      b->next = r;
      b->size = size;
      tree_insert(p, r);
    }
  }
  b->state = VL_B_ALLOC;
  b->requested = nbytes;
  b->nuses = 0;
  b->stuck = false;
  p->st.allocated += b->size;
  p->st.requested += nbytes;
  if (p->st.allocated > p->st.peak_allocated) p->st.peak_allocated = p->st.allocated;
  p->st.alloc_count++;
  p->st.active_blocks++;
}

static vl_status oom_error(vl_alloc *p, size_t nbytes, bool limited) {
  char req[32], fr[32], tot[32], res[32], al[32], lim[48], dev[96];
  size_t free_b = 0, total_b = 0;
  fmt_bytes(nbytes, req, sizeof req);
  fmt_bytes(p->st.reserved, res, sizeof res);
  fmt_bytes(p->st.allocated, al, sizeof al);
  if (p->be.mem_info && p->be.mem_info(p->be.ud, &free_b, &total_b) == VL_OK) {
    fmt_bytes(free_b, fr, sizeof fr);
    fmt_bytes(total_b, tot, sizeof tot);
    snprintf(dev, sizeof dev, "%s free of %s", fr, tot);
  } else {
    snprintf(dev, sizeof dev, "free memory unknown");
  }
  if (p->st.limit) {
    char l[32];
    fmt_bytes(p->st.limit, l, sizeof l);
    snprintf(lim, sizeof lim, "%s%s", l, limited ? " reached" : "");
  } else {
    snprintf(lim, sizeof lim, "none");
  }
  p->st.oom_count++;
  return vl_fail(VL_EOOM,
                 "out of memory on %s: tried to allocate %s (device: %s; pool: %s reserved, %s "
                 "allocated; limit %s)",
                 pool_name(p), req, dev, res, al, lim);
}

/* One attempt: reuse a cached block, else grow. */
static vl_status attempt(vl_alloc *p, bool small, void *stream, size_t size, vl_block **out,
                         bool *hit, bool *device_oom, bool *limited) {
  /* No event queries while a private pool is active (a graph capture): CUDA forbids them on the
   * capturing thread. Pending blocks wait for the end of the capture. */
  if (p->pending && !p->nactive) process_pending(p);
  vl_private *priv = p->nactive ? active_private(p, stream) : NULL;
  vl_block *b = find_free(p, small, priv ? priv->id : 0, stream, size);
  if (b) {
    *hit = true;
    *out = b;
    return VL_OK;
  }
  return grow(p, small, priv, stream, size, out, device_oom, limited);
}

/* ---- public API ---- */

vl_status vl_alloc_create(const vl_alloc_backend *be, vl_alloc **out) {
  if (!be || !out || !be->raw_alloc || !be->raw_free)
    return vl_fail(VL_EINVAL, "vl_alloc_create: a backend with raw_alloc and raw_free is required");
  if (be->event_record && (!be->event_query || !be->event_destroy))
    return vl_fail(VL_EINVAL, "vl_alloc_create: backend %s records events but cannot query or "
                   "destroy them", be->name ? be->name : "(unnamed)");
  vl_alloc *p = calloc(1, sizeof *p);
  if (!p) return vl_fail(VL_EOOM, "vl_alloc_create: out of host memory");
  p->be = *be;
  p->rng = 0x9e3779b9u;
  *out = p;
  return VL_OK;
}

void vl_alloc_destroy(vl_alloc *p) {
  if (!p) return;
  for (vl_pending *e = p->pending, *n; e; e = n) {
    n = e->next;
    p->be.event_destroy(p->be.ud, e->event);
    free(e);
  }
  for (vl_pending *e = p->spare_pending, *n; e; e = n) {
    n = e->next;
    free(e);
  }
  for (vl_segment *s = p->segs, *n; s; s = n) {
    n = s->next;
    p->be.raw_free(p->be.ud, (void *)s->addr);
    free(s);
  }
  for (vl_slab *s = p->slabs, *n; s; s = n) {
    n = s->next;
    for (int i = 0; i < VL_SLAB_BLOCKS; i++) free(s->blocks[i].uses);
    free(s);
  }
  for (vl_private *q = p->privs, *n; q; q = n) {
    n = q->next;
    free(q->held);
    free(q);
  }
  free(p->active);
  free(p);
}

vl_status vl_alloc_malloc(vl_alloc *p, size_t nbytes, void *stream, vl_block **out) {
  if (!p || !out) return vl_fail(VL_EINVAL, "vl_alloc_malloc: NULL pool or output");
  if (nbytes == 0) {
    vl_block *b = get_block(p);
    if (!b) return vl_fail(VL_EOOM, "pool %s: out of host memory for a block", pool_name(p));
    b->stream = stream;
    b->state = VL_B_ALLOC;
    p->st.alloc_count++;
    p->st.cache_hits++;
    p->st.active_blocks++;
    *out = b;
    return VL_OK;
  }
  if (nbytes > VL_MAX_REQUEST) return oom_error(p, nbytes, false);
  size_t size = vl_alloc_round_size(nbytes);
  bool small = size <= VL_SMALL_SIZE;
  bool hit = false, device_oom = false, limited = false;
  vl_block *b = NULL;
  vl_status st = attempt(p, small, stream, size, &b, &hit, &device_oom, &limited);
  if (st != VL_OK && device_oom) {
    release_cached(p);
    st = attempt(p, small, stream, size, &b, &hit, &device_oom, &limited);
  }
  if (st != VL_OK && device_oom && p->reclaim && !p->in_reclaim) {
    /* No pointer into the pool is held across the hook: it may free (or even allocate) here. */
    p->in_reclaim = true;
    p->reclaim(p->reclaim_ud);
    p->in_reclaim = false;
    st = attempt(p, small, stream, size, &b, &hit, &device_oom, &limited);
    if (st != VL_OK && device_oom) {
      release_cached(p);
      st = attempt(p, small, stream, size, &b, &hit, &device_oom, &limited);
    }
  }
  if (st != VL_OK) return device_oom ? oom_error(p, nbytes, limited) : st;
  if (hit) p->st.cache_hits++;
  take(p, b, size, nbytes);
  *out = b;
  return VL_OK;
}

static void free_now(vl_alloc *p, vl_block *b);

/* A default-pool block freed while a private pool is active is held by that pool until it is
 * released: a graph captured meanwhile may have recorded kernels that use the block, and
 * handing it to an eager allocation after the capture would let a replay overwrite it. On host
 * OOM the block simply stays allocated (the safe side). */
static void hold(vl_alloc *p, vl_block *b) {
  vl_private *q = p->active[0].priv;
  if (q->nheld == q->capheld) {
    size_t cap = q->capheld ? 2 * q->capheld : 16;
    vl_block **h = realloc(q->held, cap * sizeof *h);
    if (!h) return;
    q->held = h;
    q->capheld = cap;
  }
  q->held[q->nheld++] = b;
}

void vl_alloc_free(vl_alloc *p, vl_block *b) {
  if (!p || !b || b->state != VL_B_ALLOC) return;
  if (p->nactive && b->seg && !b->seg->priv) {
    hold(p, b);
    return;
  }
  free_now(p, b);
}

static void free_now(vl_alloc *p, vl_block *b) {
  p->st.free_count++;
  p->st.active_blocks--;
  if (!b->seg) {
    put_block(p, b);
    return;
  }
  p->st.allocated -= b->size;
  p->st.requested -= b->requested;
  b->requested = 0;
  if (b->nuses && p->be.event_record) {
    b->state = VL_B_PENDING;
    p->st.pending_free++;
    for (int i = 0; i < b->nuses; i++) {
      void *ev = NULL;
      if (p->be.event_record(p->be.ud, b->uses[i], &ev) != VL_OK) {
        b->stuck = true;
        continue;
      }
      vl_pending *e = p->spare_pending;
      if (e) p->spare_pending = e->next;
      else e = malloc(sizeof *e);
      if (!e) {
        p->be.event_destroy(p->be.ud, ev);
        b->stuck = true;
        continue;
      }
      e->event = ev;
      e->b = b;
      e->next = p->pending;
      p->pending = e;
      b->nevents++;
    }
    b->nuses = 0;
    return;
  }
  free_block(p, b);
}

void *vl_block_ptr(const vl_block *b) { return b ? (void *)b->addr : NULL; }
size_t vl_block_size(const vl_block *b) { return b ? b->size : 0; }
void *vl_block_stream(const vl_block *b) { return b ? b->stream : NULL; }

vl_status vl_alloc_record_stream(vl_alloc *p, vl_block *b, void *stream) {
  if (!p || !b) return vl_fail(VL_EINVAL, "vl_alloc_record_stream: NULL pool or block");
  if (b->state != VL_B_ALLOC)
    return vl_fail(VL_EINVAL, "vl_alloc_record_stream: block %p on %s is not allocated",
                   (void *)b->addr, pool_name(p));
  if (!b->seg || stream == b->stream || !p->be.event_record) return VL_OK;
  for (int i = 0; i < b->nuses; i++)
    if (b->uses[i] == stream) return VL_OK;
  if (b->nuses == b->capuses) {
    int cap = b->capuses ? 2 * b->capuses : 4;
    void **u = realloc(b->uses, (size_t)cap * sizeof *u);
    if (!u) return vl_fail(VL_EOOM, "vl_alloc_record_stream: out of host memory");
    b->uses = u;
    b->capuses = cap;
  }
  b->uses[b->nuses++] = stream;
  return VL_OK;
}

void vl_alloc_empty_cache(vl_alloc *p) {
  if (!p || p->nactive) return; /* during a capture: see attempt() and release_cached() */
  if (p->pending) process_pending(p);
  release_cached(p);
}

void vl_alloc_set_limit(vl_alloc *p, size_t bytes) {
  if (p) p->st.limit = bytes;
}

void vl_alloc_set_reclaim(vl_alloc *p, int (*reclaim)(void *ud), void *ud) {
  if (!p) return;
  p->reclaim = reclaim;
  p->reclaim_ud = ud;
}

/* ---- private pools ---- */

vl_status vl_alloc_private_create(vl_alloc *p, int *id) {
  if (!p || !id) return vl_fail(VL_EINVAL, "vl_alloc_private_create: NULL argument");
  vl_private *q = calloc(1, sizeof *q);
  if (!q) return vl_fail(VL_EOOM, "vl_alloc_private_create: out of host memory");
  q->id = ++p->next_pid;
  q->next = p->privs;
  p->privs = q;
  *id = q->id;
  return VL_OK;
}

vl_status vl_alloc_private_begin(vl_alloc *p, int id, void *stream) {
  if (!p) return vl_fail(VL_EINVAL, "vl_alloc_private_begin: NULL pool");
  vl_private *q = find_private(p, id);
  if (!q || q->released)
    return vl_fail(VL_EINVAL, "vl_alloc_private_begin: no private pool %d on %s", id, pool_name(p));
  vl_private *cur = active_private(p, stream);
  if (cur)
    return vl_fail(VL_EINVAL, "vl_alloc_private_begin: stream %p on %s already allocates from "
                   "private pool %d", stream, pool_name(p), cur->id);
  if (p->nactive == p->capactive) {
    size_t cap = p->capactive ? 2 * p->capactive : 4;
    vl_active *a = realloc(p->active, cap * sizeof *a);
    if (!a) return vl_fail(VL_EOOM, "vl_alloc_private_begin: out of host memory");
    p->active = a;
    p->capactive = cap;
  }
  p->active[p->nactive].stream = stream;
  p->active[p->nactive].priv = q;
  p->nactive++;
  return VL_OK;
}

void vl_alloc_private_end(vl_alloc *p, void *stream) {
  if (!p) return;
  for (size_t i = 0; i < p->nactive; i++) {
    if (p->active[i].stream == stream) {
      p->active[i] = p->active[--p->nactive];
      return;
    }
  }
}

vl_status vl_alloc_private_release(vl_alloc *p, int id) {
  if (!p) return vl_fail(VL_EINVAL, "vl_alloc_private_release: NULL pool");
  vl_private *q = find_private(p, id);
  if (!q || q->released)
    return vl_fail(VL_EINVAL, "vl_alloc_private_release: no private pool %d on %s", id,
                   pool_name(p));
  for (size_t i = 0; i < p->nactive; i++)
    if (p->active[i].priv == q)
      return vl_fail(VL_EINVAL, "vl_alloc_private_release: private pool %d on %s is still in use "
                     "by stream %p (call vl_alloc_private_end first)", id, pool_name(p),
                     p->active[i].stream);
  /* The held blocks go back to the default pool now that no graph of this pool can run. */
  for (size_t i = 0; i < q->nheld; i++) free_now(p, q->held[i]);
  q->nheld = 0;
  /* Before marking it released: a completion that empties its last segment would free q. */
  if (p->pending) process_pending(p);
  q->released = true;
  if (q->nsegs == 0) {
    remove_private(p, q);
    return VL_OK;
  }
  for (vl_segment *s = p->segs, *n; s; s = n) {
    n = s->next;
    if (s->priv != q || !segment_unused(s)) continue;
    bool last = q->nsegs == 1;
    tree_erase(p, s->first);
    release_segment(p, s); /* frees q with its last segment */
    if (last) break;
  }
  return VL_OK;
}
