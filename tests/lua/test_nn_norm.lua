-- Batch norm, layer norm and softmax backward from Lua (CPU): values against plain-Lua references,
-- error messages, the raw backward entry points, and gradient checks of the autograd nodes in f64.
local T = require 'testlib'
local v100 = require 'v100'
local N = v100._nn

-- Reference batch norm over flat x of logical [n, c, hw]; returns y, mean, invstd, and updates
-- rm/rv (tables) in training when given.
local function ref_bn(x, n, c, hw, w, b, training, rm, rv, momentum, eps)
  local y, mean, invstd = {}, {}, {}
  local m = n * hw
  for ci = 1, c do
    local mu, var
    if training then
      local s = 0
      for i = 0, n - 1 do for j = 1, hw do s = s + x[(i * c + ci - 1) * hw + j] end end
      mu = s / m
      local q = 0
      for i = 0, n - 1 do for j = 1, hw do q = q + (x[(i * c + ci - 1) * hw + j] - mu) ^ 2 end end
      var = q / m
      if rm then
        rm[ci] = (1 - momentum) * rm[ci] + momentum * mu
        rv[ci] = (1 - momentum) * rv[ci] + momentum * q / (m - 1)
      end
    else
      mu, var = rm[ci], rv[ci]
    end
    local is = 1 / math.sqrt(var + eps)
    mean[ci], invstd[ci] = mu, is
    for i = 0, n - 1 do
      for j = 1, hw do
        local k = (i * c + ci - 1) * hw + j
        y[k] = (x[k] - mu) * is * (w and w[ci] or 1) + (b and b[ci] or 0)
      end
    end
  end
  return y, mean, invstd
end

local function flat(t) return (T.flatten(t:totable())) end

