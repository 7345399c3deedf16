-- recipes/bert_classify.lua: fine-tune a BERT for sequence classification on WordNet's
-- lexicographer categories: from a synset's gloss (its definition and examples, without its own
-- words) predict which of the 45 files it is in (noun.animal, verb.motion, adj.all, ...).
--
--   v100lua recipes/bert.lua && v100lua recipes/bert_classify.lua   # pretrain, then fine-tune
--   v100lua recipes/bert_classify.lua --pretrained /models/bert-base-uncased   # a Hugging Face folder
--   v100lua recipes/bert_classify.lua --model bow                    # the bag-of-words baseline
--
-- The split (80/10/10 of the synsets, by --split-seed) is the one recipes/lib/bert_prep.lua held out of
-- pretraining. --pretrained auto takes what `v100lua recipes/bert.lua` wrote with its defaults on
-- this machine; any folder with config.json, model.safetensors and vocab.txt works (ours or
-- Hugging Face's). --model bow trains a linear classifier on the mean of per-token vectors (a
-- bag of words over the same WordPiece tokens) for comparison. docs/BERT.md has the results.
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local dist = require 'v100.dist'
local bert = require 'v100.models.bert'
local recipe = require 'v100.recipe'
recipe.add_path('lib') -- recipes/lib: wordnet.lua, bert_prep.lua
local wn = require 'wordnet'
local prep = require 'bert_prep'
local log = require 'v100.log'
local F = nn.functional

dist.init()
local RANK, WORLD = dist.rank(), dist.size()

local opts, parser = recipe.options{
  name = 'bert_classify.lua',
  description = 'Fine-tunes a pretrained BERT (or trains a bag-of-words baseline) to predict the WordNet lexicographer ' ..
    'category of a synset from its gloss (45 classes).',
  epilog = 'Prints one line per epoch (train loss, validation accuracy, sequences/s) and ends with "test accuracy: x" ' ..
    'and the majority-class accuracy of the test split.',
  { '--pretrained', 'auto', 'a folder with config.json, model.safetensors, vocab.txt (ours or Hugging Face\'s), or none (random init, needs --vocab); auto: what recipes/bert.lua wrote with its defaults', argname = '<DIR>' },
  { '--vocab', 'auto', 'vocab.txt for --pretrained none or --model bow; auto: the pretrained folder\'s', argname = '<FILE>' },
  { '--model', 'bert', 'bert (BertForSequenceClassification) or bow (bag-of-words linear baseline)', { 'bert', 'bow' } },
  { '--config', 'tiny', 'with --pretrained none: the size to train from scratch (tiny, mini, small, medium, base)', { 'tiny', 'mini', 'small', 'medium', 'base' } },
  { '--wordnet-root', 'auto', 'the WordNet database folder; auto: $WORDNET_ROOT or /usr/share/wordnet', argname = '<DIR>' },
  { '--split-seed', prep.SPLIT_SEED, 'seed of the train/val/test split (the default is the one bert.lua held out)', recipe.integer{ min = 0 } },
  { '--train-subset', 0, 'train on the first N synsets of the train split (0: all)', recipe.integer{ min = 0 } },
  { '--eval-subset', 0, 'validate and test on the first N glosses of each split (0: all)', recipe.integer{ min = 0 } },
  { '--epochs', 'auto', 'epochs; auto: 3 (bert), 10 (bow)', recipe.integer{ min = 1, auto = true } },
  { '--batch-size', 'auto', 'sequences per step per rank; auto: 64 on a GPU, 32 on a CPU', recipe.integer{ min = 1, auto = true } },
  { '--max-length', 128, 'tokens per gloss, [CLS] and [SEP] included (longer ones are cut)', recipe.integer{ min = 8 } },
  { '--lr', 'auto', 'peak learning rate (linear warmup over 10% of the steps, then linear decay); auto: 1e-4 for base and larger, 3e-4 for smaller BERTs, 1e-2 for bow', recipe.number{ gt = 0, auto = true } },
  { '--weight-decay', 0.01, 'AdamW weight decay, not on biases and LayerNorm', recipe.number{ min = 0 } },
  { '--amp', 'auto', 'O0 f32 or O1 autocast; auto: O1 on a GPU, O0 on a CPU', { 'auto', 'O0', 'O1' } },
  { '--dtype', 'bf16', 'half dtype of --amp O1', { 'fp16', 'bf16' } },
  { '--seed', 1, 'seed of the classifier initialisation, dropout and the batch order', recipe.integer{ min = 0 } },
  { '--export', 'none', 'also write the split as TSV files (label, id, text) here, for tools/hf_finetune_wordnet.py', argname = '<DIR>' },
  { '--output', 'none', 'write the fine-tuned model here as a Hugging Face folder', argname = '<DIR>' },
  { '--log-dir', 'none', 'write metrics.jsonl and TensorBoard event files here (rank 0)', argname = '<DIR>' },
  { '--device', 'auto', 'cpu, cuda or cuda:N; auto: this rank\'s GPU when there is one, else cpu', recipe.device_auto },
}
for _, k in ipairs{ 'export', 'output', 'log_dir' } do
  if opts[k] == 'none' then opts[k] = nil end
