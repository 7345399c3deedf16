/* kernels/cuda/cuda_common.cuh: what every CUDA kernel file shares: error-checking macros, the
 * per-device state, dtype storage types with their load/store conversions, dtype dispatch, the
 * device guard and launch sizing.
 *
 * Conversions mirror the CPU reference (kernels/cpu/cpu_internal.h) so that both store the same
 * bits: values are computed in float (f32/f16/bf16), double (f64) or int64 (integers); doubles and
 * integers round directly to f16/bf16 (no double rounding through float); float -> integer
 * truncates and saturates with NaN -> 0 (what the GPU's cvt does); floats reach u8 through int64;
 * bool stores v != 0; integer narrowing wraps. Only conversion intrinsics of cuda_fp16.h/cuda_bf16.h are used, never
 * half/bf16 arithmetic, so every file also compiles for GPUs without bf16 hardware. */
#ifndef VL_CUDA_COMMON_CUH
#define VL_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "runtime/backend/kernels.h"
#include "runtime/core/context.h"

/* ---- error checking: every CUDA / cuBLAS return code, with file:line ---- */
#define VL_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    cudaError_t vl_ce_ = (call);                                                             \
    if (vl_ce_ != cudaSuccess)                                                               \
      return vl_fail(VL_ECUDA, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,            \
                     cudaGetErrorString(vl_ce_));                                            \
  } while (0)

#define VL_CUBLAS_CHECK(call)                                                                \
  do {                                                                                       \
    cublasStatus_t vl_cb_ = (call);                                                          \
    if (vl_cb_ != CUBLAS_STATUS_SUCCESS)                                                     \
      return vl_fail(VL_ECUBLAS, "%s:%d: %s failed: %s", __FILE__, __LINE__, #call,          \
                     cublasLtGetStatusString(vl_cb_));                                       \
  } while (0)

/* After every kernel launch: a bad configuration or an earlier asynchronous fault surfaces here. */
#define VL_LAUNCH_CHECK() VL_CUDA_CHECK(cudaGetLastError())

#define VL_DEV __device__ __forceinline__

/* ---- per-device state (vl_ctx()->kernel_state[dev]) ---- */
/* Written by index kernels on an out-of-range index; the first writer (CAS on `set`) wins. */
struct vl_cuda_errflag {
  int set;
  int op;
  int dim;
  int pad;
  long long index;
  long long size;
};

#define VL_CUDA_MAX_OPNAMES 32
#define VL_CUDA_MAX_OCC 128
#define VL_CUDA_WORKSPACE_BYTES ((size_t)32 << 20)

/* One 32 MiB workspace per stream: kernels on one stream are ordered, so the GEMM workspace and
 * the reduction scratch can share it, while two streams never race on the same bytes. */
struct vl_cuda_ws {
  void *stream;
  void *ptr;
};

struct vl_gemm_cache; /* cuda_gemm.cu */

struct vl_cuda_state {
  int device;
  int sm_count;
  int cc_major, cc_minor;
  int max_threads_per_sm;
  void *lt;                    /* cublasLtHandle_t, made on the first GEMM */
  vl_cuda_ws *ws;
  int nws, ws_cap;
  vl_cuda_errflag *flag;       /* device memory */
  bool flag_armed;             /* an index kernel ran since the last check_async */
  int nopnames;
  char opnames[VL_CUDA_MAX_OPNAMES][32];
  vl_gemm_cache *gemm;
  int nocc;                    /* cached resident blocks per SM of reduction kernels */
  struct {
    const void *fn;
    int per_sm;
  } occ[VL_CUDA_MAX_OCC];
};

/* Makes `dev` current (only calling cudaSetDevice when it is not) and restores the previous
 * device when it goes out of scope. */
class vl_device_guard {
 public:
  vl_device_guard() : prev_(-1) {}
  ~vl_device_guard() {
    if (prev_ >= 0) (void)cudaSetDevice(prev_);
  }
  vl_status set(int dev) {
    int cur = -1;
    VL_CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != dev) {
      VL_CUDA_CHECK(cudaSetDevice(dev));
      prev_ = cur;
    }
    return VL_OK;
  }

 private:
  int prev_;
};

/* The state of `dev`, created on first use; the caller has made `dev` current. */
vl_status vl_cuda_state_get(int dev, vl_cuda_state **out);
/* The workspace of `stream` on the state's device (VL_CUDA_WORKSPACE_BYTES). */
vl_status vl_cuda_workspace(vl_cuda_state *st, void *stream, void **ptr);
/* A small id for an op name, recorded in the error flag (-1 when the table is full: reported
 * as "index"). */
int vl_cuda_op_id(vl_cuda_state *st, const char *name);
void vl_cuda_gemm_cache_free(vl_cuda_state *st);

/* Device guard + state + stream in one step, at the top of every entry point. */
#define VL_CUDA_ENTER(guard, st, exec)                 \
  vl_device_guard guard;                               \
  VL_TRY(guard.set((exec).device));                    \
  vl_cuda_state *st = NULL;                            \
  VL_TRY(vl_cuda_state_get((exec).device, &st))

