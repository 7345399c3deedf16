/* kernels/cuda/cuda_norm_cl.cuh: the batch norm kernels with 16-byte vectors, a part of
 * kernels/cuda/cuda_batchnorm.cu kept in its own file. Included by cuda_batchnorm.cu only, after
 * its helpers (bn_value, bn_mask, bn_keep) and the scalar kernels. */
#ifndef VL_CUDA_NORM_CL_CUH
#define VL_CUDA_NORM_CL_CUH

/* ---- 16 bytes (V = 16 / sizeof(T) elements) per thread and load ----
 * The scalar kernels move 2 bytes per thread and load (and divide per element), which left the
 * NHWC batch norm of a ResNet-50 fp16 step at 32 ms, about 7x its HBM time (ncu, 2026-12-02).
 * Channels last (CL): a vector holds V channels of one position, used when c % V == 0; NCHW: V
 * positions of one channel, used when hw % V == 0 (the fused forms run these, cuDNN does the
 * plain NCHW batch norm). Every data pointer 16-byte aligned; same sums, same fixed order of the
 * partials, so the results stay deterministic. */
template <typename T, int V> struct alignas(16) vl_vec16 { T v[V]; };

/* V per-channel parameters at c0 as 16-byte loads: consecutive threads read consecutive 16-byte
 * pieces, so a warp's parameter loads coalesce as its data loads do (a scalar load per channel
 * and thread made these kernels slower than the scalar ones: 32 scattered L1 requests per 16
 * bytes of data). The pointers are 16-byte aligned (bn_vec_ok); NULL gives `def`. */
template <typename A, int V>
VL_DEV void bn_load_params(const A *p, int64_t c0, A out[V], A def) {
  typedef vl_vec16<A, 16 / sizeof(A)> PV;
  constexpr int P = 16 / sizeof(A);
  if (!p) {
#pragma unroll
    for (int k = 0; k < V; k++) out[k] = def;
    return;
  }
#pragma unroll
  for (int k = 0; k < V; k += P) {
    const PV v = *reinterpret_cast<const PV *>(p + c0 + k);
#pragma unroll
    for (int j = 0; j < P; j++) out[k + j] = v.v[j];
  }
}

/* Channels last: block (bx vectors of channels, by row lanes), per-thread channels fixed, so the
 * mask's parameters are loaded once. BW: the sums of the masked dy (bn_mask; M its mode, fixed at
 * compile time so that the plain backward keeps no mask parameters in registers). */
