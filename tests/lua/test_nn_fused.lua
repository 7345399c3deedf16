-- tests/lua/test_nn_fused.lua: the fused dropout and softmax cross entropy ops (runtime/nn/dropout.c,
-- runtime/nn/xent.c) on the CPU against the composed formulas they replaced (the same mask, the
-- same losses and gradients for every reduction, smoothing, ignore_index, N x C x d and unbatched
-- inputs, i64 and i32 targets, every float dtype), gradient checks in f64, autocast, the special
-- cases and the errors. tests/lua/gpu_fused.lua compares the CUDA kernels with these.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local amp = require 'v100.amp'
local F = nn.F
local _nn = require('v100.core')._nn

v100.manual_seed(T.seed % 1000003)

-- ---------------------------------------------------------------------------------------------
-- The composed references (what F.dropout and F.cross_entropy were before the fused ops)

local function dropout_composed(x, p)
  local mask = v100.bernoulli(x.shape, 1 - p, { dtype = x.dtype, device = x.device })
  mask:mul_(1 / (1 - p))
  return x * mask
end

local function class_dim(x) return x.ndim == 1 and 1 or 2 end

local function ce_composed(logits, target, opts)
  opts = opts or {}
  local s, ignore, reduction = opts.smoothing or 0, opts.ignore_index or -100, opts.reduction or 'mean'
  local cd = class_dim(logits)
  local C = logits.shape[cd]
  local logp = logits:log_softmax(cd)
  local valid = target:ne(ignore)
  local safe = v100.where(valid, target, 0)
  local nll = (-logp:gather(cd, safe:unsqueeze(cd)):squeeze(cd)):masked_fill(valid:logical_not(), 0)
  local per = nll
  if s > 0 then
    local smooth = (-logp):sum(cd):masked_fill(valid:logical_not(), 0) / C
    per = nll * (1 - s) + smooth * s
  end
  if reduction == 'none' then return per end
  if reduction == 'sum' then return per:sum() end
  return per:sum() / valid:sum():to(per.dtype)
end

-- class ids for a target of `shape` in [0, C), with about a fifth set to `ignore`
local function ids(shape, C, ignore, dtype)
  local t = T.rand_int_table(shape, 0, C - 1, true)
  local function mark(tbl)
    for i = 1, #tbl do
      if type(tbl[i]) == 'table' then mark(tbl[i]) elseif math.random() < 0.2 then tbl[i] = ignore end
    end
  end
  if type(t) == 'table' then mark(t) end
  return v100.tensor(t, { dtype = dtype or 'i64' })
end

-- ---------------------------------------------------------------------------------------------
-- dropout

T.test('dropout: the mask of v100.bernoulli(x.shape, 1 - p) for every float dtype; the generator advances as much', function()
  for _, dt in ipairs { 'f32', 'f64', 'f16', 'bf16' } do
    for _, shape in ipairs { { 7, 13 }, { 3, 5, 4 }, { 1001 }, { 1 } } do
      local x = T.make(shape, dt, 0.5, 2) -- no zeros: y ~= 0 exactly where kept
      local seed, offset = v100.rng_state()
      local y = F.dropout(x, 0.3, true)
      local s1, o1 = v100.rng_state()
      v100.set_rng_state(seed, offset)
      local ref = dropout_composed(x, 0.3)
      local s2, o2 = v100.rng_state()
      T.eq({ s1, o1 }, { s2, o2 }, 'the same counters consumed, ' .. dt)
      T.eq(y.dtype, dt)
      T.tensor_eq(y:ne(0), ref:ne(0), 'mask ' .. dt)
      -- f16/bf16: the composed op scaled by 1/(1-p) rounded to the dtype, the fused one in f32
      T.tensor_close(y, ref, T.tol(dt) * 2, 0, 'values ' .. dt)
    end
  end
end)

