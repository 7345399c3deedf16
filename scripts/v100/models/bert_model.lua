-- scripts/v100/models/bert_model.lua: the model of `v100.models.bert` (models/bert.lua adds the
-- Hugging Face folders of models/bert_hf.lua): BERT as Hugging Face's transformers has it
-- (BertModel, BertForPreTraining, BertForSequenceClassification), with HF's parameter names so
-- that HF checkpoints load with load_state_dict.
--
--   local bert = require 'v100.models.bert'
--   local cfg = bert.config('base')                 -- or 'large', or a table of HF fields
--   local m = bert.BertForPreTraining(cfg)
--   local scores, nsp = m(input_ids, token_type_ids, attention_mask)
--
-- Inputs: input_ids B x L (i64/i32, 0-based token ids), token_type_ids B x L (nil = zeros),
-- attention_mask B x L (1 = attend, 0 = padding; any dtype; nil = attend everywhere).
-- Outputs (as HF returns them): BertModel -> sequence_output B x L x H, pooled_output B x H;
-- BertForPreTraining -> prediction_scores B x L x vocab, seq_relationship_score B x 2;
-- BertForSequenceClassification -> logits B x num_labels. BertForPreTraining's fourth argument,
-- masked_positions (B x P), runs the MLM head on those rows only (B x P x vocab scores).
-- bert.mean_pool / bert.sentence_embeddings: sentence embeddings. Hugging Face folders
-- (bert.read_config, config_json, from_pretrained, save_pretrained): scripts/v100/models/bert_hf.lua.
--
-- HF's semantics kept: post-LayerNorm blocks, erf GELU (hidden_act = 'gelu'), the padding mask
-- as an additive mask of the dtype's lowest value (a fully padded row stays finite), the MLM
-- decoder's weight tied to the word embeddings with its own bias `cls.predictions.bias`
-- (also listed as `cls.predictions.decoder.bias`, as HF's state_dict does), dropout
-- (hidden_dropout_prob, attention_probs_dropout_prob) in training mode only, and HF's
-- initialisation: N(0, initializer_range) for Linear and Embedding weights, zero biases, the
-- pad_token_id row of the word embeddings zero and kept out of gradients.
local v100 = require 'v100.base'
local nn = require 'v100.nn'
local errors = require 'v100.errors'
local F = nn.functional
local init = nn.init

local bert = {}

-- ---------------------------------------------------------------------------------------------
-- Configurations (Hugging Face's BertConfig field names and defaults)

local BASE = {
  vocab_size = 30522, hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12,
  intermediate_size = 3072, hidden_act = 'gelu', hidden_dropout_prob = 0.1,
  attention_probs_dropout_prob = 0.1, max_position_embeddings = 512, type_vocab_size = 2,
  initializer_range = 0.02, layer_norm_eps = 1e-12, pad_token_id = 0, classifier_dropout = nil,
  num_labels = 2,
}
local LARGE = { hidden_size = 1024, num_hidden_layers = 24, num_attention_heads = 16, intermediate_size = 4096 }

-- bert.config('base' | 'large' | table[, overrides]) -> a new table with every field filled.
-- A table may be a parsed HF config.json: unknown fields are kept and ignored.
function bert.config(what, overrides)
  local cfg = {}
  for k, v in pairs(BASE) do cfg[k] = v end
  if what == 'large' then
    for k, v in pairs(LARGE) do cfg[k] = v end
  elseif type(what) == 'table' then
    for k, v in pairs(what) do cfg[k] = v end
  elseif what ~= nil and what ~= 'base' then
    error("bert.config: expected 'base', 'large' or a table, got " .. tostring(what), 2)
  end
  for k, v in pairs(overrides or {}) do cfg[k] = v end
  if cfg.hidden_size % cfg.num_attention_heads ~= 0 then
    error(string.format('bert.config: hidden_size %d is not a multiple of num_attention_heads %d', cfg.hidden_size,
      cfg.num_attention_heads), 2)
  end
  return cfg
end

local ACTS = {
  gelu = function(x) return F.gelu(x) end,
  gelu_new = function(x) return F.gelu(x, { approximate = 'tanh' }) end,
  gelu_pytorch_tanh = function(x) return F.gelu(x, { approximate = 'tanh' }) end,
  relu = function(x) return F.relu(x) end,
  tanh = function(x) return F.tanh(x) end,
}

local function activation(name)
  local f = ACTS[name]
  if not f then error('bert: unsupported hidden_act ' .. tostring(name), 3) end
  return f
end

-- Accepts a name or a parsed config.
local function as_config(cfg)
  if cfg == nil or type(cfg) == 'string' then return bert.config(cfg) end
  if type(cfg) ~= 'table' then error('bert: config must be a table or a name, got ' .. type(cfg), 3) end
  if cfg.vocab_size and cfg.hidden_size and cfg.num_attention_heads and cfg.layer_norm_eps then return cfg end
  return bert.config(cfg)
end

-- ---------------------------------------------------------------------------------------------
-- Pieces

-- An embedding table whose pad row gets no gradient but, unlike nn.Embedding's padding_idx
-- here, still returns the row's value: HF checkpoints converted from TensorFlow have non-zero
-- pad rows, and PyTorch returns them.
local PaddedEmbedding = nn.Module:extend('Embedding')
function PaddedEmbedding:init(n, dim, padding_idx)
  self.num_embeddings, self.embedding_dim, self.padding_idx = n, dim, padding_idx
  self.weight = v100.empty({ n, dim }):requires_grad_(true)
end
function PaddedEmbedding:forward(ids)
  local out = F.embedding(ids, self.weight)
  if self.padding_idx == nil or not v100.is_grad_enabled() or not self.weight.requires_grad then return out end
  -- same values; positions holding the pad id pass no gradient back
  return v100.where(ids:eq(self.padding_idx):unsqueeze(-1), out:detach(), out)
end
function PaddedEmbedding:extra_repr()
  local s = string.format('%d, %d', self.num_embeddings, self.embedding_dim)
  if self.padding_idx then s = s .. ', padding_idx=' .. self.padding_idx end
  return s
end

-- A Linear whose tensors belong to other modules (the tied MLM decoder).
local TiedLinear = nn.Module:extend('Linear')
function TiedLinear:init(weight, bias)
  self.weight = weight
  self.bias = bias
end
function TiedLinear:forward(x) return F.linear(x, self.weight, self.bias) end
function TiedLinear:extra_repr()
  return string.format('in_features=%d, out_features=%d, bias=true, tied', self.weight.shape[2], self.weight.shape[1])
end

local Embeddings = nn.Module:extend('BertEmbeddings')
function Embeddings:init(cfg)
  self.word_embeddings = PaddedEmbedding(cfg.vocab_size, cfg.hidden_size, cfg.pad_token_id)
  self.position_embeddings = nn.Embedding(cfg.max_position_embeddings, cfg.hidden_size)
  self.token_type_embeddings = nn.Embedding(cfg.type_vocab_size, cfg.hidden_size)
  self.LayerNorm = nn.LayerNorm(cfg.hidden_size, { eps = cfg.layer_norm_eps })
  self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
  self.max_positions = cfg.max_position_embeddings
end
function Embeddings:forward(input_ids, token_type_ids)
  local L = input_ids.shape[2]
  if L > self.max_positions then
    error(string.format('sequence length %d exceeds max_position_embeddings %d', L, self.max_positions), 0)
  end
  -- positions 0..L-1: the first L rows (a narrow, not a gather; same values and gradient)
  local x = self.word_embeddings(input_ids) + self.position_embeddings.weight:narrow(1, 1, L)
  if token_type_ids then
    x = x + self.token_type_embeddings(token_type_ids)
  else
    -- all segment 0: one row, broadcast
    x = x + self.token_type_embeddings.weight:narrow(1, 1, 1)
  end
  return self.dropout(self.LayerNorm(x))
end

local SelfAttention = nn.Module:extend('BertSelfAttention')
function SelfAttention:init(cfg)
  self.num_heads = cfg.num_attention_heads
  self.head_dim = cfg.hidden_size // cfg.num_attention_heads
  self.query = nn.Linear(cfg.hidden_size, cfg.hidden_size)
  self.key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
  self.value = nn.Linear(cfg.hidden_size, cfg.hidden_size)
  self.dropout_p = cfg.attention_probs_dropout_prob
end
-- h: B x L x H; mask: additive, B x 1 x 1 x L (or nil).
function SelfAttention:forward(h, mask)
  local B, L = h.shape[1], h.shape[2]
  local nh, hd = self.num_heads, self.head_dim
  local function heads(t) return t:view{ B, L, nh, hd }:transpose(2, 3) end
  local ctx = F.scaled_dot_product_attention(heads(self.query(h)), heads(self.key(h)), heads(self.value(h)),
    { mask = mask, dropout = self.training and self.dropout_p or 0 })
  return ctx:transpose(2, 3):reshape{ B, L, nh * hd }
end

-- dense -> dropout -> LayerNorm(x + residual): BertSelfOutput and BertOutput.
local function residual_output(name)
  local C = nn.Module:extend(name)
  function C:init(cfg, din)
    self.dense = nn.Linear(din, cfg.hidden_size)
    self.LayerNorm = nn.LayerNorm(cfg.hidden_size, { eps = cfg.layer_norm_eps })
    self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
  end
  function C:forward(x, residual) return self.LayerNorm(self.dropout(self.dense(x)) + residual) end
  return C
end
local SelfOutput = residual_output('BertSelfOutput')
local Output = residual_output('BertOutput')

local Attention = nn.Module:extend('BertAttention')
function Attention:init(cfg)
  self.self = SelfAttention(cfg)
  self.output = SelfOutput(cfg, cfg.hidden_size)
end
function Attention:forward(h, mask) return self.output(self.self(h, mask), h) end

local Intermediate = nn.Module:extend('BertIntermediate')
function Intermediate:init(cfg)
  self.dense = nn.Linear(cfg.hidden_size, cfg.intermediate_size)
  self.act = activation(cfg.hidden_act)
end
function Intermediate:forward(x) return self.act(self.dense(x)) end

local Layer = nn.Module:extend('BertLayer')
function Layer:init(cfg)
  self.attention = Attention(cfg)
  self.intermediate = Intermediate(cfg)
  self.output = Output(cfg, cfg.intermediate_size)
end
function Layer:forward(h, mask)
  local a = self.attention(h, mask)
  return self.output(self.intermediate(a), a)
end

local Encoder = nn.Module:extend('BertEncoder')
function Encoder:init(cfg)
  local layers = {}
  for i = 1, cfg.num_hidden_layers do layers[i] = Layer(cfg) end
  self.layer = nn.ModuleList(layers)
end
function Encoder:forward(h, mask)
  for _, l in ipairs(self.layer) do h = l(h, mask) end
  return h
end

local Pooler = nn.Module:extend('BertPooler')
function Pooler:init(cfg) self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size) end
-- tanh(dense(first token))
function Pooler:forward(h) return F.tanh(self.dense(h:select(2, 1))) end

-- The lowest finite value of a float dtype: the additive mask HF builds from attention_mask.
local LOWEST = { f32 = -3.4028234663852886e38, f64 = -1.7976931348623157e308, f16 = -65504.0,
  bf16 = -3.3895313892515355e38 }

-- attention_mask B x S (1 = attend) -> additive B x 1 x 1 x S of dtype.
function bert.extended_attention_mask(mask, dtype)
  local B, S = mask.shape[1], mask.shape[2]
  local keep = mask:to(dtype)
  return ((1 - keep) * LOWEST[dtype]):view{ B, 1, 1, S }
end

-- HF's _init_weights over a subtree.
local function hf_init(root, range)
  for _, e in ipairs(root:named_modules()) do
    local m = e[2]
    local cls = getmetatable(m)
    if cls == nn.Linear then
      init.normal_(m.weight, 0, range)
      if m.bias then init.zeros_(m.bias) end
    elseif cls == nn.Embedding or cls == PaddedEmbedding then
      init.normal_(m.weight, 0, range)
      if m.padding_idx then v100.no_grad(function() m.weight:narrow(1, m.padding_idx + 1, 1):zero_() end) end
    elseif cls == nn.LayerNorm then
      init.ones_(m.weight)
      init.zeros_(m.bias)
    end
  end
end

-- ---------------------------------------------------------------------------------------------
-- Models

local function check_ids(ids)
  if not v100.is_tensor(ids) or ids.ndim ~= 2 or (ids.dtype ~= 'i64' and ids.dtype ~= 'i32') then
    error('input_ids must be a B x L i64 or i32 tensor, got ' .. F._desc(ids), 0)
  end
end

local BertModel = nn.Module:extend('BertModel')
bert.BertModel = BertModel
-- opts.add_pooling_layer (default true), as HF.
function BertModel:init(cfg, opts)
  errors.check_opts('bert.BertModel', opts, { 'add_pooling_layer' }, 3)
  cfg = as_config(cfg)
  self.config = cfg
  self.embeddings = Embeddings(cfg)
  self.encoder = Encoder(cfg)
  if not (opts and opts.add_pooling_layer == false) then self.pooler = Pooler(cfg) end
  hf_init(self, cfg.initializer_range)
end
-- -> sequence_output B x L x H, pooled_output B x H (nil without a pooler)
function BertModel:forward(input_ids, token_type_ids, attention_mask)
  check_ids(input_ids)
  local h = self.embeddings(input_ids, token_type_ids)
  local mask = attention_mask and bert.extended_attention_mask(attention_mask, h.dtype) or nil
  h = self.encoder(h, mask)
  return h, self.pooler and self.pooler(h) or nil
end

local Transform = nn.Module:extend('BertPredictionHeadTransform')
function Transform:init(cfg)
  self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
  self.act = activation(cfg.hidden_act)
  self.LayerNorm = nn.LayerNorm(cfg.hidden_size, { eps = cfg.layer_norm_eps })
end
function Transform:forward(x) return self.LayerNorm(self.act(self.dense(x))) end

local LMPredictionHead = nn.Module:extend('BertLMPredictionHead')
function LMPredictionHead:init(cfg, word_weight)
  self.bias = v100.zeros({ cfg.vocab_size }):requires_grad_(true)
  self.transform = Transform(cfg)
  self.decoder = TiedLinear(word_weight, self.bias)
end
function LMPredictionHead:forward(h) return self.decoder(self.transform(h)) end

local PreTrainingHeads = nn.Module:extend('BertPreTrainingHeads')
function PreTrainingHeads:init(cfg, word_weight)
  self.predictions = LMPredictionHead(cfg, word_weight)
  self.seq_relationship = nn.Linear(cfg.hidden_size, 2)
end
function PreTrainingHeads:forward(seq, pooled) return self.predictions(seq), self.seq_relationship(pooled) end

local BertForPreTraining = nn.Module:extend('BertForPreTraining')
bert.BertForPreTraining = BertForPreTraining
function BertForPreTraining:init(cfg)
  cfg = as_config(cfg)
  self.config = cfg
  self.bert = BertModel(cfg)
  self.cls = PreTrainingHeads(cfg, self.bert.embeddings.word_embeddings.weight)
  hf_init(self.cls, cfg.initializer_range)
end
-- The rows of h (B x L x H) at positions (B x P, i64/i32, 0-based per sequence) -> B x P x H.
-- A gather along the sequence: its backward scatters into h (summed where a position repeats);
-- a position outside 0..L-1 is an error of the gather, named.
function bert.gather_positions(h, positions)
  if not v100.is_tensor(positions) or positions.ndim ~= 2 or (positions.dtype ~= 'i64' and positions.dtype ~= 'i32') then
    error('masked_positions must be a B x P i64 or i32 tensor, got ' .. F._desc(positions), 0)
  end
  local B, P, H = positions.shape[1], positions.shape[2], h.shape[3]
  if B ~= h.shape[1] then
    error(string.format('masked_positions has %d rows, the batch %d', B, h.shape[1]), 0)
  end
  if positions.device ~= h.device then positions = positions:to(h.device) end
  return h:gather(2, positions:unsqueeze(3):expand{ B, P, H })
end

-- -> prediction_scores B x L x vocab (B x P x vocab with masked_positions), seq_relationship_score B x 2.
-- masked_positions (B x P, 0-based): the MLM head (transform and the vocabulary projection) runs
-- on those rows of the sequence output only, as NVIDIA's and Google's BERT pretraining do; the
-- scores equal the full head's at those positions (tests/lua/test_bert_hf.lua checks values and
-- gradients). Padding entries of masked_positions (say 0) give scores that the loss must ignore
-- (labels -100 or weights 0, bert.pretraining_loss).
function BertForPreTraining:forward(input_ids, token_type_ids, attention_mask, masked_positions)
  local seq, pooled = self.bert(input_ids, token_type_ids, attention_mask)
  if masked_positions ~= nil then seq = bert.gather_positions(seq, masked_positions) end
  return self.cls(seq, pooled)
