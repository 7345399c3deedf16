/* kernels/cpu/cpu_conv.c: 2-D convolution on the CPU: im2col + OpenBLAS GEMM, per image and
 * group, for the forward, the data gradient (GEMM + col2im) and the filter gradient.
 *
 * Compute type: f64 for f64 data, f32 otherwise. f32/f64 operands are used in place; f16/bf16
 * images, weights and gradients are widened into f32 buffers once (per image) and results rounded
 * back once, so the GEMMs always run on dense f32/f64 memory.
 *
 * Matrix shapes (one image, group g; Cg = C/groups, Kg = K/groups, RSC = Cg*R*S, PQ = P*Q):
 *   NCHW: col [RSC x PQ] rows (c, r, s);  weight g [Kg x RSC];  y g = W g * col      [Kg x PQ]
 *   NHWC: col [PQ x RSC] cols (r, s, c);  weight g [Kg x RSC];  y g = col * W g^T    [PQ x Kg], ld K
 * A 1x1 convolution with stride 1 and no padding needs no im2col: the image already is col. */
#include <cblas.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "runtime/backend/nn_kernels.h"

typedef struct geo {
  int64_t c, h, w;      /* channels of the group, input size */
  int64_t cs;           /* NHWC: channel count of the whole image (pixel stride); NCHW: unused */
  int64_t r, s, p, q;
  int64_t sh, sw, ph, pw, dh, dw;
} geo;

/* Output positions q in [lo, hi) read an in-range column iw = q*sw - pw + off (off = s*dw). */
static void valid_range(int64_t off, int64_t stride, int64_t pad, int64_t in, int64_t out, int64_t *lo,
                        int64_t *hi) {
  /* q*stride >= pad - off  and  q*stride <= in - 1 + pad - off */
  int64_t a = pad - off, b = in - 1 + pad - off;
  int64_t l = a <= 0 ? 0 : (a + stride - 1) / stride;
  int64_t h = b < 0 ? 0 : b / stride + 1;
  if (h > out) h = out;
  if (l > h) l = h;
  *lo = l;
  *hi = h;
}

