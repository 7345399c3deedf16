-- tests/lua/gpu_data.lua: v100.data's ImageLoader with a CUDA device: batches assembled in pinned
-- host memory and copied to the GPU (asynchronously: l:next_to) equal the CPU loader's bitwise
-- (train augmentation, val, NHWC, f16), also while the stream lags behind; several epochs leave
-- the device pool flat, and a loader closed mid-epoch or left open at exit is fine. Needs a GPU (label gpu).
local v100 = require 'v100'
local data = require 'v100.data'
local T = require 'testlib'
T.cuda_or_skip()

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
-- FASHION_MNIST_ROOT: the IDX folder where the Debian package is not installed (the GPU machine).
local root = os.getenv('FASHION_MNIST_ROOT') or data.FASHION_MNIST_ROOT
local out, ok = T.run_binary(string.format("tools/fashion_to_imagefolder.lua '%s' --limit 300 --size 64 --root '%s'", dir, root))
assert(ok, 'fashion_to_imagefolder failed:\n' .. out)
local ds = data.ImageFolder(dir .. '/train')

local function batches(o, e)
  local l <close> = data.ImageLoader(ds, o)
  local xs, ys = {}, {}
  for k, x, y in l:epoch(e or 1) do
    xs[k], ys[k] = x:to('cpu'), y:to('cpu')
  end
  return xs, ys
end

