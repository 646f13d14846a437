#!/usr/bin/env bash
# The libFuzzer target over the BPE tokenizer (arbitrary bytes encoded, arbitrary ids decoded), run for the given number of seconds (default 60) from the seed corpus
# tests/fuzz/corpus_tokenizer. See scripts/fuzz.sh.
#   scripts/fuzz-tokenizer.sh [seconds] [extra libFuzzer flags...]
exec "$(dirname "${BASH_SOURCE[0]}")/fuzz.sh" tokenizer "$@"
