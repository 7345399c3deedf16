-- tests/lua/gpu_nn_conv.lua: conv2d (forward, dx, dw, dbias) and 2-D pooling on CUDA against the
-- CPU, in f32 (TF32 off), f16, bf16 and f64, NCHW and channels-last, for several configurations
-- (padding, stride 2, dilation, groups, depthwise, 1x1 stride 2, ResNet-like 32x64x56x56 3x3;
-- max pooling: the ResNet stem, ties, odd channel counts, a 16x16 window, NaN).
-- The CPU reference runs in f64 on the very values the GPU sees (rounded to the dtype), so the
-- tolerances only cover the GPU's arithmetic and its rounding of results. Errors are measured
-- relative to the largest reference magnitude (sums of many products cancel, so an element's own
-- relative error near zero is meaningless).
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F
local C = require('v100.core')._nn

if not T.has_cuda() then
  print('no CUDA device: skipped')
  T.run()
  return
end

v100.set_allow_tf32(false)
v100.manual_seed(T.seed % 1000003)

-- fwd/dx and dw tolerances (dw sums over N*P*Q products, so it gets more room: 'resnet 3x3' sums
-- 100,352 per element, and cuDNN's f32 weight-gradient algorithms accumulate with atomics in an
-- order that changes between runs; the H200 measured 5.13e-5 there once, 2026-11-30).
local TOL = { f32 = { 1e-5, 1e-4 }, f16 = { 2e-3, 5e-3 }, bf16 = { 1e-2, 2e-2 }, f64 = { 1e-12, 1e-12 } }

local function f64cpu(t) return t:to{ dtype = 'f64', device = 'cpu' } end

local function close(got, ref, tol, msg)
  T.eq(got.shape, ref.shape, msg)
  local r = f64cpu(ref)
  local scale = math.max(r:abs():max():item(), 1e-6)
  local err = (f64cpu(got) - r):abs():max():item() / scale
  T.ok(err <= tol, string.format('%s: max error %.3g of the largest magnitude %.3g (tolerance %.3g)', msg, err,
    scale, tol))
end

local function rnd(shape, dt) return v100.randn(shape):to(dt) end

local conv_cases = {
  { name = 'pad 1', xs = { 4, 8, 13, 11 }, ws = { 16, 8, 3, 3 }, o = { padding = 1 } },
  { name = 'stride 2 groups 2', xs = { 3, 8, 15, 14 }, ws = { 12, 4, 3, 2 }, o = { stride = 2, padding = { 1, 0 }, groups = 2 } },
  { name = 'dilation 2', xs = { 2, 6, 17, 16 }, ws = { 8, 6, 3, 3 }, o = { padding = 2, dilation = 2 } },
  { name = 'depthwise', xs = { 4, 16, 12, 12 }, ws = { 16, 1, 3, 3 }, o = { padding = 1, groups = 16 } },
  { name = '1x1 stride 2', xs = { 8, 64, 28, 28 }, ws = { 128, 64, 1, 1 }, o = { stride = 2 } },
  { name = 'resnet 3x3', xs = { 32, 64, 56, 56 }, ws = { 64, 64, 3, 3 }, o = { padding = 1 }, big = true },
  { name = 'stem 7x7', xs = { 4, 3, 64, 64 }, ws = { 64, 3, 7, 7 }, o = { stride = 2, padding = 3 } },
}

