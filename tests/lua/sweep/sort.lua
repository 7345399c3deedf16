-- tests/lua/sweep/sort.lua: sorting and selection for the tensor sweeps (tests/lua/tensor_sweep.lua
-- says what an entry is). Every result is compared exactly: the order is defined to the last tie
-- (stable, NaN largest, -0.0 tied with +0.0), so f16/bf16 inputs full of ties, NaN and signed
-- zeros give the same values and indices on the f64 reference and on CUDA.
local v100 = require 'v100'
local R = {}
local ALL = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }
local WITH_U8 = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8', 'bool' }

local function is_float(dt) return dt == 'f32' or dt == 'f16' or dt == 'bf16' or dt == 'f64' end

-- x rounded to integers (floats; integers are already): inputs full of ties
local function rnd(x) return v100.dtype_is_float(x.dtype) and x:round() or x end

-- x with NaN, -0.0 and +0.0 planted at random places (floats only)
local function specials(S, x, dt)
  if not is_float(dt) then return x end
  local m = S.rand(x.shape, 'f64', 0, 1)
  return x:masked_fill(m:lt(0.1), 0 / 0):masked_fill(m:ge(0.1):logical_and(m:lt(0.2)), -0.0)
      :masked_fill(m:ge(0.2):logical_and(m:lt(0.25)), 0.0)
end

