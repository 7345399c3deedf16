-- scripts/v100/models/resnet.lua: ResNet-18/34/50/101/152 with torchvision's structure and
-- parameter names, so that torchvision checkpoints load with load_state_dict (strict).
--
--   local resnet = require 'v100.models.resnet'
--   local m = resnet.resnet50{classes = 1000}                      -- ImageNet, 25,557,032 params
--   local m = resnet.resnet18{classes = 10, small_input = true, in_channels = 1} -- 28x28 inputs
--
-- Options: classes (alias num_classes, default 1000), small_input (default false: a 3x3
-- stride-1 stem without max-pool instead of the 7x7 stride-2 conv and 3x3 stride-2 max-pool,
-- for 28-32 px images), in_channels (default 3), zero_init_residual (default false: the last
-- BN of each residual branch starts at weight 0, so every block starts as the identity), width
-- (default 64: the channels of the first stage; the stages have width, 2, 4 and 8 times it. A
-- narrower network for CPUs; torchvision's names and structure either way).
--
-- This is ResNet v1.5, torchvision's: a Bottleneck puts its stride on the 3x3 conv (v1 put it on
-- the first 1x1). Names: conv1, bn1, layer1.0.conv1, ..., layerN.0.downsample.0 (1x1 conv) and
-- .1 (BN), fc. Initialisation is torchvision's: kaiming_normal(fan_out, relu) for convs, BN
-- weight 1 / bias 0, the Linear's PyTorch default.
local nn = require 'v100.nn'
local errors = require 'v100.errors'
local init = nn.init

local resnet = {}

local function conv3x3(cin, cout, stride)
  return nn.Conv2d(cin, cout, 3, { stride = stride or 1, padding = 1, bias = false })
end

local function conv1x1(cin, cout, stride)
  return nn.Conv2d(cin, cout, 1, { stride = stride or 1, bias = false })
end

-- ---------------------------------------------------------------------------------------------
-- Blocks. The ReLUs and the residual adds are fused into the batch norms before them
-- (BatchNorm2d's opts: relu(bn(x)) and relu(bn(x) + identity) in one pass over the activation,
-- forward and backward; docs/NN.md): they hold no state, and torchvision's relu modules contribute
-- no names to a state dict, so the names and the outputs are torchvision's.
local RELU = { activation = 'relu' }

local BasicBlock = nn.Module:extend('BasicBlock')
BasicBlock.expansion = 1
resnet.BasicBlock = BasicBlock

function BasicBlock:init(inplanes, planes, stride, downsample)
  self.conv1 = conv3x3(inplanes, planes, stride)
  self.bn1 = nn.BatchNorm2d(planes)
  self.conv2 = conv3x3(planes, planes)
  self.bn2 = nn.BatchNorm2d(planes)
  if downsample then self.downsample = downsample end
  self.stride = stride or 1
end

function BasicBlock:forward(x)
  local out = self.bn1(self.conv1(x), RELU)
  local identity = self.downsample and self.downsample(x) or x
  return self.bn2(self.conv2(out), { activation = 'relu', residual = identity })
end

-- The BN whose weight zero_init_residual zeroes.
function BasicBlock:last_bn() return self.bn2 end

local Bottleneck = nn.Module:extend('Bottleneck')
Bottleneck.expansion = 4
resnet.Bottleneck = Bottleneck

function Bottleneck:init(inplanes, planes, stride, downsample)
  local width = planes -- base_width 64, groups 1
  self.conv1 = conv1x1(inplanes, width)
  self.bn1 = nn.BatchNorm2d(width)
  self.conv2 = conv3x3(width, width, stride) -- v1.5: the stride sits here
  self.bn2 = nn.BatchNorm2d(width)
  self.conv3 = conv1x1(width, planes * Bottleneck.expansion)
  self.bn3 = nn.BatchNorm2d(planes * Bottleneck.expansion)
  if downsample then self.downsample = downsample end
  self.stride = stride or 1
end

function Bottleneck:forward(x)
  local out = self.bn1(self.conv1(x), RELU)
  out = self.bn2(self.conv2(out), RELU)
  local identity = self.downsample and self.downsample(x) or x
  return self.bn3(self.conv3(out), { activation = 'relu', residual = identity })
end

function Bottleneck:last_bn() return self.bn3 end

