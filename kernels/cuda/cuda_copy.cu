/* kernels/cuda/cuda_copy.cu: fill, copy (any dtype pair), where, masked_fill, arange.
 *
 * Ops that only move bits (fill, same-dtype copy, where, masked_fill) are instantiated per
 * element size, not per dtype; the fill value is converted once on the host with the CPU
 * reference's rules (vl_host_store), so it has exactly the CPU's bits. */
#include "kernels/cuda/cuda_ew.cuh"

template <typename S>
struct vl_fill_f {
  static constexpr int NIN = 0, UNROLL = 4;
  typedef S out_t;
  typedef vl_none in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  S v;
  VL_DEV S operator()(vl_none, vl_none, vl_none) const { return v; }
};

template <typename O, typename I>
struct vl_copy_f {
  static constexpr int NIN = 1, UNROLL = 4;
  typedef O out_t;
  typedef I in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  VL_DEV O operator()(I a, vl_none, vl_none) const {
    if constexpr (std::is_same<O, I>::value) return a;
    else return vl_cast<O>(a);
  }
};

template <typename S>
struct vl_where_f {
  static constexpr int NIN = 3, UNROLL = 2;
  typedef S out_t;
  typedef vl_bool8 in0_t;
  typedef S in1_t;
  typedef S in2_t;
  VL_DEV S operator()(vl_bool8 c, S a, S b) const { return c.v ? a : b; }
};

template <typename S>
struct vl_masked_fill_f {
  static constexpr int NIN = 2, UNROLL = 2;
  typedef S out_t;
  typedef S in0_t;
  typedef vl_bool8 in1_t;
  typedef vl_none in2_t;
  S v;
  VL_DEV S operator()(S a, vl_bool8 m, vl_none) const { return m.v ? v : a; }
};

template <typename F>
static vl_status vl_launch_any(const vl_iter *it, const F &f) {
  return vl_ew_launch(it, f);
}

static int64_t vl_host_f64_to_i64(double v) {
  if (v != v) return 0;
  if (v >= 9223372036854775808.0) return INT64_MAX;
  if (v < -9223372036854775808.0) return INT64_MIN;
  return (int64_t)v;
}

/* One element of dt from a double: direct rounding to f16/bf16, saturating integers (NaN -> 0). */
static void vl_host_store(void *p, vl_dtype dt, double v) {
  switch (dt) {
    case VL_F32: *(float *)p = (float)v; break;
    case VL_F16: { __half h = __double2half(v); memcpy(p, &h, 2); } break;
    case VL_BF16: { __nv_bfloat16 h = __double2bfloat16(v); memcpy(p, &h, 2); } break;
    case VL_F64: *(double *)p = v; break;
    case VL_I32:
      *(int32_t *)p = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
      break;
    case VL_I64: *(int64_t *)p = vl_host_f64_to_i64(v); break;
    case VL_U8: *(uint8_t *)p = (uint8_t)(uint64_t)vl_host_f64_to_i64(v); break;
    case VL_BOOL: *(uint8_t *)p = v != 0.0; break;
    default: break;
  }
}

/* The value as the bits of one element of dt. */
template <typename S>
static S vl_bits_of(double value, vl_dtype dt) {
  S bits = 0;
  vl_host_store(&bits, dt, value);
  return bits;
}

vl_status vl_cuda_fill(const vl_iter *it, double value) {
  const vl_dtype dt = it->dtype[0];
  VL_DISPATCH_SIZE(dt, S, "fill", {
    vl_fill_f<S> f;
    f.v = vl_bits_of<S>(value, dt);
    return vl_launch_any(it, f);
  });
  return VL_OK;
}

template <typename O>
static vl_status vl_copy_to(const vl_iter *it) {
  VL_DISPATCH_ALL(it->dtype[1], I, "copy", return vl_launch_any(it, vl_copy_f<O, I>()));
  return VL_OK;
}

/* A same-dtype strided copy whose innermost dim is contiguous on both sides (the permutes of
 * attention heads: [B, L, nh, hd] <-> [B, nh, L, hd]) moves `wbytes` per element instead: the
 * innermost size and every other stride divided by the widening factor, pointers aligned to it.
 * One element per thread moved 2 bytes per load and ran at a quarter of HBM bandwidth (19.5 ms of
 * a BERT-Large step, ncu 2026-12-02). Returns false when the layout does not allow it. */
