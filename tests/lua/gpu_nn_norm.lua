-- Batch norm, layer norm, softmax backward and the activation-backward ops on CUDA against the CPU
-- with the same inputs: f32/f16/bf16 (f16/bf16 data with f32 parameters) through cuDNN, f64 through
-- our own kernels, NCHW and channels-last, ResNet- and BERT-like shapes, running stats included.
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

T.run()
