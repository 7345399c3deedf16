/* kernels/cpu/cpu_elementwise.c: unary, binary and binary-with-scalar ops.
 *
 * Each op's formula is kernels/ew_formulas.h's, in doubles (floats) and in int64 (integers);
 * the switches are generated from the op list (runtime/backend/op_list.h) and instantiated by
 * macro into typed loops: f32 and f64 operands are read and
 * written in place with their element strides (the fast paths), any other dtype mix goes through
 * blocks of doubles / int64s (cpu_internal.h). Float results are computed in double and rounded
 * once, so add/sub/mul/div/sqrt are correctly rounded as in CUDA's f32 arithmetic. Contiguous f32
 * runs (and f32 runs against a broadcast operand) go through the vector code of cpu_vmath.h:
 * bitwise the same results for the exact ops, within a few ulp for exp, log, tanh, sigmoid,
 * the GELUs and the GELU gradients. Integer
 * +, -, * wrap modulo 2^64 in unsigned arithmetic, and the store wraps to the dtype's width, so
 * i32 and u8 wrap as C's fixed-width arithmetic does. */
#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_vmath.h"
#include "kernels/ew_formulas.h"

enum { PATH_F32, PATH_F64, PATH_INT, PATH_BUF };

/* ======================= unary ======================= */

#define VL_UN_LOOP(TO, TI, E)                                  \
  do {                                                         \
    TO *o_ = (TO *)po;                                         \
    const TI *x_ = (const TI *)px;                             \
    for (int64_t i = 0; i < n; i++) {                          \
      double x = (double)x_[i * sx];                           \
      o_[i * so] = (TO)(E);                                    \
    }                                                          \
  } while (0)

/* One case per op of the list, its formula from kernels/ew_formulas.h in double. */
#define VL_UN_CASE(E, ...) \
  case VL_UN_##E: VL_UN_LOOP(vl_to_t, vl_ti_t, VL_UF_##E(double, x, p0, p1)); break;
#define VL_UN_SWITCH(TO, TI)      \
  typedef TO vl_to_t;             \
  typedef TI vl_ti_t;             \
  switch (op) {                   \
    VL_UNARY_OPS(VL_UN_CASE)      \
    default: break;               \
  }

#define VL_UN_ARGS                                                                   \
  vl_unary_op op, char *po, int64_t so, const char *px, int64_t sx, int64_t n, double p0, \
      double p1

static void un_f32(VL_UN_ARGS) { VL_UN_SWITCH(float, float) }
static void un_f64(VL_UN_ARGS) { VL_UN_SWITCH(double, double) }

/* The EXACT and BOOL ops on integers (ew_formulas.h VL_UI_); FLOAT ops never come here. */
static void un_i64(vl_unary_op op, int64_t *o, const int64_t *x, int64_t n, int64_t lo,
                   int64_t hi) {
#define VL_UI_CASE(E, name, node, dom, ...)                                      \
  case VL_UN_##E:                                                                \
    for (int64_t i = 0; i < n; i++) o[i] = VL_UI_OR_ID_##dom(E, x[i], lo, hi);   \
    break;
  switch (op) {
    VL_UNARY_OPS(VL_UI_CASE)
    default: break;
  }
#undef VL_UI_CASE
}

static bool un_is_int_op(vl_unary_op op) { return vl_unary_domain(op) != VL_OPD_FLOAT; }

/* Contiguous f32 sqrt: IEEE sqrt is correctly rounded and double carries more than 2 * 24 + 2
 * bits, so float sqrt equals the double-then-round result. The other contiguous f32 ops the
 * vector code takes (vl_vm_unary_f32). */
static bool un_f32_contig(vl_unary_op op, float *o, const float *x, int64_t n) {
  if (op != VL_UN_SQRT) return false;
  for (int64_t i = 0; i < n; i++) o[i] = sqrtf(x[i]);
  return true;
}

typedef struct {
  vl_unary_op op;
  int path;
  vl_dtype dto, dti;
  double p0, p1;
  int64_t lo, hi;
} un_ctx;

