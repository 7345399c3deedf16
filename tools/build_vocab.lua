-- tools/build_vocab.lua: trains a BERT WordPiece vocabulary (v100.text.train_vocab: Hugging Face
-- tokenizers' WordPieceTrainer, ext/text/vocab_train.h) and writes vocab.txt, one token a
-- line in id order, for v100.text.WordPiece and tools/make_bert_shards.lua.
--
--   v100lua tools/build_vocab.lua --input <dir|file>... --output vocab.txt [--vocab-size 30522]
--       [--min-frequency 2] [--limit-alphabet 1000] [--cased]
--
-- A directory means every regular file under it (recursively), sorted by name. The text is
-- tokenized as the tokenizer will (lower-cased with accents stripped; --cased keeps both).
local recipe = require 'v100.recipe'
local v100 = require 'v100'
local core = require 'v100.core'

local parser = recipe.parser{
  name = 'build_vocab.lua',
  description = 'Trains a WordPiece vocab.txt (HF WordPieceTrainer) on text files.',
  epilog = 'Prints the number of distinct input files, tokens and the time taken.',
  { '--output', nil, 'the vocab.txt to write; required', argname = '<FILE>' },
  { '--vocab-size', 30522, 'tokens at most (specials, alphabet, continuations, merges)', recipe.integer{ min = 1 } },
  { '--min-frequency', 2, 'a merge needs a pair seen at least this often', recipe.integer{ min = 0 } },
  { '--limit-alphabet', 1000, 'keep the most frequent characters only; 0: all', recipe.integer{ min = 0 } },
  { '--cased', false, 'keep case and accents (for a cased tokenizer: v100.text.WordPiece(vocab, {lower = false}))' },
}
parser:option('--input', 'text files or directories of them'):args('+'):count('+'):argname('<PATH>')
local opts = parser:parse(arg)
if not opts.output then parser:error("option '--output' is required") end
if not opts.input then parser:error("option '--input' is required") end

local files = {}
local function add(path)
  if core._ckpt.is_dir(path) then
    for _, name in ipairs(core._ckpt.list_dir(path)) do add(path .. '/' .. name) end
  else
    files[#files + 1] = path
  end
end
for _, group in ipairs(opts.input) do
  for _, p in ipairs(type(group) == 'table' and group or { group }) do add(p) end
end

local t0 = core.io.time and core.io.time() or os.clock()
local tokens = v100.text.train_vocab(files, {
  vocab_size = opts.vocab_size, min_frequency = opts.min_frequency, limit_alphabet = opts.limit_alphabet,
  lower = not opts.cased,
})
local dt = (core.io.time and core.io.time() or os.clock()) - t0
local parent = opts.output:match('^(.*)/[^/]*$')
if parent and parent ~= '' then v100.io.makedirs(parent) end
v100.text.save_vocab(tokens, opts.output)
print(string.format('%s: %d tokens from %d files in %.2f s', opts.output, #tokens, #files, dt))
