-- ext/text/lua/v100/bert_data.lua: BERT pretraining data from shards made by tools/make_bert_shards.lua
-- (format: ext/text/shard.h, docs/BERT.md).
--
--   local bd = require 'v100.bert_data'
--   local ds = bd.open('shards/')            -- a shard file or a directory of *.shard (one data set)
--   ds.n, ds.seq_len, ds.max_predictions, ds.vocab_size, ds.vocab_crc (== bd.vocab_crc('vocab.txt'))
--   local b = ds:batch({0, 5, 7})            -- or a 1-D integer tensor of 0-based sample ids
--   local l = bd.Loader(ds, {batch_size = 32, seed = 1, rank = r, world_size = w})
--   for k, b in l:epoch(e) do ... end        -- b as ds:batch gives it
--
-- A batch (B samples, L = seq_len, P = max_predictions), i64 unless said:
--   input_ids B x L (masked tokens as stored), token_type_ids B x L (0 for [CLS] A [SEP] and the
--   padding, 1 for B [SEP]), attention_mask B x L (1 on the sample's tokens), labels B x L (-100
--   except at masked positions: the original id), next_sentence_label B (0 B follows A, 1 random:
--   Hugging Face's convention), masked_positions B x P (0-based, 0 past the sample's count),
--   masked_ids B x P (original ids, 0 past the count), masked_weights B x P f32 (1 real, 0 padding).
-- Records are read straight out of the read-only mappings of the files (no copy of a file in
-- memory); each record is checked as it is read.
local v100 = require 'v100.base'
local errors = require 'v100.errors'
local dist = require 'v100.dist.comm'
local text = v100.text

local bd = {}

local fail = errors.fail

local Dataset = {}
Dataset.__index = Dataset
Dataset.__name = 'v100.bert_data.Dataset'

local FIELDS = {'n', 'seq_len', 'max_predictions', 'vocab_size', 'vocab_crc', 'whole_word_mask', 'masked_lm_prob',
  'short_seq_prob', 'seed', 'dupe_factor'}

-- bd.open(path) -> ds: path is one shard file, a directory (its *.shard files, sorted by name, one
-- data set with global indices in that order) or a list of shard files. Every file is validated
-- at open (checksums, sizes); the files must agree on seq_len, max_predictions and the vocab.
function bd.open(path)
  if type(path) ~= 'string' and type(path) ~= 'table' then
    fail(2, 'bert_data.open: expected a shard file, a directory or a list of files, got a %s', type(path))
  end
  local ok, set = pcall(text.ShardSet, path)
  if not ok then fail(2, '%s', set) end
  local self = setmetatable({_s = set, path = path}, Dataset)
  for _, k in ipairs(FIELDS) do self[k] = set[k] end
  self.files = set:files()
  return self
end

-- bd.vocab_crc(path) -> the CRC32C of the file's bytes: equal to ds.vocab_crc when the shards
-- were made with that vocab.txt.
function bd.vocab_crc(path)
  local f, err = io.open(path, 'rb')
  if not f then fail(2, 'bert_data.vocab_crc: %s', tostring(err)) end
  local bytes = f:read('a')
  f:close()
  return text.crc32c(bytes)
end

local function check_device(fn, device, level)
  if device ~= nil and (type(device) ~= 'string' or not (device == 'cpu' or device:match('^cuda$') or device:match('^cuda:%d+$'))) then
    fail(level + 1, '%s', fn .. ": device must be 'cpu', 'cuda' or 'cuda:<n>', got " .. tostring(device))
  end
end

-- Moves every tensor of b to device (freeing the CPU copies); nil or 'cpu' leaves b as it is.
local function to_device(b, device)
  if not device or device == 'cpu' then return b end
  local out = {}
  for k, t in pairs(b) do
    out[k] = t:to(device)
    t:free()
  end
  return out
end

-- ds:batch(indices[, {device = dev}]) -> the batch of those samples (see the top of this file).
function Dataset:batch(indices, opts)
  local set = rawget(self, '_s')
  if not set then fail(2, 'bert_data: dataset used after close') end
  local device
  if opts ~= nil then
    errors.check_opts('Dataset:batch', opts, { 'device' })
    device = opts.device
    check_device('Dataset:batch', device, 2)
  end
  local ok, b = pcall(set.gather, set, indices)
  if not ok then fail(2, '%s', b) end
  return to_device(b, device)
