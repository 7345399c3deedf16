-- tests/mpi/test_zero.lua: ZeRO stage 1 (dist.DataParallel(model, {zero = 1}) and
-- dp:zero_optimizer) under `mpirun -np 2` and `-np 3` (label mpi). Each rank trains on its shard
-- of a global batch with the optimizer state sharded; the reference is the same model and
-- optimizer trained in this process alone on the whole batch, which must match after 5 steps
-- (fp32 rounding; bf16 compression within its tolerance). The model has 89 parameters, which
-- neither 2 nor 3 divides, so the buckets are padded. Every rank runs every test in order.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F
local optim = require 'v100.optim'
local dist = require 'v100.dist'

local DPT = require 'dp_testlib'
local B = 24 -- the global batch: 2 micro-batches of 12, each split over 2, 3 or 4 ranks (tests/multinode: 4)
local r, n, _, setup, copy_of = DPT.start(T, 'ZMLP', B, 5, 7, 4, 3) -- 35 + 7, 28 + 4, 12 + 3: 89 parameters
local shard = DPT.shard

-- k steps of the ZeRO-1 pair (dp, opt) on this rank's shard and of the reference (ref, ropt) on
-- the whole batch.
local function paired_steps(k, dp, opt, ref, ropt, x, y)
  local xs, ys = shard(x, n, r), shard(y, n, r)
  for _ = 1, k do
    opt:zero_grad()
    F.mse_loss(dp(xs), ys):backward()
    dp:finish()
    opt:step()
    ref:zero_grad()
    F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
end

local KIND = {
  sgd = {'SGD', {lr = 0.1, momentum = 0.9}},
  adamw = {'AdamW', {lr = 0.01, weight_decay = 0.05}},
}

local function train(kind, dp_opts, steps)
  local model, x, y = setup(23)
  dp_opts.zero = 1
  local dp = dist.DataParallel(model, dp_opts)
  local ref = copy_of(model)
  local name, o = KIND[kind][1], KIND[kind][2]
  local opt = dp:zero_optimizer(name, o)
  local ropt = optim[name](ref:parameters(), o)
  paired_steps(steps, dp, opt, ref, ropt, x, y)
  dp:remove()
  return model, ref, dp, opt, ropt
end

local function compare(model, ref, tol, what)
  local rp = ref:named_parameters()
  for i, e in ipairs(model:named_parameters()) do
    T.allclose(e[2], rp[i][2], tol, tol, what .. ': ' .. e[1])
    local g = dist.all_gather(e[2]:reshape({1, -1}))
    T.allclose(g:narrow(1, r + 1, 1), g:narrow(1, 1, 1), 0, 0, what .. ': ranks agree on ' .. e[1])
  end
end

local function state_numel(o)
  local c = 0
  for _, st in pairs(o.state) do
    for _, k in ipairs({'momentum_buffer', 'exp_avg', 'exp_avg_sq', 'master'}) do
      if st[k] then c = c + st[k]:numel() end
    end
  end
  return c
end

T.test('the buckets are padded to a multiple of the world size and split in equal shards', function()
  local model = setup(1)
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.0001})
  local total, padded = 0, 0
  for _, b in ipairs(dp.buckets) do
    total = total + b.numel
    padded = padded + b.flat:numel()
    T.eq(b.flat:numel() % n, 0, 'padded to a multiple of ' .. n)
    T.ok(b.flat:numel() - b.numel < n, 'by less than the world size')
    T.eq(b.shard_numel * n, b.flat:numel(), 'N equal shards')
    T.eq(b.pshard:numel(), b.shard_numel)
  end
  T.eq(total, 89, 'every parameter in a bucket')
  T.ok(padded > total, 'some padding (89 elements, buckets of single parameters)')
  dp:remove()
end)

