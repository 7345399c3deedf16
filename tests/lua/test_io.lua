-- tests/lua/test_io.lua: file formats and saves through the bindings: gzip trailers, junk and
-- concatenated members (safetensors and IDX), names with NUL bytes or invalid UTF-8, and saves
-- that keep modes and symlinks and clean up after a killed process. Uses gzip(1), chmod(1),
-- stat(1) and ln(1), which every Debian system has.
local v100 = require 'v100'
local T = require 'testlib'

local dir = T.tmpdir()
local function path(name) return dir .. '/' .. name end
local function sh(cmd) assert(os.execute(cmd), cmd) end
local read, write = T.read_file, T.write_file
local function exists(p)
  local f = io.open(p, 'rb')
  if f then f:close() end
  return f ~= nil
end
local function mode_of(p)
  local f = assert(io.popen("stat -c %a '" .. p .. "'"))
  local m = f:read('l')
  f:close()
  return m
end
local function temps()
  local f = assert(io.popen("ls -A '" .. dir .. "'"))
  local n = 0
  for line in f:lines() do
    if line:find('.v100tmp-', 1, true) then n = n + 1 end
  end
  f:close()
  return n
end
local function count(hay, needle)
  local n, i = 0, 1
  while true do
    local j = hay:find(needle, i, true)
    if not j then return n end
    n, i = n + 1, j + 1
  end
