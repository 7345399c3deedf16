-- ext/telemetry/lua/v100/obs/prometheus.lua: `require 'v100.prometheus'`: metrics in the Prometheus text
-- exposition format (version 0.0.4), as a textfile for node-exporter's textfile collector and/or
-- from a small HTTP endpoint.
--
--   local prometheus = require 'v100.prometheus'
--   local reg = prometheus.Registry{labels = {rank = '0'}}       -- labels on every sample
--   reg:add('v100_train_loss', 'gauge', 'Training loss of the last window.', 2.31)
--   reg:add('v100_gpu_power_watts', 'gauge', 'Power draw.', 612.5, {gpu = '0'})
--   local text = reg:text()
--   prometheus.write_textfile('/var/lib/node_exporter/textfile/v100lua_rank0.prom', text)
--   local srv = prometheus.serve{port = 9400}                   -- 127.0.0.1:9400/metrics
--   srv:set(text)
--
-- The textfile is written to a temporary file beside it and renamed over it (node-exporter's
-- convention: a scraper never reads half a file; the temporary name does not end in .prom, so the
-- collector skips it). The endpoint listens on the loopback address unless told otherwise.
-- prometheus.Exporter ties both to a training run (one file and one port per rank); the recipes
-- use it through v100.telemetry.Recorder. docs/OPERATIONS.md ("Prometheus") lists the metrics.
local core = require 'v100.core'
local errors = require 'v100.errors'

local prometheus = {}

prometheus.CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8'

local TYPES = { gauge = true, counter = true, untyped = true }

local function check_name(fname, what, name, pattern)
  if type(name) ~= 'string' or not name:match(pattern) then
    error(string.format('%s: %s %s is not a valid Prometheus name', fname, what, name == nil and 'nil' or ('"' .. tostring(name) .. '"')), 3)
  end
end
local METRIC_NAME = '^[%a_:][%w_:]*$'
local LABEL_NAME = '^[%a_][%w_]*$'

-- Label values: backslash, double quote and newline escaped; HELP text: backslash and newline.
local function escape_label(v) return (tostring(v):gsub('[\\"\n]', { ['\\'] = '\\\\', ['"'] = '\\"', ['\n'] = '\\n' })) end
local function escape_help(v) return (tostring(v):gsub('[\\\n]', { ['\\'] = '\\\\', ['\n'] = '\\n' })) end

-- A sample value: integers as they are, floats with 17 significant digits, NaN and infinities
-- as the format spells them.
function prometheus.format_value(v)
  if type(v) == 'boolean' then return v and '1' or '0' end
  if type(v) ~= 'number' then error('prometheus: a sample value must be a number, got ' .. type(v), 2) end
  if v ~= v then return 'NaN' end
  if v == math.huge then return '+Inf' end
  if v == -math.huge then return '-Inf' end
  if math.type(v) == 'integer' then return tostring(v) end
  return string.format('%.17g', v)
end

