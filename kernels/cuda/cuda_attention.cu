/* kernels/cuda/cuda_attention.cu: fused scaled-dot-product attention on tensor cores, forward and
 * backward, after FlashAttention-2 (Dao, 2023): the contract is runtime/backend/nn_kernels.h's.
 *
 * Forward: a block of 4 warps takes 64 queries of one (batch, head); each warp keeps its 16
 * queries' fragments in registers and walks the keys 64 at a time: S = Q K^T on tensor cores,
 * scale, mask and causal in registers, an online softmax (running max and sum per row, the
 * accumulator rescaled when the max grows), dropout decided from Philox and written as bits,
 * then O += P V with P fed from the accumulator registers. The rows' log-sum-exp is kept.
 * Backward: delta = dO . O per row first (and the f32 dQ accumulator zeroed); then one kernel
 * per 64 keys walks every query tile: S^T = K Q^T, P^T from lse, dV += P~^T dO, dP^T = V dO^T,
 * dS^T = P^T (dP~^T - delta), dK += dS^T Q, and this tile's share of dQ = dS K, which goes through
 * shared memory (dS by query rows) and is added to the accumulator with f32 atomics; a last pass
 * rounds dQ into its output. The atomics make dQ's last bits depend on the order the key tiles
 * arrive in (dK and dV are deterministic).
 *
 * Scope: f16 and bf16, head dim 64, sm_80 or newer (mma.sync m16n8k16, ldmatrix, cp.async),
 * rows 16-byte aligned; everything else is refused by `supports` and runs as the composition of
 * tensor ops (scripts/v100/nn/functional.lua). The CPU kernels (kernels/cpu/cpu_attention.c) are
 * the reference: tests/lua/gpu_attention.lua compares the two. */
#include <math.h>
#include <string.h>

#include "kernels/cuda/cuda_attention_mma.cuh"
#include "runtime/backend/nn_kernels.h"
#include "runtime/core/philox.h"

namespace {

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
constexpr float kInf = __builtin_huge_valf();
#endif

/* What the kernels read, by value. Sizes that index within a head fit in int (checked). */
struct att_dev {
  const void *q, *k, *v, *o, *dout;
  void *out, *dq, *dk, *dv;
  int64_t q_st[3], k_st[3], v_st[3], o_st[3], do_st[3], dq_st[3], dk_st[3], dv_st[3];
  const float *mask;
  int64_t m_st[4];
  float *lse;
  float *delta;
  float *dq_acc;
  uint8_t *keep;
  int H, L, S, S8;
  float scale, inv_keep;
  uint32_t keep_below;
  int causal, dropout;
  uint64_t seed, offset;
  const uint64_t *base;
};

template <typename T, int D> constexpr int smem_tiles_bytes(int tiles) {
  return tiles * vl_att_tile<D>::ELEMS * (int)sizeof(T);
}

/* The device helpers exist only where the kernels are compiled (sm_80 and newer). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
VL_DEV uint32_t word_of(const vl_philox4 &w, int i) {
  return i == 0 ? w.x[0] : i == 1 ? w.x[1] : i == 2 ? w.x[2] : w.x[3];
}

/* The dropout decisions of elements e and e + 1 (runtime/core/philox.h's bernoulli stream). */
VL_DEV void keep_pair(uint64_t seed, uint64_t offset, uint64_t e, uint32_t below, bool &k0, bool &k1) {
  uint64_t g = e >> 2;
  vl_philox4 w = vl_philox(seed, offset + g);
  int j = (int)(e & 3);
  k0 = (word_of(w, j) >> 9) < below;
  if (j < 3) {
    k1 = (word_of(w, j + 1) >> 9) < below;
  } else {
    vl_philox4 w2 = vl_philox(seed, offset + g + 1);
    k1 = (w2.x[0] >> 9) < below;
  }
}

VL_DEV float mask_at(const att_dev &p, int b, int h, int q, int key) {
  return p.mask[b * p.m_st[0] + h * p.m_st[1] + (int64_t)q * p.m_st[2] + (int64_t)key * p.m_st[3]];
}

/* The scaled, masked scores of a warp's 16 x 64 tile in place: rows (queries) rq[2], columns
 * (keys) k0 + nt * 8 + 2t + c. mask_s: the tile's per-key mask (NULL: per element or none). */
VL_DEV void scores_q_rows(const att_dev &p, float s[8][4], int b, int h, const int rq[2], int k0, const float *mask_s) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < 8; nt++)
#pragma unroll
    for (int c = 0; c < 4; c++) {
      int q = rq[c >> 1], col = nt * 8 + 2 * t + (c & 1), key = k0 + col;
      float z = s[nt][c] * p.scale;
      if (key >= p.S || (p.causal && key > q)) z = -kInf;
      else if (mask_s) z += mask_s[col];
      else if (p.mask) z += mask_at(p, b, h, q < p.L ? q : p.L - 1, key);
      s[nt][c] = z;
    }
}

