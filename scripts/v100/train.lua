-- v100.train: the epoch loop the recipes share (recipes/fashion_cnn.lua, fashion_resnet.lua and
-- other Fashion-MNIST loops): batches, one optimiser step each, the mean loss, evaluation,
-- timing, and the lines tests and tools/device-run.sh parse:
--
--   epoch 1/2  loss 1.1448  test acc 0.7180  time 3.4 s  images/s 581
--   total time: 9 s (training 6.8 s, 585 images/s)
--   test accuracy: 0.7680
--
-- "test acc" is left out of the epochs that are not evaluated (eval_every); the final line is
-- always last and always there.
local v100 = require 'v100.base'
local recipe = require 'v100.recipe'
local optim = require 'v100.optim'
local errors = require 'v100.errors'

local train = {}

-- The tensors of a batch structure (a tensor, or nested tables of them; other values are kept).
local function map_tree(x, f)
  if v100.is_tensor(x) then return f(x) end
  if type(x) ~= 'table' then return x end
  local o = {}
  for k, v in pairs(x) do o[k] = map_tree(v, f) end
  return o
end

-- nil when src has static's structure and shapes, else what differs.
local function same_shapes(static, src, path)
  path = path or 'batch'
  if v100.is_tensor(static) then
    if not v100.is_tensor(src) then return path .. ' is not a tensor' end
    local a, b = table.concat(static.shape, 'x'), table.concat(src.shape, 'x')
    if a ~= b then return string.format('%s: captured %s, got %s', path, a, b) end
    return nil
  end
  if type(static) ~= 'table' then return nil end
  if type(src) ~= 'table' then return path .. ' is not a table' end
  for k, v in pairs(static) do
    local why = same_shapes(v, src[k], path .. '.' .. tostring(k))
    if why then return why end
  end
  return nil
end

local function copy_tree(static, src)
  if v100.is_tensor(static) then static:copy_(src) return end
  if type(static) ~= 'table' then return end
  for k, v in pairs(static) do copy_tree(v, src[k]) end
end

local function optim_clip(params, max_norm) optim.clip_grad_norm(params, max_norm) end

