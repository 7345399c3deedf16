-- tests/lua/test_cpuperf.lua: the CPU fast paths of issue 30's performance work, through the Lua API
-- (kernels/cpu/cpu_vmath_rows_impl.h, cpu_vmath_fns_impl.h, cpu_reduce.c, cpu_norm.c): values
-- worked out by hand, the first-extremum / first-NaN rule of max and min (rows, columns, whole
-- tensors cut into chunks of 65536), f32 against the f64 path (the scalar formulas), and bitwise
-- the same results with 1 and 2 threads where the vector code hands lanes to the scalar formula.
local T = require 'testlib'
local v100 = require 'v100'
local F = require 'v100.nn.functional'

local nan, inf = 0 / 0, math.huge

local function with_threads(n, fn)
  local prev = v100.set_num_threads(n)
  local ok, a, b = pcall(fn)
  v100.set_num_threads(prev)
  if not ok then error(a, 0) end
  return a, b
end

local function neg_zero(v)
  if type(v) ~= 'number' then v = v:item() end
  return v == 0 and 1 / v < 0
end

T.test('max and min over each dim of a small f32 tensor: first extremum, first NaN (hand values)', function()
  local x = v100.tensor({ { 1, 5, nan }, { 3, 5, 2 }, { 3, 0, nan } }, { dtype = 'f32' })
  local v, i = x:max(1)
  T.allclose(v, { 3, 5, nan }, 0, 0, 'max over dim 1')
  T.eq(i:to('f64'):totable(), { 1, 0, 0 }, 'its 0-based rows: the first 3, the first 5, the first NaN')
  v, i = x:min(1)
  T.allclose(v, { 1, 0, nan }, 0, 0, 'min over dim 1')
  T.eq(i:to('f64'):totable(), { 0, 2, 0 })
  v, i = x:max(2)
  T.allclose(v, { nan, 5, nan }, 0, 0, 'max over dim 2')
  T.eq(i:to('f64'):totable(), { 2, 1, 2 })
  v, i = x:min(2)
  T.allclose(v, { nan, 2, nan }, 0, 0, 'min over dim 2')
  T.eq(i:to('f64'):totable(), { 2, 2, 2 })
end)

T.test('max and min of rows with ties in one vector lane and across lanes: the first position', function()
  local row = {}
  for k = 1, 70 do row[k] = 0 end
  -- 0-based 3, 19, 35, 67 share a lane at widths 16, 8 and 4; 5 is in another lane, after 3
  row[4], row[20], row[36], row[68], row[6] = 9, 9, 9, 9, 9
  row[41], row[9], row[57] = -4, -4, -4
  local x = v100.tensor({ row, row }, { dtype = 'f32' })
  local v, i = x:max(2)
  T.eq({ v[1]:item(), i[1]:item(), i[2]:item() }, { 9, 3, 3 })
  v, i = x:min(2)
  T.eq({ v[1]:item(), i[1]:item() }, { -4, 8 })
  v, i = x:t():contiguous():max(1) -- the same ties down columns
  T.eq({ v[1]:item(), i[1]:item() }, { 9, 3 })
  local y = v100.tensor({ { 2, 7, 7, 1, 7 } }, { dtype = 'f32' })
  v, i = y:max(2)
  T.eq(i[1]:item(), 1)
end)

T.test('sums and means over the last dim at lengths around the vector widths agree with f64', function()
  for _, n in ipairs { 1, 2, 15, 16, 17, 63, 64, 65, 1000, 70000 } do
    local x = v100.randn { 3, n }
    local want = x:to('f64'):sum(2)
    T.allclose(x:sum(2), want, 1e-6, 1e-5, 'sum over 2, length ' .. n)
    T.allclose(x:mean(2), want / n, 1e-6, 1e-6, 'mean over 2, length ' .. n)
    T.allclose(x:sum(1), x:to('f64'):sum(1), 1e-6, 1e-6, 'sum over 1, length ' .. n)
  end
end)

T.test('whole-tensor reductions over several chunks: thread-invariant, first extremum across chunks', function()
  local n = 3 * 65536 + 123
  local x = v100.randn { n }
  x[70000] = 50 -- ties in chunks 2 and 3 (1-based positions; 0-based 69999 and 150000)
  x[150001] = 50
  x[65537] = -50 -- the first element of chunk 2, tied with one in chunk 4
  x[n] = -50
  local s1 = with_threads(1, function() return x:sum():item() end)
  local s2 = with_threads(2, function() return x:sum():item() end)
  T.eq(s1, s2, 'the same sum with 1 and 2 threads')
  T.near(s1, x:to('f64'):sum():item(), 1e-4, 'against f64')
  for th = 1, 2 do
    with_threads(th, function()
      local v, i = x:max(1)
      T.eq({ v:item(), i:item() }, { 50, 69999 }, 'max: the first of the tie, ' .. th .. ' threads')
      v, i = x:min(1)
      T.eq({ v:item(), i:item() }, { -50, 65536 }, 'min: the first of the tie')
      T.near(x:mean():item(), s1 / n, 1e-6, 'mean')
    end)
  end
  x[100000] = nan
  x[190000] = nan
  local v, i = x:max(1)
  T.ok(v:item() ~= v:item(), 'a NaN wins the max')
  T.eq(i:item(), 99999, 'the first NaN')
  v, i = x:min(1)
  T.eq(i:item(), 99999, 'and the min')
  T.ok(x:sum():item() ~= x:sum():item(), 'the sum is NaN')
end)

