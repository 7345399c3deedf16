-- tests/multinode/launch_suite.lua: every tests/mpi/test_*.lua (collectives, send/recv, DataParallel
-- and ZeRO-1 equal to one process with the same global batch, checkpoints, the logger, telemetry,
-- the pipeline, the loader's workers) as 4 ranks over 2 hosts (--map-by node: ranks 0 and 2 on a,
-- 1 and 3 on b), so every collective crosses the veth through Open MPI's TCP transport. $TMPDIR
-- is a shared folder (the tests' job folders, as a cluster file system); each host's /tmp is its
-- own. Each file's time is printed: the suite at 2 ranks on one host is the comparison.
local T = require 'testlib'
local mn = require 'mnlib'

local files = {}
local p = assert(io.popen('ls ' .. mn.q('tests/mpi') .. '/test_*.lua'))
for f in p:lines() do files[#files + 1] = f end
p:close()
T.ok(#files >= 8, 'the tests/mpi suite is found (' .. #files .. ' files)')

local tmp = mn.shared_dir('suite')
for _, f in ipairs(files) do
  T.test(f .. ' at 4 ranks over 2 hosts', function()
    local out, code, secs = mn.mpirun{ np = 4, env = { TMPDIR = tmp }, args = mn.q(f), timeout = 240 }
    T.eq(code, 0, f .. ' failed:\n' .. out)
    local passed, failed = 0, 0
    for r = 0, 3 do
      local text = out:match('%[rank ' .. r .. ' [^%]]+%] (%d+ passed, %d+ failed)')
      local pa, fa
      if text then pa, fa = text:match('(%d+) passed, (%d+) failed') end
      if pa then passed, failed = passed + tonumber(pa), failed + tonumber(fa) end
    end
    if passed == 0 then -- testlib prints its count without a prefix
      for pa, fa in out:gmatch('(%d+) passed, (%d+) failed') do passed, failed = passed + tonumber(pa), failed + tonumber(fa) end
    end
    T.ok(passed > 0 and failed == 0, string.format('%s: %d passed, %d failed', f, passed, failed))
    print(string.format('      %-36s %5.1f s, %d test results over 4 ranks', f, secs, passed))
  end)
end
T.run()
os.execute('rm -rf ' .. mn.q(tmp))