for _, case in ipairs{
  { transform = 'train', size = 48, layout = 'nchw', dtype = 'f32' },
  { transform = 'val', size = 48, resize = 56, layout = 'nhwc', dtype = 'f16' },
  { transform = 'train', size = 32, layout = 'nhwc', dtype = 'bf16' },
} do
  T.test(string.format('CUDA batches = CPU batches (%s, %s, %s)', case.transform, case.layout, case.dtype), function()
    local o = { batch_size = 32, workers = 4, seed = 5 }
    for k, v in pairs(case) do o[k] = v end
    o.device = 'cpu'
    local cx, cy = batches(o, 2)
    o.device = 'cuda'
    local l <close> = data.ImageLoader(ds, o)
    local n = 0
    for k, x, y in l:epoch(2) do
      T.eq(x.device, 'cuda:0', 'x on the GPU')
      T.eq(y.device, 'cuda:0', 'y on the GPU')
      T.eq(x.dtype, case.dtype)
      if case.layout == 'nhwc' then T.ok(x:is_channels_last(), 'channels-last batch') end
      T.tensor_eq(x:to('cpu'), cx[k], 'batch ' .. k)
      T.tensor_eq(y:to('cpu'), cy[k], 'labels ' .. k)
      n = n + 1
    end
    T.eq(n, #cx, 'as many batches')
  end)
end

T.test('the async copy: batches stay right while the stream lags behind (prefetch 1, slow kernels queued)', function()
  -- With prefetch 1 the ring has one pinned buffer, handed back to the workers right after its
  -- copy was queued. Queuing ~50 ms of matmuls in front of every copy keeps the copy pending
  -- while the workers are ready: only the slot's event keeps them from overwriting the buffer
  -- before the GPU has read it, so equal batches show the guard works.
  local o = { batch_size = 32, workers = 4, seed = 3, size = 32, prefetch = 1, device = 'cpu' }
  local cx, cy = batches(o, 1)
  o.device = 'cuda'
  local l <close> = data.ImageLoader(ds, o)
  local a = v100.randn({ 4096, 4096 }, { device = 'cuda' })
  local got = {}
  local t0 = v100.io.time()
  for k, x, y in l:epoch(1) do
    for _ = 1, 20 do a = a:matmul(a) * 1e-3 end -- queued, not waited for
    got[k] = { x, y }
  end
  local dt_enqueue = v100.io.time() - t0
  v100.cuda.synchronize()
  T.eq(#got, #cx)
  for k = 1, #cx do
    T.tensor_eq(got[k][1]:to('cpu'), cx[k], 'batch ' .. k)
    T.tensor_eq(got[k][2]:to('cpu'), cy[k], 'labels ' .. k)
  end
  io.write(string.format('# %d batches handed out in %.3f s\n', #got, dt_enqueue))
end)

T.test('five epochs on CUDA keep the device pool flat; close mid-epoch', function()
  local l = data.ImageLoader(ds, { batch_size = 50, workers = 4, size = 32, device = 'cuda', prefetch = 3 })
  local after = {}
  for e = 1, 5 do
    for _, x, y in l:epoch(e) do
      local s <close> = x:float():sum()
      T.ok(s:item() == s:item(), 'finite batch')
    end
    collectgarbage()
    collectgarbage()
    v100.cuda.synchronize()
    after[e] = v100.memory.stats().allocated
  end
  T.eq(after[5], after[2], 'device memory after epoch 5 = after epoch 2')
  local it = l:epoch(6)
  it()
  l:close()
  l:close() -- idempotent
  T.raises(function() it() end, 'used after close', 'the iterator of a closed loader')
end)

-- decoder = 'nvjpeg': nvJPEG (its hardware engine on the H200) + our crop kernel against the CPU
-- decoder. Order, shapes and labels must be identical. Pixels differ by the IDCT only (nvJPEG's
-- vs libjpeg-turbo's islow: about +-1 level where they differ) because size = 64 on 64 x 64 images
-- keeps libjpeg-turbo from DCT scaling (every box is <= 64 pixels a side, so 8/8 is the only
-- factor that covers the output) and the kernel samples with the CPU path's taps. One level is
-- 1 / (255 * 0.225) ~ 0.017 after normalisation, and most pixels agree exactly, so a mean abs
-- difference < 0.02 per batch passes for IDCT noise and fails for any geometry error (a shifted
-- tap or a wrong flip moves Fashion-MNIST's hard edges by whole levels: ~0.1 and more).
local NVJPEG_TOL = 0.02
local function mean_abs(a, b) return (a:to('f32') - b:to('f32')):abs():mean():item() end

if data.have_nvjpeg() then
  for _, case in ipairs{
    { transform = 'train', size = 64, layout = 'nchw', dtype = 'f32' },
    { transform = 'val', size = 64, resize = 72, layout = 'nhwc', dtype = 'f16' },
    { transform = 'train', size = 64, layout = 'nhwc', dtype = 'bf16', drop_last = false },
  } do
    T.test(string.format("decoder 'nvjpeg' = CPU decoder within %.2f (%s, %s, %s)", NVJPEG_TOL, case.transform,
      case.layout, case.dtype), function()
      local o = { batch_size = 32, workers = 4, seed = 11 }
      for k, v in pairs(case) do o[k] = v end
      o.device = 'cpu'
      local cx, cy = batches(o, 3)
      o.device, o.decoder = 'cuda', 'nvjpeg'
      local l <close> = data.ImageLoader(ds, o)
      T.eq(l.decoder, 'nvjpeg')
      local n, worst = 0, 0
      for k, x, y in l:epoch(3) do
        T.eq(x.device, 'cuda:0')
        T.eq(x.dtype, case.dtype)
        T.eq(x.shape, cx[k].shape, 'shape of batch ' .. k)
        if case.layout == 'nhwc' then T.ok(x:is_channels_last(), 'channels-last batch') end
        T.tensor_eq(y:to('cpu'), cy[k], 'labels ' .. k)
        local d = mean_abs(x:to('cpu'), cx[k])
        worst = math.max(worst, d)
        T.ok(d < NVJPEG_TOL, string.format('batch %d: mean abs diff %.4f', k, d))
        n = n + 1
      end
      T.eq(n, #cx, 'as many batches')
      io.write(string.format('# nvjpeg backend %s, %d CPU fallbacks, worst batch mean abs diff %.4f\n',
        l:nvjpeg_backend(), l:cpu_fallbacks(), worst))
      T.eq(l:cpu_fallbacks(), 0, 'baseline 4:4:4 JPEGs all decoded by nvJPEG (' .. l:nvjpeg_backend() .. ')')
      T.ok(l:nvjpeg_backend() == 'hardware' or l:nvjpeg_backend() == 'default')
    end)
  end

  T.test("decoder 'nvjpeg': a truncated file is skipped as the CPU decoder skips it (CPU fallback)", function()
    local bad = dir .. '/trunc'
    assert(os.execute(string.format("cp -r '%s/train' '%s'", dir, bad)))
    local bds = data.ImageFolder(bad)
    local victim = bds:path(5)
    local f = assert(io.open(victim, 'rb'))
    local bytes = f:read('a')
    f:close()
    f = assert(io.open(victim, 'wb'))
    f:write(bytes:sub(1, #bytes * 6 // 10))
    f:close()
    local o = { batch_size = 20, workers = 2, size = 64, shuffle = false, drop_last = false }
    local c <close> = data.ImageLoader(bds, o)
    local g <close> = data.ImageLoader(bds, { batch_size = 20, workers = 2, size = 64, shuffle = false,
      drop_last = false, device = 'cuda', decoder = 'nvjpeg' })
    local cys, gys = {}, {}
    for k, x, y in c:epoch(0) do cys[k] = { x, y } end
    for k, x, y in g:epoch(0) do gys[k] = { x:to('cpu'), y:to('cpu') } end
    T.eq(#gys, #cys)
    for k = 1, #cys do
      T.tensor_eq(gys[k][2], cys[k][2], 'labels ' .. k)
      T.ok(mean_abs(gys[k][1], cys[k][1]) < NVJPEG_TOL, 'batch ' .. k)
    end
    T.eq(c.skipped, 1, 'the CPU decoder skipped the file')
    T.eq(g.skipped, 1, 'so did the nvjpeg loader')
    T.ok(g:cpu_fallbacks() >= 1, 'through the CPU fallback')
    os.execute("rm -rf '" .. bad .. "'")
  end)

  T.test("decoder 'nvjpeg': refusals", function()
    T.raises(function() data.ImageLoader(ds, { decoder = 'nvjpeg', device = 'cpu' }) end, 'needs a CUDA device')
    local a <close> = data.ImageLoader(ds, { decoder = 'auto', device = 'cuda', size = 32, batch_size = 16 })
    T.eq(a.decoder, 'nvjpeg', "'auto' on a CUDA device of a build with nvJPEG")
    local l = rawget(a, '_l')
    l:epoch(a:indices(0), 0, 0)
    T.raises(function() l:next() end, 'on the GPU only')
    T.raises(function() l:next_to('cpu') end, 'on the GPU only')
  end)
else
  print("no nvJPEG in this build: the decoder = 'nvjpeg' cases are skipped")
end

-- Left open: the loader's threads and pinned buffers must not break exit (checked by the exit code).
local left_open = data.ImageLoader(ds, { batch_size = 16, workers = 2, size = 32, device = 'cuda' })
left_open:epoch(1)()

os.execute("rm -rf '" .. dir .. "'")
T.run()
