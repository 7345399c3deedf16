/* kernels/cuda/cuda_binary.cu: binary and binary_scalar.
 *
 * The op is a runtime switch inside the kernel (uniform across the grid, so it costs a few
 * instructions per element of a memory-bound loop), except the flat ADD/SUB/MUL/DIV of the float
 * and 32/64-bit integer dtypes, which get op-specialised kernels: they are most of the
 * elementwise traffic of training. Products that feed an addition use __fmul_rn/__dmul_rn so
 * nvcc cannot contract them into an FMA: the CPU reference rounds the product separately. */
#include "kernels/cuda/cuda_ew.cuh"

/* Out of line: inlined into every kernel, pow dominates code size and compile time. */
__device__ __noinline__ float vl_pow(float a, float b) { return powf(a, b); }
__device__ __noinline__ double vl_pow(double a, double b) { return pow(a, b); }
#define VL_POW(a, b) vl_pow(a, b)
#include "kernels/ew_formulas.h"

/* Every op's formula (kernels/ew_formulas.h) in the compute type C; with op a compile-time
 * constant (the hot kernels) the switch folds to the one formula. */
template <typename C>
VL_DEV C vl_bin_formula(int op, C a, C b, C alpha) {
  switch (op) {
#define VL_X(E, ...) \
  case VL_BIN_##E: return VL_BF_##E(C, a, b, alpha);
    VL_BINARY_OPS(VL_X)
#undef VL_X
    default: return a;
  }
}

/* Activation backward [grad g, saved v] out of line in the generic kernel, for the same reason
 * as pow. */
template <typename C>
__device__ __noinline__ C vl_act_backward(int op, C g, C v) { return vl_bin_formula<C>(op, g, v, (C)1); }

#define VL_BIN_INLINE_ARITH(E) \
  case VL_BIN_##E: return VL_BF_##E(C, a, b, alpha);
#define VL_BIN_INLINE_CMP(E) VL_BIN_INLINE_ARITH(E)
#define VL_BIN_INLINE_LOGIC(E) VL_BIN_INLINE_ARITH(E)
#define VL_BIN_INLINE_ACT(E)
#define VL_BIN_INLINE_FLOAT(E) VL_BIN_INLINE_ARITH(E)
#define VL_BIN_INLINE_INT(E) VL_BIN_INLINE_ARITH(E)
template <typename C>
VL_DEV C vl_bin_apply(int op, C a, C b, C alpha) {
  switch (op) {
#define VL_X(E, name, node, kind, ...) VL_BIN_INLINE_##kind(E)
    VL_BINARY_OPS(VL_X)
#undef VL_X
    default: return vl_act_backward<C>(op, a, b);
  }
}

/* Integers wrap: the arithmetic runs on uint64_t, where overflow is defined. */
template <>
VL_DEV int64_t vl_bin_apply<int64_t>(int op, int64_t a, int64_t b, int64_t alpha) {
  switch (op) {
#define VL_X(E, ...) \
  case VL_BIN_##E: return VL_BI_##E(a, b, alpha);
    VL_BINARY_OPS(VL_X)
#undef VL_X
    default: return a;
  }
}

/* The predicates alone, for bool outputs. */
template <typename C>
VL_DEV bool vl_pred_apply(int op, C a, C b) {
  switch (op) {
#define VL_BIN_PRED_ARITH(E)
#define VL_BIN_PRED_ACT(E)
#define VL_BIN_PRED_FLOAT(E)
#define VL_BIN_PRED_INT(E)
#define VL_BIN_PRED_CMP(E) \
  case VL_BIN_##E: return VL_BF_##E(C, a, b, (C)1) != (C)0;
#define VL_BIN_PRED_LOGIC(E) VL_BIN_PRED_CMP(E)
#define VL_X(E, name, node, kind, ...) VL_BIN_PRED_##kind(E)
    VL_BINARY_OPS(VL_X)
#undef VL_X
    default: return false;
  }
}

