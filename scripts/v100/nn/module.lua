-- scripts/v100/nn/module.lua: nn.Module, the base class of layers and models.
--
--   local Net = nn.Module:extend('Net')
--   function Net:init(n) self.fc = nn.Linear(n, 2) end        -- assignment registers
--   function Net:forward(x) return self.fc(x):relu() end
--   local net = Net(4)                                        -- constructs: state, then init
--
-- Registered things live outside the instance's raw table (in _parameters, _buffers, _modules),
-- so that every assignment to such a name goes through __newindex and stays registered; plain
-- values (numbers, flags, tensors that require no grad) are stored raw, as attributes.
-- Registration order is kept in the _pnames/_bnames/_mnames lists, because Lua tables have none.
local v100 = require 'v100.base'
local errors = require 'v100.errors'
local nvtx = require 'v100.obs.nvtx'

local Module = {}
Module.__name = 'Module'

local function is_module(x)
  if type(x) ~= 'table' then return false end
  local mt = getmetatable(x)
  return mt ~= nil and rawget(x, '_modules') ~= nil and rawget(mt, '__is_module_class') == true
end
Module.is_module = is_module

local function requires_grad(t)
  return t.requires_grad == true
end

local function remove_name(list, name)
  for i = #list, 1, -1 do
    if list[i] == name then table.remove(list, i) end
  end
end

-- Drops `name` from every registry (before registering it somewhere else).
local function unregister(self, name)
  local p, b, m = rawget(self, '_parameters'), rawget(self, '_buffers'), rawget(self, '_modules')
  if p[name] ~= nil then p[name] = nil remove_name(rawget(self, '_pnames'), name) end
  if b[name] ~= nil then b[name] = nil remove_name(rawget(self, '_bnames'), name) end
  if m[name] ~= nil then m[name] = nil remove_name(rawget(self, '_mnames'), name) end
end

local function check_name(self, name, what)
  if type(name) ~= 'string' and math.type(name) ~= 'integer' then
    error(string.format('%s: %s name must be a string, got %s', self.__name, what, type(name)), 3)
  end
  name = tostring(name)
  if name == '' or name:find('.', 1, true) then
    error(string.format('%s: %s name %q must be non-empty and contain no dot', self.__name, what, name), 3)
  end
  return name
end

function Module:register_parameter(name, t)
  name = check_name(self, name, 'parameter')
  if t ~= nil and not v100.is_tensor(t) then
    error(string.format('%s: parameter %s must be a tensor, got %s', self.__name, name, type(t)), 2)
  end
  local p = rawget(self, '_parameters')
  if p[name] == nil then
    unregister(self, name)
    rawset(self, name, nil)
    if t ~= nil then table.insert(rawget(self, '_pnames'), name) end
  elseif t == nil then
    unregister(self, name)
  end
  if t ~= nil then p[name] = t end
  return t
end

-- persistent = false keeps the buffer out of state_dict (as PyTorch).
function Module:register_buffer(name, t, persistent)
  name = check_name(self, name, 'buffer')
  if t ~= nil and not v100.is_tensor(t) then
    error(string.format('%s: buffer %s must be a tensor, got %s', self.__name, name, type(t)), 2)
  end
  local b = rawget(self, '_buffers')
  if b[name] == nil then
    unregister(self, name)
    rawset(self, name, nil)
    if t ~= nil then table.insert(rawget(self, '_bnames'), name) end
  elseif t == nil then
    unregister(self, name)
  end
  if t ~= nil then b[name] = t end
  rawget(self, '_nonpersistent')[name] = (persistent == false) or nil
  return t
end

function Module:add_module(name, m)
  name = check_name(self, name, 'module')
  if m ~= nil and not is_module(m) then
    error(string.format('%s: add_module(%s): not a module (%s)', self.__name, name, type(m)), 2)
  end
  local mods = rawget(self, '_modules')
  if mods[name] == nil then
    unregister(self, name)
    rawset(self, name, nil)
    if m ~= nil then table.insert(rawget(self, '_mnames'), name) end
  elseif m == nil then
    unregister(self, name)
  end
  if m ~= nil then mods[name] = m end
  return m
