/* kernels/cuda/cuda_index.cu: gather, scatter_add, scatter (assign), index_select.
 *
 * All three walk an iteration shape (the index's for gather/scatter_add, the output's for
 * index_select) and touch two data operands: a "full" one addressed by every coordinate and an
 * "indexed" one whose coordinate along `dim` is replaced by the loaded index value:
 *   gather        full = out (written), indexed = src (read),  iteration = index shape
 *   index_select  full = out (written), indexed = src (read),  iteration = out shape; the index
 *                 position is the coordinate along dim
 *   scatter_add   full = src (read),    indexed = out (atomic add), iteration = index shape
 *   scatter_mul   as scatter_add with an atomic multiply (compare-and-swap loops)
 *   scatter       full = src (read),    indexed = out (written),    iteration = index shape;
 *                 where positions repeat, any one writer wins (PyTorch leaves it unspecified)
 * An index outside [0, size) is not wrapped: the thread records it in the device's error flag
 * (the first one wins) and skips the element; check_async reports it after a synchronisation. */
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_ew.cuh"

struct vl_ix_geom {
  int ndim, dim, op;
  int64_t n;             /* elements of the iteration shape */
  int64_t limit;         /* size of the indexed operand along dim */
  int64_t size[VL_MAX_DIMS];
  vl_divmod32 div[VL_MAX_DIMS];
  int64_t sf[VL_MAX_DIMS], se[VL_MAX_DIMS], si[VL_MAX_DIMS]; /* byte strides over the shape */
  int64_t se_dim;        /* byte stride of the indexed operand along dim */
  char *full, *indexed;
  const char *index;
  vl_cuda_errflag *flag;
};

VL_DEV void vl_ix_flag(const vl_ix_geom &g, int64_t idx) {
  vl_cuda_errflag *f = g.flag;
  if (*(volatile int *)&f->set == 0 && atomicCAS(&f->set, 0, 1) == 0) {
    f->op = g.op;
    f->dim = g.dim;
    f->index = idx;
    f->size = g.limit;
  }
}

/* Offsets of element i: full, indexed (without dim's contribution), index. */
template <bool I32>
VL_DEV void vl_ix_offsets(const vl_ix_geom &g, int64_t i, int64_t &of, int64_t &oe, int64_t &oi) {
  of = oe = oi = 0;
#pragma unroll
  for (int j = 0; j < VL_MAX_DIMS; j++) {
    const int d = g.ndim - 1 - j;
    if (d < 0) break;
    int64_t c;
    if constexpr (I32) {
      uint32_t q = g.div[d].div((uint32_t)i);
      c = (int64_t)((uint32_t)i - q * g.div[d].d);
      i = q;
    } else {
      int64_t q = i / g.size[d];
      c = i - q * g.size[d];
      i = q;
    }
    of += c * g.sf[d];
    oi += c * g.si[d];
    if (d != g.dim) oe += c * g.se[d];
  }
}

template <typename S, typename IdxT, bool I32>
__global__ void __launch_bounds__(256) vl_ix_copy(vl_ix_geom g) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += step) {
    int64_t of, oe, oi;
    vl_ix_offsets<I32>(g, i, of, oe, oi);
    const int64_t idx = (int64_t) * reinterpret_cast<const IdxT *>(g.index + oi);
    if (idx < 0 || idx >= g.limit) {
      vl_ix_flag(g, idx);
      continue;
    }
    *reinterpret_cast<S *>(g.full + of) = *reinterpret_cast<const S *>(g.indexed + oe + idx * g.se_dim);
  }
}

/* The copy the other way round: indexed <- full (scatter assign). */
template <typename S, typename IdxT, bool I32>
__global__ void __launch_bounds__(256) vl_ix_put(vl_ix_geom g) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += step) {
    int64_t of, oe, oi;
    vl_ix_offsets<I32>(g, i, of, oe, oi);
    const int64_t idx = (int64_t) * reinterpret_cast<const IdxT *>(g.index + oi);
    if (idx < 0 || idx >= g.limit) {
      vl_ix_flag(g, idx);
      continue;
    }
    *reinterpret_cast<S *>(g.indexed + oe + idx * g.se_dim) = *reinterpret_cast<const S *>(g.full + of);
  }
}

