-- tests/lua/recipe_telemetry.lua: the recipes' telemetry on a machine without a GPU (label
-- `recipe`):
--   1. recipes/resnet50.lua with the default --telemetry on: NVML is unavailable (or the run is
--      on the CPU), the header says so, and the run completes as before, with no energy lines;
--   2. recipes/resnet50.lua on the synthetic GPU (V100LUA_TELEMETRY_SOURCE=fake): an energy line
--      per epoch (joules from the counter, power x time beside it, J/image, the GPU count), the
--      GPU fields and energy per image in every metrics.jsonl training record and in TensorBoard,
--      the epoch records, the closing energy line, and the Prometheus textfile parsed by the
--      reference parser (tests/tools/prom_parse.py);
--   3. recipes/bert.lua likewise per sequence, on shards of a slice of WordNet.
-- The GPU side (real NVML readings, nothing changed on the device, counter vs power x time
-- within 5%) is tests/lua/gpu_telemetry.lua.
local T = require 'testlib'
local v100 = require 'v100'
local data = require 'v100.data'

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local PY = os.getenv('V100_PYTHON') or (io.open('/usr/bin/python3') and '/usr/bin/python3' or 'python3')

-- v100lua <args> with extra environment; output (stderr folded in) and success.
local function run(env, args)
  local p = assert(io.popen((env or '') .. ' ' .. q(T.binary()) .. ' ' .. args .. ' 2>&1', 'r'))
  local out = p:read('a')
  return out, p:close()
end
local FAKE = 'V100LUA_TELEMETRY_SOURCE=fake'