-- {label, x, dim} over the layouts of a 3-D tensor and each dim, a long row, ties and edge shapes
local function over_dims(S, dt)
  local out = {}
  for _, l in ipairs(S.layouts({ 5, 7, 33 }, dt, nil, nil, true)) do
    for _, d in ipairs({ 1, 2, -1 }) do out[#out + 1] = { l[1] .. ' dim ' .. d, l[2], d } end
  end
  out[#out + 1] = { 'long row', S.rand({ 3, 3000 }, dt), 2 }
  out[#out + 1] = { 'nan and signed zeros', specials(S, S.rand({ 6, 40 }, dt), dt), 2 }
  out[#out + 1] = { 'nan and signed zeros, transposed',
    S.view(specials(S, S.rand({ 40, 6 }, dt), dt), function(b) return b:t() end), 2 }
  out[#out + 1] = { 'many ties', rnd(S.rand({ 4, 50 }, dt, -2, 2)), 2 }
  out[#out + 1] = { 'all equal', v100.ones({ 3, 9 }, { dtype = dt }), 2 }
  out[#out + 1] = { 'size-1 dim', S.rand({ 6, 1 }, dt), 2 }
  return out
end

-- Invariants each call checks on its own result (raising when one breaks), so the CPU sweep fails
-- on a broken op even though its f64 reference runs the same kernel: the values are x at the
-- indices, in order (NaN largest), ties in index order; ranks of kthvalue / median; unique and
-- searchsorted against brute-force counts.
local function broken(what) error('sort family invariant broken: ' .. what, 0) end
local function f64(t) return t:to({ dtype = 'f64', device = 'cpu' }) end
local function any(b) return b:sum():item() > 0 end
local function differ(a, b) return any(a:ne(b):logical_and(a:eq(a):logical_or(b:eq(b)))) end -- NaN == NaN

local function check_order(x, d, v, i, desc, keep)
  if x:dim() == 0 or v:numel() == 0 then return end
  local xf, vf, ic = f64(x), f64(v), i:cpu()
  if not keep then vf, ic = vf:unsqueeze(d), ic:unsqueeze(d) end
  if differ(xf:gather(d, ic), vf) then broken('the values are not the input at the indices') end
  local n = vf.shape[d < 0 and #vf.shape + d + 1 or d]
  if n < 2 then return end
  local a, b, ia, ib = vf:narrow(d, 1, n - 1), vf:narrow(d, 2, n - 1), ic:narrow(d, 1, n - 1), ic:narrow(d, 2, n - 1)
  local na, nb = a:isnan(), b:isnan()
  local bad = desc and a:lt(b):logical_or(nb:logical_and(na:logical_not()))
      or a:gt(b):logical_or(na:logical_and(nb:logical_not()))
  local tie = a:eq(b):logical_or(na:logical_and(nb))
  if any(bad) then broken('the values are out of order') end
  if any(tie:logical_and(ia:gt(ib))) then broken('equal values out of index order') end
end

-- v (keepdim form) is the k-th smallest of x along d: #(x < v) <= k - 1 < #(x <= v) in rows
-- without NaN; with median (nan_first) a row holding NaN gives NaN
local function check_rank(x, d, v, k, nan_row_gives_nan)
  if x:dim() == 0 then return end
  local xf, vf = f64(x), f64(v)
  local nan_row = xf:isnan():sum(d, true):gt(0)
  local lt, le = xf:lt(vf):sum(d, true), xf:le(vf):sum(d, true)
  local bad = lt:gt(k - 1):logical_or(le:lt(k)):logical_and(nan_row:logical_not())
  if any(bad) then broken('a value of the wrong rank') end
  if nan_row_gives_nan and any(nan_row:logical_and(vf:isnan():logical_not())) then broken('NaN row without NaN') end
end

-- f64 inputs for the gradient cases (distinct values: no tie at finite-difference distance)
local function g3(S) return S.rand({ 3, 4, 5 }, 'f64') end

R[#R + 1] = {
  name = 'sort', dtypes = WITH_U8, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, k in ipairs(over_dims(S, dt)) do
      c[#c + 1] = { k[1], k[2], k[3], false }
      c[#c + 1] = { k[1] .. ' descending', k[2], k[3], true }
    end
    c[#c + 1] = { 'empty dim', S.rand({ 4, 0 }, dt), 2, false }
    c[#c + 1] = { 'empty other dim', S.rand({ 0, 5 }, dt), 2, true }
    c[#c + 1] = { '0-dim', S.rand({}, dt), -1, false }
    return c
  end,
  call = function(x, d, desc)
    local v, i = x:sort(d, { descending = desc })
    check_order(x, d, v, i, desc, true)
    return v, i
  end,
  grads = function(S)
    return { { 'dim 2', function(x) return (x:sort(2)) end, g3(S) },
      { 'dim 1 descending', function(x) return (x:sort(1, { descending = true })) end, g3(S) } }
  end,
}

R[#R + 1] = {
  name = 'argsort', dtypes = WITH_U8,
  cases = function(S, dt)
    local c = {}
    for _, k in ipairs(over_dims(S, dt)) do
      c[#c + 1] = { k[1], k[2], k[3], false }
      c[#c + 1] = { k[1] .. ' descending', k[2], k[3], true }
    end
    return c
  end,
  call = function(x, d, desc)
    local i = x:argsort(d, { descending = desc })
    if x:dim() > 0 then check_order(x, d, x:gather(d, i), i, desc, true) end
    return i
  end,
}

R[#R + 1] = {
  name = 'topk', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, k in ipairs(over_dims(S, dt)) do
      c[#c + 1] = { k[1] .. ' k 1', k[2], 1, k[3], true }
      c[#c + 1] = { k[1] .. ' k 1 smallest', k[2], 1, k[3], false }
    end
    for _, l in ipairs(S.layouts({ 6, 9 }, dt)) do
      for _, kk in ipairs({ 0, 4, 9 }) do
        c[#c + 1] = { l[1] .. ' k ' .. kk, l[2], kk, 2, true }
        c[#c + 1] = { l[1] .. ' k ' .. kk .. ' smallest', l[2], kk, 2, false }
      end
    end
    c[#c + 1] = { 'nan, k 5', specials(S, S.rand({ 5, 30 }, dt), dt), 5, 2, true }
    c[#c + 1] = { 'ties, k 7', rnd(S.rand({ 5, 30 }, dt, -2, 2)), 7, 2, true }
    return c
  end,
  call = function(x, k, d, largest)
    local v, i = x:topk(k, d, { largest = largest })
    check_order(x, d, v, i, largest, true)
    return v, i
  end,
  grads = function(S)
    return { { 'k 2 dim 3', function(x) return (x:topk(2, 3)) end, g3(S) },
      { 'k 3 dim 1 smallest', function(x) return (x:topk(3, 1, { largest = false })) end, g3(S) } }
  end,
}

R[#R + 1] = {
  name = 'kthvalue', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 5, 7, 11 }, dt)) do
      for _, kk in ipairs({ 1, 6, 11 }) do c[#c + 1] = { l[1] .. ' k ' .. kk, l[2], kk, 3, false } end
      c[#c + 1] = { l[1] .. ' dim 1 keepdim', l[2], 3, 1, true }
    end
    c[#c + 1] = { 'nan, k 20', specials(S, S.rand({ 5, 30 }, dt), dt), 20, 2, false }
    c[#c + 1] = { 'ties', rnd(S.rand({ 5, 30 }, dt, -2, 2)), 15, 2, true }
    return c
  end,
  call = function(x, k, d, keep)
    local v, i = x:kthvalue(k, d, keep)
    check_order(x, d, v, i, false, keep)
    check_rank(x, d, keep and v or v:unsqueeze(d), k, false)
    return v, i
  end,
  grads = function(S)
    return { { 'k 2 dim 2', function(x) return (x:kthvalue(2, 2)) end, g3(S) },
      { 'k 3 dim 3 keepdim', function(x) return (x:kthvalue(3, 3, true)) end, g3(S) } }
  end,
}

R[#R + 1] = {
  name = 'median', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 5, 7, 12 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 3 (even)', l[2], 3, false }
      c[#c + 1] = { l[1] .. ' dim 2 (odd) keepdim', l[2], 2, true }
      c[#c + 1] = { l[1] .. ' all', l[2] }
    end
    c[#c + 1] = { 'nan rows', specials(S, S.rand({ 6, 9 }, dt), dt), 2, false }
    c[#c + 1] = { 'nan all', specials(S, S.rand({ 6, 9 }, dt), dt) }
    c[#c + 1] = { 'ties', rnd(S.rand({ 5, 30 }, dt, -2, 2)), 2, false }
    c[#c + 1] = { 'size-1 dim', S.rand({ 4, 1 }, dt), 2, false }
    return c
  end,
  call = function(x, d, keep)
    if not d then
      local m = x:median()
      check_rank(x:reshape(-1), 1, m:reshape(1), (x:numel() - 1) // 2 + 1, true)
      return m
    end
    local v, i = x:median(d, keep)
    check_order(x, d, v, i, false, keep)
    local n = x.shape[d < 0 and #x.shape + d + 1 or d]
    check_rank(x, d, keep and v or v:unsqueeze(d), (n - 1) // 2 + 1, true)
    return v, i
  end,
  grads = function(S)
    return { { 'dim 2', function(x) return (x:median(2)) end, g3(S) },
      { 'all', function(x) return x:median() end, g3(S) } }
  end,
}

R[#R + 1] = {
  name = 'unique', dtypes = WITH_U8, exact = true,
  cases = function(S, dt)
    local lo, hi = -6, 6
    if dt == 'u8' then lo = 0 end
    local c = {
      { 'repeats', rnd(S.rand({ 7, 9 }, dt, lo, hi)) },
      { 'transposed', S.view(rnd(S.rand({ 9, 7 }, dt, lo, hi)), function(b) return b:t() end) },
      { 'narrowed', S.view(rnd(S.rand({ 7, 12 }, dt, lo, hi)), function(b) return b:narrow(2, 3, 7) end) },
      { 'all equal', v100.ones({ 4, 5 }, { dtype = dt }) },
      { 'one element', S.rand({ 1 }, dt, lo, hi) },
      { 'empty', S.rand({ 3, 0 }, dt) },
    }
    if is_float(dt) then c[#c + 1] = { 'nan and signed zeros', specials(S, rnd(S.rand({ 50 }, dt, -2, 2)), dt) } end
    return c
  end,
  call = function(x)
    local u, inv, c = x:unique({ return_inverse = true, return_counts = true })
    local uf, xf = f64(u), f64(x):reshape(-1)
    if u:numel() > 1 then -- strictly ascending, NaNs (each its own value) last
      local a, b = uf:narrow(1, 1, u:numel() - 1), uf:narrow(1, 2, u:numel() - 1)
      if any(a:lt(b):logical_or(b:isnan()):logical_not()) then broken('unique values not strictly ascending') end
    end
    if x:numel() > 0 and differ(uf:index_select(1, inv:cpu():reshape(-1)), xf) then broken('values[inverse] ~= x') end
    if c:sum():item() ~= x:numel() or (c:numel() > 0 and c:min():item() < 1) then broken('counts') end
    return u, inv, c
  end,
}

R[#R + 1] = {
  name = 'searchsorted', dtypes = WITH_U8,
  cases = function(S, dt)
    local c = {}
    local seq = S.rand({ 40 }, dt)
    for _, l in ipairs(S.layouts({ 6, 9 }, dt)) do
      c[#c + 1] = { '1-D sequence, ' .. l[1] .. ' values', seq, l[2], false, false }
      c[#c + 1] = { '1-D sequence, ' .. l[1] .. ' values, right', seq, l[2], true, false }
    end
    c[#c + 1] = { 'batched sequence', S.rand({ 3, 4, 25 }, dt), S.rand({ 3, 4, 10 }, dt), false, true }
    c[#c + 1] = { 'batched sequence, right, i32', S.rand({ 3, 25 }, dt), S.rand({ 3, 10 }, dt), true, true }
    c[#c + 1] = { 'values equal to boundaries', rnd(S.rand({ 30 }, dt, -3, 3)), rnd(S.rand({ 20 }, dt, -3, 3)),
      false, false }
    c[#c + 1] = { 'equal, right', rnd(S.rand({ 30 }, dt, -3, 3)), rnd(S.rand({ 20 }, dt, -3, 3)), true, false }
    c[#c + 1] = { 'a number', seq, 1, false, false }
    c[#c + 1] = { 'empty sequence', S.rand({ 0 }, dt), S.rand({ 5 }, dt), false, false }
    if is_float(dt) then c[#c + 1] = { 'nan values', seq, specials(S, S.rand({ 30 }, dt), dt), false, false } end
    return c
  end,
  -- the sequence is sorted by the op under test's sibling (sort is swept above)
  call = function(seq, v, right, i32)
    local s = seq:sort()
    local r = v100.searchsorted(s, v, { right = right, out_int32 = i32 })
    if v100.is_tensor(v) and v:numel() > 0 then -- brute force: how many boundaries are < v (<= v when right)
      local sf, vf = f64(s), f64(v):unsqueeze(-1)
      if s:dim() > 1 then sf = sf:unsqueeze(-2) end
      local cnt = (right and sf:le(vf) or sf:lt(vf)):sum(-1)
      cnt = v100.where(f64(v):isnan(), s.shape[#s.shape], cnt) -- a NaN value goes to n
      if differ(f64(r), f64(cnt)) then broken('searchsorted against counting') end
    end
    return r
  end,
}

return R
