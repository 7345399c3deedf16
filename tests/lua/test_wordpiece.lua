-- tests/lua/test_wordpiece.lua: v100.text.WordPiece against Hugging Face's BertTokenizer
-- (transformers 5, tokenizers-backed) on tests/data/wordpiece_fixture.json, written by
-- tools/make_tokenizer_fixture.py: ~220 texts under three settings, pair encodings with
-- truncation and padding, decodes; then options, edge cases and errors.
local v100 = require 'v100'
local T = require 'testlib'

local VOCAB = 'tests/data/wordpiece_vocab.txt'
local function unhex(h) return (h:gsub('..', function(x) return string.char(tonumber(x, 16)) end)) end
local fx = v100.json.decode(T.read_file('tests/data/wordpiece_fixture.json'))
local function setting(name)
  local s = fx.settings[name]
  local sa = s.strip_accents
  if type(sa) ~= 'boolean' then sa = nil end -- JSON null: follow lower
  return v100.text.WordPiece(VOCAB, { lower = s.lower, strip_accents = sa })
end
local tok = v100.text.WordPiece(VOCAB) -- HF's defaults: lower-casing, accents stripped

T.test('v100.json names the io JSON functions', function()
  T.eq(v100.json.encode, v100.io.json_encode)
  T.eq(v100.json.decode('[1, 2]'), { 1, 2 })
end)

