-- Every op on 'cuda' against the same op on 'cpu' with the same inputs (copied with :to).
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'

v100.set_allow_tf32(false)
v100.manual_seed(1000 + T.seed % 100000)

local FLOATS = { 'f32', 'f16', 'bf16', 'f64' }
local TOL = { f32 = 1e-5, f16 = 1e-3, bf16 = 1e-2, f64 = 1e-12 }
local N = 1000000 + 3 -- odd size: vector tails

-- A random CPU tensor (never zeros) in [lo, hi) of a float dtype, and its copy on cuda.
local function pair(shape, dt, lo, hi)
  lo, hi = lo or -2, hi or 2
  local c = v100.rand(shape, { dtype = 'f64' }) * (hi - lo) + lo
  c = v100.where(c:eq(0), (lo + hi) / 2 + 1e-3, c):to(dt)
  return c, c:to('cuda')
end

local function ipair(shape, dt, lo, hi)
  local c = (v100.rand(shape, { dtype = 'f64' }) * (hi - lo + 1) + lo):floor():to(dt)
  return c, c:to('cuda')
end

-- the cuda result g against the cpu result c
local function same(g, c, dt, msg, scale)
  T.ok(g.device:sub(1, 4) == 'cuda', msg .. ': result on ' .. g.device)
  T.eq(g.dtype, c.dtype, msg .. ' dtype')
  T.eq(g.shape, c.shape, msg .. ' shape')
  local tol = (TOL[dt] or 0) * (scale or 1)
  if tol == 0 then T.tensor_eq(g, c, msg) else T.tensor_close(g, c, tol, tol, msg) end
end

