-- tests/mpi/launch_hang.lua: issue 27's "MPI jobs that never end", run by v100lua launching
-- mpirun itself (label `mpi`; V100_MPIEXEC names mpirun). For 2 and 3 ranks, every scenario of
-- job_hang.lua (a rank that ends its script or calls os.exit(0) while the others wait in a
-- collective, a DistributedSampler giving one rank one more batch, element counts that differ, a
-- recv from a rank that left, a rank computing past V100LUA_DIST_TIMEOUT) must end the job
-- non-zero well within the 60 s of `timeout` (124 would mean a hang), with a message on every
-- rank naming what happened. Before the fix every one of them but `count` hung (`count`
-- segfaulted inside Open MPI, whose handler then deadlocked).
local T = require 'testlib'

local exe = T.binary()
local mpiexec = os.getenv('V100_MPIEXEC') or 'mpirun'
local here = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or 'tests/mpi'
local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function job(np, how, env)
  local t0 = os.time()
  local p = assert(io.popen(string.format('timeout 60 env %s %s --allow-run-as-root --oversubscribe -np %d %s %s %s 2>&1',
    env or '', q(mpiexec), np, q(exe), q(here .. '/job_hang.lua'), how)))
  local out = p:read('a')
  local _, _, code = p:close()
  return out, code, os.time() - t0
end

-- The line of rank r's error (after the "[rank r host] " prefix), or nil.
local function said(out, r, pattern)
  for line in out:gmatch('[^\n]+') do
    if line:find('^%[rank ' .. r .. ' [^%]]+%] ') and line:find(pattern) then return line end
  end
end

local function ends(np, how, env, limit)
  local out, code, secs = job(np, how, env)
  T.ok(code ~= 0 and code ~= 124, string.format('%s at %d ranks: non-zero and no hang (code %s, %d s):\n%s', how, np,
    tostring(code), secs, out))
  T.ok(secs < (limit or 30), string.format('%s at %d ranks ends quickly (%d s)', how, np, secs))
  return out
end

for _, np in ipairs({ 2, 3 }) do
  local last = np - 1
  T.test(np .. ' ranks: the last rank ends its script while the others wait in all_reduce', function()
    local out = ends(np, 'end_script')
    T.ok(said(out, last, 'this rank %(' .. last .. '%) left the job .* after 1 collectives, but rank %d waits in all_reduce, its collective #2'), out)
    for r = 0, np - 2 do
      T.ok(said(out, r, 'all_reduce: rank ' .. last .. ' left the job %(its script ended or it called os.exit%(0%)%) after 1 collectives, while this rank %(' .. r .. '%) waits in all_reduce, its collective #2'), out)
    end
  end)

  T.test(np .. ' ranks: os.exit(0) on the last rank while the others wait in a barrier', function()
    local out = ends(np, 'os_exit')
    T.ok(said(out, last, 'this rank %(' .. last .. '%) left the job.*waits in barrier, its collective #2'), out)
    for r = 0, np - 2 do T.ok(said(out, r, 'barrier: rank ' .. last .. ' left the job .* waits in barrier'), out) end
  end)

  T.test(np .. ' ranks: DistributedSampler over ' .. 5 * np .. ' vs ' .. 5 * np + 1 .. ' samples (5 vs 6 all-reduces)', function()
    local out = ends(np, 'sampler')
    T.ok(out:find('rank 0 did 5 all%-reduces'), out)
    for r = 0, np - 2 do
      T.ok(said(out, r, 'this rank %(' .. r .. '%) left the job .* after 5 collectives, but rank ' .. last .. ' waits in all_reduce, its collective #6'), out)
    end
    T.ok(said(out, last, 'all_reduce: rank %d left the job .* after 5 collectives, while this rank %(' .. last .. '%) waits in all_reduce, its collective #6'), out)
  end)

  T.test(np .. ' ranks: all_reduce of 1,000 vs 1,000,000 floats fails on every rank (no crash)', function()
    local out = ends(np, 'count')
    for r = 0, last do
      T.ok(said(out, r, 'all_reduce: the ranks pass different element counts, 1000 to 1000000 %(this rank ' .. r), out)
    end
    T.ok(not out:find('Segmentation fault') and not out:find('signal 11'), out)
  end)

  T.test(np .. ' ranks: all_gather of 4 vs 5 elements fails on every rank', function()
    local out = ends(np, 'gather')
    for r = 0, last do T.ok(said(out, r, 'all_gather: the ranks pass different element counts, 4 to 5'), out) end
  end)

  T.test(np .. ' ranks: a recv from a rank that ended', function()
    local out = ends(np, 'recv')
    T.ok(said(out, 0, 'recv: rank ' .. last .. ' left the job .* while this rank %(0%) waits in recv from rank ' .. last), out)
    T.ok(said(out, last, 'this rank %(' .. last .. '%) left the job .* while rank 0 waits in recv from rank ' .. last), out)
  end)

  T.test(np .. ' ranks: agreeing ranks still exit 0', function()
    local out, code = job(np, 'ok')
    T.eq(code, 0, out)
    for r = 0, last do T.ok(out:find('rank ' .. r .. ' finished ok', 1, true), out) end
  end)
end

T.test('V100LUA_DIST_TIMEOUT=2: a collective that waits longer ends the job', function()
  local out = ends(2, 'timeout', 'V100LUA_DIST_TIMEOUT=2', 20)
  T.ok(said(out, 0, 'all_reduce: not finished after 2 s %(V100LUA_DIST_TIMEOUT=2; this rank\'s collective #1%)'), out)
end)

T.test('V100LUA_DIST_TIMEOUT must be a number of seconds', function()
  local out, code = job(2, 'ok', 'V100LUA_DIST_TIMEOUT=soon')
  T.ok(code ~= 0 and code ~= 124, out)
  T.ok(out:find("V100LUA_DIST_TIMEOUT='soon' is not a number of seconds", 1, true), out)
end)

T.run()
