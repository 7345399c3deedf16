-- tests/lua/gpu_telemetry.lua: v100.telemetry on a real GPU (label `gpu`):
--   1. NVML is there and reads plausible values of every field (printed, for the record);
--   2. under load (f16 GEMMs for about 10 s) the energy counter increases, and the energy it
--      counts agrees with power x time (the sampler's trapezoids) within 5%;
--   3. recipes/resnet50.lua on synthetic images: the epoch's energy per image is reported, its
--      counter and power x time figures agree within 5%, and metrics.jsonl has power, energy and
--      clocks;
--   4. nothing on the device changed: power limit and applications clocks read the same before
--      and after all of the above (the telemetry only reads).
-- Run blind on the GPU machine: every check prints what it measured.
local T = require 'testlib'
T.cuda_or_skip()
local v100 = require 'v100'
local telemetry = require 'v100.telemetry'

local TOL = 0.05
local DEV = 'cuda:0'

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function fmt_info(i)
  return string.format('%s uuid %s pci %s: power limit %.1f W, applications clocks SM %.0f / memory %.0f MHz, ' ..
    'memory %.1f GiB, power %s, energy counter %s', i.name, i.uuid, i.pci_bus_id, i.power_limit_w, i.app_sm_clock_mhz,
    i.app_mem_clock_mhz, i.mem_total_bytes / 2 ^ 30, i.power_source, tostring(i.energy_counter))
end

-- The device settings the telemetry must never change, read through a monitor of its own.
local function settings()
  local mon = telemetry.Monitor{ device = DEV, start = false, source = 'nvml' }
  T.ok(mon.available, 'NVML unavailable on the GPU machine: ' .. tostring(mon.reason))
  local i = mon:info()
  mon:close()
  return { power_limit_w = i.power_limit_w, app_sm_clock_mhz = i.app_sm_clock_mhz, app_mem_clock_mhz = i.app_mem_clock_mhz }
end

local before = settings()

T.test('NVML reads every field of this GPU, with plausible values', function()
  local mon = telemetry.Monitor{ device = DEV, interval_ms = 50, source = 'nvml' }
  T.ok(mon.available, tostring(mon.reason))
  local info = mon:info()
  print('  ' .. fmt_info(info))
  T.ok(#info.name > 0 and info.uuid:match('^GPU%-'), 'name and uuid')
  T.ok(info.power_limit_w > 50, 'power limit ' .. info.power_limit_w)
  T.eq(info.energy_counter, true, 'Volta and newer have the total-energy counter')
  mon:sample()
  local s = mon:latest()
  local parts = {}
  for _, f in ipairs(telemetry.fields) do parts[#parts + 1] = f .. ' ' .. tostring(s[f]) end
  print('  sample: ' .. table.concat(parts, ', '))
  for _, f in ipairs(telemetry.fields) do T.ok(s[f] ~= nil, f .. ' was not read') end
  T.ok(s.power_w > 5 and s.power_w < 1.5 * info.power_limit_w, 'power ' .. s.power_w)
  T.ok(s.temp_c > 5 and s.temp_c < 110, 'temperature ' .. s.temp_c)
  T.ok(s.sm_clock_mhz > 0 and s.mem_clock_mhz > 0, 'clocks')
  T.ok(s.util_gpu_pct >= 0 and s.util_gpu_pct <= 100, 'utilisation')
  T.ok(s.mem_used_bytes > 0 and s.mem_used_bytes <= info.mem_total_bytes, 'memory used')
  T.ok(s.energy_j > 0, 'energy counter ' .. s.energy_j)
  print('  throttle reasons: ' .. table.concat(telemetry.throttle_names(s.throttle_reasons), ', '))
  mon:close()
end)

T.test('under load: the energy counter increases and agrees with power x time within 5%', function()
  local mon = telemetry.Monitor{ device = DEV, interval_ms = 50, source = 'nvml' }
  local e0 = mon:latest().energy_j
  local a = v100.randn({ 8192, 8192 }, { device = DEV, dtype = 'f16' })
  local b = v100.randn({ 8192, 8192 }, { device = DEV, dtype = 'f16' })
  v100.cuda.synchronize()
  local mark = mon:mark()
  local t0, n = v100.io.time(), 0
  while v100.io.time() - t0 < 10 do
    for _ = 1, 20 do
      local c <close> = a:matmul(b)
    end
    v100.cuda.synchronize()
    n = n + 20
  end
  local e = mon:since(mark)
  local tot = mon:totals()
  local e1 = mon:latest().energy_j
  local diff = math.abs(e.energy_power_j - e.energy_j) / e.energy_j
  print(string.format('  %d GEMMs 8192^3 f16 in %.1f s: counter %.1f J, power x time %.1f J (%.2f%% apart), mean %.0f W, ' ..
    '%d samples, SM clock %.0f-%.0f MHz, max %.0f C, throttle %s', n, e.seconds, e.energy_j, e.energy_power_j, 100 * diff,
    e.energy_j / e.seconds, tot.samples, tot.min.sm_clock_mhz, tot.max.sm_clock_mhz, tot.max.temp_c,
    table.concat(telemetry.throttle_names(tot.throttle_any), ',')))
  T.ok(e1 > e0, string.format('the counter went from %.1f to %.1f J', e0, e1))
  T.ok(e.energy_j > 10 * e.seconds, 'more than 10 W under load')
  T.eq(e.source, 'counter')
  T.ok(diff < TOL, string.format('counter %.1f J vs power x time %.1f J: %.2f%% apart (limit %.0f%%)', e.energy_j,
    e.energy_power_j, 100 * diff, 100 * TOL))
  T.ok(tot.samples >= 150, 'samples at 50 ms over 10 s: ' .. tot.samples)
  local errs, why = mon:errors()
  T.eq(errs, 0, why)
  mon:close()
end)

T.test('resnet50 on synthetic images: energy per image per epoch, counter and power x time within 5%', function()
  local d = T.tmpdir()
  local out, ok = T.run_binary('recipes/resnet50.lua --data synthetic --epochs 2 --steps-per-epoch 150 ' ..
    '--log-interval 25 --telemetry-interval-ms 50 --log-dir ' .. q(d) .. ' --prometheus-dir ' .. q(d .. '/prom'))
  T.ok(ok, out)
  print('  ' .. (out:match('\n(telemetry: [^\n]*)') or 'no telemetry line'))
  local n = 0
  for line, j, ep, pct, per in out:gmatch('\n(epoch %d/2  energy (%d+) J %(counter; power x time (%d+) J, ([%d.]+)%% apart%) ([%d.]+) J/image[^\n]*)') do
    print('  ' .. line)
    n = n + 1
    T.ok(tonumber(pct) < 100 * TOL, 'counter and power x time ' .. pct .. '% apart: ' .. line)
    T.ok(tonumber(per) > 0 and tonumber(j) > 0)
  end
  T.eq(n, 2, 'an energy line per epoch:\n' .. out)
  local summary = out:match('\n(energy: training[^\n]*)')
  T.ok(summary, 'no closing energy line')
  print('  ' .. tostring(summary))
  local rows = 0
  for line in T.read_file(d .. '/metrics.jsonl'):gmatch('[^\n]+') do
    local r = v100.io.json_decode(line)
    if r.split == 'train' then
      rows = rows + 1
      T.ok(r.gpu_power_w > 50 and r.gpu_sm_clock_mhz > 0 and r.gpu_energy_j > 0 and r.energy_per_image_j > 0, line)
    end
  end
  T.ok(rows >= 10, 'training records: ' .. rows)
  os.execute('rm -rf ' .. q(d))
end)

T.test('nothing on the device changed: power limit and applications clocks read the same', function()
  local after = settings()
  print(string.format('  before: %.1f W, SM %.0f, memory %.0f MHz; after: %.1f W, SM %.0f, memory %.0f MHz',
    before.power_limit_w, before.app_sm_clock_mhz, before.app_mem_clock_mhz, after.power_limit_w, after.app_sm_clock_mhz,
    after.app_mem_clock_mhz))
  T.eq(after, before)
end)

T.run()