-- A channels-last copy of a 4-D NCHW tensor (same logical values).
local function nhwc(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end

T.test('batch_norm forward: training, running stats, eval, affine off', function()
  for _, dt in ipairs({ 'f64', 'f32' }) do
    local tol = dt == 'f64' and 1e-12 or 2e-6
    local x = v100.randn({ 3, 4, 5, 2 }, { dtype = dt }) * 2 + 0.5
    local w, b = v100.rand({ 4 }, { dtype = dt }) + 0.5, v100.randn({ 4 }, { dtype = dt })
    local rm, rv = v100.randn({ 4 }, { dtype = dt }) * 0.1, v100.rand({ 4 }, { dtype = dt }) + 0.5
    local xf, wf, bf, rmf, rvf = flat(x), flat(w), flat(b), flat(rm), flat(rv)
    local y, sm, si = N.batch_norm_forward(x, rm, rv, w, b, true, 0.1, 1e-5)
    local ry, rmean, rinv = ref_bn(xf, 3, 4, 10, wf, bf, true, rmf, rvf, 0.1, 1e-5)
    T.allclose(y, T.unflatten(ry, { 3, 4, 5, 2 }), tol, tol, 'y ' .. dt)
    T.allclose(sm, rmean, 1e-6, 1e-6, 'save_mean')
    T.allclose(si, rinv, 1e-6, 1e-6, 'save_invstd')
    T.allclose(rm, rmf, 1e-6, 1e-7, 'running_mean updated in place')
    T.allclose(rv, rvf, 1e-6, 1e-7, 'running_var updated in place (unbiased)')
    -- the autograd-aware entry gives the same values
    T.allclose(N.batch_norm(x, nil, nil, w, b, true, 0.1, 1e-5), ry and T.unflatten(ry, { 3, 4, 5, 2 }), tol, tol)
    -- eval: running stats used, not changed
    local ey = N.batch_norm(x, rm, rv, w, b, false, 0.1, 1e-3)
    local rey = ref_bn(xf, 3, 4, 10, wf, bf, false, flat(rm), flat(rv), 0.1, 1e-3)
    T.allclose(ey, T.unflatten(rey, { 3, 4, 5, 2 }), tol, tol, 'eval')
    T.allclose(rm, rmf, 1e-6, 1e-7, 'eval leaves running_mean')
    -- affine off
    local ay = N.batch_norm(x, nil, nil, nil, nil, true)
    T.allclose(ay, T.unflatten((ref_bn(xf, 3, 4, 10, nil, nil, true, nil, nil, 0, 1e-5)), { 3, 4, 5, 2 }), tol, tol)
  end
end)

T.test('batch_norm: 2-D and 3-D inputs, f16 data with f32 params', function()
  local x = v100.randn({ 6, 3, 7 }, { dtype = 'f64' })
  local y = N.batch_norm(x, nil, nil, nil, nil, true)
  T.allclose(y, T.unflatten((ref_bn(flat(x), 6, 3, 7, nil, nil, true, nil, nil, 0, 1e-5)), { 6, 3, 7 }), 1e-12, 1e-12)
  local x2 = v100.randn({ 10, 5 }, { dtype = 'f64' })
  local y2 = N.batch_norm(x2, nil, nil, nil, nil, true)
  T.allclose(y2, T.unflatten((ref_bn(flat(x2), 10, 5, 1, nil, nil, true, nil, nil, 0, 1e-5)), { 10, 5 }), 1e-12, 1e-12)
  local h = x:to('f16')
  local w = v100.rand({ 3 }) + 0.5
  local hy, sm = N.batch_norm_forward(h, nil, nil, w, nil, true)
  T.eq(hy.dtype, 'f16')
  T.eq(sm.dtype, 'f32', 'statistics in the param dtype')
  T.allclose(hy, (N.batch_norm(h:to('f64'), nil, nil, w:to('f64'), nil, true)), 1e-2, 1e-2)
end)

T.test('batch_norm: channels-last input gives channels-last output with the same values', function()
  local x = v100.randn({ 2, 8, 3, 5 }, { dtype = 'f64' })
  local w, b = v100.rand({ 8 }, { dtype = 'f64' }), v100.randn({ 8 }, { dtype = 'f64' })
  local xc = nhwc(x)
  T.eq(xc:stride(2), 1)
  local y = N.batch_norm(x, nil, nil, w, b, true)
  local yc = N.batch_norm(xc, nil, nil, w, b, true)
  T.eq(yc:stride(2), 1, 'output keeps channels-last')
  T.allclose(yc, y, 1e-12, 1e-12)
  local dy = v100.randn({ 2, 8, 3, 5 }, { dtype = 'f64' })
  local _, sm, si = N.batch_norm_forward(x, nil, nil, w, b, true)
  local dx, dw, db = N.batch_norm_backward(x, dy, w, sm, si)
  local dxc, dwc, dbc = N.batch_norm_backward(xc, dy, w, sm, si)
  T.allclose(dxc, dx, 1e-12, 1e-12)
  T.allclose(dwc, dw, 1e-12, 1e-12)
  T.allclose(dbc, db, 1e-12, 1e-12)
end)

T.test('batch_norm_backward matches the closed form', function()
  local x, dy = v100.randn({ 4, 3, 2, 2 }, { dtype = 'f64' }), v100.randn({ 4, 3, 2, 2 }, { dtype = 'f64' })
  local w = v100.rand({ 3 }, { dtype = 'f64' }) + 0.5
  local _, sm, si = N.batch_norm_forward(x, nil, nil, w, nil, true)
  local dx, dw, db = N.batch_norm_backward(x, dy, w, sm, si, 1e-5)
  local xf, gf, wf, mf, sf = flat(x), flat(dy), flat(w), flat(sm), flat(si)
  local m = 16
  local rdx, rdw, rdb = {}, {}, {}
  for ci = 1, 3 do
    local sg, sgx = 0, 0
    for i = 0, 3 do for j = 1, 4 do
      local k = (i * 3 + ci - 1) * 4 + j
      sg = sg + gf[k]
      sgx = sgx + gf[k] * (xf[k] - mf[ci]) * sf[ci]
    end end
    rdw[ci], rdb[ci] = sgx, sg
    for i = 0, 3 do for j = 1, 4 do
      local k = (i * 3 + ci - 1) * 4 + j
      local xh = (xf[k] - mf[ci]) * sf[ci]
      rdx[k] = wf[ci] * sf[ci] * (gf[k] - sg / m - xh * sgx / m)
    end end
  end
  T.allclose(dx, T.unflatten(rdx, { 4, 3, 2, 2 }), 1e-10, 1e-12)
  T.allclose(dw, rdw, 1e-10, 1e-12)
  T.allclose(db, rdb, 1e-10, 1e-12)
end)

T.test('layer_norm forward and backward values', function()
  local x = v100.randn({ 3, 2, 6 }, { dtype = 'f64' }) * 3 + 1
  local w, b = v100.rand({ 2, 6 }, { dtype = 'f64' }) + 0.5, v100.randn({ 2, 6 }, { dtype = 'f64' })
  local y, mean, rstd = N.layer_norm_forward(x, { 2, 6 }, w, b, 1e-5)
  local xf, wf, bf = flat(x), flat(w), flat(b)
  local ry, rm, rs = {}, {}, {}
  for r = 0, 2 do
    local s = 0
    for j = 1, 12 do s = s + xf[r * 12 + j] end
    local mu = s / 12
    local q = 0
    for j = 1, 12 do q = q + (xf[r * 12 + j] - mu) ^ 2 end
    local is = 1 / math.sqrt(q / 12 + 1e-5)
    rm[r + 1], rs[r + 1] = mu, is
    for j = 1, 12 do ry[r * 12 + j] = (xf[r * 12 + j] - mu) * is * wf[j] + bf[j] end
  end
  T.allclose(y, T.unflatten(ry, { 3, 2, 6 }), 1e-12, 1e-12)
  T.allclose(mean, rm, 1e-12, 1e-12)
  T.allclose(rstd, rs, 1e-12, 1e-12)
  T.allclose(N.layer_norm(x, { 2, 6 }, w, b), y, 1e-15, 0, 'autograd-aware entry')
  T.allclose(N.layer_norm(x, 6, nil, nil), (N.layer_norm_forward(x:view(6, 6), 6)):view(3, 2, 6), 1e-15, 0)
  local dy = v100.randn({ 3, 2, 6 }, { dtype = 'f64' })
  local dx, dw, db = N.layer_norm_backward(x, dy, { 2, 6 }, w, mean, rstd)
  local gf = flat(dy)
  local rdx, rdw, rdb = {}, {}, {}
  for j = 1, 12 do rdw[j], rdb[j] = 0, 0 end
  for r = 0, 2 do
    local s1, s2 = 0, 0
    for j = 1, 12 do
      local k = r * 12 + j
      local xh = (xf[k] - rm[r + 1]) * rs[r + 1]
      rdw[j] = rdw[j] + gf[k] * xh
      rdb[j] = rdb[j] + gf[k]
      s1 = s1 + gf[k] * wf[j]
      s2 = s2 + gf[k] * wf[j] * xh
    end
    for j = 1, 12 do
      local k = r * 12 + j
      local xh = (xf[k] - rm[r + 1]) * rs[r + 1]
      rdx[k] = rs[r + 1] * (gf[k] * wf[j] - s1 / 12 - xh * s2 / 12)
    end
  end
  T.allclose(dx, T.unflatten(rdx, { 3, 2, 6 }), 1e-10, 1e-12)
  T.allclose(dw, T.unflatten(rdw, { 2, 6 }), 1e-10, 1e-12)
  T.allclose(db, T.unflatten(rdb, { 2, 6 }), 1e-10, 1e-12)
end)

T.test('softmax_backward against the formula, every dim, softmax and log_softmax', function()
  local x, dy = v100.randn({ 3, 4, 5 }, { dtype = 'f64' }), v100.randn({ 3, 4, 5 }, { dtype = 'f64' })
  for _, d in ipairs({ 1, 2, 3, -1 }) do
    local y = x:softmax(d)
    local s = (dy * y):sum(d, true)
    T.allclose(N.softmax_backward(y, dy, d), y * (dy - s), 1e-12, 1e-13, 'softmax dim ' .. d)
    local ly = x:log_softmax(d)
    T.allclose(N.softmax_backward(ly, dy, d, true), dy - ly:exp() * dy:sum(d, true), 1e-12, 1e-13, 'log_softmax dim ' .. d)
  end
  local f = x:to('f32')
  T.allclose(N.softmax_backward(f:softmax(2), dy:to('f32'), 2), N.softmax_backward(x:softmax(2), dy, 2), 1e-5, 1e-6)
end)

T.test('errors name the op and the operands', function()
  local x = v100.randn({ 2, 3, 4, 4 })
  T.raises(function() N.batch_norm(x, nil, nil, v100.ones({ 4 }), nil, true) end,
    { 'batch_norm: weight has shape 4', "input's channels are 3" })
  T.raises(function() N.batch_norm(x, nil, nil, nil, nil, false) end, 'running_mean and running_var are required')
  T.raises(function() N.batch_norm(v100.randn({ 1, 3 }), nil, nil, nil, nil, true) end,
    'expected more than 1 value per channel when training')
  T.raises(function() N.batch_norm(v100.ones({ 2, 3 }, { dtype = 'i32' }), nil, nil, nil, nil, true) end,
    'batch_norm: x must be a float tensor')
  T.raises(function() N.layer_norm(x, { 3, 4 }) end, 'layer_norm: normalized_shape 3x4 does not match the last dims of x')
  T.raises(function() N.layer_norm(x, { 4 }, v100.ones({ 5 })) end, 'layer_norm: weight has shape 5 but normalized_shape is 4')
  T.raises(function() N.softmax_backward(x, v100.randn({ 2, 3 }), 1) end,
    'softmax_backward: y and dy must have the same shape')
end)

T.test('activation_backward ops against the derivative formulas', function()
  local x = v100.rand({ 50 }, { dtype = 'f64' }) * 8 - 4
  local g = v100.randn({ 50 }, { dtype = 'f64' })
  local xf, gf = flat(x), flat(g)
  local c = math.sqrt(2 / math.pi)
  local function ref(fn)
    local r = {}
    for i = 1, #xf do r[i] = gf[i] * fn(xf[i]) end
    return r
  end
  -- erf by its Maclaurin series (|v| <= 2.9 here: the cancellation costs about 4 of 16 digits)
  local function erf(v)
    local s, term, k = v, v, 0
    repeat
      k = k + 1
      term = term * -v * v / k
      s = s + term / (2 * k + 1)
    until math.abs(term) < 1e-17 * math.abs(s) or k > 200
    return 2 / math.sqrt(math.pi) * s
  end
  T.allclose(N.activation_backward('relu_backward', g, x), ref(function(v) return v > 0 and 1 or 0 end), 0, 0)
  T.allclose(N.activation_backward('gelu_backward', g, x),
    ref(function(v) return 0.5 * (1 + erf(v / math.sqrt(2))) + v * math.exp(-v * v / 2) / math.sqrt(2 * math.pi) end),
    1e-9, 1e-12)
  T.allclose(N.activation_backward('gelu_tanh_backward', g, x), ref(function(v)
    local e = math.exp(2 * c * (v + 0.044715 * v ^ 3))
    local t = (e - 1) / (e + 1) -- tanh (Lua 5.4 has no math.tanh)
    return 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * c * (1 + 3 * 0.044715 * v * v)
  end), 1e-12, 1e-13)
  local ty, sy = x:tanh(), x:sigmoid()
  local tf, sf = flat(ty), flat(sy)
  local rt, rs = {}, {}
  for i = 1, #xf do rt[i], rs[i] = gf[i] * (1 - tf[i] ^ 2), gf[i] * sf[i] * (1 - sf[i]) end
  T.allclose(N.activation_backward('tanh_backward', g, ty), rt, 1e-13, 1e-14)
  T.allclose(N.activation_backward('sigmoid_backward', g, sy), rs, 1e-13, 1e-14)
  T.eq(N.activation_backward('tanh_backward', g:to('f16'), ty:to('f16')).dtype, 'f16')
  T.raises(function() N.activation_backward('tanh_backward', g, v100.ones({ 50 }, { dtype = 'i32' })) end,
    'tanh_backward: expected float tensors')
  T.raises(function() N.activation_backward('foo', g, x) end, "activation_backward: unknown op 'foo'")
end)

-- ---- autograd (needs the autograd bindings and gradcheck) ----

local function gradcheck(fn, inputs) return v100.autograd.gradcheck(fn, inputs) end

T.test('gradcheck batch_norm training (x, weight, bias)', function()
  local x = v100.randn({ 3, 2, 2, 2 }, { dtype = 'f64', requires_grad = true })
  local w = (v100.rand({ 2 }, { dtype = 'f64' }) + 0.5):requires_grad_()
  local b = v100.randn({ 2 }, { dtype = 'f64', requires_grad = true })
  T.ok(gradcheck(function(a, ww, bb) return N.batch_norm(a, nil, nil, ww, bb, true, 0.1, 1e-5) end, { x, w, b }))
  T.ok(gradcheck(function(a) return N.batch_norm(nhwc(a), nil, nil, nil, nil, true) end, { x }), 'channels-last')
end)

T.test('gradcheck batch_norm eval (x, weight, bias)', function()
  local x = v100.randn({ 3, 2, 3 }, { dtype = 'f64', requires_grad = true })
  local w = (v100.rand({ 2 }, { dtype = 'f64' }) + 0.5):requires_grad_()
  local b = v100.randn({ 2 }, { dtype = 'f64', requires_grad = true })
  local rm, rv = v100.randn({ 2 }, { dtype = 'f64' }), v100.rand({ 2 }, { dtype = 'f64' }) + 0.5
  T.ok(gradcheck(function(a, ww, bb) return N.batch_norm(a, rm, rv, ww, bb, false, 0.1, 1e-5) end, { x, w, b }))
end)

T.test('gradcheck layer_norm (x, weight, bias)', function()
  local x = v100.randn({ 3, 5 }, { dtype = 'f64', requires_grad = true })
  local w = (v100.rand({ 5 }, { dtype = 'f64' }) + 0.5):requires_grad_()
  local b = v100.randn({ 5 }, { dtype = 'f64', requires_grad = true })
  T.ok(gradcheck(function(a, ww, bb) return N.layer_norm(a, { 5 }, ww, bb, 1e-5) end, { x, w, b }))
  local x3 = v100.randn({ 2, 3, 4 }, { dtype = 'f64', requires_grad = true })
  T.ok(gradcheck(function(a) return N.layer_norm(a, { 3, 4 }) end, { x3 }), 'two normalized dims, no affine')
end)

T.test('gradcheck softmax and log_softmax', function()
  local x = v100.randn({ 3, 4 }, { dtype = 'f64', requires_grad = true })
  T.ok(gradcheck(function(a) return a:softmax(2) end, { x }))
  T.ok(gradcheck(function(a) return a:log_softmax(1) end, { x }))
end)

T.test('backward through batch_norm fills .grad like the raw backward', function()
  local x = v100.randn({ 4, 3, 2, 2 }, { dtype = 'f64', requires_grad = true })
  local w = (v100.rand({ 3 }, { dtype = 'f64' }) + 0.5):requires_grad_()
  local b = v100.randn({ 3 }, { dtype = 'f64', requires_grad = true })
  local rm, rv = v100.zeros({ 3 }, { dtype = 'f64' }), v100.ones({ 3 }, { dtype = 'f64' })
  local r = v100.randn({ 4, 3, 2, 2 }, { dtype = 'f64' })
  local y = N.batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5)
  T.eq(y.grad_fn, 'BatchNormBackward')
  ;(y * r):sum():backward()
  local xd = x:detach()
  local _, sm, si = N.batch_norm_forward(xd, nil, nil, w:detach(), nil, true)
  local dx, dw, db = N.batch_norm_backward(xd, r, w:detach(), sm, si)
  T.allclose(x.grad, dx, 1e-12, 1e-12)
  T.allclose(w.grad, dw, 1e-12, 1e-12)
  T.allclose(b.grad, db, 1e-12, 1e-12)
  T.ok(rm:abs():sum():item() > 0, 'running mean moved')
end)

