/* runtime/core/alloc_snapshot.c: the allocator's statistics and its snapshot of segments and blocks
 * (read-only views of the structures in alloc_internal.h; runtime/core/alloc.h has the contracts). */
#include <stdlib.h>
#include <string.h>

#include "runtime/core/alloc_internal.h"

void vl_alloc_get_stats(const vl_alloc *p, vl_alloc_stats *s) {
  if (!s) return;
  if (!p) {
    memset(s, 0, sizeof *s);
    return;
  }
  *s = p->st;
}

void vl_alloc_reset_peak(vl_alloc *p) {
  if (!p) return;
  p->st.peak_allocated = p->st.allocated;
  p->st.peak_reserved = p->st.reserved;
}

static int seg_info_cmp(const void *a, const void *b) {
  uintptr_t x = ((const vl_alloc_segment_info *)a)->addr, y = ((const vl_alloc_segment_info *)b)->addr;
  return (x > y) - (x < y);
}

vl_status vl_alloc_snapshot(vl_alloc *p, vl_alloc_segment_info **segs, size_t *nsegs) {
  if (!p || !segs || !nsegs) return vl_fail(VL_EINVAL, "vl_alloc_snapshot: NULL argument");
  size_t n = 0;
  for (vl_segment *s = p->segs; s; s = s->next) n++;
  vl_alloc_segment_info *out = calloc(n ? n : 1, sizeof *out);
  if (!out) return vl_fail(VL_EOOM, "vl_alloc_snapshot: out of host memory for %zu segments", n);
  size_t i = 0;
  for (vl_segment *s = p->segs; s; s = s->next, i++) {
    size_t nb = 0;
    for (vl_block *b = s->first; b; b = b->next) nb++;
    vl_alloc_block_info *bi = calloc(nb, sizeof *bi);
    if (!bi) {
      vl_alloc_snapshot_free(out, i);
      return vl_fail(VL_EOOM, "vl_alloc_snapshot: out of host memory for %zu blocks", nb);
    }
    size_t j = 0;
    for (vl_block *b = s->first; b; b = b->next, j++) {
      bi[j].addr = b->addr;
      bi[j].size = b->size;
      bi[j].requested = b->state == VL_B_ALLOC ? b->requested : 0;
      bi[j].allocated = b->state == VL_B_ALLOC;
      bi[j].pending = b->state == VL_B_PENDING;
    }
    out[i].addr = s->addr;
    out[i].size = s->size;
    out[i].stream = s->stream;
    out[i].private_id = s->pid;
    out[i].small = s->small;
    out[i].nblocks = nb;
    out[i].blocks = bi;
  }
  qsort(out, n, sizeof *out, seg_info_cmp);
  *segs = out;
  *nsegs = n;
  return VL_OK;
}

void vl_alloc_snapshot_free(vl_alloc_segment_info *segs, size_t nsegs) {
  if (!segs) return;
  for (size_t i = 0; i < nsegs; i++) free(segs[i].blocks);
  free(segs);
}
