-- tests/lua/test_attention.lua: the fused scaled-dot-product attention on the CPU (the reference
-- of the CUDA kernels): against the composition of tensor ops (values, gradients, masks, causal,
-- dropout drawn as v100.bernoulli draws), f64 gradient checks, layouts, errors.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.functional
local core = require 'v100.core'
local gradcheck = v100.autograd.gradcheck

local function heads(B, H, N, E, dtype)
  return v100.randn({ B, H, N, E }, { dtype = dtype or 'f64' }):requires_grad_()
end

-- Values and the gradients of sum(out * w) of both implementations.
local function both(q, k, v, opts, seed)
  local res = {}
  for _, impl in ipairs({ 'fused', 'math' }) do
    local o = {}
    for key, val in pairs(opts or {}) do o[key] = val end
    o.impl = impl
    local qq, kk, vv = q:detach():requires_grad_(), k:detach():requires_grad_(), v:detach():requires_grad_()
    if seed then v100.manual_seed(seed) end
    local out = F.scaled_dot_product_attention(qq, kk, vv, o)
    v100.manual_seed(99)
    local w = v100.randn(out.shape, { dtype = out.dtype })
    local loss = (out * w):sum()
    loss:backward()
    res[impl] = { out = out:detach(), dq = qq.grad, dk = kk.grad, dv = vv.grad }
  end
  return res.fused, res.math
end

local function same(a, b, tol, what)
  T.allclose(a.out, b.out, tol, tol, what .. ': out')
  T.allclose(a.dq, b.dq, tol, tol, what .. ': dq')
  T.allclose(a.dk, b.dk, tol, tol, what .. ': dk')
  T.allclose(a.dv, b.dv, tol, tol, what .. ': dv')
end

T.test('fused = composed: values and gradients, f64 and f32, L != S', function()
  for _, dt in ipairs({ 'f64', 'f32' }) do
    local q, k, v = heads(2, 3, 5, 4, dt), heads(2, 3, 7, 4, dt), heads(2, 3, 7, 4, dt)
    local a, b = both(q, k, v)
    same(a, b, dt == 'f64' and 1e-12 or 2e-5, dt)
  end
end)

T.test('masks: per-key B x 1 x 1 x S, full B x H x L x S, broadcast L x S, bool; causal; a scale', function()
  local B, H, L, S, E = 2, 2, 6, 6, 3
  local q, k, v = heads(B, H, L, E), heads(B, H, S, E), heads(B, H, S, E)
  local keymask = v100.zeros({ B, 1, 1, S }, { dtype = 'f64' })
  keymask:narrow(4, 5, 2):fill_(-1e30) -- the last two keys are padding
  local full = v100.randn({ B, H, L, S }, { dtype = 'f64' })
  local ls = v100.randn({ L, S }, { dtype = 'f64' })
  local boolmask = v100.rand({ B, 1, L, S }):gt(0.3)
  for i = 1, L do boolmask:narrow(3, i, 1):narrow(4, i, 1):fill_(1) end -- no row left empty
  for name, opts in pairs({ key = { mask = keymask }, full = { mask = full }, ls = { mask = ls },
    bool = { mask = boolmask }, causal = { causal = true }, causal_key = { causal = true, mask = keymask },
    scale = { scale = 0.3, mask = full } }) do
    local a, b = both(q, k, v, opts)
    same(a, b, 1e-12, name)
  end
  -- f32 masks (the kernels read f32) under f64 q/k/v: converted, same values
  local a, b = both(q, k, v, { mask = keymask:float() })
  same(a, b, 1e-12, 'f32 mask')
end)