for _, cs in ipairs(conv_cases) do
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    if not (cs.big and dt == 'f64') then
      T.test(string.format('conv2d %s %s', cs.name, dt), function()
        local x, w, b = rnd(cs.xs, dt), rnd(cs.ws, dt), rnd({ cs.ws[1] }, dt)
        -- the reference: f64 on the CPU from the same rounded values
        local yr = C.conv2d(f64cpu(x), f64cpu(w), f64cpu(b), cs.o)
        local dy = rnd(yr.shape, dt)
        local dxr, dwr, dbr = C.conv2d_backward(f64cpu(x), f64cpu(w), f64cpu(dy), cs.o)
        local tol = TOL[dt]
        for _, layout in ipairs({ 'nchw', 'nhwc' }) do
          local xg, dyg = x:cuda(), dy:cuda()
          if layout == 'nhwc' then xg, dyg = C.to_channels_last(xg), C.to_channels_last(dyg) end
          local y = C.conv2d(xg, w:cuda(), b:cuda(), cs.o)
          T.eq(y.device, 'cuda:0')
          T.eq(y.dtype, dt)
          if layout == 'nhwc' then T.ok(C.is_channels_last(y) or cs.ws[1] == 1, 'output keeps channels-last') end
          close(y, yr, tol[1], layout .. ' forward')
          local dx, dw, db = C.conv2d_backward(xg, w:cuda(), dyg, cs.o)
          close(dx, dxr, tol[1], layout .. ' dx')
          close(dw, dwr, tol[2], layout .. ' dw')
          close(db, dbr, tol[2], layout .. ' dbias')
          -- channels-last weight too
          if layout == 'nhwc' then
            local y2 = C.conv2d(xg, C.to_channels_last(w:cuda()), b:cuda(), cs.o)
            close(y2, yr, tol[1], 'nhwc weight forward')
          end
        end
      end)
    end
  end
end

T.test('conv2d through autograd on cuda', function()
  local x = v100.randn({ 4, 8, 10, 10 }, { device = 'cuda' }):requires_grad_(true)
  local w = v100.randn({ 16, 8, 3, 3 }, { device = 'cuda' }):requires_grad_(true)
  local b = v100.randn({ 16 }, { device = 'cuda' }):requires_grad_(true)
  local y = F.conv2d(x, w, b, { padding = 1 })
  local dy = v100.randn(y.shape, { device = 'cuda' })
  y:backward(dy)
  local dx, dw, db = C.conv2d_backward(x:detach(), w:detach(), dy, { padding = 1 })
  close(x.grad, dx, 1e-6, 'x.grad')
  close(w.grad, dw, 1e-6, 'w.grad')
  close(b.grad, db, 1e-6, 'b.grad')
end)

-- v100.set_deterministic(true): only algorithms cuDNN marks deterministic, so the weight gradient of
-- a ResNet-like layer (100,352 products per element, where cuDNN's fastest f32 and half algorithms
-- add partial sums with atomics) is the same bits on every run, with heuristics and with timing.
T.test('conv2d deterministic mode: every gradient bitwise the same run to run', function()
  T.eq(v100.get_deterministic(), false, 'off by default')
  for _, dt in ipairs({ 'f32', 'f16', 'bf16' }) do
    for _, layout in ipairs({ 'nchw', 'nhwc' }) do
      local x, w, dy = rnd({ 32, 64, 56, 56 }, dt):cuda(), rnd({ 64, 64, 3, 3 }, dt):cuda(), rnd({ 32, 64, 56, 56 }, dt):cuda()
      if layout == 'nhwc' then x, w, dy = x:to_channels_last(), w:to_channels_last(), dy:to_channels_last() end
      -- the default mode's result (checked against the CPU by the tests above) as the reference
      local _, dwref = C.conv2d_backward(x, w, dy, { padding = 1 })
      local prev = v100.set_deterministic(true)
      for _, bench in ipairs({ false, true }) do
        local pb = C.set_cudnn_benchmark(bench)
        local dx1, dw1 = C.conv2d_backward(x, w, dy, { padding = 1 })
        local dx2, dw2 = C.conv2d_backward(x, w, dy, { padding = 1 })
        C.set_cudnn_benchmark(pb)
        local what = string.format('%s %s benchmark %s', dt, layout, tostring(bench))
        T.eq(dw1:ne(dw2):sum():item(), 0, what .. ': dw elements that differ between runs')
        T.eq(dx1:ne(dx2):sum():item(), 0, what .. ': dx elements that differ between runs')
        close(dw1, dwref, TOL[dt][2], what .. ': dw against the default mode')
      end
      v100.set_deterministic(prev)
    end
  end
end)

