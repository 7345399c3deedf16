-- tests/lua/gpu_dist.lua: v100.dist on CUDA tensors at world size 1, both ways it runs: alone (no
-- launcher: the identity backend) and under `mpirun -np 1` (NCCL: the communicator is made at the
-- first CUDA collective from rank 0's id sent over MPI). tools/device-run.sh runs it both ways.
-- Every collective and dtype gives its world-size-1 result on the device, handles and groups
-- complete, DataParallel on CUDA gives the same parameters as plain training, and (alone, which
-- launches mpirun itself) the NCCL watchdog ends a job whose all-reduce cannot start in time.
local T = require 'testlib'
T.cuda_or_skip()
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local dist = require 'v100.dist'

local launched = os.getenv('OMPI_COMM_WORLD_SIZE') ~= nil
v100.manual_seed(7)
dist.init()

local DTYPES = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'u8', 'bool' }

local function data(dt, shape)
  local x = (v100.rand(shape or { 1000 }, { dtype = 'f64' }) * 10):floor()
  if dt == 'bool' then x = x:gt(4) end
  return x:to(dt):cuda()
end

T.test('dist.init on a GPU: this rank\'s device is the \'cuda\' default; the CUDA backend', function()
  local info = dist.info()
  T.eq(info.device, 'cuda:0', 'local rank 0 -> cuda:0')
  T.eq(v100.device(), 'cuda:0')
  T.eq(v100.zeros({ 1 }, { device = 'cuda' }).device, 'cuda:0')
  dist.all_reduce(v100.ones({ 1 }, { device = 'cuda' }))
  T.eq(dist.info().cuda_backend, launched and 'nccl' or 'local', 'NCCL under mpirun, the identity alone')
end)

T.test('every collective and dtype on CUDA: world-size-1 results, on the device', function()
  for _, dt in ipairs(DTYPES) do
    local ops = dt == 'bool' and { 'sum', 'max', 'min', 'prod' }
      or (dt:match('^[fb]') and { 'sum', 'avg', 'max', 'min', 'prod' } or { 'sum', 'max', 'min', 'prod' })
    for _, op in ipairs(ops) do
      local x = data(dt)
      local y = x:clone()
      dist.all_reduce(y, { op = op })
      T.tensor_eq(y, x, dt .. ' all_reduce ' .. op)
      T.eq(y.device, 'cuda:0')
    end
    local x = data(dt)
    local b = x:clone()
    dist.broadcast(b, { src = 0 })
    T.tensor_eq(b, x, dt .. ' broadcast')
    local r = x:clone()
    dist.reduce(r, { dst = 0, op = 'sum' })
    T.tensor_eq(r, x, dt .. ' reduce')
    local g = v100.empty({ 1, 1000 }, { dtype = dt, device = 'cuda' })
    dist.all_gather(g, x)
    T.tensor_eq(g:view({ 1000 }), x, dt .. ' all_gather (stacked)')
    local s = v100.empty({ 1000 }, { dtype = dt, device = 'cuda' })
    dist.reduce_scatter(s, x, dt == 'bool' and { op = 'max' } or { op = 'sum' })
    T.tensor_eq(s, x, dt .. ' reduce_scatter')
  end
  -- a strided view is staged and written back in place
  local m = data('f32', { 40, 30 })
  local v = m:t()
  local want = v:clone()
  dist.all_reduce(v, { op = 'avg' })
  T.tensor_eq(v, want, 'transposed view')
end)

T.test('async handles, groups and the current stream', function()
  local x = data('f32', { 1 << 20 })
  local want = x:clone()
  local h = dist.all_reduce(x, { async = true })
  h:wait()
  T.tensor_eq(x, want, 'async all_reduce after wait')
  T.eq(h:is_completed(), true)
  local a, b = data('f16'), data('bf16')
  local wa, wb = a:clone(), b:clone()
  dist.group(function()
    dist.all_reduce(a, { op = 'avg' })
    dist.broadcast(b, { src = 0 })
  end)
  T.tensor_eq(a, wa, 'grouped f16 avg')
  T.tensor_eq(b, wb, 'grouped bf16 broadcast')
  -- produced on the current stream just before: the collective waits for it
  local z = v100.zeros({ 1 << 22 }, { device = 'cuda' })
  z:add_(3)
  dist.all_reduce(z, { op = 'max' })
  T.eq(z:min():item(), 3.0, 'the collective saw the add')
  T.raises(function() dist.send(x, 0) end, 'send: peer 0 is this rank')
end)

