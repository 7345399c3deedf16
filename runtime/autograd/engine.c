/* runtime/autograd/engine.c: the engine that runs a recorded graph backwards (vl_backward,
 * vl_autograd_grad). Iterative throughout: an explicit DFS stack to count dependencies, a
 * max-heap of ready nodes (newest first, as PyTorch), so arbitrarily deep graphs are fine. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/autograd/autograd.h"
#include "runtime/autograd/internal.h"
#include "runtime/core/context.h"
#include "runtime/ops/ops.h"
#include "runtime/ops/ops_internal.h"
#include "runtime/trace/nvtx.h"

typedef struct eng_item {
  vl_node *n;
  int deps;         /* gradients still to arrive (one per incoming edge) */
  vl_tensor **buf;  /* n->nout summed gradients, owned */
  int cap_first;    /* autograd.grad: first input captured at this node, -1 if none */
} eng_item;

typedef struct engine {
  eng_item *items;
  size_t nitems, cap;
  size_t *map, mapcap;   /* open addressing: item index + 1, 0 = empty */
  size_t *heap, nheap, heapcap;
  bool retain, accumulate;
  int *cap_next, *cap_nr; /* autograd.grad captures, per input */
  vl_tensor **results;
} engine;

static size_t ptr_hash(const void *p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull); }

static bool eng_lookup(engine *e, vl_node *n, size_t *idx) {
  if (!e->mapcap) return false;
  for (size_t h = ptr_hash(n) & (e->mapcap - 1);; h = (h + 1) & (e->mapcap - 1)) {
    if (!e->map[h]) return false;
    if (e->items[e->map[h] - 1].n == n) {
      *idx = e->map[h] - 1;
      return true;
    }
  }
}

static vl_status eng_rehash(engine *e, size_t newcap) {
  size_t *m = calloc(newcap, sizeof *m);
  if (!m) return vl_fail(VL_EOOM, "backward: out of host memory");
  for (size_t i = 0; i < e->nitems; i++) {
    size_t h = ptr_hash(e->items[i].n) & (newcap - 1);
    while (m[h]) h = (h + 1) & (newcap - 1);
    m[h] = i + 1;
  }
  free(e->map);
  e->map = m;
  e->mapcap = newcap;
  return VL_OK;
}

/* The item of n, created when absent (*created says so). */
static vl_status eng_item_of(engine *e, vl_node *n, size_t *idx, bool *created) {
  *created = false;
  if (eng_lookup(e, n, idx)) return VL_OK;
  if ((e->nitems + 1) * 2 > e->mapcap) VL_TRY(eng_rehash(e, e->mapcap ? e->mapcap * 2 : 64));
  if (e->nitems == e->cap) {
    size_t nc = e->cap ? e->cap * 2 : 32;
    eng_item *ni = realloc(e->items, nc * sizeof *ni);
    if (!ni) return vl_fail(VL_EOOM, "backward: out of host memory");
    e->items = ni;
    e->cap = nc;
  }
  eng_item *it = &e->items[e->nitems];
  it->n = n;
  it->deps = 0;
  it->cap_first = -1;
  it->buf = calloc((size_t)(n->nout > 0 ? n->nout : 1), sizeof *it->buf);
  if (!it->buf) return vl_fail(VL_EOOM, "backward: out of host memory");
  size_t h = ptr_hash(n) & (e->mapcap - 1);
  while (e->map[h]) h = (h + 1) & (e->mapcap - 1);
  e->map[h] = e->nitems + 1;
  *idx = e->nitems++;
  *created = true;
  return VL_OK;
}

/* Max-heap on node creation order: among ready nodes the newest runs first. */
static bool heap_less(engine *e, size_t a, size_t b) { return e->items[a].n->seq < e->items[b].n->seq; }

static vl_status heap_push(engine *e, size_t idx) {
  if (e->nheap == e->heapcap) {
    size_t nc = e->heapcap ? e->heapcap * 2 : 32;
    size_t *nh = realloc(e->heap, nc * sizeof *nh);
    if (!nh) return vl_fail(VL_EOOM, "backward: out of host memory");
    e->heap = nh;
    e->heapcap = nc;
  }
  size_t i = e->nheap++;
  e->heap[i] = idx;
  while (i > 0 && heap_less(e, e->heap[(i - 1) / 2], e->heap[i])) {
    size_t p = (i - 1) / 2, t = e->heap[p];
    e->heap[p] = e->heap[i];
    e->heap[i] = t;
    i = p;
  }
  return VL_OK;
}

