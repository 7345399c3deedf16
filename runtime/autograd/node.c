/* runtime/autograd/node.c: grad mode, per-tensor autograd state, hooks, and nodes: recording an
 * op (vl_ag_record), saved tensors, freeing a graph (see runtime/autograd/autograd.h for the
 * model; runtime/autograd/engine.c runs a graph backwards).
 *
 * Freeing is iterative (an explicit stack, never recursion over the graph), so a chain of 100k
 * ops does not overflow the C stack when the graph dies. */
#include "runtime/autograd/autograd.h"
#include "runtime/autograd/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/ops_internal.h"
#include "runtime/trace/nvtx.h"

/* ---- grad mode ---- */

/* The one instance: static, so that grad mode is on before anything runs and nothing can fail;
 * the context points at it from the first use, so that all state stays reachable from
 * vl_ctx() without core knowing autograd's layout. */
static vl_autograd_state g_state = {.grad_enabled = true};

vl_autograd_state *vl_ag_state(void) {
  vl_context *c = vl_ctx();
  if (!c->autograd) c->autograd = &g_state;
  return c->autograd;
}

bool vl_grad_enabled(void) { return vl_ag_state()->grad_enabled; }
void vl_set_grad_enabled(bool on) { vl_ag_state()->grad_enabled = on; }
int64_t vl_autograd_live_nodes(void) { return vl_ag_state()->live_nodes; }

/* ---- per-tensor state ---- */


static vl_status meta_get(vl_tensor *t, vl_autograd_meta **out) {
  if (!t->autograd) {
    /* Before the first meta exists: vl_tensor_release frees metas through this hook. */
    vl_tensor_set_meta_free_hook(vl_autograd_meta_free);
    t->autograd = calloc(1, sizeof(vl_autograd_meta));
    if (!t->autograd) return vl_fail(VL_EOOM, "autograd: out of host memory");
  }
  *out = meta_of(t);
  return VL_OK;
}

bool vl_requires_grad(const vl_tensor *t) {
  const vl_autograd_meta *m = t ? meta_of(t) : NULL;
  return m && (m->requires_grad || m->grad_fn);
}

bool vl_is_leaf(const vl_tensor *t) {
  const vl_autograd_meta *m = meta_of(t);
  return !m || !m->grad_fn;
}

vl_tensor *vl_grad(const vl_tensor *t) {
  const vl_autograd_meta *m = meta_of(t);
  return m ? m->grad : NULL;
}

vl_node *vl_grad_fn(const vl_tensor *t) {
  const vl_autograd_meta *m = meta_of(t);
  return m ? m->grad_fn : NULL;
}

vl_status vl_set_requires_grad(vl_tensor *t, bool on) {
  char d[VL_DESC_LEN];
  vl_autograd_meta *m = meta_of(t);
  if (m && m->grad_fn) {
    if (on) return VL_OK;
    return vl_fail(VL_EINVAL, "requires_grad_: set requires_grad=false on a non-leaf (%s): use detach()",
                   vl_tensor_desc(t, d, sizeof d));
  }
  if (on && !vl_dtype_is_float(t->dtype))
    return vl_fail(VL_EDTYPE, "requires_grad_: only floating-point tensors can require gradients (%s)",
                   vl_tensor_desc(t, d, sizeof d));
  if (!on && !m) return VL_OK;
  VL_TRY(meta_get(t, &m));
  m->requires_grad = on;
  return VL_OK;
}


vl_status vl_set_grad(vl_tensor *t, vl_tensor *grad) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  vl_autograd_meta *m = NULL;
  if (!grad) {
    m = meta_of(t);
    if (m && m->grad) {
      vl_tensor_release(m->grad);
      m->grad = NULL;
    }
    return VL_OK;
  }
  if (!same_shape(grad, t->ndim, t->size) || grad->dtype != t->dtype ||
      !vl_device_eq(grad->storage->device, t->storage->device))
    return vl_fail(VL_EINVAL, "grad: assigned gradient %s does not match the tensor %s (shape, dtype and device must)",
                   vl_tensor_desc(grad, d1, sizeof d1), vl_tensor_desc(t, d2, sizeof d2));
  VL_TRY(meta_get(t, &m));
  vl_tensor_retain(grad);
  vl_tensor_release(m->grad);
  m->grad = grad;
  return VL_OK;
}

