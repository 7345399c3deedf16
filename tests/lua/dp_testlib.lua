-- tests/lua/dp_testlib.lua: what the DataParallel tests share (tests/mpi/test_data_parallel.lua,
-- tests/mpi/test_zero.lua, tests/mpi/test_checkpoint.lua): their start (M.start), a 3-layer
-- tanh MLP class, a setup whose initial parameters differ between ranks (DataParallel must
-- broadcast rank 0's) on data that is the same on every rank, a reference copy of a model, and a
-- rank's shard of a batch.
local v100 = require 'v100'
local nn = require 'v100.nn'

local M = {}

-- An MLP class d1 -> d2 -> d3 -> d4 with tanh between the layers.
function M.mlp(name, d1, d2, d3, d4)
  local MLP = nn.Module:extend(name)
  function MLP:init()
    self.fc1 = nn.Linear(d1, d2)
    self.fc2 = nn.Linear(d2, d3)
    self.fc3 = nn.Linear(d3, d4)
  end
  function MLP:forward(x) return self.fc3(self.fc2(self.fc1(x):tanh()):tanh()) end
  return MLP
end

-- The start every DataParallel test under mpirun shares: T.mpi_start(), the test's MLP class d1 -> d2 -> d3 -> d4 (named name) and, for a global batch
-- of B rows, setup(seed) (M.setup for this rank) and copy_of(model) (M.copy_of).
-- Returns rank, size, MLP, setup, copy_of.
function M.start(T, name, B, d1, d2, d3, d4)
  local r, n = T.mpi_start()
  local MLP = M.mlp(name, d1, d2, d3, d4)
  local function setup(seed) return M.setup(MLP, seed, r, B, d1, d4) end
  local function copy_of(model) return M.copy_of(MLP, model) end
  return r, n, MLP, setup, copy_of
end

-- model (seeded per rank), x [B, d_in] and y [B, d_out] (seeded alike on every rank)
function M.setup(MLP, seed, rank, B, d_in, d_out)
  v100.manual_seed(seed + 1000 * rank)
  local model = MLP()
  v100.manual_seed(seed)
  local x, y = v100.randn({ B, d_in }), v100.randn({ B, d_out })
  return model, x, y
end

function M.copy_of(MLP, model)
  local ref = MLP()
  local src = model:parameters()
  v100.no_grad(function()
    for i, p in ipairs(ref:parameters()) do p:copy_(src[i]) end
  end)
  return ref
end

-- rows idx * m + 1 .. (idx + 1) * m of t, m = rows / parts (idx 0-based)
function M.shard(t, parts, idx)
  -- an uneven split would drop rows and compare against the wrong reference
  assert(t.shape[1] % parts == 0, string.format('dp_testlib.shard: %d rows do not split into %d parts', t.shape[1], parts))
  local m = t.shape[1] // parts
  return t:narrow(1, idx * m + 1, m)
end

-- After a skipped AMP step: one clean scaled step on this rank's (xs, ys) moves fc1's weight
-- away from `before`, and every rank holds the same weight afterwards.
function M.clean_amp_step(T, dist, model, before, dp, opt, scaler, xs, ys)
  scaler:backward(nn.F.mse_loss(dp(xs), ys))
  dp:finish()
  scaler:step(opt)
  scaler:update()
  T.ok(not T.close(model.fc1.weight:sum():item(), before:sum():item(), 1e-9, 1e-9), 'a clean step moved the weights')
  local g = dist.all_gather(model.fc1.weight:reshape({ 1, -1 }))
  local r = dist.rank()
  T.allclose(g:narrow(1, r + 1, 1), g:narrow(1, 1, 1), 0, 0, 'ranks agree after the clean step')
end

return M
