-- scripts/v100/data.lua: data sets and batching.
--
--   local data = require 'v100.data'
--   local x, y = data.fashion_mnist('train')      -- u8 60000x28x28, u8 60000 (CPU)
--   for xb, yb in data.batches(x, y, 128, {shuffle = true, seed = 1}) do ... end
--
-- Labels stay u8 with values 0..9 (0-based, as stored in the files and as PyTorch has them).
--
-- Image data (JPEG ImageFolders, C worker threads), the data extension's half: its module
-- v100.image_data (ext/data/lua/v100/image_data.lua, over ext/data/) is re-exported here whole.
--   local ds = data.ImageFolder('/data/imagenet/train')       -- ds.classes, ds.n, ds:path(i), ds:label(i)
--   local loader = data.ImageLoader(ds, {batch_size = 256, transform = 'train', device = 'cuda'})
--   for k, x, y in loader:epoch(e) do ... end                  -- x f32 256x3x224x224, y i64 labels
local v100 = require 'v100.base'
local errors = require 'v100.errors'
local image_data = require 'v100.image_data'
local _dist = v100._dist

local data = {}

data.FASHION_MNIST_ROOT = '/usr/share/datasets/fashion-mnist'
data.FASHION_MNIST_CLASSES = {'T-shirt/top', 'Trouser', 'Pullover', 'Dress', 'Coat', 'Sandal',
                              'Shirt', 'Sneaker', 'Bag', 'Ankle boot'}

local exists = v100.io.exists

-- Finds <root>/<stem> or <root>/<stem>.gz.
local function find_file(root, stem)
  for _, p in ipairs{root .. '/' .. stem .. '.gz', root .. '/' .. stem} do
    if exists(p) then return p end
  end
  return nil
end

-- data.fashion_mnist(split, opts) -> images (u8 N x 28 x 28), labels (u8 N), on the CPU.
--   split: 'train' (60000) or 'test' (10000; 't10k' is accepted too)
--   opts.root: folder holding {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]
--              (default data.FASHION_MNIST_ROOT, the dataset-fashion-mnist package's folder)
local FASHION_KEYS = { 'root' }

function data.fashion_mnist(split, opts)
  opts = errors.check_opts('fashion_mnist', opts, FASHION_KEYS)
  split = split or 'train'
  local prefix = ({train = 'train', test = 't10k', t10k = 't10k'})[split]
  if not prefix then
    error("fashion_mnist: split must be 'train' or 'test', got " .. tostring(split), 2)
  end
  local root = opts.root or data.FASHION_MNIST_ROOT
  local img_path = find_file(root, prefix .. '-images-idx3-ubyte')
  local lbl_path = find_file(root, prefix .. '-labels-idx1-ubyte')
  if not img_path or not lbl_path then
    local missing = root .. '/' .. prefix .. '-' .. (img_path and 'labels-idx1' or 'images-idx3') .. '-ubyte.gz'
    local hint = opts.root and ' (opts.root = ' .. opts.root .. ')'
      or '; install it with `apt-get install dataset-fashion-mnist` (as root) or pass opts.root'
    error('fashion_mnist: Fashion-MNIST not found: ' .. missing .. ' is missing' .. hint, 2)
  end
  local images = v100.io.read_idx(img_path)
  local labels = v100.io.read_idx(lbl_path)
  local s = images.shape
  if images.dtype ~= 'u8' or #s ~= 3 or s[2] ~= 28 or s[3] ~= 28 then
    error(string.format('fashion_mnist: %s holds a %s tensor of shape %s, expected u8 Nx28x28',
      img_path, images.dtype, table.concat(s, 'x')), 2)
  end
  if labels.dtype ~= 'u8' or labels.ndim ~= 1 or labels.shape[1] ~= s[1] then
    error(string.format('fashion_mnist: %s holds %s labels of shape %s for %d images', lbl_path,
      labels.dtype, table.concat(labels.shape, 'x'), s[1]), 2)
  end
  return images, labels
end

-- A small deterministic generator (xorshift64*) so that shuffles depend only on opts.seed and
-- not on Lua's global math.random state, which scripts may reseed.
-- A 0-based random permutation of n as an i64 tensor on `device` (runtime/dist/sampler.c:
-- Fisher-Yates with xorshift64*, the order this function always gave). Not v100.randperm, which
-- draws from the process generator: this one depends on `seed` alone (scripts reseed the process
-- generator freely), leaves that generator where it was, and keeps the orders that resumed runs
-- and DistributedSampler (core._dist.permutation, tests/lua/test_sampler.lua) rely on.
function data.permutation(n, seed, device)
  local p = _dist.permutation(n, math.tointeger(seed) or 0)
  if device and device ~= 'cpu' then return p:to(device) end
  return p
end

-- data.batches(x, y, batch_size, opts) -> iterator of (xb, yb, k): consecutive batches along
-- dim 1 of x and y (same length; y may be nil). k counts batches from 1.
--   opts.shuffle (default false): a new permutation for each call (seed opts.seed, default 0;
--     pass a different seed per epoch). Shuffled batches are gathered with index_select on the
--     tensors' device; unshuffled ones are views (narrow).
--   opts.drop_last (default false): skip a last batch shorter than batch_size.
-- Batches are views or gathers of tensors already in memory: there are no worker threads here
-- (ImageLoader has them), so `workers` is refused with the rest of the unknown options.
local BATCHES_KEYS = { 'shuffle', 'seed', 'drop_last' }

function data.batches(x, y, batch_size, opts)
  opts = errors.check_opts('batches', opts, BATCHES_KEYS)
  if opts.seed ~= nil and not math.tointeger(opts.seed) then
    error('batches: seed must be an integer, got ' .. tostring(opts.seed), 2)
  end
  local n = x.shape[1]
  if y and y.shape[1] ~= n then
    error(string.format('batches: x has %d rows but y has %d', n, y.shape[1]), 2)
  end
  if not (math.tointeger(batch_size) and batch_size > 0) then
    error('batches: batch_size must be a positive integer, got ' .. tostring(batch_size), 2)
  end
  local perm = opts.shuffle and data.permutation(n, opts.seed or 0, x.device) or nil
  local start, k = 1, 0
  return function()
    local len = math.min(batch_size, n - start + 1)
    if len <= 0 or (opts.drop_last and len < batch_size) then
      if perm then perm:free() perm = nil end
      return nil
    end
    local xb, yb
    if perm then
      local idx <close> = perm:narrow(1, start, len)
      xb = x:index_select(1, idx)
      yb = y and y:index_select(1, y.device == x.device and idx or idx:to(y.device))
    else
      xb = x:narrow(1, start, len)
      yb = y and y:narrow(1, start, len)
    end
    start = start + len
    k = k + 1
    return xb, yb, k
  end
end

-- The image pipeline (ext/data): data.ImageFolder, ImageLoader, decode_jpeg, encode_jpeg,
-- resize_image, have_nvjpeg.
for k, v in pairs(image_data) do data[k] = v end

return data