T.test('dropout: the same mask as v100.bernoulli at the same generator state; keep bits', function()
  local q, k, v = heads(2, 2, 9, 4), heads(2, 2, 11, 4), heads(2, 2, 11, 4)
  local a, b = both(q, k, v, { dropout = 0.3 }, 1234)
  same(a, b, 1e-12, 'dropout 0.3')
  -- the raw op's keep bits against bernoulli(1 - p) drawn from the same state
  v100.manual_seed(77)
  local _, lse, keep = core._nn.attention_forward(q:detach(), k:detach(), v:detach(), nil, 0.5, 0.25, false)
  T.eq(keep.dtype, 'u8')
  T.eq(keep.shape, { 2, 2, 9, 2 })
  T.eq(lse.shape, { 2, 2, 9 })
  v100.manual_seed(77)
  local m = v100.bernoulli({ 2, 2, 9, 11 }, 0.75, { dtype = 'u8' })
  local bits = {}
  local kt = T.values(keep)
  local mv = m:view{ -1 }
  local nkept = 0
  for r = 0, 2 * 2 * 9 - 1 do
    for j = 0, 10 do
      local byte = kt[r * 2 + j // 8 + 1]
      local bit = (byte >> (j % 8)) & 1
      bits[#bits + 1] = bit
      nkept = nkept + bit
    end
    -- the padding bits of the last byte stay 0
    T.eq(kt[r * 2 + 2] >> 3, 0, 'padding bits')
  end
  T.alleq(v100.tensor(bits, { dtype = 'u8' }), mv, 'keep bits = bernoulli')
  T.ok(nkept > 0.6 * #bits and nkept < 0.9 * #bits, 'about 75% kept')
  -- the op advanced the generator by as many counters as bernoulli does: the next draws agree
  v100.manual_seed(5)
  core._nn.attention_forward(q:detach(), k:detach(), v:detach(), nil, 0.5, 0.25, false)
  local after_attn = v100.rand({ 8 })
  v100.manual_seed(5)
  v100.bernoulli({ 2, 2, 9, 11 }, 0.75)
  T.alleq(v100.rand({ 8 }), after_attn, 'generator offset')
end)

T.test('gradcheck (f64): plain, masked + causal, with dropout (fixed by the seed)', function()
  local q, k, v = heads(1, 2, 4, 3), heads(1, 2, 5, 3), heads(1, 2, 5, 3)
  local mask = v100.randn({ 1, 1, 1, 5 }, { dtype = 'f64' })
  T.ok(gradcheck(function(a, b, c) return F.scaled_dot_product_attention(a, b, c, { impl = 'fused' }) end, { q, k, v }))
  T.ok(gradcheck(function(a, b, c)
    return F.scaled_dot_product_attention(a, b, c, { impl = 'fused', mask = mask, causal = true })
  end, { q, k, v }))
  T.ok(gradcheck(function(a, b, c)
    v100.manual_seed(3)
    return F.scaled_dot_product_attention(a, b, c, { impl = 'fused', dropout = 0.4 })
  end, { q, k, v }))
end)

T.test('layouts: strided heads of a projection in, B x L x H x E memory out', function()
  local B, L, H, E = 2, 5, 3, 4
  local x = v100.randn({ B, L, 3 * H * E })
  local function h(i) return x:narrow(3, i * H * E + 1, H * E):view{ B, L, H, E }:transpose(2, 3) end
  local q, k, v = h(0), h(1), h(2)
  T.ok(not q:is_contiguous())
  local out = F.scaled_dot_product_attention(q, k, v, { impl = 'fused' })
  T.eq(out.shape, { B, H, L, E })
  T.ok(out:transpose(2, 3):is_contiguous(), 'heads merge back without a copy')
  T.allclose(out, F.scaled_dot_product_attention(q, k, v, { impl = 'math' }), 2e-6, 2e-6)
  -- the auto path takes the fused op for 4-D problems, the composition otherwise (3-D)
  T.allclose(F.scaled_dot_product_attention(q:contiguous():view{ B * H, L, E }, k:contiguous():view{ B * H, L, E },
    v:contiguous():view{ B * H, L, E }), out:contiguous():view{ B * H, L, E }, 2e-6, 2e-6)
end)

T.test('a query row whose every key is masked with -inf: zeros and zero gradients (fused)', function()
  local q, k, v = heads(1, 1, 3, 2), heads(1, 1, 4, 2), heads(1, 1, 4, 2)
  local mask = v100.zeros({ 1, 1, 3, 4 }, { dtype = 'f64' })
  mask:narrow(3, 2, 1):fill_(-math.huge)
  local out = F.scaled_dot_product_attention(q, k, v, { impl = 'fused', mask = mask })
  T.allclose(out:narrow(3, 2, 1), v100.zeros({ 1, 1, 1, 2 }, { dtype = 'f64' }), 0, 0)
  out:sum():backward()
  T.allclose(q.grad:narrow(3, 2, 1), v100.zeros({ 1, 1, 1, 2 }, { dtype = 'f64' }), 0, 0)
  for _, g in ipairs({ q.grad, k.grad, v.grad }) do
    local mx = g:abs():max():item()
    T.ok(mx == mx and mx < math.huge, 'finite gradients')
  end
end)

T.test('half dtypes on the CPU and autocast', function()
  local q, k, v = heads(1, 2, 6, 8, 'f32'), heads(1, 2, 6, 8, 'f32'), heads(1, 2, 6, 8, 'f32')
  local ref = F.scaled_dot_product_attention(q, k, v, { impl = 'math' })
  for _, dt in ipairs({ 'bf16', 'f16' }) do
    local out = F.scaled_dot_product_attention(q:to(dt), k:to(dt), v:to(dt), { impl = 'fused' })
    T.eq(out.dtype, dt)
    T.allclose(out:float(), ref:detach(), 3e-2, 3e-2, dt)
  end
  local amp = require 'v100.amp'
  local out = amp.autocast(function()
    return F.scaled_dot_product_attention(q, k, v, { impl = 'fused' })
  end, { dtype = 'bf16' })
  T.eq(out.dtype, 'bf16', 'autocast runs attention in the half dtype')
  out:float():sum():backward()
  T.eq(q.grad.dtype, 'f32', 'gradients reach the f32 inputs')
end)

T.test('errors name the operands', function()
  local q, k, v = heads(1, 2, 3, 4), heads(1, 2, 5, 4), heads(1, 2, 5, 4)
  T.raises(function() F.scaled_dot_product_attention(q, heads(1, 2, 5, 3), v, { impl = 'fused' }) end,
    { 'scaled_dot_product_attention', 'q' })
  T.raises(function() F.scaled_dot_product_attention(q, k, v:float(), { impl = 'fused' }) end,
    { 'scaled_dot_product_attention', 'one float dtype' })
  T.raises(function() F.scaled_dot_product_attention(q, k, v, { impl = 'fused', dropout = 1 }) end,
    'dropout must be in [0, 1)')
  T.raises(function()
    F.scaled_dot_product_attention(q, k, v, { impl = 'fused', mask = v100.zeros({ 1, 2, 3, 4 }, { dtype = 'f64' }) })
  end, 'broadcastable to B x H x L x S')
  T.raises(function() F.scaled_dot_product_attention(q:view{ 2, 3, 4 }, k:view{ 2, 5, 4 }, v:view{ 2, 5, 4 }, { impl = 'fused' }) end,
    'B x H x L x E')
  T.raises(function() F.scaled_dot_product_attention(q, k, v, { impl = 'flash' }) end, "impl must be 'auto'")
  local o, lse = core._nn.attention_forward(q, k, v, nil, 0.5, 0, false)
  T.raises(function() core._nn.attention_backward(q, k, v, nil, o, o, lse, nil, 0.5, 0.2, false) end, 'keep bits')
end)

T.test('BERT: the fused and the composed attention give the same outputs and gradients', function()
  local bert = require 'v100.models.bert'
  v100.manual_seed(11)
  local cfg = bert.config('base', { num_hidden_layers = 2, hidden_size = 32, num_attention_heads = 4,
    intermediate_size = 64, vocab_size = 100, hidden_dropout_prob = 0, attention_probs_dropout_prob = 0.1 })
  local m = bert.BertModel(cfg)
  local idt = {}
  for i = 1, 27 do idt[i] = math.random(0, 99) end
  local ids = v100.tensor(idt, { dtype = 'i64' }):view{ 3, 9 }
  local mask = v100.ones({ 3, 9 }, { dtype = 'i64' })
  mask:narrow(2, 7, 3):zero_()
  local outs, grads = {}, {}
  for _, impl in ipairs({ 'auto', 'math' }) do
    F.attention_impl = impl
    m:zero_grad()
    v100.manual_seed(5)
    local h = m(ids, nil, mask)
    h:sum():backward()
    outs[impl] = h:detach()
    grads[impl] = m.encoder.layer[1].attention.self.query.weight.grad:clone()
  end
  F.attention_impl = 'auto'
  T.allclose(outs.auto, outs.math, 1e-5, 1e-5, 'hidden states')
  T.allclose(grads.auto, grads.math, 1e-4, 1e-5, 'query weight gradient')
end)

T.run()