template <typename T>
struct vl_pred_f {
  typedef typename vl_acc<T>::type C;
  static constexpr int NIN = 2, UNROLL = 1;
  typedef vl_bool8 out_t;
  typedef T in0_t;
  typedef T in1_t;
  typedef vl_none in2_t;
  int op;
  VL_DEV vl_bool8 operator()(T a, T b, vl_none) const {
    return vl_bool8{(uint8_t)vl_pred_apply<C>(op, vl_val(a), vl_val(b))};
  }
};

template <typename T>
struct vl_pred_scalar_f {
  typedef typename vl_acc<T>::type C;
  static constexpr int NIN = 1, UNROLL = 1;
  typedef vl_bool8 out_t;
  typedef T in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  int op;
  C s;
  bool rev;
  VL_DEV vl_bool8 operator()(T a, vl_none, vl_none) const {
    C x = vl_val(a);
    return vl_bool8{(uint8_t)(rev ? vl_pred_apply<C>(op, s, x) : vl_pred_apply<C>(op, x, s))};
  }
};

/* out = a op b in the inputs' dtype (predicates store 0/1). */
template <typename T>
struct vl_bin_f {
  typedef typename vl_acc<T>::type C;
  static constexpr int NIN = 2, UNROLL = 1;
  typedef T out_t;
  typedef T in0_t;
  typedef T in1_t;
  typedef vl_none in2_t;
  int op;
  C alpha;
  VL_DEV T operator()(T a, T b, vl_none) const {
    return vl_conv<T>::f(vl_bin_apply<C>(op, vl_val(a), vl_val(b), alpha));
  }
};

/* The hot ops with the op fixed at compile time (the switch folds away). */
template <typename T, int OP>
struct vl_bin_hot_f {
  typedef typename vl_acc<T>::type C;
  static constexpr int NIN = 2, UNROLL = 4;
  static constexpr bool NO_STRIDED64 = true;
  typedef T out_t;
  typedef T in0_t;
  typedef T in1_t;
  typedef vl_none in2_t;
  C alpha;
  VL_DEV T operator()(T a, T b, vl_none) const {
    if constexpr (std::is_same<C, int64_t>::value)
      return vl_conv<T>::f(vl_bin_apply<C>(OP, vl_val(a), vl_val(b), alpha));
    else /* the formula inline, the activation backwards too (their out-of-line call and switch
          * per element made the GELU backward of a BERT FFN run at a third of the bandwidth) */
      return vl_conv<T>::f(vl_bin_formula<C>(OP, vl_val(a), vl_val(b), alpha));
  }
};

/* out = a op s, or s op a when rev. */
template <typename T>
struct vl_bin_scalar_f {
  typedef typename vl_acc<T>::type C;
  static constexpr int NIN = 1, UNROLL = 1;
  typedef T out_t;
  typedef T in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  int op;
  C s;
  bool rev;
  VL_DEV T operator()(T a, vl_none, vl_none) const {
    C x = vl_val(a);
    return vl_conv<T>::f(rev ? vl_bin_apply<C>(op, s, x, (C)1) : vl_bin_apply<C>(op, x, s, (C)1));
  }
};

/* out = a op s for the hot scalar ops (ADD, MUL) of the float dtypes. */
template <typename T, int OP>
struct vl_bin_scalar_hot_f {
  typedef typename vl_acc<T>::type C;
  static constexpr int NIN = 1, UNROLL = 4;
  static constexpr bool FLAT_ONLY = true;
  typedef T out_t;
  typedef T in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  C s;
  VL_DEV T operator()(T a, vl_none, vl_none) const {
    return vl_conv<T>::f(vl_bin_apply<C>(OP, vl_val(a), s, (C)1));
  }
};

/* A double scalar in the compute type C (integers truncate, as C casts do). */
template <typename C> static C vl_scalar_as(double v) { return (C)v; }

/* Flat and aligned, or strided with fewer than 2^31 elements (broadcast bias adds, residuals on
 * views): the caller checks. */
