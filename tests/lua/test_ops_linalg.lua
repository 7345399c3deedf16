-- matmul / mm / bmm / addmm on the CPU against direct computation in Lua (f64).
local T = require 'testlib'
local v100 = require 'v100'

local FLOATS = { 'f64', 'f32', 'f16', 'bf16' }
-- error relative to sum_k |a_ik| |b_kj| (the scale of rounding in a dot product)
local MM_TOL = { f64 = 1e-13, f32 = 2e-6, f16 = 2e-3, bf16 = 1.2e-2 }

local function abs_of(x) return T.map(x, math.abs) end

local function check_mm(r, ar, br, dt, msg)
  local ref = T.ref_matmul(ar, br)
  local bound = T.ref_matmul(abs_of(ar), abs_of(br))
  T.eq(r.dtype, dt, msg .. ' dtype')
  T.within(r, ref, bound, MM_TOL[dt], msg)
end

local CASES = {
  { { 7 }, { 7 } },                 -- dot
  { { 5, 7 }, { 7 } },              -- matrix-vector
  { { 7 }, { 7, 4 } },              -- vector-matrix
  { { 5, 7 }, { 7, 4 } },           -- 2-D
  { { 1, 1 }, { 1, 1 } },
  { { 3, 5, 7 }, { 3, 7, 4 } },     -- batched
  { { 3, 5, 7 }, { 7, 4 } },        -- batch broadcast of b
  { { 5, 7 }, { 3, 7, 4 } },        -- batch broadcast of a
  { { 2, 1, 5, 7 }, { 3, 7, 4 } },  -- two batch dims broadcast
  { { 2, 3, 5, 7 }, { 7 } },        -- batched matrix-vector
  { { 7 }, { 2, 7, 4 } },           -- vector times batch
  { { 4, 0 }, { 0, 3 } },           -- empty inner: zeros
}

T.test('matmul shapes (torch.matmul semantics), all float dtypes', function()
  for _, dt in ipairs(FLOATS) do
    for _, c in ipairs(CASES) do
      local a, ar = T.make(c[1], dt)
      local b, br = T.make(c[2], dt)
      local r = a:matmul(b)
      local msg = string.format('matmul %s %s @ %s', dt, T.shape_str(c[1]), T.shape_str(c[2]))
      if T.numel(c[1]) == 0 then
        T.eq(r.shape, { 4, 3 }, msg .. ' shape')
        T.alleq(r, { { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 }, { 0, 0, 0 } }, msg .. ' is zeros')
      else
        local ref = T.ref_matmul(ar, br)
        T.eq(r.shape, T.shape(ref), msg .. ' shape')
        check_mm(r, ar, br, dt, msg)
      end
    end
  end
end)

T.test('matmul of transposed, narrowed and expanded views', function()
  for _, dt in ipairs(FLOATS) do
    local a_s = T.variants({ 6, 9 }, dt)
    local b_s = T.variants({ 9, 5 }, dt)
    for _, av in ipairs(a_s) do
      for _, bv in ipairs(b_s) do
        check_mm(av.t:matmul(bv.t), av.ref, bv.ref, dt, 'matmul ' .. dt .. ' a ' .. av.name .. ' b ' .. bv.name)
        check_mm(av.t:mm(bv.t), av.ref, bv.ref, dt, 'mm ' .. dt .. ' a ' .. av.name .. ' b ' .. bv.name)
      end
    end
    -- batched with transposed inner matrices (permuted strides) and an expanded batch
    local x, xr = T.make({ 3, 8, 6 }, dt)
    local y, yr = T.make({ 1, 5, 8 }, dt)
    local xt = x:transpose(2, 3)               -- 3x6x8
    local ye = y:transpose(2, 3):expand({ 3, 8, 5 })
    check_mm(xt:matmul(ye), T.ref_transpose(xr, 2, 3), T.ref_expand(T.ref_transpose(yr, 2, 3), { 3, 8, 5 }), dt,
      'matmul transposed batch ' .. dt)
    check_mm(xt:bmm(ye), T.ref_transpose(xr, 2, 3), T.ref_expand(T.ref_transpose(yr, 2, 3), { 3, 8, 5 }), dt,
      'bmm transposed/expanded ' .. dt)
  end
end)

