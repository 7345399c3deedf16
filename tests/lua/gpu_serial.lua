-- tests/lua/gpu_serial.lua: v100.save of CUDA tensors (written from the device) and v100.load to
-- the CPU by default or onto the GPU with {device = 'cuda'}: values, dtypes, requires_grad and
-- views of one storage kept on either side.
local T = require 'testlib'
T.cuda_or_skip()
local v100 = require 'v100'
local core = require 'v100.core'

local dir = T.tmpdir()
local storage = function(t) return (core._serial.storage(t)) end

T.test('CUDA tensors: saved from the device, loaded on the CPU or onto the GPU', function()
  local x = v100.randn({ 4, 6 }, { device = 'cuda' })
  local w = v100.randn({ 3 }, { device = 'cuda' })
  w.requires_grad = true
  local v = { x = x, nar = x:narrow(1, 2, 2), tr = x:t(), h = x:half(), b = x:bfloat16(), w = w, n = 3 }
  local p = dir .. '/cuda.safetensors'
  v100.save(p, v)
  local cpu = v100.load(p)
  for _, k in ipairs { 'x', 'nar', 'tr', 'h', 'b', 'w' } do
    T.eq(cpu[k].device, 'cpu', k)
    T.eq(cpu[k].dtype, v[k].dtype, k)
    T.tensor_eq(cpu[k], v[k]:cpu(), k)
  end
  T.eq(storage(cpu.nar), storage(cpu.x))
  T.eq(cpu.w.requires_grad, true)
  local gpu = v100.load(p, { device = 'cuda' })
  for _, k in ipairs { 'x', 'nar', 'tr', 'h', 'b', 'w' } do
    T.eq(gpu[k].device, 'cuda:0', k)
    T.eq(gpu[k]:stride(), v[k]:stride(), k)
    T.tensor_eq(gpu[k], v[k], k)
  end
  T.eq(storage(gpu.tr), storage(gpu.x), 'views of one device storage')
  T.eq(gpu.w.requires_grad, true)
  T.eq(gpu.n, 3)
  -- CPU tensors onto the GPU too
  local p2 = dir .. '/cpu.safetensors'
  local c = v100.randn { 5 }
  v100.save(p2, { c = c, s = c:narrow(1, 2, 3) })
  local g = v100.load(p2, { device = 'cuda' })
  T.eq(g.s.device, 'cuda:0')
  T.eq(storage(g.s), storage(g.c))
  T.tensor_eq(g.s, c:narrow(1, 2, 3):cuda())
end)

T.run()