-- ---- batch norm fused with ReLU and a residual: relu(bn(x) + r) ----

-- The composed reference: bn, then + r, then relu, through the raw ops.
local function composed(x, rm, rv, w, b, training, act, r)
  local y = N.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)
  if r then y = y + r end
  if act == 'relu' then y = y:relu() end
  return y
end

local FUSED_FORMS = {
  { act = 'relu' }, { residual = true }, { act = 'relu', residual = true }, { act = 'none' },
}
local function form_name(f) return string.format('act %s residual %s', f.act or 'none', tostring(f.residual or false)) end

T.test('fused batch_norm forward equals the composed ops (f64 exactly, f32/f16 within rounding)', function()
  for _, dt in ipairs({ 'f64', 'f32', 'f16', 'bf16' }) do
    local tol = ({ f64 = 1e-14, f32 = 1e-6, f16 = 1e-3, bf16 = 1e-2 })[dt]
    for _, layout in ipairs({ 'nchw', 'nhwc' }) do
      for _, training in ipairs({ true, false }) do
        for _, f in ipairs(FUSED_FORMS) do
          local shape = { 3, 5, 4, 3 }
          local x = (v100.randn(shape, { dtype = 'f64' }) * 1.5 + 0.2):to(dt)
          local r = v100.randn(shape, { dtype = 'f64' }):to(dt)
          if layout == 'nhwc' then x, r = nhwc(x), nhwc(r) end
          local pd = dt == 'f64' and 'f64' or 'f32'
          local w, b = v100.rand({ 5 }, { dtype = pd }) + 0.5, v100.randn({ 5 }, { dtype = pd })
          local rm, rv = v100.randn({ 5 }, { dtype = pd }) * 0.1, v100.rand({ 5 }, { dtype = pd }) + 0.5
          local rm2, rv2 = rm:clone(), rv:clone()
          local msg = string.format('%s %s %s %s', dt, layout, training and 'training' or 'eval', form_name(f))
          local y = N.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5,
            { activation = f.act, residual = f.residual and r or nil })
          local ref = composed(x, rm2, rv2, w, b, training, f.act, f.residual and r or nil)
          T.eq(y.dtype, dt, msg .. ' dtype')
          if layout == 'nhwc' then T.eq(y:stride(2), 1, msg .. ': output keeps channels-last') end
          T.allclose(y, ref, tol, tol, msg)
          T.allclose(rm, rm2, 0, 0, msg .. ': running_mean as the plain batch norm updates it')
          T.allclose(rv, rv2, 0, 0, msg .. ': running_var')
          if f.act == 'relu' then T.ok(y:min():item() >= 0, msg .. ': relu output') end
        end
      end
    end
  end