local function label_text(base, extra)
  local keys, all = {}, {}
  for k, v in pairs(base) do all[k] = v end
  for k, v in pairs(extra or {}) do all[k] = v end
  for k in pairs(all) do keys[#keys + 1] = k end
  if #keys == 0 then return '' end
  table.sort(keys)
  local parts = {}
  for i, k in ipairs(keys) do parts[i] = k .. '="' .. escape_label(all[k]) .. '"' end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- ---- prometheus.Registry{labels =}: families in the order first added ----
local Registry = {}
Registry.__index = Registry
Registry.__name = 'v100.prometheus.Registry'

function prometheus.Registry(opts)
  opts = errors.check_opts('prometheus.Registry', opts, { 'labels' })
  local labels = opts.labels or {}
  if type(labels) ~= 'table' then error('Registry: labels must be a table of name = value', 2) end
  for k in pairs(labels) do check_name('Registry', 'the label', k, LABEL_NAME) end
  return setmetatable({ labels = labels, families = {}, by_name = {} }, Registry)
end

-- reg:add(name, type, help, value[, labels]): one sample; a second add of the same name adds a
-- sample to its family (same type; the first help stays). A counter's name ends in _total.
function Registry:add(name, mtype, help, value, labels)
  check_name('Registry:add', 'the metric', name, METRIC_NAME)
  if not TYPES[mtype] then error('Registry:add: the type of ' .. name .. ' must be gauge, counter or untyped, got ' .. tostring(mtype), 2) end
  if mtype == 'counter' and not name:match('_total$') then
    error('Registry:add: the counter ' .. name .. ' must end in _total', 2)
  end
  if labels ~= nil and type(labels) ~= 'table' then error('Registry:add: labels must be a table', 2) end
  for k in pairs(labels or {}) do check_name('Registry:add', 'the label', k, LABEL_NAME) end
  local fam = self.by_name[name]
  if not fam then
    fam = { name = name, type = mtype, help = help or '', samples = {} }
    self.by_name[name] = fam
    self.families[#self.families + 1] = fam
  elseif fam.type ~= mtype then
    error(string.format('Registry:add: %s was added as a %s, now as a %s', name, fam.type, mtype), 2)
  end
  fam.samples[#fam.samples + 1] = label_text(self.labels, labels) .. ' ' .. prometheus.format_value(value)
  return self
end

function Registry:text()
  local out = {}
  for _, fam in ipairs(self.families) do
    out[#out + 1] = '# HELP ' .. fam.name .. ' ' .. escape_help(fam.help)
    out[#out + 1] = '# TYPE ' .. fam.name .. ' ' .. fam.type
    for _, s in ipairs(fam.samples) do out[#out + 1] = fam.name .. s end
  end
  out[#out + 1] = ''
  return table.concat(out, '\n')
end

-- ---- files and the endpoint ----

-- prometheus.write_textfile(path, text): atomically (temporary file, fsync, rename).
function prometheus.write_textfile(path, text)
  if type(path) ~= 'string' or path == '' then error('write_textfile: the path must be a non-empty string', 2) end
  if type(text) ~= 'string' then error('write_textfile: the text must be a string', 2) end
  core._ckpt.write_atomic(path, text)
end

-- prometheus.url(addr, port[, path]): 'http://127.0.0.1:9400/metrics', IPv6 in brackets.
function prometheus.url(addr, port, path)
  local host = tostring(addr):find(':', 1, true) and '[' .. addr .. ']' or tostring(addr)
  return string.format('http://%s:%d%s', host, port, path or '/metrics')
end

-- prometheus.serve{addr = '127.0.0.1', port =, path = '/metrics', quiet =} -> srv: srv.port (the
-- bound one: port 0 picks a free port), srv.addr (the bound address, numeric: '0' is '0.0.0.0'),
-- srv.loopback, srv:set(text), srv:requests(), srv:close().
-- The endpoint has no authentication: bound beyond loopback it says so on stderr (quiet = true
-- leaves that to the caller).
function prometheus.serve(opts)
  opts = errors.check_opts('prometheus.serve', opts, { 'addr', 'port', 'path', 'quiet' })
  local port = opts.port
  if not (math.tointeger(port) and port >= 0 and port <= 65535) then
    error('prometheus.serve: port must be an integer in 0..65535, got ' .. tostring(port), 2)
  end
  local path = opts.path or '/metrics'
  local srv = core._telemetry.serve(opts.addr or '127.0.0.1', math.tointeger(port), path, prometheus.CONTENT_TYPE)
  if not srv.loopback and not opts.quiet then
    io.stderr:write(string.format('warning: prometheus: the metrics endpoint %s listens on %s, beyond loopback; it has ' ..
      'no authentication: whoever reaches this port reads the metrics (--prometheus-addr 127.0.0.1 keeps it on the node)\n',
      prometheus.url(srv.addr, srv.port, path), srv.addr))
  end
  return srv
end

-- ---- prometheus.Exporter{dir =, port =, addr =, rank =, local_rank =, labels =} ----
-- dir: the textfile collector's directory: this rank writes <dir>/v100lua_rank<rank>.prom.
-- port: this rank serves on port + local_rank (the ranks of a node side by side; 0: a free port,
-- exp.port says which; nil: no endpoint).
-- exp:update(reg) publishes a Registry's text to both; exp:close() stops the endpoint (the file
-- stays with its last contents, which say v100_train_running 0 when the caller adds it).
local Exporter = {}
Exporter.__index = Exporter
Exporter.__name = 'v100.prometheus.Exporter'

function prometheus.Exporter(opts)
  opts = errors.check_opts('prometheus.Exporter', opts, { 'dir', 'port', 'addr', 'labels', 'rank', 'local_rank' })
  local info = core._dist.info()
  local rank = opts.rank or info.rank
  local self = setmetatable({ rank = rank, labels = opts.labels or {}, writes = 0 }, Exporter)
  if opts.dir then
    if type(opts.dir) ~= 'string' then error('Exporter: dir must be a string', 2) end
    core.io.makedirs(opts.dir)
    self.path = string.format('%s/v100lua_rank%d.prom', opts.dir, rank)
  end
  if opts.port then
    local port = opts.port == 0 and 0 or opts.port + (opts.local_rank or info.local_rank or 0)
    self.server = prometheus.serve{ addr = opts.addr, port = port }
    self.port = self.server.port
    self.addr = self.server.addr -- the bound address, as the kernel reports it
    self.url = prometheus.url(self.addr, self.port)
  end
  return self
end

-- A Registry with the exporter's labels (rank and the caller's) on every sample.
function Exporter:registry()
  local labels = { rank = tostring(self.rank) }
  for k, v in pairs(self.labels) do labels[k] = v end
  return prometheus.Registry{ labels = labels }
end

function Exporter:update(reg)
  local text = type(reg) == 'string' and reg or reg:text()
  if self.server then self.server:set(text) end
  if self.path then
    prometheus.write_textfile(self.path, text)
    self.writes = self.writes + 1
  end
  self.text = text
end

function Exporter:close()
  if self.server then
    self.server:close()
    self.server = nil
  end
end
Exporter.__close = Exporter.close

return prometheus
