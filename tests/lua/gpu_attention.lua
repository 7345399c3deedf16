-- tests/lua/gpu_attention.lua: the fused attention's CUDA kernels (kernels/cuda/cuda_attention.cu)
-- against the CPU reference (kernels/cpu/cpu_attention.c) on the same f16/bf16 inputs: outputs,
-- log-sum-exp, gradients, the dropout bits (bit for bit), masks, causal, tails of 64-row tiles,
-- strided heads, and fresh dropout masks in every replay of a CUDA graph. Then a BERT layer's
-- problem timed fused against the composition.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local F = nn.functional
local core = require 'v100.core'

T.cuda_or_skip()

-- ||a - b|| / ||b|| in f64 on the CPU; ||b|| floored at 1e-2 * sqrt(numel) (an RMS of 0.01), so
-- that a gradient that is 0 in exact arithmetic (one key: dq = 0) compares by its rounding noise
local function relerr(a, b)
  local x, y = a:to('cpu'):double(), b:to('cpu'):double()
  local d = (x - y):norm():item()
  local n = y:norm():item()
  return d / math.max(n, 1e-2 * math.sqrt(y:numel()))
end

local function check_rel(a, b, tol, what)
  local e = relerr(a, b)
  if not (e <= tol) then error(string.format('%s: relative error %.3g > %.3g', what, e, tol), 2) end
  return e
end

local TOL = { bf16 = 1e-2, f16 = 2e-3 }

-- One problem on both devices through the raw entry points: forward, then backward from a fixed
-- dout. The CPU gets the very same half-precision inputs (and the same keep bits).
local function compare(dt, B, H, L, S, opts)
  opts = opts or {}
  local E = 64
  local q = v100.randn({ B, H, L, E }):to(dt)
  local k = v100.randn({ B, H, S, E }):to(dt)
  local v = v100.randn({ B, H, S, E }):to(dt)
  local mask = opts.mask and opts.mask(B, H, L, S) or nil
  local scale, p, causal = 1 / 8, opts.dropout or 0, opts.causal or false
  local dq_ = function(t) return t and t:to('cuda') or nil end
  v100.manual_seed(opts.seed or 7)
  local o_g, lse_g, keep_g = core._nn.attention_forward(dq_(q), dq_(k), dq_(v), dq_(mask), scale, p, causal)
  v100.manual_seed(opts.seed or 7)
  local o_c, lse_c, keep_c = core._nn.attention_forward(q, k, v, mask, scale, p, causal)
  local what = string.format('%s B%d H%d L%d S%d%s%s%s', dt, B, H, L, S, mask and ' mask' or '',
    causal and ' causal' or '', p > 0 and (' dropout ' .. p) or '')
  if p > 0 then T.alleq(keep_g:to('cpu'), keep_c, what .. ': keep bits') end
  check_rel(o_g, o_c, TOL[dt], what .. ': out')
  T.allclose(lse_g:to('cpu'), lse_c, 2e-3, 2e-3, what .. ': lse')
  local dout = v100.randn({ B, H, L, E }):to(dt)
  local g = { core._nn.attention_backward(dq_(q), dq_(k), dq_(v), dq_(mask), o_g, dq_(dout), lse_g, keep_g, scale, p, causal) }
  local c = { core._nn.attention_backward(q, k, v, mask, o_c, dout, lse_c, keep_c, scale, p, causal) }
  for i, n in ipairs({ 'dq', 'dk', 'dv' }) do check_rel(g[i], c[i], 2 * TOL[dt], what .. ': ' .. n) end
end

T.test('fused kernels = CPU reference: bf16 and f16, whole tiles and tails', function()
  for _, dt in ipairs({ 'bf16', 'f16' }) do
    compare(dt, 2, 3, 128, 128)
    compare(dt, 1, 2, 77, 100)
    compare(dt, 2, 2, 200, 65)
    compare(dt, 1, 1, 1, 1)
  end
end)

T.test('masks (per-key f32 and bf16, full, broadcast) and causal', function()
  local function keymask(dtype)
    return function(B, _, _, S)
      local m = v100.zeros({ B, 1, 1, S })
      m:narrow(4, S - 9, 10):fill_(-3.3895313892515355e38) -- padding keys, HF's lowest-value mask
      return m:to(dtype)
    end
  end
  compare('bf16', 2, 2, 96, 96, { mask = keymask('f32') })
  compare('bf16', 2, 2, 96, 96, { mask = keymask('bf16') })
  compare('f16', 2, 2, 70, 130, { mask = function(B, H, L, S) return v100.randn({ B, H, L, S }) end })
  compare('bf16', 1, 2, 50, 60, { mask = function(_, _, L, S) return v100.randn({ L, S }) end })
  compare('bf16', 2, 2, 130, 130, { causal = true })
  compare('f16', 1, 3, 100, 100, { causal = true, mask = keymask('f32') })
end)

T.test('dropout: the same bits as the CPU (the bernoulli stream), values and gradients', function()
  compare('bf16', 2, 2, 128, 128, { dropout = 0.1, seed = 3 })
  compare('f16', 1, 2, 99, 77, { dropout = 0.5, seed = 4 })
  compare('bf16', 1, 2, 64, 64, { dropout = 0.3, causal = true, seed = 5 })
end)

