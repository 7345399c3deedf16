-- tests/lua/test_checkpoint_trust.lua: what a checkpoint folder may hold besides our checkpoints,
-- and what a meta.json may say (issue 27). keep = N removes only checkpoints this program wrote (a
-- meta.json of ours listing every file), never a user's folder named epoch<E>-step<S>; a save does
-- not replace such a folder either. Every field of meta.json and of the optimizer's metadata is
-- checked at load with the rules the save applies, and the error names the file and the field.
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local ckpt = require 'v100.checkpoint'
local fs = require('v100.core')._ckpt
local vio = v100.io
local T = require 'testlib'

local ROOT = T.tmpdir()
local n = 0
local function fresh_dir()
  n = n + 1
  return ROOT .. '/d' .. n
end
local function exists(p) return vio.exists(p) end

local function model_and_opt()
  v100.manual_seed(1)
  local m = nn.Linear(3, 2)
  local opt = optim.SGD(m:parameters(), { lr = 0.1, momentum = 0.9 })
  m(v100.randn({ 4, 3 })):sum():backward()
  opt:step()
  return m, opt
end

T.test('keep = N removes only our checkpoints, never a user folder named like one', function()
  local dir = fresh_dir()
  local m, opt = model_and_opt()
  vio.makedirs(dir)
  -- a user's folder without meta.json, one with a meta.json of something else, and a real
  -- checkpoint to which the user added a file of their own
  vio.makedirs(dir .. '/epoch0-step1')
  T.write_file(dir .. '/epoch0-step1/notes.txt', 'my notes\n')
  vio.makedirs(dir .. '/epoch0-step2')
  T.write_file(dir .. '/epoch0-step2/meta.json', '{"hello": 1}\n')
  T.write_file(dir .. '/epoch0-step2/data.bin', 'x')
  local p3 = ckpt.save(dir, { model = m, optimizer = opt, step = 3 })
  T.write_file(p3 .. '/README', 'the run I will write about\n')
  for step = 4, 7 do ckpt.save(dir, { model = m, optimizer = opt, step = step, keep = 2 }) end
  T.eq(T.read_file(dir .. '/epoch0-step1/notes.txt'), 'my notes\n', 'a folder without meta.json stays')
  T.ok(exists(dir .. '/epoch0-step2/data.bin'), 'a folder with a foreign meta.json stays')
  T.ok(exists(p3 .. '/README'), 'a checkpoint holding a file it does not list stays')
  T.ok(not exists(dir .. '/epoch0-step4') and not exists(dir .. '/epoch0-step5'), 'our old checkpoints go')
  T.ok(exists(dir .. '/epoch0-step6/meta.json') and exists(dir .. '/epoch0-step7/meta.json'), 'the newest two stay')
end)

T.test("a save does not replace a user's folder under the checkpoint's name", function()
  local dir = fresh_dir()
  local m, opt = model_and_opt()
  vio.makedirs(dir .. '/epoch0-step5')
  T.write_file(dir .. '/epoch0-step5/notes.txt', 'mine\n')
  T.raises(function() ckpt.save(dir, { model = m, optimizer = opt, step = 5 }) end,
    { dir .. '/epoch0-step5', 'is not a checkpoint this program wrote', 'not replacing it' })
  T.eq(T.read_file(dir .. '/epoch0-step5/notes.txt'), 'mine\n')
  -- our own checkpoint of that name is replaced as before
  ckpt.save(dir, { model = m, optimizer = opt, step = 6 })
  ckpt.save(dir, { model = m, optimizer = opt, step = 6 })
  T.eq(ckpt.latest(dir), dir .. '/epoch0-step6')
end)

-- A saved checkpoint whose meta.json (or training metadata) is edited by f(meta).
local function tampered(f)
  local dir = fresh_dir()
  local m, opt = model_and_opt()
  local p = ckpt.save(dir, { model = m, optimizer = opt, epoch = 1, step = 10,
    state = { loader = { epoch = 2, batch = 3, samples = 12, world = 1 } } })
  local mp = p .. '/meta.json'
  local meta = vio.json_decode(T.read_file(mp))
  f(meta)
  T.write_file(mp, vio.json_encode(meta, { int_keys = true, nonfinite = 'null' }))
  return p, mp
end

