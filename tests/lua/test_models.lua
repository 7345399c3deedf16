-- tests/lua/test_models.lua: the ResNet and BERT definitions (v100.models.*) on the CPU:
-- parameter counts against torchvision / Hugging Face, names and shapes, forward and backward,
-- initialisation, masking, safetensors round trips and error paths.
local v100 = require 'v100'
local nn = require 'v100.nn'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'
local T = require 'testlib'

local function shape(t) return table.concat(t.shape, 'x') end
local function count(tbl)
  local n = 0
  for _ in pairs(tbl) do n = n + 1 end
  return n
end
local function tmpname(suffix)
  return os.tmpname() .. suffix
end

-- A tiny BERT used by several tests.
local TINY = { vocab_size = 40, hidden_size = 16, num_hidden_layers = 2, num_attention_heads = 4,
  intermediate_size = 24, max_position_embeddings = 12, type_vocab_size = 2 }
local function tiny_inputs()
  local ids = v100.tensor({ { 5, 7, 9, 3, 0, 0 }, { 2, 8, 11, 4, 6, 3 } })
  local tt = v100.tensor({ { 0, 0, 1, 1, 0, 0 }, { 0, 0, 0, 1, 1, 1 } })
  local mask = v100.tensor({ { 1, 1, 1, 1, 0, 0 }, { 1, 1, 1, 1, 1, 1 } })
  return ids, tt, mask
end

-- ---------------------------------------------------------------------------------------------
-- ResNet

T.test('resnet parameter counts match torchvision', function()
  local want = { resnet18 = 11689512, resnet34 = 21797672, resnet50 = 25557032, resnet101 = 44549160,
    resnet152 = 60192808 }
  for _, name in ipairs{ 'resnet18', 'resnet34', 'resnet50', 'resnet101', 'resnet152' } do
    local m = resnet[name]()
    T.eq(m:num_parameters(), want[name], name)
  end
  T.eq(resnet.resnet18{ classes = 10 }:num_parameters(), 11689512 - 513 * 990, 'resnet18 with 10 classes')
end)