/* A new tensor object over t's memory with no autograd state (what saved tensors and detach
 * hold: sharing the storage keeps the version counter shared). */
static vl_status alias_of(vl_tensor *t, vl_tensor **out) {
  vl_tensor *v = malloc(sizeof *v);
  if (!v) return vl_fail(VL_EOOM, "autograd: out of host memory");
  *v = *t;
  v->refcount = 1;
  v->autograd = NULL;
  v->storage->refcount++;
  *out = v;
  return VL_OK;
}

vl_status vl_detach(vl_tensor *t, vl_tensor **out) { return alias_of(t, out); }


/* ---- hooks ---- */

static void hook_free(vl_hook *h) {
  if (h->ud_free) h->ud_free(h->ud);
  free(h);
}

static void hooks_free(vl_hook *h) {
  while (h) {
    vl_hook *next = h->next;
    hook_free(h);
    h = next;
  }
}

static int hooks_max_id(const vl_hook *h) {
  int m = 0;
  for (; h; h = h->next)
    if (h->id > m) m = h->id;
  return m;
}

static void hook_append(vl_hook **list, vl_hook *h) {
  while (*list) list = &(*list)->next;
  *list = h;
}

/* Ids are unique per tensor (over its leaf hooks and its grad_fn's hooks). */
static int next_hook_id(const vl_tensor *t) {
  const vl_autograd_meta *m = meta_of(t);
  int a = m ? hooks_max_id(m->hooks) : 0, b = m && m->grad_fn ? hooks_max_id(m->grad_fn->hooks) : 0;
  return (a > b ? a : b) + 1;
}

/* Fills h in and puts it on t's list (its grad_fn's for a non-leaf); cannot fail. */
static void hook_attach(vl_tensor *t, vl_hook *h, vl_grad_hook_fn fn, vl_post_hook_fn post, void *ud,
                        void (*ud_free)(void *)) {
  vl_autograd_meta *m = meta_of(t);
  h->id = next_hook_id(t);
  h->fn = fn;
  h->post = post;
  h->ud = ud;
  h->ud_free = ud_free;
  if (m->grad_fn) {
    h->output_nr = m->output_nr;
    hook_append(&m->grad_fn->hooks, h);
  } else {
    hook_append(&m->hooks, h);
  }
}

static vl_status add_hook(vl_tensor *t, vl_grad_hook_fn fn, vl_post_hook_fn post, void *ud, void (*ud_free)(void *),
                          int *id) {
  char d[VL_DESC_LEN];
  const char *what = fn ? "register_hook" : "register_post_accumulate_grad_hook";
  if (!vl_requires_grad(t))
    return vl_fail(VL_EINVAL, "%s: cannot register a hook on a tensor that does not require grad (%s)", what,
                   vl_tensor_desc(t, d, sizeof d));
  if (post && meta_of(t)->grad_fn)
    return vl_fail(VL_EINVAL, "%s: post-accumulate-grad hooks can only be registered on leaf tensors (%s)", what,
                   vl_tensor_desc(t, d, sizeof d));
  vl_hook *h = calloc(1, sizeof *h);
  if (!h) return vl_fail(VL_EOOM, "%s: out of host memory", what);
  hook_attach(t, h, fn, post, ud, ud_free);
  if (id) *id = h->id;
  return VL_OK;
}

vl_status vl_register_hook(vl_tensor *t, vl_grad_hook_fn fn, void *ud, void (*ud_free)(void *), int *id) {
  return add_hook(t, fn, NULL, ud, ud_free, id);
}

vl_status vl_register_post_accumulate_hook(vl_tensor *t, vl_post_hook_fn fn, void *ud, void (*ud_free)(void *),
                                           int *id) {
  return add_hook(t, NULL, fn, ud, ud_free, id);
}

static bool remove_from(vl_hook **list, bool (*match)(const vl_hook *, const void *), const void *key) {
  for (; *list; list = &(*list)->next) {
    if (match(*list, key)) {
      vl_hook *h = *list;
      *list = h->next;
      hook_free(h);
      return true;
    }
  }
  return false;
}

static bool match_id(const vl_hook *h, const void *key) { return h->id == *(const int *)key; }

