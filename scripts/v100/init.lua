-- scripts/v100/init.lua: `require 'v100'`: v100.base (the C core and the Lua-level helpers) plus
-- the packages scripts reach through the table: v100.dist and v100.onnx. The library's modules
-- require 'v100.base' instead, so nothing below this file requires it (docs/ARCHITECTURE.md).
local v100 = require 'v100.base'
local dist = require 'v100.dist'
local onnx = require 'v100.export.onnx'

-- Distributed runs (scripts/v100/dist/): dist.init(), collectives, DistributedSampler, DataParallel.
v100.dist = dist

-- ONNX export for inference stacks (the extension ext/onnx: lua/v100/export/onnx.lua):
-- v100.onnx.export(model, inputs, path).
v100.onnx = onnx

return v100
