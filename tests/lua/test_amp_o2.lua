-- tests/lua/test_amp_o2.lua: AMP O2/O3 on the CPU: amp.half_model's conversion (which tensors go
-- half, which stay f32, keep_fp32 by class and by dotted path, tensor identity kept, the f32
-- boundary of a kept module), half data through f32-parameter norms, the optimizer's f32 master
-- weights (updated in f32, half copies refreshed, against an f32 reference step, small updates
-- not rounded away), a skipped inf step leaving masters and weights alone, the policy and the
-- masters through a safetensors checkpoint, and the error messages.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'

v100.manual_seed(T.seed % 1000003)

-- Linear -> BatchNorm1d -> Tanh -> LayerNorm -> Linear ('0'..'4'). Tanh rather than ReLU: the
-- O2-against-f32 comparison must not hinge on a pre-activation near 0 that the half forward
-- puts on the other side of a kink (the whole row's gradient would then differ).
local function mlp()
  return nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Tanh(), nn.LayerNorm(8), nn.Linear(8, 3))
end

local function dtypes(model)
  local out = {}
  for _, e in ipairs(model:named_parameters()) do out[e[1]] = e[2].dtype end
  for _, e in ipairs(model:named_buffers()) do out[e[1]] = e[2].dtype end
  return out
end

-- A model with a nested path: encoder.layer.0 / encoder.layer.1, each attention + norm.
local Block = nn.Module:extend('Block')
function Block:init() self.attention = nn.Linear(4, 4) self.norm = nn.LayerNorm(4) end
function Block:forward(x) return self.norm(self.attention(x)) end
local Net = nn.Module:extend('Net')
function Net:init()
  self.encoder = nn.Module()
  self.encoder.layer = { Block(), Block() }
  self.head = nn.Linear(4, 2)
end
function Net:forward(x) return self.head(self.encoder.layer[2](self.encoder.layer[1](x))) end

T.test('O2 conversion: half except the norms (parameters and running stats), identity kept', function()
  local m = mlp()
  local before = {}
  for _, e in ipairs(m:named_parameters()) do before[e[1]] = e[2] end
  local policy = amp.policy('O2')
  T.eq(policy.level, 'O2')
  T.eq(policy.dtype, 'f16')
  T.deep_eq(policy.keep_fp32, { 'BatchNorm1d', 'BatchNorm2d', 'LayerNorm' })
  T.ok(policy:convert(m) == m, 'convert returns the model')
  T.deep_eq(dtypes(m), {
    ['0.weight'] = 'f16', ['0.bias'] = 'f16', ['1.weight'] = 'f32', ['1.bias'] = 'f32',
    ['1.running_mean'] = 'f32', ['1.running_var'] = 'f32', ['1.num_batches_tracked'] = 'i64',
    ['3.weight'] = 'f32', ['3.bias'] = 'f32', ['4.weight'] = 'f16', ['4.bias'] = 'f16',
  })
  for _, e in ipairs(m:named_parameters()) do
    T.ok(rawequal(before[e[1]], e[2]), 'the same tensor object: ' .. e[1])
    T.ok(e[2].requires_grad, 'still requires grad: ' .. e[1])
  end
  -- a half batch runs through the f32 norms and comes out half
  local y = m(v100.randn({ 6, 4 }):half())
  T.eq(y.dtype, 'f16')
  y:float():pow(2):mean():backward()
  T.eq(m[1].weight.grad.dtype, 'f16', 'half gradient of a half weight')
  T.eq(m[2].weight.grad.dtype, 'f32', 'f32 gradient of a kept norm weight')
end)

T.test('O3 and bf16: everything floating goes half, the norms run on half parameters', function()
  local m = mlp()
  amp.policy('O3', { dtype = 'bf16' }):convert(m)
  for name, dt in pairs(dtypes(m)) do
    T.eq(dt, name == '1.num_batches_tracked' and 'i64' or 'bf16', name)
  end
  local rm0 = m[2].running_mean:float()
  local y = m(v100.randn({ 6, 4 }):bfloat16())
  T.eq(y.dtype, 'bf16')
  T.eq(m[2].running_mean.dtype, 'bf16', 'running stats stay in their dtype')
  T.ok((m[2].running_mean:float() - rm0):abs():max():item() > 0, 'running stats updated')
  -- O0 and O1 leave the model alone
  local f = mlp()
  amp.policy('O0'):convert(f)
  amp.policy('O1'):convert(f)
  for name, dt in pairs(dtypes(f)) do T.eq(dt, name:find('num_batches') and 'i64' or 'f32', name) end
end)

