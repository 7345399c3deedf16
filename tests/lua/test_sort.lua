-- tests/lua/test_sort.lua: sorting and selection (docs/LUA_API.md, "Sorting and selection") against
-- small hand-derived expectations in PyTorch's semantics: stable order, NaN largest, -0.0 tied with
-- +0.0, 0-based indices, 1-based dims and k; edge cases and error messages. The sweep
-- (tests/lua/sweep/sort.lua) covers dtypes and layouts against f64 and CUDA against the CPU.
local T = require 'testlib'
local v100 = require 'v100'

local nan = 0 / 0
local function t(x, dt) return v100.tensor(x, { dtype = dt or 'f32' }) end
local function I(x) return v100.tensor(x, { dtype = 'i64' }) end
local function is_nan(x) return x ~= x end
-- a 1-D float tensor as a list, NaN written as the string 'nan' and -0.0 as '-0' (so both compare)
local function list(x)
  local out = {}
  for i, v in ipairs(x:to('f64'):totable()) do
    out[i] = is_nan(v) and 'nan' or (v == 0 and 1 / v < 0) and '-0' or v
  end
  return out
end

T.test('sort: ascending and descending, stable ties, indices 0-based', function()
  local x = t({ 3, 1, 2, 1, 3 })
  local v, i = x:sort()
  T.eq(v:totable(), { 1, 1, 2, 3, 3 })
  T.eq(i:totable(), { 1, 3, 2, 0, 4 }) -- the two 1s and the two 3s in input order
  T.eq(i.dtype, 'i64')
  v, i = x:sort(1, { descending = true })
  T.eq(v:totable(), { 3, 3, 2, 1, 1 })
  T.eq(i:totable(), { 0, 4, 2, 1, 3 }) -- descending keeps ties in input order too (stable)
  T.eq(x:argsort():totable(), { 1, 3, 2, 0, 4 })
  T.eq(x:argsort({ descending = true }):totable(), { 0, 4, 2, 1, 3 })
  T.eq(x:sort({ stable = false }):totable(), { 1, 1, 2, 3, 3 }) -- accepted; the sort is always stable
end)

