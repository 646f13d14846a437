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

Trees (runs with --tree --tree-nodes N --tree-top-k K --fixed-g -g G --draft-min-path-prob 0: every node verified):
the tau of the n best nodes by path probability (EAGLE-2's rerank), timing-free, and the speedups of those cuts, of each
step's best n by the tree's value 1 + the sum of the kept path probabilities over r(n + 1), and of the oracle (the
accepted path only), a deeper level of w head rows costing warm (1 + --row-extra (w - 1)) (bench_drafts:
BM_Eagle/weights:2/bits:16/rows:4/batch:1/cold:0 over rows:1, less 1, over 3).

Usage: bench/policy_ceiling.py --runs DIR [DIR ...] --measured DIR [DIR ...] --cold C --warm W [--bound 0.15]
                               [--row-extra F]
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
    """(a, confidences) for every traced chain step and (parents, confidences, accepted nodes) for every tree step of the
    fixed-g greedy runs."""
    steps, trees = [], []
    plain = 0
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
                c = e.get("confidence", [])
                if e["proposed"] > 0 and len(c) != e["proposed"]:
                    fail(f"--runs: {trace}:{n}: the proposer reported no confidences (EAGLE and the draft model do)")
                if e["proposed"] == 0:
                    plain += 1  # no room left to draft (a request's last token): a plain step under any policy
                elif e.get("tree"):
                    trees.append((e["parents"], c, e["accepted_nodes"]))
                else:
                    steps.append((e["accepted"], c))
    if not steps and not trees:
        fail("--runs: the traces hold no steps")
    if steps and trees:
        fail("--runs: chains and trees in one replay; give the runs of one kind")
    if trees:
        trees += [([], [], [])] * plain
    else:
        steps += [(0, [])] * plain
    return steps, trees, g_max


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


def tree_nodes_by_value(parents, conf):
    """A tree's nodes (1-based) best first by path probability (ties: the lower index, so ancestors first), with each
    node's path probability and depth."""
    path, depth = [1.0], [0]
    for j, (p, c) in enumerate(zip(parents, conf)):
        path.append(path[p] * c)
        depth.append(depth[p] + 1)
    order = sorted(range(1, len(path)), key=lambda j: (-path[j], j))
    return order, path, depth


def replay_trees(trees, r, cold, warm, policy, n=0, row_extra=0.0):
    """Trees cut to their n best nodes (EAGLE-2's rerank; "top"), to the n <= the profile's best by the tree's value
    1 + the sum of the kept nodes' path probabilities over r(n + 1) ("value"), or to the accepted path ("oracle").
    Drafting the kept tree costs cold for its first level and, for each deeper level, warm (1 + row_extra (w - 1)) with
    w the kept nodes' distinct parents there (the head rows that level ran; rows expanded and not kept are left out)."""
    tokens = cost = 0.0
    for parents, conf, accepted in trees:
        order, path, depth = tree_nodes_by_value(parents, conf)
        if policy == "oracle":
            kept = set(accepted)
        else:
            limit = min(len(order), len(r) - 1)
            if policy == "top":
                k = min(n, len(order))
            elif policy == "depth":  # every node down to a depth, the depth by the same value
                value, best, kept = 1.0, 1.0 / r[0], set()
                for g in range(1, max(depth) + 1):
                    s_g = [j for j in order if depth[j] <= g]
                    if len(s_g) > limit:
                        break
                    v = 1.0 + sum(path[j] for j in s_g)
                    if v / r[len(s_g)] > best:
                        best, kept = v / r[len(s_g)], set(s_g)
                k = None
            else:
                value, best, k = 1.0, 1.0 / r[0], 0
                for i in range(limit):
                    value += path[order[i]]
                    if value / r[i + 1] > best:
                        best, k = value / r[i + 1], i + 1
            if k is not None:
                kept = set(order[:k])
        got = 0
        for a in accepted:
            if a not in kept:
                break
            got += 1
        rows = len(kept)
        tokens += got + 1
        if rows >= len(r):
            cost = float("nan")
        elif rows == 0:
            cost += 1.0
        else:
            heads = {}  # level -> the distinct parents of its kept nodes
            for j in kept:
                heads.setdefault(depth[j], set()).add(parents[j - 1])
            cost += r[rows] + cold + sum(warm * (1 + row_extra * (len(w) - 1)) for lvl, w in heads.items() if lvl > 1)
    return tokens / len(trees), tokens / cost


def main_trees(trees, r, a, measured, n_measured):
    n_max = max(len(p) for p, _, _ in trees)
    tau = sum(len(acc) + 1 for _, _, acc in trees) / len(trees)
    print(f"{len(trees)} tree steps of up to {n_max} nodes: tau {tau:.2f} with every node verified")
    print("r(k), k = 1.. " + " ".join(f"{x:.2f}" for x in r) + f"; cold {a.cold:.3f}, warm {a.warm:.3f}")
    print("")
    print("| tree policy | tau | speedup over plain decoding |")
    print("|---|---:|---:|")
    t, sp = replay_trees(trees, r, a.cold, a.warm, "oracle", row_extra=a.row_extra)
    print(f"| oracle (verifies the accepted path only) | {t:.2f} | {sp:.2f}x |")
    t, sp = replay_trees(trees, r, a.cold, a.warm, "value", row_extra=a.row_extra)
    print(f"| each step's best n <= {len(r) - 1} nodes by the tree's value over r(n + 1) | {t:.2f} | {sp:.2f}x |")
    t, sp = replay_trees(trees, r, a.cold, a.warm, "depth", row_extra=a.row_extra)
    print(f"| each step's best depth by the same value, every node down to it (the CLI's cut) | {t:.2f} | {sp:.2f}x |")
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64):
        if n > n_max:
            break
        t, sp = replay_trees(trees, r, a.cold, a.warm, "top", n, row_extra=a.row_extra)
        shown = f"{sp:.2f}x" if sp == sp else f"(no cost profile for {n + 1} rows)"
        print(f"| the {n} best nodes by path probability | {t:.2f} | {shown} |")
    print(f"| measured: --measured, {n_measured} runs | | {measured:.2f}x |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", nargs="+", required=True)
    ap.add_argument("--measured", nargs="+", required=True)
    ap.add_argument("--cold", type=float, required=True)
    ap.add_argument("--warm", type=float, required=True)
    ap.add_argument("--bound", type=float, default=0.15)
    ap.add_argument("--row-extra", type=float, default=0.0)
    a = ap.parse_args()
    for name in ("cold", "warm"):
        v = getattr(a, name)
        if not (0 <= v < 10):
            fail(f"--{name}: expected a fraction of a 1-token forward in [0, 10), got {v}")
    if not (0 <= a.row_extra < 10):
        fail(f"--row-extra: expected a fraction of a warm step in [0, 10), got {a.row_extra}")
    if not (0 <= a.bound <= 1):
        fail(f"--bound: expected a probability in [0, 1], got {a.bound}")
    steps, trees, g_max = load_steps(json_files(a.runs, "--runs"))
    r, measured, n_measured = load_profile_and_speedup(json_files(a.measured, "--measured"))
    if trees:
        main_trees(trees, r, a, measured, n_measured)
        return
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
