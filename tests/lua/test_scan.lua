-- tests/lua/test_scan.lua: scans and more reductions (issue 30): cumsum, cumprod, logsumexp, any,
-- all, count_nonzero, and the PyTorch edges of var/std/norm. Expected values are worked out by
-- hand (PyTorch's semantics) or by plain Lua loops; the generated sweep (sweep/reduce.lua) covers
-- dtypes and layouts against f64.
local T = require 'testlib'
local v100 = require 'v100'

local inf, nan = math.huge, 0 / 0

local function vals(t) return t:to({ dtype = 'f64' }):totable() end

-- a plain Lua inclusive scan of a nested table along dim d (1-based), forward
local function lua_scan(tbl, shape, d, prod)
  local out = T.map(tbl, function(v) return v end)
  local function at(t, idx)
    for i = 1, #idx - 1 do t = t[idx[i]] end
    return t, idx[#idx]
  end
  local idx = {}
  local function walk(level)
    if level > #shape then
      if idx[d] > 1 then
        local prev = { table.unpack(idx) }
        prev[d] = prev[d] - 1
        local pt, pk = at(out, prev)
        local ct, ck = at(out, idx)
        ct[ck] = prod and pt[pk] * ct[ck] or pt[pk] + ct[ck]
      end
      return
    end
    for i = 1, shape[level] do
      idx[level] = i
      walk(level + 1)
    end
  end
  walk(1)
  return out
end

T.test('cumsum: values along each dim, result dtypes as PyTorch', function()
  local x = v100.tensor({ { 1, 2, 3 }, { 4, 5, 6 } }, { dtype = 'i32' })
  T.eq(x:cumsum(2):totable(), { { 1, 3, 6 }, { 4, 9, 15 } })
  T.eq(x:cumsum(1):totable(), { { 1, 2, 3 }, { 5, 7, 9 } })
  T.eq(x:cumsum(-1):totable(), { { 1, 3, 6 }, { 4, 9, 15 } })
  T.eq(x:cumsum(2).dtype, 'i64', 'integers give i64')
  T.eq(v100.tensor({ true, false, true }):cumsum(1):totable(), { 1, 1, 2 })
  T.eq(v100.tensor({ true, false, true }):cumsum(1).dtype, 'i64', 'bool gives i64')
  local f = v100.tensor({ 0.5, 0.25, 1 })
  T.eq(f:cumsum(1).dtype, 'f32')
  T.eq(f:cumsum(1):totable(), { 0.5, 0.75, 1.75 })
  T.eq(f:cumsum(1, { dtype = 'f64' }).dtype, 'f64')
  T.eq(x:cumsum(2, { dtype = 'f32' }).dtype, 'f32')
  T.eq(x:cumsum(2, { dtype = 'f32' }):totable(), { { 1, 3, 6 }, { 4, 9, 15 } })
  T.eq(v100.tensor({ 1, 2 }, { dtype = 'f16' }):cumsum(1).dtype, 'f16')
  T.eq(v100.tensor({ 1, 2 }, { dtype = 'bf16' }):cumsum(1).dtype, 'bf16')
end)

T.test('cumprod: values, zeros, i64 overflow wraps', function()
  T.eq(v100.tensor({ 1, 2, 3, 4 }):cumprod(1):totable(), { 1, 2, 6, 24 })
  T.eq(v100.tensor({ 2, 0, 3 }):cumprod(1):totable(), { 2, 0, 0 })
  T.eq(v100.tensor({ { 1, 2 }, { 3, 4 } }):cumprod(1):totable(), { { 1, 2 }, { 3, 8 } })
  T.eq(v100.tensor({ 2, 3 }, { dtype = 'i32' }):cumprod(1).dtype, 'i64')
  -- 2^k: 2^63 wraps to the smallest int64 and 2^64 to 0, as PyTorch's int64 cumprod
  local p = v100.full({ 64 }, 2, { dtype = 'i64' }):cumprod(1):totable()
  T.eq(p[62], 4611686018427387904)
  T.eq(p[63], math.mininteger)
  T.eq(p[64], 0)
  -- i32 input is widened first: 2^40 does not wrap at 32 bits
  T.eq(v100.full({ 40 }, 2, { dtype = 'i32' }):cumprod(1):totable()[40], 1 << 40)
end)

T.test('scans: NaN and inf propagate', function()
  local s = vals(v100.tensor({ 1, nan, 2 }):cumsum(1))
  T.eq(s[1], 1)
  T.ok(s[2] ~= s[2] and s[3] ~= s[3], 'NaN from its position on')
  s = vals(v100.tensor({ inf, 1, -inf }):cumsum(1))
  T.eq(s[1], inf)
  T.eq(s[2], inf)
  T.ok(s[3] ~= s[3], 'inf + -inf is NaN')
  s = vals(v100.tensor({ 2, inf, 0 }):cumprod(1))
  T.eq(s[2], inf)
  T.ok(s[3] ~= s[3], 'inf * 0 is NaN')
end)

T.test('scans: long rows and columns (block boundaries, threads), f16 rounded once', function()
  local r = v100.ones({ 2, 6000 }):cumsum(2):totable()
  T.eq(r[1][1], 1)
  T.eq(r[1][256], 256)
  T.eq(r[1][257], 257)
  T.eq(r[2][6000], 6000)
  local c = v100.ones({ 5000, 3 }, { dtype = 'f64' }):cumsum(1):totable()
  T.eq(c[5000], { 5000, 5000, 5000 })
  T.eq(c[2500][2], 2500)
  -- f16: the running sum is exact (kept wider) and each output rounded once: 2049 rounds to
  -- 2048 (ties to even), 3000 is representable; a running f16 sum would stick at 2048
  local h = v100.ones({ 3000 }, { dtype = 'f16' }):cumsum(1):totable()
  T.eq(h[2048], 2048)
  T.eq(h[2049], 2048)
  T.eq(h[3000], 3000)
end)

T.test('scans: against plain Lua loops over shapes, dims and layouts', function()
  for _, shape in ipairs({ { 3, 300, 5 }, { 2, 3, 4 }, { 1, 700 }, { 7 } }) do
    for d = 1, #shape do
      for _, prod in ipairs({ false, true }) do
        local x = prod and (v100.rand(shape, { dtype = 'f64' }) * 0.2 + 0.9) or v100.randn(shape, { dtype = 'f64' })
        local got = (prod and x:cumprod(d) or x:cumsum(d)):totable()
        local want = lua_scan(x:totable(), shape, d, prod)
        T.allclose(got, want, 1e-12, 1e-12, string.format('%s %s dim %d', prod and 'cumprod' or 'cumsum',
          T.shape_str(shape), d))
      end
    end
  end
  -- non-contiguous inputs: a transposed and a narrowed view scan as their copies
  local b = v100.randn({ 6, 9 })
  T.tensor_close(b:t():cumsum(1), b:cumsum(2):t(), 1e-6)
  T.tensor_close(b:narrow(2, 3, 4):cumsum(2), b:narrow(2, 3, 4):contiguous():cumsum(2), 0)
  T.tensor_close(b:expand({ 3, 6, 9 }):cumsum(1), b:view({ 1, 6, 9 }):expand({ 3, 6, 9 }) *
    v100.tensor({ 1, 2, 3 }):view({ 3, 1, 1 }), 1e-6)
end)

T.test('scans: empty, size-1 and 0-dim tensors', function()
  T.eq(v100.zeros({ 0, 3 }):cumsum(1).shape, { 0, 3 })
  T.eq(v100.zeros({ 3, 0 }):cumprod(1).shape, { 3, 0 })
  T.eq(v100.tensor({ { 4 }, { 5 } }):cumsum(2):totable(), { { 4 }, { 5 } })
  local s = v100.tensor(5):cumsum(1)
  T.eq(#s.shape, 0)
  T.eq(s:item(), 5)
  T.eq(v100.tensor(3):cumprod(-1):item(), 3)
end)

T.test('cumsum backward: the reverse cumsum of the gradient (short and long rows, columns)', function()
  local x = v100.randn({ 4, 7 }, { dtype = 'f64' }):requires_grad_()
  x:cumsum(2):sum():backward()
  T.eq(x.grad:totable()[3], { 7, 6, 5, 4, 3, 2, 1 })
  local l = v100.ones({ 1, 600 }):requires_grad_()
  l:cumsum(2):sum():backward()
  local g = l.grad:totable()[1]
  T.eq({ g[1], g[256], g[257], g[600] }, { 600, 345, 344, 1 })
  local c = v100.ones({ 600, 3 }):requires_grad_()
  c:cumsum(1):sum():backward()
  T.eq(c.grad:totable()[1], { 600, 600, 600 })
  T.eq(c.grad:totable()[600], { 1, 1, 1 })
  -- dtype= changes the result's dtype; the gradient comes back in the input's
  local h = v100.tensor({ 1, 2 }, { dtype = 'f32' }):requires_grad_()
  h:cumsum(1, { dtype = 'f64' }):sum():backward()
  T.eq(h.grad.dtype, 'f32')
  T.eq(h.grad:totable(), { 2, 1 })
end)

T.test('cumprod backward: exact with no, one and two zeros', function()
  local function grad_of(t)
    local x = v100.tensor(t, { dtype = 'f64' }):requires_grad_()
    x:cumprod(1):sum():backward()
    return x.grad:totable()
  end
  -- y = {1, 2, 6}: dx1 = 1 + x2 + x2 x3 = 9, dx2 = x1 + x1 x3 = 4, dx3 = x1 x2 = 2
  T.eq(grad_of({ 1, 2, 3 }), { 9, 4, 2 })
  -- one zero (x3): dx1 = 1 + x2 = 4, dx2 = x1 = 2, dx3 = x1 x2 + x1 x2 x4 = 6 + 24 = 30, dx4 = 0
  T.eq(grad_of({ 2, 3, 0, 4 }), { 4, 2, 30, 0 })
  -- two zeros: dx1 = 1, dx2 (first zero) = x1 + x1 x3 = 8, everything after it 0
  T.eq(grad_of({ 2, 0, 3, 0, 5 }), { 1, 8, 0, 0, 0 })
  -- a leading zero: dx1 = 1 + x2 + x2 x3 = 1 + 3 + 12, the rest 0
  T.eq(grad_of({ 0, 3, 4 }), { 16, 0, 0 })
  T.ok(v100.autograd.gradcheck(function(x) return x:cumprod(2) end,
    { v100.tensor({ { 0.5, 0, 1.5, 0, 2 }, { 1, 2, 0, 3, 0.5 } }, { dtype = 'f64' }):requires_grad_() }), 'gradcheck')
end)

T.test('logsumexp: values, infinities, NaN, empty, dtypes', function()
  T.near(v100.tensor({ 0, 0 }):logsumexp(1):item(), math.log(2), 1e-6)
  T.near(v100.tensor({ 1, 2, 3 }, { dtype = 'f64' }):logsumexp(1):item(), 3 + math.log(1 + math.exp(-1) + math.exp(-2)), 1e-12)
  -- max-subtracted: no overflow at 1000
  T.near(v100.tensor({ 1000, 1000 }):logsumexp(1):item(), 1000 + math.log(2), 1e-3)
  local r = vals(v100.tensor({ { -inf, -inf }, { 1, inf }, { 1, nan }, { -inf, 0 } }):logsumexp(2))
  T.eq(r[1], -inf, 'a row of -inf')
  T.eq(r[2], inf, '+inf')
  T.ok(r[3] ~= r[3], 'NaN')
  T.eq(r[4], 0, '-inf contributes nothing')
  T.eq(vals(v100.zeros({ 0, 3 }):logsumexp(1)), { -inf, -inf, -inf }, 'an empty sum')
  local i = v100.tensor({ 1, 2, 3 }, { dtype = 'i64' }):logsumexp(1)
  T.eq(i.dtype, 'f32', 'integers promote to f32')
  T.near(i:item(), 3.4076059644443806, 1e-6)
  T.eq(v100.tensor({ 1, 2 }, { dtype = 'f16' }):logsumexp(1).dtype, 'f16')
  local x = v100.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'f64' })
  T.eq(x:logsumexp(2, true).shape, { 2, 1 })
  T.eq(x:logsumexp({ 1, 2 }).shape, {})
  T.near(x:logsumexp({ 1, 2 }):item(), 4 + math.log(1 + math.exp(-1) + math.exp(-2) + math.exp(-3)), 1e-12)
  T.near(x:logsumexp({ -1, 1 }):item(), x:logsumexp({ 1, 2 }):item(), 1e-12)
  T.near(v100.tensor(2.0):logsumexp(1):item(), 2, 0)
end)

T.test('logsumexp backward: g times the softmax, 0 at -inf', function()
  local x = v100.tensor({ 1, 2, 3 }, { dtype = 'f64' }):requires_grad_()
  x:logsumexp(1):backward()
  local z = math.exp(1) + math.exp(2) + math.exp(3)
  T.allclose(x.grad:totable(), { math.exp(1) / z, math.exp(2) / z, math.exp(3) / z }, 1e-12)
  local y = v100.tensor({ { -inf, 0 }, { -inf, -inf } }, { dtype = 'f64' }):requires_grad_()
  y:logsumexp(2):sum():backward()
  T.eq(y.grad:totable(), { { 0, 1 }, { 0, 0 } })
  T.ok(v100.autograd.gradcheck(function(t) return t:logsumexp({ 1, 3 }, true) end,
    { v100.randn({ 2, 3, 4 }, { dtype = 'f64' }):requires_grad_() }), 'gradcheck')
end)

T.test('any, all, count_nonzero: hand values, dims, keepdim, NaN, empty', function()
  local x = v100.tensor({ { 0, 1, 0 }, { 0, 0, 0 } })
  T.eq(x:any():item(), true)
  T.eq(x:all():item(), false)
  T.eq(x:any().dtype, 'bool')
  T.eq(x:any(2):totable(), { true, false })
  T.eq(x:all(1):totable(), { false, false, false })
  T.eq(x:any(2, true).shape, { 2, 1 })
  T.eq(x:any({ 1, 2 }):item(), true)
  T.eq(x:count_nonzero():item(), 1)
  T.eq(x:count_nonzero().dtype, 'i64')
  T.eq(x:count_nonzero(1):totable(), { 0, 1, 0 })
  T.eq(x:count_nonzero({ 1, 2 }):item(), 1)
  local y = v100.tensor({ { 1, 2 }, { 3, 0 } }, { dtype = 'i32' })
  T.eq(y:all(2):totable(), { true, false })
  T.eq(y:all(-1, true):totable(), { { true }, { false } })
  -- NaN is non-zero (NaN != 0), as PyTorch
  T.eq(v100.tensor({ 0, nan }):any():item(), true)
  T.eq(v100.tensor({ nan, 1 }):all():item(), true)
  T.eq(v100.tensor({ nan, 0 }):count_nonzero():item(), 1)
  -- bool and u8 inputs
  T.eq(v100.tensor({ true, false }):all():item(), false)
  T.eq(v100.tensor({ 0, 7 }, { dtype = 'u8' }):any():item(), true)
  -- nothing to look at: any false, all true, count 0
  local e = v100.zeros({ 0, 3 })
  T.eq(e:any():item(), false)
  T.eq(e:all():item(), true)
  T.eq(e:count_nonzero():item(), 0)
  T.eq(e:any(1):totable(), { false, false, false })
  T.eq(e:all(1):totable(), { true, true, true })
  T.eq(v100.tensor(3):any():item(), true)
  T.eq(v100.tensor(0):all(1):item(), false)
  -- not differentiable: no graph
  local g = v100.randn({ 3 }):requires_grad_()
  T.eq(g:any().requires_grad, false)
  T.eq(g:count_nonzero().requires_grad, false)
end)

T.test('any, all, count_nonzero, logsumexp: against plain Lua loops over a 3-D tensor', function()
  -- zeros with probability 1/2, NaN sometimes; each dim reduced, and dims 1 and 3
  local shape = { 4, 5, 6 }
  local x = v100.rand(shape, { dtype = 'f64' }):lt(0.5):to('f64') * v100.randn(shape, { dtype = 'f64' })
  x = x:masked_fill(v100.rand(shape):lt(0.05), nan)
  local xt = x:totable()
  for _, dims in ipairs({ { 1 }, { 2 }, { 3 }, { 1, 3 } }) do
    local red = {}
    for _, d in ipairs(dims) do red[d] = true end
    -- the kept coordinates of every element, and per kept position: any, all, count, sum of exp
    local want = {}
    for i = 1, shape[1] do
      for j = 1, shape[2] do
        for k = 1, shape[3] do
          local key = {}
          for d, c in ipairs({ i, j, k }) do if not red[d] then key[#key + 1] = c end end
          local ks = table.concat(key, ',')
          local w = want[ks] or { any = false, all = true, count = 0, sum = 0, key = key }
          local v = xt[i][j][k]
          local nz = v ~= 0 -- NaN ~= 0
          w.any, w.all, w.count = w.any or nz, w.all and nz, w.count + (nz and 1 or 0)
          w.sum = w.sum + math.exp(v)
          want[ks] = w
        end
      end
    end
    local a, l, c, e = x:any(dims):totable(), x:all(dims):totable(), x:count_nonzero(dims):totable(),
      x:logsumexp(dims):to('f64'):totable()
    local function at(t, key)
      for _, i in ipairs(key) do t = t[i] end
      return t
    end
    for _, w in pairs(want) do
      local m = 'dims ' .. table.concat(dims, ',') .. ' at ' .. table.concat(w.key, ',')
      T.eq(at(a, w.key), w.any, 'any ' .. m)
      T.eq(at(l, w.key), w.all, 'all ' .. m)
      T.eq(at(c, w.key), w.count, 'count_nonzero ' .. m)
      local lse, ref = at(e, w.key), math.log(w.sum)
      if ref ~= ref then T.ok(lse ~= lse, 'logsumexp NaN ' .. m) else T.near(lse, ref, 1e-12, 'logsumexp ' .. m) end
    end
  end
end)

T.test('var/std corrections and norm edges follow PyTorch', function()
  local x = v100.tensor({ 1, 2, 3, 4 }, { dtype = 'f64' })
  -- mean 2.5, sum of squared deviations 5
  T.near(x:var():item(), 5 / 3, 1e-12)
  T.near(x:var({ correction = 0 }):item(), 5 / 4, 1e-12)
  T.near(x:var({ correction = 2 }):item(), 5 / 2, 1e-12)
  T.near(x:std(1, false, { correction = 2 }):item(), math.sqrt(2.5), 1e-12)
  T.near(x:std({ correction = 0 }):item(), math.sqrt(1.25), 1e-12)
  local one = x:narrow(1, 1, 1):var():item()
  T.ok(one ~= one, 'one element, correction 1: NaN (0/0)')
  T.eq(v100.tensor({ 1, 3 }, { dtype = 'f64' }):var({ correction = 2 }):item(), inf, 'N - correction = 0: 2/0')
  local ev = v100.zeros({ 0 }):var():item()
  T.ok(ev ~= ev, 'an empty var is NaN')
  -- norm: p = 0 counts the non-zeros (torch.linalg.vector_norm), p = 1, 2, inf; over nothing 0
  local v = v100.tensor({ 0, 2, -3, 0, 6 }, { dtype = 'f64' })
  T.eq(v:norm(0):item(), 3)
  T.eq(v:norm(1):item(), 11)
  T.eq(v:norm(2):item(), 7)
  T.eq(v:norm(math.huge):item(), 6)
  T.eq(v100.tensor({ { 0, 1 }, { 0, 0 } }, { dtype = 'f32' }):norm(0, 2):totable(), { 1, 0 })
  for _, p in ipairs({ 0, 1, 2, 3 }) do T.eq(v100.zeros({ 0, 4 }):norm(p):item(), 0, 'empty norm p ' .. p) end
  T.eq(v100.zeros({ 0, 4 }):norm(2, 1):totable(), { 0, 0, 0, 0 })
  T.eq(v100.zeros({ 3, 0 }):norm(math.huge, 1).shape, { 0 }, 'the inf-norm over a non-empty dim of an empty tensor')
  local n = v100.tensor({ 1, 2 }, { dtype = 'f64' }):requires_grad_()
  n:norm(0):backward()
  T.eq(n.grad:totable(), { 0, 0 }, 'the count has a zero gradient')
end)

T.test('autocast (O1): cumsum and cumprod run in f32, as PyTorch\'s fp32 list', function()
  local amp = require 'v100.amp'
  local h = v100.randn({ 3, 4 }):to('f16')
  T.eq(amp.autocast(function() return h:cumsum(2) end, { dtype = 'fp16' }).dtype, 'f32')
  T.eq(amp.autocast(function() return h:cumprod(1) end, { dtype = 'bf16' }).dtype, 'f32')
  T.eq(amp.ops().cumsum, 'fp32')
  T.eq(h:cumsum(2).dtype, 'f16', 'outside a region the dtype is kept')
  T.eq(amp.autocast(function() return v100.tensor({ 1, 2 }):cumsum(1) end, { dtype = 'fp16' }).dtype, 'i64',
    'integers are left alone')
end)

T.test('errors name the op and what is wrong', function()
  local x = v100.ones({ 2, 3 })
  T.raises(function() return x:cumsum(3) end, 'cumsum: dim 3 out of range for a tensor of 2 dims')
  T.raises(function() return x:cumprod(-3) end, 'cumprod: dim -3 out of range for a tensor of 2 dims')
  T.raises(function() return x:cumsum(1, { dtype = 'bool' }) end,
    'cumsum: dtype bool is not a result dtype (f32, f16, bf16, f64, i32 or i64) (a 2x3 f32 cpu)')
  T.raises(function() return x:cumprod(1, { dtype = 'u8' }) end, 'cumprod: dtype u8 is not a result dtype')
  T.raises(function() return x:cumsum(1, { dtype = 'f33' }) end, 'f33')
  T.raises(function() return x:cumsum(1, { dtyp = 'f64' }) end, "cumsum: unknown option 'dtyp'")
  T.raises(function() return x:logsumexp({ 1, 1 }) end, 'logsumexp: dim 1 appears more than once (a 2x3 f32 cpu)')
  T.raises(function() return x:logsumexp(5) end, 'logsumexp: dim 5 out of range for a tensor of 2 dims')
  T.raises(function() return x:any(4) end, 'any: dim 4 out of range for a tensor of 2 dims')
  T.raises(function() return x:all({ 2, -1 }) end, 'all: dim 2 appears more than once')
  T.raises(function() return x:count_nonzero(3) end, 'count_nonzero: dim 3 out of range for a tensor of 2 dims')
  T.raises(function() return v100.zeros({ 0, 3 }):norm(math.huge) end,
    'norm: cannot take the inf-norm over an empty dim; the max has no identity (a 0x3 f32 cpu)')
  T.raises(function() return x:norm(-1) end, 'norm: p must be >= 0, got -1')
  T.raises(function() return x:var({ correction = -1 }) end, 'var: correction must be >= 0, got -1')
end)

T.run()