template <typename T, int OP>
static vl_status vl_bin_hot(const vl_iter *it, double alpha, const vl_cuda_state *st) {
  vl_bin_hot_f<T, OP> f;
  f.alpha = vl_scalar_as<typename vl_acc<T>::type>(alpha);
  if (vl_iter_is_flat(it)) return vl_ew_launch_flat(it, f, st);
  return vl_ew_launch_strided<vl_bin_hot_f<T, OP>, false>(it, f, st);
}

template <typename T>
static vl_status vl_bin_hot_dispatch(vl_binary_op op, const vl_iter *it, double alpha,
                                     const vl_cuda_state *st) {
  switch (op) {
    case VL_BIN_ADD: return vl_bin_hot<T, VL_BIN_ADD>(it, alpha, st);
    case VL_BIN_SUB: return vl_bin_hot<T, VL_BIN_SUB>(it, alpha, st);
    case VL_BIN_MUL: return vl_bin_hot<T, VL_BIN_MUL>(it, alpha, st);
    default: break;
  }
  if constexpr (!std::is_same<typename vl_acc<T>::type, int64_t>::value) {
    switch (op) {
      case VL_BIN_DIV: return vl_bin_hot<T, VL_BIN_DIV>(it, alpha, st);
      case VL_BIN_RELU_BACKWARD: return vl_bin_hot<T, VL_BIN_RELU_BACKWARD>(it, alpha, st);
      case VL_BIN_GELU_BACKWARD: return vl_bin_hot<T, VL_BIN_GELU_BACKWARD>(it, alpha, st);
      case VL_BIN_GELU_TANH_BACKWARD: return vl_bin_hot<T, VL_BIN_GELU_TANH_BACKWARD>(it, alpha, st);
      default: break;
    }
  }
  return vl_fail(VL_EINTERNAL, "binary: op %d has no specialised cuda kernel", (int)op);
}

static bool vl_bin_is_hot(vl_binary_op op, vl_dtype dt) {
  bool hot_op = op == VL_BIN_ADD || op == VL_BIN_SUB || op == VL_BIN_MUL ||
                ((op == VL_BIN_DIV || op == VL_BIN_RELU_BACKWARD || op == VL_BIN_GELU_BACKWARD ||
                  op == VL_BIN_GELU_TANH_BACKWARD) && vl_dtype_is_float(dt));
  bool hot_dt = dt == VL_F32 || dt == VL_F16 || dt == VL_BF16 || dt == VL_F64 || dt == VL_I32 ||
                dt == VL_I64;
  return hot_op && hot_dt;
}

vl_status vl_cuda_binary(vl_binary_op op, const vl_iter *it, double alpha) {
  if (it->numel <= 0) return VL_OK;
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary: unknown op %d", (int)op);
  if (vl_binary_kind_of(op) == VL_OPK_ACT && !vl_dtype_is_float(it->dtype[1]))
    return vl_fail(VL_EDTYPE, "binary: activation backward op %d needs float inputs on cuda, got %s",
                   (int)op, vl_dtype_name(it->dtype[1]));
  const vl_dtype dt = it->dtype[1], odt = it->dtype[0];
  if (it->dtype[2] != dt)
    return vl_fail(VL_EDTYPE, "binary: cuda operands have dtypes %s and %s", vl_dtype_name(dt),
                   vl_dtype_name(it->dtype[2]));
  const bool to_bool = odt == VL_BOOL && dt != VL_BOOL;
  if (odt != dt && !(to_bool && vl_binary_is_predicate(op)))
    return vl_fail(VL_EDTYPE, "binary: cuda cannot write a %s result of %s inputs",
                   vl_dtype_name(odt), vl_dtype_name(dt));
  VL_CUDA_ENTER(guard, st, it->ex);
  bool aligned16 = true;
  for (int k = 0; k < 3; k++) aligned16 = aligned16 && (uintptr_t)it->data[k] % 16 == 0;
  const bool flat = vl_iter_is_flat(it);
  if (vl_bin_is_hot(op, dt) && ((flat && aligned16) || (!flat && it->numel < ((int64_t)1 << 31)))) {
    switch (dt) {
      case VL_F32: return vl_bin_hot_dispatch<float>(op, it, alpha, st);
      case VL_F16: return vl_bin_hot_dispatch<__half>(op, it, alpha, st);
      case VL_BF16: return vl_bin_hot_dispatch<__nv_bfloat16>(op, it, alpha, st);
      case VL_F64: return vl_bin_hot_dispatch<double>(op, it, alpha, st);
      case VL_I32: return vl_bin_hot_dispatch<int32_t>(op, it, alpha, st);
      case VL_I64: return vl_bin_hot_dispatch<int64_t>(op, it, alpha, st);
      default: break;
    }
  }
  VL_DISPATCH_ALL(dt, T, "binary", {
    typedef typename vl_acc<T>::type C;
    if (to_bool) {
      vl_pred_f<T> f;
      f.op = op;
      return vl_iter_is_flat(it) ? vl_ew_launch_flat(it, f, st) : vl_ew_launch_strided(it, f, st);
    } else {
      vl_bin_f<T> f;
      f.op = op;
      f.alpha = vl_scalar_as<C>(alpha);
      return vl_iter_is_flat(it) ? vl_ew_launch_flat(it, f, st) : vl_ew_launch_strided(it, f, st);
    }
  });
  return VL_OK;
}

