/* ext/data/loader.h: the batch loader behind v100.data.ImageLoader: a pool of pthread
 * workers decoding and transforming the images of an ImageFolder into a ring of `prefetch` batch
 * buffers, which the owning (main) thread hands out in order as CPU tensors.
 *
 * An epoch is a list of dataset indices (this rank's shard, in order: scripts/v100/data.lua makes
 * it as DistributedSampler does), cut into batches of batch_size (the last one shorter, or
 * dropped with drop_last), from batch `start` on (resuming mid-epoch). Workers take single
 * samples of the oldest unfinished batch, so the work spreads over the threads at any batch size;
 * sample k of the shard is written at row k mod batch_size of its batch buffer. The transform of
 * a sample is a function of (seed, epoch, dataset index) alone (transform.h): the batches do not
 * depend on the worker count or timing.
 *
 * A sample that cannot be read (missing file, not a JPEG, corrupt data, wrong size for 'none')
 * is replaced by the next readable sample of the shard (positions k+1, k+2, ... wrapping), so the
 * replacement is deterministic too; the file is remembered as bad (not read again), counted once
 * (vl_loader_skipped) and its message "<path>: <reason>" kept for the owner to print (the runtime
 * never prints). Only when no sample of the shard is readable does vl_loader_next fail.
 *
 * Buffers: allocated by the owning thread (pinned ones from the pinned pool, which is not
 * thread-safe, hence never by a worker), up front at creation. A handed-out batch shares the
 * ring buffer; when the ring needs that buffer again while the caller still holds a reference to
 * it (any view of it), the loader gives the buffer up to the caller and allocates a new one, so a
 * handed-out tensor is never overwritten. Freeing the tensor (t:free()) after copying it to the
 * device lets the buffer be reused; vl_loader_next_to copies it to the device itself, without a
 * host wait. Every function here is for the owning thread. */
#ifndef VL_LOADER_H
#define VL_LOADER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"
#include "ext/data/folder.h"
#include "ext/data/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VL_LOADER_MAX_WORKERS 64

typedef struct vl_loader_opts {
  vl_tf_opts tf;
  int batch_size;     /* >= 1 */
  int workers;        /* 1..VL_LOADER_MAX_WORKERS; 0: the online cores, at most 16 */
  int prefetch;       /* batch buffers in the ring, >= 1 */
  bool drop_last;     /* drop a last batch shorter than batch_size */
  bool pinned;        /* buffers in pinned host memory (for a CUDA target) */
  int decoder;        /* VL_DECODER_CPU, or VL_DECODER_NVJPEG (needs pinned; batches via next_to) */
} vl_loader_opts;

/* Decoders. NVJPEG: the workers only read the files and their headers and compute the crop
 * boxes (the same Philox draws); vl_loader_next_to(cuda) decodes the batch with nvJPEG and crops
 * it on the GPU (ext/data/nvjpeg.h), an image nvJPEG does not take through the CPU path on
 * the owning thread (vl_loader_cpu_fallbacks counts them). Values differ from the CPU decoder's
 * by the IDCT and DCT scaling only; the order, labels and skipped files are the same. */
enum { VL_DECODER_CPU = 0, VL_DECODER_NVJPEG = 1 };

typedef struct vl_loader vl_loader;

/* Checks the options (VL_EINVAL "ImageLoader: ..."), allocates the ring and starts the workers.
 * Retains the folder. */
vl_status vl_loader_create(vl_folder *f, const vl_loader_opts *o, vl_loader **out);
/* Batches of a shard of n samples. */
int64_t vl_loader_batches(const vl_loader *l, int64_t n);
/* Starts an epoch over order[0..n) (dataset indices, copied) from batch `start` (0-based);
 * abandons the batches of an epoch in progress. */
vl_status vl_loader_epoch(vl_loader *l, const int64_t *order, int64_t n, uint32_t epoch, int64_t start);
/* The next batch of the epoch: *x (B x C x S x S, or B x S x S x C for NHWC, of the transform's
 * dtype) and *y (i64 labels, B), new references; *x = *y = NULL after the last one. */
vl_status vl_loader_next(vl_loader *l, vl_tensor **x, vl_tensor **y);
/* The next batch as new tensors on `dev` (same shapes, dtype and values as vl_loader_next's).
 * On a CUDA device (a loader with pinned buffers) the copy is asynchronous on dev's current
 * stream, with no host wait: an event recorded after it guards the ring buffer, which goes back
 * to the workers at once, and they write into it only after the event has completed. On the CPU
 * a plain copy (the buffer is reusable at once). *x = *y = NULL after the last batch. */
vl_status vl_loader_next_to(vl_loader *l, vl_device dev, vl_tensor **x, vl_tensor **y);
/* Distinct files found unreadable so far, and the message of the i-th of them (0-based) copied
 * into buf; false when i is out of range. */
int64_t vl_loader_skipped(vl_loader *l);
bool vl_loader_skip_message(vl_loader *l, int64_t i, char *buf, size_t n);
int vl_loader_workers(const vl_loader *l);
/* Images of the nvJPEG decoder decoded on the CPU instead, so far; and the nvJPEG backend in use
 * ("hardware", "default", or "none" before the first batch / for the CPU decoder). */
int64_t vl_loader_cpu_fallbacks(const vl_loader *l);
const char *vl_loader_nvjpeg_backend(const vl_loader *l);
/* Stops and joins the workers, frees the ring (tensors handed out stay valid). NULL is fine. */
void vl_loader_close(vl_loader *l);

#ifdef __cplusplus
}
#endif
#endif
