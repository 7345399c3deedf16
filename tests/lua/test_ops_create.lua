-- Creation ops, random numbers and fills on the CPU.
local T = require 'testlib'
local v100 = require 'v100'

local function stats(t)
  local flat = T.flatten(t:totable())
  local n = #flat
  local s, s2, lo, hi = 0, 0, math.huge, -math.huge
  for i = 1, n do
    local x = flat[i]
    s = s + x
    lo = math.min(lo, x)
    hi = math.max(hi, x)
  end
  local m = s / n
  for i = 1, n do s2 = s2 + (flat[i] - m) ^ 2 end
  return m, math.sqrt(s2 / (n - 1)), lo, hi, flat
end

T.test('tensor from nested tables, numbers and booleans', function()
  local tbl = T.rand_table({ 2, 3, 4 })
  local t = v100.tensor(tbl, { dtype = 'f64' })
  T.eq(t.shape, { 2, 3, 4 })
  T.eq(t.dtype, 'f64')
  T.eq(t.device, 'cpu')
  T.alleq(t, tbl, 'f64 values exact')
  local f = v100.tensor(tbl)
  T.eq(f.dtype, 'f32', 'default dtype f32')
  T.alleq(f, T.map(tbl, T.to_f32), 'f32 rounds to nearest')
  T.alleq(v100.tensor(tbl, { dtype = 'half' }), T.map(tbl, T.to_f16), 'alias half')
  T.eq(v100.tensor(tbl, { dtype = 'bfloat16' }).dtype, 'bf16')
  T.eq(v100.tensor(tbl, { dtype = 'double' }).dtype, 'f64')
  T.eq(v100.tensor(tbl, { dtype = 'float' }).dtype, 'f32')
  local it = T.rand_int_table({ 3, 2 }, -2 ^ 40, 2 ^ 40)
  local l = v100.tensor(it, { dtype = 'long' })
  T.eq(l.dtype, 'i64')
  T.alleq(l, it, 'i64 values exact beyond 2^32')
  T.eq(v100.tensor({ 1, 2 }, { dtype = 'int' }).dtype, 'i32')
  T.eq(v100.tensor({ 1, 2 }, { dtype = 'byte' }).dtype, 'u8')
  local b = v100.tensor({ { true, false }, { false, true } })
  T.eq(b.dtype, 'bool', 'booleans give bool')
  T.alleq(b, { { true, false }, { false, true } })
  local s = v100.tensor(1.75)
  T.eq(s.shape, {}, 'a number gives a 0-dim tensor')
  T.eq(s.ndim, 0)
  T.eq(s:numel(), 1)
  T.eq(s:item(), 1.75)
  T.eq(v100.tensor({ 4.5 }).shape, { 1 })
end)

T.test('empty, zeros, ones, full (shapes incl. 0-dim and empty)', function()
  for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16', 'i32', 'i64', 'u8', 'bool' }) do
    for _, shape in ipairs({ { 2, 3 }, {}, { 0, 4 }, { 5 }, { 1, 2, 1, 3 } }) do
      local z = v100.zeros(shape, { dtype = dt })
      T.eq(z.shape, shape)
      T.eq(z.dtype, dt)
      local zero = dt == 'bool' and false or 0
      local one = dt == 'bool' and true or 1
      T.alleq(z, { shape = shape, data = T.flatten(T.ref_full(shape, zero)) }, 'zeros ' .. dt)
      T.alleq(v100.ones(shape, { dtype = dt }), { shape = shape, data = T.flatten(T.ref_full(shape, one)) }, 'ones ' .. dt)
      local e = v100.empty(shape, { dtype = dt })
      T.eq(e.shape, shape)
      T.eq(e.dtype, dt)
    end
  end
  local v = T.rand_table({}, -5, 5)
  for _, dt in ipairs({ 'f64', 'f32', 'f16', 'bf16' }) do
    local f = v100.full({ 3, 2 }, v, { dtype = dt })
    T.alleq(f, T.ref_full({ 3, 2 }, T.round_dtype(v, dt)), 'full ' .. dt)
  end
  T.alleq(v100.full({ 2 }, -7, { dtype = 'i32' }), { -7, -7 })
  T.eq(v100.full({ 2, 2 }, 1.5).dtype, 'f32', 'full default dtype f32')
end)