/* Grid size: enough blocks for `items` threads, capped at `waves` full waves of the device. */
static inline unsigned vl_grid(int64_t items, int block, const vl_cuda_state *st, int waves) {
  int64_t need = (items + block - 1) / block;
  int64_t cap = (int64_t)st->sm_count * (st->max_threads_per_sm / block) * waves;
  if (cap < 1) cap = 1;
  if (need > cap) need = cap;
  if (need < 1) need = 1;
  return (unsigned)need;
}

/* ---- dtype storage types ---- */
struct vl_bool8 {
  uint8_t v;
};
struct vl_none {}; /* an absent operand */

template <typename T, int N>
struct alignas(sizeof(T) * N) vl_vec {
  T v[N];
};

/* Compute type: float for f32/f16/bf16, double for f64, int64 for integers and bool. */
template <typename T> struct vl_acc { typedef int64_t type; };
template <> struct vl_acc<float> { typedef float type; };
template <> struct vl_acc<__half> { typedef float type; };
template <> struct vl_acc<__nv_bfloat16> { typedef float type; };
template <> struct vl_acc<double> { typedef double type; };

VL_DEV float vl_val(float x) { return x; }
VL_DEV float vl_val(__half x) { return __half2float(x); }
VL_DEV float vl_val(__nv_bfloat16 x) { return __bfloat162float(x); }
VL_DEV double vl_val(double x) { return x; }
VL_DEV int64_t vl_val(int32_t x) { return x; }
VL_DEV int64_t vl_val(int64_t x) { return x; }
VL_DEV int64_t vl_val(uint8_t x) { return x; }
VL_DEV int64_t vl_val(vl_bool8 x) { return x.v != 0; }

/* vl_conv<To>::f(compute value) with the rounding / wrapping rules above. */
template <typename To> struct vl_conv;
template <> struct vl_conv<float> {
  static VL_DEV float f(float x) { return x; }
  static VL_DEV float f(double x) { return (float)x; }
  static VL_DEV float f(int64_t x) { return (float)x; }
};
template <> struct vl_conv<__half> {
  static VL_DEV __half f(float x) { return __float2half_rn(x); }
  static VL_DEV __half f(double x) { return __double2half(x); }
  static VL_DEV __half f(int64_t x) { return __double2half((double)x); }
};
template <> struct vl_conv<__nv_bfloat16> {
  static VL_DEV __nv_bfloat16 f(float x) { return __float2bfloat16_rn(x); }
  static VL_DEV __nv_bfloat16 f(double x) { return __double2bfloat16(x); }
  static VL_DEV __nv_bfloat16 f(int64_t x) { return __double2bfloat16((double)x); }
};
template <> struct vl_conv<double> {
  static VL_DEV double f(float x) { return x; }
  static VL_DEV double f(double x) { return x; }
  static VL_DEV double f(int64_t x) { return (double)x; }
};
template <> struct vl_conv<int32_t> {
  static VL_DEV int32_t f(float x) { return (int32_t)x; }
  static VL_DEV int32_t f(double x) { return (int32_t)x; }
  static VL_DEV int32_t f(int64_t x) { return (int32_t)(uint32_t)(uint64_t)x; }
};
template <> struct vl_conv<int64_t> {
  static VL_DEV int64_t f(float x) { return (int64_t)x; }
  static VL_DEV int64_t f(double x) { return (int64_t)x; }
  static VL_DEV int64_t f(int64_t x) { return x; }
};
template <> struct vl_conv<uint8_t> {
  static VL_DEV uint8_t f(float x) { return (uint8_t)(int64_t)x; }
  static VL_DEV uint8_t f(double x) { return (uint8_t)(int64_t)x; }
  static VL_DEV uint8_t f(int64_t x) { return (uint8_t)(uint64_t)x; }
};
template <> struct vl_conv<vl_bool8> {
  static VL_DEV vl_bool8 f(float x) { return vl_bool8{(uint8_t)(x != 0.0f)}; }
  static VL_DEV vl_bool8 f(double x) { return vl_bool8{(uint8_t)(x != 0.0)}; }
  static VL_DEV vl_bool8 f(int64_t x) { return vl_bool8{(uint8_t)(x != 0)}; }
};

/* Any storage type to any other, through the source's compute type. */
template <typename To, typename From> VL_DEV To vl_cast(From x) { return vl_conv<To>::f(vl_val(x)); }

/* NaN tests that also accept integers (never NaN). */
VL_DEV bool vl_isnan(float x) { return x != x; }
VL_DEV bool vl_isnan(double x) { return x != x; }
VL_DEV bool vl_isnan(int64_t) { return false; }

/* ---- dispatch: `T` names the storage type inside `body` ---- */
#define VL_DT_CASE(D, S, T, ...) \
  case D: {                      \
    typedef S T;                 \
    __VA_ARGS__;                 \
  } break;

