-- scripts/v100/dist/comm.lua: `v100.dist.comm`, the body of `require 'v100.dist'` (also
-- `v100.dist`; dist/init.lua adds DataParallel to this table): one process per rank, launched
-- by mpirun or srun (docs/DISTRIBUTED.md), or alone as world size 1; collectives on tensors.
-- DataParallel and ZeRO (dist/parallel.lua, dist/zero.lua) are built on this module.
--
--   local dist = require 'v100.dist'
--   dist.init()                                   -- MPI when a launcher started the process
--   dist.print('world', dist.size())              -- rank 0 only ({all = true}: every rank)
--   dist.all_reduce(grad, {op = 'avg'})           -- in place; sum, avg, max, min, prod
--   local h = dist.all_reduce(t, {async = true})  -- a handle; h:wait() completes it
--   dist.group(function() dist.send(a, 1); dist.recv(b, 1) end)   -- completed together
--   local dp = dist.DataParallel(model)           -- bucketed, overlapped gradient all-reduce;
--                                                 -- dp:finish() after backward (dist/parallel.lua)
--
-- Ranks are 0-based, as in MPI and PyTorch (rank 0 is the main rank). Tensors of any dtype: CPU
-- tensors go through MPI, CUDA tensors through NCCL on this rank's device (dist.init makes it
-- the 'cuda' default: the local rank modulo the visible GPUs). Every rank must
-- call the same collectives in the same order with the same element counts and dtypes, as in MPI.
-- The C side is bindings/l_dist.c over runtime/dist/comm.h.
local core = require 'v100.core'
local errors = require 'v100.errors'
local _dist = core._dist

local dist = {}

local function opts_of(fname, opts, known)
  return errors.check_opts(fname, opts, known, 3)
end

local function check_tensor(fname, t, what)
  if type(t) ~= 'userdata' then
    error(string.format('%s: %s must be a tensor, got %s', fname, what or 'the argument', type(t)), 3)
  end
end

