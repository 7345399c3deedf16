-- scripts/v100/nn/layers.lua: the standard layers as modules over nn.functional.
--
-- Initialisations follow PyTorch's defaults so that recipes ported from PyTorch train the same
-- way: kaiming_uniform(a = sqrt(5)) weights (a bound of 1/sqrt(fan_in)) and
-- uniform(+-1/sqrt(fan_in)) biases for Linear/Conv2d, N(0, 1) for Embedding, ones/zeros for the
-- norms. Constructors take an optional {dtype=, device=} in their options table.
local v100 = require 'v100.base'
local _nn = require('v100.core')._nn -- the C layer ops and checks
local Module = require 'v100.nn.module'
local F = require 'v100.nn.functional'
local init = require 'v100.nn.init_weights'
local errors = require 'v100.errors'

local L = {}

local function bool_str(b) return b and 'true' or 'false' end
local function pair_str(p) return '(' .. p[1] .. ', ' .. p[2] .. ')' end
-- {dtype=, device=} of a constructor's options, and the layer's name for parameter errors.
local function factory(opts, layer)
  return { dtype = opts and opts.dtype, device = opts and opts.device, layer = layer }
end


-- ---------------------------------------------------------------------------------------------
-- Linear and Conv2d

local Linear = Module:extend('Linear')
L.Linear = Linear

function Linear:init(in_features, out_features, opts)
  opts = errors.check_opts('nn.Linear', opts, { 'bias', 'dtype', 'device' }, 3)
  assert(math.tointeger(in_features) and math.tointeger(out_features), 'Linear(in, out): sizes must be integers')
  self.in_features, self.out_features = in_features, out_features
  local fk = factory(opts, self.__name)
  self.weight = init.parameter({ out_features, in_features },
    function(t) init.kaiming_uniform_(t, { a = math.sqrt(5) }) end, fk)
  if opts.bias ~= false then
    local bound = in_features > 0 and 1 / math.sqrt(in_features) or 0
    self.bias = init.parameter({ out_features }, function(t) init.uniform_(t, -bound, bound) end, fk)
  end
end

function Linear:forward(x) return F.linear(x, self.weight, self.bias) end

function Linear:extra_repr()
  return string.format('in_features=%d, out_features=%d, bias=%s', self.in_features, self.out_features,
    bool_str(self.bias ~= nil))
end

local Conv2d = Module:extend('Conv2d')
L.Conv2d = Conv2d

