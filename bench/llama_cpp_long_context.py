#!/usr/bin/env python3
"""llama.cpp's side of the long-context figures in docs/cpu-forward.md (not in CI): the median 1-token and 6-token
`llama_decode` after a context of C cached tokens (KV cache rolled back after each), and the prefill of an N-token
prompt fed in 512-token batches as llama.cpp's CLI feeds one, on the same GGUF and thread count as bench_model's
BM_Decode/context:C and BM_Prefill/tokens:N. Run with the virtual environment bench/compare-llama-cpp.sh builds:

  .deps/llama-venv/bin/python bench/llama_cpp_long_context.py --model models/SmolLM2-135M-Instruct.Q4_1.gguf \\
      --threads 2 --contexts 1024 4096 --prefill 512 4096
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_llama_cpp as c  # noqa: E402  (its model loading and forward timing)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--contexts", type=int, nargs="*", default=[1024, 4096])
    p.add_argument("--prefill", type=int, nargs="*", default=[512, 4096])
    p.add_argument("--repeats", type=int, default=10)
    a = p.parse_args()
    c.N_CTX = max([*a.contexts, *a.prefill, 0]) + 2 * c.VERIFY_TOKENS + 64
    llm = c.open_llama(a.model, a.threads)
    for context in a.contexts:
        one = c.forward_cost(llm, context, 1, a.repeats)
        six = c.forward_cost(llm, context, c.VERIFY_TOKENS, a.repeats)
        print(f"context {context}: 1-token forward {one['median_ms']:.2f} ms, {c.VERIFY_TOKENS}-token "
              f"{six['median_ms']:.2f} ms, r {six['median_ms'] / one['median_ms']:.2f}", flush=True)
    ctx, batch, vocab = llm._ctx, llm._batch, llm.n_vocab()
    for n in a.prefill:
        ids = [(i * 7919 + 13) % vocab for i in range(n)]  # bench_model's synthetic ids
        times = []
        for _ in range(3):  # the first is a warm-up
            ctx.kv_cache_clear()
            t0 = time.perf_counter()
            for i in range(0, n, llm.n_batch):
                batch.set_batch(ids[i:i + llm.n_batch], n_past=i, logits_all=False)
                ctx.decode(batch)
            c.synchronize(llm)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times[1:])
        print(f"prefill of {n} tokens: {med:.2f} s, {n / med:.0f} tokens/s", flush=True)
    ctx.kv_cache_clear()


if __name__ == "__main__":
    main()
