-- tests/lua/sweep/reduce.lua: the reductions' cases for the tensor sweeps (tests/lua/tensor_sweep.lua
-- says what an entry is; test_tensor_sweep.lua runs them on the CPU against f64,
-- gpu_tensor_sweep.lua on CUDA against the CPU). Shapes put the reduced dim first, middle and last,
-- with a long dim (the vector and multi-block paths) and an odd one.
local R = {}

-- {label, x, dim} over every layout of a 3-D tensor and each dim, plus a long row
local function over_dims(S, dt, lo, hi)
  local out = {}
  for _, l in ipairs(S.layouts({ 5, 7, 33 }, dt, lo, hi, true)) do
    for _, d in ipairs({ 1, 2, 3 }) do out[#out + 1] = { l[1] .. ' dim ' .. d, l[2], d } end
  end
  out[#out + 1] = { 'long row', S.rand({ 3, 5000 }, dt, lo, hi), 2 }
  return out
end

local function with_all(S, dt, lo, hi)
  local out = over_dims(S, dt, lo, hi)
  out[#out + 1] = { 'all dims', S.rand({ 9, 13 }, dt, lo, hi), nil }
  return out
end

-- f64 inputs for the gradient cases
local function g3(S) return S.rand({ 3, 4, 5 }, 'f64') end

local function simple(name, dtypes, grad, lo, hi, tol)
  R[#R + 1] = {
    name = name, dtypes = dtypes, tol = tol,
    cases = function(S, dt) return with_all(S, dt, lo, hi) end,
    call = function(x, d) if d then return x[name](x, d) end return x[name](x) end,
    grads = grad and function(S)
      return { { 'dim 2', function(x) return x[name](x, 2) end, g3(S) }, { 'all', function(x) return x[name](x) end, g3(S) } }
    end or nil,
  }
end

simple('sum', { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }, true)
simple('mean', { 'f32', 'f16', 'bf16', 'f64' }, true)
simple('prod', { 'f32', 'f64', 'i64' }, true, 0.9, 1.1)

for _, name in ipairs({ 'var', 'std' }) do
  R[#R + 1] = {
    name = name, dtypes = { 'f32', 'f16', 'bf16', 'f64' }, tol = 4,
    cases = function(S, dt)
      local out = over_dims(S, dt)
      local c = {}
      for _, k in ipairs(out) do
        c[#c + 1] = { k[1], k[2], k[3], 1 }
        c[#c + 1] = { k[1] .. ' correction 0', k[2], k[3], 0 }
      end
      return c
    end,
    call = function(x, d, corr) return x[name](x, d, false, { correction = corr }) end,
    grads = function(S)
      return { { 'dim 3', function(x) return x[name](x, 3) end, g3(S) }, { 'correction 0', function(x) return x[name](x, 1, false, { correction = 0 }) end, g3(S) } }
    end,
  }
end

R[#R + 1] = {
  name = 'norm', dtypes = { 'f32', 'f16', 'bf16', 'f64' }, tol = 4,
  cases = function(S, dt)
    local c = {}
    for _, k in ipairs(over_dims(S, dt)) do
      for _, p in ipairs({ 1, 2, math.huge, 3 }) do c[#c + 1] = { k[1] .. ' p ' .. p, k[2], p, k[3] } end
    end
    return c
  end,
  call = function(x, p, d) return x:norm(p, d) end,
  grads = function(S)
    local x = S.rand({ 3, 4, 5 }, 'f64', 0.2, 2) -- away from 0, where |x| has a kink
    return { { 'p 2', function(t) return t:norm(2, 2) end, x }, { 'p 1', function(t) return t:norm(1, 3) end, x },
      { 'p 3', function(t) return t:norm(3, 1) end, x } }
  end,
}

-- max/min with a dim: values and 0-based indices (the first extreme); argmax/argmin
for _, name in ipairs({ 'max', 'min' }) do
  R[#R + 1] = {
    name = name, dtypes = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }, exact = true,
    cases = function(S, dt) return with_all(S, dt) end,
    call = function(x, d) if d then return x[name](x, d) end return x[name](x) end,
    grads = function(S) return { { 'dim 2', function(x) return (x[name](x, 2)) end, g3(S) } } end,
  }
end
for _, name in ipairs({ 'argmax', 'argmin' }) do
  R[#R + 1] = {
    name = name, dtypes = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' },
    cases = function(S, dt) return with_all(S, dt) end,
    call = function(x, d) if d then return x[name](x, d) end return x[name](x) end,
  }
end

for _, name in ipairs({ 'softmax', 'log_softmax' }) do
  R[#R + 1] = {
    name = name, dtypes = { 'f32', 'f16', 'bf16', 'f64' }, tol = 2,
    cases = function(S, dt) return over_dims(S, dt, -4, 4) end,
    call = function(x, d) return x[name](x, d) end,
    grads = function(S) return { { 'dim 3', function(x) return x[name](x, 3) end, g3(S) }, { 'dim 1', function(x) return x[name](x, 1) end, g3(S) } } end,
  }
end

return R
