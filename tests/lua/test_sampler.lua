-- tests/lua/test_sampler.lua: the loaders' epoch orders in C (runtime/dist/sampler.c) against the
-- Lua they replaced, kept here as the reference: data.permutation (Fisher-Yates with xorshift64*)
-- gives the very same orders, so resumed runs and documented results keep their batches, and
-- DistributedSampler:indices the same shares, for every rank count, padding and drop_last.
local T = require 'testlib'
local v100 = require 'v100'
local data = require 'v100.data'
local dist = require 'v100.dist'

local function ref_rng(seed)
  local state = (math.tointeger(seed) or 0) ~ 0x2545F4914F6CDD1D
  if state == 0 then state = 1 end
  return function(n)
    state = state ~ (state >> 12)
    state = state ~ (state << 25)
    state = state ~ (state >> 27)
    local r = (state * 0x2545F4914F6CDD1D) >> 11
    return r % n + 1
  end
end
local function ref_permutation(n, seed)
  local rand = ref_rng(seed)
  local p = {}
  for i = 1, n do p[i] = i - 1 end
  for i = n, 2, -1 do
    local j = rand(i)
    p[i], p[j] = p[j], p[i]
  end
  return p
end
local function ref_indices(n, seed, epoch, shuffle, rank, size, drop_last)
  local num = drop_last and n // size or (n + size - 1) // size
  local order = shuffle and ref_permutation(n, seed + epoch) or nil
  if not order then
    order = {}
    for i = 1, n do order[i] = i - 1 end
  end
  local mine = {}
  for k = 0, num - 1 do mine[k + 1] = order[(rank + k * size) % n + 1] end
  return mine
end

T.test('data.permutation: the orders of the Lua implementation, for many n and seeds', function()
  for _, n in ipairs { 0, 1, 2, 3, 10, 97, 1000, 65537 } do
    for _, seed in ipairs { 0, 1, 42, -7, 0x2545F4914F6CDD1D, math.maxinteger } do
      local p = data.permutation(n, seed)
      T.eq(p.dtype, 'i64')
      T.eq(p:totable(), ref_permutation(n, seed), string.format('n %d seed %d', n, seed))
    end
  end
  T.eq(data.permutation(5, 2.0):totable(), ref_permutation(5, 2), 'an integral float seed')
  T.raises(function() data.permutation(-1, 0) end, 'n must not be negative')
end)

T.test('DistributedSampler:indices: the shares of the Lua implementation (padding, drop_last, no shuffle)', function()
  for _, n in ipairs { 1, 2, 5, 16, 101 } do
    for _, size in ipairs { 1, 2, 3, 8, 40 } do
      for rank = 0, size - 1 do
        for _, drop in ipairs { false, true } do
          for _, shuffle in ipairs { true, false } do
            local s = dist.DistributedSampler(n, { rank = rank, size = size, seed = 9, drop_last = drop, shuffle = shuffle })
            s:set_epoch(3)
            T.eq(s:indices():totable(), ref_indices(n, 9, 3, shuffle, rank, size, drop),
              string.format('n %d, rank %d of %d, drop_last %s, shuffle %s', n, rank, size, tostring(drop), tostring(shuffle)))
          end
        end
      end
    end
  end
  local s = dist.DistributedSampler(0, { rank = 0, size = 2 })
  T.eq(#s:indices():totable(), 0, 'an empty data set')
end)

T.test('a large epoch is fast', function()
  local s = dist.DistributedSampler(4000000, { rank = 1, size = 4, seed = 1 })
  -- CPU time, not wall time: the bound is about the work done, and wall time grows with
  -- whatever else the machine runs (ctest -j, other builds)
  local t0 = os.clock()
  local idx = s:indices()
  local dt = os.clock() - t0
  T.eq(idx.shape, { 1000000 })
  T.ok(dt < 0.5, string.format('4M samples, rank 1 of 4: %.3f s (0.05 s measured; the Lua tables took 1.05 s)', dt))
end)

T.run()
