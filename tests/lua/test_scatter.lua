-- tests/lua/test_scatter.lua: scatter / scatter_ (assign, a number, reduce='add'), gather along any
-- dim with a smaller index, index_put / index_put_ (several index tensors broadcast together,
-- negative values from the end, accumulate, broadcast values, strided targets), one_hot
-- (runtime/ops/index.c, runtime/ops/scatter.c, runtime/autograd/ops_scatter.c,
-- bindings/l_scatter.c) on the CPU: values worked out by hand from PyTorch's semantics (dims
-- 1-based here, index values 0-based), gradients by hand and by gradcheck, and the errors.
-- The CUDA kernels are compared with the CPU by tests/lua/gpu_tensor_sweep.lua.
local v100 = require 'v100'
local nn = require 'v100.nn'
local T = require 'testlib'

local function i64(t) return v100.tensor(t, { dtype = 'i64' }) end
local function f64(t) return v100.tensor(t, { dtype = 'f64' }) end

T.test('scatter: PyTorch documentation examples', function()
  local src = v100.arange(1, 11, { dtype = 'f64' }):view{ 2, 5 }
  -- torch.zeros(3, 5).scatter_(0, tensor([[0, 1, 2, 0]]), src)
  T.tensor_eq(v100.zeros({ 3, 5 }, { dtype = 'f64' }):scatter(1, i64{ { 0, 1, 2, 0 } }, src),
    f64{ { 1, 0, 0, 4, 0 }, { 0, 2, 0, 0, 0 }, { 0, 0, 3, 0, 0 } })
  -- torch.zeros(3, 5).scatter_(1, tensor([[0, 1, 2], [0, 1, 4]]), src)
  T.tensor_eq(v100.zeros({ 3, 5 }, { dtype = 'f64' }):scatter(2, i64{ { 0, 1, 2 }, { 0, 1, 4 } }, src),
    f64{ { 1, 2, 3, 0, 0 }, { 6, 7, 0, 0, 8 }, { 0, 0, 0, 0, 0 } })
  -- torch.full((2, 4), 2.).scatter_(1, tensor([[2], [3]]), 1.23): a number
  T.tensor_eq(v100.full({ 2, 4 }, 2, { dtype = 'f64' }):scatter(-1, i64{ { 2 }, { 3 } }, 1.25),
    f64{ { 2, 2, 1.25, 2 }, { 2, 2, 2, 1.25 } })
  -- ... reduce='add'
  T.tensor_eq(v100.full({ 2, 4 }, 2, { dtype = 'f64' }):scatter(2, i64{ { 2 }, { 3 } }, 1.25, { reduce = 'add' }),
    f64{ { 2, 2, 3.25, 2 }, { 2, 2, 2, 3.25 } })
  T.tensor_eq(v100.zeros({ 3 }, { dtype = 'f64' }):scatter(1, i64{ 0, 0, 2 }, f64{ 1, 2, 3 }, { reduce = 'add' }),
    f64{ 3, 0, 3 }, 'reduce add sums repeats')
  -- ... reduce='multiply'
  T.tensor_eq(v100.full({ 2, 4 }, 2, { dtype = 'f64' }):scatter(2, i64{ { 2 }, { 3 } }, 1.5, { reduce = 'multiply' }),
    f64{ { 2, 2, 3, 2 }, { 2, 2, 2, 3 } })
  T.tensor_eq(v100.ones({ 3 }, { dtype = 'i64' }):scatter(1, i64{ 0, 0, 2 }, i64{ 2, 3, 4 }, { reduce = 'multiply' }),
    i64{ 6, 1, 4 }, 'reduce multiply multiplies repeats')
  local b = v100.tensor({ true, true, false })
  b:scatter_(1, i64{ 0, 2 }, v100.tensor({ false, true }), { reduce = 'multiply' })
  T.eq(b:totable(), { false, true, false }, 'bool: a logical and')
end)

