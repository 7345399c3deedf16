-- recipes/resnet50.lua: ResNet training on images, the recipe users run first.
--
--   v100lua recipes/resnet50.lua                                  # Fashion-MNIST (see --help)
--   v100lua recipes/resnet50.lua --data /data/imagenet --arch resnet50 --amp O2
--   mpirun -np 8 v100lua recipes/resnet50.lua --data /data/imagenet --checkpoint-dir ckpt
--
-- With no options it trains a ResNet-18 on Fashion-MNIST: on a machine without a GPU a narrow one
-- (width 8, a subset, 2 epochs: a few minutes on a laptop), with a GPU the full one (30 epochs,
-- AMP, channels-last, the step as a CUDA graph). `--data DIR` is an ImageFolder (DIR/train/<class>/
-- *.JPEG, DIR/val/<class>/*.JPEG) decoded by C worker threads; `--data synthetic` times the
-- training step on random images. docs/RESNET.md has every option and what a run writes.
--
-- It is a script to copy and edit: the data, the model, the optimizer and the loop are all below;
-- the library pieces it calls are v100.data (images), v100.train (one step with AMP, DataParallel
-- and CUDA graphs), v100.log (metrics, JSON lines, TensorBoard) and v100.checkpoint.
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local dist = require 'v100.dist'
local data = require 'v100.data'
local resnet = require 'v100.models.resnet'
local recipe = require 'v100.recipe'
local train = require 'v100.train'
local log = require 'v100.log'
local ckpt = require 'v100.checkpoint'
local telemetry = require 'v100.telemetry'

dist.init() -- MPI (+ NCCL on GPUs) under mpirun/srun; world size 1 otherwise
local RANK, WORLD = dist.rank(), dist.size()
local ARCHS = { 'resnet18', 'resnet34', 'resnet50', 'resnet101', 'resnet152' }

local opts, parser = recipe.options{
  name = 'resnet50.lua',
  description = 'ResNet training: Fashion-MNIST (default), an ImageFolder of JPEGs, or synthetic images. ' ..
    'Without --data on a machine without a GPU: a width-8 ResNet-18 on 12000 Fashion-MNIST images for 2 epochs ' ..
    '(a few minutes); with a GPU: ResNet-18 on all of Fashion-MNIST for 30 epochs, AMP O1 fp16, NHWC, CUDA graph.',
  epilog = 'Prints a header, one line per epoch (train loss, val top-1/top-5, images/s) and ends with ' ..
    '"evaluated on: <which images>" and "test accuracy: 0.xxxx" (the last top-1 on them: for Fashion-MNIST its test ' ..
    'set, never trained on). --log-dir adds metrics.jsonl and TensorBoard event files.',
  { '--data', 'fashion-mnist', 'fashion-mnist, synthetic, or an ImageFolder root holding train/ and val/', argname = '<DATA>' },
  { '--fashion-root', data.FASHION_MNIST_ROOT, 'the Fashion-MNIST IDX folder of --data fashion-mnist', argname = '<DIR>' },
  { '--arch', 'auto', 'auto: resnet18 on fashion-mnist, else resnet50', { 'auto', table.unpack(ARCHS) } },
  { '--width', 'auto', 'channels of the first stage; auto: 64, or 8 for fashion-mnist on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--epochs', 'auto', 'training epochs; auto: fashion-mnist 30 on a GPU, 2 on a CPU; ImageFolder 90; synthetic 2', recipe.integer{ min = 1, auto = true } },
  { '--batch-size', 'auto', 'images per step per rank; auto: 256 on a GPU, 64 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--lr', 'auto', 'learning rate per 256 images; the run uses lr * batch-size * ranks / 256 (linear scaling rule); auto: 0.1, or 0.4 for the narrow fashion-mnist net on a CPU', recipe.number{ gt = 0, auto = true } },
  { '--warmup-epochs', 'auto', 'epochs of linear warmup, fractions allowed; auto: fashion-mnist 1 on a GPU, 0.2 on a CPU; else 5', recipe.number{ min = 0, auto = true } },
  { '--label-smoothing', 0.1, 'label smoothing of the cross-entropy', recipe.number{ min = 0, lt = 1 } },
  { '--weight-decay', 'auto', 'weight decay, not on batch norm and biases; auto: 5e-4 on fashion-mnist, else 1e-4', recipe.number{ min = 0, auto = true } },
  { '--momentum', 0.9, 'momentum of SGD and LARS (Nesterov for sgd)', recipe.number{ min = 0, lt = 1 } },
  { '--optimizer', 'sgd', 'sgd (Nesterov momentum) or lars (layer-wise trust ratio, for large batches)', { 'sgd', 'lars' } },
  { '--amp', 'auto', 'O0 f32, O1 autocast, O2 half model + f32 masters, O3 pure half; auto: O1 on a GPU, O0 on a CPU', { 'auto', 'O0', 'O1', 'O2', 'O3' } },
  { '--dtype', 'fp16', 'half dtype of --amp O1-O3 (fp16 adds a loss scaler)', { 'fp16', 'bf16' } },
  { '--layout', 'auto', 'memory layout of activations and weights; auto: nhwc on a GPU, nchw on a CPU', { 'auto', 'nchw', 'nhwc' } },
  { '--graph', 'auto', 'the training step as one replayed CUDA graph; auto: on with one GPU rank, else off', { 'auto', 'on', 'off' } },
  { '--workers', 'auto', 'JPEG decoding threads per rank; auto: the cores / local ranks, at most 16', recipe.integer{ min = 1, auto = true } },
  { '--prefetch', 4, 'batches decoded ahead of use (ImageFolder)', recipe.integer{ min = 1 } },
  { '--decoder', 'cpu', 'JPEG decoding: cpu (libjpeg-turbo in the workers), nvjpeg (on the GPU), auto (nvjpeg when built with it and on a GPU)', { 'cpu', 'nvjpeg', 'auto' } },
  { '--image-size', 224, 'training crop and validation centre crop, pixels (ImageFolder)', recipe.integer{ min = 8 } },
  { '--val-resize', 256, 'validation: the shorter side is resized to this before the centre crop', recipe.integer{ min = 8 } },
  { '--checkpoint-dir', 'none', 'write checkpoints here (every epoch, and every --checkpoint-every steps)', argname = '<DIR>' },
  { '--checkpoint-every', 0, 'also checkpoint every N steps (0: only at the end of each epoch)', recipe.integer{ min = 0 } },
  { '--keep', 3, 'checkpoints kept in --checkpoint-dir (the oldest are removed)', recipe.integer{ min = 1 } },
  { '--resume', false, 'continue from the latest checkpoint in --checkpoint-dir (any rank count)' },
  { '--evaluate', false, 'only evaluate on the validation set (with --pretrained or --resume)' },
  { '--pretrained', 'none', 'start from these weights (safetensors with torchvision names)', argname = '<FILE>' },
  { '--seed', 1, 'seed of initialisation, data order and augmentation', recipe.integer{ min = 0 } },
  { '--log-dir', 'none', 'write metrics.jsonl and TensorBoard event files here (rank 0)', argname = '<DIR>' },
  { '--log-interval', 50, 'steps between logged training metrics', recipe.integer{ min = 1 } },
  { '--device', 'auto', 'cpu, cuda or cuda:N; auto: this rank\'s GPU when there is one, else cpu', recipe.device_auto },
  { '--train-subset', 'auto', 'fashion-mnist: train on the first N images (0: all); auto: 12000 on a CPU, else all', recipe.integer{ min = 0, auto = true } },
  { '--val-subset', 'auto', 'fashion-mnist: validate on the first N images (0: all); auto: 2000 on a CPU, else all', recipe.integer{ min = 0, auto = true } },
  { '--steps-per-epoch', 'auto', 'cap on the steps of an epoch; auto: 100 for synthetic, else all', recipe.integer{ min = 1, auto = true } },
  { '--eval-every', 1, 'validate every N epochs (and after the last)', recipe.integer{ min = 1 } },
  { '--tf32', 'on', 'f32 convolutions and GEMMs on TF32 tensor cores (cuda only)', { 'on', 'off' } },
  table.unpack(telemetry.options()), -- --telemetry, --telemetry-interval-ms, --prometheus-* (docs/OPERATIONS.md)
}

-- ---- defaults that depend on the machine and the data ----
for _, k in ipairs{ 'checkpoint_dir', 'pretrained', 'log_dir' } do
  if opts[k] == 'none' then opts[k] = nil end
end
local dev = opts.device == 'auto' and v100.device() or opts.device
local gpu = dev:match('^cuda') ~= nil
local kind = (opts.data == 'fashion-mnist' or opts.data == 'synthetic') and opts.data or 'folder'
local fashion, cpu_fashion = kind == 'fashion-mnist', kind == 'fashion-mnist' and not gpu
local function default(v, d) if v == 'auto' then return d end return v end
opts.arch = default(opts.arch, fashion and 'resnet18' or 'resnet50')
opts.width = default(opts.width, cpu_fashion and 8 or 64)
opts.epochs = default(opts.epochs, fashion and (gpu and 30 or 2) or kind == 'synthetic' and 2 or 90)
opts.batch_size = default(opts.batch_size, gpu and 256 or 64)
opts.lr = default(opts.lr, cpu_fashion and opts.width == 8 and 0.4 or 0.1)
opts.warmup_epochs = default(opts.warmup_epochs, fashion and (gpu and 1 or 0.2) or 5)
opts.weight_decay = default(opts.weight_decay, fashion and 5e-4 or 1e-4)
opts.amp = default(opts.amp, gpu and 'O1' or 'O0')
opts.layout = default(opts.layout, gpu and 'nhwc' or 'nchw')
opts.graph = default(opts.graph, (gpu and WORLD == 1) and 'on' or 'off')
opts.workers = default(opts.workers, nil) -- the loader's default: the cores / local ranks, <= 16
opts.train_subset = default(opts.train_subset, cpu_fashion and 12000 or 0)
opts.val_subset = default(opts.val_subset, cpu_fashion and 2000 or 0)
opts.steps_per_epoch = default(opts.steps_per_epoch, kind == 'synthetic' and 100 or false)
if opts.graph == 'on' and not gpu then parser:error("option '--graph' on needs a CUDA device, got " .. dev) end
if opts.graph == 'on' and WORLD > 1 then parser:error("option '--graph' on is for one rank (DataParallel steps are not captured yet)") end
if (opts.resume or opts.checkpoint_every > 0) and not opts.checkpoint_dir then
  parser:error(opts.resume and "option '--resume' needs --checkpoint-dir" or "option '--checkpoint-every' needs --checkpoint-dir")
end
if opts.evaluate and not (opts.pretrained or opts.resume) then
  parser:error("option '--evaluate' needs --pretrained FILE or --resume (weights to evaluate)")
end
v100.set_allow_tf32(opts.tf32 == 'on')
local policy = amp.policy(opts.amp, { dtype = opts.dtype })
local half_input = opts.amp == 'O2' or opts.amp == 'O3'
local B = opts.batch_size

-- ---- data: a source gives the shapes and the batches of an epoch from a batch index on ----
-- src.batches(epoch, start) -> iterator of (k, x, y), k = start + 1, ...; x f32 on dev (NCHW or
-- channels-last), y i64; every rank gets its shard. src.val() -> iterator of (x, y) over this
-- rank's share of the validation set (each image on exactly one rank).
local function fashion_source()
  local PAD, SIZE = 2, 28
  local tr_img, tr_lbl = recipe.fashion_mnist('train', opts.fashion_root, opts.train_subset)
  local te_img, te_lbl = recipe.fashion_mnist('test', opts.fashion_root, opts.val_subset)
  local xtr, ytr = recipe.pad_standardise(tr_img, PAD, dev), tr_lbl:long():to(dev)
  local xte, yte = recipe.pad_standardise(te_img, 0, dev), te_lbl:long():to(dev)
  local sampler = dist.DistributedSampler(xtr.shape[1], { seed = opts.seed * 1000, drop_last = true })
  -- Validation is on Fashion-MNIST's own test set (t10k, never trained on), its first
  -- --val-subset images; the header and the last lines say so.
  local src = { classes = 10, channels = 1, small_input = true, ntrain = xtr.shape[1], nval = xte.shape[1],
    steps = #sampler // B, val_kind = 'test',
    val_what = string.format('%s of the 10000 images of Fashion-MNIST\'s test set (t10k)',
      xte.shape[1] < 10000 and ('the first ' .. xte.shape[1]) or 'all') }
  function src.batches(epoch, start)
    sampler:set_epoch(epoch)
    local idx = sampler:indices():to(dev)
    local k = start
    return function()
      if k >= src.steps then return nil end
      k = k + 1
      local i <close> = idx:narrow(1, (k - 1) * B + 1, B)
      local xb <close> = xtr:index_select(1, i)
      return k, recipe.crop_flip(xb, PAD, SIZE), ytr:index_select(1, i)
    end
  end
  function src.val()
    local mine = v100.arange(RANK, xte.shape[1], WORLD, { dtype = 'i64', device = dev })
    local pos, n = 0, mine.shape[1]
    return function()
      if pos >= n then return nil end
      local len = math.min(1000, n - pos)
      local i <close> = mine:narrow(1, pos + 1, len)
      pos = pos + len
      return xte:index_select(1, i), yte:index_select(1, i)
    end
  end
  return src
end

local function folder_source()
  local root = opts.data
  local train_ds = data.ImageFolder(root .. '/train')
  local val_ds = data.ImageFolder(root .. '/val')
  if opts.train_subset > 0 or opts.val_subset > 0 then
    parser:error("options '--train-subset' and '--val-subset' are for fashion-mnist; for an ImageFolder make a smaller folder")
  end
  -- With AMP the loader writes half batches (half the bytes to assemble and copy; O1's autocast
  -- casts the input of the first convolution to half anyway).
  local common = { batch_size = B, workers = opts.workers, prefetch = opts.prefetch, device = dev,
    rank = RANK, world_size = WORLD, seed = opts.seed, layout = opts.layout, decoder = opts.decoder,
    dtype = opts.amp == 'O0' and 'f32' or policy.dtype }
  local function loader(ds, o)
    for k, v in pairs(common) do if o[k] == nil then o[k] = v end end
    return data.ImageLoader(ds, o)
  end
  local tl = loader(train_ds, { transform = 'train', shuffle = true, drop_last = true, size = opts.image_size })
  -- Validation shards are padded to equal length across ranks (the distributed sampler's rule), so
  -- with several ranks a few images count twice, as in torchvision's reference scripts.
  local vl = loader(val_ds, { transform = 'val', shuffle = false, drop_last = false, size = opts.image_size,
    resize = opts.val_resize })
  -- Images of 64 pixels or less (CIFAR-sized, the Fashion-MNIST folder) take the 3x3 stem.
  local src = { classes = #train_ds.classes, channels = 3, small_input = opts.image_size <= 64, ntrain = train_ds.n,
    nval = val_ds.n, steps = tl.batches_per_epoch, loaders = { tl, vl }, val_kind = 'val',
    val_what = string.format('the %d images of %s/val', val_ds.n, root) }
  function src.batches(epoch, start) return tl:epoch(epoch, { start = start }) end
  function src.val()
    local it = vl:epoch(1)
    return function()
      local _, x, y = it()
      return x, y
    end
  end
  return src
end

local function synthetic_source()
  local size = 224
  -- Made once in the step's layout and input dtype, so to_input has nothing to convert.
  local x = v100.randn({ B, 3, size, size }, { device = dev })
  if opts.layout == 'nhwc' then x = x:to_channels_last() end
  if half_input then x = x:to(policy.dtype) end
  local y = (v100.rand({ B }, { device = dev }) * 1000):floor():long()
  local src = { classes = 1000, channels = 3, small_input = false, ntrain = B * opts.steps_per_epoch, nval = 0,
    steps = opts.steps_per_epoch }
  function src.batches(_, start)
    local k = start
    return function()
      if k >= src.steps then return nil end
      k = k + 1
      return k, x, y
    end
  end
  src.val = nil
  return src
end

local src = ({ ['fashion-mnist'] = fashion_source, synthetic = synthetic_source, folder = folder_source })[kind]()
local steps_per_epoch = src.steps
if opts.steps_per_epoch then steps_per_epoch = math.min(steps_per_epoch, opts.steps_per_epoch) end
src.steps = steps_per_epoch
if steps_per_epoch == 0 then
  parser:error(string.format("option '--batch-size' (%d) times %d ranks is larger than the training set (%d images)",
    B, WORLD, src.ntrain))
end

-- ---- model, optimizer, schedule ----
v100.manual_seed(opts.seed)
local model = resnet[opts.arch]{ classes = src.classes, small_input = src.small_input, in_channels = src.channels,
  width = opts.width }
if opts.pretrained then ckpt.load_pretrained(model, opts.pretrained) end
model:to{ device = dev, layout = opts.layout }
policy:convert(model)
local dp = WORLD > 1 and dist.DataParallel(model) or nil
local forward = dp or model
local global_batch = B * WORLD
local lr = optim.scale_lr(opts.lr, global_batch, 256)
local make_opt = opts.optimizer == 'lars' and optim.LARS or optim.SGD
local opt = make_opt(model:named_parameters(), policy:optimizer_opts{ lr = lr, momentum = opts.momentum,
  nesterov = opts.optimizer == 'sgd', weight_decay = opts.weight_decay, no_decay = optim.no_decay_bias_and_norm,
  capturable = opts.graph == 'on' })
local total_steps = opts.epochs * steps_per_epoch
local sched = optim.schedule.warmup_cosine{ warmup = math.floor(opts.warmup_epochs * steps_per_epoch + 0.5),
  total = total_steps }
local scaler = opts.amp ~= 'O0' and opts.dtype == 'fp16' and amp.Scaler() or nil

local function to_input(x)
  if half_input then x = x:to(policy.dtype) end
  if opts.layout == 'nhwc' then x = x:to_channels_last() end
  return x
end

-- ---- resume ----
local first_epoch, first_batch, step = 1, 0, 0
if opts.resume then
  -- The weights, optimizer and scaler state, and every rank's generator (the augmentation's).
  local c = ckpt.load(opts.checkpoint_dir)
  ckpt.restore(c, { model = model, optimizer = opt, scaler = scaler })
  local st = c.state or {}
  step = c.step
  sched.t = step
  local ld = st.loader or {}
  first_epoch = ld.epoch or (c.epoch + 1)
  -- The same rank count continues at the next batch; another one at the next sample of the
  -- epoch, rounded down to a whole global batch.
  first_batch = (ld.world == WORLD and ld.batch) or (ld.samples or 0) // global_batch
  if first_batch >= steps_per_epoch then first_epoch, first_batch = first_epoch + 1, 0 end
end

local logger = log.Logger{ dir = opts.log_dir, jsonl = opts.log_dir ~= nil, tensorboard = opts.log_dir ~= nil }
local sync = recipe.syncer(dev)
-- GPU power, energy, clocks (NVML, read-only) beside the metrics, energy per image, Prometheus
local tel = telemetry.from_options(opts, dev, 'image', 'resnet50')

dist.print(string.format('resnet50.lua: %s%s on %s (%d classes, %d train / %d %s images), %d rank%s, device %s, ' ..
  'batch %d per rank (lr %g), %d epochs x %d steps, %s, amp %s%s, layout %s, graph %s, %d parameters%s',
  opts.arch, opts.width ~= 64 and (' width ' .. opts.width) or '', kind == 'folder' and opts.data or kind, src.classes,
  src.ntrain, src.nval, src.val_kind or 'val', WORLD, WORLD > 1 and 's' or '', dev, B, lr, opts.epochs, steps_per_epoch, opts.optimizer,
  opts.amp, opts.amp == 'O0' and '' or (' ' .. opts.dtype .. (scaler and ' + loss scaling' or '')), opts.layout,
  opts.graph, model:num_parameters(), opts.resume and string.format(', resumed at epoch %d batch %d', first_epoch, first_batch) or ''))
dist.print(tel:describe())
io.stdout:flush()

-- ---- validation: top-1, top-5 and loss over every validation image, across the ranks ----
local function validate()
  if not src.val then return nil end
  if dp then dp:broadcast_buffers() end -- every rank evaluates with rank 0's batch norm statistics
  model:eval()
  local tot = v100.no_grad(function()
    local loss_sum = v100.zeros({}, { device = dev })
    local c1, c5, n = 0, 0, 0
    for x, y in src.val() do
      local z <close> = policy:autocast(function() return forward(to_input(x)):float() end)
      local l <close> = nn.cross_entropy(z, y, { reduction = 'sum' })
      loss_sum = loss_sum + l
      local c = log.topk_correct(z, y, { 1, 5 })
      c1, c5, n = c1 + c[1], c5 + c[2], n + y.shape[1]
    end
    return log.reduce({ c1, c5, n, loss_sum:item() }, 'sum')
  end)
  model:train()
  return { top1 = tot[1] / tot[3], top5 = tot[2] / tot[3], loss = tot[4] / tot[3], n = tot[3] }
end

-- A checkpoint during `epoch` after `batch` steps of it (batch = steps_per_epoch: at its end); the
-- loader position is where a resumed run starts.
local function checkpoint(epoch, batch)
  if not opts.checkpoint_dir then return end
  local next_epoch, next_batch = epoch, batch
  if batch >= steps_per_epoch then next_epoch, next_batch = epoch + 1, 0 end
  -- Collective (every rank calls it; rank 0 writes). Saves every rank's generator state too.
  ckpt.save(opts.checkpoint_dir, { model = model, optimizer = opt, scaler = scaler, epoch = epoch, step = step,
    keep = opts.keep, state = { loader = { epoch = next_epoch, batch = next_batch, samples = next_batch * global_batch,
      world = WORLD },
      args = { arch = opts.arch, data = opts.data, width = opts.width } } })
end

if opts.evaluate then
  local v = validate()
  dist.print(string.format('evaluate: %d images  top-1 %.4f  top-5 %.4f  loss %.4f', v.n, v.top1, v.top5, v.loss))
  dist.print('evaluated on: ' .. src.val_what)
  dist.print(string.format('test accuracy: %.4f', v.top1))
  logger:log(step, { top1 = v.top1, top5 = v.top5, loss = v.loss }, { split = 'val' })
  logger:close()
  tel:close()
  return
end

-- ---- the training loop ----
local step_fn = train.stepper{ opt = opt, sched = sched, policy = policy, scaler = scaler, dp = dp,
  graph = opts.graph == 'on',
  loss = function(x, y) return nn.cross_entropy(forward(to_input(x)):float(), y, { smoothing = opts.label_smoothing }) end }

local clock = recipe.clock
local t_run, last = clock(), nil
for epoch = first_epoch, opts.epochs do
  model:train()
  local start = epoch == first_epoch and first_batch or 0
  local bar = log.Progress{ total = steps_per_epoch, label = string.format('epoch %d/%d', epoch, opts.epochs) }
  local loss_sum = v100.zeros({}, { device = dev })
  local win_sum, win_n = v100.zeros({}, { device = dev }), 0
  sync()
  tel:begin()
  local t0, t_win, n_done = clock(), clock(), 0
  for k, x, y in src.batches(epoch, start) do
    local loss <close> = step_fn(x, y)
    loss_sum:add_(loss)
    win_sum:add_(loss)
    win_n, n_done, step = win_n + 1, n_done + 1, step + 1
    if step % opts.log_interval == 0 or k == steps_per_epoch then
      sync()
      local now = clock()
      local l = log.reduce({ win_sum:item() / win_n }, 'sum')[1] / WORLD
      local ips = win_n * global_batch / (now - t_win)
      local m = tel:window(win_n * global_batch) -- gpu_power_w, gpu_energy_j, energy_per_image_j, ... (all ranks)
      m.loss, m.lr, m.scale, m.images_per_s, m.epoch = l, sched:get_lr()[1], scaler and scaler:get_scale() or 1, ips, epoch
      logger:log(step, m, { split = 'train' })
      bar:update(k, tel:bar({ loss = string.format('%.4f', l), ['img/s'] = string.format('%.0f', ips) }, m))
      tel:export{ step = step, epoch = epoch, loss = l, lr = m.lr, samples_per_second = ips, samples = win_n * global_batch }
      win_sum:zero_()
      win_n, t_win = 0, now
    end
    if opts.checkpoint_every > 0 and step % opts.checkpoint_every == 0 and k < steps_per_epoch then checkpoint(epoch, k) end
  end
  sync()
  local dt = clock() - t0
  local energy = tel:finish(n_done * global_batch) -- the epoch's training steps, all ranks
  bar:finish()
  local train_loss = log.reduce({ loss_sum:item() / math.max(n_done, 1) }, 'sum')[1] / WORLD
  local line = string.format('epoch %d/%d  loss %.4f', epoch, opts.epochs, train_loss)
  if src.val and (epoch % opts.eval_every == 0 or epoch == opts.epochs) then
    last = validate()
    line = line .. string.format('  val loss %.4f  top-1 %.4f  top-5 %.4f', last.loss, last.top1, last.top5)
    logger:log(step, { top1 = last.top1, top5 = last.top5, loss = last.loss, epoch = epoch }, { split = 'val' })
  end
  local ips = n_done * global_batch / dt
  local eta = (opts.epochs - epoch) * steps_per_epoch * global_batch / math.max(ips, 1e-9)
  line = line .. string.format('  lr %.4g', sched:get_lr()[1]) .. (scaler and string.format('  scale %g', scaler:get_scale()) or '')
  dist.print(string.format('%s  time %.1f s  images/s %.0f  eta %s', line, dt, ips, log.format_eta(eta)))
  if energy then
    dist.print(string.format('epoch %d/%d  %s', epoch, opts.epochs, energy.text))
    logger:log(step, { energy_j = energy.energy_j, energy_power_j = energy.energy_power_j, gpus = energy.gpus,
      energy_per_image_j = energy.energy_per_image_j, seconds = energy.seconds, epoch = epoch }, { split = 'energy' })
  end
  io.stdout:flush()
  checkpoint(epoch, steps_per_epoch)
end
local energy_line = tel:summary()
tel:close()
logger:close()
local total = clock() - t_run
dist.print(string.format('total time: %.0f s', total))
if energy_line then dist.print(energy_line) end
if last then
  dist.print('evaluated on: ' .. src.val_what)
  dist.print(string.format('test accuracy: %.4f', last.top1))
end
if scaler then
  local c = scaler:counters()
  dist.print(string.format('loss scale %g, %d steps skipped', scaler:get_scale(), c.skipped_steps))
end
