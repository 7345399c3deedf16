-- tests/lua/test_options.lua: strict options everywhere (issue 30). Every public function that
-- takes an options table refuses a key it does not know, the message naming the key and listing
-- the valid ones (errors.check_opts in Lua, l_check_opts in C).
--
-- ENTRIES holds one call per function that takes options: valid other arguments plus one
-- misspelled key. So that a function is not forgotten, every public function of the modules in
-- MODULES (walked at run time) must have an entry here or be listed in NO_OPTIONS, the functions
-- that take no options table; and every name in ENTRIES or NO_OPTIONS must exist. A new function
-- in one of these modules fails this test until it is classified.
local v100 = require 'v100'
local nn = require 'v100.nn'
local optim = require 'v100.optim'
local amp = require 'v100.amp'
local dist = require 'v100.dist'
local ckpt = require 'v100.checkpoint'
local kernel = require 'v100.kernel'
local log = require 'v100.log'
local train = require 'v100.train'
local resnet = require 'v100.models.resnet'
local bert = require 'v100.models.bert'
local data = require 'v100.data'
local autograd = require 'v100.autograd'
local repl = require 'v100.repl'
local telemetry = require 'v100.telemetry'
local prometheus = require 'v100.prometheus'
local onnx = require 'v100.onnx'
local bd = require 'v100.bert_data'
local graph = require 'v100.graph'
local T = require 'testlib'

local dir = T.tmpdir()

local function mlp() return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)) end
local function x34() return v100.randn({ 2, 3 }) end
local function tiny_bert_cfg()
  return bert.config { vocab_size = 30, hidden_size = 8, num_hidden_layers = 1, num_attention_heads = 2,
    intermediate_size = 16, max_position_embeddings = 16, type_vocab_size = 2 }
end

-- A checkpoint to restore (made once, on first use).
local saved
local function a_checkpoint()
  if not saved then
    saved = ckpt.save(dir .. '/ck', { model = mlp(), optimizer = optim.SGD(mlp():parameters(), { lr = 0.1 }) })
  end
  return ckpt.load(saved)
end

-- A one-sample shard set for bert_data.
local shard
local function a_shard()
  if not shard then
    shard = dir .. '/one.shard'
    local w <close> = v100.text.ShardWriter(shard, { seq_len = 8, max_predictions = 2, vocab_size = 100 })
    w:add { ids = { 2, 10, 3, 11, 12, 3 }, seg_a = 3, positions = { 1, 4 }, masked_ids = { 50, 60 }, nsp = 1 }
    w:finish()
  end
  return shard
end

-- An ImageFolder of one 8 x 8 image.
local folder
local function an_image_folder()
  if not folder then
    folder = dir .. '/img'
    v100.io.makedirs(folder .. '/a')
    data.encode_jpeg(v100.zeros({ 8, 8, 3 }, { dtype = 'u8' }), folder .. '/a/x.JPEG')
  end
  return data.ImageFolder(folder)
end

local VOCAB = 'tests/data/wordpiece_vocab.txt'

