-- tests/lua/recipe_bert.lua: recipes/bert.lua and recipes/bert_classify.lua run as a user runs
-- them, on the CPU (label `recipe`: minutes, left out of the sanitizer suite), on a slice of the
-- WordNet corpus made with the tools a user with their own text would use:
--   1. tools/wordnet_corpus.lua -> tools/build_vocab.lua -> tools/make_bert_shards.lua, then a tiny
--      BERT pretrains from those shards: the training loss and the held-out MLM loss fall by the
--      margins below, and metrics.jsonl / TensorBoard hold the curve;
--   2. SIGKILL in the middle of a run, then --resume: the loss curve continues exactly as the
--      uninterrupted run's (same steps, same numbers);
--   3. a checkpoint folder loads in transformers with the same outputs within 1e-5 (where
--      $V100_PYTHON can import torch and transformers; skipped with a message otherwise);
--   4. bert_classify.lua fine-tunes that checkpoint's weights, and its bag-of-words baseline beats
--      the majority class;
--   5. bad command lines end with a clear message.
local T = require 'testlib'
local v100 = require 'v100'

local wn_ok = io.open((os.getenv('WORDNET_ROOT') or '/usr/share/wordnet') .. '/data.noun', 'rb')
if wn_ok then wn_ok:close() else
  print('no WordNet (wordnet-base): recipe_bert skipped')
  T.run()
  return
end

