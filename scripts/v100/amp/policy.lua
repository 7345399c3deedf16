-- scripts/v100/amp/policy.lua: AMP's optimisation levels (docs/AMP.md), exposed as amp.policy
-- and amp.half_model.
--
--   local policy = amp.policy('O2', { dtype = 'bf16' })   -- keep_fp32 defaults to the norms
--   policy:convert(model)                                 -- half model, norms kept f32
--   local opt = optim.AdamW(model:parameters(), policy:optimizer_opts { lr = 1e-3 })
--   local out = policy:autocast(function() return model(x) end)
--
-- O0: f32, nothing changes. O1: the model stays f32 and ops run in half under autocast (the C
-- dispatch, amp.autocast). O2: the model in half except the modules in keep_fp32 (by default the
-- BatchNorms and LayerNorm), the optimizer holding f32 master weights. O3: everything in half.
--
-- amp/init.lua requires this file and re-exports its fields; O1's autocast comes from the module
-- below both (amp/autocast.lua), so this file never needs v100.amp itself.
local v100 = require 'v100.base'
local errors = require 'v100.errors'
local Module = require 'v100.nn.module'
local autocast = require 'v100.amp.autocast'

local M = {}

local LEVELS = { O0 = 0, O1 = 1, O2 = 2, O3 = 3 }
local LEVEL_NAMES = { [0] = 'O0', 'O1', 'O2', 'O3' }
local DTYPES = { fp16 = 'f16', f16 = 'f16', half = 'f16', bf16 = 'bf16', bfloat16 = 'bf16' }
local DTYPE_CODE = { f16 = 1, bf16 = 2 }
local DTYPE_OF_CODE = { 'f16', 'bf16' }
local DEFAULT_KEEP = { O0 = {}, O1 = {}, O2 = { 'BatchNorm1d', 'BatchNorm2d', 'LayerNorm' }, O3 = {} }

-- The functions' `level` argument (1: blame the caller of the public function) is counted from the
-- public function's caller; errors.fail counts from the function calling it, hence level + 1 or + 2.
local fail = errors.fail

local function half_dtype(what, dt, level)
  if dt == nil then return 'f16' end
  local d = type(dt) == 'string' and DTYPES[dt]
  if not d then
    fail(level + 2, "%s: dtype must be 'fp16' or 'bf16', got %s", what, type(dt) == 'string' and ("'" .. dt .. "'") or type(dt))
  end
  return d
end

-- A copy of the keep_fp32 list, checked: a list of non-empty strings.
local function keep_list(what, keep, level)
  if type(keep) ~= 'table' then fail(level + 2, '%s: keep_fp32 must be a list of class names or module paths, got %s', what, type(keep)) end
  local out = {}
  for k in pairs(keep) do
    if math.type(k) ~= 'integer' or k < 1 or k > #keep then
      fail(level + 2, '%s: keep_fp32 must be a list (a plain array), found the key %s', what, tostring(k))
    end
  end
  for i, e in ipairs(keep) do
    if type(e) ~= 'string' or e == '' then
      fail(level + 2, '%s: keep_fp32 entry %d must be a non-empty string (a class name or a dotted module path), got %s',
        what, i, type(e) == 'string' and "''" or type(e))
    end
    out[i] = e
  end
  return out
end

