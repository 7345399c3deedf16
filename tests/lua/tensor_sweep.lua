-- tests/lua/tensor_sweep.lua: the generated sweep of the tensor ops that are not elementwise
-- (runtime/backend/op_list.h's VL_TENSOR_OPS: reductions, scans, sorting, shape, indexing,
-- creation and random), shared by tests/lua/test_tensor_sweep.lua (the CPU against the same call
-- on f64 / i64 copies of its inputs, and gradients against finite differences) and
-- tests/lua/gpu_tensor_sweep.lua (CUDA against the CPU, values and gradients).
--
-- Each family's cases live in tests/lua/sweep/<family>.lua, which returns a list of entries:
--   { name = 'cumsum',                      -- a VL_TENSOR_OPS name
--     dtypes = { 'f32', 'f16', 'i64', ... },
--     cases = function(S, dt) return { { label, arg, ... }, ... } end,
--     call = function(arg, ...) return result, ... end,  -- tensors, lists of tensors, numbers
--     ref = false,      -- optional: no f64 reference (random ops; ops whose result is not
--                       -- the f64 result rounded); the CPU sweep then only runs the cases
--     exact = true,     -- optional: float results compared exactly too (selection, shape ops)
--     tol = 4,          -- optional: a multiple of the dtype's tolerance
--     gpu = false,      -- optional: no CUDA comparison (ops whose CUDA result is another
--                       -- draw of the same distribution: the random ops test their own)
--     grads = function(S) return { { label, fn, input, ... }, ... } end, -- optional: f64 CPU
--                       -- inputs; fn(inputs...) -> a float tensor; gradcheck on the CPU, and
--                       -- on CUDA the gradient of sum(fn(...) * w) against the CPU's. Every
--                       -- tensor fn uses (indices, masks too) must be one of its inputs: the
--                       -- CUDA run moves the inputs, not what fn captured
--   }
-- An argument is a tensor, a number, a string, a table of options, a list of tensors, or a view
-- made by S.view(base, fn) / S.layouts: the view is rebuilt from its base on every device, so
-- strided inputs stay strided on CUDA and in the reference.
local v100 = require 'v100'
local M = {}

M.FLOATS = { 'f32', 'f16', 'bf16', 'f64' }
M.INTS = { 'i32', 'i64' }
M.ALL = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64' }
M.TOL = { f32 = 1e-5, f16 = 2e-3, bf16 = 1.6e-2, f64 = 1e-12 }
M.FAMILIES = { 'reduce', 'sort', 'shape', 'index', 'create', 'linalg' }

local VIEW = {}

-- A random contiguous CPU tensor: floats uniform in [lo, hi) (default [-2, 2)), integers in
-- [lo, hi] (default [-50, 50]), bool with probability 1/2.
function M.rand(shape, dt, lo, hi)
  if dt == 'bool' then return v100.rand(shape):lt(0.5) end
  if dt:sub(1, 1) == 'i' or dt == 'u8' then
    lo, hi = lo or -50, hi or 50
    return (v100.rand(shape, { dtype = 'f64' }) * (hi - lo + 1) + lo):floor():clamp(lo, hi):to(dt)
  end
  lo, hi = lo or -2, hi or 2
  return (v100.rand(shape, { dtype = 'f64' }) * (hi - lo) + lo):to(dt)
end

-- A view of `base` (a contiguous CPU tensor) made by fn(base), rebuilt on each device.
function M.view(base, fn) return setmetatable({ base = base, fn = fn }, VIEW) end

