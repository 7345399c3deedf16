-- tests/mpi/job_fail_rank1.lua: run by tests/mpi/launch_abort.lua under mpirun. arg[1] says how
-- rank 1 fails while rank 0 waits in a collective: 'error' (a Lua error), 'exit' (os.exit(3)) or
-- 'kill' (SIGKILL to itself). Without the abort, rank 0 would wait forever.
local v100 = require 'v100'
local dist = require 'v100.dist'
dist.init()
local how = arg[1] or 'error'
if dist.rank() == 1 then
  if how == 'error' then error('rank 1 fails on purpose') end
  if how == 'exit' then os.exit(3) end
  if how == 'kill' then
    local f = assert(io.open('/proc/self/stat'))
    local pid = f:read('a'):match('^(%d+)')
    f:close()
    os.execute('kill -9 ' .. pid)
  end
end
dist.barrier()
dist.all_reduce(v100.ones({4}))
print('rank ' .. dist.rank() .. ' got past the collective')
