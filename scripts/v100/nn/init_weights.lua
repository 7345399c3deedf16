-- scripts/v100/nn/init_weights.lua: `nn.init`, PyTorch's torch.nn.init on v100 tensors.
--
-- Every function fills its tensor in place from v100's Philox generator (so v100.manual_seed
-- makes initialisations reproducible) and returns it. The fills run under v100.no_grad because
-- in-place ops on a leaf that requires grad are otherwise refused.
local v100 = require 'v100.base'
local errors = require 'v100.errors'

local init = {}

local function nograd(fn) return v100.no_grad(fn) end

-- fan_in, fan_out of a weight: out x in [x kernel...] (Linear, Conv).
function init.calculate_fan_in_and_fan_out(t)
  local s = t.shape
  if #s < 2 then
    error('init: fan in and fan out need a tensor with at least 2 dims, got ' .. (#s == 0 and 'scalar' or table.concat(s, 'x')), 2)
  end
  local rf = 1
  for i = 3, #s do rf = rf * s[i] end
  return s[2] * rf, s[1] * rf
end

-- Gains of torch.nn.init.calculate_gain.
function init.calculate_gain(nonlinearity, param)
  if nonlinearity == 'linear' or nonlinearity == 'sigmoid' or nonlinearity == 'conv2d' then return 1 end
  if nonlinearity == 'tanh' then return 5 / 3 end
  if nonlinearity == 'relu' then return math.sqrt(2) end
  if nonlinearity == 'leaky_relu' then
    local slope = param or 0.01
    return math.sqrt(2 / (1 + slope * slope))
  end
  if nonlinearity == 'selu' then return 3 / 4 end
  error('init: unsupported nonlinearity ' .. tostring(nonlinearity), 2)
end

function init.uniform_(t, a, b)
  a, b = a or 0, b or 1
  return nograd(function() return t:uniform_(a, b) end)
end

function init.normal_(t, mean, std)
  mean, std = mean or 0, std or 1
  return nograd(function() return t:normal_(mean, std) end)
end

function init.constant_(t, v) return nograd(function() return t:fill_(v) end) end
function init.zeros_(t) return nograd(function() return t:zero_() end) end
function init.ones_(t) return nograd(function() return t:fill_(1) end) end

local function fan(t, mode)
  local fin, fout = init.calculate_fan_in_and_fan_out(t)
  if mode == nil or mode == 'fan_in' then return fin end
  if mode == 'fan_out' then return fout end
  error("init: mode must be 'fan_in' or 'fan_out', got " .. tostring(mode), 3)
end

-- A tensor with no elements has nothing to fill, and its fan may be 0 (nn.Linear(0, n): fan_in 0
-- would make the bound infinite): PyTorch's kaiming_* return it as it is, and so do these.
local function empty(t) return t:numel() == 0 end

-- opts: {a = 0, mode = 'fan_in', nonlinearity = 'leaky_relu'}
function init.kaiming_uniform_(t, opts)
  opts = errors.check_opts('nn.init.kaiming_uniform_', opts, { 'a', 'mode', 'nonlinearity' })
  if empty(t) then return t end
  local gain = init.calculate_gain(opts.nonlinearity or 'leaky_relu', opts.a or 0)
  local bound = math.sqrt(3) * gain / math.sqrt(fan(t, opts.mode))
  return init.uniform_(t, -bound, bound)
end

function init.kaiming_normal_(t, opts)
  opts = errors.check_opts('nn.init.kaiming_normal_', opts, { 'a', 'mode', 'nonlinearity' })
  if empty(t) then return t end
  local gain = init.calculate_gain(opts.nonlinearity or 'leaky_relu', opts.a or 0)
  return init.normal_(t, 0, gain / math.sqrt(fan(t, opts.mode)))
end

function init.xavier_uniform_(t, gain)
  if empty(t) then return t end
  local fin, fout = init.calculate_fan_in_and_fan_out(t)
  local bound = (gain or 1) * math.sqrt(6 / (fin + fout))
  return init.uniform_(t, -bound, bound)
end

function init.xavier_normal_(t, gain)
  if empty(t) then return t end
  local fin, fout = init.calculate_fan_in_and_fan_out(t)
  return init.normal_(t, 0, (gain or 1) * math.sqrt(2 / (fin + fout)))
end

-- A new parameter tensor (requires grad) of `shape`, filled by fill(t). opts.layer (the layer
-- being constructed) is put in front of an error of the creating or filling op, so that a bad
-- constructor argument (nn.Conv2d(-1, 8, 3): "Conv2d: empty: negative size -1 in dim 2") names
-- the layer: the C op is the one that rejects, the layer only says who asked.
function init.parameter(shape, fill, opts)
  errors.check_opts('nn.init.parameter', opts, { 'dtype', 'device', 'layer' })
  local function make()
    local t = v100.empty(shape, { dtype = opts and opts.dtype or 'f32', device = opts and opts.device or 'cpu' })
    fill(t)
    return t:requires_grad_(true)
  end
  if not (opts and opts.layer) then return make() end
  local ok, res = pcall(make)
  if ok then return res end
  -- the op's message without the position of the line inside this library that called it
  local msg = tostring(res):gsub('^[^\n]-/v100/nn/[%w_]+%.lua:%d+: ', '', 1)
  error(opts.layer .. ': ' .. msg, 0)
end

return init
