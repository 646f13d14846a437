#!/usr/bin/env python3
"""Writes small complete random-weight models of each GGUF architecture the Llama block runs, with PyPI's `gguf`
(llama.cpp's own writer: its key and tensor names, Q8_0 quantisation) and a small SentencePiece vocabulary, so that
llama.cpp loads them too (scripts/oracle-logits.sh compares both forwards' logits on them). Read by
LlamaArchsGguf.PackedForwardMatchesTheReferenceOnEachFile (tests/models/llama.cmake). Without the `gguf` package it
writes nothing and says so; the test then skips.

  llama-model.gguf          q/k rows in llama.cpp's permuted order, with q/k/v biases (their rows permuted alike)
  qwen2-model.gguf          q/k/v biases
  qwen3-model.gguf          QK-norm, head_dim 32 (q width 128 != hidden 64)
  gemma3-model.gguf         QK-norm, post-attention and post-MLP norms, GELU, embeddings * sqrt(hidden), tied output,
                            head_dim 256 with 2 heads and 1 kv head, 6 layers (five slide over a 4-token window, RoPE
                            base 10^4; layer 5 global, 10^6)
  gemma3-softcap-model.gguf the same block without sliding window, final logit soft-cap 10

usage: write_gguf_models.py OUT_DIR
"""
import sys
from pathlib import Path

VOCAB = 320  # 3 specials, 256 byte tokens, 61 pieces
HIDDEN, FF = 64, 128


def vocabulary():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    pieces = ["\u2581" + chr(ord("a") + i % 26) * (1 + i // 26) for i in range(VOCAB - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return tokens + pieces, scores, types


def permute(w, n_head):
    """llama.cpp's converter (convert_hf_to_gguf.py LlamaModel.permute): rotate_half rows -> interleaved pairs."""
    shape = w.shape
    return w.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def write(out, name, arch, *, layers, heads, kv_heads, head_dim, seed, biases=False, qk_norm=False, gemma=False,
          window=0, softcap=0.0, permute_qk=False, context=256, chat_template=None):
    import numpy as np
    import gguf

    rng = np.random.default_rng(seed)
    Q8 = gguf.GGMLQuantizationType.Q8_0

    def normal(shape, std, mean=0.0):
        return (mean + std * rng.standard_normal(shape)).astype(np.float32)

    w = gguf.GGUFWriter(str(out / f"{name}-model.gguf"), arch)
    w.add_context_length(context)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(layers)
    w.add_feed_forward_length(FF)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_freq_base(1e6)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_vocab_size(VOCAB)
    if window:
        w.add_sliding_window(window)
    if softcap:
        w.add_final_logit_softcapping(softcap)
    tokens, scores, types = vocabulary()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    if chat_template:
        w.add_chat_template(chat_template)

    def matrix(tensor_name, rows, cols, std, n_head=0):
        m = normal((rows, cols), std)
        if n_head:
            m = permute(m, n_head)
        w.add_tensor(tensor_name, gguf.quants.quantize(m, Q8), raw_dtype=Q8)

    def vector(tensor_name, n, std, mean=0.0, n_head=0):
        v = normal((n,), std, mean)
        if n_head:
            v = permute(v, n_head)
        w.add_tensor(tensor_name, v)

    q, kv = heads * head_dim, kv_heads * head_dim
    in_h, in_q, in_f = HIDDEN ** -0.5, q ** -0.5, FF ** -0.5
    matrix("token_embd.weight", VOCAB, HIDDEN, 1.0)
    vector("output_norm.weight", HIDDEN, 0.1, 1.0)
    if not gemma:
        matrix("output.weight", VOCAB, HIDDEN, in_h)
    for b in range(layers):
        p = f"blk.{b}."
        vector(p + "attn_norm.weight", HIDDEN, 0.1, 1.0)
        # Query/key weights larger than 1/sqrt(in) so attention is far from uniform and mask or RoPE errors show.
        matrix(p + "attn_q.weight", q, HIDDEN, 2 * in_h, heads if permute_qk else 0)
        matrix(p + "attn_k.weight", kv, HIDDEN, 2 * in_h, kv_heads if permute_qk else 0)
        matrix(p + "attn_v.weight", kv, HIDDEN, in_h)
        matrix(p + "attn_output.weight", HIDDEN, q, in_q)
        if biases:
            vector(p + "attn_q.bias", q, 0.5, 0.0, heads if permute_qk else 0)
            vector(p + "attn_k.bias", kv, 0.5, 0.0, kv_heads if permute_qk else 0)
            vector(p + "attn_v.bias", kv, 0.5)
        if qk_norm:
            vector(p + "attn_q_norm.weight", head_dim, 0.3, 1.0)
            vector(p + "attn_k_norm.weight", head_dim, 0.3, 1.0)
        if gemma:
            vector(p + "post_attention_norm.weight", HIDDEN, 0.1, 1.0)
            vector(p + "post_ffw_norm.weight", HIDDEN, 0.1, 1.0)
        vector(p + "ffn_norm.weight", HIDDEN, 0.1, 1.0)
        matrix(p + "ffn_gate.weight", FF, HIDDEN, in_h)
        matrix(p + "ffn_up.weight", FF, HIDDEN, in_h)
        matrix(p + "ffn_down.weight", HIDDEN, FF, in_f)
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
        import numpy  # noqa: F401
    except ImportError:
        print("write_gguf_models: the PyPI package gguf is not installed; no models written")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    common = dict(heads=4, kv_heads=2, head_dim=16)
    write(out, "llama", "llama", layers=2, seed=1, biases=True, permute_qk=True, **common)
    write(out, "qwen2", "qwen2", layers=2, seed=2, biases=True, **common)
    write(out, "qwen3", "qwen3", layers=2, seed=3, qk_norm=True, heads=4, kv_heads=2, head_dim=32)
    write(out, "gemma3", "gemma3", layers=6, seed=4, qk_norm=True, gemma=True, window=4, heads=2, kv_heads=1,
          head_dim=256)
    write(out, "gemma3-softcap", "gemma3", layers=2, seed=5, qk_norm=True, gemma=True, softcap=10.0, heads=4, kv_heads=2,
          head_dim=32)
    print(f"write_gguf_models: 5 models in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