-- train.fit(spec) runs spec.epochs epochs and returns the final test accuracy and the seconds the
-- whole run took. spec fields:
--   epochs        number of epochs (integer >= 1)
--   device        the device name ('cpu', 'cuda:0'): clock reads wait for it
--   batches       function(epoch) -> an iterator of (xb, yb), e.g. data.batches(...)
--   loss          function(xb, yb) -> the mean loss of the batch (0-dim, recorded); with opt, a
--                 step is zero_grad, backward, sched:step(opt) when sched is given, opt:step()
--   opt, sched    the optimiser and the learning-rate schedule (sched optional)
--   step          instead of loss/opt/sched: function(xb, yb) -> the batch's loss after a step
--                 written out by hand (train.stepper's); it must not keep xb, yb or the loss
--   test          { x = images, y = labels, forward = function(xb) -> logits }: the accuracy of
--                 argmax(forward(x)) against y, in batches of test.batch (1000), without recording
--   model         optional module: train() before each epoch, eval() while testing
--   eval_every    evaluate every n-th epoch and after the last (default 1)
--   loss_digits   decimals of the printed loss (default 4)
-- The loss sum stays on the device (one host read per epoch). Each batch's tensors and loss are
-- closed after its step rather than left to the collector; whatever backward needed of them has
-- been used by then.
function train.fit(spec)
  errors.check_opts('train.fit', spec, { 'epochs', 'device', 'batches', 'loss', 'opt', 'sched', 'step', 'test', 'model',
    'eval_every', 'loss_digits' })
  if spec then errors.check_opts('train.fit: test', spec.test, { 'x', 'y', 'forward', 'batch' }) end
  local epochs = assert(math.tointeger(spec.epochs), 'train.fit: epochs must be an integer')
  local dev = assert(spec.device, 'train.fit: device is required')
  local test = assert(spec.test, 'train.fit: test = { x, y, forward } is required')
  local model, opt, sched = spec.model, spec.opt, spec.sched
  local step = spec.step
  if not step then
    assert(spec.loss and opt, 'train.fit: give loss and opt, or step')
    step = function(xb, yb)
      local loss = spec.loss(xb, yb)
      opt:zero_grad()
      loss:backward()
      if sched then sched:step(opt) end
      opt:step()
      return loss
    end
  end
  local eval_every = spec.eval_every or 1
  local loss_fmt = 'epoch %d/%d  loss %.' .. (spec.loss_digits or 4) .. 'f'
  local clock, sync = recipe.clock, recipe.syncer(dev)

  local function evaluate()
    if model then model:eval() end
    local acc = recipe.accuracy(test.forward, test.x, test.y, test.batch)
    if model then model:train() end
    return acc
  end

  local acc
  local t_train, images = 0, 0
  sync()
  local t_start = clock()
  for epoch = 1, epochs do
    if model then model:train() end
    local loss_sum = v100.zeros({}, { device = dev })
    local nb, seen = 0, 0
    sync()
    local t0 = clock()
    for xb, yb in spec.batches(epoch) do
      seen = seen + xb.shape[1]
      local loss <close> = step(xb, yb)
      local l <close> = loss:detach()
      loss_sum:add_(l)
      nb = nb + 1
      xb:free()
      yb:free()
    end
    sync()
    local dt = math.max(clock() - t0, 1e-9) -- a clock tick coarser than the epoch
    t_train, images = t_train + dt, images + seen
    if nb == 0 then error('train.fit: epoch ' .. epoch .. ' had no batches', 2) end
    local line = loss_fmt:format(epoch, epochs, loss_sum:item() / nb)
    if epoch % eval_every == 0 or epoch == epochs then
      acc = evaluate()
      line = line .. ('  test acc %.4f'):format(acc)
    end
    recipe.printf('%s  time %.1f s  images/s %d', line, dt, math.floor(seen / dt + 0.5))
  end
  sync()
  local total = clock() - t_start
  recipe.printf('total time: %d s (training %.1f s, %d images/s)', math.floor(total + 0.5), t_train,
    math.floor(images / t_train + 0.5))
  recipe.printf('test accuracy: %.4f', acc)
  return acc, total
end

-- train.stepper(spec) -> step(xb, yb): one training step as v100.train.fit's `step`, with mixed
-- precision and, optionally, as a replayed CUDA graph. spec fields:
--   loss       function(xb, yb) -> the batch's mean loss (f32, recorded)
--   opt        the optimiser (capturable = true when graph is on)
--   sched      optional schedule, stepped on the host before each step (or replay)
--   policy     optional amp.policy: its autocast wraps loss (O1); O2/O3 models are converted by
--              the recipe beforehand
--   scaler     optional amp.Scaler (fp16): backward, unscale + step skipped on inf/NaN, update
--   dp         optional dist.DataParallel of the model: dp:finish() between backward and the
--              optimizer (the averaged gradients; with a scaler, before its unscale and check,
--              so every rank skips together)
--   graph      true: the first call copies its batch into static tensors, captures the step
--              (after `warmup` eager iterations on that batch, default 3) and every call then
--              refills the static tensors and replays; batches must keep their shape
--   accumulate n: gradient accumulation. The step then takes n micro-batches, step(mb1, ..., mbn),
--              and calls loss(mb_i) on each (a micro-batch is any value: a table of tensors for
--              BERT); each loss is scaled by 1/n before backward, DataParallel's all-reduce runs
--              only in the last backward (dp:no_sync around the others), and the returned loss is
--              the mean of the n. Without accumulate, step(xb, yb) calls loss(xb, yb) as above.
--   clip       optional max gradient norm: after the all-reduce and the unscale, the gradients
--              are scaled to at most this global L2 norm (optim.clip_grad_norm: on the device,
--              no synchronisation; BERT recipes clip at 1.0)
--   graph under accumulate: the n micro-batches are captured as one step; every tensor in them
--              (tables are walked) is copied into a static twin before each replay.
-- The returned loss is the caller's to close (under a graph, a view of the graph's output).
-- A step's activations die with it, but their device memory returns to the pool only when the
-- collector frees their Lua userdata. They lived through the step's young collections, so they
-- are old by then and would wait for a major collection (bindings/l_tensor.c bounds that at about
-- twice the script's peak: ResNet-50's steps peaked at 15.8 GiB instead of the first step's
-- 10.7). A full collection at the end of each eager step frees them at once, which costs little
-- while the Lua heap is small (ResNet-50 and BERT-Base built: 0.8 MB, 0.23 ms); a script holding
-- a big heap (a corpus as tables) keeps the collector's own schedule.
local RELEASE_HEAP_KB = 32 * 1024
local function release_step()
  if collectgarbage('count') < RELEASE_HEAP_KB then collectgarbage() end
