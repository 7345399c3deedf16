-- Batch norm (plain and fused with ReLU and a residual), layer norm, softmax backward and the
-- activation-backward ops on CUDA against the CPU with the same inputs: f32/f16/bf16 (f16/bf16
-- data with f32 parameters) through cuDNN, f64 and the fused forms through our own kernels, NCHW
-- and channels-last, ResNet- and BERT-like shapes, running stats included.
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'
local N = v100._nn

v100.set_allow_tf32(false)
v100.manual_seed(2000 + T.seed % 100000)

local TOL = { f32 = 1e-5, f16 = 1e-3, bf16 = 1e-2, f64 = 1e-10 }
local PDT = { f32 = 'f32', f16 = 'f32', bf16 = 'f32', f64 = 'f64' }

local function nhwc(t) return t:permute(1, 3, 4, 2):contiguous():permute(1, 4, 2, 3) end
local function cuda(t) return t and t:to('cuda') or nil end

-- g (cuda) against c (cpu): rtol = tol * scale, atol = tol * scale * amag (typical magnitude)
local function same(g, c, dt, msg, scale, amag)
  T.ok(g.device:sub(1, 4) == 'cuda', msg .. ': result on ' .. g.device)
  T.eq(g.dtype, c.dtype, msg .. ' dtype')
  T.eq(g.shape, c.shape, msg .. ' shape')
  local tol = TOL[dt] * (scale or 1)
  T.allclose(g:to('cpu'), c, tol, tol * (amag or 1), msg)
end

local function bn_case(shape, dt, layout, affine, msg)
  local C = shape[2]
  local m = 1
  for i, s in ipairs(shape) do if i ~= 2 then m = m * s end end
  local x = (v100.randn(shape, { dtype = 'f64' }) * 1.5 + 0.3):to(dt)
  local gx = cuda(x)
  if layout == 'nhwc' then x, gx = nhwc(x), nhwc(gx) end -- :to() copies make contiguous tensors
  local pd = PDT[dt]
  local w = affine and (v100.rand({ C }, { dtype = pd }) + 0.5) or nil
  local b = affine and v100.randn({ C }, { dtype = pd }) or nil
  local rm, rv = v100.randn({ C }, { dtype = pd }) * 0.1, v100.rand({ C }, { dtype = pd }) + 0.5
  local grm, grv = cuda(rm), cuda(rv)
  local gw, gb = cuda(w), cuda(b)
  if layout == 'nhwc' then T.eq(gx:stride(2), 1, msg .. ': cuda input is channels-last') end
  -- training forward, running stats
  local y, sm, si = N.batch_norm_forward(x, rm, rv, w, b, true, 0.1, 1e-5)
  local gy, gsm, gsi = N.batch_norm_forward(gx, grm, grv, gw, gb, true, 0.1, 1e-5)
  same(gy, y, dt, msg .. ' y', 2, 4)
  if layout == 'nhwc' then T.eq(gy:stride(2), 1, msg .. ': output keeps channels-last') end
  same(gsm, sm, pd == 'f64' and 'f64' or 'f32', msg .. ' save_mean', 1, 1)
  same(gsi, si, pd == 'f64' and 'f64' or 'f32', msg .. ' save_invstd', 2, 1)
  same(grm, rm, pd == 'f64' and 'f64' or 'f32', msg .. ' running_mean', 1, 1)
  same(grv, rv, pd == 'f64' and 'f64' or 'f32', msg .. ' running_var (unbiased)', 1, 1)
  -- eval
  local ey = N.batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5)
  local gey = N.batch_norm(gx, grm, grv, gw, gb, false, 0.1, 1e-5)
  same(gey, ey, dt, msg .. ' eval y', 2, 4)
  -- backward with the saved statistics of each device
  local dy = (v100.randn(shape, { dtype = 'f64' })):to(dt)
  local gdy = cuda(dy)
  if layout == 'nhwc' then dy, gdy = nhwc(dy), nhwc(gdy) end
  local dx, dw, db = N.batch_norm_backward(x, dy, w, sm, si, 1e-5)
  local gdx, gdw, gdb = N.batch_norm_backward(gx, gdy, gw, gsm, gsi, 1e-5)
  same(gdx, dx, dt, msg .. ' dx', 4, 10)
  same(gdw, dw, pd == 'f64' and 'f64' or 'f32', msg .. ' dweight', 10, math.sqrt(m))
  same(gdb, db, pd == 'f64' and 'f64' or 'f32', msg .. ' dbias', 10, math.sqrt(m))
