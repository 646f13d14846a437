#!/usr/bin/env python3
"""llama.cpp as the oracle of specdec's forward: teacher-forced logits at every position of a few prompts, from llama.cpp
(llama-cpp-python) and from specdec (specdec-dump-logits) on the same GGUF and the same token ids. For each file: top-1
agreement, max and mean |difference| (in units of the reference's logit standard deviation as well), and the mean KL
divergence KL(llama.cpp || specdec). With --reference (llama files only), both are also measured against a float32 NumPy
forward of the same dequantised weights (scripts/validate_model.py's), and specdec runs twice, with one and with two int8
activation planes (SPECDEC_ACTIVATION_BITS=8 / 16): the data of the activation-precision decision.

--quantize TYPE,...: first requantises --source into each llama.cpp file type with llama.cpp's own quantiser
(llama_model_quantize, as llama-quantize does; allow_requantize), into --work.
"""
import argparse
import ctypes
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from validate_model import PROMPTS  # noqa: E402


class quiet_fds:
    """Sends what C code writes to stdout and stderr (llama.cpp's quantiser log) to a file while active."""

    def __init__(self, log: pathlib.Path):
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


def quantize(src: pathlib.Path, dst: pathlib.Path, ftype_name: str) -> None:
    import llama_cpp
    const = f"LLAMA_FTYPE_MOSTLY_{ftype_name}" if ftype_name not in ("F32", "ALL_F32") else "LLAMA_FTYPE_ALL_F32"
    if not hasattr(llama_cpp, const):
        raise SystemExit(f"oracle-logits: --quantize: llama.cpp has no file type {ftype_name!r}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, const)
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), ctypes.byref(params))
    if rc != 0 or not dst.exists():
        raise SystemExit(f"oracle-logits: llama_model_quantize {src} -> {ftype_name} failed ({rc})")


def tensor_types(path: pathlib.Path) -> dict:
    import gguf
    counts: dict = {}
    for t in gguf.GGUFReader(str(path)).tensors:
        if len(t.shape) >= 2 and int(t.shape[1]) > 1:  # matrices only
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return counts


def specdec_logits(dump: str, model: pathlib.Path, prompts: pathlib.Path, out: pathlib.Path, bits: str):
    env = dict(os.environ, SPECDEC_ACTIVATION_BITS=bits)
    subprocess.run([dump, str(model), str(prompts), str(out), "0"], check=True, env=env, stdout=subprocess.DEVNULL)
    rows = []
    for i in range(len(PROMPTS)):
        ids = [int(t) for t in (out / f"ids_{i}.txt").read_text().split()]
        logits = np.fromfile(out / f"logits_{i}.f32", dtype=np.float32).reshape(len(ids), -1)
        rows.append((ids, logits))
    return rows


def llama_cpp_logits(model: pathlib.Path, ids_per_prompt, n_threads: int):
    from llama_cpp import Llama
    llm = Llama(model_path=str(model), logits_all=True, n_ctx=512, n_batch=512, n_threads=n_threads, verbose=False)
    out = []
    for ids in ids_per_prompt:
        llm.reset()
        llm.eval(ids)
        out.append(np.array(llm.scores[: len(ids)], dtype=np.float32))
    return out


def compare(ref, got) -> dict:
    """ref, got: lists of [T, V] arrays."""
    r = np.concatenate(ref).astype(np.float64)
    g = np.concatenate(got).astype(np.float64)
    d = np.abs(r - g)
    std = float(r.std(axis=1).mean())
    lr = r - r.max(axis=1, keepdims=True)
    lr -= np.log(np.exp(lr).sum(axis=1, keepdims=True))
    lg = g - g.max(axis=1, keepdims=True)
    lg -= np.log(np.exp(lg).sum(axis=1, keepdims=True))
    kl = (np.exp(lr) * (lr - lg)).sum(axis=1)
    return {"positions": int(r.shape[0]), "top1": float((r.argmax(1) == g.argmax(1)).mean()), "max_abs": float(d.max()),
            "mean_abs": float(d.mean()), "mean_abs_over_std": float(d.mean() / std), "kl_mean": float(kl.mean()),
            "kl_max": float(kl.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=[], help="GGUF to compare (repeatable)")
    ap.add_argument("--quantize", default="", help="comma-separated llama.cpp file types to requantise --source into")
    ap.add_argument("--source", help="GGUF --quantize starts from")
    ap.add_argument("--work", required=True, help="directory for requantised files and dumps")
    ap.add_argument("--dump", required=True, help="path of specdec-dump-logits")
    ap.add_argument("--reference", action="store_true", help="also a float32 NumPy forward (llama files) and one plane")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the table's rows here")
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    prompts = work / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    models = [pathlib.Path(m) for m in a.model]
    for name in filter(None, a.quantize.split(",")):
        if not a.source:
            raise SystemExit("oracle-logits: --quantize needs --source")
        dst = work / f"{pathlib.Path(a.source).stem}.requant-{name}.gguf"
        if not dst.exists():
            t0 = time.time()
            with quiet_fds(work / "quantize.log"):
                quantize(pathlib.Path(a.source), dst, name)
            print(f"oracle-logits: quantised {dst.name} in {time.time() - t0:.0f} s", file=sys.stderr)
        models.append(dst)
    results = []
    header = (f"{'file':44} {'matrix types':34} {'compared':24} {'top-1':>7} {'max|d|':>8} {'mean|d|':>8} {'/std':>7} "
              f"{'KL mean':>9}")
    print(header)
    for m in models:
        d2 = specdec_logits(a.dump, m, prompts, work / (m.stem + ".dump16"), "16")
        ids = [r[0] for r in d2]
        lc = llama_cpp_logits(m, ids, a.threads)
        types = ",".join(f"{k}:{v}" for k, v in sorted(tensor_types(m).items()))
        rows = [("llama.cpp", "specdec", lc, [r[1] for r in d2])]
        if a.reference:
            from validate_model import NumpyLlama
            ref_model = NumpyLlama(str(m))
            ref = [ref_model.forward(i, ref_model.new_cache()) for i in ids]
            d1 = specdec_logits(a.dump, m, prompts, work / (m.stem + ".dump8"), "8")
            rows = [("llama.cpp", "specdec-2p", lc, [r[1] for r in d2]), ("float32", "llama.cpp", ref, lc),
                    ("float32", "specdec-1p", ref, [r[1] for r in d1]), ("float32", "specdec-2p", ref, [r[1] for r in d2])]
        for ref_name, got_name, ref, got in rows:
            c = compare(ref, got)
            c.update({"file": m.name, "types": types, "reference": ref_name, "compared": got_name})
            results.append(c)
            print(f"{m.name[:44]:44} {types[:34]:34} {got_name + ' vs ' + ref_name:24} {100 * c['top1']:6.2f}% "
                  f"{c['max_abs']:8.3f} {c['mean_abs']:8.4f} {c['mean_abs_over_std']:7.4f} {c['kl_mean']:9.2e}", flush=True)
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
