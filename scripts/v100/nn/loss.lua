-- scripts/v100/nn/loss.lua: the losses as modules (CrossEntropyLoss, NLLLoss, MSELoss,
-- BCEWithLogitsLoss). Each keeps its options table and calls the functional form, so the
-- formulas live in one place (scripts/v100/nn/functional.lua).
local _nn = require('v100.core')._nn
local Module = require 'v100.nn.module'
local F = require 'v100.nn.functional'
local errors = require 'v100.errors'

local M = {}

local function loss_class(name, fn, keys)
  local C = Module:extend(name)
  function C:init(opts)
    -- level 3: init is called by the class's constructor
    opts = errors.check_opts('nn.' .. name, opts, keys, 3)
    local o = {}
    for _, k in ipairs(keys) do o[k] = opts[k] end
    -- at construction, where the mistake is (the functional form checks it again per call)
    o.reduction = _nn.check_reduction(name, o.reduction)
    self.opts = o
  end
  function C:forward(input, target) return fn(input, target, self.opts) end
  function C:extra_repr()
    local parts = {}
    for _, k in ipairs(keys) do
      local v = self.opts[k]
      if v ~= nil and type(v) ~= 'userdata' then parts[#parts + 1] = k .. '=' .. tostring(v) end
    end
    return table.concat(parts, ', ')
  end
  M[name] = C
  return C
end

loss_class('CrossEntropyLoss', F.cross_entropy, { 'reduction', 'smoothing', 'label_smoothing', 'ignore_index' })
loss_class('NLLLoss', F.nll_loss, { 'reduction', 'ignore_index' })
loss_class('MSELoss', F.mse_loss, { 'reduction' })
loss_class('BCEWithLogitsLoss', F.binary_cross_entropy_with_logits, { 'reduction', 'pos_weight', 'weight' })

return M
