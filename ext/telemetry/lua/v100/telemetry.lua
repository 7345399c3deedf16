-- `require 'v100.telemetry'` (GPU monitors and energy figures): an alias kept because scripts write that
-- name; the module is ext/telemetry/lua/v100/obs/telemetry.lua.
return require 'v100.obs.telemetry'