end)

T.test('fused batch_norm_backward equals the composed backward (masked dy, then batch norm)', function()
  for _, layout in ipairs({ 'nchw', 'nhwc' }) do
    for _, affine in ipairs({ true, false }) do
      local shape = { 4, 6, 3, 2 }
      local x, dy = v100.randn(shape, { dtype = 'f64' }) + 0.3, v100.randn(shape, { dtype = 'f64' })
      local r = v100.randn(shape, { dtype = 'f64' })
      if layout == 'nhwc' then x, dy, r = nhwc(x), nhwc(dy), nhwc(r) end
      local w = affine and (v100.rand({ 6 }, { dtype = 'f64' }) + 0.5) or nil
      local b = affine and v100.randn({ 6 }, { dtype = 'f64' }) or nil
      local msg = layout .. (affine and ' affine' or ' affine off')
      -- relu(bn(x)): the mask recomputed from x, or read from y: both are the composed backward
      local y, sm, si = N.batch_norm_forward(x, nil, nil, w, b, true, 0.1, 1e-5, { activation = 'relu' })
      local masked = N.activation_backward('relu_backward', dy, y)
      local rdx, rdw, rdb = N.batch_norm_backward(x, masked, w, sm, si, 1e-5)
      local dx, dw, db = N.batch_norm_backward(x, dy, w, sm, si, 1e-5, { activation = 'relu', bias = b })
      T.allclose(dx, rdx, 1e-12, 1e-12, msg .. ' relu dx (mask from x)')
      if affine then
        T.allclose(dw, rdw, 1e-12, 1e-12, msg .. ' relu dweight')
        T.allclose(db, rdb, 1e-12, 1e-12, msg .. ' relu dbias')
      end
      local dx2 = N.batch_norm_backward(x, dy, w, sm, si, 1e-5, { activation = 'relu', y = y })
      T.allclose(dx2, rdx, 1e-12, 1e-12, msg .. ' relu dx (mask from y)')
      -- relu(bn(x) + r): dr is the masked dy
      local yr, sm2, si2 = N.batch_norm_forward(x, nil, nil, w, b, true, 0.1, 1e-5, { activation = 'relu', residual = r })
      local masked2 = N.activation_backward('relu_backward', dy, yr)
      local ex, ew, eb = N.batch_norm_backward(x, masked2, w, sm2, si2, 1e-5)
      local gx, gw, gb, gr = N.batch_norm_backward(x, dy, w, sm2, si2, 1e-5,
        { activation = 'relu', residual = true, y = yr })
      T.allclose(gx, ex, 1e-12, 1e-12, msg .. ' add+relu dx')
      T.allclose(gr, masked2, 0, 0, msg .. ' add+relu dresidual = the masked dy')
      if affine then
        T.allclose(gw, ew, 1e-12, 1e-12, msg .. ' add+relu dweight')
        T.allclose(gb, eb, 1e-12, 1e-12, msg .. ' add+relu dbias')
      end
      -- bn(x) + r: dr is dy
      local _, _, _, rr = N.batch_norm_backward(x, dy, w, sm, si, 1e-5, { residual = true })
      T.allclose(rr, dy, 0, 0, msg .. ' add: dresidual = dy')
    end
  end
end)

