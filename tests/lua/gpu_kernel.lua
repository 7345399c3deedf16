-- v100.kernel on a GPU: compile, launch (table and positional forms, typed scalars, dynamic
-- shared memory above 48 KiB, a non-default current stream), the disk cache (a hit on the second
-- compile, a corrupt file recompiled), compile errors with the log's line, launch errors (bad
-- grid/block, wrong dtype, non-contiguous), version counters, close, and the fused bias + GELU
-- example against the composed ops (values and gradients, f32/f16/bf16).
local T = require 'testlib'
T.cuda_or_skip()
local v100 = require 'v100'
local K = v100.kernel

-- A fresh cache directory per run, so that the first compile is a miss (created on first write).
local CACHE = os.tmpname()
os.remove(CACHE)
CACHE = CACHE .. '.v100kernels'

local SCALE = [[
#include <v100_rtc.h>
extern "C" __global__ void scale(float *y, const float *x, float a, vl_i64 n) {
  vl_i64 i = vl_index();
  if (i < n) y[i] = a * x[i];
}
]]
local SCALE_SIG = 'float*, const float*, float, int64'

local function scale_kernel(extra)
  return K { name = 'scale', source = SCALE, signature = SCALE_SIG, cache = CACHE, options = extra }
end

T.test('compile, launch, and the disk cache', function()
  local k = scale_kernel()
  T.eq(k.cached, false, 'first compile: a miss')
  T.ok(k.arch:match('^sm_%d+$') or k.arch:match('^compute_%d+$'), 'arch ' .. k.arch)
  T.ok(k.cache_path:find(CACHE, 1, true) == 1, 'cache path ' .. k.cache_path)
  T.eq(k.cache_note, '')
  local n = 1000
  local x = v100.randn({ n }, { device = 'cuda' })
  local y = v100.zeros({ n }, { device = 'cuda' })
  k { grid = K.blocks(n, 128), block = 128, args = { y, x, 2.5, n } }
  T.tensor_close(y, x * 2.5, 1e-6, 0)
  k(K.blocks(n, 256), 256, y, x, -1.0, n) -- positional
  T.tensor_close(y, -x, 0, 0)

  local k2 = scale_kernel()
  T.eq(k2.cached, true, 'second compile of the same program: a cache hit')
  T.eq(k2.cache_path, k.cache_path)
  k2 { grid = K.blocks(n, 128), block = 128, args = { y, x, 3.0, n } }
  T.tensor_close(y, x * 3, 1e-6, 0)

  local k3 = scale_kernel { '--use_fast_math' }
  T.eq(k3.cached, false, 'other options: another program')
  T.ok(k3.cache_path ~= k.cache_path)

  -- a damaged cache file is recompiled, not trusted
  local f = assert(io.open(k.cache_path, 'r+b'))
  f:seek('set', 100)
  f:write('garbage!')
  f:close()
  local k4 = scale_kernel()
  T.eq(k4.cached, false)
  T.ok(k4.cache_note:find('recompiled', 1, true), 'note: ' .. k4.cache_note)
  k4 { grid = K.blocks(n, 128), block = 128, args = { y, x, 0.5, n } }
  T.tensor_close(y, x * 0.5, 1e-6, 0)
  T.eq(scale_kernel().cached, true, 'the rewritten file is a hit again')

  local off = K { name = 'scale', source = SCALE, signature = SCALE_SIG, cache = false }
  T.eq(off.cached, false)
  T.eq(off.cache_path, '')
end)

T.test('typed scalars without a signature; int and double parameters', function()
  local src = [[
#include <v100_rtc.h>
extern "C" __global__ void affine(double *y, const int *x, double a, int b, vl_i64 n) {
  for (vl_i64 i = vl_index(); i < n; i += vl_stride()) y[i] = a * x[i] + b;
}]]
  local n = 77
  local x = v100.arange(n):to { dtype = 'i32', device = 'cuda' }
  local y = v100.zeros({ n }, { dtype = 'f64', device = 'cuda' })
  local k = K { name = 'affine', source = src, cache = CACHE }
  k { grid = 2, block = 32, args = { y, x, { 'f64', 0.5 }, { 'i32', -3 }, { 'i64', n } } }
  T.tensor_close(y, v100.arange(n):double() * 0.5 - 3, 0, 0)
  local ks = K { name = 'affine', source = src, cache = CACHE, signature = 'double*, const int*, double, int, int64' }
  T.eq(ks.cached, true, 'the signature is not part of the program')
  ks(1, 128, y, x, 2.0, 1, n)
  T.tensor_close(y, v100.arange(n):double() * 2 + 1, 0, 0)
  T.raises(function() ks(1, 128, y, x:float(), 2.0, 1, n) end,
    "v100.kernel 'affine': argument 2 (const int*) must have dtype i32, got")
end)