/* Atomic adds. bf16 has a native atomic from sm_80; before that, and for the byte types, a CAS
 * loop on the aligned 32-bit word that contains the element (pool blocks are 512-byte aligned and
 * sized, so the word never leaves the allocation). */
VL_DEV void vl_atomic_add(float *p, float v) { atomicAdd(p, v); }
VL_DEV void vl_atomic_add(double *p, double v) { atomicAdd(p, v); }
VL_DEV void vl_atomic_add(__half *p, __half v) { atomicAdd(p, v); }
VL_DEV void vl_atomic_add(int32_t *p, int32_t v) { atomicAdd((int *)p, (int)v); }
VL_DEV void vl_atomic_add(int64_t *p, int64_t v) {
  atomicAdd((unsigned long long *)p, (unsigned long long)v); /* two's complement: wraps */
}

template <typename Fn>
VL_DEV void vl_atomic_word(void *p, int bytes, Fn fn) {
  unsigned int *w = (unsigned int *)((uintptr_t)p & ~(uintptr_t)3);
  const unsigned shift = (unsigned)((uintptr_t)p & 3) * 8;
  const unsigned mask = (bytes == 1 ? 0xffu : 0xffffu) << shift;
  unsigned old = *w, assumed;
  do {
    assumed = old;
    unsigned cur = (assumed & mask) >> shift;
    unsigned nxt = ((unsigned)fn(cur) << shift) & mask;
    old = atomicCAS(w, assumed, (assumed & ~mask) | nxt);
  } while (old != assumed);
}

VL_DEV void vl_atomic_add(__nv_bfloat16 *p, __nv_bfloat16 v) {
#if __CUDA_ARCH__ >= 800
  atomicAdd(p, v);
#else
  const float fv = __bfloat162float(v);
  vl_atomic_word(p, 2, [fv](unsigned cur) {
    float s = __bfloat162float(__ushort_as_bfloat16((unsigned short)cur)) + fv;
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(s));
  });
#endif
}
VL_DEV void vl_atomic_add(uint8_t *p, uint8_t v) {
  vl_atomic_word(p, 1, [v](unsigned cur) { return (cur + v) & 0xffu; });
}
VL_DEV void vl_atomic_add(vl_bool8 *p, vl_bool8 v) {
  vl_atomic_word(p, 1, [v](unsigned cur) { return (unsigned)(cur != 0 || v.v != 0); });
}

/* Atomic multiplies: no hardware instruction, so compare-and-swap on the element's word. */
VL_DEV void vl_atomic_mul(float *p, float v) {
  int *w = (int *)p, old = *w, assumed;
  do {
    assumed = old;
    old = atomicCAS(w, assumed, __float_as_int(__int_as_float(assumed) * v));
  } while (old != assumed);
}
VL_DEV void vl_atomic_mul(double *p, double v) {
  unsigned long long *w = (unsigned long long *)p, old = *w, assumed;
  do {
    assumed = old;
    old = atomicCAS(w, assumed, (unsigned long long)__double_as_longlong(__longlong_as_double((long long)assumed) * v));
  } while (old != assumed);
}
VL_DEV void vl_atomic_mul(int32_t *p, int32_t v) {
  unsigned *w = (unsigned *)p, old = *w, assumed;
  do {
    assumed = old;
    old = atomicCAS(w, assumed, assumed * (unsigned)v); /* two's complement: wraps */
  } while (old != assumed);
}
VL_DEV void vl_atomic_mul(int64_t *p, int64_t v) {
  unsigned long long *w = (unsigned long long *)p, old = *w, assumed;
  do {
    assumed = old;
    old = atomicCAS(w, assumed, assumed * (unsigned long long)v);
  } while (old != assumed);
}
VL_DEV void vl_atomic_mul(__half *p, __half v) {
  const float fv = __half2float(v);
  vl_atomic_word(p, 2, [fv](unsigned cur) {
    return (unsigned)__half_as_ushort(__float2half_rn(__half2float(__ushort_as_half((unsigned short)cur)) * fv));
  });
}
VL_DEV void vl_atomic_mul(__nv_bfloat16 *p, __nv_bfloat16 v) {
  const float fv = __bfloat162float(v);
  vl_atomic_word(p, 2, [fv](unsigned cur) {
    float s = __bfloat162float(__ushort_as_bfloat16((unsigned short)cur)) * fv;
    return (unsigned)__bfloat16_as_ushort(__float2bfloat16_rn(s));
  });
}
VL_DEV void vl_atomic_mul(uint8_t *p, uint8_t v) {
  vl_atomic_word(p, 1, [v](unsigned cur) { return (cur * v) & 0xffu; });
}
VL_DEV void vl_atomic_mul(vl_bool8 *p, vl_bool8 v) {
  vl_atomic_word(p, 1, [v](unsigned cur) { return (unsigned)(cur != 0 && v.v != 0); });
}

