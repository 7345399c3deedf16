-- tests/lua/test_vocab_train.lua: v100.text.train_vocab (ext/text/vocab_train.c) against
-- tests/data/wordpiece_vocab.txt, which tools/make_tokenizer_fixture.py trained with Hugging Face
-- tokenizers' WordPieceTrainer (0.23.3): the same corpus rebuilt here the way the script builds
-- it (6000 WordNet glosses and four lines of other scripts), the same settings; then the trained
-- vocab with the tokenizer, determinism, options, errors and tools/build_vocab.lua.
local v100 = require 'v100'
local T = require 'testlib'

local dir = T.tmpdir()

-- tools/make_tokenizer_fixture.py's glosses(6000) + EXTRA, one sequence a line.
local function fixture_lines()
  local out = {}
  for pi, part in ipairs({ 'noun', 'verb', 'adj', 'adv' }) do
    for line in io.lines('/usr/share/wordnet/data.' .. part) do
      local k = line:find('| ', 1, true)
      if line:sub(1, 2) ~= '  ' and k then
        out[#out + 1] = line:sub(k + 2):match('^%s*(.-)%s*$') -- Python's strip()
        if #out >= 6000 * pi // 4 then break end
      end
    end
  end
  for _, e in ipairs({ 'Café crème, naïve façade, résumé, São Paulo, Zürich, Ångström, El Niño.',
                       'Καλημέρα κόσμε. Привет, мир! Добрый день.', '東京は日本の首都です。北京是中国的首都。',
                       '한국어 문장입니다.' }) do
    out[#out + 1] = e
  end
  return out
end
local lines = fixture_lines()
local CORPUS = dir .. '/corpus.txt'
T.write_file(CORPUS, table.concat(lines, '\n') .. '\n')
local REF = {}
for l in io.lines('tests/data/wordpiece_vocab.txt') do REF[#REF + 1] = l end
-- The script's trainer settings: cased, accents kept, min_frequency HF's default 0.
local HF = { vocab_size = 3000, min_frequency = 0, limit_alphabet = 400, lower = false, strip_accents = false }
local function with(t, extra)
  local r = {}
  for k, v in pairs(t) do r[k] = v end
  for k, v in pairs(extra or {}) do r[k] = v end
  return r
end

T.test('with HF\'s order of the ## characters the vocab is HF\'s, token for token', function()
  -- HF numbers the "##c" tokens in the order of a randomly seeded hash map; given that order
  -- (read off the reference), everything else follows from the algorithm.
  local order = {}
  for _, t in ipairs(REF) do
    local c = t:match('^##(.+)$')
    if c and utf8.len(c) == 1 then order[#order + 1] = c end
  end
  local toks = v100.text.train_vocab(CORPUS, with(HF, { continuation_order = table.concat(order) }))
  T.eq(#toks, 3000)
  T.eq(toks, REF)
end)

T.test('with our own (codepoint) order: 2998 of the 3000 tokens, the first 143 ids identical', function()
  local toks = v100.text.train_vocab(CORPUS, HF)
  T.eq(#toks, 3000)
  local mine, same, prefix = {}, 0, 0
  for _, t in ipairs(toks) do mine[t] = true end
  for i, t in ipairs(REF) do
    if mine[t] then same = same + 1 end
    if prefix == i - 1 and toks[i] == t then prefix = i end
  end
  -- Specials, alphabet (sorted by codepoint in both) and the first "##" character; the two
  -- differences come from ties between equally frequent pairs that the ids break.
  T.eq(prefix, 143)
  T.ok(same >= 2995, 'overlap ' .. same)
  print('  overlap with HF\'s vocab: ' .. same .. ' of 3000')
  -- The merges agree as sets far beyond the ties: every token HF has among its first 2500.
  for i = 1, 2500 do T.ok(mine[REF[i]], 'token ' .. i .. ' ' .. REF[i]) end
end)

T.test('trained vocab + WordPiece: no [UNK] on its corpus; deterministic; file order does not matter', function()
  local a, b = dir .. '/a.txt', dir .. '/b.txt'
  T.write_file(a, table.concat(lines, '\n', 1, 3000) .. '\n')
  T.write_file(b, table.concat(lines, '\n', 3001, #lines) .. '\n')
  local opts = { vocab_size = 4000 } -- defaults: lower-cased, accents stripped, min_frequency 2
  local t1 = v100.text.train_vocab({ a, b }, opts)
  local t2 = v100.text.train_vocab({ b, a }, opts)
  local t3 = v100.text.train_vocab({ a, b }, opts)
  T.eq(#t1, 4000)
  T.eq(t1, t2)
  T.eq(t1, t3)
  T.eq({ t1[1], t1[2], t1[3], t1[4], t1[5] }, { '[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]' })
  local vocab = dir .. '/vocab.txt'
  v100.text.save_vocab(t1, vocab)
  T.eq(T.read_file(vocab), table.concat(t1, '\n') .. '\n')
  local tok = v100.text.WordPiece(vocab)
  local n, unk = 0, 0
  for _, l in ipairs(lines) do
    for _, t in ipairs(tok:tokenize(l)) do
      n = n + 1
      if t == '[UNK]' then unk = unk + 1 end
    end
  end
  T.ok(n > 50000, 'tokens ' .. n)
  T.eq(unk, 0)
  for _, t in ipairs(t1) do
    if t ~= t:lower() and not t:find('^%[') then error('upper case in a lower-cased vocab: ' .. t) end
  end
  T.eq(tok:tokenize('the dog'), { 'the', 'dog' })
  T.eq(tok:decode(tok:encode('The dog barked all night.').ids, { skip_special = true }), 'the dog barked all night.')
end)

T.test('options: specials (repeats dropped), limit_alphabet, min_frequency', function()
  local toks = v100.text.train_vocab(CORPUS, { vocab_size = 500, special = { '[UNK]', '<s>', '[UNK]' },
                                               limit_alphabet = 30 })
  T.eq(toks[1], '[UNK]')
  T.eq(toks[2], '<s>')
  local alpha = {}
  for i = 3, 32 do alpha[#alpha + 1] = toks[i] end
  for i = 2, #alpha do T.ok(utf8.codepoint(alpha[i - 1]) < utf8.codepoint(alpha[i]), 'codepoint order') end
  T.ok(toks[33]:find('^##'), 'the continuations follow the 30 characters: ' .. toks[33])
  T.eq(#toks, 500)
  -- No pair is seen 10^9 times: the vocab stops after the continuations.
  local few = v100.text.train_vocab(CORPUS, { vocab_size = 500, min_frequency = 1000000000 })
  T.ok(#few < 500)
  for _, t in ipairs(few) do T.ok(utf8.len((t:gsub('^##', ''))) == 1 or t:find('^%['), t) end
end)

T.test('errors: empty input, small vocab_size, unreadable file, invalid UTF-8, bad options', function()
  local empty = dir .. '/empty.txt'
  T.write_file(empty, ' \n\t\n')
  T.raises(function() v100.text.train_vocab(empty) end, 'train_vocab: the input has no words')
  T.raises(function() v100.text.train_vocab({}) end, 'no input files')
  T.raises(function() v100.text.train_vocab(CORPUS, { vocab_size = 50 }) end,
    { 'vocab_size 50 is smaller than the', 'special', 'characters', 'continuations' })
  T.raises(function() v100.text.train_vocab({ CORPUS, dir .. '/missing.txt' }) end,
    { 'cannot open', 'missing.txt' })
  local bad = dir .. '/bad.txt'
  T.write_file(bad, 'good line\nbad \xff here\n')
  T.raises(function() v100.text.train_vocab({ CORPUS, bad }) end, { "'" .. bad .. "' is not valid UTF-8 at byte 14" })
  -- Past the reader's first 4 MiB block the offset is still the file's.
  local big = dir .. '/big.txt'
  local n = 260000 -- 17 bytes a line: 4.4 MB
  T.write_file(big, string.rep('alpha beta gamma\n', n) .. 'x\xffy\n')
  T.raises(function() v100.text.train_vocab(big) end, 'is not valid UTF-8 at byte ' .. (17 * n + 1) .. ' (0xff)')
  T.raises(function() v100.text.train_vocab(CORPUS, { vocab = 10 }) end, "unknown option 'vocab'")
  T.raises(function() v100.text.train_vocab(CORPUS, { vocab_size = 'big' }) end, 'vocab_size must be an integer')
  T.raises(function() v100.text.train_vocab(CORPUS, { vocab_size = 0 }) end, 'vocab_size 0 must be >= 1')
  T.raises(function() v100.text.train_vocab(CORPUS, { special = '[UNK]' }) end, 'special must be a table')
  T.raises(function() v100.text.train_vocab(CORPUS, { special = { '' } }) end, 'special token 1 is empty')
  T.raises(function() v100.text.train_vocab(42) end, 'files must be a path or a table of paths')
  T.raises(function() v100.text.train_vocab({ CORPUS, 3 }) end, 'files[2] must be a string')
end)

T.test('save_vocab refuses what would not read back as one token a line', function()
  local path = dir .. '/v.txt'
  v100.text.save_vocab({ '[UNK]', 'a', '##b' }, path)
  T.eq(T.read_file(path), '[UNK]\na\n##b\n')
  T.raises(function() v100.text.save_vocab({ '[UNK]', 'a\nb' }, path) end, 'token 2 (id 1) is empty, holds a line break')
  T.raises(function() v100.text.save_vocab({ '' }, path) end, 'token 1 (id 0) is empty')
  T.raises(function() v100.text.save_vocab({ '\xff' }, path) end, 'not valid UTF-8')
  T.raises(function() v100.text.save_vocab({}, path) end, 'no tokens')
  T.raises(function() v100.text.save_vocab({ 'a', 2 }, path) end, 'tokens[2] must be a string')
  T.raises(function() v100.text.save_vocab({ 'a' }, dir .. '/no/such/dir/v.txt') end, 'no/such/dir')
  T.eq(T.read_file(path), '[UNK]\na\n##b\n', 'a failed save leaves the file')
end)

T.test('tools/build_vocab.lua: a directory is its files sorted by name', function()
  local d = dir .. '/in'
  require('v100.core').io.makedirs(d)
  T.write_file(d .. '/2.txt', table.concat(lines, '\n', 1, 2000) .. '\n')
  T.write_file(d .. '/1.txt', table.concat(lines, '\n', 2001, 4000) .. '\n')
  local out = dir .. '/tool-vocab.txt'
  local text, ok = T.run_binary('tools/build_vocab.lua --input ' .. d .. ' --output ' .. out .. ' --vocab-size 1500')
  T.ok(ok, text)
  T.ok(text:find('1500 tokens from 2 files', 1, true), text)
  local want = v100.text.train_vocab({ d .. '/1.txt', d .. '/2.txt' }, { vocab_size = 1500 })
  T.eq(T.read_file(out), table.concat(want, '\n') .. '\n')
  local _, bad = T.run_binary('tools/build_vocab.lua --output ' .. out)
  T.eq(bad, nil, 'no --input is an error')
end)

require('v100.core')._ckpt.remove_tree(dir)
T.run()