static void un_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  const un_ctx *c = vc;
  if (c->path == PATH_F32) {
    if (bs[0] == 4 && bs[1] == 4 && (vl_vm_unary_f32(c->op, (float *)ptr[0], (const float *)ptr[1], n) ||
                                     un_f32_contig(c->op, (float *)ptr[0], (const float *)ptr[1], n)))
      return;
    un_f32(c->op, ptr[0], bs[0] / 4, ptr[1], bs[1] / 4, n, c->p0, c->p1);
    return;
  }
  if (c->path == PATH_F64) {
    un_f64(c->op, ptr[0], bs[0] / 8, ptr[1], bs[1] / 8, n, c->p0, c->p1);
    return;
  }
  for (int64_t off = 0; off < n; off += VL_CPU_BLOCK) {
    int64_t m = n - off < VL_CPU_BLOCK ? n - off : VL_CPU_BLOCK;
    char *o = ptr[0] + off * bs[0];
    const char *s = ptr[1] + off * bs[1];
    if (c->path == PATH_INT) {
      int64_t xb[VL_CPU_BLOCK], yb[VL_CPU_BLOCK];
      un_i64(c->op, yb, vl_cpu_src_i64(xb, s, bs[1], c->dti, m), m, c->lo, c->hi);
      vl_cpu_store_i64(o, bs[0], c->dto, yb, m);
    } else {
      double xb[VL_CPU_BLOCK], yb[VL_CPU_BLOCK];
      const double *x = vl_cpu_src_f64(xb, s, bs[1], c->dti, m);
      un_f64(c->op, (char *)yb, 1, (const char *)x, 1, m, c->p0, c->p1);
      vl_cpu_store_f64(o, bs[0], c->dto, yb, m);
    }
  }
}

vl_status vl_cpu_unary(vl_unary_op op, const vl_iter *it, double p0, double p1) {
  if ((unsigned)op >= VL_NUNARY) return vl_fail(VL_EINVAL, "unary (cpu): unknown op %d", (int)op);
  un_ctx c = {.op = op, .dto = it->dtype[0], .dti = it->dtype[1], .p0 = p0, .p1 = p1};
  if (vl_dtype_is_int(c.dti) && un_is_int_op(op)) {
    c.path = PATH_INT;
    /* Integer clamp bounds: the integers within [lo, hi]; an infinite bound is no bound. */
    c.lo = p0 == -INFINITY ? INT64_MIN : vl_cpu_f64_to_i64(ceil(p0));
    c.hi = p1 == INFINITY ? INT64_MAX : vl_cpu_f64_to_i64(floor(p1));
  } else if (c.dti == VL_F32 && c.dto == VL_F32) {
    c.path = PATH_F32;
  } else if (c.dti == VL_F64 && c.dto == VL_F64) {
    c.path = PATH_F64;
  } else {
    c.path = PATH_BUF;
  }
  vl_cpu_for_each(it, un_loop, &c);
  return VL_OK;
}

/* ======================= binary ======================= */

/* `rev` swaps the operands (s op a for binary_scalar); it is loop-invariant, so the branch is
 * free in practice. */
#define VL_BIN_LOOP(TO, TA, TB, E)                                   \
  do {                                                               \
    TO *o_ = (TO *)po;                                               \
    const TA *a_ = (const TA *)pa;                                   \
    const TB *b_ = (const TB *)pb;                                   \
    for (int64_t i = 0; i < n; i++) {                                \
      double a = (double)a_[i * sa], b = (double)b_[i * sb];         \
      if (rev) { double t_ = a; a = b; b = t_; }                     \
      o_[i * so] = (TO)(E);                                          \
    }                                                                \
  } while (0)

#define VL_POW(a, b) pow(a, b)
#define VL_BIN_CASE(E, ...) \
  case VL_BIN_##E: VL_BIN_LOOP(vl_to_t, vl_ta_t, vl_tb_t, VL_BF_##E(double, a, b, alpha)); break;
#define VL_BIN_SWITCH(TO, TA, TB) \
  typedef TO vl_to_t;             \
  typedef TA vl_ta_t;             \
  typedef TB vl_tb_t;             \
  switch (op) {                   \
    VL_BINARY_OPS(VL_BIN_CASE)    \
    default: break;               \
  }

