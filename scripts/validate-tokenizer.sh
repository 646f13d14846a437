#!/usr/bin/env bash
# Independent check of specdec's tokenizer: builds specdec_tokenize_tool, installs Hugging Face `tokenizers` and `gguf` into a
# venv under build-io/ (needs PyPI), and compares token ids on >= 1,000 varied strings (scripts/validate_tokenizer.py).
#   scripts/validate-tokenizer.sh [MODEL.gguf] [extra validate_tokenizer.py args...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
model="${1:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
shift || true
build="$root/build-io"
venv="$build/venv-tok"
if [[ ! -x "$venv/bin/python" ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -c "import tokenizers, gguf" 2>/dev/null || "$venv/bin/pip" install -q tokenizers gguf numpy
if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DSPECDEC_WITH_TORCH=OFF -DSPECDEC_WITH_CUDA=OFF -DSPECDEC_BUILD_BENCH=OFF \
    -DSPECDEC_BUILD_EXAMPLES=OFF >/dev/null
fi
cmake --build "$build" -j2 --target specdec_tokenize_tool >/dev/null
exec "$venv/bin/python" "$root/scripts/validate_tokenizer.py" "$model" "$build/bin/specdec_tokenize_tool" "$@"