-- The class name of m and of every base class up to nn.Module (a subclass of LayerNorm is kept
-- by 'LayerNorm').
local function class_names(m)
  local names, c = {}, getmetatable(m)
  while c ~= nil and rawget(c, '__is_module_class') do
    names[#names + 1] = rawget(c, '__name')
    c = rawget(c, 'super')
  end
  return names
end

-- The tensor t as dtype, in place (t:set_ keeps the object, so optimizers that hold it stay
-- valid); its gradient follows.
local function cast_in_place(t, dtype)
  if t.dtype == dtype then return end
  v100.no_grad(function()
    local g = t.grad
    local u = t:to(dtype)
    if g then t.grad = nil end
    t:set_(u)
    if g then t.grad = g:to(dtype) end
  end)
end

local function cast_value(v, dtype)
  if v100.is_tensor(v) and v100.dtype_is_float(v.dtype) and v.dtype ~= dtype then return v:to(dtype) end
  return v
end

local function cast_all(dtype, ...)
  local r = table.pack(...)
  for i = 1, r.n do r[i] = cast_value(r[i], dtype) end
  return table.unpack(r, 1, r.n)
end

-- A module kept in f32 inside a half model: its floating tensor inputs are cast to f32 and its
-- floating outputs back to the dtype of its first floating input (the half dtype its neighbours
-- are in; after a later model:float() nothing is cast). The norm layers (a class field
-- _keep_f32) need no cast: their C ops take half data with f32 parameters.
local function input_dtype(...)
  for i = 1, select('#', ...) do
    local v = select(i, ...)
    if v100.is_tensor(v) and v100.dtype_is_float(v.dtype) then return v.dtype end
  end
  return nil
end

local function wrap_f32_boundary(m)
  if rawget(m, '_amp_f32_forward') then return end
  local fwd = m.forward
  rawset(m, '_amp_f32_forward', fwd)
  rawset(m, 'forward', function(self, ...)
    local dt = input_dtype(...)
    if dt == nil or dt == 'f32' then return fwd(self, ...) end
    return cast_all(dt, fwd(self, cast_all('f32', ...)))
  end)
end

-- amp.half_model(model, {dtype = 'fp16'|'bf16', keep_fp32 = {...}}): every floating parameter and
-- buffer to the half dtype, except those of the modules (and their submodules) whose class name
-- (or a base class's) or dotted path from model is in keep_fp32, which go to f32. Tensors keep
-- their identity. keep_fp32 defaults to O2's {'BatchNorm1d', 'BatchNorm2d', 'LayerNorm'}; an
-- entry given explicitly that matches no module is an error (a typo would otherwise silently
-- leave the module in half). Returns model.
function M.half_model(model, opts, _level)
  local what = 'amp.half_model'
  local level = _level or 1
  if not Module.is_module(model) then fail(level + 1, '%s: expected an nn.Module, got %s', what, type(model)) end
  -- _strict: Policy:convert's, not a user option (so not listed)
  local user = opts
  if type(opts) == 'table' and opts._strict ~= nil then
    user = {}
    for k, v in pairs(opts) do if k ~= '_strict' then user[k] = v end end
  end
  errors.check_opts(what, user, { 'dtype', 'keep_fp32' }, level + 1)
  opts = opts or {}
  local half = half_dtype(what, opts.dtype, level)
  local strict = opts.keep_fp32 ~= nil
  if opts._strict ~= nil then strict = opts._strict end
  local keep = keep_list(what, opts.keep_fp32 or DEFAULT_KEEP.O2, level)
  local wanted = {}
  for _, e in ipairs(keep) do wanted[e] = true end
  local used = {}
  local named = model:named_modules()
  local kept = {} -- module -> true when it or an ancestor matched
  local roots = {} -- the matched modules whose ancestors did not match
  for _, e in ipairs(named) do
    local path, m = e[1], e[2]
    local hit = path ~= '' and wanted[path] and path or nil
    for _, cn in ipairs(class_names(m)) do
      if wanted[cn] then hit = hit or cn; used[cn] = true end
    end
    if hit then used[hit] = true end
    if not kept[m] and hit then
      roots[#roots + 1] = m
      for _, d in ipairs(m:modules()) do kept[d] = true end
    end
  end
  if strict then
    for _, e in ipairs(keep) do
      if not used[e] then
        fail(level + 1, "%s: keep_fp32 entry '%s' matches no module class or path of the model", what, e)
      end
    end
  end
  local done = {}
  for _, e in ipairs(named) do
    local m = e[2]
    local dt = kept[m] and 'f32' or half
    for _, reg in ipairs { { '_parameters', '_pnames' }, { '_buffers', '_bnames' } } do
      local r = rawget(m, reg[1])
      for _, name in ipairs(rawget(m, reg[2])) do
        local t = r[name]
        if not done[t] and v100.dtype_is_float(t.dtype) then
          done[t] = true
          cast_in_place(t, dt)
        end
      end
    end
  end
  for _, m in ipairs(roots) do
    if getmetatable(m)._keep_f32 == nil then wrap_f32_boundary(m) end
  end
  return model
end

-- ---------------------------------------------------------------------------------------------
-- The policy

local Policy = {}
Policy.__index = Policy
Policy.__name = 'amp.Policy'

function Policy:__tostring()
  return string.format('amp.Policy(%s, %s, keep_fp32 = {%s})', self.level, self.dtype, table.concat(self.keep_fp32, ', '))
end

-- amp.policy(level[, {dtype = 'fp16'|'bf16', keep_fp32 = {...}}]).
function M.policy(level, opts)
  local what = 'amp.policy'
  if LEVELS[level] == nil then
    fail(2, "%s: level must be 'O0', 'O1', 'O2' or 'O3', got %s", what, type(level) == 'string' and ("'" .. level .. "'") or type(level))
  end
  opts = errors.check_opts(what, opts, { 'dtype', 'keep_fp32' })
  if opts.keep_fp32 ~= nil and (level == 'O0' or level == 'O1') then
    fail(2, '%s: keep_fp32 applies to O2 and O3 (%s leaves the model in f32)', what, level)
  end
  local self = setmetatable({}, Policy)
  self.level = level
  self.dtype = half_dtype(what, opts.dtype, 1)
  self.keep_fp32 = keep_list(what, opts.keep_fp32 or DEFAULT_KEEP[level], 1)
  self.strict_keep = opts.keep_fp32 ~= nil
  return self
end

function M.is_policy(x) return getmetatable(x) == Policy end

-- O2/O3: the model to half (amp.half_model with this policy's dtype and keep_fp32); O0/O1 leave it.
function Policy:convert(model)
  if self.level == 'O2' or self.level == 'O3' then
    M.half_model(model, { dtype = self.dtype, keep_fp32 = self.keep_fp32, _strict = self.strict_keep }, 2)
  end
  return model
end

-- Options for an optimizer: a copy of opts, with master_weights = true at O2.
function Policy:optimizer_opts(opts)
  if opts ~= nil and type(opts) ~= 'table' then error('amp.Policy:optimizer_opts: expected a table, got ' .. type(opts), 2) end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if self.level == 'O2' then o.master_weights = true end
  -- pure half weights without masters: stochastic rounding keeps the small updates (optim.lua)
  if self.level == 'O3' and o.stochastic_rounding == nil then o.stochastic_rounding = true end
  return o
end

-- convert(model), then optimizer_factory(model:parameters(), optimizer_opts{}) when given.
-- Returns model and the optimizer.
function Policy:prepare(model, optimizer_factory, opts)
  self:convert(model)
  if optimizer_factory == nil then return model end
  if type(optimizer_factory) ~= 'function' then
    error('amp.Policy:prepare: optimizer_factory must be a function (params, opts) -> optimizer, got ' .. type(optimizer_factory), 2)
  end
  return model, optimizer_factory(model:parameters(), self:optimizer_opts(opts))
end

-- fn() under this level's autocast: O1 runs it in amp.autocast; O0, O2 and O3 just call it (the
-- model already is in its dtypes).
function Policy:autocast(fn, ...)
  if type(fn) ~= 'function' then error('amp.Policy:autocast: expected a function, got ' .. type(fn), 2) end
  if self.level == 'O1' then
    if not autocast.autocast then
      error('amp.Policy:autocast: O1 autocast is not available (amp.autocast is missing from this build)', 2)
    end
    local args = table.pack(...)
    return autocast.autocast(function() return fn(table.unpack(args, 1, args.n)) end, { dtype = self.dtype })
  end
  return fn(...)
end

-- The keep_fp32 list as one u8 tensor: the entries, each followed by a 0 byte, then a final 0
-- (so that an empty list still has one element: safetensors tensors need not be empty, and the
-- whole state stays tensors, like amp.Scaler's, for a prefix in one checkpoint).
local function encode_list(list)
  local bytes = {}
  for _, e in ipairs(list) do
    for i = 1, #e do bytes[#bytes + 1] = e:byte(i) end
    bytes[#bytes + 1] = 0
  end
  bytes[#bytes + 1] = 0
  return v100.tensor(bytes, { dtype = 'u8' })
end

local function decode_list(t)
  local bytes = t:reshape({ -1 }):totable()
  local out, cur = {}, {}
  for i = 1, #bytes - 1 do
    local b = math.tointeger(bytes[i])
    if b == 0 then
      out[#out + 1] = string.char(table.unpack(cur))
      cur = {}
    else
      cur[#cur + 1] = b
    end
  end
  if #cur > 0 or math.tointeger(bytes[#bytes]) ~= 0 then return nil end
  return out
end

-- {level (0..3), dtype (1 f16, 2 bf16), keep_fp32 (u8 bytes)} as CPU tensors.
function Policy:state_dict()
  return {
    level = v100.tensor({ LEVELS[self.level] }, { dtype = 'f32' }),
    dtype = v100.tensor({ DTYPE_CODE[self.dtype] }, { dtype = 'f32' }),
    keep_fp32 = encode_list(self.keep_fp32),
  }
end

function Policy:load_state_dict(sd)
  local what = 'amp.Policy:load_state_dict'
  if type(sd) ~= 'table' then error(what .. ': expected a table from state_dict(), got ' .. type(sd), 2) end
  local function num(k)
    local x = sd[k]
    if not v100.is_tensor(x) or #x ~= 1 then error(string.format('%s: %s must be a 1-element tensor', what, k), 3) end
    return math.tointeger(x:item())
  end
  local lv, dc = num('level'), num('dtype')
  if lv == nil or LEVEL_NAMES[lv] == nil then error(what .. ': level must be 0..3 (O0..O3), got ' .. tostring(sd.level:item()), 2) end
  if dc == nil or DTYPE_OF_CODE[dc] == nil then error(what .. ': dtype must be 1 (f16) or 2 (bf16), got ' .. tostring(sd.dtype:item()), 2) end
  local keep = v100.is_tensor(sd.keep_fp32) and sd.keep_fp32.dtype == 'u8' and decode_list(sd.keep_fp32) or nil
  if keep == nil then error(what .. ': keep_fp32 must be a u8 tensor from state_dict()', 2) end
  self.level, self.dtype, self.keep_fp32 = LEVEL_NAMES[lv], DTYPE_OF_CODE[dc], keep
  -- a list from a checkpoint was checked against the model it was saved with
  self.strict_keep = false
end

return M
