-- tests/lua/test_nn_loss.lua: the losses of v100.nn (functional and module forms) against
-- direct formulas in plain Lua (label smoothing, ignore_index, reductions, probability targets,
-- pos_weight), and gradcheck of each in f64.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F

v100.manual_seed(T.seed % 1000003)

local function nd(t) return T.nd(t:detach()) end

-- Per-row log_softmax of an N x C flat array.
local function logsoftmax_rows(X, N, C)
  local out = {}
  for n = 0, N - 1 do
    local m = -math.huge
    for c = 1, C do m = math.max(m, X[n * C + c]) end
    local z = 0
    for c = 1, C do z = z + math.exp(X[n * C + c] - m) end
    for c = 1, C do out[n * C + c] = X[n * C + c] - m - math.log(z) end
  end
  return out
end

-- Reference cross entropy over N x C logits with class ids (0-based, ignore -> skipped).
local function ref_ce(logits, ids, s, ignore, reduction)
  local X = nd(logits)
  local N, C = X.shape[1], X.shape[2]
  local lp = logsoftmax_rows(X.data, N, C)
  local per, sum, cnt = {}, 0, 0
  for n = 1, N do
    local y = ids[n]
    if y == ignore then
      per[n] = 0
    else
      local nll = -lp[(n - 1) * C + y + 1]
      local smooth = 0
      for c = 1, C do smooth = smooth - lp[(n - 1) * C + c] end
      per[n] = (1 - s) * nll + s * smooth / C
      cnt = cnt + 1
    end
    sum = sum + per[n]
  end
  if reduction == 'none' then return per end
  if reduction == 'sum' then return sum end
  return sum / cnt
end

T.test('cross_entropy: class ids, smoothing, ignore_index, reductions; i64 and i32 targets', function()
  local N, C = 7, 5
  local logits = T.make({ N, C }, 'f32', -3, 3)
  local ids = T.rand_int_table({ N }, 0, C - 1, true)
  ids[3] = -100
  ids[6] = -100
  for _, dt in ipairs{ 'i64', 'i32' } do
    local y = v100.tensor(ids, { dtype = dt })
    for _, s in ipairs{ 0, 0.1, 0.3 } do
      for _, red in ipairs{ 'mean', 'sum', 'none' } do
        local got = F.cross_entropy(logits, y, { smoothing = s, reduction = red })
        T.allclose(got, ref_ce(logits, ids, s, -100, red), 1e-5, 1e-6,
          string.format('%s smoothing %g reduction %s', dt, s, red))
      end
    end
  end
  -- a custom ignore_index that is a valid class
  local y = v100.tensor(ids):clamp(0, nil)
  local ids2 = y:totable()
  T.allclose(F.cross_entropy(logits, y, { ignore_index = 2, smoothing = 0.2 }), ref_ce(logits, ids2, 0.2, 2, 'mean'),
    1e-5, 1e-6, 'ignore_index = 2')
  -- the module form
  T.allclose(nn.CrossEntropyLoss{ smoothing = 0.1 }(logits, y), ref_ce(logits, ids2, 0.1, -100, 'mean'), 1e-5, 1e-6)
end)