T.test('conv2d benchmark mode (cudnnFind) agrees', function()
  local prev = C.set_cudnn_benchmark(true)
  local x, w = rnd({ 8, 32, 20, 20 }, 'f32'), rnd({ 32, 32, 3, 3 }, 'f32')
  local yr = C.conv2d(f64cpu(x), f64cpu(w), nil, { padding = 1 })
  close(C.conv2d(x:cuda(), w:cuda(), nil, { padding = 1 }), yr, 1e-5, 'forward')
  local dy = rnd(yr.shape, 'f32')
  local dxr, dwr = C.conv2d_backward(f64cpu(x), f64cpu(w), f64cpu(dy), { padding = 1 })
  local dx, dw = C.conv2d_backward(x:cuda(), w:cuda(), dy:cuda(), { padding = 1 })
  close(dx, dxr, 1e-5, 'dx')
  close(dw, dwr, 5e-5, 'dw')
  -- a second call takes the cached plan
  close(C.conv2d(x:cuda(), w:cuda(), nil, { padding = 1 }), yr, 1e-5, 'forward (cached)')
  C.set_cudnn_benchmark(prev)
end)

-- ---------------------------------------------------------------------------------------------
-- pooling: forward (max exact, indices implied by the backward), backward via the raw autograd

local pool_cases = {
  { name = 'max 2x2', f = function(t) return F.max_pool2d(t, 2) end, max = true },
  { name = 'max 3x3 s2 p1', f = function(t) return F.max_pool2d(t, 3, { stride = 2, padding = 1 }) end, max = true },
  { name = 'max dil ceil', f = function(t) return F.max_pool2d(t, { 3, 2 }, { stride = { 2, 1 }, padding = 1, dilation = 2, ceil_mode = true }) end, max = true },
  { name = 'avg 3x3 s2 p1', f = function(t) return F.avg_pool2d(t, 3, { stride = 2, padding = 1 }) end },
  { name = 'avg no pad count ceil', f = function(t) return F.avg_pool2d(t, 3, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false }) end },
  { name = 'adaptive 7x7', f = function(t) return F.adaptive_avg_pool2d(t, { 7, 7 }) end },
  { name = 'adaptive 1x1', f = function(t) return F.adaptive_avg_pool2d(t, 1) end },
  { name = 'adaptive 5x3', f = function(t) return F.adaptive_avg_pool2d(t, { 5, 3 }) end },
}

for _, pc in ipairs(pool_cases) do
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    T.test(string.format('%s %s', pc.name, dt), function()
      local x = rnd({ 4, 24, 17, 15 }, dt)
      -- detach: for f64, to() returns x itself, which must stay a plain leaf for the cuda run
      local xr = f64cpu(x):detach():requires_grad_(true)
      local yr = pc.f(xr)
      local dy = rnd(yr.shape, dt)
      yr:backward(f64cpu(dy))
      local tol = pc.max and 0 or TOL[dt][1]
      for _, layout in ipairs({ 'nchw', 'nhwc' }) do
        local xg = x:cuda()
        if layout == 'nhwc' then xg = C.to_channels_last(xg) end
        xg:requires_grad_(true)
        local y = pc.f(xg)
        -- a 1x1 image is contiguous in both layouts, so only larger outputs have a visible layout
        if layout == 'nhwc' and y.shape[3] * y.shape[4] > 1 then
          T.ok(C.is_channels_last(y), 'output keeps channels-last')
        end
        close(y, yr:detach(), tol, layout .. ' forward')
        y:backward(dy:cuda())
        -- max: the gradient of each output goes to the same (first) maximum on both devices
        close(xg.grad, xr.grad, pc.max and TOL[dt][1] or TOL[dt][1], layout .. ' backward')
      end
    end)
  end
end

