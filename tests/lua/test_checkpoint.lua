-- tests/lua/test_checkpoint.lua: v100.checkpoint on the CPU: a bitwise save/load round trip of a
-- ResNet with SGD momentum and an AMP scaler (and a half model with f32 masters), the resume
-- property (3 steps, save, 3 steps == load + 3 steps, dropout and data drawn from v100's
-- generator), torchvision's names and dtypes against tests/data/resnet18_ref.safetensors.gz,
-- load_pretrained, interrupted saves (an injected failure after each step, and SIGKILL of a
-- child during saves of a large model), keep=N pruning, and the errors of bad files. The
-- JSON of checkpoints (v100.io.json_encode/json_decode with the checkpoint's options, and the
-- meta.json of a checkpoint written before the codecs were merged) first.
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local resnet = require 'v100.models.resnet'
local ckpt = require 'v100.checkpoint'
local fs = require('v100.core')._ckpt
local vio = v100.io
local T = require 'testlib'

local here = debug.getinfo(1, 'S').source:match('^@(.*[/\\])') or './'
local REF = here .. '../data/resnet18_ref.safetensors.gz'
local ROOT = T.tmpdir()
local ndirs = 0
local function fresh_dir()
  ndirs = ndirs + 1
  return ROOT .. '/d' .. ndirs
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local write_file = T.write_file

local function tensors_eq(a, b, what)
  local na = 0
  for k, t in pairs(a) do
    na = na + 1
    T.ok(b[k] ~= nil, what .. ': ' .. k .. ' present in both')
    T.eq(b[k].dtype, t.dtype, what .. ': dtype of ' .. k)
    T.tensor_eq(b[k], t, what .. ': ' .. k)
  end
  local nb = 0
  for _ in pairs(b) do nb = nb + 1 end
  T.eq(nb, na, what .. ': as many tensors')
end

T.test('JSON: exact numbers, 64-bit integers, sorted keys, clear errors', function()
  local v = { lr = 0.1, betas = { 0.9, 0.999 }, seed = (1 << 62) + 12345, neg = -(1 << 60), n = 3, on = true, s = 'x"y',
    e = {}, [7] = 'seven' }
  local CK = { nonfinite = 'error', int_keys = true } -- scripts/v100/checkpoint.lua's options
  local text = vio.json_encode(v, CK)
  T.eq(text:sub(1, 12), '{"7":"seven"', 'keys in order')
  local w = vio.json_decode(text)
  T.eq(w.lr, 0.1)
  T.eq(w.betas[2], 0.999)
  T.eq(w.seed, (1 << 62) + 12345, 'an integer beyond 2^53 is exact')
  T.eq(math.type(w.seed), 'integer')
  T.eq(w.neg, -(1 << 60))
  T.eq(math.type(w.n), 'integer')
  T.eq(w.on, true)
  T.eq(w.s, 'x"y')
  T.eq(w['7'], 'seven', 'integer keys come back as strings')
  T.eq(vio.json_encode(w, CK), text, 'the same text again')
  T.raises(function() vio.json_encode({ a = { b = print } }, CK) end, 'json_encode: a function has no JSON form at $.a.b')
  T.raises(function() vio.json_encode({ x = 0 / 0 }, CK) end, "json_encode: NaN has no JSON form (nonfinite = 'error') at $.x")
  T.raises(function() vio.json_encode({ x = { -math.huge } }, CK) end, 'json_encode: -inf has no JSON form')
  T.eq(vio.json_encode({ x = 0 / 0 }), '{"x":null}', "nonfinite = 'null' is the default (the logger's)")
  T.raises(function() vio.json_encode({ [7] = 1, ['7'] = 2 }, CK) end, 'the integer key 7 and the string key')
  T.raises(function() vio.json_encode({ [7] = 1 }) end, 'an integer key that does not make the table an array 1..n')
  T.raises(function() vio.json_encode(1, { nonfinite = 'zero' }) end, "opts.nonfinite must be 'null' or 'error'")
  T.raises(function() vio.json_encode(1, { prety = true }) end, "unknown option 'prety'")
  T.eq(vio.json_encode({ b = { 1 }, a = 1.0 }, { pretty = true }), '{\n\t"a":\t1.0,\n\t"b":\t[1]\n}', 'pretty: cJSON\'s form')
  local cyc = {}
  cyc.self = cyc
  T.raises(function() vio.json_encode(cyc, CK) end, 'nested deeper than')
  T.raises(function() vio.json_decode('{"a": [1, 2', 'meta.json') end, 'json_decode: meta.json: invalid JSON')
  T.raises(function() vio.json_decode('', 'meta.json') end, 'json_decode: meta.json: the input is empty')
  T.raises(function() vio.json_decode('{"__int64__": "1e3"}') end, 'is not a 64-bit integer')
end)

