/* runtime/backend/op_list.h: the one list of the elementwise ops. Everything that names, numbers,
 * classifies or registers a unary or binary op is generated from these lines (X-macros): the
 * enums of runtime/backend/kernels.h, the front end's names and dtype rules (runtime/ops), the
 * autograd node names and what each backward saves (runtime/autograd/ops_ew.c), the autocast
 * mapping (runtime/amp/autocast.c), the Lua methods (bindings/l_ops.c), v100.core.ops() (which
 * the generated sweeps walk: tests/lua/test_op_sweep.lua, tests/lua/gpu_op_sweep.lua) and the
 * kernels' dispatch, whose per-op arithmetic is one formula in kernels/ew_formulas.h.
 *
 * A new unary op: a line here, its formula (VL_UF_<NAME>, and VL_UI_<NAME> for an EXACT op) in
 * kernels/ew_formulas.h, its backward rule (a case in runtime/autograd/ops_ew.c's unary_bw), and
 * nothing else (docs/ARCHITECTURE.md, "How to add an op").
 *
 * Unary columns: X(ENUM, name, node, domain, saves, autocast, lua, lo, hi)
 *   ENUM      VL_UN_<ENUM>
 *   name      the op in messages, the Lua method (name and name_) and v100.core.ops()
 *   node      the autograd node
 *   domain    EXACT: integer inputs computed exactly in int64 (VL_UI_ formula); FLOAT: integer
 *             inputs cast to f32 first; BOOL: a bool result (logical_not, isnan, isinf,
 *             isfinite; no autograd); INT: integer and bool inputs only (bitwise_not; a float
 *             input is refused), computed in int64 (VL_UI_ formula), no autograd
 *   saves     what the backward keeps: NONE, IN (the input x) or OUT (the output y)
 *   autocast  the autocast op (runtime/amp/autocast.h VL_AC_<autocast>) or NONE: inputs keep
 *             their dtype
 *   lua       1: bound as a plain method by bindings/l_ops.c; 0: bound by hand (clamp takes
 *             bounds, the GELUs are one method with an option)
 *   lo, hi    where the sweeps draw inputs (the op's smooth domain) */
#ifndef VL_OP_LIST_H
#define VL_OP_LIST_H

#define VL_UNARY_OPS(X)                                                              \
  X(NEG, "neg", "NegBackward", EXACT, NONE, NONE, 1, -3, 3)                          \
  X(ABS, "abs", "AbsBackward", EXACT, IN, NONE, 1, -3, 3)                             \
  X(SQUARE, "square", "SquareBackward", EXACT, IN, NONE, 1, -3, 3)                    \
  X(SIGN, "sign", "SignBackward", EXACT, NONE, NONE, 1, -3, 3)                       \
  X(RELU, "relu", "ReluBackward", EXACT, OUT, NONE, 1, -3, 3)                          \
  X(CLAMP, "clamp", "ClampBackward", EXACT, IN, NONE, 0, -3, 3)                       \
  X(FLOOR, "floor", "FloorBackward", EXACT, NONE, NONE, 1, -10, 10)                  \
  X(CEIL, "ceil", "CeilBackward", EXACT, NONE, NONE, 1, -10, 10)                     \
  X(ROUND, "round", "RoundBackward", EXACT, NONE, NONE, 1, -10, 10)                  \
  X(EXP, "exp", "ExpBackward", FLOAT, OUT, EXP, 1, -4, 4)                              \
  X(LOG, "log", "LogBackward", FLOAT, IN, LOG, 1, 0.05, 20)                           \
  X(SQRT, "sqrt", "SqrtBackward", FLOAT, OUT, NONE, 1, 0.01, 50)                       \
  X(RSQRT, "rsqrt", "RsqrtBackward", FLOAT, OUT, RSQRT, 1, 0.01, 50)                   \
  X(TANH, "tanh", "TanhBackward", FLOAT, OUT, NONE, 1, -3, 3)                          \
  X(SIGMOID, "sigmoid", "SigmoidBackward", FLOAT, OUT, NONE, 1, -8, 8)                 \
  X(GELU, "gelu", "GeluBackward", FLOAT, IN, NONE, 0, -5, 5)                          \
  X(GELU_TANH, "gelu_tanh", "GeluBackward", FLOAT, IN, NONE, 0, -5, 5)                \
  X(RECIPROCAL, "reciprocal", "ReciprocalBackward", FLOAT, OUT, RECIPROCAL, 1, 0.2, 5) \
  X(SIN, "sin", "SinBackward", FLOAT, IN, NONE, 1, -3, 3)                             \
  X(COS, "cos", "CosBackward", FLOAT, IN, NONE, 1, -3, 3)                             \
  X(LOGICAL_NOT, "logical_not", "LogicalNotBackward", BOOL, NONE, NONE, 1, -3, 3)    \
  X(LOG1P, "log1p", "Log1pBackward", FLOAT, IN, LOG, 1, -0.9, 20)                     \
  X(ERF, "erf", "ErfBackward", FLOAT, IN, NONE, 1, -3, 3)                            \
  X(EXPM1, "expm1", "Expm1Backward", FLOAT, OUT, EXPM1, 1, -4, 4)                     \
  X(ERFINV, "erfinv", "ErfinvBackward", FLOAT, OUT, ERFINV, 1, -0.99, 0.99)           \
  X(TRUNC, "trunc", "TruncBackward", EXACT, NONE, NONE, 1, -10, 10)                  \
  X(ISNAN, "isnan", "", BOOL, NONE, NONE, 1, -3, 3)                                  \
  X(ISINF, "isinf", "", BOOL, NONE, NONE, 1, -3, 3)                                  \
  X(ISFINITE, "isfinite", "", BOOL, NONE, NONE, 1, -3, 3)                            \
  X(BITWISE_NOT, "bitwise_not", "", INT, NONE, NONE, 1, -1000, 1000)

