#!/usr/bin/env python3
"""How far a draft-length policy is from the most any policy could get from a chain drafter (temperature 0).

Reads greedy runs that drafted a fixed g every step and traced their steps (scripts/eval-drafts.sh --trace ... --
--fixed-g -g G --draft-min-path-prob 0: each <run>.json with its <run>.trace.jsonl, specdec-generate --trace-steps). At
temperature 0 the drafts and the target's tokens are fixed by the text. A traced step whose chain the target accepted a
drafts of emits min(a, d) + 1 tokens under a policy that verifies d of them. Each traced step is replayed as one
decision of the policy: exact for the oracle (d = a lands where the traced run did), an approximation for the others
(one that verifies d < a would next draft from another position, whose chain the trace does not hold), checked by
replaying the CLI's own rule against its measured speedup. Each step is priced with the cost model

  plain step (d = 0, nothing drafted): 1
  step drafting s head steps and verifying d drafts: r(d + 1) + cold + (s - 1) warm

with r(k) the target's k-row forward over its 1-row forward (the element-wise median of the --measured runs' startup cost
profiles, which the CLI's adaptive policy times in each process), cold the drafter's first step after a target forward
and warm each further one, both as fractions of a 1-row forward (bench_drafts: BM_Eagle/weights:2/bits:16/rows:1/
batch:1/cold:1 us_per_step and cold:0, over BM_Target). The model leaves out the head's catch-up on the accepted tokens
and every step's host work, so each figure is optimistic by the same margin. Policies replayed:

  oracle            knows a: drafts and verifies exactly a (none when a = 0); no policy can do better;
  fixed g           drafts and verifies g every step;
  confidence cut    the CLI's greedy rule: the proposer drafts while the product of its confidences stays >= --bound,
                    then d maximises the step's expected tokens (1 + sum of the confidences' products) over r(d + 1);
  throughput cut    the same proposal, d maximising expected tokens - lambda r(d + 1), lambda the run's own throughput
                    (Dinkelbach's rule for a ratio of sums).

Also printed: how often the first draft was accepted by tenth of its confidence (the calibration in decoding), the
confidence cut and the oracle with r(k) = 1 (a what-if: a target whose verification rows cost nothing
beyond the first, as on a device where a forward is bound by reading its weights), and the measured speedup of the
--measured runs (e.g. the CLI's default policy on the same prompts, with
--compare): the ratio of their baselines' total time to their speculative runs' total time.

Usage: bench/policy_ceiling.py --runs DIR [DIR ...] --measured DIR [DIR ...] --cold C --warm W [--bound 0.15]
"""
import argparse
import glob
import json
import os
import statistics
import sys


def fail(msg):
    print(f"policy_ceiling.py: {msg}", file=sys.stderr)
    sys.exit(2)


def json_files(dirs, flag):
    files = []
    for d in dirs:
        if not os.path.isdir(d):
            fail(f"{flag}: '{d}' is not a directory")
        found = sorted(f for f in glob.glob(os.path.join(d, "*.json")))
        if not found:
            fail(f"{flag}: '{d}' holds no .json files")
        files += found
    return files


def load_steps(files):
    """(a, confidences) for every traced step of the fixed-g greedy runs."""
    steps = []
    g_max = 0
    for f in files:
        with open(f) as fh:
            j = json.load(fh)
        if j.get("temperature", 0) != 0:
            fail(f"--runs: {f}: temperature {j['temperature']}; the replay needs greedy runs")
        if j.get("adaptive", False):
            fail(f"--runs: {f}: an adaptive run; the replay needs --fixed-g runs (every step verifying what it drafted)")
        g_max = max(g_max, j.get("num_speculative_tokens", 0))
        trace = f[: -len(".json")] + ".trace.jsonl"
        if not os.path.isfile(trace):
            fail(f"--runs: {f}: no {os.path.basename(trace)} beside it (scripts/eval-drafts.sh --trace)")
        with open(trace) as fh:
            for n, line in enumerate(fh, 1):
                e = json.loads(line)
                if e["verified"] != e["proposed"]:
                    fail(f"--runs: {trace}:{n}: {e['verified']} of {e['proposed']} drafts verified; the replay needs "
                         f"runs that verify every draft (--fixed-g)")
                if e.get("tree"):
                    fail(f"--runs: {trace}:{n}: a tree; the replay takes chains")
                c = e.get("confidence", [])
                if e["proposed"] > 0 and len(c) != e["proposed"]:
                    fail(f"--runs: {trace}:{n}: the proposer reported no confidences (EAGLE and the draft model do)")
                steps.append((e["accepted"], c))
    if not steps:
        fail("--runs: the traces hold no steps")
    return steps, g_max


def load_profile_and_speedup(files):
    profiles = []
    spec = base = 0.0
    for f in files:
        with open(f) as fh:
            j = json.load(fh)
        if "cost_profile" in j:
            profiles.append(j["cost_profile"])
        if "baseline" not in j:
            fail(f"--measured: {f}: no baseline (run with --compare)")
        spec += j["speculative"]["tokens"] / j["speculative"]["tokens_per_second"]
        base += j["baseline"]["tokens"] / j["baseline"]["tokens_per_second"]
    if not profiles:
        fail("--measured: no cost_profile in any file (runs under the adaptive policy, the CLI default, time one)")
    n = min(len(p) for p in profiles)
    return [statistics.median(p[k] for p in profiles) for k in range(n)], base / spec, len(files)


