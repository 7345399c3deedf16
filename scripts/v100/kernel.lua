-- scripts/v100/kernel.lua: `v100.kernel`: CUDA kernels written in a script, compiled at run time by
-- NVRTC (runtime/rtc/rtc*.c; bindings/l_kernel.c gives the primitives) and cached on disk.
--
--   local k = v100.kernel{name = 'scale', source = [[
--     #include <v100_rtc.h>
--     extern "C" __global__ void scale(float *y, const float *x, float a, vl_i64 n) {
--       vl_i64 i = vl_index(); if (i < n) y[i] = a * x[i]; }]],
--     signature = 'float*, const float*, float, int64'}
--   k{grid = v100.kernel.blocks(n, 256), block = 256, args = {y, x, 2.0, n}}
--   k(grid, block, y, x, 2.0, n)                     -- the same, positional (no shared memory)
--
-- A launch goes to the device's current stream (so it is captured inside a CUDA graph) and checks
-- every argument against the signature first. v100.kernel.op{} makes a differentiable op of
-- kernels and two small Lua functions (docs/KERNELS.md).
local core = require 'v100.core'
local errors = require 'v100.errors'
local autograd = require 'v100.autograd'

local C = core._rtc
local kernel = {}

local Kernel = {}
Kernel.__index = Kernel

-- ---------------------------------------------------------------------------------------------
-- Checks that run before anything touches NVRTC or a device (tests/lua/test_kernel.lua).

