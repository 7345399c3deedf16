-- Reductions, softmax and log_softmax on the CPU against direct computation in Lua (f64).
local T = require 'testlib'
local v100 = require 'v100'

local FLOATS = { 'f64', 'f32', 'f16', 'bf16' }

-- dims specs: nil = all; numbers and tables, 1-based, negative from the end
local DIMS = { 1, 2, 3, -1, -2, { 1, 3 }, { 2, 3 }, { -1, 1 }, { 1, 2, 3 } }

local function dstr(d)
  if d == nil then return 'all' end
  if type(d) == 'number' then return tostring(d) end
  local p = {}
  for i, x in ipairs(d) do p[i] = tostring(x) end
  return '{' .. table.concat(p, ',') .. '}'
end

local function absref(x) return T.map(x, math.abs) end

-- f64: tight; low precision: error scale is the sum of |x| in the group
local function check_red(r, ref, bound, dt, msg)
  if dt == 'f64' then
    T.allclose(r, ref, 1e-12, 1e-13, msg)
  else
    local tol = ({ f32 = 1e-5, f16 = 2e-3, bf16 = 1.2e-2 })[dt]
    T.within(r, ref, bound, tol, msg)
  end
end

T.test('sum over single dims, several dims, all dims, keepdim, negative dims', function()
  for _, dt in ipairs(FLOATS) do
    for _, v in ipairs(T.variants({ 3, 4, 5 }, dt)) do
      for _, d in ipairs(DIMS) do
        for _, keep in ipairs({ false, true }) do
          local r = v.t:sum(d, keep)
          local ref = T.ref_reduce(v.ref, d, keep, T.ref_sum)
          local bound = T.ref_reduce(absref(v.ref), d, keep, T.ref_sum)
          T.eq(r.dtype, dt, 'sum dtype')
          check_red(r, ref, bound, dt, string.format('sum %s dims %s keepdim %s %s', dt, dstr(d), tostring(keep), v.name))
        end
      end
      local all = v.t:sum()
      T.eq(all.shape, {}, 'sum() is 0-dim')
      check_red(all, T.ref_reduce(v.ref, nil, false, T.ref_sum), T.ref_reduce(absref(v.ref), nil, false, T.ref_sum),
        dt, 'sum() ' .. dt .. ' ' .. v.name)
    end
  end
end)

T.test('sum of integers is exact', function()
  for _, dt in ipairs({ 'i32', 'i64' }) do
    local a, ar = T.make({ 4, 7 }, dt, -1000, 1000)
    T.alleq(a:sum(2), T.ref_reduce(ar, 2, false, T.ref_sum), 'int sum dim 2')
    T.eq(a:sum():item(), T.ref_reduce(ar, nil, false, T.ref_sum), 'int sum all')
    T.ok(math.type(a:sum():item()) == 'integer', 'sum of ' .. dt .. ' is an integer dtype (item gives an integer)')
  end
  local b, br = T.make({ 5, 6 }, 'bool')
  T.eq(b:sum():item(), T.ref_reduce(br, nil, false, T.ref_sum), 'sum of bools counts')
end)

T.test('mean and prod', function()
  for _, dt in ipairs(FLOATS) do
    for _, v in ipairs(T.variants({ 3, 4, 5 }, dt, 0.6, 1.5)) do
      for _, d in ipairs({ 1, -1, { 1, 2 }, { 1, 2, 3 } }) do
        local m = v.t:mean(d, true)
        check_red(m, T.ref_reduce(v.ref, d, true, T.ref_mean), T.ref_reduce(v.ref, d, true, T.ref_mean), dt,
          'mean ' .. dt .. ' ' .. dstr(d) .. ' ' .. v.name)
        local p = v.t:prod(d)
        local pref = T.ref_reduce(v.ref, d, false, T.ref_prod)
        -- a product of 60 values in [0.6, 1.5] can pass f16's largest finite value: values from 65520 on round to inf
        if dt == 'f16' then pref = T.map(pref, function(x) return math.abs(x) >= 65520 and x * math.huge or x end) end
        local tol = ({ f64 = 1e-12, f32 = 2e-5, f16 = 2e-2, bf16 = 1e-1 })[dt]
        T.allclose(p, pref, tol, 0, 'prod ' .. dt .. ' ' .. dstr(d) .. ' ' .. v.name)
      end
      T.eq(v.t:mean().shape, {})
    end
  end
  local i, ir = T.make({ 3, 4 }, 'i64', -5, 5)
  T.alleq(i:prod(2), T.ref_reduce(ir, 2, false, T.ref_prod), 'int prod')
end)

