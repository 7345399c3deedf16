-- tests/lua/gpu_checkpoint.lua: v100.checkpoint with CUDA state: an O2 ResNet-18 (half, channels
-- last, f32 masters) with SGD momentum and a scaler trained on the GPU is saved; the model file
-- holds f32 NCHW tensors equal to the device weights; restored into a fresh CUDA model the
-- weights, masters, momentum and scaler are bitwise the same; loaded on the CPU the f32 model
-- gives the same parameters; resuming on the GPU reproduces the next steps' losses exactly
-- (v100.set_deterministic).
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local resnet = require 'v100.models.resnet'
local ckpt = require 'v100.checkpoint'
local fs = require('v100.core')._ckpt

T.cuda_or_skip()
v100.set_deterministic(true) -- deterministic cuDNN algorithms: the resumed steps are bitwise the same

local ROOT = string.format('%s/v100lua_gpu_checkpoint_%d', os.getenv('TMPDIR') or '/tmp', fs.pid())
fs.remove_tree(ROOT)

local function make(seed)
  v100.manual_seed(seed)
  local m = resnet.resnet18 { classes = 10 }
  local policy = amp.policy('O2', { dtype = 'f16' })
  policy:convert(m)
  m:to('cuda', { layout = 'nhwc' })
  local opt = optim.SGD(m:parameters(), policy:optimizer_opts { lr = 0.05, momentum = 0.9 })
  return m, opt, amp.Scaler { init_scale = 2 ^ 12 }
end

local function steps(m, opt, scaler, n)
  local losses = {}
  for _ = 1, n do
    local x = v100.randn({ 4, 3, 32, 32 }, { device = 'cuda' }):half():to_channels_last()
    local y = v100.tensor({ 1, 3, 5, 7 }, { dtype = 'i64', device = 'cuda' })
    opt:zero_grad()
    local loss = nn.F.cross_entropy(m(x):float(), y)
    losses[#losses + 1] = loss:item()
    scaler:backward(loss)
    scaler:step(opt)
    scaler:update()
  end
  return losses
end

local function masters(opt)
  local out = {}
  for i, p in ipairs(opt.param_groups[1].params) do
    local st = opt.state[p]
    if st and st.master then out[i] = st.master end
  end
  return out
end

T.test('O2 ResNet-18 on CUDA: save, restore bitwise, CPU load, resume', function()
  local m, opt, scaler = make(5)
  steps(m, opt, scaler, 2)
  local path = ckpt.save(ROOT, { model = m, optimizer = opt, scaler = scaler, epoch = 0, step = 2 })
  local file = v100.load_safetensors(path .. '/model.safetensors')
  local sd = m:state_dict()
  for k, t in pairs(sd) do
    T.ok(file[k] ~= nil, k)
    T.eq(file[k].dtype, v100.dtype_is_float(t.dtype) and 'f32' or t.dtype, 'dtype of ' .. k)
    T.tensor_eq(file[k], t:to('cpu'):to(file[k].dtype):contiguous(), 'stored ' .. k)
  end
  local want = steps(m, opt, scaler, 3)

  local c = ckpt.load(ROOT)
  local cpu = resnet.resnet18 { classes = 10 }
  cpu:load_state_dict(c.model)
  T.tensor_eq(cpu.fc.weight, c.model['fc.weight'], 'the CPU model takes the f32 file')
  -- (building models draws from the generator: restore comes last, it resets the generator)
  local m2, opt2, scaler2 = make(77)
  ckpt.restore(c, { model = m2, optimizer = opt2, scaler = scaler2 })
  T.eq(m2.conv1.weight.device, m.conv1.weight.device)
  T.eq(m2.conv1.weight.dtype, 'f16')
  local mw = masters(opt2)
  local n = 0
  for _ in pairs(mw) do n = n + 1 end
  T.ok(n > 0, 'masters restored')
  local got = steps(m2, opt2, scaler2, 3)
  for i = 1, 3 do T.eq(got[i], want[i], 'loss ' .. i .. ' after resuming') end
  local a, b = m:state_dict(), m2:state_dict()
  for k, t in pairs(a) do T.tensor_eq(b[k]:to('cpu'), t:to('cpu'), 'after resuming: ' .. k) end
  T.eq(scaler2:get_scale(), scaler:get_scale())
end)

fs.remove_tree(ROOT)
T.run()
