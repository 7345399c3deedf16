-- tests/lua/test_wordnet.lua: recipes/lib/wordnet.lua on Debian's wordnet-base (tools/setup.sh installs it):
-- the reader (counts, lexnames, known synsets parsed exactly, tricky glosses), the corpus
-- (format, every sentence once, documents of a head and its leaves), the lexname task (seeded,
-- deterministic, disjoint, stratified) and tools/wordnet_corpus.lua on a small root.
local T = require 'testlib'
require('v100.recipe').add_path('../../recipes/lib')
local wn = require 'wordnet' -- recipes/lib/wordnet.lua

local ROOT = wn.ROOT
assert(io.open(ROOT .. '/data.noun', 'rb'), 'WordNet is missing: install wordnet-base (tools/setup.sh) or set WORDNET_ROOT')

-- The tests that do not need all of WordNet in memory come first (every test ends with full
-- collections, which take longer with 117k synsets alive).
T.test('45 lexnames, numbered as lexnames(5WN)', function()
  T.eq(wn.NUM_CLASSES, 45)
  T.eq(#wn.LEXNAMES, 44) -- 1..44, and 0
  T.eq(wn.LEXNAMES[0], 'adj.all')
  T.eq(wn.LEXNAMES[1], 'adj.pert')
  T.eq(wn.LEXNAMES[2], 'adv.all')
  T.eq(wn.LEXNAMES[3], 'noun.Tops')
  T.eq(wn.LEXNAMES[5], 'noun.animal')
  T.eq(wn.LEXNAMES[28], 'noun.time')
  T.eq(wn.LEXNAMES[29], 'verb.body')
  T.eq(wn.LEXNAMES[38], 'verb.motion')
  T.eq(wn.LEXNAMES[43], 'verb.weather')
  T.eq(wn.LEXNAMES[44], 'adj.ppl')
  local seen = {}
  for l = 0, 44 do
    T.ok(not seen[wn.LEXNAMES[l]], 'unique ' .. l)
    seen[wn.LEXNAMES[l]] = true
  end
end)

T.test('a bad line is an error naming the file', function()
  T.raises(function() wn._parse_line('00001740 03 n zz entity 0 000 | x', 'data.noun') end,
    { 'data.noun', 'cannot parse' })
  T.raises(function() wn._parse_line('00001740 99 n 01 entity 0 000 | x', 'data.noun') end, 'cannot parse')
  T.raises(function() wn.read('/nonexistent-wordnet') end, { 'wordnet.read', '/nonexistent-wordnet/data.noun' })
end)

local dir = T.tmpdir()

T.test('tools/wordnet_corpus.lua on a small root writes corpus.txt and the three TSVs', function()
  -- A root with the licence header and the first 300 synsets of each file: pointers to synsets
  -- outside it are ignored.
  local root = dir .. '/root'
  require('v100.core').io.makedirs(root)
  for _, part in ipairs(wn.FILES) do
    local out, n = {}, 0
    for line in io.lines(ROOT .. '/data.' .. part) do
      if line:sub(1, 2) ~= '  ' then n = n + 1 end
      if n > 300 then break end
      out[#out + 1] = line
    end
    T.write_file(root .. '/data.' .. part, table.concat(out, '\n') .. '\n')
  end
  local out = dir .. '/out'
  local text, ok = T.run_binary('tools/wordnet_corpus.lua --root ' .. root .. ' --output ' .. out .. ' --seed 3')
  T.ok(ok, text)
  T.ok(text:find('read 1200 synsets', 1, true), text)
  T.ok(text:find('test majority class: ', 1, true), text)
  local items = {}
  for _, split in ipairs({ 'train', 'val', 'test' }) do
    items[split] = wn.read_task(out .. '/lexnames-' .. split .. '.tsv')
  end
  T.eq(#items.train + #items.val + #items.test, 1200)
  local task = wn.lexname_task(wn.read(root), { seed = 3 })
  T.eq(items.test[1].id, task.test[1].id)
  T.eq(items.test[1].text, task.test[1].text)
  T.eq(items.test[1].label, task.test[1].label)
  T.ok(T.read_file(out .. '/corpus.txt'):find('\n\n', 1, true))
  local _, bad = T.run_binary('tools/wordnet_corpus.lua --root ' .. root)
  T.eq(bad, nil, 'no --output is an error')
end)

local t0 = os.clock()
local synsets = wn.read()
local read_s = os.clock() - t0
local by_id = {}
for _, s in ipairs(synsets) do by_id[s.id] = s end

T.test('every synset of the data files is read, in file order; known synsets and tricky glosses exactly', function()
  print(string.format('  read %d synsets in %.2f s (CPU)', #synsets, read_s))
  local lines, pos_of = {}, { noun = { n = true }, verb = { v = true }, adj = { a = true, s = true }, adv = { r = true } }
  local k = 0
  for _, part in ipairs(wn.FILES) do
    local n = 0
    for line in io.lines(ROOT .. '/data.' .. part) do
      if line:sub(1, 2) ~= '  ' then
        n = n + 1
        k = k + 1
        local s = synsets[k]
        if s.offset ~= math.tointeger(tonumber(line:sub(1, 8))) or not pos_of[part][s.pos] then
          error(string.format('%s line %d: synset %s', part, n, s.id))
        end
      end
    end
    lines[part] = n
  end
  T.eq(k, #synsets)
  -- WordNet 3.0's synset counts.
  T.eq(lines, { noun = 82115, verb = 13767, adj = 18156, adv = 3621 })
  local per = {}
  for _, s in ipairs(synsets) do
    per[s.pos] = (per[s.pos] or 0) + 1
    local prefix = ({ n = 'noun.', v = 'verb.', a = 'adj.', s = 'adj.', r = 'adv.' })[s.pos]
    if s.lexname:sub(1, #prefix) ~= prefix or wn.LEXNAMES[s.lexfile] ~= s.lexname then
      error(s.id .. ' has ' .. s.lexname)
    end
  end
  T.eq(per.a + per.s, 18156)
  T.eq(per.n, 82115)
  -- Known synsets and tricky glosses, parsed exactly (one test with the lines: every test ends
  -- with two full collections of the whole heap).
  local dog = by_id['02084071-n']
  T.eq(dog.offset, 2084071)
  T.eq(dog.pos, 'n')
  T.eq(dog.lexfile, 5)
  T.eq(dog.lexname, 'noun.animal')
  T.eq(dog.words, { 'dog', 'domestic dog', 'Canis familiaris' })
  T.eq(dog.definition, 'a member of the genus Canis (probably descended from the common wolf) that has been ' ..
    'domesticated by man since prehistoric times; occurs in many breeds')
  T.eq(dog.examples, { 'the dog barked all night' })
  T.eq(dog.hypernyms, { '02083346-n', '01317541-n' })
  T.eq(#dog.hyponyms, 18)
  T.eq(dog.hyponyms[1], '01322604-n')
  local breathe = by_id['00001740-v']
  T.eq(breathe.lexname, 'verb.body')
  T.eq(breathe.words, { 'breathe', 'take a breath', 'respire', 'suspire' })
  T.eq(breathe.definition, 'draw air into, and expel out of, the lungs')
  T.eq(breathe.examples, { 'I can breathe better when the air is clean', 'The patient is respiring' })
  -- An adjective marker "(ip)" is dropped; a satellite points to its head with &.
  local galore = by_id['00014358-s']
  T.eq(galore.words, { 'abounding', 'galore' })
  T.eq(galore.similar, { '00013887-a' })
  T.eq(galore.examples, { 'abounding confidence', 'whiskey galore' })
  local able = by_id['00001740-a']
  T.ok(able.definition:find('(usually followed by `to\') having the necessary means', 1, true) == 1, able.definition)
  local acap = by_id['00001740-r']
  T.eq(acap.lexname, 'adv.all')
  T.eq(acap.words, { 'a cappella' })
  T.eq(acap.definition, 'without musical accompaniment')
  T.eq(acap.examples, { 'they performed a cappella' })
  -- Glosses: semicolons in definitions, quotes in definitions, unbalanced quotes, attributions.
  -- Real lines of WordNet 3.0.
  T.eq(by_id['00002684-n'].definition, 'a tangible and visible entity; an entity that can cast a shadow')
  T.eq(by_id['00249987-n'].definition, 'significant progress (especially in the phrase "make strides")')
  T.eq(by_id['00249987-n'].examples, { 'they made big strides in productivity' })
  local cattle = by_id['02402425-n']
  T.eq(cattle.examples, { 'so many head of cattle', 'wait till the cows come home', 'seven thin and ill-favored kine',
    'a team of oxen' }) -- '"..."- Bible' loses its attribution
  local duty = by_id['01129920-n'].examples
  T.eq(duty[2], 'every right implies a responsibility; every opportunity, an obligation; every possession, a duty')
  T.eq(by_id['00941464-v'].examples, { 'drop a hint', 'drop names' }) -- '"drop a hint"; drop names"'
  T.eq(by_id['00442115-n'].examples, { 'it was the swimming they enjoyed most', 'they took a short swim in the pool' })
  T.eq(by_id['00196485-n'].definition, 'the act of putting one thing or person in the place of another') -- ': "'
  -- The splitter alone.
  local d, e = wn.split_gloss('a; b;  ')
  T.eq({ d, e }, { 'a; b', {} })
  d, e = wn.split_gloss('"only an example"')
  T.eq({ d, e }, { '', { 'only an example' } })
  d, e = wn.split_gloss('def; "unclosed example')
  T.eq({ d, e }, { 'def', { 'unclosed example' } })
  d, e = wn.split_gloss('def; "one"; "two";  ')
  T.eq({ d, e }, { 'def', { 'one', 'two' } })
  -- No example is empty, no definition ends in ';', nothing has a line break.
  for _, s in ipairs(synsets) do
    if s.definition:find(';$') or s.definition:find('[\n\t]') then error(s.id .. ': ' .. s.definition) end
    for _, x in ipairs(s.examples) do
      if x == '' or x:find('[\n\t]') then error(s.id .. ': empty example') end
    end
  end
end)

T.test('corpus: sentence per line, blank line between documents, every sentence once', function()
  local path = dir .. '/corpus.txt'
  local st = wn.write_corpus(path, synsets)
  print(string.format('  corpus: %d documents, %d sentences, %d words, %.2f MB', st.documents, st.sentences, st.words,
    st.bytes / 1e6))
  local want = 0
  for _, s in ipairs(synsets) do want = want + (s.definition ~= '' and 1 or 0) + #s.examples end
  T.eq(st.sentences, want)
  local text = T.read_file(path)
  T.eq(#text, st.bytes)
  T.ok(text:sub(-1) == '\n' and text:sub(-2) ~= '\n\n' and text:sub(1, 1) ~= '\n')
  T.ok(not text:find('\n\n\n', 1, true))
  local docs, lines = 1, 0
  for l in text:gmatch('([^\n]*)\n') do
    if l == '' then docs = docs + 1 else lines = lines + 1 end
    local a, z = l:byte(1), l:byte(-1)
    if a == 32 or a == 9 or z == 32 or z == 9 then error('untrimmed line ' .. l) end
  end
  T.eq(docs, st.documents)
  T.eq(lines, st.sentences)
  T.ok(st.documents > 30000 and st.documents < 60000, 'documents ' .. st.documents)
  -- dog's document: its sentences, then those of its leaf hyponyms in pointer order.
  local at = text:find('\n\ndog, domestic dog, Canis familiaris: ', 1, true)
  T.ok(at, 'a document starts with dog')
  local found = {}
  for l in text:sub(at + 2, (text:find('\n\n', at + 2, true))):gmatch('[^\n]+') do found[#found + 1] = l end
  T.eq(found[1], 'dog, domestic dog, Canis familiaris: ' .. by_id['02084071-n'].definition .. '.')
  T.eq(found[2], 'the dog barked all night')
  local k, n = 2, 0
  for _, h in ipairs(by_id['02084071-n'].hyponyms) do
    local s = by_id[h]
    if #s.hyponyms == 0 and s.hypernyms[1] == '02084071-n' then
      k = k + 1
      n = n + 1
      T.eq(found[k], table.concat(s.words, ', ') .. ': ' .. s.definition .. (s.definition:find('[.!?]$') and '' or '.'))
      k = k + #s.examples
    end
  end
  T.ok(n >= 2, 'dog has leaf hyponyms')
  T.eq(#found, k)
  -- The cap, on the first 20000 synsets.
  local some = table.move(synsets, 1, 20000, 1, {})
  local docs_ = wn.documents(some)
  local cap = 0
  for _, d in ipairs(docs_) do cap = math.max(cap, #d) end
  T.eq(cap, 32)
  local small = wn.documents(some, { max_sentences = 8 })
  T.ok(#small > #docs_)
  for _, d in ipairs(small) do T.ok(#d <= 8) end
end)

T.test('lexname task: seeded, deterministic, disjoint, stratified; text without the words', function()
  local a = wn.lexname_task(synsets, { seed = 7, val = 0.1, test = 0.1 })
  T.eq(a.classes, 45)
  local function ids(items)
    local r = {}
    for i, it in ipairs(items) do r[i] = it.id end
    return r
  end
  -- Determinism on the first 30000 synsets (time).
  local some = table.move(synsets, 1, 30000, 1, {})
  local b = wn.lexname_task(some, { seed = 7 })
  local b2 = wn.lexname_task(some, { seed = 7 })
  local c = wn.lexname_task(some, { seed = 8 })
  T.eq(ids(b.test), ids(b2.test))
  T.eq(ids(b.train), ids(b2.train))
  T.eq(ids(b.val), ids(b2.val))
  T.ok(not T.deep_eq(ids(b.test), ids(c.test)), 'another seed, another split')
  local seen = {}
  for _, split in ipairs({ 'train', 'val', 'test' }) do
    for _, it in ipairs(a[split]) do
      T.ok(not seen[it.id], 'disjoint: ' .. it.id)
      seen[it.id] = split
    end
  end
  T.eq(#a.train + #a.val + #a.test, #synsets)
  local total = wn.class_counts(a.train)
  local test, best, share = wn.class_counts(a.test)
  local val = wn.class_counts(a.val)
  for l = 0, 44 do
    local n = total[l] + test[l] + val[l]
    T.eq(test[l], math.floor(n * 0.1 + 0.5), 'stratified ' .. wn.LEXNAMES[l])
    T.eq(val[l], math.floor(n * 0.1 + 0.5))
    T.ok(test[l] >= 4, 'every class in test')
  end
  T.eq(wn.LEXNAMES[best], 'adj.all')
  T.near(share, 1444 / 11768, 1e-3)
  local dog
  for _, it in ipairs(a.train) do if it.id == '02084071-n' then dog = it end end
  for _, it in ipairs(a.test) do if it.id == '02084071-n' then dog = it end end
  for _, it in ipairs(a.val) do if it.id == '02084071-n' then dog = it end end
  T.eq(dog.label, 5)
  T.eq(dog.text, by_id['02084071-n'].definition .. '; "the dog barked all night"')
  -- The generator is SplitMix64: its reference outputs for seed 1234567.
  local r = wn.prng(1234567)
  T.eq(r(), 6457827717110365317)
  T.eq(r(), 3203168211198807973)
  T.raises(function() wn.lexname_task(synsets, { val = 0.6, test = 0.5 }) end, 'val and test')
end)

require('v100.core')._ckpt.remove_tree(dir)
T.run()
