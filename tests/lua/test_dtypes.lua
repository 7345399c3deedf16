-- tests/lua/test_dtypes.lua: the one dtype name table (runtime/core/dtype.c), as v100.dtypes,
-- v100.dtype_of and v100.dtype_is_float export it, and every spelling through tensors
-- (t:to, creation options) and modules (nn.Module:to in all its forms). Module:to used to keep
-- its own alias table, which lacked float32/float64/float16/int32/int64/uint8: then
-- nn.Linear(2, 2):to('float64') read 'float64' as a device name.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'

v100.manual_seed(T.seed % 1000003)

-- Every accepted name and the dtype it means; the C table must give exactly these.
local EXPECTED = {
  f32 = 'f32', float32 = 'f32', float = 'f32',
  f16 = 'f16', float16 = 'f16', half = 'f16',
  bf16 = 'bf16', bfloat16 = 'bf16',
  f64 = 'f64', float64 = 'f64', double = 'f64',
  i32 = 'i32', int32 = 'i32', int = 'i32',
  i64 = 'i64', int64 = 'i64', long = 'i64',
  u8 = 'u8', uint8 = 'u8', byte = 'u8',
  bool = 'bool',
}
local FLOAT = { f32 = true, f16 = true, bf16 = true, f64 = true }
local SIZE = { f32 = 4, f16 = 2, bf16 = 2, f64 = 8, i32 = 4, i64 = 8, u8 = 1, bool = 1 }

local function sorted_keys(t)
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks)
  return ks
end

T.test('v100.dtypes is the full alias table', function()
  T.eq(type(v100.dtypes), 'table')
  for _, name in ipairs(sorted_keys(EXPECTED)) do
    T.eq(v100.dtypes[name], EXPECTED[name], 'v100.dtypes.' .. name)
  end
  for _, name in ipairs(sorted_keys(v100.dtypes)) do
    T.ok(EXPECTED[name] ~= nil, 'v100.dtypes has an entry the test does not know: ' .. name)
  end
end)

T.test('dtype_of and dtype_is_float', function()
  for _, name in ipairs(sorted_keys(EXPECTED)) do
    local canon = EXPECTED[name]
    T.eq(v100.dtype_of(name), canon, 'dtype_of ' .. name)
    T.eq(v100.dtype_is_float(name), FLOAT[canon] == true, 'dtype_is_float ' .. name)
  end
  for _, s in ipairs{ 'cpu', 'cuda', 'cuda:0', 'float128', 'F32', '' } do
    local d, msg = v100.dtype_of(s)
    T.eq(d, nil, 'dtype_of ' .. s)
    T.ok(type(msg) == 'string' and msg:find("unknown dtype '" .. s .. "'", 1, true) ~= nil,
         'message for ' .. s .. ': ' .. tostring(msg))
  end
  T.raises(function() v100.dtype_is_float('cpu') end, "unknown dtype 'cpu'")
end)

T.test('every alias through tensors', function()
  local src = v100.tensor{ 0, 1, 3 }
  for _, name in ipairs(sorted_keys(EXPECTED)) do
    local canon = EXPECTED[name]
    local t = src:to(name)
    T.eq(t.dtype, canon, 't:to(' .. name .. ')')
    T.eq(t:element_size(), SIZE[canon], 'element size of ' .. name)
    if canon == 'bool' then
      T.alleq(t, { false, true, true }, 't:to(' .. name .. ') values')
    else
      T.alleq(t:to('f64'), { 0, 1, 3 }, 't:to(' .. name .. ') values')
    end
    T.eq(src:to{ dtype = name }.dtype, canon, 't:to{dtype = ' .. name .. '}')
    T.eq(src:to('cpu', name).dtype, canon, "t:to('cpu', " .. name .. ')')
    T.eq(src:to(name, 'cpu').dtype, canon, 't:to(' .. name .. ", 'cpu')")
    local z = v100.zeros({ 2 }, { dtype = name })
    T.eq(z.dtype, canon, 'zeros dtype ' .. name)
    T.eq(z.shape[1], 2)
    T.eq(v100.zeros({ 2 }, name).dtype, canon, 'zeros with a bare dtype ' .. name)
    T.eq(v100.ones({ 3 }, { dtype = name }).dtype, canon, 'ones dtype ' .. name)
    T.eq(v100.tensor({ 1, 0 }, { dtype = name }).dtype, canon, 'tensor dtype ' .. name)
    T.eq(v100.zeros_like(src, { dtype = name }).dtype, canon, 'zeros_like dtype ' .. name)
  end
  -- the second string of t:to(a, b) is parsed, not dropped
  T.raises(function() src:to('cpu', 'float128') end, "'float128' is neither a dtype nor a device")
end)

T.test('every float alias through modules', function()
  for _, name in ipairs(sorted_keys(EXPECTED)) do
    local canon = EXPECTED[name]
    if FLOAT[canon] then
      local forms = {
        function(m) return m:to(name) end,
        function(m) return m:to('cpu', name) end,
        function(m) return m:to{ dtype = name } end,
        function(m) return m:to{ device = 'cpu', dtype = name } end,
      }
      for i, form in ipairs(forms) do
        local m = nn.Linear(2, 2)
        local r = form(m)
        T.ok(r == m, 'Module:to returns the module (form ' .. i .. ', ' .. name .. ')')
        T.eq(m.weight.dtype, canon, 'weight dtype, form ' .. i .. ', ' .. name)
        T.eq(m.bias.dtype, canon, 'bias dtype, form ' .. i .. ', ' .. name)
        T.eq(m.weight.device, 'cpu')
        T.ok(m.weight.requires_grad, 'the converted weight is still a parameter')
      end
      local m = nn.Linear(2, 2):to(name)
      local y = m(v100.randn({ 3, 2 }):to(name))
      T.eq(y.dtype, canon, 'forward in ' .. name)
      T.eq(y.shape[1], 3)
    end
  end
end)

T.test('integer buffers keep their dtype, integer targets are refused', function()
  local m = nn.Linear(2, 2)
  m:register_buffer('steps', v100.zeros({}, { dtype = 'long' }))
  m:to('float64')
  T.eq(m.weight.dtype, 'f64')
  T.eq(m.steps.dtype, 'i64', 'an integer buffer does not follow the module dtype')
  for _, name in ipairs(sorted_keys(EXPECTED)) do
    if not FLOAT[EXPECTED[name]] then
      T.raises(function() nn.Linear(2, 2):to(name) end, 'dtype must be a floating type, got ' .. name)
    end
  end
  -- a string that is no dtype is a device, and reported as one
  T.raises(function() nn.Linear(2, 2):to('float128') end, "device 'float128'")
end)

T.run()