#define VL_BIN_ARGS                                                                  \
  vl_binary_op op, char *po, int64_t so, const char *pa, int64_t sa, const char *pb, \
      int64_t sb, int64_t n, double alpha, bool rev

/* f32 results / f64 results (also the double blocks), and bool results of predicates. The
 * *_s variants take the second operand as a double scalar (stride 0), so a scalar is never
 * rounded to the tensor's dtype before use. */
static void bin_f32(VL_BIN_ARGS) { VL_BIN_SWITCH(float, float, float) }
static void bin_f32_s(VL_BIN_ARGS) { VL_BIN_SWITCH(float, float, double) }
static void bin_f64(VL_BIN_ARGS) { VL_BIN_SWITCH(double, double, double) }
static void pred_f32(VL_BIN_ARGS) { VL_BIN_SWITCH(uint8_t, float, float) }
static void pred_f32_s(VL_BIN_ARGS) { VL_BIN_SWITCH(uint8_t, float, double) }
static void pred_f64(VL_BIN_ARGS) { VL_BIN_SWITCH(uint8_t, double, double) }

static void bin_i64(vl_binary_op op, int64_t *o, const int64_t *pa, int64_t sa, const int64_t *pb,
                    int64_t sb, int64_t n, int64_t alpha, bool rev) {
#define VL_BI_CASE(E, ...)                                        \
  case VL_BIN_##E:                                                \
    for (int64_t i = 0; i < n; i++) {                             \
      int64_t a = pa[i * sa], b = pb[i * sb];                     \
      if (rev) { int64_t t = a; a = b; b = t; }                   \
      o[i] = VL_BI_##E(a, b, alpha);                              \
    }                                                             \
    break;
  switch (op) {
    VL_BINARY_OPS(VL_BI_CASE)
    default: break;
  }
#undef VL_BI_CASE
}

typedef void (*bin_fn)(VL_BIN_ARGS);

typedef struct {
  vl_binary_op op;
  int path;
  bin_fn typed;          /* PATH_F32 / PATH_F64 */
  vl_dtype dto, dta, dtb;
  double alpha;
  int64_t ialpha;
  bool scalar, rev;      /* binary_scalar: operand b is `s` (stride 0) */
  double s;
  int64_t is;
} bin_ctx;

/* f32 results, contiguous output: the vector code, with b contiguous, broadcast (stride 0) or
 * the scalar, or a broadcast and b contiguous (as b op a). Predicates (bool out) are not its. */
static bool bin_f32_vec(const bin_ctx *c, char *const *ptr, const int64_t *bs, int64_t n) {
  if (c->path != PATH_F32 || c->dto != VL_F32 || bs[0] != 4) return false;
  float *o = (float *)ptr[0];
  if (c->scalar)
    return bs[1] == 4 && vl_vm_binary_f32(c->op, o, (const float *)ptr[1], NULL, 0, c->s, c->alpha, c->rev, n);
  const float *a = (const float *)ptr[1], *b = (const float *)ptr[2];
  if (bs[1] == 4 && (bs[2] == 4 || bs[2] == 0))
    return vl_vm_binary_f32(c->op, o, a, b, bs[2] / 4, bs[2] ? 0.0 : (double)*b, c->alpha, false, n);
  if (bs[1] == 0 && bs[2] == 4)
    return vl_vm_binary_f32(c->op, o, b, a, 0, (double)*a, c->alpha, true, n);
  return false;
}