/* Binary columns: X(ENUM, name, node, kind, autocast, lua, lo, hi)
 *   kind      ARITH (the result in the promoted dtype; ADD and SUB take alpha), FLOAT (as ARITH,
 *             integer operands computed in f32: atan2, hypot), INT (integer and bool operands
 *             only, a float operand refused: the bitwise ops), CMP and LOGIC (a bool result), ACT
 *             (an activation's backward [grad, v]: float only, no autograd)
 *   node      the autograd node ("" where none is recorded: predicates, ACT, INT, floor_divide)
 *   lua       as above (the ACT ops are reached through the activations' backward only) */
#define VL_BINARY_OPS(X)                                                 \
  X(ADD, "add", "AddBackward", ARITH, ADD, 1, -2, 2)                     \
  X(SUB, "sub", "SubBackward", ARITH, SUB, 1, -2, 2)                     \
  X(MUL, "mul", "MulBackward", ARITH, MUL, 1, -2, 2)                     \
  X(DIV, "div", "DivBackward", ARITH, DIV, 1, -2, 2)                     \
  X(POW, "pow", "PowBackward", ARITH, POW, 1, 0.2, 3)                    \
  X(MAXIMUM, "maximum", "MaximumBackward", ARITH, MAXIMUM, 1, -2, 2)     \
  X(MINIMUM, "minimum", "MinimumBackward", ARITH, MINIMUM, 1, -2, 2)     \
  X(EQ, "eq", "", CMP, NONE, 1, -2, 2)                                   \
  X(NE, "ne", "", CMP, NONE, 1, -2, 2)                                   \
  X(LT, "lt", "", CMP, NONE, 1, -2, 2)                                   \
  X(LE, "le", "", CMP, NONE, 1, -2, 2)                                   \
  X(GT, "gt", "", CMP, NONE, 1, -2, 2)                                   \
  X(GE, "ge", "", CMP, NONE, 1, -2, 2)                                   \
  X(LOGICAL_AND, "logical_and", "", LOGIC, NONE, 1, -2, 2)               \
  X(LOGICAL_OR, "logical_or", "", LOGIC, NONE, 1, -2, 2)                 \
  X(REMAINDER, "remainder", "RemainderBackward", ARITH, NONE, 1, -3, 3)  \
  X(FLOOR_DIVIDE, "floor_divide", "", ARITH, NONE, 1, -3, 3)             \
  X(FMOD, "fmod", "FmodBackward", ARITH, NONE, 1, -3, 3)                 \
  X(ATAN2, "atan2", "Atan2Backward", FLOAT, ATAN2, 1, -2, 2)             \
  X(HYPOT, "hypot", "HypotBackward", FLOAT, NONE, 1, -2, 2)              \
  X(BITWISE_AND, "bitwise_and", "", INT, NONE, 1, -1000, 1000)           \
  X(BITWISE_OR, "bitwise_or", "", INT, NONE, 1, -1000, 1000)             \
  X(BITWISE_XOR, "bitwise_xor", "", INT, NONE, 1, -1000, 1000)           \
  X(BITWISE_LEFT_SHIFT, "bitwise_left_shift", "", INT, NONE, 1, -1000, 1000)   \
  X(BITWISE_RIGHT_SHIFT, "bitwise_right_shift", "", INT, NONE, 1, -1000, 1000) \
  X(RELU_BACKWARD, "relu_backward", "", ACT, NONE, 0, -3, 3)             \
  X(GELU_BACKWARD, "gelu_backward", "", ACT, NONE, 0, -5, 5)             \
  X(GELU_TANH_BACKWARD, "gelu_tanh_backward", "", ACT, NONE, 0, -5, 5)   \
  X(TANH_BACKWARD, "tanh_backward", "", ACT, NONE, 0, -1, 1)             \
  X(SIGMOID_BACKWARD, "sigmoid_backward", "", ACT, NONE, 0, 0, 1)

