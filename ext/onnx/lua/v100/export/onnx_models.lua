-- ext/onnx/lua/v100/export/onnx_models.lua: the ONNX exporters of the model families of
-- scripts/v100/models (ResNet, BERT), for export/onnx.lua, which explains the scheme: each exporter writes
-- the nodes of its module's forward, mirroring it line by line (keep the two in step: the
-- export checks output shapes against the forward, and tests/lua/test_onnx.lua compares
-- onnxruntime's numbers with the forward's).
--
-- BERT's inner classes are local to models/bert_model.lua, so its three public models are exported
-- as wholes: the exporter walks their known fields (embeddings, encoder.layer[i].attention.self,
-- ...) and says which field is missing when a model does not have that structure.
local core = require 'v100.core'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'
local common = require 'v100.export.common'

local like, copy, fail = common.like, common.copy, common.fail
local function core_elem(dt) return core._onnx.elem_type(dt) end -- Cast's `to`

local M = {}

-- Adds the exporters (E[class] = fn) and graph descriptions (roots[class] = fn) of the families.
function M.register(E, roots)

  -- -------------------------------------------------------------------------------------------
  -- ResNet (models/resnet.lua): conv1 -> bn1 -> relu [-> maxpool] -> layer1..4 -> avgpool ->
  -- flatten -> fc. Any depth and width, small_input or not, NCHW or channels-last modules.

  local function relu(ctx, x) return ctx:op('Relu', { x }, nil, like(x)) end

  E[resnet.BasicBlock] = function(ctx, m, x)
    local out = relu(ctx, ctx:call(m.bn1, 'bn1', ctx:call(m.conv1, 'conv1', x)))
    out = ctx:call(m.bn2, 'bn2', ctx:call(m.conv2, 'conv2', out))
    local identity = m.downsample and ctx:call(m.downsample, 'downsample', x) or x
    return relu(ctx, ctx:op('Add', { out, identity }, nil, like(out)))
  end

  E[resnet.Bottleneck] = function(ctx, m, x)
    local out = relu(ctx, ctx:call(m.bn1, 'bn1', ctx:call(m.conv1, 'conv1', x)))
    out = relu(ctx, ctx:call(m.bn2, 'bn2', ctx:call(m.conv2, 'conv2', out)))
    out = ctx:call(m.bn3, 'bn3', ctx:call(m.conv3, 'conv3', out))
    local identity = m.downsample and ctx:call(m.downsample, 'downsample', x) or x
    return relu(ctx, ctx:op('Add', { out, identity }, nil, like(out)))
  end

  E[resnet.ResNet] = function(ctx, m, x)
    x = relu(ctx, ctx:call(m.bn1, 'bn1', ctx:call(m.conv1, 'conv1', x)))
    if m.maxpool then x = ctx:call(m.maxpool, 'maxpool', x) end
    for i = 1, 4 do x = ctx:call(m['layer' .. i], 'layer' .. i, x) end
    x = ctx:call(m.avgpool, 'avgpool', x)
    local s = x.shape
    local n = (type(s[2]) == 'number' and type(s[3]) == 'number' and type(s[4]) == 'number') and s[2] * s[3] * s[4] or '?'
    x = ctx:op('Flatten', { x }, { axis = 1 }, like(x, { s[1], n }))
    return ctx:call(m.fc, 'fc', x)
  end

  roots[resnet.ResNet] = function(_, examples)
    if not (examples[1] and examples[1].ndim == 4) then
      fail('a ResNet takes one N x C x H x W image tensor, got %s', examples[1] and examples[1].ndim .. ' dims' or 'none')
    end
    return { inputs = { { 'input', { 'batch' } } }, outputs = { 'logits' } }
  end

  -- -------------------------------------------------------------------------------------------
  -- BERT (models/bert_model.lua)

  -- The field `path` (dotted) of module m, or a clear error naming what is missing.
  local function field(ctx, m, path)
    local v = m
    for part in path:gmatch('[^.]+') do
      v = v[tonumber(part) or part]
      if v == nil then
        fail("module '%s' has no '%s': not the structure of models/bert.lua's BERT", ctx.scope, path)
      end
    end
    return v
  end

  -- The lowest finite value of the export's float: HF's additive padding mask (bert.lua's LOWEST).
  local LOWEST = { f32 = -3.4028234663852886e38, f16 = -65504.0 }

  local function act(ctx, cfg, x)
    local a = cfg.hidden_act
    if a == 'gelu' then return ctx:gelu(x) end
    if a == 'gelu_new' or a == 'gelu_pytorch_tanh' then return ctx:gelu(x, 'tanh') end
    if a == 'relu' then return ctx:op('Relu', { x }, nil, like(x)) end
    if a == 'tanh' then return ctx:op('Tanh', { x }, nil, like(x)) end
    fail("module '%s': hidden_act '%s' is not exported", ctx.scope, tostring(a))
  end

  local function linear(ctx, lin, path, x)
    return ctx:within(path, function() return ctx:linear(x, lin.weight, lin.bias) end)
  end

  local function layer_norm(ctx, ln, path, x)
    return ctx:within(path, function() return ctx:layer_norm(x, ln.weight, ln.bias, ln.eps, ln.normalized_shape) end)
  end

  -- BertEmbeddings: word (a plain gather: the pad row's values are returned, as HF) + the first
  -- L position rows + token types (row 0 when absent), LayerNorm; dropout is the identity.
  local function embeddings(ctx, e, ids, types)
    local H = field(ctx, e, 'word_embeddings.weight').shape[2]
    local shape = { ids.shape[1], ids.shape[2], H }
    local fdt = { dtype = ctx.float, shape = shape }
    local x = ctx:op('Gather', { ctx:param(e.word_embeddings.weight), ids }, { axis = 0 }, fdt)
    -- positions 0..L-1: a Slice of the table up to the sequence length read from input_ids
    local L = ctx:op('Shape', { ids }, { start = 1, ['end'] = 2 }, { dtype = 'i64', shape = { 1 } })
    local pos = ctx:op('Slice', { ctx:param(field(ctx, e, 'position_embeddings.weight')), ctx:const({ 0 }, 'i64'), L,
      ctx:const({ 0 }, 'i64') }, nil, { dtype = ctx.float, shape = { ids.shape[2], H } })
    x = ctx:op('Add', { x, pos }, nil, fdt)
    local tt_w = ctx:param(field(ctx, e, 'token_type_embeddings.weight'))
    local tt
    if types then
      tt = ctx:op('Gather', { tt_w, types }, { axis = 0 }, fdt)
    else
      tt = ctx:op('Gather', { tt_w, ctx:const({ 0 }, 'i64') }, { axis = 0 }, { dtype = ctx.float, shape = { 1, H } })
    end
    x = ctx:op('Add', { x, tt }, nil, fdt)
    return layer_norm(ctx, field(ctx, e, 'LayerNorm'), 'LayerNorm', x)
  end

  -- attention_mask B x S (1 = attend, any dtype) -> additive B x 1 x 1 x S (extended_attention_mask).
  local function additive_mask(ctx, mask)
    local B, S = mask.shape[1], mask.shape[2]
    local keep = ctx:op('Cast', { mask }, { to = core_elem(ctx.float) }, { dtype = ctx.float, shape = { B, S } })
    local drop = ctx:op('Sub', { ctx:const(1.0, 'float', {}), keep }, nil, like(keep))
    local add = ctx:op('Mul', { drop, ctx:const(LOWEST[ctx.float], 'float', {}) }, nil, like(keep))
    return ctx:op('Unsqueeze', { add, ctx:const({ 1, 2 }, 'i64') }, nil, like(keep, { B, 1, 1, S }))
  end

  -- BertSelfAttention: softmax(q k^T / sqrt(hd) + mask) v over heads.
  local function self_attention(ctx, sa, h, mask)
    local B, L, H = h.shape[1], h.shape[2], h.shape[3]
    local nh, hd = sa.num_heads, sa.head_dim
    if not (nh and hd) then fail("module '%s' has no num_heads/head_dim", ctx.scope) end
    local split = ctx:const({ 0, 0, nh, hd }, 'i64')
    local function heads(path, perm, shape)
      local y = linear(ctx, field(ctx, sa, path), path, h)
      y = ctx:op('Reshape', { y, split }, nil, like(y, { B, L, nh, hd }))
      return ctx:op('Transpose', { y }, { perm = perm }, like(y, shape))
    end
    local q = heads('query', { 0, 2, 1, 3 }, { B, nh, L, hd })
    local kt = heads('key', { 0, 2, 3, 1 }, { B, nh, hd, L })
    local v = heads('value', { 0, 2, 1, 3 }, { B, nh, L, hd })
    local scores = ctx:op('MatMul', { q, kt }, nil, like(q, { B, nh, L, L }))
    scores = ctx:op('Mul', { scores, ctx:const(1 / math.sqrt(hd), 'float', {}) }, nil, like(scores))
    if mask then scores = ctx:op('Add', { scores, mask }, nil, like(scores)) end
    local attn = ctx:op('Softmax', { scores }, { axis = -1 }, like(scores))
    local out = ctx:op('MatMul', { attn, v }, nil, like(v))
    out = ctx:op('Transpose', { out }, { perm = { 0, 2, 1, 3 } }, like(out, { B, L, nh, hd }))
    return ctx:op('Reshape', { out, ctx:const({ 0, 0, H }, 'i64') }, nil, like(out, { B, L, H }))
  end

  -- BertSelfOutput / BertOutput: LayerNorm(dense(x) + residual).
  local function residual_output(ctx, o, x, residual)
    local y = linear(ctx, field(ctx, o, 'dense'), 'dense', x)
    y = ctx:op('Add', { y, residual }, nil, like(y))
    return layer_norm(ctx, field(ctx, o, 'LayerNorm'), 'LayerNorm', y)
  end

  local function bert_layer(ctx, cfg, l, h, mask)
    local a = ctx:within('attention', function()
      local ctxv = ctx:within('self', self_attention, ctx, field(ctx, l, 'attention.self'), h, mask)
      return ctx:within('output', residual_output, ctx, field(ctx, l, 'attention.output'), ctxv, h)
    end)
    local i = ctx:within('intermediate', function()
      return act(ctx, cfg, linear(ctx, field(ctx, l, 'intermediate.dense'), 'dense', a))
    end)
    return ctx:within('output', residual_output, ctx, field(ctx, l, 'output'), i, a)
  end

  -- BertModel: -> sequence_output B x L x H, pooled_output B x H (without a pooler: nil).
  local function bert_model(ctx, m, ids, types, mask)
    local cfg = m.config
    local h = ctx:within('embeddings', embeddings, ctx, field(ctx, m, 'embeddings'), ids, types)
    local add = mask and ctx:within('embeddings', additive_mask, ctx, mask) or nil
    for i, l in ipairs(field(ctx, m, 'encoder.layer')) do
      h = ctx:within('encoder.layer.' .. (i - 1), bert_layer, ctx, cfg, l, h, add)
    end
    if not m.pooler then return h end
    local pooled = ctx:within('pooler', function()
      local first = ctx:op('Gather', { h, ctx:const(0, 'i64', {}) }, { axis = 1 }, like(h, { h.shape[1], h.shape[3] }))
      local y = linear(ctx, m.pooler.dense, 'dense', first)
      return ctx:op('Tanh', { y }, nil, like(y))
    end)
    return h, pooled
  end
  E[bert.BertModel] = bert_model

  E[bert.BertForSequenceClassification] = function(ctx, m, ids, types, mask)
    local _, pooled = ctx:within('bert', bert_model, ctx, field(ctx, m, 'bert'), ids, types, mask)
    if not pooled then fail("module '%s.bert' has no pooler", ctx.scope) end
    return linear(ctx, field(ctx, m, 'classifier'), 'classifier', pooled) -- dropout: the identity
  end

  E[bert.BertForPreTraining] = function(ctx, m, ids, types, mask, positions)
    local cfg = m.config
    local seq, pooled = ctx:within('bert', bert_model, ctx, field(ctx, m, 'bert'), ids, types, mask)
    if not pooled then fail("module '%s.bert' has no pooler", ctx.scope) end
    if positions then
      -- bert.gather_positions: rows `positions` (B x P) of each sequence -> B x P x H
      local B, P, H = seq.shape[1], positions.shape[2], seq.shape[3]
      local idx = positions
      if idx.dtype ~= 'i64' then
        idx = ctx:op('Cast', { idx }, { to = core_elem('i64') }, { dtype = 'i64', shape = positions.shape })
      end
      idx = ctx:op('Unsqueeze', { idx, ctx:const({ 2 }, 'i64') }, nil, { dtype = 'i64', shape = { B, P, 1 } })
      seq = ctx:op('GatherND', { seq, idx }, { batch_dims = 1 }, like(seq, { B, P, H }))
    end
    local scores = ctx:within('cls.predictions', function()
      local p = field(ctx, m, 'cls.predictions')
      local t = ctx:within('transform', function()
        local tr = field(ctx, p, 'transform')
        local y = act(ctx, cfg, linear(ctx, field(ctx, tr, 'dense'), 'dense', seq))
        return layer_norm(ctx, field(ctx, tr, 'LayerNorm'), 'LayerNorm', y)
      end)
      -- the decoder's weight is the word embedding table (tied): one initializer, transposed
      -- by a node rather than stored twice
      local dec = field(ctx, p, 'decoder')
      local wv = ctx:param(dec.weight)
      local V = dec.weight.shape[1]
      local wt = ctx:within('decoder', function()
        return ctx:op('Transpose', { wv }, { perm = { 1, 0 } }, { dtype = wv.dtype, shape = { wv.shape[2], V } })
      end)
      local shape = copy(t.shape)
      shape[#shape] = V
      local y = ctx:within('decoder', function() return ctx:op('MatMul', { t, wt }, nil, like(t, shape)) end)
      return ctx:within('decoder', function() return ctx:op('Add', { y, ctx:param(dec.bias) }, nil, like(y)) end)
    end)
    local nsp = linear(ctx, field(ctx, m, 'cls.seq_relationship'), 'cls.seq_relationship', pooled)
    return scores, nsp
  end

  -- Inputs: input_ids, token_type_ids, attention_mask (B x L each, any of the last two absent),
  -- and for pretraining masked_positions (B x P); outputs named as Hugging Face's.
  local function bert_root(outputs, with_positions)
    return function(model, examples, n)
      local ids = examples[1]
      if not (ids and ids.ndim == 2 and (ids.dtype == 'i64' or ids.dtype == 'i32')) then
        fail('BERT takes input_ids as a B x L i64 or i32 tensor first, got %s',
          ids and (ids.ndim .. '-D ' .. ids.dtype) or 'none')
      end
      local max = with_positions and 4 or 3
      if n > max then fail('%s takes at most %d inputs, got %d', getmetatable(model).__name, max, n) end
      local bl = { 'batch', 'sequence' }
      local ins = { { 'input_ids', bl }, { 'token_type_ids', bl }, { 'attention_mask', bl },
        { 'masked_positions', { 'batch', 'predictions' } } }
      local outs = outputs
      if outputs[2] == 'pooler_output' and not model.pooler then outs = { outputs[1] } end
      return { inputs = ins, outputs = outs }
    end
  end
  roots[bert.BertModel] = bert_root({ 'last_hidden_state', 'pooler_output' }, false)
  roots[bert.BertForSequenceClassification] = bert_root({ 'logits' }, false)
  roots[bert.BertForPreTraining] = bert_root({ 'prediction_logits', 'seq_relationship_logits' }, true)
end

return M
