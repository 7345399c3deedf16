-- tests/multinode/launch_recipes.lua: recipes/bert.lua (tiny CPU BERT) and recipes/resnet50.lua
-- (CPU default, fewer steps) as 4 ranks over 2 hosts (--map-by node), as a user runs them with
-- mpirun: the WordNet data made once per cache (a node-local cache: once per node, by the node's
-- local rank 0; a shared one: once), metrics logged once, checkpoints in the shared folder written
-- by the 4 ranks and resumed by 4 ranks over 2 hosts (the same losses, exactly), by 1 rank and by
-- 2 ranks on one host (the checkpoint's held-out loss the same; the next steps within the
-- difference of per-rank and global MLM token means: see docs/DISTRIBUTED.md).
local T = require 'testlib'
local mn = require 'mnlib'
local v100 = require 'v100'

local q = mn.q
local a = mn.hosts[1]
local D = mn.shared_dir('recipes')

local function metrics(path, split)
  local out = {}
  local ok, text = pcall(T.read_file, path)
  for line in ((ok and text) or ''):gmatch('[^\n]+') do
    local r = v100.io.json_decode(line)
    if r.split == split then out[#out + 1] = r end
  end
  return out
end
local function count(out, pattern)
  local _, n = out:gsub(pattern, '')
  return n
end

-- tiny BERT without dropout: a step's result does not depend on how the ranks draw their masks
T.write_file(D .. '/tiny-nodrop.json', v100.io.json_encode{
  hidden_size = 128, num_hidden_layers = 2, num_attention_heads = 2, intermediate_size = 512, hidden_act = 'gelu',
  hidden_dropout_prob = 0, attention_probs_dropout_prob = 0, max_position_embeddings = 512, type_vocab_size = 2,
  vocab_size = 8192, layer_norm_eps = 1e-12, initializer_range = 0.02, model_type = 'bert' })
local BERT = 'recipes/bert.lua --config ' .. q(D .. '/tiny-nodrop.json') .. ' --optimizer adamw --lr 1e-3 --batch-size 32 ' ..
  '--steps 8 --log-interval 1 --eval-every 4 --eval-samples 128 --seed 3 --output none'
local LOCAL_CACHE = '/tmp/vlmn-bert-cache' -- every host's own /tmp
local ref                                   -- the uninterrupted 4-rank run: {train = records, eval = records}

T.test('bert.lua, 4 ranks over 2 hosts, node-local cache: the data made once per node; metrics once', function()
  local out, code, secs = mn.mpirun{ np = 4, env = { V100LUA_CACHE = LOCAL_CACHE }, timeout = 400,
    args = BERT .. ' --checkpoint-every 4 --checkpoint-dir ' .. q(D .. '/bert-ck') .. ' --log-dir ' .. q(D .. '/bert-log') }
  T.eq(code, 0, 'the job failed:\n' .. out)
  T.ok(out:find('4 ranks', 1, true), out)
  -- rank 0 (host a) made the data; on host b its local rank 0 (rank 1) made the node's copy
  T.eq(count(out, 'bert_prep: WordNet corpus'), 2, 'the corpus written once per host:\n' .. out)
  T.eq(count(out, 'bert_prep: train shards'), 2, out)
  T.eq(#mn.lines_of(out, 2) + #mn.lines_of(out, 3), 0, 'ranks 2 and 3 (local rank 1) made nothing:\n' .. out)
  local b_lines = mn.lines_of(out, 1)
  T.ok(#b_lines >= 4 and b_lines[1].host == mn.hosts[2] and b_lines[1].text:find('node%-local'), 'rank 1 on host b says why:\n' .. out)
  ref = { train = metrics(D .. '/bert-log/metrics.jsonl', 'train'), eval = metrics(D .. '/bert-log/metrics.jsonl', 'eval') }
  T.eq(#ref.train, 8, 'one train record per step, written once')
  T.eq(#ref.eval, 3, 'evaluations at steps 0, 4, 8')
  T.ok(v100.io.exists(D .. '/bert-ck/epoch0-step4') or v100.io.exists(D .. '/bert-ck/latest'), 'checkpoints in the shared folder')
  print(string.format('      bert.lua 4 ranks / 2 hosts, data made per node, 8 steps: %.1f s; loss %.4f -> %.4f', secs,
    ref.train[1].loss, ref.train[8].loss))
end)

T.test('bert.lua, shared cache: the data made once (rank 0), read by both hosts', function()
  local out, code = mn.mpirun{ np = 4, env = { V100LUA_CACHE = D .. '/cache' }, timeout = 400,
    args = BERT:gsub('%-%-steps 8', '--steps 1') .. ' --eval-data none' }
  T.eq(code, 0, 'the job failed:\n' .. out)
  T.eq(count(out, 'bert_prep: WordNet corpus'), 1, 'the corpus written once:\n' .. out)
  T.eq(count(out, 'bert_prep: train shards'), 1, out)
  T.ok(not out:find('node-local', 1, true), out)
end)

-- The step-4 checkpoint alone in a folder of its own (`latest` names it), resumed by `how`.
local function resume(name, runner)
  local dir = D .. '/resume-' .. name
  os.execute(string.format('mkdir -p %s && cp -r %s %s/ && echo epoch0-step4 > %s/latest', q(dir), q(D .. '/bert-ck/epoch0-step4'),
    q(dir), q(dir)))
  local out, code = runner(BERT .. ' --resume --checkpoint-dir ' .. q(dir) .. ' --log-dir ' .. q(dir .. '/log'))
  T.eq(code, 0, name .. ': the resumed run failed:\n' .. out)
  T.ok(out:find('resumed at step 4', 1, true), out)
  return { train = metrics(dir .. '/log/metrics.jsonl', 'train'), eval = metrics(dir .. '/log/metrics.jsonl', 'eval') }, out
end

local function env_cache(s) return 'env V100LUA_CACHE=' .. q(D .. '/cache') .. ' ' .. s end

T.test('the 4-rank checkpoint resumed by 4 ranks over 2 hosts: the same losses, exactly', function()
  T.ok(ref, 'needs the first test')
  local got = resume('4x2', function(args)
    return mn.mpirun{ np = 4, env = { V100LUA_CACHE = D .. '/cache' }, args = args, timeout = 300 }
  end)
  T.eq(#got.train, 4)
  for i, r in ipairs(got.train) do
    T.eq(r.step, ref.train[4 + i].step)
    T.eq(r.loss, ref.train[4 + i].loss, 'loss at step ' .. r.step)
  end
  T.eq(got.eval[1].step, 4)
  T.eq(got.eval[1].mlm_loss, ref.eval[2].mlm_loss, 'the held-out loss of the checkpoint')
end)

for _, case in ipairs {
  { name = '1 rank', run = function(args) return mn.sh(env_cache(q(mn.exe) .. ' ' .. args)) end },
  { name = '2 ranks on host ' .. a, run = function(args)
    return mn.mpirun{ np = 2, H = a .. ':2', env = { V100LUA_CACHE = D .. '/cache' }, args = args, timeout = 300 }
  end },
} do
  T.test('the 4-rank checkpoint resumed by ' .. case.name .. ': the same weights, the steps after within 0.5%', function()
    T.ok(ref, 'needs the first test')
    local got, out = resume(case.name:gsub('%W', ''), case.run)
    T.eq(#got.train, 4)
    T.eq(got.eval[1].step, 4)
    T.near(got.eval[1].mlm_loss, ref.eval[2].mlm_loss, 1e-5, 'the held-out loss of the checkpoint:\n' .. out)
    local worst = 0
    for i, r in ipairs(got.train) do
      T.eq(r.step, ref.train[4 + i].step)
      worst = math.max(worst, math.abs(r.loss - ref.train[4 + i].loss) / ref.train[4 + i].loss)
    end
    T.ok(worst < 5e-3, string.format('%s: losses of steps 5-8 within %.2g of the 4-rank run', case.name, worst))
    print(string.format('      resumed by %s: held-out loss %.6f (4 ranks: %.6f); steps 5-8 loss, worst relative difference %.2g',
      case.name, got.eval[1].mlm_loss, ref.eval[2].mlm_loss, worst))
  end)
end

local RESNET = '--epochs 1 --train-subset 256 --val-subset 200 --batch-size 8 --log-interval 1 --seed 4'
local acc4

T.test('resnet50.lua, 4 ranks over 2 hosts: the global batch split, metrics once, a checkpoint', function()
  local out, code, secs = mn.mpirun{ np = 4, timeout = 400, args = 'recipes/resnet50.lua ' .. RESNET ..
    ' --log-dir ' .. q(D .. '/rn-log') .. ' --checkpoint-dir ' .. q(D .. '/rn-ck') }
  T.eq(code, 0, 'the job failed:\n' .. out)
  T.ok(out:find('4 ranks', 1, true), out)
  T.ok(out:find('1 epochs x 8 steps', 1, true), '256 images / (8 x 4) = 8 steps:\n' .. out)
  T.eq(count(out, '\ntest accuracy: '), 1, 'rank 0 alone prints the result')
  T.eq(#metrics(D .. '/rn-log/metrics.jsonl', 'train'), 8, 'one train record per step, written once')
  acc4 = out:match('\ntest accuracy: (0%.%d+)')
  T.ok(acc4, out)
  print(string.format('      resnet50.lua 4 ranks / 2 hosts, 8 steps + evaluation: %.1f s', secs))
end)

T.test('its checkpoint: evaluated by 1 rank (the same top-1), trained on by 2 ranks on host ' .. a, function()
  local out, ok = T.run_binary('recipes/resnet50.lua --val-subset 200 --evaluate --resume --checkpoint-dir ' .. q(D .. '/rn-ck'))
  T.ok(ok, out)
  T.eq(out:match('\ntest accuracy: (0%.%d+)'), acc4, 'the same weights, the same 200 images:\n' .. out)
  local out2, code = mn.mpirun{ np = 2, H = a .. ':2', timeout = 400, args = 'recipes/resnet50.lua ' ..
    RESNET:gsub('%-%-epochs 1', '--epochs 2'):gsub('%-%-batch%-size 8', '--batch-size 16') .. ' --resume --checkpoint-dir ' ..
    q(D .. '/rn-ck') .. ' --log-dir ' .. q(D .. '/rn-log2') }
  T.eq(code, 0, out2)
  T.ok(out2:find('resumed at epoch 2 batch 0', 1, true), out2)
  T.eq(metrics(D .. '/rn-log2/metrics.jsonl', 'train')[1].step, 9, 'the step count goes on from the checkpoint')
end)

T.run()
os.execute('rm -rf ' .. q(D))
