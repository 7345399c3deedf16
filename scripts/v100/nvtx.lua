-- `require 'v100.nvtx'` (NVTX ranges), a name scripts use: the module is scripts/v100/obs/nvtx.lua.
return require 'v100.obs.nvtx'
