-- v100.checkpoint: training checkpoints (weights, optimizer, AMP scaler, RNG, data-loader position)
-- and pretrained torchvision weights.
--
--   local ckpt = require 'v100.checkpoint'
--   ckpt.save(dir, {model =, optimizer =, scaler =, epoch =, step =, state =, keep =, files =}) -> path
--   ckpt.latest(dir) -> path or nil;  ckpt.load(path_or_dir) -> c  (a dir follows its `latest`)
--   ckpt.restore(c, {model =, optimizer =, scaler =, rng = true}) -> c.epoch, c.step, c.state
--   ckpt.load_pretrained(model, file, {strict = true, exclude = {pattern, ...}}) -> {missing_keys, unexpected_keys}
--
-- A checkpoint is a directory dir/epoch<E>-step<S>/ holding
--   model.safetensors     the model's state_dict with its (torchvision) names; floating tensors
--                         as f32 (a half model is converted), integers as they are
--                         (num_batches_tracked i64): torchvision's load_state_dict takes it;
--   training.safetensors  optimizer tensors "optimizer.state.<i>.<momentum_buffer|exp_avg|
--                         exp_avg_sq|master>" (i numbers model:parameters() for ZeRO-1, the
--                         optimizer's parameters in group order otherwise) and "scaler.<key>"
--                         (amp.Scaler:state_dict()); metadata "optimizer" = the JSON of every
--                         non-tensor field (param_groups, steps, master_weights, rounding_seed);
--   <files>               the caller's extra files (files = {['config.json'] = text, ...}): with
--                         a BERT's config.json the folder is one transformers loads;
--   meta.json             format, epoch, step, state (the caller's table, when JSON holds it
--                         exactly), rng (v100.rng_state() at the save), world size, versions, the
--                         file list;
--   state.safetensors     the caller's state when JSON cannot hold it exactly (tensors, shared
--                         tables or cycles, integer or boolean keys, byte strings, inf/NaN):
--                         written by v100.save (scripts/v100/serial.lua), named by meta.json's
--                         "state_file" (then meta.json has no "state"); loaded by v100.load, its
--                         tensors on the CPU.
-- and dir/latest, one line naming the newest checkpoint.
--
-- Why it survives a crash at any point: the files are written into a hidden directory
-- dir/.epoch<E>-step<S>.v100tmp-<pid> (each file itself temp + fsync + rename), which is then
-- renamed to its final name (exchanged with an existing one of the same name, so that name is
-- never missing) and dir fsync'd; only then is `latest` replaced (atomically, durably), and only
-- after that are checkpoints beyond `keep` removed. A kill leaves at most a hidden directory,
-- removed by the next save once its process is gone; `latest` and the checkpoint it names stay
-- loadable. Pruning renames a checkpoint to a hidden name before removing it, for the same reason. V100LUA_CHECKPOINT_FAIL_AFTER=<n> raises after n of the five steps (model file,
-- training file, meta.json, the rename into place, latest) for tests.
--
-- Distributed: ckpt.save is collective when the world size is above 1 (every rank calls it):
-- a ZeRO-1 optimizer (dp:zero_optimizer) gathers its full_state_dict, so a checkpoint does not
-- depend on the rank count; only rank 0 writes; the others then learn from rank 0 whether the
-- save worked and raise if not. A dist.DataParallel model is saved under its inner module's
-- names. Every rank loads (ckpt.load reads files only) and restores its own model and
-- optimizer, ZeRO-1 taking its shard: N ranks' checkpoint loads on M ranks. Every rank's
-- generator state is saved; restore gives each rank its own when the rank count is the same,
-- rank 0's otherwise.
local v100 = require 'v100.base'
local core = require 'v100.core'
local errors = require 'v100.errors'
local dist = require 'v100.dist.comm'
local optim = require 'v100.optim'
local serial = require 'v100.serial'
local fs, cio = core._ckpt, core.io
-- meta.json and the training file's metadata: non-finite numbers raise instead of turning into
-- null, and a table with integer keys (the caller's state) is written as an object.
local JSON = { nonfinite = 'error', int_keys = true }
local JSON_PRETTY = { nonfinite = 'error', int_keys = true, pretty = true }

local M = {}

local FORMAT, VERSION = 'v100lua-checkpoint', 1
local MODEL, TRAINING, META, LATEST = 'model.safetensors', 'training.safetensors', 'meta.json', 'latest'
local STATE = 'state.safetensors'
local NAME_PATTERN = '^epoch(%d+)%-step(%d+)$'
local STATE_KEY = '^optimizer%.state%.(%d+)%.(.+)$'

local fail = errors.failer('checkpoint.', 2)

local join, read_file, exists = cio.join, cio.read_file, cio.exists

-- ---------------------------------------------------------------------------------------------
-- meta.json's rules: one validator, applied by save to the table it is about to write and by load
-- to the one it read, so that a value save would refuse (a negative step, a float batch) is
-- refused at load too, naming the file and the field, before anything trains with it (issue 27).
-- Fields older checkpoints lack (rng_ranks, world_size, ...) are optional; present, they are checked.

local FILE_NAME = '^[%w][%w%._%-]*$'
-- state.loader, when present, is the data loader's position (recipes/resnet50.lua, bert.lua):
-- the epoch to resume in (>= 1), the next batch in it and the samples before it (0-based, >= 0),
-- the rank count and micro-batch size it was written with (>= 1).
local LOADER_MIN = { epoch = 1, batch = 0, samples = 0, world = 1, micro = 1 }

local function check_meta(meta, op, file)
  local function bad(field, fmt, ...)
    error(string.format('checkpoint.%s: %s: field "%s" %s', op, file, field, string.format(fmt, ...)), 0)
  end
  local function int_at_least(field, v, lo, optional)
    if v == nil and optional then return end
    if math.type(v) ~= 'integer' or v < lo then bad(field, 'must be an integer >= %d, got %s', lo, tostring(v)) end
  end
  if type(meta) ~= 'table' then error(string.format('checkpoint.%s: %s: not a JSON object', op, file), 0) end
  if meta.format ~= FORMAT then
    error(string.format('checkpoint.%s: %s: not a v100lua checkpoint (format is %s, expected %s)', op, file, tostring(meta.format), FORMAT), 0)
  end
  -- 1.0 is version 1: another JSON tool (Python's json with a float, jq) may have rewritten the
  -- file. A fraction, a string or a version below 1 is no version at all, and said so.
  local version = type(meta.version) == 'number' and math.tointeger(meta.version)
  if not version or version < 1 then bad('version', 'must be a whole number >= 1, got %s', cio.json_encode(meta.version)) end
  meta.version = version
  if version > VERSION then
    error(string.format('checkpoint.%s: %s: checkpoint version %d is newer than this v100lua, which reads versions 1 to %d',
      op, file, version, VERSION), 0)
  end
  int_at_least('epoch', meta.epoch, 0)
  int_at_least('step', meta.step, 0)
  if type(meta.files) ~= 'table' then bad('files', 'must be a list of file names, got %s', type(meta.files)) end
  for i, f in ipairs(meta.files) do
    if type(f) ~= 'string' or not f:match(FILE_NAME) or f == META then bad('files', 'entry %d is not a plain file name: %s', i, tostring(f)) end
  end
  if meta.state ~= nil and type(meta.state) ~= 'table' then bad('state', 'must be an object, got %s', type(meta.state)) end
  if meta.state_file ~= nil then
    if meta.state_file ~= STATE then bad('state_file', 'must be %s, got %s', STATE, tostring(meta.state_file)) end
    if meta.state ~= nil then bad('state', 'must be absent when state_file is given') end
    local listed = false
    for _, f in ipairs(meta.files) do listed = listed or f == STATE end
    if not listed then bad('state_file', 'names %s, which the file list lacks', STATE) end
  end
  local ld = type(meta.state) == 'table' and rawget(meta.state, 'loader') or nil
  if ld ~= nil then
    if type(ld) ~= 'table' then bad('state.loader', 'must be an object, got %s', type(ld)) end
    for k, lo in pairs(LOADER_MIN) do int_at_least('state.loader.' .. k, ld[k], lo, true) end
  end
  local function rng(field, r)
    if type(r) ~= 'table' then bad(field, 'must be an object {seed, offset}, got %s', type(r)) end
    if math.type(r.seed) ~= 'integer' then bad(field .. '.seed', 'must be an integer, got %s', tostring(r.seed)) end
    int_at_least(field .. '.offset', r.offset, 0)
  end
  if meta.rng ~= nil then rng('rng', meta.rng) end
  int_at_least('world_size', meta.world_size, 1, true)
  if meta.rng_ranks ~= nil then
    if type(meta.rng_ranks) ~= 'table' then bad('rng_ranks', 'must be a list, got %s', type(meta.rng_ranks)) end
    if meta.world_size ~= nil and #meta.rng_ranks ~= meta.world_size then
      bad('rng_ranks', 'has %d entries for world_size %d', #meta.rng_ranks, meta.world_size)
    end
    for i, r in ipairs(meta.rng_ranks) do rng(string.format('rng_ranks[%d]', i), r) end
  end
  if meta.optimizer ~= nil and type(meta.optimizer) ~= 'string' then bad('optimizer', 'must be a name, got %s', type(meta.optimizer)) end
  if meta.scaler ~= nil and type(meta.scaler) ~= 'boolean' then bad('scaler', 'must be true or false, got %s', tostring(meta.scaler)) end
end
M.check_meta = check_meta

-- Whether path (named like a checkpoint) is one this module wrote: a meta.json of our format
-- whose file list names every entry in it (our own temporaries aside). --keep removes only those;
-- a user's folder named epoch<E>-step<S> is never removed nor replaced (issue 27).
local function is_ours(path)
  local text = read_file(join(path, META))
  if text == nil then return false, 'no ' .. META end
  local ok, meta = pcall(cio.json_decode, text, join(path, META))
  if not ok or type(meta) ~= 'table' or meta.format ~= FORMAT or type(meta.files) ~= 'table' then
    return false, META .. ' is not a v100lua checkpoint\'s'
  end
  local listed = { [META] = true }
  for _, f in ipairs(meta.files) do if type(f) == 'string' then listed[f] = true end end
  for _, n in ipairs(fs.list_dir(path)) do
    if not listed[n] and not n:match('^%..+%.v100tmp%-') then return false, n .. ' is not one of its files' end
  end
  return true
end

local function rank_world()
  if dist.is_initialized() then return dist.rank(), dist.size() end
  return 0, 1
end

-- The module behind a dist.DataParallel wrapper (it forwards fields, not the module's own
-- registries, so its state_dict would be empty).
local function unwrap(m)
  if type(m) == 'table' and rawget(m, 'module') ~= nil and rawget(m, 'buckets') ~= nil then return rawget(m, 'module') end
  return m
end

local function is_zero(opt) return rawget(opt, 'inner') ~= nil and type(opt.load_full_state_dict) == 'function' end

local function is_half(t) return t.dtype == 'f16' or t.dtype == 'bf16' end

-- ---------------------------------------------------------------------------------------------
-- save

-- The optimizer state dict as tensors (into `tensors`) and the JSON-able rest.
local function flatten_optimizer(sd, tensors)
  local rest = {}
  for k, v in pairs(sd) do if k ~= 'state' then rest[k] = v end end
  rest.state = {}
  for idx, e in pairs(sd.state) do
    local r = { tensors = {} }
    for k, v in pairs(e) do
      if v100.is_tensor(v) then
        tensors[string.format('optimizer.state.%d.%s', idx, k)] = v
        r.tensors[#r.tensors + 1] = k
      else
        r[k] = v
      end
    end
    table.sort(r.tensors)
    rest.state[tostring(idx)] = r
  end
  return rest
end

local function check_options(o)
  if type(o) ~= 'table' then fail('save: expected an options table, got %s', type(o)) end
  errors.check_opts('checkpoint.save', o, { 'model', 'optimizer', 'scaler', 'epoch', 'step', 'state', 'keep', 'files' }, 3)
  if o.files ~= nil then
    if type(o.files) ~= 'table' then fail('save: files must be a table of name = contents, got %s', type(o.files)) end
    for name, text in pairs(o.files) do
      if type(name) ~= 'string' or not name:match('^[%w][%w%._%-]*$') or name == MODEL or name == TRAINING or name == META
        or name == STATE then
        fail("save: files: '%s' is not a plain file name other than %s, %s, %s and %s", tostring(name), MODEL, TRAINING, STATE, META)
      end
      if type(text) ~= 'string' then fail('save: files: %s must be a string, got %s', name, type(text)) end
    end
  end
  local m = unwrap(o.model)
  if type(m) ~= 'table' or type(m.state_dict) ~= 'function' then fail('save: model must be an nn module, got %s', type(o.model)) end
  for _, k in ipairs { 'epoch', 'step' } do
    local v = o[k] or 0
    if math.type(v) ~= 'integer' or v < 0 then fail('save: %s must be an integer >= 0, got %s', k, tostring(o[k])) end
  end
  if o.keep ~= nil and (math.type(o.keep) ~= 'integer' or o.keep < 1) then
    fail('save: keep must be an integer >= 1 (or nil: keep all), got %s', tostring(o.keep))
  end
  if o.state ~= nil and type(o.state) ~= 'table' then fail('save: state must be a table, got %s', type(o.state)) end
  return m
end

-- Whether b (JSON read back) is exactly a: the same types (integer and float apart), values and
-- keys, no table reached twice (JSON would copy a shared one).
local function same_json(a, b, seen)
  if type(a) ~= type(b) then return false end
  if type(a) == 'number' then return math.type(a) == math.type(b) and a == b and (a ~= 0 or 1 / a == 1 / b) end
  if type(a) ~= 'table' then return a == b end
  if seen[a] then return false end
  seen[a] = true
  local n = 0
  for k, v in pairs(a) do
    n = n + 1
    if not same_json(v, rawget(b, k), seen) then return false end
  end
  for _ in pairs(b) do n = n - 1 end
  return n == 0
end

-- The caller's state for meta.json (a table JSON holds exactly), or nil and the description and
-- storages of state.safetensors (v100.serial), whose refusals name the value ("state.fn is a function").
local function encode_state(state)
  if state == nil then return {} end
  local desc, files = serial.encode(state, 'checkpoint.save', 'state')
  if #desc.tensors == 0 then
    local ok, text = pcall(cio.json_encode, state, JSON)
    if ok and same_json(state, cio.json_decode(text), {}) then return state end
  end
  return nil, desc, files
end

-- Hidden directories of interrupted saves whose process is gone.
local function remove_stale(dir)
  for _, n in ipairs(fs.list_dir(dir)) do
    local pid = n:match('^%..+%.v100tmp%-(%d+)$')
    if pid and not fs.pid_alive(math.tointeger(tonumber(pid))) then fs.remove_tree(join(dir, n)) end
  end
end

-- The checkpoints in dir this program wrote (final names only; is_ours), newest (epoch, step)
-- first. Other folders named like one are not checkpoints: not counted, never removed.
local function list_checkpoints(dir)
  local out = {}
  for _, n in ipairs(fs.list_dir(dir)) do
    local e, s = n:match(NAME_PATTERN)
    if e and fs.is_dir(join(dir, n)) and is_ours(join(dir, n)) then
      out[#out + 1] = { name = n, epoch = tonumber(e), step = tonumber(s) }
    end
  end
  table.sort(out, function(a, b)
    if a.epoch ~= b.epoch then return a.epoch > b.epoch end
    return a.step > b.step
  end)
  return out
end

local function hidden_name(dir, name) return join(dir, string.format('.%s.v100tmp-%d', name, fs.pid())) end

-- Keeps `current` and the newest keep - 1 others. A doomed checkpoint is first renamed to a
-- hidden name, so that a kill half way through the removal leaves no incomplete checkpoint under
-- a final name (the next save removes the hidden rest).
local function prune(dir, keep, current)
  if keep == nil then return end
  local kept, doomed = 1, {}
  for _, c in ipairs(list_checkpoints(dir)) do
    if c.name ~= current then
      if kept < keep then kept = kept + 1
      else
        local hidden = hidden_name(dir, c.name)
        fs.remove_tree(hidden)
        fs.rename(join(dir, c.name), hidden)
        doomed[#doomed + 1] = hidden
      end
    end
  end
  if #doomed == 0 then return end
  fs.fsync_dir(dir)
  for _, h in ipairs(doomed) do fs.remove_tree(h) end
end

-- Rank 0's part of save: everything that touches the file system.
local function write(dir, name, o, m, osd, rngs, json_state, state_desc, state_files)
  local fail_after = tonumber(os.getenv('V100LUA_CHECKPOINT_FAIL_AFTER') or '')
  local done = 0
  local function step_done(what)
    done = done + 1
    if fail_after and done >= fail_after then
      error(string.format('checkpoint.save: injected failure after %d steps (%s written; V100LUA_CHECKPOINT_FAIL_AFTER)', done, what), 0)
    end
  end
  cio.makedirs(dir)
  remove_stale(dir)
  local final = join(dir, name)
  if fs.is_dir(final) then
    local ours, why = is_ours(final)
    if not ours then
      fail('save: %s exists and is not a checkpoint this program wrote (%s); not replacing it', final, why)
    end
  end
  local tmp = hidden_name(dir, name)
  fs.remove_tree(tmp)
  cio.makedirs(tmp)
  local ok, err = pcall(function()
    -- the model: f32 for floating tensors (the writer copies device and strided ones)
    local mt = {}
    for k, t in pairs(m:state_dict()) do mt[k] = is_half(t) and t:to('f32') or t end
    v100.save_safetensors(join(tmp, MODEL), mt, { format = 'pt', producer = 'v100lua ' .. v100.version })
    step_done(MODEL)

    local tt, tmeta = {}, { format = 'v100lua-training' }
    if osd then
      local rest = flatten_optimizer(osd, tt)
      rest.kind, rest.zero = o.optimizer.kind, is_zero(o.optimizer)
      tmeta.optimizer = cio.json_encode(rest, JSON)
    end
    if o.scaler then
      local keys = {}
      for k, t in pairs(o.scaler:state_dict()) do
        tt['scaler.' .. k] = t
        keys[#keys + 1] = k
      end
      table.sort(keys)
      tmeta.scaler = cio.json_encode({ keys = keys }, JSON)
    end
    v100.save_safetensors(join(tmp, TRAINING), tt, tmeta)
    step_done(TRAINING)

    -- the caller's extra files (a BERT checkpoint's config.json and vocab.txt make the folder one
    -- that transformers' from_pretrained reads), in a fixed order
    local files = { MODEL, TRAINING }
    if state_desc then
      serial.write(join(tmp, STATE), state_desc, state_files)
      files[#files + 1] = STATE
    end
    local extra = {}
    for name in pairs(o.files or {}) do extra[#extra + 1] = name end
    table.sort(extra)
    for _, name in ipairs(extra) do
      fs.write_atomic(join(tmp, name), o.files[name])
      files[#files + 1] = name
    end

    local meta = { format = FORMAT, version = VERSION, epoch = o.epoch or 0, step = o.step or 0, state = json_state,
      state_file = state_desc and STATE or nil, rng = rngs[1], rng_ranks = rngs, world_size = #rngs, versions = v100.versions(),
      created = os.date('!%Y-%m-%dT%H:%M:%SZ'), files = files,
      optimizer = osd and o.optimizer.name or nil, scaler = o.scaler ~= nil }
    check_meta(meta, 'save', join(final, META))
    fs.write_atomic(join(tmp, META), cio.json_encode(meta, JSON_PRETTY) .. '\n')
    step_done(META)

    if fs.is_dir(final) then
      fs.rename(tmp, final, true) -- the old one is now at tmp
      fs.fsync_dir(dir)
      fs.remove_tree(tmp)
    else
      fs.rename(tmp, final)
    end
    fs.fsync_dir(dir)
    step_done('the rename into place')

    fs.write_atomic(join(dir, LATEST), name .. '\n')
    step_done(LATEST)
  end)
  if not ok then
    pcall(fs.remove_tree, tmp)
    error(err, 0)
  end
  prune(dir, o.keep, name)
  return final
end

function M.save(dir, o)
  if type(dir) ~= 'string' or dir == '' then fail('save: dir must be a non-empty string, got %s', type(dir)) end
  local m = check_options(o)
  local json_state, state_desc, state_files = encode_state(o.state)
  local rank, world = rank_world()
  -- the collective part first: every rank takes part in ZeRO-1's gather
  local osd
  if o.optimizer ~= nil then
    local opt = o.optimizer
    if type(opt) ~= 'table' or type(opt.state_dict) ~= 'function' then fail('save: optimizer must be an optimizer, got %s', type(opt)) end
    osd = is_zero(opt) and opt:full_state_dict() or opt:state_dict()
  end
  -- every rank's generator (ranks may draw different numbers: dropout seeded by rank)
  local seed, offset = v100.rng_state()
  local rngs = { { seed = seed, offset = offset } }
  if world > 1 then
    local all = dist.all_gather(v100.tensor({ seed, offset }, { dtype = 'i64' })):reshape({ -1 }):totable()
    for i = 1, world do rngs[i] = { seed = all[2 * i - 1], offset = all[2 * i] } end
  end
  local name = string.format('epoch%d-step%d', o.epoch or 0, o.step or 0)
  local ok, res = true, join(dir, name)
  if rank == 0 then ok, res = pcall(write, dir, name, o, m, osd, rngs, json_state, state_desc, state_files) end
  if world > 1 then
    -- the others wait for rank 0's outcome, so that nobody reads a checkpoint not yet in place
    local flag = v100.tensor({ ok and 1 or 0 }, { dtype = 'f32' })
    dist.broadcast(flag, { src = 0 })
    if rank ~= 0 and flag:item() == 0 then fail('save: %s: rank 0 failed to write the checkpoint (its error says why)', join(dir, name)) end
  end
  if not ok then error(res, 0) end
  return res
end

-- ---------------------------------------------------------------------------------------------
-- latest, load

function M.latest(dir)
  if type(dir) ~= 'string' then fail('latest: dir must be a string, got %s', type(dir)) end
  local text = read_file(join(dir, LATEST))
  if text == nil then return nil end
  local name = text:match('^(%S+)\n?$')
  if not name or not name:match(NAME_PATTERN) then
    fail('latest: %s: not a checkpoint pointer (expected one line epoch<E>-step<S>)', join(dir, LATEST))
  end
  local path = join(dir, name)
  if not exists(join(path, META)) then
    fail('latest: %s names %s, which is not a complete checkpoint (no %s)', join(dir, LATEST), name, META)
  end
  return path
end

-- Rebuilds the optimizer state dict from the training file (nil when it holds none).
local function optimizer_state(c)
  local text = c.training_meta.optimizer
  if text == nil then return nil end
  local file = join(c.path, TRAINING)
  local rest = cio.json_decode(text, file .. ' metadata "optimizer"')
  local sd = { state = {} }
  for k, v in pairs(rest) do if k ~= 'state' and k ~= 'kind' and k ~= 'zero' then sd[k] = v end end
  -- the hyperparameters with the optimizer's own rules (optim.check_group), named by file and group
  if type(rest.param_groups) ~= 'table' then fail('load: %s: metadata "optimizer" has no param_groups list', file) end
  for gi, g in ipairs(rest.param_groups) do
    if type(g) ~= 'table' then fail('load: %s: metadata "optimizer" param_groups[%d] is not an object', file, gi) end
    local ok, err = pcall(optim.check_group, string.format('metadata "optimizer" param_groups[%d]', gi), g)
    if not ok then fail('load: %s: %s', file, tostring(err):gsub('^[^:]*:%d+: ', '')) end
  end
  for key, e in pairs(rest.state or {}) do
    local idx = math.tointeger(tonumber(key))
    if idx == nil then fail('load: %s: optimizer state key "%s" is not a parameter index', file, tostring(key)) end
    local st = {}
    for k, v in pairs(e) do if k ~= 'tensors' then st[k] = v end end
    for _, k in ipairs(e.tensors or {}) do
      local name = string.format('optimizer.state.%d.%s', idx, k)
      st[k] = c.training[name]
      if st[k] == nil then fail('load: %s: missing tensor "%s"', file, name) end
    end
    sd.state[idx] = st
  end
  for name in pairs(c.training) do
    local i, k = name:match(STATE_KEY)
    if i and (sd.state[math.tointeger(tonumber(i))] or {})[k] == nil then
      fail('load: %s: tensor "%s" has no entry in the optimizer metadata', file, name)
    end
  end
  return sd, rest.kind
end

function M.load(path)
  if type(path) ~= 'string' then fail('load: expected a path, got %s', type(path)) end
  if not fs.is_dir(path) then
    if not exists(path) then fail('load: %s: does not exist (a checkpoint is a directory)', path) end
    fail('load: %s: not a directory (a checkpoint is a directory)', path)
  end
  if not exists(join(path, META)) then
    if exists(join(path, LATEST)) then return M.load(M.latest(path)) end
    fail('load: %s: not a checkpoint (no %s) nor a checkpoint directory (no %s)', path, META, LATEST)
  end
  local mp = join(path, META)
  local ok, meta = pcall(cio.json_decode, read_file(mp) or '', mp)
  if not ok then fail('load: %s', meta) end
  check_meta(meta, 'load', mp)
  for _, f in ipairs(meta.files or {}) do
    if not exists(join(path, f)) then fail('load: %s: %s lists %s, which is missing', path, META, f) end
  end
  local model = v100.load_safetensors(join(path, MODEL)) -- its errors name the file
  local training, tmeta = v100.load_safetensors(join(path, TRAINING))
  if tmeta.format ~= 'v100lua-training' then fail('load: %s: not a v100lua training state (metadata format %s)', join(path, TRAINING), tostring(tmeta.format)) end
  local state = meta.state
  if meta.state_file then
    local sp = join(path, STATE)
    local ok2, st = pcall(serial.load, sp)
    if not ok2 then fail('%s', tostring(st)) end
    if type(st) ~= 'table' then fail('load: %s: the state is a %s, not a table', sp, type(st)) end
    check_meta({ format = FORMAT, version = VERSION, epoch = 0, step = 0, files = {}, state = st }, 'load', sp)
    state = st
  end
  local c = { path = path, epoch = meta.epoch, step = meta.step, state = state, meta = meta, model = model,
    training = training, training_meta = tmeta }
  c.optimizer_state, c.optimizer_kind = optimizer_state(c)
  c.scaler_state = nil
  if tmeta.scaler then
    local keys = cio.json_decode(tmeta.scaler, join(path, TRAINING) .. ' metadata "scaler"').keys or {}
    c.scaler_state = {}
    for _, k in ipairs(keys) do
      c.scaler_state[k] = training['scaler.' .. k]
      if c.scaler_state[k] == nil then fail('load: %s: missing tensor "scaler.%s"', join(path, TRAINING), k) end
    end
  end
  return c
end

-- ---------------------------------------------------------------------------------------------
-- restore, pretrained

-- Runs f(...) and re-raises its error with the file named.
local function naming(file, what, f, ...)
  local ok, err = pcall(f, ...)
  if not ok then error(string.format('checkpoint.%s: %s: %s', what, file, tostring(err)), 3) end
  return err
end

function M.restore(c, o)
  if type(c) ~= 'table' or type(c.model) ~= 'table' or c.meta == nil then fail('restore: expected a checkpoint from checkpoint.load, got %s', type(c)) end
  o = errors.check_opts('checkpoint.restore', o, { 'model', 'optimizer', 'scaler', 'rng' })
  if o.model ~= nil then
    local m = unwrap(o.model)
    naming(join(c.path, MODEL), 'restore', m.load_state_dict, m, c.model)
  end
  local tfile = join(c.path, TRAINING)
  if o.optimizer ~= nil then
    local opt = o.optimizer
    if c.optimizer_state == nil then fail('restore: %s holds no optimizer state', tfile) end
    if c.optimizer_kind and opt.kind and c.optimizer_kind ~= opt.kind then
      fail('restore: %s holds the state of a %s optimizer, this one is %s', tfile, c.optimizer_kind, opt.kind)
    end
    if is_zero(opt) then naming(tfile, 'restore', opt.load_full_state_dict, opt, c.optimizer_state)
    else naming(tfile, 'restore', opt.load_state_dict, opt, c.optimizer_state) end
  end
  if o.scaler ~= nil then
    if c.scaler_state == nil then fail('restore: %s holds no AMP scaler state', tfile) end
    naming(tfile, 'restore', o.scaler.load_state_dict, o.scaler, c.scaler_state)
  end
  -- this rank's generator when the rank count is the one saved, else rank 0's
  local rank, world = rank_world()
  local rng = c.meta.rng
  if type(c.meta.rng_ranks) == 'table' and #c.meta.rng_ranks == world then rng = c.meta.rng_ranks[rank + 1] end
  if o.rng ~= false and type(rng) == 'table' and rng.seed ~= nil then v100.set_rng_state(rng.seed, rng.offset) end
  return c.epoch, c.step, c.state
end

-- A torchvision state dict exported to safetensors (safetensors.torch.save_file(model.state_dict()))
-- or a checkpoint directory: names lose a leading 'module.' (DataParallel/DDP exports); entries
-- named __x__ (reference inputs and outputs in test files) and names matching a pattern of
-- opts.exclude (e.g. '^fc%.' to fine-tune a new classifier) are skipped.
function M.load_pretrained(model, file, opts)
  opts = errors.check_opts('checkpoint.load_pretrained', opts, { 'exclude', 'strict' })
  if type(file) ~= 'string' then fail('load_pretrained: expected a file name, got %s', type(file)) end
  local m = unwrap(model)
  if type(m) ~= 'table' or type(m.load_state_dict) ~= 'function' then fail('load_pretrained: model must be an nn module, got %s', type(model)) end
  local sd
  if fs.is_dir(file) then sd = M.load(file).model
  else sd = naming(file, 'load_pretrained', v100.load_safetensors, file) end
  local out = {}
  for k, t in pairs(sd) do
    local skip = k:match('^__.*__$') ~= nil
    local name = k:gsub('^module%.', '')
    for _, pat in ipairs(opts.exclude or {}) do if name:match(pat) then skip = true end end
    if not skip then out[name] = t end
  end
  local strict = opts.strict ~= false
  if not opts.exclude then return naming(file, 'load_pretrained', m.load_state_dict, m, out, { strict = strict }) end
  -- excluded names may be missing; any other missing or unexpected name still fails when strict
  local r = naming(file, 'load_pretrained', m.load_state_dict, m, out, { strict = false })
  local missing = {}
  for _, k in ipairs(r.missing_keys) do
    local excluded = false
    for _, pat in ipairs(opts.exclude) do if k:match(pat) then excluded = true end end
    if not excluded then missing[#missing + 1] = k end
  end
  if strict and (#missing > 0 or #r.unexpected_keys > 0) then
    fail('load_pretrained: %s: missing keys: %s; unexpected keys: %s', file, table.concat(missing, ', '),
      table.concat(r.unexpected_keys, ', '))
  end
  return r
end

return M
