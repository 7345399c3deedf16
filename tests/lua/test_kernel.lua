-- v100.kernel on the CPU (CI): everything that is checked before NVRTC or a device is touched:
-- definitions, signatures, launch configurations, launch arguments, kernel.op definitions and
-- calls, and the clear error of a build without CUDA. tests/lua/gpu_kernel.lua compiles and runs.
local T = require 'testlib'
local v100 = require 'v100'
local K = v100.kernel

local SRC = [[
#include <v100_rtc.h>
extern "C" __global__ void scale(float *y, const float *x, float a, vl_i64 n) {
  vl_i64 i = vl_index();
  if (i < n) y[i] = a * x[i];
}
]]

T.test('without NVRTC or a GPU, a valid definition raises a clear error', function()
  if v100.cuda.is_available() then return end
  local msg = require('v100.core')._rtc.have_nvrtc and 'no CUDA device' or 'v100.kernel: built without CUDA (NVRTC unavailable)'
  T.raises(function() return K { name = 'scale', source = SRC, signature = 'float*, const float*, float, int64' } end,
    msg)
  T.raises(function() return K.new { name = 'scale', source = SRC } end, msg)
end)

T.test('definitions are checked before compiling', function()
  T.raises(function() return K 'scale' end, 'expected a table')
  T.raises(function() return K { source = SRC } end, "name must be the kernel's C identifier")
  T.raises(function() return K { name = 'two words', source = SRC } end, "got 'two words'")
  T.raises(function() return K { name = 'scale' } end, "v100.kernel 'scale': source must be a non-empty string")
  T.raises(function() return K { name = 'scale', source = '  \n' } end, 'source must be a non-empty string')
  T.raises(function() return K { name = 'scale', source = SRC, sigature = 'float*' } end,
    { "unknown option 'sigature'", 'signature' })
  T.raises(function() return K { name = 'scale', source = SRC, options = '--use_fast_math' } end,
    'options must be a list of strings')
  T.raises(function() return K { name = 'scale', source = SRC, options = { 3 } } end, 'options[1] must be a string')
  T.raises(function() return K { name = 'scale', source = SRC, options = { '-arch=sm_80' } } end,
    '-arch is set from the device')
  T.raises(function() return K { name = 'scale', source = SRC, cache = 3 } end, 'cache must be true, false or a directory')
  T.raises(function() return K { name = 'scale', source = SRC, contiguous = 'yes' } end, 'contiguous must be a boolean')
end)

