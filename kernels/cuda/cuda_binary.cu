/* kernels/cuda/cuda_binary.cu: binary and binary_scalar.
 *
 * The op is a runtime switch inside the kernel (uniform across the grid, so it costs a few
 * instructions per element of a memory-bound loop), except the flat ADD/SUB/MUL/DIV of the float
 * and 32/64-bit integer dtypes, which get op-specialised kernels: they are most of the
 * elementwise traffic of training. Products that feed an addition use __fmul_rn/__dmul_rn so
 * nvcc cannot contract them into an FMA: the CPU reference rounds the product separately. */
#include "kernels/cuda/cuda_ew.cuh"

VL_DEV float vl_mul_rn(float a, float b) { return __fmul_rn(a, b); }
VL_DEV double vl_mul_rn(double a, double b) { return __dmul_rn(a, b); }
/* Out of line: inlined into every kernel, pow dominates code size and compile time. */
__device__ __noinline__ float vl_pow(float a, float b) { return powf(a, b); }
__device__ __noinline__ double vl_pow(double a, double b) { return pow(a, b); }

/* Activation backward [grad g, saved v] (kernels.h): v is the forward input x for RELU and the
 * GELUs, the forward output y for TANH and SIGMOID. Out of line for the same reason as pow. */
template <typename C>
__device__ __noinline__ C vl_act_backward(int op, C g, C v) {
  const C one = (C)1, half = (C)0.5;
  switch (op) {
    case VL_BIN_RELU_BACKWARD: return v > (C)0 ? g : (C)0;
    case VL_BIN_GELU_BACKWARD: {
      /* d/dx x*Phi(x) = Phi(x) + x*phi(x); Phi through erfc keeps accuracy for x << 0. */
      const C cdf = half * erfc(-v * (C)0.70710678118654752440);
      const C pdf = exp(-half * v * v) * (C)0.39894228040143267794;
      return g * (cdf + v * pdf);
    }
    case VL_BIN_GELU_TANH_BACKWARD: {
      /* With s = 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)) and its complement 1 / (1 + exp(2u)),
       * d/dx = s + x * 2 s (1 - s) * du/dx; both factors stay accurate for |u| large. */
      const C k0 = (C)0.79788456080286535588, k1 = (C)0.044715;
      const C u2 = (C)2 * k0 * (v + k1 * v * v * v);
      const C s = one / (one + exp(-u2)), sc = one / (one + exp(u2));
      return g * (s + v * (C)2 * s * sc * k0 * (one + (C)3 * k1 * v * v));
    }
    case VL_BIN_TANH_BACKWARD: return g * (one - v * v);
    case VL_BIN_SIGMOID_BACKWARD: return g * v * (one - v);
    default: return g;
  }
}

template <typename C>
VL_DEV C vl_bin_apply(int op, C a, C b, C alpha) {
  switch (op) {
    case VL_BIN_ADD: return a + vl_mul_rn(alpha, b);
    case VL_BIN_SUB: return a - vl_mul_rn(alpha, b);
    case VL_BIN_MUL: return a * b;
    case VL_BIN_DIV: return a / b;
    case VL_BIN_POW: return vl_pow(a, b);
    case VL_BIN_MAXIMUM: return vl_isnan(a) ? a : vl_isnan(b) ? b : (a > b ? a : b);
    case VL_BIN_MINIMUM: return vl_isnan(a) ? a : vl_isnan(b) ? b : (a < b ? a : b);
    case VL_BIN_EQ: return (C)(a == b);
    case VL_BIN_NE: return (C)(a != b);
    case VL_BIN_LT: return (C)(a < b);
    case VL_BIN_LE: return (C)(a <= b);
    case VL_BIN_GT: return (C)(a > b);
    case VL_BIN_GE: return (C)(a >= b);
    case VL_BIN_LOGICAL_AND: return (C)(a != (C)0 && b != (C)0);
    case VL_BIN_LOGICAL_OR: return (C)(a != (C)0 || b != (C)0);
    default: return vl_act_backward<C>(op, a, b);
  }
}

/* Integer power by squaring, wrapping; negative exponents (rejected by the front end) follow
 * PyTorch: 1 for base 1, +-1 for base -1, 0 otherwise. */
