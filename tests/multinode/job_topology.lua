-- tests/multinode/job_topology.lua: each rank reports, as one JSON line, what it learnt of where it
-- runs: dist's rank/local rank/local size/host, is_main and is_local_main, its CPU threads and a
-- data loader's default worker count (the node's cores split among the node's ranks), a variable
-- forwarded by mpirun -x, and how many of the job's files in /tmp it sees (its node's only: every
-- host has its own /tmp). Run by launch_topology.lua.
local v100 = require 'v100'
local dist = require 'v100.dist'
local data = require 'v100.data'
dist.init()
local i = dist.info()
local tag = arg[1] or 'job'

-- a one-image folder in this rank's /tmp for a loader with the default workers
local dir = string.format('/tmp/vlmn-%s-r%d', tag, i.rank)
os.execute("rm -rf '" .. dir .. "' && mkdir -p '" .. dir .. "/a'")
data.encode_jpeg((v100.rand({ 8, 8, 3 }) * 255):floor():to('u8'), dir .. '/a/0.jpg')
local l <close> = data.ImageLoader(data.ImageFolder(dir), { batch_size = 1, transform = 'none', size = 8 })
dist.barrier() -- every rank's folder exists before any rank counts them
local p = io.popen("ls -d /tmp/vlmn-" .. tag .. "-r* | wc -l")
local seen = tonumber(p:read('l'))
p:close()
local np = io.popen('nproc')
local cores = tonumber(np:read('l'))
np:close()
local r = {
  rank = i.rank, size = i.size, local_rank = i.local_rank, local_size = i.local_size, host = i.host,
  launcher = i.launcher, is_main = dist.is_main(), is_local_main = dist.is_local_main(),
  threads = v100.get_num_threads(), workers = l.workers, cores = cores, probe = os.getenv('V100LUA_MN_PROBE') or '',
  unforwarded = os.getenv('V100LUA_MN_UNFORWARDED') or '', tmp_seen = seen,
}
dist.print(v100.io.json_encode(r), { all = true })
dist.barrier()
os.execute("rm -rf '" .. dir .. "'")
