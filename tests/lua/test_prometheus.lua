-- tests/lua/test_prometheus.lua: v100.prometheus: the text format (escaping, value spelling,
-- errors), and a training run's metrics (telemetry.Recorder on the synthetic GPU) written as a
-- node-exporter textfile and served over HTTP, both parsed by the reference parser
-- (prometheus_client, Debian's python3-prometheus-client; tests/tools/prom_parse.py) as a
-- scraper would read them.
local prometheus = require 'v100.prometheus'
local telemetry = require 'v100.telemetry'
local T = require 'testlib'

local function sh(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Debian's python3-prometheus-client is for Debian's python3: /usr/bin/python3 before whatever
-- python3 comes first in PATH (a pyenv or venv one lacks it); V100_PYTHON overrides.
local PY = os.getenv('V100_PYTHON') or (io.open('/usr/bin/python3') and '/usr/bin/python3' or 'python3')
local PARSE = sh(PY) .. ' tests/tools/prom_parse.py '

-- The samples the reference parser reads from a file or URL: {['name{labels}'] = value, ...},
-- and its raw output.
local function parse(src)
  local p = assert(io.popen(PARSE .. sh(src) .. ' 2>&1'))
  local out = p:read('a')
  local ok, _, code = p:close()
  if code == 2 then error('python3-prometheus-client is missing (tools/setup.sh installs it):\n' .. out, 0) end
  T.ok(ok, 'the reference parser rejected ' .. src .. ':\n' .. out)
  local samples = {}
  local special = { inf = math.huge, ['-inf'] = -math.huge, nan = 0 / 0 } -- Python's repr of them
  for typ, key, val in out:gmatch('(%a+) ([%w_:]+{[^}]*}) ([^\n]+)') do
    samples[key] = { type = typ, value = tonumber(val) or special[val] }
  end
  return samples, out
end

T.test('Registry: the text format, escaping and value spelling', function()
  local reg = prometheus.Registry{ labels = { rank = '3' } }
  reg:add('v100_x', 'gauge', 'Help with \\ and\nnewline.', 1.5, { path = 'a"b\\c\nd' })
  reg:add('v100_x', 'gauge', 'ignored second help', 0 / 0, { path = 'nan' })
  reg:add('v100_events_total', 'counter', 'Events.', 42)
  reg:add('v100_inf', 'gauge', 'Inf.', math.huge)
  reg:add('v100_flag', 'untyped', 'A boolean.', true)
  local text = reg:text()
  T.eq(text, table.concat({
    '# HELP v100_x Help with \\\\ and\\nnewline.',
    '# TYPE v100_x gauge',
    'v100_x{path="a\\"b\\\\c\\nd",rank="3"} 1.5',
    'v100_x{path="nan",rank="3"} NaN',
    '# HELP v100_events_total Events.',
    '# TYPE v100_events_total counter',
    'v100_events_total{rank="3"} 42',
    '# HELP v100_inf Inf.',
    '# TYPE v100_inf gauge',
    'v100_inf{rank="3"} +Inf',
    '# HELP v100_flag A boolean.',
    '# TYPE v100_flag untyped',
    'v100_flag{rank="3"} 1',
    '' }, '\n'))
  local dir = T.tmpdir()
  prometheus.write_textfile(dir .. '/x.prom', text)
  local s = parse(dir .. '/x.prom')
  T.eq(s['v100_x{path=a"b\\\\c\\nd,rank=3}'].value, 1.5) -- the parser's unescaped value, escaped again by prom_parse.py
  T.eq(s['v100_events_total{rank=3}'].value, 42)
  T.eq(s['v100_inf{rank=3}'].value, math.huge)
  T.eq(s['v100_x{path=nan,rank=3}'].value ~= s['v100_x{path=nan,rank=3}'].value, true)
  os.execute('rm -rf ' .. sh(dir))
end)

T.test('Registry: errors name what is wrong', function()
  local reg = prometheus.Registry()
  T.raises(function() reg:add('9bad', 'gauge', '', 1) end, 'not a valid Prometheus name')
  T.raises(function() reg:add('ok', 'histogram', '', 1) end, 'gauge, counter or untyped')
  T.raises(function() reg:add('events', 'counter', '', 1) end, 'must end in _total')
  T.raises(function() reg:add('ok', 'gauge', '', 1, { ['bad-label'] = 1 }) end, 'the label "bad-label"')
  T.raises(function() reg:add('ok', 'gauge', '', 'x') end, 'must be a number')
  reg:add('ok', 'gauge', '', 1)
  T.raises(function() reg:add('ok', 'untyped', '', 1) end, 'was added as a gauge')
  T.raises(function() prometheus.Registry{ labels = { ['a b'] = 1 } } end, 'not a valid')
  T.raises(function() prometheus.serve{ port = 70000 } end, 'port must be an integer in 0..65535')
  T.raises(function() prometheus.serve{ port = 0, addr = 'localhost' } end, 'numeric')
end)

T.test('a run\'s metrics: textfile and HTTP endpoint, rank-labelled, parsed by the reference parser', function()
  local dir = T.tmpdir()
  local rec = telemetry.Recorder{ source = 'fake', device = 'cpu', interval_ms = 3600000, unit = 'image', job = 'resnet50',
    prometheus = { dir = dir .. '/textfile', port = 0 } }
  local line = rec:describe()
  T.ok(line:find('prometheus http://127.0.0.1:%d+/metrics'), line)
  T.ok(line:find('v100lua_rank0.prom', 1, true), line)
  rec:begin()
  for _ = 1, 5 do rec.mon:sample() end
  local m = rec:window(512)
  rec:export{ step = 10, epoch = 1, loss = 2.5, lr = 0.1, samples_per_second = 1234.5, samples = 512 }
  local path = dir .. '/textfile/v100lua_rank0.prom'
  local s, out = parse(path)
  local gpu = 'gpu=0,job=resnet50,rank=0,uuid=GPU-fake-0000'
  T.eq(s['v100_train_running{job=resnet50,rank=0}'].value, 1, out)
  T.eq(s['v100_train_images_total{job=resnet50,rank=0}'].value, 512)
  T.eq(s['v100_train_images_total{job=resnet50,rank=0}'].type, 'counter')
  T.eq(s['v100_train_step{job=resnet50,rank=0}'].value, 10)
  T.eq(s['v100_train_loss{job=resnet50,rank=0}'].value, 2.5)
  T.eq(s['v100_train_images_per_second{job=resnet50,rank=0}'].value, 1234.5)
  T.near(s['v100_train_energy_per_image_joules{job=resnet50,rank=0}'].value, m.energy_per_image_j, 1e-12)
  T.eq(s['v100_telemetry_available{job=resnet50,rank=0}'].value, 1)
  local latest = rec.mon:latest()
  T.eq(s['v100_gpu_power_watts{' .. gpu .. '}'].value, latest.power_w)
  T.eq(s['v100_gpu_sm_clock_hertz{' .. gpu .. '}'].value, latest.sm_clock_mhz * 1e6)
  T.eq(s['v100_gpu_power_limit_watts{' .. gpu .. '}'].value, 700)
  T.eq(s['v100_gpu_energy_joules_total{' .. gpu .. '}'].type, 'counter')
  T.ok(s['v100_gpu_energy_joules_total{' .. gpu .. '}'].value > 0)
  T.ok(s['v100_gpu_throttled{gpu=0,job=resnet50,rank=0,reason=sw_power_cap,uuid=GPU-fake-0000}'], out)
  -- the same text over HTTP, with the format's content type
  local url = string.format('http://127.0.0.1:%d/metrics', rec.prom.port)
  local hs, hout = parse(url)
  T.ok(hout:find('content%-type text/plain; version=0.0.4'), hout)
  T.eq(hs['v100_train_loss{job=resnet50,rank=0}'].value, 2.5)
  T.ok(rec.prom.server:requests() >= 1)
  -- atomic replacement: a second export leaves one file and no temporaries behind
  rec:export{ step = 20, samples = 512 }
  local p = assert(io.popen('ls -A ' .. sh(dir .. '/textfile')))
  local names = p:read('a')
  p:close()
  T.eq(names, 'v100lua_rank0.prom\n')
  T.eq(parse(path)['v100_train_images_total{job=resnet50,rank=0}'].value, 1024)
  -- closing says the run ended, in the file; the endpoint is gone
  rec:close()
  T.eq(parse(path)['v100_train_running{job=resnet50,rank=0}'].value, 0)
  local q = assert(io.popen(PARSE .. sh(url) .. ' 2>&1'))
  q:read('a')
  T.eq(q:close(), nil, 'the endpoint still answers after close')
  os.execute('rm -rf ' .. sh(dir))
end)

T.test('telemetry unavailable: the exporter still publishes the training metrics', function()
  local dir = T.tmpdir()
  local rec = telemetry.Recorder{ source = 'nvml', device = 'cpu', prometheus = { dir = dir } }
  rec:begin()
  T.eq(next(rec:window(10)), nil)
  T.eq(rec:finish(10), nil)
  rec:export{ step = 1, loss = 1.25, samples = 10 }
  local s, out = parse(dir .. '/v100lua_rank0.prom')
  T.eq(s['v100_telemetry_available{job=v100lua,rank=0}'].value, 0, out)
  T.eq(s['v100_train_loss{job=v100lua,rank=0}'].value, 1.25)
  rec:close()
  os.execute('rm -rf ' .. sh(dir))
end)

T.test('--telemetry off: the exporter still serves the training metrics (issue 27)', function()
  local dir = T.tmpdir()
  local rec = telemetry.Recorder{ enabled = false, job = 'resnet50', prometheus = { dir = dir, port = 0 } }
  local line = rec:describe()
  T.ok(line:find('^telemetry: off; prometheus http://127%.0%.0%.1:%d+/metrics; prometheus textfile'), line)
  rec:export{ step = 3, loss = 0.75, samples = 64 }
  local s, out = parse(rec.prom.url)
  T.eq(s['v100_train_loss{job=resnet50,rank=0}'].value, 0.75, out)
  T.eq(s['v100_telemetry_available{job=resnet50,rank=0}'].value, 0, out)
  T.eq(parse(dir .. '/v100lua_rank0.prom')['v100_train_step{job=resnet50,rank=0}'].value, 3)
  T.eq(rec:window(64), {})
  rec:close()
  T.eq(parse(dir .. '/v100lua_rank0.prom')['v100_train_running{job=resnet50,rank=0}'].value, 0)
  os.execute('rm -rf ' .. sh(dir))
end)

T.test('the bound address is printed as bound; beyond loopback a warning on stderr (issue 27)', function()
  local code = "local p = require('v100.prometheus') " ..
    "local s = p.serve{addr = '0', port = 0} print('ANY', s.addr, s.loopback, p.url(s.addr, s.port)) s:close() " ..
    "local l = p.serve{port = 0} print('LO', l.addr, l.loopback) l:close() " ..
    "local x = p.Exporter{port = 0, addr = '::1'} print('V6', x.url) x:close()"
  local f = assert(io.popen(sh(T.binary()) .. ' -e ' .. sh(code) .. ' 2>&1'))
  local out = f:read('a')
  T.ok(f:close(), out)
  T.ok(out:find('ANY\t0%.0%.0%.0\tfalse\thttp://0%.0%.0%.0:%d+/metrics'), out)
  T.ok(out:find('warning: prometheus: the metrics endpoint http://0%.0%.0%.0:%d+/metrics listens on 0%.0%.0%.0, ' ..
    'beyond loopback; it has no authentication'), out)
  T.ok(out:find('LO\t127%.0%.0%.1\ttrue'), out)
  T.ok(out:find('V6\thttp://%[::1%]:%d+/metrics'), out)
  local _, warnings = out:gsub('warning: prometheus', '')
  T.eq(warnings, 1, 'loopback endpoints do not warn:\n' .. out)
end)

T.run()
