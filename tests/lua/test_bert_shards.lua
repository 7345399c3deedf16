-- tests/lua/test_bert_shards.lua: BERT pretraining data end to end on real text (WordNet glosses
-- of Debian's wordnet-base): tools/make_bert_shards.lua and v100.text.make_pretraining_shards,
-- the samples' structure and masking statistics at seq 128 / 20 predictions and 512 / 80,
-- segments as runs of the text (B after A for label 0), determinism, v100.bert_data's dataset
-- and Loader (rank sharding, resuming), the reader's refusals as Lua errors. The C side of the format is tests/c/test_shard.c.
local T = require 'testlib'
local v100 = require 'v100'
local bd = require 'v100.bert_data'

local VOCAB = 'tests/data/wordpiece_vocab.txt'
local WORDNET = os.getenv('WORDNET_ROOT') or '/usr/share/wordnet'
local tok = v100.text.WordPiece(VOCAB)
local CLS, SEP, PAD, MASK = tok:token_to_id('[CLS]'), tok:token_to_id('[SEP]'), tok:token_to_id('[PAD]'), tok:token_to_id('[MASK]')
local IS_CONT = {}
for id = 0, tok.vocab_size - 1 do IS_CONT[id] = tok:id_to_token(id):sub(1, 2) == '##' end

local dir = T.tmpdir()

-- A corpus: documents of per_doc consecutive noun glosses, one gloss part (split at ';') a line.
local function make_corpus(path, n_synsets, per_doc)
  local f = assert(io.open(WORDNET .. '/data.noun', 'rb'),
    'WordNet not found at ' .. WORDNET .. ' (apt-get install wordnet-base, tools/setup.sh)')
  local out = assert(io.open(path, 'wb'))
  local k = 0
  for line in f:lines() do
    local gloss = line:sub(1, 2) ~= '  ' and line:match('|%s*(.-)%s*$')
    if gloss then
      for part in gloss:gmatch('[^;]+') do
        part = part:gsub('^%s+', ''):gsub('%s+$', '')
        if part ~= '' then out:write(part, '\n') end
      end
      k = k + 1
      if k % per_doc == 0 then out:write('\n') end
      if k >= n_synsets then break end
    end
  end
  f:close()
  out:close()
end

local CORPUS, LONG = dir .. '/corpus.txt', dir .. '/long.txt'
make_corpus(CORPUS, 6000, 25)
make_corpus(LONG, 6000, 100) -- documents long enough for 512-token samples

local function make(out, o)
  local opts = {inputs = {CORPUS}, vocab = VOCAB, output = out, seq_len = 128, max_predictions = 20,
    dupe_factor = 2, seed = 12345, samples_per_shard = 1500}
  for k, v in pairs(o or {}) do opts[k] = v end
  return v100.text.make_pretraining_shards(opts)
end

local S128 = dir .. '/s128'
local ST128 = make(S128)

local function round_half_even(x)
  local f = math.floor(x)
  local d = x - f
  if d > 0.5 or (d == 0.5 and f % 2 == 1) then f = f + 1 end
  return math.tointeger(f)
end

-- Every sample of ds as Lua tables, with the original tokens rebuilt from the masked ids.
local function samples_of(ds)
  local out = {}
  local idx = {}
  for i = 0, ds.n - 1 do idx[#idx + 1] = i end
  local b = ds:batch(idx)
  local t = {}
  for k, x in pairs(b) do t[k] = x:totable() end
  for i = 1, ds.n do
    local s = {ids = t.input_ids[i], tt = t.token_type_ids[i], am = t.attention_mask[i], labels = t.labels[i],
      nsp = t.next_sentence_label[i], pos = t.masked_positions[i], mids = t.masked_ids[i], w = t.masked_weights[i]}
    s.len = 0
    for j = 1, ds.seq_len do s.len = s.len + s.am[j] end
    s.seg_a = 0
    for j = 1, s.len do if s.tt[j] == 0 then s.seg_a = s.seg_a + 1 end end
    s.n_masked = 0
    for j = 1, ds.max_predictions do s.n_masked = s.n_masked + math.tointeger(s.w[j]) end
    s.orig = {table.unpack(s.ids)}
    for k = 1, s.n_masked do s.orig[s.pos[k] + 1] = s.mids[k] end
    out[i] = s
  end
  return out
end

-- The structure and masking rules every sample obeys; returns the counts for the statistics.
local function check_samples(ds, all, wwm)
  local L, P = ds.seq_len, ds.max_predictions
  local c = {tokens = 0, masked = 0, as_mask = 0, kept = 0, random = 0, nsp = 0, n = #all}
  for i, s in ipairs(all) do
    local where = 'sample ' .. (i - 1)
    T.ok(s.len >= 5 and s.len <= L, where .. ': length ' .. s.len)
    T.ok(s.seg_a >= 3 and s.seg_a <= s.len - 2, where .. ': A and B hold a token each')
    T.eq(s.orig[1], CLS, where .. ': [CLS] first')
    T.eq(s.orig[s.seg_a], SEP, where .. ': [SEP] ends A')
    T.eq(s.orig[s.len], SEP, where .. ': [SEP] ends B')
    for j = 1, L do
      local inside = j <= s.len
      if inside and j ~= 1 and j ~= s.seg_a and j ~= s.len then
        T.ok(s.orig[j] ~= CLS and s.orig[j] ~= SEP and s.orig[j] ~= PAD, where .. ': a special token inside')
      end
      if s.tt[j] ~= ((inside and j > s.seg_a) and 1 or 0) then T.eq(s.tt[j], (inside and j > s.seg_a) and 1 or 0, where .. ' type ' .. j) end
      if s.am[j] ~= (inside and 1 or 0) then T.eq(s.am[j], inside and 1 or 0, where .. ' mask ' .. j) end
      if not inside and s.ids[j] ~= 0 then T.eq(s.ids[j], 0, where .. ': padding is 0') end
    end
    if not wwm then
      T.eq(s.n_masked, math.min(P, math.max(1, round_half_even(s.len * ds.masked_lm_prob))), where .. ': masked count')
    else
      T.ok(s.n_masked >= 1 and s.n_masked <= math.min(P, round_half_even(s.len * ds.masked_lm_prob)), where .. ': wwm count')
    end
    local masked = {}
    for k = 1, P do
      local p = s.pos[k]
      if k <= s.n_masked then
        T.ok(p > 0 and p < s.len - 1 and p ~= s.seg_a - 1, where .. ': a special position masked')
        T.ok(k == 1 or p > s.pos[k - 1], where .. ': positions ascending')
        T.eq(s.labels[p + 1], s.mids[k], where .. ': label of a masked position')
        masked[p + 1] = true
        local id = s.ids[p + 1]
        if id == MASK then c.as_mask = c.as_mask + 1
        elseif id == s.mids[k] then c.kept = c.kept + 1
        else c.random = c.random + 1 end
      else
        T.ok(p == 0 and s.mids[k] == 0 and s.w[k] == 0, where .. ': prediction padding')
      end
    end
    for j = 1, L do
      if not masked[j] and s.labels[j] ~= -100 then T.eq(s.labels[j], -100, where .. ' label ' .. j) end
    end
    if wwm then -- a masked "##" piece has its word masked before it, and a word is masked whole
      for j = 2, s.len - 1 do
        if IS_CONT[s.orig[j]] and j - 1 ~= s.seg_a and j - 1 ~= 1 then
          T.eq(masked[j] or false, masked[j - 1] or false, where .. ': whole word at ' .. (j - 1))
        end
      end
    end
    c.tokens, c.masked, c.nsp = c.tokens + s.len, c.masked + s.n_masked, c.nsp + s.nsp
  end
  return c
end

local function check_stats(c, what)
  local share = c.masked / c.tokens
  T.ok(share > 0.14 and share < 0.16, what .. ': masked share ' .. share .. ' not in (0.14, 0.16)')
  T.near(c.as_mask / c.masked, 0.8, 0.02, what .. ': [MASK] share')
  T.near(c.kept / c.masked, 0.1, 0.015, what .. ': kept share')
  T.near(c.random / c.masked, 0.1, 0.015, what .. ': random share')
  -- Google's rule gives a little more than half: a chunk of one sentence is always paired at random
  T.ok(c.nsp / c.n > 0.45 and c.nsp / c.n < 0.6, what .. ': NSP random share ' .. c.nsp / c.n)
end

T.test('seq 128 / 20 predictions: structure, masking and NSP statistics', function()
  local ds <close> = bd.open(S128)
  T.eq(ds.n, ST128.samples)
  T.ok(ds.n > 2000, 'a few thousand samples: ' .. ds.n)
  T.eq(ds.seq_len, 128)
  T.eq(ds.max_predictions, 20)
  T.eq(ds.vocab_size, tok.vocab_size)
  T.eq(ds.vocab_crc, bd.vocab_crc(VOCAB))
  T.eq(v100.text.crc32c('123456789'), 0xE3069283)
  T.eq(#ds.files, ST128.shards)
  T.eq(ST128.files, 1)
  T.eq(ST128.documents, 240)
  local c = check_samples(ds, samples_of(ds), false)
  T.eq(c.tokens, ST128.tokens)
  T.eq(c.masked, ST128.masked)
  T.eq(c.nsp, ST128.random_next)
  check_stats(c, 'seq 128')
end)

-- The tokenized corpus as one string " id id ... | id ... |" (documents separated by '|').
local function corpus_string(path)
  local parts, doc = {'|'}, {}
  local function flush()
    if #doc > 0 then parts[#parts + 1] = ' ' .. table.concat(doc, ' ') .. ' |' end
    doc = {}
  end
  for line in io.lines(path) do
    if line:match('^%s*$') then flush()
    else
      for _, id in ipairs(tok:encode(line, {add_special = false, as = 'table'}).ids) do doc[#doc + 1] = id end
    end
  end
  flush()
  return table.concat(parts)
end

local function run_of(t, i, j) return ' ' .. table.concat(t, ' ', i, j) .. ' ' end

T.test('segments are runs of the text: B follows A for label 0, and comes from elsewhere for 1', function()
  local all = corpus_string(CORPUS)
  local ds <close> = bd.open(S128)
  local idx = {}
  for i = 0, ds.n - 1, 11 do idx[#idx + 1] = i end -- every 11th sample: ~300
  local b = ds:batch(idx)
  local ids, tt, am, w = b.input_ids:totable(), b.token_type_ids:totable(), b.attention_mask:totable(), b.masked_weights:totable()
  local pos, mids = b.masked_positions:totable(), b.masked_ids:totable()
  local nsp = b.next_sentence_label:totable()
  local follows, random_joined, checked0 = 0, 0, 0
  for r = 1, #idx do
    local o, len, seg_a = {table.unpack(ids[r])}, 0, 0
    for k = 1, ds.max_predictions do if w[r][k] == 1 then o[pos[r][k] + 1] = mids[r][k] end end
    for j = 1, ds.seq_len do
      len = len + am[r][j]
      if am[r][j] == 1 and tt[r][j] == 0 then seg_a = seg_a + 1 end
    end
    local A, B = run_of(o, 2, seg_a - 1), run_of(o, seg_a + 1, len - 1)
    T.ok(all:find(A, 1, true), 'sample ' .. idx[r] .. ': A is not a run of the text')
    T.ok(all:find(B, 1, true), 'sample ' .. idx[r] .. ': B is not a run of the text')
    local joined = ' ' .. table.concat(o, ' ', 2, seg_a - 1) .. ' ' .. table.concat(o, ' ', seg_a + 1, len - 1) .. ' '
    if nsp[r] == 0 and len < ds.seq_len then -- not truncated: A then B, as in the text
      checked0 = checked0 + 1
      if all:find(joined, 1, true) then follows = follows + 1 end
    elseif nsp[r] == 1 and all:find(joined, 1, true) then
      random_joined = random_joined + 1
    end
  end
  T.ok(checked0 > 20, 'label-0 samples checked: ' .. checked0)
  T.eq(follows, checked0, 'label 0: B follows A in the text')
  T.ok(random_joined <= 0.05 * #idx, 'label 1: B follows A by chance in ' .. random_joined .. ' samples')
end)

T.test('seq 512 / 80 predictions', function()
  local st = make(dir .. '/s512', {inputs = {LONG}, seq_len = 512, max_predictions = 80, dupe_factor = 2})
  local ds <close> = bd.open(dir .. '/s512')
  T.eq(ds.seq_len, 512)
  T.eq(ds.max_predictions, 80)
  T.eq(ds.n, st.samples)
  local c = check_samples(ds, samples_of(ds), false)
  T.ok(c.tokens / c.n > 300, 'long samples: ' .. c.tokens / c.n .. ' tokens each')
  local share = c.masked / c.tokens
  T.ok(share > 0.14 and share < 0.16, 'masked share ' .. share)
  T.near(c.as_mask / c.masked, 0.8, 0.03, '[MASK] share')
end)

T.test('whole-word masking masks words whole', function()
  make(dir .. '/wwm', {whole_word_mask = true, dupe_factor = 1})
  local ds <close> = bd.open(dir .. '/wwm')
  T.eq(ds.whole_word_mask, true)
  local c = check_samples(ds, samples_of(ds), true)
  T.ok(c.masked / c.tokens > 0.13, 'masked share ' .. c.masked / c.tokens)
end)

T.test('same input and seed: byte-identical shards; another seed: other samples', function()
  local st = make(dir .. '/again')
  T.eq(st.shards, ST128.shards)
  for i = 0, st.shards - 1 do
    local name = string.format('/part-%05d.shard', i)
    T.ok(T.read_file(S128 .. name) == T.read_file(dir .. '/again' .. name), name .. ' differs')
  end
  make(dir .. '/seed2', {seed = 2})
  T.ok(T.read_file(S128 .. '/part-00000.shard') ~= T.read_file(dir .. '/seed2/part-00000.shard'), 'seed changes nothing')
  -- an input error leaves the directory as it was; a smaller rerun removes the shards it no longer writes
  T.write_file(dir .. '/empty2.txt', '')
  T.raises(function() make(dir .. '/again', {inputs = {dir .. '/empty2.txt'}}) end, 'holds no text')
  T.eq(#bd.open(dir .. '/again').files, ST128.shards)
  local st2 = make(dir .. '/again', {samples_per_shard = 1000000})
  T.eq(st2.shards, 1)
  local ds <close> = bd.open(dir .. '/again')
  T.eq(#ds.files, 1)
  T.eq(ds.n, ST128.samples)
end)

T.test('tokenizing threads and pieces do not change the shards; bad UTF-8 names file and line', function()
  make(dir .. '/threads', {threads = 3, piece_bytes = 997})
  for i = 0, ST128.shards - 1 do
    local name = string.format('/part-%05d.shard', i)
    T.ok(T.read_file(S128 .. name) == T.read_file(dir .. '/threads' .. name), name .. ' differs with 3 threads')
  end
  local bad = dir .. '/bad.txt'
  local text = T.read_file(CORPUS)
  local lines, at = 0, 0
  for _ = 1, 700 do at = text:find('\n', at + 1, true) lines = lines + 1 end
  T.write_file(bad, text:sub(1, at) .. 'caf\xC3 au lait\n' .. text:sub(at + 1))
  T.raises(function() make(dir .. '/bad', {inputs = {bad}, threads = 2, piece_bytes = 1000}) end,
    {'make_bert_shards: ' .. bad .. ':' .. (lines + 1) .. ': WordPiece: the text is not valid UTF-8'})
end)

T.test('Loader: 2 and 3 ranks cover every sample once per epoch, reproducibly', function()
  local ds <close> = bd.open(S128)
  for _, world in ipairs{2, 3} do
    local seen, count = {}, 0
    for r = 0, world - 1 do
      local l = bd.Loader(ds, {batch_size = 64, seed = 9, rank = r, world_size = world})
      T.eq(l.batches_per_epoch, ((ds.n + world - 1) // world) // 64)
      local idx = l:indices(3):totable()
      T.eq(#idx, (ds.n + world - 1) // world)
      T.eq(idx, l:indices(3):totable(), 'same (seed, epoch), same order')
      T.ok(T.fmt(idx) ~= T.fmt(l:indices(4):totable()), 'another epoch, another order')
      for _, i in ipairs(idx) do
        seen[i] = (seen[i] or 0) + 1
        count = count + 1
      end
    end
    local dupes = 0
    for i = 0, ds.n - 1 do
      T.ok(seen[i], 'sample ' .. i .. ' missing with ' .. world .. ' ranks')
      dupes = dupes + (seen[i] - 1)
    end
    T.eq(count, ds.n + dupes)
    T.eq(dupes, (world - ds.n % world) % world, 'only the padding repeats')
  end
  -- the batches are the samples of the rank's order, in order; the last short one kept when asked
  local l = bd.Loader(ds, {batch_size = 100, seed = 9, rank = 1, world_size = 3, drop_last = false})
  local idx = l:indices(0):totable()
  T.eq(l.batches_per_epoch, (#idx + 99) // 100)
  local n, last = 0, 0
  for k, b in l:epoch(0) do
    T.eq(k, n + 1)
    n = n + 1
    local rows = b.input_ids.shape[1]
    last = rows
    if k == 2 then
      local want = ds:batch({table.unpack(idx, 101, 200)})
      T.eq(b.input_ids:totable(), want.input_ids:totable())
      T.eq(b.labels:totable(), want.labels:totable())
      T.eq(b.masked_weights:totable(), want.masked_weights:totable())
    end
  end
  T.eq(n, l.batches_per_epoch)
  T.eq(last, #idx - 100 * (n - 1))
end)

T.test('Loader: start resumes the same batches', function()
  local ds <close> = bd.open(S128)
  local l = bd.Loader(ds, {batch_size = 32, seed = 5, rank = 0, world_size = 2, device = 'cpu'})
  local full = {}
  for k, b in l:epoch(2) do full[k] = b.input_ids:totable() end
  local got = 0
  for k, b in l:epoch(2, {start = 30}) do
    T.ok(k > 30)
    T.eq(b.input_ids:totable(), full[k], 'batch ' .. k)
    got = got + 1
  end
  T.eq(got, l.batches_per_epoch - 30)
  T.raises(function() l:epoch(2, {start = l.batches_per_epoch + 1}) end, 'start must be an integer in 0..')
  T.raises(function() bd.Loader(ds, {batch_size = 8, ranks = 2}) end, "unknown option 'ranks'")
end)

T.test('dataset: batch options, tensor indices, close', function()
  local ds = bd.open(S128 .. '/part-00000.shard')
  T.eq(ds.n, 1500)
  local a = ds:batch(v100.tensor({3, 1}, {dtype = 'i64'}))
  local b = ds:batch({3, 1}, {device = 'cpu'})
  T.eq(a.input_ids:totable(), b.input_ids:totable())
  T.eq(a.next_sentence_label.dtype, 'i64')
  T.eq(a.masked_weights.dtype, 'f32')
  T.eq(a.masked_positions.shape, {2, 20})
  T.raises(function() ds:batch({1500}) end, 'sample index 1500 (batch row 0) is outside 0..1499')
  T.raises(function() ds:batch({0}, {devcie = 'cpu'}) end, "unknown option 'devcie'")
  ds:close()
  ds:close()
  T.raises(function() ds:batch({0}) end, 'used after close')
end)

T.test('the reader refuses damaged files, naming them', function()
  local good = T.read_file(S128 .. '/part-00000.shard')
  local p = dir .. '/bad.shard'
  T.write_file(p, good:sub(1, #good - 7))
  T.raises(function() bd.open(p) end, {'shard ' .. p .. ': truncated: header says ' .. #good .. ' bytes, file has ' .. (#good - 7)})
  local at = 128 + 5000
  T.write_file(p, good:sub(1, at - 1) .. string.char(good:byte(at) ~ 4) .. good:sub(at + 1))
  T.raises(function() bd.open(p) end, {'shard ' .. p .. ': checksum mismatch (stored 0x', ', computed 0x'})
  T.write_file(p, good:sub(1, 19) .. string.char(good:byte(20) ~ 1) .. good:sub(21))
  T.raises(function() bd.open(p) end, 'header checksum mismatch')
  T.write_file(p, '')
  T.raises(function() bd.open(p) end, 'empty file (0 bytes), not a shard')
  T.write_file(p, 'VLBERTSH' .. string.pack('<I4', 9) .. good:sub(13))
  T.raises(function() bd.open(p) end, 'format version 9 is not supported (this reader reads version 1)')
  v100.io.makedirs(dir .. '/none')
  T.raises(function() bd.open(dir .. '/none') end, 'holds no *.shard files')
  T.raises(function() bd.open({S128 .. '/part-00000.shard', dir .. '/s512/part-00000.shard'}) end, 'differ from')
end)

T.test('ShardWriter round trip and its checks', function()
  local p = dir .. '/w.shard'
  local w <close> = v100.text.ShardWriter(p, {seq_len = 8, max_predictions = 2, vocab_size = 100, vocab_crc = 77})
  w:add{ids = {2, 10, 3, 11, 12, 3}, seg_a = 3, positions = {1, 4}, masked_ids = {50, 60}, nsp = 1}
  T.raises(function() w:add{ids = {2, 100, 3, 3}, seg_a = 3} end, 'token 1 has id 100, outside the vocab of 100')
  T.raises(function() w:add{ids = {2, 10, 3, 3}, seg_a = 3, idz = {}} end, "unknown option 'idz'")
  T.eq(w.count, 1)
  w:finish()
  T.raises(function() w:add{ids = {2, 3, 3}} end, 'used after finish')
  local ds <close> = bd.open(p)
  T.eq(ds.vocab_crc, 77)
  local b = ds:batch({0})
  T.eq(b.input_ids:totable(), {{2, 10, 3, 11, 12, 3, 0, 0}})
  T.eq(b.token_type_ids:totable(), {{0, 0, 0, 1, 1, 1, 0, 0}})
  T.eq(b.attention_mask:totable(), {{1, 1, 1, 1, 1, 1, 0, 0}})
  T.eq(b.labels:totable(), {{-100, 50, -100, -100, 60, -100, -100, -100}})
  T.eq(b.next_sentence_label:totable(), {1})
  T.eq(b.masked_positions:totable(), {{1, 4}})
  T.eq(b.masked_ids:totable(), {{50, 60}})
  -- an abandoned writer leaves nothing under its name
  do
    local w2 <close> = v100.text.ShardWriter(dir .. '/gone.shard', {seq_len = 8, max_predictions = 2, vocab_size = 100})
    w2:add{ids = {2, 10, 3, 11, 3}, seg_a = 3}
  end
  T.ok(io.open(dir .. '/gone.shard') == nil, 'an unfinished shard appeared')
end)

T.test('tools/make_bert_shards.lua: the summary and its errors', function()
  local out_dir = dir .. '/tool'
  local out, ok = T.run_binary(string.format('tools/make_bert_shards.lua --input %s %s --vocab %s --output %s --dupe-factor 1',
    CORPUS, CORPUS, VOCAB, out_dir))
  T.ok(ok, out)
  T.ok(out:find('files%s+2\n'), out)
  T.ok(out:find('documents%s+480\n'), out)
  for _, k in ipairs{'sentences', 'samples', 'tokens', 'masked tokens', 'NSP random', 'seconds'} do
    T.ok(out:find(k, 1, true), k .. ' missing: ' .. out)
  end
  local ds <close> = bd.open(out_dir)
  T.eq(tonumber(out:match('\nsamples%s+(%d+)')), ds.n)
  local empty = dir .. '/empty.txt'
  T.write_file(empty, '\n\n   \n')
  out, ok = T.run_binary(string.format('tools/make_bert_shards.lua --input %s --vocab %s --output %s', empty, VOCAB, out_dir))
  T.ok(not ok and out:find('make_bert_shards: the input (1 file) holds no text', 1, true), out)
  local v = T.read_file(VOCAB):gsub('%[MASK%]', '[MASQ]')
  T.write_file(dir .. '/nomask.txt', v)
  out, ok = T.run_binary(string.format('tools/make_bert_shards.lua --input %s --vocab %s --output %s', CORPUS,
    dir .. '/nomask.txt', out_dir))
  T.ok(not ok and out:find('has no [MASK] token', 1, true), out)
  out, ok = T.run_binary('tools/make_bert_shards.lua --vocab x --output y')
  T.ok(not ok and out:find("missing option '--input'", 1, true), out)
  out, ok = T.run_binary(string.format('tools/make_bert_shards.lua --input %s --vocab %s --output %s --seq-len 16 --max-predictions 20',
    CORPUS, VOCAB, out_dir))
  T.ok(not ok and out:find('--max-predictions 20 is larger than --seq-len 16', 1, true), out)
end)

require('v100.core')._ckpt.remove_tree(dir)
T.run()