T.test('mm and bmm', function()
  for _, dt in ipairs(FLOATS) do
    local a, ar = T.make({ 17, 33 }, dt)
    local b, br = T.make({ 33, 9 }, dt)
    check_mm(a:mm(b), ar, br, dt, 'mm ' .. dt)
    local x, xr = T.make({ 4, 6, 10 }, dt)
    local y, yr = T.make({ 4, 10, 3 }, dt)
    local r = x:bmm(y)
    T.eq(r.shape, { 4, 6, 3 })
    check_mm(r, xr, yr, dt, 'bmm ' .. dt)
  end
end)

T.test('addmm with beta and alpha, broadcast bias', function()
  for _, dt in ipairs(FLOATS) do
    local a, ar = T.make({ 6, 11 }, dt)
    local b, br = T.make({ 11, 4 }, dt)
    local prod = T.ref_matmul(ar, br)
    local pbound = T.ref_matmul(abs_of(ar), abs_of(br))
    for _, bias_shape in ipairs({ { 6, 4 }, { 4 }, { 1, 4 }, { 6, 1 }, {} }) do
      local c, cr = T.make(bias_shape, dt)
      for _, ba in ipairs({ { nil, nil }, { 1, 1 }, { 0.5, 2 }, { 0, 1.5 }, { -1, 0.25 } }) do
        local beta, alpha = ba[1], ba[2]
        local r
        if beta == nil then r = v100.addmm(c, a, b) else r = v100.addmm(c, a, b, { beta = beta, alpha = alpha }) end
        beta, alpha = beta or 1, alpha or 1
        local ref = T.ref_nary(function(x, p) return beta * x + alpha * p end, cr, prod)
        local bound = T.ref_nary(function(x, p) return math.abs(beta * x) + math.abs(alpha) * p end, cr, pbound)
        local msg = string.format('addmm %s bias %s beta %g alpha %g', dt, T.shape_str(bias_shape), beta, alpha)
        T.eq(r.shape, { 6, 4 }, msg .. ' shape')
        T.eq(r.dtype, dt, msg .. ' dtype')
        T.within(r, ref, bound, MM_TOL[dt] * 2, msg)
      end
    end
    -- transposed operands
    local at, atr = T.make({ 11, 6 }, dt)
    local c, cr = T.make({ 4 }, dt)
    local r = v100.addmm(c, at:t(), b, { beta = 2, alpha = -1 })
    local ar2 = T.ref_transpose(atr, 1, 2)
    local ref = T.ref_nary(function(x, p) return 2 * x - p end, cr, T.ref_matmul(ar2, br))
    local bound = T.ref_nary(function(x, p) return 2 * math.abs(x) + p end, cr, T.ref_matmul(abs_of(ar2), abs_of(br)))
    T.within(r, ref, bound, MM_TOL[dt] * 2, 'addmm transposed a ' .. dt)
  end
end)

