-- tests/lua/test_recipe.lua: the first recipe (recipes/resnet50.lua: a ResNet-18, width 8 on the
-- CPU) run as a user runs it, through the binary, and the data module it uses; the command-line
-- options of every recipe (lua-argparse through v100.recipe: --help, defaults, flags, auto values,
-- bad values), v100.train's epoch loop on synthetic data, and where the host finds argparse.
-- tests/lua/recipe_resnet50.lua has the long runs (the default, kill + resume, JPEGs).
--
-- Measured on the CPU with --epochs 1 --train-subset 1024 --val-subset 500 --batch-size 32
-- (2026-12-02, seeds 7 and 8): test accuracy 0.448 and 0.406 on 500 test images. The threshold
-- keeps a margin; an untrained model scores about 0.10.
local T = require 'testlib'
local v100 = require 'v100'
local data = require 'v100.data'
local recipe = require 'v100.recipe'

local ACC_THRESHOLD = 0.30
local ROOT = data.FASHION_MNIST_ROOT
local have_data = io.open(ROOT .. '/t10k-labels-idx1-ubyte.gz', 'rb')
if have_data then have_data:close() end

local function run_recipe(args) return T.run_binary('recipes/resnet50.lua ' .. args) end
local loss_lines = T.epoch_losses

if have_data then
  T.test('recipe: one epoch on 1024 images learns, and the same seed gives the same losses', function()
    local args = '--epochs 1 --train-subset 1024 --val-subset 500 --batch-size 32 --seed 7 --device cpu'
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

-- ---- options ----

-- Every option of each recipe, in --help order (the defaults are read from --help itself).
local RECIPE_OPTIONS = {
  ['recipes/resnet50.lua'] = { 'data', 'fashion-root', 'arch', 'width', 'epochs', 'batch-size', 'lr', 'warmup-epochs',
    'label-smoothing', 'weight-decay', 'momentum', 'optimizer', 'amp', 'dtype', 'layout', 'graph', 'workers',
    'prefetch', 'decoder', 'image-size', 'val-resize', 'checkpoint-dir', 'checkpoint-every', 'keep', 'resume', 'evaluate', 'pretrained', 'seed', 'log-dir',
    'log-interval', 'device', 'train-subset', 'val-subset', 'steps-per-epoch', 'eval-every', 'tf32',
    'telemetry', 'telemetry-interval-ms', 'prometheus-dir', 'prometheus-port', 'prometheus-addr' },
  ['recipes/fashion_cnn.lua'] = { 'epochs', 'batch', 'lr', 'momentum', 'width', 'dropout', 'train-subset',
    'test-subset', 'schedule', 'device', 'seed', 'root' },
  ['recipes/fashion_resnet.lua'] = { 'epochs', 'batch', 'lr', 'wd', 'smoothing', 'warmup-epochs', 'device', 'seed',
    'layout', 'train-subset', 'test-subset', 'eval-every', 'root', 'tf32', 'cudnn-benchmark', 'amp', 'dtype', 'graph' },
}

-- The options of argparse's help text: { {name =, default =, text =}, ... } in order. An entry is
-- a line "   --name <ARG>  description" (the description may wrap onto deeper-indented lines).
local function help_options(out)
  local opts, cur = {}, nil
  for line in out:gmatch('[^\n]*') do
    local name = line:match('^   %-%-([%w%-]+)')
    if name then
      cur = { name = name, text = line }
      opts[#opts + 1] = cur
    elseif cur and line:match('^     ') then
      cur.text = cur.text .. ' ' .. line:match('^%s*(.-)$')
    else
      cur = nil
    end
  end
  for _, o in ipairs(opts) do
    o.default = o.text:match('%(default: (.-)%)%s*$')
    o.flag = not o.text:match('^   %-%-[%w%-]+ [<{]') -- a flag takes no value and has no default
  end
  return opts
end

T.test('recipes: --help lists every option with its default', function()
  for script, names in pairs(RECIPE_OPTIONS) do
    local out, ok = T.run_binary(script .. ' --help')
    T.ok(ok, script .. ' --help failed:\n' .. out)
    T.ok(out:find('^Usage: ' .. script:match('[^/]+$')), script .. ': no usage line first:\n' .. out)
    local listed = help_options(out)
    local got = {}
    for i, o in ipairs(listed) do
      got[i] = o.name
      T.ok(o.flag or (o.default and o.default ~= ''), script .. ' --help: --' .. o.name .. ' shows no default: ' .. o.text)
    end
    T.eq(got, names, script .. ': the options of --help')
  end
  -- a few defaults as the recipes used to state them
  local cnn = help_options(T.run_binary('recipes/fashion_cnn.lua --help'))
  T.eq(cnn[1].default, '2', 'fashion_cnn --epochs')
  T.eq(cnn[9].default, 'cosine', 'fashion_cnn --schedule')
  T.ok(cnn[9].text:find('{cosine,constant}', 1, true), 'choices shown: ' .. cnn[9].text)
  T.eq(cnn[12].default, data.FASHION_MNIST_ROOT, 'fashion_cnn --root')
  local res = help_options(T.run_binary('recipes/fashion_resnet.lua --help'))
  T.eq({ res[1].default, res[2].default, res[4].default, res[14].default }, { '15', '256', '5e-4', 'on' })
end)

T.test('recipes: every default, given back on the command line, passes its own check', function()
  for script in pairs(RECIPE_OPTIONS) do
    local args = {}
    for _, o in ipairs(help_options(T.run_binary(script .. ' --help'))) do
      -- --device's and --root's defaults are sentences or machine-dependent: give real values
      local v = o.name == 'device' and 'cpu' or o.name == 'root' and '/nonexistent' or o.default
      if not o.flag then args[#args + 1] = '--' .. o.name .. ' ' .. v end
    end
    -- --help last: argparse converts (and checks) each value as it reads it, then prints help
    local out, ok = T.run_binary(script .. ' ' .. table.concat(args, ' ') .. ' --help')
    T.ok(ok and out:find('^Usage:'), script .. ' refused its own defaults:\n' .. out)
  end
end)

T.test('recipes: a bad value fails, naming the option, without a traceback', function()
  local cases = {
    { 'recipes/resnet50.lua --epochs zero', "option '--epochs' needs a positive integer, got 'zero'" },
    { 'recipes/resnet50.lua --no-such-option 1', "unknown option '--no-such-option'" },
    { 'recipes/resnet50.lua --width 2.5', "option '--width' needs a positive integer, got '2.5'" },
    { 'recipes/resnet50.lua --arch resnet20', "argument for option '--arch' must be one of 'auto', 'resnet18'" },
    { 'recipes/resnet50.lua --resume', "option '--resume' needs --checkpoint-dir" },
    { 'recipes/resnet50.lua --evaluate', "option '--evaluate' needs --pretrained FILE or --resume" },
    { 'recipes/resnet50.lua --graph on --device cpu', "option '--graph' on needs a CUDA device, got cpu" },
    { 'recipes/fashion_cnn.lua --lr=0', "option '--lr' needs a finite number > 0, got '0'" },
    { 'recipes/fashion_cnn.lua --dropout 1', "option '--dropout' needs a finite number >= 0 and < 1, got '1'" },
    { 'recipes/fashion_cnn.lua --device gpu', "option '--device' is cpu, cuda or cuda:N, got 'gpu'" },
    { 'recipes/fashion_cnn.lua --train-subset=-5', "option '--train-subset' needs a non-negative integer, got '-5'" },
    { 'recipes/fashion_cnn.lua --epochs', "option '--epochs' requires an argument" },
    { 'recipes/fashion_resnet.lua --layout nhcw', "argument for option '--layout' must be one of 'nchw', 'nhwc'" },
    { 'recipes/fashion_resnet.lua --smoothing 1.5', "option '--smoothing' needs a finite number >= 0 and < 1, got '1.5'" },
    { 'recipes/fashion_resnet.lua --eval-every 0', "option '--eval-every' needs a positive integer, got '0'" },
    { 'recipes/fashion_resnet.lua --tf32 yes', "argument for option '--tf32' must be one of 'on', 'off'" },
    { 'recipes/fashion_resnet.lua stray', 'too many arguments' },
    { 'recipes/fashion_resnet.lua --amp O4', "argument for option '--amp' must be one of 'O0', 'O1', 'O2', 'O3'" },
    { 'recipes/fashion_resnet.lua --dtype f32', "argument for option '--dtype' must be one of 'fp16', 'bf16'" },
    { 'recipes/fashion_resnet.lua --graph on --device cpu', "option '--graph' on needs a CUDA device, got cpu" },
  }
  for _, c in ipairs(cases) do
    local out, ok = T.run_binary(c[1])
    T.ok(not ok, c[1] .. ': exit status should be non-zero')
    T.ok(out:find('Error: ' .. c[2], 1, true), c[1] .. ': expected "' .. c[2] .. '" in:\n' .. out)
    T.ok(out:find('^Usage: '), c[1] .. ': the usage line comes first:\n' .. out)
    T.ok(not out:find('traceback', 1, true), c[1] .. ': a traceback:\n' .. out)
  end
end)

T.test('recipe.options: flags (default false) and auto values', function()
  local spec = {
    name = 'x.lua',
    { '--resume', false, 'continue' },
    { '--epochs', 'auto', 'epochs; auto: 2', recipe.integer{ min = 1, auto = true } },
    { '--wd', 'auto', 'weight decay; auto: 1e-4', recipe.number{ min = 0, auto = true } },
    { '--device', 'auto', 'device', recipe.device_auto },
  }
  local o = recipe.options(spec, {})
  T.eq({ o.resume, o.epochs, o.wd, o.device }, { false, 'auto', 'auto', 'auto' }, 'defaults')
  o = recipe.options(spec, { '--resume', '--epochs', '3', '--wd', '0.5', '--device', 'cpu' })
  T.eq({ o.resume, o.epochs, o.wd, o.device }, { true, 3, 0.5, 'cpu' }, 'given')
  local p = recipe.parser(spec)
  local ok, err = p:pparse({ '--epochs', 'many' })
  T.ok(not ok and err:find("option '--epochs' needs a positive integer, got 'many'", 1, true), tostring(err))
  ok, err = p:pparse({ '--device', 'gpu' })
  T.ok(not ok and err:find("option '--device' is cpu, cuda or cuda:N, got 'gpu'", 1, true), tostring(err))
  ok, err = p:pparse({ '--resume', 'yes' })
  T.ok(not ok, 'a flag takes no value')
  T.ok(not pcall(recipe.parser, { name = 'y.lua', { '--f', false, 'flag', recipe.integer{} } }), 'a flag with a check')
end)

T.test('recipe.options: one row per option gives the default, the type and the check', function()
  local spec = {
    name = 'x.lua',
    { '--epochs', 2, 'epochs', recipe.integer{ min = 1 } },
    { '--lr', 0.05, 'learning rate', recipe.number{ gt = 0 } },
    { '--wd', '5e-4', 'weight decay', recipe.number{ min = 0 } },
    { '--mode', 'a', 'a mode', { 'a', 'b' } },
    { '--train-subset', 0, 'subset', recipe.integer{ min = 0, max = 100 } },
    { '--device', nil, 'device (default: auto)', recipe.device },
    { '--root', nil, 'folder (default: the package)', argname = '<DIR>' },
  }
  local o = recipe.options(spec, {})
  T.eq(o.epochs, 2)
  T.eq(math.type(o.epochs), 'integer', 'an integer option is a Lua integer')
  T.eq(o.lr, 0.05)
  T.eq(math.type(o.lr), 'float')
  T.eq(o.wd, 5e-4)
  T.eq(o.mode, 'a')
  T.eq(o.train_subset, 0, "'-' becomes '_' in the key")
  T.eq(o.device, nil, 'no default: nil')
  T.eq(o.root, nil)
  o = recipe.options(spec, { '--epochs=7', '--lr', '1e-3', '--mode', 'b', '--device', 'cpu', '--root', '/d',
    '--train-subset', '100' })
  T.eq({ o.epochs, o.lr, o.mode, o.device, o.root, o.train_subset }, { 7, 1e-3, 'b', 'cpu', '/d', 100 })
  local p = recipe.parser(spec)
  local function err(argv)
    local ok, e = p:pparse(argv)
    T.ok(not ok, table.concat(argv, ' ') .. ' should be refused')
    return e
  end
  T.eq(err{ '--epochs', '0' }, "option '--epochs' needs a positive integer, got '0'")
  T.eq(err{ '--epochs', '1e400' }, "option '--epochs' needs a positive integer, got '1e400'")
  T.eq(err{ '--lr', 'nan' }, "option '--lr' needs a finite number > 0, got 'nan'")
  T.eq(err{ '--lr', '1e400' }, "option '--lr' needs a finite number > 0, got '1e400'")
  T.eq(err{ '--lr=-0.1' }, "option '--lr' needs a finite number > 0, got '-0.1'")
  T.eq(err{ '--train-subset', '101' }, "option '--train-subset' needs an integer in [0, 100], got '101'")
  T.eq(err{ '--device', 'cuda:x' }, "option '--device' is cpu, cuda or cuda:N, got 'cuda:x'")
  -- a device this machine lacks is a usage error at parse time, before any data is read
  local ngpu = v100.cuda.device_count()
  if ngpu == 0 then
    T.ok(err{ '--device', 'cuda' }:find("option '--device' is 'cuda', but there is no CUDA device here", 1, true))
  else
    T.eq(recipe.options(spec, { '--device', 'cuda' }).device, 'cuda')
  end
  T.eq(err{ '--device', 'cuda:' .. ngpu }, ngpu == 0
    and string.format("option '--device' is 'cuda:0', but there is no CUDA device here (%s); use cpu",
      v100.versions().built_with_cuda and 'no GPU found' or 'v100lua was built without CUDA')
    or string.format("option '--device' is 'cuda:%d', but this machine has %d CUDA device%s (cuda:0..cuda:%d)", ngpu,
      ngpu, ngpu == 1 and '' or 's', ngpu - 1))
  T.eq(err{ '--mode', 'c' }, "argument for option '--mode' must be one of 'a', 'b'")
  local help = p:get_help()
  T.ok(help:find('--epochs <N>%s+epochs %(default: 2%)'), help)
  T.ok(help:find('--lr <X>%s+learning rate %(default: 0.05%)'), help)
  T.ok(help:find('--wd <X>%s+weight decay %(default: 5e%-4%)'), help)
  T.ok(help:find('--root <DIR>%s+folder %(default: the package%)'), help)
  T.raises(function() recipe.parser{ name = 'y.lua', { 'epochs', 1, 'no dashes' } } end, 'a row is')
  T.raises(function() recipe.parser{ name = 'y.lua', { '--n', 1, 'n', 'int' } } end, 'the check of --n')
end)

-- ---- the training loop ----

-- Runs Lua source through the binary (a temporary script file); returns output and success.
local function run_lua(src)
  local path = os.tmpname()
  local f = assert(io.open(path, 'w'))
  f:write(src)
  f:close()
  local out, ok = T.run_binary(path)
  os.remove(path)
  return out, ok
end

local FIT_SCRIPT = [[
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local data = require 'v100.data'
local train = require 'v100.train'
v100.manual_seed(3)
-- two separable classes: the sign of the first feature
local x = v100.randn({ 96, 4 })
local y = x:narrow(2, 1, 1):view(96):gt(0):long()
local model = nn.Linear(4, 2)
local opt = optim.SGD(model:parameters(), { lr = 0.5 })
local acc, total = train.fit{
  epochs = 3, device = 'cpu', model = model, opt = opt, eval_every = EVAL_EVERY,
  batches = function(epoch) return data.batches(x, y, 32, { shuffle = true, seed = epoch }) end,
  loss = function(xb, yb) return nn.cross_entropy(model(xb), yb) end,
  test = { x = x, y = y, forward = function(xb) return model(xb) end, batch = 50 },
}
print(string.format('returned %.4f %s', acc, math.type(total)))
]]

T.test('train.fit: epoch lines, evaluation every n epochs, the final lines', function()
  local out, ok = run_lua('EVAL_EVERY = 2\n' .. FIT_SCRIPT)
  T.ok(ok, out)
  local lines = {}
  for l in out:gmatch('[^\n]+') do lines[#lines + 1] = l end
  T.eq(#lines, 6, out)
  T.ok(lines[1]:match('^epoch 1/3  loss %d%.%d%d%d%d  time %d+%.%d s  images/s %d+$'), 'not evaluated: ' .. lines[1])
  T.ok(lines[2]:match('^epoch 2/3  loss %d%.%d%d%d%d  test acc %d%.%d%d%d%d  time [%d.]+ s  images/s %d+$'), lines[2])
  T.ok(lines[3]:match('^epoch 3/3  loss [%d.]+  test acc [%d.]+  time'), 'the last epoch is evaluated: ' .. lines[3])
  T.ok(lines[4]:match('^total time: %d+ s %(training [%d.]+ s, %d+ images/s%)$'), lines[4])
  local acc = lines[5]:match('^test accuracy: (%d%.%d%d%d%d)$')
  T.ok(acc, lines[5])
  T.ok(tonumber(acc) >= 0.9, 'a linear model separates the sign of a feature: ' .. acc)
  T.eq(lines[6], 'returned ' .. acc .. ' float', 'fit returns the accuracy and the seconds')
  local l = T.epoch_losses(out)
  T.ok(tonumber(l[3]) < tonumber(l[1]), 'the loss decreases: ' .. table.concat(l, ' '))
  local again = run_lua('EVAL_EVERY = 1\n' .. FIT_SCRIPT)
  T.eq(T.epoch_losses(again), l, 'same seeds, same losses (evaluation does not disturb training)')
  T.eq(select(2, again:gsub('test acc ', '')), 3, 'eval_every 1: every epoch is evaluated')
end)

T.test('train.fit: a hand-written step, loss digits, and the errors', function()
  local out, ok = run_lua([[
local v100 = require 'v100'
local data = require 'v100.data'
local train = require 'v100.train'
local x, y = v100.arange(0, 10):view(10, 1):float(), v100.arange(0, 10):lt(5):long()
local calls = 0
train.fit{ epochs = 1, device = 'cpu', loss_digits = 6,
  batches = function() return data.batches(x, y, 4) end,
  step = function(xb, yb) calls = calls + 1; return v100.full({}, 0.125 * calls) end,
  test = { x = x, y = y, forward = function(xb) return v100.zeros({ xb.shape[1], 2 }) end } }
print('calls ' .. calls)
local ok, e = pcall(train.fit, { epochs = 1, device = 'cpu', batches = function() return data.batches(x, y, 4) end,
  test = { x = x, y = y, forward = function(xb) return xb end } })
print(e)
ok, e = pcall(train.fit, { epochs = 1, device = 'cpu', step = function() end,
  batches = function() return function() end end, test = { x = x, y = y, forward = function(xb) return xb end } })
print(e)
]])
  T.ok(ok, out)
  -- 3 batches (4, 4, 2 rows), losses 0.125, 0.25, 0.375: mean 0.25; argmax of zeros is class 0: 5 of 10
  T.ok(out:find('epoch 1/1  loss 0.250000  test acc 0.5000  time', 1, true), out)
  T.ok(out:find('\ntest accuracy: 0.5000\ncalls 3\n', 1, true), out)
  T.ok(out:find('train.fit: give loss and opt, or step', 1, true), out)
  T.ok(out:find('train.fit: epoch 1 had no batches', 1, true), out)
end)

-- ---- where the host finds lua-argparse ----

T.test('host: argparse is found with LUA_PATH unset, with ";;", without it, and from a packed folder', function()
  local bin = "'" .. T.binary() .. "'"
  local probe = [[ -e "print(require('argparse').version)"]]
  for _, env in ipairs{ 'env -u LUA_PATH', "LUA_PATH='tests/lua/?.lua;;'", "LUA_PATH='tests/lua/?.lua'" } do
    local p = assert(io.popen(env .. ' ' .. bin .. probe .. ' 2>&1'))
    local out = p:read('a')
    T.ok(p:close() and out:match('^%d+%.%d+'), env .. ': ' .. out)
  end
  -- a binary in <dir>/run finds modules in <dir>/lua (tools/device-pack.sh's .dev/lua)
  local dir = os.tmpname()
  os.remove(dir)
  T.ok(os.execute(('mkdir -p %s/run %s/lua && cp %s %s/run/v100lua'):format(dir, dir, bin, dir)), 'copy the binary')
  local f = assert(io.open(dir .. '/lua/vl_packed_probe.lua', 'w'))
  f:write("return 'packed module'\n")
  f:close()
  local p = assert(io.popen(("LUA_PATH='tests/lua/?.lua' %s/run/v100lua -e \"print((require('vl_packed_probe')))\" 2>&1")
    :format(dir)))
  local out = p:read('a')
  local ok = p:close()
  os.execute(('rm -rf %s'):format(dir))
  T.ok(ok and out == 'packed module\n', out)
end)

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
