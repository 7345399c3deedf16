/* runtime/dist/local.c: the world-size-1 backend (no launcher, or a build without MPI): every
 * reduction, broadcast and barrier of one rank is the identity, a gather or scatter of one block
 * a copy (on the current stream for CUDA tensors). Ops complete when started. send/recv never get
 * here: the front end refuses a peer that is this rank, and there is no other. */
#include <string.h>

#include "runtime/core/cuda.h"
#include "runtime/dist/internal.h"

static vl_status l_none(vl_comm *c, vl_tensor *buf, vl_dist_op op, vl_dist_work *w) { return VL_OK; }
static vl_status l_root(vl_comm *c, vl_tensor *buf, int root, vl_dist_work *w) { return VL_OK; }
static vl_status l_reduce(vl_comm *c, vl_tensor *buf, int root, vl_dist_op op, vl_dist_work *w) { return VL_OK; }

/* Contiguous buffers of one dtype and equal element counts (the front end checked them). */
static vl_status l_copy(vl_tensor *out, vl_tensor *in) {
  size_t n = (size_t)vl_tensor_numel(in) * vl_dtype_size(in->dtype);
  if (!n) return VL_OK;
  vl_device dev = out->storage->device;
  if (dev.type == VL_CPU) {
    memmove(vl_tensor_data(out), vl_tensor_data(in), n);
    return VL_OK;
  }
  void *stream = NULL;
  VL_TRY(vl_cuda_current_stream(dev.index, &stream));
  return vl_memcpy(vl_tensor_data(out), dev, vl_tensor_data(in), in->storage->device, n, stream, false);
}
static vl_status l_all_gather(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_work *w) { return l_copy(out, in); }
static vl_status l_reduce_scatter(vl_comm *c, vl_tensor *out, vl_tensor *in, vl_dist_op op, vl_dist_work *w) {
  return l_copy(out, in);
}
static vl_status l_p2p(vl_comm *c, vl_tensor *buf, int peer, int tag, vl_dist_work *w) {
  return vl_fail(VL_EINTERNAL, "%s: no peer at world size 1", w->op);
}
static vl_status l_barrier(vl_comm *c, vl_dist_work *w) { return VL_OK; }
static vl_status l_wait(vl_dist_work *w) { return VL_OK; }
static vl_status l_test(vl_dist_work *w, bool *done) {
  *done = true;
  return VL_OK;
}
static void l_release(vl_dist_work *w) {}

const vl_comm_backend vl_dist_local_backend = {
    .name = "local",
    .native_half = true, /* the identity needs no f32 staging */
    .native_avg = true,  /* sum / 1 */
    .all_reduce = l_none,
    .broadcast = l_root,
    .reduce = l_reduce,
    .all_gather = l_all_gather,
    .reduce_scatter = l_reduce_scatter,
    .send = l_p2p,
    .recv = l_p2p,
    .barrier = l_barrier,
    .wait = l_wait,
    .test = l_test,
    .release = l_release,
};