vl_status vl_remove_hook(vl_tensor *t, int id) {
  vl_autograd_meta *m = meta_of(t);
  /* Removing twice, or after the graph was rebuilt, is harmless (a handle may outlive a graph). */
  if (!m) return VL_OK;
  if (!remove_from(&m->hooks, match_id, &id) && m->grad_fn) remove_from(&m->grad_fn->hooks, match_id, &id);
  return VL_OK;
}

/* retain_grad is a hook on the producing node that stores the gradient into the tensor's .grad.
 * The hook does not own the tensor; the tensor removes it when it dies. */
vl_status vl_ag_retain_hook(void *ud, vl_tensor *grad, vl_tensor **replace) {
  vl_tensor *t = (vl_tensor *)ud;
  vl_autograd_meta *m = meta_of(t);
  (void)replace;
  if (!m->grad) {
    vl_tensor *c;
    VL_TRY(vl_clone(grad, &c));
    m->grad = c;
    return VL_OK;
  }
  return vl_binary_(VL_BIN_ADD, m->grad, grad, 1.0);
}

static bool match_retain(const vl_hook *h, const void *key) { return h->fn == vl_ag_retain_hook && h->ud == key; }

vl_status vl_retain_grad(vl_tensor *t) {
  char d[VL_DESC_LEN];
  if (!vl_requires_grad(t))
    return vl_fail(VL_EINVAL, "retain_grad: the tensor does not require grad (%s)", vl_tensor_desc(t, d, sizeof d));
  vl_autograd_meta *m = meta_of(t);
  if (!m->grad_fn || m->retains_grad) return VL_OK; /* leaves keep .grad anyway */
  VL_TRY(add_hook(t, vl_ag_retain_hook, NULL, t, NULL, NULL));
  m->retains_grad = true;
  return VL_OK;
}

vl_status vl_detach_(vl_tensor *t) {
  vl_autograd_meta *m = meta_of(t);
  if (!m) return VL_OK;
  char d[VL_DESC_LEN];
  if (m->is_view && m->grad_fn)
    return vl_fail(VL_EUNSUPPORTED, "detach_: cannot detach a view in place (%s); use detach()",
                   vl_tensor_desc(t, d, sizeof d));
  if (m->retains_grad && m->grad_fn) remove_from(&m->grad_fn->hooks, match_retain, t);
  m->retains_grad = false;
  vl_node_release(m->grad_fn);
  m->grad_fn = NULL;
  m->requires_grad = false;
  return VL_OK;
}

vl_status vl_ag_set_(vl_tensor *t, vl_tensor *src) {
  if (t == src) return VL_OK;
  vl_autograd_meta *m = meta_of(t);
  if (m && m->grad_fn)
    return vl_fail(VL_EINVAL, "set_: the tensor is the result of a recorded op (has a grad_fn); detach it first");
  if (m && m->requires_grad && !vl_dtype_is_float(src->dtype))
    return vl_fail(VL_EDTYPE, "set_: a tensor that requires grad cannot take %s data", vl_dtype_name(src->dtype));
  VL_TRY(vl_tensor_set_(t, src));
  /* A cached gradient accumulator describes the old shape and dtype: graphs recorded from now on
   * get a new one (graphs still alive keep theirs, and their backward refuses a gradient that
   * no longer fits: run_accumulate in runtime/autograd/engine.c). */
  if (m) m->accumulator = NULL;
  /* A gradient of another shape, dtype or device no longer fits the data: drop it. */
  if (m && m->grad) {
    vl_tensor *g = m->grad;
    bool fits = g->ndim == t->ndim && g->dtype == t->dtype && vl_device_eq(g->storage->device, t->storage->device);
    for (int i = 0; fits && i < t->ndim; i++) fits = g->size[i] == t->size[i];
    if (!fits) {
      m->grad = NULL;
      vl_tensor_release(g);
    }
  }
  return VL_OK;
}

void vl_autograd_meta_free(vl_tensor *t) {
  vl_autograd_meta *m = meta_of(t);
  if (!m) return;
  t->autograd = NULL;
  if (m->retains_grad && m->grad_fn) remove_from(&m->grad_fn->hooks, match_retain, t);
  vl_tensor_release(m->grad);
  hooks_free(m->hooks);
  vl_node_release(m->grad_fn);
  free(m->name);
  free(m);
}

/* ---- nodes ---- */

