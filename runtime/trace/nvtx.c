/* runtime/trace/nvtx.c: NVTX ranges of layers, backward and collectives (nvtx.h). The state
 * hangs off the context (vl_ctx()->nvtx), made on first use and kept for the process: scopes
 * must outlive every node that points at them. */
#define _POSIX_C_SOURCE 200809L
#include "runtime/trace/nvtx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"

#ifdef VL_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>
#endif

/* A bound on interned scopes: a script that makes new modules every step (each a new child)
 * stops getting backward scopes past it instead of growing without end. */
#define MAX_SCOPES 65536
#define LABEL_MAX 120

struct vl_nvtx_scope {
  const vl_nvtx_scope *parent;
  vl_nvtx_scope *child, *sibling; /* the children, for interning */
  char fwd[LABEL_MAX];            /* "conv1: Conv2d" */
  char bwd[LABEL_MAX + 10];       /* "conv1: Conv2d backward" */
#ifdef VL_HAVE_CUDA
  nvtxStringHandle_t hfwd, hbwd; /* registered with the tool (NULL without one) */
#endif
};

typedef struct vl_nvtx {
  bool enabled;
  const vl_nvtx_scope *current;
  vl_nvtx_scope *roots; /* children of "no scope" */
  int nscopes;
  uint64_t pushes, pops;
  int depth;
#ifdef VL_HAVE_CUDA
  nvtxDomainHandle_t domain;
#endif
} vl_nvtx;

static vl_nvtx *state(bool create) {
  vl_context *c = vl_ctx();
  if (!c->nvtx && create) {
    vl_nvtx *s = calloc(1, sizeof *s);
    if (!s) return NULL;
#ifdef VL_HAVE_CUDA
    s->domain = nvtxDomainCreateA("v100lua");
#endif
    c->nvtx = s;
  }
  return c->nvtx;
}

bool vl_nvtx_available(void) {
#ifdef VL_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

void vl_nvtx_enable(bool on) {
  vl_nvtx *s = state(on);
  if (s) s->enabled = on;
}

bool vl_nvtx_enabled(void) {
  vl_nvtx *s = vl_ctx()->nvtx;
  return s && s->enabled;
}

void vl_nvtx_enable_from_env(void) {
  const char *v = getenv("V100LUA_NVTX");
  if (!v || !*v || !strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "false")) return;
  vl_nvtx_enable(true);
}

#ifdef VL_HAVE_CUDA
static void emit_push(vl_nvtx *s, const char *msg, nvtxStringHandle_t h) {
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  if (h) {
    a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
    a.message.registered = h;
  } else {
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = msg;
  }
  nvtxDomainRangePushEx(s->domain, &a);
}
#define EMIT_PUSH(s, msg, h) emit_push(s, msg, h)
#define EMIT_POP(s) nvtxDomainRangePop((s)->domain)
#else
#define EMIT_PUSH(s, msg, h) ((void)(s), (void)(msg))
#define EMIT_POP(s) ((void)(s))
#endif

static void push_range(vl_nvtx *s, const char *msg, const vl_nvtx_scope *sc, bool bwd) {
#ifdef VL_HAVE_CUDA
  EMIT_PUSH(s, msg, sc ? (bwd ? sc->hbwd : sc->hfwd) : NULL);
#else
  (void)sc, (void)bwd;
  EMIT_PUSH(s, msg, NULL);
#endif
  s->pushes++;
  s->depth++;
}

static void pop_range(vl_nvtx *s) {
  if (s->depth <= 0) return;
  EMIT_POP(s);
  s->pops++;
  s->depth--;
}

void vl_nvtx_push(const char *msg) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (s && s->enabled) push_range(s, msg ? msg : "", NULL, false);
}

/* Pops even when turned off meanwhile: a range opened while on is closed. */
void vl_nvtx_pop(void) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (s) pop_range(s);
}

void vl_nvtx_mark(const char *msg) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (!s || !s->enabled) return;
#ifdef VL_HAVE_CUDA
  nvtxEventAttributes_t a;
  memset(&a, 0, sizeof a);
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = msg ? msg : "";
  nvtxDomainMarkEx(s->domain, &a);
