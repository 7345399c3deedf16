-- Shape products and scalar conversions that overflow are refused with a clear error instead of
-- wrapping (fuzzing found 2^32 x 2^32 = 2^64 wrapping to 0 elements, writes through 0-byte
-- storages, and raw C casts of out-of-range numbers). See runtime/core/tensor.h (vl_shape_check)
-- and runtime/core/scalar.h (the conversion rule).
local T = require 'testlib'
local v = require 'v100'

local BIG = 2 ^ 32

T.test('view: a shape whose element count wraps to 0 is refused', function()
  local z = v.zeros { 0 }
  T.raises(function() return z:view { BIG, BIG } end, { 'view', '4294967296x4294967296', 'too large' })
  T.raises(function() return z:reshape { BIG, BIG } end, { 'reshape', 'too large' })
  T.raises(function() return z:view { BIG, BIG, BIG } end, { 'view', 'too large' })
  -- an empty view whose other dims overflow the strides is refused too, in any dim order
  T.raises(function() return z:view { 0, 2 ^ 40, 2 ^ 40 } end, { 'view', '0x1099511627776x1099511627776', 'too large' })
  T.raises(function() return z:view { 2 ^ 40, 2 ^ 40, 0 } end, { 'view', 'too large' })
  -- what fits still works, and stays empty
  local ok = z:view { -1, BIG }
  T.eq(ok.shape[1], 0)
  T.eq(ok.shape[2], BIG)
  T.eq(ok:numel(), 0)
  T.eq(ok:sum():item(), 0)
end)

T.test('the fuzzer reproducers: no write through a 0-byte storage, no heap overflow', function()
  -- v.zeros{0}:view{2^32, 2^32}:select(1, 2):narrow(1, 1, 4):fill_(1) used to SIGSEGV
  T.raises(function() return v.zeros({ 0 }):view({ BIG, BIG }):select(1, 2):narrow(1, 1, 4):fill_(1) end,
    { 'view', 'too large' })
  -- v.ones{1, 1}:expand{2^32, 2^32}:view{2^32, 2^32} then fill_ overflowed the heap
  T.raises(function() return v.ones({ 1, 1 }):expand { BIG, BIG } end,
    { 'expand', '4294967296x4294967296', 'too large' })
  T.raises(function() return v.ones({ 1, 1 }):expand({ BIG, BIG }):sum() end, { 'expand', 'too large' })
  -- a big expand that does fit is a stride-0 view: its sum and mean are right
  local e = v.ones({ 1, 1 }):expand { 2 ^ 16, 2 ^ 10 }
  T.eq(e:numel(), 2 ^ 26)
  T.eq(e:stride(1), 0)
  T.eq(e:sum():item(), 2 ^ 26)
  T.eq(e:mean():item(), 1)
end)

T.test('creation refuses shapes beyond 64-bit sizes', function()
  T.raises(function() return v.zeros { BIG, BIG } end, { 'too large' })
  T.raises(function() return v.empty { 0, 2 ^ 40, 2 ^ 40 } end, { 'too large' })
  T.raises(function() return v.empty({ 2 ^ 61 }, { dtype = 'f64' }) end, { '2305843009213693952', 'f64', 'too large' })
  -- a negative size is named in full (it used to go through a cast to int: -2^32 printed as 0)
  T.raises(function() return v.zeros { 2, -BIG } end, { 'zeros', 'negative size -4294967296 in dim 2' })
  local ok = v.empty { 0, 2 ^ 30, 2 ^ 30 }
  T.eq(ok:numel(), 0)
  T.eq(ok:stride(1), 2 ^ 60)
  T.eq(ok:stride(2), 2 ^ 30)
end)

