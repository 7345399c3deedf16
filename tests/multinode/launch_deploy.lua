-- tests/multinode/launch_deploy.lua: the MPI Operator's launcher line (deploy/docker/entrypoint.sh
-- `launch`, which deploy/k8s/mpijob-*.yaml run) over the 2 test hosts, as in the pods: the ranks
-- from the hostfile the operator writes ($OMPI_MCA_orte_default_hostfile: 2 slots a host, so 4
-- ranks, -map-by slot: 0 and 1 on a, 2 and 3 on b), the V100LUA_* and NCCL_* variables forwarded,
-- the BERT cache on the image's default /tmp/v100lua-cache (node-local: each host makes its own),
-- a checkpoint in the shared folder (the pods' volume), and a second launch resuming from it.
local T = require 'testlib'
local mn = require 'mnlib'
local q = mn.q

local D = mn.shared_dir('deploy')
-- an install like the image's /opt/v100lua: bin/v100lua and recipes/
os.execute(string.format('mkdir -p %s/home/bin && ln -s %s %s/home/bin/v100lua && ln -s %s %s/home/recipes', q(D), q(mn.exe), q(D),
  q(io.popen('pwd'):read('l') .. '/recipes'), q(D)))

local function launch(args)
  return mn.sh(string.format('env -u V100LUA_CACHE V100LUA_HOME=%s OMPI_MCA_orte_default_hostfile=%s V100LUA_MN_PROBE=1 ' ..
    'NCCL_DEBUG=WARN V100LUA_MPIRUN_ARGS=--allow-run-as-root timeout 400 bash deploy/docker/entrypoint.sh launch %s',
    q(D .. '/home'), q(mn.hostfile), args))
end

local ARGS = 'bert --config tiny --batch-size 16 --eval-samples 64 --log-interval 1 --output none --checkpoint-dir ' ..
  q(D .. '/ck') .. ' --checkpoint-every 2'

T.test('entrypoint.sh launch bert: 4 ranks from the hostfile, the node-local cache made on each host', function()
  local out, code, secs = launch(ARGS .. ' --steps 2')
  T.eq(code, 0, out)
  T.ok(out:find('v100lua-entrypoint: mpirun -np 4 ', 1, true), 'the ranks from the hostfile:\n' .. out)
  for _, v in ipairs { 'V100LUA_HOME', 'V100LUA_CACHE', 'V100LUA_MN_PROBE', 'NCCL_DEBUG', 'PATH' } do
    T.ok(out:find('-x ' .. v .. ' ', 1, true), v .. ' forwarded:\n' .. out)
  end
  T.ok(out:find('--mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 5 --mca oob_tcp_keepalive_probes 3', 1, true),
    'the keepalives of tools/multinode.sh env (the ones launch_faults.lua tests):\n' .. out)
  T.ok(out:find('4 ranks', 1, true), out)
  local _, made = out:gsub('bert_prep: WordNet corpus', '')
  T.eq(made, 2, 'the corpus made once on each host:\n' .. out)
  local l = mn.lines_of(out, 2)
  T.ok(#l > 0 and l[1].host == mn.hosts[2] and l[1].text:find('/tmp/v100lua-cache', 1, true),
    'rank 2 (local rank 0 of host b) made its copy in the image\'s default cache:\n' .. out)
  print(string.format('      entrypoint.sh launch bert, 4 ranks / 2 hosts, 2 steps: %.1f s', secs))
end)

T.test('a second launch resumes from the checkpoint (entrypoint adds --resume)', function()
  local out, code = launch(ARGS .. ' --steps 3')
  T.eq(code, 0, out)
  T.ok(out:find(' --resume', 1, true) and out:find('resumed at step 2', 1, true), out)
  T.ok(out:find('step 3/3', 1, true), out)
end)

T.run()
os.execute('rm -rf ' .. q(D))