template <typename T, typename IdxT, bool I32, bool MUL>
__global__ void __launch_bounds__(256) vl_ix_scatter_add(vl_ix_geom g) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < g.n; i += step) {
    int64_t of, oe, oi;
    vl_ix_offsets<I32>(g, i, of, oe, oi);
    const int64_t idx = (int64_t) * reinterpret_cast<const IdxT *>(g.index + oi);
    if (idx < 0 || idx >= g.limit) {
      vl_ix_flag(g, idx);
      continue;
    }
    T *o = reinterpret_cast<T *>(g.indexed + oe + idx * g.se_dim);
    const T v = *reinterpret_cast<const T *>(g.full + of);
    if constexpr (MUL) vl_atomic_mul(o, v);
    else vl_atomic_add(o, v);
  }
}

/* Deterministic scatter_add (vl_set_deterministic): the elements whose coordinates differ only
 * along dim form a line, and the lines write disjoint outputs (their other coordinates differ). One
 * thread sums a line in order, with plain adds: the same sums in the same order on every run, where
 * the atomic kernel above adds in whatever order the threads arrive. Only float dtypes need it
 * (integer sums are exact in any order). Fewer threads (one per line) and a serial loop per line,
 * so it is slower, in particular with long lines (an embedding backward over many tokens). */
VL_DEV void vl_plain_add(float *p, float v) { *p += v; }
VL_DEV void vl_plain_add(double *p, double v) { *p += v; }
VL_DEV void vl_plain_add(__half *p, __half v) { *p = __float2half_rn(__half2float(*p) + __half2float(v)); }
VL_DEV void vl_plain_add(__nv_bfloat16 *p, __nv_bfloat16 v) {
  *p = __float2bfloat16_rn(__bfloat162float(*p) + __bfloat162float(v));
}
VL_DEV void vl_plain_mul(float *p, float v) { *p *= v; }
VL_DEV void vl_plain_mul(double *p, double v) { *p *= v; }
VL_DEV void vl_plain_mul(__half *p, __half v) { *p = __float2half_rn(__half2float(*p) * __half2float(v)); }
VL_DEV void vl_plain_mul(__nv_bfloat16 *p, __nv_bfloat16 v) {
  *p = __float2bfloat16_rn(__bfloat162float(*p) * __bfloat162float(v));
}

template <typename T, typename IdxT, bool MUL>
__global__ void __launch_bounds__(256) vl_ix_scatter_add_lines(vl_ix_geom g, int64_t nlines) {
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  const int64_t len = g.ndim > 0 ? g.size[g.dim] : 1;
  const int64_t sf = g.ndim > 0 ? g.sf[g.dim] : 0, si = g.ndim > 0 ? g.si[g.dim] : 0;
  for (int64_t l = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; l < nlines; l += step) {
    int64_t of = 0, oe = 0, oi = 0, r = l;
    for (int d = g.ndim - 1; d >= 0; d--) {
      if (d == g.dim) continue;
      const int64_t q = r / g.size[d], c = r - q * g.size[d];
      r = q;
      of += c * g.sf[d];
      oe += c * g.se[d];
      oi += c * g.si[d];
    }
    for (int64_t j = 0; j < len; j++, of += sf, oi += si) {
      const int64_t idx = (int64_t) * reinterpret_cast<const IdxT *>(g.index + oi);
      if (idx < 0 || idx >= g.limit) {
        vl_ix_flag(g, idx);
        continue;
      }
      T *o = reinterpret_cast<T *>(g.indexed + oe + idx * g.se_dim);
      if constexpr (MUL) vl_plain_mul(o, *reinterpret_cast<const T *>(g.full + of));
      else vl_plain_add(o, *reinterpret_cast<const T *>(g.full + of));
    }
  }
}