T.test('fused relu backward: the mask recomputed from x is the forward output > 0 exactly (f32, f16, bf16)', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16' }) do
    for _, layout in ipairs({ 'nchw', 'nhwc' }) do
      local shape = { 8, 7, 5, 5 }
      local x = (v100.randn(shape, { dtype = 'f64' }) * 3 - 1):to(dt)
      local dy = v100.randn(shape, { dtype = 'f64' }):to(dt)
      if layout == 'nhwc' then x, dy = nhwc(x), nhwc(dy) end
      local w, b = v100.randn({ 7 }) + 0.2, v100.randn({ 7 }) * 0.5
      local y, sm, si = N.batch_norm_forward(x, nil, nil, w, b, true, 0.1, 1e-5, { activation = 'relu' })
      local a = N.batch_norm_backward(x, dy, w, sm, si, 1e-5, { activation = 'relu', bias = b })
      local c = N.batch_norm_backward(x, dy, w, sm, si, 1e-5, { activation = 'relu', y = y })
      T.allclose(a, c, 0, 0, dt .. ' ' .. layout .. ': same dx from either mask')
    end
  end
end)

T.test('gradcheck fused batch_norm: relu, add, add + relu; training and eval; channels-last', function()
  local shape = { 3, 2, 2, 3 }
  for _, f in ipairs(FUSED_FORMS) do
    for _, training in ipairs({ true, false }) do
      local x = (v100.randn(shape, { dtype = 'f64' }) + 0.2):requires_grad_()
      local w = (v100.rand({ 2 }, { dtype = 'f64' }) + 0.5):requires_grad_()
      local b = v100.randn({ 2 }, { dtype = 'f64', requires_grad = true })
      local r = v100.randn(shape, { dtype = 'f64', requires_grad = true })
      local rm, rv = v100.randn({ 2 }, { dtype = 'f64' }) * 0.1, v100.rand({ 2 }, { dtype = 'f64' }) + 0.5
      local msg = form_name(f) .. (training and ' training' or ' eval')
      T.ok(gradcheck(function(a, ww, bb, rr)
        return N.batch_norm(a, rm, rv, ww, bb, training, 0, 1e-5, { activation = f.act, residual = f.residual and rr or nil })
      end, { x, w, b, r }), msg)
      T.ok(gradcheck(function(a, rr)
        return N.batch_norm(nhwc(a), nil, nil, nil, nil, true, 0.1, 1e-5,
          { activation = f.act, residual = f.residual and nhwc(rr) or nil })
      end, { x, r }), msg .. ' channels-last, affine off')
    end
  end
end)

