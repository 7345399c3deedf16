-- recipes/fashion_cnn.lua: a small CNN on Fashion-MNIST with v100.nn and SGD with momentum.
--
--   conv 3x3 (W) -> BN -> ReLU -> max-pool 2   28x28 -> 14x14
--   conv 3x3 (2W) -> BN -> ReLU -> max-pool 2  14x14 -> 7x7
--   flatten -> linear 128 -> ReLU -> dropout -> linear 10
--
-- usage: v100lua recipes/fashion_cnn.lua [--epochs N] [--batch N] [--lr X] [--momentum X]
--          [--width W] [--dropout P] [--train-subset N] [--test-subset N] [--device cpu|cuda|cuda:N]
--          [--seed N] [--root DIR] [--schedule cosine|constant]
-- Prints one line per epoch (mean training loss, test accuracy, training images/s) and a final
-- line `test accuracy: 0.xxxx`. The same seed gives the same run (initialisation, shuffling and
-- dropout all come from seeded generators).
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local data = require 'v100.data'

local opts = { epochs = 2, batch = 64, lr = 0.05, momentum = 0.9, width = 32, dropout = 0.25,
  ['train-subset'] = 0, ['test-subset'] = 0, device = nil, seed = 1, root = nil, schedule = 'cosine' }
local numeric = { epochs = true, batch = true, lr = true, momentum = true, width = true, dropout = true,
  ['train-subset'] = true, ['test-subset'] = true, seed = true }

local function usage(msg)
  local out = msg and io.stderr or io.stdout
  if msg then out:write('fashion_cnn.lua: ', msg, '\n') end
  out:write('usage: v100lua recipes/fashion_cnn.lua [--epochs N] [--batch N] [--lr X] [--momentum X]\n',
    '         [--width W (first conv channels)] [--dropout P] [--train-subset N (0 = all 60000)]\n',
    '         [--test-subset N (0 = all 10000)] [--device cpu|cuda|cuda:N] [--seed N] [--root DIR]\n',
    '         [--schedule cosine|constant (per-step cosine decay of the lr to 0, or a constant lr)]\n')
  os.exit(msg and 2 or 0)
end

do -- command line: --key value or --key=value
  local i = 1
  while i <= #arg do
    local a = arg[i]
    if a == '--help' or a == '-h' then usage() end
    local key, val = a:match('^%-%-([%w%-]+)=(.*)$')
    if not key then
      key = a:match('^%-%-([%w%-]+)$')
      if not key then usage('unexpected argument ' .. a) end
      i = i + 1
      val = arg[i]
      if val == nil then usage('missing value for --' .. key) end
    end
    if opts[key] == nil and key ~= 'device' and key ~= 'root' then usage('unknown option --' .. key) end
    if key == 'schedule' and val ~= 'cosine' and val ~= 'constant' then
      usage('--schedule is cosine or constant, got ' .. val)
    end
    if numeric[key] then
      local n = tonumber(val)
      if not n then usage('--' .. key .. ' needs a number, got ' .. val) end
      val = math.tointeger(n) or n
    end
    opts[key] = val
    i = i + 1
  end
end
for _, k in ipairs{ 'epochs', 'batch', 'width', 'train-subset', 'test-subset', 'seed' } do
  local v = opts[k]
  local nonneg = k == 'train-subset' or k == 'test-subset' or k == 'seed'
  if not math.tointeger(v) or v < 0 or (not nonneg and v == 0) then
    usage('--' .. k .. ' must be a ' .. (nonneg and 'non-negative' or 'positive') .. ' integer')
  end
end
if opts.lr <= 0 then usage('--lr must be positive') end
if opts.dropout < 0 or opts.dropout >= 1 then usage('--dropout must be in [0, 1)') end

local dev = opts.device or v100.device()
local is_cuda = dev:sub(1, 4) == 'cuda'
local clock = v100.io.time
local function sync() if is_cuda then v100.cuda.synchronize() end end
-- Fashion-MNIST pixel statistics (train set, pixels scaled to [0, 1]).
local MEAN, STD = 0.2860, 0.3530

-- u8 N x 28 x 28 -> standardised f32 N x 1 x 28 x 28 on the device; labels -> i64.
local function prepare(images, labels, n)
  if n > 0 and n < images.shape[1] then
    images, labels = images:narrow(1, 1, n), labels:narrow(1, 1, n)
  end
  local x = ((images:float() / 255) - MEAN) / STD
  return x:unsqueeze(2):contiguous():to(dev), labels:long():to(dev)
end

local train_img, train_lbl = data.fashion_mnist('train', { root = opts.root })
local test_img, test_lbl = data.fashion_mnist('test', { root = opts.root })
local xtr, ytr = prepare(train_img, train_lbl, opts['train-subset'])
local xte, yte = prepare(test_img, test_lbl, opts['test-subset'])
local ntrain, ntest = xtr.shape[1], xte.shape[1]

v100.manual_seed(opts.seed)
local W = opts.width
local model = nn.Sequential(
  nn.Conv2d(1, W, 3, { padding = 1 }), nn.BatchNorm2d(W), nn.ReLU(), nn.MaxPool2d(2),
  nn.Conv2d(W, 2 * W, 3, { padding = 1 }), nn.BatchNorm2d(2 * W), nn.ReLU(), nn.MaxPool2d(2),
  nn.Flatten(), nn.Linear(2 * W * 7 * 7, 128), nn.ReLU(), nn.Dropout(opts.dropout), nn.Linear(128, 10)
):to(dev)
local opt = optim.SGD(model:parameters(), { lr = opts.lr, momentum = opts.momentum })
local steps_per_epoch = (ntrain + opts.batch - 1) // opts.batch
local sched = opts.schedule == 'cosine' and optim.schedule.warmup_cosine{ total = opts.epochs * steps_per_epoch }
  or optim.schedule.constant{}

print(string.format('fashion_cnn: %d train / %d test images, device %s, %d parameters, batch %d, lr %g',
  ntrain, ntest, dev, model:num_parameters(), opts.batch, opts.lr))

-- Accuracy on the test images in eval mode, without recording.
local function evaluate()
  model:eval()
  local correct = v100.no_grad(function()
    local c = v100.zeros({}, { dtype = 'i64', device = dev })
    for xb, yb in data.batches(xte, yte, 1000) do
      c = c + model(xb):argmax(2):eq(yb):sum()
    end
    return c:item()
  end)
  model:train()
  return correct / ntest
end

local acc = 0
for epoch = 1, opts.epochs do
  model:train()
  -- the loss sum stays on the device: one host read per epoch
  local loss_sum = v100.zeros({}, { device = dev })
  local nb = 0
  sync()
  local t0 = clock()
  for xb, yb in data.batches(xtr, ytr, opts.batch, { shuffle = true, seed = opts.seed * 1000 + epoch }) do
    local loss = nn.cross_entropy(model(xb), yb)
    opt:zero_grad()
    loss:backward()
    sched:step(opt)
    opt:step()
    loss_sum = loss_sum + loss:detach()
    nb = nb + 1
  end
  sync()
  local dt = clock() - t0
  acc = evaluate()
  print(string.format('epoch %d/%d  loss %.4f  test acc %.4f  images/s %d', epoch, opts.epochs,
    loss_sum:item() / nb, acc, math.floor(ntrain / dt + 0.5)))
  io.stdout:flush()
end
print(string.format('test accuracy: %.4f', acc))