T.test('keep_fp32 by class name and by dotted path (subtree kept, f32 boundary cast)', function()
  local net = Net()
  amp.half_model(net, { keep_fp32 = { 'encoder.layer.0.attention', 'LayerNorm' } })
  local d = dtypes(net)
  T.eq(d['encoder.layer.0.attention.weight'], 'f32', 'kept by path')
  T.eq(d['encoder.layer.0.attention.bias'], 'f32')
  T.eq(d['encoder.layer.1.attention.weight'], 'f16', 'the other block is half')
  T.eq(d['encoder.layer.0.norm.weight'], 'f32', 'kept by class')
  T.eq(d['encoder.layer.1.norm.weight'], 'f32')
  T.eq(d['head.weight'], 'f16')
  -- a whole kept block keeps its submodules
  local net2 = Net()
  amp.half_model(net2, { keep_fp32 = { 'encoder.layer.1' } })
  local d2 = dtypes(net2)
  T.eq(d2['encoder.layer.1.attention.weight'], 'f32')
  T.eq(d2['encoder.layer.1.norm.bias'], 'f32')
  T.eq(d2['encoder.layer.0.norm.bias'], 'f16', 'no default norms with an explicit list')
  -- the kept Linear takes the half activations in f32 and hands half on
  for _, n in ipairs { net, net2 } do
    local x = v100.randn({ 3, 4 }):half()
    local y = n(x)
    T.eq(y.dtype, 'f16')
    y:float():sum():backward()
  end
  T.eq(net.encoder.layer[1].attention.weight.grad.dtype, 'f32', 'gradients flow into the f32 module')
  T.ok(net.encoder.layer[1].attention.weight.grad:abs():sum():item() > 0)
  T.eq(net.encoder.layer[2].attention.weight.grad.dtype, 'f16')
  -- the boundary follows its input: an f32 model again passes f32 through unchanged
  net:float()
  T.eq(net(v100.randn({ 3, 4 })).dtype, 'f32', 'no cast back to half after model:float()')
  -- a subclass is kept by its base class's name
  local MyNorm = nn.LayerNorm:extend('MyNorm')
  local s = nn.Sequential(nn.Linear(4, 4), MyNorm(4))
  amp.half_model(s, { keep_fp32 = { 'LayerNorm' } })
  T.eq(s[2].weight.dtype, 'f32')
  T.eq(s[1].weight.dtype, 'f16')
end)

T.test('half data through BatchNorm2d and LayerNorm with f32 parameters matches f32', function()
  for _, case in ipairs {
    { nn.BatchNorm2d(3), { 2, 3, 4, 4 } },
    { nn.LayerNorm(5), { 4, 5 } },
  } do
    local m, shape = case[1], case[2]
    v100.no_grad(function()
      m.weight:copy_(v100.rand({ m.weight:numel() }) + 0.5)
      m.bias:copy_(v100.randn({ m.bias:numel() }))
    end)
    local xh = v100.randn(shape):half():requires_grad_(true)
    local xf = xh:detach():float():requires_grad_(true)
    local yh = m(xh)
    T.eq(yh.dtype, 'f16', m.__name .. ' output dtype')
    local gw_h
    yh:float():sum():backward()
    gw_h = m.weight.grad:clone()
    m:zero_grad()
    local yf = m(xf)
    yf:sum():backward()
    T.tensor_close(yh, yf, 5e-3, 5e-3, m.__name .. ' forward')
    T.eq(m.weight.grad.dtype, 'f32')
    T.tensor_close(gw_h, m.weight.grad, 1e-2, 1e-2, m.__name .. ' weight gradient')
    T.eq(xh.grad.dtype, 'f16')
    T.tensor_close(xh.grad, xf.grad, 1e-2, 1e-2, m.__name .. ' input gradient')
  end
end)

-- An f32 model, an O2 copy of it and an f32 reference starting from the O2 copy's (rounded) weights.
local function o2_pair(opts_fn)
  local m = mlp()
  local policy = amp.policy('O2')
  policy:convert(m)
  local ref = mlp()
  ref:load_state_dict(m:state_dict())
  local opt = opts_fn(m:parameters(), policy:optimizer_opts { lr = 0.1, momentum = 0.9 })
  local ropt = opts_fn(ref:parameters(), { lr = 0.1, momentum = 0.9 })
  return m, opt, ref, ropt
