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

-- an i64 index of `shape` whose values along `dim` are distinct, drawn from [0, n) (n >= the
-- size along dim): scatter's assignment leaves repeated positions unspecified, so the sweep (CPU
-- against f64, CUDA against the CPU) writes each position at most once
local function distinct(shape, dim, n)
  local idx = v100.zeros(shape, { dtype = 'i64' })
  local total = 1
  for _, s in ipairs(shape) do total = total * s end
  if total == 0 then return idx end
  local other = {}
  for d, s in ipairs(shape) do if d ~= dim then other[#other + 1] = { d, s } end end
  local lines = total // shape[dim]
  local flat = {}
  for l = 0, lines - 1 do
    local perm = {}
    for k = 1, n do perm[k] = k - 1 end
    for k = n, 2, -1 do
      local j = math.random(k)
      perm[k], perm[j] = perm[j], perm[k]
    end
    flat[l] = perm
  end
  -- element (row-major) -> its line (the coordinates other than dim) and its position along dim
  local t = {}
  local strides, st = {}, 1
  for d = #shape, 1, -1 do strides[d] = st; st = st * shape[d] end
  for e = 0, total - 1 do
    local line, mul, k = 0, 1, 0
    for d = #shape, 1, -1 do
      local c = (e // strides[d]) % shape[d]
      if d == dim then k = c else line = line + c * mul; mul = mul * shape[d] end
    end
    t[e + 1] = flat[line][k + 1]
  end
  return v100.tensor(t, { dtype = 'i64' }):view(shape)
end

R[#R + 1] = {
  name = 'scatter', dtypes = ALL,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 6, 7 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1', l[2], 1, distinct({ 4, 7 }, 1, 6), S.rand({ 5, 8 }, dt) }
      c[#c + 1] = { l[1] .. ' dim 2', l[2], 2, distinct({ 6, 5 }, 2, 7), S.rand({ 6, 5 }, dt) }
      c[#c + 1] = { l[1] .. ' src ' .. l[1], S.rand({ 6, 7 }, dt), 2, distinct({ 6, 7 }, 2, 7), l[2] }
    end
    c[#c + 1] = { 'a number', S.rand({ 6, 7 }, dt), -1, distinct({ 3, 4 }, 2, 7), 3 }
    c[#c + 1] = { '3-d dim 2', S.rand({ 3, 8, 5 }, dt), 2, distinct({ 3, 6, 5 }, 2, 8), S.rand({ 3, 6, 5 }, dt) }
    c[#c + 1] = { 'empty index', S.rand({ 4, 5 }, dt), 1, v100.zeros({ 0, 5 }, { dtype = 'i64' }), S.rand({ 4, 5 }, dt) }
    c[#c + 1] = { 'size-1 dims', S.rand({ 1, 5 }, dt), 2, distinct({ 1, 5 }, 2, 5), S.rand({ 1, 5 }, dt) }
    c[#c + 1] = { 'reduce add', S.rand({ 5, 6 }, dt), 1, idx(S, { 8, 6 }, 5), S.rand({ 8, 6 }, dt), { reduce = 'add' } }
    -- small factors: products of repeats stay exact in i32 and within range in f16
    c[#c + 1] = { 'reduce multiply', S.rand({ 5, 6 }, dt, -2, 2), 1, idx(S, { 8, 6 }, 5), S.rand({ 8, 6 }, dt, -2, 2), { reduce = 'multiply' } }
    c[#c + 1] = { 'reduce multiply a number', S.rand({ 5, 6 }, dt, -2, 2), 2, idx(S, { 5, 4 }, 6), 3, { reduce = 'multiply' } }
    return c
  end,
  call = function(x, d, i, src, opts) return x:scatter(d, i, src, opts) end,
  grads = function(S)
    local i = v100.tensor({ { 2, 0 }, { 1, 2 } }, { dtype = 'i64' })
    return {
      { 'self and src', function(x, s, ix) return x:scatter(2, ix, s) end, S.rand({ 2, 3 }, 'f64'), S.rand({ 2, 4 }, 'f64'), i },
      { 'a number', function(x, ix) return x:scatter(2, ix, 0.5) end, S.rand({ 2, 3 }, 'f64'), i },
      { 'in place', function(x, s, ix) return (x * 1):scatter_(1, ix, s) end, S.rand({ 3, 2 }, 'f64'), S.rand({ 2, 2 }, 'f64'), i },
    }
  end,
}

-- i64 tensors of `shape` in [-n, n) (negative values count from the end, as PyTorch's indexing)
local function signed(S, shape, n) return S.rand(shape, 'i64', -n, n - 1) end

R[#R + 1] = {
  name = 'index_put', dtypes = ALL,
  cases = function(S, dt)
    local c = {}
    local rows = distinct({ 4 }, 1, 6)
    for _, l in ipairs(S.layouts({ 6, 7 }, dt)) do
      c[#c + 1] = { l[1] .. ' rows', l[2], { rows }, S.rand({ 4, 7 }, dt) }
      c[#c + 1] = { l[1] .. ' accumulate', l[2], { signed(S, { 9 }, 6), signed(S, { 9 }, 7) }, S.rand({ 9 }, dt), { accumulate = true } }
    end
    -- distinct positions over both dims: the flat positions of a permutation
    local lin = distinct({ 10 }, 1, 42)
    c[#c + 1] = { 'two indices', S.rand({ 6, 7 }, dt), { lin // 7, lin % 7 - 7 }, S.rand({ 10 }, dt) }
    c[#c + 1] = { 'broadcast indices', S.rand({ 6, 7, 3 }, dt), { distinct({ 3, 1 }, 1, 6), distinct({ 1, 4 }, 2, 7) }, S.rand({ 3 }, dt) }
    c[#c + 1] = { 'a number', S.rand({ 6, 7 }, dt), { rows }, 5 }
    c[#c + 1] = { 'bool mask rows', S.rand({ 6, 7 }, dt), { S.rand({ 6 }, 'bool') }, S.rand({ 7 }, dt) }
    c[#c + 1] = { 'empty', S.rand({ 6, 7 }, dt), { v100.zeros({ 0 }, { dtype = 'i64' }) }, S.rand({ 7 }, dt) }
    c[#c + 1] = { 'i32 repeated accumulate', S.rand({ 5, 2 }, dt), { v100.tensor({ 1, 1, 4, 1 }, { dtype = 'i32' }) }, S.rand({ 4, 2 }, dt), { accumulate = true } }
    return c
  end,
  call = function(x, i, v, opts) return x:index_put(i, v, opts) end,
  grads = function(S)
    local r = v100.tensor({ 2, 0 }, { dtype = 'i64' })
    local a, b = v100.tensor({ 0, 2, 0 }, { dtype = 'i64' }), v100.tensor({ 1, 1, 1 }, { dtype = 'i64' })
    return {
      { 'rows', function(x, v, i) return x:index_put({ i }, v) end, S.rand({ 3, 2 }, 'f64'), S.rand({ 2, 2 }, 'f64'), r },
      { 'broadcast values', function(x, v, i) return x:index_put({ i }, v) end, S.rand({ 3, 2 }, 'f64'), S.rand({ 2 }, 'f64'), r },
      { 'accumulate repeated', function(x, v, i, j) return x:index_put({ i, j }, v, { accumulate = true }) end,
        S.rand({ 3, 2 }, 'f64'), S.rand({ 3 }, 'f64'), a, b },
      { 'in place', function(x, v, i, j) return (x * 1):index_put_({ i, j }, v, { accumulate = true }) end,
        S.rand({ 3, 2 }, 'f64'), S.rand({ 1 }, 'f64'), a, b },
    }
  end,
}

R[#R + 1] = {
  name = 'one_hot', dtypes = { 'i64', 'i32' },
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 4, 5 }, dt, 0, 6)) do c[#c + 1] = { l[1], l[2], 9 } end
    c[#c + 1] = { 'inferred', S.rand({ 7 }, dt, 0, 5), -1 }
    c[#c + 1] = { 'empty', v100.zeros({ 0, 3 }, { dtype = dt }), 4 }
    c[#c + 1] = { '0-dim', v100.tensor(2, { dtype = dt }), 3 }
    return c
  end,
  call = function(t, n) return t:one_hot(n) end,
}

R[#R + 1] = {
  name = 'index_add', dtypes = ALL,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 6, 5 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1 repeated', l[2], 1, idx(S, { 9 }, 6), S.rand({ 9, 5 }, dt) }
      c[#c + 1] = { l[1] .. ' source', S.rand({ 6, 7 }, dt), 2, idx(S, { 5 }, 7), l[2] }
    end
    c[#c + 1] = { 'empty index', S.rand({ 4, 3 }, dt), 1, v100.zeros({ 0 }, { dtype = 'i64' }), S.rand({ 0, 3 }, dt) }
    c[#c + 1] = { '3-d i32 index', S.rand({ 2, 4, 3 }, dt), -1, S.rand({ 2 }, 'i32', 0, 2), S.rand({ 2, 4, 2 }, dt) }
    return c
  end,
  call = function(x, d, i, s) return x:index_add(d, i, s) end,
  grads = function(S)
    local i = v100.tensor({ 2, 0, 2 }, { dtype = 'i64' })
    return {
      { 'repeated', function(x, s, ix) return x:index_add(1, ix, s) end, S.rand({ 3, 2 }, 'f64'), S.rand({ 3, 2 }, 'f64'), i },
      { 'in place', function(x, s, ix) return (x * 1):index_add_(2, ix, s) end, S.rand({ 2, 3 }, 'f64'), S.rand({ 2, 3 }, 'f64'), i },
    }
  end,
}

R[#R + 1] = {
  name = 'index_copy', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 6, 5 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1', l[2], 1, distinct({ 4 }, 1, 6), S.rand({ 4, 5 }, dt) }
      c[#c + 1] = { l[1] .. ' source', S.rand({ 6, 7 }, dt), 2, distinct({ 5 }, 1, 7), l[2] }
    end
    c[#c + 1] = { 'empty index', S.rand({ 4, 3 }, dt), 2, v100.zeros({ 0 }, { dtype = 'i64' }), S.rand({ 4, 0 }, dt) }
    return c
  end,
  call = function(x, d, i, s) return x:index_copy(d, i, s) end,
  grads = function(S)
    local i = v100.tensor({ 2, 0 }, { dtype = 'i64' })
    return {
      { 'rows', function(x, s, ix) return x:index_copy(1, ix, s) end, S.rand({ 3, 2 }, 'f64'), S.rand({ 2, 2 }, 'f64'), i },
      { 'in place', function(x, s, ix) return (x * 1):index_copy_(-1, ix, s) end, S.rand({ 2, 3 }, 'f64'), S.rand({ 2, 2 }, 'f64'), i },
    }
  end,
}

R[#R + 1] = {
  name = 'index_fill', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 6, 5 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1 repeated', l[2], 1, idx(S, { 4 }, 6), -3 }
      c[#c + 1] = { l[1] .. ' dim 2', l[2], 2, idx(S, { 2 }, 5), 7 }
    end
    c[#c + 1] = { 'empty index', S.rand({ 4, 3 }, dt), 1, v100.zeros({ 0 }, { dtype = 'i64' }), 1 }
    return c
  end,
  call = function(x, d, i, v) return x:index_fill(d, i, v) end,
  grads = function(S)
    local i = v100.tensor({ 1, 1 }, { dtype = 'i64' })
    return { { 'repeated', function(x, ix) return x:index_fill(2, ix, 0.5) end, S.rand({ 2, 3 }, 'f64'), i } }
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
