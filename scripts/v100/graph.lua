-- scripts/v100/graph.lua: `v100.graph`, CUDA graphs of whole training steps (docs/AMP.md, "CUDA
-- graphs"; the C side is runtime/core/graph.h).
--
--   local x, y = static input tensors on the GPU (refilled with copy_ before each replay)
--   local g = v100.graph(function()
--     opt:zero_grad()
--     local loss = F.cross_entropy(model(x), y)
--     scaler:backward(loss); scaler:step(opt); scaler:update()
--     return loss
--   end, { warmup = 3 })
--   for step = 1, n do
--     x:copy_(batch_x); y:copy_(batch_y)
--     local loss = g:replay()            -- the step's outputs, refreshed by this replay
--   end
--
-- The step runs `warmup` times eagerly on the graph's side stream (this is where lazily made
-- state appears: optimizer moments, cuDNN plans, workspaces), then once under capture: its
-- allocations come from the graph's private pool and stay reserved for it, so the tensors it
-- returns keep their addresses and every replay rewrites them. Anything a graph cannot replay
-- (a host read such as :item(), a CPU op, a copy from host memory, a synchronisation, a cuDNN
-- benchmark search, an allocation on another stream) fails the capture with an error naming the
-- operation. Random numbers (dropout) differ per replay, as in eager steps. Optimizers step in
-- a graph only with `capturable = true` (lr and step count on the device).
local core = require 'v100.core'
local errors = require 'v100.errors'
local _graph = core._graph

local graph = {}

local Graph = {}
Graph.__index = function(self, k)
  local m = Graph[k]
  if m ~= nil then return m end
  if k == 'nodes' or k == 'rng_groups' or k == 'captured' then return self._g:info()[k] end
  return nil
end
Graph.__name = 'v100.Graph'

local fail = errors.fail -- every message starts 'v100.graph: '

-- Callbacks registered by the code of the step during capture (graph.on_replay).
local capturing_hooks = nil

-- graph.on_replay(fn): while a step is captured, registers fn to run (eagerly, on the host)
-- before each replay of that graph; returns whether a capture is in progress. This is how host
-- values a step reads through device tensors (an optimizer's lr) follow their host side.
function graph.on_replay(fn)
  if capturing_hooks == nil then return false end
  capturing_hooks[#capturing_hooks + 1] = fn
  return true
end

-- Whether a capture is in progress (ops that cannot be captured refuse then).
function graph.capturing() return _graph.capturing() end

local function device_index(d)
  if d == nil then return 0 end
  if math.type(d) == 'integer' and d >= 0 then return d end
  if type(d) == 'string' then
    local i = d:match('^cuda:(%d+)$')
    if i then return tonumber(i) end
    if d == 'cuda' then return 0 end
  end
  fail(3, "v100.graph: device must be a CUDA device ('cuda:N' or N), got %s", tostring(d))
end

local function tb(e) return debug.traceback(tostring(e), 2) end

-- v100.graph(step_fn[, {warmup = 3, device = 'cuda:0'}]) -> a captured Graph.
function graph.capture(fn, opts)
  if type(fn) ~= 'function' then fail(2, 'v100.graph: expected a step function, got %s', type(fn)) end
  opts = errors.check_opts('v100.graph', opts, { 'warmup', 'device' })
  local warmup = opts.warmup == nil and 3 or opts.warmup
  if math.type(warmup) ~= 'integer' or warmup < 0 then
    fail(2, 'v100.graph: warmup must be an integer >= 0, got %s', tostring(warmup))
  end
  if _graph.capturing() then fail(2, 'v100.graph: a capture is already in progress (graphs do not nest)') end
  local dev = device_index(opts.device)
  local g = _graph.new(dev)
  -- Warm-up on the side stream: the caller's stream waits for it at leave().
  g:enter()
  for i = 1, warmup do
    local ok, err = xpcall(fn, tb)
    if not ok then
      g:leave()
      g:close()
      error(string.format('v100.graph: warm-up iteration %d failed: %s', i, err), 2)
    end
  end
  g:leave()
  -- Garbage of the warm-up goes back to the default pool before the capture, where a free of a
  -- default-pool block would be held until the graph is closed.
  collectgarbage()
  collectgarbage()
  -- The capture allocates from a private pool, which takes new device memory; the default pool
  -- cannot hand its cached free segments back during a capture (cudaFree synchronises). So they
  -- go back now: an evaluation before the first step had left 137 GiB of an H200 cached there,
  -- and BERT-Base's capture failed for want of 48 MiB.
  core.memory.empty_cache(dev)
  local hooks = {}
  g:capture_begin()
  capturing_hooks = hooks
  local res = table.pack(xpcall(fn, tb))
  capturing_hooks = nil
  local ok, msg = g:capture_end(res[1])
  if not ok then
    g:close()
    if not res[1] then error('v100.graph: capture failed: ' .. tostring(res[2]), 2) end
    error('v100.graph: capture failed: ' .. tostring(msg), 2)
  end
  local outputs = table.pack(table.unpack(res, 2, res.n))
  return setmetatable({ _g = g, outputs = outputs, _hooks = hooks }, Graph)
end

-- g:replay() -> the step's outputs (the tensors the capture returned, rewritten by this replay).
function Graph:replay()
  for _, h in ipairs(self._hooks) do h() end
  self._g:replay()
  return table.unpack(self.outputs, 1, self.outputs.n)
end

-- g:close(): frees the executable graph, its stream and (once its tensors are collected) its
-- private pool. Also at collection and at the end of a `local g <close>` scope.
function Graph:close()
  self._g:close()
  self.outputs = { n = 0 }
end
Graph.__close = Graph.close

function Graph:__tostring()
  local info = self._g:info()
  return string.format('v100.Graph(cuda:%d, %d nodes, %s)', info.device, info.nodes,
    info.captured and 'captured' or 'closed')
end

return setmetatable(graph, { __call = function(_, fn, opts) return graph.capture(fn, opts) end })
