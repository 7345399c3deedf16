-- tests/lua/test_threads.lua: the CPU backend's threads change no result. Elementwise ops (on
-- contiguous, strided and broadcast operands), reductions over a dim, softmax and its backward, layer norm and its
-- backward (whose weight and bias gradients are sums over rows, taken in fixed chunks) give
-- bitwise the same tensors with 1 and with 4 threads, as do random fills (blocks of the Philox stream
-- on the threads), optimizer steps (chunks of tensors on the threads) and the vectorised f32 math (kernels/cpu/cpu_vmath.h: a run's tail goes through the
-- same vector code); GEMMs (blocks of C over the threads, OpenBLAS single-threaded in each) agree
-- within rounding; v100.set_num_threads/get_num_threads.
local T = require 'testlib'
local v100 = require 'v100'
local F = require 'v100.nn.functional'

local function with_threads(n, fn)
  local prev = v100.set_num_threads(n)
  local ok, a, b, c, d = pcall(fn)
  v100.set_num_threads(prev)
  if not ok then error(a, 0) end
  return a, b, c, d
end

local function same(a, b, what)
  T.eq(a.dtype, b.dtype, what .. ': dtype')
  T.alleq(a, b, what .. ': bitwise the same with 1 and 4 threads')
end

T.test('set_num_threads returns the previous count; get_num_threads the current one', function()
  local prev = v100.set_num_threads(3)
  T.eq(v100.get_num_threads(), 3)
  T.eq(v100.set_num_threads(prev), 3)
  T.eq(v100.get_num_threads(), prev)
  T.raises(function() v100.set_num_threads('x') end, 'number expected')
  T.raises(function() v100.set_num_threads(5000) end, 'at most 4096 threads')
end)

T.test('elementwise ops: the same with 1 and 4 threads (contiguous, strided, broadcast)', function()
  v100.manual_seed(7)
  local x = v100.randn{ 300, 257 }
  local y = v100.randn{ 257, 300 }:t() -- strided
  local b = v100.randn{ 257 }          -- broadcast
  local h = v100.randn{ 300, 257 }:to('bf16')
  local N = v100._nn
  local function ops()
    return { x + y, x * b, x:tanh(), F.gelu(x), F.gelu(x, { approximate = 'tanh' }), x:exp(), x:sigmoid(),
      (x + y):relu(), h * 3, h:to('f32') + x, x:to('f64'):tanh(), x:abs():log(), x * 1.1, b - x, x / b,
      N.activation_backward('gelu_backward', y, x), N.activation_backward('gelu_tanh_backward', y, x),
      N.activation_backward('tanh_backward', y, x:tanh()), N.activation_backward('sigmoid_backward', y, x:sigmoid()),
      x:maximum(y), x:log_softmax(2) }
  end
  local one = with_threads(1, ops)
  local four = with_threads(4, ops)
  for i = 1, #one do same(one[i], four[i], 'op ' .. i) end
  -- and they are right: a few against the double path's values
  T.allclose(one[3], x:to('f64'):tanh():to('f32'), 1e-6, 1e-7, 'float tanh within 1e-6 of double tanh')
  T.allclose(one[4], F.gelu(x:to('f64')):to('f32'), 1e-6, 1e-7, 'float gelu within 1e-6 of double gelu')
  T.allclose(one[16], N.activation_backward('gelu_backward', y:to('f64'), x:to('f64')):to('f32'), 1e-6, 1e-6,
    'float gelu gradient within 1e-6 of the double one')
end)

T.test('random fills (uniform, normal, bernoulli; f32, f64, bf16): the same with 1 and 4 threads', function()
  local function draw()
    v100.manual_seed(21)
    return { v100.rand{ 1001, 333 }, v100.randn{ 1001, 333 }, v100.bernoulli({ 1001, 333 }, 0.9),
      v100.rand({ 999, 35 }, { dtype = 'f64' }), v100.randn({ 7, 1001 }, { dtype = 'bf16' }),
      v100.bernoulli({ 3, 5 }, 0.5, { dtype = 'f64' }) }
  end
  local one = with_threads(1, draw)
  local four = with_threads(4, draw)
  for i = 1, #one do same(one[i], four[i], 'draw ' .. i) end
  local keep = one[3]:mean():item()
  T.ok(keep > 0.89 and keep < 0.91, 'bernoulli(0.9) keeps ' .. keep)
end)

T.test('optimizer steps (SGD with momentum, AdamW, LAMB; tensors cut into chunks): the same with 1 and 4 threads', function()
  local optim = require 'v100.optim'
  local function run(make)
    v100.manual_seed(3)
    local ps = { v100.randn{ 300, 200 }, v100.randn{ 7 }, v100.randn{ 40000 } }
    local opt = make(ps)
    for _ = 1, 3 do
      for _, p in ipairs(ps) do p.grad = v100.randn(p.shape) end
      opt:step()
    end
    return ps
  end
  for _, make in ipairs({
    function(ps) return optim.SGD(ps, { lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 1e-3 }) end,
    function(ps) return optim.AdamW(ps, { lr = 1e-2, weight_decay = 0.05 }) end,
    function(ps) return optim.LAMB(ps, { lr = 1e-2, weight_decay = 0.01 }) end,
  }) do
    local one = with_threads(1, function() return run(make) end)
    local four = with_threads(4, function() return run(make) end)
    for i = 1, #one do same(one[i], four[i], 'parameter ' .. i) end
  end
end)

