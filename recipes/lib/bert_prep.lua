-- recipes/lib/bert_prep.lua: the WordNet pretraining data of recipes/bert.lua, made on first use
-- (a recipe module, not part of the v100 library: recipe.add_path('lib') finds it).
--
--   local prep = require 'bert_prep'
--   prep.complete(dir, seq_len, dupe_factor) -> whether every piece below is there
--   prep.wordnet{dir =, root =, vocab_size =, seq_len =, max_predictions =, dupe_factor =, seed =, log =}
--   prep.wordnet_paths(dir, seq_len, dupe_factor) -> {vocab =, train =, eval =, corpus =, heldout =}
--
-- What dir holds (each piece written under a temporary name and renamed, so an interrupted run
-- leaves nothing that looks finished; the next run redoes only what is missing):
--   corpus.txt            the pretraining text (Google's format: a sentence a line, documents
--                         separated by blank lines) of every synset outside the held-out set
--   heldout.txt           the same for the held-out synsets: those of the lexname task's
--                         validation and test splits (wordnet.lua's lexname_task with
--                         prep.SPLIT_SEED), so fine-tuning is evaluated on glosses pretraining
--                         never saw; its shards measure the held-out MLM accuracy
--   vocab.txt             a WordPiece vocabulary trained on corpus.txt (v100.text.train_vocab)
--   seq<L>-dupe<D>/train, seq<L>-dupe<D>/eval   the shards (v100.bert_data), one set per length
local v100 = require 'v100'
local core = require 'v100.core'
local dist = require 'v100.dist'
local wn = require 'wordnet' -- recipes/lib/wordnet.lua

local M = {}

-- The split of the fine-tuning task (recipes/bert_classify.lua's default --split-seed).
M.SPLIT_SEED = 12345
M.SPLIT = { val = 0.1, test = 0.1 }

local vio = v100.io
local exists, join = vio.exists, vio.join

function M.wordnet_paths(dir, seq_len, dupe_factor)
  local sub = join(dir, string.format('seq%d-dupe%d', seq_len, dupe_factor))
  return { vocab = join(dir, 'vocab.txt'), corpus = join(dir, 'corpus.txt'), heldout = join(dir, 'heldout.txt'),
    train = join(sub, 'train'), eval = join(sub, 'eval') }
end

-- Whether every piece is in dir (what wordnet{} makes; a rank asks before reading them).
function M.complete(dir, seq_len, dupe_factor)
  local p = M.wordnet_paths(dir, seq_len, dupe_factor)
  return exists(p.corpus) and exists(p.heldout) and exists(p.vocab) and exists(join(p.train, '.complete')) and
    exists(join(p.eval, '.complete'))
end

-- Builds what is missing in o.dir. o.log(string) reports each piece and its time.
function M.wordnet(o)
  local fs = core._ckpt
  local clock = v100.io.time
  local say = o.log or function() end
  assert(type(o.dir) == 'string', 'bert_prep.wordnet: dir is required')
  local p = M.wordnet_paths(o.dir, o.seq_len, o.dupe_factor)
  v100.io.makedirs(o.dir)
  -- host and pid: two nodes that fill one shared folder at once never share a temporary name
  local tmp_suffix = string.format('.tmp-%s-%d', dist.info().host, fs.pid())

  if not (exists(p.corpus) and exists(p.heldout)) then
    local t0 = clock()
    local synsets = wn.read(o.root)
    local task = wn.lexname_task(synsets, { seed = M.SPLIT_SEED, val = M.SPLIT.val, test = M.SPLIT.test })
    local held = {}
    for _, split in ipairs { 'val', 'test' } do
      for _, it in ipairs(task[split]) do held[it.id] = true end
    end
    local train_ss, held_ss = {}, {}
    for _, s in ipairs(synsets) do
      local l = held[s.id] and held_ss or train_ss
      l[#l + 1] = s
    end
    wn.write_corpus(p.heldout .. tmp_suffix, held_ss)
    fs.rename(p.heldout .. tmp_suffix, p.heldout)
    wn.write_corpus(p.corpus .. tmp_suffix, train_ss)
    fs.rename(p.corpus .. tmp_suffix, p.corpus)
    say(string.format('bert_prep: WordNet corpus: %d synsets for pretraining, %d held out (%s) in %.1f s', #train_ss,
      #held_ss, o.dir, clock() - t0))
  end

  if not exists(p.vocab) then
    local t0 = clock()
    local tokens = v100.text.train_vocab({ p.corpus }, { vocab_size = o.vocab_size, lower = true })
    fs.write_atomic(p.vocab, table.concat(tokens, '\n') .. '\n')
    say(string.format('bert_prep: WordPiece vocabulary of %d tokens in %.1f s', #tokens, clock() - t0))
  end

  for _, which in ipairs { 'train', 'eval' } do
    local out = which == 'train' and p.train or p.eval
    if not exists(join(out, '.complete')) then
      local t0 = clock()
      local tmp = out .. tmp_suffix
      fs.remove_tree(tmp)
      local r = v100.text.make_pretraining_shards{ inputs = { which == 'train' and p.corpus or p.heldout }, vocab = p.vocab,
        output = tmp,
        seq_len = o.seq_len, max_predictions = o.max_predictions,
        dupe_factor = which == 'train' and o.dupe_factor or 1, seed = (o.seed or 12345) + (which == 'train' and 0 or 1) }
      fs.write_atomic(join(tmp, '.complete'), 'ok\n')
      fs.remove_tree(out)
      v100.io.makedirs(out:match('^(.*)/[^/]+$'))
      fs.rename(tmp, out)
      say(string.format('bert_prep: %s shards: %d sequences of %d in %.1f s', which, r.samples, o.seq_len, clock() - t0))
    end
  end
  return p
end

return M
