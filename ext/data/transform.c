/* ext/data/transform.c: RandomResizedCrop, Resize + CenterCrop, flip and normalisation
 * (see transform.h). */
#include "ext/data/transform.h"

#include <math.h>
#include <stdlib.h>

#include "runtime/core/philox.h"

void vl_tf_defaults(vl_tf_opts *o, vl_tf_kind kind) {
  *o = (vl_tf_opts){.kind = kind, .size = 224, .resize = 256, .channels = 3, .scale = {0.08, 1.0},
                    .ratio = {3.0 / 4.0, 4.0 / 3.0}, .flip_p = 0.5, .mean = {0, 0, 0}, .std = {1, 1, 1},
                    .dtype = VL_F32, .nhwc = false, .seed = 0};
}

/* A uniform double in [0, 1) from one 32-bit word. */
static double u01(uint32_t x) { return (double)x * (1.0 / 4294967296.0); }
/* torch.randint(0, n): uniform in 0..n-1 (n >= 1). */
static int randint(uint32_t x, int n) { return (int)(((uint64_t)x * (uint64_t)n) >> 32); }
/* Python's round(): half to even (the default rounding mode). */
static int pyround(double v) { return (int)nearbyint(v); }

void vl_rrc_box(uint64_t seed, uint32_t epoch, uint64_t index, int h, int w, const double scale[2],
                const double ratio[2], vl_box *box) {
  double area = (double)h * (double)w;
  double lr0 = log(ratio[0]), lr1 = log(ratio[1]);
  for (uint32_t t = 0; t < 10; t++) {
    vl_philox4 p = vl_philox_ctr(seed, index, epoch, t);
    double target = area * (scale[0] + (scale[1] - scale[0]) * u01(p.x[0]));
    double ar = exp(lr0 + (lr1 - lr0) * u01(p.x[1]));
    int cw = pyround(sqrt(target * ar)), ch = pyround(sqrt(target / ar));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      *box = (vl_box){.y = randint(p.x[2], h - ch + 1), .x = randint(p.x[3], w - cw + 1), .h = ch, .w = cw};
      return;
    }
  }
  /* torchvision's fallback: the largest centred box whose ratio is within the range. */
  double in_ratio = (double)w / (double)h;
  int cw, ch;
  if (in_ratio < fmin(ratio[0], ratio[1])) {
    cw = w;
    ch = pyround(cw / fmin(ratio[0], ratio[1]));
  } else if (in_ratio > fmax(ratio[0], ratio[1])) {
    ch = h;
    cw = pyround(ch * fmax(ratio[0], ratio[1]));
  } else {
    cw = w;
    ch = h;
  }
  *box = (vl_box){.y = (h - ch) / 2, .x = (w - cw) / 2, .h = ch, .w = cw};
}

bool vl_flip_draw(uint64_t seed, uint32_t epoch, uint64_t index, double flip_p) {
  vl_philox4 p = vl_philox_ctr(seed, index, epoch, 10);
  return u01(p.x[0]) < flip_p;
}

void vl_center_crop_box(int h, int w, int resize, int size, vl_box *box) {
  /* torchvision Resize(int): the shorter side becomes `resize`, the longer one int(resize * long /
   * short) (truncated). */
  int rh, rw;
  if (w <= h) {
    rw = resize;
    rh = (int)((double)resize * h / w);
  } else {
    rh = resize;
    rw = (int)((double)resize * w / h);
  }
  /* CenterCrop: int(round((H - size) / 2.0)); a resized side shorter than size is taken whole
   * (torchvision would pad; resize >= size in every sensible configuration). */
  int ch = size < rh ? size : rh, cw = size < rw ? size : rw;
  int top = pyround((rh - ch) / 2.0), left = pyround((rw - cw) / 2.0);
  double sy = (double)h / rh, sx = (double)w / rw;
  *box = (vl_box){.y = top * sy, .x = left * sx, .h = ch * sy, .w = cw * sx};
}

typedef struct axis_tab { int i0, i1; float l; } axis_tab;

/* Source taps of out output pixels along an axis of n source pixels, for the box [b0, b0 + bl):
 * PyTorch's bilinear with align_corners = False, sampling clamped to the box (a crop then a
 * resize, as torchvision does it). */
