-- tests/lua/gpu_indexing.lua: Torch7's indexing on CUDA against the CPU (tests/lua/test_indexing.lua
-- holds the CPU's own checks): every read form, its gradient, every write form, nonzero and
-- masked_select, in f32, f16 and i64, with the same inputs on both devices; and an index value
-- out of range reported on CUDA with the 0-based wording.
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'

v100.manual_seed(5000 + T.seed % 100000)

local function both(x) return x, x:to('cuda') end

T.test('reads on CUDA equal the CPU', function()
  for _, dt in ipairs { 'f32', 'f16', 'i64' } do
    local c, g = both((v100.randn({ 6, 5, 4 }, { dtype = 'f64' }) * 4):to(dt))
    local mc, mg = both(v100.randn({ 6, 5, 4 }):gt(0))
    local ic, ig = both(v100.tensor({ 5, 0, 2, 2 }, { dtype = 'i64' }))
    local keys = {
      { 2 }, { -1 }, { { 2, { 2, 4 } } }, { { {}, 3 } }, { { { 2 }, {}, { -2, -1 } } }, { { 1, 2, 3 } },
    }
    for _, k in ipairs(keys) do
      T.tensor_eq(g[k[1]]:cpu(), c[k[1]], dt .. ' key ' .. T.fmt(k[1]))
    end
    T.tensor_eq(g[mg]:cpu(), c[mc], dt .. ' mask')
    T.tensor_eq(g[ig]:cpu(), c[ic], dt .. ' index')
    T.tensor_eq(g:masked_select(mg):cpu(), c:masked_select(mc), dt .. ' masked_select')
    T.tensor_eq(mg:nonzero():cpu(), mc:nonzero(), dt .. ' nonzero')
    T.eq(mg:nonzero().device, 'cuda:0')
  end
end)

T.test('gradients of the reads on CUDA equal the CPU', function()
  local base = v100.randn({ 4, 6 })
  local m = v100.randn({ 4, 6 }):gt(0)
  local idx = v100.tensor({ 3, 1, 3 }, { dtype = 'i64' })
  local grads = {}
  for _, dev in ipairs { 'cpu', 'cuda' } do
    local x = base:to(dev):detach() -- a leaf of its own on each device (base:to('cpu') is base)
    x.requires_grad = true
    local mm, ii = m:to(dev), idx:to(dev)
    local l = x[{ 2, { 2, 5 } }]:sum() * 2 + (x[mm] * x[mm]):sum() + x[ii]:sum() * 3 + x[{ {}, { 6 } }]:sum()
    l:backward()
    grads[dev] = x.grad:cpu()
  end
  T.tensor_close(grads.cuda, grads.cpu, 1e-5, 1e-5)
end)

T.test('writes on CUDA equal the CPU', function()
  for _, dt in ipairs { 'f32', 'f16', 'i64' } do
    local c, g = both((v100.randn({ 5, 4 }, { dtype = 'f64' }) * 4):to(dt))
    local function w(k_c, k_g, v_c, v_g)
      c[k_c] = v_c
      g[k_g] = v_g
      T.tensor_eq(g:cpu(), c, dt .. ' after a write')
    end
    w(2, 2, 0, 0)
    w({ { 3, 4 }, 2 }, { { 3, 4 }, 2 }, both(v100.tensor({ 7, 8 }):to(dt)))
    local mc, mg = both(c:gt(1))
    w(mc, mg, -5, -5)
    local n = c:eq(-5):sum():item()
    local vc, vg = both(v100.arange(1, n + 1):to(dt))
    w(c:eq(-5), g:eq(-5), vc, vg)
    local ic, ig = both(v100.tensor({ 4, 0 }, { dtype = 'i64' }))
    local rc, rg = both(v100.tensor({ { 1, 2, 3, 4 }, { 5, 6, 7, 8 } }):to(dt))
    w(ic, ig, rc, rg)
    w(ic, ig, 3, 3)
  end
end)

T.test('gradients of the writes on CUDA equal the CPU (x zero where written, values the gradient there)', function()
  local base = v100.randn({ 4, 6 })
  local m = v100.randn({ 4, 6 }):gt(0)
  local k = m:sum():item()
  local vb, rb, qb = v100.randn({ 4 }), v100.randn({ k }), v100.randn({ 2, 4 })
  local w = v100.randn({ 6, 4 })
  local idx = v100.tensor({ 5, -6 }, { dtype = 'i64' }) -- distinct rows: CUDA keeps any one of repeats
  local out = {}
  for _, dev in ipairs { 'cpu', 'cuda' } do
    -- leaves of their own on each device (base:to('cpu') is base itself)
    local a = base:to(dev):detach():requires_grad_()
    local v, r, q = vb:to(dev):detach():requires_grad_(), rb:to(dev):detach():requires_grad_(), qb:to(dev):detach():requires_grad_()
    local x = a * 2
    x[{ 2, { 2, 5 } }] = v
    x[m:to(dev)] = r
    local y = x:t() * 1
    y[idx:to(dev)] = q
    ;(y * w:to(dev)):sum():backward()
    out[dev] = { a.grad:cpu(), v.grad:cpu(), r.grad:cpu(), q.grad:cpu() }
  end
  for i = 1, 4 do T.tensor_close(out.cuda[i], out.cpu[i], 1e-5, 1e-5, 'gradient ' .. i) end
  T.tensor_eq(out.cpu[4], w:index_select(1, v100.tensor({ 5, 0 }, { dtype = 'i64' })), 'by hand: q gets w at its rows')
end)

T.test('an index value out of range says values are 0-based', function()
  local g = v100.zeros({ 3, 2 }, { device = 'cuda' })
  T.raises(function() return g[v100.tensor({ 3 }, { dtype = 'i64', device = 'cuda' })]:cpu() end,
    { 'index 3 is out of bounds for dim 1 with size 3', 'index values are 0-based: 0 to 2' })
  -- scatter's kernel reports through the same asynchronous flag, naming scatter
  T.raises(function()
    return v100.zeros({ 3 }, { device = 'cuda' }):scatter(1, v100.tensor({ 4 }, { dtype = 'i64', device = 'cuda' }), 1):cpu()
  end, { 'scatter', 'index 4 is out of bounds for dim 1 with size 3', 'index values are 0-based: 0 to 2' })
  T.raises(function() g[v100.tensor({ 5 }, { dtype = 'i64', device = 'cuda' })] = 1 end,
    'x[index] = value: index 5 is out of bounds for dim 1 with size 3 (index values are 0-based: 0 to 2, or -3 to -1 from the end)')
end)

T.run()