-- layouts of a {R, C} input: contiguous, transposed view, narrowed view, expanded view
local function layouts(R, C, dt, lo, hi)
  local out = {}
  local c, g = pair({ R, C }, dt, lo, hi)
  out[#out + 1] = { 'contiguous', c, g }
  local ct, gt = pair({ C, R }, dt, lo, hi)
  out[#out + 1] = { 'transposed', ct:t(), gt:t() }
  local cn, gn = pair({ R, C + 5 }, dt, lo, hi)
  out[#out + 1] = { 'narrowed', cn:narrow(2, 3, C), gn:narrow(2, 3, C) }
  local ce, ge = pair({ 1, C }, dt, lo, hi)
  out[#out + 1] = { 'expanded', ce:expand({ R, C }), ge:expand({ R, C }) }
  return out
end

-- Every unary and binary op of the op list, every dtype and layout: tests/lua/gpu_op_sweep.lua
-- (generated from v100.core.ops()). Here: what the list does not cover (clamp's one-sided bounds,
-- the operators, promotion, where and masked_fill, the other op families).

T.test('cuda unary on integers, logical_not, gelu both forms, clamp', function()
  for _, dt in ipairs({ 'i32', 'i64' }) do
    local c, g = ipair({ N }, dt, -1000, 1000)
    for _, name in ipairs({ 'neg', 'abs', 'square', 'sign', 'relu' }) do
      same(g[name](g), c[name](c), dt, name .. ' ' .. dt)
    end
    same(g:clamp(-10, 20), c:clamp(-10, 20), dt, 'clamp ' .. dt)
    same(g:logical_not(), c:logical_not(), 'bool', 'logical_not ' .. dt)
  end
  for _, dt in ipairs(FLOATS) do
    for _, l in ipairs(layouts(600, 1100, dt, -5, 5)) do
      same(l[3]:gelu(), l[2]:gelu(), dt, 'gelu ' .. dt .. ' ' .. l[1])
      same(l[3]:gelu({ approximate = 'tanh' }), l[2]:gelu({ approximate = 'tanh' }), dt, 'gelu tanh ' .. dt .. ' ' .. l[1])
      same(l[3]:clamp(-0.5, 0.75), l[2]:clamp(-0.5, 0.75), dt, 'clamp ' .. dt .. ' ' .. l[1])
      same(l[3]:clamp(nil, 0.25), l[2]:clamp(nil, 0.25), dt, 'clamp hi ' .. dt)
      same(l[3]:clamp(-0.25), l[2]:clamp(-0.25), dt, 'clamp lo ' .. dt)
    end
    local c, g = pair({ N }, dt, -5, 5)
    same(g:gelu(), c:gelu(), dt, 'gelu 1e6 ' .. dt)
    g:gelu_()
    c:gelu_()
    same(g, c, dt, 'gelu_ ' .. dt)
    g:clamp_(-1, 1)
    c:clamp_(-1, 1)
    same(g, c, dt, 'clamp_ ' .. dt)
  end
end)

T.test('cuda operators, add/sub alpha, integer division, promotion', function()
  local ca, ga = pair({ 1000, 1000 }, 'f32')
  local cb, gb = pair({ 1000 }, 'f32', 0.5, 2)
  same(ga + gb, ca + cb, 'f32', '+')
  same(ga - gb, ca - cb, 'f32', '-')
  same(ga * gb, ca * cb, 'f32', '*')
  same(ga / gb, ca / cb, 'f32', '/')
  same(-ga, -ca, 'f32', 'unary -')
  same(2 - ga, 2 - ca, 'f32', 'number - t')
  same(3 / gb, 3 / cb, 'f32', 'number / t')
  same(gb ^ 2, cb ^ 2, 'f32', 't ^ 2')
  same(ga:add(gb, 2.5), ca:add(cb, 2.5), 'f32', 'add alpha')
  same(ga:sub(gb, -0.5), ca:sub(cb, -0.5), 'f32', 'sub alpha')
  local ci, gi = ipair({ 1000, 1000 }, 'i32', -100, 100)
  local cj, gj = ipair({ 1000 }, 'i32', 1, 9)
  same(gi:div(gj), ci:div(cj), 'f32', 'i32 / i32 -> f32')
  same(gi * 2.5, ci * 2.5, 'f32', 'i32 * 2.5 -> f32')
  local ch, gh = pair({ 1000, 1000 }, 'f16')
  local cbf, gbf = pair({ 1000 }, 'bf16')
  same(gh + gbf, ch + cbf, 'f32', 'f16 + bf16 -> f32')
  same(gi + gh, ci + ch, 'f16', 'i32 + f16 -> f16')
  local cl, gl = ipair({ 1000 }, 'i64', -100, 100)
  same(gi + gl, ci + cl, 'i64', 'i32 + i64 -> i64')
  local cbo, gbo = ci:gt(0), gi:gt(0)
  same(gbo + gi, cbo + ci, 'i32', 'bool + i32')
  same(gbo * ga, cbo * ca, 'f32', 'bool * f32')
end)

T.test('cuda comparisons, logical ops, where, masked_fill', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }) do
    -- small integers: equality is frequent
    local ca, ga = ipair({ 1000, 1000 }, dt, -3, 3)
    local cb, gb = ipair({ 1000 }, dt, -3, 3)
    for _, name in ipairs({ 'eq', 'ne', 'lt', 'le', 'gt', 'ge' }) do
      same(ga[name](ga, gb), ca[name](ca, cb), 'bool', name .. ' ' .. dt)
      same(ga:t()[name](ga:t(), 1), ca:t()[name](ca:t(), 1), 'bool', name .. ' number transposed ' .. dt)
    end
    same(ga:logical_and(gb), ca:logical_and(cb), 'bool', 'logical_and ' .. dt)
    same(ga:logical_or(gb), ca:logical_or(cb), 'bool', 'logical_or ' .. dt)
    local cm, gm = ca:gt(0), ga:gt(0)
    same(ga:masked_fill(gm, 7), ca:masked_fill(cm, 7), dt, 'masked_fill ' .. dt)
    same(v100.where(gm, ga, gb), v100.where(cm, ca, cb), dt, 'where ' .. dt)
    same(v100.where(gm, ga, -1), v100.where(cm, ca, -1), dt, 'where number ' .. dt)
    local ct, gt = ca:t(), ga:t()
    gt:masked_fill_(gm:t(), -5)
    ct:masked_fill_(cm:t(), -5)
    same(ga, ca, dt, 'masked_fill_ transposed ' .. dt)
    ga:lt_(gb)
    ca:lt_(cb)
    same(ga, ca, dt, 'lt_ in place ' .. dt)
  end
end)

-- ---- reductions ----
-- cuda result against the cpu computed in f64 (summation order differs): error relative to
-- the same reduction of |x|
local function red_check(g, c64, bound, dt, msg)
  T.ok(g.device:sub(1, 4) == 'cuda', msg .. ' device')
  T.eq(g.dtype, dt, msg .. ' dtype')
  local tol = ({ f32 = 1e-5, f16 = 2e-3, bf16 = 1.2e-2, f64 = 1e-12 })[dt]
  T.tensor_close(g, c64, tol, 1e-30, msg, bound)
end

T.test('cuda sum/mean/prod/norm over len 1e6, inner > 1, several dims, keepdim', function()
  for _, dt in ipairs(FLOATS) do
    local cases = {
      { { N }, nil }, { { N }, 1 }, { { 1000, 1000 }, 1 }, { { 1000, 1000 }, 2 }, { { 10, 1000, 100 }, 2 },
      { { 10, 1000, 100 }, { 1, 3 } }, { { 10, 1000, 100 }, -1 }, { { 3, 333, 1001 }, { 2, 3 } }, { { 7, 5, 3 }, nil },
    }
    for _, cs in ipairs(cases) do
      -- f16: keep sums of |x| over 1e6 elements below the f16 maximum (65504)
      local r = dt == 'f16' and 0.05 or 2
      local c, g = pair(cs[1], dt, -r, r)
      local c64 = c:double()
      local d = cs[2]
      for _, keep in ipairs({ false, true }) do
        local msg = string.format('%s %s dims %s keep %s', dt, T.shape_str(cs[1]), tostring(d), tostring(keep))
        if d == nil then
          red_check(g:sum(), c64:sum(), c64:abs():sum(), dt, 'sum() ' .. msg)
          red_check(g:mean(), c64:mean(), c64:abs():mean(), dt, 'mean() ' .. msg)
          red_check(g:norm(), c64:norm(), c64:norm(), dt, 'norm() ' .. msg)
        else
          red_check(g:sum(d, keep), c64:sum(d, keep), c64:abs():sum(d, keep), dt, 'sum ' .. msg)
          red_check(g:mean(d, keep), c64:mean(d, keep), c64:abs():mean(d, keep), dt, 'mean ' .. msg)
          for _, p in ipairs({ 1, 2, math.huge }) do
            red_check(g:norm(p, d, keep), c64:norm(p, d, keep), c64:norm(p, d, keep), dt, 'norm p=' .. p .. ' ' .. msg)
          end
        end
      end
    end
    -- prod of values near 1 (no overflow)
    local c, g = pair({ 200, 300 }, dt, 0.9, 1.1)
    red_check(g:prod(2), c:double():prod(2), c:double():prod(2), dt, 'prod ' .. dt)
    -- transposed input
    local ct, gt = pair({ 1000, 777 }, dt)
    red_check(gt:t():sum(2), ct:double():t():sum(2), ct:double():t():abs():sum(2), dt, 'sum of a transposed view ' .. dt)
  end
  for _, dt in ipairs({ 'i32', 'i64' }) do
    local c, g = ipair({ 1000, 1000 }, dt, -1000, 1000)
    same(g:sum(1), c:sum(1), dt, 'int sum dim 1 ' .. dt)
    same(g:sum(), c:sum(), dt, 'int sum ' .. dt)
  end
end)

T.test('cuda var/std with correction 0/1', function()
  for _, dt in ipairs(FLOATS) do
    for _, cs in ipairs({ { { N }, 1 }, { { 1000, 1000 }, 1 }, { { 1000, 1000 }, 2 }, { { 10, 1000, 100 }, { 1, 3 } } }) do
      local c, g = pair(cs[1], dt)
      local c64 = c:double()
      for _, corr in ipairs({ 0, 1 }) do
        local tol = ({ f32 = 1e-5, f16 = 4e-3, bf16 = 2e-2, f64 = 1e-12 })[dt]
        local vr = g:var(cs[2], false, { correction = corr })
        T.eq(vr.dtype, dt)
        T.tensor_close(vr, c64:var(cs[2], false, { correction = corr }), tol, 0, 'var ' .. dt .. ' corr ' .. corr)
        T.tensor_close(g:std(cs[2], true, { correction = corr }), c64:std(cs[2], true, { correction = corr }), tol, 0,
          'std ' .. dt .. ' corr ' .. corr)
      end
    end
  end
end)

T.test('cuda max/min/argmax/argmin (values, and the value at each index)', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }) do
    local mk = (dt == 'i32' or dt == 'i64') and function(s) return ipair(s, dt, -100000, 100000) end
      or function(s) return pair(s, dt) end
    for _, cs in ipairs({ { { N }, 1 }, { { 1000, 1000 }, 1 }, { { 1000, 1000 }, 2 }, { { 10, 1000, 100 }, 2 }, { { 10, 1000, 100 }, -1 } }) do
      local c, g = mk(cs[1])
      local d = cs[2]
      for _, name in ipairs({ 'max', 'min' }) do
        same(g[name](g), c[name](c), dt, name .. '() ' .. dt)
        local gv, gi = g[name](g, d, true)
        local cv = c[name](c, d, true)
        same(gv, cv, dt, name .. ' values ' .. dt .. ' dim ' .. d)
        T.eq(gi.dtype, 'i64')
        -- ties may pick a different position: check the value at the index
        same(g:gather(d, gi), cv, dt, name .. ' value at the index ' .. dt .. ' dim ' .. d)
        local arg = name == 'max' and 'argmax' or 'argmin'
        local ga = g[arg](g, d, true)
        T.eq(ga.dtype, 'i64')
        same(g:gather(d, ga), cv, dt, arg .. ' ' .. dt .. ' dim ' .. d)
        local gflat = g[arg](g)
        T.eq(gflat.shape, {})
        T.eq(c:contiguous():view(-1):narrow(1, gflat:item() + 1, 1):item(), c[name](c):item(), arg .. '() ' .. dt)
      end
    end
  end
end)

