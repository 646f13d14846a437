#!/usr/bin/env python3
"""llama.cpp as the oracle of specdec's tokenizers: the token ids of both over a text corpus must be identical.

llama.cpp's side is llama-cpp-python (`Llama(vocab_only=True).tokenize`, i.e. llama_tokenize); specdec's side is
specdec_tokenize_tool (tests/models/tokenize_tool.cpp) fed the same bytes in hexadecimal. The corpus is what any machine
has offline, read in a fixed order:
  repo     the repository's tracked text files (docs, code, scripts), cut into chunks of at most 4 KiB at line ends
  doc      text files under /usr/share/doc (READMEs, copyright files), chunked the same way
  stdlib   the docstrings of Python's standard library modules, classes and functions
  random   seeded strings from scripts/validate_tokenizer.py (many scripts, emoji, digits, whitespace runs, code,
           chat-formatted text)
  bytes    seeded random bytes that are not valid UTF-8, and the chunks of the sources above that are not (Latin-1
           files under /usr/share/doc). Reported, but not part of the verdict: llama.cpp's BPE turns each invalid byte
           into U+FFFD first, while specdec's keeps every byte (decode(encode(s)) == s); SentencePiece works on bytes on
           both sides.
Three modes: `plain` (no BOS, special tokens as text), `special` (the same texts, control tokens parsed) and `chat`
(a chat prompt per text in the model's template, with BOS and control tokens parsed: what specdec-generate --chat encodes).

usage: oracle_tokenizer.py --model GGUF --tool TOOL [--repo DIR] [--max-per-source N] [--show K] [--json OUT]
"""
import argparse
import ast
import json
import os
import random
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

CHUNK = 4096
TEXT_SUFFIXES = {".md", ".txt", ".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".sh", ".cmake", ".json", ".jsonl", ".in",
                 ".toml", ".yml", ".yaml", ".schema"}


def chunks(data):
    """Cuts bytes into pieces of at most CHUNK bytes, at line ends where there is one."""
    out = []
    while data:
        if len(data) <= CHUNK:
            out.append(data)
            break
        cut = data.rfind(b"\n", 0, CHUNK)
        cut = CHUNK if cut <= 0 else cut + 1
        out.append(data[:cut])
        data = data[cut:]
    return out


def repo_texts(repo, limit):
    files = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True, check=True).stdout.split()
    out = []
    for name in sorted(files):
        p = repo / name
        if p.suffix not in TEXT_SUFFIXES and p.name not in ("LICENSE", "CMakeLists.txt"):
            continue
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if b"\0" in data:
            continue
        out.extend(chunks(data))
        if len(out) >= limit:
            break
    return out[:limit]


def doc_texts(limit):
    root = Path("/usr/share/doc")
    out = []
    if not root.is_dir():
        return out
    for p in sorted(root.rglob("*")):
        if not p.is_file() or p.is_symlink() or p.suffix in (".gz", ".bz2", ".xz", ".png", ".jpg", ".gif", ".pdf", ".ico"):
            continue
        try:
            data = p.read_bytes()
        except OSError:
            continue
        if b"\0" in data or not data.strip():
            continue
        out.extend(chunks(data))
        if len(out) >= limit:
            break
    return out[:limit]


def stdlib_texts(limit):
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for p in sorted(root.glob("*.py")) + sorted(root.glob("*/*.py")):
        if "test" in p.parts[-2:][0] or p.name.startswith("test_"):
            continue
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and doc.strip():
                    out.extend(chunks(doc.encode("utf-8", errors="surrogatepass")))
        if len(out) >= limit:
            break
    return out[:limit]


def random_texts(limit, seed):
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import validate_tokenizer as vt  # the generator of varied strings shared with the BPE validation

    rng = random.Random(seed)
    return [vt.random_text(rng).encode("utf-8", errors="replace") for _ in range(limit)]


def byte_texts(limit, seed):
    """Random bytes that are not valid UTF-8: stray continuation bytes, cut sequences, overlongs, surrogates."""
    rng = random.Random(seed + 1)
    out = []
    while len(out) < limit:
        b = bytes(rng.randrange(256) for _ in range(rng.randint(1, 48)))
        try:
            b.decode("utf-8")
        except UnicodeDecodeError:
            out.append(b)
    return out


def chat_prompt(kind, text):
    """The chat prompt specdec's ChatTemplate writes for one user message (trimmed, as both templates here do)."""
    if kind == "gemma":
        return "<start_of_turn>user\n" + text.strip() + "<end_of_turn>\n<start_of_turn>model\n"
    return ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\n" + text + "<|im_end|>\n<|im_start|>assistant\n")


def worker(model, add_bos, special):
    """Child process: llama.cpp's token ids of each hex line on stdin, one JSON line each, flushed as it goes."""
    from llama_cpp import Llama

    llm = Llama(model_path=model, vocab_only=True, verbose=False)
    for line in sys.stdin:
        ids = llm.tokenize(bytes.fromhex(line.strip()), add_bos=add_bos, special=special)
        sys.stdout.write(json.dumps(ids) + "\n")
        sys.stdout.flush()


def run_llama(model, texts, add_bos, special):
    """llama.cpp's ids per text, None where llama.cpp aborts the process (its BPE lets std::invalid_argument escape
    llama_tokenize on some bytes that are not UTF-8): the texts run in a child process, restarted after the one that
    killed it."""
    out = []
    while len(out) < len(texts):
        rest = texts[len(out):]
        proc = subprocess.run([sys.executable, __file__, "--worker", "--model", model] + (["--add-bos"] if add_bos else []) +
                              (["--special"] if special else []), input="".join(t.hex() + "\n" for t in rest),
                              capture_output=True, text=True, env=dict(os.environ, GGML_NO_BACKTRACE="1"))
        done = []
        for line in proc.stdout.splitlines():  # up to whatever a dying process printed
            if not line.startswith("["):
                break
            done.append(json.loads(line))
        out.extend(done)
        if len(done) < len(rest):
            out.append(None)  # the text it died on
    return out