T.test('arange', function()
  local a = v100.arange(5)
  T.eq(a.dtype, 'i64', 'integral arguments give i64')
  T.alleq(a, { 0, 1, 2, 3, 4 })
  T.alleq(v100.arange(2, 7), { 2, 3, 4, 5, 6 })
  T.alleq(v100.arange(1, 10, 3), { 1, 4, 7 })
  T.alleq(v100.arange(5, 0, -2), { 5, 3, 1 })
  T.eq(v100.arange(3, 3):numel(), 0, 'empty range')
  local f = v100.arange(0, 1, 0.25)
  T.eq(f.dtype, 'f32', 'a float step gives f32')
  T.alleq(f, { 0, 0.25, 0.5, 0.75 })
  T.alleq(v100.arange(-1.5, 1.0, 0.5), { -1.5, -1, -0.5, 0, 0.5 })
  local d = v100.arange(0, 4, 1, { dtype = 'f64' })
  T.eq(d.dtype, 'f64')
  T.alleq(d, { 0, 1, 2, 3 })
  -- numel = ceil((stop - start) / step)
  T.eq(v100.arange(0, 1, 0.3):numel(), 4)
  local n = 1000 + math.random(1000)
  local big = v100.arange(n)
  T.eq(big:numel(), n)
  T.eq(big:totable()[n], n - 1)
end)

T.test('rand: range, mean and std of 100k draws', function()
  v100.manual_seed(1234 + math.random(1000))
  for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
    local r = v100.rand({ 100000 }, { dtype = dt })
    T.eq(r.dtype, dt)
    local m, s, lo, hi = stats(r)
    if dt == 'f32' or dt == 'f64' then
      T.ok(lo > 0 and hi < 1, string.format('rand %s in (0,1): min %g max %g', dt, lo, hi))
    else
      T.ok(lo >= 0 and hi <= 1, string.format('rand %s in [0,1]: min %g max %g', dt, lo, hi))
    end
    T.near(m, 0.5, 0.01, 'rand mean ' .. dt)
    T.near(s, math.sqrt(1 / 12), 0.01, 'rand std ' .. dt)
    -- distinct values: a real generator, not a constant pattern
    local _, _, _, _, flat = stats(v100.rand({ 64 }, { dtype = dt }))
    local seen, distinct = {}, 0
    for _, x in ipairs(flat) do if not seen[x] then seen[x] = true distinct = distinct + 1 end end
    T.ok(distinct > 32, 'rand values vary: ' .. distinct .. ' distinct of 64')
  end
  local r2 = v100.rand({ 3, 4 })
  T.eq(r2.shape, { 3, 4 })
  T.eq(r2.dtype, 'f32', 'default dtype f32')
end)

T.test('randn: mean 0, std 1 of 100k draws', function()
  for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
    local r = v100.randn({ 200, 500 }, { dtype = dt })
    local m, s, lo, hi = stats(r)
    T.near(m, 0, 0.015, 'randn mean ' .. dt)
    T.near(s, 1, 0.015, 'randn std ' .. dt)
    T.ok(lo < -3 and hi > 3, string.format('randn %s has tails: min %g max %g', dt, lo, hi))
  end
end)

T.test('bernoulli: 0/1 values with mean p', function()
  for _, p in ipairs({ 0.1, 0.5, 0.85 }) do
    local b = v100.bernoulli({ 100000 }, p)
    T.eq(b.dtype, 'f32', 'default dtype f32')
    local m, _, _, _, flat = stats(b)
    for i = 1, #flat do
      if flat[i] ~= 0 and flat[i] ~= 1 then T.ok(false, 'bernoulli value ' .. flat[i] .. ' is not 0/1') end
    end
    T.near(m, p, 0.01, 'bernoulli mean p=' .. p)
  end
  local bb = v100.bernoulli({ 50, 20 }, 0.3, { dtype = 'bool' })
  T.eq(bb.dtype, 'bool')
  T.eq(v100.bernoulli({ 100 }, 0):sum():item(), 0, 'p = 0')
  T.eq(v100.bernoulli({ 100 }, 1):sum():item(), 100, 'p = 1')
end)

T.test('seeds: same seed same values, successive calls differ, rng_state round-trip', function()
  local seed = math.random(1, 2 ^ 30)
  v100.manual_seed(seed)
  local a = v100.rand({ 1000 }):totable()
  local an = v100.randn({ 7, 9 }, { dtype = 'f64' }):totable()
  local ab = v100.bernoulli({ 500 }, 0.4):totable()
  v100.manual_seed(seed)
  T.eq(v100.rand({ 1000 }):totable(), a, 'rand same seed')
  T.eq(v100.randn({ 7, 9 }, { dtype = 'f64' }):totable(), an, 'randn same seed')
  T.eq(v100.bernoulli({ 500 }, 0.4):totable(), ab, 'bernoulli same seed')
  local c1 = v100.rand({ 1000 }):totable()
  local c2 = v100.rand({ 1000 }):totable()
  T.ok(not T.deep_eq(c1, c2), 'successive calls give different values')
  v100.manual_seed(seed + 1)
  T.ok(not T.deep_eq(v100.rand({ 1000 }):totable(), a), 'a different seed gives different values')
  local s, off = v100.rng_state()
  T.ok(math.type(s) == 'integer' and math.type(off) == 'integer', 'rng_state returns seed and offset')
  local x = v100.randn({ 300 }):totable()
  v100.set_rng_state(s, off)
  T.eq(v100.randn({ 300 }):totable(), x, 'set_rng_state replays')
  v100.manual_seed(seed)
  local s2, off2 = v100.rng_state()
  T.eq(s2, seed, 'rng_state seed')
  T.eq(off2, 0, 'manual_seed resets the offset')
end)

