-- `require 'v100.nvtx'` (NVTX ranges): an alias kept because scripts write that
-- name; the module is scripts/v100/obs/nvtx.lua.
return require 'v100.obs.nvtx'
