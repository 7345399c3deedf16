-- v100.recipe: the pieces every training recipe (recipes/*.lua) repeats: command-line options
-- (declared once, parsed by lua-argparse), Fashion-MNIST as standardised tensors, a test-accuracy
-- loop, and timing/printing. The epoch loop itself is v100.train.
--
-- The recipes' output lines are parsed by tests and quoted in docs, so nothing here prints on its
-- own (bar argparse's --help and errors): the recipe, or v100.train's loop, writes every line.
local v100 = require 'v100.base'
local data = require 'v100.data'

local recipe = {}

-- ---- modules beside a script ----
--
-- recipe.add_path(rel) puts <the calling script's folder>/rel/?.lua first on package.path and
-- returns that folder: the lookup follows the script, wherever the run's working directory is
-- (`v100lua recipes/bert.lua`, `v100lua /opt/v100lua/recipes/bert.lua`). The recipes keep their
-- own modules (WordNet, the BERT pretraining data) in recipes/lib:
--   recipe.add_path('lib'); local wn = require 'wordnet'                  -- in recipes/*.lua
--   recipe.add_path('../recipes/lib')                                     -- in tools/*.lua
function recipe.add_path(rel)
  local src = debug.getinfo(2, 'S').source
  local dir = (src:sub(1, 1) == '@' and src:match('^@(.*)/[^/]*$')) or '.'
  dir = dir .. '/' .. rel
  package.path = dir .. '/?.lua;' .. package.path
  return dir
end

-- ---- command-line options (lua-argparse) ----
--
-- A recipe declares each option once, as one row, and recipe.options turns every row into one
-- argparse option: the row's default becomes the option's default (shown in --help as
-- "(default: x)"), its check becomes the converter (or the choices), its text the help line.
--
--   local opts = recipe.options{
--     name = 'x.lua', description = 'what it trains', epilog = 'what it prints',
--     { '--epochs', 2, 'training epochs', recipe.integer{ min = 1 } },
--     { '--schedule', 'cosine', 'cosine decay or a constant lr', { 'cosine', 'constant' } },
--     { '--root', nil, 'data folder (default: ...)', argname = '<DIR>' },
--   }
--
-- The check is a list of choices or a table from recipe.integer / recipe.number / recipe.device
-- (`auto = true` in their range also accepts the word auto: a default the recipe works out from
-- the machine and the data, which its help text then states);
-- a row without one takes any string (--root). A row whose default is false is a flag (no value:
-- true when given, else false). Rows with a nil default are nil in opts unless
-- given (their help text states what nil means). Keys of opts are the names without '--', '-'
-- becoming '_' (opts.train_subset). Bad values, unknown options and stray arguments end the run through
-- argparse: its usage line and "Error: option '--x' ..." on stderr, exit status 1; --help / -h
-- prints every option and exits 0.

local function quote(s) return "'" .. tostring(s) .. "'" end

-- An integer option, optionally bounded: recipe.integer{ min = 1 } ("a positive integer").
function recipe.integer(range)
  local min, max = range and range.min, range and range.max
  local auto = range and range.auto
  return {
    argname = '<N>',
    convert = function(s)
      if auto and s == 'auto' then return 'auto' end
      local n = math.tointeger(tonumber(s))
      if not n or (min and n < min) or (max and n > max) then
        local want = 'an integer'
        if min == 1 and not max then want = 'a positive integer'
        elseif min == 0 and not max then want = 'a non-negative integer'
        elseif min and max then want = ('an integer in [%d, %d]'):format(min, max)
        elseif min then want = 'an integer >= ' .. min
        elseif max then want = 'an integer <= ' .. max end
        return nil, 'needs ' .. want .. ', got ' .. quote(s)
      end
      return n
    end,
  }
end

-- A finite number option: range fields gt / min (>=) / lt / max (<=), e.g.
-- recipe.number{ min = 0, lt = 1 }.
-- The value keeps Lua's reading of the text (tonumber: "1" is an integer, "0.1" a float), as the
-- literal defaults of the recipes did.
function recipe.number(range)
  range = range or {}
  local want = {}
  if range.gt then want[#want + 1] = '> ' .. range.gt end
  if range.min then want[#want + 1] = '>= ' .. range.min end
  if range.lt then want[#want + 1] = '< ' .. range.lt end
  if range.max then want[#want + 1] = '<= ' .. range.max end
  local what = #want > 0 and 'a finite number ' .. table.concat(want, ' and ') or 'a finite number'
  return {
    argname = '<X>',
    convert = function(s)
      if range.auto and s == 'auto' then return 'auto' end
      local x = tonumber(s)
      if not x or x ~= x or x == math.huge or x == -math.huge or
        (range.gt and x <= range.gt) or (range.min and x < range.min) or
        (range.lt and x >= range.lt) or (range.max and x > range.max) then
        return nil, 'needs ' .. what .. ', got ' .. quote(s)
      end
      return x
    end,
  }
end

-- A device name: cpu, cuda or cuda:N, of a device this machine has: a missing GPU is a usage
-- error when the options are parsed, before any data is read (docs/RECIPES.md).
recipe.device = {
  argname = '<DEV>',
  convert = function(s)
    if s == 'cpu' then return s end
    local n = s == 'cuda' and 0 or tonumber(s:match('^cuda:(%d+)$'))
    if not n then return nil, 'is cpu, cuda or cuda:N, got ' .. quote(s) end
    local count = v100.cuda.device_count()
    if count == 0 then
      return nil, string.format('is %s, but there is no CUDA device here (%s); use cpu', quote(s),
        v100.versions().built_with_cuda and 'no GPU found' or 'v100lua was built without CUDA')
    end
    if n >= count then
      return nil, string.format('is %s, but this machine has %d CUDA device%s (cuda:0..cuda:%d)', quote(s), count,
        count == 1 and '' or 's', count - 1)
    end
    return s
  end,
}

-- The same, or the word auto (the recipe then picks the rank's GPU, or the CPU).
recipe.device_auto = {
  argname = '<DEV>',
  convert = function(s)
    if s == 'auto' then return s end
    return recipe.device.convert(s)
  end,
}

-- The argparse parser of a spec (see above); recipe.options parses arg with it, tests call
-- parser:pparse(argv) to see an error without the exit.
function recipe.parser(spec)
  -- Optional, so loaded here: lua-argparse (Debian's package, not ours) is needed only to parse
  -- options; the rest of this module (recipe.integer, used by telemetry.options) works without it.
  local argparse = require 'argparse'
  local p = argparse(spec.name, spec.description, spec.epilog)
  for _, row in ipairs(spec) do
    local name, default, help, check = row[1], row[2], row[3], row[4]
    assert(type(name) == 'string' and name:match('^%-%-%w[%w%-]*$') and type(help) == 'string',
      'recipe.options: a row is { "--name", default, "help text", check }')
    if default == false then
      -- A flag: false unless given (no value).
      assert(check == nil, 'recipe.options: a flag (default false) takes no check: ' .. name)
      p:flag(name, help)
      goto continue
    end
    local o = p:option(name, help, default ~= nil and tostring(default) or nil)
    local argname = row.argname
    if type(check) == 'table' and check.convert then
      local convert = check.convert
      o:convert(function(s)
        local v, why = convert(s)
        if v == nil then return nil, ('option %s %s'):format(quote(name), why) end
        return v
      end)
      argname = argname or check.argname
    elseif type(check) == 'table' then
      o:choices(check)
    else
      assert(check == nil, 'recipe.options: the check of ' .. name .. ' is a list of choices or a converter')
    end
    if argname then o:argname(argname) end
    ::continue::
  end
  return p
end

-- Parses `argv` (default: the global arg) with recipe.parser(spec); see above for errors. Returns
-- opts and the parser, whose :error(msg) ends the run the same way for a check that involves more
-- than one option or the data.
function recipe.options(spec, argv)
  local p = recipe.parser(spec)
  local opts = p:parse(argv or arg or {})
  for _, row in ipairs(spec) do
    if row[2] == false then
      local key = row[1]:sub(3):gsub('%-', '_')
      if opts[key] == nil then opts[key] = false end
    end
  end
  return opts, p
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

-- u8 N x H x W images -> standardised f32 N x 1 x (H + 2 pad) x (W + 2 pad) on dev. The
-- padding is black (0) before standardising, as torchvision's RandomCrop(size, padding=pad).
function recipe.pad_standardise(images, pad, dev)
  local n, h, w = images.shape[1], images.shape[2], images.shape[3]
  local x = images
  if pad > 0 then
    x = v100.zeros({ n, h + 2 * pad, w + 2 * pad }, { dtype = 'u8' })
    x:narrow(2, pad + 1, h):narrow(3, pad + 1, w):copy_(images)
  end
  return recipe.standardise(x:to(dev)):unsqueeze(2):contiguous()
end

-- A per-sample random size x size crop of the padded batch xb (B x 1 x P x P, P = size + 2 pad)
-- and a horizontal flip of half the samples, on xb's device with v100's generator, as two
-- gathers: columns first (offset dx, reversed when flipped), then rows (offset dy).
function recipe.crop_flip(xb, pad, size)
  local B, P, dev = xb.shape[1], xb.shape[3], xb.device
  local cols = v100.arange(0, size, { device = dev }):view{ 1, size }
  local dx = (v100.rand({ B, 1 }, { device = dev }) * (2 * pad + 1)):floor():long()
  local dy = (v100.rand({ B, 1 }, { device = dev }) * (2 * pad + 1)):floor():long()
  local flip = v100.rand({ B, 1 }, { device = dev }):lt(0.5):long()
  local ci = dx + cols + flip * ((size - 1) - cols * 2) -- B x size: dx + (flip ? size-1 - w : w)
  local ri = dy + cols                                  -- B x size
  local x = xb:gather(4, ci:view{ B, 1, 1, size }:expand{ B, 1, P, size }:contiguous())
  return x:gather(3, ri:view{ B, 1, size, 1 }:expand{ B, 1, size, size }:contiguous())
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
