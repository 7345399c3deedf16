-- tests/multinode/mnlib.lua: what the multinode tests share. They run on host a of the test hosts
-- that tools/multinode.sh builds (label `multinode`; `bash tools/multinode.sh test`), launching
-- mpirun over the hosts themselves. Without the hosts ($V100LUA_MN_HOSTFILE unset) a test exits
-- 77, which ctest reports as skipped (tools/test.sh leaves the label out).
local T = require 'testlib'
local M = {}

M.hostfile = os.getenv('V100LUA_MN_HOSTFILE')
if not M.hostfile then
  io.stderr:write('no test hosts ($V100LUA_MN_HOSTFILE unset): run through `bash tools/multinode.sh test`\n')
  os.exit(77)
end
M.hosts = {}
for h in (os.getenv('V100LUA_MN_HOSTS') or ''):gmatch('%S+') do M.hosts[#M.hosts + 1] = h end
M.shared = assert(os.getenv('V100LUA_MN_SHARED'), 'V100LUA_MN_SHARED unset')
M.tool = assert(os.getenv('V100LUA_MN_TOOL'), 'V100LUA_MN_TOOL unset')
M.exe = T.binary()
M.mpiexec = os.getenv('V100_MPIEXEC') or 'mpirun'
M.here = debug.getinfo(1, 'S').source:match('^@(.*)/[^/]*$') or 'tests/multinode'

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
M.q = q

-- This host's name (the tests run on host a).
M.host = assert(io.popen('hostname')):read('l')

-- Runs a shell command; returns its output (stderr folded in), exit code and seconds taken.
function M.sh(cmd)
  local t0 = require('v100').io.time()
  local p = assert(io.popen(cmd .. ' 2>&1'))
  local out = p:read('a')
  local _, _, code = p:close()
  return out, code, require('v100').io.time() - t0
end

-- mpirun over the test hosts: o.np ranks (4), o.map ('node': round robin over the hosts, rank r
-- on host r % hosts; or o.H = 'a:3,b:1'), the variables o.env = {NAME = value} set and forwarded
-- with -x (LUA_PATH always: the tests' modules; V100LUA_MN_UNFORWARDED=inherited is set in
-- mpirun's environment without -x, to show what reaches which host), o.timeout seconds (300; 124 = a hang), o.args:
-- shell words after the binary. Returns output, exit code, seconds.
function M.mpirun(o)
  local parts = { 'env', 'V100LUA_MN_UNFORWARDED=inherited', 'timeout', tostring(o.timeout or 300), q(M.mpiexec), '--allow-run-as-root', '-np', tostring(o.np or 4) }
  if o.H then
    parts[#parts + 1] = '-H ' .. q(o.H)
  else
    parts[#parts + 1] = '--hostfile ' .. q(M.hostfile) .. ' --map-by ' .. (o.map or 'node')
  end
  parts[#parts + 1] = '-x LUA_PATH'
  local names = {}
  for k in pairs(o.env or {}) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do parts[#parts + 1] = '-x ' .. q(k .. '=' .. tostring(o.env[k])) end
  for _, a in ipairs(o.mpirun_args or {}) do parts[#parts + 1] = a end
  parts[#parts + 1] = q(o.exe or M.exe)
  parts[#parts + 1] = o.args
  return M.sh(table.concat(parts, ' '))
end

-- Waits (polling every 50 ms, at most `secs`) until the file at path exists; returns whether it does.
function M.wait_for(path, secs)
  local io_ = require('v100').io
  for _ = 1, math.floor(secs * 20) do
    if io_.exists(path) then return true end
    os.execute('sleep 0.05')
  end
  return io_.exists(path)
end

-- tests/multinode/job_loop.lua as 4 ranks over the hosts in the background (a job in its steady
-- state for a fault to hit), with V100LUA_DIST_TIMEOUT=dist_timeout. Returns {dir, started (the
-- first collective crossed the hosts within 30 s), finish(secs) -> ended, exit code (nil: still
-- running), output}.
function M.loop_job(name, dist_timeout)
  local dir = M.shared_dir(name)
  local marker, log, rcf = dir .. '/running', dir .. '/out.txt', dir .. '/rc'
  os.execute(string.format('(env V100LUA_MN_UNFORWARDED=inherited timeout 200 %s --allow-run-as-root -np 4 --hostfile %s ' ..
    '--map-by node -x LUA_PATH -x V100LUA_DIST_TIMEOUT=%d %s %s %s 300 > %s 2>&1; echo $? > %s) &', q(M.mpiexec),
    q(M.hostfile), dist_timeout, q(M.exe), q(M.here .. '/job_loop.lua'), q(marker), q(log), q(rcf)))
  local job = { dir = dir, started = M.wait_for(marker, 30) }
  function job.finish(secs)
    local ended = M.wait_for(rcf, secs)
    local f = io.open(log, 'rb')
    local out = f and f:read('a') or ''
    if f then f:close() end
    local r = io.open(rcf, 'rb')
    local rc = r and tonumber(r:read('a')) or nil
    if r then r:close() end
    return ended, rc, out
  end
  return job
end

-- The lines of rank r (after its "[rank r host] " prefix): a list of {host =, text =}.
function M.lines_of(out, r)
  local l = {}
  for host, text in out:gmatch('%[rank ' .. r .. ' ([^%]]+)%] ([^\n]*)') do l[#l + 1] = { host = host, text = text } end
  return l
end

-- The host rank r runs on under --map-by node (round robin over the hosts).
function M.host_of(r) return M.hosts[r % #M.hosts + 1] end

-- A new folder in the shared file system (every host sees it at the same path).
function M.shared_dir(name)
  local d = string.format('%s/%s-%d', M.shared, name, math.random(1 << 30))
  os.execute('rm -rf ' .. q(d))
  require('v100.core').io.makedirs(d)
  return d
end

return M
