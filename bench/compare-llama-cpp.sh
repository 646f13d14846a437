#!/usr/bin/env bash
# Peer comparison (not run in CI): specdec's CPU decoding against llama.cpp on the same GGUF file, same threads, same
# prompts, in one sitting. Prints one Markdown table of decoding tokens/s per prompt (llama.cpp plain and prompt-lookup,
# specdec plain, n-gram g=5 and CLI defaults), a table of forward costs (1-/6-token at context 128/1024, r, prefill,
# load to first token, peak RSS), and writes everything as JSON. Measurements run one after another (never in parallel).
#
#   bench/compare-llama-cpp.sh [--threads N] [--prompts FILE] [--max-new-tokens 128] [--json out/compare.json]
#                              [--build DIR] [--model GGUF] [--only llama|specdec] [--isa native|avx2|avx-vnni]
#
# llama.cpp comes from PyPI's llama-cpp-python (built from source) in the git-ignored virtualenv .deps/llama-venv, reused
# when `import llama_cpp` works there. --only llama runs just the llama.cpp half (the table shows n/a for specdec);
# --only specdec reuses the llama.cpp half of an earlier run with the same --json path.
# --isa avx2 holds both sides to AVX2 (what a CPU without AVX-512 runs): specdec with SPECDEC_CPU_ISA=avx2, llama.cpp built
# for AVX2/FMA/F16C only (no AVX-512, AVX-VNNI or AMX) in its own venv, .deps/llama-venv-avx2. --isa avx-vnni: the same
# plus AVX-VNNI on both sides (CPUs with AVX-VNNI but no AVX-512, e.g. recent Intel client and E-core parts), in
# .deps/llama-venv-avx-vnni.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
die() { echo "compare-llama-cpp: error: $*" >&2; exit 1; }
abspath() { realpath -m -- "$1"; }

threads="$(nproc)"
prompts="$root/examples/prompts/demo.jsonl"
max_new=128
json="$root/out/compare.json"
build="$root/build"
model="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
only=""
isa=native
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="${2:?--threads needs a value}"; shift 2 ;;
    --prompts) prompts="$(abspath "${2:?--prompts needs a file}")"; shift 2 ;;
    --max-new-tokens) max_new="${2:?--max-new-tokens needs a value}"; shift 2 ;;
    --json) json="$(abspath "${2:?--json needs a path}")"; shift 2 ;;
    --build) build="$(abspath "${2:?--build needs a directory}")"; shift 2 ;;
    --model) model="$(abspath "${2:?--model needs a GGUF file}")"; shift 2 ;;
    --only) only="${2:?--only needs llama or specdec}"; shift 2 ;;
    --isa) isa="${2:?--isa needs native, avx2 or avx-vnni}"; shift 2 ;;
    -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || die "--threads: expected a positive integer, got '$threads'"
[[ "$max_new" =~ ^[1-9][0-9]*$ ]] || die "--max-new-tokens: expected a positive integer, got '$max_new'"
[[ -z "$only" || "$only" == llama || "$only" == specdec ]] || die "--only: expected llama or specdec, got '$only'"
[[ "$isa" == native || "$isa" == avx2 || "$isa" == avx-vnni ]] || die "--isa: expected native, avx2 or avx-vnni, got '$isa'"
if [[ "$isa" != native ]]; then
  grep -qw avx2 /proc/cpuinfo || die "--isa $isa: this CPU has no AVX2"
  [[ "$isa" != avx-vnni ]] || grep -qw avx_vnni /proc/cpuinfo || die "--isa avx-vnni: this CPU has no AVX-VNNI"
  export SPECDEC_CPU_ISA="$isa"
fi
[[ -f "$model" ]] || die "model '$model' not found (run ./scripts/fetch-model.sh or ./scripts/setup.sh to download it)"
[[ -f "$prompts" ]] || die "prompt file '$prompts' not found"

