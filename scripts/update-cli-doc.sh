#!/usr/bin/env bash
# Rewrites the --help blocks of docs/cli.md from the built programs (tests/cli's DocsCliHoldsTheProgramsHelp fails when
# they differ).
#   scripts/update-cli-doc.sh [BUILD_DIR]      (default: build)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
for program in specdec-generate specdec-train; do
  [[ -x "$build/bin/$program" ]] || { echo "update-cli-doc: $build/bin/$program is not built" >&2; exit 1; }
done
python3 - "$root/docs/cli.md" "$build/bin" <<'PY'
import subprocess, sys
path, bindir = sys.argv[1], sys.argv[2]
doc = open(path, encoding="utf-8").read()
for program in ("specdec-generate", "specdec-train"):
    text = subprocess.run([f"{bindir}/{program}", "--help"], check=True, capture_output=True, text=True).stdout
    begin, end = f"<!-- BEGIN {program} --help -->\n", f"<!-- END {program} --help -->"
    b, e = doc.find(begin), doc.find(end)
    if b < 0 or e < b:
        sys.exit(f"update-cli-doc: docs/cli.md has no {begin.strip()} ... {end} block")
    doc = doc[: b + len(begin)] + "```text\n" + text + "```\n" + doc[e:]
open(path, "w", encoding="utf-8").write(doc)
print(f"update-cli-doc: wrote {path}")
PY
