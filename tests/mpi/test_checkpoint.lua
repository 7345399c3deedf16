-- tests/mpi/test_checkpoint.lua: v100.checkpoint across rank counts, under `mpirun -np 2` and
-- `-np 3` (label mpi). A DataParallel model with a plain SGD and one with ZeRO-1 train on their
-- shards and save (ckpt.save is collective; rank 0 writes). Every rank loads the checkpoint
-- back; a child process of rank 0 (world size 1, no launcher variables) loads it into a plain
-- model and optimizer and saves it again: that copy, written by 1 rank, holds the same tensors
-- bit for bit and loads into ZeRO-1 on N ranks with the same full optimizer state, after which
-- one more step on both sides gives the same parameters. N -> 1 -> N covers N -> M.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.F
local optim = require 'v100.optim'
local dist = require 'v100.dist'
local ckpt = require 'v100.checkpoint'
local fs = require('v100.core')._ckpt

local DPT = require 'dp_testlib'
local B = 12
local r, n, MLP = DPT.start(T, 'CkMLP', B, 5, 7, 4, 3)
local SGD = { lr = 0.1, momentum = 0.9 }

-- one directory for all ranks: rank 0's pid
local pid = v100.tensor({ fs.pid() }, { dtype = 'f64' })
dist.broadcast(pid, { src = 0 })
local ROOT = string.format('%s/v100lua_mpi_checkpoint_%d_np%d', os.getenv('TMPDIR') or '/tmp', math.tointeger(pid:item()), n)
if r == 0 then
  fs.remove_tree(ROOT)
  v100.io.makedirs(ROOT)
end
dist.barrier()

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local nolaunch = 'env -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE -u SLURM_PROCID -u RANK -u WORLD_SIZE '

-- Rank 0 runs a world-size-1 v100lua that loads src into a plain MLP and SGD and saves it to dst.
local CHILD = [[
local ckpt, optim, dist = require 'v100.checkpoint', require 'v100.optim', require 'v100.dist'
local MLP = require('dp_testlib').mlp('CkMLP', 5, 7, 4, 3)
local m = MLP()
local opt = optim.SGD(m:parameters(), {lr = 1, momentum = 0.5})
local c = ckpt.load(arg[1])
ckpt.restore(c, {model = m, optimizer = opt})
assert(opt.param_groups[1].lr == 0.1 and opt.param_groups[1].momentum == 0.9)
ckpt.save(arg[2], {model = m, optimizer = opt, epoch = c.epoch, step = c.step, state = c.state})
print('resaved on world size ' .. dist.size() .. ', saved by ' .. c.meta.world_size)
]]
local function resave_on_one(src, dst)
  local ok, out = true, ''
  if r == 0 then
    local file = ROOT .. '/child.lua'
    local f = assert(io.open(file, 'w'))
    f:write(CHILD)
    f:close()
    local p = assert(io.popen(nolaunch .. q(T.binary()) .. ' ' .. q(file) .. ' ' .. q(src) .. ' ' .. q(dst) .. ' 2>&1'))
    out = p:read('a')
    ok = p:close()
  end
  local flag = v100.tensor({ ok and 1 or 0 })
  dist.broadcast(flag, { src = 0 })
  T.ok(flag:item() == 1, 'the world-size-1 child loaded and saved' .. (r == 0 and ': ' .. out or ' (rank 0 has its output)'))
  if r == 0 then T.ok(out:find('resaved on world size 1, saved by ' .. n, 1, true) ~= nil, out) end
end

local function steps(k, dp, opt, x, y)
  local xs, ys = DPT.shard(x, n, r), DPT.shard(y, n, r)
  for _ = 1, k do
    opt:zero_grad()
    F.mse_loss(dp(xs), ys):backward()
    dp:finish()
    opt:step()
  end
end

local function files_equal(a, b, what)
  for _, f in ipairs { 'model.safetensors', 'training.safetensors' } do
    local ta, tb = v100.load_safetensors(a .. '/' .. f), v100.load_safetensors(b .. '/' .. f)
    local na = 0
    for k, t in pairs(ta) do
      na = na + 1
      T.ok(tb[k] ~= nil, what .. ': ' .. f .. ' ' .. k .. ' in both')
      T.tensor_eq(tb[k], t, what .. ': ' .. f .. ' ' .. k)
    end
    local nb = 0
    for _ in pairs(tb) do nb = nb + 1 end
    T.eq(nb, na, what .. ': ' .. f .. ' as many tensors')
  end
end

local function params_eq(a, b, what)
  local pb = b:parameters()
  for i, p in ipairs(a:parameters()) do T.tensor_eq(pb[i], p, what .. ' parameter ' .. i) end
end

local function momentum_eq(sd_a, sd_b, what)
  local c = 0
  for i, e in pairs(sd_a.state) do
    c = c + 1
    T.tensor_eq(sd_b.state[i].momentum_buffer:reshape({ -1 }), e.momentum_buffer:reshape({ -1 }), what .. ' momentum ' .. i)
    T.eq(sd_b.state[i].step, e.step, what .. ' step ' .. i)
  end
  T.eq(c, 6, what .. ': state for every parameter')
end

