-- scripts/v100/nn/functional.lua: `v100.nn.functional` (also `nn.F`), the stateless layer ops.
--
-- conv2d, pooling, batch_norm and layer_norm are thin wrappers over the C layer ops of
-- `v100._nn` (which record autograd nodes themselves); this file only normalises their options
-- (a number or an {h, w} pair) and checks what C cannot phrase well. Everything else is a
-- composition of autograd-aware tensor ops, so its backward comes from the tape.
--
-- Conventions (docs/NN_API.md): 1-based dims, 0-based class ids / token ids. Errors are raised
-- at level 0 like the C ops' errors ("cross_entropy: ..."), so that a module path can be put in
-- front of them without a file position in between.
local v100 = require 'v100'

local F = {}

local function core_nn()
  -- Looked up at call time: the v100 table copies core's entries once at load, and the layer
  -- ops live in core._nn.
  return v100._nn or require('v100.core')._nn
end

-- "2x3x4 f32 cpu" for error messages.
local function desc(t)
  if not v100.is_tensor(t) then return type(t) end
  local s = t.shape
  local dims = #s == 0 and 'scalar' or table.concat(s, 'x')
  return dims .. ' ' .. t.dtype .. ' ' .. t.device
end
F._desc = desc

local function fail(fname, fmt, ...)
  error(fname .. ': ' .. string.format(fmt, ...), 0)
end

local function check_tensor(fname, what, t)
  if not v100.is_tensor(t) then fail(fname, '%s must be a tensor, got %s', what, type(t)) end
end

-- A layer's input and its parameter on different devices is the most common slip (a batch left
-- on the cpu, a model not moved): say so in the layer's words rather than the inner op's.
local function same_device(fname, x, xname, p, pname)
  if p ~= nil and x.device ~= p.device then
    fail(fname, '%s is on %s but %s is on %s (%s %s, %s %s)', xname, x.device, pname, p.device, xname, desc(x),
      pname, desc(p))
  end
end

local FLOATS = { f32 = true, f16 = true, bf16 = true, f64 = true }
local INTS = { i64 = true, i32 = true }

-- A number or an {h, w} pair -> {h, w} of integers.
local function pair(fname, what, v, default)
  if v == nil then v = default end
  if math.type(v) == 'integer' then return { v, v } end
  if type(v) == 'number' and v == math.floor(v) then return { math.tointeger(v), math.tointeger(v) } end
  if type(v) == 'table' and #v == 2 and math.tointeger(v[1]) and math.tointeger(v[2]) then
    return { math.tointeger(v[1]), math.tointeger(v[2]) }
  end
  fail(fname, '%s must be an integer or an {h, w} pair of integers, got %s', what,
    type(v) == 'table' and ('a table of ' .. #v) or tostring(v))
end
F._pair = pair

-- ---------------------------------------------------------------------------------------------
-- C layer ops

function F.conv2d(x, w, b, opts)
  opts = opts or {}
  check_tensor('conv2d', 'input', x)
  check_tensor('conv2d', 'weight', w)
  same_device('conv2d', x, 'input', w, 'weight')
  local groups = opts.groups or 1
  if not math.tointeger(groups) or groups < 1 then fail('conv2d', 'groups must be a positive integer') end
  return core_nn().conv2d(x, w, b, {
    stride = pair('conv2d', 'stride', opts.stride, 1),
    padding = pair('conv2d', 'padding', opts.padding, 0),
    dilation = pair('conv2d', 'dilation', opts.dilation, 1),
    groups = math.tointeger(groups),
  })
end

function F.max_pool2d(x, k, opts)
  opts = opts or {}
  check_tensor('max_pool2d', 'input', x)
  local kernel = pair('max_pool2d', 'kernel_size', k)
  return core_nn().max_pool2d(x, kernel, {
    stride = pair('max_pool2d', 'stride', opts.stride, kernel),
    padding = pair('max_pool2d', 'padding', opts.padding, 0),
    dilation = pair('max_pool2d', 'dilation', opts.dilation, 1),
    ceil_mode = opts.ceil_mode and true or false,
  })
end

function F.avg_pool2d(x, k, opts)
  opts = opts or {}
  check_tensor('avg_pool2d', 'input', x)
  local kernel = pair('avg_pool2d', 'kernel_size', k)
  local cip = opts.count_include_pad
  if cip == nil then cip = true end
  return core_nn().avg_pool2d(x, kernel, {
    stride = pair('avg_pool2d', 'stride', opts.stride, kernel),
    padding = pair('avg_pool2d', 'padding', opts.padding, 0),
    ceil_mode = opts.ceil_mode and true or false,
    count_include_pad = cip and true or false,
  })
end

function F.adaptive_avg_pool2d(x, size)
  check_tensor('adaptive_avg_pool2d', 'input', x)
  return core_nn().adaptive_avg_pool2d(x, pair('adaptive_avg_pool2d', 'output_size', size))
end

-- PyTorch's argument order; running stats may be nil (then batch statistics are used, which
-- requires training = true semantics, as in PyTorch).
function F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)
  check_tensor('batch_norm', 'input', x)
  same_device('batch_norm', x, 'input', weight, 'weight')
  same_device('batch_norm', x, 'input', running_mean, 'running_mean')
  if x.ndim < 2 or x.ndim > 4 then
    fail('batch_norm', 'expected a 2-D, 3-D or 4-D input (N x C [x L | x H x W]), got %s', desc(x))
  end
  if not training and (running_mean == nil or running_var == nil) then
    fail('batch_norm', 'running_mean and running_var are needed when training is false')
  end
  return core_nn().batch_norm(x, running_mean, running_var, weight, bias, training and true or false,
    momentum or 0.1, eps or 1e-5)