-- `level` (here and below) is the user's frame as seen from the helper's caller.
-- check_keys: errors.check_opts over a set of names (listed sorted).
local sorted_names = {}
local function check_keys(what, t, allowed, level)
  local names = sorted_names[allowed]
  if not names then
    names = {}
    for n in pairs(allowed) do names[#names + 1] = n end
    table.sort(names)
    sorted_names[allowed] = names
  end
  errors.check_opts(what, t, names, level + 1)
end

local DEF_KEYS = { name = true, source = true, signature = true, options = true, device = true, cache = true,
  contiguous = true }

-- The definition as v100.kernel{} takes it, checked; returns the label used in messages.
local function check_def(def, level)
  level = level + 1 -- as seen from here
  if type(def) ~= 'table' then error('v100.kernel: expected a table {name = ..., source = ...}', level) end
  local name = def.name
  if type(name) ~= 'string' or not name:match('^[%a_][%w_]*$') then
    error(string.format("v100.kernel: name must be the kernel's C identifier (its extern \"C\" __global__ " ..
      "function), got %s", type(name) == 'string' and ("'" .. name .. "'") or type(name)), level)
  end
  local what = string.format("v100.kernel '%s'", name)
  check_keys(what, def, DEF_KEYS, level)
  if type(def.source) ~= 'string' or not def.source:find('%S') then
    error(what .. ': source must be a non-empty string of CUDA C++', level)
  end
  if def.signature ~= nil then
    if type(def.signature) ~= 'string' then
      error(what .. ': signature must be a string such as "float*, const float*, int64"', level)
    end
    C.signature(what, def.signature) -- raises naming the parameter
  end
  if def.options ~= nil then
    if type(def.options) ~= 'table' then error(what .. ": options must be a list of strings, e.g. {'--use_fast_math'}", level) end
    for i, o in ipairs(def.options) do
      if type(o) ~= 'string' then error(string.format('%s: options[%d] must be a string, got %s', what, i, type(o)), level) end
      if o:match('^%-arch') or o:match('^%-%-gpu%-architecture') then
        error(what .. ': -arch is set from the device (drop ' .. o .. ')', level)
      end
    end
  end
  local c = def.cache
  if c ~= nil and type(c) ~= 'boolean' and type(c) ~= 'string' then
    error(what .. ': cache must be true, false or a directory', level)
  end
  if def.contiguous ~= nil and type(def.contiguous) ~= 'boolean' then error(what .. ': contiguous must be a boolean', level) end
  return what
end

local UINT32_MAX = 4294967295

local function dims(what, field, v, level)
  level = level + 1
  if type(v) == 'number' then v = { v } end
  if type(v) ~= 'table' or #v < 1 or #v > 3 then
    error(string.format('%s: %s must be a positive integer or a list of 1 to 3 of them, got %s', what, field,
      type(v) == 'table' and (#v .. ' values') or tostring(v)), level)
  end
  local out = {}
  for d = 1, #v do
    local x = math.tointeger(v[d])
    if not x or x < 1 or x > UINT32_MAX then
      error(string.format('%s: %s[%d] must be an integer from 1 to %d, got %s', what, field, d, UINT32_MAX,
        tostring(v[d])), level)
    end
    out[d] = x
  end
  return out
end

local CFG_KEYS = { grid = true, block = true, shared = true, args = true }

-- A launch configuration {grid=, block=, shared=, args=} checked; returns grid, block, shared, args.
local function check_config(what, cfg, level)
  level = level + 1
  check_keys(what, cfg, CFG_KEYS, level)
  if cfg.grid == nil then error(what .. ': grid is missing', level) end
  if cfg.block == nil then error(what .. ': block is missing', level) end
  local grid, block = dims(what, 'grid', cfg.grid, level), dims(what, 'block', cfg.block, level)
  local shared = cfg.shared or 0
  local sh = math.tointeger(shared)
  if not sh or sh < 0 then error(string.format('%s: shared must be a byte count >= 0, got %s', what, tostring(shared)), level) end
  local args = cfg.args or {}
  if type(args) ~= 'table' then error(what .. ': args must be a list', level) end
  return grid, block, sh, args
end

kernel._check_def = function(def) return check_def(def, 2) end
kernel._check_config = function(what, cfg) return check_config(what, cfg, 2) end
-- The argument checks of a launch (signature or nil), without a kernel: what CPU tests reach.
kernel._check_args = function(what, signature, args, contiguous)
  return C.check_args(what, signature, args, contiguous ~= false)
end

-- Blocks of `per_block` threads that cover n elements: n // per_block rounded up.
function kernel.blocks(n, per_block)
  per_block = per_block or 256
  return (math.tointeger(n) + per_block - 1) // per_block
end

-- ---------------------------------------------------------------------------------------------
-- Kernels

local function make(module, handle, def, what, info)
  return setmetatable({
    name = def.name,
    signature = def.signature,
    cached = info.cached,          -- read from the disk cache rather than compiled
    arch = info.arch,              -- sm_XY (or compute_XY: PTX for a GPU newer than NVRTC)
    device = 'cuda:' .. info.device,
    cache_path = info.path,        -- '' with the cache off
    cache_note = info.note,        -- why the cache was not read or written ('' when it was)
    _module = module, _handle = handle, _what = what, _contiguous = def.contiguous ~= false,
  }, Kernel)
end

-- v100.kernel{name=, source=, signature=, options=, device=, cache=, contiguous=}
function kernel.new(def)
  local what = check_def(def, 2)
  if not C.have_nvrtc then error('v100.kernel: built without CUDA (NVRTC unavailable)', 2) end
  -- The program is named after the kernel, so that the log reads "fused_act.cu(12): error: ...".
  local module = C.load(what, def.source, def.name .. '.cu', def.options, def.device, def.cache)
  local handle = module:kernel(def.name, def.signature)
  local info = module:info()
  -- A cache directory or file that is not the user's own (or that others can write) is a
  -- security matter, not a miss: say so on stderr, once per message (runtime/rtc/rtc.h)
  if info.note:find('not trusted', 1, true) and not kernel._warned[info.note] then
    kernel._warned[info.note] = true
    io.stderr:write('v100.kernel: warning: ', info.note, ' (compiled instead of loading it)\n')
  end
  return make(module, handle, def, what, info)
end
kernel._warned = {}

-- Another kernel of the same program (no compilation): k:kernel('other_name', 'float*, int64').
function Kernel:kernel(name, signature)
  local def = { name = name, signature = signature, contiguous = self._contiguous }
  local what = string.format("v100.kernel '%s'", tostring(name))
  if type(name) ~= 'string' or not name:match('^[%a_][%w_]*$') then
    error("v100.kernel: name must be the kernel's C identifier, got " .. tostring(name), 2)
  end
  if signature ~= nil then C.signature(what, signature) end
  local handle = self._module:kernel(name, signature)
  return make(self._module, handle, def, what, self._module:info())
end

local function launch(self, grid, block, shared, args, level)
  C.launch(self._handle, grid, block, shared, args, self._contiguous)
end

-- k:launch(grid, block, arg1, ...) (no dynamic shared memory)
function Kernel:launch(grid, block, ...)
  local cfg = { grid = grid, block = block, args = table.pack(...) }
  local g, b, sh, args = check_config(self._what, cfg, 2)
  return launch(self, g, b, sh, args)
end

Kernel.__call = function(self, cfg, ...)
  if select('#', ...) == 0 and type(cfg) == 'table' and (cfg.grid ~= nil or cfg.args ~= nil) then
    local g, b, sh, args = check_config(self._what, cfg, 2)
    return launch(self, g, b, sh, args)
  end
  return self:launch(cfg, ...)
end

-- Unloads the program (every kernel taken from it); launching afterwards raises. Idempotent.
function Kernel:close() self._module:close() end
Kernel.__close = Kernel.close
Kernel.__tostring = function(self) return string.format('v100.kernel(%s, %s, %s)', self.name, self.device, self.arch) end

setmetatable(kernel, { __call = function(_, def) return kernel.new(def) end })

-- ---------------------------------------------------------------------------------------------
-- v100.kernel.op{name=, source=, kernels = {key = {name, signature}, ...}, forward=, backward=,
--                options=, cache=}: forward(K, ctx, ...) allocates the outputs and launches K.<key>;
-- backward(K, ctx, grad_outputs...) returns the inputs' gradients (nil for none). The program is
-- compiled on first use on each device (the device of the first tensor argument).

local OP_KEYS = { name = true, source = true, kernels = true, forward = true, backward = true, options = true,
  cache = true, contiguous = true }

function kernel.op(def)
  if type(def) ~= 'table' then error('v100.kernel.op: expected a table', 2) end
  local name = def.name
  if type(name) ~= 'string' then error('v100.kernel.op: name must be a string', 2) end
  local what = string.format("v100.kernel.op '%s'", name)
  check_keys(what, def, OP_KEYS, 1)
  if type(def.forward) ~= 'function' then error(what .. ': forward must be a function(K, ctx, ...)', 2) end
  if def.backward ~= nil and type(def.backward) ~= 'function' then
    error(what .. ': backward must be a function(K, ctx, grad_outputs...) or nil', 2)
  end
  if type(def.kernels) ~= 'table' or next(def.kernels) == nil then
    error(what .. ": kernels must map keys to {name, signature}, e.g. {fwd = {'my_fwd', 'float*, int64'}}", 2)
  end
  local keys, specs = {}, {}
  for key, spec in pairs(def.kernels) do
    if type(spec) == 'string' then spec = { spec } end
    if type(spec) ~= 'table' then error(string.format('%s: kernels.%s must be {name, signature}', what, tostring(key)), 2) end
    local kdef = { name = spec.name or spec[1], signature = spec.signature or spec[2], source = def.source,
      options = def.options, cache = def.cache, contiguous = def.contiguous }
    check_def(kdef, 2)
    keys[#keys + 1] = key
    specs[key] = kdef
  end
  table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)

  local per_device = {}
  local function kernels_on(device)
    local K = per_device[device]
    if K then return K end
    K = {}
    local first
    for _, key in ipairs(keys) do
      local s = specs[key]
      if not first then
        first = kernel.new { name = s.name, signature = s.signature, source = s.source, options = s.options,
          cache = s.cache, contiguous = s.contiguous, device = device }
        K[key] = first
      else
        K[key] = first:kernel(s.name, s.signature)
      end
    end
    per_device[device] = K
    return K
  end

  local function device_of(...)
    for i = 1, select('#', ...) do
      local v = select(i, ...)
      if core.is_tensor(v) then
        if v.device:sub(1, 4) ~= 'cuda' then
          error(string.format('%s: argument %d is a tensor on the CPU; kernels take CUDA tensors', what, i), 4)
        end
        return v.device
      end
    end
    error(what .. ': needs at least one CUDA tensor argument (its device picks where the kernels run)', 4)
  end

  local op = { name = name }
  -- The kernels compiled for a device ('cuda:0'), e.g. to check op.kernels_on('cuda:0').fwd.cached.
  op.kernels_on = kernels_on
  local call
  if def.backward then
    local F = autograd.Function {
      name = name,
      forward = function(ctx, ...)
        local K = kernels_on(device_of(...))
        ctx.kernels = K
        return def.forward(K, ctx, ...)
      end,
      backward = function(ctx, ...) return def.backward(ctx.kernels, ctx, ...) end,
    }
    call = F.apply
  else
    local stub = { save_for_backward = function() end }
    call = function(...)
      if core.is_grad_enabled() then
        for i = 1, select('#', ...) do
          local v = select(i, ...)
          if core.is_tensor(v) and v.requires_grad then
            error(string.format('%s: argument %d requires grad but the op has no backward (give one, or detach)',
              what, i), 3)
          end
        end
      end
      local K = kernels_on(device_of(...))
      return def.forward(K, stub, ...)
    end
  end
  return setmetatable(op, { __call = function(_, ...) return call(...) end })
end

return kernel
