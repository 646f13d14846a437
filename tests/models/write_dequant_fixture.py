#!/usr/bin/env python3
"""Writes tests/models/data/ggml-dequant-gguf-py.bin: random blocks of every block type specdec dequantises, with the
values llama.cpp's own Python package (PyPI `gguf`, gguf.quants.dequantize) gives them. GgufDequantize.MatchesGgufPyBitForBit
compares specdec's dequantize() with these bit for bit: an independent implementation of every format. Also
tests/models/data/ggml-quantize-gguf-py.bin: random floats and their Q8_0 and Q4_0 blocks by gguf.quants.quantize (llama.cpp's
reference quantisers), for PackedMatrix.QuantisersMatchGgufPyBitForBit.

    python3 tests/models/write_dequant_fixture.py [OUT_DIR]     (needs numpy and gguf, e.g. .deps/gguf-venv/bin/python)

Formats (little-endian): u32 magic 'SDQF', u32 count; per entry: u32 ggml type, u32 n_bytes, u32 n_values, the block
bytes, then n_values float32. 'SDQQ', u32 count; per entry: u32 ggml type, u32 n_values, u32 n_bytes, n_values float32,
then the block bytes.
"""
import struct
import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import quants

# type -> (block values, block bytes, offsets of the f16 scale fields)
FORMATS = {
    T.Q4_0: (32, 18, [0]), T.Q4_1: (32, 20, [0, 2]), T.Q5_0: (32, 22, [0]), T.Q5_1: (32, 24, [0, 2]),
    T.Q8_0: (32, 34, [0]), T.Q2_K: (256, 84, [80, 82]), T.Q3_K: (256, 110, [108]), T.Q4_K: (256, 144, [0, 2]),
    T.Q5_K: (256, 176, [0, 2]), T.Q6_K: (256, 210, [208]), T.IQ4_NL: (32, 18, [0]), T.IQ4_XS: (256, 136, [0]),
}
BLOCKS = 3


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "data"
    out = out_dir / "ggml-dequant-gguf-py.bin"
    rng = np.random.default_rng(37)
    entries = []
    for t, (elems, nbytes, halves) in FORMATS.items():
        raw = rng.integers(0, 256, size=(BLOCKS, nbytes), dtype=np.uint8)
        for off in halves:  # finite scales of either sign, 2^-10 .. 2^-1
            h = (rng.integers(5, 14, BLOCKS) << 10) | rng.integers(0, 1024, BLOCKS) | (rng.integers(0, 2, BLOCKS) << 15)
            raw[:, off:off + 2] = h.astype("<u2").view(np.uint8).reshape(BLOCKS, 2)
        values = quants.dequantize(raw.reshape(-1), t).astype(np.float32).reshape(-1)
        assert values.size == BLOCKS * elems
        entries.append(struct.pack("<III", int(t), raw.size, values.size) + raw.tobytes() + values.astype("<f4").tobytes())
    for t in (T.F16, T.BF16):
        bits = rng.integers(0, 65536, size=64, dtype=np.uint16)
        bits[(bits & 0x7C00) == 0x7C00] &= 0xBFFF  # no inf/NaN (exponent all ones)
        raw = bits.astype("<u2").view(np.uint8)
        if t == T.BF16:
            bits = rng.integers(0, 65536, size=64, dtype=np.uint16)
            bits[(bits & 0x7F80) == 0x7F80] &= 0xBFFF
            raw = bits.astype("<u2").view(np.uint8)
        values = quants.dequantize(raw, t).astype(np.float32).reshape(-1)
        entries.append(struct.pack("<III", int(t), raw.size, values.size) + raw.tobytes() + values.astype("<f4").tobytes())
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"SDQF" + struct.pack("<I", len(entries)) + b"".join(entries))
    print(f"wrote {out} ({out.stat().st_size} bytes, {len(entries)} types)")
    # Quantisers: normal values with a few outliers, and a block of zeros (d = 0).
    x = rng.standard_normal(32 * 24).astype(np.float32)
    x[::97] *= 8.0
    x[32 * 5:32 * 6] = 0.0
    qentries = []
    for t in (T.Q8_0, T.Q4_0):
        blocks = quants.quantize(x.reshape(-1, 32), t).reshape(-1)
        qentries.append(struct.pack("<III", int(t), x.size, blocks.size) + x.astype("<f4").tobytes() + blocks.tobytes())
    qout = out_dir / "ggml-quantize-gguf-py.bin"
    qout.write_bytes(b"SDQQ" + struct.pack("<I", len(qentries)) + b"".join(qentries))
    print(f"wrote {qout} ({qout.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