T.test('signatures and typed scalars are checked against the compiled kernel', function()
  T.raises(function() return K { name = 'scale', source = SCALE, cache = CACHE, signature = 'float*, const float*, float' } end,
    "v100.kernel 'scale': the signature has 3 parameters but the compiled kernel takes 4")
  T.raises(function() return K { name = 'scale', source = SCALE, cache = CACHE, signature = 'float*, const float*, float, int' } end,
    "parameter 4 ('int') is 4 bytes but the kernel's parameter 4 is 8 bytes")
  local loose = K { name = 'scale', source = SCALE, cache = CACHE }
  local x = v100.randn({ 8 }, { device = 'cuda' })
  T.raises(function() loose(1, 8, x, x, { 'f32', 1 }) end, '3 arguments given but the compiled kernel takes 4')
  T.raises(function() loose(1, 8, x, x, { 'f32', 1 }, { 'i32', 8 }) end,
    "argument 4 ('i32') is 4 bytes but the kernel's parameter 4 is 8 bytes")
  local y = v100.zeros({ 8 }, { device = 'cuda' })
  loose(1, 8, y, x, { 'f32', 2 }, { 'i64', 8 })
  T.tensor_close(y, x * 2, 1e-6, 0)
end)

T.test('launch arguments: dtype, contiguity, CPU tensors, counts', function()
  local k = scale_kernel()
  local x = v100.randn({ 8, 8 }, { device = 'cuda' })
  local y = v100.zeros({ 8, 8 }, { device = 'cuda' })
  T.raises(function() k(1, 64, y, x:double(), 1.0, 64) end, 'argument 2 (const float*) must have dtype f32, got 8x8 f64 cuda')
  T.raises(function() k(1, 64, y, x:transpose(1, 2), 1.0, 64) end, { 'argument 2 (const float*) is not contiguous', 'pass t:contiguous()' })
  T.raises(function() k(1, 64, y, x:cpu(), 1.0, 64) end, 'argument 2 (const float*) is a tensor on the CPU')
  T.raises(function() k(1, 64, y, x, 1.0) end, '3 arguments given, the signature has 4')
  T.raises(function() k { grid = 0, block = 64, args = { y, x, 1.0, 64 } } end, 'grid[1] must be an integer from 1')
  local loose = K { name = 'scale', source = SCALE, signature = SCALE_SIG, cache = CACHE, contiguous = false }
  loose(1, 64, y, x:transpose(1, 2), 1.0, 64) -- allowed: the kernel reads memory order
  T.tensor_close(y, x, 0, 0)
end)

T.test('a bad grid or block is a launch error naming the kernel; later launches still work', function()
  local k = scale_kernel()
  local n = 64
  local x = v100.randn({ n }, { device = 'cuda' })
  local y = v100.zeros({ n }, { device = 'cuda' })
  T.raises(function() k { grid = 1, block = 2048, args = { y, x, 1.0, n } } end,
    { "v100.kernel 'scale': launch with grid {1, 1, 1}, block {2048, 1, 1}", 'failed' })
  T.raises(function() k { grid = { 1, 70000 }, block = 32, args = { y, x, 1.0, n } } end, 'grid {1, 70000, 1}')
  T.raises(function() k { grid = 1, block = 32, shared = 1 << 30, args = { y, x, 1.0, n } } end, 'shared memory')
  k { grid = 1, block = 64, args = { y, x, 4.0, n } }
  T.tensor_close(y, x * 4, 1e-6, 0)
  v100.cuda.synchronize()
end)