-- ---------------------------------------------------------------------------------------------
-- The network

local ResNet = nn.Module:extend('ResNet')
resnet.ResNet = ResNet

-- block: BasicBlock or Bottleneck; layers: blocks per stage, e.g. {3, 4, 6, 3}.
function ResNet:init(block, layers, opts)
  opts = opts or {}
  local classes = opts.classes or opts.num_classes or 1000
  local in_channels = opts.in_channels or 3
  assert(math.tointeger(classes) and classes > 0, 'ResNet: classes must be a positive integer')
  assert(math.tointeger(in_channels) and in_channels > 0, 'ResNet: in_channels must be a positive integer')
  local w = opts.width or 64
  assert(math.tointeger(w) and w > 0, 'ResNet: width must be a positive integer')
  self.small_input = opts.small_input and true or false
  self.width = w
  self.inplanes = w
  if self.small_input then
    self.conv1 = nn.Conv2d(in_channels, w, 3, { stride = 1, padding = 1, bias = false })
  else
    self.conv1 = nn.Conv2d(in_channels, w, 7, { stride = 2, padding = 3, bias = false })
  end
  self.bn1 = nn.BatchNorm2d(w)
  if not self.small_input then self.maxpool = nn.MaxPool2d(3, { stride = 2, padding = 1 }) end
  self.layer1 = self:_make_layer(block, w, layers[1], 1)
  self.layer2 = self:_make_layer(block, 2 * w, layers[2], 2)
  self.layer3 = self:_make_layer(block, 4 * w, layers[3], 2)
  self.layer4 = self:_make_layer(block, 8 * w, layers[4], 2)
  self.avgpool = nn.AdaptiveAvgPool2d({ 1, 1 })
  self.fc = nn.Linear(8 * w * block.expansion, classes)

  for _, e in ipairs(self:named_modules()) do
    local m = e[2]
    local cls = getmetatable(m)
    if cls == nn.Conv2d then
      init.kaiming_normal_(m.weight, { mode = 'fan_out', nonlinearity = 'relu' })
    elseif cls == nn.BatchNorm2d then
      init.ones_(m.weight)
      init.zeros_(m.bias)
    end
  end
  if opts.zero_init_residual then
    for _, e in ipairs(self:named_modules()) do
      local m = e[2]
      if m.last_bn then init.zeros_(m:last_bn().weight) end
    end
  end
end

function ResNet:_make_layer(block, planes, blocks, stride)
  local downsample
  if stride ~= 1 or self.inplanes ~= planes * block.expansion then
    downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
      nn.BatchNorm2d(planes * block.expansion))
  end
  local mods = { block(self.inplanes, planes, stride, downsample) }
  self.inplanes = planes * block.expansion
  for _ = 2, blocks do mods[#mods + 1] = block(self.inplanes, planes) end
  return nn.Sequential(mods)
end

-- x: N x C x H x W -> logits N x classes.
function ResNet:forward(x)
  x = self.bn1(self.conv1(x), RELU)
  if self.maxpool then x = self.maxpool(x) end
  x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
  x = self.avgpool(x)
  return self.fc(x:reshape{ x.shape[1], -1 })
end

function ResNet:extra_repr()
  local parts = {}
  if self.small_input then parts[#parts + 1] = 'small_input=true' end
  if self.width ~= 64 then parts[#parts + 1] = 'width=' .. self.width end
  return table.concat(parts, ', ')
end

local CONFIGS = {
  resnet18 = { BasicBlock, { 2, 2, 2, 2 } },
  resnet34 = { BasicBlock, { 3, 4, 6, 3 } },
  resnet50 = { Bottleneck, { 3, 4, 6, 3 } },
  resnet101 = { Bottleneck, { 3, 4, 23, 3 } },
  resnet152 = { Bottleneck, { 3, 8, 36, 3 } },
}

for name, c in pairs(CONFIGS) do
  resnet[name] = function(opts)
    if opts ~= nil and type(opts) ~= 'table' then
      error(string.format('resnet.%s(opts): opts must be a table, got %s', name, type(opts)), 2)
    end
    errors.check_opts('resnet.' .. name, opts, { 'classes', 'num_classes', 'in_channels', 'width', 'small_input', 'zero_init_residual' })
    return ResNet(c[1], c[2], opts)
  end
end

return resnet