template <typename T, typename A, bool BW, int V, int M>
__global__ void __launch_bounds__(256) bn_sums_clv(const T *x, const T *dy, const A *mean, int64_t c, int64_t rows,
                                                   int64_t chunk, A *p1, A *p2, bn_mask<T, A> mk) {
  extern __shared__ unsigned char bn_sh_raw[];
  A *sh = reinterpret_cast<A *>(bn_sh_raw); /* [blockDim.y][blockDim.x * V] twice */
  typedef vl_vec16<T, V> VT;
  const int64_t cv = c / V, j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, split = blockIdx.y;
  A s1[V], s2[V], K[V];
#pragma unroll
  for (int k = 0; k < V; k++) s1[k] = s2[k] = 0;
  if (j < cv) {
    A is[V], wv[V], bv[V]; /* the forward's parameters, for BN_MASK_X */
#pragma unroll
    for (int k = 0; k < V; k++) is[k] = wv[k] = 1, bv[k] = 0;
    if (BW) {
      bn_load_params<A, V>(mean, j * V, K, (A)0);
      if (M == BN_MASK_X) {
        bn_load_params<A, V>(mk.invstd, j * V, is, (A)1);
        bn_load_params<A, V>(mk.w, j * V, wv, (A)1);
        bn_load_params<A, V>(mk.b, j * V, bv, (A)0);
      }
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
        A g[V];
#pragma unroll
        for (int k = 0; k < V; k++) g[k] = vl_val(gv.v[k]);
        if (M == BN_MASK_X) {
#pragma unroll
          for (int k = 0; k < V; k++)
            if (!bn_keep<T>(bn_value(vl_val(xv.v[k]), K[k], is[k], wv[k], bv[k]))) g[k] = 0;
        } else if (M == BN_MASK_Y) {
          const VT yv = reinterpret_cast<const VT *>(mk.y)[r * cv + j];
          VT dv;
#pragma unroll
          for (int k = 0; k < V; k++) {
            if (!(vl_val(yv.v[k]) > (A)0)) g[k] = 0;
            dv.v[k] = vl_conv<T>::f(g[k]);
          }
          reinterpret_cast<VT *>(mk.dr)[r * cv + j] = dv;
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
          s1[k] += g[k];
          s2[k] += g[k] * (vl_val(xv.v[k]) - K[k]);
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

/* NCHW: block (channel, split) over the channel's vectors u = o * iv + i (iv = inner / V). */
template <typename T, typename A, bool BW, int V>
__global__ void __launch_bounds__(256) bn_sums_rowsv(const T *x, const T *dy, const A *mean, int64_t c, int64_t iv,
                                                     int64_t units, int64_t chunk, A *p1, A *p2, bn_mask<T, A> mk) {
  __shared__ A sh[32];
  typedef vl_vec16<T, V> VT;
  const int64_t ci = blockIdx.x, split = blockIdx.y;
  const A K = BW ? mean[ci] : vl_val(x[ci * iv * V]);
  A is = 1, w = 1, b = 0;
  if (BW && mk.mode == BN_MASK_X) {
    is = mk.invstd[ci];
    if (mk.w) w = mk.w[ci];
    if (mk.b) b = mk.b[ci];
  }
  const int64_t u1 = vl_norm_min(units, (split + 1) * chunk);
  A s1 = 0, s2 = 0;
  for (int64_t u = split * chunk + threadIdx.x; u < u1; u += blockDim.x) {
    const int64_t o = u / iv, idx = (o * c + ci) * iv + (u - o * iv);
    const VT xv = reinterpret_cast<const VT *>(x)[idx];
    if (BW) {
      const VT gv = reinterpret_cast<const VT *>(dy)[idx];
      VT yv, dv;
      if (mk.mode == BN_MASK_Y) yv = reinterpret_cast<const VT *>(mk.y)[idx];
#pragma unroll
      for (int k = 0; k < V; k++) {
        const A xk = vl_val(xv.v[k]);
        A g = vl_val(gv.v[k]);
        if (mk.mode == BN_MASK_X && !bn_keep<T>(bn_value(xk, K, is, w, b))) g = 0;
        if (mk.mode == BN_MASK_Y) {
          if (!(vl_val(yv.v[k]) > (A)0)) g = 0;
          dv.v[k] = vl_conv<T>::f(g);
        }
        s1 += g;
        s2 += g * (xk - K);
      }
      if (mk.mode == BN_MASK_Y) reinterpret_cast<VT *>(mk.dr)[idx] = dv;
    } else {
#pragma unroll
      for (int k = 0; k < V; k++) {
        const A d = vl_val(xv.v[k]) - K;
        s1 += d;
        s2 += d * d;
      }
    }
  }
  s1 = vl_block_reduce(s1, vl_norm_add(), sh);
  s2 = vl_block_reduce(s2, vl_norm_add(), sh);
  if (threadIdx.x == 0) {
    p1[split * c + ci] = s1;
    p2[split * c + ci] = s2;
  }
}

/* NCHW: y = act(bn(x) + r) over vectors of one channel each (iv = inner / V per plane). */
template <typename T, typename A, typename I, int V>
__global__ void __launch_bounds__(256) bn_apply_v(const T *x, T *y, I nvec, I iv, I c, const A *mean, const A *sc,
                                                  bool sc_is_var, A eps, const A *w, const A *b, const T *r,
                                                  bool relu) {
  typedef vl_vec16<T, V> VT;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nvec; i += (I)gridDim.x * blockDim.x) {
    const I ci = (i / iv) % c;
    const A mu = mean[ci], s = sc_is_var ? vl_norm_rsqrt(sc[ci] + eps) : sc[ci], wc = w ? w[ci] : (A)1,
            bc = b ? b[ci] : (A)0;
    const VT xv = reinterpret_cast<const VT *>(x)[i];
    VT rv, yv;
    if (r) rv = reinterpret_cast<const VT *>(r)[i];
#pragma unroll
    for (int k = 0; k < V; k++) {
      A v = bn_value(vl_val(xv.v[k]), mu, s, wc, bc);
      if (r) v += vl_val(rv.v[k]);
      yv.v[k] = vl_conv<T>::f(bn_act(v, relu));
    }
    reinterpret_cast<VT *>(y)[i] = yv;
  }
}

/* NCHW: dx = k1 (g - k2 - (x - mean) k3), g = dy masked by the recomputed forward value
 * (BN_MASK_X), or dy as given (BN_MASK_Y hands in dr). */
template <typename T, typename A, typename I, int V>
__global__ void __launch_bounds__(256) bn_bw_dx_v(const T *x, const T *dy, T *dx, I nvec, I iv, I c, const A *mean,
                                                  const A *k1, const A *k2, const A *k3, bn_mask<T, A> mk) {
  typedef vl_vec16<T, V> VT;
  for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < nvec; i += (I)gridDim.x * blockDim.x) {
    const I ci = (i / iv) % c;
    const A mu = mean[ci], a1 = k1[ci], a2 = k2[ci], a3 = k3[ci];
    A is, wc, bc;
    bn_mask_params(mk, ci, is, wc, bc);
    const VT xv = reinterpret_cast<const VT *>(x)[i], gv = reinterpret_cast<const VT *>(dy)[i];
    VT ov;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const A xk = vl_val(xv.v[k]);
      A g = vl_val(gv.v[k]);
      if (mk.mode == BN_MASK_X && !bn_keep<T>(bn_value(xk, mu, is, wc, bc))) g = 0;
      ov.v[k] = vl_conv<T>::f(a1 * (g - a2 - (xk - mu) * a3));
    }
    reinterpret_cast<VT *>(dx)[i] = ov;
  }
}

/* Channels last, 2-D: block (bx vectors of channels, by row lanes) over a split of the rows
 * (blockIdx.y), as the sums. A thread's channels are fixed, so its per-channel parameters are
 * loaded once, not per element (the masked dx needs 7 vectors of them), and no index needs a
 * division. The outputs are fresh tensors (__restrict__: the loads of the unrolled rows may be
 * issued ahead of the stores). */
template <typename T, typename A, int V>
__global__ void __launch_bounds__(256) bn_apply_clv(const T *__restrict__ x, T *__restrict__ y, int64_t rows,
                                                    int64_t cv, int64_t chunk, const A *mean, const A *sc,
                                                    bool sc_is_var, A eps, const A *w, const A *b,
                                                    const T *__restrict__ r, bool relu) {
  typedef vl_vec16<T, V> VT;
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= cv) return;
  A mu[V], s[V], wv[V], bv[V];
  bn_load_params<A, V>(mean, j * V, mu, (A)0);
  bn_load_params<A, V>(sc, j * V, s, (A)1);
  bn_load_params<A, V>(w, j * V, wv, (A)1);
  bn_load_params<A, V>(b, j * V, bv, (A)0);
  if (sc_is_var) {
#pragma unroll
    for (int k = 0; k < V; k++) s[k] = vl_norm_rsqrt(s[k] + eps);
  }
  const int64_t r1 = vl_norm_min(rows, (blockIdx.y + 1) * chunk);
#pragma unroll 4
  for (int64_t row = blockIdx.y * chunk + threadIdx.y; row < r1; row += blockDim.y) {
    const int64_t i = row * cv + j;
    const VT xv = reinterpret_cast<const VT *>(x)[i];
    VT rv, yv;
    if (r) rv = reinterpret_cast<const VT *>(r)[i];
#pragma unroll
    for (int k = 0; k < V; k++) {
      A v = bn_value(vl_val(xv.v[k]), mu[k], s[k], wv[k], bv[k]);
      if (r) v += vl_val(rv.v[k]);
      yv.v[k] = vl_conv<T>::f(bn_act(v, relu));
    }
    reinterpret_cast<VT *>(y)[i] = yv;
  }
}

