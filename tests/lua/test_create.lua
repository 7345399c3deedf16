-- tests/lua/test_create.lua: creation and random sampling (docs/LUA_API.md, "Creation and random
-- sampling"): hand-checked values against PyTorch's semantics, the Philox mappings the samplers
-- document (runtime/core/philox.h), reproducibility, options, edge cases and error messages, and
-- the distributions on the CPU (tests/lua/random_checks.lua; tests/lua/gpu_random.lua runs them
-- on CUDA).
local T = require 'testlib'
local v100 = require 'v100'
local checks = require 'random_checks'

local function list(t) return t:to({ device = 'cpu' }):tolist() end

T.test('linspace: PyTorch values, both ends exact, integer dtypes truncate', function()
  T.eq(list(v100.linspace(0, 1, 5)), { 0, 0.25, 0.5, 0.75, 1 })
  T.eq(list(v100.linspace(10, -10, 5)), { 10, 5, 0, -5, -10 })
  T.eq(list(v100.linspace(0, 10, 4, { dtype = 'i64' })), { 0, 3, 6, 10 }) -- 3.33 -> 3, 6.67 -> 6
  T.eq(list(v100.linspace(-7, 7, 3, { dtype = 'i32' })), { -7, 0, 7 })
  T.eq(list(v100.linspace(5, 9, 1)), { 5 })
  T.eq(v100.linspace(5, 9, 0).shape, { 0 })
  T.eq(list(v100.linspace(2, 2, 3)), { 2, 2, 2 })
  -- PyTorch's symmetric formula: start + step * i in the first half, end - step * (steps - 1 - i)
  -- in the second, step = (end - start) / (steps - 1), in f64
  local a, b, n = 0.1, 0.7, 7
  local step = (b - a) / (n - 1)
  local want = {}
  for i = 0, n - 1 do want[i + 1] = i < n // 2 and a + step * i or b - step * (n - 1 - i) end
  T.eq(list(v100.linspace(a, b, n, { dtype = 'f64' })), want, 'linspace(0.1, 0.7, 7) f64 bit for bit')
  T.eq(v100.linspace(a, b, n, { dtype = 'f64' })[n]:item(), 0.7, 'the last value is end exactly')
  local t = v100.linspace(0, 1, 3, { dtype = 'f16', requires_grad = true })
  T.eq(t.dtype, 'f16')
  T.ok(t.requires_grad, 'requires_grad option')
end)

T.test('logspace: base ^ linspace, base option', function()
  T.eq(list(v100.logspace(0, 2, 3)), { 1, 10, 100 })
  T.eq(list(v100.logspace(0, 3, 4, { base = 2 })), { 1, 2, 4, 8 })
  T.eq(list(v100.logspace(0, 3, 4, { base = 2, dtype = 'i64' })), { 1, 2, 4, 8 })
  T.tensor_close(v100.logspace(-1, 1, 3, { dtype = 'f64' }), v100.tensor({ 0.1, 1, 10 }, { dtype = 'f64' }), 1e-15, 1e-15)
  T.eq(list(v100.logspace(1, 5, 1, { base = 3 })), { 3 })
  T.eq(v100.logspace(0, 1, 0).shape, { 0 })
end)

T.test('eye: square, rectangular, dtypes, empty', function()
  T.eq(list(v100.eye(3)), { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } })
  T.eq(list(v100.eye(2, 3, { dtype = 'i32' })), { { 1, 0, 0 }, { 0, 1, 0 } })
  T.eq(list(v100.eye(3, 2)), { { 1, 0 }, { 0, 1 }, { 0, 0 } })
  T.eq(list(v100.eye(2, { dtype = 'bool' })), { { true, false }, { false, true } })
  T.eq(v100.eye(0).shape, { 0, 0 })
  T.eq(v100.eye(0, 4).shape, { 0, 4 })
  T.eq(v100.eye(2).dtype, 'f32')
end)

