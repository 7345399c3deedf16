-- tests/lua/test_einsum.lua: v100.einsum against values worked out by hand with PyTorch's rules
-- (torch.einsum: explicit and implicit output, the ellipsis, diagonals, size-1 broadcasting,
-- spaces), its gradients, and every error message of runtime/ops/einsum.c and bindings/l_einsum.c.
-- The random sweep against a naive loop is tests/lua/sweep/linalg.lua.
local T = require 'testlib'
local v100 = require 'v100'
local ref = require 'einsum_ref'

local function f(tbl, dt) return v100.tensor(tbl, { dtype = dt or 'f32' }) end
local A = f({ { 1, 2, 3 }, { 4, 5, 6 } })           -- 2x3
local B = f({ { 1, 0 }, { 0, 1 }, { 1, 1 } })       -- 3x2
local M = f({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }) -- 3x3
local X = v100.arange(0, 8):to('f32'):view({ 2, 2, 2 }) -- [[[0,1],[2,3]],[[4,5],[6,7]]]

T.test('matrix product: explicit, implicit, operands as a list, spaces', function()
  local want = { { 4, 5 }, { 10, 11 } }
  T.alleq(v100.einsum('ij,jk->ik', A, B), want)
  T.alleq(v100.einsum('ij,jk', A, B), want)
  T.alleq(v100.einsum('ij,jk->ik', { A, B }), want)
  T.alleq(v100.einsum(' i j , j k -> i k ', A, B), want)
  -- the output order is the user's: the transposed product
  T.alleq(v100.einsum('ij,jk->ki', A, B), { { 4, 10 }, { 5, 11 } })
  T.alleq(v100.einsum('ij,kj->ik', A, A), { { 14, 32 }, { 32, 77 } })
end)

T.test('one operand: transpose, sums, identity', function()
  T.alleq(v100.einsum('ij->ji', A), { { 1, 4 }, { 2, 5 }, { 3, 6 } })
  T.alleq(v100.einsum('ji', A), { { 1, 4 }, { 2, 5 }, { 3, 6 } }) -- implicit output 'ij': a transpose
  T.alleq(v100.einsum('ij', A), A:totable())
  T.alleq(v100.einsum('ij->i', A), { 6, 15 })
  T.alleq(v100.einsum('ij->j', A), { 5, 7, 9 })
  local s = v100.einsum('ij->', A)
  T.eq(s.shape, {})
  T.eq(s:item(), 21)
end)

T.test('diagonals: ii->i, trace, iij->j, iji->ij', function()
  T.alleq(v100.einsum('ii->i', M), { 1, 5, 9 })
  T.eq(v100.einsum('ii', M):item(), 15)
  T.eq(v100.einsum('ii->', M):item(), 15)
  T.alleq(v100.einsum('iij->j', X), { 6, 8 })        -- X[0,0,:] + X[1,1,:]
  T.alleq(v100.einsum('iij->ij', X), { { 0, 1 }, { 6, 7 } })
  T.alleq(v100.einsum('iji->ij', X), { { 0, 2 }, { 5, 7 } }) -- X[i,j,i]
  T.alleq(v100.einsum('iii->i', X), { 0, 7 })
  -- the diagonal of a transposed view reads through its strides
  T.alleq(v100.einsum('ii->i', M:t()), { 1, 5, 9 })
  T.alleq(v100.einsum('ij,ii->j', M, M), { 1 * 1 + 4 * 5 + 7 * 9, 2 * 1 + 5 * 5 + 8 * 9, 3 * 1 + 6 * 5 + 9 * 9 })
end)