/* Typed im2col / col2im, generated for float and double. col2im accumulates (x += ...). */
#define VL_CONV_IM2COL(T, SUF)                                                                          \
  static void im2col_nchw_##SUF(const T *x, const geo *g, T *col) {                                  \
    int64_t pq = g->p * g->q;                                                                         \
    for (int64_t c = 0; c < g->c; c++)                                                                \
      for (int64_t r = 0; r < g->r; r++)                                                              \
        for (int64_t s = 0; s < g->s; s++) {                                                          \
          T *out = col + ((c * g->r + r) * g->s + s) * pq;                                            \
          int64_t qlo, qhi;                                                                           \
          valid_range(s * g->dw, g->sw, g->pw, g->w, g->q, &qlo, &qhi);                               \
          for (int64_t p = 0; p < g->p; p++) {                                                        \
            T *o = out + p * g->q;                                                                    \
            int64_t ih = p * g->sh - g->ph + r * g->dh;                                               \
            if (ih < 0 || ih >= g->h) {                                                               \
              memset(o, 0, sizeof(T) * (size_t)g->q);                                                 \
              continue;                                                                               \
            }                                                                                         \
            const T *row = x + (c * g->h + ih) * g->w;                                                \
            int64_t off = s * g->dw - g->pw; /* iw = q*sw + off, in range for q in [qlo, qhi) */      \
            for (int64_t q = 0; q < qlo; q++) o[q] = 0;                                               \
            if (g->sw == 1 && qhi > qlo)                                                              \
              memcpy(o + qlo, row + qlo + off, sizeof(T) * (size_t)(qhi - qlo));                      \
            else                                                                                      \
              for (int64_t q = qlo; q < qhi; q++) o[q] = row[q * g->sw + off];                        \
            for (int64_t q = qhi; q < g->q; q++) o[q] = 0;                                            \
          }                                                                                           \
        }                                                                                             \
  }                                                                                                   \
  static void col2im_nchw_##SUF(const T *col, const geo *g, T *x) {                                  \
    int64_t pq = g->p * g->q;                                                                         \
    for (int64_t c = 0; c < g->c; c++)                                                                \
      for (int64_t r = 0; r < g->r; r++)                                                              \
        for (int64_t s = 0; s < g->s; s++) {                                                          \
          const T *in = col + ((c * g->r + r) * g->s + s) * pq;                                       \
          int64_t qlo, qhi;                                                                           \
          valid_range(s * g->dw, g->sw, g->pw, g->w, g->q, &qlo, &qhi);                               \
          for (int64_t p = 0; p < g->p; p++) {                                                        \
            int64_t ih = p * g->sh - g->ph + r * g->dh;                                               \
            if (ih < 0 || ih >= g->h) continue;                                                       \
            const T *i = in + p * g->q;                                                               \
            T *row = x + (c * g->h + ih) * g->w;                                                      \
            int64_t off = s * g->dw - g->pw;                                                          \
            for (int64_t q = qlo; q < qhi; q++) row[q * g->sw + off] += i[q];                         \
          }                                                                                           \
        }                                                                                             \
  }                                                                                                   \
  /* x points at the group's first channel of pixel (0, 0); pixels are g->cs apart. */               \
  static void im2col_nhwc_##SUF(const T *x, const geo *g, T *col) {                                  \
    int64_t rsc = g->r * g->s * g->c;                                                                 \
    for (int64_t p = 0; p < g->p; p++)                                                                \
      for (int64_t q = 0; q < g->q; q++) {                                                            \
        T *o = col + (p * g->q + q) * rsc;                                                            \
        for (int64_t r = 0; r < g->r; r++) {                                                          \
          int64_t ih = p * g->sh - g->ph + r * g->dh;                                                 \
          for (int64_t s = 0; s < g->s; s++, o += g->c) {                                             \
            int64_t iw = q * g->sw - g->pw + s * g->dw;                                               \
            if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w)                                         \
              memset(o, 0, sizeof(T) * (size_t)g->c);                                                 \
            else                                                                                      \
              memcpy(o, x + (ih * g->w + iw) * g->cs, sizeof(T) * (size_t)g->c);                      \
          }                                                                                           \
        }                                                                                             \
      }                                                                                               \
  }                                                                                                   \
  static void col2im_nhwc_##SUF(const T *col, const geo *g, T *x) {                                  \
    int64_t rsc = g->r * g->s * g->c;                                                                 \
    for (int64_t p = 0; p < g->p; p++)                                                                \
      for (int64_t q = 0; q < g->q; q++) {                                                            \
        const T *i = col + (p * g->q + q) * rsc;                                                      \
        for (int64_t r = 0; r < g->r; r++) {                                                          \
          int64_t ih = p * g->sh - g->ph + r * g->dh;                                                 \
          for (int64_t s = 0; s < g->s; s++, i += g->c) {                                             \
            int64_t iw = q * g->sw - g->pw + s * g->dw;                                               \
            if (ih < 0 || ih >= g->h || iw < 0 || iw >= g->w) continue;                               \
            T *o = x + (ih * g->w + iw) * g->cs;                                                      \
            for (int64_t c = 0; c < g->c; c++) o[c] += i[c];                                          \
          }                                                                                           \
        }                                                                                             \
      }                                                                                               \
  }

VL_CONV_IM2COL(float, f32)
VL_CONV_IM2COL(double, f64)

static void im2col(bool dbl, bool nhwc, const void *x, const geo *g, void *col) {
  if (dbl) (nhwc ? im2col_nhwc_f64 : im2col_nchw_f64)((const double *)x, g, (double *)col);
  else (nhwc ? im2col_nhwc_f32 : im2col_nchw_f32)((const float *)x, g, (float *)col);
}
static void col2im(bool dbl, bool nhwc, const void *col, const geo *g, void *x) {
  if (dbl) (nhwc ? col2im_nhwc_f64 : col2im_nchw_f64)((const double *)col, g, (double *)x);
  else (nhwc ? col2im_nhwc_f32 : col2im_nchw_f32)((const float *)col, g, (float *)x);
}

/* Row-major C[m x n] = op(A) op(B) + beta C, on one OpenBLAS thread: the count the backend's
 * GEMMs leave set, now from a process's first call on (before it, OpenBLAS's default of all
 * cores split the product otherwise, and a resumed run's first step differed in the last bits
 * from the uninterrupted run's). */
