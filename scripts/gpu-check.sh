#!/usr/bin/env bash
# The device check: specdec's CUDA path on a GPU machine (nvcc, CMake, ninja, compute-sanitizer and PyTorch with CUDA;
# no network, no apt), in one call of at most about 8 minutes on 16 cores. Every stage has its own time limit, a stage
# that fails does not stop the next, and the run ends with one tarball of logs and JSON.
#
#   scripts/gpu-check.sh --prepare   here, before the call: fetch the Debian packages the GPU machine lacks (.deps/)
#                                    and build the torch-free CUDA binaries into .gpu-carry/ (both git-ignored; carry
#                                    them with the call: carry [".deps", ".gpu-carry",
#                                    "models/SmolLM2-135M-Instruct.metadata.gguf"])
#   scripts/gpu-check.sh             on the GPU machine: the stages below; exit 1 when any failed
#   SPECDEC_GPU_CHECK_STAGES=torch scripts/gpu-check.sh
#                                    on the GPU machine: stages 0, 4, 5 and 6 only (a rerun after a torch-side fix)
#   scripts/gpu-check.sh --dry-run   anywhere: configures both builds and checks every stage's inputs, skips what needs
#                                    a GPU, and passes without one (CI runs it)
#
# Stages (logs in out/gpu-check/, summary.txt lists each stage's outcome; with $OUT set, the tarball, the summary and
# the benchmark JSON are copied there, since the device tool returns only a few files):
#   0 env          nvidia-smi, torch's version and CUDA; a torch without CUDA FAILS the check (it would read as a pass)
#   1 kernels      the CUDA tests and bench_verify_cuda: carried from .gpu-carry/bin, else built here (torch OFF)
#   2 tests        every CUDA test (device tests and host emulation), then compute-sanitizer memcheck over each
#   3 bench        chain, tree, block and logits kernels and the whole step from a CUDA graph at g = 4, B 1-256,
#                  V 32k-256k: us per call and fraction of the copy bandwidth measured in the same binary
#   4 torch build  the torch CUDA glue and the torch-linked tests against this machine's PyTorch (-k 0)
#   5 torch tests  the tensor front on CUDA against the CPU (memcheck too), the host-sync count of a decode step,
#                  greedy speculative == plain with AtenLlamaModel on CUDA, CPU and CUDA tokens, the ops from Python
#   6 tarball      gpu-check.tar.gz of everything above
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mode=run
case "${1:-}" in
  --prepare) mode=prepare ;;
  --dry-run) mode=dry ;;
  "") ;;
  *) echo "gpu-check: unknown argument '$1' (expected --prepare, --dry-run or nothing)" >&2; exit 2 ;;
esac
export PATH="/usr/local/cuda/bin:$PATH"
jobs="${SPECDEC_JOBS:-$(nproc)}"
archs="${SPECDEC_CUDA_ARCHS:-90}"
carry="$root/.gpu-carry"
only_torch=0
case "${SPECDEC_GPU_CHECK_STAGES:-all}" in
  all) ;;
  torch) only_torch=1 ;;
  *) echo "gpu-check: SPECDEC_GPU_CHECK_STAGES: expected 'all' or 'torch', got '$SPECDEC_GPU_CHECK_STAGES'" >&2; exit 2 ;;
esac
kernel_bins=(test_cuda_verify test_cuda_emulation test_block_emulation test_cuda_logits test_logits_emulation
             test_cuda_step_graph test_cuda_host_api bench_verify_cuda)

