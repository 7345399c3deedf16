/* ext/data/image.h: JPEG decode and encode through libjpeg-turbo's TurboJPEG API (Debian
 * libturbojpeg0-dev), for the image pipeline behind v100.data.
 *
 * Decoding can scale in the DCT domain: libjpeg-turbo decodes straight to 1/8, 2/8, ... 8/8 of
 * the size (tjGetScalingFactors), which skips most of the IDCT work for large photos that end up
 * as a 224x224 crop. vl_jpeg_pick_scale chooses the smallest factor whose output still covers the
 * target, so the bilinear resize that follows only ever shrinks or keeps (never magnifies what DCT
 * scaling took away). Factors above 1 are never used.
 *
 * Pixels are 8-bit, rows packed (pitch = width * channels), 1 channel (gray) or 3 (RGB); a
 * colour JPEG decoded to 1 channel is converted to luminance by the library, a gray one to 3
 * channels is replicated, a CMYK one (Adobe's inverted CMYK, as photo tools write it) is converted
 * to RGB as PIL converts it (then to gray as PIL does). Errors are VL_EIO with "<op>: <name>: <reason>" messages, where name is
 * the file path (or "<memory>") and reason the library's message. A libjpeg warning (e.g. extra
 * bytes before a marker, common in real photo collections) is accepted, except a premature end
 * of data (a truncated file), which is an error: its lower part would be grey. Internal to the
 * runtime; the decoder handle is used by one thread at a time. */
#ifndef VL_IMAGE_H
#define VL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/core/status.h"
#include "runtime/core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vl_jpeg_decoder vl_jpeg_decoder;

vl_status vl_jpeg_decoder_new(vl_jpeg_decoder **out);
void vl_jpeg_decoder_free(vl_jpeg_decoder *d); /* NULL is fine */

/* The most pixels (width x height) a decoded image may have: 2^28, 16384 x 16384. A header that
 * claims more is refused before anything is allocated (VL_EIO naming the size). */
#define VL_JPEG_MAX_PIXELS ((uint64_t)1 << 28)

/* Image size and channel count as stored (1 for gray, 4 for CMYK/YCCK, 3 otherwise). */
vl_status vl_jpeg_header(vl_jpeg_decoder *d, const void *buf, size_t len, const char *name, int *width,
                         int *height, int *stored_channels);

/* The smallest DCT scaling factor num/denom <= 1 such that a region of crop_w x crop_h pixels of
 * the full-size image still has at least need_w x need_h pixels after scaling (crop * num / denom
 * >= need, computed exactly); 1/1 when no smaller one does. */
void vl_jpeg_pick_scale(int crop_w, int crop_h, int need_w, int need_h, int *num, int *denom);
/* The scaled size of a dimension, as the library computes it (ceil(dim * num / denom)). */
int vl_jpeg_scaled(int dim, int num, int denom);

/* Decodes at the scale num/denom (from vl_jpeg_pick_scale, or 1/1) into *pixels, a buffer of
 * *cap bytes that is grown with realloc as needed (the caller owns it and frees it, also on
 * failure). channels: 1 or 3. Writes the decoded size to *out_w, *out_h. */
vl_status vl_jpeg_decode(vl_jpeg_decoder *d, const void *buf, size_t len, const char *name, int channels,
                         int num, int denom, uint8_t **pixels, size_t *cap, int *out_w, int *out_h);

/* Encodes packed 8-bit pixels (1 or 3 channels) at quality 1..100 (4:4:4 chroma: no subsampling,
 * so that decoded pixels stay close to the source). *jpeg is malloc'd; the caller frees it. */
vl_status vl_jpeg_encode(const uint8_t *pixels, int width, int height, int channels, int quality,
                         uint8_t **jpeg, size_t *len);

/* Reads a whole file into a buffer grown with realloc (*buf of *cap bytes, caller-owned). VL_EIO
 * "<op>: <path>: <strerror>" (or "empty file") on failure. */
vl_status vl_read_file(const char *op, const char *path, uint8_t **buf, size_t *cap, size_t *len);

/* Tensor front ends (u8 H x W x C CPU tensors, C = 1 or 3). */
vl_status vl_image_decode(const void *buf, size_t len, const char *name, int channels, vl_tensor **out);
vl_status vl_image_decode_file(const char *path, int channels, vl_tensor **out);
/* Writes the image to `path` (through a temporary file renamed into place). */
vl_status vl_image_encode_file(vl_tensor *img, const char *path, int quality);

#ifdef __cplusplus
}
#endif
#endif