T.test('numbers out of an integer dtype\'s range raise instead of a raw cast', function()
  T.raises(function() return v.tensor({ 1e10 }, { dtype = 'i32' }) end,
    { 'tensor', 'value 10000000000 cannot be converted to i32 without overflow' })
  T.raises(function() return v.tensor({ 0 / 0 }, { dtype = 'i64' }) end, { 'tensor', 'cannot be converted to i64' })
  T.raises(function() return v.tensor({ math.huge }, { dtype = 'i32' }) end, { 'cannot be converted to i32' })
  T.raises(function() return v.tensor({ 1, 256 }, { dtype = 'u8' }) end, { 'value 256 cannot be converted to u8' })
  T.raises(function() return v.tensor({ -1 }, { dtype = 'u8' }) end, { 'value -1 cannot be converted to u8' })
  T.raises(function() return v.tensor({ 2 ^ 63 }, { dtype = 'i64' }) end, { 'cannot be converted to i64' })
  T.raises(function() return v.full({ 2 }, 1e10, { dtype = 'i32' }) end, { 'full', 'cannot be converted to i32' })
  T.raises(function() return v.full({ 2 }, 0 / 0, { dtype = 'i64' }) end, { 'full', 'cannot be converted to i64' })
  T.raises(function() return v.full({ 0 }, 1e10, { dtype = 'i32' }) end, { 'full', 'cannot be converted' })
  local t = v.tensor({ 1, 2 }, { dtype = 'i32' })
  T.raises(function() return t:fill_(2 ^ 31) end, { 'fill_', 'value 2147483648 cannot be converted to i32' })
  T.alleq(t, { 1, 2 }, 'fill_ target unmodified')
  T.raises(function() return v.full_like(t, -1e300) end, { 'cannot be converted to i32' })
  T.raises(function() return v.arange(0, 1e10, 1e9, { dtype = 'i32' }) end, { 'arange', 'cannot be converted to i32' })
  T.raises(function() return v.arange(0, 300, { dtype = 'u8' }) end, { 'arange', 'value 299 cannot be converted to u8' })
  -- scalar operands of integer arithmetic
  T.raises(function() return t + 2 ^ 40 end, { 'add', 'cannot be converted to i32' })
  T.raises(function() return t:mul_(1e10) end, { 'mul_', 'cannot be converted to i32' })
  T.alleq(t, { 1, 2 }, 'mul_ target unmodified')
  T.raises(function() return t:masked_fill(v.tensor { true, false }, 1e10) end, { 'masked_fill', 'cannot be converted to i32' })
  T.raises(function() return t:masked_fill_(v.tensor { true, false }, 0 / 0) end, { 'masked_fill_', 'cannot be converted to i32' })
  T.alleq(t, { 1, 2 }, 'masked_fill_ target unmodified')
  -- the edges of each range are fine; fractions truncate toward zero (PyTorch)
  T.alleq(v.tensor({ 2147483647, -2147483648, 1.9, -1.9 }, { dtype = 'i32' }), { 2147483647, -2147483648, 1, -1 })
  T.alleq(v.tensor({ 0, 255 }, { dtype = 'u8' }), { 0, 255 })
  T.eq(v.tensor({ -2 ^ 63 }, { dtype = 'i64' }):totable()[1], math.mininteger)
  -- float dtypes round (to inf beyond their range) and bool takes everything
  T.eq(v.full({ 1 }, 1e300):item(), math.huge)
  T.eq(v.full({ 1 }, -1e9, { dtype = 'f16' }):item(), -math.huge)
  T.alleq(v.tensor({ 0 / 0, 0, 2 }, { dtype = 'bool' }), { true, false, true })
  -- comparisons with a number beyond the dtype are exact, not saturated
  local u = v.tensor({ 0, 255 }, { dtype = 'u8' })
  T.alleq(u:lt(300), { true, true })
  T.alleq(u:ge(-1), { true, true })
  T.alleq(u:eq(511), { false, false })
end)

