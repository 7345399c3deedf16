-- tests/lua/test_bert_hf.lua: v100.models.bert and Hugging Face folders: config.json (nulls,
-- typed errors, labels), save_pretrained -> from_pretrained round trips of the three classes,
-- bare and prefixed files, TF-era names, error messages, the MLM head at masked positions
-- (values and gradients), the masked pretraining loss, mean pooling and sentence embeddings.
-- Last, when $V100_PYTHON (default python3) imports torch and transformers, the folders written
-- here are loaded by transformers (tools/check_hf_bert.py) and its outputs compared with ours
-- (max |diff| <= 1e-5); otherwise that part prints a skip line.
local v100 = require 'v100'
local bert = require 'v100.models.bert'
local autograd = require 'v100.autograd'
local T = require 'testlib'

local here = debug.getinfo(1, 'S').source:match('^@(.*[/\\])') or './'
local ROOT = here .. '../../'

local TINY = { vocab_size = 40, hidden_size = 16, num_hidden_layers = 2, num_attention_heads = 4,
  intermediate_size = 24, max_position_embeddings = 12, type_vocab_size = 2 }
local function tiny_inputs()
  local ids = v100.tensor({ { 5, 7, 9, 3, 0, 0 }, { 2, 8, 11, 4, 6, 3 } })
  local tt = v100.tensor({ { 0, 0, 1, 1, 0, 0 }, { 0, 0, 0, 1, 1, 1 } })
  local mask = v100.tensor({ { 1, 1, 1, 1, 0, 0 }, { 1, 1, 1, 1, 1, 1 } })
  return ids, tt, mask
end

-- Every parameter moved off its initial value (LayerNorm weights not 1, biases not 0, the pad
-- row not 0), so that a tensor loaded into the wrong place shows.
local function perturb(m, seed)
  v100.manual_seed(seed)
  v100.no_grad(function()
    for _, p in ipairs(m:parameters()) do p:add_(v100.randn(p.shape) * 0.1) end
  end)
  return m
end

local function json_file(dir, name, value_or_text)
  local text = type(value_or_text) == 'string' and value_or_text or v100.json.encode(value_or_text)
  T.write_file(dir .. '/' .. name, text)
end

