-- tests/lua/test_amp.lua: amp.Scaler on the CPU: GradScaler's state machine (growth interval,
-- backoff, skip, static scale, an explicit new scale), an injected inf skips the step and halves
-- the scale, gradients arrive unscaled, the state round-trips through a safetensors checkpoint,
-- and bad options and misuse raise errors naming the scaler.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'

-- A tiny model, its optimizer and a loss whose gradient is known: loss = sum(w * x).
local function setup(opts)
  local lin = nn.Linear(3, 1)
  local opt = optim.SGD(lin:parameters(), { lr = 0.1 })
  return lin, opt, amp.Scaler(opts)
end

local function loss_of(lin, bad)
  local x = v100.tensor({ { 1, bad or 2, 3 } }, { dtype = 'f32' })
  return lin(x):sum()
end

local function weights(lin) return lin.weight:clone(), lin.bias:clone() end

T.test('scaled backward gives unscaled gradients after unscale_, and step updates as without scaling', function()
  local lin, opt, scaler = setup { init_scale = 1024 }
  local ref = nn.Linear(3, 1)
  v100.no_grad(function()
    ref.weight:copy_(lin.weight)
    ref.bias:copy_(lin.bias)
  end)
  local ropt = optim.SGD(ref:parameters(), { lr = 0.1 })
  scaler:backward(loss_of(lin))
  -- before unscaling the gradient is scaled
  T.near(lin.weight.grad:totable()[1][3], 3 * 1024, 1e-3)
  scaler:unscale_(opt)
  T.tensor_close(lin.weight.grad, v100.tensor({ { 1, 2, 3 } }, { dtype = 'f32' }), 1e-6, 1e-6, 'unscaled gradient')
  scaler:step(opt)
  scaler:update()
  loss_of(ref):backward()
  ropt:step()
  T.tensor_close(lin.weight, ref.weight, 1e-6, 1e-6, 'same update as unscaled training')
  T.tensor_close(lin.bias, ref.bias, 1e-6, 1e-6)
  local c = scaler:counters()
  T.eq(c.scale, 1024.0)
  T.eq(c.growth_tracker, 1)
  T.eq(c.skipped_steps, 0)
  T.eq(c.steps, 1)
end)

T.test('an injected inf skips the step on the device and halves the scale', function()
  local lin, opt, scaler = setup { init_scale = 2 ^ 16 }
  local w0, b0 = weights(lin)
  scaler:backward(loss_of(lin, math.huge))
  scaler:step(opt)
  T.tensor_close(lin.weight, w0, 0, 0, 'weights unchanged by the skipped step')
  T.tensor_close(lin.bias, b0, 0, 0, 'bias unchanged')
  T.eq(scaler:counters().found_inf, 1.0)
  scaler:update()
  local c = scaler:counters()
  T.eq(c.scale, 2 ^ 15)
  T.eq(c.skipped_steps, 1)
  T.eq(c.growth_tracker, 0)
  T.eq(c.found_inf, 0.0, 'found_inf cleared for the next step')
  -- NaN skips too
  opt:zero_grad()
  scaler:backward(loss_of(lin, 0 / 0))
  scaler:step(opt)
  scaler:update()
  T.tensor_close(lin.weight, w0, 0, 0, 'NaN skipped too')
  T.eq(scaler:get_scale(), 2 ^ 14)
  -- the next clean step updates again
  opt:zero_grad()
  scaler:backward(loss_of(lin))
  scaler:step(opt)
  scaler:update()
  T.ok((lin.weight - w0):abs():max():item() > 0, 'a clean step updates')
  T.eq(scaler:counters().skipped_steps, 2)
end)

T.test('the scale grows by growth_factor after growth_interval clean steps in a row; an inf resets the count', function()
  local lin, opt, scaler = setup { init_scale = 8, growth_interval = 3, growth_factor = 4, backoff_factor = 0.25 }
  local function step(bad)
    opt:zero_grad()
    scaler:backward(loss_of(lin, bad))
    scaler:step(opt)
    scaler:update()
    return scaler:counters()
  end
  T.eq(step().scale, 8.0)
  T.eq(step().scale, 8.0)
  local c = step()
  T.eq(c.scale, 32.0, 'grown after 3 clean steps')
  T.eq(c.growth_tracker, 0)
  T.eq(step().growth_tracker, 1)
  c = step(math.huge)
  T.eq(c.scale, 8.0, 'backoff 0.25')
  T.eq(c.growth_tracker, 0, 'the inf reset the tracker')
  T.eq(step().scale, 8.0)
  T.eq(step().scale, 8.0)
  T.eq(step().scale, 32.0)
  T.eq(scaler:counters().steps, 8)
end)

