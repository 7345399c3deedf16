-- Autograd engine semantics: accumulation, retain_graph, non-scalar roots, grad mode, detach,
-- hooks, in-place rules and version counters, autograd.Function, autograd.grad, an MLP against
-- manual backprop, deep graphs, and graphs being freed.
local T = require 'testlib'
local v100 = require 'v100'
local ag = v100.autograd

local F64 = { dtype = 'f64', requires_grad = true }
local function leaf(shape) return v100.randn(shape, F64) end
local function close(t, ref, tol) T.tensor_close(t, ref, tol or 1e-12, tol or 1e-12) end

T.test('fields: requires_grad, is_leaf, grad_fn, grad; creation opts', function()
  local x = leaf({ 2, 3 })
  T.eq(x.requires_grad, true)
  T.eq(x.is_leaf, true)
  T.eq(x.grad, nil)
  T.eq(x.grad_fn, nil)
  local y = x + 1
  T.eq(y.grad_fn, 'AddBackward')
  T.eq(y.is_leaf, false)
  T.eq(y.requires_grad, true)
  T.eq((x * y).grad_fn, 'MulBackward')
  T.eq(v100.zeros({ 2 }, { requires_grad = true }).requires_grad, true)
  T.eq(v100.tensor({ 1.5, 2 }, { requires_grad = true }).requires_grad, true)
  T.eq(v100.randn({ 2 }).requires_grad, false)
  T.raises(function() v100.zeros({ 2 }, { dtype = 'i64', requires_grad = true }) end, 'only floating-point')
  T.raises(function() y:requires_grad_(false) end, 'non-leaf')
  local z = v100.rand({ 3 })
  z.requires_grad = true
  T.eq(z.requires_grad, true)
  T.eq((z:gt(0.5)).requires_grad, false, 'comparisons are not differentiable')
end)

T.test('gradients accumulate over two backward calls', function()
  local x = leaf({ 3, 4 })
  local w = v100.randn({ 3, 4 }, { dtype = 'f64' })
  for _ = 1, 2 do (x * w):sum():backward() end
  close(x.grad, w * 2)
  x.grad = nil
  T.eq(x.grad, nil);
  (x * w):sum():backward()
  close(x.grad, w)
  T.raises(function() x.grad = v100.zeros({ 2 }, { dtype = 'f64' }) end, 'does not match')
end)

T.test('retain_graph, and the error without it', function()
  local x = leaf({ 4 })
  local y = (x * x):sum()
  y:backward({ retain_graph = true })
  y:backward()
  close(x.grad, x:detach() * 4)
  T.raises(function() y:backward() end, { 'second time', 'retain_graph' })
end)

T.test('non-scalar root: needs a gradient', function()
  local x = leaf({ 2, 3 })
  local y = x * 3
  T.raises(function() y:backward() end, 'implicitly created')
  local g = v100.randn({ 2, 3 }, { dtype = 'f64' })
  y:backward(g)
  close(x.grad, g * 3)
  T.raises(function() v100.ones({ 1 }):backward() end, 'does not require grad and does not have a grad_fn')
  T.raises(function() (x * 2):backward(v100.ones({ 3, 2 }, { dtype = 'f64' })) end, 'does not match')
end)

T.test('no_grad / enable_grad / set_grad_enabled', function()
  local x = leaf({ 3 })
  T.eq(v100.is_grad_enabled(), true)
  local a, b = v100.no_grad(function(k)
    T.eq(v100.is_grad_enabled(), false)
    local y = x * k
    local z = v100.enable_grad(function() return x * k end)
    return y, z
  end, 2)
  T.eq(a.requires_grad, false)
  T.eq(b.requires_grad, true)
  T.eq(v100.is_grad_enabled(), true)
  T.raises(function() v100.no_grad(function() error('inner failure') end) end, 'inner failure')
  T.eq(v100.is_grad_enabled(), true, 'mode restored after an error')
  v100.set_grad_enabled(false)
  local c = x * 2
  v100.set_grad_enabled(true)
  T.eq(c.requires_grad, false)
  T.eq(c.grad_fn, nil)
end)

T.test('detach shares storage and stops gradients; detach_', function()
  local x = leaf({ 4 })
  local d = x:detach()
  T.eq(d.requires_grad, false)
  T.eq(d:data_ptr(), x:data_ptr())
  d:fill_(0.5)
  T.allclose(x, { 0.5, 0.5, 0.5, 0.5 }, 0, 0, 'writes through the detached tensor are seen')
  local w = v100.randn({ 4 }, { dtype = 'f64' });
  ((x * w) + (x:detach() * 7)):sum():backward()
  close(x.grad, w)
  local y = x * 2
  y:detach_()
  T.eq(y.requires_grad, false)
  T.eq(y.is_leaf, true)
end)

