-- recipes/examples/fused_bias_gelu.lua: a fused bias + GELU written in the script (v100.kernel.op),
-- checked against the composed ops F.gelu(x + b) (values and gradients) in f32, f16 and bf16.
--
--   v100lua recipes/examples/fused_bias_gelu.lua      prints one line per dtype, exits 1 on a mismatch
--
-- Loaded with dofile (tests/lua/gpu_kernel.lua) it returns {op = <the op>, SOURCE = ..., check = fn}.
-- GELU is the erf form, F.gelu's default: gelu(v) = v * Phi(v), gelu'(v) = Phi(v) + v * phi(v).
-- The kernels compute in f32 whatever the storage type (one template body for the three dtypes;
-- <v100_rtc.h> gives vl_float / vl_store for vl_half and vl_bf16); the bias gradient is the
-- column sum of the input gradient, left to the library's sum.
local v100 = require 'v100'
local F = require 'v100.nn.functional'

local SOURCE = [[
#include <v100_rtc.h>

template <typename T>
__device__ void fwd(T *y, const T *x, const T *b, vl_i64 n, vl_i64 cols) {
  for (vl_i64 i = vl_index(); i < n; i += vl_stride()) {
    float v = vl_float(x[i]) + vl_float(b[i % cols]);
    vl_store(y + i, 0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

template <typename T>
__device__ void bwd(T *gx, const T *gy, const T *x, const T *b, vl_i64 n, vl_i64 cols) {
  for (vl_i64 i = vl_index(); i < n; i += vl_stride()) {
    float v = vl_float(x[i]) + vl_float(b[i % cols]);
    float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    vl_store(gx + i, vl_float(gy[i]) * (cdf + v * pdf));
  }
}

#define BOTH(suffix, T)                                                                          \
  extern "C" __global__ void bias_gelu_fwd_##suffix(T *y, const T *x, const T *b, vl_i64 n,      \
                                                    vl_i64 cols) { fwd(y, x, b, n, cols); }      \
  extern "C" __global__ void bias_gelu_bwd_##suffix(T *gx, const T *gy, const T *x, const T *b,  \
                                                    vl_i64 n, vl_i64 cols) { bwd(gx, gy, x, b, n, cols); }
BOTH(f32, float)
BOTH(f16, vl_half)
BOTH(bf16, vl_bf16)
]]

local CTYPE = { f32 = 'float', f16 = 'half', bf16 = 'bfloat16' }
local kernels = {}
for dt, c in pairs(CTYPE) do
  kernels['fwd_' .. dt] = { 'bias_gelu_fwd_' .. dt, string.format('%s*, const %s*, const %s*, int64, int64', c, c, c) }
  kernels['bwd_' .. dt] = { 'bias_gelu_bwd_' .. dt,
    string.format('%s*, const %s*, const %s*, const %s*, int64, int64', c, c, c, c) }
end

local BLOCK = 256
-- Grid-stride loops: a capped grid covers any n.
local function grid(n) return math.min(v100.kernel.blocks(n, BLOCK), 65535) end

local op = v100.kernel.op {
  name = 'bias_gelu',
  source = SOURCE,
  kernels = kernels,
  -- forward(K, ctx, x, b): x of shape N x C (any leading dims), b of shape C; the same dtype.
  forward = function(K, ctx, x, b)
    local cols = b:numel()
    assert(x.shape[#x.shape] == cols and b.dtype == x.dtype, 'bias_gelu: x is ...xC and b is C, of one dtype')
    local k = K['fwd_' .. x.dtype] or error('bias_gelu: no kernel for ' .. x.dtype)
    x, b = x:contiguous(), b:contiguous()
    local y = v100.empty_like(x)
    local n = x:numel()
    if n > 0 then k { grid = grid(n), block = BLOCK, args = { y, x, b, n, cols } } end
    ctx:save_for_backward(x, b)
    return y
  end,
  backward = function(K, ctx, gy)
    local x, b = ctx.saved_tensors[1], ctx.saved_tensors[2]
    gy = gy:contiguous()
    local gx = v100.empty_like(x)
    local n, cols = x:numel(), b:numel()
    if n > 0 then K['bwd_' .. x.dtype] { grid = grid(n), block = BLOCK, args = { gx, gy, x, b, n, cols } } end
    return gx, gx:view { -1, cols }:sum(1)
  end,
}

-- Largest |a - ref| / (atol + rtol |ref|) over the elements: <= 1 passes.
local function score(a, ref, rtol, atol)
  a, ref = a:float(), ref:float()
  local bound = ref:abs() * rtol + atol
  return ((a - ref):abs() / bound):max():item()
end

-- rtol/atol per dtype: the composed reference runs in f32 on the half-rounded inputs, so the fused
-- result may differ by the rounding of its one store (two for the bias gradient's sum).
local TOL = { f32 = { 1e-5, 1e-6 }, f16 = { 2e-3, 2e-3 }, bf16 = { 1.6e-2, 1.6e-2 } }

-- Compares op(x, b) with F.gelu(x + b) for one dtype; returns {dtype=, y=, gx=, gb=, ok=}.
local function check(dtype, rows, cols, device)
  rows, cols, device = rows or 64, cols or 96, device or 'cuda'
  local x = v100.randn({ rows, cols }, { dtype = dtype, device = device }):requires_grad_()
  local b = v100.randn({ cols }, { dtype = dtype, device = device }):requires_grad_()
  local gy = v100.randn({ rows, cols }, { dtype = dtype, device = device })
  local y = op(x, b)
  y:backward(gy)
  -- the composed ops, in f32 from the same values
  local xr = x:detach():float():requires_grad_()
  local br = b:detach():float():requires_grad_()
  local yr = F.gelu(xr + br)
  yr:backward(gy:float())
  local rtol, atol = TOL[dtype][1], TOL[dtype][2]
  local r = {
    dtype = dtype,
    y = score(y, yr, rtol, atol),
    gx = score(x.grad, xr.grad, rtol, atol),
    gb = score(b.grad, br.grad, rtol, atol * math.sqrt(rows)),
    same_dtype = y.dtype == dtype and x.grad.dtype == dtype and b.grad.dtype == dtype,
  }
  r.ok = r.y <= 1 and r.gx <= 1 and r.gb <= 1 and r.same_dtype
  return r
end

local M = { op = op, SOURCE = SOURCE, check = check, TOL = TOL }

if arg and arg[0] and arg[0]:match('fused_bias_gelu%.lua$') then
  if not v100.cuda.is_available() then
    print('fused_bias_gelu: needs a CUDA device')
    os.exit(0)
  end
  v100.set_allow_tf32(false)
  local all = true
  for _, dt in ipairs { 'f32', 'f16', 'bf16' } do
    local r = check(dt, 256, 1024)
    all = all and r.ok
    print(string.format('%-5s y %.3f  grad x %.3f  grad b %.3f  (<= 1 passes)  %s', dt, r.y, r.gx, r.gb,
      r.ok and 'ok' or 'MISMATCH'))
  end
  local k = op.kernels_on(v100.device())
  print(string.format('kernels for %s: %s, %s', k.fwd_f32.arch, k.fwd_f32.cached and 'from the disk cache' or 'compiled',
    k.fwd_f32.cache_path ~= '' and k.fwd_f32.cache_path or k.fwd_f32.cache_note))
  os.exit(all and 0 or 1)
end

return M