__device__ __noinline__ int64_t vl_ipow(int64_t a, int64_t b) {
  if (b < 0) return a == 1 ? 1 : a == -1 ? ((b & 1) ? -1 : 1) : 0;
  uint64_t r = 1, x = (uint64_t)a;
  while (b) {
    if (b & 1) r *= x;
    x *= x;
    b >>= 1;
  }
  return (int64_t)r;
}

/* Integers wrap: the arithmetic runs on uint64_t, where overflow is defined. */
template <>
VL_DEV int64_t vl_bin_apply<int64_t>(int op, int64_t a, int64_t b, int64_t alpha) {
  const uint64_t ua = (uint64_t)a, ub = (uint64_t)b, ual = (uint64_t)alpha;
  switch (op) {
    case VL_BIN_ADD: return (int64_t)(ua + ual * ub);
    case VL_BIN_SUB: return (int64_t)(ua - ual * ub);
    case VL_BIN_MUL: return (int64_t)(ua * ub);
    case VL_BIN_DIV: return b == 0 ? 0 : (b == -1 ? (int64_t)(0 - ua) : a / b);
    case VL_BIN_POW: return vl_ipow(a, b);
    case VL_BIN_MAXIMUM: return a > b ? a : b;
    case VL_BIN_MINIMUM: return a < b ? a : b;
    case VL_BIN_EQ: return a == b;
    case VL_BIN_NE: return a != b;
    case VL_BIN_LT: return a < b;
    case VL_BIN_LE: return a <= b;
    case VL_BIN_GT: return a > b;
    case VL_BIN_GE: return a >= b;
    case VL_BIN_LOGICAL_AND: return a != 0 && b != 0;
    case VL_BIN_LOGICAL_OR: return a != 0 || b != 0;
    default: return a;
  }
}

/* The predicates alone, for bool outputs. */
template <typename C>
VL_DEV bool vl_pred_apply(int op, C a, C b) {
  switch (op) {
    case VL_BIN_EQ: return a == b;
    case VL_BIN_NE: return a != b;
    case VL_BIN_LT: return a < b;
    case VL_BIN_LE: return a <= b;
    case VL_BIN_GT: return a > b;
    case VL_BIN_GE: return a >= b;
    case VL_BIN_LOGICAL_AND: return a != (C)0 && b != (C)0;
    case VL_BIN_LOGICAL_OR: return a != (C)0 || b != (C)0;
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

/* The activation backwards of the float dtypes inline, for the hot kernels: the same formulas as
 * vl_act_backward (whose out-of-line call and switch per element made the GELU backward of a
 * BERT FFN run at a third of the memory bandwidth). */
template <int OP, typename C> VL_DEV C vl_act_backward_inline(C g, C v) {
  const C one = (C)1, half = (C)0.5;
  if constexpr (OP == VL_BIN_RELU_BACKWARD) {
    return v > (C)0 ? g : (C)0;
  } else if constexpr (OP == VL_BIN_GELU_BACKWARD) {
    const C cdf = half * erfc(-v * (C)0.70710678118654752440);
    const C pdf = exp(-half * v * v) * (C)0.39894228040143267794;
    return g * (cdf + v * pdf);
  } else {
    const C k0 = (C)0.79788456080286535588, k1 = (C)0.044715;
    const C u2 = (C)2 * k0 * (v + k1 * v * v * v);
    const C s = one / (one + exp(-u2)), sc = one / (one + exp(u2));
    return g * (s + v * (C)2 * s * sc * k0 * (one + (C)3 * k1 * v * v));
  }
}

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
    if constexpr (OP == VL_BIN_RELU_BACKWARD || OP == VL_BIN_GELU_BACKWARD || OP == VL_BIN_GELU_TANH_BACKWARD)
      return vl_conv<T>::f(vl_act_backward_inline<OP, C>(vl_val(a), vl_val(b)));
    else
      return vl_conv<T>::f(vl_bin_apply<C>(OP, vl_val(a), vl_val(b), alpha));
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
  if (op >= VL_BIN_RELU_BACKWARD && !vl_dtype_is_float(it->dtype[1]))
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
