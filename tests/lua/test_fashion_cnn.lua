-- tests/lua/test_fashion_cnn.lua: recipes/fashion_cnn.lua run as a user runs it, through the
-- binary, on the CPU: it must learn (test accuracy >= 0.85 on the first 2000 test images) and be
-- reproducible (two runs with the same seed print the same losses and accuracy).
--
-- The learning run (ACC_ARGS) is sized to take about 35 s of CPU time on 2 cores; measured test
-- accuracies on the 2000 images with these arguments: 0.8790, 0.8805, 0.8845, 0.8715 (seeds 1,
-- 2, 3, 5), so the threshold keeps a margin of 2 to 3.5 points; an untrained model scores about
-- 0.10. The reproducibility runs are short, since equality does not need a trained model.
local T = require 'testlib'
local data = require 'v100.data'

local ACC_THRESHOLD = 0.85
local ACC_ARGS = '--epochs 2 --train-subset 10000 --test-subset 2000 --width 16 --batch 32 --lr 0.05 --dropout 0 ' ..
  '--schedule cosine --seed 5 --device cpu'
local REPRO_ARGS = '--epochs 2 --train-subset 640 --test-subset 500 --width 8 --batch 64 --seed 11 --device cpu'

local have_data = io.open(data.FASHION_MNIST_ROOT .. '/t10k-labels-idx1-ubyte.gz', 'rb')
if have_data then have_data:close() end

local function run_recipe(args) return T.run_binary('recipes/fashion_cnn.lua ' .. args) end
local loss_lines = T.epoch_losses

if have_data then
  T.test('fashion_cnn: learns on a CPU subset', function()
    local out, ok = run_recipe(ACC_ARGS)
    T.ok(ok, 'recipe failed:\n' .. out)
    local acc = tonumber(out:match('\ntest accuracy: (0%.%d%d%d%d)\n?$'))
    T.ok(acc, 'no final "test accuracy: 0.xxxx" line in:\n' .. out)
    T.ok(acc >= ACC_THRESHOLD, string.format('accuracy %.4f is below %.2f:\n%s', acc, ACC_THRESHOLD, out))
    T.ok(out:match('images/s %d+'), 'no images/s in the epoch lines')
    local l = loss_lines(out)
    T.eq(#l, 2, 'two epoch lines')
    T.ok(tonumber(l[2]) < tonumber(l[1]), 'the loss decreases')
  end)

  T.test('fashion_cnn: two runs with the same seed print the same losses and accuracy', function()
    local out1, ok1 = run_recipe(REPRO_ARGS)
    T.ok(ok1, 'recipe failed:\n' .. out1)
    local out2, ok2 = run_recipe(REPRO_ARGS)
    T.ok(ok2, 'second run failed:\n' .. out2)
    local l1 = loss_lines(out1)
    T.eq(#l1, 2, 'two epoch lines')
    T.eq(loss_lines(out2), l1, 'losses of two runs with the same seed')
    T.eq(out2:match('test accuracy: (%S+)\n?$'), out1:match('test accuracy: (%S+)\n?$'))
    -- a different seed gives a different run (the seed is really used)
    local out3 = run_recipe(REPRO_ARGS:gsub('--seed 11', '--seed 12'))
    T.ok(loss_lines(out3)[1] ~= l1[1], 'seed 12 gives other losses than seed 11')
  end)
else
  print('Fashion-MNIST not installed (' .. data.FASHION_MNIST_ROOT .. '): recipe run skipped')
end

T.test('fashion_cnn: bad options are refused with a usage message', function()
  local out, ok = run_recipe('--epochs zero')
  T.ok(not ok, 'exit status should be non-zero')
  T.ok(out:find("option '--epochs' needs a positive integer, got 'zero'", 1, true), out)
  T.ok(out:find('^Usage: fashion_cnn.lua'), 'usage line first: ' .. out)
  out, ok = run_recipe('--bogus 1')
  T.ok(not ok and out:find("unknown option '--bogus'", 1, true), out)
  out, ok = run_recipe('--schedule linear')
  T.ok(not ok and out:find("option '--schedule' must be one of 'cosine', 'constant'", 1, true), out)
end)

T.run()
