-- tools/bert_io.lua: the v100lua side of a transformers cross-check of a BERT folder (one that
-- bert.save_pretrained wrote, or a recipes/bert.lua checkpoint, which holds config.json too).
--
--   v100lua tools/bert_io.lua CKPT_DIR io.safetensors [--class BertForPreTraining] [--batch 2] [--seq 32]
--   python3 tools/check_hf_bert.py CKPT_DIR io.safetensors
--
-- Loads the folder with bert.from_pretrained (f32, CPU, eval), runs seeded random inputs (with
-- padding in the second row and, for BertForPreTraining, a few masked positions) and writes the
-- inputs and our outputs under transformers' names, as tools/check_hf_bert.py reads them.
local v100 = require 'v100'
local bert = require 'v100.models.bert'
local recipe = require 'v100.recipe'

local spec = {
  name = 'bert_io.lua',
  description = 'Writes inputs and v100lua outputs of a BERT folder for tools/check_hf_bert.py.',
  { '--class', 'BertForPreTraining', 'the model class to load', { 'BertModel', 'BertForPreTraining', 'BertForSequenceClassification' } },
  { '--batch', 2, 'sequences', recipe.integer{ min = 1 } },
  { '--seq', 32, 'tokens per sequence', recipe.integer{ min = 4 } },
  { '--seed', 1, 'seed of the inputs', recipe.integer{ min = 0 } },
}
local parser = recipe.parser(spec)
parser:argument('model_dir', 'the BERT folder')
parser:argument('out', 'the safetensors file to write')
local opts = parser:parse(arg or {})

local m, cfg = bert.from_pretrained(opts.model_dir, { class = opts.class, quiet = true })
m:eval()
v100.manual_seed(opts.seed)
local B, L = opts.batch, math.min(opts.seq, cfg.max_position_embeddings)
local ids = (v100.rand({ B, L }) * (cfg.vocab_size - 1)):floor():long() + 1
local tt = v100.zeros({ B, L }, { dtype = 'i64' })
tt:narrow(2, L // 2 + 1, L - L // 2):fill_(1)
local mask = v100.ones({ B, L }, { dtype = 'i64' })
if B > 1 then mask:narrow(1, 2, 1):narrow(2, L - L // 4 + 1, L // 4):zero_() end
local io_t = { input_ids = ids, token_type_ids = tt, attention_mask = mask }
v100.no_grad(function()
  local a, b = m(ids, tt, mask)
  if opts.class == 'BertModel' then
    io_t.last_hidden_state, io_t.pooler_output = a, b
  elseif opts.class == 'BertForPreTraining' then
    io_t.prediction_logits, io_t.seq_relationship_logits = a, b
    local pos = (v100.rand({ B, 3 }) * (L - 1)):floor():long()
    io_t.masked_positions, io_t.masked_prediction_logits = pos, m(ids, tt, mask, pos)
  else
    io_t.logits = a
  end
end)
v100.save_safetensors(opts.out, io_t, { class = opts.class })
print(string.format('bert_io.lua: %s from %s, inputs %dx%d, wrote %s', opts.class, opts.model_dir, B, L, opts.out))
