/* kernels/cuda/cuda_unary.cu: unary ops (runtime/backend/op_list.h; each op's formula is
 * kernels/ew_formulas.h's, the switches generated from the list). NaN propagates through every op
 * (SIGN, RELU and CLAMP included). */
#include <math.h>

#include "kernels/cuda/cuda_ew.cuh"
#include "kernels/ew_formulas.h"

/* Every op's formula (kernels/ew_formulas.h) in the compute type C; with op a compile-time
 * constant (the hot kernels) the switch folds to the one formula. Float overloads of the math
 * functions resolve to the f32 device versions (expf, logf, ...); sqrt and division are
 * IEEE-rounded because the build does not use fast math. */
template <typename C>
VL_DEV C vl_un_formula(int op, C x, C lo, C hi) {
  switch (op) {
#define VL_X(E, ...) \
  case VL_UN_##E: return VL_UF_##E(C, x, lo, hi);
    VL_UNARY_OPS(VL_X)
#undef VL_X
    default: return x;
  }
}

/* Out of line for the generic kernel: the FLOAT ops' switch compiled once per compute type rather
 * than once per dtype, vector lane and kernel (the call costs a few instructions per element, far
 * below what a memory-bound loop has to spare); the EXACT ops stay inline. */
template <typename C>
__device__ __noinline__ C vl_un_transcendental(int op, C x, C lo, C hi) { return vl_un_formula<C>(op, x, lo, hi); }

#define VL_UN_INLINE_EXACT(E) \
  case VL_UN_##E: return VL_UF_##E(C, x, lo, hi);
#define VL_UN_INLINE_FLOAT(E)
#define VL_UN_INLINE_BOOL(E)
#define VL_UN_INLINE_INT(E)
template <typename C>
VL_DEV C vl_un_float(int op, C x, C lo, C hi) {
  switch (op) {
#define VL_X(E, name, node, dom, ...) VL_UN_INLINE_##dom(E)
    VL_UNARY_OPS(VL_X)
#undef VL_X
    default: return vl_un_transcendental<C>(op, x, lo, hi);
  }
}

/* Integers (the front end casts them to f32 before the FLOAT ops); wrapping. */
VL_DEV int64_t vl_un_int(int op, int64_t x, int64_t lo, int64_t hi) {
  switch (op) {
#define VL_X(E, name, node, dom, ...) \
  case VL_UN_##E: return VL_UI_OR_ID_##dom(E, x, lo, hi);
    VL_UNARY_OPS(VL_X)
#undef VL_X
    default: return x;
  }
}

VL_DEV float vl_un_apply(int op, float x, float lo, float hi) { return vl_un_float<float>(op, x, lo, hi); }
VL_DEV double vl_un_apply(int op, double x, double lo, double hi) { return vl_un_float<double>(op, x, lo, hi); }
VL_DEV int64_t vl_un_apply(int op, int64_t x, int64_t lo, int64_t hi) { return vl_un_int(op, x, lo, hi); }

template <typename T>
struct vl_un_f {
  typedef typename vl_acc<T>::type C;
  static constexpr int NIN = 1, UNROLL = 1;
  typedef T out_t;
  typedef T in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  int op;
  C lo, hi;
  VL_DEV T operator()(T a, vl_none, vl_none) const {
    return vl_conv<T>::f(vl_un_apply(op, vl_val(a), lo, hi));
  }
};

/* The activations and exp of the float dtypes with the op fixed at compile time and the math
 * inlined: on the out-of-line path the call and switch cost more than the memory does. */
template <typename T, int OP>
struct vl_un_hot_f {
  static constexpr int NIN = 1, UNROLL = 2;
  static constexpr bool NO_STRIDED64 = true;
  typedef T out_t;
  typedef T in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  VL_DEV T operator()(T a, vl_none, vl_none) const {
    return vl_conv<T>::f(vl_un_formula<float>(OP, vl_val(a), 0.0f, 0.0f));
  }
};

template <typename T>
static vl_status vl_un_hot(vl_unary_op op, const vl_iter *it, const vl_cuda_state *st) {
#define VL_UN_HOT_CASE(OP)                                                                     \
  case OP:                                                                                    \
    return vl_iter_is_flat(it) ? vl_ew_launch_flat(it, vl_un_hot_f<T, OP>(), st)              \
                               : vl_ew_launch_strided<vl_un_hot_f<T, OP>, false>(it, vl_un_hot_f<T, OP>(), st);
  switch (op) {
    VL_UN_HOT_CASE(VL_UN_RELU)
    VL_UN_HOT_CASE(VL_UN_EXP)
    VL_UN_HOT_CASE(VL_UN_TANH)
    VL_UN_HOT_CASE(VL_UN_SIGMOID)
    VL_UN_HOT_CASE(VL_UN_GELU)
    VL_UN_HOT_CASE(VL_UN_GELU_TANH)
    default: break;
  }
#undef VL_UN_HOT_CASE
  return vl_fail(VL_EINTERNAL, "unary: op %d has no specialised cuda kernel", (int)op);
}

