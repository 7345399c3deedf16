-- tests/lua/test_onnx.lua: v100.onnx.export (ext/onnx/lua/v100/export/onnx.lua, ext/onnx/onnx.c).
--
-- Here: the errors (bad arguments, unsupported modules, unwritable paths, an old file kept
-- when an export fails), the file's shape (inputs with dynamic dims, names of the state dict,
-- outputs) read back through a second writer-independent path: onnx's checker. And the numbers:
-- a small ResNet-18 (NCHW and channels-last), a ResNet-50-style bottleneck net, and tiny BERTs
-- (BertModel, BertForSequenceClassification, BertForPreTraining with masked positions), each
-- exported with one batch (and sequence) size, then run by onnxruntime on inputs of another
-- size and compared with v100lua's forward on those inputs: fp32 within 1e-5, the f16 export
-- within f16's rounding (tests/onnx/check_ort.py does the Python side).
--
-- Python: $V100LUA_PYTHON, else the virtual environment of tools/setup-python.sh
-- ($V100LUA_VENV, default ~/.cache/v100lua/venv), else python3; it needs onnx, onnxruntime and
-- numpy. Without them the numeric part is skipped with a message, except under CI (CI set),
-- where .ci/run installs them and their absence is a failure.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local onnx = require 'v100.onnx'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'

local dir = T.tmpdir()
local function path(name) return dir .. '/' .. name end

v100.manual_seed(1234)

local function tiny_bert_cfg()
  return bert.config{ vocab_size = 97, hidden_size = 32, num_hidden_layers = 2, num_attention_heads = 4,
    intermediate_size = 48, max_position_embeddings = 40, type_vocab_size = 2 }
end

local function ids(b, l, n) return (v100.rand{ b, l } * n):floor():long() end

-- ---------------------------------------------------------------------------------------------
-- Errors

T.test('bad arguments are named', function()
  local m = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
  local x = v100.randn{ 2, 4 }
  T.raises(function() onnx.export({}, { x }, path('a.onnx')) end, 'model must be an nn.Module')
  T.raises(function() onnx.export(m, 'x', path('a.onnx')) end, 'example_inputs must be a tensor or a list')
  T.raises(function() onnx.export(m, { 'x' }, path('a.onnx')) end, 'example input 1 must be a tensor, got string')
  T.raises(function() onnx.export(m, {}, path('a.onnx')) end, 'example_inputs is empty')
  T.raises(function() onnx.export(m, { x }, 42) end, 'path must be a non-empty string')
  T.raises(function() onnx.export(m, { x }, path('a.onnx'), { opset = 12 }) end, 'opset must be an integer from 17 to 21')
  T.raises(function() onnx.export(m, { x }, path('a.onnx'), { dtype = 'bf16' }) end, "dtype must be 'f32' or 'f16'")
  T.raises(function() onnx.export(m, { x }, dir .. '/no/such/dir/a.onnx') end, "/no/such/dir' does not exist")
  -- a directory where the file should go: the atomic writer refuses it
  v100.io.makedirs(path('isdir.onnx'))
  T.raises(function() onnx.export(m, { x }, path('isdir.onnx')) end, 'isdir.onnx')
  -- the example forward's own error, prefixed
  T.raises(function() onnx.export(m, { v100.randn{ 2, 5 } }, path('a.onnx')) end, { 'onnx.export: ', 'linear' })
end)

T.test('unsupported modules are named with their path, and an old file stays', function()
  local Custom = nn.Module:extend('MyBlock')
  function Custom:init() self.fc = nn.Linear(4, 4) end
  function Custom:forward(x) return self.fc(x):exp() end
  local m = nn.Sequential(nn.Linear(4, 4), Custom())
  local p = path('keep.onnx')
  T.write_file(p, 'old bytes')
  T.raises(function() onnx.export(m, { v100.randn{ 2, 4 } }, p) end,
    { "module '1' (MyBlock) has no ONNX exporter; exported: ", 'Conv2d, ', 'onnx.register(Class' })
  T.eq(T.read_file(p), 'old bytes', 'a failed export leaves the file as it was')
  -- a subclass that changes forward does not inherit its parent's exporter
  local Lin2 = nn.Linear:extend('Lin2')
  function Lin2:forward(x) return nn.Linear.forward(self, x) * 2 end
  T.raises(function() onnx.export(Lin2(4, 4), { v100.randn{ 2, 4 } }, p) end, 'a Lin2 has no ONNX exporter')
  -- batch norm without running statistics and ceil_mode that changes sizes are refused
  local bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4, { track_running_stats = false }))
  T.raises(function() onnx.export(bn, { v100.randn{ 2, 3, 8, 8 } }, p) end, "module '1' (BatchNorm2d) keeps no running")
  local mp = nn.Sequential(nn.MaxPool2d(2, { ceil_mode = true }))
  T.raises(function() onnx.export(mp, { v100.randn{ 1, 1, 5, 5 } }, p) end, 'ceil_mode = true changes the output size')
  T.eq(T.read_file(p), 'old bytes')
  -- the modes come back after a failed export
  T.eq(m.training, true, 'training mode restored')