T.test('cuda softmax / log_softmax on each dim', function()
  for _, dt in ipairs(FLOATS) do
    for _, shape in ipairs({ { 512, 2048 }, { 64, 37, 129 }, { 4, 100003 } }) do
      local c, g = pair(shape, dt, -6, 6)
      for d = 1, #shape do
        same(g:softmax(d), c:softmax(d), dt, 'softmax ' .. dt .. ' ' .. T.shape_str(shape) .. ' dim ' .. d, 2)
        same(g:log_softmax(d), c:log_softmax(d), dt, 'log_softmax ' .. dt .. ' ' .. T.shape_str(shape) .. ' dim ' .. d, 2)
      end
      same(g:softmax(-1), c:softmax(-1), dt, 'softmax dim -1', 2)
      same(g:transpose(1, 2):softmax(1), c:transpose(1, 2):softmax(1), dt, 'softmax of a transposed view', 2)
    end
  end
end)

-- ---- linear algebra ----
local function mm_check(g, c, ca, cb, dt, msg)
  -- error relative to |a| @ |b| (both computed on the cpu in f64)
  local bound = ca:double():abs():matmul(cb:double():abs())
  local tol = ({ f32 = 1e-5, f16 = 2e-3, bf16 = 1.2e-2, f64 = 1e-12 })[dt]
  T.ok(g.device:sub(1, 4) == 'cuda', msg .. ' device')
  T.eq(g.dtype, dt, msg .. ' dtype')
  T.tensor_close(g, c, tol, 1e-30, msg, bound)
