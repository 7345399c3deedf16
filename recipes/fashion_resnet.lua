-- recipes/fashion_resnet.lua: ResNet-18 (small_input: 3x3 stride-1 stem, no max-pool; 1 input
-- channel) on Fashion-MNIST, trained with SGD + Nesterov momentum, weight decay off for BN and
-- biases, label smoothing, linear warmup then cosine decay, and random-crop (pad 2) +
-- horizontal-flip augmentation done on the device with tensor ops.
--
-- usage: v100lua recipes/fashion_resnet.lua [options]; --help lists them with their defaults.
-- Prints one line per epoch (mean training loss, test accuracy when evaluated, epoch time,
-- training images/s), then `total time: N s (...)` and `test accuracy: 0.xxxx`. Measured on an H200
-- with the defaults (2026-11-30): 0.9479 and 0.9451 (nchw, two runs), 0.9462 (--layout nhwc); ~40 s
-- for 15 epochs in NCHW (docs/MODELS.md has the channels-last figures).
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local data = require 'v100.data'
local resnet = require 'v100.models.resnet'
local recipe = require 'v100.recipe'
local train = require 'v100.train'

local opts, parser = recipe.options{
  name = 'fashion_resnet.lua',
  description = 'ResNet-18 (small-image stem) on Fashion-MNIST: SGD + Nesterov, label smoothing, ' ..
    'warmup + cosine, random-crop and flip augmentation on the device.',
  epilog = 'Prints one line per epoch and ends with "test accuracy: 0.xxxx".',
  { '--epochs', 15, 'training epochs', recipe.integer{ min = 1 } },
  { '--batch', 256, 'batch size (the last partial batch of an epoch is dropped)', recipe.integer{ min = 1 } },
  { '--lr', 0.1, 'peak learning rate', recipe.number{ gt = 0 } },
  { '--wd', '5e-4', 'weight decay (not on batch norm and biases)', recipe.number{ min = 0 } },
  { '--smoothing', 0.1, 'label smoothing', recipe.number{ min = 0, lt = 1 } },
  { '--warmup-epochs', 1, 'epochs of linear lr warmup (fractions allowed)', recipe.number{ min = 0 } },
  { '--device', nil, 'cpu, cuda or cuda:N (default: cuda:0 when a GPU is present, else cpu)', recipe.device },
  { '--seed', 1, 'seed of initialisation, shuffling and augmentation', recipe.integer{ min = 0 } },
  { '--layout', 'nchw', 'memory layout of activations and convolution weights', { 'nchw', 'nhwc' } },
  { '--train-subset', 0, 'train on the first N images (0 = all 60000)', recipe.integer{ min = 0 } },
  { '--test-subset', 0, 'test on the first N images (0 = all 10000)', recipe.integer{ min = 0 } },
  { '--eval-every', 1, 'test every N epochs (and after the last)', recipe.integer{ min = 1 } },
  { '--root', nil, 'Fashion-MNIST folder (default: ' .. data.FASHION_MNIST_ROOT .. ')', argname = '<DIR>' },
  { '--tf32', 'on', 'f32 convolutions and GEMMs on TF32 tensor cores (cuda only)', { 'on', 'off' } },
  { '--cudnn-benchmark', 'off', 'convolution algorithms by timing on first use (cuda only)', { 'on', 'off' } },
  { '--amp', 'O0', 'mixed precision: O0 f32, O1 autocast, O2 half model + f32 masters, O3 pure half (docs/AMP.md)',
    { 'O0', 'O1', 'O2', 'O3' } },
  { '--dtype', 'fp16', 'half dtype of --amp O1-O3 (fp16 adds a loss scaler)', { 'fp16', 'bf16' } },
  { '--graph', 'off', 'replay each training step as one CUDA graph (cuda only)', { 'on', 'off' } },
}

local dev = opts.device or v100.device()
if opts.graph == 'on' and not dev:match('^cuda') then parser:error("option '--graph' on needs a CUDA device, got " .. dev) end
-- As PyTorch does for convolutions by default: f32 convolutions and GEMMs may use TF32 tensor cores.
v100.set_allow_tf32(opts.tf32 == 'on')
v100.set_cudnn_benchmark(opts.cudnn_benchmark == 'on')
local PAD, SIZE = 2, 28
local policy = amp.policy(opts.amp, { dtype = opts.dtype })
-- O2/O3 models take half inputs; O0/O1 f32 (O1's autocast casts where it runs in half).
local half_input = opts.amp == 'O2' or opts.amp == 'O3'

local function prepare(images, pad) return recipe.pad_standardise(images, pad, dev) end

local train_img, train_lbl = recipe.fashion_mnist('train', opts.root, opts.train_subset)
local test_img, test_lbl = recipe.fashion_mnist('test', opts.root, opts.test_subset)
local xtr, ytr = prepare(train_img, PAD), train_lbl:long():to(dev)
local xte, yte = prepare(test_img, 0), test_lbl:long():to(dev)
local ntrain, ntest = xtr.shape[1], xte.shape[1]
local steps_per_epoch = ntrain // opts.batch -- drop_last: every batch is full (BN statistics)
if steps_per_epoch == 0 then
  parser:error(('option \'--batch\' (%d) is larger than the training set (%d images)'):format(opts.batch, ntrain))
end

local function augment(xb) return recipe.crop_flip(xb, PAD, SIZE) end

local function to_layout(x)
  if half_input then x = x:to(policy.dtype) end
  if opts.layout == 'nhwc' then return x:to_channels_last() end
  return x
end

v100.manual_seed(opts.seed)
local model = resnet.resnet18{ classes = 10, small_input = true, in_channels = 1 }
model:to{ device = dev, layout = opts.layout }
policy:convert(model)
local scaler = opts.amp ~= 'O0' and opts.dtype == 'fp16' and amp.Scaler() or nil
local opt = optim.SGD(model:named_parameters(), policy:optimizer_opts{ lr = opts.lr, momentum = 0.9, nesterov = true,
  weight_decay = opts.wd, no_decay = optim.no_decay_bias_and_norm, capturable = opts.graph == 'on' })
local sched = optim.schedule.warmup_cosine{ warmup = math.floor(opts.warmup_epochs * steps_per_epoch + 0.5),
  total = opts.epochs * steps_per_epoch }

recipe.printf('fashion_resnet: resnet18 small_input, %d train / %d test images, device %s, layout %s, ' ..
  '%d parameters, batch %d, lr %g, wd %g, smoothing %g, %d epochs, tf32 %s, amp %s%s, graph %s', ntrain, ntest, dev,
  opts.layout, model:num_parameters(), opts.batch, opts.lr, opts.wd, opts.smoothing, opts.epochs, opts.tf32, opts.amp,
  opts.amp == 'O0' and '' or (' ' .. opts.dtype .. (scaler and ' + loss scaling' or '')
    .. (opt.stochastic_rounding and ' + stochastic rounding' or '')), opts.graph)

train.fit{
  epochs = opts.epochs, device = dev, model = model, eval_every = opts.eval_every,
  batches = function(epoch)
    return data.batches(xtr, ytr, opts.batch, { shuffle = true, drop_last = true, seed = opts.seed * 1000 + epoch })
  end,
  step = train.stepper{
    opt = opt, sched = sched, policy = policy, scaler = scaler, graph = opts.graph == 'on',
    loss = function(xb, yb)
      return nn.cross_entropy(model(to_layout(augment(xb))):float(), yb, { smoothing = opts.smoothing })
    end,
  },
  test = { x = xte, y = yte, forward = function(xb)
    return policy:autocast(function() return model(to_layout(xb)):float() end)
  end },
}