gen="$build/bin/specdec-generate"
if [[ "$only" != llama ]]; then
  [[ -x "$gen" ]] || die "'$gen' not found: build specdec first (./scripts/build.sh) or pass --build DIR"
  [[ -x "$build/bin/bench_model" ]] ||
    echo "compare-llama-cpp: warning: $build/bin/bench_model not found; specdec's forward costs will be n/a" >&2
fi

out_dir="$(dirname "$json")"
stem="$(basename "$json" .json)"
logdir="$out_dir/$stem-logs"
mkdir -p "$out_dir" "$logdir"
llama_json="$logdir/llama.json"
specdec_json="$logdir/specdec.json"

# --- the llama.cpp virtualenv ------------------------------------------------------------------------------------------
venv="$root/.deps/llama-venv"
pip_args=(llama-cpp-python)
if [[ "$isa" != native ]]; then
  venv="$root/.deps/llama-venv-$isa"
  vnni=OFF
  [[ "$isa" != avx-vnni ]] || vnni=ON
  # Built from source for AVX2 (and AVX-VNNI) only, never from pip's cache of another build.
  export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX_VNNI=$vnni \
-DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AMX_TILE=OFF \
-DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  pip_args=(--no-cache-dir llama-cpp-python)
fi
py="$venv/bin/python"
if [[ "$only" != specdec ]] && ! { [[ -x "$py" ]] && "$py" -c 'import llama_cpp' 2>/dev/null; }; then
  # Another install into the same venv (e.g. started by hand) may be running: wait for it instead of racing it.
  while pgrep -f "$(basename "$venv")/bin/pip.* install" >/dev/null 2>&1 || pgrep -f "$(basename "$venv")/bin/python.* -m pip install" >/dev/null 2>&1; do
    echo "compare-llama-cpp: waiting for a running pip install into $venv ..." >&2
    sleep 30
  done
  if ! { [[ -x "$py" ]] && "$py" -c 'import llama_cpp' 2>/dev/null; }; then
    echo "compare-llama-cpp: installing llama-cpp-python into $venv (builds llama.cpp from source; minutes)" >&2
    mkdir -p "$root/.deps"
    [[ -x "$py" ]] || python3 -m venv "$venv"
    "$venv/bin/pip" install -q "${pip_args[@]}"
    "$py" -c 'import llama_cpp' || die "llama-cpp-python installed but 'import llama_cpp' fails"
  fi
fi
[[ -x "$py" ]] || py="$(command -v python3)"  # --only specdec without the venv: the specdec and report steps need only the stdlib

load="$(cut -d' ' -f1 /proc/loadavg)"
if awk -v l="$load" 'BEGIN { exit !(l > 0.5) }'; then
  echo "compare-llama-cpp: warning: load average $load before measuring; the machine is not quiet" >&2
fi
echo "compare-llama-cpp: model $model, $threads thread(s), prompts $prompts, $max_new new tokens, ISA $isa, logs in $logdir" >&2

driver="$root/bench/compare_llama_cpp.py"
common=(--model "$model" --prompts "$prompts" --threads "$threads" --max-new-tokens "$max_new")
if [[ "$only" != specdec ]]; then
  "$py" "$driver" llama "${common[@]}" --out "$llama_json"
fi
[[ -f "$llama_json" ]] || die "no llama.cpp results at $llama_json (run without --only first)"
if [[ "$only" != llama ]]; then
  tool=""
  for t in "$build/bin/specdec_tokenize_tool" "$root/build-io/bin/specdec_tokenize_tool"; do
    if [[ -x "$t" ]]; then tool="$t"; break; fi
  done
  [[ -n "$tool" ]] || echo "compare-llama-cpp: warning: specdec_tokenize_tool not built; specdec's prompt token ids are not checked" >&2
  "$py" "$driver" specdec "${common[@]}" --build "$build" --llama-json "$llama_json" --tokenize-tool "$tool" \
    --logdir "$logdir" --out "$specdec_json"
fi
report_args=(--model "$model" --max-new-tokens "$max_new" --llama-json "$llama_json" --json "$json" --isa "$isa")
[[ "$only" == llama ]] || report_args+=(--specdec-json "$specdec_json")
"$py" "$driver" report "${report_args[@]}"