static size_t heap_pop(engine *e) {
  size_t top = e->heap[0];
  e->heap[0] = e->heap[--e->nheap];
  size_t i = 0;
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < e->nheap && heap_less(e, e->heap[m], e->heap[l])) m = l;
    if (r < e->nheap && heap_less(e, e->heap[m], e->heap[r])) m = r;
    if (m == i) break;
    size_t t = e->heap[m];
    e->heap[m] = e->heap[i];
    e->heap[i] = t;
    i = m;
  }
  return top;
}

static void eng_free(engine *e) {
  for (size_t i = 0; i < e->nitems; i++) {
    if (!e->items[i].buf) continue;
    for (int j = 0; j < e->items[i].n->nout; j++) vl_tensor_release(e->items[i].buf[j]);
    free(e->items[i].buf);
  }
  free(e->items);
  free(e->map);
  free(e->heap);
}

/* Whether nobody else can see t's memory, so that it may be updated in place or kept as .grad. */
static bool uniquely_owned(const vl_tensor *t) {
  return t->refcount == 1 && t->storage->refcount == 1 && vl_tensor_is_contiguous(t);
}

/* Adds g (owned) into item idx's buffer for output nr. */
static vl_status eng_add(engine *e, size_t idx, int nr, vl_tensor *g) {
  vl_tensor **slot = &e->items[idx].buf[nr];
  if (!*slot) {
    *slot = g;
    return VL_OK;
  }
  vl_status s;
  if (uniquely_owned(*slot)) {
    s = vl_binary_(VL_BIN_ADD, *slot, g, 1.0);
  } else {
    vl_tensor *r;
    s = vl_binary(VL_BIN_ADD, *slot, g, 1.0, &r);
    if (s == VL_OK) {
      vl_tensor_release(*slot);
      *slot = r;
    }
  }
  vl_tensor_release(g);
  return s;
}

/* Prefixes the message unless it already starts with the prefix: a hook that runs backward
 * again fails through every level of the nesting, and the cause must stay readable. */
static vl_status fail_prefix_once(vl_status s, const char *prefix) {
  if (strncmp(vl_errmsg(), prefix, strlen(prefix)) == 0) return s;
  return vl_fail_prefix(s, "%s", prefix);
}

static vl_status check_grad(const vl_node *producer, int j, const vl_node *to, int nr, const vl_tensor *g) {
  char s1[VL_DESC_LEN], s2[VL_DESC_LEN];
  if (to->out_ndim[nr] < 0) return VL_OK;
  if (!same_shape(g, to->out_ndim[nr], to->out_size[nr]) || g->dtype != to->out_dtype[nr])
    return vl_fail(VL_EINTERNAL, "%s: the gradient for input %d is %s %s but the input is %s %s", producer->name,
                   j + 1, vl_shape_str(g, s1, sizeof s1), vl_dtype_name(g->dtype),
                   vl_shape_fmt(to->out_ndim[nr], to->out_size[nr], s2, sizeof s2), vl_dtype_name(to->out_dtype[nr]));
  return VL_OK;
}

/* Tensor hooks over *g (output nr of a node, or a leaf when nr < 0): ordinary hooks in
 * registration order, then retain_grad's, which sees the final gradient. */
static vl_status run_hooks(const char *who, vl_hook *list, int nr, vl_tensor **g) {
  for (int pass = 0; pass < 2; pass++) {
    for (vl_hook *h = list, *next; h; h = next) {
      next = h->next;
      if (!h->fn || (nr >= 0 && h->output_nr != nr) || (h->fn == vl_ag_retain_hook) != (pass == 1)) continue;
      vl_tensor *rep = NULL;
      vl_status s = h->fn(h->ud, *g, &rep);
      if (s != VL_OK) {
        char prefix[128];
        snprintf(prefix, sizeof prefix, "%s hook: ", who);
        return fail_prefix_once(s, prefix);
      }
      if (!rep) continue;
      if (!same_shape(rep, (*g)->ndim, (*g)->size) || rep->dtype != (*g)->dtype) {
        char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
        vl_tensor_release(rep);
        return vl_fail(VL_EINVAL, "%s hook: the returned gradient %s does not match the gradient %s", who,
                       vl_tensor_desc(rep, d1, sizeof d1), vl_tensor_desc(*g, d2, sizeof d2));
      }
      vl_tensor_release(*g);
      *g = rep;
    }
  }
  return VL_OK;
}

