-- tests/lua/test_graph.lua: what of CUDA graphs runs without a GPU (CI): the capturable
-- optimizer steps on the CPU (the same kernels' contract as on CUDA: {lr, step} read from memory,
-- the count advanced unless AMP skipped the step), their equality with the plain steps, lr
-- changes, the device count in state_dict and its reload; v100.graph's argument errors and its
-- "built without CUDA" error; capture state outside a capture. tests/lua/gpu_graph.lua captures.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'

v100.manual_seed(T.seed % 1000003)

local function model_pair()
  local a = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
  local b = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
  b:load_state_dict(a:state_dict())
  return a, b
end

local function train(m, opt, x, y, steps, found_inf_at, lr_at)
  local losses = {}
  for s = 1, steps do
    if lr_at and lr_at[s] then
      for _, g in ipairs(opt.param_groups) do g.lr = lr_at[s] end
    end
    opt:zero_grad()
    local loss = nn.F.mse_loss(m(x), y)
    loss:backward()
    losses[s] = loss:item()
    if found_inf_at and found_inf_at[s] then
      opt:step { found_inf = v100.ones({ 1 }) }
    else
      opt:step()
    end
  end
  return losses
end

local function params_equal(a, b, msg)
  local pa, pb = a:parameters(), b:parameters()
  for i = 1, #pa do T.tensor_eq(pa[i], pb[i], msg .. ' param ' .. i) end
end

for _, case in ipairs {
  { 'SGD momentum nesterov', function(p, c) return optim.SGD(p, { lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 1e-3, capturable = c }) end },
  { 'AdamW', function(p, c) return optim.AdamW(p, { lr = 0.01, weight_decay = 0.1, capturable = c }) end },
  { 'LAMB', function(p, c) return optim.LAMB(p, { lr = 0.01, capturable = c }) end },
  { 'LARS', function(p, c) return optim.LARS(p, { lr = 0.1, weight_decay = 1e-4, capturable = c }) end },
} do
  T.test(case[1] .. ': capturable steps equal the plain ones (lr changes included)', function()
    local a, b = model_pair()
    local x, y = v100.randn({ 8, 5 }), v100.randn({ 8, 3 })
    local oa, ob = case[2](a:parameters(), false), case[2](b:parameters(), true)
    T.eq(ob.capturable, true)
    local lr_at = { [4] = 0.002, [6] = 0.03 }
    local la = train(a, oa, x, y, 7, nil, lr_at)
    local lb = train(b, ob, x, y, 7, nil, lr_at)
    for s = 1, 7 do T.eq(la[s], lb[s], 'loss at step ' .. s) end
    params_equal(a, b, case[1])
    -- the step count lives in the {lr, step} tensor; state_dict reads it from there
    local sd = ob:state_dict()
    T.eq(sd.state[1].step, 7)
    T.eq(ob._dyn[1][next(ob._dyn[1])].t:totable()[1], 0.03, 'the lr the kernels read')
  end)
end

T.test('capturable AdamW: a skipped (found_inf) step does not advance the device step count', function()
  local a, b = model_pair()
  local x, y = v100.randn({ 8, 5 }), v100.randn({ 8, 3 })
  local oa = optim.AdamW(a:parameters(), { lr = 0.01, capturable = true })
  local ob = optim.AdamW(b:parameters(), { lr = 0.01, capturable = true })
  -- a: steps 1, 2, 4, 5 really happen (3 is skipped); b: four clean steps on the same data. The
  -- bias corrections follow the device count, so the parameters agree exactly.
  train(a, oa, x, y, 5, { [3] = true })
  train(b, ob, x, y, 4)
  params_equal(a, b, 'skip')
  T.eq(oa:state_dict().state[1].step, 4, 'the skipped step is not counted')
  T.eq(oa.state[a:parameters()[1]].step, 5, 'the host count still counts calls')
end)

T.test('capturable state_dict round trip: the device count is restored from the loaded steps', function()
  local a, b = model_pair()
  local x, y = v100.randn({ 8, 5 }), v100.randn({ 8, 3 })
  local oa = optim.AdamW(a:parameters(), { lr = 0.01, capturable = true })
  train(a, oa, x, y, 3)
  local ob = optim.AdamW(b:parameters(), { lr = 0.01, capturable = true })
  b:load_state_dict(a:state_dict())
  ob:load_state_dict(oa:state_dict())
  train(a, oa, x, y, 2)
  train(b, ob, x, y, 2)
  params_equal(a, b, 'resumed')
  T.eq(ob:state_dict().state[1].step, 5)
end)

T.test('optim_step / optim_advance reject a malformed {lr, step} tensor', function()
  local p = v100.zeros({ 3 })
  local g = v100.ones({ 3 })
  local hp = { lr = 0.1, dyn = v100.zeros({ 2 }) }
  T.raises(function() v100._nn.optim_step('sgd', { p }, { g }, nil, nil, hp) end,
    'optim_step: dyn must be a contiguous 2-element f64 tensor {lr, step} (got 2 f32 cpu)')
  hp.dyn = v100.zeros({ 3 }, { dtype = 'f64' })
  T.raises(function() v100._nn.optim_step('sgd', { p }, { g }, nil, nil, hp) end, '(got 3 f64 cpu)')
  T.raises(function() v100._nn.optim_advance(v100.zeros({ 2 })) end, 'optim_advance: dyn must be')
  local d = v100.tensor({ 0.5, 2 }, { dtype = 'f64' })
  v100._nn.optim_advance(d, v100.zeros({ 1 }))
  T.eq(d:totable()[2], 3)
  v100._nn.optim_advance(d, v100.ones({ 1 }))
  T.eq(d:totable()[2], 3, 'found_inf: not advanced')
  T.raises(function() optim.SGD({ p }, { lr = 1, capturable = 'yes' }) end, 'SGD: capturable must be a boolean, got string')
end)