T.test('softmax, layer norm and their backwards: the same with 1 and 4 threads', function()
  v100.manual_seed(11)
  local x0 = v100.randn{ 64, 8, 130 }
  local w = v100.randn{ 130 }
  local bias = v100.randn{ 130 }
  local function run()
    local x = x0:clone():requires_grad_(true)
    local ww = w:clone():requires_grad_(true)
    local bb = bias:clone():requires_grad_(true)
    local s = x:softmax(3)
    local s2 = x:log_softmax(2) -- along a middle dim: lanes side by side
    local l = F.layer_norm(x, { 130 }, ww, bb)
    local loss = (s * x0):sum() + (s2 * 0.5):sum() + (l * l):sum()
    loss:backward()
    return s:detach(), l:detach(), x.grad, { ww.grad, bb.grad, s2:detach() }
  end
  local s1, l1, g1, p1 = with_threads(1, run)
  local s4, l4, g4, p4 = with_threads(4, run)
  same(s1, s4, 'softmax')
  same(p1[3], p4[3], 'log_softmax over dim 2')
  same(l1, l4, 'layer_norm')
  same(g1, g4, 'input gradient')
  same(p1[1], p4[1], 'layer_norm weight gradient')
  same(p1[2], p4[2], 'layer_norm bias gradient')
end)

T.test('reductions over a dim (sum, mean, max with indices, var, norm, integers): the same with 1 and 4 threads', function()
  v100.manual_seed(13)
  local x = v100.randn{ 300, 200 }
  local x3 = v100.randn{ 40, 50, 30 }
  local xi = (v100.rand{ 500, 70 } * 1000):to('i64')
  local tall = v100.randn{ 1100, 300 } -- a sum over 1100 rows: fixed chunks of 256 on the threads
  local function red()
    local mx, imx = x:max(2)
    local mn, imn = x3:min(2)
    return { x:sum(2), x:sum(1), x:mean(2), mx, imx, mn, imn, x:var(2), x:norm(2, 2), x3:sum(3), x3:sum(2), xi:sum(2),
      x:sum(), tall:sum(1), tall:mean(1), x3:sum(1) }
  end
  local one = with_threads(1, red)
  local four = with_threads(4, red)
  for i = 1, #one do same(one[i], four[i], 'reduction ' .. i) end
  T.allclose(one[14], tall:to('f64'):sum(1):to('f32'), 1e-6, 1e-6, 'chunked f32 sum against the f64 sum')
end)

T.test('matmul (f32, f64, batched, transposed, with a bias): the same with 1 and 4 threads', function()
  v100.manual_seed(5)
  local a = v100.randn{ 700, 300 }
  local b = v100.randn{ 300, 500 }
  local bt = v100.randn{ 500, 300 }
  local wide = v100.randn{ 8, 300 }
  local bias = v100.randn{ 500 }
  local ba = v100.randn{ 6, 130, 64 }
  local bb = v100.randn{ 6, 64, 120 }
  local function mm()
    return { a:matmul(b), a:matmul(bt:t()), a:t():t():matmul(b), wide:matmul(b), ba:matmul(bb),
      a:to('f64'):matmul(b:to('f64')), F.linear(a, bt, bias), a:to('bf16'):matmul(b:to('bf16')) }
  end
  local one = with_threads(1, mm)
  local four = with_threads(4, mm)
  -- OpenBLAS's kernels for the edge of a block may sum in another order: within rounding. An f32
  -- dot of k = 300 products (|a_ij b_jk| ~ 1, results ~ 17) rounds differently per order by about
  -- sqrt(k) ulps of the partial sums: 5.7e-5 seen on a Zen 3 (OpenBLAS's Haswell kernels), none on
  -- SkylakeX's. 3e-4 is well inside a misplaced or missing block's error (of order 1).
  for i = 1, #one do
    local tol = one[i].dtype == 'f64' and 1e-13 or one[i].dtype == 'bf16' and 1e-2 or 3e-4
    T.allclose(one[i], four[i], tol, tol, 'matmul ' .. i .. ' with 1 and 4 threads')
  end
  T.allclose(one[1], a:to('f64'):matmul(b:to('f64')):to('f32'), 1e-4, 1e-4, 'f32 matmul against f64')
  T.allclose(one[7], a:matmul(bt:t()) + bias, 3e-4, 3e-4, 'linear = x w^T + b (the bias in the GEMM: another order)')
end)

T.run()