T.test('vectors: outer, dot, elementwise', function()
  local u, w = f({ 1, 2 }), f({ 3, 4, 5 })
  T.alleq(v100.einsum('i,j->ij', u, w), { { 3, 4, 5 }, { 6, 8, 10 } })
  T.alleq(v100.einsum('i,j', u, w), { { 3, 4, 5 }, { 6, 8, 10 } })
  T.alleq(v100.einsum('j,i', u, w), { { 3, 6 }, { 4, 8 }, { 5, 10 } }) -- implicit 'ij': i is w's
  local p, q = f({ 1, 2, 3 }), f({ 4, 5, 6 })
  T.eq(v100.einsum('i,i->', p, q):item(), 32)
  T.eq(v100.einsum('i,i', p, q):item(), 32) -- i twice: summed
  T.alleq(v100.einsum('i,i->i', p, q), { 4, 10, 18 })
  T.alleq(v100.einsum('ij,ij->ij', A, A), { { 1, 4, 9 }, { 16, 25, 36 } })
  T.alleq(v100.einsum('ij,k->ik', A, p), { { 6, 12, 18 }, { 15, 30, 45 } }) -- j summed in A alone
end)

T.test('batched products and three or more operands', function()
  local a = f({ { { 1, 2 } }, { { 3, 4 } } })         -- 2x1x2
  local b = f({ { { 1 }, { 1 } }, { { 2 }, { 0 } } }) -- 2x2x1
  T.alleq(v100.einsum('bij,bjk->bik', a, b), { { { 3 } }, { { 6 } } })
  local c1, c2, c3 = f({ { 1, 2 } }), f({ { 1, 0 }, { 1, 1 } }), f({ { 2 }, { 3 } })
  T.alleq(v100.einsum('ij,jk,kl->il', c1, c2, c3), { { 12 } }) -- [1 2] [1 0; 1 1] = [3 2]; [3 2] [2; 3] = 12
  T.alleq(v100.einsum('ij,jk,kl', { c1, c2, c3 }), { { 12 } })
  T.eq(v100.einsum('i,i,i->', f({ 1, 2 }), f({ 3, 4 }), f({ 5, 6 })):item(), 1 * 3 * 5 + 2 * 4 * 6)
  -- a label shared by three operands and kept: a batch dim of both contractions
  T.alleq(v100.einsum('i,i,i->i', f({ 1, 2 }), f({ 3, 4 }), f({ 5, 6 })), { 15, 48 })
end)

T.test('ellipsis: broadcast batch dims, in the middle, summed, implicit', function()
  local r = v100.einsum('...ij,...jk', v100.ones({ 2, 1, 2, 3 }), v100.ones({ 3, 3, 4 }))
  T.eq(r.shape, { 2, 3, 2, 4 })
  T.alleq(r, v100.full({ 2, 3, 2, 4 }, 3):totable())
  T.alleq(v100.einsum('...ii->...i', X), { { 0, 3 }, { 4, 7 } })
  T.alleq(v100.einsum('...ij->ij', X), { { 4, 6 }, { 8, 10 } }) -- ellipsis dims not in the output are summed
  T.alleq(v100.einsum('...ij->...ji', X), { { { 0, 2 }, { 1, 3 } }, { { 4, 6 }, { 5, 7 } } })
  T.alleq(v100.einsum('i...->...', A), { 5, 7, 9 })
  T.alleq(v100.einsum('...', A), A:totable())
  T.alleq(v100.einsum('i...j,j->i...', X, f({ 1, -1 })), { { -1, -1 }, { -1, -1 } })
  -- an ellipsis over no dims
  T.alleq(v100.einsum('...ij,...jk->...ik', A, B), { { 4, 5 }, { 10, 11 } })
end)

T.test('size-1 dims broadcast across operands', function()
  local c = f({ { 2 }, { 3 } }) -- 2x1 against A's 2x3
  T.alleq(v100.einsum('ij,ij->ij', c, A), { { 2, 4, 6 }, { 12, 15, 18 } })
  T.alleq(v100.einsum('ij,ij->i', c, A), { 12, 45 }) -- j contracted: 2*(1+2+3), 3*(4+5+6)
  T.alleq(v100.einsum('ij,ij->j', c, A), { 14, 19, 24 })
  T.alleq(v100.einsum('bij,bjk->bik', f({ { { 1, 2 } } }), f({ { { 1 }, { 1 } }, { { 2 }, { 0 } } })), { { { 3 } }, { { 2 } } })
end)

