-- scripts/v100/errors.lua: `v100.errors`, how the Lua library raises its errors (one helper for
-- every module; it requires nothing, so any module may use it).
--
--   local errors = require 'v100.errors'
--   errors.fail(2, 'ImageLoader: unknown option %s', k)     -- string.format(fmt, ...), blamed at 2
--   local fail = errors.failer('amp.Scaler: ', 2)           -- a module's prefix, bound once:
--   fail('init_scale must be > 0, got %s', x)               --   'amp.Scaler: init_scale must ...'
--   errors.check_opts('optim.SGD', o, { 'lr', 'momentum' })  -- unknown option keys refused
--
-- Levels count as error()'s do, from the function that calls fail: 1 is that function, 2 its
-- caller, and so on; 0 adds no position ("onnx.export: ..." as the whole message). The message is
-- always string.format(fmt, ...): put text that may hold a '%' in an argument ('%s'), never in fmt.
local errors = {}

function errors.fail(level, fmt, ...)
  error(string.format(fmt, ...), level > 0 and level + 1 or 0)
end

-- fail(fmt, ...) raising prefix .. string.format(fmt, ...) at `level` (as in errors.fail).
function errors.failer(prefix, level)
  local at = level > 0 and level + 1 or 0
  return function(fmt, ...) error(prefix .. string.format(fmt, ...), at) end
end

-- check_opts(fn, opts, known[, level]): the one check of an options table (the C bindings have
-- the same, l_check_opts). nil passes; a non-table, a key that is not a string and a key not in
-- `known` (a list of names) raise "<fn>: unknown option 'k' (a, b, c)", the valid names listed in
-- the order given ("(<fn> takes no options)" for an empty list), blamed at `level` as in fail
-- (default 2: the caller of the function that checks). Returns opts (or an empty table for nil), so `o = errors.check_opts(...)` reads well.
local known_sets = setmetatable({}, { __mode = 'k' })

local function names_of(fn, known) return #known == 0 and (fn .. ' takes no options') or table.concat(known, ', ') end

function errors.check_opts(fn, opts, known, level)
  level = level or 2
  if opts == nil then return {} end
  local at = level > 0 and level + 1 or 0
  if type(opts) ~= 'table' then error(string.format('%s: options must be a table, got %s', fn, type(opts)), at) end
  local set = known_sets[known]
  if not set then
    set = {}
    for _, k in ipairs(known) do set[k] = true end
    known_sets[known] = set
  end
  for k in pairs(opts) do
    if type(k) ~= 'string' then
      error(string.format('%s: option names must be strings, got a %s key (%s)', fn, type(k), names_of(fn, known)), at)
    end
    if not set[k] then
      error(string.format("%s: unknown option '%s' (%s)", fn, k, names_of(fn, known)), at)
    end
  end
  return opts
end

return errors