T.test('hooks: replacement, order, non-leaf, retain_grad, post-accumulate, removal', function()
  local x = leaf({ 3 })
  local seen = {}
  local h1 = x:register_hook(function(g)
    seen[#seen + 1] = 'first'
    return g * 2
  end)
  local second_saw = {}
  x:register_hook(function(g)
    seen[#seen + 1] = 'second'
    second_saw[#second_saw + 1] = g:clone()
  end)
  local post_grad
  x:register_post_accumulate_grad_hook(function(p)
    seen[#seen + 1] = 'post'
    post_grad = p.grad:clone()
  end)
  x:sum():backward()
  T.eq(seen, { 'first', 'second', 'post' })
  T.allclose(second_saw[1], { 2, 2, 2 }, 1e-12, 0, 'the second hook sees the replaced gradient')
  T.allclose(x.grad, { 2, 2, 2 }, 1e-12)
  T.allclose(post_grad, { 2, 2, 2 }, 1e-12, 0, 'post hook runs after accumulation')
  h1:remove()
  h1:remove() -- twice is harmless
  seen = {}
  x:sum():backward()
  T.eq(seen, { 'second', 'post' })
  T.allclose(x.grad, { 3, 3, 3 }, 1e-12)

  local a = leaf({ 3 })
  local y = a * 3
  y:register_hook(function(g) return g * 10 end)
  y:retain_grad()
  local w = v100.randn({ 3 }, { dtype = 'f64' });
  (y * w):sum():backward()
  close(y.grad, w * 10, 1e-12)
  close(a.grad, w * 30, 1e-12)
  T.raises(function() v100.ones({ 2 }):register_hook(function() end) end, 'does not require grad')
  T.raises(function() y:register_post_accumulate_grad_hook(function() end) end, 'leaf')
  T.raises(function()
    local b = leaf({ 2 })
    b:register_hook(function() error('hook exploded') end)
    b:sum():backward()
  end, 'hook exploded')
end)

T.test('in-place: leaf error, non-leaf rebase, views, version counter', function()
  local x = leaf({ 4 })
  T.raises(function() x:add_(1) end, 'a leaf tensor that requires grad is used in an in-place operation (add_')
  T.raises(function() x:relu_() end, 'in-place operation (relu_')
  v100.no_grad(function() x:mul_(1) end) -- allowed without recording

  local y = x * 2
  y:mul_(3)
  T.eq(y.grad_fn, 'MulBackward')
  y:exp_()
  y:sum():backward()
  close(x.grad, (x:detach() * 6):exp() * 6, 1e-10)

  local b = leaf({ 4 })
  local z = v100.zeros({ 4 }, { dtype = 'f64' })
  z:add_(b)
  z:mul_(b)
  T.eq(z.requires_grad, true)
  z:sum():backward()
  close(b.grad, b:detach() * 2, 1e-12)

  local u = leaf({ 4 })
  local s = u * 2
  local v = s:narrow(1, 2, 2)
  T.raises(function() v:mul_(2) end, 'view')

  local p = leaf({ 3 })
  local q = p * 2
  local r = q * q -- saves q
  q:add_(1)
  T.raises(function() r:sum():backward() end, 'modified in place')

  local m = leaf({ 3 })
  local e = m:exp() -- saves its output
  e:add_(1)
  T.raises(function() (e * 1):sum():backward() end, 'modified in place')
end)

T.test('autograd.Function with non-tensor arguments', function()
  local Scale = ag.Function {
    name = 'Scale',
    forward = function(ctx, x, k, tag)
      ctx.k = k
      ctx.tag = tag
      ctx:save_for_backward(x)
      return x * k, 'extra'
    end,
    backward = function(ctx, g)
      T.eq(ctx.tag, 'hello')
      T.eq(#ctx.saved_tensors, 1)
      return g * ctx.k, nil, nil
    end,
  }
  local x = leaf({ 3 })
  local y, extra = Scale(x, 2.5, 'hello')
  T.eq(extra, 'extra')
  T.eq(y.grad_fn, 'Scale')
  y:sum():backward()
  T.allclose(x.grad, { 2.5, 2.5, 2.5 }, 1e-12)
  -- not recorded when nothing requires grad
  local plain = Scale(v100.randn({ 2 }, { dtype = 'f64' }), 3, 'hello')
  T.eq(plain.requires_grad, false)
  -- gradcheck of a custom exp that saves its output
  local Exp = ag.Function {
    name = 'MyExp',
    forward = function(ctx, a)
      local r = a:exp()
      ctx:save_for_backward(r)
      return r
    end,
    backward = function(ctx, g) return g * ctx.saved_tensors[1] end,
  }
  T.ok(ag.gradcheck(function(a) return Exp(a) * 2 end, { leaf({ 2, 3 }) }))
  -- identity returning its input: a fresh output
  local Id = ag.Function { forward = function(_, a) return a end, backward = function(_, g) return g end }
  local i = leaf({ 2 })
  local o = Id(i)
  T.eq(o.is_leaf, false)
  o:sum():backward()
  T.allclose(i.grad, { 1, 1 }, 0)
  local Bad = ag.Function {
    name = 'Bad',
    forward = function(_, a) return a * 1 end,
    backward = function() error('boom') end,
  }
  T.raises(function() Bad(leaf({ 2 })):sum():backward() end, { 'Bad.backward', 'boom' })
  local Wrong = ag.Function {
    name = 'Wrong',
    forward = function(_, a) return a * 1 end,
    backward = function() return v100.ones({ 5 }, { dtype = 'f64' }) end,
  }
  T.raises(function() Wrong(leaf({ 2 })):sum():backward() end, 'Wrong.backward')
end)

T.test('autograd.Function: save_for_backward checks what it saves', function()
  local function saver(make)
    return ag.Function {
      name = 'Saver',
      forward = function(ctx, a)
        ctx:save_for_backward(make(a))
        return a * 2
      end,
      backward = function(_, g) return g * 2 end,
    }
  end
  collectgarbage()
  local before = ag.live_nodes()
  local freed = saver(function(a)
    local t = a * 1
    t:free()
    return t
  end)
  T.raises(function() freed(leaf({ 2 })) end, 'Saver: save_for_backward: argument 1: tensor used after free')
  T.raises(function() saver(function() return 'str' end)(leaf({ 2 })) end,
    'Saver: save_for_backward: argument 1 is a string, not a tensor')
  local Many = ag.Function {
    name = 'Many',
    forward = function(ctx, a)
      local t = {}
      for i = 1, 9 do t[i] = a end
      ctx:save_for_backward(table.unpack(t))
      return a * 1
    end,
    backward = function(_, g) return g end,
  }
  T.raises(function() Many(leaf({ 2 })) end, 'Many: save_for_backward: at most 8 tensors can be saved (got 9)')
  collectgarbage()
  T.eq(ag.live_nodes(), before, 'a failed recording leaves no node behind')
  -- a saved tensor freed after the forward is still there for the backward (the node holds it)
  local kept = saver(function(a) return a * 1 end)
  local x = leaf({ 2 })
  kept(x):sum():backward()
  T.allclose(x.grad, { 2, 2 }, 0)
end)

T.test('backward inside backward: nesting limit, each prefix once', function()
  local x = leaf({ 3 })
  local loss = (x * x):sum()
  local calls = 0
  local h = x:register_hook(function()
    calls = calls + 1
    loss:backward({ retain_graph = true })
  end)
  local err = T.raises(function() loss:backward({ retain_graph = true }) end,
    { 'AccumulateGrad hook: backward: nested 32 levels deep in backward', 'on its own graph again recurses' })
  local _, n = err:gsub('AccumulateGrad hook: ', '')
  T.eq(n, 1, 'the prefix appears once')
  T.eq(calls, 32, 'the hook ran once per level')
  h:remove()
  loss:backward()
  close(x.grad, x:detach() * 2)
  -- a hook running backward on another graph is fine
  local w, z = leaf({ 2 }), leaf({ 2 })
  local wloss = (w * w):sum()
  z:register_hook(function() wloss:backward() end)
  local outer = (z * 3):sum()
  outer:backward()
  close(w.grad, w:detach() * 2)
  T.allclose(z.grad, { 3, 3 }, 0)
  -- a Function whose backward runs backward on its own graph: its prefix once too
  local root
  local Rec = ag.Function {
    name = 'Rec',
    forward = function(_, a) return a * 1 end,
    backward = function(_, g)
      root:backward({ retain_graph = true })
      return g
    end,
  }
  root = Rec(leaf({ 2 })):sum()
  local err2 = T.raises(function() root:backward({ retain_graph = true }) end,
    { 'Rec.backward: backward: nested 32 levels deep in backward' })
  local _, n2 = err2:gsub('Rec%.backward: ', '')
  T.eq(n2, 1, 'the prefix appears once')
  -- a post-accumulate hook doing the same
  local p = leaf({ 2 })
  local ploss = (p * p):sum()
  p:register_post_accumulate_grad_hook(function() ploss:backward({ retain_graph = true }) end)
  local err3 = T.raises(function() ploss:backward({ retain_graph = true }) end,
    { 'post-accumulate-grad hook: backward: nested 32 levels deep' })
  local _, n3 = err3:gsub('post%-accumulate%-grad hook: ', '')
  T.eq(n3, 1, 'the prefix appears once')
end)

T.test('autograd.grad leaves .grad untouched', function()
  local x, w = leaf({ 3 }), leaf({ 3 })
  local y = (x ^ 3 * w):sum()
  local g = ag.grad(y, { x, w }, nil, { retain_graph = true })
  close(g[1], x:detach() ^ 2 * 3 * w:detach(), 1e-12)
  close(g[2], x:detach() ^ 3, 1e-12)
  T.eq(x.grad, nil)
  T.eq(w.grad, nil)
  local unused = leaf({ 2 })
  local r = ag.grad({ y }, { unused, x })
  T.eq(r[1], nil, 'unreachable input')
  close(r[2], g[1], 1e-12)
end)

T.test('2-layer MLP gradients vs manual backprop', function()
  local N = 8
  local x = v100.randn({ N, 5 }, { dtype = 'f64' })
  local t = v100.randn({ N, 3 }, { dtype = 'f64' })
  local W1, b1, W2, b2 = leaf({ 5, 6 }), leaf({ 6 }), leaf({ 6, 3 }), leaf({ 3 })
  local pre = x:matmul(W1) + b1
  local h = pre:relu()
  local out = v100.addmm(b2, h, W2)
  local loss = ((out - t) ^ 2):mean()
  loss:backward()
  v100.no_grad(function()
    local dout = (out - t) * (2 / (N * 3))
    local dW2 = h:t():matmul(dout)
    local db2 = dout:sum(1)
    local dh = dout:matmul(W2:t())
    local dpre = v100.where(pre:gt(0), dh, 0)
    local dW1 = x:t():matmul(dpre)
    local db1 = dpre:sum(1)
    close(W2.grad, dW2, 1e-12)
    close(b2.grad, db2, 1e-12)
    close(W1.grad, dW1, 1e-12)
    close(b1.grad, db1, 1e-12)
  end)
end)

T.test('a chain of 10,000 ops (iterative engine and freeing)', function()
  local x = leaf({ 2 })
  local y = x
  for _ = 1, 10000 do y = y * 1.0001 end
  y:sum():backward()
  T.allclose(x.grad, { 1.0001 ^ 10000, 1.0001 ^ 10000 }, 1e-9)
  y = nil
  collectgarbage()
end)

T.test('the graph is freed when the loss goes out of scope', function()
  collectgarbage()
  collectgarbage()
  local before = ag.live_nodes()
  local w = leaf({ 4, 4 })
  do
    local loss = (w:matmul(w):tanh() * 3):sum()
    T.ok(ag.live_nodes() > before, 'nodes exist while the loss is alive')
    loss:backward()
  end
  collectgarbage()
  collectgarbage()
  T.eq(ag.live_nodes(), before, 'no node outlives the loss')
  T.ok(w.grad ~= nil)
  -- a retained graph goes away too
  do
    local loss = (w * w):sum()
    loss:backward({ retain_graph = true })
  end
  collectgarbage()
  collectgarbage()
  T.eq(ag.live_nodes(), before)
end)

T.test('options are checked; create_graph is refused by name; a Function returns one gradient per argument', function()
  local x = leaf{3}
  local y = (x * x):sum()
  T.raises(function() ag.grad(y, x, nil, { create_graph = true }) end,
    { 'autograd.grad: create_graph = true (double backward) is not supported' })
  T.raises(function() ag.grad(y, x, nil, { retain_grap = true }) end,
    "autograd.grad: unknown option 'retain_grap' (retain_graph, create_graph)")
  T.raises(function() y:backward { retian_graph = true } end, "backward: unknown option 'retian_graph'")
  T.raises(function() y:backward(nil, 'yes') end, 'backward: options must be a table, got string')
  local g = ag.grad(y, x, nil, { retain_graph = true, create_graph = false })
  close(g[1], x:detach() * 2)
  -- one gradient per argument of forward: too few and too many are errors, nil marks "none"
  local function fn(nret)
    return ag.Function {
      name = 'Scale',
      forward = function(_, a, k) return a * k end,
      backward = function(_, go)
        local r = { go * 3, nil, go }
        return table.unpack(r, 1, nret)
      end,
    }
  end
  T.raises(function() fn(1)(x, 3):sum():backward() end, 'Scale.backward: returned 1 gradient, expected 2')
  T.raises(function() fn(3)(x, 3):sum():backward() end, 'Scale.backward: returned 3 gradients, expected 2')
  x.grad = nil
  fn(2)(x, 3):sum():backward()
  close(x.grad, v100.full({3}, 3, { dtype = 'f64' }))
  T.raises(function() ag.Function { forward = print, backward = print, forwrd = 1 } end,
    "autograd.Function: unknown option 'forwrd' (name, forward, backward)")
  T.raises(function() ag.gradcheck(function(a) return a * a end, { x }, { epss = 1 }) end,
    "gradcheck: unknown option 'epss' (eps, atol, rtol)")
end)

T.run()