-- What the checkpoint codec of bindings/l_ckpt.c wrote (cJSON's pretty form: every integer
-- beyond 2^53 as {"__int64__": "<decimal>"}, whole floats without a '.') still reads back.
T.test('JSON: a meta.json written before the codecs were merged', function()
  local old = '{\n\t"epoch":\t1,\n\t"files":\t["model.safetensors", "training.safetensors"],\n' ..
    '\t"rng":\t{\n\t\t"offset":\t6,\n\t\t"seed":\t5\n\t},\n\t"state":\t{\n\t\t"big":\t{\n' ..
    '\t\t\t"__int64__":\t"4611686018427400249"\n\t\t},\n\t\t"list":\t[1, 2, 3],\n\t\t"lr":\t0.1,\n' ..
    '\t\t"neg":\t{\n\t\t\t"__int64__":\t"-1152921504606846976"\n\t\t},\n\t\t"whole":\t2\n\t},\n' ..
    '\t"version":\t1\n}\n'
  local m = vio.json_decode(old, 'meta.json')
  T.eq(m.state.big, (1 << 62) + 12345)
  T.eq(math.type(m.state.big), 'integer')
  T.eq(m.state.neg, -(1 << 60))
  T.eq(m.state.list, { 1, 2, 3 })
  T.eq(m.state.lr, 0.1)
  T.eq(m.state.whole, 2)
  T.eq(math.type(m.version), 'integer')
  T.eq(m.rng, { offset = 6, seed = 5 })
  -- written now: the same values, integers as their digits
  local again = vio.json_decode(vio.json_encode(m, { pretty = true, nonfinite = 'error' }))
  T.ok(T.deep_eq(again, m), 'the same table again')
  T.ok(vio.json_encode(m.state):find('"big":4611686018427400249', 1, true), 'an int64 as its digits')
end)

