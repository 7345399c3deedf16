-- recipes/examples/pipeline.lua: a two-stage pipeline (model parallel over dist.send/recv) of a
-- small MLP on 2 ranks. Rank 0 holds the first half (Linear-Tanh-Linear-Tanh), rank 1 the second
-- (Linear-Tanh-Linear) and the loss. Each step splits the global batch into micro-batches: their
-- activations flow forward from rank 0 to rank 1, the gradients of those activations flow back,
-- and each rank steps its own optimizer (SGD with momentum) on its own stage.
--
--   mpirun -np 2 v100lua recipes/examples/pipeline.lua [--schedule 1f1b] [--data fashion] ...
--
-- --help lists the options. Rank 1 prints the loss every --log-every steps and ends with
-- `test accuracy: 0.xxxx`. Any world size but 2 is refused.
--
-- Schedules (what each rank runs per step, F = forward of a micro-batch, B = its backward):
--   gpipe  all forwards, then all backwards (rank 0: F1..Fm then B1..Bm). Simple; holds the
--          activations of all m micro-batches.
--   1f1b   one forward ahead, then alternating (rank 0: F1, F2 B1, F3 B2, ..., Bm; rank 1: F1 B1,
--          F2 B2, ...): at most 2 micro-batches in flight on rank 0. The send of the next
--          activation and the receive of the last gradient are issued together in dist.group,
--          so the two ranks never both wait in a send.
-- Both give the same gradients: each micro-batch's loss is its mean cross-entropy divided by
-- the number of micro-batches, and the backwards run in micro-batch order on both ranks, so the
-- accumulated .grad is the whole batch's, added in the order the one-process training adds it.
--
-- Loaded with dofile (tests/mpi/test_pipeline.lua) it returns {config, data, build, batches,
-- train_pipeline, train_single}: train_single trains the same MLP in one process on the same
-- micro-batches, which the pipeline must match within fp32 rounding.
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F
local optim = require 'v100.optim'
local dist = require 'v100.dist'

local M = {}

local DEFAULTS = {
  steps = 60, batch = 64, micro = 4, lr = 0.1, momentum = 0.9, hidden = 64, schedule = 'gpipe',
  data = 'synthetic', seed = 1, log_every = 5, train_subset = 6000, test_subset = 1000, root = nil,
}

-- cfg: DEFAULTS with the given fields replaced.
function M.config(over)
  local c = {}
  for k, v in pairs(DEFAULTS) do c[k] = v end
  for k, v in pairs(over or {}) do c[k] = v end
  if c.batch % c.micro ~= 0 then
    error(string.format('pipeline: the batch (%d) must be a multiple of the micro-batches (%d)', c.batch, c.micro), 2)
  end
  if c.schedule ~= 'gpipe' and c.schedule ~= '1f1b' then
    error("pipeline: schedule must be 'gpipe' or '1f1b', got " .. tostring(c.schedule), 2)
  end
  return c
end

-- The data, the same on every rank: synthetic (32 features, 4 classes given by a random linear
-- teacher; 4096 training and 1024 test rows) or Fashion-MNIST flattened to 784 features.
-- Returns xtr, ytr, xte, yte, the number of features and the number of classes.
function M.data(cfg)
  if cfg.data == 'fashion' then
    local recipe = require 'v100.recipe'
    local img, lbl = recipe.fashion_mnist('train', cfg.root, cfg.train_subset)
    local xtr, ytr = recipe.to_device(img, lbl, 'cpu', 'flat')
    local timg, tlbl = recipe.fashion_mnist('test', cfg.root, cfg.test_subset)
    local xte, yte = recipe.to_device(timg, tlbl, 'cpu', 'flat')
    return xtr, ytr, xte, yte, 784, 10
  end
  v100.manual_seed(cfg.seed * 7919 + 17)
  local d, c = 32, 4
  local teacher = v100.randn({d, c})
  local x = v100.randn({4096 + 1024, d})
  local y = x:matmul(teacher):argmax(2)
  return x:narrow(1, 1, 4096), y:narrow(1, 1, 4096), x:narrow(1, 4097, 1024), y:narrow(1, 4097, 1024), d, c
end

