-- tests/mpi/launch_abort.lua: runs mpirun itself (label `mpi`; V100_MPIEXEC names mpirun) on
-- job_fail_rank1.lua: a rank that fails by a Lua error, os.exit(3) or SIGKILL while rank 0 waits
-- in a barrier ends the whole job non-zero, quickly, with the "[rank 1 host]" prefix on the
-- error; V100LUA_DIST_CHECK's agreement check (job_check.lua); and the launcher check:
-- torchrun-style variables without an MPI launch are refused.
local T = require 'testlib'

local exe = T.binary()
local mpiexec = os.getenv('V100_MPIEXEC') or 'mpirun'
local here = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or 'tests/mpi'
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- Runs cmd with a 60 s limit (timeout's status 124 marks a hang); returns the output (stderr folded in), exit code, seconds taken.
local function run(cmd)
  local t0 = os.time()
  local p = assert(io.popen('timeout 60 ' .. cmd .. ' 2>&1'))
  local out = p:read('a')
  local _, _, code = p:close()
  return out, code, os.time() - t0
end

local function job(how)
  return run(string.format('%s --allow-run-as-root --oversubscribe -np 2 %s %s %s', q(mpiexec), q(exe),
    q(here .. '/job_fail_rank1.lua'), how))
end

T.test('a Lua error on rank 1 aborts the job', function()
  local out, code, secs = job('error')
  T.ok(code ~= 0 and code ~= 124, 'non-zero, and not killed by the timeout (code ' .. tostring(code) .. '): ' .. out)
  T.ok(secs < 30, 'ends quickly (' .. secs .. ' s)')
  T.ok(out:find('[rank 1 ', 1, true), 'the rank prefix: ' .. out)
  T.ok(out:find('%[rank 1 [^%]]+%] [^\n]*rank 1 fails on purpose'), 'prefix with host on the message: ' .. out)
  T.ok(not out:find('got past the collective', 1, true), 'rank 0 did not finish: ' .. out)
  -- (Open MPI's "MPI_ABORT was invoked" banner is not checked: its help-message aggregation
  -- sometimes fails to print it, "ORTE_ERROR_LOG: Out of resource in show_help.c".)
end)

T.test('os.exit(3) on rank 1 aborts the job', function()
  local out, code, secs = job('exit')
  T.ok(code ~= 0 and code ~= 124, 'non-zero (code ' .. tostring(code) .. '): ' .. out)
  T.ok(secs < 30, 'ends quickly (' .. secs .. ' s)')
  T.ok(not out:find('got past the collective', 1, true), out)
end)

T.test('SIGKILL of rank 1 ends the job', function()
  local out, code, secs = job('kill')
  T.ok(code ~= 0 and code ~= 124, 'non-zero, not the timeout (code ' .. tostring(code) .. '): ' .. out)
  T.ok(out:find('signal 9', 1, true), 'mpirun saw the kill: ' .. out)
  T.ok(secs < 30, 'ends quickly (' .. secs .. ' s)')
  T.ok(not out:find('got past the collective', 1, true), out)
end)

T.test('a job where every rank succeeds exits 0', function()
  local out, code = job('none')
  T.eq(code, 0, out)
  T.ok(out:find('rank 0 got past the collective', 1, true) and out:find('rank 1 got past the collective', 1, true), out)
end)

T.test('V100LUA_DIST_CHECK=1: ranks that disagree on a collective fail alike instead of hanging', function()
  local out, code = run(string.format('env V100LUA_DIST_CHECK=1 %s --allow-run-as-root --oversubscribe -np 2 %s %s',
    q(mpiexec), q(exe), q(here .. '/job_check.lua')))
  T.eq(code, 0, out)
  T.ok(out:find('rank 0 check ok', 1, true) and out:find('rank 1 check ok', 1, true), out)
end)

T.test('launcher variables that MPI contradicts are an error naming both', function()
  local out, code = run('env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u SLURM_PROCID RANK=1 WORLD_SIZE=2 ' .. q(exe) ..
    [[ -e "require('v100.dist').init()"]])
  T.eq(code, 1, out)
  T.ok(out:find('dist.init: the launcher (torchrun) says RANK=1 but MPI says rank 0', 1, true), out)
  T.ok(out:find('[rank 1 ', 1, true), 'RANK with WORLD_SIZE gives the prefix: ' .. out)
end)

T.run()
