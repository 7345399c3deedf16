-- `require 'v100.log'` (the training logger): an alias kept because scripts write that
-- name; the module is scripts/v100/obs/log.lua.
return require 'v100.obs.log'
