-- Shape products that overflow are refused with a clear error instead of wrapping (fuzzing
-- found 2^32 x 2^32 = 2^64 wrapping to 0 elements and writes through 0-byte storages). See
-- runtime/core/tensor.h (vl_shape_check).
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
  local e = v.ones({ 1, 1 }):expand { 2 ^ 20, 2 ^ 10 }
  T.eq(e:numel(), 2 ^ 30)
  T.eq(e:stride(1), 0)
  T.eq(e:sum():item(), 2 ^ 30)
  T.eq(e:mean():item(), 1)
end)

T.test('creation refuses shapes beyond 64-bit sizes', function()
  T.raises(function() return v.zeros { BIG, BIG } end, { 'too large' })
  T.raises(function() return v.empty { 0, 2 ^ 40, 2 ^ 40 } end, { 'too large' })
  T.raises(function() return v.empty({ 2 ^ 61 }, { dtype = 'f64' }) end, { '2305843009213693952', 'f64', 'too large' })
  local ok = v.empty { 0, 2 ^ 30, 2 ^ 30 }
  T.eq(ok:numel(), 0)
  T.eq(ok:stride(1), 2 ^ 60)
  T.eq(ok:stride(2), 2 ^ 30)
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
  -- (here the reader's own byte cap, which runs first, refuses the leading 2^32 x 2^32)
  T.raises(function() return v.io.read_idx(path) end, { 'read_idx', '4294967295x4294967295x0x4294967295' })
  os.remove(path)
end)

T.run()
