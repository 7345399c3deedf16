-- tests/lua/gpu_amp_o2.lua: an O2 run (half model with f32 norms, f32 master weights, amp.Scaler
-- with an injected inf step) on CUDA against the same run on the CPU, in f16 and bf16: the masters,
-- the half weights (each the rounding of its master on its own device), the kept f32 norm
-- parameters and the skipped-step count.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'

T.cuda_or_skip()

local function mlp()
  return nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 3))
end

-- The run on one device from the f32 state `init`; returns the model, the optimizer and the scaler.
local function run(device, dtype, init, rows, bad)
  local m = mlp()
  m:load_state_dict(init)
  local policy = amp.policy('O2', { dtype = dtype })
  policy:convert(m)
  m:to(device)
  local opt = optim.SGD(m:parameters(), policy:optimizer_opts { lr = 0.05, momentum = 0.9 })
  local scaler = amp.Scaler { init_scale = 2 ^ 10 }
  for step = 1, #rows do
    local x = rows[step]:to(device, dtype)
    if bad[step] then v100.no_grad(function() x:narrow(1, 1, 1):fill_(bad[step]) end) end
    opt:zero_grad()
    scaler:backward(m(x):float():pow(2):mean())
    scaler:step(opt)
    scaler:update()
  end
  return m, opt, scaler
end

for _, dt in ipairs { 'f16', 'bf16' } do
  T.test('O2 with master weights on cuda matches the cpu, ' .. dt, function()
    local init = mlp():state_dict()
    local rows = {}
    for i = 1, 5 do rows[i] = v100.randn { 8, 4 } end
    local bad = { [3] = math.huge }
    local cm, copt, cs = run('cpu', dt, init, rows, bad)
    local gm, gopt, gs = run('cuda', dt, init, rows, bad)
    T.eq(gs:counters().skipped_steps, 1)
    T.eq(cs:counters().skipped_steps, 1)
    local tol = dt == 'f16' and 2e-3 or 1e-2
    local cp = cm:named_parameters()
    for i, e in ipairs(gm:named_parameters()) do
      local name, p = e[1], e[2]
      local c = cp[i][2]
      T.eq(p.device:sub(1, 4), 'cuda', name .. ' on cuda')
      T.eq(p.dtype, c.dtype, name .. ' dtype')
      local gst, cst = gopt.state[p], copt.state[c]
      if p.dtype == dt then
        T.eq(gst.master.device, p.device, 'master on the parameter device: ' .. name)
        T.tensor_eq(p, gst.master:to(dt), 'cuda half weight is its rounded master: ' .. name)
        T.tensor_close(gst.master, cst.master, tol, tol, 'master cuda vs cpu: ' .. name)
      else
        T.eq(p.dtype, 'f32', name .. ' kept f32')
        T.eq(gst.master, nil)
      end
      T.tensor_close(p, c, tol, tol, 'weight cuda vs cpu: ' .. name)
    end
  end)
end

T.run()
