-- tests/lua/sweep/index.lua: the index ops' cases for the tensor sweeps (tests/lua/tensor_sweep.lua
-- says what an entry is). Index values are 0-based; every index tensor is drawn in range.
local v100 = require 'v100'
local R = {}
local ALL = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }

-- an i64 index tensor of `shape` with values in [0, n)
local function idx(S, shape, n) return S.rand(shape, 'i64', 0, n - 1) end

R[#R + 1] = {
  name = 'gather', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 6, 9 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1', l[2], 1, idx(S, { 4, 9 }, 6) }
      c[#c + 1] = { l[1] .. ' dim 2', l[2], 2, idx(S, { 6, 5 }, 9) }
    end
    c[#c + 1] = { '3-d dim 2 i32 index', S.rand({ 3, 8, 5 }, dt), 2, S.rand({ 3, 11, 5 }, 'i32', 0, 7) }
    return c
  end,
  call = function(x, d, i) return x:gather(d, i) end,
  grads = function(S)
    return { { 'dim 2', function(x, i) return x:gather(2, i) end, S.rand({ 2, 3 }, 'f64'), v100.tensor({ { 0, 2, 2 }, { 1, 1, 0 } }, { dtype = 'i64' }) } }
  end,
}

R[#R + 1] = {
  name = 'scatter_add', dtypes = { 'f32', 'f64', 'i32', 'i64' },
  cases = function(S, dt)
    return {
      { 'dim 1', S.rand({ 5, 6 }, dt), 1, idx(S, { 8, 6 }, 5), S.rand({ 8, 6 }, dt) },
      { 'dim 2', S.rand({ 5, 6 }, dt), 2, idx(S, { 5, 9 }, 6), S.rand({ 5, 9 }, dt) },
    }
  end,
  call = function(x, d, i, src) return x:scatter_add(d, i, src) end,
  grads = function(S)
    local i = v100.tensor({ { 0, 2, 0 }, { 1, 1, 2 } }, { dtype = 'i64' })
    return { { 'dim 2', function(x, s, ix) return x:scatter_add(2, ix, s) end, S.rand({ 2, 3 }, 'f64'), S.rand({ 2, 3 }, 'f64'), i } }
  end,
}

R[#R + 1] = {
  name = 'index_select', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 7, 10 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1', l[2], 1, idx(S, { 12 }, 7) }
      c[#c + 1] = { l[1] .. ' dim 2', l[2], 2, idx(S, { 3 }, 10) }
    end
    return c
  end,
  call = function(x, d, i) return x:index_select(d, i) end,
  grads = function(S)
    return { { 'repeated rows', function(x, i) return x:index_select(1, i) end, S.rand({ 3, 4 }, 'f64'), v100.tensor({ 2, 0, 2 }, { dtype = 'i64' }) } }
  end,
}

R[#R + 1] = {
  name = 'masked_fill', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 9, 11 }, dt)) do c[#c + 1] = { l[1], l[2], S.rand({ 9, 11 }, 'bool'), 3 } end
    c[#c + 1] = { 'broadcast mask', S.rand({ 9, 11 }, dt), S.rand({ 1, 11 }, 'bool'), -1 }
    return c
  end,
  call = function(x, m, v) return x:masked_fill(m, v) end,
  grads = function(S)
    local m = v100.tensor({ { true, false, false }, { false, true, false } })
    return { { 'mask', function(x, mk) return x:masked_fill(mk, 0.5) end, S.rand({ 2, 3 }, 'f64'), m } }
  end,
}

R[#R + 1] = {
  name = 'masked_select', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 9, 11 }, dt)) do c[#c + 1] = { l[1], l[2], S.rand({ 9, 11 }, 'bool') } end
    return c
  end,
  call = function(x, m) return x:masked_select(m) end,
  grads = function(S)
    local m = v100.tensor({ { true, false, true }, { false, true, false } })
    return { { 'mask', function(x, mk) return x:masked_select(mk) end, S.rand({ 2, 3 }, 'f64'), m } }
  end,
}

R[#R + 1] = {
  name = 'nonzero', dtypes = ALL,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 6, 8 }, dt, -1, 1)) do c[#c + 1] = { l[1], l[2] } end
    c[#c + 1] = { '3-d', S.rand({ 3, 4, 5 }, dt, -1, 1) }
    return c
  end,
  -- float inputs drawn in [-1, 1) hold few exact zeros: round them to make some
  call = function(x) return (v100.dtype_is_float(x.dtype) and x:round() or x):nonzero() end,
}

R[#R + 1] = {
  name = 'where', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 8, 9 }, dt)) do c[#c + 1] = { l[1], S.rand({ 8, 9 }, 'bool'), l[2], S.rand({ 8, 9 }, dt) } end
    c[#c + 1] = { 'broadcast', S.rand({ 8, 1 }, 'bool'), S.rand({ 1, 9 }, dt), S.rand({ 8, 9 }, dt) }
    c[#c + 1] = { 'a number', S.rand({ 8, 9 }, 'bool'), S.rand({ 8, 9 }, dt), 2 }
    return c
  end,
  call = function(m, a, b) return v100.where(m, a, b) end,
  grads = function(S)
    local m = v100.tensor({ { true, false, true }, { false, true, false } })
    return { { 'both', function(a, b, mk) return v100.where(mk, a, b) end, S.rand({ 2, 3 }, 'f64'), S.rand({ 2, 3 }, 'f64'), m } }
  end,
}

return R