-- Max pooling's argmax is a 1-byte window offset (i32 for windows of 255+ cells); channels-last
-- inputs whose channels fill 16-byte vectors take the vectorised kernels. x given in dtype dt; the
-- CPU (f64) result is the reference, forward exact, backward within the dtype's tolerance.
local function pool_vs_cpu(x, f, dt, layouts, msg)
  local xr = f64cpu(x):detach():requires_grad_(true)
  local yr = f(xr)
  local dy = rnd(yr.shape, dt)
  yr:backward(f64cpu(dy))
  for _, layout in ipairs(layouts) do
    local xg = x:cuda()
    if layout == 'nhwc' then xg = C.to_channels_last(xg) end
    xg:requires_grad_(true)
    local y = f(xg)
    close(y, yr:detach(), 0, msg .. ' ' .. layout .. ' forward')
    y:backward(dy:cuda())
    close(xg.grad, xr.grad, TOL[dt][1], msg .. ' ' .. layout .. ' backward')
  end
end

local mp3 = function(t) return F.max_pool2d(t, 3, { stride = 2, padding = 1 }) end

T.test('max_pool2d: the ResNet stem (16x64x112x112, 3x3 s2 p1) in every dtype, channels-last and NCHW', function()
  for _, dt in ipairs({ 'f16', 'bf16', 'f32', 'f64' }) do
    pool_vs_cpu(rnd({ 16, 64, 112, 112 }, dt), mp3, dt, { 'nhwc', 'nchw' }, 'stem ' .. dt)
  end
end)

T.test('max_pool2d: ties (the first maximum of a window wins on both devices)', function()
  for _, dt in ipairs({ 'f16', 'f32', 'bf16', 'f64' }) do
    local x = (v100.rand({ 4, 16, 13, 11 }) * 3):floor():to(dt) -- values 0, 1, 2: most windows tie
    pool_vs_cpu(x, mp3, dt, { 'nhwc', 'nchw' }, 'ties ' .. dt)
    pool_vs_cpu(x, function(t) return F.max_pool2d(t, 2, { stride = 1 }) end, dt, { 'nhwc', 'nchw' }, 'ties 2x2 s1 ' .. dt)
  end
end)

T.test('max_pool2d: odd channel counts (scalar kernels), a 16x16 window (i32 offsets), dilation', function()
  for _, dt in ipairs({ 'f16', 'f32' }) do
    pool_vs_cpu(rnd({ 3, 13, 9, 10 }, dt), mp3, dt, { 'nhwc', 'nchw' }, 'c13 ' .. dt)
    pool_vs_cpu(rnd({ 2, 8, 20, 19 }, dt), function(t) return F.max_pool2d(t, 16, { stride = 2, padding = 3 }) end, dt,
      { 'nhwc', 'nchw' }, '16x16 window ' .. dt)
    pool_vs_cpu(rnd({ 2, 16, 12, 12 }, dt), function(t) return F.max_pool2d(t, 3, { stride = 1, padding = 1, dilation = 3 }) end,
      dt, { 'nhwc', 'nchw' }, 'dilation 3 ' .. dt)
  end
end)

T.test('max_pool2d NaN on cuda, channels-last vectorised', function()
  local x = v100.randn({ 2, 8, 6, 6 })
  local t = x:totable()
  t[1][3][2][2] = 0 / 0
  local xg = C.to_channels_last(v100.tensor(t):half():cuda())
  local y = F.max_pool2d(xg, 2):float():cpu():totable()
  T.ok(y[1][3][1][1] ~= y[1][3][1][1], 'NaN propagates')
  T.ok(y[1][3][2][2] == y[1][3][2][2] and y[1][4][1][1] == y[1][4][1][1], 'other windows and channels are numbers')
end)

T.test('max_pool2d NaN on cuda', function()
  local t = T.rand_table({ 1, 1, 4, 4 })
  t[1][1][3][2] = 0 / 0
  local y = F.max_pool2d(v100.tensor(t):cuda(), 2):cpu():totable()
  T.ok(y[1][1][2][1] ~= y[1][1][2][1], 'NaN propagates')
  T.ok(y[1][1][1][1] == y[1][1][1][1], 'other windows are numbers')
end)

T.run()
