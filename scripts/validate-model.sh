#!/usr/bin/env bash
# Independent check of the Llama forward: a NumPy forward of the same GGUF (dequantised by the `gguf` package, llama.cpp's own
# interleaved RoPE) against specdec's logits. Not part of ctest (needs PyPI for the venv and ~1 minute).
#   scripts/validate-model.sh [MODEL.gguf]
# Environment: SPECDEC_VALIDATE_VENV (default /tmp/specdec-validate), SPECDEC_BUILD_DIR (default build-llama),
# SPECDEC_ACTIVATION_BITS (16, the default: two int8 planes; 8: one plane, as llama.cpp's Q8 activations).
# SPECDEC_KV_CACHE (f16, the default: the KV cache stored as IEEE float16; f32).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SPECDEC_VALIDATE_VENV:-/tmp/specdec-validate}"
build="${SPECDEC_BUILD_DIR:-$root/build-llama}"
model="${1:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
[[ -f "$model" ]] || { echo "validate-model: $model is absent (run scripts/setup.sh)" >&2; exit 1; }

if [[ ! -x "$venv/bin/python" ]]; then python3 -m venv "$venv"; fi
"$venv/bin/pip" install -q --only-binary=:all: gguf numpy

if [[ ! -f "$build/build.ninja" && ! -f "$build/Makefile" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECDEC_BUILD_EXAMPLES=OFF >/dev/null
fi
cmake --build "$build" -j "${SPECDEC_JOBS:-2}" --target specdec-dump-logits
"$venv/bin/python" "$root/scripts/validate_model.py" --model "$model" --dump "$build/bin/specdec-dump-logits" "${@:2}"
