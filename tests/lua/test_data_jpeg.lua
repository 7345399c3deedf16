-- tests/lua/test_data_jpeg.lua: v100.data's JPEG pipeline on real encoded images: a Fashion-MNIST
-- subset written as an ImageFolder by tools/fashion_to_imagefolder.lua, decoded back (transform
-- 'none') against the IDX pixels; batches independent of the worker count, a resumed epoch, rank
-- shards, corrupt and non-JPEG files skipped with their paths, a held batch never overwritten,
-- layouts and dtypes, and the option errors.
local v100 = require 'v100'
local data = require 'v100.data'
local T = require 'testlib'

local N = 500 -- training images written (and as many test images)
local dir = os.tmpname()
os.remove(dir)
local function sh(cmd) assert(os.execute(cmd), cmd) end
sh("mkdir -p '" .. dir .. "'")

local out, ok = T.run_binary(string.format("tools/fashion_to_imagefolder.lua '%s' --limit %d", dir, N))
assert(ok, 'fashion_to_imagefolder failed:\n' .. out)
local train_dir = dir .. '/train'
local ds = data.ImageFolder(train_dir)
local idx_x, idx_y = data.fashion_mnist('train')

-- Max |a - b| of two float tensors of one shape (exact comparisons use == 0).
local function maxdiff(a, b)
  T.eq(a.shape, b.shape, 'shapes')
  return (a:to('f64') - b:to('f64')):abs():max():item()
end

-- The IDX index of dataset sample i (the file name is the 0-based index, zero-padded).
local function idx_of(i) return tonumber(ds:path(i):match('(%d+)%.JPEG$')) end

