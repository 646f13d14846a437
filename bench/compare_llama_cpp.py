#!/usr/bin/env python3
"""Peer comparison of specdec's CPU decoding with llama.cpp (through llama-cpp-python) on the same GGUF file.

Driven by bench/compare-llama-cpp.sh (which creates the virtualenv and passes the paths); not run in CI. Subcommands:

  llama    all llama.cpp measurements, run in child processes so that their peak RSS is llama.cpp's alone:
           per prompt, greedy plain decoding and prompt-lookup decoding (LlamaPromptLookupDecoding(num_pred_tokens=5) as
           draft_model) with prefill excluded; the time of a 1-token and of a 6-token forward at context 128 and 1024;
           prefill tokens/s of a 512-token prompt; load to first token (Llama(...), tokenize and decode "Hello", median
           of 11 loads); peak RSS of a child that only loads the model and decodes the prompts.
  specdec  specdec-generate --compare --chat --json per prompt with --proposer none, --proposer ngram -g 5 --fixed-g and the CLI
           defaults (peak RSS from /usr/bin/time -v), bench_model's BM_Decode rows (1-/6-token forwards), its
           BM_LoadToFirstToken row and its BM_Prefill/tokens:512 row when the binary has one (otherwise an estimate from
           wall times, specdec_prefill).
  report   merges the two JSON files, prints the Markdown tables and writes the combined JSON.

Accounting matches specdec's: a prompt of n tokens is prefilled with its first n - 1 tokens (untimed); the timed decode
starts with the 1-token forward of the last prompt token, so k generated tokens cost k forwards in plain decoding, and
tokens/s = generated tokens / decode wall time (sampling and the Python loop included; llama.cpp's own per-forward timer
is recorded as well). Both sides stop at an end-of-generation token (specdec-generate cannot be told not to); the stop
token is counted, as specdec counts it.
"""
import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

NUM_PRED_TOKENS = 5
FORWARD_CONTEXTS = (128, 1024)
VERIFY_TOKENS = 6  # g + 1 with g = 5
PREFILL_TOKENS = 512
N_CTX = 2048


# ----------------------------------------------------------------------------------------------------------------------
# shared helpers


def load_prompts(path):
    """JSONL objects with "prompt" (and optionally "name"), or one prompt per line (as specdec-generate reads them)."""
    prompts = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            if line.lstrip().startswith("{"):
                obj = json.loads(line)
                if not isinstance(obj.get("prompt"), str):
                    raise SystemExit(f"compare: {path}: every JSON line needs a string field \"prompt\"")
                prompts.append({"name": str(obj.get("name") or f"prompt{len(prompts)}"), "prompt": obj["prompt"]})
            else:
                prompts.append({"name": f"prompt{len(prompts)}", "prompt": line.rstrip("\n")})
    if not prompts:
        raise SystemExit(f"compare: {path} holds no prompt")
    return prompts


def system_prompt_from_template(template):
    """The default system message of a ChatML Jinja template, found the way specdec's ChatTemplate::from_gguf finds it."""
    for opening in ("<|im_start|>system\n", "<|im_start|>system\\n"):
        b = template.find(opening)
        if b < 0:
            continue
        e = template.find("<|im_end|>", b + len(opening))
        if e < 0:
            continue
        return template[b + len(opening):e]
    return ""


def render_chatml(system_prompt, user):
    """What specdec-generate --chat feeds its tokenizer (ChatTemplate::apply with one user message)."""
    out = ""
    if system_prompt:
        out += "<|im_start|>system\n" + system_prompt + "<|im_end|>\n"
    return out + "<|im_start|>user\n" + user + "<|im_end|>\n<|im_start|>assistant\n"


def write_json(path, obj):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".partial"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def log(msg):
    print(f"compare: {msg}", file=sys.stderr, flush=True)


def cpu_snapshot():
    """(wall, busy CPU seconds of the whole machine from /proc/stat, CPU seconds of this process and its reaped children)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    busy = sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)  # all but idle and iowait
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    own = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    return time.perf_counter(), busy / os.sysconf("SC_CLK_TCK"), own


def foreign_cpu(snap0):
    """Share of the machine's CPU capacity used by other processes since snap0 (0 = we had the machine to ourselves)."""
    w1, b1, o1 = cpu_snapshot()
    w0, b0, o0 = snap0
    share = max(0.0, (b1 - b0) - (o1 - o0)) / max((w1 - w0) * (os.cpu_count() or 1), 1e-9)
    return {"foreign_cpu_share": share, "wall_seconds": w1 - w0}