end

T.test('O2 step with master weights: f32 masters updated, half weights their rounding, near an f32 step', function()
  local m, opt, ref, ropt = o2_pair(optim.SGD)
  T.eq(opt.master_weights, true, 'optimizer_opts turned master weights on')
  local w0 = m[1].weight:float()
  local start = {}
  for _, e in ipairs(ref:named_parameters()) do start[e[1]] = e[2]:clone() end
  for step = 1, 2 do
    local x = v100.randn({ 8, 4 }):half()
    opt:zero_grad()
    m(x):float():pow(2):mean():backward()
    opt:step()
    ropt:zero_grad()
    ref(x:float()):pow(2):mean():backward()
    ropt:step()
  end
  local refp = {}
  for _, e in ipairs(ref:named_parameters()) do refp[e[1]] = e[2] end
  for _, e in ipairs(m:named_parameters()) do
    local name, p = e[1], e[2]
    local st = opt.state[p]
    if p.dtype == 'f16' then
      T.ok(st.master ~= nil, 'a master for ' .. name)
      T.eq(st.master.dtype, 'f32')
      T.eq(st.momentum_buffer.dtype, 'f32')
      T.tensor_eq(p, st.master:half(), 'the half weight is the rounded master: ' .. name)
    else
      T.eq(st.master, nil, 'no master for the f32 parameter ' .. name)
    end
    -- The update (master or kept f32 parameter, minus the common start) against the f32 step's:
    -- the half forward and backward differ from f32 per element (batch norm over 8 samples can
    -- amplify a rounding), so the bound is on the whole update, 5% of its norm, plus 1e-4 for an
    -- update that is 0 in f32 (the bias before batch norm, whose f32 gradient is exactly 0).
    local got = (st.master or p) - start[name]
    local want = refp[name] - start[name]
    local err = (got - want):pow(2):sum():sqrt():item()
    local size = want:pow(2):sum():sqrt():item()
    T.ok(err <= 0.05 * size + 1e-4, string.format('update of %s near the f32 step: |diff| %.3g vs |update| %.3g',
      name, err, size))
  end
  T.ok((opt.state[m[1].weight].master - w0):abs():max():item() > 1e-3, 'the master moved')
end)

T.test('masters keep updates that half weights would round away', function()
  local function run(master)
    local lin = nn.Linear(4, 1):half()
    v100.no_grad(function() lin.weight:fill_(1) lin.bias:fill_(0) end)
    local opt = optim.SGD(lin:parameters(), { lr = 1e-4, master_weights = master })
    local x = v100.ones({ 1, 4 }):half()
    for _ = 1, 10 do
      opt:zero_grad()
      lin(x):float():sum():backward()
      opt:step()
    end
    return lin, opt
  end
  local plain = run(false)
  T.tensor_eq(plain.weight, v100.ones({ 1, 4 }), 'a 1e-4 step is below half precision at 1.0')
  local lin, opt = run(true)
  local master = opt.state[lin.weight].master
  T.tensor_close(master, v100.full({ 1, 4 }, 1 - 1e-3), 0, 1e-6, 'ten 1e-4 steps in the master')
  T.tensor_eq(lin.weight, master:half(), 'the half weight follows the master')
  T.ok(lin.weight:float():max():item() < 1, 'the accumulated update reached the half weight')
end)

T.test('AdamW with master weights: state on the masters, half weights refreshed', function()
  local m, opt = o2_pair(function(p, o) return optim.AdamW(p, { lr = 1e-2, master_weights = o.master_weights }) end)
  m(v100.randn({ 8, 4 }):half()):float():pow(2):mean():backward()
  opt:step()
  local p = m[5].weight
  local st = opt.state[p]
  T.eq(st.exp_avg.dtype, 'f32')
  T.eq(st.master.dtype, 'f32')
  T.tensor_eq(p, st.master:half())
end)

