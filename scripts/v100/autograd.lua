-- scripts/v100/autograd.lua: the Lua side of autograd (`v100.autograd`): grad-mode helpers,
-- hook handles, autograd.Function and gradcheck. The engine and every op's backward are in C
-- (runtime/autograd/*.c); bindings/l_autograd.c provides the primitives used here.
local core = require 'v100.core'
local errors = require 'v100.errors'

local C = core.autograd
local Tensor = core.Tensor
local autograd = {}

autograd.grad = C.grad
autograd.live_nodes = C._live_nodes -- autograd nodes alive in the process (for tests)

-- ---------------------------------------------------------------------------------------------
-- Grad mode: fn runs with recording on/off; the previous mode comes back even if fn raises.

local function with_mode(on, fn, ...)
  local prev = core.is_grad_enabled()
  core.set_grad_enabled(on)
  local res = table.pack(pcall(fn, ...))
  core.set_grad_enabled(prev)
  if not res[1] then error(res[2], 0) end
  return table.unpack(res, 2, res.n)
end

function autograd.no_grad(fn, ...) return with_mode(false, fn, ...) end
function autograd.enable_grad(fn, ...) return with_mode(true, fn, ...) end

-- ---------------------------------------------------------------------------------------------
-- Hooks: the handle refers to the tensor weakly, like PyTorch's RemovableHandle.

local Handle = {}
Handle.__index = Handle

function Handle:remove()
  local t = self._ref[1]
  if self._id and t then C._remove_hook(t, self._id) end
  self._id = nil
end

local function handle(t, id)
  return setmetatable({ _ref = setmetatable({ t }, { __mode = 'v' }), _id = id }, Handle)
end

function Tensor:register_hook(fn) return handle(self, C._register_hook(self, fn)) end
function Tensor:register_post_accumulate_grad_hook(fn) return handle(self, C._register_post_hook(self, fn)) end

-- ---------------------------------------------------------------------------------------------
-- autograd.Function{name=, forward=function(ctx, ...) end, backward=function(ctx, g1, ...) end}

local Ctx = {}
Ctx.__index = Ctx

function Ctx:save_for_backward(...)
  rawset(self, '_to_save', table.pack(...))
end

local FUNCTION_KEYS = { 'name', 'forward', 'backward' }

function autograd.Function(def)
  if type(def) ~= 'table' or type(def.forward) ~= 'function' or type(def.backward) ~= 'function' then
    error('autograd.Function: expected a table with forward and backward functions', 2)
  end
  errors.check_opts('autograd.Function', def, FUNCTION_KEYS)
  local name = def.name or 'Function'
  local F = { name = name }
  function F.apply(...)
    local args = table.pack(...)
    local ctx = setmetatable({}, Ctx)
    -- forward runs without recording: the node recorded below stands for all of it
    local outs = table.pack(with_mode(false, def.forward, ctx, ...))
    local saved = rawget(ctx, '_to_save') or {}
    ctx._to_save = nil
    if core.is_grad_enabled() then
      C._function_record(name, def.backward, ctx, args, args.n, outs, saved)
    end
    return table.unpack(outs, 1, outs.n)
  end
  return setmetatable(F, { __call = function(_, ...) return F.apply(...) end })
end

-- ---------------------------------------------------------------------------------------------
-- gradcheck(fn, inputs[, {eps=1e-6, atol=1e-5, rtol=1e-3}]): analytical Jacobian (one backward
-- per output element) against central differences, on f64 inputs.

local FLOATS = { f64 = true, f32 = true, f16 = true, bf16 = true }

local function flat(t)
  if t:numel() == 0 then return {} end
  return t:detach():contiguous():view(-1):totable()
end

-- A view of element j (1-based, row-major) of x, whatever its strides.
local function element(x, j)
  local shape = x.shape
  local v, r = x, j - 1
  for d = #shape, 1, -1 do
    local i = r % shape[d]
    r = r // shape[d]
    v = v:narrow(d, i + 1, 1)
  end
  return v
end

local function tensor_outputs(res)
  local outs = {}
  for i = 1, res.n do
    local o = res[i]
    if core.is_tensor(o) and FLOATS[o.dtype] then outs[#outs + 1] = o end
  end
  return outs
end

local GRADCHECK_KEYS = { 'eps', 'atol', 'rtol' }

function autograd.gradcheck(fn, inputs, opts)
  opts = errors.check_opts('gradcheck', opts, GRADCHECK_KEYS)
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-5, opts.rtol or 1e-3
  if core.is_tensor(inputs) then inputs = { inputs } end
  local nin = #inputs
  local diff = {} -- positions of the inputs that require grad
  for i = 1, nin do
    local x = inputs[i]
    if core.is_tensor(x) and x.requires_grad then
      if x.dtype ~= 'f64' then
        error(string.format('gradcheck: input %d is %s; finite differences need f64 inputs', i, x.dtype), 2)
      end
      diff[#diff + 1] = i
    end
  end
  if #diff == 0 then error('gradcheck: no input requires grad', 2) end
  local function run() return tensor_outputs(table.pack(fn(table.unpack(inputs, 1, nin)))) end

  -- analytical: ana[k][e][i] = flat gradient of output k element e w.r.t. input diff[i]
  local outs = run()
  local dinputs = {}
  for i, p in ipairs(diff) do dinputs[i] = inputs[p] end
  local ana = {}
  for k, o in ipairs(outs) do
    ana[k] = {}
    for e = 1, o:numel() do
      local row = {}
      local grads = {}
      if o.requires_grad then
        local g = core.zeros(o.shape, { dtype = o.dtype, device = o.device })
        element(g, e):fill_(1)
        grads = C.grad({ o }, dinputs, { g }, { retain_graph = true })
      end
      for i = 1, #diff do
        local gi = grads[i]
        row[i] = gi and flat(gi) or false
      end
      ana[k][e] = row
    end
  end
  outs = nil

  -- numerical, one input element at a time
  autograd.no_grad(function()
    for i, p in ipairs(diff) do
      local x = inputs[p]
      for j = 1, x:numel() do
        local v = element(x, j)
        local orig = v:item()
        v:fill_(orig + eps)
        local plus = run()
        for k = 1, #plus do plus[k] = flat(plus[k]) end
        v:fill_(orig - eps)
        local minus = run()
        for k = 1, #minus do minus[k] = flat(minus[k]) end
        v:fill_(orig)
        for k = 1, #plus do
          for e = 1, #plus[k] do
            local num = (plus[k][e] - minus[k][e]) / (2 * eps)
            local row = ana[k] and ana[k][e]
            local a = row and row[i] and row[i][j] or 0
            if not (math.abs(a - num) <= atol + rtol * math.abs(num)) then
              error(string.format('gradcheck: Jacobian mismatch for input %d, element %d (output %d, element %d): ' ..
                'numerical %.10g, analytical %.10g', p, j, k, e, num, a), 0)
            end
          end
        end
      end
    end
  end)
  return true
end

return autograd
