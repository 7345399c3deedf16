-- tests/mpi/launch_pipeline.lua: recipes/examples/pipeline.lua run as a user runs it, under
-- mpirun (label mpi; V100_MPIEXEC names mpirun): 2 ranks train and print the loss and the test
-- accuracy (rank 1); 3 ranks, or a run without mpirun, end non-zero with the reason.
local T = require 'testlib'

local exe = T.binary()
local mpiexec = os.getenv('V100_MPIEXEC') or 'mpirun'
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function run(cmd)
  local p = assert(io.popen('timeout 60 ' .. cmd .. ' 2>&1'))
  local out = p:read('a')
  local _, _, code = p:close()
  return out, code
end
local function job(np, args)
  return run(string.format('%s --allow-run-as-root --oversubscribe -np %d %s recipes/examples/pipeline.lua %s',
    q(mpiexec), np, q(exe), args))
end

T.test('2 ranks: the loss goes down, a test accuracy line', function()
  local out, code = job(2, '--steps 40 --log-every 10 --schedule 1f1b')
  T.eq(code, 0, out)
  local first = tonumber(out:match('step 1 loss ([%d.]+)'))
  local last = tonumber(out:match('step 40 loss ([%d.]+)'))
  T.ok(first and last and last < 0.8 * first, 'loss from step 1 to 40: ' .. out)
  local acc = tonumber(out:match('test accuracy: ([%d.]+)'))
  T.ok(acc and acc > 0.5, 'test accuracy above chance: ' .. out)
  T.ok(out:find('1f1b schedule, 4 micro-batches of 16', 1, true), out)
end)

T.test('3 ranks are refused, non-zero', function()
  local out, code = job(3, '--steps 2')
  T.ok(code ~= 0 and code ~= 124, 'non-zero, not the timeout (code ' .. tostring(code) .. '): ' .. out)
  T.ok(out:find('needs exactly 2 ranks (one per stage), got world size 3', 1, true), out)
end)

T.test('without mpirun: refused, non-zero', function()
  local out, code = run('env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u SLURM_PROCID -u RANK -u WORLD_SIZE ' .. q(exe) ..
    ' recipes/examples/pipeline.lua')
  T.ok(code ~= 0, 'non-zero: ' .. out)
  T.ok(out:find('got world size 1: launch with mpirun -np 2', 1, true), out)
end)

T.run()
