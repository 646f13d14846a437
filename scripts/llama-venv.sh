#!/usr/bin/env bash
# Prints the Python of the git-ignored virtualenv .deps/llama-venv, installing PyPI's llama-cpp-python there first (it
# builds llama.cpp from source: minutes) when `import llama_cpp` fails; waits for an install already running. The oracles
# (scripts/oracle-tokenizer.sh, scripts/oracle-logits.sh) share it with bench/compare-llama-cpp.sh.
#   py="$(scripts/llama-venv.sh)"
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.deps/llama-venv"
py="$venv/bin/python"
ready() { [[ -x "$py" ]] && "$py" -c 'import llama_cpp, gguf, numpy' 2>/dev/null; }
if ! ready; then
  while pgrep -f "$(basename "$venv")/bin/pip.* install" >/dev/null 2>&1 ||
        pgrep -f "$(basename "$venv")/bin/python.* -m pip install" >/dev/null 2>&1; do
    echo "llama-venv: waiting for a running pip install into $venv ..." >&2
    sleep 30
  done
  if ! ready; then
    echo "llama-venv: installing llama-cpp-python, gguf and numpy into $venv (builds llama.cpp from source; minutes)" >&2
    mkdir -p "$root/.deps"
    [[ -x "$py" ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q llama-cpp-python gguf numpy >&2
    ready || { echo "llama-venv: error: installed, but 'import llama_cpp, gguf, numpy' fails" >&2; exit 1; }
  fi
fi
echo "$py"
