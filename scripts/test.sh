#!/usr/bin/env bash
# Sets up, builds and runs every test through ctest (printing ctest's summary line).
#   ./scripts/test.sh             full build + all tests
#   ./scripts/test.sh --sanitize  the torch-free core tests under ASan+UBSan (build-sanitize/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
jobs="${SPECDEC_JOBS:-$(nproc)}"

if [[ "${1:-}" == "--sanitize" ]]; then
  SPECDEC_BUILD_DIR="$root/build-sanitize" "$root/scripts/build.sh" \
    -DSPECDEC_WITH_TORCH=OFF -DSPECDEC_WITH_CUDA=OFF -DSPECDEC_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DSPECDEC_BUILD_BENCH=OFF -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_INSTALL=OFF
  cd "$root/build-sanitize"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j "$jobs"
  exit
fi

"$root/scripts/build.sh"
cd "$root/build"
ctest --output-on-failure -j "$jobs"