end

-- The permutes of attention heads, [B, L, nh, hd] <-> [B, nh, L, hd]: the copy moves 16 or 8 bytes
-- per element where the innermost dim and the alignment allow, else one element; every case
-- bitwise equal to the CPU's copy.
T.test('cuda contiguous() of permuted views: widened and element-wise copies equal the cpu', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64', 'i64', 'i32', 'u8' }) do
    for _, shp in ipairs({ { 2, 5, 4, 64 }, { 3, 7, 2, 8 }, { 2, 3, 4, 3 }, { 1, 9, 3, 12 } }) do
      local c = (v100.rand(shp) * 100):to(dt)
      local g = c:to('cuda')
      local name = string.format('%s %s', dt, table.concat(shp, 'x'))
      T.tensor_eq(g:transpose(2, 3):contiguous():cpu(), c:transpose(2, 3):contiguous(), name .. ' heads')
      T.tensor_eq(g:transpose(2, 3):contiguous():transpose(2, 3):contiguous():cpu(), c, name .. ' round trip')
      -- a view one element in: misaligned for the widened copy
      local gn, cn = g:narrow(4, 2, shp[4] - 1), c:narrow(4, 2, shp[4] - 1)
      T.tensor_eq(gn:transpose(2, 3):contiguous():cpu(), cn:transpose(2, 3):contiguous(), name .. ' narrowed')
      -- copy_ into a permuted destination
      local gd = v100.empty({ shp[1], shp[3], shp[2], shp[4] }, { dtype = dt, device = 'cuda' })
      gd:transpose(2, 3):copy_(g)
      T.tensor_eq(gd:cpu(), c:transpose(2, 3):contiguous(), name .. ' copy_ into a permuted view')
    end
  end
end)

T.test('cuda matmul / mm / bmm / addmm (256x512x384 batched, broadcast, transposed views)', function()
  for _, dt in ipairs(FLOATS) do
    local cases = {
      { { 4, 256, 512 }, { 4, 512, 384 } }, { { 4, 256, 512 }, { 512, 384 } }, { { 256, 512 }, { 3, 512, 384 } },
      { { 2, 1, 64, 96 }, { 3, 96, 80 } }, { { 512 }, { 512 } }, { { 256, 512 }, { 512 } }, { { 512 }, { 512, 384 } },
      { { 1, 1 }, { 1, 1 } }, { { 33, 17 }, { 17, 65 } },
    }
    for _, cs in ipairs(cases) do
      local ca, ga = pair(cs[1], dt)
      local cb, gb = pair(cs[2], dt)
      mm_check(ga:matmul(gb), ca:matmul(cb), ca, cb, dt,
        string.format('matmul %s %s @ %s', dt, T.shape_str(cs[1]), T.shape_str(cs[2])))
    end
    -- transposed and narrowed views
    local ca, ga = pair({ 512, 256 }, dt)
    local cb, gb = pair({ 384, 512 }, dt)
    mm_check(ga:t():mm(gb:t()), ca:t():mm(cb:t()), ca:t(), cb:t(), dt, 'mm of transposed views ' .. dt)
    mm_check(ga:t():matmul(gb:t()), ca:t():matmul(cb:t()), ca:t(), cb:t(), dt, 'matmul of transposed views ' .. dt)
    local cn, gn = pair({ 256, 600 }, dt)
    mm_check(gn:narrow(2, 5, 512):mm(gb:t()), cn:narrow(2, 5, 512):mm(cb:t()), cn:narrow(2, 5, 512), cb:t(), dt,
      'mm of a narrowed view ' .. dt)
    local cx, gx = pair({ 4, 512, 256 }, dt)
    local cy, gy = pair({ 1, 384, 512 }, dt)
    local cxt, gxt = cx:transpose(2, 3), gx:transpose(2, 3)
    local cye, gye = cy:transpose(2, 3):expand({ 4, 512, 384 }), gy:transpose(2, 3):expand({ 4, 512, 384 })
    mm_check(gxt:bmm(gye), cxt:bmm(cye), cxt, cye, dt, 'bmm transposed/expanded ' .. dt)
    local cp, gp = pair({ 4, 256, 512 }, dt)
    local cq, gq = pair({ 4, 512, 384 }, dt)
    mm_check(gp:bmm(gq), cp:bmm(cq), cp, cq, dt, 'bmm ' .. dt)
    -- addmm with beta/alpha and broadcast bias
    local cm1, gm1 = pair({ 256, 512 }, dt)
    local cm2, gm2 = pair({ 512, 384 }, dt)
    for _, bs in ipairs({ { 256, 384 }, { 384 }, { 256, 1 } }) do
      local cbias, gbias = pair(bs, dt)
      for _, ba in ipairs({ { 1, 1 }, { 0.5, 2 }, { 0, 1 }, { -1, 0.25 } }) do
        local opts = { beta = ba[1], alpha = ba[2] }
        local g = v100.addmm(gbias, gm1, gm2, opts)
        local c = v100.addmm(cbias, cm1, cm2, opts)
        local bound = cm1:double():abs():matmul(cm2:double():abs()) * math.abs(ba[2]) + cbias:double():abs() * math.abs(ba[1])
        local tol = ({ f32 = 1e-5, f16 = 2e-3, bf16 = 1.2e-2, f64 = 1e-12 })[dt]
        T.eq(g.dtype, dt)
        T.tensor_close(g, c, 2 * tol, 1e-30, string.format('addmm %s bias %s beta %g alpha %g', dt, T.shape_str(bs), ba[1], ba[2]), bound)
      end
    end
  end
end)