static void axis(axis_tab *tab, int out, int n, double b0, double bl) {
  int lo = (int)floor(b0), hi = (int)ceil(b0 + bl) - 1;
  if (lo < 0) lo = 0;
  if (hi > n - 1) hi = n - 1;
  if (hi < lo) hi = lo;
  double step = bl / out;
  for (int o = 0; o < out; o++) {
    double s = b0 + (o + 0.5) * step - 0.5;
    if (s < lo) s = lo;
    if (s > hi) s = hi;
    int i0 = (int)floor(s);
    tab[o].i0 = i0;
    tab[o].i1 = i0 + 1 <= hi ? i0 + 1 : hi;
    tab[o].l = (float)(s - i0);
  }
}

static inline void store(void *dst, int64_t k, vl_dtype dt, float v) {
  switch (dt) {
  case VL_F16: ((uint16_t *)dst)[k] = vl_f32_to_f16(v); break;
  case VL_BF16: ((uint16_t *)dst)[k] = vl_f32_to_bf16(v); break;
  default: ((float *)dst)[k] = v; break;
  }
}

static vl_status tables(int out_h, int out_w, axis_tab **ty, axis_tab **tx) {
  *ty = malloc(sizeof(axis_tab) * (size_t)(out_h + out_w));
  if (!*ty) return vl_fail(VL_EOOM, "resample: out of host memory for %dx%d taps", out_h, out_w);
  *tx = *ty + out_h;
  return VL_OK;
}

vl_status vl_resample(const uint8_t *src, int sh, int sw, int channels, const vl_box *box, int out_h, int out_w,
                      bool flip, const float mean[3], const float std[3], vl_dtype dtype, bool nhwc, void *dst) {
  axis_tab *ty = NULL, *tx = NULL;
  VL_TRY(tables(out_h, out_w, &ty, &tx));
  axis(ty, out_h, sh, box->y, box->h);
  axis(tx, out_w, sw, box->x, box->w);
  float a[3], b[3];
  for (int c = 0; c < channels; c++) {
    a[c] = 1.0f / (255.0f * std[c]);
    b[c] = -mean[c] / std[c];
  }
  const int64_t plane = (int64_t)out_h * out_w;
  for (int oy = 0; oy < out_h; oy++) {
    const uint8_t *r0 = src + (size_t)ty[oy].i0 * sw * channels, *r1 = src + (size_t)ty[oy].i1 * sw * channels;
    float ly = ty[oy].l;
    for (int ox = 0; ox < out_w; ox++) {
      const axis_tab *t = &tx[flip ? out_w - 1 - ox : ox];
      int x0 = t->i0 * channels, x1 = t->i1 * channels;
      float lx = t->l;
      for (int c = 0; c < channels; c++) {
        float top = r0[x0 + c] + lx * (r0[x1 + c] - r0[x0 + c]);
        float bot = r1[x0 + c] + lx * (r1[x1 + c] - r1[x0 + c]);
        float p = top + ly * (bot - top);
        int64_t k = nhwc ? ((int64_t)oy * out_w + ox) * channels + c : c * plane + (int64_t)oy * out_w + ox;
        store(dst, k, dtype, p * a[c] + b[c]);
      }
    }
  }
  free(ty);
  return VL_OK;
}

vl_status vl_resample_u8(const uint8_t *src, int sh, int sw, int channels, int out_h, int out_w, uint8_t *dst) {
  axis_tab *ty = NULL, *tx = NULL;
  VL_TRY(tables(out_h, out_w, &ty, &tx));
  axis(ty, out_h, sh, 0, sh);
  axis(tx, out_w, sw, 0, sw);
  for (int oy = 0; oy < out_h; oy++) {
    const uint8_t *r0 = src + (size_t)ty[oy].i0 * sw * channels, *r1 = src + (size_t)ty[oy].i1 * sw * channels;
    float ly = ty[oy].l;
    for (int ox = 0; ox < out_w; ox++) {
      int x0 = tx[ox].i0 * channels, x1 = tx[ox].i1 * channels;
      float lx = tx[ox].l;
      for (int c = 0; c < channels; c++) {
        float top = r0[x0 + c] + lx * (r0[x1 + c] - r0[x0 + c]);
        float bot = r1[x0 + c] + lx * (r1[x1 + c] - r1[x0 + c]);
        float p = top + ly * (bot - top) + 0.5f;
        dst[((size_t)oy * out_w + ox) * channels + c] = (uint8_t)(p < 0 ? 0 : p > 255 ? 255 : p);
      }
    }
  }
  free(ty);
  return VL_OK;
}
