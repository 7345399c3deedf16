-- Autograd on CUDA: for each differentiable op, the same forward and backward on cuda and on the
-- cpu (f32 with TF32 off, and f64) must agree: outputs and every input's gradient.
local T = require 'testlib'
local v100 = require 'v100'

if not T.has_cuda() then
  print('no CUDA device: skipped')
  T.run()
end
v100.set_allow_tf32(false)

local TOL = { f32 = 1e-5, f64 = 1e-11 }

-- Values at least 0.05 apart (ties would make max/min/abs/relu/clamp ambiguous).
local function distinct(shape)
  local n = T.numel(shape)
  local vals = {}
  for i = 1, n do vals[i] = (i - (n + 1) / 2) * 0.05 + 0.013 end
  for i = n, 2, -1 do
    local j = math.random(i)
    vals[i], vals[j] = vals[j], vals[i]
  end
  return v100.tensor(T.unflatten(vals, shape), { dtype = 'f64' })
end

-- Input makers (CPU f64): normal, positive, distinct.
local function N(shape) return function() return v100.randn(shape, { dtype = 'f64' }) end end
local function P(shape) return function() return v100.rand(shape, { dtype = 'f64' }) * 1.5 + 0.5 end end
local function D(shape) return function() return distinct(shape) end end

local idx_g = v100.tensor({ { 0, 3 }, { 2, 2 }, { 1, 0 } })
local idx_s = v100.tensor({ { 0, 4, 2 }, { 4, 1, 1 } })
local idx_i = v100.tensor({ 2, 0, 2, 1 })
local mask = v100.tensor({ true, false, false, true })
-- rows of a 3x4 input with no, one and two zeros (prod's zero-safe gradient)
local zmask = v100.tensor({ { 0, 0, 0, 0 }, { 0, 1, 0, 0 }, { 1, 0, 0, 1 } }):eq(1)

local CASES = {
  { 'add alpha', function(a, b) return a:add(b, 0.7) end, { N { 3, 4 }, N { 4 } } },
  { 'sub', function(a, b) return a - b end, { N { 3, 1 }, N { 1, 4 } } },
  { 'mul', function(a, b) return a * b end, { N { 2, 3, 4 }, N { 3, 1 } } },
  { 'div', function(a, b) return a / b end, { N { 3, 4 }, P { 3, 4 } } },
  { 'pow', function(a, b) return a ^ b end, { P { 3, 4 }, N { 4 } } },
  { 'maximum', function(a, b) return a:maximum(b) end, { D { 3, 4 }, N { 3, 4 } } },
  { 'minimum', function(a, b) return a:minimum(b) end, { D { 3, 4 }, N { 3, 4 } } },
  { 'scalar ops', function(a) return (2.5 - a) * 1.5 / 0.7 + (1.3 / a) + a ^ 2.5 + 1.9 ^ a end, { P { 3, 4 } } },
  { 'neg abs square', function(a) return (-a):abs() + a:square() end, { D { 3, 4 } } },
  { 'relu', function(a) return a:relu() end, { D { 3, 4 } } },
  { 'clamp', function(a) return a:clamp(-0.2, 0.3) end, { D { 4, 5 } } },
  { 'exp log', function(a) return a:exp() + a:log() end, { P { 3, 4 } } },
  { 'sqrt rsqrt reciprocal', function(a) return a:sqrt() + a:rsqrt() + a:reciprocal() end, { P { 3, 4 } } },
  { 'tanh sigmoid', function(a) return a:tanh() + a:sigmoid() end, { N { 3, 4 } } },
  { 'gelu', function(a) return a:gelu() end, { N { 3, 4 } } },
  { 'gelu tanh', function(a) return a:gelu({ approximate = 'tanh' }) end, { N { 3, 4 } } },
  { 'sin cos', function(a) return a:sin() * a:cos() end, { N { 3, 4 } } },
  { 'where', function(a, b) return v100.where(mask:to(a.device), a, b) end, { N { 3, 4 }, N { 4 } } },
  { 'masked_fill', function(a) return a:masked_fill(mask:to(a.device), 2) end, { N { 3, 4 } } },
  { 'sum mean dims', function(a) return a:sum({ 1, 3 }, true) + a:mean(2):sum() end, { N { 2, 3, 4 } } },
  { 'prod', function(a) return a:prod(2) end, { P { 3, 4 } } },
  { 'prod with zeros', function(a) return a:masked_fill(zmask:to(a.device), 0):prod(2) end, { P { 3, 4 } } },
  { 'max dim', function(a) return (a:max(2)) end, { D { 3, 4 } } },
  { 'min all', function(a) return a:min() end, { D { 3, 4 } } },
  { 'var std', function(a) return a:var(2) + a:std(2, false, { correction = 0 }) end, { N { 3, 4 } } },
  { 'norm', function(a) return a:norm() + a:norm(1, 2):sum() + a:norm(math.huge) + a:norm(3) end, { D { 3, 4 } } },
  { 'softmax', function(a) return a:softmax(2) end, { N { 3, 4 } } },
  { 'log_softmax', function(a) return a:log_softmax(1) end, { N { 3, 4 } } },
  { 'matmul batched broadcast', function(a, b) return a:matmul(b) end, { N { 2, 3, 5 }, N { 5, 4 } } },
  { 'matmul vector', function(a, b) return a:matmul(b) end, { N { 5 }, N { 2, 5, 4 } } },
  { 'bmm', function(a, b) return a:bmm(b) end, { N { 2, 3, 5 }, N { 2, 5, 4 } } },
  { 'addmm', function(c, a, b) return v100.addmm(c, a, b, { beta = 0.5, alpha = 2 }) end, { N { 4 }, N { 3, 5 }, N { 5, 4 } } },
  { 'gather', function(a) return a:gather(2, idx_g:to(a.device)) end, { N { 3, 4 } } },
  { 'scatter_add', function(s, src) return s:scatter_add(2, idx_s:to(s.device), src) end, { N { 3, 5 }, N { 2, 4 } } },
  { 'index_select', function(a) return a:index_select(1, idx_i:to(a.device)) end, { N { 3, 4 } } },
  { 'cat stack', function(a, b) return v100.cat({ a, b }, 2):sum() + v100.stack({ a, a }, 1):sum() end, { N { 2, 3 }, N { 2, 1 } } },
  { 'split chunk', function(a) local p = a:split(2, 2); return p[1]:exp():sum() + a:chunk(2, 1)[2]:sin():sum() end, { N { 4, 5 } } },
  { 'views', function(a)
      return a:view(4, 3):t():reshape(12):narrow(1, 2, 6):view(2, 3):transpose(1, 2):unsqueeze(1):squeeze()
    end, { N { 3, 4 } } },
  { 'select permute expand', function(a) return a:select(1, 2):permute(2, 1):expand(2, 4, 2) end, { N { 3, 2, 4 } } },
  { 'contiguous clone', function(a) return a:t():contiguous():clone() * 2 end, { N { 3, 4 } } },
  -- a correctly rounded op after the conversion: exp would differ by an ulp between devices in f32
  { 'to dtype', function(a) return a:to(a.dtype == 'f32' and 'f64' or 'f32') * 3 end, { N { 3, 4 } } },
}

-- Runs a case on one device and dtype: the output and the inputs' gradients (on the CPU, f64).
local function run(case, inputs, device, dtype, proj)
  local xs = {}
  -- detach: to() returns x itself when nothing changes, and the inputs must stay plain leaves
  for i, x in ipairs(inputs) do xs[i] = x:to({ device = device, dtype = dtype }):detach():requires_grad_() end
  local out = case[2](table.unpack(xs))
  local r = proj:to({ device = device, dtype = out.dtype })
  if out.ndim == 0 then r = r:view({}) end
  ;(out * r):sum():backward()
  local res = { out = out:detach():to({ device = 'cpu', dtype = 'f64' }) }
  for i, x in ipairs(xs) do
    T.ok(x.grad ~= nil, case[1] .. ': input ' .. i .. ' got a gradient on ' .. device)
    T.eq(x.grad.device, x.device, case[1] .. ': gradient device')
    T.eq(x.grad.dtype, dtype, case[1] .. ': gradient dtype')
    res[i] = x.grad:to({ device = 'cpu', dtype = 'f64' })
  end
  return res
end

for _, dtype in ipairs({ 'f32', 'f64' }) do
  for _, case in ipairs(CASES) do
    T.test(string.format('%s %s: cuda matches cpu', case[1], dtype), function()
      local inputs = {}
      for i, make in ipairs(case[3]) do inputs[i] = make() end
      local shape = case[2](table.unpack(inputs)).shape
      local proj = v100.randn(#shape == 0 and { 1 } or shape, { dtype = 'f64' })
      local c = run(case, inputs, 'cpu', dtype, proj)
      local g = run(case, inputs, 'cuda', dtype, proj)
      local tol = TOL[dtype]
      T.tensor_close(g.out, c.out, tol, tol, case[1] .. ' output')
      for i = 1, #inputs do T.tensor_close(g[i], c[i], tol, tol, case[1] .. ' gradient of input ' .. i) end
    end)
  end
end

T.test('hooks, retain_grad and accumulation on cuda', function()
  local x = v100.randn({ 3, 4 }, { device = 'cuda', requires_grad = true })
  local y = x * 2
  y:retain_grad()
  x:register_hook(function(g) return g * 3 end)
  for _ = 1, 2 do (y * y):sum():backward({ retain_graph = true }) end
  T.tensor_close(y.grad, y:detach() * 4, 1e-6, 1e-6)
  T.tensor_close(x.grad, y:detach() * 2 * 2 * 3 * 2, 1e-6, 1e-6)
end)

T.test('cross-device to() sends the gradient back to the cpu', function()
  local x = v100.randn({ 3 }, { dtype = 'f64', requires_grad = true })
  local y = x:cuda():exp():cpu()
  y:sum():backward()
  T.eq(x.grad.device, 'cpu')
  T.tensor_close(x.grad, x:detach():exp(), 1e-12, 1e-12)
end)

T.run()