#else
  (void)msg;
#endif
}

/* The child of parent labelled `label`, made when absent (NULL past MAX_SCOPES or without memory). */
static vl_nvtx_scope *intern(vl_nvtx *s, const vl_nvtx_scope *parent, const char *label) {
  vl_nvtx_scope **head = parent ? &((vl_nvtx_scope *)parent)->child : &s->roots;
  for (vl_nvtx_scope *c = *head; c; c = c->sibling)
    if (!strncmp(c->fwd, label, LABEL_MAX - 1) && strlen(label) < LABEL_MAX) return c;
  if (s->nscopes >= MAX_SCOPES) return NULL;
  vl_nvtx_scope *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->parent = parent;
  snprintf(c->fwd, sizeof c->fwd, "%s", label);
  snprintf(c->bwd, sizeof c->bwd, "%s backward", c->fwd);
#ifdef VL_HAVE_CUDA
  c->hfwd = nvtxDomainRegisterStringA(s->domain, c->fwd);
  c->hbwd = nvtxDomainRegisterStringA(s->domain, c->bwd);
#endif
  c->sibling = *head;
  *head = c;
  s->nscopes++;
  return c;
}

int vl_nvtx_scope_enter(const char *label) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (!s || !s->enabled) return 0;
  if (!label) label = "";
  /* Past the bound (or without memory) the range is still pushed; the nodes recorded inside just
   * keep the enclosing scope. */
  const vl_nvtx_scope *sc = intern(s, s->current, label);
  push_range(s, sc ? sc->fwd : label, sc, false);
  if (!sc) return 1;
  s->current = sc;
  return 2;
}

void vl_nvtx_scope_leave(int token) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (!s || token <= 0) return;
  if (token == 2 && s->current) s->current = s->current->parent;
  pop_range(s);
}

const vl_nvtx_scope *vl_nvtx_current_scope(void) {
  vl_nvtx *s = vl_ctx()->nvtx;
  return s && s->enabled ? s->current : NULL;
}

/* ---- backward ---- */

static void bw_close_node(vl_nvtx *s, vl_nvtx_bw *bw) {
  if (bw->node_open) {
    pop_range(s);
    bw->node_open = false;
  }
}

void vl_nvtx_bw_node(vl_nvtx_bw *bw, const vl_nvtx_scope *scope, const char *op) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (!s || !s->enabled) return;
  bw_close_node(s, bw);
  /* The scope's chain, root first. */
  const vl_nvtx_scope *chain[VL_NVTX_MAX_DEPTH];
  int n = 0;
  for (const vl_nvtx_scope *c = scope; c; c = c->parent) n++;
  int skip = n > VL_NVTX_MAX_DEPTH ? n - VL_NVTX_MAX_DEPTH : 0; /* absurd depths keep the innermost */
  int len = n - skip, i = n;
  for (const vl_nvtx_scope *c = scope; c; c = c->parent) {
    i--;
    if (i - skip >= 0) chain[i - skip] = c;
  }
  int common = 0;
  while (common < bw->depth && common < len && bw->open[common] == chain[common]) common++;
  while (bw->depth > common) {
    pop_range(s);
    bw->depth--;
  }
  for (int k = common; k < len; k++) {
    push_range(s, chain[k]->bwd, chain[k], true);
    bw->open[bw->depth++] = chain[k];
  }
  push_range(s, op ? op : "", NULL, false);
  bw->node_open = true;
}

void vl_nvtx_bw_node_done(vl_nvtx_bw *bw) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (s) bw_close_node(s, bw);
}

void vl_nvtx_bw_end(vl_nvtx_bw *bw) {
  vl_nvtx *s = vl_ctx()->nvtx;
  if (!s) return;
  bw_close_node(s, bw);
  while (bw->depth > 0) {
    pop_range(s);
    bw->depth--;
  }
}

void vl_nvtx_get_stats(vl_nvtx_stats *out) {
  vl_nvtx *s = vl_ctx()->nvtx;
  memset(out, 0, sizeof *out);
  if (!s) return;
  out->pushes = s->pushes;
  out->pops = s->pops;
  out->depth = s->depth;
  out->scopes = s->nscopes;
}
