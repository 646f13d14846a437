#!/usr/bin/env bash
# Rebuilds the bundled corpus table (models/smollm2-135m-corpus.bin) from scratch: the self-distilled training set of
# seed 12 (scripts/collect-data.sh with SPECDEC_DATA_SEED=12, in WORK_DIR/data-12, shared with
# scripts/rebuild-draft-model.sh; reused when it is there), then `specdec-train corpus` over its first RECORDS records
# with the committed table's flags (context n-grams up to 8 tokens, kept when seen at least 4 times). No training: the
# table is counted in seconds. The data stage resumes when the same command is run again (it appends and skips answered
# prompts). Prints each stage's wall time.
#
#   scripts/rebuild-corpus-table.sh WORK_DIR [--build DIR] [--data-minutes M] [--install]
#
# --data-minutes: generation budget (default 200; the committed table's 41,446 records took about two hours of the
# generator on the 2-core machine, in three sittings, shared with other work part of the time). The table reads the first RECORDS records of
# whatever the set holds, so a longer collection gives the same table.
# --install copies the table to models/smollm2-135m-corpus.bin.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib/rebuild-common.sh"
rebuild_parse rebuild-corpus-table.sh 0 "$@"
records=41446
t0=$(date +%s)

data="$work/data-12"
if [[ -f "$data/train.bin" ]] && \
   (( $("$bin" data --out "$data/train.bin" --scan | sed -n 's/^[^:]*: \([0-9]*\) records.*/\1/p') >= records )); then
  echo "rebuild-corpus-table: 1/2 reusing the training set $data/train.bin"
else
  echo "rebuild-corpus-table: 1/2 training set in $data (log: $data/log.txt)"
  rebuild_training_set rebuild-corpus-table.sh 12 "$data"
fi
have=$("$bin" data --out "$data/train.bin" --scan | sed -n 's/^[^:]*: \([0-9]*\) records.*/\1/p')
if (( have < records )); then
  echo "rebuild-corpus-table: the set holds $have records, the table reads $records; rerun with a larger --data-minutes" >&2
  exit 3
fi
t1=$(date +%s)
echo "rebuild-corpus-table: training set ready in $(( (t1 - t0) / 60 )) min"

echo "rebuild-corpus-table: 2/2 table $work/corpus.bin"
"$bin" --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" corpus --data "$data/train.bin" --records "$records" \
  --max-n 8 --min-count 4 --out "$work/corpus.bin"
t2=$(date +%s)
echo "rebuild-corpus-table: table counted in $(( t2 - t1 )) s; total $(( (t2 - t0) / 60 )) min"
if [[ "$install" == 1 ]]; then
  cp "$work/corpus.bin" "$root/models/smollm2-135m-corpus.bin"
  echo "rebuild-corpus-table: installed as models/smollm2-135m-corpus.bin"
fi
