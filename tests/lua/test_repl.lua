-- tests/lua/test_repl.lua: v100.repl, the interactive prompt's helpers, without a terminal: the
-- globals setup() makes, how results are formatted (scalars, shapes, nested and cyclic tables,
-- state_dicts, tensors, modules, the depth and item limits), completion of globals, fields,
-- module parameters and methods, tensor methods after ':', and set_limits' checks. The prompt
-- itself, typed at through tmux, is tests/tools/test_repl.sh.
local v100 = require 'v100'
local nn = require 'v100.nn'
local repl = require 'v100.repl'
local T = require 'testlib'

local function has(list, x)
  for _, v in ipairs(list) do if v == x then return true end end
  return false
end

T.test('setup makes v100, nn and optim globals', function()
  _G.v100, _G.nn, _G.optim = nil, nil, nil
  repl.setup()
  T.ok(rawequal(_G.v100, v100), 'v100')
  T.ok(rawequal(_G.nn, nn), 'nn')
  T.ok(rawequal(_G.optim, require 'v100.optim'), 'optim')
end)

T.test('scalars and shapes', function()
  T.eq(repl.format(3), '3')
  T.eq(repl.format(3.0), '3.0')
  T.eq(repl.format(0.1), '0.1')
  T.eq(repl.format('top level'), 'top level')
  T.eq(repl.format(true), 'true')
  T.eq(repl.format({}), '{}')
  T.eq(repl.format({2, 3}), '{2, 3}')
  T.eq(repl.format({'a', 1.5, false}), '{"a", 1.5, false}')
end)

T.test('nested tables: sorted keys, quoted strings, cycles, depth and item limits', function()
  local s = repl.format({ b = 2, a = { 1, 'x\ny' }, [10] = true, 'first' })
  T.eq(s, '{\n  "first",\n  [10] = true,\n  a = {1, "x\\ny"},\n  b = 2,\n}')
  local c = {}
  c.me = c
  T.eq(repl.format(c), '{\n  me = <cycle>,\n}')
  local shared = { 1 }
  T.ok(not repl.format({ p = shared, q = shared }):find('cycle'), 'a table met twice is no cycle')
  local deep = repl.format({ a = { b = { c = { d = 1 } } } })
  T.ok(deep:find('c = {...} (1 entry)', 1, true), deep)
  local big = {}
  for i = 1, 100 do big[i] = i end
  local b = repl.format(big)
  T.ok(b:find('... (60 more)', 1, true), 'items beyond the limit are counted')
  for line in b:gmatch('[^\n]+') do T.ok(#line <= repl.limits.width, 'lines fit the width: ' .. line) end
end)

T.test('tensors, state_dicts and modules', function()
  local t = v100.arange(1, 7):view{2, 3}
  T.eq(repl.format(t), tostring(t), 'a tensor at top level prints its values')
  T.eq(repl.format({ t }), '{\n  [v100.Tensor cpu i64 2x3],\n}')
  local m = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
  local sd = repl.format(m:state_dict())
  T.eq(sd, '{\n  0.bias    f32 cpu {3}\n  0.weight  f32 cpu {3, 2}\n}')
  local w = v100.zeros{2}
  w.requires_grad = true
  T.eq(repl.format({ w = w, b = v100.zeros({1}, { dtype = 'bf16' }) }), '{\n  b  bf16 cpu {1}\n  w  f32 cpu {2} grad\n}')
  T.eq(repl.format(m), tostring(m), 'a module prints as its tostring')
  T.eq(repl.format({ m }), '{\n  <Sequential>,\n}')
  local f = v100.zeros{2}
  f:free()
  T.eq(repl.format(f), '[v100.Tensor freed]')
end)

T.test('completion', function()
  repl.setup()
  local c = repl.complete('v100.ze')
  T.ok(has(c, 'v100.zeros') and has(c, 'v100.zeros_like'), table.concat(c, ' '))
  for _, x in ipairs(c) do T.ok(x:find('^v100%.ze'), x) end
  T.ok(has(repl.complete('pri'), 'print'))
  T.ok(has(repl.complete('whi'), 'while'), 'keywords')
  T.ok(has(repl.complete('string.fo'), 'string.format'))
  _G.repl_t = v100.ones{2}
  local m = repl.complete('repl_t:resh')
  T.eq(#m, 1)
  T.eq(m[1], 'repl_t:reshape')
  T.ok(has(repl.complete('repl_t.sh'), 'repl_t.shape'), 'tensor fields after .')
  _G.repl_m = nn.Linear(2, 3)
  T.ok(has(repl.complete('repl_m.wei'), 'repl_m.weight'), 'parameters')
  T.ok(has(repl.complete('repl_m:param'), 'repl_m:parameters'), 'class methods')
  T.ok(not has(repl.complete('repl_m:'), 'repl_m:weight'), "':' offers functions only")
  T.ok(has(repl.complete('print(nn.Lin', 'nn.Lin'), 'nn.Linear'), 'the word readline gives')
  T.eq(#repl.complete('no_such_global.x'), 0)
  T.eq(#repl.complete('v100..x'), 0)
  -- completing never runs an __index function of a table
  local ran = false
  _G.repl_trap = setmetatable({}, { __index = function() ran = true end })
  repl.complete('repl_trap.a')
  repl.complete('repl_trap.a.b')
  T.ok(not ran, 'no __index function ran')
  _G.repl_t, _G.repl_m, _G.repl_trap = nil, nil, nil
end)

T.test('set_limits checks its options', function()
  local old = { depth = repl.limits.depth, items = repl.limits.items, width = repl.limits.width }
  T.raises(function() repl.set_limits { depht = 2 } end, "unknown option 'depht' (depth, items, width)")
  T.raises(function() repl.set_limits { depth = 0 } end, 'depth must be a positive integer')
  T.raises(function() repl.set_limits(3) end, 'expected a table')
  repl.set_limits { items = 2 }
  T.eq(repl.format({ 1, 2, 3, 4 }), '{1, 2, ... (2 more)}')
  repl.set_limits(old)
end)

T.run()
