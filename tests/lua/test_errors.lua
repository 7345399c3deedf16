-- Bad input raises a clear error naming the op and the operands, and leaves in-place targets
-- unmodified.
local T = require 'testlib'
local v100 = require 'v100'

-- asserts that t still holds `ref` after a failed in-place call
-- one tensor (T.make also returns its values, which must not become an extra argument)
local function mk(...) return (T.make(...)) end

local function unchanged(t, ref, msg) T.alleq(t, ref, (msg or '') .. ' (target must be unmodified)') end

T.test('non-broadcastable shapes name the op and both shapes', function()
  local a, ar = T.make({ 2, 3 }, 'f32')
  local b = T.make({ 4, 3 }, 'f32')
  T.raises(function() return a:add(b) end, { 'add', '2x3', '4x3' })
  T.raises(function() return a + b end, { '2x3', '4x3' })
  T.raises(function() return a:mul(b) end, { 'mul', '2x3', '4x3' })
  T.raises(function() return a:sub(b) end, { 'sub', '2x3', '4x3' })
  T.raises(function() return a:div(b) end, { 'div', '2x3', '4x3' })
  T.raises(function() return a:maximum(b) end, { 'maximum', '2x3', '4x3' })
  T.raises(function() return a:lt(b) end, { 'lt', '2x3', '4x3' })
  T.raises(function() return v100.where(a:gt(0), a, b) end, { 'where', '2x3', '4x3' })
  local c = T.make({ 3, 2 }, 'f32')
  T.raises(function() return a:add(c) end, { 'add', '2x3', '3x2' })
  -- in place: b must broadcast to a's shape (a 1x3 target cannot grow)
  T.raises(function() return a:add_(b) end, { 'add_', '2x3', '4x3' })
  unchanged(a, ar, 'add_')
  local small, sr = T.make({ 1, 3 }, 'f32')
  T.raises(function() return small:mul_(a) end, { '1x3', '2x3' })
  unchanged(small, sr, 'mul_ growing the target')
  T.raises(function() return a:masked_fill_(v100.ones({ 4, 3 }, { dtype = 'bool' }), 1) end, { 'masked_fill', '2x3', '4x3' })
  unchanged(a, ar, 'masked_fill_')
  T.raises(function() return a:copy_(mk({ 4, 3 }, 'f32')) end, { 'copy_', '2x3', '4x3' })
  unchanged(a, ar, 'copy_')
end)

T.test('dtype errors name the op and the dtypes', function()
  local i = T.make({ 2, 3 }, 'i32')
  local j = T.make({ 3, 2 }, 'i32')
  T.raises(function() return i:matmul(j) end, { 'matmul', 'i32' })
  local f = T.make({ 2, 3 }, 'f32')
  local h = T.make({ 3, 2 }, 'f16')
  T.raises(function() return f:matmul(h) end, { 'matmul', 'f32', 'f16' })
  local src = T.make({ 4, 3 }, 'f32')
  T.raises(function() return src:index_select(1, v100.tensor({ 0, 1 }, { dtype = 'f32' })) end, { 'index_select', 'f32' })
  T.raises(function() return src:gather(1, v100.tensor({ { 0, 1, 0 } }, { dtype = 'f32' })) end, { 'gather', 'f32' })
  T.raises(function() return src:scatter_add(1, v100.tensor({ { 0, 1, 0 } }, { dtype = 'f64' }), src) end,
    { 'scatter_add', 'f64' })
  -- a float result into an integer target
  local it, itr = T.make({ 2, 3 }, 'i32')
  T.raises(function() return it:add_(mk({ 2, 3 }, 'f32')) end, { 'add_', 'i32', 'f32' })
  unchanged(it, itr, 'add_ f32 into i32')
  T.raises(function() return it:div_(mk({ 2, 3 }, 'i32')) end, { 'div_', 'i32' })
  unchanged(it, itr, 'div_ into i32')
  T.raises(function() return it:mul_(2.5) end, { 'mul_', 'i32' })
  unchanged(it, itr, 'mul_ by 2.5 into i32')
  T.raises(function() return f:masked_fill(f, 1) end, { 'masked_fill', 'f32' })
  T.raises(function() return v100.where(f, f, f) end, { 'where', 'f32' })
end)

