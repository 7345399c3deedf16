-- scripts/v100/nn/functional.lua: `v100.nn.functional` (also `nn.F`), the stateless layer ops.
--
-- conv2d, pooling, batch_norm and layer_norm are thin wrappers over the C layer ops of
-- `v100.core._nn` (which record autograd nodes themselves); the others are compositions of
-- autograd-aware tensor ops, so their backward comes from the tape. Every argument check is in C
-- (runtime/nn/*.c), once: the C layer ops check their own arguments, and the compositions call
-- the C check of their layer (`_nn.check_linear`, ...) before composing. Options given as a
-- number or an {h, w} pair are parsed by the bindings, not here.
--
-- Conventions (docs/NN_API.md): 1-based dims, 0-based class ids / token ids. Errors are raised
-- at level 0 like the C ops' errors ("cross_entropy: ..."), so that a module path can be put in
-- front of them without a file position in between.
local v100 = require 'v100.base'
local core = require 'v100.core'
local errors = require 'v100.errors'
local _nn, cast = core._nn, core._amp.cast -- the C layer ops and checks; autocast's operand cast

local F = {}


-- "2x3x4 f32 cpu" for error messages.
local function desc(t)
  if not v100.is_tensor(t) then return type(t) end
  local s = t.shape
  local dims = #s == 0 and 'scalar' or table.concat(s, 'x')
  return dims .. ' ' .. t.dtype .. ' ' .. t.device
end
F._desc = desc

-- A number or an {h, w} pair -> {h, w} of integers (the bindings' parser; layers keep the pairs).
function F._pair(fname, what, v, default) return _nn.pair(fname, what, v, default) end

-- ---------------------------------------------------------------------------------------------
-- C layer ops

function F.conv2d(x, w, b, opts) return _nn.conv2d(x, w, b, opts) end

function F.max_pool2d(x, k, opts) return _nn.max_pool2d(x, k, opts) end

function F.avg_pool2d(x, k, opts) return _nn.avg_pool2d(x, k, opts) end

function F.adaptive_avg_pool2d(x, size) return _nn.adaptive_avg_pool2d(x, size) end

-- PyTorch's argument order; running stats may be nil (then batch statistics are used, which
-- requires training = true semantics, as in PyTorch). opts fuses what follows the normalisation
-- into its pass over the data: {activation = 'relu'} gives relu(bn(x)), {residual = r} bn(x) + r,
-- both relu(bn(x) + r) (r: x's shape and dtype), with their backward in the same kernels.
function F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps, opts)
  return _nn.batch_norm(x, running_mean, running_var, weight, bias, training and true or false,
    momentum or 0.1, eps or 1e-5, opts)
end

function F.layer_norm(x, normalized_shape, weight, bias, eps)
  return _nn.layer_norm(x, normalized_shape, weight, bias, eps or 1e-5)
end

-- ---------------------------------------------------------------------------------------------
-- Activations and simple layers

-- F.pad(x, pads[, {mode = 'constant'|'reflect'|'replicate'|'circular', value = 0}]): PyTorch's
-- F.pad, the C op v100.pad (its options are checked there; docs/LUA_API.md, Shape ops).
function F.pad(x, pads, opts) return core.pad(x, pads, opts) end

function F.relu(x) return x:relu() end
function F.gelu(x, opts)
  errors.check_opts('nn.gelu', opts, { 'approximate' })
  if opts and opts.approximate and opts.approximate ~= 'none' then return x:gelu(opts) end
  return x:gelu()
end
function F.sigmoid(x) return x:sigmoid() end
function F.tanh(x) return x:tanh() end
function F.softmax(x, dim) return x:softmax(dim or -1) end
function F.log_softmax(x, dim) return x:log_softmax(dim or -1) end

-- Inverted dropout: the kept elements are scaled by 1/(1-p) so that eval needs no scaling.
-- One fused op (runtime/nn/dropout.c): the keep mask is drawn inline from the shared Philox
-- generator exactly as v100.bernoulli(x.shape, 1 - p) draws it (the same elements, the same
-- counters consumed), so the same seed/offset gives the same mask -- nn.Checkpoint relies on that
-- to recompute -- and a CUDA graph replay draws a fresh one. Only the draw's (seed, offset) is kept
-- for the backward, which regenerates the mask. p = 0 and eval mode return x, p = 1 returns x * 0;
-- neither draws.
function F.dropout(x, p, training)
  p = p or 0.5
  if training == false or p == 0 or p == 1 then
    _nn.check_prob('dropout', 'p', p)
    if p == 1 and training ~= false then return x * 0 end
    return x
  end
  return _nn.dropout(x, p) -- checks p and x in C
end

-- t: i64 (or i32) 0-based classes of any shape; the i64 result is t.shape x num_classes with a 1
-- at each class (num_classes -1 or nil: max(t) + 1). A value outside [0, num_classes) is an error
-- naming it. As torch.nn.functional.one_hot; the same as t:one_hot(num_classes).
function F.one_hot(t, num_classes)
  return t:one_hot(num_classes)
end

-- ids: integer tensor of any shape with 0-based rows of weight; result ids.shape x dim.
-- padding_idx: those positions give the (zero) padding row and send no gradient to it.
function F.embedding(ids, weight, opts)
  errors.check_opts('nn.embedding', opts, { 'padding_idx' })
  _nn.check_embedding(ids, weight)
  local dim = weight.shape[2]
  -- the gather itself checks every id, naming embedding (no second pass over the ids)
  local out = _nn.index_select_as('embedding', weight, 1, ids:reshape{ -1 })
  local shape = ids.shape
  shape[#shape + 1] = dim
  out = out:view(shape)
  local pad = opts and opts.padding_idx
  if pad ~= nil then
    pad = _nn.padding_idx('embedding', weight.shape[1], pad)
    out = out:masked_fill(ids:eq(pad):unsqueeze(-1), 0)
  end
  return out
end

-- y = x w^T + b. 2-D (and flattened N-D) inputs go through one addmm so the bias add is fused
-- into the GEMM.
function F.linear(x, w, b)
  -- Under autocast the operands are cast here, the parameters as themselves (the weight cache
  -- knows leaves, not their transposes): a weight is cast once per region. A no-op otherwise.
  x, w, b = cast('linear', x), cast('linear', w), cast('linear', b)
  _nn.check_linear(x, w, b)
  local s = x.shape
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
-- opts: mask, scale (default 1/sqrt(E)), dropout (attention dropout, training only: pass 0 in
-- eval), causal, impl ('auto' default, 'fused', 'math').
-- 'auto' takes the fused op (runtime/nn/attention.c: FlashAttention's scheme, no L x S scores
-- in memory, dropout bits instead of a mask tensor) on a GPU whenever its kernels take the
-- problem: 4-D q B x H x L x E, k and v B x H x S x E of one dtype, a mask needing no gradient,
-- f16/bf16 with head dim 64, sm_80 or newer. Otherwise, or with 'math', the composition of tensor
-- ops below. On the CPU 'auto' composes too: there the fused op is the reference of the GPU
-- kernels ('fused' runs it), and OpenBLAS's GEMMs in the composition are faster. Both give the same values (within rounding) and, for one
-- generator state, the same dropout mask; they differ on a query row whose every key is masked
-- with -inf: the fused op returns zeros there (and zero gradients), the composition NaN.
-- The fused output is a B x H x L x E view of B x L x H x E memory: out:transpose(2, 3) is
-- contiguous, so merging the heads back costs no copy.
-- F.attention_impl: the default of opts.impl for every call (e.g. 'math' to compare a model's
-- run against the composition).
F.attention_impl = 'auto'
function F.scaled_dot_product_attention(q, k, v, opts)
  opts = errors.check_opts('nn.scaled_dot_product_attention', opts, { 'mask', 'scale', 'dropout', 'causal', 'impl' })
  local mask = opts.mask
  local nnc = _nn
  nnc.check_sdpa(q, k, v, mask)
  local E = q.shape[q.ndim]
  local L, S = q.shape[q.ndim - 1], k.shape[k.ndim - 1]
  local scale = opts.scale or 1 / math.sqrt(E)
  local p = opts.dropout or 0
  local impl = opts.impl or F.attention_impl or 'auto'
  if impl ~= 'auto' and impl ~= 'fused' and impl ~= 'math' then
    error("scaled_dot_product_attention: impl must be 'auto', 'fused' or 'math', got " .. tostring(impl), 2)
  end
  if impl ~= 'math' then
    local fmask = mask
    if mask ~= nil and mask.dtype == 'bool' then
      -- the additive form of a bool mask (its own, small, shape): 0 where attended, -inf elsewhere
      fmask = v100.zeros(mask.shape, { device = mask.device }):masked_fill(mask:logical_not(), -math.huge)
    end
    if (impl == 'fused' or q.device ~= 'cpu') and (fmask == nil or not fmask.requires_grad) and
        nnc.attention_supported(q, k, v, fmask, scale, p, opts.causal) then
      return nnc.attention(q, k, v, fmask, scale, p, opts.causal)
    end
    if impl == 'fused' then
      -- the op's own checks name what it refuses (shapes, dtypes, the backend's limits)
      return nnc.attention(q, k, v, fmask, scale, p, opts.causal)
    end
  end
  local scores = q:matmul(k:transpose(-2, -1)) * scale
  if opts.causal then
    -- keep key j for query i when j <= i (top-left aligned, as PyTorch's is_causal)
    local rows = v100.arange(0, L, { device = q.device }):view{ L, 1 }
    local cols = v100.arange(0, S, { device = q.device }):view{ 1, S }
    scores = scores:masked_fill(cols:gt(rows), -math.huge)
  end
  if mask ~= nil then
    if mask.dtype == 'bool' then
      scores = scores:masked_fill(mask:logical_not(), -math.huge)
    else
      -- a float mask (check_sdpa refused the other dtypes), in the scores' dtype as the fused op
      -- takes any float mask
      scores = scores + (mask.dtype == scores.dtype and mask or mask:to(scores.dtype))
    end
  end
  local attn = scores:softmax(-1)
  if p > 0 then attn = F.dropout(attn, p, true) end
  return attn:matmul(v)
end

-- ---------------------------------------------------------------------------------------------
-- Losses

-- reduction: as checked by _nn.check_reduction (each loss checks it first, before any work).
local function reduce(per, reduction, count)
  if reduction == 'none' then return per end
  if reduction == 'sum' then return per:sum() end
  if count then return per:sum() / count end
  return per:mean()
end

-- The class dim of an input: 2 for N x C [x d1 ...], 1 for an unbatched C vector.
local function class_dim(x) return x.ndim == 1 and 1 or 2 end

-- Per-element -logp[target] with ignored positions zeroed, and the valid mask (bool). The gather
-- checks the class ids under the loss's name, once the ignored positions are replaced.
local function nll_terms(fname, logp, target, ignore_index)
  local cd = class_dim(logp)
  local valid = target:ne(ignore_index)
  -- ignored targets may hold any value (e.g. -100): gather a safe class 0 there, then zero it
  local safe = v100.where(valid, target, 0)
  local picked = _nn.gather_as(fname, logp, cd, safe:unsqueeze(cd)):squeeze(cd)
  return (-picked):masked_fill(valid:logical_not(), 0), valid
end

-- u8 class ids (as idx label files hold them) are widened; other dtypes go to the C check.
local function widen(target)
  if v100.is_tensor(target) and target.dtype == 'u8' then return target:long() end
  return target
end

function F.nll_loss(logp, target, opts)
  opts = errors.check_opts('nn.nll_loss', opts, { 'reduction', 'ignore_index' })
  local reduction = _nn.check_reduction('nll_loss', opts.reduction)
  target = widen(target)
  -- before nll_terms: its ne/where would otherwise report a mis-shaped target in their words
  _nn.check_class_target('nll_loss', logp, target, false)
  local per, valid = nll_terms('nll_loss', logp, target, opts.ignore_index or -100)
  -- mean over the non-ignored elements only; the count stays on the device (no host sync)
  local count = reduction == 'mean' and valid:sum():to(per.dtype) or nil
  return reduce(per, reduction, count)
end

-- Label smoothing as PyTorch: (1 - s) * nll + s * mean over classes of -logp, where ignored
-- positions count in neither the sum nor the mean's denominator. Class-id targets (i64/i32; u8
-- widened) go to one fused op (runtime/nn/xent.c): the loss from f32 row statistics of logits of
-- any float dtype, dlogits written directly in the logits' dtype, no probabilities stored; under
-- autocast half logits give an f32 loss without an f32 copy of the logits. Probability targets (a
-- float tensor of the input's shape) are composed here, smoothed as target * (1 - s) + s / C.
-- opts.dtype (class ids only): the loss's dtype, e.g. 'f32' for an f32 loss from half logits
-- outside autocast (AMP O2/O3) without an f32 copy of the logits.
function F.cross_entropy(logits, target, opts)
  opts = errors.check_opts('nn.cross_entropy', opts, { 'reduction', 'ignore_index', 'smoothing', 'label_smoothing', 'dtype' })
  target = widen(target)
  local nnc = _nn
  local s = opts.smoothing or opts.label_smoothing or 0
  if v100.is_tensor(target) and (target.dtype == 'i64' or target.dtype == 'i32') then
    return nnc.cross_entropy(logits, target, opts.ignore_index or -100, s, opts.reduction, opts.dtype)
  end
  nnc.check_class_target('cross_entropy', logits, target, true)
  nnc.check_prob('cross_entropy', 'smoothing', s)
  local reduction = nnc.check_reduction('cross_entropy', opts.reduction)
  local cd = class_dim(logits)
  local C = logits.shape[cd]
  local logp = logits:log_softmax(cd)
  -- probabilities (check_class_target refused every other target dtype)
  if s > 0 then target = target * (1 - s) + s / C end
  local per = -(logp * target):sum(cd)
  -- PyTorch divides by the number of samples (numel / C), as reduce's per:mean() does here
  return reduce(per, reduction)
end

function F.mse_loss(x, y, opts)
  opts = errors.check_opts('nn.mse_loss', opts, { 'reduction' })
  _nn.check_same_shape('mse_loss', x, y)
  local reduction = _nn.check_reduction('mse_loss', opts.reduction)
  local d = x - y
  return reduce(d * d, reduction)
end

-- Stable form: (1 - y) x + (1 + (pw - 1) y) (log(1 + exp(-|x|)) + max(-x, 0)); with pw = 1
-- this is max(x, 0) - x y + log(1 + exp(-|x|)), never exponentiating a positive number.
function F.binary_cross_entropy_with_logits(x, y, opts)
  opts = errors.check_opts('nn.binary_cross_entropy_with_logits', opts, { 'reduction', 'pos_weight', 'weight' })
  local fname = 'binary_cross_entropy_with_logits'
  _nn.check_same_shape(fname, x, y)
  local reduction = _nn.check_reduction(fname, opts.reduction)
  local softplus_neg = (x:abs():neg():exp() + 1):log() + x:neg():relu() -- log(1 + exp(-x))
  local per
  if opts.pos_weight ~= nil then
    local lw = (y * (opts.pos_weight - 1)) + 1
    per = (1 - y) * x + lw * softplus_neg
  else
    per = (1 - y) * x + softplus_neg
  end
  if opts.weight ~= nil then per = per * opts.weight end
  return reduce(per, reduction)
end
F.bce_with_logits = F.binary_cross_entropy_with_logits

return F