static void gemm(bool dbl, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda,
                 const void *b, int64_t ldb, double beta, void *c, int64_t ldc) {
  enum CBLAS_TRANSPOSE TA = ta ? CblasTrans : CblasNoTrans, TB = tb ? CblasTrans : CblasNoTrans;
  vl_cpu_blas_threads(1);
  if (dbl)
    cblas_dgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0, (const double *)a, (int)lda,
                (const double *)b, (int)ldb, beta, (double *)c, (int)ldc);
  else
    cblas_sgemm(CblasRowMajor, TA, TB, (int)m, (int)n, (int)k, 1.0f, (const float *)a, (int)lda,
                (const float *)b, (int)ldb, (float)beta, (float *)c, (int)ldc);
}

/* n elements of dtype dt to the compute type (f32 here: f64 data is never converted). */
static void widen(float *dst, const void *src, vl_dtype dt, int64_t n) {
  double buf[VL_CPU_BLOCK];
  int64_t es = (int64_t)vl_dtype_size(dt);
  for (int64_t i = 0; i < n; i += VL_CPU_BLOCK) {
    int64_t m = n - i < VL_CPU_BLOCK ? n - i : VL_CPU_BLOCK;
    vl_cpu_load_f64(buf, (const char *)src + i * es, es, dt, m);
    for (int64_t j = 0; j < m; j++) dst[i + j] = (float)buf[j];
  }
}
/* f32 back to dt, rounded once (f32 -> f64 is exact, f64 -> f16/bf16 correctly rounded). */
static void narrow(void *dst, vl_dtype dt, const float *src, int64_t n) {
  double buf[VL_CPU_BLOCK];
  int64_t es = (int64_t)vl_dtype_size(dt);
  for (int64_t i = 0; i < n; i += VL_CPU_BLOCK) {
    int64_t m = n - i < VL_CPU_BLOCK ? n - i : VL_CPU_BLOCK;
    for (int64_t j = 0; j < m; j++) buf[j] = src[i + j];
    vl_cpu_store_f64((char *)dst + i * es, es, dt, buf, m);
  }
}

/* Everything one call needs, derived once from the args. */
typedef struct plan {
  bool dbl, direct, nhwc, one; /* direct: data already in the compute type; one: 1x1, no im2col */
  size_t esc;                  /* compute element size */
  int64_t groups, cg, kg, hw, pq, rsc, img_x, img_y;
  geo g;
} plan;

static void make_plan(const vl_conv_args *a, plan *pl) {
  memset(pl, 0, sizeof *pl);
  pl->dbl = a->dtype == VL_F64;
  pl->direct = a->dtype == VL_F64 || a->dtype == VL_F32;
  pl->nhwc = a->nhwc;
  pl->esc = pl->dbl ? sizeof(double) : sizeof(float);
  pl->groups = a->groups;
  pl->cg = a->c / a->groups;
  pl->kg = a->k / a->groups;
  pl->hw = a->h * a->w;
  pl->pq = a->p * a->q;
  pl->rsc = pl->cg * a->r * a->s;
  pl->img_x = a->c * pl->hw;
  pl->img_y = a->k * pl->pq;
  pl->one = a->r == 1 && a->s == 1 && a->stride[0] == 1 && a->stride[1] == 1 && a->pad[0] == 0 && a->pad[1] == 0;
  geo *g = &pl->g;
  g->c = pl->cg;
  g->h = a->h;
  g->w = a->w;
  g->cs = a->c;
  g->r = a->r;
  g->s = a->s;
  g->p = a->p;
  g->q = a->q;
  g->sh = a->stride[0];
  g->sw = a->stride[1];
  g->ph = a->pad[0];
  g->pw = a->pad[1];
  g->dh = a->dilation[0];
  g->dw = a->dilation[1];
}

/* Scratch buffers of one call, freed together. */
typedef struct bufs {
  void *w, *x, *y, *col;
} bufs;

static void bufs_free(bufs *b) {
  free(b->w);
  free(b->x);
  free(b->y);
  free(b->col);
}