T.test('resnet50 names and shapes follow torchvision', function()
  local m = resnet.resnet50()
  local np = m:named_parameters()
  T.eq(#np, 161)
  T.eq(np[1][1], 'conv1.weight')
  T.eq(shape(np[1][2]), '64x3x7x7')
  T.eq(np[2][1], 'bn1.weight')
  T.eq(np[4][1], 'layer1.0.conv1.weight')
  T.eq(np[#np][1], 'fc.bias')
  T.eq(shape(np[#np][2]), '1000')
  T.eq(np[#np - 1][1], 'fc.weight')
  T.eq(shape(np[#np - 1][2]), '1000x2048')
  local sd = m:state_dict()
  T.eq(count(sd), 320) -- 161 parameters + 53 BNs x (mean, var, num_batches_tracked)
  T.eq(shape(sd['layer1.0.downsample.0.weight']), '256x64x1x1')
  T.eq(shape(sd['layer1.0.downsample.1.running_var']), '256')
  T.eq(shape(sd['layer4.2.conv3.weight']), '2048x512x1x1')
  T.eq(sd['layer4.2.bn3.num_batches_tracked'].dtype, 'i64')
  T.ok(sd['layer3.5.conv2.weight'] ~= nil and sd['layer3.6.conv1.weight'] == nil, 'layer3 has 6 blocks')
  -- v1.5: the stride of a down-sampling Bottleneck sits on its 3x3 conv
  local b = m.layer2[1]
  T.eq(b.conv1.stride[1], 1)
  T.eq(b.conv2.stride[1], 2)
  T.eq(b.downsample[1].stride[1], 2)
  T.ok(m.maxpool ~= nil, 'the ImageNet stem has a max-pool')
end)

T.test('resnet initialisation is torchvision\'s', function()
  v100.manual_seed(3)
  local m = resnet.resnet18{ zero_init_residual = true }
  -- kaiming_normal(fan_out, relu): std sqrt(2 / (512 * 9)) for layer4's 3x3 convs
  local w = m.layer4[2].conv2.weight
  T.near(w:std():item(), math.sqrt(2 / (512 * 9)), 0.02)
  T.near(w:mean():item(), 0, 1e-3)
  T.eq(m.bn1.weight:min():item(), 1)
  T.eq(m.bn1.bias:abs():max():item(), 0)
  for _, blk in ipairs{ m.layer1[1], m.layer2[2], m.layer4[1] } do
    T.eq(blk.bn2.weight:abs():max():item(), 0, 'zero_init_residual zeroes the last BN of a block')
    T.eq(blk.bn1.weight:min():item(), 1)
  end
  local b = resnet.resnet50{ zero_init_residual = true }
  T.eq(b.layer3[3].bn3.weight:abs():max():item(), 0)
  T.eq(b.layer3[3].bn2.weight:min():item(), 1)
  T.ok(resnet.resnet18().layer1[1].bn2.weight:min():item() == 1, 'no zeroing by default')
end)

T.test('resnet18 small_input: 2x1x28x28 -> 2x10, backward reaches every parameter', function()
  v100.manual_seed(1)
  local m = resnet.resnet18{ classes = 10, small_input = true, in_channels = 1 }
  T.eq(m.maxpool, nil)
  T.eq(shape(m.conv1.weight), '64x1x3x3')
  T.eq(m.conv1.stride[1], 1)
  local x = v100.randn({ 2, 1, 28, 28 })
  local y = m(x)
  T.eq(shape(y), '2x10')
  local loss = nn.cross_entropy(y, v100.tensor({ 3, 7 }))
  loss:backward()
  for _, e in ipairs(m:named_parameters()) do
    local g = e[2].grad
    T.ok(g ~= nil, e[1] .. ' has a gradient')
    T.eq(shape(g), shape(e[2]), e[1])
    T.ok(g:abs():sum():item() > 0, e[1] .. ' gradient is not all zero')
  end
  -- training mode updated the running statistics
  T.eq(m.bn1.num_batches_tracked:item(), 1)
  T.ok(m.bn1.running_mean:abs():sum():item() > 0)
end)

T.test('resnet eval output is independent of the batch', function()
  v100.manual_seed(2)
  local m = resnet.resnet18{ classes = 5, small_input = true }:eval()
  local x = v100.randn({ 3, 3, 16, 16 })
  local y = m(x)
  local y1 = m(x:narrow(1, 2, 1))
  T.tensor_close(y1, y:narrow(1, 2, 1), 1e-5, 1e-5)
end)

T.test('a wrong-shape input names the module path', function()
  local m = resnet.resnet18{ classes = 10, small_input = true, in_channels = 1 }
  T.raises(function() m(v100.randn({ 2, 3, 28, 28 })) end, 'conv1: conv2d')
  local b = bert.BertModel(TINY)
  local ids = v100.tensor({ { 1, 2, 3 } })
  T.raises(function() b(ids, v100.tensor({ { 0, 5, 0 } })) end, 'embeddings.token_type_embeddings')
  T.raises(function() b(v100.zeros({ 1, 13 }, { dtype = 'i64' })) end,
    { 'embeddings: ', 'max_position_embeddings 12' })
  T.raises(function() b(v100.zeros({ 1, 3 })) end, 'input_ids must be')
end)

-- ---------------------------------------------------------------------------------------------
-- BERT

T.test('bert configs', function()
  local base, large = bert.config('base'), bert.config('large')
  T.eq(base.hidden_size, 768)
  T.eq(base.num_hidden_layers, 12)
  T.eq(base.layer_norm_eps, 1e-12)
  T.eq(large.hidden_size, 1024)
  T.eq(large.num_attention_heads, 16)
  T.eq(large.intermediate_size, 4096)
  T.eq(large.vocab_size, 30522)
  local c = bert.config({ hidden_size = 32, num_attention_heads = 2, architectures = { 'BertForMaskedLM' } })
  T.eq(c.hidden_size, 32)
  T.eq(c.max_position_embeddings, 512)
  T.eq(bert.config('base', { num_hidden_layers = 3 }).num_hidden_layers, 3)
  T.raises(function() bert.config({ hidden_size = 30, num_attention_heads = 4 }) end, 'not a multiple')
  T.raises(function() bert.config('huge') end, "'base', 'large'")
end)

T.test('bert base names, shapes and counts follow Hugging Face', function()
  local m = bert.BertForPreTraining(bert.config('base'))
  T.eq(m:num_parameters(), 110106428)
  T.eq(m.bert:num_parameters(), 109482240)
  local np = m:named_parameters()
  T.eq(np[1][1], 'bert.embeddings.word_embeddings.weight')
  T.eq(shape(np[1][2]), '30522x768')
  T.eq(np[#np][1], 'cls.seq_relationship.bias')
  T.eq(shape(np[#np][2]), '2')
  T.eq(np[#np - 1][1], 'cls.seq_relationship.weight')
  T.eq(shape(np[#np - 1][2]), '2x768')
  local sd = m:state_dict()
  T.eq(shape(sd['bert.encoder.layer.11.attention.self.query.weight']), '768x768')
  T.eq(shape(sd['bert.encoder.layer.11.intermediate.dense.weight']), '3072x768')
  T.eq(shape(sd['bert.encoder.layer.0.output.LayerNorm.bias']), '768')
  T.eq(shape(sd['bert.pooler.dense.weight']), '768x768')
  T.eq(shape(sd['cls.predictions.transform.LayerNorm.weight']), '768')
  -- the tied decoder appears under its own names too, as in HF's state_dict
  T.eq(shape(sd['cls.predictions.decoder.weight']), '30522x768')
  T.eq(shape(sd['cls.predictions.decoder.bias']), '30522')
  T.eq(count(sd), #np + 2)
  T.eq(m.cls.predictions.decoder.weight, m.bert.embeddings.word_embeddings.weight)
  -- HF's initialisation
  T.near(m.bert.encoder.layer[1].attention.self.query.weight:std():item(), 0.02, 0.03)
  T.eq(m.bert.embeddings.word_embeddings.weight:narrow(1, 1, 1):abs():max():item(), 0, 'pad row')
  T.eq(m.cls.predictions.bias:abs():max():item(), 0)
end)

T.test('tiny bert forward and backward', function()
  v100.manual_seed(4)
  local m = bert.BertForPreTraining(TINY)
  local ids, tt, mask = tiny_inputs()
  local scores, nsp = m(ids, tt, mask)
  T.eq(shape(scores), '2x6x40')
  T.eq(shape(nsp), '2x2')
  local labels = v100.tensor({ { -100, 7, -100, -100, -100, -100 }, { 2, -100, -100, 4, -100, -100 } })
  local loss = bert.pretraining_loss(scores, nsp, labels, v100.tensor({ 0, 1 }))
  T.eq(loss.ndim, 0)
  loss:backward()
  for _, e in ipairs(m:named_parameters()) do
    T.ok(e[2].grad ~= nil, e[1] .. ' has a gradient')
    T.eq(shape(e[2].grad), shape(e[2]), e[1])
  end
  -- BertModel and the classifier
  local base = bert.BertModel(TINY)
  local seq, pooled = base(ids, tt, mask)
  T.eq(shape(seq), '2x6x16')
  T.eq(shape(pooled), '2x16')
  T.ok(pooled:abs():max():item() <= 1, 'tanh pooler')
  -- the pad row gets no gradient through the lookup (token 0 appears twice in the input; with
  -- the MLM head the tied decoder would still give it one, as in PyTorch); other rows do
  local total = (seq * seq):sum() + pooled:sum()
  total:backward()
  local g = base.embeddings.word_embeddings.weight.grad
  T.eq(g:narrow(1, 1, 1):abs():max():item(), 0)
  T.ok(g:narrow(1, 6, 1):abs():max():item() > 0)
  local cls = bert.BertForSequenceClassification(TINY, 3)
  T.eq(shape(cls(ids, tt, mask)), '2x3')
  T.eq(cls.classifier.weight.shape[1], 3)
end)

T.test('bert attention mask hides padded positions; eval is deterministic', function()
  v100.manual_seed(5)
  local m = bert.BertModel(TINY):eval()
  local ids, tt, mask = tiny_inputs()
  local seq = m(ids, tt, mask)
  local ids2 = ids:clone()
  ids2:narrow(1, 1, 1):narrow(2, 5, 2):fill_(17) -- change the padded tokens of sequence 1
  local seq2 = m(ids2, tt, mask)
  T.tensor_close(seq2:narrow(2, 1, 4), seq:narrow(2, 1, 4), 1e-5, 1e-6)
  -- without the mask they matter
  local a, b = m(ids, tt), m(ids2, tt)
  T.ok((a:narrow(2, 1, 4) - b:narrow(2, 1, 4)):abs():max():item() > 1e-3, 'unmasked padding changes outputs')
  -- no token_type_ids = all zeros
  T.tensor_close(m(ids, nil, mask), m(ids, v100.zeros({ 2, 6 }, { dtype = 'i64' }), mask), 1e-6, 1e-6)
  -- an all-padding row stays finite
  local s3 = m(ids, tt, v100.tensor({ { 0, 0, 0, 0, 0, 0 }, { 1, 1, 1, 1, 1, 1 } }))
  T.ok(s3:ne(s3):sum():item() == 0, 'no NaN for a fully masked row')
  -- dropout acts in training mode only
  m:train()
  v100.manual_seed(9)
  local t1 = m(ids, tt, mask)
  local t2 = m(ids, tt, mask)
  T.ok((t1 - t2):abs():max():item() > 1e-4, 'training mode applies dropout')
end)

T.test('hf_rename maps TensorFlow-era and tied names', function()
  local t = v100.zeros({ 3 })
  local w = v100.zeros({ 4, 3 })
  local out = bert.hf_rename({
    ['bert.embeddings.LayerNorm.gamma'] = t, ['bert.embeddings.LayerNorm.beta'] = t,
    ['bert.embeddings.position_ids'] = t, ['bert.embeddings.word_embeddings.weight'] = w,
    ['cls.predictions.bias'] = t,
  })
  T.eq(out['bert.embeddings.LayerNorm.weight'], t)
  T.eq(out['bert.embeddings.LayerNorm.bias'], t)
  T.eq(out['bert.embeddings.position_ids'], nil)
  T.eq(out['cls.predictions.decoder.weight'], w)
  T.eq(out['cls.predictions.decoder.bias'], t)
  local p = bert.hf_rename({ ['embeddings.word_embeddings.weight'] = w }, { prefix = 'bert.' })
  T.ok(p['bert.embeddings.word_embeddings.weight'] == w)
end)

-- ---------------------------------------------------------------------------------------------
-- Checkpoints

T.test('resnet state_dict round trip through safetensors gives identical outputs', function()
  v100.manual_seed(6)
  local m = resnet.resnet18{ classes = 10, small_input = true, in_channels = 1 }
  -- non-trivial running statistics: one training-mode forward
  m(v100.randn({ 4, 1, 12, 12 }) * 2 + 1)
  m:eval()
  local x = v100.randn({ 2, 1, 12, 12 })
  local y = m(x)
  for _, suffix in ipairs{ '.safetensors', '.safetensors.gz' } do
    local path = tmpname(suffix)
    v100.save_safetensors(path, m:state_dict(), { arch = 'resnet18', epoch = 3 })
    v100.manual_seed(99)
    local m2 = resnet.resnet18{ classes = 10, small_input = true, in_channels = 1 }:eval()
    T.ok((m2(x) - y):abs():max():item() > 0, 'a fresh model differs')
    local sd, meta = v100.load_safetensors(path)
    T.eq(meta.arch, 'resnet18')
    T.eq(meta.epoch, '3')
    T.eq(sd['bn1.num_batches_tracked'].dtype, 'i64')
    m2:load_state_dict(sd)
    T.tensor_eq(m2(x), y, suffix)
    os.remove(path)
  end
end)

T.test('tiny bert round trip through safetensors (tied weights)', function()
  v100.manual_seed(7)
  local m = bert.BertForPreTraining(TINY):eval()
  local ids, tt, mask = tiny_inputs()
  local s, n = m(ids, tt, mask)
  local path = tmpname('.safetensors')
  v100.save_safetensors(path, m:state_dict())
  v100.manual_seed(8)
  local m2 = bert.BertForPreTraining(TINY):eval()
  m2:load_state_dict(v100.load_safetensors(path))
  local s2, n2 = m2(ids, tt, mask)
  T.tensor_eq(s2, s)
  T.tensor_eq(n2, n)
  T.eq(m2.cls.predictions.decoder.weight, m2.bert.embeddings.word_embeddings.weight, 'still tied')
  os.remove(path)
end)

T.test('load_safetensors options and errors', function()
  local path = tmpname('.safetensors')
  v100.save_safetensors(path, { a = v100.tensor({ { 1.5, 2 }, { 3, 4 } }), b = v100.tensor({ 1, 2, 3 }) })
  local sd, meta = v100.load_safetensors(path, { dtype = 'f64' })
  T.eq(sd.a.dtype, 'f64')
  T.eq(count(meta), 0)
  T.allclose(sd.a, { { 1.5, 2 }, { 3, 4 } }, 0, 0)
  T.eq(v100.load_safetensors(path, 'cpu').b.dtype, 'i64')
  -- a checkpoint of another shape names the key
  local m = resnet.resnet18{ classes = 10, small_input = true }
  local sd10 = m:state_dict()
  local m100 = resnet.resnet18{ classes = 100, small_input = true }
  T.raises(function() m100:load_state_dict(sd10) end, { 'mis-shaped keys', 'fc.weight' })
  T.raises(function() v100.save_safetensors(path, { 1, 2 }) end, 'names must be strings')
  T.raises(function() v100.save_safetensors(path, { x = 3 }) end, '"x" is a number, not a tensor')
  T.raises(function() v100.load_safetensors(path .. '.missing') end, { 'load_safetensors', '.missing' })
  local f = io.open(path, 'wb')
  f:write('\16\0\0\0\0\0\0\0{"a": [1, 2, 3]}')
  f:close()
  T.raises(function() v100.load_safetensors(path) end, { path, 'tensor "a"' })
  os.remove(path)
end)

T.run()
