-- bench/cpu_ops.lua: CPU elementwise ops, activation gradients, softmax and its backward, sums,
-- extrema, layer norm and issue 30's ops (erf ... gather: special functions, binary ops, selection
-- by mask and index) on 2048 x 1024 f32 with 1 thread and with the default count
-- (v100.set_num_threads), in ms (median of 7 runs after one warm-up). `v100lua bench/cpu_ops.lua`;
-- bench/cpu_ops.py is PyTorch's side with the same names.
--
-- Each thread count prints two lines: wall-clock ms, then the process's CPU ms per call (os.clock,
-- all threads together; the median of its own 7 values). On a shared machine the CPU time is the
-- steadier figure of the work done.
local v100 = require 'v100'
local F = require 'v100.nn.functional'
local N = v100._nn
local wall = v100.io.time
local x = v100.randn{ 2048, 1024 }
local y = v100.randn{ 2048, 1024 }
local g = v100.randn{ 2048, 1024 }
local xt = v100.randn{ 1024, 2048 }:t()
local sm = x:softmax(2)
local pos = x:abs() + 0.5
-- issue 30's ops: a boolean mask (about half true), a row permutation (7 is prime to 2048) and a
-- gather index along the last dim, the same values as bench/cpu_ops.py's
local mask = x:gt(0)
local rows = (v100.arange(2048) * 7) % 2048
local gidx = ((v100.arange(2048 * 1024) * 7) % 1024):reshape{ 2048, 1024 }
-- Each result is freed at once, as PyTorch's refcounting frees its own: a result left to the
-- collector would make the next allocation fault in fresh pages, a cost of the script, not the op.
-- (The first pass over the ops still faulted: 5 ms of a 1.3 ms exp.)
local function bench(f)
  f():free()
  local tw, tc = {}, {}
  for i = 1, 7 do
    local t0, c0 = wall(), os.clock()
    f():free()
    tw[i], tc[i] = (wall() - t0) * 1000, (os.clock() - c0) * 1000
  end
  table.sort(tw)
  table.sort(tc)
  return tw[4], tc[4]
end
local ops = {
  { 'add', function() return x + y end },
  { 'add(strided)', function() return x + xt end },
  { 'mul_scalar', function() return x * 1.1 end },
  { 'exp', function() return x:exp() end },
  { 'log', function() return pos:log() end },
  { 'tanh', function() return x:tanh() end },
  { 'sigmoid', function() return x:sigmoid() end },
  { 'gelu', function() return F.gelu(x) end },
  { 'gelu_tanh', function() return F.gelu(x, { approximate = 'tanh' }) end },
  { 'gelu_backward', function() return N.activation_backward('gelu_backward', g, x) end },
  { 'softmax', function() return x:softmax(2) end },
  { 'log_softmax', function() return x:log_softmax(2) end },
  { 'softmax_backward', function() return N.softmax_backward(sm, g, 2, false) end },
  { 'sum(2)', function() return x:sum(2) end },
  { 'sum(1)', function() return x:sum(1) end },
  { 'layernorm', function() return F.layer_norm(x, { 1024 }) end },
  { 'erf', function() return x:erf() end },
  { 'expm1', function() return x:expm1() end },
  { 'log1p', function() return pos:log1p() end },
  { 'remainder', function() return x:remainder(y) end },
  { 'atan2', function() return x:atan2(y) end },
  { 'lerp', function() return x:lerp(y, 0.3) end },
  { 'nan_to_num', function() return x:nan_to_num() end },
  { 'masked_select', function() return x:masked_select(mask) end },
  { 'index_select', function() return x:index_select(1, rows) end },
  { 'gather', function() return x:gather(2, gidx) end },
  { 'max(2)', function() local v, i = x:max(2); i:free(); return v end },
  { 'max(1)', function() local v, i = x:max(1); i:free(); return v end },
  { 'sin', function() return x:sin() end },
  { 'cos', function() return x:cos() end },
  { 'rsqrt', function() return pos:rsqrt() end },
  { 'sign', function() return x:sign() end },
}
local all = v100.get_num_threads()
for _, th in ipairs(all > 1 and { 1, all } or { 1 }) do
  v100.set_num_threads(th)
  -- one untimed pass over every op first: the first calls grow the heap (page faults)
  for _ = 1, 3 do for _, op in ipairs(ops) do op[2]():free() end end
  local w, c = {}, {}
  for _, op in ipairs(ops) do
    local tw, tc = bench(op[2])
    w[#w + 1] = string.format('%s %.2f', op[1], tw)
    c[#c + 1] = string.format('%s %.2f', op[1], tc)
  end
  print('threads ' .. th .. ' (ms, 2048 x 1024 f32): ' .. table.concat(w, '  '))
  print('threads ' .. th .. ' (cpu ms): ' .. table.concat(c, '  '))
end