if [[ $mode == prepare ]]; then
  "$root/scripts/fetch-gpu-deps.sh" >/dev/null
  b="$root/build-gpu-carry"
  cmake -S "$root" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WITH_TORCH=OFF -DSPECDEC_BUILD_EXAMPLES=OFF \
    -DSPECDEC_INSTALL=OFF -DSPECDEC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs" >/dev/null || exit 1
  cmake --build "$b" -j "$jobs" --target "${kernel_bins[@]}" || exit 1
  rm -rf "$carry" && mkdir -p "$carry/bin"
  for t in "${kernel_bins[@]}"; do cp "$b/bin/$t" "$carry/bin/"; done
  # The shared libraries these binaries need beyond glibc and libstdc++ (Google Benchmark, fmt), for LD_LIBRARY_PATH.
  mkdir -p "$carry/lib"
  for t in "${kernel_bins[@]}"; do
    ldd "$carry/bin/$t" | awk '/=> \// {print $3}' | grep -E 'libbenchmark|libfmt|libgtest|libgmock' || true
  done | sort -u | xargs -r -I{} cp -L {} "$carry/lib/"
  du -sh "$carry" "$root/.deps"
  echo "gpu-check: prepared; carry [\".deps\", \".gpu-carry\", \"models/SmolLM2-135M-Instruct.metadata.gguf\"] and run scripts/gpu-check.sh there"
  exit 0
fi

out="$root/out/gpu-check"
rm -rf "$out" && mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
start=$SECONDS
# The whole check's budget in seconds (the device call's limit is 10 minutes; the machine's start is not counted here).
budget="${SPECDEC_GPU_CHECK_BUDGET:-$([[ $mode == dry ]] && echo 3600 || echo 500)}"
failed=0
note() { echo "$*" | tee -a "$summary"; }
# stage NAME LIMIT_S LOG CMD...: runs CMD under a time limit (cut to what is left of the budget), logs its output,
# notes pass / FAIL / TIMEOUT.
stage() {
  local name=$1 limit=$2 log=$3
  shift 3
  local t=$SECONDS rc left=$((budget - (SECONDS - start) - 15))
  if ((left < 10)); then note "$name: FAIL no time left in the ${budget} s budget"; failed=1; return 1; fi
  ((limit > left)) && limit=$left
  timeout -k 5 "$limit" "$@" >"$out/$log" 2>&1
  rc=$?
  if ((rc == 0)); then
    note "$name: pass ($((SECONDS - t)) s)"
  elif ((rc == 124 || rc == 137)); then
    note "$name: TIMEOUT after ${limit} s (log $log)"; failed=1
  else
    note "$name: FAIL rc=$rc ($((SECONDS - t)) s, log $log)"; failed=1
  fi
  return $rc
}
skip() { note "$1: skipped ($2)"; }

