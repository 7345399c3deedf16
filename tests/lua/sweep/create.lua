-- tests/lua/sweep/create.lua: the creation and random ops' cases for the tensor sweeps
-- (tests/lua/tensor_sweep.lua says what an entry is).
--
-- A creation function takes no tensor, so each case passes a one-element "proto" tensor of the
-- case's dtype: the call creates with {dtype = p.dtype, device = p.device}. The sweep moves the
-- proto to each device and widens it for the reference, so the f64 (i64) run is the reference and
-- CUDA runs against the CPU like any other op.
--
-- The random ops reseed inside the call: the CPU and CUDA draw the same Philox stream
-- (runtime/core/philox.h), so their results are compared (integers and selections exactly). Ops
-- whose draws do not depend on the dtype (randint, randperm, multinomial, bernoulli_) are also
-- compared with their f64/i64 run; those whose mapping does (uniform_, normal_, exponential_,
-- rand_like, randn_like: f64 draws 52-bit uniforms) have ref = false, and their distributions are
-- tested in tests/lua/test_create.lua and tests/lua/gpu_random.lua.
local v100 = require 'v100'
local R = {}
local ALL = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }
local FLOATS = { 'f32', 'f16', 'bf16', 'f64' }
local SEED = 20261207

-- Invariants checked inside the calls (an error fails the case on every device), so that a
-- broken op fails even where its reference is the same op on f64: bounds, ends, permutations.
local function check(ok, what) if not ok then error('invariant: ' .. what, 2) end end
local function minmax(t)
  if t:numel() == 0 then return nil end
  local f = t:to({ dtype = 'f64', device = 'cpu' })
  return f:min():item(), f:max():item()
end

local function proto(S, dt) return S.rand({ 1 }, dt) end
local function o(p, extra)
  local t = { dtype = p.dtype, device = p.device }
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end