static void capture(engine *e, size_t idx) {
  for (int c = e->items[idx].cap_first; c >= 0; c = e->cap_next[c]) {
    vl_tensor *g = e->items[idx].buf[e->cap_nr[c]];
    if (g && !e->results[c]) e->results[c] = vl_tensor_retain(g);
  }
}

static vl_status run_accumulate(engine *e, size_t idx) {
  vl_node *n = e->items[idx].n;
  vl_tensor *leaf = n->leaf;
  vl_autograd_meta *m = meta_of(leaf);
  if (!e->items[idx].buf[0] || !m) return VL_OK;
  /* The graph was recorded before leaf:set_() gave the leaf data of another shape, dtype or
   * device (set_ cannot refuse: an old loss the garbage collector has not yet freed keeps a graph
   * alive). The gradient describes the old data: storing it would leave a .grad that does not fit
   * the parameter, adding it to one of the new shape could broadcast silently. */
  const vl_tensor *g0 = e->items[idx].buf[0];
  bool fits = g0->ndim == leaf->ndim && g0->dtype == leaf->dtype &&
              vl_device_eq(g0->storage->device, leaf->storage->device);
  for (int i = 0; fits && i < leaf->ndim; i++) fits = g0->size[i] == leaf->size[i];
  if (!fits) {
    char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
    return vl_fail(VL_EINVAL,
                   "AccumulateGrad: the leaf was changed by set_ after this graph was recorded (gradient %s, leaf "
                   "now %s); run the forward again after set_",
                   vl_tensor_desc(g0, d1, sizeof d1), vl_tensor_desc(leaf, d2, sizeof d2));
  }
  VL_TRY(run_hooks("AccumulateGrad", m->hooks, -1, &e->items[idx].buf[0]));
  capture(e, idx);
  if (!e->accumulate) return VL_OK;
  vl_tensor *g = e->items[idx].buf[0];
  if (!m->grad) {
    if (uniquely_owned(g)) {
      m->grad = g;
      e->items[idx].buf[0] = NULL;
    } else {
      VL_TRY(vl_clone(g, &m->grad));
    }
  } else {
    vl_status s = vl_binary_(VL_BIN_ADD, m->grad, g, 1.0);
    if (s != VL_OK) return fail_prefix_once(s, "AccumulateGrad: ");
  }
  for (vl_hook *h = m->hooks, *next; h; h = next) {
    next = h->next;
    if (!h->post) continue;
    vl_status s = h->post(h->ud, leaf);
    if (s != VL_OK) return fail_prefix_once(s, "post-accumulate-grad hook: ");
  }
  return VL_OK;
}

static vl_status run_node(engine *e, size_t idx) {
  vl_node *n = e->items[idx].n;
  if (n->leaf) return run_accumulate(e, idx);
  bool any = false;
  for (int o = 0; o < n->nout; o++) {
    if (!e->items[idx].buf[o]) continue;
    any = true;
    VL_TRY(run_hooks(n->name, n->hooks, o, &e->items[idx].buf[o]));
  }
  capture(e, idx);
  vl_tensor **gin = calloc((size_t)(n->nin > 0 ? n->nin : 1), sizeof *gin);
  if (!gin) return vl_fail(VL_EOOM, "backward: out of host memory");
  vl_status s = VL_OK;
  if (any && n->backward) {
    s = n->backward(n, e->items[idx].buf, gin);
    if (s != VL_OK && strncmp(vl_errmsg(), n->name, strlen(n->name)) != 0) s = vl_fail_prefix(s, "%s: ", n->name);
  }
  if (!e->retain) {
    vl_ag_node_release_saved(n);
    n->saved_released = true;
  }
  /* The item's buffers are done with: free them now so peak memory follows the graph. */
  for (int o = 0; o < n->nout; o++) {
    vl_tensor_release(e->items[idx].buf[o]);
    e->items[idx].buf[o] = NULL;
  }
  for (int j = 0; j < n->nin; j++) {
    vl_node *c = n->next[j].node;
    if (!c) {
      vl_tensor_release(gin[j]);
      gin[j] = NULL;
      continue;
    }
    size_t ci;
    if (!eng_lookup(e, c, &ci)) {
      if (s == VL_OK) s = vl_fail(VL_EINTERNAL, "%s: an input's node is missing from the graph", n->name);
      continue;
    }
    if (s == VL_OK && gin[j]) {
      s = check_grad(n, j, c, n->next[j].input_nr, gin[j]);
      if (s == VL_OK) {
        s = eng_add(e, ci, n->next[j].input_nr, gin[j]);
        gin[j] = NULL;
      }
    }
    if (s == VL_OK && --e->items[ci].deps == 0) s = heap_push(e, ci);
  }
  for (int j = 0; j < n->nin; j++) vl_tensor_release(gin[j]);
  free(gin);
  return s;
}

