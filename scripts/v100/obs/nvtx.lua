-- scripts/v100/obs/nvtx.lua: `require 'v100.nvtx'`: NVTX ranges for Nsight Systems timelines.
--
--   local nvtx = require 'v100.nvtx'
--   nvtx.enable(true)                 -- or V100LUA_NVTX=1 in the environment
--   nvtx.range('data', function() ... end)   -- a range of one's own (closed on errors too)
--   nvtx.push('eval') ... nvtx.pop()
--
-- When enabled, every nn.Module call is a range ("conv1: Conv2d", nested as the modules are), the
-- backward of every layer is a range ("conv1: Conv2d backward", each autograd node inside it in a
-- range of its own name), and every collective is one ("all_reduce"); all in the domain
-- "v100lua". Under `nsys profile --trace=cuda,nvtx v100lua script.lua` the timeline then reads
-- like the model. Off by default, and off costs one boolean test per module call. Builds without
-- CUDA keep the bookkeeping (nvtx.stats()) but emit nothing (nvtx.available is false).
-- docs/OPERATIONS.md ("NVTX"); the C side is runtime/trace/nvtx.c.
local C = require('v100.core')._nvtx

local nvtx = {}
-- read by scripts/v100/nn/module.lua on every call: keep it in step with the runtime's flag
nvtx.on = C.enabled()
nvtx.available = C.available()

function nvtx.enable(on)
  if type(on) ~= 'boolean' then error('nvtx.enable: expects true or false, got ' .. type(on), 2) end
  C.enable(on)
  nvtx.on = on
end

function nvtx.enabled() return nvtx.on end

local function check_msg(fname, msg)
  if type(msg) ~= 'string' then error(string.format('nvtx.%s: the message must be a string, got %s', fname, type(msg)), 3) end
end

function nvtx.push(msg)
  check_msg('push', msg)
  C.push(msg)
end

function nvtx.pop() C.pop() end

function nvtx.mark(msg)
  check_msg('mark', msg)
  C.mark(msg)
end

-- nvtx.range(msg, fn, ...) -> fn(...)'s results, inside a range (popped when fn raises, too).
function nvtx.range(msg, fn, ...)
  check_msg('range', msg)
  if type(fn) ~= 'function' then error('nvtx.range: the second argument must be a function, got ' .. type(fn), 2) end
  if not nvtx.on then return fn(...) end
  C.push(msg)
  local res = table.pack(pcall(fn, ...))
  C.pop()
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

-- {pushes, pops, depth, scopes}: ranges opened and closed while on, open now, layer scopes made.
function nvtx.stats() return C.stats() end

-- For nn.Module calls (scripts/v100/nn/module.lua): the token the leave takes.
nvtx.scope_enter = C.scope_enter
nvtx.scope_leave = C.scope_leave

return nvtx
