-- tests/mpi/job_hang.lua: run by tests/mpi/launch_hang.lua under mpirun (2 or 3 ranks). arg[1]
-- names a way for the ranks to disagree that used to leave the job running forever (issue 27);
-- each must now end the job non-zero with a message on every rank. The last rank is the odd one.
--   end_script   the last rank's script ends while the others wait in an all_reduce
--   os_exit      the last rank calls os.exit(0) while the others wait in a barrier
--   sampler      DistributedSampler over 5*size vs 5*size+1 samples (10 vs 11 at 2 ranks): 5 vs 6
--                all-reduces, one per index
--   count        all_reduce of 1,000 floats on the others, 1,000,000 on the last rank
--   gather       all_gather of 4 vs 5 elements per rank
--   recv         the last rank ends while rank 0 waits in a recv from it
--   timeout      V100LUA_DIST_TIMEOUT=2: the last rank computes for 60 s while the others wait
--   ok           every rank agrees (exits 0)
local v100 = require 'v100'
local dist = require 'v100.dist'
dist.init()
local how = arg[1] or 'ok'
local r, n = dist.rank(), dist.size()
local odd = r == n - 1
io.stderr:write(string.format('rank %d starts %s\n', r, how))

if how == 'end_script' then
  dist.all_reduce(v100.ones({8}))
  if not odd then dist.all_reduce(v100.ones({8})) end
elseif how == 'os_exit' then
  dist.barrier()
  if odd then os.exit(0) end
  dist.barrier()
elseif how == 'sampler' then
  local s = dist.DistributedSampler(odd and 5 * n + 1 or 5 * n, { shuffle = false })
  local idx = s:indices()
  for _ = 1, #s do dist.all_reduce(v100.ones({4}), { op = 'sum' }) end
  io.stderr:write(string.format('rank %d did %d all-reduces over %d indices\n', r, #s, idx.shape[1]))
elseif how == 'count' then
  dist.all_reduce(v100.ones({odd and 1000000 or 1000}))
elseif how == 'gather' then
  local k = odd and 5 or 4
  dist.all_gather(v100.zeros({k * n}), v100.ones({k}))
elseif how == 'recv' then
  if r == 0 then dist.recv(v100.zeros({4}), n - 1) end
elseif how == 'timeout' then
  if odd then
    local t = os.time()
    while os.time() - t < 60 do end
  end
  dist.all_reduce(v100.ones({4}))
elseif how == 'ok' then
  dist.all_reduce(v100.ones({4}))
  dist.barrier()
end
print(string.format('rank %d finished %s', r, how))
