-- recipes/bert.lua: BERT pretraining (masked language model + next sentence prediction).
--
--   v100lua recipes/bert.lua                                   # WordNet, built on first use
--   v100lua recipes/bert.lua --config large --data /data/wiki-shards-128 --batch-size 8192 --micro-batch 256
--   v100lua recipes/bert.lua --phase 2 --init /ckpt/phase1/latest-hf --data /data/wiki-shards-512
--   mpirun -np 16 -H a:8,b:8 v100lua recipes/bert.lua --data /data/wiki-shards-128 --checkpoint-dir ckpt
--
-- With no options it pretrains on the WordNet glosses and examples of Debian's wordnet-base: the
-- first run writes the corpus, trains a WordPiece vocabulary and makes the shards in --cache-dir
-- (seconds); synsets of the fine-tuning task's validation and test splits are left out, so that
-- recipes/bert_classify.lua evaluates on text the model has not seen. On a machine without a GPU
-- it trains a tiny BERT (2 layers, hidden 128) for a few minutes; with a GPU BERT-Base, AMP bf16.
-- `--data DIR` reads shards made by tools/make_bert_shards.lua (DIR/vocab.txt beside them).
-- docs/BERT.md has the data preparation, the shard format, every option and the output.
--
-- It is a script to copy and edit: the data, the model, the optimizer and the loop are below; the
-- library pieces it calls are v100.bert_data (shards), v100.models.bert, v100.train (one step
-- with accumulation, AMP, DataParallel, clipping and CUDA graphs), v100.log and v100.checkpoint.
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local dist = require 'v100.dist'
local bert = require 'v100.models.bert'
local bd = require 'v100.bert_data'
local recipe = require 'v100.recipe'
recipe.add_path('lib') -- recipes/lib: bert_prep.lua (and the wordnet.lua it uses)
local prep = require 'bert_prep'
local train = require 'v100.train'
local log = require 'v100.log'
local ckpt = require 'v100.checkpoint'
local telemetry = require 'v100.telemetry'

dist.init()
local RANK, WORLD = dist.rank(), dist.size()

-- Google's compact BERTs (Turc et al. 2019) and the two of the paper.
local SIZES = {
  tiny = { num_hidden_layers = 2, hidden_size = 128, num_attention_heads = 2, intermediate_size = 512 },
  mini = { num_hidden_layers = 4, hidden_size = 256, num_attention_heads = 4, intermediate_size = 1024 },
  small = { num_hidden_layers = 4, hidden_size = 512, num_attention_heads = 8, intermediate_size = 2048 },
  medium = { num_hidden_layers = 8, hidden_size = 512, num_attention_heads = 8, intermediate_size = 2048 },
  base = {}, large = 'large',
}
local PHASES = { ['1'] = { seq = 128, pred = 20 }, ['2'] = { seq = 512, pred = 80 } }

