-- bench/train_step.lua: one synthetic training step of ResNet-50 (batch 256, 224x224, SGD with
-- Nesterov momentum, label smoothing 0.1) or BERT-Large pretraining (sequence 128, batch 128,
-- MLM on 15% of positions + NSP, AdamW), under an AMP policy, eager or replayed as a CUDA graph.
-- bench/train_step.py is PyTorch's side with the same models, batches, policies and BENCH names.
--
--   BENCH train_<model>_<amp>_<dtype>_<eager|graph> <samples/s> samples/s
--   BENCH train_<model>_<amp>_<dtype>_<eager|graph>_ms <ms> ms/step
--
-- Method: the step runs `--warmup` times (cuDNN plans, optimizer state; a graph's capture comes
-- after these), then `--steps` times between two CUDA events; the rate counts samples of those
-- steps. Inputs are random and fixed (synthetic data: no loader in the timing). fp16 uses an
-- amp.Scaler (its skip decision stays on the device, so it is captured too); bf16 none.
--
-- BERT's MLM head runs at 20 positions per 128 tokens by default (--mlm-head masked, as NVIDIA's
-- and Google's pretraining; bench/train_step.py does the same gather), or at every position
-- (--mlm-head full, HF's BertForPreTraining; BENCH names end in _fullhead). --profile on runs one
-- more step between cudaProfilerStart/Stop for ncu (tools/device-run.sh's prof: step). A GPU run
-- also prints `BENCH <name>_peak <GiB> GiB` (peak allocated bytes of the pool).
--
-- usage: v100lua bench/train_step.lua --model resnet50|bert-large [--amp O1] [--dtype bf16]
--        [--graph on] [--batch N] [--seq N] [--steps 20] [--warmup 5] [--layout nhwc] [--device cpu]
--        [--mlm-head masked|full] [--cudnn-benchmark on|off] [--profile on|off]
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local recipe = require 'v100.recipe'
local train = require 'v100.train'

local opts, parser = recipe.options{
  name = 'train_step.lua',
  description = 'Synthetic ResNet-50 / BERT-Large training steps under AMP, eager or as a CUDA graph.',
  { '--model', 'resnet50', 'the model (bert-tiny: Google\'s BERT-Tiny with an 8,192-token vocabulary, the CPU recipe\'s)', { 'resnet50', 'bert-large', 'bert-base', 'bert-tiny' } },
  { '--amp', 'O1', 'AMP policy', { 'O0', 'O1', 'O2', 'O3' } },
  { '--dtype', 'bf16', 'half dtype', { 'fp16', 'bf16' } },
  { '--graph', 'off', 'replay the step as one CUDA graph', { 'on', 'off' } },
  { '--batch', 0, 'batch size (0: 256 for ResNet-50, 128 for BERT)', recipe.integer{ min = 0 } },
  { '--seq', 128, 'BERT sequence length', recipe.integer{ min = 1 } },
  { '--steps', 20, 'timed steps', recipe.integer{ min = 1 } },
  { '--warmup', 5, 'untimed steps before timing (and before a capture)', recipe.integer{ min = 1 } },
  { '--layout', 'nhwc', 'ResNet-50 activation layout', { 'nchw', 'nhwc' } },
  { '--tf32', 'on', 'f32 GEMMs and convolutions on TF32 tensor cores', { 'on', 'off' } },
  { '--device', nil, 'cpu, cuda or cuda:N (default: cuda:0 when a GPU is present, else cpu)', recipe.device },
  { '--cudnn-benchmark', 'on', 'time cuDNN\'s convolution algorithms on first use (PyTorch\'s cudnn.benchmark)', { 'on', 'off' } },
  { '--mlm-head', 'masked', 'BERT: the MLM head at the masked positions only (max 20 per 128 tokens, as NVIDIA\'s and Google\'s pretraining) or over every position (HF\'s BertForPreTraining)', { 'masked', 'full' } },
  { '--profile', 'off', 'after timing, run one more step between cudaProfilerStart/Stop (for ncu --profile-from-start off)', { 'on', 'off' } },
  { '--dp', 'off', 'wrap the model in dist.DataParallel (its overhead; under mpirun: data-parallel)', { 'on', 'off' } },
}
local dist = require 'v100.dist'
if opts.dp == 'on' then dist.init() end
local dev = opts.device or v100.device()
if opts.graph == 'on' and not dev:match('^cuda') then parser:error("option '--graph' on needs a CUDA device, got " .. dev) end
v100.set_allow_tf32(opts.tf32 == 'on')
if dev:match('^cuda') then v100.set_cudnn_benchmark(opts.cudnn_benchmark == 'on') end
v100.manual_seed(1)

local policy = amp.policy(opts.amp, { dtype = opts.dtype })
local half_input = opts.amp == 'O2' or opts.amp == 'O3'
local scaler = opts.amp ~= 'O0' and opts.dtype == 'fp16' and amp.Scaler() or nil
local capturable = opts.graph == 'on'

local model, opt, loss_fn, batch
if opts.model == 'resnet50' then
  local resnet = require 'v100.models.resnet'
  batch = opts.batch > 0 and opts.batch or 256
  model = resnet.resnet50{ classes = 1000 }
  model:to{ device = dev, layout = opts.layout }
  policy:convert(model)
  opt = optim.SGD(model:parameters(), policy:optimizer_opts{ lr = 0.1, momentum = 0.9, nesterov = true,
    weight_decay = 5e-5, capturable = capturable })
  local x = v100.randn({ batch, 3, 224, 224 }, { device = dev })
  if opts.layout == 'nhwc' then x = x:to_channels_last() end
  if half_input then x = x:to(policy.dtype) end
  local ids = {}
  for i = 1, batch do ids[i] = math.random(0, 999) end
  local y = v100.tensor(ids, { dtype = 'i64' }):to(dev)
  loss_fn = function() return F.cross_entropy(model(x):float(), y, { smoothing = 0.1 }) end
else
  local bert = require 'v100.models.bert'
  batch = opts.batch > 0 and opts.batch or 128
  local cfg = opts.model == 'bert-tiny' and bert.config('base', { num_hidden_layers = 2, hidden_size = 128,
    num_attention_heads = 2, intermediate_size = 512, vocab_size = 8192 }) or bert.config(opts.model == 'bert-large' and 'large' or 'base')
  model = bert.BertForPreTraining(cfg):to(dev)
  policy:convert(model)
  opt = optim.AdamW(model:parameters(), policy:optimizer_opts{ lr = 1e-4, weight_decay = 0.01,
    no_decay = optim.no_decay_bias_and_norm, capturable = capturable })
  local L = opts.seq
  local ids, labels = {}, {}
  for i = 1, batch * L do
    ids[i] = math.random(1, cfg.vocab_size - 1)
    labels[i] = math.random() < 0.15 and ids[i] or -100
  end
  local input_ids = v100.tensor(ids, { dtype = 'i64' }):view(batch, L):to(dev)
  local mlm = v100.tensor(labels, { dtype = 'i64' }):view(batch, L):to(dev)
  local positions = nil
  if opts.mlm_head == 'masked' then
    -- P = 20 per 128 tokens (MLPerf's max_predictions_per_seq); the first P positions of a fixed
    -- shuffle of each sequence, their original tokens as labels (the same work per step as
    -- bench/train_step.py --mlm-head masked)
    local P = math.max(1, math.floor(20 * L / 128 + 0.5))
    local pos, lab = {}, {}
    for b = 1, batch do
      local perm = {}
      for i = 1, L do perm[i] = i - 1 end
      for i = L, 2, -1 do
        local j = math.random(1, i)
        perm[i], perm[j] = perm[j], perm[i]
      end
      for k = 1, P do
        pos[#pos + 1] = perm[k]
        lab[#lab + 1] = ids[(b - 1) * L + perm[k] + 1]
      end
    end
    positions = v100.tensor(pos, { dtype = 'i64' }):view(batch, P):to(dev)
    mlm = v100.tensor(lab, { dtype = 'i64' }):view(batch, P):to(dev)
  end
  local nsp_t = {}
  for i = 1, batch do nsp_t[i] = math.random(0, 1) end
  local nsp = v100.tensor(nsp_t, { dtype = 'i64' }):to(dev)
  local types = v100.zeros({ batch, L }, { dtype = 'i64', device = dev })
  local mask = v100.ones({ batch, L }, { dtype = 'i64', device = dev })
  loss_fn = function()
    local scores, rel = model(input_ids, types, mask, positions)
    -- the half scores as they are: the fused cross entropy computes in f32 and returns an f32
    -- loss without an f32 copy of the scores (PyTorch's side needs its .float(): see the .py)
    return bert.pretraining_loss(scores, rel, mlm, nsp)
  end
end
model:train()
-- The memory plan before step 1 (parameters, gradients, optimizer state, masters), completed by
-- the first step's measured peak below.
local memplan = require 'v100.memplan'
local plan = memplan.static(model, opt)
print('# ' .. memplan.format(plan))
-- DataParallel: the loss functions above call `model`, which now is the wrapper (it forwards to
-- the module); its buckets are all-reduced during backward and finished by the stepper.
local dp = nil
if opts.dp == 'on' then
  dp = dist.DataParallel(model)
  model = dp
end
-- The stepper's batch arguments (refilled into static copies under a graph); the losses read the
-- model's fixed synthetic inputs directly.
local dummy_x, dummy_y = v100.zeros({ 1 }, { device = dev }), v100.zeros({ 1 }, { device = dev })

-- The step as the recipes take it (v100.train.stepper): eager, or captured after the warm-up and
-- replayed with its static inputs (here the fixed synthetic batch itself).
local step = train.stepper{ opt = opt, policy = policy, scaler = scaler, graph = capturable, warmup = opts.warmup,
  dp = dp, loss = function() return loss_fn() end }
local run = function() return step(dummy_x, dummy_y) end
if not capturable then
  memplan.measure(plan, run, dev)
  for _ = 2, opts.warmup do run() end
else
  memplan.measure(plan, run, dev) -- warm-up and capture (and one replay)
end
if plan.peak_allocated then print('# ' .. memplan.format(plan):gsub('\n', '\n# ')) end

-- CUDA events around the timed steps on a GPU; the host clock after a no-op sync on the CPU.
local sync = recipe.syncer(dev)
local loss, ms
if dev:match('^cuda') then
  local e0, e1 = v100.cuda.Event{ timing = true }, v100.cuda.Event{ timing = true }
  sync()
  e0:record()
  for _ = 1, opts.steps do loss = run() end
  e1:record()
  e1:synchronize()
  ms = e0:elapsed_time(e1) / opts.steps
else
  local t0 = recipe.clock()
  for _ = 1, opts.steps do loss = run() end
  ms = (recipe.clock() - t0) * 1000 / opts.steps
end
if opts.profile == 'on' and dev:match('^cuda') then
  sync()
  v100.cuda.profiler(true)
  loss = run()
  sync()
  v100.cuda.profiler(false)
end
local lv = loss:item()
if lv ~= lv then error('train_step.lua: the loss is NaN') end
local name = string.format('train_%s_%s_%s_%s%s', opts.model:gsub('-', '_'), opts.amp, opts.dtype,
  capturable and 'graph' or 'eager', dp and '_dp' or '') .. ((opts.model ~= 'resnet50' and opts.mlm_head == 'full') and '_fullhead' or '')
print(string.format('# %s batch %d%s, loss %.4f, %s', opts.model, batch,
  opts.model == 'resnet50' and (', ' .. opts.layout) or (', seq ' .. opts.seq), lv,
  capturable and 'graphed' or 'eager'))
print(string.format('BENCH %s %.1f samples/s', name, batch * 1000 / ms))
print(string.format('BENCH %s_ms %.2f ms/step', name, ms))
if dev:match('^cuda') then
  local st = v100.memory.stats()
  print(string.format('BENCH %s_peak %.2f GiB (peak allocated; %.2f GiB peak reserved)', name,
    st.peak_allocated / 2 ^ 30, st.peak_reserved / 2 ^ 30))
end
