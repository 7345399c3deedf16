-- scripts/v100/repl.lua: `v100.repl`, what the interactive prompt adds to Lua's (bindings/main.c
-- calls it when the REPL starts, as `th` did for Torch7):
--   repl.setup()             the globals v100, nn, optim (what an experiment reaches for first);
--   repl.show(...)           how the prompt prints a result: tensors with their values, tables
--                            pretty-printed (a shape as {2, 3}; a state_dict as its names, dtypes
--                            and shapes; nested tables indented), cut at repl.limits.depth levels
--                            and repl.limits.items entries per table;
--   repl.format(v)           the same text as one string (what show prints);
--   repl.complete(line, word) the completions of `word` (the text before the cursor ends with it):
--                            globals, then fields after '.' and methods after ':' of tables,
--                            modules (parameters, buffers, children, the class's methods) and
--                            tensors. Never calls an __index function other than the tensor's and
--                            the modules' own lookups, so completing has no side effects.
-- Lua-visible only through the prompt; scripts do not need it.
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local errors = require 'v100.errors'

local repl = {}
repl.limits = { depth = 3, items = 40, width = 100 }

function repl.setup()
  _G.v100, _G.nn, _G.optim = v100, nn, optim
end

-- ---- printing ----

local is_tensor = v100.is_tensor

-- A freed tensor raises on every field: shown as freed instead.
local function freed(t) return not pcall(function() return t.dtype end) end

local function tensor_brief(t)
  if freed(t) then return '[v100.Tensor freed]' end
  local shape = table.concat(t.shape, 'x')
  return string.format('[v100.Tensor %s %s %s]', t.device, t.dtype, shape == '' and '0-dim' or shape)
end

local function is_module(x)
  local mt = type(x) == 'table' and getmetatable(x)
  return mt and rawget(mt, '__is_module_class') == true or false
end

local function scalar_text(v, quoted)
  local ty = type(v)
  if ty == 'string' then return quoted and string.format('%q', v):gsub('\\\n', '\\n') or v end
  if ty == 'number' then
    if math.type(v) == 'integer' then return tostring(v) end
    return string.format('%.14g', v):gsub('^(%-?%d+)$', '%1.0')
  end
  if ty == 'boolean' or ty == 'nil' then return tostring(v) end
  return nil
end

local function key_text(k)
  if type(k) == 'string' and k:match('^[%a_][%w_]*$') then return k end
  return '[' .. (scalar_text(k, true) or tostring(k)) .. ']'
end

-- Keys in a stable order: 1..n first, then the rest sorted by type and value.
local function sorted_keys(t)
  local n, keys, rest = #t, {}, {}
  for i = 1, n do keys[i] = i end
  for k in next, t do
    if not (math.type(k) == 'integer' and k >= 1 and k <= n) then rest[#rest + 1] = k end
  end
  table.sort(rest, function(a, b)
    local ta, tb = type(a), type(b)
    if ta ~= tb then return ta < tb end
    if ta == 'number' or ta == 'string' then return a < b end
    return tostring(a) < tostring(b)
  end)
  for _, k in ipairs(rest) do keys[#keys + 1] = k end
  return keys, n
end

local function all_tensors(t)
  local any = false
  for _, v in next, t do
    if not is_tensor(v) then return false end
    any = true
  end
  return any
end

local format_value

-- A state_dict (every value a tensor): one line per name, aligned, with dtype and shape.
local function format_state(t, indent, lim)
  local keys = sorted_keys(t)
  local w = 0
  local function name(k) return type(k) == 'string' and k or key_text(k) end -- names as state_dict keys read
  for _, k in ipairs(keys) do w = math.max(w, #name(k)) end
  local lines, shown = { '{' }, math.min(#keys, lim.items)
  for i = 1, shown do
    local k, v = keys[i], t[keys[i]]
    local desc = freed(v) and 'freed'
      or string.format('%s %s {%s}%s', v.dtype, v.device, table.concat(v.shape, ', '), v.requires_grad and ' grad' or '')
    lines[#lines + 1] = string.format('%s  %-' .. w .. 's  %s', indent, name(k), desc)
  end
  if #keys > shown then lines[#lines + 1] = string.format('%s  ... (%d more)', indent, #keys - shown) end
  lines[#lines + 1] = indent .. '}'
  return table.concat(lines, '\n')
end

local function format_table(t, indent, depth, seen, lim)
  if seen[t] then return '<cycle>' end
  if next(t) == nil then return '{}' end
  if depth >= lim.depth then
    local n = 0
    for _ in next, t do n = n + 1 end
    return string.format('{...} (%d entr%s)', n, n == 1 and 'y' or 'ies')
  end
  if all_tensors(t) and #t == 0 then return format_state(t, indent, lim) end
  seen[t] = true
  local keys, n = sorted_keys(t)
  local shown = math.min(#keys, lim.items)
  -- A short list of scalars (a shape, a few names) on one line.
  if n == #keys then
    local parts, flat = {}, true
    for i = 1, shown do
      local s = scalar_text(t[i], true)
      if not s then flat = false break end
      parts[i] = s
    end
    if flat then
      if #keys > shown then parts[#parts + 1] = string.format('... (%d more)', #keys - shown) end
      seen[t] = nil
      local line = '{' .. table.concat(parts, ', ') .. '}'
      if #line + #indent <= lim.width then return line end
      -- too wide for one line: filled lines of the items
      local lines, cur = { '{' }, indent .. ' '
      for i, p in ipairs(parts) do
        local piece = ' ' .. p .. (i < #parts and ',' or '')
        if #cur + #piece > lim.width and cur ~= indent .. ' ' then
          lines[#lines + 1] = cur
          cur = indent .. ' '
        end
        cur = cur .. piece
      end
      lines[#lines + 1] = cur
      lines[#lines + 1] = indent .. '}'
      return table.concat(lines, '\n')
    end
  end
  local lines = { '{' }
  for i = 1, shown do
    local k = keys[i]
    local v = format_value(t[k], indent .. '  ', depth + 1, seen, lim)
    lines[#lines + 1] = indent .. '  ' .. (i <= n and '' or key_text(k) .. ' = ') .. v .. ','
  end
  if #keys > shown then lines[#lines + 1] = string.format('%s  ... (%d more)', indent, #keys - shown) end
  lines[#lines + 1] = indent .. '}'
  seen[t] = nil
  return table.concat(lines, '\n')
end

function format_value(v, indent, depth, seen, lim)
  local s = scalar_text(v, depth > 0)
  if s then return s end
  if is_tensor(v) then return (depth == 0 and not freed(v)) and tostring(v) or tensor_brief(v) end
  if type(v) == 'table' then
    local mt = getmetatable(v)
    if is_module(v) then
      if depth == 0 then return tostring(v) end
      return '<' .. (mt.__name or 'Module') .. '>'
    end
    if mt and mt.__tostring then return tostring(v) end
    return format_table(v, indent, depth, seen, lim)
  end
  return tostring(v)
end

function repl.format(v)
  local lim = repl.limits
  return format_value(v, '', 0, {}, lim)
end

function repl.show(...)
  local n = select('#', ...)
  local parts = {}
  for i = 1, n do parts[i] = repl.format((select(i, ...))) end
  io.write(table.concat(parts, '\t'), '\n')
  io.flush()
end

-- ---- completion ----

local KEYWORDS = { 'and', 'break', 'do', 'else', 'elseif', 'end', 'false', 'for', 'function', 'goto', 'if', 'in',
  'local', 'nil', 'not', 'or', 'repeat', 'return', 'then', 'true', 'until', 'while' }
local TENSOR_FIELDS = { 'shape', 'dtype', 'device', 'ndim', 'grad', 'requires_grad', 'grad_fn', 'is_leaf' }

local function add_keys(out, t)
  for k in next, t do
    if type(k) == 'string' then out[k] = out[k] or type(rawget(t, k)) end
  end
end

-- The names reachable from x after '.' (fields) with what they hold; the class chain of tables
-- whose metatable's __index is a table, a module's parameters, buffers and children.
local function names_of(x)
  local out = {}
  if is_tensor(x) then
    for k, v in next, v100.Tensor do
      if type(k) == 'string' then out[k] = type(v) end
    end
    for _, k in ipairs(TENSOR_FIELDS) do out[k] = 'field' end
    return out
  end
  if type(x) == 'string' then
    for k, v in next, string do out[k] = type(v) end
    return out
  end
  if type(x) ~= 'table' then return out end
  add_keys(out, x)
  local guard = 0
  local mt = getmetatable(x)
  if is_module(x) then
    for _, f in ipairs { '_parameters', '_buffers', '_modules' } do
      local t = rawget(x, f)
      if type(t) == 'table' then add_keys(out, t) end
    end
    -- the class and its parents: each class is a table whose metatable's __index is the parent
    local c = mt
    while type(c) == 'table' and guard < 64 do
      add_keys(out, c)
      local cm = getmetatable(c)
      c = cm and rawget(cm, '__index')
      guard = guard + 1
    end
    return out
  end
  while mt and type(rawget(mt, '__index')) == 'table' and guard < 64 do
    local idx = rawget(mt, '__index')
    add_keys(out, idx)
    mt = getmetatable(idx)
    guard = guard + 1
  end
  return out
end

-- The value a dotted path names (raw lookups, a module's registries, the tensor's methods);
-- nil when any step is not plainly reachable.
local function resolve(path)
  local x = _G
  for part in path:gmatch('[^%.:]+') do
    if is_tensor(x) then
      x = rawget(v100.Tensor, part)
    elseif type(x) == 'table' then
      local v = rawget(x, part)
      if v == nil and is_module(x) then
        for _, f in ipairs { '_parameters', '_buffers', '_modules' } do
          local t = rawget(x, f)
          if type(t) == 'table' and t[part] ~= nil then v = t[part] break end
        end
      end
      if v == nil then
        local names = names_of(x)
        if names[part] then
          local mt = getmetatable(x)
          -- a class-chain method: find it without __index functions
          while v == nil and type(mt) == 'table' do
            v = rawget(mt, part)
            local idx = rawget(mt, '__index')
            if type(idx) == 'table' and v == nil then v = rawget(idx, part) end
            local nmt = getmetatable(mt)
            mt = nmt and rawget(nmt, '__index')
          end
        end
      end
      x = v
    else
      return nil
    end
    if x == nil then return nil end
  end
  return x
end

-- Completions of `word` (the last expression fragment before the cursor), sorted.
function repl.complete(line, word)
  word = word or line:match('[%w_%.:]*$') or ''
  local base, sep, stem = word:match('^(.*)([%.:])([%w_]*)$')
  local names, prefix = {}, ''
  if base then
    if base == '' or base:find('[%.:][%.:]') then return {} end
    local x = resolve(base)
    if x == nil then return {} end
    names = names_of(x)
    prefix = base .. sep
    if sep == ':' then
      for k, ty in pairs(names) do
        if ty ~= 'function' then names[k] = nil end
      end
    end
  else
    stem = word
    names = names_of(_G)
    for _, k in ipairs(KEYWORDS) do names[k] = 'keyword' end
  end
  local out = {}
  for k in pairs(names) do
    if k:sub(1, #stem) == stem and (stem:sub(1, 1) == '_' or k:sub(1, 1) ~= '_') then out[#out + 1] = prefix .. k end
  end
  table.sort(out)
  return out
end

-- Limits are set with repl.set_limits{depth =, items =, width =}: unknown keys are refused.
function repl.set_limits(o)
  if type(o) ~= 'table' then errors.fail(2, 'repl.set_limits: expected a table, got %s', type(o)) end
  errors.check_opts('repl.set_limits', o, { 'depth', 'items', 'width' })
  for k, v in pairs(o) do
    if math.type(v) ~= 'integer' or v < 1 then
      errors.fail(2, 'repl.set_limits: %s must be a positive integer, got %s', tostring(k), tostring(v))
    end
  end
  for k, v in pairs(o) do repl.limits[k] = v end
end

return repl