local function keys_of(t)
  local out = {}
  for k in pairs(t) do out[#out + 1] = k end
  table.sort(out)
  return out
end

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

-- ---------------------------------------------------------------------------------------------
-- config.json

T.test('config.json: classifier_dropout null means the default (regression)', function()
  -- transformers writes "classifier_dropout": null; v100.json decodes null to nil (absent), and a
  -- null must never reach nn.Dropout (it failed there with "attempt to compare table with number"
  -- when a JSON null arrived as a sentinel table)
  local dir = T.tmpdir()
  json_file(dir, 'config.json', [[{"architectures": ["BertForSequenceClassification"], "model_type": "bert",
    "vocab_size": 40, "hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 24,
    "max_position_embeddings": 12, "hidden_dropout_prob": 0.25, "classifier_dropout": null, "bos_token_id": null,
    "pad_token_id": 0, "id2label": {"0": "neg", "1": "pos", "2": "neutral"}, "problem_type": null}]])
  local cfg = bert.read_config(dir .. '/config.json')
  T.eq(cfg.classifier_dropout, nil)
  T.eq(cfg.num_labels, 3, 'num_labels from id2label')
  T.eq(cfg.id2label[2], 'neutral')
  local m = bert.BertForSequenceClassification(cfg)
  T.eq(m.dropout.p, 0.25, 'the classifier dropout falls back to hidden_dropout_prob')
  T.eq(m.classifier.weight.shape[1], 3)
  -- a null-like value that is not nil (another JSON library's null sentinel) is a typed error,
  -- not a failure inside Dropout
  T.raises(function() bert.read_config({ classifier_dropout = {} }) end,
    'config: classifier_dropout must be a number, got empty object')
end)

T.test('config.json: typed errors name the field, expected and actual type', function()
  local dir = T.tmpdir()
  local p = dir .. '/config.json'
  json_file(dir, 'config.json', '{"hidden_size": "768"}')
  T.raises(function() bert.read_config(p) end, 'config.json: hidden_size must be an integer, got string')
  json_file(dir, 'config.json', '{"hidden_size": 768.0}')
  T.raises(function() bert.read_config(p) end, 'hidden_size must be an integer, got float (768.0)')
  json_file(dir, 'config.json', '{"layer_norm_eps": true}')
  T.raises(function() bert.read_config(p) end, 'layer_norm_eps must be a number, got boolean')
  json_file(dir, 'config.json', '{"architectures": "BertModel"}')
  T.raises(function() bert.read_config(p) end, 'architectures must be a list of strings, got string')
  json_file(dir, 'config.json', '{"model_type": "roberta"}')
  T.raises(function() bert.read_config(p) end, "model_type is 'roberta', not 'bert'")
  json_file(dir, 'config.json', '{"hidden_act": "swish"}')
  T.raises(function() bert.read_config(p) end, "hidden_act 'swish' is not supported")
  json_file(dir, 'config.json', '{"position_embedding_type": "relative_key"}')
  T.raises(function() bert.read_config(p) end, "position_embedding_type 'relative_key' is not supported")
  json_file(dir, 'config.json', '{"id2label": {"0": "a", "2": "c"}}')
  T.raises(function() bert.read_config(p) end, 'id2label must number the labels 0..1')
  json_file(dir, 'config.json', '{"hidden_size": 30, "num_attention_heads": 4}')
  T.raises(function() bert.read_config(p) end, { p, 'not a multiple' })
  json_file(dir, 'config.json', '[1, 2]')
  T.raises(function() bert.read_config(p) end, 'expected a JSON object, got array')
  json_file(dir, 'config.json', '{"hidden_size": ')
  T.raises(function() bert.read_config(p) end, { 'json_decode', p })
  T.raises(function() bert.read_config(dir .. '/none.json') end, 'cannot read the file')
end)

T.test('config.json: defaults, unknown fields kept, config_json is what BertConfig reads', function()
  local cfg = bert.read_config({ hidden_size = 16, num_attention_heads = 4, initializer_range = 1,
    gradient_checkpointing = false, output_past = true, transformers_version = '4.6.0' })
  T.eq(cfg.vocab_size, 30522)
  T.eq(cfg.num_labels, 2)
  T.eq(cfg.output_past, true, 'unknown fields kept')
  T.eq(math.type(cfg.initializer_range), 'float')
  cfg.lua_side = 'not for config.json'
  local text = bert.config_json(cfg, { architectures = { 'BertForPreTraining' } })
  local j = v100.json.decode(text)
  T.eq(j.model_type, 'bert')
  T.eq(j.architectures[1], 'BertForPreTraining')
  T.eq(j.hidden_size, 16)
  T.eq(j.output_past, true, 'unknown config.json fields written back')
  T.eq(j.lua_side, nil, 'Lua-only keys are not written')
  T.eq(j.num_labels, nil, 'num_labels is implied by id2label, as transformers writes it')
  T.eq(j.transformers_version, nil)
  T.eq(j.id2label['1'], 'LABEL_1')
  T.eq(j.label2id.LABEL_0, 0)
  T.eq(j.tie_word_embeddings, true)
  T.ok(text:find('"initializer_range":%s*1%.0'), 'float fields stay floats (BertConfig is a strict dataclass)')
  T.ok(text:find('\n'), 'pretty-printed')
  for _, k in ipairs { 'vocab_size', 'num_hidden_layers', 'intermediate_size', 'hidden_act', 'hidden_dropout_prob',
    'attention_probs_dropout_prob', 'max_position_embeddings', 'type_vocab_size', 'layer_norm_eps', 'pad_token_id',
    'use_cache', 'is_decoder', 'add_cross_attention' } do
    T.ok(j[k] ~= nil, 'config.json has ' .. k)
  end
  -- and back
  local back = bert.read_config(j)
  for _, k in ipairs { 'hidden_size', 'vocab_size', 'layer_norm_eps', 'initializer_range', 'num_labels' } do
    T.eq(back[k], cfg[k], k)
  end
end)

-- ---------------------------------------------------------------------------------------------
-- save_pretrained / from_pretrained

local function outputs(m, class)
  local ids, tt, mask = tiny_inputs()
  return v100.no_grad(function() return { m(ids, tt, mask) } end), class
end

T.test('save_pretrained -> from_pretrained is bitwise exact for the three classes', function()
  for i, class in ipairs { 'BertModel', 'BertForPreTraining', 'BertForSequenceClassification' } do
    local m = perturb(class == 'BertForSequenceClassification' and bert[class](TINY, 3) or bert[class](TINY), 10 + i):eval()
    local want = outputs(m)
    local dir = T.tmpdir() .. '/model'
    T.eq(bert.save_pretrained(m, dir), dir)
    local sd = v100.load_safetensors(dir .. '/model.safetensors')
    T.eq(sd['cls.predictions.decoder.weight'], nil, 'the tied decoder is written once')
    T.eq(sd['cls.predictions.decoder.bias'], nil)
    for _, t in pairs(sd) do T.eq(t.dtype, 'f32') end
    if class == 'BertModel' then T.ok(sd['embeddings.word_embeddings.weight'] ~= nil, 'bare names') end
    local j = v100.json.decode(T.read_file(dir .. '/config.json'))
    T.eq(j.architectures[1], class)
    T.eq(j.dtype, 'float32')
    v100.manual_seed(99)
    local m2, cfg, tok, info = bert.from_pretrained(dir)
    T.eq(getmetatable(m2).__name, class, 'class from config.architectures')
    T.eq(tok, nil, 'no vocab.txt: no tokenizer')
    T.eq(#info.missing_keys, 0)
    T.eq(#info.unexpected_keys, 0)
    T.ok(not m2.training, 'eval mode, as transformers')
    if class == 'BertForSequenceClassification' then T.eq(cfg.num_labels, 3) end
    local got = outputs(m2)
    for k = 1, #want do T.tensor_eq(got[k], want[k], class .. ' output ' .. k) end
    if class == 'BertForPreTraining' then
      T.eq(m2.cls.predictions.decoder.weight, m2.bert.embeddings.word_embeddings.weight, 'still tied')
      T.eq(m2.cls.predictions.decoder.bias, m2.cls.predictions.bias)
    end
  end
end)

T.test('a bf16 model is written as f32 and read back bit for bit', function()
  local m = perturb(bert.BertForPreTraining(TINY), 15):to('bf16')
  local dir = T.tmpdir()
  bert.save_pretrained(m, dir)
  for _, t in pairs(v100.load_safetensors(dir .. '/model.safetensors')) do T.eq(t.dtype, 'f32') end
  local m2 = bert.from_pretrained(dir, { dtype = 'bf16' })
  local sd2 = m2:state_dict()
  for name, t in pairs(m:state_dict()) do
    T.eq(sd2[name].dtype, t.dtype, name)
    T.tensor_eq(sd2[name], t, name)
  end
end)

T.test('from_pretrained: bare and prefixed files into any class, heads reported', function()
  local base = perturb(bert.BertModel(TINY), 21):eval()
  local dir = T.tmpdir()
  bert.save_pretrained(base, dir)
  local ids, tt, mask = tiny_inputs()
  local want = v100.no_grad(function() return base(ids, tt, mask) end)
  -- a bare BertModel file into BertForPreTraining: the heads are initialised and listed
  local pt, _, _, info = bert.from_pretrained(dir, { class = 'BertForPreTraining', quiet = true })
  T.eq(info.missing_keys, { 'cls.predictions.bias', 'cls.predictions.transform.LayerNorm.bias',
    'cls.predictions.transform.LayerNorm.weight', 'cls.predictions.transform.dense.bias',
    'cls.predictions.transform.dense.weight', 'cls.seq_relationship.bias', 'cls.seq_relationship.weight' })
  T.tensor_eq(v100.no_grad(function() return pt.bert(ids, tt, mask) end), want)
  local sc, cfg, _, info2 = bert.from_pretrained(dir, { class = 'BertForSequenceClassification', num_labels = 5, quiet = true })
  T.eq(info2.missing_keys, { 'classifier.bias', 'classifier.weight' })
  T.eq(sc.classifier.weight.shape[1], 5)
  T.eq(cfg.num_labels, 5)
  -- a prefixed BertForPreTraining file into BertModel and BertForSequenceClassification
  local dir2 = T.tmpdir()
  bert.save_pretrained(pt, dir2)
  local bm, _, _, info3 = bert.from_pretrained(dir2, { class = 'BertModel', quiet = true })
  T.eq(#info3.missing_keys, 0)
  T.eq(#info3.unexpected_keys, 7, 'the heads are unused')
  T.tensor_eq(v100.no_grad(function() return bm(ids, tt, mask) end), want)
  local sc2 = bert.from_pretrained(dir2, { class = 'BertForSequenceClassification', quiet = true })
  T.tensor_eq(v100.no_grad(function() return sc2.bert(ids, tt, mask) end), want)
  -- the one-line report (not quiet), through a child process so that its stderr can be read
  local script = os.tmpname() .. '.lua'
  T.write_file(script, string.format([[package.path = %q .. package.path
    local bert = require 'v100.models.bert'
    bert.from_pretrained(%q, { class = 'BertForSequenceClassification' })]], ROOT .. 'scripts/?.lua;', dir2))
  local out = T.run_binary(script)
  os.remove(script)
  T.ok(out:find('bert.from_pretrained: ' .. dir2 .. ' as BertForSequenceClassification: initialised (not in the file): ' ..
    'classifier.bias, classifier.weight; unused: cls.predictions.* (5), cls.seq_relationship.* (2)', 1, true), out)
end)

T.test('from_pretrained: TF-era names, tokenizer, dtype, strict and errors', function()
  local m = perturb(bert.BertForPreTraining(TINY), 31):eval()
  local ids, tt, mask = tiny_inputs()
  local s0, n0 = v100.no_grad(function() return m(ids, tt, mask) end)
  local dir = T.tmpdir()
  bert.save_pretrained(m, dir)
  -- rewrite with LayerNorm.gamma/beta names and the decoder entries present (older exports)
  local sd = v100.load_safetensors(dir .. '/model.safetensors')
  local old = {}
  for k, t in pairs(sd) do
    old[(k:gsub('LayerNorm%.weight$', 'LayerNorm.gamma'):gsub('LayerNorm%.bias$', 'LayerNorm.beta'))] = t
  end
  old['cls.predictions.decoder.weight'] = sd['bert.embeddings.word_embeddings.weight']
  old['bert.embeddings.position_ids'] = v100.arange(0, 12):view{ 1, 12 }
  v100.save_safetensors(dir .. '/model.safetensors', old)
  T.write_file(dir .. '/vocab.txt', '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nHello\nhello\n')
  json_file(dir, 'tokenizer_config.json', { do_lower_case = false })
  local m2, _, tok = bert.from_pretrained(dir)
  local s, n = v100.no_grad(function() return m2(ids, tt, mask) end)
  T.tensor_eq(s, s0)
  T.tensor_eq(n, n0)
  T.ok(tok ~= nil, 'vocab.txt: a tokenizer')
  T.eq(tok:tokenize('Hello'), { 'Hello' }, 'do_lower_case false from tokenizer_config.json')
  -- dtype
  local mb = bert.from_pretrained(dir, { dtype = 'bf16' })
  T.eq(mb.bert.encoder.layer[1].attention.self.query.weight.dtype, 'bf16')
  -- an untied decoder is refused
  old['cls.predictions.decoder.weight'] = sd['bert.embeddings.word_embeddings.weight'] + 1
  v100.save_safetensors(dir .. '/model.safetensors', old)
  T.raises(function() bert.from_pretrained(dir) end, 'untied MLM decoder')
  -- a missing encoder tensor: strict refuses, naming it; strict = false loads and lists it
  sd['bert.encoder.layer.1.output.dense.bias'] = nil
  v100.save_safetensors(dir .. '/model.safetensors', sd)
  T.raises(function() bert.from_pretrained(dir) end, { 'does not fit BertForPreTraining',
    'missing bert.encoder.layer.1.output.dense.bias' })
  local _, _, _, info = bert.from_pretrained(dir, { strict = false, quiet = true })
  T.eq(info.missing_keys, { 'bert.encoder.layer.1.output.dense.bias' })
  -- an unexpected encoder tensor (a third layer)
  sd['bert.encoder.layer.1.output.dense.bias'] = v100.zeros({ 16 })
  sd['bert.encoder.layer.2.output.dense.bias'] = v100.zeros({ 16 })
  v100.save_safetensors(dir .. '/model.safetensors', sd)
  T.raises(function() bert.from_pretrained(dir) end, 'unexpected bert.encoder.layer.2.output.dense.bias')
  sd['bert.encoder.layer.2.output.dense.bias'] = nil
  -- a shape mismatch names the tensor and both shapes
  local cfg = v100.json.decode(T.read_file(dir .. '/config.json'))
  cfg.vocab_size = 50
  json_file(dir, 'config.json', cfg)
  v100.save_safetensors(dir .. '/model.safetensors', sd)
  T.raises(function() bert.from_pretrained(dir) end,
    'bert.embeddings.word_embeddings.weight has shape 40x16 in the file and 50x16 in the model')
  -- folders and files
  T.raises(function() bert.from_pretrained(dir .. '/nope') end, 'not a directory')
  T.raises(function() bert.from_pretrained(dir, { clas = 'BertModel' }) end, "unknown option 'clas'")
  T.raises(function() bert.from_pretrained(dir, { class = 'BertForMaskedLM' }) end, 'class must be')
  os.remove(dir .. '/model.safetensors')
  T.raises(function() bert.from_pretrained(dir) end, 'no model.safetensors')
  T.write_file(dir .. '/pytorch_model.bin', 'PK')
  T.raises(function() bert.from_pretrained(dir) end, { 'has pytorch_model.bin', 'only safetensors is read' })
  os.remove(dir .. '/config.json')
  T.raises(function() bert.from_pretrained(dir) end, 'no config.json')
end)

T.test('from_pretrained reads a transformers state dict (tests/data reference)', function()
  local path = here .. '../data/bert_tiny_ref.safetensors.gz'
  local f = io.open(path, 'rb')
  if not f then return print('skip: ' .. path .. ' is absent') end
  f:close()
  local all, meta = v100.load_safetensors(path)
  local sd, ext = {}, {}
  for k, t in pairs(all) do
    local inner = k:match('^__(.+)__$')
    if inner then ext[inner] = t else sd[k] = t end
  end
  local dir = T.tmpdir()
  v100.save_safetensors(dir .. '/model.safetensors', sd) -- as torch's state_dict: decoder entries included
  local cfg = { architectures = { 'BertForPreTraining' }, model_type = 'bert' }
  for k, v in pairs(meta) do
    if k ~= 'model' and k ~= 'mode' and k ~= 'torch' then cfg[k] = math.tointeger(tonumber(v)) or tonumber(v) or v end
  end
  cfg.layer_norm_eps = cfg.layer_norm_eps + 0.0
  json_file(dir, 'config.json', cfg)
  local m = bert.from_pretrained(dir)
  local scores, nsp = v100.no_grad(function() return m(ext.input_ids, ext.token_type_ids, ext.attention_mask) end)
  local scale = ext.prediction_scores:abs():max():item()
  T.tensor_close(scores, ext.prediction_scores, 1e-5, 1e-5 * scale)
  T.tensor_close(nsp, ext.seq_relationship_score, 1e-5, 1e-5 * ext.seq_relationship_score:abs():max():item())
end)

-- ---------------------------------------------------------------------------------------------
-- The MLM head at masked positions

T.test('masked positions: the scores of the full head at those rows, same gradients', function()
  local m = perturb(bert.BertForPreTraining(TINY), 41):eval()
  local ids, tt, mask = tiny_inputs()
  local pos = v100.tensor({ { 1, 3, 0 }, { 5, 0, 2 } })
  local full, nsp_full = m(ids, tt, mask)
  local part, nsp_part = m(ids, tt, mask, pos)
  T.eq(part.shape, { 2, 3, 40 })
  local V = 40
  local gathered = full:gather(2, pos:unsqueeze(3):expand{ 2, 3, V })
  T.tensor_close(part, gathered, 1e-6, 1e-6)
  T.tensor_eq(nsp_part, nsp_full)
  -- the same loss through either path gives the same parameter gradients
  local labels = v100.tensor({ { 7, 9, -100 }, { 3, -100, 11 } })
  local full_labels = v100.tensor({ { -100, 7, -100, 9, -100, -100 }, { -100, -100, 11, -100, -100, 3 } })
  local nsl = v100.tensor({ 0, 1 })
  local l1 = bert.pretraining_loss(part, nsp_part, labels, nsl)
  local l2 = bert.pretraining_loss(full, nsp_full, full_labels, nsl)
  T.near(l1:item(), l2:item(), 1e-6)
  local g1, g2 = {}, {}
  m:zero_grad()
  l1:backward()
  for _, e in ipairs(m:named_parameters()) do g1[e[1]] = e[2].grad:clone() end
  m:zero_grad()
  l2:backward()
  for _, e in ipairs(m:named_parameters()) do g2[e[1]] = e[2].grad end
  for name, g in pairs(g1) do T.tensor_close(g, g2[name], 1e-5, 1e-6, name) end
  -- the weighted form: masked_weights 0 on padding, labels there any id
  local w = v100.tensor({ { 1.0, 1.0, 0.0 }, { 1.0, 0.0, 1.0 } })
  local l3, mlm3, nsp3 = bert.pretraining_loss(part, nsp_part, labels:clamp(0, nil), nsl, { weights = w })
  T.near(l3:item(), l1:item(), 1e-6)
  T.near((mlm3 + nsp3):item(), l3:item(), 1e-6)
  local zero = bert.pretraining_loss(part, nil, labels:clamp(0, nil), nil, { weights = w * 0 })
  T.eq(zero:item(), 0, 'no real prediction: 0, not NaN')
  T.raises(function() m(ids, tt, mask, v100.tensor({ { 6 }, { 0 } })) end, 'out of bounds')
  T.raises(function() m(ids, tt, mask, v100.tensor({ 1, 2 })) end, 'masked_positions must be a B x P')
end)

T.test('masked positions: gradcheck of gather + MLM head (f64)', function()
  local m = perturb(bert.BertForPreTraining({ vocab_size = 7, hidden_size = 4, num_hidden_layers = 1,
    num_attention_heads = 1, intermediate_size = 4, max_position_embeddings = 5 }), 42):eval():to('f64')
  local pos = v100.tensor({ { 2, 0 }, { 1, 1 } })
  local x = v100.randn({ 2, 3, 4 }, { dtype = 'f64' }):requires_grad_(true)
  T.ok(autograd.gradcheck(function(h) return m.cls.predictions(bert.gather_positions(h, pos)) end, { x }))
end)

-- ---------------------------------------------------------------------------------------------
-- Sentence embeddings

T.test('mean_pool against a plain Lua computation; fully masked rows give zeros', function()
  v100.manual_seed(51)
  local h = v100.randn({ 3, 4, 5 })
  local mask = v100.tensor({ { 1, 1, 0, 0 }, { 1, 1, 1, 1 }, { 0, 0, 0, 0 } })
  local ht, mt = h:totable(), mask:totable()
  local want, want_n = {}, {}
  for b = 1, 3 do
    local row, n = {}, 0
    for j = 1, 4 do n = n + mt[b][j] end
    local norm = 0
    for k = 1, 5 do
      local s = 0
      for j = 1, 4 do s = s + ht[b][j][k] * mt[b][j] end
      row[k] = n > 0 and s / n or 0
      norm = norm + row[k] ^ 2
    end
    norm = math.sqrt(norm)
    want[b], want_n[b] = row, {}
    for k = 1, 5 do want_n[b][k] = norm > 0 and row[k] / norm or 0 end
  end
  T.allclose(bert.mean_pool(h, mask, { normalize = false }), want, 1e-6, 1e-6)
  local e = bert.mean_pool(h, mask)
  T.allclose(e, want_n, 1e-6, 1e-6)
  T.eq(e:ne(e):sum():item(), 0, 'no NaN')
  T.allclose(bert.mean_pool(h, nil, { normalize = false }), h:mean(2):totable(), 1e-6, 1e-6)
end)

T.test('sentence_embeddings: batched and padded equals one text at a time', function()
  local vocab = os.tmpname()
  T.write_file(vocab, '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nsat\non\nmat\na\ndog\n##s\nran\n')
  local tok = v100.text.WordPiece(vocab)
  local m = perturb(bert.BertForSequenceClassification(TINY), 61)
  m:train()
  local texts = { 'the cat sat on the mat', 'a dog', 'dogs ran', 'the cat', 'a dog ran on a mat' }
  local e = bert.sentence_embeddings(m, tok, texts, { batch_size = 2 })
  T.eq(e.shape, { 5, 16 })
  T.ok(m.training and m.bert.training, 'the training mode is restored')
  for i, text in ipairs(texts) do
    local one = bert.sentence_embeddings(m.bert, tok, { text })
    T.tensor_close(e:narrow(1, i, 1), one, 1e-5, 1e-6, text)
    T.near(e:narrow(1, i, 1):norm():item(), 1, 1e-5)
  end
  -- by hand for one text: eval-mode hidden states, mean over its tokens, normalised
  local enc = tok:encode(texts[2])
  m.bert:eval()
  local h = v100.no_grad(function() return m.bert(enc.ids:unsqueeze(1)) end)
  local want = h:mean(2)
  want = want / want:norm()
  T.tensor_close(e:narrow(1, 2, 1), want, 1e-5, 1e-6)
  local raw = bert.sentence_embeddings(m, tok, texts, { normalize = false, max_length = 4 })
  T.ok(math.abs(raw:narrow(1, 1, 1):norm():item() - 1) > 1e-3, 'normalize = false')
  T.eq(bert.sentence_embeddings(m, tok, {}).shape, { 0, 16 })
  os.remove(vocab)
end)

-- ---------------------------------------------------------------------------------------------
-- transformers itself (tools/check_hf_bert.py), when torch and transformers are installed

T.test('transformers loads our folders and agrees (tools/check_hf_bert.py)', function()
  local py = os.getenv('V100_PYTHON') or 'python3'
  local probe = os.execute(py .. ' -c "import torch, transformers, safetensors" >/dev/null 2>&1')
  if not probe then
    return print(string.format('skip (no torch/transformers): %s cannot import torch, transformers, safetensors ' ..
      '(set V100_PYTHON to a python that can)', py))
  end
  local ids, tt, mask = tiny_inputs()
  local pos = v100.tensor({ { 1, 3, 0 }, { 5, 0, 2 } })
  for i, class in ipairs { 'BertModel', 'BertForPreTraining', 'BertForSequenceClassification' } do
    local m = perturb(class == 'BertForSequenceClassification' and bert[class](TINY, 3) or bert[class](TINY), 70 + i):eval()
    local root = T.tmpdir()
    bert.save_pretrained(m, root .. '/model')
    local io_t = { input_ids = ids, token_type_ids = tt, attention_mask = mask }
    v100.no_grad(function()
      local a, b = m(ids, tt, mask)
      if class == 'BertModel' then io_t.last_hidden_state, io_t.pooler_output = a, b
      elseif class == 'BertForPreTraining' then
        io_t.prediction_logits, io_t.seq_relationship_logits = a, b
        io_t.masked_positions, io_t.masked_prediction_logits = pos, m(ids, tt, mask, pos)
      else io_t.logits = a end
    end)
    v100.save_safetensors(root .. '/io.safetensors', io_t, { class = class })
    local cmd = string.format("%s %stools/check_hf_bert.py '%s/model' '%s/io.safetensors' 2>&1", py, ROOT, root, root)
    print(cmd)
    local p = assert(io.popen(cmd, 'r'))
    local out = p:read('a')
    local ok = p:close()
    io.write(out)
    T.ok(ok, class .. ': tools/check_hf_bert.py failed')
  end
end)

T.run()