local function metrics(path, split)
  local out = {}
  for line in T.read_file(path):gmatch('[^\n]+') do
    local r = v100.io.json_decode(line)
    if not split or r.split == split then out[#out + 1] = r end
  end
  return out
end

-- {['name{labels}'] = value} as the reference parser reads the file.
local function prom(path)
  local p = assert(io.popen(q(PY) .. ' tests/tools/prom_parse.py ' .. q(path) .. ' 2>&1'))
  local out = p:read('a')
  T.ok(p:close(), 'the reference parser rejected ' .. path .. ':\n' .. out)
  local s = {}
  for key, val in out:gmatch('%a+ ([%w_:]+{[^}]*}) ([^\n]+)') do s[key] = tonumber(val) end
  return s, out
end

local have_fashion = io.open(data.FASHION_MNIST_ROOT .. '/t10k-labels-idx1-ubyte.gz', 'rb')
if have_fashion then have_fashion:close() end
local TINY = '--epochs 2 --train-subset 256 --val-subset 64 --batch-size 32 --log-interval 2 --seed 5'

if have_fashion then
  T.test('resnet50 without a GPU: telemetry says why it is unavailable, the run goes on', function()
    local out, ok = run('env -u V100LUA_TELEMETRY_SOURCE', 'recipes/resnet50.lua ' .. TINY)
    T.ok(ok, out)
    T.ok(out:find('\ntelemetry: unavailable %(') , 'no "telemetry: unavailable (...)" line:\n' .. out)
    T.ok(not out:find('energy'), 'energy reported without telemetry:\n' .. out)
    T.ok(out:find('\ntest accuracy: 0%.%d+\n'), out)
    -- --telemetry off keeps the Prometheus exporter: the training metrics without the GPU's
    -- (issue 27: the textfile and the endpoint used to be dropped silently)
    local d = T.tmpdir()
    out, ok = run('', 'recipes/resnet50.lua ' .. TINY .. ' --telemetry off --epochs 1 --prometheus-dir ' .. q(d))
    T.ok(ok and out:find('\ntelemetry: off; prometheus textfile ' .. d .. '/v100lua_rank0.prom\n', 1, true), out)
    local s, pout = prom(d .. '/v100lua_rank0.prom')
    T.eq(s['v100_telemetry_available{job=resnet50,rank=0}'], 0, pout)
    T.eq(s['v100_train_running{job=resnet50,rank=0}'], 0, pout)
    T.ok(s['v100_train_loss{job=resnet50,rank=0}'] and s['v100_train_step{job=resnet50,rank=0}'] > 0, pout)
    os.execute('rm -rf ' .. q(d))
  end)

  T.test('resnet50 on the synthetic GPU: energy per epoch and per image, metrics, TensorBoard, Prometheus', function()
    local d = T.tmpdir()
    local out, ok = run(FAKE, 'recipes/resnet50.lua ' .. TINY .. ' --telemetry-interval-ms 10 --log-dir ' .. q(d) ..
      ' --prometheus-dir ' .. q(d .. '/prom'))
    T.ok(ok, out)
    T.ok(out:find('\ntelemetry: v100lua fake GPU %(fake 0'), out)
    T.ok(out:find('prometheus textfile ' .. d .. '/prom/v100lua_rank0.prom', 1, true), out)
    -- epoch k/2  energy 6256 J (counter; power x time 6256 J, 0.0% apart) 24.44 J/image, 1 GPU, 322 W
    local lines = {}
    for e, j, ep, per, g in out:gmatch('\nepoch (%d)/2  energy (%d+) J %(counter; power x time (%d+) J, [%d.]+%% apart%) ([%d.]+) J/image, (%d) GPU,') do
      lines[#lines + 1] = { epoch = tonumber(e), j = tonumber(j), ep = tonumber(ep), per = tonumber(per), gpus = tonumber(g) }
    end
    T.eq(#lines, 2, 'one energy line per epoch:\n' .. out)
    local ev = metrics(d .. '/metrics.jsonl', 'energy')
    T.eq(#ev, 2)
    for i, r in ipairs(ev) do
      T.eq(r.epoch, i)
      T.eq(r.gpus, 1)
      T.near(r.energy_per_image_j, r.energy_j / 256, 1e-12, 'per image: the epoch\'s 8 steps x 32 images')
      T.near(r.energy_power_j, r.energy_j, 1e-9, 'the synthetic counter is the integral of its power')
      -- the line prints %.0f (ties to even: the synthetic series can sum to an exact half)
      T.eq(lines[i].j, tonumber(string.format('%.0f', r.energy_j)))
      T.near(lines[i].per, r.energy_per_image_j, 1e-3)
      T.ok(r.energy_j > 0)
    end
    local tr = metrics(d .. '/metrics.jsonl', 'train')
    T.eq(#tr, 8, 'a record every 2 of 8 steps, 2 epochs')
    for _, r in ipairs(tr) do
      T.eq(r.gpus, 1)
      T.ok(r.gpu_power_w >= 300 and r.gpu_power_w <= 345, 'the synthetic power: ' .. tostring(r.gpu_power_w))
      T.near(r.energy_per_image_j, r.gpu_energy_j / 64, 1e-12, 'a window is 2 steps x 32 images')
      for _, f in ipairs{ 'gpu_temp_c', 'gpu_sm_clock_mhz', 'gpu_mem_clock_mhz', 'gpu_util_pct', 'gpu_mem_used_gib',
        'gpu_throttle_reasons', 'gpu_energy_power_j' } do
        T.ok(type(r[f]) == 'number', f .. ' missing from a training record')
      end
      T.eq(r.energy_source, 'counter')
    end
    local tags = {}
    local p = assert(io.popen('ls ' .. q(d) .. ' | grep tfevents'))
    local ev_file = d .. '/' .. p:read('l')
    p:close()
    for _, e in ipairs(v100.io.read_events(ev_file)) do tags[e.tag] = true end
    for _, tag in ipairs{ 'train/gpu_power_w', 'train/gpu_energy_j', 'train/energy_per_image_j', 'energy/energy_j',
      'energy/energy_per_image_j' } do
      T.ok(tags[tag], 'TensorBoard has no ' .. tag)
    end
    local sum = out:match('\nenergy: training (%d+) J for 512 images = [%d.]+ J/image %(energy counter;')
    T.ok(sum, 'no closing energy line:\n' .. out)
    local s, pout = prom(d .. '/prom/v100lua_rank0.prom')
    local base = 'job=resnet50,rank=0'
    T.eq(s['v100_train_running{' .. base .. '}'], 0, pout)
    T.eq(s['v100_train_images_total{' .. base .. '}'], 512)
    T.eq(s['v100_train_step{' .. base .. '}'], 16)
    T.eq(s['v100_telemetry_available{' .. base .. '}'], 1)
    T.ok(s['v100_gpu_power_watts{gpu=0,' .. base .. ',uuid=GPU-fake-0000}'], pout)
    T.ok(s['v100_gpu_energy_joules_total{gpu=0,' .. base .. ',uuid=GPU-fake-0000}'] > 0)
    os.execute('rm -rf ' .. q(d))
  end)
end

local wn = io.open((os.getenv('WORDNET_ROOT') or '/usr/share/wordnet') .. '/data.noun', 'rb')
if wn then wn:close() end
if wn then
  T.test('bert on the synthetic GPU: energy per sequence in the records and the closing line', function()
    local d = T.tmpdir()
    local out, ok = run('', 'tools/wordnet_corpus.lua --output ' .. q(d .. '/wn'))
    T.ok(ok, out)
    local lines = {}
    for l in T.read_file(d .. '/wn/corpus.txt'):gmatch('([^\n]*)\n') do
      lines[#lines + 1] = l
      if #lines == 3000 then break end
    end
    T.write_file(d .. '/train.txt', table.concat(lines, '\n') .. '\n')
    out, ok = run('', 'tools/build_vocab.lua --input ' .. q(d .. '/train.txt') .. ' --output ' .. q(d .. '/shards/vocab.txt') ..
      ' --vocab-size 600')
    T.ok(ok, out)
    out, ok = run('', 'tools/make_bert_shards.lua --input ' .. q(d .. '/train.txt') .. ' --vocab ' .. q(d .. '/shards/vocab.txt') ..
      ' --output ' .. q(d .. '/shards') .. ' --seq-len 32 --max-predictions 5 --dupe-factor 1')
    T.ok(ok, out)
    out, ok = run(FAKE, 'recipes/bert.lua --data ' .. q(d .. '/shards') .. ' --config tiny --steps 6 --batch-size 16 ' ..
      '--log-interval 2 --log-dir ' .. q(d .. '/log') .. ' --prometheus-dir ' .. q(d .. '/prom'))
    T.ok(ok, out)
    T.ok(out:find('\ntelemetry: v100lua fake GPU'), out)
    local tr = metrics(d .. '/log/metrics.jsonl', 'train')
    T.eq(#tr, 3)
    for _, r in ipairs(tr) do
      T.near(r.energy_per_sequence_j, r.gpu_energy_j / 32, 1e-12, 'a window is 2 steps x 16 sequences')
      T.eq(r.gpus, 1)
    end
    T.ok(out:find('\nenergy: training %d+ J for 96 sequences = [%d.]+ J/sequence %(energy counter;'), out)
    local s, pout = prom(d .. '/prom/v100lua_rank0.prom')
    T.eq(s['v100_train_sequences_total{job=bert,rank=0}'], 96, pout)
    T.ok(s['v100_train_energy_per_sequence_joules{job=bert,rank=0}'] > 0)
    os.execute('rm -rf ' .. q(d))
  end)
end

T.run()
