-- ext/telemetry/lua/v100/obs/telemetry.lua: `require 'v100.telemetry'`: what the GPUs draw and what a result
-- cost. Read-only: NVML is only asked, nothing on a device is ever set.
--
--   local telemetry = require 'v100.telemetry'
--   local mon = telemetry.Monitor{device = 'cuda:0', interval_ms = 100}  -- a thread samples NVML
--   if not mon.available then print('telemetry: ' .. mon.reason) end     -- e.g. no driver: the rest runs
--   local mark = mon:mark()
--   ... train ...
--   local e = mon:since(mark)   -- {energy_j =, energy_power_j =, seconds =, gpus =, source =}
--   print(e.energy_j / images .. ' J/image')
--   mon:close()
--
-- Fields of a sample (mon:latest()): power_w, energy_j (the device's counter), temp_c,
-- sm_clock_mhz, mem_clock_mhz, util_gpu_pct, util_mem_pct, mem_used_bytes, throttle_reasons
-- (telemetry.throttle_names decodes it), t (seconds, monotonic). Energy figures come from the
-- counter; power x time (trapezoids over the samples) is the cross-check. docs/OPERATIONS.md
-- ("Telemetry") defines every field and figure.
--
-- The recipes use telemetry.Recorder: a monitor of the rank's GPU, figures summed over the ranks,
-- metrics for the logger and the progress bar, and the Prometheus exporter (v100.prometheus).
-- The source can be set with V100LUA_TELEMETRY_SOURCE=fake: a synthetic GPU with deterministic
-- series (ext/telemetry/fake.c), which is how CI runs all of this without a GPU.
local core = require 'v100.core'
local errors = require 'v100.errors'
local log = require 'v100.obs.log'
local prometheus = require 'v100.obs.prometheus'
local recipe = require 'v100.recipe'
local C = core._telemetry

local telemetry = {}

telemetry.fields = C.fields

-- NVML's clock event ("throttle") reason bits, nvmlClocksEventReason*.
telemetry.THROTTLE_REASONS = {
  { 0x1, 'gpu_idle' }, { 0x2, 'applications_clocks_setting' }, { 0x4, 'sw_power_cap' }, { 0x8, 'hw_slowdown' },
  { 0x10, 'sync_boost' }, { 0x20, 'sw_thermal_slowdown' }, { 0x40, 'hw_thermal_slowdown' },
  { 0x80, 'hw_power_brake_slowdown' }, { 0x100, 'display_clock_setting' },
}

-- The names of the bits set in mask, in bit order; unknown bits as '0x..'.
function telemetry.throttle_names(mask)
  mask = math.tointeger(mask) or 0
  local out, known = {}, 0
  for _, r in ipairs(telemetry.THROTTLE_REASONS) do
    known = known | r[1]
    if mask & r[1] ~= 0 then out[#out + 1] = r[2] end
  end
  if mask & ~known ~= 0 then out[#out + 1] = string.format('0x%x', mask & ~known) end
  return out
end

local function default_source(opts)
  local s = opts.source or os.getenv('V100LUA_TELEMETRY_SOURCE')
  if s == nil or s == '' then s = 'nvml' end
  if s ~= 'nvml' and s ~= 'fake' then error("telemetry: source must be 'nvml' or 'fake', got '" .. tostring(s) .. "'", 3) end
  return s
end

-- telemetry.available() -> true, or false and the reason (NVML opens and has a device).
function telemetry.available()
  local s, why = C.open{ source = 'nvml' }
  if not s then return false, why end
  s:close()
  return true
end

-- ---- telemetry.Monitor{device =, devices =, interval_ms = 100, source =, start = true, fake =} ----
-- device: 'cuda', 'cuda:N' (this process's numbering) or 'cpu' (nothing to sample with NVML);
-- devices: NVML indices, or 'all' (the default without device). The sampler takes one sample at
-- once (the start of its totals) and then one every interval on its thread. An unavailable
-- monitor (no driver, a CPU run) has available = false and reason, and its methods give empty
-- figures, so a script runs the same either way.
local Monitor = {}
Monitor.__index = Monitor
Monitor.__name = 'v100.telemetry.Monitor'

function telemetry.Monitor(opts)
  opts = errors.check_opts('telemetry.Monitor', opts, { 'source', 'interval_ms', 'device', 'devices', 'fake', 'start' })
  local source = default_source(opts)
  local interval_ms = opts.interval_ms or 100
  if type(interval_ms) ~= 'number' or not (interval_ms >= 1 and interval_ms <= 3600000) then
    error('telemetry.Monitor: interval_ms must be a number of milliseconds in 1..3600000, got ' .. tostring(interval_ms), 2)
  end
  local self = setmetatable({ available = false, source = source, n = 0, interval_ms = interval_ms }, Monitor)
  local o = { source = source, fake = opts.fake }
  if opts.device ~= nil then
    local dev = tostring(opts.device)
    if dev == 'cuda' then dev = core.device() end -- this rank's GPU ('cpu' when there is none)
    local idx = math.tointeger(tonumber(dev:match('^cuda:(%d+)$')))
    if not idx and dev ~= 'cpu' then error("telemetry.Monitor: device must be 'cpu', 'cuda' or 'cuda:N', got '" .. dev .. "'", 2) end
    if not idx and source == 'nvml' then
      self.reason = 'the run is on the cpu: no GPU to sample'
      return self
    end
    o.cuda = { idx or 0 }
  elseif opts.devices ~= nil and opts.devices ~= 'all' then
    o.devices = opts.devices
  end
  local s, why = C.open(o)
  if not s then
    self.reason = why
    return self
  end
  self.s, self.available, self.n = s, true, s:ndevices()
  self.devices = {}
  for i = 1, self.n do self.devices[i] = s:info(i) end
  s:sample()
  if opts.start ~= false then s:start(interval_ms / 1000) end
  return self
end

function Monitor:sample()
  if self.s then self.s:sample() end
end

-- mon:info([i]) -> {index, name, uuid, pci_bus_id, power_limit_w, app_sm_clock_mhz,
-- app_mem_clock_mhz, mem_total_bytes, power_source, energy_counter}, read now; nil when unavailable.
function Monitor:info(i)
  if not self.s then return nil end
  return self.s:info(i or 1)
end

-- mon:latest([i]) -> the latest sample of device i (1-based), nil when unavailable.
function Monitor:latest(i)
  if not self.s then return nil end
  return self.s:latest(i or 1)
end

-- mon:totals([i]) -> the aggregate since the monitor started (see ext/telemetry/telemetry.h).
function Monitor:totals(i)
  if not self.s then return nil end
  return self.s:totals(i or 1)
end

-- Energy of one device's aggregate: the counter where the device has one over all of it, else
-- power x time; and which it was.
local function energy_of(st)
  local counted, covered = st.covered.energy_j or 0, st.covered.power_w or 0
  local ep = st.integral.power_w or 0
  if (st.integral.energy_j ~= nil) and counted >= covered * 0.999 then return st.integral.energy_j, ep, 'counter' end
  return ep, ep, 'power'
end

-- mon:mark() -> a point to measure from: a fresh sample of every device, then their totals.
function Monitor:mark()
  local m = { devices = {} }
  if not self.s then return m end
  self.s:sample()
  for i = 1, self.n do
    local st = self.s:totals(i)
    local e, ep = energy_of(st)
    m.devices[i] = { energy_j = e, energy_power_j = ep, t = st.t_last, counter = st.integral.energy_j,
      covered_energy = st.covered.energy_j or 0, covered_power = st.covered.power_w or 0 }
  end
  return m
end

-- mon:since(mark) -> {energy_j, energy_power_j, seconds, gpus, source}: summed over the
-- monitor's devices from the mark to a fresh sample now. energy_j is the counter's ('counter'),
-- or power x time ('power') when a device has no counter.
function Monitor:since(mark)
  local r = { energy_j = 0, energy_power_j = 0, seconds = 0, gpus = 0, source = 'counter' }
  if not self.s then return r end
  local now = self:mark()
  for i = 1, self.n do
    local a, b = mark.devices[i], now.devices[i]
    if a and b then
      local dp = b.energy_power_j - a.energy_power_j
      local de
      if a.counter and b.counter and (b.covered_energy - a.covered_energy) >= (b.covered_power - a.covered_power) * 0.999 then
        de = b.counter - a.counter
      else
        de, r.source = dp, 'power'
      end
      r.energy_j = r.energy_j + de
      r.energy_power_j = r.energy_power_j + dp
      r.seconds = math.max(r.seconds, b.t - a.t)
      r.gpus = r.gpus + 1
    end
  end
  return r
end

-- mon:window([reset = true]) -> this process's figures since the last reset (a fresh sample
-- first), as plain numbers ready to be reduced across ranks (telemetry.reduce_window):
-- gpus, sums of the per-device means (power, clocks, utilisation), energy (counter and power x
-- time), maxima (temperature, memory), the SM clock's minimum and the throttle reasons seen.
function Monitor:window(reset)
  local w = { gpus = 0, power_w = 0, energy_j = 0, energy_power_j = 0, temp_c = 0, sm_clock_mhz = 0,
    sm_clock_min_mhz = 0, mem_clock_mhz = 0, util_gpu_pct = 0, util_mem_pct = 0, mem_used_bytes = 0, seconds = 0,
    throttle = 0, counter = 1 }
  if not self.s then return w end
  self.s:sample()
  local min_clock
  for i = 1, self.n do
    local st = self.s:window(i, reset ~= false)
    local function mean(f) local c = st.covered[f] or 0 return c > 0 and st.integral[f] / c or (st.max[f] or 0) end
    local e, ep, src = energy_of(st)
    w.gpus = w.gpus + 1
    w.power_w = w.power_w + mean('power_w')
    w.energy_j, w.energy_power_j = w.energy_j + e, w.energy_power_j + ep
    if src ~= 'counter' then w.counter = 0 end
    w.temp_c = math.max(w.temp_c, st.max.temp_c or 0)
    w.sm_clock_mhz = w.sm_clock_mhz + mean('sm_clock_mhz')
    if st.min.sm_clock_mhz then min_clock = math.min(min_clock or math.huge, st.min.sm_clock_mhz) end
    w.mem_clock_mhz = w.mem_clock_mhz + mean('mem_clock_mhz')
    w.util_gpu_pct = w.util_gpu_pct + mean('util_gpu_pct')
    w.util_mem_pct = w.util_mem_pct + mean('util_mem_pct')
    w.mem_used_bytes = math.max(w.mem_used_bytes, st.max.mem_used_bytes or 0)
    w.seconds = math.max(w.seconds, st.t_last - st.t_first)
    w.throttle = w.throttle | (math.tointeger(st.throttle_any) or 0)
  end
  w.sm_clock_min_mhz = min_clock or 0
  return w
end

-- mon:errors() -> reads that failed and the last reason.
function Monitor:errors()
  if not self.s then return 0, '' end
  return self.s:errors()
end

function Monitor:close()
  if self.s then
    self.s:close()
    self.s = nil
  end
end
Monitor.__close = Monitor.close

-- mon:describe() -> one line: the devices and how they are read, or why there is nothing.
function Monitor:describe()
  if not self.available then return 'unavailable (' .. tostring(self.reason) .. ')' end
  local parts = {}
  for i = 1, self.n do
    local d = self.devices[i]
    parts[#parts + 1] = string.format('%s (%s %d%s), power limit %.0f W, power %s, %s', d.name, self.source, d.index,
      d.pci_bus_id ~= '' and (' ' .. d.pci_bus_id) or '', d.power_limit_w, d.power_source,
      d.energy_counter and 'energy counter' or 'no energy counter: energy from power x time')
  end
  return table.concat(parts, '; ') .. string.format('; every %g ms', self.interval_ms)
end

-- ---- across ranks ----

-- telemetry.reduce_window(w) -> the figures of every rank's window together (two collectives:
-- every rank calls it, with or without telemetry; log.reduce's rules): gpus; gpu_power_w (mean
-- per GPU), gpu_power_total_w, gpu_energy_j (counter), gpu_energy_power_j (power x time),
-- gpu_temp_c (max), gpu_sm_clock_mhz (mean), gpu_sm_clock_min_mhz (min), gpu_mem_clock_mhz,
-- gpu_util_pct, gpu_mem_util_pct (means), gpu_mem_used_gib (max), gpu_throttle_reasons (OR),
-- seconds. Empty when no rank has a GPU to read.
function telemetry.reduce_window(w)
  local sums = log.reduce({ w.gpus, w.power_w, w.energy_j, w.energy_power_j, w.sm_clock_mhz, w.mem_clock_mhz,
    w.util_gpu_pct, w.util_mem_pct, w.counter * w.gpus }, 'sum')
  local maxes = { w.temp_c, w.mem_used_bytes, w.seconds, w.gpus > 0 and -w.sm_clock_min_mhz or -math.huge }
  for b = 0, 15 do maxes[#maxes + 1] = (w.throttle >> b) & 1 end
  maxes = log.reduce(maxes, 'max')
  local g = sums[1]
  if g == 0 then return {} end
  local throttle = 0
  for b = 0, 15 do throttle = throttle | (math.tointeger(maxes[5 + b]) << b) end
  return { gpus = math.tointeger(g) or g, gpu_power_w = sums[2] / g, gpu_power_total_w = sums[2], gpu_energy_j = sums[3],
    gpu_energy_power_j = sums[4], gpu_sm_clock_mhz = sums[5] / g, gpu_mem_clock_mhz = sums[6] / g,
    gpu_util_pct = sums[7] / g, gpu_mem_util_pct = sums[8] / g, gpu_temp_c = maxes[1],
    gpu_mem_used_gib = maxes[2] / 2 ^ 30, seconds = maxes[3], gpu_sm_clock_min_mhz = -maxes[4],
    gpu_throttle_reasons = throttle, energy_source = sums[9] == g and 'counter' or 'power' }
end

-- ---- telemetry.Recorder: what a recipe needs, in one object ----
-- telemetry.Recorder{enabled =, device =, interval_ms =, unit = 'image', prometheus = {dir =,
--   port =, addr =}, job =}
-- enabled false: no GPU sampling, every figure method is a no-op (and no collective runs; all
-- ranks have the same options), but the Prometheus exporter, when asked for, still publishes the
-- training metrics (issue 27: --telemetry off used to drop --prometheus-port/-dir silently).
-- Otherwise every method that returns figures is collective: call it on every rank.
local Recorder = {}
Recorder.__index = Recorder
Recorder.__name = 'v100.telemetry.Recorder'

function telemetry.Recorder(opts)
  opts = errors.check_opts('telemetry.Recorder', opts, { 'enabled', 'unit', 'job', 'device', 'interval_ms', 'source', 'prometheus' })
  errors.check_opts('telemetry.Recorder: prometheus', opts.prometheus, { 'dir', 'port', 'addr' })
  local self = setmetatable({ enabled = opts.enabled ~= false, unit = opts.unit or 'image', job = opts.job or 'v100lua',
    samples_total = 0, acc = { energy_j = 0, energy_power_j = 0, samples = 0, seconds = 0, gpus = 0 } }, Recorder)
  local p = opts.prometheus
  if p and (p.dir or p.port) then
    self.prom = prometheus.Exporter{ dir = p.dir, port = p.port, addr = p.addr, labels = { job = self.job } }
  end
  if not self.enabled then return self end
  self.mon = telemetry.Monitor{ device = opts.device, interval_ms = opts.interval_ms, source = opts.source }
  self.start_mark = self.mon:mark()
  return self
end

-- rec:describe() -> the recipe's header line ('telemetry: ...'), with the endpoint and file.
function Recorder:describe()
  local line = 'telemetry: ' .. (self.enabled and self.mon:describe() or 'off')
  if self.prom then
    if self.prom.port then line = line .. '; prometheus ' .. self.prom.url end
    if self.prom.path then line = line .. '; prometheus textfile ' .. self.prom.path end
  end
  return line
end

local function per(unit) return 'energy_per_' .. unit .. '_j' end

-- rec:window(samples) -> metrics since the last call, over every rank, for logger:log (empty
-- when off or no GPU anywhere); samples: the images / sequences all ranks processed in it.
-- The windows' figures add up to the run's training figures (rec:summary()).
function Recorder:window(samples)
  if not self.enabled then return {} end
  local m = telemetry.reduce_window(self.mon:window(true))
  if m.gpus then
    if samples and samples > 0 then m[per(self.unit)] = m.gpu_energy_j / samples end
    local a = self.acc
    a.energy_j, a.energy_power_j = a.energy_j + m.gpu_energy_j, a.energy_power_j + m.gpu_energy_power_j
    a.samples, a.seconds, a.gpus = a.samples + (samples or 0), a.seconds + m.seconds, m.gpus
    a.source = (a.source == 'power' or m.energy_source == 'power') and 'power' or 'counter'
    m.gpu_window_s, m.seconds = m.seconds, nil
  end
  self.last = m
  return m
end

-- rec:skip(): the next window starts now (what ran since, e.g. an evaluation, is left out of the
-- windows' figures). Not collective.
function Recorder:skip()
  if self.enabled then self.mon:window(true) end
end

-- rec:bar(fields, m) adds the power to a progress bar's fields (W: all GPUs together).
function Recorder:bar(fields, m)
  m = m or self.last
  if m and m.gpu_power_total_w then fields.W = string.format('%.0f', m.gpu_power_total_w) end
  return fields
end

-- rec:begin() marks the start of an epoch; rec:finish(samples) -> the epoch's figures over every
-- rank {energy_j, energy_power_j, gpus, seconds, energy_per_<unit>_j, source} (nil when off or no
-- GPU) and the text of the recipe's line.
function Recorder:begin()
  if not self.enabled then return end
  self.epoch_mark = self.mon:mark()
  self.mon:window(true)
end

local function summed(self, mark, samples)
  local e = self.mon:since(mark)
  local r = log.reduce({ e.energy_j, e.energy_power_j, e.gpus, e.source == 'counter' and e.gpus or 0 }, 'sum')
  local secs = log.reduce({ e.seconds }, 'max')[1]
  if r[3] == 0 then return nil end
  local out = { energy_j = r[1], energy_power_j = r[2], gpus = math.tointeger(r[3]) or r[3], seconds = secs,
    source = r[4] == r[3] and 'counter' or 'power' }
  if samples and samples > 0 then out[per(self.unit)] = out.energy_j / samples end
  local diff = out.energy_j > 0 and math.abs(out.energy_power_j - out.energy_j) / out.energy_j or 0
  out.text = string.format('energy %.0f J (%s; power x time %.0f J, %.1f%% apart) %.4g J/%s, %d GPU%s, %.0f W',
    out.energy_j, out.source == 'counter' and 'counter' or 'power x time: no energy counter', out.energy_power_j,
    100 * diff, out[per(self.unit)] or 0, self.unit, out.gpus, out.gpus == 1 and '' or 's',
    secs > 0 and out.energy_j / secs or 0)
  return out
end

function Recorder:finish(samples)
  if not self.enabled or not self.epoch_mark then return nil end
  local r = summed(self, self.epoch_mark, samples)
  self.epoch_mark = nil
  return r
end

-- rec:total(samples) -> the same figures from the recorder's start.
function Recorder:total(samples)
  if not self.enabled then return nil end
  return summed(self, self.start_mark, samples)
end

-- rec:summary() -> the recipe's closing line: the training windows' energy (rec:window) per
-- sample and the whole run's (evaluation, checkpoints and start-up included); nil when off or
-- without a GPU. Collective.
function Recorder:summary()
  if not self.enabled then return nil end
  local tot = self:total()
  local a = self.acc
  if not tot or a.gpus == 0 then return nil end
  local diff = a.energy_j > 0 and math.abs(a.energy_power_j - a.energy_j) / a.energy_j or 0
  return string.format('energy: training %.0f J for %d %ss = %.4g J/%s (%s; power x time %.0f J, %.1f%% apart), ' ..
    '%d GPU%s, %.0f W average; whole run %.0f J in %.0f s', a.energy_j, a.samples, self.unit, a.samples > 0 and a.energy_j / a.samples or 0,
    self.unit, a.source == 'power' and 'power x time: no energy counter' or 'energy counter', a.energy_power_j, 100 * diff,
    a.gpus, a.gpus == 1 and '' or 's', a.seconds > 0 and a.energy_j / a.seconds or 0, tot.energy_j, tot.seconds), {
    energy_j = a.energy_j, energy_power_j = a.energy_power_j, samples = a.samples, gpus = a.gpus,
    [per(self.unit)] = a.samples > 0 and a.energy_j / a.samples or 0, run_energy_j = tot.energy_j, run_seconds = tot.seconds }
end

-- rec:export(train): the Prometheus text of this rank (rank-labelled): the training figures
-- given ({step, epoch, loss, lr, samples_per_second, samples (added to a counter)}) and the GPUs'.
-- Not collective.
function Recorder:export(train, running)
  if not self.prom then return end
  train = train or {}
  self.last_train = train
  local reg = self.prom:registry()
  local unit = self.unit
  reg:add('v100_train_running', 'gauge', 'Whether the training run is in progress (0 after it ended).', running == false and 0 or 1)
  if train.samples then self.samples_total = self.samples_total + train.samples end
  reg:add('v100_train_' .. unit .. 's_total', 'counter', 'Training ' .. unit .. 's processed by all ranks.', self.samples_total)
  if train.step then reg:add('v100_train_step', 'gauge', 'Optimizer steps done.', train.step) end
  if train.epoch then reg:add('v100_train_epoch', 'gauge', 'The epoch in progress.', train.epoch) end
  if train.loss then reg:add('v100_train_loss', 'gauge', 'Training loss over the last logging window.', train.loss) end
  if train.lr then reg:add('v100_train_learning_rate', 'gauge', 'Learning rate.', train.lr) end
  if train.samples_per_second then
    reg:add('v100_train_' .. unit .. 's_per_second', 'gauge', 'Throughput over the last logging window, all ranks.', train.samples_per_second)
  end
  local m = self.last
  if m and m[per(unit)] then
    reg:add('v100_train_energy_per_' .. unit .. '_joules', 'gauge',
      'GPU energy per ' .. unit .. ' over the last logging window (energy counter), all ranks.', m[per(unit)])
  end
  local mon = self.mon or { available = false, n = 0 } -- --telemetry off: the training metrics only
  reg:add('v100_telemetry_available', 'gauge', 'Whether this rank reads its GPU (NVML).', mon.available and 1 or 0)
  for i = 1, mon.n do
    local s, info, tot = mon:latest(i), mon.devices[i], mon:totals(i)
    local l = { gpu = tostring(info.index), uuid = info.uuid }
    if s then
      local function g(name, help, v, scale) if v then reg:add(name, 'gauge', help, v * (scale or 1), l) end end
      g('v100_gpu_power_watts', 'Power draw.', s.power_w)
      g('v100_gpu_temperature_celsius', 'GPU temperature.', s.temp_c)
      g('v100_gpu_sm_clock_hertz', 'SM clock.', s.sm_clock_mhz, 1e6)
      g('v100_gpu_memory_clock_hertz', 'Memory clock.', s.mem_clock_mhz, 1e6)
      g('v100_gpu_utilization_ratio', 'Fraction of the last sample period with a kernel running.', s.util_gpu_pct, 0.01)
      g('v100_gpu_memory_utilization_ratio', 'Fraction of the last sample period with memory being read or written.',
        s.util_mem_pct, 0.01)
      g('v100_gpu_memory_used_bytes', 'Device memory in use (all processes).', s.mem_used_bytes)
      g('v100_gpu_throttle_reasons', 'NVML clock event reason bits now.', s.throttle_reasons)
      if s.throttle_reasons then
        for _, r in ipairs(telemetry.THROTTLE_REASONS) do
          reg:add('v100_gpu_throttled', 'gauge', 'Whether a clock event reason holds now (1) or not (0).',
            (math.tointeger(s.throttle_reasons) or 0) & r[1] ~= 0 and 1 or 0,
            { gpu = l.gpu, uuid = l.uuid, reason = r[2] })
        end
      end
    end
    if info.power_limit_w > 0 then reg:add('v100_gpu_power_limit_watts', 'gauge', 'Enforced power limit.', info.power_limit_w, l) end
    local e = energy_of(tot)
    reg:add('v100_gpu_energy_joules_total', 'counter', 'Energy the GPU used since the run started (its energy counter).', e, l)
  end
  self.prom:update(reg)
end

function Recorder:close()
  if self.prom then
    local last = {}
    for k, v in pairs(self.last_train or {}) do if k ~= 'samples' then last[k] = v end end
    self:export(last, false)
    self.prom:close()
    self.prom = nil
  end
  if self.mon then self.mon:close() end
end
Recorder.__close = Recorder.close

-- The recipes' options (recipe.options rows), appended with table.unpack(telemetry.options()).
function telemetry.options()
  return {
    { '--telemetry', 'on', 'sample the GPU with NVML (power, energy, clocks, temperature; read-only) and report energy per sample; without a driver it says why and the run goes on', { 'on', 'off' } },
    { '--telemetry-interval-ms', 100, 'milliseconds between telemetry samples', recipe.integer{ min = 1, max = 3600000 } },
    { '--prometheus-dir', 'none', 'write Prometheus metrics to DIR/v100lua_rank<R>.prom (node-exporter textfile collector; atomic renames)', argname = '<DIR>' },
    { '--prometheus-port', 0, 'serve Prometheus metrics at /metrics on this port + the local rank (0: off)', recipe.integer{ min = 0, max = 65535 } },
    { '--prometheus-addr', '127.0.0.1', 'the address the metrics endpoint listens on (0.0.0.0 or 0: every interface, with a warning: the endpoint has no authentication)', argname = '<ADDR>' },
  }
end

-- A Recorder from the options above (after recipe.options) for a run on dev.
function telemetry.from_options(opts, dev, unit, job)
  return telemetry.Recorder{ enabled = opts.telemetry ~= 'off', device = dev, interval_ms = opts.telemetry_interval_ms,
    unit = unit, job = job, prometheus = { dir = opts.prometheus_dir ~= 'none' and opts.prometheus_dir or nil,
      port = opts.prometheus_port ~= 0 and opts.prometheus_port or nil, addr = opts.prometheus_addr } }
end

return telemetry
