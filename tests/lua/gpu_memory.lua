-- The caching allocator, memory statistics, limits, snapshots, streams and events on cuda.
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'

local MiB = 1024 * 1024
local GiB = 1024 * MiB

local function stats()
  collectgarbage()
  collectgarbage()
  return v100.memory.stats()
end

T.test('stats change as tensors are created and freed', function()
  local s0 = stats()
  for _, k in ipairs({ 'allocated', 'reserved', 'peak_allocated', 'peak_reserved', 'requested', 'alloc_count',
    'free_count', 'cache_hits', 'segments', 'oom_count', 'limit' }) do
    T.ok(type(s0[k]) == 'number', 'stats().' .. k .. ' is a number')
  end
  T.ok(s0.reserved >= s0.allocated, 'reserved >= allocated')
  local t = v100.empty({ 1024, 1024 }, { device = 'cuda' }) -- 4 MiB
  local s1 = v100.memory.stats()
  T.ok(s1.allocated >= s0.allocated + 4 * MiB, string.format('allocated grows by 4 MiB: %d -> %d', s0.allocated, s1.allocated))
  T.ok(s1.allocated <= s0.allocated + 4 * MiB + 2 * MiB, 'allocated grows by about 4 MiB')
  T.ok(s1.requested >= s0.requested + 4 * MiB, 'requested grows')
  T.ok(s1.alloc_count >= s0.alloc_count + 1, 'alloc_count grows')
  T.ok(s1.reserved >= s1.allocated, 'reserved >= allocated')
  T.ok(s1.peak_allocated >= s1.allocated, 'peak_allocated >= allocated')
  T.ok(s1.peak_reserved >= s1.reserved, 'peak_reserved >= reserved')
  T.ok(s1.segments >= 1, 'at least one segment')
  t:free()
  local s2 = v100.memory.stats()
  T.eq(s2.allocated, s0.allocated, 'free returns the bytes')
  T.ok(s2.free_count >= s0.free_count + 1, 'free_count grows')
  T.eq(s2.reserved, s1.reserved, 'freed blocks stay cached (reserved unchanged)')
  -- dropping a tensor (collector) also returns it
  do
    local u = v100.empty({ 3 * 1024 * 1024 }, { device = 'cuda' })
    u:fill_(1)
  end
  local s3 = stats()
  T.eq(s3.allocated, s0.allocated, 'a dropped tensor is returned by the collector')
  -- <close>
  do
    local w <close> = v100.empty({ 1024, 1024 }, { device = 'cuda' })
    T.ok(v100.memory.stats().allocated >= s0.allocated + 4 * MiB)
  end
  T.eq(v100.memory.stats().allocated, s0.allocated, '<close> frees at scope end')
end)

T.test('cache hits grow on reuse; reset_peak', function()
  local h0 = stats().cache_hits
  for _ = 1, 10 do
    local t = v100.empty({ 2 * 1024 * 1024 }, { device = 'cuda' }) -- 8 MiB
    t:free()
  end
  local h1 = v100.memory.stats().cache_hits
  T.ok(h1 >= h0 + 9, string.format('cache hits %d -> %d after 10 same-size allocations', h0, h1))
  -- small blocks too
  for _ = 1, 10 do
    local t = v100.empty({ 100 }, { device = 'cuda' })
    t:free()
  end
  T.ok(v100.memory.stats().cache_hits >= h1 + 9, 'small-block cache hits')
  local big = v100.empty({ 64 * MiB }, { device = 'cuda' }) -- 256 MiB
  big:free()
  local sp = v100.memory.stats()
  T.ok(sp.peak_allocated >= sp.allocated + 256 * MiB, 'peak remembers the freed 256 MiB')
  v100.memory.reset_peak()
  local sr = v100.memory.stats()
  T.ok(sr.peak_allocated < sp.peak_allocated, 'reset_peak lowers the peak')
  T.ok(sr.peak_allocated >= sr.allocated, 'peak >= allocated after reset')
end)

T.test('empty_cache lowers reserved', function()
  local t = v100.empty({ 64 * MiB }, { device = 'cuda' }) -- 256 MiB
  t:fill_(3)
  t:free()
  local r1 = stats().reserved
  v100.memory.empty_cache()
  local s = v100.memory.stats()
  T.ok(s.reserved <= r1 - 256 * MiB, string.format('reserved %d -> %d', r1, s.reserved))
  T.ok(s.reserved >= s.allocated, 'reserved >= allocated')
  -- the allocator still works afterwards
  local u = v100.ones({ 1000 }, { device = 'cuda' })
  T.eq(u:sum():item(), 1000)
end)

