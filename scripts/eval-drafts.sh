#!/usr/bin/env bash
# Measures the bundled drafts (models/smollm2-135m-eagle, models/smollm2-135m-draft) on a prompt file (default: the built-in
# demo prompts; bench/prompts/chat.jsonl holds open-ended chat prompts no training set saw, bench/prompts/chat-holdout.jsonl
# ten more that no setting was tuned on, for checking), one prompt at a time (batch 1), with specdec-generate --compare (baseline and speculative in one process, outputs checked equal at
# temperature 0). Writes out/drafts/<proposer>-T<t>-<prompt>.json and prints a Markdown table: mean accepted length (tau,
# tokens per target forward), acceptance by draft position, c, r and the end-to-end speedup.
#
# Usage: scripts/eval-drafts.sh [--build DIR] [--prompts FILE] [--proposers "eagle draft"] [--temperatures "0 1"] [--out DIR]
#                               [--g N|default] [--trace] [-- extra specdec-generate args]
# --g: the most drafts a step (default 5; `default` leaves -g to specdec-generate's default, 8 under the adaptive policy).
# --trace: also write each run's steps beside its JSON (<proposer>-T<t>-<prompt>.trace.jsonl, specdec-generate
# --trace-steps), for bench/policy_ceiling.py.
# Expects a build (scripts/build.sh) and the model (scripts/setup.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$root/build"
proposers="eagle draft"
temperatures="0 1"
prompts="$root/examples/prompts/demo.jsonl"
g=5
trace=0
out="$root/out/drafts"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --proposers) proposers="$2"; shift 2 ;;
    --temperatures) temperatures="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --g) g="$2"; shift 2 ;;
    --trace) trace=1; shift ;;
    --) shift; break ;;
    *) echo "eval-drafts.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
gen="$build/bin/specdec-generate"
[[ -x "$gen" ]] || { echo "eval-drafts.sh: '$gen' not found (run scripts/build.sh or pass --build)" >&2; exit 1; }
[[ -f "$prompts" ]] || { echo "eval-drafts.sh: --prompts: '$prompts' is not a file" >&2; exit 2; }
mkdir -p "$out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
names=()
while IFS= read -r line; do
  [[ -z "${line// }" ]] && continue
  name="$(printf '%s' "$line" | sed -n 's/.*"name": *"\([^"]*\)".*/\1/p')"
  name="${name:-prompt${#names[@]}}"
  printf '%s\n' "$line" >"$tmp/$name.jsonl"
  names+=("$name")
done <"$prompts"
files=()
for p in $proposers; do
  for t in $temperatures; do
    for name in "${names[@]}"; do
      f="$out/$p-T$t-$name.json"
      echo "=== $p, temperature $t, $name ===" >&2
      g_flag=()
      [[ "$g" != default ]] && g_flag=(-g "$g")
      [[ "$trace" == 1 ]] && g_flag+=(--trace-steps "${f%.json}.trace.jsonl")
      "$gen" --compare --chat --prompt-file "$tmp/$name.jsonl" --proposer "$p" --temperature "$t" "${g_flag[@]}" --json "$f" "$@" >/dev/null
      files+=("$f")
    done
  done
done
python3 - "${files[@]}" <<'EOF'
import json, os, sys
rows = []
for f in sys.argv[1:]:
    d = json.load(open(f))
    s = d["speculative"]
    name = os.path.basename(f)[:-5].split("-", 2)[2]
    rows.append((d["proposer"], d["temperature"], name, s["mean_accepted_length"], s.get("acceptance_rate", 0.0),
                 " ".join(f"{a:.2f}" for a in s.get("per_position_acceptance", [])), s.get("cost_ratio_c", 0.0),
                 s.get("verify_cost_ratio", 1.0),
                 d["speedup"], d.get("outputs_identical")))
print("| proposer | T | prompt | tau | acceptance | by position | c | r | speedup | output == baseline |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    same = ("yes" if r[9] else "NO") if r[1] == 0 else "(sampled)"
    print(f"| {r[0]} | {r[1]:g} | {r[2]} | {r[3]:.2f} | {r[4]:.3f} | {r[5]} | {r[6]:.3f} | {r[7]:.2f} | {r[8]:.2f}x | {same} |")
groups = {}
for r in rows: groups.setdefault((r[0], r[1]), []).append(r)
for (p, t), rs in groups.items():
    n = len(rs)
    print(f"| {p} | {t:g} | **mean** | {sum(r[3] for r in rs)/n:.2f} | {sum(r[4] for r in rs)/n:.3f} | | "
          f"{sum(r[6] for r in rs)/n:.3f} | {sum(r[7] for r in rs)/n:.2f} | {sum(r[8] for r in rs)/n:.2f}x | |")
EOF