T.test('*_like: shape, dtype and device follow the input unless opts override', function()
  local x = v100.randn({ 2, 3 }):transpose(1, 2)
  local z = v100.zeros_like(x, { dtype = 'f64' })
  T.eq(z.shape, { 3, 2 })
  T.eq(z.dtype, 'f64')
  T.eq(list(v100.ones_like(x, { dtype = 'i32', device = 'cpu' })), { { 1, 1 }, { 1, 1 }, { 1, 1 } })
  T.eq(list(v100.full_like(x, 7, { dtype = 'i64' })), { { 7, 7 }, { 7, 7 }, { 7, 7 } })
  T.eq(v100.empty_like(x, 'bf16').dtype, 'bf16', 'a bare dtype string')
  T.ok(v100.zeros_like(x, { requires_grad = true }).requires_grad, 'requires_grad')
  local i = v100.zeros({ 4 }, { dtype = 'i64' })
  T.raises(function() v100.rand_like(i) end, 'rand: expected a float dtype', 'rand_like of an integer tensor, as PyTorch')
  T.eq(v100.rand_like(i, { dtype = 'f32' }).dtype, 'f32')
  local r = v100.randint_like(i, 3, 9)
  T.eq(r.dtype, 'i64')
  T.ok(r:min():item() >= 3 and r:max():item() <= 8, 'randint_like(t, 3, 9) in [3, 9)')
  T.eq(v100.randint_like(v100.zeros({ 2, 2 }), 4).dtype, 'f32', 'randint_like keeps a float dtype')
end)

T.test('randint: forms, default i64, the documented word mapping', function()
  v100.manual_seed(5)
  local a = v100.randint(0, 10, { 3, 4 })
  T.eq(a.dtype, 'i64')
  T.eq(a.shape, { 3, 4 })
  v100.manual_seed(5)
  T.tensor_eq(v100.randint(10, { 3, 4 }), a, 'randint(high, shape) is randint(0, high, shape)')
  T.eq(v100.randint(0, 5, 6).shape, { 6 }, 'a number as a 1-D shape')
  T.eq(v100.randint(0, 5, { 0, 2 }).shape, { 0, 2 })
  -- the mapping: value = low + floor(word * range / 2^32) of the same 32-bit words
  v100.manual_seed(99)
  local words = list(v100.randint(0, 1 << 32, { 16 }))
  v100.manual_seed(99)
  local r = list(v100.randint(-3, 7, { 16 }))
  for i = 1, 16 do T.eq(r[i], -3 + ((words[i] * 10) >> 32), 'randint word ' .. i) end
  -- rand (f32) draws u = ((w >> 9) + 0.5) / 2^23 from the same words
  v100.manual_seed(99)
  local u = list(v100.rand({ 16 }))
  for i = 1, 16 do T.eq(u[i], ((words[i] >> 9) + 0.5) / (1 << 23), 'rand word ' .. i) end
  -- exact int64 bounds beyond 2^53
  v100.manual_seed(3)
  local big = v100.randint((1 << 62) - 5, (1 << 62) - 2, { 64 }):tolist()
  for _, v in ipairs(big) do T.ok(v >= (1 << 62) - 5 and v < (1 << 62) - 2, 'exact i64 bound: ' .. v) end
  T.eq(v100.randint(-8, 8, { 5 }, { dtype = 'f16' }).dtype, 'f16')
end)

T.test('exponential_: -log(u) / lambd of the uniform words', function()
  v100.manual_seed(21)
  local words = list(v100.randint(0, 1 << 32, { 8 }))
  v100.manual_seed(21)
  local e = list(v100.empty({ 8 }, { dtype = 'f32' }):exponential_(2))
  for i = 1, 8 do
    local want = -math.log(((words[i] >> 9) + 0.5) / (1 << 23)) / 2
    T.near(e[i], want, 1e-6 * math.max(1, want), 'exponential_ element ' .. i)
  end
  local x = v100.empty({ 4, 5 }):t()
  T.ok(x:exponential_() == x, 'returns self (a strided tensor through a contiguous draw)')
end)

T.test('random_: bounds forms and defaults', function()
  v100.manual_seed(8)
  local t = v100.empty({ 1000 }, { dtype = 'i64' }):random_(10)
  T.ok(t:min():item() == 0 and t:max():item() == 9, 'random_(10): 0..9')
  t:random_(-3, -1)
  T.ok(t:min():item() == -3 and t:max():item() == -2, 'random_(-3, -1): -3..-2')
  local u = v100.empty({ 1000 }, { dtype = 'u8' }):random_()
  T.ok(u:to('i64'):max():item() > 200, 'random_() on u8 reaches the top of [0, 255]')
  local b = v100.empty({ 1000 }, { dtype = 'bf16' }):random_()
  T.ok(b:max():item() <= 256 and b:eq(b:floor()):sum():item() == 1000, 'random_() on bf16: integers in [0, 2^8]')
end)

