-- Elementwise ops on the CPU against direct computation in Lua (f64).
local T = require 'testlib'
local v100 = require 'v100'

local FLOATS = { 'f64', 'f32', 'f16', 'bf16' }

-- unary ops: name -> {reference, lo, hi} (input range keeps the op defined and away from 0)
local UNARY = {
  neg = { function(x) return -x end },
  abs = { function(x) return math.abs(x) end },
  square = { function(x) return x * x end },
  sign = { T.ref_sign },
  relu = { T.ref_relu },
  exp = { math.exp, -4, 4 },
  log = { math.log, 0.05, 20 },
  sqrt = { math.sqrt, 0.01, 50 },
  rsqrt = { function(x) return 1 / math.sqrt(x) end, 0.01, 50 },
  tanh = { T.ref_tanh, -4, 4 },
  sigmoid = { T.ref_sigmoid, -8, 8 },
  reciprocal = { function(x) return 1 / x end, 0.2, 5 },
  sin = { math.sin, -3, 3 },
  cos = { math.cos, -3, 3 },
  floor = { math.floor, -10, 10 },
  ceil = { math.ceil, -10, 10 },
  round = { T.ref_round, -10, 10 },
}
local UNARY_NAMES = {}
for k in pairs(UNARY) do UNARY_NAMES[#UNARY_NAMES + 1] = k end
table.sort(UNARY_NAMES)

local function tol_for(dt, name)
  local t = T.tol(dt)
  if dt == 'f32' then t = 2e-6 end
  return t
end

for _, name in ipairs(UNARY_NAMES) do
  local spec = UNARY[name]
  local f, lo, hi = spec[1], spec[2] or -3, spec[3] or 3
  for _, dt in ipairs(FLOATS) do
    T.test(string.format('unary %s %s (layouts)', name, dt), function()
      for _, v in ipairs(T.variants({ 7, 5 }, dt, lo, hi)) do
        local r = v.t[name](v.t)
        T.eq(r.dtype, dt, name .. ' dtype')
        T.eq(r.shape, { 7, 5 }, name .. ' shape')
        local ref = T.ref_unary(v.ref, f)
        local tol = tol_for(dt, name)
        T.allclose(r, ref, tol, tol, name .. ' ' .. dt .. ' ' .. v.name)
      end
    end)
  end
  T.test(string.format('unary %s in place (%s_)', name, name), function()
    local a, ar = T.make({ 4, 6 }, 'f64', lo, hi)
    local r = a[name .. '_'](a)
    T.ok(rawequal(r, a), name .. '_ returns its target')
    T.allclose(a, T.ref_unary(ar, f), 1e-12, 1e-12, name .. '_')
    -- in place into a non-contiguous view writes through to the base
    local b, br = T.make({ 5, 4 }, 'f64', lo, hi)
    local bt = b:t()
    bt[name .. '_'](bt)
    T.allclose(b, T.ref_unary(br, f), 1e-12, 1e-12, name .. '_ on a transposed view')
  end)
end

T.test('unary 0-dim and empty', function()
  local x = v100.tensor(0.7, { dtype = 'f64' })
  local r = x:exp()
  T.eq(r.shape, {})
  T.near(r:item(), math.exp(0.7), 1e-12)
  local e = v100.zeros({ 0, 3 }, { dtype = 'f32' })
  local re = e:sqrt()
  T.eq(re.shape, { 0, 3 })
  T.eq(re:numel(), 0)
end)

T.test('unary on integer tensors keeps the dtype (neg abs square sign relu)', function()
  for _, dt in ipairs({ 'i32', 'i64' }) do
    local a, ar = T.make({ 3, 5 }, dt, -40, 40)
    for _, name in ipairs({ 'neg', 'abs', 'square', 'sign', 'relu' }) do
      local r = a[name](a)
      T.eq(r.dtype, dt, name .. ' dtype on ' .. dt)
      T.alleq(r, T.ref_unary(ar, UNARY[name][1]), name .. ' ' .. dt)
    end
  end
end)

T.test('unary float ops on integer tensors give f32 (as in PyTorch)', function()
  local a, ar = T.make({ 4, 3 }, 'i32', 1, 9)
  local r = a:sqrt()
  T.eq(r.dtype, 'f32')
  T.allclose(r, T.ref_unary(ar, math.sqrt), 1e-6, 1e-6)
  local e = a:exp()
  T.eq(e.dtype, 'f32')
  T.allclose(e, T.ref_unary(ar, math.exp), 1e-6, 1e-6)
end)

T.test('gelu erf and tanh forms', function()
  for _, dt in ipairs(FLOATS) do
    for _, v in ipairs(T.variants({ 6, 9 }, dt, -5, 5)) do
      local tol = tol_for(dt)
      T.allclose(v.t:gelu(), T.ref_unary(v.ref, T.ref_gelu), tol, tol, 'gelu ' .. dt .. ' ' .. v.name)
      T.allclose(v.t:gelu({ approximate = 'tanh' }), T.ref_unary(v.ref, T.ref_gelu_tanh), tol, tol,
        'gelu tanh ' .. dt .. ' ' .. v.name)
    end
  end
  -- the two forms differ (by up to ~1e-3 near |x| ~ 2): make sure the option is honoured
  local x = v100.tensor({ -2.1, -1.5, 1.7, 2.3 }, { dtype = 'f64' })
  T.allclose(x:gelu({ approximate = 'tanh' }), T.ref_unary(x:totable(), T.ref_gelu_tanh), 1e-12, 1e-12)
  T.allclose(x:gelu(), T.ref_unary(x:totable(), T.ref_gelu), 1e-12, 1e-12)
  local d = (x:gelu() - x:gelu({ approximate = 'tanh' })):abs():max():item()
  T.ok(d > 1e-5, 'gelu exact and tanh forms must differ, max diff ' .. d)
  -- in place
  local y, yr = T.make({ 3, 4 }, 'f64', -3, 3)
  y:gelu_()
  T.allclose(y, T.ref_unary(yr, T.ref_gelu), 1e-12, 1e-12, 'gelu_')
end)

T.test('clamp with both, lower only, upper only', function()
  for _, dt in ipairs(FLOATS) do
    for _, v in ipairs(T.variants({ 5, 8 }, dt, -3, 3)) do
      local tol = tol_for(dt)
      T.allclose(v.t:clamp(-0.5, 0.75), T.ref_unary(v.ref, function(x) return T.ref_clamp(x, -0.5, 0.75) end),
        tol, tol, 'clamp ' .. dt .. ' ' .. v.name)
      T.allclose(v.t:clamp(0.25), T.ref_unary(v.ref, function(x) return T.ref_clamp(x, 0.25, nil) end),
        tol, tol, 'clamp lo ' .. dt)
      T.allclose(v.t:clamp(nil, -0.25), T.ref_unary(v.ref, function(x) return T.ref_clamp(x, nil, -0.25) end),
        tol, tol, 'clamp hi ' .. dt)
    end
  end
  local a, ar = T.make({ 4, 4 }, 'f64', -2, 2)
  local r = a:clamp_(-1, 1)
  T.ok(rawequal(r, a), 'clamp_ returns its target')
  T.allclose(a, T.ref_unary(ar, function(x) return T.ref_clamp(x, -1, 1) end), 1e-12, 0)
  local ia, iar = T.make({ 4, 4 }, 'i32', -20, 20)
  local ir = ia:clamp(-5, 7)
  T.eq(ir.dtype, 'i32')
  T.alleq(ir, T.ref_unary(iar, function(x) return T.ref_clamp(x, -5, 7) end))
end)

-- ---- binary ----
local BINARY = {
  add = function(x, y) return x + y end,
  sub = function(x, y) return x - y end,
  mul = function(x, y) return x * y end,
  div = function(x, y) return x / y end,
  maximum = function(x, y) return math.max(x, y) end,
  minimum = function(x, y) return math.min(x, y) end,
}
local BINARY_NAMES = { 'add', 'sub', 'mul', 'div', 'maximum', 'minimum' }

local SHAPE_PAIRS = {
  { { 3, 4 }, { 3, 4 } },
  { { 3, 4 }, { 4 } },
  { { 4 }, { 3, 4 } },
  { { 3, 1 }, { 1, 5 } },
  { { 2, 1, 4 }, { 3, 1 } },
  { { 2, 3, 1, 4 }, { 1, 5, 4 } },
  { {}, { 3, 4 } },
  { { 3, 4 }, {} },
  { {}, {} },
  { { 1 }, { 2, 3 } },
  { { 0, 4 }, { 4 } },
  { { 2, 0 }, { 2, 1 } },
}

local function sstr(s) return T.shape_str(s) end

for _, name in ipairs(BINARY_NAMES) do
  local f = BINARY[name]
  T.test('binary ' .. name .. ' f64 broadcasting shape pairs', function()
    for _, pr in ipairs(SHAPE_PAIRS) do
      local a, ar = T.make(pr[1], 'f64', 0.5, 2)
      local b, br = T.make(pr[2], 'f64', 0.5, 2)
      local r = a[name](a, b)
      local ref = T.ref_binary(ar, br, f)
      T.eq(r.shape, T.broadcast_shape(pr[1], pr[2]), name .. ' shape ' .. sstr(pr[1]) .. ' & ' .. sstr(pr[2]))
      T.eq(r.dtype, 'f64')
      T.allclose(r, ref, 1e-12, 1e-300, name .. ' ' .. sstr(pr[1]) .. ' & ' .. sstr(pr[2]))
    end
  end)
  T.test('binary ' .. name .. ' dtypes and layouts', function()
    for _, dt in ipairs(FLOATS) do
      local tol = tol_for(dt)
      for _, v in ipairs(T.variants({ 6, 5 }, dt, -2, 2)) do
        local b, br = T.make({ 6, 5 }, dt, 0.5, 2)
        if math.random() < 0.5 then b = b:neg(); br = T.map(br, function(x) return -x end) end
        T.allclose(v.t[name](v.t, b), T.ref_binary(v.ref, br, f), tol, tol, name .. ' ' .. dt .. ' ' .. v.name .. ' lhs')
        T.allclose(b[name](b, v.t), T.ref_binary(br, v.ref, f), tol, tol, name .. ' ' .. dt .. ' ' .. v.name .. ' rhs')
      end
    end
  end)
  T.test('binary ' .. name .. ' with a number on either side', function()
    local a, ar = T.make({ 3, 4 }, 'f64', 0.5, 2)
    local s = 1.375
    T.allclose(a[name](a, s), T.ref_binary(ar, s, f), 1e-12, 0, name .. '(t, s)')
    -- number on the left through the operators
    if name == 'add' then T.allclose(s + a, T.ref_binary(s, ar, f), 1e-12, 0, 's + t') end
    if name == 'sub' then T.allclose(s - a, T.ref_binary(s, ar, f), 1e-12, 0, 's - t') end
    if name == 'mul' then T.allclose(s * a, T.ref_binary(s, ar, f), 1e-12, 0, 's * t') end
    if name == 'div' then T.allclose(s / a, T.ref_binary(s, ar, f), 1e-12, 0, 's / t') end
    -- a number does not promote a lower-precision tensor
    local h = a:half()
    T.eq(h[name](h, s).dtype, 'f16', name .. ' f16 with a number stays f16')
  end)
  T.test('binary ' .. name .. '_ in place (broadcast rhs, views)', function()
    local a, ar = T.make({ 4, 5 }, 'f64', 0.5, 2)
    local b, br = T.make({ 5 }, 'f64', 0.5, 2)
    local r = a[name .. '_'](a, b)
    T.ok(rawequal(r, a), name .. '_ returns its target')
    T.allclose(a, T.ref_binary(ar, br, f), 1e-12, 0, name .. '_ broadcast')
    local c, cr = T.make({ 4, 5 }, 'f64', 0.5, 2)
    c[name .. '_'](c, 0.625)
    T.allclose(c, T.ref_binary(cr, 0.625, f), 1e-12, 0, name .. '_ number')
    -- into a narrowed view: only the view changes
    local d, dr = T.make({ 4, 6 }, 'f64', 0.5, 2)
    local dv = d:narrow(2, 2, 3)
    local e, er = T.make({ 4, 3 }, 'f64', 0.5, 2)
    dv[name .. '_'](dv, e)
    local ref = T.map(dr, function(x) return x end)
    for i = 1, 4 do for j = 2, 4 do ref[i][j] = f(dr[i][j], er[i][j - 1]) end end
    T.allclose(d, ref, 1e-12, 0, name .. '_ into a narrowed view')
  end)
end

T.test('add/sub with alpha', function()
  local a, ar = T.make({ 3, 4 }, 'f64')
  local b, br = T.make({ 4 }, 'f64')
  T.allclose(a:add(b, 2.5), T.ref_binary(ar, br, function(x, y) return x + 2.5 * y end), 1e-12, 1e-15)
  T.allclose(a:sub(b, -0.75), T.ref_binary(ar, br, function(x, y) return x + 0.75 * y end), 1e-12, 1e-15)
  a:add_(b, 3)
  T.allclose(a, T.ref_binary(ar, br, function(x, y) return x + 3 * y end), 1e-12, 1e-15, 'add_ alpha')
end)

T.test('pow: tensor^tensor, tensor^number, number^tensor, operator', function()
  for _, dt in ipairs(FLOATS) do
    local tol = tol_for(dt) * 4
    local a, ar = T.make({ 4, 5 }, dt, 0.2, 3)
    local b, br = T.make({ 5 }, dt, -2, 2)
    T.allclose(a:pow(b), T.ref_binary(ar, br, function(x, y) return x ^ y end), tol, tol, 'pow ' .. dt)
    for _, e in ipairs({ 2, 0.5, 3, -1, -2.5 }) do
      T.allclose(a:pow(e), T.ref_binary(ar, e, function(x, y) return x ^ y end), tol, tol, 'pow number ' .. e .. ' ' .. dt)
    end
    T.allclose(a ^ 2, T.ref_unary(ar, function(x) return x * x end), tol, tol, 'a ^ 2 ' .. dt)
    T.allclose(1.5 ^ b, T.ref_unary(br, function(y) return 1.5 ^ y end), tol, tol, '1.5 ^ b ' .. dt)
  end
  local i, ir = T.make({ 3, 3 }, 'i32', -9, 9)
  local r = i:pow(2)
  T.eq(r.dtype, 'i32', 'i32 ^ 2 stays i32')
  T.alleq(r, T.ref_unary(ir, function(x) return x * x end))
  local p = v100.tensor({ 1, 2, 3 }, { dtype = 'f64' })
  p:pow_(3)
  T.allclose(p, { 1, 8, 27 }, 1e-15, 0, 'pow_')
end)

T.test('operators + - * / ^ unary minus', function()
  local a, ar = T.make({ 2, 3, 4 }, 'f64', 0.5, 2)
  local b, br = T.make({ 3, 1 }, 'f64', 0.5, 2)
  T.allclose(a + b, T.ref_binary(ar, br, BINARY.add), 1e-12, 0)
  T.allclose(a - b, T.ref_binary(ar, br, BINARY.sub), 1e-12, 1e-15)
  T.allclose(a * b, T.ref_binary(ar, br, BINARY.mul), 1e-12, 0)
  T.allclose(a / b, T.ref_binary(ar, br, BINARY.div), 1e-12, 0)
  T.allclose(a ^ b, T.ref_binary(ar, br, function(x, y) return x ^ y end), 1e-12, 0)
  T.allclose(-a, T.ref_unary(ar, function(x) return -x end), 0, 0)
  T.allclose(a + 2, T.ref_binary(ar, 2, BINARY.add), 1e-12, 0)
  T.allclose(3 - a, T.ref_binary(3, ar, BINARY.sub), 1e-12, 1e-15)
  T.allclose(a * 0.5, T.ref_binary(ar, 0.5, BINARY.mul), 1e-12, 0)
  T.allclose(2 / a, T.ref_binary(2, ar, BINARY.div), 1e-12, 0)
end)

T.test('integer arithmetic stays integer; division gives f32', function()
  for _, dt in ipairs({ 'i32', 'i64' }) do
    local a, ar = T.make({ 4, 5 }, dt, -100, 100)
    local b, br = T.make({ 5 }, dt, -9, 9)
    for _, name in ipairs({ 'add', 'sub', 'mul', 'maximum', 'minimum' }) do
      local r = a[name](a, b)
      T.eq(r.dtype, dt, name .. ' ' .. dt)
      T.alleq(r, T.ref_binary(ar, br, BINARY[name]), name .. ' ' .. dt)
    end
    local q = a:div(b)
    T.eq(q.dtype, 'f32', dt .. ' / ' .. dt .. ' is f32')
    T.allclose(q, T.ref_binary(ar, br, BINARY.div), 1e-6, 1e-7, 'int true division')
    local s = a + 3
    T.eq(s.dtype, dt, dt .. ' + integer number stays ' .. dt)
    T.alleq(s, T.ref_binary(ar, 3, BINARY.add))
    local h = a * 2.5
    T.eq(h.dtype, 'f32', dt .. ' * 2.5 is f32')
    T.allclose(h, T.ref_binary(ar, 2.5, BINARY.mul), 1e-6, 0)
  end
end)

T.test('dtype promotion', function()
  local cases = {
    { 'f16', 'bf16', 'f32' }, { 'bf16', 'f16', 'f32' },
    { 'f16', 'f32', 'f32' }, { 'bf16', 'f32', 'f32' }, { 'f32', 'f64', 'f64' }, { 'f16', 'f64', 'f64' },
    { 'i32', 'f16', 'f16' }, { 'i64', 'bf16', 'bf16' }, { 'i64', 'f32', 'f32' }, { 'i32', 'f64', 'f64' },
    { 'u8', 'f32', 'f32' },
    { 'i32', 'i64', 'i64' }, { 'u8', 'i32', 'i32' }, { 'u8', 'i64', 'i64' },
    { 'bool', 'i32', 'i32' }, { 'bool', 'f32', 'f32' }, { 'bool', 'f16', 'f16' }, { 'bool', 'u8', 'u8' },
  }
  for _, c in ipairs(cases) do
    local a, ar = T.make({ 3, 4 }, c[1], 1, 9)
    local b, br = T.make({ 4 }, c[2], 1, 9)
    local tol = math.max(T.tol(c[3]), 1e-12)
    for _, name in ipairs({ 'add', 'mul' }) do
      local r = a[name](a, b)
      T.eq(r.dtype, c[3], name .. ' ' .. c[1] .. ' ' .. c[2])
      T.allclose(r, T.ref_binary(ar, br, BINARY[name]), tol, tol, name .. ' ' .. c[1] .. ' ' .. c[2])
      local r2 = b[name](b, a)
      T.eq(r2.dtype, c[3], name .. ' ' .. c[2] .. ' ' .. c[1])
    end
  end
end)

-- ---- comparisons and logic ----
local CMP = {
  eq = function(x, y) return x == y end, ne = function(x, y) return x ~= y end,
  lt = function(x, y) return x < y end, le = function(x, y) return x <= y end,
  gt = function(x, y) return x > y end, ge = function(x, y) return x >= y end,
}
local CMP_NAMES = { 'eq', 'ne', 'lt', 'le', 'gt', 'ge' }

T.test('comparisons give bool, with broadcasting, numbers and mixed dtypes', function()
  for _, dts in ipairs({ { 'f64', 'f64' }, { 'f32', 'f32' }, { 'f16', 'f16' }, { 'bf16', 'bf16' }, { 'i32', 'i32' },
    { 'i64', 'f32' }, { 'f16', 'bf16' }, { 'u8', 'i32' } }) do
    for _, pr in ipairs({ { { 4, 5 }, { 4, 5 } }, { { 4, 5 }, { 5 } }, { { 3, 1 }, { 1, 6 } }, { {}, { 3 } } }) do
      -- small integers so that equality happens often
      local a, ar = T.make_from(T.rand_int_table(pr[1], 1, 4), dts[1])
      local b, br = T.make_from(T.rand_int_table(pr[2], 1, 4), dts[2])
      for _, name in ipairs(CMP_NAMES) do
        local r = a[name](a, b)
        T.eq(r.dtype, 'bool', name .. ' dtype')
        T.alleq(r, T.ref_binary(ar, br, CMP[name]), name .. ' ' .. dts[1] .. ' ' .. dts[2] .. ' ' .. sstr(pr[1]))
        local rs = a[name](a, 2)
        T.eq(rs.dtype, 'bool')
        T.alleq(rs, T.ref_binary(ar, 2, CMP[name]), name .. ' with number')
      end
    end
  end
  -- non-contiguous
  for _, v in ipairs(T.variants({ 5, 4 }, 'i32', 1, 4)) do
    local b, br = T.make({ 5, 4 }, 'i32', 1, 4)
    T.alleq(v.t:lt(b), T.ref_binary(v.ref, br, CMP.lt), 'lt ' .. v.name)
  end
end)

T.test('comparisons in place store 0/1 in the target dtype', function()
  local a, ar = T.make({ 3, 4 }, 'f32', -1, 1)
  local b, br = T.make({ 4 }, 'f32', -1, 1)
  local r = a:gt_(b)
  T.ok(rawequal(r, a))
  T.eq(a.dtype, 'f32')
  T.alleq(a, T.ref_binary(ar, br, function(x, y) return x > y and 1 or 0 end))
end)

T.test('logical_and / logical_or / logical_not', function()
  local a, ar = T.make({ 4, 6 }, 'bool')
  local b, br = T.make({ 6 }, 'bool')
  local r = a:logical_and(b)
  T.eq(r.dtype, 'bool')
  T.alleq(r, T.ref_binary(ar, br, function(x, y) return (x ~= 0) and (y ~= 0) end))
  T.alleq(a:logical_or(b), T.ref_binary(ar, br, function(x, y) return (x ~= 0) or (y ~= 0) end))
  local n = a:logical_not()
  T.eq(n.dtype, 'bool')
  T.alleq(n, T.ref_unary(ar, function(x) return x == 0 end))
  -- on numbers: nonzero is true
  local f = v100.tensor({ { 0, 1.5, -2 }, { 0, 0, 3 } }, { dtype = 'f32' })
  local g = v100.tensor({ 1, 0, -1 }, { dtype = 'i32' })
  T.alleq(f:logical_and(g), { { false, false, true }, { false, false, true } })
  T.alleq(f:logical_or(g), { { true, true, true }, { true, false, true } })
  T.alleq(f:logical_not(), { { true, false, false }, { true, true, false } })
end)

T.test('where with tensors, numbers and broadcasting', function()
  local c, cr = T.make({ 4, 1, 5 }, 'bool')
  local a, ar = T.make({ 3, 5 }, 'f64')
  local b, br = T.make({ 4, 3, 1 }, 'f64')
  local pick = function(k, x, y) if k ~= 0 then return x end return y end
  T.allclose(v100.where(c, a, b), T.ref_nary(pick, cr, ar, br), 0, 0, 'where tensors')
  T.allclose(v100.where(c, a, -7.5), T.ref_nary(pick, cr, ar, -7.5), 0, 0, 'where number b')
  T.allclose(v100.where(c, 2.25, b), T.ref_nary(pick, cr, 2.25, br), 0, 0, 'where number a')
  local h, hr = T.make({ 3, 5 }, 'f16')
  local w = v100.where(c, h, a:float())
  T.eq(w.dtype, 'f32', 'where promotes f16 and f32')
  -- a comparison result as condition, transposed operands
  local x, xr = T.make({ 5, 3 }, 'f32')
  local y, yr = T.make({ 3, 5 }, 'f32')
  local r = v100.where(x:t():gt(y), x:t(), y)
  T.allclose(r, T.ref_binary(T.ref_transpose(xr, 1, 2), yr, math.max), 0, 0, 'where as maximum')
end)

T.test('masked_fill and masked_fill_', function()
  for _, dt in ipairs({ 'f64', 'f32', 'f16', 'bf16', 'i32', 'i64' }) do
    local a, ar = T.make({ 4, 5 }, dt, 1, 9)
    local m, mr = T.make({ 5 }, 'bool')
    local r = a:masked_fill(m, -3)
    T.eq(r.dtype, dt)
    T.alleq(r, T.ref_binary(ar, mr, function(x, k) if k ~= 0 then return -3 end return x end), 'masked_fill ' .. dt)
    T.alleq(a, ar, 'masked_fill leaves its input unchanged')
    local r2 = a:masked_fill_(m, 5)
    T.ok(rawequal(r2, a))
    T.alleq(a, T.ref_binary(ar, mr, function(x, k) if k ~= 0 then return 5 end return x end), 'masked_fill_ ' .. dt)
  end
  -- non-contiguous target
  local b, br = T.make({ 6, 4 }, 'f64')
  local bt = b:t()
  local m, mr = T.make({ 4, 6 }, 'bool')
  bt:masked_fill_(m, 0.5)
  T.allclose(b, T.ref_transpose(T.ref_binary(T.ref_transpose(br, 1, 2), mr, function(x, k) if k ~= 0 then return 0.5 end return x end), 1, 2), 0, 0)
end)

T.test('bool arithmetic', function()
  local a, ar = T.make({ 3, 4 }, 'bool')
  local b, br = T.make({ 3, 4 }, 'i32', -9, 9)
  local r = a + b
  T.eq(r.dtype, 'i32')
  T.alleq(r, T.ref_binary(ar, br, BINARY.add))
  local f, fr = T.make({ 4 }, 'f32')
  local m = a * f
  T.eq(m.dtype, 'f32')
  T.allclose(m, T.ref_binary(ar, fr, BINARY.mul), 0, 0)
  -- a mask times a number
  local s = a:float() * 2.5
  T.allclose(s, T.ref_unary(ar, function(x) return x * 2.5 end), 0, 0)
end)

T.run()
