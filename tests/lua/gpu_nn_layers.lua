-- tests/lua/gpu_nn_layers.lua: the v100.nn layers and losses on CUDA against the CPU: outputs
-- and the gradients of inputs and parameters, in f32 (TF32 off; rel 1e-5), f16 (1e-3) and
-- bf16 (1e-2). The CPU reference runs in f32 from the same (rounded) values, so the half
-- tolerances cover the GPU's half-precision storage of results.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F

T.cuda_or_skip()

local TOL = { f32 = 1e-5, f16 = 1e-3, bf16 = 1e-2 }

-- One random f32 CPU tensor (T.make also returns the stored values, which must not spill into
-- argument lists).
local function rnd(shape, lo, hi) return (T.make(shape, 'f32', lo, hi)) end

-- Gradient comparisons are relative to the largest reference magnitude (sums of many products
-- cancel; elementwise relative error of a near-zero sum is meaningless).
local function close(got, ref, tol, msg)
  local scale = ref:to{ dtype = 'f64', device = 'cpu' }:abs():max():item()
  T.tensor_close(got, ref, tol, tol * math.max(scale, 1e-3), msg)
end

-- Runs make_module() on the CPU (f32) and on cuda (dtype), with the same parameters and inputs;
-- compares outputs, input gradients and parameter gradients. inputs: list of f32 CPU tensors
-- (integer tensors are passed through unchanged).
local function compare(name, make_module, inputs, dtype, opts)
  opts = opts or {}
  local tol = TOL[dtype] * (opts.tol_scale or 1)
  local mc = make_module()
  local mg = make_module()
  mg:load_state_dict(mc:state_dict())
  mg:to('cuda', dtype)
  -- inputs rounded to dtype first so that both sides see the same values
  local xc, xg = {}, {}
  for i, x in ipairs(inputs) do
    if x.dtype == 'f32' then
      local r = x:to(dtype):float()
      xc[i] = r:clone():requires_grad_(true)
      xg[i] = r:to{ dtype = dtype, device = 'cuda' }:requires_grad_(true)
    else
      xc[i], xg[i] = x, x:cuda()
    end
  end
  -- the parameters too: the CPU copy gets the dtype-rounded values
  v100.no_grad(function()
    for k, p in ipairs(mc:parameters()) do p:copy_(mg:parameters()[k]:float():cpu()) end
  end)
  local seed, offset = v100.rng_state()
  local yc = mc(table.unpack(xc))
  v100.set_rng_state(seed, offset)
  local yg = mg(table.unpack(xg))
  close(yg, yc, tol, name .. ' ' .. dtype .. ' output')
  if opts.no_grad then return end
  local gy = rnd(yc.shape)
  yc:backward(gy:to(dtype):float())
  yg:backward(gy:to{ dtype = yg.dtype, device = 'cuda' })
  for i, x in ipairs(xc) do
    if x.requires_grad then close(xg[i].grad, x.grad, tol, name .. ' ' .. dtype .. ' grad of input ' .. i) end
  end
  local pg = mg:named_parameters()
  for k, e in ipairs(mc:named_parameters()) do
    close(pg[k][2].grad, e[2].grad, tol, name .. ' ' .. dtype .. ' grad of ' .. e[1])
  end
end

-- A loss as a module of (input, target).
local function loss_module(fn)
  local M = nn.Module:extend('LossFn')
  function M:forward(x, y) return fn(x, y) end
  return function() return M() end
end

