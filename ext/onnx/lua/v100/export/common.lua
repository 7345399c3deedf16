-- ext/onnx/lua/v100/export/common.lua: what the ONNX exporters of export/onnx.lua (the driver and the
-- generic layers) and export/onnx_models.lua (ResNet, BERT) share, below both.
local errors = require 'v100.errors'

local M = {}

-- An export error: 'onnx.export: ' .. string.format(fmt, ...), the whole message (no position).
M.fail = errors.failer('onnx.export: ', 0)

-- A value description like v's (its dtype), with another shape if given.
function M.like(v, shape) return { dtype = v.dtype, shape = shape or v.shape } end

-- A shallow copy of a list.
function M.copy(t)
  local out = {}
  for i, v in ipairs(t) do out[i] = v end
  return out
end

return M