-- { name, misspelled key, function(o) calling the API with o = { [key] = true } merged into the
-- valid options it needs }. `with(t)` adds the key to t.
local ENTRIES = {
  -- tensors (C: l_opts)
  { 'v100.tensor', 'dtyp', function(with) return v100.tensor({ 1, 2 }, with {}) end },
  { 'v100.empty', 'devce', function(with) return v100.empty({ 2 }, with {}) end },
  { 'v100.zeros', 'dtpye', function(with) return v100.zeros({ 2 }, with { dtype = 'f32' }) end },
  { 'v100.ones', 'requires_gard', function(with) return v100.ones({ 2 }, with {}) end },
  { 'v100.full', 'dtyp', function(with) return v100.full({ 2 }, 1, with {}) end },
  { 'v100.arange', 'dtyp', function(with) return v100.arange(0, 4, with {}) end },
  { 'v100.rand', 'dtyp', function(with) return v100.rand({ 2 }, with {}) end },
  { 'v100.randn', 'dtyp', function(with) return v100.randn({ 2 }, with {}) end },
  { 'v100.bernoulli', 'dtyp', function(with) return v100.bernoulli({ 2 }, 0.5, with {}) end },
  { 'v100.empty_like', 'dtyp', function(with) return v100.empty_like(x34(), with {}) end },
  { 'v100.zeros_like', 'dtyp', function(with) return v100.zeros_like(x34(), with {}) end },
  { 'v100.ones_like', 'dtyp', function(with) return v100.ones_like(x34(), with {}) end },
  { 'v100.full_like', 'dtyp', function(with) return v100.full_like(x34(), 2, with {}) end },
  { 'v100.rand_like', 'dtyp', function(with) return v100.rand_like(x34(), with {}) end },
  { 'v100.randn_like', 'dtyp', function(with) return v100.randn_like(x34(), with {}) end },
  { 'v100.randint', 'dtyp', function(with) return v100.randint(0, 5, { 2 }, with {}) end },
  { 'v100.randint_like', 'dtyp', function(with) return v100.randint_like(x34(), 5, with {}) end },
  { 'v100.randperm', 'dtyp', function(with) return v100.randperm(4, with {}) end },
  { 'v100.linspace', 'dtyp', function(with) return v100.linspace(0, 1, 3, with {}) end },
  { 'v100.logspace', 'bsae', function(with) return v100.logspace(0, 1, 3, with { base = 2 }) end },
  { 'v100.eye', 'dtyp', function(with) return v100.eye(3, with {}) end },
  { 'v100.multinomial', 'replacment', function(with) return v100.multinomial(v100.ones({ 3 }), 2, with {}) end },
  { 'Tensor:multinomial', 'replacment', function(with) return v100.ones({ 3 }):multinomial(2, with {}) end },
  { 'v100.addmm', 'alpah', function(with)
    return v100.addmm(v100.zeros({ 2, 2 }), v100.ones({ 2, 3 }), v100.ones({ 3, 2 }), with {})
  end },
  { 'v100.pad', 'mdoe', function(with) return v100.pad(x34(), { 1, 1 }, with {}) end },
  { 'nn.F.pad', 'vaule', function(with) return nn.F.pad(x34(), { 1, 1 }, with { mode = 'constant' }) end },
  { 'v100.load_safetensors', 'devcie', function(with)
    local p = dir .. '/t.safetensors'
    v100.save_safetensors(p, { a = v100.ones({ 2 }) })
    return v100.load_safetensors(p, with {})
  end },
  { 'v100.save', 'compress', function(with) return v100.save(dir .. '/s.v100', { 1 }, with {}) end },
  { 'v100.load', 'devise', function(with)
    v100.save(dir .. '/l.v100', { 1 })
    return v100.load(dir .. '/l.v100', with {})
  end },
  { 'v100.graph', 'warmpu', function(with) return v100.graph(function() end, with {}) end },
  { 'v100.kernel', 'sigature', function(with)
    return v100.kernel(with { name = 'k', source = 'extern "C" __global__ void k() {}' })
  end },
  { 'Tensor:to', 'dtpye', function(with) return x34():to(with { dtype = 'f64' }) end },
  { 'Tensor:gelu', 'aproximate', function(with) return x34():gelu(with {}) end },
  { 'Tensor:var', 'corection', function(with) return x34():var(with {}) end },
  { 'Tensor:std', 'corection', function(with) return x34():std(with {}) end },
  { 'Tensor:cumsum', 'dtpye', function(with) return x34():cumsum(2, with {}) end },
  { 'Tensor:cumprod', 'dtpye', function(with) return x34():cumprod(1, with { dtype = 'f64' }) end },
  { 'Tensor:sort', 'decending', function(with) return x34():sort(2, with {}) end },
  { 'Tensor:argsort', 'stabel', function(with) return x34():argsort(with {}) end },
  { 'Tensor:topk', 'largets', function(with) return x34():topk(2, 2, with {}) end },
  { 'Tensor:unique', 'return_invers', function(with) return x34():unique(with {}) end },
  { 'v100.searchsorted', 'rigth', function(with)
    return v100.searchsorted(v100.tensor({ 1, 2, 3 }), v100.tensor({ 2 }), with {})
  end },
  { 'Tensor:scatter', 'reduc', function(with)
    return x34():scatter(2, v100.tensor({ { 0 } }, { dtype = 'i64' }), 1, with {})
  end },
  { 'Tensor:scatter_', 'reduc', function(with)
    return x34():scatter_(2, v100.tensor({ { 0 } }, { dtype = 'i64' }), 1, with {})
  end },
  { 'Tensor:index_put', 'acumulate', function(with)
    return x34():index_put({ v100.tensor({ 0 }, { dtype = 'i64' }) }, 1, with {})
  end },
  { 'Tensor:index_put_', 'acumulate', function(with)
    return x34():index_put_({ v100.tensor({ 0 }, { dtype = 'i64' }) }, 1, with {})
  end },
  { 'Tensor:backward', 'retain_grpah', function(with)
    local a = v100.ones({ 2 }, { requires_grad = true })
    return (a * 2):sum():backward(nil, with {})
  end },
  { 'cuda.Stream', 'priorty', function(with) return v100.cuda.Stream(with {}) end },
  { 'cuda.Event', 'timng', function(with) return v100.cuda.Event(with {}) end },
  { 'io.json_encode', 'prety', function(with) return v100.io.json_encode({ 1 }, with {}) end },
  -- text (C)
  { 'text.WordPiece', 'lowr', function(with) return v100.text.WordPiece(VOCAB, with {}) end },
  { 'WordPiece:encode', 'max_lenght', function(with) return v100.text.WordPiece(VOCAB):encode('a b', with {}) end },
  { 'WordPiece:decode', 'skip_specials', function(with) return v100.text.WordPiece(VOCAB):decode({ 5 }, with {}) end },
  { 'text.train_vocab', 'vocab', function(with)
    T.write_file(dir .. '/corpus.txt', 'a b c\n')
    return v100.text.train_vocab({ dir .. '/corpus.txt' }, with {})
  end },
  { 'text.ShardWriter', 'seqlen', function(with)
    return v100.text.ShardWriter(dir .. '/w.shard', with { seq_len = 8, max_predictions = 2, vocab_size = 100 })
  end },
  { 'ShardWriter:add', 'idz', function(with)
    local w <close> = v100.text.ShardWriter(dir .. '/w2.shard', { seq_len = 8, max_predictions = 2, vocab_size = 100 })
    return w:add(with { ids = { 2, 10, 3, 3 }, seg_a = 3 })
  end },
  { 'text.make_pretraining_shards', 'seqlen', function(with)
    return v100.text.make_pretraining_shards(with { inputs = { dir .. '/corpus.txt' }, vocab = VOCAB, output = dir .. '/mk' })
  end },
  -- autograd
  { 'autograd.grad', 'retain_grpah', function(with)
    local a = v100.ones({ 2 }, { requires_grad = true })
    return autograd.grad((a * 2):sum(), { a }, nil, with {})
  end },
  { 'autograd.gradcheck', 'eps_', function(with)
    return autograd.gradcheck(function(a) return a * 2 end, { v100.ones({ 2 }, { dtype = 'f64', requires_grad = true }) }, with {})
  end },
  -- nn layers
  { 'nn.Linear', 'baias', function(with) return nn.Linear(3, 4, with {}) end },
  { 'nn.Conv2d', 'paddin', function(with) return nn.Conv2d(3, 4, 3, with {}) end },
  { 'nn.BatchNorm1d', 'momentm', function(with) return nn.BatchNorm1d(4, with {}) end },
  { 'nn.BatchNorm2d', 'eps_', function(with) return nn.BatchNorm2d(4, with {}) end },
  { 'BatchNorm2d:forward', 'activaton', function(with) return nn.BatchNorm2d(2)(v100.randn({ 2, 2, 3, 3 }), with {}) end },
  { 'nn.LayerNorm', 'elementwise_afine', function(with) return nn.LayerNorm(4, with {}) end },
  { 'nn.GELU', 'aproximate', function(with) return nn.GELU(with {}) end },
  { 'nn.MaxPool2d', 'strde', function(with) return nn.MaxPool2d(2, with {}) end },
  { 'nn.AvgPool2d', 'ceilmode', function(with) return nn.AvgPool2d(2, with {}) end },
  { 'nn.Embedding', 'padding_index', function(with) return nn.Embedding(10, 4, with {}) end },
  { 'nn.CrossEntropyLoss', 'smothing', function(with) return nn.CrossEntropyLoss(with {}) end },
  { 'nn.NLLLoss', 'ignore_idx', function(with) return nn.NLLLoss(with {}) end },
  { 'nn.MSELoss', 'reductoin', function(with) return nn.MSELoss(with {}) end },
  { 'nn.BCEWithLogitsLoss', 'pos_wieght', function(with) return nn.BCEWithLogitsLoss(with {}) end },
  { 'Module:load_state_dict', 'strick', function(with) local m = mlp() return m:load_state_dict(m:state_dict(), with {}) end },
  { 'Module:to', 'dtpye', function(with) return mlp():to(with { dtype = 'f64' }) end },
  -- nn functional and losses (nn.cross_entropy etc. are nn.F's)
  { 'nn.cross_entropy', 'smothing', function(with) return nn.cross_entropy(x34(), v100.tensor({ 0, 1 }), with {}) end },
  { 'nn.nll_loss', 'ignore_idx', function(with) return nn.nll_loss(x34():log_softmax(2), v100.tensor({ 0, 1 }), with {}) end },
  { 'nn.mse_loss', 'reductoin', function(with) return nn.mse_loss(x34(), x34(), with {}) end },
  { 'nn.binary_cross_entropy_with_logits', 'wieght', function(with)
    return nn.binary_cross_entropy_with_logits(x34(), v100.zeros({ 2, 3 }), with {})
  end },
  { 'nn.F.bce_with_logits', 'wieght', function(with) return nn.F.bce_with_logits(x34(), v100.zeros({ 2, 3 }), with {}) end },
  { 'nn.F.conv2d', 'paddin', function(with) return nn.F.conv2d(v100.randn({ 1, 1, 4, 4 }), v100.randn({ 1, 1, 3, 3 }), nil, with {}) end },
  { 'nn.F.max_pool2d', 'strde', function(with) return nn.F.max_pool2d(v100.randn({ 1, 1, 4, 4 }), 2, with {}) end },
  { 'nn.F.avg_pool2d', 'strde', function(with) return nn.F.avg_pool2d(v100.randn({ 1, 1, 4, 4 }), 2, with {}) end },
  { 'nn.F.batch_norm', 'activaton', function(with)
    return nn.F.batch_norm(v100.randn({ 2, 2, 3, 3 }), nil, nil, nil, nil, true, 0.1, 1e-5, with {})
  end },
  { 'nn.F.gelu', 'aproximate', function(with) return nn.F.gelu(x34(), with {}) end },
  { 'nn.F.embedding', 'padding_index', function(with) return nn.F.embedding(v100.tensor({ 1 }), v100.randn({ 3, 2 }), with {}) end },
  { 'nn.F.scaled_dot_product_attention', 'casual', function(with)
    local q = v100.randn({ 1, 1, 2, 4 })
    return nn.F.scaled_dot_product_attention(q, q, q, with {})
  end },
  -- nn.init
  { 'nn.init.kaiming_uniform_', 'nonlinarity', function(with) return nn.init.kaiming_uniform_(v100.empty({ 3, 3 }), with {}) end },
  { 'nn.init.kaiming_normal_', 'mod', function(with) return nn.init.kaiming_normal_(v100.empty({ 3, 3 }), with {}) end },
  { 'nn.init.parameter', 'devcie', function(with) return nn.init.parameter({ 2 }, nn.init.zeros_, with {}) end },
  -- optim
  { 'optim.SGD', 'momentun', function(with) return optim.SGD(mlp():parameters(), with { lr = 0.1 }) end },
  { 'optim.AdamW', 'weight_decy', function(with) return optim.AdamW(mlp():parameters(), with {}) end },
  { 'optim.LAMB', 'always_adpat', function(with) return optim.LAMB(mlp():parameters(), with {}) end },
  { 'optim.LARS', 'trust_coef', function(with) return optim.LARS(mlp():parameters(), with { lr = 0.1 }) end },
  { 'optim.schedule.warmup_cosine', 'warmpu', function(with) return optim.schedule.warmup_cosine(with { total = 10 }) end },
  { 'optim.schedule.step', 'gama', function(with) return optim.schedule.step(with { step_size = 2 }) end },
  { 'optim.schedule.polynomial', 'powr', function(with) return optim.schedule.polynomial(with { total = 10 }) end },
  { 'optim.schedule.constant', 'warmpu', function(with) return optim.schedule.constant(with {}) end },
  -- amp
  { 'amp.Scaler', 'grow', function(with) return amp.Scaler(with {}) end },
  { 'Scaler:backward', 'retain_grpah', function(with)
    local a = v100.ones({ 2 }, { requires_grad = true })
    return amp.Scaler():backward((a * 2):sum(), with {})
  end },
  { 'amp.policy', 'level', function(with) return amp.policy('O2', with {}) end },
  { 'amp.half_model', 'keep', function(with) return amp.half_model(mlp(), with {}) end },
  { 'amp.autocast', 'dtyp', function(with) return amp.autocast(function() end, with {}) end },
  { 'Policy:prepare', 'weight_decy', function(with) return amp.policy('O2'):prepare(mlp(), optim.AdamW, with {}) end },
  -- dist (one process: rank 0 of 1)
  { 'dist.all_reduce', 'opp', function(with) return dist.all_reduce(v100.ones({ 2 }), with {}) end },
  { 'dist.broadcast', 'srcc', function(with) return dist.broadcast(v100.ones({ 2 }), with {}) end },
  { 'dist.reduce', 'dts', function(with) return dist.reduce(v100.ones({ 2 }), with {}) end },
  { 'dist.all_gather', 'asyn', function(with) return dist.all_gather(v100.ones({ 2 }), with {}) end },
  { 'dist.reduce_scatter', 'opp', function(with) return dist.reduce_scatter(v100.ones({ 2 }), with {}) end },
  { 'dist.send', 'tagg', function(with) return dist.send(v100.ones({ 2 }), 0, with {}) end },
  { 'dist.recv', 'tagg', function(with) return dist.recv(v100.ones({ 2 }), 0, with {}) end },
  { 'dist.isend', 'tagg', function(with) return dist.isend(v100.ones({ 2 }), 0, with {}) end },
  { 'dist.irecv', 'tagg', function(with) return dist.irecv(v100.ones({ 2 }), 0, with {}) end },
  { 'dist.barrier', 'asyn', function(with) return dist.barrier(with {}) end },
  { 'dist.DistributedSampler', 'shufle', function(with) return dist.DistributedSampler(10, with {}) end },
  { 'dist.epoch_indices', 'shufle', function(with) return dist.epoch_indices(10, 0, with { seed = 1 }) end },
  { 'dist.DataParallel', 'bucket_mbs', function(with) return dist.DataParallel(mlp(), with {}) end },
  { 'DataParallel:zero_optimizer', 'momentun', function(with)
    local dp = dist.DataParallel(mlp(), { zero = 1 })
    return dp:zero_optimizer('SGD', with { lr = 0.1 })
  end },
  -- checkpoint
  { 'checkpoint.save', 'stepp', function(with) return ckpt.save(dir .. '/ck2', with { model = mlp() }) end },
  { 'checkpoint.restore', 'optimzer', function(with)
    local m = mlp()
    return ckpt.restore(a_checkpoint(), with { model = m })
  end },
  { 'checkpoint.load_pretrained', 'exlude', function(with)
    a_checkpoint()
    return ckpt.load_pretrained(mlp(), saved, with {})
  end },
  -- graph, kernel, log, train, repl
  { 'graph.capture', 'devce', function(with) return graph.capture(function() end, with {}) end },
  { 'kernel.new', 'sigature', function(with)
    return kernel.new(with { name = 'k', source = 'extern "C" __global__ void k() {}' })
  end },
  { 'kernel.op', 'bakward', function(with)
    return kernel.op(with { name = 'o', source = 'x', kernels = {}, forward = function() end })
  end },
  { 'log.Logger', 'tensorbord', function(with) return log.Logger(with {}) end },
  { 'log.Progress', 'totl', function(with) return log.Progress(with { total = 3, enabled = false }) end },
  { 'train.fit', 'epoch', function(with)
    return train.fit(with { epochs = 1, device = 'cpu', test = { x = x34(), y = v100.tensor({ 0, 1 }), forward = mlp() },
      step = function() end, batches = function() return function() end end })
  end },
  { 'train.stepper', 'acumulate', function(with)
    return train.stepper(with { opt = optim.SGD(mlp():parameters(), { lr = 0.1 }), loss = function() end })
  end },
  { 'repl.set_limits', 'depht', function(with) return repl.set_limits(with {}) end },
  -- models
  { 'resnet.resnet18', 'num_clases', function(with) return resnet.resnet18(with {}) end },
  { 'resnet.resnet34', 'num_clases', function(with) return resnet.resnet34(with {}) end },
  { 'resnet.resnet50', 'num_clases', function(with) return resnet.resnet50(with {}) end },
  { 'resnet.resnet101', 'num_clases', function(with) return resnet.resnet101(with {}) end },
  { 'resnet.resnet152', 'num_clases', function(with) return resnet.resnet152(with {}) end },
  { 'bert.BertModel', 'add_pooler', function(with) return bert.BertModel(tiny_bert_cfg(), with {}) end },
  { 'bert.pretraining_loss', 'weigths', function(with)
    return bert.pretraining_loss(v100.randn({ 1, 2, 30 }), v100.randn({ 1, 2 }), v100.tensor({ { 1, -100 } }),
      v100.tensor({ 0 }), with {})
  end },
  { 'bert.hf_rename', 'prefx', function(with) return bert.hf_rename({}, with {}) end },
  { 'bert.mean_pool', 'normalise', function(with) return bert.mean_pool(v100.randn({ 1, 2, 4 }), v100.ones({ 1, 2 }), with {}) end },
  { 'bert.config_json', 'architecture', function(with) return bert.config_json(tiny_bert_cfg(), with {}) end },
  { 'bert.from_pretrained', 'clas', function(with) return bert.from_pretrained(dir, with {}) end },
  { 'bert.save_pretrained', 'vocb', function(with) return bert.save_pretrained(bert.BertModel(tiny_bert_cfg()), dir .. '/hf', with {}) end },
  { 'bert.sentence_embeddings', 'batchsize', function(with)
    return bert.sentence_embeddings(bert.BertModel(tiny_bert_cfg()), v100.text.WordPiece(VOCAB), { 'a' }, with {})
  end },
  -- data
  { 'data.fashion_mnist', 'rot', function(with) return data.fashion_mnist('test', with {}) end },
  { 'data.batches', 'workers', function(with) return data.batches(x34(), nil, 1, with {}) end },
  { 'data.decode_jpeg', 'chanels', function(with) return data.decode_jpeg(dir .. '/none.jpg', with {}) end },
  { 'data.encode_jpeg', 'qualty', function(with) return data.encode_jpeg(v100.zeros({ 4, 4, 3 }, { dtype = 'u8' }), dir .. '/e.jpg', with {}) end },
  { 'data.ImageLoader', 'batchsize', function(with) return data.ImageLoader(an_image_folder(), with {}) end },
  { 'ImageLoader:epoch', 'strat', function(with)
    local l = data.ImageLoader(an_image_folder(), { batch_size = 1, transform = 'none', size = 8, workers = 1 })
    local ok, err = pcall(l.epoch, l, 0, with {})
    l:close()
    if not ok then error(err, 0) end
  end },
  { 'bert_data.Loader', 'ranks', function(with)
    local ds <close> = bd.open(a_shard())
    return bd.Loader(ds, with { batch_size = 1 })
  end },
  { 'bert_data.Loader:epoch', 'strat', function(with)
    local ds <close> = bd.open(a_shard())
    return bd.Loader(ds, { batch_size = 1 }):epoch(0, with {})
  end },
  { 'bert_data.Dataset:batch', 'devcie', function(with)
    local ds <close> = bd.open(a_shard())
    return ds:batch({ 0 }, with {})
  end },
  -- telemetry, prometheus, onnx
  { 'telemetry.Monitor', 'interval', function(with) return telemetry.Monitor(with { source = 'fake', start = false }) end },
  { 'telemetry.Recorder', 'enable', function(with) return telemetry.Recorder(with { enabled = false }) end },
  { 'prometheus.Registry', 'label', function(with) return prometheus.Registry(with {}) end },
  { 'prometheus.serve', 'prot', function(with) return prometheus.serve(with {}) end },
  { 'prometheus.Exporter', 'dirr', function(with) return prometheus.Exporter(with {}) end },
  { 'onnx.export', 'opest', function(with) return onnx.export(mlp(), x34(), dir .. '/m.onnx', with {}) end },
}

-- Public functions that take no options table (or whose tables are data, not options).
local NO_OPTIONS = {
  -- v100.einsum(eq, {a, b}): its table argument is the list of operands, not options
  v100 = { 'cat', 'device', 'dtype_is_float', 'dtype_of', 'einsum', 'enable_grad', 'gemm_stats', 'get_allow_tf32',
    'get_deterministic', 'get_num_threads', 'is_grad_enabled', 'is_tensor', 'isatty', 'manual_seed', 'no_grad',
    'ops', 'rng_state', 'save_safetensors', 'set_allow_tf32', 'set_cudnn_benchmark', 'set_deterministic',
    'set_grad_enabled', 'set_num_threads', 'set_rng_state', 'stack', 'version_string', 'versions', 'where' },
  -- dist.print: a last argument {all = true} is told from a table to print by its `all` key
  dist = { 'abort', 'finalize', 'group', 'info', 'init', 'is_initialized', 'is_local_main', 'is_main', 'local_rank',
    'local_size', 'print', 'rank', 'size', 'world_size' },
  cuda = { 'current_stream', 'device_count', 'get_device_properties', 'is_available', 'profiler', 'set_stream', 'synchronize' },
  onnx = { 'register' },
  autograd = { 'Function', 'enable_grad', 'live_nodes', 'no_grad' },
  repl = { 'complete', 'format', 'setup', 'show' },
  io = { 'EventWriter', 'check_event_tag', 'exists', 'isatty', 'join', 'json_decode', 'makedirs', 'read_events',
    'read_file', 'read_idx', 'time', 'unix_time' },
  amp = { 'autocast_dtype', 'autocast_stats', 'default_ops', 'is_autocast_enabled', 'is_policy', 'is_scaler', 'ops',
    'reset_autocast_stats', 'reset_ops', 'set_op' },
  nn = { 'AdaptiveAvgPool2d', 'Checkpoint', 'Dropout', 'Flatten', 'Identity', 'LogSoftmax', 'Module', 'ModuleDict',
    'ModuleList', 'ReLU', 'Sequential', 'Sigmoid', 'Softmax', 'Tanh', 'is_module' },
  text = { 'ShardSet', 'crc32c', 'save_vocab' },
  -- recipe.options parses a command line against a spec (a list of rows), not an options table
  recipe = { 'accuracy', 'add_path', 'clock', 'crop_flip', 'fashion_mnist', 'integer', 'number', 'options',
    'pad_standardise', 'parser', 'printf', 'standardise', 'syncer', 'to_device' },
  resnet = { 'BasicBlock', 'Bottleneck', 'ResNet' },
  graph = { 'capturing', 'on_replay' },
  log = { 'Meter', 'format_eta', 'reduce', 'topk_correct' },
  memplan = { 'format', 'measure', 'static' },
  ['nn.F'] = { 'adaptive_avg_pool2d', 'dropout', 'layer_norm', 'linear', 'log_softmax', 'one_hot', 'relu', 'sigmoid', 'softmax', 'tanh' },
  nvtx = { 'enable', 'enabled', 'mark', 'pop', 'push', 'range', 'scope_enter', 'scope_leave', 'stats' },
  bert_data = { 'open', 'vocab_crc' },
  -- telemetry.from_options reads its fields from a recipe's whole parsed command line
  telemetry = { 'available', 'from_options', 'options', 'reduce_window', 'throttle_names' },
  prometheus = { 'format_value', 'url', 'write_textfile' },
  optim = { 'Accumulator', 'check_group', 'clip_grad_norm', 'no_decay_bias_and_norm', 'scale_lr' },
  data = { 'ImageFolder', 'have_nvjpeg', 'permutation', 'resize_image' },
  -- bert.config / read_config: a model config (HF config.json's unknown fields are kept, by design)
  bert = { 'BertForPreTraining', 'BertForSequenceClassification', 'config', 'extended_attention_mask',
    'gather_positions', 'read_config' },
  ['nn.init'] = { 'calculate_fan_in_and_fan_out', 'calculate_gain', 'constant_', 'normal_', 'ones_', 'uniform_',
    'xavier_normal_', 'xavier_uniform_', 'zeros_' },
  kernel = { 'blocks' },
  checkpoint = { 'check_meta', 'latest', 'load' },
  ['optim.schedule'] = {},
  train = {},
}

local MODULES = {
  v100 = v100, optim = optim, ['optim.schedule'] = optim.schedule, nn = nn, ['nn.F'] = nn.F, ['nn.init'] = nn.init,
  amp = amp, dist = dist, checkpoint = ckpt, kernel = kernel, log = log, train = train, resnet = resnet, bert = bert,
  data = data, autograd = autograd, repl = repl, telemetry = telemetry, prometheus = prometheus, onnx = onnx,
  bert_data = bd, recipe = require 'v100.recipe', memplan = require 'v100.memplan', nvtx = require 'v100.nvtx',
  graph = graph, text = v100.text, cuda = v100.cuda, io = v100.io,
}

local function callable(v)
  if type(v) == 'function' then return true end
  local mt = (type(v) == 'table' or type(v) == 'userdata') and getmetatable(v)
  return mt and mt.__call ~= nil or false
end

T.test('every public function of the walked modules is classified', function()
  -- an entry covers its function under every name (nn.cross_entropy is nn.F.cross_entropy)
  local entry, covered = {}, {}
  for _, e in ipairs(ENTRIES) do
    T.ok(not entry[e[1]], 'entry listed twice: ' .. e[1])
    entry[e[1]] = true
    local mname, fn = e[1]:match('^(.*)%.([^.:]+)$')
    if mname and MODULES[mname] and callable(MODULES[mname][fn]) then covered[MODULES[mname][fn]] = true end
  end
  local missing, stale = {}, {}
  for mname, m in pairs(MODULES) do
    local none = {}
    local list = NO_OPTIONS[mname]
    T.ok(list ~= nil, 'module ' .. mname .. ' has no NO_OPTIONS list')
    for _, k in ipairs(list or {}) do
      none[k] = true
      if not callable(m[k]) then stale[#stale + 1] = mname .. '.' .. k end
      if entry[mname .. '.' .. k] then stale[#stale + 1] = mname .. '.' .. k .. ' (also in ENTRIES)' end
    end
    for k, v in pairs(m) do
      if type(k) == 'string' and not k:match('^_') and callable(v) and not none[k] and not entry[mname .. '.' .. k]
          and not covered[v] then
        missing[#missing + 1] = mname .. '.' .. k
      end
    end
  end
  -- an entry named module.fn must name a function of that module
  for _, e in ipairs(ENTRIES) do
    local mname, fn = e[1]:match('^(.*)%.([^.:]+)$')
    if mname and MODULES[mname] and not e[1]:find(':', 1, true) and not callable(MODULES[mname][fn]) then
      stale[#stale + 1] = e[1]
    end
  end
  table.sort(missing)
  table.sort(stale)
  T.eq(missing, {}, 'functions neither in ENTRIES nor in NO_OPTIONS')
  T.eq(stale, {}, 'names in ENTRIES or NO_OPTIONS that are no such function')
end)

T.test('a misspelled option is refused, naming the key', function()
  local bad = {}
  for _, e in ipairs(ENTRIES) do
    local name, key, fn = e[1], e[2], e[3]
    local function with(t)
      t[key] = true
      return t
    end
    local ok, err = pcall(fn, with)
    local want = "unknown option '" .. key .. "'"
    if ok or not tostring(err):find(want, 1, true) then
      bad[#bad + 1] = string.format('%s: %s', name, ok and 'no error' or tostring(err))
    end
  end
  T.eq(bad, {}, 'calls that did not refuse their misspelled option')
  print(string.format('%d API entries checked', #ENTRIES))
end)

T.test('ckpt.restore refuses a misspelled optimizer; ckpt.load names a missing path', function()
  local c = a_checkpoint()
  local m = mlp()
  local opt = optim.SGD(m:parameters(), { lr = 0.1 })
  T.raises(function() ckpt.restore(c, { model = m, optimzer = opt }) end,
    { "checkpoint.restore: unknown option 'optimzer'", 'model, optimizer, scaler, rng' })
  T.raises(function() ckpt.load(dir .. '/nonexistent') end, { 'nonexistent', 'does not exist' })
end)

T.test('the message lists the valid options; non-tables and non-string keys are refused', function()
  T.raises(function() optim.AdamW(mlp():parameters(), { weight_decy = 0 }) end,
    { "optim.AdamW: unknown option 'weight_decy' (", 'weight_decay', 'master_weights' })
  T.raises(function() nn.Linear(3, 4, { baias = false }) end, "nn.Linear: unknown option 'baias' (bias, dtype, device)")
  T.raises(function() v100.zeros({ 2 }, { dtyp = 'f64' }) end, "zeros: unknown option 'dtyp' (dtype, device, requires_grad)")
  T.raises(function() nn.cross_entropy(x34(), v100.tensor({ 0, 1 }), 3) end, 'options must be a table')
  T.raises(function() nn.Linear(3, 4, { false }) end, 'option names must be strings')
  T.raises(function() v100.ones({ 2 }, { [1] = 'f64' }) end, 'option names must be strings')
  T.raises(function() v100.save(dir .. '/x.v100', 1, { a = 1 }) end, '(save takes no options)')
end)

T.run()