T.test('set_limit: an allocation beyond it raises an error naming the sizes; set_limit(0) removes it', function()
  v100.memory.empty_cache()
  local s0 = stats()
  local limit = s0.reserved + 512 * MiB
  v100.memory.set_limit(limit)
  T.ok(v100.memory.stats().limit > 0, 'stats().limit reports the limit')
  local n = 402653184 -- f32 elements: 1.5 GiB = 1610612736 bytes
  local err = T.raises(function() return v100.empty({ n }, { device = 'cuda' }) end, nil)
  T.ok(err:find('allocated', 1, true) and err:find('reserved', 1, true), 'the error names reserved and allocated bytes: ' .. err)
  T.ok(err:find('1610612736', 1, true) or err:find('1.50 GiB', 1, true) or err:find('1536', 1, true)
    or err:find('1.5 GiB', 1, true) or err:find('1.61 GB', 1, true), 'the error names the requested size: ' .. err)
  T.ok(v100.memory.stats().oom_count >= s0.oom_count + 1, 'oom_count grows')
  -- the process continues to work under the limit
  local a = v100.rand({ 1000, 1000 }, { device = 'cuda' })
  local b = a:cpu()
  T.tensor_close((a * 2):sum(), (b * 2):sum(), 1e-5, 0, 'work after an allocation failure')
  local ok_mid = v100.empty({ 32 * MiB }, { device = 'cuda' }) -- 128 MiB fits
  ok_mid:free()
  v100.memory.set_limit(0)
  local big = v100.empty({ n }, { device = 'cuda' })
  big:fill_(1)
  T.eq(big:numel(), n, 'allocation succeeds after set_limit(0)')
  big:free()
  -- a fraction of the device memory
  local props = v100.cuda.get_device_properties(0)
  T.ok(props.total_memory > 0 and type(props.name) == 'string', 'device properties')
  v100.memory.set_limit(0.5)
  T.raises(function() return v100.empty({ math.floor(props.total_memory * 0.6 / 4) }, { device = 'cuda' }) end, 'reserved')
  v100.memory.set_limit(0)
  v100.memory.empty_cache()
end)

-- Issue 13's fault: a request larger than the whole card, with no limit set, in the middle of
-- training. cudaMalloc fails; the pool frees its cache and retries once, then raises an error
-- naming the requested, free and reserved bytes; the model's next step runs as before.
T.test('an allocation larger than the card: a Lua error naming requested, free and reserved; the next step runs', function()
  local nn, optim = require 'v100.nn', require 'v100.optim'
  v100.manual_seed(3)
  local model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
  model:to('cuda')
  local opt = optim.SGD(model:parameters(), { lr = 0.1, momentum = 0.9 })
  local x = v100.randn({ 32, 64 }, { device = 'cuda' })
  local ids = {}
  for i = 1, 32 do ids[i] = (i * 7) % 10 end
  local y = v100.tensor(ids, { dtype = 'i64', device = 'cuda' })
  local function step()
    local loss = nn.F.cross_entropy(model(x), y)
    loss:backward()
    opt:step()
    opt:zero_grad()
    return loss:item()
  end
  local l1 = step()
  local total = v100.cuda.get_device_properties(0).total_memory
  local s0 = stats()
  local n = math.floor(2 * total / 4) -- f32 elements: twice the card
  local err = T.raises(function() return v100.empty({ n }, { device = 'cuda' }) end, 'out of memory')
  T.ok(err:find('tried to allocate', 1, true), 'names the request: ' .. err)
  T.ok(err:find(' free of ', 1, true), 'names the device\'s free and total bytes: ' .. err)
  T.ok(err:find('reserved', 1, true) and err:find('allocated', 1, true), 'names reserved and allocated: ' .. err)
  T.ok(err:find('GiB', 1, true), 'sizes in readable units: ' .. err)
  local s1 = v100.memory.stats()
  T.eq(s1.oom_count, s0.oom_count + 1, 'oom_count counts it once')
  T.ok(s1.allocated <= s0.allocated, 'nothing half-allocated is left behind')
  -- and inside a step: the failed op leaves the model and optimizer as they were
  local ok = pcall(function()
    local h = model(x)
    local _ = v100.empty({ n }, { device = 'cuda' })
    return h
  end)
  T.ok(not ok, 'the request fails inside a forward too')
  local l2 = step()
  local l3 = step()
  T.ok(l2 == l2 and l3 == l3 and l3 < l1, string.format('training continues: loss %.4f -> %.4f -> %.4f', l1, l2, l3))
end)

T.test('memory stays bounded in a loop that drops 1000 tensors of 64 MiB', function()
  v100.memory.empty_cache()
  v100.memory.reset_peak()
  local base = stats().reserved
  for i = 1, 1000 do
    local t = v100.empty({ 16 * MiB }, { device = 'cuda' }) -- 64 MiB
    t:fill_(i)
  end
  v100.cuda.synchronize()
  local s = v100.memory.stats()
  T.ok(s.peak_reserved - base < 8 * GiB, string.format('peak reserved grew by %.1f GiB', (s.peak_reserved - base) / GiB))
end)

