/* kernels/cuda/cuda_norm_cl.cuh: the channels-last (NHWC) batch norm kernels with 16-byte
 * vectors, a part of kernels/cuda/cuda_norm.cu kept in its own file. Included by cuda_norm.cu
 * only, after its helpers (cdiv, aligned16, vl_norm_min, vl_norm_rsqrt) and the scalar kernels. */
#ifndef VL_CUDA_NORM_CL_CUH
#define VL_CUDA_NORM_CL_CUH

/* ---- channels last, vectorised: 16 bytes (V = 16 / sizeof(T) channels) per thread and load ----
 * The scalar kernels above move 2 bytes per thread and load (and divide per element), which left
 * the NHWC batch norm of a ResNet-50 fp16 step at 32 ms, about 7x its HBM time (ncu, 2026-12-02).
 * Used when c % V == 0 and every data pointer is 16-byte aligned; same sums, same fixed order of
 * the partials, so the results stay deterministic. */
template <typename T, int V> struct alignas(16) vl_vec16 { T v[V]; };

template <typename T, typename A, bool BW, int V>
__global__ void __launch_bounds__(256) bn_sums_clv(const T *x, const T *dy, const A *mean, int64_t c, int64_t rows,
                                                   int64_t chunk, A *p1, A *p2) {
  extern __shared__ unsigned char bn_sh_raw[];
  A *sh = reinterpret_cast<A *>(bn_sh_raw); /* [blockDim.y][blockDim.x * V] twice */
  typedef vl_vec16<T, V> VT;
  const int64_t cv = c / V, j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, split = blockIdx.y;
  A s1[V], s2[V], K[V];
#pragma unroll
  for (int k = 0; k < V; k++) s1[k] = s2[k] = 0;
  if (j < cv) {
    if (BW) {
#pragma unroll
      for (int k = 0; k < V; k++) K[k] = mean[j * V + k];
    } else {
      const VT k0 = reinterpret_cast<const VT *>(x)[j];
#pragma unroll
      for (int k = 0; k < V; k++) K[k] = vl_val(k0.v[k]);
    }
    const int64_t r1 = vl_norm_min(rows, (split + 1) * chunk);
#pragma unroll 4
    for (int64_t r = split * chunk + threadIdx.y; r < r1; r += blockDim.y) {
      const VT xv = reinterpret_cast<const VT *>(x)[r * cv + j];
      if (BW) {
        const VT gv = reinterpret_cast<const VT *>(dy)[r * cv + j];
#pragma unroll
        for (int k = 0; k < V; k++) {
          const A g = vl_val(gv.v[k]);
          s1[k] += g;
          s2[k] += g * (vl_val(xv.v[k]) - K[k]);
        }
      } else {
#pragma unroll
        for (int k = 0; k < V; k++) {
          const A d = vl_val(xv.v[k]) - K[k];
          s1[k] += d;
          s2[k] += d * d;
        }
      }
    }
  }
  const int w = blockDim.x * V;
  A *sh1 = sh, *sh2 = sh + (int64_t)blockDim.y * w;
#pragma unroll
  for (int k = 0; k < V; k++) {
    sh1[threadIdx.y * w + threadIdx.x * V + k] = s1[k];
    sh2[threadIdx.y * w + threadIdx.x * V + k] = s2[k];
  }
  __syncthreads();
  if (threadIdx.y == 0 && j < cv) {
    for (int y = 1; y < (int)blockDim.y; y++) {
#pragma unroll
      for (int k = 0; k < V; k++) {
        s1[k] += sh1[y * w + threadIdx.x * V + k];
        s2[k] += sh2[y * w + threadIdx.x * V + k];
      }
    }
#pragma unroll
    for (int k = 0; k < V; k++) {
      p1[split * c + j * V + k] = s1[k];
      p2[split * c + j * V + k] = s2[k];
    }
  }
}

