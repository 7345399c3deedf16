/* ext/data/nvjpeg.c: nvJPEG batched decode + the crop kernel (ext/data/nvjpeg.h). */
#include "ext/data/nvjpeg.h"

#include <stdlib.h>
#include <string.h>

#ifndef VL_HAVE_NVJPEG

bool vl_have_nvjpeg(void) { return false; }

vl_status vl_nvjpeg_create(int dev, int max_batch, int channels, vl_nvjpeg **out) {
  (void)dev, (void)max_batch, (void)channels, (void)out;
  return vl_fail(VL_EUNSUPPORTED, "ImageLoader: decoder 'nvjpeg': v100lua was built without nvJPEG");
}

const char *vl_nvjpeg_backend(const vl_nvjpeg *nj) {
  (void)nj;
  return "none";
}

vl_status vl_nvjpeg_decode(vl_nvjpeg *nj, int n, const vl_nvjpeg_item *items, const vl_tf_opts *tf, void *out,
                           void *stream, bool *cpu) {
  (void)nj, (void)n, (void)items, (void)tf, (void)out, (void)stream, (void)cpu;
  return vl_fail(VL_EUNSUPPORTED, "ImageLoader: decoder 'nvjpeg': v100lua was built without nvJPEG");
}

void vl_nvjpeg_destroy(vl_nvjpeg *nj) { (void)nj; }

#else

#include <cuda_runtime.h>
#include <nvjpeg.h>

#include "runtime/core/cuda.h"

static const char *nvjpeg_str(nvjpegStatus_t s) {
  switch (s) {
  case NVJPEG_STATUS_SUCCESS: return "success";
  case NVJPEG_STATUS_NOT_INITIALIZED: return "not initialized";
  case NVJPEG_STATUS_INVALID_PARAMETER: return "invalid parameter";
  case NVJPEG_STATUS_BAD_JPEG: return "bad JPEG";
  case NVJPEG_STATUS_JPEG_NOT_SUPPORTED: return "JPEG not supported";
  case NVJPEG_STATUS_ALLOCATOR_FAILURE: return "allocator failure";
  case NVJPEG_STATUS_EXECUTION_FAILED: return "execution failed";
  case NVJPEG_STATUS_ARCH_MISMATCH: return "architecture mismatch";
  case NVJPEG_STATUS_INTERNAL_ERROR: return "internal error";
  case NVJPEG_STATUS_IMPLEMENTATION_NOT_SUPPORTED: return "implementation not supported";
  default: return "unknown status";
  }
}

#define NJ_CHECK(call)                                                                                             \
  do {                                                                                                             \
    nvjpegStatus_t vl_nj_ = (call);                                                                                \
    if (vl_nj_ != NVJPEG_STATUS_SUCCESS)                                                                           \
      return vl_fail(VL_ECUDA, "%s:%d: %s failed: %s (%d)", __FILE__, __LINE__, #call, nvjpeg_str(vl_nj_),         \
                     (int)vl_nj_);                                                                                 \
  } while (0)

#define CU_CHECK(call)                                                                                             \
  do {                                                                                                             \
    cudaError_t vl_ce_ = (call);                                                                                   \
    if (vl_ce_ != cudaSuccess)                                                                                     \
      return vl_fail(VL_ECUDA, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call, cudaGetErrorString(vl_ce_));     \
  } while (0)

struct vl_nvjpeg {
  int dev, max_batch, channels;
  bool hardware;
  nvjpegHandle_t h;
  nvjpegJpegState_t st;
  nvjpegJpegStream_t js;
  int init_n;                /* batch size of the last nvjpegDecodeBatchedInitialize, 0: none */
  uint8_t *pix;              /* decoded images, device, pix_cap bytes */
  size_t pix_cap;
  vl_crop_item *items_dev;   /* max_batch of them */
  vl_crop_item *items_host;
  const unsigned char **data;
  size_t *lens;
  nvjpegImage_t *imgs;
  int *sel;                  /* batch positions decoded by nvJPEG */
  cudaEvent_t done;          /* after the last batch's kernel: buffers reused on another stream wait */
  void *last_stream;
};

bool vl_have_nvjpeg(void) { return true; }

const char *vl_nvjpeg_backend(const vl_nvjpeg *nj) { return nj->hardware ? "hardware" : "default"; }

void vl_nvjpeg_destroy(vl_nvjpeg *nj) {
  if (!nj) return;
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != nj->dev) (void)cudaSetDevice(nj->dev);
  /* The buffers may still be read by queued work. */
  if (nj->done) (void)cudaEventSynchronize(nj->done);
  if (nj->js) (void)nvjpegJpegStreamDestroy(nj->js);
  if (nj->st) (void)nvjpegJpegStateDestroy(nj->st);
  if (nj->h) (void)nvjpegDestroy(nj->h);
  if (nj->pix) (void)cudaFree(nj->pix);
  if (nj->items_dev) (void)cudaFree(nj->items_dev);
  if (nj->done) (void)cudaEventDestroy(nj->done);
  if (cur >= 0 && cur != nj->dev) (void)cudaSetDevice(cur);
  (void)cudaGetLastError();
  free(nj->items_host);
  free(nj->data);
  free(nj->lens);
  free(nj->imgs);
  free(nj->sel);
  free(nj);
}