local function all_batches(loader, e, opts)
  local xs, ys, ks = {}, {}, {}
  for k, x, y in loader:epoch(e, opts) do
    xs[#xs + 1], ys[#ys + 1], ks[#ks + 1] = x, y, k
  end
  return xs, ys, ks
end

T.test('the tool writes an ImageFolder whose labels are the IDX labels', function()
  T.eq(ds.n, N)
  T.eq(#ds.classes, 10)
  T.eq(ds.classes[1], '0_T-shirt_top')
  T.eq(ds.classes[10], '9_Ankle_boot')
  local val = data.ImageFolder(dir .. '/val')
  T.eq(val.n, N)
  local labels = idx_y:narrow(1, 1, N):totable()
  for i = 1, ds.n do
    local j = idx_of(i)
    T.ok(j and j < N, 'file index of ' .. ds:path(i))
    T.eq(ds:label(i), labels[j + 1], 'label of ' .. ds:path(i))
    T.ok(ds:path(i):find('/' .. ds.classes[ds:label(i) + 1] .. '/', 1, true), 'class directory of sample ' .. i)
  end
end)

T.test("transform 'none' gives the IDX pixels within JPEG error (quality 95: mean abs < 2, max < 40 levels)", function()
  local loader <close> = data.ImageLoader(ds, {batch_size = 64, transform = 'none', size = 28, channels = 1,
    mean = {0}, std = {1}, shuffle = false, drop_last = false, workers = 2})
  T.eq(loader.batches_per_epoch, 8)
  local xs, ys, ks = all_batches(loader, 0)
  T.eq(#xs, 8)
  T.eq(ks, {1, 2, 3, 4, 5, 6, 7, 8})
  T.eq(xs[8].shape, {N - 7 * 64, 1, 28, 28})
  local x = v100.cat(xs, 1)
  local y = v100.cat(ys, 1)
  T.eq(x.shape, {N, 1, 28, 28})
  T.eq(y.dtype, 'i64')
  local rows = {}
  for i = 1, N do rows[i] = idx_of(i) end
  local sel <close> = v100.tensor(rows, {dtype = 'i64'})
  local ref = idx_x:index_select(1, sel):to('f32'):view{N, 1, 28, 28}
  local d = (x * 255 - ref):abs()
  local mean_abs, max_abs = d:mean():item(), d:max():item()
  T.ok(mean_abs < 2, string.format('mean abs error %.3f levels', mean_abs))
  T.ok(max_abs < 40, string.format('max abs error %.1f levels', max_abs))
  T.ok(mean_abs > 0, 'JPEG is lossy: some error expected (else the pipeline did not decode)')
  T.eq(y:totable(), idx_y:index_select(1, sel):to('i64'):totable())
  -- The loader decodes exactly what decode_jpeg does, from a path or the file's bytes.
  local f = assert(io.open(ds:path(5), 'rb'))
  local bytes = f:read('a')
  f:close()
  local a = data.decode_jpeg(ds:path(5), {channels = 1})
  local b = data.decode_jpeg(bytes, {channels = 1})
  T.eq(a.shape, {28, 28, 1})
  T.eq(maxdiff(a, b), 0)
  T.ok(maxdiff(a:to('f32'):view{1, 1, 28, 28}, x:narrow(1, 5, 1) * 255) < 1e-3, 'loader row 5 vs decode_jpeg')
  local rgb = data.decode_jpeg(bytes)
  T.eq(rgb.shape, {28, 28, 3})
end)

local train_opts = {batch_size = 48, transform = 'train', size = 24, channels = 3, seed = 5, prefetch = 2}
local function with(base, extra)
  local o = {}
  for k, v in pairs(base) do o[k] = v end
  for k, v in pairs(extra) do o[k] = v end
  return o
end

T.test('train batches do not depend on the worker count; a resumed epoch repeats them', function()
  local l1 <close> = data.ImageLoader(ds, with(train_opts, {workers = 1}))
  local l3 <close> = data.ImageLoader(ds, with(train_opts, {workers = 3}))
  T.eq(l1.workers, 1)
  T.eq(l3.workers, 3)
  T.eq(l1.batches_per_epoch, N // 48) -- drop_last by default
  local x1, y1 = all_batches(l1, 2)
  local x3, y3 = all_batches(l3, 2)
  T.eq(#x1, N // 48)
  T.eq(#x3, #x1)
  for b = 1, #x1 do
    T.eq(x1[b].shape, {48, 3, 24, 24})
    T.eq(maxdiff(x1[b], x3[b]), 0, 'batch ' .. b)
    T.eq(y1[b]:totable(), y3[b]:totable(), 'labels of batch ' .. b)
  end
  -- Normalised with ImageNet's statistics: Fashion-MNIST's black background is (0 - 0.485) / 0.229.
  T.near(x1[1]:min():item(), -0.485 / 0.229, 1e-4)
  -- Resume from batch 4: the same batches as 5.. of the full epoch, counted on from 5.
  local xr, yr, kr = all_batches(l3, 2, {start = 4})
  T.eq(#xr, #x1 - 4)
  T.eq(kr[1], 5)
  for b = 1, #xr do
    T.eq(maxdiff(xr[b], x1[b + 4]), 0, 'resumed batch ' .. (b + 4))
    T.eq(yr[b]:totable(), y1[b + 4]:totable())
  end
  -- Abandoning an epoch mid-way and starting another is fine; another epoch differs.
  for k in l1:epoch(3) do if k == 2 then break end end
  local x4 = all_batches(l1, 4)
  T.ok(maxdiff(x4[1], x1[1]) > 0.1, 'epoch 4 differs from epoch 2')
  local x2again = all_batches(l1, 2)
  T.eq(maxdiff(x2again[3], x1[3]), 0, 'epoch 2 again')
end)

T.test('val: the centre crop, deterministic; NHWC and f16/bf16 outputs', function()
  local base = {batch_size = 50, transform = 'val', size = 24, resize = 26, shuffle = false, workers = 2}
  local a <close> = data.ImageLoader(ds, base)
  local h <close> = data.ImageLoader(ds, with(base, {layout = 'nhwc', dtype = 'f16'}))
  local bf <close> = data.ImageLoader(ds, with(base, {dtype = 'bf16', channels = 1, mean = {0.5}, std = {0.25}}))
  local xa = all_batches(a, 0)
  local xh = all_batches(h, 7)
  local xb = all_batches(bf, 0)
  T.eq(#xa, 10)
  T.eq(xh[1].shape, {50, 3, 24, 24}, 'nhwc: the logical NCHW shape')
  T.ok(xh[1]:is_channels_last(), 'nhwc: channels-last strides')
  T.eq(xh[1].dtype, 'f16')
  T.ok(maxdiff(xh[1], xa[1]) < 0.01, 'NHWC f16 vs NCHW f32')
  T.eq(xb[1].shape, {50, 1, 24, 24})
  -- Gray: (p - 0.5) / 0.25 and RGB channel 1: (p - 0.485) / 0.229 of the same (replicated) pixels.
  local p1 = xb[1]:to('f32') * 0.25 + 0.5
  local p3 = xa[1]:narrow(2, 1, 1) * 0.229 + 0.485
  T.ok(maxdiff(p1, p3) < 0.02, 'gray vs RGB')
  -- resize = size = 28 on 28 x 28 images: the identity, so 'val' gives what 'none' gives.
  local full <close> = data.ImageLoader(ds, with(base, {size = 28, resize = 28}))
  local none <close> = data.ImageLoader(ds, with(base, {size = 28, transform = 'none'}))
  local xf, xn = all_batches(full, 0), all_batches(none, 0)
  T.eq(xf[1].shape, {50, 3, 28, 28})
  T.ok(maxdiff(xf[1], xn[1]) < 1e-5, 'val at full size vs none')
  -- Resize 26 + crop 24 keeps the centre: the 2-pixel black border of Fashion-MNIST is mostly cut
  -- away, so the crop's mean is above the full image's.
  T.ok(xa[1]:mean():item() > xf[1]:mean():item(), 'the centre crop is brighter than the full image')
end)

T.test('two ranks: disjoint shards that cover the data set; three ranks pad by wrapping', function()
  local o = {batch_size = 50, transform = 'none', size = 28, channels = 1, mean = {0}, std = {1}, world_size = 2,
    drop_last = false, seed = 9}
  local r0 <close> = data.ImageLoader(ds, with(o, {rank = 0}))
  local r1 <close> = data.ImageLoader(ds, with(o, {rank = 1}))
  T.eq(r0.batches_per_epoch, 5)
  local i0, i1 = r0:indices(1):totable(), r1:indices(1):totable()
  T.eq(#i0, 250)
  T.eq(#i1, 250)
  local seen = {}
  for _, v in ipairs(i0) do seen[v] = (seen[v] or 0) + 1 end
  for _, v in ipairs(i1) do seen[v] = (seen[v] or 0) + 1 end
  local covered = 0
  for i = 0, N - 1 do if seen[i] == 1 then covered = covered + 1 end end
  T.eq(covered, N, 'every sample on exactly one rank')
  -- The batches of rank 1 are its indices in order.
  local xs, ys = all_batches(r1, 1)
  local x = v100.cat(xs, 1)
  local y = v100.cat(ys, 1):totable()
  for _, j in ipairs{1, 2, 77, 250} do
    local img = data.decode_jpeg(ds:path(i1[j] + 1), {channels = 1}):to('f32'):view{1, 1, 28, 28}
    T.ok(maxdiff(x:narrow(1, j, 1) * 255, img) < 1e-3, 'rank 1 row ' .. j)
    T.eq(y[j], ds:label(i1[j] + 1))
  end
  local sizes, all = {}, {}
  for r = 0, 2 do
    local l <close> = data.ImageLoader(ds, with(o, {rank = r, world_size = 3}))
    local ii = l:indices(0):totable()
    sizes[#sizes + 1] = #ii
    for _, v in ipairs(ii) do all[v] = true end
  end
  T.eq(sizes, {167, 167, 167})
  local n = 0
  for _ in pairs(all) do n = n + 1 end
  T.eq(n, N)
end)

T.test('a corrupt and a non-JPEG file: counted, skipped with their paths, replaced by the next sample', function()
  local root = dir .. '/broken'
  sh(string.format("mkdir -p '%s/a' '%s/b' && cp '%s'/0_T-shirt_top/000*.JPEG '%s/a/' && cp '%s'/1_Trouser/000*.JPEG '%s/b/'",
    root, root, train_dir, root, train_dir, root))
  local good = data.ImageFolder(root)
  -- a/00001.JPEG cut in half (the header parses, the data ends early) and b/0000x.jpg: text.
  local src = good:path(1)
  local f = assert(io.open(src, 'rb'))
  local bytes = f:read('a')
  f:close()
  f = assert(io.open(root .. '/a/00000_cut.JPEG', 'wb'))
  f:write(bytes:sub(1, #bytes // 2))
  f:close()
  f = assert(io.open(root .. '/b/00000_text.jpg', 'wb'))
  f:write('this is not a JPEG\n')
  f:close()
  local bad = data.ImageFolder(root)
  T.eq(bad.n, good.n + 2)
  T.ok(bad:path(1):find('00000_cut.JPEG', 1, true), 'the cut file sorts first in a/')
  local lines = {}
  local saved = io.stderr
  io.stderr = {write = function(_, ...) lines[#lines + 1] = table.concat({...}) end}
  local ok, err = pcall(function()
    local l <close> = data.ImageLoader(bad, {batch_size = 4, transform = 'none', size = 28, channels = 1,
      mean = {0}, std = {1}, shuffle = false, drop_last = false, workers = 3})
    local xs = all_batches(l, 0)
    T.eq(l.skipped, 2)
    local x = v100.cat(xs, 1)
    T.eq(x.shape[1], bad.n, 'every position filled')
    -- Position 1 (the cut file) holds the next readable sample: a/'s first good file.
    local first = data.decode_jpeg(bad:path(2), {channels = 1}):to('f32'):view{1, 1, 28, 28}
    T.ok(maxdiff(x:narrow(1, 1, 1) * 255, first) < 1e-3, 'replacement of the cut file')
    local nb = #lines
    all_batches(l, 1)
    T.eq(#lines, nb, 'reported once per file')
    T.eq(l.skipped, 2)
    l:close()
    T.eq(l.skipped, 2, 'skipped after close')
  end)
  io.stderr = saved
  assert(ok, err)
  local text = table.concat(lines)
  T.ok(text:find('v100.data: skipped ' .. root .. '/a/00000_cut.JPEG: ', 1, true), 'cut file reported: ' .. text)
  T.ok(text:find('v100.data: skipped ' .. root .. '/b/00000_text.jpg: not a readable JPEG', 1, true),
    'text file reported: ' .. text)
  T.eq(#lines, 2)
  -- A shard with nothing readable is an error, not a hang.
  local none = dir .. '/none'
  sh(string.format("mkdir -p '%s/c' && cp '%s/b/00000_text.jpg' '%s/c/x.jpg'", none, root, none))
  io.stderr = {write = function() end}
  local ok2, err2 = pcall(function()
    local l <close> = data.ImageLoader(data.ImageFolder(none), {batch_size = 1, transform = 'none', size = 28})
    all_batches(l, 0)
  end)
  io.stderr = saved
  T.ok(not ok2 and tostring(err2):find('no readable image in this shard', 1, true), tostring(err2))
end)

T.test('a batch held by the caller is never overwritten', function()
  local l <close> = data.ImageLoader(ds, {batch_size = 32, transform = 'none', size = 28, channels = 1,
    mean = {0}, std = {1}, prefetch = 1, workers = 2})
  local first, copy
  for k, x in l:epoch(0) do
    if k == 1 then first, copy = x, x:clone() end
  end
  T.eq(maxdiff(first, copy), 0)
  -- Freed batches go back to the ring (the CUDA path frees each one after copying it).
  for _, x, y in l:epoch(1) do x:free() y:free() end
end)

T.test('bad options and bad inputs give clear errors', function()
  T.raises(function() data.ImageFolder(dir .. '/nope') end, {'ImageFolder: ', '/nope: No such file'})
  T.raises(function() data.ImageFolder(42) end, 'ImageFolder: root must be a directory path')
  T.raises(function() data.ImageLoader({}, {}) end, 'must be a data.ImageFolder')
  T.raises(function() data.ImageLoader(ds, {batch_size = 0}) end, 'batch_size must be an integer in 1..')
  T.raises(function() data.ImageLoader(ds, {transform = 'crop'}) end, "transform must be 'train', 'val' or 'none'")
  T.raises(function() data.ImageLoader(ds, {batchsize = 4}) end, "unknown option 'batchsize'")
  T.raises(function() data.ImageLoader(ds, {mean = {0.5}}) end, 'mean must be a list of 3 numbers')
  T.raises(function() data.ImageLoader(ds, {std = {1, 0, 1}}) end, 'std[2] must be > 0')
  T.raises(function() data.ImageLoader(ds, {channels = 2}) end, 'channels must be 1 or 3')
  T.raises(function() data.ImageLoader(ds, {layout = 'chw'}) end, "layout must be 'nchw' or 'nhwc'")
  T.raises(function() data.ImageLoader(ds, {dtype = 'i32'}) end, 'dtype must be f32, f16 or bf16, got i32')
  T.raises(function() data.ImageLoader(ds, {device = 'gpu'}) end, "device must be 'cpu', 'cuda' or 'cuda:<n>'")
  T.raises(function() data.ImageLoader(ds, {rank = 2, world_size = 2}) end, 'rank must be an integer in 0..1')
  T.raises(function() data.ImageLoader(ds, {workers = 0}) end, 'workers must be an integer in 1..64')
  T.raises(function() data.ImageLoader(ds, {transform = 'val', size = 224, resize = 200}) end,
    "resize (200) must be at least size (224)")
  if not T.has_cuda() then
    T.raises(function() data.ImageLoader(ds, {device = 'cuda'}) end, 'ImageLoader: batch buffer: ')
  end
  local l = data.ImageLoader(ds, {batch_size = 8, transform = 'none', size = 28, workers = 1})
  T.raises(function() l:epoch(0, {start = l.batches_per_epoch + 1}) end, 'start must be an integer in 0..')
  T.raises(function() l:epoch(-1) end, 'epoch must be an integer')
  l:close()
  l:close() -- idempotent
  T.raises(function() l:epoch(0) end, 'ImageLoader: used after close')
  T.raises(function() data.decode_jpeg('\xFF\xD8 not really') end, 'decode_jpeg: <memory>: not a readable JPEG')
  T.raises(function() data.decode_jpeg(dir .. '/missing.jpg') end, {'decode_jpeg: ', 'missing.jpg: No such file'})
  T.raises(function() data.decode_jpeg(ds:path(1), {channels = 4}) end, 'channels must be 1 or 3')
  T.raises(function() data.encode_jpeg(v100.zeros{4, 4}, dir .. '/x.jpg') end,
    'encode_jpeg: the image must be a u8 HxWxC CPU tensor with C = 1 or 3')
  T.raises(function() data.encode_jpeg(v100.zeros({4, 4, 3}, {dtype = 'u8'}), dir .. '/x.jpg', {quality = 101}) end,
    'quality must be an integer in 1..100')
  T.raises(function() data.encode_jpeg(v100.zeros({4, 4, 3}, {dtype = 'u8'}), dir .. '/no/such/dir/x.jpg') end,
    { 'encode_jpeg: ' .. dir .. '/no/such/dir/x.jpg: ', 'No such file' })
end)

T.test('resize_image and the upscaled RGB variant of the tool', function()
  local img = data.decode_jpeg(ds:path(1), {channels = 1})
  local big = data.resize_image(img, 56, 56)
  T.eq(big.shape, {56, 56, 1})
  -- Halving the doubled image gives back roughly the original (bilinear without antialias blurs
  -- edges by a quarter of their step each way); a flat image stays exactly flat.
  local back = data.resize_image(big, 28, 28)
  local mad = (back:to('f32') - img:to('f32')):abs():mean():item()
  T.ok(mad < 10, string.format('mean abs change %.2f levels', mad))
  local flat = v100.full({5, 7, 3}, 77, {dtype = 'u8'})
  T.eq(data.resize_image(flat, 13, 3):to('f32'):min():item(), 77)
  T.eq(data.resize_image(flat, 13, 3):to('f32'):max():item(), 77)
  T.raises(function() data.resize_image(img, 0, 5) end, 'h must be an integer in 1..65535')
  local out2 = dir .. '/big'
  local o3, ok3 = T.run_binary(string.format("tools/fashion_to_imagefolder.lua '%s' --limit 3 --size 64", out2))
  T.ok(not ok3 and o3:find('--limit 3 leaves class ', 1, true), 'a limit leaving a class empty is refused: ' .. o3)
  local o, okb = T.run_binary(string.format("tools/fashion_to_imagefolder.lua '%s' --limit 40 --size 64", out2))
  assert(okb, o)
  local big_ds = data.ImageFolder(out2 .. '/train')
  T.eq(big_ds.n, 40)
  T.eq(data.decode_jpeg(big_ds:path(1)).shape, {64, 64, 3})
  -- The 224 training path on it: RandomResizedCrop of 64 x 64 images to 32 x 32.
  local l <close> = data.ImageLoader(big_ds, {batch_size = 8, size = 32, workers = 2})
  local xs = all_batches(l, 0)
  T.eq(#xs, 5)
  T.eq(xs[1].shape, {8, 3, 32, 32})
end)

T.test('a header claiming more than VL_JPEG_MAX_PIXELS is refused before the pixels are allocated', function()
  -- tests/fuzz/regress: an 8x8 JPEG whose SOF0 says 20000 x 20000 (4e8 pixels, over 2^28); the
  -- fuzzer's mutations of such headers made every decode try a buffer of gigabytes
  local f = assert(io.open('tests/fuzz/regress/jpeg_20000x20000_header.jpg', 'rb'))
  local bytes = f:read('a')
  f:close()
  T.raises(function() data.decode_jpeg(bytes, {channels = 1}) end, 'image of 20000x20000 is over the limit of 268435456 pixels')
  T.raises(function() data.decode_jpeg('tests/fuzz/regress/jpeg_20000x20000_header.jpg') end, 'over the limit')
end)

sh("rm -rf '" .. dir .. "'")
T.run()
