-- `require 'v100.onnx'` (ONNX export; also v100.onnx): an alias kept because scripts write that
-- name; the module is ext/onnx/lua/v100/export/onnx.lua.
return require 'v100.export.onnx'