T.test('DataParallel + SGD: saved on N ranks, loaded on every rank and on 1', function()
  local model, x, y = DPT.setup(MLP, 31, r, B, 5, 3)
  local dp = dist.DataParallel(model)
  local opt = optim.SGD(model:parameters(), SGD)
  steps(2, dp, opt, x, y)
  local dir = ROOT .. '/dp'
  local path = ckpt.save(dir, { model = dp, optimizer = opt, epoch = 0, step = 2, state = { loader = { batch = 2 } } })
  T.eq(path, dir .. '/epoch0-step2')
  -- every rank reads the checkpoint rank 0 wrote (save returned after it was in place)
  local m2 = MLP()
  local opt2 = optim.SGD(m2:parameters(), { lr = 1 })
  local _, step, st = ckpt.restore(ckpt.load(dir), { model = m2, optimizer = opt2 })
  T.eq(step, 2)
  T.eq(st.loader.batch, 2)
  params_eq(model, m2, 'restored on rank ' .. r)
  momentum_eq(opt:state_dict(), opt2:state_dict(), 'restored on rank ' .. r)
  resave_on_one(path, ROOT .. '/dp1')
  if r == 0 then files_equal(path, ROOT .. '/dp1/epoch0-step2', 'N -> 1') end
  dp:remove()
  dist.barrier()
end)

T.test('ZeRO-1: the full state is saved (no rank count in it), N -> 1 -> N, then the same next step', function()
  local model, x, y = DPT.setup(MLP, 37, r, B, 5, 3)
  local dp = dist.DataParallel(model, { zero = 1 })
  local opt = dp:zero_optimizer('SGD', SGD)
  steps(2, dp, opt, x, y)
  local dir = ROOT .. '/zero'
  local path = ckpt.save(dir, { model = dp, optimizer = opt, epoch = 1, step = 2 })
  local full = opt:full_state_dict()
  local tr = v100.load_safetensors(path .. '/training.safetensors')
  for i, p in ipairs(model:parameters()) do
    local t = tr['optimizer.state.' .. i .. '.momentum_buffer']
    T.ok(t ~= nil, 'the momentum of parameter ' .. i .. ' whole')
    T.eq(t:numel(), p:numel(), 'parameter ' .. i .. ' unsharded')
    T.tensor_eq(t:reshape({ -1 }), full.state[i].momentum_buffer:reshape({ -1 }), 'the gathered momentum ' .. i)
  end

  resave_on_one(path, ROOT .. '/zero1')
  if r == 0 then files_equal(path, ROOT .. '/zero1/epoch1-step2', 'ZeRO N -> 1') end
  dist.barrier()

  -- 1 -> N: a fresh ZeRO-1 pair from the world-size-1 copy
  local m2 = DPT.setup(MLP, 99, r, B, 5, 3)
  local dp2 = dist.DataParallel(m2, { zero = 1 })
  local opt2 = dp2:zero_optimizer('SGD', { lr = 1 })
  local e = ckpt.restore(ckpt.load(ROOT .. '/zero1'), { model = dp2, optimizer = opt2 })
  T.eq(e, 1)
  params_eq(model, m2, '1 -> N')
  momentum_eq(full, opt2:full_state_dict(), '1 -> N')
  steps(1, dp, opt, x, y)
  steps(1, dp2, opt2, x, y)
  params_eq(model, m2, 'after one more step')
  dp:remove()
  dp2:remove()
end)

T.test("every rank's generator: restored per rank at the same rank count", function()
  local m = MLP()
  v100.manual_seed(500 + r) -- per-rank streams (dropout seeded by rank)
  v100.randn({ 3 })
  local dir = ROOT .. '/rng'
  ckpt.save(dir, { model = m, epoch = 0, step = 1 })
  local want = v100.randn({ 4 })
  v100.manual_seed(1)
  ckpt.restore(ckpt.load(dir), { model = m })
  T.tensor_eq(v100.randn({ 4 }), want, 'rank ' .. r .. ' continues its own stream')
  local meta = ckpt.load(dir).meta
  T.eq(#meta.rng_ranks, n)
  T.eq(meta.rng_ranks[r + 1].seed, 500 + r)
  -- without the generator: rng = false leaves it alone
  v100.manual_seed(7)
  local a = v100.randn({ 2 })
  v100.manual_seed(7)
  ckpt.restore(ckpt.load(dir), { model = m, rng = false })
  T.tensor_eq(v100.randn({ 2 }), a, 'rng = false')
end)

T.test('a save rank 0 cannot write fails on every rank', function()
  local m = MLP()
  -- a directory below a file: mkdir fails on rank 0; the others hear of it
  local blocker = ROOT .. '/a-file'
  if r == 0 then io.open(blocker, 'w'):close() end
  local msg = T.raises(function() ckpt.save(blocker .. '/ck', { model = m }) end)
  if r == 0 then T.ok(msg:find(blocker, 1, true) ~= nil and msg:find('not a directory', 1, true) ~= nil, msg)
  else T.ok(msg:find('rank 0 failed to write the checkpoint', 1, true) ~= nil, msg) end
  dist.barrier()
end)

dist.barrier()
if r == 0 then fs.remove_tree(ROOT) end
T.run()
