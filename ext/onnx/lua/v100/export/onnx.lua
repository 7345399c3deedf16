-- ext/onnx/lua/v100/export/onnx.lua: `v100.onnx`, ONNX export of models for inference stacks (onnxruntime,
-- TensorRT). docs/OPERATIONS.md ("Export (ONNX, TensorRT)") has the user's side.
--
--   local onnx = require 'v100.onnx'                  -- also v100.onnx
--   onnx.export(model, {x}, 'resnet50.onnx')           -- input [batch, 3, 224, 224] -> logits
--   onnx.export(bert_model, {ids, types, mask}, 'bert.onnx', {opset = 17, dtype = 'f16'})
--
-- How a model becomes a graph: a per-module export table, not a trace. Every module class that
-- can be exported has an exporter here (or registered with onnx.register) that writes the ONNX
-- nodes of its forward in terms of symbolic values. Why not a trace of the forward's tensor ops:
-- the forwards read sizes from their inputs and bake them into the ops they call (ResNet's
-- x:reshape{x.shape[1], -1}, BERT's position_embeddings.weight:narrow(1, 1, L) and
-- view{B, L, nh, hd}), so a trace would fix the batch and sequence sizes that must stay dynamic,
-- would record the example's Lua branches as the only path, and would see the autograd-level
-- ops (a gather, a where, a masked_fill) rather than the layer (Embedding, LayerNormalization)
-- that inference engines fuse. An exporter knows its layer's semantics, writes shape-free nodes
-- (Reshape with 0 = "keep this dim", Shape -> Slice for the sequence length) and names weights as
-- the state dict does. The price is that an exporter repeats its forward: so export runs the
-- model's own forward on the example inputs and checks the graph's output shapes against it
-- (dynamic dims by the example's sizes), and the tests compare onnxruntime's numbers with ours
-- (tests/lua/test_onnx.lua, tests/onnx/check_ort.py), which is what catches an exporter that no
-- longer matches its forward.
--
-- Semantics exported are inference's: dropout is the identity and batch norm uses its running
-- statistics (the model is put in eval mode for the export and its modes restored after).
-- The graph is in logical NCHW whatever the memory layout (channels-last models export the same
-- graph); weights are written in their logical order.
--
-- This file drives the export and holds the generic layers; the model families (ResNet, BERT)
-- are in export/onnx_models.lua, the helpers both use in export/common.lua. The bytes are written by ext/onnx/onnx.c through
-- protobuf-c (ext/onnx/l_onnx.c: v100.core._onnx).
local v100 = require 'v100.base'
local core = require 'v100.core'
local errors = require 'v100.errors'
local nn = require 'v100.nn'
local common = require 'v100.export.common'
local onnx_models = require 'v100.export.onnx_models'

local onnx = {}
onnx.DEFAULT_OPSET = 17
onnx.OPSET_MIN, onnx.OPSET_MAX = core._onnx.opset_min, core._onnx.opset_max

-- exporters[class] = fn(ctx, module, ...values) -> ...values; user registrations first.
local user_exporters, exporters = {}, nil
-- roots[class] = function(module, examples) -> {inputs = {{name, dims}...}, outputs = {names}}
local roots = nil

local fail = common.fail

local function class_name(m)
  local mt = getmetatable(m)
  return mt and rawget(mt, '__name') or type(m)
end

-- ---------------------------------------------------------------------------------------------
-- Values and the export context

-- A value is {name = 'layer1.0.conv1/Conv_3_output_0', dtype = 'f32', shape = {'batch', 64, 56, 56}}:
-- dims are integers or the names of dynamic dims ('batch', 'sequence').
local Ctx = {}
Ctx.__index = Ctx

local function desc_shape(shape)
  local parts = {}
  for i, d in ipairs(shape) do parts[i] = tostring(d) end
  return '[' .. table.concat(parts, ', ') .. ']'
end
onnx._desc_shape = desc_shape

-- ctx:op(op_type, inputs, attrs, out) -> value (or values): a node whose inputs are values (or
-- value names; false/nil for an omitted optional input) and whose outputs are described by `out`,
-- {shape =, dtype =}, or a list of them. Names come from the module scope and a counter.
function Ctx:op(op_type, inputs, attrs, out)
  self.count = self.count + 1
  local base = (self.scope ~= '' and (self.scope .. '/') or '') .. op_type .. '_' .. self.count
  local names = {}
  local n = 0
  for i = 1, inputs.n or #inputs do
    local v = inputs[i]
    n = i
    names[i] = (v == nil or v == false) and '' or (type(v) == 'table' and v.name or v)
  end
  local multi = out[1] ~= nil
  local outs = multi and out or { out }
  local onames, values = {}, {}
  for i, o in ipairs(outs) do
    onames[i] = base .. '_output_' .. (i - 1)
    values[i] = { name = onames[i], dtype = o.dtype, shape = o.shape }
  end
  self.w:node(op_type, names, onames, attrs, base)
  self.nodes = self.nodes + 1
  if multi then return table.unpack(values) end
  return values[1]
end

-- Same shape and dtype as v (the output of an elementwise op on v).
local like = common.like

local copy = common.copy

-- The float dtype of the export for a tensor's dtype (integers keep theirs).
function Ctx:dtype_of(t)
  return core.dtype_is_float(t.dtype) and self.float or t.dtype
end

-- An initializer for tensor t (a parameter or buffer), named as in the state dict when it is
-- one. The same tensor gives the same initializer (tied weights stay tied). opts.transpose: the
-- 2-D transpose instead (MatMul's right operand), cached separately.
function Ctx:param(t, opts)
  local transpose = opts and opts.transpose
  local cache = transpose and self.params_t or self.params
  local v = cache[t]
  if v then return v end
  local base = self.names[t]
  if not base then
    self.unnamed = self.unnamed + 1
    base = (self.scope ~= '' and (self.scope .. '/') or '') .. 'const_' .. self.unnamed
  end
  local src, shape = t, t.shape
  if transpose then
    src = t:t():contiguous()
    base = base .. '.T'
    shape = src.shape
  end
  local dt = self:dtype_of(t)
  self.w:initializer(base, src, dt)
  self.inits = self.inits + 1
  v = { name = base, dtype = dt, shape = shape }
  cache[t] = v
  return v
end

-- A constant from a Lua number or list: dtype 'i64' (shapes, axes, indices) or 'float' (the
-- export's float dtype); `shape` {} for a scalar, default a vector. Equal constants are shared.
function Ctx:const(values, dtype, shape)
  local dt = dtype == 'float' and self.float or dtype
  local list = type(values) == 'table' and values or { values }
  local key = dt .. '|' .. table.concat(list, ',') .. '|' .. (shape and desc_shape(shape) or '')
  local c = self.consts[key]
  if c then return c end
  local t
  if shape and #shape == 0 then
    t = v100.tensor(list[1], { dtype = dt == self.float and 'f64' or dt })
  else
    t = v100.tensor(list, { dtype = dt == self.float and 'f64' or dt })
    if shape then t = t:reshape(shape) end
  end
  self.nconst = self.nconst + 1
  local name = 'const_' .. self.nconst
  self.w:initializer(name, t, dt)
  self.inits = self.inits + 1
  c = { name = name, dtype = dt, shape = t.shape }
  self.consts[key] = c
  return c
end

-- The exporter of module m: its class's, or an ancestor's as long as no class on the way
-- defines its own forward (a subclass that changes forward needs its own exporter).
local function exporter_of(m)
  local cls = getmetatable(m)
  while cls do
    local f = user_exporters[cls] or exporters[cls]
    if f then return f end
    if rawget(cls, 'forward') ~= nil then return nil end
    cls = rawget(cls, 'super')
  end
  return nil
end

local function supported_list()
  local names = {}
  for cls in pairs(exporters) do names[#names + 1] = rawget(cls, '__name') end
  for cls in pairs(user_exporters) do names[#names + 1] = rawget(cls, '__name') end
  table.sort(names)
  return table.concat(names, ', ')
end

-- ctx:call(module, path, ...values) -> ...values: a child's nodes, under its path.
function Ctx:call(m, path, ...)
  local f = exporter_of(m)
  local full = self.scope == '' and path or (self.scope .. '.' .. path)
  if not f then
    fail("module '%s' (%s) has no ONNX exporter; exported: %s. A custom module needs " ..
      'onnx.register(Class, function(ctx, module, ...) ... end) (docs/OPERATIONS.md)', full, class_name(m),
      supported_list())
  end
  local saved = self.scope
  self.scope = full
  local res = table.pack(f(self, m, ...))
  self.scope = saved
  return table.unpack(res, 1, res.n)
end

-- Runs fn(...) with the scope extended by `path` (names of nodes a composite exporter writes
-- itself, e.g. 'attention.self').
function Ctx:within(path, fn, ...)
  local saved = self.scope
  self.scope = self.scope == '' and path or (self.scope .. '.' .. path)
  local res = table.pack(fn(...))
  self.scope = saved
  return table.unpack(res, 1, res.n)
end

-- ---------------------------------------------------------------------------------------------
-- Building blocks shared by the exporters

-- y = x W^T + b (F.linear): Gemm for 2-D x, else MatMul with the transposed weight (+ Add).
function Ctx:linear(x, weight, bias)
  local out = weight.shape[1]
  local shape = copy(x.shape)
  shape[#shape] = out
  if #x.shape == 2 then
    local ins = { x, self:param(weight), bias and self:param(bias) or nil, n = bias and 3 or 2 }
    return self:op('Gemm', ins, { transB = 1 }, like(x, shape))
  end
  local y = self:op('MatMul', { x, self:param(weight, { transpose = true }) }, nil, like(x, shape))
  if bias then y = self:op('Add', { y, self:param(bias) }, nil, like(y)) end
  return y
end

-- LayerNormalization over the last #normalized dims.
function Ctx:layer_norm(x, weight, bias, eps, normalized)
  local n = #normalized
  local w = weight and self:param(weight) or self:const(self:ones(normalized), 'float', normalized)
  local b = bias and self:param(bias) or self:const(self:zeros(normalized), 'float', normalized)
  return self:op('LayerNormalization', { x, w, b }, { axis = -n, epsilon = eps + 0.0 }, like(x))
end

function Ctx:ones(shape)
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local t = {}
  for i = 1, n do t[i] = 1.0 end
  return t
end

function Ctx:zeros(shape)
  local t = self:ones(shape)
  for i = 1, #t do t[i] = 0.0 end
  return t
end

-- GELU: exact (erf) or the tanh approximation, as F.gelu. Opset 20's Gelu op is not used, so
-- that opset 17 engines (TensorRT 8.6) read the graph; they fuse the pattern themselves.
function Ctx:gelu(x, approximate)
  if approximate == 'tanh' then
    local x3 = self:op('Mul', { self:op('Mul', { x, x }, nil, like(x)), x }, nil, like(x))
    local inner = self:op('Add', { x, self:op('Mul', { x3, self:const(0.044715, 'float', {}) }, nil, like(x)) }, nil,
      like(x))
    local t = self:op('Tanh', { self:op('Mul', { inner, self:const(math.sqrt(2 / math.pi), 'float', {}) }, nil,
      like(x)) }, nil, like(x))
    local one = self:op('Add', { t, self:const(1.0, 'float', {}) }, nil, like(x))
    return self:op('Mul', { self:op('Mul', { x, self:const(0.5, 'float', {}) }, nil, like(x)), one }, nil, like(x))
  end
  local e = self:op('Erf', { self:op('Mul', { x, self:const(1 / math.sqrt(2), 'float', {}) }, nil, like(x)) }, nil,
    like(x))
  local one = self:op('Add', { e, self:const(1.0, 'float', {}) }, nil, like(x))
  return self:op('Mul', { self:op('Mul', { x, self:const(0.5, 'float', {}) }, nil, like(x)), one }, nil, like(x))
end

-- A 1-based dim (negative from the end) as ONNX's 0-based axis (negative kept).
local function axis(d) return d > 0 and d - 1 or d end
onnx._axis = axis

-- ---------------------------------------------------------------------------------------------
-- The generic layers

local function conv_out(n, k, s, p, d, ceil)
  if type(n) ~= 'number' then return n end
  local span = n + 2 * p - d * (k - 1) - 1
  local q = ceil and -((-span) // s) or span // s
  if ceil and q * s >= n + p then q = q - 1 end -- PyTorch: the last window starts inside
  return q + 1
end

-- ceil_mode: ONNX's rule for the last window differs from PyTorch's at the border, so only the
-- cases where the two modes give the same size are exported (then with ceil_mode 0).
local function pool_sizes(ctx, m, x, kind)
  local s = x.shape
  local k, st, p = m.kernel_size, m.stride, m.padding
  local d = m.dilation or { 1, 1 }
  local h = conv_out(s[3], k[1], st[1], p[1], d[1], false)
  local w = conv_out(s[4], k[2], st[2], p[2], d[2], false)
  if m.ceil_mode then
    local hc = conv_out(s[3], k[1], st[1], p[1], d[1], true)
    local wc = conv_out(s[4], k[2], st[2], p[2], d[2], true)
    if hc ~= h or wc ~= w then
      fail("module '%s' (%s): ceil_mode = true changes the output size here (%sx%s instead of %sx%s), and ONNX's " ..
        'ceil_mode differs from PyTorch\'s at the border: not exported', ctx.scope, kind, hc, wc, h, w)
    end
  end
  return h, w
end

local function register_generic(nn)
  local E = exporters

  E[nn.Sequential] = function(ctx, m, x, ...)
    local children = m:named_children()
    if #children == 0 then return x, ... end
    x = ctx:call(children[1][2], children[1][1], x, ...)
    for i = 2, #children do x = ctx:call(children[i][2], children[i][1], x) end
    return x
  end
  E[nn.Checkpoint] = function(ctx, m, ...) return ctx:call(m.module, 'module', ...) end
  E[nn.Identity] = function(_, _, x) return x end
  E[nn.Dropout] = function(_, _, x) return x end -- inference: the identity
  E[nn.ReLU] = function(ctx, _, x) return ctx:op('Relu', { x }, nil, like(x)) end
  E[nn.Sigmoid] = function(ctx, _, x) return ctx:op('Sigmoid', { x }, nil, like(x)) end
  E[nn.Tanh] = function(ctx, _, x) return ctx:op('Tanh', { x }, nil, like(x)) end
  E[nn.GELU] = function(ctx, m, x) return ctx:gelu(x, m.approximate) end
  E[nn.Softmax] = function(ctx, m, x) return ctx:op('Softmax', { x }, { axis = axis(m.dim) }, like(x)) end
  E[nn.LogSoftmax] = function(ctx, m, x) return ctx:op('LogSoftmax', { x }, { axis = axis(m.dim) }, like(x)) end

  E[nn.Linear] = function(ctx, m, x) return ctx:linear(x, m.weight, m.bias) end

  E[nn.Conv2d] = function(ctx, m, x)
    local s = x.shape
    local k, st, p, d = m.kernel_size, m.stride, m.padding, m.dilation
    local shape = { s[1], m.out_channels, conv_out(s[3], k[1], st[1], p[1], d[1]), conv_out(s[4], k[2], st[2], p[2], d[2]) }
    local ins = { x, ctx:param(m.weight), m.bias and ctx:param(m.bias) or nil, n = m.bias and 3 or 2 }
    return ctx:op('Conv', ins, { kernel_shape = { k[1], k[2] }, strides = { st[1], st[2] },
      pads = { p[1], p[2], p[1], p[2] }, dilations = { d[1], d[2] }, group = m.groups }, like(x, shape))
  end

  local function batch_norm(ctx, m, x)
    if m.running_mean == nil then
      fail("module '%s' (%s) keeps no running statistics (track_running_stats = false): its eval forward " ..
        'normalises with batch statistics, which ONNX BatchNormalization does not: not exported', ctx.scope, class_name(m))
    end
    local c = { m.num_features }
    local w = m.weight and ctx:param(m.weight) or ctx:const(ctx:ones(c), 'float', c)
    local b = m.bias and ctx:param(m.bias) or ctx:const(ctx:zeros(c), 'float', c)
    return ctx:op('BatchNormalization', { x, w, b, ctx:param(m.running_mean), ctx:param(m.running_var) },
      { epsilon = m.eps + 0.0, momentum = 0.9 }, like(x))
  end
  E[nn.BatchNorm2d] = batch_norm
  E[nn.BatchNorm1d] = batch_norm

  E[nn.LayerNorm] = function(ctx, m, x) return ctx:layer_norm(x, m.weight, m.bias, m.eps, m.normalized_shape) end

  E[nn.MaxPool2d] = function(ctx, m, x)
    local h, w = pool_sizes(ctx, m, x, 'MaxPool2d')
    local k, st, p, d = m.kernel_size, m.stride, m.padding, m.dilation
    return ctx:op('MaxPool', { x }, { kernel_shape = { k[1], k[2] }, strides = { st[1], st[2] },
      pads = { p[1], p[2], p[1], p[2] }, dilations = { d[1], d[2] } }, like(x, { x.shape[1], x.shape[2], h, w }))
  end

  E[nn.AvgPool2d] = function(ctx, m, x)
    local h, w = pool_sizes(ctx, m, x, 'AvgPool2d')
    local k, st, p = m.kernel_size, m.stride, m.padding
    return ctx:op('AveragePool', { x }, { kernel_shape = { k[1], k[2] }, strides = { st[1], st[2] },
      pads = { p[1], p[2], p[1], p[2] }, count_include_pad = m.count_include_pad and 1 or 0 },
      like(x, { x.shape[1], x.shape[2], h, w }))
  end

  E[nn.AdaptiveAvgPool2d] = function(ctx, m, x)
    local oh, ow = m.output_size[1], m.output_size[2]
    local H, W = x.shape[3], x.shape[4]
    if oh == 1 and ow == 1 then
      return ctx:op('GlobalAveragePool', { x }, nil, like(x, { x.shape[1], x.shape[2], 1, 1 }))
    end
    if type(H) ~= 'number' or type(W) ~= 'number' or H % oh ~= 0 or W % ow ~= 0 then
      fail("module '%s' (AdaptiveAvgPool2d): output %dx%d from input %sx%s is not a plain average pool " ..
        '(the input size must be a multiple of the output size): not exported', ctx.scope, oh, ow, H, W)
    end
    local kh, kw = H // oh, W // ow
    return ctx:op('AveragePool', { x }, { kernel_shape = { kh, kw }, strides = { kh, kw } },
      like(x, { x.shape[1], x.shape[2], oh, ow }))
  end

  E[nn.Embedding] = function(ctx, m, ids)
    local shape = copy(ids.shape)
    shape[#shape + 1] = m.embedding_dim
    local out = ctx:op('Gather', { ctx:param(m.weight), ids }, { axis = 0 }, { dtype = ctx.float, shape = shape })
    if m.padding_idx == nil then return out end
    -- F.embedding: positions holding padding_idx give zeros whatever the row holds
    local pad = ctx:op('Equal', { ids, ctx:const(m.padding_idx, ids.dtype, {}) }, nil, { dtype = 'bool', shape = ids.shape })
    pad = ctx:op('Unsqueeze', { pad, ctx:const({ -1 }, 'i64') }, nil, { dtype = 'bool', shape = shape })
    return ctx:op('Where', { pad, ctx:const(0.0, 'float', {}), out }, nil, like(out))
  end

  E[nn.Flatten] = function(ctx, m, x)
    local r = #x.shape
    local a = m.start_dim > 0 and m.start_dim or r + m.start_dim + 1
    local b = m.end_dim > 0 and m.end_dim or r + m.end_dim + 1
    local shape, n = {}, 1
    for i = 1, a - 1 do shape[#shape + 1] = x.shape[i] end
    for i = a, b do n = type(n) == 'number' and type(x.shape[i]) == 'number' and n * x.shape[i] or '?' end
    shape[#shape + 1] = n
    for i = b + 1, r do shape[#shape + 1] = x.shape[i] end
    if b == r and a == 2 then return ctx:op('Flatten', { x }, { axis = 1 }, like(x, shape)) end
    -- Reshape's 0 keeps a leading dim as it is (dynamic ones included); later dims must be fixed
    local spec = {}
    for i = 1, a - 1 do spec[i] = 0 end
    spec[#spec + 1] = -1
    for i = b + 1, r do
      if type(x.shape[i]) ~= 'number' then
        fail("module '%s' (Flatten): dim %d after the flattened ones is dynamic: not exported", ctx.scope, i)
      end
      spec[#spec + 1] = x.shape[i]
    end
    return ctx:op('Reshape', { x, ctx:const(spec, 'i64') }, nil, like(x, shape))
  end
end

-- ---------------------------------------------------------------------------------------------
-- Registration and the export

local function load_tables()
  if exporters then return end
  exporters, roots = {}, {}
  register_generic(nn)
  onnx_models.register(exporters, roots)
end

-- onnx.register(Class, fn[, root]): exports instances of Class (a module class from
-- Module:extend) with fn(ctx, module, ...values) -> ...values. `root`, optional, describes the
-- graph when the class is the exported model itself: function(module, examples) ->
-- {inputs = {{name, dims}, ...}, outputs = {name, ...}} (dims: 'batch', 'sequence' or sizes).
function onnx.register(cls, fn, root)
  if type(cls) ~= 'table' or rawget(cls, '__is_module_class') ~= true then
    error('onnx.register: expected a module class (Module:extend), got ' .. type(cls), 2)
  end
  if type(fn) ~= 'function' then error('onnx.register: expected an exporter function, got ' .. type(fn), 2) end
  user_exporters[cls] = fn
  if root ~= nil then
    load_tables()
    roots[cls] = root
  end
end

-- The root description of model: its class's (or an ancestor's), else the generic one.
local function root_of(model, examples, n)
  local cls = getmetatable(model)
  while cls do
    if roots[cls] then return roots[cls](model, examples, n) end
    if rawget(cls, 'forward') ~= nil and not (user_exporters[cls] or exporters[cls]) then break end
    cls = rawget(cls, 'super')
  end
  local inputs = {}
  for i = 1, n do
    inputs[i] = { n == 1 and 'input' or ('input_' .. i), nil }
  end
  return { inputs = inputs, outputs = nil }
end

local function set_modes(model, mode)
  local saved = {}
  for _, e in ipairs(model:named_modules()) do saved[e[2]] = rawget(e[2], 'training') end
  model:train(mode)
  return saved
end

local function restore_modes(saved)
  for m, t in pairs(saved) do rawset(m, 'training', t) end
end

-- The example inputs as a list with n (holes allowed: an absent optional input).
local function examples_of(v100, example_inputs)
  if v100.is_tensor(example_inputs) then return { example_inputs }, 1 end
  if type(example_inputs) ~= 'table' then
    fail('example_inputs must be a tensor or a list of tensors, got %s', type(example_inputs))
  end
  local n = example_inputs.n or 0
  for k in pairs(example_inputs) do
    if math.type(k) == 'integer' and k > n then n = k end
  end
  if n == 0 then fail('example_inputs is empty') end
  local out = {}
  for i = 1, n do
    local x = example_inputs[i]
    if x ~= nil and x ~= false then
      if not v100.is_tensor(x) then fail('example input %d must be a tensor, got %s', i, type(x)) end
      out[i] = x
    end
  end
  return out, n
end

local function check_path(path)
  if type(path) ~= 'string' or path == '' then fail('path must be a non-empty string, got %s', type(path)) end
  local dir = path:match('^(.*)/[^/]*$') or '.'
  if dir == '' then dir = '/' end
  local probe = io.open(dir .. '/.', 'r')
  if not probe then fail("cannot write '%s': the folder '%s' does not exist", path, dir) end
  probe:close()
end

-- onnx.export(model, example_inputs, path[, opts]) -> info
--   example_inputs: a tensor or a list of tensors (ResNet: {x}; BERT: {input_ids,
--     token_type_ids, attention_mask[, masked_positions]}, nil/false for an absent one); they
--     give the input dtypes and the fixed dims, and the model's forward runs once on them to
--     check the graph's output shapes.
--   opts.opset (17..21, default 17); opts.dtype ('f32' default, or 'f16': float weights, inputs
--     and outputs in half); opts.input_names, opts.output_names (lists replacing the defaults);
--     opts.doc (the model's doc string).
--   Returns {path, opset, dtype, inputs = {{name, dtype, dims}...}, outputs = {...}, nodes,
--   initializers}.
function onnx.export(model, example_inputs, path, opts)
  load_tables()
  opts = opts or {}
  if type(opts) ~= 'table' then fail('opts must be a table, got %s', type(opts)) end
  errors.check_opts('onnx.export', opts, { 'opset', 'dtype', 'input_names', 'output_names', 'doc' }, 0)
  if type(model) == 'table' and class_name(model) == 'v100.dist.DataParallel' then model = model.module end
  if not nn.is_module(model) then fail('model must be an nn.Module, got %s', type(model)) end
  local examples, n = examples_of(v100, example_inputs)
  check_path(path)
  local opset = opts.opset or onnx.DEFAULT_OPSET
  if math.type(opset) ~= 'integer' or opset < onnx.OPSET_MIN or opset > onnx.OPSET_MAX then
    fail('opset must be an integer from %d to %d, got %s', onnx.OPSET_MIN, onnx.OPSET_MAX, tostring(opset))
  end
  local float = opts.dtype or 'f32'
  if float == 'fp16' or float == 'half' or float == 'float16' then float = 'f16' end
  if float == 'float32' or float == 'float' or float == 'fp32' then float = 'f32' end
  if float ~= 'f32' and float ~= 'f16' then fail("dtype must be 'f32' or 'f16', got %s", tostring(opts.dtype)) end
  if not exporter_of(model) then
    fail('a %s has no ONNX exporter; exported: %s (or onnx.register a custom module)', class_name(model),
      supported_list())
  end

  local saved = set_modes(model, false)
  local w
  local ok, res = pcall(function()
    -- the model's own answer on the examples: the output count and shapes the graph must have
    local ref = table.pack(v100.no_grad(function() return model(table.unpack(examples, 1, n)) end))
    local root = root_of(model, examples, n)
    w = core._onnx.new(class_name(model), opset, core.version)
    local names = {}
    for _, e in ipairs(model:named_parameters()) do names[e[2]] = names[e[2]] or e[1] end
    for _, e in ipairs(model:named_buffers()) do names[e[2]] = names[e[2]] or e[1] end
    local ctx = setmetatable({ w = w, scope = '', count = 0, nodes = 0, inits = 0, unnamed = 0, nconst = 0,
      float = float, names = names, params = {}, params_t = {}, consts = {}, opset = opset }, Ctx)
    -- inputs: dim 1 is the batch, named dims as the root says, the rest fixed by the examples
    local sizes, values, info_in = {}, {}, {}
    for i = 1, n do
      local x = examples[i]
      if x then
        local spec = root.inputs[i] or { 'input_' .. i }
        local name = opts.input_names and opts.input_names[i] or spec[1]
        local dims = {}
        for d = 1, x.ndim do
          local sym = spec[2] and spec[2][d] or (d == 1 and 'batch' or nil)
          dims[d] = sym or x.shape[d]
          if sym then
            if sizes[sym] and sizes[sym] ~= x.shape[d] then
              fail("example inputs disagree on dim '%s' (%d and %d)", sym, sizes[sym], x.shape[d])
            end
            sizes[sym] = x.shape[d]
          end
        end
        local dt = ctx:dtype_of(x)
        w:input(name, dt, dims)
        values[i] = { name = name, dtype = dt, shape = dims }
        info_in[#info_in + 1] = { name = name, dtype = dt, dims = dims }
      end
    end
    local outs = table.pack(ctx:call(model, '', table.unpack(values, 1, n)))
    -- the graph's outputs against the forward's
    local got = {}
    for i = 1, outs.n do if outs[i] then got[#got + 1] = outs[i] end end
    local want = {}
    for i = 1, ref.n do if ref[i] ~= nil then want[#want + 1] = ref[i] end end
    if #got ~= #want then
      fail('internal: the exporter of %s gives %d outputs, the forward %d', class_name(model), #got, #want)
    end
    local info_out = {}
    for i, v in ipairs(got) do
      local r = want[i]
      local same = v100.is_tensor(r) and r.ndim == #v.shape
      for d = 1, same and r.ndim or 0 do
        local s = v.shape[d]
        if (type(s) == 'number' and s ~= r.shape[d]) or (type(s) == 'string' and sizes[s] ~= r.shape[d]) then
          same = false
        end
      end
      if not same then
        fail('internal: output %d of the exported %s has shape %s, the forward gives %s', i, class_name(model),
          desc_shape(v.shape), v100.is_tensor(r) and desc_shape(r.shape) or type(r))
      end
      local name = opts.output_names and opts.output_names[i] or (root.outputs and root.outputs[i]) or
        (#got == 1 and 'output' or ('output_' .. i))
      -- the graph output gets its public name through an Identity (engines drop it)
      w:node('Identity', { v.name }, { name }, nil, name .. '/Identity')
      ctx.nodes = ctx.nodes + 1
      w:output(name, v.dtype, v.shape)
      info_out[i] = { name = name, dtype = v.dtype, dims = v.shape }
    end
    w:metadata('v100lua.model', class_name(model))
    w:metadata('v100lua.dtype', float)
    if opts.doc then w:doc(tostring(opts.doc)) end
    w:save(path)
    return { path = path, opset = opset, dtype = float, inputs = info_in, outputs = info_out, nodes = ctx.nodes,
      initializers = ctx.inits }
  end)
  restore_modes(saved)
  if w then w:close() end
  if not ok then
    local msg = tostring(res)
    if not msg:match('^onnx') then msg = 'onnx.export: ' .. msg end
    error(msg, 0)
  end
  return res
end

return onnx