T.test('cuda addmm/Linear bias: cuBLASLt epilogue for aligned vectors, prefill otherwise, same values', function()
  local nn = require 'v100.nn'
  for _, dt in ipairs(FLOATS) do
    local tol = ({ f32 = 1e-5, f16 = 2e-3, bf16 = 1.2e-2, f64 = 1e-12 })[dt]
    for _, mnk in ipairs({ { 256, 384, 512 }, { 33, 65, 17 }, { 1, 8, 8 }, { 7, 1, 3 } }) do
      local m, n, k = mnk[1], mnk[2], mnk[3]
      local cx, gx = pair({ m, k }, dt)
      local cw, gw = pair({ n, k }, dt)
      local cb, gb = pair({ n }, dt)
      -- a bias 4 bytes off the pool's alignment: a narrowed view of a longer vector
      local cbl, gbl = pair({ n + 1 }, dt)
      for _, case in ipairs({ { cb, gb, 'aligned' }, { cbl:narrow(1, 2, n), gbl:narrow(1, 2, n), 'offset' } }) do
        local before = v100.gemm_stats()
        local g = v100.addmm(case[2], gx, gw:t())
        local after = v100.gemm_stats()
        local c = v100.addmm(case[1], cx, cw:t())
        local bound = cx:double():abs():matmul(cw:double():abs():t()) + case[1]:double():abs()
        local msg = string.format('addmm %s %dx%dx%d bias %s', dt, m, n, k, case[3])
        T.tensor_close(g, c, 2 * tol, 1e-30, msg, bound)
        local fused = after.bias_epilogue - before.bias_epilogue
        local pre = after.bias_prefill - before.bias_prefill
        T.eq(fused + pre, 1, msg .. ': one bias path taken')
        -- f64 has no cuBLASLt bias epilogue and an unaligned bias pointer is not offered to it
        if dt ~= 'f64' and case[3] == 'aligned' then T.eq(fused, 1, msg .. ': bias in the epilogue') end
        if dt == 'f64' then T.eq(pre, 1, msg .. ': f64 bias prefilled') end
        if case[3] == 'offset' then T.eq(pre, 1, msg .. ': offset bias prefilled') end
      end
    end
    -- nn.Linear on 3-D input goes through the same path, forward and backward
    local lin = nn.Linear(48, 40)
    local glin = nn.Linear(48, 40):to{ device = 'cuda' }
    lin:to{ dtype = dt }
    glin:to{ dtype = dt }
    glin:load_state_dict(lin:state_dict())
    local cx, gx = pair({ 3, 5, 48 }, dt)
    cx:requires_grad_(true)
    gx = gx:detach():requires_grad_(true)
    local before = v100.gemm_stats().bias_epilogue
    local gy = glin(gx)
    if dt ~= 'f64' then T.eq(v100.gemm_stats().bias_epilogue - before, 1, 'Linear ' .. dt .. ' uses the epilogue') end
    local cy = lin(cx)
    -- errors against |.| bounds of each product (cancellation makes single elements small)
    local ax, aw = cx:detach():double():abs():view{ 15, 48 }, lin.weight:detach():double():abs()
    T.tensor_close(gy, cy, 2 * tol, 1e-30, 'Linear forward ' .. dt,
      (ax:matmul(aw:t()) + lin.bias:detach():double():abs()):view{ 3, 5, 40 })
    local cgo, ggo = pair({ 3, 5, 40 }, dt)
    cy:backward(cgo)
    gy:backward(ggo)
    local ago = cgo:double():abs():view{ 15, 40 }
    T.tensor_close(gx.grad, cx.grad, 2 * tol, 1e-30, 'Linear input grad ' .. dt, ago:matmul(aw):view{ 3, 5, 48 })
    T.tensor_close(glin.bias.grad, lin.bias.grad, 2 * tol, 1e-30, 'Linear bias grad ' .. dt, ago:sum(1))
    T.tensor_close(glin.weight.grad, lin.weight.grad, 2 * tol, 1e-30, 'Linear weight grad ' .. dt, ago:t():matmul(ax))
  end
end)