T.test('dynamic shared memory above 48 KiB and a non-default stream', function()
  local src = [[
extern "C" __global__ void reverse_blocks(float *y, const float *x, long long n) {
  extern __shared__ float buf[];
  long long base = (long long)blockIdx.x * blockDim.x;
  unsigned t = threadIdx.x;
  buf[t * 16 + 15] = 0.0f; /* thread 1023 reaches the last float of 64 KiB: needs the opt-in */
  __syncthreads();
  if (base + t < n) buf[t] = x[base + t];
  __syncthreads();
  unsigned r = blockDim.x - 1 - t;
  if (base + r < n) y[base + r] = buf[t];
}]]
  local k = K { name = 'reverse_blocks', source = src, signature = 'float*, const float*, int64', cache = CACHE }
  local block, nb = 1024, 3
  local n = block * nb
  local x = v100.randn({ n }, { device = 'cuda' })
  local y = v100.zeros({ n }, { device = 'cuda' })
  local s = v100.cuda.Stream()
  v100.cuda.current_stream():synchronize() -- x and y are ready before the other stream reads them
  v100.cuda.set_stream(s)
  k { grid = nb, block = block, shared = 64 * 1024, args = { y, x, n } }
  v100.cuda.set_stream(nil)
  s:synchronize()
  local idx = {}
  for i = 0, n - 1 do idx[i + 1] = (i // block) * block + (block - 1 - i % block) end
  local ref = x:index_select(1, v100.tensor(idx, { dtype = 'i64', device = 'cuda' }))
  T.tensor_close(y, ref, 0, 0)
end)

T.test('compile errors carry the log with the line; a missing kernel is named', function()
  local bad = [[
extern "C" __global__ void broken(float *y) {
  y[0] = 1.0f;
  y[1] = undefined_thing;
}]]
  local msg = T.raises(function() return K { name = 'broken', source = bad, cache = CACHE } end,
    { "v100.kernel 'broken'", 'NVRTC compilation failed', 'broken.cu(3): error', 'undefined_thing' })
  T.ok(not msg:find('broken.cu(2)', 1, true), 'only the bad line is reported')
  T.raises(function() return K { name = 'nope', source = SCALE, cache = CACHE } end,
    { "the program has no kernel 'nope'", 'extern "C"' })
  T.raises(function() return K { name = 'scale', source = SCALE, cache = CACHE, options = { '--no-such-flag' } } end,
    'NVRTC rejected an option')
end)

T.test('a kernel writing a tensor bumps its version: autograd notices', function()
  local k = scale_kernel()
  local p = v100.randn({ 16 }, { device = 'cuda' }):requires_grad_()
  local q = p * 2
  local r = q * q -- saves q
  k(1, 16, q, p:detach(), 1.0, 16)
  T.raises(function() r:sum():backward() end, 'modified in place')
end)

T.test('close: idempotent, and launching afterwards raises', function()
  local k = scale_kernel()
  local other = k:kernel('scale', SCALE_SIG)
  k:close()
  k:close()
  local x = v100.zeros({ 4 }, { device = 'cuda' })
  T.raises(function() k(1, 4, x, x, 1.0, 4) end, 'kernel used after close')
  T.raises(function() other(1, 4, x, x, 1.0, 4) end, 'kernel used after close')
  do
    local c <close> = scale_kernel()
    c(1, 4, x, x, 1.0, 4)
  end
end)

T.test('fused bias + GELU (recipes/examples) against the composed ops: values and gradients', function()
  local ex = dofile('recipes/examples/fused_bias_gelu.lua')
  for _, dt in ipairs { 'f32', 'f16', 'bf16' } do
    local r = ex.check(dt, 33, 70)
    T.ok(r.same_dtype, dt .. ': outputs and gradients keep the dtype')
    T.ok(r.y <= 1, string.format('%s: y within tolerance (score %.3f)', dt, r.y))
    T.ok(r.gx <= 1, string.format('%s: grad x within tolerance (score %.3f)', dt, r.gx))
    T.ok(r.gb <= 1, string.format('%s: grad b within tolerance (score %.3f)', dt, r.gb))
  end
  local Kd = ex.op.kernels_on('cuda:0')
  T.ok(Kd.fwd_f32 and Kd.bwd_bf16, 'one program, every kernel')
  -- leading dims, a non-contiguous input, and no grad needed
  local x = v100.randn({ 2, 5, 8 }, { device = 'cuda' })
  local b = v100.randn({ 8 }, { device = 'cuda' })
  local F = require 'v100.nn.functional'
  T.tensor_close(ex.op(x, b), F.gelu(x + b), 1e-5, 1e-6)
  local xt = v100.randn({ 8, 6 }, { device = 'cuda' }):t()
  T.tensor_close(ex.op(xt, v100.randn({ 8 }, { device = 'cuda' }) * 0), F.gelu(xt), 1e-5, 1e-6)
end)

os.execute("rm -rf '" .. CACHE .. "'")
T.run()
