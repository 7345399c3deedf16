-- tools/make_bert_shards.lua: text files -> BERT pretraining shards (NSP pairs, masked tokens),
-- as Google's create_pretraining_data.py makes them (ext/text/pretrain.h; docs/BERT.md).
--
--   v100lua tools/make_bert_shards.lua --input corpus.txt --vocab vocab.txt --output shards/
--   v100lua tools/make_bert_shards.lua --input wiki/ books/ --vocab vocab.txt --output shards512/ \
--       --seq-len 512 --max-predictions 80
--
-- Text: one sentence per line, a blank line between documents; a directory means every regular
-- file under it, by name. Prints one summary line per quantity and exits 0, or prints
-- "make_bert_shards: <why>" on stderr and exits 1.
local v100 = require 'v100'
local recipe = require 'v100.recipe'

local spec = {
  name = 'make_bert_shards.lua',
  description = 'Makes BERT pretraining shards (next-sentence pairs with masked tokens) from text files: ' ..
    'one sentence per line, a blank line between documents.',
  epilog = 'Writes <output>/part-NNNNN.shard and <output>/vocab.txt (a copy of --vocab) and prints files, documents, sentences, samples, tokens, ' ..
    'masked tokens, the NSP random share and the seconds taken.',
  { '--vocab', nil, 'the WordPiece vocab.txt (needs [PAD] [UNK] [CLS] [SEP] [MASK])', argname = '<FILE>' },
  { '--output', nil, 'directory for the shards (made when missing)', argname = '<DIR>' },
  { '--seq-len', 128, 'tokens per sample, [CLS] and [SEP]s included', recipe.integer{ min = 5, max = 4096 } },
  { '--max-predictions', 20, 'masked tokens per sample at most', recipe.integer{ min = 0, max = 4096 } },
  { '--masked-lm-prob', 0.15, 'share of the tokens masked', recipe.number{ min = 0, max = 1 } },
  { '--short-seq-prob', 0.1, 'probability of a shorter target length', recipe.number{ min = 0, max = 1 } },
  { '--dupe-factor', 5, 'passes over the corpus, each with other pairs and masks', recipe.integer{ min = 1 } },
  { '--seed', 12345, 'seed of every random choice (same input + seed: identical shards)', recipe.integer{ min = 0 } },
  { '--samples-per-shard', 100000, 'samples per shard file', recipe.integer{ min = 1 } },
  { '--threads', 'auto', 'tokenizing threads; auto: the CPUs, at most 16 (the shards do not depend on it)', recipe.integer{ min = 1, max = 256, auto = true } },
  { '--cased', false, 'keep case and accents (a cased vocab)' },
  { '--whole-word-mask', false, 'mask whole words (a piece and its ## pieces) together' },
}

local parser = recipe.parser(spec)
parser:option('--input', 'text files or directories of them'):args('+'):count('1'):argname('<PATH>')
local opts = parser:parse(arg or {})
for _, k in ipairs{'cased', 'whole_word_mask'} do opts[k] = opts[k] or false end
if not opts.vocab then parser:error("option '--vocab' is missing") end
if not opts.output then parser:error("option '--output' is missing") end
if opts.max_predictions > opts.seq_len then
  parser:error(('--max-predictions %d is larger than --seq-len %d'):format(opts.max_predictions, opts.seq_len))
end

local t0 = os.clock()
local wall0 = v100.io.unix_time and v100.io.unix_time() or os.time()
local ok, st = pcall(v100.text.make_pretraining_shards, {
  inputs = opts.input, vocab = opts.vocab, output = opts.output, lower = not opts.cased,
  seq_len = opts.seq_len, max_predictions = opts.max_predictions, masked_lm_prob = opts.masked_lm_prob,
  short_seq_prob = opts.short_seq_prob, dupe_factor = opts.dupe_factor, seed = opts.seed,
  whole_word_mask = opts.whole_word_mask, samples_per_shard = opts.samples_per_shard,
  threads = opts.threads ~= 'auto' and opts.threads or 0,
})
if not ok then
  io.stderr:write(tostring(st):gsub('^make_bert_shards: ', ''):gsub('^', 'make_bert_shards: '), '\n')
  os.exit(1)
end
-- The vocabulary beside the shards, so that a shard folder is all a recipe needs (--data DIR);
-- the shards carry its CRC32C, which the readers compare.
do
  local f = assert(io.open(opts.vocab, 'rb'))
  local bytes = f:read('a')
  f:close()
  local dst = opts.output .. '/vocab.txt'
  local g = io.open(dst, 'rb')
  local same = g and g:read('a') == bytes
  if g then g:close() end
  if not same then require('v100.core')._ckpt.write_atomic(dst, bytes) end
end
local wall = (v100.io.unix_time and v100.io.unix_time() or os.time()) - wall0
local function share(a, b) return b > 0 and a / b or 0 end
print(('files           %d'):format(st.files))
print(('documents       %d'):format(st.documents))
print(('sentences       %d'):format(st.sentences))
print(('corpus tokens   %d'):format(st.corpus_tokens))
print(('samples         %d'):format(st.samples))
print(('tokens          %d'):format(st.tokens))
print(('masked tokens   %d (%.2f%% of the tokens)'):format(st.masked, 100 * share(st.masked, st.tokens)))
print(('NSP random      %.4f'):format(share(st.random_next, st.samples)))
print(('shards          %d in %s'):format(st.shards, opts.output))
print(('seconds         %.2f (cpu %.2f)'):format(wall, os.clock() - t0))