T.test('cross_entropy: N x C x d targets and probability targets', function()
  local N, C, D = 3, 4, 2
  local x = T.make({ N, C, D }, 'f32', -2, 2)
  local ids = T.rand_int_table({ N, D }, 0, C - 1, true)
  local y = v100.tensor(ids)
  -- move the class dim last and compare with the 2-D reference
  local x2 = x:permute{ 1, 3, 2 }:reshape{ N * D, C }
  local flat = {}
  for n = 1, N do for d = 1, D do flat[#flat + 1] = ids[n][d] end end
  T.allclose(F.cross_entropy(x, y, { smoothing = 0.1 }), ref_ce(x2, flat, 0.1, -100, 'mean'), 1e-5, 1e-6, 'N x C x d')
  local none = F.cross_entropy(x, y, { reduction = 'none' })
  T.eq(none.shape, { N, D })

  -- probabilities: loss_n = -sum_c p'_nc logp_nc with p' = p (1 - s) + s / C; mean over N
  local logits = T.make({ 5, C }, 'f32', -2, 2)
  local p = T.make({ 5, C }, 'f32', 0.1, 1)
  p = p / p:sum(2, true)
  local X, P = nd(logits), nd(p)
  local lp = logsoftmax_rows(X.data, 5, C)
  for _, s in ipairs{ 0, 0.2 } do
    local per, sum = {}, 0
    for n = 1, 5 do
      local l = 0
      for c = 1, C do l = l - (P.data[(n - 1) * C + c] * (1 - s) + s / C) * lp[(n - 1) * C + c] end
      per[n] = l
      sum = sum + l
    end
    T.allclose(F.cross_entropy(logits, p, { smoothing = s }), sum / 5, 1e-5, 1e-6, 'probabilities mean, s ' .. s)
    T.allclose(F.cross_entropy(logits, p, { smoothing = s, reduction = 'none' }), per, 1e-5, 1e-6, 'none')
  end
  T.raises(function() F.cross_entropy(logits, v100.tensor{ 1, 2 }) end, { 'cross_entropy', '5x4' })
end)

T.test('nll_loss: against -logp[target] with ignore_index and reductions', function()
  local logp = T.make({ 6, 3 }, 'f32', -4, -0.1)
  local ids = T.rand_int_table({ 6 }, 0, 2, true)
  ids[2] = -100
  local y = v100.tensor(ids)
  local L = nd(logp)
  local per, sum, cnt = {}, 0, 0
  for n = 1, 6 do
    if ids[n] == -100 then per[n] = 0 else
      per[n] = -L.data[(n - 1) * 3 + ids[n] + 1]
      sum, cnt = sum + per[n], cnt + 1
    end
  end
  T.allclose(F.nll_loss(logp, y), sum / cnt, 1e-6, 1e-7)
  T.allclose(F.nll_loss(logp, y, { reduction = 'sum' }), sum, 1e-6, 1e-7)
  T.allclose(nn.NLLLoss{ reduction = 'none' }(logp, y), per, 1e-6, 1e-7)
  T.raises(function() F.nll_loss(logp, y, { reduction = 'avg' }) end, "reduction must be 'mean'")
end)

T.test('mse_loss and binary_cross_entropy_with_logits against the formulas', function()
  local x, t = T.make{ 4, 3 }, T.make{ 4, 3 }
  local sq = T.ref_binary(x, t, function(a, b) return (a - b) ^ 2 end)
  local flat = T.flatten(sq)
  T.allclose(F.mse_loss(x, t), T.ref_mean(flat), 1e-6, 1e-7)
  T.allclose(nn.MSELoss{ reduction = 'sum' }(x, t), T.ref_sum(flat), 1e-6, 1e-7)
  T.allclose(F.mse_loss(x, t, { reduction = 'none' }), sq, 1e-6, 1e-7)
  T.raises(function() F.mse_loss(x, (T.make{ 3, 4 })) end, { 'mse_loss', '4x3', '3x4' })

  -- large logits: the stable form must not overflow
  local z = T.make({ 4, 3 }, 'f32', -30, 30)
  local y = v100.bernoulli({ 4, 3 }, 0.5)
  local pw = T.make({ 3 }, 'f32', 0.5, 3)
  local Z, Y, PW = nd(z), nd(y), nd(pw)
  local function bce(i, w)
    local xv, yv = Z.data[i], Y.data[i]
    local sig = 1 / (1 + math.exp(-xv))
    local lsig = xv >= 0 and -math.log(1 + math.exp(-xv)) or xv - math.log(1 + math.exp(xv))
    local l1sig = xv >= 0 and -xv - math.log(1 + math.exp(-xv)) or -math.log(1 + math.exp(xv))
    assert(sig == sig)
    return -(w * yv * lsig + (1 - yv) * l1sig)
  end
  local per, perw = {}, {}
  for i = 1, 12 do
    per[i] = bce(i, 1)
    perw[i] = bce(i, PW.data[(i - 1) % 3 + 1])
  end
  T.allclose(F.binary_cross_entropy_with_logits(z, y, { reduction = 'none' }), T.unflatten(per, { 4, 3 }), 1e-5, 1e-6)
  T.allclose(F.binary_cross_entropy_with_logits(z, y), T.ref_mean(per), 1e-5, 1e-6)
  T.allclose(nn.BCEWithLogitsLoss{ pos_weight = pw, reduction = 'sum' }(z, y), T.ref_sum(perw), 1e-5, 1e-6, 'pos_weight')
end)

T.test('losses: gradcheck in f64', function()
  local g = v100.autograd.gradcheck
  local function f64(shape, lo, hi) return T.make(shape, 'f64', lo, hi):requires_grad_(true) end
  local ids = v100.tensor{ 2, 0, -100, 3, 1 }
  local logits = f64{ 5, 4 }
  T.ok(g(function(x) return F.cross_entropy(x, ids) end, { logits }), 'ce')
  T.ok(g(function(x) return F.cross_entropy(x, ids, { smoothing = 0.2 }) end, { logits }), 'ce smoothing')
  T.ok(g(function(x) return F.cross_entropy(x, ids, { reduction = 'none' }) end, { logits }), 'ce none')
  local x3 = f64{ 2, 4, 3 }
  local ids3 = v100.tensor{ { 0, 3, 1 }, { 2, 2, -100 } }
  T.ok(g(function(x) return F.cross_entropy(x, ids3, { smoothing = 0.1, reduction = 'sum' }) end, { x3 }), 'ce N x C x d')
  local p = T.make({ 5, 4 }, 'f64', 0.1, 1)
  p = (p / p:sum(2, true)):requires_grad_(true)
  T.ok(g(function(x, q) return F.cross_entropy(x, q, { smoothing = 0.1 }) end, { logits, p }), 'ce probabilities')
  T.ok(g(function(x) return F.nll_loss(x:log_softmax(2), ids) end, { logits }), 'nll')
  local a, b = f64{ 3, 4 }, f64{ 3, 4 }
  T.ok(g(function(x, y) return F.mse_loss(x, y) end, { a, b }), 'mse')
  local z = f64({ 3, 4 }, -4, 4)
  local y = T.make({ 3, 4 }, 'f64', 0, 1):requires_grad_(true)
  local pw = T.make({ 4 }, 'f64', 0.5, 2)
  T.ok(g(function(x, t) return F.binary_cross_entropy_with_logits(x, t, { pos_weight = pw }) end, { z, y }), 'bce')
end)

T.test('reduction is checked once, by the binding, before any work', function()
  local x = (T.make{ 2, 3 })
  local ids = v100.tensor({ 0, 2 }, { dtype = 'i64' })
  T.raises(function() F.mse_loss(x, x, { reduction = 'avg' }) end, "mse_loss: reduction must be 'mean', 'sum' or 'none', got avg")
  T.raises(function() F.cross_entropy(x, ids, { reduction = 1 }) end, "cross_entropy: reduction must be 'mean', 'sum' or 'none', got 1")
  T.raises(function() F.binary_cross_entropy_with_logits(x, x, { reduction = 'avg' }) end,
    "binary_cross_entropy_with_logits: reduction must be")
  -- the modules check at construction, in their own name
  T.raises(function() nn.CrossEntropyLoss{ reduction = 'avg' } end, "CrossEntropyLoss: reduction must be 'mean', 'sum' or 'none', got avg")
  T.eq(nn.MSELoss().opts.reduction, 'mean', 'default')
  -- a bad reduction fails before any work (the class ids are checked by a kernel, later): the
  -- reduction is named even with an out-of-range class id
  T.raises(function() F.cross_entropy(x, v100.tensor({ 0, 9 }, { dtype = 'i64' }), { reduction = 'avg' }) end,
    'cross_entropy: reduction must be')
end)

T.run()
