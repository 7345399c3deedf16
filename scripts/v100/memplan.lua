-- scripts/v100/memplan.lua: `v100.memplan`, the memory plan of a training step: what the
-- parameters, their gradients, the optimizer's state and its f32 master weights take before the
-- first step (counted from the tensors, and for state the optimizer has not made yet, from its
-- kind), and, measured over one step, what the activations and workspaces add on top.
--
--   local memplan = require 'v100.memplan'
--   local plan = memplan.static(model, opt)         -- bytes by part, before step 1
--   print(memplan.format(plan))
--   local peak = memplan.measure(plan, function() step() end)  -- runs one step; fills plan.activations
--   print(memplan.format(plan))
--
-- Bytes are logical tensor sizes; the pool rounds blocks up (at most a few percent for large
-- tensors), which the measured peak includes and the static parts do not.
local v100 = require 'v100.base'

local memplan = {}

local SIZE = { f32 = 4, f16 = 2, bf16 = 2, f64 = 8, i32 = 4, i64 = 8, u8 = 1, bool = 1 }

local function bytes_of(t) return t:numel() * SIZE[t.dtype] end

local function is_half(dt) return dt == 'f16' or dt == 'bf16' end

-- The optimizer's state tensors per parameter: those it holds, else those its kind will make on
-- the first step (moments for AdamW/LAMB, a momentum buffer for SGD/LARS with momentum, an f32
-- master for a half parameter under master_weights), in the dtype it will make them in.
local function state_of(opt, p)
  local st = opt.state and opt.state[p] or nil
  local state, master = 0, 0
  local q_dt = (opt.master_weights and is_half(p.dtype)) and 'f32' or p.dtype
  local s_dt = is_half(q_dt) and 'f32' or q_dt
  if st and st.master then master = bytes_of(st.master)
  elseif opt.master_weights and is_half(p.dtype) then master = p:numel() * 4 end
  local kind = opt.kind
  local n = 0
  if kind == 'adamw' or kind == 'lamb' then n = 2
  else
    local mom = false
    for _, g in ipairs(opt.param_groups or {}) do
      for _, q in ipairs(g.params) do if q == p then mom = (g.momentum or 0) ~= 0 end end
    end
    if mom then n = 1 end
  end
  if st and (st.exp_avg or st.momentum_buffer) then
    for _, k in ipairs({ 'exp_avg', 'exp_avg_sq', 'momentum_buffer' }) do
      if st[k] then state = state + bytes_of(st[k]) end
    end
  else
    state = n * p:numel() * SIZE[s_dt]
  end
  return state, master
end

-- The static parts: parameters, gradients (one per parameter that requires grad, in its dtype),
-- optimizer state and f32 masters, in bytes; `count` parameters and their dtypes.
function memplan.static(model, opt)
  local plan = { parameters = 0, gradients = 0, optimizer_state = 0, masters = 0, count = 0, dtypes = {} }
  local seen = {}
  for _, p in ipairs(model:parameters()) do
    if not seen[p] then
      seen[p] = true
      plan.count = plan.count + p:numel()
      plan.dtypes[p.dtype] = true
      plan.parameters = plan.parameters + bytes_of(p)
      if p.requires_grad then plan.gradients = plan.gradients + bytes_of(p) end
      if opt then
        local s, m = state_of(opt, p)
        plan.optimizer_state = plan.optimizer_state + s
        plan.masters = plan.masters + m
      end
    end
  end
  plan.optimizer = opt and opt.kind or nil
  plan.static = plan.parameters + plan.gradients + plan.optimizer_state + plan.masters
  return plan
end

-- Runs step() once between two peak resets of the device's pool and records in plan the bytes
-- allocated before it, its peak, and their difference less the gradients not yet allocated: what
-- the activations (and the library workspaces, which come from the same pool) add at the peak.
function memplan.measure(plan, step, dev)
  dev = dev or v100.device()
  if not tostring(dev):match('^cuda') then return nil end
  v100.cuda.synchronize()
  local before = v100.memory.stats(dev).allocated
  v100.memory.reset_peak(dev)
  step()
  v100.cuda.synchronize()
  local st = v100.memory.stats(dev)
  plan.allocated_before = before
  plan.peak_allocated = st.peak_allocated
  plan.peak_reserved = st.peak_reserved
  plan.activations = math.max(0, st.peak_allocated - math.max(before, plan.static))
  return st.peak_allocated
end

local function gib(b) return string.format('%.2f GiB', b / 2 ^ 30) end

function memplan.format(plan)
  local dts = {}
  for dt in pairs(plan.dtypes) do dts[#dts + 1] = dt end
  table.sort(dts)
  local s = string.format('memory plan: parameters %s (%.1f M, %s), gradients %s, optimizer state %s%s%s, ' ..
    'static total %s', gib(plan.parameters), plan.count / 1e6, table.concat(dts, '/'), gib(plan.gradients),
    gib(plan.optimizer_state), plan.optimizer and (' (' .. plan.optimizer .. ')') or '',
    plan.masters > 0 and (', f32 masters ' .. gib(plan.masters)) or '', gib(plan.static))
  if plan.peak_allocated then
    s = s .. string.format('\nmemory plan, measured over one step: peak allocated %s = static %s + activations and ' ..
      'workspaces %s; peak reserved %s', gib(plan.peak_allocated), gib(math.min(plan.static, plan.peak_allocated)),
      gib(plan.activations), gib(plan.peak_reserved))
  end
  return s
end

return memplan
