-- bench/cpu_ops.lua: CPU elementwise ops, softmax, sum and layer norm on 2048 x 1024 f32 with 1 thread and with
-- the default count (v100.set_num_threads), in ms (mean of 5 after one warm-up). `v100lua bench/cpu_ops.lua`
local v100 = require 'v100'
local F = require 'v100.nn.functional'
local clock = v100.io.time
local x = v100.randn{ 2048, 1024 }
local y = v100.randn{ 2048, 1024 }
local xt = v100.randn{ 1024, 2048 }:t()
local function bench(name, f)
  f()
  local t0 = clock()
  for _ = 1, 5 do f() end
  return (clock() - t0) / 5 * 1000
end
local all = v100.get_num_threads()
for _, th in ipairs(all > 1 and { 1, all } or { 1 }) do
  v100.set_num_threads(th)
  local r = {}
  r[#r + 1] = string.format('add %.2f', bench('add', function() return x + y end))
  r[#r + 1] = string.format('add(strided) %.2f', bench('adds', function() return x + xt end))
  r[#r + 1] = string.format('tanh %.2f', bench('tanh', function() return x:tanh() end))
  r[#r + 1] = string.format('gelu %.2f', bench('gelu', function() return F.gelu(x) end))
  r[#r + 1] = string.format('exp %.2f', bench('exp', function() return x:exp() end))
  r[#r + 1] = string.format('softmax %.2f', bench('softmax', function() return x:softmax(2) end))
  r[#r + 1] = string.format('sum(2) %.2f', bench('sum', function() return x:sum(2) end))
  r[#r + 1] = string.format('layernorm %.2f', bench('ln', function() return F.layer_norm(x, { 1024 }) end))
  print('threads ' .. th .. ' (ms, 2048 x 1024 f32): ' .. table.concat(r, '  '))
end
