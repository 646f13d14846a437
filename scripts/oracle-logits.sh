#!/usr/bin/env bash
# llama.cpp as the oracle of specdec's forward (not run in CI): teacher-forced logits at every position of five prompts
# from llama.cpp and from specdec on the same GGUF and token ids; top-1 agreement, max/mean |difference| and KL divergence
# per file. See docs/models.md ("The logit oracle").
#
#   scripts/oracle-logits.sh [--model GGUF]... [--quantize TYPE,...] [--source GGUF] [--reference] [--build DIR]
#                            [--work DIR] [--json FILE]
#
# --quantize: requantise --source (default: the bundled SmolLM2 Q4_1) into each llama.cpp file type (Q4_0, Q4_1, Q5_0,
#   Q5_1, Q8_0, Q2_K, Q3_K_M, Q4_K_M, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, F16, BF16, ...) with llama.cpp's own quantiser first.
# --reference: also a float32 NumPy forward of the same weights (llama files), and specdec with one activation plane as
#   well as two: the activation-precision comparison.
# Without --model or --quantize: the bundled model. llama.cpp comes from .deps/llama-venv (scripts/llama-venv.sh);
# specdec-dump-logits is built in --build (default build/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "oracle-logits: error: $*" >&2; exit 1; }
args=()
build="$root/build"
work="$root/out/oracle-logits"
source="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
have_model=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) [[ -f "${2:-}" ]] || die "--model: '${2:-}' not found"; args+=(--model "$(realpath -- "$2")"); have_model=1; shift 2 ;;
    --quantize) args+=(--quantize "${2:?--quantize needs a list of types}"); have_model=1; shift 2 ;;
    --source) [[ -f "${2:-}" ]] || die "--source: '${2:-}' not found"; source="$(realpath -- "$2")"; shift 2 ;;
    --reference) args+=(--reference); shift ;;
    --build) build="$(realpath -m -- "${2:?--build needs a directory}")"; shift 2 ;;
    --work) work="$(realpath -m -- "${2:?--work needs a directory}")"; shift 2 ;;
    --json) args+=(--json "$(realpath -m -- "${2:?--json needs a file}")"); shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ -f "$source" ]] || "$root/scripts/fetch-model.sh" >&2
[[ $have_model -eq 1 ]] || args+=(--model "$source")
py="$("$root/scripts/llama-venv.sh")"
[[ -f "$build/build.ninja" ]] || die "--build: '$build' is not a configured build directory (run scripts/build.sh)"
cmake --build "$build" --target specdec-dump-logits >/dev/null
exec "$py" "$root/scripts/oracle_logits.py" --work "$work" --dump "$build/bin/specdec-dump-logits" --source "$source" \
  --threads "$(nproc)" "${args[@]}"
