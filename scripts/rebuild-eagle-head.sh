#!/usr/bin/env bash
# Rebuilds the bundled EAGLE head (models/smollm2-135m-eagle) from scratch: the self-distilled training set
# (scripts/collect-data.sh: the package corpus at temperatures 0 / 0.7 / 1, 2% held out), then `specdec-train eagle` with
# the committed head's flags (bfloat16, 1.5 passes), a learning curve on the held-out split every 500 steps, and a head
# saved at each point. Every stage resumes when the same command is run again (the data appends and skips answered
# prompts; the trainer restarts from WORK_DIR/eagle-state and keeps its schedule). Prints each stage's wall time.
#
#   scripts/rebuild-eagle-head.sh WORK_DIR [--build DIR] [--data-minutes M] [--train-minutes M] [--install]
#
# --data-minutes: generation budget (default 200: the committed head's set, 16,270 records and 3.0M tokens, took
#   several sittings of the shared 2-core machine at 230-430 target tokens/s; generation stops starting prompts after
#   M minutes, so another machine gets more or fewer records of the same recipe). --train-minutes: this call's training time
#   (default 120; the schedule is 1.5 passes whatever the sittings, about 60 minutes on the idle 2-core machine for
#   3.0M tokens: rerun to continue when a sitting ends first).
# --install copies the trained head to models/smollm2-135m-eagle. Needs scripts/fetch-corpus.sh once (root) for the
# package texts; without them the corpus is the Python sources alone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/rebuild-common.sh"
rebuild_parse rebuild-eagle-head.sh 120 "$@"
t0=$(date +%s)

echo "rebuild-eagle-head: 1/2 training set in $work/data (log: $work/data/log.txt)"
rebuild_training_set rebuild-eagle-head.sh
t1=$(date +%s)
echo "rebuild-eagle-head: training set done in $(( (t1 - t0) / 60 )) min"

echo "rebuild-eagle-head: 2/2 EAGLE-1 head in $work/head (log: $work/train-log.txt)"
nice -n 5 "$bin" --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" --threads 2 eagle \
  --data "$work/data/train.bin" --holdout-data "$work/data/heldout.bin" --holdout-records 120 \
  --out "$work/head" --checkpoint "$work/eagle-state" --snapshots "$work/snapshots" --eval-every 500 \
  --minutes 100000 --sitting-minutes "$train_minutes" --epochs 1.5 --tokens-per-step 2048 --lr 2e-3 --warmup 20 \
  --ce-fraction 1.0 --draft-vocab 8192 --ttt-steps 3 --checkpoint-every 100 --bf16 >> "$work/train-log.txt" 2>&1 || {
  echo "rebuild-eagle-head.sh: training failed; see $work/train-log.txt" >&2; exit 1; }
t2=$(date +%s)
grep -E "held-out|done" "$work/train-log.txt" | tail -4
echo "rebuild-eagle-head: head trained in $(( (t2 - t1) / 60 )) min; total $(( (t2 - t0) / 60 )) min"
if [[ "$install" == 1 ]]; then
  cp "$work/head/config.json" "$work/head/model.safetensors" "$root/models/smollm2-135m-eagle/"
  echo "rebuild-eagle-head: installed in models/smollm2-135m-eagle"
fi