def expected_tokens(c, d):
    t = p = 1.0
    for i in range(d):
        p *= c[i]
        t += p
    return t


def proposal_depth(c, bound):
    """Drafts kept, and head steps taken, by a proposer that stops where the confidences' product falls below bound."""
    p = 1.0
    for i, ci in enumerate(c):
        p *= ci
        if p < bound:
            return i, i + 1
    return len(c), len(c)


def replay(steps, r, cold, warm, policy, bound=0.15, lam=0.0, g=0):
    tokens = cost = 0.0
    for a, c in steps:
        if policy == "oracle":
            d = s = a
        elif policy == "fixed":
            d = s = min(g, len(c))
        else:
            kept, s = proposal_depth(c, bound)
            if policy == "confidence":
                d = max(range(kept + 1), key=lambda k: (expected_tokens(c, k) / r[k], -k))
            else:
                d = max(range(kept + 1), key=lambda k: (expected_tokens(c, k) - lam * r[k], -k))
        if d >= len(r):
            fail(f"a step verifies {d} drafts and the cost profile stops at {len(r) - 1}")
        tokens += min(a, d) + 1
        cost += 1.0 if s == 0 else r[d] + cold + (s - 1) * warm
    return tokens / cost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--measured", nargs="+", required=True)
    ap.add_argument("--cold", type=float, required=True)
    ap.add_argument("--warm", type=float, required=True)
    ap.add_argument("--bound", type=float, default=0.15)
    a = ap.parse_args()
    for name in ("cold", "warm"):
        v = getattr(a, name)
        if not (0 <= v < 10):
            fail(f"--{name}: expected a fraction of a 1-token forward in [0, 10), got {v}")
    if not (0 <= a.bound <= 1):
        fail(f"--bound: expected a probability in [0, 1], got {a.bound}")
    steps, g_max = load_steps(json_files(a.runs, "--runs"))
    r, measured, n_measured = load_profile_and_speedup(json_files(a.measured, "--measured"))
    hist = {}
    for k, _ in steps:
        hist[k] = hist.get(k, 0) + 1
    tau = sum(k + 1 for k, _ in steps) / len(steps)
    first = sum(1 for k, _ in steps if k >= 1) / len(steps)
    print(f"{len(steps)} steps drafting up to {g_max}: tau {tau:.2f}, first draft accepted {first:.3f}")
    print("steps by accepted drafts: " + " ".join(f"{k}:{hist[k]}" for k in sorted(hist)))
    print("r(k), k = 1.. " + " ".join(f"{x:.2f}" for x in r) + f"; cold {a.cold:.3f}, warm {a.warm:.3f}")
    bins = {}
    for k, c in steps:
        if c:
            e = bins.setdefault(min(int(c[0] * 10), 9), [0, 0.0, 0])
            e[0] += 1
            e[1] += c[0]
            e[2] += 1 if k >= 1 else 0
    print("first drafts by confidence (mean confidence -> share accepted, steps): " +
          ", ".join(f"{v[1] / v[0]:.2f} -> {v[2] / v[0]:.2f} ({v[0]})" for _, v in sorted(bins.items())))
    oracle = replay(steps, r, a.cold, a.warm, "oracle")
    fixed = [(g, replay(steps, r, a.cold, a.warm, "fixed", g=g)) for g in range(1, min(g_max, len(r) - 1) + 1)]
    best_g, best_fixed = max(fixed, key=lambda t: t[1])
    conf = replay(steps, r, a.cold, a.warm, "confidence", bound=a.bound)
    lam = conf
    for _ in range(20):  # Dinkelbach: lambda <- the throughput its own rule reaches
        nxt = replay(steps, r, a.cold, a.warm, "throughput", bound=a.bound, lam=lam)
        if abs(nxt - lam) < 1e-9:
            break
        lam = nxt
    print("")
    print("| policy | speedup over plain decoding |")
    print("|---|---:|")
    print(f"| oracle (verifies exactly the drafts the target accepts) | {oracle:.2f}x |")
    print(f"| throughput cut, proposals at confidence product >= {a.bound:g} | {lam:.2f}x |")
    print(f"| confidence cut (the CLI's rule), the same proposals | {conf:.2f}x |")
    print(f"| best fixed g (g = {best_g}) | {best_fixed:.2f}x |")
    print(f"| measured: --measured, {n_measured} runs | {measured:.2f}x |")
    flat = [1.0] * len(r)
    print(f"| what if: confidence cut with verification rows free (r(k) = 1) | "
          f"{replay(steps, flat, a.cold, a.warm, 'confidence', bound=a.bound):.2f}x |")
    print(f"| what if: oracle with verification rows free | {replay(steps, flat, a.cold, a.warm, 'oracle'):.2f}x |")


if __name__ == "__main__":
    main()
