-- Philox on cuda gives the same numbers as on the cpu for one seed.
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'

local FLOATS = { 'f32', 'f16', 'bf16', 'f64' }
-- sizes: tiny, not a multiple of 4 (Philox tail), multi-block
local SIZES = { { 1 }, { 7 }, { 1000003 }, { 513, 1025 } }

local function seeded(seed, fn)
  v100.manual_seed(seed)
  return fn()
end

T.test('rand on cuda equals rand on cpu bit for bit', function()
  for _, dt in ipairs(FLOATS) do
    for _, size in ipairs(SIZES) do
      local seed = math.random(1, 2 ^ 31)
      local c = seeded(seed, function() return v100.rand(size, { dtype = dt }) end)
      local g = seeded(seed, function() return v100.rand(size, { dtype = dt, device = 'cuda' }) end)
      T.eq(g.device, 'cuda:0')
      T.eq(g.dtype, dt)
      T.tensor_eq(g, c, 'rand ' .. dt .. ' ' .. T.shape_str(size))
    end
  end
end)

T.test('randn on cuda within 1e-6 of the cpu', function()
  for _, dt in ipairs(FLOATS) do
    for _, size in ipairs(SIZES) do
      local seed = math.random(1, 2 ^ 31)
      local c = seeded(seed, function() return v100.randn(size, { dtype = dt }) end)
      local g = seeded(seed, function() return v100.randn(size, { dtype = dt, device = 'cuda' }) end)
      T.eq(g.dtype, dt)
      -- f16/bf16: a 1e-6 difference before rounding can flip the last bit
      local tol = ({ f32 = 1e-6, f64 = 1e-6, f16 = 1e-3, bf16 = 1e-2 })[dt]
      T.tensor_close(g, c, tol, tol, 'randn ' .. dt .. ' ' .. T.shape_str(size))
    end
  end
end)

T.test('bernoulli on cuda equals bernoulli on cpu', function()
  for _, p in ipairs({ 0.1, 0.5, 0.9 }) do
    for _, dt in ipairs({ 'f32', 'f16', 'bool', 'u8' }) do
      local seed = math.random(1, 2 ^ 31)
      local c = seeded(seed, function() return v100.bernoulli({ 1000003 }, p, { dtype = dt }) end)
      local g = seeded(seed, function() return v100.bernoulli({ 1000003 }, p, { dtype = dt, device = 'cuda' }) end)
      T.eq(g.dtype, dt)
      T.tensor_eq(g, c, 'bernoulli p=' .. p .. ' ' .. dt)
    end
  end
end)

T.test('the generator advances the same way on both devices', function()
  local seed = math.random(1, 2 ^ 31)
  v100.manual_seed(seed)
  local c1 = v100.rand({ 1001 })
  local c2 = v100.randn({ 333, 3 })
  local c3 = v100.rand({ 10 }, { dtype = 'f64' })
  local cs, co = v100.rng_state()
  v100.manual_seed(seed)
  local g1 = v100.rand({ 1001 }, { device = 'cuda' })
  local g2 = v100.randn({ 333, 3 }, { device = 'cuda' })
  local g3 = v100.rand({ 10 }, { dtype = 'f64', device = 'cuda' })
  local gs, go = v100.rng_state()
  T.eq(gs, cs, 'rng_state seed')
  T.eq(go, co, 'rng_state offset after the same draws')
  T.tensor_eq(g1, c1, 'first draw')
  T.tensor_close(g2, c2, 1e-6, 1e-6, 'second draw')
  T.tensor_eq(g3, c3, 'third draw')
  -- mixing devices: a cuda draw followed by a cpu draw equals two cpu draws
  v100.manual_seed(seed)
  local _ = v100.rand({ 1001 }, { device = 'cuda' })
  local m2 = v100.randn({ 333, 3 })
  T.tensor_close(m2, c2, 1e-6, 1e-6, 'cpu draw after a cuda draw')
  -- set_rng_state replays on cuda
  v100.set_rng_state(gs, go)
  local r1 = v100.rand({ 5000 }, { device = 'cuda' })
  v100.set_rng_state(gs, go)
  local r2 = v100.rand({ 5000 })
  T.tensor_eq(r1, r2, 'set_rng_state then cuda vs cpu')
  -- successive cuda calls differ
  local a = v100.rand({ 1000 }, { device = 'cuda' })
  local b = v100.rand({ 1000 }, { device = 'cuda' })
  T.ok(a:ne(b):sum():item() > 900, 'successive cuda draws differ')
end)

T.test('in-place fills on cuda match the cpu (contiguous)', function()
  for _, dt in ipairs({ 'f32', 'f64', 'bf16' }) do
    local seed = math.random(1, 2 ^ 31)
    local c = v100.empty({ 1000, 1001 }, { dtype = dt })
    local g = v100.empty({ 1000, 1001 }, { dtype = dt, device = 'cuda' })
    v100.manual_seed(seed)
    c:uniform_(-3, 2)
    v100.manual_seed(seed)
    g:uniform_(-3, 2)
    T.tensor_close(g, c, 1e-6, 1e-6, 'uniform_ ' .. dt)
    v100.manual_seed(seed)
    c:normal_(1, 2)
    v100.manual_seed(seed)
    g:normal_(1, 2)
    T.tensor_close(g, c, 2e-6 + (dt == 'bf16' and 1e-2 or 0), 2e-6, 'normal_ ' .. dt)
    v100.manual_seed(seed)
    c:bernoulli_(0.3)
    v100.manual_seed(seed)
    g:bernoulli_(0.3)
    T.tensor_eq(g, c, 'bernoulli_ ' .. dt)
  end
end)

T.test('cuda draws have the right distribution', function()
  local r = v100.rand({ 4000000 }, { device = 'cuda' })
  T.ok(r:min():item() > 0 and r:max():item() < 1, 'rand in (0,1)')
  T.near(r:mean():item(), 0.5, 1e-3)
  T.near(r:std():item(), math.sqrt(1 / 12), 1e-3)
  local n = v100.randn({ 4000000 }, { device = 'cuda' })
  T.near(n:mean():item(), 0, 3e-3)
  T.near(n:std():item(), 1, 3e-3)
  local b = v100.bernoulli({ 4000000 }, 0.25, { device = 'cuda' })
  T.near(b:mean():item(), 0.25, 2e-3)
  -- 16M draws per dtype: a mapping that can round up to 1 (as a 24-bit f32 draw once did, about
  -- once in 2^24) shows up here with good probability
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    local u = v100.rand({ 16000000 }, { device = 'cuda', dtype = dt })
    T.ok(u:min():item() > 0 and u:max():item() < 1, 'rand ' .. dt .. ' in (0,1)')
    T.near(u:double():mean():item(), 0.5, 2e-3, 'rand ' .. dt .. ' mean')
  end
end)

T.run()
