-- scripts/v100/nn/init.lua: `local nn = require 'v100.nn'`: modules, containers, losses, the
-- functional ops (nn.functional, alias nn.F; the functional losses are also nn.cross_entropy
-- etc.) and weight initialisers (nn.init). docs/NN.md describes the API.
local nn = {}

nn.Module = require 'v100.nn.module'
nn.functional = require 'v100.nn.functional'
nn.F = nn.functional
nn.init = require 'v100.nn.init_weights'

for _, part in ipairs{ 'v100.nn.layers', 'v100.nn.containers', 'v100.nn.loss' } do
  for k, v in pairs(require(part)) do nn[k] = v end
end

-- The functional losses at the top level, as recipes write them: nn.cross_entropy(logits, y).
for _, k in ipairs{ 'cross_entropy', 'nll_loss', 'mse_loss', 'binary_cross_entropy_with_logits' } do
  nn[k] = nn.functional[k]
end

nn.is_module = nn.Module.is_module

return nn