end

T.test('batch_norm cuda vs cpu: dtypes, layouts, affine on/off, small and ResNet-like shapes', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    for _, layout in ipairs({ 'nchw', 'nhwc' }) do
      bn_case({ 4, 5, 3, 3 }, dt, layout, true, string.format('%s %s small', dt, layout))
      bn_case({ 3, 7, 2, 5 }, dt, layout, false, string.format('%s %s affine off', dt, layout))
    end
    bn_case({ 64, 256, 14, 14 }, dt, 'nchw', true, dt .. ' 64x256x14x14 nchw')
    bn_case({ 64, 256, 14, 14 }, dt, 'nhwc', true, dt .. ' 64x256x14x14 nhwc')
    bn_case({ 32, 64, 56, 56 }, dt, 'nhwc', true, dt .. ' 32x64x56x56 nhwc')
    -- the vectorised channels-last kernels with 3 vectors of channels per row (f16/bf16: 24 / 8),
    -- and a channel count no vector width divides (the scalar kernels)
    bn_case({ 8, 24, 5, 7 }, dt, 'nhwc', true, dt .. ' 8x24x5x7 nhwc')
    bn_case({ 6, 13, 4, 4 }, dt, 'nhwc', true, dt .. ' 6x13x4x4 nhwc')
  end
end)

T.test('batch_norm cuda: 2-D and 3-D inputs', function()
  for _, dt in ipairs({ 'f32', 'f16', 'f64' }) do
    bn_case({ 128, 96 }, dt, 'nchw', true, dt .. ' 2-D')
    bn_case({ 16, 12, 33 }, dt, 'nchw', true, dt .. ' 3-D')
  end
end)

T.test('batch_norm cuda autograd matches the cpu', function()
  local x = v100.randn({ 8, 16, 5, 5 }, { dtype = 'f64' })
  local w, b = v100.rand({ 16 }, { dtype = 'f64' }) + 0.5, v100.randn({ 16 }, { dtype = 'f64' })
  local r = v100.randn({ 8, 16, 5, 5 }, { dtype = 'f64' })
  local grads = {}
  for _, dev in ipairs({ 'cpu', 'cuda' }) do
    -- fresh leaves on each device (x:to('cpu') would be x itself)
    local xx, ww, bb = x:clone():to(dev):requires_grad_(), w:clone():to(dev):requires_grad_(),
      b:clone():to(dev):requires_grad_()
    local y = N.batch_norm(xx, nil, nil, ww, bb, true, 0.1, 1e-5)
    ;(y * r:to(dev)):sum():backward()
    grads[dev] = { xx.grad, ww.grad, bb.grad }
  end
  for i = 1, 3 do same(grads.cuda[i], grads.cpu[i], 'f64', 'grad ' .. i, 1, 1) end
end)

local function ln_case(rows, cols, dt, affine, msg)
  local x = (v100.randn({ rows, cols }, { dtype = 'f64' }) * 2 + 0.5):to(dt)
  local pd = PDT[dt]
  local w = affine and (v100.rand({ cols }, { dtype = pd }) + 0.5) or nil
  local b = affine and v100.randn({ cols }, { dtype = pd }) or nil
  local y, mean, rstd = N.layer_norm_forward(x, cols, w, b, 1e-5)
  local gy, gmean, grstd = N.layer_norm_forward(cuda(x), cols, cuda(w), cuda(b), 1e-5)
  same(gy, y, dt, msg .. ' y', 2, 4)
  same(gmean, mean, pd == 'f64' and 'f64' or 'f32', msg .. ' mean', 1, 1)
  same(grstd, rstd, pd == 'f64' and 'f64' or 'f32', msg .. ' rstd', 2, 1)
  local dy = v100.randn({ rows, cols }, { dtype = 'f64' }):to(dt)
  local dx, dw, db = N.layer_norm_backward(x, dy, cols, w, mean, rstd)
  local gdx, gdw, gdb = N.layer_norm_backward(cuda(x), cuda(dy), cols, cuda(w), gmean, grstd)
  same(gdx, dx, dt, msg .. ' dx', 4, 10)
  same(gdw, dw, pd == 'f64' and 'f64' or 'f32', msg .. ' dweight', 10, math.sqrt(rows))
  same(gdb, db, pd == 'f64' and 'f64' or 'f32', msg .. ' dbias', 10, math.sqrt(rows))