end

-- A plain Lua array whose elements are all modules is registered as a ModuleList.
local function is_module_array(v)
  if type(v) ~= 'table' or getmetatable(v) ~= nil or #v == 0 then return false end
  local n = 0
  for _ in pairs(v) do n = n + 1 end
  if n ~= #v then return false end
  for i = 1, #v do if not is_module(v[i]) then return false end end
  return true
end

-- __newindex: only called for names not stored raw (registered names never are).
local function module_newindex(self, k, v)
  if type(k) == 'string' then
    local p, b, m = rawget(self, '_parameters'), rawget(self, '_buffers'), rawget(self, '_modules')
    if v == nil then
      if p[k] ~= nil or b[k] ~= nil or m[k] ~= nil then unregister(self, k) end
      return
    end
    if is_module(v) then return Module.add_module(self, k, v) end
    if is_module_array(v) then
      return Module.add_module(self, k, Module._list.ModuleList(v))
    end
    if v100.is_tensor(v) then
      -- a name already registered stays what it is; a new tensor that requires grad is a parameter
      if p[k] ~= nil or (b[k] == nil and requires_grad(v)) then return Module.register_parameter(self, k, v) end
      if b[k] ~= nil then return Module.register_buffer(self, k, v, not rawget(self, '_nonpersistent')[k]) end
    elseif p[k] ~= nil or b[k] ~= nil or m[k] ~= nil then
      unregister(self, k)
    end
  end
  rawset(self, k, v)
end

