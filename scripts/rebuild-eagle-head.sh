#!/usr/bin/env bash
# Rebuilds the bundled EAGLE head (models/smollm2-135m-eagle) from scratch: the self-distilled training set
# (scripts/collect-data.sh: the package corpus at temperatures 0 / 0.7 / 1, 2% held out), then `specdec-train eagle` in
# the committed head's two stages: the fourth head's recipe on the set's first 16,270 records (3.0M tokens; bfloat16,
# 1.5 passes from 2e-3), then that head continued over the whole set (0.8 of a pass, a fresh cosine schedule from
# 1e-3). Each stage prints a learning curve on the held-out split every 500 steps and saves a head at each point. Every
# stage resumes when the same command is run again (the data appends and skips answered prompts; each training stage
# restarts from its state directory and keeps its schedule). Prints each stage's wall time.
#
#   scripts/rebuild-eagle-head.sh WORK_DIR [--build DIR] [--data-minutes M] [--train-minutes M] [--install]
#
# --data-minutes: generation budget (default 200; the committed head's set, 36,670 records and 8.0M tokens, is about
#   85 minutes of the generator on the idle 2-core machine at 1,600 target tokens/s, and took longer beside other jobs;
#   generation stops starting prompts after M minutes, so another machine gets more or fewer records of the same
#   recipe). --train-minutes: each training call's time (default 120; about 60 + 75 minutes on the idle 2-core
#   machine: rerun to continue when a sitting ends first).
# --install copies the trained head to models/smollm2-135m-eagle. Needs scripts/fetch-corpus.sh once (root) for the
# package texts; without them the corpus is the Python sources alone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/rebuild-common.sh"
rebuild_parse rebuild-eagle-head.sh 120 "$@"
t0=$(date +%s)

echo "rebuild-eagle-head: 1/3 training set in $work/data (log: $work/data/log.txt)"
rebuild_training_set rebuild-eagle-head.sh
t1=$(date +%s)
echo "rebuild-eagle-head: training set done in $(( (t1 - t0) / 60 )) min"

train() {  # train STAGE STATE_DIR OUT_DIR flags...: one resumable training stage
  local stage="$1" state="$2" out="$3"
  shift 3
  rebuild_train "rebuild-eagle-head.sh, stage $stage" "$work/train-log.txt" \
    "$bin" --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" --threads 2 eagle \
    --data "$work/data/train.bin" --holdout-data "$work/data/heldout.bin" --holdout-records 120 \
    --out "$out" --checkpoint "$state" --snapshots "$out-snapshots" --eval-every 500 \
    --minutes 100000 --sitting-minutes "$train_minutes" --tokens-per-step 2048 --warmup 20 \
    --ce-fraction 1.0 --ttt-steps 3 --checkpoint-every 100 --bf16 "$@"
}
echo "rebuild-eagle-head: 2/3 EAGLE-1 head on the first 16,270 records in $work/head-4 (log: $work/train-log.txt)"
train 2 "$work/eagle-state" "$work/head-4" --records 16270 --epochs 1.5 --lr 2e-3 --draft-vocab 8192
t2=$(date +%s)
echo "rebuild-eagle-head: stage 2 in $(( (t2 - t1) / 60 )) min"
echo "rebuild-eagle-head: 3/3 the same head continued over the whole set in $work/head"
train 3 "$work/eagle-state-2" "$work/head" --init "$work/head-4" --epochs 0.8 --lr 1e-3
t3=$(date +%s)
grep -E "held-out|done" "$work/train-log.txt" | tail -4
echo "rebuild-eagle-head: head trained in $(( (t3 - t1) / 60 )) min; total $(( (t3 - t0) / 60 )) min"
rebuild_install rebuild-eagle-head "$work/head" smollm2-135m-eagle