end

T.test('layer_norm cuda vs cpu: BERT-like 8192x1024, odd widths, no affine', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    ln_case(8192, 1024, dt, true, dt .. ' 8192x1024')
    ln_case(37, 1000, dt, true, dt .. ' 37x1000')
    ln_case(5, 77, dt, false, dt .. ' 5x77 no affine')
    ln_case(3, 4099, dt, true, dt .. ' 3x4099')
  end
  -- a view with an offset (unaligned rows): the scalar path
  local x = v100.randn({ 9, 64 }):narrow(2, 2, 62)
  same(N.layer_norm(cuda(x), 62), N.layer_norm(x, 62), 'f32', 'narrowed', 2, 4)
end)

T.test('softmax_backward cuda vs cpu', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    for _, case in ipairs({ { { 64, 1000 }, 2 }, { { 8, 30, 7 }, 2 }, { { 4, 5, 6 }, 1 }, { { 3, 4, 2049 }, 3 } }) do
      local shape, d = case[1], case[2]
      for _, lg in ipairs({ false, true }) do
        local x = v100.randn(shape, { dtype = 'f64' }):to(dt)
        local y = lg and x:log_softmax(d) or x:softmax(d)
        local dy = v100.randn(shape, { dtype = 'f64' }):to(dt)
        same(N.softmax_backward(cuda(y), cuda(dy), d, lg), N.softmax_backward(y, dy, d, lg), dt,
          string.format('%s %s dim %d log %s', dt, T.shape_str(shape), d, tostring(lg)), 4, 4)
      end
    end
  end
end)

T.test('activation-backward ops cuda vs cpu', function()
  local ops = {
    { 'relu_backward', function(x) return x end },
    { 'gelu_backward', function(x) return x end },
    { 'gelu_tanh_backward', function(x) return x end },
    { 'tanh_backward', function(x) return x:tanh() end },
    { 'sigmoid_backward', function(x) return x:sigmoid() end },
  }
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    for _, op in ipairs(ops) do
      local x = (v100.rand({ 100003 }, { dtype = 'f64' }) * 8 - 4):to(dt)
      local v = op[2](x)
      local g = v100.randn({ 100003 }, { dtype = 'f64' }):to(dt)
      same(N.activation_backward(op[1], cuda(g), cuda(v)), N.activation_backward(op[1], g, v), dt, dt .. ' ' .. op[1], 2, 2)
    end
  end
end)

-- ---- batch norm fused with ReLU and a residual ----
-- Shapes reach every kernel: channels-last with c a multiple of the vector width (the 16-byte
-- kernels) or not (c = 5, 13: scalar), NCHW with hw a multiple of it (4x4, 28x28) or not (3x3,
-- 5x7: scalar). The ReLU's mask of the CPU reference is the GPU forward's (its y, copied), so an
-- element whose pre-activation rounds differently on the two devices cannot flip the comparison;
-- the GPU's own recomputed mask must then equal its y > 0 exactly (checked separately).
local FORMS = { { act = 'relu' }, { residual = true }, { act = 'relu', residual = true } }

