-- scripts/v100/serial.lua: `v100.serial`, saving and loading any plain Lua value (torch.save's
-- role), re-exported as v100.save / v100.load (scripts/v100/base.lua).
--
--   v100.save(path, value)                 -- atomic and durable, as the checkpoints
--   v100.load(path[, {device = 'cuda'}])   -> value
--
-- Values: nil (as the whole value only), booleans, integers and floats (kept apart; inf, -inf and
-- NaN kept), strings of any bytes, tensors (any device, every dtype, requires_grad kept) and
-- tables of them, nested in any depth, with keys that are strings, integers, floats or booleans.
-- The same table reached twice (shared sub-tables, cycles) loads as one table; the same tensor
-- twice as one tensor; tensors that are views of one storage (narrow, transpose, select, expand,
-- ...) as views of one loaded storage with the same sizes, strides and offsets. Refused, naming
-- where the value is ("save: value.layers[3].fn is a function"): functions, threads, userdata
-- other than tensors, tables with a metatable (nn modules with a pointer to state_dict and
-- v100.checkpoint), table or tensor keys.
--
-- The file is a safetensors file (runtime/io/safetensors.h): each storage once, as the 1-D
-- tensor "storage.<k>" of its whole length in its dtype (a small view of a large tensor stores the
-- whole storage, as torch.save does), and the metadata entry "v100.serial": the JSON of
--   {format = "v100.serial", version = 1, root = V,
--    tables = {{{K, V}, ...}, ...},       -- table i's pairs, keys in a fixed order
--    tensors = {{storage = k, dtype =, size =, stride =, offset =, requires_grad =, device =}, ...},
--    storages = {{dtype =, numel =, device =}, ...}}
-- where every value V and key K is a tagged pair: {"nil"}, {"bool", b}, {"int", i}, {"float", x}
-- (x is a JSON number, or "inf", "-inf", "nan", "-0"), {"str", s} (valid UTF-8 without NUL),
-- {"bytes", hex} (any other string), {"table", i}, {"tensor", j}. Tables refer to each other by
-- number, so the JSON is flat whatever the nesting (load builds them without recursion; save walks
-- with its own stack). Loading reads data only: nothing in the file is ever run; every field, tag,
-- reference, dtype, size and view is checked (views against their storage's length), and an error
-- names the file and what is wrong. `device` (loaded tensors' device; default the CPU) is the
-- only option; `device` in the tensor records is informational.
local core = require 'v100.core'
local errors = require 'v100.errors'

local cio, prim = core.io, core._serial
local M = {}

local FORMAT, VERSION, KEY = 'v100.serial', 1, 'v100.serial'
M.FORMAT, M.VERSION, M.METADATA_KEY = FORMAT, VERSION, KEY
local LOAD_OPTIONS = { 'device' }

local function is_tensor(v) return core.is_tensor(v) end

-- Options tables: unknown keys are refused, the message listing the valid ones.
local function check_options(op, opts, valid)
  if opts ~= nil and type(opts) ~= 'table' then errors.fail(3, '%s: expected an options table, got %s', op, type(opts)) end
  return errors.check_opts(op, opts, valid, 3)
end
M.check_options = check_options

-- ---------------------------------------------------------------------------------------------
-- save

local function is_text(s) return not s:find('\0', 1, true) and utf8.len(s) ~= nil end

local function to_hex(s) return (s:gsub('.', function(c) return string.format('%02x', c:byte()) end)) end

-- How a key is shown in a path: .name, ["a b"], [3], [1.5], [true].
local function key_text(k)
  if type(k) == 'string' then
    if k:match('^[%a_][%w_]*$') then return '.' .. k end
    return '[' .. string.format('%q', k):gsub('\\\n', '\\n') .. ']'
  end
  return '[' .. tostring(k) .. ']'
end

-- Keys in a fixed order (booleans, numbers, strings), so that a value always gives the same file.
local KEY_RANK = { boolean = 1, number = 2, string = 3 }
local function key_less(a, b)
  local ta, tb = type(a), type(b)
  if ta ~= tb then return KEY_RANK[ta] < KEY_RANK[tb] end
  if ta == 'boolean' then return (not a) and b end
  return a < b
end

local function float_value(x)
  if x ~= x then return 'nan' end
  if x == math.huge then return 'inf' end
  if x == -math.huge then return '-inf' end
  if x == 0 and 1 / x < 0 then return '-0' end -- JSON text would lose the sign
  return x
end

-- The description of `value` and the storages to write ({['storage.<k>'] = tensor}).
-- root_name names the whole value in messages ("value", "state").
function M.encode(value, op, root_name)
  local tables, tensors, storages, files = {}, {}, {}, {}
  local table_id, tensor_id, storage_id = {}, {}, {}
  local where = {} -- table id -> {parent id, key}: paths are built only for an error
  local function path_of(parent, key)
    local parts = { key ~= nil and key_text(key) or nil }
    local id = parent
    while id do
      local w = where[id]
      if w[2] ~= nil then parts[#parts + 1] = key_text(w[2]) end
      id = w[1]
    end
    local out = { root_name }
    for i = #parts, 1, -1 do out[#out + 1] = parts[i] end
    return table.concat(out)
  end
  local function refuse(parent, key, fmt, ...)
    errors.fail(0, '%s: %s ' .. fmt, op, path_of(parent, key), ...)
  end
  local stack = {}

  local function tensor_ref(t, parent, key)
    local id = tensor_id[t]
    if id then return id end
    local ok, sid, numel = pcall(prim.storage, t)
    if not ok then refuse(parent, key, 'is a tensor that cannot be saved (%s)', tostring(sid)) end
    local dtype = t.dtype
    local skey = sid .. ':' .. dtype
    local k = storage_id[skey]
    if not k then
      k = #storages + 1
      storage_id[skey] = k
      storages[k] = { dtype = dtype, numel = numel, device = t.device }
      files['storage.' .. k] = prim.as_strided(t, { numel }, { 1 }, 0)
    end
    id = #tensors + 1
    tensor_id[t] = id
    tensors[id] = { storage = k, dtype = dtype, size = t:size(), stride = t:stride(), offset = t:storage_offset(),
      requires_grad = t.requires_grad == true, device = t.device }
    return id
  end

  -- The tagged form of v (a value at parent[key]; parent nil for the root).
  local function enc(v, parent, key)
    local tv = type(v)
    if tv == 'boolean' then return { 'bool', v } end
    if tv == 'number' then
      if math.type(v) == 'integer' then return { 'int', v } end
      return { 'float', float_value(v) }
    end
    if tv == 'string' then
      if is_text(v) then return { 'str', v } end
      return { 'bytes', to_hex(v) }
    end
    if tv == 'table' then
      local id = table_id[v]
      if id then return { 'table', id } end
      local mt = getmetatable(v)
      if mt ~= nil then
        if type(v.state_dict) == 'function' and type(v.parameters) == 'function' then
          refuse(parent, key, 'is an nn module: save model:state_dict() (tensors) instead, or use v100.checkpoint.save(dir, {model = m, ...})')
        end
        refuse(parent, key, 'is a table with a metatable (only plain tables are saved: copy its fields into one)')
      end
      id = #tables + 1
      table_id[v] = id
      tables[id] = false -- filled when popped
      where[id] = { parent, key }
      stack[#stack + 1] = { v, id }
      return { 'table', id }
    end
    if tv == 'userdata' and is_tensor(v) then return { 'tensor', tensor_ref(v, parent, key) } end
    if tv == 'nil' then refuse(parent, key, 'is nil') end
    refuse(parent, key, 'is a %s (saved: nil, booleans, numbers, strings, tensors and plain tables of them)',
      tv == 'userdata' and 'userdata other than a tensor' or tv)
  end

  local root = value == nil and { 'nil' } or enc(value, nil, nil)
  while #stack > 0 do
    local item = table.remove(stack)
    local t, id = item[1], item[2]
    local keys = {}
    for k in next, t do
      local tk = type(k)
      if tk ~= 'string' and tk ~= 'number' and tk ~= 'boolean' then
        refuse(id, nil, 'has a %s key (keys are strings, numbers or booleans)', tk == 'userdata' and is_tensor(k) and 'tensor' or tk)
      end
      keys[#keys + 1] = k
    end
    table.sort(keys, key_less)
    local pairs_ = {}
    for i, k in ipairs(keys) do
      local kk = type(k) == 'number' and (math.type(k) == 'integer' and { 'int', k } or { 'float', float_value(k) })
        or type(k) == 'boolean' and { 'bool', k } or (is_text(k) and { 'str', k } or { 'bytes', to_hex(k) })
      pairs_[i] = { kk, enc(rawget(t, k), id, k) }
    end
    tables[id] = pairs_
  end
  local desc = { format = FORMAT, version = VERSION, root = root, tables = tables, tensors = tensors, storages = storages }
  return desc, files
end

-- Writes what M.encode gave (safetensors' atomic and durable write: runtime/io/replace.h).
function M.write(path, desc, files)
  local text = cio.json_encode(desc, { nonfinite = 'error' })
  core.save_safetensors(path, files, { [KEY] = text, format = FORMAT })
end

function M.save(path, value, opts)
  if type(path) ~= 'string' or path == '' then errors.fail(2, 'save: path must be a non-empty string, got %s', type(path)) end
  check_options('save', opts, {})
  M.write(path, M.encode(value, 'save', 'value'))
end

-- ---------------------------------------------------------------------------------------------
-- load

-- Whether t is a list 1..n with nothing else.
local function is_list(t)
  if type(t) ~= 'table' then return false end
  local n = 0
  for _ in next, t do n = n + 1 end
  return n == #t
end

local function from_hex(s) return (s:gsub('%x%x', function(h) return string.char(tonumber(h, 16)) end)) end

local FLOAT_WORDS = { inf = math.huge, ['-inf'] = -math.huge, nan = 0 / 0, ['-0'] = -0.0 }

-- Rebuilds the value from a description and its storage tensors ({['storage.<k>'] = tensor}).
-- file names the file in messages; op the operation ("load").
function M.decode(desc, files, file, op)
  local function bad(fmt, ...) errors.fail(0, '%s: %s: ' .. fmt, op, file, ...) end
  if type(desc) ~= 'table' then bad('metadata "%s" is not a JSON object', KEY) end
  if desc.format ~= FORMAT then bad('metadata "%s": format is %s, expected %s', KEY, tostring(desc.format), FORMAT) end
  local version = type(desc.version) == 'number' and math.tointeger(desc.version)
  if not version or version < 1 then bad('metadata "%s": version must be a whole number >= 1, got %s', KEY, tostring(desc.version)) end
  if version > VERSION then bad('format version %d is newer than this v100lua, which reads versions 1 to %d', version, VERSION) end
  for _, f in ipairs { 'tables', 'tensors', 'storages' } do
    if desc[f] == nil then desc[f] = {} end
    if not is_list(desc[f]) then bad('field "%s" must be a list', f) end
  end
  local function int_at_least(v, lo) return math.type(v) == 'integer' and v >= lo end

  -- storages: each "storage.<k>" once, 1-D, of the dtype and length described; no other tensor
  local storages = {}
  for k, s in ipairs(desc.storages) do
    if type(s) ~= 'table' then bad('storages[%d] is not an object', k) end
    local t = files['storage.' .. k]
    if t == nil then bad('storages[%d]: the file holds no tensor "storage.%d"', k, k) end
    if type(s.dtype) ~= 'string' or t.dtype ~= s.dtype then
      bad('storages[%d]: dtype %s, but tensor "storage.%d" is %s', k, tostring(s.dtype), k, t.dtype)
    end
    if not int_at_least(s.numel, 0) or t:dim() ~= 1 or t:numel() ~= s.numel then
      bad('storages[%d]: numel %s, but tensor "storage.%d" has shape %s', k, tostring(s.numel), k, table.concat(t:size(), 'x'))
    end
    storages[k] = t
  end
  for name in pairs(files) do
    local k = math.tointeger(tonumber(name:match('^storage%.([1-9]%d*)$')))
    if not k or storages[k] == nil then bad('tensor "%s" is not one of the %d storages described', name, #storages) end
  end

  -- tensors: views of their storage, checked against it
  local tensors = {}
  for j, r in ipairs(desc.tensors) do
    local function tbad(fmt, ...) bad('tensors[%d]: ' .. fmt, j, ...) end
    if type(r) ~= 'table' then tbad('is not an object') end
    if not int_at_least(r.storage, 1) or r.storage > #storages then
      tbad('storage %s is not one of the %d storages', tostring(r.storage), #storages)
    end
    local st = storages[r.storage]
    if r.dtype ~= st.dtype then tbad('dtype %s differs from its storage\'s %s', tostring(r.dtype), st.dtype) end
    if not is_list(r.size) or not is_list(r.stride) or #r.size ~= #r.stride or #r.size > 8 then
      tbad('size and stride must be lists of the same length (at most 8)')
    end
    for d = 1, #r.size do
      if not int_at_least(r.size[d], 0) then tbad('size[%d] must be an integer >= 0, got %s', d, tostring(r.size[d])) end
      if not int_at_least(r.stride[d], 0) then tbad('stride[%d] must be an integer >= 0, got %s', d, tostring(r.stride[d])) end
    end
    if not int_at_least(r.offset, 0) then tbad('offset must be an integer >= 0, got %s', tostring(r.offset)) end
    if r.requires_grad ~= nil and type(r.requires_grad) ~= 'boolean' then tbad('requires_grad must be true or false') end
    local ok, t = pcall(prim.as_strided, st, r.size, r.stride, r.offset)
    if not ok then tbad('%s', tostring(t)) end
    if r.requires_grad then
      local ok2, err = pcall(function() t.requires_grad = true end)
      if not ok2 then tbad('requires_grad: %s', tostring(err)) end
    end
    tensors[j] = t
  end

  -- tables: made first, filled after, so that references in any order (cycles) resolve
  local tables = {}
  for i = 1, #desc.tables do tables[i] = {} end
  local function value(tv, what, is_key)
    if type(tv) ~= 'table' or type(tv[1]) ~= 'string' then bad('%s is not a tagged value ["tag", payload]', what) end
    local tag, x = tv[1], tv[2]
    local n = 0
    for _ in next, tv do n = n + 1 end
    if n ~= (tag == 'nil' and 1 or 2) or #tv ~= n then bad('%s: a "%s" value has %d fields', what, tag, n) end
    if tag == 'bool' then
      if type(x) ~= 'boolean' then bad('%s: "bool" holds a %s', what, type(x)) end
      return x
    elseif tag == 'int' then
      if math.type(x) ~= 'integer' then bad('%s: "int" holds %s', what, tostring(x)) end
      return x
    elseif tag == 'float' then
      if type(x) == 'string' and FLOAT_WORDS[x] then
        if is_key and x == 'nan' then bad('%s: a NaN key', what) end
        return FLOAT_WORDS[x]
      end
      if type(x) ~= 'number' then bad('%s: "float" holds %s', what, tostring(x)) end
      return x + 0.0
    elseif tag == 'str' then
      if type(x) ~= 'string' then bad('%s: "str" holds a %s', what, type(x)) end
      return x
    elseif tag == 'bytes' then
      if type(x) ~= 'string' or #x % 2 ~= 0 or not x:match('^%x*$') then bad('%s: "bytes" must hold an even count of hex digits', what) end
      return from_hex(x)
    elseif is_key then
      bad('%s: a key must be a bool, int, float, str or bytes value, got "%s"', what, tag)
    elseif tag == 'table' then
      if not int_at_least(x, 1) or x > #tables then bad('%s: table %s is not one of the %d tables', what, tostring(x), #tables) end
      return tables[x]
    elseif tag == 'tensor' then
      if not int_at_least(x, 1) or x > #tensors then bad('%s: tensor %s is not one of the %d tensors', what, tostring(x), #tensors) end
      return tensors[x]
    elseif tag == 'nil' then
      bad('%s: nil is only the whole value', what)
    end
    bad('%s: unknown tag "%s"', what, tag)
  end
  for i, entries in ipairs(desc.tables) do
    if not is_list(entries) then bad('tables[%d] must be a list of [key, value] pairs', i) end
    local t = tables[i]
    for e, kv in ipairs(entries) do
      local where = string.format('tables[%d][%d]', i, e)
      if not is_list(kv) or #kv ~= 2 then bad('%s must be a [key, value] pair', where) end
      local k = value(kv[1], where .. ' key', true)
      if rawget(t, k) ~= nil then bad('%s: key %s appears twice', where, tostring(k)) end
      rawset(t, k, value(kv[2], where .. ' value', false))
    end
  end
  if desc.root == nil then bad('metadata "%s" has no root', KEY) end
  if type(desc.root) == 'table' and desc.root[1] == 'nil' and #desc.root == 1 then return nil end
  return value(desc.root, 'root', false)
end

function M.load(path, opts)
  if type(path) ~= 'string' then errors.fail(2, 'load: path must be a string, got %s', type(path)) end
  opts = check_options('load', opts, LOAD_OPTIONS)
  if opts.device ~= nil and type(opts.device) ~= 'string' then
    errors.fail(2, "load: device must be a string ('cpu', 'cuda', 'cuda:1'), got %s", type(opts.device))
  end
  local ok, files, meta = pcall(core.load_safetensors, path, opts.device and { device = opts.device } or nil)
  if not ok then errors.fail(0, 'load: %s', tostring(files)) end
  local text = meta[KEY]
  if text == nil then errors.fail(0, 'load: %s: not a file of v100.save (no metadata "%s")', path, KEY) end
  local ok2, desc = pcall(cio.json_decode, text, path .. ' metadata "' .. KEY .. '"')
  if not ok2 then errors.fail(0, 'load: %s', tostring(desc)) end
  return M.decode(desc, files, path, 'load')
end

return M
