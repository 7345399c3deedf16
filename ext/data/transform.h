/* ext/data/transform.h: the torchvision image transforms of ImageNet training, for 8-bit
 * images in host memory (ext/data/loader.c applies them in its worker threads).
 *
 *   train: RandomResizedCrop(size, scale = (0.08, 1), ratio = (3/4, 4/3)) as torchvision's
 *          get_params (10 tries of area and log-uniform aspect ratio, then the centre-crop
 *          fallback, rounding with Python's round: half to even), bilinear resize of the box to
 *          size x size (align_corners = False, no antialias), horizontal flip with p = 0.5.
 *   val:   Resize(resize) of the shorter side (the longer one truncated as torchvision does),
 *          then CenterCrop(size) (offsets rounded as torchvision does).
 *   none:  the image as it is; it must be size x size.
 * Then normalisation, (p / 255 - mean[c]) / std[c], stored as f32, f16 or bf16 in NCHW or NHWC.
 *
 * Random draws come from Philox keyed by (seed, epoch, index): the parameters of a sample do
 * not depend on which thread handles it or when, and a resumed epoch repeats them. Block t of a
 * sample is vl_philox_ctr(seed, index, epoch, t): try t (t = 0..9) uses its words 0..3 for the
 * area, the log ratio, the row and the column; the flip uses word 0 of block 10.
 *
 * Boxes are in the coordinates of the full-size image; vl_resample takes a box in the (possibly
 * DCT-scaled) image it reads. */
#ifndef VL_TRANSFORM_H
#define VL_TRANSFORM_H

#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/dtype.h"
#include "runtime/core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vl_tf_kind { VL_TF_NONE = 0, VL_TF_TRAIN, VL_TF_VAL } vl_tf_kind;

typedef struct vl_box { double y, x, h, w; } vl_box; /* top, left, height, width */

typedef struct vl_tf_opts {
  vl_tf_kind kind;
  int size;               /* output side */
  int resize;             /* val: the shorter side before the centre crop */
  int channels;           /* 1 or 3 */
  double scale[2];        /* train: area fraction range, default (0.08, 1) */
  double ratio[2];        /* train: aspect ratio range, default (3/4, 4/3) */
  double flip_p;          /* train: horizontal flip probability, default 0.5 */
  float mean[3], std[3];
  vl_dtype dtype;         /* VL_F32, VL_F16 or VL_BF16 */
  bool nhwc;
  uint64_t seed;
} vl_tf_opts;

/* Fills the defaults above for a kind (size 224, resize 256, 3 channels, mean 0, std 1, f32 NCHW). */
void vl_tf_defaults(vl_tf_opts *o, vl_tf_kind kind);

/* torchvision's RandomResizedCrop.get_params for an image of h x w (integral box). */
void vl_rrc_box(uint64_t seed, uint32_t epoch, uint64_t index, int h, int w, const double scale[2],
                const double ratio[2], vl_box *box);
/* Whether sample `index` of `epoch` is flipped (p = flip_p). */
bool vl_flip_draw(uint64_t seed, uint32_t epoch, uint64_t index, double flip_p);
/* Resize(resize) + CenterCrop(size) as a box of the original h x w image (fractional: the crop
 * of the resized image mapped back). */
void vl_center_crop_box(int h, int w, int resize, int size, vl_box *box);

/* Bilinear resample of `box` of the packed u8 image src (sh x sw x channels) to out_h x out_w,
 * optionally mirrored, normalised per channel, stored at dst (element [c][y][x] of NCHW or
 * [y][x][c] of NHWC, contiguous for this one sample) in dtype. */
vl_status vl_resample(const uint8_t *src, int sh, int sw, int channels, const vl_box *box, int out_h, int out_w,
                      bool flip, const float mean[3], const float std[3], vl_dtype dtype, bool nhwc, void *dst);

/* The same into a packed u8 image (rounded, clamped): for tools that write resized JPEGs. */
vl_status vl_resample_u8(const uint8_t *src, int sh, int sw, int channels, int out_h, int out_w, uint8_t *dst);

#ifdef __cplusplus
}
#endif
#endif
