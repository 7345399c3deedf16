-- tests/lua/test_fault_files.lua: damaged files in every reader. Each kind of file the runtime reads
-- (a checkpoint, safetensors plain and gzip, a pretraining shard, IDX plain and gzip, vocab.txt, a
-- JPEG) is written valid, then cut at many lengths and bit-flipped at many positions. Every
-- damaged copy is either refused with an error that names the file, or (where the format has no
-- checksum over the bytes that changed: safetensors and IDX data, JPEG entropy-coded data, and the
-- bits of a gzip file its CRC32 does not cover, which then change nothing read)
-- loaded as a well-formed value. Shards carry CRC32C checksums: every flip is refused. The fuzz
-- targets (tests/fuzz) look for crashes; this test pins the messages.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local ckpt = require 'v100.checkpoint'
local bd = require 'v100.bert_data'
local data = require 'v100.data'

local dir = T.tmpdir()
local function sh(cmd) assert(os.execute(cmd), cmd) end

-- cut points: the start, the first bytes (headers), then a spread over the file
local function cuts(n)
  local out, seen = {}, {}
  local function add(k) if k >= 0 and k < n and not seen[k] then seen[k] = true out[#out + 1] = k end end
  for k = 0, 16 do add(k) end
  for i = 1, 24 do add(math.floor(n * i / 25)) end
  add(n - 1)
  return out
end
local function flips(n)
  local out = {}
  for i = 0, 47 do out[#out + 1] = math.floor(i * (n - 1) / 47) end
  return out
end

-- try(load, path) -> 'ok' or 'refused'; a refusal must name the file (its base name at least)
local function try(load, path, what)
  local ok, err = pcall(load, path)
  if ok then return 'ok', err end
  local base = path:match('[^/]+$')
  T.ok(type(err) == 'string' and err:find(base, 1, true), string.format('%s: the error names %s: %s', what, base, tostring(err)))
  return 'refused'
end

-- each damaged copy of `bytes` written to `name` and read with `load`; returns counts
local function damage(name, bytes, load, opts)
  opts = opts or {}
  local path = dir .. '/' .. name
  local n = #bytes
  local counts = { cut_refused = 0, cut_ok = 0, flip_refused = 0, flip_ok = 0 }
  for _, k in ipairs(cuts(n)) do
    T.write_file(path, bytes:sub(1, k))
    local r = try(load, path, string.format('%s cut at %d of %d bytes', name, k, n))
    counts['cut_' .. r] = counts['cut_' .. r] + 1
  end
  for _, k in ipairs(flips(n)) do
    local b = bytes:byte(k + 1) ~ (1 << (k % 8))
    T.write_file(path, bytes:sub(1, k) .. string.char(b) .. bytes:sub(k + 2))
    local what = string.format('%s with bit %d of byte %d flipped', name, k % 8, k)
    local r, value = try(load, path, what)
    counts['flip_' .. r] = counts['flip_' .. r] + 1
    if opts.every_flip_refused then T.eq(r, 'refused', what .. ': not noticed') end
    -- gzip's CRC32 covers the data: a flip it lets through (the header's MTIME/XFL/OS bytes, the
    -- padding bits after the last deflate block) changed nothing that was read
    if opts.same_when_ok and r == 'ok' then opts.same_when_ok(value, what) end
  end
  if not opts.short_ok then T.eq(counts.cut_ok, 0, name .. ': every cut copy is refused') end
  os.remove(path)
  return counts
end

T.test('safetensors, plain and gzip: cut copies are refused naming the file; flips are refused or load (gzip: unchanged)', function()
  local p = dir .. '/good.safetensors'
  v100.save_safetensors(p, { w = v100.randn{ 16, 16 }, b = v100.zeros{ 16 }, i = v100.ones({ 5 }, { dtype = 'i64' }) },
    { format = 'pt' })
  local bytes = T.read_file(p)
  local c = damage('m.safetensors', bytes, function(path) return v100.load_safetensors(path) end)
  T.ok(c.flip_refused > 0, 'flips in the header are refused')
  sh(string.format("gzip -9nc '%s' > '%s.gz'", p, p))
  local gz = T.read_file(p .. '.gz')
  -- gzip has a CRC32 of the data and its length: a flip is refused, or changed nothing read
  local orig = v100.load_safetensors(p)
  local c2 = damage('m.safetensors.gz', gz, function(path) return v100.load_safetensors(path) end, { same_when_ok = function(sd, what)
    for k, t in pairs(orig) do T.alleq(sd[k], t, what .. ': tensor ' .. k .. ' as written') end
  end })
  T.ok(c2.flip_refused >= 40, 'nearly every flip of the compressed stream is refused: ' .. c2.flip_refused .. ' of 48')
end)

T.test('a checkpoint whose model.safetensors is cut or flipped: refused naming the file, or loads', function()
  local m = nn.Linear(8, 8)
  local cp = ckpt.save(dir .. '/ck', { model = m, step = 1 })
  local model_file = cp .. '/model.safetensors'
  local bytes = T.read_file(model_file)
  local function load(path)
    -- the damaged copy stands in the checkpoint itself
    sh(string.format("cp '%s' '%s'", path, model_file))
    local c = ckpt.load(cp)
    ckpt.restore(c, { model = nn.Linear(8, 8) })
  end
  damage('model.safetensors', bytes, load)
  T.write_file(model_file, bytes)
  ckpt.restore(ckpt.load(cp), { model = nn.Linear(8, 8) }) -- the original loads again
end)

T.test('a pretraining shard: every cut and every flipped bit is refused (CRC32C), naming the file', function()
  local p = dir .. '/good.shard'
  do
    local w <close> = v100.text.ShardWriter(p, { seq_len = 16, max_predictions = 3, vocab_size = 100, vocab_crc = 7 })
    for i = 1, 5 do w:add{ ids = { 2, 10 + i, 11, 3, 12, 13, 3 }, seg_a = 4, positions = { 1, 5 }, masked_ids = { 50, 60 }, nsp = i % 2 } end
    w:finish()
  end
  damage('x.shard', T.read_file(p), function(path)
    local ds <close> = bd.open(path)
    return ds:batch({ 0 })
  end, { every_flip_refused = true })
end)

T.test('IDX, plain and gzip: cut copies refused naming the file; gzip flips refused or harmless', function()
  local p = dir .. '/good.idx'
  T.write_file(p, '\0\0\8\3' .. string.pack('>I4>I4>I4', 3, 4, 4) .. string.rep('\7', 48))
  T.eq(v100.io.read_idx(p).shape, { 3, 4, 4 })
  damage('x-idx3-ubyte', T.read_file(p), function(path) return v100.io.read_idx(path) end)
  sh(string.format("gzip -9nc '%s' > '%s.gz'", p, p))
  local orig = v100.io.read_idx(p)
  local c = damage('x-idx3-ubyte.gz', T.read_file(p .. '.gz'), function(path) return v100.io.read_idx(path) end,
    { same_when_ok = function(t, what) T.alleq(t, orig, what .. ': the data as written') end })
  T.ok(c.flip_refused >= 30, 'most flips of the compressed stream are refused: ' .. c.flip_refused .. ' of 48')
end)

T.test('vocab.txt: cut or flipped copies load or are refused naming the file', function()
  local vocab = table.concat({ '[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', 'cat', '##s' }, '\n') .. '\n'
  -- a cut copy may still be a vocabulary (one that lost its last tokens): load or refuse
  local c = damage('vocab.txt', vocab, function(path) return v100.text.WordPiece(path) end, { short_ok = true })
  T.ok(c.cut_refused > 0, 'a vocabulary cut before [UNK] is refused')
end)

T.test('a JPEG: cut copies are refused naming the file; flips decode or are refused', function()
  local p = dir .. '/good.jpg'
  data.encode_jpeg((v100.rand{ 16, 16, 3 } * 255):to('u8'), p, { quality = 90 })
  local c = damage('x.jpg', T.read_file(p), function(path) return data.decode_jpeg(path) end, { short_ok = true })
  T.ok(c.cut_refused >= 17, 'the cuts inside the headers are refused: ' .. c.cut_refused)
end)

sh("rm -rf '" .. dir .. "'")
T.run()
