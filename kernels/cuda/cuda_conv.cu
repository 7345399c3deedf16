/* kernels/cuda/cuda_conv.cu: 2-D convolution on CUDA through cuDNN's legacy convolution API
 * (cudnnConvolutionForward / BackwardData / BackwardFilter), NCHW or NHWC (filters KCRS / KRSC),
 * grouped, f32/f16/bf16 (f32 compute) and f64 (f64 compute).
 *
 * Math type: f16/bf16 use tensor cores; f32 uses CUDNN_FMA_MATH unless allow_tf32 (CUDNN_DEFAULT_MATH
 * would let Ampere+ GPUs run f32 convolutions in TF32, ~1e-3 relative error, breaking the
 * "f32 within 1e-5 of the CPU" rule; PyTorch makes the same choice), f64 the default.
 *
 * Algorithms: cuDNN's heuristics (cudnnGet*Algorithm_v7: the results that succeeded, have an
 * acceptable math type and a workspace within VL_CONV_WS_CAP, in order; the first one the call
 * accepts wins), or, when the context asks for benchmarking, timing (cudnnFind*AlgorithmEx, once
 * per shape; it synchronises, by nature). In deterministic mode (vl_set_deterministic) only the
 * results cuDNN marks CUDNN_DETERMINISTIC count. The choice is cached per (direction, shape, dtype,
 * layout, stride/pad/dilation/groups, device, tf32, benchmark, deterministic) in the device's cuDNN
 * state. The workspace is a block of the device's caching
 * pool allocated on the stream and freed right after enqueueing: the pool is stream-ordered, so
 * the block is reused only by later work of the same stream. No host synchronisation otherwise. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "runtime/core/graph.h"
#include "kernels/cuda/cuda_cudnn.cuh"
#include "runtime/backend/nn_kernels.h"
#include "runtime/core/cuda.h"

/* The largest workspace an algorithm may ask for (a few algorithms want GiBs for little gain). */
#define VL_CONV_WS_CAP ((size_t)1 << 30)

static cudnnDataType_t cudnn_dtype(vl_dtype dt) {
  switch (dt) {
    case VL_F16: return CUDNN_DATA_HALF;
    case VL_BF16: return CUDNN_DATA_BFLOAT16;
    case VL_F64: return CUDNN_DATA_DOUBLE;
    default: return CUDNN_DATA_FLOAT;
  }
}

static cudnnMathType_t base_math(const vl_conv_args *a) {
  switch (a->dtype) {
    case VL_F16:
    case VL_BF16: return CUDNN_TENSOR_OP_MATH;
    case VL_F32: return a->allow_tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
    default: return CUDNN_DEFAULT_MATH;
  }
}

/* f32 without TF32 must run FMA-only kernels; everything else takes what cuDNN proposes. */
static bool math_ok(const vl_conv_args *a, cudnnMathType_t m) {
  if (a->dtype == VL_F32 && !a->allow_tf32) return m == CUDNN_FMA_MATH;
  return true;
}

/* Descriptors of one call, destroyed on every path. */
struct conv_descs {
  cudnnTensorDescriptor_t x = NULL, y = NULL;
  cudnnFilterDescriptor_t w = NULL;
  cudnnConvolutionDescriptor_t conv = NULL;
  ~conv_descs() {
    if (x) (void)cudnnDestroyTensorDescriptor(x);
    if (y) (void)cudnnDestroyTensorDescriptor(y);
    if (w) (void)cudnnDestroyFilterDescriptor(w);
    if (conv) (void)cudnnDestroyConvolutionDescriptor(conv);
  }
};