T.test('scatter: integer dtypes, an i32 index, the input untouched, scatter_ in place', function()
  local x = v100.zeros({ 2, 3 }, { dtype = 'i32' })
  local y = x:scatter(2, v100.tensor({ { 2, 0 }, { 1, 1 } }, { dtype = 'i32' }), v100.tensor({ { 7, 8 }, { 9, 9 } }, { dtype = 'i32' }))
  T.tensor_eq(y, v100.tensor({ { 8, 0, 7 }, { 0, 9, 0 } }, { dtype = 'i32' }))
  T.eq(x:sum():item(), 0, 'scatter leaves self as it was')
  local r = x:scatter_(1, i64{ { 1, 0, 1 } }, 5)
  T.ok(r == x, 'scatter_ returns self')
  T.tensor_eq(x, v100.tensor({ { 0, 5, 0 }, { 5, 0, 5 } }, { dtype = 'i32' }))
end)

T.test('scatter: repeated positions keep the last on the CPU; empty and strided operands', function()
  T.tensor_eq(v100.zeros({ 3 }, { dtype = 'f64' }):scatter(1, i64{ 0, 0, 1 }, f64{ 5, 6, 7 }), f64{ 6, 7, 0 })
  local x = v100.ones({ 2, 3 }, { dtype = 'f64' })
  T.tensor_eq(x:scatter(1, v100.zeros({ 0, 3 }, { dtype = 'i64' }), x), x, 'an empty index writes nothing')
  -- a transposed self written in place: the base sees the writes
  local base = v100.zeros({ 3, 2 }, { dtype = 'f64' })
  base:t():scatter_(2, i64{ { 2 }, { 0 } }, f64{ { 4 }, { 5 } })
  T.tensor_eq(base, f64{ { 0, 5 }, { 0, 0 }, { 4, 0 } })
  -- src larger than index: only index's corner is read
  T.tensor_eq(v100.zeros({ 2, 2 }, { dtype = 'f64' }):scatter(1, i64{ { 1 } }, f64{ { 3, 4 }, { 5, 6 } }), f64{ { 0, 0 }, { 3, 0 } })
end)

T.test('scatter: gradients by hand and by gradcheck', function()
  local x = v100.ones({ 2, 3 }, { dtype = 'f64', requires_grad = true })
  local s = f64{ { 7 }, { 8 } }:requires_grad_()
  local w = v100.arange(1, 7, { dtype = 'f64' }):view{ 2, 3 }
  local y = x:scatter(2, i64{ { 0 }, { 2 } }, s)
  T.eq(y.grad_fn, 'ScatterBackward')
  ;(y * w):sum():backward()
  T.tensor_eq(x.grad, f64{ { 0, 2, 3 }, { 4, 5, 0 } }, 'the overwritten positions of self get zero')
  T.tensor_eq(s.grad, f64{ { 1 }, { 6 } }, 'src gets the gradient where it went')
  -- src larger than index: zero outside the corner
  local s2 = v100.rand({ 3, 2 }, { dtype = 'f64' }):requires_grad_()
  local z = v100.zeros({ 2, 2 }, { dtype = 'f64' }):scatter(1, i64{ { 1, 0 } }, s2)
  z:sum():backward()
  T.tensor_eq(s2.grad, f64{ { 1, 1 }, { 0, 0 }, { 0, 0 } })
  local idx = i64{ { 1, 0, 2 }, { 2, 1, 0 } }
  T.ok(v100.autograd.gradcheck(function(a, b) return a:scatter(1, idx, b) end,
    { v100.rand({ 3, 3 }, { dtype = 'f64' }):requires_grad_(), v100.rand({ 2, 4 }, { dtype = 'f64' }):requires_grad_() }))
  -- in place on a non-leaf records too
  local a = v100.rand({ 3, 3 }, { dtype = 'f64', requires_grad = true })
  local h = a * 2
  h:scatter_(1, i64{ { 0, 1, 2 } }, 0)
  h:sum():backward()
  T.tensor_eq(a.grad, f64{ { 0, 2, 2 }, { 2, 0, 2 }, { 2, 2, 0 } })
end)

