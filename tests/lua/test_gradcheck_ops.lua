-- Gradient checks (finite differences in f64 on the CPU) of every differentiable foundation op:
-- small fresh random shapes, broadcast operands, non-contiguous inputs, several dims/keepdim.
local T = require 'testlib'
local v100 = require 'v100'
local gradcheck = v100.autograd.gradcheck

local F64 = { dtype = 'f64', requires_grad = true }

-- Uniform in [lo, hi) away from 0 when lo > 0 (for log, sqrt, division, pow bases).
local function rnd(shape, lo, hi)
  lo, hi = lo or -1, hi or 1
  local t = v100.rand(shape, { dtype = 'f64' }) * (hi - lo) + lo
  return t:requires_grad_()
end
local function rndn(shape) return v100.randn(shape, F64) end
-- A non-contiguous leaf: the transpose of a fresh tensor.
local function rnd_t(shape, lo, hi)
  local t = v100.rand({ shape[2], shape[1] }, { dtype = 'f64' }) * ((hi or 1) - (lo or -1)) + (lo or -1)
  return t:t():requires_grad_()
end
-- Values at least `gap` apart from each other (no ties: max/min, abs, relu... are smooth there).
local function distinct(shape, gap)
  local n = T.numel(shape)
  local vals = {}
  for i = 1, n do vals[i] = (i - (n + 1) / 2) * (gap or 0.1) + 0.013 end
  for i = n, 2, -1 do
    local j = math.random(i)
    vals[i], vals[j] = vals[j], vals[i]
  end
  return v100.tensor(T.unflatten(vals, shape), F64)
end

local function check(name, fn, inputs, opts)
  local ok, err = pcall(gradcheck, fn, inputs, opts)
  if not ok then error(name .. ': ' .. tostring(err), 2) end
end

T.test('binary ops with broadcasting and alpha', function()
  local cases = { { { 3, 4 }, { 3, 4 } }, { { 3, 1 }, { 1, 4 } }, { { 2, 3, 4 }, { 4 } }, { {}, { 2, 3 } } }
  for _, c in ipairs(cases) do
    local tag = T.shape_str(c[1]) .. ' with ' .. T.shape_str(c[2])
    check('add ' .. tag, function(a, b) return a:add(b, 0.7) end, { rndn(c[1]), rndn(c[2]) })
    check('sub ' .. tag, function(a, b) return a:sub(b, 1.3) end, { rndn(c[1]), rndn(c[2]) })
    check('mul ' .. tag, function(a, b) return a * b end, { rndn(c[1]), rndn(c[2]) })
    check('div ' .. tag, function(a, b) return a / b end, { rndn(c[1]), rnd(c[2], 0.5, 2) })
    check('pow ' .. tag, function(a, b) return a ^ b end, { rnd(c[1], 0.5, 2), rndn(c[2]) })
  end
  check('maximum', function(a, b) return a:maximum(b) end, { distinct({ 3, 4 }), distinct({ 3, 4 }, 0.07) })
  check('minimum broadcast', function(a, b) return a:minimum(b) end, { distinct({ 3, 4 }), distinct({ 4 }, 0.13) })
  check('non-contiguous mul', function(a, b) return a * b end, { rnd_t({ 3, 4 }), rnd_t({ 3, 4 }) })
  check('mixed requires_grad', function(a, b) return a * b end, { rndn({ 2, 3 }), v100.randn({ 2, 3 }, { dtype = 'f64' }) })
end)

T.test('maximum/minimum split ties evenly', function()
  local a = v100.tensor({ 1, 2, 3 }, F64)
  local b = v100.tensor({ 1, 5, 0 }, F64)
  a:maximum(b):sum():backward()
  T.allclose(a.grad, { 0.5, 0, 1 }, 1e-12)
  T.allclose(b.grad, { 0.5, 1, 0 }, 1e-12)
end)

T.test('tensor-scalar ops on both sides', function()
  local x = function() return rnd({ 3, 4 }, 0.5, 2) end
  check('add s', function(a) return a + 2.5 end, { x() })
  check('s - a', function(a) return 2.5 - a end, { x() })
  check('a - s', function(a) return a - 2.5 end, { x() })
  check('a * s', function(a) return a * -1.5 end, { x() })
  check('s * a', function(a) return 3 * a end, { x() })
  check('a / s', function(a) return a / 1.7 end, { x() })
  check('s / a', function(a) return 1.7 / a end, { x() })
  check('a ^ s', function(a) return a ^ 2.5 end, { x() })
  check('a ^ 0', function(a) return a ^ 0 end, { x() })
  check('s ^ a', function(a) return 1.9 ^ a end, { x() })
  check('maximum s', function(a) return a:maximum(0.05) end, { distinct({ 3, 4 }) })
  check('minimum s', function(a) return a:minimum(0.05) end, { distinct({ 3, 4 }) })
end)