template <typename T, typename A, int V, bool RECOMPUTE>
__global__ void __launch_bounds__(256) bn_bw_dx_clv(const T *__restrict__ x, const T *__restrict__ dy,
                                                    T *__restrict__ dx, int64_t rows, int64_t cv, int64_t chunk,
                                                    const A *mean, const A *k1, const A *k2, const A *k3,
                                                    bn_mask<T, A> mk) {
  typedef vl_vec16<T, V> VT;
  const int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= cv) return;
  const bool recompute = RECOMPUTE; /* mk.mode == BN_MASK_X */
  A mu[V], a1[V], a2[V], a3[V], is[V], wv[V], bv[V];
  bn_load_params<A, V>(mean, j * V, mu, (A)0);
  bn_load_params<A, V>(k1, j * V, a1, (A)0);
  bn_load_params<A, V>(k2, j * V, a2, (A)0);
  bn_load_params<A, V>(k3, j * V, a3, (A)0);
  bn_load_params<A, V>(recompute ? mk.invstd : NULL, j * V, is, (A)1);
  bn_load_params<A, V>(recompute ? mk.w : NULL, j * V, wv, (A)1);
  bn_load_params<A, V>(recompute ? mk.b : NULL, j * V, bv, (A)0);
  const int64_t r1 = vl_norm_min(rows, (blockIdx.y + 1) * chunk);