T.test('DataParallel on CUDA = plain training (world size 1), overlap recorded', function()
  local function build()
    v100.manual_seed(11)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)):cuda()
  end
  local x, y = v100.randn({ 16, 32 }, { device = 'cuda' }), v100.randn({ 16, 4 }, { device = 'cuda' })
  local m1 = build()
  local o1 = optim.SGD(m1:parameters(), { lr = 0.05, momentum = 0.9 })
  local m2 = build()
  local dp = dist.DataParallel(m2, { bucket_mb = 0.004 }) -- several buckets
  local o2 = optim.SGD(m2:parameters(), { lr = 0.05, momentum = 0.9 })
  for _ = 1, 5 do
    o1:zero_grad()
    nn.F.mse_loss(m1(x), y):backward()
    o1:step()
    o2:zero_grad()
    nn.F.mse_loss(dp(x), y):backward()
    dp:finish()
    o2:step()
  end
  local p1, p2 = m1:parameters(), m2:parameters()
  for i = 1, #p1 do T.tensor_eq(p2[i], p1[i], 'parameter ' .. i .. ' after 5 steps') end
  local first_allreduce, last_hook
  for i, e in ipairs(dp.events) do
    if e[1] == 'allreduce' and not first_allreduce then first_allreduce = i end
    if e[1] == 'hook' then last_hook = i end
  end
  T.ok(first_allreduce and last_hook and first_allreduce < last_hook,
    'bucket 1 is issued before the first layer\'s hooks have run')
end)

T.test('ZeRO-1 on CUDA (reduce-scatter, all-gather on the device) = plain AdamW at world size 1', function()
  local function build()
    v100.manual_seed(4)
    return nn.Sequential(nn.Linear(16, 33), nn.Tanh(), nn.Linear(33, 5)):cuda()
  end
  local model, ref = build(), build()
  local x, y = v100.randn({ 8, 16 }, { device = 'cuda' }), v100.randn({ 8, 5 }, { device = 'cuda' })
  local dp = dist.DataParallel(model, { zero = 1, bucket_mb = 0.001 })
  local opt = dp:zero_optimizer('AdamW', { lr = 0.01 })
  local ropt = optim.AdamW(ref:parameters(), { lr = 0.01 })
  for _ = 1, 4 do
    opt:zero_grad()
    ref:zero_grad()
    nn.F.mse_loss(dp(x), y):backward()
    dp:finish()
    opt:step()
    nn.F.mse_loss(ref(x), y):backward()
    ropt:step()
  end
  local rp = ref:parameters()
  for i, p in ipairs(model:parameters()) do T.tensor_eq(p, rp[i], 'ZeRO-1 parameter ' .. i) end
  T.eq(opt:state_numel(), 2 * (16 * 33 + 33 + 33 * 5 + 5), 'the whole state on the one rank')
  dp:remove()
end)

-- Alone only: launch `mpirun -np 1` on a script whose all-reduce waits behind a 6 s kernel on the
-- current stream, with V100LUA_NCCL_TIMEOUT=1: the watchdog must end the job non-zero within
-- seconds, naming the operation, instead of letting it wait.
T.test('the NCCL watchdog ends a job whose collective is overdue', function()
  if launched then return end
  if os.getenv('V100_UNDER_MEMCHECK') then
    print('  (under compute-sanitizer: the watchdog child job is left out)')
    return
  end
  local mpiexec = os.getenv('V100_MPIEXEC') or 'mpirun'
  if not os.execute('command -v ' .. mpiexec .. ' >/dev/null 2>&1') then
    print('  (no ' .. mpiexec .. ': watchdog test skipped)')
    return
  end
  local code = [[
local v100 = require 'v100'
local dist = require 'v100.dist'
dist.init()
local spin = v100.kernel{ name = 'spin', signature = 'uint64', source = [=[
extern "C" __global__ void spin(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}]=] }
local x = v100.ones({ 1024 }, { device = 'cuda' })
dist.all_reduce(x) -- the communicator exists before the timed part
spin(1, 1, 6000000000)
local h = dist.all_reduce(x, { async = true })
os.execute('sleep 5')
print('not reached: the watchdog should have ended the job')
]]
  local q = function(s) return "'" .. s:gsub("'", "'\\''") .. "'" end
  local t0 = os.time()
  local p = assert(io.popen('V100LUA_NCCL_TIMEOUT=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 ' ..
    mpiexec .. ' -np 1 ' .. q(T.binary()) .. ' -e ' .. q(code) .. ' 2>&1'))
  local out = p:read('a')
  local _, _, rc = p:close()
  T.ok(rc ~= 0 and rc ~= 124, 'non-zero and not the 60 s timeout (rc ' .. tostring(rc) .. '): ' .. out)
  T.ok(out:find('NCCL watchdog: all_reduce has not finished after', 1, true), 'names the op: ' .. out)
  T.ok(out:find('[rank 0 ', 1, true), 'with the rank prefix: ' .. out)
  T.ok(not out:find('not reached', 1, true), 'the job ended before the script did')
  T.ok(os.time() - t0 < 30, 'quickly')
end)

T.run()