T.test('v100.graph: argument errors, capture state, and no CUDA', function()
  T.eq(v100.graph.capturing(), false)
  T.eq(v100.graph.on_replay(function() end), false, 'on_replay outside a capture registers nothing')
  T.raises(function() v100.graph(42) end, 'v100.graph: expected a step function, got number')
  T.raises(function() v100.graph(function() end, 3) end, 'v100.graph: options must be a table, got number')
  T.raises(function() v100.graph(function() end, { warmpu = 1 }) end, "v100.graph: unknown option 'warmpu'")
  T.raises(function() v100.graph(function() end, { warmup = -1 }) end, 'warmup must be an integer >= 0, got -1')
  T.raises(function() v100.graph(function() end, { device = 'cpu' }) end,
    "device must be a CUDA device ('cuda:N' or N), got cpu")
  if not v100.cuda.is_available() then
    local e = T.raises(function() v100.graph(function() end) end, 'graph')
    T.ok(e:find('built without CUDA', 1, true) or e:find('no CUDA device', 1, true), e)
  end
end)

T.test('train.stepper: eager steps with a policy and a scaler equal the hand-written step; graph needs capturable', function()
  local train = require 'v100.train'
  local amp = require 'v100.amp'
  local a, b = model_pair()
  local x, y = v100.randn({ 8, 5 }), v100.randn({ 8, 3 })
  local oa = optim.SGD(a:parameters(), { lr = 0.1, momentum = 0.9 })
  local ob = optim.SGD(b:parameters(), { lr = 0.1, momentum = 0.9 })
  local sa, sb = amp.Scaler { init_scale = 4 }, amp.Scaler { init_scale = 4 }
  local step = train.stepper { opt = oa, scaler = sa, policy = amp.policy('O0'),
    loss = function(xb, yb) return nn.F.mse_loss(a(xb), yb) end }
  for _ = 1, 3 do
    local la = step(x, y)
    ob:zero_grad()
    local lb = nn.F.mse_loss(b(x), y)
    sb:backward(lb)
    sb:step(ob)
    sb:update()
    T.eq(la:item(), lb:item())
  end
  params_equal(a, b, 'stepper')
  T.raises(function() train.stepper { opt = oa, graph = true, loss = function() end } end,
    'train.stepper: graph = true needs an optimizer made with capturable = true')
end)

T.test('train.stepper with dp: DataParallel finished between backward and the step (world size 1 = plain)', function()
  local train = require 'v100.train'
  local dist = require 'v100.dist'
  dist.init()
  local a, b = model_pair()
  local x, y = v100.randn({ 8, 5 }), v100.randn({ 8, 3 })
  local dp = dist.DataParallel(b)
  local oa = optim.SGD(a:parameters(), { lr = 0.1, momentum = 0.9 })
  local ob = optim.SGD(b:parameters(), { lr = 0.1, momentum = 0.9 })
  local step = train.stepper { opt = ob, dp = dp, loss = function(xb, yb) return nn.F.mse_loss(dp(xb), yb) end }
  for _ = 1, 3 do
    oa:zero_grad()
    nn.F.mse_loss(a(x), y):backward()
    oa:step()
    step(x, y) -- without dp:finish() the next dp(x) would raise "the previous backward was not finished"
  end
  params_equal(b, a, 'stepper with dp')
end)

T.test('train.stepper accumulate: n micro-batches of a table each equal one step on their concatenation; clip', function()
  local train = require 'v100.train'
  local a, b = model_pair()
  local x, y = v100.randn({ 8, 5 }), v100.randn({ 8, 3 }) * 10
  local oa = optim.SGD(a:parameters(), { lr = 0.05, momentum = 0.9 })
  local ob = optim.SGD(b:parameters(), { lr = 0.05, momentum = 0.9 })
  local step = train.stepper { opt = oa, accumulate = 2, clip = 0.5,
    loss = function(mb) return nn.F.mse_loss(a(mb.x), mb.y) end }
  for _ = 1, 3 do
    local l = step({ x = x:narrow(1, 1, 4), y = y:narrow(1, 1, 4) }, { x = x:narrow(1, 5, 4), y = y:narrow(1, 5, 4) })
    ob:zero_grad()
    local lb = nn.F.mse_loss(b(x), y)
    lb:backward()
    local norm = optim.clip_grad_norm(b:parameters(), 0.5)
    T.ok(norm:item() > 0.5, 'the test clips (norm ' .. norm:item() .. ')')
    ob:step()
    T.near(l:item(), lb:item(), 1e-5, 'mean of the micro-batch losses')
  end
  for i, p in ipairs(a:parameters()) do T.allclose(p, b:parameters()[i], 1e-5, 1e-5, 'parameter ' .. i) end
  T.raises(function() step({ x = x, y = y }) end, 'train.stepper: accumulate = 2 takes 2 micro-batches, got 1')
  T.raises(function() train.stepper { opt = oa, accumulate = 0, loss = function() end } end,
    'train.stepper: accumulate must be an integer >= 1, got 0')
end)

T.run()