T.test('a static scaler keeps its scale; found inf still skips; update(new) sets the scale', function()
  local lin, opt, scaler = setup { init_scale = 128, static = true, growth_interval = 1 }
  local w0 = lin.weight:clone()
  scaler:backward(loss_of(lin, math.huge))
  scaler:step(opt)
  scaler:update()
  T.tensor_close(lin.weight, w0, 0, 0, 'skipped')
  T.eq(scaler:get_scale(), 128.0)
  opt:zero_grad()
  scaler:backward(loss_of(lin))
  scaler:step(opt)
  scaler:update()
  T.eq(scaler:get_scale(), 128.0, 'no growth when static')
  scaler:update(512)
  T.eq(scaler:get_scale(), 512.0)
  scaler:update(v100.tensor { 4.0 })
  T.eq(scaler:get_scale(), 4.0)
end)

T.test('a disabled scaler passes everything through', function()
  local lin, opt, scaler = setup { enabled = false }
  local l = loss_of(lin)
  T.ok(scaler:scale(l) == l)
  scaler:backward(l)
  T.tensor_close(lin.weight.grad, v100.tensor({ { 1, 2, 3 } }, { dtype = 'f32' }), 0, 0)
  scaler:step(opt)
  scaler:update()
  T.eq(scaler:get_scale(), 1.0)
  T.eq(scaler:is_enabled(), false)
end)

T.test('the state round-trips through a safetensors checkpoint', function()
  local lin, opt, scaler = setup { init_scale = 64, growth_interval = 5, growth_factor = 3, backoff_factor = 0.125 }
  for i = 1, 3 do
    opt:zero_grad()
    scaler:backward(loss_of(lin, i == 2 and math.huge or nil))
    scaler:step(opt)
    scaler:update()
  end
  local flat = {}
  for k, t in pairs(scaler:state_dict()) do flat['scaler.' .. k] = t end
  local path = os.tmpname() .. '.safetensors'
  v100.save_safetensors(path, flat)
  local back = v100.load_safetensors(path)
  os.remove(path)
  local sd = {}
  for k, t in pairs(back) do sd[k:gsub('^scaler%.', '')] = t end
  local other = amp.Scaler()
  other:load_state_dict(sd)
  local a, b = scaler:counters(), other:counters()
  for _, k in ipairs { 'scale', 'growth_tracker', 'skipped_steps', 'steps' } do T.eq(b[k], a[k], k) end
  T.eq(a.scale, 8.0)
  T.eq(a.skipped_steps, 1)
  T.eq(other.growth_factor, 3.0)
  T.eq(other.backoff_factor, 0.125)
  T.eq(other.growth_interval, 5)
  -- the restored scaler goes on the same way
  local lin2, opt2 = nn.Linear(3, 1), nil
  opt2 = optim.SGD(lin2:parameters(), { lr = 0.1 })
  for _ = 1, 4 do
    opt2:zero_grad()
    other:backward(loss_of(lin2))
    other:step(opt2)
    other:update()
  end
  T.eq(other:get_scale(), 24.0, 'grown once the 5th clean step in a row came')
end)

T.test('bad options and misuse raise errors naming the scaler', function()
  T.raises(function() amp.Scaler { init_scale = 0 } end, 'amp.Scaler: init_scale must be a finite number > 0')
  T.raises(function() amp.Scaler { init_scale = 0 / 0 } end, 'init_scale')
  T.raises(function() amp.Scaler { growth_factor = 1 } end, 'growth_factor must be > 1')
  T.raises(function() amp.Scaler { backoff_factor = 1 } end, 'backoff_factor must be in (0, 1)')
  T.raises(function() amp.Scaler { growth_interval = 2.5 } end, 'growth_interval must be an integer >= 1')
  T.raises(function() amp.Scaler { grow = 2 } end, "unknown option 'grow'")
  T.raises(function() amp.Scaler(3) end, 'options must be a table')
  local lin, opt, scaler = setup()
  T.raises(function() scaler:unscale_(opt) end, 'no loss was scaled yet')
  T.raises(function() scaler:scale(3) end, 'scale: expected a tensor')
  scaler:backward(loss_of(lin))
  scaler:unscale_(opt)
  T.raises(function() scaler:unscale_(opt) end, 'already called on this optimizer since the last update()')
  T.raises(function() scaler:step(opt, function() end) end, 'closures are not supported')
  scaler:step(opt)
  T.raises(function() scaler:update(-1) end, 'new_scale must be a finite number > 0')
  T.raises(function() scaler:update(v100.zeros { 2 }) end, 'new_scale must have one element')
  T.raises(function() scaler:load_state_dict { scale = v100.zeros { 2 } } end, 'must be a 1-element tensor')
end)

T.run()
