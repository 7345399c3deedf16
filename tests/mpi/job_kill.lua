-- tests/mpi/job_kill.lua: run by tests/mpi/launch_kill.lua under mpirun. Rank 1 sleeps 0.5 s, so
-- that the other ranks are already blocked in the operation arg[1] names, then sends itself
-- SIGKILL (no MPI_Abort, no atexit: the process just vanishes). Without mpirun ending the job the
-- other ranks would wait forever:
--   allreduce  a blocking all_reduce of 4M floats
--   wait       h:wait() on an async all_reduce
--   recv       a recv from rank 1 (the pipeline recipe's pattern)
--   zero       DataParallel zero = 1: backward's reduce-scatters, then finish() waits
local v100 = require 'v100'
local dist = require 'v100.dist'
dist.init()
local where = arg[1] or 'allreduce'
local r = dist.rank()

local function die()
  os.execute('sleep 0.5')
  local f = assert(io.open('/proc/self/stat'))
  local pid = f:read('a'):match('^(%d+)')
  f:close()
  io.stderr:write('rank 1 (pid ' .. pid .. ') kills itself in ' .. where .. '\n')
  io.stderr:flush()
  os.execute('kill -9 ' .. pid)
  os.execute('sleep 30') -- not reached: the signal ends the process
end

dist.barrier()
if where == 'allreduce' then
  if r == 1 then die() end
  dist.all_reduce(v100.ones({4 * 1024 * 1024}))
elseif where == 'wait' then
  if r == 1 then die() end
  local h = dist.all_reduce(v100.ones({1024}), {async = true})
  h:wait()
elseif where == 'recv' then
  if r == 1 then die() end
  if r == 0 then dist.recv(v100.empty({64, 64}), 1) else dist.barrier() end
elseif where == 'zero' then
  local nn = require 'v100.nn'
  local model = nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 8))
  local dp = dist.DataParallel(model, {zero = 1, bucket_mb = 0.01})
  local opt = dp:zero_optimizer('AdamW', {lr = 1e-3})
  local x, y = v100.randn({8, 64}), v100.randn({8, 8})
  for step = 1, 3 do
    opt:zero_grad()
    if r == 1 and step == 3 then die() end
    nn.F.mse_loss(dp(x), y):backward()
    dp:finish()
    opt:step()
  end
else
  error('job_kill: unknown place ' .. tostring(where))
end
print('rank ' .. r .. ' got past ' .. where)
