/* runtime/autograd/autograd.h: reverse-mode automatic differentiation (the tape).
 *
 * Recording: the autograd-aware op wrappers (runtime/autograd/ops.h, vl_ag_*) call the raw op
 * (runtime/ops/ops.h, tensor.h, nn.h) and declare the op with one vl_ag_record call: when grad
 * mode is on and an input requires grad, that creates a vl_node whose edges point at the
 * producers of the inputs, copies the op's typed context (its scalars) into it, saves what the
 * backward formula needs, and attaches the node to the outputs (meta->grad_fn, output_nr). Raw
 * ops never record, so the backward formulas, written with raw ops, build no graph (no double
 * backward). A backward that runs backward again (from a hook) may nest 32 levels deep.
 *
 * Leaves (tensors with requires_grad and no grad_fn) receive gradients through an accumulator
 * node (cached, non-owning, in the leaf's meta; the node owns a reference to the leaf).
 * vl_backward runs the graph from the roots in dependency order: a node runs once all gradients
 * for its outputs have arrived (summed), then its saved tensors are dropped unless retain_graph.
 * Version counters (vl_storage.version, bumped by every in-place raw op) detect a saved tensor
 * modified in place after it was saved: backward then fails naming the node.
 *
 * Hooks: a tensor hook runs when the gradient w.r.t. that tensor is complete and may replace it;
 * a post-accumulate hook runs on a leaf right after its .grad was updated (data parallel training
 * starts bucketed all-reduces from it). All state is per process (vl_ag_state()). */
#ifndef VL_AUTOGRAD_H
#define VL_AUTOGRAD_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_node vl_node;

typedef struct vl_edge {
  vl_node *node; /* owning reference; NULL when the input needs no gradient */
  int input_nr;  /* which output of `node` the input was */
} vl_edge;

/* grads_out[i]: gradient w.r.t. output i, or NULL when none flowed into it (zeros). The function
 * writes grads_in[j] for every input j: a new reference, or NULL for "no gradient" (it must be
 * NULL when next[j].node is NULL; it may be NULL otherwise). Shapes and dtypes must equal the
 * input's (the engine checks, naming the node). */
typedef vl_status (*vl_backward_fn)(vl_node *n, vl_tensor *const *grads_out, vl_tensor **grads_in);

/* A gradient hook: given the gradient, may return a replacement (new reference) in *replace, or
 * leave it NULL to keep it. */
typedef vl_status (*vl_grad_hook_fn)(void *ud, vl_tensor *grad, vl_tensor **replace);
/* Called on a leaf after its .grad was updated. */
typedef vl_status (*vl_post_hook_fn)(void *ud, vl_tensor *leaf);

typedef struct vl_hook {
  struct vl_hook *next;
  int id;
  int output_nr;              /* for hooks kept on a node: which output */
  vl_grad_hook_fn fn;         /* one of fn / post is set */
  vl_post_hook_fn post;
  void *ud;
  void (*ud_free)(void *ud);  /* called when the hook is removed or its owner dies; may be NULL */
} vl_hook;

#define VL_NODE_MAX_SAVED 8

struct vl_node {
  int refcount;
  const char *name;           /* "MulBackward", "AccumulateGrad", a Lua Function's name */
  vl_backward_fn backward;
  int nin, nout;
  vl_edge *next;              /* nin edges */
  /* Output metadata, to make zero gradients and check shapes: */
  int64_t (*out_size)[VL_MAX_DIMS];
  int *out_ndim;
  vl_dtype *out_dtype;
  vl_device out_device;
  /* Saved tensors, with the storage version at save time. */
  int nsaved;
  vl_tensor *saved[VL_NODE_MAX_SAVED];
  uint32_t saved_version[VL_NODE_MAX_SAVED];
  bool saved_released;        /* after a backward without retain_graph */
  void *ctx;                  /* the op's typed context (vl_ag_rec.ctx, copied; VL_AG_CTX reads it) */
  void (*ctx_free)(void *ctx); /* releases what ctx refers to (Lua references); may be NULL */
  vl_tensor *leaf;            /* AccumulateGrad only: owning reference to the leaf */
  vl_hook *hooks;             /* tensor hooks of outputs (non-leaf tensors) */
  uint64_t seq;               /* creation order; among ready nodes, the newest runs first */
  const struct vl_nvtx_scope *scope; /* the layer it was recorded in, while NVTX ranges are on
                                        (runtime/trace/nvtx.h); NULL otherwise */
};

