-- tests/lua/testref.lua: the f64 reference helpers of testlib (T.ref_* and what they build on).
--
-- Loaded by testlib, which calls the returned function with its table T; everything here is
-- installed on T (T.ref_*, T.nd, T.nd_table, T.norm_dim, T.each_index, T.broadcast_shape,
-- T.to_f32/f16/bf16, T.round_dtype), so tests use them as T.<name> and never require this file.
-- Nested tables are row-major Lua arrays (as given by t:totable()); a plain number is a 0-dim
-- value. Dims given to the helpers are 1-based (negative from the end), index values 0-based, as
-- in docs/LUA_API.md. The value helpers this needs (T.values, T.unflatten, T.numel) come from
-- testlib and must be on T before the call.
return function(T)
  local values, unflatten, numel_of = T.values, T.unflatten, T.numel

  -- ---------------------------------------------------------------------------------------------
  -- N-d arrays in plain Lua: {shape = {...}, data = flat row-major}

  local function nd(x)
    if type(x) == 'table' and x.shape and x.data then return x end
    local flat, shape = values(x)
    return { shape = shape, data = flat }
  end
  T.nd = nd

  local function nd_table(a)
    -- empty: keep the nd array so that its shape is compared
    if numel_of(a.shape) == 0 and #a.shape > 0 then return { shape = a.shape, data = {} } end
    return unflatten(a.data, a.shape)
  end
  T.nd_table = nd_table

  local function strides_of(shape)
    local st, s = {}, 1
    for d = #shape, 1, -1 do
      st[d] = s
      s = s * shape[d]
    end
    return st
  end

  local function norm_dim(d, ndim)
    if d < 0 then d = d + ndim + 1 end
    assert(d >= 1 and d <= math.max(ndim, 1), 'dim out of range in reference')
    return d
  end
  T.norm_dim = norm_dim

  -- Calls f(idx, lin) for every multi-index (1-based entries) in row-major order.
  local function each_index(shape, f)
    local n = numel_of(shape)
    if n == 0 then return end
    local idx = {}
    for d = 1, #shape do idx[d] = 1 end
    for lin = 1, n do
      f(idx, lin)
      for d = #shape, 1, -1 do
        idx[d] = idx[d] + 1
        if idx[d] <= shape[d] then break end
        idx[d] = 1
      end
    end
  end
  T.each_index = each_index

  function T.broadcast_shape(s1, s2)
    local n = math.max(#s1, #s2)
    local r = {}
    for i = 1, n do
      local a = s1[#s1 - n + i] or 1
      local b = s2[#s2 - n + i] or 1
      if a == b or b == 1 then r[i] = a
      elseif a == 1 then r[i] = b
      else error('reference: shapes cannot be broadcast', 2) end
    end
    return r
  end

  -- Value of nd array a at multi-index idx of a (broadcast) output shape.
  local function bget(a, st, idx, outnd)
    local off = 0
    local k = outnd - #a.shape
    for d = 1, #a.shape do
      local i = idx[d + k]
      if a.shape[d] == 1 then i = 1 end
      off = off + (i - 1) * st[d]
    end
    return a.data[off + 1]
  end

  -- Broadcast elementwise op of any number of operands (tensors, tables or numbers).
  function T.ref_nary(f, ...)
    local args = table.pack(...)
    local nds, sts = {}, {}
    local shape = {}
    for i = 1, args.n do
      nds[i] = nd(args[i])
      sts[i] = strides_of(nds[i].shape)
      shape = T.broadcast_shape(shape, nds[i].shape)
    end
    local out = {}
    local vals = {}
    each_index(shape, function(idx, lin)
      for i = 1, args.n do vals[i] = bget(nds[i], sts[i], idx, #shape) end
      out[lin] = f(table.unpack(vals, 1, args.n))
    end)
    return nd_table({ shape = shape, data = out })
  end

  function T.ref_binary(a, b, f) return T.ref_nary(f, a, b) end
  function T.ref_unary(a, f) return T.ref_nary(f, a) end

  -- Reduction: dims nil (all), a number or a table of 1-based (negative ok) dims; f(list) -> value.
  function T.ref_reduce(x, dims, keepdim, f)
    local a = nd(x)
    local ndim = #a.shape
    local red = {}
    if dims == nil then
      for d = 1, ndim do red[d] = true end
    else
      if type(dims) == 'number' then dims = { dims } end
      for _, d in ipairs(dims) do red[norm_dim(d, ndim)] = true end
    end
    local oshape, kshape = {}, {}
    for d = 1, ndim do
      if red[d] then
        kshape[d] = 1
        if keepdim then oshape[#oshape + 1] = 1 end
      else
        kshape[d] = a.shape[d]
        oshape[#oshape + 1] = a.shape[d]
      end
    end
    local groups = {}
    local kst = strides_of(kshape)
    each_index(a.shape, function(idx, lin)
      local off = 0
      for d = 1, ndim do
        if not red[d] then off = off + (idx[d] - 1) * kst[d] end
      end
      local g = groups[off + 1]
      if not g then g = {}; groups[off + 1] = g end
      g[#g + 1] = a.data[lin]
    end)
    local out = {}
    for i = 1, numel_of(kshape) do out[i] = f(groups[i] or {}) end
    return nd_table({ shape = oshape, data = out })
  end

  function T.ref_sum(list) local s = 0 for i = 1, #list do s = s + list[i] end return s end
  function T.ref_prod(list) local s = 1 for i = 1, #list do s = s * list[i] end return s end
  function T.ref_mean(list) return T.ref_sum(list) / #list end
  function T.ref_var(list, correction)
    correction = correction or 1
    local m = T.ref_mean(list)
    local s = 0
    for i = 1, #list do s = s + (list[i] - m) ^ 2 end
    return s / (#list - correction)
  end
  function T.ref_norm(list, p)
    p = p or 2
    if p == math.huge then
      local m = 0
      for i = 1, #list do m = math.max(m, math.abs(list[i])) end
      return m
    end
    local s = 0
    for i = 1, #list do s = s + math.abs(list[i]) ^ p end
    return s ^ (1 / p)
  end
  -- max/min returning value and 0-based index of the first extreme (NaN propagates)
  function T.ref_argext(list, greater)
    local bi, bv = 1, list[1]
    for i = 2, #list do
      local v = list[i]
      if bv == bv then
        if v ~= v or (greater and v > bv) or (not greater and v < bv) then bi, bv = i, v end
      end
    end
    return bv, bi - 1
  end

  function T.ref_permute(x, perm)
    local a = nd(x)
    local n = #a.shape
    local p = {}
    for i = 1, n do p[i] = norm_dim(perm[i], n) end
    local oshape = {}
    for i = 1, n do oshape[i] = a.shape[p[i]] end
    local st = strides_of(a.shape)
    local out = {}
    each_index(oshape, function(idx, lin)
      local off = 0
      for i = 1, n do off = off + (idx[i] - 1) * st[p[i]] end
      out[lin] = a.data[off + 1]
    end)
    return nd_table({ shape = oshape, data = out })
  end

  function T.ref_transpose(x, d1, d2)
    local a = nd(x)
    local n = #a.shape
    local p = {}
    for i = 1, n do p[i] = i end
    d1, d2 = norm_dim(d1, n), norm_dim(d2, n)
    p[d1], p[d2] = p[d2], p[d1]
    return T.ref_permute(a, p)
  end

  -- narrow: start 1-based
  function T.ref_narrow(x, dim, start, length)
    local a = nd(x)
    local n = #a.shape
    dim = norm_dim(dim, n)
    local oshape = {}
    for i = 1, n do oshape[i] = a.shape[i] end
    oshape[dim] = length
    local st = strides_of(a.shape)
    local out = {}
    each_index(oshape, function(idx, lin)
      local off = 0
      for i = 1, n do
        local j = idx[i]
        if i == dim then j = j + start - 1 end
        off = off + (j - 1) * st[i]
      end
      out[lin] = a.data[off + 1]
    end)
    return nd_table({ shape = oshape, data = out })
  end

  function T.ref_expand(x, shape)
    return T.ref_nary(function(v) return v end, x, T.ref_full(shape, 0)) -- broadcast via a dummy
  end

  function T.ref_full(shape, v)
    local n = numel_of(shape)
    local flat = {}
    for i = 1, n do flat[i] = v end
    return nd_table({ shape = shape, data = flat })
  end

  -- torch.matmul semantics in f64.
  function T.ref_matmul(x, y)
    local a, b = nd(x), nd(y)
    local as, bs = a.shape, b.shape
    if #as == 1 and #bs == 1 then
      assert(as[1] == bs[1])
      local s = 0
      for i = 1, as[1] do s = s + a.data[i] * b.data[i] end
      return s
    end
    local squeeze_a, squeeze_b = false, false
    if #as == 1 then a = { shape = { 1, as[1] }, data = a.data }; squeeze_a = true end
    if #bs == 1 then b = { shape = { bs[1], 1 }, data = b.data }; squeeze_b = true end
    as, bs = a.shape, b.shape
    local m, k, n = as[#as - 1], as[#as], bs[#bs]
    assert(bs[#bs - 1] == k, 'reference matmul: inner sizes differ')
    local abatch, bbatch = {}, {}
    for i = 1, #as - 2 do abatch[i] = as[i] end
    for i = 1, #bs - 2 do bbatch[i] = bs[i] end
    local batch = T.broadcast_shape(abatch, bbatch)
    local oshape = {}
    for i = 1, #batch do oshape[i] = batch[i] end
    oshape[#oshape + 1] = m
    oshape[#oshape + 1] = n
    local abst, bbst = strides_of(abatch), strides_of(bbatch)
    local out = {}
    local pos = 0
    local function boff(bshape, bst, idx)
      local off = 0
      local kk = #batch - #bshape
      for d = 1, #bshape do
        local i = idx[d + kk]
        if bshape[d] == 1 then i = 1 end
        off = off + (i - 1) * bst[d]
      end
      return off
    end
    local function one(idx)
      local ao = boff(abatch, abst, idx) * m * k
      local bo = boff(bbatch, bbst, idx) * k * n
      for i = 1, m do
        for j = 1, n do
          local s = 0
          for l = 1, k do
            s = s + a.data[ao + (i - 1) * k + l] * b.data[bo + (l - 1) * n + j]
          end
          pos = pos + 1
          out[pos] = s
        end
      end
    end
    if #batch == 0 then one({}) else each_index(batch, one) end
    if squeeze_a then table.remove(oshape, #oshape - 1) end
    if squeeze_b then table.remove(oshape, #oshape) end
    return nd_table({ shape = oshape, data = out })
  end

  function T.ref_softmax(x, dim, log)
    local a = nd(x)
    local n = #a.shape
    if n == 0 then return log and 0 or 1 end
    dim = norm_dim(dim, n)
    local perm = {}
    for i = 1, n do perm[i] = i end
    perm[dim], perm[n] = perm[n], perm[dim]
    local p = nd(T.ref_permute(a, perm))
    local L = p.shape[n]
    local out = {}
    for base = 0, numel_of(p.shape) - L, L do
      local m = -math.huge
      for i = 1, L do m = math.max(m, p.data[base + i]) end
      local s = 0
      for i = 1, L do s = s + math.exp(p.data[base + i] - m) end
      for i = 1, L do
        if log then out[base + i] = p.data[base + i] - m - math.log(s)
        else out[base + i] = math.exp(p.data[base + i] - m) / s end
      end
    end
    if L == 0 then return { shape = a.shape, data = {} } end
    return T.ref_permute({ shape = p.shape, data = out }, perm)
  end

  -- gather: out[i][j][k] = src[index[i][j][k] along dim]; index values 0-based
  function T.ref_gather(src, dim, index)
    local a, ix = nd(src), nd(index)
    local n = #a.shape
    dim = norm_dim(dim, n)
    local st = strides_of(a.shape)
    local out = {}
    each_index(ix.shape, function(idx, lin)
      local off = 0
      for d = 1, n do
        local j = idx[d] - 1
        if d == dim then j = ix.data[lin] end
        off = off + j * st[d]
      end
      out[lin] = a.data[off + 1]
    end)
    return nd_table({ shape = ix.shape, data = out })
  end

  function T.ref_scatter_add(self, dim, index, src)
    local a, ix, s = nd(self), nd(index), nd(src)
    local n = #a.shape
    dim = norm_dim(dim, n)
    local st = strides_of(a.shape)
    local sst = strides_of(s.shape)
    local out = {}
    for i = 1, #a.data do out[i] = a.data[i] end
    each_index(ix.shape, function(idx, lin)
      local off, soff = 0, 0
      for d = 1, n do
        local j = idx[d] - 1
        soff = soff + j * sst[d]
        if d == dim then j = ix.data[lin] end
        off = off + j * st[d]
      end
      out[off + 1] = out[off + 1] + s.data[soff + 1]
    end)
    return nd_table({ shape = a.shape, data = out })
  end

  function T.ref_index_select(src, dim, index)
    local a, ix = nd(src), nd(index)
    local n = #a.shape
    dim = norm_dim(dim, n)
    local oshape = {}
    for d = 1, n do oshape[d] = a.shape[d] end
    oshape[dim] = #ix.data
    local st = strides_of(a.shape)
    local out = {}
    each_index(oshape, function(idx, lin)
      local off = 0
      for d = 1, n do
        local j = idx[d] - 1
        if d == dim then j = ix.data[idx[d]] end
        off = off + j * st[d]
      end
      out[lin] = a.data[off + 1]
    end)
    return nd_table({ shape = oshape, data = out })
  end

  function T.ref_cat(list, dim)
    local nds = {}
    for i, x in ipairs(list) do nds[i] = nd(x) end
    local n = #nds[1].shape
    dim = norm_dim(dim, n)
    local oshape = {}
    for d = 1, n do oshape[d] = nds[1].shape[d] end
    oshape[dim] = 0
    for _, a in ipairs(nds) do oshape[dim] = oshape[dim] + a.shape[dim] end
    local out = {}
    each_index(oshape, function(idx, lin)
      local j = idx[dim]
      for _, a in ipairs(nds) do
        if j <= a.shape[dim] then
          local st = strides_of(a.shape)
          local off = 0
          for d = 1, n do off = off + ((d == dim and j or idx[d]) - 1) * st[d] end
          out[lin] = a.data[off + 1]
          return
        end
        j = j - a.shape[dim]
      end
    end)
    return nd_table({ shape = oshape, data = out })
  end

  function T.ref_stack(list, dim)
    local n = #nd(list[1]).shape
    if dim < 0 then dim = dim + n + 2 end
    local us = {}
    for i, x in ipairs(list) do
      local a = nd(x)
      local s = {}
      for d = 1, n do s[d] = a.shape[d] end
      table.insert(s, dim, 1)
      us[i] = { shape = s, data = a.data }
    end
    return T.ref_cat(us, dim)
  end

  -- ---------------------------------------------------------------------------------------------
  -- Scalar reference functions (f64)

  -- erf to ~1e-15: Taylor series for |x| < 2.5, continued fraction for erfc beyond.
  function T.ref_erf(x)
    if x ~= x then return x end
    local ax = math.abs(x)
    if ax < 2.5 then
      local sum, term, n = x, x, 0
      local x2 = x * x
      repeat
        n = n + 1
        term = -term * x2 / n
        local add = term / (2 * n + 1)
        sum = sum + add
      until math.abs(add) <= 1e-17 * math.abs(sum)
      return 2 / math.sqrt(math.pi) * sum
    end
    if ax > 6 then return x > 0 and 1 or -1 end
    -- erfc(x) = exp(-x^2)/sqrt(pi) * 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...)))) evaluated bottom-up
    local f = ax
    for k = 60, 1, -1 do f = ax + (k / 2) / f end
    local erfc = math.exp(-ax * ax) / math.sqrt(math.pi) / f
    return x > 0 and 1 - erfc or erfc - 1
  end

  function T.ref_gelu(x) return 0.5 * x * (1 + T.ref_erf(x / math.sqrt(2))) end
  function T.ref_tanh(x)
    if x > 20 then return 1 elseif x < -20 then return -1 end
    local e = math.exp(2 * x)
    if math.abs(x) < 1e-4 then return x - x ^ 3 / 3 + 2 * x ^ 5 / 15 end
    return (e - 1) / (e + 1)
  end
  function T.ref_gelu_tanh(x)
    return 0.5 * x * (1 + T.ref_tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ^ 3)))
  end
  function T.ref_sigmoid(x) return 1 / (1 + math.exp(-x)) end
  function T.ref_sign(x)
    if x ~= x then return x end
    if x > 0 then return 1 elseif x < 0 then return -1 end
    return 0
  end
  -- round half to even (as torch.round)
  function T.ref_round(x)
    if x ~= x or x == math.huge or x == -math.huge then return x end
    local f = math.floor(x)
    local d = x - f
    if d > 0.5 then return f + 1 end
    if d < 0.5 then return f end
    if f % 2 == 0 then return f end
    return f + 1
  end
  function T.ref_relu(x) return x > 0 and x or 0 end
  function T.ref_clamp(x, lo, hi)
    if x ~= x then return x end
    if lo and x < lo then x = lo end
    if hi and x > hi then x = hi end
    return x
  end

  -- Rounding of a f64 value to f32 / f16 / bf16 (round to nearest even), for building exact
  -- references of low-precision results.
  local function round_to_bits(x, mant_bits, min_exp, max_exp)
    if x ~= x or x == 0 or x == math.huge or x == -math.huge then return x end
    -- Lua 5.4 has no math.frexp (without compat): compute the exponent by hand
    local ax = math.abs(x)
    local e = math.floor(math.log(ax, 2)) + 1
    -- correct for log rounding
    while 2.0 ^ (e - 1) > ax do e = e - 1 end
    while 2.0 ^ e <= ax do e = e + 1 end
    -- ax in [2^(e-1), 2^e)
    local exp_unbiased = e - 1
    if exp_unbiased < min_exp then exp_unbiased = min_exp end -- subnormal spacing
    local ulp = 2.0 ^ (exp_unbiased - mant_bits)
    local q = ax / ulp
    local fq = math.floor(q)
    local r = q - fq
    if r > 0.5 or (r == 0.5 and fq % 2 == 1) then fq = fq + 1 end
    local v = fq * ulp
    if v >= 2.0 ^ (max_exp + 1) then v = math.huge end
    return x < 0 and -v or v
  end
  function T.to_f32(x) return round_to_bits(x, 23, -126, 127) end
  function T.to_f16(x) return round_to_bits(x, 10, -14, 15) end
  function T.to_bf16(x) return round_to_bits(x, 7, -126, 127) end
  function T.round_dtype(x, dtype)
    if dtype == 'f32' then return T.to_f32(x)
    elseif dtype == 'f16' then return T.to_f16(x)
    elseif dtype == 'bf16' then return T.to_bf16(x) end
    return x
  end
end