end

-- HF's pretraining loss: MLM cross entropy over positions whose label is not -100, plus the
-- next-sentence cross entropy. labels B x L (i64) for B x L x V scores, or B x P for the masked
-- form (scores from masked_positions; labels = the original tokens, -100 on padding entries).
-- opts.weights (B x P float, 1 = a real prediction, 0 = padding; bert_data's masked_weights):
-- the MLM loss is then sum(w * ce) / sum(w) (0 when sum(w) is 0), Google's weighted form; with
-- 0/1 weights it equals the -100 form exactly. next_sentence_label (B i64, 0 = B follows A) may
-- be nil: no NSP term. Returns total, mlm, nsp (nsp nil without next_sentence_label).
function bert.pretraining_loss(prediction_scores, seq_relationship_score, labels, next_sentence_label, opts)
  errors.check_opts('bert.pretraining_loss', opts, { 'weights' })
  local V = prediction_scores.shape[prediction_scores.ndim]
  local flat_scores, flat_labels = prediction_scores:reshape{ -1, V }, labels:reshape{ -1 }
  -- half scores (AMP) give an f32 loss computed in f32 by the fused cross entropy, which reads
  -- them as they are: no f32 copy of the vocabulary-sized scores
  local ldt = prediction_scores.dtype == 'f64' and 'f64' or 'f32'
  local mlm
  local w = opts and opts.weights
  if w ~= nil then
    local per = F.cross_entropy(flat_scores, flat_labels, { ignore_index = -100, reduction = 'none', dtype = ldt })
    w = w:reshape{ -1 }:to(per.dtype)
    local den = w:sum()
    -- 0 / 1 instead of 0 / 0 when no prediction is real
    mlm = (per * w):sum() / (den + den:eq(0):to(den.dtype))
  else
    mlm = F.cross_entropy(flat_scores, flat_labels, { ignore_index = -100, dtype = ldt })
  end
  if next_sentence_label == nil then return mlm, mlm, nil end
  local nsp = F.cross_entropy(seq_relationship_score, next_sentence_label,
    { dtype = seq_relationship_score.dtype == 'f64' and 'f64' or 'f32' })
  return mlm + nsp, mlm, nsp
end

local BertForSequenceClassification = nn.Module:extend('BertForSequenceClassification')
bert.BertForSequenceClassification = BertForSequenceClassification
function BertForSequenceClassification:init(cfg, num_labels)
  cfg = as_config(cfg)
  self.config = cfg
  self.num_labels = num_labels or cfg.num_labels or 2
  self.bert = BertModel(cfg)
  self.dropout = nn.Dropout(cfg.classifier_dropout or cfg.hidden_dropout_prob)
  self.classifier = nn.Linear(cfg.hidden_size, self.num_labels)
  hf_init(self.classifier, cfg.initializer_range)
end
-- -> logits B x num_labels
function BertForSequenceClassification:forward(input_ids, token_type_ids, attention_mask)
  local _, pooled = self.bert(input_ids, token_type_ids, attention_mask)
  return self.classifier(self.dropout(pooled))
end

-- ---------------------------------------------------------------------------------------------
-- Checkpoint names

-- A copy of a Hugging Face state dict with the names this module uses: TensorFlow-era
-- `LayerNorm.gamma/beta` -> `LayerNorm.weight/bias`, the non-persistent buffers
-- (`embeddings.position_ids`, `embeddings.token_type_ids`) dropped, and the tied MLM decoder
-- entries (`cls.predictions.decoder.weight/bias`), which save_pretrained leaves out, filled from
-- the word embeddings and `cls.predictions.bias`. opts.prefix (e.g. 'bert.') is put in front of
-- names that lack it, for a BertModel checkpoint loaded into a model with heads.
function bert.hf_rename(sd, opts)
  errors.check_opts('bert.hf_rename', opts, { 'prefix' })
  local prefix = opts and opts.prefix
  local out = {}
  for name, t in pairs(sd) do
    local n = name:gsub('LayerNorm%.gamma$', 'LayerNorm.weight'):gsub('LayerNorm%.beta$', 'LayerNorm.bias')
    if prefix and n:sub(1, #prefix) ~= prefix and not n:match('^cls%.') then n = prefix .. n end
    if not (n:match('embeddings%.position_ids$') or n:match('embeddings%.token_type_ids$')) then out[n] = t end
  end
  if out['cls.predictions.bias'] and out['cls.predictions.decoder.bias'] == nil then
    out['cls.predictions.decoder.bias'] = out['cls.predictions.bias']
  end
  local words = out['bert.embeddings.word_embeddings.weight']
  if out['cls.predictions.bias'] and words and out['cls.predictions.decoder.weight'] == nil then
    out['cls.predictions.decoder.weight'] = words
  end
  return out
end

-- ---------------------------------------------------------------------------------------------
-- Sentence embeddings

-- Mean of hidden (B x L x H) over the positions where attention_mask (B x L, 1 = token) is set
-- -> B x H; opts.normalize (default true): each row L2-normalised. A fully masked row gives
-- zeros (its sum 0 is divided by max(count, 1e-9), then by max(norm, 1e-12)), never NaN: the
-- arithmetic of sentence-transformers' mean pooling and F.normalize.
function bert.mean_pool(hidden, attention_mask, opts)
  errors.check_opts('bert.mean_pool', opts, { 'normalize' })
  local normalize = not (opts and opts.normalize == false)
  local out
  if attention_mask == nil then
    out = hidden:mean(2)
  else
    local m = attention_mask:to{ dtype = hidden.dtype, device = hidden.device }:unsqueeze(3)
    out = (hidden * m):sum(2) / m:sum(2):clamp(1e-9, nil)
  end
  if normalize then out = out / out:norm(2, 2, true):clamp(1e-12, nil) end
  return out
end

return bert