# Debian packages carried as .deb files (scripts/fetch-gpu-deps.sh) unpack into a private prefix.
prefix="$root/.deps/prefix"
if ls "$root"/.deps/*.deb >/dev/null 2>&1; then
  mkdir -p "$prefix"
  for deb in "$root"/.deps/*.deb; do dpkg -x "$deb" "$prefix"; done
fi
multi="$prefix/usr/lib/x86_64-linux-gnu"
prefix_path="$prefix/usr;$multi/cmake"
export LD_LIBRARY_PATH="$carry/lib:$multi:${LD_LIBRARY_PATH:-}"

# --- 0. env ---------------------------------------------------------------------------------------------------------
have_gpu=0
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 && have_gpu=1
torch_info="$(python3 -c 'import torch;print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>&1 |
  tail -1)"
note "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
note "torch: $torch_info"
# The device machine's copy of .git may not hold the working tree's commit: the caller names it.
note "commit: ${SPECDEC_GPU_CHECK_COMMIT:-not given (set SPECDEC_GPU_CHECK_COMMIT=\$(git rev-parse --short HEAD) in the command)}"
torch_prefix="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"
torch_cuda="$(python3 -c 'import torch;print(torch.version.cuda or "")' 2>/dev/null || true)"
if [[ $mode == dry && -z "$torch_cuda" ]]; then
  # No CUDA torch here: PyPI's CUDA wheel, unpacked into a cache, so the torch CUDA glue compiles here too.
  torch_prefix="$("$root/scripts/fetch-torch-cuda.sh")" || { note "env: FAIL could not fetch PyPI's CUDA torch"; failed=1; }
fi
if [[ $mode == run ]]; then
  if ((!have_gpu)); then note "env: FAIL no GPU (nvidia-smi failed); use --dry-run where there is none"; exit 1; fi
  if [[ "$torch_info" != *" True" ]]; then
    note "env: FAIL PyPI torch without CUDA, or no torch ('$torch_info'): the torch stages would read as a pass"
    failed=1
  fi
fi

# --- 4. torch build (started first, in the background) --------------------------------------------------------------------------------------------------
b2="$root/build-gpu-check-torch"
torch_targets=(specdec_torch_tests test_aten_llama test_custom_target specdec_ops specdec-generate bench_verify_cuda_torch)
if [[ -n "$torch_prefix" ]]; then
  # PyTorch >= 2.x ships its own {fmt} headers ahead of the fetched libfmt on the include path: header-only {fmt} keeps
  # the objects from linking against a library of another version.
  configure2=(cmake -S "$root" -B "$b2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WITH_TORCH=ON
              -DSPECDEC_BUILD_EXAMPLES=ON -DSPECDEC_INSTALL=OFF -DSPECDEC_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$archs"
              -DCMAKE_CXX_FLAGS=-DFMT_HEADER_ONLY=1 -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix_path")
  # Without a GPU, torch's CMake would probe for one to pick the architectures: name them.
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
  if [[ $mode == dry ]]; then
    # Compile (not link: the CUDA libraries torch_cuda needs are on the GPU machine) every object that includes torch's
    # CUDA headers: the glue, the CUDA-only tests and the torch-ops benchmark.
    stage "torch CUDA configure" 300 build-torch.log "${configure2[@]}" &&
      stage "torch CUDA glue and tests compile" 1200 build-torch-objects.log cmake --build "$b2" -j "$jobs" -- -k 0 \
        src/torch/CMakeFiles/specdec_torch.dir/cuda/rejection_sample_cuda.cu.o \
        src/torch/CMakeFiles/specdec_torch.dir/cuda/verify_logits_cuda.cu.o \
        src/torch/CMakeFiles/specdec_torch.dir/rejection_sample.cpp.o \
        src/torch/CMakeFiles/specdec_torch.dir/verify_logits.cpp.o \
        src/torch/CMakeFiles/specdec_ops.dir/ops/register.cpp.o \
        src/decoder/CMakeFiles/specdec_decoder.dir/step.cpp.o \
        src/torch/models/CMakeFiles/specdec_torch_models.dir/aten_llama.cpp.o \
        tests/models/CMakeFiles/test_aten_llama.dir/test_aten_llama.cpp.o \
        tests/torch/CMakeFiles/specdec_torch_tests.dir/test_rejection_sample.cpp.o \
        tests/torch/CMakeFiles/specdec_torch_tests.dir/test_verify_logits.cpp.o \
        bench/CMakeFiles/bench_verify_cuda_torch.dir/bench_verify_cuda.cu.o
    grep -q "torch CUDA glue enabled" "$out/build-torch.log" && note "torch CUDA glue: enabled" ||
      { note "torch CUDA glue: FAIL not enabled"; failed=1; }
  else
    # Built in the background while the GPU runs stages 1-3 (they need little CPU); waited for before stage 5.
    stage "torch build" 330 build-torch.log \
      bash -c "$(printf '%q ' "${configure2[@]}") && cmake --build $(printf '%q' "$b2") -j $jobs -- -k 0 $(printf '%q ' "${torch_targets[@]}")" &
    torch_build=$!
  fi
else
  note "torch build: $([[ $mode == run ]] && echo FAIL || echo skipped) (no PyTorch found by python3)"
  [[ $mode == run ]] && failed=1
fi

# --- 1. kernels -----------------------------------------------------------------------------------------------------
if ((only_torch)); then
  note "kernels, CUDA tests, memcheck, bench: skipped (SPECDEC_GPU_CHECK_STAGES=torch)"
  mode_kernels=skip
else
  mode_kernels=$mode
fi
bins="$carry/bin"
b1="$root/build-gpu-check"
if [[ $mode_kernels == skip ]]; then
  :
elif [[ $mode == run && -x "$bins/test_cuda_verify" ]] && "$bins/test_cuda_emulation" --gtest_list_tests >/dev/null 2>&1; then
  note "kernels: carried binaries from .gpu-carry/bin"
else
  configure1=(cmake -S "$root" -B "$b1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WITH_TORCH=OFF
              -DSPECDEC_BUILD_EXAMPLES=OFF -DSPECDEC_INSTALL=OFF -DSPECDEC_WITH_CUDA=ON
              -DCMAKE_CUDA_ARCHITECTURES="$archs" -DCMAKE_PREFIX_PATH="$prefix_path")
  if [[ $mode == dry ]]; then
    stage "kernels configure" 300 build-kernels.log "${configure1[@]}"
  else
    stage "kernels build" 240 build-kernels.log \
      bash -c "$(printf '%q ' "${configure1[@]}") && cmake --build $(printf '%q' "$b1") -j $jobs -- -k 0 $(printf '%q ' "${kernel_bins[@]}")"
  fi
  bins="$b1/bin"
fi

# --- 2. CUDA tests and memcheck --------------------------------------------------------------------------------------
cuda_tests=(test_cuda_verify test_cuda_emulation test_block_emulation test_cuda_logits test_logits_emulation
            test_cuda_step_graph test_cuda_host_api)
if [[ $mode_kernels == skip ]]; then
  :
elif [[ $mode == run ]]; then
  for t in "${cuda_tests[@]}"; do
    stage "test $t" 120 "test-$t.log" "$bins/$t" --gtest_brief=1
  done
  if command -v compute-sanitizer >/dev/null 2>&1; then
    # memcheck over every device test; the long random sweeps are left to the plain runs above (the filters keep
    # every kernel and code path: bad input, graphs, edge rows, both probability types).
    declare -A filters=(
      [test_cuda_verify]='*-*ChainMatchesCpu*:*TreeMatchesCpu*'
      [test_block_emulation]='cuda_block_device*'
      [test_cuda_logits]='cuda_logits.Edge*:cuda_logits.Workspace*:cuda_logits_graph*'
      [test_cuda_step_graph]='*'
    )
    for t in test_cuda_verify test_block_emulation test_cuda_logits test_cuda_step_graph; do
      stage "memcheck $t" 150 "memcheck-$t.log" compute-sanitizer --tool memcheck --error-exitcode 1 \
        "$bins/$t" --gtest_brief=1 --gtest_filter="${filters[$t]}"
    done
    stage "racecheck test_cuda_verify" 90 racecheck-verify.log compute-sanitizer --tool racecheck --error-exitcode 1 \
      "$bins/test_cuda_verify" --gtest_brief=1 --gtest_filter='cuda_verify_graph*:*BadInput*'
  else
    note "memcheck: FAIL compute-sanitizer not found"; failed=1
  fi
else
  skip "CUDA tests and memcheck" "dry run"
fi

# --- 3. kernel benchmarks --------------------------------------------------------------------------------------------
if [[ $mode_kernels == skip ]]; then
  :
elif [[ $mode == run ]]; then
  stage "bench" 150 bench.txt "$bins/bench_verify_cuda" --benchmark_filter='_g4/' --benchmark_min_time=0.05 \
    --benchmark_counters_tabular=true --benchmark_out="$out/bench.json" --benchmark_out_format=json
  grep -E '(chain|tree|logits|step_graph)_g4.*B:(1|64|256)/K:4/V:(32000|262144)' "$out/bench.txt" | tee -a "$summary"
else
  skip "bench" "dry run"
fi

# --- 5. torch tests --------------------------------------------------------------------------------------------------
if [[ -n "${torch_build:-}" ]]; then
  wait "$torch_build" || failed=1
  grep -q "torch CUDA glue enabled" "$out/build-torch.log" && note "torch CUDA glue: enabled" ||
    note "torch CUDA glue: FAIL not enabled (this torch has no CUDA)"
fi
if [[ $mode == run && -n "$torch_prefix" ]]; then
  tb="$b2/bin"
  [[ -x "$tb/specdec_torch_tests" ]] && stage "specdec_torch_tests" 120 torch-tests.log "$tb/specdec_torch_tests" --gtest_brief=1
  [[ -x "$tb/specdec_torch_tests" ]] && stage "memcheck verify_logits CUDA" 120 memcheck-verify-logits.log \
    compute-sanitizer --tool memcheck --error-exitcode 1 "$tb/specdec_torch_tests" --gtest_brief=1 \
    --gtest_filter='VerifyLogits.Cuda*:TorchCuda*'
  [[ -x "$tb/test_aten_llama" ]] && stage "test_aten_llama (sync count, CPU = CUDA, greedy == plain)" 150 \
    aten-llama.log "$tb/test_aten_llama" --gtest_filter='*Cuda*'
  grep -E '^\[ (syncs|cpu=cuda) ' "$out/aten-llama.log" 2>/dev/null | tee -a "$summary"
  [[ -x "$tb/test_custom_target" ]] && stage "test_custom_target (CUDA)" 90 custom-target.log "$tb/test_custom_target"
  # The CLI with the target on the GPU: the committed draft checkpoint as the target (the bundled GGUF cannot travel;
  # its metadata alone, made by --prepare, gives the tokenizer), plain against n-gram drafting on the demo prompts.
  meta="$root/models/SmolLM2-135M-Instruct.metadata.gguf"
  if [[ -x "$tb/specdec-generate" && -f "$meta" ]]; then
    for dtype in float32 bfloat16; do
      stage "specdec-generate --device cuda --dtype $dtype" 60 "generate-cuda-$dtype.txt" "$tb/specdec-generate" \
        --model "$root/models/smollm2-135m-draft" --tokenizer "$meta" --device cuda --dtype "$dtype" --proposer ngram \
        --compare --max-new-tokens 96 --quiet --json "$out/generate-cuda-$dtype.json"
      grep -iE "speedup|tokens/s" "$out/generate-cuda-$dtype.txt" | tail -3 | tee -a "$summary"
    done
  else
    note "specdec-generate --device cuda: skipped (carry models/SmolLM2-135M-Instruct.metadata.gguf, made by --prepare)"
  fi
  [[ -f "$b2/lib/libspecdec_ops.so" ]] && stage "pytest ops (torch.ops.load_library)" 90 pytest-ops.log \
    env SPECDEC_OPS_LIB="$b2/lib/libspecdec_ops.so" python3 -m pytest -q "$root/tests/python"
  if [[ -x "$tb/bench_verify_cuda_torch" ]]; then
    stage "bench torch ops" 60 bench-torch.txt "$tb/bench_verify_cuda_torch" \
      --benchmark_filter='cuda_chain(_torch_ops)?/f32/B:(1|64)/K:5/V:(32000|151936)/' --benchmark_min_time=0.05 \
      --benchmark_counters_tabular=true --benchmark_out="$out/bench-torch.json" --benchmark_out_format=json
  fi
elif [[ $mode == dry ]]; then
  skip "torch tests" "dry run"
fi

# --- 6. tarball ------------------------------------------------------------------------------------------------------
note "total: $((SECONDS - start)) s; $([[ $failed == 0 ]] && echo PASS || echo FAILED)"
tar -C "$out" -czf "$root/out/gpu-check.tar.gz" . && mv "$root/out/gpu-check.tar.gz" "$out/"
if [[ -n "${OUT:-}" ]]; then
  cp "$out/gpu-check.tar.gz" "$summary" "$OUT/"
  [[ -f "$out/bench.json" ]] && cp "$out/bench.json" "$OUT/"
fi
cat "$summary"
exit $failed
