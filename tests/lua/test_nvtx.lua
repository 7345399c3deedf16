-- tests/lua/test_nvtx.lua: v100.nvtx is harmless to turn on and off: a model's outputs and
-- gradients are bitwise the same with ranges on and off; every range opened is closed (module
-- calls, the backward's layer and node ranges, collectives, errors inside a forward, nvtx.range);
-- the layer scopes are interned once per call path; V100LUA_NVTX=1 turns them on at start. On a
-- CPU build nothing reaches a tool (nvtx.available is false) but the bookkeeping is the same, so
-- the balance is checked everywhere; gpu runs under nsys show the ranges themselves.
local v100 = require 'v100'
local nn = require 'v100.nn'
local nvtx = require 'v100.nvtx'
local T = require 'testlib'

local function stats() return nvtx.stats() end

local Net = nn.Module:extend('Net')
function Net:init()
  self.body = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
  self.head = nn.Linear(3, 2)
end
function Net:forward(x) return self.head(self.body(x)) end

local function run(model, x)
  for _, p in ipairs(model:parameters()) do p.grad = nil end
  local y = model(x)
  y:pow(2):sum():backward()
  local grads = {}
  for i, p in ipairs(model:parameters()) do grads[i] = p.grad:clone() end
  return y, grads
end

T.test('off by default, and off does nothing', function()
  T.eq(nvtx.enabled(), false)
  T.eq(type(nvtx.available), 'boolean')
  local s0 = stats()
  nvtx.push('x')
  nvtx.pop()
  nvtx.mark('m')
  T.eq(stats().pushes, s0.pushes)
end)

T.test('a model with ranges on: the same numbers, every range closed, one scope per call path', function()
  v100.manual_seed(3)
  local model = Net()
  local x = v100.randn({5, 6})
  local y0, g0 = run(model, x)
  nvtx.enable(true)
  T.eq(nvtx.enabled(), true)
  local s0 = stats()
  local y1, g1 = run(model, x)
  local s1 = stats()
  T.alleq(y1, y0:totable())
  for i = 1, #g0 do T.alleq(g1[i], g0[i]:totable(), 'gradient ' .. i) end
  T.eq(s1.depth, 0)
  T.eq(s1.pushes - s0.pushes, s1.pops - s0.pops)
  -- scopes: Net, body: Sequential, 1: Linear, 2: ReLU, 3: Linear, head: Linear
  T.eq(s1.scopes - s0.scopes, 6)
  -- forward: 6 module calls; backward: at least the 6 layers' backward ranges and a node each
  T.ok(s1.pushes - s0.pushes >= 6 + 6 + 6, 'only ' .. (s1.pushes - s0.pushes) .. ' ranges')
  -- a second step reuses the scopes
  run(model, x)
  local s2 = stats()
  T.eq(s2.scopes, s1.scopes)
  T.eq(s2.pushes - s1.pushes, s1.pushes - s0.pushes)
  T.eq(s2.depth, 0)
  nvtx.enable(false)
  run(model, x)
  T.eq(stats().pushes, s2.pushes)
end)

T.test('an error inside a forward closes its ranges', function()
  local Bad = nn.Module:extend('Bad')
  function Bad:init() self.fc = nn.Linear(4, 4) end
  function Bad:forward(x) return self.fc(x) end
  nvtx.enable(true)
  local ok, err = pcall(function() return Bad()(v100.randn({ 3, 5 })) end)
  T.eq(ok, false)
  T.ok(tostring(err):find('fc'), tostring(err))
  T.eq(stats().depth, 0)
  nvtx.enable(false)
end)

T.test('nvtx.range: results through, closed on errors too', function()
  nvtx.enable(true)
  local a, b = nvtx.range('two', function(x) return x, x * 2 end, 21)
  T.eq(a, 21)
  T.eq(b, 42)
  T.raises(function() nvtx.range('boom', function() error('boom inside') end) end, 'boom inside')
  T.eq(stats().depth, 0)
  T.raises(function() nvtx.range(1, function() end) end, 'the message must be a string')
  T.raises(function() nvtx.enable('yes') end, 'expects true or false')
  nvtx.enable(false)
  T.eq(nvtx.range('off', function() return 7 end), 7)
end)

T.test('collectives get a range each', function()
  local dist = require 'v100.dist'
  if os.getenv('OMPI_COMM_WORLD_RANK') or os.getenv('PMI_RANK') or os.getenv('SLURM_PROCID') then return end
  dist.init()
  nvtx.enable(true)
  local s0 = stats()
  local t = v100.ones({ 4 })
  dist.all_reduce(t)
  dist.broadcast(t)
  dist.barrier()
  local s1 = stats()
  T.eq(s1.pushes - s0.pushes, 3)
  T.eq(s1.pops - s0.pops, 3)
  nvtx.enable(false)
end)

T.test('V100LUA_NVTX=1 turns the ranges on at start', function()
  local exe = "'" .. T.binary():gsub("'", "'\\''") .. "'"
  local p = assert(io.popen('V100LUA_NVTX=1 ' .. exe .. [[ -e "print(require('v100.nvtx').enabled())" 2>&1]]))
  T.eq(p:read('a'), 'true\n')
  p:close()
  p = assert(io.popen('V100LUA_NVTX=0 ' .. exe .. [[ -e "print(require('v100.nvtx').enabled())" 2>&1]]))
  T.eq(p:read('a'), 'false\n')
  p:close()
end)

T.run()
