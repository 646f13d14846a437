#!/usr/bin/env python3
"""llama.cpp as the oracle of specdec's forward: the logits of every position of a few prompts from llama.cpp
(llama-cpp-python, logits_all) and from specdec's packed CPU forward (specdec-logits-tool), on the same GGUF file and the
same token ids. Prints per model the top-1 agreement, the max / mean |logit difference| and the mean KL divergence
KL(llama.cpp || specdec) over all positions, and per prompt the worst position. Run by scripts/oracle-logits.sh (see
docs/models.md).

usage: oracle_logits.py --tool PATH [--text PROMPT]... [--prompts N] [--length T] [--seed S] [--json FILE]
                        [--quantize TYPE,... --source GGUF --work DIR] [--reference] [MODEL.gguf...]

With --text the prompts are texts, tokenized by llama.cpp (BOS and special tokens as llama.cpp adds them); without, N
seeded random token-id prompts of T tokens (for the synthetic models, whose vocabulary has no meaning).
--quantize: first requantises --source into each llama.cpp file type with llama.cpp's own quantiser
(llama_model_quantize, as llama-quantize does; allow_requantize), into --work, and compares those files too.
--reference (llama files): also a float32 NumPy forward of the same dequantised weights (scripts/validate_model.py's)
and specdec with one activation plane (SPECDEC_ACTIVATION_BITS=8) beside the default: the mean KL divergence of
llama.cpp, specdec-1p and specdec-2p from the float forward (the activation-precision decision).
Every model also gets llama.cpp's logits of the same ids evaluated one token at a time: how far llama.cpp's batched
logits are from its own decode's (its kernels differ by batch size), the floor of any agreement with llama.cpp.
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))


class quiet_fds:
    """Sends what C code writes to stdout and stderr (llama.cpp's quantiser log) to a file while active."""

    def __init__(self, log):
        self.log = log

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        self.f = open(self.log, "ab")
        os.dup2(self.f.fileno(), 1)
        os.dup2(self.f.fileno(), 2)

    def __exit__(self, *exc):
        os.dup2(self.saved[0], 1)
        os.dup2(self.saved[1], 2)
        for fd in self.saved:
            os.close(fd)
        self.f.close()


def quantize(src, dst, ftype_name):
    import llama_cpp

    const = "LLAMA_FTYPE_ALL_F32" if ftype_name == "F32" else f"LLAMA_FTYPE_MOSTLY_{ftype_name}"
    if not hasattr(llama_cpp, const):
        raise SystemExit(f"oracle-logits: --quantize: llama.cpp has no file type {ftype_name!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, const)
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0 or not dst.exists():
        raise SystemExit(f"oracle-logits: llama_model_quantize {src} -> {ftype_name} failed ({rc}; see the log in --work)")


def matrix_types(path):
    import gguf

    counts = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        if len(t.shape) >= 2 and int(t.shape[1]) > 1:
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return ",".join(f"{k}:{v}" for k, v in sorted(counts.items()))


def architecture(path):
    import gguf

    f = gguf.GGUFReader(str(path)).fields.get("general.architecture")
    return None if f is None else f.contents()


def llama_cpp_logits(model, prompts, n_ctx, n_batch=None):
    """llama.cpp's logits of every position; the prompt in one batch, or in batches of n_batch tokens."""
    from llama_cpp import Llama

    n_batch = n_batch or n_ctx
    llm = Llama(model_path=str(model), logits_all=True, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, verbose=False)
    out = []
    for ids in prompts:
        llm.reset()
        llm.eval(ids)
        out.append(np.array(llm.scores[: len(ids)], dtype=np.float32))
    return llm, out


def specdec_logits(tool, model, prompts, vocab, activation_bits=None):
    env = dict(os.environ)
    if activation_bits:
        env["SPECDEC_ACTIVATION_BITS"] = activation_bits
    with tempfile.TemporaryDirectory() as tmp:
        ids_text = "".join(" ".join(str(i) for i in ids) + "\n" for ids in prompts)
        subprocess.run([str(tool), str(model), tmp], input=ids_text, text=True, check=True, env=env)
        return [np.fromfile(Path(tmp) / f"logits_{i}.f32", dtype=np.float32).reshape(len(ids), vocab)
                for i, ids in enumerate(prompts)]


def top1_agreement(a, b):
    """Positions whose top-1 token is the same in a and b (lists of [T, V]), and their count."""
    return (int(sum(int((x.argmax(-1) == y.argmax(-1)).sum()) for x, y in zip(a, b))),
            sum(len(x) for x in a))


def mean_kl(ref, got):
    """Mean over positions of KL(softmax(ref) || softmax(got)); ref, got: lists of [T, V]."""
    r = np.concatenate(ref).astype(np.float64)
    g = np.concatenate(got).astype(np.float64)
    lr = r - r.max(1, keepdims=True)
    lr -= np.log(np.exp(lr).sum(1, keepdims=True))
    lg = g - g.max(1, keepdims=True)
    lg -= np.log(np.exp(lg).sum(1, keepdims=True))
    return float((np.exp(lr) * (lr - lg)).sum(1).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--tool", required=True, type=Path)
    ap.add_argument("--text", action="append", default=[])
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--length", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quantize", default="")
    ap.add_argument("--source", type=Path)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "specdec-oracle-logits")
    ap.add_argument("--reference", action="store_true")
    args = ap.parse_args()
    models = list(args.models)
    for name in filter(None, args.quantize.split(",")):
        if args.source is None:
            raise SystemExit("oracle-logits: --quantize needs --source")
        args.work.mkdir(parents=True, exist_ok=True)
        dst = args.work / f"{args.source.stem}.requant-{name}.gguf"
        if not dst.exists():
            t0 = time.time()
            with quiet_fds(args.work / "quantize.log"):
                quantize(args.source, dst, name)
            print(f"oracle-logits: quantised {dst.name} in {time.time() - t0:.0f} s", file=sys.stderr)
        models.append(dst)
    if not models:
        raise SystemExit("oracle-logits: no model (pass GGUF files or --quantize)")
    results = []
    for model in models:
        from llama_cpp import Llama

        if args.text:
            vocab_llm = Llama(model_path=str(model), vocab_only=True, verbose=False)
            prompts = [vocab_llm.tokenize(t.encode(), add_bos=True, special=True) for t in args.text]
            del vocab_llm
        else:
            rng = np.random.default_rng(args.seed)
            vocab = Llama(model_path=str(model), vocab_only=True, verbose=False).n_vocab()
            prompts = [[1] + rng.integers(3, vocab, args.length - 1).tolist() for _ in range(args.prompts)]
        n_ctx = max(512, max(len(p) for p in prompts) + 8)
        llm, ref = llama_cpp_logits(model, prompts, n_ctx)
        vocab = llm.n_vocab()
        del llm
        ours = specdec_logits(args.tool, model, prompts, vocab)
        positions = agree = 0
        max_diff, sum_diff, count = 0.0, 0.0, 0
        max_gap = 0.0  # over the positions whose top-1 differs: llama.cpp's logit of its top-1 minus that of specdec's
        per_prompt = []
        for a, b in zip(ours, ref):
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
        summary = {"model": str(model), "matrix_types": matrix_types(model), "prompts": len(prompts),
                   "positions": positions, "top1_agree": agree, "max_abs_diff": max_diff,
                   "mean_abs_diff": sum_diff / count, "kl_mean": mean_kl(ref, ours), "max_top1_gap": max_gap,
                   "per_prompt": per_prompt}
        line = (f"{model.name}: {len(prompts)} prompts, {positions} positions: top-1 {agree}/{positions}, "
                f"|diff| max {max_diff:.4g} mean {sum_diff / count:.4g}, KL {summary['kl_mean']:.3g}"
                + (f"; where top-1 differs, llama.cpp's two logits are within {max_gap:.3g}" if agree < positions else ""))
        if args.reference:
            if architecture(model) != "llama":
                line += "; no float32 reference (llama files only)"
            else:
                from validate_model import NumpyLlama

                f32 = NumpyLlama(str(model))
                fref = [f32.forward(p, f32.new_cache()) for p in prompts]
                one = specdec_logits(args.tool, model, prompts, vocab, activation_bits="8")
                # The run above is two planes unless the caller's SPECDEC_ACTIVATION_BITS said otherwise.
                default_bits = os.environ.get("SPECDEC_ACTIVATION_BITS", "16") == "16"
                two = ours if default_bits else specdec_logits(args.tool, model, prompts, vocab, activation_bits="16")
                summary["kl_from_float32"] = {"llama.cpp": mean_kl(fref, ref), "specdec_1_plane": mean_kl(fref, one),
                                              "specdec_2_planes": mean_kl(fref, two)}
                k = summary["kl_from_float32"]
                line += (f"; KL from float32: llama.cpp {k['llama.cpp']:.3g}, specdec 1 plane {k['specdec_1_plane']:.3g},"
                         f" 2 planes {k['specdec_2_planes']:.3g}")
                spec_bits = os.environ.get("SPECDEC_ACTIVATION_BITS", "16")
                if spec_bits not in ("16", "8"):  # a mixed setting (per kind): the run above
                    k[f"specdec_{spec_bits}"] = mean_kl(fref, ours)
                    line += f", SPECDEC_ACTIVATION_BITS={spec_bits} {k[f'specdec_{spec_bits}']:.3g}"
        # llama.cpp against itself: the same ids one token at a time (as a decode runs) instead of in one batch. Its
        # products and attention take other kernels by batch size, so this is the agreement llama.cpp's own logits
        # keep with themselves, the floor for any other implementation's agreement with them.
        llm1, ref1 = llama_cpp_logits(model, prompts, n_ctx, n_batch=1)
        del llm1
        self_agree, _ = top1_agreement(ref1, ref)
        summary["llama_cpp_1_token_vs_batch"] = {
            "top1_agree": self_agree, "mean_abs_diff": float(np.mean(np.abs(np.concatenate(ref1) - np.concatenate(ref)))),
            "kl_mean": mean_kl(ref, ref1)}
        summary["top1_agree_vs_llama_cpp_1_token"] = top1_agreement(ours, ref1)[0]
        line += (f"; llama.cpp one token at a time against its batch: top-1 {self_agree}/{positions}, |diff| mean "
                 f"{summary['llama_cpp_1_token_vs_batch']['mean_abs_diff']:.4g}; specdec against it: top-1 "
                 f"{summary['top1_agree_vs_llama_cpp_1_token']}/{positions}")
        results.append(summary)
        print(f"{line} [{summary['matrix_types']}]", flush=True)
        for j, p in enumerate(per_prompt):
            print(f"  prompt {j}: {p['tokens']} tokens, top-1 {p['top1_agree']}/{p['tokens']}, |diff| max "
                  f"{p['max_abs_diff']:.4g} (position {p['worst_position']}) mean {p['mean_abs_diff']:.4g}; "
                  f"max |logit| {p['max_abs_logit']:.3g}", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