T.test('an inf step under amp.Scaler leaves masters, momentum and half weights unchanged', function()
  local m, opt = o2_pair(optim.SGD)
  local scaler = amp.Scaler { init_scale = 1024 }
  local function step(x)
    opt:zero_grad()
    scaler:backward(m(x):float():pow(2):mean())
    scaler:step(opt)
    scaler:update()
  end
  step(v100.randn({ 8, 4 }):half())
  local p = m[1].weight
  local st = opt.state[p]
  local master0, mom0, p0 = st.master:clone(), st.momentum_buffer:clone(), p:clone()
  local x = v100.randn({ 8, 4 }):half()
  v100.no_grad(function() x:narrow(1, 1, 1):fill_(math.huge) end)
  step(x)
  T.eq(scaler:counters().skipped_steps, 1, 'the step was skipped')
  T.tensor_eq(st.master, master0, 'master unchanged')
  T.tensor_eq(st.momentum_buffer, mom0, 'momentum unchanged')
  T.tensor_eq(p, p0, 'half weight unchanged')
  T.tensor_eq(p, st.master:half())
end)

-- The optimizer's state as flat tensors under prefix (steps as 1-element tensors) and back.
local function flatten_opt(sd, prefix, out)
  for idx, e in pairs(sd.state) do
    out[prefix .. idx .. '.step'] = v100.tensor({ e.step }, { dtype = 'f32' })
    for k, t in pairs(e) do
      if v100.is_tensor(t) then out[prefix .. idx .. '.' .. k] = t end
    end
  end
end