T.test('unary ops', function()
  local smooth = {
    { 'neg' }, { 'square' }, { 'exp' }, { 'tanh' }, { 'sigmoid' }, { 'sin' }, { 'cos' },
    { 'log', 0.5, 2 }, { 'sqrt', 0.5, 2 }, { 'rsqrt', 0.5, 2 }, { 'reciprocal', 0.5, 2 },
  }
  for _, c in ipairs(smooth) do
    check(c[1], function(a) return a[c[1]](a) end, { rnd({ 3, 4 }, c[2], c[3]) })
    check(c[1] .. ' non-contiguous', function(a) return a[c[1]](a) end, { rnd_t({ 3, 4 }, c[2], c[3]) })
  end
  for _, name in ipairs({ 'abs', 'relu' }) do
    check(name, function(a) return a[name](a) end, { distinct({ 3, 4 }) })
  end
  check('gelu', function(a) return a:gelu() end, { rndn({ 3, 4 }) })
  check('gelu tanh', function(a) return a:gelu({ approximate = 'tanh' }) end, { rndn({ 3, 4 }) })
  check('clamp', function(a) return a:clamp(-0.31, 0.42) end, { distinct({ 4, 5 }) })
  check('clamp lo only', function(a) return a:clamp(-0.31) end, { distinct({ 4, 5 }) })
  check('clamp hi only', function(a) return a:clamp(nil, 0.2) end, { distinct({ 4, 5 }) })
  for _, name in ipairs({ 'sign', 'floor', 'ceil', 'round' }) do
    local x = distinct({ 3, 4 }, 0.37)
    check(name, function(a) return a[name](a) end, { x })
    x[name](x):sum():backward()
    T.allclose(x.grad, v100.zeros({ 3, 4 }, { dtype = 'f64' }), 0, 0, name .. ' has a zero gradient')
  end
end)

T.test('where and masked_fill', function()
  local cond = v100.rand({ 3, 4 }):gt(0.5)
  check('where', function(a, b) return v100.where(cond, a, b) end, { rndn({ 3, 4 }), rndn({ 3, 4 }) })
  check('where broadcast', function(a, b) return v100.where(cond, a, b) end, { rndn({ 3, 1 }), rndn({ 4 }) })
  check('where scalar', function(a) return v100.where(cond, a, 0.5) end, { rndn({ 3, 4 }) })
  local mask = v100.rand({ 4 }):gt(0.5)
  check('masked_fill', function(a) return a:masked_fill(mask, 2.5) end, { rndn({ 3, 4 }) })
end)

T.test('sum / mean over dims with keepdim', function()
  local dimsets = { nil, 1, 2, -1, { 1, 3 }, { 2, 3 } }
  for _, red in ipairs({ 'sum', 'mean' }) do
    for i = 1, 6 do
      for _, keep in ipairs({ false, true }) do
        local dims = dimsets[i]
        check(string.format('%s dims %s keepdim %s', red, T.fmt(dims), tostring(keep)),
          function(a) return a[red](a, dims, keep) end, { rndn({ 2, 3, 4 }) })
      end
    end
    check(red .. ' non-contiguous', function(a) return a[red](a, 1) end, { rnd_t({ 3, 4 }) })
  end
end)

T.test('prod', function()
  check('prod all', function(a) return a:prod() end, { rnd({ 2, 3 }, 0.5, 1.5) })
  check('prod dim', function(a) return a:prod(2, true) end, { rnd({ 3, 4 }, -1.5, -0.5) })
  check('prod dims', function(a) return a:prod({ 1, 3 }) end, { rnd({ 2, 3, 2 }, 0.5, 1.5) })
  -- zeros: rows with none, one and two zeros (the gradient is the product of the others)
  local z = v100.tensor({ { 0.7, -1.2, 1.3, 0.9 }, { 0.8, 0, 1.1, -0.6 }, { 0, 1.4, 0, 0.5 } }, F64)
  check('prod dim with zeros', function(a) return a:prod(2) end, { z })
  check('prod all with one zero', function(a) return a:prod() end, { v100.tensor({ { 1.5, 0 }, { -0.8, 1.2 } }, F64) })
  local a = v100.tensor({ { 2, 0, 3 }, { 0, 0, 5 } }, F64)
  a:prod(2):sum():backward()
  T.allclose(a.grad, { { 0, 6, 0 }, { 0, 0, 0 } }, 1e-12, 'prod gradient at zeros')
end)