/* The BOOL-domain ops (logical_not, isnan, isinf, isfinite): O is vl_bool8, or T when written in
 * place (0/1 in the input's dtype). */
template <typename T, typename O>
struct vl_not_f {
  static constexpr int NIN = 1, UNROLL = 1;
  typedef O out_t;
  typedef T in0_t;
  typedef vl_none in1_t;
  typedef vl_none in2_t;
  int op;
  VL_DEV O operator()(T a, vl_none, vl_none) const {
    auto x = vl_val(a);
    return vl_conv<O>::f((int64_t)(vl_un_apply(op, x, decltype(x)(0), decltype(x)(0)) != decltype(x)(0)));
  }
};

/* Clamp bounds in the compute type. For integers x >= lo <=> x >= ceil(lo) and x <= hi <=>
 * x <= floor(hi); infinite or out-of-range bounds saturate. */
template <typename C> static C vl_bound(double v, bool lower) { return (C)v; }
template <> int64_t vl_bound<int64_t>(double v, bool lower) {
  double r = lower ? ceil(v) : floor(v);
  if (r != r) return lower ? INT64_MIN : INT64_MAX;
  if (r <= -9223372036854775808.0) return INT64_MIN;
  if (r >= 9223372036854775807.0) return INT64_MAX;
  return (int64_t)r;
}

template <typename F>
static vl_status vl_un_launch(const vl_iter *it, const F &f, const vl_cuda_state *st) {
  return vl_iter_is_flat(it) ? vl_ew_launch_flat(it, f, st) : vl_ew_launch_strided(it, f, st);
}

vl_status vl_cuda_unary(vl_unary_op op, const vl_iter *it, double p0, double p1) {
  if (it->numel <= 0) return VL_OK;
  if ((unsigned)op >= VL_NUNARY) return vl_fail(VL_EINVAL, "unary: unknown op %d", (int)op);
  const vl_dtype dt = it->dtype[1], odt = it->dtype[0];
  if (vl_unary_domain(op) == VL_OPD_BOOL) {
    if (odt != VL_BOOL && odt != dt)
      return vl_fail(VL_EDTYPE, "unary: op %d: cuda cannot write a %s result of a %s input", (int)op,
                     vl_dtype_name(odt), vl_dtype_name(dt));
    VL_CUDA_ENTER(guard, st, it->ex);
    VL_DISPATCH_ALL(dt, T, "unary", {
      if (odt == VL_BOOL) {
        vl_not_f<T, vl_bool8> f;
        f.op = op;
        return vl_un_launch(it, f, st);
      }
      vl_not_f<T, T> f;
      f.op = op;
      return vl_un_launch(it, f, st);
    });
    return VL_OK;
  }
  if (odt != dt)
    return vl_fail(VL_EDTYPE, "unary: cuda cannot write a %s result of a %s input",
                   vl_dtype_name(odt), vl_dtype_name(dt));
  if (vl_unary_domain(op) == VL_OPD_FLOAT && !vl_dtype_is_float(dt))
    return vl_fail(VL_EDTYPE, "unary: op %d needs a float input on cuda, got %s", (int)op,
                   vl_dtype_name(dt));
  if (vl_unary_domain(op) == VL_OPD_INT && vl_dtype_is_float(dt))
    return vl_fail(VL_EDTYPE, "unary: op %d needs an integer input on cuda, got %s", (int)op,
                   vl_dtype_name(dt));
  VL_CUDA_ENTER(guard, st, it->ex);
  const bool hot_op = op == VL_UN_RELU || op == VL_UN_EXP || op == VL_UN_TANH || op == VL_UN_SIGMOID ||
                      op == VL_UN_GELU || op == VL_UN_GELU_TANH;
  if (hot_op && it->numel < ((int64_t)1 << 31)) {
    if (dt == VL_F32) return vl_un_hot<float>(op, it, st);
    if (dt == VL_F16) return vl_un_hot<__half>(op, it, st);
    if (dt == VL_BF16) return vl_un_hot<__nv_bfloat16>(op, it, st);
  }
  VL_DISPATCH_ALL(dt, T, "unary", {
    typedef typename vl_acc<T>::type C;
    vl_un_f<T> f;
    f.op = op;
    f.lo = vl_bound<C>(p0, true);
    f.hi = vl_bound<C>(p1, false);
    return vl_un_launch(it, f, st);
  });
  return VL_OK;
}
