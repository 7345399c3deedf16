-- scripts/v100/dist/zero.lua: ZeRO stage 1 for dist.DataParallel (docs/DISTRIBUTED.md, "ZeRO
-- stage 1"): the optimizer state is sharded across the ranks.
--
--   local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 25, compress = nil | 'bf16' | 'fp16'})
--   local opt = dp:zero_optimizer('AdamW', {lr = 1e-3, weight_decay = 0.01})   -- or 'SGD'
--   model:zero_grad(); F.mse_loss(dp(x_shard), y_shard):backward()
--   dp:finish()     -- waits for the reduce-scatters: this rank's shard of the averaged gradient
--   opt:step()      -- steps this rank's shard, then all-gathers the parameters
--
-- Every DataParallel bucket (one device and dtype, reverse registration order) is padded with
-- zeros to a multiple of the world size N and split into N equal contiguous shards; rank r owns
-- shard r of every bucket. When a bucket's gradients are complete in backward, its reduce-scatter
-- (sum) is issued asynchronously, as the all-reduce is without ZeRO, and finish() divides this
-- rank's block by N. The rank's optimizer (v100.optim SGD or AdamW) is built on the shard tensors,
-- flat 1-D tensors of their own (no model change), so its state (momentum, moments, f32 masters)
-- is 1/N of the unsharded state up to the padding. After its step the updated shards are
-- all-gathered into a flat copy of each bucket and copied into the parameters.
--
-- The padding is zeros in the gradient and the parameter: SGD and AdamW keep a zero with a zero
-- gradient at zero, and the padding is never copied into a parameter. LAMB and LARS are refused:
-- their trust ratios need whole-parameter norms, and a shard boundary cuts parameters.
local v100 = require 'v100.base'
local optim = require 'v100.optim'
local dist = require 'v100.dist.comm'
local errors = require 'v100.errors'

local M = {}

local fail = errors.failer('DataParallel(zero = 1): ', 2)

-- The flat size of a bucket of n elements at world size N: the next multiple of N.
function M.padded(n, world) return (n + world - 1) // world * world end

-- Allocates the shards of dp's buckets (b.flat, the gradient bucket, is already padded).
function M.setup(dp)
  local N, r = dp.world, dist.rank()
  dp.rank = r
  for _, b in ipairs(dp.buckets) do
    local padded = b.flat:numel()
    b.shard_numel = padded // N
    b.shard_offset = r * b.shard_numel -- 0-based, in the padded bucket
    local o = {dtype = b.dtype, device = b.device}
    b.gshard = v100.zeros({b.shard_numel}, o) -- this rank's block of the averaged gradient
    b.pflat = v100.zeros({padded}, o)         -- the parameters, flat: the all-gather's output
    b.pshard = v100.zeros({b.shard_numel}, o) -- this rank's block of them: what the optimizer steps
    if dp.wire and b.dtype ~= dp.wire then
      b.wire_shard = v100.zeros({b.shard_numel}, {dtype = dp.wire, device = b.device})
    end
  end
end

