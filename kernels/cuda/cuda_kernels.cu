/* kernels/cuda/cuda_kernels.cu: the CUDA op table (runtime/backend/kernels.h) and the CUDA backend
 * (runtime/backend/backend.h): the tables, what they support, and the per-device state hooks. */
#include "runtime/backend/backend.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_cudnn.cuh"
#include "runtime/core/cuda.h"

/* A host-side table, left out of Clang's device pass (tools/build-sm70.sh): Clang would emit a
 * const table of host function addresses on the GPU too, which ptxas refuses. nvcc keeps it in
 * both passes, as before, and emits nothing of it on the device. */
#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_kernels vl_cuda_kernels = {
    .name = "cuda",
    .fill = vl_cuda_fill,
    .copy = vl_cuda_copy,
    .unary = vl_cuda_unary,
    .binary = vl_cuda_binary,
    .binary_scalar = vl_cuda_binary_scalar,
    .where = vl_cuda_where,
    .masked_fill = vl_cuda_masked_fill,
    .arange = vl_cuda_arange,
    .reduce = vl_cuda_reduce,
    .softmax = vl_cuda_softmax,
    .gemm = vl_cuda_gemm,
    .gather = vl_cuda_gather,
    .scatter_add = vl_cuda_scatter_add,
    .scatter = vl_cuda_scatter,
    .scatter_mul = vl_cuda_scatter_mul,
    .index_select = vl_cuda_index_select,
    .rand = vl_cuda_rand,
    .scan = vl_cuda_scan,
    .sort = vl_cuda_sort,
    .searchsorted = vl_cuda_searchsorted,
};
#endif

/* cuDNN's double-precision convolutions are NCHW only, so f64 convolutions (gradient checks, not
 * speed) run NCHW here and the front end converts channels-last operands (runtime/nn/conv.c). */
static bool cuda_supports(vl_op_kind op, vl_dtype dt, vl_layout layout) {
  if (op == VL_OP_CONV && dt == VL_F64 && layout == VL_LAYOUT_NHWC) return false;
  return vl_supports_base(op, dt, layout);
}

/* Kernel state first (cuBLAS(Lt) handles and workspaces, then cuDNN handles and plan caches);
 * the pools and streams they may use go afterwards (vl_cuda_teardown in vl_shutdown). */
static void cuda_shutdown(void) {
  vl_cuda_shutdown();
  vl_cudnn_teardown();
}

#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_backend vl_cuda_backend = {
    .name = "cuda",
    .type = VL_CUDA,
    .ops = &vl_cuda_kernels,
    .conv = &vl_cuda_conv_kernels,
    .pooling = &vl_cuda_pooling_kernels,
    .norm = &vl_cuda_norm_kernels,
    .optim = &vl_cuda_optim_kernels,
    .attention = &vl_cuda_attention_kernels,
    .fused = &vl_cuda_fused_kernels,
    .supports = cuda_supports,
    .current_stream = vl_cuda_current_stream,
    .check_async = vl_cuda_check_async,
    .shutdown = cuda_shutdown,
};
#endif
