#!/usr/bin/env bash
# Sets up, builds and runs every test through ctest (printing ctest's summary line).
#   ./scripts/test.sh             full build + all tests
#   ./scripts/test.sh --sanitize  the torch-free core tests under ASan+UBSan (build-sanitize/)
#   ./scripts/test.sh --sanitize-torch
#                                 the libtorch-dependent tests (torch front, models, proposers, decoder) under ASan+UBSan
#                                 (build-sanitize-torch/, -O1, no CUDA); each test binary runs once, two at a time
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
jobs="${SPECDEC_JOBS:-$(nproc)}"

if [[ "${1:-}" == "--sanitize-torch" ]]; then
  # Debian's libtorch is not instrumented, but it runs under ASan (leak checking included) and UBSan; only our code is
  # checked. SPECDEC_SANITIZERS=undefined gives a UBSan-only build where ASan is not wanted.
  bins=(specdec_torch_tests test_models_llama test_proposers test_proposers_eagle test_decoder test_decoder_distribution)
  build="$root/build-sanitize-torch"
  export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_MAXSIZE="${CCACHE_MAXSIZE:-5G}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS_RELEASE="-O1" \
    -DSPECDEC_WITH_CUDA=OFF -DSPECDEC_SANITIZE=ON -DSPECDEC_SANITIZERS="${SPECDEC_SANITIZERS:-address,undefined}" \
    -DSPECDEC_BUILD_BENCH=OFF -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_INSTALL=OFF >/dev/null
  cmake --build "$build" -j "$jobs" --target "${bins[@]}" specdec_ops
  mkdir -p "$build/logs"
  export ASAN_OPTIONS="detect_leaks=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  status=0
  printf '%s\n' "${bins[@]}" | xargs -P "$jobs" -I{} sh -c \
    'cd "$1/bin" && timeout 1200 ./"$2" --gtest_brief=1 >"$1/logs/$2.log" 2>&1 && echo "sanitize-torch: $2 passed" ||
     { echo "sanitize-torch: $2 FAILED (log $1/logs/$2.log)"; tail -40 "$1/logs/$2.log"; exit 1; }' _ "$build" {} || status=1
  if grep -l -E "runtime error:|ERROR: (Address|Leak)Sanitizer" "$build"/logs/*.log 2>/dev/null; then
    echo "sanitize-torch: sanitizer reports in the logs above"; status=1
  fi
  exit $status
fi

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
