/* tests/c/test_image.c: ext/data (JPEG decode/encode, DCT scale choice, the torchvision
 * transforms' geometry, resampling, the ImageFolder scan) on generated images. */
#define _DEFAULT_SOURCE
#include "vl_test.h"

#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

#include "ext/data/folder.h"
#include "ext/data/image.h"
#include "ext/data/transform.h"

static char dir[512];

/* A smooth image with some texture: what JPEG keeps well. */
static uint8_t *make_image(int h, int w, int c) {
  uint8_t *p = malloc((size_t)h * w * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < c; k++) {
        double v = 128 + 90 * sin(0.11 * x + 0.07 * y + k) * cos(0.05 * y - 0.3 * k);
        p[((size_t)y * w + x) * c + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  return p;
}

static void diff(const uint8_t *a, const uint8_t *b, size_t n, double *mean, int *max) {
  double s = 0;
  int m = 0;
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)a[i] - (int)b[i]);
    s += d;
    if (d > m) m = d;
  }
  *mean = s / (double)n;
  *max = m;
}

static void test_round_trip(void) {
  for (int c = 1; c <= 3; c += 2) {
    int h = 61, w = 83; /* not multiples of the 8x8 blocks */
    uint8_t *img = make_image(h, w, c), *jpeg = NULL, *px = NULL;
    size_t len = 0, cap = 0;
    CHECK_OK(vl_jpeg_encode(img, w, h, c, 95, &jpeg, &len));
    CHECK(len > 100 && jpeg[0] == 0xFF && jpeg[1] == 0xD8);
    vl_jpeg_decoder *d = NULL;
    CHECK_OK(vl_jpeg_decoder_new(&d));
    int W = 0, H = 0, stored = 0;
    CHECK_OK(vl_jpeg_header(d, jpeg, len, "<mem>", &W, &H, &stored));
    CHECK(W == w && H == h && stored == c, "header %dx%d c%d", H, W, stored);
    int ow = 0, oh = 0;
    CHECK_OK(vl_jpeg_decode(d, jpeg, len, "<mem>", c, 1, 1, &px, &cap, &ow, &oh));
    CHECK(ow == w && oh == h);
    double mean;
    int max;
    diff(img, px, (size_t)h * w * c, &mean, &max);
    /* Quality 95, 4:4:4: a few grey levels on average. */
    CHECK(mean < 2.0 && max < 40, "channels %d: mean abs %.3f max %d", c, mean, max);
    if (c == 1) {
      /* A gray JPEG decoded to RGB replicates the channel. */
      uint8_t *rgb = NULL;
      size_t rcap = 0;
      CHECK_OK(vl_jpeg_decode(d, jpeg, len, "<mem>", 3, 1, 1, &rgb, &rcap, &ow, &oh));
      int same = 1;
      for (int i = 0; i < h * w; i++) same &= rgb[3 * i] == px[i] && rgb[3 * i + 1] == px[i] && rgb[3 * i + 2] == px[i];
      CHECK(same);
      free(rgb);
    }
    /* Tensor front end. */
    vl_tensor *t = NULL;
    CHECK_OK(vl_image_decode(jpeg, len, "<mem>", c, &t));
    CHECK(t && t->ndim == 3 && t->size[0] == h && t->size[1] == w && t->size[2] == c && t->dtype == VL_U8);
    if (t) CHECK(memcmp(vl_tensor_data(t), px, (size_t)h * w * c) == 0);
    char path[600];
    snprintf(path, sizeof path, "%s/rt%d.jpg", dir, c);
    CHECK_OK(vl_image_encode_file(t, path, 90));
    vl_tensor *u = NULL;
    CHECK_OK(vl_image_decode_file(path, c, &u));
    CHECK(u && u->size[0] == h && u->size[1] == w);
    vl_tensor_release(u);
    vl_tensor_release(t);
    vl_jpeg_decoder_free(d);
    free(img);
    free(jpeg);
    free(px);
  }
}