T.test('in-place fills: uniform_, normal_, bernoulli_, fill_, zero_ (incl. views)', function()
  local t = v100.empty({ 400, 250 }, { dtype = 'f32' })
  local r = t:uniform_(-2, 3)
  T.ok(rawequal(r, t), 'uniform_ returns its target')
  local m, s, lo, hi = stats(t)
  T.ok(lo >= -2 and hi <= 3, 'uniform_ range')
  T.near(m, 0.5, 0.03, 'uniform_ mean')
  T.near(s, 5 / math.sqrt(12), 0.03, 'uniform_ std')
  t:uniform_()
  m, s, lo, hi = stats(t)
  T.ok(lo >= 0 and hi <= 1, 'uniform_() default [0,1]')
  t:normal_(3, 0.5)
  m, s = stats(t)
  T.near(m, 3, 0.01, 'normal_ mean')
  T.near(s, 0.5, 0.01, 'normal_ std')
  t:normal_()
  m, s = stats(t)
  T.near(m, 0, 0.015)
  T.near(s, 1, 0.015)
  t:bernoulli_(0.25)
  m = stats(t)
  T.near(m, 0.25, 0.01, 'bernoulli_ mean')
  -- on a transposed view: every element written, the base sees them
  local base = v100.full({ 300, 200 }, -9, { dtype = 'f64' })
  base:t():uniform_(1, 2)
  local _, _, blo, bhi = stats(base)
  T.ok(blo >= 1 and bhi <= 2, 'uniform_ on a transposed view fills every element')
  -- narrowed view: only the view changes
  local n = v100.full({ 4, 6 }, -9, { dtype = 'f64' })
  n:narrow(2, 2, 3):normal_()
  local nt = n:totable()
  for i = 1, 4 do
    T.eq(nt[i][1], -9)
    T.eq(nt[i][5], -9)
    T.eq(nt[i][6], -9)
    T.ok(nt[i][2] ~= -9 and nt[i][3] ~= -9 and nt[i][4] ~= -9, 'normal_ writes the view')
  end
  local v = T.rand_table({}, 1, 2)
  local f = v100.empty({ 3, 5 }, { dtype = 'f64' })
  T.ok(rawequal(f:fill_(v), f))
  T.alleq(f, T.ref_full({ 3, 5 }, v))
  f:t():fill_(-v)
  T.alleq(f, T.ref_full({ 3, 5 }, -v))
  T.ok(rawequal(f:zero_(), f))
  T.alleq(f, T.ref_full({ 3, 5 }, 0))
  local i = v100.empty({ 3 }, { dtype = 'i32' })
  i:fill_(42)
  T.alleq(i, { 42, 42, 42 })
end)

T.test('*_like', function()
  local a = v100.rand({ 3, 4 }, { dtype = 'f16' })
  for _, name in ipairs({ 'zeros_like', 'ones_like', 'empty_like', 'rand_like', 'randn_like' }) do
    local r = v100[name](a)
    T.eq(r.shape, { 3, 4 }, name)
    T.eq(r.dtype, 'f16', name)
    T.eq(r.device, 'cpu', name)
  end
  T.alleq(v100.zeros_like(a), T.ref_full({ 3, 4 }, 0))
  T.alleq(v100.ones_like(a), T.ref_full({ 3, 4 }, 1))
  T.alleq(v100.full_like(a, 2.5), T.ref_full({ 3, 4 }, 2.5))
  T.eq(v100.full_like(a, 2.5, { dtype = 'f64' }).dtype, 'f64')
  T.eq(v100.zeros_like(a, { dtype = 'i32' }).dtype, 'i32')
  local _, _, lo, hi = stats(v100.rand_like(v100.zeros({ 1000 })))
  T.ok(lo >= 0 and hi <= 1, 'rand_like is uniform')
  -- like of a transposed view keeps the shape
  T.eq(v100.zeros_like(a:t()).shape, { 4, 3 })
end)

T.test('tostring header', function()
  local a = v100.rand({ 2, 3 }, { dtype = 'f16' })
  local s = tostring(a)
  T.ok(s:find('[v100.Tensor cpu f16 2x3]', 1, true) ~= nil, 'header in ' .. s)
  local big = tostring(v100.zeros({ 1000, 1000 }))
  T.ok(#big < 20000, 'large tensors are summarised')
  T.ok(big:find('...', 1, true) ~= nil, 'summary uses ...')
end)

T.run()