T.test('signatures name the bad parameter', function()
  T.raises(function() return K { name = 'scale', source = SRC, signature = 'float*, const float*, flaot, int64' } end,
    { "v100.kernel 'scale'", "signature parameter 3 ('flaot')", "unknown type 'flaot'" })
  T.raises(function() return K { name = 'scale', source = SRC, signature = 'float**' } end, 'pointers to pointers')
  T.raises(function() return K { name = 'scale', source = SRC, signature = 'half' } end, 'only supported as a pointer')
  T.raises(function() return K { name = 'scale', source = SRC, signature = 5 } end, 'signature must be a string')
  -- names, const, __restrict__ and spacing are all accepted
  local sig = require('v100.core')._rtc.signature('k', 'float* __restrict__ y, const float *x, float a, int64 n')
  T.eq(#sig, 4)
  T.ok(sig[1].pointer and not sig[1].const and sig[1].dtype == 'f32', 'y')
  T.ok(sig[2].pointer and sig[2].const and sig[2].dtype == 'f32', 'x')
  T.ok(not sig[3].pointer and sig[3].dtype == 'f32', 'a')
  T.ok(not sig[4].pointer and sig[4].dtype == 'i64', 'n')
  T.eq(sig[2].text, 'const float *x')
end)

T.test('launch configurations', function()
  local g, b, sh, args = K._check_config('k', { grid = 4, block = { 32, 8 }, shared = 1024, args = { 1 } })
  T.eq(g, { 4 })
  T.eq(b, { 32, 8 })
  T.eq(sh, 1024)
  T.eq(#args, 1)
  g, b, sh = K._check_config('k', { grid = 2.0, block = 256 })
  T.eq(math.type(g[1]), 'integer')
  T.eq(sh, 0)
  T.raises(function() K._check_config('k', { block = 1 }) end, 'k: grid is missing')
  T.raises(function() K._check_config('k', { grid = 1 }) end, 'k: block is missing')
  T.raises(function() K._check_config('k', { grid = 0, block = 1 }) end, 'grid[1] must be an integer from 1 to 4294967295, got 0')
  T.raises(function() K._check_config('k', { grid = -3, block = 1 }) end, 'got -3')
  T.raises(function() K._check_config('k', { grid = 2.5, block = 1 }) end, 'got 2.5')
  T.raises(function() K._check_config('k', { grid = { 1, 2, 3, 4 }, block = 1 }) end, 'a list of 1 to 3 of them, got 4 values')
  T.raises(function() K._check_config('k', { grid = {}, block = 1 }) end, 'got 0 values')
  T.raises(function() K._check_config('k', { grid = 1, block = { 1, 'x' } }) end, 'block[2] must be an integer')
  T.raises(function() K._check_config('k', { grid = 2 ^ 32, block = 1 }) end, 'grid[1]')
  T.raises(function() K._check_config('k', { grid = 1, block = 1, shared = -1 }) end, 'shared must be a byte count >= 0, got -1')
  T.raises(function() K._check_config('k', { grid = 1, block = 1, shared = 0.5 }) end, 'shared must be a byte count')
  T.raises(function() K._check_config('k', { grid = 1, block = 1, sharde = 1 }) end, "unknown option 'sharde'")
  T.raises(function() K._check_config('k', { grid = 1, block = 1, args = 3 }) end, 'args must be a list')
  T.eq(K.blocks(1000, 256), 4)
  T.eq(K.blocks(1024, 256), 4)
  T.eq(K.blocks(1), 1)
  T.eq(K.blocks(0, 128), 0)
end)

T.test('launch arguments are checked against the signature', function()
  local x = v100.randn { 3, 4 }
  local sig = 'float*, const float*, float, int64'
  T.raises(function() K._check_args("v100.kernel 'scale'", sig, { x, x, 1.0 }) end,
    "v100.kernel 'scale': 3 arguments given, the signature has 4")
  T.raises(function() K._check_args('k', sig, { 1, x, 1.0, 3 }) end, 'k: argument 1 (float*) must be a tensor, got number')
  T.raises(function() K._check_args('k', sig, { x, x, 1.0, 3 }) end,
    { 'argument 1 (float*) is a tensor on the CPU', '3x4 f32 cpu', 'kernels take CUDA tensors' })
  T.raises(function() K._check_args('k', 'int64 n, float a', { 3, 'a' }) end, 'argument 2 (float a) must be a number, got string')
  local f = v100.zeros { 2 }
  f:free()
  T.raises(function() K._check_args('k', sig, { f, x, 1.0, 3 }) end, 'argument 1 (float*): tensor used after free')
  -- scalars: integers in range, exact
  T.eq(K._check_args('k', 'int, int64 n, uint32, double, float', { -5, 2 ^ 53, 4294967295, 1.5, 2 }), 5)
  T.raises(function() K._check_args('k', 'int', { 2 ^ 31 }) end, 'argument 1 (int) = 2147483648 is out of its type\'s range')
  T.raises(function() K._check_args('k', 'uint32', { -1 }) end, 'argument 1 (uint32) = -1 is out of its type')
  T.raises(function() K._check_args('k', 'int64', { 1.5 }) end, 'argument 1 (int64) must be an integer, got 1.5')
  T.raises(function() K._check_args('k', 'int64', { true }) end, 'must be a number, got boolean')
  T.eq(K._check_args('k', '', {}), 0)
  -- nil in the middle of a positional list is counted, and reported
  T.raises(function() K._check_args('k', 'int, int', table.pack(nil, 1)) end, 'argument 1 (int) must be a number, got nil')
end)

T.test('without a signature, scalars carry their type', function()
  T.eq(K._check_args('k', nil, { { 'i64', 3 }, { 'f32', 2.5 }, { 'double', 1 } }), 3)
  T.raises(function() K._check_args('k', nil, { 3 }) end,
    { 'argument 1 is a number', "scalars need their type, e.g. {'i64', n}" })
  T.raises(function() K._check_args('k', nil, { { 'quux', 1 } }) end, "unknown type 'quux'")
  T.raises(function() K._check_args('k', nil, { { 'float*', 1 } }) end, "'float*' is not a scalar type")
  T.raises(function() K._check_args('k', nil, { { 'i32', 1.25 } }) end, 'must be an integer, got 1.25')
  T.raises(function() K._check_args('k', nil, { v100.zeros { 2 } }) end, 'argument 1 (void*) is a tensor on the CPU')
end)

T.test('kernel.op definitions and calls', function()
  local fwd = { 'scale', 'float*, const float*, float, int64' }
  T.raises(function() K.op { name = 'op', source = SRC, kernels = { fwd = fwd } } end, "v100.kernel.op 'op': forward must be a function")
  T.raises(function() K.op { name = 'op', source = SRC, forward = print } end, 'kernels must map keys to {name, signature}')
  T.raises(function() K.op { name = 'op', source = SRC, forward = print, kernels = { fwd = fwd }, backward = 1 } end,
    'backward must be a function')
  T.raises(function() K.op { name = 'op', source = SRC, forward = print, kernels = { fwd = fwd }, bakward = print } end,
    "unknown option 'bakward'")
  T.raises(function() K.op { name = 'op', source = SRC, forward = print, kernels = { fwd = { 'scale', 'flaot*' } } } end,
    "unknown type 'flaot'")
  T.raises(function() K.op { name = 'op', forward = print, kernels = { fwd = fwd } } end, 'source must be a non-empty string')
  local calls = 0
  local def = { name = 'op', source = SRC, kernels = { fwd = fwd }, forward = function() calls = calls + 1 end }
  local op = K.op(def)
  T.raises(function() return op(v100.randn { 3 }) end, "v100.kernel.op 'op': argument 1 is a tensor on the CPU")
  T.raises(function() return op(2, 3) end, 'needs at least one CUDA tensor argument')
  local x = v100.randn({ 3 }, { requires_grad = true })
  T.raises(function() return op(x) end, "argument 1 requires grad but the op has no backward")
  def.backward = function() end
  local dop = K.op(def)
  T.raises(function() return dop(x) end, 'argument 1 is a tensor on the CPU')
  T.eq(calls, 0, 'forward never ran on CPU tensors')
end)

T.test('the fused bias + GELU example loads without a GPU and refuses CPU tensors', function()
  local ex = dofile('recipes/examples/fused_bias_gelu.lua')
  T.ok(type(ex.check) == 'function' and ex.op.name == 'bias_gelu')
  T.ok(ex.SOURCE:find('extern "C" __global__ void bias_gelu_fwd_', 1, true) ~= nil)
  local x, b = v100.randn { 4, 3 }, v100.randn { 3 }
  T.raises(function() return ex.op(x, b) end, "v100.kernel.op 'bias_gelu': argument 1 is a tensor on the CPU")
end)

T.run()
