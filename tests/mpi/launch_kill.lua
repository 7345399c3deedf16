-- tests/mpi/launch_kill.lua: a rank killed with SIGKILL ends the job non-zero, without a hang
-- (label mpi; V100_MPIEXEC names mpirun). Runs job_kill.lua under mpirun with 2 and 3 ranks:
-- rank 1 kills itself while the others are blocked in a collective, an async wait, a recv, or a
-- ZeRO-1 DataParallel step; mpirun must end the job within the 60 s limit, with a non-zero code
-- and its report of the signal, and no survivor may get past the operation.
local T = require 'testlib'

local exe = T.binary()
local mpiexec = os.getenv('V100_MPIEXEC') or 'mpirun'
local here = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or 'tests/mpi'
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function job(np, where)
  local t0 = os.time()
  local p = assert(io.popen(string.format('timeout 60 %s --allow-run-as-root --oversubscribe -np %d %s %s %s 2>&1',
    q(mpiexec), np, q(exe), q(here .. '/job_kill.lua'), where)))
  local out = p:read('a')
  local _, _, code = p:close()
  return out, code, os.time() - t0
end

for _, np in ipairs({2, 3}) do
  for _, where in ipairs({'allreduce', 'wait', 'recv', 'zero'}) do
    T.test(string.format('-np %d: SIGKILL of rank 1 in %s ends the job non-zero', np, where), function()
      local out, code, secs = job(np, where)
      T.ok(code ~= 0 and code ~= 124, 'non-zero, not the 60 s timeout (code ' .. tostring(code) .. '): ' .. out)
      T.ok(out:find('rank 1 (pid ', 1, true), 'rank 1 reached the kill: ' .. out)
      T.ok(out:find('signal 9', 1, true), 'mpirun reports the signal: ' .. out)
      T.ok(not out:find('got past', 1, true), 'no rank finished: ' .. out)
      T.ok(secs < 30, 'ends quickly (' .. secs .. ' s)')
    end)
  end
end

T.run()