static vl_status alloc(const char *what, void **p, int64_t elems, size_t es) {
  size_t n = (size_t)(elems > 0 ? elems : 1) * es;
  *p = malloc(n);
  if (!*p) return vl_fail(VL_EOOM, "out of host memory for the %zu-byte %s buffer (cpu)", n, what);
  return VL_OK;
}

/* Allocates what the plan needs: a widened weight, per-image x and y/dy buffers (f16/bf16) and
 * the column matrix (unless 1x1). `wide_w` also widens the weight (forward/backward-data). */
static vl_status setup(const vl_conv_args *a, const plan *pl, bool wide_w, bufs *b) {
  memset(b, 0, sizeof *b);
  vl_status s = VL_OK;
  if (!pl->direct) {
    s = alloc("weight", &b->w, a->k * pl->rsc, pl->esc);
    if (s == VL_OK) s = alloc("image", &b->x, pl->img_x, pl->esc);
    if (s == VL_OK) s = alloc("output", &b->y, pl->img_y, pl->esc);
    if (s == VL_OK && wide_w) widen((float *)b->w, a->wt, a->dtype, a->k * pl->rsc);
  }
  if (s == VL_OK && !pl->one) s = alloc("column", &b->col, pl->rsc * pl->pq, pl->esc);
  if (s != VL_OK) bufs_free(b);
  return s;
}

/* Pointer to element i of a compute-type buffer. */
static inline void *at(const void *base, int64_t i, size_t es) { return (char *)base + (size_t)i * es; }

static vl_status conv_forward(const vl_conv_args *a) {
  plan pl;
  make_plan(a, &pl);
  bufs b;
  VL_TRY(setup(a, &pl, true, &b));
  const size_t es = vl_dtype_size(a->dtype), ec = pl.esc;
  const void *w = pl.direct ? a->wt : b.w;
  for (int64_t n = 0; n < a->n; n++) {
    const void *xi = (const char *)a->x + (size_t)(n * pl.img_x) * es;
    void *yi = (char *)a->y + (size_t)(n * pl.img_y) * es;
    if (!pl.direct) {
      widen((float *)b.x, xi, a->dtype, pl.img_x);
      xi = b.x;
      yi = b.y;
    }
    for (int64_t g = 0; g < pl.groups; g++) {
      const void *wg = at(w, g * pl.kg * pl.rsc, ec);
      if (!pl.nhwc) {
        const void *xg = at(xi, g * pl.cg * pl.hw, ec), *col = xg;
        if (!pl.one) im2col(pl.dbl, false, xg, &pl.g, b.col), col = b.col;
        gemm(pl.dbl, false, false, pl.kg, pl.pq, pl.rsc, wg, pl.rsc, col, pl.pq, 0.0, at(yi, g * pl.kg * pl.pq, ec),
             pl.pq);
      } else {
        const void *xg = at(xi, g * pl.cg, ec), *col = xg;
        int64_t ld = a->c;
        if (!pl.one) im2col(pl.dbl, true, xg, &pl.g, b.col), col = b.col, ld = pl.rsc;
        gemm(pl.dbl, false, true, pl.pq, pl.kg, pl.rsc, col, ld, wg, pl.rsc, 0.0, at(yi, g * pl.kg, ec), a->k);
      }
    }
    if (!pl.direct) narrow((char *)a->y + (size_t)(n * pl.img_y) * es, a->dtype, (const float *)b.y, pl.img_y);
  }
  bufs_free(&b);
  return VL_OK;
}

