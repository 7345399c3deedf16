-- tests/lua/test_dist.lua: v100.dist without a launcher (world size 1, the local backend): init,
-- rank/size, every collective as the identity or a copy, async handles and groups, argument
-- errors, dist.print, os.exit after init, the DistributedSampler's shards. The collectives across
-- ranks are tests/mpi (label mpi, under mpirun).
local T = require 'testlib'
local v100 = require 'v100'
local dist = require 'v100.dist'

local launcher_vars = {'OMPI_COMM_WORLD_RANK', 'PMI_RANK', 'SLURM_PROCID', 'RANK'}
for _, v in ipairs(launcher_vars) do
  if os.getenv(v) and (v ~= 'RANK' or os.getenv('WORLD_SIZE')) then
    print('test_dist: skipped (launched with ' .. v .. ' set; tests/mpi covers that)')
    os.exit(0)
  end
end

local exe = T.binary()
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local nolaunch = 'env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u SLURM_PROCID -u RANK -u WORLD_SIZE '
local function child(code, env)
  local p = assert(io.popen(nolaunch .. (env or '') .. ' ' .. q(exe) .. ' -e ' .. q(code) .. ' 2>&1'))
  local out = p:read('a')
  local _, _, rc = p:close()
  return out, rc
end

T.test('before init: the environment view, collectives refused', function()
  T.eq(dist.is_initialized(), false)
  T.eq(dist.rank(), 0)
  T.eq(dist.size(), 1)
  T.eq(dist.is_main(), true)
  T.eq(dist.info().backend, 'none')
  T.raises(function() dist.all_reduce(v100.ones({2})) end, 'all_reduce: dist.init() has not been called')
  T.raises(function() dist.barrier() end, 'barrier: dist.init() has not been called')
  T.raises(function() dist.group(function() end) end, 'group: dist.init() has not been called')
end)

