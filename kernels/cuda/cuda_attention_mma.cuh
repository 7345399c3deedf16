/* kernels/cuda/cuda_attention_mma.cuh: the tensor-core building blocks of the fused attention
 * kernels (kernels/cuda/cuda_attention.cu): asynchronous tile copies into shared memory,
 * ldmatrix fragment loads and the m16n8k16 MMA with f32 accumulation, for f16 and bf16.
 * sm_80 and newer only (mma.sync m16n8k16, cp.async); the callers compile these bodies for such
 * targets alone and never launch on older GPUs.
 *
 * Tiles are 64 rows x D (head dim) elements in shared memory with a row pitch of D + 8 elements:
 * the 16-byte pad puts the 8 rows an ldmatrix reads in 8 different bank groups.
 *
 * Fragment layouts of mma.m16n8k16 (g = lane / 4, t = lane % 4), which the helpers' addressing
 * follows: A (16 x 16, row-major) a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..],
 * a3 = A[g+8][2t+8..]; B (16 x 8) b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]; C (16 x 8, f32)
 * c0,c1 = C[g][2t..2t+1], c2,c3 = C[g+8][2t..2t+1]. Two C tiles side by side (16 x 16) hold
 * exactly an A fragment's elements, which is how probabilities feed the next product without
 * leaving registers. */
#ifndef VL_CUDA_ATTENTION_MMA_CUH
#define VL_CUDA_ATTENTION_MMA_CUH

#include "kernels/cuda/cuda_common.cuh"

#define VL_ATT_ROWS 64   /* rows of a tile (queries or keys) */
#define VL_ATT_THREADS 128 /* 4 warps, 16 rows each */

template <int D> struct vl_att_tile {
  static constexpr int P = D + 8;                /* row pitch in elements */
  static constexpr int ELEMS = VL_ATT_ROWS * P;  /* one tile */
};

VL_DEV uint32_t vl_smem_addr(const void *p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

/* 16 bytes global -> shared, asynchronously; src_bytes 0 fills zeros (rows past the end). */
VL_DEV void vl_cp_async16(void *smem, const void *gmem, int src_bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(vl_smem_addr(smem)), "l"(gmem), "r"(src_bytes));
#endif
}
VL_DEV void vl_cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> VL_DEV void vl_cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

/* Rows row0 .. row0 + 63 of a head (row r at g + r * row_stride, D contiguous elements) into a
 * tile; rows at or past nrows become zeros. All VL_ATT_THREADS threads take part. */
template <typename T, int D>
VL_DEV void vl_att_load_tile(T *tile, const T *g, int64_t row_stride, int row0, int nrows) {
  constexpr int CH = D / 8; /* 16-byte chunks per row */
  for (int c = threadIdx.x; c < VL_ATT_ROWS * CH; c += VL_ATT_THREADS) {
    int r = c / CH, cc = c % CH, gr = row0 + r;
    bool in = gr < nrows;
    const T *src = g + (in ? (int64_t)gr * row_stride : 0) + cc * 8;
    vl_cp_async16(tile + r * vl_att_tile<D>::P + cc * 8, src, in ? 16 : 0);
  }
}

VL_DEV void vl_ldsm_x4(uint32_t r[4], const void *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(vl_smem_addr(p)));
#endif
}
VL_DEV void vl_ldsm_x4_t(uint32_t r[4], const void *p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(vl_smem_addr(p)));
#endif
}

/* The A fragment of rows r0..r0+15, cols c0..c0+15 of a row-major tile. */
template <typename T, int D> VL_DEV void vl_att_frag_a(uint32_t a[4], const T *tile, int r0, int c0) {
  const int lane = threadIdx.x & 31;
  vl_ldsm_x4(a, tile + (r0 + (lane & 15)) * vl_att_tile<D>::P + c0 + (lane >> 4) * 8);
}
/* B fragments of B = tile^T (B[k][n] = tile[n][k]): n-tiles n0 and n0+8, k-chunk c0..c0+15.
 * b[0..1] for n0, b[2..3] for n0 + 8. For S = Q K^T with K's rows in the tile. */
