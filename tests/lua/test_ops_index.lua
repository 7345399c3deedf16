-- Indexing, joining, views and copies on the CPU against direct computation in Lua.
local T = require 'testlib'
local v100 = require 'v100'

local DTYPES = { 'f64', 'f32', 'f16', 'bf16', 'i32', 'i64' }

-- random 0-based index table of shape with values in [0, n)
local function rand_index(shape, n)
  return T.rand_int_table(shape, 0, n - 1, true)
end

T.test('gather with i32 and i64 indices on every dim', function()
  for _, dt in ipairs(DTYPES) do
    for _, idt in ipairs({ 'i64', 'i32' }) do
      for _, v in ipairs(T.variants({ 4, 5, 6 }, dt)) do
        for _, d in ipairs({ 1, 2, 3, -1 }) do
          local dd = T.norm_dim(d, 3)
          local ishape = { 3, 4, 5 }
          ishape[dd] = 7 -- index may be longer than the source along dim
          local ir = rand_index(ishape, v.t:size(dd))
          local idx = v100.tensor(ir, { dtype = idt })
          local r = v.t:gather(d, idx)
          T.eq(r.dtype, dt)
          T.eq(r.shape, ishape, 'gather shape')
          T.alleq(r, T.ref_gather(v.ref, d, ir), string.format('gather %s %s dim %d %s', dt, idt, d, v.name))
        end
      end
    end
  end
  -- a transposed index tensor
  local src, sr = T.make({ 5, 6 }, 'f64')
  local ir = rand_index({ 4, 5 }, 6)
  local idx = v100.tensor(ir, { dtype = 'i64' }):t()
  T.alleq(src:gather(2, idx), T.ref_gather(sr, 2, T.ref_transpose(ir, 1, 2)), 'gather with a transposed index')
end)

T.test('scatter_add and scatter_add_ (duplicates accumulate)', function()
  for _, dt in ipairs({ 'f64', 'f32', 'i32', 'i64' }) do
    for _, idt in ipairs({ 'i64', 'i32' }) do
      for _, d in ipairs({ 1, 2, -1 }) do
        local self_, selfr = T.make({ 4, 5 }, dt)
        local dd = T.norm_dim(d, 2)
        local ishape = { 3, 4 }
        ishape[dd] = 6 -- more entries than slots: duplicates
        local ir = rand_index(ishape, self_:size(dd))
        local idx = v100.tensor(ir, { dtype = idt })
        local src, srcr = T.make({ 6, 7 }, dt) -- larger than index in every dim
        local ref = T.ref_scatter_add(selfr, d, ir, srcr)
        local tol = dt == 'f32' and 1e-6 or 1e-12
        local r = self_:scatter_add(d, idx, src)
        T.eq(r.dtype, dt)
        T.allclose(r, ref, tol, tol, string.format('scatter_add %s %s dim %d', dt, idt, d))
        T.alleq(self_, selfr, 'scatter_add leaves self unchanged')
        local r2 = self_:scatter_add_(d, idx, src)
        T.ok(rawequal(r2, self_), 'scatter_add_ returns its target')
        T.allclose(self_, ref, tol, tol, string.format('scatter_add_ %s %s dim %d', dt, idt, d))
      end
    end
  end
  -- an index that names one slot repeatedly (embedding-gradient pattern)
  local acc = v100.zeros({ 3, 2 }, { dtype = 'f64' })
  local idx = v100.tensor({ { 1, 1 }, { 1, 1 }, { 1, 1 }, { 2, 0 } }, { dtype = 'i64' })
  local src = v100.tensor({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } }, { dtype = 'f64' })
  acc:scatter_add_(1, idx, src)
  T.alleq(acc, { { 0, 8 }, { 9, 12 }, { 7, 0 } })
end)

T.test('index_select with i32 and i64 indices', function()
  for _, dt in ipairs(DTYPES) do
    for _, idt in ipairs({ 'i64', 'i32' }) do
      for _, v in ipairs(T.variants({ 5, 6, 3 }, dt)) do
        for _, d in ipairs({ 1, 2, 3, -2 }) do
          local dd = T.norm_dim(d, 3)
          local ir = rand_index({ 8 }, v.t:size(dd))
          local r = v.t:index_select(d, v100.tensor(ir, { dtype = idt }))
          local es = v.t.shape
          es[dd] = 8
          T.eq(r.shape, es)
          T.alleq(r, T.ref_index_select(v.ref, d, ir), string.format('index_select %s %s dim %d %s', dt, idt, d, v.name))
        end
      end
    end
  end
  local e = v100.tensor({ { 1, 2 }, { 3, 4 } }):index_select(1, v100.zeros({ 0 }, { dtype = 'i64' }))
  T.eq(e.shape, { 0, 2 }, 'empty index')
end)

