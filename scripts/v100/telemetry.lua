-- `require 'v100.telemetry'` (GPU monitors and energy figures), a name scripts use: the module is scripts/v100/obs/telemetry.lua.
return require 'v100.obs.telemetry'