local function unflatten_opt(flat, prefix, template)
  local sd = { state = {}, param_groups = template.param_groups }
  for name, t in pairs(flat) do
    if name:sub(1, #prefix) == prefix then
      local idx, k = name:sub(#prefix + 1):match('^(%d+)%.(.+)$')
      idx = math.tointeger(tonumber(idx))
      sd.state[idx] = sd.state[idx] or {}
      sd.state[idx][k] = k == 'step' and math.tointeger(t:item()) or t
    end
  end
  return sd
end

local function with_prefix(sd, prefix, out)
  for k, t in pairs(sd) do out[prefix .. k] = t end
end

local function strip(flat, prefix)
  local out = {}
  for k, t in pairs(flat) do
    if k:sub(1, #prefix) == prefix then out[k:sub(#prefix + 1)] = t end
  end
  return out
end

T.test('policy, model and masters round-trip through a safetensors checkpoint', function()
  local policy = amp.policy('O2', { dtype = 'bf16', keep_fp32 = { 'LayerNorm', '4' } })
  local m = mlp()
  policy:convert(m)
  T.eq(m[5].weight.dtype, 'f32', "path '4' kept")
  T.eq(m[2].weight.dtype, 'bf16', 'BatchNorm1d not in this list')
  local opt = optim.SGD(m:parameters(), policy:optimizer_opts { lr = 0.05, momentum = 0.9 })
  for _ = 1, 2 do
    opt:zero_grad()
    m(v100.randn({ 8, 4 }):bfloat16()):float():pow(2):mean():backward()
    opt:step()
  end
  local flat = {}
  with_prefix(policy:state_dict(), 'amp.', flat)
  with_prefix(m:state_dict(), 'model.', flat)
  flatten_opt(opt:state_dict(), 'optim.', flat)
  local path = os.tmpname() .. '.safetensors'
  v100.save_safetensors(path, flat)
  local back = v100.load_safetensors(path)
  os.remove(path)

  local p2 = amp.policy('O0')
  p2:load_state_dict(strip(back, 'amp.'))
  T.eq(p2.level, 'O2')
  T.eq(p2.dtype, 'bf16')
  T.deep_eq(p2.keep_fp32, { 'LayerNorm', '4' })
  local m2 = mlp()
  p2:convert(m2)
  T.deep_eq(dtypes(m2), dtypes(m), 'the same dtypes after conversion by the loaded policy')
  local opt2 = optim.SGD(m2:parameters(), p2:optimizer_opts { lr = 0.05, momentum = 0.9 })
  -- the optimizer's masters alone restore the half weights (loaded last on purpose: the model's
  -- state is not loaded, so the weights come from the masters)
  opt2:load_state_dict(unflatten_opt(back, 'optim.', opt2:state_dict()))
  local ps, ps2 = m:parameters(), m2:parameters()
  for i, p in ipairs(ps) do
    local a, b = opt.state[p], opt2.state[ps2[i]]
    T.eq(b.step, a.step)
    if p.dtype == 'bf16' then
      T.tensor_eq(b.master, a.master, 'master ' .. i)
      T.eq(b.master.dtype, 'f32')
      T.tensor_eq(ps2[i], p, 'half weight ' .. i .. ' restored from its master')
    end
    T.tensor_eq(b.momentum_buffer, a.momentum_buffer, 'momentum ' .. i)
  end
  -- the f32 parameters (and the BatchNorm's running stats) come from the model's state
  m2:load_state_dict(strip(back, 'model.'))
  for i, p in ipairs(ps) do T.tensor_eq(ps2[i], p, 'weight ' .. i) end
  -- the same next step on both
  local x = v100.randn({ 8, 4 }):bfloat16()
  for _, pair in ipairs { { m, opt }, { m2, opt2 } } do
    pair[2]:zero_grad()
    pair[1](x):float():pow(2):mean():backward()
    pair[2]:step()
  end
  for i, p in ipairs(ps) do T.tensor_eq(ps2[i], p, 'after the next step ' .. i) end
  -- a state with masters loads into an optimizer without master weights (they are dropped)
  local plain = optim.SGD(mlp():parameters(), { lr = 0.05, momentum = 0.9 })
  plain:load_state_dict(unflatten_opt(back, 'optim.', plain:state_dict()))
  T.eq(plain.state[plain.param_groups[1].params[1]].master, nil)
end)

T.test('policy:autocast and prepare', function()
  local p2 = amp.policy('O2')
  T.eq(p2:autocast(function(a, b) return a + b end, 2, 3), 5, 'O2 just calls fn')
  local p1 = amp.policy('O1', { dtype = 'bf16' })
  if amp.autocast then
    T.eq(p1:autocast(function(a) return a * 2 end, 4), 8, 'O1 runs fn under amp.autocast')
  else
    T.raises(function() p1:autocast(function() end) end, 'O1 autocast is not available')
  end
  local m, opt = amp.policy('O2'):prepare(mlp(), optim.SGD, { lr = 0.1 })
  T.eq(m[1].weight.dtype, 'f16')
  T.eq(opt.master_weights, true)
  local _, opt0 = amp.policy('O0'):prepare(mlp(), optim.SGD, { lr = 0.1 })
  T.eq(opt0.master_weights, false)
  T.eq(tostring(amp.policy('O3')), 'amp.Policy(O3, f16, keep_fp32 = {})')
end)

T.test('bad levels, dtypes, keep_fp32 entries and options raise clear errors', function()
  local e = T.raises(function() amp.policy('O4') end, "amp.policy: level must be 'O0', 'O1', 'O2' or 'O3', got 'O4'")
  T.ok(e:find('^[^:]*test_amp_o2%.lua:%d+: ') ~= nil, "the error is reported at the caller's line: " .. e)
  e = T.raises(function() amp.policy('O2', { keep_fp32 = { 'zz' } }):convert(nn.Linear(2, 2)) end, "entry 'zz'")
  T.ok(e:find('^[^:]*test_amp_o2%.lua:%d+: ') ~= nil, "convert's error at the caller's line: " .. e)
  e = T.raises(function() optim.AdamW(mlp():parameters(), { master_weights = 1 }) end, 'AdamW: master_weights must be a boolean')
  T.ok(e:find('^[^:]*test_amp_o2%.lua:%d+: ') ~= nil, "the optimizer's error at the caller's line: " .. e)
  T.raises(function() amp.policy(2) end, 'got number')
  T.raises(function() amp.policy('O2', { dtype = 'fp8' }) end, "amp.policy: dtype must be 'fp16' or 'bf16', got 'fp8'")
  T.raises(function() amp.policy('O2', { dtype = 'f32' }) end, "got 'f32'")
  T.raises(function() amp.policy('O2', { keep_fp32 = 'LayerNorm' }) end, 'keep_fp32 must be a list of class names or module paths, got string')
  T.raises(function() amp.policy('O2', { keep_fp32 = { 'LayerNorm', 3 } }) end, 'keep_fp32 entry 2 must be a non-empty string')
  T.raises(function() amp.policy('O2', { keep_fp32 = { '' } }) end, "keep_fp32 entry 1 must be a non-empty string (a class name or a dotted module path), got ''")
  T.raises(function() amp.policy('O2', { keep_fp32 = { x = 'LayerNorm' } }) end, 'keep_fp32 must be a list (a plain array)')
  T.raises(function() amp.policy('O1', { keep_fp32 = { 'LayerNorm' } }) end, 'keep_fp32 applies to O2 and O3')
  T.raises(function() amp.policy('O2', { level = 'O3' }) end, "amp.policy: unknown option 'level'")
  T.raises(function() amp.policy('O2', { keep_fp32 = { 'LayerNrom' } }):convert(mlp()) end,
    "amp.half_model: keep_fp32 entry 'LayerNrom' matches no module class or path of the model")
  T.raises(function() amp.half_model(Net(), { keep_fp32 = { 'encoder.layer.2' } }) end, "entry 'encoder.layer.2' matches no module")
  T.raises(function() amp.half_model({}) end, 'amp.half_model: expected an nn.Module, got table')
  T.raises(function() amp.half_model(mlp(), { dtype = 'bf15' }) end, "amp.half_model: dtype must be 'fp16' or 'bf16', got 'bf15'")
  T.raises(function() amp.half_model(mlp(), { keep = {} }) end, "amp.half_model: unknown option 'keep'")
  T.raises(function() optim.SGD(mlp():parameters(), { lr = 0.1, master_weights = 'yes' }) end,
    'SGD: master_weights must be a boolean, got string')
  T.raises(function() amp.policy('O2'):autocast(42) end, 'amp.Policy:autocast: expected a function, got number')
  T.raises(function() amp.policy('O2'):prepare(mlp(), 'SGD') end, 'optimizer_factory must be a function')
  local sd = amp.policy('O2'):state_dict()
  sd.level = v100.tensor({ 7 }, { dtype = 'f32' })
  T.raises(function() amp.policy('O0'):load_state_dict(sd) end, 'amp.Policy:load_state_dict: level must be 0..3 (O0..O3), got 7')
  sd = amp.policy('O2'):state_dict()
  sd.keep_fp32 = v100.tensor({ 65 }, { dtype = 'u8' })
  T.raises(function() amp.policy('O0'):load_state_dict(sd) end, 'keep_fp32 must be a u8 tensor from state_dict()')
  T.raises(function() amp.policy('O0'):load_state_dict(nil) end, 'expected a table from state_dict(), got nil')
  -- a failed conversion leaves the model as it was (entries are checked before any cast)
  local m = mlp()
  pcall(amp.half_model, m, { keep_fp32 = { 'nope' } })
  T.eq(m[1].weight.dtype, 'f32')
end)

T.test('O3 asks the optimizer for stochastic rounding, O2 for master weights; a choice of the user stays', function()
  local o3 = amp.policy('O3', { dtype = 'bf16' }):optimizer_opts { lr = 0.1 }
  T.eq(o3.stochastic_rounding, true)
  T.eq(o3.master_weights, nil)
  T.eq(amp.policy('O3'):optimizer_opts({ lr = 0.1, stochastic_rounding = false }).stochastic_rounding, false)
  local o2 = amp.policy('O2'):optimizer_opts { lr = 0.1 }
  T.eq(o2.master_weights, true)
  T.eq(o2.stochastic_rounding, nil)
  -- an O3 model trains with it: a bf16 Linear stepped by SGD moves by less than half an ulp
  local m = nn.Linear(64, 64)
  local policy = amp.policy('O3', { dtype = 'bf16' })
  policy:convert(m)
  local opt = optim.SGD(m:parameters(), policy:optimizer_opts { lr = 1e-5, rounding_seed = 3 })
  local before = m.weight:clone()
  for _ = 1, 20 do
    opt:zero_grad()
    m(v100.ones({ 8, 64 }, { dtype = 'bf16' })):float():sum():backward()
    opt:step()
  end
  T.ok(m.weight:ne(before):sum():item() > 0, 'O3 bf16 weights moved by steps under half an ulp')
end)

T.test('O2 with a scaler: half gradients are unscaled after the f32 cast, so small ones survive', function()
  -- d loss / d w = 2^-26: below f16's smallest subnormal (2^-24). Scaled by 2^16 it is 2^-10 in
  -- f16; unscaled in f16 it would flush to 0 and the step would do nothing.
  for _, mw in ipairs { true, false } do
    local w = v100.ones({ 1 }):half():requires_grad_(true)
    local opt = optim.SGD({ w }, { lr = 2 ^ 10, master_weights = mw })
    local scaler = amp.Scaler { init_scale = 2 ^ 16 }
    opt:zero_grad()
    scaler:backward((w:float() * 2 ^ -26):sum())
    scaler:step(opt)
    scaler:update()
    if mw then
      T.eq(opt.state[w].master:item(), 1 - 2 ^ -16, 'the f32 master took the 2^-26 gradient')
      T.eq(scaler:counters().skipped_steps, 0)
    else
      T.eq(w:float():item(), 1.0, 'without masters the half gradient unscaled in half is 0 (O3 semantics)')
    end
  end
end)

T.run()