template <typename T, int D> VL_DEV void vl_att_frag_bt(uint32_t b[4], const T *tile, int n0, int c0) {
  const int lane = threadIdx.x & 31;
  vl_ldsm_x4(b, tile + (n0 + (lane & 7) + ((lane >> 4) << 3)) * vl_att_tile<D>::P + c0 + ((lane >> 3) & 1) * 8);
}
/* B fragments of B = tile (B[k][n] = tile[k][n]): k-chunk k0..k0+15, n-tiles n0 and n0+8. For
 * O = P V with V's rows (keys) in the tile. */
template <typename T, int D> VL_DEV void vl_att_frag_b(uint32_t b[4], const T *tile, int k0, int n0) {
  const int lane = threadIdx.x & 31;
  vl_ldsm_x4_t(b, tile + (k0 + (lane & 15)) * vl_att_tile<D>::P + n0 + (lane >> 4) * 8);
}

template <typename T> struct vl_att_mma;
template <> struct vl_att_mma<__half> {
  static VL_DEV uint32_t pack(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static VL_DEV void run(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};
template <> struct vl_att_mma<__nv_bfloat16> {
  static VL_DEV uint32_t pack(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
  static VL_DEV void run(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
  }
};

/* acc[8][4] (16 rows x 64 cols) += A (16 x D, fragments af[D/16]) * tile^T, the tile's 64 rows
 * being the 64 columns: S = Q K^T, or S^T = K Q^T, or dP = dO V^T. */
template <typename T, int D> VL_DEV void vl_att_mm_abt(float acc[8][4], const uint32_t af[D / 16][4], const T *tile) {
#pragma unroll
  for (int kc = 0; kc < D / 16; kc++) {
#pragma unroll
    for (int np = 0; np < 4; np++) {
      uint32_t b[4];
      vl_att_frag_bt<T, D>(b, tile, np * 16, kc * 16);
      vl_att_mma<T>::run(acc[2 * np], af[kc], b[0], b[1]);
      vl_att_mma<T>::run(acc[2 * np + 1], af[kc], b[2], b[3]);
    }
  }
}

/* acc[D/8][4] (16 rows x D) += X (16 x 64, the f32 C tiles x[8][4], rounded to T) * tile (64 x D):
 * O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K. */
template <typename T, int D> VL_DEV void vl_att_mm_pb(float acc[D / 8][4], const float x[8][4], const T *tile) {
#pragma unroll
  for (int kc = 0; kc < 4; kc++) {
    uint32_t a[4] = {vl_att_mma<T>::pack(x[2 * kc][0], x[2 * kc][1]), vl_att_mma<T>::pack(x[2 * kc][2], x[2 * kc][3]),
                     vl_att_mma<T>::pack(x[2 * kc + 1][0], x[2 * kc + 1][1]),
                     vl_att_mma<T>::pack(x[2 * kc + 1][2], x[2 * kc + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; dp++) {
      uint32_t b[4];
      vl_att_frag_b<T, D>(b, tile, kc * 16, dp * 16);
      vl_att_mma<T>::run(acc[2 * dp], a, b[0], b[1]);
      vl_att_mma<T>::run(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

/* The warp's 16 x D A fragments from rows r0.. of a tile (loaded once, kept in registers). */
template <typename T, int D> VL_DEV void vl_att_frags(uint32_t af[D / 16][4], const T *tile, int r0) {
#pragma unroll
  for (int kc = 0; kc < D / 16; kc++) vl_att_frag_a<T, D>(af[kc], tile, r0, kc * 16);
}

/* Stores a warp's 16 x D f32 accumulator (scaled by mul[0] for row g, mul[1] for row g + 8) as T
 * into rows row0.. of a head (row r at g + r * row_stride), rows at or past nrows skipped. */
template <typename T, int D>
VL_DEV void vl_att_store(T *g, int64_t row_stride, int row0, int nrows, const float acc[D / 8][4], const float mul[2]) {
  const int lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
#pragma unroll
  for (int half = 0; half < 2; half++) {
    int r = row0 + gq + half * 8;
    if (r >= nrows) continue;
    T *row = g + (int64_t)r * row_stride;
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) {
      uint32_t v = vl_att_mma<T>::pack(acc[dt][2 * half] * mul[half], acc[dt][2 * half + 1] * mul[half]);
      *reinterpret_cast<uint32_t *>(row + dt * 8 + 2 * t) = v;
    }
  }
}

#endif
