-- tests/mpi/test_data_workers.lua: data.ImageLoader's default worker count under mpirun -np 2
-- and 3: the node's cores are divided among its local ranks (at most 16 each, at least 1), so
-- the ranks of one node do not each start a thread per core.
local T = require 'testlib'
local v100 = require 'v100'
local dist = require 'v100.dist'
local data = require 'v100.data'

local r = T.mpi_start()

T.test('default workers = cores / local ranks, in [1, 16]', function()
  local dir = T.tmpdir()
  os.execute("mkdir -p '" .. dir .. "/a'")
  local img = (v100.rand({ 8, 8, 3 }) * 255):floor():to('u8')
  data.encode_jpeg(img, dir .. '/a/0.jpg')
  local l <close> = data.ImageLoader(data.ImageFolder(dir), { batch_size = 1, transform = 'none', size = 8 })
  local p = io.popen('nproc')
  local cores = tonumber(p:read('l'))
  p:close()
  local want = math.max(1, math.min(16, cores // dist.local_size()))
  T.eq(l.workers, want, string.format('rank %d: %d cores, %d local ranks', r, cores, dist.local_size()))
  local explicit <close> = data.ImageLoader(data.ImageFolder(dir), { batch_size = 1, transform = 'none', size = 8, workers = 3 })
  T.eq(explicit.workers, 3, 'an explicit count is kept')
  os.execute("rm -rf '" .. dir .. "'")
end)

T.run()
