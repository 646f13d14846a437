#!/usr/bin/env bash
# Builds and checks specdec's CUDA kernels on a GPU machine that has nvcc, CMake and PyTorch but no internet and
# no apt. Results go to $OUT if set, else out/gpu-check/:
#   build-kernels.log, ctest.log          CUDA tests (tests/cuda: device tests and the host emulation)
#   memcheck-*.log, racecheck-*.log       compute-sanitizer on the device tests (verifiers, block, logits)
#   bench.json, bench.txt                 bench_verify_cuda (Google Benchmark)
#   build-torch.log, ctest-torch.log,     second configure against the machine's PyTorch libtorch (torch CUDA glue,
#   torch-tests.log                       verify_logits and the ops on CUDA against the CPU path,
#   bench-torch.json                      torch-ops baseline, AtenLlamaModel and the custom target on CUDA); skipped
#                                         when PyTorch is missing
#   custom-target-cuda.txt,               the decoding loop with the target on the GPU: examples/custom-target and
#   generate-cuda-{float32,bfloat16}.*    specdec-generate --device cuda (carry models/*.metadata.gguf, see
#                                         scripts/fetch-gpu-deps.sh, when the bundled GGUF cannot travel)
#   summary.txt
# Dependencies: fmt, nlohmann-json, GoogleTest and Google Benchmark come from Debian .deb files fetched beforehand with
# scripts/fetch-gpu-deps.sh into .deps/ (git-ignored); they are unpacked here with `dpkg -x` into .deps/prefix and
# given to CMake through CMAKE_PREFIX_PATH. If the GPU machine already has them, that prefix is simply unused.
# libtorch: the CPU-side libtorch parts must be configured against the PyTorch found here
# (python3 -c "import torch;print(torch.utils.cmake_prefix_path)"); its C++ ABI (_GLIBCXX_USE_CXX11_ABI) may differ
# from Debian's, so the kernels are first built with -DSPECDEC_WITH_TORCH=OFF, then a second build directory with
# torch ON builds the torch CUDA glue (src/torch/cuda) and the torch-ops benchmark.
# Usage: scripts/gpu-check.sh [--quick]   (--quick: fewer benchmark shapes, no racecheck)
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${OUT:-$root/out/gpu-check}"
mkdir -p "$out"
jobs="${SPECDEC_JOBS:-$(nproc)}"
quick=0
[[ "${1:-}" == "--quick" ]] && quick=1
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

