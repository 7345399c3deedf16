-- tests/lua/test_reference.lua: our ResNet-18 and BERT against PyTorch's outputs on the same
-- weights and inputs. The reference files come from tools/make_reference.py (torchvision
-- resnet18 and Hugging Face BertForPreTraining, f32, CPU, eval mode) and live in tests/data/
-- as gzip-compressed safetensors: the model's state_dict plus `__name__` entries for the inputs
-- and outputs. Each test loads the state dict strictly (every name must match), runs forward on
-- the CPU in f32 and compares at 1e-5 relative (to the output's largest magnitude, so that
-- near-zero elements are judged on the output's scale). Without the files the tests pass with a
-- printed reason, so that CI stays green until the references are generated.
local v100 = require 'v100'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'
local T = require 'testlib'

local here = debug.getinfo(1, 'S').source:match('^@(.*[/\\])') or './'
local DATA = here .. '../data/'
local RTOL = 1e-5

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

-- Loads a reference file: the state dict and the `__name__` entries, plus the metadata. Nil
-- with a printed reason when the file is absent.
local function load(name)
  local path = DATA .. name
  if not exists(path) then
    print(string.format('skip: %s is absent (generate it with python3 tools/make_reference.py)', path))
    return nil
  end
  local all, meta = v100.load_safetensors(path)
  local sd, ext = {}, {}
  for k, t in pairs(all) do
    local inner = k:match('^__(.+)__$')
    if inner then ext[inner] = t else sd[k] = t end
  end
  return sd, ext, meta
end

local function compare(got, want, what)
  T.eq(got.dtype, 'f32', what)
  local scale = want:abs():max():item()
  T.tensor_close(got, want, RTOL, RTOL * scale, what)
end

T.test('resnet18 matches torchvision (eval, f32, CPU)', function()
  local sd, ext = load('resnet18_ref.safetensors.gz')
  if not sd then return end
  local m = resnet.resnet18{ classes = 10 }
  m:load_state_dict(sd) -- strict: the names are torchvision's
  m:eval()
  local y = v100.no_grad(function() return m(ext.input) end)
  compare(y, ext.output, 'logits')
end)

-- The config fields make_reference.py writes into the metadata (strings) -> a bert config.
local function bert_config(meta)
  local cfg = {}
  for _, k in ipairs{ 'vocab_size', 'hidden_size', 'num_hidden_layers', 'num_attention_heads', 'intermediate_size',
    'max_position_embeddings', 'type_vocab_size', 'layer_norm_eps', 'pad_token_id', 'hidden_dropout_prob',
    'attention_probs_dropout_prob' } do
    if meta[k] then cfg[k] = math.tointeger(tonumber(meta[k])) or tonumber(meta[k]) end
  end
  cfg.hidden_act = meta.hidden_act
  return bert.config(cfg)
end

T.test('tiny BERT matches Hugging Face BertForPreTraining (eval, f32, CPU)', function()
  local sd, ext, meta = load('bert_tiny_ref.safetensors.gz')
  if not sd then return end
  local cfg = bert_config(meta)
  T.eq(cfg.hidden_size, 64)
  local m = bert.BertForPreTraining(cfg)
  m:load_state_dict(bert.hf_rename(sd))
  m:eval()
  T.ok(ext.attention_mask:eq(0):sum():item() > 0, 'the reference input has padding')
  local scores, nsp = v100.no_grad(function()
    return m(ext.input_ids, ext.token_type_ids, ext.attention_mask)
  end)
  compare(scores, ext.prediction_scores, 'prediction_scores')
  compare(nsp, ext.seq_relationship_score, 'seq_relationship_score')
end)

T.run()
