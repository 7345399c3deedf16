-- tests/lua/gpu_op_sweep.lua: every op of the op list (v100.core.ops()) on CUDA against the CPU
-- with the same inputs: every dtype its class takes, contiguous / transposed / narrowed / expanded
-- operands, row and column broadcasts, numbers, the in-place forms, and a flat 1,000,003-element
-- run (the vector kernels' tails). Within the dtype's rounding (the CPU computes f16, bf16 and f32
-- in double and rounds once, CUDA in float); integer and bool results exactly. The cases:
-- tests/lua/op_sweep.lua (shared with the CPU's sweep against f64, test_op_sweep.lua).
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'
local S = require 'op_sweep'

v100.set_allow_tf32(false)
v100.manual_seed(9000 + T.seed % 100000)
local TOL = { f32 = 1e-5, f16 = 1e-3, bf16 = 1e-2, f64 = 1e-12 }
-- V100_SWEEP_SMALL=1 (and under memcheck: V100_UNDER_MEMCHECK=1): small operands, since the
-- sanitizer runs kernels far slower
local SMALL = os.getenv('V100_SWEEP_SMALL') == '1' or os.getenv('V100_UNDER_MEMCHECK') == '1'
local R, C, FLAT = SMALL and 70 or 700, SMALL and 91 or 901, SMALL and 10003 or 1000003
local ops = {} -- the elementwise ops (the tensor ops have their own sweep: tensor_sweep.lua)
for _, op in ipairs(require('v100.core').ops()) do if op.kind ~= 'tensor' then ops[#ops + 1] = op end end

local function same(g, c, dt, msg, scale)
  T.ok(g.device:sub(1, 4) == 'cuda', msg .. ': result on ' .. g.device)
  T.eq(g.dtype, c.dtype, msg .. ' dtype')
  T.eq(g.shape, c.shape, msg .. ' shape')
  local tol = (TOL[g.dtype] or 0) * (scale or 1)
  if tol == 0 then T.tensor_eq(g, c, msg) else T.tensor_close(g, c, tol, tol, msg) end
end

local function gpu(x) return type(x) == 'userdata' and x:to('cuda') or x end
local n = 0
for _, op in ipairs(ops) do
  T.test('cuda ' .. op.kind .. ' ' .. op.name .. ' (' .. op.class .. ') against the cpu', function()
    local scale = op.name == 'pow' and 4 or 1
    for _, dt in ipairs(S.dtypes(op)) do
      local make = S.maker(op, dt)
      local cases = S.cases(op, R, C, make)
      cases[#cases + 1] = { 'flat ' .. FLAT, make({ FLAT }, 1), op.kind == 'binary' and make({ FLAT }, 2) or nil }
      for _, c in ipairs(cases) do
        local label, a, b = c[1], c[2], c[3]
        local want = S.call(op, a, b)
        local got = S.call(op, gpu(a), gpu(b))
        same(got, want, dt, string.format('%s %s %s', op.name, dt, label), scale)
        n = n + 1
        if op.method and label ~= 'expanded' then
          local x, gx = a:clone(), gpu(a):clone()
          local ok = pcall(S.call, op, x, b, true) -- in place where the result fits a's dtype
          if ok then
            S.call(op, gx, gpu(b), true)
            same(gx, x, dt, string.format('%s_ %s %s', op.name, dt, label), scale)
            n = n + 1
          end
        end
      end
    end
  end)
end
T.test('the sweep ran', function() T.ok(n > 1000, n .. ' comparisons') print('      ' .. n .. ' cuda-vs-cpu comparisons over ' .. #ops .. ' ops') end)
T.run()
