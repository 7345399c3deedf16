/* kernels/cuda/cuda_sort.cu: the stable row sort and searchsorted (runtime/backend/kernels.h).
 *
 * sort: every row (len elements at stride inner in [outer, len, inner]) becomes a segment of
 * order-preserving unsigned keys, the same keys as the CPU's (kernels/cpu/cpu_sort.c): floats
 * flip the sign bit (negatives all bits), -0.0 becomes +0.0, every NaN the all-ones key (largest);
 * signed integers flip the sign bit; descending sorts the complemented key. CUB's segmented
 * stable sort orders (key, position) pairs, so ties keep their input order in both directions and
 * the result equals the CPU's exactly. The values are then copied as bits from the input at the
 * sorted positions. Keys are 32-bit for the dtypes of up to 4 bytes and 64-bit for f64 / i64: two
 * instantiations of the CUB sort. Scratch (keys, positions, offsets, CUB's temporary storage)
 * is one block of the device's caching allocator, freed after the work is enqueued on the stream;
 * rows go to CUB in chunks of whole rows (its sizes are int).
 *
 * searchsorted: one thread per value, PyTorch's binary search with its comparisons. */
#include <cub/device/device_segmented_sort.cuh>
#include <limits.h>

#include "kernels/cuda/cuda_common.cuh"
#include "runtime/core/alloc.h"
#include "runtime/core/cuda.h"

/* ---- order-preserving keys ---- */
VL_DEV uint32_t sort_key32(uint32_t b) {
  if ((b & 0x7fffffffu) > 0x7f800000u) return 0xffffffffu; /* NaN */
  if ((b & 0x7fffffffu) == 0) b = 0;                        /* -0.0 ties with +0.0 */
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
VL_DEV uint32_t sort_key16(uint32_t h, uint32_t inf) {
  if ((h & 0x7fffu) > inf) return 0xffffffffu;
  if ((h & 0x7fffu) == 0) h = 0;
  return (h & 0x8000u) ? (~h & 0xffffu) : (h | 0x8000u);
}
VL_DEV uint32_t sort_key(float x) { return sort_key32(__float_as_uint(x)); }
VL_DEV uint32_t sort_key(__half x) { return sort_key16(__half_as_ushort(x), 0x7c00u); }
VL_DEV uint32_t sort_key(__nv_bfloat16 x) { return sort_key16(__bfloat16_as_ushort(x), 0x7f80u); }
VL_DEV uint32_t sort_key(int32_t x) { return (uint32_t)x ^ 0x80000000u; }
VL_DEV uint32_t sort_key(uint8_t x) { return x; }
VL_DEV uint32_t sort_key(vl_bool8 x) { return x.v != 0; }
VL_DEV uint64_t sort_key(int64_t x) { return (uint64_t)x ^ 0x8000000000000000ull; }
VL_DEV uint64_t sort_key(double x) {
  uint64_t b = (uint64_t)__double_as_longlong(x);
  if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return ~0ull;
  if ((b & 0x7fffffffffffffffull) == 0) b = 0;
  return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}

/* Row r = (o, i) of [outer, len, inner]: element j at o * len * inner + j * inner + i. */
VL_DEV int64_t row_at(int64_t r, int64_t j, int64_t len, int64_t inner) {
  return (r / inner) * len * inner + j * inner + r % inner;
}

template <typename T, typename K>
__global__ void sort_keys_kernel(const T *in, K *keys, int *pos, int64_t r0, int64_t n, int64_t len, int64_t inner,
                                 K flip) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = r0 + e / len, j = e % len;
    keys[e] = (K)sort_key(in[row_at(r, j, len, inner)]) ^ flip;
    pos[e] = (int)j;
  }
}

__global__ void sort_offsets_kernel(int *off, int64_t rows, int64_t len) {
  for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r <= rows; r += (int64_t)gridDim.x * blockDim.x)
    off[r] = (int)(r * len);
}

/* Values copied as bits (U: an unsigned integer of the dtype's size), positions widened to i64. */
template <typename U>
__global__ void sort_gather_kernel(const U *in, const int *pos, U *values, int64_t *indices, int64_t r0, int64_t n,
                                   int64_t len, int64_t inner) {
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = r0 + e / len, j = e % len, p = pos[e];
    int64_t at = row_at(r, j, len, inner);
    values[at] = in[row_at(r, p, len, inner)];
    indices[at] = p;
  }
}

/* One caching-allocator block, freed when the scope ends (after the work was enqueued). */
struct sort_block {
  vl_alloc *pool = NULL;
  vl_block *blk = NULL;
  ~sort_block() {
    if (blk) vl_alloc_free(pool, blk);
  }
};

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* CUB's scratch need for one call over `rows` segments of `len`. */
template <typename K>
static vl_status cub_temp(int64_t rows, int64_t len, cudaStream_t stream, size_t *bytes) {
  *bytes = 0;
  VL_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(NULL, *bytes, (const K *)NULL, (K *)NULL, (const int *)NULL,
                                                          (int *)NULL, (int)(rows * len), (int)rows, (const int *)NULL,
                                                          (const int *)NULL, stream));
  return VL_OK;
}

/* Rows go to CUB in chunks of about VL_SORT_CHUNK elements (whole rows; one longer row alone), so
 * CUB's int sizes hold and the scratch stays bounded (24 bytes per element with 64-bit keys). */
