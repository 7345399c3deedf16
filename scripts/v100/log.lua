-- `require 'v100.log'` (JSON lines + TensorBoard logging, progress, meters), a name scripts use: the module is scripts/v100/obs/log.lua.
return require 'v100.obs.log'
