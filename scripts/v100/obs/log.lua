-- scripts/v100/obs/log.lua: `require 'v100.log'`: what a training loop reports and where it goes.
--
--   local log = require 'v100.log'
--   local logger = log.Logger{dir = 'runs/r50'}              -- metrics.jsonl + TensorBoard events
--   local bar = log.Progress{total = steps, label = 'epoch 1/90'}
--   local loss_m = log.Meter()
--   for step ... do
--     loss_m:update(loss:item(), n)
--     local c = log.topk_correct(logits, y, {1, 5})           -- {top1 count, top5 count}
--     bar:update(i, {loss = loss_m.avg, ['img/s'] = rate})
--   end
--   bar:finish()
--   local tot = log.reduce({loss = loss_m.sum, n = loss_m.count, top1 = c1}, 'sum')  -- all ranks
--   logger:log(epoch, {loss = tot.loss / tot.n, top1 = tot.top1 / tot.n}, {split = 'val'})
--   logger:close()
--
-- Only rank 0 writes files and draws the bar; every rank may call everything (log.reduce must be
-- called by every rank, in the same order, with the same keys: it is one collective).
-- The C side: v100.io.EventWriter / json_encode (bindings/l_log.c, bindings/l_json.c,
-- runtime/io/tfevents.c).
local core = require 'v100.core'
local errors = require 'v100.errors'
local dist = require 'v100.dist.comm'
local cio = core.io

local log = {}

local function opts_of(fname, opts, known)
  return errors.check_opts(fname, opts, known, 3)
end

local function this_rank() return core._dist.info().rank end