T.test('max / min with and without dim', function()
  for _, name in ipairs({ 'max', 'min' }) do
    check(name .. ' all', function(a) return a[name](a) end, { distinct({ 3, 4 }) })
    for _, d in ipairs({ 1, 2, -1 }) do
      for _, keep in ipairs({ false, true }) do
        check(string.format('%s dim %d keepdim %s', name, d, tostring(keep)),
          function(a) return (a[name](a, d, keep)) end, { distinct({ 3, 4 }) })
      end
    end
  end
  -- ties without a dim share the gradient evenly
  local x = v100.tensor({ 1, 3, 3, 2 }, F64)
  x:max():backward()
  T.allclose(x.grad, { 0, 0.5, 0.5, 0 }, 1e-12)
  -- with a dim: the position of the index gets it all
  local y = v100.tensor({ { 1, 4 }, { 5, 2 } }, F64)
  local vals, idx = y:max(2)
  T.alleq(idx, { 1, 0 });
  (vals * v100.tensor({ 2, 3 }, { dtype = 'f64' })):sum():backward()
  T.allclose(y.grad, { { 0, 2 }, { 3, 0 } }, 1e-12)
end)

T.test('var / std with correction', function()
  for _, corr in ipairs({ 0, 1 }) do
    for _, dims in ipairs({ false, 1, 2, { 1, 2 } }) do
      local d = dims or nil
      check(string.format('var dims %s correction %d', T.fmt(dims), corr),
        function(a) return a:var(d, true, { correction = corr }) end, { rndn({ 3, 4 }) })
      check(string.format('std dims %s correction %d', T.fmt(dims), corr),
        function(a) return a:std(d, false, { correction = corr }) end, { rndn({ 3, 4 }) })
    end
  end
end)

T.test('norm: p = 1, 2, inf, 3, 0.5', function()
  for _, p in ipairs({ 1, 2, math.huge, 3, 0.5 }) do
    check('norm p ' .. p, function(a) return a:norm(p) end, { distinct({ 3, 4 }) })
    check('norm p ' .. p .. ' dim', function(a) return a:norm(p, 2, true) end, { distinct({ 3, 4 }) })
  end
end)

T.test('softmax / log_softmax', function()
  for _, d in ipairs({ 1, 2, -1 }) do
    check('softmax ' .. d, function(a) return a:softmax(d) end, { rndn({ 3, 4 }) })
    check('log_softmax ' .. d, function(a) return a:log_softmax(d) end, { rndn({ 3, 4 }) })
  end
  check('softmax 3-D middle dim', function(a) return a:softmax(2) end, { rndn({ 2, 3, 4 }) })
  check('log_softmax non-contiguous', function(a) return a:log_softmax(1) end, { rnd_t({ 3, 4 }) })
end)

T.test('matmul in all its forms', function()
  local cases = {
    { { 5 }, { 5 } }, { { 3, 5 }, { 5 } }, { { 5 }, { 5, 4 } }, { { 3, 5 }, { 5, 4 } },
    { { 2, 3, 5 }, { 2, 5, 4 } }, { { 2, 3, 5 }, { 5, 4 } }, { { 3, 5 }, { 2, 5, 4 } },
    { { 2, 1, 3, 5 }, { 3, 5, 4 } }, { { 2, 3, 5 }, { 5 } }, { { 5 }, { 2, 5, 4 } },
  }
  for _, c in ipairs(cases) do
    check('matmul ' .. T.shape_str(c[1]) .. ' @ ' .. T.shape_str(c[2]), function(a, b) return a:matmul(b) end,
      { rndn(c[1]), rndn(c[2]) })
  end
  check('mm non-contiguous', function(a, b) return a:mm(b) end, { rnd_t({ 3, 5 }), rnd_t({ 5, 4 }) })
  check('bmm', function(a, b) return a:bmm(b) end, { rndn({ 2, 3, 5 }), rndn({ 2, 5, 4 }) })
  check('addmm', function(c, a, b) return v100.addmm(c, a, b, { beta = 0.5, alpha = 1.5 }) end,
    { rndn({ 3, 4 }), rndn({ 3, 5 }), rndn({ 5, 4 }) })
  check('addmm bias broadcast', function(c, a, b) return v100.addmm(c, a, b) end,
    { rndn({ 4 }), rndn({ 3, 5 }), rndn({ 5, 4 }) })
end)

