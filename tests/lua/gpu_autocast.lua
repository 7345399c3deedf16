-- tests/lua/gpu_autocast.lua: autocast (O1) on CUDA: the op table of tests/lua/test_autocast.lua
-- on cuda, each result's dtype as on the CPU and its values against the CPU's autocast run at the
-- half dtype's tolerance (fp16 1e-3, bf16 1e-2, relative), and the gradients of a small MLP step
-- on cuda against the CPU's; the weight cache counts the same on both devices.
local T = require 'testlib'
local v100 = require 'v100'
local F = require 'v100.nn.functional'
local amp = require 'v100.amp'

T.cuda_or_skip()

-- Inputs made once on the CPU (f32 unless said) and copied to each device.
local function inputs(specs)
  local out = {}
  for i, s in ipairs(specs) do out[i] = v100.randn(s[1], { dtype = s[2] or 'f32' }) end
  return out
end
local function on(dev, ts)
  local out = {}
  for i, t in ipairs(ts) do out[i] = t:to(dev) end
  return out
end

-- name, [tolerance factor,] expected class, input specs, fn(inputs) -> result. The factor widens
-- the half tolerance where f32 ops follow a half result (softmax, sums, normalisations): a 1-ulp
-- difference of the half GEMM (another summation order on cuBLAS/cuDNN) is amplified there, and
-- where a bias is added in the GEMM's epilogue before rounding (one rounding fewer on cuda).
local CASES = {
  { 'matmul', 'half', { { { 8, 16 } }, { { 16, 8 } } }, function(a) return a[1]:matmul(a[2]) end },
  { 'bmm', 'half', { { { 2, 8, 16 } }, { { 2, 16, 8 } } }, function(a) return a[1]:bmm(a[2]) end },
  { 'addmm', 2, 'half', { { { 8 } }, { { 4, 16 } }, { { 16, 8 } } },
    function(a) return v100.addmm(a[1], a[2], a[3]) end },
  { 'F.linear', 2, 'half', { { { 2, 4, 16 } }, { { 8, 16 } }, { { 8 } } },
    function(a) return F.linear(a[1], a[2], a[3]) end },
  { 'conv2d', 'half', { { { 2, 4, 8, 8 } }, { { 8, 4, 3, 3 } }, { { 8 } } },
    function(a) return F.conv2d(a[1], a[2], a[3], { padding = 1 }) end },
  { 'attention', 8, 'half', { { { 2, 8, 16 } }, { { 2, 8, 16 } }, { { 2, 8, 16 } } },
    function(a) return F.scaled_dot_product_attention(a[1], a[2], a[3]) end },
  { 'softmax', 8, 'f32', { { { 8, 16 } }, { { 16, 8 } } }, function(a) return a[1]:matmul(a[2]):softmax(-1) end },
  { 'log_softmax', 'f32', { { { 8, 16 }, 'bf16' } }, function(a) return a[1]:log_softmax(-1) end },
  { 'sum', 8, 'f32', { { { 8, 16 } }, { { 16, 8 } } }, function(a) return a[1]:matmul(a[2]):sum(2) end },
  { 'mean', 'f32', { { { 8, 16 }, 'f16' } }, function(a) return a[1]:mean(1) end },
  { 'exp', 'f32', { { { 8, 16 }, 'f16' } }, function(a) return a[1]:exp() end },
  { 'log', 'f32', { { { 8, 16 }, 'f16' } }, function(a) return a[1]:abs():log() end },
  { 'layer_norm', 8, 'f32', { { { 4, 16 } }, { { 16, 8 } }, { { 8 } }, { { 8 } } },
    function(a) return F.layer_norm(a[1]:matmul(a[2]), { 8 }, a[3], a[4]) end },
  { 'batch_norm', 8, 'half', { { { 2, 4, 6, 6 } }, { { 8, 4, 1, 1 } }, { { 8 } }, { { 8 } } },
    function(a)
      local x = F.conv2d(a[1], a[2])
      local dev = x.device
      return F.batch_norm(x, v100.zeros({ 8 }, { device = dev }), v100.ones({ 8 }, { device = dev }), a[3], a[4],
        true, 0.1, 1e-5)
    end },
  { 'cross_entropy', 8, 'f32', { { { 8, 16 } }, { { 16, 10 } } }, function(a)
    local target = v100.tensor({ 0, 3, 9, 1, 2, 5, 7, 4 }, { dtype = 'i64', device = a[1].device })
    return F.cross_entropy(a[1]:matmul(a[2]), target)
  end },
  { 'add of half and f32', 'f32', { { { 8, 16 }, 'f16' }, { { 8, 16 } } }, function(a) return a[1] + a[2] end },
}

local TOL = { fp16 = 1e-3, bf16 = 1e-2 }

for _, dt in ipairs { 'fp16', 'bf16' } do
  local half = dt == 'fp16' and 'f16' or 'bf16'
  for _, c0 in ipairs(CASES) do
    local c = c0
    local factor = 1
    if type(c[2]) == 'number' then
      factor = c[2]
      c = { c[1], c[3], c[4], c[5] }
    end
    T.test(string.format('autocast %s on cuda: %s runs in %s and matches the cpu', dt, c[1], c[2]), function()
      local cpu_in = inputs(c[3])
      local ref = amp.autocast(function() return c[4](cpu_in) end, { dtype = dt })
      local y = amp.autocast(function() return c[4](on('cuda', cpu_in)) end, { dtype = dt })
      T.eq(y.device, 'cuda:0')
      T.eq(y.dtype, c[2] == 'half' and half or 'f32', c[1])
      T.eq(y.dtype, ref.dtype, c[1] .. ': same dtype as on the cpu')
      T.tensor_close(y:to('cpu', 'f32'), ref:to('f32'), factor * TOL[dt], factor * TOL[dt], c[1])
    end)
  end
end

T.test('an MLP step under autocast on cuda: f32 gradients that match the cpu', function()
  for _, dt in ipairs { 'fp16', 'bf16' } do
    local init = inputs { { { 32, 16 } }, { { 32 } }, { { 10, 32 } }, { { 8, 16 } } }
    local target = v100.tensor({ 0, 3, 9, 1, 2, 5, 7, 4 }, { dtype = 'i64' })
    local function run(dev)
      local w1, b1, w2 = init[1]:to(dev):detach():requires_grad_(), init[2]:to(dev):detach():requires_grad_(),
        init[3]:to(dev):detach():requires_grad_()
      amp.reset_autocast_stats()
      local loss = amp.autocast(function()
        local h = F.linear(init[4]:to(dev), w1, b1):relu()
        return F.cross_entropy(F.linear(h, w2), target:to(dev))
      end, { dtype = dt })
      loss:backward()
      return loss, { w1.grad, b1.grad, w2.grad }, amp.autocast_stats()
    end
    local lc, gc, sc = run('cpu')
    local lg, gg, sg = run('cuda')
    T.eq(lg.dtype, 'f32')
    T.tensor_close(lg:to('cpu'), lc, 8 * TOL[dt], 8 * TOL[dt], 'loss ' .. dt)
    for i = 1, 3 do
      T.eq(gg[i].dtype, 'f32', 'grad dtype')
      T.tensor_close(gg[i]:to('cpu'), gc[i], 8 * TOL[dt], 8 * TOL[dt], 'grad ' .. i .. ' ' .. dt)
    end
    T.eq(sg.casts, sc.casts, 'the same casts on both devices')
  end
end)

T.run()