static bool push_idx(size_t **stack, size_t *len, size_t *cap, size_t v) {
  if (*len == *cap) {
    size_t nc = *cap ? *cap * 2 : 64;
    size_t *ns = realloc(*stack, nc * sizeof *ns);
    if (!ns) return false;
    *stack = ns;
    *cap = nc;
  }
  (*stack)[(*len)++] = v;
  return true;
}

/* Counts dependencies over everything reachable from the roots (iterative DFS). */
static vl_status eng_build(engine *e, int nroots, const vl_edge *roots) {
  size_t *stack = NULL, len = 0, cap = 0;
  vl_status s = VL_OK;
  for (int r = 0; r < nroots && s == VL_OK; r++) {
    size_t idx;
    bool created;
    s = eng_item_of(e, roots[r].node, &idx, &created);
    if (s != VL_OK || !created) continue;
    if (!push_idx(&stack, &len, &cap, idx)) s = vl_fail(VL_EOOM, "backward: out of host memory");
    while (s == VL_OK && len) {
      vl_node *n = e->items[stack[--len]].n;
      for (int j = 0; j < n->nin; j++) {
        vl_node *c = n->next[j].node;
        if (!c) continue;
        s = eng_item_of(e, c, &idx, &created);
        if (s != VL_OK) break;
        e->items[idx].deps++;
        if (created && !push_idx(&stack, &len, &cap, idx)) {
          s = vl_fail(VL_EOOM, "backward: out of host memory");
          break;
        }
      }
    }
  }
  free(stack);
  return s;
}

/* Adds the roots' gradients (borrowed) and runs every node in dependency order. */
static vl_status eng_exec(engine *e, int nroots, const vl_edge *roots, vl_tensor *const *grads) {
  vl_status s = VL_OK;
  for (int r = 0; r < nroots && s == VL_OK; r++) {
    size_t idx;
    eng_lookup(e, roots[r].node, &idx);
    s = eng_add(e, idx, roots[r].input_nr, vl_tensor_retain(grads[r]));
  }
  for (size_t i = 0; i < e->nitems && s == VL_OK; i++)
    if (e->items[i].deps == 0) s = heap_push(e, i);
  if (!vl_nvtx_enabled()) {
    while (s == VL_OK && e->nheap) s = run_node(e, heap_pop(e));
    return s;
  }
  /* NVTX on: each node in a range of its name, inside the backward ranges of the layers it was
   * recorded in (runtime/trace/nvtx.h). */
  vl_nvtx_bw bw;
  memset(&bw, 0, sizeof bw);
  while (s == VL_OK && e->nheap) {
    size_t i = heap_pop(e);
    vl_nvtx_bw_node(&bw, e->items[i].n->scope, e->items[i].n->name);
    s = run_node(e, i);
    vl_nvtx_bw_node_done(&bw);
  }
  vl_nvtx_bw_end(&bw);
  return s;
}

/* Checks the roots and makes their edges and gradients (ones for one-element roots). */
static vl_status prepare_roots(const char *op, int n, vl_tensor *const *roots, vl_tensor *const *grads, vl_edge *edges,
                               vl_tensor **gs) {
  char d1[VL_DESC_LEN], d2[VL_DESC_LEN];
  for (int i = 0; i < n; i++) {
    vl_tensor *t = roots[i];
    if (!vl_requires_grad(t))
      return vl_fail(VL_EINVAL, "%s: element %d of tensors does not require grad and does not have a grad_fn (%s)", op,
                     i, vl_tensor_desc(t, d1, sizeof d1));
    vl_tensor *g = grads ? grads[i] : NULL;
    if (!g) {
      if (vl_tensor_numel(t) != 1)
        return vl_fail(VL_EINVAL, "%s: grad can be implicitly created only for one-element outputs (output %d is %s)",
                       op, i, vl_tensor_desc(t, d1, sizeof d1));
      VL_TRY(vl_ones(t->ndim, t->size, t->dtype, t->storage->device, &gs[i]));
    } else {
      if (!same_shape(g, t->ndim, t->size) || !vl_device_eq(g->storage->device, t->storage->device))
        return vl_fail(VL_ESHAPE, "%s: the gradient %s does not match output %d (%s)", op,
                       vl_tensor_desc(g, d1, sizeof d1), i, vl_tensor_desc(t, d2, sizeof d2));
      VL_TRY(vl_cast(g, t->dtype, &gs[i]));
    }
    VL_TRY(vl_ag_edge_of(t, &edges[i]));
  }
  return VL_OK;
}

