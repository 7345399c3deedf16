#!/usr/bin/env bash
# tools/device-bert.sh: the BERT results of docs/BERT.md in one device call: BERT-Base pretraining
# on WordNet (recipes/bert.lua), then fine-tuning ours and transformers' from the same weights, one
# after the other, and the bag of words on the CPU meanwhile. GRAPH_TEST=1 runs gpu_graph.lua first.
# Usage on the device machine (binaries from tools/device-pack.sh; WordNet's data.* files in
# .dev/data/wordnet): PRE_ARGS='' EPOCHS=2 bash tools/device-bert.sh; logs packed in $OUT/logs.tgz.
# Environment: PRE_ARGS (recipes/bert.lua options), PRE_TMO, FT_TMO (s), BUDGET (s for the whole
# call: transformers' fine-tuning gets what is left of it), EPOCHS.
set -u
R=$(pwd); O=${OUT:-/tmp/out}; L=$O/logs; mkdir -p "$L"
export NCCL_NVLS_ENABLE=0
mkdir -p /work && { [ -e /work/main ] || ln -s "$R" /work/main; }
mkdir -p .dev/run
for z in .dev/bin/*.gz; do gzip -dc "$z" > ".dev/run/$(basename "$z" .gz)"; chmod +x ".dev/run/$(basename "$z" .gz)"; done
export LD_LIBRARY_PATH="$R/.dev/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
export WORDNET_ROOT="$R/.dev/data/wordnet" V100LUA_CACHE=/tmp/cache
V="$R/.dev/run/v100lua"
C=/tmp/cache/bert-wordnet-30522
M=$C/model-base-phase1
LEX=/tmp/lex
T0=$SECONDS
stamp() { echo "[$((SECONDS - T0))s] $*" | tee -a "$L/timeline.txt"; }
"$V" --version > "$L/versions.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >> "$L/versions.txt" 2>&1
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)' >> "$L/versions.txt" 2>&1
[ -n "${GRAPH_TEST:-}" ] && LUA_PATH="$R/tests/lua/?.lua;;" timeout 60 "$V" tests/lua/gpu_graph.lua > "$L/gpu_graph.log" 2>&1; echo "rc=$?" >> "$L/gpu_graph.log"
stamp "gpu_graph: $(grep -E '^[0-9]+ passed' "$L/gpu_graph.log") $(tail -1 "$L/gpu_graph.log")"
stamp "pretrain start: ${PRE_ARGS}"
( timeout "${PRE_TMO:-330}" "$V" recipes/bert.lua ${PRE_ARGS} --log-dir "$L/pretrain-logs" > "$L/pretrain.log" 2>&1; echo "rc=$?" >> "$L/pretrain.log" ) &
PP=$!
# The bag of words needs only the vocabulary: on the CPU while the GPU pretrains; it also exports the split.
(
  while ! grep -qE '^bert.lua: BertForPreTraining|^eval step' "$L/pretrain.log" 2>/dev/null; do sleep 2; [ -d /proc/$PP ] || break; done
  stamp "bow start"
  OPENBLAS_NUM_THREADS=6 timeout 400 "$V" recipes/bert_classify.lua --model bow --device cpu --vocab "$C/vocab.txt" \
    --batch-size 256 --epochs 5 --export "$LEX" > "$L/bow.log" 2>&1; echo "rc=$?" >> "$L/bow.log"
  stamp "bow done: $(grep '^test accuracy' "$L/bow.log")"
) &
BP=$!
wait $PP
stamp "pretrain done: $(tail -1 "$L/pretrain.log") $(grep -E '^final loss|^mlm accuracy' "$L/pretrain.log" | tr '\n' ' ')"
[ -f "$M/model.safetensors" ] || { stamp "no $M"; }
# wait for the export (written by the bow run before it trains)
for i in $(seq 60); do [ -f "$LEX/test.tsv" ] && break; sleep 1; done
stamp "finetune start (ours, then transformers)"
timeout "${FT_TMO:-250}" "$V" recipes/bert_classify.lua --epochs "${EPOCHS:-2}" > "$L/ft_ours.log" 2>&1; echo "rc=$?" >> "$L/ft_ours.log"
stamp "ours done: $(grep -E '^test accuracy' "$L/ft_ours.log")"
left=$(( ${BUDGET:-585} - (SECONDS - T0) ))
stamp "hf start, timeout ${left}s"
PYTHONUNBUFFERED=1 timeout "$left" python3 tools/hf_finetune_wordnet.py --pretrained "$M" --data "$LEX" --epochs "${EPOCHS:-2}" > "$L/ft_hf.log" 2>&1; echo "rc=$?" >> "$L/ft_hf.log"
stamp "hf done: $(grep -E '^test accuracy' "$L/ft_hf.log")"
wait $BP
cp "$M/config.json" "$L/" 2>/dev/null
stamp "all done"
tar -C "$O" -czf "$O/logs.tgz" logs && rm -rf "$L"
echo "== timeline"; tar -xzOf "$O/logs.tgz" logs/timeline.txt
echo "== pretrain"; tar -xzOf "$O/logs.tgz" logs/pretrain.log | grep -vE '^\s*$' | tail -40 | cut -c1-200
for f in bow ft_ours ft_hf; do echo "== $f"; tar -xzOf "$O/logs.tgz" logs/$f.log | tail -8 | cut -c1-250; done