T.test('vocab size, token_to_id and id_to_token follow vocab.txt lines from 0', function()
  local lines = {}
  for l in T.read_file(VOCAB):gmatch('([^\n]*)\n') do lines[#lines + 1] = l end
  T.eq(tok.vocab_size, #lines)
  T.eq(tok.vocab_size, 3000)
  for _, i in ipairs({ 0, 1, 4, 100, 2999 }) do
    T.eq(tok:id_to_token(i), lines[i + 1])
    T.eq(tok:token_to_id(lines[i + 1]), i)
  end
  T.eq(tok:token_to_id('[UNK]'), 1)
  T.eq(tok:token_to_id('no-such-token'), nil)
  T.eq(tok:id_to_token(-1), nil)
  T.eq(tok:id_to_token(3000), nil)
  T.ok(tostring(tok):find('WordPiece(3000 tokens)', 1, true))
end)

for _, name in ipairs({ 'lower', 'cased', 'lower_accents' }) do
  T.test('ids equal HF\'s for every fixture text: ' .. name, function()
    local tk = setting(name)
    T.ok(#fx.cases >= 200)
    for i, c in ipairs(fx.cases) do
      local text = unhex(c.text)
      T.eq(tk:encode(text, { add_special = false, as = 'table' }).ids, c[name],
        string.format('case %d %q', i, text))
    end
  end)
end

T.test('tokens equal HF\'s tokenize() (lower)', function()
  for i, c in ipairs(fx.cases) do
    local text = unhex(c.text)
    T.eq(tok:tokenize(text), c.tokens, string.format('case %d %q', i, text))
  end
end)

T.test('encode: pairs, truncation (longest_first), padding, masks equal HF\'s', function()
  T.ok(#fx.encode >= 40)
  for i, e in ipairs(fx.encode) do
    local a = unhex(e.a)
    local b = type(e.b) == 'string' and unhex(e.b) or nil
    local ml = type(e.max_length) == 'number' and e.max_length or nil
    local opts = { max_length = ml, truncation = e.truncation, padding = e.padding and 'max_length' or false,
                   as = 'table' }
    local r = b and tok:encode(a, b, opts) or tok:encode(a, opts)
    local what = string.format('encode %d %q / %q', i, a, b or '-')
    T.eq(r.ids, e.input_ids, what)
    T.eq(r.token_type_ids, e.token_type_ids, what)
    T.eq(r.attention_mask, e.attention_mask, what)
  end
end)

T.test('decode equals HF\'s decode (its WordPiece decoder cleans up spaces before punctuation)', function()
  for i, d in ipairs(fx.decode) do
    T.eq(tok:decode(d.ids, { skip_special = d.skip_special }), unhex(d.text), 'decode ' .. i)
  end
end)

T.test('encode returns i64 CPU tensors by default; decode takes them', function()
  local r = tok:encode('the cat sat', 'on the mat', { max_length = 16, padding = 'max_length' })
  for _, k in ipairs({ 'ids', 'token_type_ids', 'attention_mask' }) do
    T.ok(T.is_tensor(r[k]), k)
    T.eq(r[k].dtype, 'i64')
    T.eq(r[k]:size(), { 16 })
  end
  local ids = r.ids:totable()
  T.eq(ids[1], tok:token_to_id('[CLS]'))
  T.eq(ids[16], tok:token_to_id('[PAD]'))
  T.eq(tok:decode(r.ids, { skip_special = true }), tok:decode(ids, { skip_special = true }))
  T.eq(tok:decode(r.ids, { skip_special = true }), 'the cat sat on the mat')
  local t = r.token_type_ids:totable()
  local m = r.attention_mask:totable()
  local n = 0
  for i = 1, 16 do n = n + m[i] end
  T.eq(n, #tok:tokenize('the cat sat') + #tok:tokenize('on the mat') + 3)
  T.eq(t[n], 1)
  T.eq(t[16], 0)
end)

T.test('encode without truncation keeps everything; padding only lengthens', function()
  local long = string.rep('word ', 30)
  local r = tok:encode(long, { max_length = 8, truncation = false, padding = 'max_length', as = 'table' })
  T.eq(#r.ids, 32)
  r = tok:encode(long, { max_length = 8, as = 'table' })
  T.eq(#r.ids, 8)
  T.eq(r.ids[8], tok:token_to_id('[SEP]'))
  r = tok:encode('word', { add_special = false, max_length = 4, padding = 'max_length', as = 'table' })
  T.eq(r.ids, { tok:token_to_id('word'), 0, 0, 0 })
  T.eq(r.attention_mask, { 1, 0, 0, 0 })
  r = tok:encode('', { as = 'table' })
  T.eq(r.ids, { tok:token_to_id('[CLS]'), tok:token_to_id('[SEP]') })
  T.eq(tok:encode('word', nil, { as = 'table' }), tok:encode('word', { as = 'table' })) -- a nil pair is no pair
  T.eq(tok:tokenize(''), {})
  T.eq(tok:decode({}), '')
end)

T.test('max_chars: a longer word is [UNK], as HF\'s max_input_chars_per_word', function()
  T.ok(tok:tokenize(string.rep('a', 100))[1] ~= '[UNK]')
  T.eq(tok:tokenize(string.rep('a', 101)), { '[UNK]' })
  local short = v100.text.WordPiece(VOCAB, { max_chars = 3 })
  T.eq(short:tokenize('the cats'), { 'the', '[UNK]' })
  -- Characters, not bytes, count: three accented letters are three characters.
  local cased = v100.text.WordPiece(VOCAB, { lower = false, max_chars = 3 })
  T.eq(cased:tokenize('éèé'), { 'é', '##è', '##é' })
  T.eq(cased:tokenize('éèéé'), { '[UNK]' })
end)

T.test('special tokens in the text stay whole (case-sensitive); lower-cased ones do not', function()
  T.eq(tok:tokenize('a [MASK] b'), { 'a', '[MASK]', 'b' })
  T.eq(tok:tokenize('x[SEP]y'), { 'x', '[SEP]', 'y' })
  local t = tok:tokenize('[mask]')
  T.ok(#t > 1 and t[1] ~= '[MASK]')
end)

T.test('invalid UTF-8 is an error naming the byte; no tokens are guessed', function()
  T.raises(function() tok:tokenize('ok \xff bad') end, 'not valid UTF-8 (byte 3, 0xff)')
  T.raises(function() tok:tokenize('\xc3') end, 'not valid UTF-8 (byte 0')
  T.raises(function() tok:encode('fine', 'bad \xed\xa0\x80') end, 'not valid UTF-8 (byte 4')
  T.raises(function() tok:tokenize('\xc0\xaf') end, 'not valid UTF-8') -- an overlong '/'
end)

T.test('errors: missing vocab, vocab without [UNK], bad options and ids', function()
  local dir = T.tmpdir()
  T.raises(function() v100.text.WordPiece(dir .. '/none.txt') end, { 'cannot open the vocab', 'none.txt' })
  T.write_file(dir .. '/v.txt', '[PAD]\nhello\n##s\n')
  T.raises(function() v100.text.WordPiece(dir .. '/v.txt') end, 'has no [UNK] token')
  T.write_file(dir .. '/empty.txt', '')
  T.raises(function() v100.text.WordPiece(dir .. '/empty.txt') end, 'is empty')
  T.raises(function() v100.text.WordPiece(VOCAB, { lowr = true }) end, "unknown option 'lowr'")
  T.raises(function() v100.text.WordPiece(VOCAB, { lower = 1 }) end, 'option lower must be a boolean')
  T.raises(function() v100.text.WordPiece(VOCAB, { max_chars = 0 }) end, 'max_chars 0')
  T.raises(function() tok:encode('a', { padding = 'longest' }) end, "padding must be 'max_length' or false")
  T.raises(function() tok:encode('a', { padding = 'max_length' }) end, 'needs a max_length')
  T.raises(function() tok:encode('a', 'b', { max_length = 2 }) end, 'leaves no room for the 3 special tokens')
  T.raises(function() tok:encode('a', { max_length = -1 }) end, 'max_length -1')
  T.raises(function() tok:encode('a', { as = 'list' }) end, "as must be 'tensor' or 'table'")
  T.raises(function() tok:encode('a', 5) end, 'must be the pair\'s text or the options table')
  T.raises(function() tok:decode({ 1, 3000 }) end, 'id 3000 (at 1) is not in the vocab of 3000 tokens')
  T.raises(function() tok:decode({ 1.5 }) end, 'ids[1] must be an integer')
  T.raises(function() tok:decode('1 2') end, 'ids must be a table')
  -- A vocab with [UNK] only: every word is [UNK]; encode's special tokens are then an error.
  T.write_file(dir .. '/unk.txt', '[UNK]\r\nhello\r\n')
  local u = v100.text.WordPiece(dir .. '/unk.txt')
  T.eq(u.vocab_size, 2)
  T.eq(u:token_to_id('hello'), 1) -- "\r\n" line ends are stripped
  T.eq(u:tokenize('Hello world'), { 'hello', '[UNK]' })
  T.raises(function() u:encode('hello') end, 'add_special needs [CLS]')
  T.eq(u:encode('hello', { add_special = false, as = 'table' }).ids, { 1 })
  T.raises(function() u:encode('hello', { add_special = false, max_length = 3, padding = 'max_length' }) end,
    'padding needs [PAD]')
  os.execute("rm -rf '" .. dir .. "'")
end)

T.test('a closed tokenizer raises instead of crashing', function()
  local t = v100.text.WordPiece(VOCAB)
  do
    local c <close> = t
  end
  T.raises(function() t:tokenize('x') end, 'was closed')
  T.eq(tostring(t), 'WordPiece(closed)')
end)

T.run()