vl_node *vl_node_retain(vl_node *n) {
  if (n) n->refcount++;
  return n;
}

/* The context is copied behind the node in the same allocation (one malloc per recorded op). */
#define CTX_ALIGN 16
static size_t ctx_offset(void) { return (sizeof(vl_node) + CTX_ALIGN - 1) / CTX_ALIGN * CTX_ALIGN; }

static vl_status node_alloc(const char *name, vl_backward_fn fn, int nin, int nout, const void *ctx, size_t ctx_size,
                            vl_node **out) {
  vl_node *n = calloc(1, ctx_offset() + ctx_size);
  if (!n) return vl_fail(VL_EOOM, "%s: out of host memory", name);
  n->refcount = 1;
  n->name = name;
  n->backward = fn;
  n->nin = nin;
  n->nout = nout;
  n->next = calloc((size_t)(nin > 0 ? nin : 1), sizeof *n->next);
  n->out_size = calloc((size_t)(nout > 0 ? nout : 1), sizeof *n->out_size);
  n->out_ndim = calloc((size_t)(nout > 0 ? nout : 1), sizeof *n->out_ndim);
  n->out_dtype = calloc((size_t)(nout > 0 ? nout : 1), sizeof *n->out_dtype);
  if (!n->next || !n->out_size || !n->out_ndim || !n->out_dtype) {
    free(n->next);
    free(n->out_size);
    free(n->out_ndim);
    free(n->out_dtype);
    free(n);
    return vl_fail(VL_EOOM, "%s: out of host memory", name);
  }
  if (ctx_size) {
    n->ctx = (char *)n + ctx_offset();
    if (ctx) memcpy(n->ctx, ctx, ctx_size);
  }
  for (int i = 0; i < nout; i++) n->out_ndim[i] = -1; /* no output there (yet) */
  n->seq = vl_ag_state()->node_seq++;
  n->scope = vl_nvtx_current_scope();
  vl_ag_state()->live_nodes++;
  *out = n;
  return VL_OK;
}

static void out_meta_from(vl_node *n, int i, const vl_tensor *t) {
  n->out_ndim[i] = t->ndim;
  memcpy(n->out_size[i], t->size, sizeof(int64_t) * (size_t)t->ndim);
  n->out_dtype[i] = t->dtype;
  n->out_device = t->storage->device;
}

/* The leaf's AccumulateGrad node (cached, non-owning, in the leaf's meta). New reference. */
static vl_status accumulator_of(vl_tensor *leaf, vl_node **out) {
  vl_autograd_meta *m = meta_of(leaf);
  if (m->accumulator) {
    *out = vl_node_retain(m->accumulator);
    return VL_OK;
  }
  vl_node *n;
  VL_TRY(node_alloc("AccumulateGrad", NULL, 0, 1, NULL, 0, &n));
  out_meta_from(n, 0, leaf);
  n->leaf = vl_tensor_retain(leaf);
  m->accumulator = n;
  *out = n;
  return VL_OK;
}

/* The edge a gradient w.r.t. t flows along (node NULL when t needs none). */
vl_status vl_ag_edge_of(vl_tensor *t, vl_edge *e) {
  e->node = NULL;
  e->input_nr = 0;
  if (!t || !vl_requires_grad(t)) return VL_OK;
  vl_autograd_meta *m = meta_of(t);
  if (m->grad_fn) {
    e->node = vl_node_retain(m->grad_fn);
    e->input_nr = m->output_nr;
    return VL_OK;
  }
  return accumulator_of(t, &e->node);
}

bool vl_ag_needs(int n, vl_tensor *const *inputs) {
  if (!vl_ag_state()->grad_enabled) return false;
  for (int i = 0; i < n; i++)
    if (inputs[i] && vl_requires_grad(inputs[i])) return true;
  return false;
}

/* Makes the outputs results of n in two passes: everything that can fail (autograd state of
 * the outputs, the hook a retained grad moves to) is allocated first, so that a failure leaves
 * every output as it was. */
