-- bench/bn_fuse.lua: ResNet-50's memory-bound layers on one GPU, fused and composed, forward and
-- backward timed apart: batch norm + ReLU, batch norm + residual add + ReLU (as
-- scripts/v100/models/resnet.lua calls them, and as the ops bn, +, relu composed), and the stem's
-- 3x3 stride-2 max pool. fp16 (f32 statistics), channels-last, batch 256 by default.
--
--   BENCH bn_relu_<fused|composed>_<fw|bw>_<shape> <ms> ms
--   BENCH bn_add_relu_<fused|composed>_<fw|bw>_<shape> <ms> ms
--   BENCH maxpool_<fw|bw>_<shape> <ms> ms
--   BENCH <name>_gbs <GB/s> GB/s    the fused forms' and the max pool's bytes (the predicted
--                                   passes over the activation, docs/NN.md) over the time
--
-- Method: `--warmup` untimed runs, then `--runs` runs, each timed with CUDA events around the
-- forward call alone or the backward call alone (the forward of a backward run is outside its
-- events); the median is reported.
--
-- usage: v100lua bench/bn_fuse.lua [--batch 256] [--runs 20] [--warmup 3]
local v100 = require 'v100'
local F = require 'v100.nn.functional'

local opts = { runs = 20, warmup = 3, batch = 256 }
local i = 1
while i <= #arg do
  local k, v = arg[i], arg[i + 1]
  if k == '--runs' then opts.runs = assert(math.tointeger(tonumber(v)), '--runs N')
  elseif k == '--warmup' then opts.warmup = assert(math.tointeger(tonumber(v)), '--warmup N')
  elseif k == '--batch' then opts.batch = assert(math.tointeger(tonumber(v)), '--batch N')
  else error('bn_fuse.lua: unknown option ' .. tostring(k)) end
  i = i + 2
end
if not v100.cuda.is_available() then
  io.stderr:write('bn_fuse.lua: no CUDA device; these benchmarks are GPU only\n')
  os.exit(1)
end
local dev = v100.device()
local C = require('v100.core')._nn

local function median(xs)
  table.sort(xs)
  local n = #xs
  if n % 2 == 1 then return xs[(n + 1) // 2] end
  return 0.5 * (xs[n // 2] + xs[n // 2 + 1])
end

local function report(name, value, unit)
  print(string.format('BENCH %s %.6g %s', name, value, unit))
  io.stdout:flush()
end

-- Median ms of fw() (forward) and of the backward of its output with grad g; the leaves' .grad
-- are dropped after each run, so that every backward writes them afresh.
local function time_fw_bw(fw, g, leaves)
  local e0, e1 = v100.cuda.Event{ timing = true }, v100.cuda.Event{ timing = true }
  local fms, bms = {}, {}
  for r = 1, opts.warmup + opts.runs do
    v100.cuda.synchronize()
    e0:record()
    local y = fw()
    e1:record()
    e1:synchronize()
    if r > opts.warmup then fms[#fms + 1] = e0:elapsed_time(e1) end
    e0:record()
    y:backward(g)
    e1:record()
    e1:synchronize()
    if r > opts.warmup then bms[#bms + 1] = e0:elapsed_time(e1) end
    y:free()
    for _, t in ipairs(leaves) do t.grad = nil end
    collectgarbage()
  end
  return median(fms), median(bms)
end

local function nhwc(shape, requires)
  local t = C.to_channels_last(v100.randn(shape, { dtype = 'f16', device = dev }))
  if requires then t:requires_grad_(true) end
  return t
end

local N = opts.batch
for _, shape in ipairs({ { N, 64, 56, 56 }, { N, 256, 56, 56 } }) do
  local tag = table.concat(shape, 'x')
  local c = shape[2]
  local bytes = 2 * shape[1] * shape[2] * shape[3] * shape[4] -- one pass over the activation
  local x, r, g = nhwc(shape, true), nhwc(shape, true), nhwc(shape)
  local w = v100.ones({ c }, { device = dev }):requires_grad_(true)
  local b = v100.zeros({ c }, { device = dev }):requires_grad_(true)
  local rm, rv = v100.zeros({ c }, { device = dev }), v100.ones({ c }, { device = dev })
  local forms = {
    { 'bn_relu', function(fused)
      if fused then return F.batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5, { activation = 'relu' }) end
      return F.batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5):relu()
    end, 3, 5 },
    { 'bn_add_relu', function(fused)
      if fused then return F.batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5, { activation = 'relu', residual = r }) end
      return (F.batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5) + r):relu()
    end, 4, 7 },
  }
  for _, f in ipairs(forms) do
    for _, fused in ipairs({ true, false }) do
      local fms, bms = time_fw_bw(function() return f[2](fused) end, g, { x, r, w, b })
      local name = string.format('%s_%s', f[1], fused and 'fused' or 'composed')
      report(string.format('%s_fw_%s', name, tag), fms, 'ms')
      report(string.format('%s_bw_%s', name, tag), bms, 'ms')
      if fused then
        report(string.format('%s_fw_%s_gbs', name, tag), f[3] * bytes / (fms * 1e-3) / 1e9, 'GB/s')
        report(string.format('%s_bw_%s_gbs', name, tag), f[4] * bytes / (bms * 1e-3) / 1e9, 'GB/s')
      end
    end
  end
  x, r, g = nil, nil, nil
  collectgarbage()
end

do -- the stem's max pool: 64 x 112 x 112 in, 56 x 56 out
  local shape = { N, 64, 112, 112 }
  local tag = table.concat(shape, 'x')
  local x = nhwc(shape, true)
  local g = nhwc({ N, 64, 56, 56 })
  local fms, bms = time_fw_bw(function() return F.max_pool2d(x, 3, { stride = 2, padding = 1 }) end, g, { x })
  local xin, yout = 2 * N * 64 * 112 * 112, 2 * N * 64 * 56 * 56
  report('maxpool_fw_' .. tag, fms, 'ms')
  report('maxpool_bw_' .. tag, bms, 'ms')
  -- forward: x read, y and the 1-byte offsets written; backward: dy and offsets read, dx written
  report('maxpool_fw_' .. tag .. '_gbs', (xin + yout * 1.5) / (fms * 1e-3) / 1e9, 'GB/s')
  report('maxpool_bw_' .. tag .. '_gbs', (xin + yout * 1.5) / (bms * 1e-3) / 1e9, 'GB/s')
end