T.test('scatter: errors name the op and what was wrong', function()
  local x = v100.zeros({ 3, 4 })
  T.raises(function() x:scatter(1, i64{ { 3 } }, 1) end, 'scatter: index 3 is out of bounds for dim 1 with size 3')
  T.raises(function() x:scatter(1, i64{ { -1 } }, 1) end, 'index -1 is out of bounds')
  T.raises(function() x:scatter(1, f64{ { 0 } }, 1) end, 'scatter: index must be i64 or i32, got f64')
  T.raises(function() x:scatter(1, i64{ { 0 } }, v100.ones({ 1, 1 }, { dtype = 'f64' })) end, 'scatter: src dtype f64 differs from self dtype f32')
  T.raises(function() x:scatter(3, i64{ { 0 } }, 1) end, 'scatter')
  T.raises(function() x:scatter(1, i64{ 0 }, 1) end, 'scatter: self, index and src need the same number of dims')
  T.raises(function() x:scatter(1, i64{ { 0, 0, 0, 0, 0 } }, 1) end, 'exceeds')
  T.raises(function() x:scatter(1, i64{ { 0 } }, 1, { reduce = 'mul' }) end, "scatter: reduce must be nil, 'add' or 'multiply', got 'mul'")
  local g = v100.ones({ 3, 4 }, { requires_grad = true })
  T.raises(function() g:scatter(1, i64{ { 0 } }, 2, { reduce = 'multiply' }) end, "scatter: reduce='multiply' has no gradient")
  T.tensor_eq(v100.no_grad(function() return g:scatter(1, i64{ { 0 } }, 2, { reduce = 'multiply' }) end):sum(), v100.tensor(13.0),
    'under no_grad it runs')
  T.raises(function() x:scatter(1, i64{ { 0 } }, 'a') end, 'scatter: src must be a tensor or a number, not a string')
  T.raises(function() v100.zeros({ 2 }, { dtype = 'i32' }):scatter(1, i64{ 0 }, 1e20) end, 'scatter')
  local leaf = v100.zeros({ 3 }, { requires_grad = true })
  T.raises(function() leaf:scatter_(1, i64{ 0 }, 1) end, 'a leaf tensor that requires grad is used in an in-place operation (scatter_')
end)

T.test('gather: any dim of any rank; the index may be smaller than self in the other dims', function()
  T.tensor_eq(f64{ { 1, 2 }, { 3, 4 } }:gather(2, i64{ { 0, 0 }, { 1, 0 } }), f64{ { 1, 1 }, { 4, 3 } })
  local m = v100.arange(1, 10, { dtype = 'f64' }):view{ 3, 3 }
  T.tensor_eq(m:gather(2, i64{ { 0 }, { 2 } }), f64{ { 1 }, { 6 } }, 'index 2x1 of a 3x3')
  local t = v100.arange(1, 25, { dtype = 'f64' }):view{ 2, 3, 4 }
  T.tensor_eq(t:gather(3, i64{ { { 3 }, { 0 } } }), f64{ { { 4 }, { 5 } } })
  T.tensor_eq(t:gather(1, i64{ { { 1, 0 } } }), f64{ { { 13, 2 } } })
  T.tensor_eq(t:gather(-2, i64{ { { 2, 1, 0, 0 } } }), f64{ { { 9, 6, 3, 4 } } })
  local four = v100.arange(0, 16, { dtype = 'f64' }):view{ 2, 2, 2, 2 }
  T.tensor_eq(four:gather(4, i64{ { { { 1 } } } }), f64{ { { { 1 } } } })
  T.tensor_eq(m:gather(1, i64{ { 2 }, { 0 }, { 1 }, { 2 } }), f64{ { 7 }, { 1 }, { 4 }, { 7 } }, 'longer than self along dim')
  T.raises(function() m:gather(2, i64{ { 0 }, { 0 }, { 0 }, { 0 } }) end, 'gather: index size 4 exceeds self size 3 in dim 1')
end)