local function fused_case(shape, dt, layout, f, affine, msg)
  local C = shape[2]
  local m = 1
  for i, s in ipairs(shape) do if i ~= 2 then m = m * s end end
  msg = string.format('%s [act %s, residual %s]', msg, f.act or 'none', tostring(f.residual or false))
  local x = (v100.randn(shape, { dtype = 'f64' }) * 1.5 + 0.3):to(dt)
  local r = v100.randn(shape, { dtype = 'f64' }):to(dt)
  local dy = v100.randn(shape, { dtype = 'f64' }):to(dt)
  local gx, gr, gdy = cuda(x), cuda(r), cuda(dy)
  if layout == 'nhwc' then x, r, dy, gx, gr, gdy = nhwc(x), nhwc(r), nhwc(dy), nhwc(gx), nhwc(gr), nhwc(gdy) end
  local pd = PDT[dt]
  local pdt = pd == 'f64' and 'f64' or 'f32'
  local w = affine and (v100.rand({ C }, { dtype = pd }) + 0.5) or nil
  local b = affine and v100.randn({ C }, { dtype = pd }) or nil
  local rm, rv = v100.randn({ C }, { dtype = pd }) * 0.1, v100.rand({ C }, { dtype = pd }) + 0.5
  local grm, grv, gw, gb = cuda(rm), cuda(rv), cuda(w), cuda(b)
  local opts = { activation = f.act, residual = f.residual and r or nil }
  local gopts = { activation = f.act, residual = f.residual and gr or nil }
  -- training forward
  local y, sm, si = N.batch_norm_forward(x, rm, rv, w, b, true, 0.1, 1e-5, opts)
  local gy, gsm, gsi = N.batch_norm_forward(gx, grm, grv, gw, gb, true, 0.1, 1e-5, gopts)
  same(gy, y, dt, msg .. ' y', 2, 4)
  if layout == 'nhwc' then T.eq(gy:stride(2), 1, msg .. ': output keeps channels-last') end
  same(gsm, sm, pdt, msg .. ' save_mean', 1, 1)
  same(gsi, si, pdt, msg .. ' save_invstd', 2, 1)
  same(grm, rm, pdt, msg .. ' running_mean', 1, 1)
  same(grv, rv, pdt, msg .. ' running_var', 1, 1)
  -- eval forward
  same(N.batch_norm(gx, grm, grv, gw, gb, false, 0.1, 1e-5, gopts), N.batch_norm(x, rm, rv, w, b, false, 0.1, 1e-5, opts),
    dt, msg .. ' eval y', 2, 4)
  -- backward (training statistics of each device); the reference masks with the GPU's y
  local ycpu = gy:to('cpu')
  local bopts, gbopts
  if f.act == 'relu' and f.residual then
    bopts = { activation = 'relu', residual = true, y = ycpu }
    gbopts = { activation = 'relu', residual = true, y = gy }
  elseif f.act == 'relu' then
    bopts = { activation = 'relu', y = ycpu }
    gbopts = { activation = 'relu', bias = gb } -- the mask recomputed from x
  else
    bopts, gbopts = { residual = true }, { residual = true }
  end
  local dx, dw, db, dr = N.batch_norm_backward(x, dy, w, sm, si, 1e-5, bopts)
  local gdx, gdw, gdb, gdr = N.batch_norm_backward(gx, gdy, gw, gsm, gsi, 1e-5, gbopts)
  same(gdx, dx, dt, msg .. ' dx', 4, 10)
  if layout == 'nhwc' then T.eq(gdx:stride(2), 1, msg .. ': dx keeps channels-last') end
  same(gdw, dw, pdt, msg .. ' dweight', 10, math.sqrt(m))
  same(gdb, db, pdt, msg .. ' dbias', 10, math.sqrt(m))
  if f.residual then
    T.ok(gdr ~= nil, msg .. ': dresidual returned')
    same(gdr, dr, dt, msg .. ' dresidual (the masked dy)', 1, 1)
  end
  if f.act == 'relu' and not f.residual then
    -- the recomputed mask is the forward's y > 0: the same dx as reading y, bit for bit
    local ydx, ydw = N.batch_norm_backward(gx, gdy, gw, gsm, gsi, 1e-5, { activation = 'relu', y = gy })
    T.allclose(gdx:to('cpu'), ydx:to('cpu'), 0, 0, msg .. ': cuda dx with the recomputed mask = with y > 0')
    T.allclose(gdw:to('cpu'), ydw:to('cpu'), 0, 0, msg .. ': cuda dweight with the recomputed mask = with y > 0')
  end
end

T.test('fused batch_norm cuda vs cpu: relu, add, add + relu; dtypes, layouts, vector tails', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    for _, f in ipairs(FORMS) do
      for _, layout in ipairs({ 'nchw', 'nhwc' }) do
        fused_case({ 4, 5, 3, 3 }, dt, layout, f, true, string.format('%s %s 4x5x3x3', dt, layout))
        fused_case({ 8, 24, 5, 7 }, dt, layout, f, true, string.format('%s %s 8x24x5x7', dt, layout))
        fused_case({ 6, 13, 4, 4 }, dt, layout, f, false, string.format('%s %s 6x13x4x4 affine off', dt, layout))
        fused_case({ 16, 64, 28, 28 }, dt, layout, f, true, string.format('%s %s 16x64x28x28', dt, layout))
      end
      fused_case({ 64, 36, 8 }, dt, 'nchw', f, true, dt .. ' 3-D 64x36x8')
      fused_case({ 96, 40 }, dt, 'nchw', f, true, dt .. ' 2-D 96x40')
    end
  end
end)

