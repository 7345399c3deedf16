-- tests/lua/test_tensor_sweep.lua: every tensor op of the op list that is not elementwise
-- (runtime/backend/op_list.h VL_TENSOR_OPS) on the CPU, case by case from tests/lua/sweep/*.lua
-- (tests/lua/tensor_sweep.lua says what a case is): each dtype's result against the same call on
-- f64 (i64) copies of the inputs, rounded once; every gradient case against finite differences.
local T = require 'testlib'
local v100 = require 'v100'
local S = require 'tensor_sweep'

v100.manual_seed(7000 + T.seed % 100000)
local entries = S.entries(T)
local n, ng = 0, 0
for _, e in ipairs(entries) do
  T.test('cpu ' .. (e.family or '?') .. ' ' .. e.name, function()
    for _, dt in ipairs(e.dtypes) do
      for _, c in ipairs(e.cases(S, dt)) do
        local msg = string.format('%s %s %s', e.name, dt, c[1])
        local ok, got = pcall(S.run, e, c, 'cpu')
        if not ok then error(msg .. ': ' .. tostring(got), 0) end
        if e.ref ~= false then
          local want = S.run(e, c, 'ref')
          S.compare(T, got, want, dt, e, msg .. ' (against f64)', true)
        end
        n = n + 1
      end
    end
  end)
  if e.grads then
    T.test('gradcheck ' .. e.name, function()
      for _, c in ipairs(e.grads(S)) do
        local ins = {}
        for i = 3, #c do
          local x = c[i]
          if v100.is_tensor(x) and v100.dtype_is_float(x.dtype) then x = x:detach():requires_grad_() end
          ins[#ins + 1] = x
        end
        T.ok(v100.autograd.gradcheck(c[2], ins), e.name .. ' ' .. c[1] .. ': gradcheck')
        ng = ng + 1
      end
    end)
  end
end
T.test('every differentiable tensor op has gradient cases', function()
  for _, e in ipairs(entries) do
    if e.op and e.op.grad then T.ok(e.grads ~= nil, e.name .. ' is differentiable (op_list.h) but its entry has no grads') end
  end
end)
T.test('the sweep ran', function()
  T.ok(n > 0, n .. ' cases')
  print(string.format('      %d cases against f64 and %d gradchecks over %d tensor ops', n, ng, #entries))
end)
T.run()