local opts, parser = recipe.options{
  name = 'bert.lua',
  description = 'BERT pretraining (MLM + NSP) on WordNet (default; built on first use) or on shards made by ' ..
    'tools/make_bert_shards.lua. Without --data on a machine without a GPU: a tiny BERT for 300 steps of 32 ' ..
    'sequences (a few minutes); with a GPU: BERT-Base, AMP O1 bf16, AdamW, 2400 steps of 256 sequences (4 minutes on an H200).',
  epilog = 'Prints a header, a line every --log-interval steps (loss, MLM and NSP accuracy, sequences/s), the held-out ' ..
    'MLM accuracy every --eval-every steps, and ends with "final loss: x" and "mlm accuracy: x". --output writes ' ..
    'a Hugging Face folder (config.json, model.safetensors, vocab.txt) for recipes/bert_classify.lua and transformers.',
  { '--data', 'wordnet', 'wordnet, or a folder of shards (with vocab.txt) made by tools/make_bert_shards.lua', argname = '<DATA>' },
  { '--eval-data', 'auto', 'shards for the held-out MLM accuracy; auto: wordnet\'s held-out synsets, else none', argname = '<DIR>' },
  { '--cache-dir', 'auto', 'where --data wordnet keeps its corpus, vocabulary and shards; auto: $V100LUA_CACHE or ~/.cache/v100lua, /bert-wordnet-<vocab size>', argname = '<DIR>' },
  { '--wordnet-root', 'auto', 'the WordNet database folder; auto: $WORDNET_ROOT or /usr/share/wordnet', argname = '<DIR>' },
  { '--config', 'auto', 'tiny, mini, small, medium, base, large, or a config.json; auto: base on a GPU, tiny on a CPU', argname = '<CFG>' },
  { '--vocab-size', 'auto', 'wordnet: the WordPiece vocabulary to train; auto: 30522 on a GPU, 8192 on a CPU', recipe.integer{ min = 128, auto = true } },
  { '--phase', '1', 'wordnet: 1 = sequences of 128 with up to 20 predictions, 2 = 512 with up to 80', { '1', '2' } },
  { '--dupe-factor', 'auto', 'wordnet: masked copies of the corpus in the shards; auto: 5 on a GPU, 2 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--steps', 'auto', 'optimizer steps; auto: 2400 on a GPU, 300 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--batch-size', 'auto', 'sequences per optimizer step over all ranks; auto: phase 1 256, phase 2 64 on a GPU; 32 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--micro-batch', 'auto', 'sequences per forward and backward per rank: a step accumulates batch-size / (micro-batch x ranks) of them; auto: batch-size / ranks', recipe.integer{ min = 1, auto = true } },
  { '--optimizer', 'auto', 'lamb (layer-wise trust ratio, for large batches) or adamw; auto: lamb for batches of 8192 and more (NVIDIA\'s recipes) and for the CPU\'s tiny BERT, else adamw', { 'auto', 'lamb', 'adamw' } },
  { '--lr', 'auto', 'peak learning rate; auto: lamb 5e-3 and adamw 5e-4 on a GPU, lamb 1e-2 and adamw 1e-3 on a CPU (short runs of small models)', recipe.number{ gt = 0, auto = true } },
  { '--warmup', 0.1, 'warmup: a fraction of --steps (< 1) or a number of steps', recipe.number{ min = 0 } },
  { '--power', 1, 'power of the polynomial decay to 0 after warmup (1: linear, as BERT)', recipe.number{ min = 0 } },
  { '--weight-decay', 0.01, 'weight decay, not on biases and LayerNorm', recipe.number{ min = 0 } },
  { '--clip', 1.0, 'clip the global gradient norm to this (0: off)', recipe.number{ min = 0 } },
  { '--amp', 'auto', 'O0 f32, O1 autocast, O2 half model + f32 masters, O3 pure half; auto: O1 on a GPU, O0 on a CPU', { 'auto', 'O0', 'O1', 'O2', 'O3' } },
  { '--dtype', 'bf16', 'half dtype of --amp O1-O3 (fp16 adds a loss scaler)', { 'fp16', 'bf16' } },
  { '--graph', 'auto', 'the training step as one replayed CUDA graph; auto: on with one GPU rank, else off', { 'auto', 'on', 'off' } },
  { '--init', 'none', 'start from these weights: a Hugging Face folder (config.json, model.safetensors) or a checkpoint folder (phase 2 from phase 1)', argname = '<DIR>' },
  { '--output', 'auto', 'write the trained model here as a Hugging Face folder (config.json, model.safetensors, vocab.txt); auto: wordnet: <cache-dir>/model-<config>-phase<phase> (where recipes/bert_classify.lua looks), else none', argname = '<DIR>' },
  { '--checkpoint-dir', 'none', 'write checkpoints here (every --checkpoint-every steps and at the end); each is also a Hugging Face folder', argname = '<DIR>' },
  { '--checkpoint-every', 0, 'checkpoint every N steps (0: only at the end)', recipe.integer{ min = 0 } },
  { '--keep', 3, 'checkpoints kept in --checkpoint-dir', recipe.integer{ min = 1 } },
  { '--resume', false, 'continue from the latest checkpoint in --checkpoint-dir (any rank count)' },
  { '--seed', 1, 'seed of initialisation, data order and dropout', recipe.integer{ min = 0 } },
  { '--log-dir', 'none', 'write metrics.jsonl and TensorBoard event files here (rank 0)', argname = '<DIR>' },
  { '--log-interval', 'auto', 'steps between printed and logged training metrics; auto: 50 on a GPU, 25 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--eval-every', 'auto', 'steps between held-out MLM evaluations (and after the last); auto: 250 on a GPU, 100 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--eval-samples', 'auto', 'held-out sequences per evaluation; auto: 4096 on a GPU, 512 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--device', 'auto', 'cpu, cuda or cuda:N; auto: this rank\'s GPU when there is one, else cpu', recipe.device_auto },
  { '--tf32', 'on', 'f32 GEMMs on TF32 tensor cores (cuda only)', { 'on', 'off' } },
  table.unpack(telemetry.options()), -- --telemetry, --telemetry-interval-ms, --prometheus-* (docs/OPERATIONS.md)
}

