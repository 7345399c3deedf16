/* runtime/core/graph.c: CUDA graph capture and replay of whole steps (design in graph.h).
 *
 * The capture hooks (vl_graph_capturing and the vl_graph_check_* functions) are always compiled:
 * without CUDA nothing ever captures, so they reduce to "not capturing". */
#define _POSIX_C_SOURCE 200809L
#include "runtime/core/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/context.h"
#include "runtime/core/cuda.h"

/* The one capture in progress (captures are one at a time and single-threaded, as the
 * context is). */
static vl_graph *capturing;

vl_graph *vl_graph_capturing(void) { return capturing; }

#ifdef VL_HAVE_CUDA

#include <cuda_runtime.h>

#include "runtime/core/cuda_check.h"

struct vl_graph {
  int dev;
  void *side;                  /* cudaStream_t the step runs on */
  void *outer;                 /* the caller's current stream while entered */
  bool entered;
  vl_alloc *pool;
  int pool_id;                 /* private pool of the capture; 0 once released */
  vl_block *rng_block;         /* device {seed, base offset} the captured RNG kernels read */
  uint64_t rng_host[2];        /* staging for the refresh before each replay */
  uint64_t rng_groups;         /* counters one replay draws */
  cudaGraphExec_t exec;
  size_t nodes;
  char refusal[512];           /* first refused operation of the capture, "" if none */
};

static vl_status sync_streams(int dev, void *waiter, void *producer) {
  void *ev = NULL;
  VL_TRY(vl_event_create(dev, false, &ev));
  vl_status s = vl_event_record(dev, ev, producer);
  if (s == VL_OK) s = vl_stream_wait_event(dev, waiter, ev);
  vl_status d = vl_event_destroy(dev, ev); /* destroying a waited-on event is legal */
  return s != VL_OK ? s : d;
}

vl_status vl_graph_create(int dev, vl_graph **out) {
  if (!out) return vl_fail(VL_EINVAL, "graph: NULL output");
  if (dev < 0 || dev >= vl_cuda_device_count())
    return vl_fail(VL_EDEVICE, "graph: no CUDA device %d (%d present)", dev, vl_cuda_device_count());
  vl_graph *g = calloc(1, sizeof *g);
  if (!g) return vl_fail(VL_EOOM, "graph: out of host memory");
  g->dev = dev;
  vl_status s = vl_cuda_alloc(dev, &g->pool);
  if (s == VL_OK) s = vl_stream_create(dev, 0, &g->side);
  if (s == VL_OK) s = vl_alloc_private_create(g->pool, &g->pool_id);
  if (s == VL_OK) s = vl_alloc_malloc(g->pool, sizeof g->rng_host, g->side, &g->rng_block);
  if (s != VL_OK) {
    vl_graph_destroy(g);
    return vl_fail_prefix(s, "graph: ");
  }
  *out = g;
  return VL_OK;
}

vl_status vl_graph_enter(vl_graph *g) {
  if (!g) return vl_fail(VL_EINVAL, "graph: NULL graph");
  if (g->entered) return vl_fail(VL_EINVAL, "graph: already running on its side stream");
  void *outer = NULL;
  VL_TRY(vl_cuda_current_stream(g->dev, &outer));
  /* What the caller queued (inputs copied in, parameters initialised) happens first. */
  VL_TRY(sync_streams(g->dev, g->side, outer));
  VL_TRY(vl_cuda_set_current_stream(g->dev, g->side));
  g->outer = outer;
  g->entered = true;
  return VL_OK;
}

vl_status vl_graph_leave(vl_graph *g) {
  if (!g || !g->entered) return VL_OK;
  g->entered = false;
  vl_status s = vl_cuda_set_current_stream(g->dev, g->outer);
  vl_status w = sync_streams(g->dev, g->outer, g->side);
  return s != VL_OK ? s : w;
}