T.test('upper-case labels sort before lower-case ones (implicit output)', function()
  T.alleq(v100.einsum('aB', A), { { 1, 4 }, { 2, 5 }, { 3, 6 } }) -- output 'Ba'
  T.alleq(v100.einsum('Ba', A), A:totable())
  T.alleq(v100.einsum('iJ,Jk->ik', A, B), { { 4, 5 }, { 10, 11 } })
end)

T.test('scalars, empty dims and dtypes', function()
  local s = f(2)
  T.alleq(v100.einsum(',i->i', s, f({ 1, 2, 3 })), { 2, 4, 6 })
  T.eq(v100.einsum('->', s):item(), 2)
  T.eq(v100.einsum('', s):item(), 2)
  local z = v100.einsum('ij,jk->ik', v100.ones({ 2, 0 }), v100.ones({ 0, 3 }))
  T.eq(z.shape, { 2, 3 })
  T.alleq(z, { { 0, 0, 0 }, { 0, 0, 0 } })
  T.eq(v100.einsum('ij->i', v100.ones({ 2, 0 })):totable(), { 0, 0 })
  T.eq(v100.einsum('ij,jk->ik', v100.ones({ 0, 2 }), v100.ones({ 2, 3 })).shape, { 0, 3 })
  for _, dt in ipairs({ 'f16', 'bf16', 'f64' }) do
    local r = v100.einsum('ij,jk->ik', A:to(dt), B:to(dt))
    T.eq(r.dtype, dt)
    T.alleq(r, { { 4, 5 }, { 10, 11 } })
  end
end)

T.test('autocast: the operands are cast as matmul\'s, mixed float dtypes meet in the half dtype', function()
  local amp = require 'v100.amp'
  local p = amp.policy('O1', { dtype = 'fp16' })
  local r = p:autocast(function() return v100.einsum('ij,jk->ik', A, B:to('f16')) end)
  T.eq(r.dtype, 'f16')
  T.alleq(r, { { 4, 5 }, { 10, 11 } })
  local r3 = p:autocast(function() return v100.einsum('ij,jk,kl->il', f({ { 1, 2 } }), f({ { 1, 0 }, { 1, 1 } }, 'bf16'), f({ { 2 }, { 3 } })) end)
  T.eq(r3.dtype, 'f16')
  T.alleq(r3, { { 12 } })
  -- outside a region the dtypes must agree
  T.raises(function() v100.einsum('ij,jk->ik', A, B:to('f16')) end, 'operand 2 is f16 but operand 1 is f32')
end)

T.test('against the naive reference: random operands of several equations', function()
  local cases = {
    { 'abc,cd,db->a', { 2, 3, 4 }, { 4, 5 }, { 5, 3 } },
    { 'ab,ab,ab->', { 3, 4 }, { 3, 4 }, { 3, 4 } },
    { 'aab,bc->ca', { 3, 3, 4 }, { 4, 2 } },
    { '...a,b...->...ab', { 2, 3, 4 }, { 5, 2, 3 } },
    { 'i,j,k->ijk', { 2 }, { 3 }, { 4 } },
    -- batch labels of all three kinds (size 1 in a, in b, equal), merged into three GEMM batch dims
    { 'abcd,abce->abcde', { 1, 3, 2, 4 }, { 5, 3, 1, 2 } },
    -- seven batch labels: one GEMM batch dim
    { 'abcdefg,abcdefg->abcdefg', { 2, 1, 2, 1, 2, 1, 2 }, { 2, 1, 2, 1, 2, 1, 2 } },
  }
  for _, c in ipairs(cases) do
    local ops = {}
    for i = 2, #c do ops[#ops + 1] = v100.randn(c[i], { dtype = 'f64' }) end
    T.allclose(v100.einsum(c[1], ops), ref.einsum(c[1], ops), 1e-12, 1e-12, c[1])
  end
end)