enum { VL_IX_GATHER, VL_IX_SELECT, VL_IX_SCATTER };

/* Fills the geometry for op `kind`; returns VL_OK with g->n == 0 when there is nothing to do. */
static const char *vl_ix_name(const vl_index_args *a) { return a->op ? a->op : "index"; }

static vl_status vl_ix_setup(int kind, const vl_index_args *a, vl_cuda_state *st, vl_ix_geom *g) {
  memset(g, 0, sizeof *g);
  const char *name = vl_ix_name(a);
  const vl_strided *full = kind == VL_IX_SCATTER ? &a->src : &a->out;
  const vl_strided *indexed = kind == VL_IX_SCATTER ? &a->out : &a->src;
  const vl_strided *shape = kind == VL_IX_SELECT ? &a->out : &a->index;
  if (a->index.dtype != VL_I64 && a->index.dtype != VL_I32)
    return vl_fail(VL_EDTYPE, "%s: index dtype must be i64 or i32, got %s", name,
                   vl_dtype_name(a->index.dtype));
  if (a->out.dtype != a->src.dtype)
    return vl_fail(VL_EDTYPE, "%s: out and src dtypes differ (%s, %s)", name,
                   vl_dtype_name(a->out.dtype), vl_dtype_name(a->src.dtype));
  /* A 0-dim operand is one element along "dim 0", as on the CPU. */
  if (a->dim < 0 || (shape->ndim > 0 && a->dim >= shape->ndim))
    return vl_fail(VL_EINVAL, "%s: dim %d out of range for a tensor of %d dims", name, a->dim + 1,
                   shape->ndim);
  const int64_t es = (int64_t)vl_dtype_size(a->out.dtype), is = (int64_t)vl_dtype_size(a->index.dtype);
  g->ndim = shape->ndim;
  g->dim = a->dim;
  g->n = 1;
  for (int d = 0; d < shape->ndim; d++) {
    g->size[d] = shape->size[d];
    g->n *= shape->size[d];
    g->sf[d] = d < full->ndim ? full->stride[d] * es : 0;
    g->se[d] = d < indexed->ndim ? indexed->stride[d] * es : 0;
    if (kind == VL_IX_SELECT) g->si[d] = d == a->dim && a->index.ndim > 0 ? a->index.stride[0] * is : 0;
    else g->si[d] = d < a->index.ndim ? a->index.stride[d] * is : 0;
  }
  if (g->n <= 0) {
    g->n = 0;
    return VL_OK;
  }
  for (int d = 0; d < shape->ndim; d++)
    g->div[d] = vl_divmod32_make((uint32_t)(g->size[d] < ((int64_t)1 << 31) ? g->size[d] : 1));
  g->limit = indexed->ndim > 0 ? indexed->size[a->dim] : 1;
  g->se_dim = indexed->ndim > 0 ? indexed->stride[a->dim] * es : 0;
  g->full = full->data;
  g->indexed = indexed->data;
  g->index = a->index.data;
  g->flag = st->flag;
  g->op = vl_cuda_op_id(st, name);
  st->flag_armed = true;
  return VL_OK;
}