-- Measured on the 2-core build machine (2026-12-02), 160 steps in 76 s: training loss 8.31 (the
-- first 5 steps) -> 7.01 (the last 5), held-out MLM loss 7.64 before training -> 6.51.
local LOSS_DROP = 1.0      -- training loss (MLM + NSP), first logged interval -> last
local EVAL_DROP = 0.8      -- held-out MLM loss, before training -> the last evaluation

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end
local function run(args) return T.run_binary(args) end
local function metrics(path, split)
  local out = {}
  local ok, text = pcall(T.read_file, path)
  for line in ((ok and text) or ''):gmatch('[^\n]+') do
    local r = v100.io.json_decode(line)
    if not split or r.split == split then out[#out + 1] = r end
  end
  return out
end

local D = T.tmpdir()
local DATA, EVAL = D .. '/shards', D .. '/eval'
-- A tiny BERT on sequences of 64 with up to 10 predictions.
local PRE = '--config tiny --batch-size 32 --lr 1e-2 --warmup 0.1 --log-interval 5 --eval-every 40 --eval-samples 256 --seed 2'

T.test('the data tools, then pretraining from shards: the training and held-out MLM losses fall', function()
  local out, ok = run('tools/wordnet_corpus.lua --output ' .. q(D .. '/wn'))
  T.ok(ok, 'wordnet_corpus failed:\n' .. out)
  -- a slice: the first 12000 lines of the corpus for training, the next 3000 held out
  local lines = {}
  for l in T.read_file(D .. '/wn/corpus.txt'):gmatch('([^\n]*)\n') do lines[#lines + 1] = l end
  T.ok(#lines > 20000, 'corpus lines: ' .. #lines)
  T.write_file(D .. '/train.txt', table.concat(lines, '\n', 1, 12000) .. '\n')
  T.write_file(D .. '/heldout.txt', table.concat(lines, '\n', 12001, 15000) .. '\n')
  out, ok = run('tools/build_vocab.lua --input ' .. q(D .. '/train.txt') .. ' --output ' .. q(DATA .. '/vocab.txt') ..
    ' --vocab-size 2000')
  T.ok(ok, 'build_vocab failed:\n' .. out)
  for _, s in ipairs { { D .. '/train.txt', DATA, 2 }, { D .. '/heldout.txt', EVAL, 1 } } do
    out, ok = run(string.format('tools/make_bert_shards.lua --input %s --vocab %s --output %s --seq-len 64 ' ..
      '--max-predictions 10 --dupe-factor %d', q(s[1]), q(DATA .. '/vocab.txt'), q(s[2]), s[3]))
    T.ok(ok, 'make_bert_shards failed:\n' .. out)
  end
  local t0 = v100.io.time()
  out, ok = run(string.format('recipes/bert.lua --data %s --eval-data %s %s --steps 160 --log-dir %s --output %s',
    q(DATA), q(EVAL), PRE, q(D .. '/log'), q(D .. '/model')))
  local secs = v100.io.time() - t0
  T.ok(ok, 'pretraining failed:\n' .. out)
  T.ok(out:find('(2 layers, hidden 128, 2 heads, vocab 2000)', 1, true), out)
  local first, final = tonumber(out:match('\nfirst loss: ([%d.]+)')), tonumber(out:match('\nfinal loss: ([%d.]+)'))
  T.ok(first and final, 'no first/final loss lines:\n' .. out)
  local evals = {}
  for l in out:gmatch('eval step %d+: %d+ held%-out sequences  mlm loss ([%d.]+)') do evals[#evals + 1] = tonumber(l) end
  T.eq(#evals, 5, 'evaluations at steps 0 (the initial model), 40, 80, 120, 160')
  T.ok(first - final >= LOSS_DROP, string.format('training loss %.4f -> %.4f, less than %.1f lower:\n%s', first, final,
    LOSS_DROP, out))
  T.ok(evals[1] - evals[#evals] >= EVAL_DROP, string.format('held-out MLM loss %.4f -> %.4f, less than %.1f lower',
    evals[1], evals[#evals], EVAL_DROP))
  local tr = metrics(D .. '/log/metrics.jsonl', 'train')
  T.eq(#tr, 32, 'one train record every 5 steps')
  T.near(tr[#tr].loss, final, 1e-4, 'metrics.jsonl has the printed loss')
  T.eq(#metrics(D .. '/log/metrics.jsonl', 'eval'), 5)
  for _, f in ipairs { 'config.json', 'model.safetensors', 'vocab.txt' } do
    T.ok(io.open(D .. '/model/' .. f, 'rb'), '--output wrote ' .. f)
  end
  print(string.format('  pretraining: loss %.4f -> %.4f, held-out MLM loss %.4f -> %.4f, %.0f s', first, final, evals[1],
    evals[#evals], secs))
end)

T.test('SIGKILL mid-run, then --resume: the same loss curve as an uninterrupted run', function()
  local d = T.tmpdir()
  local args = string.format('recipes/bert.lua --data %s %s --steps 24 --log-interval 1 --eval-every 1000 --checkpoint-every 6',
    q(DATA), PRE)
  local out, ok = run(args .. ' --log-dir ' .. q(d .. '/ref') .. ' --checkpoint-dir ' .. q(d .. '/refck'))
  T.ok(ok, 'reference run failed:\n' .. out)
  local ref = metrics(d .. '/ref/metrics.jsonl', 'train')
  T.eq(#ref, 24)
  local said = T.kill_after(args .. ' --log-dir ' .. q(d .. '/a') .. ' --checkpoint-dir ' .. q(d .. '/ck'), d .. '/a.out',
    d .. '/a/metrics.jsonl', 15)
  T.ok(said:find('killed at', 1, true), 'the run was not killed mid-way: ' .. said)
  out, ok = run(args .. ' --resume --log-dir ' .. q(d .. '/b') .. ' --checkpoint-dir ' .. q(d .. '/ck'))
  T.ok(ok, 'resumed run failed:\n' .. out)
  -- from the last complete checkpoint before the kill: step 12 (or 18 if the kill came late)
  local at = tonumber(out:match('resumed at step (%d+)'))
  T.ok(at == 12 or at == 18, 'resumed from the step-12 checkpoint:\n' .. out)
  local b = metrics(d .. '/b/metrics.jsonl', 'train')
  T.eq(#b, 24 - at, 'the remaining steps logged by the resumed run')
  for i, r in ipairs(b) do
    local want = ref[at + i]
    T.eq(r.step, want.step)
    T.eq(r.loss, want.loss, 'loss at step ' .. r.step)
    T.eq(r.mlm_acc, want.mlm_acc, 'MLM accuracy at step ' .. r.step)
  end
  -- the final checkpoints hold the same weights
  local ck = require 'v100.checkpoint'
  local x, y = ck.load(d .. '/refck'), ck.load(d .. '/ck')
  T.eq(x.step, 24)
  T.eq(y.step, 24)
  for k, t in pairs(x.model) do T.tensor_eq(y.model[k], t, k) end
end)

T.test('a checkpoint folder loads in transformers with the same outputs (tools/bert_io.lua + check_hf_bert.py)', function()
  local d = T.tmpdir()
  local out, ok = run(string.format('recipes/bert.lua --data %s %s --steps 3 --checkpoint-dir %s', q(DATA), PRE, q(d)))
  T.ok(ok, out)
  local latest = require('v100.checkpoint').latest(d)
  T.ok(latest, 'a checkpoint')
  for _, f in ipairs { 'config.json', 'vocab.txt', 'model.safetensors' } do T.ok(io.open(latest .. '/' .. f, 'rb'), f) end
  -- our own loader reads the checkpoint folder as a Hugging Face one
  out, ok = run(string.format('tools/bert_io.lua %s %s', q(latest), q(d .. '/io.safetensors')))
  T.ok(ok, 'bert_io failed:\n' .. out)
  local py = os.getenv('V100_PYTHON') or 'python3'
  if not os.execute(py .. ' -c "import torch, transformers, safetensors" >/dev/null 2>&1') then
    return print(string.format('  skip the transformers half: %s cannot import torch, transformers, safetensors (set V100_PYTHON)', py))
  end
  local p = assert(io.popen(string.format('%s tools/check_hf_bert.py %s %s 2>&1', py, q(latest), q(d .. '/io.safetensors'))))
  out = p:read('a')
  ok = p:close()
  io.write(out)
  T.ok(ok, 'tools/check_hf_bert.py failed')
  T.ok(out:find('prediction_logits: max |diff|', 1, true), out)
end)

T.test('bert_classify: fine-tunes the pretrained folder; the bag-of-words baseline beats the majority class', function()
  local out, ok = run(string.format('recipes/bert_classify.lua --pretrained %s --train-subset 3200 --eval-subset 1000 ' ..
    '--epochs 2 --batch-size 32', q(D .. '/model')))
  T.ok(ok, 'fine-tuning failed:\n' .. out)
  local acc, maj = tonumber(out:match('\ntest accuracy: ([%d.]+)')), tonumber(out:match('\nmajority class: ([%d.]+)'))
  T.ok(acc and maj, out)
  T.ok(out:find('45 classes', 1, true) and out:find('3200 train / 1000 val / 1000 test', 1, true), out)
  local l1, l2 = out:match('epoch 1/2  loss ([%d.]+)'), out:match('epoch 2/2  loss ([%d.]+)')
  T.ok(l1 and l2 and tonumber(l2) < tonumber(l1), 'the fine-tuning loss falls from epoch 1 to 2:\n' .. out)
  T.ok(acc >= maj - 0.02, string.format('fine-tuned %.4f far below the majority class %.4f', acc, maj))
  local bow, ok2 = run(string.format('recipes/bert_classify.lua --model bow --vocab %s --train-subset 20000 --eval-subset 2000 --epochs 3',
    q(DATA .. '/vocab.txt')))
  T.ok(ok2, 'bag of words failed:\n' .. bow)
  local bacc = tonumber(bow:match('\ntest accuracy: ([%d.]+)'))
  T.ok(bacc and bacc > maj + 0.1, string.format('bag of words %s, majority %.4f:\n%s', tostring(bacc), maj, bow))
  print(string.format('  fine-tuned %.4f, bag of words %.4f, majority %.4f', acc, bacc, maj))
end)

T.test('bad command lines: clear messages', function()
  local out, ok = run(string.format('recipes/bert.lua --data %s --batch-size 30 --micro-batch 8 --steps 1', q(DATA)))
  T.ok(not ok)
  T.ok(out:find("option '--batch-size' (30) must be a multiple of --micro-batch x ranks (8 x 1)", 1, true), out)
  out, ok = run('recipes/bert.lua --data ' .. q(D) .. ' --steps 1')
  T.ok(not ok)
  T.ok(out:find(D .. '/vocab.txt is missing', 1, true), out)
  out, ok = run('recipes/bert.lua --config huge --steps 1 --data ' .. q(DATA))
  T.ok(not ok)
  T.ok(out:find("option '--config': expected tiny, mini, small, medium, base, large or a config.json, got 'huge'", 1, true), out)
  out, ok = run('recipes/bert.lua --resume --data ' .. q(DATA))
  T.ok(not ok)
  T.ok(out:find("option '--resume' needs --checkpoint-dir", 1, true), out)
  out, ok = run('recipes/bert_classify.lua --pretrained ' .. q(D .. '/nothing'))
  T.ok(not ok)
  T.ok(out:find('nothing', 1, true), out)
end)

T.run()