T.test('dropout: non-contiguous inputs use the logical order; 0-size inputs draw nothing', function()
  for _, v in ipairs(T.variants({ 6, 9 }, 'f32', 0.5, 2)) do
    local seed, offset = v100.rng_state()
    local y = F.dropout(v.t, 0.5, true)
    v100.set_rng_state(seed, offset)
    local ref = dropout_composed(v.t, 0.5)
    T.tensor_close(y, ref, 1e-6, 0, v.name)
  end
  local seed, offset = v100.rng_state()
  local e = F.dropout(v100.zeros { 0, 4 }, 0.5, true)
  T.eq(e.shape, { 0, 4 })
  T.eq({ v100.rng_state() }, { seed, offset }, 'no counters for an empty draw')
end)

T.test('dropout: the backward regenerates the mask (dx = dy * keep / (1 - p)), as the composed gradient', function()
  for _, dt in ipairs { 'f32', 'f64', 'bf16' } do
    local x = T.make({ 5, 8 }, dt, 0.5, 2):requires_grad_()
    local dy = T.make({ 5, 8 }, dt, -2, 2)
    local seed, offset = v100.rng_state()
    local y = F.dropout(x, 0.25, true)
    T.eq(y.grad_fn, 'DropoutBackward')
    y:backward(dy)
    v100.set_rng_state(seed, offset)
    local xr = x:detach():clone():requires_grad_()
    dropout_composed(xr, 0.25):backward(dy)
    T.tensor_close(x.grad, xr.grad, T.tol(dt) * 2, 0, 'grad ' .. dt)
    T.tensor_eq(x.grad:ne(0), y:ne(0), 'the gradient flows where the element was kept, ' .. dt)
    -- the raw entry: the mask of a draw applied to another tensor
    local d2 = _nn.dropout_apply(dy, 0.25, seed, offset)
    T.tensor_eq(d2, x.grad, 'dropout_apply = the backward ' .. dt)
  end
end)

T.test('dropout: gradcheck in f64 (a fixed draw per evaluation)', function()
  local x = T.make({ 3, 4, 5 }, 'f64', -2, 2):requires_grad_()
  local seed, offset = v100.rng_state()
  T.ok(v100.autograd.gradcheck(function(t)
    v100.set_rng_state(seed, offset)
    return F.dropout(t, 0.6, true)
  end, { x }), 'gradcheck')
end)

T.test('dropout: p = 0, eval mode and p = 1 draw nothing; p = 1 gives zeros and a zero gradient', function()
  local x = T.make({ 4, 3 }, 'f32'):requires_grad_()
  local seed, offset = v100.rng_state()
  T.ok(rawequal(F.dropout(x, 0, true), x), 'p = 0 returns x')
  T.ok(rawequal(F.dropout(x, 0.5, false), x), 'eval returns x')
  T.ok(rawequal(nn.Dropout(0.5):eval()(x), x), 'module in eval mode')
  local z = F.dropout(x, 1, true)
  T.eq({ v100.rng_state() }, { seed, offset }, 'nothing drawn')
  T.eq(z:abs():sum():item(), 0)
  z:sum():backward()
  T.eq(x.grad:abs():sum():item(), 0)
  -- the C op handles the special cases too, for callers of the C API
  T.eq(_nn.dropout(x, 0.5, false):sum():item(), x:sum():item())
  T.eq(_nn.dropout(x, 1):abs():sum():item(), 0)
end)

T.test('dropout: errors name the op and the operand', function()
  T.raises(function() F.dropout(v100.tensor({ 1, 2, 3 }, { dtype = 'i64' }), 0.5, true) end,
    { 'dropout: input must be a float tensor', 'i64' })
  T.raises(function() F.dropout(T.make { 4 }, 0 / 0, true) end, 'dropout: p must be in [0, 1], got nan')
  T.raises(function() F.dropout(T.make { 4 }, -0.1, true) end, 'dropout: p must be in [0, 1], got -0.1')
  T.raises(function() F.dropout(T.make { 4 }, 'x', true) end, 'dropout: p must be a number, got string')
  T.raises(function() F.dropout(nil, 0.5, true) end, 'dropout: input must be a tensor, got nil')
end)

-- ---------------------------------------------------------------------------------------------
-- cross entropy