T.test('cuda matmul with tf32 allowed stays close (f32)', function()
  local ca, ga = pair({ 256, 512 }, 'f32')
  local cb, gb = pair({ 512, 384 }, 'f32')
  v100.set_allow_tf32(true)
  local g = ga:matmul(gb)
  v100.set_allow_tf32(false)
  local bound = ca:double():abs():matmul(cb:double():abs())
  T.tensor_close(g, ca:matmul(cb), 2e-3, 1e-30, 'tf32 matmul', bound)
end)

-- ---- indexing, joining, copies ----
T.test('cuda gather / scatter_add / index_select with i32 and i64 indices', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }) do
    for _, idt in ipairs({ 'i64', 'i32' }) do
      -- integer-valued sources keep scatter_add exact whatever the order of the atomics
      local cs, gs = ipair({ 300, 400 }, dt, -50, 50)
      for _, d in ipairs({ 1, 2, -1 }) do
        local dd = T.norm_dim(d, 2)
        local n = cs:size(dd)
        local ishape = { 200, 300 }
        ishape[dd] = 700
        local ci, gi = ipair(ishape, idt, 0, n - 1)
        same(gs:gather(d, gi), cs:gather(d, ci), dt, 'gather ' .. dt .. ' ' .. idt .. ' dim ' .. d)
        same(gs:t():gather(3 - dd, gi:t()), cs:t():gather(3 - dd, ci:t()), dt, 'gather transposed ' .. dt)
        local csrc, gsrc = ipair({ 700, 700 }, dt, -3, 3)
        same(gs:scatter_add(d, gi, gsrc), cs:scatter_add(d, ci, csrc), dt, 'scatter_add ' .. dt .. ' ' .. idt .. ' dim ' .. d)
        local cv, gv = ipair({ 5000 }, idt, 0, n - 1)
        same(gs:index_select(d, gv), cs:index_select(d, cv), dt, 'index_select ' .. dt .. ' ' .. idt .. ' dim ' .. d)
      end
      local ct, gt = cs:clone(), gs:clone()
      local ci, gi = ipair({ 1000, 400 }, idt, 0, 299)
      local csrc, gsrc = ipair({ 1000, 400 }, dt, -3, 3)
      gt:scatter_add_(1, gi, gsrc)
      ct:scatter_add_(1, ci, csrc)
      same(gt, ct, dt, 'scatter_add_ ' .. dt .. ' ' .. idt)
    end
  end
  -- float atomics with many duplicates: close to the cpu
  local cs, gs = pair({ 50, 64 }, 'f32')
  local ci, gi = ipair({ 100000, 64 }, 'i64', 0, 49)
  local csrc, gsrc = pair({ 100000, 64 }, 'f32')
  local bound = cs:double():abs():scatter_add(1, ci, csrc:double():abs())
  T.tensor_close(gs:scatter_add(1, gi, gsrc), cs:double():scatter_add(1, ci, csrc:double()), 1e-5, 1e-30,
    'scatter_add f32 with many duplicates', bound)
end)