static vl_status make_descs(const char *op, const vl_conv_args *a, conv_descs *d) {
  /* cuDNN's legacy descriptors take int dims and address tensors with 32-bit element offsets. */
  int64_t nx = a->n * a->c * a->h * a->w, ny = a->n * a->k * a->p * a->q;
  if (nx > INT_MAX || ny > INT_MAX)
    return vl_fail(VL_EUNSUPPORTED, "%s: tensors of more than 2^31-1 elements are not supported by cuDNN "
                   "(input %lld, output %lld elements): split the batch", op, (long long)nx, (long long)ny);
  cudnnDataType_t dt = cudnn_dtype(a->dtype);
  cudnnDataType_t ct = a->dtype == VL_F64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t fmt = a->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  VL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->x));
  VL_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->y));
  VL_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d->w));
  VL_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d->conv));
  VL_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->x, fmt, dt, (int)a->n, (int)a->c, (int)a->h, (int)a->w));
  VL_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d->y, fmt, dt, (int)a->n, (int)a->k, (int)a->p, (int)a->q));
  VL_CUDNN_CHECK(cudnnSetFilter4dDescriptor(d->w, dt, fmt, (int)a->k, (int)(a->c / a->groups), (int)a->r, (int)a->s));
  VL_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d->conv, a->pad[0], a->pad[1], a->stride[0], a->stride[1],
                                                 a->dilation[0], a->dilation[1], CUDNN_CROSS_CORRELATION, ct));
  VL_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d->conv, a->groups));
  VL_CUDNN_CHECK(cudnnSetConvolutionMathType(d->conv, base_math(a)));
  int on, oc, oh, ow;
  VL_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(d->conv, d->x, d->w, &on, &oc, &oh, &ow));
  if (on != a->n || oc != a->k || oh != a->p || ow != a->q)
    return vl_fail(VL_EINTERNAL, "%s: cuDNN computes output %dx%dx%dx%d, the front end %lldx%lldx%lldx%lld", op, on,
                   oc, oh, ow, (long long)a->n, (long long)a->k, (long long)a->p, (long long)a->q);
  return VL_OK;
}

static void make_key(const vl_conv_args *a, vl_conv_dir dir, vl_conv_key *k) {
  memset(k, 0, sizeof *k); /* padding bytes too: keys are compared with memcmp */
  k->dir = dir;
  k->dtype = a->dtype;
  k->nhwc = a->nhwc;
  k->tf32 = a->dtype == VL_F32 && a->allow_tf32;
  k->benchmark = a->benchmark;
  k->deterministic = a->deterministic;
  k->device = a->ex.device;
  k->n = a->n;
  k->c = a->c;
  k->h = a->h;
  k->w = a->w;
  k->k = a->k;
  k->r = a->r;
  k->s = a->s;
  for (int i = 0; i < 2; i++) {
    k->stride[i] = a->stride[i];
    k->pad[i] = a->pad[i];
    k->dilation[i] = a->dilation[i];
  }
  k->groups = a->groups;
}

/* A heuristics or timing result we may use: it ran, has an acceptable math type, its workspace is
 * within `cap`, and in deterministic mode cuDNN reports it deterministic (some backward algorithms
 * add partial sums with atomics, in an order that varies from run to run). */
template <typename Perf>
static bool usable(const vl_conv_args *a, const Perf &r, size_t cap) {
  return r.status == CUDNN_STATUS_SUCCESS && math_ok(a, r.mathType) && r.memory <= cap &&
         (!a->deterministic || r.determinism == CUDNN_DETERMINISTIC);
}

/* The acceptable results of a heuristics or timing list, in cuDNN's order of preference. */
#define VL_CONV_MAX_CANDS 16
template <typename Perf>
static int collect(const vl_conv_args *a, const vl_conv_key *key, const Perf *r, int n, size_t cap,
                   vl_conv_plan *out) {
  int m = 0;
  for (int i = 0; i < n && m < VL_CONV_MAX_CANDS; i++) {
    if (!usable(a, r[i], cap)) continue;
    out[m].key = *key;
    out[m].algo = (int)r[i].algo;
    out[m].math = (int)r[i].mathType;
    out[m].ws_bytes = r[i].memory;
    m++;
  }
  return m;
}

/* The largest acceptable workspace among heuristic results: what timing gets to work with. */
template <typename Perf>
static size_t max_ws(const vl_conv_args *a, const Perf *r, int n) {
  size_t m = 0;
  for (int i = 0; i < n; i++)
    if (usable(a, r[i], VL_CONV_WS_CAP) && r[i].memory > m) m = r[i].memory;
  return m;
}