/* Backward may run inside backward (a hook or a Function's backward calling it); one that keeps
 * re-entering its own graph would otherwise recurse until the C or Lua stack gives out. */
#define MAX_BACKWARD_DEPTH 32

static vl_status run_graph(const char *op, int n, vl_tensor *const *roots, vl_tensor *const *grads, bool retain,
                           int nin, vl_tensor *const *inputs, vl_tensor **results) {
  if (n <= 0) return vl_fail(VL_EINVAL, "%s: no outputs given", op);
  vl_autograd_state *ag = vl_ag_state();
  if (ag->backward_depth >= MAX_BACKWARD_DEPTH)
    return vl_fail(VL_EINVAL,
                   "%s: nested %d levels deep in backward: a hook or a Function's backward that runs backward (or "
                   "autograd.grad) on its own graph again recurses without end",
                   op, MAX_BACKWARD_DEPTH);
  vl_edge *edges = calloc((size_t)n + (size_t)nin, sizeof *edges);
  vl_tensor **gs = calloc((size_t)n, sizeof *gs);
  int *capn = calloc((size_t)nin * 2 + 1, sizeof *capn);
  engine e;
  memset(&e, 0, sizeof e);
  bool mode = ag->grad_enabled;
  vl_status s = edges && gs && capn ? VL_OK : vl_fail(VL_EOOM, "%s: out of host memory", op);
  if (s == VL_OK) s = prepare_roots(op, n, roots, grads, edges, gs);
  e.retain = retain;
  e.accumulate = inputs == NULL;
  e.cap_next = capn;
  e.cap_nr = capn + nin;
  e.results = results;
  for (int i = 0; i < nin && s == VL_OK; i++) {
    char d[VL_DESC_LEN];
    if (!vl_requires_grad(inputs[i]))
      s = vl_fail(VL_EINVAL, "%s: input %d does not require grad (%s)", op, i + 1,
                  vl_tensor_desc(inputs[i], d, sizeof d));
    else
      s = vl_ag_edge_of(inputs[i], &edges[n + i]);
  }
  ag->grad_enabled = false; /* backward formulas build no graph */
  ag->backward_depth++;
  if (s == VL_OK) s = eng_build(&e, n, edges);
  /* autograd.grad: an input's gradient is taken where it arrives (a node outside the graph
   * means the input is unreachable: its result stays NULL). */
  for (int i = 0; i < nin && s == VL_OK; i++) {
    size_t idx;
    e.cap_next[i] = -1;
    e.cap_nr[i] = edges[n + i].input_nr;
    if (!eng_lookup(&e, edges[n + i].node, &idx)) continue;
    e.cap_next[i] = e.items[idx].cap_first;
    e.items[idx].cap_first = i;
  }
  if (s == VL_OK) s = eng_exec(&e, n, edges, gs);
  ag->backward_depth--;
  ag->grad_enabled = mode;
  eng_free(&e);
  for (int i = 0; i < n + nin && edges; i++) vl_node_release(edges[i].node);
  for (int i = 0; i < n && gs; i++) vl_tensor_release(gs[i]);
  free(edges);
  free(gs);
  free(capn);
  return s;
}

vl_status vl_backward(int n, vl_tensor *const *roots, vl_tensor *const *grads, bool retain_graph) {
  return run_graph("backward", n, roots, grads, retain_graph, 0, NULL, NULL);
}

vl_status vl_autograd_grad(int nout, vl_tensor *const *outputs, vl_tensor *const *grad_outputs, int nin,
                           vl_tensor *const *inputs, bool retain_graph, vl_tensor **results) {
  vl_tensor **res = calloc((size_t)(nin > 0 ? nin : 1), sizeof *res);
  if (!res) return vl_fail(VL_EOOM, "autograd.grad: out of host memory");
  vl_status s = run_graph("autograd.grad", nout, outputs, grad_outputs, retain_graph, nin, inputs, res);
  for (int i = 0; i < nin; i++) {
    if (s == VL_OK) results[i] = res[i];
    else vl_tensor_release(res[i]);
  }
  free(res);
  return s;
}
