-- v100.recipe: the pieces every training recipe (recipes/*.lua) repeats: command-line options
-- (declared once, parsed by lua-argparse), Fashion-MNIST as standardised tensors, a test-accuracy
-- loop, and timing/printing. The epoch loop itself is v100.train.
--
-- The recipes' output lines are parsed by tests and quoted in docs, so nothing here prints on its
-- own (bar argparse's --help and errors): the recipe, or v100.train's loop, writes every line.
local v100 = require 'v100'
local data = require 'v100.data'

local recipe = {}

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
-- The check is a list of choices or a table from recipe.integer / recipe.number / recipe.device;
-- a row without one takes any string (--root). Rows with a nil default are nil in opts unless
-- given (their help text states what nil means). Keys of opts are the names without '--', '-'
-- becoming '_' (opts.train_subset). Bad values, unknown options and stray arguments end the run through
-- argparse: its usage line and "Error: option '--x' ..." on stderr, exit status 1; --help / -h
-- prints every option and exits 0.

local function quote(s) return "'" .. tostring(s) .. "'" end

-- An integer option, optionally bounded: recipe.integer{ min = 1 } ("a positive integer").
function recipe.integer(range)
  local min, max = range and range.min, range and range.max
  return {
    argname = '<N>',
    convert = function(s)
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

-- A device name: cpu, cuda or cuda:N (whether that device exists is the runtime's to say).
recipe.device = {
  argname = '<DEV>',
  convert = function(s)
    if s == 'cpu' or s == 'cuda' or s:match('^cuda:%d+$') then return s end
    return nil, 'is cpu, cuda or cuda:N, got ' .. quote(s)
  end,
}

-- The argparse parser of a spec (see above); recipe.options parses arg with it, tests call
-- parser:pparse(argv) to see an error without the exit.
function recipe.parser(spec)
  local argparse = require 'argparse'
  local p = argparse(spec.name, spec.description, spec.epilog)
  for _, row in ipairs(spec) do
    local name, default, help, check = row[1], row[2], row[3], row[4]
    assert(type(name) == 'string' and name:match('^%-%-%w[%w%-]*$') and type(help) == 'string',
      'recipe.options: a row is { "--name", default, "help text", check }')
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
  end
  return p
end

-- Parses `argv` (default: the global arg) with recipe.parser(spec); see above for errors. Returns
-- opts and the parser, whose :error(msg) ends the run the same way for a check that involves more
-- than one option or the data.
function recipe.options(spec, argv)
  local p = recipe.parser(spec)
  return p:parse(argv or arg or {}), p
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