-- The fused op against the composed formulas: values and gradients (dy random for 'none').
local function compare_ce(logits, target, opts, rtol, what)
  local x = logits:detach():clone():requires_grad_()
  local xr = logits:detach():clone():requires_grad_()
  local got = F.cross_entropy(x, target, opts)
  local ref = ce_composed(xr, target, opts)
  T.eq(got.shape, ref.shape, what .. ' shape')
  T.eq(got.grad_fn, 'CrossEntropyBackward', what)
  T.tensor_close(got, ref, rtol, rtol, what .. ' loss')
  local dy = got.ndim > 0 and T.make(got.shape, got.dtype, -1, 1) or nil
  if dy then got:backward(dy) ref:backward(dy) else got:backward() ref:backward() end
  T.eq(x.grad.dtype, logits.dtype, what .. ' grad dtype')
  T.tensor_close(x.grad, xr.grad, rtol, rtol, what .. ' grad')
end

T.test('cross_entropy: fused = composed (f64 and f32), every reduction, smoothing, ignore_index, dims, target dtype', function()
  local cases = {
    { 'N x C', { 9, 7 }, { 9 } },
    { 'N x C x d', { 4, 5, 3 }, { 4, 3 } },
    { 'N x C x d1 x d2', { 2, 6, 3, 2 }, { 2, 3, 2 } },
    { 'C (unbatched)', { 11 }, {} },
    { 'N x 1', { 5, 1 }, { 5 } },
    { 'long rows', { 3, 3001 }, { 3 } },
  }
  for _, dt in ipairs { 'f64', 'f32' } do
    local tol = dt == 'f64' and 1e-10 or 2e-5
    for _, c in ipairs(cases) do
      local logits = T.make(c[2], dt, -4, 4)
      local C = c[2][class_dim(logits)]
      for _, tdt in ipairs { 'i64', 'i32' } do
        local ignore = C > 2 and (math.random() < 0.5 and -100 or 2) or -100
        local target = #c[3] == 0 and v100.tensor(math.random(0, C - 1), { dtype = tdt }) or ids(c[3], C, ignore, tdt)
        for _, s in ipairs { 0, 0.1, 0.3 } do
          for _, red in ipairs { 'mean', 'sum', 'none' } do
            compare_ce(logits, target, { smoothing = s, reduction = red, ignore_index = ignore }, tol,
              string.format('%s %s %s target, smoothing %g, %s, ignore %d', c[1], dt, tdt, s, red, ignore))
          end
        end
      end
    end
  end
end)

T.test('cross_entropy: half logits give a half loss from f32 statistics, and half gradients', function()
  for _, dt in ipairs { 'f16', 'bf16' } do
    local logits = T.make({ 6, 40 }, dt, -6, 6)
    local target = ids({ 6 }, 40, -100)
    for _, red in ipairs { 'mean', 'sum', 'none' } do
      local x = logits:detach():clone():requires_grad_()
      local loss = F.cross_entropy(x, target, { smoothing = 0.1, reduction = red })
      T.eq(loss.dtype, dt, 'the loss keeps the logits dtype outside autocast')
      -- the f32 computation on the same (rounded) values, rounded once
      local xf = logits:float():requires_grad_()
      local ref = F.cross_entropy(xf, target, { smoothing = 0.1, reduction = red })
      T.tensor_close(loss, ref:to(dt), 0, 0, dt .. ' ' .. red .. ': the f32 loss rounded once')
      local dy = loss.ndim > 0 and T.make(loss.shape, dt, -1, 1) or nil
      if dy then loss:backward(dy) ref:backward(dy:float()) else loss:backward() ref:backward() end
      T.eq(x.grad.dtype, dt)
      T.tensor_close(x.grad, xf.grad:to(dt), 0, 0, dt .. ' ' .. red .. ': the f32 gradient rounded once')
      -- and close to the composed op in f64
      T.tensor_close(loss:float(), ce_composed(logits:double(), target, { smoothing = 0.1, reduction = red }),
        T.tol(dt), T.tol(dt), dt .. ' ' .. red .. ' vs f64')
    end
  end
end)