static vl_status set_outputs(vl_node *n, int nout, vl_tensor *const *outputs) {
  vl_hook *moved[64] = {0}, **mv = nout <= 64 ? moved : calloc((size_t)nout, sizeof *mv);
  if (!mv) return vl_fail(VL_EOOM, "%s: out of host memory", n->name);
  vl_status s = VL_OK;
  for (int i = 0; i < nout && s == VL_OK; i++) {
    vl_tensor *t = outputs[i];
    vl_autograd_meta *m = NULL;
    if (!t || !vl_dtype_is_float(t->dtype)) continue; /* not differentiable: stays out of the graph */
    s = meta_get(t, &m);
    if (s == VL_OK && m->grad_fn && m->retains_grad && !(mv[i] = calloc(1, sizeof(vl_hook))))
      s = vl_fail(VL_EOOM, "%s: out of host memory", n->name);
  }
  for (int i = 0; i < nout && s == VL_OK; i++) {
    vl_tensor *t = outputs[i];
    if (!t || !vl_dtype_is_float(t->dtype)) continue;
    vl_autograd_meta *m = meta_of(t);
    out_meta_from(n, i, t);
    vl_node *old = m->grad_fn;
    m->grad_fn = vl_node_retain(n);
    m->output_nr = i;
    m->requires_grad = true;
    /* An in-place op rebases t's history onto n: a retained grad moves with it. */
    if (mv[i]) {
      remove_from(&old->hooks, match_retain, t);
      hook_attach(t, mv[i], vl_ag_retain_hook, NULL, t, NULL);
      mv[i] = NULL;
    }
    vl_node_release(old);
  }
  for (int i = 0; i < nout; i++) free(mv[i]);
  if (mv != moved) free(mv);
  return s;
}

static void free_ctx_of(const vl_ag_rec *r) {
  if (r->ctx_free && r->ctx) r->ctx_free((void *)r->ctx);
}

vl_status vl_ag_record(const vl_ag_rec *r) {
  int nout = r->nout > 0 ? r->nout : 1, nsave = 0;
  bool any_float = false;
  for (int i = 0; i < nout; i++) any_float = any_float || (r->out[i] && vl_dtype_is_float(r->out[i]->dtype));
  if (!any_float || !(r->always ? vl_ag_state()->grad_enabled : vl_ag_needs(r->nin, r->in))) {
    free_ctx_of(r);
    return VL_OK;
  }
  for (int i = 0; i < VL_NODE_MAX_SAVED; i++)
    if (r->save[i]) nsave = i + 1;
  vl_node *n;
  vl_status s = node_alloc(r->name, r->backward, r->nin, nout, r->ctx, r->ctx_size, &n);
  if (s != VL_OK) {
    free_ctx_of(r);
    return s;
  }
  n->ctx_free = r->ctx_free;
  for (int i = 0; i < r->nin && s == VL_OK; i++) s = vl_ag_edge_of(r->in[i], &n->next[i]);
  /* Saved tensors are aliases without autograd state: that breaks the cycle node -> saved
   * output -> grad_fn -> node. The version says whether they were modified in place since. */
  for (int i = 0; i < nsave && s == VL_OK; i++) {
    vl_tensor *t = r->save[i];
    if (t) s = alias_of(t, &n->saved[i]);
    n->saved_version[i] = t ? t->storage->version : 0;
    if (s == VL_OK) n->nsaved = i + 1;
  }
  if (s == VL_OK) s = set_outputs(n, nout, r->out);
  if (s == VL_OK && r->view && r->nin > 0 && r->in[0])
    for (int i = 0; i < nout; i++)
      if (r->out[i] && vl_dtype_is_float(r->out[i]->dtype) && r->out[i]->storage == r->in[0]->storage)
        meta_of(r->out[i])->is_view = true;
  vl_node_release(n); /* the outputs hold it now (or, on failure, nothing does) */
  return s;
}

vl_status vl_node_saved(vl_node *n, int i, vl_tensor **out) {
  if (i < 0 || i >= VL_NODE_MAX_SAVED) return vl_fail(VL_EINTERNAL, "%s: no saved tensor %d", n->name, i);
  if (i >= n->nsaved) { /* nothing was saved there (an optional operand): nothing was freed either */
    *out = NULL;
    return VL_OK;
  }
  if (n->saved_released)
    return vl_fail(VL_EINVAL,
                   "%s: trying to backward through the graph a second time (the saved tensors were already "
                   "freed): use retain_graph=true in the first backward",
                   n->name);
  vl_tensor *t = n->saved[i];
  if (t && t->storage->version != n->saved_version[i])
    return vl_fail(VL_EINVAL,
                   "%s: a tensor saved for backward was modified in place (version %u, now %u); "
                   "use an out-of-place op or clone() it first",
                   n->name, (unsigned)n->saved_version[i], (unsigned)t->storage->version);
  *out = t;
  return VL_OK;
}

