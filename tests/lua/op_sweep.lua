-- tests/lua/op_sweep.lua: the generated sweep over the op list (v100.core.ops(), from
-- runtime/backend/op_list.h), shared by tests/lua/test_op_sweep.lua (CPU against a float64
-- reference) and tests/lua/gpu_op_sweep.lua (CUDA against the CPU). Model: ggml's test-backend-ops.
-- Every op x every dtype its class takes x contiguous, transposed, strided (narrowed) and broadcast
-- inputs (and numbers and in place for the methods), inputs drawn from the op's own domain (lo, hi
-- of its list line). A new op of the list is swept without a line here; the ops bound by hand
-- (clamp's bounds, the GELUs' option, the activation backwards) are called through `call`.
local v100 = require 'v100'
local M = {}

M.FLOATS = { 'f32', 'f16', 'bf16', 'f64' }
M.INTS = { 'i32', 'i64' }

-- Per-op data of the sweep (the op list says the rest): the integer divisions (a zero integer
-- divisor is an error: their integer divisors are drawn non-zero, and the error is checked), the
-- predicates fed NaN and infinities, the shifts' counts (past the width and negative too).
M.INT_DIVISION = { remainder = true, floor_divide = true, fmod = true }
M.SPECIALS = { isnan = true, isinf = true, isfinite = true }
M.SHIFTS = { bitwise_left_shift = true, bitwise_right_shift = true }

-- The dtypes an op takes: every float dtype; integers too for the exact unary ops, the bool one,
-- and the binary ops but the activation backwards; integers only for the INT class (bitwise).
function M.dtypes(op)
  if op.class == 'int' then return { table.unpack(M.INTS) } end
  local d = { table.unpack(M.FLOATS) }
  if op.class == 'exact' or op.class == 'bool' or (op.kind == 'binary' and op.class ~= 'act') then
    for _, i in ipairs(M.INTS) do d[#d + 1] = i end
  end
  return d
end

-- op applied to a (and b: a tensor or a number); inplace: the method's `name_` form on a.
function M.call(op, a, b, inplace)
  local n = op.name .. (inplace and '_' or '')
  if op.kind == 'unary' then
    if op.method then return a[n](a) end
    if op.name == 'clamp' then return a[n](a, -0.5, 0.75) end
    if op.name == 'gelu' then return a[n](a) end
    if op.name == 'gelu_tanh' then return a[inplace and 'gelu_' or 'gelu'](a, { approximate = 'tanh' }) end
  else
    if op.class == 'act' then return not inplace and v100._nn.activation_backward(op.name, a, b) or nil end
    return a[n](a, b)
  end
  error('op_sweep: no way to call ' .. op.name)
end

-- A random tensor of `shape` and dtype dt in the op's domain: floats uniform in [lo, hi) (zeros
-- moved off: reciprocal, division); integers in [ilo, ihi].
function M.input(shape, dt, lo, hi, ilo, ihi)
  if dt:sub(1, 1) == 'i' then
    return (v100.rand(shape, { dtype = 'f64' }) * (ihi - ilo + 1) + ilo):floor():to(dt)
  end
  local c = v100.rand(shape, { dtype = 'f64' }) * (hi - lo) + lo
  return v100.where(c:eq(0), (lo + hi) / 2 + 1e-3, c):to(dt)
end

-- The integer range of an op's inputs: small (pow's exponents non-negative, comparisons equal often).
function M.int_range(op, which)
  if op.name == 'pow' then return which == 2 and 0 or -3, 3 end
  if M.SHIFTS[op.name] and which == 2 then return -2, 70 end
  if op.class == 'cmp' or op.class == 'logic' then return -3, 3 end
  return -1000, 1000
end

-- make(shape, which) for M.cases: operand `which` of op in dtype dt (an activation backward's
-- gradient in [-2, 2], its v in the op's domain).
function M.maker(op, dt)
  return function(shape, which)
    local ilo, ihi = M.int_range(op, which)
    if op.class == 'act' and which == 1 then return M.input(shape, dt, -2, 2) end
    local x = M.input(shape, dt, op.lo, op.hi, ilo, ihi)
    if M.INT_DIVISION[op.name] and which == 2 and dt:sub(1, 1) == 'i' then x = v100.where(x:eq(0), 7, x):to(dt) end
    if M.SPECIALS[op.name] and dt:sub(1, 1) ~= 'i' then
      local u = v100.rand(shape)
      x = v100.where(u:lt(0.1), 0 / 0, v100.where(u:lt(0.2), 1 / 0, v100.where(u:lt(0.3), -1 / 0, x))):to(dt)
    end
    return x
  end
end

-- The cases of one op and dtype: {label, a, b} with a's layout varied (contiguous, transposed,
-- narrowed, expanded) and, for binary ops, b broadcast along rows or columns, or a number.
-- make(shape, which) draws operand `which` (1 or 2) of that shape.
function M.cases(op, R, C, make)
  local out = {}
  local function second(shape)
    if op.kind == 'unary' then return nil end
    return make(shape, 2)
  end
  out[#out + 1] = { 'contiguous', make({ R, C }, 1), second({ R, C }) }
  out[#out + 1] = { 'transposed', make({ C, R }, 1):t(), second({ R, C }) }
  out[#out + 1] = { 'narrowed', make({ R, C + 5 }, 1):narrow(2, 3, C), second({ R, C }) }
  out[#out + 1] = { 'expanded', make({ 1, C }, 1):expand({ R, C }), second({ R, C }) }
  if op.kind == 'binary' then
    out[#out + 1] = { 'b row broadcast', make({ R, C }, 1), make({ C }, 2) }
    out[#out + 1] = { 'b column broadcast', make({ R, C }, 1), make({ R, 1 }, 2) }
    if op.class ~= 'act' then
      out[#out + 1] = { 'b a number', make({ R, C }, 1), (op.name == 'pow' and 2) or (op.class == 'int' and 3) or 1.5 }
    end
  end
  return out
end

-- The dtype of the reference computation: f64, or i64 for the INT class (bitwise: no floats).
function M.ref_dtype(op) return op.class == 'int' and 'i64' or 'f64' end

return M