export PATH="/usr/local/cuda/bin:$PATH"
prefix="$root/.deps/prefix"
if ls "$root"/.deps/*.deb >/dev/null 2>&1; then
  mkdir -p "$prefix"
  for deb in "$root"/.deps/*.deb; do dpkg -x "$deb" "$prefix"; done
fi
multi="$prefix/usr/lib/x86_64-linux-gnu"
prefix_path="$prefix/usr;$multi/cmake"
export LD_LIBRARY_PATH="$multi:${LD_LIBRARY_PATH:-}"
nvidia-smi >"$out/nvidia-smi.txt" 2>&1 || true
note "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null | head -1)"

# 1. Kernels, CUDA tests, benchmark: no torch.
b1="$root/build-gpu-check"
cmake -S "$root" -B "$b1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WITH_TORCH=OFF -DSPECDEC_BUILD_EXAMPLES=OFF \
  -DSPECDEC_WITH_CUDA=ON -DCMAKE_PREFIX_PATH="$prefix_path" >"$out/build-kernels.log" 2>&1 &&
  cmake --build "$b1" -j "$jobs" --target test_cuda_verify test_cuda_emulation test_block_emulation test_cuda_logits test_logits_emulation \
    bench_verify_cuda >>"$out/build-kernels.log" 2>&1
note "build (kernels): rc=$?"
(cd "$b1" && ctest -R cuda --output-on-failure) >"$out/ctest.log" 2>&1
note "ctest -R cuda: rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest.log" | tail -1))"

san=compute-sanitizer
if command -v "$san" >/dev/null 2>&1; then
  # Sanitizers are slow: run the device tests on their smaller cases (the filters keep every code path).
  filter='cuda_verify*:-*ChainMatchesCpu*:*TreeMatchesCpu*'
  "$san" --tool memcheck --error-exitcode 1 "$b1/bin/test_cuda_verify" --gtest_filter="$filter" >"$out/memcheck-verify.log" 2>&1
  note "memcheck: rc=$?"
  "$san" --tool memcheck --error-exitcode 1 "$b1/bin/test_block_emulation" --gtest_filter='cuda_block_device*' \
    >"$out/memcheck-block.log" 2>&1
  note "memcheck (block verification): rc=$?"
  "$san" --tool memcheck --error-exitcode 1 "$b1/bin/test_cuda_logits" --gtest_filter='cuda_logits.Edge*:cuda_logits.Workspace*' \
    >"$out/memcheck-logits.log" 2>&1
  note "memcheck (logits): rc=$?"
  if [[ $quick == 0 ]]; then
    "$san" --tool racecheck --error-exitcode 1 "$b1/bin/test_cuda_verify" --gtest_filter='cuda_verify*BadInput*:cuda_verify_graph*' \
      >"$out/racecheck-verify.log" 2>&1
    note "racecheck: rc=$?"
    "$san" --tool synccheck --error-exitcode 1 "$b1/bin/test_cuda_verify" --gtest_filter='cuda_verify*BadInput*' \
      >"$out/synccheck-verify.log" 2>&1
    note "synccheck: rc=$?"
    "$san" --tool racecheck --error-exitcode 1 "$b1/bin/test_cuda_logits" --gtest_filter='cuda_logits.Edge*' \
      >"$out/racecheck-logits.log" 2>&1
    note "racecheck (logits): rc=$?"
  fi
else
  note "compute-sanitizer not found: sanitizers skipped"
fi

bench_filter='.'
[[ $quick == 1 ]] && bench_filter='cuda_chain/(f32|bf16)/B:(1|64)/K:5/V:(32000|128256)'
"$b1/bin/bench_verify_cuda" --benchmark_filter="$bench_filter" --benchmark_counters_tabular=true \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json >"$out/bench.txt" 2>&1
note "bench: rc=$?"
grep -E 'B:1/K:5/V:32000|B:64/K:5/V:128256' "$out/bench.txt" | tee -a "$summary"

# 2. Torch CUDA glue against this machine's PyTorch.
torch_prefix="$(python3 -c 'import torch;print(torch.utils.cmake_prefix_path)' 2>/dev/null || true)"
if [[ -n "$torch_prefix" ]]; then
  b2="$root/build-gpu-check-torch"
  # PyTorch >= 2.x ships its own {fmt} headers (v12 in 2.11) ahead of the fetched libfmt9 on the include path: header-only
  # {fmt} keeps the objects from linking against a library of another version.
  cmake -S "$root" -B "$b2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPECDEC_WITH_TORCH=ON -DSPECDEC_BUILD_EXAMPLES=ON \
    -DSPECDEC_WITH_CUDA=ON -DCMAKE_CXX_FLAGS=-DFMT_HEADER_ONLY=1 -DCMAKE_PREFIX_PATH="$torch_prefix;$prefix_path" \
    >"$out/build-torch.log" 2>&1 &&
    cmake --build "$b2" -j "$jobs" >>"$out/build-torch.log" 2>&1
  note "build (torch ON): rc=$?"
  (cd "$b2" && ctest -R 'torch|cuda|CustomTarget|AtenLlama' --output-on-failure) >"$out/ctest-torch.log" 2>&1
  note "ctest torch|cuda|CustomTarget|AtenLlama: rc=$? ($(grep -E 'tests passed|tests failed' "$out/ctest-torch.log" | tail -1))"
  # The tensor front's tests by binary (their ctest names, TorchCuda.* and VerifyLogits.*, are not matched above):
  # the CUDA glue of the ops and of verify_logits against the CPU path, then memcheck on the engine entry.
  if [[ -x "$b2/bin/specdec_torch_tests" ]]; then
    "$b2/bin/specdec_torch_tests" >"$out/torch-tests.log" 2>&1
    note "specdec_torch_tests: rc=$? ($(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/torch-tests.log" | tr '\n' ' '))"
    if command -v compute-sanitizer >/dev/null 2>&1; then
      compute-sanitizer --tool memcheck --error-exitcode 1 "$b2/bin/specdec_torch_tests" --gtest_filter='VerifyLogits.Cuda*' \
        >"$out/memcheck-verify-logits.log" 2>&1
      note "memcheck (verify_logits CUDA): rc=$?"
    fi
  fi
  # The whole decoding loop with the target on the GPU: the custom-target example, then the CLI (the bundled GGUF when it
  # is here, else the committed draft checkpoint as the target with the GGUF's metadata for the tokenizer).
  if [[ -x "$b2/bin/specdec-custom-target" ]]; then
    "$b2/bin/specdec-custom-target" cuda >"$out/custom-target-cuda.txt" 2>&1
    note "specdec-custom-target cuda: rc=$? ($(tail -1 "$out/custom-target-cuda.txt"))"
  fi
  gen=("$b2/bin/specdec-generate" --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf")
  [[ -f "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]] ||
    gen=("$b2/bin/specdec-generate" --model "$root/models/smollm2-135m-draft" --tokenizer "$root/models/SmolLM2-135M-Instruct.metadata.gguf")
  if [[ -x "$b2/bin/specdec-generate" ]]; then
    for dtype in float32 bfloat16; do
      "${gen[@]}" --device cuda --dtype "$dtype" --compare --max-new-tokens 96 --json "$out/generate-cuda-$dtype.json" \
        >"$out/generate-cuda-$dtype.txt" 2>&1
      note "specdec-generate --device cuda --dtype $dtype: rc=$? ($(grep -E '^ngram' "$out/generate-cuda-$dtype.txt" | tr -s ' '))"
    done
  fi
  if [[ -x "$b2/bin/bench_verify_cuda_torch" ]]; then
    "$b2/bin/bench_verify_cuda_torch" --benchmark_filter="${bench_filter/cuda_chain/cuda_chain(_torch_ops)?}" \
      --benchmark_counters_tabular=true --benchmark_out="$out/bench-torch.json" --benchmark_out_format=json \
      >"$out/bench-torch.txt" 2>&1
    note "bench (torch ops): rc=$?"
  fi
else
  note "PyTorch not found: torch CUDA glue not checked"
fi
cat "$summary"
