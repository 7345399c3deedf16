-- tests/lua/test_nn_module.lua: nn.Module mechanics: registration by assignment (order, dotted
-- names, lists, shared parameters), train/eval, state_dict round trips and strict errors,
-- to(dtype), printing, the module-path prefix of errors, and gradients of a Lua-defined layer.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'

v100.manual_seed(T.seed % 1000003)

-- A nested model: own parameter, a Sequential, a plain list of blocks, a ModuleDict, a buffer.
local Block = nn.Module:extend('Block')
function Block:init(n)
  self.fc1 = nn.Linear(n, n)
  self.act = nn.ReLU()
  self.fc2 = nn.Linear(n, n, { bias = false })
end
function Block:forward(x) return self.fc2(self.act(self.fc1(x))) + x end

local Net = nn.Module:extend('Net')
function Net:init(n)
  self.scale = v100.ones({ n }):requires_grad_(true)
  self.stem = nn.Sequential(nn.Linear(3, n), nn.Tanh())
  self.blocks = { Block(n), Block(n) }
  self.heads = nn.ModuleDict{ cls = nn.Linear(n, 2), aux = nn.Linear(n, 1) }
  self:register_buffer('steps', v100.zeros({}, { dtype = 'i64' }))
  self.note = 'plain attribute'
end
function Net:forward(x)
  x = self.stem(x) * self.scale
  for _, b in ipairs(self.blocks) do x = b(x) end
  return self.heads.cls(x)
end

local function names(list)
  local out = {}
  for i, e in ipairs(list) do out[i] = e[1] end
  return out
end