-- Issues bucket b's reduce-scatter (sum) of buf (b.flat, or its cast for the wire).
function M.issue(dp, bi, buf)
  local b = dp.buckets[bi]
  dp.events[#dp.events + 1] = {'reduce_scatter', bi}
  b.handle = dist.reduce_scatter(b.wire_shard or b.gshard, buf, {op = 'sum', async = true})
  b.issued = true
end

-- Completes bucket b in finish(): the average of this rank's block becomes the shard's .grad.
-- The parameters' own .grad keep this rank's local gradients (not averaged).
function M.finish_bucket(dp, b)
  b.handle:wait()
  if b.wire_shard then b.gshard:copy_(b.wire_shard) end
  if dp.world > 1 then b.gshard:mul_(1 / dp.world) end
  b.pshard.grad = b.gshard
end

local STATE_KEYS = {'momentum_buffer', 'exp_avg', 'exp_avg_sq', 'master'} -- as optim's state_dict

local ZO = {}
ZO.__name = 'v100.dist.ZeroOptimizer'

local KINDS = {SGD = optim.SGD, AdamW = optim.AdamW}
local REFUSED = {LAMB = optim.LAMB, LARS = optim.LARS}

local function kind_name(kind, set)
  if type(kind) == 'string' then return set[kind] and kind or nil end
  for k, f in pairs(set) do if rawequal(f, kind) then return k end end
  return nil
end

-- dp:zero_optimizer(kind, opts): kind is 'SGD' or 'AdamW' (or optim.SGD / optim.AdamW); opts are
-- that optimizer's options (lr, momentum, betas, weight_decay, master_weights, ...), applied to
-- every parameter alike.
function M.optimizer(dp, kind, opts)
  if not dp.zero then
    fail('zero_optimizer needs DataParallel(model, {zero = 1}); without ZeRO use an optimizer on model:parameters()')
  end
  local refused = kind_name(kind, REFUSED)
  if refused then
    fail('%s is not supported: its trust ratios need per-parameter norms, and a shard cuts parameters; '
      .. 'use SGD or AdamW, or DataParallel without zero', refused)
  end
  local name = kind_name(kind, KINDS)
  if not name then fail("the optimizer must be 'SGD' or 'AdamW' (or optim.SGD, optim.AdamW), got %s", tostring(kind)) end
  opts = opts or {}
  if type(opts) ~= 'table' then fail('the optimizer options must be a table, got a %s', type(opts)) end
  if opts.no_decay ~= nil then
    fail('no_decay is not supported: a shard mixes the parameters of a bucket, so weight_decay applies to all of them')
  end
  local shards = {}
  for i, b in ipairs(dp.buckets) do shards[i] = b.pshard end
  local inner = KINDS[name](shards, opts)
  return setmetatable({dp = dp, inner = inner, name = 'ZeRO-1 ' .. name}, ZO)
end

-- The model's parameters into the shards: they are the weights (a load_state_dict of the model,
-- or a change by hand between steps, is seen by the next step).
local function load_shards(dp)
  v100.no_grad(function()
    for _, b in ipairs(dp.buckets) do
      for k, p in ipairs(b.params) do b.pflat:narrow(1, b.offsets[k] + 1, p:numel()):copy_(p:reshape({-1})) end
      b.pshard:copy_(b.pflat:narrow(1, b.shard_offset + 1, b.shard_numel))
    end
  end)
end

-- opt:step([{found_inf =, inv_scale =}]): steps this rank's shards (after dp:finish()), then
-- all-gathers the parameters. An AMP found_inf is reduced with max first: each rank unscaled
-- only its shard, and every rank must skip the step together.
function ZO:step(arg)
  local dp = self.dp
  if dp._active then
    error('ZeRO-1 step: the last backward was not finished: call dp:finish() before opt:step()', 2)
  end
  if type(arg) == 'function' then error('ZeRO-1 step: closures are not supported', 2) end
  if type(arg) == 'table' and arg.found_inf ~= nil and dp.world > 1 then
    dist.all_reduce(arg.found_inf, {op = 'max'})
  end
  load_shards(dp)
  self.inner:step(arg)
  v100.no_grad(function()
    local hs = {}
    for i, b in ipairs(dp.buckets) do hs[i] = dist.all_gather(b.pflat, b.pshard, {async = true}) end
    for i, b in ipairs(dp.buckets) do
      hs[i]:wait()
      for k, p in ipairs(b.params) do p:copy_(b.pflat:narrow(1, b.offsets[k] + 1, p:numel()):view(p.shape)) end
    end
  end)
end

-- Drops (set_to_none, the default) or zeroes the model's gradients and the shards' gradients.
function ZO:zero_grad(set_to_none)
  if set_to_none == nil then set_to_none = true end
  for _, b in ipairs(self.dp.buckets) do
    for _, p in ipairs(b.params) do
      if set_to_none then p.grad = nil elseif p.grad ~= nil then p.grad:zero_() end
    end
  end
  self.inner:zero_grad(set_to_none)
end

-- The number of optimizer state elements this rank holds (momentum buffers, moments, masters):
-- 1/N of the unsharded optimizer's, up to the padding.
function ZO:state_numel()
  local n = 0
  for _, st in pairs(self.inner.state) do
    for _, k in ipairs(STATE_KEYS) do
      if st[k] ~= nil then n = n + st[k]:numel() end
    end
  end
  return n
