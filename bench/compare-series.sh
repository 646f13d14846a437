#!/usr/bin/env bash
# Repeated, alternated `specdec-generate --compare` runs of one demo prompt under named configurations, for ratios too
# close to 1 for a single run on a noisy host: each repeat runs every configuration once (even repeats time the
# baseline second), and the table gives each configuration's mean speedup over plain decoding +- its standard error,
# with the drafting share, acceptance, in-run r and shadow probes. `control` runs plain against plain.
#
#   bench/compare-series.sh [--prompt chat] [--repeats 10] [--threads 2] [--out out/series]
#                           NAME="FLAGS" [NAME="FLAGS" ...]      e.g. defaults="" control="--proposer none"
#
# Writes OUT/runs.jsonl and prints the table. The build's specdec-generate is taken from SPECDEC_BUILD_DIR (default build/);
# a configuration named NAME@DIR runs DIR/bin/specdec-generate instead, so that two builds alternate in one series
# (e.g. new="" old@/tmp/old-build="").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${SPECDEC_BUILD_DIR:-$root/build}/bin/specdec-generate"
prompt=chat repeats=10 threads=2 out="$root/out/series"
while (($#)); do
  case "$1" in
    --prompt) prompt="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *=*) break ;;
    *) echo "compare-series: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
(($#)) || { echo "compare-series: name at least one configuration, NAME=\"FLAGS\"" >&2; exit 2; }
bin_of() {  # the specdec-generate a configuration name selects
  if [[ "$1" == *@* ]]; then echo "${1#*@}/bin/specdec-generate"; else echo "$bin"; fi
}
for cfg in "$@"; do
  b="$(bin_of "${cfg%%=*}")"
  [[ -x "$b" ]] || { echo "compare-series: $b not built (cmake --build <dir> --target specdec-generate)" >&2; exit 1; }
done
mkdir -p "$out"
python3 - "$root/examples/prompts/demo.jsonl" "$prompt" "$out/prompt.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d["name"] == sys.argv[2]:
        open(sys.argv[3], "w").write(json.dumps({"prompt": d["prompt"]}) + "\n")
        break
else:
    sys.exit(f"compare-series: no demo prompt named {sys.argv[2]}")
PY
: > "$out/runs.jsonl"
echo "compare-series: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
for rep in $(seq 1 "$repeats"); do
  for cfg in "$@"; do
    name="${cfg%%=*}"
    run_bin="$(bin_of "$name")"
    name="${name%%@*}"
    read -r -a flags <<< "${cfg#*=}"
    if ((rep % 2 == 0)); then flags+=(--baseline-last); fi
    "$run_bin" --chat --prompt-file "$out/prompt.jsonl" --compare --threads "$threads" "${flags[@]}" --json "$out/run.json" \
      >/dev/null 2>&1
    python3 - "$out/run.json" "$name" "$rep" >> "$out/runs.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["speculative"]
print(json.dumps({"config": sys.argv[2], "repeat": int(sys.argv[3]), "speedup": j["speedup"],
                  "drafting": j.get("drafting_step_fraction", 0.0), "acceptance": s.get("acceptance_rate", 0.0),
                  "r": s.get("verify_cost_ratio", 1.0), "shadow_probes": j.get("shadow_probes", 0)}))
PY
  done
done
python3 - "$out/runs.jsonl" "$prompt" <<'PY'
import collections, json, math, statistics as st, sys
runs = collections.OrderedDict()
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["config"], []).append(r)
print(f"| {sys.argv[2]} | runs | speedup (mean +- s.e.) | median | steps drafting | acceptance | r | shadow probes a run |")
print("|---|---|---|---|---|---|---|---|")
for name, v in runs.items():
    s = [x["speedup"] for x in v]
    se = st.stdev(s) / math.sqrt(len(s)) if len(s) > 1 else float("nan")
    mean = lambda k: st.mean(x[k] for x in v)
    print(f"| {name} | {len(v)} | {st.mean(s):.3f}x +- {se:.3f} | {st.median(s):.3f}x | {100 * mean('drafting'):.1f}% "
          f"| {mean('acceptance'):.2f} | {mean('r'):.2f} | {mean('shadow_probes'):.1f} |")
PY