#pragma unroll 4
  for (int64_t row = blockIdx.y * chunk + threadIdx.y; row < r1; row += blockDim.y) {
    const int64_t i = row * cv + j;
    const VT xv = reinterpret_cast<const VT *>(x)[i], gv = reinterpret_cast<const VT *>(dy)[i];
    VT ov;
#pragma unroll
    for (int k = 0; k < V; k++) {
      const A xk = vl_val(xv.v[k]);
      A g = vl_val(gv.v[k]);
      if (recompute && !bn_keep<T>(bn_value(xk, mu[k], is[k], wv[k], bv[k]))) g = 0;
      ov.v[k] = vl_conv<T>::f(a1[k] * (g - a2[k] - (xk - mu[k]) * a3[k]));
    }
    reinterpret_cast<VT *>(dx)[i] = ov;
  }
}

/* The vector kernels apply: V elements per 16 bytes divide c (CL) or hw (NCHW), every data
 * pointer is 16-byte aligned, and (CL) so are the per-channel parameters. NULL passes. */
template <typename T>
static bool bn_vec_ok(const vl_batchnorm_args *a, bool bw) {
  const int64_t V = 16 / (int64_t)sizeof(T);
  if (a->nhwc ? a->c % V : a->hw % V) return false;
  if (!aligned16(a->x) || !aligned16(a->y) || !aligned16(a->r) || !aligned16(a->dr)) return false;
  if (bw && (!aligned16(a->dy) || !aligned16(a->dx))) return false;
  if (!a->nhwc) return true; /* one channel per vector: scalar parameter loads */
  return aligned16(a->weight) && aligned16(a->bias) && aligned16(a->save_mean) && aligned16(a->save_invstd) &&
         aligned16(a->running_mean) && aligned16(a->running_var);
}

#endif