/* Autograd state of one tensor object (vl_tensor.autograd). Created on demand. */
typedef struct vl_autograd_meta {
  bool requires_grad;
  bool retains_grad;          /* a non-leaf that keeps .grad */
  vl_tensor *grad;            /* owning reference, or NULL */
  vl_node *grad_fn;           /* owning reference; NULL for leaves */
  int output_nr;
  vl_node *accumulator;       /* non-owning cache of a leaf's AccumulateGrad node */
  vl_hook *hooks;             /* leaf hooks (fn) and post-accumulate hooks (post) */
  char *name;                 /* optional, for messages (parameter names) */
  bool is_view;               /* a recorded view of a tensor that requires grad (in-place ops on
                                 it are refused rather than computing wrong gradients) */
} vl_autograd_meta;

/* The process's autograd state. The context holds it by pointer (vl_ctx()->autograd), as core
 * knows no concern's layout; vl_ag_state() returns it (the one instance, in node.c, grad mode on
 * from the start) and points the context at it on first use. */
typedef struct vl_autograd_state {
  bool grad_enabled;          /* autograd records (default on) */
  uint64_t node_seq;          /* node creation counter */
  int64_t live_nodes;         /* nodes not yet freed (a debug count) */
  int backward_depth;         /* backward runs in progress (hooks may nest them) */
} vl_autograd_state;
vl_autograd_state *vl_ag_state(void);

/* ---- grad mode ---- */
bool vl_grad_enabled(void);
void vl_set_grad_enabled(bool on);

/* ---- per-tensor state ---- */
bool vl_requires_grad(const vl_tensor *t);
/* Only floating tensors can require grad (VL_EDTYPE otherwise); only leaves can be switched off
 * (a non-leaf: VL_EINVAL "set requires_grad=false on a non-leaf: use detach()"). */
vl_status vl_set_requires_grad(vl_tensor *t, bool on);
bool vl_is_leaf(const vl_tensor *t);                 /* no grad_fn */
vl_tensor *vl_grad(const vl_tensor *t);              /* borrowed; NULL if none */
/* Replaces .grad (NULL clears it); shape/dtype/device must match t (checked). */
vl_status vl_set_grad(vl_tensor *t, vl_tensor *grad);
vl_status vl_retain_grad(vl_tensor *t);
vl_node *vl_grad_fn(const vl_tensor *t);             /* borrowed */
/* A new tensor sharing storage with t that requires no grad and has no grad_fn. */
vl_status vl_detach(vl_tensor *t, vl_tensor **out);
/* Detaches t in place: it becomes a leaf that does not require grad (its history is dropped). */
vl_status vl_detach_(vl_tensor *t);
/* Frees the autograd meta of a tensor object (vl_tensor_release calls it, through the hook
 * node.c installs with vl_tensor_set_meta_free_hook before it makes the first meta). */
void vl_autograd_meta_free(vl_tensor *t);
/* t:set_(src): makes the tensor object t a view of src's data (vl_tensor_set_), keeping t's
 * identity and autograd state (requires_grad, hooks; .grad is dropped when it no longer fits).
 * What Module:to() uses so that optimizers holding parameters stay valid. Refuses a t with a
 * grad_fn, and non-float data for a t that requires grad. A graph recorded before, still alive,
 * keeps its AccumulateGrad for the old data: its backward then fails naming both shapes rather
 * than store a gradient that does not fit (engine.c). */
vl_status vl_ag_set_(vl_tensor *t, vl_tensor *src);

/* ---- hooks ---- */
vl_status vl_register_hook(vl_tensor *t, vl_grad_hook_fn fn, void *ud, void (*ud_free)(void *), int *id);
vl_status vl_register_post_accumulate_hook(vl_tensor *t, vl_post_hook_fn fn, void *ud, void (*ud_free)(void *), int *id);
vl_status vl_remove_hook(vl_tensor *t, int id);

