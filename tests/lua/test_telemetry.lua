-- tests/lua/test_telemetry.lua: v100.telemetry without a GPU: NVML unavailable with a reason and
-- every method still answering; the synthetic device (source 'fake') for the figures: energy
-- from the counter against power x time and against the sawtooth's integral computed here,
-- windows and their cross-rank reduction at world size 1, the thread, throttle names, the
-- Recorder (epoch and run figures, logger metrics, the progress bar's W), and bad arguments.
local v100 = require 'v100'
local telemetry = require 'v100.telemetry'
local T = require 'testlib'

-- The fake device d's power at read k (ext/telemetry/fake.c) and the energy between reads
-- a and b (the trapezoids of those straight lines).
local function fake_power(cfg, d, k) return cfg.base_w + 10 * d + cfg.step_w * (k % cfg.period) end
local function fake_energy(cfg, d, a, b)
  local e = 0
  for k = a + 1, b do e = e + 0.5 * (fake_power(cfg, d, k - 1) + fake_power(cfg, d, k)) * cfg.dt end
  return e
end

T.test('NVML: unavailable on this machine with a reason, or available with devices', function()
  local ok, why = telemetry.available()
  if ok then
    T.ok(telemetry.Monitor{ start = false }.available)
    return
  end
  T.ok(why:find('NVML is unavailable', 1, true), why)
  local mon = telemetry.Monitor{ device = 'cuda:0' }
  T.eq(mon.available, false)
  T.ok(mon.reason:find('NVML', 1, true), mon.reason)
  -- every method answers with empty figures
  T.eq(mon:latest(), nil)
  T.eq(mon:info(), nil)
  local m = mon:mark()
  local e = mon:since(m)
  T.eq(e.gpus, 0)
  T.eq(e.energy_j, 0)
  T.eq(mon:window().gpus, 0)
  T.ok(mon:describe():find('^unavailable %('), mon:describe())
  mon:close()
  mon:close()
end)

T.test('Monitor: a CPU run has nothing to sample (NVML source)', function()
  local mon = telemetry.Monitor{ device = 'cpu', source = 'nvml' }
  T.eq(mon.available, false)
  T.ok(mon.reason:find('cpu'), mon.reason)
end)

T.test('fake device: energy from the counter = power x time = the integral of its series', function()
  local cfg = { ndevices = 2, dt = 0.25, base_w = 280, step_w = 6, period = 7, energy0_j = 5e5 }
  local mon = telemetry.Monitor{ source = 'fake', fake = cfg, start = false, device = 'cuda:1' }
  T.ok(mon.available, mon.reason)
  T.eq(mon.n, 1)
  local info = mon:info()
  T.eq(info.index, 1)
  T.eq(info.energy_counter, true)
  T.eq(info.power_limit_w, 700)
  -- read 0 was taken when the monitor started
  for _ = 1, 4 do mon:sample() end             -- reads 1..4
  local mark = mon:mark()                       -- read 5
  for _ = 1, 30 do mon:sample() end            -- reads 6..35
  local e = mon:since(mark)                     -- read 36
  T.eq(e.gpus, 1)
  T.eq(e.source, 'counter')
  local ref = fake_energy(cfg, 1, 5, 36)
  T.near(e.energy_j, ref, 1e-9, 'counter')
  T.near(e.energy_power_j, ref, 1e-9, 'power x time')
  T.near(e.seconds, 31 * cfg.dt, 1e-12)
  local s = mon:latest()
  T.eq(s.t, 36 * cfg.dt)
  T.eq(s.power_w, fake_power(cfg, 1, 36))
  T.near(s.energy_j, 5e5 + fake_energy(cfg, 1, 0, 36), 1e-9)
  T.eq(s.mem_clock_mhz, 2619)
  local tot = mon:totals()
  T.eq(tot.samples, 37)
  T.near(tot.integral.energy_j, fake_energy(cfg, 1, 0, 36), 1e-9)
  mon:close()
end)

T.test('fake device without an energy counter: energy falls back to power x time, and says so', function()
  local cfg = { ndevices = 1, dt = 0.1, base_w = 100, step_w = 1, period = 3, energy_counter = false }
  local mon = telemetry.Monitor{ source = 'fake', fake = cfg, start = false }
  local mark = mon:mark()
  for _ = 1, 9 do mon:sample() end
  local e = mon:since(mark)
  T.eq(e.source, 'power')
  T.near(e.energy_j, fake_energy(cfg, 0, 1, 11), 1e-9)
  T.eq(mon:latest().energy_j, nil)
  T.ok(mon:describe():find('no energy counter', 1, true), mon:describe())
  local w = telemetry.reduce_window(mon:window())
  T.eq(w.energy_source, 'power')
  mon:close()
end)

T.test('window: the figures of one window and reduce_window at world size 1', function()
  local cfg = { ndevices = 1, dt = 0.5, base_w = 200, step_w = 10, period = 4, energy0_j = 0 }
  local mon = telemetry.Monitor{ source = 'fake', fake = cfg, start = false, devices = { 0 } }
  mon:window(true)                               -- read 1; a window starts there
  for _ = 1, 6 do mon:sample() end              -- reads 2..7
  local w = mon:window(true)                     -- read 8: the window is reads 1..8
  T.eq(w.gpus, 1)
  T.near(w.energy_j, fake_energy(cfg, 0, 1, 8), 1e-9)
  T.near(w.seconds, 7 * cfg.dt, 1e-12)
  -- the mean power of the window: its energy over its time
  T.near(w.power_w, fake_energy(cfg, 0, 1, 8) / (7 * cfg.dt), 1e-9)
  T.eq(w.temp_c, 40 + 230 / 10)                  -- the hottest read: power 230 at k % 4 == 3
  T.eq(w.sm_clock_min_mhz, 1980 - 3)
  T.eq(w.throttle, 4)                            -- sw_power_cap on the last read of each period
  local r = telemetry.reduce_window(w)
  T.eq(r.gpus, 1)
  T.near(r.gpu_power_w, w.power_w, 1e-12)
  T.near(r.gpu_power_total_w, w.power_w, 1e-12)
  T.near(r.gpu_energy_j, w.energy_j, 1e-12)
  T.eq(r.gpu_temp_c, 63)
  T.eq(r.gpu_sm_clock_min_mhz, 1977)
  T.eq(r.gpu_throttle_reasons, 4)
  T.eq(r.energy_source, 'counter')
  T.near(r.gpu_mem_used_gib, 1 + 8 / 1024, 1e-12) -- 1 GiB + k MiB at read 8
  -- the next window starts at read 8
  local w2 = mon:window(true)
  T.near(w2.energy_j, fake_energy(cfg, 0, 8, 9), 1e-9)
  -- no telemetry at all: nothing to log
  T.eq(next(telemetry.reduce_window(telemetry.Monitor{ device = 'cpu', source = 'nvml' }:window())), nil)
  mon:close()
end)

T.test('the sampling thread takes samples at its interval and stops', function()
  local mon = telemetry.Monitor{ source = 'fake', interval_ms = 2 }
  T.ok(mon.s.running)
  local t0 = v100.io.time()
  while v100.io.time() - t0 < 0.08 do end
  local n = mon:totals().samples
  T.ok(n >= 5, 'only ' .. n .. ' samples in 80 ms at 2 ms')
  mon:close()
  T.eq(mon.s, nil)
end)

T.test('throttle_names decodes NVML reason bits', function()
  T.eq(telemetry.throttle_names(0), {})
  T.eq(telemetry.throttle_names(0x4 | 0x40), { 'sw_power_cap', 'hw_thermal_slowdown' })
  T.eq(telemetry.throttle_names(0x1000 | 0x1), { 'gpu_idle', '0x1000' })
end)

T.test('Recorder: epoch and run figures, logger metrics and the bar', function()
  local rec = telemetry.Recorder{ source = 'fake', device = 'cpu', interval_ms = 3600000, unit = 'image' }
  T.ok(rec:describe():find('^telemetry: v100lua fake GPU'), rec:describe())
  rec:begin()
  for _ = 1, 10 do rec.mon:sample() end
  local m = rec:window(640)
  T.eq(m.gpus, 1)
  T.near(m.energy_per_image_j, m.gpu_energy_j / 640, 1e-12)
  T.eq(rec:bar({}, m).W, string.format('%.0f', m.gpu_power_total_w))
  local ep = rec:finish(1280)
  T.eq(ep.gpus, 1)
  T.eq(ep.source, 'counter')
  T.near(ep.energy_power_j, ep.energy_j, 1e-9)
  T.near(ep.energy_per_image_j, ep.energy_j / 1280, 1e-12)
  T.ok(ep.text:find('J/image, 1 GPU', 1, true), ep.text)
  T.eq(rec:finish(1), nil) -- no epoch open
  local tot = rec:total(2000)
  T.ok(tot.energy_j >= ep.energy_j)
  rec:close()
  local off = telemetry.Recorder{ enabled = false }
  T.eq(off:describe(), 'telemetry: off')
  T.eq(next(off:window(10)), nil)
  off:begin()
  T.eq(off:finish(10), nil)
  off:close()
end)

T.test('bad arguments', function()
  T.raises(function() telemetry.Monitor{ source = 'nope' } end, "source must be 'nvml' or 'fake'")
  T.raises(function() telemetry.Monitor{ source = 'fake', interval_ms = 0 } end, 'interval_ms')
  T.raises(function() telemetry.Monitor{ source = 'fake', device = 'gpu7' } end, "device must be 'cpu'")
  T.raises(function() telemetry.Monitor{ source = 'fake', devices = { 5 } } end, 'device 5 is not one of')
  T.raises(function() telemetry.Monitor{ source = 'fake', fake = { dt = -1 } } end, 'dt must be > 0')
  local mon = telemetry.Monitor{ source = 'fake', start = false }
  T.raises(function() mon:latest(2) end, 'device 2 out of range')
  T.raises(function() mon.s:start(0) end, 'interval')
  mon:close()
  local s = require('v100.core')._telemetry.open{ source = 'fake' }
  s:close()
  T.raises(function() s:sample() end, 'closed sampler')
end)

T.run()
