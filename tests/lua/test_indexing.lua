-- tests/lua/test_indexing.lua: Torch7's indexing (bindings/l_index.c, runtime/autograd/ops_index.c)
-- on the CPU: x[i], x[{i, {a, b}, {a}, {}}], x[mask], x[idx] read against the equivalent ops
-- (select, narrow, f64 references computed element by element), the same forms written with a
-- number and a tensor, gradients of the reads against finite differences (gradcheck), nonzero and
-- masked_select as methods, and every error (1-based positions, 0-based index values, shapes).
-- tests/lua/gpu_indexing.lua runs the same forms on CUDA against this CPU path.
local v100 = require 'v100'
local T = require 'testlib'

v100.manual_seed(4000 + T.seed % 100000)

local function ar(shape, dt)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return v100.arange(1, n + 1, { dtype = dt or 'f64' }):view(shape)
end

T.test('x[i] selects along dim 1; negative counts from the end', function()
  local x = ar{ 3, 4 }
  T.tensor_eq(x[1], x:select(1, 1))
  T.tensor_eq(x[-1], x:select(1, 3))
  T.eq(x[2].shape, { 4 })
  local v = ar{ 5 }
  T.eq(v[3].shape, {}, 'a 1-D tensor gives a 0-dim tensor')
  T.eq(v[3]:item(), 3)
  T.eq(v[-1]:item(), 5)
  local y = x[2]
  y:fill_(0)
  T.eq(x:sum():item(), 78 - (5 + 6 + 7 + 8), 'x[i] is a view')
end)

T.test('x[{...}]: integers select, {a, b} inclusive ranges, {a} keeps the dim, {} takes all', function()
  local x = ar{ 3, 4, 5 }
  T.tensor_eq(x[{ 2, { 2, 3 } }], x:select(1, 2):narrow(1, 2, 2))
  T.tensor_eq(x[{ {}, 4 }], x:select(2, 4))
  T.tensor_eq(x[{ {}, {}, -1 }], x:select(3, 5))
  T.tensor_eq(x[{ { 2 } }], x:narrow(1, 2, 1))
  T.eq(x[{ { 2 } }].shape, { 1, 4, 5 })
  T.tensor_eq(x[{ { -2, -1 }, { 1, -2 } }], x:narrow(1, 2, 2):narrow(2, 1, 3))
  T.tensor_eq(x[{}], x, '{} alone is all of x')
  T.eq(x[{ 1, 2, 3 }]:item(), x:select(1, 1):select(1, 2):select(1, 3):item())
  T.eq(x[{ 1, 2, 3 }]:item(), (1 - 1) * 20 + (2 - 1) * 5 + 3)
end)

