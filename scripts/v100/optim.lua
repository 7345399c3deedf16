-- scripts/v100/optim.lua: `local optim = require 'v100.optim'`: SGD, AdamW, LAMB and LARS over
-- fused multi-tensor kernels (v100.core._nn.optim_step), learning-rate schedules, gradient
-- clipping and accumulation. docs/OPTIM.md describes the API; the update rules are PyTorch's
-- torch.optim (LAMB: apex FusedLAMB, LARS: apex LARC over SGD), kernels/cpu/cpu_optim.c spells
-- them out.
--
-- A step groups the parameters that have a .grad by (param group, device, dtype, step count) and
-- makes one fused call per group; on CUDA that is one multi-tensor launch per stage and dtype
-- group, with no host synchronisation. State tensors are created lazily as zeros, per parameter
-- (f32 for f16/bf16 parameters, the parameter's dtype otherwise).
--
-- master_weights = true (AMP O2, docs/AMP.md): every f16/bf16 parameter gets an f32 master copy
-- (state.master, made at its first step). The fused kernels step the master with the gradient
-- cast to f32, and the half parameter is then refreshed from it by one cast copy, so that small
-- updates accumulate in f32 instead of being rounded away in half. A step skipped on found_inf
-- leaves the masters unchanged, and the refresh then rewrites the same half values.
--
-- stochastic_rounding = true (AMP O3, docs/AMP.md): f16/bf16 parameters without masters are
-- stored by stochastic rounding (runtime/core/sround.h), so an update smaller than half a half
-- ulp still moves the weight in expectation instead of rounding away. The random numbers are
-- Philox at rounding_seed (an integer; drawn from v100's generator when not given) and the step
-- count, the same on CPU and CUDA and in a replayed graph; state_dict() records the seed.
--
-- capturable = true (CUDA graphs, docs/AMP.md): the lr and step count of each group live on the
-- device, the count advancing there (and not on a skipped AMP step), so a step replayed by
-- v100.graph uses the current lr and the right bias corrections. Required inside a capture.
local v100 = require 'v100.base'
local errors = require 'v100.errors'
local _nn = v100._nn
local graph = require 'v100.graph'

local optim = {}

local is_tensor = v100.is_tensor

-- ---------------------------------------------------------------------------------------------
-- Parameter lists and groups

-- Biases and normalisation weights: every parameter of at most one dimension.
function optim.no_decay_bias_and_norm(name, t)
  return t.ndim <= 1
end

local function is_named(x)
  return type(x) == 'table' and type(x[1]) == 'string' and is_tensor(x[2])
end

-- params: a tensor, a list of tensors, a named_parameters() list, or a list of groups
-- {params = <one of those>, <hyper-parameter> = value, ...}. Returns the groups, each with
-- params (tensors), names (same length, nil where unnamed) and every hyper-parameter.
local function make_groups(what, params, defaults, no_decay)
  if is_tensor(params) then params = { params } end
  if type(params) ~= 'table' then
    error(what .. ': params must be a list of tensors, a named_parameters() list or a list of groups', 3)
  end
  local raw = params
  if not (type(params[1]) == 'table' and not is_named(params[1]) and params[1].params ~= nil) then
    raw = { { params = params } }
  end
  local groups, seen = {}, {}
  for gi, rg in ipairs(raw) do
    if type(rg) ~= 'table' or rg.params == nil then
      error(string.format('%s: group %d has no params field', what, gi), 3)
    end
    local list = is_tensor(rg.params) and { rg.params } or rg.params
    local base = {}
    for k, v in pairs(defaults) do base[k] = v end
    for k, v in pairs(rg) do
      if k ~= 'params' then base[k] = v end
    end
    local split = { { params = {}, names = {} } }
    if no_decay then split[2] = { params = {}, names = {}, no_decay = true } end
    for i, x in ipairs(list) do
      local name, t
      if is_named(x) then
        name, t = x[1], x[2]
      elseif is_tensor(x) then
        t = x
      else
        error(string.format('%s: group %d entry %d is not a tensor or a {name, tensor} pair', what, gi, i), 3)
      end
      if seen[t] then
        error(string.format('%s: a parameter appears twice (group %d entry %d%s)', what, gi, i,
          name and (' ' .. name) or ''), 3)
      end
      seen[t] = true
      local dst = (no_decay and no_decay(name, t)) and split[2] or split[1]
      dst.params[#dst.params + 1] = t
      dst.names[#dst.params] = name
    end
    for _, s in ipairs(split) do
      if #s.params > 0 or not no_decay then
        local g = {}
        for k, v in pairs(base) do g[k] = v end
        g.params, g.names = s.params, s.names
        if s.no_decay then
          g.weight_decay = 0
          g.lars_exclude = true
        end
        g.base_lr = g.lr
        groups[#groups + 1] = g
      end
    end
  end
  return groups
end

-- The rules of a parameter group's hyperparameters, one function for the constructor, state_dict
-- (what a checkpoint saves), load_state_dict and checkpoint.load (what a checkpoint brings back):
-- numbers finite and in range, so that a checkpoint holding momentum = 1e308 or lr = -10 is refused
-- when it is read rather than training to NaN (issue 27). level: the error level for error().
local function check_group(what, g, level)
  level = level or 4
  local function need(cond, msg)
    if not cond then error(what .. ': ' .. msg, level) end
  end
  local function finite(k, lo, hi, hi_open)
    local v = g[k]
    if v == nil then return end
    need(type(v) == 'number' and v == v and v ~= math.huge and v ~= -math.huge,
      k .. ' must be a finite number, got ' .. tostring(v))
    need(v >= lo and (hi == nil or v < hi or (not hi_open and v == hi)),
      string.format('%s must be in [%s, %s%s, got %s', k, lo, hi or 'inf', hi_open and ')' or ']', tostring(v)))
  end
  need(type(g.lr) == 'number', 'lr is required (a number)')
  need(g.lr >= 0, 'lr must be >= 0, got ' .. g.lr)
  finite('lr', 0)
  need((g.weight_decay or 0) >= 0, 'weight_decay must be >= 0')
  finite('weight_decay', 0)
  if g.momentum ~= nil then need(type(g.momentum) == 'number' and g.momentum >= 0, 'momentum must be >= 0') end
  finite('momentum', 0, 1, true)
  finite('dampening', 0, 1)
  finite('trust_coefficient', 0)
  if g.nesterov ~= nil then need(type(g.nesterov) == 'boolean', 'nesterov must be a boolean') end
  if g.nesterov then
    need((g.momentum or 0) > 0 and (g.dampening or 0) == 0, 'nesterov needs momentum > 0 and dampening = 0')
  end
  if g.betas ~= nil then
    need(type(g.betas) == 'table' and #g.betas == 2, 'betas must be {beta1, beta2}')
    for i = 1, 2 do
      need(type(g.betas[i]) == 'number' and g.betas[i] >= 0 and g.betas[i] < 1, 'betas must be in [0, 1)')
    end
  end
  if g.eps ~= nil then need(type(g.eps) == 'number' and g.eps >= 0, 'eps must be >= 0') end
  finite('eps', 0)
end

-- ---------------------------------------------------------------------------------------------
-- The optimizer

local Optimizer = {}
Optimizer.__index = Optimizer

local function state_dtype(p)
  local dt = p.dtype
  if dt == 'f16' or dt == 'bf16' then return 'f32' end
  return dt
end

-- The fused kind and hyper-parameters of a group. A LAMB group without weight decay (and without
-- always_adapt) takes no trust ratio, as apex and timm do: that is exactly AdamW without decay.
-- A LARS group with lars_exclude (biases, norms) is plain momentum SGD without decay.
local function group_call(kind, g)
  if kind == 'sgd' or kind == 'lars' then
    local k = kind
    local wd = g.weight_decay or 0
    if kind == 'lars' and g.lars_exclude then k, wd = 'sgd', 0 end
    return k, {
      lr = g.lr, momentum = g.momentum or 0, dampening = g.dampening or 0, nesterov = g.nesterov or false,
      weight_decay = wd, trust_coef = g.trust_coefficient, eps = g.eps or 0,
    }
  end
  local k = kind
  if kind == 'lamb' and (g.weight_decay or 0) == 0 and not g.always_adapt then k = 'adamw' end
  return k, {
    lr = g.lr, beta1 = g.betas[1], beta2 = g.betas[2], eps = g.eps, weight_decay = g.weight_decay or 0,
  }
end

local function is_half(t) return t.dtype == 'f16' or t.dtype == 'bf16' end

-- The f32 master of a half parameter (master_weights), made from the parameter on first use.
local function master_of(self, p, st)
  if not self.master_weights or not is_half(p) then return nil end
  if st.master == nil then
    st.master = v100.no_grad(function() return p:to('f32'):contiguous() end)
  end
  return st.master
end

local function uses_momentum(kind, g)
  return (kind == 'sgd' or kind == 'lars') and (g.momentum or 0) ~= 0
end

-- Capturable steps (capturable = true, PyTorch's name): the lr and the step count of each (group,
-- device, dtype) live in a 2-element f64 tensor {lr, step} on the device that the fused kernels
-- read when they run, and the count advances on the device (not on a step AMP skipped). A
-- CUDA graph replaying the step then uses the current lr (written before each replay when the
-- group's lr changed, e.g. by a schedule) and bias corrections of the right step.
local function dyn_of(self, gi, g, dk, q, st, capturing)
  self._dyn = self._dyn or {}
  local per = self._dyn[gi]
  if per == nil then
    per = {}
    self._dyn[gi] = per
  end
  local d = per[dk]
  if d == nil then
    if capturing then
      error(self.name .. ':step: the capturable state of a parameter group would be made inside a CUDA graph '
        .. 'capture: run warm-up steps first', 3)
    end
    d = { t = v100.tensor({ g.lr, st.step - 1 }, { dtype = 'f64' }):to(q.device), lr = g.lr }
    per[dk] = d
  end
  local function sync()
    if d.lr ~= g.lr then
      d.t:narrow(1, 1, 1):fill_(g.lr)
      d.lr = g.lr
    end
  end
  if capturing then graph.on_replay(sync) else sync() end
  return d.t
end

-- opt:step([closure | {found_inf=, inv_scale=}]): one fused update of every parameter that has a
-- gradient. found_inf / inv_scale (1-element f32 tensors on the parameters' device) come from
-- AMP: grads are multiplied by inv_scale and the whole step is skipped on the device when
-- found_inf is non-zero. Returns the closure's result, if any.
function Optimizer:step(arg)
  local loss, amp
  if type(arg) == 'function' then
    loss = arg()
  elseif type(arg) == 'table' then
    amp = arg
  end
  local capturing = graph.capturing()
  if capturing and not self.capturable then
    error(self.name .. ':step: inside a CUDA graph capture the optimizer needs capturable = true (its lr and '
      .. 'step count must live on the device to change between replays)', 2)
  end
  local function no_new_state(what)
    if capturing then
      error(string.format('%s:step: %s would be made inside a CUDA graph capture: run warm-up steps first',
        self.name, what), 3)
    end
  end
  local kind = self.kind
  local refresh = {} -- half parameter -> its master, refreshed after the fused calls
  local advanced = {}
  for gi, g in ipairs(self.param_groups) do
    local k, hp = group_call(kind, g)
    local mom = uses_momentum(kind, g)
    local adam = k == 'adamw' or k == 'lamb'
    local buckets, order = {}, {}
    for _, p in ipairs(g.params) do
      local grad = p.grad
      if grad ~= nil then
        local st = self.state[p]
        if st == nil then
          no_new_state('the state of a parameter')
          st = { step = 0 }
          self.state[p] = st
        end
        st.step = st.step + 1
        -- q: the tensor the kernel updates (the f32 master of a half parameter, else p)
        if self.master_weights and is_half(p) and st.master == nil then no_new_state('an f32 master weight') end
        local master = master_of(self, p, st)
        local q = master or p
        if master then refresh[#refresh + 1] = { p, master } end
        local first = false
        local s1, s2
        if adam then
          if st.exp_avg == nil then
            no_new_state('the moments')
            st.exp_avg = v100.zeros_like(q, { dtype = state_dtype(q) })
            st.exp_avg_sq = v100.zeros_like(q, { dtype = state_dtype(q) })
          end
          s1, s2 = st.exp_avg, st.exp_avg_sq
        elseif mom then
          if st.momentum_buffer == nil then
            no_new_state('the momentum buffer')
            st.momentum_buffer = v100.zeros_like(q, { dtype = state_dtype(q) })
            first = true
          end
          s1 = st.momentum_buffer
        end
        -- the kernels take gradients of the updated tensor's dtype
        if grad.dtype ~= q.dtype then grad = grad:to(q.dtype) end
        if not grad:is_contiguous() then grad = grad:contiguous() end
        local dk = q.device .. '|' .. q.dtype
        local dyn = self.capturable and dyn_of(self, gi, g, dk, q, st, capturing) or nil
        local key = dk .. '|' .. (dyn and 'dyn' or st.step) .. '|' .. tostring(first)
        local b = buckets[key]
        if b == nil then
          b = { p = {}, g = {}, s1 = {}, s2 = {}, step = st.step, first = first, dyn = dyn }
          buckets[key] = b
          order[#order + 1] = key
        end
        local n = #b.p + 1
        b.p[n], b.g[n], b.s1[n], b.s2[n] = q, grad, s1, s2
      end
    end
    for oi, key in ipairs(order) do
      local b = buckets[key]
      hp.step, hp.first_step, hp.dyn = b.step, b.first, b.dyn
      if self.stochastic_rounding then
        -- a stream of its own per (group, bucket): the kernels number tensors within one call
        hp.stochastic_round, hp.sround_seed = true, self.rounding_seed ~ (gi << 40) ~ (oi << 32)
      end
      if b.dyn and not advanced[b.dyn] then
        _nn.optim_advance(b.dyn, amp and amp.found_inf)
        advanced[b.dyn] = true
      end
      _nn.optim_step(k, b.p, b.g, (adam or mom) and b.s1 or nil, adam and b.s2 or nil, hp,
        amp and amp.found_inf, amp and amp.inv_scale)
    end
  end
  if #refresh > 0 then
    -- the half parameters from their masters (a skipped step rewrites the same values)
    v100.no_grad(function()
      for _, e in ipairs(refresh) do e[1]:copy_(e[2]) end
    end)
  end
  return loss
end

-- Copies every half parameter into its f32 master (master_weights): after the model's weights
-- were changed outside the optimizer, e.g. by model:load_state_dict without the optimizer's state.
function Optimizer:refresh_masters()
  v100.no_grad(function()
    for _, g in ipairs(self.param_groups) do
      for _, p in ipairs(g.params) do
        local st = self.state[p]
        if st ~= nil and st.master ~= nil then st.master:copy_(p) end
      end
    end
  end)
end

-- Drops the gradients (set_to_none, the default) or zeroes them in place.
function Optimizer:zero_grad(set_to_none)
  if set_to_none == nil then set_to_none = true end
  for _, g in ipairs(self.param_groups) do
    for _, p in ipairs(g.params) do
      if set_to_none then
        p.grad = nil
      else
        local gr = p.grad
        if gr ~= nil then gr:zero_() end
      end
    end
  end
end

local STATE_KEYS = { 'momentum_buffer', 'exp_avg', 'exp_avg_sq', 'master' }

-- {state = {[index] = {step=, momentum_buffer= | exp_avg=, exp_avg_sq=, master=}}, param_groups =
-- {{lr=, ..., params = {index, ...}}}, master_weights = bool}; indices number the parameters 1..
-- in group order. The buffers are the optimizer's own tensors (load_state_dict copies them);
-- master is the f32 master of a half parameter (master_weights).
-- The device step count of a capturable parameter (synchronises), or nil.
function Optimizer:_device_step(gi, g, p, st)
  local per = self._dyn and self._dyn[gi]
  if per == nil then return nil end
  local q = st.master or p
  local d = per[q.device .. '|' .. q.dtype]
  if d == nil then return nil end
  return math.tointeger(d.t:cpu():totable()[2])
end

function Optimizer:state_dict()
  local sd = { state = {}, param_groups = {}, master_weights = self.master_weights,
    stochastic_rounding = self.stochastic_rounding, rounding_seed = self.stochastic_rounding and self.rounding_seed or nil }
  local idx = 0
  for gi, g in ipairs(self.param_groups) do
    local pg = { params = {} }
    for k, v in pairs(g) do
      if k ~= 'params' and k ~= 'names' then
        if type(v) == 'table' then
          local c = {}
          for i, x in ipairs(v) do c[i] = x end
          v = c
        end
        pg[k] = v
      end
    end
    for _, p in ipairs(g.params) do
      idx = idx + 1
      pg.params[#pg.params + 1] = idx
      local st = self.state[p]
      if st ~= nil then
        local e = { step = self:_device_step(gi, g, p, st) or st.step }
        for _, k in ipairs(STATE_KEYS) do e[k] = st[k] end
        sd.state[idx] = e
      end
    end
    check_group(string.format('%s:state_dict: group %d', self.name, gi), pg, 3)
    sd.param_groups[gi] = pg
  end
  return sd
end

function Optimizer:load_state_dict(sd)
  if type(sd) ~= 'table' or type(sd.param_groups) ~= 'table' then
    error('load_state_dict: expected a table from state_dict()', 2)
  end
  if #sd.param_groups ~= #self.param_groups then
    error(string.format('load_state_dict: the state has %d param groups, the optimizer %d', #sd.param_groups,
      #self.param_groups), 2)
  end
  for gi, g in ipairs(self.param_groups) do
    local n = #sd.param_groups[gi].params
    if n ~= #g.params then
      error(string.format('load_state_dict: group %d has %d parameters in the state, %d in the optimizer', gi, n,
        #g.params), 2)
    end
  end
  for gi, g in ipairs(self.param_groups) do
    local merged = {}
    for k, v in pairs(g) do merged[k] = v end
    for k, v in pairs(sd.param_groups[gi]) do if k ~= 'params' and k ~= 'names' then merged[k] = v end end
    check_group(string.format('load_state_dict: group %d', gi), merged, 3)
    for idx, e in pairs(sd.state or {}) do
      if type(e) == 'table' and e.step ~= nil and (math.type(e.step) ~= 'integer' or e.step < 0) then
        error(string.format('load_state_dict: step of parameter %s must be an integer >= 0, got %s', tostring(idx), tostring(e.step)), 2)
      end
    end
  end
  if sd.rounding_seed ~= nil then
    local s = math.tointeger(sd.rounding_seed)
    if s == nil then error('load_state_dict: rounding_seed must be an integer, got ' .. tostring(sd.rounding_seed), 2) end
    self.rounding_seed = s
  end
  local idx = 0
  self.state = {}
  self._dyn = nil -- capturable counters are made again from the loaded steps
  for gi, g in ipairs(self.param_groups) do
    for k, v in pairs(sd.param_groups[gi]) do
      if k ~= 'params' and k ~= 'names' then
        if type(v) == 'table' then
          local c = {}
          for i, x in ipairs(v) do c[i] = x end
          v = c
        end
        g[k] = v
      end
    end
    for pi, p in ipairs(g.params) do
      idx = idx + 1
      local e = sd.state[sd.param_groups[gi].params[pi]]
      if e ~= nil then
        local st = { step = e.step or 0 }
        for _, k in ipairs(STATE_KEYS) do
          local t = e[k]
          -- a master only for a half parameter of an optimizer with master weights (a state
          -- saved with masters loads into a plain optimizer without them)
          if k == 'master' and not (self.master_weights and is_half(p)) then t = nil end
          if t ~= nil then
            if not is_tensor(t) then error('load_state_dict: ' .. k .. ' of parameter ' .. idx .. ' is not a tensor', 2) end
            if t:numel() ~= p:numel() then
              error(string.format('load_state_dict: %s of parameter %d has %d elements, the parameter %d', k, idx,
                t:numel(), p:numel()), 2)
            end
            st[k] = t:to({ device = p.device, dtype = state_dtype(p) }):reshape(p.shape):clone()
          end
        end
        -- the masters are the weights: the half parameter is their rounding (as apex's
        -- FP16_Optimizer, loading the optimizer restores the model's half weights too)
        if st.master ~= nil then v100.no_grad(function() p:copy_(st.master) end) end
        self.state[p] = st
      end
    end
  end
end

local OPT_EXTRA = { 'lr', 'no_decay', 'master_weights', 'capturable', 'stochastic_rounding', 'rounding_seed' }
local known_opts = {}

local function new(kind, name, params, opts, defaults)
  local known = known_opts[kind]
  if not known then
    known = {}
    for k in pairs(defaults) do known[#known + 1] = k end
    for _, k in ipairs(OPT_EXTRA) do if defaults[k] == nil then known[#known + 1] = k end end
    table.sort(known)
    known_opts[kind] = known
  end
  -- level 2: optim.SGD and the others tail-call new, so the caller is the user's line
  opts = errors.check_opts('optim.' .. name, opts, known, 2)
  local d = {}
  for k, v in pairs(defaults) do d[k] = v end
  for k, v in pairs(opts) do
    if k ~= 'no_decay' and k ~= 'master_weights' and k ~= 'capturable' and k ~= 'stochastic_rounding'
      and k ~= 'rounding_seed' then
      d[k] = v
    end
  end
  if opts.stochastic_rounding ~= nil and type(opts.stochastic_rounding) ~= 'boolean' then
    error(name .. ': stochastic_rounding must be a boolean, got ' .. type(opts.stochastic_rounding), 2)
  end
  local seed = opts.rounding_seed
  if seed ~= nil and (math.type(seed) ~= 'integer' or seed < 0 or seed >= 1 << 53) then
    error(name .. ': rounding_seed must be an integer in [0, 2^53), got ' .. tostring(seed), 2)
  end
  if opts.stochastic_rounding and seed == nil then
    -- from v100's generator, so v100.manual_seed makes the run reproducible; under 2^53 so that
    -- a checkpoint's JSON keeps it exact
    seed = math.floor(v100.rand({ 1 }, { dtype = 'f64' }):item() * 2 ^ 52)
  end
  if opts.capturable ~= nil and type(opts.capturable) ~= 'boolean' then
    error(name .. ': capturable must be a boolean, got ' .. type(opts.capturable), 2)
  end
  if opts.master_weights ~= nil and type(opts.master_weights) ~= 'boolean' then
    -- level 2: optim.SGD and the others tail-call new, so the caller is the user's line
    error(name .. ': master_weights must be a boolean, got ' .. type(opts.master_weights), 2)
  end
  local self = setmetatable({ kind = kind, name = name, defaults = d, state = {},
    master_weights = opts.master_weights == true, capturable = opts.capturable == true,
    stochastic_rounding = opts.stochastic_rounding == true, rounding_seed = seed }, Optimizer)
  self.param_groups = make_groups(name, params, d, opts.no_decay)
  for _, g in ipairs(self.param_groups) do check_group(name, g) end
  return self
end

function Optimizer:__tostring()
  local n = 0
  for _, g in ipairs(self.param_groups) do n = n + #g.params end
  return string.format('%s (%d parameters in %d groups)', self.name, n, #self.param_groups)
end

function optim.SGD(params, opts)
  return new('sgd', 'SGD', params, opts, { momentum = 0, dampening = 0, nesterov = false, weight_decay = 0 })
end

function optim.AdamW(params, opts)
  return new('adamw', 'AdamW', params, opts, { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-8, weight_decay = 1e-2 })
end

function optim.LAMB(params, opts)
  return new('lamb', 'LAMB', params, opts,
    { lr = 1e-3, betas = { 0.9, 0.999 }, eps = 1e-6, weight_decay = 0.01, always_adapt = false })
end

function optim.LARS(params, opts)
  return new('lars', 'LARS', params, opts, { momentum = 0.9, dampening = 0, nesterov = false, weight_decay = 0,
    trust_coefficient = 0.001, eps = 0, lars_exclude = false })
end

optim.Optimizer = Optimizer
-- optim.check_group(what, group): raises "<what>: <field> ..." for a hyperparameter out of range
-- (checkpoint.load checks a checkpoint's optimizer metadata with it).
function optim.check_group(what, g) check_group(what, g, 3) end

-- ---------------------------------------------------------------------------------------------
-- Learning-rate schedules. sched:step(opt) advances to the next optimizer step t (1, 2, ...) and
-- sets every group's lr = f(t, group.base_lr); call it before opt:step(). sched:get_lr() is the
-- list of lrs it set last; sched:lr_at(t, base_lr) the closed form.

local Schedule = {}
Schedule.__index = Schedule

function Schedule:step(opt)
  self.t = self.t + 1
  local lrs = {}
  for i, g in ipairs(opt.param_groups) do
    g.lr = self:lr_at(self.t, g.base_lr or g.lr)
    lrs[i] = g.lr
  end
  self.last_lr = lrs
  return lrs[1]
end

function Schedule:get_lr()
  return self.last_lr
end

function Schedule:state_dict()
  return { t = self.t }
end

function Schedule:load_state_dict(sd)
  self.t = sd.t
end

local function schedule(name, f)
  return setmetatable({ name = name, t = 0, last_lr = {}, lr_at = f }, Schedule)
end

local function warm(t, warmup, base)
  if warmup > 0 and t <= warmup then return base * t / warmup end
  return nil
end

local function progress(t, warmup, total)
  if total <= warmup then return 1 end
  return math.min(1, math.max(0, (t - warmup) / (total - warmup)))
end

optim.schedule = {}

-- Linear warmup over `warmup` steps to the base lr, then cosine decay to min_lr at step `total`.
function optim.schedule.warmup_cosine(o)
  errors.check_opts('optim.schedule.warmup_cosine', o, { 'warmup', 'total', 'min_lr' })
  local warmup, total, min_lr = o.warmup or 0, assert(o.total, 'warmup_cosine: total is required'), o.min_lr or 0
  return schedule('warmup_cosine', function(_, t, base)
    return warm(t, warmup, base)
      or min_lr + (base - min_lr) * 0.5 * (1 + math.cos(math.pi * progress(t, warmup, total)))
  end)
end

-- lr = base * gamma ^ floor((t - 1) / step_size) (PyTorch's StepLR).
function optim.schedule.step(o)
  errors.check_opts('optim.schedule.step', o, { 'step_size', 'gamma' })
  local size, gamma = assert(o.step_size, 'step: step_size is required'), o.gamma or 0.1
  return schedule('step', function(_, t, base)
    return base * gamma ^ ((t - 1) // size)
  end)
end

-- Linear warmup, then end_lr + (base - end_lr) * (1 - progress) ^ power (BERT's schedule).
function optim.schedule.polynomial(o)
  errors.check_opts('optim.schedule.polynomial', o, { 'warmup', 'total', 'power', 'end_lr' })
  local warmup, total = o.warmup or 0, assert(o.total, 'polynomial: total is required')
  local power, end_lr = o.power or 1, o.end_lr or 0
  return schedule('polynomial', function(_, t, base)
    return warm(t, warmup, base) or end_lr + (base - end_lr) * (1 - progress(t, warmup, total)) ^ power
  end)
end

-- The base lr (after an optional linear warmup).
function optim.schedule.constant(o)
  errors.check_opts('optim.schedule.constant', o, { 'warmup' })
  local warmup = (o and o.warmup) or 0
  return schedule('constant', function(_, t, base)
    return warm(t, warmup, base) or base
  end)
end

-- The linear scaling rule: base_lr * batch / base_batch.
function optim.scale_lr(base_lr, batch, base_batch)
  return base_lr * batch / (base_batch or 256)
end

-- ---------------------------------------------------------------------------------------------
-- Gradient clipping and accumulation

local function tensors_of(params)
  if is_tensor(params) then return { params } end
  local out = {}
  for _, x in ipairs(params) do
    if is_named(x) then
      out[#out + 1] = x[2]
    elseif is_tensor(x) then
      out[#out + 1] = x
    elseif type(x) == 'table' and x.params then
      for _, t in ipairs(tensors_of(x.params)) do out[#out + 1] = t end
    end
  end
  return out
end

-- Scales every gradient by min(1, max_norm / (total + 1e-6)) where total is the norm of all
-- gradients together; returns total as a 0-dim f32 tensor. Everything stays on the device: the
-- per-tensor norms come from one fused kernel per (device, dtype) and the scaling is a fused
-- multiply by a device scalar, so there is no host synchronisation.
function optim.clip_grad_norm(params, max_norm, norm_type)
  norm_type = norm_type or 2
  local groups, order = {}, {}
  for _, p in ipairs(tensors_of(params)) do
    local g = p.grad
    if g ~= nil then
      if not g:is_contiguous() then error('clip_grad_norm: a gradient is not contiguous', 2) end
      local key = g.device .. '|' .. g.dtype
      if groups[key] == nil then
        groups[key] = { device = g.device }
        order[#order + 1] = key
      end
      local l = groups[key]
      l[#l + 1] = g
    end
  end
  if #order == 0 then return v100.tensor(0.0) end
  local dev0 = groups[order[1]].device
  local parts = {}
  for _, key in ipairs(order) do
    local l = groups[key]
    local part
    if norm_type == 2 then
      part = _nn.l2norms(l):square():sum()
    else
      local each = {}
      for i, g in ipairs(l) do
        each[i] = norm_type == math.huge and g:abs():max():float() or g:norm(norm_type):float()
      end
      local st = v100.stack(each, 1)
      part = norm_type == math.huge and st:max() or (st ^ norm_type):sum()
    end
    parts[#parts + 1] = part:to(dev0)
  end
  local total = parts[1]
  for i = 2, #parts do
    total = norm_type == math.huge and total:maximum(parts[i]) or total + parts[i]
  end
  if norm_type == 2 then
    total = total:sqrt()
  elseif norm_type ~= math.huge then
    total = total ^ (1 / norm_type)
  end
  local coef = (max_norm / (total + 1e-6)):clamp(nil, 1.0)
  for _, key in ipairs(order) do
    local l = groups[key]
    local c = coef:to(l.device)
    _nn.unscale_(l, c, v100.zeros({ 1 }, { device = l.device }))
  end
  return total
end

-- Gradient accumulation over n micro-batches: backward on each (gradients add up), scale each
-- loss by acc.scale (1/n) for a mean, and step when acc:step() says so:
--   if acc:step() then opt:step(); opt:zero_grad() end
local Accumulator = {}
Accumulator.__index = Accumulator

function optim.Accumulator(n)
  assert(math.type(n) == 'integer' and n >= 1, 'Accumulator: n must be an integer >= 1')
  return setmetatable({ n = n, count = 0, scale = 1 / n }, Accumulator)
end

-- Counts one micro-batch; true on every n-th call (the caller then steps).
function Accumulator:step()
  self.count = self.count + 1
  if self.count >= self.n then
    self.count = 0
    return true
  end
  return false
end

function Accumulator:scale_loss(loss)
  return loss * self.scale
end

return optim
