#!/usr/bin/env python3
"""Writes a copy of a GGUF file's metadata (tokenizer, chat template, config keys) without its tensors.

For running the CLI where the weights come from elsewhere (a safetensors checkpoint, --tokenizer FILE) and the GGUF
itself cannot travel, e.g. to a GPU machine without network access (scripts/gpu-check.sh).
Usage: scripts/gguf-metadata-only.py IN.gguf OUT.gguf
"""
import struct
import sys

SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(buf, pos, vtype):
    if vtype in SCALAR:
        return pos + SCALAR[vtype]
    if vtype == 8:  # string: u64 length + bytes
        (n,) = struct.unpack_from("<Q", buf, pos)
        return pos + 8 + n
    if vtype == 9:  # array: u32 type, u64 count, items
        itype, count = struct.unpack_from("<IQ", buf, pos)
        pos += 12
        if itype in SCALAR:
            return pos + SCALAR[itype] * count
        for _ in range(count):
            pos = skip_value(buf, pos, itype)
        return pos
    raise ValueError(f"unknown GGUF value type {vtype} at byte {pos}")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    with open(sys.argv[1], "rb") as f:
        buf = f.read()
    magic, version, _tensors, kv_count = struct.unpack_from("<4sIQQ", buf, 0)
    if magic != b"GGUF" or version < 2:
        sys.exit(f"{sys.argv[1]}: not a GGUF v2/v3 file")
    pos = start = 24
    for _ in range(kv_count):
        (klen,) = struct.unpack_from("<Q", buf, pos)
        pos += 8 + klen
        (vtype,) = struct.unpack_from("<I", buf, pos)
        pos = skip_value(buf, pos + 4, vtype)
    with open(sys.argv[2], "wb") as f:
        f.write(struct.pack("<4sIQQ", b"GGUF", version, 0, kv_count))
        f.write(buf[start:pos])
    print(f"{sys.argv[2]}: {kv_count} metadata keys, {pos - start} bytes, no tensors")


if __name__ == "__main__":
    main()