local function sorted_keys(t)
  local keys = {}
  for k in pairs(t) do keys[#keys + 1] = k end
  table.sort(keys, function(a, b)
    if type(a) == type(b) then return a < b end
    return type(a) < type(b)
  end)
  return keys
end

-- A number from a number or a one-element tensor (t:item(), which waits for the device).
local function number_of(fname, what, v)
  if type(v) == 'number' then return v end
  if core.is_tensor(v) then
    if v:numel() ~= 1 then
      error(string.format('%s: %s is a tensor of %d elements; give a number or a one-element tensor', fname, what,
        v:numel()), 3)
    end
    local x = v:item()
    if type(x) == 'boolean' then x = x and 1 or 0 end
    return x
  end
  error(string.format('%s: %s must be a number, got %s', fname, what, type(v)), 3)
end

-- ---- log.format_eta(seconds) -> 'MM:SS', 'H:MM:SS' or 'Dd HH:MM:SS'; '--:--' when unknown ----
function log.format_eta(s)
  if type(s) ~= 'number' then error('format_eta: seconds must be a number, got ' .. type(s), 2) end
  if s ~= s or s < 0 or s >= 1e9 then return '--:--' end -- NaN, negative, infinite or absurd
  s = math.tointeger(math.floor(s + 0.5))
  local d, h, m, sec = s // 86400, s % 86400 // 3600, s % 3600 // 60, s % 60
  if d > 0 then return string.format('%dd %02d:%02d:%02d', d, h, m, sec) end
  if h > 0 then return string.format('%d:%02d:%02d', h, m, sec) end
  return string.format('%02d:%02d', m, sec)
end

-- ---- log.Meter(): m:update(value[, n = 1]); m.sum, m.count, m.avg (0 before any update), m.last ----
local Meter = {}
Meter.__index = Meter
Meter.__name = 'v100.log.Meter'

function log.Meter() return setmetatable({sum = 0, count = 0, avg = 0, last = nil}, Meter) end

-- value counts n times (a batch mean with n = the batch size gives the mean over samples).
function Meter:update(value, n)
  value = number_of('Meter:update', 'the value', value)
  n = n == nil and 1 or n
  if type(n) ~= 'number' or n < 0 then error('Meter:update: n must be a non-negative number, got ' .. tostring(n), 2) end
  self.last = value
  self.sum = self.sum + value * n
  self.count = self.count + n
  if self.count > 0 then self.avg = self.sum / self.count end
  return self
end

function Meter:reset()
  self.sum, self.count, self.avg, self.last = 0, 0, 0, nil
  return self
end

function Meter:__tostring()
  return string.format('Meter(avg %.6g, last %s, count %s)', self.avg, tostring(self.last), tostring(self.count))
end

-- ---- log.topk_correct(logits, labels, ks) -> {count for ks[1], count for ks[2], ...} ----
-- logits N x C (any float dtype, CPU or CUDA), labels N class indices (0-based; any integer
-- dtype; moved to the logits' device). Ties: the label's class is within the top k when fewer
-- than k classes score higher than it, counting a class that scores the same as it only when
-- its index is smaller (the order argmax and a stable sort give, on every device). A NaN score
-- of the label's class never counts as correct. Tensor ops only, one copy to the host at the end.
function log.topk_correct(logits, labels, ks)
  if not core.is_tensor(logits) then error('topk_correct: logits must be a tensor, got ' .. type(logits), 2) end
  if not core.is_tensor(labels) then error('topk_correct: labels must be a tensor, got ' .. type(labels), 2) end
  local s, ls = logits.shape, labels.shape
  if #s ~= 2 then
    error(string.format('topk_correct: logits must be N x C, got shape %s', #s == 0 and 'scalar' or table.concat(s, 'x')), 2)
  end
  local n, c = s[1], s[2]
  if #ls ~= 1 or ls[1] ~= n then
    error(string.format('topk_correct: labels must be a vector of %d class indices (logits %dx%d), got shape %s',
      n, n, c, #ls == 0 and 'scalar' or table.concat(ls, 'x')), 2)
  end
  if not core.dtype_is_float(logits.dtype) then
    error('topk_correct: logits must be a float tensor, got ' .. logits.dtype, 2)
  end
  if labels.dtype == 'bool' or core.dtype_is_float(labels.dtype) then
    error('topk_correct: labels must be an integer tensor of class indices, got ' .. labels.dtype, 2)
  end
  if ks == nil then ks = {1} elseif type(ks) == 'number' then ks = {ks} end
  if type(ks) ~= 'table' or #ks == 0 then error('topk_correct: ks must be a list of positive integers such as {1, 5}', 2) end
  for i, k in ipairs(ks) do
    if not (math.tointeger(k) and k >= 1) then
      error(string.format('topk_correct: ks[%d] must be a positive integer, got %s', i, tostring(k)), 2)
    end
  end
  local out = {}
  if n == 0 then
    for i = 1, #ks do out[i] = 0 end
    return out
  end
  local x = logits:detach()
  local idx = labels:to(x.device):long():reshape{n, 1}
  local mine = x:gather(2, idx)                                   -- N x 1: the label's score
  local higher = x:gt(mine):sum(2)                                -- N
  local cls = core.arange(c, {device = x.device}):reshape{1, c}
  local tied_before = x:eq(mine):logical_and(cls:lt(idx)):sum(2)  -- same score, smaller index
  local rank = higher + tied_before                               -- 0-based rank of the label
  local valid = mine:eq(mine):reshape{n}                          -- false for NaN
  local counts = {}
  for i, k in ipairs(ks) do counts[i] = rank:lt(k):logical_and(valid):sum() end
  local tot = core.stack(counts, 1):to('cpu'):totable()
  for i = 1, #ks do out[i] = math.tointeger(tot[i]) or tot[i] end
  return out
end

-- ---- log.reduce(tbl, op = 'sum') -> a new table: each number reduced across ranks ----
-- One dist.all_reduce of a CPU f64 tensor holding the values in sorted-key order; the identity
-- when dist is not initialised or the world has one rank. Values that were integers come back
-- as integers when the result is integral (sum, max, min, prod); 'avg' gives floats.
local REDUCE_OPS = {sum = true, avg = true, max = true, min = true, prod = true}

function log.reduce(tbl, op)
  if type(tbl) ~= 'table' then error('reduce: expects a table of numbers, got ' .. type(tbl), 2) end
  op = op or 'sum'
  if not REDUCE_OPS[op] then error('reduce: op must be sum, avg, max, min or prod, got ' .. tostring(op), 2) end
  local keys = sorted_keys(tbl)
  local vals = {}
  for i, k in ipairs(keys) do vals[i] = number_of('reduce', 'the value of ' .. tostring(k), tbl[k]) end
  local out = {}
  local info = core._dist.info()
  if #keys == 0 then return out end
  if not info.initialized or info.size == 1 then
    for i, k in ipairs(keys) do out[k] = vals[i] end
    return out
  end
  local t = core.tensor(vals, {dtype = 'f64'})
  dist.all_reduce(t, {op = op})
  local r = t:totable()
  t:free()
  for i, k in ipairs(keys) do
    local v = r[i]
    if op ~= 'avg' and math.type(vals[i]) == 'integer' then v = math.tointeger(v) or v end
    out[k] = v
  end
  return out
end

-- ---- log.Logger{dir =, jsonl = true, tensorboard = true, rank =} ----
-- jsonl: true -> <dir>/metrics.jsonl, a string -> <dir>/<that name>, false -> none (appended to,
-- so a resumed run continues the file). tensorboard: a new event file in dir per Logger.
-- rank: default dist.rank(); other ranks than 0 write nothing and create no files.
local Logger = {}
Logger.__index = Logger
Logger.__name = 'v100.log.Logger'

function log.Logger(opts)
  opts = opts_of('Logger', opts, { 'dir', 'jsonl', 'tensorboard', 'rank' })
  local rank = opts.rank
  if rank == nil then rank = this_rank() end
  if not math.tointeger(rank) then error('Logger: rank must be an integer, got ' .. tostring(rank), 2) end
  local jsonl, tb = opts.jsonl, opts.tensorboard
  if jsonl == nil then jsonl = true end
  if tb == nil then tb = true end
  if jsonl and jsonl ~= true and type(jsonl) ~= 'string' then
    error('Logger: jsonl must be a boolean or a file name, got ' .. type(jsonl), 2)
  end
  if (jsonl or tb) and type(opts.dir) ~= 'string' then
    error('Logger: dir must be the log directory (a string), got ' .. type(opts.dir), 2)
  end
  local self = setmetatable({dir = opts.dir, rank = rank, closed = false}, Logger)
  if rank == 0 and (jsonl or tb) then
    cio.makedirs(opts.dir)
    if jsonl then
      self.jsonl_path = opts.dir .. '/' .. (jsonl == true and 'metrics.jsonl' or jsonl)
      -- not io.open: a link another user planted at the name is not followed (replace.h's rule)
      local ok, f = pcall(core._ckpt.open_append, self.jsonl_path)
      if not ok then error('Logger: cannot open ' .. tostring(f), 2) end
      self.file = f
    end
    if tb then
      self.writer = cio.EventWriter(opts.dir)
      self.events_path = self.writer.path
    end
  end
  return self
end

local RESERVED = {step = true, time = true}

local function check_fields(fname, t, what)
  for k, v in pairs(t) do
    if type(k) ~= 'string' then error(string.format('%s: %s keys must be strings, got %s', fname, what, type(k)), 3) end
    if RESERVED[k] then error(string.format('%s: "%s" is written by the logger itself; rename the %s entry', fname, k, what), 3) end
    -- An empty name has no place in a JSON line's reader nor as a TensorBoard tag: refused
    -- whichever files the logger writes, so a script does not fail only once TensorBoard is on.
    if k == '' then error(string.format('%s: empty %s name', fname, what), 3) end
    local tv = type(v)
    if not (tv == 'number' or tv == 'string' or tv == 'boolean' or core.is_tensor(v)) then
      error(string.format('%s: %s "%s" must be a number, string or boolean, got %s', fname, what, k, tv), 3)
    end
  end
end

-- logger:log(step, metrics[, extra]): one JSON line {"step":..,"split":..,<extra>..,<metrics>..,"time":..}
-- (split first, then extra's other keys and the metrics', each sorted) and one scalar per numeric metric, tagged
-- '<split>/<name>' when extra.split is set ('train/loss'), else '<name>'. Strings and booleans
-- go to the JSON line only; a one-element tensor is read with :item(). Both files are flushed.
function Logger:log(step, metrics, extra)
  if self.closed then error('Logger:log: the logger is closed', 2) end
  if not math.tointeger(step) then error('Logger:log: step must be an integer, got ' .. tostring(step), 2) end
  step = math.tointeger(step)
  if type(metrics) ~= 'table' then error('Logger:log: metrics must be a table, got ' .. type(metrics), 2) end
  extra = extra or {}
  if type(extra) ~= 'table' then error('Logger:log: the third argument must be a table such as {split = "train"}', 2) end
  check_fields('Logger:log', metrics, 'metric')
  check_fields('Logger:log', extra, 'extra field')
  for k in pairs(extra) do
    if metrics[k] ~= nil then error(string.format('Logger:log: "%s" is both a metric and an extra field', k), 2) end
  end
  if self.rank ~= 0 then return end
  local values = {}
  for k, v in pairs(metrics) do
    values[k] = core.is_tensor(v) and number_of('Logger:log', 'metric "' .. k .. '"', v) or v
  end
  -- Every check comes before either file is written: a call that raises leaves no JSON line
  -- without its scalars (the tags are checked as the event writer would check them).
  local prefix = type(extra.split) == 'string' and extra.split .. '/' or ''
  if self.writer then
    for k, v in pairs(values) do
      if type(v) == 'number' then
        local ok, err = pcall(cio.check_event_tag, prefix .. k)
        if not ok then error('Logger:log: metric "' .. k .. '": ' .. tostring(err), 2) end
      end
    end
  end
  local now = cio.unix_time()
  local enc = cio.json_encode
  local parts = {'"step":' .. step}
  if extra.split ~= nil then parts[#parts + 1] = '"split":' .. enc(extra.split) end
  for _, k in ipairs(sorted_keys(extra)) do
    if k ~= 'split' then parts[#parts + 1] = enc(k) .. ':' .. enc(extra[k]) end
  end
  local mkeys = sorted_keys(values)
  for _, k in ipairs(mkeys) do parts[#parts + 1] = enc(k) .. ':' .. enc(values[k]) end
  parts[#parts + 1] = '"time":' .. enc(now)
  if self.file then
    local before = self.file:seek('end')
    local ok, err = self.file:write('{', table.concat(parts, ','), '}\n')
    if ok then ok, err = self.file:flush() end
    if not ok then
      -- A full disk took part of the line: the file is cut back to its whole lines (a JSON-lines
      -- reader would choke on the half line) and reopened for the next call.
      pcall(self.file.close, self.file)
      if before then pcall(core._ckpt.truncate, self.jsonl_path, before) end
      local reopened, f = pcall(core._ckpt.open_append, self.jsonl_path)
      self.file = reopened and f or nil
      error('Logger:log: writing ' .. self.jsonl_path .. ': ' .. tostring(err), 2)
    end
  end
  if self.writer then
    for _, k in ipairs(mkeys) do
      if type(values[k]) == 'number' then self.writer:scalar(prefix .. k, values[k], step, now) end
    end
    self.writer:flush()
  end
end

-- logger:close() (also <close> and __gc): closes both files; idempotent.
function Logger:close()
  if self.closed then return end
  self.closed = true
  local f, w = self.file, self.writer
  self.file, self.writer = nil, nil
  -- From __gc the file and the writer may have been finalized first (Lua runs finalizers in
  -- the reverse order of their marking): a closed file is left alone, the writer's close is
  -- idempotent.
  if f and io.type(f) == 'file' then f:close() end
  if w then w:close() end
end
Logger.__close = Logger.close
Logger.__gc = Logger.close

-- ---- log.Progress{total =, label = '', enabled =, out = io.stderr, min_interval = 0.1, width = 30} ----
-- One line redrawn in place with '\r': label, a bar, k/total, ETA and the fields given to
-- update, at most once per min_interval seconds (the last step always). enabled defaults to
-- rank 0 with stderr a terminal (v100.isatty(2)): a log file or pipe gets no carriage returns
-- unless asked. bar:finish() draws the final line with the elapsed time and ends it.
local Progress = {}
Progress.__index = Progress
Progress.__name = 'v100.log.Progress'

function log.Progress(opts)
  opts = opts_of('Progress', opts, { 'total', 'label', 'enabled', 'out', 'min_interval', 'width' })
  local total = opts.total
  if total ~= nil and not (math.tointeger(total) and total >= 0) then
    error('Progress: total must be a non-negative integer or nil, got ' .. tostring(total), 2)
  end
  local enabled = opts.enabled
  if enabled == nil then enabled = this_rank() == 0 and cio.isatty(2) end
  local self = setmetatable({total = total, label = opts.label and tostring(opts.label) or '',
    enabled = enabled and true or false, out = opts.out or io.stderr, min_interval = opts.min_interval or 0.1,
    width = opts.width or 30, k = 0, fields = nil, last_draw = nil, last_len = 0, draws = 0,
    finished = false, start = cio.time()}, Progress)
  return self
end

local function field_text(v)
  if math.type(v) == 'integer' then return tostring(v) end
  if type(v) == 'number' then return string.format('%.4g', v) end
  return tostring(v)
end

function Progress:line(now, done)
  local parts = {}
  if self.label ~= '' then parts[#parts + 1] = self.label end
  local k, total = self.k, self.total
  if total and total > 0 then
    local frac = math.max(0, math.min(1, k / total))
    local full = math.floor(frac * self.width + 1e-9)
    local bar = string.rep('=', full)
    if full < self.width then bar = bar .. '>' .. string.rep(' ', self.width - full - 1) end
    parts[#parts + 1] = '[' .. bar .. ']'
    parts[#parts + 1] = string.format('%d/%d', k, total)
  else
    parts[#parts + 1] = tostring(k)
  end
  local elapsed = now - self.start
  if done then
    parts[#parts + 1] = 'in ' .. log.format_eta(elapsed)
  elseif total and k > 0 then
    parts[#parts + 1] = 'ETA ' .. log.format_eta(elapsed / k * (total - k))
  end
  if self.fields then
    for _, name in ipairs(sorted_keys(self.fields)) do
      parts[#parts + 1] = tostring(name) .. ' ' .. field_text(self.fields[name])
    end
  end
  return table.concat(parts, ' ')
end

function Progress:draw(now, done)
  local line = self:line(now, done)
  local pad = math.max(0, self.last_len - #line) -- blank what a longer earlier line left
  self.out:write('\r', line, string.rep(' ', pad))
  self.out:flush()
  self.last_len = #line
  self.last_draw = now
  self.draws = self.draws + 1
end

-- bar:update(k[, fields]): k steps done of total.
function Progress:update(k, fields)
  if not math.tointeger(k) then error('Progress:update: k must be an integer, got ' .. tostring(k), 2) end
  if fields ~= nil and type(fields) ~= 'table' then error('Progress:update: fields must be a table', 2) end
  if not self.enabled or self.finished then return end
  self.k = k
  if fields then self.fields = fields end
  local now = cio.time()
  if self.last_draw and now - self.last_draw < self.min_interval and k ~= self.total then return end
  self:draw(now, false)
end

-- bar:finish([fields]): the final line (elapsed time in place of the ETA) and a newline; idempotent.
function Progress:finish(fields)
  if not self.enabled or self.finished then return end
  if fields then self.fields = fields end
  self:draw(cio.time(), true)
  self.out:write('\n')
  self.out:flush()
  self.finished = true
end

return log
