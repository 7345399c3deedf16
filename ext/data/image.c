/* ext/data/image.c: JPEG decode/encode over TurboJPEG (see image.h). */
#define _POSIX_C_SOURCE 200809L
#include "ext/data/image.h"
#include "runtime/io/replace.h"
#include "runtime/ops/ops.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#include <unistd.h>

struct vl_jpeg_decoder {
  tjhandle tj;
};

vl_status vl_jpeg_decoder_new(vl_jpeg_decoder **out) {
  vl_jpeg_decoder *d = calloc(1, sizeof *d);
  if (!d) return vl_fail(VL_EOOM, "jpeg: out of host memory");
  d->tj = tjInitDecompress();
  if (!d->tj) {
    free(d);
    return vl_fail(VL_EINTERNAL, "jpeg: tjInitDecompress failed: %s", tjGetErrorStr2(NULL));
  }
  *out = d;
  return VL_OK;
}

void vl_jpeg_decoder_free(vl_jpeg_decoder *d) {
  if (!d) return;
  tjDestroy(d->tj);
  free(d);
}

vl_status vl_jpeg_header(vl_jpeg_decoder *d, const void *buf, size_t len, const char *name, int *width,
                         int *height, int *stored_channels) {
  if (len > (size_t)0xFFFFFFFFul) return vl_fail(VL_EIO, "decode_jpeg: %s: larger than 4 GiB", name);
  int w = 0, h = 0, subsamp = 0, cs = 0;
  if (tjDecompressHeader3(d->tj, (const unsigned char *)buf, (unsigned long)len, &w, &h, &subsamp, &cs) != 0)
    return vl_fail(VL_EIO, "decode_jpeg: %s: not a readable JPEG (%s)", name, tjGetErrorStr2(d->tj));
  if (w <= 0 || h <= 0) return vl_fail(VL_EIO, "decode_jpeg: %s: not a readable JPEG (image of size %dx%d)", name, h, w);
  /* The size comes from the file's header, and a few hundred bytes of progressive JPEG can
   * claim 65535 x 65535: the cap comes before the pixel buffer is allocated. */
  if ((uint64_t)w * (uint64_t)h > VL_JPEG_MAX_PIXELS)
    return vl_fail(VL_EIO, "decode_jpeg: %s: image of %dx%d is over the limit of %llu pixels (VL_JPEG_MAX_PIXELS)",
                   name, h, w, (unsigned long long)VL_JPEG_MAX_PIXELS);
  *width = w;
  *height = h;
  *stored_channels = cs == TJCS_GRAY ? 1 : cs == TJCS_CMYK || cs == TJCS_YCCK ? 4 : 3;
  return VL_OK;
}

int vl_jpeg_scaled(int dim, int num, int denom) {
  tjscalingfactor sf = {num, denom};
  return TJSCALED(dim, sf);
}

void vl_jpeg_pick_scale(int crop_w, int crop_h, int need_w, int need_h, int *num, int *denom) {
  int n = 0;
  tjscalingfactor *f = tjGetScalingFactors(&n);
  int bn = 1, bd = 1;
  for (int i = 0; f && i < n; i++) {
    int fn = f[i].num, fd = f[i].denom;
    if (fn > fd) continue; /* never upscale in the DCT domain */
    /* crop * fn / fd >= need, in integers (crop and need fit in int; the products in int64). */
    if ((int64_t)crop_w * fn < (int64_t)need_w * fd || (int64_t)crop_h * fn < (int64_t)need_h * fd) continue;
    if ((int64_t)fn * bd < (int64_t)bn * fd) {
      bn = fn;
      bd = fd;
    }
  }
  *num = bn;
  *denom = bd;
}

/* CMYK as JPEG stores it (Adobe's inverted convention, which libjpeg passes through) to RGB as PIL
 * converts it: R = C * K / 255 of the stored values, likewise G (M) and B (Y); gray then by PIL's
 * L = (299 R + 587 G + 114 B) / 1000. In place: output pixel i is never after input pixel i. */
static void cmyk_to(uint8_t *p, size_t n, int channels) {
  for (size_t i = 0; i < n; i++) {
    const uint8_t *q = p + 4 * i;
    unsigned k = q[3];
    unsigned r = (q[0] * k + 127) / 255, g = (q[1] * k + 127) / 255, b = (q[2] * k + 127) / 255;
    if (channels == 1) {
      p[i] = (uint8_t)((299 * r + 587 * g + 114 * b + 500) / 1000);
    } else {
      p[3 * i] = (uint8_t)r;
      p[3 * i + 1] = (uint8_t)g;
      p[3 * i + 2] = (uint8_t)b;
    }
  }
}

