-- tests/lua/gpu_models.lua: ResNet-18 (small_input) and a tiny BERT, forward and backward on
-- CUDA against the same model on the CPU: outputs and every parameter's gradient within RTOL
-- relative (to each tensor's largest magnitude). Skipped without a GPU.
--
-- ResNet-18 is compared whole in f64 (1e-9) and, in f32 (TF32 off), layer by layer. A whole-model
-- f32 gradient comparison is not a sound test of a ReLU network: CUDA's f32 forward differs from
-- the CPU's by ~1e-6 relative, and among the ~1e6 ReLU inputs of this model one is typically that
-- close to 0, so the two devices take different sides of the kink and every gradient upstream of
-- it differs by ~1e-3 (measured on the H200: layer2.1.conv1.weight 3.5e-2, earlier layers ~3e-3,
-- later layers ~3e-6, while every convolution and batch norm, recomputed in f64 from the inputs
-- and output gradients it saw, was within 1.3e-5). So f32 checks each layer's backward locally.
local v100 = require 'v100'
local nn = require 'v100.nn'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'
local T = require 'testlib'

local RTOL = 1e-4

-- Within RTOL of each element, with an absolute floor of RTOL times the tensor's largest magnitude
-- or, for a tensor that is zero in exact arithmetic (a key bias's gradient: softmax ignores a
-- per-row constant), of `floor` (the largest gradient magnitude of the model: roundoff scale).
local function close(got, want, what, floor)
  local scale = math.max(want:abs():max():item(), floor or 0)
  T.tensor_close(got:cpu(), want, RTOL, RTOL * math.max(scale, 1e-12), what)
end

-- Builds the model twice from one seed (CPU, CUDA), runs fn(model, device) -> loss, outputs...
-- on both, and compares the outputs and the gradients.
local function compare(build, run, dtype, rtol)
  local saved = RTOL
  RTOL = rtol or RTOL
  v100.manual_seed(11)
  local cpu = build():to{ dtype = dtype or 'f32' }
  v100.manual_seed(11)
  local gpu = build():to{ device = 'cuda', dtype = dtype or 'f32' }
  local pc, pg = cpu:named_parameters(), gpu:named_parameters()
  for i = 1, #pc do T.tensor_eq(pg[i][2]:cpu(), pc[i][2], 'same initial ' .. pc[i][1]) end
  local outs_c = table.pack(run(cpu, 'cpu'))
  local outs_g = table.pack(run(gpu, 'cuda'))
  for i = 2, outs_c.n do close(outs_g[i], outs_c[i], 'output ' .. (i - 1)) end
  outs_c[1]:backward()
  outs_g[1]:backward()
  local gmax = 0
  for i = 1, #pc do gmax = math.max(gmax, pc[i][2].grad:abs():max():item()) end
  for i = 1, #pc do
    T.ok(pg[i][2].grad ~= nil, pg[i][1] .. ' has a CUDA gradient')
    close(pg[i][2].grad, pc[i][2].grad, 'grad of ' .. pc[i][1], 1e-3 * gmax)
  end
  -- training-mode BN updated the same running statistics
  local bc, bg = cpu:named_buffers(), gpu:named_buffers()
  for i = 1, #bc do close(bg[i][2]:to('f64'), bc[i][2]:to('f64'), bc[i][1]) end
  RTOL = saved
end

if not T.has_cuda() then
  print('skip: no CUDA device')
  T.run()
  return
end

v100.set_allow_tf32(false)

local function resnet_case()
  v100.manual_seed(12)
  local x = v100.randn({ 4, 1, 28, 28 })
  local y = v100.tensor({ 1, 3, 5, 7 })
  return function() return resnet.resnet18{ classes = 10, small_input = true, in_channels = 1 } end,
    function(m, dev)
      local out = m(x:to(m.conv1.weight.dtype):to(dev))
      return nn.cross_entropy(out, y:to(dev)), out
    end
end

T.test('resnet18 small_input f64: cuda matches cpu (forward, backward, running stats)', function()
  local build, run = resnet_case()
  compare(build, run, 'f64', 1e-9)
end)

T.test('resnet18 small_input f32: every conv and batch norm backward on cuda matches f64 (inputs it saw)', function()
  local build, run = resnet_case()
  v100.manual_seed(11)
  local m = build():to('cuda')
  -- record each conv's / BN's input, output and output gradient, then recompute its backward in
  -- f64 from exactly those and compare with what the f32 model produced
  local rec = {}
  for _, e in ipairs(m:named_modules()) do
    local name, mod = e[1], e[2]
    if mod.__name == 'Conv2d' or mod.__name == 'BatchNorm2d' then
      local orig = mod.forward
      rawset(mod, 'forward', function(self, inp, opts)
        -- opts: the fused ReLU / residual of a BN (ResNet's blocks fuse them into the BN)
        local r = { name = name, mod = self, x = inp, opts = opts }
        -- a BN's input feeds only the BN, so the gradient arriving at it is the BN's own dx
        if mod.__name == 'BatchNorm2d' then inp:register_hook(function(g) r.dx = g end) end
        local out = orig(self, inp, opts)
        out:register_hook(function(g) r.dy = g end)
        r.out = out
        rec[#rec + 1] = r
        return out
      end)
    end
  end
  local loss, out = run(m, 'cuda')
  loss:backward()
  T.eq(#rec, 40, 'convs and batch norms seen (20 + 20)')
  for _, r in ipairs(rec) do
    local mod = r.mod
    T.ok(r.dy ~= nil and mod.weight.grad ~= nil, r.name .. ': gradients reached it')
    local x64 = r.x:detach():double():requires_grad_(true)
    local w64 = mod.weight:detach():double():requires_grad_(true)
    local o64
    if mod.__name == 'Conv2d' then
      o64 = nn.F.conv2d(x64, w64, nil, { stride = mod.stride, padding = mod.padding })
    else
      local o = nil
      if r.opts then
        o = { activation = r.opts.activation, residual = r.opts.residual and r.opts.residual:detach():double() }
      end
      o64 = nn.F.batch_norm(x64, nil, nil, w64, mod.bias:detach():double(), true, 0.1, mod.eps, o)
    end
    o64:backward(r.dy:double())
    close(r.out:detach():double(), o64:detach():cpu(), r.name .. ' output')
    close(mod.weight.grad:double(), w64.grad:cpu(), r.name .. ' weight gradient')
    if r.dx then close(r.dx:double(), x64.grad:cpu(), r.name .. ' input gradient') end
  end
  local _, cpu_out = run((function() v100.manual_seed(11) return build() end)(), 'cpu')
  close(out:detach(), cpu_out:detach(), 'f32 logits against the cpu')
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
