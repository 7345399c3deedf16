-- tests/lua/gpu_fused.lua: the CUDA kernels of the fused dropout and softmax cross entropy
-- (kernels/cuda/cuda_fused.cu) against the CPU reference (kernels/cpu/cpu_fused.c): dropout masks
-- equal bit for bit for one seed (every float dtype, odd sizes, misaligned and strided inputs), its
-- backward, fresh masks at every replay of a CUDA graph with the captured backward regenerating
-- them; cross entropy values and gradients in f32 (TF32 off: 1e-5), f16 (1e-3) and bf16 (1e-2)
-- over every kernel path (a block per row with 16-byte loads for BERT's 30,522 classes, odd and
-- misaligned rows, a warp per row for short rows, a thread per column for N x C x d), every
-- reduction, smoothing, ignore_index, i64/i32 targets, autocast, more rows than the reduction
-- block, all rows ignored, and class ids out of range reported asynchronously under the op's name.
local T = require 'testlib'
local v100 = require 'v100'
local nn = require 'v100.nn'
local amp = require 'v100.amp'
local F = nn.F

T.cuda_or_skip()

local TOL = { f32 = 1e-5, f16 = 1e-3, bf16 = 1e-2, f64 = 1e-12 }

-- |got - ref| <= tol |ref| + tol max|ref| (half gradients of ~1e-6 are subnormal in f16: the
-- absolute part keeps one rounding step of the largest value from failing the small ones).
local function close(got, ref, tol, msg)
  local scale = ref:numel() > 0 and ref:to('f64'):abs():max():item() or 0
  if scale ~= scale or scale == math.huge then scale = 1 end
  T.tensor_close(got, ref, tol, tol * scale, msg)
end

-- ---------------------------------------------------------------------------------------------
-- dropout