static bool vl_copy_widen(const vl_iter *it, int64_t es, int64_t wbytes, vl_iter *w) {
  const int64_t f = wbytes / es;
  const int last = it->ndim - 1;
  if (f <= 1 || last < 0 || it->size[last] % f) return false;
  for (int k = 0; k < 2; k++) {
    if (it->stride[k][last] != 1 || (uintptr_t)it->data[k] % (uintptr_t)wbytes) return false;
    for (int d = 0; d < last; d++)
      if (it->size[d] > 1 && it->stride[k][d] % f) return false;
  }
  *w = *it;
  w->size[last] = it->size[last] / f;
  w->numel = it->numel / f;
  for (int k = 0; k < 2; k++)
    for (int d = 0; d < last; d++) w->stride[k][d] = it->size[d] > 1 ? it->stride[k][d] / f : 0;
  return true;
}

struct alignas(8) vl_bytes8 { uint32_t v[2]; };

vl_status vl_cuda_copy(const vl_iter *it) {
  const vl_dtype odt = it->dtype[0], idt = it->dtype[1];
  if (odt == idt && it->numel > 0 && !vl_iter_is_flat(it)) {
    const int64_t es = (int64_t)vl_dtype_size(odt);
    vl_iter w;
    if (vl_copy_widen(it, es, 16, &w)) return vl_launch_any(&w, vl_copy_f<uint4, uint4>());
    if (vl_copy_widen(it, es, 8, &w)) return vl_launch_any(&w, vl_copy_f<vl_bytes8, vl_bytes8>());
  }
  if (odt == idt) {
    VL_DISPATCH_SIZE(odt, S, "copy", return vl_launch_any(it, vl_copy_f<S, S>()));
    return VL_OK;
  }
  VL_DISPATCH_ALL(odt, O, "copy", return vl_copy_to<O>(it));
  return VL_OK;
}

vl_status vl_cuda_where(const vl_iter *it) {
  const vl_dtype dt = it->dtype[0];
  if (it->dtype[1] != VL_BOOL || it->dtype[2] != dt || it->dtype[3] != dt)
    return vl_fail(VL_EDTYPE, "where: cuda expects a bool condition and %s values, got %s, %s, %s",
                   vl_dtype_name(dt), vl_dtype_name(it->dtype[1]), vl_dtype_name(it->dtype[2]),
                   vl_dtype_name(it->dtype[3]));
  VL_DISPATCH_SIZE(dt, S, "where", return vl_launch_any(it, vl_where_f<S>()));
  return VL_OK;
}

vl_status vl_cuda_masked_fill(const vl_iter *it, double value) {
  const vl_dtype dt = it->dtype[0];
  if (it->dtype[1] != dt || it->dtype[2] != VL_BOOL)
    return vl_fail(VL_EDTYPE, "masked_fill: cuda expects %s input and a bool mask, got %s, %s",
                   vl_dtype_name(dt), vl_dtype_name(it->dtype[1]), vl_dtype_name(it->dtype[2]));
  VL_DISPATCH_SIZE(dt, S, "masked_fill", {
    vl_masked_fill_f<S> f;
    f.v = vl_bits_of<S>(value, dt);
    return vl_launch_any(it, f);
  });
  return VL_OK;
}

/* start + i * step in double, rounded separately as the CPU does (no FMA), then stored with the
 * dtype's conversion. */
template <typename T>
__global__ void __launch_bounds__(VL_EW_BLOCK) vl_arange_kernel(T *out, int64_t n, double start, double step) {
  const int64_t stride = (int64_t)gridDim.x * VL_EW_BLOCK;
  for (int64_t i = (int64_t)blockIdx.x * VL_EW_BLOCK + threadIdx.x; i < n; i += stride)
    out[i] = vl_conv<T>::f(__dadd_rn(start, __dmul_rn((double)i, step)));
}

vl_status vl_cuda_arange(void *out, vl_dtype dt, int64_t numel, double start, double step, vl_exec ex) {
  if (numel <= 0) return VL_OK;
  VL_CUDA_ENTER(guard, st, ex);
  unsigned g = vl_grid(numel, VL_EW_BLOCK, st, 2);
  VL_DISPATCH_ALL(dt, T, "arange", {
    vl_arange_kernel<T><<<g, VL_EW_BLOCK, 0, (cudaStream_t)ex.stream>>>((T *)out, numel, start, step);
  });
  VL_LAUNCH_CHECK();
  return VL_OK;
}
