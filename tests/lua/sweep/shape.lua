-- tests/lua/sweep/shape.lua: the shape ops' cases for the tensor sweeps (tests/lua/tensor_sweep.lua
-- says what an entry is).
--
-- A shape op only moves elements, so the f64 reference run (the same op on widened inputs) cannot
-- see a wrong element order. Each call therefore also checks its result against an independent
-- reference built here in plain Lua from an index map (output coordinates -> input coordinates,
-- or nil for a fill value) over the input's values, and raises on the first difference: the
-- CPU sweep and the CUDA sweep both run that check on their device.
local v100 = require 'v100'
local R = {}
local ALL = { 'f32', 'f16', 'bf16', 'f64', 'i32', 'i64', 'bool' }

-- ---- the reference ----

-- x's values in row-major order (a Lua list) and its shape
local function values(x)
  local shape = x.shape
  return x:contiguous():reshape({ x:numel() }):totable(), shape
end

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- the row-major position (1-based) of 1-based coordinates c in shape
local function lin(c, shape)
  local p = 0
  for i = 1, #shape do p = p * shape[i] + (c[i] - 1) end
  return p + 1
end

-- A tensor of `shape` (x's dtype and device) whose element at coordinates c is x[fn(c)], or
-- `fill` where fn returns nil. fn receives a fresh 1-based coordinate list it may change.
local function mapref(x, shape, fn, fill)
  local xs, xshape = values(x)
  local out, n = {}, numel(shape)
  local c = {}
  for i = 1, #shape do c[i] = 1 end
  for k = 1, n do
    local src = fn({ table.unpack(c) })
    if src then out[k] = xs[lin(src, xshape)] else out[k] = fill end
    for i = #shape, 1, -1 do -- next coordinate, row-major
      c[i] = c[i] + 1
      if c[i] <= shape[i] then break end
      c[i] = 1
    end
  end
  local t = v100.tensor(out, { dtype = x.dtype, device = x.device })
  return t:reshape(shape)
end

local function zero_of(x) if x.dtype == 'bool' then return false end return 0 end

-- y must equal w exactly (shape, dtype and every value, NaN matching NaN)
local function same(y, w, what)
  local function fail(m) error(what .. ': ' .. m .. ' (the op against its index-map reference)', 0) end
  if not v100.is_tensor(y) then fail('not a tensor') end
  if y.dtype ~= w.dtype then fail('dtype ' .. y.dtype .. ' against ' .. w.dtype) end
  local a, b = y.shape, w.shape
  if #a ~= #b then fail(#a .. ' dims against ' .. #b) end
  for i = 1, #a do if a[i] ~= b[i] then fail('size ' .. a[i] .. ' against ' .. b[i] .. ' in dim ' .. i) end end
  local ya, wa = values(y), values(w)
  for i = 1, #wa do
    local u, v = ya[i], wa[i]
    if not (u == v or (u ~= u and v ~= v)) then fail('element ' .. i .. ' is ' .. tostring(u) .. ', want ' .. tostring(v)) end
  end
end

-- the entry's call: the op, checked against ref(...) (same arguments) before it is returned
local function checked(name, op, ref)
  return function(...)
    local y = op(...)
    local w = ref(...)
    if v100.is_tensor(y) then same(y, w, name)
    else
      if #y ~= #w then error(name .. ': ' .. #y .. ' pieces, want ' .. #w, 0) end
      for i = 1, #w do same(y[i], w[i], name .. ' piece ' .. i) end
    end
    return y
  end
end

local function wrap(d, n) if d < 0 then return d + n + 1 end return d end

-- a float tensor with NaNs for the predicates' edge case (plain copy of a random tensor)
local function with_nan(S, shape, dt)
  local x = S.rand(shape, dt)
  return x:masked_fill(S.rand(shape, 'bool'), 0 / 0)
end

local function is_float(dt) return dt == 'f32' or dt == 'f16' or dt == 'bf16' or dt == 'f64' end

local function g(S, shape) return S.rand(shape, 'f64') end

-- ---- views ----

local function flatten_ref(x, s, e)
  local shape, nd = x.shape, #x.shape
  if nd == 0 then return mapref(x, { 1 }, function() return {} end) end
  s, e = wrap(s or 1, nd), wrap(e or -1, nd)
  local out, m = {}, 1
  for i = 1, s - 1 do out[#out + 1] = shape[i] end
  for i = s, e do m = m * shape[i] end
  out[#out + 1] = m
  for i = e + 1, nd do out[#out + 1] = shape[i] end
  local xs = values(x)
  return v100.tensor(xs, { dtype = x.dtype, device = x.device }):reshape(out)
end

R[#R + 1] = {
  name = 'flatten', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 3, 4, 5 }, dt, nil, nil, true)) do
      c[#c + 1] = { l[1] .. ' all', l[2] }
      c[#c + 1] = { l[1] .. ' 2..3', l[2], 2, 3 }
      c[#c + 1] = { l[1] .. ' 1..2', l[2], 1, 2 }
      c[#c + 1] = { l[1] .. ' -2..-2', l[2], -2, -2 }
    end
    c[#c + 1] = { 'empty dim', S.rand({ 2, 0, 3 }, dt), 1, 2 }
    c[#c + 1] = { '0-d', S.rand({}, dt) }
    return c
  end,
  call = checked('flatten', function(x, s, e) return x:flatten(s, e) end, flatten_ref),
  grads = function(S)
    return { { 'transposed', function(x) return x:transpose(1, 3):flatten(2) end, g(S, { 2, 3, 4 }) } }
  end,
}

R[#R + 1] = {
  name = 'unflatten', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 6, 10 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1', l[2], 1, { 2, 3 } }
      c[#c + 1] = { l[1] .. ' dim -1 with -1', l[2], -1, { -1, 5 } }
      c[#c + 1] = { l[1] .. ' size-1 parts', l[2], 2, { 1, 10, 1 } }
    end
    c[#c + 1] = { 'empty', S.rand({ 0, 4 }, dt), 2, { 2, 2 } }
    return c
  end,
  call = checked('unflatten', function(x, d, s) return x:unflatten(d, s) end, function(x, d, s)
    local shape, out = x.shape, {}
    d = wrap(d, #shape)
    local known = 1
    for _, v in ipairs(s) do if v ~= -1 then known = known * v end end
    for i = 1, d - 1 do out[#out + 1] = shape[i] end
    for _, v in ipairs(s) do out[#out + 1] = v == -1 and shape[d] // known or v end
    for i = d + 1, #shape do out[#out + 1] = shape[i] end
    return v100.tensor(values(x), { dtype = x.dtype, device = x.device }):reshape(out)
  end),
  grads = function(S)
    return { { 'dim 2', function(x) return x:unflatten(2, { 2, -1 }) * 1 end, g(S, { 3, 6 }) } }
  end,
}

-- movedim's permutation, computed independently: out dim dst[i] is src[i], the rest in order
local function moved(nd, src, dst)
  src = type(src) == 'table' and src or { src }
  dst = type(dst) == 'table' and dst or { dst }
  local perm, used = {}, {}
  for i = 1, #src do
    perm[wrap(dst[i], nd)] = wrap(src[i], nd)
    used[wrap(src[i], nd)] = true
  end
  local rest = {}
  for i = 1, nd do if not used[i] then rest[#rest + 1] = i end end
  local k = 1
  for i = 1, nd do if not perm[i] then perm[i] = rest[k]; k = k + 1 end end
  return perm
end

R[#R + 1] = {
  name = 'movedim', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 2, 3, 4, 5 }, dt)) do
      c[#c + 1] = { l[1] .. ' 1 -> 3', l[2], 1, 3 }
      c[#c + 1] = { l[1] .. ' -1 -> 1', l[2], -1, 1 }
      c[#c + 1] = { l[1] .. ' {1, 2} -> {4, 1}', l[2], { 1, 2 }, { 4, 1 } }
    end
    return c
  end,
  call = checked('movedim', function(x, s, d) return x:movedim(s, d) end, function(x, s, d)
    local perm, shape, out = moved(#x.shape, s, d), x.shape, {}
    for i = 1, #perm do out[i] = shape[perm[i]] end
    return mapref(x, out, function(c)
      local src = {}
      for i = 1, #perm do src[perm[i]] = c[i] end
      return src
    end)
  end),
  grads = function(S)
    return { { '{1, 3} -> {3, 1}', function(x) return x:movedim({ 1, 3 }, { 3, 1 }) * 1 end, g(S, { 2, 3, 4 }) } }
  end,
}

R[#R + 1] = {
  name = 'diagonal', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 4, 6 }, dt)) do
      c[#c + 1] = { l[1] .. ' main', l[2] }
      c[#c + 1] = { l[1] .. ' offset 2', l[2], 2 }
      c[#c + 1] = { l[1] .. ' offset -3', l[2], -3 }
      c[#c + 1] = { l[1] .. ' offset 6 (empty)', l[2], 6 }
    end
    c[#c + 1] = { '3-d dims 3, 1', S.rand({ 3, 4, 5 }, dt), 1, 3, 1 }
    c[#c + 1] = { '3-d dims 2, -1', S.rand({ 3, 4, 5 }, dt), -1, 2, -1 }
    return c
  end,
  call = checked('diagonal', function(x, o, a, b) return x:diagonal(o, a, b) end, function(x, o, a, b)
    local shape, nd = x.shape, #x.shape
    o, a, b = o or 0, wrap(a or 1, nd), wrap(b or 2, nd)
    local len = math.max(0, math.min(shape[a] - math.max(0, -o), shape[b] - math.max(0, o)))
    local out, rest = {}, {}
    for i = 1, nd do if i ~= a and i ~= b then out[#out + 1] = shape[i]; rest[#rest + 1] = i end end
    out[#out + 1] = len
    return mapref(x, out, function(c)
      local src = {}
      for k, i in ipairs(rest) do src[i] = c[k] end
      src[a] = c[#c] + math.max(0, -o)
      src[b] = c[#c] + math.max(0, o)
      return src
    end)
  end),
  grads = function(S)
    return { { 'offset 1', function(x) return x:diagonal(1) * 1 end, g(S, { 3, 4 }) },
      { '3-d dims 1, 3', function(x) return x:diagonal(-1, 1, 3) * 1 end, g(S, { 3, 2, 4 }) } }
  end,
}

-- ---- copies ----

R[#R + 1] = {
  name = 'flip', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 4, 5, 6 }, dt, nil, nil, true)) do
      c[#c + 1] = { l[1] .. ' dim 1', l[2], 1 }
      c[#c + 1] = { l[1] .. ' dims {1, 3}', l[2], { 1, 3 } }
      c[#c + 1] = { l[1] .. ' dims {-1, 2, 1}', l[2], { -1, 2, 1 } }
    end
    c[#c + 1] = { 'empty', S.rand({ 0, 3 }, dt), { 1, 2 } }
    c[#c + 1] = { 'size-1 dim', S.rand({ 1, 3 }, dt), 1 }
    return c
  end,
  call = checked('flip', function(x, d) return x:flip(d) end, function(x, d)
    local dims = type(d) == 'table' and d or { d }
    local shape = x.shape
    return mapref(x, shape, function(c)
      for _, k in ipairs(dims) do k = wrap(k, #shape); c[k] = shape[k] + 1 - c[k] end
      return c
    end)
  end),
  grads = function(S)
    return { { 'dims {1, 2}', function(x) return x:flip({ 1, 2 }) end, g(S, { 3, 4 }) } }
  end,
}

R[#R + 1] = {
  name = 'roll', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 4, 7 }, dt, nil, nil, true)) do
      c[#c + 1] = { l[1] .. ' 2 dim 2', l[2], 2, 2 }
      c[#c + 1] = { l[1] .. ' {-3, 9} dims {1, 2}', l[2], { -3, 9 }, { 1, 2 } }
      c[#c + 1] = { l[1] .. ' flat 5', l[2], 5 }
      c[#c + 1] = { l[1] .. ' {1, 1} the same dim twice', l[2], { 1, 1 }, { 2, 2 } }
    end
    c[#c + 1] = { 'empty', S.rand({ 0, 3 }, dt), 1, 1 }
    c[#c + 1] = { 'whole turns', S.rand({ 3, 4 }, dt), 8, 2 }
    return c
  end,
  call = checked('roll', function(x, s, d) return x:roll(s, d) end, function(x, s, d)
    local shape = x.shape
    if d == nil then -- over the flattened order
      local n = x:numel()
      local flat = mapref(x:reshape({ n }), { n }, function(c) return { (c[1] - 1 - s) % n + 1 } end)
      return flat:reshape(shape)
    end
    local ss = type(s) == 'table' and s or { s }
    local dd = type(d) == 'table' and d or { d }
    return mapref(x, shape, function(c)
      for i = #dd, 1, -1 do local k = wrap(dd[i], #shape); c[k] = (c[k] - 1 - ss[i]) % shape[k] + 1 end
      return c
    end)
  end),
  grads = function(S)
    return { { '{1, -2} dims {1, 2}', function(x) return x:roll({ 1, -2 }, { 1, 2 }) end, g(S, { 3, 4 }) },
      { 'flat', function(x) return x:roll(3) end, g(S, { 2, 3 }) } }
  end,
}

for _, name in ipairs({ 'tril', 'triu' }) do
  R[#R + 1] = {
    name = name, dtypes = ALL, exact = true,
    cases = function(S, dt)
      local c = {}
      for _, l in ipairs(S.layouts({ 5, 7 }, dt, nil, nil, true)) do
        for _, k in ipairs({ 0, 2, -1, -9, 9 }) do c[#c + 1] = { l[1] .. ' k ' .. k, l[2], k } end
      end
      c[#c + 1] = { 'batched default', S.rand({ 2, 3, 4, 3 }, dt) }
      c[#c + 1] = { 'empty rows', S.rand({ 0, 3 }, dt), 1 }
      if is_float(dt) then c[#c + 1] = { 'NaN', with_nan(S, { 4, 4 }, dt), 0 } end
      return c
    end,
    call = checked(name, function(x, k) return x[name](x, k) end, function(x, k)
      local shape, nd = x.shape, #x.shape
      return mapref(x, shape, function(c)
        local d = c[nd] - c[nd - 1]
        local keep = name == 'tril' and d <= (k or 0) or name == 'triu' and d >= (k or 0)
        return keep and c or nil
      end, zero_of(x))
    end),
    grads = function(S)
      return { { 'k 1', function(x) return x[name](x, 1) end, g(S, { 2, 3, 4 }) } }
    end,
  }
end

-- repeat / tile's reference: coordinate i of a dim of size s repeated reads (i - 1) % s + 1
local function repeat_ref(x, reps)
  local shape, out = x.shape, {}
  local lead = #reps - #shape
  for i = 1, #reps do out[i] = (i <= lead and 1 or shape[i - lead]) * reps[i] end
  return mapref(x, out, function(c)
    local src = {}
    for i = 1, #shape do src[i] = (c[i + lead] - 1) % shape[i] + 1 end
    return src
  end)
end

R[#R + 1] = {
  name = 'repeat', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 2, 3 }, dt, nil, nil, true)) do
      c[#c + 1] = { l[1] .. ' {2, 1}', l[2], { 2, 1 } }
      c[#c + 1] = { l[1] .. ' {3, 2, 2} (a leading dim)', l[2], { 3, 2, 2 } }
      c[#c + 1] = { l[1] .. ' {1, 1} (a copy)', l[2], { 1, 1 } }
    end
    c[#c + 1] = { 'zero repeats', S.rand({ 2, 3 }, dt), { 0, 2 } }
    -- 3 split dims and 6 repeats need 9 dims: the last split dim is gathered instead
    c[#c + 1] = { 'past 8 dims', S.rand({ 2, 1, 3, 2 }, dt), { 2, 2, 2, 2, 2, 2 } }
    return c
  end,
  call = checked('repeat', function(x, r) return x['repeat'](x, r) end, repeat_ref),
  grads = function(S)
    return { { '{2, 1, 3}', function(x) return x['repeat'](x, { 2, 1, 3 }) end, g(S, { 2, 3 }) },
      { 'past 8 dims', function(x) return x['repeat'](x, { 2, 1, 2, 1, 3, 2 }) end, g(S, { 2, 1, 2, 2 }) } }
  end,
}

R[#R + 1] = {
  name = 'tile', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 2, 3 }, dt)) do
      c[#c + 1] = { l[1] .. ' {2} (padded with ones)', l[2], { 2 } }
      c[#c + 1] = { l[1] .. ' {2, 1, 2}', l[2], { 2, 1, 2 } }
    end
    return c
  end,
  call = checked('tile', function(x, r) return x:tile(r) end, function(x, r)
    local reps = {}
    for i = 1, #x.shape - #r do reps[#reps + 1] = 1 end
    for _, v in ipairs(r) do reps[#reps + 1] = v end
    return repeat_ref(x, reps)
  end),
  grads = function(S)
    return { { '{3}', function(x) return x:tile({ 3 }) end, g(S, { 2, 2 }) } }
  end,
}

R[#R + 1] = {
  name = 'repeat_interleave', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 3, 4 }, dt)) do
      c[#c + 1] = { l[1] .. ' 2 flat', l[2], 2 }
      c[#c + 1] = { l[1] .. ' 3 dim 1', l[2], 3, 1 }
      c[#c + 1] = { l[1] .. ' counts dim 2', l[2], v100.tensor({ 1, 0, 3, 2 }, { dtype = 'i64' }), 2 }
      c[#c + 1] = { l[1] .. ' one count dim -2', l[2], v100.tensor({ 2 }, { dtype = 'i32' }), -2 }
    end
    c[#c + 1] = { 'zero', S.rand({ 3, 4 }, dt), 0, 2 }
    return c
  end,
  call = checked('repeat_interleave', function(x, r, d) return x:repeat_interleave(r, d) end, function(x, r, d)
    if d == nil then x, d = x:reshape({ x:numel() }), 1 end
    local shape = x.shape
    d = wrap(d, #shape)
    local counts = v100.is_tensor(r) and r:totable() or {}
    local from = {} -- output position along d -> input position
    for i = 1, shape[d] do
      local k = v100.is_tensor(r) and (#counts == 1 and counts[1] or counts[i]) or r
      for _ = 1, k do from[#from + 1] = i end
    end
    local out = { table.unpack(shape) }
    out[d] = #from
    return mapref(x, out, function(c) c[d] = from[c[d]]; return c end)
  end),
  grads = function(S)
    return { { '2 dim 2', function(x) return x:repeat_interleave(2, 2) end, g(S, { 2, 3 }) },
      { 'counts flat', function(x) return x:repeat_interleave(v100.tensor({ 2, 0, 1, 3 }, { dtype = 'i64' })) end, g(S, { 2, 2 }) } }
  end,
}

-- pieces of sizes along d, by the reference's own narrowing (an index map per piece)
local function pieces_ref(x, sizes, d)
  local shape = x.shape
  d = wrap(d or 1, #shape)
  local out, at = {}, 0
  for i, s in ipairs(sizes) do
    local ps = { table.unpack(shape) }
    ps[d] = s
    local off = at
    out[i] = mapref(x, ps, function(c) c[d] = c[d] + off; return c end)
    at = at + s
  end
  return out
end

R[#R + 1] = {
  name = 'split', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 4, 6 }, dt)) do
      c[#c + 1] = { l[1] .. ' sizes {1, 2, 3} dim 2', l[2], { 1, 2, 3 }, 2 }
      c[#c + 1] = { l[1] .. ' sizes {0, 4} dim 1', l[2], { 0, 4 }, 1 }
      c[#c + 1] = { l[1] .. ' size 4 dim 2 (uneven)', l[2], 4, 2 }
      c[#c + 1] = { l[1] .. ' size 2 dim 1', l[2], 2, 1 }
    end
    c[#c + 1] = { 'empty dim', S.rand({ 0, 3 }, dt), 2, 1 }
    return c
  end,
  call = checked('split', function(x, s, d) return x:split(s, d) end, function(x, s, d)
    if type(s) == 'table' then return pieces_ref(x, s, d) end
    local n, sizes = x.shape[wrap(d or 1, #x.shape)], {}
    if n == 0 then sizes = { 0 } end
    for at = 0, n - 1, s do sizes[#sizes + 1] = math.min(s, n - at) end
    return pieces_ref(x, sizes, d)
  end),
  grads = function(S)
    return { { 'sizes {2, 1, 2}', function(x) local p = x:split({ 2, 1, 2 }, 2); return v100.cat({ p[3], p[1] * 2 }, 2) end, g(S, { 2, 5 }) } }
  end,
}

R[#R + 1] = {
  name = 'chunk', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 5, 7 }, dt)) do
      c[#c + 1] = { l[1] .. ' 3 dim 2 (3, 3, 1)', l[2], 3, 2 }
      c[#c + 1] = { l[1] .. ' 4 dim 2 (2, 2, 2, 1)', l[2], 4, 2 }
      c[#c + 1] = { l[1] .. ' 2 dim 1', l[2], 2, 1 }
    end
    c[#c + 1] = { '4 of 6: 3 chunks of 2', S.rand({ 6, 2 }, dt), 4, 1 }
    c[#c + 1] = { 'more chunks than elements', S.rand({ 2, 3 }, dt), 5, 1 }
    c[#c + 1] = { 'empty dim: 3 empty chunks', S.rand({ 0, 3 }, dt), 3, 1 }
    return c
  end,
  -- PyTorch: pieces of ceil(n / chunks), as many as that takes (maybe fewer than chunks); an
  -- empty dim gives `chunks` empty pieces
  call = checked('chunk', function(x, k, d) return x:chunk(k, d) end, function(x, k, d)
    local n, sizes = x.shape[wrap(d, #x.shape)], {}
    if n == 0 then for i = 1, k do sizes[i] = 0 end end
    local piece = (n + k - 1) // k
    for at = 0, n - 1, math.max(piece, 1) do sizes[#sizes + 1] = math.min(piece, n - at) end
    return pieces_ref(x, sizes, d)
  end),
  grads = function(S)
    return { { '3 dim 1', function(x) local p = x:chunk(3, 1); return v100.cat({ p[2] * 3, p[3], p[1] }, 1) end, g(S, { 5, 2 }) } }
  end,
}

-- cat's reference: along d, output position i reads piece k at i - offset(k)
local function cat_ref(list, d)
  local base
  for _, t in ipairs(list) do if not (#t.shape == 1 and t.shape[1] == 0) then base = t; break end end
  base = base or list[1]
  local shape = { table.unpack(base.shape) }
  d = wrap(d or 1, #shape)
  local total, parts = 0, {}
  for _, t in ipairs(list) do
    if not (#t.shape == 1 and t.shape[1] == 0 and #shape > 1) then
      parts[#parts + 1] = { t, total }
      total = total + t.shape[d]
    end
  end
  shape[d] = total
  -- one map per piece, then summed into place: pieces occupy disjoint slices, so each output
  -- element is the one piece's value (the others contribute the fill, never read)
  local vals, n = {}, numel(shape)
  for k = 1, n do vals[k] = false end
  local out = nil
  for _, pt in ipairs(parts) do
    local t, off = pt[1], pt[2]
    local xs = values(t)
    local c = {}
    for i = 1, #shape do c[i] = 1 end
    for k = 1, n do
      if c[d] > off and c[d] <= off + t.shape[d] then
        local src = { table.unpack(c) }
        src[d] = c[d] - off
        vals[k] = xs[lin(src, t.shape)]
      end
      for i = #shape, 1, -1 do c[i] = c[i] + 1; if c[i] <= shape[i] then break end; c[i] = 1 end
    end
  end
  out = v100.tensor(vals, { dtype = base.dtype, device = base.device })
  return out:reshape(shape)
end

R[#R + 1] = {
  name = 'cat', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 3, 4 }, dt)) do
      c[#c + 1] = { l[1] .. ' dim 1', l[2], S.rand({ 2, 4 }, dt), S.rand({ 1, 4 }, dt), 1 }
      c[#c + 1] = { l[1] .. ' dim 2', S.rand({ 3, 2 }, dt), l[2], 2 }
    end
    c[#c + 1] = { 'an empty piece', S.rand({ 2, 3 }, dt), S.rand({ 2, 0 }, dt), S.rand({ 2, 1 }, dt), -1 }
    c[#c + 1] = { 'legacy 1-d empty', S.rand({ 2, 3 }, dt), S.rand({ 0 }, dt), 1 }
    c[#c + 1] = { 'one tensor', S.rand({ 2, 3 }, dt), 2 }
    return c
  end,
  -- the tensors as separate arguments (the sweep places views only as arguments), the dim last
  call = checked('cat', function(...) local l = { ... }; local d = table.remove(l); return v100.cat(l, d) end,
    function(...) local l = { ... }; local d = table.remove(l); return cat_ref(l, d) end),
  grads = function(S)
    return { { 'dim 2', function(a, b) return v100.cat({ a, b, a }, 2) end, g(S, { 2, 3 }), g(S, { 2, 1 }) } }
  end,
}

R[#R + 1] = {
  name = 'stack', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 3, 4 }, dt)) do
      for _, d in ipairs({ 1, 2, 3, -1 }) do c[#c + 1] = { l[1] .. ' dim ' .. d, l[2], S.rand({ 3, 4 }, dt), d } end
    end
    c[#c + 1] = { 'empty', S.rand({ 0, 2 }, dt), S.rand({ 0, 2 }, dt), 2 }
    return c
  end,
  call = checked('stack', function(a, b, d) return v100.stack({ a, b }, d) end, function(a, b, d)
    local l = { a, b }
    local nd = #l[1].shape
    d = d < 0 and d + nd + 2 or d
    local us = {}
    for i, t in ipairs(l) do
      local s = { table.unpack(t.shape) }
      table.insert(s, d, 1)
      us[i] = v100.tensor(values(t), { dtype = t.dtype, device = t.device }):reshape(s)
    end
    return cat_ref(us, d)
  end),
  grads = function(S)
    return { { 'dim 2', function(a, b) return v100.stack({ a, b }, 2) end, g(S, { 2, 3 }), g(S, { 2, 3 }) } }
  end,
}

-- pad's reference: per padded dim, output coordinate i reads input i - left, reflected, clamped
-- or wrapped by the mode, or (constant) the value outside the input
local function pad_ref(x, pads, opts)
  local mode, value = opts and opts.mode or 'constant', opts and opts.value or 0
  local shape, nd = x.shape, #x.shape
  local out, lefts = { table.unpack(shape) }, {}
  for j = 1, #pads // 2 do
    local d = nd + 1 - j
    lefts[d] = pads[2 * j - 1]
    out[d] = shape[d] + pads[2 * j - 1] + pads[2 * j]
  end
  if x.dtype == 'bool' then value = value ~= 0 end
  return mapref(x, out, function(c)
    for d, l in pairs(lefts) do
      local n, i = shape[d], c[d] - 1 - l -- 0-based input position
      if mode == 'constant' then
        if i < 0 or i >= n then return nil end
      elseif mode == 'reflect' then
        if i < 0 then i = -i end
        if i >= n then i = 2 * (n - 1) - i end
      elseif mode == 'replicate' then
        i = math.max(0, math.min(n - 1, i))
      else
        i = i % n
      end
      c[d] = i + 1
    end
    return c
  end, value)
end

R[#R + 1] = {
  name = 'pad', dtypes = ALL, exact = true,
  cases = function(S, dt)
    local c = {}
    for _, l in ipairs(S.layouts({ 3, 4, 5 }, dt, nil, nil, true)) do
      c[#c + 1] = { l[1] .. ' constant {1, 2}', l[2], { 1, 2 } }
      c[#c + 1] = { l[1] .. ' constant {2, 0, 1, 3} value 1', l[2], { 2, 0, 1, 3 }, { value = 1 } }
      c[#c + 1] = { l[1] .. ' constant crop {-1, 2, 0, -2}', l[2], { -1, 2, 0, -2 } }
      c[#c + 1] = { l[1] .. ' reflect {2, 4, 1, 3}', l[2], { 2, 4, 1, 3 }, { mode = 'reflect' } }
      c[#c + 1] = { l[1] .. ' replicate {3, 1, 0, 2, 1, 1}', l[2], { 3, 1, 0, 2, 1, 1 }, { mode = 'replicate' } }
      c[#c + 1] = { l[1] .. ' circular {5, 2, 3, 1}', l[2], { 5, 2, 3, 1 }, { mode = 'circular' } }
    end
    c[#c + 1] = { 'empty dim, constant', S.rand({ 0, 3 }, dt), { 1, 1, 2, 0 } }
    c[#c + 1] = { 'zero pads (a copy)', S.rand({ 2, 3 }, dt), { 0, 0 } }
    if is_float(dt) then c[#c + 1] = { 'NaN reflect', with_nan(S, { 3, 4 }, dt), { 3, 3 }, { mode = 'reflect' } } end
    return c
  end,
  call = checked('pad', function(x, p, o) return v100.pad(x, p, o) end, pad_ref),
  grads = function(S)
    local out = {}
    for _, m in ipairs({ 'constant', 'reflect', 'replicate', 'circular' }) do
      out[#out + 1] = { m, function(x) return v100.pad(x, { 2, 1, 1, 2 }, { mode = m }) end, g(S, { 2, 3, 4 }) }
    end
    out[#out + 1] = { 'constant crop', function(x) return v100.pad(x, { -1, 2 }, { value = 2 }) end, g(S, { 2, 4 }) }
    return out
  end,
}

return R
