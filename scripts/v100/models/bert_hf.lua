-- scripts/v100/models/bert_hf.lua: Hugging Face folders for the BERT of models/bert_model.lua;
-- models/bert.lua puts these functions into v100.models.bert (use that):
--
--   bert.read_config(path_or_table) -> cfg           config.json: typed, null = the default
--   bert.config_json(cfg[, {architectures = {...}, dtype = 'float32'}]) -> text (what BertConfig reads)
--   bert.from_pretrained(dir[, {class =, num_labels =, strict = true, dtype =, device =, quiet = false}])
--       -> model (eval mode, as transformers), cfg, tok (nil without vocab.txt), info
--          info = {class =, file =, missing_keys = {...}, unexpected_keys = {...}}
--   bert.save_pretrained(model, dir[, {vocab = path, lower = true}]) -> dir
--   bert.sentence_embeddings(model, tok, texts[, {batch_size = 32, max_length = 128, device =,
--       normalize = true}]) -> N x H f32 CPU tensor
--
-- Folder layout (transformers' save_pretrained): config.json, model.safetensors, and for the
-- tokenizer vocab.txt (+ tokenizer_config.json). Only safetensors is read: pytorch_model.bin is a
-- pickle, and loading one runs code from the file. docs/MODELS.md, "BERT and Hugging Face folders".
local v100 = require 'v100.base'
local core = require 'v100.core'
local errors = require 'v100.errors'
local dist = require 'v100.dist'
local bert = require 'v100.models.bert_model'
local fs, cio = core._ckpt, core.io

local M = {}

local CLASSES = { BertModel = true, BertForPreTraining = true, BertForSequenceClassification = true }
local WEIGHTS, CONFIG, VOCAB, TOKCFG = 'model.safetensors', 'config.json', 'vocab.txt', 'tokenizer_config.json'
-- The tied MLM decoder: the same tensors as the word embeddings and cls.predictions.bias.
local TIED = { ['cls.predictions.decoder.weight'] = 'bert.embeddings.word_embeddings.weight',
  ['cls.predictions.decoder.bias'] = 'cls.predictions.bias' }

local join, read_file, exists = cio.join, cio.read_file, cio.exists

local function sorted_keys(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

-- ---------------------------------------------------------------------------------------------
-- config.json

-- The JSON type of a decoded value, for messages.
local function json_type(v)
  local mt = math.type(v)
  if mt then return mt == 'integer' and 'integer' or string.format('float (%s)', tostring(v)) end
  if type(v) == 'table' then return next(v) == nil and 'empty object' or (v[1] ~= nil and 'array' or 'object') end
  return type(v)
end

local function is_list_of(v, pred)
  if type(v) ~= 'table' then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  for i = 1, n do if v[i] == nil or not pred(v[i]) then return false end end
  return true
end

local function is_int(v) return math.type(v) == 'integer' end
local function is_str(v) return type(v) == 'string' end
local TYPES = {
  integer = { 'an integer', is_int },
  number = { 'a number', function(v) return type(v) == 'number' end },
  string = { 'a string', is_str },
  boolean = { 'a boolean', function(v) return type(v) == 'boolean' end },
  strings = { 'a list of strings', function(v) return is_list_of(v, is_str) end },
  int_or_ints = { 'an integer or a list of integers', function(v) return is_int(v) or is_list_of(v, is_int) end },
  object = { 'an object', function(v) return type(v) == 'table' and (next(v) == nil or v[1] == nil) end },
}

-- Every field of transformers' BertConfig and the PreTrainedConfig fields that matter here, with
-- its JSON type. JSON null decodes to nil (v100.json), i.e. absent: the default.
local FIELDS = {
  vocab_size = 'integer', hidden_size = 'integer', num_hidden_layers = 'integer', num_attention_heads = 'integer',
  intermediate_size = 'integer', hidden_act = 'string', hidden_dropout_prob = 'number',
  attention_probs_dropout_prob = 'number', max_position_embeddings = 'integer', type_vocab_size = 'integer',
  initializer_range = 'number', layer_norm_eps = 'number', pad_token_id = 'integer', use_cache = 'boolean',
  classifier_dropout = 'number', is_decoder = 'boolean', add_cross_attention = 'boolean', bos_token_id = 'integer',
  eos_token_id = 'int_or_ints', tie_word_embeddings = 'boolean', position_embedding_type = 'string',
  model_type = 'string', architectures = 'strings', id2label = 'object', label2id = 'object', num_labels = 'integer',
  problem_type = 'string', transformers_version = 'string', dtype = 'string', torch_dtype = 'string',
}
-- BertConfig's float fields: transformers' strict dataclass refuses an integer there.
local FLOATS = { initializer_range = true, layer_norm_eps = true }
local ACTS = { gelu = true, gelu_new = true, gelu_pytorch_tanh = true, relu = true, tanh = true }
-- Fields config_json writes itself (the rest of a read config.json is written back as it was).
local WRITTEN = { 'vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads', 'intermediate_size',
  'hidden_act', 'hidden_dropout_prob', 'attention_probs_dropout_prob', 'max_position_embeddings', 'type_vocab_size',
  'initializer_range', 'layer_norm_eps', 'pad_token_id', 'use_cache', 'classifier_dropout', 'is_decoder',
  'add_cross_attention', 'bos_token_id', 'eos_token_id', 'tie_word_embeddings' }
local DEFAULTS = { use_cache = true, is_decoder = false, add_cross_attention = false, tie_word_embeddings = true }
-- Never written back: transformers fills them in itself, or they are Lua-side only.
local DROPPED = { transformers_version = true, _name_or_path = true, num_labels = true, torch_dtype = true,
  dtype = true, architectures = true, model_type = true, id2label = true, label2id = true, problem_type = true }

-- cfg -> the names of the unknown config.json fields it carries (written back by config_json).
local EXTRA = setmetatable({}, { __mode = 'k' })

local cfail = errors.failer('bert.read_config: ', 0) -- cfail('%s: ...', where, ...)

function M.read_config(src)
  local where, raw
  if type(src) == 'string' then
    where = src
    local text = read_file(src)
    if text == nil then cfail('%s: cannot read the file (missing or unreadable)', where) end
    raw = v100.json.decode(text, src)
  elseif type(src) == 'table' then
    where, raw = 'config', src
  else
    error('bert.read_config: expected a path or a table, got ' .. type(src), 2)
  end
  if type(raw) ~= 'table' or raw[1] ~= nil then cfail('%s: expected a JSON object, got %s', where, json_type(raw)) end
  local t, extra = {}, {}
  for k, v in pairs(raw) do
    if type(k) ~= 'string' then cfail('%s: keys must be strings, got %s', where, type(k)) end
    local ty = FIELDS[k]
    if ty then
      local spec = TYPES[ty]
      if not spec[2](v) then cfail('%s: %s must be %s, got %s', where, k, spec[1], json_type(v)) end
      if FLOATS[k] then v = v + 0.0 end
    else
      extra[#extra + 1] = k
    end
    t[k] = v
  end
  if t.model_type ~= nil and t.model_type ~= 'bert' then
    cfail("%s: model_type is '%s', not 'bert' (only BERT configs are read)", where, t.model_type)
  end
  if t.hidden_act ~= nil and not ACTS[t.hidden_act] then
    cfail("%s: hidden_act '%s' is not supported (gelu, gelu_new, gelu_pytorch_tanh, relu, tanh)", where, t.hidden_act)
  end
  if t.position_embedding_type ~= nil and t.position_embedding_type ~= 'absolute' then
    cfail("%s: position_embedding_type '%s' is not supported (only 'absolute')", where, t.position_embedding_type)
  end
  if t.is_decoder or t.add_cross_attention then
    cfail('%s: is_decoder / add_cross_attention (BERT as a decoder) are not supported', where)
  end
  for _, k in ipairs { 'vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads', 'intermediate_size',
    'max_position_embeddings', 'type_vocab_size', 'num_labels' } do
    if t[k] ~= nil and t[k] < 1 then cfail('%s: %s must be >= 1, got %d', where, k, t[k]) end
  end
  -- labels: id2label {"0": name} -> {[0] = name}; num_labels follows it, as in transformers
  if t.id2label ~= nil then
    local m, n = {}, 0
    for k, v in pairs(t.id2label) do
      local i = math.tointeger(tonumber(k))
      if i == nil or i < 0 or (type(k) == 'string' and tostring(i) ~= k) then
        cfail('%s: id2label keys must be label ids ("0", "1", ...), got "%s"', where, tostring(k))
      end
      if type(v) ~= 'string' then cfail('%s: id2label["%s"] must be a string, got %s', where, tostring(k), json_type(v)) end
      m[i], n = v, n + 1
    end
    for i = 0, n - 1 do if m[i] == nil then cfail('%s: id2label must number the labels 0..%d (no "%d")', where, n - 1, i) end end
    if t.num_labels ~= nil and t.num_labels ~= n then
      io.stderr:write(string.format('bert.read_config: %s: num_labels %d disagrees with id2label (%d labels); ' ..
        'using id2label, as transformers does\n', where, t.num_labels, n))
    end
    t.id2label, t.num_labels = m, n
  end
  if t.label2id ~= nil then
    for k, v in pairs(t.label2id) do
      if not is_int(v) then cfail('%s: label2id["%s"] must be an integer, got %s', where, tostring(k), json_type(v)) end
    end
  end
  local ok, cfg = pcall(bert.config, t)
  if not ok then cfail('%s: %s', where, (tostring(cfg):gsub('^bert%.config: ', ''))) end
  EXTRA[cfg] = extra
  return cfg
end

-- The labels of cfg as transformers writes them: id2label {"0": name}, label2id {name: 0}.
local function labels(cfg)
  local n = cfg.num_labels or 2
  local names, ok = {}, type(cfg.id2label) == 'table'
  for i = 0, n - 1 do
    local name = ok and (cfg.id2label[i] or cfg.id2label[tostring(i)])
    if type(name) ~= 'string' then ok = false end
    names[i] = name
  end
  local id2label, label2id = {}, {}
  for i = 0, n - 1 do
    local name = ok and names[i] or ('LABEL_' .. i)
    id2label[tostring(i)], label2id[name] = name, i
  end
  return id2label, label2id
end

function M.config_json(cfg, opts)
  opts = errors.check_opts('bert.config_json', opts, { 'architectures', 'dtype' })
  local extra = EXTRA[cfg]
  cfg = bert.config(cfg)
  local out = { model_type = 'bert' }
  for _, k in ipairs(WRITTEN) do
    local v = cfg[k]
    if v == nil then v = DEFAULTS[k] end
    if v ~= nil then
      local spec = TYPES[FIELDS[k]]
      if not spec[2](v) then error(string.format('bert.config_json: %s must be %s, got %s', k, spec[1], json_type(v)), 2) end
      out[k] = FLOATS[k] and v + 0.0 or v
    end
  end
  local arch = opts.architectures or cfg.architectures
  if arch ~= nil then
    if not TYPES.strings[2](arch) then error('bert.config_json: architectures must be a list of strings', 2) end
    out.architectures = arch
  end
  out.id2label, out.label2id = labels(cfg)
  if type(cfg.problem_type) == 'string' then out.problem_type = cfg.problem_type end
  if opts.dtype then out.dtype = opts.dtype end
  for _, k in ipairs(extra or {}) do
    if out[k] == nil and not DROPPED[k] and cfg[k] ~= nil then out[k] = cfg[k] end
  end
  return v100.json.encode(out, { pretty = true, nonfinite = 'error' }) .. '\n'
end

-- -------------------------------------------------------------------------------------------
-- from_pretrained

local ffail = errors.failer('bert.from_pretrained: ', 0)

local function shape_str(t) return #t.shape == 0 and 'scalar' or table.concat(t.shape, 'x') end

local function is_head(name)
  return name:match('^cls%.') or name:match('^classifier%.') or name:match('^bert%.pooler%.') or name:match('^pooler%.')
end

-- The file's tensors under the names of a model with heads ('bert.'-prefixed): TF-era
-- gamma/beta renamed, the non-persistent buffers dropped, a bare BertModel file prefixed,
-- and the tied decoder entries checked against what they are tied to, then dropped.
local function normalise(raw, file)
  local prefixed = false
  for name in pairs(raw) do if name:match('^bert%.') then prefixed = true end end
  local sd = {}
  for name, t in pairs(raw) do
    local n = name:gsub('LayerNorm%.gamma$', 'LayerNorm.weight'):gsub('LayerNorm%.beta$', 'LayerNorm.bias')
    if not prefixed and not n:match('^cls%.') and not n:match('^classifier%.') then n = 'bert.' .. n end
    if not (n:match('embeddings%.position_ids$') or n:match('embeddings%.token_type_ids$')) then
      if sd[n] ~= nil then ffail('%s: two tensors map to %s', file, n) end
      sd[n] = t
    end
  end
  if sd['cls.predictions.bias'] == nil then sd['cls.predictions.bias'] = sd['cls.predictions.decoder.bias'] end
  for tied, src in pairs(TIED) do
    local a, b = sd[tied], sd[src]
    if a ~= nil and b ~= nil and not (shape_str(a) == shape_str(b) and a:ne(b):sum():item() == 0) then
      ffail('%s: %s differs from %s: an untied MLM decoder (tie_word_embeddings = false) is not supported', file,
        tied, src)
    end
    sd[tied] = nil
  end
  return sd
end

local function default_class(cfg)
  for _, a in ipairs(cfg.architectures or {}) do if CLASSES[a] then return a end end
  return 'BertModel'
end

local function weights_file(dir)
  local f = join(dir, WEIGHTS)
  if exists(f) then return f end
  for _, other in ipairs { 'pytorch_model.bin', 'model.safetensors.index.json', 'pytorch_model.bin.index.json',
    'tf_model.h5', 'flax_model.msgpack' } do
    if exists(join(dir, other)) then
      if other:match('^model%.safetensors') then
        ffail('%s: holds a sharded checkpoint (%s), which is not supported: only a single %s is read', dir, other, WEIGHTS)
      end
      ffail('%s: has %s but no %s: only safetensors is read (PyTorch .bin files are pickles, which v100lua ' ..
        'never loads: they can run code). Convert it once with transformers: ' ..
        'AutoModel.from_pretrained(dir).save_pretrained(dir) writes %s', dir, other, WEIGHTS, WEIGHTS)
    end
  end
  ffail('%s: no %s', dir, WEIGHTS)
end

local function tokenizer(dir)
  local vocab = join(dir, VOCAB)
  if not exists(vocab) then return nil end
  local topts = { lower = true }
  local tc = read_file(join(dir, TOKCFG))
  if tc then
    local t = v100.json.decode(tc, join(dir, TOKCFG))
    if type(t) == 'table' then
      if type(t.do_lower_case) == 'boolean' then topts.lower = t.do_lower_case end
      if type(t.strip_accents) == 'boolean' then topts.strip_accents = t.strip_accents end
    end
  end
  return v100.text.WordPiece(vocab, topts)
end

local OPTS = { 'class', 'num_labels', 'strict', 'dtype', 'device', 'quiet' }

function M.from_pretrained(dir, opts)
  opts = opts or {}
  if type(dir) ~= 'string' or dir == '' then ffail('expected a directory name, got %s', type(dir)) end
  if type(opts) ~= 'table' then ffail('opts must be a table, got %s', type(opts)) end
  errors.check_opts('bert.from_pretrained', opts, OPTS, 0)
  if not fs.is_dir(dir) then ffail('%s: not a directory (a Hugging Face model folder: config.json, %s)', dir, WEIGHTS) end
  local cpath = join(dir, CONFIG)
  if not exists(cpath) then ffail('%s: no %s', dir, CONFIG) end
  local cfg = M.read_config(cpath)
  if opts.num_labels ~= nil then
    if math.type(opts.num_labels) ~= 'integer' or opts.num_labels < 1 then
      ffail('num_labels must be an integer >= 1, got %s', tostring(opts.num_labels))
    end
    if opts.num_labels ~= cfg.num_labels then cfg.id2label, cfg.label2id = nil, nil end
    cfg.num_labels = opts.num_labels
  end
  local class = opts.class or default_class(cfg)
  if not CLASSES[class] then
    ffail("class must be 'BertModel', 'BertForPreTraining' or 'BertForSequenceClassification', got %s", tostring(class))
  end
  if class == 'BertForPreTraining' and cfg.tie_word_embeddings == false then
    ffail('%s: tie_word_embeddings is false: an untied MLM decoder is not supported', cpath)
  end
  local file = weights_file(dir)
  local ok, raw = pcall(v100.load_safetensors, file)
  if not ok then ffail('%s', tostring(raw)) end
  local sd = normalise(raw, file)
  local model = class == 'BertForSequenceClassification' and bert[class](cfg, cfg.num_labels) or bert[class](cfg)
  if class == 'BertModel' then -- the file's 'bert.' names are the model's bare ones
    local bare = {}
    for n, t in pairs(sd) do bare[n:match('^bert%.(.*)$') or n] = t end
    sd = bare
  end
  -- names, shapes, missing and unexpected entries (the tied decoder entries are the tensors
  -- they are tied to, loaded under those names)
  local want, missing, unexpected, bad = model:state_dict(), {}, {}, {}
  for _, name in ipairs(sorted_keys(want)) do
    if not TIED[name] then
      local src, t = sd[name], want[name]
      if src == nil then missing[#missing + 1] = name
      elseif shape_str(src) ~= shape_str(t) then
        bad[#bad + 1] = string.format('%s has shape %s in the file and %s in the model', name, shape_str(src), shape_str(t))
      end
    end
  end
  if #bad > 0 then ffail('%s does not fit %s (%s): %s', file, class, cpath, table.concat(bad, '; ')) end
  local load = {}
  for name, t in pairs(sd) do
    if want[name] == nil then unexpected[#unexpected + 1] = name else load[name] = t end
  end
  table.sort(missing)
  table.sort(unexpected)
  if opts.strict ~= false then
    for _, n in ipairs(missing) do if not is_head(n) then bad[#bad + 1] = 'missing ' .. n end end
    for _, n in ipairs(unexpected) do if not is_head(n) then bad[#bad + 1] = 'unexpected ' .. n end end
    if #bad > 0 then
      ffail('%s does not fit %s (%s; strict = false loads it anyway): %s', file, class, cpath, table.concat(bad, ', '))
    end
  end
  model:load_state_dict(load, { strict = false })
  if opts.dtype or opts.device then model:to { dtype = opts.dtype, device = opts.device } end
  model:eval()
  local info = { class = class, file = file, missing_keys = missing, unexpected_keys = unexpected }
  local quiet = opts.quiet or (dist.is_initialized() and dist.rank() ~= 0)
  if not quiet and (#missing > 0 or #unexpected > 0) then
    -- one line: the initialised tensors by name (a head to train), the unused ones by module
    local groups, order = {}, {}
    for _, n in ipairs(unexpected) do
      local g = n:match('^([^.]+%.[^.]+)%.') or n
      if not groups[g] then groups[g], order[#order + 1] = 0, g end
      groups[g] = groups[g] + 1
    end
    local unused = {}
    for _, g in ipairs(order) do unused[#unused + 1] = string.format('%s.* (%d)', g, groups[g]) end
    local parts = {}
    if #missing > 0 then parts[#parts + 1] = 'initialised (not in the file): ' .. table.concat(missing, ', ') end
    if #unused > 0 then parts[#parts + 1] = 'unused: ' .. table.concat(unused, ', ') end
    io.stderr:write(string.format('bert.from_pretrained: %s as %s: %s\n', dir, class, table.concat(parts, '; ')))
  end
  return model, cfg, tokenizer(dir), info
end

-- -------------------------------------------------------------------------------------------
-- save_pretrained

local sfail = errors.failer('bert.save_pretrained: ', 0)

function M.save_pretrained(model, dir, opts)
  opts = errors.check_opts('bert.save_pretrained', opts, { 'vocab', 'lower' }, 0)
  -- a dist.DataParallel wrapper: its module
  if type(model) == 'table' and rawget(model, 'module') ~= nil and rawget(model, 'buckets') ~= nil then
    model = rawget(model, 'module')
  end
  local mt = type(model) == 'table' and getmetatable(model)
  local class = mt and mt.__name
  if not CLASSES[class] then sfail('model must be a bert.BertModel, BertForPreTraining or BertForSequenceClassification, got %s', tostring(class or type(model))) end
  if type(dir) ~= 'string' or dir == '' then sfail('dir must be a non-empty string, got %s', type(dir)) end
  local cfg = model.config
  if class == 'BertForSequenceClassification' and model.num_labels ~= cfg.num_labels then
    local c = {}
    for k, v in pairs(cfg) do c[k] = v end
    EXTRA[c] = EXTRA[cfg]
    c.num_labels, c.id2label = model.num_labels, nil
    cfg = c
  end
  local vocab
  if opts.vocab ~= nil then
    vocab = read_file(opts.vocab)
    if vocab == nil then sfail('cannot read the vocabulary %s', tostring(opts.vocab)) end
  end
  local text = M.config_json(cfg, { architectures = { class }, dtype = 'float32' })
  -- floating tensors as f32 (transformers' default dtype; widening f16/bf16 is exact), the tied
  -- decoder once, under the word embeddings' and cls.predictions.bias's names, as transformers
  -- writes it
  local out = {}
  for name, t in pairs(model:state_dict()) do
    if not TIED[name] then out[name] = v100.dtype_is_float(t.dtype) and t.dtype ~= 'f32' and t:to('f32') or t end
  end
  cio.makedirs(dir)
  -- each file atomic (temp + fsync + rename, runtime/io/replace.c); config.json last, so that
  -- an interrupted first save leaves a folder from_pretrained refuses (no config.json)
  v100.save_safetensors(join(dir, WEIGHTS), out, { format = 'pt' })
  if vocab then
    fs.write_atomic(join(dir, VOCAB), vocab)
    local tc = { do_lower_case = opts.lower ~= false, tokenizer_class = 'BertTokenizer' }
    fs.write_atomic(join(dir, TOKCFG), v100.json.encode(tc, { pretty = true }) .. '\n')
  end
  fs.write_atomic(join(dir, CONFIG), text)
  return dir
end

-- -------------------------------------------------------------------------------------------
-- Sentence embeddings

function M.sentence_embeddings(model, tok, texts, opts)
  opts = errors.check_opts('bert.sentence_embeddings', opts, { 'batch_size', 'max_length', 'device', 'normalize' })
  local enc = getmetatable(model) == bert.BertModel and model or (type(model) == 'table' and model.bert)
  if getmetatable(enc) ~= bert.BertModel then
    error('bert.sentence_embeddings: model must be a bert model (BertModel or one with .bert), got ' .. type(model), 2)
  end
  if type(texts) ~= 'table' then error('bert.sentence_embeddings: texts must be a list of strings, got ' .. type(texts), 2) end
  local bs, max_length = opts.batch_size or 32, opts.max_length or 128
  if math.type(bs) ~= 'integer' or bs < 1 then error('bert.sentence_embeddings: batch_size must be an integer >= 1', 2) end
  local device = opts.device or enc.embeddings.word_embeddings.weight.device
  local pad = tok:token_to_id('[PAD]') or enc.config.pad_token_id or 0
  local H = enc.config.hidden_size
  local was_training = enc.training
  enc:eval()
  local ok, res = pcall(v100.no_grad, function()
    local parts = {}
    for first = 1, #texts, bs do
      local ids, mask, L = {}, {}, 1
      for i = first, math.min(first + bs - 1, #texts) do
        local e = tok:encode(texts[i], { max_length = max_length, truncation = true, as = 'table' })
        ids[#ids + 1] = e.ids
        L = math.max(L, #e.ids)
      end
      for b, row in ipairs(ids) do -- pad to the batch's longest
        local m = {}
        for j = 1, L do
          m[j] = row[j] and 1 or 0
          row[j] = row[j] or pad
        end
        mask[b] = m
      end
      local tids = v100.tensor(ids, { dtype = 'i64', device = device })
      local tmask = v100.tensor(mask, { dtype = 'i64', device = device })
      local h = enc(tids, nil, tmask)
      parts[#parts + 1] = bert.mean_pool(h, tmask, { normalize = opts.normalize ~= false }):to { dtype = 'f32', device = 'cpu' }
    end
    if #parts == 0 then return v100.zeros({ 0, H }) end
    return #parts == 1 and parts[1] or v100.cat(parts, 1)
  end)
  enc:train(was_training)
  if not ok then error(res, 0) end
  return res
end

return M