static vl_status create(vl_nvjpeg *nj) {
  CU_CHECK(cudaSetDevice(nj->dev));
  /* The hardware engine where the GPU has one (nvjpegCreateEx refuses it elsewhere). */
  nvjpegStatus_t s = nvjpegCreateEx(NVJPEG_BACKEND_HARDWARE, NULL, NULL, 0, &nj->h);
  nj->hardware = s == NVJPEG_STATUS_SUCCESS;
  if (!nj->hardware) {
    nj->h = NULL;
    NJ_CHECK(nvjpegCreateEx(NVJPEG_BACKEND_DEFAULT, NULL, NULL, 0, &nj->h));
  }
  NJ_CHECK(nvjpegJpegStateCreate(nj->h, &nj->st));
  NJ_CHECK(nvjpegJpegStreamCreate(nj->h, &nj->js));
  CU_CHECK(cudaMalloc((void **)&nj->items_dev, sizeof(vl_crop_item) * (size_t)nj->max_batch));
  CU_CHECK(cudaEventCreateWithFlags(&nj->done, cudaEventDisableTiming));
  size_t m = (size_t)nj->max_batch;
  nj->items_host = calloc(m, sizeof *nj->items_host);
  nj->data = calloc(m, sizeof *nj->data);
  nj->lens = calloc(m, sizeof *nj->lens);
  nj->imgs = calloc(m, sizeof *nj->imgs);
  nj->sel = calloc(m, sizeof *nj->sel);
  if (!nj->items_host || !nj->data || !nj->lens || !nj->imgs || !nj->sel)
    return vl_fail(VL_EOOM, "ImageLoader: nvJPEG: out of host memory for a batch of %d", nj->max_batch);
  return VL_OK;
}

vl_status vl_nvjpeg_create(int dev, int max_batch, int channels, vl_nvjpeg **out) {
  if (max_batch < 1 || (channels != 1 && channels != 3))
    return vl_fail(VL_EINVAL, "ImageLoader: nvJPEG: batch %d and channels %d (1 or 3)", max_batch, channels);
  vl_nvjpeg *nj = calloc(1, sizeof *nj);
  if (!nj) return vl_fail(VL_EOOM, "ImageLoader: nvJPEG: out of host memory");
  nj->dev = dev;
  nj->max_batch = max_batch;
  nj->channels = channels;
  int cur = -1;
  vl_status s = cudaGetDevice(&cur) == cudaSuccess ? create(nj) : vl_fail(VL_ECUDA, "cudaGetDevice failed");
  if (cur >= 0 && cur != dev) (void)cudaSetDevice(cur); /* the caller's device stays current */
  if (s != VL_OK) {
    vl_nvjpeg_destroy(nj);
    return vl_fail_prefix(s, "ImageLoader: nvJPEG: ");
  }
  *out = nj;
  return VL_OK;
}

/* Whether this backend takes the image (0 when it does). */
/* Whether the stream ends with its EOI marker (FF D9), allowing padding after it. nvJPEG decodes a
 * truncated file without an error (the rest of the image grey; measured on the H200's hardware
 * decoder), where libjpeg-turbo reports a premature end: such files go to the CPU path, which
 * skips them as unreadable. */
static bool has_eoi(const uint8_t *p, size_t n) {
  size_t end = n, floor = n > 64 ? n - 64 : 0;
  while (end > floor && (p[end - 1] == 0x00 || p[end - 1] == 0xFF || p[end - 1] == '\n' || p[end - 1] == '\r'))
    end--;
  for (size_t i = end; i >= floor + 2; i--)
    if (p[i - 2] == 0xFF && p[i - 1] == 0xD9) return true;
  return false;
}

static bool supported(vl_nvjpeg *nj, const vl_nvjpeg_item *it) {
  if (!has_eoi(it->data, it->len)) return false;
  if (nvjpegJpegStreamParse(nj->h, it->data, it->len, 0, 0, nj->js) != NVJPEG_STATUS_SUCCESS) return false;
  unsigned int nc = 0, w = 0, h = 0;
  if (nvjpegJpegStreamGetComponentsNum(nj->js, &nc) != NVJPEG_STATUS_SUCCESS || (nc != 1 && nc != 3)) return false;
  /* The worker's header (libjpeg-turbo) and nvJPEG must agree on the size the box refers to. */
  if (nvjpegJpegStreamGetFrameDimensions(nj->js, &w, &h) != NVJPEG_STATUS_SUCCESS || (int)w != it->w ||
      (int)h != it->h)
    return false;
  if (nj->hardware) {
    int no = 1;
    if (nvjpegDecodeBatchedSupported(nj->h, nj->js, &no) != NVJPEG_STATUS_SUCCESS || no != 0) return false;
  }
  return true;
}

