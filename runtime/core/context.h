/* runtime/core/context.h: the one process-wide context. All mutable runtime state lives here
 * (devices, pools, current streams, the RNG, flags, per-device kernel state): there are no other
 * mutable globals, except the thread-local error buffer. */
#ifndef VL_CONTEXT_H
#define VL_CONTEXT_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/alloc.h"
#include "runtime/core/device.h"
#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

struct vl_tensor;

/* What core needs of the layers above it, installed by them: core includes and calls nothing
 * above itself (tools/check-layers.sh), so a call that must go up goes through one of these. Each
 * is NULL until installed, and installed before it can matter (see each setter). */
typedef struct vl_core_hooks {
  void (*tensor_meta_free)(struct vl_tensor *t); /* runtime/autograd: frees vl_tensor.autograd */
  void (*backend_shutdown)(void);                /* runtime/backend: the kernels' per-device state */
  vl_status (*cuda_check_async)(int device);     /* runtime/backend: errors CUDA kernels flagged
                                                    asynchronously (vl_cuda_synchronize) */
} vl_core_hooks;

typedef struct vl_context {
  bool initialized;
  int ndevices;                              /* CUDA devices visible (0 without CUDA) */
  uint64_t seed, rng_offset;                 /* the Philox generator (runtime/core/philox.h) */
  bool allow_tf32;                           /* f32 GEMMs may use TF32 (default off) */
  bool cudnn_benchmark;                      /* conv algorithms by timing on first use (default off) */
  bool deterministic;                        /* CUDA kernels without run-to-run variation (default off) */
  int cpu_threads;                           /* the CPU backend's threads; 0: the default (vl_num_threads) */
  int cuda_device;                           /* what the device string 'cuda' means (dist.init: the local rank's) */
  uint64_t gemm_bias_epilogue;               /* addmm biases added in the GEMM's epilogue ... */
  uint64_t gemm_bias_prefill;                /* ... or written into C before it (see kernels.h) */
  vl_alloc *pool[VL_MAX_DEVICES];             /* caching allocator per device, made on first use */
  vl_alloc *host_pool;                        /* pinned host memory, made on first use */
  void *default_stream[VL_MAX_DEVICES];      /* cudaStream_t, created (non-blocking) on first use */
  void *current_stream[VL_MAX_DEVICES];      /* what kernels are enqueued on */
  void *kernel_state[VL_MAX_DEVICES];        /* owned by kernels/cuda: handles, workspace, flags */
  void *cudnn_state[VL_MAX_DEVICES];         /* owned by kernels/cuda/cuda_cudnn.cu: cuDNN handles, plans */
  int (*reclaim)(void *ud);                  /* host GC hook for the OOM path (bindings set it) */
  void *reclaim_ud;
  /* The state of the concerns above core, each defined in its own header and held by pointer, so
   * core knows none of their layouts; NULL until the concern's first use. */
  struct vl_autograd_state *autograd;        /* runtime/autograd/node.c: grad mode, node counts */
  struct vl_autocast *autocast;              /* runtime/amp/autocast.c: O1 state; NULL reads as off */
  struct vl_dist *dist;                      /* runtime/dist/comm.c: the world; NULL until vl_dist_init */
  struct vl_nvtx *nvtx;                      /* runtime/trace/nvtx.c: NVTX ranges; NULL until enabled */
  vl_core_hooks hooks;                       /* installed from above; they survive vl_shutdown */
} vl_context;

/* Idempotent. Counts CUDA devices (touching nothing else on them). */
vl_status vl_init(void);
/* Frees pools, streams and kernel state. Tensors still alive must not be used afterwards. */
void vl_shutdown(void);
vl_context *vl_ctx(void);
/* Installs what core needs of the backends (runtime/backend/backend.c does, at its first lookup:
 * every kernel is reached through a lookup, so no kernel state exists before). */
void vl_set_backend_hooks(void (*shutdown)(void), vl_status (*cuda_check_async)(int device));
/* Sets the reclaim hook on the context and every pool (present and future). */
void vl_set_reclaim_hook(int (*reclaim)(void *ud), void *ud);
/* cuDNN convolutions pick their algorithms by timing on the first use of each shape (cached per
 * shape) instead of by heuristics: faster steady state for fixed shapes, slower first steps.
 * Default off. The flag is read when a convolution is planned. */
void vl_set_cudnn_benchmark(bool on);
bool vl_cudnn_benchmark(void);
/* Deterministic algorithms (torch.use_deterministic_algorithms): CUDA results that do not vary from
 * run to run for the same inputs. Convolutions use only the cuDNN algorithms that cuDNN reports as
 * deterministic (heuristics and timing alike), and scatter_add (the backward of gather, embedding
 * and index_select) sums each output in a fixed order instead of with atomic adds: slower, so off by
 * default. Every other CUDA kernel of ours already reduces in a fixed order; the CPU backend always
 * does. Read when an op is planned (a cached convolution plan records the flag). */
void vl_set_deterministic(bool on);
bool vl_deterministic(void);
/* Threads of the CPU backend's elementwise ops, reductions, softmax and norms (kernels/cpu/
 * cpu_threads.c), as torch.set_num_threads. n <= 0 restores the default: $V100LUA_NUM_THREADS, else
 * vl_cores_per_rank(). GEMMs are cut into blocks over
 * the same threads (kernels/cpu/cpu_gemm.c). */
void vl_set_num_threads(int n);
int vl_num_threads(void);
/* The online cores divided among the ranks a launcher started on this node (Open MPI's, MPICH's
 * or Slurm's variables), at least 1: the default of vl_num_threads and of the image loader's
 * worker count. */
int vl_cores_per_rank(void);
/* The CUDA device that the device string 'cuda' (without an index) names: 0 until set; dist.init
 * sets it to this rank's device (local rank mod the visible devices), as torch.cuda.set_device.
 * Fails for an index that is not a visible device. */
vl_status vl_set_cuda_device(int index);
int vl_cuda_default_index(void);

#ifdef __cplusplus
}
#endif
#endif