for _, kind in ipairs({'sgd', 'adamw'}) do
  T.test('5 ' .. kind .. ' steps equal one process on the global batch (fp32, one bucket)', function()
    local model, ref = train(kind, {}, 5)
    compare(model, ref, 1e-5, kind)
  end)
  T.test('5 ' .. kind .. ' steps, several padded buckets (bucket_mb = 0.0001)', function()
    local model, ref, dp = train(kind, {bucket_mb = 0.0001}, 5)
    T.ok(#dp.buckets >= 4, 'several buckets, got ' .. #dp.buckets)
    compare(model, ref, 1e-5, kind .. ' small buckets')
  end)
  T.test('5 ' .. kind .. " steps with compress = 'bf16' within bf16 tolerance", function()
    local model, ref = train(kind, {compress = 'bf16', bucket_mb = 0.0005}, 5)
    compare(model, ref, 3e-2, kind .. ' bf16')
  end)
end

T.test('the optimizer state is sharded: 1/N of the unsharded elements, up to the padding', function()
  for _, kind in ipairs({'sgd', 'adamw'}) do
    local _, _, dp, opt, ropt = train(kind, {bucket_mb = 0.0001}, 2)
    local full, mine = state_numel(ropt), opt:state_numel()
    T.eq(mine, state_numel(opt), kind .. ': state_numel counts the shard state')
    local per = kind == 'adamw' and 2 or 1 -- moments per element
    T.eq(full, per * 89, kind .. ': the unsharded state')
    local bound = 0
    for _, b in ipairs(dp.buckets) do bound = bound + b.shard_numel end
    T.eq(mine, per * bound, kind .. ': one state per shard element')
    T.ok(mine <= per * (89 // n + #dp.buckets), kind .. ': at most 1/N plus one padding element per bucket')
    -- the ranks' states together are the unsharded state plus the padding
    local sum = v100.tensor({mine}, {dtype = 'i64'})
    dist.all_reduce(sum)
    local pad = 0
    for _, b in ipairs(dp.buckets) do pad = pad + b.flat:numel() - b.numel end
    T.eq(sum:item(), full + per * pad, kind .. ': the shards add up')
  end
end)

T.test('no_sync accumulation under ZeRO-1 equals one step on the whole batch', function()
  local model, x, y = setup(29)
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.0002})
  local ref = copy_of(model)
  local opt = dp:zero_optimizer('SGD', {lr = 0.1, momentum = 0.9})
  local ropt = optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
  local mx, my = {}, {}
  for k = 0, 1 do mx[k + 1], my[k + 1] = shard(x, 2, k), shard(y, 2, k) end
  for _ = 1, 3 do
    opt:zero_grad()
    dp:no_sync(function()
      F.mse_loss(dp(shard(mx[1], n, r)), shard(my[1], n, r)):mul(0.5):backward()
    end)
    F.mse_loss(dp(shard(mx[2], n, r)), shard(my[2], n, r)):mul(0.5):backward()
    dp:finish()
    opt:step()
    ref:zero_grad()
    F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
  compare(model, ref, 1e-5, 'zero no_sync')
  dp:remove()
end)

T.test('overlap: the first reduce-scatter is issued before the first layer gradient hook', function()
  local model, x, y = setup(5)
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.0001})
  F.mse_loss(dp(shard(x, n, r)), shard(y, n, r)):backward()
  local pos = {}
  for i, e in ipairs(dp.events) do
    local key = e[1] .. ':' .. tostring(e[2])
    if not pos[key] then pos[key] = i end
  end
  T.ok(pos['reduce_scatter:1'] ~= nil, 'bucket 1 reduce-scatter issued during backward')
  T.ok(pos['reduce_scatter:1'] < pos['hook:fc1.weight'], 'before fc1.weight was ready')
  dp:finish()
  dp:remove()
end)

T.test('AMP: an inf in one rank shard makes every rank skip the step', function()
  local amp = require 'v100.amp'
  local model, x, y = setup(13)
  local dp = dist.DataParallel(model, {zero = 1})
  local opt = dp:zero_optimizer('SGD', {lr = 0.1})
  local scaler = amp.Scaler({init_scale = 1024})
  local ys = shard(y, n, r)
  if r == n - 1 then ys = ys:clone():fill_(3e38) end
  local before = model.fc1.weight:clone()
  opt:zero_grad()
  scaler:backward(F.mse_loss(dp(shard(x, n, r)), ys))
  dp:finish()
  scaler:step(opt) -- unscales this rank's shard only; the step reduces found_inf with max
  scaler:update()
  T.allclose(model.fc1.weight, before, 0, 0, 'the step was skipped on every rank')
  T.eq(scaler:get_scale(), 512.0, 'every rank backed off')
  opt:zero_grad()
  DPT.clean_amp_step(T, dist, model, before, dp, opt, scaler, shard(x, n, r), shard(y, n, r))
  dp:remove()
end)

