-- tests/lua/sweep/linalg.lua: the linear algebra ops' cases for the tensor sweeps
-- (tests/lua/tensor_sweep.lua says what an entry is; test_tensor_sweep.lua runs them on the CPU
-- against f64, gpu_tensor_sweep.lua on CUDA against the CPU with TF32 off). Every product is a
-- GEMM: f16/bf16 accumulate in f32 and are rounded once, so the tolerance is the dtype's rounding
-- of the result, scaled by the result's largest magnitude (tensor_sweep.compare), which grows with
-- the inner size k; tol widens it for chains of products rounded in between (einsum's three
-- operands, addmm's beta * bias + alpha * a @ b). Shapes are odd on purpose; the transposed and
-- narrowed layouts (S.layouts) reach the GEMM's transposed and strided paths; empty inner and
-- outer dims give zeros and empty results.
local ref = require 'einsum_ref' -- the naive loop: every entry's oracle (f64 reference)
local R = {}
local FLOATS = { 'f32', 'f16', 'bf16', 'f64' }

-- every layout of shape a combined with a contiguous b, then contiguous a with every layout of b
local function pairs_of(S, dt, sa, sb, label)
  local out = {}
  for _, l in ipairs(S.layouts(sa, dt)) do out[#out + 1] = { label .. ' a ' .. l[1], l[2], S.rand(sb, dt) } end
  for _, l in ipairs(S.layouts(sb, dt)) do
    if l[1] ~= 'contiguous' then out[#out + 1] = { label .. ' b ' .. l[1], S.rand(sa, dt), l[2] } end
  end
  return out
end

local function g(S, shape) return S.rand(shape, 'f64') end

-- ---- einsum ----
R[#R + 1] = {
  name = 'einsum', dtypes = FLOATS, tol = 4,
  cases = function(S, dt)
    local c = {}
    local function add(label, eq, ...) c[#c + 1] = { label .. ' ' .. eq, eq, ... } end
    for _, p in ipairs(pairs_of(S, dt, { 5, 7 }, { 7, 6 }, 'matrix')) do add(p[1], 'ij,jk->ik', p[2], p[3]) end
    for _, p in ipairs(pairs_of(S, dt, { 3, 4, 5 }, { 3, 5, 6 }, 'batched')) do add(p[1], 'bij,bjk->bik', p[2], p[3]) end
    add('implicit', 'ij,jk', S.rand({ 4, 3 }, dt), S.rand({ 3, 5 }, dt))
    add('b transposed in the equation', 'bik,bjk->bij', S.rand({ 2, 4, 6 }, dt), S.rand({ 2, 3, 6 }, dt))
    add('output reordered', 'bij,bjk->kib', S.rand({ 2, 4, 6 }, dt), S.rand({ 2, 6, 3 }, dt))
    add('long inner dim', 'ij,jk->ik', S.rand({ 4, 300 }, dt), S.rand({ 300, 5 }, dt))
    for _, l in ipairs(S.layouts({ 6, 6 }, dt)) do
      add('diagonal ' .. l[1], 'ii->i', l[2])
      add('trace ' .. l[1], 'ii', l[2])
      add('transpose ' .. l[1], 'ij->ji', l[2])
      add('sum ' .. l[1], 'ij->', l[2])
      add('row sums ' .. l[1], 'ij->i', l[2])
    end
    add('diagonal of 3 dims', 'iji->ij', S.rand({ 4, 3, 4 }, dt))
    add('diagonal then product', 'iij,jk->ik', S.rand({ 3, 3, 5 }, dt), S.rand({ 5, 2 }, dt))
    add('ellipsis broadcast', '...ij,...jk', S.rand({ 2, 1, 3, 4 }, dt), S.rand({ 5, 4, 2 }, dt))
    add('ellipsis in the middle', 'i...j,j->...i', S.rand({ 3, 2, 5, 4 }, dt), S.rand({ 4 }, dt))
    add('ellipsis summed', '...ij->ij', S.rand({ 2, 3, 4, 5 }, dt))
    add('expanded operand', '...ij,...jk', S.view(S.rand({ 1, 3, 4 }, dt), function(b) return b:expand({ 5, 3, 4 }) end),
      S.rand({ 5, 4, 2 }, dt))
    add('three operands', 'ij,jk,kl->il', S.rand({ 3, 4 }, dt), S.rand({ 4, 5 }, dt), S.rand({ 5, 2 }, dt))
    add('four operands', 'ab,bc,cd,d->a', S.rand({ 2, 3 }, dt), S.rand({ 3, 4 }, dt), S.rand({ 4, 5 }, dt), S.rand({ 5 }, dt))
    add('outer product', 'i,j->ij', S.rand({ 5 }, dt), S.rand({ 7 }, dt))
    add('dot', 'i,i->', S.rand({ 9 }, dt), S.rand({ 9 }, dt))
    add('elementwise', 'ij,ij->ij', S.rand({ 3, 4 }, dt), S.rand({ 3, 4 }, dt))
    add('index only in one operand', 'ij,k->ik', S.rand({ 3, 4 }, dt), S.rand({ 5 }, dt))
    add('size-1 contracted broadcast', 'ij,ij->i', S.rand({ 4, 1 }, dt), S.rand({ 4, 5 }, dt))
    add('size-1 batch broadcast', 'bij,bjk->bik', S.rand({ 1, 3, 4 }, dt), S.rand({ 2, 4, 5 }, dt))
    add('batch labels of three kinds', 'abcd,abce->abcde', S.rand({ 1, 3, 2, 4 }, dt), S.rand({ 5, 3, 1, 2 }, dt))
    add('seven batch labels', 'abcdefg,abcdefg->gfedcba', S.rand({ 2, 1, 2, 1, 2, 1, 2 }, dt), S.rand({ 2, 1, 2, 1, 2, 1, 2 }, dt))
    add('spaces', ' ij , jk -> ik ', S.rand({ 2, 3 }, dt), S.rand({ 3, 2 }, dt))
    add('upper-case labels', 'Ab,bC->AC', S.rand({ 2, 3 }, dt), S.rand({ 3, 4 }, dt))
    add('scalar operand', ',ij->ij', S.rand({}, dt), S.rand({ 2, 3 }, dt))
    add('empty outer dim', 'ij,jk->ik', S.rand({ 0, 3 }, dt), S.rand({ 3, 4 }, dt))
    add('empty inner dim', 'ij,jk->ik', S.rand({ 3, 0 }, dt), S.rand({ 0, 4 }, dt))
    add('empty summed dim', 'ij->i', S.rand({ 3, 0 }, dt))
    add('size-1 dims', 'ij,jk->ik', S.rand({ 1, 1 }, dt), S.rand({ 1, 1 }, dt))
    return c
  end,
  call = function(eq, ...) return require('v100').einsum(eq, ...) end,
  oracle = ref.einsum,
  grads = function(S)
    local v100 = require 'v100'
    local function e(eq) return function(...) return v100.einsum(eq, ...) end end
    return {
      { 'ij,jk->ik', e('ij,jk->ik'), g(S, { 3, 4 }), g(S, { 4, 2 }) },
      { 'bij,bjk->bik', e('bij,bjk->bik'), g(S, { 2, 3, 4 }), g(S, { 2, 4, 3 }) },
      { 'ii->i', e('ii->i'), g(S, { 4, 4 }) },
      { 'ii (trace)', e('ii'), g(S, { 3, 3 }) },
      { 'ij->', e('ij->'), g(S, { 3, 4 }) },
      { '...ij,...jk', e('...ij,...jk'), g(S, { 2, 1, 3, 4 }), g(S, { 3, 4, 2 }) },
      { 'three operands ij,jk,kl->il', e('ij,jk,kl->il'), g(S, { 2, 3 }), g(S, { 3, 4 }), g(S, { 4, 2 }) },
      { 'outer product i,j->ij', e('i,j->ij'), g(S, { 3 }), g(S, { 4 }) },
      { 'diagonal then product iij,jk->ik', e('iij,jk->ik'), g(S, { 3, 3, 2 }), g(S, { 2, 3 }) },
      { 'size-1 broadcast ij,ij->i', e('ij,ij->i'), g(S, { 3, 1 }), g(S, { 3, 4 }) },
      { 'output reordered bij,bjk->kib', e('bij,bjk->kib'), g(S, { 2, 3, 4 }), g(S, { 2, 4, 3 }) },
      { 'batch labels of three kinds', e('abcd,abce->abcde'), g(S, { 1, 3, 2, 2 }), g(S, { 2, 3, 1, 2 }) },
    }
  end,
}

-- ---- matmul, mm, bmm, addmm ----
R[#R + 1] = {
  name = 'matmul', dtypes = FLOATS, tol = 2,
  cases = function(S, dt)
    local c = {}
    for _, p in ipairs(pairs_of(S, dt, { 5, 7 }, { 7, 6 }, '2-d')) do c[#c + 1] = p end
    for _, p in ipairs(pairs_of(S, dt, { 2, 1, 4, 5 }, { 3, 5, 6 }, 'batched broadcast')) do c[#c + 1] = p end
    c[#c + 1] = { '1-d dot', S.rand({ 11 }, dt), S.rand({ 11 }, dt) }
    c[#c + 1] = { '1-d x 2-d', S.rand({ 4 }, dt), S.rand({ 4, 3 }, dt) }
    c[#c + 1] = { '2-d x 1-d', S.rand({ 3, 4 }, dt), S.rand({ 4 }, dt) }
    c[#c + 1] = { '3-d x 1-d', S.rand({ 2, 3, 4 }, dt), S.rand({ 4 }, dt) }
    c[#c + 1] = { '1-d x 3-d', S.rand({ 3 }, dt), S.rand({ 2, 3, 4 }, dt) }
    c[#c + 1] = { '3-d x 2-d', S.rand({ 2, 3, 4 }, dt), S.rand({ 4, 5 }, dt) }
    c[#c + 1] = { 'long inner dim', S.rand({ 3, 500 }, dt), S.rand({ 500, 4 }, dt) }
    c[#c + 1] = { 'expanded batch', S.view(S.rand({ 1, 3, 4 }, dt), function(b) return b:expand({ 4, 3, 4 }) end), S.rand({ 4, 4, 2 }, dt) }
    c[#c + 1] = { 'empty inner dim', S.rand({ 3, 0 }, dt), S.rand({ 0, 4 }, dt) }
    c[#c + 1] = { 'empty batch', S.rand({ 0, 3, 4 }, dt), S.rand({ 4, 2 }, dt) }
    return c
  end,
  call = function(a, b) return a:matmul(b) end,
  oracle = ref.matmul,
  grads = function(S)
    local function mmf(a, b) return a:matmul(b) end
    return {
      { '1-d dot', mmf, g(S, { 5 }), g(S, { 5 }) },
      { '2-d', mmf, g(S, { 3, 4 }), g(S, { 4, 2 }) },
      { '2-d x 1-d', mmf, g(S, { 3, 4 }), g(S, { 4 }) },
      { '1-d x 3-d', mmf, g(S, { 3 }), g(S, { 2, 3, 4 }) },
      { 'batched broadcast', mmf, g(S, { 2, 1, 3, 4 }), g(S, { 3, 4, 2 }) },
      { 'transposed a', function(a, b) return a:t():matmul(b) end, g(S, { 4, 3 }), g(S, { 4, 2 }) },
    }
  end,
}

R[#R + 1] = {
  name = 'mm', dtypes = FLOATS, tol = 2,
  cases = function(S, dt)
    local c = pairs_of(S, dt, { 6, 9 }, { 9, 5 }, '2-d')
    c[#c + 1] = { 'long inner dim', S.rand({ 2, 700 }, dt), S.rand({ 700, 3 }, dt) }
    c[#c + 1] = { 'vector shapes', S.rand({ 1, 8 }, dt), S.rand({ 8, 1 }, dt) }
    c[#c + 1] = { 'empty inner dim', S.rand({ 2, 0 }, dt), S.rand({ 0, 3 }, dt) }
    c[#c + 1] = { 'empty outer dim', S.rand({ 0, 4 }, dt), S.rand({ 4, 3 }, dt) }
    return c
  end,
  call = function(a, b) return a:mm(b) end,
  oracle = ref.matmul,
  grads = function(S)
    return {
      { '2-d', function(a, b) return a:mm(b) end, g(S, { 3, 5 }), g(S, { 5, 2 }) },
      { 'transposed b', function(a, b) return a:mm(b:t()) end, g(S, { 3, 5 }), g(S, { 2, 5 }) },
    }
  end,
}

R[#R + 1] = {
  name = 'bmm', dtypes = FLOATS, tol = 2,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 3, 4, 5 }, dt, nil, nil, true)) do c[#c + 1] = { 'a ' .. l[1], l[2], S.rand({ 3, 5, 6 }, dt) } end
    for _, l in ipairs(S.layouts({ 3, 5, 6 }, dt, nil, nil, true)) do
      if l[1] ~= 'contiguous' then c[#c + 1] = { 'b ' .. l[1], S.rand({ 3, 4, 5 }, dt), l[2] } end
    end
    c[#c + 1] = { 'batch of 1', S.rand({ 1, 7, 3 }, dt), S.rand({ 1, 3, 2 }, dt) }
    c[#c + 1] = { 'empty batch', S.rand({ 0, 2, 3 }, dt), S.rand({ 0, 3, 4 }, dt) }
    c[#c + 1] = { 'empty inner dim', S.rand({ 2, 3, 0 }, dt), S.rand({ 2, 0, 4 }, dt) }
    return c
  end,
  call = function(a, b) return a:bmm(b) end,
  oracle = ref.matmul,
  grads = function(S)
    return { { '3-d', function(a, b) return a:bmm(b) end, g(S, { 2, 3, 4 }), g(S, { 2, 4, 2 }) } }
  end,
}

R[#R + 1] = {
  name = 'addmm', dtypes = FLOATS, tol = 4,
  cases = function(S, dt)
    local c = {}
    for _, p in ipairs(pairs_of(S, dt, { 5, 7 }, { 7, 6 }, 'row bias')) do
      c[#c + 1] = { p[1], S.rand({ 6 }, dt), p[2], p[3], 1, 1 }
    end
    for _, l in ipairs(S.layouts({ 5, 6 }, dt)) do
      c[#c + 1] = { 'matrix bias ' .. l[1] .. ' beta 0.5 alpha 2', l[2], S.rand({ 5, 7 }, dt), S.rand({ 7, 6 }, dt), 0.5, 2 }
    end
    c[#c + 1] = { 'column bias', S.rand({ 5, 1 }, dt), S.rand({ 5, 3 }, dt), S.rand({ 3, 4 }, dt), 1, 1 }
    c[#c + 1] = { '1x n bias alpha -1', S.rand({ 1, 4 }, dt), S.rand({ 5, 3 }, dt), S.rand({ 3, 4 }, dt), 1, -1 }
    c[#c + 1] = { 'scalar bias beta 3', S.rand({}, dt), S.rand({ 2, 3 }, dt), S.rand({ 3, 4 }, dt), 3, 1 }
    -- beta 0: the bias is not read (PyTorch: NaN and inf in it do not propagate)
    c[#c + 1] = { 'beta 0 ignores a NaN bias', S.rand({ 4 }, dt):fill_(0 / 0), S.rand({ 3, 5 }, dt), S.rand({ 5, 4 }, dt), 0, 1.5 }
    c[#c + 1] = { 'empty inner dim', S.rand({ 3, 4 }, dt), S.rand({ 3, 0 }, dt), S.rand({ 0, 4 }, dt), 2, 1 }
    c[#c + 1] = { 'long inner dim', S.rand({ 3 }, dt), S.rand({ 2, 400 }, dt), S.rand({ 400, 3 }, dt), 1, 1 }
    return c
  end,
  call = function(bias, a, b, beta, alpha) return require('v100').addmm(bias, a, b, { beta = beta, alpha = alpha }) end,
  oracle = ref.addmm,
  grads = function(S)
    local v100 = require 'v100'
    return {
      { 'row bias', function(bias, a, b) return v100.addmm(bias, a, b) end, g(S, { 4 }), g(S, { 3, 5 }), g(S, { 5, 4 }) },
      { 'matrix bias beta 0.5 alpha 2', function(bias, a, b) return v100.addmm(bias, a, b, { beta = 0.5, alpha = 2 }) end,
        g(S, { 3, 4 }), g(S, { 3, 5 }), g(S, { 5, 4 }) },
      { 'column bias alpha -1', function(bias, a, b) return v100.addmm(bias, a, b, { alpha = -1 }) end, g(S, { 3, 1 }),
        g(S, { 3, 2 }), g(S, { 2, 4 }) },
    }
  end,
}

return R
