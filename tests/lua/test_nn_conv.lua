-- tests/lua/test_nn_conv.lua: conv2d and 2-D pooling from Lua (v100.nn.functional and the raw
-- core._nn entry points): values against direct loops in plain Lua on fresh random inputs,
-- channels-last layouts, option parsing, error messages, autograd wiring, and
-- v100.autograd.gradcheck in f64 of conv2d (input, weight, bias) and of the three poolings.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F
local C = require('v100.core')._nn

v100.manual_seed(T.seed % 1000003)

local function flat(t) return (T.values(t)) end

-- Direct convolution of flat NCHW x [n,c,h,w] with KCRS w; returns flat y and its shape.
local function ref_conv(x, xs, w, ws, b, o)
  local n, c, h, wd = xs[1], xs[2], xs[3], xs[4]
  local k, cg, r, s = ws[1], ws[2], ws[3], ws[4]
  local g = o.groups or 1
  local st, pd, dl = o.stride or { 1, 1 }, o.padding or { 0, 0 }, o.dilation or { 1, 1 }
  local p = (h + 2 * pd[1] - dl[1] * (r - 1) - 1) // st[1] + 1
  local q = (wd + 2 * pd[2] - dl[2] * (s - 1) - 1) // st[2] + 1
  local kg = k // g
  local y = {}
  for in_ = 0, n - 1 do
    for kk = 0, k - 1 do
      local grp = kk // kg
      for pp = 0, p - 1 do
        for qq = 0, q - 1 do
          local acc = b and b[kk + 1] or 0
          for cl = 0, cg - 1 do
            local cc = grp * cg + cl
            for rr = 0, r - 1 do
              local ih = pp * st[1] - pd[1] + rr * dl[1]
              if ih >= 0 and ih < h then
                for ss = 0, s - 1 do
                  local iw = qq * st[2] - pd[2] + ss * dl[2]
                  if iw >= 0 and iw < wd then
                    acc = acc + x[((in_ * c + cc) * h + ih) * wd + iw + 1] * w[((kk * cg + cl) * r + rr) * s + ss + 1]
                  end
                end
              end
            end
          end
          y[#y + 1] = acc
        end
      end
    end
  end
  return y, { n, k, p, q }
end

-- Direct pooling of flat NCHW x. kind: 'max' | 'avg' | 'adaptive'.
local function ref_pool(kind, x, xs, o)
  local n, c, h, w = xs[1], xs[2], xs[3], xs[4]
  local p, q
  local kh, kw, sh, sw, ph, pw, dh, dw
  if kind == 'adaptive' then
    p, q = o.size[1], o.size[2]
  else
    kh, kw = o.k[1], o.k[2]
    sh, sw = (o.stride or o.k)[1], (o.stride or o.k)[2]
    ph, pw = (o.padding or { 0, 0 })[1], (o.padding or { 0, 0 })[2]
    dh, dw = (o.dilation or { 1, 1 })[1], (o.dilation or { 1, 1 })[2]
    local function osz(i, k, s, pad, d)
      local num = i + 2 * pad - d * (k - 1) - 1 + (o.ceil_mode and s - 1 or 0)
      local r = num // s + 1
      if o.ceil_mode and (r - 1) * s >= i + pad then r = r - 1 end
      return r
    end
    p, q = osz(h, kh, sh, ph, dh), osz(w, kw, sw, pw, dw)
  end
  local y = {}
  for pl = 0, n * c - 1 do
    for pp = 0, p - 1 do
      for qq = 0, q - 1 do
        local v
        if kind == 'max' then
          v = -math.huge
          for i = 0, kh - 1 do
            for j = 0, kw - 1 do
              local ih, iw = pp * sh - ph + i * dh, qq * sw - pw + j * dw
              if ih >= 0 and ih < h and iw >= 0 and iw < w then
                local e = x[(pl * h + ih) * w + iw + 1]
                if e > v then v = e end
              end
            end
          end
        else
          local h0, h1, w0, w1
          if kind == 'adaptive' then
            h0, h1 = (pp * h) // p, -((-(pp + 1) * h) // p)
            w0, w1 = (qq * w) // q, -((-(qq + 1) * w) // q)
          else
            h0, w0 = pp * sh - ph, qq * sw - pw
            h1, w1 = h0 + kh, w0 + kw
          end
          local sum, cnt, cells = 0, 0, 0
          for ih = h0, h1 - 1 do
            for iw = w0, w1 - 1 do
              if ih < h + (ph or 0) and iw < w + (pw or 0) then cells = cells + 1 end
              if ih >= 0 and ih < h and iw >= 0 and iw < w then
                sum, cnt = sum + x[(pl * h + ih) * w + iw + 1], cnt + 1
              end
            end
          end
          local cip = o.count_include_pad
          if cip == nil then cip = true end
          v = sum / ((kind == 'avg' and cip) and cells or cnt)
        end
        y[#y + 1] = v
      end
    end
  end
  return y, { n, c, p, q }
end

local function close_to(t, ref, shape, tol, msg)
  T.eq(t.shape, shape, msg)
  T.allclose(flat(t), ref, tol, tol, msg)
end

-- ---------------------------------------------------------------------------------------------
-- conv2d values

local conv_cases = {
  { xs = { 2, 3, 7, 6 }, ws = { 4, 3, 3, 3 }, o = { padding = 1 } },
  { xs = { 2, 4, 9, 8 }, ws = { 6, 2, 3, 2 }, o = { stride = 2, padding = { 1, 0 }, groups = 2 } },
  { xs = { 1, 3, 10, 9 }, ws = { 5, 3, 3, 3 }, o = { padding = 2, dilation = 2 } },
  { xs = { 2, 4, 6, 7 }, ws = { 8, 1, 3, 3 }, o = { padding = 1, groups = 4 } },
  { xs = { 2, 5, 5, 5 }, ws = { 3, 5, 1, 1 }, o = { stride = 2 } },
}

for i, cs in ipairs(conv_cases) do
  for _, dt in ipairs({ 'f64', 'f32' }) do
    T.test(string.format('conv2d values case %d %s', i, dt), function()
      local x = T.make(cs.xs, dt)
      local w = T.make(cs.ws, dt)
      local b = T.make({ cs.ws[1] }, dt)
      local o = {}
      for k2, v in pairs(cs.o) do o[k2] = type(v) == 'number' and k2 ~= 'groups' and { v, v } or v end
      local y = F.conv2d(x, w, b, cs.o)
      local ref, shape = ref_conv(flat(x), cs.xs, flat(w), cs.ws, flat(b), o)
      close_to(y, ref, shape, dt == 'f64' and 1e-12 or 1e-5)
      -- channels-last input: same values, channels-last output
      local xl = C.to_channels_last(x)
      T.ok(C.is_channels_last(xl) or cs.xs[2] == 1, 'to_channels_last')
      local yl = F.conv2d(xl, w, b, cs.o)
      T.ok(C.is_channels_last(yl), 'output keeps channels-last')
      close_to(yl, ref, shape, dt == 'f64' and 1e-12 or 1e-5, 'nhwc')
      -- without bias
      local y0 = F.conv2d(x, w, nil, cs.o)
      local ref0 = ref_conv(flat(x), cs.xs, flat(w), cs.ws, nil, o)
      close_to(y0, ref0, shape, dt == 'f64' and 1e-12 or 1e-5, 'no bias')
    end)
  end
end

T.test('conv2d f16/bf16 values', function()
  for _, dt in ipairs({ 'f16', 'bf16' }) do
    local x, w = T.make({ 2, 3, 6, 6 }, dt), T.make({ 4, 3, 3, 3 }, dt)
    local y = C.conv2d(x, w, nil, { stride = 1, padding = 1 })
    local ref, shape = ref_conv(flat(x), { 2, 3, 6, 6 }, flat(w), { 4, 3, 3, 3 }, nil, { padding = { 1, 1 } })
    T.eq(y.dtype, dt)
    close_to(y, ref, shape, dt == 'f16' and 3e-3 or 2e-2, dt)
  end
end)

T.test('conv2d_backward raw: dbias and layouts', function()
  local x, w = T.make({ 2, 3, 5, 5 }, 'f64'), T.make({ 4, 3, 3, 3 }, 'f64')
  local dy = T.make({ 2, 4, 5, 5 }, 'f64')
  local o = { stride = 1, padding = 1, dilation = 1, groups = 1 }
  local dx, dw, db = C.conv2d_backward(x, w, dy, o)
  T.eq(dx.shape, { 2, 3, 5, 5 })
  T.eq(dw.shape, { 4, 3, 3, 3 })
  T.allclose(db, dy:sum({ 1, 3, 4 }), 1e-12)
  local dxl, dwl = C.conv2d_backward(C.to_channels_last(x), w, C.to_channels_last(dy), o)
  T.ok(C.is_channels_last(dxl), 'dx keeps channels-last')
  T.ok(dwl:is_contiguous(), 'dw keeps the weight layout')
  T.allclose(dxl, dx, 1e-12)
  T.allclose(dwl, dw, 1e-12)
  -- a channels-last weight makes the convolution run channels-last even for an NCHW input (as
  -- PyTorch does): a 1-channel image is both layouts, and a channels-last model must stay so
  local wl = C.to_channels_last(w)
  local x1 = T.make({ 2, 1, 5, 5 }, 'f64')
  local w1 = T.make({ 4, 1, 3, 3 }, 'f64')
  local y1 = C.conv2d(x1, C.to_channels_last(w1), nil, o)
  T.ok(C.is_channels_last(y1), 'NCHW (1-channel) input with a channels-last weight: channels-last output')
  T.allclose(y1, C.conv2d(x1, w1, nil, o), 1e-12)
  local yl = C.conv2d(x, wl, nil, o)
  T.ok(C.is_channels_last(yl), 'NCHW input, channels-last weight: channels-last output')
  T.allclose(yl, C.conv2d(x, w, nil, o), 1e-12)
  local dxw, dww = C.conv2d_backward(x, wl, dy, o)
  T.ok(C.is_channels_last(dxw), 'dx in the layout the convolution ran in')
  T.ok(C.is_channels_last(dww), 'dw keeps the (channels-last) weight layout')
  T.allclose(dxw, dx, 1e-12)
  T.allclose(dww, dw, 1e-12)
  -- dx is the adjoint of the forward: <conv(x), dy> == <x, dx>
  local y = C.conv2d(x, w, nil, o)
  T.near((y * dy):sum():item(), (x * dx):sum():item(), 1e-9)
  T.near((y * dy):sum():item(), (w * dw):sum():item(), 1e-9)
end)

T.test('channels-last: to_channels_last for every shape, kept by elementwise ops, casts and pooling', function()
  for _, shape in ipairs({ { 2, 3, 4, 5 }, { 2, 1, 4, 5 }, { 2, 3, 1, 1 }, { 1, 1, 3, 3 } }) do
    local x = T.make(shape, 'f64')
    local xl = x:to_channels_last()
    local tag = T.shape_str(shape)
    T.ok(xl:is_channels_last(), tag .. ': to_channels_last gives channels-last strides')
    T.ok(not x:is_channels_last(), tag .. ': a fresh tensor is NCHW')
    T.eq(xl:stride()[2], 1, tag .. ': stride of C is 1')
    T.allclose(xl, x, 0)
    local mask = x:gt(0)
    local bias = T.make({ 1, shape[2], 1, 1 }, 'f64')
    for name, r in pairs({ relu = xl:relu(), add = xl + xl, scalar = xl * 2, broadcast = xl + bias,
      cast = xl:float(), where = v100.where(mask, xl, 0.5 * xl), masked_fill = xl:masked_fill(mask, 0) }) do
      T.ok(r:is_channels_last(), tag .. ': ' .. name .. ' keeps channels-last')
    end
    T.allclose(xl + bias, x + bias, 1e-15)
    T.allclose(v100.where(mask, xl, 0.5 * xl), v100.where(mask, x, 0.5 * x), 1e-15)
  end
  -- a transposed matrix stays transposed through elementwise ops (PyTorch keeps strides too)
  local a = T.make({ 4, 3 }, 'f64'):t()
  T.eq((a + 1):stride(), a:stride())
  T.eq((a + 1):totable(), (a:contiguous() + 1):totable())
  -- a broadcast operand does not decide the layout: the full-shape one does
  local row = T.make({ 1, 4 }, 'f64')
  T.ok((row + a:contiguous()):is_contiguous(), 'contiguous full-shape operand: contiguous result')
  -- pooling and batch norm keep it as well
  local xl = T.make({ 2, 3, 6, 6 }, 'f64'):to_channels_last()
  T.ok(F.max_pool2d(xl, 2):is_channels_last(), 'max_pool2d keeps channels-last')
  T.ok(F.batch_norm(xl, nil, nil, nil, nil, true, 0.1, 1e-5):is_channels_last(), 'batch_norm keeps channels-last')
end)

-- ---------------------------------------------------------------------------------------------
-- pooling values

T.test('max_pool2d values', function()
  for _, o in ipairs({
    { k = { 2, 2 } },
    { k = { 3, 3 }, stride = { 2, 2 }, padding = { 1, 1 } },
    { k = { 3, 2 }, stride = { 2, 1 }, padding = { 1, 1 }, dilation = { 2, 2 }, ceil_mode = true },
    { k = { 2, 2 }, stride = { 2, 2 }, ceil_mode = true },
  }) do
    local xs = { 2, 3, 7, 9 }
    local x = T.make(xs, 'f32')
    local po = {}
    for key, v in pairs(o) do if key ~= 'k' then po[key] = v end end
    local y = F.max_pool2d(x, o.k, po)
    local ref, shape = ref_pool('max', flat(x), xs, o)
    close_to(y, ref, shape, 0)
    local yl = F.max_pool2d(C.to_channels_last(x), o.k, po)
    T.ok(C.is_channels_last(yl))
    close_to(yl, ref, shape, 0, 'nhwc')
  end
end)

T.test('max_pool2d propagates NaN', function()
  local tbl = T.rand_table({ 1, 1, 4, 4 })
  tbl[1][1][2][2] = 0 / 0
  local x = v100.tensor(tbl)
  local y = F.max_pool2d(x, 2)
  local v = y:totable()
  T.ok(v[1][1][1][1] ~= v[1][1][1][1], 'NaN in the window gives NaN')
  T.ok(v[1][1][2][2] == v[1][1][2][2], 'other windows are numbers')
end)

T.test('avg_pool2d values', function()
  for _, o in ipairs({
    { k = { 2, 2 } },
    { k = { 3, 3 }, stride = { 2, 2 }, padding = { 1, 1 } },
    { k = { 3, 3 }, stride = { 2, 2 }, padding = { 1, 1 }, count_include_pad = false },
    { k = { 3, 2 }, stride = { 2, 2 }, padding = { 1, 1 }, ceil_mode = true },
    { k = { 3, 2 }, stride = { 2, 2 }, padding = { 1, 1 }, ceil_mode = true, count_include_pad = false },
  }) do
    local xs = { 2, 3, 7, 8 }
    local x = T.make(xs, 'f64')
    local po = {}
    for key, v in pairs(o) do if key ~= 'k' then po[key] = v end end
    local y = F.avg_pool2d(x, o.k, po)
    local ref, shape = ref_pool('avg', flat(x), xs, o)
    close_to(y, ref, shape, 1e-12)
    close_to(F.avg_pool2d(C.to_channels_last(x), o.k, po), ref, shape, 1e-12, 'nhwc')
  end
end)

T.test('adaptive_avg_pool2d values', function()
  for _, sz in ipairs({ { 1, 1 }, { 3, 4 }, { 7, 8 }, { 5, 11 } }) do
    local xs = { 2, 3, 7, 10 }
    local x = T.make(xs, 'f64')
    local y = F.adaptive_avg_pool2d(x, sz)
    local ref, shape = ref_pool('adaptive', flat(x), xs, { size = sz })
    close_to(y, ref, shape, 1e-12)
    close_to(C.adaptive_avg_pool2d(C.to_channels_last(x), sz), ref, shape, 1e-12, 'nhwc')
  end
  local y = C.adaptive_avg_pool2d(T.make({ 1, 2, 5, 5 }, 'f32'), 2)
  T.eq(y.shape, { 1, 2, 2, 2 })
end)

-- ---------------------------------------------------------------------------------------------
-- errors

T.test('conv2d errors', function()
  local x = T.make({ 8, 3, 16, 16 }, 'f16')
  local w = T.make({ 64, 64, 3, 3 }, 'f16')
  T.raises(function() C.conv2d(x, w, nil, {}) end,
    { 'conv2d: input has 3 channels but weight expects 64', 'input 8x3x16x16 f16', 'weight 64x64x3x3 f16' })
  local x2, w2 = T.make({ 2, 4, 8, 8 }), T.make({ 6, 2, 3, 3 })
  T.raises(function() C.conv2d(x2, w2, nil, { stride = 0, groups = 2 }) end, 'conv2d: stride must be >= 1')
  T.raises(function() C.conv2d(x2, w2, nil, { padding = -1, groups = 2 }) end, 'conv2d: padding must be >= 0')
  T.raises(function() C.conv2d(x2, w2, nil, { dilation = 5, groups = 2 }) end, 'conv2d: output size')
  T.raises(function() C.conv2d(x2, w2, nil, { groups = 4 }) end, 'input has 4 channels but weight expects 8')
  T.raises(function() C.conv2d(x2, T.make({ 6, 1, 3, 3 }), nil, { groups = 4 }) end, 'not divisible by groups 4')
  T.raises(function() C.conv2d(x2, w2, T.make({ 5 }), { groups = 2 }) end, 'conv2d: bias must have shape [6]')
  T.raises(function() C.conv2d(x2, T.make({ 6, 2, 3, 3 }, 'f64'), nil, { groups = 2 }) end,
    'conv2d: input and weight must be float tensors of one dtype')
  T.raises(function() C.conv2d(T.make({ 4, 8, 8 }), w2, nil, {}) end, 'conv2d: input must be 4-D')
  T.raises(function() C.conv2d(x2, w2, nil, { stride = { 1, 2, 3 } }) end, 'conv2d: stride must be an integer or a pair')
end)

T.test('pooling errors', function()
  local x = T.make({ 2, 3, 8, 8 })
  T.raises(function() C.max_pool2d(x, 3, { padding = 2 }) end, 'max_pool2d: padding must be between 0 and half')
  T.raises(function() C.avg_pool2d(x, 9, {}) end, 'avg_pool2d: output size')
  T.raises(function() C.max_pool2d(x, 0, {}) end, 'max_pool2d: kernel size must be >= 1')
  T.raises(function() C.adaptive_avg_pool2d(x, { 0, 2 }) end, 'adaptive_avg_pool2d: output size must be >= 1')
  T.raises(function() C.max_pool2d(T.make({ 3, 8, 8 }), 2, {}) end, 'max_pool2d: input must be 4-D')
  T.raises(function() C.avg_pool2d(v100.ones({ 1, 1, 4, 4 }, { dtype = 'i64' }), 2, {}) end,
    'avg_pool2d: input must be a float tensor')
  T.raises(function() C.to_channels_last(T.make({ 3, 4 })) end, 'to_channels_last: expected a 4-D')
end)

T.test('pairs are parsed by the binding only: _nn.pair, and layers keep what it returned', function()
  T.eq(C.pair('Conv2d', 'stride', 2), { 2, 2 })
  T.eq(C.pair('Conv2d', 'stride', { 1, 3 }), { 1, 3 })
  T.eq(C.pair('Conv2d', 'stride', nil, 1), { 1, 1 }, 'nil: the default')
  T.eq(C.pair('Conv2d', 'stride', 2.0), { 2, 2 }, 'an integral float')
  T.raises(function() C.pair('Conv2d', 'kernel_size', 2.5) end,
    'Conv2d: kernel_size must be an integer or a pair {h, w} of integers, got 2.5')
  T.raises(function() C.pair('Conv2d', 'kernel_size', { 3, 3, 3 }) end, 'got a table of 3')
  T.raises(function() nn.Conv2d(1, 2, { 3, 3, 3 }) end, 'Conv2d: kernel_size must be an integer or a pair')
  T.raises(function() nn.MaxPool2d({ 2, 'x' }) end, 'MaxPool2d: kernel_size must be an integer or a pair')
  local conv = nn.Conv2d(2, 4, { 3, 1 }, { stride = 2, padding = { 1, 0 } })
  T.eq(conv.kernel_size, { 3, 1 })
  T.eq(conv.stride, { 2, 2 })
  T.eq(conv.padding, { 1, 0 })
  T.eq(conv.weight.shape, { 4, 2, 3, 1 })
  -- the functional forms hand their options to the binding as given
  local x = T.make({ 1, 2, 5, 5 })
  T.eq(F.conv2d(x, conv.weight, nil, { stride = 2, padding = { 1, 0 } }).shape, { 1, 4, 3, 3 })
  T.eq(F.max_pool2d(x, { 2, 1 }).shape, { 1, 2, 2, 5 }, 'stride defaults to the kernel size')
end)

T.test('cudnn benchmark flag: set_cudnn_benchmark returns the previous setting', function()
  local prev = C.set_cudnn_benchmark(true)
  T.eq(prev, false, 'default off')
  T.eq(C.set_cudnn_benchmark(true), true)
  T.eq(v100.set_cudnn_benchmark(false), true, 'v100.set_cudnn_benchmark is the same flag')
  T.eq(C.set_cudnn_benchmark(false), false)
end)

-- ---------------------------------------------------------------------------------------------
-- autograd

T.test('conv2d records and backpropagates', function()
  local x = T.make({ 2, 3, 6, 5 }, 'f64'):requires_grad_(true)
  local w = T.make({ 4, 3, 3, 3 }, 'f64'):requires_grad_(true)
  local b = T.make({ 4 }, 'f64'):requires_grad_(true)
  local o = { stride = 2, padding = 1 }
  local y = F.conv2d(x, w, b, o)
  T.eq(y.grad_fn, 'ConvolutionBackward')
  local dy = T.make(y.shape, 'f64')
  y:backward(dy)
  local dx, dw, db = C.conv2d_backward(x:detach(), w:detach(), dy, { stride = 2, padding = 1 })
  T.allclose(x.grad, dx, 1e-12)
  T.allclose(w.grad, dw, 1e-12)
  T.allclose(b.grad, db, 1e-12)
end)

T.test('pooling records and backpropagates', function()
  local x = T.make({ 2, 2, 6, 6 }, 'f64'):requires_grad_(true)
  local y = F.max_pool2d(x, 2)
  T.eq(y.grad_fn, 'MaxPool2DBackward')
  y:sum():backward()
  -- every 2x2 window sends 1 to its maximum: the gradient sums to the output count
  T.near(x.grad:sum():item(), 2 * 2 * 3 * 3, 1e-12)
  T.eq(F.avg_pool2d(x, 2).grad_fn, 'AvgPool2DBackward')
  T.eq(F.adaptive_avg_pool2d(x, { 2, 2 }).grad_fn, 'AdaptiveAvgPool2DBackward')
end)

local function leaf(shape) return T.make(shape, 'f64'):requires_grad_(true) end

T.test('gradcheck conv2d', function()
  T.ok(v100.autograd.gradcheck(function(x, w, b) return F.conv2d(x, w, b, { padding = 1 }) end,
    { leaf({ 2, 3, 5, 4 }), leaf({ 2, 3, 3, 3 }), leaf({ 2 }) }))
  T.ok(v100.autograd.gradcheck(function(x, w, b)
    return F.conv2d(x, w, b, { stride = 2, padding = { 1, 2 }, dilation = { 2, 1 }, groups = 2 })
  end, { leaf({ 1, 4, 7, 6 }), leaf({ 4, 2, 2, 3 }), leaf({ 4 }) }))
  T.ok(v100.autograd.gradcheck(function(x, w) return F.conv2d(C.to_channels_last(x), w, nil, {}) end,
    { leaf({ 2, 3, 4, 4 }), leaf({ 3, 3, 1, 1 }) }))
end)

T.test('gradcheck pooling', function()
  -- max pooling: distinct values keep the finite differences away from ties
  local x = leaf({ 1, 2, 6, 5 })
  T.ok(v100.autograd.gradcheck(function(t) return F.max_pool2d(t, 3, { stride = 2, padding = 1 }) end, { x }))
  T.ok(v100.autograd.gradcheck(function(t)
    return F.avg_pool2d(t, { 3, 2 }, { stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
  end, { leaf({ 2, 2, 5, 6 }) }))
  T.ok(v100.autograd.gradcheck(function(t) return F.avg_pool2d(t, 2) end, { leaf({ 1, 2, 4, 6 }) }))
  T.ok(v100.autograd.gradcheck(function(t) return F.adaptive_avg_pool2d(t, { 3, 2 }) end, { leaf({ 2, 2, 7, 5 }) }))
end)

T.run()