T.test('gather / scatter_add / index_select', function()
  local idx = v100.tensor(T.rand_int_table({ 3, 2 }, 0, 3, true))
  check('gather dim 2', function(a) return a:gather(2, idx) end, { rndn({ 3, 4 }) })
  local idx1 = v100.tensor(T.rand_int_table({ 2, 4 }, 0, 2, true))
  check('gather dim 1', function(a) return a:gather(1, idx1) end, { rndn({ 3, 4 }) })
  local sidx = v100.tensor(T.rand_int_table({ 2, 3 }, 0, 4, true))
  check('scatter_add', function(s, src) return s:scatter_add(2, sidx, src) end, { rndn({ 3, 5 }), rndn({ 2, 4 }) })
  local isel = v100.tensor({ 2, 0, 2, 1 })
  check('index_select dim 1', function(a) return a:index_select(1, isel) end, { rndn({ 3, 4 }) })
  check('index_select dim 2 i32', function(a) return a:index_select(2, isel:int()) end, { rndn({ 3, 4 }) })
end)

T.test('cat / stack / split / chunk', function()
  check('cat dim 1', function(a, b) return v100.cat({ a, b }, 1) end, { rndn({ 2, 3 }), rndn({ 4, 3 }) })
  check('cat dim 2', function(a, b, c) return v100.cat({ a, b, c }, 2) end, { rndn({ 2, 3 }), rndn({ 2, 1 }), rndn({ 2, 2 }) })
  check('stack dim 2', function(a, b) return v100.stack({ a, b }, 2) end, { rndn({ 2, 3 }), rndn({ 2, 3 }) })
  check('split', function(a)
    local p = a:split(2, 2)
    return p[1] * 2, p[2]:exp(), p[3]
  end, { rndn({ 3, 5 }) })
  check('chunk, some pieces unused', function(a)
    local p = a:chunk(3, 1)
    return p[2]:sin()
  end, { rndn({ 6, 2 }) })
end)

T.test('views', function()
  check('view', function(a) return a:view(4, 3) end, { rndn({ 3, 4 }) })
  check('reshape non-contiguous', function(a) return a:reshape(12) end, { rnd_t({ 3, 4 }) })
  check('narrow', function(a) return a:narrow(2, 2, 2) end, { rndn({ 3, 4 }) })
  check('select', function(a) return a:select(1, 2) end, { rndn({ 3, 4 }) })
  check('select negative', function(a) return a:select(2, -1) end, { rndn({ 3, 4 }) })
  check('transpose', function(a) return a:transpose(1, 3) end, { rndn({ 2, 3, 4 }) })
  check('t', function(a) return a:t() * 2 end, { rndn({ 3, 4 }) })
  check('permute', function(a) return a:permute(3, 1, 2) end, { rndn({ 2, 3, 4 }) })
  check('expand', function(a) return a:expand(2, 3, 4) end, { rndn({ 3, 1 }) })
  check('expand_as', function(a, b) return a:expand_as(b) * b end, { rndn({ 4 }), rndn({ 3, 4 }) })
  check('squeeze', function(a) return a:squeeze() end, { rndn({ 3, 1, 4 }) })
  check('squeeze dim', function(a) return a:squeeze(2) end, { rndn({ 3, 1, 4 }) })
  check('unsqueeze', function(a) return a:unsqueeze(2) end, { rndn({ 3, 4 }) })
  check('contiguous', function(a) return a:contiguous() end, { rnd_t({ 3, 4 }) })
  check('clone', function(a) return a:clone() end, { rndn({ 3, 4 }) })
  check('view chain', function(a) return a:view(2, 6):t():reshape(3, 4):narrow(1, 2, 2) end, { rndn({ 3, 4 }) })
end)

T.test('to(dtype) converts the gradient back', function()
  check('to f32 and back', function(a) return a:float():double() * 3 end, { rndn({ 3, 4 }) }, { eps = 1e-2, atol = 1e-3, rtol = 1e-3 })
  local x = rndn({ 2, 3 })
  x:float():sum():backward()
  T.eq(x.grad.dtype, 'f64')
  T.allclose(x.grad, v100.ones({ 2, 3 }, { dtype = 'f64' }), 0, 0)
end)

T.test('composite expression', function()
  check('mlp-ish', function(x, w, b)
    return (x:matmul(w) + b):tanh():pow(2):mean(2)
  end, { rndn({ 4, 3 }), rndn({ 3, 5 }), rndn({ 5 }) })
end)

T.run()
