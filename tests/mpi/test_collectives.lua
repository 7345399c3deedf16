-- tests/mpi/test_collectives.lua: every collective of v100.dist, exact on integer-valued data, for
-- every dtype, under `mpirun -np 2` and `-np 3` (label `mpi`, registered in CMakeLists.txt).
-- Every rank runs every test in the same order (a test that fails on one rank only still issues
-- the same collectives, so the job does not hang; T.run's os.exit(1) then ends it).
local T = require 'testlib'
local v100 = require 'v100'
local dist = require 'v100.dist'

local r, n = T.mpi_start()

local dtypes = {'f64', 'f32', 'f16', 'bf16', 'i64', 'i32', 'u8', 'bool'}
local floats = {f64 = true, f32 = true, f16 = true, bf16 = true}

-- A tensor of dtype dt from a flat table of numbers (bool: nonzero is true), and the reference
-- table of what reading it back gives.
local function make(vals, dt, shape)
  local ref = {}
  for i, v in ipairs(vals) do
    if dt == 'bool' then ref[i] = v ~= 0 else ref[i] = v end
  end
  local t = v100.tensor(ref, {dtype = dt})
  if shape then t = t:reshape(shape) end
  return t, ref
end
local function ref_of(vals, dt)
  local _, ref = make(vals, dt)
  return ref
end
local function flat(t) return t:reshape({-1}) end

T.test('rank, size, local rank, info', function()
  local info = dist.info()
  T.eq(info.initialized, true)
  T.eq(info.backend, 'mpi')
  T.eq(info.launcher, 'Open MPI')
  T.eq(r, tonumber(os.getenv('OMPI_COMM_WORLD_RANK')))
  T.eq(n, tonumber(os.getenv('OMPI_COMM_WORLD_SIZE')))
  T.eq(dist.local_rank(), tonumber(os.getenv('OMPI_COMM_WORLD_LOCAL_RANK')), 'one node: local rank = MPI node rank')
  T.eq(dist.is_main(), r == 0)
  T.ok(info.thread_level >= 1, 'at least MPI_THREAD_FUNNELED')
  T.ok(#info.host > 0)
end)

for _, dt in ipairs(dtypes) do
  T.test('all_reduce sum/max/min/prod, ' .. dt, function()
    -- rank k holds (k + 1) * {1, 2, 3, 4, 5, 6}: sum n(n+1)/2 * i; u8 stays below 256
    local base = {1, 2, 3, 4, 5, 6}
    local vals = {}
    for i, b in ipairs(base) do vals[i] = (r + 1) * b end
    local t = make(vals, dt, {2, 3})
    T.ok(rawequal(dist.all_reduce(t), t), 'returns its tensor')
    local want = {}
    for i, b in ipairs(base) do want[i] = b * n * (n + 1) // 2 end
    if dt == 'bool' then for i = 1, 6 do want[i] = 1 end end
    T.alleq(flat(t), ref_of(want, dt), 'sum')
    T.eq(t.shape, {2, 3})

    local mx = make({r + 1, n - r, 0}, dt)
    dist.all_reduce(mx, {op = 'max'})
    T.alleq(mx, ref_of(dt == 'bool' and {1, 1, 0} or {n, n, 0}, dt), 'max')
    local mn = make({r + 1, n - r, 1}, dt)
    dist.all_reduce(mn, {op = 'min'})
    T.alleq(mn, ref_of({1, 1, 1}, dt), 'min')
    -- bool min: all true only where every rank has true
    local any = make({r == 0 and 1 or 0, 1}, dt)
    dist.all_reduce(any, {op = 'min'})
    T.alleq(any, ref_of({dt == 'bool' and 0 or 0, 1}, dt), 'min of 0 on rank 0')
    local pr = make({r + 1, 2}, dt)
    dist.all_reduce(pr, {op = 'prod'})
    local fact = 1
    for k = 1, n do fact = fact * k end
    T.alleq(pr, ref_of(dt == 'bool' and {1, 1} or {fact, 2 ^ n}, dt), 'prod')
  end)

  T.test('broadcast and reduce, ' .. dt, function()
    local src = n - 1
    local t = make({r * 3 + 1, r * 3 + 2, r == src and 1 or 0}, dt)
    dist.broadcast(t, {src = src})
    T.alleq(t, ref_of({src * 3 + 1, src * 3 + 2, 1}, dt), 'broadcast from the last rank')
    local t0 = make({r + 1, 5}, dt)
    dist.broadcast(t0)
    T.alleq(t0, ref_of({1, 5}, dt), 'broadcast from rank 0 by default')

    local u = make({r + 1, 2 * (r + 1)}, dt)
    dist.reduce(u, {dst = 1})
    local s = n * (n + 1) // 2
    if r == 1 then
      T.alleq(u, ref_of(dt == 'bool' and {1, 1} or {s, 2 * s}, dt), 'the sum on dst')
    else
      T.alleq(u, ref_of({r + 1, 2 * (r + 1)}, dt), 'other ranks unchanged')
    end
    local m = make({r + 1}, dt)
    dist.reduce(m, {dst = 0, op = 'max'})
    if r == 0 then T.alleq(m, ref_of(dt == 'bool' and {1} or {n}, dt), 'max on rank 0') end
  end)

  T.test('all_gather and reduce_scatter, ' .. dt, function()
    local mine = make({r + 1, 2 * r + 1}, dt)
    local out = dist.all_gather(mine)
    T.eq(out.shape, {2 * n})
    local want = {}
    for k = 0, n - 1 do want[#want + 1] = k + 1; want[#want + 1] = 2 * k + 1 end
    T.alleq(out, ref_of(want, dt), 'concatenated')
    local stacked = v100.empty({n, 2}, {dtype = dt})
    T.ok(rawequal(dist.all_gather(stacked, mine), stacked), 'returns out')
    T.alleq(flat(stacked), ref_of(want, dt), 'stacked')

    -- every rank contributes (rank + 1) * {1, 2, ..., 2n}; rank k gets block k of the sum
    local vals = {}
    for i = 1, 2 * n do vals[i] = (r + 1) * i end
    local big = make(vals, dt)
    local part = dist.reduce_scatter(big)
    T.eq(part.shape, {2})
    local s = n * (n + 1) // 2
    local i0 = 2 * r
    local wantp = dt == 'bool' and {1, 1} or {s * (i0 + 1), s * (i0 + 2)}
    T.alleq(part, ref_of(wantp, dt), 'block of this rank')
    local mx = v100.empty({1, 2}, {dtype = dt})
    dist.reduce_scatter(mx, big:reshape({n, 1, 2}), {op = 'max'})
    T.alleq(flat(mx), ref_of(dt == 'bool' and {1, 1} or {n * (i0 + 1), n * (i0 + 2)}, dt), 'max, stacked input')
  end)

  if floats[dt] then
    T.test('all_reduce and reduce_scatter avg, ' .. dt, function()
      -- rank k holds 2(k+1): the average is n + 1, exactly
      local t = make({2 * (r + 1), 4 * (r + 1)}, dt)
      dist.all_reduce(t, {op = 'avg'})
      T.alleq(t, ref_of({n + 1, 2 * (n + 1)}, dt))
      local vals = {}
      for i = 1, n do vals[i] = 2 * (r + 1) * i end
      local part = dist.reduce_scatter(make(vals, dt), {op = 'avg'})
      T.alleq(part, ref_of({(n + 1) * (r + 1)}, dt))
    end)
  end
end

T.test('f16/bf16 sums are reduced in f32 (rounded once)', function()
  -- 2049 is not an f16 value: 1024 + 1024 + 1 summed in f16 pairwise would give 2048 on 3 ranks,
  -- or need a rounding at every step; in f32 the exact sum rounds once.
  local t = v100.tensor({r == 0 and 2048 or 0.5, 1000}, {dtype = 'f16'})
  dist.all_reduce(t)
  local want = v100.tensor({2048 + 0.5 * (n - 1), 1000 * n}, {dtype = 'f32'}):to('f16')
  T.alleq(t, want:totable())
end)

T.test('non-contiguous tensors and views are written in place', function()
  local rows = {}
  for i = 1, 3 do rows[i] = {(r + 1) * (10 * i + 1), (r + 1) * (10 * i + 2)} end
  local base = v100.tensor(rows)
  local view = base:t() -- 2x3, not contiguous
  T.eq(view:is_contiguous(), false)
  dist.all_reduce(view)
  local s = n * (n + 1) // 2
  T.alleq(base, {{11 * s, 12 * s}, {21 * s, 22 * s}, {31 * s, 32 * s}}, 'through the transposed view')
  local col = base:select(2, 1) -- a strided column
  dist.broadcast(col, {src = n - 1})
  T.alleq(col, {11 * s, 21 * s, 31 * s})
  local h16 = v100.tensor({{0, r + 1}, {0, 0}}, {dtype = 'bf16'})
  dist.all_reduce(h16:t(), {op = 'sum'})
  T.alleq(h16, {{0, s}, {0, 0}}, 'bf16 through a view')
  local g = v100.zeros({2, 2 * n})
  local gv = g:t() -- 2n x 2, not contiguous
  dist.all_gather(gv, v100.tensor({{r, r + 0.5}, {r, r + 0.5}}))
  for k = 0, n - 1 do T.alleq(g:narrow(2, 2 * k + 1, 2), {{k, k}, {k + 0.5, k + 0.5}}, 'gather into a view, block ' .. k) end
end)

T.test('empty tensors', function()
  local e = v100.empty({0, 3})
  dist.all_reduce(e)
  T.eq(e.shape, {0, 3})
  local out = dist.all_gather(v100.empty({0}))
  T.eq(out.shape, {0})
end)

T.test('send/recv around a ring in a group, and with async handles', function()
  local nxt, prv = (r + 1) % n, (r - 1) % n
  local got = v100.zeros({3}, {dtype = 'i64'})
  dist.group(function()
    dist.send(v100.tensor({r, r * 10, r * 100}, {dtype = 'i64'}), nxt, {tag = 5})
    dist.recv(got, prv, {tag = 5})
  end)
  T.alleq(got, {prv, prv * 10, prv * 100}, 'from the previous rank')
  local a = v100.zeros({2, 2}, {dtype = 'f16'})
  local hr = dist.irecv(a, prv, {tag = 9})
  local hs = dist.isend(v100.full({2, 2}, r + 0.5, {dtype = 'f16'}), nxt, {tag = 9})
  T.eq(tostring(hr), 'v100.dist.Work(recv)')
  hs:wait()
  hr:wait()
  hr:wait() -- a second wait is a no-op
  T.eq(hr:is_completed(), true)
  T.alleq(a, {{prv + 0.5, prv + 0.5}, {prv + 0.5, prv + 0.5}})
  -- a strided recv target
  local m = v100.zeros({2, 3})
  dist.group(function()
    dist.recv(m:t(), prv, {tag = 1})
    dist.send(v100.tensor({{1, 2}, {3, 4}, {5, 6}}, {dtype = 'f32'}) + r, nxt, {tag = 1})
  end)
  T.alleq(m, {{1 + prv, 3 + prv, 5 + prv}, {2 + prv, 4 + prv, 6 + prv}})
end)

T.test('async collectives: handles, results visible after wait', function()
  local t = v100.full({4}, r + 1)
  local h = dist.all_reduce(t, {async = true})
  T.eq(tostring(h), 'v100.dist.Work(all_reduce)')
  h:wait()
  T.alleq(t, {n * (n + 1) / 2, n * (n + 1) / 2, n * (n + 1) / 2, n * (n + 1) / 2})
  -- several in flight at once, completed in any order; a half dtype result appears at wait
  local a, b = v100.full({2}, r + 1, {dtype = 'f16'}), v100.full({3}, r, {dtype = 'i32'})
  local ha = dist.all_reduce(a, {op = 'max', async = true})
  local hb = dist.broadcast(b, {src = n - 1, async = true})
  local hg, out = dist.all_gather(v100.full({1}, r), {async = true})
  local hbar = dist.barrier({async = true})
  hb:wait(); hg:wait(); ha:wait(); hbar:wait()
  T.alleq(a, {n, n})
  T.alleq(b, {n - 1, n - 1, n - 1})
  local want = {}
  for k = 0, n - 1 do want[k + 1] = k end
  T.alleq(out, want)
  do
    local hc <close> = dist.all_reduce(v100.ones({1}), {async = true})
  end -- closed at scope end: completed, then freed
  local hx = dist.all_reduce(v100.ones({1}), {async = true})
  hx:close()
  hx:close()
  T.raises(function() hx:wait() end, 'used after close')
  dist.barrier()
end)

T.test('recv checks the message length', function()
  -- rank 0 sends 3 elements to rank 1 twice; rank 1 receives into 2 and into 4
  if r == 0 then
    dist.send(v100.ones({3}), 1, {tag = 21})
    dist.send(v100.ones({3}), 1, {tag = 22})
  elseif r == 1 then
    T.raises(function() dist.recv(v100.zeros({2}), 0, {tag = 21}) end, {'recv: the message from rank 0 is longer than the tensor', '2 f32 elements'})
    T.raises(function() dist.recv(v100.zeros({4}), 0, {tag = 22}) end, {'recv: the message from rank 0 has 3 elements but the tensor has 4'})
  end
  dist.barrier()
end)

T.test('argument errors (raised before any communication)', function()
  T.raises(function() dist.broadcast(v100.ones({2}), {src = n}) end, 'broadcast: root ' .. n .. ' is not a rank (world size ' .. n)
  T.raises(function() dist.reduce(v100.ones({2}), {dst = -1}) end, 'reduce: root -1 is not a rank')
  T.raises(function() dist.all_reduce(v100.ones({2}, {dtype = 'i32'}), {op = 'avg'}) end, "op 'avg' needs a floating dtype (got i32")
  T.raises(function() dist.all_reduce(v100.ones({2}), {op = 'median'}) end, "all_reduce: unknown op 'median'")
  T.raises(function() dist.send(v100.ones({2}), r) end, 'send: peer ' .. r .. ' is this rank')
  T.raises(function() dist.recv(v100.ones({2}), n + 1) end, 'recv: peer ' .. (n + 1) .. ' is not a rank')
  T.raises(function() dist.send(v100.ones({2}), (r + 1) % n, {tag = 40000}) end, 'tag 40000 is not in 0..32767')
  T.raises(function() dist.all_gather(v100.empty({2 * n + 1}), v100.ones({2})) end, {'all_gather: the output', 'must be ' .. n .. ' blocks'})
  T.raises(function() dist.all_gather(v100.empty({2 * n}, {dtype = 'f64'}), v100.ones({2})) end, 'of the same dtype')
  T.raises(function() dist.reduce_scatter(v100.ones({2 * n + 1})) end, 'does not split into ' .. n .. ' blocks')
  T.raises(function() dist.all_reduce(v100.ones({2}):expand({3, 2})) end, 'cannot write into an expanded tensor')
  T.raises(function() dist.all_reduce('x') end, 'must be a tensor')
end)

T.test('DistributedSampler: disjoint shards covering the data set', function()
  local seen, total = {}, 0
  local s = dist.DistributedSampler(10, {seed = 3})
  s:set_epoch(2)
  local idx = s:indices()
  T.eq(#s, math.ceil(10 / n))
  -- gather every rank's shard and check that the union covers 0..9 (padding repeats the start)
  local all = dist.all_gather(idx)
  for _, v in ipairs(all:totable()) do
    if not seen[v] then seen[v] = true; total = total + 1 end
  end
  T.eq(total, 10)
  local d = dist.DistributedSampler(10, {seed = 3, drop_last = true})
  d:set_epoch(2)
  local di = dist.all_gather(d:indices())
  local uniq = {}
  for _, v in ipairs(di:totable()) do T.ok(not uniq[v], 'no index twice with drop_last'); uniq[v] = true end
  T.eq(di.shape[1], (10 // n) * n)
end)

T.run()
