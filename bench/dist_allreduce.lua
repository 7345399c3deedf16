-- bench/dist_allreduce.lua: the time of one CPU all_reduce (MPI), for the agreement check's cost
-- (docs/DISTRIBUTED.md, "The agreement check"). Run it twice, with and without the check:
--   mpirun -np 2 v100lua bench/dist_allreduce.lua
--   mpirun -np 2 -x V100LUA_DIST_CHECK=0 v100lua bench/dist_allreduce.lua
-- and across the test hosts of tools/multinode.sh (multinode.sh exec a mpirun --hostfile ...).
-- Prints, on rank 0, the median over 5 rounds of the mean time per call for each size.
local v100 = require 'v100'
local dist = require 'v100.dist'
dist.init()
local sizes = { 1, 1000, 100000, 4000000 } -- the last: 16 MB, a bandwidth (docs/DISTRIBUTED.md, "Tested across hosts")
local iters = { 2000, 2000, 200, 10 }
local clock = v100.io.time -- a monotonic wall clock (os.clock is CPU time, which hides waits)
local check = os.getenv('V100LUA_DIST_CHECK') ~= '0'
for i, n in ipairs(sizes) do
  local t = v100.ones({ n })
  for _ = 1, 50 do dist.all_reduce(t) end -- warm-up
  local rounds = {}
  for k = 1, 5 do
    dist.barrier()
    local t0 = clock()
    for _ = 1, iters[i] do dist.all_reduce(t) end
    rounds[k] = (clock() - t0) / iters[i]
  end
  table.sort(rounds)
  dist.print(string.format('all_reduce %7d f32, check %s: %10.2f us/call, %7.1f MB/s algorithm bandwidth', n,
    check and 'on ' or 'off', rounds[3] * 1e6, 4 * n / rounds[3] / 1e6))
end