T.test('gradients worked out by hand', function()
  local a = A:to('f64'):requires_grad_()
  v100.einsum('ij->', a):backward()
  T.alleq(a.grad, { { 1, 1, 1 }, { 1, 1, 1 } })
  local m = M:to('f64'):requires_grad_()
  v100.einsum('ii->i', m):sum():backward()
  T.alleq(m.grad, { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } })
  local m2 = M:to('f64'):requires_grad_()
  v100.einsum('ii', m2):backward()
  T.alleq(m2.grad, { { 1, 0, 0 }, { 0, 1, 0 }, { 0, 0, 1 } })
  -- d/dA sum(A B) = 1 B^T: each row is B's row sums [1, 1, 2]; d/dB = A^T 1: A's column sums
  local a2, b2 = A:to('f64'):requires_grad_(), B:to('f64'):requires_grad_()
  v100.einsum('ij,jk->ik', a2, b2):sum():backward()
  T.alleq(a2.grad, { { 1, 1, 2 }, { 1, 1, 2 } })
  T.alleq(b2.grad, { { 5, 5 }, { 7, 7 }, { 9, 9 } })
  -- the diagonal's gradient lands on the diagonal of a 3-D operand
  local x = X:to('f64'):requires_grad_()
  v100.einsum('iij->j', x):backward(v100.tensor({ 10, 20 }, { dtype = 'f64' }))
  T.alleq(x.grad, { { { 10, 20 }, { 0, 0 } }, { { 0, 0 }, { 10, 20 } } })
  -- a size-1 operand broadcast against a larger one gets the summed gradient
  local c = f({ { 2 }, { 3 } }, 'f64'):requires_grad_()
  v100.einsum('ij,ij->ij', c, A:to('f64')):sum():backward()
  T.alleq(c.grad, { { 6 }, { 15 } })
  T.ok(v100.autograd.gradcheck(function(p, q) return v100.einsum('bij,bjk->bik', p, q) end,
    { v100.randn({ 2, 3, 4 }, { dtype = 'f64' }):requires_grad_(), v100.randn({ 2, 4, 2 }, { dtype = 'f64' }):requires_grad_() }),
    'gradcheck bij,bjk->bik')
end)

