-- tests/mpi/launch_recipe.lua: recipes/resnet50.lua under `mpirun -np 2` on the CPU (label mpi;
-- V100_MPIEXEC names mpirun): DataParallel training with the global batch split over the ranks,
-- metrics aggregated across them and printed and logged once (rank 0), and a checkpoint written
-- on 2 ranks resumed by one process.
local T = require 'testlib'
local v100 = require 'v100'
local data = require 'v100.data'

local have = io.open(data.FASHION_MNIST_ROOT .. '/t10k-labels-idx1-ubyte.gz', 'rb')
if not have then
  print('no Fashion-MNIST: skipped')
  T.run()
  return
end
have:close()

local exe = T.binary()
local mpiexec = os.getenv('V100_MPIEXEC') or 'mpirun'
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function sh(cmd)
  local p = assert(io.popen(cmd .. ' 2>&1'))
  local out = p:read('a')
  local _, _, code = p:close()
  return out, code
end

local d = T.tmpdir()
local acc2 -- the 2-rank run's final top-1
local ARGS = '--epochs 1 --train-subset 640 --val-subset 200 --batch-size 16 --log-interval 1 --seed 4'

T.test('-np 2: trains with the global batch split, metrics aggregated and logged once', function()
  local out, code = sh(string.format('timeout 250 %s --allow-run-as-root --oversubscribe -np 2 %s recipes/resnet50.lua %s ' ..
    '--log-dir %s --checkpoint-dir %s', q(mpiexec), q(exe), ARGS, q(d .. '/log'), q(d .. '/ck')))
  T.eq(code, 0, 'the job failed:\n' .. out)
  T.ok(out:find('2 ranks', 1, true), 'the header counts 2 ranks:\n' .. out)
  T.ok(out:find('batch 16 per rank (lr 0.05)', 1, true), 'lr scaled to the global batch 32 (0.4 * 32 / 256):\n' .. out)
  T.ok(out:find('1 epochs x 20 steps', 1, true), '640 images / (16 x 2) = 20 steps:\n' .. out)
  local _, n = out:gsub('\ntest accuracy: ', '')
  T.eq(n, 1, 'rank 0 alone prints the result')
  local f = assert(io.open(d .. '/log/metrics.jsonl'))
  local steps, val = {}, nil
  for line in f:lines() do
    local r = v100.io.json_decode(line)
    if r.split == 'train' then steps[#steps + 1] = r.step else val = r end
  end
  f:close()
  T.eq(#steps, 20, 'one train record per step, written once')
  T.eq(steps[20], 20)
  T.ok(val and val.top1 >= 0 and val.top1 <= 1, 'a validation record')
  local acc = tonumber(out:match('\ntest accuracy: (0%.%d+)'))
  acc2 = out:match('\ntest accuracy: (0%.%d+)')
  T.near(val.top1, acc, 1e-4, 'the logged top-1 is the printed one (over all 200 images)')
  -- 200 images split 100 / 100: top-1 is a multiple of 1 / 200.
  T.near(acc * 200, math.floor(acc * 200 + 0.5), 1e-6, 'a count over 200 images')
end)

T.test('a checkpoint written by 2 ranks is evaluated by one process', function()
  local out, ok = T.run_binary('recipes/resnet50.lua --val-subset 200 --evaluate --resume --checkpoint-dir ' .. q(d .. '/ck'))
  T.ok(ok, '--evaluate on 1 rank failed:\n' .. out)
  T.eq(out:match('\ntest accuracy: (0%.%d+)'), acc2, 'the same weights, the same 200 images, the same top-1:\n' .. out)
end)

T.test('a 2-rank checkpoint resumed by one process trains on (another rank count)', function()
  local out, ok = T.run_binary('recipes/resnet50.lua ' .. ARGS:gsub('%-%-epochs 1', '--epochs 2') ..
    ' --resume --checkpoint-dir ' .. q(d .. '/ck') .. ' --log-dir ' .. q(d .. '/log1'))
  T.ok(ok, 'resume on 1 rank failed:\n' .. out)
  T.ok(out:find('1 rank,', 1, true) and out:find('resumed at epoch 2 batch 0', 1, true), out)
  T.ok(out:find('2 epochs x 40 steps', 1, true), '640 / 16 = 40 steps on one rank:\n' .. out)
  T.ok(not out:find('epoch 1/2', 1, true) and out:find('\nepoch 2/2', 1, true), 'only epoch 2 runs:\n' .. out)
  local f = assert(io.open(d .. '/log1/metrics.jsonl'))
  local first
  for line in f:lines() do
    local r = v100.io.json_decode(line)
    if r.split == 'train' then first = first or r.step end
  end
  f:close()
  T.eq(first, 21, 'the step count goes on from the checkpoint (20 steps on 2 ranks)')
end)

os.execute('rm -rf ' .. q(d))
T.run()