def run_child(argv, env=None, stdout=None, stderr=None):
    """Runs argv; returns (exit status, wall seconds, peak RSS MiB of that child alone via wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, wall, ru.ru_maxrss / 1024.0  # ru_maxrss is in KiB on Linux


# ----------------------------------------------------------------------------------------------------------------------
# llama.cpp side (imports llama_cpp only inside the worker children)


def without_extra_buffer_types():
    """llama.cpp 0.3.36's AMX weight buffers (ggml_backend_amx_mul_mat) segfault on a batch of two or more tokens on an
    AMX host here; SPECDEC_LLAMA_EXTRA_BUFTS=0 (the default where /proc/cpuinfo lists amx_int8) loads the weights without
    extra buffer types (use_extra_bufts = false), so llama.cpp runs its AVX-512 VNNI kernels, as on CPUs without AMX."""
    setting = os.environ.get("SPECDEC_LLAMA_EXTRA_BUFTS")
    if setting is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                return "amx_int8" in f.read()
        except OSError:
            return False
    return setting == "0"


def cpu_description():
    """The first processor's vendor, name, family and model from /proc/cpuinfo (as specdec-generate's --json "host"):
    hosts that all call themselves "AMD EPYC" under a hypervisor differ in family and model. Empty where unreadable."""
    keys = {"vendor_id": "vendor", "model name": "cpu", "cpu family": "family", "model": "model"}
    out = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block ends here
                key, _, value = line.partition(":")
                name = keys.get(key.strip())
                if name and name not in out:
                    value = value.strip()
                    out[name] = int(value) if name in ("family", "model") and value.isdigit() else value
    except OSError:
        pass
    return out


def open_llama(model, threads, draft=False):
    import llama_cpp
    from llama_cpp import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

    if without_extra_buffer_types() and not getattr(llama_cpp, "_specdec_no_extra_bufts", False):
        default_params = llama_cpp.llama_model_default_params

        def params():
            p = default_params()
            p.use_extra_bufts = False
            return p

        llama_cpp.llama_model_default_params = params
        llama_cpp.llama.llama_cpp.llama_model_default_params = params
        llama_cpp._specdec_no_extra_bufts = True

    kw = dict(model_path=model, n_ctx=N_CTX, n_batch=512, n_ubatch=512, n_threads=threads, n_threads_batch=threads,
              seed=0, verbose=False)
    if draft:
        kw["draft_model"] = LlamaPromptLookupDecoding(num_pred_tokens=NUM_PRED_TOKENS)
    return Llama(**kw)


def is_eog_fn(llm):
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
    return lambda t: bool(llama_cpp.llama_vocab_is_eog(vocab, int(t)))


def perf_reset(llm):
    import llama_cpp

    if hasattr(llama_cpp, "llama_perf_context_reset"):
        llama_cpp.llama_perf_context_reset(llm._ctx.ctx)


def perf_read(llm):
    import llama_cpp

    if not hasattr(llama_cpp, "llama_perf_context"):
        return None
    d = llama_cpp.llama_perf_context(llm._ctx.ctx)
    return {"t_eval_ms": d.t_eval_ms, "n_eval": d.n_eval, "t_p_eval_ms": d.t_p_eval_ms, "n_p_eval": d.n_p_eval}


def synchronize(llm):
    import llama_cpp

    if hasattr(llama_cpp, "llama_synchronize"):
        llama_cpp.llama_synchronize(llm._ctx.ctx)


def chat_prompts(llm, prompts):
    """Renders each prompt the way specdec-generate --chat does and tokenizes it with llama.cpp (special tokens parsed,
    BOS per the GGUF's add_bos_token, as specdec's add_special does). Also renders the GGUF's own Jinja template with
    llama-cpp-python's formatter and records whether the texts agree."""
    template = llm.metadata.get("tokenizer.chat_template", "")
    if "<|im_start|>" not in template or "<|im_end|>" not in template:
        # Gemma's files may carry no template: specdec-generate --chat then writes Gemma's turns, as llama.cpp's
        # built-in "gemma" template does (the user's text trimmed, BOS from the tokenizer).
        if "<start_of_turn>" in template or (not template and llm.tokenize(b"<start_of_turn>", add_bos=False, special=True)
                                             and len(llm.tokenize(b"<start_of_turn>", add_bos=False, special=True)) == 1):
            out = []
            for p in prompts:
                text = f"<start_of_turn>user\n{p['prompt'].strip()}<end_of_turn>\n<start_of_turn>model\n"
                ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
                out.append({"name": p["name"], "text": text, "ids": list(ids), "jinja_template_matches": None})
            return out
        raise SystemExit("compare: the GGUF's tokenizer.chat_template is neither ChatML nor Gemma's; specdec-generate "
                         "--chat would refuse it")
    system = system_prompt_from_template(template)
    jinja = None
    try:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        bos = llm.detokenize([llm.token_bos()], special=True).decode("utf-8", "replace") if llm.token_bos() >= 0 else ""
        eos = llm.detokenize([llm.token_eos()], special=True).decode("utf-8", "replace") if llm.token_eos() >= 0 else ""
        jinja = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos, add_generation_prompt=True)
    except Exception as e:  # informational only
        log(f"llama-cpp-python's Jinja2ChatFormatter unavailable ({e}); using the ChatML rendering alone")
    out = []
    for p in prompts:
        text = render_chatml(system, p["prompt"])
        jinja_text = None
        if jinja is not None:
            try:
                jinja_text = jinja(messages=[{"role": "user", "content": p["prompt"]}]).prompt
            except Exception as e:
                log(f"Jinja rendering failed for {p['name']}: {e}")
        ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=True)
        out.append({"name": p["name"], "text": text, "ids": list(ids),
                    "jinja_template_matches": (jinja_text == text) if jinja_text is not None else None})
    return out


