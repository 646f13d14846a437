#!/usr/bin/env python3
"""Independent check of specdec's Llama forward against a NumPy forward of the same GGUF file.

The NumPy model is written from the GGUF/llama.cpp conventions, not from specdec's code: tensors are dequantised by the `gguf`
package, and attn_q/attn_k are used as stored, with llama.cpp's interleaved-pair rotary embedding ("rope norm": pairs
(2i, 2i+1) rotate), whereas specdec un-permutes them at load and uses rotate_half. Agreement therefore also checks the
un-permutation.

specdec's side comes from the helper `specdec-dump-logits` (tests/models/test_llama_dump_logits.cpp), which tokenizes the
prompts with specdec's tokenizer and writes the ids, teacher-forced logits and a greedy continuation for each prompt.

Criteria: top-1 agreement >= 99% over all teacher-forced positions of the prompts, and identical greedy continuations of
--greedy tokens (default 32) for every prompt. Exit status 0 when both hold.
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np
import gguf

SYSTEM = "<|im_start|>system\\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\\n"
PROMPTS = [
    SYSTEM + "<|im_start|>user\\nWhat is the capital of France? Answer in one word.<|im_end|>\\n<|im_start|>assistant\\n",
    SYSTEM + "<|im_start|>user\\nWrite a short poem about the sea.<|im_end|>\\n<|im_start|>assistant\\n",
    SYSTEM + "<|im_start|>user\\nExplain in two sentences why the sky is blue.<|im_end|>\\n<|im_start|>assistant\\n",
    "def fibonacci(n):\\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\\n",
    "The history of the Roman Empire spans more than a thousand years, beginning with",
]


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return default if f is None else f.contents()


class NumpyLlama:
    def __init__(self, path):
        r = gguf.GGUFReader(path)
        arch = field(r, "general.architecture")
        if arch != "llama":
            raise SystemExit(f"validate_model: expected a llama GGUF, got architecture {arch!r}")
        self.n_layers = int(field(r, f"{arch}.block_count"))
        self.n_head = int(field(r, f"{arch}.attention.head_count"))
        self.n_kv = int(field(r, f"{arch}.attention.head_count_kv", self.n_head))
        self.hidden = int(field(r, f"{arch}.embedding_length"))
        self.head_dim = int(field(r, f"{arch}.rope.dimension_count", self.hidden // self.n_head))
        self.eps = float(field(r, f"{arch}.attention.layer_norm_rms_epsilon"))
        self.theta = float(field(r, f"{arch}.rope.freq_base", 10000.0))
        self.w = {}
        for t in r.tensors:
            a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32)
            self.w[t.name] = np.ascontiguousarray(a.reshape(tuple(int(d) for d in reversed(t.shape))))
        self.out = self.w.get("output.weight", self.w["token_embd.weight"])
        # Interleaved rotary: pair i = (x[2i], x[2i+1]) rotates by pos * theta^(-2i/d).
        self.inv_freq = (1.0 / self.theta ** (np.arange(0, self.head_dim, 2, dtype=np.float64) / self.head_dim))

    def rms(self, x, w):
        return (x / np.sqrt(np.mean(x.astype(np.float32) ** 2, axis=-1, keepdims=True) + self.eps)) * w

    def rope(self, x, pos):  # x [T, heads, d], pos [T]
        ang = np.outer(pos, self.inv_freq)
        c = np.cos(ang).astype(np.float32)[:, None, :]
        s = np.sin(ang).astype(np.float32)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        y = np.empty_like(x)
        y[..., 0::2] = x0 * c - x1 * s
        y[..., 1::2] = x0 * s + x1 * c
        return y

    def new_cache(self):
        return [[np.zeros((0, self.n_kv, self.head_dim), np.float32)] * 2 for _ in range(self.n_layers)]

    def forward(self, tokens, cache):
        """Logits [T, V] for `tokens` following the cached positions; appends their keys/values to `cache`."""
        T = len(tokens)
        p0 = cache[0][0].shape[0]
        pos = np.arange(p0, p0 + T)
        x = self.w["token_embd.weight"][np.asarray(tokens)]
        group = self.n_head // self.n_kv
        mask = np.where(np.arange(p0 + T)[None, :] <= pos[:, None], 0.0, -np.inf).astype(np.float32)
        for l in range(self.n_layers):
            b = f"blk.{l}."
            h = self.rms(x, self.w[b + "attn_norm.weight"])
            q = self.rope((h @ self.w[b + "attn_q.weight"].T).reshape(T, self.n_head, self.head_dim), pos)
            k = self.rope((h @ self.w[b + "attn_k.weight"].T).reshape(T, self.n_kv, self.head_dim), pos)
            v = (h @ self.w[b + "attn_v.weight"].T).reshape(T, self.n_kv, self.head_dim)
            cache[l][0] = np.concatenate([cache[l][0], k])
            cache[l][1] = np.concatenate([cache[l][1], v])
            K = np.repeat(cache[l][0], group, axis=1)  # [S, heads, d]
            V = np.repeat(cache[l][1], group, axis=1)
            scores = np.einsum("thd,shd->hts", q, K) / np.float32(np.sqrt(self.head_dim)) + mask
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            o = np.einsum("hts,shd->thd", probs, V).reshape(T, self.n_head * self.head_dim)
            x = x + o @ self.w[b + "attn_output.weight"].T
            h = self.rms(x, self.w[b + "ffn_norm.weight"])
            g = h @ self.w[b + "ffn_gate.weight"].T
            u = h @ self.w[b + "ffn_up.weight"].T
            x = x + ((g / (1.0 + np.exp(-g))) * u) @ self.w[b + "ffn_down.weight"].T
        return self.rms(x, self.w["output_norm.weight"]) @ self.out.T


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dump", required=True, help="path of the specdec-dump-logits executable")
    ap.add_argument("--greedy", type=int, default=32)
    ap.add_argument("--out", default=None, help="directory for the dumped files (default: a temporary one)")
    args = ap.parse_args()

    out = pathlib.Path(args.out or tempfile.mkdtemp(prefix="specdec-validate-"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    t0 = time.time()
    subprocess.run([args.dump, args.model, str(out / "prompts.txt"), str(out), str(args.greedy)], check=True)
    print(f"specdec-dump-logits: {time.time() - t0:.1f} s")

    t0 = time.time()
    model = NumpyLlama(args.model)
    print(f"numpy model loaded: {time.time() - t0:.1f} s")
    agree = total = 0
    greedy_ok = 0
    worst = 0.0
    for i in range(len(PROMPTS)):
        ids = [int(t) for t in (out / f"ids_{i}.txt").read_text().split()]
        ours = np.fromfile(out / f"logits_{i}.f32", dtype=np.float32).reshape(len(ids), -1)
        cache = model.new_cache()
        ref = model.forward(ids, cache)
        match = int((ref.argmax(-1) == ours.argmax(-1)).sum())
        agree += match
        total += len(ids)
        diff = float(np.abs(ref - ours).max())
        worst = max(worst, diff)
        # Greedy continuation, one token per forward, from the prompt's last logits.
        expected = [int(t) for t in (out / f"greedy_{i}.txt").read_text().split()]
        nxt = int(ref[-1].argmax())
        mine = []
        for _ in range(args.greedy):
            mine.append(nxt)
            nxt = int(model.forward([nxt], cache)[-1].argmax())
        same = next((j for j, (a, b) in enumerate(zip(mine, expected)) if a != b), min(len(mine), len(expected)))
        ok = mine == expected and len(expected) == args.greedy
        greedy_ok += ok
        print(f"prompt {i}: {len(ids)} tokens, top-1 agreement {match}/{len(ids)}, max |logit diff| {diff:.2e} "
              f"(logit range {float(np.abs(ref).max()):.1f}), greedy {args.greedy} tokens "
              f"{'equal' if ok else f'differ from token {same}'}")
    rate = agree / total
    print(f"teacher forcing: top-1 agreement {agree}/{total} = {100 * rate:.2f}% (criterion >= 99%)")
    print(f"greedy: {greedy_ok}/{len(PROMPTS)} prompts with equal {args.greedy}-token continuations (criterion: all)")
    print(f"max |logit difference| over all positions: {worst:.2e}")
    passed = rate >= 0.99 and greedy_ok == len(PROMPTS)
    print("PASS" if passed else "FAIL")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
