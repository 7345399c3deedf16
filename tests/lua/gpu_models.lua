-- tests/lua/gpu_models.lua: ResNet-18 (small_input) and a tiny BERT, forward and backward on
-- CUDA against the same model on the CPU (f32, TF32 off): outputs and every parameter's gradient
-- within 1e-4 relative (to each tensor's largest magnitude). Skipped without a GPU.
local v100 = require 'v100'
local nn = require 'v100.nn'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'
local T = require 'testlib'

local RTOL = 1e-4

local function close(got, want, what)
  local scale = want:abs():max():item()
  T.tensor_close(got:cpu(), want, RTOL, RTOL * math.max(scale, 1e-12), what)
end

-- Builds the model twice from one seed (CPU, CUDA), runs fn(model, device) -> loss, outputs...
-- on both, and compares the outputs and the gradients.
local function compare(build, run)
  v100.manual_seed(11)
  local cpu = build()
  v100.manual_seed(11)
  local gpu = build():to('cuda')
  local pc, pg = cpu:named_parameters(), gpu:named_parameters()
  for i = 1, #pc do T.tensor_eq(pg[i][2]:cpu(), pc[i][2], 'same initial ' .. pc[i][1]) end
  local outs_c = table.pack(run(cpu, 'cpu'))
  local outs_g = table.pack(run(gpu, 'cuda'))
  for i = 2, outs_c.n do close(outs_g[i], outs_c[i], 'output ' .. (i - 1)) end
  outs_c[1]:backward()
  outs_g[1]:backward()
  for i = 1, #pc do
    T.ok(pg[i][2].grad ~= nil, pg[i][1] .. ' has a CUDA gradient')
    close(pg[i][2].grad, pc[i][2].grad, 'grad of ' .. pc[i][1])
  end
  -- training-mode BN updated the same running statistics
  local bc, bg = cpu:named_buffers(), gpu:named_buffers()
  for i = 1, #bc do close(bg[i][2]:to('f64'), bc[i][2]:to('f64'), bc[i][1]) end
end

if not T.has_cuda() then
  print('skip: no CUDA device')
  T.run()
  return
end

v100.set_allow_tf32(false)

T.test('resnet18 small_input: cuda matches cpu (forward, backward, running stats)', function()
  v100.manual_seed(12)
  local x = v100.randn({ 4, 1, 28, 28 })
  local y = v100.tensor({ 1, 3, 5, 7 })
  compare(function() return resnet.resnet18{ classes = 10, small_input = true, in_channels = 1 } end,
    function(m, dev)
      local out = m(x:to(dev))
      return nn.cross_entropy(out, y:to(dev)), out
    end)
end)

T.test('resnet18 small_input nhwc: cuda matches cpu in eval mode', function()
  v100.manual_seed(13)
  local x = v100.randn({ 2, 3, 32, 32 })
  v100.manual_seed(14)
  local cpu = resnet.resnet18{ classes = 10, small_input = true }:eval()
  v100.manual_seed(14)
  local gpu = resnet.resnet18{ classes = 10, small_input = true }:to{ device = 'cuda', layout = 'nhwc' }:eval()
  local xg = x:cuda():permute{ 1, 3, 4, 2 }:contiguous():permute{ 1, 4, 2, 3 }
  close(gpu(xg), cpu(x), 'logits')
end)

T.test('tiny BERT pretraining heads: cuda matches cpu (forward, backward)', function()
  local cfg = { vocab_size = 64, hidden_size = 32, num_hidden_layers = 2, num_attention_heads = 4,
    intermediate_size = 48, max_position_embeddings = 16, hidden_dropout_prob = 0, attention_probs_dropout_prob = 0 }
  local ids = v100.tensor({ { 5, 7, 9, 3, 21, 0, 0, 0 }, { 2, 8, 11, 4, 6, 3, 40, 63 } })
  local tt = v100.tensor({ { 0, 0, 1, 1, 1, 0, 0, 0 }, { 0, 0, 0, 1, 1, 1, 1, 1 } })
  local mask = v100.tensor({ { 1, 1, 1, 1, 1, 0, 0, 0 }, { 1, 1, 1, 1, 1, 1, 1, 1 } })
  local labels = v100.tensor({ { -100, 7, -100, 3, -100, -100, -100, -100 }, { 2, -100, -100, 4, -100, -100, 9, -100 } })
  local nsp = v100.tensor({ 0, 1 })
  compare(function() return bert.BertForPreTraining(cfg) end,
    function(m, dev)
      local s, n = m(ids:to(dev), tt:to(dev), mask:to(dev))
      return bert.pretraining_loss(s, n, labels:to(dev), nsp:to(dev)), s, n
    end)
end)

T.run()