/* A CMYK JPEG (TurboJPEG writes YCCK from CMYK pixels) decodes to RGB as PIL converts it. */
static void test_cmyk(void) {
  int h = 16, w = 24;
  uint8_t *cmyk = malloc((size_t)h * w * 4);
  for (int i = 0; i < h * w; i++) {
    cmyk[4 * i] = (uint8_t)(200 + (i % 7));
    cmyk[4 * i + 1] = 120;
    cmyk[4 * i + 2] = 40;
    cmyk[4 * i + 3] = (uint8_t)(230 - (i / w));
  }
  tjhandle tj = tjInitCompress();
  unsigned char *jpeg = NULL;
  unsigned long len = 0;
  CHECK(tjCompress2(tj, cmyk, w, w * 4, h, TJPF_CMYK, &jpeg, &len, TJSAMP_444, 98, 0) == 0);
  tjDestroy(tj);
  vl_jpeg_decoder *d = NULL;
  CHECK_OK(vl_jpeg_decoder_new(&d));
  int W, H, stored;
  CHECK_OK(vl_jpeg_header(d, jpeg, len, "<cmyk>", &W, &H, &stored));
  CHECK(stored == 4);
  uint8_t *px = NULL, *gray = NULL;
  size_t cap = 0, gcap = 0;
  int ow, oh;
  CHECK_OK(vl_jpeg_decode(d, jpeg, len, "<cmyk>", 3, 1, 1, &px, &cap, &ow, &oh));
  CHECK_OK(vl_jpeg_decode(d, jpeg, len, "<cmyk>", 1, 1, 1, &gray, &gcap, &ow, &oh));
  int worst = 0, worst_g = 0;
  for (int i = 0; i < h * w; i++) {
    int r = 0, g = 0, b = 0;
    for (int c = 0; c < 3; c++) {
      int e = (cmyk[4 * i + c] * cmyk[4 * i + 3] + 127) / 255, dd = abs(e - px[3 * i + c]);
      if (dd > worst) worst = dd;
      if (c == 0) r = e; else if (c == 1) g = e; else b = e;
    }
    int l = (299 * r + 587 * g + 114 * b + 500) / 1000, dg = abs(l - gray[i]);
    if (dg > worst_g) worst_g = dg;
  }
  CHECK(worst <= 6 && worst_g <= 6, "CMYK -> RGB off by %d, gray by %d (JPEG error at quality 98)", worst, worst_g);
  vl_jpeg_decoder_free(d);
  tjFree(jpeg);
  free(cmyk);
  free(px);
  free(gray);
}

static void test_scale_choice(void) {
  int num, den;
  vl_jpeg_pick_scale(800, 600, 224, 224, &num, &den);
  CHECK(num * 8 == 3 * den, "800x600 -> %d/%d", num, den); /* 600 * 3/8 = 225 >= 224, 2/8 gives 150 */
  vl_jpeg_pick_scale(1792, 1792, 224, 224, &num, &den);
  CHECK(num * 8 == den, "1792 -> %d/%d", num, den);
  vl_jpeg_pick_scale(224, 300, 224, 224, &num, &den);
  CHECK(num == den);
  vl_jpeg_pick_scale(100, 100, 224, 224, &num, &den); /* never above 1 */
  CHECK(num == 1 && den == 1);
  /* In general: the factor covers the target and is the smallest that does. */
  int n = 0;
  tjscalingfactor_dummy:;
  for (int trial = 0; trial < 2000; trial++) {
    int cw = 1 + (int)(vl_test_urand() * 3000), ch = 1 + (int)(vl_test_urand() * 3000), need = 1 + (int)(vl_test_urand() * 400);
    vl_jpeg_pick_scale(cw, ch, need, need, &num, &den);
    double f = (double)num / den;
    bool covers = f >= 1.0 || (cw * f >= need - 1e-9 && ch * f >= need - 1e-9);
    bool below1 = f <= 1.0;
    /* A smaller eighth would not cover (libjpeg-turbo 2.x offers every k/8 and a few k/16). */
    int k8 = (int)floor(f * 8 + 1e-9);
    bool minimal = k8 <= 1 || f >= 1.0 ? true : !((cw * (k8 - 1)) >= need * 8 && (ch * (k8 - 1)) >= need * 8);
    if (!(covers && below1 && minimal)) n++;
  }
  CHECK(n == 0, "%d of 2000 random crops got a wrong factor", n);
  CHECK(vl_jpeg_scaled(375, 3, 8) == 141 && vl_jpeg_scaled(500, 1, 8) == 63);
  /* A decode at a scale gives the scaled size. */
  uint8_t *img = make_image(375, 500, 3), *jpeg = NULL, *px = NULL;
  size_t len = 0, cap = 0;
  CHECK_OK(vl_jpeg_encode(img, 500, 375, 3, 90, &jpeg, &len));
  vl_jpeg_decoder *d = NULL;
  CHECK_OK(vl_jpeg_decoder_new(&d));
  int ow, oh;
  CHECK_OK(vl_jpeg_decode(d, jpeg, len, "<mem>", 3, 3, 8, &px, &cap, &ow, &oh));
  CHECK(ow == 188 && oh == 141, "3/8 of 500x375 decoded as %dx%d", ow, oh);
  vl_jpeg_decoder_free(d);
  free(img);
  free(jpeg);
  free(px);
}

