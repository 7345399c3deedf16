-- `require 'v100.prometheus'` (Prometheus metrics), a name scripts use: the module is scripts/v100/obs/prometheus.lua.
return require 'v100.obs.prometheus'
