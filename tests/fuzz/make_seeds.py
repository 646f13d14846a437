#!/usr/bin/env python3
"""Writes the small GGUF seed files of tests/fuzz/corpus_gguf/ (run once; the outputs are committed)."""
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus_gguf")
os.makedirs(out, exist_ok=True)


def s(x):
    b = x.encode()
    return struct.pack("<Q", len(b)) + b


def kv(key, t, payload):
    return s(key) + struct.pack("<I", t) + payload


def arr(et, items):
    return struct.pack("<IQ", et, len(items)) + b"".join(items)


def gguf(kvs, tensors, version=3, align=32):
    h = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs)) + b"".join(kvs)
    off = 0
    data = b""
    for name, ne, t, blob in tensors:
        h += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", t, off)
        pad = (-len(blob)) % align
        data += blob + b"\0" * pad
        off += len(blob) + pad
    h += b"\0" * ((-len(h)) % align)
    return h + data


def half(v):
    return struct.pack("<e", v)


scalars = [
    kv("u8", 0, struct.pack("<B", 7)), kv("i8", 1, struct.pack("<b", -7)), kv("u16", 2, struct.pack("<H", 700)),
    kv("i16", 3, struct.pack("<h", -700)), kv("u32", 4, struct.pack("<I", 70000)), kv("i32", 5, struct.pack("<i", -70000)),
    kv("f32", 6, struct.pack("<f", 0.5)), kv("b", 7, b"\x01"), kv("s", 8, s("text")), kv("u64", 10, struct.pack("<Q", 1 << 40)),
    kv("i64", 11, struct.pack("<q", -(1 << 40))), kv("f64", 12, struct.pack("<d", 0.25)),
    kv("a", 9, arr(4, [struct.pack("<I", i) for i in range(3)])), kv("as", 9, arr(8, [s("x"), s("yz")])),
    kv("aa", 9, arr(9, [arr(0, [b"\x01"])])),
]
q8 = half(0.1) + bytes(range(32))
q40 = half(0.2) + bytes(range(16))
q41 = half(0.2) + half(-1.0) + bytes(range(16))
q4k = half(0.1) + half(0.05) + bytes(range(12)) + bytes(range(128))
q6k = bytes(range(128)) + bytes(range(64)) + bytes(range(16)) + half(0.01)
tensors = [
    ("f32", [4, 2], 0, struct.pack("<8f", *range(8))), ("f16", [4], 1, half(1) * 4), ("bf16", [2], 30, b"\x80\x3f" * 2),
    ("q8_0", [32], 8, q8), ("q4_0", [32], 2, q40), ("q4_1", [32], 3, q41), ("q4_k", [256], 12, q4k), ("q6_k", [256], 14, q6k),
]
open(os.path.join(out, "all_types.gguf"), "wb").write(gguf(scalars, tensors))
open(os.path.join(out, "v2_align64.gguf"), "wb").write(
    gguf([kv("general.alignment", 4, struct.pack("<I", 64))], tensors[:2], version=2, align=64))

# A tiny byte-level BPE tokenizer: 256 byte tokens, a few merges, one control token.
byte_cps = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
m, table = 0, {}
for b in range(256):
    if b in byte_cps:
        table[b] = chr(b)
    else:
        table[b] = chr(256 + m)
        m += 1
toks = [table[b] for b in range(256)] + ["Ġw", "or", "ld", "orld", "Ġworld", "<|im_start|>"]
merges = ["Ġ w", "o r", "l d", "or ld", "Ġw orld"]
types = [1] * (len(toks) - 1) + [3]
llama = [
    kv("general.architecture", 8, s("llama")), kv("llama.embedding_length", 4, struct.pack("<I", 8)),
    kv("llama.feed_forward_length", 4, struct.pack("<I", 16)), kv("llama.block_count", 4, struct.pack("<I", 1)),
    kv("llama.attention.head_count", 4, struct.pack("<I", 2)), kv("llama.attention.head_count_kv", 4, struct.pack("<I", 1)),
    kv("llama.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-5)),
    kv("tokenizer.ggml.model", 8, s("gpt2")), kv("tokenizer.ggml.pre", 8, s("smollm")),
    kv("tokenizer.ggml.tokens", 9, arr(8, [s(t) for t in toks])), kv("tokenizer.ggml.merges", 9, arr(8, [s(x) for x in merges])),
    kv("tokenizer.ggml.token_type", 9, arr(5, [struct.pack("<i", t) for t in types])),
    kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", len(toks) - 1)),
    kv("tokenizer.ggml.eos_token_id", 4, struct.pack("<I", 0)),
]
open(os.path.join(out, "tokenizer.gguf"), "wb").write(gguf(llama, []))