end

function Dataset:__len() return self.n end

-- ds:close(): unmaps the files (idempotent; also at scope end with <close> and by the collector).
function Dataset:close()
  local set = rawget(self, '_s')
  if set then
    set:close()
    self._s = nil
  end
end
Dataset.__close = Dataset.close
Dataset.__gc = Dataset.close

function Dataset:__tostring()
  return string.format('bert_data.Dataset(%d samples, seq_len %d, %d files)', self.n, self.seq_len, #self.files)
end

-- ---- the loader ----

local LOADER_OPTS = { 'batch_size', 'shuffle', 'seed', 'rank', 'world_size', 'drop_last', 'device' }

local function check_int(fn, name, v, lo, hi, level)
  if not (math.tointeger(v) and v >= lo and v <= hi) then
    fail(level + 1, '%s: %s must be an integer in %d..%d, got %s', fn, name, lo, hi, tostring(v))
  end
  return math.tointeger(v)
end

local Loader = {}
Loader.__index = Loader
Loader.__name = 'v100.bert_data.Loader'

-- bd.Loader(ds, opts) -> l. opts (defaults): batch_size (32), shuffle (true), seed (0), rank (0),
-- world_size (1), drop_last (true: a last short batch of the rank's share is left out), device
-- (nil: CPU batches; 'cuda...' copies each batch there).
-- The epoch's order is dist.DistributedSampler's: one permutation of all ds.n samples from
-- seed + epoch (the same on every rank), padded by its own start to a multiple of world_size,
-- rank r taking positions r, r + world_size, ...; so each rank gets ceil(n / world_size) samples
-- and the ranks together cover every sample once (plus the padding) each epoch.
function bd.Loader(ds, opts)
  if getmetatable(ds) ~= Dataset then fail(2, 'bert_data.Loader: the first argument must be a dataset of bert_data.open') end
  opts = errors.check_opts('bert_data.Loader', opts, LOADER_OPTS)
  local F = 'bert_data.Loader'
  local world = check_int(F, 'world_size', opts.world_size or 1, 1, 1 << 20, 2)
  local self = setmetatable({
    ds = ds,
    batch_size = check_int(F, 'batch_size', opts.batch_size or 32, 1, 1 << 30, 2),
    shuffle = opts.shuffle ~= false,
    seed = check_int(F, 'seed', opts.seed or 0, 0, math.maxinteger, 2),
    rank = check_int(F, 'rank', opts.rank or 0, 0, world - 1, 2),
    world_size = world,
    drop_last = opts.drop_last ~= false,
    device = opts.device,
  }, Loader)
  check_device(F, self.device, 2)
  if ds.n == 0 then fail(2, 'bert_data.Loader: the dataset has no samples') end
  self.shard_size = (ds.n + world - 1) // world
  if self.drop_last then self.batches_per_epoch = self.shard_size // self.batch_size
  else self.batches_per_epoch = (self.shard_size + self.batch_size - 1) // self.batch_size end
  return self
end

-- l:indices(e) -> this rank's 0-based sample ids of epoch e, in order (an i64 CPU tensor).
function Loader:indices(e)
  return dist.epoch_indices(self.ds.n, e, {shuffle = self.shuffle, seed = self.seed, rank = self.rank,
    size = self.world_size})
end

-- l:epoch(e[, {start = k}]) -> iterator of (k, batch) over the batches of epoch e from batch
-- k + 1 on (k counts from 1 across the epoch, so a resumed epoch continues the count and gives
-- the same batches the uninterrupted epoch would have).
function Loader:epoch(e, opts)
  check_int('bert_data.Loader:epoch', 'epoch', e, 0, math.maxinteger - self.seed, 2)
  opts = errors.check_opts('bert_data.Loader:epoch', opts, { 'start' })
  local start = check_int('bert_data.Loader:epoch', 'start', opts.start or 0, 0, self.batches_per_epoch, 2)
  local order = self:indices(e)
  local k, bs, n = start, self.batch_size, self.shard_size
  return function()
    if k >= self.batches_per_epoch then
      if order then order:free() order = nil end
      return nil
    end
    local first = k * bs
    local len = math.min(bs, n - first)
    local idx <close> = order:narrow(1, first + 1, len)
    k = k + 1
    return k, self.ds:batch(idx, self.device and {device = self.device} or nil)
  end
end

return bd