/* gather and index_select copy indexed -> full; scatter copies full -> indexed. */
static vl_status vl_ix_copy_run(int kind, const vl_index_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  vl_ix_geom g;
  VL_TRY(vl_ix_setup(kind, a, st, &g));
  if (g.n == 0) return VL_OK;
  const unsigned grid = vl_grid(g.n, 256, st, 4);
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  const bool small = g.n < ((int64_t)1 << 31);
  const bool i64 = a->index.dtype == VL_I64;
  if (kind == VL_IX_SCATTER) {
    VL_DISPATCH_SIZE(a->out.dtype, S, vl_ix_name(a), {
      if (i64) {
        if (small) vl_ix_put<S, int64_t, true><<<grid, 256, 0, stream>>>(g);
        else vl_ix_put<S, int64_t, false><<<grid, 256, 0, stream>>>(g);
      } else {
        if (small) vl_ix_put<S, int32_t, true><<<grid, 256, 0, stream>>>(g);
        else vl_ix_put<S, int32_t, false><<<grid, 256, 0, stream>>>(g);
      }
    });
  } else {
    VL_DISPATCH_SIZE(a->out.dtype, S, vl_ix_name(a), {
      if (i64) {
        if (small) vl_ix_copy<S, int64_t, true><<<grid, 256, 0, stream>>>(g);
        else vl_ix_copy<S, int64_t, false><<<grid, 256, 0, stream>>>(g);
      } else {
        if (small) vl_ix_copy<S, int32_t, true><<<grid, 256, 0, stream>>>(g);
        else vl_ix_copy<S, int32_t, false><<<grid, 256, 0, stream>>>(g);
      }
    });
  }
  VL_LAUNCH_CHECK();
  return VL_OK;
}

vl_status vl_cuda_gather(const vl_index_args *a) { return vl_ix_copy_run(VL_IX_GATHER, a); }

vl_status vl_cuda_index_select(const vl_index_args *a) {
  if (a->index.ndim > 1)
    return vl_fail(VL_ESHAPE, "%s: index must be 1-D, got %d dims", vl_ix_name(a), a->index.ndim);
  return vl_ix_copy_run(VL_IX_SELECT, a);
}

vl_status vl_cuda_scatter(const vl_index_args *a) { return vl_ix_copy_run(VL_IX_SCATTER, a); }

/* scatter_add and scatter_mul: atomics, or with deterministic on (floats) one thread per line. */
template <bool MUL>
static vl_status vl_ix_scatter_reduce(const vl_index_args *a) {
  VL_CUDA_ENTER(guard, st, a->ex);
  vl_ix_geom g;
  VL_TRY(vl_ix_setup(VL_IX_SCATTER, a, st, &g));
  if (g.n == 0) return VL_OK;
  cudaStream_t stream = (cudaStream_t)a->ex.stream;
  const bool i64 = a->index.dtype == VL_I64;
  if (a->deterministic && vl_dtype_is_float(a->out.dtype)) {
    const int64_t nlines = g.n / (g.ndim > 0 ? g.size[g.dim] : 1);
    const unsigned lgrid = vl_grid(nlines, 256, st, 4);
    VL_DISPATCH_FLOAT(a->out.dtype, T, vl_ix_name(a), {
      if (i64) vl_ix_scatter_add_lines<T, int64_t, MUL><<<lgrid, 256, 0, stream>>>(g, nlines);
      else vl_ix_scatter_add_lines<T, int32_t, MUL><<<lgrid, 256, 0, stream>>>(g, nlines);
    });
    VL_LAUNCH_CHECK();
    return VL_OK;
  }
  const unsigned grid = vl_grid(g.n, 256, st, 4);
  const bool small = g.n < ((int64_t)1 << 31);
  VL_DISPATCH_ALL(a->out.dtype, T, vl_ix_name(a), {
    if (i64) {
      if (small) vl_ix_scatter_add<T, int64_t, true, MUL><<<grid, 256, 0, stream>>>(g);
      else vl_ix_scatter_add<T, int64_t, false, MUL><<<grid, 256, 0, stream>>>(g);
    } else {
      if (small) vl_ix_scatter_add<T, int32_t, true, MUL><<<grid, 256, 0, stream>>>(g);
      else vl_ix_scatter_add<T, int32_t, false, MUL><<<grid, 256, 0, stream>>>(g);
    }
  });
  VL_LAUNCH_CHECK();
  return VL_OK;
}

vl_status vl_cuda_scatter_add(const vl_index_args *a) { return vl_ix_scatter_reduce<false>(a); }
vl_status vl_cuda_scatter_mul(const vl_index_args *a) { return vl_ix_scatter_reduce<true>(a); }
