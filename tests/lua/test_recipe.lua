-- tests/lua/test_recipe.lua: the first recipe (recipes/resnet50.lua, for now an MLP on
-- Fashion-MNIST) run as a user runs it, through the binary, and the data module it uses.
--
-- Measured on the CPU with --epochs 1 --train-subset 5000 (seeds 1..6): final test accuracy
-- 0.7845 to 0.7967 on the full 10k test set. The threshold below keeps a margin of about 3.5
-- points; an untrained model scores about 0.10.
local T = require 'testlib'
local v100 = require 'v100'
local data = require 'v100.data'

local ACC_THRESHOLD = 0.75
local ROOT = data.FASHION_MNIST_ROOT
local have_data = io.open(ROOT .. '/t10k-labels-idx1-ubyte.gz', 'rb')
if have_data then have_data:close() end

local function run_recipe(args) return T.run_binary('recipes/resnet50.lua ' .. args) end
local loss_lines = T.epoch_losses

if have_data then
  T.test('recipe: one epoch on 5000 images learns, and the same seed gives the same losses', function()
    local args = '--epochs 1 --train-subset 5000 --seed 7 --device cpu'
    local out1, ok1 = run_recipe(args)
    T.ok(ok1, 'recipe failed:\n' .. out1)
    local acc = tonumber(out1:match('\ntest accuracy: (0%.%d%d%d%d)\n?$'))
    T.ok(acc, 'no final "test accuracy: 0.xxxx" line in:\n' .. out1)
    T.ok(acc > ACC_THRESHOLD, string.format('accuracy %.4f is not above %.2f', acc, ACC_THRESHOLD))
    T.ok(out1:match('images/s %d+'), 'no images/s in the epoch line')

    local out2, ok2 = run_recipe(args)
    T.ok(ok2, 'second run failed:\n' .. out2)
    local l1, l2 = loss_lines(out1), loss_lines(out2)
    T.eq(#l1, 1, 'one epoch line')
    T.eq(l2, l1, 'losses of two runs with seed 7')
    T.eq(out2:match('test accuracy: (%S+)\n?$'), out1:match('test accuracy: (%S+)\n?$'))
  end)

  T.test('recipe: bad options are refused with a usage message', function()
    local out, ok = run_recipe('--epochs zero')
    T.ok(not ok, 'exit status should be non-zero')
    T.ok(out:find('--epochs needs a number', 1, true), out)
    out, ok = run_recipe('--no-such-option 1')
    T.ok(not ok and out:find('unknown option --no-such-option', 1, true), out)
  end)

  T.test('data.fashion_mnist: shapes, dtypes and the label histogram of the test split', function()
    local x, y = data.fashion_mnist('test')
    T.eq(x.shape, {10000, 28, 28})
    T.eq(x.dtype, 'u8')
    T.eq(y.shape, {10000})
    T.eq(y.dtype, 'u8')
    local counts = y:long():view(10000, 1):eq(v100.arange(0, 10)):long():sum(1):totable()
    T.eq(counts, {1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000})
    T.eq(y:narrow(1, 1, 2):totable(), {9, 2}) -- ankle boot, pullover
    T.ok(x:max():item() == 255 and x:min():item() == 0, 'pixel range 0..255')
  end)
end

T.test('data.fashion_mnist: a missing data set names the file and the package', function()
  T.raises(function() data.fashion_mnist('train', {root = '/nonexistent/fmnist'}) end,
    '/nonexistent/fmnist/train-images-idx3-ubyte.gz is missing')
  local ok, err = pcall(data.fashion_mnist, 'train', {root = '/nonexistent/fmnist'})
  T.ok(not ok and not err:find('apt-get', 1, true), 'opts.root given: no package hint expected')
  data.FASHION_MNIST_ROOT, ROOT = '/nonexistent/default', data.FASHION_MNIST_ROOT
  ok, err = pcall(data.fashion_mnist, 'test')
  data.FASHION_MNIST_ROOT = ROOT
  T.ok(not ok and err:find('apt-get install dataset-fashion-mnist', 1, true), tostring(err))
  T.raises(function() data.fashion_mnist('validation') end, "split must be 'train' or 'test'")
end)

T.test('data.batches: covers every row once, in order or shuffled, with drop_last', function()
  local n = 10
  local x = v100.arange(0, n):view(n, 1):float()
  local y = v100.arange(0, n)
  local seen, sizes = {}, {}
  for xb, yb, k in data.batches(x, y, 4) do
    sizes[k] = xb.shape[1]
    for i, v in ipairs(yb:totable()) do
      T.eq(xb:totable()[i][1], v, 'x and y rows stay paired')
      seen[#seen + 1] = v
    end
  end
  T.eq(sizes, {4, 4, 2})
  T.eq(seen, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9})

  local shuffled, count = {}, 0
  for xb, yb in data.batches(x, y, 3, {shuffle = true, seed = 5}) do
    T.eq(xb:view(-1):long():totable(), yb:totable(), 'x and y rows stay paired')
    for _, v in ipairs(yb:totable()) do shuffled[#shuffled + 1] = v end
  end
  T.ok(not T.deep_eq(shuffled, seen), 'a shuffle of 10 should not be the identity')
  local sorted = {table.unpack(shuffled)}
  table.sort(sorted)
  T.eq(sorted, seen, 'a permutation')
  local again = {}
  for _, yb in data.batches(x, y, 3, {shuffle = true, seed = 5}) do
    for _, v in ipairs(yb:totable()) do again[#again + 1] = v end
  end
  T.eq(again, shuffled, 'same seed, same order')

  for xb in data.batches(x, nil, 4, {drop_last = true}) do count = count + xb.shape[1] end
  T.eq(count, 8)
  T.raises(function() data.batches(x, y, 0) end, 'batch_size must be a positive integer')
  T.raises(function() data.batches(x, v100.arange(0, 3), 2) end, 'x has 10 rows but y has 3')
end)

T.run()