-- A small ResNet (resnet18 on 3x16x16), SGD with momentum and a scaler, after two scaled steps
-- (the second one overflowing: the scaler's counters move).
local function trained_resnet()
  v100.manual_seed(11)
  local m = resnet.resnet18 { classes = 10 }
  local opt = optim.SGD(m:parameters(), { lr = 0.05, momentum = 0.9, weight_decay = 1e-4 })
  local scaler = amp.Scaler { init_scale = 1024, growth_interval = 3 }
  local x, y = v100.randn({ 2, 3, 16, 16 }), v100.tensor({ 3, 7 }, { dtype = 'i64' })
  for i = 1, 2 do
    opt:zero_grad()
    local loss = nn.F.cross_entropy(m(x), y)
    if i == 2 then loss = loss * 1e38 end -- overflows when scaled: a skipped step
    scaler:backward(loss)
    scaler:step(opt)
    scaler:update()
  end
  return m, opt, scaler
end

local function momentum_of(opt)
  local out = {}
  for i, p in ipairs(opt.param_groups[1].params) do
    local st = opt.state[p]
    if st and st.momentum_buffer then out['m' .. i] = st.momentum_buffer end
  end
  return out
end

T.test('round trip: ResNet + SGD momentum + AMP scaler, bitwise', function()
  local m, opt, scaler = trained_resnet()
  T.eq(scaler:counters().skipped_steps, 1, 'the second step was skipped')
  local dir = fresh_dir()
  local state = { loader = { epoch = 2, batch = 17, samples = 544 }, rng = { 5, 6 }, args = { arch = 'resnet18', lr = 0.05 } }
  local path = ckpt.save(dir, { model = m, optimizer = opt, scaler = scaler, epoch = 2, step = 17, state = state })
  T.eq(path, dir .. '/epoch2-step17')
  T.eq(ckpt.latest(dir), path)
  local names = fs.list_dir(path)
  T.eq(table.concat(names, ' '), 'meta.json model.safetensors training.safetensors', 'the files, nothing else')

  v100.manual_seed(99) -- other initial weights
  local m2 = resnet.resnet18 { classes = 10 }
  local opt2 = optim.SGD(m2:parameters(), { lr = 1, momentum = 0.5 })
  local scaler2 = amp.Scaler()
  local c = ckpt.load(dir) -- the directory: follows latest
  T.eq(c.path, path)
  local e, s, st = ckpt.restore(c, { model = m2, optimizer = opt2, scaler = scaler2 })
  T.eq(e, 2)
  T.eq(s, 17)
  T.ok(T.deep_eq(st, state), 'the caller state comes back')
  tensors_eq(m:state_dict(), m2:state_dict(), 'model')
  tensors_eq(momentum_of(opt), momentum_of(opt2), 'momentum')
  T.eq(opt2.param_groups[1].lr, 0.05)
  T.eq(opt2.param_groups[1].momentum, 0.9)
  T.eq(opt2.param_groups[1].weight_decay, 1e-4)
  T.ok(T.deep_eq(scaler2:counters(), scaler:counters()), 'scaler counters')
  T.eq(scaler2.growth_interval, 3)
  local meta = vio.json_decode(T.read_file(path .. '/meta.json'))
  T.eq(meta.format, 'v100lua-checkpoint')
  T.eq(meta.world_size, 1)
  T.eq(meta.optimizer, opt.name)
end)

T.test('a half model with f32 masters: saved as f32, restored bitwise', function()
  v100.manual_seed(3)
  local function make()
    local m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    m:half()
    return m, optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9, master_weights = true })
  end
  local m, opt = make()
  local x = v100.randn({ 4, 8 }):half()
  for _ = 1, 2 do
    opt:zero_grad()
    m(x):float():sum():backward()
    opt:step()
  end
  local dir = fresh_dir()
  local path = ckpt.save(dir, { model = m, optimizer = opt, epoch = 0, step = 2 })
  local file = v100.load_safetensors(path .. '/model.safetensors')
  T.eq(file['0.weight'].dtype, 'f32', 'a half weight is stored as f32')
  T.eq(file['1.num_batches_tracked'].dtype, 'i64')
  local tr = v100.load_safetensors(path .. '/training.safetensors')
  T.eq(tr['optimizer.state.1.master'].dtype, 'f32', 'the masters')
  local m2, opt2 = make()
  ckpt.restore(ckpt.load(path), { model = m2, optimizer = opt2 })
  tensors_eq(m:state_dict(), m2:state_dict(), 'half model')
  local nm = 0
  for i, p in ipairs(opt.param_groups[1].params) do
    if p.dtype == 'f16' then -- BatchNorm's parameters stay f32, without masters
      nm = nm + 1
      T.tensor_eq(opt2.state[opt2.param_groups[1].params[i]].master, opt.state[p].master, 'master ' .. i)
    end
  end
  T.eq(nm, 4, 'the Linear layers have masters')
end)

-- An MLP with dropout on data drawn from v100's generator: every step consumes random numbers.
local function resume_setup()
  local m = nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Dropout(0.3), nn.Linear(12, 3))
  local opt = optim.AdamW(m:parameters(), { lr = 0.01, weight_decay = 0.01 })
  return m, opt, amp.Scaler { init_scale = 256, growth_interval = 2 }
