#!/usr/bin/env python3
"""Plots bench_synthetic's JSON: the decoder's speedup over plain decoding against g, one curve per acceptance rate
alpha, measured (solid) beside the theory for each point's measured r (dashed), and the adaptive policy's point
(a star at its mean g). Standard library plus gnuplot (Debian gnuplot-nox, which scripts/setup.sh installs).

    ./build/bin/bench_synthetic --json out/synthetic.json
    bench/plot-synthetic.py out/synthetic.json [--out bench/results/synthetic.png]
"""
import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

COLOURS = ["#444444", "#1f77b4", "#2ca02c", "#ff7f0e", "#d62728", "#9467bd", "#8c564b"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="bench_synthetic --json output")
    ap.add_argument("--out", default="synthetic.png", help="PNG to write (default synthetic.png)")
    a = ap.parse_args()
    if shutil.which("gnuplot") is None:
        print("plot-synthetic: gnuplot not found (install gnuplot-nox)", file=sys.stderr)
        return 1
    with open(a.json) as f:
        d = json.load(f)
    fixed, adaptive = {}, {}
    for p in d["points"]:
        alpha = float(p["alpha"])
        if p["g"] == "adaptive":
            adaptive[alpha] = (float(p["mean_gamma"]), float(p["speedup"]))
        else:
            fixed.setdefault(alpha, []).append((int(p["g"]), float(p["speedup"]), float(p["theory"])))
    if not fixed:
        print(f"plot-synthetic: {a.json} holds no fixed-g points", file=sys.stderr)
        return 1
    out = os.path.abspath(a.out)
    ymax = max(max(s, t) for pts in fixed.values() for _, s, t in pts)
    ymax = max([ymax] + [s for _, s in adaptive.values()])
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, alpha in enumerate(sorted(fixed)):
            colour = COLOURS[i % len(COLOURS)]
            dat = os.path.join(tmp, f"fixed-{i}.dat")
            with open(dat, "w") as f:
                for g, s, t in sorted(fixed[alpha]):
                    f.write(f"{g} {s} {t}\n")
            plots.append(f"'{dat}' using 1:2 with linespoints lw 2 pt 7 ps 1.1 lc rgb '{colour}' title 'alpha {alpha:g}'")
            plots.append(f"'{dat}' using 1:3 with lines lw 2 dt 2 lc rgb '{colour}' notitle")
            if alpha in adaptive:
                ad = os.path.join(tmp, f"adaptive-{i}.dat")
                with open(ad, "w") as f:
                    f.write(f"{adaptive[alpha][0]} {adaptive[alpha][1]}\n")
                plots.append(f"'{ad}' using 1:2 with points pt 3 ps 2.5 lw 2 lc rgb '{colour}' notitle")
        script = [
            "set terminal pngcairo size 760,520 font 'DejaVu Sans,10'",
            f"set output '{out}'",
            "set termoption noenhanced",
            f"set title \"Synthetic acceptance, {d.get('model', '')}, {d.get('threads', '?')} threads\\n"
            "measured (solid), theory for the measured r (dashed), adaptive draft length at its mean g (star)\"",
            "set xlabel 'g (drafts per step)'",
            "set ylabel 'speedup over plain decoding'",
            f"set yrange [0:{math.ceil(ymax * 1.15 * 2) / 2}]",
            "set grid",
            "set key top left",
            "plot " + ", \\\n     ".join(plots),
            "",
        ]
        gp = os.path.join(tmp, "plot.gp")
        with open(gp, "w") as f:
            f.write("\n".join(script))
        subprocess.run(["gnuplot", gp], check=True)
    print(f"plot-synthetic: wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
