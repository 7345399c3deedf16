-- tests/lua/gpu_log.lua: log.topk_correct on CUDA logits against the CPU (label `gpu`): the
-- same counts for f32, f16 and bf16 logits with many ties, labels given on the CPU or the GPU,
-- and a Meter fed one-element CUDA tensors.
local T = require 'testlib'
T.cuda_or_skip()
local v100 = require 'v100'
local log = require 'v100.log'

T.test('topk_correct: CUDA counts equal the CPU counts (ties, NaN, every float dtype)', function()
  local cast = {f32 = 'float', f16 = 'half', bf16 = 'bfloat16'}
  for _, dt in ipairs{'f32', 'f16', 'bf16'} do
    local x = (v100.rand{257, 20} * 4):floor()               -- few distinct values: many ties
    x = x:masked_fill(v100.rand{257, 20}:lt(0.01), 0 / 0)   -- and some NaN scores
    x = x[cast[dt]](x)
    local y = (v100.rand{257} * 20):floor():long()
    local want = log.topk_correct(x, y, {1, 5, 10})
    T.eq(log.topk_correct(x:to('cuda'), y:to('cuda'), {1, 5, 10}), want, dt .. ', labels on the GPU')
    T.eq(log.topk_correct(x:to('cuda'), y, {1, 5, 10}), want, dt .. ', labels on the CPU')
  end
  local x = v100.randn{64, 10}
  local y = x:argmax(2)
  T.eq(log.topk_correct(x:to('cuda'), y:to('cuda'), {1})[1], 64, 'argmax labels: all top-1')
end)

T.test('Meter and reduce take one-element CUDA tensors', function()
  local m = log.Meter()
  m:update(v100.tensor(2.5):to('cuda'), 2)
  T.eq(m.avg, 2.5)
  T.eq(log.reduce({a = v100.tensor(3):to('cuda')}).a, 3)
end)

T.run()
