/* runtime/autograd/internal.h: what runtime/autograd/node.c shares with runtime/autograd/engine.c.
 * Not part of the contract (runtime/autograd/autograd.h is). */
#ifndef VL_AUTOGRAD_INTERNAL_H
#define VL_AUTOGRAD_INTERNAL_H

#include "runtime/autograd/autograd.h"

static inline vl_autograd_meta *meta_of(const vl_tensor *t) { return (vl_autograd_meta *)t->autograd; }

static inline bool same_shape(const vl_tensor *a, int ndim, const int64_t *size) {
  if (a->ndim != ndim) return false;
  for (int i = 0; i < ndim; i++)
    if (a->size[i] != size[i]) return false;
  return true;
}

/* The edge a gradient w.r.t. t flows along (node NULL when t needs none); a new reference. */
vl_status vl_ag_edge_of(vl_tensor *t, vl_edge *e);
/* The hook retain_grad registers (ud = the tensor, not owned). */
vl_status vl_ag_retain_hook(void *ud, vl_tensor *grad, vl_tensor **replace);
/* Drops a node's saved tensors. */
void vl_ag_node_release_saved(vl_node *n);

#endif