-- v100.set_deterministic(true): scatter_add sums each output in index order without atomics, the
-- order of the CPU's loop, so float results are the CPU's bits and the same on every run, also
-- with many duplicates, for views, and through the backward of index_select (an embedding).
T.test('cuda scatter_add in deterministic mode: the CPU bits, every run', function()
  local prev = v100.set_deterministic(true)
  for _, dt in ipairs(FLOATS) do
    for _, idt in ipairs({ 'i64', 'i32' }) do
      for _, d in ipairs({ 1, 2 }) do
        local shape = d == 1 and { 20000, 64 } or { 64, 20000 }
        local ci, gi = ipair(shape, idt, 0, 49)
        local csrc, gsrc = pair(shape, dt)
        local oshape = d == 1 and { 50, 64 } or { 64, 50 }
        local cz, gz = pair(oshape, dt)
        local want = cz:scatter_add(d, ci, csrc)
        local g1 = gz:scatter_add(d, gi, gsrc)
        local g2 = gz:scatter_add(d, gi, gsrc)
        local what = string.format('%s %s dim %d', dt, idt, d)
        T.tensor_eq(g1, want, what .. ': against the cpu, bitwise')
        T.tensor_eq(g2, g1, what .. ': a second run, bitwise')
        -- transposed views of src and index (strided lines), in place
        local gt = gz:clone():t():contiguous():t()
        gt:scatter_add_(d, gi:t():contiguous():t(), gsrc:t():contiguous():t())
        T.tensor_eq(gt, want, what .. ': strided operands')
      end
    end
  end
  -- an embedding's weight gradient: index_select backward over 16384 tokens of a 1000-row table
  local cw, gw = pair({ 1000, 256 }, 'f32')
  cw:requires_grad_(true)
  gw = gw:detach():requires_grad_(true)
  local cids, gids = ipair({ 16384 }, 'i64', 0, 999)
  local cg, gg = pair({ 16384, 256 }, 'f32')
  cw:index_select(1, cids):backward(cg)
  gw:index_select(1, gids):backward(gg)
  T.tensor_eq(gw.grad, cw.grad, 'embedding backward: against the cpu, bitwise')
  -- a bad index is still reported, naming the op
  T.raises(function()
    local bad = v100.tensor({ { 0 }, { 60 } }, { dtype = 'i64', device = 'cuda' })
    v100.zeros({ 50, 1 }, { device = 'cuda' }):scatter_add(1, bad, v100.ones({ 2, 1 }, { device = 'cuda' })):sum():item()
  end, 'scatter_add')
  v100.set_deterministic(prev)
  T.eq(v100.get_deterministic(), false)
end)

