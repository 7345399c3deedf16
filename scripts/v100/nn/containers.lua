-- scripts/v100/nn/containers.lua: Sequential, ModuleList (from module.lua), ModuleDict and Checkpoint.
--
-- Children of the list containers are registered under '0', '1', ... (PyTorch's names, which
-- checkpoints use) and indexed from Lua 1-based: seq[1] is child '0'. #seq and ipairs(seq) work.
local v100 = require 'v100.base'
local Module = require 'v100.nn.module'

local C = {}

-- The list containers' pieces, defined with ModuleList in module.lua (Module's __newindex wraps a
-- plain array of modules in a ModuleList, so the list lives beside the base class).
local list = Module._list
local append, list_len, list_newindex = list.append, list.len, list.newindex

-- ---------------------------------------------------------------------------------------------

local Sequential = Module:extend('Sequential')
Sequential.__len = list_len
Sequential.__newindex = list_newindex
C.Sequential = Sequential

-- Sequential(m1, m2, ...) or Sequential{m1, m2, ...}.
function Sequential:init(...)
  local mods = { ... }
  if #mods == 1 and not Module.is_module(mods[1]) and type(mods[1]) == 'table' then mods = mods[1] end
  for i, m in ipairs(mods) do
    if not Module.is_module(m) then error(string.format('Sequential: argument %d is not a module', i), 4) end
    append(self, m)
  end
end

Sequential.append = append
Sequential.add = append

function Sequential:forward(x, ...)
  local mods = rawget(self, '_modules')
  local names = rawget(self, '_mnames')
  if #names == 0 then return x, ... end
  x = mods[names[1]](x, ...)
  for i = 2, #names do x = mods[names[i]](x) end
  return x
end

C.ModuleList = list.ModuleList

local ModuleDict = Module:extend('ModuleDict')
C.ModuleDict = ModuleDict

-- ModuleDict{name = m, ...} registers in sorted name order (a Lua table has no order);
-- ModuleDict{{'b', m1}, {'a', m2}} keeps the given order.
function ModuleDict:init(mods)
  mods = mods or {}
  if #mods > 0 then
    for _, e in ipairs(mods) do Module.add_module(self, e[1], e[2]) end
    return
  end
  local names = {}
  for k in pairs(mods) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do Module.add_module(self, k, mods[k]) end
end

function ModuleDict:keys()
  local out = {}
  for i, n in ipairs(rawget(self, '_mnames')) do out[i] = n end
  return out
end

function ModuleDict:forward()
  error('ModuleDict is not callable: index it in the parent forward', 0)
end

-- ---------------------------------------------------------------------------------------------
-- Checkpoint(module): activation checkpointing. The forward runs under no_grad (nothing of the
-- wrapped module's graph is kept); a v100.autograd.Function node stands for the whole module.
-- Its backward restores the RNG state of the forward (so dropout draws the same masks), re-runs
-- the module with grad enabled on detached copies of the inputs, and backpropagates the
-- incoming gradients into those inputs and the module's parameters, which are extra arguments
-- of the Function so that their gradients flow through the node's edges.
-- Note: modules that update state in forward (BatchNorm running stats) update it twice.

local Checkpoint = Module:extend('Checkpoint')
C.Checkpoint = Checkpoint

function Checkpoint:init(module)
  if not Module.is_module(module) then error('Checkpoint: expected a module', 4) end
  self.module = module
end

-- A fresh leaf with x's data; it requires grad when the forward's argument did (saved tensors
-- may come back detached, so that flag is recorded at forward time).
local function detach_like(x, needs_grad)
  if not v100.is_tensor(x) then return x end
  local d = x:detach()
  if needs_grad then d:requires_grad_(true) end
  return d
end

local TENSOR_SLOT = {} -- marks an argument that comes back from ctx.saved_tensors

local function make_function(mod)
  return v100.autograd.Function{
    name = 'CheckpointBackward',
    forward = function(ctx, nargs, ...)
      local all = table.pack(...)
      local args = table.pack(table.unpack(all, 1, nargs))
      -- tensors come back through saved_tensors (version-checked); keep only the other values
      ctx.nargs, ctx.args = nargs, {}
      ctx.needs = {}
      for i = 1, nargs do
        if v100.is_tensor(args[i]) then ctx.args[i] = TENSOR_SLOT else ctx.args[i] = args[i] end
        ctx.needs[i] = v100.is_tensor(args[i]) and args[i].requires_grad
      end
      ctx.seed, ctx.offset = v100.rng_state()
      local saved = {}
      for i = 1, nargs do if v100.is_tensor(args[i]) then saved[#saved + 1] = args[i] end end
      ctx:save_for_backward(table.unpack(saved))
      ctx.params = {}
      for i = nargs + 1, all.n do ctx.params[#ctx.params + 1] = all[i] end
      local out = table.pack(v100.no_grad(function() return mod(table.unpack(args, 1, nargs)) end))
      ctx.nout = out.n
      return table.unpack(out, 1, out.n)
    end,
    backward = function(ctx, ...)
      local grads = table.pack(...)
      local saved = ctx.saved_tensors -- checks that no input was modified in place since
      local args, k = {}, 0
      for i = 1, ctx.nargs do
        local a = ctx.args[i]
        if a == TENSOR_SLOT then
          k = k + 1
          a = saved[k]
        end
        args[i] = detach_like(a, ctx.needs[i])
      end
      local seed, offset = v100.rng_state()
      v100.set_rng_state(ctx.seed, ctx.offset)
      local ok, out = pcall(function()
        return table.pack(v100.enable_grad(function() return mod(table.unpack(args, 1, ctx.nargs)) end))
      end)
      v100.set_rng_state(seed, offset)
      if not ok then error(out, 0) end
      -- differentiate the outputs that carry a gradient and a graph w.r.t. inputs and parameters
      local outs, gouts = {}, {}
      for i = 1, out.n do
        local o = out[i]
        if v100.is_tensor(o) and o.requires_grad and grads[i] ~= nil then
          outs[#outs + 1] = o
          gouts[#gouts + 1] = grads[i]
        end
      end
      -- Function arguments are (nargs, input 1..nargs, parameter 1..#params): gradient slots
      -- 1 + i for input i and 1 + nargs + j for parameter j
      local wrt, pos = {}, {}
      for i = 1, ctx.nargs do
        if v100.is_tensor(args[i]) and args[i].requires_grad then
          wrt[#wrt + 1] = args[i]
          pos[#wrt] = 1 + i
        end
      end
      for j, p in ipairs(ctx.params) do
        if p.requires_grad then
          wrt[#wrt + 1] = p
          pos[#wrt] = 1 + ctx.nargs + j
        end
      end
      local result = {}
      local total = 1 + ctx.nargs + #ctx.params
      if #outs > 0 and #wrt > 0 then
        local g = v100.autograd.grad(outs, wrt, gouts)
        for i = 1, #wrt do result[pos[i]] = g[i] end
      end
      return table.unpack(result, 1, total)
    end,
  }
end

function Checkpoint:forward(...)
  local mod = self.module
  if not v100.is_grad_enabled() then return mod(...) end
  local fn = rawget(self, '_fn')
  if not fn then
    fn = make_function(mod)
    rawset(self, '_fn', fn)
  end
  local n = select('#', ...)
  local call = table.pack(n, ...)
  for _, p in ipairs(mod:parameters()) do
    call.n = call.n + 1
    call[call.n] = p
  end
  return fn(table.unpack(call, 1, call.n))
end

return C
