-- tests/lua/recipe_resnet50.lua: recipes/resnet50.lua run as a user runs it, on the CPU (label
-- `recipe`: minutes, left out of the sanitizer suite).
--   1. the no-option default: completes in under 5 minutes and reaches the accuracy README states;
--   2. SIGKILL in the middle of an epoch, then --resume: the logged loss curve continues exactly as
--      the uninterrupted run's, and the final weights are the same;
--   3. the JPEG path: Fashion-MNIST written as an ImageFolder by tools/fashion_to_imagefolder.lua,
--      trained and evaluated through the C loader, with metrics.jsonl and a TensorBoard event file
--      read back;
--   4. --evaluate of a checkpoint gives the accuracy the training run reported.
local T = require 'testlib'
local v100 = require 'v100'
local data = require 'v100.data'

-- Measured on the 2-core machine (2026-12-02): the default run printed test accuracy 0.8325 in
-- 54 s alone, with 1 and with 2 threads (an earlier build machine: 0.8345 in 148 s alone, 213 s
-- and 389 s with builds running beside it) (the run is deterministic: the same
-- accuracy each time). README states >= 0.80 in under 5 minutes.
local DEFAULT_ACC = 0.80
local DEFAULT_SECONDS = 300

local have_data = io.open(data.FASHION_MNIST_ROOT .. '/t10k-labels-idx1-ubyte.gz', 'rb')
if have_data then have_data:close() else
  print('no Fashion-MNIST (dataset-fashion-mnist): recipe tests skipped')
  T.run()
  return
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local tmpdir = T.tmpdir
local function run(args) return T.run_binary('recipes/resnet50.lua ' .. args) end
-- The file's bytes, or nil when it is not there (yet).
local function read_file(path)
  local ok, s = pcall(T.read_file, path)
  return ok and s or nil
