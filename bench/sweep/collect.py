#!/usr/bin/env python3
"""Collects the `specdec-generate --compare --json` files of scripts/sweep.sh into CSV, JSON and a Markdown table,
writes the gnuplot script for the two plots, and prints the measured speedup over the theoretical one per point.

Standard library only. The theory is the decoder's: theory::walltime_improvement(a, g, c, r) =
(1 - a^(g+1)) / ((1 - a)(g c + r)) for the measured acceptance a, mean drafts per step g, draft cost ratio c and
verify cost ratio r (`theoretical_speedup` in the CLI's JSON)."""
import argparse
import csv
import glob
import json
import math
import os
import sys

GOAL = 0.95
COLUMNS = ["proposer", "prompt", "temperature", "g", "tokens", "baseline_tokens_per_second",
           "speculative_tokens_per_second", "speedup", "acceptance_rate", "tau", "cost_ratio_c", "verify_cost_ratio",
           "theoretical_speedup", "speedup_over_theory", "meets_goal", "iid_tau", "overhead_fraction",
           "outputs_identical"]
PROPOSER_ORDER = {"ngram": 0, "draft": 1, "eagle": 2}
PROPOSER_COLOUR = {"ngram": "#1f6fb4", "draft": "#2a9d3a", "eagle": "#d1402a"}
PROMPT_COLOURS = ["#1f6fb4", "#d1402a", "#2a9d3a", "#8c4fb3", "#c7891a", "#17a2b8"]


def load_rows(runs):
    rows = []
    for path in sorted(glob.glob(os.path.join(runs, "*.json"))):
        j = json.load(open(path))
        s = j["speculative"]
        # Fields appear only when measured (docs/generate.schema.json): a run that verified no draft has no acceptance.
        a, g = s.get("acceptance_rate", 0.0), j["num_speculative_tokens"]
        theory = j.get("theoretical_speedup", 0.0)
        ratio = j["speedup"] / theory if theory else float("nan")
        # Tokens per step the theory expects for i.i.d. acceptance: (1 - a^(g+1)) / (1 - a).
        iid_tau = (g + 1) if a >= 1 else (1 - a ** (g + 1)) / (1 - a)
        rows.append({
            "proposer": j["proposer"], "prompt": j.get("prompt_name", os.path.basename(path)),
            "temperature": j["temperature"], "g": g, "tokens": s["tokens"],
            "baseline_tokens_per_second": j["baseline"]["tokens_per_second"],
            "speculative_tokens_per_second": s["tokens_per_second"], "speedup": j["speedup"],
            "acceptance_rate": a, "tau": s["mean_accepted_length"], "cost_ratio_c": s.get("cost_ratio_c", 0.0),
            "verify_cost_ratio": s.get("verify_cost_ratio", 1.0), "theoretical_speedup": theory,
            "speedup_over_theory": ratio, "meets_goal": bool(ratio >= GOAL), "iid_tau": iid_tau,
            "overhead_fraction": s.get("overhead_fraction", 0.0), "outputs_identical": j.get("outputs_identical"),
        })
    prompt_order = {}
    for path in sorted(glob.glob(os.path.join(os.path.dirname(runs.rstrip("/")), "prompts", "*.jsonl"))):
        prompt_order[os.path.basename(path)[3:-6]] = len(prompt_order)
    rows.sort(key=lambda r: (PROPOSER_ORDER.get(r["proposer"], 9), r["temperature"], prompt_order.get(r["prompt"], 99),
                             r["prompt"], r["g"]))
    return rows, prompt_order


def fmt(v, digits=2):
    return f"{v:.{digits}f}" if isinstance(v, float) and math.isfinite(v) else str(v)