T.test('state_dict is per rank; loading it resumes the same trajectory', function()
  local model, x, y = setup(31)
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.0001})
  local opt = dp:zero_optimizer('AdamW', {lr = 0.01})
  local xs, ys = shard(x, n, r), shard(y, n, r)
  local function step(o)
    o:zero_grad()
    F.mse_loss(dp(xs), ys):backward()
    dp:finish()
    o:step()
  end
  step(opt); step(opt)
  -- the state's tensors are the optimizer's own (as optim's state_dict): a copy, as a checkpoint is
  local function deep(t)
    if v100.is_tensor(t) then return t:clone() end
    if type(t) ~= 'table' then return t end
    local c = {}
    for k, v in pairs(t) do c[k] = deep(v) end
    return c
  end
  local sd = deep(opt:state_dict())
  T.eq(sd.zero, 1); T.eq(sd.world, n); T.eq(sd.rank, r); T.eq(#sd.shards, #dp.buckets)
  local w = {}
  for i, p in ipairs(model:parameters()) do w[i] = p:clone() end
  step(opt)
  local after = model.fc2.weight:clone()
  -- back to the saved point: the weights and a fresh optimizer loaded from the state
  v100.no_grad(function() for i, p in ipairs(model:parameters()) do p:copy_(w[i]) end end)
  local opt2 = dp:zero_optimizer('AdamW', {lr = 0.01})
  opt2:load_state_dict(sd)
  step(opt2)
  T.allclose(model.fc2.weight, after, 0, 0, 'the same third step')
  local bad = {zero = 1, world = n, rank = (r + 1) % n, shards = sd.shards, optimizer = sd.optimizer}
  T.raises(function() opt2:load_state_dict(bad) end, 'ZeRO-1 load_state_dict: the state is rank')
  T.raises(function() opt2:load_state_dict(sd.optimizer) end, 'expected a table from a ZeRO-1 optimizer state_dict()')
  dp:remove()
end)

T.test('clip_grad_norm: the norm of the whole averaged gradient, and the same clipped steps', function()
  local model, x, y = setup(37)
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.0001})
  local ref = copy_of(model)
  local opt = dp:zero_optimizer('SGD', {lr = 0.1, momentum = 0.9})
  local ropt = optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
  local xs, ys = shard(x, n, r), shard(y, n, r)
  for step = 1, 4 do
    opt:zero_grad()
    F.mse_loss(dp(xs), ys):backward()
    dp:finish()
    local norm = opt:clip_grad_norm(0.05)
    ref:zero_grad()
    F.mse_loss(ref(x), y):backward()
    local rnorm = optim.clip_grad_norm(ref:parameters(), 0.05)
    T.eq(norm.ndim, 0, 'a 0-dim tensor')
    T.close(norm:item(), rnorm:item(), 1e-5, 1e-7, 'step ' .. step .. ': the global norm')
    if step == 1 then T.ok(rnorm:item() > 0.05, 'the clip is active: ' .. rnorm:item()) end
    opt:step()
    ropt:step()
  end
  compare(model, ref, 1e-5, 'clipped')
  T.raises(function() opt:clip_grad_norm(0) end, 'max_norm must be a positive number')
  dp:remove()
end)

