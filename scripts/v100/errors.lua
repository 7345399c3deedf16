-- scripts/v100/errors.lua: `v100.errors`, how the Lua library raises its errors (one helper for
-- every module; it requires nothing, so any module may use it).
--
--   local errors = require 'v100.errors'
--   errors.fail(2, 'ImageLoader: unknown option %s', k)     -- string.format(fmt, ...), blamed at 2
--   local fail = errors.failer('amp.Scaler: ', 2)           -- a module's prefix, bound once:
--   fail('init_scale must be > 0, got %s', x)               --   'amp.Scaler: init_scale must ...'
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

return errors
