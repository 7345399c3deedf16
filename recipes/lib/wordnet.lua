-- recipes/lib/wordnet.lua: the WordNet 3.0 database (Debian's wordnet-base, /usr/share/wordnet) as Lua
-- tables: the BERT pretraining corpus (WordNet's glosses and examples) and the lexname task
-- (predict a synset's lexicographer file, 45 classes, from its gloss).
--
--   local wn = require 'wordnet'     -- after recipe.add_path('lib') (a recipe module, not v100's)
--   wn.ROOT                        -- $WORDNET_ROOT or /usr/share/wordnet
--   wn.LEXNAMES[0..44]             -- lexnames(5WN): 'adj.all', 'adj.pert', 'adv.all', 'noun.Tops', ...
--   local synsets = wn.read([root])
--   wn.write_corpus(path, synsets[, {max_sentences = 32}]) -> {documents =, sentences =, words =, bytes =}
--   local task = wn.lexname_task(synsets, {seed = 12345, val = 0.1, test = 0.1})
--   wn.write_task(path, items)     -- label<TAB>offset-pos<TAB>text lines
--
-- The data files' line format is wndb(5WN): "synset_offset lex_filenum ss_type w_cnt word lex_id
-- [word lex_id ...] p_cnt [pointer_symbol offset pos source/target ...] [frames] | gloss", w_cnt
-- and lex_id hexadecimal; the licence header lines begin with two spaces.
local core = require 'v100.core'

local wn = {}

wn.ROOT = os.getenv('WORDNET_ROOT') or '/usr/share/wordnet'

-- lexnames(5WN), file numbers 0..44.
wn.LEXNAMES = {
  [0] = 'adj.all', 'adj.pert', 'adv.all', 'noun.Tops', 'noun.act', 'noun.animal', 'noun.artifact',
  'noun.attribute', 'noun.body', 'noun.cognition', 'noun.communication', 'noun.event', 'noun.feeling',
  'noun.food', 'noun.group', 'noun.location', 'noun.motive', 'noun.object', 'noun.person',
  'noun.phenomenon', 'noun.plant', 'noun.possession', 'noun.process', 'noun.quantity', 'noun.relation',
  'noun.shape', 'noun.state', 'noun.substance', 'noun.time', 'verb.body', 'verb.change',
  'verb.cognition', 'verb.communication', 'verb.competition', 'verb.consumption', 'verb.contact',
  'verb.creation', 'verb.emotion', 'verb.motion', 'verb.perception', 'verb.possession', 'verb.social',
  'verb.stative', 'verb.weather', 'adj.ppl',
}
wn.NUM_CLASSES = 45

-- The data files in the order wn.read returns their synsets.
wn.FILES = { 'noun', 'verb', 'adj', 'adv' }

-- (Not gsub('%s+$', ''): that pattern is tried at every position, quadratic in the length.)
local function trim(s)
  local a = s:find('%S')
  if not a then return '' end
  return s:sub(a, s:match('.*%S()') - 1)
end

-- Splits a gloss as WordNet writes it: "definition; \"example\"; \"example\"". The definition
-- ends at the first quote that follows a ';' or ':' (a quote elsewhere, as in 'the phrase
-- "make strides"', belongs to the definition). The rest is cut at every ';' next to a quote
-- (before or after it, so that '"drop a hint"; drop names"' is two examples) and at ':' between
-- two quotes; each piece loses its opening quote and what follows its last quote (an attribution
-- such as '- Bible'), or a lone closing quote. Semicolons inside a definition ("a tangible
-- entity; an entity that can cast a shadow") or inside an example stay.
function wn.split_gloss(gloss)
  gloss = trim(gloss)
  local q = gloss:find('^"') or gloss:find('[;:]%s*"')
  if not q then return trim((gloss:gsub(';+$', ''))), {} end
  local def = trim(gloss:sub(1, q - 1))
  if def:find('[;:]$') then def = trim(def:sub(1, -2)) end
  local rest = gloss:sub(gloss:find('"', q, true), -1)
  local examples, start = {}, 1
  local function piece(s)
    s = trim(s)
    if s:sub(1, 1) == '"' then
      s = s:sub(2)
      local last = s:match('^.*()"')
      if last then s = s:sub(1, last - 1) end
    else
      s = s:gsub('"$', '')
    end
    s = trim(s)
    if s ~= '' then examples[#examples + 1] = s end
  end
  for i in rest:gmatch('()[;:]') do
    local c = rest:byte(i)
    local j = i - 1
    while j > 0 and rest:byte(j) == 32 do j = j - 1 end
    local before = j > 0 and rest:byte(j) == 34
    local after = rest:find('^%s*"', i + 1) ~= nil
    if (c == 59 and (before or after)) or (c == 58 and before and after) then
      piece(rest:sub(start, i - 1))
      start = i + 1
    end
  end
  piece(rest:sub(start))
  return def, examples
end

local POINTER_KIND = { ['@'] = 'hypernyms', ['@i'] = 'hypernyms', ['~'] = 'hyponyms', ['~i'] = 'hyponyms',
                       ['&'] = 'similar' }

-- One data line -> synset table (see wn.read), or nil for a header line. Anchored matches from a
-- position (string.match with init and ^) rather than a table of all fields: a noun can have
-- hundreds of pointers, and the read of all 117k synsets should take seconds, not more.
local function parse_line(line, file)
  if line:byte(1) == 32 or line == '' then return nil end
  local bar = line:find(' | ', 1, true) or line:find('|', 1, true)
  local head = bar and line:sub(1, bar) or line
  local gloss = bar and line:sub(bar + (line:sub(bar, bar) == '|' and 1 or 3)) or ''
  local function bad() error(string.format('wordnet: %s: cannot parse the line %q', file, line:sub(1, 80)), 0) end
  local off, lex, pos, wc, p = head:match('^(%d+) (%d%d) ([nvasr]) (%x%x) ()')
  if not off then bad() end
  local lexfile = math.tointeger(tonumber(lex))
  if not wn.LEXNAMES[lexfile] then bad() end
  local words = {}
  for k = 1, tonumber(wc, 16) do
    local w, q = head:match('^(%S+) %x ()', p)
    if not w then bad() end
    words[k] = w:gsub('%(i?[ap]%)$', ''):gsub('_', ' ')
    p = q
  end
  local pc, q = head:match('^(%d%d%d) ()', p)
  if not pc then bad() end
  local offset = math.tointeger(tonumber(off))
  local s = { offset = offset, pos = pos, lexfile = lexfile, lexname = wn.LEXNAMES[lexfile], words = words,
              id = off .. '-' .. pos, hypernyms = {}, hyponyms = {}, similar = {} }
  -- The pointers of interest found by one scan of the pointer list (" @ 02083346 n 0000"; only
  -- semantic ones, source/target 0000, relate the synsets themselves); the shape of the first
  -- pointer checks that the list is where it should be.
  if pc ~= '000' then
    for sym, toff, tpos in head:gmatch(' ([@~&]i?) (%d%d%d%d%d%d%d%d) ([nvasr]) 0000', q - 1) do
      local list = s[POINTER_KIND[sym]]
      list[#list + 1] = toff .. '-' .. tpos
    end
    if not head:find('^%S%S? %d%d%d%d%d%d%d%d [nvasr] %x%x%x%x ', q) then bad() end
  end
  s.definition, s.examples = wn.split_gloss(gloss)
  return s
end
wn._parse_line = parse_line

-- Every synset of the four data files under root (default wn.ROOT), in file order (noun, verb,
-- adj, adv) and offset order within a file. A synset: { id = '02084071-n', offset = 2084071,
-- pos = 'n'|'v'|'a'|'s'|'r', lexfile = 0..44, lexname =, words = {'dog', 'domestic dog',
-- 'Canis familiaris'} (underscores as spaces, adjective markers (a) (p) (ip) dropped),
-- definition =, examples = {...}, hypernyms = {ids}, hyponyms = {ids}, similar = {ids} (the
-- semantic pointers @ @i, ~ ~i and & in the file's order) }.
function wn.read(root)
  root = root or wn.ROOT
  local out = {}
  -- The generational collector for the read: it builds about a million small tables and
  -- strings that all stay alive, which the incremental one keeps re-marking as the heap grows.
  local mode = collectgarbage('generational')
  for _, part in ipairs(wn.FILES) do
    local path = root .. '/data.' .. part
    local fh, err = io.open(path, 'rb')
    if not fh then
      collectgarbage(mode)
      error('wordnet.read: cannot open ' .. tostring(err), 2)
    end
    local ok, e = pcall(function()
      for line in fh:lines() do
        local s = parse_line(line, path)
        if s then out[#out + 1] = s end
      end
    end)
    fh:close()
    if not ok then
      collectgarbage(mode)
      error(e, 2)
    end
  end
  collectgarbage(mode)
  return out
end

-- ---- the pretraining corpus ----

-- The sentences of one synset: "<words>: <definition>." then each example as written.
local function synset_sentences(s, out)
  local def = s.definition
  if def ~= '' then
    if not def:find('[.!?]$') then def = def .. '.' end
    out[#out + 1] = table.concat(s.words, ', ') .. ': ' .. def
  end
  for _, e in ipairs(s.examples) do out[#out + 1] = e end
end

-- The documents of the corpus (arrays of sentences). Next-sentence prediction needs documents of
-- several related sentences, and a synset alone mostly has one or two. So every synset goes into
-- exactly one document (no sentence is repeated; make_bert_shards' dupe_factor repeats): a synset
-- with hyponyms (nouns, verbs) or satellites (head adjectives) starts a document of its own;
-- every other synset (a leaf) joins the document of its first hypernym (first @ or @i pointer),
-- a satellite adjective that of its head (its & pointer); synsets with neither (most adverbs,
-- isolated leaves) are documents alone. A document lists its head's sentences, then its leaves' in
-- the head's pointer order; past max_sentences it is continued in a new document (the siblings
-- stay together). Documents follow their heads in wn.read's order. Deterministic.
function wn.documents(synsets, opts)
  opts = opts or {}
  local max = opts.max_sentences or 32
  if math.type(max) ~= 'integer' or max < 1 then error('wordnet.documents: max_sentences must be an integer >= 1', 2) end
  local by_id = {}
  for _, s in ipairs(synsets) do by_id[s.id] = s end
  -- Heads, then each leaf's head (its first hypernym, a satellite's first head adjective, that
  -- is in synsets), then the leaves of each head.
  local head = {}
  for _, s in ipairs(synsets) do
    local h = #s.hyponyms > 0
    if not h and s.pos == 'a' then
      for _, t in ipairs(s.similar) do
        local x = by_id[t]
        if x and x.pos == 's' then
          h = true
          break
        end
      end
    end
    head[s] = h
  end
  local parent, leaves_of = {}, {}
  for _, s in ipairs(synsets) do
    if not head[s] then
      for _, t in ipairs(s.pos == 's' and s.similar or s.hypernyms) do
        local p = by_id[t]
        if p and head[p] then
          parent[s] = p
          local l = leaves_of[p]
          if not l then
            l = {}
            leaves_of[p] = l
          end
          l[s.id] = true
          break
        end
      end
    end
  end
  local docs = {}
  local function emit(list)
    local cur = {}
    for _, s in ipairs(list) do
      local sent = {}
      synset_sentences(s, sent)
      for _, x in ipairs(sent) do
        if #cur >= max then
          docs[#docs + 1] = cur
          cur = {}
        end
        cur[#cur + 1] = x
      end
    end
    if #cur > 0 then docs[#docs + 1] = cur end
  end
  for _, s in ipairs(synsets) do
    if head[s] then
      local list = { s }
      local mine = leaves_of[s]
      if mine then
        for _, t in ipairs(s.pos == 'a' and s.similar or s.hyponyms) do
          if mine[t] then
            list[#list + 1] = by_id[t]
            mine[t] = nil -- a leaf listed twice by its head goes in once
          end
        end
      end
      emit(list)
    elseif not parent[s] then
      emit({ s })
    end
  end
  return docs
end

-- Writes the documents in Google's BERT text format (a sentence per line, a blank line between
-- documents; no line breaks inside a sentence) and returns its size.
function wn.write_corpus(path, synsets, opts)
  local docs = wn.documents(synsets, opts)
  local st = { documents = #docs, sentences = 0, words = 0, bytes = 0 }
  local buf = {}
  for i, d in ipairs(docs) do
    for _, x in ipairs(d) do
      local nw
      x, nw = x:gsub('%s+', ' ')
      buf[#buf + 1] = x
      st.sentences = st.sentences + 1
      st.words = st.words + nw + 1 -- sentences are trimmed and not empty
    end
    if i < #docs then buf[#buf + 1] = '' end
  end
  local text = #buf > 0 and table.concat(buf, '\n') .. '\n' or ''
  st.bytes = #text
  -- through the runtime's one writer (replace.h): a link another user planted at the path is not
  -- followed, and a killed run never leaves half a corpus under the final name
  local ok, err = pcall(core._ckpt.write_atomic, path, text)
  if not ok then error('wordnet.write_corpus: cannot write ' .. tostring(err), 2) end
  return st
end

-- ---- the lexname task ----

-- SplitMix64 (Steele, Lea and Flood 2014; the seeding generator of xoshiro): Lua 5.4's 64-bit
-- integers wrap, and >> is a logical shift, so these are the reference's numbers on every
-- machine (math.random's algorithm is Lua's to change).
function wn.prng(seed)
  local x = math.tointeger(seed) or error('wordnet.prng: the seed must be an integer', 2)
  return function()
    x = x + 0x9e3779b97f4a7c15
    local z = x
    z = (z ~ (z >> 30)) * 0xbf58476d1ce4e5b9
    z = (z ~ (z >> 27)) * 0x94d049bb133111eb
    return z ~ (z >> 31)
  end
end

-- Fisher-Yates with the generator: j uniform in 1..i from the top 63 bits (the modulo bias is
-- below 2^-40 for these sizes).
local function shuffle(t, rnd)
  for i = #t, 2, -1 do
    local j = (rnd() >> 1) % i + 1
    t[i], t[j] = t[j], t[i]
  end
end
wn.shuffle = shuffle

-- The text of a synset for the task: its definition and examples (quoted, '; '-separated, as
-- WordNet writes a gloss), without the synset's words (see docs: the lemma would give the
-- label away for words with several senses in one file, across the splits).
function wn.task_text(s)
  local parts = { s.definition ~= '' and s.definition or nil }
  for _, e in ipairs(s.examples) do parts[#parts + 1] = '"' .. e .. '"' end
  return (table.concat(parts, '; '):gsub('%s+', ' '))
end

-- Splits the synsets into train/val/test, stratified by label: the synsets of each label (in
-- wn.read's order, labels 0..44 in turn) are shuffled with one SplitMix64 stream from the seed,
-- the first round(n * test) go to test, the next round(n * val) to val, the rest to train; then
-- each split is shuffled with the same stream. Items: { text =, label = 0..44, id =, offset =, pos = }.
function wn.lexname_task(synsets, opts)
  opts = opts or {}
  local seed = opts.seed or 12345
  local val, test = opts.val or 0.1, opts.test or 0.1
  if not (val >= 0 and test >= 0 and val + test < 1) then
    error('wordnet.lexname_task: val and test must be >= 0 with val + test < 1', 2)
  end
  local rnd = wn.prng(seed)
  local by_label = {}
  for l = 0, wn.NUM_CLASSES - 1 do by_label[l] = {} end
  for _, s in ipairs(synsets) do
    local t = wn.task_text(s)
    if t ~= '' then
      local list = by_label[s.lexfile]
      list[#list + 1] = { text = t, label = s.lexfile, id = s.id, offset = s.offset, pos = s.pos }
    end
  end
  local r = { train = {}, val = {}, test = {}, classes = wn.NUM_CLASSES, seed = seed }
  for l = 0, wn.NUM_CLASSES - 1 do
    local list = by_label[l]
    shuffle(list, rnd)
    local nt = math.floor(#list * test + 0.5)
    local nv = math.floor(#list * val + 0.5)
    for i, it in ipairs(list) do
      local dst = i <= nt and r.test or (i <= nt + nv and r.val or r.train)
      dst[#dst + 1] = it
    end
  end
  shuffle(r.train, rnd)
  shuffle(r.val, rnd)
  shuffle(r.test, rnd)
  return r
end

-- Per-label counts of items (index 0..44) and the majority label with its share.
function wn.class_counts(items)
  local c = {}
  for l = 0, wn.NUM_CLASSES - 1 do c[l] = 0 end
  for _, it in ipairs(items) do c[it.label] = c[it.label] + 1 end
  local best = 0
  for l = 1, wn.NUM_CLASSES - 1 do if c[l] > c[best] then best = l end end
  return c, best, #items > 0 and c[best] / #items or 0
end

-- label<TAB>offset-pos<TAB>text, one item a line (texts hold no tabs or line breaks).
function wn.write_task(path, items)
  local buf = {}
  for i, it in ipairs(items) do
    buf[i] = it.label .. '\t' .. it.id .. '\t' .. it.text:gsub('[\t\r\n]', ' ')
  end
  local text = #buf > 0 and table.concat(buf, '\n') .. '\n' or ''
  local ok, err = pcall(core._ckpt.write_atomic, path, text) -- replace.h's rules
  if not ok then error('wordnet.write_task: cannot write ' .. tostring(err), 2) end
end

-- Reads a file that wn.write_task wrote: items { label =, id =, text = }.
function wn.read_task(path)
  local fh, err = io.open(path, 'rb')
  if not fh then error('wordnet.read_task: cannot open ' .. tostring(err), 2) end
  local items = {}
  for line in fh:lines() do
    local l, id, text = line:match('^(%d+)\t([^\t]*)\t(.*)$')
    if not l then fh:close() error('wordnet.read_task: ' .. path .. ': bad line ' .. (#items + 1), 2) end
    items[#items + 1] = { label = math.tointeger(tonumber(l)), id = id, text = text }
  end
  fh:close()
  return items
end

return wn
