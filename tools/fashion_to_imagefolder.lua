-- tools/fashion_to_imagefolder.lua: writes Fashion-MNIST (the Debian package's IDX files, through
-- data.fashion_mnist) as an ImageFolder of JPEGs, so that the JPEG pipeline of v100.data runs on
-- real encoded images.
--
--   v100lua tools/fashion_to_imagefolder.lua OUT [--size 224] [--limit N] [--quality 95] [--root DIR]
--
-- Writes OUT/train/<class>/<i>.JPEG (the 60000 training images) and OUT/val/<class>/<i>.JPEG (the
-- 10000 test images), <i> the 0-based index in the IDX file, zero-padded so that the sorted file
-- order is the IDX order within a class. Class directories are named "<label>_<name>" ("0_T-shirt_top"
-- ... "9_Ankle_boot"): sorted, they give the IDX labels. With --size other than 28 the images are
-- upscaled (bilinear) and written with 3 channels: an ImageNet-sized variant for the 224x224
-- training path; at 28 they are written as gray JPEGs. --limit N writes the first N of each split
-- (every class must occur among them: N >= 30 or so).
local data = require 'v100.data'

local function usage(msg)
  io.stderr:write((msg and msg .. '\n' or ''),
    'usage: v100lua tools/fashion_to_imagefolder.lua OUT [--size 224] [--limit N] [--quality 95] [--root DIR]\n')
  os.exit(2)
end

local out, size, limit, quality, root
local i = 1
while i <= #arg do
  local a = arg[i]
  local function value()
    i = i + 1
    if arg[i] == nil then usage(a .. ' needs a value') end
    return arg[i]
  end
  if a == '--size' then size = math.tointeger(tonumber(value()))
  elseif a == '--limit' then limit = math.tointeger(tonumber(value()))
  elseif a == '--quality' then quality = math.tointeger(tonumber(value()))
  elseif a == '--root' then root = value()
  elseif a == '-h' or a == '--help' then usage()
  elseif a:sub(1, 2) == '--' then usage('unknown option ' .. a)
  elseif out == nil then out = a
  else usage('one OUT directory only') end
  i = i + 1
end
if not out then usage('OUT is missing') end
size = size or 28
if not size or size < 1 or size > 4096 then usage('--size must be an integer in 1..4096') end
if limit ~= nil and limit < 1 then usage('--limit must be a positive integer') end
quality = quality or 95

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

local function class_dir(c)
  return string.format('%d_%s', c, (data.FASHION_MNIST_CLASSES[c + 1]:gsub('[^%w%-]', '_')))
end

local written = 0
for _, split in ipairs{{'train', 'train'}, {'test', 'val'}} do
  local x, y = data.fashion_mnist(split[1], {root = root})
  local n = x.shape[1]
  if limit and limit < n then n = limit end
  local dir = out .. '/' .. split[2]
  local mk = {}
  for c = 0, 9 do mk[#mk + 1] = sh_quote(dir .. '/' .. class_dir(c)) end
  assert(os.execute('mkdir -p ' .. table.concat(mk, ' ')), 'fashion_to_imagefolder: mkdir failed under ' .. dir)
  local labels = y:narrow(1, 1, n):totable()
  local count = {}
  for _, c in ipairs(labels) do count[c] = (count[c] or 0) + 1 end
  for c = 0, 9 do
    -- An empty class directory would make the folder unreadable (ImageFolder refuses it, as
    -- torchvision does), and leaving it out would shift the labels of the classes after it.
    if not count[c] then usage(string.format('--limit %d leaves class %s of %s without images', n, class_dir(c), split[1])) end
  end
  for k = 1, n do
    local img = x:narrow(1, k, 1):view{28, 28, 1}
    if size ~= 28 then img = data.resize_image(img, size, size):expand{size, size, 3} end
    data.encode_jpeg(img, string.format('%s/%s/%05d.JPEG', dir, class_dir(labels[k]), k - 1), {quality = quality})
    written = written + 1
  end
  io.write(string.format('%s: %d images (%dx%d, %s) in %s\n', split[2], n, size, size, size == 28 and 'gray' or 'RGB', dir))
end
io.write(string.format('wrote %d JPEGs under %s\n', written, out))
