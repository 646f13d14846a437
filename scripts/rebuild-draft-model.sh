#!/usr/bin/env bash
# Rebuilds the bundled draft model (models/smollm2-135m-draft) from scratch: the self-distilled training set of seed
# 12 (scripts/collect-data.sh with SPECDEC_DATA_SEED=12, in WORK_DIR/data-12; reused when it is there), then
# `specdec-train draft` with the committed model's flags (hidden 160, 3 layers, an 8192-token output vocabulary,
# bfloat16, one pass over the set's first 19,993 records: 3.91M tokens). Each stage resumes when the same command is
# run again (the data appends and skips answered prompts; the trainer restarts from WORK_DIR/draft-state and keeps its
# schedule). Prints each stage's wall time.
#
#   scripts/rebuild-draft-model.sh WORK_DIR [--build DIR] [--data-minutes M] [--train-minutes M] [--install]
#
# --data-minutes: generation budget (default 200; the committed set's 19,993 records took about 40 minutes of the
# generator on the idle 2-core machine; the trainer reads the first 19,993 records of whatever the set holds).
# --train-minutes: this call's training time (default 60; the pass took 12.4 minutes).
# --install copies the trained model to models/smollm2-135m-draft.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/rebuild-common.sh"
rebuild_parse rebuild-draft-model.sh 60 "$@"
t0=$(date +%s)

data="$work/data-12"
if [[ -f "$data/train.bin" ]]; then
  echo "rebuild-draft-model: 1/2 reusing the training set $data/train.bin"
else
  echo "rebuild-draft-model: 1/2 training set in $data (log: $data/log.txt)"
  rebuild_training_set rebuild-draft-model.sh 12 "$data"
fi
t1=$(date +%s)
echo "rebuild-draft-model: training set ready in $(( (t1 - t0) / 60 )) min"

echo "rebuild-draft-model: 2/2 draft model in $work/draft (log: $work/draft-log.txt)"
rebuild_train rebuild-draft-model.sh "$work/draft-log.txt" "$bin" --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --threads 2 draft --data "$data/train.bin" --records 19993 --out "$work/draft" --checkpoint "$work/draft-state" \
  --minutes 100000 --sitting-minutes "$train_minutes" --epochs 1 --tokens-per-step 2048 --lr 2e-3 --warmup 20 \
  --hidden 160 --layers 3 --heads 5 --kv-heads 5 --intermediate 640 --draft-vocab 8192 --checkpoint-every 100 --bf16
t2=$(date +%s)
grep -E "done" "$work/draft-log.txt" | tail -1
echo "rebuild-draft-model: model trained in $(( (t2 - t1) / 60 )) min; total $(( (t2 - t0) / 60 )) min"
rebuild_install rebuild-draft-model "$work/draft" smollm2-135m-draft