-- ---- defaults that depend on the machine ----
for _, k in ipairs{ 'checkpoint_dir', 'log_dir', 'init', 'output' } do
  if opts[k] == 'none' then opts[k] = nil end
end
local dev = opts.device == 'auto' and v100.device() or opts.device
local gpu = dev:match('^cuda') ~= nil
local function default(v, d) if v == 'auto' then return d end return v end
local phase = PHASES[opts.phase]
opts.config = default(opts.config, gpu and 'base' or 'tiny')
opts.vocab_size = default(opts.vocab_size, gpu and 30522 or 8192)
opts.dupe_factor = default(opts.dupe_factor, gpu and 5 or 2)
opts.steps = default(opts.steps, gpu and 2400 or 300)
opts.batch_size = default(opts.batch_size, gpu and (opts.phase == '1' and 256 or 64) or 32)
opts.micro_batch = default(opts.micro_batch, math.max(1, opts.batch_size // WORLD))
-- LAMB changes each layer's weights by about lr of their norm a step, AdamW each weight by about
-- lr: lamb 5e-3 is about AdamW 1e-4 on BERT-Base's 0.02-scale weights, BERT's own setting, and
-- in 1000 steps of 256 on WordNet it left BERT-Base on the unigram plateau (held-out MLM accuracy
-- 0.05). AdamW 5e-4 with the same warmup and decay leaves it within 500 steps: 2400 steps of 256
-- end at held-out MLM loss 4.02, accuracy 0.41 (docs/BERT.md). LAMB is for large global batches.
opts.optimizer = default(opts.optimizer, (opts.batch_size >= 8192 or not gpu) and 'lamb' or 'adamw')
opts.lr = default(opts.lr, gpu and (opts.optimizer == 'lamb' and 5e-3 or 5e-4) or (opts.optimizer == 'lamb' and 1e-2 or 1e-3))
opts.amp = default(opts.amp, gpu and 'O1' or 'O0')
opts.graph = default(opts.graph, (gpu and WORLD == 1) and 'on' or 'off')
opts.log_interval = default(opts.log_interval, gpu and 50 or 25)
opts.eval_every = default(opts.eval_every, gpu and 250 or 100)
opts.eval_samples = default(opts.eval_samples, gpu and 4096 or 512)
if opts.graph == 'on' and not gpu then parser:error("option '--graph' on needs a CUDA device, got " .. dev) end
if opts.graph == 'on' and WORLD > 1 then parser:error("option '--graph' on is for one rank (DataParallel steps are not captured yet)") end
if opts.resume and not opts.checkpoint_dir then parser:error("option '--resume' needs --checkpoint-dir") end
if opts.checkpoint_every > 0 and not opts.checkpoint_dir then parser:error("option '--checkpoint-every' needs --checkpoint-dir") end
local per_step = opts.micro_batch * WORLD
if opts.batch_size % per_step ~= 0 then
  parser:error(string.format("option '--batch-size' (%d) must be a multiple of --micro-batch x ranks (%d x %d)",
    opts.batch_size, opts.micro_batch, WORLD))
end
local ACC = opts.batch_size // per_step
v100.set_allow_tf32(opts.tf32 == 'on')

-- ---- data: WordNet made on first use, or the user's shards ----
local exists = v100.io.exists
local function read_text(p) return assert(v100.io.read_file(p)) end

local data_dir, eval_dir, vocab_path
if opts.data == 'wordnet' then
  local cache = opts.cache_dir
  if cache == 'auto' then
    local base = os.getenv('V100LUA_CACHE') or ((os.getenv('HOME') or '.') .. '/.cache/v100lua')
    cache = string.format('%s/bert-wordnet-%d', base, opts.vocab_size)
  end
  local function make(say)
    prep.wordnet{ dir = cache, root = opts.wordnet_root ~= 'auto' and opts.wordnet_root or nil, vocab_size = opts.vocab_size,
      seq_len = phase.seq, max_predictions = phase.pred, dupe_factor = opts.dupe_factor, log = say }
  end
  -- Rank 0 builds what is missing (each piece written atomically), the others wait for it. A cache
  -- on a shared file system is then complete for every rank. A node-local one (/tmp, local scratch:
  -- the entrypoint's default) is not, on the other nodes: there the node's local rank 0 makes the
  -- node's own copy, the same bytes (every piece is deterministic), while its other ranks wait.
  if RANK == 0 then make(dist.print) end
  if WORLD > 1 then
    dist.barrier()
    local here = prep.complete(cache, phase.seq, opts.dupe_factor)
    local missing = v100.tensor({ here and 0 or 1 }, { dtype = 'i32' })
    dist.all_reduce(missing, { op = 'max' })
    if missing:item() > 0 then
      if not here and dist.is_local_main() then
        make(function(s) dist.print(s .. ' (node-local ' .. cache .. ': rank 0 wrote its copy on another node)', { all = true }) end)
      end
      dist.barrier()
      if not prep.complete(cache, phase.seq, opts.dupe_factor) then
        error(string.format('bert.lua: the WordNet data in %s is incomplete on this node after its local rank 0 made it', cache), 0)
      end
    end
  end
  local d = prep.wordnet_paths(cache, phase.seq, opts.dupe_factor)
  data_dir, vocab_path = d.train, d.vocab
  if opts.output == 'auto' then opts.output = string.format('%s/model-%s-phase%s', cache, opts.config:match('[^/]+$'), opts.phase) end
  eval_dir = opts.eval_data == 'auto' and d.eval or (opts.eval_data ~= 'none' and opts.eval_data or nil)
else
  if opts.output == 'auto' then opts.output = nil end
  data_dir = opts.data
  vocab_path = data_dir .. '/vocab.txt'
  eval_dir = (opts.eval_data ~= 'auto' and opts.eval_data ~= 'none') and opts.eval_data or nil
  if not exists(vocab_path) then parser:error("option '--data': " .. vocab_path .. ' is missing (tools/make_bert_shards.lua writes it)') end
end
local ds = bd.open(data_dir)
local eval_ds = eval_dir and bd.open(eval_dir) or nil
local vocab_text = read_text(vocab_path)
if v100.text.crc32c(vocab_text) ~= ds.vocab_crc then
  error(string.format('bert.lua: %s is not the vocabulary the shards in %s were made with (CRC32C 0x%08x, the shards say 0x%08x)',
    vocab_path, data_dir, v100.text.crc32c(vocab_text), ds.vocab_crc), 0)
end
local n_vocab = select(2, vocab_text:gsub('\n', ''))
if ds.vocab_size ~= n_vocab then
  error(string.format('bert.lua: %s has %d tokens but the shards in %s were made with a vocabulary of %d', vocab_path,
    n_vocab, data_dir, ds.vocab_size), 0)
end

-- ---- model ----
v100.manual_seed(opts.seed)
local cfg
if SIZES[opts.config] then
  local size = SIZES[opts.config]
  cfg = bert.config(size == 'large' and 'large' or 'base', size ~= 'large' and size or nil)
elseif exists(opts.config) then
  cfg = bert.read_config(opts.config)
else
  parser:error("option '--config': expected tiny, mini, small, medium, base, large or a config.json, got '" .. opts.config .. "'")
end
cfg.vocab_size = ds.vocab_size
if cfg.max_position_embeddings < ds.seq_len then
  error(string.format('bert.lua: the shards hold sequences of %d, the config has max_position_embeddings %d', ds.seq_len,
    cfg.max_position_embeddings), 0)
end
local model
if opts.init then
  -- phase 2 from phase 1, or continued pretraining of a Hugging Face BERT
  model, cfg = bert.from_pretrained(opts.init, { class = 'BertForPreTraining' })
  if cfg.vocab_size ~= ds.vocab_size then
    error(string.format('bert.lua: --init %s has a vocabulary of %d, the shards %d', opts.init, cfg.vocab_size, ds.vocab_size), 0)
  end
else
  model = bert.BertForPreTraining(cfg)
end
model:to(dev)
model:train() -- from_pretrained returns a model in eval mode, as transformers does
local policy = amp.policy(opts.amp, { dtype = opts.dtype })
policy:convert(model)
local dp = WORLD > 1 and dist.DataParallel(model) or nil
local forward = dp or model

local lr = opts.lr
local make_opt = opts.optimizer == 'lamb' and optim.LAMB or optim.AdamW
local opt = make_opt(model:named_parameters(), policy:optimizer_opts{ lr = lr, betas = { 0.9, 0.999 },
  eps = opts.optimizer == 'lamb' and 1e-6 or 1e-8, weight_decay = opts.weight_decay, no_decay = optim.no_decay_bias_and_norm,
  capturable = opts.graph == 'on' })
local warmup = opts.warmup < 1 and math.floor(opts.warmup * opts.steps + 0.5) or math.floor(opts.warmup)
local sched = optim.schedule.polynomial{ warmup = warmup, total = opts.steps, power = opts.power }
local scaler = opts.amp ~= 'O0' and opts.dtype == 'fp16' and amp.Scaler() or nil

-- ---- resume ----
local step, first_batch, epoch = 0, 0, 1
local loader = bd.Loader(ds, { batch_size = opts.micro_batch, shuffle = true, seed = opts.seed, rank = RANK,
  world_size = WORLD, drop_last = true, device = dev })
local micro_per_epoch = loader.batches_per_epoch
if micro_per_epoch < ACC then
  error(string.format('bert.lua: %d sequences in %s are fewer than one step of %d', ds.n, data_dir, opts.batch_size), 0)
end
if opts.resume then
  local c = ckpt.load(opts.checkpoint_dir)
  ckpt.restore(c, { model = model, optimizer = opt, scaler = scaler })
  step = c.step
  sched.t = step
  local ld = (c.state or {}).loader or {}
  epoch = ld.epoch or 1
  -- the same rank count continues at the next micro-batch; another one at the next sample
  first_batch = (ld.world == WORLD and ld.micro == opts.micro_batch and ld.batch) or (ld.samples or 0) // per_step
  if first_batch + ACC > micro_per_epoch then epoch, first_batch = epoch + 1, 0 end
end

-- ---- the loss: MLM at the masked positions only, plus NSP ----
-- labels of the masked positions: the original id, -100 (ignored) in the padding slots
local function mlm_labels(b)
  local w = b.masked_weights:long()
  return b.masked_ids * w + (w - 1) * 100
end
local function heads(b)
  return forward(b.input_ids, b.token_type_ids, b.attention_mask, b.masked_positions)
end
local function losses(b)
  local scores, nsp = heads(b)
  local V = scores.shape[3]
  -- f32 losses from the half scores as they are (the fused cross entropy computes in f32; no f32
  -- copy of the vocabulary-sized scores)
  local mlm = nn.cross_entropy(scores:reshape{ -1, V }, mlm_labels(b):reshape{ -1 }, { ignore_index = -100, dtype = 'f32' })
  local nspl = nn.cross_entropy(nsp, b.next_sentence_label, { dtype = 'f32' })
  return mlm, nspl, scores, nsp
end

-- accuracy counts of a batch (device tensors): masked tokens right, masked tokens, NSP right
local function counts(b, scores, nsp)
  local w = b.masked_weights
  local right = (scores:argmax(3):eq(b.masked_ids):float() * w):sum()
  local nsp_right = nsp:argmax(2):eq(b.next_sentence_label):float():sum()
  return right, w:sum(), nsp_right
end

local logger = log.Logger{ dir = opts.log_dir, jsonl = opts.log_dir ~= nil, tensorboard = opts.log_dir ~= nil }
local sync = recipe.syncer(dev)
-- GPU power, energy, clocks (NVML, read-only) beside the metrics, energy per sequence, Prometheus
local tel = telemetry.from_options(opts, dev, 'sequence', 'bert')

-- held-out MLM accuracy and loss over the first eval_samples sequences (split over the ranks)
local function evaluate()
  if not eval_ds then return nil end
  model:eval()
  local n = math.min(opts.eval_samples, eval_ds.n)
  local r = v100.no_grad(function()
    local sums = { 0, 0, 0, 0, 0 } -- mlm loss x tokens, right, tokens, nsp right, sequences
    -- n samples spread evenly over the held-out set (shards keep corpus order: the first n would
    -- be a few documents), the same ones at every evaluation
    local stride = eval_ds.n / n
    local pos = RANK * opts.micro_batch
    while pos < n do
      local len = math.min(opts.micro_batch, n - pos)
      local idx = {}
      for i = 1, len do idx[i] = math.floor((pos + i - 1) * stride) end
      local b = eval_ds:batch(idx, { device = dev })
      local mlm, _, scores, nsp = policy:autocast(losses, b)
      local right, tok, nsp_right = counts(b, scores, nsp)
      local t = tok:item()
      sums[1] = sums[1] + mlm:item() * t
      sums[2], sums[3], sums[4], sums[5] = sums[2] + right:item(), sums[3] + t, sums[4] + nsp_right:item(), sums[5] + len
      pos = pos + WORLD * opts.micro_batch
    end
    return log.reduce(sums, 'sum')
  end)
  model:train()
  return { mlm_loss = r[1] / math.max(r[3], 1), mlm_acc = r[2] / math.max(r[3], 1), nsp_acc = r[4] / math.max(r[5], 1), n = r[5] }
end

local last_eval
local cfg_json = bert.config_json(cfg, { architectures = { 'BertForPreTraining' } })
local function checkpoint(next_batch)
  if not opts.checkpoint_dir then return end
  local e, nb = epoch, next_batch
  if nb + ACC > micro_per_epoch then e, nb = e + 1, 0 end
  ckpt.save(opts.checkpoint_dir, { model = model, optimizer = opt, scaler = scaler, step = step, keep = opts.keep,
    files = { ['config.json'] = cfg_json, ['vocab.txt'] = vocab_text },
    state = { loader = { epoch = e, batch = nb, micro = opts.micro_batch, samples = nb * per_step, world = WORLD },
      args = { config = opts.config, data = opts.data, phase = opts.phase } } })
end

dist.print(string.format('bert.lua: BertForPreTraining %s (%d layers, hidden %d, %d heads, vocab %d), %d parameters; data %s ' ..
  '(%d sequences of %d, up to %d predictions)%s; %d rank%s, device %s; batch %d = %d x %d micro-batches x %d ranks; ' ..
  '%d steps, %s lr %g, warmup %d, amp %s%s, graph %s%s',
  opts.config:match('[^/]+$'), cfg.num_hidden_layers, cfg.hidden_size, cfg.num_attention_heads, cfg.vocab_size,
  model:num_parameters(), opts.data, ds.n, ds.seq_len, ds.max_predictions, eval_ds and string.format(', eval %d', eval_ds.n) or '',
  WORLD, WORLD > 1 and 's' or '', dev, opts.batch_size, opts.micro_batch, ACC, WORLD, opts.steps, opts.optimizer, lr, warmup,
  opts.amp, opts.amp == 'O0' and '' or (' ' .. opts.dtype .. (scaler and ' + loss scaling' or '')), opts.graph,
  opts.resume and string.format(', resumed at step %d', step) or ''))
dist.print(tel:describe())
io.stdout:flush()

local step_fn = train.stepper{ opt = opt, sched = sched, policy = policy, scaler = scaler, dp = dp, accumulate = ACC,
  clip = opts.clip > 0 and opts.clip or nil, graph = opts.graph == 'on',
  loss = function(b)
    local mlm, nspl = losses(b)
    return mlm + nspl
  end }

-- micro-batches, across epochs of the shards, from the resume point on
local it, k_in_epoch = nil, first_batch
local function next_micro()
  while true do
    if it == nil then it = loader:epoch(epoch, { start = k_in_epoch }) end
    local k, b = it()
    if k and k <= micro_per_epoch - (micro_per_epoch % ACC) then
      k_in_epoch = k
      return b
    end
    it, epoch, k_in_epoch = nil, epoch + 1, 0
  end
end

local function report_eval()
  last_eval = evaluate()
  dist.print(string.format('eval step %d: %d held-out sequences  mlm loss %.4f  mlm acc %.4f  nsp acc %.4f', step,
    last_eval.n, last_eval.mlm_loss, last_eval.mlm_acc, last_eval.nsp_acc))
  io.stdout:flush()
  logger:log(step, { mlm_loss = last_eval.mlm_loss, mlm_acc = last_eval.mlm_acc, nsp_acc = last_eval.nsp_acc }, { split = 'eval' })
end
-- the held-out figures of the starting point, so the curve shows what training changed; of a
-- resumed run too (the checkpoint's weights, on whatever rank count resumes them)
if eval_ds and (step == 0 or opts.resume) then report_eval() end

local clock = recipe.clock
local bar = log.Progress{ total = opts.steps, label = 'pretrain' }
local win_sum, win_n = v100.zeros({}, { device = dev }), 0
local first_loss, last_loss
sync()
tel:skip() -- the windows time the training steps only, as t_win does
local t_run, t_win, steps_done = clock(), clock(), 0
while step < opts.steps do
  local mbs = {}
  for i = 1, ACC do mbs[i] = next_micro() end
  local loss <close> = step_fn(table.unpack(mbs))
  win_sum:add_(loss)
  win_n, step, steps_done = win_n + 1, step + 1, steps_done + 1
  if step % opts.log_interval == 0 or step == opts.steps then
    -- metrics of the last micro-batch, from one more forward without gradients
    model:eval()
    local acc, nsp_acc = v100.no_grad(function()
      local b = mbs[ACC]
      local _, _, scores, nsp = policy:autocast(losses, b)
      local right, tok, nr = counts(b, scores, nsp)
      local r = log.reduce({ right:item(), tok:item(), nr:item(), b.input_ids.shape[1] }, 'sum')
      return r[1] / math.max(r[2], 1), r[3] / r[4]
    end)
    model:train()
    sync()
    local now = clock()
    local l = log.reduce({ win_sum:item() / win_n }, 'sum')[1] / WORLD
    if not first_loss then first_loss = l end
    last_loss = l
    local sps = win_n * opts.batch_size / (now - t_win)
    local m = tel:window(win_n * opts.batch_size) -- gpu_power_w, gpu_energy_j, energy_per_sequence_j, ... (all ranks)
    m.loss, m.mlm_acc, m.nsp_acc, m.lr, m.sequences_per_s = l, acc, nsp_acc, sched:get_lr()[1], sps
    m.scale = scaler and scaler:get_scale() or 1
    logger:log(step, m, { split = 'train' })
    bar:update(step, tel:bar({ loss = string.format('%.4f', l), mlm = string.format('%.3f', acc), ['seq/s'] = string.format('%.0f', sps) }, m))
    tel:export{ step = step, epoch = epoch, loss = l, lr = m.lr, samples_per_second = sps, samples = win_n * opts.batch_size }
    dist.print(string.format('step %d/%d  loss %.4f  mlm acc %.4f  nsp acc %.4f  lr %.3g  seq/s %.0f', step, opts.steps, l, acc,
      nsp_acc, sched:get_lr()[1], sps))
    io.stdout:flush()
    win_sum:zero_()
    win_n = 0
    if step % opts.eval_every ~= 0 and step ~= opts.steps then
      sync()
      tel:skip()
      t_win = clock()
    end
  end
  if eval_ds and (step % opts.eval_every == 0 or step == opts.steps) then
    report_eval()
    sync()
    tel:skip()
    t_win = clock()
  end
  if opts.checkpoint_every > 0 and step % opts.checkpoint_every == 0 and step < opts.steps then checkpoint(k_in_epoch) end
end
sync()
local total = clock() - t_run
bar:finish()
checkpoint(k_in_epoch)
if opts.output and RANK == 0 then
  bert.save_pretrained(model, opts.output, { vocab = vocab_path })
  dist.print('wrote ' .. opts.output .. ' (config.json, model.safetensors, vocab.txt)')
end
local energy_line = tel:summary()
tel:close()
logger:close()
dist.print(string.format('total time: %.0f s (%d steps, %.0f sequences/s)', total, steps_done,
  steps_done * opts.batch_size / math.max(total, 1e-9)))
if energy_line then dist.print(energy_line) end
if first_loss then dist.print(string.format('first loss: %.4f', first_loss)) end
if last_loss then dist.print(string.format('final loss: %.4f', last_loss)) end
if last_eval then dist.print(string.format('mlm accuracy: %.4f', last_eval.mlm_acc)) end
if scaler then
  local c = scaler:counters()
  dist.print(string.format('loss scale %g, %d steps skipped', scaler:get_scale(), c.skipped_steps))
end
