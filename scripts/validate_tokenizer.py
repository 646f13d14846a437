#!/usr/bin/env python3
"""Compares specdec's tokenizer with an independent implementation on >= 1,000 varied strings.

The reference is Hugging Face `tokenizers` (Rust) configured as SmolLM2's tokenizer.json: a BPE model over the GGUF vocabulary
and merges (read with the `gguf` package), pre-tokenizer Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=
False, use_regex=True)], ByteLevel decoder, and the control tokens as special added tokens. specdec's side runs
specdec_tokenize_tool (tests/models/tokenize_tool.cpp) with --parse-special --check-decode.

usage: validate_tokenizer.py MODEL.gguf TOOL [--count N] [--seed S] [--show K]
"""
import argparse
import json
import random
import subprocess
import sys


def load_gguf_vocab(path):
    from gguf import GGUFReader

    r = GGUFReader(path)

    def field_strings(name):
        f = r.fields[name]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = field_strings("tokenizer.ggml.tokens")
    merges = field_strings("tokenizer.ggml.merges")
    f = r.fields["tokenizer.ggml.token_type"]
    types = [int(f.parts[i][0]) for i in f.data]
    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    return tokens, merges, types, pre


def build_reference(tokens, merges, types):
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == 3])
    return tok


SCRIPTS = {  # code point ranges of letters/numbers/symbols from many scripts
    "latin1": (0x00C0, 0x00FF), "latin_ext": (0x0100, 0x024F), "greek": (0x0391, 0x03C9), "cyrillic": (0x0410, 0x044F),
    "armenian": (0x0531, 0x0556), "hebrew": (0x05D0, 0x05EA), "arabic": (0x0620, 0x064A), "arabic_digits": (0x0660, 0x0669),
    "devanagari": (0x0905, 0x0939), "dev_digits": (0x0966, 0x096F), "bengali": (0x0985, 0x09B9), "tamil": (0x0B85, 0x0BB9),
    "thai": (0x0E01, 0x0E30), "georgian": (0x10D0, 0x10FA), "hangul": (0xAC00, 0xD7A3), "hiragana": (0x3041, 0x3096),
    "katakana": (0x30A1, 0x30FA), "cjk": (0x4E00, 0x9FFF), "fullwidth": (0xFF01, 0xFF5E), "math": (0x2200, 0x22FF),
    "arrows": (0x2190, 0x21FF), "box": (0x2500, 0x257F), "emoji": (0x1F600, 0x1F64F), "emoji2": (0x1F300, 0x1F5FF),
    "symbols": (0x2600, 0x26FF), "combining": (0x0300, 0x036F), "roman": (0x2160, 0x2188), "super": (0x2070, 0x209C),
    "cjk_ext_b": (0x20000, 0x2A6DF), "math_alnum": (0x1D400, 0x1D7FF), "ethiopic": (0x1200, 0x135A),
}
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\u00a0", "\u3000", "\u2003", "\u200b", "\u2028", "\x0b",
          "\x0c", "\x85", " \t ", "    "]
WORDS = ["the", "The", "hello", "world", "it's", "we'll", "they're", "I've", "don't", "she'd", "I'M", "y'all", "naïve",
         "café", "Zürich", "straße", "co-operate", "e-mail", "U.S.A.", "foo_bar", "CamelCase", "snake_case", "x", "a", "I",
         "speculative", "decoding", "tokenizer", "Ünïcödé", "résumé", "日本語", "中文", "한국어", "русский", "ελληνικά", "עברית",
         "العربية", "हिन्दी", "ไทย", "🙂", "👍🏽", "👨‍👩‍👧", "🇫🇷", "❤️", "½", "²", "Ⅻ", "١٢٣", "１２３", "$100", "3.14159",
         "1,000,000", "2024-06-01", "v2.0.1", "0x1F", "#include", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<repo_name>",
         "<|im_start", "im_end|>", "'s", "'", "''", "\"quoted\"", "(paren)", "[bracket]", "{brace}", "...", "!!!", "???", "—", "–",
         "→", "•", "©", "™", "€", "£", "¥", "%", "&&", "||", "==", "!=", "<=", ">=", "->", "::", "//", "/*", "*/", "```"]
CODE = [
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}\n", "import numpy as np\nnp.zeros((3, 4))",
    "#include <vector>\nint main() { return 0; }\n", "SELECT * FROM users WHERE id = 42;", "  if x:\n      pass\n\n\n",
    "const x = {a: 1, b: [2, 3]};", "<div class=\"a\">Hi</div>", "fn main() {\n    println!(\"{}\", 1 + 2);\n}",
    "$ ls -la /tmp && echo \"done\"\n", "x = [i**2 for i in range(10) if i % 2 == 0]", "{\"key\": [1, 2.5, null, true]}",
]