T.test('meta.json: every field is checked at load with the save rules, naming file and field', function()
  local cases = {
    { function(x) x.step = -100000 end, 'field "step" must be an integer >= 0, got -100000' },
    { function(x) x.step = 2.5 end, 'field "step" must be an integer >= 0, got 2.5' },
    { function(x) x.step = 'ten' end, 'field "step"' },
    { function(x) x.epoch = -1 end, 'field "epoch" must be an integer >= 0' },
    { function(x) x.version = 1.5 end, 'field "version" must be a whole number >= 1, got 1.5' },
    { function(x) x.state.loader.batch = 1.5 end, 'field "state.loader.batch" must be an integer >= 0, got 1.5' },
    { function(x) x.state.loader.batch = -3 end, 'field "state.loader.batch" must be an integer >= 0' },
    { function(x) x.state.loader.epoch = 0 end, 'field "state.loader.epoch" must be an integer >= 1' },
    { function(x) x.state.loader.world = 0 end, 'field "state.loader.world" must be an integer >= 1' },
    { function(x) x.state.loader = 7 end, 'field "state.loader" must be an object' },
    { function(x) x.state = 'x' end, 'field "state" must be an object' },
    { function(x) x.rng.offset = -1 end, 'field "rng.offset" must be an integer >= 0' },
    { function(x) x.rng.seed = 0.5 end, 'field "rng.seed" must be an integer' },
    { function(x) x.world_size = 0 end, 'field "world_size" must be an integer >= 1' },
    { function(x) x.world_size = 2 end, 'field "rng_ranks" has 1 entries for world_size 2' },
    { function(x) x.files = { 'model.safetensors', '../../etc/passwd' } end, 'field "files" entry 2 is not a plain file name' },
    { function(x) x.files = 'model.safetensors' end, 'field "files" must be a list' },
    { function(x) x.scaler = 'yes' end, 'field "scaler" must be true or false' },
  }
  for i, c in ipairs(cases) do
    local _, mp = tampered(c[1])
    T.raises(function() ckpt.load(mp:match('^(.*)/meta.json$')) end, { 'checkpoint.load: ' .. mp .. ': ', c[2] }, 'case ' .. i)
  end
  -- an untouched one loads, and a resume position of 0 batches is fine
  local p = tampered(function(x) x.state.loader.batch = 0 end)
  local c = ckpt.load(p)
  T.eq(c.step, 10)
  T.eq(c.state.loader.batch, 0)
  -- the save applies the same rules
  local m, opt = model_and_opt()
  T.raises(function() ckpt.save(fresh_dir(), { model = m, optimizer = opt, state = { loader = { batch = 1.5 } } }) end,
    'field "state.loader.batch" must be an integer >= 0, got 1.5')
end)

T.test("the optimizer's hyperparameters in a checkpoint are checked at load (momentum 1e308 trained to NaN)", function()
  local function with_group(f)
    local dir = fresh_dir()
    local m, opt = model_and_opt()
    local p = ckpt.save(dir, { model = m, optimizer = opt, step = 1 })
    local file = p .. '/training.safetensors'
    local tr, tmeta = v100.load_safetensors(file)
    local o = vio.json_decode(tmeta.optimizer)
    f(o.param_groups[1], o)
    tmeta.optimizer = vio.json_encode(o, { int_keys = true, nonfinite = 'null' })
    v100.save_safetensors(file, tr, tmeta)
    return p, file
  end
  local cases = {
    { function(g) g.momentum = 1e308 end, 'momentum must be in [0, 1), got 1e+308' },
    { function(g) g.momentum = 1 end, 'momentum must be in [0, 1)' },
    { function(g) g.lr = -10.4 end, 'lr must be >= 0, got -10.4' },
    { function(g) g.lr = nil end, 'lr is required' },
    { function(g) g.weight_decay = -1 end, 'weight_decay must be >= 0' },
    { function(g) g.dampening = 2 end, 'dampening must be in [0, 1]' },
    { function(g) g.nesterov = 'yes' end, 'nesterov must be a boolean' },
  }
  for i, c in ipairs(cases) do
    local p, file = with_group(c[1])
    T.raises(function() ckpt.load(p) end,
      { 'checkpoint.load: ' .. file .. ': metadata "optimizer" param_groups[1]: ', c[2] }, 'case ' .. i)
  end
  -- load_state_dict and the constructor share the rules; a valid state changes nothing on failure
  local m, opt = model_and_opt()
  local sd = opt:state_dict()
  sd.param_groups[1].momentum = 5
  T.raises(function() opt:load_state_dict(sd) end, 'load_state_dict: group 1: momentum must be in [0, 1), got 5')
  T.eq(opt.param_groups[1].momentum, 0.9, 'the optimizer is untouched')
  sd = opt:state_dict()
  for _, e in pairs(sd.state) do e.step = -2 end
  T.raises(function() opt:load_state_dict(sd) end, 'must be an integer >= 0, got -2')
  T.raises(function() optim.SGD(m:parameters(), { lr = 0.1, momentum = 1e308 }) end, 'momentum must be in [0, 1)')
  T.raises(function() optim.AdamW(m:parameters(), { lr = math.huge }) end, 'lr must be a finite number, got inf')
  -- a schedule or a user that set a NaN lr cannot make a checkpoint load would refuse
  opt.param_groups[1].lr = 0 / 0
  T.raises(function() ckpt.save(fresh_dir(), { model = m, optimizer = opt }) end, 'lr must be')
end)

T.run()
fs.remove_tree(ROOT)