T.test('var and std with correction 0 and 1', function()
  for _, dt in ipairs({ 'f64', 'f32' }) do
    local tol = dt == 'f64' and 1e-11 or 2e-5
    for _, v in ipairs(T.variants({ 4, 6, 5 }, dt)) do
      for _, d in ipairs({ 1, 2, -1, { 1, 3 }, { 1, 2, 3 } }) do
        for _, corr in ipairs({ 0, 1 }) do
          for _, keep in ipairs({ false, true }) do
            local vr = v.t:var(d, keep, { correction = corr })
            local ref = T.ref_reduce(v.ref, d, keep, function(l) return T.ref_var(l, corr) end)
            local msg = string.format('var %s dims %s corr %d keep %s %s', dt, dstr(d), corr, tostring(keep), v.name)
            T.allclose(vr, ref, tol, tol * 1e-2, msg)
            local sr = v.t:std(d, keep, { correction = corr })
            T.allclose(sr, T.map(ref, math.sqrt), tol, tol * 1e-2, 'std' .. msg:sub(4))
          end
        end
      end
    end
    -- defaults: correction 1, all dims
    local a, ar = T.make({ 5, 7 }, dt)
    T.near(a:var():item(), T.ref_reduce(ar, nil, false, function(l) return T.ref_var(l, 1) end), tol, 'var() default')
    T.near(a:std():item(), math.sqrt(T.ref_reduce(ar, nil, false, function(l) return T.ref_var(l, 1) end)), tol, 'std()')
    T.near(a:var(2):totable()[3], T.ref_var(ar[3], 1), tol, 'var(2) default correction 1')
  end
  -- low precision: relative to the variance
  for _, dt in ipairs({ 'f16', 'bf16' }) do
    local a, ar = T.make({ 6, 40 }, dt)
    T.allclose(a:var(2, false, { correction = 0 }),
      T.ref_reduce(ar, 2, false, function(l) return T.ref_var(l, 0) end), 4 * T.tol(dt), 1e-3, 'var ' .. dt)
  end
end)

T.test('norm p = 1, 2, inf and other p', function()
  for _, dt in ipairs(FLOATS) do
    for _, v in ipairs(T.variants({ 3, 4, 5 }, dt)) do
      for _, p in ipairs({ 1, 2, math.huge, 3 }) do
        local tol = ({ f64 = 1e-12, f32 = 1e-5, f16 = 2e-3, bf16 = 1.2e-2 })[dt]
        local nf = function(l) return T.ref_norm(l, p) end
        T.allclose(v.t:norm(p), T.ref_reduce(v.ref, nil, false, nf), tol, 0, 'norm all p=' .. p .. ' ' .. dt .. ' ' .. v.name)
        for _, d in ipairs({ 1, -1, { 2, 3 } }) do
          for _, keep in ipairs({ false, true }) do
            T.allclose(v.t:norm(p, d, keep), T.ref_reduce(v.ref, d, keep, nf), tol, 0,
              string.format('norm p=%s dims %s keep %s %s %s', tostring(p), dstr(d), tostring(keep), dt, v.name))
          end
        end
      end
      T.allclose(v.t:norm(), T.ref_reduce(v.ref, nil, false, T.ref_norm), math.max(T.tol(dt), 1e-5), 0, 'norm() p=2')
    end
  end
end)

T.test('max/min without dim give a 0-dim tensor', function()
  for _, dt in ipairs({ 'f64', 'f32', 'f16', 'bf16', 'i32', 'i64' }) do
    local a, ar = T.make({ 5, 7 }, dt)
    local mx = a:max()
    T.eq(mx.shape, {})
    T.eq(mx.dtype, dt)
    local flat = T.flatten(ar)
    local refmax = T.ref_argext(flat, true)
    local refmin = T.ref_argext(flat, false)
    T.eq(mx:item(), refmax, 'max() ' .. dt)
    T.eq(a:min():item(), refmin, 'min() ' .. dt)
  end
end)

T.test('max/min with dim: values and 0-based i64 indices', function()
  for _, dt in ipairs({ 'f64', 'f32', 'f16', 'bf16', 'i32', 'i64' }) do
    for _, v in ipairs(T.variants({ 4, 5, 6 }, dt, -100, 100)) do
      for _, d in ipairs({ 1, 2, 3, -1, -3 }) do
        for _, keep in ipairs({ false, true }) do
          for _, greater in ipairs({ true, false }) do
            local name = greater and 'max' or 'min'
            local vals, idx = v.t[name](v.t, d, keep)
            local msg = string.format('%s %s dim %d keep %s %s', name, dt, d, tostring(keep), v.name)
            T.eq(vals.dtype, dt, msg .. ' values dtype')
            T.eq(idx.dtype, 'i64', msg .. ' indices dtype')
            T.alleq(vals, T.ref_reduce(v.ref, d, keep, function(l) return (T.ref_argext(l, greater)) end), msg .. ' values')
            -- indices: the value at the index must be the extreme (ties may pick any)
            local ref_vals = T.ref_reduce(v.ref, d, true, function(l) return (T.ref_argext(l, greater)) end)
            local ikeep = keep and idx or idx:unsqueeze(d < 0 and (d + 4) or d)
            local g = T.ref_gather(v.ref, d, ikeep:totable())
            T.alleq(g, ref_vals, msg .. ' value at the returned index')
          end
        end
      end
    end
  end
end)