-- {label, arg} for a tensor of `shape` in several layouts: contiguous, transposed (the last two
-- dims of a contiguous base swapped), narrowed (the last dim cut from a wider base) and, with
-- expand = true, expanded (a size-1 first dim broadcast).
function M.layouts(shape, dt, lo, hi, expand)
  local n = #shape
  local out = { { 'contiguous', M.rand(shape, dt, lo, hi) } }
  if n >= 2 then
    local s = { table.unpack(shape) }
    s[n - 1], s[n] = shape[n], shape[n - 1]
    out[#out + 1] = { 'transposed', M.view(M.rand(s, dt, lo, hi), function(b) return b:transpose(n - 1, n) end) }
  end
  if n >= 1 then
    local s = { table.unpack(shape) }
    s[n] = shape[n] + 3
    out[#out + 1] = { 'narrowed', M.view(M.rand(s, dt, lo, hi), function(b) return b:narrow(n, 2, shape[n]) end) }
  end
  if expand and n >= 2 then
    local s = { table.unpack(shape) }
    s[1] = 1
    out[#out + 1] = { 'expanded', M.view(M.rand(s, dt, lo, hi), function(b) return b:expand(shape) end) }
  end
  return out
end

-- the reference dtype of dt: floats in f64, integers in i64, bool as it is
local function wide(dt)
  if dt == 'f32' or dt == 'f16' or dt == 'bf16' or dt == 'f64' then return 'f64' end
  if dt == 'i32' or dt == 'i64' or dt == 'u8' then return 'i64' end
  return dt
end

-- arg on a device ('cpu', 'cuda') or widened ('ref'); tensors are copied, so an in-place op of a
-- case cannot change the arguments of the next run
local function place(a, where)
  local function one(t)
    if where == 'ref' then return t:to(wide(t.dtype)):clone() end
    return t:to(where):clone()
  end
  if getmetatable(a) == VIEW then return a.fn(one(a.base)) end
  if v100.is_tensor(a) then return one(a) end
  if type(a) == 'table' and #a > 0 and v100.is_tensor(a[1]) then
    local l = {}
    for i, t in ipairs(a) do l[i] = place(t, where) end
    return l
  end
  return a
end

-- the entry's call on the case's arguments placed `where`; returns the results as a packed list
function M.run(e, case, where)
  local args = {}
  for i = 2, #case do args[i - 1] = place(case[i], where) end
  return table.pack(e.call(table.unpack(args, 1, #case - 1)))
end

-- every tensor of a result list, flattened: {path, tensor} (numbers become {path, number})
function M.flatten(res)
  local out = {}
  local function walk(x, path)
    if v100.is_tensor(x) then out[#out + 1] = { path, x }
    elseif type(x) == 'table' then for i = 1, (x.n or #x) do walk(x[i], path .. '[' .. i .. ']') end
    elseif x ~= nil then out[#out + 1] = { path, x } end
  end
  walk(res, '')
  return out
end

-- Compare got (in dtype dt's run) with want: float results within tol (relative and absolute,
-- scaled by the result's magnitude), everything else exactly. Raises with a message naming msg.
function M.compare(T, got, want, dt, e, msg, against_ref)
  local g, w = M.flatten(got), M.flatten(want)
  T.eq(#g, #w, msg .. ': number of results')
  for i = 1, #g do
    local a, b = g[i][2], w[i][2]
    local m = msg .. ' result' .. g[i][1]
    if v100.is_tensor(a) then
      T.ok(v100.is_tensor(b), m .. ': a tensor against a ' .. type(b))
      T.eq(a.shape, b.shape, m .. ' shape')
      if not against_ref then T.eq(a.dtype, b.dtype, m .. ' dtype') end
      local float = v100.dtype_is_float(a.dtype)
      local tol = (M.TOL[a.dtype] or 0) * (e.tol or 1)
      if against_ref and float and dt ~= a.dtype and M.TOL[dt] then tol = M.TOL[dt] * (e.tol or 1) end
      if not float or e.exact or tol == 0 then
        T.tensor_eq(a:cpu(), against_ref and float and b:to(a.dtype):cpu() or b:cpu(), m)
      else
        -- scale: the result's largest magnitude (sums of many terms, cumulative products)
        local scale = math.max(1, b:numel() > 0 and b:to('f64'):abs():nan_to_num({ nan = 0, posinf = 0, neginf = 0 }):max():item() or 1)
        T.tensor_close(a:cpu(), b:cpu(), tol, tol * scale, m)
      end
    elseif type(a) == 'number' then
      T.near(a, b, 1e-9 + (M.TOL[dt] or 0) * math.max(1, math.abs(b)), m)
    else
      T.eq(a, b, m)
    end
  end
end

-- The entries of every family, checked against the op list: each listed op has an entry, each
-- entry names a listed op.
function M.entries(T)
  local listed, entries = {}, {}
  for _, op in ipairs(require('v100.core').ops()) do
    if op.kind == 'tensor' then listed[op.name] = op end
  end
  local seen = {}
  for _, fam in ipairs(M.FAMILIES) do
    local ok, list = pcall(require, 'sweep.' .. fam)
    if not ok and not tostring(list):find("module 'sweep." .. fam .. "' not found", 1, true) then error(list, 0) end
    for _, e in ipairs(ok and list or {}) do
      T.ok(listed[e.name], 'sweep/' .. fam .. '.lua: ' .. e.name .. ' is not in op_list.h VL_TENSOR_OPS')
      if listed[e.name] then
        e.op = listed[e.name]
        e.family = fam
      end
      entries[#entries + 1] = e
      seen[e.name] = true
    end
  end
  for name, op in pairs(listed) do
    T.ok(seen[name], 'the op ' .. name .. ' (' .. op.class .. ') has no cases in tests/lua/sweep/' .. op.class .. '.lua')
  end
  return entries, listed
end

-- The gradient of sum(fn(inputs) * w) with respect to each input, on `where` (w fixed per case).
function M.grad_of(c, where, seed)
  local ins = {}
  for i = 3, #c do
    local x = place(c[i], where)
    if v100.is_tensor(x) and v100.dtype_is_float(x.dtype) then x = x:detach():requires_grad_() end
    ins[#ins + 1] = x
  end
  local y = c[2](table.unpack(ins))
  v100.manual_seed(seed)
  local w = v100.rand(y.shape, { dtype = 'f64' }):to({ dtype = y.dtype, device = y.device })
  local l = (y * w):sum()
  l:backward()
  local gs = {}
  for i, x in ipairs(ins) do
    if v100.is_tensor(x) and x.requires_grad then gs[#gs + 1] = x.grad or v100.zeros_like(x) end
  end
  return gs
end

return M
