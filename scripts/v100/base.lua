-- scripts/v100/base.lua: `v100.base`, the table `require 'v100'` returns, before init.lua adds the
-- packages built on it (v100.dist, v100.onnx): the C core (v100.core) plus a few Lua-level
-- helpers. Everything that touches tensor data lives in C; this file only arranges names.
-- The library's own modules require 'v100.base' (never 'v100', which requires them); scripts
-- require 'v100'. Both give the same table.
local core = require 'v100.core'
local autograd = require 'v100.autograd'
local graph = require 'v100.graph'
local kernel = require 'v100.kernel'
local serial = require 'v100.serial'

local v100 = {}
for k, v in pairs(core) do v100[k] = v end

local Tensor = core.Tensor -- the methods table every tensor's __index looks in first

-- True when the tensor lives on a GPU.
function Tensor:is_cuda()
  return self.device:sub(1, 4) == 'cuda'
end

-- PyTorch's spelling.
Tensor.tolist = Tensor.totable

-- Channels-last (NHWC memory, N x C x H x W shape), PyTorch's channels_last memory format:
-- t:to_channels_last() is a channels-last copy (differentiable), or t itself when it already is;
-- t:is_channels_last() says which. Convolutions, pooling, batch norm and elementwise ops keep it.
function Tensor:to_channels_last() return core._nn.to_channels_last(self) end
function Tensor:is_channels_last() return core._nn.is_channels_last(self) end

-- Autograd (scripts/v100/autograd.lua): v100.autograd.{grad, Function, gradcheck}, grad mode.
v100.autograd = autograd
v100.no_grad = autograd.no_grad
v100.enable_grad = autograd.enable_grad

-- CUDA graphs of whole steps (scripts/v100/graph.lua): v100.graph(step_fn, {warmup=}).
v100.graph = graph

-- Kernels written in the script, compiled at run time by NVRTC (scripts/v100/kernel.lua).
v100.kernel = kernel

-- File helpers the Lua library and the recipes share (checkpoints, BERT folders, data caches):
-- v100.io.read_file(path) -> the bytes, or nil and the reason; v100.io.exists(path);
-- v100.io.join(dir, name) -> dir/name (one slash).
function core.io.read_file(path)
  local f, err = io.open(path, 'rb')
  if not f then return nil, err end
  local s = f:read('a')
  f:close()
  return s
end
function core.io.exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end
function core.io.join(a, b) return (a:sub(-1) == '/' and a or a .. '/') .. b end

-- Saving any plain Lua value (scripts/v100/serial.lua): v100.save(path, value) and
-- v100.load(path[, {device =}]): tables of tensors, numbers, strings and booleans, torch.save's
-- role, in a safetensors file whose loading never runs code.
v100.save = serial.save
v100.load = serial.load
v100.serial = serial

-- v100.isatty(fd): whether fd (0, 1, 2) is a terminal, for progress bars (scripts/v100/obs/log.lua).
v100.isatty = core.io.isatty

-- JSON (cJSON, bindings/l_json.c) under the name issue 11 and config.json loaders use.
v100.json = { encode = core.io.json_encode, decode = core.io.json_decode }

-- The BERT WordPiece tokenizer (ext/text/l_text.c): v100.text.WordPiece(vocab_path, opts).
v100.text = core.text

-- cuDNN convolution algorithms: by cuDNN's heuristics (default) or, with benchmark on, by timing
-- the candidates once per shape (cached; that first call synchronises). Returns the old setting.
v100.set_cudnn_benchmark = function(on) return core._nn.set_cudnn_benchmark(on) end

-- One line per library for logs: "v100lua 0.1.0, Lua 5.4.4, CUDA 12.4, cuDNN 9.1.0, NCCL 2.21.5".
function v100.version_string()
  local v = core.versions()
  local function dotted(x, base)
    return string.format('%d.%d.%d', x // base, (x % base) // 100, x % 100)
  end
  local parts = { 'v100lua ' .. v.v100lua, v.lua }
  if v.cuda_runtime > 0 then
    parts[#parts + 1] = string.format('CUDA %d.%d', v.cuda_runtime // 1000, (v.cuda_runtime % 1000) // 10)
  end
  if v.cudnn > 0 then parts[#parts + 1] = 'cuDNN ' .. dotted(v.cudnn, v.cudnn >= 90000 and 10000 or 1000) end
  if v.nccl > 0 then parts[#parts + 1] = 'NCCL ' .. dotted(v.nccl, v.nccl >= 20900 and 10000 or 1000) end
  return table.concat(parts, ', ')
end

return v100
