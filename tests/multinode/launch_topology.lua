-- tests/multinode/launch_topology.lua: where each rank of a job over two hosts thinks it runs, and
-- what it is given for it, checked against where mpirun put it: rank, local rank and local size,
-- the hostname in the "[rank N host]" prefix, is_main (one in the job) and is_local_main (one per
-- host), the CPU threads and the data loader's workers (the host's cores split among the host's
-- ranks), variables forwarded by -x (and one not forwarded, which only the ranks on mpirun's host
-- inherit), and a /tmp of each host's own.
local T = require 'testlib'
local mn = require 'mnlib'
local v100 = require 'v100'

local function reports(out)
  local by = {}
  for host, js in out:gmatch('%[rank %d+ ([^%]]+)%] ({[^\n]*})') do
    local r = v100.io.json_decode(js)
    T.eq(r.host, host, 'the prefix names the host dist.info() reports')
    by[r.rank] = r
  end
  return by
end

local function check(layout, np, out, code)
  T.eq(code, 0, layout .. ': the job failed:\n' .. out)
  local by = reports(out)
  local per_host = {}
  for r = 0, np - 1 do
    local x = by[r]
    T.ok(x, layout .. ': no report from rank ' .. r .. ':\n' .. out)
    per_host[x.host] = per_host[x.host] or {}
    table.insert(per_host[x.host], x)
  end
  local mains = 0
  for host, list in pairs(per_host) do
    table.sort(list, function(a, b) return a.rank < b.rank end)
    local local_mains = 0
    for k, x in ipairs(list) do
      T.eq(x.size, np)
      T.eq(x.launcher, 'Open MPI')
      T.eq(x.local_size, #list, string.format('%s: rank %d on %s: local size = the ranks on its host', layout, x.rank, host))
      -- Open MPI numbers a host's ranks in rank order
      T.eq(x.local_rank, k - 1, string.format('%s: rank %d on %s: local rank', layout, x.rank, host))
      T.eq(x.is_main, x.rank == 0)
      T.eq(x.is_local_main, x.local_rank == 0)
      if x.is_main then mains = mains + 1 end
      if x.is_local_main then local_mains = local_mains + 1 end
      local share = math.max(1, x.cores // #list)
      T.eq(x.threads, share, string.format('%s: rank %d on %s: threads = %d cores / %d local ranks', layout, x.rank, host, x.cores, #list))
      T.eq(x.workers, math.min(16, share), layout .. ': loader workers on ' .. host)
      T.eq(x.probe, 'forwarded', layout .. ': -x reaches rank ' .. x.rank .. ' on ' .. host)
      T.eq(x.unforwarded, host == mn.host and 'inherited' or '',
        layout .. ': a variable without -x reaches only the ranks on mpirun\'s host (rank ' .. x.rank .. ' on ' .. host .. ')')
      T.eq(x.tmp_seen, #list, layout .. ': rank ' .. x.rank .. ' sees the /tmp files of its own host\'s ranks only')
    end
    T.eq(local_mains, 1, layout .. ': one local main on ' .. host)
  end
  T.eq(mains, 1, layout .. ': one main rank')
  return per_host
end

local env = { V100LUA_MN_PROBE = 'forwarded' }

T.test('4 ranks, --map-by node over 2 hosts: 2 + 2, ranks alternating', function()
  local out, code = mn.mpirun{ np = 4, env = env, args = mn.q(mn.here .. '/job_topology.lua') .. ' bynode',
    mpirun_args = {}, timeout = 120 }
  local per_host = check('bynode', 4, out, code)
  for r = 0, 3 do
    local l = mn.lines_of(out, r)
    T.eq(#l, 1, 'one line of rank ' .. r)
    T.eq(l[1].host, mn.host_of(r), 'rank ' .. r .. ' on host ' .. mn.host_of(r))
  end
  T.eq(#per_host[mn.hosts[1]], 2)
  T.eq(#per_host[mn.hosts[2]], 2)
end)

T.test('4 ranks as -H a:3,b:1: local sizes 3 and 1, the cores split per host', function()
  local out, code = mn.mpirun{ np = 4, H = mn.hosts[1] .. ':3,' .. mn.hosts[2] .. ':1', env = env,
    args = mn.q(mn.here .. '/job_topology.lua') .. ' uneven', timeout = 120 }
  local per_host = check('uneven', 4, out, code)
  T.eq(#per_host[mn.hosts[1]], 3)
  T.eq(#per_host[mn.hosts[2]], 1)
  T.eq(per_host[mn.hosts[2]][1].rank, 3, 'rank 3 alone on ' .. mn.hosts[2])
end)



T.run()
