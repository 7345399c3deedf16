-- tests/multinode/job_loop.lua: every rank all-reduces in a loop for up to arg[2] seconds (a job in
-- its steady state); rank 0 writes arg[1] (a file in the shared folder) after the first collective
-- crossed the hosts, so the test knows the job runs before it kills a host. Run by launch_faults.lua.
local v100 = require 'v100'
local dist = require 'v100.dist'
dist.init()
local t = v100.ones({ 1024 })
dist.all_reduce(t)
if dist.rank() == 0 then
  local f = assert(io.open(arg[1], 'w'))
  f:write('running\n')
  f:close()
end
local t0, n = v100.io.time(), 0
while v100.io.time() - t0 < tonumber(arg[2] or '60') do
  dist.all_reduce(t:fill_(1))
  n = n + 1
  os.execute('sleep 0.01')
end
dist.print('the loop ended by itself after ' .. n .. ' collectives')
