-- scripts/v100/models/bert.lua: `require 'v100.models.bert'`: BERT in one table: the configs,
-- classes and losses of models/bert_model.lua (this is that table) plus the Hugging Face folders
-- and sentence embeddings of models/bert_hf.lua (read_config, config_json, from_pretrained,
-- save_pretrained, sentence_embeddings). bert_model <- bert_hf <- this file, one way.
local bert = require 'v100.models.bert_model'
local hf = require 'v100.models.bert_hf'

for k, f in pairs(hf) do bert[k] = f end

return bert
