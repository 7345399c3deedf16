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
local v100 = require 'v100'
local recipe = require 'v100.recipe'

local train = {}

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
-- The returned loss is the caller's to close (under a graph, a view of the graph's output).
function train.stepper(spec)
  local opt, sched, policy, scaler, dp = spec.opt, spec.sched, spec.policy, spec.scaler, spec.dp
  local loss_fn = assert(spec.loss, 'train.stepper: loss is required')
  assert(opt, 'train.stepper: opt is required')
  local function forward(xb, yb)
    if policy then return policy:autocast(loss_fn, xb, yb) end
    return loss_fn(xb, yb)
  end
  local function eager(xb, yb)
    local loss = forward(xb, yb)
    opt:zero_grad()
    if scaler then
      scaler:backward(loss)
      if dp then dp:finish() end
      scaler:step(opt)
      scaler:update()
    else
      loss:backward()
      if dp then dp:finish() end
      opt:step()
    end
    return loss
  end
  if not spec.graph then
    return function(xb, yb)
      if sched then sched:step(opt) end
      return eager(xb, yb)
    end
  end
  if not opt.capturable then error('train.stepper: graph = true needs an optimizer made with capturable = true', 2) end
  local g, sx, sy, out
  return function(xb, yb)
    if sched then sched:step(opt) end
    if g == nil then
      sx, sy = xb:clone(), yb:clone()
      g = v100.graph(function() return eager(sx, sy):detach() end, { warmup = spec.warmup or 3 })
      out = g.outputs[1]
    elseif not (#xb.shape == #sx.shape and xb:numel() == sx:numel() and yb:numel() == sy:numel()) then
      error(string.format('train.stepper: a graphed step takes batches of one shape (captured %s, got %s): drop the '
        .. 'last partial batch', table.concat(sx.shape, 'x'), table.concat(xb.shape, 'x')), 2)
    end
    sx:copy_(xb)
    sy:copy_(yb)
    g:replay()
    return out:detach()
  end
end

return train