vl_status vl_jpeg_decode(vl_jpeg_decoder *d, const void *buf, size_t len, const char *name, int channels,
                         int num, int denom, uint8_t **pixels, size_t *cap, int *out_w, int *out_h) {
  if (channels != 1 && channels != 3)
    return vl_fail(VL_EINVAL, "decode_jpeg: channels must be 1 or 3, got %d", channels);
  int w, h, stored;
  VL_TRY(vl_jpeg_header(d, buf, len, name, &w, &h, &stored));
  int sw = vl_jpeg_scaled(w, num, denom), sh = vl_jpeg_scaled(h, num, denom);
  /* CMYK (a few photos of ImageNet's training set) is decoded as it is stored, then converted. */
  int dc = stored == 4 ? 4 : channels;
  size_t need = (size_t)sw * (size_t)sh * (size_t)dc;
  if (need > *cap) {
    uint8_t *p = realloc(*pixels, need);
    if (!p) return vl_fail(VL_EOOM, "decode_jpeg: %s: out of host memory for %dx%dx%d pixels", name, sh, sw, channels);
    *pixels = p;
    *cap = need;
  }
  int pf = dc == 4 ? TJPF_CMYK : channels == 1 ? TJPF_GRAY : TJPF_RGB;
  /* The accurate integer IDCT (libjpeg's default, what PIL uses): with SIMD it costs little more
   * than the fast one, and evaluation should see the pixels torchvision sees. */
  if (tjDecompress2(d->tj, (const unsigned char *)buf, (unsigned long)len, *pixels, sw, sw * dc, sh, pf, 0) != 0) {
    const char *msg = tjGetErrorStr2(d->tj);
    /* Warnings leave a complete image, except at a premature end (the rest is grey). */
    if (tjGetErrorCode(d->tj) != TJERR_WARNING || strstr(msg, "Premature end"))
      return vl_fail(VL_EIO, "decode_jpeg: %s: %s", name, msg);
  }
  if (dc == 4) cmyk_to(*pixels, (size_t)sw * sh, channels);
  *out_w = sw;
  *out_h = sh;
  return VL_OK;
}

vl_status vl_jpeg_encode(const uint8_t *pixels, int width, int height, int channels, int quality,
                         uint8_t **jpeg, size_t *len) {
  if (channels != 1 && channels != 3)
    return vl_fail(VL_EINVAL, "encode_jpeg: images must have 1 or 3 channels, got %d", channels);
  if (quality < 1 || quality > 100) return vl_fail(VL_EINVAL, "encode_jpeg: quality must be in 1..100, got %d", quality);
  if (width <= 0 || height <= 0 || width > 65535 || height > 65535)
    return vl_fail(VL_EINVAL, "encode_jpeg: image of %dx%d pixels (JPEG allows 1..65535 per side)", height, width);
  tjhandle tj = tjInitCompress();
  if (!tj) return vl_fail(VL_EINTERNAL, "encode_jpeg: tjInitCompress failed: %s", tjGetErrorStr2(NULL));
  unsigned char *out = NULL;
  unsigned long n = 0;
  int rc = tjCompress2(tj, pixels, width, width * channels, height, channels == 1 ? TJPF_GRAY : TJPF_RGB, &out, &n,
                       channels == 1 ? TJSAMP_GRAY : TJSAMP_444, quality, 0);
  vl_status s = VL_OK;
  if (rc != 0) {
    s = vl_fail(VL_EIO, "encode_jpeg: %s", tjGetErrorStr2(tj));
  } else {
    *jpeg = malloc(n);
    if (!*jpeg) s = vl_fail(VL_EOOM, "encode_jpeg: out of host memory for %lu bytes", n);
    else {
      memcpy(*jpeg, out, n);
      *len = n;
    }
  }
  tjFree(out);
  tjDestroy(tj);
  return s;
}

