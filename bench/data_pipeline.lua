-- bench/data_pipeline.lua: images/s of v100.data's JPEG pipeline (decode + RandomResizedCrop +
-- flip + normalise, C worker threads) on an ImageFolder, for a list of worker counts.
--
--   v100lua bench/data_pipeline.lua PATH [--workers 1,2,4,8,16] [--batches 20] [--batch-size 256]
--                                   [--transform train|val] [--size 224] [--device cpu|cuda]
--                                   [--decoder cpu|nvjpeg|auto]
--
-- PATH is an ImageFolder root (ImageNet's train/, or OUT/train of tools/fashion_to_imagefolder.lua
-- --size 224 for a synthetic stand-in). Prints one line per worker count:
--   BENCH jpeg_<transform>_<workers>w <images/s>          (--decoder cpu)
--   BENCH nvjpeg_<transform>_<workers>w <images/s>        (--decoder nvjpeg: needs --device cuda;
--                                                           the workers only read files and headers)
-- after a warm-up of one batch (file cache, thread start); the batches are timed from the loop's
-- side, including the copy to the device with --device cuda. Compare images/s with the model's
-- training rate: the pipeline must deliver more. The page cache matters: run it twice, the
-- first pass reads from disk.
local v100 = require 'v100'
local data = require 'v100.data'

local function usage(msg)
  io.stderr:write((msg and msg .. '\n' or ''), 'usage: v100lua bench/data_pipeline.lua PATH [--workers 1,2,4] ',
    '[--batches N] [--batch-size B] [--transform train|val] [--size S] [--device cpu|cuda] ',
    '[--decoder cpu|nvjpeg|auto]\n')
  os.exit(2)
end

local path
local o = {workers = '1,2,4,8,16', batches = 20, batch_size = 256, transform = 'train', size = 224, device = 'cpu',
  decoder = 'cpu'}
local i = 1
while i <= #arg do
  local a = arg[i]
  local key = a:match('^%-%-(.+)$')
  if key then
    key = key:gsub('-', '_')
    if o[key] == nil then usage('unknown option ' .. a) end
    i = i + 1
    if arg[i] == nil then usage(a .. ' needs a value') end
    o[key] = type(o[key]) == 'number' and (math.tointeger(tonumber(arg[i])) or usage(a .. ' needs an integer')) or arg[i]
  elseif not path then
    path = a
  else
    usage('one PATH only')
  end
  i = i + 1
end
if not path then usage('PATH is missing') end

local ds = data.ImageFolder(path)
io.write(string.format('# %s: %d images, %d classes; batch %d, %s, size %d, device %s, decoder %s\n', path, ds.n,
  #ds.classes, o.batch_size, o.transform, o.size, o.device, o.decoder))
for w in o.workers:gmatch('%d+') do
  local workers = math.tointeger(tonumber(w))
  local loader <close> = data.ImageLoader(ds, {batch_size = o.batch_size, transform = o.transform, size = o.size,
    workers = workers, device = o.device, prefetch = 4, decoder = o.decoder})
  local want = math.min(o.batches, loader.batches_per_epoch - 1)
  if want < 1 then error('bench: the folder holds fewer than two batches of ' .. o.batch_size) end
  local t0, n = nil, 0
  for k, x in loader:epoch(0) do
    if k == 1 then
      t0 = v100.io.time() -- after the warm-up batch
    else
      n = n + x.shape[1]
      if k - 1 >= want then break end
    end
    x:free()
  end
  if o.device ~= 'cpu' then v100.cuda.synchronize() end
  local dt = v100.io.time() - t0
  local tag = loader.decoder == 'nvjpeg' and 'nvjpeg' or 'jpeg'
  io.write(string.format('BENCH %s_%s_%dw %.1f\n', tag, o.transform, workers, n / dt))
  if loader.decoder == 'nvjpeg' then
    io.write(string.format('# nvjpeg backend %s, %d images decoded on the CPU instead\n', loader:nvjpeg_backend(),
      loader:cpu_fallbacks()))
  end
  io.write(string.format('# %d workers: %d images in %.2f s, %.1f images/s per worker\n', workers, n, dt, n / dt / workers))
  io.flush()
end
