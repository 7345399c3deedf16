-- tests/lua/test_autocast.lua: autocast (O1) on the CPU. A table of ops and the dtype of their
-- result for f32 inputs under autocast fp16 and bf16 and outside it; gradients arrive in the
-- parameters' dtype and match a manual-cast reference; a weight used twice in a region is cast
-- once (the cache counter) and again in the next region; set_op changes what an op does; f64
-- inputs are left alone; nested regions and an error inside one restore the previous state.
local T = require 'testlib'
local v100 = require 'v100'
local F = require 'v100.nn.functional'
local amp = require 'v100.amp'

v100.manual_seed(T.seed % 1000003)

local function randn(shape, dtype, rg) return v100.randn(shape, { dtype = dtype or 'f32', requires_grad = rg }) end

-- Each case builds its inputs (f32 unless said) and returns the op's result. `class` is the
-- result under autocast: 'half' (the region's dtype) or 'f32'.
local CASES = {
  { 'matmul', 'half', function() return randn { 3, 4 }:matmul(randn { 4, 5 }) end },
  { 'mm', 'half', function() return randn { 3, 4 }:mm(randn { 4, 5 }) end },
  { 'bmm', 'half', function() return randn { 2, 3, 4 }:bmm(randn { 2, 4, 5 }) end },
  { 'addmm', 'half', function() return v100.addmm(randn { 5 }, randn { 3, 4 }, randn { 4, 5 }) end },
  { 'F.linear', 'half', function() return F.linear(randn { 3, 4 }, randn { 5, 4 }, randn { 5 }) end },
  { 'F.linear 3-D', 'half', function() return F.linear(randn { 2, 3, 4 }, randn { 5, 4 }, randn { 5 }) end },
  { 'conv2d', 'half', function() return F.conv2d(randn { 1, 2, 5, 5 }, randn { 3, 2, 3, 3 }, randn { 3 }) end },
  { 'attention', 'half', function()
    return F.scaled_dot_product_attention(randn { 2, 3, 4 }, randn { 2, 3, 4 }, randn { 2, 3, 4 })
  end },
  { 'softmax', 'f32', function() return randn { 3, 4 }:to('f16'):softmax(-1) end },
  { 'log_softmax', 'f32', function() return randn { 3, 4 }:to('bf16'):log_softmax(-1) end },
  { 'softmax of a matmul', 'f32', function() return randn { 3, 4 }:matmul(randn { 4, 5 }):softmax(-1) end },
  { 'sum', 'f32', function() return randn { 3, 4 }:matmul(randn { 4, 5 }):sum() end },
  { 'mean', 'f32', function() return randn { 3, 4 }:matmul(randn { 4, 5 }):mean(1) end },
  { 'var', 'f32', function() return randn({ 3, 4 }, 'f16'):var(1) end },
  { 'norm', 'f32', function() return randn({ 3, 4 }, 'f16'):norm() end },
  { 'exp', 'f32', function() return randn({ 3, 4 }, 'f16'):exp() end },
  { 'log', 'f32', function() return randn({ 3, 4 }, 'f16'):abs():log() end },
  { 'pow', 'f32', function() return randn({ 3, 4 }, 'f16'):pow(2) end },
  { 'layer_norm', 'f32', function()
    return F.layer_norm(randn { 3, 4 }:matmul(randn { 4, 6 }), { 6 }, randn { 6 }, randn { 6 })
  end },
  -- half activations stay half (statistics in f32 in the kernel); the running stats stay f32
  { 'batch_norm', 'half', function()
    local x = F.conv2d(randn { 2, 2, 4, 4 }, randn { 3, 2, 1, 1 })
    local rm, rv = v100.zeros { 3 }, v100.ones { 3 }
    local y = F.batch_norm(x, rm, rv, randn { 3 }, randn { 3 }, true, 0.1, 1e-5)
    T.eq(rm.dtype, 'f32')
    T.ok(rm:abs():sum():item() > 0, 'running mean updated')
    return y
  end },
  { 'cross_entropy', 'f32', function()
    local logits = randn { 4, 6 }:matmul(randn { 6, 5 })
    return F.cross_entropy(logits, v100.tensor({ 0, 4, 2, 1 }, { dtype = 'i64' }))
  end },
  { 'add of half and f32', 'f32', function() return randn({ 3, 4 }, 'f16') + randn { 3, 4 } end },
  { 'mul of half and f32', 'f32', function() return randn({ 3, 4 }, 'bf16') * randn { 3, 4 } end },
  { 'relu of a matmul', 'half', function() return randn { 3, 4 }:matmul(randn { 4, 5 }):relu() end },
}

-- The dtype a half case has outside autocast: its f32 inputs, except the cases that start from half.
local OUTSIDE = { softmax = 'f16', log_softmax = 'bf16', var = 'f16', norm = 'f16', exp = 'f16', log = 'f16',
                  pow = 'f16' }

for _, dt in ipairs { 'fp16', 'bf16' } do
  local half = dt == 'fp16' and 'f16' or 'bf16'
  for _, c in ipairs(CASES) do
    T.test(string.format('autocast %s: %s runs in %s', dt, c[1], c[2]), function()
      local y = amp.autocast(c[3], { dtype = dt })
      T.eq(y.dtype, c[2] == 'half' and half or 'f32', c[1])
    end)
  end
end

for _, c in ipairs(CASES) do
  T.test('outside autocast: ' .. c[1] .. ' keeps its inputs\' dtype', function()
    local expect = OUTSIDE[c[1]] or 'f32'
    T.eq(c[3]().dtype, expect, c[1])
    T.eq(amp.autocast(c[3], { dtype = 'fp16', enabled = false }).dtype, expect, c[1] .. ' (enabled = false)')
  end)
end

T.test('the op table: defaults readable, set_op changes behaviour, names and precisions checked', function()
  local ops = amp.ops()
  T.eq(ops.matmul, 'half')
  T.eq(ops.conv2d, 'half')
  T.eq(ops.linear, 'half')
  T.eq(ops.softmax, 'fp32')
  T.eq(ops.layer_norm, 'fp32')
  T.eq(ops.sum, 'fp32')
  T.eq(ops.add, 'promote')
  T.eq(ops.batch_norm, 'none')
  local x, w = randn { 3, 4 }, randn { 4, 5 }
  amp.set_op('matmul', 'fp32')
  T.eq(amp.ops().matmul, 'fp32')
  T.eq(amp.autocast(function() return x:to('f16'):matmul(w:to('f16')) end).dtype, 'f32', 'matmul set to fp32')
  amp.set_op('softmax', 'half')
  T.eq(amp.autocast(function() return x:softmax(-1) end, { dtype = 'bf16' }).dtype, 'bf16', 'softmax set to half')
  amp.set_op('add', 'none')
  T.eq(amp.autocast(function() return x:to('f16') + x end).dtype, 'f32', 'add set to none promotes natively')
  amp.set_op('add', 'half')
  T.eq(amp.autocast(function() return x:to('f16') + x end).dtype, 'f16', 'add set to half')
  amp.set_op('batch_norm', 'fp32')
  T.eq(amp.autocast(function()
    return F.batch_norm(x:to('f16'), v100.zeros { 4 }, v100.ones { 4 }, nil, nil, true, 0.1, 1e-5)
  end).dtype, 'f32', 'batch_norm set to fp32')
  amp.reset_ops()
  T.deep_eq(amp.ops(), amp.default_ops())
  T.eq(amp.autocast(function() return x:matmul(w) end).dtype, 'f16', 'matmul back to half')
  T.raises(function() amp.set_op('matmull', 'half') end, "autocast: unknown op 'matmull' (known: matmul, mm")
  T.raises(function() amp.set_op('matmul', 'fp64') end, "unknown precision 'fp64'")
  T.raises(function() amp.set_op(1, 'half') end, 'the op name must be a string')
  T.eq(amp.ops().matmul, 'half', 'a failed set_op changes nothing')
end)

T.test('f64 and integer inputs are left alone', function()
  local a, b = randn({ 3, 4 }, 'f64'), randn({ 4, 5 }, 'f64')
  T.eq(amp.autocast(function() return a:matmul(b) end).dtype, 'f64')
  T.eq(amp.autocast(function() return a:softmax(-1) end).dtype, 'f64')
  T.eq(amp.autocast(function() return a:sum() end).dtype, 'f64')
  local i = v100.tensor({ { 1, 2 }, { 3, 4 } }, { dtype = 'i64' })
  T.eq(amp.autocast(function() return i + i end).dtype, 'i64')
  T.eq(amp.autocast(function() return i:sum() end).dtype, 'i64')
  -- promote: f64 is the widest
  T.eq(amp.autocast(function() return a + randn { 3, 4 } end).dtype, 'f64')
end)

T.test('values: autocast matmul equals the manual half matmul', function()
  for _, dt in ipairs { 'f16', 'bf16' } do
    local x, w = randn { 4, 8 }, randn { 8, 3 }
    local y = amp.autocast(function() return x:matmul(w) end, { dtype = dt })
    T.tensor_close(y, x:to(dt):matmul(w:to(dt)), 0, 0, 'bitwise as the manual cast ' .. dt)
  end
end)

-- A small MLP step under autocast vs the same ops with manual casts: the gradients arrive in the
-- parameters' dtype (f32) and equal the reference's.
T.test('gradients arrive in f32 and match a manual-cast reference', function()
  for _, dt in ipairs { 'f16', 'bf16' } do
    local w1, b1 = randn({ 6, 4 }, 'f32', true), randn({ 6 }, 'f32', true)
    local w2 = randn({ 3, 6 }, 'f32', true)
    local x = randn { 5, 4 }
    local target = v100.tensor({ 0, 2, 1, 1, 0 }, { dtype = 'i64' })
    local loss = amp.autocast(function()
      local h = F.linear(x, w1, b1):relu()
      return F.cross_entropy(F.linear(h, w2), target)
    end, { dtype = dt })
    T.eq(loss.dtype, 'f32')
    loss:backward()
    local rw1, rb1, rw2 = w1:detach():clone():requires_grad_(), b1:detach():clone():requires_grad_(),
      w2:detach():clone():requires_grad_()
    local h = v100.addmm(rb1:to(dt), x:to(dt), rw1:to(dt):t()):relu()
    local ref = F.cross_entropy(h:mm(rw2:to(dt):t()):to('f32'), target)
    ref:backward()
    T.tensor_close(loss, ref, 0, 0, 'loss ' .. dt)
    for _, p in ipairs { { w1, rw1, 'w1' }, { b1, rb1, 'b1' }, { w2, rw2, 'w2' } } do
      T.eq(p[1].grad.dtype, 'f32', p[3] .. ' grad dtype ' .. dt)
      T.tensor_close(p[1].grad, p[2].grad, 0, 0, p[3] .. ' grad ' .. dt)
    end
  end
end)

T.test('the weight cache: a parameter used twice in a region is cast once, again in the next region', function()
  local w = randn({ 4, 4 }, 'f32', true)
  local x = randn({ 2, 4 }, 'f16')
  amp.reset_autocast_stats()
  local y = amp.autocast(function()
    local h = x:matmul(w)
    local st = amp.autocast_stats()
    T.eq(st.casts, 1, 'first use casts')
    T.eq(st.cached, 1, 'and caches')
    local z = h:matmul(w)
    st = amp.autocast_stats()
    T.eq(st.casts, 1, 'second use reuses the cast')
    T.eq(st.cache_hits, 1)
    return z
  end)
  T.eq(amp.autocast_stats().cached, 0, 'the cache is dropped at the end of the region')
  y:sum():backward()
  T.eq(w.grad.dtype, 'f32')
  -- the gradient through both uses equals the uncached reference
  local rw = w:detach():clone():requires_grad_()
  local rc = rw:to('f16')
  x:matmul(rc):matmul(rc):sum():backward()
  T.tensor_close(w.grad, rw.grad, 0, 0, 'gradient through the cached cast')
  amp.reset_autocast_stats()
  amp.autocast(function() x:matmul(w) end)
  T.eq(amp.autocast_stats().casts, 1, 'a new region casts again')
  -- F.linear casts its weight as itself: two linear calls share one cast
  amp.reset_autocast_stats()
  local b = randn({ 4 }, 'f32', true)
  amp.autocast(function()
    F.linear(F.linear(randn { 2, 4 }, w, b), w, b)
  end)
  local st = amp.autocast_stats()
  T.eq(st.cache_hits, 2, 'linear reuses weight and bias casts')
  T.eq(st.casts, 3, 'w, b and the first input cast once each')
end)

T.test('the weight cache: an in-place update of the parameter inside the region casts anew', function()
  local w = randn({ 3, 3 }, 'f32', true)
  local x = randn({ 2, 3 }, 'f16')
  amp.reset_autocast_stats()
  amp.autocast(function()
    local y1 = x:matmul(w)
    v100.no_grad(function() w:mul_(2) end)
    local y2 = x:matmul(w)
    T.eq(amp.autocast_stats().casts, 2, 'recast after the in-place write')
    T.tensor_close(y2, x:matmul(w:detach():to('f16')), 0, 0, 'uses the new values')
    T.ok(y1 ~= nil)
  end)
  -- under no_grad nothing is cached (a cast there records no graph)
  amp.reset_autocast_stats()
  amp.autocast(function()
    v100.no_grad(function()
      x:matmul(w)
      x:matmul(w)
    end)
  end)
  T.eq(amp.autocast_stats().casts, 2, 'no cache under no_grad')
  T.eq(amp.autocast_stats().cache_hits, 0)
end)

T.test('nested regions and errors restore the previous state', function()
  T.eq(amp.is_autocast_enabled(), false)
  amp.autocast(function()
    T.eq(amp.is_autocast_enabled(), true)
    T.eq(amp.autocast_dtype(), 'bf16')
    amp.autocast(function()
      T.eq(amp.autocast_dtype(), 'fp16')
      amp.autocast(function() T.eq(amp.is_autocast_enabled(), false) end, { enabled = false })
      T.eq(amp.is_autocast_enabled(), true)
    end, { dtype = 'fp16' })
    T.eq(amp.autocast_dtype(), 'bf16', 'inner region restored the dtype')
    local ok, err = pcall(amp.autocast, function() error('boom inside') end, { dtype = 'fp16' })
    T.eq(ok, false)
    T.ok(tostring(err):find('boom inside', 1, true), 'the error is re-raised: ' .. tostring(err))
    T.eq(amp.is_autocast_enabled(), true)
    T.eq(amp.autocast_dtype(), 'bf16', 'restored after an error')
  end, { dtype = 'bf16' })
  T.eq(amp.is_autocast_enabled(), false, 'off again after the outermost region')
  -- an op error inside the region
  local ok, err = pcall(amp.autocast, function() return randn { 2, 3 }:matmul(randn { 4, 5 }) end)
  T.eq(ok, false)
  T.ok(tostring(err):find('matmul', 1, true), 'the op error names the op: ' .. tostring(err))
  T.eq(amp.is_autocast_enabled(), false)
  T.eq(amp.autocast_stats().cached, 0)
  -- results pass through, several of them
  local a, b, c = amp.autocast(function(p, q) return p, q, p + q end, {}, 1, 2)
  T.eq(a, 1)
  T.eq(b, 2)
  T.eq(c, 3)
end)

T.test('bad arguments raise errors naming amp.autocast', function()
  T.raises(function() amp.autocast(42) end, 'amp.autocast: expected a function')
  T.raises(function() amp.autocast(function() end, { dtype = 'f32' }) end, "dtype must be 'fp16' or 'bf16', got 'f32'")
  T.raises(function() amp.autocast(function() end, { dtyp = 'fp16' }) end, "unknown option 'dtyp'")
  T.raises(function() amp.autocast(function() end, { enabled = 1 }) end, 'enabled must be a boolean')
  T.eq(amp.is_autocast_enabled(), false)
end)

T.run()