vl_status vl_graph_capture_begin(vl_graph *g) {
  if (!g) return vl_fail(VL_EINVAL, "graph: NULL graph");
  if (capturing) return vl_fail(VL_EGRAPH, "graph: another capture is in progress (captures do not nest)");
  if (g->exec) return vl_fail(VL_EGRAPH, "graph: already captured (make a new graph to capture again)");
  if (g->pool_id == 0) return vl_fail(VL_EINVAL, "graph: destroyed");
  VL_TRY(vl_graph_enter(g));
  vl_status s = vl_alloc_private_begin(g->pool, g->pool_id, g->side);
  if (s == VL_OK) {
    /* Thread-local: a call of this thread that would break the capture fails at once (with
     * the operation's name in our message) instead of silently corrupting the graph. */
    cudaError_t e = cudaStreamBeginCapture((cudaStream_t)g->side, cudaStreamCaptureModeThreadLocal);
    if (e != cudaSuccess) {
      vl_alloc_private_end(g->pool, g->side);
      s = vl_fail(VL_ECUDA, "graph: cudaStreamBeginCapture: %s", cudaGetErrorString(e));
    }
  }
  if (s != VL_OK) {
    (void)vl_graph_leave(g);
    return s;
  }
  g->refusal[0] = '\0';
  g->rng_groups = 0;
  capturing = g;
  return VL_OK;
}

static size_t count_nodes(cudaGraph_t graph) {
  size_t n = 0;
  return cudaGraphGetNodes(graph, NULL, &n) == cudaSuccess ? n : 0;
}

vl_status vl_graph_capture_end(vl_graph *g, bool ok) {
  if (!g || capturing != g) return vl_fail(VL_EINVAL, "graph: not capturing");
  capturing = NULL;
  cudaGraph_t graph = NULL;
  cudaError_t e = cudaStreamEndCapture((cudaStream_t)g->side, &graph);
  vl_alloc_private_end(g->pool, g->side);
  vl_status left = vl_graph_leave(g);
  vl_status s = VL_OK;
  if (!ok) {
    s = VL_EGRAPH; /* the step's own error message stays */
  } else if (g->refusal[0]) {
    s = vl_fail(VL_EGRAPH, "%s", g->refusal);
  } else if (e != cudaSuccess) {
    s = vl_fail(VL_EGRAPH, "graph: the capture was invalidated (%s): an operation of the step is not "
                "capturable", cudaGetErrorString(e));
    (void)cudaGetLastError();
  } else if (left != VL_OK) {
    s = left;
  } else {
    cudaError_t ie = cudaGraphInstantiateWithFlags(&g->exec, graph, 0);
    if (ie != cudaSuccess) {
      g->exec = NULL;
      s = vl_fail(VL_ECUDA, "graph: cudaGraphInstantiate: %s", cudaGetErrorString(ie));
    } else {
      g->nodes = count_nodes(graph);
    }
  }
  if (graph) VL_CUDA_NOTE(cudaGraphDestroy(graph));
  return s;
}

vl_status vl_graph_replay(vl_graph *g) {
  if (!g) return vl_fail(VL_EINVAL, "graph: NULL graph");
  if (!g->exec) return vl_fail(VL_EINVAL, "graph: not captured");
  if (capturing) return vl_graph_refuse("graph:replay", "launching a graph");
  void *stream = NULL;
  VL_TRY(vl_cuda_current_stream(g->dev, &stream));
  VL_CUDA_CHECK(cudaSetDevice(g->dev));
  vl_context *c = vl_ctx();
  if (g->rng_groups) {
    /* Pageable source: cudaMemcpyAsync returns once it is staged, so the next refresh may
     * overwrite rng_host while this replay is still queued. */
    g->rng_host[0] = c->seed;
    g->rng_host[1] = c->rng_offset;
    VL_CUDA_CHECK(cudaMemcpyAsync(vl_block_ptr(g->rng_block), g->rng_host, sizeof g->rng_host,
                                  cudaMemcpyHostToDevice, (cudaStream_t)stream));
  }
  VL_CUDA_CHECK(cudaGraphLaunch(g->exec, (cudaStream_t)stream));
  c->rng_offset += g->rng_groups;
  return VL_OK;
}

void vl_graph_destroy(vl_graph *g) {
  if (!g) return;
  if (capturing == g) (void)vl_graph_capture_end(g, false);
  (void)vl_graph_leave(g);
  if (g->exec) {
    VL_CUDA_NOTE(cudaGraphExecDestroy(g->exec));
    g->exec = NULL;
  }
  if (g->side) {
    (void)vl_stream_destroy(g->dev, g->side); /* waits for queued replays */
    g->side = NULL;
  }
  /* After vl_shutdown the pools are gone, and with them every block. */
  if (g->pool && vl_ctx()->pool[g->dev] == g->pool) {
    if (g->rng_block) vl_alloc_free(g->pool, g->rng_block);
    if (g->pool_id) (void)vl_alloc_private_release(g->pool, g->pool_id);
  }
  free(g);
}

