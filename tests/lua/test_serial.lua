-- tests/lua/test_serial.lua: v100.save / v100.load (scripts/v100/serial.lua): nested values round
-- trip with their types, shared tables and cycles, shared tensors and views of one storage,
-- requires_grad and dtypes; refusals naming the value's path; options checked; hostile files
-- refused naming the file and the fault; code in a file stays data; an interrupted save leaves
-- the old file; checkpoint state with tensors.
local v100 = require 'v100'
local core = require 'v100.core'
local nn = require 'v100.nn'
local ckpt = require 'v100.checkpoint'
local T = require 'testlib'

local dir = T.tmpdir()
local n = 0
local function fresh(name)
  n = n + 1
  return string.format('%s/%s%d.safetensors', dir, name or 'v', n)
end
local function round(v, opts)
  local p = fresh()
  v100.save(p, v)
  return v100.load(p, opts), p
end
local storage = function(t) return (core._serial.storage(t)) end
local function exists(p)
  local f = io.open(p, 'rb')
  if f then f:close() end
  return f ~= nil
end
local function listdir(d)
  local out = {}
  for name in io.popen("ls -A '" .. d .. "'"):lines() do out[#out + 1] = name end
  return out
end

T.test('numbers keep their kind: integers, floats, inf, -inf, NaN, -0.0', function()
  local v = { i = 3, big = math.maxinteger, small = math.mininteger, f = 3.0, tenth = 0.1, pinf = math.huge,
    ninf = -math.huge, nan = 0 / 0, nz = -0.0, tiny = 5e-324 }
  local w = round(v)
  for _, k in ipairs { 'i', 'big', 'small' } do T.eq(math.type(w[k]), 'integer', k) T.eq(w[k], v[k], k) end
  for _, k in ipairs { 'f', 'tenth', 'pinf', 'ninf', 'tiny' } do T.eq(math.type(w[k]), 'float', k) T.eq(w[k], v[k], k) end
  T.ok(w.nan ~= w.nan and math.type(w.nan) == 'float', 'NaN')
  T.eq(1 / w.nz, -math.huge, '-0.0 keeps its sign')
  -- a bare number, string, boolean or nil as the whole value
  T.eq(math.type(round(7)), 'integer')
  T.eq(math.type(round(7.0)), 'float')
  T.eq(round('x'), 'x')
  T.eq(round(false), false)
  T.eq(round(nil), nil)
end)

T.test('strings of any bytes, booleans, keys of every kind', function()
  local bytes = '\0\1\255\254 invalid \xC3\x28 utf8 \xED\xA0\x80'
  local v = { s = 'héllo ✓', b = bytes, empty = '', yes = true, no = false,
    [1] = 'one', [2] = 'two', [10] = 'ten', [-3] = 'neg', [1.5] = 'float key', [math.huge] = 'inf key',
    [true] = 'T', [false] = 'F', [bytes] = 'bytes key', [''] = 'empty key', nested = { {}, { {} } } }
  local w = round(v)
  T.eq(w.s, v.s)
  T.eq(w.b, bytes)
  T.eq(w.empty, '')
  T.eq(w.yes, true)
  T.eq(w.no, false)
  T.eq(w[1], 'one') T.eq(w[2], 'two') T.eq(w[10], 'ten') T.eq(w[-3], 'neg')
  T.eq(w[1.5], 'float key')
  T.eq(w[math.huge], 'inf key')
  T.eq(w[true], 'T') T.eq(w[false], 'F')
  T.eq(w[bytes], 'bytes key')
  T.eq(w[''], 'empty key')
  T.ok(T.deep_eq(w.nested, { {}, { {} } }), 'empty tables')
  local count = 0
  for _ in pairs(w) do count = count + 1 end
  local want = 0
  for _ in pairs(v) do want = want + 1 end
  T.eq(count, want, 'no key more or less')
  T.eq(getmetatable(w), nil, 'plain tables')
end)

T.test('the same file for the same value (keys in a fixed order)', function()
  local v = { z = 1, a = 2, [3] = 'x', [1.5] = true, [true] = 0, sub = { q = 1, p = 2 } }
  local p1, p2 = fresh(), fresh()
  v100.save(p1, v)
  v100.save(p2, v)
  T.eq(T.read_file(p1), T.read_file(p2))
end)

T.test('shared tables and cycles load as one table', function()
  local shared = { x = 1 }
  local v = { a = shared, b = shared, list = { shared, shared } }
  v.self = v
  v.list.back = v
  local w = round(v)
  T.ok(w.a == w.b and w.list[1] == w.a and w.list[2] == w.a, 'one shared table')
  T.ok(w.self == w, 'a cycle to itself')
  T.ok(w.list.back == w, 'a cycle through a child')
  T.eq(w.a.x, 1)
  -- a table as its own key's value and deep nesting (a 20000-long linked list: no recursion limit)
  local head = { i = 0 }
  local node = head
  for i = 1, 20000 do node.next = { i = i } node = node.next end
  local h = round(head)
  local k = 0
  while h.next do h = h.next k = k + 1 end
  T.eq(k, 20000)
  T.eq(h.i, 20000)
end)

T.test('tensors: values, the same tensor twice is one tensor, views share one storage', function()
  local x = v100.randn { 4, 6 }
  local v = { x = x, again = x, nar = x:narrow(1, 2, 2), tr = x:t(), sel = x:select(2, 3), ex = x:select(1, 1):view { 1, 6 }:expand { 3, 6 },
    other = v100.randn { 2 } }
  local w = round(v)
  T.ok(w.x == w.again, 'the same tensor object')
  T.tensor_eq(w.x, x)
  T.tensor_eq(w.nar, v.nar)
  T.tensor_eq(w.tr, v.tr)
  T.tensor_eq(w.sel, v.sel)
  T.tensor_eq(w.ex, v.ex)
  for _, k in ipairs { 'nar', 'tr', 'sel', 'ex' } do
    T.eq(w[k]:size(), v[k]:size(), k .. ' size')
    T.eq(w[k]:stride(), v[k]:stride(), k .. ' stride')
    T.eq(w[k]:storage_offset(), v[k]:storage_offset(), k .. ' offset')
    T.eq(storage(w[k]), storage(w.x), k .. ' shares the storage of x')
  end
  T.ok(storage(w.other) ~= storage(w.x), 'another tensor has its own storage')
  -- a write through one view shows in the others, as before the save
  w.x:fill_(2)
  T.eq(w.nar:sum():item(), 24.0)
  T.eq(w.tr:sum():item(), 48.0)
  T.eq(w.ex:sum():item(), 36.0)
  -- the storage is stored once: a file with x and 5 views of it holds 24 + 2 floats of data
  local _, p = round(v)
  local files = v100.load_safetensors(p)
  local names = {}
  for name in pairs(files) do names[#names + 1] = name end
  table.sort(names)
  T.eq(names, { 'storage.1', 'storage.2' })
  -- a view of part of a tensor alone stores its whole storage and its offset
  local w2 = round({ v = x:narrow(2, 3, 2) })
  T.eq(w2.v:storage_offset(), 2)
  T.tensor_eq(w2.v, x:narrow(2, 3, 2))
end)

T.test('requires_grad and dtypes are kept (f16, bf16, f64, i64, i32, u8, bool, 0-dim, empty)', function()
  local w0 = v100.randn { 3 }
  w0.requires_grad = true
  local v = { w = w0, h = v100.randn { 5 }:half(), b = v100.randn { 5 }:bfloat16(), d = v100.randn { 2 }:double(),
    l = v100.tensor({ 1, -2, (1 << 62) + 5 }, { dtype = 'i64' }), i = v100.tensor({ 7, 8 }, { dtype = 'i32' }),
    u = v100.tensor({ 0, 255 }, { dtype = 'u8' }), bo = v100.tensor({ 1, 0, 1 }, { dtype = 'bool' }),
    s = v100.tensor(3.5), e = v100.zeros { 0, 4 } }
  local w = round(v)
  T.eq(w.w.requires_grad, true)
  T.eq(w.h.requires_grad, false)
  for k, t in pairs(v) do
    T.eq(w[k].dtype, t.dtype, k .. ' dtype')
    T.eq(w[k]:size(), t:size(), k .. ' size')
    T.eq(w[k].device, 'cpu')
    T.ok(T.deep_eq(w[k]:totable(), t:totable()), k .. ' values')
  end
  T.eq(w.l:totable()[3], (1 << 62) + 5, 'i64 exact')
  -- the loaded tensor is a leaf that trains
  local loss = (w.w * 2):sum()
  loss:backward()
  T.eq(w.w.grad:totable(), { 2.0, 2.0, 2.0 })
end)

T.test('refusals name the path of the value, and nothing is written', function()
  local p = fresh()
  local function refused(v, pattern)
    T.raises(function() v100.save(p, v) end, pattern)
    T.ok(not exists(p), 'no file after a refusal')
  end
  refused({ layers = { 1, 2, { fn = print } } }, 'save: value.layers[3].fn is a function')
  refused(print, 'save: value is a function')
  refused({ co = coroutine.create(function() end) }, 'save: value.co is a thread')
  refused({ f = io.stdout }, 'save: value.f is a userdata other than a tensor')
  refused({ ['a b'] = { setmetatable({}, {}) } }, { 'save: value["a b"][1] is a table with a metatable' })
  refused({ model = nn.Linear(2, 2) }, { 'value.model is an nn module', 'state_dict()', 'checkpoint.save' })
  refused({ [v100.zeros { 1 }] = 1 }, 'save: value has a tensor key')
  refused({ x = { [{}] = 1 } }, 'save: value.x has a table key')
  refused({ [3] = { [1.5] = { [true] = print } } }, 'save: value[3][1.5][true] is a function')
  local t = v100.zeros { 2 }
  t:free()
  refused({ t = t }, 'save: value.t is a tensor that cannot be saved')
  -- a refused save leaves an existing file as it was
  v100.save(p, { ok = 1 })
  local before = T.read_file(p)
  T.raises(function() v100.save(p, { bad = print }) end, 'value.bad is a function')
  T.eq(T.read_file(p), before)
end)

T.test('options: unknown keys refused, listing the valid ones', function()
  local p = fresh()
  v100.save(p, { 1 })
  T.raises(function() v100.load(p, { devise = 'cpu' }) end, "load: unknown option 'devise' (device)")
  T.raises(function() v100.load(p, { device = 1 }) end, 'load: device must be a string')
  T.raises(function() v100.load(p, 'cpu') end, 'load: expected an options table, got string')
  T.raises(function() v100.save(p, { 1 }, { compress = true }) end, "save: unknown option 'compress' (save takes no options)")
  T.raises(function() v100.save(42, {}) end, 'save: path must be a non-empty string')
  T.raises(function() v100.load(nil) end, 'load: path must be a string')
  T.eq(v100.load(p, { device = 'cpu' }), { 1 })
end)

-- A file with the given metadata description (a Lua table encoded as JSON, or raw text) and tensors.
local function crafted(desc, tensors, extra_meta)
  local p = fresh('bad')
  local meta = extra_meta or {}
  if desc ~= nil then meta['v100.serial'] = type(desc) == 'string' and desc or core.io.json_encode(desc) end
  v100.save_safetensors(p, tensors or {}, meta)
  return p
end
local function good_desc()
  return { format = 'v100.serial', version = 1, root = { 'table', 1 },
    tables = { { { { 'str', 'x' }, { 'tensor', 1 } }, { { 'str', 'n' }, { 'int', 5 } } } },
    tensors = { { storage = 1, dtype = 'f32', size = { 2, 2 }, stride = { 2, 1 }, offset = 0 } },
    storages = { { dtype = 'f32', numel = 4 } } }
end
local function good_tensors() return { ['storage.1'] = v100.arange(4):float() } end

T.test('hostile files: every fault named with the file', function()
  -- the crafted good file loads
  local w = v100.load(crafted(good_desc(), good_tensors()))
  T.eq(w.n, 5)
  T.eq(w.x:totable(), { { 0.0, 1.0 }, { 2.0, 3.0 } })
  local cases = {
    { function(d) d.format = 'pickle' end, 'format is pickle, expected v100.serial' },
    { function(d) d.version = 2 end, 'format version 2 is newer' },
    { function(d) d.version = 'one' end, 'version must be a whole number' },
    { function(d) d.root = nil end, 'has no root' },
    { function(d) d.root = { 'lua', 'return 1' } end, 'root: unknown tag "lua"' },
    { function(d) d.root = { 'table', 2 } end, 'root: table 2 is not one of the 1 tables' },
    { function(d) d.root = { 'table', 0 } end, 'table 0 is not one of the 1 tables' },
    { function(d) d.root = { 'table', 1.5 } end, 'table 1.5 is not one of' },
    { function(d) d.root = { 'int', 1, 2 } end, 'a "int" value has 3 fields' },
    { function(d) d.root = { 'int', 1.5 } end, '"int" holds 1.5' },
    { function(d) d.root = { 'bytes', 'abc' } end, '"bytes" must hold an even count of hex digits' },
    { function(d) d.root = { 'bytes', 'zz' } end, '"bytes" must hold an even count of hex digits' },
    { function(d) d.root = { 'nil', 1 } end, 'a "nil" value has 2 fields' },
    { function(d) d.root = 'x' end, 'root is not a tagged value' },
    { function(d) d.tables[1][1][2] = { 'tensor', 9 } end, 'tables[1][1] value: tensor 9 is not one of the 1 tensors' },
    { function(d) d.tables[1][1][1] = { 'table', 1 } end, 'tables[1][1] key: a key must be a bool, int, float, str or bytes value, got "table"' },
    { function(d) d.tables[1][1][1] = { 'tensor', 1 } end, 'a key must be a bool, int, float, str or bytes value, got "tensor"' },
    { function(d) d.tables[1][1][1] = { 'float', 'nan' } end, 'a NaN key' },
    { function(d) d.tables[1][2][1] = { 'str', 'x' } end, 'tables[1][2]: key x appears twice' },
    { function(d) d.tables[1][2] = { { 'str', 'y' } } end, 'tables[1][2] must be a [key, value] pair' },
    { function(d) d.tables[1][2][2] = { 'nil' } end, 'nil is only the whole value' },
    { function(d) d.tables = { x = 1 } end, 'field "tables" must be a list' },
    { function(d) d.tensors[1].storage = 2 end, 'tensors[1]: storage 2 is not one of the 1 storages' },
    { function(d) d.tensors[1].dtype = 'f16' end, "tensors[1]: dtype f16 differs from its storage's f32" },
    { function(d) d.tensors[1].size = { 3, 2 } end, 'tensors[1]: as_strided: shape 3x2 with offset 0 reaches element 5, beyond the storage of 4 elements' },
    { function(d) d.tensors[1].offset = 1 end, 'beyond the storage of 4 elements' },
    { function(d) d.tensors[1].stride = { 1 << 62, 1 } end, 'beyond the storage of 4 elements' },
    { function(d) d.tensors[1].stride = { -2, 1 } end, 'tensors[1]: stride[1] must be an integer >= 0, got -2' },
    { function(d) d.tensors[1].size = { 2, -1 } end, 'tensors[1]: size[2] must be an integer >= 0, got -1' },
    { function(d) d.tensors[1].offset = -1 end, 'tensors[1]: offset must be an integer >= 0' },
    { function(d) d.tensors[1].stride = { 2 } end, 'tensors[1]: size and stride must be lists of the same length' },
    { function(d) d.tensors[1].size = { 1, 1, 1, 1, 1, 1, 1, 1, 1 } d.tensors[1].stride = { 1, 1, 1, 1, 1, 1, 1, 1, 1 } end, 'at most 8' },
    { function(d) d.tensors[1].requires_grad = 'yes' end, 'requires_grad must be true or false' },
    { function(d) d.storages[1].numel = 5 end, 'storages[1]: numel 5, but tensor "storage.1" has shape 4' },
    { function(d) d.storages[1].dtype = 'i64' end, 'storages[1]: dtype i64, but tensor "storage.1" is f32' },
    { function(d) d.storages[2] = { dtype = 'f32', numel = 1 } end, 'storages[2]: the file holds no tensor "storage.2"' },
  }
  for i, c in ipairs(cases) do
    local d = good_desc()
    c[1](d)
    local p = crafted(d, good_tensors())
    T.raises(function() v100.load(p) end, { 'load: ' .. p .. ': ', c[2] }, 'case ' .. i)
  end
  -- an integer tensor cannot require grad
  local d = good_desc()
  d.storages[1].dtype, d.tensors[1].dtype, d.tensors[1].requires_grad = 'i64', 'i64', true
  local p = crafted(d, { ['storage.1'] = v100.arange(4) })
  T.raises(function() v100.load(p) end, { p, 'tensors[1]: requires_grad' })
  -- a tensor no storage describes, a 2-D storage
  local t2 = good_tensors()
  t2.evil = v100.zeros { 1 }
  p = crafted(good_desc(), t2)
  T.raises(function() v100.load(p) end, { 'load: ' .. p, 'tensor "evil" is not one of the 1 storages described' })
  p = crafted(good_desc(), { ['storage.1'] = v100.zeros { 2, 2 } })
  T.raises(function() v100.load(p) end, { p, 'storages[1]: numel 4, but tensor "storage.1" has shape 2x2' })
  -- no description, bad JSON, JSON nested too deep, not a safetensors file at all
  p = crafted(nil, good_tensors())
  T.raises(function() v100.load(p) end, { 'load: ' .. p .. ': not a file of v100.save (no metadata "v100.serial")' })
  p = crafted('{"format": "v100.serial", "root": [', good_tensors())
  T.raises(function() v100.load(p) end, { 'load: ', p, 'invalid JSON' })
  p = crafted(string.rep('[', 2000) .. string.rep(']', 2000), {})
  T.raises(function() v100.load(p) end, { 'load: ', p, 'nested deeper than' })
  p = crafted('[1, 2]', {})
  T.raises(function() v100.load(p) end, { p, 'format is nil' })
  p = fresh('junk')
  T.write_file(p, 'return os.exit(3)')
  T.raises(function() v100.load(p) end, { 'load: ', p })
  T.raises(function() v100.load(dir .. '/missing.safetensors') end, { 'load: ', dir .. '/missing.safetensors' })
end)

T.test('code in a file is data: nothing runs at load', function()
  _G.SERIAL_PWNED = nil
  local chunk = '_G.SERIAL_PWNED = true; os.exit(7)'
  local p = fresh()
  v100.save(p, { [chunk] = chunk, __index = chunk, __gc = chunk, __close = chunk, __metatable = chunk,
    list = { chunk, 'return function() _G.SERIAL_PWNED = 1 end' }, [1.5] = chunk })
  local w = v100.load(p)
  T.eq(w[chunk], chunk)
  T.eq(w.__index, chunk)
  T.eq(w.list[1], chunk)
  T.eq(getmetatable(w), nil, 'keys named like metamethods make no metatable')
  T.eq(_G.SERIAL_PWNED, nil, 'nothing ran')
  -- a hand-made file with code in metadata, a key and a tag
  local d = good_desc()
  d.tables[1][2] = { { 'str', chunk }, { 'str', 'return ' .. chunk } }
  d.comment = chunk
  p = crafted(d, good_tensors(), { [chunk] = chunk, format = chunk })
  w = v100.load(p)
  T.eq(w[chunk], 'return ' .. chunk)
  d.root = { chunk, chunk }
  p = crafted(d, good_tensors())
  T.raises(function() v100.load(p) end, 'unknown tag')
  collectgarbage()
  T.eq(_G.SERIAL_PWNED, nil, 'nothing ran')
end)

T.test('an interrupted save leaves the old file and no temporaries', function()
  local sub = dir .. '/atomic'
  core.io.makedirs(sub)
  local p = sub .. '/value.safetensors'
  v100.save(p, { small = v100.ones { 4 }, n = 1 })
  local before = T.read_file(p)
  -- a child writing 1 MiB under a 64 KiB file size limit: the write fails midway (EFBIG)
  local script = sub .. '/child.lua'
  T.write_file(script, "local v100 = require 'v100'\n" ..
    "local ok, err = pcall(v100.save, arg[1], { big = v100.ones { 262144 }, n = 2 })\n" ..
    "print('ok=' .. tostring(ok)) print('err=' .. tostring(err))\n")
  local cmd = string.format("bash -c \"trap '' XFSZ; ulimit -f 64; exec '%s' '%s' '%s'\" 2>&1", T.binary(), script, p)
  local out = io.popen(cmd, 'r'):read('a')
  T.ok(out:find('ok=false', 1, true), 'the save failed: ' .. out)
  T.ok(out:find(p, 1, true), 'its error names the file: ' .. out)
  T.eq(T.read_file(p), before, 'the old file is intact')
  local w = v100.load(p)
  T.eq(w.n, 1)
  T.eq(w.small:totable(), { 1.0, 1.0, 1.0, 1.0 })
  T.eq(listdir(sub), { 'child.lua', 'value.safetensors' }, 'no temporary left')
end)

T.test('checkpoint state holds tensors, shared tables and any keys; JSON state stays in meta.json', function()
  local cdir = dir .. '/ck'
  local m = nn.Linear(3, 2)
  local ema = v100.randn { 2, 3 }
  local shared = { lr = 0.1 }
  local state = { ema = ema, ema_t = ema:t(), again = ema, hist = { 1, 2.5, 3 }, [7] = 'seven', [true] = shared, s = shared,
    loader = { epoch = 2, batch = 5, samples = 40 }, raw = '\0\255' }
  local p = ckpt.save(cdir, { model = m, epoch = 2, step = 9, state = state })
  T.ok(exists(p .. '/state.safetensors'), 'state.safetensors written')
  local meta = core.io.json_decode(T.read_file(p .. '/meta.json'))
  T.eq(meta.state_file, 'state.safetensors')
  T.eq(meta.state, nil)
  local c = ckpt.load(cdir)
  local _, _, st = ckpt.restore(c, { model = nn.Linear(3, 2) })
  T.tensor_eq(st.ema, ema)
  T.ok(st.again == st.ema, 'one tensor')
  T.eq(storage(st.ema_t), storage(st.ema), 'a view of it')
  T.eq(st.hist, { 1, 2.5, 3 })
  T.eq(math.type(st.hist[1]), 'integer')
  T.eq(st[7], 'seven')
  T.ok(st[true] == st.s, 'a shared table')
  T.eq(st.raw, '\0\255')
  T.eq(st.loader.batch, 5)
  -- a JSON-able state stays in meta.json as before (readable, and what older code reads)
  local p2 = ckpt.save(cdir, { model = m, step = 10, state = { loader = { epoch = 1, batch = 2 }, note = 'x' } })
  T.ok(not exists(p2 .. '/state.safetensors'))
  local meta2 = core.io.json_decode(T.read_file(p2 .. '/meta.json'))
  T.eq(meta2.state.note, 'x')
  T.eq(ckpt.load(p2).state.loader.batch, 2)
  -- refusals name the state's path, and nothing is written
  T.raises(function() ckpt.save(cdir, { model = m, step = 11, state = { cb = { print } } }) end,
    'checkpoint.save: state.cb[1] is a function')
  T.ok(not exists(cdir .. '/epoch0-step11'))
  T.raises(function() ckpt.save(cdir, { model = m, step = 11, files = { ['state.safetensors'] = 'x' } }) end, 'is not a plain file name other than')
  -- the loader rules apply to a state file's loader too
  local p3 = ckpt.save(cdir, { model = m, step = 12, state = { t = v100.zeros { 1 }, loader = { epoch = 0 } } })
  T.raises(function() ckpt.load(p3) end, { 'checkpoint.load: ' .. p3 .. '/state.safetensors', 'field "state.loader.epoch" must be an integer >= 1' })
  -- a meta.json naming another state file, or one with both forms, is refused
  local mp = p .. '/meta.json'
  local good = T.read_file(mp)
  local bad = core.io.json_decode(good)
  bad.state_file = '../../x'
  T.write_file(mp, core.io.json_encode(bad, { int_keys = true }))
  T.raises(function() ckpt.load(p) end, 'field "state_file" must be state.safetensors')
  bad.state_file, bad.state = 'state.safetensors', { a = 1 }
  T.write_file(mp, core.io.json_encode(bad, { int_keys = true }))
  T.raises(function() ckpt.load(p) end, 'field "state" must be absent when state_file is given')
  T.write_file(mp, good)
  -- a damaged state file is named
  T.write_file(p .. '/state.safetensors', 'garbage')
  T.raises(function() ckpt.load(p) end, { 'checkpoint.load: ', p .. '/state.safetensors' })
end)

T.run()