T.test('index_put: advanced indexing on the first dims (PyTorch x[i, j] = v)', function()
  local x = v100.zeros({ 3, 4 }, { dtype = 'f64' })
  -- x.index_put((tensor([0, 2, -1]), tensor([1, 3, 0])), tensor([5., 6., 7.]))
  T.tensor_eq(x:index_put({ i64{ 0, 2, -1 }, i64{ 1, 3, 0 } }, f64{ 5, 6, 7 }),
    f64{ { 0, 5, 0, 0 }, { 0, 0, 0, 0 }, { 7, 0, 0, 6 } })
  T.eq(x:sum():item(), 0, 'index_put leaves x as it was')
  -- one index tensor: whole rows; a value of one row's shape broadcast over them
  T.tensor_eq(x:index_put(i64{ 1 }, f64{ 1, 2, 3, 4 }), f64{ { 0, 0, 0, 0 }, { 1, 2, 3, 4 }, { 0, 0, 0, 0 } })
  T.tensor_eq(x:index_put({ i64{ 0, 2 } }, 9), f64{ { 9, 9, 9, 9 }, { 0, 0, 0, 0 }, { 9, 9, 9, 9 } })
  -- indices broadcast together: [[0], [1]] with [[0, 2]] names (0,0), (0,2), (1,0), (1,2)
  T.tensor_eq(v100.zeros({ 2, 3 }, { dtype = 'f64' }):index_put({ i64{ { 0 }, { 1 } }, i64{ { 0, 2 } } }, f64{ { 1, 2 }, { 3, 4 } }),
    f64{ { 1, 0, 2 }, { 3, 0, 4 } })
  -- 3-D x, two indices: the rest of the dims is written whole
  local y = v100.zeros({ 2, 2, 2 }, { dtype = 'i64' }):index_put({ i64{ 1 }, i64{ 0 } }, i64{ 7, 8 })
  T.tensor_eq(y, i64{ { { 0, 0 }, { 0, 0 } }, { { 7, 8 }, { 0, 0 } } })
end)

T.test('index_put: bool masks stand for the coordinates of their true elements (PyTorch)', function()
  local x = v100.zeros({ 3, 2 }, { dtype = 'f64' })
  -- x.index_put((tensor([True, False, True]),), tensor([1., 2.])): rows 0 and 2
  T.tensor_eq(x:index_put({ v100.tensor({ true, false, true }) }, f64{ 1, 2 }), f64{ { 1, 2 }, { 0, 0 }, { 1, 2 } })
  -- a 2-D mask covers both dims: one value per true element, row-major
  local m = v100.tensor({ { false, true }, { true, false }, { false, true } })
  T.tensor_eq(x:index_put({ m }, f64{ 5, 6, 7 }), f64{ { 0, 5 }, { 6, 0 }, { 0, 7 } })
  -- a mask and an index tensor broadcast together: rows 1 and 2, columns 1 and 0
  T.tensor_eq(x:index_put({ v100.tensor({ false, true, true }), i64{ 1, 0 } }, 9), f64{ { 0, 0 }, { 0, 9 }, { 9, 0 } })
  local a = v100.zeros({ 3, 2 }, { dtype = 'f64', requires_grad = true })
  local v = v100.zeros({ 3 }, { dtype = 'f64', requires_grad = true })
  ;(a:index_put({ m }, v) * v100.arange(1, 7, { dtype = 'f64' }):view{ 3, 2 }):sum():backward()
  T.tensor_eq(a.grad, f64{ { 1, 0 }, { 0, 4 }, { 5, 0 } })
  T.tensor_eq(v.grad, f64{ 2, 3, 6 })
end)

