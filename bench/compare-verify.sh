#!/usr/bin/env bash
# Block verification beside token-level verification, on the bundled model with the draft-model proposer: the same
# prompts (the built-in demo set, chat template), temperature, g and seeds in one sitting. Every run also decodes the
# autoregressive baseline in the same process (--compare), so each speedup is a ratio measured side by side; for each
# seed the token-level and block runs follow each other. Every run also reports, for each step, the expected number of
# accepted drafts given the drafted block under both methods (--expected-acceptance: exact conditional expectations on
# the same drafts, so the paired difference is free of the accept draws' noise). Prints one table (per seed and pooled)
# and writes JSON.
#
# Usage: bench/compare-verify.sh [--seeds "1 2 3 4"] [--temperature 1] [-g 5] [--max-new-tokens 128] [-- extra flags]
#   extra flags go to specdec-generate (e.g. -- --threads 2).
# Env: SPECDEC_BUILD_DIR (default: build), OUT (default: out/compare-verify).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${SPECDEC_BUILD_DIR:-$root/build}/bin/specdec-generate"
out="${OUT:-$root/out/compare-verify}"
seeds="1 2 3 4"
temperature=1
g=5
max_new=128
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seeds) seeds="$2"; shift 2 ;;
    --temperature) temperature="$2"; shift 2 ;;
    -g) g="$2"; shift 2 ;;
    --max-new-tokens) max_new="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "compare-verify: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
[[ -x "$bin" ]] || { echo "compare-verify: $bin not built (./scripts/build.sh)" >&2; exit 1; }
[[ -f "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]] || { echo "compare-verify: run ./scripts/setup.sh first" >&2; exit 1; }
mkdir -p "$out"
for seed in $seeds; do
  for method in token block; do
    echo "compare-verify: seed $seed, --verify $method" >&2
    "$bin" --proposer draft --temperature "$temperature" -g "$g" --max-new-tokens "$max_new" --seed "$seed" \
      --verify "$method" --expected-acceptance --compare --json "$out/$method-$seed.json" "${extra[@]}" >"$out/$method-$seed.log" 2>&1 ||
      { echo "compare-verify: run failed, see $out/$method-$seed.log" >&2; exit 1; }
  done
done
python3 - "$out" "$seeds" "$temperature" "$g" "$max_new" <<'PY'
import json, sys
out, seeds, temperature, g, max_new = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4], sys.argv[5]
rows, pooled = [], {}
for seed in seeds:
    for method in ("token", "block"):
        j = json.load(open(f"{out}/{method}-{seed}.json"))
        s = j["speculative"]
        rows.append((seed, method, s["mean_accepted_length"], s["acceptance_rate"], s["tokens_per_second"],
                     j["baseline"]["tokens_per_second"], j["speedup"], s.get("expected_accepted_token", 0.0),
                     s.get("expected_accepted_block", 0.0), s["tokens"], s["target_forwards"], s["expected_steps"]))
        p = pooled.setdefault(method, {"tokens": 0, "forwards": 0, "speedups": [], "steps": 0, "e_token": 0.0,
                                       "e_block": 0.0})
        p["tokens"] += s["tokens"]
        p["forwards"] += s["target_forwards"]
        p["speedups"].append(j["speedup"])
        p["steps"] += s["expected_steps"]
        p["e_token"] += s.get("expected_accepted_token", 0.0) * s["expected_steps"]
        p["e_block"] += s.get("expected_accepted_block", 0.0) * s["expected_steps"]
print(f"block vs token-level verification: draft-model proposer, temperature {temperature}, g = {g}, "
      f"up to {max_new} new tokens per prompt, demo prompts, seeds {' '.join(seeds)}")
print("| seed | verify | tau (tokens / target forward) | acceptance | tokens/s | baseline tokens/s | speedup "
      "| E[accepted drafts], token-level | E[accepted drafts], block |")
print("|---|---|---|---|---|---|---|---|---|")
for seed, method, tau, acc, tps, base, speedup, et, eb, *_ in rows:
    print(f"| {seed} | {method} | {tau:.3f} | {acc:.3f} | {tps:.1f} | {base:.1f} | {speedup:.3f}x | {et:.4f} | {eb:.4f} |")
summary = {}
for method in ("token", "block"):
    p = pooled[method]
    tau = p["tokens"] / p["forwards"] if p["forwards"] else 0.0
    speedup = sum(p["speedups"]) / len(p["speedups"])
    et = p["e_token"] / p["steps"] if p["steps"] else 0.0
    eb = p["e_block"] / p["steps"] if p["steps"] else 0.0
    summary[method] = {"tau": tau, "mean_speedup": speedup, "tokens": p["tokens"], "target_forwards": p["forwards"],
                       "expected_steps": p["steps"], "expected_accepted_token": et, "expected_accepted_block": eb}
    print(f"| all | {method} | **{tau:.3f}** | | | | **{speedup:.3f}x** (mean) | {et:.4f} | {eb:.4f} |")
t, b = summary["token"], summary["block"]
print(f"block / token-level: tau {b['tau'] / t['tau']:.3f}x, speedup {b['mean_speedup'] / t['mean_speedup']:.3f}x "
      f"({t['tokens']} and {b['tokens']} tokens over {t['target_forwards']} and {b['target_forwards']} target forwards)")
steps = t["expected_steps"] + b["expected_steps"]
if steps:
    et = (t["expected_accepted_token"] * t["expected_steps"] + b["expected_accepted_token"] * b["expected_steps"]) / steps
    eb = (t["expected_accepted_block"] * t["expected_steps"] + b["expected_accepted_block"] * b["expected_steps"]) / steps
    print(f"paired, on the same drafted blocks ({steps} steps of both runs): expected accepted drafts per step "
          f"token-level {et:.4f}, block {eb:.4f} ({(eb / et - 1) * 100 if et else 0:+.2f}%); expected tau "
          f"{1 + et:.4f} vs {1 + eb:.4f}")
json.dump({"rows": [dict(zip(("seed", "verify", "tau", "acceptance", "tokens_per_second", "baseline_tokens_per_second",
                              "speedup", "expected_accepted_token", "expected_accepted_block", "tokens",
                              "target_forwards", "expected_steps"), r)) for r in rows], "pooled": summary},
          open(f"{out}/summary.json", "w"), indent=2)
PY
