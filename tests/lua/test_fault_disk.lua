-- tests/lua/test_fault_disk.lua: a full disk while a checkpoint or a log is written. The child
-- v100lua runs with RLIMIT_FSIZE (bash's `ulimit -f`) and SIGXFSZ ignored, so a write past the
-- limit fails with EFBIG, as one on a full disk fails with ENOSPC: the same error path. A
-- checkpoint that does not fit fails with a clear error, leaves no partial or temporary files,
-- the previous checkpoint stays the latest and loads, and training goes on; a log line that does
-- not fit is an error naming the file, and the file keeps only whole lines.
local v100 = require 'v100'
local T = require 'testlib'

local dir = T.tmpdir()
local script = dir .. '/child.lua'
T.write_file(script, [==[
local v100 = require 'v100'
local nn, optim = require 'v100.nn', require 'v100.optim'
local ckpt, log = require 'v100.checkpoint', require 'v100.log'
local dir = arg[1]
v100.manual_seed(3)
local m = nn.Linear(32, 32)                  -- 4 KiB of weights: fits
local opt = optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
local x, y = v100.randn{ 8, 32 }, v100.randn{ 8, 32 }
local function train_step()
  local loss = ((m(x) - y) ^ 2):mean()
  opt:zero_grad()
  loss:backward()
  opt:step()
  return loss:item()
end
train_step()
local first = ckpt.save(dir .. '/ck', { model = m, optimizer = opt, step = 1 })
print('saved ' .. first)
local w_before = m.weight:clone()
-- 1 MiB of weights does not fit under the 256 KiB limit
local big = nn.Linear(512, 512)
local ok, err = pcall(ckpt.save, dir .. '/ck', { model = big, step = 2 })
print('big save ok=' .. tostring(ok))
print('big save error: ' .. tostring(err))
for name in io.popen("ls -A '" .. dir .. "/ck'"):lines() do print('entry ' .. name) end
print('latest ' .. tostring(ckpt.latest(dir .. '/ck')))
local c = ckpt.load(ckpt.latest(dir .. '/ck'))
local m2 = nn.Linear(32, 32)
ckpt.restore(c, { model = m2 })
print('restored the saved weights ' .. tostring((m2.weight - w_before):abs():max():item() == 0))
print('weights untouched ' .. tostring((m.weight - w_before):abs():max():item() == 0))
local l1 = train_step()
local l2 = train_step()
print(string.format('training goes on %s', tostring(l2 < l1)))
-- the log: lines until the file reaches the limit
local lg = log.Logger{ dir = dir .. '/logs', tensorboard = false }
local wrote, lerr = 0, nil
for i = 1, 100000 do
  local ok2, e = pcall(lg.log, lg, i, { loss = 1.5, note = string.rep('x', 200) })
  if not ok2 then lerr = e break end
  wrote = i
end
print('log lines before the error ' .. wrote)
print('log error: ' .. tostring(lerr))
local f = assert(io.open(dir .. '/logs/metrics.jsonl', 'rb'))
local text = f:read('a')
f:close()
print('log ends with a newline ' .. tostring(text:sub(-1) == '\n'))
local n = 0
for line in text:gmatch('[^\n]+') do
  assert(v100.io.json_decode(line).step == n + 1, 'line ' .. (n + 1) .. ' is not whole: ' .. line:sub(1, 80))
  n = n + 1
end
print('log lines readable ' .. n)
-- TensorBoard: scalars until the event file reaches the limit
local tb = log.Logger{ dir = dir .. '/tb', jsonl = false }
local calls, terr = 0, nil
local metrics = {}
for k = 1, 20 do metrics['metric_' .. k] = k + 0.5 end
for i = 1, 100000 do
  local ok2, e = pcall(tb.log, tb, i, metrics, { split = 'train' })
  if not ok2 then terr = e break end
  calls = i
end
local events = tb.events_path
tb:close()
print('tb calls before the error ' .. calls)
print('tb error: ' .. tostring(terr))
print('tb events ' .. events)
]==])

T.test('a checkpoint and a log that do not fit: clear errors, nothing half-written, training goes on', function()
  local cmd = string.format("bash -c \"trap '' XFSZ; ulimit -f 256; exec '%s' '%s' '%s'\" 2>&1", T.binary(), script, dir)
  local p = assert(io.popen(cmd, 'r'))
  local out = p:read('a')
  local ok = p:close()
  T.write_file(dir .. '/child.out', out)
  T.ok(ok, 'the child ended normally:\n' .. out)
  T.ok(out:find('saved ' .. dir .. '/ck/epoch0%-step1\n'), out)
  T.ok(out:find('big save ok=false\n', 1, true), out)
  local err = out:match('big save error: ([^\n]*)')
  T.ok(err and err:find('model.safetensors', 1, true) and err:lower():find('too large'),
    'the error names the file and the cause (EFBIG here, ENOSPC on a full disk): ' .. tostring(err))
  local entries = {}
  for e in out:gmatch('entry ([^\n]+)') do entries[#entries + 1] = e end
  table.sort(entries)
  T.eq(table.concat(entries, ' '), 'epoch0-step1 latest', 'no partial or temporary checkpoint left')
  T.ok(out:find('latest ' .. dir .. '/ck/epoch0%-step1\n'), 'the previous checkpoint is still the latest:\n' .. out)
  T.ok(out:find('restored the saved weights true\n', 1, true), 'and it loads with the saved weights:\n' .. out)
  T.ok(out:find('weights untouched true\n', 1, true), out)
  T.ok(out:find('training goes on true\n', 1, true), out)
  local lines = tonumber(out:match('log lines before the error (%d+)'))
  T.ok(lines and lines > 100 and lines < 2000, 'the log filled its 256 KiB: ' .. tostring(lines) .. ' lines')
  local lerr = out:match('log error: ([^\n]*)')
  T.ok(lerr and lerr:find('Logger:log: writing ' .. dir .. '/logs/metrics.jsonl', 1, true) and lerr:lower():find('too large'),
    'the log error names the file and the cause: ' .. tostring(lerr))
  T.ok(out:find('log ends with a newline true\n', 1, true), 'no half-written line at the end:\n' .. out)
  T.ok(out:find('log lines readable ' .. lines .. '\n', 1, true), 'every line before the error is whole JSON:\n' .. out)
end)

T.test('a TensorBoard file that does not fit: cut back to its whole records, every one readable', function()
  -- the child of the test above ran the Logger's event writer into the same limit
  local out = assert(io.open(dir .. '/child.out', 'rb')):read('a')
  local calls = tonumber(out:match('tb calls before the error (%d+)'))
  T.ok(calls and calls > 50 and calls < 2000, 'the event file filled its 256 KiB: ' .. tostring(calls) .. ' calls')
  local terr = out:match('tb error: ([^\n]*)')
  T.ok(terr and terr:find('EventWriter: ' .. dir .. '/tb/events.out.tfevents.', 1, true) and terr:lower():find('too large'),
    'the error names the event file and the cause: ' .. tostring(terr))
  local path = out:match('tb events ([^\n]*)')
  -- the writer cut the torn record off (before: half a record at the end, and read_events
  -- refused the whole file); the reader would read up to a tear anyway
  local size = #T.read_file(path)
  T.ok(size <= 256 * 1024, size)
  local ev = v100.io.read_events(path)
  T.eq(ev.torn, nil, 'no torn record at the end')
  T.eq(#ev % 20, 0, 'whole calls only: ' .. #ev .. ' scalars')
  T.ok(#ev // 20 == calls, 'every call before the error is in the file: ' .. #ev // 20 .. ' of ' .. calls)
  T.eq({ ev[1].tag, ev[1].step, ev[#ev].tag, ev[#ev].step, ev[#ev].value }, { 'train/metric_1', 1, 'train/metric_9', calls, 9.5 })
end)

os.execute("rm -rf '" .. dir .. "'")
T.run()
