#!/usr/bin/env python3
"""Writes small GGUF files of each architecture llama_config_from_gguf reads with PyPI's `gguf`, llama.cpp's own writer
(the key and tensor names come from its constants, the metadata from the GGUFWriter calls its converter makes), and
expected.json with the config each must give. Read by LlamaConfigGguf.FilesWrittenByGgufPy (tests/models/io.cmake).
Without the `gguf` package it writes nothing and says so; the test then skips.

usage: write_gguf_fixtures.py OUT_DIR
"""
import json
import math
import sys
from pathlib import Path

HIDDEN, FF, HEADS, KV_HEADS, HEAD_DIM, LAYERS, VOCAB = 64, 128, 4, 2, 16, 12, 32


def write(out, arch, layer_tensors, extra_kv=None, extra_tensors=None):
    import numpy as np
    import gguf

    w = gguf.GGUFWriter(str(out / f"{arch}.gguf"), arch)
    w.add_context_length(4096)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(VOCAB)
    for call in extra_kv or []:
        call(w)
    names = gguf.TENSOR_NAMES
    T = gguf.MODEL_TENSOR
    w.add_tensor(names[T.TOKEN_EMBD] + ".weight", np.zeros((VOCAB, HIDDEN), dtype=np.float32))
    w.add_tensor(names[T.OUTPUT_NORM] + ".weight", np.ones(HIDDEN, dtype=np.float32))
    for bid in range(LAYERS):
        for tensor, suffix, shape in layer_tensors:
            w.add_tensor(names[tensor].format(bid=bid) + "." + suffix, np.zeros(shape, dtype=np.float32))
    for name, data in extra_tensors or []:
        w.add_tensor(name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    try:
        import gguf  # noqa: F401
        import numpy as np
    except ImportError:
        print("write_gguf_fixtures: the PyPI package gguf is not installed; no fixtures written")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    T = gguf.MODEL_TENSOR
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    base = [(T.ATTN_NORM, "weight", (HIDDEN,)), (T.ATTN_Q, "weight", (q, HIDDEN)), (T.ATTN_K, "weight", (kv, HIDDEN)),
            (T.ATTN_V, "weight", (kv, HIDDEN)), (T.ATTN_OUT, "weight", (HIDDEN, q)), (T.FFN_NORM, "weight", (HIDDEN,)),
            (T.FFN_GATE, "weight", (FF, HIDDEN)), (T.FFN_UP, "weight", (FF, HIDDEN)), (T.FFN_DOWN, "weight", (HIDDEN, FF))]
    biases = [(T.ATTN_Q, "bias", (q,)), (T.ATTN_K, "bias", (kv,)), (T.ATTN_V, "bias", (kv,))]
    qk_norm = [(T.ATTN_Q_NORM, "weight", (HEAD_DIM,)), (T.ATTN_K_NORM, "weight", (HEAD_DIM,))]
    post = [(T.ATTN_POST_NORM, "weight", (HIDDEN,)), (T.FFN_POST_NORM, "weight", (HIDDEN,))]
    factors = np.array([1.0, 1.0, 1.5, 2.0, 4.0, 8.0, 8.0, 8.0], dtype=np.float32)

    write(out, "llama", base, extra_tensors=[(gguf.TENSOR_NAMES[T.ROPE_FREQS] + ".weight", factors)])
    write(out, "qwen2", base + biases)
    write(out, "qwen3", base + qk_norm)
    write(out, "gemma3", base + qk_norm + post,
          extra_kv=[lambda w: w.add_sliding_window(512), lambda w: w.add_rope_freq_base_swa(20000.0),
                    lambda w: w.add_final_logit_softcapping(30.0)])
    common = {"hidden_size": HIDDEN, "num_layers": LAYERS, "num_heads": HEADS, "num_kv_heads": KV_HEADS,
              "head_dim": HEAD_DIM, "rope_theta": 1e6, "vocab_size": VOCAB}
    none = {"attention_bias": False, "qk_norm": False, "post_attention_norm": False, "post_ffn_norm": False,
            "gelu": False, "embedding_scale": 1.0, "sliding_window": 0, "sliding_rope_theta": 0.0,
            "final_logit_softcap": 0.0, "rope_freq_factors": [], "gguf_qk_permuted": False}
    expected = {
        "llama": {**common, **none, "rope_freq_factors": factors.tolist(), "gguf_qk_permuted": True},
        "qwen2": {**common, **none, "attention_bias": True},
        "qwen3": {**common, **none, "qk_norm": True},
        "gemma3": {**common, **none, "qk_norm": True, "post_attention_norm": True, "post_ffn_norm": True, "gelu": True,
                   "embedding_scale": float(np.sqrt(np.float32(HIDDEN))), "sliding_window": 512,
                   "sliding_rope_theta": 20000.0, "final_logit_softcap": 30.0,
                   "sliding_layers": [il % 6 != 5 for il in range(LAYERS)]},
    }
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"write_gguf_fixtures: {len(expected)} files in {out} (gguf {getattr(gguf, '__version__', '?')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
