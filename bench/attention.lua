-- bench/attention.lua: the fused attention alone (F.scaled_dot_product_attention, bf16, head dim
-- 64, BERT-Large's 16 heads), forward and forward + backward, with and without dropout, at
-- sequence 128 (batch 128) and 512 (batch 32): the same problems as bench/attention.py
-- (PyTorch's SDPA, which picks cuDNN's or its own flash kernels). Median of 20 runs timed with
-- CUDA events after 5 warm-up runs; prints `BENCH attn_<fw|fwbw>_s<L>_p<p> <ms> ms`.
--   usage: v100lua bench/attention.lua [--impl fused|math]
local v100 = require 'v100'
local F = require('v100.nn').functional

local impl = 'fused'
for i = 1, #arg do if arg[i] == '--impl' then impl = arg[i + 1] end end
if not v100.cuda.is_available() then error('bench/attention.lua needs a GPU') end

local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

for _, case in ipairs({ { 128, 128 }, { 32, 512 } }) do
  local B, L, H, E = case[1], case[2], 16, 64
  local opts = { device = 'cuda', dtype = 'bf16' }
  local q = v100.randn({ B, L, H, E }, opts):transpose(2, 3):requires_grad_()
  local k = v100.randn({ B, L, H, E }, opts):transpose(2, 3):requires_grad_()
  local v = v100.randn({ B, L, H, E }, opts):transpose(2, 3):requires_grad_()
  local mask = v100.zeros({ B, 1, 1, L }, opts)
  local dout = v100.randn({ B, H, L, E }, opts)
  for _, p in ipairs({ 0, 0.1 }) do
    for _, what in ipairs({ 'fw', 'fwbw' }) do
      local function run()
        if what == 'fw' then
          return v100.no_grad(function()
            return F.scaled_dot_product_attention(q, k, v, { mask = mask, dropout = p, impl = impl })
          end)
        end
        local out = F.scaled_dot_product_attention(q, k, v, { mask = mask, dropout = p, impl = impl })
        out:backward(dout)
        q.grad, k.grad, v.grad = nil, nil, nil
      end
      for _ = 1, 5 do run() end
      local times = {}
      for i = 1, 20 do
        local e0, e1 = v100.cuda.Event{ timing = true }, v100.cuda.Event{ timing = true }
        e0:record()
        run()
        e1:record()
        e1:synchronize()
        times[i] = e0:elapsed_time(e1)
      end
      print(string.format('BENCH attn_%s_s%d_p%g %.4f ms', what, L, p, median(times)))
    end
  end
end