T.test('addmm with a row-vector bias and beta 1 hands the bias to the gemm kernel (cpu: prefilled)', function()
  for _, dt in ipairs(FLOATS) do
    local a, ar = T.make({ 5, 7 }, dt)
    local b, br = T.make({ 7, 3 }, dt)
    for _, bias_shape in ipairs({ { 3 }, { 1, 3 } }) do
      local c, cr = T.make(bias_shape, dt)
      local before = v100.gemm_stats()
      local r = v100.addmm(c, a, b)
      local after = v100.gemm_stats()
      local msg = string.format('addmm %s bias %s', dt, T.shape_str(bias_shape))
      T.eq(after.bias_prefill - before.bias_prefill, 1, msg .. ': bias given to the kernel')
      T.eq(after.bias_epilogue, before.bias_epilogue, msg .. ': no epilogue on the cpu')
      local ref = T.ref_nary(function(x, p) return x + p end, cr, T.ref_matmul(ar, br))
      local bound = T.ref_nary(function(x, p) return math.abs(x) + p end, cr, T.ref_matmul(abs_of(ar), abs_of(br)))
      T.within(r, ref, bound, MM_TOL[dt] * 2, msg)
    end
    -- beta ~= 1 and a column bias keep the copy-then-gemm path (no kernel bias)
    local c = T.make({ 5, 1 }, dt)
    local before = v100.gemm_stats().bias_prefill
    v100.addmm(c, a, b)
    v100.addmm(T.make({ 3 }, dt), a, b, { beta = 0.5 })
    T.eq(v100.gemm_stats().bias_prefill, before, 'column bias / beta 0.5 ' .. dt)
  end
  -- k == 0: the result is the bias itself
  local z = v100.addmm(v100.tensor{ 1, 2, 3 }:float(), v100.zeros{ 2, 0 }, v100.zeros{ 0, 3 })
  T.eq(z:totable(), { { 1, 2, 3 }, { 1, 2, 3 } })
end)

T.test('allow_tf32 flag: default false, settable', function()
  T.eq(v100.get_allow_tf32(), false, 'default')
  v100.set_allow_tf32(true)
  T.eq(v100.get_allow_tf32(), true)
  -- on the CPU, f32 results stay f32-accurate either way
  local a, ar = T.make({ 8, 16 }, 'f32')
  local b, br = T.make({ 16, 8 }, 'f32')
  check_mm(a:matmul(b), ar, br, 'f32', 'f32 matmul with tf32 allowed (cpu)')
  v100.set_allow_tf32(false)
  T.eq(v100.get_allow_tf32(), false)
end)

T.test('larger matmul (blocked paths)', function()
  local a, ar = T.make({ 37, 70 }, 'f64')
  local b, br = T.make({ 70, 45 }, 'f64')
  check_mm(a:matmul(b), ar, br, 'f64', 'f64 37x70x45')
  local x, xr = T.make({ 2, 33, 65 }, 'f32')
  local y, yr = T.make({ 65, 31 }, 'f32')
  check_mm(x:matmul(y), xr, yr, 'f32', 'f32 batched broadcast 2x33x65 @ 65x31')
end)

T.test('a transposed operand (F.linear\'s w:t()) gets its gradient in its own layout: w.grad contiguous', function()
  local w = v100.randn({ 5, 3 }, { dtype = 'f64' }):requires_grad_()
  local x = v100.randn({ 4, 3 }, { dtype = 'f64' }):requires_grad_()
  local b = v100.randn({ 5 }, { dtype = 'f64' }):requires_grad_()
  local g = v100.randn({ 4, 5 }, { dtype = 'f64' })
  local y = v100.addmm(b, x, w:t())
  y:backward(g)
  T.ok(w.grad:is_contiguous(), 'w.grad is contiguous')
  T.allclose(w.grad, g:t():matmul(x), 1e-12, 1e-12, 'dW = g^T x')
  T.allclose(x.grad, g:matmul(w), 1e-12, 1e-12, 'dX = g W')
  -- a transposed left operand too
  local a = v100.randn({ 3, 4 }, { dtype = 'f64' }):requires_grad_()
  local m = v100.randn({ 3, 2 }, { dtype = 'f64' })
  local gg = v100.randn({ 4, 2 }, { dtype = 'f64' })
  a:t():mm(m):backward(gg)
  T.ok(a.grad:is_contiguous(), 'a.grad is contiguous')
  T.allclose(a.grad, m:matmul(gg:t()), 1e-12, 1e-12, 'dA = (g m^T)^T')
end)

T.run()