static void test_corrupt(void) {
  uint8_t *img = make_image(64, 64, 3), *jpeg = NULL, *px = NULL;
  size_t len = 0, cap = 0;
  CHECK_OK(vl_jpeg_encode(img, 64, 64, 3, 90, &jpeg, &len));
  vl_jpeg_decoder *d = NULL;
  CHECK_OK(vl_jpeg_decoder_new(&d));
  int ow, oh;
  /* Truncated: the header parses, the data ends early. */
  CHECK_ERR(vl_jpeg_decode(d, jpeg, len / 2, "cut.jpg", 3, 1, 1, &px, &cap, &ow, &oh), VL_EIO, "cut.jpg: ");
  /* Not a JPEG at all. */
  uint8_t junk[256];
  for (int i = 0; i < 256; i++) junk[i] = (uint8_t)(vl_test_urand() * 256);
  junk[0] = 'P';
  CHECK_ERR(vl_jpeg_decode(d, junk, sizeof junk, "junk.jpg", 3, 1, 1, &px, &cap, &ow, &oh), VL_EIO, "junk.jpg: not a readable JPEG");
  /* The marker, then garbage. */
  junk[0] = 0xFF;
  junk[1] = 0xD8;
  CHECK_ERR(vl_jpeg_decode(d, junk, sizeof junk, "bad.jpg", 3, 1, 1, &px, &cap, &ow, &oh), VL_EIO, "bad.jpg");
  CHECK_ERR(vl_jpeg_decode(d, jpeg, len, "x", 2, 1, 1, &px, &cap, &ow, &oh), VL_EINVAL, "channels must be 1 or 3");
  vl_tensor *t = NULL;
  char path[600];
  snprintf(path, sizeof path, "%s/missing.jpg", dir);
  CHECK_ERR(vl_image_decode_file(path, 3, &t), VL_EIO, "missing.jpg: No such file");
  snprintf(path, sizeof path, "%s/empty.jpg", dir);
  FILE *f = fopen(path, "wb");
  fclose(f);
  CHECK_ERR(vl_image_decode_file(path, 3, &t), VL_EIO, "empty.jpg: empty file");
  CHECK(t == NULL);
  CHECK_ERR(vl_jpeg_encode(img, 64, 64, 3, 0, &jpeg, &len), VL_EINVAL, "quality must be in 1..100");
  vl_jpeg_decoder_free(d);
  free(img);
  free(jpeg);
  free(px);
}

