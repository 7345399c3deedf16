-- ext/data/lua/v100/image_data.lua: `v100.image_data`, the image half of v100.data (the data
-- extension, ext/data): JPEG ImageFolders decoded and transformed by C worker threads
-- (ext/data/l_data.c, v100.core._data, over ext/data/). `require 'v100.data'` re-exports every
-- public name of this module (data.ImageFolder, data.ImageLoader, data.decode_jpeg,
-- data.encode_jpeg, data.resize_image, data.have_nvjpeg): scripts use those names.
--   local ds = data.ImageFolder('/data/imagenet/train')       -- ds.classes, ds.n, ds:path(i), ds:label(i)
--   local loader = data.ImageLoader(ds, {batch_size = 256, transform = 'train', device = 'cuda'})
--   for k, x, y in loader:epoch(e) do ... end                  -- x f32 256x3x224x224, y i64 labels
local v100 = require 'v100.base'
local errors = require 'v100.errors'
local dist = require 'v100.dist.comm'
local _data = v100._data

local data = {}

local fail = errors.fail

local function check_int(fname, name, v, lo, hi, level)
  if not (math.tointeger(v) and v >= lo and (not hi or v <= hi)) then
    fail(level + 1, '%s: %s must be an integer in %d..%s, got %s', fname, name, lo, hi and tostring(hi) or 'inf',
      tostring(v))
  end
  return math.tointeger(v)
end

local Folder = {}
Folder.__index = Folder
Folder.__name = 'v100.data.ImageFolder'

-- data.ImageFolder(root): torchvision's ImageFolder layout, root/<class>/<image>.JPEG (also .jpg,
-- .jpeg in any case); classes are the sorted directory names, images sorted within a class.
-- ds.classes (list of names; label c is ds.classes[c + 1]), ds.n, ds:path(i), ds:label(i) for
-- i = 1..ds.n (labels 0-based, as in PyTorch).
function data.ImageFolder(root)
  if type(root) ~= 'string' then fail(2, 'ImageFolder: root must be a directory path, got a %s', type(root)) end
  local f = _data.folder(root)
  return setmetatable({root = root, n = f:n(), classes = f:classes(), _f = f}, Folder)
end

function Folder:path(i) return self._f:path(i) end
function Folder:label(i) return self._f:label(i) end
function Folder:__len() return self.n end

-- data.decode_jpeg(path_or_bytes, {channels = 3}) -> u8 H x W x C CPU tensor. A string starting
-- with the JPEG marker FF D8 is taken as the file's bytes, anything else as a path.
function data.decode_jpeg(src, opts)
  if type(src) ~= 'string' then fail(2, 'decode_jpeg: expected a path or the bytes of a JPEG, got a %s', type(src)) end
  opts = errors.check_opts('decode_jpeg', opts, { 'channels' })
  local channels = opts.channels or 3
  if channels ~= 1 and channels ~= 3 then fail(2, 'decode_jpeg: channels must be 1 or 3, got %s', tostring(channels)) end
  return _data.decode(src, src:sub(1, 2) == '\xFF\xD8', channels)
end

-- data.encode_jpeg(img, path, {quality = 95}): img a u8 H x W x C CPU tensor, C = 1 (gray) or 3
-- (RGB); 4:4:4 chroma (no subsampling).
function data.encode_jpeg(img, path, opts)
  if type(path) ~= 'string' then fail(2, 'encode_jpeg: path must be a string, got a %s', type(path)) end
  opts = errors.check_opts('encode_jpeg', opts, { 'quality' })
  local q = check_int('encode_jpeg', 'quality', opts.quality or 95, 1, 100, 2)
  _data.encode(img, path, q)
end

-- data.resize_image(img, h, w) -> u8 h x w x C: bilinear (align_corners = false), no antialias.
function data.resize_image(img, h, w)
  return _data.resize(img, check_int('resize_image', 'h', h, 1, 65535, 2), check_int('resize_image', 'w', w, 1, 65535, 2))
end

