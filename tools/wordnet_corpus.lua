-- tools/wordnet_corpus.lua: the BERT data of WordNet 3.0 (Debian's wordnet-base): the pretraining
-- corpus and the lexname classification task, from recipes/lib/wordnet.lua.
--
--   v100lua tools/wordnet_corpus.lua [--root DIR] --output DIR [--seed N] [--val 0.1] [--test 0.1]
--
-- Writes DIR/corpus.txt (Google's BERT text format: a sentence per line, a blank line between
-- documents; the input of tools/make_bert_shards.lua and tools/build_vocab.lua) and
-- DIR/lexnames-{train,val,test}.tsv (label<TAB>offset-pos<TAB>gloss, label 0..44 as lexnames(5WN)
-- numbers them), then prints a summary: corpus size, split sizes, the test split's class counts
-- and its majority-class accuracy.
local recipe = require 'v100.recipe'
recipe.add_path('../recipes/lib')
local wn = require 'wordnet' -- recipes/lib/wordnet.lua

local opts, parser = recipe.options{
  name = 'wordnet_corpus.lua',
  description = 'WordNet 3.0 -> BERT pretraining corpus (corpus.txt) and the lexname task (lexnames-*.tsv).',
  epilog = 'See docs/BERT.md (WordNet corpus, the lexname task).',
  { '--root', wn.ROOT, 'the WordNet dict folder holding data.noun, data.verb, data.adj, data.adv', argname = '<DIR>' },
  { '--output', nil, 'the folder to write (made if missing); required', argname = '<DIR>' },
  { '--seed', 12345, 'the seed of the train/val/test split', recipe.integer{} },
  { '--val', 0.1, 'share of each class in the validation split', recipe.number{ min = 0, lt = 1 } },
  { '--test', 0.1, 'share of each class in the test split', recipe.number{ min = 0, lt = 1 } },
  { '--max-sentences', 32, 'sentences per corpus document at most', recipe.integer{ min = 1 } },
}
if not opts.output then parser:error("option '--output' is required") end
if opts.val + opts.test >= 1 then parser:error('--val plus --test must be below 1') end

require('v100.core').io.makedirs(opts.output)
local t0 = os.clock()
local synsets = wn.read(opts.root)
local t_read = os.clock() - t0
local st = wn.write_corpus(opts.output .. '/corpus.txt', synsets, { max_sentences = opts.max_sentences })
local task = wn.lexname_task(synsets, { seed = opts.seed, val = opts.val, test = opts.test })
for _, split in ipairs({ 'train', 'val', 'test' }) do
  wn.write_task(opts.output .. '/lexnames-' .. split .. '.tsv', task[split])
end

print(string.format('read %d synsets from %s in %.2f s', #synsets, opts.root, t_read))
print(string.format('corpus.txt: %d documents, %d sentences, %d words, %.2f MB', st.documents, st.sentences,
  st.words, st.bytes / 1e6))
print(string.format('lexnames: train %d, val %d, test %d (seed %d)', #task.train, #task.val, #task.test, opts.seed))
local counts, best, share = wn.class_counts(task.test)
local all = wn.class_counts(task.train)
print('label  name                   train   test')
for l = 0, wn.NUM_CLASSES - 1 do
  print(string.format('%5d  %-20s %7d %6d', l, wn.LEXNAMES[l], all[l], counts[l]))
end
print(string.format('test majority class: %s, accuracy %.4f', wn.LEXNAMES[best], share))