T.test('full_state_dict: the unsharded state; it loads into a plain optimizer and back at this world size', function()
  local model, x, y = setup(41)
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.0001})
  local ref = copy_of(model)
  local o = {lr = 0.01, weight_decay = 0.05}
  local opt = dp:zero_optimizer('AdamW', o)
  local ropt = optim.AdamW(ref:parameters(), o)
  local xs, ys = shard(x, n, r), shard(y, n, r)
  local function steps(k) paired_steps(k, dp, opt, ref, ropt, x, y) end
  steps(3)
  local full, rsd = opt:full_state_dict(), ropt:state_dict()
  T.eq(#full.param_groups, 1)
  T.eq(full.param_groups[1].params, rsd.param_groups[1].params, 'indices in model:parameters() order')
  T.eq(full.param_groups[1].lr, 0.01)
  for i, e in pairs(rsd.state) do
    T.eq(full.state[i].step, e.step, 'step of parameter ' .. i)
    T.allclose(full.state[i].exp_avg, e.exp_avg, 1e-5, 1e-6, 'exp_avg of parameter ' .. i)
    T.allclose(full.state[i].exp_avg_sq, e.exp_avg_sq, 1e-5, 1e-8, 'exp_avg_sq of parameter ' .. i)
    T.eq(full.state[i].exp_avg.shape, e.exp_avg.shape)
  end
  -- a plain optimizer on a copy of the model continues from the gathered state like ZeRO-1 does
  local twin = copy_of(model)
  local topt = optim.AdamW(twin:parameters(), o)
  topt:load_state_dict(full)
  -- and a second ZeRO-1 optimizer loads the reference's plain state
  local model2 = copy_of(ref)
  local dp2 = dist.DataParallel(model2, {zero = 1}) -- another bucket layout: one bucket
  local opt2 = dp2:zero_optimizer('AdamW', o)
  opt2:load_full_state_dict(rsd)
  steps(2)
  for _ = 1, 2 do
    twin:zero_grad()
    F.mse_loss(twin(x), y):backward()
    topt:step()
    opt2:zero_grad()
    F.mse_loss(dp2(xs), ys):backward()
    dp2:finish()
    opt2:step()
  end
  compare(twin, ref, 1e-5, 'plain optimizer from full_state_dict')
  compare(model2, ref, 1e-5, 'ZeRO-1 from a plain state_dict')
  T.raises(function() opt2:load_full_state_dict({state = {}, param_groups = {{params = {}}, {params = {}}}}) end,
    'the state has 2 param groups; ZeRO-1 has one')
  T.raises(function() opt2:load_full_state_dict({state = {}, param_groups = {{params = {1}}}}) end,
    'the state has 1 parameters, the model 6')
  dp:remove(); dp2:remove()
end)

T.test('argument errors', function()
  local model = setup(1)
  T.raises(function() dist.DataParallel(model, {zero = 2}) end, 'zero = 2 (sharded gradients or parameters) is not supported')
  T.raises(function() dist.DataParallel(model, {zero = 'yes'}) end, 'zero must be nil, 0 or 1, got yes')
  local plain = dist.DataParallel(model)
  T.raises(function() plain:zero_optimizer('SGD', {lr = 0.1}) end, 'zero_optimizer needs DataParallel(model, {zero = 1})')
  plain:remove()
  local dp = dist.DataParallel(model, {zero = 1})
  T.raises(function() dp:zero_optimizer('LAMB', {lr = 0.1}) end, 'LAMB is not supported: its trust ratios need per-parameter norms')
  T.raises(function() dp:zero_optimizer(optim.LARS, {lr = 0.1}) end, 'LARS is not supported')
  T.raises(function() dp:zero_optimizer('Adam', {lr = 0.1}) end, "the optimizer must be 'SGD' or 'AdamW'")
  T.raises(function() dp:zero_optimizer('AdamW', {no_decay = optim.no_decay_bias_and_norm}) end, 'no_decay is not supported')
  local opt = dp:zero_optimizer(optim.SGD, {lr = 0.1})
  T.raises(function() opt:step(function() return 1 end) end, 'closures are not supported')
  F.mse_loss(dp(v100.ones({2, 5})), v100.zeros({2, 3})):backward()
  T.raises(function() opt:step() end, 'the last backward was not finished: call dp:finish() before opt:step()')
  dp:finish()
  opt:step()
  dp:remove()
end)

T.run()