def decode_one(llm, ids, max_new, is_eog, use_draft, draft):
    """Prefills ids[:-1] (untimed), then times greedy generation of up to max_new tokens from the last prompt token."""
    llm.draft_model = draft if use_draft else None
    llm.reset()
    llm._ctx.kv_cache_clear()
    llm.eval(ids[:-1])
    forwards = [0]
    orig_eval = llm.eval

    def counting_eval(tokens):
        forwards[0] += 1
        return orig_eval(tokens)

    llm.eval = counting_eval
    out = []
    eos = False
    perf_reset(llm)
    t0 = time.perf_counter()
    try:
        for tok in llm.generate(ids, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
            out.append(int(tok))
            if is_eog(tok):
                eos = True
                break
            if len(out) >= max_new:
                break
    finally:
        seconds = time.perf_counter() - t0
        del llm.eval  # back to the bound method
    perf = perf_read(llm)
    res = {"tokens": len(out), "seconds": seconds, "tokens_per_second": len(out) / seconds, "stopped_at_eos": eos,
           "target_forwards": forwards[0], "tokens_per_forward": len(out) / max(forwards[0], 1), "ids": out,
           "text": llm.detokenize(out, special=False).decode("utf-8", "replace")}
    if perf is not None:
        res["llama_perf"] = perf
        if perf["n_eval"] > 0 and not use_draft:
            res["internal_one_token_ms"] = perf["t_eval_ms"] / perf["n_eval"]
    return res


def forward_cost(llm, context, n_new, reps, warmup=3):
    """Median time of one llama_decode of n_new tokens (logits for every row, as a verification forward needs) after a
    context of `context` cached tokens; the KV cache is rolled back to `context` after each. Token ids as bench_model."""
    V = llm.n_vocab()
    prefix = [(i * 7919 + 13) % V for i in range(context)]
    block = [(i * 104729 + 7) % V for i in range(n_new)]
    ctx, batch = llm._ctx, llm._batch
    ctx.kv_cache_clear()
    for i in range(0, context, llm.n_batch):
        chunk = prefix[i:i + llm.n_batch]
        batch.set_batch(chunk, n_past=i, logits_all=False)
        ctx.decode(batch)
    times = []
    for r in range(warmup + reps):
        batch.set_batch(block, n_past=context, logits_all=True)
        t0 = time.perf_counter()
        ctx.decode(batch)
        synchronize(llm)
        dt = time.perf_counter() - t0
        if not ctx.kv_cache_seq_rm(0, context, -1):
            raise SystemExit("compare: llama.cpp could not roll back its KV cache")
        if r >= warmup:
            times.append(dt)
    ctx.kv_cache_clear()
    llm.n_tokens = 0
    return {"median_ms": statistics.median(times) * 1e3, "mean_ms": statistics.fmean(times) * 1e3,
            "min_ms": min(times) * 1e3, "repeats": reps, "all_ms": [t * 1e3 for t in times]}


def prefill_cost(llm, ids, reps=5):
    ctx, batch = llm._ctx, llm._batch
    assert len(ids) <= llm.n_batch
    times = []
    for r in range(1 + reps):
        ctx.kv_cache_clear()
        batch.set_batch(ids, n_past=0, logits_all=False)
        t0 = time.perf_counter()
        ctx.decode(batch)
        synchronize(llm)
        dt = time.perf_counter() - t0
        if r >= 1:
            times.append(dt)
    ctx.kv_cache_clear()
    llm.n_tokens = 0
    med = statistics.median(times)
    return {"tokens": len(ids), "median_seconds": med, "tokens_per_second": len(ids) / med, "repeats": reps,
            "all_seconds": times}


def long_prompt_ids(llm, prompts, n):
    """n tokens of plain text (the prompts' texts repeated), BOS first when the GGUF asks for one."""
    text = "\n\n".join(p["prompt"] for p in prompts)
    while len(llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)) < n + 16:
        text = text + "\n\n" + text
    ids = llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)[:n]
    return list(ids)


LOAD_REPS = 11
LOAD_PROMPT = "Hello"


def load_to_first_token(a):
    """Model load to the first token's logits, as specdec's bench_model BM_LoadToFirstToken measures it: `Llama(...)`
    (parse, tokenizer, weights, context), tokenize LOAD_PROMPT and decode it (last logits only), in this already started
    process; the model freed between repetitions. Median of LOAD_REPS."""
    import gc

    each = []
    for _ in range(LOAD_REPS):
        t0 = time.perf_counter()
        llm = open_llama(a.model, a.threads)
        ids = llm.tokenize(LOAD_PROMPT.encode("utf-8"), add_bos=True, special=False)
        llm.eval(ids)
        synchronize(llm)
        each.append((time.perf_counter() - t0) * 1e3)
        llm.close()
        del llm
        gc.collect()
    return {"method": f"Llama(n_ctx={N_CTX}) + tokenize and decode {LOAD_PROMPT!r}, median of {LOAD_REPS} in one process",
            "median_ms": statistics.median(each), "ms": each}


def llama_worker(a):
    """Child process: every llama.cpp measurement except the RSS probe."""
    import llama_cpp

    prompts = load_prompts(a.prompts)
    llm = open_llama(a.model, a.threads, draft=True)
    draft = llm.draft_model
    is_eog = is_eog_fn(llm)
    info = {"llama_cpp_python_version": getattr(llama_cpp, "__version__", "?"),
            "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace").strip(),
            "n_ctx": N_CTX, "threads": a.threads, "num_pred_tokens": NUM_PRED_TOKENS,
            "max_ngram_size": draft.max_ngram_size,
            "add_bos_token": llm.metadata.get("tokenizer.ggml.add_bos_token"),
            "use_extra_bufts": not without_extra_buffer_types()}
    chats = chat_prompts(llm, prompts)
    # warm-up (threads, caches): a short untimed generation
    decode_one(llm, chats[0]["ids"], 8, is_eog, False, draft)
    per_prompt = []
    for c in chats:
        log(f"llama.cpp: {c['name']} ({len(c['ids'])} prompt tokens): plain, then prompt lookup")
        plain = decode_one(llm, c["ids"], a.max_new_tokens, is_eog, False, draft)
        pld = decode_one(llm, c["ids"], a.max_new_tokens, is_eog, True, draft)
        per_prompt.append({"name": c["name"], "prompt_tokens": len(c["ids"]), "prompt_ids": c["ids"],
                           "rendered_prompt": c["text"], "jinja_template_matches": c["jinja_template_matches"],
                           "plain": plain, "prompt_lookup": pld,
                           "prompt_lookup_identical_to_plain": pld["ids"] == plain["ids"]})
    log("llama.cpp: 1-token and 6-token forwards at context " + " and ".join(map(str, FORWARD_CONTEXTS)))
    forwards = {}
    for context in FORWARD_CONTEXTS:
        one = forward_cost(llm, context, 1, a.repeats)
        six = forward_cost(llm, context, VERIFY_TOKENS, a.repeats)
        forwards[str(context)] = {"one_token": one, "six_token": six, "r": six["median_ms"] / one["median_ms"]}
    log(f"llama.cpp: prefill of a {PREFILL_TOKENS}-token prompt")
    long_ids = long_prompt_ids(llm, prompts, PREFILL_TOKENS)
    prefill = prefill_cost(llm, long_ids)
    prefill["text"] = llm.detokenize(long_ids, special=False).decode("utf-8", "replace")
    prefill["ids"] = long_ids
    log(f"llama.cpp: load to first token ({LOAD_REPS} loads)")
    load = load_to_first_token(a)
    write_json(a.out, {"info": info, "prompts": per_prompt, "forwards": forwards, "prefill": prefill,
                       "load_to_first_token": load})