T.test('layer norm of f32 rows: hand values, and forward and backward against f64', function()
  local x = v100.tensor({ { 1, 2, 3, 4 } }, { dtype = 'f32' })
  -- mean 2.5, biased variance 1.25, y = (x - 2.5) / sqrt(1.25 + 1e-5)
  local r = 1 / math.sqrt(1.25 + 1e-5)
  T.allclose(F.layer_norm(x, { 4 }), { { -1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r } }, 1e-6, 1e-7)
  for _, n in ipairs { 1, 7, 16, 33, 1024 } do
    local a = v100.randn { 5, n } * 3 + 1
    local w, b = v100.randn { n }, v100.randn { n }
    local g = v100.randn { 5, n }
    local outs = {}
    for _, dt in ipairs { 'f32', 'f64' } do
      -- fresh leaves (to() of the same dtype returns the tensor itself)
      local xa = a:to(dt):clone():requires_grad_(true)
      local wa, ba = w:to(dt):clone():requires_grad_(true), b:to(dt):clone():requires_grad_(true)
      local y = F.layer_norm(xa, { n }, wa, ba)
      y:backward(g:to(dt))
      outs[dt] = { y, xa.grad, wa.grad, ba.grad }
    end
    local names = { 'y', 'dx', 'dweight', 'dbias' }
    for k = 1, 4 do
      T.allclose(outs.f32[k], outs.f64[k], 2e-5, 2e-5, names[k] .. ', row length ' .. n)
    end
  end
end)

T.test('special functions of f32: hand values, signs of zero and the domain edges', function()
  local function f32(t) return v100.tensor(t, { dtype = 'f32' }) end
  T.allclose(f32({ 0.5, -2, 0 }):erf(), { 0.52049987781304654, -0.99532226501895273, 0 }, 1e-7, 0)
  T.allclose(f32({ 1e-10, 1, -20 }):expm1(), { 1e-10, 1.7182818284590452, -0.99999999793884642 }, 1e-7, 0)
  T.allclose(f32({ -0.5, 1e-10, -1, -2, inf }):log1p(), { -0.69314718055994531, 1e-10, -inf, nan, inf }, 1e-7, 0)
  T.allclose(f32({ 0.5, 100, -3 }):sin(), { 0.47942553860420301, -0.50636564110975879, -0.14112000805986722 }, 1e-7,
    1e-9)
  T.allclose(f32({ 0.5, 100, 1e6 }):cos(), { 0.87758256189037276, 0.86231887228768389, 0.93675212753314474 }, 1e-6,
    1e-9)
  T.allclose(f32({ 1, -1, 0 }):atan2(f32({ -1, -1, -1 })), { 3 * math.pi / 4, -3 * math.pi / 4, math.pi }, 1e-7, 0)
  -- remainder takes the divisor's sign (Python's %), a zero result the dividend's (as fmod)
  local rm = f32({ -7, 7, -4, 7.5 }):remainder(f32({ 3, -3, 2, -2.5 }))
  T.allclose(rm, { 2, -2, 0, 0 }, 0, 0)
  T.ok(neg_zero(rm[3]) and not neg_zero(rm[4]), 'remainder(-4, 2) is -0, remainder(7.5, -2.5) is +0')
  local e = f32 { 2.5, -0.5, -0.7, 1.5, -1.7, 0.3 }
  T.allclose(e:round(), { 2, -0, -1, 2, -2, 0 }, 0, 0, 'round: half to even')
  T.allclose(e:floor(), { 2, -1, -1, 1, -2, 0 }, 0, 0)
  T.allclose(e:ceil(), { 3, -0, -0, 2, -1, 1 }, 0, 0)
  T.allclose(e:trunc(), { 2, -0, -0, 1, -1, 0 }, 0, 0)
  T.ok(neg_zero(e:round()[2]) and neg_zero(e:ceil()[3]) and neg_zero(e:trunc()[2]), 'the signs of zero')
  T.allclose(f32({ 4, 0.25 }):rsqrt(), { 0.5, 2 }, 0, 0)
  T.allclose(f32({ -3, 0, 2, nan }):sign(), { -1, 0, 1, nan }, 0, 0)
end)

T.test('the vector paths of f32 agree with the f64 path, and give the same bits with 1 and 2 threads', function()
  local n = 100003 -- not a multiple of any vector width
  local x = v100.randn { n } * 4
  local y = v100.randn { n } * 2
  -- values the vector code hands to the scalar formula, lane by lane
  x[5], x[6], x[7], x[8], x[9] = 0, nan, inf, -inf, 1e30
  y[5], y[10], y[11] = 0, inf, 0
  local unary = { 'erf', 'expm1', 'sin', 'cos', 'sign', 'floor', 'ceil', 'round', 'trunc', 'reciprocal' }
  for _, op in ipairs(unary) do
    local a = with_threads(1, function() return x[op](x) end)
    local b = with_threads(2, function() return x[op](x) end)
    T.alleq(a, b, op .. ': bitwise the same with 1 and 2 threads')
    T.allclose(a, x:to('f64')[op](x:to('f64')):to('f32'), 3e-7, 1e-30, op .. ' against f64')
  end
  local p = x:abs() + 0.5
  for _, op in ipairs { 'log1p', 'sqrt', 'rsqrt' } do
    T.alleq(p[op](p), p:to('f64')[op](p:to('f64')):to('f32'), op .. ': f64 rounded to f32 (correctly rounded)')
  end
  for _, op in ipairs { 'atan2', 'remainder' } do
    local a = with_threads(1, function() return x[op](x, y) end)
    local b = with_threads(2, function() return x[op](x, y) end)
    T.alleq(a, b, op .. ': bitwise the same with 1 and 2 threads')
    T.allclose(a, x:to('f64')[op](x:to('f64'), y:to('f64')):to('f32'), 3e-7, 1e-30, op .. ' against f64')
  end
end)

T.run()
