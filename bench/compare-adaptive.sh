#!/usr/bin/env bash
# The adaptive draft-length policy (specdec-generate's default) against plain decoding and a sweep of fixed g, per demo
# prompt, in one sitting. Every run is `specdec-generate --compare` on one prompt (batch size 1), so each speedup is a ratio
# to a plain baseline timed in the same process; the configurations are interleaved and repeated, and the table gives the
# median speedup of each configuration over the repeats, the best fixed g, and adaptive / best fixed. A control runs
# plain decoding against itself the same way (--proposer none --compare): its "speedup" is what the measurement gives
# two identical runs (this host's noise and the order effect), the yardstick for a ratio near 1.
#
#   bench/compare-adaptive.sh [--repeats N] [--g "1 2 3 4 5 6 8"] [--max-g 8] [--proposer ngram] [--threads 2]
#                             [--max-new-tokens 128] [--out out/adaptive] [-- extra specdec-generate flags]
#
# Writes OUT/runs.jsonl (one line per run) and OUT/table.md; prints the table. The build's specdec-generate is taken from
# SPECDEC_BUILD_DIR (default build/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${SPECDEC_BUILD_DIR:-$root/build}/bin/specdec-generate"
repeats=3 gs="1 2 3 4 5 6 8" max_g=8 proposer=ngram threads=2 max_new=128 out="$root/out/adaptive"
extra=()
while (($#)); do
  case "$1" in
    --repeats) repeats="$2"; shift 2 ;;
    --g) gs="$2"; shift 2 ;;
    --max-g) max_g="$2"; shift 2 ;;
    --proposer) proposer="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --max-new-tokens) max_new="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "compare-adaptive: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$bin" ]] || { echo "compare-adaptive: $bin not built (cmake --build <dir> --target specdec-generate)" >&2; exit 1; }
mkdir -p "$out/prompts"
: > "$out/runs.jsonl"

# one prompt file per demo prompt
python3 - "$root/examples/prompts/demo.jsonl" "$out/prompts" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    open(f"{sys.argv[2]}/{d['name']}.jsonl", "w").write(json.dumps({"prompt": d["prompt"]}) + "\n")
PY
names=$(python3 -c "import json,sys; print(' '.join(json.loads(l)['name'] for l in open(sys.argv[1])))" \
  "$root/examples/prompts/demo.jsonl")

echo "compare-adaptive: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
for rep in $(seq 1 "$repeats"); do
  for name in $names; do
    for cfg in control adaptive $gs; do
      prop="$proposer"
      if [[ $cfg == control ]]; then prop=none; flags=();
      elif [[ $cfg == adaptive ]]; then flags=(-g "$max_g"); else flags=(-g "$cfg" --fixed-g); fi
      # Even repeats time the baseline second: the order of the two runs in one process moves a ratio by a few percent.
      if ((rep % 2 == 0)); then flags+=(--baseline-last); fi
      json="$out/run.json"
      "$bin" --chat --prompt-file "$out/prompts/$name.jsonl" --proposer "$prop" --compare --threads "$threads" \
        --max-new-tokens "$max_new" "${flags[@]}" "${extra[@]}" --json "$json" >/dev/null 2>&1
      python3 - "$json" "$name" "$cfg" "$rep" >> "$out/runs.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["speculative"]
print(json.dumps({"prompt": sys.argv[2], "config": sys.argv[3], "repeat": int(sys.argv[4]), "speedup": j["speedup"],
                  "tokens_per_second": s["tokens_per_second"], "baseline_tokens_per_second": j["baseline"]["tokens_per_second"],
                  "acceptance_rate": s.get("acceptance_rate"), "tau": s["mean_accepted_length"], "r": s.get("verify_cost_ratio"),
                  "drafting_step_fraction": j.get("drafting_step_fraction"), "mean_gamma": j.get("mean_gamma"),
                  "outputs_identical": j["outputs_identical"], "baseline_last": j.get("baseline_last", False)}))
PY
    done
    echo "compare-adaptive: repeat $rep/$repeats, $name done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  done
done
echo "compare-adaptive: load average $(cut -d' ' -f1-3 /proc/loadavg) at the end" >&2

python3 - "$out/runs.jsonl" "$gs" > "$out/table.md" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
gs = sys.argv[2].split()
prompts = list(dict.fromkeys(r["prompt"] for r in runs))
def med(prompt, cfg, key="speedup"):
    v = [r[key] for r in runs if r["prompt"] == prompt and r["config"] == cfg and r[key] is not None]
    return statistics.median(v) if v else float("nan")
head = ("| prompt | control (plain / plain) | adaptive | " + "".join(f"g = {g} | " for g in gs) +
        "best fixed | adaptive / best | adaptive: steps drafting, mean g | identical |")
print(head)
print("|" + "---|" * (len(gs) + 7))
for p in prompts:
    fixed = {g: med(p, g) for g in gs}
    a = med(p, "adaptive")
    ident = all(r["outputs_identical"] for r in runs if r["prompt"] == p)
    cells = "".join(f"{fixed[g]:.2f}x | " for g in gs)
    if fixed:  # --g "" runs the adaptive policy alone: no fixed g to compare with
        best = max(fixed, key=fixed.get)
        best_cells = f"{fixed[best]:.2f}x (g = {best}) | {a / fixed[best]:.0%}"
    else:
        best_cells = "- | -"
    print(f"| {p} | {med(p, 'control'):.2f}x | **{a:.2f}x** | {cells}{best_cells} | "
          f"{med(p, 'adaptive', 'drafting_step_fraction'):.0%}, {med(p, 'adaptive', 'mean_gamma'):.1f} | {'yes' if ident else 'NO'} |")
PY
cat "$out/table.md"