T.test('init: world size 1, local backend, idempotent', function()
  T.ok(rawequal(dist.init(), dist), 'returns the module')
  T.ok(rawequal(dist.init(), dist), 'twice')
  T.ok(rawequal(v100.dist, dist), 'v100.dist is the module')
  local info = dist.info()
  T.eq(info.initialized, true)
  T.eq(info.backend, 'local')
  T.eq(info.launcher, 'none')
  T.eq({info.rank, info.size, info.local_rank, info.local_size}, {0, 1, 0, 1})
  T.eq(dist.is_main(), true)
  T.ok(#info.host > 0)
end)

local dtypes = {'f64', 'f32', 'f16', 'bf16', 'i64', 'i32', 'u8', 'bool'}

T.test('collectives are the identity at world size 1, every dtype', function()
  for _, dt in ipairs(dtypes) do
    local vals = dt == 'bool' and {true, false, true, true} or {1, 2, 3, 250}
    local ops = {'sum', 'max', 'min', 'prod'}
    if v100.dtype_is_float(dt) then ops[#ops + 1] = 'avg' end
    for _, op in ipairs(ops) do
      local t = v100.tensor(vals, {dtype = dt})
      T.ok(rawequal(dist.all_reduce(t, {op = op}), t))
      T.alleq(t, vals, dt .. ' all_reduce ' .. op)
      dist.reduce(t, {op = op})
      T.alleq(t, vals, dt .. ' reduce ' .. op)
    end
    local t = v100.tensor(vals, {dtype = dt})
    dist.broadcast(t)
    T.alleq(t, vals, dt .. ' broadcast')
    local g = dist.all_gather(t)
    T.eq(g.shape, {4})
    T.alleq(g, vals, dt .. ' all_gather')
    local st = v100.empty({1, 4}, {dtype = dt})
    dist.all_gather(st, t)
    T.alleq(st, {vals}, dt .. ' all_gather stacked')
    local rs = dist.reduce_scatter(t)
    T.alleq(rs, vals, dt .. ' reduce_scatter')
    T.eq(rs.dtype, dt)
  end
end)

T.test('views, async handles, groups, barrier', function()
  local m = v100.tensor({{1, 2, 3}, {4, 5, 6}}, {dtype = 'f32'})
  dist.all_reduce(m:t(), {op = 'avg'})
  T.alleq(m, {{1, 2, 3}, {4, 5, 6}})
  local h = dist.all_reduce(m, {async = true})
  T.eq(h:is_completed(), true)
  h:wait()
  h:close()
  h:close()
  T.raises(function() h:wait() end, 'dist: handle used after close()')
  local hg, out = dist.all_gather(v100.ones({2}), {async = true})
  hg:wait()
  T.alleq(out, {1, 1})
  T.eq(dist.barrier(), nil)
  dist.barrier({async = true}):wait()
  local a, b = v100.ones({2}), v100.full({2}, 3)
  local r1, r2 = dist.group(function()
    dist.all_reduce(a)
    dist.broadcast(b)
    return 'x', 7
  end)
  T.eq({r1, r2}, {'x', 7}, 'group returns the function results')
  T.raises(function() dist.group(function() dist.all_reduce(a); error('inside the group') end) end, 'inside the group')
  dist.group(function() dist.all_reduce(a) end) -- the failed group left no group open
  T.alleq(a, {1, 1})
end)

T.test('argument errors', function()
  T.raises(function() dist.broadcast(v100.ones({2}), {src = 1}) end, 'broadcast: root 1 is not a rank (world size 1: ranks 0..0)')
  T.raises(function() dist.send(v100.ones({2}), 0) end, 'send: peer 0 is this rank (send and recv need another rank)')
  T.raises(function() dist.recv(v100.ones({2}), 1) end, 'recv: peer 1 is not a rank')
  T.raises(function() dist.all_reduce(v100.ones({2}, {dtype = 'i64'}), {op = 'avg'}) end,
    "all_reduce: op 'avg' needs a floating dtype (got i64; use 'sum')")
  T.raises(function() dist.reduce_scatter(v100.ones({2}, {dtype = 'bool'}), {op = 'avg'}) end, "op 'avg' needs a floating dtype")
  T.raises(function() dist.all_reduce(v100.ones({2}), {op = 'mode'}) end, "all_reduce: unknown op 'mode' (sum, avg, max, min or prod)")
  T.raises(function() dist.all_gather(v100.empty({3}), v100.ones({2})) end,
    'all_gather: the output 3 f32 cpu must be 1 blocks of the input 2 f32 cpu')
  T.raises(function() dist.all_gather(v100.empty({2}, {dtype = 'i32'}), v100.ones({2})) end, 'of the same dtype')
  T.raises(function() dist.reduce_scatter(v100.empty({2}), v100.ones({3})) end, 'reduce_scatter: the input 3 f32 cpu must be 1 blocks')
  T.raises(function() dist.all_reduce(v100.ones({1}):expand({4})) end, 'all_reduce: cannot write into an expanded tensor')
  T.raises(function() dist.all_reduce(nil) end, 'all_reduce: the tensor must be a tensor, got nil')
  T.raises(function() dist.all_reduce(v100.ones({2}), 'sum') end, 'all_reduce: options must be a table')
  local t = v100.ones({2})
  t:free()
  T.raises(function() dist.all_reduce(t) end, 'tensor used after free')
  if T.has_cuda() then
    -- world size 1: the identity on the device (tests/lua/gpu_dist.lua covers CUDA fully)
    local g = v100.full({2}, 3, {device = 'cuda'})
    dist.all_reduce(g)
    T.eq(g:cpu():totable(), {3, 3})
  end
end)

T.test('dist.print: rank 0 only, {all = true} everywhere with the rank', function()
  local out, rc = child("local d = require 'v100.dist'; d.init(); d.print('a', 1); d.print('b', {all = true})")
  T.eq(rc, 0, out)
  T.eq(out, 'a\t1\nb\n')
  -- before init, from the launcher's variables: rank 1 of 2 prints only with all = true
  local out2 = child("local d = require 'v100.dist'; d.print('hidden'); d.print('shown', 2, {all = true})", 'RANK=1 WORLD_SIZE=2')
  local host = assert(io.popen('hostname')):read('l')
  T.eq(out2, '[rank 1 ' .. host .. '] shown\t2\n')
end)

T.test('os.exit after init keeps its status; an error exits 1', function()
  local _, rc = child("require('v100.dist').init(); os.exit(5)")
  T.eq(rc, 5)
  local _, rc2 = child("require('v100.dist').init(); os.exit(true, true)")
  T.eq(rc2, 0)
  local out3, rc3 = child("require('v100.dist').init(); error('boom')")
  T.eq(rc3, 1)
  T.ok(out3:find('boom', 1, true) and not out3:find('[rank', 1, true), out3)
  local _, rc4 = child("local d = require('v100.dist'); d.init(); d.finalize(); d.finalize(); d.init(); print(d.size())")
  T.eq(rc4, 0, 'finalize is idempotent; the local world can start again')
end)

T.test('DistributedSampler: shards of a shared permutation', function()
  local n, size = 10, 3
  local shards, seen = {}, {}
  for r = 0, size - 1 do
    local s = dist.DistributedSampler(n, {rank = r, size = size, seed = 5})
    T.eq(#s, 4, 'ceil(10 / 3)')
    s:set_epoch(1)
    shards[r] = s:indices():totable()
    T.eq(#shards[r], 4)
    for _, i in ipairs(shards[r]) do seen[i] = (seen[i] or 0) + 1 end
  end
  for i = 0, n - 1 do T.ok(seen[i] and seen[i] >= 1, 'index ' .. i .. ' in some shard') end
  local total = 0
  for _, c in pairs(seen) do total = total + c end
  T.eq(total, 12, 'padded to a multiple of size by repeating the start')
  local perm = require('v100.data').permutation(n, 5 + 1):totable()
  T.eq(shards[1][1], perm[2], 'rank r takes positions r, r + size, ...')
  T.eq(shards[2][2], perm[6])
  local e2 = dist.DistributedSampler(n, {rank = 0, size = size, seed = 5})
  e2:set_epoch(2)
  T.ok(table.concat(e2:indices():totable(), ',') ~= table.concat(shards[0], ','), 'another epoch, another order')
  local plain = dist.DistributedSampler(n, {rank = 1, size = size, shuffle = false, drop_last = true})
  T.eq(#plain, 3)
  T.eq(plain:indices():totable(), {1, 4, 7})
  T.eq(dist.DistributedSampler(n):indices():totable(), require('v100.data').permutation(n, 0):totable(), 'epoch 0, seed 0')
  T.eq(#dist.DistributedSampler(n), 10, 'world size 1: the whole data set')
  T.raises(function() dist.DistributedSampler(n, {rank = 3, size = 3}) end, 'DistributedSampler: rank 3 is not in 0..size-1')
  T.raises(function() dist.DistributedSampler(-1) end, 'n must be a non-negative integer')
end)

T.test('DataParallel at world size 1: the identity wrapper', function()
  local nn, optim = require 'v100.nn', require 'v100.optim'
  v100.manual_seed(3)
  local model = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 2))
  v100.manual_seed(3)
  local ref = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 2))
  local x, y = v100.randn({6, 4}), v100.randn({6, 2})
  local dp = dist.DataParallel(model, {bucket_mb = 0.00005})
  T.ok(rawequal(dp.module, model))
  T.ok(#dp.buckets >= 2, 'tiny buckets: several')
  local opt = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
  local ropt = optim.SGD(ref:parameters(), {lr = 0.1, momentum = 0.9})
  for _ = 1, 3 do
    model:zero_grad(); ref:zero_grad()
    nn.F.mse_loss(dp(x), y):backward()
    dp:finish()
    opt:step()
    nn.F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
  local rp = ref:parameters()
  for i, p in ipairs(model:parameters()) do T.allclose(p, rp[i], 0, 0, 'same as without the wrapper') end
  local saw_allreduce = false
  for _, e in ipairs(dp.events) do if e[1] == 'allreduce' then saw_allreduce = true end end
  T.ok(saw_allreduce, 'buckets issued from the hooks')
  T.ok(rawequal(dp:finish(), dp), 'finish without a backward: a no-op')
  dp:remove()
end)

T.test('DataParallel zero = 1 at world size 1: one shard, the same steps as AdamW alone', function()
  local nn, optim = require 'v100.nn', require 'v100.optim'
  v100.manual_seed(4)
  local model = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3))
  v100.manual_seed(4)
  local ref = nn.Sequential(nn.Linear(4, 5), nn.Linear(5, 3))
  local x, y = v100.randn({6, 4}), v100.randn({6, 3})
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.00005})
  local opt = dp:zero_optimizer('AdamW', {lr = 0.01})
  local ropt = optim.AdamW(ref:parameters(), {lr = 0.01})
  for _ = 1, 3 do
    opt:zero_grad(); ref:zero_grad()
    nn.F.mse_loss(dp(x), y):backward()
    dp:finish()
    opt:step()
    nn.F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
  local rp = ref:parameters()
  for i, p in ipairs(model:parameters()) do T.allclose(p, rp[i], 0, 0, 'same as without the wrapper') end
  for _, b in ipairs(dp.buckets) do T.eq(b.shard_numel, b.numel, 'world size 1: no padding, one shard') end
  T.eq(opt:state_numel(), 2 * (4 * 5 + 5 + 5 * 3 + 3), 'the whole state on the one rank')
  T.ok(tostring(opt):find('ZeRO-1 AdamW (rank 0 of 1', 1, true), tostring(opt))
  dp:remove()
end)

T.run()