-- data.have_nvjpeg() -> whether this build has nvJPEG (ImageLoader's decoder = 'nvjpeg').
function data.have_nvjpeg() return _data.have_nvjpeg() end

local IMAGENET_MEAN, IMAGENET_STD = {0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}

local LOADER_OPTS = { 'batch_size', 'transform', 'size', 'resize', 'mean', 'std', 'channels', 'layout', 'dtype', 'workers',
  'prefetch', 'device', 'shuffle', 'seed', 'drop_last', 'rank', 'world_size', 'decoder' }

local Loader = {}
Loader.__name = 'v100.data.ImageLoader'
Loader.__index = function(self, k)
  if k == 'skipped' then
    local l = rawget(self, '_l')
    return l and l:skipped() or rawget(self, '_skipped_at_close') or 0
  end
  return Loader[k]
end

-- data.ImageLoader(ds, opts): batches of an ImageFolder decoded and transformed by C worker
-- threads (docs/LUA_API.md, "Image data"). opts (defaults):
--   batch_size (256), transform ('train': RandomResizedCrop + flip; 'val': Resize(resize) +
--   CenterCrop(size); 'none': images as they are, all size x size), size (224), resize (256),
--   channels (3; 1 = gray), mean/std (ImageNet's for 3 channels, {0}/{1} for 1), layout ('nchw' or
--   'nhwc'), dtype ('f32', 'f16', 'bf16'), workers (the cores divided among this node's ranks, at most 16), prefetch (4 batches),
--   device ('cpu'; 'cuda...' assembles batches in pinned memory and copies them there), shuffle
--   (true), seed (0), drop_last (true), rank (0), world_size (1), decoder ('cpu': libjpeg-turbo in
--   the workers; 'nvjpeg': the workers read the files and draw the crops, nvJPEG decodes on the
--   GPU and a CUDA kernel crops (a CUDA device only; images nvJPEG cannot take go through the CPU
--   decoder, counted by loader:cpu_fallbacks()); 'auto': nvjpeg when built with it and the device
--   is CUDA, else cpu). loader.decoder is the one in use.
function data.ImageLoader(ds, opts)
  if getmetatable(ds) ~= Folder then fail(2, 'ImageLoader: the first argument must be a data.ImageFolder') end
  opts = errors.check_opts('ImageLoader', opts, LOADER_OPTS)
  local F = 'ImageLoader'
  local o = {}
  o.batch_size = check_int(F, 'batch_size', opts.batch_size or 256, 1, 1 << 30, 2)
  o.transform = opts.transform or 'train'
  if o.transform ~= 'train' and o.transform ~= 'val' and o.transform ~= 'none' then
    fail(2, "ImageLoader: transform must be 'train', 'val' or 'none', got %s", tostring(o.transform))
  end
  o.size = check_int(F, 'size', opts.size or 224, 1, 16384, 2)
  o.resize = check_int(F, 'resize', opts.resize or 256, 1, 65535, 2)
  o.channels = opts.channels or 3
  if o.channels ~= 1 and o.channels ~= 3 then fail(2, 'ImageLoader: channels must be 1 or 3, got %s', tostring(o.channels)) end
  for _, name in ipairs{'mean', 'std'} do
    local v = opts[name] or (o.channels == 3 and (name == 'mean' and IMAGENET_MEAN or IMAGENET_STD))
      or {name == 'mean' and 0 or 1}
    if type(v) ~= 'table' or #v ~= o.channels then
      fail(2, 'ImageLoader: %s must be a list of %d numbers (one per channel)', name, o.channels)
    end
    for i = 1, o.channels do
      if type(v[i]) ~= 'number' then fail(2, 'ImageLoader: %s[%d] is not a number', name, i) end
    end
    o[name] = v
  end
  o.layout = opts.layout or 'nchw'
  if o.layout ~= 'nchw' and o.layout ~= 'nhwc' then fail(2, "ImageLoader: layout must be 'nchw' or 'nhwc', got %s", tostring(o.layout)) end
  o.dtype = opts.dtype or 'f32'
  if type(o.dtype) ~= 'string' then fail(2, 'ImageLoader: dtype must be a string') end
  if opts.workers ~= nil then o.workers = check_int(F, 'workers', opts.workers, 1, 64, 2) end
  o.prefetch = check_int(F, 'prefetch', opts.prefetch or 4, 1, 1024, 2)
  local device = opts.device or 'cpu'
  if type(device) ~= 'string' or not (device == 'cpu' or device:match('^cuda$') or device:match('^cuda:%d+$')) then
    fail(2, "ImageLoader: device must be 'cpu', 'cuda' or 'cuda:<n>', got %s", tostring(device))
  end
  o.pinned = device ~= 'cpu'
  local decoder = opts.decoder or 'cpu'
  if decoder ~= 'cpu' and decoder ~= 'nvjpeg' and decoder ~= 'auto' then
    fail(2, "ImageLoader: decoder must be 'cpu', 'nvjpeg' or 'auto', got %s", tostring(decoder))
  end
  if decoder == 'auto' then decoder = (_data.have_nvjpeg() and device ~= 'cpu') and 'nvjpeg' or 'cpu' end
  if decoder == 'nvjpeg' and not _data.have_nvjpeg() then
    fail(2, "ImageLoader: decoder 'nvjpeg': v100lua was built without nvJPEG")
  end
  if decoder == 'nvjpeg' and device == 'cpu' then fail(2, "ImageLoader: decoder 'nvjpeg' needs a CUDA device") end
  o.decoder = decoder
  o.seed = check_int(F, 'seed', opts.seed or 0, 0, math.maxinteger, 2)
  o.drop_last = opts.drop_last ~= false
  local world = check_int(F, 'world_size', opts.world_size or 1, 1, 1 << 20, 2)
  local rank = check_int(F, 'rank', opts.rank or 0, 0, world - 1, 2)
  if ds.n == 0 then fail(2, '%s', 'ImageLoader: the ImageFolder ' .. ds.root .. ' is empty') end
  local l = _data.loader(ds._f, o)
  local self = setmetatable({ds = ds, device = device, layout = o.layout, batch_size = o.batch_size, rank = rank, world_size = world,
    shuffle = opts.shuffle ~= false, seed = o.seed, decoder = decoder, _l = l, _printed = 0}, Loader)
  -- DistributedSampler without drop_last: every rank gets ceil(n / world) samples (padded).
  self.shard_size = (ds.n + world - 1) // world
  self.batches_per_epoch = l:batches(self.shard_size)
  self.workers = l:workers()
  return self
end

-- Prints each newly skipped file once, as the brief of the pipeline promises.
function Loader:_report()
  local l = rawget(self, '_l')
  local n = l:skipped()
  for i = self._printed + 1, n do
    io.stderr:write('v100.data: skipped ', l:skip_message(i) or '?', '\n')
  end
  self._printed = n
end

-- The sample order of epoch e on this rank: DistributedSampler's (permutation of seed + e, every
-- world_size-th position from rank on, padded by wrapping).
function Loader:indices(e)
  return dist.epoch_indices(self.ds.n, e, {shuffle = self.shuffle, seed = self.seed, rank = self.rank,
    size = self.world_size})
end

-- loader:epoch(e, {start = 0}) -> iterator of k, x, y for the batches of epoch e from batch
-- start + 1 on (k counts from 1 across the epoch, so a resumed epoch continues the count).
-- x and y are on the loader's device; on a CUDA device the pinned batch is copied there
-- asynchronously on the current stream (no host wait; an event keeps the workers off the buffer
-- until the copy is done), on the CPU x and y are the batch buffers themselves (kept valid while
-- referenced: the loader allocates another buffer rather than overwrite them).
function Loader:epoch(e, opts)
  local l = rawget(self, '_l')
  if not l then fail(2, 'ImageLoader: used after close') end
  check_int('ImageLoader:epoch', 'epoch', e, 0, 0xFFFFFFFF, 2)
  opts = errors.check_opts('ImageLoader:epoch', opts, { 'start' })
  local start = check_int('ImageLoader:epoch', 'start', opts.start or 0, 0, self.batches_per_epoch, 2)
  local order <close> = self:indices(e)
  l:epoch(order, e, start)
  local k = start
  return function()
    local x, y
    if self.device ~= 'cpu' then x, y = l:next_to(self.device) else x, y = l:next() end
    self:_report()
    if not x then return nil end
    k = k + 1
    -- The buffer is N x H x W x C for nhwc: handed out as the logical N x C x H x W view with
    -- channels-last strides, the layout convention of every op (t:is_channels_last()).
    if self.layout == 'nhwc' then x = x:permute(1, 4, 2, 3) end
    return k, x, y
  end
end

-- Images of decoder 'nvjpeg' decoded on the CPU instead (nvJPEG refused them), and the nvJPEG
-- backend ('hardware', 'default'; 'none' before the first batch or with decoder 'cpu').
function Loader:cpu_fallbacks()
  local l = rawget(self, '_l')
  return l and l:cpu_fallbacks() or 0
end

function Loader:nvjpeg_backend()
  local l = rawget(self, '_l')
  return l and l:nvjpeg_backend() or 'none'
end

function Loader:close()
  local l = rawget(self, '_l')
  if l then
    -- From __gc the userdata may have been finalized (closed) first: then the count is gone.
    local ok, n = pcall(l.skipped, l)
    self._skipped_at_close = ok and n or 0
    l:close()
    self._l = nil
  end
end
Loader.__close = Loader.close
Loader.__gc = Loader.close

return data
