-- scripts/v100/amp/init.lua: `v100.amp`, loss scaling for mixed-precision training (docs/AMP.md).
--
--   local scaler = amp.Scaler()            -- {init_scale = 2^16, growth_factor = 2, backoff_factor
--                                          --  = 0.5, growth_interval = 2000, static = false, enabled = true}
--   scaler:backward(loss)                  -- (loss * scale):backward()
--   scaler:step(opt)                       -- unscale the gradients (if not done), then opt:step that
--                                          -- the device skips when a gradient held inf/NaN
--   scaler:update()                        -- grow / back off the scale, on the device
--
-- GradScaler's semantics (scale x growth_factor after growth_interval clean steps in a row;
-- x backoff_factor and a skipped step on any inf/NaN), with one difference: nothing here reads a
-- value back to the host. The unscale and the inf/NaN check are one fused multi-tensor kernel per
-- dtype group (`_nn.unscale_`), the optimizer's kernels read the found-inf flag and skip the
-- update on the device, and the scale and its growth tracker are updated by tensor ops on the
-- device. So a scaled step needs no synchronisation (PyTorch's GradScaler reads the flag on the
-- host every step) and can be captured in a CUDA graph. Reading the state (`scaler:get_scale()`,
-- `scaler:counters()`) synchronises, and says so.
local v100 = require 'v100.base'
local _nn = require('v100.core')._nn
local graph = require 'v100.graph'
local errors = require 'v100.errors'
local autocast = require 'v100.amp.autocast'
local policy = require 'v100.amp.policy'

local amp = {}

local Scaler = {}
Scaler.__index = Scaler
Scaler.__name = 'amp.Scaler'

local fail = errors.failer('amp.Scaler: ', 2)

local function finite(x) return type(x) == 'number' and x == x and x > -math.huge and x < math.huge end

local DEFAULTS = { init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5, growth_interval = 2000 }
local SCALER_OPTS = { 'init_scale', 'growth_factor', 'backoff_factor', 'growth_interval', 'static', 'enabled', 'device' }

-- amp.Scaler([opts]): the scale's tensors are made on the device of the first loss it scales
-- (or opts.device).
function amp.Scaler(opts)
  opts = errors.check_opts('amp.Scaler', opts, SCALER_OPTS)
  local self = setmetatable({}, Scaler)
  for k, d in pairs(DEFAULTS) do self[k] = opts[k] == nil and d or opts[k] end
  if not finite(self.init_scale) or self.init_scale <= 0 then fail('init_scale must be a finite number > 0, got %s', tostring(self.init_scale)) end
  if not finite(self.growth_factor) or self.growth_factor <= 1 then fail('growth_factor must be > 1, got %s', tostring(self.growth_factor)) end
  if not finite(self.backoff_factor) or self.backoff_factor <= 0 or self.backoff_factor >= 1 then
    fail('backoff_factor must be in (0, 1), got %s', tostring(self.backoff_factor))
  end
  if math.type(self.growth_interval) ~= 'integer' or self.growth_interval < 1 then
    fail('growth_interval must be an integer >= 1, got %s', tostring(self.growth_interval))
  end
  self.static = opts.static and true or false
  self.enabled = opts.enabled ~= false
  self.device = opts.device
  self.steps = 0          -- step() calls before the device state exists (then _steps counts)
  self._unscaled = {}     -- optimizer -> true once unscale_ ran since the last update()
  return self
end

function amp.is_scaler(x) return getmetatable(x) == Scaler end

-- The device tensors, made on first use: scale, the growth tracker (clean steps in a row),
-- found_inf (0 or 1 for the current step) and the number of skipped steps; all 1-element f32.
function Scaler:_state(device)
  if self._scale == nil then
    -- Made under capture, the initial fill would be recorded and replayed every step.
    if graph.capturing() then fail('its state would be made inside a CUDA graph capture: run warm-up steps first') end
    local dev = self.device or device or v100.device()
    local o = { dtype = 'f32', device = dev }
    self.device = dev
    self._scale = v100.full({ 1 }, self.init_scale, o)
    self._growth = v100.zeros({ 1 }, o)
    self._found_inf = v100.zeros({ 1 }, o)
    self._skipped = v100.zeros({ 1 }, o)
    -- step() calls, counted on the device so that replays of a captured step count too
    self._steps = v100.full({ 1 }, self.steps, { dtype = 'i64', device = dev })
  end
  return self._scale
