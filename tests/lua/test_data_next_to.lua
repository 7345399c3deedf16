-- tests/lua/test_data_next_to.lua: the loader binding's next_to(device), which ImageLoader:epoch
-- uses for a CUDA device (an asynchronous copy guarded by a per-slot event). On the CPU it is a
-- plain copy: these tests check what does not depend on CUDA - the batches equal next()'s in
-- order, values and shape (full and short last batch, NCHW/NHWC, f32/f16), the copies are new
-- tensors the ring never overwrites (prefetch 1), next and next_to interleave, and a CUDA device
-- on a build or machine without one is refused; the decoder option's values and refusals.
-- tests/lua/gpu_data.lua covers the CUDA copy and decoder = 'nvjpeg'.
local v100 = require 'v100'
local data = require 'v100.data'
local T = require 'testlib'

local dir = os.tmpname()
os.remove(dir)
assert(os.execute("mkdir -p '" .. dir .. "'"))
local out, ok = T.run_binary(string.format("tools/fashion_to_imagefolder.lua '%s' --limit 130", dir))
assert(ok, 'fashion_to_imagefolder failed:\n' .. out)
local ds = data.ImageFolder(dir .. '/train')

local function raw(loader) return rawget(loader, '_l') end

-- Every batch of epoch e through l:next() (kept: the loader then allocates new buffers) or
-- through l:next_to('cpu').
local function collect(loader, e, how)
  local l = raw(loader)
  l:epoch(loader:indices(e), e, 0)
  local xs, ys = {}, {}
  while true do
    local x, y
    if how == 'next' then x, y = l:next() else x, y = l:next_to('cpu') end
    if not x then break end
    xs[#xs + 1], ys[#ys + 1] = x, y
  end
  return xs, ys
end

for _, case in ipairs{
  {transform = 'train', size = 24, layout = 'nchw', dtype = 'f32', drop_last = false},
  {transform = 'val', size = 24, resize = 26, layout = 'nhwc', dtype = 'f16', drop_last = false, shuffle = false},
  {transform = 'train', size = 20, layout = 'nhwc', dtype = 'bf16', drop_last = true},
} do
  T.test(string.format('next_to(cpu) = next() (%s, %s, %s, prefetch 1)', case.transform, case.layout, case.dtype), function()
    local o = {batch_size = 32, workers = 3, seed = 9, prefetch = 1}
    for k, v in pairs(case) do o[k] = v end
    local a <close> = data.ImageLoader(ds, o)
    local b <close> = data.ImageLoader(ds, o)
    local xa, ya = collect(a, 3, 'next')
    local xb, yb = collect(b, 3, 'next_to')
    T.eq(#xa, case.drop_last and 130 // 32 or (130 + 31) // 32)
    T.eq(#xb, #xa, 'as many batches')
    local S = case.size
    for k = 1, #xa do
      T.eq(xb[k].dtype, case.dtype)
      T.eq(xb[k].device, 'cpu')
      T.eq(xb[k].shape, xa[k].shape, 'shape of batch ' .. k)
      T.tensor_eq(xb[k], xa[k], 'batch ' .. k)
      T.tensor_eq(yb[k], ya[k], 'labels ' .. k)
    end
    if not case.drop_last then
      T.eq(xb[#xb].shape[1], 130 % 32, 'the short last batch')
      T.eq(xb[#xb].shape[case.layout == 'nhwc' and 4 or 2], 3)
      T.eq(xb[#xb].shape[case.layout == 'nhwc' and 2 or 3], S)
    end
    -- Prefetch 1: every batch went through the same ring buffer, so equal batches above also
    -- mean no copy was overwritten by a later refill. A different epoch differs (train) or not (val, unshuffled).
    local xc = collect(b, 4, 'next_to')
    T.eq(#xc, #xb)
    local d = (xc[1]:to('f32') - xb[1]:to('f32')):abs():max():item()
    if case.transform == 'train' then T.ok(d > 0.1, 'epoch 4 differs from epoch 3') else T.eq(d, 0, 'val is epoch-independent') end
  end)
end

T.test('next and next_to interleave in order; ImageLoader:epoch on the CPU is unchanged', function()
  local o = {batch_size = 16, size = 16, workers = 2, prefetch = 2, seed = 4}
  local a <close> = data.ImageLoader(ds, o)
  local ref, refy = collect(a, 1, 'next')
  local l = raw(a)
  l:epoch(a:indices(1), 1, 0)
  for k = 1, #ref do
    local x, y
    if k % 3 == 0 then x, y = l:next() else x, y = l:next_to('cpu') end
    T.tensor_eq(x, ref[k], 'batch ' .. k)
    T.tensor_eq(y, refy[k], 'labels ' .. k)
  end
  T.eq(select('#', l:next_to('cpu')), 0, 'nothing after the last batch')
  local n = 0
  for k, x, y in a:epoch(1) do
    T.tensor_eq(x, ref[k], 'epoch() batch ' .. k)
    n = n + 1
  end
  T.eq(n, #ref)
end)

T.test('next_to a CUDA device without one, and a bad device string', function()
  local a <close> = data.ImageLoader(ds, {batch_size = 16, size = 16, workers = 1})
  local l = raw(a)
  l:epoch(a:indices(0), 0, 0)
  T.raises(function() l:next_to('gpu') end, "expected 'cpu', 'cuda' or 'cuda:N'")
  if not T.has_cuda() then
    T.raises(function() l:next_to('cuda') end, 'cuda', 'no CUDA here')
    -- The loader still works after the refusals.
    local x = l:next_to('cpu')
    T.eq(x.shape, {16, 3, 16, 16})
  else
    -- A loader made for the CPU has no pinned buffers: next_to(cuda) is refused, not slow.
    T.raises(function() l:next_to('cuda') end, 'pinned')
  end
end)

T.test("the decoder option: 'cpu' by default, 'auto' resolves, bad values and missing nvJPEG refused", function()
  local a <close> = data.ImageLoader(ds, {batch_size = 16, size = 16, workers = 1})
  T.eq(a.decoder, 'cpu')
  local b <close> = data.ImageLoader(ds, {batch_size = 16, size = 16, workers = 1, decoder = 'auto'})
  T.eq(b.decoder, 'cpu', "'auto' on the CPU device")
  T.raises(function() data.ImageLoader(ds, {decoder = 'gpu'}) end, "decoder must be 'cpu', 'nvjpeg' or 'auto', got gpu")
  T.eq(type(data.have_nvjpeg()), 'boolean')
  if not data.have_nvjpeg() then
    T.raises(function() data.ImageLoader(ds, {decoder = 'nvjpeg', device = 'cpu'}) end, 'built without nvJPEG')
    -- The runtime refuses it too (the binding's own check, under data.lua's).
    T.raises(function() v100._data.loader(ds._f, {decoder = 'nvjpeg', pinned = true, batch_size = 4, size = 16}) end,
      "decoder 'nvjpeg': v100lua was built without nvJPEG")
  else
    T.raises(function() data.ImageLoader(ds, {decoder = 'nvjpeg', device = 'cpu'}) end, 'needs a CUDA device')
  end
  T.raises(function() v100._data.loader(ds._f, {decoder = 'nvjpeg', pinned = false, batch_size = 4, size = 16}) end,
    "decoder 'nvjpeg'")
  T.eq(a:cpu_fallbacks(), 0)
  T.eq(a:nvjpeg_backend(), 'none')
end)

os.execute("rm -rf '" .. dir .. "'")
T.run()
