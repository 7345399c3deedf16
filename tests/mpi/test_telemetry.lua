-- tests/mpi/test_telemetry.lua: v100.telemetry across ranks (mpirun -np 2 and -np 3): each rank
-- reads its own synthetic GPU (a different power per rank), and the figures the recipes log add
-- up: energy and power summed, temperature and memory the largest, the SM clock's minimum the
-- smallest, throttle reasons ORed, the GPU count the number of ranks; a rank without telemetry
-- takes part in the collectives and counts no GPU; energy per sample over all ranks' samples.
local T = require 'testlib'
local log = require 'v100.log'
local telemetry = require 'v100.telemetry'

local r, n = T.mpi_start()

local function fake(rank) return { ndevices = 1, dt = 0.1, base_w = 100 + 50 * rank, step_w = 2, period = 5 } end

T.test('reduce_window: sums, maxima, minima and the GPU count over the ranks', function()
  local mon = telemetry.Monitor{ source = 'fake', fake = fake(r), start = false }
  mon:window(true)
  for _ = 1, 9 do mon:sample() end
  local w = mon:window(true)
  local m = telemetry.reduce_window(w)
  T.eq(m.gpus, n)
  local all = log.reduce({ e = w.energy_j, p = w.power_w }, 'sum')
  T.near(m.gpu_energy_j, all.e, 1e-12)
  T.near(m.gpu_power_total_w, all.p, 1e-12)
  T.near(m.gpu_power_w, all.p / n, 1e-12)
  -- the last rank draws the most: its hottest read is 40 + (100 + 50 (n-1) + 8) / 10
  T.near(m.gpu_temp_c, 40 + (108 + 50 * (n - 1)) / 10, 1e-12)
  T.eq(m.gpu_sm_clock_min_mhz, 1976)
  T.eq(m.gpu_throttle_reasons, 4)
  mon:close()
end)

T.test('Recorder: epoch energy over every rank, a rank without telemetry counts no GPU', function()
  local src = r == n - 1 and 'nvml' or 'fake' -- the last rank: NVML on a CPU run, unavailable
  local rec = telemetry.Recorder{ source = src, device = 'cpu', interval_ms = 3600000, unit = 'image' }
  rec:begin()
  if rec.mon.available then for _ = 1, 5 do rec.mon:sample() end end
  local ep = rec:finish(100 * n)
  local mine = rec.mon.available and 1 or 0
  T.eq(ep.gpus, n - 1)
  T.ok(ep.energy_j > 0)
  T.near(ep.energy_per_image_j, ep.energy_j / (100 * n), 1e-12)
  local m = rec:window(64)
  T.eq(m.gpus, n - 1)
  T.eq(log.reduce({ mine }, 'sum')[1], n - 1)
  rec:close()
end)

T.run()