end)

T.test('onnx.register exports a custom module', function()
  local Scale = nn.Module:extend('Scale2')
  function Scale:init(s) self.s = s end
  function Scale:forward(x) return x * self.s end
  onnx.register(Scale, function(ctx, m, x)
    return ctx:op('Mul', { x, ctx:const(m.s, 'float', {}) }, nil, { dtype = x.dtype, shape = x.shape })
  end)
  local info = onnx.export(nn.Sequential(nn.Linear(4, 3), Scale(3.0)), { v100.randn{ 2, 4 } }, path('scale.onnx'))
  T.eq(info.outputs[1].name, 'output')
  T.eq(info.outputs[1].dims[1], 'batch')
  T.eq(info.outputs[1].dims[2], 3)
  T.raises(function() onnx.register({}, function() end) end, 'expected a module class')
end)

-- ---------------------------------------------------------------------------------------------
-- Exports and their reference outputs

local cases = {} -- for check_ort.py

-- Exports model with `example`, then runs v100lua's forward on `run` (other sizes) and stores
-- both sides for the Python check.
local function case(name, model, example, run, opts, tol)
  opts = opts or {}
  local file = path(name .. '.onnx')
  local info = onnx.export(model, example, file, opts)
  model:eval()
  local outs = table.pack(v100.no_grad(function() return model(table.unpack(run, 1, 4)) end))
  local sd = {}
  local k = 0
  for i = 1, 4 do
    if run[i] then
      k = k + 1
      sd['in.' .. info.inputs[k].name] = opts.dtype == 'f16' and v100.dtype_is_float(run[i].dtype) and run[i]:half() or run[i]
    end
  end
  local j = 0
  for i = 1, outs.n do
    if outs[i] ~= nil then
      j = j + 1
      sd['out.' .. info.outputs[j].name] = outs[i]:float()
    end
  end
  T.eq(j, #info.outputs, name .. ': outputs')
  v100.save_safetensors(path(name .. '.safetensors'), sd)
  cases[#cases + 1] = { name = name, model = file, data = path(name .. '.safetensors'), rtol = tol and tol[1] or 1e-5,
    atol = tol and tol[2] or 1e-5, ort = opts.ort ~= false }
  return info
end

T.test('ResNet-18 (NCHW, channels-last) and a bottleneck ResNet export', function()
  local m = resnet.resnet18{ classes = 10, width = 8 }
  -- non-trivial running statistics, as after training
  for _, e in ipairs(m:named_modules()) do
    if getmetatable(e[2]) == nn.BatchNorm2d then
      e[2].running_mean:copy_(v100.randn{ e[2].num_features } * 0.1)
      e[2].running_var:copy_(v100.rand{ e[2].num_features } + 0.5)
    end
  end
  local info = case('resnet18', m, { v100.randn{ 2, 3, 32, 32 } }, { v100.randn{ 3, 3, 32, 32 } })
  T.eq(info.inputs[1].name, 'input')
  T.eq(table.concat(info.inputs[1].dims, ','), 'batch,3,32,32')
  T.eq(info.outputs[1].name, 'logits')
  T.eq(table.concat(info.outputs[1].dims, ','), 'batch,10')
  T.eq(info.opset, 17)
  -- every parameter and the BN statistics are initializers, once each
  T.eq(info.initializers, #m:parameters() + 2 * 20 + 0, 'parameters + running mean/var')
  local cl = resnet.resnet18{ classes = 5, width = 8, small_input = true }
  cl:to{ layout = 'nhwc' }
  case('resnet18_nhwc', cl, { v100.randn{ 4, 3, 16, 16 }:to_channels_last() }, { v100.randn{ 1, 3, 16, 16 } })
  local r50 = resnet.ResNet(resnet.Bottleneck, { 1, 1, 1, 1 }, { classes = 7, width = 4 })
  case('resnet_bottleneck', r50, { v100.randn{ 2, 3, 40, 40 } }, { v100.randn{ 5, 3, 40, 40 } }, { opset = 21 })
  case('resnet18_f16', m, { v100.randn{ 2, 3, 32, 32 } }, { v100.randn{ 3, 3, 32, 32 } }, { dtype = 'f16' },
    { 2e-2, 2e-2 })
end)

T.test('tiny BERTs export with dynamic batch and sequence', function()
  local cfg = tiny_bert_cfg()
  local seq = bert.BertForSequenceClassification(cfg, 5)
  local mask = v100.ones({ 3, 6 }, { dtype = 'i64' })
  mask:narrow(2, 5, 2):narrow(1, 1, 1):zero_() -- padding in the first run sequence
  local info = case('bert_cls', seq, { ids(2, 8, 97), ids(2, 8, 2), v100.ones({ 2, 8 }, { dtype = 'i64' }) },
    { ids(3, 6, 97), ids(3, 6, 2), mask })
  T.eq(info.inputs[1].name, 'input_ids')
  T.eq(table.concat(info.inputs[1].dims, ','), 'batch,sequence')
  T.eq(info.inputs[3].name, 'attention_mask')
  T.eq(info.outputs[1].name, 'logits')
  T.eq(table.concat(info.outputs[1].dims, ','), 'batch,5')

  local base = bert.BertModel(tiny_bert_cfg())
  info = case('bert_model', base, { ids(2, 8, 97):to('i32') }, { ids(1, 11, 97):to('i32') }) -- i32 ids
  T.eq(#info.inputs, 1)
  T.eq(info.outputs[1].name, 'last_hidden_state')
  T.eq(table.concat(info.outputs[1].dims, ','), 'batch,sequence,32')
  T.eq(info.outputs[2].name, 'pooler_output')

  local pcfg = tiny_bert_cfg()
  pcfg.vocab_size = 1000 -- a word table (128 KB) that would show if it were stored twice
  local pre = bert.BertForPreTraining(pcfg)
  local fmask = v100.ones({ 2, 9 }, { dtype = 'f32' })
  fmask:narrow(2, 8, 2):zero_()
  local pos = v100.tensor({ { 1, 3, 0 }, { 2, 8, 4 } }, { dtype = 'i64' })
  info = case('bert_pretraining', pre,
    { ids(2, 7, 1000), ids(2, 7, 2), v100.ones{ 2, 7 }, v100.tensor({ { 1, 2, 3 }, { 0, 4, 6 } }, { dtype = 'i64' }) },
    { ids(2, 9, 1000), ids(2, 9, 2), fmask, pos })
  T.eq(info.outputs[1].name, 'prediction_logits')
  T.eq(table.concat(info.outputs[1].dims, ','), 'batch,predictions,1000')
  T.eq(info.outputs[2].name, 'seq_relationship_logits')
  -- the tied decoder is one initializer: the word embeddings are stored once
  local bytes = 0
  for _, p in ipairs(pre:parameters()) do bytes = bytes + p:numel() * 4 end
  local size = #T.read_file(path('bert_pretraining.onnx'))
  T.ok(size > bytes and size < bytes + 1000 * 32 * 4 / 2,
    string.format('file %d bytes for %d bytes of parameters: the word table once', size, bytes))

  case('bert_cls_f16', seq, { ids(2, 8, 97), nil, v100.ones({ 2, 8 }, { dtype = 'i64' }) },
    { ids(3, 6, 97), nil, mask }, { dtype = 'f16' }, { 2e-2, 2e-2 })
end)

-- ---------------------------------------------------------------------------------------------
-- The Python side

local function python()
  local home = os.getenv('HOME') or ''
  local venv = os.getenv('V100LUA_VENV') or (home .. '/.cache/v100lua/venv')
  local cands = { os.getenv('V100LUA_PYTHON') or '', venv .. '/bin/python', 'python3' }
  for _, py in ipairs(cands) do
    if py ~= '' then
      local ok = os.execute(string.format("'%s' -c 'import onnx, onnxruntime, numpy' >/dev/null 2>&1", py))
      if ok then return py end
    end
  end
  return nil
end

T.test('onnx checker and onnxruntime agree with v100lua', function()
  local py = python()
  if not py then
    local msg = 'onnx, onnxruntime or numpy is not installed for any Python found ($V100LUA_PYTHON, ' ..
      '$V100LUA_VENV or ~/.cache/v100lua/venv, python3): run tools/setup-python.sh'
    if os.getenv('CI') then error(msg .. ' (CI runs this check: .ci/run installs them)') end
    print('SKIP: ' .. msg)
    return
  end
  local manifest = path('cases.json')
  T.write_file(manifest, v100.json.encode(cases))
  local out = path('check.txt')
  local ok = os.execute(string.format("'%s' tests/onnx/check_ort.py '%s' > '%s' 2>&1", py, manifest, out))
  local text = T.read_file(out)
  io.write(text)
  T.ok(ok, 'tests/onnx/check_ort.py failed:\n' .. text)
  T.ok(text:match('\n' .. #cases .. ' passed, 0 failed'), 'every case checked')
end)

os.execute("rm -rf '" .. dir .. "'")
T.run()
