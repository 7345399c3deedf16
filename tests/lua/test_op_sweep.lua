-- tests/lua/test_op_sweep.lua: every op of the op list (v100.core.ops()) on the CPU against a
-- float64 reference: the same inputs converted to f64, the op run there, the result converted to
-- the op's result dtype; compared within that dtype's rounding (f32 results are computed in double
-- and rounded once, the SIMD paths of exp, log, tanh, sigmoid and the GELUs within a few ulp).
-- Integer results exactly. The layouts, numbers and in-place forms: tests/lua/op_sweep.lua.
local T = require 'testlib'
local v100 = require 'v100'
local S = require 'op_sweep'

v100.manual_seed(7000 + T.seed % 100000)
local RTOL = { f32 = 4e-6, f16 = 2e-3, bf16 = 1.6e-2, f64 = 1e-13 }
local ops = {} -- the elementwise ops (the tensor ops have their own sweep: tensor_sweep.lua)
for _, op in ipairs(require('v100.core').ops()) do if op.kind ~= 'tensor' then ops[#ops + 1] = op end end
T.ok(#ops >= 40, 'the op list: ' .. #ops .. ' ops')

local function compare(got, want, dt, msg)
  T.eq(got.shape, want.shape, msg .. ' shape')
  if got.dtype == 'bool' or got.dtype:sub(1, 1) == 'i' then
    T.eq(got.dtype, want.dtype, msg .. ' dtype')
    T.alleq(got, want, msg)
  else
    local rt = RTOL[got.dtype] or RTOL[dt]
    T.allclose(got:to('f64'), want:to(got.dtype):to('f64'), rt, rt, msg)
  end
end

local n = 0
for _, op in ipairs(ops) do
  T.test(op.kind .. ' ' .. op.name .. ' (' .. op.class .. ') against f64', function()
    for _, dt in ipairs(S.dtypes(op)) do
      local make = S.maker(op, dt)
      for _, c in ipairs(S.cases(op, 37, 53, make)) do
        local label, a, b = c[1], c[2], c[3]
        local got = S.call(op, a, b)
        local rd = S.ref_dtype(op)
        local bf = type(b) == 'userdata' and b:to(rd) or b
        local want = S.call(op, a:to(rd), bf)
        -- the reference's result in the dtype the op gives dt
        if want.dtype ~= got.dtype then want = want:to(got.dtype) end
        compare(got, want, dt, string.format('%s %s %s', op.name, dt, label))
        n = n + 1
        if op.method and label ~= 'expanded' and dt:sub(1, 1) == 'f' and got.dtype == dt then
          local x = a:clone()
          S.call(op, x, b, true)
          T.alleq(x, got, op.name .. '_ ' .. dt .. ' ' .. label .. ': in place equals the result')
        end
      end
    end
  end)
end
-- The INT class (bitwise) refuses floats, naming the op; the integer divisions refuse a zero
-- integer divisor (PyTorch raises ZeroDivisionError), tensor or number, either side.
for _, op in ipairs(ops) do
  if op.class == 'int' then
    T.test(op.name .. ' refuses floats', function()
      local a = v100.rand({ 3, 4 })
      local ok, err = pcall(S.call, op, a, op.kind == 'binary' and a or nil)
      T.ok(not ok and tostring(err):find(op.name, 1, true) and tostring(err):find('f32', 1, true), tostring(err))
      if op.kind == 'binary' then
        ok, err = pcall(S.call, op, v100.tensor({ 1, 2 }, { dtype = 'i32' }), 1.5)
        T.ok(not ok and tostring(err):find(op.name, 1, true), tostring(err))
      end
    end)
  end
  if S.INT_DIVISION[op.name] then
    T.test(op.name .. ': integer division by zero', function()
      local a = v100.tensor({ 5, -7, 3 }, { dtype = 'i64' })
      local z = v100.tensor({ 1, 0, 2 }, { dtype = 'i32' })
      for _, f in ipairs({ function() return a[op.name](a, z) end, function() return a[op.name](a, 0) end,
        function() local c = a:clone() return c[op.name .. '_'](c, z) end,
        function() return 6 % z end }) do
        local ok, err = pcall(f)
        T.ok(not ok and tostring(err):find('division by zero', 1, true), tostring(err))
      end
      -- floats divide by zero as IEEE (inf, nan), as PyTorch
      local y = a:to('f32')[op.name](a:to('f32'), 0)
      T.ok(y:isfinite():logical_not():to('f64'):sum():item() > 0, op.name .. ' by a float zero')
    end)
  end
end

-- Every differentiable op's backward rule (runtime/autograd/ops_ew.c) against finite differences
-- in f64, on inputs inside its domain and away from its kinks (relu, abs, sign at 0; floor, ceil,
-- round between integers: their gradient is 0 almost everywhere).
local KINKS = { abs = true, relu = true, sign = true, clamp = true, floor = true, ceil = true, round = true,
  maximum = true, minimum = true, trunc = true, remainder = true, fmod = true, atan2 = true, hypot = true }
for _, op in ipairs(ops) do
  if op.grad then
    T.test('gradcheck ' .. op.kind .. ' ' .. op.name, function()
      local function draw(shape)
        local x = S.input(shape, 'f64', op.lo, op.hi)
        if KINKS[op.name] then x = x + v100.where(x:abs():lt(0.1), 0.3, 0) end -- off the kinks
        if op.name == 'floor' or op.name == 'ceil' or op.name == 'round' or op.name == 'trunc' then x = x:floor() + 0.25 end
        return x:requires_grad_()
      end
      local a = draw({ 3, 4 })
      local ins = { a }
      if op.kind == 'binary' then ins[2] = draw({ 3, 4 }) end
      if op.name == 'maximum' or op.name == 'minimum' then ins[2] = (ins[2]:detach() + 1.5):requires_grad_() end
      T.ok(v100.autograd.gradcheck(function(x, y) return S.call(op, x, y) end, ins), op.name .. ': gradcheck')
    end)
  end
end

T.test('the sweep ran', function() T.ok(n > 500, n .. ' comparisons') print('      ' .. n .. ' comparisons against f64 over ' .. #ops .. ' ops') end)
T.run()
