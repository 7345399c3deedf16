/* ext/data/cuda_data.cu: the crop kernel of the nvJPEG image path (ext/data/nvjpeg.h):
 * for every image of a batch decoded on the GPU, the box is resampled to size x size with the CPU
 * path's rule (ext/data/transform.c: `axis` and vl_resample: bilinear, align_corners = False,
 * taps clamped to the box, the interpolation in float), mirrored when flipped, normalised as
 * p * a[c] + b[c] (a = 1 / (255 std), b = -mean / std) and stored as f32, f16 or bf16 in NCHW or
 * NHWC. One thread per output pixel (all channels), blockIdx.y = the image. */
#include "kernels/cuda/cuda_common.cuh"
#include "runtime/core/dtype.h"
#include "ext/data/nvjpeg.h"

namespace {

struct tap {
  int i0, i1;
  float l;
};

/* transform.c's axis() for one output position o of out along n source pixels, box [b0, b0+bl). */
VL_DEV tap axis_tap(int o, int out, int n, double b0, double bl) {
  int lo = (int)floor(b0), hi = (int)ceil(b0 + bl) - 1;
  if (lo < 0) lo = 0;
  if (hi > n - 1) hi = n - 1;
  if (hi < lo) hi = lo;
  double step = bl / out;
  double s = b0 + (o + 0.5) * step - 0.5;
  if (s < lo) s = lo;
  if (s > hi) s = hi;
  tap t;
  t.i0 = (int)floor(s);
  t.i1 = t.i0 + 1 <= hi ? t.i0 + 1 : hi;
  t.l = (float)(s - t.i0);
  return t;
}

template <typename T> VL_DEV T from_float(float v);
template <> VL_DEV float from_float<float>(float v) { return v; }
template <> VL_DEV __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> VL_DEV __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

struct crop_norm {
  float a[3], b[3];
};

template <typename T>
__global__ void crop_kernel(const vl_crop_item *items, int channels, int size, crop_norm nm, bool nhwc, T *out) {
  const vl_crop_item it = items[blockIdx.y];
  if (it.skip) return;
  int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= size * size) return;
  int oy = p / size, ox = p % size;
  tap ty = axis_tap(oy, size, it.h, it.by, it.bh);
  tap tx = axis_tap(it.flip ? size - 1 - ox : ox, size, it.w, it.bx, it.bw);
  const uint8_t *r0 = it.src + (size_t)ty.i0 * it.w * channels, *r1 = it.src + (size_t)ty.i1 * it.w * channels;
  int x0 = tx.i0 * channels, x1 = tx.i1 * channels;
  size_t plane = (size_t)size * size;
  T *o = out + (size_t)blockIdx.y * channels * plane;
  for (int c = 0; c < channels; c++) {
    float top = r0[x0 + c] + tx.l * (float)(r0[x1 + c] - r0[x0 + c]);
    float bot = r1[x0 + c] + tx.l * (float)(r1[x1 + c] - r1[x0 + c]);
    float v = top + ty.l * (bot - top);
    size_t k = nhwc ? (size_t)p * channels + c : c * plane + p;
    o[k] = from_float<T>(v * nm.a[c] + nm.b[c]);
  }
}

} // namespace

extern "C" vl_status vl_cuda_crop_batch(const vl_crop_item *items, int n, int channels, int size, const float a[3],
                                        const float b[3], int dtype, bool nhwc, void *out, void *stream) {
  if (n <= 0) return VL_OK;
  if (n > 65535) return vl_fail(VL_EINVAL, "crop_batch: %d images in one batch (at most 65535)", n);
  crop_norm nm;
  for (int c = 0; c < 3; c++) {
    nm.a[c] = a[c];
    nm.b[c] = b[c];
  }
  const int block = 256;
  dim3 grid((unsigned)(((size_t)size * size + block - 1) / block), (unsigned)n);
  cudaStream_t s = (cudaStream_t)stream;
  switch (dtype) {
  case VL_F32: crop_kernel<float><<<grid, block, 0, s>>>(items, channels, size, nm, nhwc, (float *)out); break;
  case VL_F16: crop_kernel<__half><<<grid, block, 0, s>>>(items, channels, size, nm, nhwc, (__half *)out); break;
  case VL_BF16:
    crop_kernel<__nv_bfloat16><<<grid, block, 0, s>>>(items, channels, size, nm, nhwc, (__nv_bfloat16 *)out);
    break;
  default: return vl_fail(VL_EINVAL, "crop_batch: dtype %s (f32, f16 or bf16 only)", vl_dtype_name((vl_dtype)dtype));
  }
  VL_LAUNCH_CHECK();
  return VL_OK;
}