T.test('index_put: accumulate sums repeats; without it the last stays (CPU)', function()
  local x = v100.zeros({ 3, 4 }, { dtype = 'f64' })
  T.tensor_eq(x:index_put({ i64{ 0, 0 } }, f64{ 1, 2, 3, 4 }, { accumulate = true }),
    f64{ { 2, 4, 6, 8 }, { 0, 0, 0, 0 }, { 0, 0, 0, 0 } })
  T.tensor_eq(v100.ones({ 3 }, { dtype = 'i32' }):index_put({ v100.tensor({ 2, -1, 0 }, { dtype = 'i32' }) },
    v100.tensor({ 5, 6, 7 }, { dtype = 'i32' }), { accumulate = true }), v100.tensor({ 8, 1, 12 }, { dtype = 'i32' }))
  T.tensor_eq(v100.zeros({ 3 }, { dtype = 'f64' }):index_put({ i64{ 1, 1 } }, f64{ 4, 5 }), f64{ 0, 5, 0 })
  T.tensor_eq(x:index_put({ v100.zeros({ 0 }, { dtype = 'i64' }) }, 1), x, 'an empty index writes nothing')
end)

T.test('index_put_: in place, also through a strided view', function()
  local x = v100.zeros({ 2, 3 }, { dtype = 'f64' })
  local r = x:index_put_({ i64{ 1 }, i64{ 2 } }, 3)
  T.ok(r == x, 'index_put_ returns self')
  T.tensor_eq(x, f64{ { 0, 0, 0 }, { 0, 0, 3 } })
  local base = v100.zeros({ 3, 2 }, { dtype = 'f64' })
  base:t():index_put_({ i64{ 0, 1 }, i64{ 2, 0 } }, f64{ 4, 5 }) -- (0,2) and (1,0) of the 2x3 transpose
  T.tensor_eq(base, f64{ { 0, 5 }, { 0, 0 }, { 4, 0 } })
end)

T.test('index_put: gradients by hand and by gradcheck', function()
  local w = v100.arange(1, 7, { dtype = 'f64' }):view{ 2, 3 }
  local x = v100.zeros({ 2, 3 }, { dtype = 'f64', requires_grad = true })
  local v = v100.ones({ 2, 3 }, { dtype = 'f64', requires_grad = true })
  local y = x:index_put({ i64{ 1, 1 } }, v)
  T.eq(y.grad_fn, 'IndexPutBackward')
  ;(y * w):sum():backward()
  T.tensor_eq(x.grad, f64{ { 1, 2, 3 }, { 0, 0, 0 } }, 'the written row of x gets zero')
  T.tensor_eq(v.grad, f64{ { 4, 5, 6 }, { 4, 5, 6 } }, 'each value gets the gradient of its position')
  -- accumulate: x passes its gradient whole; broadcast values are summed over the broadcast
  local x2 = v100.zeros({ 2, 3 }, { dtype = 'f64', requires_grad = true })
  local v2 = v100.ones({ 3 }, { dtype = 'f64', requires_grad = true })
  ;(x2:index_put({ i64{ 0, 1 } }, v2, { accumulate = true }) * w):sum():backward()
  T.tensor_eq(x2.grad, w)
  T.tensor_eq(v2.grad, f64{ 5, 7, 9 })
  local a, b = i64{ 0, 2, 2 }, i64{ 1, 0, 0 }
  T.ok(v100.autograd.gradcheck(function(p, q) return p:index_put({ a, b }, q, { accumulate = true }) end,
    { v100.rand({ 3, 2 }, { dtype = 'f64' }):requires_grad_(), v100.rand({ 3 }, { dtype = 'f64' }):requires_grad_() }))
  T.ok(v100.autograd.gradcheck(function(p, q) return (p * 1):index_put_({ i64{ 2, 0 } }, q) end,
    { v100.rand({ 3, 2 }, { dtype = 'f64' }):requires_grad_(), v100.rand({ 1, 2 }, { dtype = 'f64' }):requires_grad_() }))
end)

