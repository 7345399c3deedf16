-- tests/lua/testlib.lua: a small test harness for the Lua tests of v100lua.
--
--   local T = require 'testlib'
--   T.test('add', function() T.allclose(a + b, T.ref_binary(ta, tb, function(x, y) return x + y end), 1e-12, 0) end)
--   T.run()   -- prints failures and "N passed, N failed", exits 0 or 1
--
-- Nested tables are row-major Lua arrays (as given by t:totable()); a plain number is a 0-dim
-- value. The T.ref_* helpers compute references in plain Lua (f64). Dims given to the helpers
-- are 1-based (negative from the end), index values 0-based, as in docs/LUA_API.md.
local T = {}

local passed, failed = 0, 0
local failures = {}
local current = nil

-- Seed: V100_TEST_SEED or the clock, printed on failure so a run can be replayed.
T.seed = tonumber(os.getenv('V100_TEST_SEED') or '') or (os.time() ~ math.floor((os.clock() * 1e6)))
math.randomseed(T.seed)

local function fmt(v)
  if type(v) == 'number' then
    if math.type(v) == 'integer' then return tostring(v) end
    if v ~= v then return 'nan' end
    return string.format('%.17g', v)
  elseif type(v) == 'table' then
    local parts = {}
    for i = 1, math.min(#v, 8) do parts[#parts + 1] = fmt(v[i]) end
    if #v > 8 then parts[#parts + 1] = '...' end
    return '{' .. table.concat(parts, ', ') .. '}'
  end
  return tostring(v)
end
T.fmt = fmt

local function shape_str(s)
  if #s == 0 then return '[] (0-dim)' end
  local p = {}
  for i = 1, #s do p[i] = tostring(s[i]) end
  return table.concat(p, 'x')
end
T.shape_str = shape_str

local function fail(msg, level)
  error(msg, (level or 1) + 1)
end

local function prefix(msg)
  if msg and msg ~= '' then return tostring(msg) .. ': ' end
  return ''
end

-- ---------------------------------------------------------------------------------------------
-- Test registration

-- V100_TEST_ONLY=<Lua pattern>: run only the tests whose name matches (the others are not counted).
local only = os.getenv('V100_TEST_ONLY')

function T.test(name, fn)
  if only and only ~= '' and not name:find(only) then return true end
  current = name
  local ok, err = xpcall(fn, debug.traceback)
  current = nil
  if ok then
    passed = passed + 1
    io.write('ok    ', name, '\n')
  else
    failed = failed + 1
    failures[#failures + 1] = { name = name, err = tostring(err) }
    io.write('FAIL  ', name, '\n')
  end
  io.flush()
  -- Let the collector release what the test dropped, so tests stay independent.
  collectgarbage()
  collectgarbage()
  return ok
end

function T.run()
  if #failures > 0 then
    io.write('\n---- failures (seed ', tostring(T.seed), ', set V100_TEST_SEED to replay) ----\n')
    for _, f in ipairs(failures) do
      io.write('[', f.name, '] ', f.err, '\n\n')
    end
  end
  io.write(string.format('%d passed, %d failed\n', passed, failed))
  io.flush()
  os.exit(failed == 0 and 0 or 1)
end

function T.counts() return passed, failed end

-- ---------------------------------------------------------------------------------------------
-- Assertions

local function deep_eq(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= 'table' then
    if type(a) == 'number' and a ~= a and b ~= b then return true end
    return a == b
  end
  if #a ~= #b then return false end
  for k, v in pairs(a) do
    if not deep_eq(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end
T.deep_eq = deep_eq

function T.eq(a, b, msg)
  if not deep_eq(a, b) then
    fail(prefix(msg) .. 'expected ' .. fmt(b) .. ', got ' .. fmt(a), 2)
  end
end

function T.ok(cond, msg)
  if not cond then fail(prefix(msg) .. 'condition is false', 2) end
end

local function close(a, b, rtol, atol)
  if a ~= a or b ~= b then return (a ~= a) and (b ~= b) end
  if a == b then return true end -- also equal infinities
  if a == math.huge or a == -math.huge or b == math.huge or b == -math.huge then return false end
  return math.abs(a - b) <= atol + rtol * math.abs(b)
end
T.close = close

-- |a - b| <= tol + tol * |b| (relative and absolute); NaN equals NaN.
function T.near(a, b, tol, msg)
  tol = tol or 1e-12
  if type(a) == 'boolean' then a = a and 1 or 0 end
  if type(b) == 'boolean' then b = b and 1 or 0 end
  if type(a) ~= 'number' or type(b) ~= 'number' then
    fail(prefix(msg) .. 'near: expected numbers, got ' .. type(a) .. ' and ' .. type(b), 2)
  end
  if not close(a, b, tol, tol) then
    fail(string.format('%sexpected %s, got %s (diff %.3g, tol %.3g)', prefix(msg), fmt(b), fmt(a),
      math.abs(a - b), tol), 2)
  end
end

local function is_tensor(x)
  local ty = type(x)
  if ty == 'userdata' then return true end
  if ty == 'table' and getmetatable(x) ~= nil and rawget(x, 1) == nil then
    local ok, f = pcall(function() return x.totable end)
    return ok and f ~= nil
  end
  return false
end
T.is_tensor = is_tensor

-- Flattens a nested table (or number/boolean) in row-major order: returns flat, shape.
local function flatten(tbl)
  if type(tbl) ~= 'table' then
    if type(tbl) == 'boolean' then return { tbl and 1 or 0 }, {} end
    return { tbl }, {}
  end
  local shape = {}
  local t = tbl
  while type(t) == 'table' do
    shape[#shape + 1] = #t
    if #t == 0 then break end
    t = t[1]
  end
  local flat = {}
  local function rec(x, d)
    if d > #shape then
      if type(x) == 'table' then error('ragged nested table (too deep)', 0) end
      if type(x) == 'boolean' then x = x and 1 or 0 end
      flat[#flat + 1] = x
      return
    end
    if type(x) ~= 'table' or #x ~= shape[d] then error('ragged nested table at depth ' .. d, 0) end
    for i = 1, #x do rec(x[i], d + 1) end
  end
  rec(tbl, 1)
  return flat, shape
end
T.flatten = flatten

function T.shape(tbl)
  local _, s = flatten(tbl)
  return s
end

local function numel_of(shape)
  local n = 1
  for i = 1, #shape do n = n * shape[i] end
  return n
end
T.numel = numel_of

-- Builds a nested table of `shape` from a flat row-major array (0-dim: the number).
local function unflatten(flat, shape)
  if #shape == 0 then return flat[1] end
  local pos = 0
  local function rec(d)
    local r = {}
    for i = 1, shape[d] do
      if d == #shape then
        pos = pos + 1
        r[i] = flat[pos]
      else
        r[i] = rec(d + 1)
      end
    end
    return r
  end
  return rec(1)
end
T.unflatten = unflatten

-- Returns flat values and shape of a tensor, a nested table or a number.
local function values(x)
  if type(x) == 'table' and getmetatable(x) == nil and x.shape and x.data then
    return x.data, x.shape, true
  end
  if is_tensor(x) then
    local shape = x.shape
    local tt = x
    if x.device ~= 'cpu' then tt = x:to('cpu') end
    local tbl = tt:totable()
    local flat = flatten(tbl)
    if numel_of(shape) == 0 then flat = {} end
    return flat, shape, true
  end
  local flat, shape = flatten(x)
  return flat, shape, false
end
T.values = values

local function multi_index(lin, shape)
  -- lin 1-based -> 0-based multi-index string
  local idx = {}
  local r = lin - 1
  for d = #shape, 1, -1 do
    idx[d] = r % shape[d]
    r = r // shape[d]
  end
  local p = {}
  for d = 1, #shape do p[d] = tostring(idx[d]) end
  return '[' .. table.concat(p, ',') .. '] (0-based)'
end

-- t, ref: tensors, nested tables or numbers. Compares shapes and every element:
-- |t - ref| <= atol + rtol * |ref|; NaN equals NaN only when both are NaN.
local FLOAT = { f64 = true, f32 = true, f16 = true, bf16 = true }

-- Large float tensors of one shape that all lie within tolerance (the usual case) are checked with
-- tensor ops instead of a Lua loop over totable() (8M elements took ~5 s that way). Any NaN, any
-- infinity or any element out of tolerance makes a comparison false or a difference non-finite, and
-- then the exact loop below runs and reports it; so the result is the same, only faster.
local function fast_allclose(t, ref, rtol, atol)
  if not (is_tensor(t) and is_tensor(ref)) or not (FLOAT[t.dtype] and FLOAT[ref.dtype]) then return nil end
  if t:numel() < 4096 or not deep_eq(t.shape, ref.shape) then return nil end
  local a = t:to('cpu'):to('f64')
  local b = ref:to('cpu'):to('f64')
  local d = (a - b):abs()
  local bound = b:abs() * rtol + atol
  if d:le(bound):logical_not():sum():item() ~= 0 then return nil end
  local max_abs = d:max():item()
  if max_abs ~= max_abs or max_abs == math.huge then return nil end
  local max_rel = (d / b:abs():clamp(1e-300, nil)):max():item()
  return max_abs, max_rel
end

function T.allclose(t, ref, rtol, atol, msg)
  rtol = rtol or 1e-5
  atol = atol or rtol
  local fa, fr = fast_allclose(t, ref, rtol, atol)
  if fa then return fa, fr end
  local a, sa, ta = values(t)
  local b, sb, tb = values(ref)
  local shapes_ok
  if ta and tb then
    shapes_ok = deep_eq(sa, sb)
  elseif numel_of(sa) == 0 or numel_of(sb) == 0 then
    -- an empty nested table does not carry the trailing sizes: compare numel only,
    -- and the leading dims that the table has
    shapes_ok = numel_of(sa) == 0 and numel_of(sb) == 0
  else
    shapes_ok = deep_eq(sa, sb)
  end
  if not shapes_ok then
    fail(prefix(msg) .. 'shape mismatch: got ' .. shape_str(sa) .. ', expected ' .. shape_str(sb), 2)
  end
  if #a ~= #b then
    fail(prefix(msg) .. string.format('element count mismatch: got %d, expected %d', #a, #b), 2)
  end
  local nbad, worst, worst_excess = 0, nil, -1
  local max_abs, max_rel = 0, 0
  for i = 1, #a do
    local x, y = a[i], b[i]
    if type(x) == 'boolean' then x = x and 1 or 0 end
    if type(y) == 'boolean' then y = y and 1 or 0 end
    if not close(x, y, rtol, atol) then
      nbad = nbad + 1
      local excess
      if x ~= x or y ~= y or math.abs(x) == math.huge or math.abs(y) == math.huge then
        excess = math.huge
      else
        excess = math.abs(x - y) / (atol + rtol * math.abs(y))
      end
      if excess > worst_excess then worst_excess, worst = excess, i end
    end
    if x == x and y == y and x ~= y then
      local d = math.abs(x - y)
      if d == d then
        if d > max_abs then max_abs = d end
        local r = d / math.max(math.abs(y), 1e-300)
        if r > max_rel then max_rel = r end
      end
    end
  end
  if nbad > 0 then
    fail(string.format('%s%d of %d elements differ (rtol %.3g, atol %.3g); worst at %s: got %s, expected %s; ' ..
      'max abs err %.3g, max rel err %.3g; shape %s', prefix(msg), nbad, #a, rtol, atol,
      multi_index(worst, sa), fmt(a[worst]), fmt(b[worst]), max_abs, max_rel, shape_str(sa)), 2)
  end
  return max_abs, max_rel
end

-- Exact equality of values and shapes (integers, bools).
function T.alleq(t, ref, msg)
  local a, sa = values(t)
  local b, sb = values(ref)
  if #a ~= #b or (numel_of(sa) > 0 and not deep_eq(sa, sb)) then
    fail(prefix(msg) .. 'shape mismatch: got ' .. shape_str(sa) .. ', expected ' .. shape_str(sb), 2)
  end
  for i = 1, #a do
    local x, y = a[i], b[i]
    if not (x == y or (x ~= x and y ~= y)) then
      fail(string.format('%selement %s differs: got %s, expected %s (shape %s)', prefix(msg),
        multi_index(i, sa), fmt(x), fmt(y), shape_str(sa)), 2)
    end
  end
end

-- fn must raise an error whose message contains `pattern` (a plain substring, or a table of
-- substrings that must all appear). Returns the message.
function T.raises(fn, pattern, msg)
  local ok, err = pcall(fn)
  if ok then
    fail(prefix(msg) .. 'expected an error' .. (pattern and (' containing ' .. fmt(pattern)) or '') ..
      ', but the call succeeded', 2)
  end
  local s = tostring(err)
  if pattern then
    local pats = type(pattern) == 'table' and pattern or { pattern }
    for _, p in ipairs(pats) do
      if not string.find(s, p, 1, true) then
        fail(prefix(msg) .. 'error message lacks ' .. string.format('%q', p) .. ': ' .. s, 2)
      end
    end
  end
  return s
end

function T.has_cuda()
  local ok, r = pcall(function() return require('v100').cuda.is_available() end)
  return ok and r == true
end

-- The start of a GPU test that compares CUDA against the CPU: without a GPU it reports the skip
-- and ends (0 passed, exit 0); otherwise TF32 off (the CPU reference is plain f32) and the RNG
-- seeded from T.seed, so a failure replays with V100_TEST_SEED.
function T.cuda_or_skip()
  if not T.has_cuda() then
    print('no CUDA device: skipped')
    T.run()
  end
  local v100 = require 'v100'
  v100.set_allow_tf32(false)
  v100.manual_seed(T.seed % 1000003)
end

-- ---------------------------------------------------------------------------------------------
-- Under mpirun (tests/mpi)

-- The start of an MPI test: dist.init() and a check that there are 2 or more ranks (the test
-- runs on; every rank still issues the same collectives). Returns this rank and the world size.
function T.mpi_start()
  local dist = require 'v100.dist'
  dist.init()
  local r, n = dist.rank(), dist.size()
  T.ok(n >= 2, 'run under mpirun with 2 or more ranks (got ' .. n .. ')')
  return r, n
end

-- ---------------------------------------------------------------------------------------------
-- Files

-- A new empty directory of its own (under $TMPDIR or /tmp), made with v100.io.makedirs; the
-- test removes it when it wants to.
function T.tmpdir()
  local dir = os.tmpname() -- a new unique name (an empty file), replaced by the directory
  os.remove(dir)
  require('v100.core').io.makedirs(dir)
  return dir
end

-- The bytes of a file (raises when it cannot be read).
function T.read_file(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('a')
  f:close()
  return s
end

-- Writes s as the whole of the file (raises when it cannot).
function T.write_file(path, s)
  local f = assert(io.open(path, 'wb'))
  assert(f:write(s))
  assert(f:close())
end

-- ---------------------------------------------------------------------------------------------
-- Running the binary (recipes as a user runs them)

-- The v100lua running this test (arg[-1]); the environment variable V100LUA overrides it.
function T.binary()
  local exe = os.getenv('V100LUA') or arg[-1]
  assert(exe, 'cannot tell which v100lua runs this test (no arg[-1]); set V100LUA')
  return exe
end

local function sh_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

-- Runs `v100lua <args>` (args: a shell-word string, e.g. 'recipes/x.lua --epochs 1') with stderr
-- folded into stdout; returns the output text and whether it exited with status 0.
function T.run_binary(args)
  local p = assert(io.popen(sh_quote(T.binary()) .. ' ' .. args .. ' 2>&1', 'r'))
  local out = p:read('a')
  local ok = p:close()
  return out, ok
end

-- Starts `v100lua <args>` (output to out_path) and SIGKILLs it as soon as the JSON-lines file
-- metrics_path holds n records of split train (a recipe's --log-dir metrics.jsonl). Returns
-- "killed at <k>", "ended by itself" or "timeout" (after about a minute without n).
function T.kill_after(args, out_path, metrics_path, n)
  local script = string.format([[
%s %s > %s 2>&1 &
pid=$!
for i in $(seq 1 1200); do
  n=$(cat %s 2>/dev/null | grep -c '"split":"train"')
  [ "$n" -ge %d ] && { kill -9 $pid; wait $pid 2>/dev/null; echo "killed at $n"; exit 0; }
  kill -0 $pid 2>/dev/null || { echo "ended by itself"; exit 1; }
  sleep 0.05
done
kill -9 $pid; echo timeout; exit 1]], sh_quote(T.binary()), args, sh_quote(out_path), sh_quote(metrics_path), n)
  local p = assert(io.popen('bash -c ' .. sh_quote(script)))
  local res = p:read('a')
  p:close()
  return res
end

-- The loss fields of a recipe's "epoch i/n  loss X ..." lines, as strings (compared exactly).
function T.epoch_losses(out)
  local losses = {}
  for l in out:gmatch('epoch %d+/%d+%s+loss (%S+)') do losses[#losses + 1] = l end
  return losses
end

-- ---------------------------------------------------------------------------------------------
-- Random inputs and nested-table helpers

-- Nested table of uniform numbers in [lo, hi) (default -1, 1), never exactly zero.
function T.rand_table(shape, lo, hi)
  lo, hi = lo or -1, hi or 1
  local n = numel_of(shape)
  local flat = {}
  for i = 1, n do
    local v
    repeat v = lo + (hi - lo) * math.random() until v ~= 0
    flat[i] = v
  end
  if #shape == 0 then return flat[1] end
  if n == 0 then return T.empty_table(shape) end
  return unflatten(flat, shape)
end

-- Uniform integers in [lo, hi] (inclusive), nonzero unless the range is {0}.
function T.rand_int_table(shape, lo, hi, allow_zero)
  local n = numel_of(shape)
  local flat = {}
  for i = 1, n do
    local v
    repeat v = math.random(lo, hi) until v ~= 0 or allow_zero or (lo == 0 and hi == 0)
    flat[i] = v
  end
  if #shape == 0 then return flat[1] end
  if n == 0 then return T.empty_table(shape) end
  return unflatten(flat, shape)
end

-- Random booleans.
function T.rand_bool_table(shape, p)
  p = p or 0.5
  local n = numel_of(shape)
  local flat = {}
  for i = 1, n do flat[i] = math.random() < p end
  if #shape == 0 then return flat[1] end
  if n == 0 then return T.empty_table(shape) end
  return unflatten(flat, shape)
end

-- Nested table for a shape with a zero size: as deep as the first zero.
function T.empty_table(shape)
  local function rec(d)
    if shape[d] == 0 then return {} end
    local r = {}
    for i = 1, shape[d] do r[i] = rec(d + 1) end
    return r
  end
  return rec(1)
end

function T.map(tbl, f)
  if type(tbl) ~= 'table' then return f(tbl) end
  local r = {}
  for i = 1, #tbl do r[i] = T.map(tbl[i], f) end
  return r
end

-- Same-shape elementwise map of two nested tables (a number on either side is broadcast).
function T.map2(a, b, f)
  if type(a) ~= 'table' and type(b) ~= 'table' then return f(a, b) end
  local r = {}
  if type(a) ~= 'table' then
    for i = 1, #b do r[i] = T.map2(a, b[i], f) end
  elseif type(b) ~= 'table' then
    for i = 1, #a do r[i] = T.map2(a[i], b, f) end
  else
    assert(#a == #b, 'map2: sizes differ')
    for i = 1, #a do r[i] = T.map2(a[i], b[i], f) end
  end
  return r
end

-- ---------------------------------------------------------------------------------------------
-- f64 references (T.ref_*, T.nd, T.broadcast_shape, T.to_f32, ...): tests/lua/testref.lua

require('testref')(T)

-- ---------------------------------------------------------------------------------------------
-- Tensors with their reference values (needs the v100 module)

-- |t - ref| <= tol * bound + tiny elementwise, where bound is an error scale (e.g. sum |a||b|
-- of a matmul, sum |x| of a reduction): for results that cancel.
function T.within(t, ref, bound, tol, msg)
  local a, sa = values(t)
  local b, sb = values(ref)
  local c = values(bound)
  if #a ~= #b or (numel_of(sa) > 0 and not deep_eq(sa, sb)) then
    fail(prefix(msg) .. 'shape mismatch: got ' .. shape_str(sa) .. ', expected ' .. shape_str(sb), 2)
  end
  for i = 1, #a do
    local lim = tol * math.abs(c[i]) + 1e-300
    if not (math.abs(a[i] - b[i]) <= lim) then
      fail(string.format('%selement %s: got %s, expected %s (|err| %.3g > %.3g = tol %.3g x bound %.3g); shape %s',
        prefix(msg), multi_index(i, sa), fmt(a[i]), fmt(b[i]), math.abs(a[i] - b[i]), lim, tol, c[i],
        shape_str(sa)), 2)
    end
  end
end

local function gen_for(dtype, lo, hi)
  if dtype == 'bool' then
    return function(shape) return T.rand_bool_table(shape) end
  elseif dtype == 'i32' or dtype == 'i64' or dtype == 'u8' then
    local l = lo or (dtype == 'u8' and 1 or -50)
    local h = hi or 50
    return function(shape) return T.rand_int_table(shape, math.floor(l), math.floor(h)) end
  end
  return function(shape) return T.rand_table(shape, lo, hi) end
end
T.gen_for = gen_for

-- A fresh random tensor of shape/dtype (values in [lo, hi), never zero) and its values as
-- stored (nested table, read back with totable so low-precision rounding is included).
function T.make(shape, dtype, lo, hi, device)
  local v100 = require 'v100'
  dtype = dtype or 'f32'
  if numel_of(shape) == 0 and #shape > 0 then
    local t = v100.zeros(shape, { dtype = dtype, device = device })
    -- an empty nested table cannot carry its shape: return an nd array {shape=, data=}
    return t, { shape = shape, data = {} }
  end
  local tbl = gen_for(dtype, lo, hi)(shape)
  local t = v100.tensor(tbl, { dtype = dtype, device = device })
  local stored = t:totable()
  return t, stored
end

-- A tensor from a nested table with its stored values.
function T.make_from(tbl, dtype, device)
  local v100 = require 'v100'
  local t = v100.tensor(tbl, { dtype = dtype or 'f32', device = device })
  return t, t:totable()
end

-- Inputs of `shape` in several layouts: a list of {name=, t=, ref=}, where t is a contiguous
-- tensor, a transposed view, a narrowed view (offset and gaps), and an expanded view.
function T.variants(shape, dtype, lo, hi)
  local out = {}
  local n = #shape
  local t, r = T.make(shape, dtype, lo, hi)
  out[#out + 1] = { name = 'contiguous', t = t, ref = r }
  if numel_of(shape) == 0 then return out end
  if n >= 2 then
    local bs = {}
    for i = 1, n do bs[i] = shape[i] end
    bs[n - 1], bs[n] = shape[n], shape[n - 1]
    local b, br = T.make(bs, dtype, lo, hi)
    out[#out + 1] = { name = 'transposed', t = b:transpose(n - 1, n), ref = T.ref_transpose(br, n - 1, n) }
  end
  if n >= 1 then
    local bs = {}
    for i = 1, n do bs[i] = shape[i] end
    bs[n] = shape[n] + 3
    local b, br = T.make(bs, dtype, lo, hi)
    out[#out + 1] = { name = 'narrowed', t = b:narrow(n, 2, shape[n]), ref = T.ref_narrow(br, n, 2, shape[n]) }
    if shape[1] > 1 or n > 1 then
      local es = {}
      for i = 1, n do es[i] = shape[i] end
      local d = 1
      for i = 1, n do if shape[i] > 1 then d = i break end end
      es[d] = 1
      local e, er = T.make(es, dtype, lo, hi)
      out[#out + 1] = { name = 'expanded', t = e:expand(shape), ref = T.ref_expand(er, shape) }
    end
  end
  return out
end

-- Large-tensor comparison with tensor ops on the CPU (no per-element Lua work): t (any device)
-- against ref (a tensor); |t - ref| <= atol + rtol * |ref|, or, when `bound` (a tensor) is
-- given, |t - ref| <= rtol * bound + atol. NaN equals NaN only if both are NaN. Shapes must match.
function T.tensor_close(t, ref, rtol, atol, msg, bound)
  local v100 = require 'v100'
  atol = atol or rtol
  if not deep_eq(t.shape, ref.shape) then
    fail(prefix(msg) .. 'shape mismatch: got ' .. shape_str(t.shape) .. ', expected ' .. shape_str(ref.shape), 2)
  end
  if t:numel() == 0 then return end
  local a = t:to({ dtype = 'f64', device = 'cpu' }):contiguous():view(-1)
  local b = ref:to({ dtype = 'f64', device = 'cpu' }):contiguous():view(-1)
  local err = (a - b):abs()
  local lim
  if bound then
    lim = bound:to({ dtype = 'f64', device = 'cpu' }):contiguous():view(-1):abs() * rtol + atol
  else
    lim = b:abs() * rtol + atol
  end
  local nan_a, nan_b = a:ne(a), b:ne(b)
  local bad = err:gt(lim):logical_or(nan_a:ne(nan_b))
  local nbad = bad:sum():item()
  if nbad > 0 then
    local excess = v100.where(bad, err / lim, 0)
    excess = v100.where(nan_a:ne(nan_b), math.huge, excess)
    local i = excess:argmax():item()
    local x = a:narrow(1, i + 1, 1):item()
    local y = b:narrow(1, i + 1, 1):item()
    local finite = v100.where(err:ne(err), 0, err)
    fail(string.format('%s%d of %d elements differ (rtol %.3g, atol %.3g); worst at %s: got %s, expected %s; ' ..
      'max abs err %.3g; shape %s', prefix(msg), nbad, a:numel(), rtol, atol, multi_index(i + 1, t.shape),
      fmt(x), fmt(y), finite:max():item(), shape_str(t.shape)), 2)
  end
end

-- Exact equality of two tensors of any devices/dtypes (compared as f64).
function T.tensor_eq(t, ref, msg)
  if not deep_eq(t.shape, ref.shape) then
    fail(prefix(msg) .. 'shape mismatch: got ' .. shape_str(t.shape) .. ', expected ' .. shape_str(ref.shape), 2)
  end
  if t:numel() == 0 then return end
  local a = t:to({ dtype = 'f64', device = 'cpu' }):contiguous():view(-1)
  local b = ref:to({ dtype = 'f64', device = 'cpu' }):contiguous():view(-1)
  local diff = a:ne(b):logical_and(a:eq(a):logical_or(b:eq(b)))
  local n = diff:sum():item()
  if n > 0 then
    local i = diff:float():argmax():item()
    fail(string.format('%s%d of %d elements differ; first at %s: got %s, expected %s; shape %s', prefix(msg), n,
      a:numel(), multi_index(i + 1, t.shape), fmt(a:narrow(1, i + 1, 1):item()), fmt(b:narrow(1, i + 1, 1):item()),
      shape_str(t.shape)), 2)
  end
end

-- Default tolerances for comparing a dtype's result with an f64 reference.
T.TOL = { f64 = 1e-12, f32 = 1e-6, f16 = 1e-3, bf16 = 1e-2 }
function T.tol(dtype) return T.TOL[dtype] or 0 end

return T