def random_text(rng):
    kind = rng.randrange(9)
    if kind == 0:  # prose from the word list with spaces/punctuation
        return "".join(rng.choice(WORDS) + rng.choice([" ", " ", " ", ", ", ". ", "\n", "", "  "]) for _ in range(rng.randint(1, 25)))
    if kind == 1:  # code
        return "".join(rng.choice(CODE) for _ in range(rng.randint(1, 3)))
    if kind == 2:  # digits and numbers
        parts = []
        for _ in range(rng.randint(1, 10)):
            parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            parts.append(rng.choice([" ", ".", ",", "-", "", "  ", "\n", "e", "x", " + ", "/"]))
        return "".join(parts)
    if kind == 3:  # whitespace runs mixed with words
        return "".join(rng.choice(SPACES) * rng.randint(1, 4) + rng.choice(WORDS) for _ in range(rng.randint(1, 10))) + \
            rng.choice(["", " ", "  ", "\n", "\n\n", "\t"])
    if kind == 4:  # one or several scripts
        out = []
        for _ in range(rng.randint(1, 6)):
            lo, hi = SCRIPTS[rng.choice(list(SCRIPTS))]
            out.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 12))))
            out.append(rng.choice([" ", "", "\n", ", ", "  ", "1", "a"]))
        return "".join(out)
    if kind == 5:  # random bytes decoded leniently
        raw = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
        return raw.decode("utf-8", errors="replace") if rng.random() < 0.5 else raw.decode("latin-1")
    if kind == 6:  # random code points from every plane (no surrogates)
        out = []
        for _ in range(rng.randint(1, 30)):
            cp = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0xFFFF), rng.randint(0x10000, 0x10FFFF)])
            if 0xD800 <= cp <= 0xDFFF:
                cp = 0x41
            out.append(chr(cp))
            if rng.random() < 0.2:
                out.append(" ")
        return "".join(out)
    if kind == 7:  # chat-formatted text with special tokens
        msgs = [("system", "You are a helpful AI assistant named SmolLM, trained by Hugging Face"),
                ("user", " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))),
                ("assistant", " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12))))]
        return "".join(f"<|im_start|>{r}\n{c}<|im_end|>\n" for r, c in msgs) + "<|im_start|>assistant\n"
    # ASCII noise
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 \t\n'\"!?.,;:-_()[]{}<>|/\\@#$%^&*+=~`")
                   for _ in range(rng.randint(1, 80)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("tool")
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=20240601)
    ap.add_argument("--show", type=int, default=10)
    ap.add_argument("--print-examples", action="store_true", help="print a few reference encodings (for unit tests)")
    args = ap.parse_args()

    tokens, merges, types, pre = load_gguf_vocab(args.model)
    if pre != "smollm":
        print(f"warning: tokenizer.ggml.pre is '{pre}', the reference mirrors 'smollm'", file=sys.stderr)
    ref = build_reference(tokens, merges, types)

    rng = random.Random(args.seed)
    fixed = ["", " ", "  ", "\n", "Hello world", "Hello, world!", " leading space", "trailing space ", "12345", "3.14",
             "it's", "I'm here", "a  b   c", "tabs\tand\nnewlines\r\n", "<|im_start|>user\nHi<|im_end|>\n", "naïve café",
             "日本語のテキスト", "🙂👍🏽", "   \n\n  x", "x\n\n\ny", "1\u00a02", "\u3000a", "a\u2003b"]
    texts = fixed + [random_text(rng) for _ in range(max(0, args.count - len(fixed)))]
    texts = [t.encode("utf-8", errors="replace").decode("utf-8") for t in texts]  # no lone surrogates

    if args.print_examples:
        for t in fixed:
            print(json.dumps(t), ref.encode(t, add_special_tokens=False).ids)
        return 0

    proc = subprocess.run([args.tool, args.model, "--parse-special", "--check-decode"],
                          input="".join(json.dumps(t) + "\n" for t in texts), capture_output=True, text=True)
    if proc.returncode not in (0, 1) or proc.stdout.count("\n") != len(texts):
        print(proc.stderr, file=sys.stderr)
        print(f"tool failed (exit {proc.returncode})", file=sys.stderr)
        return 2
    ours = [json.loads(line) for line in proc.stdout.splitlines()]
    agree = 0
    shown = 0
    for t, mine in zip(texts, ours):
        theirs = ref.encode(t, add_special_tokens=False).ids
        if mine == theirs:
            agree += 1
        elif shown < args.show:
            shown += 1
            print(f"MISMATCH {json.dumps(t)[:200]}\n  ref    {theirs[:40]}\n  specdec {mine[:40]}")
            print(f"  ref pieces     {[tokens[i] for i in theirs[:20]]}\n  specdec pieces {[tokens[i] for i in mine[:20]]}")
    print(f"{proc.stderr.strip()}")
    print(f"agreement: {agree}/{len(texts)} strings encode to identical ids")
    return 0 if agree == len(texts) else 1


if __name__ == "__main__":
    sys.exit(main())
