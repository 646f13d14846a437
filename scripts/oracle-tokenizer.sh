#!/usr/bin/env bash
# llama.cpp as the oracle of specdec's tokenizers (not run in CI): token ids of llama.cpp's tokenizer and specdec's over an
# offline text corpus (the repository, /usr/share/doc, Python's docstrings, seeded random strings and bytes), for SmolLM2
# (byte-level BPE) and Gemma 3 270M (SentencePiece). They must match exactly; prints a table per model and every mismatch it
# shows, exits 1 on any mismatch. See docs/models.md.
#
#   scripts/oracle-tokenizer.sh [--model GGUF]... [--build DIR] [--max-per-source N] [--json-dir DIR]
#
# Without --model: both models (Gemma is fetched by scripts/fetch-gemma.sh when missing). llama.cpp comes from PyPI's
# llama-cpp-python, built from source into the git-ignored virtualenv .deps/llama-venv (the one bench/compare-llama-cpp.sh
# uses), reused when `import llama_cpp` works there. specdec_tokenize_tool is built in --build (default build/; a torch-free
# build in build-io/ when build/ is not configured).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "oracle-tokenizer: error: $*" >&2; exit 1; }

models=()
build="$root/build"
max_per_source=4000
json_dir="$root/out/oracle-tokenizer"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) models+=("$(realpath -m -- "${2:?--model needs a GGUF file}")"); shift 2 ;;
    --build) build="$(realpath -m -- "${2:?--build needs a directory}")"; shift 2 ;;
    --max-per-source) max_per_source="${2:?--max-per-source needs a value}"; shift 2 ;;
    --json-dir) json_dir="$(realpath -m -- "${2:?--json-dir needs a directory}")"; shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$max_per_source" =~ ^[1-9][0-9]*$ ]] || die "--max-per-source: expected a positive integer, got '$max_per_source'"
if [[ ${#models[@]} -eq 0 ]]; then
  smol="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
  [[ -f "$smol" ]] || "$root/scripts/fetch-model.sh" >&2
  models=("$smol" "$("$root/scripts/fetch-gemma.sh" --print-path)")
fi
for m in "${models[@]}"; do [[ -f "$m" ]] || die "--model: '$m' not found"; done

# --- llama.cpp: the virtualenv shared with bench/compare-llama-cpp.sh and scripts/oracle-logits.sh ---------------------------
py="$("$root/scripts/llama-venv.sh")"

# --- specdec's tool ------------------------------------------------------------------------------------------------------
if [[ ! -f "$build/build.ninja" ]]; then
  build="$root/build-io"
  [[ -f "$build/build.ninja" ]] ||
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WITH_TORCH=OFF -DSPECDEC_WITH_CUDA=OFF \
      -DSPECDEC_BUILD_BENCH=OFF -DSPECDEC_BUILD_EXAMPLES=OFF >/dev/null
fi
cmake --build "$build" --target specdec_tokenize_tool >/dev/null
tool="$build/bin/specdec_tokenize_tool"

status=0
for m in "${models[@]}"; do
  echo "oracle-tokenizer: $(basename "$m")" >&2
  "$py" "$root/scripts/oracle_tokenizer.py" --model "$m" --tool "$tool" --repo "$root" --max-per-source "$max_per_source" \
    --json "$json_dir/$(basename "$m" .gguf).json" || status=1
done
exit $status