-- The two stages, initialised from cfg.seed in the same order on every rank (so rank 0's first
-- stage and rank 1's second are the halves of the one-process MLP built from the same seed).
function M.build(cfg, d_in, classes)
  v100.manual_seed(cfg.seed)
  local h = cfg.hidden
  local first = nn.Sequential(nn.Linear(d_in, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh())
  local second = nn.Sequential(nn.Linear(h, h), nn.Tanh(), nn.Linear(h, classes))
  return first, second
end

-- The micro-batches of step s (1-based): the global batch is rows ((s-1)*batch ..) of a
-- permutation of the training rows (a new one each epoch), split into cfg.micro pieces.
function M.batches(cfg, x, y, s)
  local n = x.shape[1]
  local per_epoch = n // cfg.batch
  local epoch, k = (s - 1) // per_epoch, (s - 1) % per_epoch
  local perm = require('v100.data').permutation(n, cfg.seed + epoch)
  local idx = perm:narrow(1, k * cfg.batch + 1, cfg.batch)
  local xb, yb = x:index_select(1, idx), y:index_select(1, idx)
  local mb = cfg.batch // cfg.micro
  local out = {}
  for j = 1, cfg.micro do out[j] = {xb:narrow(1, (j - 1) * mb + 1, mb), yb:narrow(1, (j - 1) * mb + 1, mb)} end
  return out
end

local GRAD_TAG = 16384 -- activations go with tag j, their gradients with GRAD_TAG + j

local function sgd(cfg, module) return optim.SGD(module:parameters(), {lr = cfg.lr, momentum = cfg.momentum}) end

-- One step of rank 0 (the first stage) or rank 1 (the second) under cfg.schedule. Returns the
-- step's loss on rank 1 (the whole batch's mean), nil on rank 0.
local function pipeline_step(cfg, rank, stage, mbs)
  local m, mb, h = cfg.micro, cfg.batch // cfg.micro, cfg.hidden
  local acts, inputs, losses = {}, {}, {}
  local total = 0
  local function fwd(j) -- rank 0: the activation of micro-batch j, to be sent
    acts[j] = stage(mbs[j][1])
    return acts[j]:detach()
  end
  local function bwd0(j, g) acts[j]:backward(g); acts[j] = nil end
  local function fwd1(j, a) -- rank 1: from the received activation to the micro-batch's loss
    a.requires_grad = true
    inputs[j] = a
    losses[j] = F.cross_entropy(stage(a), mbs[j][2]) / m
    total = total + losses[j]:item()
  end
  local function bwd1(j) losses[j]:backward(); losses[j] = nil; return inputs[j].grad end
  if cfg.schedule == 'gpipe' then
    if rank == 0 then
      for j = 1, m do dist.send(fwd(j), 1, {tag = j}) end
      for j = 1, m do bwd0(j, dist.recv(v100.empty({mb, h}), 1, {tag = GRAD_TAG + j})) end
    else
      for j = 1, m do fwd1(j, dist.recv(v100.empty({mb, h}), 0, {tag = j})) end
      for j = 1, m do dist.send(bwd1(j), 0, {tag = GRAD_TAG + j}) end
    end
  else -- 1f1b
    if rank == 0 then
      dist.send(fwd(1), 1, {tag = 1})
      for j = 1, m do
        local g = v100.empty({mb, h})
        if j < m then
          local a = fwd(j + 1)
          dist.group(function()
            dist.send(a, 1, {tag = j + 1})
            dist.recv(g, 1, {tag = GRAD_TAG + j})
          end)
        else
          dist.recv(g, 1, {tag = GRAD_TAG + j})
        end
        bwd0(j, g)
      end
    else
      local a = dist.recv(v100.empty({mb, h}), 0, {tag = 1})
      for j = 1, m do
        fwd1(j, a)
        local g = bwd1(j)
        if j < m then
          a = v100.empty({mb, h})
          dist.group(function()
            dist.send(g, 0, {tag = GRAD_TAG + j})
            dist.recv(a, 0, {tag = j + 1})
          end)
        else
          dist.send(g, 0, {tag = GRAD_TAG + j})
        end
      end
    end
  end
  return rank == 1 and total or nil
end

-- Test accuracy through the pipeline, in batches of cfg.batch: rank 0 sends the first stage's
-- output, rank 1 counts. Returns the accuracy on rank 1, nil on rank 0.
local function pipeline_accuracy(cfg, rank, stage, x, y)
  local correct, n = 0, x.shape[1]
  v100.no_grad(function()
    for s = 1, n, cfg.batch do
      local len = math.min(cfg.batch, n - s + 1)
      if rank == 0 then
        dist.send(stage(x:narrow(1, s, len)):contiguous(), 1, {tag = 0})
      else
        local a = dist.recv(v100.empty({len, cfg.hidden}), 0, {tag = 0})
        correct = correct + stage(a):argmax(2):eq(y:narrow(1, s, len)):sum():item()
      end
    end
  end)
  return rank == 1 and correct / n or nil
end

-- Trains on 2 ranks. Returns {rank =, stage = this rank's module, losses = {per step} and
-- accuracy (rank 1 only)}. say(step, loss), if given, is called on rank 1 after each step.
function M.train_pipeline(cfg, say)
  if not dist.is_initialized() then dist.init() end
  if dist.size() ~= 2 then
    error(string.format('pipeline: needs exactly 2 ranks (one per stage), got world size %d: launch with mpirun -np 2',
      dist.size()), 2)
  end
  local rank = dist.rank()
  local xtr, ytr, xte, yte, d_in, classes = M.data(cfg)
  local first, second = M.build(cfg, d_in, classes)
  local stage = rank == 0 and first or second
  local opt = sgd(cfg, stage)
  local res = {rank = rank, stage = stage, losses = {}}
  for s = 1, cfg.steps do
    opt:zero_grad()
    local loss = pipeline_step(cfg, rank, stage, M.batches(cfg, xtr, ytr, s))
    opt:step()
    if rank == 1 then
      res.losses[s] = loss
      if say then say(s, loss) end
    end
  end
  res.accuracy = pipeline_accuracy(cfg, rank, stage, xte, yte)
  return res
end

-- The same MLP trained in one process on the same micro-batches (the reference).
function M.train_single(cfg)
  local xtr, ytr, xte, yte, d_in, classes = M.data(cfg)
  local first, second = M.build(cfg, d_in, classes)
  local o1, o2 = sgd(cfg, first), sgd(cfg, second)
  local res = {stages = {first, second}, losses = {}}
  for s = 1, cfg.steps do
    o1:zero_grad(); o2:zero_grad()
    local total = 0
    for _, b in ipairs(M.batches(cfg, xtr, ytr, s)) do
      local loss = F.cross_entropy(second(first(b[1])), b[2]) / cfg.micro
      total = total + loss:item()
      loss:backward()
    end
    o1:step(); o2:step()
    res.losses[s] = total
  end
  res.accuracy = v100.no_grad(function()
    return second(first(xte)):argmax(2):eq(yte):sum():item() / xte.shape[1]
  end)
  return res
end

if arg and arg[0] and arg[0]:match('([^/]*)$') == 'pipeline.lua' then
  local recipe = require 'v100.recipe'
  local opts, parser = recipe.options{
    name = 'pipeline.lua',
    description = 'A two-stage pipeline of an MLP over dist.send/recv: launch with mpirun -np 2.',
    epilog = 'Rank 1 prints the loss every --log-every steps and ends with "test accuracy: 0.xxxx".',
    { '--steps', DEFAULTS.steps, 'optimizer steps', recipe.integer{ min = 1 } },
    { '--batch', DEFAULTS.batch, 'global batch (a multiple of --micro)', recipe.integer{ min = 1 } },
    { '--micro', DEFAULTS.micro, 'micro-batches per step', recipe.integer{ min = 1, max = 16383 } },
    { '--lr', DEFAULTS.lr, 'SGD learning rate', recipe.number{ gt = 0 } },
    { '--momentum', DEFAULTS.momentum, 'SGD momentum', recipe.number{ min = 0, lt = 1 } },
    { '--hidden', DEFAULTS.hidden, 'hidden width (the activations sent between the stages)', recipe.integer{ min = 1 } },
    { '--schedule', DEFAULTS.schedule, 'micro-batch schedule', { 'gpipe', '1f1b' } },
    { '--data', DEFAULTS.data, 'synthetic (a random linear teacher) or Fashion-MNIST', { 'synthetic', 'fashion' } },
    { '--train-subset', DEFAULTS.train_subset, 'Fashion-MNIST: train on the first N images (0 = all)', recipe.integer{ min = 0 } },
    { '--test-subset', DEFAULTS.test_subset, 'Fashion-MNIST: test on the first N images (0 = all)', recipe.integer{ min = 0 } },
    { '--log-every', DEFAULTS.log_every, 'print the loss every N steps', recipe.integer{ min = 1 } },
    { '--seed', DEFAULTS.seed, 'seed of the data, initialisation and batch order', recipe.integer{ min = 0 } },
    { '--root', nil, 'Fashion-MNIST folder', argname = '<DIR>' },
  }
  dist.init()
  if dist.size() ~= 2 then
    parser:error(string.format('needs exactly 2 ranks (one per stage), got world size %d: launch with mpirun -np 2', dist.size()))
  end
  if opts.batch % opts.micro ~= 0 then
    parser:error(string.format('--batch (%d) must be a multiple of --micro (%d)', opts.batch, opts.micro))
  end
  local cfg = M.config(opts)
  local t0 = os.clock()
  local res = M.train_pipeline(cfg, function(s, loss)
    if s == 1 or s % cfg.log_every == 0 or s == cfg.steps then
      print(string.format('step %d loss %.4f', s, loss))
    end
  end)
  if res.rank == 1 then
    print(string.format('pipeline: %d steps, %s schedule, %d micro-batches of %d, %.2f s CPU on rank 1',
      cfg.steps, cfg.schedule, cfg.micro, cfg.batch // cfg.micro, os.clock() - t0))
    print(string.format('test accuracy: %.4f', res.accuracy))
  end
  os.exit(0)
end

return M
