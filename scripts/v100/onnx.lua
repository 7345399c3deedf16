-- `require 'v100.onnx'` (ONNX export; also v100.onnx), a name scripts use: the module is
-- scripts/v100/export/onnx.lua.
return require 'v100.export.onnx'
