-- scripts/v100/dist/parallel.lua: dist.DataParallel (docs/DISTRIBUTED.md, "Data-parallel
-- training"), PyTorch DDP's scheme in Lua over v100.dist:
--
--   local dp = dist.DataParallel(model, {bucket_mb = 25, compress = nil | 'bf16' | 'fp16'})
--   local loss = F.mse_loss(dp(x_shard), y_shard); loss:backward()
--   dp:finish()          -- waits for the buckets' all-reduces, .grad = average over the ranks
--   opt:step()
--
-- The parameters are broadcast from rank 0 at construction. The gradients are laid out in flat
-- f32-or-own-dtype buckets of at most bucket_mb MiB, the parameters in reverse registration
-- order (the last layers' grads are ready first in backward, so the first bucket fills first).
-- A post-accumulate-grad hook on every parameter copies its .grad into its bucket slot; when a
-- bucket's last gradient has arrived its all-reduce is issued asynchronously, so it overlaps the
-- rest of backward (on MPI the transfer progresses while backward runs; dp.events records the
-- order). Buckets are issued in index order on every rank: the collectives must match across
-- ranks, and a bucket that completes early waits for the lower ones. finish() issues the
-- buckets whose parameters got no gradient (unused in this backward: zeros, as PyTorch's
-- find_unused_parameters), waits, and copies the averaged buckets back into every .grad.
-- With {zero = 1} (ZeRO stage 1, scripts/v100/dist/zero.lua) the buckets are padded to a multiple
-- of the world size and reduce-scattered instead: each rank gets its shard of the average, which
-- the optimizer from dp:zero_optimizer() steps before all-gathering the parameters.
local v100 = require 'v100.base'
local dist = require 'v100.dist.comm'
local errors = require 'v100.errors'
local ZeRO = require 'v100.dist.zero'

local M = {}

local DP = {}
DP.__name = 'v100.dist.DataParallel'

local WIRE = {bf16 = 'bf16', fp16 = 'f16', f16 = 'f16'}

local fail = errors.failer('DataParallel: ', 2)

-- The buckets: parameters in reverse registration order, grouped by (device, dtype) runs, a new
-- bucket when the next one would exceed cap bytes (a parameter larger than cap gets its own).
local function make_buckets(named, cap, pad)
  local buckets, cur = {}, nil
  for i = #named, 1, -1 do
    local name, p = named[i][1], named[i][2]
    if p.requires_grad then
      local bytes = p:numel() * p:element_size()
      if cur == nil or cur.dtype ~= p.dtype or cur.device ~= p.device
          or (cur.bytes + bytes > cap and cur.numel > 0) then
        cur = {params = {}, names = {}, offsets = {}, numel = 0, bytes = 0, dtype = p.dtype, device = p.device}
        buckets[#buckets + 1] = cur
      end
      local k = #cur.params + 1
      cur.params[k], cur.names[k], cur.offsets[k] = p, name, cur.numel
      cur.numel, cur.bytes = cur.numel + p:numel(), cur.bytes + bytes
    end
  end
  for _, b in ipairs(buckets) do
    -- ZeRO-1: zeros up to a multiple of the world size (pad), so that the shards are equal
    b.flat = v100.zeros({(b.numel + pad - 1) // pad * pad}, {dtype = b.dtype, device = b.device})
  end
  return buckets
end

-- dist.DataParallel(model, opts): opts.bucket_mb (default 25), opts.compress (nil, 'bf16' or
-- 'fp16': the bucket is cast for the wire, summed in that dtype, cast back, then averaged),
-- opts.zero (nil or 0: every rank holds the whole optimizer; 1: ZeRO stage 1, dp:zero_optimizer).
function M.DataParallel(model, opts)
  if type(model) ~= 'table' or type(model.named_parameters) ~= 'function' then
    fail('model must be an nn module (with named_parameters), got a %s', type(model))
  end
  opts = errors.check_opts('DataParallel', opts, { 'bucket_mb', 'compress', 'zero' })
  local mb = opts.bucket_mb or 25
  if type(mb) ~= 'number' or not (mb > 0) then fail('bucket_mb must be a positive number, got %s', tostring(mb)) end
  local wire = nil
  if opts.compress ~= nil then
    wire = WIRE[opts.compress]
    if not wire then fail("compress must be nil, 'bf16' or 'fp16', got %s", tostring(opts.compress)) end
  end
  local zero = opts.zero
  if zero ~= nil and zero ~= 0 and zero ~= 1 then
    if zero == 2 or zero == 3 then
      fail('zero = %d (sharded gradients or parameters) is not supported: only zero = 1 (sharded optimizer state)', zero)
    end
    fail('zero must be nil, 0 or 1, got %s', tostring(zero))
  end
  zero = zero == 1
  if not dist.is_initialized() then dist.init() end
  local self = setmetatable({module = model, world = dist.size(), compress = opts.compress,
    wire = wire, bucket_mb = mb, zero = zero, events = {}, _sync = true, _hooks = {}}, DP)
  local named = model:named_parameters()
  -- Every rank starts from rank 0's parameters (and buffers: running statistics).
  v100.no_grad(function()
    for _, e in ipairs(named) do dist.broadcast(e[2], {src = 0}) end
  end)
  self:broadcast_buffers()
  self.buckets = make_buckets(named, math.max(1, math.floor(mb * 1024 * 1024)), zero and self.world or 1)
  if zero then ZeRO.setup(self) end
  for bi, b in ipairs(self.buckets) do
    for k, p in ipairs(b.params) do
      local slot = b.flat:narrow(1, b.offsets[k] + 1, p:numel())
      self._hooks[#self._hooks + 1] = p:register_post_accumulate_grad_hook(function(leaf)
        self:_ready(bi, k, slot, leaf)
      end)
    end
  end
  self:_reset()
  return self
end

function DP:_reset()
  for _, b in ipairs(self.buckets) do
    b.pending, b.seen, b.handle, b.wire_buf, b.issued = #b.params, {}, nil, nil, false
  end
  self._next = 1 -- the lowest bucket not yet issued
  self._active = false
end

-- A parameter's gradient is final for this backward: into its slot, and issue what is complete.
function DP:_ready(bi, k, slot, leaf)
  if not self._sync then return end -- no_sync: the grads just accumulate in .grad
  local b = self.buckets[bi]
  -- the events of the current (or last) backward only, so that a long run does not grow them
  if not self._active then self.events = {} end
  self.events[#self.events + 1] = {'hook', b.names[k]}
  self._active = true
  if b.seen[k] then return end -- a second call within one backward: the slot already holds it
  b.seen[k] = true
  v100.no_grad(function() slot:copy_(leaf.grad:reshape({-1})) end)
  b.pending = b.pending - 1
  while self._next <= #self.buckets and self.buckets[self._next].pending == 0 do
    self:_issue(self._next)
    self._next = self._next + 1
  end
end

function DP:_issue(bi)
  local b = self.buckets[bi]
  local buf = b.flat
  if self.wire and buf.dtype ~= self.wire then
    buf = v100.no_grad(function() return b.flat:to(self.wire) end)
    b.wire_buf = buf
  end
  if self.zero then return ZeRO.issue(self, bi, buf) end
  self.events[#self.events + 1] = {'allreduce', bi}
  b.handle = dist.all_reduce(buf, {op = 'sum', async = true})
  b.issued = true
end

-- Waits for every bucket's all-reduce and writes the average into each parameter's .grad. A
-- parameter without a gradient in this backward contributes zeros (its slot is zeroed) and gets
-- the others' average as its .grad. Called between backward and the optimizer step; a no-op
-- when no backward ran since the last call, and inside no_sync.
function DP:finish()
  if not self._active then return self end
  v100.no_grad(function()
    for bi = self._next, #self.buckets do
      local b = self.buckets[bi]
      for k, p in ipairs(b.params) do
        if not b.seen[k] then b.flat:narrow(1, b.offsets[k] + 1, p:numel()):zero_() end
      end
      self:_issue(bi)
    end
    self._next = #self.buckets + 1
    for _, b in ipairs(self.buckets) do
      if self.zero then
        ZeRO.finish_bucket(self, b) -- the shard's .grad; p.grad stays local
      else
        b.handle:wait()
        if b.wire_buf then b.flat:copy_(b.wire_buf) end
        if self.world > 1 then b.flat:mul_(1 / self.world) end
        for k, p in ipairs(b.params) do
          local avg = b.flat:narrow(1, b.offsets[k] + 1, p:numel()):view(p.shape)
          if p.grad then p.grad:copy_(avg) else p.grad = avg:clone() end
        end
      end
    end
  end)
  self:_reset()
  return self
end
DP.sync = DP.finish

-- ZeRO-1 (DataParallel(model, {zero = 1})): the optimizer over this rank's shards, kind 'SGD' or
-- 'AdamW' with that optimizer's options; its step() all-gathers the parameters.
-- Rank 0's buffers (batch norm running statistics) on every rank. Each rank's statistics follow
-- its own batches during training; call this before evaluating on several ranks (or saving what
-- other ranks will read), as PyTorch DDP's broadcast_buffers does before every forward.
function DP:broadcast_buffers()
  local m = self.module
  if not m.named_buffers then return self end
  v100.no_grad(function()
    for _, e in ipairs(m:named_buffers()) do dist.broadcast(e[2], {src = 0}) end
  end)
  return self
end

function DP:zero_optimizer(kind, opts) return ZeRO.optimizer(self, kind, opts) end

-- no_sync(fn, ...): runs fn (forward and backward of micro-batches) without any all-reduce; the
-- gradients accumulate in .grad locally, and the next backward outside no_sync reduces the sum.
function DP:no_sync(fn, ...)
  local prev = self._sync
  self._sync = false
  local res = table.pack(pcall(fn, ...))
  self._sync = prev
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- AMP: the scaler's found_inf (1 when a rank saw an inf/NaN) reduced with max, so that every
-- rank skips the step together. After finish() the gradients are already the same on every
-- rank, so unscale_ finds the same answer; this makes the decision collective by construction
-- (e.g. when each rank unscales before finish, or with compression that could overflow on the
-- wire only on some ranks' reading). Call it after scaler:unscale_(opt), before scaler:step.
function DP:sync_found_inf(scaler)
  local f = scaler._found_inf
  if f then dist.all_reduce(f, {op = 'max'}) end
  return self
end

-- dp.events: {'hook', name} / {'allreduce', bucket index} of the last backward (cleared when the
-- next one starts), and a way to clear it.
function DP:clear_events() self.events = {} return self end

-- Removes the hooks: the model trains locally again.
function DP:remove()
  for _, h in ipairs(self._hooks) do h:remove() end
  self._hooks = {}
end

-- A forward while the last backward's all-reduces are unfinished would let the next backward's
-- hooks write into buckets still on the wire, and the optimizer step before it would have used
-- this rank's own gradients: both are a missing finish(), so say so.
function DP.__call(self, ...)
  if self._active then
    error('DataParallel: the previous backward was not finished: call dp:finish() after backward, before the optimizer step', 2)
  end
  return self.module(...)
end

-- Everything else is the wrapped module's (dp:parameters(), dp:train(), dp.fc1, ...).
function DP.__index(self, k)
  local v = rawget(DP, k)
  if v ~= nil then return v end
  local m = rawget(self, 'module')
  local mv = m[k]
  if type(mv) == 'function' then
    return function(s, ...) if s == self then return mv(m, ...) end return mv(s, ...) end
  end
  return mv
end

return M