template <typename T>
static vl_status vl_bin_scalar_hot(vl_binary_op op, const vl_iter *it, double s,
                                   const vl_cuda_state *st) {
  typedef typename vl_acc<T>::type C;
  if (op == VL_BIN_ADD) {
    vl_bin_scalar_hot_f<T, VL_BIN_ADD> f;
    f.s = vl_scalar_as<C>(s);
    return vl_ew_launch_flat(it, f, st);
  }
  vl_bin_scalar_hot_f<T, VL_BIN_MUL> f;
  f.s = vl_scalar_as<C>(s);
  return vl_ew_launch_flat(it, f, st);
}

vl_status vl_cuda_binary_scalar(vl_binary_op op, const vl_iter *it, double s, bool reverse) {
  if (it->numel <= 0) return VL_OK;
  if ((unsigned)op >= VL_NBINARY) return vl_fail(VL_EINVAL, "binary_scalar: unknown op %d", (int)op);
  const vl_dtype dt = it->dtype[1], odt = it->dtype[0];
  const bool to_bool = odt == VL_BOOL && dt != VL_BOOL;
  if (odt != dt && !(to_bool && vl_binary_is_predicate(op)))
    return vl_fail(VL_EDTYPE, "binary_scalar: cuda cannot write a %s result of a %s input",
                   vl_dtype_name(odt), vl_dtype_name(dt));
  VL_CUDA_ENTER(guard, st, it->ex);
  /* a + s == s + a and a * s == s * a bit for bit, so `reverse` does not matter here. */
  if ((op == VL_BIN_ADD || op == VL_BIN_MUL) && odt == dt && vl_iter_is_flat(it) &&
      (uintptr_t)it->data[0] % 16 == 0 && (uintptr_t)it->data[1] % 16 == 0) {
    if (dt == VL_F32) return vl_bin_scalar_hot<float>(op, it, s, st);
    if (dt == VL_F16) return vl_bin_scalar_hot<__half>(op, it, s, st);
    if (dt == VL_BF16) return vl_bin_scalar_hot<__nv_bfloat16>(op, it, s, st);
  }
  VL_DISPATCH_ALL(dt, T, "binary_scalar", {
    typedef typename vl_acc<T>::type C;
    if (to_bool) {
      vl_pred_scalar_f<T> f;
      f.op = op;
      f.s = vl_scalar_as<C>(s);
      f.rev = reverse;
      return vl_iter_is_flat(it) ? vl_ew_launch_flat(it, f, st) : vl_ew_launch_strided(it, f, st);
    } else {
      vl_bin_scalar_f<T> f;
      f.op = op;
      f.s = vl_scalar_as<C>(s);
      f.rev = reverse;
      return vl_iter_is_flat(it) ? vl_ew_launch_flat(it, f, st) : vl_ew_launch_strided(it, f, st);
    }
  });
  return VL_OK;
}
