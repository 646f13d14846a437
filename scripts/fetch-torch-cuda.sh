#!/usr/bin/env bash
# Fetches PyPI's CUDA build of torch (the GPU machine's version, 2.11.0+cu130) and unpacks its C++ headers, CMake
# package and libraries into a cache, for compiling the torch CUDA glue on a machine without a GPU (scripts/gpu-check.sh
# --dry-run does, in CI). Prints the CMake prefix to use. Nothing is installed into any Python.
#   prefix="$(scripts/fetch-torch-cuda.sh)"      # e.g. ~/.cache/specdec/torch-2.11.0/torch/share/cmake
set -euo pipefail
version="${SPECDEC_TORCH_VERSION:-2.11.0}"
cache="${SPECDEC_TORCH_CACHE:-$HOME/.cache/specdec/torch-$version}"
if [[ ! -f "$cache/torch/share/cmake/Torch/TorchConfig.cmake" ]]; then
  mkdir -p "$cache"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-torch-cuda: downloading torch==$version from PyPI (about 530 MB)" >&2
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    "torch==$version" -d "$tmp" >&2
  unzip -q -o "$tmp"/torch-*.whl 'torch/include/*' 'torch/share/*' 'torch/lib/*' 'torch/version.py' -d "$cache.partial"
  grep -q "cuda: Optional\[str\] = '" "$cache.partial/torch/version.py" ||
    { echo "fetch-torch-cuda: torch==$version from PyPI has no CUDA" >&2; exit 1; }
  rm -rf "$cache" && mv "$cache.partial" "$cache"
fi
echo "$cache/torch/share/cmake"