end

-- t * scale (a new tensor; recorded by autograd). Disabled: t itself.
function Scaler:scale(t)
  if not v100.is_tensor(t) then fail('scale: expected a tensor, got %s', type(t)) end
  if not self.enabled then return t end
  local s = self:_state(t.device)
  if t.device ~= s.device then
    fail('scale: the loss is on %s but the scaler lives on %s', t.device, s.device)
  end
  return t * s
end

-- (loss * scale):backward(), the scaled loss freed afterwards.
function Scaler:backward(loss, opts)
  local scaled <close> = self:scale(loss)
  scaled:backward(nil, opts)
end

-- The parameters of opt that have gradients, grouped by dtype (one fused kernel a group).
local function grad_groups(opt)
  local groups, order = {}, {}
  for _, g in ipairs(opt.param_groups) do
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        local key = grad.dtype .. '|' .. grad.device
        local l = groups[key]
        if l == nil then
          l = {}
          groups[key] = l
          order[#order + 1] = key
        end
        l[#l + 1] = grad
      end
    end
  end
  return groups, order
end

-- Divides opt's gradients by the scale in place and records in found_inf whether any held
-- inf/NaN. At most once per optimizer between two update() calls (as GradScaler).
function Scaler:unscale_(opt) return self:_unscale(opt, false) end

-- check_only: found_inf only, the gradients left scaled (multiplied by exactly 1).
function Scaler:_unscale(opt, check_only)
  if not self.enabled then return end
  if type(opt) ~= 'table' or opt.param_groups == nil then fail('unscale_: expected an optimizer, got %s', type(opt)) end
  if self._unscaled[opt] then
    fail('unscale_: already called on this optimizer since the last update()')
  end
  if self._scale == nil then fail('unscale_: no loss was scaled yet (call scaler:backward(loss) first)') end
  local inv <close> = check_only and v100.ones({ 1 }, { device = self._scale.device }) or self._scale:reciprocal()
  local groups, order = grad_groups(opt)
  for _, key in ipairs(order) do
    local l = groups[key]
    if l[1].device ~= self._scale.device then
      fail('unscale_: gradients are on %s but the scaler lives on %s', l[1].device, self._scale.device)
    end
    for i, gr in ipairs(l) do
      if not gr:is_contiguous() then
        fail('unscale_: the gradient %d of the %s group is not contiguous', i, key)
      end
    end
    _nn.unscale_(l, inv, self._found_inf)
  end
  self._unscaled[opt] = true
end

-- Unscales (unless unscale_ already ran) and steps opt; the optimizer's kernels skip the update
-- on the device when found_inf is set. Disabled: opt:step().
function Scaler:step(opt, ...)
  if not self.enabled then return opt:step(...) end
  if select('#', ...) > 0 then fail('step: closures are not supported with loss scaling') end
  self._steps:add_(1)
  if not self._unscaled[opt] and opt.master_weights then
    -- O2: unscaling the half gradients in half would flush their small values to 0, which is
    -- what the scale is there to prevent. They are only checked here, and the optimizer's
    -- kernels multiply them by 1/scale after their cast to f32 (apex's O2 order).
    self:_unscale(opt, true)
    local inv <close> = self._scale:reciprocal()
    return opt:step { found_inf = self._found_inf, inv_scale = inv }
  end
  if not self._unscaled[opt] then self:unscale_(opt) end
  return opt:step { found_inf = self._found_inf }
end

-- The scale for the next step, on the device: x backoff_factor (and the growth tracker reset) when
-- this step found inf/NaN, x growth_factor after growth_interval clean steps in a row. A static
-- scaler keeps its scale (found inf/NaN still skip steps). update(new_scale) sets the scale (a
-- number or a 1-element tensor) and resets the tracker. Clears found_inf for the next step.
function Scaler:update(new_scale)
  if not self.enabled then return end
  if self._scale == nil then fail('update: no loss was scaled yet') end
  local f = self._found_inf
  self._skipped:add_(f)
  if new_scale ~= nil then
    if v100.is_tensor(new_scale) then
      if #new_scale ~= 1 then fail('update: new_scale must have one element, got %d', #new_scale) end
      self._scale:copy_(new_scale:reshape { 1 })
    elseif finite(new_scale) and new_scale > 0 then
      self._scale:fill_(new_scale)
    else
      fail('update: new_scale must be a finite number > 0 or a 1-element tensor, got %s', tostring(new_scale))
    end
    self._growth:zero_()
  elseif not self.static then
    local clean <close> = f:neg():add_(1)                          -- 1 when this step was clean
    self._growth:add_(1):mul_(clean)                              -- clean steps in a row
    local factor <close> = f * (self.backoff_factor - 1) + 1       -- backoff_factor on inf/NaN, else 1
    self._scale:mul_(factor)
    local grow <close> = self._growth:ge(self.growth_interval)
    local grown <close> = self._scale * self.growth_factor
    local next_scale <close> = v100.where(grow, grown, self._scale)
    self._scale:copy_(next_scale)
    self._growth:masked_fill_(grow, 0)
  end
  f:zero_()
  self._unscaled = {}
end

-- The current scale as a number (synchronises with the device).
function Scaler:get_scale()
  if not self.enabled then return 1.0 end
  if self._scale == nil then return self.init_scale end
  return self._scale:item()
end

-- {scale, growth_tracker, skipped_steps, steps, found_inf} as numbers (synchronises).
function Scaler:counters()
  if self._scale == nil then
    return { scale = self.enabled and self.init_scale or 1.0, growth_tracker = 0, skipped_steps = 0,
             steps = self.steps, found_inf = 0 }
  end
  return { scale = self._scale:item(), growth_tracker = math.tointeger(self._growth:item()),
           skipped_steps = math.tointeger(self._skipped:item()), steps = math.tointeger(self._steps:item()),
           found_inf = self._found_inf:item() }
end

function Scaler:is_enabled() return self.enabled end

-- Every entry a tensor (1-element f32, on the CPU) so that the state goes into a safetensors
-- checkpoint as it is (flatten with a prefix, e.g. 'scaler.'): the scale, the growth tracker,
-- the skipped and step counts, and the options.
function Scaler:state_dict()
  self:_state()
  local function t(x) return v100.tensor({ x }, { dtype = 'f32' }) end
  return {
    scale = self._scale:to('cpu'), growth_tracker = self._growth:to('cpu'), skipped_steps = self._skipped:to('cpu'),
    steps = t(math.tointeger(self._steps:item())), growth_factor = t(self.growth_factor), backoff_factor = t(self.backoff_factor),
    growth_interval = t(self.growth_interval), static = t(self.static and 1 or 0), enabled = t(self.enabled and 1 or 0),
  }
end

function Scaler:load_state_dict(sd)
  if type(sd) ~= 'table' then fail('load_state_dict: expected a table from state_dict(), got %s', type(sd)) end
  local function num(k)
    local x = sd[k]
    if not v100.is_tensor(x) or #x ~= 1 then fail('load_state_dict: %s must be a 1-element tensor', k) end
    return x:item()
  end
  local gf, bf, gi = num('growth_factor'), num('backoff_factor'), num('growth_interval')
  local scale, tracker, skipped, steps = num('scale'), num('growth_tracker'), num('skipped_steps'), num('steps')
  local static, enabled = num('static') ~= 0, num('enabled') ~= 0
  if gf <= 1 or bf <= 0 or bf >= 1 or gi < 1 or gi ~= math.floor(gi) or not finite(scale) or scale <= 0 then
    fail('load_state_dict: the state holds invalid options (growth_factor %g, backoff_factor %g, growth_interval %g, scale %g)',
      gf, bf, gi, scale)
  end
  self.growth_factor, self.backoff_factor, self.growth_interval = gf, bf, math.tointeger(gi)
  self.static, self.enabled, self.steps = static, enabled, math.tointeger(steps)
  self:_state()
  self._scale:fill_(scale)
  self._growth:fill_(tracker)
  self._skipped:fill_(skipped)
  self._steps:fill_(self.steps)
  self._found_inf:zero_()
  self._unscaled = {}
end

-- Autocast (O1) and the optimisation levels, as amp.*: amp.autocast, amp.set_op, ...
-- (scripts/v100/amp/autocast.lua), amp.policy (O0..O3), amp.half_model, amp.is_policy
-- (scripts/v100/amp/policy.lua).
for k, f in pairs(autocast) do amp[k] = f end
for k, f in pairs(policy) do amp[k] = f end

return amp