T.test('cross_entropy under autocast: half logits, an f32 loss, no f32 copy of the logits, half gradients', function()
  for _, dt in ipairs { 'fp16', 'bf16' } do
    local half = dt == 'fp16' and 'f16' or 'bf16'
    local logits = T.make({ 8, 33 }, half, -5, 5):requires_grad_()
    local target = ids({ 8 }, 33, -100)
    amp.reset_autocast_stats()
    local loss = amp.autocast(function() return F.cross_entropy(logits, target, { smoothing = 0.1 }) end, { dtype = dt })
    T.eq(loss.dtype, 'f32')
    T.eq(amp.autocast_stats().casts, 0, 'the logits are read as they are')
    loss:backward()
    T.eq(logits.grad.dtype, half)
    local xf = logits:detach():float():requires_grad_()
    local ref = F.cross_entropy(xf, target, { smoothing = 0.1 })
    ref:backward()
    T.tensor_close(loss, ref, 0, 0, dt .. ' loss = the fused op on f32 copies')
    T.tensor_close(logits.grad, xf.grad:to(half), 0, 0, dt .. ' grad = the f32 gradient rounded once')
  end
end)

T.test('cross_entropy: opts.dtype gives an f32 loss from half logits outside autocast (AMP O2/O3)', function()
  local logits = T.make({ 6, 50 }, 'bf16', -5, 5)
  local target = ids({ 6 }, 50, -100)
  for _, red in ipairs { 'mean', 'sum', 'none' } do
    local x = logits:detach():clone():requires_grad_()
    local loss = F.cross_entropy(x, target, { smoothing = 0.1, reduction = red, dtype = 'f32' })
    T.eq(loss.dtype, 'f32')
    local xf = logits:float():requires_grad_()
    local ref = F.cross_entropy(xf, target, { smoothing = 0.1, reduction = red })
    T.tensor_close(loss, ref, 0, 0, red .. ': the f32 loss')
    local dy = loss.ndim > 0 and T.make(loss.shape, 'f32', -1, 1) or nil
    if dy then loss:backward(dy) ref:backward(dy) else loss:backward() ref:backward() end
    T.eq(x.grad.dtype, 'bf16')
    T.tensor_close(x.grad, xf.grad:to('bf16'), 0, 0, red .. ': the gradient')
  end
  -- a bf16 loss from f32 logits, and a refusal of non-float dtypes
  T.eq(F.cross_entropy(logits:float(), target, { dtype = 'bf16' }).dtype, 'bf16')
  T.raises(function() F.cross_entropy(logits, target, { dtype = 'i64' }) end,
    'cross_entropy: the loss dtype must be a float dtype, got i64')
end)

T.test('cross_entropy: gradcheck in f64', function()
  local g = v100.autograd.gradcheck
  local x = T.make({ 5, 4 }, 'f64', -2, 2):requires_grad_()
  local y = v100.tensor { 2, 0, -100, 3, 1 }
  for _, s in ipairs { 0, 0.2 } do
    for _, red in ipairs { 'mean', 'sum', 'none' } do
      T.ok(g(function(t) return F.cross_entropy(t, y, { smoothing = s, reduction = red }) end, { x }),
        string.format('N x C smoothing %g %s', s, red))
    end
  end
  local x4 = T.make({ 2, 3, 2, 2 }, 'f64', -2, 2):requires_grad_()
  local y4 = v100.tensor({ { { 0, 2 }, { 1, 1 } }, { { 2, -1 }, { 0, 1 } } }, { dtype = 'i32' })
  T.ok(g(function(t) return F.cross_entropy(t, y4, { smoothing = 0.1, ignore_index = -1 }) end, { x4 }), 'N x C x d1 x d2')
  local x1 = T.make({ 6 }, 'f64', -2, 2):requires_grad_()
  T.ok(g(function(t) return F.cross_entropy(t, v100.tensor(4), { smoothing = 0.3 }) end, { x1 }), 'unbatched')
  -- the double backward is not recorded (the backward uses raw ops): first order only
end)

