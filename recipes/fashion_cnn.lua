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
local recipe = require 'v100.recipe'

local opts, usage = recipe.options{
  name = 'fashion_cnn.lua',
  defaults = { epochs = 2, batch = 64, lr = 0.05, momentum = 0.9, width = 32, dropout = 0.25,
    ['train-subset'] = 0, ['test-subset'] = 0, seed = 1, schedule = 'cosine' },
  optional = { device = true, root = true },
  numeric = { epochs = true, batch = true, lr = true, momentum = true, width = true, dropout = true,
    ['train-subset'] = true, ['test-subset'] = true, seed = true },
  choices = { schedule = { 'cosine', 'constant' } },
  usage = 'usage: v100lua recipes/fashion_cnn.lua [--epochs N] [--batch N] [--lr X] [--momentum X]\n' ..
    '         [--width W (first conv channels)] [--dropout P] [--train-subset N (0 = all 60000)]\n' ..
    '         [--test-subset N (0 = all 10000)] [--device cpu|cuda|cuda:N] [--seed N] [--root DIR]\n' ..
    '         [--schedule cosine|constant (per-step cosine decay of the lr to 0, or a constant lr)]\n',
}
recipe.check_integers(opts, usage, { 'epochs', 'batch', 'width', 'train-subset', 'test-subset', 'seed' },
  { ['train-subset'] = true, ['test-subset'] = true, seed = true })
if opts.lr <= 0 then usage('--lr must be positive') end
if opts.dropout < 0 or opts.dropout >= 1 then usage('--dropout must be in [0, 1)') end

local dev = opts.device or v100.device()
local clock, sync = recipe.clock, recipe.syncer(dev)

-- u8 N x 28 x 28 -> standardised f32 N x 1 x 28 x 28 on the device; labels -> i64.
local train_img, train_lbl = recipe.fashion_mnist('train', opts.root, opts['train-subset'])
local test_img, test_lbl = recipe.fashion_mnist('test', opts.root, opts['test-subset'])
local xtr, ytr = recipe.to_device(train_img, train_lbl, dev, 'image')
local xte, yte = recipe.to_device(test_img, test_lbl, dev, 'image')
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
  local acc = recipe.accuracy(function(xb) return model(xb) end, xte, yte)
  model:train()
  return acc
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
  recipe.printf('epoch %d/%d  loss %.4f  test acc %.4f  images/s %d', epoch, opts.epochs,
    loss_sum:item() / nb, acc, math.floor(ntrain / dt + 0.5))
end
print(string.format('test accuracy: %.4f', acc))