T.test('index_put: errors name the op and what was wrong', function()
  local x = v100.zeros({ 3, 4 })
  T.raises(function() x:index_put({ i64{ 0 }, i64{ 4 } }, 1) end,
    'index_put: index 4 is out of bounds for dim 2 with size 4 (index values are 0-based: 0 to 3, or -4 to -1 from the end)')
  T.raises(function() x:index_put({ i64{ -4 } }, 1) end, 'index -4 is out of bounds for dim 1 with size 3')
  T.raises(function() x:index_put({ f64{ 0 } }, 1) end, 'index_put: index 1 must be an i64 or i32 tensor (or bool), got f64')
  T.raises(function() x:index_put({ v100.tensor({ true, false }) }, 1) end,
    'index_put: the bool mask at index 1 (2) does not match the 1 dims of self it covers from dim 1')
  T.raises(function() x:index_put({ i64{ 0 } }, v100.ones({ 4 }, { dtype = 'f64' })) end, 'index_put: values dtype f64 differs from self dtype f32')
  T.raises(function() x:index_put({ i64{ 0, 1 } }, v100.ones({ 3, 4 })) end,
    'index_put: values of shape 3x4 do not broadcast to the indexed shape 2x4')
  T.raises(function() x:index_put({ i64{ 0, 1 }, i64{ 0, 1, 2 } }, 1) end, 'index_put')
  T.raises(function() x:index_put({ i64{ 0 }, i64{ 0 }, i64{ 0 } }, 1) end, 'index_put: 3 index tensors for a 2-dim tensor')
  T.raises(function() x:index_put({}, 1) end, 'index_put: 0 index tensors')
  T.raises(function() x:index_put({ i64{ 0 } }, 1, { accumulate = 1 }) end, 'index_put: accumulate must be a boolean')
  T.raises(function() x:index_put(5, 1) end, 'index_put: indices must be a tensor or a list of tensors')
  T.raises(function() v100.zeros({ 3 }):expand{ 2, 3 }:index_put_({ i64{ 0 } }, 1) end, 'index_put_')
  local leaf = v100.zeros({ 3 }, { requires_grad = true })
  T.raises(function() leaf:index_put_({ i64{ 0 } }, 1) end, 'a leaf tensor that requires grad is used in an in-place operation (index_put_')
end)

T.test('index_add, index_copy, index_fill: PyTorch documentation examples', function()
  local x = v100.ones({ 5, 3 }, { dtype = 'f64' })
  local t = v100.arange(1, 10, { dtype = 'f64' }):view{ 3, 3 }
  local index = i64{ 0, 4, 2 }
  T.tensor_eq(x:index_add(1, index, t), f64{ { 2, 3, 4 }, { 1, 1, 1 }, { 8, 9, 10 }, { 1, 1, 1 }, { 5, 6, 7 } })
  T.tensor_eq(v100.zeros({ 5, 3 }, { dtype = 'f64' }):index_copy(1, index, t),
    f64{ { 1, 2, 3 }, { 0, 0, 0 }, { 7, 8, 9 }, { 0, 0, 0 }, { 4, 5, 6 } })
  T.tensor_eq(t:index_fill(2, i64{ 0, 2 }, -1), f64{ { -1, 2, -1 }, { -1, 5, -1 }, { -1, 8, -1 } })
  T.tensor_eq(x:index_add(1, i64{ 1, 1 }, f64{ { 1, 2, 3 }, { 4, 5, 6 } }), f64{ { 1, 1, 1 }, { 6, 8, 10 }, { 1, 1, 1 }, { 1, 1, 1 }, { 1, 1, 1 } },
    'repeats add up')
  local y = v100.zeros({ 2, 2 }, { dtype = 'i64' })
  T.ok(y:index_fill_(-1, v100.tensor({ 1 }, { dtype = 'i32' }), 4) == y, 'index_fill_ returns self')
  T.tensor_eq(y, i64{ { 0, 4 }, { 0, 4 } })
  y:index_add_(1, i64{ 0 }, i64{ { 1, 1 } })
  y:index_copy_(2, i64{ 0 }, i64{ { 9 }, { 8 } })
  T.tensor_eq(y, i64{ { 9, 5 }, { 8, 4 } })
end)

