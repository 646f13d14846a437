#!/usr/bin/env bash
# Sweeps proposers x g x temperature over the prompt set with `specdec-generate --compare` (one prompt per run, the
# autoregressive baseline and the speculative decoder in the same process), then writes
#   out/sweep/sweep.csv, out/sweep/sweep.json   one row per (proposer, prompt, temperature, g)
#   out/sweep/table.md                          the rows as a Markdown table
#   out/sweep/acceptance.png, speedup.png       acceptance vs g; measured speedup vs g beside the theory for the
#                                               measured a, c and r
# and prints, per point, the measured speedup over the theoretical one (goal: >= 0.95).
#
#   scripts/sweep.sh                    # default: ngram, g in 1 2 4 6 8, T 0 and 1, 64 tokens: 30 runs, ~9 min on a busy 2-core CPU
#   scripts/sweep.sh --full             # g = 1..8, 128 tokens per prompt (ngram: 48 runs, roughly 25 min)
#   scripts/sweep.sh --proposers "ngram draft" --g "2 4" --temperatures 0 --max-new-tokens 96
#
# Proposers: ngram always; draft when models/smollm2-135m-draft/ holds a model, eagle when models/smollm2-135m-eagle/
# holds a head (config.json + model.safetensors). A proposer named with --proposers whose checkpoint is missing, or a
# run that fails, is reported and skipped; the sweep goes on.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() { sed -n '2,16p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

proposers=""
gs="1 2 4 6 8"
temperatures="0 1"
max_new_tokens=64
prompts="$root/examples/prompts/demo.jsonl"
out="$root/out/sweep"
threads=0
seed=0
bin=""
full=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --full) full=1; gs="1 2 3 4 5 6 7 8"; max_new_tokens=128; shift ;;
    --proposers) proposers="$2"; shift 2 ;;
    --g) gs="$2"; shift 2 ;;
    --temperatures) temperatures="$2"; shift 2 ;;
    --max-new-tokens) max_new_tokens="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "sweep.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

if [[ -z "$bin" ]]; then
  build="${SPECDEC_BUILD_DIR:-$root/build}"
  bin="$build/bin/specdec-generate"
  if [[ ! -x "$bin" ]]; then
    echo "sweep.sh: $bin not found; building it" >&2
    SPECDEC_BUILD_DIR="$build" "$root/scripts/build.sh"
  fi
fi
[[ -x "$bin" ]] || { echo "sweep.sh: --bin: '$bin' is not an executable" >&2; exit 2; }
[[ -f "$prompts" ]] || { echo "sweep.sh: --prompts: '$prompts' does not exist" >&2; exit 2; }
command -v python3 >/dev/null || { echo "sweep.sh: python3 is needed to collect the results" >&2; exit 2; }

draft_dir="$root/models/smollm2-135m-draft"
eagle_dir="$root/models/smollm2-135m-eagle"
has_draft() { [[ -d "$draft_dir" && -f "$draft_dir/config.json" ]] && compgen -G "$draft_dir/*.safetensors" >/dev/null; }
has_eagle() { [[ -f "$eagle_dir/config.json" && -f "$eagle_dir/model.safetensors" ]]; }

if [[ -z "$proposers" ]]; then
  proposers="ngram"
  if has_draft; then proposers+=" draft"; else echo "sweep.sh: no draft model in $draft_dir; skipping the draft proposer" >&2; fi
  if has_eagle; then proposers+=" eagle"; else echo "sweep.sh: no EAGLE head in $eagle_dir; skipping the eagle proposer" >&2; fi
else
  keep=""
  for p in $proposers; do
    case "$p" in
      ngram) keep+=" ngram" ;;
      draft) if has_draft; then keep+=" draft"; else echo "sweep.sh: no draft model in $draft_dir; skipping draft" >&2; fi ;;
      eagle) if has_eagle; then keep+=" eagle"; else echo "sweep.sh: no EAGLE head in $eagle_dir; skipping eagle" >&2; fi ;;
      *) echo "sweep.sh: --proposers: expected ngram, draft or eagle, got '$p'" >&2; exit 2 ;;
    esac
  done
  proposers="${keep# }"
