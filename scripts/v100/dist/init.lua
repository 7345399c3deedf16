-- scripts/v100/dist/init.lua: `require 'v100.dist'` (also `v100.dist`): the collectives of
-- dist/comm.lua (this is that same table) plus dist.DataParallel (dist/parallel.lua, with ZeRO
-- stage 1 in dist/zero.lua). Dependencies run one way: comm <- zero <- parallel <- this file.
local dist = require 'v100.dist.comm'
local parallel = require 'v100.dist.parallel'

-- dist.DataParallel(model, opts): bucketed, overlapped gradient all-reduce (docs/DISTRIBUTED.md).
dist.DataParallel = parallel.DataParallel

return dist
