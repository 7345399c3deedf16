-- scripts/v100/amp/autocast.lua: autocast (O1), the part of `v100.amp` that both amp/init.lua
-- (which re-exports every field as amp.*) and amp/policy.lua (O1's Policy:autocast) use.
local _amp = require('v100.core')._amp
local errors = require 'v100.errors'

local M = {}

-- Autocast (O1): the op classes are decided at the op dispatch in C (runtime/amp/autocast.h), so
-- a layer composed in Lua from tensor ops gets them for free. docs/AMP.md has the table.
--
--   amp.autocast(fn, {dtype = 'fp16'|'bf16', enabled = true}, ...) -> fn(...)'s results
--   amp.is_autocast_enabled(), amp.autocast_dtype() -> 'fp16' | 'bf16'
--   amp.ops() -> {matmul = 'half', softmax = 'fp32', add = 'promote', ...} (a copy)
--   amp.set_op(name, 'half'|'fp32'|'promote'|'none'), amp.reset_ops()
--   amp.autocast_stats() -> {casts =, cache_hits =, cached =}, amp.reset_autocast_stats()

-- The names autocast accepts for its half dtype, and the name it reports.
local HALF = { fp16 = 'f16', f16 = 'f16', float16 = 'f16', half = 'f16', bf16 = 'bf16', bfloat16 = 'bf16' }
local HALF_NAME = { f16 = 'fp16', bf16 = 'bf16' }

local ac_fail = errors.failer('amp.autocast: ', 2)

-- Runs fn(...) inside an autocast region and returns its results. Regions nest (the inner one's
-- dtype/enabled win inside it); the state before the region comes back when fn returns or raises
-- (the error is re-raised unchanged, with its traceback position). Parameters are cast once per
-- outermost region: the cache is dropped when it ends.
function M.autocast(fn, opts, ...)
  if type(fn) ~= 'function' and not (getmetatable(fn) or {}).__call then
    ac_fail('expected a function, got %s', type(fn))
  end
  opts = errors.check_opts('amp.autocast', opts, { 'dtype', 'enabled' })
  local dt = opts.dtype or 'fp16'
  local half = HALF[dt]
  if not half then ac_fail("dtype must be 'fp16' or 'bf16', got '%s'", tostring(dt)) end
  local enabled = opts.enabled
  if enabled == nil then enabled = true end
  if type(enabled) ~= 'boolean' then ac_fail('enabled must be a boolean, got %s', type(enabled)) end
  local prev_on, prev_dt = _amp.enter(enabled, half)
  local res = table.pack(pcall(fn, ...))
  _amp.exit(prev_on, prev_dt)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

function M.is_autocast_enabled() return _amp.is_enabled() end
function M.autocast_dtype() return HALF_NAME[_amp.dtype()] end

-- The per-op table: op name -> 'half' | 'fp32' | 'promote' | 'none'. A copy: change it with set_op.
function M.ops() return _amp.ops() end
function M.default_ops() return _amp.defaults() end
function M.set_op(name, precision)
  if type(name) ~= 'string' then ac_fail('set_op: the op name must be a string, got %s', type(name)) end
  if type(precision) ~= 'string' then ac_fail('set_op: the precision must be a string, got %s', type(precision)) end
  _amp.set_op(name, precision)
end
function M.reset_ops() _amp.reset_ops() end

-- Casts made by autocast (parameters once per region), reuses from the weight cache, entries now.
function M.autocast_stats() return _amp.stats() end
function M.reset_autocast_stats() _amp.reset_stats() end

return M