function Conv2d:init(cin, cout, k, opts)
  opts = errors.check_opts('nn.Conv2d', opts, { 'stride', 'padding', 'dilation', 'groups', 'bias', 'dtype', 'device' }, 3)
  local groups = opts.groups or 1
  -- groups shapes the weight made here, before any op sees it
  if not math.tointeger(groups) or groups < 1 then
    error(string.format('Conv2d: groups must be a positive integer, got %s', tostring(groups)), 3)
  end
  if cin % groups ~= 0 or cout % groups ~= 0 then
    error(string.format('Conv2d: in_channels %d and out_channels %d must be divisible by groups %d', cin, cout, groups), 3)
  end
  self.in_channels, self.out_channels = cin, cout
  self.kernel_size = F._pair('Conv2d', 'kernel_size', k)
  self.stride = F._pair('Conv2d', 'stride', opts.stride, 1)
  self.padding = F._pair('Conv2d', 'padding', opts.padding, 0)
  self.dilation = F._pair('Conv2d', 'dilation', opts.dilation, 1)
  self.groups = groups
  local fk = factory(opts, self.__name)
  local kh, kw = self.kernel_size[1], self.kernel_size[2]
  self.weight = init.parameter({ cout, cin // groups, kh, kw },
    function(t) init.kaiming_uniform_(t, { a = math.sqrt(5) }) end, fk)
  if opts.bias ~= false then
    local fan_in = (cin // groups) * kh * kw
    -- fan_in 0 (a 0 x 0 kernel, no input channels): bound 0, as Linear; conv2d rejects the
    -- empty weight when the layer is called
    local bound = fan_in > 0 and 1 / math.sqrt(fan_in) or 0
    self.bias = init.parameter({ cout }, function(t) init.uniform_(t, -bound, bound) end, fk)
  end
end

function Conv2d:forward(x)
  return F.conv2d(x, self.weight, self.bias,
    { stride = self.stride, padding = self.padding, dilation = self.dilation, groups = self.groups })
end

function Conv2d:extra_repr()
  local s = string.format('%d, %d, kernel_size=%s, stride=%s', self.in_channels, self.out_channels,
    pair_str(self.kernel_size), pair_str(self.stride))
  if self.padding[1] ~= 0 or self.padding[2] ~= 0 then s = s .. ', padding=' .. pair_str(self.padding) end
  if self.dilation[1] ~= 1 or self.dilation[2] ~= 1 then s = s .. ', dilation=' .. pair_str(self.dilation) end
  if self.groups ~= 1 then s = s .. ', groups=' .. self.groups end
  if self.bias == nil then s = s .. ', bias=false' end
  return s
end

-- ---------------------------------------------------------------------------------------------
-- Normalisation

-- BatchNorm: weight 1, bias 0, running_mean 0, running_var 1, num_batches_tracked (i64 0).
-- momentum = nil gives a cumulative moving average (1 / num_batches_tracked) as in PyTorch,
-- at the price of a host read of the counter per training step. Parameters and running stats
-- stay f32 when the module is converted to f16/bf16 (the kernels take f32 statistics, and AMP
-- keeps BN in f32).
local BatchNorm = Module:extend('_BatchNorm')
BatchNorm._keep_f32 = { weight = true, bias = true, running_mean = true, running_var = true }

function BatchNorm:init(c, opts)
  opts = errors.check_opts('nn.' .. self.__name, opts, { 'eps', 'momentum', 'affine', 'track_running_stats', 'dtype', 'device' }, 3)
  self.num_features = c
  self.eps = opts.eps or 1e-5
  if opts.momentum == false then self.momentum = nil else self.momentum = opts.momentum or 0.1 end
  self.affine = opts.affine ~= false
  self.track_running_stats = opts.track_running_stats ~= false
  local fk = factory(opts, self.__name)
  if self.affine then
    self.weight = init.parameter({ c }, init.ones_, fk)
    self.bias = init.parameter({ c }, init.zeros_, fk)
  end
  if self.track_running_stats then
    self:register_buffer('running_mean', v100.zeros({ c }, { dtype = fk.dtype, device = fk.device }))
    self:register_buffer('running_var', v100.ones({ c }, { dtype = fk.dtype, device = fk.device }))
    self:register_buffer('num_batches_tracked', v100.zeros({}, { dtype = 'i64', device = fk.device }))
  end
end

-- opts (optional): F.batch_norm's fusion, {activation = 'relu', residual = r}: the module's
-- output becomes relu(bn(x) + r), computed in one pass (the ResNet blocks call it so).
function BatchNorm:forward(x, opts)
  _nn.check_ndim(self.__name, x, self._dims)
  local momentum = self.momentum
  if self.training and self.track_running_stats then
    local nbt = self.num_batches_tracked
    nbt:add_(1)
    if momentum == nil then momentum = 1 / nbt:item() end
  end
  -- batch statistics in training, and in eval when no running stats are kept
  local use_batch = self.training or self.running_mean == nil
  local rm, rv
  if not self.training or self.track_running_stats then rm, rv = self.running_mean, self.running_var end
  return F.batch_norm(x, rm, rv, self.weight, self.bias, use_batch, momentum or 0, self.eps, opts)
end

function BatchNorm:extra_repr()
  return string.format('%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s', self.num_features, self.eps,
    self.momentum and string.format('%g', self.momentum) or 'nil', bool_str(self.affine),
    bool_str(self.track_running_stats))
end

local BatchNorm2d = BatchNorm:extend('BatchNorm2d')
BatchNorm2d._dims = { 4 }
L.BatchNorm2d = BatchNorm2d

local BatchNorm1d = BatchNorm:extend('BatchNorm1d')
BatchNorm1d._dims = { 2, 3 }
L.BatchNorm1d = BatchNorm1d

local LayerNorm = Module:extend('LayerNorm')
LayerNorm._keep_f32 = { weight = true, bias = true }
L.LayerNorm = LayerNorm

function LayerNorm:init(shape, opts)
  opts = errors.check_opts('nn.LayerNorm', opts, { 'eps', 'elementwise_affine', 'bias', 'dtype', 'device' }, 3)
  self.normalized_shape = type(shape) == 'number' and { shape } or shape
  self.eps = opts.eps or 1e-5
  self.elementwise_affine = opts.elementwise_affine ~= false
  local fk = factory(opts, self.__name)
  if self.elementwise_affine then
    self.weight = init.parameter(self.normalized_shape, init.ones_, fk)
    if opts.bias ~= false then self.bias = init.parameter(self.normalized_shape, init.zeros_, fk) end
  end
end

function LayerNorm:forward(x) return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps) end

function LayerNorm:extra_repr()
  local ns = self.normalized_shape
  return string.format('(%s%s), eps=%g, elementwise_affine=%s', table.concat(ns, ', '), #ns == 1 and ',' or '',
    self.eps, bool_str(self.elementwise_affine))
end

-- ---------------------------------------------------------------------------------------------
-- Activations and shape layers

local function simple(name, fn, repr)
  local C = Module:extend(name)
  C.forward = function(self, x) return fn(self, x) end
  if repr then C.extra_repr = repr end
  L[name] = C
  return C
end

simple('ReLU', function(_, x) return x:relu() end)
simple('Sigmoid', function(_, x) return x:sigmoid() end)
simple('Tanh', function(_, x) return x:tanh() end)
simple('Identity', function(_, x) return x end)

local GELU = simple('GELU', function(self, x) return F.gelu(x, { approximate = self.approximate }) end,
  function(self) return self.approximate ~= 'none' and ("approximate='" .. self.approximate .. "'") or '' end)
function GELU:init(opts)
  errors.check_opts('nn.GELU', opts, { 'approximate' }, 3)
  self.approximate = opts and opts.approximate or 'none' end

local Softmax = simple('Softmax', function(self, x) return x:softmax(self.dim) end,
  function(self) return 'dim=' .. self.dim end)
function Softmax:init(dim) self.dim = dim or -1 end

local LogSoftmax = simple('LogSoftmax', function(self, x) return x:log_softmax(self.dim) end,
  function(self) return 'dim=' .. self.dim end)
function LogSoftmax:init(dim) self.dim = dim or -1 end

local Dropout = simple('Dropout', function(self, x) return F.dropout(x, self.p, self.training) end,
  function(self) return string.format('p=%g', self.p) end)
function Dropout:init(p)
  p = p or 0.5
  _nn.check_prob('Dropout', 'p', p) -- at construction: no op sees p before the first forward
  self.p = p
end

-- Flatten(start = 2, end = -1): merges dims start..end (1-based, negative from the end).
local Flatten = simple('Flatten', function(self, x)
  local s = x.shape
  local a, b = _nn.flatten_dims('Flatten', x, self.start_dim, self.end_dim)
  local out, n = {}, 1
  for i = 1, a - 1 do out[#out + 1] = s[i] end
  for i = a, b do n = n * s[i] end
  out[#out + 1] = n
  for i = b + 1, #s do out[#out + 1] = s[i] end
  return x:reshape(out)
end, function(self) return string.format('start_dim=%d, end_dim=%d', self.start_dim, self.end_dim) end)
function Flatten:init(start_dim, end_dim) self.start_dim, self.end_dim = start_dim or 2, end_dim or -1 end

-- ---------------------------------------------------------------------------------------------
-- Pooling

local MaxPool2d = Module:extend('MaxPool2d')
L.MaxPool2d = MaxPool2d
function MaxPool2d:init(k, opts)
  opts = errors.check_opts('nn.MaxPool2d', opts, { 'stride', 'padding', 'dilation', 'ceil_mode' }, 3)
  self.kernel_size = F._pair('MaxPool2d', 'kernel_size', k)
  self.stride = F._pair('MaxPool2d', 'stride', opts.stride, self.kernel_size)
  self.padding = F._pair('MaxPool2d', 'padding', opts.padding, 0)
  self.dilation = F._pair('MaxPool2d', 'dilation', opts.dilation, 1)
  self.ceil_mode = opts.ceil_mode and true or false
end
function MaxPool2d:forward(x)
  return F.max_pool2d(x, self.kernel_size,
    { stride = self.stride, padding = self.padding, dilation = self.dilation, ceil_mode = self.ceil_mode })
end
function MaxPool2d:extra_repr()
  return string.format('kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s', pair_str(self.kernel_size),
    pair_str(self.stride), pair_str(self.padding), pair_str(self.dilation), bool_str(self.ceil_mode))
end

local AvgPool2d = Module:extend('AvgPool2d')
L.AvgPool2d = AvgPool2d
function AvgPool2d:init(k, opts)
  opts = errors.check_opts('nn.AvgPool2d', opts, { 'stride', 'padding', 'ceil_mode', 'count_include_pad' }, 3)
  self.kernel_size = F._pair('AvgPool2d', 'kernel_size', k)
  self.stride = F._pair('AvgPool2d', 'stride', opts.stride, self.kernel_size)
  self.padding = F._pair('AvgPool2d', 'padding', opts.padding, 0)
  self.ceil_mode = opts.ceil_mode and true or false
  self.count_include_pad = opts.count_include_pad ~= false
end
function AvgPool2d:forward(x)
  return F.avg_pool2d(x, self.kernel_size, { stride = self.stride, padding = self.padding, ceil_mode = self.ceil_mode,
    count_include_pad = self.count_include_pad })
end
function AvgPool2d:extra_repr()
  return string.format('kernel_size=%s, stride=%s, padding=%s', pair_str(self.kernel_size), pair_str(self.stride),
    pair_str(self.padding))
end

local AdaptiveAvgPool2d = Module:extend('AdaptiveAvgPool2d')
L.AdaptiveAvgPool2d = AdaptiveAvgPool2d
function AdaptiveAvgPool2d:init(size) self.output_size = F._pair('AdaptiveAvgPool2d', 'output_size', size) end
function AdaptiveAvgPool2d:forward(x) return F.adaptive_avg_pool2d(x, self.output_size) end
function AdaptiveAvgPool2d:extra_repr() return 'output_size=' .. pair_str(self.output_size) end

-- ---------------------------------------------------------------------------------------------
-- Embedding: weight ~ N(0, 1); the padding_idx row is zero and receives no gradient.

local Embedding = Module:extend('Embedding')
L.Embedding = Embedding

function Embedding:init(n, dim, opts)
  opts = errors.check_opts('nn.Embedding', opts, { 'padding_idx', 'dtype', 'device' }, 3)
  self.num_embeddings, self.embedding_dim = n, dim
  local pad = opts.padding_idx
  if pad ~= nil then pad = _nn.padding_idx('Embedding', n, pad) end
  self.padding_idx = pad
  self.weight = init.parameter({ n, dim }, function(t)
    init.normal_(t, 0, 1)
    if pad then v100.no_grad(function() t:narrow(1, pad + 1, 1):zero_() end) end
  end, factory(opts, self.__name))
end

function Embedding:forward(ids) return F.embedding(ids, self.weight, { padding_idx = self.padding_idx }) end

function Embedding:extra_repr()
  local s = string.format('%d, %d', self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
  return s
end

return L