for _, dtype in ipairs{ 'f32', 'f16', 'bf16' } do
  T.test('Linear / Conv2d on cuda vs cpu, ' .. dtype, function()
    compare('Linear', function() return nn.Linear(24, 16) end, { rnd{ 8, 24 } }, dtype)
    compare('Conv2d', function() return nn.Conv2d(8, 16, 3, { padding = 1 }) end, { rnd{ 4, 8, 9, 9 } }, dtype)
    compare('Conv2d strided grouped', function() return nn.Conv2d(8, 8, 3, { stride = 2, groups = 2, dilation = 2 }) end,
      { rnd{ 2, 8, 11, 10 } }, dtype)
  end)

  T.test('pooling on cuda vs cpu, ' .. dtype, function()
    local x = rnd{ 3, 4, 9, 8 }
    compare('MaxPool2d', function() return nn.MaxPool2d(3, { stride = 2, padding = 1 }) end, { x }, dtype)
    compare('AvgPool2d', function() return nn.AvgPool2d(2) end, { x }, dtype)
    compare('AdaptiveAvgPool2d', function() return nn.AdaptiveAvgPool2d{ 3, 3 } end, { x }, dtype)
  end)

  T.test('BatchNorm / LayerNorm on cuda vs cpu, ' .. dtype, function()
    compare('BatchNorm2d', function() return nn.BatchNorm2d(6) end, { rnd({ 4, 6, 5, 5 }, -2, 3) }, dtype)
    compare('BatchNorm1d', function() return nn.BatchNorm1d(5) end, { rnd({ 16, 5 }, -2, 3) }, dtype)
    compare('LayerNorm', function() return nn.LayerNorm(32) end, { rnd{ 4, 3, 32 } }, dtype)
    local bn = nn.BatchNorm2d(6)
    local bc = nn.BatchNorm2d(6)
    bn:to('cuda', dtype)
    local x = rnd({ 4, 6, 5, 5 }, -2, 3)
    bn(x:to{ dtype = dtype, device = 'cuda' })
    bc(x:to(dtype):float())
    close(bn.running_mean, bc.running_mean, TOL[dtype], 'running_mean')
    close(bn.running_var, bc.running_var, TOL[dtype], 'running_var')
  end)

  T.test('activations, softmax, dropout, embedding, attention on cuda vs cpu, ' .. dtype, function()
    local x = rnd({ 6, 10 }, -3, 3)
    for _, mk in ipairs{ nn.ReLU, nn.GELU, nn.Sigmoid, nn.Tanh } do compare(tostring(mk()), mk, { x }, dtype) end
    compare('Softmax', function() return nn.Softmax(2) end, { x }, dtype)
    compare('Dropout', function() return nn.Dropout(0.3) end, { x }, dtype) -- same Philox numbers on both
    local ids = v100.tensor{ { 0, 3, 7 }, { 7, 1, 3 } }
    compare('Embedding', function() return nn.Embedding(8, 5, { padding_idx = 1 }) end, { ids }, dtype)
    local Att = nn.Module:extend('Att')
    local mask = v100.tensor{ { { { true, true, true, false, false } } }, { { { true, true, true, true, true } } } }
    function Att:forward(q, k, v)
      return F.scaled_dot_product_attention(q, k, v, { mask = mask:to(q.device) })
    end
    compare('sdpa', function() return Att() end, { rnd{ 2, 2, 4, 8 }, rnd{ 2, 2, 5, 8 }, rnd{ 2, 2, 5, 8 } }, dtype)
  end)

  T.test('losses on cuda vs cpu, ' .. dtype, function()
    local logits = rnd({ 12, 7 }, -3, 3)
    local ids = v100.tensor{ 0, 6, 3, -100, 2, 2, 5, 1, 0, 4, -100, 6 }
    compare('cross_entropy', loss_module(function(x, y) return F.cross_entropy(x, y, { smoothing = 0.1 }) end),
      { logits, ids }, dtype)
    compare('mse_loss', loss_module(F.mse_loss), { rnd{ 5, 4 }, rnd{ 5, 4 } }, dtype)
    compare('bce_with_logits', loss_module(F.binary_cross_entropy_with_logits),
      { rnd({ 5, 4 }, -6, 6), v100.bernoulli({ 5, 4 }, 0.5) }, dtype)
  end)
end

T.test('an input on the wrong device: the error names the module path, the layer and both devices', function()
  local net = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2)):to('cuda')
  T.raises(function() return net(v100.randn { 2, 4 }) end, { '0: linear: input is on cpu but weight is on cuda' })
  local cnn = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)):to('cuda')
  T.raises(function() return cnn(v100.randn { 1, 1, 5, 5 }) end, { '0: conv2d: input is on cpu but weight is on cuda' })
  local bn = nn.Sequential(nn.BatchNorm2d(2)):to('cuda')
  T.raises(function() return bn(v100.randn { 1, 2, 5, 5 }) end, { '0: batch_norm: input is on cpu but weight is on cuda' })
  local emb = nn.Sequential(nn.Embedding(10, 4)):to('cuda')
  T.raises(function() return emb(v100.tensor { 1, 2 }) end, { '0: embedding: ids is on cpu but weight is on cuda' })
  local ln = nn.Sequential(nn.LayerNorm(4)):to('cuda')
  T.raises(function() return ln(v100.randn { 2, 4 }) end, { '0: layer_norm: input is on cpu but weight is on cuda' })
end)

T.test('Checkpoint on cuda: gradients equal the un-checkpointed ones', function()
  local inner = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Dropout(0.2), nn.Linear(32, 8)):to('cuda')
  local x = rnd{ 4, 16 }:cuda():requires_grad_(true)
  local gy = rnd{ 4, 8 }:cuda()
  local seed, offset = v100.rng_state()
  inner(x):backward(gy)
  local gx = x.grad:clone()
  local gp = {}
  for i, p in ipairs(inner:parameters()) do gp[i] = p.grad:clone() end
  inner:zero_grad()
  x.grad = nil
  v100.set_rng_state(seed, offset)
  nn.Checkpoint(inner)(x):backward(gy)
  T.tensor_close(x.grad, gx, 1e-6, 1e-7, 'input grad')
  for i, p in ipairs(inner:parameters()) do T.tensor_close(p.grad, gp[i], 1e-6, 1e-7, 'param ' .. i) end
end)

T.run()