end
local function resume_steps(m, opt, scaler, n)
  local losses = {}
  for _ = 1, n do
    local x, y = v100.randn({ 5, 6 }), v100.randn({ 5, 3 })
    opt:zero_grad()
    local loss = nn.F.mse_loss(m(x), y)
    losses[#losses + 1] = loss:item()
    scaler:backward(loss)
    scaler:step(opt)
    scaler:update()
  end
  return losses
end

T.test('resume: 3 steps, save, 3 steps == load + 3 steps (losses and parameters identical)', function()
  v100.manual_seed(2024)
  local m, opt, scaler = resume_setup()
  resume_steps(m, opt, scaler, 3)
  local dir = fresh_dir()
  ckpt.save(dir, { model = m, optimizer = opt, scaler = scaler, epoch = 0, step = 3 })
  local want = resume_steps(m, opt, scaler, 3)

  v100.manual_seed(1) -- another generator state and other weights: the checkpoint restores both
  local m2, opt2, scaler2 = resume_setup()
  local _, step = ckpt.restore(ckpt.load(dir), { model = m2, optimizer = opt2, scaler = scaler2 })
  T.eq(step, 3)
  local got = resume_steps(m2, opt2, scaler2, 3)
  for i = 1, 3 do T.eq(got[i], want[i], 'loss ' .. i) end
  tensors_eq(m:state_dict(), m2:state_dict(), 'parameters after resuming')
  T.eq(scaler2:get_scale(), scaler:get_scale(), 'scale')
end)

T.test("torchvision's names, shapes and dtypes (resnet18 reference file)", function()
  local ref = v100.load_safetensors(REF)
  local m = resnet.resnet18 { classes = 10 }
  local path = ckpt.save(fresh_dir(), { model = m })
  local got = v100.load_safetensors(path .. '/model.safetensors')
  local n = 0
  for k, t in pairs(ref) do
    if not k:match('^__.*__$') then
      n = n + 1
      T.ok(got[k] ~= nil, 'saved: ' .. k)
      T.eq(got[k].dtype, t.dtype, 'dtype of ' .. k)
      T.ok(T.deep_eq(got[k].shape, t.shape), 'shape of ' .. k)
    end
  end
  local ng = 0
  for _ in pairs(got) do ng = ng + 1 end
  T.eq(ng, n, 'no other names')
  T.eq(got['bn1.num_batches_tracked'].dtype, 'i64')
  T.ok(got['layer1.0.bn1.running_var'] ~= nil, 'running stats included')
end)

T.test('load_pretrained: torchvision weights give the reference outputs; module. stripped; exclude', function()
  local ref = v100.load_safetensors(REF)
  local m = resnet.resnet18 { classes = 10 }
  local r = ckpt.load_pretrained(m, REF)
  T.eq(#r.missing_keys, 0)
  m:eval()
  local y = v100.no_grad(function() return m(ref.__input__) end)
  local scale = ref.__output__:abs():max():item()
  T.tensor_close(y, ref.__output__, 1e-5, 1e-5 * scale, 'logits')

  -- a DataParallel/DDP export: every name under 'module.'
  local prefixed = {}
  for k, t in pairs(ref) do if not k:match('^__') then prefixed['module.' .. k] = t end end
  local file = ROOT .. '/ddp_export.safetensors'
  v100.save_safetensors(file, prefixed)
  local m2 = resnet.resnet18 { classes = 10 }
  ckpt.load_pretrained(m2, file)
  m2:eval()
  T.tensor_eq(v100.no_grad(function() return m2(ref.__input__) end), y, 'the same model')

  -- a new classifier: fc excluded, everything else loaded, strict otherwise
  local m3 = resnet.resnet18 { classes = 5 }
  local fc_before = m3.fc.weight:clone()
  T.raises(function() ckpt.load_pretrained(m3, REF) end, { REF, 'fc.weight (checkpoint 10x512, model 5x512)' })
  ckpt.load_pretrained(m3, REF, { exclude = { '^fc%.' } })
  T.tensor_eq(m3.fc.weight, fc_before, 'fc untouched')
  T.tensor_eq(m3.conv1.weight, ref['conv1.weight'], 'conv1 loaded')
  T.raises(function() ckpt.load_pretrained(resnet.resnet34 { classes = 10 }, REF) end,
    { 'checkpoint.load_pretrained: ' .. REF, 'missing keys: layer1.2.bn1.bias' })
  T.raises(function() ckpt.load_pretrained(m3, ROOT .. '/absent.safetensors') end, 'absent.safetensors')
end)

-- A child v100lua that saves `model` (a Linear of d x d, weights = step) into dir at the steps
-- given, with env prefixed.
local CHILD = [[
local v100, nn, optim, ckpt = require 'v100', require 'v100.nn', require 'v100.optim', require 'v100.checkpoint'
local dir, d, from, to = arg[1], tonumber(arg[2]), tonumber(arg[3]), tonumber(arg[4])
local m = nn.Linear(d, d)
local opt = optim.SGD(m:parameters(), {lr = 0.1, momentum = 0.9})
for s = from, to do
  v100.no_grad(function() m.weight:fill_(s); m.bias:fill_(s) end)
  m.weight.grad = v100.ones({d, d}); m.bias.grad = v100.ones({d})
  opt:step()
  v100.no_grad(function() m.weight:fill_(s); m.bias:fill_(s) end)
  ckpt.save(dir, {model = m, optimizer = opt, epoch = 1, step = s, state = {s = s}, keep = 2})
  io.stdout:write('saved ', s, '\n'); io.stdout:flush()
end
]]
local child_file = ROOT .. '/child.lua'
write_file(child_file, CHILD)
local function run_child(env, dir, d, from, to)
  local p = assert(io.popen(string.format('%s %s %s %s %d %d %d 2>&1', env, q(T.binary()), q(child_file), q(dir), d, from, to)))
  local out = p:read('a')
  local ok = p:close()
  return out, ok
end

-- The checkpoint in dir is loadable and self-consistent: weights equal its step.
local function check_consistent(dir, want_step)
  local c = ckpt.load(dir)
  if want_step then T.eq(c.step, want_step, 'latest step') end
  T.eq(c.state.s, c.step)
  T.eq(c.model.weight:max():item(), c.step)
  T.eq(c.model.weight:min():item(), c.step)
  local m = nn.Linear(c.model.weight.shape[1], c.model.weight.shape[1])
  local opt = optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
  ckpt.restore(c, { model = m, optimizer = opt })
  T.eq(m.bias:max():item(), c.step)
  return c
end

local function hidden_entries(dir)
  local n = 0
  for _, e in ipairs(fs.list_dir(dir)) do if e:sub(1, 1) == '.' then n = n + 1 end end
  return n
end

T.test('an injected failure after each step keeps latest and the previous checkpoint', function()
  for n = 1, 5 do
    local dir = fresh_dir()
    local out, ok = run_child('', dir, 4, 1, 1)
    T.ok(ok, out)
    out, ok = run_child('V100LUA_CHECKPOINT_FAIL_AFTER=' .. n, dir, 4, 2, 2)
    T.ok(not ok, 'the second save fails')
    T.ok(out:find('injected failure after ' .. n .. ' steps', 1, true) ~= nil, out)
    -- before `latest` moved (n < 5) the previous checkpoint is the one loaded
    check_consistent(dir, n < 5 and 1 or 2)
    T.eq(hidden_entries(dir), 0, 'no hidden temporaries after the error (n = ' .. n .. ')')
    local have_new = fs.is_dir(dir .. '/epoch1-step2')
    T.eq(have_new, n >= 4, 'the new checkpoint is in place only after the rename (n = ' .. n .. ')')
    if have_new then check_consistent(dir .. '/epoch1-step2', 2) end
  end
end)

T.test('SIGKILL during saves of a large model: latest and every named checkpoint stay loadable', function()
  local dir = fresh_dir()
  local d = 1536 -- 9 MB of weights, 18 MB a checkpoint
  -- each round: a child saving steps base, base + 1, ... (keep = 2: pruning too), killed
  -- `delay` seconds after a save in progress (a hidden directory) was seen
  for round, delay in ipairs { 0, 0.01, 0.03, 0.07 } do
    local base = 1000 * round
    local p = assert(io.popen(string.format("sh -c 'echo $$; exec %s %s %s %d %d %d' 2>&1", q(T.binary()), q(child_file),
      q(dir), d, base, base + 999)))
    local pid = math.tointeger(tonumber(p:read('l')))
    T.ok(pid ~= nil, 'the child pid')
    T.eq(p:read('l'), 'saved ' .. base, 'the first save of round ' .. round)
    local seen = false
    local t0 = v100.io.time()
    while v100.io.time() - t0 < 30 do
      if hidden_entries(dir) > 0 then seen = true break end
    end
    t0 = v100.io.time()
    while v100.io.time() - t0 < delay do end
    os.execute('kill -9 ' .. pid)
    p:read('a')
    p:close()
    T.ok(seen, 'caught a save in progress')
    local c = check_consistent(dir)
    T.ok(c.step >= base, 'latest is one of this round')
    for _, e in ipairs(fs.list_dir(dir)) do
      if e:match('^epoch') then check_consistent(dir .. '/' .. e) end
    end
  end
  -- the next save removes what the killed processes left
  local out, ok = run_child('', dir, 4, 9000, 9000)
  T.ok(ok, out)
  T.eq(hidden_entries(dir), 0, 'the stale temporary directories are gone')
  check_consistent(dir, 9000)
end)

T.test('keep = N removes the oldest after the pointer moved', function()
  local dir = fresh_dir()
  local m = nn.Linear(2, 2)
  for s = 1, 5 do ckpt.save(dir, { model = m, epoch = s // 3, step = s, keep = 2 }) end
  T.eq(table.concat(fs.list_dir(dir), ' '), 'epoch1-step4 epoch1-step5 latest')
  T.eq(ckpt.latest(dir), dir .. '/epoch1-step5')
  ckpt.save(dir, { model = m, epoch = 1, step = 5, keep = 1 }) -- the same name again: replaced
  T.eq(table.concat(fs.list_dir(dir), ' '), 'epoch1-step5 latest')
  T.raises(function() ckpt.save(dir, { model = m, keep = 0 }) end, 'keep must be an integer >= 1')
  T.raises(function() ckpt.save(dir, { model = m, epoch = -1 }) end, 'epoch must be an integer >= 0')
  T.raises(function() ckpt.save(dir, { model = m, stepp = 1 }) end, "unknown option 'stepp'")
  T.eq(ckpt.latest(ROOT .. '/nothing-here'), nil, 'no pointer: nil')
end)

T.test('files = {...}: extra files inside the checkpoint (config.json beside the weights), listed in meta.json', function()
  local dir = fresh_dir()
  local m = nn.Linear(2, 2)
  local path = ckpt.save(dir, { model = m, step = 7, files = { ['config.json'] = '{"a": 1}\n', ['vocab.txt'] = 'x\ny\n' } })
  T.eq(T.read_file(path .. '/config.json'), '{"a": 1}\n')
  T.eq(T.read_file(path .. '/vocab.txt'), 'x\ny\n')
  local c = ckpt.load(dir)
  T.eq(table.concat(c.meta.files, ' '), 'model.safetensors training.safetensors config.json vocab.txt')
  T.raises(function() ckpt.save(dir, { model = m, files = { ['../x'] = 'a' } }) end,
    "save: files: '../x' is not a plain file name")
  T.raises(function() ckpt.save(dir, { model = m, files = { ['meta.json'] = 'a' } }) end,
    "save: files: 'meta.json' is not a plain file name")
  T.raises(function() ckpt.save(dir, { model = m, files = { ['a.txt'] = 3 } }) end, 'save: files: a.txt must be a string, got number')
  os.remove(path .. '/vocab.txt')
  T.raises(function() ckpt.load(dir) end, 'lists vocab.txt, which is missing')
end)

T.test('bad files: the message names the file and what is wrong', function()
  local dir = fresh_dir()
  local m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
  local opt = optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
  m(v100.randn({ 2, 3 })):sum():backward()
  opt:step()
  local path = ckpt.save(dir, { model = m, optimizer = opt, epoch = 1, step = 1 })

  T.raises(function() ckpt.load(ROOT) end, { ROOT, 'not a checkpoint (no meta.json)' })
  T.raises(function() ckpt.load(ROOT .. '/child.lua') end, 'not a directory')
  -- shape mismatch and missing tensors of the model
  local c = ckpt.load(path)
  T.raises(function() ckpt.restore(c, { model = nn.Sequential(nn.Linear(3, 5), nn.Linear(5, 2)) }) end,
    { path .. '/model.safetensors', "0.weight (checkpoint 4x3, model 5x3)" })
  T.raises(function() ckpt.restore(c, { model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2), nn.Linear(2, 2)) }) end,
    { path .. '/model.safetensors', 'missing keys: 2.bias, 2.weight' })
  T.raises(function() ckpt.restore(c, { optimizer = optim.AdamW(m:parameters(), {}) }) end,
    { path .. '/training.safetensors', 'holds the state of a sgd optimizer, this one is adamw' })
  T.raises(function() ckpt.restore(c, { scaler = amp.Scaler() }) end, 'holds no AMP scaler state')
  T.raises(function() ckpt.restore({}, {}) end, 'expected a checkpoint from checkpoint.load')

  -- a training file without one of its optimizer tensors
  local tr, tmeta = v100.load_safetensors(path .. '/training.safetensors')
  tr['optimizer.state.2.momentum_buffer'] = nil
  v100.save_safetensors(path .. '/training.safetensors', tr, tmeta)
  T.raises(function() ckpt.load(path) end, { path .. '/training.safetensors', 'missing tensor "optimizer.state.2.momentum_buffer"' })
  -- a truncated model file
  local bytes = io.open(path .. '/model.safetensors', 'rb'):read('a')
  write_file(path .. '/model.safetensors', bytes:sub(1, #bytes - 10))
  T.raises(function() ckpt.load(path) end, path .. '/model.safetensors')
  os.remove(path .. '/model.safetensors')
  T.raises(function() ckpt.load(path) end, 'lists model.safetensors, which is missing')
  -- meta.json: not JSON, another format
  write_file(path .. '/meta.json', '{"format": "v100lua-checkpoint", ')
  T.raises(function() ckpt.load(path) end, { path .. '/meta.json', 'invalid JSON' })
  write_file(path .. '/meta.json', '{"format": "something-else"}')
  T.raises(function() ckpt.load(dir) end, { path .. '/meta.json', 'not a v100lua checkpoint' })
  -- the pointer
  write_file(dir .. '/latest', 'epoch9-step9\n')
  T.raises(function() ckpt.latest(dir) end, { dir .. '/latest', 'epoch9-step9, which is not a complete checkpoint' })
  write_file(dir .. '/latest', '../../etc\n')
  T.raises(function() ckpt.load(dir) end, 'not a checkpoint pointer')
end)

fs.remove_tree(ROOT)
T.test('loading a checkpoint never runs code: Lua in its metadata and state stays a string', function()
  -- Checkpoints are safetensors plus JSON: nothing in them is code. A checkpoint whose user
  -- state, metadata and tensor names hold Lua chunks loads them as strings, and none runs.
  local dir = fresh_dir()
  _G.CKPT_CODE_RAN = nil
  local chunk = 'CKPT_CODE_RAN = true; os.exit(7)'
  local m = nn.Linear(2, 2)
  local p = ckpt.save(dir, { model = m, step = 1, state = { note = chunk, [chunk] = chunk },
    files = { ['notes.txt'] = 'return ' .. chunk } })
  v100.save_safetensors(p .. '/model.safetensors', { weight = m.weight, bias = m.bias },
    { format = 'pt', code = chunk, ['return os.exit(7)'] = 'dofile("/etc/passwd")' })
  local c = ckpt.load(p)
  T.eq(c.state.note, chunk, 'the state is data')
  T.eq(c.state[chunk], chunk)
  local m2 = nn.Linear(2, 2)
  ckpt.restore(c, { model = m2 })
  T.eq(_G.CKPT_CODE_RAN, nil, 'nothing in the checkpoint ran')
  -- and the loaders contain no way to run what they read
  for _, f in ipairs { 'scripts/v100/checkpoint.lua', 'scripts/v100/serial.lua', 'scripts/v100/models/bert_hf.lua', 'ext/text/lua/v100/bert_data.lua' } do
    -- the global functions, not methods or fields named so (M.load, ds:load)
    local src = ' ' .. T.read_file(here .. '../../' .. f):gsub('%-%-[^\n]*', '')
    for _, fn in ipairs { 'load%s*%(', 'loadstring', 'loadfile', 'dofile' } do
      T.ok(not src:find('[^%w_%.:]' .. fn), f .. ' calls ' .. fn)
    end
  end
end)

T.run()
