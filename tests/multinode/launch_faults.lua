-- tests/multinode/launch_faults.lua: faults of a job over two hosts (4 ranks, --map-by node: 1 and 3
-- on host b). Each must end every rank on both hosts, non-zero, quickly, and say what happened:
--   a Lua error on rank 1 (host b): its "[rank 1 b]" line, the ranks on a waiting in a barrier;
--   host b dies (SIGKILL to every process in its namespace, its sshd and Open MPI's daemon too)
--   while the job all-reduces: mpirun ends within V100LUA_DIST_TIMEOUT (forwarded with -x), then the
--   host is started again for the tests after this one;
--   host b cut off the network (its link down, its processes alive) while the job all-reduces:
--   with the keepalives of multinode.sh env and entrypoint.sh (10 + 3 x 5 s) mpirun learns it lost
--   b's daemon and ends the job, and b's daemon ends b's ranks. V100LUA_DIST_TIMEOUT (60 s here,
--   600 by default) must stay above the keepalives' 25 s: a rank that times out first calls
--   MPI_Abort, whose message to b's daemon then waits in TCP's retransmissions (~15 min) and holds
--   the keepalives off (measured: mpirun still there after 60 s with a 15 s timeout);
--   all_reduce of 1,000 floats on ranks 0-2 and 1,000,000 on rank 3 (host b) with
--   V100LUA_DIST_CHECK=1: the same message on every rank, on both hosts.
local T = require 'testlib'
local mn = require 'mnlib'
local v100 = require 'v100'

local b = mn.hosts[2]

T.test('a Lua error on rank 1 (host ' .. b .. ') ends every rank on both hosts', function()
  local out, code, secs = mn.mpirun{ np = 4, args = mn.q('tests/mpi/job_fail_rank1.lua') .. ' error', timeout = 60 }
  T.ok(code ~= 0 and code ~= 124, string.format('non-zero, no hang (code %s, %.1f s):\n%s', tostring(code), secs, out))
  T.ok(secs < 30, string.format('ends quickly (%.1f s)', secs))
  T.ok(out:find('%[rank 1 ' .. b .. '%] [^\n]*rank 1 fails on purpose'), 'the error with the rank and host of its rank:\n' .. out)
  T.ok(not out:find('got past the collective', 1, true), 'no rank got past the barrier:\n' .. out)
end)

T.test('host ' .. b .. ' dies (SIGKILL to all its processes) while the job all-reduces', function()
  local timeout = 20
  local t0 = v100.io.time()
  local job = mn.loop_job('kill', timeout)
  T.ok(job.started, 'the job started: ' .. select(3, job.finish(0)))
  local t_kill = v100.io.time()
  local kout, kcode = mn.sh('bash ' .. mn.q(mn.tool) .. ' kill ' .. b)
  T.eq(kcode, 0, 'kill ' .. b .. ': ' .. kout)
  local ended, rc, out = job.finish(60)
  local secs = v100.io.time() - t_kill
  T.ok(ended, 'mpirun ended (' .. secs .. ' s after the kill):\n' .. out)
  T.ok(rc and rc ~= 0 and rc ~= 124, 'non-zero and no hang, code ' .. tostring(rc) .. ':\n' .. out)
  T.ok(secs < timeout + 10, string.format('ended %.1f s after the kill (V100LUA_DIST_TIMEOUT %d s)', secs, timeout))
  T.ok(not out:find('ended by itself', 1, true), out)
  print(string.format('      host %s killed: mpirun ended after %.1f s, exit %s (job ran %.1f s before)', b, secs, tostring(rc),
    t_kill - t0))
  -- host b again, for what follows (its sshd died with it)
  local rout, rcode = mn.sh('bash ' .. mn.q(mn.tool) .. ' restart ' .. b)
  T.eq(rcode, 0, 'restart ' .. b .. ': ' .. rout)
  local hout, hcode = mn.sh('ssh -F ' .. mn.q(os.getenv('V100LUA_MN_STATE') .. '/ssh_config') .. ' ' .. b .. ' hostname')
  T.eq(hcode, 0, hout)
  T.eq(hout, b .. '\n', 'host ' .. b .. ' answers again')
  os.execute('rm -rf ' .. mn.q(job.dir))
end)

T.test('host ' .. b .. ' cut off the network (its link down) while the job all-reduces: ended within the keepalives', function()
  T.eq(os.getenv('OMPI_MCA_oob_tcp_keepalive_time'), '10', 'the keepalives of multinode.sh env and entrypoint.sh')
  local job = mn.loop_job('cut', 60)
  T.ok(job.started, 'the job started')
  local t_cut = v100.io.time()
  local cout, ccode = mn.sh('bash ' .. mn.q(mn.tool) .. ' cut ' .. b)
  T.eq(ccode, 0, cout)
  local _, rc, out = job.finish(60)
  local secs = v100.io.time() - t_cut
  -- the processes left on b once mpirun is gone: Open MPI's daemon there ends its ranks
  local left = ''
  for _ = 1, 100 do
    left = mn.sh('bash ' .. mn.q(mn.tool) .. ' ps ' .. b .. " | grep -E ' (v100lua|orted)$' || true")
    if left == '' then break end
    os.execute('sleep 0.1')
  end
  mn.sh('bash ' .. mn.q(mn.tool) .. ' mend ' .. b)
  T.ok(rc and rc ~= 0 and rc ~= 124, 'mpirun ended non-zero, code ' .. tostring(rc) .. ' after ' .. secs .. ' s:\n' .. out)
  T.ok(secs < 45, string.format('ended %.1f s after the cut (keepalives 10 + 3 x 5 s)', secs))
  T.ok(out:find('lost communication with a remote daemon', 1, true), 'Open MPI says which host it lost:\n' .. out)
  T.eq(left, '', 'no rank or daemon left on ' .. b .. ' (they end when they lose mpirun)')
  print(string.format('      host %s cut off: mpirun ended after %.1f s, exit %s', b, secs, tostring(rc)))
  os.execute('rm -rf ' .. mn.q(job.dir))
end)

-- whatever the test above left running when it failed (its ranks and mpirun: one pid namespace)
os.execute("pkill -9 -f 'job_loop[.]lua' 2>/dev/null")

T.test('mismatched element counts across hosts with V100LUA_DIST_CHECK=1: one message on every rank', function()
  local out, code, secs = mn.mpirun{ np = 4, env = { V100LUA_DIST_CHECK = 1 }, args = mn.q('tests/mpi/job_hang.lua') .. ' count',
    timeout = 60 }
  T.ok(code ~= 0 and code ~= 124, string.format('non-zero, no hang (code %s, %.1f s):\n%s', tostring(code), secs, out))
  T.ok(secs < 30, string.format('ends quickly (%.1f s)', secs))
  for r = 0, 3 do
    local l = mn.lines_of(out, r)
    local found
    for _, x in ipairs(l) do
      if x.text:find('all_reduce: the ranks pass different element counts, 1000 to 1000000 (this rank ' .. r, 1, true) then found = x end
    end
    T.ok(found, 'rank ' .. r .. ' names the mismatch:\n' .. out)
    T.eq(found.host, mn.host_of(r), 'rank ' .. r .. ' on ' .. mn.host_of(r))
  end
  T.ok(not out:find('Segmentation fault') and not out:find('signal 11'), out)
end)

T.run()