T.test('errors name einsum, the equation, the operand, the index and the sizes', function()
  T.raises(function() v100.einsum('ij,jk->ik', A, A) end, "einsum 'ij,jk->ik': index j has size 3 in operand 1 but 2 in operand 2")
  T.raises(function() v100.einsum('ii->i', A) end, "einsum 'ii->i': index i is repeated in operand 1 with sizes 2 and 3")
  T.raises(function() v100.einsum('ij,jk', A) end, "einsum 'ij,jk': the equation has subscripts for 2 operands but 1 operand was given")
  T.raises(function() v100.einsum('ij', A, B) end, "einsum 'ij': the equation has subscripts for 1 operand but 2 operands were given")
  T.raises(function() v100.einsum('ijk->i', A) end, "einsum 'ijk->i': operand 1 has 2 dims but its subscripts 'ijk' name 3")
  T.raises(function() v100.einsum('i,i', f({ 1 }), A) end, "einsum 'i,i': operand 2 has 2 dims but its subscripts 'i' name 1")
  T.raises(function() v100.einsum('...ijk', A) end, "einsum '...ijk': operand 1 has 2 dims but its subscripts '...ijk' name at least 3")
  T.raises(function() v100.einsum('...ij,...jk', v100.ones({ 2, 3, 4 }), v100.ones({ 5, 4, 2 })) end,
    "einsum '...ij,...jk': the ellipsis dims of operand 1 (2x3x4) and operand 2 (5x4x2) cannot be broadcast (sizes 2 and 5)")
  T.raises(function() v100.einsum('i2,jk', A, B) end, "einsum 'i2,jk': invalid character '2' in the subscripts of operand 1")
  T.raises(function() v100.einsum('ij->i_', A) end, "invalid character '_' in the subscripts of the output")
  T.raises(function() v100.einsum('i.j', A) end, "einsum 'i.j': operand 1 has a '.' that is not part of an ellipsis '...'")
  T.raises(function() v100.einsum('...i...', A) end, "einsum '...i...': operand 1 has more than one ellipsis '...'")
  T.raises(function() v100.einsum('ij->...i...', A) end, "the output has more than one ellipsis '...'")
  T.raises(function() v100.einsum('ij->i->j', A) end, "einsum 'ij->i->j': more than one '->'")
  T.raises(function() v100.einsum('ij-i', A) end, "einsum 'ij-i': '-' outside of an arrow '->'")
  T.raises(function() v100.einsum('ij>i', A) end, "einsum 'ij>i': '>' outside of an arrow '->'")
  T.raises(function() v100.einsum('ij->ii', A) end, "einsum 'ij->ii': index i appears more than once in the output")
  T.raises(function() v100.einsum('ij->k', A) end, "einsum 'ij->k': output index k does not appear in any operand")
  T.raises(function() v100.einsum('abcdefghi', A) end, "einsum 'abcdefghi': the subscripts of operand 1 'abcdefghi' name more than 8 dims")
  local five = v100.ones({ 1, 1, 1, 1, 1 })
  T.raises(function() v100.einsum('abcde,fghij->abcdefghij', five, five) end,
    "einsum 'abcde,fghij->abcdefghij': the subscripts of the output 'abcdefghij' name more than 8 dims")
  T.raises(function() v100.einsum('abcde,fghij', five, five) end, "einsum 'abcde,fghij': the result would have 10 dims (at most 8)")
  -- after the first two operands, nine labels are still needed by the last two
  local o4, o5 = v100.ones({ 1, 1, 1, 1 }), v100.ones({ 1, 1, 1, 1, 1 })
  T.raises(function() v100.einsum('abcde,fghi,abcd,efghi->', o5, o4, o4, o5) end,
    "einsum 'abcde,fghi,abcd,efghi->': contracting operand 2 needs a tensor of 9 dims (at most 8)")
  T.raises(function() v100.einsum('ij', v100.ones({ 2, 2 }, { dtype = 'i64' })) end,
    "einsum 'ij': operand 1 is 2x2 i64 cpu; einsum takes float tensors (f32, f16, bf16, f64)")
  T.raises(function() v100.einsum('ij,jk', A, B:to('f64')) end,
    "einsum 'ij,jk': operand 2 is f64 but operand 1 is f32 (the operands share one dtype)")
  T.raises(function() v100.einsum('ij,jk', A, 3) end, 'einsum: operand 2 is a number, not a tensor')
  T.raises(function() v100.einsum('ij,jk', { A, 'x' }) end, 'einsum: operand 2 is a string, not a tensor')
  T.raises(function() v100.einsum('ij') end, "einsum 'ij': no operands")
  T.raises(function() v100.einsum('ij', {}) end, "einsum 'ij': no operands")
  T.raises(function() v100.einsum(nil, A) end, 'string expected')
  local freed = v100.ones({ 2 })
  freed:free()
  T.raises(function() v100.einsum('i', freed) end, 'tensor used after free')
  -- a long equation is cut in the message, not the buffer overrun
  local long = string.rep('a', 120)
  T.raises(function() v100.einsum(long, A) end, "einsum '" .. string.rep('a', 92) .. "...'")
  if T.has_cuda() then
    T.raises(function() v100.einsum('ij,jk', A, B:to('cuda')) end, 'are on different devices')
  end
end)

T.run()