T.test('i64 values above 2^53 arrive exactly', function()
  local big = 9007199254740993 -- 2^53 + 1: not a double
  local t = v.tensor({ big, math.maxinteger, math.mininteger })
  T.eq(t.dtype, 'i64')
  local l = t:totable()
  T.eq(l[1], big)
  T.eq(l[2], math.maxinteger)
  T.eq(l[3], math.mininteger)
  local f = v.full({ 2, 3 }, big, { dtype = 'i64' }):totable()
  for i = 1, 2 do for j = 1, 3 do T.eq(f[i][j], big) end end
  T.eq(v.full({ 1 }, math.maxinteger, { dtype = 'i64' }):item(), math.maxinteger)
  -- fill_ through a non-contiguous view
  local m = v.zeros({ 3, 4 }, { dtype = 'i64' })
  m:t():fill_(big + 2)
  T.eq(m:totable()[3][4], big + 2)
  T.eq(v.full_like(m, big):totable()[2][2], big)
  -- arange counts and computes in integers
  local a = v.arange(big, big + 6, 2):totable()
  T.eq(#a, 3)
  T.eq(a[1], big)
  T.eq(a[3], big + 4)
  local r = v.arange(math.mininteger, math.maxinteger, 2 ^ 62 // 1):totable()
  T.eq(#r, 4)
  T.eq(r[1], math.mininteger)
  T.eq(r[4], 2 ^ 62 // 1)
  local d = v.arange(math.maxinteger, math.maxinteger - 3, -1):totable()
  T.eq(#d, 3)
  T.eq(d[3], math.maxinteger - 2)
  -- small integer aranges are unchanged
  T.alleq(v.arange(5), { 0, 1, 2, 3, 4 })
  T.alleq(v.arange(1, 10, 3, { dtype = 'i32' }), { 1, 4, 7 })
  T.alleq(v.arange(0, 1, 0.25), { 0, 0.25, 0.5, 0.75 })
end)

-- files whose header announces a zero-size tensor with huge other dims: refused by the same rule,
-- whatever the position of the 0
local function write(path, bytes)
  local f = assert(io.open(path, 'wb'))
  f:write(bytes)
  f:close()
end

local function safetensors(shape)
  local header = string.format('{"t":{"dtype":"F32","shape":[%s],"data_offsets":[0,0]}}', table.concat(shape, ','))
  return string.pack('<I8', #header) .. header
end

T.test('loaders: an empty tensor cannot carry dims whose strides overflow', function()
  local path = os.tmpname()
  local E = '1099511627776' -- 2^40
  for _, shape in ipairs { { '0', E, E }, { E, E, '0' }, { E, '0', E } } do
    write(path, safetensors(shape))
    T.raises(function() return v.load_safetensors(path) end, { 'load_safetensors', '"t"', 'too large' },
      table.concat(shape, 'x'))
  end
  write(path, safetensors { '0', '1073741824', '1073741824' }) -- 0 x 2^30 x 2^30 fits
  local sd = v.load_safetensors(path)
  T.eq(sd.t:numel(), 0)
  T.eq(sd.t:stride(1), 2 ^ 60)
  -- IDX: u8 data, 8 dims of 0 and 2^32 - 1 (each size is a 32-bit field)
  local dims = { 0, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF }
  local bytes = string.char(0, 0, 0x08, #dims)
  for _, d in ipairs(dims) do bytes = bytes .. string.pack('>I4', d) end
  write(path, bytes)
  T.raises(function() return v.io.read_idx(path) end, { 'read_idx', 'too large' })
  dims = { 0xFFFFFFFF, 0xFFFFFFFF, 0, 0xFFFFFFFF }
  bytes = string.char(0, 0, 0x08, #dims)
  for _, d in ipairs(dims) do bytes = bytes .. string.pack('>I4', d) end
  write(path, bytes)
  T.raises(function() return v.io.read_idx(path) end, { 'read_idx', 'too large' })
  -- 2^21 x 2^21 x 0 fits like 0 x 2^21 x 2^21: the reader's byte cap does not apply to empty data
  for _, order in ipairs { { 0x200000, 0x200000, 0 }, { 0, 0x200000, 0x200000 } } do
    bytes = string.char(0, 0, 0x08, #order)
    for _, d in ipairs(order) do bytes = bytes .. string.pack('>I4', d) end
    write(path, bytes)
    local t = v.io.read_idx(path)
    T.eq(t:numel(), 0)
    T.eq(t:dim(), 3)
  end
  os.remove(path)
end)

T.run()
