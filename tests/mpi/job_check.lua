-- tests/mpi/job_check.lua: run by tests/mpi/launch_abort.lua under mpirun with
-- V100LUA_DIST_CHECK=1: ranks that disagree on a collective (count, dtype, op, the collective
-- itself) all fail with the same message instead of hanging; agreeing ones run as usual.
local v100 = require 'v100'
local dist = require 'v100.dist'
dist.init()
local r = dist.rank()
local function fails(fn, want)
  local ok, err = pcall(fn)
  assert(not ok, 'expected an error containing: ' .. want)
  assert(tostring(err):find(want, 1, true), 'rank ' .. r .. ': ' .. tostring(err) .. '\nexpected: ' .. want)
end
fails(function() dist.all_reduce(v100.ones({r == 0 and 4 or 3})) end,
  'all_reduce: the ranks pass different element counts, 3 to 4')
fails(function() dist.all_reduce(v100.ones({2}, {dtype = r == 0 and 'f32' or 'f64'})) end,
  'all_reduce: the ranks pass different dtypes')
fails(function() dist.all_reduce(v100.ones({2}), {op = r == 0 and 'sum' or 'max'}) end,
  'the ranks pass different ops or roots')
fails(function()
  if r == 0 then dist.all_reduce(v100.ones({2})) else dist.broadcast(v100.ones({2})) end
end, 'the ranks are not all in the same collective')
local t = v100.full({2}, r + 1)
dist.all_reduce(t)
local n = dist.size()
assert(t:totable()[1] == n * (n + 1) / 2, 'an agreeing collective runs')
dist.barrier()
print('rank ' .. r .. ' check ok')
