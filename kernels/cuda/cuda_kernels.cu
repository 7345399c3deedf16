/* kernels/cuda/cuda_kernels.cu: the CUDA op table (kernels/kernels.h). */
#include "kernels/cuda/cuda_common.cuh"

extern "C" const vl_kernels vl_cuda_kernels = {
    "cuda",
    vl_cuda_fill,
    vl_cuda_copy,
    vl_cuda_unary,
    vl_cuda_binary,
    vl_cuda_binary_scalar,
    vl_cuda_where,
    vl_cuda_masked_fill,
    vl_cuda_arange,
    vl_cuda_reduce,
    vl_cuda_softmax,
    vl_cuda_gemm,
    vl_cuda_gather,
    vl_cuda_scatter_add,
    vl_cuda_index_select,
    vl_cuda_rand,
    vl_cuda_check_async,
    vl_cuda_shutdown,
};