T.test('index_add, index_copy, index_fill: gradients and errors', function()
  local w = v100.arange(1, 7, { dtype = 'f64' }):view{ 3, 2 }
  local x = v100.zeros({ 3, 2 }, { dtype = 'f64', requires_grad = true })
  local s = v100.zeros({ 2, 2 }, { dtype = 'f64', requires_grad = true })
  ;(x:index_copy(1, i64{ 2, 0 }, s) * w):sum():backward()
  T.tensor_eq(x.grad, f64{ { 0, 0 }, { 3, 4 }, { 0, 0 } })
  T.tensor_eq(s.grad, f64{ { 5, 6 }, { 1, 2 } })
  x.grad, s.grad = nil, nil
  ;(x:index_add(1, i64{ 2, 2 }, s) * w):sum():backward()
  T.tensor_eq(x.grad, w)
  T.tensor_eq(s.grad, f64{ { 5, 6 }, { 5, 6 } })
  x.grad = nil
  ;(x:index_fill(2, i64{ 1 }, 3) * w):sum():backward()
  T.tensor_eq(x.grad, f64{ { 1, 0 }, { 3, 0 }, { 5, 0 } })
  local m = v100.zeros({ 3, 2 })
  T.raises(function() m:index_add(1, i64{ 3 }, v100.ones({ 1, 2 })) end, 'index_add: index 3 is out of bounds for dim 1 with size 3')
  T.raises(function() m:index_copy_(2, i64{ -1 }, v100.ones({ 3, 1 })) end, 'index_copy_: index -1 is out of bounds')
  T.raises(function() m:index_add(1, i64{ 0, 1 }, v100.ones({ 3, 2 })) end,
    'index_add: source must have self\'s shape with 2 (the index\'s length) in dim 1')
  T.raises(function() m:index_copy(1, i64{ 0 }, v100.ones({ 1, 2 }, { dtype = 'f64' })) end, 'index_copy: source dtype f64 differs from self dtype f32')
  T.raises(function() m:index_fill(1, i64{ { 0 } }, 1) end, 'index_fill: index must be a 1-D i64 or i32 tensor')
  T.raises(function() m:index_fill(3, i64{ 0 }, 1) end, 'index_fill')
  T.raises(function() m:index_fill(1, i64{ 0 }, 'a') end, 'index_fill: the value must be a number')
  T.raises(function() v100.zeros({ 2 }, { requires_grad = true }):index_fill_(1, i64{ 0 }, 1) end, 'in-place operation (index_fill_')
end)

T.test('one_hot: i64 classes to an i64 [..., num_classes] tensor', function()
  T.tensor_eq(i64{ 0, 2, 1 }:one_hot(), i64{ { 1, 0, 0 }, { 0, 0, 1 }, { 0, 1, 0 } }, 'num_classes from max + 1')
  T.tensor_eq(i64{ { 0, 2 }, { 1, 3 } }:one_hot(5),
    i64{ { { 1, 0, 0, 0, 0 }, { 0, 0, 1, 0, 0 } }, { { 0, 1, 0, 0, 0 }, { 0, 0, 0, 1, 0 } } })
  local r = nn.F.one_hot(v100.tensor({ 1, 0 }, { dtype = 'i32' }), 2)
  T.eq(r.dtype, 'i64')
  T.tensor_eq(r, i64{ { 0, 1 }, { 1, 0 } })
  T.tensor_eq(i64(2):one_hot(4), i64{ 0, 0, 1, 0 }, 'a 0-dim tensor gives one row')
  T.eq(v100.zeros({ 0, 2 }, { dtype = 'i64' }):one_hot(4).shape, { 0, 2, 4 })
  T.raises(function() i64{ 0, 3 }:one_hot(3) end, 'one_hot: class value 3 is out of range for 3 classes (values are 0-based: 0 to 2)')
  T.raises(function() i64{ 0, -1 }:one_hot(3) end, 'one_hot: class value -1 is negative')
  T.raises(function() f64{ 0, 1 }:one_hot(3) end, 'one_hot: the class values must be an i64 or i32 tensor, got f64')
  T.raises(function() v100.zeros({ 0 }, { dtype = 'i64' }):one_hot() end, 'one_hot: cannot infer the number of classes from an empty tensor')
  T.raises(function() i64{ 0 }:one_hot(-2) end, 'one_hot: num_classes must be -1')
end)

T.run()