T.test('sort: long rows keep ties in input order (the merge path, not only short runs)', function()
  -- 200 elements i % 3: the 0s are at 0, 3, ..., 198, the 1s at 1, 4, ..., 199, the 2s at 2, ..., 197
  local x = (v100.arange(0, 200, { dtype = 'i64' }) % 3):to('f32')
  local want, want_desc = {}, {}
  for r = 0, 2 do for i = r, 199, 3 do want[#want + 1] = i end end
  for r = 2, 0, -1 do for i = r, 199, 3 do want_desc[#want_desc + 1] = i end end
  local _, i = x:sort()
  T.eq(i:totable(), want)
  _, i = x:sort(1, { descending = true })
  T.eq(i:totable(), want_desc)
  _, i = x:view(4, 50):t():contiguous():t():sort(2) -- the same on strided rows of 50
  T.eq(i[1]:totable(), (function() local l = {} for r = 0, 2 do for j = r, 49, 3 do l[#l + 1] = j end end return l end)())
end)

T.test('sort: NaN is the largest, -0.0 ties with +0.0 and keeps its bits', function()
  local x = t({ 2, nan, -1, 0.0, -0.0, nan, -math.huge, math.huge })
  local v, i = x:sort()
  T.eq(list(v), { -math.huge, -1, 0, '-0', 2, math.huge, 'nan', 'nan' })
  T.eq(i:totable(), { 6, 2, 3, 4, 0, 7, 1, 5 })
  v, i = x:sort(1, { descending = true })
  T.eq(list(v), { 'nan', 'nan', math.huge, 2, 0, '-0', -1, -math.huge })
  T.eq(i:totable(), { 1, 5, 7, 0, 3, 4, 2, 6 })
end)

T.test('sort: along a dim of a matrix, transposed and narrowed inputs', function()
  local x = t({ { 3, 1, 2 }, { 0, 5, 4 } })
  local v, i = x:sort(1)
  T.eq(v:totable(), { { 0, 1, 2 }, { 3, 5, 4 } })
  T.eq(i:totable(), { { 1, 0, 0 }, { 0, 1, 1 } })
  v, i = x:t():sort() -- rows of the transpose: {3,0}, {1,5}, {2,4}
  T.eq(v:totable(), { { 0, 3 }, { 1, 5 }, { 2, 4 } })
  T.eq(i:totable(), { { 1, 0 }, { 0, 1 }, { 0, 1 } })
  v, i = x:narrow(2, 2, 2):sort(-1, { descending = true }) -- {1,2}, {5,4}
  T.eq(v:totable(), { { 2, 1 }, { 5, 4 } })
  T.eq(i:totable(), { { 1, 0 }, { 0, 1 } })
end)

T.test('sort: integer, bool and f16 ties', function()
  local v, i = I({ 5, -7, 5, 0 }):sort()
  T.eq(v:totable(), { -7, 0, 5, 5 })
  T.eq(i:totable(), { 1, 3, 0, 2 })
  v, i = v100.tensor({ true, false, true, false }):sort()
  T.eq(v:totable(), { false, false, true, true })
  T.eq(i:totable(), { 1, 3, 0, 2 })
  -- 1.0001 and 1.0002 are both 1.0 in f16: a tie, kept in input order
  v, i = t({ 1.0002, 0.5, 1.0001, 0.5 }, 'f16'):sort(1, { descending = true })
  T.eq(v:totable(), { 1, 1, 0.5, 0.5 })
  T.eq(i:totable(), { 0, 2, 1, 3 })
  v, i = t({ -2, 3, -2 }, 'i32'):sort()
  T.eq(v.dtype, 'i32')
  T.eq(i:totable(), { 0, 2, 1 })
end)

T.test('sort: empty dims, size-1 dims, 0-dim', function()
  local v, i = v100.zeros({ 3, 0 }):sort(2)
  T.eq(v.shape, { 3, 0 })
  T.eq(i.shape, { 3, 0 })
  v, i = t({ { 4 }, { 2 } }):sort(2)
  T.eq(v:totable(), { { 4 }, { 2 } })
  T.eq(i:totable(), { { 0 }, { 0 } })
  v, i = v100.tensor(7.5):sort()
  T.eq(v.shape, {})
  T.eq(v:item(), 7.5)
  T.eq(i:item(), 0)
end)

T.test('topk: largest / smallest, ties lower index first, k = 0 and k = n', function()
  local x = t({ 1, 3, 3, 2, 3 })
  local v, i = x:topk(2)
  T.eq(v:totable(), { 3, 3 })
  T.eq(i:totable(), { 1, 2 })
  v, i = x:topk(2, 1, { largest = false })
  T.eq(v:totable(), { 1, 2 })
  T.eq(i:totable(), { 0, 3 })
  v, i = x:topk(0)
  T.eq(v.shape, { 0 })
  T.eq(i.shape, { 0 })
  v, i = x:topk(5)
  T.eq(v:totable(), { 3, 3, 3, 2, 1 })
  T.eq(i:totable(), { 1, 2, 4, 3, 0 })
  v, i = t({ 1, nan, 5 }):topk(2) -- NaN counts as the largest, as in PyTorch
  T.eq(list(v), { 'nan', 5 })
  T.eq(i:totable(), { 1, 2 })
  v, i = t({ { 1, 9 }, { 8, 2 }, { 5, 5 } }):topk(1, 1)
  T.eq(v:totable(), { { 8, 9 } })
  T.eq(i:totable(), { { 1, 0 } })
end)

T.test('topk: k out of range names topk and the size', function()
  T.raises(function() t({ 1, 2, 3 }):topk(4) end, { 'topk', 'k = 4', 'size 3' })
  T.raises(function() t({ 1, 2, 3 }):topk(-1) end, { 'topk', 'k = -1' })
  T.raises(function() t({ { 1, 2 } }):topk(1, 3) end, { 'topk', 'dim 3' })
  T.raises(function() t({ 1, 2 }):topk(1, 1, { larges = true }) end, "unknown option 'larges'")
  T.raises(function() t({ 1, 2 }):topk(1, 1, { largest = 1 }) end, { 'topk', "'largest' must be a boolean" })
end)

T.test('kthvalue: the k-th smallest (k 1-based), keepdim, NaN last', function()
  local x = t({ { 4, 1, 3, 1 }, { 2, nan, 0, 7 } })
  local v, i = x:kthvalue(2)
  T.eq(v:totable(), { 1, 2 })
  T.eq(i:totable(), { 3, 0 }) -- row 1: the second 1 (stable); row 2: 0, 2, 7, nan
  v, i = x:kthvalue(4, 2, true)
  T.eq(v.shape, { 2, 1 })
  T.eq(list(v:view(-1)), { 4, 'nan' })
  T.eq(i:totable(), { { 0 }, { 1 } })
  v, i = x:kthvalue(1, 1)
  T.eq(v:totable(), { 2, 1, 0, 1 }) -- NaN is larger than 1 in column 2
  T.eq(i:totable(), { 1, 0, 1, 0 })
  T.raises(function() x:kthvalue(5) end, { 'kthvalue', 'k = 5', 'size 4', '1-based' })
  T.raises(function() x:kthvalue(0) end, { 'kthvalue', 'k = 0' })
end)

T.test('median: lower median, with and without dim, NaN propagates', function()
  local x = t({ { 4, 1, 3, 2 }, { 5, 9, 7, 6 } })
  local m = x:median()
  T.eq(m.shape, {})
  T.eq(m:item(), 4) -- sorted 1 2 3 4 5 6 7 9: the lower of the two middle values
  local v, i = x:median(2)
  T.eq(v:totable(), { 2, 6 })
  T.eq(i:totable(), { 3, 3 })
  v, i = x:median(1, true)
  T.eq(v:totable(), { { 4, 1, 3, 2 } })
  T.eq(i:totable(), { { 0, 0, 0, 0 } })
  v, i = t({ { 1, nan, 3, nan }, { 3, 1, 2, 0 } }):median(2) -- a row with NaN: its first NaN
  T.eq(list(v), { 'nan', 1 })
  T.eq(i:totable(), { 1, 1 })
  T.ok(is_nan(t({ 1, nan, 2 }):median():item()))
  T.eq(I({ 5, 1, 4 }):median():item(), 4)
  T.ok(is_nan(v100.zeros({ 0 }):median():item()), 'an empty float tensor: NaN')
  T.raises(function() v100.zeros({ 3, 0 }):median(2) end, { 'median', 'dim 2 has size 0' })
end)

T.test('unique: sorted values, inverse, counts; NaN distinct, -0 == 0', function()
  local x = I({ { 3, 1 }, { 3, 2 }, { 1, 3 } })
  T.eq(x:unique():totable(), { 1, 2, 3 })
  local u, inv, c = x:unique({ return_inverse = true, return_counts = true })
  T.eq(u:totable(), { 1, 2, 3 })
  T.eq(inv:totable(), { { 2, 0 }, { 2, 1 }, { 0, 2 } })
  T.eq(c:totable(), { 2, 1, 3 })
  u, c = x:unique({ return_counts = true }) -- PyTorch's order: values, [inverse], [counts]
  T.eq(c:totable(), { 2, 1, 3 })
  u, inv = t({ nan, 0.0, -0.0, nan, 1 }):unique({ return_inverse = true })
  T.eq(list(u), { 0, 1, 'nan', 'nan' })
  T.eq(inv:totable(), { 2, 0, 0, 3, 1 })
  u, inv, c = v100.zeros({ 2, 0 }):unique({ return_inverse = true, return_counts = true })
  T.eq(u.shape, { 0 })
  T.eq(inv.shape, { 2, 0 })
  T.eq(c.shape, { 0 })
  T.eq(v100.tensor({ true, false, true }):unique():totable(), { false, true })
  T.raises(function() x:unique({ return_inverse = 'yes' }) end, "'return_inverse' must be a boolean")
end)

T.test('searchsorted: left / right, batched, numbers, i32, NaN', function()
  local s = t({ 1, 3, 5, 7, 9 })
  T.eq(v100.searchsorted(s, t({ 3, 6, 9, 0, 10 })):totable(), { 1, 3, 4, 0, 5 })
  T.eq(v100.searchsorted(s, t({ 3, 6, 9, 0, 10 }), { right = true }):totable(), { 2, 3, 5, 0, 5 })
  local r = v100.searchsorted(t({ { 1, 3, 5 }, { 2, 4, 6 } }), t({ { 3, 6 }, { 3, 6 } }), { out_int32 = true })
  T.eq(r:totable(), { { 1, 3 }, { 1, 2 } })
  T.eq(r.dtype, 'i32')
  local n = v100.searchsorted(s, 5)
  T.eq(n.shape, {})
  T.eq(n:item(), 2)
  T.eq(v100.searchsorted(s, 5.5):item(), 3) -- compared exactly, not rounded to the sequence's dtype
  T.eq(v100.searchsorted(I({ 0, 10, 20 }), 10, { right = true }):item(), 2)
  T.eq(v100.searchsorted(s, t({ nan, -0.0 })):totable(), { 5, 0 })
  T.eq(v100.searchsorted(t({}), t({ 1, 2 })):totable(), { 0, 0 })
  T.eq(v100.searchsorted(s:narrow(1, 2, 3), t({ 4 })):totable(), { 1 }) -- a view: 3 5 7
  T.raises(function() v100.searchsorted(t({ { 1, 2 }, { 3, 4 } }), t({ 1, 2, 3 })) end,
    { 'searchsorted', 'same leading dims' })
  T.raises(function() v100.searchsorted(v100.tensor(1.0), t({ 1 })) end, { 'searchsorted', '0-dim' })
end)

T.test('gradients go to the picked positions; indices have none', function()
  local x = t({ { 3, 1, 2 }, { 0, 5, 4 } }, 'f64'):requires_grad_()
  local v = x:sort(2, { descending = true })
  ;(v * t({ { 1, 2, 3 }, { 1, 2, 3 } }, 'f64')):sum():backward()
  -- row 1 descending picks 3 (pos 0), 2 (pos 2), 1 (pos 1): weights 1, 2, 3 go there
  T.eq(x.grad:totable(), { { 1, 3, 2 }, { 3, 1, 2 } })
  x.grad = nil
  local tv, ti = x:topk(1, 2)
  tv:sum():backward()
  T.eq(x.grad:totable(), { { 1, 0, 0 }, { 0, 1, 0 } })
  T.ok(not ti.requires_grad)
  x.grad = nil
  x:median():backward() -- sorted 0 1 2 3 4 5: the lower median 2 (row 1, col 3)
  T.eq(x.grad:totable(), { { 0, 0, 1 }, { 0, 0, 0 } })
  x.grad = nil
  x:kthvalue(2, 1):sum():backward() -- each column's larger element
  T.eq(x.grad:totable(), { { 1, 0, 0 }, { 0, 1, 1 } })
end)

T.test('bad dims name the op', function()
  T.raises(function() t({ 1, 2 }):sort(2) end, { 'sort', 'dim 2' })
  T.raises(function() v100.tensor(1.0):sort(2) end, { 'sort', 'dim 2', '0-dim' })
  T.raises(function() t({ 1, 2 }):median(3) end, { 'median', 'dim 3' })
end)

T.run()
