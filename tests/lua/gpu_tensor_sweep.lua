-- tests/lua/gpu_tensor_sweep.lua: every tensor op of the op list that is not elementwise
-- (runtime/backend/op_list.h VL_TENSOR_OPS) on CUDA against the CPU, with the same inputs in the
-- same layouts (tests/lua/sweep/*.lua, tests/lua/tensor_sweep.lua): values, and the gradient of
-- every gradient case. Integer and selection results exactly, floats within the dtype's rounding.
local T = require 'testlib'
if not T.has_cuda() then print('no CUDA: skipped') os.exit(0) end
local v100 = require 'v100'
local S = require 'tensor_sweep'

v100.set_allow_tf32(false)
v100.manual_seed(8000 + T.seed % 100000)
local entries = S.entries(T)
local n, ng = 0, 0
for _, e in ipairs(entries) do
  if e.gpu ~= false then
    T.test('cuda ' .. (e.family or '?') .. ' ' .. e.name .. ' against the cpu', function()
      for _, dt in ipairs(e.dtypes) do
        for _, c in ipairs(e.cases(S, dt)) do
          local msg = string.format('%s %s %s', e.name, dt, c[1])
          local want = S.run(e, c, 'cpu')
          local ok, got = pcall(S.run, e, c, 'cuda')
          if not ok then error(msg .. ' on cuda: ' .. tostring(got), 0) end
          for _, r in ipairs(S.flatten(got)) do
            if v100.is_tensor(r[2]) then T.ok(r[2].device:sub(1, 4) == 'cuda', msg .. ': result' .. r[1] .. ' on ' .. r[2].device) end
          end
          S.compare(T, got, want, dt, e, msg .. ' (cuda against cpu)', false)
          n = n + 1
        end
      end
    end)
  end
  if e.grads and e.gpu ~= false then
    T.test('cuda gradient ' .. e.name .. ' against the cpu', function()
      -- gradients are sums (a repeat's, a scatter's) whose order differs between the devices: within
      -- f64 rounding even where the forward results are compared exactly
      local eg = setmetatable({ exact = false }, { __index = e })
      for k, c in ipairs(e.grads(S)) do
        local want = S.grad_of(c, 'cpu', 100 + k)
        local got = S.grad_of(c, 'cuda', 100 + k)
        S.compare(T, got, want, 'f64', eg, e.name .. ' ' .. c[1] .. ' gradient (cuda against cpu)', false)
        ng = ng + 1
      end
    end)
  end
end
T.test('the sweep ran', function()
  T.ok(n > 0, n .. ' cases')
  print(string.format('      %d cuda-vs-cpu cases and %d gradients over %d tensor ops', n, ng, #entries))
end)
T.run()