def llama_rss_probe(a):
    """Child process: only loads the model and decodes each prompt plainly (the work of specdec's --proposer none run)."""
    prompts = load_prompts(a.prompts)
    llm = open_llama(a.model, a.threads, draft=False)
    is_eog = is_eog_fn(llm)
    for c in chat_prompts(llm, prompts):
        decode_one(llm, c["ids"], a.max_new_tokens, is_eog, False, None)


def cmd_llama(a):
    snap0 = cpu_snapshot()
    with tempfile.TemporaryDirectory(prefix="compare-llama-") as tmp:
        part = os.path.join(tmp, "llama.json")
        common = ["--model", a.model, "--prompts", a.prompts, "--threads", str(a.threads),
                  "--max-new-tokens", str(a.max_new_tokens)]
        rc, wall, rss_all = run_child([sys.executable, os.path.abspath(__file__), "_llama-worker", *common,
                                       "--repeats", str(a.repeats), "--out", part])
        if rc != 0:
            raise SystemExit(f"compare: the llama.cpp worker failed (exit {rc})")
        with open(part, encoding="utf-8") as f:
            res = json.load(f)
        log("llama.cpp: peak-RSS probe (load + plain decoding of every prompt, in a fresh process)")
        rc, _, rss = run_child([sys.executable, os.path.abspath(__file__), "_llama-rss", *common])
        if rc != 0:
            raise SystemExit(f"compare: the llama.cpp RSS probe failed (exit {rc})")
    res["peak_rss_mib"] = rss
    res["peak_rss_mib_worker_all_measurements"] = rss_all
    res["interference"] = foreign_cpu(snap0)
    res["worker_wall_seconds"] = wall
    res["model"] = a.model
    write_json(a.out, res)
    log(f"llama.cpp: wrote {a.out}")


# ----------------------------------------------------------------------------------------------------------------------
# specdec side

SPECDEC_CONFIGS = [
    ("plain", ["--proposer", "none"]),
    ("ngram_g5", ["--proposer", "ngram", "-g", "5", "--fixed-g"]),
    ("default", []),
]