T.test('x[mask] selects in row-major order; x[idx] is index_select along dim 1', function()
  local x = v100.randn({ 4, 5 }, { dtype = 'f64' })
  local m = x:gt(0)
  local got = x[m]
  local want = {}
  local xv, mv = x:totable(), m:totable()
  for i = 1, 4 do for j = 1, 5 do if mv[i][j] then want[#want + 1] = xv[i][j] end end end
  T.eq(got.shape, { #want })
  T.eq(got:totable(), want)
  T.tensor_eq(x:masked_select(m), got)
  -- a mask that broadcasts (a row of 5) and a 0-dim one
  local row = v100.tensor({ true, false, true, false, false })
  T.eq(x[row].shape, { 8 })
  T.tensor_eq(x[row], v100.cat({ x[{ {}, 1 }]:view{ 4, 1 }, x[{ {}, 3 }]:view{ 4, 1 } }, 2):view{ 8 })
  T.eq(x[x:gt(100)].shape, { 0 }, 'nothing selected: an empty tensor')
  local idx = v100.tensor({ 3, 0, 3 }, { dtype = 'i64' })
  T.tensor_eq(x[idx], x:index_select(1, idx))
  T.eq(x[idx].shape, { 3, 5 })
  T.tensor_eq(x[v100.tensor({ 1 }, { dtype = 'i32' })], x:narrow(1, 2, 1))
end)

T.test('nonzero: [n, ndim] 0-based coordinates in row-major order', function()
  local m = v100.tensor({ { 0, 2, 0 }, { 3, 0, 4 } })
  T.eq(m:nonzero():totable(), { { 0, 1 }, { 1, 0 }, { 1, 2 } })
  T.eq(m:nonzero().dtype, 'i64')
  T.eq(v100.zeros{ 2, 2 }:nonzero().shape, { 0, 2 })
  T.eq(v100.tensor({ 0, 1, 0, 1 }):gt(0):nonzero():totable(), { { 1 }, { 3 } })
  local nan = v100.tensor({ 0, 0 / 0 })
  T.eq(nan:nonzero():totable(), { { 1 } }, 'NaN is non-zero, as in PyTorch')
end)

T.test('writes: a number or a tensor into each form', function()
  local x = ar{ 3, 4 }
  x[1] = 0
  T.eq(x[1]:totable(), { 0, 0, 0, 0 })
  x[{ 2, { 1, 2 } }] = -1
  T.eq(x[2]:totable(), { -1, -1, 7, 8 })
  x[3] = v100.tensor{ 1, 2, 3, 4 }:double()
  T.eq(x[3]:totable(), { 1, 2, 3, 4 })
  x[{ {}, 4 }] = v100.tensor{ 10, 20, 30 }:double()
  T.eq(x[{ {}, 4 }]:totable(), { 10, 20, 30 })
  x[{ {}, { 1, 2 } }] = v100.tensor{ 5, 6 }:double() -- broadcast over the rows
  T.eq(x:totable(), { { 5, 6, 0, 10 }, { 5, 6, 7, 20 }, { 5, 6, 3, 30 } })
  -- bool masks
  local y = ar{ 2, 3 }
  y[y:gt(4)] = 0
  T.eq(y:totable(), { { 1, 2, 3 }, { 4, 0, 0 } })
  y[y:eq(0)] = v100.tensor{ 8, 9 }:double()
  T.eq(y:totable(), { { 1, 2, 3 }, { 4, 8, 9 } })
  y[y:gt(7)] = v100.tensor{ 7 }:double()
  T.eq(y:totable(), { { 1, 2, 3 }, { 4, 7, 7 } }, 'one value for every selected element')
  y[v100.tensor({ true, false, true })] = -1
  T.eq(y:totable(), { { -1, 2, -1 }, { -1, 7, -1 } }, 'a broadcast mask')
  -- index tensors: rows along dim 1
  local z = ar{ 3, 2 }
  z[v100.tensor({ 2, 0 }, { dtype = 'i64' })] = v100.tensor{ { 1, 1 }, { 2, 2 } }:double()
  T.eq(z:totable(), { { 2, 2 }, { 3, 4 }, { 1, 1 } })
  z[v100.tensor({ 1 }, { dtype = 'i64' })] = 0
  T.eq(z:totable(), { { 2, 2 }, { 0, 0 }, { 1, 1 } })
  z[v100.tensor({ 0, 1 }, { dtype = 'i64' })] = v100.tensor{ 9, 8 }:double()
  T.eq(z:totable(), { { 9, 8 }, { 9, 8 }, { 1, 1 } }, 'a row broadcast over the indexed rows')
  -- as PyTorch: negative index values count from the end; a repeated row keeps the last value
  -- on the CPU (any one of them on CUDA)
  z[v100.tensor({ -1, 0, 0 }, { dtype = 'i64' })] = v100.tensor{ { 5, 5 }, { 6, 6 }, { 7, 7 } }:double()
  T.eq(z:totable(), { { 7, 7 }, { 9, 8 }, { 5, 5 } })
  -- strided tensors take writes through a mask or an index (written through a copy)
  local base = ar{ 2, 3 }
  local tt = base:t()
  tt[tt:gt(4)] = 0
  T.eq(base:totable(), { { 1, 2, 3 }, { 4, 0, 0 } })
  tt[v100.tensor({ 2 }, { dtype = 'i64' })] = v100.tensor{ 8, 9 }:double()
  T.eq(base:totable(), { { 1, 2, 8 }, { 4, 0, 9 } })
  -- a 0-dim tensor: its element is written when the mask is true
  local z0 = v100.tensor(3.0, { dtype = 'f64' })
  z0[v100.tensor(true)] = v100.tensor({ 8 }, { dtype = 'f64' })
  z0[v100.tensor(false)] = v100.tensor({ 9 }, { dtype = 'f64' })
  T.eq(z0:item(), 8)
  -- one value of any shape goes to every selected element
  local one = ar{ 2, 2 }
  one[one:gt(2)] = v100.tensor({ { 0 } }, { dtype = 'f64' })
  T.eq(one:totable(), { { 1, 2 }, { 0, 0 } })
  -- dtypes convert as copy_ does
  local i = v100.zeros({ 3 }, { dtype = 'i64' })
  i[2] = 7
  i[i:eq(0)] = v100.tensor{ 1.0, 2.0 }
  T.eq(i:totable(), { 1, 7, 2 })
end)

T.test('reads differentiate: gradients against finite differences', function()
  local m = v100.tensor({ { true, false, true }, { false, true, true } })
  local idx = v100.tensor({ 1, 0, 1 }, { dtype = 'i64' })
  T.ok(v100.autograd.gradcheck(function(x)
    return x[{ 2, { 2, 3 } }]:sum() * 2 + (x[m] * x[m]):sum() + x[idx]:sum() + x[1][3] * 3 + x[{ {}, { 1 } }]:sum()
  end, { v100.randn({ 2, 3 }, { dtype = 'f64', requires_grad = true }) }))
  local x = v100.randn({ 2, 3 }, { dtype = 'f64', requires_grad = true })
  x[{ 1, { 2, 3 } }]:sum():backward()
  T.eq(x.grad:totable(), { { 0, 1, 1 }, { 0, 0, 0 } })
end)

T.test('writes differentiate: x gets zero where written, the value the gradient there', function()
  local w = v100.arange(1, 7, { dtype = 'f64' }):view{ 2, 3 }
  -- x[i] = v on a non-leaf
  local a = v100.ones({ 2, 3 }, { dtype = 'f64', requires_grad = true })
  local v = v100.zeros({ 3 }, { dtype = 'f64', requires_grad = true })
  local x = a * 1
  x[2] = v
  T.eq(x.grad_fn, 'CopySlices')
  ;(x * w):sum():backward()
  T.eq(a.grad:totable(), { { 1, 2, 3 }, { 0, 0, 0 } })
  T.eq(v.grad:totable(), { 4, 5, 6 })
  -- x[{...}] = v broadcast over the slice: v's gradient summed over the broadcast
  a.grad, v = nil, v100.zeros({ 2 }, { dtype = 'f64', requires_grad = true })
  x = a * 1
  x[{ {}, { 2, 3 } }] = v
  ;(x * w):sum():backward()
  T.eq(a.grad:totable(), { { 1, 0, 0 }, { 4, 0, 0 } })
  T.eq(v.grad:totable(), { 2 + 5, 3 + 6 })
  -- a number: only x's gradient changes
  a.grad = nil
  x = a * 1
  x[{ 1, -1 }] = 7
  ;(x * w):sum():backward()
  T.eq(a.grad:totable(), { { 1, 2, 0 }, { 4, 5, 6 } })
  -- x[mask] = v and x[idx] = v
  local m = v100.tensor({ { true, false, true }, { false, true, false } })
  a.grad, v = nil, v100.zeros({ 3 }, { dtype = 'f64', requires_grad = true })
  x = a * 1
  x[m] = v
  ;(x * w):sum():backward()
  T.eq(a.grad:totable(), { { 0, 2, 0 }, { 4, 0, 6 } })
  T.eq(v.grad:totable(), { 1, 3, 5 })
  a.grad, v = nil, v100.zeros({ 1, 3 }, { dtype = 'f64', requires_grad = true })
  x = a * 1
  x[v100.tensor({ -1 }, { dtype = 'i64' })] = v
  ;(x * w):sum():backward()
  T.eq(a.grad:totable(), { { 1, 2, 3 }, { 0, 0, 0 } })
  T.eq(v.grad:totable(), { { 4, 5, 6 } })
  -- a buffer that does not require grad takes a value that does: the buffer joins the graph
  local buf = v100.zeros({ 2, 3 }, { dtype = 'f64' })
  v = v100.ones({ 3 }, { dtype = 'f32', requires_grad = true })
  buf[1] = v
  T.ok(buf.requires_grad, 'the written buffer requires grad')
  ;(buf * w):sum():backward()
  T.eq(v.grad:totable(), { 1, 2, 3 })
  T.eq(v.grad.dtype, 'f32', "the value's gradient in its own dtype")
  -- against finite differences, every form in one function
  local idx = v100.tensor({ 2, 0 }, { dtype = 'i64' })
  T.ok(v100.autograd.gradcheck(function(p, q, r)
    local y = p * 2
    y[{ 2, { 1, 2 } }] = q
    y[m] = r
    local z = (y:t() * 1)
    z[idx] = q:view{ 1, 2 } * 3
    return z
  end, { v100.randn({ 2, 3 }, { dtype = 'f64', requires_grad = true }), v100.randn({ 2 }, { dtype = 'f64', requires_grad = true }),
    v100.randn({ 3 }, { dtype = 'f64', requires_grad = true }) }))
end)

T.test('writes and autograd: leaves, views and saved tensors keep the in-place rules', function()
  local leaf = v100.zeros({ 2, 3 }, { dtype = 'f64', requires_grad = true })
  T.raises(function() leaf[1] = 1 end, 'a leaf tensor that requires grad is used in an in-place operation (x[...] = value')
  T.raises(function() leaf[leaf:gt(0)] = 1 end, 'in-place')
  T.raises(function() leaf[v100.tensor({ 0 }, { dtype = 'i64' })] = 1 end, 'a leaf tensor that requires grad is used in an in-place operation (x[index] = value')
  v100.no_grad(function() leaf[1] = 5 end)
  T.eq(leaf:sum():item(), 15, 'under no_grad a leaf takes the write')
  local h = leaf * 1
  local row = h[1]
  T.raises(function() row[2] = 0 end, 'in-place operations on a view of a tensor that requires grad are not supported')
  local y = leaf * 1
  local z = y * y -- saves y
  y[1] = 0
  T.raises(function() z:sum():backward() end, 'modified in place')
end)

T.test('errors name the form and say how positions and index values count', function()
  local x = ar{ 3, 4 }
  T.raises(function() return x[4] end,
    'index: position 4 is out of range for dim 1 of size 3 (positions are 1-based: 1 to 3, or -3 to -1 from the end)')
  T.raises(function() return x[0] end, 'position 0 is out of range')
  T.raises(function() return x[-4] end, 'position -4 is out of range')
  T.raises(function() return x[{ 1, 5 }] end, 'position 5 is out of range for dim 2 of size 4')
  T.raises(function() return x[{ { 2, 9 } }] end, 'position 9 is out of range for dim 1 of size 3')
  T.raises(function() return x[{ { 3, 2 } }] end, 'index: entry 1 is the empty range 3..2 of dim 1')
  T.raises(function() return x[{ 1, 2, 3 }] end, 'index: 3 entries for a 2-dim tensor')
  T.raises(function() return x[{ 'a' }] end, 'index: entry 1 is a string (an integer, {}, {a} or {a, b}')
  T.raises(function() return x[{ { 1, 2, 3 } }] end, 'index: entry 1 has 3 numbers')
  T.raises(function() return x[1.5] end, 'index: a tensor is indexed by an integer, a table of ranges')
  T.raises(function() return x[true] end, 'not a boolean')
  T.raises(function() return v100.tensor(3.0)[1] end, 'a 0-dim tensor cannot be indexed (use :item())')
  T.raises(function() return x[v100.tensor({ 3 }, { dtype = 'i64' })] end,
    'index: index 3 is out of bounds for dim 1 with size 3 (index values are 0-based: 0 to 2)')
  T.raises(function() return x[v100.ones{ 3, 4 }] end, 'index: index must be i64 or i32, got f32')
  T.raises(function() return x[v100.ones{ 2, 2 }:gt(0)] end, 'masked_select')
  T.raises(function() x[1] = 'a' end, 'index: the value assigned must be a number or a tensor, not a string')
  T.raises(function() x[x:gt(6)] = v100.tensor{ 1, 2 }:double() end,
    'x[mask] = value: the index selects 6 elements but the value has 2')
  T.raises(function() x[v100.tensor({ 3 }, { dtype = 'i64' })] = 1 end,
    'x[index] = value: index 3 is out of bounds for dim 1 with size 3 (index values are 0-based: 0 to 2, or -3 to -1 from the end)')
  T.raises(function() x[v100.tensor({ -4 }, { dtype = 'i64' })] = 1 end, 'index -4 is out of bounds for dim 1 with size 3')
  T.raises(function() x[v100.tensor({ 0, 1 }, { dtype = 'i64' })] = v100.ones{ 3, 4 }:double() end,
    'x[index] = value: the index selects 8 elements but the value has 12')
  T.raises(function() x[v100.tensor({ { 0 } }, { dtype = 'i64' })] = 1 end, 'x[index] = value: the index must be 1-D')
  T.raises(function() x[{ 1 }] = v100.ones{ 5 } end, 'copy_')
  local leaf = v100.zeros({ 3 }, { requires_grad = true })
  T.raises(function() leaf[1] = 1 end, 'in-place')
  T.eq(x.foo, nil, 'a string key is still a field lookup')
  T.raises(function() x.foo = 1 end, "cannot set field 'foo' of a tensor")
end)

T.run()