-- x (cpu) and its cuda copy in the layout `kind`: contiguous, misaligned (an element offset of
-- 1: the scalar path), or transposed (non-contiguous: read through a copy).
local function layouts(shape, dt)
  local out = {}
  local x = T.make(shape, dt, 0.5, 2)
  out[#out + 1] = { 'contiguous', x, x:cuda() }
  local n = x:numel()
  local big = T.make({ n + 1 }, dt, 0.5, 2)
  local mis = big:narrow(1, 2, n):view(shape)
  out[#out + 1] = { 'misaligned', mis, big:cuda():narrow(1, 2, n):view(shape) }
  if #shape >= 2 then
    local t = x:transpose(1, 2)
    out[#out + 1] = { 'transposed', t, x:cuda():transpose(1, 2) }
  end
  return out
end

T.test('dropout: the cuda mask equals the cpu mask for one seed (every float dtype, odd sizes, layouts)', function()
  for _, dt in ipairs { 'f32', 'f16', 'bf16', 'f64' } do
    for _, shape in ipairs { { 1001 }, { 64, 33 }, { 4, 8, 16 }, { 3 } } do
      for _, l in ipairs(layouts(shape, dt)) do
        local what = string.format('%s %s %s', dt, table.concat(shape, 'x'), l[1])
        local seed, offset = v100.rng_state()
        local yc = F.dropout(l[2], 0.3, true)
        local s1, o1 = v100.rng_state()
        v100.set_rng_state(seed, offset)
        local yg = F.dropout(l[3], 0.3, true)
        T.eq({ v100.rng_state() }, { s1, o1 }, what .. ': the same counters consumed')
        T.eq(yg.device, 'cuda:0')
        T.tensor_eq(yg:ne(0), yc:ne(0), what .. ': mask')
        T.tensor_close(yg, yc, TOL[dt], 0, what .. ': values')
        -- and the composed op on the GPU (bernoulli there) draws that mask too
        v100.set_rng_state(seed, offset)
        local m = v100.bernoulli(l[3].shape, 0.7, { device = 'cuda' })
        T.tensor_eq(yg:ne(0), m:ne(0), what .. ': = v100.bernoulli on cuda')
      end
    end
  end
end)

T.test('dropout: the cuda backward (the regenerated mask) equals the cpu one', function()
  for _, dt in ipairs { 'f32', 'f16', 'bf16' } do
    local x = T.make({ 33, 65 }, dt, 0.5, 2)
    local dy = T.make({ 33, 65 }, dt, -1, 1)
    local grads = {}
    for _, dev in ipairs { 'cpu', 'cuda' } do
      v100.manual_seed(99)
      -- a fresh leaf on each device (x:to('cpu') would be x itself, then a leaf of the cuda copy's graph)
      local xd = x:detach():to(dev):requires_grad_()
      F.dropout(xd, 0.45, true):backward(dy:to(dev))
      grads[dev] = xd.grad
    end
    T.tensor_eq(grads.cuda:ne(0), grads.cpu:ne(0), dt .. ': mask of the gradient')
    close(grads.cuda, grads.cpu, TOL[dt], dt .. ': gradient')
  end
end)

T.test('dropout under v100.graph: fresh masks per replay, each the cpu mask of the generator at that replay; the captured backward regenerates it', function()
  local shape = { 37, 29 } -- 1,073 elements: a partial last vector
  local x = T.make(shape, 'f32', 0.5, 2)
  local dy = T.make(shape, 'f32', -1, 1)
  local xg, dyg = x:cuda():requires_grad_(), dy:cuda()
  local g = v100.graph(function()
    local y = F.dropout(xg, 0.4, true)
    local gx = v100.autograd.grad({ y }, { xg }, { dyg })[1]
    return y, gx
  end, { warmup = 1 })
  T.eq(g.rng_groups, math.ceil(37 * 29 / 4), 'the graph draws one bernoulli-sized block per replay')
  local masks = {}
  for k = 1, 3 do
    local seed, offset = v100.rng_state()
    local y, gx = g:replay()
    local s2, o2 = v100.rng_state()
    T.eq(o2 - offset, g.rng_groups, 'the generator advances at each replay')
    v100.set_rng_state(seed, offset)
    local yc = F.dropout(x, 0.4, true)
    v100.set_rng_state(s2, o2)
    T.tensor_eq(y:ne(0), yc:ne(0), 'replay ' .. k .. ': the cpu mask of the state at the replay')
    T.tensor_close(y, yc, 1e-6, 0, 'replay ' .. k .. ': values')
    T.tensor_close(gx, dy * yc:ne(0):float() / 0.6, 1e-6, 1e-6, 'replay ' .. k .. ': captured backward')
    masks[k] = y:ne(0):to('cpu')
  end
  T.ok(masks[1]:ne(masks[2]):sum():item() > 0 and masks[2]:ne(masks[3]):sum():item() > 0, 'replays draw new masks')
  g:close()
end)

-- ---------------------------------------------------------------------------------------------
-- cross entropy

-- class ids of `shape` in [0, C) with about a fifth ignored (-100)
local function ids(shape, C, dtype)
  if #shape == 0 then return v100.tensor(math.random(0, C - 1), { dtype = dtype or 'i64' }) end
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  local flat = {}
  for i = 1, n do flat[i] = math.random() < 0.2 and -100 or math.random(0, C - 1) end
  return v100.tensor(flat, { dtype = dtype or 'i64' }):view(shape)
end

-- loss and dlogits on dev (dy random for 'none')
local function run_ce(logits, target, opts, dev, dy, autocast)
  local x = logits:to(dev):detach():requires_grad_()
  local fn = function() return F.cross_entropy(x, target:to(dev), opts) end
  local loss = autocast and amp.autocast(fn, { dtype = autocast }) or fn()
  if loss.ndim > 0 then loss:backward(dy:to({ device = dev, dtype = loss.dtype })) else loss:backward() end
  return loss, x.grad
end

local function compare(logits, target, opts, tol, what, autocast)
  local dy = T.make(target.shape, 'f32', -1, 1)
  local lc, gc = run_ce(logits, target, opts, 'cpu', dy, autocast)
  local lg, gg = run_ce(logits, target, opts, 'cuda', dy, autocast)
  T.eq(lg.dtype, lc.dtype, what .. ': loss dtype')
  T.eq(gg.dtype, logits.dtype, what .. ': gradient dtype')
  close(lg, lc, tol, what .. ': loss')
  close(gg, gc, tol, what .. ': gradient')
end

T.test('cross_entropy: cuda = cpu over every kernel path, reduction, smoothing, target dtype; f32, f16, bf16', function()
  local cases = {
    { 'BERT vocabulary (block per row, misaligned rows)', { 12, 30522 }, { 12 } },
    { 'odd long rows', { 5, 3001 }, { 5 } },
    { 'aligned long rows', { 4, 2048 }, { 4 } },
    { 'ResNet classes (warp per row)', { 40, 1000 }, { 40 } },
    { 'short rows', { 33, 7 }, { 33 } },
    { 'NSP', { 64, 2 }, { 64 } },
    { 'N x C x d1 x d2 (thread per column)', { 6, 5, 4, 3 }, { 6, 4, 3 } },
    { 'unbatched', { 17 }, {} },
  }
  for _, dt in ipairs { 'f32', 'f16', 'bf16' } do
    for _, c in ipairs(cases) do
      local logits = T.make(c[2], dt, -6, 6)
      local C = c[2][#c[2] == 1 and 1 or 2]
      for _, tdt in ipairs { 'i64', 'i32' } do
        local target = ids(c[3], C, tdt)
        for _, s in ipairs { 0, 0.1 } do
          for _, red in ipairs { 'mean', 'sum', 'none' } do
            compare(logits, target, { smoothing = s, reduction = red }, TOL[dt],
              string.format('%s %s %s smoothing %g %s', c[1], dt, tdt, s, red))
          end
        end
      end
    end
  end
end)

T.test('cross_entropy: logits at an odd element offset (unaligned 16-byte loads fall back) and more rows than the reduction block', function()
  for _, dt in ipairs { 'f32', 'bf16' } do
    local N, C = 9, 1537
    local big = T.make({ N * C + 1 }, dt, -4, 4)
    local logits = big:narrow(1, 2, N * C):view(N, C) -- contiguous, one element past the block start
    compare(logits, ids({ N }, C), { smoothing = 0.1 }, TOL[dt], dt .. ' misaligned')
    local many = T.make({ 3000, 5 }, dt, -4, 4)
    for _, red in ipairs { 'mean', 'sum' } do
      compare(many, ids({ 3000 }, 5), { reduction = red }, TOL[dt], dt .. ' 3000 rows ' .. red)
    end
  end
end)

T.test('cross_entropy under autocast on cuda: half logits, an f32 loss equal to the cpu one, half gradients', function()
  for _, dt in ipairs { 'fp16', 'bf16' } do
    local half = dt == 'fp16' and 'f16' or 'bf16'
    local logits = T.make({ 16, 30522 }, half, -8, 8)
    local target = ids({ 16 }, 30522)
    local dy = T.make({ 16 }, 'f32', -1, 1)
    local lc, gc = run_ce(logits, target, { ignore_index = -100 }, 'cpu', dy, dt)
    local lg, gg = run_ce(logits, target, { ignore_index = -100 }, 'cuda', dy, dt)
    T.eq(lg.dtype, 'f32')
    T.eq(gg.dtype, half)
    close(lg, lc, 1e-5, dt .. ': the loss from the same half values, f32 statistics')
    close(gg, gc, TOL[half], dt .. ': gradient')
  end
end)

T.test('cross_entropy on cuda: all rows ignored (mean NaN, zero gradient), empty batches', function()
  local x = T.make({ 4, 3000 }, 'f32'):cuda():requires_grad_()
  local none = v100.tensor({ -100, -100, -100, -100 }, { device = 'cuda' })
  local l = F.cross_entropy(x, none)
  T.ok(l:item() ~= l:item(), 'NaN')
  l:backward()
  T.eq(x.grad:abs():sum():item(), 0)
  T.eq(F.cross_entropy(x, none, { reduction = 'sum' }):item(), 0)
  local e = v100.zeros({ 0, 7 }, { device = 'cuda' })
  local le = F.cross_entropy(e, v100.zeros({ 0 }, { dtype = 'i64', device = 'cuda' }))
  T.ok(le:item() ~= le:item(), 'the mean over no rows is NaN')
end)

T.test('cross_entropy on cuda: a class id out of range is reported asynchronously under the op\'s name, per kernel path', function()
  local shapes = { { { 3, 30522 }, { 3 }, 30522 }, { { 3, 10 }, { 3 }, 10 }, { { 2, 4, 5 }, { 2, 5 }, 4 } }
  for _, c in ipairs(shapes) do
    local x = v100.randn(c[1], { device = 'cuda' })
    local n = 1
    for _, s in ipairs(c[2]) do n = n * s end
    local flat = {}
    for i = 1, n do flat[i] = 0 end
    flat[n] = c[3]
    local y = v100.tensor(flat, { dtype = 'i64', device = 'cuda' }):view(c[2])
    T.raises(function() return F.cross_entropy(x, y):item() end,
      { string.format('cross_entropy: index %d is out of bounds for dim 2 with size %d', c[3], c[3]), 'asynchronously' })
  end
  -- the flag was cleared by the report
  local ok = F.cross_entropy(v100.randn({ 2, 5 }, { device = 'cuda' }), v100.tensor({ 1, 4 }, { device = 'cuda' })):item()
  T.ok(ok == ok and ok > 0, 'a finite loss after the reported error')
end)

T.run()