/* ---- recording an op (used by vl_ag_* and by the bindings for Lua-defined Functions) ---- */
/* Whether an op over these inputs must record (grad mode on and some input requires grad). */
bool vl_ag_needs(int n, vl_tensor *const *inputs);

/* One recorded op, declared in one place: its node's name and backward, its inputs (edges to
 * their producers), its outputs, the tensors its backward reads and a typed context struct with
 * the op's scalars (copied into the node). */
typedef struct vl_ag_rec {
  const char *name;            /* "MulBackward"; must outlive the node (static, or inside ctx) */
  vl_backward_fn backward;     /* NULL: no gradient flows to the inputs (fills) */
  int nin;
  vl_tensor *const *in;        /* NULL entries are absent optional operands: no edge, no gradient */
  int nout;                    /* 0 means 1 */
  vl_tensor *const *out;       /* fresh results, or a tensor written in place (its history is rebased
                                  onto the node); non-float ones stay out of the graph */
  vl_tensor *save[VL_NODE_MAX_SAVED]; /* for backward, in slot order; a NULL slot stays empty */
  const void *ctx;             /* ctx_size bytes copied into the node; see VL_AG_CTX */
  size_t ctx_size;
  /* Releases what a context refers to (not the copy itself). From the call on those resources
   * belong to the recording: ctx_free runs on the node's copy when the node dies, or on `ctx`
   * itself when vl_ag_record fails before copying it or records nothing. */
  void (*ctx_free)(void *ctx);
  bool view;                   /* outputs sharing in[0]'s storage are views (in-place ops on them are
                                  refused while they require grad) */
  bool always;                 /* record even when no input requires grad (the caller decided) */
} vl_ag_rec;

/* Records r when grad mode is on and an input requires grad (or r->always) and some output is
 * floating-point; otherwise does nothing. Saved tensors are kept with their storage version.
 * On failure nothing is recorded: the node and its saved tensors are released and the outputs'
 * autograd state is as it was. */
vl_status vl_ag_record(const vl_ag_rec *r);
#define VL_AG_RECORD(...) vl_ag_record(&(const vl_ag_rec){__VA_ARGS__})
/* Designated initialisers for a context struct c: .ctx = &c, .ctx_size = sizeof c. */
#define VL_AG_CTX_OF(c) .ctx = &(c), .ctx_size = sizeof(c)
/* The typed context of node n in its backward: const vl_conv2d_params *p = VL_AG_CTX(n, vl_conv2d_params). */
#define VL_AG_CTX(n, type) ((const type *)(n)->ctx)

/* Saved tensor i (borrowed; NULL for a slot left empty), failing with VL_EINVAL "<node>: a tensor
 * saved for backward was modified in place (version v1, now v2)" or "... a second time (the saved
 * tensors were already freed): use retain_graph=true ...". */
vl_status vl_node_saved(vl_node *n, int i, vl_tensor **out);
/* Saved tensors 0..k-1 into out[0..k) (all checked as vl_node_saved does). */
vl_status vl_node_saved_n(vl_node *n, int k, vl_tensor **out);
vl_node *vl_node_retain(vl_node *n);
void vl_node_release(vl_node *n);

/* Autograd nodes alive in this process (tests check that graphs are freed). */
int64_t vl_autograd_live_nodes(void);

/* ---- running ---- */
/* Backpropagates from roots. grads[i] may be NULL only for a one-element root (then ones). */
vl_status vl_backward(int n, vl_tensor *const *roots, vl_tensor *const *grads, bool retain_graph);
/* Gradients of outputs w.r.t. inputs without touching .grad (torch.autograd.grad); results[i] is
 * a new reference or NULL when an input is unreachable. */
vl_status vl_autograd_grad(int nout, vl_tensor *const *outputs, vl_tensor *const *grad_outputs, int nin,
                           vl_tensor *const *inputs, bool retain_graph, vl_tensor **results);

/* ---- helpers for backward formulas ---- */
/* Sums grad over broadcast dims so it has shape (ndim, size): the gradient of an expand. */
vl_status vl_sum_to_size(vl_tensor *grad, int ndim, const int64_t *size, vl_tensor **out);

#ifdef __cplusplus
}
#endif
#endif