end
-- A safetensors file with this header and data, written byte for byte.
local function raw_st(p, header, data)
  write(p, string.pack('<I8', #header) .. header .. (data or ''))
end

T.test('gzip checkpoints: a cut trailer, junk after the stream and corrupt CRCs are errors', function()
  local p = path('ck.safetensors.gz')
  v100.save_safetensors(p, { w = v100.tensor({ 1.5, -2, 3.25, 4 }) })
  T.eq(v100.load_safetensors(p).w:totable()[3], 3.25)
  local bytes = read(p)
  for cut = 1, 8 do
    local q = path('cut' .. cut .. '.safetensors.gz')
    write(q, bytes:sub(1, #bytes - cut))
    local msg = T.raises(function() v100.load_safetensors(q) end, { q, 'truncated gzip data', 'CRC32/ISIZE trailer' })
    T.eq(count(msg, q), 1, 'the path appears once')
  end
  local q = path('junk.safetensors.gz')
  write(q, bytes .. 'garbage')
  T.raises(function() v100.load_safetensors(q) end, { q, '7 bytes of junk after the gzip data' })
  -- a CRC32 byte flipped
  local i = #bytes - 7
  write(q, bytes:sub(1, i - 1) .. string.char(bytes:byte(i) ~ 1) .. bytes:sub(i + 1))
  T.raises(function() v100.load_safetensors(q) end, { q, 'CRC32 mismatch' })
end)

T.test('IDX gzip files: trailer, junk and concatenated members (gzip -c a b)', function()
  local idx = path('labels.idx')
  local a = string.pack('>BBBBI4', 0, 0, 0x08, 1, 6) .. '\1\2\3'
  local b = '\4\5\6'
  write(idx .. '.a', a)
  write(idx .. '.b', b)
  sh("gzip -c '" .. idx .. ".a' '" .. idx .. ".b' > '" .. idx .. ".gz'")
  T.alleq(v100.io.read_idx(idx .. '.gz'), { 1, 2, 3, 4, 5, 6 })
  local bytes = read(idx .. '.gz')
  local q = path('cut.idx.gz')
  write(q, bytes:sub(1, #bytes - 3))
  local msg = T.raises(function() v100.io.read_idx(q) end, { q, 'truncated gzip data' })
  T.eq(count(msg, q), 1, 'the path appears once')
  write(q, bytes .. '\0')
  T.raises(function() v100.io.read_idx(q) end, { q, '1 byte of junk after the gzip data' })
  -- a gzip IDX whose header announces 15 GB
  write(idx, string.pack('>BBBBI4I4I4', 0, 0, 0x08, 3, 15000, 1000, 1000) .. 'x')
  sh("gzip -f '" .. idx .. "'")
  T.raises(function() v100.io.read_idx(idx .. '.gz') end, { idx .. '.gz', 'inflates to at most' })
end)

T.test('names with a NUL byte or invalid UTF-8 are refused on load and on save', function()
  local p = path('nul.safetensors')
  raw_st(p, '{"a\\u0000evil":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', '\1')
  T.raises(function() v100.load_safetensors(p) end, { p, 'tensor name "a\\u0000evil"', 'NUL character' })
  raw_st(p, '{"a\xffb":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', '\1')
  T.raises(function() v100.load_safetensors(p) end, { p, 'tensor name "a\\xFFb"', 'not valid UTF-8' })
  local out = path('names_out.safetensors')
  local t = v100.tensor({ 1, 2 })
  T.raises(function() v100.save_safetensors(out, { ['a\0evil'] = t }) end,
    { out, 'tensor name "a\\0evil" contains a NUL byte' })
  T.raises(function() v100.save_safetensors(out, { a = t }, { ['k\0'] = 'v' }) end, { out, 'metadata key' })
  T.raises(function() v100.save_safetensors(out, { a = t }, { k = 'v\0w' }) end, { out, 'metadata value' })
  T.raises(function() v100.save_safetensors(out, { ['a\xc3'] = t }) end, { out, 'not valid UTF-8' })
  T.ok(not exists(out), 'nothing written')
  T.raises(function() v100.save_safetensors(out .. '\0x', { a = t }) end, 'path')
  T.raises(function() v100.load_safetensors(out .. '\0x') end, 'contains a NUL byte')
  T.raises(function() v100.io.read_idx(out .. '\0x') end, 'contains a NUL byte')
  -- valid names round-trip, non-ASCII included
  v100.save_safetensors(out, { ['caf\xc3\xa9'] = t }, { note = 'gr\xc3\xbc\xc3\x9fe' })
  local sd, meta = v100.load_safetensors(out)
  T.alleq(sd['caf\xc3\xa9'], { 1, 2 })
  T.eq(meta.note, 'gr\xc3\xbc\xc3\x9fe')
end)

T.test('saves keep the mode, follow symlinks and remove temporaries of dead processes', function()
  local t = v100.tensor({ 1, 2, 3 })
  local p = path('model.safetensors')
  v100.save_safetensors(p, { w = t })
  sh("chmod 600 '" .. p .. "'")
  v100.save_safetensors(p, { w = t })
  T.eq(mode_of(p), '600')
  -- a symlink stays; its target is replaced
  sh("ln -s model.safetensors '" .. path('latest.safetensors') .. "'")
  v100.save_safetensors(path('latest.safetensors'), { v = t })
  T.ok(v100.load_safetensors(p).v ~= nil, 'the target has the new contents')
  local f = assert(io.popen("stat -c %F '" .. path('latest.safetensors') .. "'"))
  T.eq(f:read('l'), 'symbolic link')
  f:close()
  -- a temporary file left by a process that is gone (kill -9 mid-save) is removed by the next save
  local pf = assert(io.popen('sh -c "echo \\$\\$"'))
  local dead = pf:read('l')
  pf:close()
  local stale = path('.model.safetensors.v100tmp-' .. dead .. '-' .. dead)
  write(stale, 'half a checkpoint')
  v100.save_safetensors(p, { w = t })
  T.ok(not exists(stale), 'stale temporary removed')
  T.eq(temps(), 0)
  T.eq(mode_of(p), '600')
end)

os.execute("rm -rf '" .. dir .. "'")
T.test('v100.io.read_file, exists, join', function()
  local dir = T.tmpdir()
  local p = v100.io.join(dir, 'a.bin')
  T.eq(p, dir .. '/a.bin')
  T.eq(v100.io.join(dir .. '/', 'a.bin'), p, 'one slash')
  T.eq(v100.io.exists(p), false)
  local s, err = v100.io.read_file(p)
  T.eq(s, nil)
  T.ok(err and err:find('a.bin', 1, true), 'the reason names the file: ' .. tostring(err))
  T.write_file(p, 'x\0y')
  T.eq(v100.io.exists(p), true)
  T.eq(v100.io.read_file(p), 'x\0y', 'bytes, NUL included')
  os.remove(p)
end)

T.run()