-- dist.init(): starts MPI when launched by mpirun/srun (cross-checking the launcher's variables),
-- else world size 1. Idempotent. Returns the module. After it, os.exit finalizes MPI (success)
-- or aborts the job (failure at world size > 1), and so does an uncaught error.
function dist.init()
  _dist.init()
  return dist
end

function dist.is_initialized() return _dist.info().initialized end

-- Before init these answer from the launcher's environment (what init will find), so library
-- code can ask who prints before a script calls init.
function dist.rank() return _dist.info().rank end
function dist.size() return _dist.info().size end
dist.world_size = dist.size
function dist.local_rank() return _dist.info().local_rank end
function dist.local_size() return _dist.info().local_size end
function dist.is_main() return _dist.info().rank == 0 end
-- The first rank of this node (local rank 0): the one that does a node's own work, e.g. filling
-- a node-local cache (/tmp, local scratch) that the other nodes' ranks cannot see.
function dist.is_local_main() return _dist.info().local_rank == 0 end
-- {initialized, rank, size, local_rank, local_size, backend = 'mpi'|'local'|'none' (CPU tensors'),
--  cuda_backend = 'nccl'|'local'|'none' (CUDA tensors'; 'nccl' from the first CUDA collective),
--  device = 'cuda:N' (this rank's GPU; absent without one),
--  launcher = 'Open MPI'|'PMI'|'Slurm'|'torchrun'|'none', host, thread_level}
function dist.info() return _dist.info() end

function dist.finalize() _dist.finalize() end
-- Ends every rank of the job (MPI_Abort); without MPI, exits this process.
function dist.abort(code)
  code = code or 1
  _dist.abort(code)
  os.exit(code)
end

-- dist.print(...): like print, on rank 0 only; a last argument {all = true} prints on every rank,
-- each line prefixed "[rank N host] " when the world has several ranks (the prefix of the
-- errors bindings/main.c prints, so a rank's output and its error read alike).
function dist.print(...)
  local n = select('#', ...)
  local args = table.pack(...)
  local all = false
  if n > 0 and type(args[n]) == 'table' and getmetatable(args[n]) == nil and args[n].all ~= nil then
    all = args[n].all and true or false
    n = n - 1
  end
  local info = _dist.info()
  if not all and info.rank ~= 0 then return end
  local parts = {}
  for i = 1, n do parts[i] = tostring(args[i]) end
  local line = table.concat(parts, '\t')
  if all and info.size > 1 then line = string.format('[rank %d %s] %s', info.rank, info.host, line) end
  io.write(line, '\n')
  io.flush()
end

-- ---- collectives: in place on t; {async = true} returns a handle (h:wait()) instead ----

function dist.all_reduce(t, opts)
  check_tensor('all_reduce', t, 'the tensor')
  opts = opts_of('all_reduce', opts, { 'op', 'async' })
  local h = _dist.all_reduce(t, opts.op or 'sum', opts.async)
  return h or t
end

-- broadcast(t, {src = 0}): t of rank src into t of every rank.
function dist.broadcast(t, opts)
  check_tensor('broadcast', t, 'the tensor')
  opts = opts_of('broadcast', opts, { 'src', 'async' })
  local h = _dist.broadcast(t, opts.src or 0, opts.async)
  return h or t
end

-- reduce(t, {dst = 0, op = 'sum'}): the reduction into t of rank dst; other ranks' t unchanged.
function dist.reduce(t, opts)
  check_tensor('reduce', t, 'the tensor')
  opts = opts_of('reduce', opts, { 'dst', 'op', 'async' })
  local h = _dist.reduce(t, opts.dst or 0, opts.op or 'sum', opts.async)
  return h or t
end

local function blocks_shape(t, size)
  local s = t.shape
  if #s == 0 then return {size} end
  local out = {}
  for i = 1, #s do out[i] = s[i] end
  out[1] = out[1] * size
  return out
end

-- all_gather(out, t [, opts]) or all_gather(t [, opts]) -> out: every rank's t, rank r's as block
-- r along dim 1 of out (size times t's first dim; or out with a new leading dim of size).
-- Returns out (or the handle when async).
function dist.all_gather(a, b, c)
  local out, t, opts
  if type(b) == 'userdata' then out, t, opts = a, b, c else t, opts = a, b end
  check_tensor('all_gather', t, 'the input')
  opts = opts_of('all_gather', opts, { 'async' })
  out = out or core.empty(blocks_shape(t, dist.size()), {dtype = t.dtype, device = t.device})
  local h = _dist.all_gather(out, t, opts.async)
  if h then return h, out end
  return out
end

-- reduce_scatter(out, t [, opts]) or reduce_scatter(t [, opts]) -> out: the reduction ({op =})
-- of every rank's t, of which this rank receives block `rank` along dim 1.
function dist.reduce_scatter(a, b, c)
  local out, t, opts
  if type(b) == 'userdata' then out, t, opts = a, b, c else t, opts = a, b end
  check_tensor('reduce_scatter', t, 'the input')
  opts = opts_of('reduce_scatter', opts, { 'op', 'async' })
  if not out then
    local s, size = t.shape, dist.size()
    if #s == 0 or s[1] % size ~= 0 then
      error(string.format('reduce_scatter: the input of shape %s does not split into %d blocks along dim 1',
        #s == 0 and 'scalar' or table.concat(s, 'x'), size), 2)
    end
    local os_ = {}
    for i = 1, #s do os_[i] = s[i] end
    os_[1] = s[1] // size
    out = core.empty(os_, {dtype = t.dtype, device = t.device})
  end
  local h = _dist.reduce_scatter(out, t, opts.op or 'sum', opts.async)
  if h then return h, out end
  return out
end

-- send(t, dst [, {tag = 0, async}]), recv(t, src [, {tag = 0, async}]): point to point; recv
-- checks that the message has t's element count.
function dist.send(t, dst, opts)
  check_tensor('send', t, 'the tensor')
  opts = opts_of('send', opts, { 'tag', 'async' })
  return _dist.send(t, dst, opts.tag or 0, opts.async)
end

function dist.recv(t, src, opts)
  check_tensor('recv', t, 'the tensor')
  opts = opts_of('recv', opts, { 'tag', 'async' })
  local h = _dist.recv(t, src, opts.tag or 0, opts.async)
  return h or t
end

dist.isend = function(t, dst, opts) errors.check_opts('isend', opts, { 'tag' }) local o = {tag = opts and opts.tag, async = true} return dist.send(t, dst, o) end
dist.irecv = function(t, src, opts) errors.check_opts('irecv', opts, { 'tag' }) local o = {tag = opts and opts.tag, async = true} return dist.recv(t, src, o) end

function dist.barrier(opts)
  opts = opts_of('barrier', opts, { 'async' })
  return _dist.barrier(opts.async)
end

-- dist.group(fn): the collectives and sends/recvs that fn issues (without async) are started in
-- order and completed together when fn returns (NCCL's group semantics; with MPI the ops start
-- as fn issues them, so a send/recv pair may be issued in either order on the two ranks).
-- Returns fn's results; an error in fn still completes the started ops, then propagates.
function dist.group(fn)
  _dist.group_start()
  local res = table.pack(pcall(fn))
  local ok_end, err_end = pcall(_dist.group_end)
  if not res[1] then error(res[2], 0) end
  if not ok_end then error(err_end, 0) end
  return table.unpack(res, 2, res.n)
end

-- ---- data sharding ----

-- dist.DistributedSampler(n, {shuffle = true, seed = 0, drop_last = false, rank =, size =}):
-- sampler:set_epoch(e) then sampler:indices() -> this rank's 0-based i64 indices into a data
-- set of n. Every rank shuffles the same permutation (seed + epoch), then takes every size-th
-- index from its rank on (PyTorch's layout); without drop_last the permutation is padded by
-- its own start to a multiple of size, so every rank gets num_samples indices.
local Sampler = {}
Sampler.__index = Sampler
Sampler.__name = 'v100.dist.DistributedSampler'

function dist.DistributedSampler(n, opts)
  if not (math.tointeger(n) and n >= 0) then
    error('DistributedSampler: n must be a non-negative integer, got ' .. tostring(n), 2)
  end
  opts = opts_of('DistributedSampler', opts, { 'rank', 'size', 'seed', 'shuffle', 'drop_last' })
  local info = _dist.info()
  local rank, size = opts.rank or info.rank, opts.size or info.size
  if not (math.tointeger(size) and size >= 1 and math.tointeger(rank) and rank >= 0 and rank < size) then
    error(string.format('DistributedSampler: rank %s is not in 0..size-1 (size %s)', tostring(rank), tostring(size)), 2)
  end
  local self = setmetatable({n = n, rank = rank, size = size, epoch = 0, seed = opts.seed or 0,
    shuffle = opts.shuffle ~= false, drop_last = opts.drop_last and true or false}, Sampler)
  if self.drop_last then self.num_samples = n // size else self.num_samples = (n + size - 1) // size end
  self.total = self.num_samples * size
  return self
end

function Sampler:set_epoch(e) self.epoch = e end
function Sampler:__len() return self.num_samples end

-- (In C, runtime/dist/sampler.c: an epoch of tens of millions of samples as Lua tables took
-- seconds and made every full collection of the heap slower.)
function Sampler:indices()
  local order = self.shuffle and core._dist.permutation(self.n, self.seed + self.epoch) or nil
  return core._dist.sampler_indices(order, self.n, self.rank, self.size, self.num_samples)
end

-- dist.epoch_indices(n, epoch, {shuffle =, seed =, rank =, size =}) -> this rank's 0-based i64
-- indices of epoch `epoch` (DistributedSampler's rule, without drop_last): what the data loaders
-- (v100.data's ImageLoader, v100.bert_data's Loader) iterate.
function dist.epoch_indices(n, epoch, opts)
  errors.check_opts('epoch_indices', opts, { 'shuffle', 'seed', 'rank', 'size' })
  local s = dist.DistributedSampler(n, {shuffle = opts.shuffle, seed = opts.seed, drop_last = false,
    rank = opts.rank, size = opts.size})
  s:set_epoch(epoch)
  return s:indices()
end

return dist
