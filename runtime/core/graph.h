/* runtime/core/graph.h: CUDA graphs of whole steps (capture once, replay with one launch).
 *
 * A vl_graph owns a side stream, a private pool of the device's caching allocator and, once
 * captured, an executable graph. The step runs on the side stream (warm-up iterations with
 * vl_graph_enter/leave, then the capture), so its work neither waits for nor blocks what the
 * caller's stream has queued beyond the point of entry. During capture:
 *   - every allocation on the side stream comes from the private pool, so the addresses the
 *     graph recorded stay reserved for it; blocks of the default pool freed during capture are
 *     held until the graph is destroyed (a recorded kernel may still touch them on replay);
 *   - what cannot be replayed is refused with an error naming the operation: a host read or
 *     copy (`item`, a copy to or from host memory), a synchronisation, an op on another device
 *     (CPU ops run once and are not replayed), an allocation on a stream other than the capture
 *     stream, a cuDNN benchmark search; vl_graph_end then reports the first such refusal;
 *   - random numbers read their Philox key and base offset from a device buffer of the graph,
 *     which vl_graph_replay refreshes from the generator before each launch and then advances
 *     the generator by what the step draws: every replay draws fresh numbers, exactly those an
 *     eager step at the same generator state would have drawn.
 * Without CUDA everything links and fails with VL_EUNSUPPORTED. One capture at a time. */
#ifndef VL_GRAPH_H
#define VL_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_graph vl_graph;

vl_status vl_graph_create(int dev, vl_graph **out);
/* Runs what follows on the graph's side stream (after the current stream's queued work) until
 * vl_graph_leave, which makes the caller's stream wait for it and restores it. */
vl_status vl_graph_enter(vl_graph *g);
vl_status vl_graph_leave(vl_graph *g);
/* Enter + private pool + cudaStreamBeginCapture. */
vl_status vl_graph_capture_begin(vl_graph *g);
/* Ends the capture (always: the stream and pool are restored even on failure). With ok, the
 * graph is instantiated; a refusal recorded during capture, or CUDA's verdict that the capture
 * was invalidated, is the error. With !ok (the step itself failed) the capture is discarded and
 * the error already set is kept. */
vl_status vl_graph_capture_end(vl_graph *g, bool ok);
/* Launches the captured step on the device's current stream. */
vl_status vl_graph_replay(vl_graph *g);
/* Frees the executable graph, the stream and the private pool (idempotent; NULL is a no-op). The
 * caller drops the graph's tensors first, or their blocks stay in the released pool until freed. */
void vl_graph_destroy(vl_graph *g);

int vl_graph_device(const vl_graph *g);
bool vl_graph_captured(const vl_graph *g);
/* Kernel nodes etc. of the instantiated graph (0 before capture). */
size_t vl_graph_num_nodes(const vl_graph *g);
/* Philox counters a replay draws. */
uint64_t vl_graph_rng_groups(const vl_graph *g);

/* ---- for the runtime and kernels (hot paths: one load and a branch when not capturing) ---- */

/* The graph being captured, or NULL. */
vl_graph *vl_graph_capturing(void);
/* VL_OK when not capturing; otherwise records and returns the error "<op>: <why> during CUDA
 * graph capture (...)" so that vl_graph_capture_end reports the first culprit. */
vl_status vl_graph_refuse(const char *op, const char *why);
/* Op dispatch check: refuses ops on a device other than the capture's. */
vl_status vl_graph_check_device(const char *op, int device_type, int device_index);
/* Allocation check: refuses allocations on a stream other than the capture's on its device. */
vl_status vl_graph_check_alloc(int dev, void *stream, size_t nbytes);
/* RNG under capture: the device buffer {seed, base offset} and the offset relative to it for a
 * draw of `groups` counters (which are reserved). NULL when not capturing on `dev`. */
const uint64_t *vl_graph_rng_draw(int dev, uint64_t groups, uint64_t *rel_offset);

#ifdef __cplusplus
}
#endif
#endif
