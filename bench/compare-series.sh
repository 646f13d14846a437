#!/usr/bin/env bash
# Repeated, alternated `specdec-generate --compare` runs of one demo prompt under named configurations, for ratios too
# close to 1 for a single run on a noisy host: each repeat runs every configuration once (even repeats time the
# baseline second), and the table gives each configuration's mean speedup over plain decoding +- its standard error,
# with the drafting share, acceptance, tau, in-run r and shadow probes. `control` runs plain against plain.
# --prompts FILE takes every prompt of a prompt file instead (one per line, or JSONL with "prompt"), each run alone:
# within a repeat, each prompt runs every configuration before the next prompt, so a change of the host's speed falls
# on all configurations alike; the table then adds each repeat's mean over the prompts and the worst prompt's speedup.
#
#   bench/compare-series.sh [--prompt chat | --prompts FILE] [--repeats 10] [--threads 2] [--out out/series]
#                           NAME="FLAGS" [NAME="FLAGS" ...]      e.g. defaults="" control="--proposer none"
#   bench/compare-series.sh --prompts bench/prompts/chat.jsonl --repeats 2 defaults="" eagle="--proposer eagle"
#
# Writes OUT/runs.jsonl and prints the table. The build's specdec-generate is taken from SPECDEC_BUILD_DIR (default build/);
# a configuration named NAME@DIR runs DIR/bin/specdec-generate instead, so that two builds alternate in one series
# (e.g. new="" old@/tmp/old-build="").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${SPECDEC_BUILD_DIR:-$root/build}/bin/specdec-generate"
prompt=chat prompts="" repeats=10 threads=2 out="$root/out/series"
while (($#)); do
  case "$1" in
    --prompt) prompt="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
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
rm -f "$out"/prompt-*.jsonl "$out"/prompt-*.name  # an earlier series' prompts
if [[ -n "$prompts" ]]; then
  [[ -f "$prompts" ]] || { echo "compare-series: --prompts: '$prompts' is not a file" >&2; exit 2; }
  python3 - "$prompts" "$out" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1], encoding="utf-8"):
    if not line.strip():
        continue
    try:
        name = json.loads(line).get("name", f"prompt{n}")
    except (ValueError, AttributeError):
        name = f"prompt{n}"
    open(f"{sys.argv[2]}/prompt-{n:03d}.jsonl", "w", encoding="utf-8").write(line.rstrip("\n") + "\n")
    open(f"{sys.argv[2]}/prompt-{n:03d}.name", "w", encoding="utf-8").write(str(name))
    n += 1
if n == 0:
    sys.exit(f"compare-series: --prompts: no prompt in {sys.argv[1]}")
PY
  prompt="$(basename "$prompts")"
else
  python3 - "$root/examples/prompts/demo.jsonl" "$prompt" "$out/prompt-000.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d["name"] == sys.argv[2]:
        open(sys.argv[3], "w").write(json.dumps({"prompt": d["prompt"]}) + "\n")
        open(sys.argv[3][:-len(".jsonl")] + ".name", "w").write(sys.argv[2])
        break
else:
    sys.exit(f"compare-series: no demo prompt named {sys.argv[2]}")
PY
fi
: > "$out/runs.jsonl"
echo "compare-series: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg) at start" >&2
for rep in $(seq 1 "$repeats"); do
  for pf in "$out"/prompt-*.jsonl; do
    pname="$(cat "${pf%.jsonl}.name")"
    for cfg in "$@"; do
      name="${cfg%%=*}"
      run_bin="$(bin_of "$name")"
      name="${name%%@*}"
      read -r -a flags <<< "${cfg#*=}"
      if ((rep % 2 == 0)); then flags+=(--baseline-last); fi
      if ! "$run_bin" --chat --prompt-file "$pf" --compare --threads "$threads" "${flags[@]}" --json "$out/run.json" \
        >/dev/null 2>"$out/run.err"; then
        echo "compare-series: $name on $pname failed:" >&2; tail -n 3 "$out/run.err" >&2; exit 1
      fi
      python3 - "$out/run.json" "$name" "$rep" "$pname" >> "$out/runs.jsonl" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
s = j["speculative"]
print(json.dumps({"config": sys.argv[2], "repeat": int(sys.argv[3]), "prompt": sys.argv[4], "speedup": j["speedup"],
                  "drafting": j.get("drafting_step_fraction", 0.0), "acceptance": s.get("acceptance_rate", 0.0),
                  "tau": s.get("mean_accepted_length", 1.0), "r": s.get("verify_cost_ratio", 1.0),
                  "shadow_probes": j.get("shadow_probes", 0)}))
PY
    done
  done
done
python3 - "$out/runs.jsonl" "$prompt" <<'PY'
import collections, json, math, statistics as st, sys
runs = collections.OrderedDict()
for line in open(sys.argv[1]):
    r = json.loads(line)
    runs.setdefault(r["config"], []).append(r)
many = len({x["prompt"] for v in runs.values() for x in v}) > 1
extra = " each repeat's mean | worst prompt |" if many else ""
print(f"| {sys.argv[2]} | runs | speedup (mean +- s.e.) | median |{extra} steps drafting | acceptance | tau | r "
      "| shadow probes a run |")
print("|---|---|---|---|" + ("---|---|" if many else "") + "---|---|---|---|---|")
for name, v in runs.items():
    s = [x["speedup"] for x in v]
    se = st.stdev(s) / math.sqrt(len(s)) if len(s) > 1 else float("nan")
    mean = lambda k: st.mean(x.get(k, 0.0) for x in v)
    cols = ""
    if many:
        reps = collections.OrderedDict()
        for x in v:
            reps.setdefault(x["repeat"], []).append(x["speedup"])
        worst = min(v, key=lambda x: x["speedup"])
        cols = (" " + " / ".join(f"{st.mean(r):.3f}x" for r in reps.values()) +
                f" | {worst['speedup']:.2f}x ({worst['prompt']}) |")
    print(f"| {name} | {len(v)} | {st.mean(s):.3f}x +- {se:.3f} | {st.median(s):.3f}x |{cols} "
          f"{100 * mean('drafting'):.1f}% | {mean('acceptance'):.2f} | {mean('tau'):.2f} | {mean('r'):.2f} "
          f"| {mean('shadow_probes'):.1f} |")
PY
