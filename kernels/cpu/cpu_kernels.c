/* kernels/cpu/cpu_kernels.c: the CPU op table and backend (runtime/backend/backend.h), and the
 * data-movement ops (fill, copy, where, masked_fill, arange). */
#include "kernels/cpu/cpu_internal.h"

#include "runtime/backend/backend.h"

/* Copies one element of `size` bytes; a switch so the common sizes become single moves. */
static inline void copy_elem(char *dst, const char *src, size_t size) {
  switch (size) {
    case 1: *(uint8_t *)dst = *(const uint8_t *)src; break;
    case 2: *(uint16_t *)dst = *(const uint16_t *)src; break;
    case 4: *(uint32_t *)dst = *(const uint32_t *)src; break;
    case 8: *(uint64_t *)dst = *(const uint64_t *)src; break;
    default: memcpy(dst, src, size); break;
  }
}

/* ---- fill ---- */
typedef struct {
  unsigned char elem[8];
  size_t size;
  bool all_same_byte; /* memset can write the value (zeros, and every u8/bool value) */
} fill_ctx;

#define VL_FILL_LOOP(T)                                                  \
  do {                                                                   \
    T v_;                                                                \
    memcpy(&v_, c->elem, sizeof v_);                                     \
    if (bs[0] == (int64_t)sizeof(T)) {                                   \
      T *o_ = (T *)ptr[0];                                               \
      for (int64_t i = 0; i < n; i++) o_[i] = v_;                        \
    } else {                                                             \
      for (int64_t i = 0; i < n; i++) *(T *)(ptr[0] + i * bs[0]) = v_;   \
    }                                                                    \
  } while (0)

static void fill_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  const fill_ctx *c = vc;
  if (c->all_same_byte && bs[0] == (int64_t)c->size) {
    memset(ptr[0], c->elem[0], (size_t)n * c->size);
    return;
  }
  switch (c->size) {
    case 1: VL_FILL_LOOP(uint8_t); break;
    case 2: VL_FILL_LOOP(uint16_t); break;
    case 4: VL_FILL_LOOP(uint32_t); break;
    default: VL_FILL_LOOP(uint64_t); break;
  }
}

vl_status vl_cpu_fill(const vl_iter *it, double value) {
  fill_ctx c;
  memset(&c, 0, sizeof c);
  c.size = vl_dtype_size(it->dtype[0]);
  vl_cpu_st_f64((char *)c.elem, it->dtype[0], value);
  c.all_same_byte = true;
  for (size_t i = 1; i < c.size; i++)
    if (c.elem[i] != c.elem[0]) c.all_same_byte = false;
  vl_cpu_for_each(it, fill_loop, &c);
  return VL_OK;
}

/* ---- copy: [out, in] ---- */
enum { COPY_SAME, COPY_INT, COPY_FROM_INT, COPY_FROM_FLOAT };

static void copy_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  const vl_dtype *dt = vc;
  vl_dtype dto = dt[0], dti = dt[1];
  if (dto == dti) {
    size_t es = vl_dtype_size(dto);
    if (bs[0] == (int64_t)es && bs[1] == (int64_t)es) {
      memmove(ptr[0], ptr[1], (size_t)n * es);
    } else {
      for (int64_t i = 0; i < n; i++) copy_elem(ptr[0] + i * bs[0], ptr[1] + i * bs[1], es);
    }
    return;
  }
  bool int_in = vl_dtype_is_int(dti);
  for (int64_t off = 0; off < n; off += VL_CPU_BLOCK) {
    int64_t m = n - off < VL_CPU_BLOCK ? n - off : VL_CPU_BLOCK;
    char *o = ptr[0] + off * bs[0];
    const char *s = ptr[1] + off * bs[1];
    if (int_in) {
      /* Integers go through int64 so that i64 values beyond 2^53 survive. */
      int64_t buf[VL_CPU_BLOCK];
      vl_cpu_store_i64(o, bs[0], dto, vl_cpu_src_i64(buf, s, bs[1], dti, m), m);
    } else {
      double buf[VL_CPU_BLOCK];
      vl_cpu_store_f64(o, bs[0], dto, vl_cpu_src_f64(buf, s, bs[1], dti, m), m);
    }
  }
}