static vl_status conv_backward_data(const vl_conv_args *a) {
  plan pl;
  make_plan(a, &pl);
  bufs b;
  VL_TRY(setup(a, &pl, true, &b));
  const size_t es = vl_dtype_size(a->dtype), ec = pl.esc;
  const void *w = pl.direct ? a->wt : b.w;
  for (int64_t n = 0; n < a->n; n++) {
    const void *dyi = (const char *)a->dy + (size_t)(n * pl.img_y) * es;
    void *dxi = (char *)a->dx + (size_t)(n * pl.img_x) * es;
    if (!pl.direct) {
      widen((float *)b.y, dyi, a->dtype, pl.img_y);
      dyi = b.y;
      dxi = b.x;
    }
    /* col2im accumulates: start from zero (the 1x1 path overwrites with beta = 0 instead). */
    if (!pl.one) memset(dxi, 0, (size_t)pl.img_x * ec);
    for (int64_t g = 0; g < pl.groups; g++) {
      const void *wg = at(w, g * pl.kg * pl.rsc, ec);
      if (!pl.nhwc) {
        void *dxg = at(dxi, g * pl.cg * pl.hw, ec);
        const void *dyg = at(dyi, g * pl.kg * pl.pq, ec);
        /* dcol [RSC x PQ] = Wg^T [RSC x Kg] * dyg [Kg x PQ] */
        gemm(pl.dbl, true, false, pl.rsc, pl.pq, pl.kg, wg, pl.rsc, dyg, pl.pq, 0.0, pl.one ? dxg : b.col, pl.pq);
        if (!pl.one) col2im(pl.dbl, false, b.col, &pl.g, dxg);
      } else {
        void *dxg = at(dxi, g * pl.cg, ec);
        const void *dyg = at(dyi, g * pl.kg, ec);
        /* dcol [PQ x RSC] = dyg [PQ x Kg, ld K] * Wg [Kg x RSC] */
        gemm(pl.dbl, false, false, pl.pq, pl.rsc, pl.kg, dyg, a->k, wg, pl.rsc, 0.0, pl.one ? dxg : b.col,
             pl.one ? a->c : pl.rsc);
        if (!pl.one) col2im(pl.dbl, true, b.col, &pl.g, dxg);
      }
    }
    if (!pl.direct) narrow((char *)a->dx + (size_t)(n * pl.img_x) * es, a->dtype, (const float *)b.x, pl.img_x);
  }
  bufs_free(&b);
  return VL_OK;
}

static vl_status conv_backward_filter(const vl_conv_args *a) {
  plan pl;
  make_plan(a, &pl);
  bufs b;
  VL_TRY(setup(a, &pl, false, &b));
  const size_t es = vl_dtype_size(a->dtype), ec = pl.esc;
  void *dw = pl.direct ? a->dwt : b.w; /* accumulated over images in the compute type */
  if (a->n == 0) memset(dw, 0, (size_t)(a->k * pl.rsc) * ec);
  for (int64_t n = 0; n < a->n; n++) {
    const void *xi = (const char *)a->x + (size_t)(n * pl.img_x) * es;
    const void *dyi = (const char *)a->dy + (size_t)(n * pl.img_y) * es;
    if (!pl.direct) {
      widen((float *)b.x, xi, a->dtype, pl.img_x);
      widen((float *)b.y, dyi, a->dtype, pl.img_y);
      xi = b.x;
      dyi = b.y;
    }
    double beta = n == 0 ? 0.0 : 1.0;
    for (int64_t g = 0; g < pl.groups; g++) {
      void *dwg = at(dw, g * pl.kg * pl.rsc, ec);
      if (!pl.nhwc) {
        const void *xg = at(xi, g * pl.cg * pl.hw, ec), *col = xg;
        if (!pl.one) im2col(pl.dbl, false, xg, &pl.g, b.col), col = b.col;
        /* dWg [Kg x RSC] += dyg [Kg x PQ] * col^T */
        gemm(pl.dbl, false, true, pl.kg, pl.rsc, pl.pq, at(dyi, g * pl.kg * pl.pq, ec), pl.pq, col, pl.pq, beta, dwg,
             pl.rsc);
      } else {
        const void *xg = at(xi, g * pl.cg, ec), *col = xg;
        int64_t ld = a->c;
        if (!pl.one) im2col(pl.dbl, true, xg, &pl.g, b.col), col = b.col, ld = pl.rsc;
        /* dWg [Kg x RSC] += dyg^T [Kg x PQ] * col [PQ x RSC] */
        gemm(pl.dbl, true, false, pl.kg, pl.rsc, pl.pq, at(dyi, g * pl.kg, ec), a->k, col, ld, beta, dwg, pl.rsc);
      }
    }
  }
  if (!pl.direct) narrow(a->dwt, a->dtype, (const float *)b.w, a->k * pl.rsc);
  bufs_free(&b);
  return VL_OK;
}

const vl_conv_kernels vl_cpu_conv_kernels = {
    .forward = conv_forward,
    .backward_data = conv_backward_data,
    .backward_filter = conv_backward_filter,
};