/* A pool block freed when the scope ends (after the cuDNN call was enqueued on the same stream). */
struct ws_block {
  vl_alloc *pool = NULL;
  vl_block *blk = NULL;
  ~ws_block() {
    if (blk) vl_alloc_free(pool, blk);
  }
  vl_status get(int dev, size_t bytes, void *stream, void **ptr) {
    *ptr = NULL;
    if (bytes == 0) return VL_OK;
    VL_TRY(vl_cuda_alloc(dev, &pool));
    VL_TRY(vl_alloc_malloc(pool, bytes, stream, &blk));
    *ptr = vl_block_ptr(blk);
    return VL_OK;
  }
};

static const char *dir_name(vl_conv_dir dir) {
  return dir == VL_CONV_FWD ? "conv2d" : dir == VL_CONV_BWD_DATA ? "conv2d backward (data)" : "conv2d backward (filter)";
}

/* One direction: descriptors, plan (cached), workspace, the cuDNN call. */
static vl_status conv_run(const vl_conv_args *a, vl_conv_dir dir) {
  const char *op = dir_name(dir);
  vl_device_guard guard;
  VL_TRY(guard.set(a->ex.device));
  vl_cudnn_state *cs = NULL;
  VL_TRY(vl_cudnn_state_get(a->ex.device, &cs));
  cudnnHandle_t h = NULL;
  VL_TRY(vl_cudnn_handle(a->ex.device, a->ex.stream, &h));
  conv_descs d;
  VL_TRY(make_descs(op, a, &d));

  vl_conv_key key;
  make_key(a, dir, &key);
  vl_conv_plan cands[VL_CONV_MAX_CANDS];
  int ncand = 0;
  const vl_conv_plan *cached = vl_cudnn_plan_find(cs, &key);
  if (cached) {
    cands[0] = *cached;
    ncand = 1;
  } else if (a->benchmark && vl_graph_capturing()) {
    /* Timing runs kernels and reads their times back on the host: not capturable. */
    char why[256];
    snprintf(why, sizeof why, "a cuDNN benchmark search (first use of input %lldx%lldx%lldx%lld, weight "
             "%lldx%lldx%lldx%lld %s; warm up before capturing, or turn cudnn benchmark off)",
             (long long)a->n, (long long)a->c, (long long)a->h, (long long)a->w, (long long)a->k,
             (long long)(a->c / a->groups), (long long)a->r, (long long)a->s, vl_dtype_name(a->dtype));
    return vl_graph_refuse(op, why);
  } else if (dir == VL_CONV_FWD) {
    cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    VL_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                          &n, r));
    size_t cap = VL_CONV_WS_CAP;
    if (a->benchmark) {
      ws_block wb;
      void *ws = NULL;
      cap = max_ws(a, r, n);
      VL_TRY(wb.get(a->ex.device, cap, a->ex.stream, &ws));
      VL_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, a->x, d.w, a->wt, d.conv, d.y, a->y,
                                                            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r, ws, cap));
    }
    ncand = collect(a, &key, r, n, cap, cands);
  } else if (dir == VL_CONV_BWD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    VL_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                               CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r));
    size_t cap = VL_CONV_WS_CAP;
    if (a->benchmark) {
      ws_block wb;
      void *ws = NULL;
      cap = max_ws(a, r, n);
      VL_TRY(wb.get(a->ex.device, cap, a->ex.stream, &ws));
      VL_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, a->wt, d.y, a->dy, d.conv, d.x, a->dx,
                                                                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r, ws,
                                                                 cap));
    }
    ncand = collect(a, &key, r, n, cap, cands);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    VL_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r));
    size_t cap = VL_CONV_WS_CAP;
    if (a->benchmark) {
      ws_block wb;
      void *ws = NULL;
      cap = max_ws(a, r, n);
      VL_TRY(wb.get(a->ex.device, cap, a->ex.stream, &ws));
      VL_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, a->x, d.y, a->dy, d.conv, d.w, a->dwt,
                                                                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r,
                                                                   ws, cap));
    }
    ncand = collect(a, &key, r, n, cap, cands);
  }
  if (ncand == 0)
    return vl_fail(VL_ECUDNN, "%s: cuDNN offers no %salgorithm for this configuration (%s %s, input %lldx%lldx%lldx%lld, "
                   "weight %lldx%lldx%lldx%lld, groups %d)", op, a->deterministic ? "deterministic " : "",
                   vl_dtype_name(a->dtype), a->nhwc ? "NHWC" : "NCHW",
                   (long long)a->n, (long long)a->c, (long long)a->h, (long long)a->w, (long long)a->k,
                   (long long)(a->c / a->groups), (long long)a->r, (long long)a->s, a->groups);

  /* Scaling factors: double for double data, float otherwise. */
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
  const void *one = a->dtype == VL_F64 ? (const void *)&d1 : (const void *)&f1;
  const void *zero = a->dtype == VL_F64 ? (const void *)&d0 : (const void *)&f0;
  /* Heuristics sometimes propose an algorithm that the call then rejects for this configuration
   * (seen: depthwise f16 NHWC backward-data, CUDNN_STATUS_BAD_PARAM). Such a rejection happens at
   * argument validation, before anything is enqueued, so the next candidate is tried; the first
   * that runs is cached. */
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  int tried = 0;
  for (int i = 0; i < ncand; i++) {
    const vl_conv_plan *plan = &cands[i];
    tried = i;
    /* The algorithm and math type go together (cuDNN picks tensor-core kernels by both). */
    VL_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv, (cudnnMathType_t)plan->math));
    ws_block wb;
    void *ws = NULL;
    VL_TRY(wb.get(a->ex.device, plan->ws_bytes, a->ex.stream, &ws));
    if (dir == VL_CONV_FWD)
      st = cudnnConvolutionForward(h, one, d.x, a->x, d.w, a->wt, d.conv, (cudnnConvolutionFwdAlgo_t)plan->algo, ws,
                                   plan->ws_bytes, zero, d.y, a->y);
    else if (dir == VL_CONV_BWD_DATA)
      st = cudnnConvolutionBackwardData(h, one, d.w, a->wt, d.y, a->dy, d.conv,
                                        (cudnnConvolutionBwdDataAlgo_t)plan->algo, ws, plan->ws_bytes, zero, d.x, a->dx);
    else
      st = cudnnConvolutionBackwardFilter(h, one, d.x, a->x, d.y, a->dy, d.conv,
                                          (cudnnConvolutionBwdFilterAlgo_t)plan->algo, ws, plan->ws_bytes, zero, d.w,
                                          a->dwt);
    if (st == CUDNN_STATUS_SUCCESS) {
      if (!cached) VL_TRY(vl_cudnn_plan_put(cs, plan));
      return VL_OK;
    }
    if (st != CUDNN_STATUS_BAD_PARAM && st != CUDNN_STATUS_NOT_SUPPORTED) break;
  }
  return vl_fail(VL_ECUDNN, "%s:%d: %s (algorithm %d, candidate %d of %d) failed: %s", __FILE__, __LINE__,
                 dir == VL_CONV_FWD ? "cudnnConvolutionForward"
                 : dir == VL_CONV_BWD_DATA ? "cudnnConvolutionBackwardData"
                                           : "cudnnConvolutionBackwardFilter",
                 cands[tried].algo, tried + 1, ncand, cudnnGetErrorString(st));
}

static vl_status conv_forward(const vl_conv_args *a) { return conv_run(a, VL_CONV_FWD); }
static vl_status conv_backward_data(const vl_conv_args *a) { return conv_run(a, VL_CONV_BWD_DATA); }
static vl_status conv_backward_filter(const vl_conv_args *a) { return conv_run(a, VL_CONV_BWD_FILTER); }

/* A host-side table, left out of Clang's device pass (tools/build-sm70.sh): Clang would emit a
 * const table of host function addresses on the GPU too, which ptxas refuses. nvcc keeps it in
 * both passes, as before, and emits nothing of it on the device. */
#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_conv_kernels vl_cuda_conv_kernels = {
    .forward = conv_forward,
    .backward_data = conv_backward_data,
    .backward_filter = conv_backward_filter,
};
#endif