T.test('registration order and dotted names (Sequential, plain lists, ModuleDict)', function()
  local net = Net(4)
  T.eq(names(net:named_parameters()), {
    'scale', 'stem.0.weight', 'stem.0.bias',
    'blocks.0.fc1.weight', 'blocks.0.fc1.bias', 'blocks.0.fc2.weight',
    'blocks.1.fc1.weight', 'blocks.1.fc1.bias', 'blocks.1.fc2.weight',
    'heads.aux.weight', 'heads.aux.bias', 'heads.cls.weight', 'heads.cls.bias',
  })
  T.eq(names(net:named_buffers()), { 'steps' })
  T.eq(#net:parameters(), 13)
  T.eq(names(net:named_modules()), { '', 'stem', 'stem.0', 'stem.1', 'blocks', 'blocks.0', 'blocks.0.fc1',
    'blocks.0.act', 'blocks.0.fc2', 'blocks.1', 'blocks.1.fc1', 'blocks.1.act', 'blocks.1.fc2', 'heads',
    'heads.aux', 'heads.cls' })
  T.eq(#net:children(), 3)
  T.eq(#net.blocks, 2)
  T.ok(net.blocks[2] == net:named_modules()[10][2], 'blocks[2] is child 1')
  T.eq(net.note, 'plain attribute')
  T.eq(net:num_parameters(), 4 + 3 * 4 + 4 + 2 * (4 * 4 + 4 + 4 * 4) + 2 * 4 + 2 + 4 + 1)
  -- reassigning a registered name keeps its place; assigning nil removes it
  local w = v100.randn({ 4, 3 }):requires_grad_(true)
  net.stem[1].weight = w
  T.ok(net:named_parameters()[2][2] == w, 'replaced in place in the order')
  net.heads.aux = nil
  T.eq(#net:parameters(), 11)
  -- a tensor that requires no grad is an attribute, not a parameter
  net.tmp = v100.randn{ 2 }
  T.eq(#net:parameters(), 11)
  T.eq(#net:buffers(), 1)
end)

T.test('shared parameters and modules are listed once', function()
  local M = nn.Module:extend('Tied')
  function M:init()
    self.emb = nn.Embedding(5, 3)
    self.head = nn.Linear(3, 5, { bias = false })
    self.head.weight = self.emb.weight
    self.again = self.emb
  end
  local m = M()
  T.eq(names(m:named_parameters()), { 'emb.weight' })
  T.eq(#m:parameters(), 1)
  local sd = m:state_dict()
  T.ok(sd['emb.weight'] and sd['head.weight'], 'state_dict holds every name')
  -- gradients from both uses accumulate in the one tensor
  local ids = v100.tensor{ 1, 4 }
  m.head(m.emb(ids)):sum():backward()
  T.ok(m.emb.weight.grad ~= nil)
end)

T.test('train / eval propagate to every submodule', function()
  local net = Net(3)
  for _, e in ipairs(net:named_modules()) do T.eq(e[2].training, true, e[1]) end
  T.ok(net:eval() == net)
  for _, e in ipairs(net:named_modules()) do T.eq(e[2].training, false, e[1]) end
  net.blocks[1]:train()
  T.eq(net.blocks[1].fc1.training, true)
  T.eq(net.stem.training, false)
  net:train()
  for _, e in ipairs(net:named_modules()) do T.eq(e[2].training, true, e[1]) end
end)

T.test('state_dict / load_state_dict round trip into a fresh model', function()
  local a, b = Net(4), Net(4)
  a.steps:fill_(7)
  local x = T.make{ 2, 3 }
  local ya = a(x)
  T.ok((b(x) - ya):abs():max():item() > 0, 'fresh models differ')
  local res = b:load_state_dict(a:state_dict())
  T.eq(res.missing_keys, {})
  T.eq(res.unexpected_keys, {})
  T.allclose(b(x), ya, 0, 0)
  T.eq(b.steps:item(), 7)
  -- the loaded tensors are copies: changing a does not change b
  v100.no_grad(function() a.scale:fill_(3) end)
  T.ok(b.scale:max():item() < 3)
  -- state_dict tensors share storage with the model
  local sd = b:state_dict()
  T.eq(sd['blocks.1.fc2.weight']:data_ptr(), b.blocks[2].fc2.weight:data_ptr())
  -- a non-persistent buffer is not saved
  b:register_buffer('cache', v100.zeros{ 2 }, false)
  T.eq(b:state_dict().cache, nil)
end)

T.test('load_state_dict: strict errors list missing, unexpected and mis-shaped names', function()
  local net = Net(4)
  local sd = net:state_dict()
  sd['stem.0.bias'] = nil
  sd['blocks.0.fc1.weight'] = v100.randn{ 5, 4 }
  sd['extra.weight'] = v100.randn{ 1 }
  local msg = T.raises(function() net:load_state_dict(sd) end, {
    'missing keys: stem.0.bias', 'unexpected keys: extra.weight',
    'mis-shaped keys: blocks.0.fc1.weight (checkpoint 5x4, model 4x4)' })
  T.ok(msg:find('Net', 1, true), 'names the model class')
  -- not strict: missing and unexpected are reported, mis-shaped still raise
  T.raises(function() net:load_state_dict(sd, { strict = false }) end, 'mis-shaped keys')
  sd['blocks.0.fc1.weight'] = nil
  local before = net.stem[1].bias:clone()
  local res = net:load_state_dict(sd, { strict = false })
  T.eq(res.missing_keys, { 'blocks.0.fc1.weight', 'stem.0.bias' })
  T.eq(res.unexpected_keys, { 'extra.weight' })
  T.allclose(net.stem[1].bias, before, 0, 0)
end)

T.test('to(dtype): parameters and float buffers convert, integer buffers and BN stats keep', function()
  local M = nn.Module:extend('ConvNet')
  function M:init()
    self.fc = nn.Linear(3, 2)
    self.bn = nn.BatchNorm1d(2)
  end
  function M:forward(x) return self.bn(self.fc(x)) end
  local m = M()
  local x = T.make{ 4, 3 }
  local y32 = m(x)
  local w_before = m.fc.weight
  T.ok(m:to('f64') == m, 'to returns the module')
  T.eq(m.fc.weight.dtype, 'f64')
  T.ok(m.fc.weight.requires_grad and m.fc.weight.is_leaf, 'still a leaf parameter')
  T.eq(m.bn.running_var.dtype, 'f64')
  T.eq(m.bn.num_batches_tracked.dtype, 'i64')
  if v100.Tensor.set_ then T.ok(m.fc.weight == w_before, 'the same tensor object (optimizers keep it)') end
  T.allclose(m(x:double()), y32, 1e-5, 1e-6)
  m:to{ dtype = 'bf16' }
  T.eq(m.fc.weight.dtype, 'bf16')
  T.eq(m.bn.weight.dtype, 'f32', 'BN affine parameters stay f32 for half dtypes')
  T.eq(m.bn.running_mean.dtype, 'f32', 'BN running stats stay f32')
  T.eq(m.bn.num_batches_tracked.dtype, 'i64')
  m:float()
  T.eq(m.fc.weight.dtype, 'f32')
  T.eq(#m:parameters(), 4)
  T.raises(function() m:to('i32') end, 'floating')
end)

T.test('tostring: an indented tree as PyTorch prints it', function()
  local net = nn.Sequential(nn.Conv2d(1, 8, 3, { padding = 1 }), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), nn.Dropout(0.5), nn.Linear(8 * 14 * 14, 10))
  local Wrap = nn.Module:extend('Wrap')
  function Wrap:init() self.body = net self.parts = { nn.Identity() } end
  T.eq(tostring(Wrap()), table.concat({
    'Wrap(',
    '  (body): Sequential(',
    '    (0): Conv2d(1, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1))',
    '    (1): BatchNorm2d(8, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true)',
    '    (2): ReLU()',
    '    (3): MaxPool2d(kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), dilation=(1, 1), ceil_mode=false)',
    '    (4): Flatten(start_dim=2, end_dim=-1)',
    '    (5): Dropout(p=0.5)',
    '    (6): Linear(in_features=1568, out_features=10, bias=true)',
    '  )',
    '  (parts): ModuleList(',
    '    (0): Identity()',
    '  )',
    ')' }, '\n'))
end)

T.test('errors in forward are prefixed with the module path from the root, once', function()
  local net = Net(4)
  local msg = T.raises(function() net(v100.randn{ 2, 5 }) end,
    'stem.0: linear: input has 5 features but weight expects 3')
  T.ok(not msg:find('stem.0: stem.0', 1, true))
  local msg2 = T.raises(function() net.blocks[2].fc2.weight = v100.randn({ 4, 3 }):requires_grad_(true) net((T.make{ 2, 3 })) end,
    'blocks.1.fc2: linear: input has 4 features but weight expects 3')
  T.eq(select(2, msg2:gsub('blocks', '')), 1, 'the path appears once: ' .. msg2)
  -- a submodule called directly is its own root: no prefix
  T.raises(function() net.stem(v100.randn{ 2, 5 }) end, '0: linear:')
  local ok, err = pcall(net.stem[1], v100.randn{ 2, 5 })
  T.ok(not ok and err:sub(1, 7) == 'linear:', err)
  -- a conv deep in a ResNet-like tree: the path through Sequential indices
  local CB = nn.Module:extend('CB')
  function CB:init(c) self.conv1 = nn.Conv2d(c, c, 3, { padding = 1 }) end
  function CB:forward(x) return self.conv1(x) end
  local R = nn.Module:extend('R')
  function R:init() self.layer3 = nn.Sequential(CB(4), CB(4), CB(3)) end
  function R:forward(x) return self.layer3(x) end
  local m3 = T.raises(function() R()((T.make{ 1, 4, 5, 5 })) end, 'layer3.2.conv1: conv2d: input has 4 channels but weight expects 3')
  T.eq(m3:find('layer3.2.conv1: conv2d:', 1, true), 1, m3)
  -- errors from the root's own forward are unchanged
  local Bad = nn.Module:extend('Bad')
  function Bad:forward() error('my own failure', 0) end
  T.raises(function() Bad()() end, 'my own failure')
end)

T.test('a Lua-defined layer gets gradients through autograd', function()
  local Scale = nn.Module:extend('Scale')
  function Scale:init(n) self.g = v100.randn({ n }):requires_grad_(true) end
  function Scale:forward(x) return (x * self.g):tanh() end
  local m = nn.Sequential(Scale(3), nn.Linear(3, 1))
  local x = T.make{ 4, 3 }
  m(x):sum():backward()
  local g = m[1].g.grad
  T.ok(g ~= nil, 'gradient reached the Lua layer parameter')
  -- compare with the analytic gradient: d/dg sum_n w . tanh(x_n * g) = sum_n w_c x_nc (1 - tanh^2)
  local X, G, W = T.nd(x), T.nd(m[1].g:detach()), T.nd(m[2].weight:detach())
  local ref = { 0, 0, 0 }
  for n = 0, 3 do
    for c = 1, 3 do
      local u = X.data[n * 3 + c] * G.data[c]
      local th = (math.exp(2 * u) - 1) / (math.exp(2 * u) + 1)
      ref[c] = ref[c] + W.data[c] * X.data[n * 3 + c] * (1 - th * th)
    end
  end
  T.allclose(g, ref, 1e-5, 1e-6)
  m:zero_grad()
  T.eq(m[1].g.grad, nil, 'zero_grad sets grads to nil')
  -- apply visits children first, then the module itself
  local seen = {}
  m:apply(function(mm) seen[#seen + 1] = getmetatable(mm).__name end)
  T.eq(seen, { 'Scale', 'Linear', 'Sequential' })
end)

T.test('containers: Sequential/ModuleList indexing, append, errors', function()
  local s = nn.Sequential()
  s:append(nn.Linear(2, 3))
  s[#s + 1] = nn.ReLU()
  table.insert(s, nn.Linear(3, 1))
  T.eq(#s, 3)
  T.eq(names(s:named_parameters()), { '0.weight', '0.bias', '2.weight', '2.bias' })
  T.eq(s((T.make{ 5, 2 })).shape, { 5, 1 })
  local l = nn.ModuleList{ nn.ReLU() }
  l:extend{ nn.Tanh(), nn.Identity() }
  T.eq(#l, 3)
  local n = 0
  for i, m in ipairs(l) do n = n + 1 T.ok(m == l[i]) end
  T.eq(n, 3)
  T.raises(function() l(v100.randn{ 1 }) end, 'ModuleList is not callable')
  T.raises(function() nn.Sequential(nn.ReLU(), 3) end, 'argument 2 is not a module')
  local d = nn.ModuleDict{ { 'b', nn.ReLU() }, { 'a', nn.Tanh() } }
  T.eq(d:keys(), { 'b', 'a' })
end)

T.run()