-- __index: registered names first, then integers as 1-based child positions (containers), then
-- the class chain.
local function module_index(self, k)
  local v = rawget(self, '_parameters')[k]
  if v ~= nil then return v end
  v = rawget(self, '_buffers')[k]
  if v ~= nil then return v end
  local mods = rawget(self, '_modules')
  v = mods[k]
  if v ~= nil then return v end
  if math.type(k) == 'integer' then
    local names = rawget(self, '_mnames')
    local name = names[k > 0 and k or #names + k + 1]
    return name and mods[name]
  end
  return getmetatable(self)[k]
end

-- ---------------------------------------------------------------------------------------------
-- Calls, with the module path put in front of errors once, at the outermost module call.

local active = {} -- modules being called, outermost first

-- The dotted name of `child` below `parent`: usually a direct child, but containers that are
-- not called themselves (ModuleList, ModuleDict, plain lists) sit in between, so the subtree is
-- searched breadth first (the shortest name wins when a module is registered twice).
local function child_name(parent, child)
  local queue, head = { { parent, '' } }, 1
  local seen = { [parent] = true }
  while queue[head] do
    local m, prefix = queue[head][1], queue[head][2]
    head = head + 1
    local mods = rawget(m, '_modules')
    for _, name in ipairs(rawget(m, '_mnames')) do
      local c = mods[name]
      local full = prefix == '' and name or (prefix .. '.' .. name)
      if c == child then return full end
      if not seen[c] then
        seen[c] = true
        queue[#queue + 1] = { c, full }
      end
    end
  end
  return '<' .. (getmetatable(child).__name or 'Module') .. '>'
end

local ModuleError = {}
ModuleError.__tostring = function(e) return e.msg end

local function path_of(stack)
  local parts = {}
  for i = 2, #stack do parts[#parts + 1] = child_name(stack[i - 1], stack[i]) end
  return table.concat(parts, '.')
end

-- NVTX ranges (v100.nvtx): "<name in the parent>: <class>", cached per module (weak keys).
local nvtx_labels = setmetatable({}, { __mode = 'k' })
local function nvtx_label(self, depth)
  local label = nvtx_labels[self]
  if label then return label end
  local cls = getmetatable(self).__name or 'Module'
  local name = depth > 1 and child_name(active[depth - 1], self) or '<'
  label = name:sub(1, 1) == '<' and cls or (name .. ': ' .. cls) -- '<': not registered below its caller
  nvtx_labels[self] = label
  return label
end

local function module_call(self, ...)
  local depth = #active + 1
  active[depth] = self
  local tok = nvtx.on and nvtx.scope_enter(nvtx_label(self, depth)) or 0
  local res = table.pack(pcall(self.forward, self, ...))
  if tok ~= 0 then nvtx.scope_leave(tok) end
  active[depth] = nil
  if res[1] then return table.unpack(res, 2, res.n) end
  local err = res[2]
  if getmetatable(err) ~= ModuleError then
    -- the innermost failing module: keep the chain of calls from the outermost module (the
    -- callers are still in `active`); the outermost call turns it into a path, once
    local stack = {}
    for i = 1, depth - 1 do stack[i] = active[i] end
    stack[depth] = self
    -- C op errors carry the position of the Lua line that called them; inside this library
    -- (nn/functional.lua) that position says nothing to the user, the module path does
    local msg = tostring(err):gsub('^[^\n]-/v100/nn/[%w_]+%.lua:%d+: ', '', 1)
    err = setmetatable({ msg = msg, stack = stack, raw = err }, ModuleError)
  end
  if depth > 1 then error(err, 0) end
  local path = path_of(err.stack)
  if path == '' then error(err.raw, 0) end
  error(path .. ': ' .. err.msg, 0)
end

function Module:forward()
  error(string.format('%s: forward is not implemented', self.__name), 0)
end

-- ---------------------------------------------------------------------------------------------
-- Classes

local METAMETHODS = { '__index', '__newindex', '__call', '__tostring', '__len', '__close', '__name', '__pairs' }

-- Creates a subclass: a table that is both the instances' metatable and the methods table.
function Module:extend(name)
  if type(name) ~= 'string' then error('Module:extend(name): name must be a string', 2) end
  local parent = self
  local C = {}
  for _, mm in ipairs(METAMETHODS) do C[mm] = rawget(parent, mm) end
  C.__name = name
  C.__is_module_class = true
  C.super = parent
  return setmetatable(C, {
    __index = parent,
    __call = function(cls, ...) return cls.new(cls, ...) end,
    __tostring = function() return 'class ' .. name end,
  })
end

-- Instance state, then the class's init.
function Module.new(cls, ...)
  local obj = setmetatable({
    _parameters = {}, _buffers = {}, _modules = {},
    _pnames = {}, _bnames = {}, _mnames = {}, _nonpersistent = {},
    training = true,
  }, cls)
  obj:init(...)
  return obj
end

function Module:init() end

Module.__index = module_index
Module.__newindex = module_newindex
Module.__call = module_call
Module.__is_module_class = true
setmetatable(Module, { __call = function(cls, ...) return cls.new(cls, ...) end })

-- ---------------------------------------------------------------------------------------------
-- Walking the tree

-- Calls fn(prefix, module) in pre-order; each module once (shared submodules are visited once).
local function walk(m, prefix, fn, seen)
  if seen[m] then return end
  seen[m] = true
  fn(prefix, m)
  for _, name in ipairs(rawget(m, '_mnames')) do
    walk(rawget(m, '_modules')[name], prefix == '' and name or (prefix .. '.' .. name), fn, seen)
  end
end

local function join(prefix, name) return prefix == '' and name or (prefix .. '.' .. name) end

-- List of {name, module} in pre-order, the root first under the name ''.
function Module:named_modules()
  local out = {}
  walk(self, '', function(prefix, m) out[#out + 1] = { prefix, m } end, {})
  return out
end

function Module:modules()
  local out = {}
  for _, e in ipairs(self:named_modules()) do out[#out + 1] = e[2] end
  return out
end

function Module:children()
  local out = {}
  for _, name in ipairs(rawget(self, '_mnames')) do out[#out + 1] = rawget(self, '_modules')[name] end
  return out
end

function Module:named_children()
  local out = {}
  for _, name in ipairs(rawget(self, '_mnames')) do out[#out + 1] = { name, rawget(self, '_modules')[name] } end
  return out
end

-- {name, tensor} of one registry (_parameters/_pnames or _buffers/_bnames) over the module tree,
-- in registration order (own first, then children in order), each tensor once.
local function named_tensors(self, registry, names)
  local out, seen = {}, {}
  walk(self, '', function(prefix, m)
    local r = rawget(m, registry)
    for _, name in ipairs(rawget(m, names)) do
      local t = r[name]
      if not seen[t] then
        seen[t] = true
        out[#out + 1] = { join(prefix, name), t }
      end
    end
  end, {})
  return out
end

local function values(named)
  local out = {}
  for _, e in ipairs(named) do out[#out + 1] = e[2] end
  return out
end

function Module:named_parameters() return named_tensors(self, '_parameters', '_pnames') end
function Module:parameters() return values(self:named_parameters()) end
function Module:named_buffers() return named_tensors(self, '_buffers', '_bnames') end
function Module:buffers() return values(self:named_buffers()) end

-- fn(m) on every submodule (children first, then self), as PyTorch's apply.
function Module:apply(fn)
  for _, c in ipairs(self:children()) do c:apply(fn) end
  fn(self)
  return self
end

function Module:train(mode)
  if mode == nil then mode = true end
  for _, m in ipairs(self:modules()) do rawset(m, 'training', mode and true or false) end
  return self
end

function Module:eval() return self:train(false) end

function Module:zero_grad(set_to_none)
  for _, p in ipairs(self:parameters()) do
    if set_to_none == false then
      local g = p.grad
      if g then g:zero_() end
    else
      p.grad = nil
    end
  end
  return self
end

function Module:num_parameters()
  local n = 0
  for _, p in ipairs(self:parameters()) do n = n + p:numel() end
  return n
end

-- ---------------------------------------------------------------------------------------------
-- state_dict

-- name -> tensor (detached views sharing storage) for parameters and persistent buffers; tied
-- parameters appear under each of their names, as in PyTorch.
function Module:state_dict()
  local sd = {}
  local function put(name, t) sd[name] = t.detach and t:detach() or t end
  walk(self, '', function(prefix, m)
    local p, b = rawget(m, '_parameters'), rawget(m, '_buffers')
    for _, name in ipairs(rawget(m, '_pnames')) do put(join(prefix, name), p[name]) end
    for _, name in ipairs(rawget(m, '_bnames')) do
      if not rawget(m, '_nonpersistent')[name] then put(join(prefix, name), b[name]) end
    end
  end, {})
  return sd
end

-- Every (name, owner module, local name, kind) that a state dict of this module holds.
local function state_entries(self)
  local out = {}
  walk(self, '', function(prefix, m)
    for _, name in ipairs(rawget(m, '_pnames')) do out[#out + 1] = { join(prefix, name), rawget(m, '_parameters')[name] } end
    for _, name in ipairs(rawget(m, '_bnames')) do
      if not rawget(m, '_nonpersistent')[name] then out[#out + 1] = { join(prefix, name), rawget(m, '_buffers')[name] } end
    end
  end, {})
  return out
end

local function shape_str(t)
  local s = t.shape
  return #s == 0 and 'scalar' or table.concat(s, 'x')
end

local function same_shape(a, b)
  local sa, sb = a.shape, b.shape
  if #sa ~= #sb then return false end
  for i = 1, #sa do if sa[i] ~= sb[i] then return false end end
  return true
end

-- Copies sd's tensors into this module's tensors (any dtype/device: copy_ converts). strict
-- (default) raises on missing or unexpected names; mis-shaped names always raise. Returns
-- {missing_keys = {...}, unexpected_keys = {...}} (sorted).
function Module:load_state_dict(sd, opts)
  errors.check_opts('load_state_dict', opts, { 'strict' })
  local strict = not (opts and opts.strict == false)
  if type(sd) ~= 'table' then error('load_state_dict: expected a table name -> tensor, got ' .. type(sd), 2) end
  local entries = state_entries(self)
  local known, missing, misshaped = {}, {}, {}
  for _, e in ipairs(entries) do
    local name, t = e[1], e[2]
    known[name] = true
    local src = sd[name]
    if src == nil then
      missing[#missing + 1] = name
    elseif not v100.is_tensor(src) then
      misshaped[#misshaped + 1] = string.format('%s (not a tensor: %s)', name, type(src))
    elseif not same_shape(src, t) then
      misshaped[#misshaped + 1] = string.format('%s (checkpoint %s, model %s)', name, shape_str(src), shape_str(t))
    end
  end
  local unexpected = {}
  for name in pairs(sd) do
    if not known[name] then unexpected[#unexpected + 1] = tostring(name) end
  end
  table.sort(missing)
  table.sort(unexpected)
  if #misshaped > 0 or (strict and (#missing > 0 or #unexpected > 0)) then
    local parts = {}
    if strict and #missing > 0 then parts[#parts + 1] = 'missing keys: ' .. table.concat(missing, ', ') end
    if strict and #unexpected > 0 then parts[#parts + 1] = 'unexpected keys: ' .. table.concat(unexpected, ', ') end
    if #misshaped > 0 then parts[#parts + 1] = 'mis-shaped keys: ' .. table.concat(misshaped, ', ') end
    error(string.format('load_state_dict (%s): %s', getmetatable(self).__name, table.concat(parts, '; ')), 2)
  end
  -- in-place copies into leaves that require grad must not be recorded
  v100.no_grad(function()
    for _, e in ipairs(entries) do
      local src = sd[e[1]]
      if src ~= nil then e[2]:copy_(src) end
    end
  end)
  return { missing_keys = missing, unexpected_keys = unexpected }
end

-- ---------------------------------------------------------------------------------------------
-- Conversion

-- m:to(device[, dtype][, {layout=}]), m:to(dtype), m:to{device=, dtype=, layout=}.
local function parse_to_args(...)
  local r = {}
  for i = 1, select('#', ...) do
    local a = select(i, ...)
    if type(a) == 'table' then
      errors.check_opts('Module:to', a, { 'device', 'dtype', 'layout' }, 3)
      r.device = a.device or r.device
      r.dtype = a.dtype or r.dtype
      r.layout = a.layout or r.layout
    elseif type(a) == 'string' then
      -- v100.dtype_of reads the runtime's one dtype table: every spelling t:to() takes
      if v100.dtype_of(a) then r.dtype = a else r.device = a end
    elseif a ~= nil then
      error('Module:to: expected a device, a dtype or an options table, got ' .. type(a), 3)
    end
  end
  if r.dtype then
    local d = type(r.dtype) == 'string' and v100.dtype_of(r.dtype)
    if not d or not v100.dtype_is_float(d) then
      error('Module:to: dtype must be a floating type, got ' .. tostring(r.dtype), 3)
    end
    r.dtype = d
  end
  if r.layout and r.layout ~= 'nhwc' and r.layout ~= 'nchw' then
    error("Module:to: layout must be 'nhwc' or 'nchw', got " .. tostring(r.layout), 3)
  end
  return r
end

-- Target dtype of one tensor: integer tensors and explicitly kept ones (class field _keep_f32:
-- BatchNorm/LayerNorm parameters and running stats, which the kernels keep in f32 for f16/bf16
-- data) do not follow a half dtype.
local function target_dtype(t, dtype, keep)
  if not dtype or not v100.dtype_is_float(t.dtype) then return t.dtype end
  if keep and (dtype == 'f16' or dtype == 'bf16') then return 'f32' end
  return dtype
end

local function convert(t, dtype, device, layout)
  local u = t:to{ dtype = dtype, device = device or t.device }
  if layout == 'nhwc' and u.ndim == 4 then
    -- N x C x H x W logical shape with NHWC-contiguous strides (also for C == 1: a 1-channel
    -- conv weight must read as channels-last for the convolutions to run NHWC)
    u = u:to_channels_last()
  elseif layout == 'nchw' and u.ndim == 4 then
    u = u:contiguous()
  end
  -- nothing changed: keep the very object
  if u.dtype == t.dtype and u.device == t.device and u:data_ptr() == t:data_ptr() then
    local su, st = u:stride(), t:stride()
    local same = #su == #st
    for i = 1, #su do if su[i] ~= st[i] then same = false end end
    if same then return t end
  end
  return u
end

-- Converts parameters and buffers. When the binding t:set_(src) exists, each tensor object is
-- updated in place (optimizers built before keep valid references); otherwise the module's
-- entries are replaced by new tensors and optimizers must be built after :to().
function Module:to(...)
  local a = parse_to_args(...)
  local set_ = v100.Tensor.set_
  local done = {} -- old tensor -> new tensor, so that shared tensors stay shared
  local function one(m, registry, name, is_param)
    local t = rawget(m, registry)[name]
    local new = done[t]
    if new == nil then
      local keep = getmetatable(m)._keep_f32
      local dt = target_dtype(t, a.dtype, keep and keep[name])
      new = v100.no_grad(function()
        local u = convert(t, dt, a.device, a.layout)
        if u == t then return t end
        local g = is_param and t.grad
        local gu = g and convert(g, dt, a.device, a.layout)
        if is_param then u:requires_grad_(t.requires_grad) end
        if set_ then
          if g then t.grad = nil end
          t:set_(u)
          u = t
        end
        if gu then u.grad = gu end
        return u
      end)
      done[t] = new
    end
    rawget(m, registry)[name] = new
  end
  walk(self, '', function(_, m)
    for _, name in ipairs(rawget(m, '_pnames')) do one(m, '_parameters', name, true) end
    for _, name in ipairs(rawget(m, '_bnames')) do one(m, '_buffers', name, false) end
  end, {})
  return self
end

function Module:float() return self:to('f32') end
function Module:half() return self:to('f16') end
function Module:bfloat16() return self:to('bf16') end
function Module:double() return self:to('f64') end
function Module:cuda(n) return self:to(n and ('cuda:' .. n) or 'cuda') end
function Module:cpu() return self:to('cpu') end

-- ---------------------------------------------------------------------------------------------
-- Printing, as PyTorch's repr:
--   Net(
--     (conv1): Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))
--     (layers): ModuleList(
--       (0): Linear(in_features=4, out_features=2, bias=true)
--     )
--   )

function Module:extra_repr() return '' end

local function repr(m)
  local name = getmetatable(m).__name or 'Module'
  local extra = m:extra_repr() or ''
  local names = rawget(m, '_mnames')
  if #names == 0 then return name .. '(' .. extra .. ')' end
  local lines = { name .. '(' }
  if extra ~= '' then lines[#lines + 1] = '  ' .. extra:gsub('\n', '\n  ') end
  for _, cname in ipairs(names) do
    local child = repr(rawget(m, '_modules')[cname]):gsub('\n', '\n  ')
    lines[#lines + 1] = '  (' .. cname .. '): ' .. child
  end
  lines[#lines + 1] = ')'
  return table.concat(lines, '\n')
end
Module.__tostring = repr

-- ---------------------------------------------------------------------------------------------
-- ModuleList and the list containers' helpers (containers.lua builds Sequential on them). They
-- live here because __newindex above registers a plain array of modules as a ModuleList.

local function append(self, m)
  local n = #rawget(self, '_mnames')
  Module.add_module(self, tostring(n), m)
  return self
end

local function list_len(self) return #rawget(self, '_mnames') end

-- seq[i] = m (1-based; i = #seq + 1 appends, which is what table.insert(list, m) does).
local function list_newindex(self, k, v)
  if math.type(k) ~= 'integer' then return Module.__newindex(self, k, v) end
  local n = list_len(self)
  if k == n + 1 and v ~= nil then return append(self, v) end
  if k < 1 or k > n then error(string.format('%s: index %d out of range (1..%d)', self.__name, k, n + 1), 2) end
  if not Module.is_module(v) then error(string.format('%s: element %d must be a module', self.__name, k), 2) end
  rawget(self, '_modules')[rawget(self, '_mnames')[k]] = v
end

local ModuleList = Module:extend('ModuleList')
ModuleList.__len = list_len
ModuleList.__newindex = list_newindex

function ModuleList:init(mods)
  for i, m in ipairs(mods or {}) do
    if not Module.is_module(m) then error(string.format('ModuleList: element %d is not a module', i), 4) end
    append(self, m)
  end
end

ModuleList.append = append
function ModuleList:extend(mods)
  for _, m in ipairs(mods) do append(self, m) end
  return self
end

function ModuleList:forward()
  error('ModuleList is not callable: iterate over it in the parent forward', 0)
end

Module._list = { append = append, len = list_len, newindex = list_newindex, ModuleList = ModuleList }

return Module
