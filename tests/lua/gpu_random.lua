-- tests/lua/gpu_random.lua: the random samplers on CUDA. The CPU and CUDA draw the same Philox
-- stream (runtime/core/philox.h), so for one seed each sampler's CUDA values equal the CPU's
-- (integers and uniforms bit for bit, the transcendental ones within an ulp of log/sin/cos), and
-- the generator advances alike; then the distribution tests of tests/lua/random_checks.lua run on
-- CUDA (tests/lua/test_create.lua runs them on the CPU).
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'
local checks = require 'random_checks'

-- exact: bit for bit; otherwise within tol (the dtype's rounding of a value an ulp apart)
local function same(name, f, exact, tol)
  v100.manual_seed(4242)
  local c = f('cpu')
  local after_c = v100.rand({ 8 })
  v100.manual_seed(4242)
  local g = f('cuda')
  local after_g = v100.rand({ 8 })
  T.ok(g.device:sub(1, 4) == 'cuda', name .. ': on cuda')
  if exact then T.tensor_eq(g:cpu(), c, name .. ': cuda equals cpu')
  else T.tensor_close(g:cpu(), c, tol or 1e-6, tol or 1e-6, name .. ': cuda equals cpu within an ulp') end
  T.tensor_eq(after_g, after_c, name .. ': the generator advanced by the same counters')
end

T.test('each sampler draws the cpu values on cuda', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8' }) do
    local lo = dt == 'u8' and 0 or -7 -- u8 holds no negative bound
    same('randint ' .. dt, function(d) return v100.randint(lo, 100, { 1037 }, { dtype = dt, device = d }) end, true)
    same('random_ ' .. dt, function(d) return v100.empty({ 33, 5 }, { dtype = dt, device = d }):t():random_() end, true)
  end
  same('randint wide', function(d) return v100.randint(-(1 << 61), 1 << 61, { 999 }, { device = d }) end, true)
  same('randperm', function(d) return v100.randperm(5000, { device = d }) end, true)
  same('randint_like', function(d) return v100.randint_like(v100.zeros({ 9, 9 }, { device = d }), 5) end, true)
  local TOL = { f32 = 1e-6, f16 = 1e-3, bf16 = 8e-3, f64 = 1e-12 }
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    same('uniform_ ' .. dt, function(d) return v100.empty({ 1001 }, { dtype = dt, device = d }):uniform_(-1, 4) end, true)
    same('bernoulli_ ' .. dt, function(d) return v100.empty({ 1001 }, { dtype = dt, device = d }):bernoulli_(0.4) end, true)
    same('exponential_ ' .. dt, function(d) return v100.empty({ 1001 }, { dtype = dt, device = d }):exponential_(3) end, false, TOL[dt])
    same('normal_ ' .. dt, function(d) return v100.empty({ 1001 }, { dtype = dt, device = d }):normal_(2, 3) end, false, TOL[dt] * 10)
    same('multinomial ' .. dt, function(d)
      local w = v100.rand({ 5, 40 }, { dtype = 'f64' }):to({ dtype = dt, device = d })
      return v100.multinomial(w, 17)
    end, true)
    same('multinomial replacement ' .. dt, function(d)
      local w = v100.rand({ 5, 40 }, { dtype = 'f64' }):to({ dtype = dt, device = d })
      return v100.multinomial(w, 100, { replacement = true })
    end, true)
  end
end)

T.test('deterministic creation on cuda equals the cpu', function()
  for _, dt in ipairs({ 'f32', 'f64', 'i64' }) do
    T.tensor_eq(v100.linspace(-3, 11, 37, { dtype = dt, device = 'cuda' }):cpu(), v100.linspace(-3, 11, 37, { dtype = dt }), 'linspace ' .. dt)
    T.tensor_close(v100.logspace(-2, 3, 21, { dtype = dt, device = 'cuda' }):cpu(), v100.logspace(-2, 3, 21, { dtype = dt }), 1e-6, 1e-6, 'logspace ' .. dt)
    T.tensor_eq(v100.eye(5, 7, { dtype = dt, device = 'cuda' }):cpu(), v100.eye(5, 7, { dtype = dt }), 'eye ' .. dt)
  end
end)

checks.run(T, 'cuda')

T.run()
