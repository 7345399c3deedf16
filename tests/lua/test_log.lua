-- tests/lua/test_log.lua: scripts/v100/obs/log.lua and the v100.io pieces behind it: the Logger's
-- JSON lines (parsed back by json_decode) and TensorBoard event file (parsed back by
-- read_events), rank ~= 0 writing nothing, the progress bar on and off, Meter, topk_correct
-- (ties and NaN), reduce at world size 1, json round trips and the errors of bad inputs.
local v100 = require 'v100'
local log = require 'v100.log'
local T = require 'testlib'
local vio = v100.io

local root = T.tmpdir()
local read, write = T.read_file, T.write_file
local function ls(dir)
  local p = assert(io.popen("ls -A '" .. dir .. "' 2>/dev/null"))
  local names = {}
  for l in p:lines() do names[#names + 1] = l end
  p:close()
  table.sort(names)
  return names
end
local function lines(s)
  local out = {}
  for l in s:gmatch('[^\n]+') do out[#out + 1] = l end
  return out
end
local function f32(x) return string.unpack('<f', string.pack('<f', x)) end

T.test('Logger: JSON lines and TensorBoard scalars with the same tags, steps and values', function()
  local dir = root .. '/run1/sub' -- parents are created
  local lg = log.Logger{dir = dir, rank = 0}
  local t0 = vio.unix_time()
  lg:log(10, {loss = 2.25, lr = 0.1, ['images_per_s'] = 1234.5, n = 7, note = 'warm'}, {split = 'train', epoch = 1})
  lg:log(20, {loss = v100.tensor(1.5), lr = 0.05}, {split = 'train', epoch = 1})
  lg:log(20, {top1 = 0.75, top5 = 0.9375}, {split = 'val'})
  lg:log(30, {loss = 1.0})
  lg:close()
  lg:close() -- idempotent
  T.raises(function() lg:log(40, {loss = 1}) end, 'Logger:log: the logger is closed')

  local names = ls(dir)
  T.eq(#names, 2)
  T.eq(names[2], 'metrics.jsonl')
  T.ok(names[1]:match('^events%.out%.tfevents%.%d+%..+%.%d+%.v100lua$'), names[1])
  T.eq(dir .. '/' .. names[1], lg.events_path)

  local text = read(dir .. '/metrics.jsonl')
  local ls_ = lines(text)
  T.eq(#ls_, 4)
  -- the order of the line: step, split, the other extra fields, metrics (sorted), time
  T.ok(ls_[1]:find('^{"step":10,"split":"train","epoch":1,"images_per_s":1234.5,"loss":2.25,"lr":0.1,"n":7,"note":"warm","time":'),
    ls_[1])
  local recs = {}
  for i, l in ipairs(ls_) do recs[i] = vio.json_decode(l) end
  T.eq(recs[1].step, 10)
  T.eq(math.type(recs[1].step), 'integer')
  T.eq(math.type(recs[1].n), 'integer')
  T.eq(recs[1].note, 'warm')
  T.eq(recs[2].loss, 1.5)
  T.eq(math.type(recs[2].loss), 'float')
  T.eq(recs[3].split, 'val')
  T.eq(recs[4].split, nil)
  T.ok(recs[1].time >= t0 - 1 and recs[4].time <= vio.unix_time() + 1, 'time is Unix seconds')

  local ev = vio.read_events(lg.events_path)
  T.eq(ev.file_version, 'brain.Event:2')
  T.eq(ev.records, 1 + 4 + 2 + 2 + 1) -- the version record, then one per numeric metric
  local want = {
    {'train/images_per_s', 10, 1234.5}, {'train/loss', 10, 2.25}, {'train/lr', 10, 0.1}, {'train/n', 10, 7},
    {'train/loss', 20, 1.5}, {'train/lr', 20, 0.05}, {'val/top1', 20, 0.75}, {'val/top5', 20, 0.9375},
    {'loss', 30, 1.0},
  }
  T.eq(#ev, #want)
  local line_of = {1, 1, 1, 1, 2, 2, 3, 3, 4} -- the JSON line each scalar came with
  for i, w in ipairs(want) do
    T.eq(ev[i].tag, w[1], 'tag ' .. i)
    T.eq(ev[i].step, w[2], 'step ' .. i)
    T.eq(ev[i].value, f32(w[3]), 'value ' .. i .. ' (stored as float)')
    T.eq(ev[i].wall_time, recs[line_of[i]].time, 'the JSON line and the event share the time')
  end
end)

T.test('Logger: a second logger appends to metrics.jsonl and starts its own event file; jsonl name; off', function()
  local dir = root .. '/run2'
  local a = log.Logger{dir = dir, rank = 0}
  a:log(1, {loss = 1})
  a:close()
  do
    local b <close> = log.Logger{dir = dir, rank = 0}
    b:log(2, {loss = 2})
  end
  T.eq(#lines(read(dir .. '/metrics.jsonl')), 2)
  local n_events = 0
  for _, name in ipairs(ls(dir)) do if name:find('tfevents', 1, true) then n_events = n_events + 1 end end
  T.eq(n_events, 2)
  local c = log.Logger{dir = root .. '/run3', rank = 0, jsonl = 'train.jsonl', tensorboard = false}
  c:log(5, {acc = 0.5}, {split = 'train'})
  c:close()
  T.eq(ls(root .. '/run3'), {'train.jsonl'})
  T.eq(vio.json_decode(read(root .. '/run3/train.jsonl')).acc, 0.5)
end)

T.test('Logger: ranks other than 0 write nothing and create nothing', function()
  local dir = root .. '/rank1'
  local lg = log.Logger{dir = dir, rank = 1}
  lg:log(1, {loss = 1}, {split = 'train'})
  T.raises(function() lg:log(1.5, {loss = 1}) end, 'step must be an integer') -- still checked
  lg:close()
  T.eq(ls(dir), {})
  -- the default rank comes from the launcher's environment (dist.rank() before dist.init)
  local dir2 = root .. '/rank1env'
  local script = root .. '/rank_env.lua'
  write(script, string.format([[
    local log = require 'v100.log'
    local lg = log.Logger{dir = %q}
    lg:log(1, {loss = 1})
    lg:close()
    print('rank', lg.rank)]], dir2))
  local p = assert(io.popen('OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 ' .. T.binary() .. " '" .. script .. "' 2>&1"))
  local out = p:read('a')
  T.ok(p:close(), out)
  T.ok(out:find('rank\t1', 1, true), out)
  T.eq(ls(dir2), {})
end)

T.test('Logger: bad inputs are clear errors', function()
  local lg = log.Logger{dir = root .. '/bad', rank = 0}
  T.raises(function() lg:log('x', {}) end, 'Logger:log: step must be an integer, got x')
  T.raises(function() lg:log(1, 5) end, 'metrics must be a table, got number')
  T.raises(function() lg:log(1, {loss = {1}}) end, 'metric "loss" must be a number, string or boolean, got table')
  T.raises(function() lg:log(1, {time = 1}) end, '"time" is written by the logger itself')
  T.raises(function() lg:log(1, {loss = 1}, {loss = 2}) end, '"loss" is both a metric and an extra field')
  T.raises(function() lg:log(1, {[1] = 2}) end, 'metric keys must be strings')
  T.raises(function() lg:log(1, {loss = v100.tensor{1, 2}}) end, 'a tensor of 2 elements')
  T.raises(function() lg:log(1, {['bad\255'] = 1}) end, 'not valid UTF-8')
  lg:close()
end)

T.test('Logger: a call that raises writes neither file (an empty name used to leave its JSON line)', function()
  for _, jsonl in ipairs({ true, false }) do
    local d = root .. '/val' .. tostring(jsonl)
    local lg = log.Logger{dir = d, rank = 0, jsonl = jsonl}
    lg:log(1, {loss = 1})
    T.raises(function() lg:log(2, {[''] = 1}) end, 'Logger:log: empty metric name')
    T.raises(function() lg:log(2, {loss = 1}, {[''] = 'x'}) end, 'Logger:log: empty extra field name')
    T.raises(function() lg:log(2, {['a\0b'] = 1}) end, 'metric "a')
    T.raises(function() lg:log(2, {loss = 1}, {split = 'tr\255'}) end, 'metric "loss": EventWriter: the tag "tr\\xFF/loss" is not valid UTF-8')
    T.raises(function() lg:log(2, {loss = 1, note = 'x\255'}) end, 'not valid UTF-8')
    lg:log(3, {loss = 3})
    lg:close()
    if jsonl then
      local steps = {}
      for _, l in ipairs(lines(read(d .. '/metrics.jsonl'))) do steps[#steps + 1] = vio.json_decode(l).step end
      T.eq(steps, {1, 3})
    end
    local ev = vio.read_events(lg.events_path)
    T.eq({#ev, ev[1].step, ev[2].step, ev.torn}, {2, 1, 3, nil})
  end
  T.raises(function() log.Logger{rank = 0} end, 'Logger: dir must be the log directory (a string), got nil')
  T.raises(function() log.Logger{dir = root .. '/x', jsonl = 5} end, 'jsonl must be a boolean or a file name')
  write(root .. '/afile', 'x')
  T.raises(function() log.Logger{dir = root .. '/afile', rank = 0} end, {'makedirs', 'afile', 'not a directory'})
end)

T.test('EventWriter: scalars, close, path, errors', function()
  local w = vio.EventWriter(root .. '/ew')
  T.ok(w.path:find(root .. '/ew/events.out.tfevents.', 1, true) == 1, w.path)
  w:scalar('a', 1, 0)
  w:scalar('a', 2.5, 1, 1000.5)
  w:scalar('b', -3, -2)
  T.raises(function() w:scalar('a', 'x', 1) end, 'EventWriter:scalar: the value of "a" must be a number, got string')
  T.raises(function() w:scalar('a', 1, 1.5) end, 'the step of "a" must be an integer, got 1.5')
  T.raises(function() w:scalar(7, 1, 1) end, 'the tag must be a string, got number')
  T.raises(function() w:scalar('', 1, 1) end, 'EventWriter: the tag is empty')
  T.raises(function() w:scalar('a\0b', 1, 1) end, 'the tag contains a NUL byte')
  w:flush()
  local ev = vio.read_events(w.path) -- readable while open: flushed records are complete
  T.eq(#ev, 3)
  w:close()
  w:close()
  T.ok(w.closed)
  T.raises(function() w:scalar('a', 1, 1) end, 'EventWriter:scalar: the writer of ' .. w.path .. ' is closed')
  ev = vio.read_events(w.path)
  T.eq(ev.records, 4)
  T.eq({ev[2].tag, ev[2].step, ev[2].value, ev[2].wall_time}, {'a', 1, 2.5, 1000.5})
  T.eq({ev[3].tag, ev[3].step, ev[3].value}, {'b', -2, -3.0})
  T.ok(tostring(w):find('(closed)', 1, true))
  do
    local w2 <close> = vio.EventWriter(root .. '/ew')
    w2:scalar('c', 1, 1)
  end
  T.raises(function() vio.EventWriter('') end, 'EventWriter: the path is empty')
end)

-- The byte size of the first k TFRecords of an event file's bytes b.
local function read_events_size(b, k)
  local off = 0
  for _ = 1, k do off = off + 12 + string.unpack('<I8', b, off + 1) + 4 end
  return off
end

T.test('read_events: a torn last record is reported beside the whole ones; a flipped byte names the path and the record', function()
  local w = vio.EventWriter(root .. '/rd')
  for i = 1, 3 do w:scalar('x', i, i) end
  w:close()
  local b = read(w.path)
  local bad = root .. '/rd/bad.tfevents'
  -- A write cut short (a full disk, a crash) used to make the whole file unreadable; TensorBoard
  -- reads up to the tear, and so does read_events, saying where the tear is.
  local whole = read_events_size(b, 3) -- bytes of the version record and the first two scalars
  for _, cut in ipairs({ #b - 1, #b - 2, whole + 11, whole + 12, whole + 1 }) do
    write(bad, b:sub(1, cut))
    local ev = vio.read_events(bad)
    T.eq({ #ev, ev.records, ev.torn_at, ev[2].value }, { 2, 3, whole, 2.0 }, 'cut at ' .. cut)
    T.ok(ev.torn:find('^record 4 %(byte ' .. whole .. '%): truncated'), ev.torn)
  end
  write(bad, b:sub(1, 5)) -- even the version record torn: nothing read, the tear said
  local ev0 = vio.read_events(bad)
  T.eq({ #ev0, ev0.records, ev0.torn_at, ev0.torn }, { 0, 0, 0, 'record 1 (byte 0): truncated header: 5 of 12 bytes' })
  T.eq(vio.read_events(w.path).torn, nil)
  -- flip a byte of record 2's data (record 1, the version record, is 12 + 24 + 4 bytes)
  local at = 40 + 12 + 2
  write(bad, b:sub(1, at - 1) .. string.char(b:byte(at) ~ 0x20) .. b:sub(at + 1))
  T.raises(function() vio.read_events(bad) end, {bad .. ': record 2 (byte 40): data CRC mismatch'})
  T.raises(function() vio.read_events(root .. '/none') end, {'read_events: ' .. root .. '/none', 'No such file'})
  write(bad, '')
  local ev = vio.read_events(bad)
  T.eq({#ev, ev.records, ev.file_version}, {0, 0, nil})
end)

T.test('Progress: off when stderr is not a terminal; on, it redraws one line with \\r, rate-limited', function()
  -- a child whose stderr is a file: the default is off and nothing is written
  local script, errf = root .. '/bar.lua', root .. '/bar.err'
  write(script, [[
    local log = require 'v100.log'
    local bar = log.Progress{total = 5, label = 'epoch 1/2'}
    for i = 1, 5 do bar:update(i, {loss = 0.5}) end
    bar:finish()
    print(bar.enabled, require('v100').isatty(2))]])
  local p = assert(io.popen(T.binary() .. " '" .. script .. "' 2>'" .. errf .. "'"))
  local out = p:read('a')
  T.ok(p:close(), out)
  T.eq(out, 'false\tfalse\n')
  T.eq(read(errf), '')

  -- enabled, to a file
  local path = root .. '/bar.out'
  local f = assert(io.open(path, 'w'))
  local bar = log.Progress{total = 1000, label = 'epoch 1/90', enabled = true, out = f}
  local t0 = vio.time()
  for i = 1, 1000 do bar:update(i, {loss = 1 / i, ['img/s'] = 2500}) end
  local dt = vio.time() - t0
  bar:finish()
  bar:finish() -- idempotent
  f:close()
  local s = read(path)
  local draws = select(2, s:gsub('\r', ''))
  T.eq(draws, bar.draws)
  -- the first update, then at most one per 0.1 s, the last step, and finish
  T.ok(draws >= 3 and draws <= 3 + math.ceil(dt / 0.1), 'draws ' .. draws .. ' in ' .. dt .. ' s')
  T.eq(s:sub(-1), '\n')
  T.ok(s:sub(1, 1) == '\r')
  local last = s:match('\r([^\r]*)\n$')
  T.ok(last:find('^epoch 1/90 %[=+%] 1000/1000 in %d%d:%d%d img/s 2500 loss 0.001'), last)
  T.ok(s:find('\repoch 1/90 [>', 1, true), 'the first draw has an empty bar')
  -- enabled, to a pipe
  local piped = root .. '/bar.pipe'
  local pp = assert(io.popen("cat > '" .. piped .. "'", 'w'))
  local pb = log.Progress{total = 2, label = 'p', enabled = true, out = pp, min_interval = 0}
  pb:update(1)
  pb:update(2)
  pb:finish()
  pp:close()
  local ps = read(piped)
  T.eq(select(2, ps:gsub('\r', '')), 3)
  T.ok(ps:find('^\rp %[===============>              %] 1/2 ETA %d%d:%d%d'), ps)
  -- a disabled bar writes nothing even with an out
  local g = assert(io.open(root .. '/bar2.out', 'w'))
  local off = log.Progress{total = 3, enabled = false, out = g}
  off:update(1)
  off:finish()
  g:close()
  T.eq(read(root .. '/bar2.out'), '')
  -- no total: a count, no bar
  local h = assert(io.open(root .. '/bar3.out', 'w'))
  local nt = log.Progress{enabled = true, out = h, min_interval = 0}
  nt:update(7)
  nt:finish()
  h:close()
  T.eq(read(root .. '/bar3.out'):match('\r([^\r]*)\n$'):sub(1, 1), '7')
  T.raises(function() log.Progress{total = -1} end, 'Progress: total must be a non-negative integer or nil, got -1')
  T.raises(function() bar:update(1.5) end, 'Progress:update: k must be an integer')
end)

T.test('format_eta', function()
  T.eq(log.format_eta(0), '00:00')
  T.eq(log.format_eta(59.4), '00:59')
  T.eq(log.format_eta(59.6), '01:00')
  T.eq(log.format_eta(3599), '59:59')
  T.eq(log.format_eta(3600), '1:00:00')
  T.eq(log.format_eta(3725), '1:02:05')
  T.eq(log.format_eta(90061), '1d 01:01:01')
  T.eq(log.format_eta(0 / 0), '--:--')
  T.eq(log.format_eta(math.huge), '--:--')
  T.eq(log.format_eta(-1), '--:--')
  T.raises(function() log.format_eta('1') end, 'format_eta: seconds must be a number, got string')
end)

T.test('Meter', function()
  local m = log.Meter()
  T.eq({m.sum, m.count, m.avg, m.last}, {0, 0, 0, nil})
  m:update(2.0, 4):update(5.0):update(v100.tensor(1.0), 3)
  T.eq(m.sum, 2 * 4 + 5 + 3)
  T.eq(m.count, 8)
  T.eq(m.avg, 16 / 8)
  T.eq(m.last, 1.0)
  m:reset()
  T.eq({m.sum, m.count, m.avg, m.last}, {0, 0, 0, nil})
  T.raises(function() m:update('x') end, 'Meter:update: the value must be a number, got string')
  T.raises(function() m:update(1, -1) end, 'n must be a non-negative number')
end)

T.test('topk_correct: hand-made logits, the ties rule and NaN, on every float dtype', function()
  local logits = {
    {0.1, 0.9, 0.3, 0.2}, -- label 1: top-1
    {0.5, 0.1, 0.4, 0.3}, -- label 2: second
    {0.2, 0.2, 0.2, 0.2}, -- label 3: all tied -> after classes 0, 1, 2: rank 3
    {0.7, 0.7, 0.1, 0.0}, -- label 0: tied with class 1, smaller index first -> top-1
    {0.7, 0.7, 0.1, 0.0}, -- label 1: tied with class 0 which comes first -> second
    {0 / 0, 1, 2, 3},     -- label 0: NaN score -> never correct
    {0.1, 0 / 0, 0.3, 0.2}, -- label 2: another class's NaN is not higher -> top-1
  }
  local labels = {1, 2, 3, 0, 1, 0, 2}
  local want = {3, 5, 5, 6} -- k = 1, 2, 3, 4
  for _, dt in ipairs{'f32', 'f64', 'f16', 'bf16'} do
    for _, ldt in ipairs{'i64', 'i32'} do
      local x = v100.tensor(logits, {dtype = dt})
      local y = v100.tensor(labels, {dtype = ldt})
      T.eq(log.topk_correct(x, y, {1, 2, 3, 4}), want, dt .. ' ' .. ldt)
    end
  end
  local x = v100.tensor(logits)
  local y = v100.tensor(labels)
  T.eq(log.topk_correct(x, y), {3}, 'default k = 1')
  T.eq(log.topk_correct(x, y, 5), {6}, 'k above C: every non-NaN row')
  T.eq(math.type(log.topk_correct(x, y)[1]), 'integer')
  -- top-1 agrees with argmax (first index on ties) on random data with many ties
  local r = (v100.rand{64, 10} * 4):floor()
  local lab = (v100.rand{64} * 10):floor():long()
  local am = r:argmax(2):eq(lab):sum():item()
  T.eq(log.topk_correct(r, lab, {1})[1], am)
  -- no gradient is recorded through logits that require one
  local w = v100.tensor(logits):requires_grad_()
  T.eq(log.topk_correct(w, y, {1})[1], 3)
  T.eq(log.topk_correct(v100.zeros{0, 5}, v100.zeros({0}, {dtype = 'i64'}), {1, 5}), {0, 0})
  T.raises(function() log.topk_correct(v100.zeros{4}, y) end, 'topk_correct: logits must be N x C, got shape 4')
  T.raises(function() log.topk_correct(x, v100.tensor{1, 2}) end, 'labels must be a vector of 7 class indices (logits 7x4), got shape 2')
  T.raises(function() log.topk_correct(x, y:double()) end, 'labels must be an integer tensor of class indices, got f64')
  T.raises(function() log.topk_correct(x, y, {0}) end, 'ks[1] must be a positive integer, got 0')
  T.raises(function() log.topk_correct(x, v100.tensor{1, 2, 3, 4, 5, 6, 9}) end, 'out of bounds')
end)

T.test('reduce: the identity at world size 1, integers kept, errors', function()
  local r = log.reduce({loss = 1.5, n = 4, top1 = v100.tensor(3)})
  T.eq(r, {loss = 1.5, n = 4, top1 = 3})
  T.eq(math.type(r.n), 'integer')
  T.eq(log.reduce({}, 'max'), {})
  T.eq(log.reduce({a = 2}, 'avg'), {a = 2})
  T.raises(function() log.reduce({a = 1}, 'mean') end, 'reduce: op must be sum, avg, max, min or prod, got mean')
  T.raises(function() log.reduce({a = 'x'}) end, 'reduce: the value of a must be a number, got string')
  T.raises(function() log.reduce(3) end, 'reduce: expects a table of numbers, got number')
end)

T.test('json: round trips keep integers and floats apart; bad inputs', function()
  local v = {a = 1, b = 1.0, c = {1, 2.5, 'x', true, false}, d = {e = {f = -3}}, g = 'ünï "q" \\ \n\t',
    h = math.maxinteger, i = math.mininteger, j = 0.1, k = 1e300, l = -0.0, m = 2 ^ 63, n = 1 / 3}
  local s = vio.json_encode(v)
  T.eq(s, vio.json_encode(vio.json_decode(s)), 'stable text')
  local back = vio.json_decode(s)
  T.eq(back, v)
  for _, k in ipairs{'a', 'h', 'i'} do T.eq(math.type(back[k]), 'integer', k) end
  for _, k in ipairs{'b', 'j', 'k', 'l', 'm', 'n'} do T.eq(math.type(back[k]), 'float', k) end
  T.eq(math.type(back.c[1]), 'integer')
  T.eq(math.type(back.c[2]), 'float')
  T.eq(1 / back.l, -math.huge, '-0.0 keeps its sign')
  T.eq(vio.json_encode{b = 2, a = {}, c = 1.0}, '{"a":{},"b":2,"c":1.0}')
  T.eq(vio.json_encode{0 / 0, math.huge, -math.huge}, '[null,null,null]')
  T.eq(vio.json_encode(nil), 'null')
  T.eq(vio.json_encode('a'), '"a"')
  T.eq(vio.json_encode(3), '3')
  T.eq(vio.json_decode(' [1, 2.0, 3e2, -0, 12345678901234567890] '), {1, 2.0, 300.0, 0, 12345678901234567890.0})
  T.eq(math.type(vio.json_decode('3e2')), 'float')
  T.eq(vio.json_decode('{"a":null,"b":1}'), {b = 1})
  T.eq(vio.json_decode('"\\u00e9\\ud83d\\ude00"'), 'é😀')
  T.raises(function() vio.json_decode('') end, 'json_decode: the input is empty')
  T.raises(function() vio.json_decode('{"a":}') end, 'json_decode: invalid JSON at byte 6')
  T.raises(function() vio.json_decode('{"a":1} x') end, 'unexpected text after the JSON value at byte 9')
  T.raises(function() vio.json_decode('"a\\u0000b"') end, 'contains \\u0000')
  T.raises(function() vio.json_decode('"\255"') end, 'json_decode: invalid UTF-8 at byte 2')
  T.raises(function() vio.json_decode(5) end, 'json_decode: expects a string, got number')
  T.raises(function() vio.json_encode{1, nil, 3} end, 'the table an array 1..n')
  T.raises(function() vio.json_encode{a = {b = {print}}} end, 'json_encode: a function has no JSON form at $.a.b[1]')
  T.raises(function() vio.json_encode{[true] = 1} end, 'found boolean')
  T.raises(function() vio.json_encode{a = '\255'} end, 'json_encode: a string is not valid UTF-8 at $.a')
  T.raises(function() vio.json_encode{a = 'x\0y'} end, 'a string contains a NUL byte at $.a')
  local cyc = {}
  cyc.self = cyc
  T.raises(function() vio.json_encode(cyc) end, 'nested deeper than 1000 levels, the JSON nesting limit (a cycle?)')
end)

T.test('isatty, makedirs, unix_time', function()
  T.eq(v100.isatty, vio.isatty)
  local p = assert(io.popen(T.binary() .. [[ -e "print(require('v100').isatty(1), require('v100').isatty(2))" 2>/dev/null]]))
  T.eq(p:read('a'), 'false\tfalse\n')
  p:close()
  T.raises(function() v100.isatty(-1) end, 'isatty: the file descriptor must be a non-negative integer')
  T.raises(function() v100.isatty('x') end, 'got string')
  vio.makedirs(root .. '/m/a/b')
  vio.makedirs(root .. '/m/a/b/') -- existing, trailing slash
  T.eq(ls(root .. '/m/a'), {'b'})
  local t = vio.unix_time()
  T.ok(math.abs(t - os.time()) < 5, 'unix_time is the epoch clock')
end)

-- TensorBoard's own reader, where python3 has tensorboard (not on CI; V100_PYTHON picks the
-- interpreter): tools/read_events.py reads the Logger's event file and checks each scalar
-- against the JSON line of the same step.
T.test('TensorBoard reads the event file (skipped without python3 tensorboard)', function()
  local py = os.getenv('V100_PYTHON') or 'python3'
  if not os.execute(py .. ' -c "import tensorboard" >/dev/null 2>&1') then
    print('  (python3 without tensorboard: skipped)')
    return
  end
  local dir = root .. '/tb'
  local lg = log.Logger{dir = dir, rank = 0}
  for s = 1, 4 do lg:log(s, {loss = 1 / s, lr = 0.1 * s, note = 'x'}, {split = 'train'}) end
  lg:log(4, {top1 = 0.5, top5 = 0.875, nan = 0 / 0}, {split = 'val'})
  lg:close()
  local p = assert(io.popen(py .. " tools/read_events.py '" .. dir .. "' --jsonl '" .. dir .. "/metrics.jsonl' 2>&1"))
  local out = p:read('a')
  T.ok(p:close(), out)
  T.ok(out:find('11 match, 0 mismatch', 1, true), out)
  T.ok(out:find('4\tval/top5\t0.875'), out)
end)

os.execute("rm -rf '" .. root .. "'")
T.run()
