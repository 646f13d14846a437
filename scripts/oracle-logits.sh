#!/usr/bin/env bash
# llama.cpp as the oracle of specdec's forward (not run in CI): the logits of every position of a few prompts from
# llama.cpp (llama-cpp-python) and from specdec's packed CPU forward on the same GGUF file; prints per model the top-1
# agreement and the max / mean |logit difference| (scripts/oracle_logits.py). See docs/models.md.
#
#   scripts/oracle-logits.sh [--model GGUF]... [--text PROMPT]... [--build DIR] [--json FILE]
#
# Without --model: the small random-weight models of tests/models/write_gguf_models.py (llama, qwen2, qwen3, gemma3 with
# sliding layers and head_dim 256, gemma3 with a logit soft-cap), written into out/oracle-logits/models, on seeded random
# token ids. With --model: those files on text prompts (--text, else three built-in ones) tokenized by llama.cpp.
# SPECDEC_ACTIVATION_BITS and SPECDEC_KV_CACHE set specdec's options. llama.cpp comes from the virtualenv .deps/llama-venv
# (scripts/oracle-tokenizer.sh installs it); specdec-logits-tool is built in --build (default build/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "oracle-logits: error: $*" >&2; exit 1; }

models=()
texts=()
build="$root/build"
json="$root/out/oracle-logits/results.json"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) models+=("$(realpath -m -- "${2:?--model needs a GGUF file}")"); shift 2 ;;
    --text) texts+=("${2:?--text needs a prompt}"); shift 2 ;;
    --build) build="$(realpath -m -- "${2:?--build needs a directory}")"; shift 2 ;;
    --json) json="$(realpath -m -- "${2:?--json needs a file}")"; shift 2 ;;
    -h|--help) sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for m in "${models[@]}"; do [[ -f "$m" ]] || die "--model: '$m' not found"; done

py="$root/.deps/llama-venv/bin/python"
[[ -x "$py" ]] && "$py" -c 'import llama_cpp, gguf' 2>/dev/null ||
  die "llama-cpp-python and gguf are not installed in .deps/llama-venv (scripts/oracle-tokenizer.sh installs them)"
[[ -f "$build/CMakeCache.txt" ]] || die "--build: '$build' is not a configured build directory"
nice -n 5 cmake --build "$build" --target specdec-logits-tool >&2
tool="$build/bin/specdec-logits-tool"
[[ -x "$tool" ]] || tool="$(find "$build" -name specdec-logits-tool -type f -perm -u+x | head -n 1)"
[[ -x "$tool" ]] || die "specdec-logits-tool was not built in '$build'"

args=()
if [[ ${#models[@]} -eq 0 ]]; then
  dir="$root/out/oracle-logits/models"
  "$py" "$root/tests/models/write_gguf_models.py" "$dir" >&2
  models=("$dir"/*-model.gguf)
else
  if [[ ${#texts[@]} -eq 0 ]]; then
    texts=("The capital of France is"
           $'def merge_sorted(left, right):\n    result = []\n    i = j = 0'
           "Speculative decoding drafts a few tokens ahead with a cheap proposer and lets the target model score all of them in one forward pass; the rejection sampler then keeps exactly the tokens the target would have produced.")
  fi
  for t in "${texts[@]}"; do args+=(--text "$t"); done
fi
"$py" "$root/scripts/oracle_logits.py" --tool "$tool" --json "$json" "${args[@]}" "${models[@]}" 2> >(grep -v '^llama_\|^load\|^print_info\|^\.*$' >&2)
