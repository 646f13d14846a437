#!/usr/bin/env bash
# Builds the libFuzzer target over the GGUF parser, dequantiser, LlamaConfig reader and tokenizer (clang++ with
# -fsanitize=fuzzer,address,undefined) and runs it for the given number of seconds (default 60), starting from the seed corpus
# tests/fuzz/corpus_gguf. Needs clang and its fuzzer runtime (Debian: clang, libclang-rt-14-dev).
#   scripts/fuzz-gguf.sh [seconds] [extra libFuzzer flags...]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds="${1:-60}"
shift || true
cxx="${CLANGXX:-clang++}"
for pkg in clang libclang-rt-14-dev; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    echo "fuzz-gguf: installing $pkg"
    ${SUDO:-$([[ $(id -u) -ne 0 ]] && echo sudo)} apt-get install -y -qq "$pkg" >/dev/null
  fi
done
out="$root/build-io/fuzz"
mkdir -p "$out/corpus" "$out/artifacts"
srcs=("$root"/src/models/io/*.cpp "$root/tests/fuzz/fuzz_gguf.cpp")
if [[ ! -x "$out/fuzz_gguf" ]] || [[ -n "$(find "${srcs[@]}" "$root/include/specdec/models" -newer "$out/fuzz_gguf" 2>/dev/null)" ]]; then
  echo "fuzz-gguf: building $out/fuzz_gguf with $cxx"
  "$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I"$root/include" \
    "${srcs[@]}" -lfmt -o "$out/fuzz_gguf"
fi
cp -n "$root"/tests/fuzz/corpus_gguf/* "$out/corpus/" 2>/dev/null || true
echo "fuzz-gguf: running for ${seconds}s (corpus $out/corpus, crashes in $out/artifacts)"
exec "$out/fuzz_gguf" "$out/corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len=65536 -timeout=10 \
  -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@"