#define VL_SORT_CHUNK ((int64_t)1 << 27)

template <typename T, typename K>
static vl_status sort_typed(const vl_sort_args *a, vl_cuda_state *st) {
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  int64_t rows = a->outer * a->inner, len = a->len;
  if (len > INT_MAX)
    return vl_fail(VL_EINVAL, "sort: a row of %lld elements is longer than the CUDA sort takes (%d)", (long long)len,
                   INT_MAX);
  int64_t crows = VL_SORT_CHUNK / len < 1 ? 1 : VL_SORT_CHUNK / len; /* rows per CUB call */
  if (crows > rows) crows = rows;
  int64_t n = crows * len, last = rows % crows; /* last: the rows of a shorter final chunk, if any */
  size_t temp = 0, temp_last = 0;
  VL_TRY(cub_temp<K>(crows, len, stream, &temp));
  if (last) VL_TRY(cub_temp<K>(last, len, stream, &temp_last));
  if (temp_last > temp) temp = temp_last;
  size_t kb = align256(sizeof(K) * (size_t)n), pb = align256(sizeof(int) * (size_t)n);
  size_t ob = align256(sizeof(int) * (size_t)(crows + 1));
  sort_block sb;
  VL_TRY(vl_cuda_alloc(a->ex.device, &sb.pool));
  VL_TRY(vl_alloc_malloc(sb.pool, 2 * kb + 2 * pb + ob + align256(temp), stream, &sb.blk));
  char *base = (char *)vl_block_ptr(sb.blk);
  K *k_in = (K *)base, *k_out = (K *)(base + kb);
  int *p_in = (int *)(base + 2 * kb), *p_out = (int *)(base + 2 * kb + pb);
  int *off = (int *)(base + 2 * kb + 2 * pb);
  void *tmp = base + 2 * kb + 2 * pb + ob;
  const int block = 256;
  K flip = a->descending ? (K)~(K)0 : (K)0;
  for (int64_t r0 = 0; r0 < rows; r0 += crows) {
    int64_t cr = rows - r0 < crows ? rows - r0 : crows, cn = cr * len;
    size_t tb = temp;
    sort_keys_kernel<T, K><<<vl_grid(cn, block, st, 4), block, 0, stream>>>((const T *)a->in, k_in, p_in, r0, cn,
                                                                             len, a->inner, flip);
    VL_LAUNCH_CHECK();
    sort_offsets_kernel<<<vl_grid(cr + 1, block, st, 4), block, 0, stream>>>(off, cr, len);
    VL_LAUNCH_CHECK();
    VL_CUDA_CHECK(cub::DeviceSegmentedSort::StableSortPairs(tmp, tb, (const K *)k_in, k_out, (const int *)p_in, p_out,
                                                            (int)cn, (int)cr, (const int *)off, (const int *)off + 1,
                                                            stream));
    VL_DISPATCH_SIZE(a->dtype, U, "sort",
                     sort_gather_kernel<U><<<vl_grid(cn, block, st, 4), block, 0, stream>>>(
                         (const U *)a->in, p_out, (U *)a->values, a->indices, r0, cn, len, a->inner));
    VL_LAUNCH_CHECK();
  }
  return VL_OK;
}

template <typename T>
static vl_status sort_dispatch(const vl_sort_args *a, vl_cuda_state *st) {
  if constexpr (sizeof(T) == 8) return sort_typed<T, uint64_t>(a, st);
  else return sort_typed<T, uint32_t>(a, st);
}

vl_status vl_cuda_sort(const vl_sort_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  if (a->outer * a->inner * a->len == 0) return VL_OK;
  VL_DISPATCH_ALL(a->dtype, T, "sort", return sort_dispatch<T>(a, st));
  return VL_OK;
}

/* ---- searchsorted ---- */

template <typename T>
__global__ void search_kernel(const T *seq, const T *values, void *out, int64_t total, int64_t seq_rows, int64_t n,
                              int64_t m, bool right, bool out_i32) {
  typedef typename vl_acc<T>::type C; /* float, double or int64: each dtype compared exactly */
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
    const T *row = seq + (seq_rows == 1 ? 0 : (e / m) * n);
    C v = vl_val(values[e]);
    int64_t lo = 0, hi = n;
    while (lo < hi) {
      int64_t mid = lo + ((hi - lo) >> 1);
      C b = vl_val(row[mid]);
      if (right ? !(b > v) : !(b >= v)) lo = mid + 1; /* a NaN value moves right to n, as PyTorch */
      else hi = mid;
    }
    if (out_i32) ((int32_t *)out)[e] = (int32_t)lo;
    else ((int64_t *)out)[e] = lo;
  }
}

vl_status vl_cuda_searchsorted(const vl_search_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  int64_t total = a->rows * a->m;
  if (total == 0) return VL_OK;
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  const int block = 256;
  unsigned grid = vl_grid(total, block, st, 4);
  VL_DISPATCH_ALL(a->dtype, T, "searchsorted",
                  search_kernel<T><<<grid, block, 0, stream>>>((const T *)a->seq, (const T *)a->values, a->out, total,
                                                               a->seq_rows, a->n, a->m, a->right, a->out_i32));
  VL_LAUNCH_CHECK();
  return VL_OK;
}
