-- tests/lua/test_nn_layers.lua: each layer of v100.nn against a direct computation in plain Lua
-- (f64 references from the tensors' stored values) on small random inputs, and
-- v100.autograd.gradcheck in f64 of each layer w.r.t. its inputs and parameters.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F

v100.manual_seed(T.seed % 1000003)

local function f64(shape, lo, hi)
  local t = T.make(shape, 'f64', lo, hi)
  return t:requires_grad_(true)
end

-- Flat f64 values and shape of a tensor.
local function nd(t) return T.nd(t:detach()) end

-- Offset of a 1-based multi-index in a row-major shape.
local function off(shape, ...)
  local idx, o = { ... }, 0
  for d = 1, #shape do o = o * shape[d] + (idx[d] - 1) end
  return o + 1
end

-- Runs gradcheck after moving a module's parameters to f64 leaves; fn(inputs...) must use the
-- passed tensors (it assigns parameters into the module, so in-place perturbation or copies
-- both work).
local function check_module_grads(m, x, names)
  m:double()
  local inputs = { x }
  for _, n in ipairs(names) do inputs[#inputs + 1] = m[n] end
  return v100.autograd.gradcheck(function(xx, ...)
    local ps = { ... }
    for i, n in ipairs(names) do m[n] = ps[i] end
    return m(xx)
  end, inputs)
end

-- ---------------------------------------------------------------------------------------------
T.test('Linear: forward = x W^T + b on 2-D and 3-D inputs, default init bounds', function()
  local m = nn.Linear(5, 3)
  local bound = 1 / math.sqrt(5)
  for _, p in ipairs{ m.weight, m.bias } do
    T.ok(p:abs():max():item() <= bound, 'init within 1/sqrt(fan_in)')
    T.ok(p.requires_grad and p.is_leaf, 'parameters are leaves that require grad')
  end
  for _, shape in ipairs{ { 4, 5 }, { 2, 3, 5 } } do
    local x = T.make(shape)
    local y = m(x)
    local ref = T.ref_binary(T.ref_matmul(x, m.weight:detach():t():contiguous()), m.bias:detach(), function(a, b) return a + b end)
    T.allclose(y, ref, 1e-5, 1e-6, 'shape ' .. table.concat(shape, 'x'))
  end
  T.eq(nn.Linear(5, 3, { bias = false })(v100.ones{ 1, 5 }).shape, { 1, 3 })
end)

T.test('Linear: gradcheck w.r.t. input, weight and bias', function()
  local m = nn.Linear(4, 3)
  T.ok(check_module_grads(m, f64{ 2, 4 }, { 'weight', 'bias' }))
  local m3 = nn.Linear(4, 2)
  T.ok(check_module_grads(m3, f64{ 2, 3, 4 }, { 'weight', 'bias' }))
end)

-- ---------------------------------------------------------------------------------------------
local function ref_conv2d(x, w, b, st, pad, dil, groups)
  local X, W = nd(x), nd(w)
  local N, Cin, H, Wd = table.unpack(X.shape)
  local K, Cg, R, S = table.unpack(W.shape)
  local P = (H + 2 * pad[1] - dil[1] * (R - 1) - 1) // st[1] + 1
  local Q = (Wd + 2 * pad[2] - dil[2] * (S - 1) - 1) // st[2] + 1
  local Bv = b and nd(b).data
  local out = {}
  local Kg = K // groups
  for n = 1, N do for k = 1, K do
    local g = (k - 1) // Kg
    for p = 1, P do for q = 1, Q do
      local s = Bv and Bv[k] or 0
      for c = 1, Cg do for r = 1, R do for ss = 1, S do
        local h = (p - 1) * st[1] - pad[1] + (r - 1) * dil[1] + 1
        local wi = (q - 1) * st[2] - pad[2] + (ss - 1) * dil[2] + 1
        if h >= 1 and h <= H and wi >= 1 and wi <= Wd then
          s = s + X.data[off(X.shape, n, g * Cg + c, h, wi)] * W.data[off(W.shape, k, c, r, ss)]
        end
      end end end
      out[#out + 1] = s
    end end
  end end
  return { shape = { N, K, P, Q }, data = out }
end

T.test('Conv2d: forward against a direct loop (stride, padding, dilation, groups)', function()
  local cases = {
    { cin = 3, cout = 4, k = 3, opts = { stride = 1, padding = 1 } },
    { cin = 2, cout = 3, k = { 3, 2 }, opts = { stride = { 2, 1 }, padding = { 1, 0 } } },
    { cin = 4, cout = 6, k = 3, opts = { stride = 2, padding = 2, dilation = 2, groups = 2 } },
    { cin = 3, cout = 2, k = 1, opts = { bias = false } },
  }
  for i, c in ipairs(cases) do
    local m = nn.Conv2d(c.cin, c.cout, c.k, c.opts)
    local x = T.make{ 2, c.cin, 7, 6 }
    local ref = ref_conv2d(x, m.weight, m.bias, m.stride, m.padding, m.dilation, m.groups)
    T.allclose(m(x), ref, 1e-4, 1e-5, 'case ' .. i)
  end
end)

T.test('Conv2d: gradcheck w.r.t. input, weight and bias', function()
  local m = nn.Conv2d(4, 4, 3, { stride = 2, padding = 1, groups = 2 })
  T.ok(check_module_grads(m, f64{ 2, 4, 5, 5 }, { 'weight', 'bias' }))
  local m2 = nn.Conv2d(2, 3, { 2, 3 }, { dilation = { 2, 1 } })
  T.ok(check_module_grads(m2, f64{ 1, 2, 5, 6 }, { 'weight', 'bias' }))
end)

-- ---------------------------------------------------------------------------------------------
local function ref_pool(x, kind, k, st, pad, cip)
  local X = nd(x)
  local N, C, H, W = table.unpack(X.shape)
  local P = (H + 2 * pad[1] - k[1]) // st[1] + 1
  local Q = (W + 2 * pad[2] - k[2]) // st[2] + 1
  local out = {}
  for n = 1, N do for c = 1, C do for p = 1, P do for q = 1, Q do
    local m, s, cnt = -math.huge, 0, 0
    for r = 1, k[1] do for ss = 1, k[2] do
      local h = (p - 1) * st[1] - pad[1] + r
      local w = (q - 1) * st[2] - pad[2] + ss
      if h >= 1 and h <= H and w >= 1 and w <= W then
        local v = X.data[off(X.shape, n, c, h, w)]
        m = math.max(m, v)
        s = s + v
        cnt = cnt + 1
      end
    end end
    if kind == 'max' then out[#out + 1] = m
    else out[#out + 1] = s / (cip and k[1] * k[2] or cnt) end
  end end end end
  return { shape = { N, C, P, Q }, data = out }
end

T.test('MaxPool2d / AvgPool2d / AdaptiveAvgPool2d: forward against direct loops', function()
  local x = T.make{ 2, 3, 7, 8 }
  T.allclose(nn.MaxPool2d(2)(x), ref_pool(x, 'max', { 2, 2 }, { 2, 2 }, { 0, 0 }), 1e-6, 0, 'max 2')
  T.allclose(nn.MaxPool2d(3, { stride = 2, padding = 1 })(x), ref_pool(x, 'max', { 3, 3 }, { 2, 2 }, { 1, 1 }), 1e-6, 0)
  T.allclose(nn.AvgPool2d(2)(x), ref_pool(x, 'avg', { 2, 2 }, { 2, 2 }, { 0, 0 }, true), 1e-5, 1e-6, 'avg 2')
  T.allclose(nn.AvgPool2d(3, { stride = 2, padding = 1 })(x), ref_pool(x, 'avg', { 3, 3 }, { 2, 2 }, { 1, 1 }, true),
    1e-5, 1e-6, 'avg count_include_pad')
  T.allclose(nn.AvgPool2d(3, { stride = 2, padding = 1, count_include_pad = false })(x),
    ref_pool(x, 'avg', { 3, 3 }, { 2, 2 }, { 1, 1 }, false), 1e-5, 1e-6, 'avg excluding pad')
  -- adaptive 1x1 = global mean; 7x8 -> 7x4 = windows of width 2
  T.allclose(nn.AdaptiveAvgPool2d(1)(x), x:mean({ 3, 4 }, true), 1e-5, 1e-6, 'adaptive 1x1')
  T.allclose(nn.AdaptiveAvgPool2d{ 7, 4 }(x), ref_pool(x, 'avg', { 1, 2 }, { 1, 2 }, { 0, 0 }, true), 1e-5, 1e-6)
end)

T.test('pooling: gradcheck', function()
  local x = f64{ 2, 2, 5, 6 }
  local g = v100.autograd.gradcheck
  -- Max pooling is not differentiable at ties: a central difference across two window values
  -- closer than eps mixes both routes. Distinct values 0.01 apart (a shuffled ramp) keep every
  -- window's maximum unique by far more than eps, whatever the seed.
  local vals = {}
  for i = 1, 2 * 2 * 5 * 6 do vals[i] = (i - 60) * 0.01 end
  for i = #vals, 2, -1 do
    local j = math.random(i)
    vals[i], vals[j] = vals[j], vals[i]
  end
  local xm = v100.tensor(vals, { dtype = 'f64' }):view(2, 2, 5, 6):requires_grad_(true)
  T.ok(g(function(t) return F.max_pool2d(t, 2, { stride = 1 }) end, { xm }))
  T.ok(g(function(t) return F.avg_pool2d(t, 3, { stride = 2, padding = 1 }) end, { x }))
  T.ok(g(function(t) return F.avg_pool2d(t, 3, { stride = 2, padding = 1, count_include_pad = false }) end, { x }))
  T.ok(g(function(t) return F.adaptive_avg_pool2d(t, { 2, 3 }) end, { x }))
end)

-- ---------------------------------------------------------------------------------------------
T.test('BatchNorm2d: batch statistics in training, running stats (unbiased var), eval', function()
  local C = 3
  local m = nn.BatchNorm2d(C)
  T.eq(m.num_batches_tracked.dtype, 'i64')
  v100.no_grad(function()
    m.weight:copy_((T.make{ C }))
    m.bias:copy_((T.make{ C }))
  end)
  local x = T.make({ 4, C, 3, 2 }, 'f32', -2, 3)
  local y = m(x)
  local X, Wt, Bt = nd(x), nd(m.weight), nd(m.bias)
  local ref, rm, rv = {}, {}, {}
  local mean, var = {}, {}
  local cnt = 4 * 3 * 2
  for c = 1, C do
    local s, s2 = 0, 0
    for n = 1, 4 do for h = 1, 3 do for w = 1, 2 do s = s + X.data[off(X.shape, n, c, h, w)] end end end
    mean[c] = s / cnt
    for n = 1, 4 do for h = 1, 3 do for w = 1, 2 do s2 = s2 + (X.data[off(X.shape, n, c, h, w)] - mean[c]) ^ 2 end end end
    var[c] = s2 / cnt
    rm[c] = 0.9 * 0 + 0.1 * mean[c]
    rv[c] = 0.9 * 1 + 0.1 * s2 / (cnt - 1)
  end
  for n = 1, 4 do for c = 1, C do for h = 1, 3 do for w = 1, 2 do
    ref[#ref + 1] = (X.data[off(X.shape, n, c, h, w)] - mean[c]) / math.sqrt(var[c] + 1e-5) * Wt.data[c] + Bt.data[c]
  end end end end
  T.allclose(y, { shape = { 4, C, 3, 2 }, data = ref }, 1e-4, 1e-5, 'training output')
  T.allclose(m.running_mean, rm, 1e-5, 1e-6, 'running_mean')
  T.allclose(m.running_var, rv, 1e-5, 1e-6, 'running_var')
  T.eq(m.num_batches_tracked:item(), 1)
  m:eval()
  local ye = m(x)
  local refe = {}
  for n = 1, 4 do for c = 1, C do for h = 1, 3 do for w = 1, 2 do
    refe[#refe + 1] = (X.data[off(X.shape, n, c, h, w)] - rm[c]) / math.sqrt(rv[c] + 1e-5) * Wt.data[c] + Bt.data[c]
  end end end end
  T.allclose(ye, { shape = { 4, C, 3, 2 }, data = refe }, 1e-4, 1e-5, 'eval output')
  T.eq(m.num_batches_tracked:item(), 1, 'eval does not count batches')
  T.raises(function() m(v100.randn{ 2, C }) end, 'expected a 4-D input')
end)

T.test('BatchNorm1d / BatchNorm2d: gradcheck in training mode', function()
  local m = nn.BatchNorm1d(3)
  v100.no_grad(function() m.weight:copy_((T.make{ 3 })) end)
  T.ok(check_module_grads(m, f64{ 5, 3 }, { 'weight', 'bias' }))
  local m2 = nn.BatchNorm2d(2)
  T.ok(check_module_grads(m2, f64{ 3, 2, 2, 3 }, { 'weight', 'bias' }))
end)

T.test('LayerNorm: forward against the formula and gradcheck', function()
  local m = nn.LayerNorm(4)
  v100.no_grad(function()
    m.weight:copy_((T.make{ 4 }))
    m.bias:copy_((T.make{ 4 }))
  end)
  local x = T.make{ 3, 2, 4 }
  local X, W, B = nd(x), nd(m.weight), nd(m.bias)
  local ref = {}
  for r = 0, 5 do
    local s, s2 = 0, 0
    for i = 1, 4 do s = s + X.data[r * 4 + i] end
    local mu = s / 4
    for i = 1, 4 do s2 = s2 + (X.data[r * 4 + i] - mu) ^ 2 end
    for i = 1, 4 do ref[#ref + 1] = (X.data[r * 4 + i] - mu) / math.sqrt(s2 / 4 + 1e-5) * W.data[i] + B.data[i] end
  end
  T.allclose(m(x), { shape = { 3, 2, 4 }, data = ref }, 1e-4, 1e-5)
  T.ok(check_module_grads(m, f64{ 2, 3, 4 }, { 'weight', 'bias' }))
  local m2 = nn.LayerNorm{ 2, 3 }
  T.ok(check_module_grads(m2, f64{ 2, 2, 3 }, { 'weight', 'bias' }))
end)

-- ---------------------------------------------------------------------------------------------
T.test('activations, Softmax, Flatten, Identity: forward and gradcheck', function()
  local x = T.make({ 2, 3, 4 }, 'f32', -3, 3)
  local erf_gelu = function(v)
    -- erf by its series (|v| <= 3 here, 60 terms are plenty in f64)
    local z = v / math.sqrt(2)
    local s, term = 0, z
    for n = 0, 60 do
      s = s + term / (2 * n + 1)
      term = -term * z * z / (n + 1)
    end
    return 0.5 * v * (1 + 2 / math.sqrt(math.pi) * s)
  end
  T.allclose(nn.ReLU()(x), T.ref_unary(x, function(v) return math.max(v, 0) end), 0, 0)
  T.allclose(nn.Sigmoid()(x), T.ref_unary(x, function(v) return 1 / (1 + math.exp(-v)) end), 1e-5, 1e-6)
  T.allclose(nn.Tanh()(x), T.ref_unary(x, function(v) return (math.exp(2 * v) - 1) / (math.exp(2 * v) + 1) end), 1e-5, 1e-6)
  T.allclose(nn.GELU()(x), T.ref_unary(x, erf_gelu), 1e-5, 1e-6)
  T.allclose(nn.GELU{ approximate = 'tanh' }(x), T.ref_unary(x, function(v)
    local u = math.sqrt(2 / math.pi) * (v + 0.044715 * v ^ 3)
    return 0.5 * v * (1 + (math.exp(2 * u) - 1) / (math.exp(2 * u) + 1))
  end), 1e-5, 1e-6)
  T.allclose(nn.Softmax(2)(x), T.ref_softmax(x, 2), 1e-5, 1e-6)
  T.allclose(nn.LogSoftmax(-1)(x), T.ref_softmax(x, -1, true), 1e-5, 1e-6)
  T.eq(nn.Flatten()(x).shape, { 2, 12 })
  T.eq(nn.Flatten(1, 2)(x).shape, { 6, 4 })
  T.allclose(nn.Flatten()(x), x:reshape{ 2, 12 }, 0, 0)
  T.ok(nn.Identity()(x) == x, 'Identity returns its input')
  local xd = f64({ 3, 4 }, -2, 2)
  local g = v100.autograd.gradcheck
  for _, m in ipairs{ nn.Sigmoid(), nn.Tanh(), nn.GELU(), nn.GELU{ approximate = 'tanh' }, nn.Softmax(2),
    nn.LogSoftmax(1), nn.Flatten(1) } do
    T.ok(g(function(t) return m(t) end, { xd }), tostring(m))
  end
end)

-- ---------------------------------------------------------------------------------------------
T.test('Dropout: identity for p = 0 and in eval; the mask reproduced from the RNG state', function()
  local x = T.make{ 6, 7 }
  local d = nn.Dropout(0.3)
  d:eval()
  T.ok(d(x) == x, 'eval returns the input')
  T.ok(nn.Dropout(0)(x) == x, 'p = 0 returns the input')
  d:train()
  local seed, offset = v100.rng_state()
  local y = d(x)
  v100.set_rng_state(seed, offset)
  local mask = v100.bernoulli(x.shape, 0.7)
  T.allclose(y, T.ref_binary(x, mask, function(a, m) return a * m / 0.7 end), 1e-6, 1e-7)
  local kept = mask:sum():item()
  T.ok(kept > 0 and kept < 42, 'some elements dropped, some kept')
end)

T.test('Dropout: gradcheck with a fixed mask (p = 0 and p = 0.4)', function()
  local x = f64{ 4, 5 }
  for _, p in ipairs{ 0, 0.4 } do
    local seed, offset = v100.rng_state()
    T.ok(v100.autograd.gradcheck(function(t)
      v100.set_rng_state(seed, offset) -- each evaluation draws the same mask
      return F.dropout(t, p, true)
    end, { x }), 'p = ' .. p)
  end
end)

-- ---------------------------------------------------------------------------------------------
T.test('Embedding: rows by 0-based ids of any shape; padding_idx is zero and gets no gradient', function()
  local m = nn.Embedding(7, 3, { padding_idx = 2 })
  local W = nd(m.weight)
  for j = 1, 3 do T.eq(W.data[2 * 3 + j], 0, 'padding row is zero') end
  local ids_tbl = { { 0, 2, 6 }, { 5, 2, 1 } }
  for _, dt in ipairs{ 'i64', 'i32' } do
    local ids = v100.tensor(ids_tbl, { dtype = dt })
    local y = m(ids)
    T.eq(y.shape, { 2, 3, 3 })
    local ref = {}
    for i = 1, 2 do for k = 1, 3 do for j = 1, 3 do ref[#ref + 1] = W.data[ids_tbl[i][k] * 3 + j] end end end
    T.allclose(y, { shape = { 2, 3, 3 }, data = ref }, 0, 0, dt)
  end
  local ids = v100.tensor(ids_tbl)
  m:zero_grad()
  local gy = T.make{ 2, 3, 3 }
  m(ids):backward(gy)
  local G = nd(m.weight.grad)
  for j = 1, 3 do T.eq(G.data[2 * 3 + j], 0, 'no gradient to the padding row') end
  T.ok(G.data[5 * 3 + 1] ~= 0, 'other rows get gradients')
  T.raises(function() m(v100.tensor{ 1.5 }) end, 'embedding: ids must be i64 or i32')
end)

T.test('Embedding: gradcheck w.r.t. the weight', function()
  local w = f64{ 6, 4 }
  local ids = v100.tensor{ { 1, 5, 1 }, { 0, 3, 3 } }
  T.ok(v100.autograd.gradcheck(function(t) return F.embedding(ids, t) end, { w }))
  T.ok(v100.autograd.gradcheck(function(t) return F.embedding(ids, t, { padding_idx = 3 }) end, { w }))
end)

-- ---------------------------------------------------------------------------------------------
-- softmax(q k^T / sqrt(E) masked) v for one (batch, head) in plain Lua.
local function ref_sdpa(q, k, v, keep, causal)
  local Q, K, V = nd(q), nd(k), nd(v)
  local B, H, L, E = table.unpack(Q.shape)
  local S, Ev = K.shape[3], V.shape[4]
  local out = {}
  for b = 1, B do for h = 1, H do for i = 1, L do
    local sc, m = {}, -math.huge
    for j = 1, S do
      local s = 0
      for e = 1, E do s = s + Q.data[off(Q.shape, b, h, i, e)] * K.data[off(K.shape, b, h, j, e)] end
      s = s / math.sqrt(E)
      if (keep and not keep(b, h, i, j)) or (causal and j > i) then s = -math.huge end
      sc[j] = s
      m = math.max(m, s)
    end
    local z = 0
    for j = 1, S do sc[j] = math.exp(sc[j] - m) z = z + sc[j] end
    for e = 1, Ev do
      local s = 0
      for j = 1, S do s = s + sc[j] / z * V.data[off(V.shape, b, h, j, e)] end
      out[#out + 1] = s
    end
  end end end
  return { shape = { B, H, L, Ev }, data = out }
end

T.test('scaled_dot_product_attention: padding mask, causal, additive mask', function()
  local B, H, L, S, E = 2, 2, 3, 4, 5
  local q, k, v = T.make{ B, H, L, E }, T.make{ B, H, S, E }, T.make{ B, H, S, 3 }
  -- key padding: batch 1 attends to 4 keys, batch 2 to the first 2; mask B x 1 x 1 x S
  local lens = { 4, 2 }
  local mt = {}
  for b = 1, B do
    mt[b] = { { {} } }
    for j = 1, S do mt[b][1][1][j] = j <= lens[b] end
  end
  local mask = v100.tensor(mt)
  local y = F.scaled_dot_product_attention(q, k, v, { mask = mask })
  T.allclose(y, ref_sdpa(q, k, v, function(b, _, _, j) return j <= lens[b] end), 1e-5, 1e-6, 'padding mask')
  local add = v100.zeros(mask.shape):masked_fill(mask:logical_not(), -math.huge)
  T.allclose(F.scaled_dot_product_attention(q, k, v, { mask = add }), y, 1e-6, 1e-7, 'additive mask')
  local qs = T.make{ B, H, S, E }
  T.allclose(F.scaled_dot_product_attention(qs, k, v, { causal = true }), ref_sdpa(qs, k, v, nil, true), 1e-5, 1e-6,
    'causal')
  T.raises(function() F.scaled_dot_product_attention(q, T.make{ B, H, S, 4 }, v) end, 'scaled_dot_product_attention')
end)

T.test('scaled_dot_product_attention: gradcheck w.r.t. q, k, v with a padding mask', function()
  local q, k, v = f64{ 2, 1, 3, 4 }, f64{ 2, 1, 4, 4 }, f64{ 2, 1, 4, 2 }
  local mask = v100.tensor{ { { { true, true, true, false } } }, { { { true, false, false, false } } } }
  T.ok(v100.autograd.gradcheck(function(a, b, c)
    return F.scaled_dot_product_attention(a, b, c, { mask = mask })
  end, { q, k, v }))
end)

-- ---------------------------------------------------------------------------------------------
T.test('Checkpoint: outputs and gradients equal the un-checkpointed ones (with dropout)', function()
  local inner = nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Dropout(0.25), nn.Linear(8, 4))
  local ck = nn.Checkpoint(inner)
  local x = T.make{ 5, 6 }:requires_grad_(true)
  local gy = T.make{ 5, 4 }
  local seed, offset = v100.rng_state()
  local y1 = inner(x)
  y1:backward(gy)
  local gx1, gp1 = x.grad:clone(), {}
  for i, p in ipairs(inner:parameters()) do gp1[i] = p.grad:clone() end
  inner:zero_grad()
  x.grad = nil
  v100.set_rng_state(seed, offset)
  local y2 = ck(x)
  T.ok(y2.grad_fn ~= nil, 'the checkpoint output has a grad_fn')
  T.allclose(y2, y1, 0, 0, 'same forward')
  -- draw something in between: backward must restore the forward's RNG state itself
  v100.randn{ 17 }
  y2:backward(gy)
  T.allclose(x.grad, gx1, 1e-6, 1e-7, 'input gradient')
  for i, p in ipairs(inner:parameters()) do T.allclose(p.grad, gp1[i], 1e-6, 1e-7, 'parameter ' .. i) end
  -- under no_grad the module simply runs
  local y3 = v100.no_grad(function() return ck(x) end)
  T.ok(y3.grad_fn == nil)
end)

T.test('Checkpoint: gradcheck in f64', function()
  local inner = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)):double()
  local ck = nn.Checkpoint(inner)
  local x = f64{ 2, 3 }
  local w = inner[1].weight
  T.ok(v100.autograd.gradcheck(function(t, ww)
    inner[1].weight = ww
    return ck(t)
  end, { x, w }))
end)

T.test('argument checks of the composed layers come from C, with the layer and operand shapes', function()
  local function mk(...) return (T.make(...)) end -- the tensor only (T.make also returns its values)
  local x = mk({ 2, 3 }, 'f32')
  T.raises(function() F.linear(x, mk({ 4, 5 }, 'f32')) end,
    'linear: input has 3 features but weight expects 5 (input 2x3 f32 cpu, weight 4x5 f32 cpu)')
  T.raises(function() F.linear(x, mk({ 4, 3 }, 'f32'), mk({ 3 }, 'f32')) end,
    'linear: bias must have 4 elements (weight 4x3 f32 cpu), got 3 f32 cpu')
  T.raises(function() F.linear(x, mk({ 4, 3, 1 }, 'f32')) end, 'linear: weight must be 2-D (out x in)')
  T.raises(function() nn.Linear(3, 4)(mk({ 2, 5 }, 'f32')) end, 'linear: input has 5 features but weight expects 3')
  T.raises(function() F.embedding(v100.tensor({ 1, 2 }, { dtype = 'i64' }), mk({ 4 }, 'f32')) end,
    'embedding: weight must be 2-D (num x dim), got 4 f32 cpu')
  T.raises(function() nn.BatchNorm2d(3)(x) end, 'BatchNorm2d: expected a 4-D input, got 2x3 f32 cpu')
  T.raises(function() nn.BatchNorm1d(3)(mk({ 2, 3, 2, 2 }, 'f32')) end, 'BatchNorm1d: expected a 2-D or 3-D input')
  T.raises(function() F.batch_norm(mk({ 2, 3, 2, 2, 2 }, 'f32'), nil, nil, nil, nil, true) end,
    'batch_norm: expected a 2-D, 3-D or 4-D input (N x C [x L | x H x W])')
  T.raises(function() F.layer_norm(x, { 4 }) end, 'layer_norm: normalized_shape 4 does not match the last dims of x')
  T.raises(function() nn.Flatten(3)(x) end, 'Flatten: dims 3..-1 out of range for 2x3 f32 cpu')
  T.eq(nn.Flatten(-2, -1)(mk({ 2, 3, 4 }, 'f32')).shape, { 2, 12 })
  T.eq(nn.Flatten(1, 2)(mk({ 2, 3, 4 }, 'f32')).shape, { 6, 4 })
  local q = mk({ 2, 3, 4 }, 'f32')
  T.raises(function() F.scaled_dot_product_attention(q, q, q, { mask = v100.ones({ 3, 3 }, { dtype = 'i32' }) }) end,
    'scaled_dot_product_attention: mask must be bool or floating, got 3x3 i32 cpu')
  T.raises(function() F.cross_entropy(x, mk({ 2, 4 }, 'f32')) end,
    'cross_entropy: probability targets must have the input shape (input 2x3 f32 cpu, target 2x4 f32 cpu)')
  T.raises(function() F.cross_entropy(v100.tensor(1.0), v100.tensor(0, { dtype = 'i64' })) end,
    'cross_entropy: input must have a class dim')
  T.raises(function() F.nll_loss(x, mk({ 2, 3 }, 'f32')) end, 'nll_loss: target must hold class ids (i64 or i32)')
  T.raises(function() F.binary_cross_entropy_with_logits(x, mk({ 3, 2 }, 'f32')) end,
    'binary_cross_entropy_with_logits: input and target shapes differ (input 2x3 f32 cpu, target 3x2 f32 cpu)')
  -- padding_idx: in range of the rows (negative from the end), in the constructor and the functional form
  T.raises(function() nn.Embedding(5, 2, { padding_idx = 5 }) end, 'Embedding: padding_idx 5 out of range for 5 rows')
  T.raises(function() nn.Embedding(5, 2, { padding_idx = -6 }) end, 'Embedding: padding_idx -6 out of range for 5 rows')
  T.eq(nn.Embedding(5, 2, { padding_idx = -1 }).padding_idx, 4)
  T.raises(function() F.embedding(v100.tensor({ 1 }, { dtype = 'i64' }), mk({ 4, 2 }, 'f32'), { padding_idx = 4 }) end,
    'embedding: padding_idx 4 out of range for 4 rows')
  -- u8 class ids (idx label files) are still accepted
  T.ok(v100.is_tensor(F.cross_entropy(x, v100.tensor({ 0, 2 }, { dtype = 'u8' }))), 'u8 targets')
end)

T.test('constructor errors: the C op rejects, the message names the layer', function()
  T.raises(function() nn.Conv2d(-1, 8, 3) end, 'Conv2d: empty: negative size -1 in dim 2')
  T.raises(function() nn.Linear(4, -2) end, 'Linear: empty: negative size -2 in dim 1')
  T.raises(function() nn.Embedding(-3, 2) end, 'Embedding: empty: negative size -3')
  T.raises(function() nn.BatchNorm2d(-1) end, 'BatchNorm2d: empty: negative size -1')
  local msg = T.raises(function() nn.LayerNorm(-1) end, 'LayerNorm: empty: negative size -1')
  T.ok(not msg:find('init_weights.lua', 1, true), 'no position inside the library: ' .. msg)
  -- groups shapes the weight made by the constructor: checked there
  T.raises(function() nn.Conv2d(2, 2, 1, { groups = 0 }) end, 'Conv2d: groups must be a positive integer, got 0')
  T.raises(function() nn.Conv2d(3, 2, 1, { groups = 2 }) end, 'Conv2d: in_channels 3 and out_channels 2 must be divisible')
  -- a 0 x 0 kernel constructs (as in PyTorch; no "uniform_: ..." from a fan_in of 0) and conv2d rejects it
  local c0 = nn.Conv2d(2, 3, 0)
  T.eq(c0.weight.shape, { 3, 2, 0, 0 })
  T.allclose(c0.bias, v100.zeros({ 3 }), 0, 0, 'bias bound 0 for fan_in 0')
  T.raises(function() c0((T.make({ 1, 2, 4, 4 }, 'f32'))) end, 'conv2d: empty weight or input channels')
end)

T.run()