vl_status vl_node_saved_n(vl_node *n, int k, vl_tensor **out) {
  vl_tensor *t[VL_NODE_MAX_SAVED];
  if (k > VL_NODE_MAX_SAVED) return vl_fail(VL_EINTERNAL, "%s: no saved tensor %d", n->name, k - 1);
  for (int i = 0; i < k; i++) VL_TRY(vl_node_saved(n, i, &t[i]));
  memcpy(out, t, sizeof *t * (size_t)k);
  return VL_OK;
}

void vl_ag_node_release_saved(vl_node *n) {
  for (int i = 0; i < n->nsaved; i++) {
    vl_tensor_release(n->saved[i]);
    n->saved[i] = NULL;
  }
}

/* Frees n (refcount already 0) and pushes the producers whose count drops to 0 onto *stack. */
static void node_destroy(vl_node *n, vl_node ***stack, size_t *len, size_t *cap) {
  for (int i = 0; i < n->nin; i++) {
    vl_node *c = n->next[i].node;
    if (!c || --c->refcount > 0) continue;
    if (*len == *cap) {
      size_t nc = *cap ? *cap * 2 : 64;
      vl_node **ns = realloc(*stack, nc * sizeof *ns);
      if (!ns) {
        /* No memory for the explicit stack: fall back to recursion for this one. */
        vl_node **s2 = NULL;
        size_t l2 = 0, c2 = 0;
        node_destroy(c, &s2, &l2, &c2);
        while (l2) node_destroy(s2[--l2], &s2, &l2, &c2);
        free(s2);
        continue;
      }
      *stack = ns;
      *cap = nc;
    }
    (*stack)[(*len)++] = c;
  }
  vl_ag_node_release_saved(n);
  if (n->ctx_free) n->ctx_free(n->ctx);
  hooks_free(n->hooks);
  if (n->leaf) {
    vl_autograd_meta *m = meta_of(n->leaf);
    if (m && m->accumulator == n) m->accumulator = NULL;
    vl_tensor_release(n->leaf);
  }
  free(n->next);
  free(n->out_size);
  free(n->out_ndim);
  free(n->out_dtype);
  free(n);
  vl_ag_state()->live_nodes--;
}

void vl_node_release(vl_node *n) {
  if (!n || --n->refcount > 0) return;
  vl_node **stack = NULL;
  size_t len = 0, cap = 0;
  node_destroy(n, &stack, &len, &cap);
  while (len) node_destroy(stack[--len], &stack, &len, &cap);
  free(stack);
}

/* ---- helpers for backward formulas ---- */

vl_status vl_sum_to_size(vl_tensor *grad, int ndim, const int64_t *size, vl_tensor **out) {
  if (same_shape(grad, ndim, size)) {
    *out = vl_tensor_retain(grad);
    return VL_OK;
  }
  char s1[VL_DESC_LEN], s2[VL_DESC_LEN];
  int lead = grad->ndim - ndim;
  if (lead < 0) goto bad;
  int dims[VL_MAX_DIMS], nd = 0;
  for (int i = 0; i < grad->ndim; i++) {
    if (i < lead) {
      dims[nd++] = i;
    } else if (size[i - lead] != grad->size[i]) {
      if (size[i - lead] != 1) goto bad;
      dims[nd++] = i;
    }
  }
  vl_tensor *r, *v;
  if (nd == 0) return vl_reshape(grad, ndim, size, out); /* only leading size-1 dims */
  VL_TRY(vl_reduce(VL_RED_SUM, grad, nd, dims, false, 0, &r, NULL));
  vl_status s = vl_view(r, ndim, size, &v);
  vl_tensor_release(r);
  if (s == VL_OK) *out = v;
  return s;
bad:
  return vl_fail(VL_ESHAPE, "sum_to_size: a gradient of shape %s cannot be summed to shape %s",
                 vl_shape_str(grad, s1, sizeof s1), vl_shape_fmt(ndim, size, s2, sizeof s2));
}