T.test('strided heads of a projection through autograd; fallback for other head dims', function()
  local B, L, H, E = 2, 100, 4, 64
  local x = v100.randn({ B, L, 3 * H * E }, { device = 'cuda', dtype = 'bf16' }):requires_grad_()
  local function run(impl)
    local function h(i) return x:narrow(3, i * H * E + 1, H * E):view{ B, L, H, E }:transpose(2, 3) end
    local out = F.scaled_dot_product_attention(h(0), h(1), h(2), { impl = impl })
    local y = out:transpose(2, 3):reshape{ B, L, H * E }
    local loss = (y:float() * y:float()):sum()
    x.grad = nil
    loss:backward()
    return y:detach(), x.grad:clone(), out
  end
  local yf, gf, out = run('fused')
  T.ok(out:transpose(2, 3):is_contiguous(), 'heads merge back without a copy')
  local ym, gm = run('math')
  check_rel(yf, ym, 1e-2, 'out')
  check_rel(gf, gm, 2e-2, 'dx')
  -- head dim 32: the CUDA kernels decline, auto falls back to the composition
  local q = v100.randn({ 1, 2, 10, 32 }, { device = 'cuda', dtype = 'bf16' })
  T.ok(not core._nn.attention_supported(q, q, q, nil, 0.2, 0, false), 'head dim 32 is not taken')
  T.ok(core._nn.attention_supported(v100.randn({ 1, 2, 10, 64 }, { device = 'cuda', dtype = 'bf16' }),
    v100.randn({ 1, 2, 10, 64 }, { device = 'cuda', dtype = 'bf16' }),
    v100.randn({ 1, 2, 10, 64 }, { device = 'cuda', dtype = 'bf16' }), nil, 0.2, 0, false), 'head dim 64 is')
  T.ok(not core._nn.attention_supported(v100.randn({ 1, 2, 10, 64 }, { device = 'cuda' }),
    v100.randn({ 1, 2, 10, 64 }, { device = 'cuda' }), v100.randn({ 1, 2, 10, 64 }, { device = 'cuda' }), nil, 0.2, 0,
    false), 'f32 is not')
  check_rel(F.scaled_dot_product_attention(q, q, q), F.scaled_dot_product_attention(q, q, q, { impl = 'math' }), 1e-2, 'E=32')
end)

T.test('CUDA graph: every replay draws a fresh dropout mask, equal to the eager run of that state', function()
  local q = v100.randn({ 2, 2, 64, 64 }, { device = 'cuda', dtype = 'bf16' })
  local function fn() return F.scaled_dot_product_attention(q, q, q, { dropout = 0.2 }):float():sum() end
  v100.manual_seed(10)
  local eager = {}
  for i = 1, 4 do eager[i] = fn():item() end
  v100.manual_seed(10)
  local g = v100.graph(fn, { warmup = 1 })
  -- warm-up and capture consumed the first draw(s): replay i corresponds to eager draw 1 + i
  local replays = {}
  for i = 1, 3 do replays[i] = g:replay():item() end
  g:close()
  T.ok(replays[1] ~= replays[2] and replays[2] ~= replays[3], 'fresh masks per replay')
  for i = 1, 3 do
    T.ok(math.abs(replays[i] - eager[i + 1]) <= 1e-3 * math.abs(eager[i + 1]),
      string.format('replay %d = eager draw %d (%.6g vs %.6g)', i, i + 1, replays[i], eager[i + 1]))
  end
end)

T.test('BERT-Large attention (B 32, H 16, L 128, bf16, dropout 0.1): the fused op holds a fraction of the composition\'s memory', function()
  -- (times: bench/attention.lua, which runs alone; the tests here share the GPU)
  local B, H, L, E = 32, 16, 128, 64
  local x = v100.randn({ B, L, 3 * H * E }, { device = 'cuda', dtype = 'bf16' }):requires_grad_()
  local mask = v100.zeros({ B, 1, 1, L }, { device = 'cuda', dtype = 'bf16' })
  local function peak(impl)
    v100.cuda.synchronize()
    local before = v100.memory.stats().allocated
    v100.memory.reset_peak()
    local function h(i) return x:narrow(3, i * H * E + 1, H * E):view{ B, L, H, E }:transpose(2, 3) end
    local out = F.scaled_dot_product_attention(h(0), h(1), h(2), { impl = impl, mask = mask, dropout = 0.1 })
    local loss = out:transpose(2, 3):reshape{ B, L, H * E }:float():sum()
    loss:backward()
    x.grad = nil
    v100.cuda.synchronize()
    return v100.memory.stats().peak_allocated - before
  end
  peak('fused') -- workspaces and plans made once
  local fused, math_ = peak('fused'), peak('math')
  -- the composition saves at least two B x H x L x L tensors for its backward (the probabilities
  -- and the dropout mask, 16 MiB each here); the fused op the output, the rows' lse and one bit
  -- per score
  local scores = B * H * L * L * 2
  T.ok(math_ - fused >= 2 * scores, string.format('fused peak %.1f MiB, the composition\'s %.1f MiB (at least %.1f MiB more expected)',
    fused / 2 ^ 20, math_ / 2 ^ 20, 2 * scores / 2 ^ 20))
end)

T.run()