vl_status vl_cpu_copy(const vl_iter *it) {
  vl_dtype dt[2] = {it->dtype[0], it->dtype[1]};
  vl_cpu_for_each(it, copy_loop, dt);
  return VL_OK;
}

/* ---- where: [out, cond, a, b] ---- */
static void where_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  size_t es = *(const size_t *)vc;
  for (int64_t i = 0; i < n; i++) {
    const char *src = *(const uint8_t *)(ptr[1] + i * bs[1]) ? ptr[2] + i * bs[2] : ptr[3] + i * bs[3];
    copy_elem(ptr[0] + i * bs[0], src, es);
  }
}

vl_status vl_cpu_where(const vl_iter *it) {
  size_t es = vl_dtype_size(it->dtype[0]);
  vl_cpu_for_each(it, where_loop, &es);
  return VL_OK;
}

/* ---- masked_fill: [out, in, mask] ---- */
typedef struct {
  unsigned char elem[8];
  size_t size;
} mfill_ctx;

static void masked_fill_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  const mfill_ctx *c = vc;
  for (int64_t i = 0; i < n; i++) {
    const char *src = *(const uint8_t *)(ptr[2] + i * bs[2]) ? (const char *)c->elem : ptr[1] + i * bs[1];
    copy_elem(ptr[0] + i * bs[0], src, c->size);
  }
}

vl_status vl_cpu_masked_fill(const vl_iter *it, double value) {
  mfill_ctx c;
  memset(&c, 0, sizeof c);
  c.size = vl_dtype_size(it->dtype[0]);
  vl_cpu_st_f64((char *)c.elem, it->dtype[0], value);
  vl_cpu_for_each(it, masked_fill_loop, &c);
  return VL_OK;
}

/* ---- arange ---- */
vl_status vl_cpu_arange(void *out, vl_dtype dt, int64_t numel, double start, double step,
                        vl_exec ex) {
  double buf[VL_CPU_BLOCK];
  size_t es = vl_dtype_size(dt);
  for (int64_t off = 0; off < numel; off += VL_CPU_BLOCK) {
    int64_t m = numel - off < VL_CPU_BLOCK ? numel - off : VL_CPU_BLOCK;
    for (int64_t i = 0; i < m; i++) buf[i] = start + (double)(off + i) * step;
    vl_cpu_store_f64((char *)out + off * (int64_t)es, (int64_t)es, dt, buf, m);
  }
  return VL_OK;
}

const vl_kernels vl_cpu_kernels = {
    .name = "cpu",
    .fill = vl_cpu_fill,
    .copy = vl_cpu_copy,
    .unary = vl_cpu_unary,
    .binary = vl_cpu_binary,
    .binary_scalar = vl_cpu_binary_scalar,
    .where = vl_cpu_where,
    .masked_fill = vl_cpu_masked_fill,
    .arange = vl_cpu_arange,
    .reduce = vl_cpu_reduce,
    .softmax = vl_cpu_softmax,
    .gemm = vl_cpu_gemm,
    .gather = vl_cpu_gather,
    .scatter_add = vl_cpu_scatter_add,
    .scatter = vl_cpu_scatter,
    .scatter_mul = vl_cpu_scatter_mul,
    .index_select = vl_cpu_index_select,
    .rand = vl_cpu_rand,
    .scan = vl_cpu_scan,
    .sort = vl_cpu_sort,
    .searchsorted = vl_cpu_searchsorted,
};

/* The CPU kernels cover everything the front ends may hand a backend (vl_supports_base): both
 * layouts of every layer, f16/bf16 through f32 compute. */
static bool cpu_supports(vl_op_kind op, vl_dtype dt, vl_layout layout) { return vl_supports_base(op, dt, layout); }

const vl_backend vl_cpu_backend = {
    .name = "cpu",
    .type = VL_CPU,
    .ops = &vl_cpu_kernels,
    .conv = &vl_cpu_conv_kernels,
    .pooling = &vl_cpu_pooling_kernels,
    .norm = &vl_cpu_norm_kernels,
    .optim = &vl_cpu_optim_kernels,
    .attention = &vl_cpu_attention_kernels,
    .fused = &vl_cpu_fused_kernels,
    .supports = cpu_supports,
    .current_stream = NULL, /* no streams: CPU kernels run synchronously on the calling thread */
    .check_async = NULL,    /* index errors are returned by the kernel itself */
    .shutdown = NULL,       /* no per-device state */
};
