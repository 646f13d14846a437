#!/usr/bin/env python3
"""Writes a random-weight Llama GGUF whose matrix widths are multiples of 256 (hidden 1024, FFN 2816, 12 layers, 8192
tokens; 170M weights), the shape at which llama.cpp's K-quant file types (Q2_K .. Q6_K, Q4_K_M, Q5_K_M) quantise every
layer matrix as a K-quant, then requantises it with llama.cpp's own quantiser into each file type given. The bundled
SmolLM2 (width 576) and Gemma 3 270M (640) cannot show those types: llama.cpp falls back to Q5_0 / Q8_0 for rows that are
not a multiple of 256. The weights are random, so the files are for timing (bench_model, bench/compare-llama-cpp.sh),
not for text. Needs the PyPI packages gguf and llama-cpp-python (scripts/llama-venv.sh).

usage: write_wide_llama.py OUT_DIR [TYPE ...]   (default types: Q4_K_M Q5_K_M Q6_K Q3_K_M Q2_K; IQ4_XS, IQ4_NL and the
other llama.cpp file types are taken too)
"""
import sys
from pathlib import Path

# ChatML, so that specdec-generate --chat and bench/compare-llama-cpp.sh take the files.
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
          "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
root = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(root / "tests" / "models"))
sys.path.insert(0, str(root / "scripts"))


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    import write_gguf_models as w
    import oracle_logits

    types = sys.argv[2:] or ["Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K"]
    import llama_cpp

    # Every type is checked before anything is written.
    unknown = [t for t in types if not hasattr(llama_cpp, "LLAMA_FTYPE_ALL_F32" if t == "F32" else f"LLAMA_FTYPE_MOSTLY_{t}")]
    if unknown:
        print(f"write_wide_llama.py: TYPE: llama.cpp has no file type {', '.join(map(repr, unknown))} "
              "(for example Q4_K_M, Q5_K_M, Q6_K, Q3_K_M, Q2_K, IQ4_XS, IQ4_NL, Q8_0)", file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    w.HIDDEN, w.FF, w.VOCAB = 1024, 2816, 8192
    source = out / "wide-model.gguf"  # Q8_0, the writer's type
    if not source.exists():
        w.write(out, "wide", "llama", layers=12, heads=8, kv_heads=4, head_dim=128, seed=11, context=8192,
                chat_template=CHATML)
    for t in types:
        dst = out / f"wide-{t}.gguf"
        if not dst.exists():
            with oracle_logits.quiet_fds(out / "quantize.log"):
                oracle_logits.quantize(source, dst, t)
        print(dst)
    return 0


if __name__ == "__main__":
    sys.exit(main())