T.test('cross_entropy: edge cases (all ignored, no rows, -inf logits) as the composed op', function()
  local x = T.make({ 3, 4 }, 'f32'):requires_grad_()
  local none = v100.tensor { -100, -100, -100 }
  local l = F.cross_entropy(x, none)
  T.ok(l:item() ~= l:item(), 'mean over no valid row is NaN (0 / 0), as PyTorch')
  l:backward()
  T.eq(x.grad:abs():sum():item(), 0, 'and sends no gradient')
  T.eq(F.cross_entropy(x, none, { reduction = 'sum' }):item(), 0)
  local e = v100.zeros({ 0, 4 }):requires_grad_()
  T.eq(F.cross_entropy(e, v100.zeros({ 0 }, { dtype = 'i64' }), { reduction = 'sum' }):item(), 0)
  T.eq(F.cross_entropy(e, v100.zeros({ 0 }, { dtype = 'i64' }), { reduction = 'none' }).shape, { 0 })
  -- a masked class (-inf logit) that is not the target: finite loss, zero gradient there
  local m = v100.tensor { { 1, -math.huge, 0.5 }, { 0.2, 0.1, -math.huge } }
  local t = v100.tensor { 0, 1 }
  for _, s in ipairs { 0, 0.1 } do
    local got, ref = F.cross_entropy(m, t, { smoothing = s, reduction = 'none' }),
      ce_composed(m, t, { smoothing = s, reduction = 'none' })
    T.tensor_close(got, ref, 1e-6, 1e-6, 'masked class, smoothing ' .. s)
  end
  -- u8 class ids (idx label files) are widened
  T.tensor_close(F.cross_entropy(x:detach(), v100.tensor({ 0, 3, 1 }, { dtype = 'u8' })),
    ce_composed(x:detach(), v100.tensor { 0, 3, 1 }), 1e-6, 1e-6, 'u8')
end)

T.test('cross_entropy: the saved logits are version-checked; the module form uses the fused op', function()
  local x = T.make({ 3, 5 }, 'f32'):requires_grad_()
  local h = x * 1
  local loss = F.cross_entropy(h, v100.tensor { 1, 2, 3 })
  h:add_(1)
  T.raises(function() loss:backward() end, 'CrossEntropyBackward')
  local y = nn.CrossEntropyLoss { smoothing = 0.1 }(x, v100.tensor { 1, 2, 3 })
  T.eq(y.grad_fn, 'CrossEntropyBackward')
end)

T.test('cross_entropy: errors name the op and the operands', function()
  local x = T.make({ 2, 3 }, 'f32')
  T.raises(function() F.cross_entropy(x, v100.tensor { 0, 3 }) end,
    'cross_entropy: index 3 is out of bounds for dim 2 with size 3')
  T.raises(function() F.cross_entropy(T.make({ 2, 3, 4 }, 'f32'), v100.tensor { { 0, 1, 2, 5 }, { 0, 0, 0, 0 } }) end,
    'cross_entropy: index 5 is out of bounds for dim 2 with size 3')
  T.raises(function() F.cross_entropy(T.make({ 4 }, 'f32'), v100.tensor(4)) end,
    'cross_entropy: index 4 is out of bounds for dim 1 with size 4')
  T.raises(function() F.cross_entropy(v100.tensor({ { 1, 2 } }, { dtype = 'i64' }), v100.tensor { 0 }) end,
    { 'cross_entropy: input must be a float tensor', 'i64' })
  T.raises(function() F.cross_entropy(x, v100.tensor { 0, 1, 2 }) end,
    { 'cross_entropy: target shape does not match', 'input 2x3 f32 cpu', 'target 3 i64 cpu' })
  T.raises(function() F.cross_entropy(x, v100.tensor { 0, 1 }, { ignore_index = 0.5 }) end,
    'cross_entropy: ignore_index must be an integer, got 0.5')
  T.raises(function() F.cross_entropy(x, v100.tensor { 0, 1 }, { smoothing = 'a' }) end,
    'cross_entropy: smoothing must be a number, got string')
  T.raises(function() F.cross_entropy(x, v100.tensor { 0, 1 }, { smoothing = 1.5 }) end,
    'cross_entropy: smoothing must be in [0, 1], got 1.5')
  T.raises(function() F.cross_entropy(x, v100.tensor { 0, 1 }, { reduction = 'avg' }) end,
    "cross_entropy: reduction must be 'mean', 'sum' or 'none', got avg")
  T.raises(function() F.cross_entropy(T.make({ 2, 0 }, 'f32'), v100.tensor { 0, 0 }) end,
    'cross_entropy: input has no classes')
  T.raises(function() F.cross_entropy(nil, v100.tensor { 0 }) end, 'cross_entropy: input must be a tensor, got nil')
end)

T.run()
