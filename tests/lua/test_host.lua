-- tests/lua/test_host.lua: the host program `v100lua` itself, run as a child process (arg[-1] is
-- the binary running this test).
local T = require 'testlib'

local exe = arg[-1]
local tmpfiles = {}

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function tmpfile(contents)
  local name = os.tmpname()
  tmpfiles[#tmpfiles + 1] = name
  if contents then
    local f = assert(io.open(name, 'w'))
    f:write(contents)
    f:close()
  end
  return name
end

local function slurp(name)
  local f = assert(io.open(name))
  local s = f:read('a')
  f:close()
  return s
end

-- Runs `v100lua <args>` through the shell; returns stdout, stderr, exit code.
local function run(args, opts)
  opts = opts or {}
  local errf = tmpfile()
  local cmd = (opts.env or '') .. ' ' .. q(exe) .. ' ' .. args .. ' 2>' .. q(errf)
  if opts.stdin then cmd = 'printf %s ' .. q(opts.stdin) .. ' | ' .. cmd
  else cmd = cmd .. ' </dev/null' end
  local p = assert(io.popen(cmd))
  local out = p:read('a')
  local _, _, code = p:close()
  return out, slurp(errf), code
end

T.test('the binary is known', function()
  T.ok(type(exe) == 'string' and exe ~= '', 'arg[-1] names the interpreter')
end)

T.test('-e runs statements in order', function()
  local out, err, code = run("-e 'x = 20' -e 'print(x + 1)'")
  T.eq(out, '21\n')
  T.eq(err, '')
  T.eq(code, 0)
end)

T.test('require v100 works without LUA_PATH', function()
  local out, _, code = run("-e 'print(require(\"v100\").version)'", {env = 'env -u LUA_PATH'})
  T.eq(code, 0)
  T.ok(out:match('^%d+%.%d+%.%d+\n$'), 'version printed: ' .. out)
end)

T.test('-l requires a module into a global', function()
  local out, _, code = run("-l v100 -e 'print(v100.tensor{1, 2}:sum():item())'")
  T.eq(code, 0)
  T.eq(out, '3\n')
end)

T.test('--version and -v list libraries and GPUs', function()
  for _, flag in ipairs({'--version', '-v'}) do
    local out, _, code = run(flag)
    T.eq(code, 0, flag)
    T.ok(out:find('^v100lua %d+%.%d+%.%d+\n'), flag .. ' starts with the version: ' .. out)
    T.ok(out:find('Lua 5.4', 1, true), 'Lua version')
    T.ok(out:find('CUDA', 1, true), 'CUDA line')
    T.ok(out:find('MPI', 1, true), 'MPI line')
    T.ok(out:find('no CUDA devices', 1, true) or out:find('GPU 0: .+ GiB, compute capability %d+%.%d+'),
      'GPUs or their absence: ' .. out)
  end
end)

T.test('--help and -h print usage', function()
  for _, flag in ipairs({'--help', '-h'}) do
    local out, _, code = run(flag)
    T.eq(code, 0)
    T.ok(out:find('usage: ', 1, true) and out:find('-e stmt', 1, true) and out:find('--version', 1, true), out)
  end
end)

T.test('a bad option exits 1 with usage on stderr', function()
  local out, err, code = run('-Q')
  T.eq(code, 1)
  T.eq(out, '')
  T.ok(err:find("unrecognized option '-Q'", 1, true) and err:find('usage:', 1, true), err)
  local _, err2, code2 = run('-e')
  T.eq(code2, 1)
  T.ok(err2:find("'-e' needs argument", 1, true), err2)
end)

T.test('a failing script exits 1 with message and traceback on stderr', function()
  local script = tmpfile([[
local function inner() error('deliberate failure') end
local function outer() inner() end
print('before')
outer()
print('after')
]])
  local out, err, code = run(q(script))
  T.eq(code, 1)
  T.eq(out, 'before\n')
  T.ok(err:find('deliberate failure', 1, true), err)
  T.ok(err:find('stack traceback:', 1, true), 'traceback: ' .. err)
  T.ok(err:find("in local 'inner'", 1, true) or err:find('inner', 1, true), 'names the function: ' .. err)
end)

T.test('runtime errors and non-string errors are reported', function()
  local _, err, code = run("-e 'local v = require \"v100\"; v.zeros({2, 3}):add(v.zeros({4, 3}))'")
  T.eq(code, 1)
  T.ok(err:find('add:', 1, true) and err:find('2x3', 1, true) and err:find('4x3', 1, true), err)
  local _, err2, code2 = run("-e 'error({})'")
  T.eq(code2, 1)
  T.ok(err2:find('(error object is a table value)', 1, true), err2)
  local _, err3, code3 = run("-e 'error(setmetatable({}, {__tostring = function() return \"custom\" end}))'")
  T.eq(code3, 1)
  T.ok(err3:find('custom', 1, true), err3)
  local _, err4, code4 = run("-e 'x = = 1'")
  T.eq(code4, 1)
  T.ok(err4:find('(command line)', 1, true), 'syntax errors name the chunk: ' .. err4)
  local _, err5, code5 = run(q('/nonexistent/script.lua'))
  T.eq(code5, 1)
  T.ok(err5:find('cannot open /nonexistent/script.lua', 1, true), err5)
end)

T.test('the arg table and script arguments', function()
  local script = tmpfile([[
print(arg[0], arg[1], arg[2], #arg, select('#', ...), ...)
print(arg[-1], arg[-2], arg[-3] ~= nil, arg[-4])
]])
  local out, err, code = run("-e 'y = 1' " .. q(script) .. ' alpha beta')
  T.eq(code, 0, err)
  local l1, l2 = out:match('^(.-)\n(.-)\n$')
  T.eq(l1, script .. '\talpha\tbeta\t2\t2\talpha\tbeta')
  T.eq(l2, 'y = 1\t-e\ttrue\tnil', 'negative indices: options, then the interpreter')
  local out2 = run("-e 'print(#arg, arg[0], arg[1], arg[-1])'")
  T.eq(out2, '2\t' .. exe .. '\t-e\tnil\n', 'no script: arg[0] is the interpreter, as lua does')
end)

T.test('- runs the script from stdin', function()
  local out, err, code = run('- x y', {stdin = 'print(arg[0], ...)\n'})
  T.eq(code, 0, err)
  T.eq(out, '-\tx\ty\n')
  local out2, _, code2 = run('', {stdin = 'print(6 * 7)\n'})
  T.eq(code2, 0)
  T.eq(out2, '42\n', 'without a script a non-tty stdin is the script')
  local _, err3, code3 = run('-', {stdin = 'error("from stdin")\n'})
  T.eq(code3, 1)
  T.ok(err3:find('from stdin', 1, true), err3)
end)

T.test('-i: REPL prints values, continues lines, reports errors', function()
  local out, err, code = run('-i', {stdin = '1 + 1\nx = {\n10, 20,\n30}\nprint(#x)\nerror("oops")\n"s", 3\n'})
  T.eq(code, 0, 'the REPL ends normally at end of input')
  T.ok(out:find('2\n', 1, true), 'an expression prints its value: ' .. out)
  T.ok(out:find('3\n', 1, true), 'a statement continued over lines ran: ' .. out)
  T.ok(out:find('s\t3\n', 1, true), 'several values are printed like print does: ' .. out)
  T.ok(err:find('oops', 1, true), 'errors go to stderr: ' .. err)
end)

T.test('errors carry the MPI rank prefix on every line', function()
  -- "[rank N host] ": the host of this machine, as hostname(1) prints it
  local hp = assert(io.popen('hostname'))
  local host = hp:read('l')
  hp:close()
  local pre = '[rank 3 ' .. host .. '] '
  local _, err, code = run("-e 'error(\"bad thing\")'", {env = 'OMPI_COMM_WORLD_RANK=3'})
  T.eq(code, 1)
  T.ok(err:find('bad thing', 1, true), err)
  local n = 0
  for line in err:gmatch('[^\n]+') do
    n = n + 1
    T.ok(line:sub(1, #pre) == pre, 'prefixed: ' .. line)
  end
  T.ok(n >= 3, 'message and traceback lines')
  local nolaunch = 'env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u SLURM_PROCID -u RANK -u WORLD_SIZE'
  local _, err2 = run("-e 'error(\"x\")'", {env = 'env -u OMPI_COMM_WORLD_RANK PMI_RANK=5'})
  T.ok(err2:find('^%[rank 5 [^%]]+%] '), 'PMI_RANK too: ' .. err2)
  local _, err3 = run("-e 'error(\"x\")'", {env = nolaunch})
  T.ok(not err3:find('[rank', 1, true), 'no prefix without MPI: ' .. err3)
  local _, err4 = run("-e 'error(\"x\")'", {env = nolaunch .. ' SLURM_PROCID=7'})
  T.ok(err4:find('^%[rank 7 [^%]]+%] '), 'SLURM_PROCID too: ' .. err4)
  local _, err5 = run("-e 'error(\"x\")'", {env = nolaunch .. ' RANK=2 WORLD_SIZE=4'})
  T.ok(err5:find('^%[rank 2 [^%]]+%] '), 'torchrun-style RANK with WORLD_SIZE: ' .. err5)
  local _, err6 = run("-e 'error(\"x\")'", {env = nolaunch .. ' RANK=2'})
  T.ok(not err6:find('[rank', 1, true), 'RANK alone is not a launcher: ' .. err6)
end)

T.test('exit status of os.exit is kept', function()
  local _, _, code = run("-e 'os.exit(7)'")
  T.eq(code, 7)
  local _, _, code2 = run("-e 'os.exit(true, true)'")
  T.eq(code2, 0)
end)

for _, name in ipairs(tmpfiles) do os.remove(name) end
T.run()