T.test('randperm: permutations, dtypes, reproducible', function()
  T.eq(list(v100.randperm(0)), {})
  T.eq(list(v100.randperm(1)), { 0 })
  v100.manual_seed(1)
  local p = v100.randperm(50)
  T.eq(p.dtype, 'i64')
  local s = p:tolist()
  table.sort(s)
  for i = 1, 50 do T.eq(s[i], i - 1) end
  v100.manual_seed(1)
  T.tensor_eq(v100.randperm(50), p, 'same seed, same permutation')
  T.ok(v100.randperm(50):ne(p):sum():item() > 0, 'the generator moved on')
  v100.manual_seed(1)
  T.tensor_eq(v100.randperm(50, { dtype = 'f32' }):to('i64'), p, 'an f32 randperm: the same permutation')
end)

T.test('multinomial: weights, rows, replacement, method form', function()
  v100.manual_seed(2)
  T.eq(list(v100.multinomial(v100.tensor({ 0, 0, 3.5 }), 4, { replacement = true })), { 2, 2, 2, 2 })
  local w = v100.tensor({ { 1, 1, 1 }, { 0, 2, 5 } }, { dtype = 'f32' })
  local r = w:multinomial(2)
  T.eq(r.shape, { 2, 2 })
  T.eq(r.dtype, 'i64')
  local r2 = list(r[2])
  table.sort(r2)
  T.eq(r2, { 1, 2 }, 'row 2 without replacement: the two non-zero categories')
  local all = list(v100.multinomial(v100.tensor({ 4, 1, 2 }, { dtype = 'f32' }), 3))
  table.sort(all)
  T.eq(all, { 0, 1, 2 }, 'every category once')
  v100.manual_seed(4)
  local a = v100.multinomial(v100.rand({ 3, 10 }), 6)
  v100.manual_seed(4)
  T.tensor_eq(v100.multinomial(v100.rand({ 3, 10 }), 6), a, 'reproducible')
  -- without replacement the samples are the draw order: k samples are the first k of n (the
  -- selection of a few from a long row takes another path than a full sort)
  for trial = 1, 5 do
    local w2 = v100.rand({ 3, 200 }, { dtype = 'f64' })
    w2[{ {}, { 1, 50 } }] = 0
    v100.manual_seed(trial)
    local full = v100.multinomial(w2, 150)
    v100.manual_seed(trial)
    T.tensor_eq(v100.multinomial(w2, 7), full:narrow(2, 1, 7), 'the first 7 of 150, trial ' .. trial)
  end
  T.eq(v100.multinomial(v100.rand({ 0, 4 }), 2).shape, { 0, 2 })
  T.eq(v100.multinomial(v100.tensor({ 1, 2 }, { dtype = 'bf16' }):t(), 1).shape, { 1 })
end)

