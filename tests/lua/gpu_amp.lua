-- tests/lua/gpu_amp.lua: amp.Scaler on CUDA against the same run on the CPU: the scale, the
-- growth tracker, skipped steps and the weights after a sequence of clean and inf/NaN steps, in
-- f32 and with f16 / bf16 parameters (their gradients unscaled by the fused kernel in their dtype).
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'

T.cuda_or_skip()

-- Runs `bad` (a set of step numbers whose input holds inf or NaN) on one device; returns the
-- counters after each step and the final weight (f32, on the CPU).
local function run(device, dtype, init, x_rows, bad)
  local lin = nn.Linear(4, 2)
  v100.no_grad(function()
    lin.weight:copy_(init.w)
    lin.bias:copy_(init.b)
  end)
  lin = lin:to(device, dtype)
  local opt = optim.AdamW(lin:parameters(), { lr = 1e-2, weight_decay = 0.01 })
  local scaler = amp.Scaler { init_scale = 2 ^ 10, growth_interval = 2 }
  local seen = {}
  for step = 1, #x_rows do
    local x = x_rows[step]:to(device, dtype)
    if bad[step] then
      v100.no_grad(function() x:narrow(1, 1, 1):fill_(bad[step]) end)
    end
    opt:zero_grad()
    local loss = lin(x):float():pow(2):mean()
    scaler:backward(loss)
    scaler:step(opt)
    scaler:update()
    seen[step] = scaler:counters()
  end
  return seen, lin.weight:to('cpu', 'f32'), lin.bias:to('cpu', 'f32')
end

local function init_and_data(n)
  local init = { w = v100.randn { 2, 4 } * 0.5, b = v100.randn { 2 } * 0.1 }
  local rows = {}
  for i = 1, n do rows[i] = v100.randn { 8, 4 } end
  return init, rows
end

for _, dt in ipairs { 'f32', 'f16', 'bf16' } do
  T.test('Scaler on cuda matches the cpu: clean, inf and NaN steps, ' .. dt .. ' parameters', function()
    local init, rows = init_and_data(7)
    local bad = { [2] = math.huge, [5] = 0 / 0 }
    local cs, cw, cb = run('cpu', 'f32', init, rows, bad)
    local gs, gw, gb = run('cuda', dt, init, rows, bad)
    for step = 1, #rows do
      T.eq(gs[step].scale, cs[step].scale, 'scale after step ' .. step)
      T.eq(gs[step].growth_tracker, cs[step].growth_tracker, 'tracker after step ' .. step)
      T.eq(gs[step].skipped_steps, cs[step].skipped_steps, 'skipped after step ' .. step)
    end
    T.eq(gs[#rows].skipped_steps, 2)
    T.eq(gs[2].scale, 2 ^ 9, 'halved by the inf')
    T.eq(gs[4].scale, 2 ^ 10, 'grown after two clean steps')
    local tol = dt == 'f32' and 1e-5 or dt == 'f16' and 2e-3 or 2e-2
    T.tensor_close(gw, cw, tol, tol, 'weights after the run')
    T.tensor_close(gb, cb, tol, tol, 'bias after the run')
  end)
end

T.test('a skipped step leaves cuda parameters and optimizer state untouched', function()
  local lin = nn.Linear(4, 2):to('cuda')
  local opt = optim.SGD(lin:parameters(), { lr = 0.1, momentum = 0.9 })
  local scaler = amp.Scaler()
  local x = v100.randn({ 3, 4 }, { device = 'cuda' })
  scaler:backward(lin(x):sum())
  scaler:step(opt)
  scaler:update()
  local w = lin.weight:clone()
  local buf = opt.state[lin.weight].momentum_buffer:clone()
  opt:zero_grad()
  v100.no_grad(function() x:narrow(1, 2, 1):fill_(math.huge) end)
  scaler:backward(lin(x):sum())
  scaler:step(opt)
  T.tensor_eq(lin.weight, w, 'weight unchanged')
  T.tensor_eq(opt.state[lin.weight].momentum_buffer, buf, 'momentum unchanged')
  scaler:update()
  T.eq(scaler:get_scale(), 2 ^ 15)
end)

T.run()