T.test('cuda cat / stack / split / chunk / copy_ / to', function()
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8', 'bool' }) do
    local c1, g1 = pair({ 300, 200 }, 'f64', 0.5, 200)
    c1, g1 = c1:to(dt), g1:to(dt)
    local c2, g2 = pair({ 200, 300 }, 'f64', 0.5, 200)
    c2, g2 = c2:to(dt):t(), g2:to(dt):t()
    same(v100.cat({ g1, g2, g1 }, 1), v100.cat({ c1, c2, c1 }, 1), dt, 'cat dim 1 ' .. dt)
    same(v100.cat({ g1, g2 }, -1), v100.cat({ c1, c2 }, -1), dt, 'cat dim -1 ' .. dt)
    same(v100.stack({ g1, g2 }, 1), v100.stack({ c1, c2 }, 1), dt, 'stack dim 1 ' .. dt)
    same(v100.stack({ g1, g2, g1 }, 3), v100.stack({ c1, c2, c1 }, 3), dt, 'stack dim 3 ' .. dt)
    local gp, cp = g1:split(128), c1:split(128)
    T.eq(#gp, #cp)
    for i = 1, #gp do same(gp[i], cp[i], dt, 'split piece ' .. i) end
    local gc_, cc_ = g1:chunk(3, 2), c1:chunk(3, 2)
    T.eq(#gc_, #cc_)
    for i = 1, #gc_ do same(gc_[i], cc_[i], dt, 'chunk piece ' .. i) end
  end
  -- copy_ across every dtype and device pair
  local src = v100.rand({ 1000, 1000 }, { dtype = 'f64' }) * 200 - 100
  for _, sdt in ipairs({ 'f64', 'f32', 'f16', 'bf16', 'i32', 'i64' }) do
    local s = src:to(sdt)
    for _, ddt in ipairs({ 'f64', 'f32', 'f16', 'bf16', 'i32', 'i64', 'bool' }) do
      local want = v100.empty({ 1000, 1000 }, { dtype = ddt }):copy_(s)
      local g1 = v100.empty({ 1000, 1000 }, { dtype = ddt, device = 'cuda' }):copy_(s)         -- cpu -> cuda
      same(g1, want, ddt == 'bool' and 'bool' or 'exact', 'copy_ cpu ' .. sdt .. ' -> cuda ' .. ddt)
      local g2 = v100.empty({ 1000, 1000 }, { dtype = ddt, device = 'cuda' }):copy_(s:cuda()) -- cuda -> cuda
      same(g2, want, 'exact', 'copy_ cuda ' .. sdt .. ' -> cuda ' .. ddt)
      local c3 = v100.empty({ 1000, 1000 }, { dtype = ddt }):copy_(s:cuda())                -- cuda -> cpu
      T.tensor_eq(c3, want, 'copy_ cuda ' .. sdt .. ' -> cpu ' .. ddt)
    end
  end
  -- broadcast and transposed sources into a narrowed cuda view
  local base = v100.zeros({ 1000, 1200 }, { device = 'cuda' })
  local t = v100.rand({ 1000, 1000 })
  base:narrow(2, 101, 1000):copy_(t:t())
  local cbase = v100.zeros({ 1000, 1200 })
  cbase:narrow(2, 101, 1000):copy_(t:t())
  T.tensor_eq(base, cbase, 'copy_ transposed cpu source into a narrowed cuda view')
  local row = v100.rand({ 1200 }, { device = 'cuda' })
  base:copy_(row)
  T.tensor_eq(base, row:cpu():expand({ 1000, 1200 }), 'copy_ broadcasts on cuda')
  -- to / cuda / cpu round trips
  local x = v100.randn({ 77, 33 }, { dtype = 'f64' })
  T.tensor_eq(x:cuda():cpu(), x, 'cuda():cpu() round trip')
  T.eq(x:cuda().device, 'cuda:0')
  T.eq(x:to({ dtype = 'f16', device = 'cuda' }).dtype, 'f16')
  T.tensor_eq(x:to({ dtype = 'f16', device = 'cuda' }), x:half(), 'to dtype+device')
end)

T.test('cuda fills, creation ops, totable, item', function()
  local z = v100.zeros({ 1000, 1000 }, { device = 'cuda' })
  T.eq(z.device, 'cuda:0')
  T.eq(z:sum():item(), 0)
  T.eq(v100.ones({ 10, 10 }, { device = 'cuda', dtype = 'i64' }):sum():item(), 100)
  T.tensor_eq(v100.full({ 3, 5 }, 2.5, { device = 'cuda', dtype = 'bf16' }), v100.full({ 3, 5 }, 2.5, { dtype = 'bf16' }))
  T.tensor_eq(v100.arange(0, 1000000, 3, { device = 'cuda' }), v100.arange(0, 1000000, 3))
  T.tensor_eq(v100.arange(-2, 2, 0.25, { device = 'cuda' }), v100.arange(-2, 2, 0.25))
  local f = v100.empty({ 1000, 1000 }, { device = 'cuda', dtype = 'f16' })
  f:t():fill_(1.5)
  T.tensor_eq(f:float(), v100.full({ 1000, 1000 }, 1.5), 'fill_ via a transposed view')
  f:zero_()
  T.eq(f:float():abs():sum():item(), 0)
  local g = v100.tensor({ { 1, 2 }, { 3, 4 } }, { device = 'cuda', dtype = 'i32' })
  T.eq(g:totable(), { { 1, 2 }, { 3, 4 } })
  T.eq(g:sum():item(), 10)
  T.eq(math.type(g:sum():item()), 'integer')
end)

T.test('mixing devices names both', function()
  local a = v100.rand({ 2, 3 })
  local b = v100.rand({ 2, 3 }, { device = 'cuda' })
  T.raises(function() return a:add(b) end, { 'add', 'cpu', 'cuda' })
  T.raises(function() return b:matmul(a:t()) end, { 'matmul', 'cpu', 'cuda' })
  T.raises(function() return b:index_select(1, v100.tensor({ 0 }, { dtype = 'i64' })) end, { 'index_select', 'cpu', 'cuda' })
end)

-- last: a device-side index error may leave the device unusable for later tests
T.test('out-of-range index on cuda raises "out of bounds" by the next synchronize or item', function()
  local src = v100.rand({ 1000, 64 }, { device = 'cuda' })
  local idx = v100.tensor({ 3, 5, 1000, 7 }, { dtype = 'i64', device = 'cuda' })
  T.raises(function()
    local r = src:index_select(1, idx)
    v100.cuda.synchronize()
    return r:sum():item()
  end, 'out of bounds')
  local gidx = v100.tensor({ { 0 }, { 64 } }, { dtype = 'i64', device = 'cuda' })
  T.raises(function()
    local r = src:gather(2, gidx)
    return r:sum():item()
  end, 'out of bounds')
  -- the layers' gathers name the layer, also when the error is only seen at a later sync
  local nn = require 'v100.nn'
  local logits = v100.randn({ 4, 3 }, { device = 'cuda' })
  local y = v100.tensor({ 0, 2, 3, 1 }, { dtype = 'i64', device = 'cuda' })
  T.raises(function() return nn.F.cross_entropy(logits, y):item() end,
    { 'cross_entropy: index 3 is out of bounds', 'asynchronously' })
  local w = v100.randn({ 5, 2 }, { device = 'cuda' })
  T.raises(function() return nn.F.embedding(v100.tensor({ 0, 5 }, { dtype = 'i64', device = 'cuda' }), w):sum():item() end,
    { 'embedding: index 5 is out of bounds', 'asynchronously' })
  -- the flag was cleared by the report: the device works on
  local ok = nn.F.cross_entropy(logits, v100.tensor({ 0, 2, 1, 1 }, { dtype = 'i64', device = 'cuda' })):item()
  T.eq(ok == ok and ok > 0 and ok < math.huge, true, 'a finite positive loss after the reported error')
end)

T.run()