end

-- Each rank saves its own shard's state (no gather; full_state_dict below gathers): {zero = 1, world =, rank =, shards =
-- {numel per bucket}, optimizer = the shard optimizer's state_dict()}. Loading needs the same
-- world size, rank and bucket layout (the same model and bucket_mb).
function ZO:state_dict()
  local shards = {}
  for i, b in ipairs(self.dp.buckets) do shards[i] = b.shard_numel end
  return {zero = 1, world = self.dp.world, rank = self.dp.rank, shards = shards, optimizer = self.inner:state_dict()}
end

function ZO:load_state_dict(sd)
  local dp = self.dp
  if type(sd) ~= 'table' or sd.zero ~= 1 or type(sd.optimizer) ~= 'table' then
    error('ZeRO-1 load_state_dict: expected a table from a ZeRO-1 optimizer state_dict()', 2)
  end
  if sd.world ~= dp.world or sd.rank ~= dp.rank then
    error(string.format('ZeRO-1 load_state_dict: the state is rank %s of %s ranks, this is rank %d of %d',
      tostring(sd.rank), tostring(sd.world), dp.rank, dp.world), 2)
  end
  for i, b in ipairs(dp.buckets) do
    if sd.shards[i] ~= b.shard_numel then
      error(string.format('ZeRO-1 load_state_dict: shard %d has %s elements in the state, %d here (another model or bucket_mb?)',
        i, tostring(sd.shards[i]), b.shard_numel), 2)
    end
  end
  if #sd.shards ~= #dp.buckets then
    error(string.format('ZeRO-1 load_state_dict: the state has %d shards, this optimizer %d', #sd.shards, #dp.buckets), 2)
  end
  self.inner:load_state_dict(sd.optimizer)
end

-- opt:clip_grad_norm(max_norm): optim.clip_grad_norm over the whole model's averaged gradient,
-- which under ZeRO-1 exists only as the ranks' shards (the parameters' .grad are local). The
-- squared norms of this rank's shards (the padding is zeros) are all-reduced, every rank scales
-- its shards by min(1, max_norm / (norm + 1e-6)); returns the norm (a 0-dim f32 tensor), the same
-- on every rank. Collective: call it on every rank, after dp:finish(), before opt:step().
function ZO:clip_grad_norm(max_norm)
  if type(max_norm) ~= 'number' or not (max_norm > 0) then
    error('ZeRO-1 clip_grad_norm: max_norm must be a positive number, got ' .. tostring(max_norm), 2)
  end
  local dp = self.dp
  if dp._active then
    error('ZeRO-1 clip_grad_norm: the last backward was not finished: call dp:finish() first', 2)
  end
  local total = v100.no_grad(function()
    local sq = v100.zeros({1}, {device = dp.buckets[1] and dp.buckets[1].device or 'cpu'})
    for _, b in ipairs(dp.buckets) do sq:add_(b.gshard:float():square():sum():to(sq.device)) end
    dist.all_reduce(sq, {op = 'sum'})
    local norm = sq:sqrt()
    local coef = (max_norm / (norm + 1e-6)):clamp(nil, 1.0)
    for _, b in ipairs(dp.buckets) do b.gshard:mul_(coef:to({device = b.device, dtype = b.dtype})) end
    return norm:reshape({})
  end)
  return total
end

-- The model's parameters in model:parameters() order, and each one's 1-based index there.
local function model_index(dp)
  local list, idx = dp.module:parameters(), {}
  for i, p in ipairs(list) do idx[p] = i end
  return list, idx
end

-- opt:full_state_dict(): the state_dict() that optim.SGD / optim.AdamW on model:parameters()
-- would have (one group; indices in model:parameters() order), every state buffer all-gathered
-- from the shards: the same table on every rank (save it from rank 0). It loads into a plain
-- optimizer, or with load_full_state_dict into ZeRO-1 at any world size. Collective.
function ZO:full_state_dict()
  local dp = self.dp
  local list, idx = model_index(dp)
  local inner = self.inner:state_dict()
  local pg = {}
  for k, v in pairs(inner.param_groups[1]) do pg[k] = v end
  pg.params = {}
  for i = 1, #list do pg.params[i] = i end
  local sd = {state = {}, param_groups = {pg}, master_weights = inner.master_weights,
    stochastic_rounding = inner.stochastic_rounding, rounding_seed = inner.rounding_seed}
  v100.no_grad(function()
    for bi, b in ipairs(dp.buckets) do
      local st = inner.state[bi]
      -- every rank has stepped every shard the same number of times (the step is collective)
      if st ~= nil then
        for k, p in ipairs(b.params) do sd.state[idx[p]] = {step = st.step} end
        for _, key in ipairs(STATE_KEYS) do
          if st[key] ~= nil then
            local full = dist.all_gather(st[key])
            for k, p in ipairs(b.params) do
              sd.state[idx[p]][key] = full:narrow(1, b.offsets[k] + 1, p:numel()):reshape(p.shape):clone()
            end
          end
        end
      end
    end
  end)
  return sd
end

-- opt:load_full_state_dict(sd): the state of full_state_dict() (of any world size) or of a plain
-- optimizer over model:parameters() with one param group: this rank takes its shard of every
-- buffer; the group's hyper-parameters are loaded too.
function ZO:load_full_state_dict(sd)
  local dp = self.dp
  if type(sd) ~= 'table' or type(sd.param_groups) ~= 'table' or type(sd.state) ~= 'table' then
    error('ZeRO-1 load_full_state_dict: expected a table from full_state_dict() or an optimizer state_dict()', 2)
  end
  if #sd.param_groups ~= 1 then
    error(string.format('ZeRO-1 load_full_state_dict: the state has %d param groups; ZeRO-1 has one', #sd.param_groups), 2)
  end
  local list, idx = model_index(dp)
  if #sd.param_groups[1].params ~= #list then
    error(string.format('ZeRO-1 load_full_state_dict: the state has %d parameters, the model %d',
      #sd.param_groups[1].params, #list), 2)
  end
  local pg = {}
  for k, v in pairs(sd.param_groups[1]) do pg[k] = v end
  pg.params = {}
  local inner = {state = {}, param_groups = {pg}, rounding_seed = sd.rounding_seed}
  v100.no_grad(function()
    for bi, b in ipairs(dp.buckets) do
      pg.params[bi] = bi
      local st
      for k, p in ipairs(b.params) do
        local e = sd.state[sd.param_groups[1].params[idx[p]]]
        if e ~= nil then
          st = st or {step = e.step}
          for _, key in ipairs(STATE_KEYS) do
            local t = e[key]
            if t ~= nil then
              if t:numel() ~= p:numel() then
                error(string.format('ZeRO-1 load_full_state_dict: %s of parameter %d has %d elements, the parameter %d',
                  key, idx[p], t:numel(), p:numel()), 0)
              end
              st[key] = st[key] or v100.zeros({b.flat:numel()}, {dtype = t.dtype, device = b.device})
              st[key]:narrow(1, b.offsets[k] + 1, p:numel()):copy_(t:reshape({-1}))
            end
          end
        end
      end
      if st ~= nil then
        for _, key in ipairs(STATE_KEYS) do
          if st[key] ~= nil then st[key] = st[key]:narrow(1, b.shard_offset + 1, b.shard_numel):clone() end
        end
        inner.state[bi] = st
      end
    end
  end)
  self.inner:load_state_dict(inner)
end

-- Everything else is the shard optimizer's: param_groups (schedules set their lr), state,
-- master_weights (the AMP scaler reads it), defaults.
function ZO.__index(self, k)
  local v = rawget(ZO, k)
  if v ~= nil then return v end
  return rawget(self, 'inner')[k]
end

function ZO:__tostring()
  local n = 0
  for _, b in ipairs(self.dp.buckets) do n = n + b.shard_numel end
  return string.format('%s (rank %d of %d: %d shard elements in %d buckets)', self.name, self.dp.rank,
    self.dp.world, n, #self.dp.buckets)
end

return M