fi
[[ -n "$proposers" ]] || { echo "sweep.sh: no proposer left to sweep" >&2; exit 2; }

# One prompt per file: the name field (or prompt-<line>) names it.
rm -rf "$out/runs" "$out/prompts"
mkdir -p "$out/runs" "$out/prompts"
python3 - "$prompts" "$out/prompts" <<'EOF'
import json, re, sys
src, dst = sys.argv[1], sys.argv[2]
n = 0
for i, line in enumerate(open(src, encoding="utf-8"), 1):
    if not line.strip():
        continue
    name = f"prompt-{i}"
    if line.lstrip().startswith("{"):
        name = json.loads(line).get("name", name)
    name = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    n += 1
    with open(f"{dst}/{n:02d}-{name}.jsonl", "w", encoding="utf-8") as f:
        f.write(line if line.endswith("\n") else line + "\n")
EOF

prompt_files=("$out"/prompts/*.jsonl)
runs_total=0
for p in $proposers; do for t in $temperatures; do for g in $gs; do runs_total=$((runs_total + ${#prompt_files[@]})); done; done; done
echo "sweep.sh: proposers [$proposers], g [$gs], temperatures [$temperatures], ${#prompt_files[@]} prompts," \
     "$max_new_tokens tokens each: $runs_total runs of $bin" >&2

start=$(date +%s)
run=0
failed=0
for p in $proposers; do
  for t in $temperatures; do
    for g in $gs; do
      for pf in "${prompt_files[@]}"; do
        name="$(basename "$pf" .jsonl)"
        name="${name#[0-9][0-9]-}"
        run=$((run + 1))
        stem="$out/runs/$p-$name-t$t-g$g"
        if nice -n 5 "$bin" --compare --chat --prompt-file "$pf" --proposer "$p" -g "$g" --temperature "$t" \
             --seed "$seed" --max-new-tokens "$max_new_tokens" --threads "$threads" --json "$stem.json" \
             >"$stem.log" 2>&1; then
          stats="$(python3 - "$stem.json" "$name" <<'EOF'
import json, sys
path, name = sys.argv[1], sys.argv[2]
j = json.load(open(path))
j["prompt_name"] = name
json.dump(j, open(path, "w"), indent=2)
s = j["speculative"]
theory = j.get("theoretical_speedup", 0.0)  # fields appear only when measured (docs/generate.schema.json)
ratio = j["speedup"] / theory if theory else float("nan")
print(f"a {s.get('acceptance_rate', 0.0):.3f}  tau {s['mean_accepted_length']:.2f}  c {s.get('cost_ratio_c', 0.0):.3f}  "
      f"r {s.get('verify_cost_ratio', 1.0):.2f}  speedup {j['speedup']:.2f}x  theory {theory:.2f}x  "
      f"ratio {ratio:.2f}")
EOF
)"
          echo "[$run/$runs_total] $p $name T=$t g=$g ($(( $(date +%s) - start ))s): $stats" >&2
        else
          failed=$((failed + 1))
          rm -f "$stem.json"
          echo "[$run/$runs_total] $p $name T=$t g=$g: FAILED, skipped (see $stem.log): $(tail -1 "$stem.log")" >&2
        fi
      done
    done
  done
done
elapsed=$(( $(date +%s) - start ))

cpu="$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
command_line="scripts/sweep.sh --proposers \"$proposers\" --g \"$gs\" --temperatures \"$temperatures\" --max-new-tokens $max_new_tokens"
python3 "$root/bench/sweep/collect.py" --runs "$out/runs" --out "$out" --seconds "$elapsed" \
  --machine "$(nproc)-core CPU ($cpu)" --command "$command_line"
if command -v gnuplot >/dev/null; then
  (cd "$out" && gnuplot plot.gp) && echo "sweep.sh: wrote $out/acceptance.png and $out/speedup.png" >&2
else
  echo "sweep.sh: gnuplot not found; no plots (install gnuplot-nox)" >&2
fi
echo "sweep.sh: $run runs ($failed failed) in ${elapsed}s; results in $out" >&2
