#!/usr/bin/env bash
# The libFuzzer target over the safetensors header parser, run for the given number of seconds (default 60) from the seed corpus
# tests/fuzz/corpus_safetensors. See scripts/fuzz.sh.
#   scripts/fuzz-safetensors.sh [seconds] [extra libFuzzer flags...]
exec "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" safetensors "$@"
