-- recipes/fashion_cnn.lua: a small CNN on Fashion-MNIST with v100.nn and SGD with momentum.
--
--   conv 3x3 (W) -> BN -> ReLU -> max-pool 2   28x28 -> 14x14
--   conv 3x3 (2W) -> BN -> ReLU -> max-pool 2  14x14 -> 7x7
--   flatten -> linear 128 -> ReLU -> dropout -> linear 10
--
-- usage: v100lua recipes/fashion_cnn.lua [options]; --help lists them with their defaults.
-- Prints one line per epoch (mean training loss, test accuracy, time, training images/s), the
-- total time and a final line `test accuracy: 0.xxxx`. The same seed gives the same run
-- (initialisation, shuffling and dropout all come from seeded generators).
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local data = require 'v100.data'
local recipe = require 'v100.recipe'
local train = require 'v100.train'

local opts = recipe.options{
  name = 'fashion_cnn.lua',
  description = 'A small CNN (conv-BN-ReLU-pool x2, dropout, linear) on Fashion-MNIST, SGD with momentum.',
  epilog = 'Prints one line per epoch and ends with "test accuracy: 0.xxxx".',
  { '--epochs', 2, 'training epochs', recipe.integer{ min = 1 } },
  { '--batch', 64, 'batch size', recipe.integer{ min = 1 } },
  { '--lr', 0.05, 'peak learning rate', recipe.number{ gt = 0 } },
  { '--momentum', 0.9, 'SGD momentum', recipe.number{ min = 0, lt = 1 } },
  { '--width', 32, 'channels of the first convolution (the second has twice as many)', recipe.integer{ min = 1 } },
  { '--dropout', 0.25, 'dropout probability before the last layer', recipe.number{ min = 0, lt = 1 } },
  { '--train-subset', 0, 'train on the first N images (0 = all 60000)', recipe.integer{ min = 0 } },
  { '--test-subset', 0, 'test on the first N images (0 = all 10000)', recipe.integer{ min = 0 } },
  { '--schedule', 'cosine', 'per-step cosine decay of the lr to 0, or a constant lr', { 'cosine', 'constant' } },
  { '--device', nil, 'cpu, cuda or cuda:N (default: cuda:0 when a GPU is present, else cpu)', recipe.device },
  { '--seed', 1, 'seed of initialisation, shuffling and dropout', recipe.integer{ min = 0 } },
  { '--root', nil, 'Fashion-MNIST folder (default: ' .. data.FASHION_MNIST_ROOT .. ')', argname = '<DIR>' },
}

local dev = opts.device or v100.device()

-- u8 N x 28 x 28 -> standardised f32 N x 1 x 28 x 28 on the device; labels -> i64.
local train_img, train_lbl = recipe.fashion_mnist('train', opts.root, opts.train_subset)
local test_img, test_lbl = recipe.fashion_mnist('test', opts.root, opts.test_subset)
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

recipe.printf('fashion_cnn: %d train / %d test images, device %s, %d parameters, batch %d, lr %g',
  ntrain, ntest, dev, model:num_parameters(), opts.batch, opts.lr)

train.fit{
  epochs = opts.epochs, device = dev, model = model, opt = opt, sched = sched,
  batches = function(epoch)
    return data.batches(xtr, ytr, opts.batch, { shuffle = true, seed = opts.seed * 1000 + epoch })
  end,
  loss = function(xb, yb) return nn.cross_entropy(model(xb), yb) end,
  test = { x = xte, y = yte, forward = function(xb) return model(xb) end },
}