end
local dev = opts.device == 'auto' and v100.device() or opts.device
local gpu = dev:match('^cuda') ~= nil
local function default(v, d) if v == 'auto' then return d end return v end
opts.amp = default(opts.amp, gpu and 'O1' or 'O0')
opts.epochs = default(opts.epochs, opts.model == 'bow' and 10 or 3)
opts.batch_size = default(opts.batch_size, gpu and 64 or 32)

-- ---- the pretrained model and its tokenizer ----
local exists = v100.io.exists
local pre = opts.pretrained
-- the bag of words needs only a vocabulary
if pre == 'auto' and opts.model == 'bow' and opts.vocab ~= 'auto' then pre = 'none' end
if pre == 'auto' then
  local base = os.getenv('V100LUA_CACHE') or ((os.getenv('HOME') or '.') .. '/.cache/v100lua')
  pre = string.format('%s/bert-wordnet-%d/model-%s-phase1', base, gpu and 30522 or 8192, gpu and 'base' or 'tiny')
  if not exists(pre .. '/config.json') then
    parser:error("option '--pretrained' auto: " .. pre .. ' does not exist: run `v100lua recipes/bert.lua` first, or give '
      .. '--pretrained DIR (a BERT folder) or --pretrained none --vocab FILE')
  end
end
if pre == 'none' then pre = nil end
local vocab = opts.vocab ~= 'auto' and opts.vocab or (pre and pre .. '/vocab.txt')
if not vocab or not exists(vocab) then
  parser:error("option '--vocab': no vocab.txt (" .. tostring(vocab) .. '): give --vocab FILE or a --pretrained folder that has one')
end
local lower = true
if pre and exists(pre .. '/tokenizer_config.json') then
  local f = io.open(pre .. '/tokenizer_config.json', 'rb')
  local tc = v100.json.decode(f:read('a'))
  f:close()
  if type(tc.do_lower_case) == 'boolean' then lower = tc.do_lower_case end
end
local tok = v100.text.WordPiece(vocab, { lower = lower })

-- ---- the task ----
local t_prep = recipe.clock()
local synsets = wn.read(opts.wordnet_root ~= 'auto' and opts.wordnet_root or nil)
local task = wn.lexname_task(synsets, { seed = opts.split_seed, val = prep.SPLIT.val, test = prep.SPLIT.test })
if opts.train_subset > 0 and opts.train_subset < #task.train then
  for i = #task.train, opts.train_subset + 1, -1 do task.train[i] = nil end
end
if opts.eval_subset > 0 then
  for _, split in ipairs { 'val', 'test' } do
    for i = #task[split], opts.eval_subset + 1, -1 do task[split][i] = nil end
  end
end
local NCLASS = task.classes
if opts.export and RANK == 0 then
  v100.io.makedirs(opts.export)
  for _, split in ipairs { 'train', 'val', 'test' } do
    local lines = {}
    for i, it in ipairs(task[split]) do
      lines[i] = it.label .. '\t' .. it.id .. '\t' .. it.text:gsub('[\t\n]', ' ') .. '\n'
    end
    -- the runtime's one writer: no link planted in a shared export folder is followed
    require('v100.core')._ckpt.write_atomic(opts.export .. '/' .. split .. '.tsv', table.concat(lines))
  end
end