/* V per-channel parameters at c0 as 16-byte loads: consecutive threads read consecutive 16-byte
 * pieces, so a warp's parameter loads coalesce as its data loads do (a scalar load per channel
 * and thread made these kernels slower than the scalar ones: 32 scattered L1 requests per 16
 * bytes of data). The pointers are 16-byte aligned (bn_clv_ok). */
template <typename A, int V>
VL_DEV void bn_load_params(const A *p, int64_t c0, A out[V]) {
  typedef vl_vec16<A, 16 / sizeof(A)> PV;
  constexpr int P = 16 / sizeof(A);
#pragma unroll
  for (int k = 0; k < V; k += P) {
    const PV v = *reinterpret_cast<const PV *>(p + c0 + k);
#pragma unroll
    for (int j = 0; j < P; j++) out[k + j] = v.v[j];
  }
}

template <typename T, typename A, typename I, int V>
__global__ void __launch_bounds__(256) bn_apply_clv(const T *x, T *y, I nvec, I cv, const A *mean, const A *sc,
                                                    bool sc_is_var, A eps, const A *w, const A *b) {
  typedef vl_vec16<T, V> VT;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nvec; i += (I)gridDim.x * blockDim.x) {
    const I c0 = (i % cv) * V;
    const VT xv = reinterpret_cast<const VT *>(x)[i];
    A mu[V], is[V], wv[V], bv[V];
    bn_load_params<A, V>(mean, c0, mu);
    bn_load_params<A, V>(sc, c0, is);
    if (w) bn_load_params<A, V>(w, c0, wv);
    if (b) bn_load_params<A, V>(b, c0, bv);
    VT yv;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const A s = sc_is_var ? vl_norm_rsqrt(is[k] + eps) : is[k];
      A v = (vl_val(xv.v[k]) - mu[k]) * s;
      if (w) v *= wv[k];
      if (b) v += bv[k];
      yv.v[k] = vl_conv<T>::f(v);
    }
    reinterpret_cast<VT *>(y)[i] = yv;
  }
}

template <typename T, typename A, typename I, int V>
__global__ void __launch_bounds__(256) bn_bw_dx_clv(const T *x, const T *dy, T *dx, I nvec, I cv, const A *mean,
                                                    const A *k1, const A *k2, const A *k3) {
  typedef vl_vec16<T, V> VT;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nvec; i += (I)gridDim.x * blockDim.x) {
    const I c0 = (i % cv) * V;
    const VT xv = reinterpret_cast<const VT *>(x)[i], gv = reinterpret_cast<const VT *>(dy)[i];
    A mu[V], a1[V], a2[V], a3[V];
    bn_load_params<A, V>(mean, c0, mu);
    bn_load_params<A, V>(k1, c0, a1);
    bn_load_params<A, V>(k2, c0, a2);
    bn_load_params<A, V>(k3, c0, a3);
    VT ov;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const A d = vl_val(xv.v[k]) - mu[k];
      ov.v[k] = vl_conv<T>::f(a1[k] * (vl_val(gv.v[k]) - a2[k] - d * a3[k]));
    }
    reinterpret_cast<VT *>(dx)[i] = ov;
  }
}

/* The vectorised channels-last path applies: V channels per 16 bytes divide c, data aligned. */
template <typename T>
static bool bn_clv_ok(const vl_batchnorm_args *a, bool bw) {
  const int64_t V = 16 / (int64_t)sizeof(T);
  if (!a->nhwc || a->c % V) return false;
  if (!aligned16(a->x)) return false;
  /* parameters and statistics: NULL (affine off) passes */
  if (!aligned16(a->weight) || !aligned16(a->bias) || !aligned16(a->save_mean) || !aligned16(a->save_invstd) ||
      !aligned16(a->running_mean) || !aligned16(a->running_var))
    return false;
  if (bw) return aligned16(a->dy) && aligned16(a->dx);
  return aligned16(a->y);
}

#endif
