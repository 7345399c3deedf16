/* ext/data/nvjpeg.h: the GPU decode path of v100.data.ImageLoader (decoder = 'nvjpeg'):
 * nvJPEG's batched decoder into device RGB interleaved (or gray) buffers, then one CUDA kernel
 * of ours (ext/data/cuda_data.cu) that crops, resizes, flips and normalises every image into
 * the batch tensor, with the CPU path's sampling rule (transform.c's `axis`: PyTorch's bilinear,
 * align_corners = False, taps clamped to the box), on the full-size image (no DCT scaling).
 *
 * The handle prefers NVJPEG_BACKEND_HARDWARE (the A100/H100/H200 JPEG engine) and falls back to
 * NVJPEG_BACKEND_DEFAULT where nvjpegCreateEx refuses it. An image the backend cannot take
 * (nvjpegJpegStreamParse fails, not 1 or 3 components, nvjpegDecodeBatchedSupported says no: CMYK,
 * progressive on the hardware engine, ...) is flagged in `cpu` for the caller to decode on the
 * CPU; if the batched decode itself fails, every image of the batch is flagged.
 *
 * Optional: without VL_HAVE_NVJPEG (CMake found no nvjpeg.h / libnvjpeg) vl_nvjpeg_create fails
 * with VL_EUNSUPPORTED "... built without nvJPEG". All functions are for one thread at a time
 * (the loader's owning thread). */
#ifndef VL_NVJPEG_H
#define VL_NVJPEG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "ext/data/transform.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One image of a batch: its JPEG bytes (host memory), full size, the box (full-size coordinates,
 * transform.h) and the flip. */
typedef struct vl_nvjpeg_item {
  const uint8_t *data;
  size_t len;
  int h, w;
  vl_box box;
  bool flip;
} vl_nvjpeg_item;

/* What the crop kernel reads per image (device copy of an array of these). */
typedef struct vl_crop_item {
  const uint8_t *src; /* h x w x channels, rows packed */
  int h, w;
  double by, bx, bh, bw; /* the box, as the CPU path computes it (double) */
  int flip;
  int skip;           /* decoded on the CPU instead: the kernel leaves the row alone */
} vl_crop_item;

typedef struct vl_nvjpeg vl_nvjpeg;

bool vl_have_nvjpeg(void);
/* A decoder for cuda:dev, batches of up to max_batch images of `channels` (1 or 3). */
vl_status vl_nvjpeg_create(int dev, int max_batch, int channels, vl_nvjpeg **out);
/* "hardware" or "default". */
const char *vl_nvjpeg_backend(const vl_nvjpeg *nj);
/* Decodes items[0..n) on `stream` (NULL: dev's current one) and writes sample j of the batch to
 * out (a device buffer of n samples, each channels x size x size of tf's dtype in NCHW or NHWC
 * order, contiguous) unless cpu[j] comes back true (then row j is left for the caller). */
vl_status vl_nvjpeg_decode(vl_nvjpeg *nj, int n, const vl_nvjpeg_item *items, const vl_tf_opts *tf, void *out,
                           void *stream, bool *cpu);
void vl_nvjpeg_destroy(vl_nvjpeg *nj); /* NULL is fine */

/* The crop kernel (ext/data/cuda_data.cu): items is a device array of n. */
vl_status vl_cuda_crop_batch(const vl_crop_item *items, int n, int channels, int size, const float a[3],
                             const float b[3], int dtype, bool nhwc, void *out, void *stream);

#ifdef __cplusplus
}
#endif
#endif