end

function train.stepper(spec)
  errors.check_opts('train.stepper', spec, { 'loss', 'opt', 'sched', 'policy', 'scaler', 'dp', 'graph', 'warmup',
    'accumulate', 'clip' })
  local opt, sched, policy, scaler, dp = spec.opt, spec.sched, spec.policy, spec.scaler, spec.dp
  local loss_fn = assert(spec.loss, 'train.stepper: loss is required')
  assert(opt, 'train.stepper: opt is required')
  local n_acc = spec.accumulate
  if n_acc ~= nil and not (math.type(n_acc) == 'integer' and n_acc >= 1) then
    error('train.stepper: accumulate must be an integer >= 1, got ' .. tostring(n_acc), 2)
  end
  local clip = spec.clip
  local params
  if clip then
    params = {}
    for _, g in ipairs(opt.param_groups) do for _, p in ipairs(g.params) do params[#params + 1] = p end end
  end
  local function forward(...)
    if policy then return policy:autocast(loss_fn, ...) end
    return loss_fn(...)
  end
  local function backward(loss)
    if scaler then scaler:backward(loss) else loss:backward() end
  end
  local function update()
    if dp then dp:finish() end
    if clip then
      if scaler then scaler:unscale_(opt) end
      optim_clip(params, clip)
    end
    if scaler then
      scaler:step(opt)
      scaler:update()
    else
      opt:step()
    end
  end
  local eager
  if n_acc == nil then
    eager = function(xb, yb)
      local loss = forward(xb, yb)
      opt:zero_grad()
      backward(loss)
      update()
      return loss
    end
  else
    eager = function(...)
      local mbs = table.pack(...)
      if mbs.n ~= n_acc then
        error(string.format('train.stepper: accumulate = %d takes %d micro-batches, got %d', n_acc, n_acc, mbs.n), 3)
      end
      opt:zero_grad()
      local total
      for i = 1, n_acc do
        local function one()
          local loss = forward(mbs[i])
          local l <close> = n_acc > 1 and loss * (1 / n_acc) or nil
          backward(l or loss)
          local d = loss:detach()
          total = total and total + d or d
        end
        if dp and i < n_acc then dp:no_sync(one) else one() end
      end
      update()
      return n_acc > 1 and total * (1 / n_acc) or total
    end
  end
  if not spec.graph then
    return function(...)
      if sched then sched:step(opt) end
      local loss = eager(...)
      release_step()
      return loss
    end
  end
  if not opt.capturable then error('train.stepper: graph = true needs an optimizer made with capturable = true', 2) end
  local g, static, out
  return function(...)
    if sched then sched:step(opt) end
    local args = table.pack(...)
    if g == nil then
      static = map_tree(args, function(t) return t:clone() end)
      g = v100.graph(function() return eager(table.unpack(static, 1, static.n)):detach() end, { warmup = spec.warmup or 3 })
      out = g.outputs[1]
    else
      local why = same_shapes(static, args)
      if why then
        error('train.stepper: a graphed step takes batches of one shape (' .. why .. '): drop the last partial batch', 2)
      end
    end
    copy_tree(static, args)
    g:replay()
    return out:detach()
  end
end

return train
