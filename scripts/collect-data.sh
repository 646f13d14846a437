#!/usr/bin/env bash
# The self-distilled training set for the bundled target (models/TRAINING.md, "The collection"): specdec-train data over
# the package corpus (scripts/fetch-corpus.sh) at temperatures 0 / 0.7 / 1 with a 2% held-out split, at nice 10.
# Rerunning the same command resumes: it appends to the same files and skips the prompts already answered.
#   [SPECDEC_DATA_MINUTES=M] [SPECDEC_DATA_SEED=S] scripts/collect-data.sh OUT_DIR [BUILD_DIR] [extra specdec-train data flags...]
# SPECDEC_DATA_MINUTES: stop starting new prompts after M minutes (default: run through the whole prompt list).
# SPECDEC_DATA_SEED: the prompts' and the sampling's seed (default 11, the collection's; 12 made the second set).
# Progress: tail -2 OUT_DIR/log.txt, or BUILD_DIR/bin/specdec-train data --out OUT_DIR/train.bin --holdout-out
# OUT_DIR/heldout.bin --scan.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: scripts/collect-data.sh OUT_DIR [BUILD_DIR] [flags...]}"
build="${2:-$root/build}"
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
bin="$(cd "$build" && pwd)/bin/specdec-train"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
cd "$out"
exec nice -n 10 "$bin" --model "$model" --threads 2 data \
  --out train.bin --holdout-out heldout.bin --holdout-fraction 0.02 --append \
  --num-prompts 60000 --self-instruct 0.05 --self-instruct-tokens 48 \
  --temperatures 0:0.4,0.7:0.3,1:0.3 --batch 32 --max-new-tokens 256 --max-prompt-tokens 384 \
  --minutes "${SPECDEC_DATA_MINUTES:-100000}" --seed "${SPECDEC_DATA_SEED:-11}" --report "$@" >> log.txt 2>&1
