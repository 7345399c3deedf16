-- tests/lua/test_edge_values.lua: values at the edges that used to give silent nonsense (issue 27,
-- "Data loss and silent nonsense"): t:split(math.maxinteger), a raw NUL byte in JSON, JSON nested
-- past the one nesting limit, a meta.json "version": 1.0, and backward through a graph recorded
-- before a parameter's set_ changed its shape. Each test failed before its fix.
local v100 = require 'v100'
local nn = require 'v100.nn'
local ckpt = require 'v100.checkpoint'
local vio = v100.io
local T = require 'testlib'

local ROOT = T.tmpdir()

T.test('split: a split_size near 2^63 is one piece (the sum used to overflow, giving 0 pieces)', function()
  local t = v100.arange(5):float()
  for _, k in ipairs({ math.maxinteger, math.maxinteger - 1, 1 << 62, 5, 6 }) do
    local p = t:split(k)
    T.eq(#p, 1, 'split(' .. k .. ')')
    T.eq(p[1].shape, { 5 })
    T.eq(p[1]:totable(), { 0, 1, 2, 3, 4 })
  end
  T.eq(#t:split(4), 2)
  T.eq(#v100.zeros{ 0 }:split(math.maxinteger), 1)
  T.raises(function() t:split(math.mininteger) end, 'split: split_size must be positive')
  T.raises(function() t:split(0) end, 'split: split_size must be positive')
  -- chunk's count is an int: a count below INT_MIN stays negative and is refused
  T.raises(function() t:chunk(math.mininteger) end, 'chunk: the number of chunks must be positive')
  T.eq(#t:chunk(math.maxinteger), 5)
end)

T.test('json_decode: a raw NUL byte is refused as \\u0000 is (it used to cut the string)', function()
  T.raises(function() vio.json_decode('"a\0b"') end, 'json_decode: a NUL byte at byte 3 (NUL bytes are not supported')
  T.raises(function() vio.json_decode('{"k\0": 1}', 'meta.json') end, 'json_decode: meta.json: a NUL byte at byte 4')
  T.raises(function() vio.json_decode('[1]\0') end, 'a NUL byte at byte 4')
  T.raises(function() vio.json_decode('"a\\\0"') end, 'a NUL byte at byte 4')
  T.raises(function() vio.json_decode('"a\\u0000b"') end, 'contains \\u0000')
  T.eq(vio.json_decode('"a\\\\b"'), 'a\\b')
end)

T.test('JSON nesting: one limit (1000) both ways, named in both errors', function()
  local function nested(n)
    local root = {}
    local c = root
    for _ = 2, n do
      c[1] = {}
      c = c[1]
    end
    return root
  end
  -- the encoder used to stop at 200 while the decoder read up to 1000
  local text = vio.json_encode(nested(1000))
  T.eq(#text, 2000)
  local back = vio.json_decode(text)
  local d, c = 1, back
  while c[1] do
    c = c[1]
    d = d + 1
  end
  T.eq(d, 1000)
  T.raises(function() vio.json_encode(nested(1001)) end, 'json_encode: tables nested deeper than 1000 levels, the JSON nesting limit')
  -- the decoder used to say only "invalid JSON at byte 1001"
  T.raises(function() vio.json_decode(string.rep('[', 1001) .. string.rep(']', 1001)) end,
    'json_decode: nested deeper than 1000 levels, the JSON nesting limit, at byte 1001')
  T.raises(function() vio.json_decode(string.rep('{"a":', 1001) .. '1' .. string.rep('}', 1001), 'cfg.json') end,
    'json_decode: cfg.json: nested deeper than 1000 levels, the JSON nesting limit, at byte 5001')
  -- brackets inside strings do not count, escaped quotes do not end a string
  local s = '["' .. string.rep('[', 2000) .. '\\"{"]'
  T.eq(vio.json_decode(s)[1], string.rep('[', 2000) .. '"{')
  local cyc = {}
  cyc.self = cyc
  T.raises(function() vio.json_encode(cyc) end, '(a cycle?)')
end)

T.test('checkpoint meta.json: "version": 1.0 is version 1; others are named clearly', function()
  local m = nn.Linear(2, 3)
  local path = ckpt.save(ROOT .. '/ck', { model = m })
  local mp = path .. '/meta.json'
  local orig = T.read_file(mp)
  local function with_version(v)
    local text, n = orig:gsub('"version":%s*1', '"version":\t' .. v, 1)
    assert(n == 1, 'no version in ' .. orig)
    T.write_file(mp, text)
  end
  with_version('1.0')
  local c = ckpt.load(path)
  T.eq(c.meta.version, 1)
  T.eq(math.type(c.meta.version), 'integer')
  with_version('1.5')
  T.raises(function() ckpt.load(path) end, mp .. ': field "version" must be a whole number >= 1, got 1.5')
  with_version('"1"')
  T.raises(function() ckpt.load(path) end, 'field "version" must be a whole number >= 1, got "1"')
  with_version('0')
  T.raises(function() ckpt.load(path) end, 'field "version" must be a whole number >= 1, got 0')
  with_version('7.0')
  T.raises(function() ckpt.load(path) end, 'checkpoint version 7 is newer than this v100lua, which reads versions 1 to')
  T.write_file(mp, orig)
  T.eq(ckpt.load(path).meta.version, 1)
end)

T.test('set_: backward through a graph recorded before set_ changed the shape fails, naming both', function()
  local w = v100.randn{ 3 }:requires_grad_(true)
  local loss = (w * 2):sum()
  w:set_(v100.randn{ 5 })
  -- it used to leave w.grad of shape 3 on a parameter of shape 5
  T.raises(function() loss:backward() end,
    'AccumulateGrad: the leaf was changed by set_ after this graph was recorded (gradient 3 f32 cpu, leaf now 5 f32 cpu)')
  T.eq(w.grad, nil)
  -- a gradient of the new shape is not added to (a {1} gradient used to broadcast into {5})
  local u = v100.randn{ 1 }:requires_grad_(true)
  local old = (u * 3):sum()
  u:set_(v100.randn{ 5 })
  u:sum():backward()
  T.eq(u.grad:totable(), { 1, 1, 1, 1, 1 })
  T.raises(function() old:backward() end, 'gradient 1 f32 cpu, leaf now 5 f32 cpu')
  T.eq(u.grad:totable(), { 1, 1, 1, 1, 1 })
  -- a dtype change, as Module:to() makes
  local p = v100.randn{ 2 }:requires_grad_(true)
  local l2 = (p * p):sum()
  p:set_(v100.randn{ 2 }:double())
  T.raises(function() l2:backward() end, 'leaf now 2 f64 cpu')
  -- same shape, dtype and device: the graph still runs (the gradient fits)
  local q = v100.randn{ 4 }:requires_grad_(true)
  local l3 = (q * 2):sum()
  q:set_(v100.randn{ 4 })
  l3:backward()
  T.eq(q.grad:totable(), { 2, 2, 2, 2 })
end)

T.run()
