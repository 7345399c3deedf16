-- tools/make_fuzz_seeds.lua: writes the seed corpora of the fuzz targets (tests/fuzz/corpus/<target>/)
-- with the runtime's own writers: small valid files of every kind each reader takes, which the
-- fuzzer then mutates. `v100lua tools/make_fuzz_seeds.lua [DIR]` (default tests/fuzz/corpus).
local v100 = require 'v100'
local out = arg[1] or 'tests/fuzz/corpus'
local function dir(t)
  local d = out .. '/' .. t
  v100.io.makedirs(d)
  return d
end
local function write(path, bytes) require('v100.core')._ckpt.write_atomic(path, bytes) end
local function gzip(src, dst)
  assert(os.execute(string.format("gzip -9nc '%s' > '%s'", src, dst)))
end

-- safetensors: several dtypes and shapes, metadata, an empty tensor, plain and gzip
local st = dir('fuzz_safetensors')
v100.save_safetensors(st .. '/small.safetensors', { w = v100.randn{ 3, 4 }, b = v100.zeros{ 4 } })
v100.save_safetensors(st .. '/dtypes.safetensors', { a = v100.ones({ 2, 2 }, { dtype = 'f16' }),
  b = v100.ones({ 5 }, { dtype = 'bf16' }), c = v100.ones({ 3 }, { dtype = 'i64' }), d = v100.ones({ 2 }, { dtype = 'u8' }),
  e = v100.ones({ 0, 3 }), f = v100.ones({ 1 }, { dtype = 'f64' }), g = v100.ones({ 2 }, { dtype = 'bool' }) },
  { format = 'pt', note = 'seed' })
gzip(st .. '/small.safetensors', st .. '/small.safetensors.gz')

-- IDX: ubyte images and labels, an int32 and a float array, plain and gzip
local idx = dir('fuzz_idx')
local function be32(n) return string.pack('>I4', n) end
write(idx .. '/images.idx', '\0\0\8\3' .. be32(2) .. be32(3) .. be32(3) .. string.rep('\1\2\3', 6))
write(idx .. '/labels.idx', '\0\0\8\1' .. be32(4) .. '\0\1\2\9')
write(idx .. '/int32.idx', '\0\0\12\2' .. be32(2) .. be32(2) .. string.pack('>i4>i4>i4>i4', 1, -2, 3, 4))
write(idx .. '/float.idx', '\0\0\13\1' .. be32(3) .. string.pack('>f>f>f', 1.5, -2, 0))
gzip(idx .. '/images.idx', idx .. '/images.idx.gz')

-- shards: a small valid shard with masked positions and both NSP labels
local sh = dir('fuzz_shard')
do
  local w <close> = v100.text.ShardWriter(sh .. '/a.shard', { seq_len = 16, max_predictions = 3, vocab_size = 100, vocab_crc = 7 })
  w:add{ ids = { 2, 10, 11, 3, 12, 13, 14, 3 }, seg_a = 4, positions = { 1, 5 }, masked_ids = { 50, 60 }, nsp = 1 }
  w:add{ ids = { 2, 20, 3, 21, 3 }, seg_a = 3, positions = {}, masked_ids = {}, nsp = 0 }
  w:add{ ids = { 2, 30, 31, 32, 33, 34, 3, 40, 41, 3 }, seg_a = 7, positions = { 2, 3, 8 }, masked_ids = { 70, 71, 72 }, nsp = 1 }
  w:finish()
end

-- wordpiece: a vocab, 0xFF, then text (see tests/fuzz/fuzz_wordpiece.c); and text alone
local wp = dir('fuzz_wordpiece')
local vocab = table.concat({ '[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'the', 'cat', '##s', 'sat', 'on',
  'mat', '.', ',', 'caf', '##e', '\xe4\xb8\xad', '\xe6\x96\x87', 'un', '##aff', '##able' }, '\n') .. '\n'
write(wp .. '/pair.txt', vocab .. '\xff' .. 'The cats sat on the mat. Unaffable caf\xc3\xa9, \xe4\xb8\xad\xe6\x96\x87!')
write(wp .. '/controls.txt', vocab .. '\xff' .. '\x07Tab\there\r\nzero\0width\xe2\x80\x8b and \xc3\x85ngstr\xc3\xb6m')
write(wp .. '/text_only.txt', 'the cat sat on a mat, ok?')
write(wp .. '/long_word.txt', vocab .. '\xff' .. string.rep('a', 150) .. ' cat')

-- jpeg: gray and RGB, small and odd-sized
local jp = dir('fuzz_jpeg')
v100._data.encode((v100.rand{ 8, 8, 1 } * 255):to('u8'), jp .. '/gray8.jpg', 90)
v100._data.encode((v100.rand{ 13, 7, 3 } * 255):to('u8'), jp .. '/rgb13x7.jpg', 75)
v100._data.encode((v100.rand{ 32, 32, 3 } * 255):to('u8'), jp .. '/rgb32.jpg', 50)
print('seeds written under ' .. out)
