#!/usr/bin/env bash
# Downloads (does not install) the Debian packages that scripts/gpu-check.sh needs on a GPU machine without
# internet or apt: fmt, nlohmann-json, GoogleTest/GoogleMock and Google Benchmark headers, libraries and CMake configs.
# Run it HERE (a machine with apt and a network); the .deb files land in .deps/ (git-ignored), which travels with
# the working tree to the GPU machine, where gpu-check.sh unpacks them with `dpkg -x` into a private prefix.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.deps"
mkdir -p "$dest"
cd "$dest"
pkgs=(libfmt-dev libfmt9 nlohmann-json3-dev libgtest-dev libgmock-dev googletest libbenchmark-dev libbenchmark1debian
      libcli11-dev)
for p in "${pkgs[@]}"; do
  if ls "${p}"_*.deb >/dev/null 2>&1; then continue; fi
  apt-get download "$p" || echo "fetch-gpu-deps: could not download $p (skipped)" >&2
done
ls -1 "$dest"/*.deb
# The bundled GGUF (92 MB) cannot travel with the working tree: its metadata alone (tokenizer, chat template) can, for
# the CLI run on the committed draft checkpoint.
if [[ -f "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" && ! -f "$root/models/SmolLM2-135M-Instruct.metadata.gguf" ]]; then
  python3 "$root/scripts/gguf-metadata-only.py" "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" \
    "$root/models/SmolLM2-135M-Instruct.metadata.gguf"
fi