int vl_graph_device(const vl_graph *g) { return g ? g->dev : -1; }
bool vl_graph_captured(const vl_graph *g) { return g && g->exec; }
size_t vl_graph_num_nodes(const vl_graph *g) { return g ? g->nodes : 0; }
uint64_t vl_graph_rng_groups(const vl_graph *g) { return g ? g->rng_groups : 0; }

vl_status vl_graph_refuse(const char *op, const char *why) {
  vl_graph *g = capturing;
  if (!g) return VL_OK;
  char msg[sizeof g->refusal];
  snprintf(msg, sizeof msg, "%s: %s during CUDA graph capture (the graph records device work on its "
           "stream only; run it before or after the capture, or outside the graphed step)", op, why);
  if (!g->refusal[0]) memcpy(g->refusal, msg, sizeof msg);
  return vl_fail(VL_EGRAPH, "%s", msg);
}

vl_status vl_graph_check_device(const char *op, int device_type, int device_index) {
  vl_graph *g = capturing;
  if (!g || (device_type == VL_CUDA && device_index == g->dev)) return VL_OK;
  char why[96];
  if (device_type == VL_CUDA)
    snprintf(why, sizeof why, "an op on cuda:%d while capturing on cuda:%d", device_index, g->dev);
  else
    snprintf(why, sizeof why, "a CPU op (it would run once now and never on replay)");
  return vl_graph_refuse(op, why);
}

vl_status vl_graph_check_alloc(int dev, void *stream, size_t nbytes) {
  vl_graph *g = capturing;
  if (!g || dev != g->dev || stream == g->side) return VL_OK;
  char why[160];
  snprintf(why, sizeof why, "an allocation of %zu bytes on a stream other than the capture's (outside "
           "the graph's private pool)", nbytes);
  return vl_graph_refuse("allocation", why);
}

const uint64_t *vl_graph_rng_draw(int dev, uint64_t groups, uint64_t *rel_offset) {
  vl_graph *g = capturing;
  if (!g || dev != g->dev) return NULL;
  *rel_offset = g->rng_groups;
  g->rng_groups += groups;
  return (const uint64_t *)vl_block_ptr(g->rng_block);
}

#else /* !VL_HAVE_CUDA */

#define VL_NO_GRAPH(fn) vl_fail(VL_EUNSUPPORTED, "%s: v100lua was built without CUDA (graphs need it)", fn)

vl_status vl_graph_create(int dev, vl_graph **out) {
  (void)dev;
  (void)out;
  return VL_NO_GRAPH("graph");
}
vl_status vl_graph_enter(vl_graph *g) { (void)g; return VL_NO_GRAPH("graph"); }
vl_status vl_graph_leave(vl_graph *g) { (void)g; return VL_OK; }
vl_status vl_graph_capture_begin(vl_graph *g) { (void)g; return VL_NO_GRAPH("graph"); }
vl_status vl_graph_capture_end(vl_graph *g, bool ok) { (void)g; (void)ok; return VL_NO_GRAPH("graph"); }
vl_status vl_graph_replay(vl_graph *g) { (void)g; return VL_NO_GRAPH("graph"); }
void vl_graph_destroy(vl_graph *g) { (void)g; }
int vl_graph_device(const vl_graph *g) { (void)g; return -1; }
bool vl_graph_captured(const vl_graph *g) { (void)g; return false; }
size_t vl_graph_num_nodes(const vl_graph *g) { (void)g; return 0; }
uint64_t vl_graph_rng_groups(const vl_graph *g) { (void)g; return 0; }
vl_status vl_graph_refuse(const char *op, const char *why) { (void)op; (void)why; return VL_OK; }
vl_status vl_graph_check_device(const char *op, int t, int i) { (void)op; (void)t; (void)i; return VL_OK; }
vl_status vl_graph_check_alloc(int dev, void *stream, size_t n) { (void)dev; (void)stream; (void)n; return VL_OK; }
const uint64_t *vl_graph_rng_draw(int dev, uint64_t groups, uint64_t *rel) {
  (void)dev;
  (void)groups;
  (void)rel;
  return NULL;
}

#endif