T.test('fused batch_norm cuda: a channel-narrowed view (made contiguous by the front end)', function()
  local x = v100.randn({ 4, 16, 4, 4 }):narrow(2, 2, 8)
  local r = v100.randn({ 4, 8, 4, 4 })
  local opts = { activation = 'relu', residual = r }
  same(N.batch_norm(cuda(x), nil, nil, nil, nil, true, 0.1, 1e-5, { activation = 'relu', residual = cuda(r) }),
    N.batch_norm(x, nil, nil, nil, nil, true, 0.1, 1e-5, opts), 'f32', 'narrowed', 2, 4)
end)

T.test('fused batch_norm cuda autograd matches the cpu (f64), and the composed ops on cuda (f16)', function()
  local shape = { 8, 16, 5, 5 }
  local x = v100.randn(shape, { dtype = 'f64' })
  local rr = v100.randn(shape, { dtype = 'f64' })
  local w, b = v100.rand({ 16 }, { dtype = 'f64' }) + 0.5, v100.randn({ 16 }, { dtype = 'f64' })
  local g = v100.randn(shape, { dtype = 'f64' })
  for _, f in ipairs(FORMS) do
    local grads = {}
    for _, dev in ipairs({ 'cpu', 'cuda' }) do
      local xx, ww, bb, r2 = x:clone():to(dev):requires_grad_(), w:clone():to(dev):requires_grad_(),
        b:clone():to(dev):requires_grad_(), rr:clone():to(dev):requires_grad_()
      local y = N.batch_norm(xx, nil, nil, ww, bb, true, 0.1, 1e-5,
        { activation = f.act, residual = f.residual and r2 or nil })
      ;(y * g:to(dev)):sum():backward()
      grads[dev] = { xx.grad, ww.grad, bb.grad, f.residual and r2.grad or nil }
    end
    for i = 1, f.residual and 4 or 3 do same(grads.cuda[i], grads.cpu[i], 'f64', 'grad ' .. i, 1, 1) end
  end
  -- f16 channels-last on cuda: fused against the composed ops on the same device. relu(bn(x)) and
  -- bn(x) + r only: with both, the composed ops round bn(x) before adding r, so elements whose
  -- sum is within an f16 rounding of 0 may take the other side of the ReLU.
  local hx, hr, hg = nhwc(cuda(x:to('f16'))), nhwc(cuda(rr:to('f16'))), nhwc(cuda(g:to('f16')))
  local hw, hb = cuda(w:to('f32')), cuda(b:to('f32'))
  for _, f in ipairs({ { act = 'relu' }, { residual = true } }) do
    local res = {}
    for _, fused in ipairs({ true, false }) do
      local xx, r2 = hx:clone():requires_grad_(), hr:clone():requires_grad_()
      local ww, bb = hw:clone():requires_grad_(), hb:clone():requires_grad_()
      local y
      if fused then
        y = N.batch_norm(xx, nil, nil, ww, bb, true, 0.1, 1e-5, { activation = f.act, residual = f.residual and r2 or nil })
      else
        y = N.batch_norm(xx, nil, nil, ww, bb, true, 0.1, 1e-5)
        if f.residual then y = y + r2 else y = y:relu() end
      end
      ;(y:float() * hg:float()):sum():backward()
      res[fused] = { y, xx.grad, ww.grad, bb.grad, f.residual and r2.grad or nil }
    end
    local names = { 'y', 'dx', 'dweight', 'dbias', 'dresidual' }
    for i = 1, f.residual and 5 or 4 do
      T.allclose(res[true][i]:to('cpu'), res[false][i]:to('cpu'), 2e-3, 2e-3,
        string.format('f16 fused vs composed (act %s, residual %s) %s', f.act or 'none', tostring(f.residual or false),
          names[i]))
    end
  end
end)

T.run()