T.test('fused batch_norm through autograd: node names, gradients as the composed graph', function()
  local shape = { 4, 3, 3, 3 }
  local x0, r0 = v100.randn(shape, { dtype = 'f64' }), v100.randn(shape, { dtype = 'f64' })
  local w0, b0 = v100.rand({ 3 }, { dtype = 'f64' }) + 0.5, v100.randn({ 3 }, { dtype = 'f64' })
  local g = v100.randn(shape, { dtype = 'f64' })
  local names = { 'BatchNormReluBackward', 'BatchNormAddBackward', 'BatchNormAddReluBackward', 'BatchNormBackward' }
  for i, f in ipairs(FUSED_FORMS) do
    local res = {}
    for _, fused in ipairs({ true, false }) do
      local x, r = x0:clone():requires_grad_(), r0:clone():requires_grad_()
      local w, b = w0:clone():requires_grad_(), b0:clone():requires_grad_()
      local y
      if fused then
        y = N.batch_norm(x, nil, nil, w, b, true, 0.1, 1e-5, { activation = f.act, residual = f.residual and r or nil })
        T.eq(y.grad_fn, names[i], form_name(f))
      else
        y = composed(x, nil, nil, w, b, true, f.act, f.residual and r or nil)
      end
      ;(y * g):sum():backward()
      res[fused] = { x.grad, w.grad, b.grad, f.residual and r.grad or nil }
    end
    for k = 1, 3 do T.allclose(res[true][k], res[false][k], 1e-12, 1e-12, form_name(f) .. ' grad ' .. k) end
    if f.residual then T.allclose(res[true][4], res[false][4], 1e-12, 1e-12, form_name(f) .. ' residual grad') end
  end
end)

