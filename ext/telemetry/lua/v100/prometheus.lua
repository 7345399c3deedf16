-- `require 'v100.prometheus'` (Prometheus metrics): an alias kept because scripts write that
-- name; the module is ext/telemetry/lua/v100/obs/prometheus.lua.
return require 'v100.obs.prometheus'