static void bin_loop(void *vc, char *const *ptr, const int64_t *bs, int64_t n) {
  const bin_ctx *c = vc;
  if (bin_f32_vec(c, ptr, bs, n)) return;
  if (c->path == PATH_F32 || c->path == PATH_F64) {
    int64_t eo = (int64_t)vl_dtype_size(c->dto), ei = c->path == PATH_F32 ? 4 : 8;
    const char *pb = c->scalar ? (const char *)&c->s : ptr[2];
    int64_t sb = c->scalar ? 0 : bs[2] / ei;
    c->typed(c->op, ptr[0], bs[0] / eo, ptr[1], bs[1] / ei, pb, sb, n, c->alpha, c->rev);
    return;
  }
  for (int64_t off = 0; off < n; off += VL_CPU_BLOCK) {
    int64_t m = n - off < VL_CPU_BLOCK ? n - off : VL_CPU_BLOCK;
    char *o = ptr[0] + off * bs[0];
    const char *pa = ptr[1] + off * bs[1];
    const char *pb = c->scalar ? NULL : ptr[2] + off * bs[2];
    if (c->path == PATH_INT) {
      int64_t ab[VL_CPU_BLOCK], bb[VL_CPU_BLOCK], ob[VL_CPU_BLOCK];
      const int64_t *a = vl_cpu_src_i64(ab, pa, bs[1], c->dta, m);
      const int64_t *b = c->scalar ? &c->is : vl_cpu_src_i64(bb, pb, bs[2], c->dtb, m);
      bin_i64(c->op, ob, a, 1, b, c->scalar ? 0 : 1, m, c->ialpha, c->rev);
      vl_cpu_store_i64(o, bs[0], c->dto, ob, m);
    } else {
      double ab[VL_CPU_BLOCK], bb[VL_CPU_BLOCK], ob[VL_CPU_BLOCK];
      const double *a = vl_cpu_src_f64(ab, pa, bs[1], c->dta, m);
      const double *b = c->scalar ? &c->s : vl_cpu_src_f64(bb, pb, bs[2], c->dtb, m);
      bin_f64(c->op, (char *)ob, 1, (const char *)a, 1, (const char *)b, c->scalar ? 0 : 1, m,
              c->alpha, c->rev);
      vl_cpu_store_f64(o, bs[0], c->dto, ob, m);
    }
  }
}

static bool is_int64_value(double v) {
  return v == trunc(v) && v >= -9223372036854775808.0 && v < 9223372036854775808.0;
}

/* Picks the loop once per call: the dtypes are fixed for the whole iterator. */
static void bin_choose(bin_ctx *c) {
  bool pred = vl_binary_is_predicate(c->op);
  bool ints = vl_dtype_is_int(c->dta) && vl_dtype_is_int(c->dtb);
  if (ints && c->op != VL_BIN_DIV && is_int64_value(c->alpha) &&
      (!c->scalar || is_int64_value(c->s))) {
    /* Exact integer arithmetic; a non-integral scalar (e.g. x:lt(2.5)) compares in double. */
    c->path = PATH_INT;
    c->ialpha = (int64_t)c->alpha;
    c->is = c->scalar ? (int64_t)c->s : 0;
    return;
  }
  bool same_in = c->scalar || c->dta == c->dtb;
  if (same_in && c->dta == VL_F32 && c->dto == (pred ? VL_BOOL : VL_F32)) {
    c->path = PATH_F32;
    c->typed = pred ? (c->scalar ? pred_f32_s : pred_f32) : (c->scalar ? bin_f32_s : bin_f32);
  } else if (same_in && c->dta == VL_F64 && c->dto == (pred ? VL_BOOL : VL_F64)) {
    c->path = PATH_F64;
    c->typed = pred ? pred_f64 : bin_f64;
  } else {
    c->path = PATH_BUF;
  }
}

vl_status vl_cpu_binary(vl_binary_op op, const vl_iter *it, double alpha) {
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary (cpu): unknown op %d", (int)op);
  bin_ctx c = {.op = op, .dto = it->dtype[0], .dta = it->dtype[1], .dtb = it->dtype[2]};
  c.alpha = (op == VL_BIN_ADD || op == VL_BIN_SUB) ? alpha : 1.0;
  bin_choose(&c);
  vl_cpu_for_each(it, bin_loop, &c);
  return VL_OK;
}

vl_status vl_cpu_binary_scalar(vl_binary_op op, const vl_iter *it, double s, bool reverse) {
  if ((unsigned)op >= VL_NBINARY)
    return vl_fail(VL_EINVAL, "binary_scalar (cpu): unknown op %d", (int)op);
  bin_ctx c = {.op = op, .dto = it->dtype[0], .dta = it->dtype[1], .dtb = it->dtype[1]};
  c.alpha = 1.0;
  c.scalar = true;
  c.rev = reverse;
  c.s = s;
  bin_choose(&c);
  vl_cpu_for_each(it, bin_loop, &c);
  return VL_OK;
}
