#!/usr/bin/env python3
"""Writes the small seed files of the fuzz targets' corpora, tests/fuzz/corpus_<target>/ (run once; the outputs are committed;
inputs that once crashed a target are added to its corpus by hand as crash_*)."""
import json
import os
import struct
import sys

here = os.path.dirname(os.path.abspath(__file__))
root = sys.argv[1] if len(sys.argv) > 1 else here


def corpus(name):
    d = os.path.join(root, "corpus_" + name)
    os.makedirs(d, exist_ok=True)
    return d


def write(name, file, data):
    with open(os.path.join(corpus(name), file), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


out = corpus("gguf")


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


# --- safetensors: a header and its data section --------------------------------------------------------------------------------
def safetensors(entries, metadata=None, pad=True):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, blob in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(blob)]}
        data += blob
    h = json.dumps(header).encode()
    if pad:
        h += b" " * ((-(8 + len(h))) % 8)
    return struct.pack("<Q", len(h)) + h + data


write("safetensors", "all_dtypes.safetensors", safetensors([
    ("f32", "F32", [2, 3], struct.pack("<6f", 1.5, -2, 3.25, 0, 7, -0.5)), ("f16", "F16", [4], struct.pack("<4H", 0x3C00, 0xC000, 1, 0x7C00)),
    ("bf16", "BF16", [2], struct.pack("<2H", 0x3F80, 0xC040)), ("f64", "F64", [1], struct.pack("<d", 0.25)),
    ("i64", "I64", [1, 1], struct.pack("<q", -5)), ("i32", "I32", [2], struct.pack("<2i", 1, -1)), ("i16", "I16", [1], struct.pack("<h", 3)),
    ("i8", "I8", [2], b"\x01\xff"), ("u8", "U8", [3], b"abc"), ("bool", "BOOL", [2], b"\x00\x01"), ("empty", "F32", [0, 4], b""),
    ("scalar", "F32", [], struct.pack("<f", 9.0))], metadata={"format": "pt", "note": "seed"}))
write("safetensors", "empty_header.safetensors", struct.pack("<Q", 2) + b"{}")
write("safetensors", "metadata_only.safetensors", safetensors([], metadata={"a": "b"}, pad=False))
write("safetensors", "unpadded_gap.safetensors", safetensors([("w", "F16", [2, 2], b"\x00\x3c" * 4)], pad=False) + b"tail")
# A real model's header (the bundled draft's tensor names and shapes) with its data section cut off.
write("safetensors", "draft_header_no_data.safetensors", safetensors([
    ("model.embed_tokens.weight", "F16", [49152, 160], b""), ("model.layers.0.self_attn.q_proj.weight", "F16", [160, 160], b""),
    ("model.norm.weight", "F16", [160], b"")], metadata={"format": "pt"}).replace(b'"data_offsets": [0, 0]', b'"data_offsets": [0, 15728640]', 1))

# --- config.json ------------------------------------------------------------------------------------------------------------------
base = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu", "hidden_size": 576,
        "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "vocab_size": 49152, "rms_norm_eps": 1e-05, "rope_theta": 100000.0, "max_position_embeddings": 8192,
        "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
write("llama_config", "smollm2.json", json.dumps(base, indent=2))
write("llama_config", "llama31.json", json.dumps(dict(base, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
      num_attention_heads=32, num_key_value_heads=8, vocab_size=128256, rope_theta=500000.0, max_position_embeddings=131072,
      bos_token_id=128000, eos_token_id=[128001, 128008, 128009], tie_word_embeddings=False,
      rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
                    "rope_type": "llama3"})))
write("llama_config", "mistral_linear.json", json.dumps(dict(base, model_type="mistral", head_dim=64, rope_scaling={"type": "linear",
      "factor": 2.0}, bos_token_id=None, sliding_window=4096)))
write("llama_config", "minimal.json", '{"vocab_size":8,"hidden_size":4,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":1}')

# --- tokenizer: one flag byte (bit 0 parse_special, bit 1 add_special, bit 2 skip_special, bit 3 raw ids), then text ---------------
write("tokenizer", "english", b"\x00Hello, world! It's 2024-11-24: 12345 apples, they're 'fine'.")
write("tokenizer", "chatml", b"\x01<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n")
write("tokenizer", "code", b"\x02def f(x):\n    return x**2  # square\n\n\n\tprint(f(3))\r\n")
write("tokenizer", "unicode", "\x03Grüße, 世界! 🙂 ٣٤ \u00a0\u2003tab\t end \u0301e".encode())
write("tokenizer", "all_bytes", b"\x08" + bytes(range(256)))
write("tokenizer", "spaces", b"\x04   spaces   \n\n  x  \n")

# --- chat template: one flag byte (bit 0 generation prompt, bits 1-2 template choice), then NUL-separated fields --------------------
smol = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a "
        "helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + "
        "'\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' "
        "}}{% endif %}")
write("chat_template", "smollm2", b"\x01" + b"\0".join([smol.encode(), b"user", b"Hi", b"assistant", b"Hello!", b"user", b"Bye"]))
write("chat_template", "escaped_newline", b"\x00" + b"\0".join([smol.replace("\n", "\\n").encode(), b"user", b"x"]))
write("chat_template", "model_own", b"\x03" + b"\0".join([b"", b"system", b"Be brief.", b"user", b"What is 2+2?"]))
write("chat_template", "default", b"\x05" + b"\0".join([b"{{ not chatml }}", b"user", "Grüße <|im_end|> 🙂".encode()]))
write("chat_template", "none", b"\x07" + b"\0".join([b"<|im_start|>system\n<|im_end|>", b"tool", b"{}\n"]))

# --- prompt files (specdec-generate --prompt-file) ---------------------------------------------------------------------------------
with open(os.path.join(here, "..", "..", "examples", "prompts", "demo.jsonl"), "rb") as f:
    write("prompt_file", "demo.jsonl", f.read())
write("prompt_file", "plain.txt", "first prompt\n\n   \nsecond prompt\r\n\tthird\nlast without newline")
write("prompt_file", "mixed.jsonl", '{"prompt": "a\\nb \\u00e9 \\ud83d\\ude00"}\nplain line\n{"name": "x", "prompt": ""}\n')
write("prompt_file", "bad_field.jsonl", '{"text": "no prompt field"}\n')
write("prompt_file", "bad_json.jsonl", '{"prompt": "unterminated\n')
