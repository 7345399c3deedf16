-- bench/bench_ops.lua: GEMM and memory-bound ops on one GPU, for comparison with
-- bench/bench_ops.py (PyTorch, the same problems and the same BENCH names).
--
--   gemm_bf16_8192, gemm_f16_8192, gemm_f32_tf32_8192   C = A @ B, 8192^3, TFLOP/s (2*M*N*K flops)
--   linear_bf16_16384x1024x4096, linear_f16_...   y = x W^T + b (BERT-Large's first FFN GEMM at
--                    batch 128 x seq 128), TFLOP/s (2*M*N*K flops); the bias in cuBLASLt's epilogue
--   add_f32_1GiB     c = a + b, a and b 1 GiB of f32 each, GB/s counting 3 GiB moved
--   sum_f32_1GiB     a:sum() of 1 GiB of f32, GB/s counting the 1 GiB read
--   empty_free_<size>  v100.empty{n} (u8, cuda) then t:free(), pairs/s (the allocator as a
--                      script sees it; bench_alloc.py measures torch.empty + del the same way)
--
-- Method: inputs from randn; `--warmup` untimed runs, then `--runs` runs (default 20) each timed
-- with a pair of CUDA events around the op alone; the median is reported. Results are freed
-- after the end event, outside the timed region, and come back from the pool's cache.
--
-- usage: v100lua bench/bench_ops.lua [--runs 20] [--warmup 3] [--only gemm|linear|add|sum|empty]
local v100 = require 'v100'

local opts = {runs = 20, warmup = 3, only = nil, seconds = 0.5}
local i = 1
while i <= #arg do
  local k, v = arg[i], arg[i + 1]
  if k == '--runs' then opts.runs = assert(math.tointeger(tonumber(v)), '--runs N')
  elseif k == '--warmup' then opts.warmup = assert(math.tointeger(tonumber(v)), '--warmup N')
  elseif k == '--only' then opts.only = v
  elseif k == '--seconds' then opts.seconds = assert(tonumber(v), '--seconds S')
  else error('bench_ops.lua: unknown option ' .. tostring(k)) end
  i = i + 2
end

if not v100.cuda.is_available() then
  io.stderr:write('bench_ops.lua: no CUDA device; these benchmarks are GPU only\n')
  os.exit(1)
end
local dev = v100.device()
local ok, props = pcall(v100.cuda.get_device_properties, tonumber(dev:match('%d+$')) or 0)
print(string.format('# device %s: %s, v100lua %s', dev, ok and props.name or '?', v100.version))

local function median(xs)
  table.sort(xs)
  local n = #xs
  if n % 2 == 1 then return xs[(n + 1) // 2] end
  return 0.5 * (xs[n // 2] + xs[n // 2 + 1])
end

-- Times fn() (which returns a tensor to free, or nil) with CUDA events; returns the median ms.
local function time_op(fn)
  local e0 = v100.cuda.Event{timing = true}
  local e1 = v100.cuda.Event{timing = true}
  for _ = 1, opts.warmup do
    local r = fn()
    if r then r:free() end
  end
  v100.cuda.synchronize()
  local ms = {}
  for r = 1, opts.runs do
    e0:record()
    local out = fn()
    e1:record()
    e1:synchronize()
    ms[r] = e0:elapsed_time(e1)
    if out then out:free() end
  end
  return median(ms)
end

local function report(name, value, unit)
  print(string.format('BENCH %s %.6g %s', name, value, unit))
  io.stdout:flush()
end

local function want(group) return opts.only == nil or opts.only == group end

if want('gemm') then
  local n = 8192
  for _, cfg in ipairs{{'bf16', 'gemm_bf16_8192', false}, {'f16', 'gemm_f16_8192', false},
                       {'f32', 'gemm_f32_tf32_8192', true}} do
    local dtype, name, tf32 = cfg[1], cfg[2], cfg[3]
    local old = v100.get_allow_tf32()
    v100.set_allow_tf32(tf32)
    local a <close> = v100.randn({n, n}, {dtype = dtype, device = dev})
    local b <close> = v100.randn({n, n}, {dtype = dtype, device = dev})
    local ms = time_op(function() return a:mm(b) end)
    v100.set_allow_tf32(old)
    report(name, 2 * n * n * n / (ms * 1e-3) / 1e12, 'TFLOP/s')
  end
end

if want('linear') then
  local F = require 'v100.nn.functional'
  local m, n, k = 16384, 4096, 1024
  for _, dtype in ipairs{'bf16', 'f16'} do
    local x <close> = v100.randn({m, k}, {dtype = dtype, device = dev})
    local w <close> = v100.randn({n, k}, {dtype = dtype, device = dev})
    local b <close> = v100.randn({n}, {dtype = dtype, device = dev})
    local ms = time_op(function() return F.linear(x, w, b) end)
    report(string.format('linear_%s_%dx%dx%d', dtype, m, k, n), 2 * m * n * k / (ms * 1e-3) / 1e12, 'TFLOP/s')
  end
end

local GiB = 1 << 30
local n_1gib = GiB // 4 -- f32 elements in 1 GiB

if want('add') then
  local a <close> = v100.randn({n_1gib}, {device = dev})
  local b <close> = v100.randn({n_1gib}, {device = dev})
  local ms = time_op(function() return a + b end)
  report('add_f32_1GiB', 3 * GiB / (ms * 1e-3) / 1e9, 'GB/s')
end

if want('sum') then
  local a <close> = v100.randn({n_1gib}, {device = dev})
  local ms = time_op(function() return a:sum() end)
  report('sum_f32_1GiB', GiB / (ms * 1e-3) / 1e9, 'GB/s')
end

if want('empty') then
  local clock = v100.io.time
  for _, sz in ipairs{{512, '512B'}, {64 << 10, '64KiB'}, {4 << 20, '4MiB'}, {64 << 20, '64MiB'}} do
    local nbytes, label = sz[1], sz[2]
    local o = {dtype = 'u8', device = dev}
    v100.empty({nbytes}, o):free() -- warm-up: the pool caches a segment
    v100.cuda.synchronize()
    local rates = {}
    for r = 1, 5 do
      local pairs_done, batch = 0, 1
      local t0 = clock()
      local t1 = t0
      while t1 - t0 < opts.seconds do
        for _ = 1, batch do v100.empty({nbytes}, o):free() end
        pairs_done = pairs_done + batch
        if batch < 65536 then batch = batch * 2 end
        t1 = clock()
      end
      rates[r] = pairs_done / (t1 - t0)
    end
    report('empty_free_' .. label, median(rates), 'pairs/s')
  end
end