def run_tool(tool, model, texts, flags):
    proc = subprocess.run([tool, model, "--hex", *flags], input="".join(t.hex() + "\n" for t in texts),
                          capture_output=True, text=True)
    lines = proc.stdout.splitlines()
    if proc.returncode not in (0, 1) or len(lines) != len(texts):
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"oracle-tokenizer: {tool} failed (exit {proc.returncode}, {len(lines)} of {len(texts)} lines)")
    return [json.loads(line) for line in lines]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--tool", default="")
    ap.add_argument("--repo", default=str(Path(__file__).resolve().parent.parent))
    ap.add_argument("--max-per-source", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--show", type=int, default=5)
    ap.add_argument("--json", default="")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--add-bos", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--special", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.model, args.add_bos, args.special)
        return 0

    from llama_cpp import Llama

    llm = Llama(model_path=args.model, vocab_only=True, verbose=False)
    n_vocab = llm.n_vocab()
    kind = "gemma" if "<start_of_turn>" in llm.metadata.get("tokenizer.chat_template", "") or \
        llm.metadata.get("general.architecture", "").startswith("gemma") else "chatml"
    model_name = llm.metadata.get("tokenizer.ggml.model", "?")
    kind_model = "spm" if model_name == "llama" else "bpe"

    sources = {
        "repo": repo_texts(Path(args.repo), args.max_per_source),
        "doc": doc_texts(args.max_per_source),
        "stdlib": stdlib_texts(args.max_per_source),
        "random": random_texts(min(args.max_per_source, 3000), args.seed),
        "bytes": byte_texts(min(args.max_per_source, 500), args.seed),
    }
    for name in ("repo", "doc", "stdlib", "random"):  # what is not UTF-8 is not text: to the bytes rows
        valid = []
        for t in sources[name]:
            try:
                t.decode("utf-8")
                valid.append(t)
            except UnicodeDecodeError:
                sources["bytes"].append(t)
        sources[name] = valid
    modes = {"plain": ([], False, False), "special": (["--parse-special"], False, True),
             "chat": (["--parse-special", "--add-special"], True, True)}
    rows = []
    shown = 0
    t0 = time.time()
    for source, texts in sources.items():
        for mode, (flags, add_special, parse_special) in modes.items():
            inputs = texts
            if mode == "chat":
                inputs = [chat_prompt(kind, t.decode("utf-8", errors="replace")).encode("utf-8") for t in texts]
            ours = run_tool(args.tool, args.model, inputs, flags)
            oracle = run_llama(args.model, inputs, add_special, parse_special)
            same = 0
            tokens = 0
            aborted = 0
            for text, mine, theirs in zip(inputs, ours, oracle):
                if theirs is None:
                    aborted += 1
                    continue
                tokens += len(theirs)
                if theirs == mine:
                    same += 1
                elif shown < args.show and (source != "bytes" or kind_model == "spm"):
                    shown += 1
                    k = next((i for i, (a, b) in enumerate(zip(theirs, mine)) if a != b), min(len(theirs), len(mine)))
                    lo = max(0, k - 3)
                    piece = lambda ids: [llm.detokenize([i], special=True).decode("utf-8", "replace") for i in ids]
                    print(f"MISMATCH [{source}/{mode}] at token {k}: {text[:160]!r}\n"
                          f"  llama.cpp {theirs[lo:k + 5]} {piece(theirs[lo:k + 5])}\n"
                          f"  specdec   {mine[lo:k + 5]} {piece([i for i in mine[lo:k + 5] if 0 <= i < n_vocab])}")
            rows.append({"source": source, "mode": mode, "texts": len(inputs), "bytes": sum(len(t) for t in inputs),
                         "tokens": tokens, "identical": same, "llama_cpp_aborted": aborted})
    print(f"\nmodel {Path(args.model).name} (tokenizer.ggml.model '{model_name}', {n_vocab} tokens, chat template "
          f"{kind}), {time.time() - t0:.0f} s")
    print("| source | mode | texts | bytes | llama.cpp tokens | identical | differ | llama.cpp aborted |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['source']} | {r['mode']} | {r['texts']} | {r['bytes']} | {r['tokens']} | {r['identical']} | "
              f"{r['texts'] - r['identical'] - r['llama_cpp_aborted']} | {r['llama_cpp_aborted']} |")
    text_rows = [r for r in rows if r["source"] != "bytes"]
    total = sum(r["texts"] for r in text_rows)
    same = sum(r["identical"] for r in text_rows)
    print(f"| all text | | {total} | {sum(r['bytes'] for r in text_rows)} | {sum(r['tokens'] for r in text_rows)} | "
          f"{same} | {total - same} | |")
    verdict = f"identical on all {total} text encodings" if same == total else \
        f"MISMATCH: {total - same} of {total} text encodings differ"
    print(f"verdict: {verdict} (the bytes rows, not UTF-8, are reported apart)")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"model": args.model, "tokenizer": model_name, "vocab": n_vocab,
                                               "rows": rows, "identical_on_text": same == total}, indent=1) + "\n")
    return 0 if same == total else 1


if __name__ == "__main__":
    sys.exit(main())
