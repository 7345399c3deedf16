-- scripts/v100/nn/init.lua: `local nn = require 'v100.nn'`: modules, containers, losses, the
-- functional ops (nn.functional, alias nn.F; the functional losses are also nn.cross_entropy
-- etc.) and weight initialisers (nn.init). docs/NN.md describes the API.
-- Inside the package: module (the base class, ModuleList) <- containers; functional <- layers,
-- loss; init_weights <- layers. Nothing in it requires this file.
local Module = require 'v100.nn.module'
local functional = require 'v100.nn.functional'
local init_weights = require 'v100.nn.init_weights'
local layers = require 'v100.nn.layers'
local containers = require 'v100.nn.containers'
local loss = require 'v100.nn.loss'

local nn = {}

nn.Module = Module
nn.functional = functional
nn.F = nn.functional
nn.init = init_weights

for _, part in ipairs{ layers, containers, loss } do
  for k, v in pairs(part) do nn[k] = v end
end

-- The functional losses at the top level, as recipes write them: nn.cross_entropy(logits, y).
for _, k in ipairs{ 'cross_entropy', 'nll_loss', 'mse_loss', 'binary_cross_entropy_with_logits' } do
  nn[k] = nn.functional[k]
end

nn.is_module = nn.Module.is_module

return nn
