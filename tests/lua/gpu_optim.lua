-- tests/lua/gpu_optim.lua: v100.optim on cuda against the same steps on the cpu (the reference
-- kernels), with 200+ tensors per group (several multi-tensor launches per stage) including
-- tensors spanning several chunks and an empty one; f32/f64 within 1e-6 relative, f16/bf16
-- parameters (f32 state) within their rounding. Also the AMP found_inf skip and inv_scale,
-- clip_grad_norm, l2norms and unscale_ on the device.
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'
local optim = require 'v100.optim'

v100.manual_seed(2000 + T.seed % 100000)
local _nn = v100._nn

-- rtol/atol per parameter dtype. SGD/AdamW arithmetic is identical on both devices; LAMB/LARS
-- sum their norms in a different order, and one ulp of a half type can flip after that.
local TOL = { f32 = { 1e-6, 1e-7 }, f64 = { 1e-12, 1e-14 }, f16 = { 1e-3, 1e-4 }, bf16 = { 8e-3, 1e-3 } }

-- 213 small tensors of random sizes, a few that span several 65536-element chunks, one of one
-- element and an empty one.
local function sizes()
  local s = {}
  for i = 1, 213 do s[i] = math.random(1, 3000) end
  for _, n in ipairs({ 65536, 65537, 200003, 1, 0 }) do s[#s + 1] = n end
  return s
end

local function make(sz, dt)
  local cpu, gpu = {}, {}
  for i, n in ipairs(sz) do
    local shape = (i % 3 == 0 and n % 2 == 0 and n > 0) and { 2, n // 2 } or { n }
    cpu[i] = v100.randn(shape, { dtype = 'f64' }):to(dt)
    gpu[i] = cpu[i]:to('cuda'):clone()
  end
  return cpu, gpu
end

local function set_grads(cpu, gpu, mult)
  for i, p in ipairs(cpu) do
    local g = (v100.randn(p.shape, { dtype = 'f64' }) * (mult or 1)):to(p.dtype)
    p.grad = g
    gpu[i].grad = g:to('cuda'):clone()
  end
end

-- Largest |g - c| - rtol |c| over the tensors (<= atol passes), computed in f64 on the host side.
local function compare(gpu, cpu, dt, msg, loose)
  local rtol, atol = TOL[dt][1] * (loose or 1), TOL[dt][2] * (loose or 1)
  local worst, wi = -math.huge, 0
  for i = 1, #cpu do
    if cpu[i]:numel() > 0 then
      local c = cpu[i]:double()
      local e = ((gpu[i]:cpu():double() - c):abs() - c:abs() * rtol):max():item()
      if e > worst then worst, wi = e, i end
    end
  end
  T.ok(worst <= atol, string.format('%s: worst excess %g over atol %g (tensor %d)', msg, worst, atol, wi))
end

local CASES = {
  { 'SGD', function(ps) return optim.SGD(ps, { lr = 0.05, momentum = 0.9, dampening = 0.1, weight_decay = 1e-2 }) end },
  { 'SGD nesterov', function(ps) return optim.SGD(ps, { lr = 0.05, momentum = 0.9, nesterov = true }) end },
  { 'SGD plain', function(ps) return optim.SGD(ps, { lr = 0.1 }) end },
  { 'AdamW', function(ps) return optim.AdamW(ps, { lr = 1e-2, weight_decay = 0.05 }) end },
  { 'LAMB', function(ps) return optim.LAMB(ps, { lr = 1e-2, weight_decay = 0.01 }) end },
  { 'LARS', function(ps) return optim.LARS(ps, { lr = 1.0, weight_decay = 1e-4, trust_coefficient = 0.01 }) end },
}

T.test('cuda steps equal cpu steps (220 tensors per group)', function()
  for _, dt in ipairs({ 'f32', 'f64', 'f16', 'bf16' }) do
    local sz = sizes()
    for _, case in ipairs(CASES) do
      local cpu, gpu = make(sz, dt)
      local oc, og = case[2](cpu), case[2](gpu)
      for step = 1, 3 do
        set_grads(cpu, gpu)
        oc:step()
        og:step()
        compare(gpu, cpu, dt, string.format('%s %s step %d', case[1], dt, step))
      end
      local st = og.state[gpu[1]]
      local buf = st.momentum_buffer or st.exp_avg
      if buf then T.eq(buf.dtype, dt == 'f64' and 'f64' or 'f32', case[1] .. ' ' .. dt .. ' state dtype') end
    end
  end
end)

-- stochastic_rounding (AMP O3): the CPU and CUDA draw the same Philox numbers and compute the same
-- f32 values for SGD and AdamW, so the half parameters are the same bits; also when the step count
-- comes from the device (capturable), and over several launches per group (the tensor index
-- continues across launches). LAMB/LARS norms differ in the last ulps, so within rounding.
T.test('stochastic rounding: cuda = cpu bit for bit (SGD, AdamW), capturable too', function()
  for _, dt in ipairs({ 'f16', 'bf16' }) do
    local sz = sizes()
    for _, case in ipairs(CASES) do
      for _, cap in ipairs({ false, true }) do
        local cpu, gpu = make(sz, dt)
        local oc = case[2](cpu)
        local og = case[2](gpu)
        for _, o in ipairs({ oc, og }) do o.stochastic_rounding, o.rounding_seed = true, 1234 end
        og.capturable = cap
        for step = 1, 3 do
          set_grads(cpu, gpu, 1e-2) -- small updates: many elements land between two half values
          oc:step()
          og:step()
          local what = string.format('%s %s capturable %s step %d', case[1], dt, tostring(cap), step)
          if case[1]:match('^SGD') or case[1] == 'AdamW' then
            for i = 1, #cpu do T.tensor_eq(gpu[i], cpu[i], what .. ' tensor ' .. i) end
          else
            compare(gpu, cpu, dt, what)
          end
        end
      end
    end
  end
end)

T.test('no_decay groups on cuda (LAMB without adaptation, LARS exclusion)', function()
  local sz = sizes()
  for _, mk in ipairs({
    function(ps) return optim.LAMB(ps, { lr = 1e-2, no_decay = optim.no_decay_bias_and_norm }) end,
    function(ps) return optim.LARS(ps, { lr = 0.5, weight_decay = 1e-4, no_decay = optim.no_decay_bias_and_norm }) end,
  }) do
    local cpu, gpu = make(sz, 'f32')
    local oc, og = mk(cpu), mk(gpu)
    T.eq(#og.param_groups, 2)
    for step = 1, 3 do
      set_grads(cpu, gpu)
      oc:step()
      og:step()
      compare(gpu, cpu, 'f32', tostring(og) .. ' step ' .. step)
    end
  end
end)

T.test('AMP: found_inf skips on the device, inv_scale unscales', function()
  local sz = sizes()
  for _, case in ipairs(CASES) do
    local cpu, gpu = make(sz, 'f32')
    local oc, og = case[2](cpu), case[2](gpu)
    local before = {}
    for i, p in ipairs(gpu) do before[i] = p:cpu() end
    set_grads(cpu, gpu, 1024)
    og:step { found_inf = v100.ones({ 1 }, { device = 'cuda' }), inv_scale = v100.full({ 1 }, 1 / 1024, { device = 'cuda' }) }
    compare(gpu, before, 'f32', case[1] .. ' skipped')
    -- Unskipped: the scaled grads times 1/1024 (exact) give the cpu step on unscaled grads.
    local og2 = case[2](gpu)
    og2:step { found_inf = v100.zeros({ 1 }, { device = 'cuda' }), inv_scale = v100.full({ 1 }, 1 / 1024, { device = 'cuda' }) }
    for _, p in ipairs(cpu) do p.grad = p.grad / 1024 end
    oc:step()
    compare(gpu, cpu, 'f32', case[1] .. ' inv_scale')
  end
end)

T.test('l2norms and unscale_ on cuda', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    local cpu, gpu = make(sizes(), dt)
    local nc, ng = _nn.l2norms(cpu), _nn.l2norms(gpu)
    T.eq(ng.dtype, 'f32')
    T.eq(ng.device:sub(1, 4), 'cuda')
    T.allclose(ng:cpu(), nc:totable(), 1e-5, 1e-6, dt .. ' l2norms')
    local inv = v100.full({ 1 }, 0.25, { device = 'cuda' })
    local found = v100.zeros({ 1 }, { device = 'cuda' })
    _nn.unscale_(gpu, inv, found)
    _nn.unscale_(cpu, v100.full({ 1 }, 0.25), v100.zeros({ 1 }))
    T.eq(found:item(), 0.0)
    compare(gpu, cpu, dt, dt .. ' unscale_')
    gpu[150]:narrow(1, 1, 1):fill_(math.huge)
    _nn.unscale_(gpu, inv, found)
    T.eq(found:item(), 1.0, dt .. ' found_inf')
  end
end)

T.test('clip_grad_norm on cuda equals cpu (two dtypes)', function()
  local sz = sizes()
  local c32, g32 = make(sz, 'f32')
  local c16, g16 = make({ 100, 7, 65537 }, 'f16')
  set_grads(c32, g32)
  set_grads(c16, g16)
  local call, gall = {}, {}
  for _, l in ipairs({ { c32, g32 }, { c16, g16 } }) do
    for i = 1, #l[1] do call[#call + 1] = l[1][i]; gall[#gall + 1] = l[2][i] end
  end
  local tc = optim.clip_grad_norm(call, 1.0)
  local tg = optim.clip_grad_norm(gall, 1.0)
  T.eq(tg.device:sub(1, 4), 'cuda')
  T.near(tg:item(), tc:item(), 1e-5 * tc:item())
  local gc, gg = {}, {}
  for i, p in ipairs(call) do gc[i], gg[i] = p.grad, gall[i].grad end
  compare({ table.unpack(gg, 1, #g32) }, { table.unpack(gc, 1, #c32) }, 'f32', 'clipped f32 grads', 10)
  compare({ table.unpack(gg, #g32 + 1) }, { table.unpack(gc, #c32 + 1) }, 'f16', 'clipped f16 grads', 2)
end)

T.run()