end

function F.layer_norm(x, normalized_shape, weight, bias, eps)
  check_tensor('layer_norm', 'input', x)
  same_device('layer_norm', x, 'input', weight, 'weight')
  local ns = type(normalized_shape) == 'number' and { normalized_shape } or normalized_shape
  if type(ns) ~= 'table' or #ns == 0 then fail('layer_norm', 'normalized_shape must be a number or a table of sizes') end
  local s = x.shape
  local ok = #ns <= #s
  for i = 1, #ns do
    if not ok or s[#s - #ns + i] ~= ns[i] then ok = false break end
  end
  if not ok then
    fail('layer_norm', 'normalized_shape %s does not match the last dims of input %s', table.concat(ns, 'x'), desc(x))
  end
  return core_nn().layer_norm(x, ns, weight, bias, eps or 1e-5)
end

-- ---------------------------------------------------------------------------------------------
-- Activations and simple layers

function F.relu(x) return x:relu() end
function F.gelu(x, opts)
  if opts and opts.approximate and opts.approximate ~= 'none' then return x:gelu(opts) end
  return x:gelu()
end
function F.sigmoid(x) return x:sigmoid() end
function F.tanh(x) return x:tanh() end
function F.softmax(x, dim) return x:softmax(dim or -1) end
function F.log_softmax(x, dim) return x:log_softmax(dim or -1) end

-- Inverted dropout: the kept elements are scaled by 1/(1-p) so that eval needs no scaling.
-- The mask comes from v100.bernoulli (the shared Philox generator), so the same seed/offset
-- gives the same mask; nn.Checkpoint relies on that to recompute.
function F.dropout(x, p, training)
  p = p or 0.5
  if type(p) ~= 'number' or p < 0 or p > 1 then fail('dropout', 'p must be in [0, 1], got %s', tostring(p)) end
  if training == false or p == 0 then return x end
  if p == 1 then return x * 0 end
  local mask = v100.bernoulli(x.shape, 1 - p, { dtype = x.dtype, device = x.device })
  mask:mul_(1 / (1 - p))
  return x * mask
end

-- ids: integer tensor of any shape with 0-based rows of weight; result ids.shape x dim.
-- padding_idx: those positions give the (zero) padding row and send no gradient to it.
function F.embedding(ids, weight, opts)
  check_tensor('embedding', 'ids', ids)
  check_tensor('embedding', 'weight', weight)
  same_device('embedding', ids, 'ids', weight, 'weight')
  if not INTS[ids.dtype] then fail('embedding', 'ids must be i64 or i32, got %s', desc(ids)) end
  if weight.ndim ~= 2 then fail('embedding', 'weight must be 2-D (num x dim), got %s', desc(weight)) end
  local dim = weight.shape[2]
  local out = weight:index_select(1, ids:reshape{ -1 })
  local shape = ids.shape
  shape[#shape + 1] = dim
  out = out:view(shape)
  local pad = opts and opts.padding_idx
  if pad ~= nil then
    if pad < 0 then pad = pad + weight.shape[1] end
    out = out:masked_fill(ids:eq(pad):unsqueeze(-1), 0)
  end
  return out
end

-- y = x w^T + b. 2-D (and flattened N-D) inputs go through one addmm so the bias add is fused
-- into the GEMM.
function F.linear(x, w, b)
  check_tensor('linear', 'input', x)
  check_tensor('linear', 'weight', w)
  same_device('linear', x, 'input', w, 'weight')
  if w.ndim ~= 2 then fail('linear', 'weight must be 2-D (out x in), got %s', desc(w)) end
  local s = x.shape
  if x.ndim == 0 or s[#s] ~= w.shape[2] then
    fail('linear', 'input has %s features but weight expects %d (input %s, weight %s)',
      x.ndim == 0 and 'no' or tostring(s[#s]), w.shape[2], desc(x), desc(w))
  end
  if b and (b.ndim ~= 1 or b.shape[1] ~= w.shape[1]) then
    fail('linear', 'bias must have %d elements (weight %s), got %s', w.shape[1], desc(w), desc(b))
  end
  if x.ndim == 1 then
    local y = x:matmul(w:t())
    if b then y = y + b end
    return y
  end
  local x2 = x.ndim == 2 and x or x:reshape{ -1, s[#s] }
  local y = b and v100.addmm(b, x2, w:t()) or x2:mm(w:t())
  if x.ndim == 2 then return y end
  s[#s] = w.shape[1]
  return y:view(s)
end

-- softmax(q k^T * scale + mask) v over the last two dims (batch dims broadcast).
-- mask: bool (true = attend) or an additive float mask, broadcastable to ... x L x S.
function F.scaled_dot_product_attention(q, k, v, opts)
  opts = opts or {}
  check_tensor('scaled_dot_product_attention', 'q', q)
  check_tensor('scaled_dot_product_attention', 'k', k)
  check_tensor('scaled_dot_product_attention', 'v', v)
  if q.ndim < 2 or k.ndim < 2 or v.ndim < 2 or q.shape[q.ndim] ~= k.shape[k.ndim]
      or k.shape[k.ndim - 1] ~= v.shape[v.ndim - 1] then
    fail('scaled_dot_product_attention', 'q must be ... x L x E, k ... x S x E and v ... x S x Ev (q %s, k %s, v %s)',
      desc(q), desc(k), desc(v))
  end
  local E = q.shape[q.ndim]
  local L, S = q.shape[q.ndim - 1], k.shape[k.ndim - 1]
  local scale = opts.scale or 1 / math.sqrt(E)
  local scores = q:matmul(k:transpose(-2, -1)) * scale
  if opts.causal then
    -- keep key j for query i when j <= i (top-left aligned, as PyTorch's is_causal)
    local rows = v100.arange(0, L, { device = q.device }):view{ L, 1 }
    local cols = v100.arange(0, S, { device = q.device }):view{ 1, S }
    scores = scores:masked_fill(cols:gt(rows), -math.huge)
  end
  local mask = opts.mask
  if mask ~= nil then
    if mask.dtype == 'bool' then
      scores = scores:masked_fill(mask:logical_not(), -math.huge)
    elseif FLOATS[mask.dtype] then
      scores = scores + mask
    else
      fail('scaled_dot_product_attention', 'mask must be bool or floating, got %s', desc(mask))
    end
  end
  local attn = scores:softmax(-1)
  if opts.dropout and opts.dropout > 0 then attn = F.dropout(attn, opts.dropout, true) end
  return attn:matmul(v)
end

-- ---------------------------------------------------------------------------------------------
-- Losses

local function reduce(fname, per, reduction, count)
  reduction = reduction or 'mean'
  if reduction == 'none' then return per end
  if reduction == 'sum' then return per:sum() end
  if reduction == 'mean' then
    if count then return per:sum() / count end
    return per:mean()
  end
  fail(fname, "reduction must be 'mean', 'sum' or 'none', got %s", tostring(reduction))
end

-- The class dim of an input: 2 for N x C [x d1 ...], 1 for an unbatched C vector.
local function class_dim(x) return x.ndim == 1 and 1 or 2 end

-- Checks that target (class ids) has the input's shape without the class dim.
local function check_class_target(fname, input, target)
  check_tensor(fname, 'target', target)
  if target.dtype == 'u8' then target = target:long() end
  if not INTS[target.dtype] then
    fail(fname, 'target must hold class ids (i64 or i32) or probabilities of the input shape (input %s, target %s)',
      desc(input), desc(target))
  end
  local s, ts = input.shape, target.shape
  local ok = #ts == #s - 1
  if ok then
    local cd = class_dim(input)
    local j = 1
    for i = 1, #s do
      if i ~= cd then
        if ts[j] ~= s[i] then ok = false break end
        j = j + 1
      end
    end
  end
  if not ok then
    fail(fname, 'target shape does not match the input without its class dim (input %s, target %s)', desc(input),
      desc(target))
  end
  return target
end

-- Per-element -logp[target] with ignored positions zeroed, and the valid mask (bool).
local function nll_terms(logp, target, ignore_index)
  local cd = class_dim(logp)
  local valid = target:ne(ignore_index)
  -- ignored targets may hold any value (e.g. -100): gather a safe class 0 there, then zero it
  local safe = v100.where(valid, target, 0)
  local picked = logp:gather(cd, safe:unsqueeze(cd)):squeeze(cd)
  return (-picked):masked_fill(valid:logical_not(), 0), valid
end

function F.nll_loss(logp, target, opts)
  opts = opts or {}
  check_tensor('nll_loss', 'input', logp)
  target = check_class_target('nll_loss', logp, target)
  local per, valid = nll_terms(logp, target, opts.ignore_index or -100)
  -- mean over the non-ignored elements only; the count stays on the device (no host sync)
  local count = (opts.reduction or 'mean') == 'mean' and valid:sum():to(per.dtype) or nil
  return reduce('nll_loss', per, opts.reduction, count)
end

-- Label smoothing as PyTorch: (1 - s) * nll + s * mean over classes of -logp, where ignored
-- positions count in neither the sum nor the mean's denominator. Probability targets (a float
-- tensor of the input's shape) are smoothed as target * (1 - s) + s / C.
function F.cross_entropy(logits, target, opts)
  opts = opts or {}
  check_tensor('cross_entropy', 'input', logits)
  check_tensor('cross_entropy', 'target', target)
  if logits.ndim < 1 then fail('cross_entropy', 'input must have a class dim, got %s', desc(logits)) end
  local s = opts.smoothing or opts.label_smoothing or 0
  if s < 0 or s > 1 then fail('cross_entropy', 'smoothing must be in [0, 1], got %s', tostring(s)) end
  local cd = class_dim(logits)
  local C = logits.shape[cd]
  local logp = logits:log_softmax(cd)
  local reduction = opts.reduction or 'mean'

  if FLOATS[target.dtype] then
    local ls, ts = logits.shape, target.shape
    if #ls ~= #ts then
      fail('cross_entropy', 'probability targets must have the input shape (input %s, target %s)', desc(logits), desc(target))
    end
    for i = 1, #ls do
      if ls[i] ~= ts[i] then
        fail('cross_entropy', 'probability targets must have the input shape (input %s, target %s)', desc(logits),
          desc(target))
      end
    end
    if s > 0 then target = target * (1 - s) + s / C end
    local per = -(logp * target):sum(cd)
    -- PyTorch divides by the number of samples (numel / C), as reduce's per:mean() does here
    return reduce('cross_entropy', per, reduction)
  end

  target = check_class_target('cross_entropy', logits, target)
  local nll, valid = nll_terms(logp, target, opts.ignore_index or -100)
  local per = nll
  if s > 0 then
    local smooth = (-logp):sum(cd):masked_fill(valid:logical_not(), 0) / C
    per = nll * (1 - s) + smooth * s
  end
  local count = reduction == 'mean' and valid:sum():to(per.dtype) or nil
  return reduce('cross_entropy', per, reduction, count)
end

local function check_same_shape(fname, a, b)
  local sa, sb = a.shape, b.shape
  local ok = #sa == #sb
  for i = 1, #sa do if sa[i] ~= sb[i] then ok = false end end
  if not ok then fail(fname, 'input and target shapes differ (input %s, target %s)', desc(a), desc(b)) end
end

function F.mse_loss(x, y, opts)
  opts = opts or {}
  check_tensor('mse_loss', 'input', x)
  check_tensor('mse_loss', 'target', y)
  check_same_shape('mse_loss', x, y)
  local d = x - y
  return reduce('mse_loss', d * d, opts.reduction)
end

-- Stable form: (1 - y) x + (1 + (pw - 1) y) (log(1 + exp(-|x|)) + max(-x, 0)); with pw = 1
-- this is max(x, 0) - x y + log(1 + exp(-|x|)), never exponentiating a positive number.
function F.binary_cross_entropy_with_logits(x, y, opts)
  opts = opts or {}
  local fname = 'binary_cross_entropy_with_logits'
  check_tensor(fname, 'input', x)
  check_tensor(fname, 'target', y)
  check_same_shape(fname, x, y)
  local softplus_neg = (x:abs():neg():exp() + 1):log() + x:neg():relu() -- log(1 + exp(-x))
  local per
  if opts.pos_weight ~= nil then
    local lw = (y * (opts.pos_weight - 1)) + 1
    per = (1 - y) * x + lw * softplus_neg
  else
    per = (1 - y) * x + softplus_neg
  end
  if opts.weight ~= nil then per = per * opts.weight end
  return reduce(fname, per, opts.reduction)
end
F.bce_with_logits = F.binary_cross_entropy_with_logits

return F