T.test('snapshot lists segments whose sizes add up to reserved', function()
  local keep = {}
  for i = 1, 5 do keep[i] = v100.empty({ i * 300000 }, { device = 'cuda' }) end
  keep[6] = v100.empty({ 10 }, { device = 'cuda' })
  local snap = v100.memory.snapshot()
  local s = v100.memory.stats()
  T.ok(#snap >= 1, 'snapshot has segments')
  T.eq(#snap, s.segments, 'one entry per segment')
  local total, alloc_total = 0, 0
  for _, seg in ipairs(snap) do
    T.ok(type(seg.addr) == 'number' and type(seg.size) == 'number' and type(seg.small) == 'boolean', 'segment fields')
    T.ok(seg.stream ~= nil, 'segment stream')
    total = total + seg.size
    local bsum = 0
    for _, b in ipairs(seg.blocks) do
      bsum = bsum + b.size
      T.ok(b.addr >= seg.addr and b.addr + b.size <= seg.addr + seg.size, 'block inside its segment')
      if b.allocated then
        alloc_total = alloc_total + b.size
        T.ok(b.requested <= b.size, 'requested <= block size')
      end
    end
    T.eq(bsum, seg.size, 'blocks cover their segment')
  end
  T.eq(total, s.reserved, 'segment sizes add up to reserved')
  T.eq(alloc_total, s.allocated, 'allocated blocks add up to allocated')
  -- every live tensor lies in an allocated block
  for i, t in ipairs(keep) do
    local p = t:data_ptr()
    local found = false
    for _, seg in ipairs(snap) do
      for _, b in ipairs(seg.blocks) do
        if b.allocated and p >= b.addr and p < b.addr + b.size then found = true end
      end
    end
    T.ok(found, 'tensor ' .. i .. ' is in an allocated block')
  end
end)

T.test('events: elapsed_time > 0 around a matmul; query', function()
  local a = v100.randn({ 2048, 2048 }, { device = 'cuda' })
  local e1 = v100.cuda.Event({ timing = true })
  local e2 = v100.cuda.Event({ timing = true })
  e1:record()
  local c = a:matmul(a)
  e2:record()
  e2:synchronize()
  T.eq(e2:query(), true, 'query after synchronize')
  local ms = e1:elapsed_time(e2)
  T.ok(type(ms) == 'number' and ms > 0, 'elapsed_time ' .. tostring(ms))
  T.ok(ms < 10000, 'elapsed_time in ms')
  T.eq(c.shape, { 2048, 2048 })
end)

T.test('work on a second stream ordered with wait_event gives right results', function()
  v100.set_allow_tf32(false)
  local s = v100.cuda.Stream()
  local x = v100.rand({ 4096, 4096 }, { device = 'cuda' })
  local y = x:matmul(x) -- long-running on the default stream
  local ev = v100.cuda.Event()
  ev:record()
  s:wait_event(ev)
  v100.cuda.set_stream(s)
  local z = y * 2 + 1 -- on s, after y
  v100.cuda.set_stream(nil)
  s:synchronize()
  T.eq(s:query(), true, 'stream idle after synchronize')
  v100.cuda.synchronize()
  T.tensor_eq(z, y * 2 + 1, 'the second stream saw the finished matmul')
  -- explicit stream argument to record, priority option, current_stream
  local s2 = v100.cuda.Stream({ priority = -1 })
  local cur = v100.cuda.current_stream()
  T.ok(cur ~= nil, 'current_stream')
  local e = v100.cuda.Event()
  local w = v100.rand({ 1000, 1000 }, { device = 'cuda' })
  e:record(cur)
  s2:wait_event(e)
  v100.cuda.set_stream(s2)
  local w2 = w:exp()
  v100.cuda.set_stream(nil)
  s2:synchronize()
  T.tensor_close(w2, w:cpu():exp(), 1e-5, 1e-5, 'exp on a priority stream')
end)

T.test('record_stream keeps a block from reuse until the other stream is done', function()
  local s = v100.cuda.Stream()
  for _ = 1, 5 do
    local a = v100.rand({ 8 * MiB }, { device = 'cuda' })
    local want = a:cpu() * 3
    local ev = v100.cuda.Event()
    ev:record()
    s:wait_event(ev)
    v100.cuda.set_stream(s)
    local big = v100.rand({ 2048, 2048 }, { device = 'cuda' })
    local _ = big:matmul(big) -- delay the stream
    local b = a * 3           -- reads a on s
    v100.cuda.set_stream(nil)
    a:record_stream(s)
    a:free()
    local c = v100.zeros({ 8 * MiB }, { device = 'cuda' }) -- same size: would reuse a's block
    c:fill_(-1)
    s:synchronize()
    v100.cuda.synchronize()
    T.tensor_eq(b, want, 'b computed from a, not from a reused block')
  end
end)

T.test('devices and properties', function()
  T.ok(v100.cuda.device_count() >= 1)
  T.eq(v100.device():sub(1, 5), 'cuda:')
  local p = v100.cuda.get_device_properties(0)
  for _, k in ipairs({ 'name', 'total_memory', 'major', 'minor', 'multi_processor_count' }) do
    T.ok(p[k] ~= nil, 'property ' .. k)
  end
  T.ok(p.major >= 7)
  local t = v100.rand({ 3 }, { device = 'cuda:0' })
  T.eq(t.device, 'cuda:0')
  v100.cuda.synchronize(0)
  v100.cuda.synchronize()
end)

T.run()
