-- tests/lua/gpu_onnx.lua: v100.onnx.export of models that live on the GPU. The file does not
-- depend on where the model is: a ResNet-18 on CUDA in channels-last f16 (as the recipe trains
-- it) exports byte for byte the file of its CPU NCHW copy (whose f16 weights read back as f32
-- exactly), in f32 and in f16; the same for a tiny BERT on CUDA with CUDA example inputs. The
-- export's own check (the forward's output shapes on the device) runs on the GPU. The numbers of
-- such a file against onnxruntime are tests/lua/test_onnx.lua's (CPU, CI).
local T = require 'testlib'
local v100 = require 'v100'
local onnx = require 'v100.onnx'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'

T.cuda_or_skip()

local dir = T.tmpdir()

local function same_file(a, b, what)
  local x, y = T.read_file(a), T.read_file(b)
  T.eq(#x, #y, what .. ': sizes')
  T.ok(x == y, what .. ': the CUDA export differs from the CPU export')
end

T.test('ResNet-18 on CUDA (NHWC, f16) exports as its CPU copy', function()
  local m = resnet.resnet18{ classes = 10 }
  m:half()
  local cpu = resnet.resnet18{ classes = 10 }
  cpu:half()
  cpu:load_state_dict(m:state_dict())
  m:to('cuda', { layout = 'nhwc' })
  local x = v100.randn({ 4, 3, 64, 64 }, { dtype = 'f16' })
  for _, dt in ipairs{ 'f32', 'f16' } do
    local a, b = dir .. '/gpu_' .. dt .. '.onnx', dir .. '/cpu_' .. dt .. '.onnx'
    local info = onnx.export(m, { x:to('cuda'):to_channels_last() }, a, { dtype = dt })
    onnx.export(cpu, { x }, b, { dtype = dt })
    T.eq(table.concat(info.outputs[1].dims, ','), 'batch,10')
    same_file(a, b, 'resnet18 ' .. dt)
  end
  T.eq(m.training, true, 'modes restored')
end)

T.test('a tiny BERT on CUDA exports as its CPU copy', function()
  local cfg = bert.config{ vocab_size = 300, hidden_size = 64, num_hidden_layers = 2, num_attention_heads = 4,
    intermediate_size = 128, max_position_embeddings = 64 }
  local m = bert.BertForSequenceClassification(cfg, 3)
  local cpu = bert.BertForSequenceClassification(cfg, 3)
  cpu:load_state_dict(m:state_dict())
  m:to('cuda')
  local ids = (v100.rand{ 2, 16 } * 300):floor():long()
  local mask = v100.ones({ 2, 16 }, { dtype = 'i64' })
  onnx.export(m, { ids:to('cuda'), nil, mask:to('cuda') }, dir .. '/bert_gpu.onnx')
  onnx.export(cpu, { ids, nil, mask }, dir .. '/bert_cpu.onnx')
  same_file(dir .. '/bert_gpu.onnx', dir .. '/bert_cpu.onnx', 'bert')
end)

os.execute("rm -rf '" .. dir .. "'")
T.run()