T.test('matmul / mm / bmm / addmm shape errors', function()
  local a = T.make({ 2, 3 }, 'f32')
  local b = T.make({ 4, 5 }, 'f32')
  T.raises(function() return a:matmul(b) end, { 'matmul', '2x3', '4x5' })
  T.raises(function() return a:bmm(mk({ 3, 2 }, 'f32')) end, { 'bmm', '2x3' })
  local x = T.make({ 2, 3, 4 }, 'f32')
  T.raises(function() return x:bmm(mk({ 3, 4, 5 }, 'f32')) end, { 'bmm', '2x3x4', '3x4x5' })
  T.raises(function() return x:matmul(mk({ 3, 4, 5 }, 'f32')) end, { 'matmul', '2x3x4', '3x4x5' })
  T.raises(function() return v100.addmm(mk({ 3, 3 }, 'f32'), a, mk({ 3, 5 }, 'f32')) end, { 'addmm', '3x3' })
  T.raises(function() return T.make({ 3 }, 'f32'):matmul(mk({ 4 }, 'f32')) end, { 'matmul' })
end)

T.test('out-of-range dims name the op and the dim', function()
  local a, ar = T.make({ 2, 3 }, 'f32')
  T.raises(function() return a:sum(3) end, { 'sum' })
  T.raises(function() return a:sum(-3) end, { 'sum' })
  T.raises(function() return a:softmax(3) end, { 'softmax' })
  T.raises(function() return a:max(5) end, { 'max' })
  T.raises(function() return a:argmax(3) end, { 'argmax' })
  T.raises(function() return a:transpose(1, 3) end, { 'transpose' })
  T.raises(function() return a:narrow(3, 1, 1) end, { 'narrow' })
  T.raises(function() return a:narrow(2, 3, 2) end, { 'narrow' })
  T.raises(function() return a:select(1, 3) end, { 'select' })
  T.raises(function() return a:gather(3, v100.zeros({ 2, 3 }, { dtype = 'i64' })) end, { 'gather' })
  T.raises(function() return a:index_select(0, v100.zeros({ 1 }, { dtype = 'i64' })) end, { 'index_select' })
  T.raises(function() return v100.cat({ a, a }, 3) end, { 'cat' })
  T.raises(function() return v100.stack({ a, a }, 4) end, { 'stack' })
  T.raises(function() return a:view(4, 2) end, { 'view', '2x3' })
  T.raises(function() return a:t():view(6) end, { 'view' })
  T.raises(function() return a:expand({ 4, 3 }) end, { 'expand', '2x3' })
  T.raises(function() return a:permute({ 1, 1 }) end, { 'permute' })
  T.raises(function() return v100.cat({ a, mk({ 2, 4 }, 'f32') }, 1) end, { 'cat', '2x3', '2x4' })
  T.raises(function() return v100.stack({ a, mk({ 3, 2 }, 'f32') }, 1) end, { 'stack', '2x3', '3x2' })
  T.raises(function() return #v100.tensor(1.5) end, nil, '#t on a 0-dim tensor')
  T.raises(function() return v100.rand({ 2, 2 }):item() end, { 'item' })
  unchanged(a, ar, 'after the failed calls')
end)

T.test('out-of-range indices name the index and the size', function()
  local src, sr = T.make({ 4, 3 }, 'f32')
  T.raises(function() return src:index_select(1, v100.tensor({ 0, 4 }, { dtype = 'i64' })) end,
    { 'index_select', 'out of bounds', '4' })
  T.raises(function() return src:index_select(1, v100.tensor({ -1, 0 }, { dtype = 'i32' })) end,
    { 'index_select', 'out of bounds', '-1' })
  T.raises(function() return src:gather(2, v100.tensor({ { 0, 7 } }, { dtype = 'i64' })) end,
    { 'gather', 'out of bounds', '7', '3' })
  local acc, accr = T.make({ 3, 2 }, 'f64')
  local idx = v100.tensor({ { 1, 0 }, { 2, 9 } }, { dtype = 'i64' })
  local s = T.make({ 2, 2 }, 'f64')
  T.raises(function() return acc:scatter_add_(1, idx, s) end, { 'scatter_add', 'out of bounds', '9', '3' })
  unchanged(acc, accr, 'scatter_add_ with a bad index')
end)

T.test('freed tensors raise "tensor used after free"', function()
  local a = v100.rand({ 3, 3 })
  local b = v100.rand({ 3, 3 })
  a:free()
  a:free() -- idempotent
  T.raises(function() return a:add(b) end, 'used after free')
  T.raises(function() return b:add(a) end, 'used after free')
  T.raises(function() return a + 1 end, 'used after free')
  T.raises(function() return a:sum() end, 'used after free')
  T.raises(function() return a:totable() end, 'used after free')
  T.raises(function() return a:item() end, 'used after free')
  T.raises(function() return a:t() end, 'used after free')
  T.raises(function() return b:copy_(a) end, 'used after free')
  T.raises(function() return v100.cat({ b, a }, 1) end, 'used after free')
  T.raises(function() return a:numel() end, 'used after free')
  do
    local c <close> = v100.rand({ 2 })
    b = c
  end
  T.raises(function() return b:sum() end, 'used after free', '<close> frees at scope end')
  -- a view keeps working after its base is freed (shared storage) or raises clearly, but
  -- the base itself is freed
  local base = v100.rand({ 4, 4 })
  local view = base:narrow(1, 1, 2)
  base:free()
  local ok, err = pcall(function() return view:sum():item() end)
  T.ok(ok or tostring(err):find('used after free', 1, true), 'view after base free: ' .. tostring(err))
end)

T.test('bad dtype and device strings', function()
  T.raises(function() return v100.zeros({ 2 }, { dtype = 'f8' }) end, 'f8')
  T.raises(function() return v100.zeros({ 2 }, { dtype = 'float33' }) end, 'float33')
  T.raises(function() return v100.tensor({ 1 }, { device = 'tpu' }) end, 'tpu')
  T.raises(function() return v100.zeros({ 2 }, { device = 'cuda:x' }) end, 'cuda:x')
  T.raises(function() return v100.rand({ 2 }):to('f12') end, 'f12')
  T.raises(function() return v100.rand({ 2 }):to({ device = 'gpu' }) end, 'gpu')
end)

T.test('errors of mm name mm (not matmul)', function()
  local a = mk({ 2, 3 }, 'f32')
  T.raises(function() return a:mm(mk({ 4, 5 }, 'f32')) end, { 'mm', '2x3', '4x5' })
  T.raises(function() return a:mm(mk({ 3 }, 'f32')) end, { 'mm' })
  T.raises(function() return mk({ 2, 3 }, 'i32'):mm(mk({ 3, 2 }, 'i32')) end, { 'mm', 'i32' })
end)

T.test('a negative size names the creating op', function()
  T.raises(function() return v100.zeros({ 2, -1 }) end, { 'zeros', '-1' })
  T.raises(function() return v100.ones({ -3 }) end, { 'ones', '-3' })
  T.raises(function() return v100.full({ -3 }, 1) end, { 'full', '-3' })
  T.raises(function() return v100.empty({ -3 }) end, { 'empty', '-3' })
end)

T.test('a cuda device without CUDA raises', function()
  if T.has_cuda() then return end
  T.raises(function() return v100.zeros({ 2 }, { device = 'cuda' }) end, 'cuda')
  T.raises(function() return v100.rand({ 2 }):cuda() end, 'cuda')
  T.raises(function() return v100.rand({ 2 }):to('cuda:0') end, 'cuda')
  T.eq(v100.cuda.is_available(), false)
  T.eq(v100.device(), 'cpu')
end)

T.test('errors leave in-place targets unmodified', function()
  local a, ar = T.make({ 3, 4 }, 'f64')
  local bad_idx = v100.tensor({ { 0, 1, 2, 3 }, { 3, 2, 1, 5 } }, { dtype = 'i64' })
  T.raises(function() return a:scatter_add_(1, bad_idx, mk({ 2, 4 }, 'f64')) end, 'out of bounds')
  unchanged(a, ar, 'scatter_add_')
  T.raises(function() return a:add_(mk({ 5 }, 'f64')) end, { 'add_', '3x4', '5' })
  unchanged(a, ar, 'add_')
  T.raises(function() return a:copy_(mk({ 2, 4 }, 'f64')) end, 'copy_')
  unchanged(a, ar, 'copy_')
  T.raises(function() return a:t():sub_(mk({ 3, 4 }, 'f64')) end, { 'sub_', '4x3', '3x4' })
  unchanged(a, ar, 'sub_ on a view')
end)

T.test('layer errors name the layer, not the inner op they are built on', function()
  local nn = require 'v100.nn'
  local F = nn.functional
  local logits = T.make({ 2, 3 }, 'f32')
  -- a class id out of range: the loss's name, the id and the class count (was "gather: ...")
  local msg = T.raises(function() return F.cross_entropy(logits, v100.tensor({ 0, 3 }, { dtype = 'i64' })) end,
    'cross_entropy: index 3 is out of bounds for dim 2 with size 3 (index values are 0-based: 0 to 2)')
  T.ok(not msg:find('gather', 1, true), msg)
  T.raises(function() return F.cross_entropy(logits, v100.tensor({ -1, 0 }, { dtype = 'i32' })) end,
    'cross_entropy: index -1 is out of bounds')
  T.raises(function() return nn.CrossEntropyLoss()(logits, v100.tensor({ 5, 0 }, { dtype = 'i64' })) end,
    'cross_entropy: index 5 is out of bounds')
  T.raises(function() return F.nll_loss(logits:log_softmax(2), v100.tensor({ 0, 7 }, { dtype = 'i64' })) end,
    'nll_loss: index 7 is out of bounds for dim 2 with size 3')
  -- ignored positions may hold any value
  T.ok(v100.is_tensor(F.cross_entropy(logits, v100.tensor({ -100, 2 }, { dtype = 'i64' }))), 'ignore_index')
  -- an embedding id out of range (was "index_select: ...")
  msg = T.raises(function() return nn.Embedding(5, 2)(v100.tensor({ 1, 5 }, { dtype = 'i64' })) end,
    'embedding: index 5 is out of bounds for dim 1 with size 5')
  T.ok(not msg:find('index_select', 1, true), msg)
  -- dropout with p = NaN (was "bernoulli: ..."), in the functional form and the module
  T.raises(function() return F.dropout(T.make({ 4 }, 'f32'), 0 / 0, true) end, 'dropout: p must be in [0, 1], got nan')
  T.raises(function() return nn.Dropout(0 / 0) end, 'Dropout: p must be in [0, 1], got nan')
  T.raises(function() return F.dropout(T.make({ 4 }, 'f32'), 1.5, true) end, 'dropout: p must be in [0, 1], got 1.5')
  T.raises(function() return F.dropout(T.make({ 4 }, 'f32'), 'half', true) end, 'dropout: p must be a number, got string')
  T.raises(function() return F.cross_entropy(logits, v100.tensor({ 0, 1 }, { dtype = 'i64' }), { smoothing = 0 / 0 }) end,
    'cross_entropy: smoothing must be in [0, 1], got nan')
  -- nn.Linear(0, n) works as in PyTorch (was "uniform_: expected finite lo <= hi"): y = bias
  local lin = nn.Linear(0, 2)
  T.eq(lin.weight.shape, { 2, 0 })
  local y = lin(v100.zeros({ 3, 0 }))
  T.eq(y.shape, { 3, 2 })
  T.allclose(y, lin.bias:view{ 1, 2 }:expand{ 3, 2 }, 0, 0, 'no features: the bias')
  T.allclose(lin.bias, v100.zeros({ 2 }), 0, 0, 'bias bound 0 for fan_in 0')
end)

T.test('layer argument errors come from C without a file position', function()
  local F = require('v100.nn').functional
  local w = T.make({ 2, 3, 1, 1 }, 'f32')
  local cases = {
    { function() return F.conv2d(3, w) end, 'conv2d: input must be a tensor, got number' },
    { function() return F.conv2d(T.make({ 1, 3, 4, 4 }, 'f32'), w, nil, { stride = { 1, 2, 3 } }) end,
      'conv2d: stride must be an integer or a pair {h, w} of integers, got a table of 3' },
    { function() return F.conv2d(T.make({ 1, 3, 4, 4 }, 'f32'), w, nil, { groups = 1.5 }) end,
      'conv2d: groups must be an integer, got 1.5' },
    { function() return F.max_pool2d(T.make({ 1, 3, 4, 4 }, 'f32'), { 2, 'x' }) end,
      'max_pool2d: kernel size must be an integer or a pair {h, w} of integers (element 2 is not)' },
    { function() return F.layer_norm(T.make({ 2, 3 }, 'f32'), 'x') end,
      'layer_norm: normalized_shape must be an integer or a table of sizes, got string' },
    { function() return F.linear(nil, mk({ 4, 3 }, 'f32')) end, 'linear: input must be a tensor, got nil' },
    { function() return F.mse_loss(T.make({ 2 }, 'f32'), 1) end, 'mse_loss: target must be a tensor, got number' },
  }
  for i, c in ipairs(cases) do
    local msg = T.raises(c[1], c[2], 'case ' .. i)
    T.eq(msg:sub(1, #c[2]), c[2], 'case ' .. i .. ': the message starts with the op')
  end
end)

T.run()
