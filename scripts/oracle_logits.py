#!/usr/bin/env python3
"""llama.cpp as the oracle of specdec's forward: the logits of every position of a few prompts from llama.cpp
(llama-cpp-python, logits_all) and from specdec's packed CPU forward (specdec-logits-tool), on the same GGUF file.
Prints per model the top-1 agreement and the max / mean |logit difference| over all positions, and per prompt the
worst position. Run by scripts/oracle-logits.sh (see docs/models.md).

usage: oracle_logits.py --tool PATH [--text PROMPT]... [--prompts N] [--length T] [--seed S] [--json FILE] MODEL.gguf...

With --text the prompts are texts, tokenized by llama.cpp (BOS and special tokens as llama.cpp adds them); without, N
seeded random token-id prompts of T tokens (for the synthetic models, whose vocabulary has no meaning).
"""
import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np


def llama_cpp_logits(model, prompts, n_ctx):
    from llama_cpp import Llama

    llm = Llama(model_path=str(model), logits_all=True, n_ctx=n_ctx, n_batch=n_ctx, verbose=False)
    out = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        out.append(np.array(llm.scores[: len(ids)], dtype=np.float32))
    return llm, out


def specdec_logits(tool, model, prompts, vocab):
    with tempfile.TemporaryDirectory() as tmp:
        ids_text = "".join(" ".join(str(i) for i in ids) + "\n" for ids in prompts)
        subprocess.run([str(tool), str(model), tmp], input=ids_text, text=True, check=True)
        return [np.fromfile(Path(tmp) / f"logits_{i}.f32", dtype=np.float32).reshape(len(ids), vocab)
                for i, ids in enumerate(prompts)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+", type=Path)
    ap.add_argument("--tool", required=True, type=Path)
    ap.add_argument("--text", action="append", default=[])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = []
    for model in args.models:
        if args.text:
            from llama_cpp import Llama

            vocab_llm = Llama(model_path=str(model), vocab_only=True, verbose=False)
            prompts = [vocab_llm.tokenize(t.encode(), add_bos=True, special=True) for t in args.text]
            del vocab_llm
        else:
            rng = np.random.default_rng(args.seed)
            prompts = None  # drawn once the vocabulary size is known
        n_ctx = 512
        if prompts is None:
            from llama_cpp import Llama

            vocab = Llama(model_path=str(model), vocab_only=True, verbose=False).n_vocab()
            prompts = [[1] + rng.integers(3, vocab, args.length - 1).tolist() for _ in range(args.prompts)]
        n_ctx = max(n_ctx, max(len(p) for p in prompts) + 8)
        llm, ref = llama_cpp_logits(model, prompts, n_ctx)
        vocab = llm.n_vocab()
        del llm
        ours = specdec_logits(args.tool, model, prompts, vocab)
        positions = agree = 0
        max_diff, sum_diff, count = 0.0, 0.0, 0
        max_gap = 0.0  # over the positions whose top-1 differs: llama.cpp's logit of its top-1 minus that of specdec's
        per_prompt = []
        for i, (a, b) in enumerate(zip(ours, ref)):
            d = np.abs(a - b)
            top_a, top_b = a.argmax(-1), b.argmax(-1)
            positions += len(a)
            agree += int((top_a == top_b).sum())
            for t in np.nonzero(top_a != top_b)[0]:
                max_gap = max(max_gap, float(b[t, top_b[t]] - b[t, top_a[t]]))
            max_diff = max(max_diff, float(d.max()))
            sum_diff += float(d.sum())
            count += d.size
            worst = int(d.max(-1).argmax())
            per_prompt.append({"tokens": len(a), "top1_agree": int((top_a == top_b).sum()), "max_abs_diff": float(d.max()),
                               "mean_abs_diff": float(d.mean()), "worst_position": worst,
                               "max_abs_logit": float(np.abs(b).max()),
                               "position_max_abs_diff": [float(x) for x in d.max(-1)],
                               "position_mean_abs_diff": [float(x) for x in d.mean(-1)],
                               "position_top1_agree": [bool(x) for x in top_a == top_b]})
        summary = {"model": str(model), "prompts": len(prompts), "positions": positions, "top1_agree": agree,
                   "max_abs_diff": max_diff, "mean_abs_diff": sum_diff / count, "max_top1_gap": max_gap,
                   "per_prompt": per_prompt}
        results.append(summary)
        print(f"{model.name}: {len(prompts)} prompts, {positions} positions: top-1 {agree}/{positions}, "
              f"|diff| max {max_diff:.4g} mean {sum_diff / count:.4g}"
              + (f"; where top-1 differs, llama.cpp's two logits are within {max_gap:.3g}" if agree < positions else ""))
        for j, p in enumerate(per_prompt):
            print(f"  prompt {j}: {p['tokens']} tokens, top-1 {p['top1_agree']}/{p['tokens']}, |diff| max "
                  f"{p['max_abs_diff']:.4g} (position {p['worst_position']}) mean {p['mean_abs_diff']:.4g}; "
                  f"max |logit| {p['max_abs_logit']:.3g}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
