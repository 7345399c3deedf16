/* runtime/trace/nvtx.h: NVTX ranges, so that an Nsight Systems timeline reads like the model.
 *
 * Off by default; vl_nvtx_enable(true) (Lua: v100.nvtx.enable(true), or V100LUA_NVTX=1 in the
 * environment) turns them on. What gets a range when on:
 *   - every nn.Module call: "conv1: Conv2d", nested as the modules are (scripts/v100/nn/module.lua
 *     enters a scope per call: vl_nvtx_scope_enter/leave);
 *   - the backward of every layer: the autograd engine runs the nodes recorded inside a scope
 *     within "conv1: Conv2d backward" ranges nested the same way, each node in a range of its
 *     own name ("Conv2dBackward"): a node remembers the scope it was recorded in (vl_node.scope);
 *   - every collective of runtime/dist ("all_reduce f16 6553600"), around its start and, for a
 *     blocking one, its completion;
 *   - what scripts push themselves (v100.nvtx.range).
 * All ranges are in the NVTX domain "v100lua". NVTX3 is header-only: with no tool attached each
 * call returns at once; with nsys attached the tool records them. Built without CUDA the calls
 * only keep the counters (vl_nvtx_get_stats), so scripts and tests run the same everywhere.
 *
 * Off costs nothing measurable: module calls test one Lua boolean, the engine and collectives one
 * context field. The main thread only (the engine, module calls and collectives run there).
 * Scopes are interned (parent, label) and live as long as the process: a node may outlive the
 * module call that recorded it (AccumulateGrad nodes are cached on the parameters). */
#ifndef VL_NVTX_H
#define VL_NVTX_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_nvtx_scope vl_nvtx_scope;

/* Built with NVTX (CUDA builds): ranges reach a tool. */
bool vl_nvtx_available(void);
void vl_nvtx_enable(bool on);
bool vl_nvtx_enabled(void);
/* Enables when V100LUA_NVTX is set to something other than "", "0", "off" or "false". */
void vl_nvtx_enable_from_env(void);

/* A range on the calling thread (no-ops when off). Pops beyond the pushes are ignored. */
void vl_nvtx_push(const char *msg);
void vl_nvtx_pop(void);
void vl_nvtx_mark(const char *msg);

/* A layer's forward: pushes the range `label` and makes the scope (the current one's child of
 * that label) current, so that nodes recorded until the leave remember it. Returns the token
 * the matching leave takes: 0 when off (nothing pushed), 1 when only the range was pushed (past
 * the bound on scopes, or without host memory), 2 when the scope became current. */
int vl_nvtx_scope_enter(const char *label);
void vl_nvtx_scope_leave(int token);
/* The scope recorded ops are in now (NULL when off or outside every module). */
const vl_nvtx_scope *vl_nvtx_current_scope(void);

/* The backward side, used by runtime/autograd/engine.c: one per backward run. */
#define VL_NVTX_MAX_DEPTH 64
typedef struct vl_nvtx_bw {
  const vl_nvtx_scope *open[VL_NVTX_MAX_DEPTH]; /* the scopes whose backward ranges are open */
  int depth;
  bool node_open;
} vl_nvtx_bw;
/* Before a node runs: closes the open scopes that are not ancestors of `scope`, opens the rest of
 * its chain ("<label> backward") and pushes a range named `op`. */
void vl_nvtx_bw_node(vl_nvtx_bw *bw, const vl_nvtx_scope *scope, const char *op);
void vl_nvtx_bw_node_done(vl_nvtx_bw *bw);
/* Closes whatever is still open. */
void vl_nvtx_bw_end(vl_nvtx_bw *bw);

typedef struct vl_nvtx_stats {
  uint64_t pushes, pops; /* ranges opened and closed while on (available or not) */
  int depth;             /* open now */
  int scopes;            /* distinct scopes interned */
} vl_nvtx_stats;
void vl_nvtx_get_stats(vl_nvtx_stats *out);

#ifdef __cplusplus
}
#endif
#endif