T.test('nn.BatchNorm2d with fusion options: same state, same outputs as the module then relu(y + r)', function()
  local nn = require 'v100.nn'
  local a, c = nn.BatchNorm2d(4), nn.BatchNorm2d(4)
  c:load_state_dict(a:state_dict())
  local x, r = v100.randn({ 2, 4, 3, 3 }), v100.randn({ 2, 4, 3, 3 })
  T.allclose(a(x, { activation = 'relu', residual = r }), (c(x) + r):relu(), 1e-6, 1e-6)
  T.allclose(a.running_mean, c.running_mean, 0, 0, 'running stats updated alike')
  T.eq(a.num_batches_tracked:item(), 1)
  a:eval()
  c:eval()
  T.allclose(a(x, { activation = 'relu' }), c(x):relu(), 1e-6, 1e-6, 'eval')
end)

T.test('fused batch_norm errors name the op and the operands', function()
  local x = v100.randn({ 2, 3, 4, 4 })
  T.raises(function() N.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-5, { residual = v100.randn({ 2, 3, 4, 5 }) }) end,
    { 'batch_norm: x and residual must have the same shape and dtype', '2x3x4x5' })
  T.raises(function() N.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-5, { residual = x:to('f64') }) end,
    'batch_norm: x and residual must have the same shape and dtype')
  T.raises(function() N.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-5, { activation = 'gelu' }) end,
    "batch_norm: activation must be 'relu' or 'none', got gelu")
  T.raises(function() N.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-5, { residual = 3 }) end,
    'batch_norm: residual must be a tensor, got number')
  local _, sm, si = N.batch_norm_forward(x, nil, nil, nil, nil, true)
  T.raises(function() N.batch_norm_backward(x, x, nil, sm, si, 1e-5, { activation = 'relu', residual = true }) end,
    "batch_norm_backward: the forward's output y is required for relu(bn(x) + residual)")
  T.raises(function() N.batch_norm_backward(x, x, nil, sm, si, 1e-5, { activation = 'relu', y = v100.randn({ 2, 3 }) }) end,
    'batch_norm_backward: x and y must have the same shape and dtype')
end)

T.test('autocast treats the fused batch_norm as batch_norm: the residual is cast as x is', function()
  local amp = require 'v100.amp'
  local x = v100.randn({ 2, 4, 3, 3 }):to('f16')
  local r = v100.randn({ 2, 4, 3, 3 }):to('f16')
  local function run()
    return N.batch_norm(x, nil, nil, v100.ones({ 4 }), v100.zeros({ 4 }), true, 0.1, 1e-5,
      { activation = 'relu', residual = r })
  end
  T.eq(amp.autocast(run).dtype, 'f16', 'batch_norm keeps its inputs by default')
  amp.set_op('batch_norm', 'fp32')
  local ok, y = pcall(amp.autocast, run)
  amp.reset_ops()
  T.ok(ok, tostring(y))
  T.eq(y.dtype, 'f32', 'batch_norm set to fp32 casts x and the residual')
  T.allclose(y, (N.batch_norm(x:float(), nil, nil, nil, nil, true) + r:float()):relu(), 1e-5, 1e-5)
end)

T.run()
