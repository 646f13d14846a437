#!/usr/bin/env bash
# Builds a libFuzzer target of tests/fuzz/ (clang++ -fsanitize=fuzzer,address,undefined over src/models/io/) and runs it for the
# given number of seconds (default 60), starting from its seed corpus tests/fuzz/corpus_<target>; prints libFuzzer's final
# stats (executions, exec/s, time). New inputs go to build-io/fuzz/corpus_<target>, crashes to build-io/fuzz/artifacts_<target>.
# Targets: gguf, safetensors, llama_config (config.json), tokenizer, chat_template, prompt_file (specdec-generate --prompt-file).
# Needs clang and its fuzzer runtime (Debian: clang, libclang-rt-14-dev; installed when missing).
#   scripts/fuzz.sh <target> [seconds] [extra libFuzzer flags...]
#   scripts/fuzz.sh --build [target...]    build (all targets when none is named) without running
#   scripts/fuzz.sh --regress [target...]  run each seed input once (a quick check that no seed crashes)
#   scripts/fuzz.sh --list
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cxx="${CLANGXX:-clang++}"
out="$root/build-io/fuzz"
all_targets=()
for f in "$root"/tests/fuzz/fuzz_*.cpp; do all_targets+=("$(basename "$f" .cpp | sed 's/^fuzz_//')"); done

usage() { sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 2; }

ensure_clang() {
  for pkg in clang libclang-rt-14-dev; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      echo "fuzz: installing $pkg"
      ${SUDO:-$([[ $(id -u) -ne 0 ]] && echo sudo)} apt-get install -y -qq "$pkg" >/dev/null
    fi
  done
}

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fno-sanitize-recover=undefined -I"$root/include"
       -DSPECDEC_SOURCE_DIR="\"$root\"")

# An object (or binary) is stale when it is missing or any file its dependency list (.d, from -MMD) names is newer.
stale() {
  local target="$1" deps="$2" dep
  [[ -f "$target" && -f "$deps" ]] || return 0
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$deps"); do
    [[ "$dep" -nt "$target" ]] && return 0
  done
  return 1
}

# The library objects (src/models/io/*.cpp).
build_library() {
  mkdir -p "$out/obj"
  objs=()
  for src in "$root"/src/models/io/*.cpp; do
    local obj="$out/obj/$(basename "$src" .cpp).o"
    if stale "$obj" "$obj.d"; then
      echo "fuzz: compiling $(basename "$src")"
      "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link,address,undefined -MMD -MF "$obj.d" -c "$src" -o "$obj"
    fi
    objs+=("$obj")
  done
}

build_target() {
  local t="$1" src="$root/tests/fuzz/fuzz_$1.cpp" bin="$out/fuzz_$1"
  [[ -f "$src" ]] || { echo "fuzz: no target '$t' (targets: ${all_targets[*]})" >&2; exit 2; }
  local newer=0 obj
  for obj in "${objs[@]}"; do [[ "$obj" -nt "$bin" ]] && newer=1; done
  if ((newer)) || stale "$bin" "$bin.d"; then
    echo "fuzz: linking $bin"
    "$cxx" "${flags[@]}" -fsanitize=fuzzer,address,undefined -MMD -MF "$bin.d" "$src" "${objs[@]}" -lfmt -o "$bin"
  fi
}

max_len_of() {
  case "$1" in
    gguf | safetensors | llama_config) echo 65536 ;;
    *) echo 16384 ;;
  esac
}

mode=run
case "${1:-}" in
  "" | -h | --help) usage ;;
  --list) printf '%s\n' "${all_targets[@]}"; exit 0 ;;
  --build) mode=build; shift ;;
  --regress) mode=regress; shift ;;
esac

ensure_clang
build_library
if [[ $mode != run ]]; then
  targets=("$@")
  ((${#targets[@]})) || targets=("${all_targets[@]}")
  for t in "${targets[@]}"; do
    build_target "$t"
    if [[ $mode == regress ]]; then
      echo "fuzz: $t over tests/fuzz/corpus_$t"
      if ! "$out/fuzz_$t" -rss_limit_mb=2048 -timeout=10 "$root/tests/fuzz/corpus_$t"/* >"$out/regress_$t.log" 2>&1; then
        tail -30 "$out/regress_$t.log" >&2
        echo "fuzz: $t failed on a seed (log $out/regress_$t.log)" >&2
        exit 1
      fi
      grep -c "^Executed" "$out/regress_$t.log" | sed "s/^/fuzz: $t: inputs run: /"
    fi
  done
  exit 0
fi

target="$1"
seconds="${2:-60}"
shift
shift || true
build_target "$target"
corpus="$out/corpus_$target"
artifacts="$out/artifacts_$target"
mkdir -p "$corpus" "$artifacts"
cp -n "$root/tests/fuzz/corpus_$target"/* "$corpus/" 2>/dev/null || true
extra=()
[[ -f "$root/tests/fuzz/$target.dict" ]] && extra+=(-dict="$root/tests/fuzz/$target.dict")
echo "fuzz: running $target for ${seconds}s (corpus $corpus, crashes in $artifacts)"
exec "$out/fuzz_$target" "$corpus" -max_total_time="$seconds" -rss_limit_mb=2048 -max_len="$(max_len_of "$target")" \
  -timeout=10 -artifact_prefix="$artifacts/" -print_final_stats=1 "${extra[@]}" "$@"
