#!/usr/bin/env bash
# Sets up (Debian packages, the bundled SmolLM2-135M-Instruct model), builds, and runs the main job:
# specdec-generate --compare on the built-in prompt set (a summarisation, a code-editing and a chat prompt),
# the autoregressive baseline and the speculative decoder in one process. Extra arguments go to specdec-generate.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh"
"$root/scripts/build.sh"
mkdir -p "$root/out"
exec "$root/build/bin/specdec-generate" --compare --json "$root/out/demo.json" "$@"