def time_v_rss_mib(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        m = re.search(r"Maximum resident set size \(kbytes\):\s*(\d+)", f.read())
    return int(m.group(1)) / 1024.0 if m else None


def run_specdec(argv, logdir, tag):
    """Runs argv (under /usr/bin/time -v when present); returns (stdout text, wall seconds, peak RSS MiB)."""
    out_path = os.path.join(logdir, tag + ".stdout")
    err_path = os.path.join(logdir, tag + ".stderr")
    time_bin = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
    rss_path = os.path.join(logdir, tag + ".time")
    full = [time_bin, "-v", "-o", rss_path, *argv] if time_bin else argv
    with open(out_path, "w") as so, open(err_path, "w") as se:
        rc, wall, rss = run_child(full, stdout=so, stderr=se)
    if rc != 0:
        with open(err_path, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-2000:]
        raise SystemExit(f"compare: {' '.join(argv)} failed (exit {rc}):\n{tail}")
    if time_bin:
        rss = time_v_rss_mib(rss_path) or rss
    with open(out_path, encoding="utf-8", errors="replace") as f:
        return f.read(), wall, rss


def first_streamed_text(stdout):
    """The text streamed under the first '--- label ---' header (the baseline of a --compare run)."""
    parts = re.split(r"^--- .* ---\n", stdout, flags=re.M)
    if len(parts) < 2:
        return None
    text = parts[1]
    return text[:-1] if text.endswith("\n") else text


def parse_bench_model(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    rows, prefill, load = {}, None, None
    for b in data.get("benchmarks", []):
        if b.get("run_type", "iteration") != "iteration":
            continue
        if b.get("name", "").startswith("BM_LoadToFirstToken") and "ms_median" in b:
            load = {"method": "bench_model BM_LoadToFirstToken (GgufFile, Tokenizer::from_gguf, load_llama_gguf, encode and "
                              "forward 'Hello', last logits only), median of its iterations in one process",
                    "median_ms": b["ms_median"],
                    "parts_median_ms": {k[3:-7]: b[k] for k in b if k.startswith("ms_") and k.endswith("_median")
                                        and k != "ms_median"}}
            continue
        if re.match(rf"BM_Prefill/tokens:{PREFILL_TOKENS}(/|$)", b.get("name", "")) and "tokens_per_second" in b:
            prefill = {"method": f"bench_model BM_Prefill/tokens:{PREFILL_TOKENS} (one forward of the whole prompt, "
                                 "last logits only, synthetic token ids; mean over iterations)",
                       "tokens": PREFILL_TOKENS, "tokens_per_second": b["tokens_per_second"],
                       "iterations": b.get("iterations"), "label": b.get("label")}
            continue
        m = re.match(r"BM_Decode/new_tokens:(\d+)/context:(\d+)", b.get("name", ""))
        if m:
            rows[(int(m.group(1)), int(m.group(2)))] = b
    forwards = {}
    for context in FORWARD_CONTEXTS:
        one, six = rows.get((1, context)), rows.get((VERIFY_TOKENS, context))
        if not one or not six:
            continue
        # The median forward (as llama.cpp's side) where bench_model reports it, else the mean.
        key = "ms_per_forward_median" if "ms_per_forward_median" in one and "ms_per_forward_median" in six \
            else "ms_per_forward"
        forwards[str(context)] = {"one_token": {"ms": one[key], "mean_ms": one["ms_per_forward"],
                                                "iterations": one.get("iterations")},
                                  "six_token": {"ms": six[key], "mean_ms": six["ms_per_forward"],
                                                "iterations": six.get("iterations")},
                                  "r": six[key] / one[key], "statistic": key,
                                  "label": one.get("label")}
    return {"forwards": forwards, "prefill": prefill, "load_to_first_token": load, "context": data.get("context", {})}


def specdec_prefill(a, gen, logdir, prefill_text, prefill_tokens):
    """specdec-generate reports no prefill time, so this estimates it from process wall times: a run with the long
    prompt and --max-new-tokens 1 minus a run with a 1-word prompt (model loading cancels), median of `reps` each,
    interleaved: (long tokens - short tokens) / (wall_long - wall_short)."""
    long_file = os.path.join(logdir, "prefill-long.jsonl")
    short_file = os.path.join(logdir, "prefill-short.jsonl")
    with open(long_file, "w", encoding="utf-8") as f:
        f.write(json.dumps({"prompt": prefill_text}) + "\n")
    with open(short_file, "w", encoding="utf-8") as f:
        f.write(json.dumps({"prompt": "Hello"}) + "\n")
    base = [gen, "--model", a.model, "--proposer", "none", "--temperature", "0", "--max-new-tokens", "1",
            "--threads", str(a.threads)]
    walls = {"long": [], "short": []}
    for r in range(a.prefill_reps):
        for kind, path in (("short", short_file), ("long", long_file)):
            _, wall, _ = run_specdec(base + ["--prompt-file", path], logdir, f"prefill-{kind}-{r}")
            walls[kind].append(wall)
    short_tokens = 1 + (1 if a.add_bos else 0)  # "Hello" is one token in SmolLM2's vocabulary (checked by the tool below)
    if a.tokenize_tool:
        short_tokens = len(tokenize_with_tool(a.tokenize_tool, a.model, ["Hello"], False)[0]) + (1 if a.add_bos else 0)
    dl, ds = statistics.median(walls["long"]), statistics.median(walls["short"])
    res = {"method": "wall-time difference of --max-new-tokens 1 runs, long prompt minus 1-word prompt",
           "long_prompt_tokens": prefill_tokens, "short_prompt_tokens": short_tokens, "wall_seconds": walls,
           "median_difference_seconds": dl - ds}
    res["tokens_per_second"] = (prefill_tokens - short_tokens) / (dl - ds) if dl > ds else None
    return res


def tokenize_with_tool(tool, model, texts, parse_special):
    argv = [tool, model] + (["--parse-special"] if parse_special else [])
    p = subprocess.run(argv, input="".join(json.dumps(t) + "\n" for t in texts), capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"compare: {tool} failed: {p.stderr[-500:]}")
    return [json.loads(line) for line in p.stdout.splitlines() if line.strip()]


def cmd_specdec(a):
    gen = os.path.join(a.build, "bin", "specdec-generate")
    bench = os.path.join(a.build, "bin", "bench_model")
    prompts = load_prompts(a.prompts)
    os.makedirs(a.logdir, exist_ok=True)
    with open(a.llama_json, encoding="utf-8") as f:
        llama = json.load(f)
    by_name = {p["name"]: p for p in llama["prompts"]}
    a.add_bos = str(llama["info"].get("add_bos_token")).lower() == "true"
    a.tokenize_tool = a.tokenize_tool if a.tokenize_tool and os.access(a.tokenize_tool, os.X_OK) else None
    res = {"binary": gen, "threads": a.threads, "prompts": [], "tokenize_tool": a.tokenize_tool}
    snap0 = cpu_snapshot()

    # Prompt tokens as specdec sees them (specdec_tokenize_tool encodes without BOS; specdec-generate adds BOS when the
    # GGUF's add_bos_token says so), compared with llama.cpp's.
    if a.tokenize_tool:
        texts = [by_name[p["name"]]["rendered_prompt"] for p in prompts]
        ids = tokenize_with_tool(a.tokenize_tool, a.model, texts, True)
        bos = llama["prompts"][0]["prompt_ids"][0] if a.add_bos else None
        token_check = {}
        for p, t in zip(prompts, ids):
            t = ([bos] if bos is not None else []) + t
            token_check[p["name"]] = {"specdec_prompt_tokens": len(t),
                                      "ids_identical_to_llama": t == by_name[p["name"]]["prompt_ids"]}
        res["prompt_token_check"] = token_check

    for i, p in enumerate(prompts):
        pf = os.path.join(a.logdir, f"prompt-{i}.jsonl")
        with open(pf, "w", encoding="utf-8") as f:
            f.write(json.dumps({"prompt": p["prompt"]}) + "\n")
        row = {"name": p["name"]}
        for key, flags in SPECDEC_CONFIGS:
            jpath = os.path.join(a.logdir, f"prompt-{i}-{key}.json")
            log(f"specdec: {p['name']}: {' '.join(flags) or '(CLI defaults)'}")
            argv = [gen, "--model", a.model, "--prompt-file", pf, "--chat", "--compare", "--json", jpath,
                    "--threads", str(a.threads), "--temperature", "0", "--max-new-tokens", str(a.max_new_tokens), *flags]
            stdout, wall, rss = run_specdec(argv, a.logdir, f"prompt-{i}-{key}")
            with open(jpath, encoding="utf-8") as f:
                j = json.load(f)
            row[key] = {"command": argv, "tokens_per_second": j["speculative"]["tokens_per_second"],
                        "tokens": j["speculative"]["tokens"],
                        "baseline_tokens_per_second": j["baseline"]["tokens_per_second"],
                        "baseline_tokens": j["baseline"]["tokens"], "speedup": j.get("speedup"),
                        "outputs_identical": j.get("outputs_identical"), "proposer": j.get("proposer"),
                        "num_speculative_tokens": j.get("num_speculative_tokens"), "adaptive": j.get("adaptive"),
                        "acceptance_rate": j["speculative"].get("acceptance_rate"),
                        "mean_accepted_length": j["speculative"].get("mean_accepted_length"),
                        "verify_cost_ratio": j["speculative"].get("verify_cost_ratio"),
                        "one_token_forward_seconds": j.get("one_token_forward_seconds"),
                        "peak_rss_mib": rss, "wall_seconds": wall}
            if key == "plain":
                text = first_streamed_text(stdout)
                lt = by_name[p["name"]]["plain"]["text"] if p["name"] in by_name else None
                row["baseline_text_matches_llama_plain"] = (text.strip() == lt.strip()) if text is not None and lt is not None else None
                if text is not None and lt is not None:
                    row["baseline_text"] = text
                    row["text_common_prefix_chars"] = len(os.path.commonprefix([text, lt]))
        res["prompts"].append(row)

    rss = [r[k]["peak_rss_mib"] for r in res["prompts"] for k in ("plain",) if r[k]["peak_rss_mib"] is not None]
    res["peak_rss_mib"] = max(rss) if rss else None
    res["peak_rss_source"] = "/usr/bin/time -v of the --proposer none --compare runs (max over prompts)"

    if os.access(bench, os.X_OK):
        log(f"specdec: bench_model --benchmark_filter='BM_Decode|BM_Prefill/tokens:{PREFILL_TOKENS}|BM_LoadToFirstToken' "
            "(1-/6-token forwards at context 128 and 1024, prefill, load to first token)")
        bj = os.path.join(a.logdir, "bench_model.json")
        env = dict(os.environ, SPECDEC_MODEL=a.model, SPECDEC_BENCH_THREADS=str(a.threads))
        with open(os.path.join(a.logdir, "bench_model.stdout"), "w") as so, \
                open(os.path.join(a.logdir, "bench_model.stderr"), "w") as se:
            rc, _, _ = run_child([bench, f"--benchmark_filter=BM_Decode|BM_Prefill/tokens:{PREFILL_TOKENS}|BM_LoadToFirstToken",
                                  f"--benchmark_out={bj}",
                                  "--benchmark_out_format=json"], env=env, stdout=so, stderr=se)
        if rc != 0:
            raise SystemExit(f"compare: {bench} failed (exit {rc}); see {a.logdir}/bench_model.stderr")
        res["bench_model"] = parse_bench_model(bj)
    else:
        log(f"specdec: {bench} not found; no forward costs for specdec")
        res["bench_model"] = None

    if res["bench_model"] and res["bench_model"].get("prefill"):
        res["prefill"] = res["bench_model"]["prefill"]
    else:
        log("specdec: bench_model has no BM_Prefill: prefill estimate from wall times (long minus short prompt)")
        pre = llama["prefill"]
        res["prefill"] = specdec_prefill(a, gen, a.logdir, pre["text"], pre["tokens"])
    if a.tokenize_tool and "wall_seconds" in res["prefill"]:
        n = len(tokenize_with_tool(a.tokenize_tool, a.model, [pre["text"]], False)[0]) + (1 if a.add_bos else 0)
        res["prefill"]["long_prompt_tokens_specdec"] = n
        res["prefill"]["long_prompt_tokens"] = n
        s = res["prefill"]
        dl = statistics.median(s["wall_seconds"]["long"]) - statistics.median(s["wall_seconds"]["short"])
        s["tokens_per_second"] = (n - s["short_prompt_tokens"]) / dl if dl > 0 else None
    res["interference"] = foreign_cpu(snap0)
    write_json(a.out, res)
    log(f"specdec: wrote {a.out}")


# ----------------------------------------------------------------------------------------------------------------------
# report


def fmt(x, spec=".1f"):
    return "n/a" if x is None else format(x, spec)


def mean(xs):
    xs = [x for x in xs if x is not None]
    return statistics.fmean(xs) if xs else None


def cmd_report(a):
    llama = spec = None
    if a.llama_json and os.path.exists(a.llama_json):
        with open(a.llama_json, encoding="utf-8") as f:
            llama = json.load(f)
    if a.specdec_json and os.path.exists(a.specdec_json):
        with open(a.specdec_json, encoding="utf-8") as f:
            spec = json.load(f)
    names = [p["name"] for p in (llama or spec)["prompts"]]
    lp = {p["name"]: p for p in (llama or {}).get("prompts", [])}
    sp = {p["name"]: p for p in (spec or {}).get("prompts", [])}
    tc = (spec or {}).get("prompt_token_check", {})

    def g(d, *keys):
        for k in keys:
            if d is None or k not in d:
                return None
            d = d[k]
        return d

    cols = [("llama.cpp plain", lambda n: g(lp.get(n), "plain", "tokens_per_second")),
            ("llama.cpp prompt-lookup", lambda n: g(lp.get(n), "prompt_lookup", "tokens_per_second")),
            ("specdec plain", lambda n: g(sp.get(n), "plain", "tokens_per_second")),
            ("specdec n-gram g=5", lambda n: g(sp.get(n), "ngram_g5", "tokens_per_second")),
            ("specdec default", lambda n: g(sp.get(n), "default", "tokens_per_second"))]
    lines = []
    threads = g(llama, "info", "threads") or g(spec, "threads")
    isa = "" if a.isa == "native" else f", both sides on {a.isa} only"
    lines.append(f"**Decoding tokens/s** ({os.path.basename((llama or {}).get('model', '') or a.model)}, {threads} threads, "
                 f"temperature 0, up to {a.max_new_tokens} new tokens, prefill excluded{isa})")
    lines.append("")
    lines.append("| prompt | prompt tokens (llama.cpp / specdec) | new tokens (llama.cpp / llama.cpp PLD / specdec) | "
                 + " | ".join(c for c, _ in cols) + " |")
    lines.append("|---|---|---|" + "---|" * len(cols))
    table_rows = []
    for n in names:
        ptoks = f"{fmt(g(lp.get(n), 'prompt_tokens'), 'd')} / {fmt(g(tc.get(n), 'specdec_prompt_tokens'), 'd')}"
        if g(tc.get(n), "ids_identical_to_llama") is True:
            ptoks += " (same ids)"
        elif g(tc.get(n), "ids_identical_to_llama") is False:
            ptoks += " (ids DIFFER)"
        def count(x):
            return "n/a" if x is None else f"{x}{'*' if x < a.max_new_tokens else ''}"

        ntoks = " / ".join([count(g(lp.get(n), "plain", "tokens")), count(g(lp.get(n), "prompt_lookup", "tokens")),
                            count(g(sp.get(n), "plain", "tokens"))])
        vals = [f(n) for _, f in cols]
        table_rows.append(vals)
        lines.append(f"| {n} | {ptoks} | {ntoks} | " + " | ".join(fmt(v) for v in vals) + " |")
    means = [mean([r[i] for r in table_rows]) for i in range(len(cols))]
    lines.append("| **mean** | | | " + " | ".join(f"**{fmt(v)}**" for v in means) + " |")
    lines.append("")
    default_proposers = sorted({str(g(sp.get(n), "default", "proposer")) for n in names if g(sp.get(n), "default", "proposer")})
    lines.append("`*` = fewer than the maximum: stopped at an end-of-generation token (counted). "
                 "specdec plain = `--proposer none`, "
                 "n-gram = `--proposer ngram -g 5 --fixed-g`, default = no flags (each prompt alone: "
                 f"{' / '.join(default_proposers) or 'n/a'}, g <= 8, adaptive); llama.cpp prompt-lookup = "
                 f"`LlamaPromptLookupDecoding(num_pred_tokens={NUM_PRED_TOKENS})` as `draft_model`.")
    lines.append("")
    same_text = [g(sp.get(n), "baseline_text_matches_llama_plain") for n in names]
    same_pld = [g(lp.get(n), "prompt_lookup_identical_to_plain") for n in names]
    same_ids = [g(tc.get(n), "ids_identical_to_llama") for n in names]
    checks = []
    same_jinja = [g(lp.get(n), "jinja_template_matches") for n in names]
    if any(x is not None for x in same_jinja):
        checks.append("the GGUF's Jinja chat template (llama-cpp-python's Jinja2ChatFormatter) renders the same prompt "
                      f"text as specdec's ChatML: {sum(x is True for x in same_jinja)}/{len(names)}")
    if any(x is not None for x in same_ids):
        checks.append(f"prompt token ids identical (specdec_tokenize_tool vs llama.cpp): {sum(x is True for x in same_ids)}/{len(names)}")
    if any(x is not None for x in same_text):
        diverge = [f"{n} at char {g(sp.get(n), 'text_common_prefix_chars')}" for n, x in zip(names, same_text)
                   if x is False and g(sp.get(n), "text_common_prefix_chars") is not None]
        checks.append(f"specdec's greedy text equals llama.cpp's: {sum(x is True for x in same_text)}/{len(names)}"
                      + (f" (first difference: {', '.join(diverge)})" if diverge else ""))
    if any(x is not None for x in same_pld):
        diverge = []
        for n, x in zip(names, same_pld):
            if x is False:
                ia, ib = g(lp.get(n), "plain", "ids"), g(lp.get(n), "prompt_lookup", "ids")
                diverge.append(f"{n} at token {len(os.path.commonprefix([ia, ib]))}")
        checks.append(f"llama.cpp prompt-lookup output equals its plain output: {sum(x is True for x in same_pld)}/{len(names)}"
                      + (f" (first difference: {', '.join(diverge)})" if diverge else ""))
    if checks:
        lines.append("Checks: " + "; ".join(checks) + ".")
        lines.append("")
    internal = mean([g(lp.get(n), "plain", "internal_one_token_ms") for n in names])
    if internal and means[0]:
        lines.append(f"llama.cpp plain by llama.cpp's own timer (`llama_perf_context` t_eval / n_eval, mean over prompts): "
                     f"{internal:.2f} ms per token = {1e3 / internal:.1f} tokens/s; the table's wall-clock figure "
                     f"({means[0]:.1f}) includes llama-cpp-python's generate loop and sampling.")
    lines.append("")

    def fw(side, context, which, key):
        return g(side, "forwards", str(context), which, key) if side is not None else None

    sb = g(spec, "bench_model")
    rows2 = []
    for context in FORWARD_CONTEXTS:
        rows2.append((f"1-token forward, ctx {context} (ms)", fw(llama, context, "one_token", "median_ms"),
                      fw(sb, context, "one_token", "ms"), ".2f"))
        rows2.append((f"6-token forward, ctx {context} (ms)", fw(llama, context, "six_token", "median_ms"),
                      fw(sb, context, "six_token", "ms"), ".2f"))
        rows2.append((f"r = 6-token / 1-token, ctx {context}", g(llama, "forwards", str(context), "r"),
                      g(sb, "forwards", str(context), "r"), ".2f"))
    rows2.append((f"prefill tokens/s ({PREFILL_TOKENS}-token prompt)", g(llama, "prefill", "tokens_per_second"),
                  g(spec, "prefill", "tokens_per_second"), ".0f"))
    rows2.append(("load to first token (ms)", g(llama, "load_to_first_token", "median_ms"),
                  g(sb, "load_to_first_token", "median_ms"), ".1f"))
    rows2.append(("peak RSS (MiB)", g(llama, "peak_rss_mib"), g(spec, "peak_rss_mib"), ".0f"))
    lines.append("| forward costs and memory | llama.cpp | specdec |")
    lines.append("|---|---|---|")
    for label, lv, sv, f in rows2:
        lines.append(f"| {label} | {fmt(lv, f)} | {fmt(sv, f)} |")
    lines.append("")
    ratio = means[2] / means[0] if means[0] and means[2] else None
    lines.append(f"**specdec plain / llama.cpp plain = {fmt(ratio, '.2f')}x** (mean tokens/s over prompts)")
    lines.append("")
    lines.append("llama.cpp forwards: median of repeated `llama_decode` calls (all rows' logits), KV rolled back each time; "
                 "specdec forwards: `bench_model --benchmark_filter=BM_Decode` (median forward of its iterations). specdec prefill: "
                 + (g(spec, "prefill", "method") or "n/a") +
                 "; llama.cpp prefill: one 512-token `llama_decode` (last logits only), median of 5. "
                 f"Load to first token: llama.cpp `Llama(n_ctx={N_CTX})` + tokenize and decode 'Hello', specdec "
                 "`bench_model --benchmark_filter=BM_LoadToFirstToken` (parse, tokenizer, model, first forward), each the "
                 f"median of {LOAD_REPS} in an already started process. "
                 "Peak RSS: llama.cpp = fresh child that loads the model and decodes the prompts plainly (ru_maxrss); "
                 "specdec = `/usr/bin/time -v` of the `--proposer none --compare` runs.")
    shares = {side: g(d, "interference", "foreign_cpu_share") for side, d in (("llama.cpp", llama), ("specdec", spec))}
    lines.append("")
    lines.append("Other processes' share of the CPU during the measurements: "
                 + ", ".join(f"{k} half {fmt(v * 100 if v is not None else None, '.1f')}%" for k, v in shares.items()) + ".")
    if any(v is not None and v > 0.05 for v in shares.values()):
        lines.append("")
        lines.append("**Warning:** other work shared the CPU during the measurements; re-run on a quiet machine.")
    table = "\n".join(lines)
    print(table)
    combined = {"model": a.model, "threads": threads, "max_new_tokens": a.max_new_tokens,
                "host": {"machine": platform.machine(), "cpus": os.cpu_count(), **cpu_description(),
                         "loadavg_at_report": os.getloadavg()},
                "isa": a.isa,
                "table": {"columns": [c for c, _ in cols], "rows": dict(zip(names, table_rows)), "mean": means},
                "specdec_plain_over_llama_plain": ratio,
                "forward_costs": {label: {"llama_cpp": lv, "specdec": sv} for label, lv, sv, _ in rows2},
                "markdown": table, "llama_cpp": llama, "specdec": spec}
    write_json(a.json, combined)
    log(f"wrote {a.json}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def common(p):
        p.add_argument("--model", required=True)
        p.add_argument("--prompts", required=True)
        p.add_argument("--threads", type=int, required=True)
        p.add_argument("--max-new-tokens", type=int, default=128)

    p = sub.add_parser("llama")
    common(p)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--out", required=True)
    p = sub.add_parser("_llama-worker")
    common(p)
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--out", required=True)
    p = sub.add_parser("_llama-rss")
    common(p)
    p = sub.add_parser("specdec")
    common(p)
    p.add_argument("--build", required=True)
    p.add_argument("--llama-json", required=True, help="the llama step's output (prompt renderings, prefill prompt)")
    p.add_argument("--tokenize-tool", default="")
    p.add_argument("--prefill-reps", type=int, default=3)
    p.add_argument("--logdir", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("report")
    p.add_argument("--model", default="")
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--llama-json", default="")
    p.add_argument("--specdec-json", default="")
    p.add_argument("--json", required=True)
    p.add_argument("--isa", default="native", help="native, avx2 or avx-vnni (both sides held to that instruction set)")
    a = ap.parse_args()
    {"llama": cmd_llama, "_llama-worker": llama_worker, "_llama-rss": llama_rss_probe, "specdec": cmd_specdec,
     "report": cmd_report}[a.cmd](a)


if __name__ == "__main__":
    main()