def write_tables(rows, out, meta):
    with open(os.path.join(out, "sweep.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    with open(os.path.join(out, "sweep.json"), "w") as f:
        json.dump({**meta, "goal_speedup_over_theory": GOAL, "rows": rows}, f, indent=2)
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("| proposer | prompt | T | g | accept a | tau | c | r | speedup | theory | speedup / theory |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['proposer']} | {r['prompt']} | {r['temperature']:g} | {r['g']} | {r['acceptance_rate']:.3f} | "
                    f"{r['tau']:.2f} | {r['cost_ratio_c']:.3f} | {r['verify_cost_ratio']:.2f} | {r['speedup']:.2f}x | "
                    f"{r['theoretical_speedup']:.2f}x | {fmt(r['speedup_over_theory'])} |\n")


def write_plot(rows, out, prompt_order):
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    series = {}
    for r in rows:
        series.setdefault((r["proposer"], r["prompt"], r["temperature"]), []).append(r)
    for (p, prompt, t), rs in series.items():
        with open(os.path.join(data, f"{p}-{prompt}-t{t:g}.dat"), "w") as f:
            f.write("# g acceptance speedup theory tau\n")
            for r in rs:
                f.write(f"{r['g']} {r['acceptance_rate']:.6g} {r['speedup']:.6g} {r['theoretical_speedup']:.6g} "
                        f"{r['tau']:.6g}\n")
    proposers = sorted({k[0] for k in series}, key=lambda p: PROPOSER_ORDER.get(p, 9))
    prompts = sorted({k[1] for k in series}, key=lambda p: (prompt_order.get(p, 99), p))
    temps = sorted({k[2] for k in series})
    gmax = max(r["g"] for r in rows)
    pcolour = {p: PROMPT_COLOURS[i % len(PROMPT_COLOURS)] for i, p in enumerate(prompts)}
    ptype = {"ngram": 7, "draft": 5, "eagle": 9}
    lines = [
        "# Written by bench/sweep/collect.py; run with gnuplot from the sweep's output directory.",
        "set datafile commentschars '#'",
        f"set xrange [0.5:{gmax + 0.5}]", "set xtics 1", "set grid lc rgb '#dddddd'", "set key top right box opaque",
        f"set terminal pngcairo size {520 * len(temps) + 80},460 font 'DejaVu Sans,11'",
        "set output 'acceptance.png'",
        f"set multiplot layout 1,{len(temps)} title 'Acceptance rate vs g (SmolLM2-135M-Instruct)'",
        "set yrange [0:1.05]", "set xlabel 'g (drafts per step)'", "set ylabel 'acceptance rate a'",
    ]
    for t in temps:
        lines.append(f"set title 'temperature {t:g}'")
        plots = []
        for p in proposers:
            for prompt in prompts:
                if (p, prompt, t) in series:
                    plots.append(f"'data/{p}-{prompt}-t{t:g}.dat' using 1:2 with linespoints lw 2 pt {ptype.get(p, 7)} "
                                 f"ps 1.2 lc rgb '{pcolour[prompt]}' title '{p}, {prompt}'")
        lines.append("plot " + ", \\\n     ".join(plots))
    lines += ["unset multiplot", ""]
    smax = max(max(r["speedup"], r["theoretical_speedup"]) for r in rows)
    lines += [
        f"set terminal pngcairo size {400 * len(prompts) + 80},{340 * len(temps) + 60} font 'DejaVu Sans,10'",
        "set output 'speedup.png'",
        f"set multiplot layout {len(temps)},{len(prompts)} title 'Speedup over autoregressive decoding vs g: measured "
        "(solid) and theory for the measured a, c, r (dashed)'",
        f"set yrange [0:{math.ceil(smax * 1.15 * 2) / 2}]", "set ylabel 'speedup'", "set key top left Left reverse",
    ]
    for t in temps:
        for i, prompt in enumerate(prompts):
            lines.append(f"set title '{prompt}, temperature {t:g}'")
            plots = []
            for p in proposers:
                if (p, prompt, t) not in series:
                    continue
                f = f"'data/{p}-{prompt}-t{t:g}.dat'"
                c = PROPOSER_COLOUR.get(p, "#444444")
                plots.append(f"{f} using 1:3 with linespoints lw 2 pt 7 ps 1.1 lc rgb '{c}' title '{p} measured'")
                plots.append(f"{f} using 1:4 with linespoints lw 2 dt 2 pt 6 ps 1.1 lc rgb '{c}' title '{p} theory'")
            plots.append("1 with lines lc rgb '#888888' dt 3 notitle")
            lines.append("plot " + ", \\\n     ".join(plots))
    lines += ["unset multiplot", ""]
    with open(os.path.join(out, "plot.gp"), "w") as f:
        f.write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=float("nan"))
    ap.add_argument("--machine", default="")
    ap.add_argument("--command", default="")
    args = ap.parse_args()
    rows, prompt_order = load_rows(args.runs)
    if not rows:
        print("collect.py: no results in " + args.runs, file=sys.stderr)
        return 1
    meta = {"command": args.command, "machine": args.machine, "seconds": args.seconds}
    write_tables(rows, args.out, meta)
    write_plot(rows, args.out, prompt_order)
    print(f"\n{'proposer':<8} {'prompt':<12} {'T':>3} {'g':>2} {'a':>6} {'tau':>5} {'c':>6} {'r':>5} {'speedup':>8} "
          f"{'theory':>7} {'ratio':>6}  goal >= {GOAL}")
    met = 0
    for r in rows:
        met += r["meets_goal"]
        print(f"{r['proposer']:<8} {r['prompt']:<12} {r['temperature']:>3g} {r['g']:>2} {r['acceptance_rate']:>6.3f} "
              f"{r['tau']:>5.2f} {r['cost_ratio_c']:>6.3f} {r['verify_cost_ratio']:>5.2f} {r['speedup']:>7.2f}x "
              f"{r['theoretical_speedup']:>6.2f}x {fmt(r['speedup_over_theory']):>6}  "
              f"{'ok' if r['meets_goal'] else 'BELOW'}")
    print(f"\n{met} of {len(rows)} points reach {GOAL:.0%} of the theoretical speedup")
    return 0


if __name__ == "__main__":
    sys.exit(main())