T.test('argmax/argmin with dim and over all (flat index)', function()
  for _, dt in ipairs({ 'f64', 'f32', 'i32' }) do
    local a, ar = T.make({ 4, 6, 3 }, dt, -1000, 1000)
    for _, d in ipairs({ 1, 2, 3, -1 }) do
      for _, keep in ipairs({ false, true }) do
        local am = a:argmax(d, keep)
        T.eq(am.dtype, 'i64')
        -- continuous f64/f32 values and a wide int range: ties are practically absent, but
        -- compare through the values to be tie-proof
        local kshape = a:argmax(d, true)
        T.alleq(T.ref_gather(ar, d, kshape:totable()),
          T.ref_reduce(ar, d, true, function(l) return (T.ref_argext(l, true)) end), 'argmax values ' .. dt .. ' dim ' .. d)
        T.alleq(T.ref_gather(ar, d, a:argmin(d, true):totable()),
          T.ref_reduce(ar, d, true, function(l) return (T.ref_argext(l, false)) end), 'argmin values ' .. dt .. ' dim ' .. d)
        local es = a.shape
        if keep then es[T.norm_dim(d, 3)] = 1 else table.remove(es, T.norm_dim(d, 3)) end
        T.eq(am.shape, es, 'argmax shape keepdim ' .. tostring(keep))
      end
    end
    local flat = T.flatten(ar)
    local _, imax = T.ref_argext(flat, true)
    local _, imin = T.ref_argext(flat, false)
    local g = a:argmax()
    T.eq(g.shape, {})
    T.eq(flat[g:item() + 1], flat[imax + 1], 'argmax() flat index ' .. dt)
    T.eq(flat[a:argmin():item() + 1], flat[imin + 1], 'argmin() flat index ' .. dt)
  end
  -- distinct values: exact index
  local x = v100.tensor({ { 3, 9, 1 }, { 7, 2, 8 } }, { dtype = 'f32' })
  T.alleq(x:argmax(2), { 1, 2 })
  T.alleq(x:argmin(1), { 0, 1, 0 })
  T.eq(x:argmax():item(), 1)
  T.eq(x:argmin():item(), 2)
  local vals, idx = x:max(2)
  T.alleq(vals, { 9, 8 })
  T.alleq(idx, { 1, 2 })
end)

T.test('softmax and log_softmax on each dim', function()
  for _, dt in ipairs(FLOATS) do
    for _, v in ipairs(T.variants({ 3, 4, 5 }, dt, -4, 4)) do
      for _, d in ipairs({ 1, 2, 3, -1, -2 }) do
        local tol = ({ f64 = 1e-12, f32 = 2e-6, f16 = 2e-3, bf16 = 1.5e-2 })[dt]
        local s = v.t:softmax(d)
        T.eq(s.dtype, dt)
        T.allclose(s, T.ref_softmax(v.ref, d, false), tol, tol * 0.1, 'softmax ' .. dt .. ' dim ' .. d .. ' ' .. v.name)
        local ls = v.t:log_softmax(d)
        T.allclose(ls, T.ref_softmax(v.ref, d, true), tol, tol, 'log_softmax ' .. dt .. ' dim ' .. d .. ' ' .. v.name)
      end
    end
  end
  -- large logits must not overflow
  local x = v100.tensor({ { 1000, 1001, 1002 }, { -1000, -1001, -1003 } }, { dtype = 'f32' })
  T.allclose(x:softmax(2), T.ref_softmax(x:totable(), 2), 1e-6, 1e-7, 'softmax of large logits')
  T.allclose(x:log_softmax(-1), T.ref_softmax(x:totable(), 2, true), 1e-6, 1e-5, 'log_softmax of large logits')
end)

T.test('long rows (multi-chunk reductions)', function()
  local a, ar = T.make({ 3, 2000 }, 'f64')
  T.allclose(a:sum(2), T.ref_reduce(ar, 2, false, T.ref_sum), 1e-11, 1e-12)
  T.allclose(a:softmax(2), T.ref_softmax(ar, 2), 1e-12, 1e-16)
  local f, fr = T.make({ 4000, 3 }, 'f32')
  T.within(f:sum(1), T.ref_reduce(fr, 1, false, T.ref_sum), T.ref_reduce(absref(fr), 1, false, T.ref_sum), 1e-5, 'f32 sum of 4000')
  T.allclose(f:max(1), T.ref_reduce(fr, 1, false, function(l) return (T.ref_argext(l, true)) end), 0, 0)
end)

T.test('reductions of empty and 0-dim tensors', function()
  local z = v100.zeros({ 0, 3 }, { dtype = 'f64' })
  T.alleq(z:sum(1), { 0, 0, 0 }, 'sum over an empty dim is 0')
  T.alleq(z:prod(1), { 1, 1, 1 }, 'prod over an empty dim is 1')
  local s = v100.tensor(2.5, { dtype = 'f64' })
  T.eq(s:sum():item(), 2.5)
  T.eq(s:max():item(), 2.5)
end)

T.run()