/* The per-key mask of keys k0 .. k0 + 63 into shared memory (threads 0..63). */
VL_DEV void load_mask_keys(const att_dev &p, float *mask_s, int b, int h, int k0) {
  if (threadIdx.x < VL_ATT_ROWS) {
    int key = k0 + threadIdx.x;
    mask_s[threadIdx.x] = key < p.S ? p.mask[b * p.m_st[0] + h * p.m_st[1] + (int64_t)key * p.m_st[3]] : 0.f;
  }
}

#endif

template <typename T, int D>
__global__ void __launch_bounds__(VL_ATT_THREADS) att_fwd(const att_dev p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int E = vl_att_tile<D>::ELEMS;
  /* Q, then K and V twice: the next key tile loads while this one is computed */
  T *Qs = reinterpret_cast<T *>(smem), *Kb = Qs + E, *Vb = Kb + 2 * E;
  float *mask_b = reinterpret_cast<float *>(Vb + 2 * E); /* [2][64] */
  const int bh = blockIdx.x, b = bh / p.H, h = bh % p.H, q0 = blockIdx.y * VL_ATT_ROWS;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const T *qg = static_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1];
  const T *kg = static_cast<const T *>(p.k) + b * p.k_st[0] + h * p.k_st[1];
  const T *vg = static_cast<const T *>(p.v) + b * p.v_st[0] + h * p.v_st[1];
  uint64_t seed = p.seed, offset = p.offset;
  if (p.base) {
    seed = p.base[0];
    offset += p.base[1];
  }
  const bool per_key = p.mask && p.m_st[2] == 0;

  int ntiles = (p.S + VL_ATT_ROWS - 1) / VL_ATT_ROWS;
  if (p.causal) ntiles = min(ntiles, q0 / VL_ATT_ROWS + 1);
  vl_att_load_tile<T, D>(Qs, qg, p.q_st[2], q0, p.L);
  vl_cp_async_commit();
  vl_att_load_tile<T, D>(Kb, kg, p.k_st[2], 0, p.S);
  vl_att_load_tile<T, D>(Vb, vg, p.v_st[2], 0, p.S);
  vl_cp_async_commit();
  if (per_key) load_mask_keys(p, mask_b, b, h, 0);
  vl_cp_async_wait<1>();
  __syncthreads();
  uint32_t qf[D / 16][4];
  vl_att_frags<T, D>(qf, Qs, warp * 16);

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-kInf, -kInf}, l[2] = {0.f, 0.f};
  const int rq[2] = {q0 + warp * 16 + gq, q0 + warp * 16 + gq + 8};

  for (int kt = 0; kt < ntiles; kt++) {
    const int k0 = kt * VL_ATT_ROWS, cur = kt & 1;
    const T *Ks = Kb + cur * E, *Vs = Vb + cur * E;
    const float *mask_s = mask_b + cur * VL_ATT_ROWS;
    if (kt + 1 < ntiles) { /* the other buffers were last read before the previous tile's end barrier */
      vl_att_load_tile<T, D>(Kb + (cur ^ 1) * E, kg, p.k_st[2], k0 + VL_ATT_ROWS, p.S);
      vl_att_load_tile<T, D>(Vb + (cur ^ 1) * E, vg, p.v_st[2], k0 + VL_ATT_ROWS, p.S);
      if (per_key) load_mask_keys(p, mask_b + (cur ^ 1) * VL_ATT_ROWS, b, h, k0 + VL_ATT_ROWS);
    }
    vl_cp_async_commit(); /* possibly empty: one group per iteration keeps the count simple */
    vl_cp_async_wait<1>(); /* all but the newest group: this tile's K and V are in */
    __syncthreads();

    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    vl_att_mm_abt<T, D>(s, qf, Ks);
    scores_q_rows(p, s, b, h, rq, k0, per_key ? mask_s : nullptr);

    /* online softmax: per row, the running max m and (per thread, partial) sum l */
#pragma unroll
    for (int half = 0; half < 2; half++) {
      float mx = -kInf;
#pragma unroll
      for (int nt = 0; nt < 8; nt++) mx = fmaxf(mx, fmaxf(s[nt][2 * half], s[nt][2 * half + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mnew = fmaxf(m[half], mx), muse = mnew == -kInf ? 0.f : mnew;
      const float alpha = __expf(m[half] - muse);
      m[half] = mnew;
      l[half] *= alpha;
#pragma unroll
      for (int dt = 0; dt < D / 8; dt++) {
        o[dt][2 * half] *= alpha;
        o[dt][2 * half + 1] *= alpha;
      }
#pragma unroll
      for (int nt = 0; nt < 8; nt++)
#pragma unroll
        for (int c = 2 * half; c < 2 * half + 2; c++) {
          float e = __expf(s[nt][c] - muse);
          l[half] += e;
          s[nt][c] = e;
        }
    }

    if (p.dropout) {
#pragma unroll
      for (int nt = 0; nt < 8; nt++) {
        const int key = k0 + nt * 8 + 2 * t;
        bool kb[2][2]; /* [row half][key 0/1] */
        if (p.S % 4 == 0) {
          /* keys key0 & ~3 .. +3 of a row are one Philox block, shared by threads t and t^1:
           * each computes the block of one of its two rows and hands the partner the two words
           * of the partner's keys, so every block is computed once. */
          const int mine = t & 1, q = mine ? rq[1] : rq[0];
          const uint64_t e = ((uint64_t)bh * p.L + (q < p.L ? q : 0)) * p.S + (k0 + nt * 8 + 2 * (t & ~1));
          const vl_philox4 w = vl_philox(seed, offset + (e >> 2));
          const uint32_t s0 = mine ? w.x[0] : w.x[2], s1 = mine ? w.x[1] : w.x[3];
          const uint32_t r0 = __shfl_xor_sync(0xffffffffu, s0, 1), r1 = __shfl_xor_sync(0xffffffffu, s1, 1);
          const uint32_t own0 = mine ? w.x[2] : w.x[0], own1 = mine ? w.x[3] : w.x[1];
          const bool a0 = (own0 >> 9) < p.keep_below, a1 = (own1 >> 9) < p.keep_below;
          const bool b0 = (r0 >> 9) < p.keep_below, b1 = (r1 >> 9) < p.keep_below;
          /* selects, not kb[mine][.]: a run-time index would put kb in local memory */
          kb[0][0] = mine ? b0 : a0;
          kb[0][1] = mine ? b1 : a1;
          kb[1][0] = mine ? a0 : b0;
          kb[1][1] = mine ? a1 : b1;
        } else {
#pragma unroll
          for (int half = 0; half < 2; half++) {
            kb[half][0] = kb[half][1] = false;
            if (rq[half] < p.L && key < p.S)
              keep_pair(seed, offset, ((uint64_t)bh * p.L + rq[half]) * p.S + key, p.keep_below, kb[half][0], kb[half][1]);
          }
        }
#pragma unroll
        for (int half = 0; half < 2; half++) {
          const int q = rq[half];
          const bool in = q < p.L && key < p.S;
          const bool k0b = in && kb[half][0], k1b = in && key + 1 < p.S && kb[half][1]; /* no bits past the row */
          s[nt][2 * half] = k0b ? s[nt][2 * half] * p.inv_keep : 0.f;
          s[nt][2 * half + 1] = k1b ? s[nt][2 * half + 1] * p.inv_keep : 0.f;
          /* the row's byte for these 8 keys: bits 2t, 2t+1 from each thread of the quad */
          uint32_t bits = ((uint32_t)k0b | ((uint32_t)k1b << 1)) << (2 * t);
          bits |= __shfl_xor_sync(0xffffffffu, bits, 1);
          bits |= __shfl_xor_sync(0xffffffffu, bits, 2);
          if ((nt & 3) == t && q < p.L && k0 + nt * 8 < p.S)
            p.keep[((int64_t)bh * p.L + q) * p.S8 + k0 / 8 + nt] = (uint8_t)bits;
        }
      }
    }

    vl_att_mm_pb<T, D>(o, s, Vs);
    __syncthreads(); /* this tile's buffers may be refilled by the next iteration's prefetch */
  }

  float mul[2];
#pragma unroll
  for (int half = 0; half < 2; half++) {
    float sum = l[half];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    mul[half] = sum > 0.f ? 1.f / sum : 0.f;
    if (t == 0 && rq[half] < p.L) p.lse[(int64_t)bh * p.L + rq[half]] = sum > 0.f ? m[half] + __logf(sum) : kInf;
  }
  T *og = static_cast<T *>(p.out) + b * p.o_st[0] + h * p.o_st[1];
  vl_att_store<T, D>(og, p.o_st[2], q0 + warp * 16, p.L, o, mul);
#endif
}

/* dK and dV of 64 keys, over every query tile. */
template <typename T, int D>
__global__ void __launch_bounds__(VL_ATT_THREADS) att_bwd_kv(const att_dev p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  extern __shared__ __align__(16) unsigned char smem[];
  constexpr int E = vl_att_tile<D>::ELEMS, R = VL_ATT_ROWS;
  /* K, V, then Q and dO twice (the next query tile loads while this one is computed), the tile's
   * dS^T (keys x queries, for dQ), then per buffer the queries' lse, delta and 8 bytes of dropout
   * bits (this block's 64 keys) */
  T *Ks = reinterpret_cast<T *>(smem), *Vs = Ks + E, *Qb = Vs + E, *Ob = Qb + 2 * E, *dSs = Ob + 2 * E;
  float *lse_b = reinterpret_cast<float *>(dSs + E), *delta_b = lse_b + 2 * R;
  uint8_t *keep_b = reinterpret_cast<uint8_t *>(delta_b + 2 * R);
  const int bh = blockIdx.x, b = bh / p.H, h = bh % p.H, k0 = blockIdx.y * R;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, gq = lane >> 2, t = lane & 3;
  const T *qg = static_cast<const T *>(p.q) + b * p.q_st[0] + h * p.q_st[1];
  const T *kg = static_cast<const T *>(p.k) + b * p.k_st[0] + h * p.k_st[1];
  const T *vg = static_cast<const T *>(p.v) + b * p.v_st[0] + h * p.v_st[1];
  const T *dog = static_cast<const T *>(p.dout) + b * p.do_st[0] + h * p.do_st[1];
  const int nq = (p.L + R - 1) / R, qt0 = p.causal ? k0 / R : 0;

  auto stage = [&](int qt, int buf) {
    const int q0 = qt * R;
    vl_att_load_tile<T, D>(Qb + buf * E, qg, p.q_st[2], q0, p.L);
    vl_att_load_tile<T, D>(Ob + buf * E, dog, p.do_st[2], q0, p.L);
    if (threadIdx.x < R) {
      const int q = q0 + threadIdx.x;
      const bool in = q < p.L;
      lse_b[buf * R + threadIdx.x] = in ? p.lse[(int64_t)bh * p.L + q] : kInf;
      delta_b[buf * R + threadIdx.x] = in ? p.delta[(int64_t)bh * p.L + q] : 0.f;
    }
    if (p.dropout)
      for (int i = threadIdx.x; i < R * 8; i += VL_ATT_THREADS) {
        const int q = q0 + (i >> 3), byte = k0 / 8 + (i & 7);
        keep_b[buf * R * 8 + i] = q < p.L && byte < p.S8 ? p.keep[((int64_t)bh * p.L + q) * p.S8 + byte] : 0;
      }
  };

  vl_att_load_tile<T, D>(Ks, kg, p.k_st[2], k0, p.S);
  vl_att_load_tile<T, D>(Vs, vg, p.v_st[2], k0, p.S);
  if (qt0 < nq) stage(qt0, 0);
  vl_cp_async_commit();
  vl_cp_async_wait<0>();
  __syncthreads();
  uint32_t kf[D / 16][4], vf[D / 16][4];
  vl_att_frags<T, D>(kf, Ks, warp * 16);
  vl_att_frags<T, D>(vf, Vs, warp * 16);

  const int rk[2] = {k0 + warp * 16 + gq, k0 + warp * 16 + gq + 8};
  const bool per_key = p.mask && p.m_st[2] == 0;
  float mk[2] = {0.f, 0.f};
  if (per_key)
    for (int half = 0; half < 2; half++)
      if (rk[half] < p.S) mk[half] = p.mask[b * p.m_st[0] + h * p.m_st[1] + (int64_t)rk[half] * p.m_st[3]];

  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; i++)
#pragma unroll
    for (int c = 0; c < 4; c++) dk[i][c] = dv[i][c] = 0.f;

  for (int qt = qt0; qt < nq; qt++) {
    const int q0 = qt * R, cur = (qt - qt0) & 1;
    if (qt + 1 < nq) stage(qt + 1, cur ^ 1); /* the other buffers were last read before the end barrier */
    vl_cp_async_commit();
    vl_cp_async_wait<1>();
    __syncthreads();
    const T *Qs = Qb + cur * E, *Os = Ob + cur * E;
    const float *lse_s = lse_b + cur * R, *delta_s = delta_b + cur * R;
    const uint8_t *keep_s = keep_b + cur * R * 8;

    /* s = S^T: rows keys rk, columns queries q0 + nt * 8 + 2t + c */
    float s[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
    vl_att_mm_abt<T, D>(s, kf, Qs);
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int half = c >> 1, col = nt * 8 + 2 * t + (c & 1), q = q0 + col, key = rk[half];
        const float lse = lse_s[col];
        float z = s[nt][c] * p.scale;
        if (per_key) z += mk[half];
        else if (p.mask && q < p.L && key < p.S) z += mask_at(p, b, h, q, key);
        const bool dead = lse == kInf || key >= p.S || (p.causal && key > q);
        s[nt][c] = dead ? 0.f : __expf(z - lse);
      }

    /* dP^T = V dO^T, then dS^T = P^T (dP~^T - delta) * scale into it */
    float ds[8][4];
#pragma unroll
    for (int i = 0; i < 8; i++) ds[i][0] = ds[i][1] = ds[i][2] = ds[i][3] = 0.f;
    vl_att_mm_abt<T, D>(ds, vf, Os);
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
      for (int c = 0; c < 4; c++) {
        const int half = c >> 1, col = nt * 8 + 2 * t + (c & 1);
        bool keep = true;
        if (p.dropout) keep = (keep_s[col * 8 + 2 * warp + half] >> gq) & 1u;
        const float dpv = keep ? ds[nt][c] * p.inv_keep : 0.f;
        ds[nt][c] = s[nt][c] * (dpv - delta_s[col]) * p.scale;
        s[nt][c] = keep ? s[nt][c] * p.inv_keep : 0.f; /* P~^T for dV */
      }
    vl_att_mm_pb<T, D>(dv, s, Os);
    /* dS^T to shared memory, rounded as the products use it: dQ = dS K needs dS by query rows,
     * which no warp holds (each has 16 keys of every query) */
#pragma unroll
    for (int nt = 0; nt < 8; nt++)
#pragma unroll
      for (int half = 0; half < 2; half++)
        *reinterpret_cast<uint32_t *>(dSs + (warp * 16 + gq + 8 * half) * vl_att_tile<D>::P + nt * 8 + 2 * t) =
            vl_att_mma<T>::pack(ds[nt][2 * half], ds[nt][2 * half + 1]);
    vl_att_mm_pb<T, D>(dk, ds, Qs);
    __syncthreads();
    /* this key tile's part of dQ for the warp's 16 queries, added to the f32 accumulator */
    float dqp[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) dqp[i][0] = dqp[i][1] = dqp[i][2] = dqp[i][3] = 0.f;
    vl_att_mm_dst_k<T, D>(dqp, dSs, warp * 16, Ks);
#pragma unroll
    for (int half = 0; half < 2; half++) {
      const int q = q0 + warp * 16 + gq + 8 * half;
      if (q >= p.L) continue;
      float *acc = p.dq_acc + ((int64_t)bh * p.L + q) * D + 2 * t;
#pragma unroll
      for (int dt = 0; dt < D / 8; dt++) {
        atomicAdd(acc + dt * 8, dqp[dt][2 * half]);
        atomicAdd(acc + dt * 8 + 1, dqp[dt][2 * half + 1]);
      }
    }
    __syncthreads(); /* dS^T and this tile's buffers are rewritten next */
  }
  const float one[2] = {1.f, 1.f};
  T *dkg = static_cast<T *>(p.dk) + b * p.dk_st[0] + h * p.dk_st[1];
  T *dvg = static_cast<T *>(p.dv) + b * p.dv_st[0] + h * p.dv_st[1];
  vl_att_store<T, D>(dkg, p.dk_st[2], k0 + warp * 16, p.S, dk, one);
  vl_att_store<T, D>(dvg, p.dv_st[2], k0 + warp * 16, p.S, dv, one);
#endif
}

/* Before the dK/dV kernel: delta = dO . O per row (the four threads of a quad each sum a quarter
 * of a row with 16-byte loads) and the row's f32 dQ accumulator zeroed. 32 rows a block. */
template <typename T, int D>
__global__ void att_bwd_prep(const att_dev p, int64_t rows) {
  const int64_t row = (int64_t)blockIdx.x * 32 + (threadIdx.x >> 2);
  const int t = threadIdx.x & 3;
  float acc = 0.f;
  if (row < rows) {
    const int64_t bh = row / p.L, q = row % p.L, b = bh / p.H, h = bh % p.H;
    const T *orow = static_cast<const T *>(p.o) + b * p.o_st[0] + h * p.o_st[1] + q * p.o_st[2] + t * (D / 4);
    const T *drow = static_cast<const T *>(p.dout) + b * p.do_st[0] + h * p.do_st[1] + q * p.do_st[2] + t * (D / 4);
#pragma unroll
    for (int c = 0; c < D / 4; c += 8) {
      const vl_vec<T, 8> ov = *reinterpret_cast<const vl_vec<T, 8> *>(orow + c);
      const vl_vec<T, 8> dv = *reinterpret_cast<const vl_vec<T, 8> *>(drow + c);
#pragma unroll
      for (int j = 0; j < 8; j++) acc += vl_val(ov.v[j]) * vl_val(dv.v[j]);
    }
    float4 *z = reinterpret_cast<float4 *>(p.dq_acc + row * D + t * (D / 4));
#pragma unroll
    for (int c = 0; c < D / 16; c++) z[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  acc += __shfl_xor_sync(0xffffffffu, acc, 1);
  acc += __shfl_xor_sync(0xffffffffu, acc, 2);
  if (row < rows && t == 0) p.delta[row] = acc;
}

/* dQ from its f32 accumulator into the (strided) output, 8 elements a thread. */
template <typename T, int D>
__global__ void att_dq_store(const att_dev p, int64_t rows) {
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, row = i / (D / 8);
  if (row >= rows) return;
  const int c = (int)(i % (D / 8)) * 8;
  const int64_t bh = row / p.L, q = row % p.L, b = bh / p.H, h = bh % p.H;
  const float *src = p.dq_acc + row * D + c;
  vl_vec<T, 8> out;
#pragma unroll
  for (int j = 0; j < 8; j++) out.v[j] = vl_conv<T>::f(src[j]);
  *reinterpret_cast<vl_vec<T, 8> *>(static_cast<T *>(p.dq) + b * p.dq_st[0] + h * p.dq_st[1] + q * p.dq_st[2] + c) = out;
}

bool aligned16(const void *ptr, const int64_t st[3], bool check_strides) {
  if (((uintptr_t)ptr & 15u) != 0) return false;
  if (check_strides)
    for (int i = 0; i < 3; i++)
      if (st[i] % 8 != 0) return false;
  return true;
}

/* Compute capability major of a device, read once per device. */
int cc_major(int device) {
  static int cache[64];
  if (device < 0 || device >= 64) return 0;
  if (cache[device] == 0) {
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    cache[device] = v;
  }
  return cache[device];
}

bool cuda_att_supports(const vl_attention_args *a) {
  if (!vl_attention_fused_eligible(a->dtype, a->e, cc_major(a->ex.device))) return false;
  if (a->l > (1 << 30) || a->s > (1 << 30) || a->b * a->h > INT32_MAX) return false;
  const void *ptrs[] = {a->q, a->k, a->v, a->o, a->dout, a->dq, a->dk, a->dv};
  const int64_t *sts[] = {a->q_st, a->k_st, a->v_st, a->o_st, a->do_st, a->dq_st, a->dk_st, a->dv_st};
  for (int i = 0; i < 8; i++)
    if (ptrs[i] && !aligned16(ptrs[i], sts[i], true)) return false;
  return true;
}

att_dev dev_args(const vl_attention_args *a) {
  att_dev p;
  memset(&p, 0, sizeof p);
  p.q = a->q, p.k = a->k, p.v = a->v, p.o = a->o, p.dout = a->dout;
  p.out = a->o, p.dq = a->dq, p.dk = a->dk, p.dv = a->dv;
  for (int i = 0; i < 3; i++) {
    p.q_st[i] = a->q_st[i], p.k_st[i] = a->k_st[i], p.v_st[i] = a->v_st[i], p.o_st[i] = a->o_st[i];
    p.do_st[i] = a->do_st[i], p.dq_st[i] = a->dq_st[i], p.dk_st[i] = a->dk_st[i], p.dv_st[i] = a->dv_st[i];
  }
  p.mask = (const float *)a->mask;
  for (int i = 0; i < 4; i++) p.m_st[i] = a->mask_st[i];
  p.lse = (float *)a->lse, p.delta = a->delta, p.dq_acc = a->dq_acc, p.keep = a->keep;
  p.H = (int)a->h, p.L = (int)a->l, p.S = (int)a->s, p.S8 = (int)((a->s + 7) / 8);
  p.scale = (float)a->scale;
  p.inv_keep = a->p > 0 ? (float)(1.0 / (1.0 - a->p)) : 1.f;
  p.keep_below = a->keep_below;
  p.causal = a->causal, p.dropout = a->p > 0;
  p.seed = a->seed, p.offset = a->offset, p.base = a->base;
  return p;
}

/* Raises a kernel's dynamic shared memory limit once when it needs more than the default 48 KiB. */
template <typename K> vl_status smem_limit(K kernel, int bytes) {
  if (bytes > 48 * 1024) VL_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return VL_OK;
}

template <typename T, int D> vl_status forward_t(const vl_attention_args *a, cudaStream_t st) {
  att_dev p = dev_args(a);
  const int smem = smem_tiles_bytes<T, D>(5) + 2 * VL_ATT_ROWS * (int)sizeof(float);
  VL_TRY(smem_limit(att_fwd<T, D>, smem));
  dim3 grid((unsigned)(a->b * a->h), (unsigned)((a->l + VL_ATT_ROWS - 1) / VL_ATT_ROWS));
  att_fwd<T, D><<<grid, VL_ATT_THREADS, smem, st>>>(p);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

template <typename T, int D> vl_status backward_t(const vl_attention_args *a, cudaStream_t st) {
  att_dev p = dev_args(a);
  const int64_t rows = a->b * a->h * a->l;
  att_bwd_prep<T, D><<<(unsigned)((rows + 31) / 32), 128, 0, st>>>(p, rows);
  VL_LAUNCH_CHECK();
  const int smem_kv = smem_tiles_bytes<T, D>(7) + 4 * VL_ATT_ROWS * (int)sizeof(float) + 2 * VL_ATT_ROWS * 8;
  VL_TRY(smem_limit(att_bwd_kv<T, D>, smem_kv));
  dim3 gkv((unsigned)(a->b * a->h), (unsigned)((a->s + VL_ATT_ROWS - 1) / VL_ATT_ROWS));
  att_bwd_kv<T, D><<<gkv, VL_ATT_THREADS, smem_kv, st>>>(p);
  VL_LAUNCH_CHECK();
  const int64_t items = rows * (D / 8);
  att_dq_store<T, D><<<(unsigned)((items + 255) / 256), 256, 0, st>>>(p, rows);
  VL_LAUNCH_CHECK();
  return VL_OK;
}

vl_status cuda_att_forward(const vl_attention_args *a) {
  VL_CUDA_ENTER(guard, state, a->ex);
  (void)state;
  if (!cuda_att_supports(a))
    return vl_fail(VL_EUNSUPPORTED, "scaled_dot_product_attention (cuda): unsupported problem");
  cudaStream_t st = (cudaStream_t)a->ex.stream;
  if (a->dtype == VL_F16) return forward_t<__half, 64>(a, st);
  return forward_t<__nv_bfloat16, 64>(a, st);
}

vl_status cuda_att_backward(const vl_attention_args *a) {
  VL_CUDA_ENTER(guard, state, a->ex);
  (void)state;
  if (!cuda_att_supports(a))
    return vl_fail(VL_EUNSUPPORTED, "scaled_dot_product_attention_backward (cuda): unsupported problem");
  cudaStream_t st = (cudaStream_t)a->ex.stream;
  if (a->dtype == VL_F16) return backward_t<__half, 64>(a, st);
  return backward_t<__nv_bfloat16, 64>(a, st);
}

}  // namespace

/* A host-side table, left out of Clang's device pass (tools/build-sm70.sh): Clang would emit a
 * const table of host function addresses on the GPU too, which ptxas refuses. nvcc keeps it in
 * both passes, as before, and emits nothing of it on the device. */
#if !(defined(__clang__) && defined(__CUDA_ARCH__))
extern "C" const vl_attention_kernels vl_cuda_attention_kernels = {
    .supports = cuda_att_supports,
    .forward = cuda_att_forward,
    .backward = cuda_att_backward,
};
#endif
