-- tests/mpi/test_log.lua: scripts/v100/obs/log.lua across ranks (mpirun -np 2 and -np 3): log.reduce
-- sums, averages and maxes with one all_reduce, top-k counts aggregate to the whole batch, and
-- a Logger with the default rank writes its files on rank 0 only.
local T = require 'testlib'
local v100 = require 'v100'
local dist = require 'v100.dist'
local log = require 'v100.log'

local r, n = T.mpi_start()

-- One directory for the job: rank 0's random number, broadcast; under $TMPDIR, which a job over
-- several hosts points at a folder they share (tests/multinode/launch_suite.lua).
local id = v100.tensor({r == 0 and math.random(1, 1 << 40) or 0}, {dtype = 'i64'})
dist.broadcast(id)
local dir = string.format('%s/v100_test_log_mpi_%d', os.getenv('TMPDIR') or '/tmp', id:item())

T.test('reduce: sum, avg, max across ranks; integers stay integers', function()
  local got = log.reduce({loss = 0.5 * (r + 1), n = r + 1, top1 = 2 * r})
  local sum_r1 = n * (n + 1) // 2 -- sum over ranks of r + 1
  T.eq(got.n, sum_r1)
  T.eq(math.type(got.n), 'integer')
  T.eq(got.loss, 0.5 * sum_r1)
  T.eq(got.top1, n * (n - 1))
  T.eq(log.reduce({x = r}, 'max').x, n - 1)
  T.eq(log.reduce({x = r}, 'avg').x, (n - 1) / 2)
  T.eq(log.reduce({x = r + 1}, 'prod').x, ({1, 2, 6, 24})[n])
end)

T.test('topk_correct counts of each rank add up to the whole batch', function()
  v100.manual_seed(7) -- the same batch on every rank; each takes its own rows
  local x = (v100.rand{12, 5} * 3):floor()
  local y = (v100.rand{12} * 5):floor():long()
  local whole = log.topk_correct(x, y, {1, 3})
  local rows = {}
  for i = r, 11, n do rows[#rows + 1] = i end
  local idx = v100.tensor(rows, {dtype = 'i64'})
  local mine = log.topk_correct(x:index_select(1, idx), y:index_select(1, idx), {1, 3})
  local tot = log.reduce({top1 = mine[1], top3 = mine[2], count = #rows})
  T.eq({tot.top1, tot.top3, tot.count}, {whole[1], whole[2], 12})
end)

T.test('Logger: only rank 0 writes (the default rank is dist.rank())', function()
  local lg = log.Logger{dir = dir}
  lg:log(1, {loss = 1.0}, {split = 'train'})
  lg:close()
  dist.barrier()
  local p = assert(io.popen("ls -A '" .. dir .. "' 2>/dev/null | wc -l"))
  local count = tonumber(p:read('a'))
  p:close()
  T.eq(count, 2, 'metrics.jsonl and one event file, from rank 0 alone')
  dist.barrier()
  if r == 0 then os.execute("rm -rf '" .. dir .. "'") end
end)

T.run()
