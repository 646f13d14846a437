#!/usr/bin/env bash
# llama.cpp as the oracle of specdec's forward (not run in CI): the logits of every position of a few prompts from
# llama.cpp (llama-cpp-python) and from specdec's packed CPU forward on the same GGUF file and token ids; prints per model
# the top-1 agreement, the max / mean |logit difference| and the mean KL divergence (scripts/oracle_logits.py). See
# docs/models.md ("The logit oracle").
#
#   scripts/oracle-logits.sh [--model GGUF]... [--text PROMPT]... [--quantize TYPE,...] [--source GGUF] [--reference]
#                            [--build DIR] [--work DIR] [--json FILE]
#
# Without --model or --quantize: the small random-weight models of tests/models/write_gguf_models.py (llama, qwen2,
# qwen3, gemma3 with sliding layers and head_dim 256, gemma3 with a logit soft-cap), written into out/oracle-logits/models,
# on seeded random token ids. With real files: text prompts (--text, else the five of scripts/validate_model.py)
# tokenized by llama.cpp. --quantize: requantise --source (default: the bundled SmolLM2 Q4_1) into each llama.cpp file
# type (Q4_0, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, F16, BF16, ...) with llama.cpp's own
# quantiser first, into --work (default out/oracle-logits/requant). --reference (llama files): also a float32 NumPy
# forward of the same weights, and specdec with one activation plane beside two (the activation-precision comparison).
# SPECDEC_ACTIVATION_BITS and SPECDEC_KV_CACHE set specdec's options. llama.cpp comes from .deps/llama-venv
# (scripts/llama-venv.sh); specdec-logits-tool is built in --build (default build/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "oracle-logits: error: $*" >&2; exit 1; }

models=()
texts=()
args=()
build="$root/build"
json="$root/out/oracle-logits/results.json"
work="$root/out/oracle-logits/requant"
source="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
quantize=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) models+=("$(realpath -m -- "${2:?--model needs a GGUF file}")"); shift 2 ;;
    --text) texts+=("${2:?--text needs a prompt}"); shift 2 ;;
    --quantize) quantize="${2:?--quantize needs a list of llama.cpp file types}"; shift 2 ;;
    --source) source="$(realpath -m -- "${2:?--source needs a GGUF file}")"; shift 2 ;;
    --reference) args+=(--reference); shift ;;
    --build) build="$(realpath -m -- "${2:?--build needs a directory}")"; shift 2 ;;
    --work) work="$(realpath -m -- "${2:?--work needs a directory}")"; shift 2 ;;
    --json) json="$(realpath -m -- "${2:?--json needs a file}")"; shift 2 ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
for m in "${models[@]}"; do [[ -f "$m" ]] || die "--model: '$m' not found"; done
if [[ -n "$quantize" ]]; then
  [[ -f "$source" ]] || "$root/scripts/fetch-model.sh" >&2
  [[ -f "$source" ]] || die "--source: '$source' not found"
  args+=(--quantize "$quantize" --source "$source" --work "$work")
fi

py="$("$root/scripts/llama-venv.sh")"
[[ -f "$build/CMakeCache.txt" ]] || die "--build: '$build' is not a configured build directory (run scripts/build.sh)"
nice -n 5 cmake --build "$build" --target specdec-logits-tool >&2
tool="$build/bin/specdec-logits-tool"
[[ -x "$tool" ]] || tool="$(find "$build" -name specdec-logits-tool -type f -perm -u+x | head -n 1)"
[[ -x "$tool" ]] || die "specdec-logits-tool was not built in '$build'"

if [[ ${#models[@]} -eq 0 && -z "$quantize" ]]; then
  dir="$root/out/oracle-logits/models"
  "$py" "$root/tests/models/write_gguf_models.py" "$dir" >&2
  models=("$dir"/*-model.gguf)
else
  if [[ ${#texts[@]} -eq 0 ]]; then  # validate_model.py's prompts, "\n" written as two characters there
    mapfile -t texts < <("$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); from validate_model import PROMPTS
for p in PROMPTS: print(p)' "$root/scripts")
    for i in "${!texts[@]}"; do texts[$i]="${texts[$i]//\\n/$'\n'}"; done
  fi
  for t in "${texts[@]}"; do args+=(--text "$t"); done
fi
"$py" "$root/scripts/oracle_logits.py" --tool "$tool" --json "$json" "${args[@]}" "${models[@]}" \
  2> >(grep -v '^llama_\|^load\|^print_info\|^\.*$' >&2)