vl_status vl_read_file(const char *op, const char *path, uint8_t **buf, size_t *cap, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return vl_fail(VL_EIO, "%s: %s: %s", op, path, strerror(errno));
  vl_status s = VL_OK;
  long size = -1;
  if (fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
    s = vl_fail(VL_EIO, "%s: %s: %s", op, path, strerror(errno)); /* a directory or a pipe */
  } else if (size == 0) {
    s = vl_fail(VL_EIO, "%s: %s: empty file", op, path);
  } else {
    if ((size_t)size > *cap) {
      uint8_t *p = realloc(*buf, (size_t)size);
      if (!p) s = vl_fail(VL_EOOM, "%s: %s: out of host memory for %ld bytes", op, path, size);
      else {
        *buf = p;
        *cap = (size_t)size;
      }
    }
    if (s == VL_OK && fread(*buf, 1, (size_t)size, f) != (size_t)size)
      s = vl_fail(VL_EIO, "%s: %s: %s", op, path, ferror(f) ? strerror(errno) : "file shrank while read");
    if (s == VL_OK) *len = (size_t)size;
  }
  fclose(f);
  return s;
}

vl_status vl_image_decode(const void *buf, size_t len, const char *name, int channels, vl_tensor **out) {
  if (channels != 1 && channels != 3)
    return vl_fail(VL_EINVAL, "decode_jpeg: channels must be 1 or 3, got %d", channels);
  vl_jpeg_decoder *d = NULL;
  VL_TRY(vl_jpeg_decoder_new(&d));
  uint8_t *px = NULL;
  size_t cap = 0;
  int w = 0, h = 0;
  vl_tensor *t = NULL;
  vl_status s = vl_jpeg_decode(d, buf, len, name, channels, 1, 1, &px, &cap, &w, &h);
  if (s == VL_OK) {
    int64_t size[3] = {h, w, channels};
    s = vl_tensor_empty(3, size, VL_U8, vl_cpu_device(), &t);
    if (s == VL_OK) memcpy(vl_tensor_data(t), px, (size_t)w * h * channels);
  }
  free(px);
  vl_jpeg_decoder_free(d);
  if (s == VL_OK) *out = t;
  return s;
}

vl_status vl_image_decode_file(const char *path, int channels, vl_tensor **out) {
  uint8_t *buf = NULL;
  size_t cap = 0, len = 0;
  vl_status s = vl_read_file("decode_jpeg", path, &buf, &cap, &len);
  if (s == VL_OK) s = vl_image_decode(buf, len, path, channels, out);
  free(buf);
  return s;
}

vl_status vl_image_encode_file(vl_tensor *img, const char *path, int quality) {
  char desc[256];
  if (img->storage->device.type != VL_CPU || img->dtype != VL_U8 || img->ndim != 3 ||
      (img->size[2] != 1 && img->size[2] != 3))
    return vl_fail(VL_EINVAL, "encode_jpeg: the image must be a u8 HxWxC CPU tensor with C = 1 or 3 (got %s)",
                   vl_tensor_desc(img, desc, sizeof desc));
  if (img->size[0] > 65535 || img->size[1] > 65535 || img->size[0] == 0 || img->size[1] == 0)
    return vl_fail(VL_EINVAL, "encode_jpeg: image of %lldx%lld pixels (JPEG allows 1..65535 per side)",
                   (long long)img->size[0], (long long)img->size[1]);
  vl_tensor *c = NULL;
  VL_TRY(vl_contiguous(img, &c));
  uint8_t *jpeg = NULL;
  size_t len = 0;
  vl_status s = vl_jpeg_encode(vl_tensor_data(c), (int)c->size[1], (int)c->size[0], (int)c->size[2], quality,
                               &jpeg, &len);
  vl_tensor_release(c);
  if (s != VL_OK) return s;
  /* Through replace.c like every writer (its symlink rule, no torn file at the path), without
   * the fsyncs: a data set export writes many small files, an fsync each would dominate. */
  vl_replace rp;
  s = vl_replace_begin(&rp, "encode_jpeg", path);
  if (s == VL_OK) {
    rp.no_sync = 1;
    const unsigned char *p = jpeg;
    size_t left = len;
    while (left > 0) {
      ssize_t w = write(rp.fd, p, left);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        s = vl_fail(VL_EIO, "encode_jpeg: %s: %s", path, w < 0 ? strerror(errno) : "no progress");
        break;
      }
      p += w, left -= (size_t)w;
    }
    if (s == VL_OK) s = vl_replace_commit(&rp);
    vl_replace_abort(&rp); /* removes the temporary file unless committed */
  }
  free(jpeg);
  return s;
}