static vl_status decode(vl_nvjpeg *nj, int n, const vl_nvjpeg_item *items, const vl_tf_opts *tf, void *out,
                        cudaStream_t stream, bool *cpu) {
  int C = nj->channels, m = 0;
  size_t need = 0;
  for (int j = 0; j < n; j++) {
    cpu[j] = !supported(nj, &items[j]);
    if (!cpu[j]) {
      nj->sel[m++] = j;
      need += ((size_t)items[j].h * items[j].w * C + 255) & ~(size_t)255;
    }
  }
  /* The buffers were last used on nj->last_stream: another stream waits for that work first. */
  if (nj->last_stream && nj->last_stream != (void *)stream) CU_CHECK(cudaStreamWaitEvent(stream, nj->done, 0));
  if (m > 0) {
    if (need > nj->pix_cap) {
      if (nj->pix) {
        CU_CHECK(cudaEventSynchronize(nj->done));
        CU_CHECK(cudaFree(nj->pix));
        nj->pix = NULL;
        nj->pix_cap = 0;
      }
      size_t cap = need + need / 4;
      CU_CHECK(cudaMalloc((void **)&nj->pix, cap));
      nj->pix_cap = cap;
    }
    size_t off = 0;
    for (int k = 0; k < m; k++) {
      const vl_nvjpeg_item *it = &items[nj->sel[k]];
      nj->data[k] = it->data;
      nj->lens[k] = it->len;
      memset(&nj->imgs[k], 0, sizeof nj->imgs[k]);
      nj->imgs[k].channel[0] = nj->pix + off;
      nj->imgs[k].pitch[0] = (size_t)it->w * C;
      off += ((size_t)it->h * it->w * C + 255) & ~(size_t)255;
    }
    if (nj->init_n != m) {
      NJ_CHECK(nvjpegDecodeBatchedInitialize(nj->h, nj->st, m, 1, C == 3 ? NVJPEG_OUTPUT_RGBI : NVJPEG_OUTPUT_Y));
      nj->init_n = m;
    }
    nvjpegStatus_t ds = nvjpegDecodeBatched(nj->h, nj->st, nj->data, nj->lens, nj->imgs, stream);
    if (ds != NVJPEG_STATUS_SUCCESS) {
      /* One image it could not take spoils the batch: all of it goes to the CPU decoder, and the
       * state is initialised afresh next time ("also use to reset failed batches"). */
      nj->init_n = 0;
      for (int j = 0; j < n; j++) cpu[j] = true;
      m = 0;
    }
  }
  for (int j = 0; j < n; j++) nj->items_host[j] = (vl_crop_item){.skip = 1};
  for (int k = 0; k < m; k++) {
    int j = nj->sel[k];
    const vl_nvjpeg_item *it = &items[j];
    nj->items_host[j] = (vl_crop_item){.src = nj->imgs[k].channel[0], .h = it->h, .w = it->w, .by = it->box.y,
                                       .bx = it->box.x, .bh = it->box.h, .bw = it->box.w, .flip = it->flip,
                                       .skip = 0};
  }
  if (m > 0) {
    /* From pageable memory: the call returns once the source has been staged, so items_host is
     * free to change for the next batch. */
    CU_CHECK(cudaMemcpyAsync(nj->items_dev, nj->items_host, sizeof(vl_crop_item) * (size_t)n, cudaMemcpyHostToDevice,
                             stream));
    float a[3] = {0, 0, 0}, b[3] = {0, 0, 0};
    for (int c = 0; c < C; c++) {
      a[c] = 1.0f / (255.0f * tf->std[c]);
      b[c] = -tf->mean[c] / tf->std[c];
    }
    VL_TRY(vl_cuda_crop_batch(nj->items_dev, n, C, tf->size, a, b, (int)tf->dtype, tf->nhwc, out, stream));
  }
  CU_CHECK(cudaEventRecord(nj->done, stream));
  nj->last_stream = (void *)stream;
  return VL_OK;
}

vl_status vl_nvjpeg_decode(vl_nvjpeg *nj, int n, const vl_nvjpeg_item *items, const vl_tf_opts *tf, void *out,
                           void *stream, bool *cpu) {
  if (n < 0 || n > nj->max_batch)
    return vl_fail(VL_EINVAL, "ImageLoader: nvJPEG: a batch of %d images (at most %d)", n, nj->max_batch);
  if (tf->channels != nj->channels)
    return vl_fail(VL_EINVAL, "ImageLoader: nvJPEG: %d channels, the decoder was made for %d", tf->channels,
                   nj->channels);
  if (!stream) VL_TRY(vl_cuda_current_stream(nj->dev, &stream));
  int cur = -1;
  CU_CHECK(cudaGetDevice(&cur));
  if (cur != nj->dev) CU_CHECK(cudaSetDevice(nj->dev));
  vl_status s = decode(nj, n, items, tf, out, (cudaStream_t)stream, cpu);
  if (cur != nj->dev) (void)cudaSetDevice(cur);
  if (s != VL_OK) return vl_fail_prefix(s, "ImageLoader: nvJPEG: ");
  return VL_OK;
}

#endif