T.test('errors name the op and what was wrong', function()
  T.raises(function() v100.randint(5, 5, { 2 }) end, 'randint: expected low < high, got low 5, high 5')
  T.raises(function() v100.randint(0, 300, { 2 }, { dtype = 'u8' }) end, 'randint: the range [0, 300) is outside dtype u8')
  T.raises(function() v100.randint(0, 2, { 2 }, { dtype = 'bool' }) end, 'randint: dtype bool is not supported')
  T.raises(function() v100.randint(0.5, 2, { 2 }) end, 'randint: low must be an integer')
  T.raises(function() v100.randint(0, 2, 'x') end, 'randint: expected a shape')
  T.raises(function() v100.randint(0, 2, { -1 }) end, 'randint: negative size')
  T.raises(function() v100.randperm(-1) end, 'randperm: n must not be negative, got -1')
  T.raises(function() v100.randperm(300, { dtype = 'u8' }) end, 'randperm: n 300 is too large for dtype u8')
  T.raises(function() v100.linspace(0, 1, -2) end, 'linspace: steps must not be negative, got -2')
  T.raises(function() v100.linspace(0, math.huge, 3) end, 'linspace: start 0 and end inf must be finite')
  T.raises(function() v100.linspace(0, 1, 2.5) end, 'linspace: steps must be an integer')
  T.raises(function() v100.linspace(0, 1, 3, { dtype = 'bool' }) end, 'linspace: dtype bool is not supported')
  T.raises(function() v100.logspace(0, 1, 3, { base = 'e' }) end, 'logspace: base must be a number, got string')
  T.raises(function() v100.eye(-1) end, 'eye: sizes must not be negative, got n -1, m -1')
  T.raises(function() v100.eye(2, -3) end, 'eye: sizes must not be negative, got n 2, m -3')
  local mn = v100.multinomial
  T.raises(function() mn(v100.tensor({ 1, 2 }), 1) end, 'multinomial: expected float weights')
  T.raises(function() mn(v100.ones({ 2, 2, 2 }), 1) end, 'multinomial: expected 1-D or 2-D weights, got 2x2x2 f32')
  T.raises(function() mn(v100.tensor({ 1.0, -1, 2 }), 1) end, 'multinomial: weights must be finite and non-negative, got -1 at row 1, position 2')
  T.raises(function() mn(v100.tensor({ 1, 0 / 0 }), 1) end, 'position 2')
  T.raises(function() mn(v100.tensor({ 1, math.huge }), 1) end, 'got inf at row 1, position 2')
  T.raises(function() mn(v100.tensor({ { 1.0, 2 }, { 0, 0 } }), 1) end, 'multinomial: row 2 of the weights sums to 0')
  T.raises(function() mn(v100.tensor({ 1.0, 0, 2 }), 3) end,
    'multinomial: cannot draw 3 samples without replacement from 2 non-zero weights (row 1')
  T.raises(function() mn(v100.tensor({ 1.0, 2 }), 3) end, 'cannot draw 3 samples without replacement from 2 categories')
  T.raises(function() mn(v100.tensor({ 1.0, 2 }), 0) end, 'multinomial: num_samples must be positive, got 0')
  T.raises(function() mn(v100.zeros({ 2, 0 }), 1) end, 'multinomial: the weights have no categories')
  T.raises(function() mn(v100.ones({ 3 }), 2, { replacement = 'yes' }) end, 'multinomial: replacement must be a boolean')
  T.raises(function() v100.ones({ 3 }):exponential_(0) end, 'exponential_: expected a finite lambd > 0, got 0')
  T.raises(function() v100.ones({ 3 }, { dtype = 'i64' }):exponential_() end, 'exponential_: expected a float dtype')
  T.raises(function() v100.ones({ 3 }, { dtype = 'i64' }):random_(5, 2) end, 'random_: expected low < high, got low 5, high 2')
  T.raises(function() v100.ones({ 3 }, { dtype = 'u8' }):random_(0, 1000) end, 'random_: the range [0, 1000) is outside dtype u8')
  T.raises(function() v100.ones({ 3 }):expand(2, 3):uniform_() end, 'uniform_')
  -- a refused call leaves the generator where it was
  v100.manual_seed(6)
  pcall(mn, v100.tensor({ { 1.0, 2 }, { 0, 0 } }), 1)
  local after = v100.rand({ 4 })
  v100.manual_seed(6)
  T.tensor_eq(after, v100.rand({ 4 }), 'no draw consumed by an error')
end)

T.test('autograd: the in-place samplers overwrite (no gradient to the past), refuse a leaf', function()
  local x = v100.ones({ 3 }, { requires_grad = true })
  T.raises(function() x:exponential_() end, 'in-place operation (exponential_')
  T.raises(function() x:random_(4) end, 'in-place operation (random_')
  local y = x * 2
  y:exponential_()
  T.ok(y.requires_grad, 'still requires grad (a non-leaf)')
  T.eq(y.grad_fn, 'FillBackward')
  y:sum():backward()
  T.eq(x.grad, nil, 'no gradient flows to what was overwritten')
  local l = v100.linspace(0, 1, 3, { requires_grad = true })
  ;(l * l):sum():backward()
  T.eq(list(l.grad), { 0, 1, 2 }, 'a created leaf takes gradients: d sum(l^2) = 2l')
end)

T.test('reproducibility: each sampler repeats with the seed and advances without it', function()
  local function twice(f)
    v100.manual_seed(77)
    local a, b = f(), f()
    v100.manual_seed(77)
    T.tensor_eq(f(), a, 'same seed')
    T.ok(a:ne(b):sum():item() > 0, 'a second call draws new values')
  end
  twice(function() return v100.randint(0, 1000, { 64 }) end)
  twice(function() return v100.randperm(64) end)
  twice(function() return v100.multinomial(v100.ones({ 64 }), 32) end)
  twice(function() return v100.empty({ 64 }):exponential_() end)
  twice(function() return v100.empty({ 64 }, { dtype = 'i32' }):random_(1000) end)
end)

checks.run(T, 'cpu')

T.run()
