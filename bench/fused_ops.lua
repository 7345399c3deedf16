-- bench/fused_ops.lua: the fused dropout and softmax cross entropy (runtime/nn/dropout.c,
-- runtime/nn/xent.c) against the compositions they replaced, on BERT-Large's shapes, forward and
-- backward; bench/fused_ops.py runs PyTorch's ops on the same problems under the same names.
--
--   dropout_bf16_16384x1024          y = dropout(x, 0.1) and dx (BERT-Large's hidden states at
--                                    batch 128 x seq 128), ms per forward + backward
--   xent_bf16_2560x30522             the masked MLM head's loss (20 predictions per 128 tokens):
--                                    f32 loss from bf16 scores and the bf16 dscores
--   xent_bf16_16384x30522_fullhead   the full head (every position, 15% of labels real)
-- Each also as `<name>_composed`: the op as it was composed before (bernoulli mask in x's dtype,
-- scaled and multiplied; scores:float(), log_softmax, gather, the reduction), the before/after.
--
-- Method: `--warmup` untimed runs, then `--runs` runs, each timed with CUDA events around the
-- forward and the backward (autograd.grad) alone; the median in ms.
--
-- usage: v100lua bench/fused_ops.lua [--runs 20] [--warmup 3] [--only dropout|xent]
local v100 = require 'v100'
local F = require('v100.nn').F

local opts = { runs = 20, warmup = 3 }
local i = 1
while i <= #arg do
  local k, v = arg[i], arg[i + 1]
  if k == '--runs' then opts.runs = assert(math.tointeger(tonumber(v)), '--runs N')
  elseif k == '--warmup' then opts.warmup = assert(math.tointeger(tonumber(v)), '--warmup N')
  elseif k == '--only' then opts.only = v
  else error('fused_ops.lua: unknown option ' .. tostring(k)) end
  i = i + 2
end
if not v100.cuda.is_available() then
  io.stderr:write('fused_ops.lua: no CUDA device; these benchmarks are GPU only\n')
  os.exit(1)
end
v100.manual_seed(1)

local function median(xs)
  table.sort(xs)
  local n = #xs
  return n % 2 == 1 and xs[(n + 1) // 2] or 0.5 * (xs[n // 2] + xs[n // 2 + 1])
end

-- ms of fn() (forward + backward), median over the runs
local function time_op(fn)
  local e0, e1 = v100.cuda.Event { timing = true }, v100.cuda.Event { timing = true }
  for _ = 1, opts.warmup do fn() end
  v100.cuda.synchronize()
  local ms = {}
  for r = 1, opts.runs do
    e0:record()
    fn()
    e1:record()
    e1:synchronize()
    ms[r] = e0:elapsed_time(e1)
  end
  collectgarbage()
  return median(ms)
end

local function report(name, ms) print(string.format('BENCH %s %.4f ms', name, ms)) end

local function dropout_composed(x, p)
  local mask = v100.bernoulli(x.shape, 1 - p, { dtype = x.dtype, device = x.device })
  mask:mul_(1 / (1 - p))
  return x * mask
end

local function ce_composed(logits, target)
  local logp = logits:log_softmax(2)
  local valid = target:ne(-100)
  local nll = (-logp:gather(2, v100.where(valid, target, 0):unsqueeze(2)):squeeze(2)):masked_fill(valid:logical_not(), 0)
  return nll:sum() / valid:sum():to(nll.dtype)
end

if opts.only == nil or opts.only == 'dropout' then
  local x = v100.randn({ 16384, 1024 }, { device = 'cuda', dtype = 'bf16' }):requires_grad_()
  local dy = v100.randn({ 16384, 1024 }, { device = 'cuda', dtype = 'bf16' })
  local function bench(f)
    return time_op(function()
      local y = f(x, 0.1)
      local g = v100.autograd.grad({ y }, { x }, { dy })[1]
      y:free()
      g:free()
    end)
  end
  report('dropout_bf16_16384x1024', bench(function(t, p) return F.dropout(t, p, true) end))
  report('dropout_bf16_16384x1024_composed', bench(dropout_composed))
end

if opts.only == nil or opts.only == 'xent' then
  local V = 30522
  for _, c in ipairs { { 2560, 1.0, '' }, { 16384, 0.15, '_fullhead' } } do
    local N, frac = c[1], c[2]
    local x = (v100.randn({ N, V }, { device = 'cuda' }) * 2):to('bf16'):requires_grad_()
    local lab = (v100.rand({ N }, { device = 'cuda', dtype = 'f64' }) * V):to('i64')
    local keep = v100.rand({ N }, { device = 'cuda' }):lt(frac)
    lab = v100.where(keep, lab, -100)
    local function bench(f)
      return time_op(function()
        local loss = f()
        local g = v100.autograd.grad({ loss }, { x })[1]
        loss:free()
        g:free()
      end)
    end
    local name = string.format('xent_bf16_%dx%d%s', N, V, c[3])
    report(name, bench(function() return F.cross_entropy(x, lab, { ignore_index = -100, dtype = 'f32' }) end))
    report(name .. '_composed', bench(function() return ce_composed(x:float(), lab) end))
  end
end