end
-- The JSON lines of a metrics file, decoded; split = 'train' or 'val' keeps those only.
local function metrics(path, split)
  local out = {}
  for line in (read_file(path) or ''):gmatch('[^\n]+') do
    local r = v100.io.json_decode(line)
    if not split or r.split == split then out[#out + 1] = r end
  end
  return out
end

local SMALL = '--epochs 2 --train-subset 640 --val-subset 200 --batch-size 32 --log-interval 1 --seed 3'

T.test('the default run: under 5 minutes on the CPU, test accuracy >= 0.80', function()
  local t0 = v100.io.time()
  local out, ok = run('')
  local secs = v100.io.time() - t0
  T.ok(ok, 'the default run failed:\n' .. out)
  T.ok(out:find('device cpu', 1, true), 'the CPU configuration: ' .. out)
  local acc = tonumber(out:match('\ntest accuracy: (0%.%d+)\n'))
  T.ok(acc, 'no "test accuracy" line:\n' .. out)
  -- The accuracy is on Fashion-MNIST's test set (not a split of the training images), and says so.
  T.ok(out:find('12000 train / 2000 test images', 1, true), 'the header names the test set:\n' .. out)
  T.ok(out:find("\nevaluated on: the first 2000 of the 10000 images of Fashion-MNIST's test set (t10k)\ntest accuracy: ", 1, true),
    'the line before the accuracy names the images:\n' .. out)
  T.ok(acc >= DEFAULT_ACC, string.format('accuracy %.4f < %.2f:\n%s', acc, DEFAULT_ACC, out))
  T.ok(secs < DEFAULT_SECONDS, string.format('%.0f s, over %d s', secs, DEFAULT_SECONDS))
  print(string.format('  default run: test accuracy %.4f in %.0f s', acc, secs))
end)

T.test('SIGKILL mid-epoch, then --resume: the same loss curve and weights as an uninterrupted run', function()
  local d = tmpdir()
  -- The reference: uninterrupted, 2 epochs of 20 steps, a loss line every step.
  local out, ok = run(SMALL .. ' --log-dir ' .. q(d .. '/ref') .. ' --checkpoint-dir ' .. q(d .. '/refck'))
  T.ok(ok, 'reference run failed:\n' .. out)
  local ref = metrics(d .. '/ref/metrics.jsonl', 'train')
  T.eq(#ref, 40, 'one train record per step')
  -- Killed: checkpoints every 7 steps; SIGKILL as soon as step 30 (epoch 2, mid-epoch) is logged.
  local args = SMALL .. ' --checkpoint-every 7 --log-dir ' .. q(d .. '/a') .. ' --checkpoint-dir ' .. q(d .. '/ck')
  local res = T.kill_after('recipes/resnet50.lua ' .. args, d .. '/a.out', d .. '/a/metrics.jsonl', 30)
  T.ok(res:find('killed at', 1, true), 'the run was not killed mid-way: ' .. res .. (read_file(d .. '/a.out') or ''))
  local killed = metrics(d .. '/a/metrics.jsonl', 'train')
  T.ok(#killed >= 30 and #killed < 40, 'killed between steps 30 and 39, logged ' .. #killed)
  -- Resume into another log dir: the run continues after the last complete checkpoint, a
  -- multiple of 7 steps in epoch 2 (21, 28 or 35: one being written at the kill is not used).
  out, ok = run(args:gsub('/a\'', '/b\'') .. ' --resume')
  T.ok(ok, 'resume failed:\n' .. out)
  local e, k = out:match('resumed at epoch (%d+) batch (%d+)')
  T.ok(e, 'the header names where it resumed:\n' .. out)
  local at = (tonumber(e) - 1) * 20 + tonumber(k)
  T.ok(e == '2' and at % 7 == 0 and at <= #killed, 'resumed at a checkpoint of epoch 2 before the kill: step ' .. at)
  local resumed = metrics(d .. '/b/metrics.jsonl', 'train')
  T.eq(#resumed, 40 - at, 'steps ' .. (at + 1) .. '..40')
  for i, r in ipairs(resumed) do
    local want = ref[at + i]
    T.eq(r.step, want.step, 'step number')
    T.eq(r.loss, want.loss, 'the loss of step ' .. want.step .. ' (bitwise)')
    T.eq(r.lr, want.lr, 'the lr of step ' .. want.step)
  end
  -- The final checkpoints of both runs hold the same weights.
  local ckpt = require 'v100.checkpoint'
  local a = v100.load_safetensors(ckpt.latest(d .. '/refck') .. '/model.safetensors')
  local b = v100.load_safetensors(ckpt.latest(d .. '/ck') .. '/model.safetensors')
  local n = 0
  for name, t in pairs(a) do
    T.tensor_eq(b[name], t, name)
    n = n + 1
  end
  T.ok(n > 50, 'a whole ResNet-18 state dict (' .. n .. ' tensors)')
  -- --evaluate of the last checkpoint gives the accuracy that run printed last.
  local acc = out:match('\ntest accuracy: (0%.%d+)\n')
  local ev, eok = run('--val-subset 200 --evaluate --resume --checkpoint-dir ' .. q(d .. '/ck'))
  T.ok(eok, '--evaluate failed:\n' .. ev)
  T.eq(ev:match('\ntest accuracy: (0%.%d+)\n'), acc, '--evaluate after training:\n' .. ev)
  os.execute('rm -rf ' .. q(d))
end)

T.test('an ImageFolder of JPEGs (tools/fashion_to_imagefolder.lua): trains, logs JSONL and TensorBoard', function()
  local d = tmpdir()
  local out, ok = T.run_binary('tools/fashion_to_imagefolder.lua ' .. q(d .. '/fm') .. ' --limit 640')
  T.ok(ok, 'fashion_to_imagefolder failed:\n' .. out)
  out, ok = run('--data ' .. q(d .. '/fm') .. ' --arch resnet18 --width 8 --image-size 28 --val-resize 28 ' ..
    '--epochs 3 --warmup-epochs 0.2 --batch-size 32 --workers 2 --lr 0.4 --log-interval 5 --log-dir ' .. q(d .. '/log'))
  T.ok(ok, 'ImageFolder run failed:\n' .. out)
  T.ok(out:find('10 classes', 1, true), 'the ten class folders: ' .. out)
  local acc = tonumber(out:match('\ntest accuracy: (0%.%d+)\n'))
  -- Measured: 0.47 after 3 epochs (0.19 after 2); an untrained net scores 0.1.
  T.ok(acc and acc > 0.25, 'learns from 640 JPEGs: ' .. tostring(acc))
  local train = metrics(d .. '/log/metrics.jsonl', 'train')
  local val = metrics(d .. '/log/metrics.jsonl', 'val')
  T.ok(#train >= 3, 'train records: ' .. #train)
  T.eq(#val, 3, 'one validation record per epoch')
  T.near(val[3].top1, acc, 1e-4, 'the logged top-1 is the printed one')
  local p = io.popen('ls ' .. q(d .. '/log') .. ' | grep tfevents')
  local ev = p:read('l')
  p:close()
  T.ok(ev, 'a TensorBoard event file in the log dir')
  local events = v100.io.read_events(d .. '/log/' .. ev)
  local tags = {}
  for _, e in ipairs(events) do tags[e.tag] = (tags[e.tag] or 0) + 1 end
  T.eq(tags['train/loss'], #train, 'every logged train loss is a scalar event')
  T.eq(tags['val/top1'], 3, 'val/top1')
  os.execute('rm -rf ' .. q(d))
end)

T.run()
