-- v100.recipe: the pieces every training recipe (recipes/*.lua) repeats: command-line options,
-- Fashion-MNIST as standardised tensors, a test-accuracy loop, and timing/printing.
--
-- The recipes' output lines are parsed by tests and quoted in docs, so nothing here prints on its
-- own: the recipe keeps every line it writes, and these helpers only do the work around them.
local v100 = require 'v100'
local data = require 'v100.data'

local recipe = {}

-- recipe.options{ name = 'x.lua', usage = text, defaults = {...}, numeric = {key = true},
--                 optional = {key = true}, choices = {key = {'a', 'b'}} }
-- Parses the global `arg` (--key value or --key=value) over a copy of defaults and returns
-- (opts, usage). Keys in `optional` are accepted although their default is nil (--device,
-- --root); `numeric` values become numbers (integers when integral); a `choices` value must be
-- one of its list. usage(msg) prints "name: msg" and the usage text to stderr and exits 2;
-- usage() (also --help/-h) prints the usage text to stdout and exits 0.
function recipe.options(spec)
  local opts = {}
  for k, v in pairs(spec.defaults) do opts[k] = v end
  local numeric, optional, choices = spec.numeric or {}, spec.optional or {}, spec.choices or {}

  local function usage(msg)
    local out = msg and io.stderr or io.stdout
    if msg then out:write(spec.name, ': ', msg, '\n') end
    out:write(spec.usage)
    os.exit(msg and 2 or 0)
  end

  local argv = arg or {}
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if a == '--help' or a == '-h' then usage() end
    local key, val = a:match('^%-%-([%w%-]+)=(.*)$')
    if not key then
      key = a:match('^%-%-([%w%-]+)$')
      if not key then usage('unexpected argument ' .. a) end
      i = i + 1
      val = argv[i]
      if val == nil then usage('missing value for --' .. key) end
    end
    if opts[key] == nil and not optional[key] then usage('unknown option --' .. key) end
    local allowed = choices[key]
    if allowed then
      local ok = false
      for _, c in ipairs(allowed) do ok = ok or val == c end
      if not ok then usage('--' .. key .. ' is ' .. table.concat(allowed, ' or ') .. ', got ' .. val) end
    end
    if numeric[key] then
      local n = tonumber(val)
      if not n then usage('--' .. key .. ' needs a number, got ' .. val) end
      val = math.tointeger(n) or n
    end
    opts[key] = val
    i = i + 1
  end
  return opts, usage
end

-- Each of keys (in order) must be an integer >= 1, or >= 0 when listed in nonneg; the first that
-- is not ends the run through usage ("--k must be a positive integer" / "non-negative").
function recipe.check_integers(opts, usage, keys, nonneg)
  nonneg = nonneg or {}
  for _, k in ipairs(keys) do
    local v = opts[k]
    if not math.tointeger(v) or v < 0 or (not nonneg[k] and v == 0) then
      usage('--' .. k .. ' must be a ' .. (nonneg[k] and 'non-negative' or 'positive') .. ' integer')
    end
  end
end

-- ---- data ----

-- Fashion-MNIST pixel statistics (train set, pixels scaled to [0, 1]).
recipe.MEAN, recipe.STD = 0.2860, 0.3530

-- Pixels (u8 or float, 0..255) -> standardised f32, on whatever device x is on.
function recipe.standardise(x)
  return ((x:float() / 255) - recipe.MEAN) / recipe.STD
end

-- The u8 images and labels of a split, cut to the first `subset` rows when 0 < subset < N.
function recipe.fashion_mnist(split, root, subset)
  local images, labels = data.fashion_mnist(split, { root = root })
  if subset and subset > 0 and subset < images.shape[1] then
    images, labels = images:narrow(1, 1, subset), labels:narrow(1, 1, subset)
  end
  return images, labels
end

-- u8 N x 28 x 28 -> standardised f32 on dev, N x 1 x 28 x 28 (shape 'image') or N x 784
-- ('flat'); labels -> i64 on dev. Standardised on the host, so one copy crosses to the device.
function recipe.to_device(images, labels, dev, shape)
  local n = images.shape[1]
  local x = recipe.standardise(images)
  if shape == 'flat' then x = x:reshape{ n, 28 * 28 } else x = x:unsqueeze(2):contiguous() end
  return x:to(dev), labels:long():to(dev)
end

-- ---- evaluation ----

-- Fraction of the rows of x whose argmax of forward(xb) equals y, in batches of `batch` (1000),
-- without recording. The count stays on the device (one host read at the end) and each batch's
-- temporaries are closed at once rather than left to the collector.
function recipe.accuracy(forward, x, y, batch)
  local correct = v100.no_grad(function()
    local c = v100.zeros({}, { dtype = 'i64', device = y.device })
    for xb, yb in data.batches(x, y, batch or 1000) do
      local z <close> = forward(xb)
      local pred <close> = z:argmax(2)
      local hits <close> = pred:eq(yb):sum()
      c = c + hits
    end
    return c:item()
  end)
  return correct / x.shape[1]
end

-- ---- time and output ----

recipe.clock = v100.io.time

-- A function that waits for the device `dev` (a no-op on the CPU), so that a clock read after it
-- measures finished work rather than queued kernels.
function recipe.syncer(dev)
  if dev:sub(1, 4) == 'cuda' then return function() v100.cuda.synchronize() end end
  return function() end
end

-- print(string.format(...)) and a flush, so that a recipe's progress shows through a pipe.
function recipe.printf(fmt, ...)
  print(string.format(fmt, ...))
  io.stdout:flush()
end

return recipe