static void test_rrc(void) {
  const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
  int h = 375, w = 500, N = 20000, out = 0, fallback = 0;
  double area_sum = 0, logr_sum = 0;
  for (int i = 0; i < N; i++) {
    vl_box b;
    vl_rrc_box(7, 3, (uint64_t)i, h, w, scale, ratio, &b);
    if (!(b.y >= 0 && b.x >= 0 && b.h >= 1 && b.w >= 1 && b.y + b.h <= h && b.x + b.w <= w) || b.y != floor(b.y) ||
        b.h != floor(b.h))
      out++;
    double frac = b.h * b.w / (h * w), r = b.w / b.h;
    /* Rounded sides move the area and ratio a little beyond the ranges on small boxes. */
    if (frac < 0.07 || frac > 1.0 || r < 0.7 || r > 1.43) fallback++;
    area_sum += frac;
    logr_sum += log(r);
  }
  CHECK(out == 0, "%d boxes out of bounds", out);
  CHECK(fallback == 0, "%d boxes outside scale/ratio", fallback);
  /* The distribution of torchvision's algorithm (a Monte Carlo run of its Python code, 2e5 draws
   * on 375 x 500: mean area fraction 0.4330, mean log(w / h) 0.0309: wide boxes fit a wide image
   * more often); 20000 draws give standard errors of 0.002 and 0.001. */
  double am = area_sum / N, lm = logr_sum / N;
  CHECK(fabs(am - 0.4330) < 0.008, "mean area fraction %.4f", am);
  CHECK(fabs(lm - 0.0309) < 0.005, "mean log ratio %.4f", lm);
  /* Keyed by (seed, epoch, index). */
  vl_box a, b, c;
  vl_rrc_box(7, 3, 11, h, w, scale, ratio, &a);
  vl_rrc_box(7, 3, 11, h, w, scale, ratio, &b);
  CHECK(memcmp(&a, &b, sizeof a) == 0);
  int differ = 0;
  for (uint32_t e = 4; e < 14; e++) {
    vl_rrc_box(7, e, 11, h, w, scale, ratio, &c);
    differ += memcmp(&a, &c, sizeof a) != 0;
  }
  CHECK(differ >= 9, "other epochs gave the same box %d of 10 times", 10 - differ);
  /* A thin image never fits a box of ratio >= 3/4 at large area: the fallback centres the
   * largest box with the extreme ratio. */
  vl_box f;
  const double tight[2] = {0.99, 1.0};
  vl_rrc_box(1, 0, 0, 10, 400, tight, ratio, &f);
  CHECK(f.h == 10 && f.w == 13 && f.y == 0 && f.x == (400 - 13) / 2, "fallback %gx%g at %g,%g", f.h, f.w, f.y, f.x);
  vl_rrc_box(1, 0, 0, 400, 10, tight, ratio, &f);
  CHECK(f.w == 10 && f.h == 13 && f.x == 0 && f.y == (400 - 13) / 2);
  int flips = 0;
  for (int i = 0; i < N; i++) flips += vl_flip_draw(7, 3, (uint64_t)i, 0.5);
  CHECK(flips > N * 0.48 && flips < N * 0.52, "%d flips of %d", flips, N);
  CHECK(!vl_flip_draw(7, 3, 5, 0.0) && vl_flip_draw(7, 3, 5, 1.0));
}

static void test_center_crop(void) {
  vl_box b;
  /* 375 x 500: resized to 256 x 341 (int(256 * 500 / 375) = 341), crop at top round(16) = 16, left
   * round(58.5) = 58 (half to even). */
  vl_center_crop_box(375, 500, 256, 224, &b);
  CHECK(fabs(b.y - 16 * 375.0 / 256) < 1e-9 && fabs(b.h - 224 * 375.0 / 256) < 1e-9, "y %g h %g", b.y, b.h);
  CHECK(fabs(b.x - 58 * 500.0 / 341) < 1e-9 && fabs(b.w - 224 * 500.0 / 341) < 1e-9, "x %g w %g", b.x, b.w);
  /* Portrait: the width is the shorter side. */
  vl_center_crop_box(500, 375, 256, 224, &b);
  CHECK(fabs(b.x - 16 * 375.0 / 256) < 1e-9 && fabs(b.y - 58 * 500.0 / 341) < 1e-9);
  /* Square 256: the crop is the centre 224. */
  vl_center_crop_box(256, 256, 256, 224, &b);
  CHECK(b.y == 16 && b.x == 16 && b.h == 224 && b.w == 224);
}