/* The tensor ops that are not elementwise (issue 30): reductions, scans, sorting and selection,
 * shape, indexing, creation and random. One line each, per family, X(name, grad):
 *   name   the Lua name (a method, a v100.* function, or both) and the op in v100.core.ops()
 *          (kind = 'tensor', class = the family)
 *   grad   1: differentiable (the sweeps compare its gradient: CPU against finite differences,
 *          CUDA against the CPU)
 * Each op has its sweep cases in tests/lua/sweep/<family>.lua; tests/lua/test_tensor_sweep.lua
 * (CPU against f64) and tests/lua/gpu_tensor_sweep.lua (CUDA against the CPU) walk this list and
 * fail on an op without cases, or cases for an op not listed here. */
#define VL_TENSOR_OPS_REDUCE(X) \
  X("sum", 1)                    \
  X("mean", 1)                   \
  X("prod", 1)                   \
  X("var", 1)                    \
  X("std", 1)                    \
  X("norm", 1)                   \
  X("max", 1)                    \
  X("min", 1)                    \
  X("argmax", 0)                 \
  X("argmin", 0)                 \
  X("softmax", 1)                \
  X("log_softmax", 1)            \
  X("cumsum", 1)                 \
  X("cumprod", 1)                \
  X("logsumexp", 1)              \
  X("any", 0)                    \
  X("all", 0)                    \
  X("count_nonzero", 0)
#define VL_TENSOR_OPS_SORT(X) \
  X("sort", 1)                 \
  X("argsort", 0)              \
  X("topk", 1)                 \
  X("kthvalue", 1)             \
  X("median", 1)               \
  X("unique", 0)               \
  X("searchsorted", 0)
#define VL_TENSOR_OPS_SHAPE(X) \
  X("flatten", 1)               \
  X("unflatten", 1)             \
  X("movedim", 1)               \
  X("diagonal", 1)              \
  X("flip", 1)                  \
  X("roll", 1)                  \
  X("tril", 1)                  \
  X("triu", 1)                  \
  X("repeat", 1)                \
  X("tile", 1)                  \
  X("repeat_interleave", 1)     \
  X("split", 1)                 \
  X("chunk", 1)                 \
  X("cat", 1)                   \
  X("stack", 1)                 \
  X("pad", 1)
#define VL_TENSOR_OPS_INDEX(X) \
  X("gather", 1)                \
  X("scatter_add", 1)           \
  X("scatter", 1)               \
  X("index_put", 1)             \
  X("one_hot", 0)               \
  X("index_add", 1)             \
  X("index_copy", 1)            \
  X("index_fill", 1)            \
  X("index_select", 1)          \
  X("masked_fill", 1)           \
  X("masked_select", 1)         \
  X("nonzero", 0)               \
  X("where", 1)
#define VL_TENSOR_OPS_CREATE(X) \
  X("linspace", 0)               \
  X("logspace", 0)               \
  X("eye", 0)                    \
  X("empty_like", 0)             \
  X("zeros_like", 0)             \
  X("ones_like", 0)              \
  X("full_like", 0)              \
  X("rand_like", 0)              \
  X("randn_like", 0)             \
  X("randint", 0)                \
  X("randint_like", 0)           \
  X("randperm", 0)               \
  X("multinomial", 0)            \
  X("uniform_", 0)               \
  X("normal_", 0)                \
  X("bernoulli_", 0)             \
  X("exponential_", 0)           \
  X("random_", 0)
#define VL_TENSOR_OPS_LINALG(X) \
  X("einsum", 1)                 \
  X("matmul", 1)                 \
  X("mm", 1)                     \
  X("bmm", 1)                    \
  X("addmm", 1)
#define VL_TENSOR_OPS(X)                                                        \
  VL_TENSOR_OPS_REDUCE(X) VL_TENSOR_OPS_SORT(X) VL_TENSOR_OPS_SHAPE(X) VL_TENSOR_OPS_INDEX(X) \
  VL_TENSOR_OPS_CREATE(X) VL_TENSOR_OPS_LINALG(X)
#define VL_TENSOR_FAMILIES(X)                                                                   \
  X(REDUCE, "reduce") X(SORT, "sort") X(SHAPE, "shape") X(INDEX, "index") X(CREATE, "create") \
  X(LINALG, "linalg")

/* The classes of the columns above, as values (vl_unary_domain, vl_binary_kind). */
typedef enum vl_op_domain { VL_OPD_EXACT = 0, VL_OPD_FLOAT, VL_OPD_BOOL, VL_OPD_INT } vl_op_domain;
typedef enum vl_op_saves { VL_OPS_NONE = 0, VL_OPS_IN, VL_OPS_OUT } vl_op_saves;
typedef enum vl_binary_kind {
  VL_OPK_ARITH = 0,
  VL_OPK_FLOAT,
  VL_OPK_INT,
  VL_OPK_CMP,
  VL_OPK_LOGIC,
  VL_OPK_ACT
} vl_binary_kind;

#endif