-- token ids of every gloss, once, each gloss's as one string of little-endian int32 (string.pack):
-- { ids = { string per gloss }, label = { class per gloss } }. Strings are leaves to Lua's collector,
-- where 117,659 tables of numbers made each full collection 4 times longer (19 ms against 5).
local function encode(split)
  local out = { ids = {}, label = {} }
  for i, it in ipairs(task[split]) do
    local e = tok:encode(it.text, nil, { max_length = opts.max_length, truncation = true, padding = false, as = 'table' })
    out.ids[i] = string.pack('<' .. string.rep('i4', #e.ids), table.unpack(e.ids))
    out.label[i] = it.label
  end
  return out
end
local data = { train = encode('train'), val = encode('val'), test = encode('test') }
local counts = {}
for _, it in ipairs(task.test) do counts[it.label] = (counts[it.label] or 0) + 1 end
local majority = 0
for _, c in pairs(counts) do majority = math.max(majority, c) end
majority = majority / #task.test
-- The synsets (about a million small tables) are not needed any more: a smaller heap makes every
-- full collection cheaper.
synsets, task = nil, { classes = task.classes }
collectgarbage()
t_prep = recipe.clock() - t_prep

-- A batch of items padded to its longest: input_ids, attention_mask (B x L i64) and labels (B).
local PAD = tok:token_to_id('[PAD]') or 0
local FMT = setmetatable({}, { __index = function(t, n)
  t[n] = '<' .. string.rep('i4', n)
  return t[n]
end })
local function batch_of(items, idx, first, last)
  local L = 0
  for i = first, last do L = math.max(L, #items.ids[idx[i]] // 4) end
  local ids, mask, y = {}, {}, {}
  for i = first, last do
    local k = idx[i]
    local s = items.ids[k]
    local n = #s // 4
    local row, mrow = { string.unpack(FMT[n], s) }, {}
    row[n + 1] = nil -- string.unpack's last result: the position after the ids
    for j = 1, n do mrow[j] = 1 end
    for j = n + 1, L do row[j], mrow[j] = PAD, 0 end
    ids[#ids + 1], mask[#mask + 1], y[#y + 1] = row, mrow, items.label[k]
  end
  local o = { dtype = 'i64' }
  return v100.tensor(ids, o):to(dev), v100.tensor(mask, o):to(dev), v100.tensor(y, o):to(dev)
end

-- ---- the model ----
v100.manual_seed(opts.seed)
local model, cfg
if opts.model == 'bow' then
  -- logits = W . mean of the token vectors (a linear model of the normalised token counts)
  local BoW = nn.Module:extend('BagOfWords')
  function BoW:init(vocab_size, classes)
    self.embed = nn.Embedding(vocab_size, classes)
    self.bias = v100.zeros({ classes }):requires_grad_(true)
    nn.init.zeros_(self.embed.weight)
  end
  function BoW:forward(ids, _, mask)
    local m = mask:float():unsqueeze(-1)
    return (self.embed(ids) * m):sum(2) / m:sum(2) + self.bias
  end
  model = BoW(tok.vocab_size, NCLASS)
elseif pre then
  model, cfg = bert.from_pretrained(pre, { class = 'BertForSequenceClassification', num_labels = NCLASS })
else
  local sizes = { tiny = { 2, 128, 2, 512 }, mini = { 4, 256, 4, 1024 }, small = { 4, 512, 8, 2048 },
    medium = { 8, 512, 8, 2048 }, base = { 12, 768, 12, 3072 } }
  local s = sizes[opts.config]
  cfg = bert.config('base', { num_hidden_layers = s[1], hidden_size = s[2], num_attention_heads = s[3],
    intermediate_size = s[4], vocab_size = tok.vocab_size, num_labels = NCLASS })
  model = bert.BertForSequenceClassification(cfg, NCLASS)
end
model:to(dev)
local policy = amp.policy(opts.amp, { dtype = opts.dtype })
local dp = WORLD > 1 and dist.DataParallel(model) or nil
local forward = dp or model

local big = cfg and cfg.hidden_size >= 768
local lr = default(opts.lr, opts.model == 'bow' and 1e-2 or (big and 1e-4 or 3e-4))
local steps_per_epoch = #data.train.ids // (opts.batch_size * WORLD)
local total = steps_per_epoch * opts.epochs
local opt = optim.AdamW(model:named_parameters(), { lr = lr, weight_decay = opts.weight_decay,
  no_decay = optim.no_decay_bias_and_norm })
local sched = optim.schedule.polynomial{ warmup = math.floor(0.1 * total + 0.5), total = total, power = 1 }
local scaler = opts.amp == 'O1' and opts.dtype == 'fp16' and amp.Scaler() or nil
local sync, clock = recipe.syncer(dev), recipe.clock
local logger = log.Logger{ dir = opts.log_dir, jsonl = opts.log_dir ~= nil, tensorboard = opts.log_dir ~= nil }

dist.print(string.format('bert_classify.lua: %s%s, %d classes, %d train / %d val / %d test glosses (split seed %d, %.1f s to ' ..
  'read and tokenize), %d rank%s, device %s, batch %d per rank, %d epochs x %d steps, AdamW lr %g, amp %s, %d parameters',
  opts.model == 'bow' and 'bag of words over ' .. tok.vocab_size .. ' tokens' or 'BertForSequenceClassification',
  opts.model == 'bert' and (pre and (' from ' .. pre) or (' ' .. opts.config .. ' from scratch')) or '', NCLASS, #data.train.ids,
  #data.val.ids, #data.test.ids, opts.split_seed, t_prep, WORLD, WORLD > 1 and 's' or '', dev, opts.batch_size, opts.epochs,
  steps_per_epoch, lr, opts.amp, model:num_parameters()))
io.stdout:flush()

local function accuracy(items)
  model:eval()
  local idx = {}
  for i = 1, #items.ids do idx[i] = i end
  local right, n = v100.no_grad(function()
    local r, c = 0, 0
    for first = 1 + RANK * 256, #items.ids, 256 * WORLD do
      local last = math.min(first + 255, #items.ids)
      local ids, mask, y = batch_of(items, idx, first, last)
      local z = policy:autocast(function() return forward(ids, nil, mask):float() end)
      r = r + z:argmax(2):eq(y):sum():item()
      c = c + (last - first + 1)
    end
    return r, c
  end)
  model:train()
  local t = log.reduce({ right, n }, 'sum')
  return t[1] / t[2]
end

-- ---- fine-tuning ----
-- every rank shuffles the same permutation per epoch and takes its share (dist.DistributedSampler)
local sampler = dist.DistributedSampler(#data.train.ids, { seed = opts.seed * 1000, drop_last = true })
local step, val_acc = 0, nil
sync()
local t_run = clock()
for epoch = 1, opts.epochs do
  model:train()
  sampler:set_epoch(epoch)
  local idx = {}
  for i, p in ipairs(sampler:indices():totable()) do idx[i] = p + 1 end
  local loss_sum, n = v100.zeros({}, { device = dev }), 0
  sync()
  local t0 = clock()
  for k = 1, steps_per_epoch do
    local first = (k - 1) * opts.batch_size + 1
    local ids, mask, y = batch_of(data.train, idx, first, first + opts.batch_size - 1)
    sched:step(opt)
    local loss = policy:autocast(function() return nn.cross_entropy(forward(ids, nil, mask):float(), y) end)
    opt:zero_grad()
    if scaler then scaler:backward(loss) else loss:backward() end
    if dp then dp:finish() end
    optim.clip_grad_norm(model:parameters(), 1.0)
    if scaler then scaler:step(opt) scaler:update() else opt:step() end
    loss_sum:add_(loss:detach())
    n, step = n + 1, step + 1
  end
  sync()
  local dt = clock() - t0
  local train_loss = log.reduce({ loss_sum:item() / n }, 'sum')[1] / WORLD
  val_acc = accuracy(data.val)
  local sps = n * opts.batch_size * WORLD / dt
  logger:log(step, { loss = train_loss, val_acc = val_acc, sequences_per_s = sps, epoch = epoch }, { split = 'train' })
  dist.print(string.format('epoch %d/%d  loss %.4f  val acc %.4f  lr %.3g  time %.1f s  seq/s %.0f', epoch, opts.epochs, train_loss,
    val_acc, sched:get_lr()[1], dt, sps))
  io.stdout:flush()
end
sync()
local train_time = clock() - t_run
local test_acc = accuracy(data.test)
logger:log(step, { test_acc = test_acc, val_acc = val_acc }, { split = 'test' })
logger:close()
if opts.output and RANK == 0 and opts.model == 'bert' then
  bert.save_pretrained(model, opts.output, { vocab = vocab })
  dist.print('wrote ' .. opts.output)
end
dist.print(string.format('total time: %.0f s (fine-tuning %.1f s)', train_time + t_prep, train_time))
dist.print(string.format('majority class: %.4f', majority))
dist.print(string.format('test accuracy: %.4f', test_acc))
