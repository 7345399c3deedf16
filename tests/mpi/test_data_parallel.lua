-- tests/mpi/test_data_parallel.lua: dist.DataParallel under `mpirun -np 2` and `-np 3` (label
-- mpi). Each rank trains on its shard of a global batch; the reference is the same model trained
-- in this process alone on the whole batch (computed on every rank), which DataParallel must
-- match: exactly up to fp32 rounding, within bf16/fp16 rounding with compression. Every rank runs
-- every test in the same order, so a failure on one rank does not leave the others in a collective.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F
local optim = require 'v100.optim'
local dist = require 'v100.dist'

local DPT = require 'dp_testlib'
local B = 24 -- the global batch: 2 micro-batches of 12, each split over 2, 3 or 4 ranks (tests/multinode: 4)
-- setup(seed): a model whose initial parameters differ between ranks (DataParallel must
-- broadcast rank 0's) and the data (the same on every rank); copy_of: a reference copy.
local r, n, _, setup, copy_of = DPT.start(T, 'MLP', B, 5, 7, 6, 3)
local shard = DPT.shard

local function train(dp_opts, steps)
  local model, x, y = setup(17)
  local dp = dist.DataParallel(model, dp_opts)
  local ref = copy_of(model)
  T.ok(rawequal(dp.module, model), 'dp.module is the wrapped model')
  local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
  local ropt = optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
  local xs, ys = shard(x, n, r), shard(y, n, r)
  for _ = 1, steps do
    model:zero_grad()
    F.mse_loss(dp(xs), ys):backward()
    dp:finish()
    opt:step()
    ref:zero_grad()
    F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
  dp:remove()
  return model, ref, dp
end

local function compare(model, ref, tol, what)
  local rp = ref:named_parameters()
  for i, e in ipairs(model:named_parameters()) do
    T.allclose(e[2], rp[i][2], tol, tol, what .. ': ' .. e[1])
    -- every rank holds the same parameters
    local g = dist.all_gather(e[2]:reshape({1, -1}))
    T.allclose(g:narrow(1, r + 1, 1), g:narrow(1, 1, 1), 0, 0, what .. ': ranks agree on ' .. e[1])
  end
end

T.test('broadcast from rank 0 at construction', function()
  local model = setup(3)
  local before = model.fc1.weight:clone()
  dist.broadcast(before, {src = 0})
  local dp = dist.DataParallel(model)
  T.allclose(model.fc1.weight, before, 0, 0, 'rank 0 weights everywhere')
  T.eq(#dp.buckets, 1, 'default 25 MiB: one bucket')
  T.eq(dp.buckets[1].names[1], 'fc3.bias', 'reverse registration order')
  T.eq(dp.buckets[1].names[6], 'fc1.weight')
  T.ok(dp(v100.ones({2, 5})).shape[2] == 3, 'dp(x) forwards to the model')
  T.eq(#dp:parameters(), 6, 'methods forward to the module')
  dp:remove()
end)

T.test('5 SGD momentum steps equal one process on the global batch (fp32)', function()
  local model, ref = train(nil, 5)
  compare(model, ref, 1e-5, 'fp32')
end)

T.test('several buckets (bucket_mb = 0.0001)', function()
  local model, ref, dp = train({bucket_mb = 0.0001}, 5)
  T.ok(#dp.buckets >= 4, 'several buckets, got ' .. #dp.buckets)
  compare(model, ref, 1e-5, 'small buckets')
end)

T.test("compress = 'bf16' within bf16 tolerance", function()
  local model, ref = train({compress = 'bf16', bucket_mb = 0.0005}, 5)
  compare(model, ref, 3e-2, 'bf16')
end)

T.test("compress = 'fp16' within fp16 tolerance", function()
  local model, ref = train({compress = 'fp16'}, 5)
  compare(model, ref, 5e-3, 'fp16')
end)

T.test('no_sync accumulation equals one step on the concatenated micro-batches', function()
  local model, x, y = setup(29)
  local dp = dist.DataParallel(model, {bucket_mb = 0.0002})
  local ref = copy_of(model)
  local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
  local ropt = optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
  -- the global batch in 2 micro-batches; each micro-batch split over the ranks. Loss sums of
  -- halves: each micro-step's mean loss is scaled by 1/2 so the sum is the full batch's mean.
  local mx, my = {}, {}
  for k = 0, 1 do mx[k + 1], my[k + 1] = shard(x, 2, k), shard(y, 2, k) end
  for _ = 1, 3 do
    model:zero_grad()
    dp:no_sync(function()
      F.mse_loss(dp(shard(mx[1], n, r)), shard(my[1], n, r)):mul(0.5):backward()
    end)
    T.eq(#dp.events, 0, 'no hook or all-reduce recorded inside no_sync')
    F.mse_loss(dp(shard(mx[2], n, r)), shard(my[2], n, r)):mul(0.5):backward()
    dp:finish()
    dp:clear_events()
    opt:step()
    ref:zero_grad()
    F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
  compare(model, ref, 1e-5, 'no_sync')
  dp:remove()
end)

T.test('overlap: the first bucket is all-reduced before the first layer gradient hook', function()
  local model, x, y = setup(5)
  local dp = dist.DataParallel(model, {bucket_mb = 0.0001}) -- one bucket per parameter or two
  F.mse_loss(dp(shard(x, n, r)), shard(y, n, r)):backward()
  local pos = {}
  for i, e in ipairs(dp.events) do
    local key = e[1] .. ':' .. tostring(e[2])
    if not pos[key] then pos[key] = i end
  end
  T.ok(pos['allreduce:1'] ~= nil, 'bucket 1 all-reduce issued during backward')
  T.ok(pos['hook:fc1.weight'] ~= nil, 'fc1.weight hook ran')
  T.ok(pos['allreduce:1'] < pos['hook:fc1.weight'], 'bucket 1 issued before fc1.weight was ready')
  T.ok(pos['allreduce:1'] < pos['hook:fc1.bias'], 'and before fc1.bias')
  T.eq(dp.events[1][1], 'hook', 'a hook comes first')
  T.ok(dp.events[1][2]:match('^fc3%.'), 'the last layer first, got ' .. tostring(dp.events[1][2]))
  local issued = 0
  for _, e in ipairs(dp.events) do if e[1] == 'allreduce' then issued = issued + 1 end end
  T.eq(issued, #dp.buckets, 'every bucket issued during backward')
  dp:finish()
  dp:remove()
end)

T.test('a parameter unused in forward: zeros in its slot, the others still averaged', function()
  local Two = nn.Module:extend('Two')
  function Two:init() self.a = nn.Linear(5, 3); self.unused = nn.Linear(3, 3); self.b = nn.Linear(5, 3) end
  function Two:forward(x) return self.a(x) + self.b(x) end
  v100.manual_seed(40 + r)
  local model = Two()
  v100.manual_seed(40)
  local x, y = v100.randn({B, 5}), v100.randn({B, 3})
  local dp = dist.DataParallel(model, {bucket_mb = 0.00002}) -- unused sits between a and b
  local ref = Two()
  v100.no_grad(function()
    local src = model:parameters()
    for i, p in ipairs(ref:parameters()) do p:copy_(src[i]) end
  end)
  local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
  local ropt = optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
  local w0 = model.unused.weight:clone()
  for _ = 1, 3 do
    model:zero_grad(); ref:zero_grad()
    F.mse_loss(dp(shard(x, n, r)), shard(y, n, r)):backward()
    dp:finish()
    opt:step()
    F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
  T.allclose(model.unused.weight, w0, 0, 0, 'the unused parameter is unchanged')
  T.allclose(model.unused.weight.grad, v100.zeros({3, 3}), 0, 0, 'its .grad is zeros')
  for _, k in ipairs({'a', 'b'}) do
    T.allclose(model[k].weight, ref[k].weight, 1e-5, 1e-5, k .. '.weight as one process')
  end
  dp:remove()
end)

T.test('AMP: found_inf agrees across ranks (max)', function()
  local model = setup(11)
  local dp = dist.DataParallel(model)
  local fake = {_found_inf = v100.tensor({r == n - 1 and 1 or 0}, {dtype = 'f32'})}
  dp:sync_found_inf(fake)
  T.eq(fake._found_inf:item(), 1.0, 'the last rank saw an inf: every rank skips')
  dp:remove()
end)

T.test('AMP: an inf on one rank makes every rank skip the step', function()
  local amp = require 'v100.amp'
  local model, x, y = setup(13)
  local dp = dist.DataParallel(model)
  local opt = optim.SGD(model:parameters(), {lr = 0.1})
  local scaler = amp.Scaler({init_scale = 1024})
  local ys = shard(y, n, r)
  -- on the last rank only the scaled gradient of the loss, 2 (out - y) / numel * scale, overflows
  if r == n - 1 then ys = ys:clone():fill_(3e38) end
  local before = model.fc1.weight:clone()
  model:zero_grad()
  scaler:backward(F.mse_loss(dp(shard(x, n, r)), ys))
  dp:finish()
  scaler:unscale_(opt)
  dp:sync_found_inf(scaler)
  T.eq(scaler:counters().found_inf, 1.0, 'found_inf on every rank')
  scaler:step(opt)
  scaler:update()
  T.allclose(model.fc1.weight, before, 0, 0, 'the step was skipped on every rank')
  T.eq(scaler:get_scale(), 512.0, 'every rank backed off')
  -- a clean step then updates every rank alike
  model:zero_grad()
  DPT.clean_amp_step(T, dist, model, before, dp, opt, scaler, shard(x, n, r), shard(y, n, r))
  dp:remove()
end)

T.test('a forward before finish() of the last backward is an error', function()
  local model, x, y = setup(2)
  local dp = dist.DataParallel(model)
  F.mse_loss(dp(shard(x, n, r)), shard(y, n, r)):backward()
  T.raises(function() dp(x) end, 'the previous backward was not finished: call dp:finish()')
  dp:finish()
  T.eq(dp(x).shape, {B, 3}, 'after finish the wrapper forwards again')
  dp:remove()
end)

T.test('argument errors', function()
  local model = setup(1)
  T.raises(function() dist.DataParallel(model, {compress = 'int8'}) end, "compress must be nil, 'bf16' or 'fp16'")
  T.raises(function() dist.DataParallel(model, {bucket_mb = 0}) end, 'bucket_mb must be a positive number')
  T.raises(function() dist.DataParallel(42) end, 'model must be an nn module')
end)

T.run()