R[#R + 1] = {
  name = 'linspace', dtypes = ALL,
  cases = function(S, dt)
    local p = proto(S, dt)
    local c = {
      { '0..1 5 steps', p, 0, 1, 5 },
      { '-3..7 11 steps', p, -3, 7, 11 },
      { 'decreasing 10..-10 8 steps', p, 10, -10, 8 },
      { 'one step', p, 4, 9, 1 },
      { 'no steps', p, 4, 9, 0 },
      { 'start == end', p, 2, 2, 6 },
    }
    if v100.dtype_is_float(dt) then c[#c + 1] = { 'fractions 0.1..0.7 7 steps', p, 0.1, 0.7, 7 } end
    return c
  end,
  call = function(p, a, b, n)
    local r = v100.linspace(a, b, n, o(p))
    check(r.shape[1] == n, 'linspace has steps elements')
    if n >= 2 and v100.dtype_is_float(p.dtype) then
      local f = r:to({ dtype = 'f64', device = 'cpu' })
      check(f[1]:item() == v100.tensor(a, { dtype = p.dtype }):item(), 'linspace starts at start')
      check(f[n]:item() == v100.tensor(b, { dtype = p.dtype }):item(), 'linspace ends at end')
    end
    return r
  end,
}

R[#R + 1] = {
  name = 'logspace', dtypes = ALL,
  cases = function(S, dt)
    local p = proto(S, dt)
    return {
      { '10^0..10^2 3 steps', p, 0, 2, 3, 10 },
      { 'base 2, 0..6 7 steps', p, 0, 6, 7, 2 },
      { 'negative exponents base 10', p, -2, 1, 4, 10 },
      { 'no steps', p, 0, 1, 0, 10 },
      { 'one step', p, 1, 3, 1, 3 },
    }
  end,
  call = function(p, a, b, n, base) return v100.logspace(a, b, n, o(p, { base = base })) end,
}

R[#R + 1] = {
  name = 'eye', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local p = proto(S, dt)
    return { { 'square 4', p, 4 }, { '3x5', p, 3, 5 }, { '5x2', p, 5, 2 }, { '0x3', p, 0, 3 }, { '1x1', p, 1, 1 } }
  end,
  call = function(p, n, m)
    local r = m and v100.eye(n, m, o(p)) or v100.eye(n, o(p))
    local f = r:to({ dtype = 'f64', device = 'cpu' })
    check(f:numel() == 0 or f:sum():item() == math.min(n, m or n), 'eye has min(n, m) ones')
    return r
  end,
}

-- the *_like ops on strided inputs: shape and dtype follow the input, values the op
local function like_cases(S, dt)
  local c = {}
  for _, l in ipairs(S.layouts({ 3, 5 }, dt, nil, nil, true)) do c[#c + 1] = { l[1], l[2] } end
  c[#c + 1] = { 'empty 0x4', S.rand({ 0, 4 }, dt) }
  c[#c + 1] = { 'size-1 dims 1x7x1', S.rand({ 1, 7, 1 }, dt) }
  return c
end

R[#R + 1] = {
  name = 'empty_like', dtypes = ALL,
  cases = like_cases,
  -- the values are not defined: the shape, and a write of the whole result read back
  call = function(x) local e = v100.empty_like(x) return e.shape, e:fill_(3) end,
}
R[#R + 1] = {
  name = 'zeros_like', dtypes = ALL, exact = true, cases = like_cases,
  call = function(x) return v100.zeros_like(x), v100.zeros_like(x, { dtype = 'f64' }) end,
}
R[#R + 1] = {
  name = 'ones_like', dtypes = ALL, exact = true, cases = like_cases,
  call = function(x) return v100.ones_like(x), v100.ones_like(x, { dtype = 'i32' }) end,
}
R[#R + 1] = {
  name = 'full_like', dtypes = ALL, exact = true, cases = like_cases,
  call = function(x)
    return v100.full_like(x, v100.dtype_is_float(x.dtype) and 2.5 or -7), v100.full_like(x, 4, { dtype = 'i64' })
  end,
}
R[#R + 1] = {
  name = 'rand_like', dtypes = FLOATS, ref = false, cases = like_cases,
  call = function(x) v100.manual_seed(SEED) return v100.rand_like(x) end,
}
R[#R + 1] = {
  name = 'randn_like', dtypes = FLOATS, ref = false, cases = like_cases,
  call = function(x) v100.manual_seed(SEED) return v100.randn_like(x) end,
}

R[#R + 1] = {
  name = 'randint', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local p = proto(S, dt)
    local c = {
      { '[0, 10) 3x4', p, 0, 10, { 3, 4 } },
      { '[-50, 50) 1001', p, -50, 50, { 1001 } },
      { 'one value [7, 8)', p, 7, 8, { 5 } },
      { 'empty 0x3', p, 0, 5, { 0, 3 } },
      { 'size-1 dims 1x9x1', p, -3, 3, { 1, 9, 1 } },
    }
    if dt == 'i64' then
      -- a range above 2^32 (two words a value) and bounds beyond 2^53
      c[#c + 1] = { 'wide range', p, -(1 << 40), 1 << 40, { 7, 3 } }
      c[#c + 1] = { 'bounds near 2^62', p, (1 << 62) - 1000, 1 << 62, { 9 } }
    end
    return c
  end,
  call = function(p, lo, hi, shape)
    v100.manual_seed(SEED)
    local r = v100.randint(lo, hi, shape, o(p))
    local a, b = minmax(r)
    if a and math.max(math.abs(lo), math.abs(hi)) < 1 << 24 then check(a >= lo and b < hi, 'randint values in [low, high)') end
    return r
  end,
}

R[#R + 1] = {
  name = 'randint_like', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(like_cases(S, dt)) do c[#c + 1] = { l[1], l[2], 3, 20 } end
    return c
  end,
  call = function(x, lo, hi) v100.manual_seed(SEED) return v100.randint_like(x, lo, hi), v100.randint_like(x, hi) end,
}

R[#R + 1] = {
  name = 'randperm', dtypes = { 'i64', 'i32', 'f32', 'f64' }, exact = true,
  cases = function(S, dt)
    local p = proto(S, dt)
    return { { 'n 1', p, 1 }, { 'n 0', p, 0 }, { 'n 17', p, 17 }, { 'n 1000', p, 1000 } }
  end,
  call = function(p, n)
    v100.manual_seed(SEED)
    local r = v100.randperm(n, o(p))
    if n > 0 then
      local sorted = r:to({ dtype = 'f64', device = 'cpu' })
      local seen = {}
      for i = 1, n do
        local v = math.tointeger(sorted[i]:item())
        check(v and v >= 0 and v < n and not seen[v], 'randperm is a permutation of 0..n-1')
        seen[v] = true
      end
    end
    return r
  end,
}

R[#R + 1] = {
  name = 'multinomial', dtypes = FLOATS, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 4, 9 }, dt, 0, 3)) do
      c[#c + 1] = { l[1] .. ' with replacement', l[2], 12, true }
      c[#c + 1] = { l[1] .. ' without replacement', l[2], 5, false }
    end
    c[#c + 1] = { '1-D all categories', S.rand({ 6 }, dt, 0.5, 2), 6, false }
    c[#c + 1] = { '1-D zeros never drawn', v100.tensor({ 0, 1, 0, 2, 0 }, { dtype = dt }), 20, true }
    c[#c + 1] = { '0 rows', S.rand({ 0, 5 }, dt, 0, 1), 3, true }
    return c
  end,
  call = function(w, k, rep)
    v100.manual_seed(SEED)
    local r = v100.multinomial(w, k, { replacement = rep })
    -- no zero weight drawn; without replacement no category twice
    local wc, rc = w:to({ dtype = 'f64', device = 'cpu' }), r:cpu()
    if w.ndim == 1 then wc, rc = wc:view(1, -1), rc:view(1, -1) end
    for i = 1, rc.shape[1] do
      local seen = {}
      for j = 1, k do
        local c = rc[i][j]:item()
        check(wc[i][c + 1]:item() > 0, 'multinomial draws only positive weights')
        check(rep or not seen[c], 'multinomial without replacement draws a category once')
        seen[c] = true
      end
    end
    return r
  end,
}

-- in-place samplers on contiguous and strided tensors (a strided one is drawn in logical order)
local function inplace_cases(S, dt)
  local c = {}
  for _, l in ipairs(S.layouts({ 6, 7 }, dt)) do c[#c + 1] = { l[1], l[2] } end
  c[#c + 1] = { 'empty', S.rand({ 0, 3 }, dt) }
  c[#c + 1] = { 'odd count 1x13', S.rand({ 1, 13 }, dt) }
  return c
end

R[#R + 1] = {
  name = 'uniform_', dtypes = FLOATS, ref = false, exact = true, cases = inplace_cases,
  call = function(x)
    v100.manual_seed(SEED)
    local a, b = minmax(x:uniform_(-2, 3))
    check(not a or (a >= -2 and b <= 3), 'uniform_ values in [a, b]')
    return x
  end,
}
R[#R + 1] = {
  name = 'normal_', dtypes = FLOATS, ref = false, cases = inplace_cases,
  call = function(x) v100.manual_seed(SEED) return x:normal_(1, 2) end,
}
R[#R + 1] = {
  name = 'bernoulli_', dtypes = ALL, exact = true, cases = inplace_cases,
  call = function(x)
    v100.manual_seed(SEED)
    local a, b = minmax(x:bernoulli_(0.3))
    check(not a or (a >= 0 and b <= 1), 'bernoulli_ values are 0 or 1')
    return x
  end,
}
R[#R + 1] = {
  name = 'exponential_', dtypes = FLOATS, ref = false, cases = inplace_cases,
  call = function(x)
    v100.manual_seed(SEED)
    local a = minmax(x:exponential_(1.5))
    check(not a or a >= 0, 'exponential_ values are non-negative')
    return x
  end,
}
R[#R + 1] = {
  name = 'random_', dtypes = ALL, exact = true, cases = inplace_cases,
  call = function(x)
    v100.manual_seed(SEED)
    local b = x:clone():random_(100)
    local lo, hi = minmax(x:random_(-5, 9))
    check(not lo or (lo >= -5 and hi <= 8), 'random_(from, to) values in [from, to)')
    return x, b
  end,
}

return R
