# Shared by scripts/rebuild-eagle-head.sh and scripts/rebuild-draft-model.sh (sourced, not run): their arguments and
# the self-distilled training set both build on.

# rebuild_parse NAME TRAIN_MINUTES_DEFAULT "$@": sets root, work (absolute, created), build, data_minutes,
# train_minutes, install and bin (the build's specdec-train), or exits with a message naming the argument.
rebuild_parse() {
  local name="$1" usage="scripts/$1 WORK_DIR [--build DIR] [--data-minutes M] [--train-minutes M] [--install]"
  train_minutes="$2"
  shift 2
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  work="${1:?usage: $usage}"
  shift
  build="$root/build"
  data_minutes=200
  install=0
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --build) build="$2"; shift 2 ;;
      --data-minutes) data_minutes="$2"; shift 2 ;;
      --train-minutes) train_minutes="$2"; shift 2 ;;
      --install) install=1; shift ;;
      *) echo "$name: unknown argument '$1'" >&2; exit 2 ;;
    esac
  done
  [[ -d "$build" ]] || { echo "$name: --build: '$build' is not a directory" >&2; exit 2; }
  bin="$(cd "$build" && pwd)/bin/specdec-train"
  [[ -x "$bin" ]] || { echo "$name: --build: '$bin' is not built (scripts/build.sh)" >&2; exit 1; }
  mkdir -p "$work"
  work="$(cd "$work" && pwd)"
}

# rebuild_training_set NAME [SEED [DIR]]: the collection (scripts/collect-data.sh, resumable; seed 11 unless given) into
# DIR (default $work/data), then its scan.
rebuild_training_set() {
  local dir="${3:-$work/data}"
  SPECDEC_DATA_MINUTES="$data_minutes" SPECDEC_DATA_SEED="${2:-11}" "$root/scripts/collect-data.sh" "$dir" "$build" || {
    echo "$1: data generation failed; see $dir/log.txt" >&2; exit 1; }
  "$bin" data --out "$dir/train.bin" --holdout-out "$dir/heldout.bin" --scan
}

# rebuild_train NAME LOG COMMAND...: runs one resumable training call at nice 5, its output appended to LOG; exits 1
# when it fails, and 3 (rerun to continue) when it stopped at the end of its sitting before its schedule did, so that
# an unfinished checkpoint is never taken for the result.
rebuild_train() {
  local name="$1" log="$2"
  shift 2
  nice -n 5 "$@" >> "$log" 2>&1 || { echo "$name: training failed; see $log" >&2; exit 1; }
  if tail -n 1 "$log" | grep -q "sitting ended before the schedule"; then
    echo "$name: the training sitting ended before its schedule; rerun the same command to continue" >&2
    exit 3
  fi
}

# rebuild_install NAME FROM_DIR MODEL_DIR: with --install, copies the trained checkpoint into models/MODEL_DIR.
rebuild_install() {
  [[ "$install" == 1 ]] || return 0
  cp "$2/config.json" "$2/model.safetensors" "$root/models/$3/"
  echo "$1: installed in models/$3"
}