static void test_resample(void) {
  int h = 9, w = 7, c = 3;
  uint8_t *img = make_image(h, w, c);
  float mean[3] = {0, 0, 0}, sd[3] = {1, 1, 1};
  float *o = malloc(sizeof(float) * h * w * c), *f = malloc(sizeof(float) * h * w * c), *n = malloc(sizeof(float) * h * w * c);
  vl_box full = {0, 0, h, w};
  CHECK_OK(vl_resample(img, h, w, c, &full, h, w, false, mean, sd, VL_F32, false, o));
  CHECK_OK(vl_resample(img, h, w, c, &full, h, w, true, mean, sd, VL_F32, false, f));
  CHECK_OK(vl_resample(img, h, w, c, &full, h, w, false, mean, sd, VL_F32, true, n));
  int exact = 1, flip = 1, nhwc = 1;
  for (int k = 0; k < c; k++)
    for (int y = 0; y < h; y++)
      for (int x = 0; x < w; x++) {
        float p = img[(y * w + x) * c + k] / 255.0f;
        exact &= fabsf(o[(k * h + y) * w + x] - p) < 1e-6f;
        flip &= fabsf(f[(k * h + y) * w + (w - 1 - x)] - p) < 1e-6f;
        nhwc &= fabsf(n[(y * w + x) * c + k] - p) < 1e-6f;
      }
  CHECK(exact && flip && nhwc, "identity %d flip %d nhwc %d", exact, flip, nhwc);
  /* Normalisation, and a half-size resample averaging 2x2 blocks (bilinear at the centres). */
  float m2[3] = {0.5f, 0.25f, 0.125f}, s2[3] = {0.5f, 0.25f, 2.0f};
  uint8_t flat[4 * 4 * 3];
  for (int i = 0; i < 48; i++) flat[i] = (uint8_t)((i / 3) % 4 < 2 ? 100 : 200);
  float q[2 * 2 * 3];
  vl_box fb = {0, 0, 4, 4};
  CHECK_OK(vl_resample(flat, 4, 4, 3, &fb, 2, 2, false, m2, s2, VL_F32, false, q));
  /* Columns 0-1 are 100, 2-3 are 200: output column 0 samples source x = 0.5, column 1 x = 2.5. */
  for (int k = 0; k < 3; k++) {
    float e0 = (100.0f / 255 - m2[k]) / s2[k], e1 = (200.0f / 255 - m2[k]) / s2[k];
    CHECK(fabsf(q[k * 4] - e0) < 1e-5f && fabsf(q[k * 4 + 1] - e1) < 1e-5f && fabsf(q[k * 4 + 3] - e1) < 1e-5f,
          "channel %d: %g %g vs %g %g", k, q[k * 4], q[k * 4 + 1], e0, e1);
  }
  uint16_t hb[2 * 2 * 3];
  CHECK_OK(vl_resample(flat, 4, 4, 3, &fb, 2, 2, false, m2, s2, VL_BF16, false, hb));
  CHECK(fabsf(vl_bf16_to_f32(hb[0]) - q[0]) < 1e-2f);
  uint8_t up[8 * 8 * 3];
  CHECK_OK(vl_resample_u8(flat, 4, 4, 3, 8, 8, up));
  CHECK(up[0] == 100 && up[(8 * 8 - 1) * 3] == 200);
  free(img);
  free(o);
  free(f);
  free(n);
}

static void touch(const char *rel) {
  char p[700];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  FILE *f = fopen(p, "wb");
  if (f) {
    fputs("x", f);
    fclose(f);
  }
}

static void mk(const char *rel) {
  char p[700];
  snprintf(p, sizeof p, "%s/%s", dir, rel);
  mkdir(p, 0777);
}

static void test_folder(void) {
  mk("f");
  mk("f/zebra");
  mk("f/ant");
  mk("f/.hidden");
  touch("f/zebra/b.JPEG");
  touch("f/zebra/a.jpg");
  touch("f/zebra/notes.txt");
  touch("f/ant/x.jpeg");
  touch("f/ant/.y.jpg");
  touch("f/.hidden/z.jpg");
  touch("f/README");
  char root[600];
  snprintf(root, sizeof root, "%s/f", dir);
  vl_folder *f = NULL;
  CHECK_OK(vl_folder_scan(root, &f));
  if (f) {
    CHECK(f->nclasses == 2 && strcmp(f->classes[0], "ant") == 0 && strcmp(f->classes[1], "zebra") == 0);
    CHECK(f->n == 3);
    if (f->n == 3) {
      CHECK(strstr(f->paths[0], "/f/ant/x.jpeg") && f->labels[0] == 0);
      CHECK(strstr(f->paths[1], "/f/zebra/a.jpg") && f->labels[1] == 1);
      CHECK(strstr(f->paths[2], "/f/zebra/b.JPEG") && f->labels[2] == 1);
    }
    vl_folder_release(f);
  }
  mk("f/empty");
  vl_folder *g = NULL;
  CHECK_ERR(vl_folder_scan(root, &g), VL_EIO, "f/empty has no .jpg/.jpeg files");
  CHECK(g == NULL);
  mk("g");
  snprintf(root, sizeof root, "%s/g", dir);
  CHECK_ERR(vl_folder_scan(root, &g), VL_EIO, "has no class directories");
  snprintf(root, sizeof root, "%s/nope", dir);
  CHECK_ERR(vl_folder_scan(root, &g), VL_EIO, "nope: No such file");
}

int main(void) {
  vl_test_seed();
  const char *tmp = getenv("TMPDIR");
  snprintf(dir, sizeof dir, "%s/test_image.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return 2;
  }
  test_round_trip();
  test_cmyk();
  test_scale_choice();
  test_corrupt();
  test_rrc();
  test_center_crop();
  test_resample();
  test_folder();
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) printf("could not remove %s\n", dir);
  return vl_test_finish();
}
