#!/usr/bin/env bash
# Rebuilds the bundled draft model (models/smollm2-135m-draft) from scratch: the self-distilled training set (the same
# one scripts/rebuild-eagle-head.sh builds in WORK_DIR/data; reused when it is there), then `specdec-train draft` with
# the committed model's flags (hidden 160, 3 layers, bfloat16, one pass over the set's first 16,270 records: 3.0M
# tokens). Each stage resumes when the same command is run
# again (the data appends and skips answered prompts; the trainer restarts from WORK_DIR/draft-state and keeps its
# schedule). Prints each stage's wall time.
#
#   scripts/rebuild-draft-model.sh WORK_DIR [--build DIR] [--data-minutes M] [--train-minutes M] [--install]
#
# --data-minutes: generation budget, as in rebuild-eagle-head.sh (default 200). --train-minutes: this call's training
# time (default 60; one pass over the committed set's 3.0M tokens took about 20 minutes on the idle 2-core machine).
# --install copies the trained model to models/smollm2-135m-draft.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/rebuild-common.sh"
rebuild_parse rebuild-draft-model.sh 60 "$@"
t0=$(date +%s)

if [[ -f "$work/data/train.bin" ]]; then
  echo "rebuild-draft-model: 1/2 reusing the training set $work/data/train.bin"
else
  echo "rebuild-draft-model: 1/2 training set in $work/data (log: $work/data/log.txt)"
  rebuild_training_set rebuild-draft-model.sh
fi
t1=$(date +%s)
echo "rebuild-draft-model: training set ready in $(( (t1 - t0) / 60 )) min"

echo "rebuild-draft-model: 2/2 draft model in $work/draft (log: $work/draft-log.txt)"
rebuild_train rebuild-draft-model.sh "$work/draft-log.txt" "$bin" --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
  --threads 2 draft --data "$work/data/train.bin" --records 16270 --out "$work/draft" --checkpoint "$work/draft-state" \
  --minutes 100000 --sitting-minutes "$train_minutes" --epochs 1 --tokens-per-step 2048 --lr 2e-3 --warmup 20 \
  --hidden 160 --layers 3 --heads 5 --kv-heads 5 --intermediate 640 --checkpoint-every 100 --bf16
t2=$(date +%s)
grep -E "done" "$work/draft-log.txt" | tail -1
echo "rebuild-draft-model: model trained in $(( (t2 - t1) / 60 )) min; total $(( (t2 - t0) / 60 )) min"
rebuild_install rebuild-draft-model "$work/draft" smollm2-135m-draft