T.test('cat and stack on every dim, negative dims, mixed layouts', function()
  for _, dt in ipairs(DTYPES) do
    for _, d in ipairs({ 1, 2, 3, -1 }) do
      local dd = T.norm_dim(d, 3)
      local ts, rs = {}, {}
      for i, n in ipairs({ 2, 1, 3 }) do
        local s = { 2, 3, 4 }
        s[dd] = n
        local vs = T.variants(s, dt)
        local v = vs[(i % #vs) + 1]
        ts[i], rs[i] = v.t, v.ref
      end
      local r = v100.cat(ts, d)
      T.eq(r.dtype, dt)
      T.alleq(r, T.ref_cat(rs, d), 'cat ' .. dt .. ' dim ' .. d)
    end
    for _, d in ipairs({ 1, 2, 3, -1 }) do
      local ts, rs = {}, {}
      for i = 1, 3 do
        local vs = T.variants({ 3, 4 }, dt)
        local v = vs[(i % #vs) + 1]
        ts[i], rs[i] = v.t, v.ref
      end
      local r = v100.stack(ts, d)
      local es = { 3, 4 }
      table.insert(es, d < 0 and (d + 4) or d, 3)
      T.eq(r.shape, es, 'stack shape dim ' .. d)
      T.alleq(r, T.ref_stack(rs, d), 'stack ' .. dt .. ' dim ' .. d)
    end
  end
  -- cat with an empty piece
  local a, ar = T.make({ 2, 3 }, 'f32')
  local z = v100.zeros({ 0, 3 }, { dtype = 'f32' })
  local b, br = T.make({ 1, 3 }, 'f32')
  T.alleq(v100.cat({ a, z, b }, 1), T.ref_cat({ ar, br }, 1), 'cat with an empty tensor')
end)

T.test('split and chunk are views', function()
  local a, ar = T.make({ 7, 4 }, 'f64')
  local parts = a:split(3)
  T.eq(#parts, 3)
  T.eq(parts[1].shape, { 3, 4 })
  T.eq(parts[3].shape, { 1, 4 })
  T.alleq(parts[2], T.ref_narrow(ar, 1, 4, 3))
  T.alleq(parts[3], T.ref_narrow(ar, 1, 7, 1))
  local cols = a:split(3, 2)
  T.eq(#cols, 2)
  T.alleq(cols[2], T.ref_narrow(ar, 2, 4, 1))
  local ch = a:chunk(2, -1)
  T.eq(#ch, 2)
  T.alleq(ch[1], T.ref_narrow(ar, 2, 1, 2))
  T.alleq(ch[2], T.ref_narrow(ar, 2, 3, 2))
  local c3 = a:chunk(3)
  T.eq(#c3, 3)
  T.eq(c3[1].shape, { 3, 4 })
  T.eq(c3[3].shape, { 1, 4 })
  -- views: writing through a piece changes the base
  parts[2]:fill_(0.5)
  local ref = T.map(ar, function(x) return x end)
  for i = 4, 6 do for j = 1, 4 do ref[i][j] = 0.5 end end
  T.alleq(a, ref, 'split pieces share storage')
end)

T.test('copy_ across dtypes and from broadcast/non-contiguous sources', function()
  local src, sr = T.make({ 3, 4 }, 'f64', -50, 50)
  for _, dt in ipairs({ 'f32', 'f16', 'bf16', 'f64' }) do
    local dst = v100.empty({ 3, 4 }, { dtype = dt })
    local r = dst:copy_(src)
    T.ok(rawequal(r, dst), 'copy_ returns its target')
    T.alleq(dst, T.ref_unary(sr, function(x) return T.round_dtype(x, dt) end), 'copy_ f64 -> ' .. dt .. ' rounds to nearest')
  end
  for _, dt in ipairs({ 'i32', 'i64' }) do
    local dst = v100.empty({ 3, 4 }, { dtype = dt })
    dst:copy_(src)
    T.alleq(dst, T.ref_unary(sr, function(x) return x < 0 and math.ceil(x) or math.floor(x) end),
      'copy_ f64 -> ' .. dt .. ' truncates toward zero')
  end
  local b = v100.empty({ 3, 4 }, { dtype = 'bool' })
  b:copy_(src)
  T.alleq(b, T.ref_unary(sr, function(x) return x ~= 0 end), 'copy_ f64 -> bool')
  local i, ir = T.make({ 3, 4 }, 'i32', -1000, 1000)
  for _, dt in ipairs({ 'f32', 'f64', 'i64', 'f16' }) do
    local dst = v100.empty({ 3, 4 }, { dtype = dt })
    dst:copy_(i)
    T.alleq(dst, T.ref_unary(ir, function(x) return T.round_dtype(x, dt) end), 'copy_ i32 -> ' .. dt)
  end
  local u = v100.empty({ 3, 4 }, { dtype = 'u8' })
  local small, smr = T.make({ 3, 4 }, 'i64', 1, 200)
  u:copy_(small)
  T.alleq(u, smr, 'copy_ i64 -> u8')
  -- broadcast source
  local row, rr = T.make({ 4 }, 'f32')
  local dst = v100.zeros({ 3, 4 }, { dtype = 'f64' })
  dst:copy_(row)
  T.alleq(dst, T.ref_expand(rr, { 3, 4 }), 'copy_ broadcasts its source')
  -- transposed source into a narrowed target
  local base = v100.zeros({ 4, 6 }, { dtype = 'f32' })
  local tsrc, tsr = T.make({ 3, 4 }, 'f32')
  base:narrow(2, 2, 3):copy_(tsrc:t())
  local ref = T.ref_full({ 4, 6 }, 0)
  local tt = T.ref_transpose(tsr, 1, 2)
  for r_ = 1, 4 do for c = 1, 3 do ref[r_][c + 1] = tt[r_][c] end end
  T.alleq(base, ref, 'copy_ transposed source into a narrowed view')
end)

T.test('f64 -> f32/f16/bf16 conversion rounds once to nearest even (20000 values, wide range)', function()
  local vals = {}
  for i = 1, 20000 do
    local x
    repeat x = (math.random() - 0.5) * 2 ^ math.random(-20, 17) until x ~= 0
    vals[i] = x
  end
  -- exact ties of the target dtype are the hard cases: add some
  for i = 1, 200 do
    local m = math.random(1024, 2047)
    vals[#vals + 1] = (m + 0.5) * 2 ^ math.random(-20, -8)             -- f16 ties
    vals[#vals + 1] = (math.random(128, 255) + 0.5) * 2 ^ math.random(-9, 5) -- bf16 ties
  end
  local src = v100.tensor(vals, { dtype = 'f64' })
  T.alleq(src, vals, 'f64 tensor from a table is exact')
  for _, dt in ipairs({ 'f32', 'f16', 'bf16' }) do
    local ref = {}
    for i, x in ipairs(vals) do ref[i] = T.round_dtype(x, dt) end
    T.alleq(src:to(dt), ref, 'to ' .. dt)
    T.alleq(v100.empty({ #vals }, { dtype = dt }):copy_(src), ref, 'copy_ f64 -> ' .. dt)
  end
end)

T.test('to(), dtype shorthands, item and totable', function()
  local a, ar = T.make({ 2, 3 }, 'f64', -9, 9)
  T.eq(a:to('f32').dtype, 'f32')
  T.eq(a:to({ dtype = 'f16' }).dtype, 'f16')
  T.eq(a:to('cpu').device, 'cpu')
  for name, dt in pairs({ float = 'f32', half = 'f16', bfloat16 = 'bf16', double = 'f64', int = 'i32', long = 'i64',
    byte = 'u8', bool = 'bool' }) do
    T.eq(a[name](a).dtype, dt, name .. '()')
  end
  T.alleq(a:float(), T.ref_unary(ar, T.to_f32), 'float() rounds')
  T.alleq(a:bfloat16(), T.ref_unary(ar, T.to_bf16), 'bfloat16() rounds')
  local i = v100.tensor({ 7 }, { dtype = 'i64' })
  T.eq(math.type(i:item()), 'integer')
  T.eq(i:item(), 7)
  T.eq(v100.tensor({ true }):item(), true)
  local f = v100.tensor({ 2.5 }, { dtype = 'f32' })
  T.eq(math.type(f:item()), 'float')
  T.eq(f:item(), 2.5)
  T.eq(v100.tensor(3.25, { dtype = 'f64' }):totable(), 3.25, 'totable of 0-dim is a number')
end)

T.test('views: view, reshape, narrow, select, transpose, permute, expand, squeeze, unsqueeze', function()
  local a, ar = T.make({ 2, 3, 4 }, 'f64')
  local flat = T.flatten(ar)
  T.alleq(a:view(6, 4), T.unflatten(flat, { 6, 4 }))
  T.alleq(a:view({ -1, 8 }), T.unflatten(flat, { 3, 8 }))
  T.alleq(a:view(24), flat)
  T.eq(a:view(4, -1).shape, { 4, 6 })
  T.alleq(a:transpose(1, 3):reshape({ 4, 6 }), T.unflatten(T.flatten(T.ref_transpose(ar, 1, 3)), { 4, 6 }),
    'reshape of a non-contiguous tensor copies')
  T.alleq(a:narrow(3, 2, 2), T.ref_narrow(ar, 3, 2, 2))
  T.eq(a:narrow(3, 2, 2):storage_offset(), 1)
  T.alleq(a:select(2, 3), { ar[1][3], ar[2][3] })
  T.alleq(a:select(1, 2), ar[2])
  T.alleq(a:select(-1, 1), { { ar[1][1][1], ar[1][2][1], ar[1][3][1] }, { ar[2][1][1], ar[2][2][1], ar[2][3][1] } })
  T.alleq(a:transpose(1, 2), T.ref_transpose(ar, 1, 2))
  T.alleq(a:transpose(-1, 1), T.ref_transpose(ar, 3, 1))
  T.alleq(a:permute({ 3, 1, 2 }), T.ref_permute(ar, { 3, 1, 2 }))
  T.alleq(a:permute(2, 3, 1), T.ref_permute(ar, { 2, 3, 1 }))
  local m, mr = T.make({ 3, 5 }, 'f64')
  T.alleq(m:t(), T.ref_transpose(mr, 1, 2))
  T.eq(m:t():is_contiguous(), false)
  T.eq(m:t():contiguous():is_contiguous(), true)
  T.alleq(m:t():contiguous(), T.ref_transpose(mr, 1, 2))
  T.eq(m:stride(), { 5, 1 })
  T.eq(m:t():stride(), { 1, 5 })
  T.eq(m:stride(2), 1)
  local c, cr = T.make({ 3, 1 }, 'f32')
  T.alleq(c:expand({ 3, 4 }), T.ref_expand(cr, { 3, 4 }))
  T.alleq(c:expand({ 2, -1, 4 }), T.ref_expand(cr, { 2, 3, 4 }))
  T.eq(c:expand({ 3, 4 }):stride(2), 0)
  T.alleq(c:expand_as(v100.zeros({ 3, 7 })), T.ref_expand(cr, { 3, 7 }))
  T.eq(c:squeeze().shape, { 3 })
  T.eq(c:squeeze(2).shape, { 3 })
  T.eq(c:squeeze(1).shape, { 3, 1 }, 'squeeze of a dim that is not 1 keeps it')
  T.eq(c:unsqueeze(1).shape, { 1, 3, 1 })
  T.eq(c:unsqueeze(-1).shape, { 3, 1, 1 })
  T.eq(a:size(), { 2, 3, 4 })
  T.eq(a:size(2), 3)
  T.eq(a:size(-1), 4)
  T.eq(#a, 2)
  T.eq(a:numel(), 24)
  T.eq(a:dim(), 3)
  T.eq(a.ndim, 3)
  T.eq(a:element_size(), 8)
  T.eq(v100.zeros({ 2 }, { dtype = 'bf16' }):element_size(), 2)
  -- views share storage
  local cl = a:clone()
  a:select(1, 1):fill_(1.5)
  T.eq(a:totable()[1][2][3], 1.5, 'select writes through')
  T.alleq(cl, ar, 'clone does not share storage')
  T.eq(a:view(24):data_ptr(), a:data_ptr())
end)

T.run()
