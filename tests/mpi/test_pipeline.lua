-- tests/mpi/test_pipeline.lua: recipes/examples/pipeline.lua (a two-stage MLP pipeline over
-- dist.send/recv) under `mpirun -np 2` and `-np 3` (label mpi). With 2 ranks it trains a few
-- steps under both schedules: the loss goes down, and rank 0's first stage, rank 1's second stage
-- and the losses equal the same MLP trained in this process on the same micro-batches (fp32
-- rounding). With 3 ranks every rank refuses, with the message, before any communication.
local T = require 'testlib'
local dist = require 'v100.dist'

dist.init()
local r, n = dist.rank(), dist.size()
local P = dofile('recipes/examples/pipeline.lua')

if n ~= 2 then
  T.test('a world size other than 2 is refused on every rank', function()
    T.raises(function() P.train_pipeline(P.config{steps = 1}) end,
      'pipeline: needs exactly 2 ranks (one per stage), got world size ' .. n .. ': launch with mpirun -np 2')
  end)
  T.run()
end

local function mean(t, i, j)
  local s = 0
  for k = i, j do s = s + t[k] end
  return s / (j - i + 1)
end

for _, sched in ipairs({'gpipe', '1f1b'}) do
  T.test(sched .. ': 20 steps equal one process on the same micro-batches; the loss goes down', function()
    local cfg = P.config{steps = 20, schedule = sched, micro = 4, batch = 32}
    local res = P.train_pipeline(cfg)
    local ref = P.train_single(cfg)
    T.eq(res.rank, r)
    local mine, theirs = res.stage:named_parameters(), ref.stages[r + 1]:named_parameters()
    T.eq(#mine, #theirs, 'stage ' .. r .. ' parameters')
    for i, e in ipairs(mine) do
      T.allclose(e[2], theirs[i][2], 1e-5, 1e-5, sched .. ': stage ' .. (r + 1) .. ' ' .. e[1])
    end
    if r == 1 then
      T.eq(#res.losses, 20)
      for s = 1, 20 do T.close(res.losses[s], ref.losses[s], 1e-5, 1e-6, sched .. ': loss of step ' .. s) end
      T.ok(mean(res.losses, 16, 20) < 0.8 * mean(res.losses, 1, 5),
        string.format('the loss goes down: %.4f -> %.4f', mean(res.losses, 1, 5), mean(res.losses, 16, 20)))
      T.close(res.accuracy, ref.accuracy, 0, 1e-9, 'the same test accuracy')
      T.ok(res.accuracy > 0.5, 'better than chance (4 classes): ' .. res.accuracy)
    else
      T.eq(#res.losses, 0, 'rank 0 has no loss')
      T.eq(res.accuracy, nil)
    end
  end)
end

T.test('the two schedules give the same parameters', function()
  local a = P.train_pipeline(P.config{steps = 3, schedule = 'gpipe', micro = 8})
  local b = P.train_pipeline(P.config{steps = 3, schedule = '1f1b', micro = 8})
  local bp = b.stage:parameters()
  for i, p in ipairs(a.stage:parameters()) do T.allclose(p, bp[i], 1e-6, 1e-6, 'parameter ' .. i) end
end)

T.test('configuration errors', function()
  T.raises(function() P.config{batch = 30, micro = 4} end, 'the batch (30) must be a multiple of the micro-batches (4)')
  T.raises(function() P.config{schedule = 'zb'} end, "schedule must be 'gpipe' or '1f1b', got zb")
end)

T.run()