#define VL_DISPATCH_FLOAT(dt, T, opname, ...)                                               \
  switch (dt) {                                                                            \
    VL_DT_CASE(VL_F32, float, T, __VA_ARGS__)                                                     \
    VL_DT_CASE(VL_F16, __half, T, __VA_ARGS__)                                                    \
    VL_DT_CASE(VL_BF16, __nv_bfloat16, T, __VA_ARGS__)                                            \
    VL_DT_CASE(VL_F64, double, T, __VA_ARGS__)                                                    \
    default:                                                                               \
      return vl_fail(VL_EDTYPE, "%s: dtype %s is not supported on cuda", opname,           \
                     vl_dtype_name(dt));                                                   \
  }

#define VL_DISPATCH_ALL(dt, T, opname, ...)                                                 \
  switch (dt) {                                                                            \
    VL_DT_CASE(VL_F32, float, T, __VA_ARGS__)                                                     \
    VL_DT_CASE(VL_F16, __half, T, __VA_ARGS__)                                                    \
    VL_DT_CASE(VL_BF16, __nv_bfloat16, T, __VA_ARGS__)                                            \
    VL_DT_CASE(VL_F64, double, T, __VA_ARGS__)                                                    \
    VL_DT_CASE(VL_I32, int32_t, T, __VA_ARGS__)                                                   \
    VL_DT_CASE(VL_I64, int64_t, T, __VA_ARGS__)                                                   \
    VL_DT_CASE(VL_U8, uint8_t, T, __VA_ARGS__)                                                    \
    VL_DT_CASE(VL_BOOL, vl_bool8, T, __VA_ARGS__)                                                 \
    default:                                                                               \
      return vl_fail(VL_EDTYPE, "%s: dtype %s is not supported on cuda", opname,           \
                     vl_dtype_name(dt));                                                   \
  }

/* By element size only, for ops that move bits (fill, where, gather): `T` is an unsigned
 * integer of the dtype's size. */
#define VL_DISPATCH_SIZE(dt, T, opname, ...)                                                \
  switch (vl_dtype_size(dt)) {                                                             \
    case 1: { typedef uint8_t T; __VA_ARGS__; } break;                                            \
    case 2: { typedef uint16_t T; __VA_ARGS__; } break;                                           \
    case 4: { typedef uint32_t T; __VA_ARGS__; } break;                                           \
    case 8: { typedef uint64_t T; __VA_ARGS__; } break;                                           \
    default:                                                                               \
      return vl_fail(VL_EDTYPE, "%s: dtype %s is not supported on cuda", opname,           \
                     vl_dtype_name(dt));                                                   \
  }

/* ---- warp / block reductions (blockDim.x a multiple of 32, at most 1024) ---- */
template <typename T, typename Op>
VL_DEV T vl_warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

/* Combines one value per thread of the block in a fixed order (deterministic); the result is
 * valid in thread 0. `sh` holds at least 32 T. */
template <typename T, typename Op>
VL_DEV T vl_block_reduce(T v, Op op, T *sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = vl_warp_reduce(v, op);
  __syncthreads(); /* `sh` may still be read by a previous call */
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = sh[lane < nwarps ? lane : 0];
    if (lane >= nwarps) v = sh[0]; /* placeholder lanes: masked out below */
    T r = v;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      T other = __shfl_down_sync(0xffffffffu, r, o);
      if (lane + o < nwarps) r = op(r, other);
    }
    v = r;
  }
  return v;
}

/* ---- the entry points of the table (cuda_kernels.cu) ---- */
vl_status vl_cuda_fill(const vl_iter *it, double value);
vl_status vl_cuda_copy(const vl_iter *it);
vl_status vl_cuda_unary(vl_unary_op op, const vl_iter *it, double p0, double p1);
vl_status vl_cuda_binary(vl_binary_op op, const vl_iter *it, double alpha);
vl_status vl_cuda_binary_scalar(vl_binary_op op, const vl_iter *it, double s, bool reverse);
vl_status vl_cuda_where(const vl_iter *it);
vl_status vl_cuda_masked_fill(const vl_iter *it, double value);
vl_status vl_cuda_arange(void *out, vl_dtype dt, int64_t numel, double start, double step, vl_exec ex);
vl_status vl_cuda_reduce(const vl_reduce_args *a);
vl_status vl_cuda_softmax(const vl_softmax_args *a);
vl_status vl_cuda_gemm(const vl_gemm_args *a);
vl_status vl_cuda_gather(const vl_index_args *a);
vl_status vl_cuda_scatter_add(const vl_index_args *a);
vl_status vl_cuda_scatter(const vl_index_args *a);
vl_status vl_cuda_scatter_mul(const vl_index_args *a);
vl_status vl_cuda_index_select(const vl_index_args *a);
vl_status vl_cuda_rand(const vl_rand_args *a);
vl_status vl_cuda_scan(const vl_scan_args *a); /* cuda_scan.cu */
vl_status vl_cuda_sort(const vl_sort_args *a);            /* cuda_sort.cu */
vl_status vl_cuda_searchsorted(const vl_search_args *a); /* cuda_sort.cu */
vl_status vl_cuda_check_async(int device);
void vl_cuda_shutdown(void);

#endif
