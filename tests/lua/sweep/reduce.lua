-- tests/lua/sweep/reduce.lua: the reductions' cases for the tensor sweeps (tests/lua/tensor_sweep.lua
-- says what an entry is; test_tensor_sweep.lua runs them on the CPU against f64,
-- gpu_tensor_sweep.lua on CUDA against the CPU). Shapes put the reduced dim first, middle and last,
-- with a long dim (the vector and multi-block paths) and an odd one.
local v100 = require 'v100'
local R = {}

local function isfloat(dt) return dt == 'f32' or dt == 'f16' or dt == 'bf16' or dt == 'f64' end

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
      for i, k in ipairs(out) do
        c[#c + 1] = { k[1], k[2], k[3], 1 }
        c[#c + 1] = { k[1] .. ' correction 0', k[2], k[3], 0 }
        if i % 3 == 0 then c[#c + 1] = { k[1] .. ' correction 2', k[2], k[3], 2 } end
      end
      -- PyTorch's edges: N <= correction divides by max(0, N - correction): inf or NaN; an empty
      -- reduction is NaN; all dims
      c[#c + 1] = { 'one element, correction 1', S.rand({ 1, 4 }, dt), 1, 1 }
      c[#c + 1] = { 'two elements, correction 2', S.rand({ 2, 4 }, dt), 1, 2 }
      c[#c + 1] = { 'empty dim', S.rand({ 0, 4 }, dt), 1, 1 }
      c[#c + 1] = { 'all dims correction 2', S.rand({ 6, 5 }, dt), { 1, 2 }, 2 }
      return c
    end,
    call = function(x, d, corr) return x[name](x, d, false, { correction = corr }) end,
    grads = function(S)
      return { { 'dim 3', function(x) return x[name](x, 3) end, g3(S) }, { 'correction 0', function(x) return x[name](x, 1, false, { correction = 0 }) end, g3(S) },
        { 'correction 2', function(x) return x[name](x, 2, false, { correction = 2 }) end, g3(S) } }
    end,
  }
end

R[#R + 1] = {
  name = 'norm', dtypes = { 'f32', 'f16', 'bf16', 'f64' }, tol = 4,
  cases = function(S, dt)
    local c = {}
    for _, k in ipairs(over_dims(S, dt)) do
      for _, p in ipairs({ 1, 2, math.huge, 3, 0 }) do c[#c + 1] = { k[1] .. ' p ' .. p, k[2], p, k[3] } end
    end
    -- p = 0 counts the non-zeros (torch.linalg.vector_norm); finite p over nothing give 0
    c[#c + 1] = { 'p 0 with zeros', S.rand({ 6, 9 }, 'i32', -1, 1):to(dt), 0, 2 }
    for _, p in ipairs({ 0, 1, 2, 3 }) do
      c[#c + 1] = { 'empty dim p ' .. p, S.rand({ 0, 4 }, dt), p, 1 }
      c[#c + 1] = { 'empty tensor p ' .. p, S.rand({ 0, 4 }, dt), p, nil }
    end
    return c
  end,
  call = function(x, p, d) return x:norm(p, d) end,
  grads = function(S)
    local x = S.rand({ 3, 4, 5 }, 'f64', 0.2, 2) -- away from 0, where |x| has a kink
    return { { 'p 2', function(t) return t:norm(2, 2) end, x }, { 'p 1', function(t) return t:norm(1, 3) end, x },
      { 'p 3', function(t) return t:norm(3, 1) end, x }, { 'p 0 (zero)', function(t) return t:norm(0, 2) end, x } }
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

-- ---- scans and more reductions (cumsum, cumprod, logsumexp, any, all, count_nonzero) ----

-- {label, x, dim} of the scans: every layout of a 3-D tensor along each dim, a long row (the CUDA
-- block scan), size-1 and empty dims, NaN and inf (floats)
local function scan_cases(S, dt, lo, hi)
  local out = over_dims(S, dt, lo, hi)
  out[#out + 1] = { 'long column', S.rand({ 5000, 3 }, dt, lo, hi), 1 }
  out[#out + 1] = { 'size-1 dim', S.rand({ 4, 1, 6 }, dt, lo, hi), 2 }
  out[#out + 1] = { 'empty dim scanned', S.rand({ 0, 4 }, dt, lo, hi), 1 }
  out[#out + 1] = { 'empty other dim', S.rand({ 3, 0 }, dt, lo, hi), 1 }
  out[#out + 1] = { '1-D', S.rand({ 300 }, dt, lo, hi), -1 }
  if isfloat(dt) then
    out[#out + 1] = { 'nan and inf', v100.tensor({ { 1, 0 / 0, 1 }, { 1 / 0, 1, -1 / 0 }, { 1, 1, 1 / 0 } }):to(dt), 2 }
  end
  return out
end

-- scans of every dtype (integers and bool give i64); the cumprod inputs stay near 1 so a long
-- row neither overflows nor vanishes in floats, while integers wrap as int64 (the reference does
-- too)
for _, name in ipairs({ 'cumsum', 'cumprod' }) do
  local prod = name == 'cumprod'
  R[#R + 1] = {
    name = name, dtypes = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'bool' }, tol = 4,
    cases = function(S, dt)
      local lo, hi
      if prod and isfloat(dt) then lo, hi = 0.9, 1.1 end
      if prod and dt:sub(1, 1) == 'i' then lo, hi = -3, 3 end
      local c = scan_cases(S, dt, lo, hi)
      if dt == 'f32' then c[#c + 1] = { 'dtype f64', S.rand({ 4, 9 }, dt, lo, hi), 2, { dtype = 'f64' } } end
      if dt == 'i32' then c[#c + 1] = { 'dtype f32', S.rand({ 4, 9 }, dt, lo, hi), 2, { dtype = 'f32' } } end
      if prod and dt == 'i64' then c[#c + 1] = { 'overflow wraps', v100.full({ 2, 70 }, 3, { dtype = 'i64' }), 2 } end
      return c
    end,
    call = function(x, d, o) return x[name](x, d, o) end,
    grads = function(S)
      local g = {
        { 'dim 1', function(x) return x[name](x, 1) end, S.rand({ 3, 4, 5 }, 'f64', 0.5, 1.5) },
        { 'dim 2', function(x) return x[name](x, 2) end, S.rand({ 3, 4, 5 }, 'f64', 0.5, 1.5) },
        { 'dim -1', function(x) return x[name](x, -1) end, S.rand({ 3, 4, 5 }, 'f64', 0.5, 1.5) },
      }
      if prod then
        -- rows with one zero, two zeros, a leading zero and trailing zeros (PyTorch's hard cases)
        local z = v100.tensor({ { 0.5, 1.2, 0, 0.8, 1.1, 0.9 }, { 1.3, 0, 0.7, 0, 1.4, 0.6 }, { 0, 0.9, 1.2, 0.7, 0, 0 } },
          { dtype = 'f64' })
        g[#g + 1] = { 'zeros along dim 2', function(x) return x:cumprod(2) end, z }
        g[#g + 1] = { 'zeros along dim 1', function(x) return x:cumprod(1) end, z:t():contiguous() }
      end
      return g
    end,
  }
end

-- logsumexp over one dim, several dims and all, keepdim, -inf rows, +inf, NaN, an empty dim;
-- integers give f32
R[#R + 1] = {
  name = 'logsumexp', dtypes = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }, tol = 2,
  cases = function(S, dt)
    local out = {}
    local lo, hi = -8, 8
    for _, k in ipairs(over_dims(S, dt, lo, hi)) do out[#out + 1] = { k[1], k[2], k[3], false } end
    out[#out + 1] = { 'dims 1 and 3 keepdim', S.rand({ 5, 7, 33 }, dt, lo, hi), { 1, 3 }, true }
    out[#out + 1] = { 'all dims', S.rand({ 5, 7, 3 }, dt, lo, hi), { 1, 2, 3 }, false }
    out[#out + 1] = { 'size-1 dim', S.rand({ 4, 1 }, dt, lo, hi), 2, false }
    out[#out + 1] = { 'empty dim', S.rand({ 0, 4 }, dt, lo, hi), 1, false }
    if isfloat(dt) then
      local inf = 1 / 0
      out[#out + 1] = { '-inf rows, +inf, NaN',
        v100.tensor({ { -inf, -inf, -inf }, { 1, inf, 2 }, { 1, 0 / 0, 2 }, { -inf, 0, 1 } }):to(dt), 2, true }
    end
    return out
  end,
  call = function(x, d, k) return x:logsumexp(d, k) end,
  grads = function(S)
    return { { 'dim 2', function(x) return x:logsumexp(2) end, g3(S) },
      { 'dims 1 and 3 keepdim', function(x) return x:logsumexp({ 1, 3 }, true) end, g3(S) },
      { 'with -inf', function(x) return x:logsumexp(2) end,
        v100.tensor({ { -1 / 0, 0.5, 1.2 }, { 0.3, -1 / 0, -0.4 } }, { dtype = 'f64' }) } }
  end,
}

-- any / all / count_nonzero: inputs with many zeros (0 w.p. 4/5) and with few (1/3), so rows of
-- each answer occur; NaN counts as non-zero
local function zero_rich(S, shape, dt, few)
  local x = few and S.rand(shape, 'i32', -1, 1) or S.rand(shape, 'i32', -3, 1):clamp(0, 1)
  if dt == 'bool' then return x:ne(0) end
  return (x * S.rand(shape, 'i32', 1, 9)):to(dt)
end
local function nz_cases(S, dt)
  local out = {}
  for _, few in ipairs({ false, true }) do
    local tag = few and 'few zeros ' or 'many zeros '
    local shape = { 5, 7, 3 }
    out[#out + 1] = { tag .. 'contiguous', zero_rich(S, shape, dt, few) }
    out[#out + 1] = { tag .. 'transposed', S.view(zero_rich(S, { 5, 3, 7 }, dt, few), function(b) return b:transpose(2, 3) end) }
    out[#out + 1] = { tag .. 'narrowed', S.view(zero_rich(S, { 5, 7, 6 }, dt, few), function(b) return b:narrow(3, 2, 3) end) }
  end
  local c = {}
  for _, k in ipairs(out) do
    for _, d in ipairs({ 1, 2, 3, -1 }) do c[#c + 1] = { k[1] .. ' dim ' .. d, k[2], d } end
    c[#c + 1] = { k[1] .. ' dims 1, 3', k[2], { 1, 3 } }
    c[#c + 1] = { k[1] .. ' all', k[2], nil }
  end
  c[#c + 1] = { 'long row', zero_rich(S, { 3, 5000 }, dt, true), 2 }
  c[#c + 1] = { 'empty dim', zero_rich(S, { 0, 4 }, dt), 1 }
  c[#c + 1] = { 'empty all', zero_rich(S, { 0, 4 }, dt), nil }
  if isfloat(dt) then
    c[#c + 1] = { 'nan', v100.tensor({ { 0, 0 / 0, 0 }, { 0, 0, 0 }, { 0 / 0, 1, 1 / 0 } }):to(dt), 2 }
  end
  return c
end
local NZ_DTYPES = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8', 'bool' }
for _, name in ipairs({ 'any', 'all' }) do
  R[#R + 1] = {
    name = name, dtypes = NZ_DTYPES,
    cases = function(S, dt)
      local c = nz_cases(S, dt)
      for i = 1, #c do if type(c[i][3]) == 'number' and i % 2 == 0 then c[i][4] = true end end -- keepdim
      return c
    end,
    call = function(x, d, k) return x[name](x, d, k) end,
  }
end
R[#R + 1] = {
  name = 'count_nonzero', dtypes = NZ_DTYPES,
  cases = function(S, dt) return nz_cases(S, dt) end,
  call = function(x, d) return x:count_nonzero(d) end,
}

return R
